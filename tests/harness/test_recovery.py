"""``prefixbench recover`` (fresh-process recovery benchmark) and ``prefixbench crashtest``."""
import json

import pyperf
import pytest

from prefixbench.harness.crashtest import CrashSpec, run_crashtest
from prefixbench.errors import ConfigError
from prefixbench.harness.recovery import parse_count


def test_parse_count():
    assert parse_count("--entries", "1e7") == 10_000_000
    assert parse_count("--entries", "10M") == 10_000_000
    assert parse_count("--entries", "2500") == 2500
    with pytest.raises(ConfigError, match="--entries"):
        parse_count("--entries", "lots")


@pytest.mark.parametrize("strategy,engine", [("sarp", "lmdb"), ("dram-blockhash", None),
                                             ("segment-radix", "rocksdb")])
def test_recover_command_writes_pyperf_suites(tmp_path, run_cli, strategy, engine):
    out = tmp_path / "rec.json"
    args = ["-q", "recover", "-s", strategy, "-n", "3e4", "-o", out]
    if engine:
        args += ["-e", engine]
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    assert "(equal)" in stdout and "load / init / deserialize / rebuild" in stdout
    times = pyperf.BenchmarkSuite.load(str(out))
    names = set(times.get_benchmark_names())
    assert {"recovery-total", "recovery-process-start-to-first-match"} <= names
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "rec.counts.json"))
    assert {"snapshot-bytes", "peak-rss", "unique-block-entries"} <= set(
        counts.get_benchmark_names())
    md = times.get_benchmarks()[0].get_metadata()
    assert md["strategy"] == strategy and md["recovery_source"] == "snapshot"


def test_recover_repeat_recovers_the_one_build_k_times(tmp_path, run_cli):
    out = tmp_path / "rec.json"
    code, stdout, err = run_cli("-q", "recover", "-s", "dram-blockhash", "-n", "2e4",
                                "--repeat", "3", "-o", out)
    assert code == 0, err
    assert "recoveries (median shown)" in stdout and "index recovery" in stdout
    times = pyperf.BenchmarkSuite.load(str(out))
    for name in ("recovery-total", "recovery-index", "recovery-load"):
        assert len(times.get_benchmark(name).get_values()) == 3, name
    assert times.get_benchmarks()[0].get_metadata()["recoveries"] == 3
    code, _out, err = run_cli("recover", "-s", "radix", "-n", "1000", "--repeat", "0")
    assert code != 0 and "--repeat" in err and len(err.strip().splitlines()) == 1


def test_recover_needs_an_engine_for_store_strategies(run_cli):
    code, _out, err = run_cli("recover", "-s", "sarp", "-n", "1000")
    assert code != 0 and "--engine" in err and len(err.strip().splitlines()) == 1


def test_crashtest_refuses_a_volatile_engine():
    with pytest.raises(ConfigError, match="volatile"):
        run_crashtest(CrashSpec(strategies=["sarp"], engines=["memory"], iterations=1))


def test_crashtest_loses_nothing_on_two_engines():
    spec = CrashSpec(strategies=["sarp", "dram-blockhash"], engines=["lmdb", "rocksdb"],
                     iterations=2, seed=100, snapshot_every=25, max_kill_ms=700)
    rows = run_crashtest(spec)
    assert len(rows) == 4
    for r in rows:
        assert r["iterations"] == 2
        assert r["lost"] == 0 and r["false"] == 0 and r["recovery_failures"] == 0, r
        assert r["failures"] == 0
    assert sum(r["acked"] for r in rows) > 0


