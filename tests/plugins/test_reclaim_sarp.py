"""SARP's background reclamation: retired records, postings, entries and tombstones
against the exact oracle (hypothesis-interleaved traffic with passes at random
points, threads racing passes), the space it gives back, restarts after it, and
kills between its steps."""
from __future__ import annotations

import collections
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench.blockids import chain_ids
from prefixbench.engines.memory import MemoryStore
from prefixbench.metas import make_metas
from prefixbench.plugins import _sarp_ref
from prefixbench.plugins import sarp as sarp_mod
from prefixbench.plugins.conformance import H0, branching_sequences, check_answer, check_locations
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.plugins.sarp import SarpStrategy

MS = 16
#: small windows so short sequences cross several; max_retrieval 0 makes sarp exact
EXACT = {"S": 8, "R": 2, "tau": 4, "pruning_threshold": 1, "max_retrieval": 0,
         "reclaim_after": 0, "reclaim_age": 0}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def new_sarp(store=None, **extra):
    return SarpStrategy(store if store is not None else MemoryStore(), dict(EXACT, **extra), MS)


def same(s, oracle, q, where: str) -> None:
    got, want = s.match(q), oracle.match(q)
    check_answer(got, want, q, True, where)
    check_locations(got, want, True, where)


def bounded(s) -> None:
    """Directory invariants after reclamation: lists sorted, no duplicate, and at most
    2R+1 registrations per segment, none of them for a retired record."""
    s.dir.check()
    d = s.dir.dump()
    per = collections.Counter(d["segs"].tolist())
    assert not per or max(per.values()) <= 2 * s.R + 1
    live = {k for k, _v in s.store.scan(1, sarp_mod.SEGMENT_KEY_LIMIT)}
    assert set(per) <= live, f"postings of retired records: {sorted(set(per) - live)[:5]}"


# ----------------------------------------------------------------------------- directory
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(1, 12),
                          st.integers(0, 5)), max_size=300))
@settings(max_examples=60, deadline=None)
def test_discard_equals_the_reference(ops):
    a, b = sarp_mod.RoutingDirectory(), _sarp_ref.RoutingDirectory()
    for add, key, seg, f in ops:
        if add:
            assert a.upsert(key, 1, f, seg, True) == b.upsert(key, 1, f, seg, True)
        else:
            ks, ss = [key, key + 1, 999], [seg, seg, 1]
            assert a.discard(ks, ss) == b.discard(ks, ss)
    a.check()
    assert (a.n_entries, a.n_postings, a.nbytes, a.used_bytes) == \
        (b.n_entries, b.n_postings, b.nbytes, b.used_bytes)
    for key in range(42):
        assert (a.info(key) is None) == (b.info(key) is None)
        if a.info(key) is not None:
            assert [x.tolist() for x in a.postings(key)] == [x.tolist() for x in b.postings(key)]


def test_discard_of_every_posting_empties_the_directory():
    d = sarp_mod.RoutingDirectory()
    for k in range(500):
        d.upsert(k, 0, k % 7, 1 + k % 3, True)
    keys = np.arange(500, dtype=np.uint64)
    assert d.discard(keys, 1 + keys % 3) == (500, 500)
    assert d.n_entries == 0 and d.n_postings == 0 and d.info(3) is None
    d.upsert(3, 0, 1, 9, True)
    assert d.info(3)[1] == 1
    d.check()


def test_record_ids_equals_the_reference_and_refuses_unsound_records():
    from prefixbench.plugins.segments import Segment, encode_segment
    rng = np.random.default_rng(3)
    raws, keys, refused = [], [], []
    for sid in range(1, 40):
        n = int(rng.integers(1, 9))
        seg = Segment(sid, 8 * int(rng.integers(0, 4)), rng.integers(1, 1 << 62, n, dtype=np.uint64),
                      rng.integers(0, 255, (n, MS), dtype=np.uint8))
        raw, key, kind = encode_segment(seg, MS), sid, sid % 6
        if kind == 1:
            raw = raw[:-1]                                  # cut short
        elif kind == 2:
            raw = raw[:-1] + bytes([raw[-1] ^ 1])           # checksum
        elif kind == 3:
            key += 1000                                     # read under another key
        raws.append(None if kind == 4 else raw)
        keys.append(key)
        refused.append(kind in (1, 2, 3, 4))
    want = _sarp_ref.record_ids(raws, keys, 8, MS)
    got = sarp_mod._sarp.record_ids(raws, keys, 8, MS)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert np.array_equal(got[0] == 0, np.array(refused))
    assert got[0].sum() == len(got[1]) > 0
    assert _sarp_ref.record_ids(raws, keys, 4, MS)[0].max() <= 4       # more than S blocks


