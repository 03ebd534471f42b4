"""The SegmentStore contract: what every storage engine provides.

Keys are unsigned 64-bit integers and values are bytes.  Engines that order
keys as bytes store them big-endian (:func:`encode_key`) so that an ordered
scan visits keys in numeric order.

Subclasses implement the underscored primitives; the public methods here keep
the logical counters (:class:`StoreStats`) in one place so every engine counts
reads and writes the same way, and time the primitive as engine time
(:mod:`prefixbench.phases`) while the phase clocks are on: the
primitive alone, not the key checks around it.  Scans are timed per item
fetched (only when the clocks are on as the scan starts); sync too.
"""
from __future__ import annotations

import abc
import fnmatch
import importlib
import os
import shutil
import struct
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Sequence

from prefixbench import phases as _phases
from prefixbench.errors import ConfigError, MissingDependencyError, StoreError
from prefixbench.units import parse_size, yes_no

_KEY = struct.Struct(">Q")
MAX_KEY = (1 << 64) - 1

#: durability modes, weakest last.
#: ``sync``  - an acknowledged write survives power loss (fsync per batch);
#: ``async`` - an acknowledged write survives a process crash (kill -9): the
#:             log is written to the OS before the call returns, not fsynced;
#: ``off``   - no log: acknowledged writes may be lost by a crash.
DURABILITY_MODES = ("sync", "async", "off")


#: u64 key -> 8 big-endian bytes (byte order is key order, for ordered scans)
encode_key = _KEY.pack


def decode_key(raw: bytes) -> int:
    return _KEY.unpack(raw)[0]


#: items per chunk of :func:`chunked_scan`
SCAN_CHUNK = 1024


def chunked_scan(read_chunk, start: int, end: int | None) -> Iterator[tuple[int, bytes]]:
    """The items of ``[start, end)``, read ``SCAN_CHUNK`` at a time by
    ``read_chunk(lo)`` (ordered items with keys >= ``lo``): engines close each
    cursor before yielding, so a caller may write between items."""
    lo = start
    while end is None or lo < end:
        chunk = read_chunk(lo)
        yield from chunk
        if len(chunk) < SCAN_CHUNK or chunk[-1][0] == MAX_KEY:
            return
        lo = chunk[-1][0] + 1


@dataclass(frozen=True)
class StoreConfig:
    """How to open an engine.  ``path`` is a directory the engine owns."""

    path: str | None = None
    #: bytes of engine-side cache (block cache, page cache budget, ...)
    cache_bytes: int = 64 << 20
    #: bypass the OS page cache for reads where the engine supports it
    direct_io: bool = False
    durability: str = "async"
    #: open an existing store without creating it
    create: bool = True
    #: engine-specific extras, e.g. {"write_buffer_bytes": 8 << 20}
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.durability not in DURABILITY_MODES:
            raise ConfigError(
                f"option durability: {self.durability!r} is not one of {', '.join(DURABILITY_MODES)}")
        if not isinstance(self.cache_bytes, int) or self.cache_bytes < 0:
            raise ConfigError(f"option cache_bytes: {self.cache_bytes!r} must be an integer >= 0")


@dataclass
class StoreStats:
    """Logical operations as the index asked for them (not device I/O)."""

    reads: int = 0          # keys looked up (a get_many of n keys counts n)
    read_calls: int = 0     # get / get_many calls
    batch_read_calls: int = 0   # of which get_many
    hits: int = 0
    bytes_read: int = 0
    writes: int = 0         # keys put
    write_batches: int = 0
    deletes: int = 0
    bytes_written: int = 0
    scans: int = 0
    syncs: int = 0

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class WriteBatch:
    """Puts and deletes applied atomically by :meth:`SegmentStore.write`."""

    __slots__ = ("puts", "deletes")

    def __init__(self):
        self.puts: list[tuple[int, bytes]] = []
        self.deletes: list[int] = []

    def put(self, key: int, value: bytes) -> None:
        self.puts.append((key, value))

    def delete(self, key: int) -> None:
        self.deletes.append(key)

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes)


class _BatchContext:
    def __init__(self, store: "SegmentStore"):
        self._store = store
        self.batch = WriteBatch()

    def __enter__(self) -> WriteBatch:
        return self.batch

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and len(self.batch):
            self._store.write(self.batch)
        return False


class _ThreadReads(threading.local):
    """One logical-read count per thread (each thread starts at 0)."""
    n = 0


