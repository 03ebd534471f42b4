"""The IndexStrategy contract: what every prefix index provides.

Block IDs travel as ``uint64`` NumPy arrays; block metadata as ``uint8`` arrays
of shape ``(n_blocks, meta_size)`` (default 16 bytes per block).

Semantics every strategy keeps (the property tests check them against the
``radix`` oracle):

* ``match(ids)`` returns the longest prefix of ``ids`` whose blocks are all
  indexed, with their metadata in order.  A strategy may return a *shorter*
  prefix (e.g. SARP under a retrieval budget) but never a longer one, and
  never a block whose ID it did not verify.
* ``insert(ids, metas, worker=0)`` registers a processed sequence as
  available on ``worker``.  A block already available on that worker keeps
  the metadata it was first inserted with there (the cached KVCache block
  already exists; re-processing it creates no new copy).

Removal (``supports_remove``; eviction from bounded KVCache pools):

* ``remove(ids, worker=None) -> int``: each listed block becomes unavailable
  on ``worker``, or on every worker when None; returns how many (block,
  worker) availabilities went away.  A block not available there is a no-op
  counted in the ``remove_noops`` stat, never an error (engines evict blocks
  the index may never have seen).  ``clear(worker=None)`` removes everything,
  or one worker's blocks.
* ``match`` stops at the first block available on no worker; ``metas[i]`` is
  block i's metadata on the lowest-numbered worker holding it, and
  ``Match.locations`` (strategies tracking several workers, ``max_workers >
  1``) gives per block a uint64 bitmap, bit w for worker w.
* After a remove, a later insert makes the block available again with that
  insert's metadata.
* Ids passed to ``remove`` must already be a 1-D ``numpy.uint64`` array (the
  pools hand over what they evicted; a list or a signed array there is a
  caller's bug) and ``worker`` an int in ``[0, max_workers)``: anything else is
  one :class:`~prefixbench.errors.ConfigError` line.  A third-party strategy
  that does not declare ``supports_remove`` keeps working for insert-only
  runs, and calling its ``remove`` is one ConfigError line.  An ``insert``
  written without a ``worker`` parameter is adapted to accept ``worker=0``.

Durability.  ``snapshot(dir)`` publishes the strategy's in-memory
state through the one protocol of :mod:`prefixbench.snapshot`
(versioned, checksummed, write-temp/fsync/rename/fsync-dir); call it while no
insert is in flight.  ``Strategy.recover(store, dir, options)`` builds a
serving instance in three timed phases, recorded in ``instance.recovery``:
*load* (read the file, verify every checksum), *deserialize* (arrays into the
strategy's structures) and *rebuild* (catch up with what the snapshot does not
cover); ``init_s`` is the constructor in between (e.g. the segment layer
finding its next segment id in the store).  "Nothing acknowledged is lost" is each strategy's business:

* strategies whose index lives in the store (``ssd-blockhash``,
  ``segment-hash``) have nothing to catch up: reopening the engine is the
  recovery;
* ``sarp`` re-registers the segments the store holds past the snapshot (an
  ordered scan from the first segment id the snapshot does not cover) and the
  in-place extensions journalled since (see :mod:`prefixbench.plugins.sarp`);
* strategies whose in-memory state the store cannot reproduce (``radix``,
  ``dram-blockhash``, ``segment-radix``: its segments do not record which
  segment precedes them) keep an fsynced insert log when
  :meth:`IndexStrategy.enable_log` is on (durable mode) and replay the
  inserts after the snapshot's log position.

An unusable snapshot (missing, cut, corrupt, other version) raises
:class:`~prefixbench.snapshot.SnapshotError` and is never served:
``rebuild_from_store`` strategies then rebuild from the engine, log keepers
replay a log that holds every insert since the start, the others fail with
that one line.

A strategy supplies its state through the hooks ``_snapshot_state``,
``_restore_state``, ``_catch_up``, ``_rebuild_from_store`` and ``_quiesce``;
the procedure around them (generations, log replay, fallbacks) lives in
:mod:`prefixbench.plugins.recovery`, which reports its notes through the
``notify`` callback rather than printing.
"""
from __future__ import annotations

