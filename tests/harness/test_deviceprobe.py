"""The device probe: what 4 KiB random direct reads give each thread count, as the
context line under a sweep's thread table.  Behaviour only, never timings."""
import json
import os

import pytest

from prefixbench.harness import deviceprobe, sweeps
from prefixbench.reports.show import device_line

SMALL = dict(file_bytes=4 << 20, seconds=0.02)


def test_measures_every_count_every_round_and_leaves_nothing(tmp_path):
    steps = []
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), rounds=2, on_step=lambda: steps.append(1),
                                 **SMALL)
    assert os.listdir(tmp_path) == []
    if r.skipped:                            # a file system without O_DIRECT
        assert "O_DIRECT" in r.skipped and r.rounds == []
        return
    assert len(steps) == 4 and len(r.rounds) == 2
    assert all(len(row) == 2 and min(row) > 0 for row in r.rounds)
    med, lo, hi = r.scaling(2)
    assert lo <= med <= hi
    assert r.rate(1) > 0
    md = r.metadata()
    assert md["threads"] == [1, 2] and md["block_bytes"] == 4096 and md["rounds"] == r.rounds


def test_scaling_is_taken_within_each_round():
    r = deviceprobe.DeviceScaling("/d", (1, 2), 1 << 20, 1.0,
                                  rounds=[[100.0, 150.0], [200.0, 400.0], [100.0, 170.0]])
    assert r.scaling(2) == (1.7, 1.5, 2.0)
    assert r.rate(1) == 100.0 and r.rate(2) == 170.0


def test_too_little_disk_skips_without_writing(tmp_path, monkeypatch):
    class Usage:
        free = 1 << 20
    monkeypatch.setattr(deviceprobe.shutil, "disk_usage", lambda d: Usage)
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert r.rounds == [] and str(tmp_path) in r.skipped and "GiB" in r.skipped
    assert os.listdir(tmp_path) == []


def test_a_file_system_refusing_o_direct_is_skipped(tmp_path, monkeypatch):
    real = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real(path, flags, *a)
    monkeypatch.setattr(deviceprobe.os, "open", no_direct)
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert "refuses O_DIRECT" in r.skipped and r.rounds == []
    assert os.listdir(tmp_path) == []


def test_failing_reads_skip_the_figure_and_remove_the_file(tmp_path, monkeypatch):
    def eio(*a):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(deviceprobe.os, "preadv", eio)
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert "Input/output error" in r.skipped and r.rounds == []
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kw", [dict(file_bytes=1000), dict(seconds=0), dict(rounds=0)])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(ValueError):
        deviceprobe.probe_device(str(tmp_path), (1, 2), **{**SMALL, **kw})
    with pytest.raises(ValueError):
        deviceprobe.probe_device(str(tmp_path), (0, 2), **SMALL)


def test_the_line_from_the_metadata():
    md = {"directory": "/data", "block_bytes": 4096, "threads": [1, 2], "file_bytes": 1 << 30,
          "seconds": 1.0, "rounds": [[100.0, 150.0], [200.0, 400.0], [100.0, 170.0]]}
    line = device_line(json.dumps(md))
    assert "4 KiB random O_DIRECT reads in /data, 3 rounds of 1 s" in line
    assert "100 reads/s at 1 thread, 170 at 2 (1.70x, 1.50-2.00x)" in line
    assert device_line(json.dumps({"directory": "/d", "skipped": "no room"})) == \
        "device alone: not measured (no room)."
    assert device_line(None) == ""
    assert "unreadable" in device_line("{not json")


def _cfg(**kw):
    return sweeps.make_config("strategies", workload="codeact", workload_options={
        "sessions": "8"}, engine="memory", strategies="ssd-blockhash", **kw)


def test_a_sweep_probes_only_with_several_thread_counts_and_direct_io():
    assert _cfg(threads="1,2", direct_io=True).probes_device
    assert not _cfg(threads="1,2").probes_device
    assert not _cfg(direct_io=True).probes_device
    assert not _cfg(threads="1,2", direct_io=True, device_probe=False).probes_device


def test_the_sweep_stores_the_probe_and_prints_its_line(monkeypatch):
    seen = {}

    def fake(directory, threads, on_step=None):
        seen["threads"] = threads
        for _ in range(len(threads) * deviceprobe.DEFAULT_ROUNDS):
            on_step()
        return deviceprobe.DeviceScaling("/tmp", tuple(threads), 1 << 30, 1.0,
                                         rounds=[[10.0, 16.0]] * 3)
    monkeypatch.setattr(deviceprobe, "probe_device", fake)
    res = sweeps.run_sweep(_cfg(threads="1,2", direct_io=True))
    assert seen["threads"] == (1, 2)
    assert "10 reads/s at 1 thread, 16 at 2 (1.60x, 1.60-1.60x)" in res.table()
    times, counts = res.suites()
    md = times[0].get_metadata()
    assert json.loads(md["device_probe"])["rounds"] == [[10.0, 16.0]] * 3
    assert json.loads(md["config"])["device_probe"] is True
    # without direct I/O nothing is probed
    res = sweeps.run_sweep(_cfg(threads="1,2"))
    assert "device alone" not in res.table()
    assert "device_probe" not in res.suites()[0][0].get_metadata()


def _fake_probe(monkeypatch, seen):
    def fake(directory, threads, on_step=None):
        seen.append(tuple(threads))
        return deviceprobe.DeviceScaling("/tmp", tuple(threads), 1 << 30, 1.0,
                                         rounds=[[10.0, 16.0]] * 3)
    monkeypatch.setattr(deviceprobe, "probe_device", fake)


def test_scale_prints_and_stores_the_probe_with_direct_io(run_cli, tmp_path, monkeypatch):
    seen = []
    _fake_probe(monkeypatch, seen)
    out_json = tmp_path / "scale.json"
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-w", "codeact",
                             "-W", "sessions=8", "-e", "rocksdb", "--direct-io",
                             "--threads", "1,2", "-o", str(out_json))
    assert code == 0, err
    assert seen == [(1, 2)]
    assert "10 reads/s at 1 thread, 16 at 2 (1.60x, 1.60-1.60x)" in out
    suite = json.loads(out_json.read_text())
    md = suite["metadata"] if "device_probe" in suite.get("metadata", {}) else \
        suite["benchmarks"][0]["metadata"]
    assert json.loads(md["device_probe"])["threads"] == [1, 2]


@pytest.mark.parametrize("args", [[], ["--direct-io", "--no-device-probe"]])
def test_scale_without_direct_io_or_with_no_device_probe_does_not_probe(run_cli, monkeypatch,
                                                                       args):
    seen = []
    _fake_probe(monkeypatch, seen)
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-w", "codeact",
                             "-W", "sessions=8", "-e", "rocksdb", *args, "--threads", "1,2")
    assert code == 0, err
    assert seen == [] and "device alone" not in out