# ----------------------------------------------------------------------------- oracle
kinds = ("insert", "insert", "match", "remove", "remove-all", "reclaim", "clear")


@st.composite
def traffic(draw):
    seqs = []
    for _ in range(draw(st.integers(1, 6))):
        base = []
        if seqs and draw(st.booleans()):
            parent = draw(st.sampled_from(seqs))
            base = parent[:draw(st.integers(0, len(parent)))]
        seqs.append(base + draw(st.lists(st.integers(0, 3), max_size=30)))
    ops = draw(st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, len(seqs) - 1),
                                  st.integers(0, 60), st.integers(0, 2), st.integers(0, 40),
                                  st.integers(0, 40), st.integers(0, 9)),
                        min_size=3, max_size=50))
    return [(kind, seqs[i][:cut], w, lo, hi, r) for kind, i, cut, w, lo, hi, r in ops]


@pytest.mark.parametrize("opts", [{"backfill": "sync"}, {"backfill": "background"},
                                  {"backfill": "sync", "reclaim_fraction": 0.0},
                                  {"backfill": "sync", "directory": "python"},
                                  {"backfill": "sync", "reclaim_after": 3},
                                  {"backfill": "sync", "reclaim_age": 1}],
                         ids=["sync", "background", "any-tail", "python", "auto", "aged"])
