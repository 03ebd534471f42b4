"""``rocksdb``: an LSM tree via rocksdict in raw (bytes) mode.

Memory budget (the SARP paper's setup): ``cache_bytes`` is split equally
between the block cache and the memtables (two write buffers of a quarter
each).  Option ``write_buffer_bytes`` sets the memtable share instead; the
block cache gets the rest.  Index and filter blocks (10-bit Bloom filters) are
held by the table readers, outside the block cache, as RocksDB does by default
and as the paper's budget (block cache plus memtable) implies; their memory is
reported as ``store-memory-outside-budget-bytes``.  Option ``index_in_cache=true`` puts them in
the block cache instead, so the budget covers them too and a get that misses
them pays extra device reads.

Option ``row_cache_bytes`` gives part of the block cache's share to RocksDB's
row cache, which keeps single records a get returned instead of whole data
blocks, so the budget stays ``cache_bytes``.  It pays where reads are scattered
single records; where records read together sit side by side (a sequence's
windows under adjacent ids) a block brings its neighbours in and the block
cache serves more: on codeact at paper scale both segment layouts made more
file reads and ran slower with any row cache (``docs/sarp-comparison.md``,
"Row cache").

``direct_io`` turns on O_DIRECT for reads and for flush/compaction writes.

Compression: option ``compression`` (snappy, RocksDB's default; lz4, zstd or
none) is how table files store data blocks.  The block cache holds blocks
uncompressed either way, so the budget buys the same cache; what changes is the
bytes a file read fetches and the CPU that decompresses them after it (and that
compresses them in flushes and compactions).  A layout whose records compress
little pays the decompression for almost no bytes saved.

Compactions: with the paper's small memtables (a quarter of a 5 MiB budget on
codeact) and writes spread over the key space, every L0 compaction rewrites
much of the last level, and at two request threads on two cores those
compactions compete with the requests for CPU.  Option
``l0_compaction_trigger`` (RocksDB's ``level0_file_num_compaction_trigger``,
default 4, RocksDB's own) lets more L0 files gather before one compaction
merges them, so the last level is rewritten less often; reads then check more
L0 files' in-memory Bloom filters.  The other way, a trigger of 1 leaves no L0
file behind a load, so records written at different times but read together (a
sequence's windows under adjacent ids) sit in the last level's key order, in
fewer data blocks: on eabf at paper scale sarp's file reads per request fell
from 4.36 to 3.52 and capped's to 1.37 (``docs/sarp-comparison.md``, "L0
files").  The default stays RocksDB's, as in the paper's setup.

Durability: ``sync`` fsyncs the WAL per batch; ``async`` writes the WAL to
the OS per batch without fsync (survives kill -9); ``off`` disables the WAL
(the memtable is lost on a crash; :meth:`sync` flushes it to SST files).

Write stalls: every write goes first with ``no_slowdown``, so a write RocksDB
would hold comes back at once.  If RocksDB is only slowing writes it is sent
again the ordinary way, taking RocksDB's own delay.  If writes are stopped
(memtables full until a flush finishes; on a full device it never does) it is
retried with a back-off of at most 1 ms, so a flush that ends is seen within
1 ms, until ``write_stall_seconds`` (default 30) have passed, and then fails
with one line naming the store.  A write sent the ordinary way into a stop on
a full disk waits forever inside the binding, where no signal reaches it.

Where reads are served: option ``statistics=true`` turns on RocksDB's
statistics, and :meth:`io_counters` reads from them the file reads (the
last- and non-last-level read counts, background read-aheads included), the
block-cache data hits, the memtable hits and the bytes compactions and flushes
moved, so a run can say how many of its reads went to the device.  It is off by
default because the counters cost a little on every call.

Options: :data:`OPTIONS` (``prefixbench plugins --options`` lists them with their
defaults).
"""
from __future__ import annotations

import os
import re
import shutil
import threading
import time

