"""``redis-blockhash``: dram-blockhash whose durable state is the store (FlexKV style).

The paper's snapshot-backed in-memory baseline (SARP Table 1): matches are
served from the same compiled in-memory table as ``dram-blockhash`` (one
entry per block, probed from the first block until a miss, no store read),
and every insert is uploaded to the engine, one entry per new block (key =
block id, value = its metadata: the layout ``ssd-blockhash`` reads), the way
FlexKV uploads its index to Redis.  It is meant for ``-e redis`` or
``-e redis-cluster``, where the server's RDB/AOF is the snapshot, and runs
on any engine.

Recovery is reconnecting to the store (the caller opens it; for Redis that
is the restarted server having reloaded its RDB/AOF) and rebuilding the
table from one ordered scan of it, in bulk inserts.  Its snapshot holds only
a marker (the entry count): the store is the state, so a missing or corrupt
snapshot is the same rebuild.

The rebuild is bulk where the engine offers ``scan_arrays`` (``redis`` and
``redis-cluster``: chunks of a numpy key array and one contiguous value buffer each,
decoded without a Python object per entry): every chunk goes to the table's
bulk insert as it is.  Elsewhere, or with ``rebuild_scan=per-key``, it reads
the generic ``scan()`` one item at a time into chunks of ``rebuild_chunk``
entries: the reference the tests hold the bulk path equal to.

Decisions where the issue is silent:

- An insert writes the store first and the table after it, under one
  insert lock: a block is served only once the store acknowledged it, so
  everything a match returned before a crash comes back after it.  Which
  blocks are new comes from the table (``lookup``), so an already indexed
  block keeps its first metadata and is never rewritten.
- The store holds nothing else: the rebuild reads every entry of it, and an
  entry whose value is not ``meta_size`` bytes is one error naming the key.
- ``insert_known_prefix`` writes blocks ``known..n`` without looking them up
  (the bulk builds vouch for the rest), as ``ssd-blockhash`` does.
- ``remove`` (one location, ``max_workers = 1``) takes the blocks out of the
  table and deletes them from the store in one batch before it returns, under
  the insert lock: the store never holds a block the table lost, so the
  rebuild after a crash cannot bring an acknowledged remove back.  ``clear``
  empties the table and deletes every stored entry (scanned in chunks).
"""
from __future__ import annotations

import numpy as np

from prefixbench import phases as _phases
from prefixbench import twins
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl
from prefixbench.phases import ENCODE, ROUTING
from prefixbench.plugins.strategy import (META_SIZE, IndexStrategy, Match, Option, as_block_ids,
                                          as_metas, check_known, check_worker)

_blockhash = twins.load("prefixbench.plugins._blockhash")

__all__ = ["RedisBlockHashStrategy", "per_key_chunks", "store_chunks"]

REBUILD_SCANS = ("bulk", "per-key")


def per_key_chunks(store, chunk: int):
    """The store's items as ``(keys, values, lengths)`` chunks of ``chunk`` entries,
    read one at a time from the generic ``scan()``: the reference for a bulk scan."""
    keys: list[int] = []
    vals: list[bytes] = []

    def taken():
        out = (np.array(keys, dtype=np.uint64), b"".join(vals),
               np.array([len(v) for v in vals], dtype=np.uint32))
        keys.clear()
        vals.clear()
        return out

    for k, v in store.scan():
        keys.append(k)
        vals.append(v)
        if len(keys) >= chunk:
            yield taken()
    if keys:
        yield taken()


def store_chunks(store, chunk: int, how: str = "bulk"):
    """``(keys, values, lengths)`` chunks of every store entry in key order: the engine's
    ``scan_arrays`` when ``how`` is ``bulk`` and it has one, else :func:`per_key_chunks`."""
    bulk = getattr(store, "scan_arrays", None) if how == "bulk" else None
    if bulk is not None:
        return bulk(0, None)
    return per_key_chunks(store, chunk)


