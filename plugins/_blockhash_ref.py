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
    block id 0 reach ``max_load``), so stats agree.  :meth:`export` returns the
    same ``(keys, metas)`` arrays (insertion order; the compiled table gives slot
    order), which either table loads.  One lock guards the dict and the counters.
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
        self._d: dict[int, bytes] = {}
        self._matches = self._lookups = self._hits = 0
        self._lock = threading.Lock()
        bits = 4
        while float(1 << bits) * max_load < initial_capacity:
            bits += 1
        self._set_bits(bits)

    def _set_bits(self, bits: int) -> None:
        self._bits = bits
        cap = 1 << bits
        self._grow_at = min(int(float(cap) * self.max_load), cap - 1)

    def match(self, block_ids) -> Match:
        ids = as_block_ids(block_ids).tolist()
        rows = []
        with self._lock:
            get = self._d.get
            for k in ids:
                v = get(k)
                if v is None:
                    break
                rows.append(v)
            n = len(rows)
            self._matches += 1
            self._lookups += n + (n < len(ids))
            self._hits += n
        out = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(n, self.meta_size).copy()
        return Match(n, out)

    def insert(self, block_ids, metas) -> int:
        ids = as_block_ids(block_ids)
        m = as_metas(metas, len(ids), self.meta_size)
        added = 0
        with self._lock:
            d = self._d
            for j, k in enumerate(ids.tolist()):
                if k not in d:
                    if k and len(d) - (0 in d) >= self._grow_at:
                        self._set_bits(self._bits + 1)
                    d[k] = m[j].tobytes()
                    added += 1
        return added

    def lookup(self, block_ids):
        ids = as_block_ids(block_ids)
        found = np.zeros(len(ids), dtype=np.bool_)
        out = np.zeros((len(ids), self.meta_size), dtype=np.uint8)
        with self._lock:
            for j, k in enumerate(ids.tolist()):
                v = self._d.get(k)
                if v is not None:
                    found[j] = True
                    out[j] = np.frombuffer(v, dtype=np.uint8)
        return found, out

    def reserve(self, entries: int) -> None:
        with self._lock:
            while float(self._grow_at) < float(entries):
                self._set_bits(self._bits + 1)

    def export(self):
        """Every entry as ``(keys uint64[count], metas uint8[count, meta_size])``."""
        with self._lock:
            keys = np.fromiter(self._d.keys(), dtype=np.uint64, count=len(self._d))
            raw = b"".join(self._d.values())
        return keys, np.frombuffer(raw, dtype=np.uint8).reshape(len(keys), self.meta_size).copy()

    def __len__(self) -> int:
        return len(self._d)

    @property
    def capacity(self) -> int:
        """Slots the compiled table would have (a power of two)."""
        return 1 << self._bits

    @property
    def nbytes(self) -> int:
        """Bytes the compiled table would allocate: key and metadata arrays, side slot."""
        return self.capacity * (8 + self.meta_size) + self.meta_size

    def counters(self) -> dict:
        with self._lock:
            return {"matches": self._matches, "lookups": self._lookups, "hits": self._hits}
