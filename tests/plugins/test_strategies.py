"""Behaviour of the built-in exact strategies: radix, dram-blockhash, ssd-blockhash.

Random branching session sets (token trees chained into block IDs, inserts
and matches interleaved) drive every strategy; the compiled radix tree must
equal its pure-Python reference and a brute-force model, and the block-hash
strategies must return exactly the radix oracle's answer, metadata included.
The strategies are built directly, not through the registry.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench.engines.memory import MemoryStore
from prefixbench.blockids import chain_ids
from prefixbench.errors import ConfigError
from prefixbench.plugins import blockhash, radix
# BlockHashTable / RadixTree: the compiled twins, or the references with PREFIXBENCH_PURE=1
from prefixbench.plugins.blockhash import (BlockHashTable, BlockHashTablePy, DramBlockHashStrategy,
                                           SsdBlockHashStrategy)
from prefixbench.plugins.radix import RadixStrategy, RadixTree, RadixTreePy
from prefixbench.plugins.strategy import IndexStrategy, Match

from engine_support import ENGINE_NAMES, Stores

U64_MAX = (1 << 64) - 1
H0 = 0x5EED
MS = 16

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----------------------------------------------------------------------------- helpers
def ids_of(tokens) -> np.ndarray:
    return chain_ids(np.asarray(tokens, dtype=np.uint64), H0)


def metas_of(ids: np.ndarray, tag: int, meta_size: int = MS) -> np.ndarray:
    """Deterministic per (block, inserting op): first-writer-wins is observable."""
    words = np.empty((len(ids), 2), dtype=np.uint64)
    words[:, 0] = ids
    words[:, 1] = tag
    raw = words.view(np.uint8).reshape(len(ids), 16)
    return np.ascontiguousarray(np.tile(raw, (1, -(-meta_size // 16)))[:, :meta_size])


class BruteForce:
    """The obvious model: every inserted prefix (as a token tuple) -> its first metadata."""

    def __init__(self):
        self.known: dict[tuple, bytes] = {}

    def insert(self, tokens, metas):
        for j in range(len(tokens)):
            self.known.setdefault(tuple(tokens[:j + 1]), metas[j].tobytes())

    def match(self, tokens):
        rows = []
        for j in range(len(tokens)):
            v = self.known.get(tuple(tokens[:j + 1]))
            if v is None:
                break
            rows.append(v)
        return len(rows), b"".join(rows)


@st.composite
def tree_of_sequences(draw, max_seqs=10, alphabet=4):
    """Token sequences forming a random tree: each may start with a prefix of an
    earlier one."""
    seqs = []
    for _ in range(draw(st.integers(1, max_seqs))):
        base = []
        if seqs and draw(st.booleans()):
            parent = draw(st.sampled_from(seqs))
            base = parent[:draw(st.integers(0, len(parent)))]
        seqs.append(base + draw(st.lists(st.integers(0, alphabet - 1), max_size=14)))
    return seqs


@st.composite
def session_sets(draw, max_seqs=10, alphabet=4):
    """Token sequences forming a random tree, plus interleaved insert/match ops.

    A small alphabet makes siblings collide often, so edges split at many depths.
    Each op is (kind, sequence index, cut, extra tokens): it acts on
    ``seq[:cut] + extra``, so partial inserts, extensions and misses all occur.
    """
    seqs = draw(tree_of_sequences(max_seqs, alphabet))
    ops = draw(st.lists(st.tuples(st.sampled_from(("insert", "match")),
                                  st.integers(0, len(seqs) - 1),
                                  st.integers(0, 30),
                                  st.lists(st.integers(0, alphabet - 1), max_size=3)),
                        min_size=1, max_size=40))
    return [(kind, seqs[i][:cut] + extra) for kind, i, cut, extra in ops]


def assert_same_match(got: Match, want: Match, where=""):
    assert got.n_blocks == want.n_blocks, where
    assert got.metas.dtype == np.uint8
    assert got.metas.shape == (want.n_blocks, want.metas.shape[1]), where
    assert np.array_equal(got.metas, want.metas), where


def assert_same_entries(strategies: dict, oracle) -> None:
    entries = oracle.stats()["entries"]
    for name, s in strategies.items():
        assert s.stats()["entries"] == entries, name


# ----------------------------------------------------------------------------- radix
@pytest.mark.compiled
@SETTINGS
@given(session_sets())
def test_radix_compiled_equals_reference_and_model(ops):
    fast, ref, model = RadixTree(MS, 1), RadixTreePy(MS), BruteForce()
    for step, (kind, tokens) in enumerate(ops):
        ids = ids_of(tokens)
        if kind == "insert":
            m = metas_of(ids, step)
            fast.insert(ids, m)
            ref.insert(ids, m)
            model.insert(tokens, m)
            assert (fast.nodes, fast.entries) == (ref.nodes, ref.entries)
            assert fast.entries == len(model.known)
        else:
            got, want = fast.match(ids), ref.match(ids)
            assert_same_match(got, want, f"step {step}")
            n, raw = model.match(tokens)
            assert got.n_blocks == n and got.metas.tobytes() == raw
            assert fast.match_len(ids) == ref.match_len(ids) == n


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 3), max_size=20), min_size=1, max_size=12))
def test_radix_every_inserted_prefix_matches_fully(seqs):
    tree = RadixTree(MS, 1)
    for t, tokens in enumerate(seqs):
        ids = ids_of(tokens)
        tree.insert(ids, metas_of(ids, t))
    for tokens in seqs:
        for cut in range(len(tokens) + 1):
            assert tree.match_len(ids_of(tokens[:cut])) == cut


def test_radix_split_and_extension_shape():
    """A divergence splits an edge into two nodes; an extension adds a child."""
    t = RadixTree(MS)
    a = np.array([1, 2, 3, 4], dtype=np.uint64)
    t.insert(a, metas_of(a, 0))
    assert (t.nodes, t.entries) == (1, 4)
    b = np.array([1, 2, 9], dtype=np.uint64)
    t.insert(b, metas_of(b, 1))
    assert (t.nodes, t.entries) == (3, 5)          # [1,2] -> {[3,4], [9]}
    c = np.array([1, 2, 3, 4, 5, 6], dtype=np.uint64)
    t.insert(c, metas_of(c, 2))
    assert (t.nodes, t.entries) == (4, 7)
    t.insert(a[:3], metas_of(a[:3], 3))            # ends inside an edge: nothing to add
    assert (t.nodes, t.entries) == (4, 7)
    m = t.match(np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.uint64))
    assert m.n_blocks == 6
    assert np.array_equal(m.metas[:4], metas_of(a, 0))
    assert np.array_equal(m.metas[4:], metas_of(c, 2)[4:])


def test_radix_strategy_contract():
    s = RadixStrategy()
    assert isinstance(s, IndexStrategy) and s.exact and not s.needs_store
    ids = ids_of(range(30))
    s.insert(ids, metas_of(ids, 1))
    st_ = s.stats()
    assert st_["entries"] == 30 and st_["nodes"] == 1 and st_["memory_bytes"] > 0


# ----------------------------------------------------------------------------- block hash vs oracle
def _blockhash_strategies(stores: Stores, engine: str):
    return {
        "dram-blockhash": DramBlockHashStrategy(options={"initial_capacity": 0}),
        "ssd-blockhash": SsdBlockHashStrategy(stores.open(engine)),
        "ssd-blockhash/batch": SsdBlockHashStrategy(stores.open(engine),
                                                    {"probe": "batch", "batch_start": 1}),
        "ssd-blockhash/bisect": SsdBlockHashStrategy(stores.open(engine),
                                                     {"insert_probe": "bisect"}),
    }


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@settings(SETTINGS, max_examples=150)
@given(ops=session_sets())
def test_blockhash_strategies_equal_radix_oracle(engine, ops):
    oracle = RadixStrategy()
    with Stores() as stores:
        strategies = _blockhash_strategies(stores, engine)
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
                    assert_same_match(s.match(ids), want, f"{name} step {step}")
        assert_same_entries(strategies, oracle)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_first_writer_wins_everywhere(engine):
    with Stores() as stores:
        everyone = {"radix": RadixStrategy(), "radix-py": RadixTreePy(),
                    **_blockhash_strategies(stores, engine)}
        short, long_ = ids_of([7, 8, 9]), ids_of([7, 8, 9, 10, 11])
        for name, s in everyone.items():
            s.insert(short, metas_of(short, 1))
            s.insert(long_, metas_of(long_, 2))
            s.insert(long_, metas_of(long_, 3))
            m = s.match(long_)
            assert m.n_blocks == 5, name
            assert np.array_equal(m.metas[:3], metas_of(short, 1)), name
            assert np.array_equal(m.metas[3:], metas_of(long_, 2)[3:]), name


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_empty_inputs(engine):
    with Stores() as stores:
        everyone = {"radix": RadixStrategy(), "radix-py": RadixTreePy(),
                    "table": BlockHashTable(), "table-py": BlockHashTablePy(),
                    **_blockhash_strategies(stores, engine)}
        empty_ids = np.empty(0, dtype=np.uint64)
        empty_metas = np.empty((0, MS), dtype=np.uint8)
        ids = ids_of([1, 2, 3])
        for name, s in everyone.items():
            for _ in range(2):   # on an empty index, then on a non-empty one
                m = s.match(empty_ids)
                assert m.n_blocks == 0 and m.metas.shape == (0, MS), name
                s.insert(empty_ids, empty_metas)
                m = s.match(ids_of([5]))
                assert m.n_blocks == 0 and m.metas.shape == (0, MS), name
                s.insert(ids, metas_of(ids, 0))


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_extreme_block_ids(engine):
    """0 and 2**64 - 1 are ordinary ids (the hash table's empty marker is 0).

    As with chained ids, each id stands for one prefix only, so the per-block
    and per-path views agree.
    """
    seqs = [[0, U64_MAX, 1], [0, U64_MAX, 2, 3], [U64_MAX - 1, 1 << 63], [4, 0xFFFF_FFFF]]
    with Stores() as stores:
        everyone = {"radix": RadixStrategy(), "radix-py": RadixTreePy(),
                    "table": BlockHashTable(initial_capacity=0),
                    "table-py": BlockHashTablePy(),
                    **_blockhash_strategies(stores, engine)}
        for t, seq in enumerate(seqs):
            ids = np.array(seq, dtype=np.uint64)
            for s in everyone.values():
                s.insert(ids, metas_of(ids, t))
        tags = {0: 0, U64_MAX: 0, 1: 0, 2: 1, 3: 1, U64_MAX - 1: 2, 1 << 63: 2}
        for query, n in [([0, U64_MAX, 1, 5], 3), ([0, U64_MAX, 2, 3, 9], 4),
                         ([U64_MAX - 1, 1 << 63], 2), ([U64_MAX - 1, 7], 1), ([9, 7], 0)]:
            want = np.concatenate([metas_of(np.array([k], np.uint64), tags[k])
                                   for k in query[:n]] or [np.empty((0, MS), np.uint8)])
            for name, s in everyone.items():
                m = s.match(np.array(query, dtype=np.uint64))
                assert m.n_blocks == n, (name, query)
                assert np.array_equal(m.metas, want), (name, query)


def test_meta_size_other_than_16():
    for cls in (RadixStrategy, DramBlockHashStrategy):
        s = cls(meta_size=5)
        ids = ids_of([1, 2, 3])
        s.insert(ids, metas_of(ids, 9, 5))
        m = s.match(ids)
        assert m.metas.shape == (3, 5) and np.array_equal(m.metas, metas_of(ids, 9, 5))
    s = SsdBlockHashStrategy(MemoryStore(), meta_size=40)
    ids = ids_of([4, 5])
    s.insert(ids, metas_of(ids, 2, 40))
    assert np.array_equal(s.match(ids).metas, metas_of(ids, 2, 40))


def test_inputs_are_converted_or_rejected():
    for s in (RadixStrategy(), DramBlockHashStrategy(), SsdBlockHashStrategy(MemoryStore()),
              RadixTreePy(), BlockHashTablePy()):
        s.insert([3, 4, 5], [[1] * MS, [2] * MS, [3] * MS])        # lists are converted
        assert s.match(np.array([3, 4], dtype=np.int64)).n_blocks == 2
        assert s.match(np.array([3, 4, 5, 6], dtype=np.uint64)[::1]).n_blocks == 3
        with pytest.raises(ValueError, match="metas"):
            s.insert(np.array([1, 2], np.uint64), np.zeros((3, MS), np.uint8))
        with pytest.raises(ValueError, match="metas"):
            s.insert(np.array([1, 2], np.uint64), np.zeros((2, MS + 1), np.uint8))
        with pytest.raises(ValueError):
            s.match(np.zeros((2, 2), dtype=np.uint64))


def test_exact_strategies_agree_on_the_mooncake_trace():
    """The first 3,000 requests of the real trace: same answers, same entry counts."""
    import gzip
    import json
    import os

    from conftest import MOONCAKE_CONVERSATION as trace
    if not os.path.exists(trace):
        pytest.skip("the Mooncake sample trace is not available")
    with gzip.open(trace, "rt") as f:
        reqs = [ids_of(json.loads(line)["hash_ids"]) for _, line in zip(range(3000), f)]
    oracle, py = RadixStrategy(), RadixTreePy()
    others = [DramBlockHashStrategy(), SsdBlockHashStrategy(MemoryStore())]
    hit = 0
    for r, ids in enumerate(reqs):
        want = oracle.match(ids)
        hit += want.n_blocks
        for s in [py, *others]:
            assert_same_match(s.match(ids), want, f"request {r}")
        m = metas_of(ids, r)
        for s in [oracle, py, *others]:
            s.insert(ids, m)
    assert hit > 0
    assert oracle.stats()["nodes"] == py.nodes
    assert all(s.stats()["entries"] == oracle.stats()["entries"] for s in others)


# ----------------------------------------------------------------------------- ssd-blockhash cost model
def test_ssd_blockhash_reads_one_block_per_probe_and_writes_only_new_blocks():
    store = MemoryStore()
    s = SsdBlockHashStrategy(store)
    a = ids_of(range(10))
    s.insert(a, metas_of(a, 0))
    assert store.stats().writes == 10 and store.stats().write_batches == 1
    b = ids_of(list(range(6)) + [99, 98])
    s.insert(b, metas_of(b, 1))
    assert store.stats().writes == 12 and store.stats().write_batches == 2
    s.insert(b, metas_of(b, 2))                                       # nothing new: no write
    assert store.stats().write_batches == 2
    store.reset_stats()
    assert s.match(ids_of(list(range(8)) + [5])).n_blocks == 8
    assert store.stats().reads == 9 and store.stats().read_calls == 9   # 8 hits + the miss
    assert s.match(a).n_blocks == 10
    assert store.stats().reads == 19
    st_ = s.stats()
    assert st_["matches"] == 2 and st_["store_reads_per_match"] == 9.5 and st_["entries"] == 12


def test_ssd_blockhash_bisect_insert_reads_log_n_blocks_and_writes_the_same():
    """insert_probe=bisect finds the first new block in ceil(log2(n+1)) gets (+1 under the
    insert lock) and writes
    exactly what the batch probe writes (first writer's metadata kept)."""
    stores = {p: MemoryStore() for p in ("batch", "bisect")}
    strats = {p: SsdBlockHashStrategy(st, {"insert_probe": p}) for p, st in stores.items()}
    a = ids_of(range(1000))
    b = ids_of(list(range(700)) + list(range(5000, 5300)))
    for k, ids in enumerate((a, b, a[:10], b)):
        for p, s in strats.items():
            stores[p].reset_stats()
            s.insert(ids, metas_of(ids, k))
        if k == 1:
            st = stores["bisect"].stats()
            assert st.read_calls <= 12 and st.writes == 300
    assert dict(stores["batch"]._data) == dict(stores["bisect"]._data)
    assert strats["bisect"].stats()["entries"] == 1300



_REUSE_VARIANTS = {
    "reuse": {},
    "reuse/batch-probe": {"probe": "batch", "batch_start": 1},
    "reuse/bisect": {"insert_probe": "bisect"},
    "no-reuse": {"insert_reuse": False},
}


@st.composite
def replayed_requests(draw):
    """Requests as a replay issues them (match a context, then insert it with its
    output); between the two, sometimes a remove or another thread's insert."""
    seqs = draw(tree_of_sequences(8))
    reqs = draw(st.lists(st.tuples(st.integers(0, len(seqs) - 1), st.integers(0, 30),
                                   st.lists(st.integers(0, 3), max_size=4),
                                   st.sampled_from(("none", "none", "remove", "other")),
                                   st.integers(0, 30)),
                         min_size=1, max_size=30))
    return [(seqs[i][:cut], extra, between, at) for i, cut, extra, between, at in reqs]


@SETTINGS
@given(replayed_requests())
def test_ssd_blockhash_insert_after_its_match_equals_the_oracle(reqs):
    """An insert that starts where its match stopped stores what the oracle stores,
    first writer's metadata kept, also when a remove (the blocks it found may be
    gone) or another insert (the block it saw missing may be there) came between."""
    oracle = RadixStrategy()
    strats = {k: SsdBlockHashStrategy(MemoryStore(), o) for k, o in _REUSE_VARIANTS.items()}
    for step, (context, output, between, at) in enumerate(reqs):
        q, full = ids_of(context), ids_of(context + output)
        want = oracle.match(q)
        for name, s in strats.items():
            assert_same_match(s.match(q), want, f"{name} step {step}")
        if between == "remove" and len(q):
            part = q[at % len(q):at % len(q) + 2]
            oracle.remove(part)
            for s in strats.values():
                s.remove(part)
        elif between == "other":
            # another thread inserts a longer piece of the same request first
            other = full[:len(q) + 1 + at % 3]
            m = metas_of(other, 10_000 + step)
            oracle.insert(other, m)
            for s in strats.values():
                t = threading.Thread(target=s.insert, args=(other, m))
                t.start()
                t.join()
        m = metas_of(full, step)
        oracle.insert(full, m)
        for s in strats.values():
            s.insert(full, m)
        want = oracle.match(full)
        for name, s in strats.items():
            assert_same_match(s.match(full), want, f"{name} step {step} after insert")
    assert_same_entries(strats, oracle)


def test_ssd_blockhash_insert_after_its_match_reads_one_block():
    """After a match that stopped at a missing block, the insert reads only that block
    again (under the lock) and writes the rest; after a match that found the whole
    query, only the output's blocks; insert_reuse=false probes every block."""
    stores = {k: MemoryStore() for k in ("reuse", "no-reuse")}
    strats = {k: SsdBlockHashStrategy(stores[k], {"insert_reuse": k == "reuse"})
              for k in stores}
    a = ids_of(range(100))
    b = ids_of(list(range(100)) + list(range(500, 520)))
    for s in strats.values():
        s.insert(a, metas_of(a, 0))
    reads = {}
    for k, s in strats.items():
        s.match(ids_of(list(range(100)) + [500, 501]))    # 100 found, stops at block 100
        stores[k].reset_stats()
        s.insert(b, metas_of(b, 1))
        reads[k] = stores[k].stats().reads
        assert stores[k].stats().writes == 20
    assert reads == {"reuse": 1, "no-reuse": 120 + 20}
    c = ids_of(list(range(100)) + list(range(500, 520)) + [7, 8, 9])
    for k, s in strats.items():
        s.match(b)                                          # the whole query is stored
        stores[k].reset_stats()
        s.insert(c, metas_of(c, 2))
        reads[k] = stores[k].stats().reads
    assert reads == {"reuse": 3 + 3, "no-reuse": 123 + 3}
    assert dict(stores["reuse"]._data) == dict(stores["no-reuse"]._data)
    st_ = strats["reuse"].stats()
    assert st_["inserts"] == 3 and st_["inserts_from_match"] == 2
    assert strats["no-reuse"].stats()["inserts_from_match"] == 0


def test_ssd_blockhash_insert_of_another_prefix_does_not_use_the_match():
    """The memo applies only to a request that shares the prefix the match found."""
    store = MemoryStore()
    s = SsdBlockHashStrategy(store)
    a = ids_of(range(10))
    s.insert(a, metas_of(a, 0))
    s.match(ids_of(list(range(10)) + [50]))
    other = ids_of([9] * 12)
    s.insert(other, metas_of(other, 1))
    assert s.stats()["inserts_from_match"] == 0
    assert s.match(other).n_blocks == 12 and s.match(a).n_blocks == 10


def test_insert_known_prefix_writes_what_insert_writes():
    """Bulk builds tell the strategy how many leading blocks are indexed: ssd-blockhash
    then writes only the rest, unprobed, and ends with the same store as insert."""
    stores = {p: MemoryStore() for p in ("insert", "hint")}
    strats = {p: SsdBlockHashStrategy(st) for p, st in stores.items()}
    a = ids_of(range(50))
    b = ids_of(list(range(30)) + list(range(900, 920)))
    for k, (ids, known) in enumerate(((a, 0), (b, 30), (a[:10], 10))):
        strats["insert"].insert(ids, metas_of(ids, k))
        stores["hint"].reset_stats()
        strats["hint"].insert_known_prefix(ids, metas_of(ids, k), known)
        assert stores["hint"].stats().reads == 0
    assert dict(stores["insert"]._data) == dict(stores["hint"]._data)
    assert strats["hint"].stats()["entries"] == 70
    with pytest.raises(ValueError):
        strats["hint"].insert_known_prefix(a, metas_of(a, 9), 51)
    r = RadixStrategy()                    # default: the hint is ignored, insert runs
    r.insert_known_prefix(b, metas_of(b, 1), 30)
    assert r.match(b).n_blocks == len(b)

def test_ssd_blockhash_batch_probe_uses_growing_chunks():
    store = MemoryStore()
    s = SsdBlockHashStrategy(store, {"probe": "batch", "batch_start": 2})
    a = ids_of(range(20))
    s.insert(a, metas_of(a, 0))
    store.reset_stats()
    assert s.match(ids_of(list(range(11)) + [77] * 10)).n_blocks == 11
    assert store.stats().read_calls == 3          # chunks of 2, 4, 8
    assert store.stats().reads == 14


def test_ssd_blockhash_rejects_a_value_of_the_wrong_size():
    from prefixbench.errors import StoreError
    store = MemoryStore()
    s = SsdBlockHashStrategy(store)
    ids = ids_of([1, 2])
    store.put(int(ids[0]), b"short")
    with pytest.raises(StoreError, match="5 bytes, expected 16"):
        s.match(ids)


# ----------------------------------------------------------------------------- the hash table itself
KEYS = st.one_of(st.sampled_from([0, 1, 2, U64_MAX, U64_MAX - 1, 1 << 63, 1 << 32]),
                 st.integers(0, 64), st.integers(0, U64_MAX))


@pytest.mark.compiled
@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(("insert", "lookup", "match")),
                          st.lists(KEYS, max_size=30)), min_size=1, max_size=30),
       st.sampled_from([0.05, 0.5, 0.75, 0.95]))
