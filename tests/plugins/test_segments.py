"""The shared segment store layer: record codec, verification, ids, windows,
in-place extension and copy-on-diverge, on the memory engine and on lmdb.

The compiled codec and ``common_prefix`` must equal their pure-Python
references byte for byte; every corruption of a stored record must be
detected and turned into a counted miss.
"""
from __future__ import annotations

import struct
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prefixbench.engines.memory import MemoryStore
from prefixbench.errors import ConfigError
from prefixbench import twins
from prefixbench.plugins.segments import (
    HEADER_SIZE,
    CorruptSegmentError,
    Segment,
    SegmentLayer,
    common_prefix,
    decode_segment,
    decode_segment_py,
    encode_segment,
    encode_segment_py,
    space_key,
    verify_raws,
)

from engine_support import ENGINE_NAMES, Stores

_segments = twins.load("prefixbench.plugins._segments")      # compiled (reference in pure mode)
_ref = twins.reference("prefixbench.plugins._segments")

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def open_store():
    with Stores() as stores:
        yield stores.open


segments = st.builds(
    lambda sid, start, ids, ms, seed: Segment(
        sid, start, np.array(ids, dtype=np.uint64),
        np.random.default_rng(seed).integers(0, 256, (len(ids), ms), dtype=np.uint8)),
    st.integers(1, (1 << 56) - 1), st.integers(0, 1 << 40).map(lambda x: x * 64),
    st.lists(st.integers(0, (1 << 64) - 1), max_size=64), st.integers(1, 40), st.integers(0, 99))


