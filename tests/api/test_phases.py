"""Where the time goes: phase clocks, engine and strategy instrumentation, the
breakdown replay, its pyperf export and its table.  Invariants only, never timing."""
import threading
import time

import numpy as np
import pyperf
import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.memory import MemoryStore
from prefixbench import phases
from prefixbench.harness import pyperf_io
from prefixbench.harness.build import build
from prefixbench.harness.replay import ReplayResult, replay
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.reports.breakdown import format_breakdown
from prefixbench.workloads.synthetic import make_synthetic


@pytest.fixture(autouse=True)
def clocks_off():
    """Every test starts and ends with the clocks off and this thread's clock empty."""
    phases.enable(False)
    phases.reset()
    yield
    phases.enable(False)
    phases.reset()


@pytest.fixture
def fake_clock(monkeypatch):
    """A clock the test advances by hand: ``tick(ns)``."""
    now = [0]
    monkeypatch.setattr(phases, "_now", lambda: now[0])

    def tick(ns):
        now[0] += ns
    return tick


def _workload(sessions=12):
    return make_synthetic("codeact", sessions=sessions)


# ----------------------------------------------------------------------------- the clock
def test_nested_phases_are_counted_once(fake_clock):
    phases.enable()
    phases.enter(phases.ROUTING)
    fake_clock(10)
    phases.enter_storage()                 # an engine call while routing
    fake_clock(20)
    phases.leave()
    fake_clock(5)
    with phases.phase(phases.VERIFY):
        fake_clock(7)
    fake_clock(3)
    phases.leave()
    assert phases.totals() == {"routing": 18, "storage": 20, "verify": 7}
    assert sum(phases.totals().values()) == 45          # the wall time, nothing twice
    assert phases.switches() == 3


def test_engine_calls_keep_a_storage_kind(fake_clock):
    phases.enable()
    for kind in (phases.SPILL, phases.FALLBACK):
        phases.enter(kind)
        fake_clock(1)
        phases.enter_storage()
        fake_clock(4)
        phases.leave()
        assert phases.storage_call(lambda: fake_clock(6)) is None   # no switch needed
        phases.leave()
    assert phases.totals() == {"spill": 11, "fallback": 11}
    assert phases.switches() == 4


def test_storage_call_times_the_call_and_survives_errors(fake_clock):
    phases.enable()
    phases.enter(phases.ROUTING)
    fake_clock(2)

    def boom():
        fake_clock(9)
        raise KeyError("x")
    with pytest.raises(KeyError):
        phases.storage_call(boom)
    fake_clock(1)
    phases.leave()
    assert phases.totals() == {"routing": 3, "storage": 9}
    assert phases.switches() == 2


def test_disabled_clock_records_nothing():
    store = MemoryStore(StoreConfig())
    store.put(1, b"x")
    phases.enter(phases.ROUTING)
    phases.enter_storage()
    store.get(1)
    store.get_many([1, 2])
    list(store.scan())
    phases.leave()
    phases.leave()
    RadixStrategy().match(np.array([1, 2], dtype=np.uint64))
    assert phases.totals() == {} and phases.switches() == 0


def test_leave_without_a_phase_and_reset():
    phases.enable()
    phases.leave()                          # nothing open: a no-op
    phases.enter("x")
    phases.reset()
    phases.leave()
    assert phases.totals() == {} and phases.switches() == 0


def test_clocks_are_per_thread(fake_clock):
    phases.enable()
    phases.enter(phases.ROUTING)
    seen = {}

    def other():
        phases.enter(phases.VERIFY)
        fake_clock(5)
        phases.leave()
        seen.update(phases.totals())
    t = threading.Thread(target=other)
    t.start()
    t.join()
    phases.leave()
    assert seen == {"verify": 5}
    assert phases.totals() == {"routing": 5}


def test_calibrate_measures_a_pair_and_restores_the_switch():
    assert phases.calibrate(pairs=50, rounds=3) > 0
    assert not phases.enabled()
    phases.enable()
    phases.enter("x")
    phases.calibrate(pairs=10, rounds=1)
    assert phases.enabled() and phases.totals() == {} and phases.switches() == 0


