"""Pure-Python reference of :mod:`prefixbench.plugins._blockhash`: the same public
names, answers and counters, so the tests can hold the two tables equal."""
from __future__ import annotations

import threading

import numpy as np

from prefixbench.plugins.strategy import META_SIZE, Match, as_block_ids, as_metas

__all__ = ["BlockHashTable"]


class BlockHashTable:
    """The compiled table's pure-Python reference (a dict; obvious, slow).

    Same API, results and counters; ``capacity``/``nbytes`` follow the compiled
    table's growth rule (power-of-two slots, doubling when the entries other than
    block id 0 reach ``max_load``) and its lazy per-worker allocation, so stats
    agree.  Each entry maps worker -> metadata.  :meth:`export` returns the same
    arrays (insertion order; the compiled table gives slot order), which either
    table loads.  One lock guards the dict and the counters.
    """

    def __init__(self, meta_size: int = META_SIZE, initial_capacity: int = 1024,
                 max_load: float = 0.75):
        if meta_size < 1:
            raise ValueError(f"meta_size must be >= 1, got {meta_size}")
        if not 0.05 <= max_load <= 0.95:
            raise ValueError(f"max_load must be in [0.05, 0.95], got {max_load}")
        if initial_capacity < 0:
            raise ValueError(f"initial_capacity must be >= 0, got {initial_capacity}")
        self.meta_size = meta_size
        self.max_load = max_load
        self._d: dict[int, dict[int, bytes]] = {}
        self._planes = 1                # 1 + the highest worker that inserted
        self._multi = False             # bitmaps allocated (a worker other than 0 inserted)
        self._matches = self._lookups = self._hits = self._noops = 0
        self._lock = threading.Lock()
        bits = 4
        while float(1 << bits) * max_load < initial_capacity:
            bits += 1
        self._set_bits(bits)

    def _set_bits(self, bits: int) -> None:
        self._bits = bits
        cap = 1 << bits
        self._grow_at = min(int(float(cap) * self.max_load), cap - 1)

    @staticmethod
    def _bitmap(held: dict) -> int:
        return sum(1 << w for w in held)

    def match(self, block_ids) -> Match:
        ids = as_block_ids(block_ids).tolist()
        rows, locs = [], []
        with self._lock:
            get = self._d.get
            for k in ids:
                v = get(k)
                if v is None:
                    break
                rows.append(v[min(v)])
                locs.append(self._bitmap(v))
            n = len(rows)
            self._matches += 1
            self._lookups += n + (n < len(ids))
            self._hits += n
        out = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(n, self.meta_size).copy()
        return Match(n, out, np.array(locs, dtype=np.uint64))

    def insert(self, block_ids, metas, worker: int = 0) -> int:
        if not 0 <= worker < 64:
            raise ValueError(f"worker {worker} outside 0..63")
        ids = as_block_ids(block_ids)
        m = as_metas(metas, len(ids), self.meta_size)
        added = 0
        if len(ids) == 0:
            return 0
        with self._lock:
            if worker:
                self._multi = True
                self._planes = max(self._planes, worker + 1)
            d = self._d
            for j, k in enumerate(ids.tolist()):
                held = d.get(k)
                if held is None:
                    if k and len(d) - (0 in d) >= self._grow_at:
                        self._set_bits(self._bits + 1)
                    d[k] = {worker: m[j].tobytes()}
                    added += 1
                elif worker not in held:
                    held[worker] = m[j].tobytes()
                    added += 1
        return added

    def remove(self, block_ids, worker: int = -1) -> int:
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        ids = as_block_ids(block_ids).tolist()
        removed = 0
        with self._lock:
            d = self._d
            for k in ids:
                held = d.get(k)
                got = 0
                if held is not None:
                    if worker < 0:
                        got = len(held)
                        held.clear()
                    elif worker in held:
                        got = 1
                        del held[worker]
                    if not held:
                        del d[k]
                removed += got
                self._noops += got == 0
        return removed

    def tombstone(self, live: "BlockHashTable", block_ids, worker: int,
                  defaults_dead: bool):
        """The removal overlay's remove, this table holding the tombstones (see the
        compiled table); ``(removed, noops)``."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        removed = noops = 0
        zero = bytes(self.meta_size)
        with self._lock, live._lock:
            d, ld = self._d, live._d
            for k in as_block_ids(block_ids).tolist():
                held = ld.get(k)
                if held is not None:
                    gone = list(held) if worker < 0 else [w for w in held if w == worker]
                    if not gone:
                        noops += 1
                        continue
                    if len(gone) == len(held) and k not in d:
                        self._grow_for(k)
                        d[k] = {0: zero}
                    for w in gone:
                        del held[w]
                    if not held:
                        del ld[k]
                    removed += len(gone)
                elif defaults_dead or worker > 0 or k in d:
                    noops += 1
                else:
                    self._grow_for(k)
                    d[k] = {0: zero}
                    removed += 1
        return removed, noops

    def _grow_for(self, k: int) -> None:
        """The compiled table's growth rule before a new key (caller holds the lock)."""
        d = self._d
        if k and len(d) - (0 in d) >= self._grow_at:
            self._set_bits(self._bits + 1)

    def clear(self, worker: int = -1) -> None:
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        with self._lock:
            if worker < 0:
                self._d = {}
                return
            for k in list(self._d):
                held = self._d[k]
                held.pop(worker, None)
                if not held:
                    del self._d[k]

    def lookup(self, block_ids, locations: bool = False):
        ids = as_block_ids(block_ids)
        found = np.zeros(len(ids), dtype=np.bool_)
        out = np.zeros((len(ids), self.meta_size), dtype=np.uint8)
        locs = np.zeros(len(ids), dtype=np.uint64)
        with self._lock:
            for j, k in enumerate(ids.tolist()):
                v = self._d.get(k)
                if v is not None:
                    found[j] = True
                    locs[j] = self._bitmap(v)
                    out[j] = np.frombuffer(v[min(v)], dtype=np.uint8)
        if locations:
            return found, out, locs
        return found, out

    def reserve(self, entries: int) -> None:
        with self._lock:
            while float(self._grow_at) < float(entries):
                self._set_bits(self._bits + 1)

    def export(self, workers: bool = False):
        """Every entry as ``(keys uint64[count], metas uint8[count, meta_size])``, or
        with ``workers`` ``(keys, locations, planes uint8[n_planes, count, meta_size])``."""
        ms = self.meta_size
        with self._lock:
            keys = np.fromiter(self._d.keys(), dtype=np.uint64, count=len(self._d))
            held = list(self._d.values())
            n_planes = self._planes if workers else 1
        n = len(keys)
        if not workers:
            raw = b"".join(v[min(v)] for v in held)
            return keys, np.frombuffer(raw, dtype=np.uint8).reshape(n, ms).copy()
        locs = np.array([self._bitmap(v) for v in held], dtype=np.uint64)
        planes = np.zeros((n_planes, n, ms), dtype=np.uint8)
        for c, v in enumerate(held):
            for w, meta in v.items():
                planes[w, c] = np.frombuffer(meta, dtype=np.uint8)
        return keys, locs, planes

    def __len__(self) -> int:
        return len(self._d)

    @property
    def capacity(self) -> int:
        """Slots the compiled table would have (a power of two)."""
        return 1 << self._bits

    @property
    def workers(self) -> int:
        """Metadata planes the compiled table would hold."""
        return self._planes

    @property
    def nbytes(self) -> int:
        """Bytes the compiled table would allocate: keys, metadata planes, bitmaps,
        side slot."""
        cap, ms, p = self.capacity, self.meta_size, self._planes
        return cap * (8 + ms * p) + (cap * 8 if self._multi else 0) + ms * p

    def counters(self) -> dict:
        with self._lock:
            return {"matches": self._matches, "lookups": self._lookups, "hits": self._hits,
                    "remove_noops": self._noops}