def test_reclamation_keeps_answers_equal_to_the_oracle(opts):
    @SETTINGS
    @given(traffic())
    def check(ops):
        s, oracle = new_sarp(**opts), RadixStrategy(None, None, MS)
        try:
            seen = []
            for step, (kind, tokens, w, lo, hi, r) in enumerate(ops):
                ids = chain_ids(np.asarray(tokens, dtype=np.uint64), H0)
                if kind == "insert":
                    m = make_metas(ids, step, MS)
                    s.insert(ids, m, w)
                    oracle.insert(ids, m, w)
                    seen.append(ids)
                elif kind in ("remove", "remove-all"):
                    a, b = sorted((lo * len(ids) // 40, hi * len(ids) // 40 + 1))
                    part = np.ascontiguousarray(ids[a:b])
                    worker = None if kind == "remove-all" else w
                    s.remove(part, worker)
                    oracle.remove(part, worker)
                elif kind == "reclaim":
                    s.drain()
                    s.reclaim()
                    bounded(s)
                elif kind == "clear" and r < 2:
                    s.clear(None if r == 0 else w)
                    oracle.clear(None if r == 0 else w)
                same(s, oracle, ids, f"step {step} ({kind})")
            s.drain()
            s.reclaim()
            bounded(s)
            for k, ids in enumerate(seen):
                same(s, oracle, ids, f"inserted sequence {k}")
        finally:
            s.close()
    check()


def test_a_reinsert_after_reclamation_reuses_the_later_windows():
    """A remove in the middle of a prefix lets a pass cut an earlier window while the
    later windows stay (their blocks are available): the next insert finds them and
    the blocks there keep their first metadata."""
    s, oracle = new_sarp(backfill="sync"), RadixStrategy(None, None, MS)
    q = branching_sequences(5, 1, 40)[0][:40]
    for t in (s, oracle):
        t.insert(q, make_metas(q, 1, MS))
        t.remove(np.ascontiguousarray(q[3:8]))
    assert s.reclaim()["segments_rewritten"] == 1
    for t in (s, oracle):
        t.insert(q, make_metas(q, 2, MS))
    same(s, oracle, q, "after the re-insert")
    assert np.array_equal(np.asarray(s.match(q).metas)[8:], make_metas(q, 1, MS)[8:])


# ----------------------------------------------------------------------------- space
def test_mass_removal_shrinks_entries_store_and_overlay():
    store = MemoryStore()
    s, oracle = new_sarp(store, backfill="sync"), RadixStrategy(None, None, MS)
    seqs = branching_sequences(7, 300)
    for i, q in enumerate(seqs):
        for t in (s, oracle):
            t.insert(q, make_metas(q, i, MS))
    before, size0 = s.stats(), store.logical_size()
    keep = set(range(0, len(seqs), 10))
    for i, q in enumerate(seqs):
        if i not in keep:
            for t in (s, oracle):
                t.remove(np.ascontiguousarray(q))
    dead = s.stats()["tombstones"]
    out = s.reclaim()
    after, size1 = s.stats(), store.logical_size()
    assert out["segments_deleted"] > 0 and out["entries_dropped"] > 0
    assert after["entries"] < before["entries"] / 2
    assert after["postings"] < before["postings"] / 2
    assert size1[0] < size0[0] / 2 and size1[1] < size0[1] / 2
    assert after["tombstones"] < dead / 4
    assert after["stored_block_entries"] < before["stored_block_entries"]
    bounded(s)
    for k, q in enumerate(seqs):
        same(s, oracle, q, f"sequence {k}")
    again = s.reclaim()
    assert again["segments_deleted"] == again["segments_rewritten"] == 0


def test_a_tail_is_cut_only_after_reclaim_age_passes():
    s = new_sarp(backfill="sync", reclaim_age=2)
    q = branching_sequences(6, 1, 40)[0][:24]
    s.insert(q, make_metas(q, 1, MS))
    s.remove(np.ascontiguousarray(q[12:]))
    assert s.reclaim()["segments_deleted"] == s.reclaim()["segments_deleted"] == 0
    assert s.reclaim()["segments_deleted"] == 1
    assert s.match(q).n_blocks == 12


def test_the_background_pass_starts_after_enough_removes():
    s = new_sarp(backfill="background", reclaim_after=50)
    seqs = branching_sequences(8, 40)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i, MS))
    for q in seqs:
        s.remove(np.ascontiguousarray(q))
    s.drain()
    st_ = s.stats()
    assert st_["reclaim_passes"] >= 1 and st_["reclaim_segments_deleted"] > 0
    assert all(s.match(q).n_blocks == 0 for q in seqs)
    s.close()


def test_removes_during_a_background_pass_queue_no_second_pass():
    """A pass stays queued until it ends: removes made while it runs start none
    behind it; the first remove after it that finds enough new tombstones does."""
    s = new_sarp(backfill="background", reclaim_after=8)
    seqs = branching_sequences(6, 30)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i, MS))
    running, release = threading.Event(), threading.Event()
    real, calls = s.reclaim, []

    def held_pass():
        calls.append(1)
        running.set()
        assert release.wait(30)
        return real()

    s.reclaim = held_pass
    fresh = iter(range(1 << 40, (1 << 40) + 10 ** 6))
    def remove_new(n):                  # never-stored blocks: each costs one tombstone
        s.remove(np.array([next(fresh) for _ in range(n)], dtype=np.uint64))

    remove_new(8)
    assert running.wait(30)
    for _ in range(20):                 # far past due, while the pass is held
        remove_new(8)
    assert s._jobs.qsize() == 0
    release.set()
    s.drain()
    assert len(calls) == 1
    for _ in range(200):                # until enough new tombstones are due again
        remove_new(8)
        s.drain()
        if len(calls) > 1:
            break
    assert len(calls) == 2
    for q in seqs:                      # nothing stored went missing on the way
        assert s.match(q).n_blocks == len(q)
    s.close()


