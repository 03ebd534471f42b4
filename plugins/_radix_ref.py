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
    Availability bitmaps, metadata planes per worker and the id index (a dict of
    id -> slots) follow the compiled tree's rules, allocation sizes included.
    One lock serialises matches, inserts and removes."""

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
        self._avail = array("Q")          # per pool slot: worker bitmap
        self._planes: list[bytearray] = []   # workers 1.. (worker 0 is _metas)
        self._idx: dict[int, list] = {}   # block id -> its pool slots
        self._idx_n = 64
        self._live = 0
        self._noops = 0
        self._lock = threading.Lock()

    def _plane(self, w: int) -> bytearray:
        return self._metas if w == 0 else self._planes[w - 1]

    def _reset(self) -> None:
        self._start, self._length, self._kids = [0], [0], [{}]
        self._keys, self._metas = array("Q"), bytearray()
        self._planes = [bytearray() for _ in self._planes]
        self._avail, self._idx = array("Q"), {}
        self._n_used, self._live = 0, 0

    # ---------------------------------------------------------------- core
    def _walk(self, ids: list) -> tuple[int, list]:
        """Matched (available) blocks and the pool runs ``(start, k)`` they came from."""
        kids, start, length, keys = self._kids, self._start, self._length, self._keys
        av = self._avail
        cur, i, n, runs = 0, 0, len(ids), []
        while i < n:
            c = kids[cur].get(ids[i])
            if c is None:
                break
            s, L = start[c], length[c]
            lim = min(L, n - i)
            k = 0
            while k < lim and keys[s + k] == ids[i + k] and av[s + k]:
                k += 1
            runs.append((s, k))
            i += k
            if k < L:
                break
            cur = c
        return i, runs

    def _reserve(self, blocks: int) -> None:
        while (len(self._idx) + blocks) * 2 > self._idx_n:
            self._idx_n *= 2
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
            slots = [p for s, k in runs for p in range(s, s + k)]
            locs = [self._avail[p] for p in slots]
            raw = b"".join(self._plane((a & -a).bit_length() - 1)[p * ms:(p + 1) * ms]
                           for p, a in zip(slots, locs))
        return Match(n, np.frombuffer(raw, dtype=np.uint8).reshape(n, ms).copy(),
                     np.array(locs, dtype=np.uint64))

    def match_len(self, block_ids) -> int:
        ids = _id_list(block_ids)
        with self._lock:
            return self._walk(ids)[0]

    def _mark(self, p: int, w: int, meta: bytes) -> None:
        a, bit = self._avail[p], 1 << w
        if a & bit:
            return
        self._live += a == 0
        self._avail[p] = a | bit
        ms = self.meta_size
        self._plane(w)[p * ms:(p + 1) * ms] = meta

    def insert(self, block_ids, metas, worker: int = 0) -> None:
        if not 0 <= worker < 64:
            raise ValueError(f"worker {worker} outside 0..63")
        ids = _id_list(block_ids)
        n, ms = len(ids), self.meta_size
        metas = as_metas(metas, n, ms)
        if n == 0:
            return
        if n > 0xFFFFFFFF:
            raise ValueError("a sequence of more than 2**32 - 1 blocks")
        with self._lock:
            self._reserve(n)
            while len(self._planes) < worker:
                self._planes.append(bytearray(len(self._metas)))
            raw = metas.tobytes()
            kids, start, length, keys = self._kids, self._start, self._length, self._keys
            cur, i = 0, 0
            while i < n:
                c = kids[cur].get(ids[i])
                if c is None:           # a new leaf holding the rest of the sequence
                    leaf = len(start)
                    p0 = len(keys)
                    start.append(p0)
                    length.append(n - i)
                    kids.append({})
                    keys.extend(ids[i:])
                    for w in range(len(self._planes) + 1):
                        self._plane(w).extend(raw[i * ms:] if w == worker
                                              else bytes((n - i) * ms))
                    self._avail.extend([1 << worker] * (n - i))
                    for j in range(n - i):
                        self._idx.setdefault(ids[i + j], []).append(p0 + j)
                    self._live += n - i
                    kids[cur][ids[i]] = leaf
                    self._n_used += 1
                    return
                s, L = start[c], length[c]
                lim = min(L, n - i)
                k = 1
                while k < lim and keys[s + k] == ids[i + k]:
                    k += 1
                for j in range(k):
                    self._mark(s + j, worker, raw[(i + j) * ms:(i + j + 1) * ms])
                if k == L:
                    cur, i = c, i + k
                    continue
                if i + k == n:
                    return              # the sequence ends inside an edge: all marked
                # diverge after k blocks: mid takes the head, c keeps the tail
                mid = len(start)
                start.append(s)
                length.append(k)
                kids.append({keys[s + k]: c})
                start[c], length[c] = s + k, L - k
                kids[cur][ids[i]] = mid     # re-points an existing child entry
                self._n_used += 1
                cur, i = mid, i + k

    def remove(self, block_ids, worker: int = -1) -> int:
        """Clear ``worker``'s bit (every bit if < 0) of each listed block's slots."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        ids = _id_list(block_ids)
        mask = (1 << 64) - 1 if worker < 0 else 1 << worker
        removed = 0
        with self._lock:
            av = self._avail
            for k in ids:
                got = 0
                for p in self._idx.get(k, ()):
                    a = av[p]
                    c = a & mask
                    if c:
                        got += bin(c).count("1")
                        av[p] = a & ~c
                        self._live -= a == c
                self._noops += got == 0
                removed += got
        return removed

    def clear(self, worker: int = -1) -> None:
        """Every block unavailable on ``worker``; with ``worker < 0`` an empty tree."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        with self._lock:
            if worker < 0:
                self._reset()
                return
            bit = 1 << worker
            av = self._avail
            for p in range(len(av)):
                a = av[p]
                if a & bit:
                    av[p] = a & ~bit
                    self._live -= a == bit

    @property
    def remove_noops(self) -> int:
        """Listed blocks a ``remove`` found unavailable already."""
        return self._noops

    @property
    def pool(self) -> int:
        """Pool slots held, removed blocks included."""
        return len(self._keys)

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
            avail = np.array(self._avail, dtype=np.uint64)
            planes = np.frombuffer(b"".join(bytes(p) for p in self._planes), dtype=np.uint8
                                   ).reshape(len(self._planes), n_pool, ms).copy()
        return {"scalars": scal, "nodes": nodes.view(np.uint8), "keys": keys, "metas": metas,
                "slots": slots.view(np.uint8), "avail": avail, "planes": planes}

    def restore(self, scalars, nodes, keys, metas, slots, avail=None, planes=None):
        """Replace this (empty) tree with an :meth:`export` of either implementation
        (without ``avail``, from before removal: every block on worker 0)."""
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
        av = (np.ones(n_pool, dtype=np.uint64) if avail is None
              else np.ascontiguousarray(avail, dtype=np.uint64))
        pl = (np.empty((0, n_pool, self.meta_size), dtype=np.uint8) if planes is None
              else np.ascontiguousarray(planes, dtype=np.uint8))
        if (av.shape[0] != n_pool or pl.ndim != 3 or pl.shape[1] != n_pool
                or pl.shape[2] != self.meta_size or pl.shape[0] > 63):
            raise ValueError("radix restore: availability arrays are inconsistent")
        idx_n = 64
        while n_pool * 2 > idx_n:
            idx_n *= 2
        idx: dict[int, list] = {}
        for p, k in enumerate(ky.tolist()):
            idx.setdefault(k, []).append(p)
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
            self._avail = array("Q", av.tobytes())
            self._planes = [bytearray(pl[w].tobytes()) for w in range(pl.shape[0])]
            self._idx, self._idx_n = idx, idx_n
            self._live = int(np.count_nonzero(av))

    @property
    def nodes(self) -> int:
        """Nodes below the root (= edges)."""
        return len(self._start) - 1

    @property
    def entries(self) -> int:
        """Blocks available on at least one worker (= distinct indexed prefixes)."""
        return self._live

    @property
    def nbytes(self) -> int:
        """What the compiled tree would allocate for the same history."""
        return (self._cap_nodes * _NODE.itemsize
                + self._cap_pool * (8 * 3 + self.meta_size * (1 + len(self._planes)))
                + self._n_slots * _SLOT.itemsize + self._idx_n * 16)

    def __len__(self) -> int:
        return self._live
