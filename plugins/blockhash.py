"""``dram-blockhash`` and ``ssd-blockhash``: one index entry per block (vLLM style).

Both map a chained block ID to its metadata record and match by probing the
query's ids from the first block until the first miss (SARP paper, 2.2 and
6.1).  Because a chained id names its whole prefix, that probe returns the
exact longest indexed prefix (barring 64-bit collisions), so both are
``exact`` and must agree with the ``radix`` oracle block for block.

* ``dram-blockhash`` keeps the entries in a compiled open-addressing table
  (:class:`prefixbench.plugins._blockhash.BlockHashTable`, about 32 bytes per
  entry at the default load); :mod:`prefixbench.plugins._blockhash_ref` is its
  dict-based reference.  Thread-safe through the table's own
  readers-writer lock: matches in parallel without the GIL, inserts exclusive.
* ``ssd-blockhash`` keeps the same entries in the engine (key = block id,
  value = the metadata bytes).  Its cost model is the baseline's: one logical
  store read per probed block, issued one after another (``probe=sequential``);
  ``probe=batch`` asks for growing chunks with ``get_many`` instead, which may
  read a few blocks past the first miss.  An insert reads which blocks exist
  (one ``get_many``) and writes only the missing ones in one batch.  Inserts
  hold a Python lock so two threads inserting the same new block cannot both
  write it (first writer wins); matches take no lock.

  An insert that follows its thread's match of the same prefix (the replay's
  match-then-insert; option ``insert_reuse``, beyond the paper, the counterpart of
  sarp's) does not read again what that match read: the blocks it found stay
  stored unless a remove came since (a remove epoch says so), and when it
  stopped at a missing block, that block alone is read again under the insert
  lock; still missing means every later block of the request is missing (a
  chain's stored blocks are a prefix while nothing was ever removed, because
  every insert writes its missing blocks in one batch).  Without it an insert
  reads again every block its match has just read (on lmcache-agent at paper
  scale about 6,600, more than the 10% block cache holds).  On codeact at paper
  scale (RocksDB direct reads, 10% rule, ``probe=batch``, 10,000 timed requests
  in turns of 200, median of 3) the mean insert went from 693.72 to 157.44 us
  and the request throughput from 176 to 192 req/s.

Removal.  ``dram-blockhash`` tracks up to 64 workers per block (a bitmap
and one metadata plane per worker, allocated when that worker first
inserts; :mod:`prefixbench.plugins._blockhash`) and deletes an entry when
its last worker goes, so memory follows the live blocks.  ``ssd-blockhash``
keeps one location (``max_workers = 1``): a remove reads which listed blocks
exist (one ``get_many``, so the count is exact) and deletes them in one write
batch under the insert lock; a later insert finds them missing and writes
them with its metadata.  That is the costly remove among the built-ins:
about 150 us per single-block remove on rocksdb here (a batch read plus a
write batch; 30 us on the memory engine), against 5-40 us for the in-memory
tables and the segment strategies' tombstones (10,000 removes, 2 shared
cores, so the figures are rough).  Both snapshot paths cover removes: the in-memory
table through the insert log (removes logged like inserts), the store-backed
one through the engine.

Where the time goes (:mod:`prefixbench.phases`, one switch per call,
never per block): ``dram-blockhash`` counts its whole table call as routing
(the compiled table's readers-writer lock waits inside it, so they show as
routing too); ``ssd-blockhash`` counts the insert's choice of blocks and the
batch probe's chunking as routing, with the engine calls inside them timed as
storage by the engine, joining the values and checking their sizes as verify,
building the write batch as encode, and waits for its insert lock as lock.
Its sequential probe is nothing but one get per block, so the whole loop is
storage: one switch per match instead of one per block, which keeps the
clock's overhead small even where a get takes a microsecond.
"""
from __future__ import annotations

import threading

import numpy as np

from prefixbench import twins
from prefixbench import phases as _phases
from prefixbench.phases import ENCODE, ROUTING, STORAGE, VERIFY
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.strategy import (
    IndexStrategy,
    META_SIZE,
    Match,
    Option,
    as_block_ids,
    as_metas,
    check_known,
    check_worker,
)