@SETTINGS
@given(segments)
def test_codec_equals_reference_and_round_trips(seg):
    ms = seg.metas.shape[1]
    raw = encode_segment(seg, ms)
    assert raw == encode_segment_py(seg, ms)
    assert len(raw) == HEADER_SIZE + seg.n * (8 + ms)
    assert _segments.checksum(raw) == _ref.checksum(raw)
    for views in (_segments.views, _ref.views):
        sid, start, ids, metas = views(raw, ms)
        assert (sid, start) == (seg.seg_id, seg.start) and np.array_equal(ids, seg.ids)
        assert np.array_equal(metas, seg.metas)
        assert ids.dtype == np.uint64 and metas.dtype == np.uint8 and metas.shape == (seg.n, ms)
    for v in sorted({0, seg.n // 2, seg.n}):
        for prefix in (_segments.metas_prefix, _ref.metas_prefix):
            got = prefix(raw, v, ms)
            assert got.shape == (v, ms) and np.array_equal(got, seg.metas[:v])
    for prefix in (_segments.metas_prefix, _ref.metas_prefix):
        with pytest.raises(ValueError, match="metas_prefix"):
            prefix(raw, seg.n + 1, ms)
        with pytest.raises(ValueError, match="record (length|shorter)"):
            prefix(raw[:-1], 0, ms)
    for dec in (decode_segment, decode_segment_py):
        back = dec(raw, ms)
        assert (back.seg_id, back.start) == (seg.seg_id, seg.start)
        assert back.ids.dtype == np.uint64 and np.array_equal(back.ids, seg.ids)
        assert back.metas.shape == (seg.n, ms) and np.array_equal(back.metas, seg.metas)


@SETTINGS
@given(segments, st.data())
def test_splice_equals_reference(seg, data):
    ms = seg.metas.shape[1]
    S = data.draw(st.integers(1, 12))
    nq = data.draw(st.integers(0, 14))
    q = np.array(data.draw(st.lists(st.integers(0, (1 << 64) - 1), min_size=nq, max_size=nq)),
                 np.uint64)
    qm = np.arange(nq * ms, dtype=np.uint8).reshape(nq, ms)
    shared = data.draw(st.integers(0, 16))
    raw = encode_segment(seg, ms)
    outs = []
    # splice_record splices straight from the encoded record: the same arrays, and the
    # record's header besides
    for splice in (_segments.splice, _ref.splice, _segments.splice_record, _ref.splice_record):
        try:
            if splice in (_segments.splice, _ref.splice):
                outs.append(splice(seg.ids, seg.metas, q, qm, shared, S))
            else:
                sid, start, n_old, *arrays = splice(raw, q, qm, shared, S, ms)
                assert (sid, start, n_old) == (seg.seg_id, seg.start, seg.n)
                outs.append(tuple(arrays))
        except ValueError as e:
            outs.append(str(e))
    if isinstance(outs[0], str):
        assert len(set(outs)) == 1 and "shared=" in outs[0]
        assert shared > min(seg.n, nq, S)
        return
    n = min(nq, S)
    ia, ma = outs[0]
    for ib, mb in outs[1:]:
        assert ib.dtype == np.uint64 and mb.dtype == np.uint8 and mb.shape == (n, ms)
        assert np.array_equal(ia, ib) and np.array_equal(ma, mb)
    assert ia.dtype == np.uint64 and ma.dtype == np.uint8 and ma.shape == (n, ms)
    assert np.array_equal(ia[:shared], seg.ids[:shared])
    assert np.array_equal(ia[shared:], q[shared:n])
    assert np.array_equal(ma[:shared], seg.metas[:shared])
    assert np.array_equal(ma[shared:], qm[shared:n])


def test_splice_record_refuses_a_cut_record():
    raw = encode_segment(Segment(3, 0, np.arange(4, dtype=np.uint64),
                                 np.zeros((4, 2), np.uint8)), 2)
    q, qm = np.arange(4, dtype=np.uint64), np.ones((4, 2), np.uint8)
    for splice in (_segments.splice_record, _ref.splice_record):
        with pytest.raises(ValueError, match="record (length|shorter)"):
            splice(raw[:-1], q, qm, 2, 8, 2)
        with pytest.raises(ValueError, match="record (length|shorter)"):
            splice(raw[:10], q, qm, 2, 8, 2)


def test_layout_is_columnar():
    """All block ids first, then all metadata: verification reads one run."""
    ids = np.array([1, 2, 3], dtype=np.uint64)
    metas = np.full((3, 4), 0xAB, dtype=np.uint8)
    raw = encode_segment(Segment(7, 128, ids, metas), 4)
    assert raw[:4] == b"PBSG"
    assert struct.unpack_from("<3Q", raw, HEADER_SIZE) == (1, 2, 3)
    assert raw[HEADER_SIZE + 24:] == b"\xab" * 12


@SETTINGS
@given(segments, st.data())
def test_every_corruption_is_detected(seg, data):
    ms = seg.metas.shape[1]
    raw = bytearray(encode_segment(seg, ms))
    kind = data.draw(st.sampled_from(("flip", "truncate", "extend", "meta_size")))
    if kind == "flip":
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
        dec_ms = ms
    elif kind == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
        dec_ms = ms
    elif kind == "extend":
        raw += b"\0" * data.draw(st.integers(1, 64))
        dec_ms = ms
    else:
        dec_ms = ms + 1
    for dec in (decode_segment, decode_segment_py):
        with pytest.raises(CorruptSegmentError):
            dec(bytes(raw), dec_ms)
    # the same check fails first, with the same message
    assert _segments.decode(bytes(raw), dec_ms) == _ref.decode(bytes(raw), dec_ms)


@SETTINGS
@given(st.lists(st.integers(0, 3), max_size=80), st.lists(st.integers(0, 3), max_size=80))
def test_common_prefix_equals_reference(a, b):
    x, y = np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)
    n = min(len(a), len(b))
    want = next((i for i in range(n) if a[i] != b[i]), n)
    assert common_prefix(x, y) == _ref.common_prefix(x, y) == want


def test_common_prefix_on_extreme_values():
    top = np.array([(1 << 64) - 1, 0, 1 << 63], dtype=np.uint64)
    assert common_prefix(top, top.copy()) == 3
    other = top.copy()
    other[2] ^= np.uint64(1)
    assert common_prefix(top, other) == 2


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_ids_are_monotonic_and_recovered_from_the_store(engine, open_store, tmp_path):
    path = str(tmp_path / engine)
    store = open_store(engine, path)
    layer = SegmentLayer(store, 8, 4)
    assert layer.new_id() == 1
    ids = [layer.new_id() for _ in range(40)]
    assert ids == sorted(set(ids))
    segs = [layer.new_segment(8 * k, np.arange(3, dtype=np.uint64), np.zeros((3, 4), np.uint8))
            for k in range(70)]
    layer.write_many(segs)
    # other key spaces never count as segments
    store.write_items([(space_key(1, 5), b"spill"), (space_key(2, 9), b"x")])
    top = segs[-1].seg_id
    if engine == "memory":
        again = SegmentLayer(store, 8, 4)
    else:
        store.close()
        again = SegmentLayer(open_store(engine, path), 8, 4)
    assert again.new_id() == top + 1
    assert again.read(top).n == 3


def _sequential(layer, k):
    return [layer.new_id() for _ in range(2000)]


def _in_runs(layer, k):
    """Ids after their predecessors (runs of 8), a new sequence every third call."""
    out, last = [], 0
    for i in range(1000):
        ids, _ = layer.new_ids_after([last, -1] if i % 3 else [0], 8)
        out.extend(ids)
        last = ids[-1]
    return out


@pytest.mark.parametrize("allocate", [_sequential, _in_runs])
def test_ids_are_unique_across_threads(allocate):
    layer = SegmentLayer(MemoryStore(), 8, 4)
    got: list[list[int]] = [[] for _ in range(4)]

    def work(k):
        got[k].extend(allocate(layer, k))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [i for g in got for i in g]
    assert len(set(flat)) == len(flat) and min(flat) > 0
    if allocate is _sequential:
        assert len(flat) == 8000 and all(g == sorted(g) for g in got)


def test_windows_are_aligned():
    layer = SegmentLayer(MemoryStore(), 64, 16)
    assert layer.window(0) == (0, 64)
    assert layer.window(63) == (0, 64)
    assert layer.window(64) == (64, 128)
    assert layer.window(200) == (192, 256)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_read_many_is_one_batch_and_corrupt_records_are_counted_misses(engine, open_store):
    store = open_store(engine)
    layer = SegmentLayer(store, 8, 4)
    a = layer.new_segment(0, np.arange(1, 6, dtype=np.uint64), np.ones((5, 4), np.uint8))
    b = layer.new_segment(8, np.arange(9, 12, dtype=np.uint64), np.ones((3, 4), np.uint8))
    layer.write_many([a, b])
    raw = bytearray(store.get(b.seg_id))
    raw[-1] ^= 0xFF
    store.write_items([(b.seg_id, bytes(raw))])
    # a valid record stored under the wrong key is corrupt too
    store.write_items([(999, encode_segment(a, 4))])
    calls0 = store.stats().read_calls
    got = layer.read_many([a.seg_id, b.seg_id, 12345, 999])
    assert store.stats().read_calls == calls0 + 1
    assert got[0] is not None and np.array_equal(got[0].ids, a.ids)
    assert got[1] is None and got[2] is None and got[3] is None
    assert layer.corrupt_reads == 2 and layer.corrupt_ids == [b.seg_id, 999]
    assert layer.stats()["corrupt_segments"] == 2
    assert layer.read(b.seg_id) is None and layer.corrupt_reads == 3


def test_extend_in_place_and_copy_on_diverge():
    layer = SegmentLayer(MemoryStore(), 8, 2)
    seg = layer.new_segment(8, np.array([1, 2, 3], np.uint64), np.full((3, 2), 1, np.uint8))
    q = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], np.uint64)
    qm = np.full((10, 2), 2, np.uint8)

    same, new = layer.extend_or_copy(seg, q[:2], qm[:2], 2)
    assert same is seg and not new                         # nothing to add

    ext, new = layer.extend_or_copy(seg, q, qm, 3)
    assert not new and ext.seg_id == seg.seg_id
    assert ext.ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]     # capped at the window end
    assert ext.metas[:3].tolist() == [[1, 1]] * 3           # first metadata kept
    assert ext.metas[3:].tolist() == [[2, 2]] * 5

    div = np.array([1, 2, 9, 9], np.uint64)
    cp, new = layer.extend_or_copy(ext, div, qm[:4], 2)
    assert new and cp.seg_id > ext.seg_id and cp.start == 8
    assert cp.ids.tolist() == [1, 2, 9, 9]
    assert cp.metas.tolist() == [[1, 1], [1, 1], [2, 2], [2, 2]]
    assert ext.ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]     # the original is untouched
    with pytest.raises(ValueError):
        layer.extend_or_copy(seg, q, qm, 5)


