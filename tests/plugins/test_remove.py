"""remove/clear and worker locations: the compiled tables against their references,
the contract's adapters and one-line errors, the log records that carry removes,
and crashtest's removal workload.  The strategy-level properties (every built-in
against the radix oracle, with threads and crashes) are the kit's RemovalTests,
run on every built-in by test_kits.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench.errors import ConfigError
from prefixbench.metas import make_metas
from prefixbench.plugins import recovery
from prefixbench.plugins.blockhash import (BlockHashTable, BlockHashTablePy,
                                           DramBlockHashStrategy, SsdBlockHashStrategy)
from prefixbench.plugins.radix import RadixStrategy, RadixTree, RadixTreePy
from prefixbench.plugins.strategy import IndexStrategy, Match
from prefixbench.registry import get_registry
from prefixbench.snapshot import InsertLog, read_log

MS = 4
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

ops_strategy = st.lists(st.tuples(st.sampled_from(("insert", "insert", "remove", "match",
                                                   "clear")),
                                  st.lists(st.integers(0, 12), max_size=8),
                                  st.integers(-1, 3), st.integers(0, 9)),
                        min_size=1, max_size=40)


def _ids(xs) -> np.ndarray:
    return np.asarray(xs, dtype=np.uint64)


def _metas(n: int, step: int) -> np.ndarray:
    return ((np.arange(n * MS, dtype=np.uint32) * 7 + step * 13) % 251).astype(np.uint8).reshape(n, MS)


def _same(a: Match, b: Match, where: str) -> None:
    assert a.n_blocks == b.n_blocks, where
    assert np.array_equal(a.metas, b.metas), where
    assert np.array_equal(a.locations, b.locations), where


@SETTINGS
@given(ops_strategy)
def test_radix_tree_twins_agree_with_workers_and_removes(ops):
    fast, ref = RadixTree(MS, 1), RadixTreePy(MS, 1)
    for step, (kind, xs, w, r) in enumerate(ops):
        ids = _ids(xs)
        if kind == "insert":
            w = max(w, 0)
            fast.insert(ids, _metas(len(ids), step), w)
            ref.insert(ids, _metas(len(ids), step), w)
        elif kind == "remove":
            assert fast.remove(ids, w) == ref.remove(ids, w), f"step {step}"
        elif kind == "clear" and r < 3:
            fast.clear(w if r else -1)
            ref.clear(w if r else -1)
        _same(fast.match(ids), ref.match(ids), f"step {step}")
        assert (fast.nodes, fast.entries, fast.pool, fast.remove_noops, fast.nbytes) == \
            (ref.nodes, ref.entries, ref.pool, ref.remove_noops, ref.nbytes), f"step {step}"
    # a snapshot of either loads in the other
    for src, dst in ((fast, RadixTreePy(MS, 1)), (ref, RadixTree(MS, 1))):
        dst.restore(**src.export())
        for _k, xs, _w, _r in ops:
            _same(dst.match(_ids(xs)), src.match(_ids(xs)), "restored")
        assert dst.entries == src.entries


def test_radix_restore_of_an_export_without_availability_is_all_on_worker_0():
    t = RadixTree(MS)
    a = _ids([5, 6, 7])
    t.insert(a, _metas(3, 0))
    e = t.export()
    del e["avail"], e["planes"]
    for cls in (RadixTree, RadixTreePy):
        r = cls(MS)
        r.restore(**e)
        m = r.match(a)
        assert m.n_blocks == 3 and m.locations.tolist() == [1, 1, 1]
        assert r.remove(a[1:2], 0) == 1 and r.match(a).n_blocks == 1


@SETTINGS
@given(ops_strategy)
def test_blockhash_table_twins_agree_with_workers_and_removes(ops):
    fast, ref = BlockHashTable(MS, 0), BlockHashTablePy(MS, 0)
    for step, (kind, xs, w, r) in enumerate(ops):
        ids = _ids(xs)                 # block id 0 (the side slot) included
        if kind == "insert":
            w = max(w, 0)
            assert fast.insert(ids, _metas(len(ids), step), w) == \
                ref.insert(ids, _metas(len(ids), step), w)
        elif kind == "remove":
            assert fast.remove(ids, w) == ref.remove(ids, w), f"step {step}"
        elif kind == "clear" and r < 3:
            fast.clear(w if r else -1)
            ref.clear(w if r else -1)
        _same(fast.match(ids), ref.match(ids), f"step {step}")
        f3, r3 = fast.lookup(ids, True), ref.lookup(ids, True)
        assert all(np.array_equal(x, y) for x, y in zip(f3, r3)), f"step {step}"
        assert (len(fast), fast.nbytes, fast.capacity, fast.counters()) == \
            (len(ref), ref.nbytes, ref.capacity, ref.counters()), f"step {step}"
    k1, l1, p1 = fast.export(workers=True)
    k2, l2, p2 = ref.export(workers=True)
    o1, o2 = np.argsort(k1), np.argsort(k2)
    assert np.array_equal(k1[o1], k2[o2]) and np.array_equal(l1[o1], l2[o2])
    assert np.array_equal(p1[:, o1], p2[:, o2])


@SETTINGS
@given(ops_strategy, st.booleans())
def test_tombstone_twins_agree(ops, defaults_dead):
    """The overlay's compiled remove against its reference."""
    tables = [(BlockHashTable(1, 0), BlockHashTable(MS, 0)),
              (BlockHashTablePy(1, 0), BlockHashTablePy(MS, 0))]
    for step, (kind, xs, w, _r) in enumerate(ops):
        ids = _ids(xs)
        got = []
        for dead, live in tables:
            if kind == "insert":
                live.insert(ids, _metas(len(ids), step), max(w, 0))
            elif kind == "remove":
                got.append(dead.tombstone(live, ids, w, defaults_dead))
            got.append((sorted(dead.export()[0].tolist()), len(live), live.lookup(ids, True)[2].tolist()))
        assert got[:len(got) // 2] == got[len(got) // 2:], f"step {step}"


def test_blockhash_deletion_keeps_every_other_key_findable():
    """Backward-shift deletion in a crowded table: remove half the keys in a random
    order, every survivor is still found with its metadata."""
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 1 << 63, size=3000, dtype=np.uint64))
    t = BlockHashTable(MS, 0, 0.95)
    t.insert(keys, _metas(len(keys), 1))
    gone = rng.permutation(keys)[:len(keys) // 2]
    assert t.remove(gone) == len(gone)
    found, metas = t.lookup(keys)
    alive = ~np.isin(keys, gone)
    assert np.array_equal(found, alive)
    assert np.array_equal(metas[alive], _metas(len(keys), 1)[alive])
    assert len(t) == int(alive.sum()) and t.counters()["remove_noops"] == 0
    assert t.remove(gone[:10]) == 0 and t.counters()["remove_noops"] == 10


# ----------------------------------------------------------------------------- contract
class _NoRemove(IndexStrategy):
    """A third-party strategy written before removal: insert without ``worker``."""

    name = "no-remove"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.got = []

    def match(self, block_ids):
        return Match.empty(self.meta_size)

    def insert(self, block_ids, metas):
        self.got.append(len(block_ids))


def test_a_strategy_without_remove_keeps_working_and_refuses_remove_in_one_line():
    s = _NoRemove()
    ids = _ids([1, 2])
    s.insert(ids, make_metas(ids, 0, 16))
    s.insert(ids, make_metas(ids, 0, 16), worker=0)
    assert s.got == [2, 2] and not s.supports_remove and s.max_workers == 1
    for call in (lambda: s.remove(ids), lambda: s.clear()):
        with pytest.raises(ConfigError) as e:
            call()
        assert "does not support" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        s.insert(ids, make_metas(ids, 0, 16), worker=1)
    assert "worker 1" in str(e.value) and "\n" not in str(e.value)


def test_every_builtin_supports_remove_and_says_how_many_workers():
    reg = get_registry()
    names = [i.name for i in reg.all() if i.kind == "strategy" and i.package == "prefixbench"]
    for name in names:
        cls = reg.get("strategy", name).factory
        assert cls.supports_remove, name
        assert 1 <= cls.max_workers <= 64, name
    multi = {n for n in names if reg.get("strategy", n).factory.max_workers > 1}
    assert {"radix", "dram-blockhash", "sarp"} <= multi


def test_never_stored_block_is_a_counted_noop_for_the_exact_strategies():
    from prefixbench.engines.memory import MemoryStore
    for s in (RadixStrategy(), DramBlockHashStrategy(), SsdBlockHashStrategy(MemoryStore())):
        assert s.remove(_ids([99, 98])) == 0
        assert s.stats()["remove_noops"] == 2, s.name


@pytest.mark.parametrize("match_first", [False, True])
@pytest.mark.parametrize("probe", ["batch", "bisect"])
def test_ssd_blockhash_insert_stays_correct_after_a_middle_remove(probe, match_first):
    """A middle remove leaves a chain's later blocks stored: neither the bisect probe
    nor an insert starting where its match stopped may write them again."""
    from prefixbench.engines.memory import MemoryStore
    s = SsdBlockHashStrategy(MemoryStore(), {"insert_probe": probe})
    a = _ids(range(1, 11))
    s.insert(a, make_metas(a, 0, 16))
    s.remove(a[3:4])
    if match_first:
        assert s.match(a).n_blocks == 3
    s.insert(a, make_metas(a, 1, 16))
    m = s.match(a)
    assert m.n_blocks == 10
    assert np.array_equal(m.metas[3], make_metas(a, 1, 16)[3])
    assert np.array_equal(m.metas[4], make_metas(a, 0, 16)[4])


# ----------------------------------------------------------------------------- log records
def test_log_records_carry_operations_and_plain_inserts_stay_plain(tmp_path):
    log = InsertLog(tmp_path, 16, sync=False)
    a = _ids([1, 2, 3])
    log.append(a, make_metas(a, 0, 16))
    recovery.append_op(log, recovery.OP_INSERT, 5, a, make_metas(a, 1, 16), 16)
    recovery.append_op(log, recovery.OP_REMOVE, None, a[:2], None, 16)
    recovery.append_op(log, recovery.OP_CLEAR, 3, None, None, 16)
    recovery.append_op(log, recovery.OP_INSERT_PRE, 2, a, make_metas(a, 2, 16), 16, 7)
    log.close()
    got = [recovery.decode_record(ids, metas) for _s, ids, metas, _e in read_log(tmp_path, 16)]
    assert [(op, w, arg) for op, w, _i, _m, arg in got] == [
        (recovery.OP_INSERT, 0, None), (recovery.OP_INSERT, 5, None),
        (recovery.OP_REMOVE, None, None), (recovery.OP_CLEAR, 3, None),
        (recovery.OP_INSERT_PRE, 2, 7)]
    assert np.array_equal(got[1][2], a) and np.array_equal(got[1][3], make_metas(a, 1, 16))
    assert np.array_equal(got[2][2], a[:2]) and len(got[3][2]) == 0


def test_replayed_log_applies_removes_in_order(tmp_path):
    """insert, remove, insert again with other metadata: the replay ends where the
    original did (the later insert wins), for a log keeper without a snapshot."""
    s = DramBlockHashStrategy()
    s.enable_log(tmp_path)
    a = _ids([11, 12, 13, 14])
    s.insert(a, make_metas(a, 0, 16))
    s.remove(a[2:])
    s.insert(a[:3], make_metas(a, 1, 16)[:3], worker=4)
    s.remove(a[:1], 0)
    want = s.match(a)
    r = DramBlockHashStrategy.recover(None, tmp_path, quiet=True, durable_log=False)
    assert r.recovery["source"] == "log-rebuild"
    got = r.match(a)
    assert got.n_blocks == want.n_blocks == 3
    assert np.array_equal(got.metas, want.metas) and np.array_equal(got.locations, want.locations)
    assert got.locations.tolist() == [16, 17, 16]


# ----------------------------------------------------------------------------- overlay
@pytest.mark.parametrize("name", ["sarp", "segment-hash", "segment-radix"])
def test_overlay_clear_then_insert_and_stats(name):
    from prefixbench.engines.memory import MemoryStore
    cls = get_registry().get("strategy", name).factory
    s = cls(MemoryStore() if cls.needs_store else None, {"S": 8} if name != "sarp" else
            {"S": 8, "R": 2, "tau": 4, "backfill": "sync"})
    a = _ids(range(100, 120))
    s.insert(a, make_metas(a, 0, 16))
    assert s.match(a).n_blocks == 20 and s.match(a).locations.tolist() == [1] * 20
    assert s.remove(a[10:12]) == 2 and s.match(a).n_blocks == 10
    assert s.remove(a[10:12]) == 0 and s.stats()["remove_noops"] == 2
    assert s.stats()["tombstones"] == 2
    s.clear()
    assert s.match(a).n_blocks == 0
    s.insert(a[:5], make_metas(a, 3, 16)[:5], worker=2)
    m = s.match(a)
    assert m.n_blocks == 5 and m.locations.tolist() == [4] * 5
    assert np.array_equal(m.metas, make_metas(a, 3, 16)[:5])
    s.close()


@pytest.mark.parametrize("name", ["sarp", "segment-radix"])
def test_idle_match_locations_are_read_only_worker0_bitmaps(name):
    """A match while nothing was removed reports every block on worker 0, as a view no
    caller can write through (the views share one array), of the match's length -
    longer matches than any before included."""
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.plugins import removal
    cls = get_registry().get("strategy", name).factory
    s = cls(MemoryStore(), {"S": 8} if name != "sarp" else {"S": 8, "R": 2, "backfill": "sync"})
    longest = len(removal._WORKER0) + 37
    for n in (3, 20, longest):
        a = _ids(range(10_000 * n, 10_000 * n + n))
        s.insert(a, make_metas(a, 0, 16))
        m = s.match(a)
        assert m.n_blocks == n and m.locations.dtype == np.uint64
        assert m.locations.tolist() == [1] * n
        with pytest.raises(ValueError):
            m.locations[0] = 2
    s.close()


# ----------------------------------------------------------------------------- crashtest
def test_crashtest_removal_workload_serves_no_removed_block():
    from prefixbench.harness.crashtest import CrashSpec, run_crashtest
    rows = run_crashtest(CrashSpec(strategies=["dram-blockhash"], engines=["lmdb"],
                                   iterations=1, seed=7, max_kill_ms=800, remove_every=2,
                                   workload="ultrachat"))
    row = rows[0]
    assert row["removes"] > 0 or row["acked"] < 2
    assert row["removed_served"] == 0 and row["lost"] == 0 and row["false"] == 0, row