def test_calibrate_rejects_empty_loops():
    with pytest.raises(ValueError, match="pairs=0"):
        phases.calibrate(pairs=0)


def test_ordered():
    assert phases.ordered({"rest", "zeta", "lock", "storage", "alpha", "routing"}) == \
        ["storage", "routing", "lock", "alpha", "zeta", "rest"]


# ----------------------------------------------------------------------------- TimedLock
class _ContendedLock:
    """A lock whose try-acquire always fails and which says when a blocking
    acquire starts (so a test knows the waiter is waiting)."""

    def __init__(self):
        self.inner = threading.Lock()
        self.waiting = threading.Event()

    def acquire(self, blocking=True, timeout=-1):
        if not blocking:
            return False
        self.waiting.set()
        return self.inner.acquire(True, timeout)

    def release(self):
        self.inner.release()


def test_timed_lock_counts_waits_as_lock():
    raw = _ContendedLock()
    lock = phases.TimedLock(raw)
    raw.inner.acquire()                     # someone else holds it
    phases.enable()
    out = {}

    def waiter():
        phases.reset()
        phases.enter(phases.ROUTING)
        with lock:
            pass
        phases.leave()
        out["totals"], out["switches"] = phases.totals(), phases.switches()
    t = threading.Thread(target=waiter)
    t.start()
    assert raw.waiting.wait(10)
    raw.inner.release()
    t.join(10)
    assert out["totals"]["lock"] > 0 and out["switches"] == 2


def test_timed_lock_records_nothing_without_a_wait_or_when_off():
    lock = phases.TimedLock()
    with lock:                              # off
        pass
    phases.enable()
    with lock:                              # on, uncontended
        pass
    assert lock.acquire(blocking=False)
    lock.release()
    assert phases.totals() == {} and phases.switches() == 0
    contended = phases.TimedLock(_ContendedLock())
    phases.enable(False)
    with contended:
        pass
    assert phases.totals() == {}


def test_timed_lock_guard_is_the_plain_lock_when_off_and_times_waits_when_on():
    raw = threading.Lock()
    lock = phases.TimedLock(raw)
    assert lock.guard() is raw              # off: the plain lock's own context manager
    with lock.guard():
        assert raw.locked()
    assert not raw.locked() and phases.totals() == {}
    contended = phases.TimedLock(_ContendedLock())
    phases.enable()
    assert contended.guard() is contended
    with contended.guard():                 # on, contended: the wait is timed as lock
        pass
    assert "lock" in phases.totals() and phases.switches() == 1


# ----------------------------------------------------------------------------- engines
def test_engine_calls_time_themselves(fake_clock):
    store = MemoryStore(StoreConfig())
    phases.enable()
    phases.enter(phases.ROUTING)
    store.put(1, b"a")
    store.get(1)
    store.get_many([1, 2])
    store.get_many([])                      # no keys: no engine call
    assert [k for k, _ in store.scan()] == [1]
    store.sync()
    phases.leave()
    assert phases.switches() == 1 + 4 + 2   # routing; put, get, get_many, sync; 2 scan fetches
    assert set(phases.totals()) <= {"routing", "storage"}


# ----------------------------------------------------------------------------- replay
def _check_breakdown(res: ReplayResult):
    assert res.breakdown and list(res.phase_ns)[-1] == phases.REST
    assert list(res.phase_ns) == phases.ordered(res.phase_ns)
    claimed = [np.zeros(res.requests, np.int64), np.zeros(res.requests, np.int64)]
    for name, (m, i) in res.phase_ns.items():
        assert len(m) == len(i) == res.requests
        assert (m >= 0).all() and (i >= 0).all()
        if name != phases.REST:
            claimed[0] += m
            claimed[1] += i
    assert (claimed[0] <= res.match_ns).all() and (claimed[1] <= res.insert_ns).all()
    rest_m, rest_i = res.phase_ns[phases.REST]
    assert (claimed[0] + rest_m == res.match_ns).all()
    assert (claimed[1] + rest_i == res.insert_ns).all()
    assert len(res.phase_switches[0]) == res.requests
    assert res.breakdown_pair_ns > 0 and res.breakdown_overhead >= 0
    assert not phases.enabled()


