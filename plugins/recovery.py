"""Durable mode and the way back to serving: the insert log, snapshots, recovery.

:class:`~prefixbench.plugins.strategy.IndexStrategy` delegates ``enable_log``,
``snapshot`` and ``recover`` here, so the contract stays a list of methods
and this module holds the procedure.  Nothing here prints: notes a user
should see (a corrupt snapshot and what recovery fell back to) go to the
``notify`` callback the caller passes, one line each; the command-line tools
print them.

Logged inserts.  A strategy whose in-memory state the store cannot reproduce
(``uses_insert_log = True``) has its ``insert`` wrapped once, when the class
is defined (the contract's ``__init_subclass__`` calls :func:`logged`).  The
wrapper applies the insert, then - only in durable mode, i.e. once
:func:`attach_log` gave the instance a log - appends it to the fsynced
:class:`~prefixbench.snapshot.InsertLog`.  Applying before appending is what
lets :func:`publish_snapshot` read the log position before capturing the
state: every record up to that position is already in memory.
"""
from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING, Callable, Optional

from prefixbench.snapshot import (LOG_FILE, InsertLog, SnapshotError, log_first_seq, read_log,
                                  read_snapshot, snapshot_log_seq, snapshot_path, write_snapshot)

if TYPE_CHECKING:                           # pragma: no cover - annotations only
    from prefixbench.plugins.strategy import IndexStrategy

#: receives one line per note (no trailing newline); None discards the notes
Notify = Optional[Callable[[str], None]]


def logged(insert):
    """``insert`` followed by an append to the instance's insert log, when it has one.

    Only the outermost wrapper of a class hierarchy appends (a subclass whose
    ``insert`` calls ``super().insert`` logs once), and an instance without a
    log pays one attribute read.
    """
    @functools.wraps(insert)
    def insert_then_log(self, block_ids, metas):
        insert(self, block_ids, metas)
        log = self._log
        if log is not None and type(self).insert is insert_then_log:
            log.append(block_ids, metas)    # the log serialises concurrent appends
    return insert_then_log


def attach_log(strategy: "IndexStrategy", directory, sync: bool = True) -> bool:
    """Durable mode: from now on every insert is appended (and with ``sync``
    fdatasynced) to ``directory``'s insert log before it returns.  False, with
    nothing done, for strategies whose store is their durability."""
    if not strategy.uses_insert_log:
        return False
    if strategy._log is not None:
        strategy._log.close()
    strategy._log = InsertLog(directory, strategy.meta_size, sync)
    return True


def publish_snapshot(strategy: "IndexStrategy", directory, fault=None) -> dict:
    """Write ``strategy``'s snapshot under ``directory``; returns ``{"bytes", "seconds",
    "log_bytes_dropped"}``.  The insert log then keeps what the previous snapshot
    (the fallback generation) does not cover."""
    t0 = time.perf_counter()
    strategy._quiesce()
    log = strategy._log
    # The log position is read BEFORE the state is captured: every insert logged up
    # to it was applied first (see ``logged``), so the snapshot holds it; inserts
    # racing the capture get later positions and are replayed on recovery (inserts
    # are idempotent), so none is lost.
    log_seq = log.seq if log is not None else None
    meta, sections = strategy._snapshot_state()
    meta = dict(meta, options=strategy.opts, meta_size=strategy.meta_size, log_seq=log_seq)
    nbytes = write_snapshot(directory, strategy.name, meta, sections, fault=fault)
    dropped = 0
    if log is not None and os.path.samefile(log.directory, directory):
        prev = snapshot_log_seq(directory, previous=True)
        if prev:
            dropped = log.truncate_through(prev)
    return {"bytes": nbytes, "seconds": time.perf_counter() - t0, "log_bytes_dropped": dropped}


def replay(strategy: "IndexStrategy", records) -> int:
    """Apply the inserts of ``records`` (from :func:`~prefixbench.snapshot.read_log`);
    returns how many.  Called before any log is attached, so nothing is re-logged."""
    n = 0
    for _seq, ids, metas, _end in records:
        if ids is None:
            continue                        # covered by the snapshot
        strategy.insert(ids, metas)
        n += 1
    return n