class SegmentStore(abc.ABC):
    """A u64-keyed byte store.  One instance may be shared by many threads."""

    #: plugin name, e.g. "lmdb"
    name: str = ""
    #: True if the data lives only in this process
    volatile: bool = False
    #: calls whose binding releases the GIL while it works: a subset of
    #: {"get", "get_many", "write"} (said in ``scale``'s output)
    gil_free_calls: frozenset = frozenset()
    #: exceptions a write's binding raises on a failing device (a full disk, EIO):
    #: :meth:`write_items` turns them into one :class:`StoreError` line naming the
    #: store; engines whose binding has its own error types add them
    write_errors: tuple = (OSError,)

    def __init__(self, config: StoreConfig):
        self.config = config
        self._stats = StoreStats()
        self._closed = False

    # ----- primitives engines implement -------------------------------
    @abc.abstractmethod
    def _get(self, key: int) -> bytes | None: ...

    def _get_many(self, keys: Sequence[int]) -> list[bytes | None]:
        return [self._get(k) for k in keys]

    @abc.abstractmethod
    def _write(self, puts: Sequence[tuple[int, bytes]], deletes: Sequence[int]) -> None:
        """Apply puts then deletes as one atomic batch, honouring durability."""

    @abc.abstractmethod
    def _scan(self, start: int, end: int | None) -> Iterator[tuple[int, bytes]]: ...

    @abc.abstractmethod
    def _sync(self) -> None: ...

    @abc.abstractmethod
    def _size_on_disk(self) -> int: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    #: per-thread read counts while :meth:`count_reads_per_thread` is on (else None)
    _thread_reads: "_ThreadReads | None" = None

    def count_reads_per_thread(self, on: bool = True) -> None:
        """Also count each calling thread's reads (:meth:`thread_reads`), so request
        threads sharing the store can tell their own matches' reads from the
        others' inserts.  Off by default: it costs a thread-local update per call."""
        self._thread_reads = _ThreadReads() if on else None

    def thread_reads(self) -> int:
        """The calling thread's logical reads since counting began (0 when off)."""
        tl = self._thread_reads
        return tl.n if tl is not None else 0

    # ----- public API (counts, then delegates) ------------------------
    def get(self, key: int) -> bytes | None:
        v = _phases.storage_call(self._get, key) if _phases._ON else self._get(key)
        s = self._stats
        s.reads += 1
        tl = self._thread_reads
        if tl is not None:
            tl.n += 1
        s.read_calls += 1
        if v is not None:
            s.hits += 1
            s.bytes_read += len(v)
        return v

    def get_many(self, keys: Sequence[int]) -> list[bytes | None]:
        """Batch read; engines whose binding releases the GIL do it here."""
        keys = list(map(int, keys))
        if not keys:
            vals = []
        elif _phases._ON:
            vals = _phases.storage_call(self._get_many, keys)
        else:
            vals = self._get_many(keys)
        s = self._stats
        s.reads += len(keys)
        tl = self._thread_reads
        if tl is not None:
            tl.n += len(keys)
        s.read_calls += 1
        s.batch_read_calls += 1
        s.hits += len(vals) - vals.count(None)
        s.bytes_read += sum(map(len, filter(None, vals)))    # (b"" adds 0 either way)
        return vals

    def put(self, key: int, value: bytes) -> None:
        self.write_items([(key, value)])

    def put_many(self, items: Iterable[tuple[int, bytes]]) -> None:
        self.write_items(list(items))

    def write_items(self, puts: Sequence[tuple[int, bytes]], deletes: Sequence[int] = ()) -> None:
        puts = [(check_key(k), v if type(v) is bytes else bytes(v)) for k, v in puts]
        deletes = [check_key(k) for k in deletes] if deletes else []
        try:
            if _phases._ON:
                _phases.storage_call(self._write, puts, deletes)
            else:
                self._write(puts, deletes)
        except StoreError:
            raise
        except self.write_errors as e:
            why = " ".join(str(e).split()) or type(e).__name__
            where = getattr(self, "path", None) or self.config.path
            raise StoreError(f"{self.name} store {where}: the write failed ({why[:200]}); "
                             "batches acknowledged before it are kept") from None
        s = self._stats
        s.writes += len(puts)
        s.deletes += len(deletes)
        s.write_batches += 1
        s.bytes_written += sum([len(v) for _, v in puts])

    def write(self, batch: WriteBatch) -> None:
        self.write_items(batch.puts, batch.deletes)

    def batch(self) -> _BatchContext:
        """``with store.batch() as b: b.put(k, v)`` commits atomically on exit."""
        return _BatchContext(self)

    def delete(self, key: int) -> None:
        self.write_items((), [key])

    def scan(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Items with ``start <= key < end`` in increasing key order."""
        self._stats.scans += 1
        it = self._scan(check_key(start), None if end is None else check_key(end))
        return _timed_items(it) if _phases._ON else it

    def sync(self) -> None:
        if _phases._ON:
            _phases.storage_call(self._sync)
        else:
            self._sync()
        self._stats.syncs += 1

    def write_mark(self):
        """A mark that differs from every earlier one once a write has landed since it
        was read, or None where the engine keeps none.  Two equal marks of one store
        (or of a checkpoint and its clones) mean nothing was written in between: a
        snapshot may then trust in-memory state it cannot find again in the store."""
        return None

    def size_on_disk(self) -> int:
        """Bytes the store's data occupies on disk (allocated blocks), 0 if in memory."""
        return self._size_on_disk()

    def flush(self) -> None:
        """Move buffered writes (memtables) into data files, so that sizes
        measured afterwards show the data where it will live.  Defaults to
        :meth:`sync`; engines with a write buffer override it."""
        self.sync()

    def settle(self, timeout: float = 600.0) -> float:
        """Finish the background work earlier writes left behind (buffered writes,
        pending compactions), so that a timed phase after an untimed load is not
        charged for the load's debt; the seconds it took.  Gives up waiting after
        ``timeout`` seconds.  Defaults to :meth:`flush`; engines with background
        compaction override it."""
        t0 = time.perf_counter()
        self.flush()
        return time.perf_counter() - t0

    #: glob patterns of files in the store directory that are the engine's
    #: write-ahead/journal logs rather than data (counted apart by disk_usage)
    log_file_patterns: tuple = ()

    def level_files(self) -> dict | None:
        """Table files per level of an LSM engine, ``{level: count}`` over the levels
        that hold any: the shape a timed run starts from, which sets how many files a
        read may have to look in.  None where the engine has no levels."""
        return None

    def memory_outside_budget(self) -> int:
        """Bytes of engine memory not bounded by ``cache_bytes`` (RocksDB's table
        readers: index and filter blocks); 0 where the engine keeps none or cannot say."""
        return 0

    #: name -> :class:`EngineOption`: every option the engine accepts
    OPTIONS: dict = {}

    #: the engine option that turns :meth:`io_counters` on (None: it has no such switch)
    io_counters_option: str | None = None

    #: what :meth:`io_counters` reports, in this order
    IO_COUNTERS = ("device_reads", "cache_hits", "memtable_hits", "compaction_bytes",
                   "flush_bytes")

    def io_counters(self) -> dict | None:
        """Where the engine served reads and what its background work moved, each
        cumulative since open: ``{name: count}`` over :attr:`IO_COUNTERS` (reads from
        its files, data-cache hits, write-buffer hits, compaction and flush bytes).
        A harness takes the difference around a timed run.  None where the engine
        keeps no such counters or they are off."""
        return None

    def disk_usage(self) -> dict:
        """``{"data_bytes", "log_bytes"}``: allocated blocks, the engine's logs apart.

        Files matching :attr:`log_file_patterns` are logs; everything else in
        the store directory is data.  Engines without log patterns report
        :meth:`size_on_disk` as data.
        """
        path = getattr(self, "path", None) or self.config.path
        if not (path and self.log_file_patterns and os.path.isdir(path)):
            return {"data_bytes": self.size_on_disk(), "log_bytes": 0}
        data = log = 0
        for root, _dirs, files in os.walk(path):
            for name in files:
                try:
                    size = os.stat(os.path.join(root, name)).st_blocks * 512
                except FileNotFoundError:
                    continue
                if any(fnmatch.fnmatch(name, pat) for pat in self.log_file_patterns):
                    log += size
                else:
                    data += size
        return {"data_bytes": data, "log_bytes": log}

    def logical_size(self) -> tuple[int, int]:
        """``(records, bytes)`` the index asked to keep: live items, and their
        8-byte keys plus values.

        Found by an ordered scan, so it costs a pass over the store.
        """
        records = nbytes = 0
        for _k, v in self._scan(0, None):
            records += 1
            nbytes += 8 + len(v)
        return records, nbytes

    def logical_bytes(self) -> int:
        """Bytes the index asked to keep: 8-byte keys plus values, live items only."""
        return self.logical_size()[1]

    def stats(self) -> StoreStats:
        return self._stats

    def reset_stats(self) -> None:
        self._stats = StoreStats()

    #: True if :meth:`checkpoint` copies the store (a sweep then loads each setting
    #: once and starts every repeat from a clone of that copy)
    checkpoints: bool = False

    def checkpoint(self, path) -> None:
        """Copy every acknowledged write into the new directory ``path``, as a store of
        this engine opens it; this store stays open and unchanged.  Engines that
        cannot (``checkpoints`` False) refuse with one line."""
        raise StoreError(f"engine {self.name} cannot checkpoint a store")

    @classmethod
    def clone_checkpoint(cls, src, dst) -> None:
        """Fill the empty directory ``dst`` with a copy of the checkpoint ``src`` that a
        store may open and change while ``src`` stays as it is.  A plain copy here;
        engines whose files never change once written link them instead."""
        shutil.copytree(src, dst, dirs_exist_ok=True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _timed_items(it: Iterator) -> Iterator:
    """``it`` with every fetch of an item counted as engine time."""
    call = _phases.storage_call
    while True:
        try:
            item = call(next, it)
        except StopIteration:
            return
        yield item


def check_key(key, what: str | None = None) -> int:
    """``key`` as an int in the u64 key space; a ValueError otherwise (naming ``what``,
    e.g. "scan start", when given)."""
    k = int(key)
    if not 0 <= k <= MAX_KEY:
        if what:
            raise ValueError(f"{what}: {key!r} is not an unsigned 64-bit key")
        raise ValueError(f"key {key!r} is not an unsigned 64-bit integer")
    return k



def allocated_bytes(path: str) -> int:
    """Disk blocks really allocated under ``path`` (``st_blocks * 512``)."""
    if not path or not os.path.exists(path):
        return 0
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


# ----- helpers shared by the engines ------------------------------------
def import_binding(engine: str, module: str, install: str):
    """Import an engine's binding lazily (the registry imports every engine module at
    start-up); a missing binding is one line saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(f"engine '{engine}' needs the {module} package: "
                                     f"{install}") from e


@dataclass(frozen=True)
class EngineOption:
    """One engine option (``--engine-option KEY=VALUE``): its default (a value, or
    words where the configuration decides it) and what it does; an engine's
    ``OPTIONS`` mapping of these is what it accepts and what ``plugins --options``
    lists."""

    default: object
    help: str


def check_options(engine: str, options: dict, known) -> dict:
    """Reject engine options nobody reads, naming the option and the known ones
    (``known``: the names, or the engine's ``OPTIONS`` mapping)."""
    for key in options:
        if key not in known:
            raise ConfigError(f"option {key!r} is not known to engine {engine}; "
                              f"known: {', '.join(sorted(known)) or 'none'}")
    return dict(options)


def prepare_store_dir(path, create: bool, engine: str, marker: str) -> str:
    """Check (and with ``create`` make) the store directory; never removes anything.

    ``marker`` is a file every store of this engine has; without it and
    with ``create=False`` there is no store to open.  Errors are one line
    naming the path.
    """
    if not path:
        raise StoreError(f"engine {engine} needs a store path (a directory)")
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path) and not os.path.isdir(path):
        raise StoreError(f"{engine} store path {path}: exists and is not a directory")
    if not os.path.isdir(path):
        if not create:
            raise StoreError(f"{engine} store path {path}: no store there (create=False)")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise StoreError(f"{engine} store path {path}: cannot create directory "
                             f"({e.strerror or e})") from None
    elif not create and not os.path.exists(os.path.join(path, marker)):
        raise StoreError(f"{engine} store path {path}: no {engine} store in this directory "
                         f"(create=False)")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise StoreError(f"{engine} store path {path}: directory is not readable and writable")
    return path


def bool_option(opts: dict, name: str, default: bool) -> bool:
    """A yes/no engine option: a bool, or one of 1/0, true/false, yes/no, on/off."""
    value = opts.get(name, default)
    if isinstance(value, bool):
        return value
    flag = yes_no(value)
    if flag is None:
        raise ConfigError(f"option {name}: {value!r} is not one of true/false, yes/no, on/off, "
                          "1/0")
    return flag


def choice_option(opts: dict, name: str, default: str, choices) -> str:
    """An engine option that takes one of ``choices``."""
    value = opts.get(name, default)
    if value not in choices:
        raise ConfigError(f"option {name}: {value!r} is not one of {', '.join(choices)}")
    return value


def int_option(opts: dict, name: str, default: int, minimum: int, size: bool = False) -> int:
    """An integer engine option; strings from the CLI are parsed (sizes like ``64MiB``)."""
    value = opts.get(name, default)
    if isinstance(value, str):
        if size:
            value = parse_size(name, value)
        else:
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"option {name}: {value!r} is not an integer") from None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"option {name}: {value!r} must be an integer >= {minimum}")
    return value