@SETTINGS
@given(st.lists(segments, max_size=5), st.data())
def test_encode_writes_equals_reference_and_numbers_fresh_records_in_order(segs, data):
    """A plan's records, fresh ones (id 0) taking the given ids in order: the same
    items, ids and block count from both twins, each item the record
    :func:`encode_segment` writes for that segment."""
    ms = 3
    segs = [Segment(s.seg_id, s.start, s.ids, np.zeros((len(s.ids), ms), np.uint8) + i)
            for i, s in enumerate(segs) if len(s.ids)]
    fresh = [data.draw(st.booleans()) for _ in segs]
    writes = [(0 if f else s.seg_id, s.start, s.ids, s.metas) for s, f in zip(segs, fresh)]
    ids = [s.seg_id for s, f in zip(segs, fresh) if f]
    got = _segments.encode_writes(writes, ids, 64, ms)
    assert got == _ref.encode_writes(writes, ids, 64, ms)
    items, sids, blocks = got
    assert sids == [s.seg_id for s in segs] and blocks == sum(len(s.ids) for s in segs)
    assert items == [(s.seg_id, encode_segment(s, ms)) for s in segs]


@pytest.mark.parametrize("write,fresh,word", [
    ((0, 0, np.arange(3, dtype=np.uint64), np.zeros((3, 2), np.uint8)), [], "fewer fresh"),
    ((5, 4, np.arange(3, dtype=np.uint64), np.zeros((3, 2), np.uint8)), [], "does not fit"),
    ((5, 0, np.arange(9, dtype=np.uint64), np.zeros((9, 2), np.uint8)), [], "does not fit"),
    ((1 << 56, 0, np.arange(3, dtype=np.uint64), np.zeros((3, 2), np.uint8)), [],
     "does not fit"),
    ((5, 0, np.arange(3, dtype=np.uint64), np.zeros((2, 2), np.uint8)), [], "shape")])