def test_hash_table_equals_reference(ops, load):
    fast, ref = BlockHashTable(MS, 0, load), BlockHashTablePy(MS)
    for step, (kind, keys) in enumerate(ops):
        ids = np.array(keys, dtype=np.uint64)
        if kind == "insert":
            m = metas_of(ids, step)
            assert fast.insert(ids, m) == ref.insert(ids, m)
            assert len(fast) == len(ref)
            assert len(fast) - (0 in ref._d) <= fast.capacity * load
        elif kind == "lookup":
            (f1, m1), (f2, m2) = fast.lookup(ids), ref.lookup(ids)
            assert np.array_equal(f1, f2) and np.array_equal(m1, m2)
        else:
            assert_same_match(fast.match(ids), ref.match(ids), f"step {step}")
    assert fast.counters() == ref.counters()


def test_hash_table_grows_and_keeps_everything():
    t = BlockHashTable(MS, 0, 0.75)
    first_cap = t.capacity
    keys = np.arange(0, 50_000, dtype=np.uint64) * np.uint64(0x10000)   # clustered low bits
    m = metas_of(keys, 4)
    assert t.insert(keys, m) == len(keys)
    assert t.capacity > first_cap and len(t) == len(keys)
    found, got = t.lookup(keys)
    assert found.all() and np.array_equal(got, m)
    found, _ = t.lookup(keys + np.uint64(1))
    assert not found[1:].any()
    t.reserve(200_000)
    assert t.capacity * 0.75 >= 200_000 and len(t) == len(keys)
    assert np.array_equal(t.lookup(keys)[1], m)
    assert t.nbytes == t.capacity * (8 + MS) + MS


