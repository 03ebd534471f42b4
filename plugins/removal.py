"""Removal and worker locations for strategies whose blocks live in segments.

``segment-hash``, ``segment-radix(-capped)``, ``sparse-state`` and ``sarp``
keep block metadata inside multi-block records (segments, checkpoints) found
by the query's prefix, so a single block id cannot be looked up on its own,
and rewriting a 64-block segment for every evicted block would multiply the
write traffic by the segment size.  They inherit :class:`TombstoneOverlay`
instead: the stored records stay as they are and two small compiled tables
(:class:`prefixbench.plugins._blockhash.BlockHashTable`) beside them say
what changed:

* ``dead`` - tombstones: blocks removed from every worker.  A match still
  verifies the stored record's block ids (the never-unverified rule is the
  strategy's own), then stops at the first tombstoned block.
* ``live`` - explicit locations: per block a worker bitmap and one metadata
  record per worker (the "keeps its first metadata" rule per (block, worker)).
  A block listed here is authoritative: the stored record's metadata and the
  tombstones do not apply to it.
* ``defaults_dead`` - set by ``clear()`` and ``clear(0)``: a block in neither
  table is then unavailable; otherwise it is "on worker 0 with the stored
  metadata", which is what every insert-only run means.

So a block's state is: listed in ``live`` -> its bitmap; else tombstoned or
``defaults_dead`` -> unavailable; else on worker 0 as stored.  A remove that
takes a block's last location writes its tombstone *before* it leaves
``live``, and a revival writes ``live`` before it clears the tombstone, so a
match racing either sees the block as unavailable or as available with the
right metadata, never with the stored one by mistake.

Costs.  Nothing while nobody removes and every insert is on worker 0: one
emptiness test per call.  A remove is two table probes per listed block
(about a microsecond for a handful of blocks, no store access).  A match
after removes pays one ``lookup`` in each table for its matched blocks (an
empty table is not read) and one compiled pass that cuts and merges
(:func:`prefixbench.plugins._sarp.overlay_cut`: about 7 us in all at 45
blocks, against 57 us for the dozen NumPy calls it replaced).  A
location change (an insert on a worker other than 0) costs a ``live`` entry
per block - about (8 + 16 * workers) / 0.75 bytes - plus, the first time a
stored block gets a second location, one plain match to learn whether
worker 0 holds it already (a side structure instead of a segment rewrite:
the stored records never change).  ``clear()`` does not wipe the store;
every block inserted after it goes to ``live``.

Decisions where the issue is silent:

* ``remove`` cannot tell a block that was never stored from one that was
  without a per-block map (which is what these strategies exist to avoid),
  so it counts a block as removed unless it is tombstoned already or was
  never on that worker by the tables (``exact_remove_count = False``); a
  never-stored block costs one tombstone.
* Tombstones are kept until ``clear()`` - bounded by the blocks that were
  removed and not re-inserted (a pool evicts each block once per residence)
  - except where the strategy reclaims: SARP's passes delete the records of
  removed blocks and then drop the tombstones no record holds any more
  (:meth:`_Overlay.watch_start`/:meth:`_Overlay.watch_stop`, never those of
  a block an insert touched during the pass).  A pass bumps
  :attr:`_Overlay.gen` once the records it retires are unrouted and before it
  deletes them and drops their tombstones; a match that spans a bump runs
  again, so it neither misses a retired record nor serves a block whose
  tombstone went while it held the record (see :mod:`prefixbench.plugins.sarp`).
* Durable mode (``logs_removes``) logs every remove and clear, and every
  insert made once the overlay is in use (all inserts for the strategies that
  keep an insert log anyway); snapshots carry both tables.  An insert on a
  worker other than 0 logs how many leading blocks its pre-match found on
  worker 0, and its replay learns no more than that: the store (segments,
  spilled nodes) may be ahead of the log by then.
"""
from __future__ import annotations

import threading

import numpy as np