def test_encode_writes_refuses_what_write_many_refuses(write, fresh, word):
    for mod in (_segments, _ref):
        with pytest.raises(ValueError, match=word):
            mod.encode_writes([write], fresh, 8, 2)


def test_write_planned_writes_and_counts_like_write_many():
    """One batch with the extra items; fresh records numbered in order; the layer's
    counters as :meth:`SegmentLayer.write_many` keeps them."""
    layer = SegmentLayer(MemoryStore(), 8, 2)
    a = layer.new_segment(0, np.array([1, 2, 3], np.uint64), np.full((3, 2), 1, np.uint8))
    layer.write_many([a])
    ext = (a.seg_id, 0, np.array([1, 2, 3, 4], np.uint64), np.full((4, 2), 1, np.uint8))
    new = (0, 8, np.array([7], np.uint64), np.full((1, 2), 2, np.uint8))
    batches = layer.store.stats().write_batches
    sids = layer.write_planned([ext, new], [40], [(1 << 60, b"journal")])
    assert sids == [a.seg_id, 40]
    assert layer.read(a.seg_id).ids.tolist() == [1, 2, 3, 4]
    assert layer.read(40).ids.tolist() == [7] and layer.store.get(1 << 60) == b"journal"
    assert layer.segments_written == 3 and layer.blocks_written == 8
    assert layer.store.stats().write_batches == batches + 1


