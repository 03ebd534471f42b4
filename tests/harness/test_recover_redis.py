"""``prefixbench recover`` on the server engines: a private redis-server (or cluster) in
the work dir, built, persisted, stopped, then restarted for every recovery; the reload
is its own phase and part of load, and nothing is left running or stored afterwards."""
from __future__ import annotations

import os

import pyperf
import pytest

from prefixbench.harness import recovery, servers
from prefixbench.harness.recovery import RecoverSpec, run_recover

from redis_support import need_redis


@pytest.fixture(autouse=True)
def _redis():
    need_redis()


def _running_in(work_dir) -> list[servers.Server]:
    """Servers whose state file lies under ``work_dir`` and that still run."""
    found = []
    for root, _dirs, files in os.walk(work_dir):
        if servers.STATE_FILE in files:
            s = servers.load_server(root)
            if s is not None and any(s.alive()):
                found.append(s)
    return found


@pytest.mark.parametrize("strategy,engine", [("redis-blockhash", None),
                                             ("ssd-blockhash", "redis")])
def test_recover_restarts_a_private_server(tmp_path, run_cli, monkeypatch, strategy, engine):
    # a temporary work dir of recover's own, placed under tmp_path so the test sees it
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    out = tmp_path / "rec.json"
    args = ["-q", "recover", "-s", strategy, "-n", "3000", "--repeat", "2", "-o", out]
    if engine:
        args += ["-e", engine]
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    assert f"{strategy} / redis" in stdout and "(equal)" in stdout
    times = pyperf.BenchmarkSuite.load(str(out))
    reload = times.get_benchmark("recovery-server-reload").get_values()
    load = times.get_benchmark("recovery-load").get_values()
    total = times.get_benchmark("recovery-total").get_values()
    assert len(reload) == 2
    # the reload is part of load and of the first served match, repeat by repeat
    assert all(lo >= r for lo, r in zip(load, reload))
    assert all(t >= r for t, r in zip(total, reload))
    md = times.get_benchmarks()[0].get_metadata()
    assert md["engine"] == "redis" and "AOF reload" in md["server_reload"]
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "rec.counts.json"))
    assert counts.get_benchmark("server-data-bytes").get_values()[0] > 0
    # the temporary work dir (the server's data with it) is gone, no server runs
    assert not [p for p in os.listdir(tmp_path) if p.startswith("prefixbench-recover-")]


def test_redis_blockhash_rebuilds_from_the_reloaded_server(tmp_path):
    """Every recovery scans the whole reloaded store: the table comes back entry for entry."""
    spec = RecoverSpec(strategy="redis-blockhash", engine="redis", entries=6000,
                       work_dir=str(tmp_path / "w"))
    result = run_recover(spec)
    rec = result["recovered"]
    assert rec["same_answers"] and rec["first_ok"]
    assert rec["recovery"]["entries_rebuilt"] == rec["stats_after"]["entries"]
    assert rec["stats_after"]["entries"] == result["reference"]["stats_before"]["entries"]
    assert rec["server_reload_s"] > 0
    # a user's --work-dir keeps the stopped server's data, and nothing runs
    server = servers.load_server(str(tmp_path / "w" / "server"))
    assert server is not None and not any(server.alive())
    assert os.listdir(server.nodes[0].data_dir)
    assert not _running_in(tmp_path)


def test_recover_without_aof_reloads_the_rdb(tmp_path):
    spec = RecoverSpec(strategy="ssd-blockhash", engine="redis", entries=3000,
                       durability="off", work_dir=str(tmp_path / "w"))
    result = run_recover(spec)
    assert result["recovered"]["same_answers"]
    data = servers.load_server(str(tmp_path / "w" / "server")).nodes[0].data_dir
    assert os.path.exists(os.path.join(data, "dump.rdb"))
    assert not os.path.exists(os.path.join(data, "appendonlydir"))
    times, _counts = recovery.recover_benchmarks(spec, result["reference"], result["runs"])
    md = times[0].get_metadata()
    assert "RDB reload" in md["server_reload"]


def test_recover_on_a_cluster(tmp_path):
    spec = RecoverSpec(strategy="redis-blockhash", engine="redis-cluster", entries=3000,
                       work_dir=str(tmp_path / "w"))
    result = run_recover(spec)
    rec = result["recovered"]
    assert rec["same_answers"] and rec["server_reload_s"] > 0
    server = servers.load_server(str(tmp_path / "w" / "server"))
    assert len(server.nodes) == 3 and not any(server.alive())


def test_recover_refuses_a_url_it_cannot_restart(tmp_path, run_cli):
    code, _out, err = run_cli("recover", "-s", "ssd-blockhash", "-e", "redis", "-n", "1000",
                              "--engine-option", "url=redis://:secret@127.0.0.1:6390/0",
                              "--work-dir", tmp_path / "w")
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1, err
    assert "url=redis://:***@127.0.0.1:6390/0" in lines[0] and "secret" not in lines[0]
    assert not (tmp_path / "w").exists()