import abc
import functools
import inspect
import math
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from prefixbench.engines.base import SegmentStore
from prefixbench.errors import ConfigError
from prefixbench.plugins import recovery as _recovery
from prefixbench.units import yes_no

META_SIZE = 16
EMPTY_IDS = np.empty(0, dtype=np.uint64)


def as_block_ids(block_ids) -> np.ndarray:
    """``block_ids`` as a contiguous 1-D uint64 array (no copy if it already is one)."""
    a = np.ascontiguousarray(block_ids, dtype=np.uint64)
    if a.ndim != 1:
        raise ValueError(f"block ids must be a 1-D uint64 array, got shape {a.shape}")
    return a


def as_metas(metas, n: int, meta_size: int) -> np.ndarray:
    """``metas`` as a contiguous uint8 array of shape ``(n, meta_size)``."""
    m = np.ascontiguousarray(metas, dtype=np.uint8)
    if m.shape != (n, meta_size):
        raise ValueError(f"metas must be a uint8 array of shape ({n}, {meta_size}), "
                         f"got shape {m.shape}")
    return m


@dataclass
class Match:
    n_blocks: int
    metas: np.ndarray  # uint8, shape (n_blocks, meta_size)
    #: uint64 per matched block, bit w set when worker w holds it; None from
    #: strategies that track one location
    locations: np.ndarray | None = None

    @classmethod
    def empty(cls, meta_size: int = META_SIZE) -> "Match":
        return cls(0, np.empty((0, meta_size), dtype=np.uint8))


@dataclass(frozen=True)
class Option:
    """One configurable strategy parameter with its default and valid range.

    ``beyond_paper``: a choice the strategy's paper does not make; a comparison
    prints its value even when it is the default, so a reader sees it."""

    default: object
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    beyond_paper: bool = False

    def parse(self, name: str, value):
        kind = type(self.default)
        try:
            if kind is bool and isinstance(value, str):
                v = yes_no(value)
                if v is None:
                    raise ValueError(value)
            else:
                v = kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"option {name}: {value!r} is not a valid {kind.__name__}") from None
        if kind is float and not math.isfinite(v):      # nan passes every min/max test
            raise ConfigError(f"option {name}: {value!r} is not a finite number")
        if self.choices is not None and v not in self.choices:
            raise ConfigError(f"option {name}: {v!r} is not one of {', '.join(map(str, self.choices))}")
        if self.min is not None and v < self.min:
            raise ConfigError(f"option {name}: {v!r} is below the minimum {self.min}")
        if self.max is not None and v > self.max:
            raise ConfigError(f"option {name}: {v!r} is above the maximum {self.max}")
        return v


def parse_options(owner: str, spec: dict[str, Option], given: dict | None) -> dict:
    """Defaults from ``spec`` overridden by ``given``; unknown keys are errors."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(spec))
    if unknown:
        known = ", ".join(sorted(spec)) or "none"
        raise ConfigError(f"option {unknown[0]}: not an option of {owner} (options: {known})")
    return {k: (opt.parse(k, given[k]) if k in given else opt.default) for k, opt in spec.items()}


MAX_WORKERS = 64                # the width of a location bitmap


def removal_ids(block_ids, owner: str) -> np.ndarray:
    """``block_ids`` if it is a 1-D uint64 NumPy array, else one ConfigError line."""
    if not isinstance(block_ids, np.ndarray) or block_ids.dtype != np.uint64 \
            or block_ids.ndim != 1:
        what = (f"an array of dtype {block_ids.dtype} and shape {block_ids.shape}"
                if isinstance(block_ids, np.ndarray) else f"a {type(block_ids).__name__}")
        raise ConfigError(f"{owner}.remove: block ids must be a 1-D numpy uint64 array, "
                          f"got {what}")
    return np.ascontiguousarray(block_ids)


def check_known(known: int, n: int) -> int:
    """A bulk load's known-prefix hint, checked against the sequence's ``n`` blocks."""
    if not 0 <= known <= n:
        raise ValueError(f"known={known} outside 0..{n}")
    return int(known)


def check_worker(owner: str, worker, max_workers: int, allow_all: bool) -> int:
    """``worker`` as an int in ``[0, max_workers)`` (-1 for None when ``allow_all``)."""
    if worker is None and allow_all:
        return -1
    if isinstance(worker, (bool, np.bool_)) or not isinstance(worker, (int, np.integer)) \
            or not 0 <= worker < max_workers:
        raise ConfigError(f"{owner}: worker {worker!r} is outside 0..{max_workers - 1} "
                          f"(max_workers = {max_workers})")
    return int(worker)


def _takes_worker(fn) -> bool:
    """True if ``fn`` has a ``worker`` parameter (or a signature Python cannot read)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "worker" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _accepting_worker(insert):
    """``insert(self, ids, metas)`` adapted to the contract's ``worker`` argument."""
    @functools.wraps(insert)
    def insert_on_worker(self, block_ids, metas, worker: int = 0):
        if worker != 0:
            check_worker(f"strategy {self.name}", worker, self.max_workers, False)
        return insert(self, block_ids, metas)
    return insert_on_worker


