"""``lmdb``: a B+tree in one memory map (py-lmdb).

Durability modes map to LMDB flags:

* ``sync``  - ``sync=True, metasync=True``: every commit is fsynced.
* ``async`` - ``sync=False``: a commit ``write()``s its pages to the data
  file before it returns but does not fsync, so it survives kill -9 of the
  process (the pages are in the OS page cache) but not power loss.
* ``off``   - ``writemap=True, map_async=True, sync=False``: pages are
  written through the shared map; the kernel flushes them when it likes
  (LMDB then sizes the data file to the map; it stays sparse).

The map size is grown here, never by the user: before a batch that may not
fit, and after a ``MapFullError``, whose batch is aborted and retried whole.
``set_mapsize`` invalidates every open transaction of the process, so reads
pass through a gate that a resize closes and waits to drain.  Aborting a
write transaction goes through the same gate: py-lmdb 3.0's abort waits
until no read is in flight, which busy reader threads can delay forever.

``cache_bytes`` is not enforced: LMDB reads through the OS page cache.
``direct_io`` is refused (a memory map cannot bypass the page cache).
Options: :data:`OPTIONS` (``prefixbench plugins --options`` lists them with their
defaults).
The environment belongs to the process that opened it: after ``fork()``
open the store again in the child.
"""
from __future__ import annotations

import os
import threading
import time

from prefixbench.engines.base import (
    EngineOption,
    SegmentStore,
    StoreConfig,
    SCAN_CHUNK,
    allocated_bytes,
    check_options,
    chunked_scan,
    decode_key,
    encode_key,
    import_binding,
    int_option,
    prepare_store_dir,
)
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl

_PACK = encode_key
OPTIONS = {
    "map_size": EngineOption(1 << 30, "initial map bytes; the map grows as needed"),
    "max_readers": EngineOption(1024, "concurrent read transactions"),
}


