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

Removes.  ``remove`` and ``clear`` are wrapped the same way (:func:`logged_op`)
for the log keepers and for ``logs_removes`` strategies (tombstones in memory,
inserts in the store), so an acknowledged remove is replayed after a crash and
never served again.  They share the insert log, which keeps one order for
inserts and removes (an insert after a remove must win on replay).  The log's
record format is the kernel's (ids, then metas); an operation other than an
insert on worker 0 is tagged by three leading ids - two fixed 64-bit magic
words and ``op << 32 | worker`` (worker 0xFFFFFFFF = every worker) - with
zero metadata rows in their place.  A plain insert whose first two block ids
equal both magic words (odds 2**-128) would be misread; nothing else changes
for logs written before removes existed.  ``logs_removes`` strategies log an
insert only while tombstones exist (the store holds every insert, but a
revived block's new metadata lives in the overlay).
"""
from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from prefixbench.errors import StoreError
from prefixbench.snapshot import (LOG_FILE, InsertLog, SnapshotError, log_first_seq, read_log,
                                  read_snapshot, snapshot_log_seq, snapshot_path, write_snapshot)

if TYPE_CHECKING:                           # pragma: no cover - annotations only
    from prefixbench.plugins.strategy import IndexStrategy

#: receives one line per note (no trailing newline); None discards the notes
Notify = Optional[Callable[[str], None]]


_TAG0, _TAG1 = 0x70726566_69786F70, 0x62656E63_682D6F70
OP_INSERT, OP_REMOVE, OP_CLEAR = 1, 2, 3
#: an insert with one argument id after the header: how many leading blocks the
#: overlay found on worker 0 before it (see prefixbench.plugins.removal)
OP_INSERT_PRE = 4
_ALL = 0xFFFFFFFF


def append_op(log, op: int, worker, ids=None, metas=None, meta_size: int = 16,
              arg: int | None = None) -> None:
    """Append one tagged operation record (see the module docstring)."""
    ids = np.empty(0, np.uint64) if ids is None else np.ascontiguousarray(ids, np.uint64)
    w = _ALL if worker is None or worker < 0 else int(worker)
    head = [_TAG0, _TAG1, (op << 32) | w] + ([] if arg is None else [int(arg)])
    h = len(head)
    rows = np.zeros((h + len(ids), meta_size), dtype=np.uint8)
    if metas is not None and len(ids):
        rows[h:] = metas
    log.append(np.concatenate([np.array(head, dtype=np.uint64), ids]), rows)


def decode_record(ids, metas):
    """``(op, worker or None, ids, metas, arg or None)`` of one log record."""
    if len(ids) >= 3 and int(ids[0]) == _TAG0 and int(ids[1]) == _TAG1:
        code = int(ids[2])
        w = code & _ALL
        op = code >> 32
        if op == OP_INSERT_PRE:
            return op, w, ids[4:], metas[4:], int(ids[3])
        return op, (None if w == _ALL else w), ids[3:], metas[3:], None
    return OP_INSERT, 0, ids, metas, None


def logged(insert):
    """``insert`` followed by an append to the instance's insert log, when it has one.

    Only the outermost wrapper of a class hierarchy appends (a subclass whose
    ``insert`` calls ``super().insert`` logs once), and an instance without a
    log pays one attribute read.
    """
    @functools.wraps(insert)
    def insert_then_log(self, block_ids, metas, worker: int = 0):
        if self._log is not None:
            self._log.check()           # after a failed append: refused until recovered
        insert(self, block_ids, metas, worker)
        log = self._log
        if log is not None and type(self).insert is insert_then_log:
            if worker == 0:             # the log serialises concurrent appends
                log.append(block_ids, metas)
            else:
                append_op(log, OP_INSERT, worker, block_ids, metas, self.meta_size)
    return insert_then_log


def logged_op(name: str, fn):
    """``remove`` or ``clear`` followed by an append to the log, when there is one.

    The append comes after the operation (as for inserts) so a snapshot that
    reads the log position first holds every logged remove; a remove racing
    the capture is replayed (removes are idempotent)."""
    op = OP_REMOVE if name == "remove" else OP_CLEAR

    @functools.wraps(fn)
    def op_then_log(self, *args, **kwargs):
        if self._log is not None:
            self._log.check()
        out = fn(self, *args, **kwargs)
        log = self._log
        if log is not None and getattr(type(self), name) is op_then_log:
            if op == OP_REMOVE:
                ids = args[0] if args else kwargs["block_ids"]
                worker = args[1] if len(args) > 1 else kwargs.get("worker")
            else:
                ids, worker = None, (args[0] if args else kwargs.get("worker"))
            append_op(log, op, worker, ids, None, self.meta_size)
        return out
    return op_then_log


def keeps_log(cls) -> bool:
    """True if durable mode gives ``cls`` a log (inserts, or removes, in memory)."""
    return bool(cls.uses_insert_log or cls.logs_removes)


def attach_log(strategy: "IndexStrategy", directory, sync: bool = True) -> bool:
    """Durable mode: from now on every insert is appended (and with ``sync``
    fdatasynced) to ``directory``'s insert log before it returns.  False, with
    nothing done, for strategies whose store is their durability."""
    if not keeps_log(strategy):
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
    if log is not None:
        log.check()         # memory holds an operation the log lacks: never snapshot it
    # The log position is read BEFORE the state is captured: every insert logged up
    # to it was applied first (see ``logged``), so the snapshot holds it; inserts
    # racing the capture get later positions and are replayed on recovery (inserts
    # are idempotent), so none is lost.
    log_seq = log.seq if log is not None else None
    meta, sections = strategy._snapshot_state()
    meta = dict(meta, options=strategy.opts, meta_size=strategy.meta_size, log_seq=log_seq)
    nbytes = write_snapshot(directory, strategy.name, meta, sections, fault=fault)
    dropped, trunc_error = 0, None
    if log is not None and os.path.samefile(log.directory, directory):
        prev = snapshot_log_seq(directory, previous=True)
        if prev:
            try:
                dropped = log.truncate_through(prev)
            except StoreError as e:     # the snapshot stands; the log just stays longer
                trunc_error = str(e)
    return {"bytes": nbytes, "seconds": time.perf_counter() - t0, "log_bytes_dropped": dropped,
            "log_truncate_error": trunc_error}


class _Flag:
    on = False
    pre_cap: int | None = None


#: set while :func:`replay` runs: what the store shows then is ahead of the log
REPLAYING = _Flag()


def replay(strategy: "IndexStrategy", records) -> int:
    """Apply the inserts, removes and clears of ``records`` (from
    :func:`~prefixbench.snapshot.read_log`); returns how many.  Called before any
    log is attached, so nothing is re-logged."""
    REPLAYING.on = True
    try:
        return _replay(strategy, records)
    finally:
        REPLAYING.on = False


def _replay(strategy, records) -> int:
    n = 0
    for _seq, ids, metas, _end in records:
        if ids is None:
            continue                        # covered by the snapshot
        op, worker, ids, metas, arg = decode_record(ids, metas)
        if op == OP_INSERT:
            strategy.insert(ids, metas, worker)
        elif op == OP_INSERT_PRE:
            REPLAYING.pre_cap = arg
            try:
                strategy.insert(ids, metas, worker)
            finally:
                REPLAYING.pre_cap = None
        elif op == OP_REMOVE:
            strategy.remove(ids, worker)
        elif op == OP_CLEAR:
            strategy.clear(worker)
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
    has_log = keeps_log(cls) and os.path.exists(os.path.join(directory, LOG_FILE))
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
        complete_log = has_log and log_first_seq(directory, meta_size) in (
            (0, 1) if not os.path.exists(snapshot_path(directory)) else (1,))
        if cls.rebuild_from_store and cls.logs_removes and has_log and not complete_log:
            # the store holds every insert but not the removes made before the
            # log's first record: serving them again is what must never happen
            raise SnapshotError(f"{e}; {cls.name} cannot rebuild its removes from the "
                                f"store (the log does not reach back to the start)") from None
        if cls.rebuild_from_store:
            how = "rebuilding from the store"
        elif complete_log:
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
            if cls.logs_removes and has_log:
                info["log_replayed"] = replay(strategy, read_log(directory, meta_size, 0))
        else:
            info["source"] = "log-rebuild"
            info["log_replayed"] = replay(strategy, read_log(directory, meta_size, 0))
        info["rebuild_s"] = time.perf_counter() - t2
    info["total_s"] = time.perf_counter() - t0
    if durable_log or (durable_log is None and has_log):
        attach_log(strategy, directory)
    strategy.recovery = info
    return strategy