def _note_on_stderr(line: str) -> None:
    """Where ``recover``'s notes go when the caller passes no ``notify``."""
    sys.stderr.write(f"prefixbench: {line}\n")


class IndexStrategy(abc.ABC):
    """A prefix index.  One instance serves many request threads."""

    #: plugin name, e.g. "dram-blockhash"
    name: ClassVar[str] = ""
    #: True if the strategy keeps its index in a SegmentStore
    needs_store: ClassVar[bool] = False
    #: True if the strategy always returns the exact longest prefix
    exact: ClassVar[bool] = False
    #: configurable parameters
    options: ClassVar[dict[str, Option]] = {}
    #: parts of match/insert that run in compiled code with the GIL released (said
    #: in ``scale``'s output beside the engine calls that release it); empty when the
    #: strategy's own work holds the GIL throughout
    gil_free_parts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, store: SegmentStore | None = None, options: dict | None = None,
                 meta_size: int = META_SIZE):
        if self.needs_store and store is None:
            raise ConfigError(f"strategy {self.name} needs an engine (--engine)")
        self.store = store
        self.meta_size = meta_size
        self.opts = parse_options(f"strategy {self.name}", self.options, options)

    @abc.abstractmethod
    def match(self, block_ids: np.ndarray) -> Match: ...

    @abc.abstractmethod
    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None: ...

    #: True if ``remove`` and ``clear`` are implemented (eviction runs need it)
    supports_remove: ClassVar[bool] = False
    #: locations tracked per block: 1 = one; up to MAX_WORKERS (the bitmap's width)
    max_workers: ClassVar[int] = 1
    #: True if ``remove`` returns the exact count (every listed block looked up);
    #: False where a never-stored block cannot be told from a stored one cheaply
    exact_remove_count: ClassVar[bool] = True

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        """Make the listed blocks unavailable on ``worker`` (every worker if None)."""
        raise ConfigError(f"strategy {self.name} does not support remove "
                          f"(supports_remove is False), so it cannot serve eviction runs")

    def clear(self, worker: int | None = None) -> None:
        """Remove every block, or every block of ``worker``."""
        raise ConfigError(f"strategy {self.name} does not support clear "
                          f"(supports_remove is False), so it cannot serve eviction runs")

    def _removal_args(self, block_ids, worker) -> tuple[np.ndarray, int]:
        """Checked ``remove`` arguments: the ids and the worker (-1 = every worker)."""
        ids = removal_ids(block_ids, f"strategy {self.name}")
        return ids, check_worker(f"strategy {self.name}.remove", worker, self.max_workers, True)

    def insert_known_prefix(self, block_ids: np.ndarray, metas: np.ndarray, known: int) -> None:
        """``insert``, told that the first ``known`` blocks are already indexed (bulk
        builds such as ``recover``'s, which know it from a first pass).  Strategies
        may skip probing them; by default the hint is ignored."""
        self.insert(block_ids, metas)

    def stats(self) -> dict:
        """Counters: entries, in-memory bytes, logical store reads, ...

        Shared names the harness reads: ``entries`` (unique blocks indexed),
        ``memory_bytes``, ``store_reads_per_match`` and, for strategies that keep
        block metadata in the store, ``stored_block_entries``: block-metadata
        entries the store holds, counting a block once per record that carries
        it (the SARP paper's logical block-metadata entries, Table 5).
        """
        return {}

    # ------------------------------------------------------------------ durability
    #: True if a lost or corrupt snapshot can be rebuilt from the store alone
    rebuild_from_store: ClassVar[bool] = False
    #: True if durable mode needs the insert log (state the store cannot reproduce)
    uses_insert_log: ClassVar[bool] = False
    #: options that fix the layout a snapshot or the store was written with
    layout_options: ClassVar[tuple] = ()

    _log = None
    recovery: dict | None = None

    def _snapshot_state(self) -> tuple[dict, dict]:
        """``(meta, sections)``: JSON-able scalars and NumPy arrays to publish."""
        return {}, {}

    def _restore_state(self, meta: dict, sections: dict) -> None:
        """Deserialize a snapshot into this freshly constructed instance."""

    def _catch_up(self, meta: dict) -> dict:
        """Register what the store holds beyond the snapshot; returns counters."""
        return {}

    def _rebuild_from_store(self) -> dict:
        """Rebuild the whole in-memory state from the store (``rebuild_from_store``)."""
        return {}

    def _quiesce(self) -> None:
        """Finish background work so the state to snapshot is complete."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # log keepers: the class's own insert, followed in durable mode by the log
        # append (see prefixbench.plugins.recovery.logged); others run unwrapped
        own = cls.__dict__
        if "insert" in own and not _takes_worker(own["insert"]):
            cls.insert = _accepting_worker(own["insert"])
        if cls.uses_insert_log and "insert" in own and not cls._logs_own_inserts:
            cls.insert = _recovery.logged(cls.__dict__["insert"])
        for op in ("remove", "clear"):
            if op in own:
                setattr(cls, op, _recovery.logged_op(op, own[op]))

    #: True if removes live in memory beside a store that holds the inserts (the
    #: tombstone overlay of :mod:`prefixbench.plugins.removal`): durable mode then
    #: logs removes, clears and the inserts made while tombstones exist
    logs_removes: ClassVar[bool] = False
    #: True where ``insert`` appends its own log records (the removal overlay's,
    #: which carry what the insert found), so the plain insert wrapper stays off
    _logs_own_inserts: ClassVar[bool] = False

    def enable_log(self, directory, sync: bool = True) -> bool:
        """Durable mode for log-keeping strategies: every insert (and remove and
        clear) is appended (and with ``sync`` fdatasynced) to ``directory``'s
        insert log before it returns.  False (nothing to do) for strategies whose
        store is their durability."""
        return _recovery.attach_log(self, directory, sync)

    def snapshot(self, directory, fault=None) -> dict:
        """Publish this index's state under ``directory``; returns ``{"bytes", "seconds",
        "log_bytes_dropped"}``.  The insert log then keeps only what the previous
        snapshot (the fallback generation) does not cover."""
        return _recovery.publish_snapshot(self, directory, fault)

    @classmethod
    def recover(cls, store, directory, options: dict | None = None, meta_size: int = META_SIZE,
                durable_log: bool | None = None, quiet: bool = False,
                notify: _recovery.Notify = None) -> "IndexStrategy":
        """A serving instance from ``directory``'s snapshot plus the store (and the log).

        ``durable_log``: keep logging inserts afterwards (default: if a log exists).
        ``notify(line)`` receives what recovery fell back to and why; without one,
        those lines go to stderr unless ``quiet``.  Timing and provenance are in the
        returned instance's ``recovery`` dict.
        """
        if notify is None and not quiet:
            notify = _note_on_stderr
        return _recovery.recover(cls, store, directory, options, meta_size, durable_log, notify)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        if self.store is not None:
            self.store.close()