from prefixbench.engines.base import (
    EngineOption,
    SegmentStore,
    StoreConfig,
    SCAN_CHUNK,
    allocated_bytes,
    bool_option,
    check_options,
    choice_option,
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
    "write_buffer_bytes": EngineOption("cache_bytes / 2", "the memtables' share of cache_bytes "
                                       "(two write buffers of half of it each)"),
    "background_jobs": EngineOption(4, "flush and compaction threads"),
    "write_stall_seconds": EngineOption(30, "how long a write may wait in a write stop "
                                        "before one error line"),
    "index_in_cache": EngineOption(False, "index and filter blocks in the block cache "
                                   "(counted in the budget)"),
    "statistics": EngineOption(False, "RocksDB statistics, read by io_counters (where reads "
                               "were served)"),
    "block_bytes": EngineOption(4096, "uncompressed data block size (RocksDB's block_size, "
                                "default 4 KiB): what one file read fetches"),
    "compression": EngineOption("snappy", "how data blocks are compressed on disk: snappy "
                                "(RocksDB's default), lz4, zstd or none; the block cache "
                                "holds them uncompressed either way"),
    "row_cache_bytes": EngineOption(0, "the part of the block cache's share given to RocksDB's "
                                    "row cache (single records, not whole data blocks)"),
    "l0_compaction_trigger": EngineOption(4, "L0 files that start a compaction into the next "
                                          "level (RocksDB's default 4); the slowdown and stop "
                                          "triggers keep their default distance above it"),
}
#: more levels than any RocksDB store has (its default is 7)
_MAX_LEVELS = 64
#: the ``compression`` option's values (rocksdict's DBCompressionType constructors)
COMPRESSIONS = ("snappy", "lz4", "zstd", "none")
#: RocksDB's level-0 slowdown and stop triggers, by default 20 and 36: above the compaction
#: trigger by these
_L0_SLOWDOWN_GAP, _L0_STOP_GAP = 16, 32
#: io_counters() name -> the RocksDB tickers it adds up
_TICKERS = {
    "device_reads": ("rocksdb.last.level.read.count", "rocksdb.non.last.level.read.count"),
    "cache_hits": ("rocksdb.block.cache.data.hit", "rocksdb.row.cache.hit"),
    "memtable_hits": ("rocksdb.memtable.hit",),
    "compaction_bytes": ("rocksdb.compact.read.bytes", "rocksdb.compact.write.bytes"),
    "flush_bytes": ("rocksdb.flush.write.bytes",),
}
_TICKER_LINE = re.compile(r"^(rocksdb\.[a-z0-9.]+) COUNT : (\d+)$", re.M)
_MIN_WRITE_BUFFER = 64 << 10


