"""The compiled KV-event decoder and apply loop (workloads/_kvevents.pyx) against their
pure-Python reference (workloads/_kvevents_ref.py): the same arrays, the same error
line, the same calls on the strategy and the same counters, over generated batches in
both forms."""
import importlib
import importlib.util

import numpy as np
import pytest

from prefixbench.errors import TraceFormatError

msgpack = pytest.importorskip("msgpack")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

ref = importlib.import_module("prefixbench.workloads._kvevents_ref")
BUILT = importlib.util.find_spec("prefixbench.workloads._kvevents") is not None
needs_build = pytest.mark.skipif(not BUILT, reason="compiled decoder not built")
comp = importlib.import_module("prefixbench.workloads._kvevents") if BUILT else None

POOL = [1, 2, 3, 4, 5, 6, 7, 8, (1 << 64) - 1, 1 << 63]

u64 = st.integers(0, (1 << 64) - 1)
hash_value = st.one_of(st.sampled_from(POOL), u64, st.integers(-(1 << 63), -1),
                       st.binary(min_size=0, max_size=40))
odd = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=4),
                st.integers(-3, 3), st.lists(st.integers(0, 5), max_size=3))


@st.composite
def event(draw, positional: bool):
    kind = draw(st.sampled_from(["BlockStored"] * 4 + ["BlockRemoved"] * 2
                                + ["AllBlocksCleared", "Weird"]))
    hashes = draw(st.lists(hash_value, max_size=5))
    if draw(st.integers(0, 30)) == 0:
        hashes = draw(st.lists(odd, min_size=1, max_size=2))         # a bad hash list
    parent = draw(st.one_of(st.none(), st.sampled_from(POOL), u64, st.binary(max_size=9),
                            odd if draw(st.integers(0, 20)) == 0 else st.none()))
    toks = draw(st.one_of(st.none(), st.lists(st.integers(0, 70000), max_size=40)))
    bs = draw(st.one_of(st.none(), st.integers(0, 32), odd if draw(st.integers(0, 20)) == 0
                        else st.just(16)))
    if positional:
        if kind == "BlockStored":
            ev = ["BlockStored", hashes, parent, toks, bs, None, "GPU", None, None, None]
            ev = ev[:draw(st.integers(2, len(ev)))]
        elif kind == "BlockRemoved":
            ev = ["BlockRemoved", hashes, "GPU"][:draw(st.integers(2, 3))]
        else:
            ev = [kind]
        return ev
    ev = {"type": kind}
    if kind in ("BlockStored", "BlockRemoved", "Weird"):
        ev["block_hashes"] = hashes
        ev["medium"] = draw(st.sampled_from(["GPU", "CPU", "ßü"]))
    if kind == "BlockStored":
        ev.update(parent_block_hash=parent, token_ids=toks, block_size=bs, lora_id=None,
                  lora_name=None)
        if draw(st.booleans()):
            ev["extra_keys"] = draw(st.one_of(st.none(), st.just([None] * len(hashes)),
                                              st.lists(st.none(), max_size=2)))
    if draw(st.integers(0, 10)) == 0:
        ev["group_idx"] = draw(odd)
    if draw(st.integers(0, 30)) == 0:
        del ev["type"]
    return ev


@st.composite
def payload(draw):
    positional = draw(st.booleans())
    events = draw(st.lists(event(positional), max_size=6))
    ts = draw(st.one_of(st.floats(allow_nan=False), st.integers(0, 1 << 40), st.none()))
    rank = draw(st.one_of(st.none(), st.integers(0, 70000)))
    if draw(st.booleans()):
        obj = {"ts": ts, "events": events, "data_parallel_rank": rank}
    else:
        obj = [ts, events] + ([rank] if draw(st.booleans()) else [])
    raw = msgpack.packb(obj, use_bin_type=True)
    cut = draw(st.integers(0, 12))
    if cut == 1:
        raw = raw[:draw(st.integers(0, max(0, len(raw) - 1)))]        # truncated
    elif cut == 2 and raw:
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1:]  # one byte changed
    elif cut == 3:
        raw += b"\x00"                                                # trailing bytes
    return raw


def outcome(mod, raw: bytes, strict: bool):
    try:
        return ("ok", mod.decode_payload(raw, "f: frame 1", 1, strict))
    except TraceFormatError as e:
        return ("error", str(e))


def same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1] == b[1]
    x, y = a[1], b[1]
    return (x[:3] == y[:3] and all(np.array_equal(p, q) and p.dtype == q.dtype
                                   for p, q in zip(x[3:8], y[3:8]))
            and x[8] == y[8] and x[9] == y[9])


@needs_build
@settings(max_examples=400, deadline=None)
@given(payload(), st.booleans())
def test_compiled_decoder_gives_the_reference_answer_or_error(raw, strict):
    a, b = outcome(comp, raw, strict), outcome(ref, raw, strict)
    assert same(a, b), (raw, a, b)


@needs_build
def test_fast_path_shapes_and_both_hash_encodings():
    digest = bytes(range(32))
    raw = msgpack.packb({"ts": 2.5, "data_parallel_rank": 3, "events": [
        {"type": "BlockStored", "block_hashes": [7, -1, digest], "parent_block_hash": digest[:4],
         "token_ids": list(range(48)), "block_size": 16, "medium": "GPU"},
        {"type": "BlockRemoved", "block_hashes": [7]}, {"type": "AllBlocksCleared"}]},
        use_bin_type=True)
    b = comp.decode_payload(raw, "f", 1)
    assert b[:3] == (2.5, 3, 3)
    assert b[3].tolist() == [comp.STORED, comp.REMOVED, comp.CLEARED]
    assert b[4].tolist() == [0, 3, 4, 4]
    assert b[5].tolist() == [7, (1 << 64) - 1, int.from_bytes(digest[-8:], "big"), 7]
    assert b[6].tolist() == [0x00010203, 0, 0] and b[7].tolist() == [1, 0, 0]
    assert b[9] == (1, 1, 1, 3, 1)
    assert same(("ok", b), outcome(ref, raw, False))