class RedisBlockHashStrategy(IndexStrategy):
    """In-memory block table, every insert uploaded to the store; recovery = scan rebuild."""

    name = "redis-blockhash"
    needs_store = True
    exact = True
    gil_free_parts = ("table probe (match)", "table insert")
    supports_remove = True
    options = {
        "initial_capacity": Option(1024, "entries that fit before the first rehash", min=0,
                                   max=1 << 40),
        "max_load": Option(0.75, "fill fraction that triggers a doubling rehash", min=0.05,
                           max=0.95),
        "rebuild_chunk": Option(65536, "entries per bulk table insert while rebuilding "
                                "from the per-key store scan (a bulk scan inserts the "
                                "engine's chunks as they come)",
                                min=1, max=1 << 24),
        "rebuild_scan": Option("bulk", "how the rebuild reads the store: bulk (the engine's "
                               "scan_arrays where it has one, else per-key) or per-key (the "
                               "generic scan, one item at a time: the reference)",
                               choices=REBUILD_SCANS),
    }
    rebuild_from_store = True
    #: the engine ``recover`` uses when none is given (the FlexKV setup: a redis-server)
    default_engine = "redis"

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        if not isinstance(meta_size, int) or meta_size < 1:
            raise ConfigError(f"option meta_size: {meta_size!r} must be an integer >= 1")
        self._table = _blockhash.BlockHashTable(meta_size, self.opts["initial_capacity"],
                                                self.opts["max_load"])
        self._insert_lock = _phases.TimedLock()
        self._uploaded = 0
        self._remove_noops = 0

    def match(self, block_ids: np.ndarray) -> Match:
        return _phases.timed_call(ROUTING, self._table.match, block_ids)

    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None:
        if worker != 0:
            check_worker("strategy redis-blockhash", worker, self.max_workers, False)
        ids = as_block_ids(block_ids)
        m = as_metas(metas, len(ids), self.meta_size)
        if not len(ids):
            return
        with self._insert_lock.guard():
            found, _ = _phases.timed_call(ROUTING, self._table.lookup, ids)
            new = np.flatnonzero(~found)
            if len(new):
                self._upload(ids, m, new)

    def insert_known_prefix(self, block_ids, metas, known: int) -> None:
        ids = as_block_ids(block_ids)
        m = as_metas(metas, len(ids), self.meta_size)
        if check_known(known, len(ids)) == len(ids):
            return
        with self._insert_lock.guard():
            self._upload(ids, m, np.arange(known, len(ids)))

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        ids, _w = self._removal_args(block_ids, worker)
        if not len(ids):
            return 0
        with self._insert_lock.guard():
            found, _ = self._table.lookup(ids)
            gone = np.unique(ids[found])
            removed = self._table.remove(gone) if len(gone) else 0
            if len(gone):
                self.store.write_items((), gone.tolist())
            self._uploaded -= removed
            self._remove_noops += len(ids) - removed
        return removed

    def clear(self, worker: int | None = None) -> None:
        check_worker("strategy redis-blockhash.clear", worker, self.max_workers, True)
        with self._insert_lock.guard():
            self._table.clear()
            while True:
                chunk = []
                for k, _v in self.store.scan(0):
                    chunk.append(k)
                    if len(chunk) == 65536:
                        break
                if not chunk:
                    break
                self.store.write_items((), chunk)
            self._uploaded = 0

    def _upload(self, ids: np.ndarray, metas: np.ndarray, positions: np.ndarray) -> None:
        """Store the blocks at ``positions`` (first occurrence of each id), then index them."""
        on = _phases._ON
        if on:
            _phases.enter(ENCODE)
        try:
            sel_ids = ids[positions]
            _, first = np.unique(sel_ids, return_index=True)
            first.sort()
            keep = positions[first]
            raw = metas[keep]
            puts = list(zip(ids[keep].tolist(), (r.tobytes() for r in raw)))
        finally:
            if on:
                _phases.leave()
        self.store.write_items(puts)
        _phases.timed_call(ROUTING, self._table.insert, ids[keep], raw)
        self._uploaded += len(puts)

    # ----- durability: the store is the state ---------------------------------
    def _snapshot_state(self):
        return {"entries": len(self._table)}, {}

    def _restore_state(self, meta, sections):
        pass

    def _catch_up(self, meta):
        return self._rebuild_from_store()

    def _rebuild_from_store(self) -> dict:
        """Every store entry into the table: one ordered scan, whole chunks to the bulk
        insert (see the module docstring)."""
        ms, total = self.meta_size, 0
        for keys, values, lengths in store_chunks(self.store, self.opts["rebuild_chunk"],
                                                  self.opts["rebuild_scan"]):
            n = len(keys)
            if not n:
                continue
            wrong = np.flatnonzero(lengths != ms)
            if len(wrong):
                j = int(wrong[0])
                raise StoreError(f"redis-blockhash: the value of block {int(keys[j]):#x} in "
                                 f"store {self.store.name!r} has {int(lengths[j])} bytes, "
                                 f"expected {ms}")
            self._table.insert(keys, np.frombuffer(values, dtype=np.uint8).reshape(n, ms))
            total += n
        return {"entries_rebuilt": total}

    def stats(self) -> dict:
        t = self._table
        c = t.counters()
        m = c["matches"]
        return {
            "entries": len(t), "memory_bytes": t.nbytes, "capacity": t.capacity,
            "matches": m, "probes_per_match": c["lookups"] / m if m else 0.0,
            "store_reads_per_match": 0.0, "stored_block_entries": len(t),
            "uploaded_entries": self._uploaded, "remove_noops": self._remove_noops,
        }


@hookimpl
def prefixbench_register_strategies(register):
    register("redis-blockhash", RedisBlockHashStrategy, "dram-blockhash whose durable state "
             "is the store (FlexKV uploads its index to Redis): recovery = reconnect + scan "
             "rebuild")