from prefixbench import twins
from prefixbench.plugins import recovery as _recovery
from prefixbench.plugins.strategy import (IndexStrategy, Match, as_block_ids, as_metas,
                                          check_worker)

_blockhash = twins.load("prefixbench.plugins._blockhash")
#: the overlay's compiled corrections (:func:`~prefixbench.plugins._sarp.overlay_cut`,
#: :func:`~prefixbench.plugins._sarp.overlay_revive`), or their references
_hot = twins.load("prefixbench.plugins._sarp")

__all__ = ["TombstoneOverlay"]

_ONE = np.uint64(1)


#: per thread, the overlay methods being run (a subclass's ``super().match`` inside
#: one, or the pre-match of an insert, goes to the strategy's own code)
_INSIDE = threading.local()
#: a read-only run of worker-0 bitmaps, sliced for idle matches (a view costs a fraction
#: of a fresh array, and every match of a run pays it)
_WORKER0 = np.ones(0, dtype=np.uint64)


def _on_worker0(n: int) -> np.ndarray:
    """A read-only uint64 array of ``n`` ones: every block on worker 0 only."""
    global _WORKER0
    if n > len(_WORKER0):
        grown = np.ones(max(n, 2 * len(_WORKER0), 4096), dtype=np.uint64)
        grown.flags.writeable = False
        _WORKER0 = grown
    return _WORKER0[:n]


def _outermost(name: str, fn, make):
    """``fn`` wrapped by ``make`` when it is the class's outermost ``name`` (a subclass
    calling ``super().name`` goes through the overlay once)."""
    wrapper = make(fn)
    if name == "insert":                # the contract's signature, worker included
        def outer(self, block_ids, metas, worker: int = 0):
            if getattr(_INSIDE, name, False):
                return fn(self, block_ids, metas)
            setattr(_INSIDE, name, True)
            try:
                return wrapper(self, block_ids, metas, worker)
            finally:
                setattr(_INSIDE, name, False)
    else:
        def outer(self, *args, **kwargs):
            if getattr(_INSIDE, name, False):
                return fn(self, *args, **kwargs)
            setattr(_INSIDE, name, True)
            try:
                return wrapper(self, *args, **kwargs)
            finally:
                setattr(_INSIDE, name, False)
    outer.__name__, outer.__qualname__, outer.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return outer


def _wrap_match(match):
    def match_through_overlay(self, block_ids):
        ov = self._overlay()
        while True:
            gen = ov.gen
            got = match(self, block_ids)
            if ov.idle():
                if self.max_workers > 1 and got.locations is None:
                    got.locations = _on_worker0(got.n_blocks)
                return got
            out = ov.apply(as_block_ids(block_ids), got)
            if ov.gen == gen:
                return out
            # a reclamation retired records or tombstones while this match ran: what
            # it read may be gone, or its tombstones dropped; match again
    return match_through_overlay


def _raw(fn, self, *args):
    """``fn`` with the strategy's own matches inside it left to the strategy."""
    was = getattr(_INSIDE, "match", False)
    _INSIDE.match = True
    try:
        return fn(self, *args)
    finally:
        _INSIDE.match = was


def _log_insert(self, ids, metas, worker: int, pre: int) -> None:
    """Append an insert to the durable-mode log (not while replaying one)."""
    log = self._log
    if log is None or _recovery.REPLAYING.on:
        return
    if worker == 0:
        log.append(ids, metas)
    else:
        _recovery.append_op(log, _recovery.OP_INSERT_PRE, worker, ids, metas, self.meta_size,
                            pre)


def _wrap_insert(insert):
    def insert_through_overlay(self, block_ids, metas, worker: int = 0):
        if worker != 0:
            check_worker(f"strategy {self.name}", worker, self.max_workers, False)
        ov = self._overlay()
        if worker == 0 and ov.idle():
            _raw(insert, self, block_ids, metas)
            if ov.idle():
                if self.uses_insert_log:            # else the store holds it
                    _log_insert(self, block_ids, metas, 0, 0)
                return None
            # the overlay woke up meanwhile (a remove or another worker's insert may
            # have missed this one's blocks): apply it again through the overlay
        else:
            ov.active = True
        ids = as_block_ids(block_ids)
        m = as_metas(metas, len(ids), self.meta_size)
        with ov.lock:
            pre = ov.before_insert(self, ids, m, worker, match=type(self).match)
            _raw(insert, self, ids, m)
            _log_insert(self, ids, m, worker, pre)
    return insert_through_overlay