@SETTINGS
@given(st.integers(2, 255), st.lists(st.lists(st.integers(-3, 40), max_size=5), max_size=8),
       st.integers(1, 100))
def test_place_ids_equals_reference(run, calls, start):
    """Id runs placed by the compiled twin and the reference, call after call from the
    same state: the same ids, journalled ids, counters and run slots."""
    state = [[bytearray(), None, start], [bytearray(), None, start]]
    for after in calls:
        after = [a if a >= 0 or -a <= i else 0 for i, a in enumerate(after)]
        got = []
        for mod, st_ in zip((_segments, _ref), state):
            ids, earlier, st_[1], st_[2], cont, opened = mod.place_ids(after, run, st_[0],
                                                                       st_[1], st_[2])
            got.append((ids, earlier, cont, opened))
        assert got[0] == got[1] and state[0] == state[1]
    for mod in (_segments, _ref):
        with pytest.raises(ValueError, match="id runs"):
            mod.place_ids([0], 1, bytearray(), None, 1)
        with pytest.raises(OverflowError, match="56-bit"):
            mod.place_ids([0], 4, bytearray(), None, (1 << 56) - 2)


def test_plans_take_ids_only_when_they_publish():
    """Without ``assign_id`` copies and new segments carry id 0 and use up no id;
    an in-place extension keeps its id; a record with id 0 is never written."""
    layer = SegmentLayer(MemoryStore(), 8, 2)
    seg = layer.new_segment(0, np.array([1, 2, 3], np.uint64), np.full((3, 2), 1, np.uint8))
    nxt = layer.next_id
    q = np.array([1, 2, 9], np.uint64)
    qm = np.full((3, 2), 2, np.uint8)
    cp, new = layer.extend_or_copy(seg, q, qm, 2, assign_id=False)
    fresh = layer.new_segment(8, q, qm, assign_id=False)
    ext, new2 = layer.extend_or_copy(seg, np.array([1, 2, 3, 4], np.uint64),
                                     np.full((4, 2), 2, np.uint8), 3, assign_id=False)
    assert new and cp.seg_id == 0 and fresh.seg_id == 0 and layer.next_id == nxt
    assert not new2 and ext.seg_id == seg.seg_id
    with pytest.raises(ValueError):
        layer.write_many([cp])
    cp.seg_id = layer.new_id()
    layer.write_many([cp])
    assert layer.read(cp.seg_id).ids.tolist() == [1, 2, 9]


def test_bad_layer_configuration_is_a_config_error():
    with pytest.raises(ConfigError, match="option S"):
        SegmentLayer(MemoryStore(), 0, 16)
    with pytest.raises(ConfigError, match="option meta_size"):
        SegmentLayer(MemoryStore(), 64, 0)
    layer = SegmentLayer(MemoryStore(), 8, 2)
    with pytest.raises(ValueError):
        layer.write(Segment(3, 5, np.zeros(2, np.uint64), np.zeros((2, 2), np.uint8)))


@SETTINGS
@given(st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=10), st.integers(0, 2),
                          st.sampled_from(("ok", "absent", "flip", "wrong-key", "elsewhere"))),
                max_size=6),
       st.lists(st.integers(0, 2), max_size=10))