_blockhash = twins.load("prefixbench.plugins._blockhash")

__all__ = ["BlockHashTable", "BlockHashTablePy", "DramBlockHashStrategy", "SsdBlockHashStrategy"]


def _check_meta_size(meta_size: int) -> None:
    if not isinstance(meta_size, int) or meta_size < 1:
        raise ConfigError(f"option meta_size: {meta_size!r} must be an integer >= 1")


#: the table: compiled, or its reference in pure-Python mode (``PREFIXBENCH_PURE=1``)
BlockHashTable = _blockhash.BlockHashTable
#: the pure-Python reference table, in either mode
BlockHashTablePy = twins.reference("prefixbench.plugins._blockhash").BlockHashTable


class DramBlockHashStrategy(IndexStrategy):
    """One in-memory entry per block; probe from the first block until a miss."""

    name = "dram-blockhash"
    gil_free_parts = ("table probe (match)", "table insert", "table remove")
    exact = True
    supports_remove = True
    max_workers = 64
    options = {
        "initial_capacity": Option(1024, "entries that fit before the first rehash", min=0,
                                   max=1 << 40),
        "max_load": Option(0.75, "fill fraction that triggers a doubling rehash", min=0.05,
                           max=0.95),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        _check_meta_size(meta_size)
        self._table = BlockHashTable(meta_size, self.opts["initial_capacity"], self.opts["max_load"])
        self._match = self._table.match
        self._insert = self._table.insert

    def match(self, block_ids: np.ndarray) -> Match:
        return _phases.timed_call(ROUTING, self._match, block_ids)

    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None:
        if worker != 0:
            check_worker("strategy dram-blockhash", worker, self.max_workers, False)
        _phases.timed_call(ROUTING, self._insert, block_ids, metas, worker)

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        ids, w = self._removal_args(block_ids, worker)
        return _phases.timed_call(ROUTING, self._table.remove, ids, w)

    def clear(self, worker: int | None = None) -> None:
        w = check_worker("strategy dram-blockhash.clear", worker, self.max_workers, True)
        self._table.clear(w)

    # durability: snapshot = every entry (bulk arrays, the workers' bitmaps and
    # metadata planes when a worker other than 0 inserted); recovery loads them and
    # rebuilds the table with one compiled bulk insert; acknowledged inserts after
    # the snapshot come back from the insert log (enable_log)
    uses_insert_log = True

    def _snapshot_state(self):
        if self._table.workers == 1:
            keys, metas = self._table.export()
            return {"entries": len(keys)}, {"keys": keys, "metas": metas}
        keys, locs, planes = self._table.export(workers=True)
        return {"entries": len(keys)}, {"keys": keys, "locations": locs, "planes": planes}

    def _restore_state(self, meta, sections):
        keys = sections["keys"]
        if "planes" in sections:
            locs, planes = sections["locations"], sections["planes"]
            if (keys.ndim != 1 or locs.shape != keys.shape or planes.ndim != 3
                    or planes.shape[1:] != (len(keys), self.meta_size) or planes.shape[0] > 64):
                raise ValueError("keys, locations and planes do not match")
        else:
            metas = sections["metas"]
            if keys.ndim != 1 or metas.shape != (len(keys), self.meta_size):
                raise ValueError("keys and metas do not match")
            locs, planes = np.ones(len(keys), dtype=np.uint64), metas[None]
        self._loaded = (keys, locs, planes)

    def _catch_up(self, meta):
        keys, locs, planes = self._loaded
        self._loaded = None
        self._table.reserve(len(keys))
        for w in range(planes.shape[0]):      # one bulk insert per worker
            held = (locs >> np.uint64(w)) & np.uint64(1) == 1
            if held.any():
                self._table.insert(keys[held], planes[w][held], w)
        return {"entries_rebuilt": len(keys)}

    def stats(self) -> dict:
        t = self._table
        c = t.counters()
        m = c["matches"]
        return {
            "entries": len(t), "memory_bytes": t.nbytes, "capacity": t.capacity,
            "matches": m, "probes_per_match": c["lookups"] / m if m else 0.0,
            "store_reads_per_match": 0.0, "remove_noops": c["remove_noops"],
        }


class _MatchMemo:
    """What a match found, for the insert that follows on its thread: ``found``
    blocks stored, the last of them ``last``, the first missing one ``miss`` (None
    when the whole query was stored), as of remove epoch ``epoch``."""

    __slots__ = ("found", "last", "miss", "epoch")

    def __init__(self, found: int, last, miss, epoch: int):
        self.found, self.last, self.miss, self.epoch = found, last, miss, epoch


class SsdBlockHashStrategy(IndexStrategy):
    """Per-block entries in the engine: one logical store read per probed block."""

    name = "ssd-blockhash"
    needs_store = True
    exact = True
    supports_remove = True
    options = {
        "probe": Option("sequential", "sequential: one get per block until a miss (the "
                        "baseline); batch: get_many in growing chunks",
                        choices=("sequential", "batch")),
        "batch_start": Option(4, "first chunk size for probe=batch (doubles each round)",
                              min=1, max=1 << 16),
        "insert_probe": Option("batch", "how an insert finds the blocks it must write - "
                               "batch: one get_many of every block of the request; bisect: "
                               "binary search for the first missing block, log2(n) gets "
                               "(valid because every insert writes a whole prefix in one "
                               "atomic batch, so the stored blocks of a chain are a prefix; "
                               "once a block was removed, inserts probe in a batch)",
                               choices=("batch", "bisect"), beyond_paper=True),
        "insert_reuse": Option(True, "an insert after this thread's match of the same prefix "
                               "starts where the match stopped: the blocks it found are not "
                               "read again, and when it stopped at a missing block only that "
                               "block is read again (under the insert lock)",
                               beyond_paper=True),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        _check_meta_size(meta_size)
        self._batch = self.opts["probe"] == "batch"
        self._insert_lock = _phases.TimedLock()
        self._count_lock = threading.Lock()
        self._entries = 0          # blocks written by this instance, less those removed
        self._matches = 0
        self._match_reads = 0
        self._remove_noops = 0
        self._removed = False      # a remove can leave a chain's stored blocks a non-prefix
        self._remove_epoch = 0     # bumped by every remove and clear (under the insert lock)
        self._reuse = self.opts["insert_reuse"]
        self._tl = threading.local()   # .memo: what this thread's last match found
        self._inserts = 0
        self._inserts_from_match = 0
        self._insert_reads = 0

    def _values(self, keys: list) -> tuple[list, int]:
        """Values of the longest present prefix of ``keys``, and the store reads it took."""
        vals = []
        if not self._batch:
            get = self.store.get
            on = _phases._ON
            if on:               # the loop is nothing but gets: one storage switch for all
                _phases.enter(STORAGE)
            try:
                for k in keys:
                    v = get(k)
                    if v is None:
                        break
                    vals.append(v)
            finally:
                if on:
                    _phases.leave()
            return vals, len(vals) + (len(vals) < len(keys))
        get_many = self.store.get_many
        i, chunk, reads = 0, self.opts["batch_start"], 0
        while i < len(keys):
            part = get_many(keys[i:i + chunk])
            reads += len(part)
            for v in part:
                if v is None:
                    return vals, reads
                vals.append(v)
            i += len(part)
            chunk *= 2
        return vals, reads

    def match(self, block_ids: np.ndarray) -> Match:
        on = _phases._ON
        if on:
            _phases.enter(ROUTING)
        try:
            epoch = self._remove_epoch
            keys = as_block_ids(block_ids).tolist()
            vals, reads = self._values(keys)
        finally:
            if on:
                _phases.leave()
        with self._count_lock:
            self._matches += 1
            self._match_reads += reads
        n, ms = len(vals), self.meta_size
        if self._reuse:
            self._tl.memo = _MatchMemo(n, keys[n - 1] if n else None,
                                       keys[n] if n < len(keys) else None, epoch)
        if n == 0:
            return Match.empty(ms)
        if on:
            _phases.enter(VERIFY)
        try:
            return self._decode(keys, vals)
        finally:
            if on:
                _phases.leave()

    def _decode(self, keys: list, vals: list) -> Match:
        """The metadata of ``vals`` as one array, every value's size checked."""
        n, ms = len(vals), self.meta_size
        buf = bytearray().join(vals)
        if len(buf) != n * ms:
            bad = next(j for j, v in enumerate(vals) if len(v) != ms)
            raise StoreError(f"ssd-blockhash: the value of block {keys[bad]:#x} in store "
                             f"{self.store.name!r} has {len(vals[bad])} bytes, expected {ms}")
        return Match(n, np.frombuffer(buf, dtype=np.uint8).reshape(n, ms))

    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None:
        if worker != 0:
            check_worker("strategy ssd-blockhash", worker, self.max_workers, False)
        _phases.timed_call(ROUTING, self._insert, block_ids, metas)

    def _insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        ids = as_block_ids(block_ids)
        n, ms = len(ids), self.meta_size
        raw = as_metas(metas, n, ms).tobytes()
        memo = getattr(self._tl, "memo", None)
        self._tl.memo = None
        if n == 0:
            return
        keys = ids.tolist()
        start, known_missing = self._start_from_match(memo, keys)
        reads = 0
        # Probe outside the lock (usually most blocks are present), then re-probe
        # under it only the ones that were missing: the first writer of a block
        # still wins, and other threads' inserts wait only for the new blocks.
        bisect = self.opts["insert_probe"] == "bisect" and not self._removed
        if known_missing:
            missing = range(start, n)
        elif bisect:
            d, reads = self._first_missing(keys, start)
            missing = range(d, n)
        else:
            missing, reads = self._missing_from(keys, start)
        stale = bool(start) and self._remove_epoch != memo.epoch
        from_match = bool(start) or known_missing
        if not missing and not stale:
            self._count_insert(from_match, reads)
            return
        with self._insert_lock.guard():
            if stale:
                # a remove since the match may have taken blocks it found: probe them all
                positions, r = self._missing_from(keys, 0)
                reads += r
            elif known_missing:
                # still missing, and a chain's stored blocks are a prefix (every insert
                # writes its missing blocks in one batch, no block was ever removed):
                # every later block of the request is missing too
                still = not self._removed and self.store.get(keys[start]) is None
                reads += not self._removed
                if still:
                    positions = missing
                else:   # another insert wrote from here since, or a remove broke the rule
                    positions, r = self._missing_from(keys, start)
                    reads += r
            elif bisect:         # the stored prefix only grows: block d still missing
                #                  means all after it are; else search on from d + 1
                reads += 1
                if self.store.get(keys[d]) is not None:
                    d, r = self._first_missing(keys, d + 1)
                    reads += r
                positions = range(d, n)
            else:
                present = self.store.get_many([keys[j] for j in missing])
                reads += len(missing)
                positions = [j for j, v in zip(missing, present) if v is None]
            self._write_new(keys, raw, positions)
        self._count_insert(from_match, reads)

    def _start_from_match(self, memo, keys: list) -> tuple[int, bool]:
        """Where an insert of ``keys`` may start probing, from this thread's last
        match: ``(start, known_missing)``.  Chained ids make ``keys[:start]`` the
        prefix the match found stored (present then; :meth:`_insert` checks no remove
        came since); ``known_missing``: the match saw ``keys[start]`` missing."""
        if memo is None:            # (a match leaves none without insert_reuse)
            return 0, False
        d = memo.found
        if d > len(keys) or (d and keys[d - 1] != memo.last):
            return 0, False
        return d, d < len(keys) and memo.miss is not None and keys[d] == memo.miss

    def _missing_from(self, keys: list, lo: int) -> tuple[list, int]:
        """Positions from ``lo`` on whose blocks the store lacks (one ``get_many``),
        and the reads it took."""
        vals = self.store.get_many(keys[lo:] if lo else keys)
        return [lo + j for j, v in enumerate(vals) if v is None], len(keys) - lo

    def _count_insert(self, from_match: bool, reads: int) -> None:
        with self._count_lock:
            self._inserts += 1
            self._inserts_from_match += bool(from_match)
            self._insert_reads += reads

    def insert_known_prefix(self, block_ids, metas, known: int) -> None:
        """Write blocks ``known..n`` without probing (the caller vouches for the rest)."""
        ids = as_block_ids(block_ids)
        n, ms = len(ids), self.meta_size
        raw = as_metas(metas, n, ms).tobytes()
        if check_known(known, n) == n:
            return
        with self._insert_lock.guard():
            self._write_new(ids.tolist(), raw, range(known, n))

    def _write_new(self, keys: list, raw: bytes, positions) -> None:
        """Write the blocks at ``positions`` (absent from the store), each key once with
        its first metadata, as one batch (caller holds the insert lock)."""
        ms = self.meta_size
        on = _phases._ON
        if on:
            _phases.enter(ENCODE)
        puts, seen = [], set()
        for j in positions:
            k = keys[j]
            if k not in seen:
                seen.add(k)
                puts.append((k, raw[j * ms:(j + 1) * ms]))
        if on:
            _phases.leave()
        if puts:
            self.store.write_items(puts)
            self._entries += len(puts)

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        """Delete the listed blocks that exist, in one write batch."""
        ids, _w = self._removal_args(block_ids, worker)
        if len(ids) == 0:
            return 0
        keys = list(dict.fromkeys(ids.tolist()))
        with self._insert_lock.guard():
            present = [k for k, v in zip(keys, self.store.get_many(keys)) if v is not None]
            if present:
                self.store.write_items((), present)
            self._entries -= len(present)
            self._remove_noops += len(ids) - len(present)
            self._removed = True
            self._remove_epoch += 1
        return len(present)

    def clear(self, worker: int | None = None) -> None:
        """Delete every block (one location: any worker is every worker), scanning the
        store in chunks so memory stays bounded."""
        check_worker("strategy ssd-blockhash.clear", worker, self.max_workers, True)
        with self._insert_lock.guard():
            while True:
                chunk = []
                for k, _v in self.store.scan(0):
                    chunk.append(k)
                    if len(chunk) == 65536:
                        break
                if not chunk:
                    break
                self.store.write_items((), chunk)
            self._entries = 0
            self._remove_epoch += 1

    def _first_missing(self, keys: list, lo: int) -> tuple[int, int]:
        """Index of the first block of ``keys`` not in the store (binary search in
        ``[lo, len(keys))``; every block before ``lo`` is known to be stored), and
        the gets it took."""
        get = self.store.get
        hi, reads = len(keys), 0
        while lo < hi:
            mid = (lo + hi) >> 1
            reads += 1
            if get(keys[mid]) is None:
                hi = mid
            else:
                lo = mid + 1
        return lo, reads

    # durability: the engine holds every entry; reopening it is the recovery
    rebuild_from_store = True

    def _snapshot_state(self):
        return {"entries": self._entries, "removed": self._removed}, {}

    def _restore_state(self, meta, sections):
        self._entries = int(meta.get("entries", 0))
        self._removed = bool(meta.get("removed", False))

    def stats(self) -> dict:
        s = self.store.stats()
        m = self._matches
        return {
            "entries": self._entries, "memory_bytes": 0, "matches": m,
            "stored_block_entries": self._entries,
            "store_reads_per_match": self._match_reads / m if m else 0.0,
            "inserts": self._inserts, "inserts_from_match": self._inserts_from_match,
            "store_reads_per_insert": self._insert_reads / self._inserts if self._inserts else 0.0,
            "remove_noops": self._remove_noops,
            "store_reads": s.reads, "store_read_calls": s.read_calls, "store_writes": s.writes,
        }


@hookimpl
def prefixbench_register_strategies(register):
    register("dram-blockhash", DramBlockHashStrategy)
    register("ssd-blockhash", SsdBlockHashStrategy)