def test_crashtest_checker_reports_lost_inserts(tmp_path):
    """The checker is not vacuous: acknowledgements the store never saw count as lost."""
    import subprocess
    from prefixbench.harness.crashtest import _py
    cfg = {"strategy": "sarp", "engine": "lmdb", "seed": 5,
           "strategy_options": {"max_retrieval": 0}, "workload": "codeact",
           "workload_options": {}, "offset": 0, "store_dir": str(tmp_path / "store"),
           "snapshot_dir": str(tmp_path / "snap"), "ack_log": str(tmp_path / "acks"),
           "snapshot_every": 0, "durability": "sync"}
    (tmp_path / "acks").write_text("".join(f"{i}\n" for i in range(10)) + "1")
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    out, _err = _py("_verify_main", str(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True).communicate()
    res = json.loads(out.strip().splitlines()[-1])
    assert res["acked"] == 10 and res["lost"] == 10 and res["error"] is None


def test_sarp_python_directory_round_trip(tmp_path):
    import numpy as np
    from prefixbench.engines.base import StoreConfig
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.metas import make_metas
    from prefixbench.plugins.sarp import SarpStrategy
    store = MemoryStore(StoreConfig())
    opts = {"S": 16, "directory": "python", "backfill": "sync", "tau": 3}
    s = SarpStrategy(store, opts)
    rng = np.random.default_rng(0)
    base = rng.integers(1, 1 << 63, size=40, dtype=np.uint64)
    seqs = [np.concatenate([base[:int(rng.integers(0, 40))],
                            rng.integers(1, 1 << 63, size=20, dtype=np.uint64)])
            for _ in range(30)]
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
    before = [s.match(q).n_blocks for q in seqs]
    s.snapshot(tmp_path)
    r = SarpStrategy.recover(store, tmp_path, opts)
    assert [r.match(q).n_blocks for q in seqs] == before
    def content(d):          # entry order follows the slot table: compare as sets
        entries = sorted(zip(*(d[k].tolist() for k in ("keys", "offs", "visible",
                                                          "next_state", "refine_state",
                                                          "sizes"))))
        return entries, sorted(zip(d["keys"][d["entry"]].tolist(), d["filters"].tolist(),
                                   d["segs"].tolist()))
    assert content(r.dir.dump()) == content(s.dir.dump())


# ----------------------------------------------------------------------------- the driver
def _seqs(n=30):
    from prefixbench.plugins.conformance import branching_sequences
    return branching_sequences(7, n)


def test_recover_notes_go_to_the_callback_not_stderr(tmp_path, capsys):
    """A corrupt newest snapshot: recovery falls back to the previous one and says so
    through ``notify`` (one line), printing nothing itself; without a callback the
    contract's default writes that line to stderr."""
    from prefixbench.metas import make_metas
    from prefixbench.plugins.radix import RadixStrategy
    from prefixbench.snapshot import snapshot_path
    s = RadixStrategy()
    s.enable_log(tmp_path)
    for i, q in enumerate(_seqs()):
        s.insert(q, make_metas(q, i))
        if i in (9, 19):
            s.snapshot(tmp_path)
    path = snapshot_path(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    notes = []
    r = RadixStrategy.recover(None, tmp_path, durable_log=False, notify=notes.append)
    assert r.recovery["source"] == "previous-snapshot" and r.recovery["log_replayed"] == 20
    assert len(notes) == 1 and "previous snapshot" in notes[0] and "\n" not in notes[0]
    assert capsys.readouterr().err == ""
    RadixStrategy.recover(None, tmp_path, durable_log=False)
    err = capsys.readouterr().err
    assert err.startswith("prefixbench: ") and "previous snapshot" in err
    RadixStrategy.recover(None, tmp_path, durable_log=False, quiet=True)
    assert capsys.readouterr().err == ""


def test_durable_mode_leaves_the_instance_alone_and_logs_each_insert_once(tmp_path):
    """enable_log attaches a log, it does not replace ``insert`` on the instance; a
    subclass whose insert calls ``super().insert`` still logs one record per insert;
    strategies whose store is their durability run their own insert unwrapped."""
    from prefixbench.metas import make_metas
    from prefixbench.plugins.blockhash import SsdBlockHashStrategy
    from prefixbench.plugins.radix import RadixStrategy
    from prefixbench.snapshot import read_log

    class Counting(RadixStrategy):
        calls = 0

        def insert(self, block_ids, metas):
            type(self).calls += 1
            super().insert(block_ids, metas)

    s = Counting()
    assert s.enable_log(tmp_path) is True and "insert" not in vars(s)
    seqs = _seqs(5)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
    s.close()
    assert Counting.calls == 5
    assert [seq for seq, *_ in read_log(tmp_path, 16)] == [1, 2, 3, 4, 5]
    assert not hasattr(SsdBlockHashStrategy.insert, "__wrapped__")
    assert SsdBlockHashStrategy(_memory_store()).enable_log(tmp_path) is False


def _memory_store():
    from prefixbench.engines.base import StoreConfig
    from prefixbench.engines.memory import MemoryStore
    return MemoryStore(StoreConfig())
