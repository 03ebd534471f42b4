"""Request threads: partitioned sessions, the post-hoc false-hit check, scale."""
import numpy as np
import pytest

from prefixbench.harness.replay import replay
from prefixbench.plugins.blockhash import DramBlockHashStrategy as DramBlockHash
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.plugins.strategy import Match
from prefixbench.workloads.synthetic import make_synthetic

from test_cli import _one_line_error


def _workload():
    return make_synthetic("ultrachat", sessions=40)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threaded_replay_has_no_false_hits(threads):
    res = replay(DramBlockHash(), _workload(), threads=threads, threaded=True)
    assert res.requests == len(_workload()) and res.threads == threads
    assert res.false_hits == 0 and res.hit_tokens > 0
    assert res.throughput > 0 and res.timed_wall_seconds > 0


def test_request_threads_count_only_their_matches_reads():
    """Store reads per match at request threads are the matches' own, not the inserts'
    that other threads (or the same one) ran meanwhile: on the request-thread path a
    single thread counts what the plain replay counts, two threads count less than
    the store's total, which the inserts' reads make larger."""
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.plugins.blockhash import SsdBlockHashStrategy

    def ssd():   # inserts that read every block again: their reads are many
        return SsdBlockHashStrategy(MemoryStore(), {"insert_reuse": False})
    plain = replay(ssd(), _workload())
    one = replay(ssd(), _workload(), threads=1, threaded=True)
    assert plain.store_reads_in_match > 0
    assert one.store_reads_in_match == plain.store_reads_in_match
    s = ssd()
    two = replay(s, _workload(), threads=2)
    assert 0 < two.store_reads_in_match < s.store.stats().reads
    assert two.store_reads_in_match == pytest.approx(
        s.stats()["store_reads_per_match"] * s.stats()["matches"])
    assert s.store.thread_reads() == 0         # counting stops with the replay


def test_store_counts_each_threads_reads_apart():
    import threading
    from prefixbench.engines.memory import MemoryStore
    st = MemoryStore()
    st.put_many((k, b"v") for k in range(10))
    st.get(1)
    assert st.thread_reads() == 0              # off by default
    st.count_reads_per_thread()
    st.get_many([1, 2, 3])
    other = threading.Thread(target=lambda: st.get_many(list(range(7))))
    other.start()
    other.join()
    assert st.thread_reads() == 3 and st.stats().reads == 11
    st.count_reads_per_thread(False)
    assert st.thread_reads() == 0


class _OverReaching(RadixStrategy):
    """Returns one block more than it has whenever it can: a false hit."""

    def match(self, block_ids):
        m = super().match(block_ids)
        if 0 < m.n_blocks < len(block_ids):
            metas = np.vstack([m.metas, np.zeros((1, self.meta_size), np.uint8)])
            return Match(m.n_blocks + 1, metas)
        return m


def test_threaded_check_catches_false_hits():
    res = replay(_OverReaching(), _workload(), threads=2)
    assert res.false_hits > 0


@pytest.mark.compiled   # names the compiled parts that run without the GIL
def test_scale_command(run_cli):
    code, out, err = run_cli("--quiet", "scale", "-s", "radix", "-w", "ultrachat",
                             "-W", "sessions=20", "--threads", "1,2")
    assert code == 0, err
    lines = out.splitlines()
    rows = [ln.split() for ln in lines[2:4]]
    assert [r[0] for r in rows] == ["1", "2"] and rows[0][2] == "1.00x"
    assert all(r[-1] == "0" for r in rows)
    gil = [ln for ln in lines if "thr: strategy:" in ln]
    assert len(gil) == 2 and all("tree walk (match)" in ln and "no store" in ln for ln in gil)


@pytest.mark.parametrize("probe,single,batch", [("sequential", "held", None),
                                                ("batch", None, "free")])
def test_scale_says_which_store_calls_ran_without_the_gil(run_cli, tmp_path, probe, single,
                                                         batch):
    """rocksdict releases the GIL only in batch gets: the per-run line counts the
    calls of each kind from the run's store statistics and marks them (inserts
    probe in one batch get here, insert_reuse=false)."""
    import pyperf

    out_json = tmp_path / "scale.json"
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-e", "rocksdb",
                             "-S", f"probe={probe}", "-S", "insert_reuse=false",
                             "-w", "ultrachat", "-W", "sessions=10",
                             "--threads", "1,2", "-o", str(out_json))
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if "thr: strategy:" in ln]
    assert len(lines) == 2
    for ln in lines:
        assert "strategy: nothing" in ln and "store rocksdb:" in ln
        assert "write batches (held)" in ln
        if single:
            assert f"single gets ({single})" in ln and " 0 batch gets" not in ln
        if batch:
            assert f"batch gets ({batch})" in ln and " 0 single gets" in ln
            pct = int(ln.split("store rocksdb: ")[1].split("%")[0])
            assert pct >= 50           # every read is a batch get; only writes hold it
    md = pyperf.BenchmarkSuite.load(str(out_json)).get_benchmarks()[0].get_metadata()
    assert md["gil_free"] in lines[0]


@pytest.mark.parametrize("cmd,value", [("run", "0"), ("run", "1000"), ("scale", "1,0"),
                                       ("scale", "two")])
def test_bad_thread_counts(run_cli, cmd, value):
    code, _, err = run_cli(cmd, "-s", "radix", "-w", "ultrachat", "-W", "sessions=5",
                           "--threads", value, *(["--no-runner"] if cmd == "run" else []))
    _one_line_error(code, err, "--threads")