def recover(cls: type, store, directory, options: dict | None = None, meta_size: int = 16,
            durable_log: bool | None = None, notify: Notify = None) -> "IndexStrategy":
    """A serving ``cls`` instance from ``directory``'s snapshot plus the store and the log.

    Order of preference: the newest snapshot; the previous one plus the log after
    it; then a rebuild from the store (``rebuild_from_store``) or a replay of a log
    that holds every insert.  Anything else raises one-line ``SnapshotError``.
    ``durable_log``: keep logging inserts afterwards (default: if a log exists).
    Timing and provenance are in the returned instance's ``recovery`` dict.
    """
    directory = os.fspath(directory)
    has_log = cls.uses_insert_log and os.path.exists(os.path.join(directory, LOG_FILE))
    info = {"source": "snapshot", "snapshot_error": None, "load_s": 0.0, "init_s": 0.0,
            "deserialize_s": 0.0, "rebuild_s": 0.0, "snapshot_bytes": 0, "log_replayed": 0}
    t0 = time.perf_counter()

    def from_snapshot(previous: bool):
        t0 = time.perf_counter()
        snap = read_snapshot(directory, cls.name, previous)
        info["load_s"] = time.perf_counter() - t0
        info["snapshot_bytes"] = snap.nbytes
        m = snap.meta
        if m.get("meta_size") != meta_size:
            raise SnapshotError(f"snapshot {snap.path}: meta_size {m.get('meta_size')}, "
                                f"recovering with {meta_size}")
        opts = dict(m.get("options") or {})
        for k, v in (options or {}).items():
            if k in cls.layout_options and k in opts and opts[k] != v:
                raise SnapshotError(f"snapshot {snap.path}: written with {k}={opts[k]!r}, "
                                    f"recovering with {k}={v!r}")
            opts[k] = v
        ti = time.perf_counter()
        strategy = cls(store, opts, meta_size)
        t1 = time.perf_counter()
        info["init_s"] = t1 - ti
        try:
            strategy._restore_state(m, snap.sections)
        except (KeyError, ValueError, TypeError, IndexError) as e:
            raise SnapshotError(f"snapshot {snap.path}: inconsistent content ({e})") from None
        del snap
        t2 = time.perf_counter()
        info["deserialize_s"] = t2 - t1
        info.update(strategy._catch_up(m))
        if has_log and m.get("log_seq") is not None:
            info["log_replayed"] = replay(strategy, read_log(directory, meta_size, m["log_seq"]))
        info["rebuild_s"] = time.perf_counter() - t2
        return strategy

    try:
        try:
            strategy = from_snapshot(previous=False)
        except SnapshotError as e:
            if not os.path.exists(snapshot_path(directory, previous=True)):
                raise
            # the generation before it, plus the log after it (kept for this case)
            info["snapshot_error"] = str(e)
            strategy = from_snapshot(previous=True)
            info["source"] = "previous-snapshot"
            if notify is not None:
                notify(f"{e}; recovering from the previous snapshot")
    except SnapshotError as e:
        e = info["snapshot_error"] or str(e)    # the newest snapshot's problem first
        info["snapshot_error"] = e
        if cls.rebuild_from_store:
            how = "rebuilding from the store"
        elif has_log and log_first_seq(directory, meta_size) in (
                (0, 1) if not os.path.exists(snapshot_path(directory)) else (1,)):
            # a log from seq 1 holds every insert; an empty one with no snapshot
            # ever published means nothing was acknowledged yet
            how = "replaying the whole insert log"
        else:
            raise SnapshotError(f"{e}; {cls.name} cannot rebuild its in-memory index "
                                f"without it (no complete insert log)") from None
        if notify is not None:
            notify(f"{e}; {how}")
        strategy = cls(store, options, meta_size)
        t2 = time.perf_counter()
        if cls.rebuild_from_store:
            info["source"] = "store-rebuild"
            info.update(strategy._rebuild_from_store())
        else:
            info["source"] = "log-rebuild"
            info["log_replayed"] = replay(strategy, read_log(directory, meta_size, 0))
        info["rebuild_s"] = time.perf_counter() - t2
    info["total_s"] = time.perf_counter() - t0
    if durable_log or (durable_log is None and has_log):
        attach_log(strategy, directory)
    strategy.recovery = info
    return strategy