def test_reference_error_names_the_frame_and_event():
    raw = msgpack.packb({"ts": 0, "events": [{"type": "BlockStored", "block_hashes": [1.5]}]})
    with pytest.raises(TraceFormatError, match=r"^f: frame 1 event 0: block_hashes\[0\] is 1.5"):
        ref.decode_payload(raw, "f: frame 1", 1)
    if BUILT:
        with pytest.raises(TraceFormatError, match=r"^f: frame 1 event 0: block_hashes\[0\]"):
            comp.decode_payload(raw, "f: frame 1", 1)


# -- the apply loop -----------------------------------------------------------------
class _Match:
    def __init__(self, n):
        self.n_blocks = n


class Recorder:
    """An exact per-worker index that logs every call it gets."""

    def __init__(self, max_workers=1, supports_remove=True):
        self.max_workers = max_workers
        self.supports_remove = supports_remove
        self.held: dict = {}
        self.log: list = []

    def match(self, ids):
        n = 0
        for h in ids.tolist():
            if not self.held.get(h):
                break
            n += 1
        self.log.append(("match", tuple(ids.tolist()), n))
        return _Match(n)

    def insert(self, ids, metas, worker=0):
        assert metas.shape == (len(ids), 16) and metas.dtype == np.uint8
        self.log.append(("insert", tuple(ids.tolist()), metas.tobytes(), worker))
        for h in ids.tolist():
            self.held.setdefault(h, set()).add(worker)

    def remove(self, ids, worker=None):
        self.log.append(("remove", tuple(ids.tolist()), worker))
        for h in ids.tolist():
            s = self.held.get(h, set())
            s.discard(worker) if worker is not None else s.clear()
        return 0

    def clear(self, worker=None):
        self.log.append(("clear", worker))
        for s in self.held.values():
            s.discard(worker)


small = st.sampled_from(list(range(1, 13)))


@st.composite
def batch_tuple(draw):
    kinds, parts, parents, has = [], [], [], []
    for _ in range(draw(st.integers(0, 5))):
        k = draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
        kinds.append(k)
        parts.append([] if k == 2 else draw(st.lists(small, max_size=4)))
        hp = k == 0 and draw(st.booleans())
        parents.append(draw(small) if hp else 0)
        has.append(1 if hp else 0)
    offs = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
    hashes = np.array([h for p in parts for h in p], dtype=np.uint64)
    return (0.0, draw(st.integers(0, 3)), len(kinds), np.array(kinds, dtype=np.int8), offs,
            hashes, np.array(parents, dtype=np.uint64), np.array(has, dtype=np.uint8), {},
            (0, 0, 0, 0, 0))


@needs_build
@settings(max_examples=300, deadline=None)
@given(st.lists(batch_tuple(), max_size=12), st.sampled_from([1, 2, 64]), st.booleans(),
       st.integers(0, 6), st.booleans())
def test_compiled_apply_makes_the_reference_calls(batches, max_w, can_remove, memory, oracle):
    runs = []
    for mod in (comp, ref):
        s = Recorder(max_w, can_remove)
        o = Recorder(4) if oracle else None
        a = mod.ChainApply(s, o, memory, 16)
        for b in batches:
            a.apply(b)
        runs.append((s.log, o.log if o else None, a.counters()))
    assert runs[0] == runs[1]


@needs_build
def test_apply_refuses_a_batch_that_is_not_one():
    a = comp.ChainApply(Recorder(), None, 8, 16)
    bad = (0.0, 0, 1, np.zeros(1, dtype=np.int8), np.array([0, 5], dtype=np.int64),
           np.zeros(2, dtype=np.uint64), np.zeros(1, dtype=np.uint64),
           np.zeros(1, dtype=np.uint8), {}, (0,) * 5)
    with pytest.raises(ValueError, match="offsets outside the hashes"):
        a.apply(bad)


def test_reference_apply_rebuilds_chains_and_counts_misses_and_unknown_parents():
    s = Recorder(1)
    a = ref.ChainApply(s, None, 8, 16)

    def b(kinds, parts, parents):
        offs = np.cumsum([0] + [len(p) for p in parts]).astype(np.int64)
        return (0.0, 0, len(kinds), np.array(kinds, dtype=np.int8), offs,
                np.array([h for p in parts for h in p], dtype=np.uint64),
                np.array([p or 0 for p in parents], dtype=np.uint64),
                np.array([p is not None for p in parents], dtype=np.uint8), {}, (0,) * 5)
    a.apply(b([0, 0, 1, 0], [[1, 2], [3], [3], [4]], [None, 2, None, 99]))
    assert [e for e in s.log if e[0] == "match"] == [("match", (1, 2), 0),
                                                     ("match", (1, 2, 3), 2),
                                                     ("match", (4,), 0)]
    c = a.counters()
    assert c["unknown_parents"] == 1 and c["consistency_misses"] == 0
    assert c["live_blocks"] == 3 and c["ancestor_blocks"] == 2 and c["ops"] == 4
