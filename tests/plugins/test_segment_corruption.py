"""Every byte of a stored segment record, flipped one at a time, and the record
cut at every length: each is a counted miss, never served.

At the segment layer every damaged record reads as absent and is counted
(``corrupt_segments``).  Through the strategies that keep segments in the
store (sarp, segment-hash, segment-radix), a match over the damaged window
stops before it or finds the blocks elsewhere: it returns a correct prefix
(every block's metadata as inserted), never a block of the damaged record,
and counts the miss.  Each test prints its counts (``pytest -s``).
"""
import numpy as np
import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.memory import MemoryStore
from prefixbench.metas import make_metas
from prefixbench.plugins.segments import SegmentLayer
from prefixbench.registry import get_registry

S = 8
MS = 16
OPTS = {"sarp": {"S": S, "R": 2, "backfill": "sync", "max_retrieval": 0},
        "segment-hash": {"S": S}, "segment-radix": {"S": S}}


def damaged(raw):
    for i in range(len(raw)):
        b = bytearray(raw)
        b[i] ^= 0xFF
        yield f"flip {i}", bytes(b)
    for n in range(len(raw)):
        yield f"cut {n}", raw[:n]


def test_every_byte_of_a_segment_record_is_a_counted_miss(capsys):
    store = MemoryStore(StoreConfig())
    layer = SegmentLayer(store, S, MS)
    ids = np.arange(101, 109, dtype=np.uint64)
    seg = layer.new_segment(8, ids, make_metas(ids, 3))
    layer.write_many([seg])
    good = store.get(seg.seg_id)
    cases = 0
    for label, bad in damaged(good):
        store.put(seg.seg_id, bad)
        before = layer.corrupt_reads
        assert layer.read(seg.seg_id) is None, label
        assert layer.read_many([seg.seg_id]) == [None], label
        assert layer.corrupt_reads == before + 2, label
        cases += 1
    store.put(seg.seg_id, good)
    back = layer.read(seg.seg_id)
    assert np.array_equal(back.ids, ids) and layer.stats()["corrupt_segments"] == 2 * cases
    with capsys.disabled():
        print(f"\ncorruption, segment record ({len(good)} bytes) at the layer: {cases} cases, "
              f"{cases} counted misses, 0 served")


def seqs():
    rng = np.random.default_rng(8)
    a = rng.integers(1, 1 << 63, size=2 * S + 3, dtype=np.uint64)
    b = np.concatenate([a[:S + 2], rng.integers(1, 1 << 63, size=S, dtype=np.uint64)])
    return [a, b]


def truth():
    first = {}
    for i, q in enumerate(seqs()):
        for b, m in zip(q.tolist(), make_metas(q, i)):
            first.setdefault(b, m.tobytes())
    return first


@pytest.mark.parametrize("name", list(OPTS))
def test_every_byte_of_a_segment_under_a_strategy(capsys, name):
    cls = get_registry().get("strategy", name).factory
    first = truth()
    cases = counted = 0
    victim_len = 0
    for k, label_bad in enumerate(damaged_victim(cls, name)):
        s, store, victim, label, bad = label_bad
        victim_len = victim_len or len(store.get(victim))
        store.put(victim, bad)
        before = s.stats().get("corrupt_segments", 0)
        for q in seqs():
            m = s.match(q)
            got = [bytes(x) for x in np.asarray(m.metas)]
            assert got == [first[b] for b in q[:m.n_blocks].tolist()], (label, m.n_blocks)
        counted += s.stats().get("corrupt_segments", 0) > before
        cases += 1
    assert counted == cases, (counted, cases)
    with capsys.disabled():
        print(f"\ncorruption, segment record ({victim_len} bytes) under {name}: {cases} cases, "
              f"{counted} counted misses, 0 served wrong")


def damaged_victim(cls, name):
    """For every damage of the first sequence's whole-window record of window 1
    (in any key space the strategy uses): a fresh index
    (a strategy remembers a corrupt id and never reads it again) with it applied."""
    def fresh():
        store = MemoryStore(StoreConfig())
        s = cls(store, OPTS[name])
        for i, q in enumerate(seqs()):
            s.insert(q, make_metas(q, i))
        victim = next(k for k, v in store.scan(0) if v[:4] == b"PBSG"
                      and int.from_bytes(v[8:12], "little") == S        # a whole window
                      and int.from_bytes(v[24:32], "little") == S       # the second one
                      and int.from_bytes(v[40:48], "little") == int(seqs()[0][S]))
        return s, store, victim
    s, store, victim = fresh()
    good = store.get(victim)
    for label, bad in damaged(good):
        s, store, victim = fresh()
        yield s, store, victim, label, bad
