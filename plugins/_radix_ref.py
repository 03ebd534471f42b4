"""Pure-Python reference of :mod:`prefixbench.plugins._radix`: the same public names,
the same node numbering and splits, so the tests can hold the two trees equal on
random inputs and a snapshot of either loads in the other."""
from __future__ import annotations

import threading
from array import array

import numpy as np

from prefixbench.plugins.strategy import META_SIZE, Match, as_block_ids, as_metas

__all__ = ["RadixTree"]


def _id_list(block_ids) -> list:
    return as_block_ids(block_ids).tolist()


_NODE = np.dtype([("start", "<i8"), ("length", "<u4"), ("pad", "<u4")])   # 16 bytes
_SLOT = np.dtype([("first", "<u8"), ("parent", "<u4"), ("child", "<u4")])  # 16 bytes
_EMPTY = 0xFFFFFFFF
_M64 = (1 << 64) - 1
_HK1, _HK2 = 0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93


def _slot_index(parent: int, first: int, shift: int) -> int:
    h = first ^ ((parent * _HK1) & _M64)
    h ^= h >> 31
    return ((h * _HK2) & _M64) >> shift


class RadixTree:
    """The compiled tree's pure-Python reference: the same node table, key and
    metadata pools (a split never moves pool data), the same node numbering and
    the same ``nodes``/``entries``/``nbytes`` accounting; children live in one
    dict per node instead of the open-addressing table, which :meth:`export`
    builds (same size, same hash) so a snapshot of either tree loads in the other.
    One lock serialises matches and inserts."""

    def __init__(self, meta_size: int = META_SIZE, initial_blocks: int = 1024):
        if meta_size < 1:
            raise ValueError(f"meta_size must be >= 1, got {meta_size}")
        self.meta_size = meta_size
        self._start = [0]                 # node table; node 0 is the root (empty edge)
        self._length = [0]
        self._kids: list[dict] = [{}]     # per node: first block id of a child's edge -> child
        self._keys = array("Q")           # key pool
        self._metas = bytearray()         # metadata pool, meta_size bytes per key
        self._cap_nodes, self._cap_pool = 64, max(int(initial_blocks), 1)
        self._n_slots, self._slot_shift, self._n_used = 64, 64 - 6, 0
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- core
    def _walk(self, ids: list) -> tuple[int, list]:
        """Matched blocks and the pool runs ``(start, k)`` they came from."""
        kids, start, length, keys = self._kids, self._start, self._length, self._keys
        cur, i, n, runs = 0, 0, len(ids), []
        while i < n:
            c = kids[cur].get(ids[i])
            if c is None:
                break
            s, L = start[c], length[c]
            lim = min(L, n - i)
            k = 1
            while k < lim and keys[s + k] == ids[i + k]:
                k += 1
            runs.append((s, k))
            i += k
            if k < L:
                break
            cur = c
        return i, runs

    def _reserve(self, blocks: int) -> None:
        n_pool = len(self._keys)
        if n_pool + blocks > self._cap_pool:
            cap = self._cap_pool * 2
            while cap < n_pool + blocks:
                cap *= 2
            self._cap_pool = cap
        if len(self._start) + 2 > self._cap_nodes:
            self._cap_nodes *= 2
        while (self._n_used + 2) * 2 > self._n_slots:
            self._n_slots *= 2
            self._slot_shift -= 1

    # ---------------------------------------------------------------- API
    def match(self, block_ids) -> Match:
        ids = _id_list(block_ids)
        ms = self.meta_size
        with self._lock:
            n, runs = self._walk(ids)
            raw = b"".join(self._metas[s * ms:(s + k) * ms] for s, k in runs)
        return Match(n, np.frombuffer(raw, dtype=np.uint8).reshape(n, ms).copy())

    def match_len(self, block_ids) -> int:
        ids = _id_list(block_ids)
        with self._lock:
            return self._walk(ids)[0]

    def insert(self, block_ids, metas) -> None:
        ids = _id_list(block_ids)
        n, ms = len(ids), self.meta_size
        metas = as_metas(metas, n, ms)
        if n == 0:
            return
        if n > 0xFFFFFFFF:
            raise ValueError("a sequence of more than 2**32 - 1 blocks")
        with self._lock:
            self._reserve(n)
            kids, start, length, keys = self._kids, self._start, self._length, self._keys
            cur, i = 0, 0
            while i < n:
                c = kids[cur].get(ids[i])
                if c is None:           # a new leaf holding the rest of the sequence
                    leaf = len(start)
                    start.append(len(keys))
                    length.append(n - i)
                    kids.append({})
                    keys.extend(ids[i:])
                    self._metas += metas[i:].tobytes()
                    kids[cur][ids[i]] = leaf
                    self._n_used += 1
                    return
                s, L = start[c], length[c]
                lim = min(L, n - i)
                k = 1
                while k < lim and keys[s + k] == ids[i + k]:
                    k += 1
                if k == L:
                    cur, i = c, i + k
                    continue
                if i + k == n:
                    return              # the sequence ends inside an edge: all indexed
                # diverge after k blocks: mid takes the head, c keeps the tail
                mid = len(start)
                start.append(s)
                length.append(k)
                kids.append({keys[s + k]: c})
                start[c], length[c] = s + k, L - k
                kids[cur][ids[i]] = mid     # re-points an existing child entry
                self._n_used += 1
                cur, i = mid, i + k

    def export(self):
        """The snapshot arrays, as the compiled tree exports them."""
        with self._lock:
            n_nodes, n_pool, ms = len(self._start), len(self._keys), self.meta_size
            nodes = np.zeros(n_nodes, dtype=_NODE)
            nodes["start"] = self._start
            nodes["length"] = self._length
            keys = np.frombuffer(self._keys, dtype=np.uint64).copy() if n_pool else \
                np.empty(0, np.uint64)
            metas = np.frombuffer(bytes(self._metas), dtype=np.uint8).reshape(n_pool, ms).copy()
            n_slots, shift = self._n_slots, self._slot_shift
            slots = np.zeros(n_slots, dtype=_SLOT)
            sp, sf, sc = [_EMPTY] * n_slots, [0] * n_slots, [0] * n_slots
            mask = n_slots - 1
            for parent, d in enumerate(self._kids):
                for first, child in d.items():
                    j = _slot_index(parent, first, shift)
                    while sp[j] != _EMPTY:
                        j = (j + 1) & mask
                    sp[j], sf[j], sc[j] = parent, first, child
            slots["parent"], slots["first"], slots["child"] = sp, sf, sc
            scal = np.array([n_nodes, n_pool, n_slots, shift, self._n_used, ms], dtype=np.int64)
        return {"scalars": scal, "nodes": nodes.view(np.uint8), "keys": keys, "metas": metas,
                "slots": slots.view(np.uint8)}

    def restore(self, scalars, nodes, keys, metas, slots):
        """Replace this (empty) tree with an :meth:`export` of either implementation."""
        sc = np.ascontiguousarray(scalars, dtype=np.int64)
        nd = np.ascontiguousarray(nodes, dtype=np.uint8)
        ky = np.ascontiguousarray(keys, dtype=np.uint64)
        mt = np.ascontiguousarray(metas, dtype=np.uint8)
        sl = np.ascontiguousarray(slots, dtype=np.uint8)
        if sc.shape[0] != 6 or sc[5] != self.meta_size:
            raise ValueError("radix restore: scalars do not match this tree's meta_size")
        n_nodes, n_pool, n_slots = int(sc[0]), int(sc[1]), int(sc[2])
        if (nd.nbytes != n_nodes * _NODE.itemsize or ky.shape[0] != n_pool
                or mt.nbytes != n_pool * self.meta_size or sl.nbytes != n_slots * _SLOT.itemsize
                or n_nodes < 1 or n_slots < 64 or (n_slots & (n_slots - 1))):
            raise ValueError("radix restore: array sizes are inconsistent")
        nv = nd.reshape(-1).view(_NODE)
        sv = sl.reshape(-1).view(_SLOT)
        kids: list[dict] = [{} for _ in range(n_nodes)]
        used = sv[sv["parent"] != _EMPTY]
        for parent, first, child in zip(used["parent"].tolist(), used["first"].tolist(),
                                        used["child"].tolist()):
            kids[parent][first] = child
        with self._lock:
            self._start = nv["start"].tolist()
            self._length = nv["length"].tolist()
            self._kids = kids
            self._keys = array("Q", ky.tobytes())
            self._metas = bytearray(mt.tobytes())
            self._cap_nodes, self._cap_pool = max(n_nodes, 64), max(n_pool, 1)
            self._n_slots, self._slot_shift, self._n_used = n_slots, int(sc[3]), int(sc[4])

    @property
    def nodes(self) -> int:
        """Nodes below the root (= edges)."""
        return len(self._start) - 1

    @property
    def entries(self) -> int:
        """Blocks held on all edges (= distinct indexed prefixes)."""
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """What the compiled tree would allocate for the same history."""
        return (self._cap_nodes * _NODE.itemsize + self._cap_pool * (8 + self.meta_size)
                + self._n_slots * _SLOT.itemsize)

    def __len__(self) -> int:
        return len(self._keys)