# ----------------------------------------------------------------------------- threads
def test_threads_race_reclamation_and_never_see_a_removed_block():
    """Matchers and an inserter run while passes retire records and tombstones: no
    match ever returns a block removed for good, and afterwards everything equals
    the oracle."""
    s, oracle = new_sarp(backfill="background"), RadixStrategy(None, None, MS)
    gone_seqs = branching_sequences(31, 60)
    for i, q in enumerate(gone_seqs):
        for t in (s, oracle):
            t.insert(q, make_metas(q, i, MS))
    gone = set()
    for q in gone_seqs[::2]:
        cut = np.ascontiguousarray(q[len(q) // 2:])
        for t in (s, oracle):
            t.remove(cut)
    # a block is gone for good once removed and not under a later insert
    for q in gone_seqs[::2]:
        gone.update(q[len(q) // 2:].tolist())
    for q in gone_seqs[1::2]:
        gone.difference_update(q.tolist())
    churn = branching_sequences(32, 60)
    stop = threading.Event()
    errors: list[str] = []

    def matcher():
        try:
            while not stop.is_set():
                for q in gone_seqs:
                    m = s.match(q)
                    bad = gone.intersection(q[:m.n_blocks].tolist())
                    assert not bad, f"served {len(bad)} removed blocks"
        except BaseException as e:
            errors.append(f"{type(e).__name__}: {e}")
            stop.set()

    def inserter():
        try:
            for i, q in enumerate(churn):
                s.insert(q, make_metas(q, 1000 + i, MS), i % 3)
                if i % 2:
                    s.remove(np.ascontiguousarray(q[len(q) // 3:]), i % 3)
        except BaseException as e:
            errors.append(f"{type(e).__name__}: {e}")

    def reclaimer():
        try:
            while not stop.is_set():
                s.reclaim()
        except BaseException as e:
            errors.append(f"{type(e).__name__}: {e}")
            stop.set()

    threads = [threading.Thread(target=f) for f in (matcher, matcher, reclaimer)]
    ins = threading.Thread(target=inserter)
    for th in threads + [ins]:
        th.start()
    ins.join()
    stop.set()
    for th in threads:
        th.join()
    assert errors == []
    for i, q in enumerate(churn):
        oracle.insert(q, make_metas(q, 1000 + i, MS), i % 3)
        if i % 2:
            oracle.remove(np.ascontiguousarray(q[len(q) // 3:]), i % 3)
    s.drain()
    s.reclaim()
    bounded(s)
    for k, q in enumerate(gone_seqs + churn):
        same(s, oracle, q, f"sequence {k}")
    assert s.stats()["reclaim_passes"] > 1
    s.close()


# ----------------------------------------------------------------------------- restarts
def _history(s, oracle, tmp_path, snap_at):
    seqs = branching_sequences(41, 80)
    for i, q in enumerate(seqs):
        if i == snap_at:
            s.snapshot(tmp_path)
        w = i % 3
        for t in (s, oracle):
            t.insert(q, make_metas(q, i, MS), w)
        if i % 3 == 1:
            cut = np.ascontiguousarray(seqs[i - 1][len(seqs[i - 1]) // 3:])
            for t in (s, oracle):
                t.remove(cut, None if i % 2 else (i - 1) % 3)
    return seqs


def _recover(s, tmp_path):
    return SarpStrategy.recover(s.store, tmp_path, s.opts, MS, durable_log=False,
                                notify=lambda line: None)


@pytest.mark.parametrize("when", ["snapshot-before", "snapshot-after", "rebuild"])
def test_restart_after_reclamation_is_exact(tmp_path, when):
    s, oracle = new_sarp(backfill="sync"), RadixStrategy(None, None, MS)
    s.enable_log(tmp_path)
    seqs = _history(s, oracle, tmp_path, 40 if when != "rebuild" else -1)
    assert s.reclaim()["segments_deleted"] > 0
    if when == "snapshot-after":
        s.snapshot(tmp_path)
    more = branching_sequences(42, 10)
    for i, q in enumerate(more):        # acknowledged after the pass
        for t in (s, oracle):
            t.insert(q, make_metas(q, 500 + i, MS), 1)
    r = _recover(s, tmp_path)
    assert r.recovery["source"] != "store-rebuild" or when == "rebuild"
    bounded(r)
    for k, q in enumerate(seqs + more):
        same(r, oracle, q, f"sequence {k} after recovery")
    r.reclaim()
    bounded(r)
    for k, q in enumerate(seqs + more):
        same(r, oracle, q, f"sequence {k} after recovery and a pass")


class Kill(BaseException):
    """The process dies here (nothing after it runs)."""


@pytest.mark.parametrize("step", ["write", "register", "discard", "delete", "sync", "drop"])
def test_a_kill_between_reclamation_steps_recovers_exact(tmp_path, step):
    s, oracle = new_sarp(backfill="sync"), RadixStrategy(None, None, MS)
    s.enable_log(tmp_path)
    seqs = _history(s, oracle, tmp_path, 30)
    store = s.store
    real_write, real_sync = store.write_items, store.sync
    real_discard, real_register = s.dir.discard, s._register
    calls = collections.Counter()

    def write_items(puts, deletes=()):
        kind = "delete" if deletes and not puts else "write"
        calls[kind] += 1
        if kind == step:
            raise Kill
        return real_write(puts, deletes)

    def sync():
        if step == "sync":
            raise Kill
        return real_sync()

    class Dir:
        def __getattr__(self, name):
            return getattr(real_discard.__self__, name)

        def discard(self, keys, segs):
            calls["discard"] += 1
            if step == "discard":
                raise Kill
            return real_discard(keys, segs)

    def register(seg):
        calls["register"] += 1
        if step == "register" and calls["register"] == 3:
            raise Kill
        return real_register(seg)

    def watch_stop(cands, held):
        raise Kill

    store.write_items, store.sync, s._register = write_items, sync, register
    s.dir = Dir()
    if step == "drop":
        s._overlay().watch_stop = watch_stop
    with pytest.raises(Kill):
        s.reclaim()
    store.write_items, store.sync = real_write, real_sync
    r = _recover(s, tmp_path)
    bounded(r)
    for k, q in enumerate(seqs):
        same(r, oracle, q, f"sequence {k} after a kill at {step}")
    r.reclaim()
    bounded(r)
    for k, q in enumerate(seqs):
        same(r, oracle, q, f"sequence {k} after a kill at {step} and a pass")


def test_cut_copies_of_one_prefix_leave_one_record():
    """Sequences that share 3 blocks and diverge inside the first window are stored
    as copies; once every divergent tail is removed, one record keeps the prefix
    and the other copies go whole."""
    store = MemoryStore()
    s, oracle = new_sarp(store, backfill="sync"), RadixStrategy(None, None, MS)
    rng = np.random.default_rng(9)
    head = rng.integers(1, 1 << 62, 3, dtype=np.uint64)
    seqs = [chain_ids(np.concatenate([head, rng.integers(1, 1 << 62, 5, dtype=np.uint64)]), H0)
            for _ in range(12)]
    for i, q in enumerate(seqs):
        for t in (s, oracle):
            t.insert(q, make_metas(q, i, MS))
    assert store.logical_size()[0] >= 12
    for q in seqs:
        for t in (s, oracle):
            t.remove(np.ascontiguousarray(q[3:]))
    out = s.reclaim()
    assert out["segments_deleted"] >= 10 and out["segments_rewritten"] <= 1
    records = [k for k, _v in store.scan(1, sarp_mod.SEGMENT_KEY_LIMIT)]
    assert len(records) == 1
    bounded(s)
    for k, q in enumerate(seqs):
        same(s, oracle, q, f"sequence {k}")
    for i, q in enumerate(seqs):          # every tail comes back, on the kept prefix
        for t in (s, oracle):
            t.insert(q, make_metas(q, 50 + i, MS))
    for k, q in enumerate(seqs):
        same(s, oracle, q, f"sequence {k} re-inserted")


def test_a_known_prefix_hint_is_ignored_after_removal_and_reclamation():
    """A bulk load's hint vouches that a prefix is indexed; once blocks of it were
    removed and a pass cut their window, the insert must route every window again
    (else the removed blocks would never come back)."""
    s, oracle = new_sarp(backfill="sync"), RadixStrategy(None, None, MS)
    q = branching_sequences(5, 1, 40)[0][:40]
    for t in (s, oracle):
        t.insert(q, make_metas(q, 1, MS))
        t.remove(np.ascontiguousarray(q[3:8]))
    s.reclaim()
    s.insert_known_prefix(q, make_metas(q, 2, MS), len(q))
    oracle.insert(q, make_metas(q, 2, MS))
    same(s, oracle, q, "after the hinted re-insert")
    assert s.stats()["insert_windows_known"] == 0