def _wrap_known_prefix(known_prefix):
    def known_prefix_through_overlay(self, block_ids, metas, known: int):
        if self._overlay().idle():
            return known_prefix(self, block_ids, metas, known)
        return self.insert(block_ids, metas)       # the hint does not see tombstones
    return known_prefix_through_overlay


def _wrap_snapshot(snapshot_state):
    def snapshot_with_overlay(self):
        meta, sections = snapshot_state(self)
        ov_meta, ov_sections = self._overlay().export()
        return dict(meta, **ov_meta), dict(sections, **ov_sections)
    return snapshot_with_overlay


def _wrap_restore(restore_state):
    def restore_with_overlay(self, meta, sections):
        restore_state(self, meta, sections)
        self._overlay().restore(meta, sections)
    return restore_with_overlay


def _wrap_stats(stats):
    def stats_with_overlay(self):
        out = dict(stats(self), **self._overlay().stats())
        if isinstance(out.get("memory_bytes"), (int, float)):   # the tables are memory too
            out["memory_bytes"] += out["overlay_bytes"]
        return out
    return stats_with_overlay


_WRAPS = {"stats": _wrap_stats, "match": _wrap_match, "insert": _wrap_insert, "insert_known_prefix": _wrap_known_prefix,
          "_snapshot_state": _wrap_snapshot, "_restore_state": _wrap_restore}