# ----------------------------------------------------------------------------- threads
@pytest.mark.parametrize("cls", [RadixStrategy, DramBlockHashStrategy])
def test_concurrent_inserts_and_matches_stay_consistent(cls):
    """Threads inserting overlapping sessions end with the same index as one thread."""
    rng = np.random.default_rng(5)
    sessions = [[int(x) for x in rng.integers(0, 3, size=rng.integers(1, 60))] for _ in range(400)]
    shared, serial = cls(), cls()
    for tokens in sessions:
        ids = ids_of(tokens)
        serial.insert(ids, metas_of(ids, 0))     # metas depend on the block only
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
    assert not errors
    assert shared.stats()["entries"] == serial.stats()["entries"]
    for tokens in sessions:
        ids = ids_of(tokens + [7])
        assert_same_match(shared.match(ids), serial.match(ids))


# ----------------------------------------------------------------------------- options and plugins
# every declared option's bad values (type, range, choices) and unknown names are
# checked on every built-in by the strategy kit (tests/test_kits.py)
def test_bad_meta_size_and_missing_store_raise_config_error():
    with pytest.raises(ConfigError, match="meta_size"):
        RadixStrategy(meta_size=0)
    with pytest.raises(ConfigError, match="meta_size"):
        DramBlockHashStrategy(meta_size=0)
    with pytest.raises(ConfigError, match="needs an engine"):
        SsdBlockHashStrategy()


def test_options_are_parsed_from_strings():
    s = DramBlockHashStrategy(options={"max_load": "0.5", "initial_capacity": "100"})
    assert s.opts == {"max_load": 0.5, "initial_capacity": 100}
    assert SsdBlockHashStrategy(MemoryStore(), {"probe": "batch"}).opts["probe"] == "batch"


def test_modules_register_their_strategies():
    got = {}
    for mod in (radix, blockhash):
        mod.prefixbench_register_strategies(register=lambda name, cls: got.__setitem__(name, cls))
    assert got == {"radix": RadixStrategy, "dram-blockhash": DramBlockHashStrategy,
                   "ssd-blockhash": SsdBlockHashStrategy}
    assert all(cls.exact for cls in got.values())
    assert SsdBlockHashStrategy.needs_store and not DramBlockHashStrategy.needs_store