class RocksDBStore(SegmentStore):
    """RocksDB via rocksdict; block cache and memtables split cache_bytes equally."""

    name = "rocksdb"
    OPTIONS = OPTIONS
    volatile = False
    gil_free_calls = frozenset(("get_many",))
    io_counters_option = "statistics"

    def __init__(self, config: StoreConfig | None = None):
        config = config or StoreConfig()
        super().__init__(config)
        rocksdict = import_binding("rocksdb", "rocksdict", "pip install rocksdict, "
                                   "or reinstall with pip install prefixbench")
        opts = check_options(self.name, config.options, OPTIONS)
        memtable = int_option(opts, "write_buffer_bytes", config.cache_bytes // 2, 0, size=True)
        if memtable > config.cache_bytes:
            raise ConfigError(f"option write_buffer_bytes: {memtable} exceeds cache_bytes "
                              f"{config.cache_bytes}")
        jobs = int_option(opts, "background_jobs", OPTIONS["background_jobs"].default, 1)
        self.write_stall_seconds = int_option(opts, "write_stall_seconds",
                                               OPTIONS["write_stall_seconds"].default, 1)
        self.index_in_cache = bool_option(opts, "index_in_cache", OPTIONS["index_in_cache"].default)
        self.statistics = bool_option(opts, "statistics", OPTIONS["statistics"].default)
        self.l0_compaction_trigger = int_option(opts, "l0_compaction_trigger",
                                                OPTIONS["l0_compaction_trigger"].default, 1)
        self.block_bytes = int_option(opts, "block_bytes", OPTIONS["block_bytes"].default, 512,
                                      size=True)
        self.compression = choice_option(opts, "compression", OPTIONS["compression"].default,
                                         COMPRESSIONS)
        share = config.cache_bytes - memtable      # the block cache's, a row cache's included
        self.row_cache_bytes = int_option(opts, "row_cache_bytes", OPTIONS["row_cache_bytes"].default,
                                           0, size=True)
        if self.row_cache_bytes > share:
            raise ConfigError(f"option row_cache_bytes: {self.row_cache_bytes} exceeds the block "
                              f"cache's share of cache_bytes ({share})")
        self.block_cache_bytes = share - self.row_cache_bytes
        self.write_buffer_bytes = max(memtable // 2, _MIN_WRITE_BUFFER)
        self.path = prepare_store_dir(config.path, config.create, self.name, "CURRENT")

        o = rocksdict.Options(raw_mode=True)
        o.create_if_missing(config.create)
        table = rocksdict.BlockBasedOptions()
        if self.block_cache_bytes > 0:
            table.set_block_cache(rocksdict.Cache(self.block_cache_bytes))
        else:
            table.disable_cache()
        table.set_block_size(self.block_bytes)
        table.set_bloom_filter(10, False)
        if self.index_in_cache:
            table.set_cache_index_and_filter_blocks(True)
            table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        o.set_block_based_table_factory(table)
        if self.row_cache_bytes:
            o.set_row_cache(rocksdict.Cache(self.row_cache_bytes))
        o.set_compression_type(getattr(rocksdict.DBCompressionType, self.compression)())
        o.set_write_buffer_size(self.write_buffer_bytes)
        o.set_max_write_buffer_number(2)
        o.set_max_background_jobs(jobs)
        o.set_keep_log_file_num(2)
        l0 = self.l0_compaction_trigger
        o.set_level_zero_file_num_compaction_trigger(l0)
        o.set_level_zero_slowdown_writes_trigger(l0 + _L0_SLOWDOWN_GAP)
        o.set_level_zero_stop_writes_trigger(l0 + _L0_STOP_GAP)
        if self.statistics:
            o.enable_statistics()
        self._options = o
        if config.direct_io:
            o.set_use_direct_reads(True)
            o.set_use_direct_io_for_flush_and_compaction(True)
        try:
            # the default column family's options given explicitly: reopening an existing
            # store, rocksdict otherwise takes that family's options from the store's
            # OPTIONS file, where the block cache is not saved (RocksDB's default 8 MiB
            # cache then replaces the budget's)
            self._db = rocksdict.Rdict(self.path, o, column_families={"default": o})
        except Exception as e:   # rocksdict raises a bare Exception
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise StoreError(f"rocksdb store path {self.path}: cannot open ({why})") from None
        wo = rocksdict.WriteOptions()
        wo.sync = config.durability == "sync"
        wo.disable_wal = config.durability == "off"
        self._db.set_write_options(wo)
        self._delayed_write = wo
        self._write_now = rocksdict.WriteOptions()   # the same, but never held
        self._write_now.sync, self._write_now.disable_wal = wo.sync, wo.disable_wal
        self._write_now.no_slowdown = True
        self._rocksdict = rocksdict
        self.write_errors = (Exception,)     # rocksdict raises a bare Exception
        self._close_lock = threading.Lock()

    checkpoints = True

    def checkpoint(self, path) -> None:
        """RocksDB's own checkpoint, after a flush (so the copy needs no log replay):
        hard links to the table files, copies of the rest."""
        self.flush()
        try:
            self._rocksdict.Checkpoint(self._db).create_checkpoint(os.fspath(path))
        except Exception as e:          # rocksdict raises a bare Exception
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise StoreError(f"rocksdb store {self.path}: checkpoint to {path} failed "
                             f"({why})") from None

    @classmethod
    def clone_checkpoint(cls, src, dst) -> None:
        """Table files (``*.sst``) are hard-linked: RocksDB never changes one, and a
        compaction in the clone only unlinks the clone's own names.  The rest (manifest,
        options, logs) is copied; so is a table file a link cannot reach."""
        os.makedirs(dst, exist_ok=True)
        for name in os.listdir(src):
            a, b = os.path.join(src, name), os.path.join(dst, name)
            if name.endswith(".sst"):
                try:
                    os.link(a, b)
                    continue
                except OSError:
                    pass
            shutil.copy2(a, b)

    def _get(self, key):
        return self._db.get(_PACK(key))

    def _get_many(self, keys):
        return self._db[list(map(_PACK, keys))]    # multi-get, releases the GIL

    def _batch(self, puts, deletes):
        wb = self._rocksdict.WriteBatch(raw_mode=True)
        for k, v in puts:
            wb.put(_PACK(k), v)
        for k in deletes:
            wb.delete(_PACK(k))
        return wb

    def _send(self, puts, deletes, opts):
        """One atomic write: a lone record as a put (RocksDB batches it itself; a
        binding batch object costs a few microseconds to build), else a batch, which
        write() consumes."""
        if len(puts) == 1 and not deletes:
            k, v = puts[0]
            self._db.put(_PACK(k), v, opts)
        else:
            self._db.write(self._batch(puts, deletes), opts)

    def _write(self, puts, deletes):
        deadline, pause = None, 1e-4
        while True:
            try:
                self._send(puts, deletes, self._write_now)
                return
            except Exception as e:       # rocksdict raises a bare Exception
                if "incomplete" not in str(e).lower():
                    raise
            if self._db.property_int_value("rocksdb.is-write-stopped") == 0:
                self._send(puts, deletes, self._delayed_write)
                return                               # slowed, not stopped: RocksDB's delay
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.write_stall_seconds
            elif now >= deadline:
                why = self._db.property_value("rocksdb.background-errors")
                raise StoreError(
                    f"rocksdb store {self.path}: writes stalled for "
                    f"{self.write_stall_seconds} s ({why or 0} background errors; is the "
                    "device full?); batches acknowledged before it are kept") from None
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)        # a flush ending is seen within 1 ms

    def _scan_chunk(self, lo, end):
        ro = self._rocksdict.ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(_PACK(end))
        it = self._db.iter(ro)
        it.seek(_PACK(lo))
        out = []
        while it.valid() and len(out) < SCAN_CHUNK:
            out.append((decode_key(it.key()), it.value()))
            it.next()
        del it
        return out

    def _scan(self, start, end):
        return chunked_scan(lambda lo: self._scan_chunk(lo, end), start, end)

    def _sync(self):
        if self.config.durability == "off":
            self._db.flush(True)        # no WAL: the memtable must reach SST files
        else:
            self._db.flush_wal(True)

    def flush(self):
        self._db.flush(True)        # memtables -> SST files, waiting for the flush

    def write_mark(self) -> int:
        """RocksDB's last sequence number: every write adds to it, flushes and
        compactions do not, and a checkpoint keeps it."""
        return self._db.latest_sequence_number()

    #: properties that say a flush or compaction is still owed or running
    _BACKGROUND = ("rocksdb.compaction-pending", "rocksdb.num-running-compactions",
                   "rocksdb.num-running-flushes", "rocksdb.mem-table-flush-pending")

    def settle(self, timeout: float = 600.0) -> float:
        t0 = time.perf_counter()
        self.flush()
        pause = 1e-3
        while any(self._db.property_int_value(p) for p in self._BACKGROUND):
            if time.perf_counter() - t0 >= timeout:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return time.perf_counter() - t0

    log_file_patterns = ("*.log",)   # the WAL; LOG and LOG.old are info logs, kept as data

    def level_files(self):
        files, level = {}, 0
        while level < _MAX_LEVELS:
            n = self._db.property_int_value(f"rocksdb.num-files-at-level{level}")
            if n is None:              # past the store's last level
                break
            if n:
                files[level] = int(n)
            level += 1
        return files

    def memory_outside_budget(self):
        if self.index_in_cache:
            return 0
        return int(self._db.property_int_value("rocksdb.estimate-table-readers-mem") or 0)

    def io_counters(self):
        if not self.statistics:
            return None
        counts = {name: int(n) for name, n in _TICKER_LINE.findall(self._options.get_statistics())}
        return {key: sum(counts.get(t, 0) for t in tickers) for key, tickers in _TICKERS.items()}

    def _size_on_disk(self):
        return allocated_bytes(self.path)

    def _close(self):
        with self._close_lock:
            self._db.close()


@hookimpl
def prefixbench_register_engines(register):
    register("rocksdb", RocksDBStore)