class _Overlay:
    """The tombstone and location tables of one strategy instance."""

    def __init__(self, meta_size: int):
        self.meta_size = meta_size
        self.dead = _blockhash.BlockHashTable(1, 0)
        self.live = _blockhash.BlockHashTable(meta_size, 0)
        self.defaults_dead = False
        self.lock = threading.RLock()
        self.noops = 0
        #: bumped by a reclamation after it unrouted the records it retires and before
        #: it deletes them and drops their tombstones: a match spanning a bump retries
        self.gen = 0
        #: while a reclamation pass runs: the ids of every insert made meanwhile (they
        #: may be held by records the pass saw alive, so their tombstones stay)
        self.watch: list | None = None
        #: set when a clear() ran during the pass (it drops no tombstone then)
        self.watch_broken = False
        #: set by the first remove, clear or insert on another worker, and kept: from
        #: then on every insert goes through the tables (an insert that began while the
        #: overlay was idle re-checks afterwards, so none slips past a concurrent one)
        self.active = False

    def idle(self) -> bool:
        return not self.active

    # ---------------------------------------------------------------- reads
    def apply(self, ids: np.ndarray, got: Match) -> Match:
        """The strategy's answer ``got`` for ``ids`` corrected by the tables.

        The location table is read before the tombstones (a revival writes it
        before it clears the tombstone); an empty table is not read, which is
        what reading it would say at that instant.  The correction itself is one
        compiled pass (:func:`prefixbench.plugins._sarp.overlay_cut`)."""
        n = got.n_blocks
        q = ids[:n]
        in_live = metas = locs = None
        if len(self.live):
            in_live, metas, locs = self.live.lookup(q, True)
        dead = None
        if not self.defaults_dead and len(self.dead):
            dead = self.dead.lookup(q)[0]
        cut, out, locs = _hot.overlay_cut(got.metas, n, in_live, metas, locs, dead,
                                          self.defaults_dead)
        return Match(cut, out, locs)

    # ---------------------------------------------------------------- writes
    def before_insert(self, strategy, ids, metas, worker: int, match) -> int:
        """Update the tables for an insert of ``ids`` on ``worker`` (caller holds the
        lock; the strategy's own insert follows).  Returns how many leading blocks
        the pre-match found (logged, so a replay against a store that is ahead of
        the log learns no more than the original did)."""
        k = 0
        if self.watch is not None:
            self.watch.append(np.array(ids, dtype=np.uint64, copy=True))
        if worker == 0:
            # (an empty table is not read: the lock held keeps it as it is)
            listed, revived = _hot.overlay_revive(
                self.live.lookup(ids)[0] if len(self.live) else None,
                self.dead.lookup(ids)[0] if len(self.dead) else None, self.defaults_dead)
            if self.defaults_dead and listed is None:
                listed = np.arange(len(ids))
            if listed is not None:
                self.live.insert(ids[listed], metas[listed], 0)
            if revived is not None:
                self.dead.remove(ids[revived])
            return k
        in_live = self.live.lookup(ids)[0]
        in_dead = self.dead.lookup(ids)[0] if len(self.dead) else np.zeros(len(ids), np.bool_)
        rp = _recovery.REPLAYING
        cap = len(ids)
        if rp.on:           # the store may be ahead of the log: learn what the original did
            cap = rp.pre_cap if rp.pre_cap is not None else 0
        if not self.defaults_dead and cap and not in_live.all():
            # worker 0 holds, by default, the stored blocks not yet listed: say so
            # before this insert gives them a second location
            # (the strategy's own match: the stored prefix with the stored
            # metadata, tombstones not applied, as they are excluded here)
            pre = _raw(match, strategy, ids)
            k = min(pre.n_blocks, cap)
            keep = ~in_live[:k] & ~in_dead[:k]
            if keep.any():
                pm = np.asarray(pre.metas)[:k]
                self.live.insert(ids[:k][keep], pm[keep], 0)
        self.live.insert(ids, metas, worker)
        if in_dead.any():           # every location it had was gone: it has one now
            self.dead.remove(np.ascontiguousarray(ids[in_dead]))
        return k

    def remove(self, ids: np.ndarray, worker: int) -> int:
        """Make ``ids`` unavailable on ``worker`` (-1 every worker); the count removed
        (one compiled call under both tables' locks: a listed block losing its last
        location is tombstoned first; a default block, on worker 0 only, is
        tombstoned by a remove on worker 0 or on every worker)."""
        self.active = True
        with self.lock:
            removed, noops = self.dead.tombstone(self.live, ids, worker, self.defaults_dead)
            self.noops += noops
            return removed

    def clear(self, worker: int) -> None:
        self.active = True
        with self.lock:
            self.watch_broken = True
            if worker < 0:
                self.live.clear()
                self.dead.clear()
                self.defaults_dead = True
                return
            keys, locs, _p = self.live.export(workers=True)
            only = keys[locs == (_ONE << np.uint64(worker))]
            if len(only) and not self.defaults_dead:
                self.dead.insert(only, np.zeros((len(only), 1), np.uint8))
            self.live.clear(worker)
            if worker == 0:
                self.defaults_dead = True

    # ---------------------------------------------------------------- reclamation
    def alive(self, ids: np.ndarray) -> np.ndarray:
        """Per block of ``ids``: available on some worker (listed in ``live``, or
        neither tombstoned nor cleared by default)."""
        in_live = self.live.lookup(ids)[0]
        if self.defaults_dead:
            return in_live
        if not len(self.dead):
            return np.ones(len(ids), dtype=np.bool_)
        return in_live | ~self.dead.lookup(ids)[0]

    def watch_start(self) -> np.ndarray:
        """Begin a reclamation pass (caller holds the lock): the tombstones now."""
        self.watch, self.watch_broken = [], False
        return self.dead.export()[0].copy()

    def watch_stop(self, candidates: np.ndarray, held: np.ndarray) -> int:
        """End a pass (caller holds the lock): drop the tombstones of ``candidates``
        (tombstoned when the pass began) that no record holds (``held``) and that
        no insert touched since; the count dropped."""
        watched, broken = self.watch, self.watch_broken
        self.watch, self.watch_broken = None, False
        if broken or not len(candidates):
            return 0
        spare = np.concatenate([held] + watched) if watched else held
        if len(spare):
            table = _blockhash.BlockHashTable(1, 0)
            table.reserve(len(spare))
            table.insert(np.ascontiguousarray(spare, dtype=np.uint64),
                         np.zeros((len(spare), 1), np.uint8))
            candidates = candidates[~table.lookup(candidates)[0]]
        if not len(candidates):
            return 0
        drop = np.ascontiguousarray(candidates[self.dead.lookup(candidates)[0]])
        if len(drop):
            self.dead.remove(drop)
        return len(drop)

    # ---------------------------------------------------------------- durability
    def export(self) -> tuple[dict, dict]:
        keys, locs, planes = self.live.export(workers=True)
        dead = self.dead.export()[0]
        return ({"overlay_defaults_dead": self.defaults_dead, "overlay_active": self.active},
                {"overlay_live_keys": keys, "overlay_live_locations": locs,
                 "overlay_live_planes": planes, "overlay_dead": dead})

    def restore(self, meta: dict, sections: dict) -> None:
        self.defaults_dead = bool(meta.get("overlay_defaults_dead", False))
        self.active = bool(meta.get("overlay_active", False))
        if "overlay_dead" not in sections:
            return                                  # a snapshot from before removal
        dead = sections["overlay_dead"]
        if len(dead):
            self.dead.insert(dead, np.zeros((len(dead), 1), np.uint8))
        keys, locs = sections["overlay_live_keys"], sections["overlay_live_locations"]
        planes = sections["overlay_live_planes"]
        if locs.shape != keys.shape or planes.shape[1:] != (len(keys), self.meta_size):
            raise ValueError("overlay tables do not match")
        for w in range(planes.shape[0]):
            held = (locs >> np.uint64(w)) & _ONE == _ONE
            if held.any():
                self.live.insert(keys[held], planes[w][held], w)

    def stats(self) -> dict:
        # the empty tables' few hundred bytes are not counted until they are put to use
        return {"tombstones": len(self.dead), "location_entries": len(self.live),
                "overlay_bytes": self.dead.nbytes + self.live.nbytes if self.active else 0,
                "remove_noops": self.noops}