@pytest.mark.parametrize("strategy,engine", [
    ("ssd-blockhash", "lmdb"), ("segment-hash", "lmdb"), ("dram-blockhash", None),
    ("radix", None), ("sarp", "memory"), ("segment-radix-capped", "memory")])
def test_replay_breakdown_invariants(strategy, engine):
    w = _workload()
    # sarp's background back-fill would make hit rates differ from run to run
    opts = {"backfill": "sync"} if strategy == "sarp" else {}
    built = build(strategy, engine, strategy_options=opts)
    try:
        res = replay(built.strategy, w, limit=60, breakdown=True)
    finally:
        built.close()
    _check_breakdown(res)
    assert res.false_hits == 0
    if engine is not None:
        assert res.phase_mean("match", phases.STORAGE) > 0
    if strategy in ("radix", "dram-blockhash"):
        assert phases.STORAGE not in res.phase_ns
        assert res.phase_mean("match", phases.ROUTING) > 0
    built = build(strategy, engine, strategy_options=opts)
    try:
        plain = replay(built.strategy, w, limit=60)
    finally:
        built.close()
    assert not plain.breakdown and plain.hit_tokens == res.hit_tokens


def test_ssd_blockhash_on_lmdb_spends_match_time_in_storage():
    built = build("ssd-blockhash", "lmdb")
    try:
        res = replay(built.strategy, _workload(), limit=40, breakdown=True)
    finally:
        built.close()
    storage_m, storage_i = res.phase_ns[phases.STORAGE]
    assert storage_m.sum() > 0 and storage_i.sum() > 0
    assert res.phase_mean("match", phases.ROUTING) > 0
    # the sequential probe is one storage phase, not a switch per probed block
    assert res.reads_per_match > 3
    assert (res.phase_switches[0] <= 3).all() and (res.phase_switches[0] >= 2).all()


def test_segment_hash_fallback_reads_show_as_fallback():
    built = build("segment-hash", "memory")
    try:
        res = replay(built.strategy, _workload(), limit=80, breakdown=True)
    finally:
        built.close()
    fallback = res.strategy_stats["fallback_reads_per_match"] > 0
    assert fallback == (res.phase_mean("match", phases.FALLBACK) > 0)
    assert res.phase_mean("match", phases.HASHING) > 0
    assert res.phase_mean("insert", phases.ENCODE) > 0


def test_sarp_back_fill_reads_show_as_backfill_inside_insert():
    # a small tau makes entries outgrow it, so synchronous back-fill jobs read segments
    built = build("sarp", "memory", strategy_options={"backfill": "sync", "tau": 2,
                                                     "pruning_threshold": 2})
    try:
        res = replay(built.strategy, _workload(), limit=80, breakdown=True)
    finally:
        built.close()
    assert res.strategy_stats["backfill_reads"] > 0
    assert res.phase_mean("insert", phases.BACKFILL) > 0
    assert res.phase_mean("match", phases.BACKFILL) == 0
    assert phases.BACKFILL in phases.STORAGE_KINDS


def test_threaded_replay_breakdown_invariants():
    built = build("ssd-blockhash", "memory")
    try:
        res = replay(built.strategy, _workload(), limit=60, threads=2, breakdown=True)
    finally:
        built.close()
    _check_breakdown(res)
    assert res.false_hits == 0 and res.phase_mean("match", phases.STORAGE) > 0


class _SleepsThenSpins(RadixStrategy):
    """Its match sleeps 2 ms (off a core), its insert spins for 1 ms of its own CPU."""

    def match(self, ids):
        time.sleep(0.002)
        return super().match(ids)

    def insert(self, ids, metas):
        end = time.thread_time_ns() + 1_000_000
        while time.thread_time_ns() < end:
            pass
        return super().insert(ids, metas)