def test_batch_verification_equals_reference(records, query):
    """Check + verify a batch: the best verified record, its length, the corrupt ones."""
    raws, keys = [], []
    for k, (ids, tag, kind) in enumerate(records, 1):
        seg = Segment(k, 64 if kind == "elsewhere" else 0, np.array(ids, np.uint64),
                      np.full((len(ids), 3), tag, np.uint8))
        raw = bytearray(encode_segment(seg, 3))
        if kind == "flip":
            raw[-1 if ids else 0] ^= 4
        raws.append(None if kind == "absent" else bytes(raw))
        keys.append(k + 100 if kind == "wrong-key" else k)
    q = np.array(query, np.uint64)
    got = verify_raws(raws, np.array(keys, np.uint64), q, 0, 10, 3)
    want = _ref.verify_raws(raws, keys, q, 0, 10, 3)
    assert tuple(got) == tuple(want)
    bad = [i for i, (_, _, kind) in enumerate(records) if kind in ("flip", "wrong-key")]
    assert list(got[2]) == bad
    ok = [_ref.common_prefix(r[0], query) for r in records]
    good = [v for v, (_, _, kind) in zip(ok, records) if kind == "ok"]
    assert got[1] == max(good, default=0)


# ----------------------------------------------------------------------------- id runs
def test_id_runs_place_a_new_id_right_after_its_predecessor():
    layer = SegmentLayer(MemoryStore(), 8, 4)
    ids, earlier = layer.new_ids_after([0, -1, -2], 4)       # a new sequence of 3 windows
    assert ids == [4, 5, 6] and earlier == []                # run [4, 8), reserved whole
    other, _ = layer.new_ids_after([0], 4)                   # another sequence: a new run
    assert other == [8]
    ids2, earlier2 = layer.new_ids_after([6], 4)             # window 3 of the first one
    assert ids2 == [7] and earlier2 == [7]                   # continues an earlier run
    full, _ = layer.new_ids_after([7], 4)                    # the run is full: a new one
    assert full == [12]
    branch, _ = layer.new_ids_after([5], 4)                  # 5 is not the run's last id
    assert branch == [16]
    assert layer.new_id() == 20                              # sequential ids skip the runs
    after_seq, _ = layer.new_ids_after([8, 20, 0], 4)
    assert after_seq == [9, 24, 28]                          # 20 is no run's: new run
    assert layer.stats()["ids_continued"] == 4
    assert layer.stats()["id_runs_opened"] == 6


def test_id_runs_restart_above_every_stored_id_and_treat_old_runs_as_closed():
    store = MemoryStore()
    layer = SegmentLayer(store, 8, 4)
    ids, _ = layer.new_ids_after([0, -1], 16)
    segs = [Segment(i, 8 * k, np.arange(2, dtype=np.uint64), np.zeros((2, 4), np.uint8))
            for k, i in enumerate(ids)]
    layer.write_many(segs)
    again = SegmentLayer(store, 8, 4)          # a restart: the store says where ids end
    got, earlier = again.new_ids_after([ids[-1]], 16)
    assert got == [32] and earlier == []
    layer.resume_at(100)
    assert layer.new_ids_after([ids[-1]], 16)[0] == [112]



def test_restore_runs_refuses_a_malformed_slot_table_and_keeps_the_runs_closed():
    """A snapshot's run slots of the wrong type are one ValueError (recovery turns it
    into a SnapshotError line); a missing table or a moved write mark reopen nothing."""
    store = MemoryStore()
    layer = SegmentLayer(store, 8, 4)
    opened, _ = layer.new_ids_after([0, 0], 8)             # two runs, one id used in each
    meta, slots = layer.run_state()
    again = SegmentLayer(store, 8, 4)
    with pytest.raises(ValueError, match="1-d uint8"):
        again.restore_runs(meta, slots.astype(np.int64))
    assert not again.restore_runs(meta, None)
    store.put(1 << 40, b"x")
    assert not again.restore_runs(meta, slots)
    assert again.new_ids_after([opened[0]], 8)[0] != [opened[0] + 1]   # a run of its own
    assert store.get(1 << 40) == b"x"
