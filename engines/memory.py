"""``memory``: a sorted in-process store.  Volatile; the baseline for engines."""
from __future__ import annotations

import bisect
import threading

from prefixbench.engines.base import SegmentStore, StoreConfig, check_options
from prefixbench.hookspecs import hookimpl


class MemoryStore(SegmentStore):
    """In-process dict with a sorted key list for ordered scans (volatile)."""

    name = "memory"
    volatile = True

    def __init__(self, config: StoreConfig | None = None):
        super().__init__(config or StoreConfig())
        check_options(self.name, self.config.options, self.OPTIONS)
        self._data: dict[int, bytes] = {}
        self._keys: list[int] = []          # sorted; rebuilt lazily for scans
        self._keys_dirty = False
        self._lock = threading.Lock()
        self._bytes = 0
        self._batches = 0                   # write batches applied (the write mark)

    def _get(self, key):
        return self._data.get(key)

    def _get_many(self, keys):
        get = self._data.get
        return [get(k) for k in keys]

    def _write(self, puts, deletes):
        with self._lock:
            self._batches += 1
            data = self._data
            for k, v in puts:
                old = data.get(k)
                if old is None:
                    self._keys_dirty = True
                else:
                    self._bytes -= len(old)
                data[k] = v
                self._bytes += len(v)
            for k in deletes:
                old = data.pop(k, None)
                if old is not None:
                    self._bytes -= len(old)
                    self._keys_dirty = True

    def write_mark(self) -> int:
        """Write batches applied so far."""
        return self._batches

    def _scan(self, start, end):
        with self._lock:
            if self._keys_dirty:
                self._keys = sorted(self._data)
                self._keys_dirty = False
            keys = self._keys
            i = bisect.bisect_left(keys, start)
            j = len(keys) if end is None else bisect.bisect_left(keys, end)
            items = [(k, self._data[k]) for k in keys[i:j]]
        return iter(items)

    def _sync(self):
        pass

    def _size_on_disk(self):
        return 0

    def logical_size(self) -> tuple[int, int]:
        return len(self._data), self._bytes + 8 * len(self._data)

    def _close(self):
        self._data = {}
        self._keys = []


@hookimpl
def prefixbench_register_engines(register):
    register("memory", MemoryStore)