@pytest.mark.parametrize("threads", [1, 2])
def test_breakdown_counts_the_request_threads_cpu_not_its_waits(threads):
    """``thread_cpu_ns`` is the request thread's own CPU clock over each side: a sleep
    inside a match stays out of it, a spin inside an insert is all in it."""
    res = replay(_SleepsThenSpins(), _workload(4), limit=12, threads=threads, breakdown=True)
    m_cpu, i_cpu = res.thread_cpu_ns
    assert len(m_cpu) == len(i_cpu) == res.requests == 12
    assert (i_cpu >= 1_000_000).all()
    assert (res.match_ns - m_cpu >= 1_500_000).all()
    assert res.cpu_mean("insert") >= 1e-3
    assert res.cpu_mean("match") < res.latency("match") - 1.5e-3
    plain = replay(_SleepsThenSpins(), _workload(4), limit=3)
    assert plain.thread_cpu_ns == () and plain.cpu_mean("match") == 0.0


def test_replay_leaves_the_clocks_as_it_found_them():
    phases.enable()
    replay(RadixStrategy(), _workload(4), limit=5, breakdown=True)
    assert phases.enabled()


# ----------------------------------------------------------------------------- export, table
def _breakdown_run(strategy="ssd-blockhash", engine="memory", breakdown=True):
    built = build(strategy, engine)
    try:
        return replay(built.strategy, _workload(), limit=30, breakdown=breakdown)
    finally:
        built.close()


def test_pyperf_suite_has_the_phase_benchmarks(tmp_path):
    res = _breakdown_run()
    md = pyperf_io.run_metadata("ssd-blockhash", "memory", "codeact", {})
    times, counts = pyperf_io.replay_suites(res, md)
    names = {b.get_name() for b in times}
    assert {"match-time-storage", "match-time-routing", "match-time-rest",
            "insert-time-storage"} <= names
    assert "match-phase-switches" in {b.get_name() for b in counts}
    bench = next(b for b in times if b.get_name() == "match-time-storage")
    assert bench.get_unit() == "second"
    assert bench.mean() == pytest.approx(res.phase_mean("match", "storage"))
    assert "breakdown_overhead" in bench.get_metadata()
    out = tmp_path / "bd.json"
    pyperf_io.write_suite(str(out), times)
    loaded = pyperf.BenchmarkSuite.load(str(out))
    assert "match-time-rest" in loaded.get_benchmark_names()

    cpu = next(b for b in times if b.get_name() == "insert-cpu-time")
    assert cpu.mean() == pytest.approx(res.cpu_mean("insert")) and cpu.mean() > 0
    assert "match-cpu-time" in names

    plain = _breakdown_run(breakdown=False)
    times, counts = pyperf_io.replay_suites(plain, md)
    assert not any(b.get_name().startswith(("match-time-", "insert-time-")) for b in times)
    assert not {"match-cpu-time", "insert-cpu-time"} & {b.get_name() for b in times}
    assert "breakdown_overhead" not in times[0].get_metadata()


def test_format_breakdown_renders():
    a = _breakdown_run("ssd-blockhash", "memory")
    b = _breakdown_run("radix", None)
    c = _breakdown_run("radix", None, breakdown=False)
    text = format_breakdown([("ssd-blockhash", a), ("radix", b), ("plain", c)])
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:3] == ["strategy", "side", "mean"]
    assert "storage" in header and "routing" in header and "rest" in header
    assert header.index("storage") < header.index("routing") < header.index("rest")
    rows = [ln for ln in lines[2:] if ln.startswith(("ssd-blockhash", "radix"))]
    assert [r.split()[1] for r in rows] == ["match", "insert", "match", "insert"]
    radix_match = next(r for r in rows if r.startswith("radix") and "match" in r)
    assert " - " in radix_match              # radix has no storage column value
    assert "%" in rows[0] and "overhead" in text
    assert "no breakdown recorded: plain" in text
    assert "no breakdown" in format_breakdown([("plain", c)])
    on_cpu = lines[0].index("on CPU")
    assert all(r[on_cpu:].split()[1].endswith("%)") for r in rows)      # "12.3 (45.6%)"
    a.thread_cpu_ns = ()                     # a result recorded before the CPU clock
    old = format_breakdown([("ssd-blockhash", a)]).splitlines()
    at = old[0].index("on CPU")
    assert [r[at:].split()[0] for r in old[2:4]] == ["-", "-"]