class TombstoneOverlay(IndexStrategy):
    """Base for segment strategies: ``remove``, ``clear`` and worker locations through
    a tombstone table and a location table beside the stored records (see the module
    docstring).  Subclasses keep their ``match``/``insert``; they are wrapped here."""

    supports_remove = True
    max_workers = 64
    exact_remove_count = False
    logs_removes = True
    _logs_own_inserts = True

    def __init_subclass__(cls, **kwargs):
        own = cls.__dict__
        for name, make in _WRAPS.items():
            if name in own:
                setattr(cls, name, _outermost(name, own[name], make))
        super().__init_subclass__(**kwargs)

    def __init__(self, store=None, options=None, meta_size: int = 16):
        super().__init__(store, options, meta_size)
        if isinstance(meta_size, int) and meta_size >= 1:   # else the strategy says why not
            self._ov = _Overlay(meta_size)

    def _overlay(self) -> _Overlay:
        ov = self.__dict__.get("_ov")
        if ov is None:
            ov = self.__dict__.setdefault("_ov", _Overlay(self.meta_size))
        return ov

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        ids, w = self._removal_args(block_ids, worker)
        if len(ids) == 0:
            return 0
        n = self._overlay().remove(ids, w)
        self._after_remove()
        return n

    def _after_remove(self) -> None:
        """Called after every non-empty remove (SARP schedules reclamation here)."""

    def clear(self, worker: int | None = None) -> None:
        w = check_worker(f"strategy {self.name}.clear", worker, self.max_workers, True)
        self._overlay().clear(w)

    def overlay_stats(self) -> dict:
        """The overlay's counters, for the strategy's ``stats``."""
        return self._overlay().stats()
