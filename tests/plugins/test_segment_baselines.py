"""The segment baselines of the SARP paper's section 6.1: segment-hash and
segment-radix (plain and capped), held against the exact radix oracle.

Random branching session sets (a token tree chained into block IDs, with
inserts and matches interleaved) run on the memory engine and on lmdb when
that engine imports; small segment sizes make every sequence cross several
windows, and tiny node budgets make the capped tree spill on every operation.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench import twins
from prefixbench.engines.memory import MemoryStore
from prefixbench.blockids import chain_ids
from prefixbench.errors import ConfigError
from prefixbench.harness.replay import replay
from prefixbench.plugins import segment_hash, segment_radix
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.plugins.segment_hash import (SegmentHashStrategy, encode_records, record_keys,
                                              record_spans)
from prefixbench.plugins.segment_radix import (SPILL_KEY_SPACE, CappedSegmentRadixStrategy,
                                               SegmentRadixStrategy)
from prefixbench.plugins.segments import Segment, decode_segment, encode_segment
from prefixbench.workloads.synthetic import make_synthetic

from engine_support import ENGINE_NAMES, Stores

#: the pure-Python reference of the compiled batch encoder, in either mode
encode_records_py = twins.reference("prefixbench.plugins._segment_hash").encode_records

SEED = 0xC0FFEE
MS = 16
PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------- helpers
def ids_of(tokens) -> np.ndarray:
    return chain_ids(np.asarray(tokens, dtype=np.uint64), SEED)


def metas_of(ids: np.ndarray, tag: int) -> np.ndarray:
    """(block id, inserting op) per row: a block re-inserted later must keep its first row."""
    rows = np.empty((len(ids), 2), dtype=np.uint64)
    rows[:, 0] = ids
    rows[:, 1] = tag
    return rows.view(np.uint8).reshape(len(ids), MS)


@st.composite
def branching_sessions(draw, max_seqs=8, alphabet=3):
    """Ops ``(kind, tokens)`` over sequences that fork from random earlier ones.

    Each op acts on ``seq[:cut] + extra``, so prefixes, extensions and fresh
    branches inside an edge, at an edge end and at a window boundary all occur.
    """
    seqs: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_seqs))):
        base: list[int] = []
        if seqs and draw(st.booleans()):
            parent = draw(st.sampled_from(seqs))
            base = parent[:draw(st.integers(0, len(parent)))]
        seqs.append(base + draw(st.lists(st.integers(0, alphabet - 1), max_size=20)))
    ops = draw(st.lists(st.tuples(st.sampled_from(("insert", "match", "match")),
                                  st.integers(0, len(seqs) - 1), st.integers(0, 40),
                                  st.lists(st.integers(0, alphabet - 1), max_size=3)),
                        min_size=1, max_size=30))
    return [(kind, seqs[i][:cut] + extra) for kind, i, cut, extra in ops]


def run_against_oracle(ops, strategies: dict, check):
    """Apply ``ops`` to the oracle and every strategy; ``check(name, got, want, step)``."""
    oracle = RadixStrategy()
    for step, (kind, tokens) in enumerate(ops):
        ids = ids_of(tokens)
        if kind == "insert":
            m = metas_of(ids, step)
            oracle.insert(ids, m)
            for s in strategies.values():
                s.insert(ids, m)
        else:
            want = oracle.match(ids)
            for name, s in strategies.items():
                check(name, s.match(ids), want, step)
    return oracle


def same_answer(name, got, want, step):
    assert got.n_blocks == want.n_blocks, (name, step, got.n_blocks, want.n_blocks)
    assert got.metas.dtype == np.uint8 and got.metas.shape == want.metas.shape, (name, step)
    assert np.array_equal(got.metas, want.metas), (name, step)


def never_more_and_same_metadata(name, got, want, step):
    assert got.n_blocks <= want.n_blocks, (name, step)
    assert got.metas.shape == (got.n_blocks, MS), (name, step)
    assert np.array_equal(got.metas, want.metas[:got.n_blocks]), (name, step)


# ----------------------------------------------------------------------------- properties
@pytest.mark.parametrize("engine", ENGINE_NAMES)
@PROPS
@given(ops=branching_sessions(), S=st.sampled_from([1, 2, 4, 8]), cap=st.integers(1, 3),
       runs=st.sampled_from([0, 3]))
def test_segment_radix_plain_and_capped_equal_the_oracle(engine, ops, S, cap, runs):
    with Stores(engine) as stores:
        plain = SegmentRadixStrategy(stores.open(), {"S": S, "id_runs": runs})
        capped = CappedSegmentRadixStrategy(stores.open(), {"S": S, "cap_nodes": cap,
                                                            "id_runs": runs})
        oracle = run_against_oracle(ops, {"plain": plain, "capped": capped}, same_answer)
        entries = oracle.stats()["entries"]
        for s in (plain, capped):
            st_ = s.stats()
            assert st_["entries"] == entries
            assert st_["corrupt_segments"] == st_["corrupt_nodes"] == 0
        assert capped.stats()["memory_nodes"] <= cap
        assert capped.stats()["nodes"] == plain.stats()["nodes"]
        assert plain.stats()["spilled_nodes"] == 0


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@PROPS
@given(ops=branching_sessions(), S=st.sampled_from([1, 2, 4, 8]))
def test_segment_hash_never_exceeds_the_oracle(engine, ops, S):
    """The contract (never longer, same metadata) - and this layout is exact besides."""
    with Stores(engine) as stores:
        s = SegmentHashStrategy(stores.open(), {"S": S})
        run_against_oracle(ops, {"segment-hash": s}, never_more_and_same_metadata)
        run_against_oracle(ops, {"segment-hash": SegmentHashStrategy(stores.open(), {"S": S})},
                           same_answer)


@PROPS
@given(ops=branching_sessions(), S=st.sampled_from([1, 2, 4, 8]))
def test_segment_hash_known_prefix_writes_what_insert_writes(ops, S):
    """A bulk load's hint (how many leading blocks are indexed) skips the windows
    before the one holding that block, and the store ends byte for byte the same."""
    stores = {k: MemoryStore() for k in ("insert", "hint")}
    s = {k: SegmentHashStrategy(st_, {"S": S}) for k, st_ in stores.items()}
    seen: set = set()
    for step, (_kind, tokens) in enumerate(ops):
        ids = ids_of(tokens)
        known = 0
        while known < len(ids) and int(ids[known]) in seen:
            known += 1
        for st_ in stores.values():
            st_.reset_stats()
        s["insert"].insert(ids, metas_of(ids, step))
        s["hint"].insert_known_prefix(ids, metas_of(ids, step), known)
        full = (known // S) * S             # whole windows before the hint: never read
        assert stores["hint"].stats().reads <= stores["insert"].stats().reads - (full // S)
        seen.update(int(x) for x in ids)
    assert dict(stores["insert"]._data) == dict(stores["hint"]._data)


# ----------------------------------------------------------------------------- replay
@pytest.mark.parametrize("profile, sessions", [("codeact", 12), ("lmcache-agent", 2),
                                               ("eabf", 6), ("ultrachat", 60)])
def test_replay_on_synthetic_profiles_has_no_false_hits(profile, sessions):
    for strategy in (SegmentHashStrategy(MemoryStore()), SegmentRadixStrategy(MemoryStore()),
                     CappedSegmentRadixStrategy(MemoryStore(), {"cap_nodes": 8})):
        res = replay(strategy, make_synthetic(profile, sessions=sessions))
        assert res.requests > 0 and res.oracle_hit_tokens > 0
        assert res.false_hits == 0, strategy.name
        assert res.short_matches == 0 and res.hit_rate_loss == 0.0, strategy.name
        assert res.strategy_stats["entries"] > 0


# ----------------------------------------------------------------------------- segment-hash layout
def test_segment_hash_writes_one_record_per_new_block_with_halving_sizes():
    store = MemoryStore()
    s = SegmentHashStrategy(store, {"S": 8})
    ids = ids_of(range(32))
    s.insert(ids, metas_of(ids, 1))
    # per window of 8: records of 1,2,1,4,1,2,1,8 blocks = 20 block entries
    assert s.stats()["records"] == 32 and s.stats()["block_entries_written"] == 80
    assert s.stats()["write_amplification"] == 2.5
    keys = [k for k, _ in store.scan(0)]                # all in key space 3, nowhere else
    assert len(keys) == 32 and all(k >> 56 == segment_hash.HASH_KEY_SPACE == 3 for k in keys)
    full = decode_segment(store.get(int(record_keys(ids[15:16])[0])), MS)
    assert (full.start, len(full.ids)) == (8, 8)
    half = decode_segment(store.get(int(record_keys(ids[19:20])[0])), MS)
    assert (half.start, len(half.ids)) == (16, 4)

    longer = ids_of(list(range(32)) + [99, 98, 97])
    s.insert(longer, metas_of(longer, 2))           # only the 3 new positions are written
    assert s.stats()["records"] == 35 and s.stats()["entries"] == 35
    rec = decode_segment(store.get(int(record_keys(longer[33:34])[0])), MS)
    assert (rec.start, len(rec.ids)) == (32, 2)
    assert np.array_equal(rec.metas, metas_of(longer, 2)[32:34])


def test_segment_hash_reads_one_record_per_full_window_and_halves_on_a_miss():
    store = MemoryStore()
    s = SegmentHashStrategy(store, {"S": 8})
    ids = ids_of(range(32))
    s.insert(ids, metas_of(ids, 1))
    store.reset_stats()
    assert s.match(ids).n_blocks == 32 and store.stats().reads == 4
    store.reset_stats()
    q = ids_of(list(range(21)) + [7, 7, 7, 7])       # diverges at block 21 of window 2
    m = s.match(q)
    assert m.n_blocks == 21 and np.array_equal(m.metas, metas_of(ids, 1)[:21])
    # windows 0, 1: one read each; window 2: sizes 8 (miss), 4 (hit), 2 (miss), 1 (hit)
    assert store.stats().reads == 6
    assert s.stats()["fallback_reads_per_match"] == 1.5


def test_segment_hash_keeps_the_first_metadata_in_records_that_reach_back():
    s = SegmentHashStrategy(MemoryStore(), {"S": 8})
    short = ids_of(range(5))
    s.insert(short, metas_of(short, 1))
    long_ = ids_of(range(16))
    s.insert(long_, metas_of(long_, 2))             # records of 8 and 2 blocks cover blocks 0..4
    m = s.match(long_)
    assert m.n_blocks == 16
    assert np.array_equal(m.metas[:5], metas_of(short, 1))
    assert np.array_equal(m.metas[5:], metas_of(long_, 2)[5:])


def test_segment_hash_batch_encoder_equals_the_reference():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 2**64 - 1, 70, dtype=np.uint64, endpoint=True)
    for ms in (1, 7, 16):
        metas = rng.integers(0, 256, (70, ms), dtype=np.uint8)
        for lo, S in ((0, 1), (3, 8), (17, 64)):
            starts, lens = record_spans(lo, 70, S)
            keys = record_keys(ids[lo:])
            got = encode_records(keys, starts, lens, ids, metas, ms)
            assert got == encode_records_py(keys, starts, lens, ids, metas, ms)
            # each record is byte for byte the segment codec's record of its blocks
            for (k, raw), a, g in zip(got, starts.tolist(), lens.tolist()):
                assert raw == encode_segment(Segment(k, a, ids[a:a + g], metas[a:a + g]), ms)
    for enc in (encode_records, encode_records_py):
        with pytest.raises(ValueError, match="outside"):
            enc(keys[:1], np.array([69]), np.array([2]), ids, metas, 16)


def test_segment_hash_treats_a_corrupt_or_foreign_record_as_a_miss():
    store = MemoryStore()
    s = SegmentHashStrategy(store, {"S": 4})
    ids = ids_of(range(12))
    s.insert(ids, metas_of(ids, 1))
    k = int(record_keys(ids[7:8])[0])                # the full record of window 1
    raw = bytearray(store.get(k))
    raw[-1] ^= 0xFF
    store.put(k, bytes(raw))
    m = s.match(ids)
    assert m.n_blocks == 7                           # window 1 falls back to 2 + 1 blocks
    assert np.array_equal(m.metas, metas_of(ids, 1)[:7])
    assert s.stats()["corrupt_segments"] == 1
    # a valid record under the wrong key: verification refuses it
    store.put(int(record_keys(ids[3:4])[0]), store.get(int(record_keys(ids[11:12])[0])))
    assert s.match(ids).n_blocks == 3                # window 0 falls back to 2 + 1 blocks
    # a well-formed record under the right key whose ids differ (a key collision)
    k = int(record_keys(ids[1:2])[0])
    other = ids_of([5, 5])
    store.put(k, encode_records(np.array([k], np.uint64), np.array([0]), np.array([2]),
                                other, metas_of(other, 9), MS)[0][1])
    m = s.match(ids)                                 # size 2 refused, size 1 still verifies
    assert m.n_blocks == 1 and np.array_equal(m.metas, metas_of(ids, 1)[:1])


# ----------------------------------------------------------------------------- segment-radix layout
def test_segment_radix_reads_one_segment_per_window_and_shares_segments():
    store = MemoryStore()
    s = SegmentRadixStrategy(store, {"S": 8})
    a = ids_of(range(20))
    s.insert(a, metas_of(a, 1))
    assert s.stats()["segments"] == 3 and s.stats()["nodes"] == 3
    # modeled bytes: 4 node records (root included) + 3 child slots (a chain)
    assert s.stats()["memory_bytes"] == 4 * segment_radix.NODE_BYTES + 3 * segment_radix.SLOT_BYTES
    b = ids_of(list(range(12)) + [50, 51])           # diverges inside window 1: one copy
    s.insert(b, metas_of(b, 2))
    assert s.stats()["segments"] == 4 and s.stats()["segment_block_entries"] == 20 + 6
    c = ids_of(list(range(20)) + [60])               # extends the last segment in place
    s.insert(c, metas_of(c, 3))
    assert s.stats()["segments"] == 4 and s.stats()["nodes"] == 5
    store.reset_stats()
    m = s.match(ids_of(list(range(12)) + [50, 7]))   # b's branch, one segment per window
    assert m.n_blocks == 13 and store.stats().reads == 2 and store.stats().read_calls == 1
    assert np.array_equal(m.metas[:12], metas_of(a, 1)[:12])
    assert np.array_equal(m.metas[12:], metas_of(b, 2)[12:13])
    assert s.stats()["memory_bytes"] > 0 and s.stats()["store_reads_per_match"] == 2


@pytest.mark.parametrize("runs", [4, 0])
def test_segment_radix_gives_a_growing_conversation_consecutive_ids(runs):
    """With id runs each new window of a conversation takes the id after its previous
    window's segment (another conversation's turns in between), so one engine block
    holds several of its windows; a branch opens a run of its own."""
    store = MemoryStore()
    s = CappedSegmentRadixStrategy(store, {"S": 4, "cap_nodes": 2, "id_runs": runs})
    a, b = list(range(1, 31)), list(range(1001, 1031))
    for n in (6, 10, 15, 22):                          # turns of two conversations, interleaved
        for conv in (a, b):
            ids = ids_of(conv[:n])
            s.insert(ids, metas_of(ids, n))

    def windows(conv):
        x = ids_of(conv)
        where = {(seg.start, int(seg.ids[0])): k for k, v in
                 store.scan(1, 1 << 56) for seg in [decode_segment(v, MS)]}
        return [where[(w, int(x[w]))] for w in range(0, len(x), 4)]
    wa, wb = windows(a[:22]), windows(b[:22])
    runs_of = [wa == list(range(wa[0], wa[0] + 6)), wb == list(range(wb[0], wb[0] + 6))]
    if not runs:
        assert runs_of == [False, False]
        return
    # runs of 4 ids: windows 0-3 in one run, 4-5 in the next, of each conversation
    assert wa[:4] == list(range(wa[0], wa[0] + 4)) and wa[4:] == [wa[4], wa[4] + 1]
    assert wb[:4] == list(range(wb[0], wb[0] + 4)) and wb[4:] == [wb[4], wb[4] + 1]
    fork = a[:9] + [77] * 10                            # diverges inside window 2
    ids = ids_of(fork)
    s.insert(ids, metas_of(ids, 99))
    wf = windows(fork)
    assert wf[:2] == wa[:2] and wf[2] % 4 == 0 and wf[2] > max(wa + wb)
    assert wf[2:] == [wf[2], wf[2] + 1, wf[2] + 2]
    assert s.match(ids).n_blocks == len(ids) and s.stats()["id_runs"] == 4


@pytest.mark.parametrize("write_after", [False, True])
def test_segment_radix_recovered_from_the_store_as_it_still_is_keeps_its_id_runs(
        tmp_path, write_after):
    """A snapshot of the store as it still is (a sweep's loaded state, cloned) gives the
    recovered tree its id runs back: the conversations' later windows continue them.
    After any write since the snapshot the runs stay closed, since an id they hold
    free may have been handed out: new windows then open runs above every stored id."""
    store = MemoryStore()
    opts = {"S": 4, "cap_nodes": 2, "id_runs": 8}
    s = CappedSegmentRadixStrategy(store, opts)
    a, b = list(range(1, 31)), list(range(1001, 1031))
    for conv in (a, b):
        ids = ids_of(conv[:10])
        s.insert(ids, metas_of(ids, 10))
    s.snapshot(tmp_path)
    if write_after:
        ids = ids_of(list(range(5001, 5006)))
        s.insert(ids, metas_of(ids, 1))
    top = max(k for k, _ in store.scan(1, 1 << 56))
    r = _recover(CappedSegmentRadixStrategy, store, tmp_path, opts)
    for conv in (a, b):
        ids = ids_of(conv[:22])
        r.insert(ids, metas_of(ids, 22))
    where = {(seg.start, int(seg.ids[0])): k for k, v in
             store.scan(1, 1 << 56) for seg in [decode_segment(v, MS)]}
    for conv in (a, b):
        x = ids_of(conv[:22])
        w = [where[(p, int(x[p]))] for p in range(0, 22, 4)]
        if write_after:
            assert w[3] > top and w[3] % 8 == 0 and w[3:] == [w[3], w[3] + 1, w[3] + 2]
        else:
            assert w == list(range(w[0], w[0] + 6))
        assert r.match(x).n_blocks == 22


def test_segment_radix_capped_spills_to_key_space_2_and_reads_back():
    store = MemoryStore()
    capped = CappedSegmentRadixStrategy(store, {"S": 4, "cap_nodes": 2})
    plain = SegmentRadixStrategy(MemoryStore(), {"S": 4})
    seqs = [ids_of([i % 3, i % 5] + list(range(i, i + 9))) for i in range(12)]
    for t, ids in enumerate(seqs):
        for s in (capped, plain):
            s.insert(ids, metas_of(ids, t))
        assert capped.stats()["memory_nodes"] <= 2
    st_ = capped.stats()
    assert st_["spilled_nodes"] == st_["nodes"] - 2 > 10 and st_["spill_writes"] > 0
    space = [k for k, _ in store.scan(SPILL_KEY_SPACE << 56, (SPILL_KEY_SPACE + 1) << 56)]
    assert len(space) >= st_["spilled_nodes"]
    reads0 = st_["spill_reads"]
    for ids in seqs:
        same_answer("capped", capped.match(ids), plain.match(ids), 0)
    assert capped.stats()["spill_reads"] > reads0
    assert capped.stats()["store_reads_per_match"] > plain.stats()["store_reads_per_match"]
    assert capped.stats()["memory_bytes"] < plain.stats()["memory_bytes"]


def test_segment_radix_capped_keeps_recently_used_nodes_in_memory():
    """Least recently used nodes spill first: a path just matched stays resident."""
    s = CappedSegmentRadixStrategy(MemoryStore(), {"S": 4, "cap_nodes": 4})
    a, b, c = (ids_of([t] * 8) for t in (1, 2, 3))    # two nodes each (two windows)
    for t, ids in enumerate((a, b)):
        s.insert(ids, metas_of(ids, t))
    assert s.stats()["spill_reads"] == 0
    assert s.match(a).n_blocks == 8                  # a is now the most recently used
    s.insert(c, metas_of(c, 2))                      # evicts two nodes: b's, not a's
    reads = s.stats()["spill_reads"]
    assert s.match(a).n_blocks == 8 and s.stats()["spill_reads"] == reads
    assert s.match(b).n_blocks == 8 and s.stats()["spill_reads"] == reads + 2


def test_segment_radix_corrupt_segment_or_node_is_a_miss_never_reused():
    store = MemoryStore()
    s = SegmentRadixStrategy(store, {"S": 4})
    ids = ids_of(range(10))
    s.insert(ids, metas_of(ids, 1))
    seg_keys = [k for k, _ in store.scan(0, 1 << 56)]
    assert len(seg_keys) == 3
    raw = bytearray(store.get(seg_keys[1]))          # window 1
    raw[50] ^= 0x01
    store.put(seg_keys[1], bytes(raw))
    m = s.match(ids)
    assert m.n_blocks == 4 and np.array_equal(m.metas, metas_of(ids, 1)[:4])
    assert s.stats()["corrupt_segments"] >= 1
    before = store.stats().writes
    s.insert(ids_of(list(range(6)) + [9]), metas_of(ids[:7], 2))   # needs that segment: skipped
    assert store.stats().writes == before

    # a well-formed segment whose ids differ (as after a collision): verified block by block
    store1 = MemoryStore()
    s1 = SegmentRadixStrategy(store1, {"S": 4})
    s1.insert(ids, metas_of(ids, 1))
    seg0 = decode_segment(store1.get(seg_keys[0]), MS)
    forged = ids.copy()
    forged[2] ^= np.uint64(1)
    store1.put(seg_keys[0], encode_segment(Segment(seg0.seg_id, 0, forged[:4], seg0.metas), MS))
    m = s1.match(ids)
    assert m.n_blocks == 2 and np.array_equal(m.metas, metas_of(ids, 1)[:2])

    store2 = MemoryStore()
    c = CappedSegmentRadixStrategy(store2, {"S": 4, "cap_nodes": 1})
    c.insert(ids, metas_of(ids, 1))
    spilled = [k for k, _ in store2.scan(SPILL_KEY_SPACE << 56, (SPILL_KEY_SPACE + 1) << 56)]
    for k in spilled:
        store2.put(k, b"garbage")
    assert c.match(ids).n_blocks < 10
    assert c.stats()["corrupt_nodes"] >= 1


# ----------------------------------------------------------------------------- threads
@pytest.mark.parametrize("make", [
    lambda: SegmentHashStrategy(MemoryStore(), {"S": 4}),
    lambda: SegmentRadixStrategy(MemoryStore(), {"S": 4}),
    lambda: CappedSegmentRadixStrategy(MemoryStore(), {"S": 4, "cap_nodes": 3}),
])
def test_concurrent_inserts_and_matches(make):
    """Four threads on one instance: no false hits, and the same final index as one thread."""
    rng = np.random.default_rng(11)
    sessions = [[int(x) for x in rng.integers(0, 3, size=rng.integers(1, 30))] for _ in range(200)]
    shared, oracle = make(), RadixStrategy()
    for tokens in sessions:
        ids = ids_of(tokens)
        oracle.insert(ids, metas_of(ids, 0))
    errors = []

    def worker(part):
        try:
            for tokens in part:
                ids = ids_of(tokens)
                m = shared.match(ids)
                assert np.array_equal(m.metas, metas_of(ids[:m.n_blocks], 0))
                shared.insert(ids, metas_of(ids, 0))
                assert shared.match(ids).n_blocks == len(ids)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(sessions[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert shared.stats()["entries"] == oracle.stats()["entries"]
    for tokens in sessions:
        ids = ids_of(tokens + [1])
        same_answer("shared", shared.match(ids), oracle.match(ids), 0)


@pytest.mark.parametrize("make", [
    lambda: SegmentHashStrategy(MemoryStore(), {"S": 8}),
    lambda: SegmentRadixStrategy(MemoryStore(), {"S": 8}),
    lambda: CappedSegmentRadixStrategy(MemoryStore(), {"S": 8, "cap_nodes": 2}),
])
def test_racing_inserts_of_one_prefix_agree_on_each_blocks_metadata(make):
    """Threads inserting overlapping prefixes with different metadata: whoever wins,
    every query must see one record per block (inserts are serialised)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(30):
            s = make()
            full = ids_of([trial] + list(range(40)))
            cuts = [12, 20, 28, 36, 41, 17, 33, 9]
            barrier = threading.Barrier(len(cuts))

            def worker(t, cut):
                barrier.wait()
                s.insert(full[:cut], metas_of(full[:cut], t + 1))

            threads = [threading.Thread(target=worker, args=(t, c)) for t, c in enumerate(cuts)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ref = s.match(full)
            assert ref.n_blocks == 41
            for cut in range(1, 41):
                assert np.array_equal(s.match(full[:cut]).metas, ref.metas[:cut]), (trial, cut)
    finally:
        sys.setswitchinterval(old)


# ----------------------------------------------------------------------------- options and plugins
@pytest.mark.parametrize("cls, options", [
    (SegmentHashStrategy, {"S": 0}),
    (SegmentHashStrategy, {"S": 48}),
    (SegmentHashStrategy, {"S": 8192}),
    (SegmentHashStrategy, {"S": "big"}),
    (SegmentHashStrategy, {"R": 4}),
    (SegmentRadixStrategy, {"S": 0}),
    (SegmentRadixStrategy, {"S": 5000}),
    (SegmentRadixStrategy, {"cap_nodes": -1}),
    (CappedSegmentRadixStrategy, {"cap_nodes": 0}),
    (CappedSegmentRadixStrategy, {"cap_nodes": "few"}),
])
def test_out_of_range_options_raise_config_error(cls, options):
    with pytest.raises(ConfigError, match="option"):
        cls(MemoryStore(), options)


@pytest.mark.parametrize("cls", [SegmentHashStrategy, SegmentRadixStrategy,
                                 CappedSegmentRadixStrategy])
def test_needs_a_store_and_a_valid_meta_size(cls):
    with pytest.raises(ConfigError, match="needs an engine"):
        cls()
    with pytest.raises(ConfigError, match="meta_size"):
        cls(MemoryStore(), meta_size=0)


def test_defaults_and_registration():
    got = {}
    for mod in (segment_hash, segment_radix):
        mod.prefixbench_register_strategies(register=lambda name, cls: got.__setitem__(name, cls))
    assert got == {"segment-hash": SegmentHashStrategy, "segment-radix": SegmentRadixStrategy,
                   "segment-radix-capped": CappedSegmentRadixStrategy}
    assert all(cls.needs_store for cls in got.values())
    assert SegmentRadixStrategy.exact and not SegmentHashStrategy.exact
    assert SegmentHashStrategy(MemoryStore()).opts == {"S": 64}
    assert SegmentRadixStrategy(MemoryStore()).opts == {"S": 64, "cap_nodes": 0, "id_runs": 64}
    assert CappedSegmentRadixStrategy(MemoryStore()).opts["cap_nodes"] >= 1
    from prefixbench.registry import get_registry
    names = set(get_registry().names("strategy"))
    assert {"segment-hash", "segment-radix", "segment-radix-capped"} <= names


def test_empty_and_other_meta_sizes():
    for cls in (SegmentHashStrategy, SegmentRadixStrategy, CappedSegmentRadixStrategy):
        s = cls(MemoryStore(), {"S": 4}, meta_size=5)
        empty = np.empty(0, dtype=np.uint64)
        assert s.match(empty).n_blocks == 0 and s.match(empty).metas.shape == (0, 5)
        s.insert(empty, np.empty((0, 5), np.uint8))
        ids = ids_of(range(7))
        m5 = metas_of(ids, 4)[:, :5].copy()
        s.insert(ids, m5)
        got = s.match(ids_of(list(range(7)) + [3]))
        assert got.n_blocks == 7 and np.array_equal(got.metas, m5), cls.name
        with pytest.raises(ValueError, match="metas"):
            s.insert(ids, np.zeros((7, 6), np.uint8))


# ----------------------------------------------------------------------------- capped recovery
def _recover(cls, store, d, options):
    return cls.recover(store, d, options, durable_log=False, quiet=True)


def _answers_equal_oracle(strategy, oracle, queries, where=""):
    for q in queries:
        same_answer(where, strategy.match(q), oracle.match(q), 0)


def _spill_keys(store):
    return [k for k, _ in store.scan((SPILL_KEY_SPACE << 56) + 1, (SPILL_KEY_SPACE + 1) << 56)]


def _seqs(seed, n, S=4):
    """Token sequences that fork from earlier ones, long enough to cross windows."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n):
        tail = [int(x) for x in rng.integers(0, 4, size=int(rng.integers(1, 5 * S)))]
        if seqs and rng.random() < 0.7:
            p = seqs[int(rng.integers(len(seqs)))]
            seqs.append(p[:int(rng.integers(0, len(p) + 1))] + tail)
        else:
            seqs.append(tail)
    return [ids_of(t) for t in seqs]


def test_capped_snapshot_holds_only_the_resident_nodes(tmp_path):
    """Recovery deserialises the resident part only and reads nothing else up front:
    spilled nodes come back on demand, answers equal the oracle."""
    store = MemoryStore()
    s = CappedSegmentRadixStrategy(store, {"S": 4, "cap_nodes": 5})
    plain = SegmentRadixStrategy(MemoryStore(), {"S": 4})
    oracle = RadixStrategy()
    seqs = _seqs(1, 60)
    for t, ids in enumerate(seqs):
        for x in (s, plain, oracle):
            x.insert(ids, metas_of(ids, t))
    s.match(seqs[0])                # brings spilled nodes back: resident and clean
    before = s.stats()
    assert before["nodes"] > 40 and before["memory_nodes"] == 5
    s.snapshot(tmp_path / "capped")
    plain.snapshot(tmp_path / "plain")
    reads0 = store.stats().reads
    r = _recover(CappedSegmentRadixStrategy, store, tmp_path / "capped", None)
    assert r.recovery["source"] == "snapshot"
    assert r.recovery["nodes_deserialized"] == 5
    assert store.stats().reads - reads0 <= 1                 # the high-water record only
    st_ = r.stats()
    assert st_["spill_reads"] == before["spill_reads"] and st_["memory_nodes"] == 5
    assert st_["spill_writes"] == before["spill_writes"]    # counters carry over
    assert st_["nodes"] == before["nodes"] and st_["entries"] == before["entries"]
    # each resident node comes back as clean or dirty as it was: a clean one is not
    # written again when it spills
    flags = [(i, n.dirty, n.durable) for i, n in s._nodes.resident.items()]
    assert [(i, n.dirty, n.durable) for i, n in r._nodes.resident.items()] == flags
    assert any(not d for _i, d, _u in flags)
    pr = _recover(SegmentRadixStrategy, MemoryStore(), tmp_path / "plain", None)
    assert pr.recovery["nodes_deserialized"] == before["nodes"]
    assert r.recovery["snapshot_bytes"] * 4 < pr.recovery["snapshot_bytes"]
    _answers_equal_oracle(r, oracle, seqs + [ids_of([1, 2, 3])])
    assert r.stats()["spill_reads"] > before["spill_reads"]


def test_capped_snapshot_without_node_flags_restores_every_node_dirty(tmp_path):
    """A snapshot written before the flags column (six columns) still recovers; with
    nothing known of its nodes' records, each is written again when it spills."""
    s = CappedSegmentRadixStrategy(MemoryStore(), {"S": 4, "cap_nodes": 5})
    for t, ids in enumerate(_seqs(1, 60)):
        s.insert(ids, metas_of(ids, t))
    meta, sections = s._snapshot_state()
    old = dict(sections, nodes=np.ascontiguousarray(sections["nodes"][:, :6]))
    r = CappedSegmentRadixStrategy(s.store, {"S": 4, "cap_nodes": 5})
    r._restore_state(meta, old)
    assert list(r._nodes.resident) == list(s._nodes.resident)
    assert all(n.dirty and not n.durable for n in r._nodes.resident.values())


def test_capped_recover_after_inserts_beyond_the_snapshot(tmp_path):
    """Spill records rewritten after the snapshot (splits, new children, grown
    leaves) and the insert log together give back exactly the oracle's tree."""
    store = MemoryStore()
    opts = {"S": 4, "cap_nodes": 3}
    s = CappedSegmentRadixStrategy(store, opts)
    s.enable_log(tmp_path)
    oracle = RadixStrategy()
    seqs = _seqs(2, 120)
    for t, ids in enumerate(seqs):
        s.insert(ids, metas_of(ids, t))
        oracle.insert(ids, metas_of(ids, t))
        if t == 59:
            s.snapshot(tmp_path)
            spill_at_snapshot = s.stats()["spill_writes"]
    assert s.stats()["spill_writes"] > spill_at_snapshot     # the spill space moved on
    last_id = s._nodes.last_id
    r = _recover(CappedSegmentRadixStrategy, store, tmp_path, opts)   # "crash": s dropped
    assert r.recovery["source"] == "snapshot" and r.recovery["log_replayed"] == 60
    assert r._nodes.last_id >= last_id                       # no node id is handed out twice
    _answers_equal_oracle(r, oracle, seqs)
    more = _seqs(3, 40)
    for t, ids in enumerate(more, 1000):
        r.insert(ids, metas_of(ids, t))
        oracle.insert(ids, metas_of(ids, t))
    _answers_equal_oracle(r, oracle, seqs + more)
    assert r.stats()["corrupt_nodes"] == 0


@pytest.mark.parametrize("case", ["flip", "cut", "missing"])
def test_capped_corrupt_newest_snapshot_falls_back_to_the_previous(tmp_path, capsys, case):
    from prefixbench import snapshot as snap
    store = MemoryStore()
    opts = {"S": 4, "cap_nodes": 4}
    s = CappedSegmentRadixStrategy(store, opts)
    s.enable_log(tmp_path)
    oracle = RadixStrategy()
    seqs = _seqs(4, 90)
    for t, ids in enumerate(seqs):
        s.insert(ids, metas_of(ids, t))
        oracle.insert(ids, metas_of(ids, t))
        if t in (29, 59):
            s.snapshot(tmp_path)
    p = snap.snapshot_path(tmp_path)
    if case == "flip":
        raw = bytearray(open(p, "rb").read())
        raw[-2] ^= 0x10
        open(p, "wb").write(bytes(raw))
    elif case == "cut":
        os_size = len(open(p, "rb").read())
        with open(p, "r+b") as f:
            f.truncate(os_size - 1)
    else:
        import os
        os.unlink(p)
    r = CappedSegmentRadixStrategy.recover(store, tmp_path, opts, durable_log=False)
    assert r.recovery["source"] == "previous-snapshot"
    assert "recovering from the previous snapshot" in capsys.readouterr().err
    assert r.recovery["log_replayed"] == 60
    _answers_equal_oracle(r, oracle, seqs)


class _CrashingStore(MemoryStore):
    """A memory engine that "loses power" before its ``crash_at``-th write batch:
    that batch and every later one never happen (batches are atomic)."""

    crash_at = 0

    def _write(self, puts, deletes):
        if self.crash_at:
            self.crash_at -= 1
            if not self.crash_at:
                raise _Crash()
        super()._write(puts, deletes)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=branching_sessions(max_seqs=10), S=st.sampled_from([1, 2, 4]),
       cap=st.integers(1, 4), snap_every=st.integers(1, 6), runs=st.sampled_from([0, 4]),
       data=st.data())
def test_recovered_capped_tree_answers_like_the_oracle(engine, ops, S, cap, snap_every, runs,
                                                       data):
    """Snapshots every few inserts, the spill space changing in between, then a
    recovery: the recovered tree answers exactly like the oracle of every insert,
    and keeps doing so for inserts after it."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="pb-capped-")
    try:
        with Stores(engine) as stores:
            store = stores.open()
            opts = {"S": S, "cap_nodes": cap, "id_runs": runs}
            s = CappedSegmentRadixStrategy(store, opts)
            s.enable_log(d, sync=False)
            inserts = [ids_of(t) for kind, t in ops if kind == "insert"]
            oracle = RadixStrategy()
            for t, ids in enumerate(inserts):
                s.insert(ids, metas_of(ids, t))
                oracle.insert(ids, metas_of(ids, t))
                if (t + 1) % snap_every == 0:
                    s.snapshot(d)
            s._log.close()
            r = _recover(CappedSegmentRadixStrategy, store, d, opts)
            queries = [ids_of(t) for _k, t in ops]
            _answers_equal_oracle(r, oracle, queries, "recovered")
            assert r.stats()["memory_nodes"] <= cap
            extra = data.draw(branching_sessions(max_seqs=4))
            for t, (_k, tokens) in enumerate(extra, 500):
                ids = ids_of(tokens)
                r.insert(ids, metas_of(ids, t))
                oracle.insert(ids, metas_of(ids, t))
            _answers_equal_oracle(r, oracle, queries + [ids_of(t) for _k, t in extra])
    finally:
        shutil.rmtree(d, ignore_errors=True)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1), S=st.sampled_from([2, 4]), cap=st.integers(1, 4),
       snap_every=st.integers(1, 12), crash_at=st.integers(1, 200))
def test_capped_power_loss_between_write_batches_loses_nothing_acknowledged(
        seed, S, cap, snap_every, crash_at):
    """The store loses every write batch from a random one on (mid-insert, between a
    segment write and the spill batch, ...): after recovery every acknowledged
    insert matches in full with its first metadata, nothing is longer than the
    oracle that also holds the insert in flight, and metadata always agrees."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="pb-capped-")
    try:
        store = _CrashingStore()
        opts = {"S": S, "cap_nodes": cap}
        s = CappedSegmentRadixStrategy(store, opts)
        s.enable_log(d, sync=False)
        inserts = _seqs(seed, 50, S)
        acked, with_flight = RadixStrategy(), RadixStrategy()
        store.crash_at = crash_at
        done = 0
        try:
            for t, ids in enumerate(inserts):
                with_flight.insert(ids, metas_of(ids, t))
                s.insert(ids, metas_of(ids, t))
                acked.insert(ids, metas_of(ids, t))
                done += 1
                if (t + 1) % snap_every == 0:
                    s.snapshot(d)
        except _Crash:
            pass
        s._log.close()
        store.crash_at = 0
        r = _recover(CappedSegmentRadixStrategy, store, d, opts)
        for ids in inserts[:done]:
            assert r.match(ids).n_blocks == len(ids)
        for q in inserts + [ids[:len(ids) // 2] for ids in inserts]:
            got, lo, hi = r.match(q), acked.match(q), with_flight.match(q)
            assert lo.n_blocks <= got.n_blocks <= hi.n_blocks
            assert np.array_equal(got.metas, hi.metas[:got.n_blocks])
        assert r.stats()["corrupt_nodes"] == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _live(s, store, inserts, start, crash_at, snap_every, d, acked, with_flight):
    """Insert ``inserts`` (tags from ``start``) until the store loses power at
    its ``crash_at``-th batch; returns the in-flight insert's index or None."""
    store.crash_at = crash_at
    t = None
    try:
        for t, ids in enumerate(inserts, start):
            with_flight.insert(ids, metas_of(ids, t))
            s.insert(ids, metas_of(ids, t))
            acked.insert(ids, metas_of(ids, t))
            if (t + 1) % snap_every == 0:
                s.snapshot(d)
        t = None
    except _Crash:
        pass
    store.crash_at = 0
    s._log.close()
    return t


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1), S=st.sampled_from([2, 4]), cap=st.integers(1, 4),
       snap_every=st.integers(2, 12), crash1=st.integers(1, 150),
       crash2=st.integers(1, 150), corrupt=st.booleans())
def test_capped_two_lifetimes_with_power_losses_and_a_corrupt_snapshot(
        seed, S, cap, snap_every, crash1, crash2, corrupt):
    """Lose power, recover and keep serving (logging on, the in-flight insert
    retried), lose power again, maybe find the newest snapshot corrupt: the
    third instance still has every acknowledged insert and nothing else."""
    import os
    import shutil
    import tempfile
    from prefixbench import snapshot as snap
    d = tempfile.mkdtemp(prefix="pb-capped-")
    try:
        store = _CrashingStore()
        opts = {"S": S, "cap_nodes": cap}
        seqs = _seqs(seed, 70, S)
        acked, with_flight = RadixStrategy(), RadixStrategy()
        s = CappedSegmentRadixStrategy(store, opts)
        s.enable_log(d, sync=False)
        flight = _live(s, store, seqs[:35], 0, crash1, snap_every, d, acked, with_flight)
        r = CappedSegmentRadixStrategy.recover(store, d, opts, durable_log=True, quiet=True)
        if flight is not None:                      # the client retries what was in flight
            acked.insert(seqs[flight], metas_of(seqs[flight], flight))
            r.insert(seqs[flight], metas_of(seqs[flight], flight))
        _live(r, store, seqs[35:], 35, crash2, snap_every, d, acked, with_flight)
        if corrupt and os.path.exists(snap.snapshot_path(d, previous=True)):
            os.unlink(snap.snapshot_path(d))
        r3 = _recover(CappedSegmentRadixStrategy, store, d, opts)
        for q in seqs + [ids[:len(ids) // 2] for ids in seqs]:
            got, lo, hi = r3.match(q), acked.match(q), with_flight.match(q)
            assert lo.n_blocks <= got.n_blocks <= hi.n_blocks
            assert np.array_equal(got.metas, hi.metas[:got.n_blocks])
        assert r3.stats()["corrupt_nodes"] == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_capped_unreadable_high_water_record_falls_back_to_the_spill_keys(tmp_path):
    store = MemoryStore()
    s = CappedSegmentRadixStrategy(store, {"S": 2, "cap_nodes": 1})
    for t, ids in enumerate(_seqs(5, 30, S=2)):
        s.insert(ids, metas_of(ids, t))
    s.snapshot(tmp_path)
    highest = max(_spill_keys(store)) - (SPILL_KEY_SPACE << 56)
    store.put(SPILL_KEY_SPACE << 56, b"torn")
    r = _recover(CappedSegmentRadixStrategy, store, tmp_path, None)
    assert r._nodes.last_id >= highest


def test_capped_crashtest_with_a_binding_cap_loses_nothing(monkeypatch):
    """The kill -9 test with a cap that spills on every operation."""
    from prefixbench.harness import crashtest
    from prefixbench.harness.crashtest import CrashSpec, run_crashtest
    monkeypatch.setitem(crashtest.CRASH_OPTIONS, "segment-radix-capped",
                        {"cap_nodes": 4, "S": 8})
    spec = CrashSpec(strategies=["segment-radix-capped"], engines=["lmdb"], iterations=3,
                     seed=40, snapshot_every=7, max_kill_ms=3000)
    (row,) = run_crashtest(spec)
    assert row["lost"] == 0 and row["false"] == 0 and row["recovery_failures"] == 0, row
    assert row["acked"] > 0


# ----------------------------------------------------------------------------- cap_fraction
def test_cap_fraction_budget_grows_with_the_tree():
    s = CappedSegmentRadixStrategy(MemoryStore(), {"S": 4, "cap_fraction": 0.25,
                                                   "cap_nodes": 1})
    plain = SegmentRadixStrategy(MemoryStore(), {"S": 4})
    seen = set()
    for t, ids in enumerate(_seqs(6, 80)):
        for x in (s, plain):
            x.insert(ids, metas_of(ids, t))
        st_ = s.stats()
        assert st_["cap_fraction"] == 0.25
        assert st_["cap_nodes_effective"] == max(1, -(-st_["nodes"] // 4))
        assert st_["memory_nodes"] <= st_["cap_nodes_effective"]
        seen.add(st_["cap_nodes_effective"])
    assert len(seen) > 5 and max(seen) > 1                 # overrides cap_nodes=1, grows
    for ids in _seqs(6, 80):
        same_answer("fraction", s.match(ids), plain.match(ids), 0)
    assert s.stats()["spilled_nodes"] > 0
    default = CappedSegmentRadixStrategy(MemoryStore()).stats()
    assert default["cap_fraction"] == 0.0 and default["cap_nodes_effective"] == 1024
    whole = CappedSegmentRadixStrategy(MemoryStore(), {"S": 4, "cap_fraction": 1})
    for t, ids in enumerate(_seqs(6, 30)):
        whole.insert(ids, metas_of(ids, t))
    assert whole.stats()["spilled_nodes"] == 0


def test_cap_fraction_survives_recovery(tmp_path):
    store = MemoryStore()
    opts = {"S": 4, "cap_fraction": 0.1}
    s = CappedSegmentRadixStrategy(store, opts)
    for t, ids in enumerate(_seqs(7, 60)):
        s.insert(ids, metas_of(ids, t))
    s.snapshot(tmp_path)
    r = _recover(CappedSegmentRadixStrategy, store, tmp_path, None)
    assert r.opts["cap_fraction"] == 0.1
    assert r.recovery["nodes_deserialized"] == s.stats()["memory_nodes"]
    assert r.stats()["cap_nodes_effective"] == s.stats()["cap_nodes_effective"]


@pytest.mark.parametrize("value", [-0.1, 1.5, "half", "nan"])
def test_bad_cap_fraction_is_one_config_error(value):
    with pytest.raises(ConfigError, match="option cap_fraction") as e:
        CappedSegmentRadixStrategy(MemoryStore(), {"cap_fraction": value})
    assert "\n" not in str(e.value)