class LmdbStore(SegmentStore):
    """LMDB via py-lmdb; grows its map itself; one writer at a time, many readers."""

    name = "lmdb"
    OPTIONS = OPTIONS
    volatile = False
    gil_free_calls = frozenset(("get", "get_many", "write"))

    def __init__(self, config: StoreConfig | None = None):
        config = config or StoreConfig()
        super().__init__(config)
        lmdb = import_binding(
            "lmdb", "lmdb", "pip install lmdb, or reinstall with pip install prefixbench")
        self._lmdb = lmdb
        self.write_errors = (OSError, lmdb.Error)
        opts = check_options(self.name, config.options, OPTIONS)
        if config.direct_io:
            raise ConfigError("option direct_io: engine lmdb reads through a memory map "
                              "and cannot bypass the page cache")
        map_size = int_option(opts, "map_size", OPTIONS["map_size"].default, 4096, size=True)
        max_readers = int_option(opts, "max_readers", OPTIONS["max_readers"].default, 1)
        self.path = prepare_store_dir(config.path, config.create, self.name, "data.mdb")
        mode = config.durability
        try:
            self._env = lmdb.open(
                self.path, map_size=map_size, subdir=True, create=config.create,
                sync=(mode == "sync"), metasync=(mode == "sync"),
                writemap=(mode == "off"), map_async=(mode == "off"),
                readahead=False, max_readers=max_readers, max_dbs=0)
            self._env.reader_check()   # free slots left by killed processes
            self._psize = self._env.stat()["psize"]
        except lmdb.Error as e:
            raise StoreError(f"lmdb store path {self.path}: cannot open ({e})") from None
        self._write_lock = threading.Lock()
        # Read gate: a reader appends to _active, then checks _resizing; a
        # resize sets _resizing, then waits for _active to empty.  Both
        # list operations are atomic, so one side always sees the other.
        self._active: list = []
        self._resizing = False
        self._resume = threading.Event()
        self._resume.set()

    checkpoints = True

    def checkpoint(self, path) -> None:
        """LMDB's consistent copy of the last committed transaction (``mdb_env_copy``),
        taken under the write lock, so no write or map resize runs meanwhile."""
        path = os.fspath(path)
        try:
            os.makedirs(path)
            with self._write_lock:
                self._env.copy(path)
        except (OSError, self._lmdb.Error) as e:
            raise StoreError(f"lmdb store {self.path}: checkpoint to {path} failed "
                             f"({getattr(e, 'strerror', None) or e})") from None

    # ----- reads -----------------------------------------------------
    def _read(self, fn, arg):
        active = self._active
        active.append(None)
        while self._resizing:
            active.pop()
            self._resume.wait()
            active.append(None)
        try:
            txn = self._env.begin()
            try:
                return fn(txn, arg)
            finally:
                txn.abort()
        finally:
            active.pop()

    @staticmethod
    def _get_one(txn, raw):
        return txn.get(raw)

    @staticmethod
    def _get_batch(txn, raws):
        found = txn.cursor().getmulti(raws)    # releases the GIL; omits misses
        if len(found) == len(raws):
            return [v for _, v in found]
        out, j, n = [], 0, len(found)
        for raw in raws:
            if j < n and found[j][0] == raw:
                out.append(found[j][1])
                j += 1
            else:
                out.append(None)
        return out

    @staticmethod
    def _scan_chunk(txn, bounds):
        lo, hi = bounds
        cur = txn.cursor()
        out = []
        if not cur.set_range(lo):
            return out
        for k, v in cur.iternext():
            if hi is not None and k >= hi:
                break
            out.append((decode_key(k), v))
            if len(out) == SCAN_CHUNK:
                break
        return out

    def _get(self, key):
        return self._read(self._get_one, _PACK(key))

    def _get_many(self, keys):
        return self._read(self._get_batch, [_PACK(k) for k in keys])

    def _scan(self, start, end):
        hi = None if end is None else _PACK(end)
        return chunked_scan(lambda lo: self._read(self._scan_chunk, (_PACK(lo), hi)), start, end)

    # ----- writes ----------------------------------------------------
    def _write(self, puts, deletes):
        items = [(_PACK(k), v) for k, v in puts]
        dels = [_PACK(k) for k in deletes]
        need = sum(len(v) + 64 for _, v in items) + 4096 * (len(dels) + 4)
        MapFull = self._lmdb.MapFullError
        env = self._env
        with self._write_lock:
            info = env.info()
            if (info["last_pgno"] + 1) * self._psize + 2 * need > info["map_size"]:
                self._grow(need)      # grow before the batch rather than after a failure
            while True:
                txn = env.begin(write=True)
                try:
                    if items:
                        txn.cursor().putmulti(items, dupdata=False, overwrite=True)
                    for raw in dels:
                        txn.delete(raw)
                except MapFull:
                    self._exclusive(txn.abort)
                    self._grow(need)  # the aborted batch is retried whole
                    continue
                except BaseException:
                    self._exclusive(txn.abort)
                    raise
                try:
                    txn.commit()
                except MapFull:
                    self._grow(need)
                    continue
                return

    def _grow(self, need: int) -> None:
        """Enlarge the map (at least double) while no transaction is open."""
        size = self._env.info()["map_size"]
        new = max(2 * size, size + 2 * need)
        new = -(-new // 65536) * 65536
        self._exclusive(lambda: self._env.set_mapsize(new))

    def _exclusive(self, fn):
        """Run fn with no read transaction open.

        Needed for set_mapsize and close, and for aborting a write
        transaction: py-lmdb's abort waits until no read is in flight,
        which busy reader threads can postpone forever.
        """
        self._resume.clear()
        self._resizing = True
        try:
            while self._active:
                time.sleep(50e-6)
            return fn()
        finally:
            self._resizing = False
            self._resume.set()

    def map_size(self) -> int:
        """Current map size in bytes (grows on demand)."""
        return self._env.info()["map_size"]

    def write_mark(self) -> int:
        """LMDB's last committed transaction id, which its consistent copy keeps."""
        with self._write_lock:
            return self._env.info()["last_txnid"]

    def _sync(self):
        self._env.sync(True)

    def _size_on_disk(self):
        return allocated_bytes(self.path)

    def _close(self):
        with self._write_lock:
            self._exclusive(self._env.close)


@hookimpl
def prefixbench_register_engines(register):
    register("lmdb", LmdbStore)
