"""The IndexStrategy contract: what every prefix index provides.

Block IDs travel as ``uint64`` NumPy arrays; block metadata as ``uint8`` arrays
of shape ``(n_blocks, meta_size)`` (default 16 bytes per block).

Semantics every strategy keeps (the property tests check them against the
``radix`` oracle):

* ``match(ids)`` returns the longest prefix of ``ids`` whose blocks are all
  indexed, with their metadata in order.  A strategy may return a *shorter*
  prefix (e.g. SARP under a retrieval budget) but never a longer one, and
  never a block whose ID it did not verify.
* ``insert(ids, metas)`` registers a processed sequence.  A block that is
  already indexed keeps the metadata it was first inserted with (the cached
  KVCache block already exists; re-processing it creates no new copy).

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
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from prefixbench.engines.base import SegmentStore
from prefixbench.errors import ConfigError
from prefixbench.plugins import recovery as _recovery

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

    @classmethod
    def empty(cls, meta_size: int = META_SIZE) -> "Match":
        return cls(0, np.empty((0, meta_size), dtype=np.uint8))


@dataclass(frozen=True)
class Option:
    """One configurable strategy parameter with its default and valid range."""

    default: object
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None

    def parse(self, name: str, value):
        kind = type(self.default)
        try:
            if kind is bool and isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                v = value.lower() in ("1", "true", "yes", "on")
            else:
                v = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"option {name}: {value!r} is not a valid {kind.__name__}") from None
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
    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None: ...

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
        if cls.uses_insert_log and "insert" in cls.__dict__:
            cls.insert = _recovery.logged(cls.__dict__["insert"])

    def enable_log(self, directory, sync: bool = True) -> bool:
        """Durable mode for log-keeping strategies: every insert is appended (and
        with ``sync`` fdatasynced) to ``directory``'s insert log before it returns.
        False (nothing to do) for strategies whose store is their durability."""
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
