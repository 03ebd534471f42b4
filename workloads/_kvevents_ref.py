"""Pure-Python reference of :mod:`prefixbench.workloads._kvevents`: one EventBatch as
arrays, and the replay's apply loop over those arrays.

**A decoded batch** is the tuple ``(ts, worker, n_events, kinds, offsets, hashes,
parents, has_parent, unknown, counts)``:

* ``ts`` float, ``worker`` int (the batch's ``data_parallel_rank``, None: 0),
  ``n_events`` every event in the batch, unknown types included;
* ``kinds`` int8, one per known event in order: :data:`STORED`,
  :data:`REMOVED`, :data:`CLEARED`;
* ``offsets`` int64 (``len(kinds) + 1``): event ``k``'s block hashes are
  ``hashes[offsets[k]:offsets[k + 1]]`` (uint64; none for a clear);
* ``parents`` uint64 and ``has_parent`` uint8 per event (a BlockStored's
  ``parent_block_hash``; 0 and 0 elsewhere);
* ``unknown`` {type name: count} of the skipped events, ``counts`` the tuple
  ``(stores, removes, clears, blocks stored, blocks removed)``.

:func:`decode_payload` is strict about structure exactly as
:func:`prefixbench.workloads.kvevents.decode_batch` (the same one-line
:class:`TraceFormatError`); the compiled twin parses the msgpack bytes
itself and hands anything it does not take on its fast path (unknown types,
ext types, odd key types, any error) to this reference, so both give one
answer.

**The apply loop** (:class:`ChainApply`) is ``prefixbench events replay``'s
per-event work (:mod:`prefixbench.harness.events`): for each BlockStored the
chain is rebuilt from parent memory
(:class:`prefixbench.workloads.kvevents.ChainMemory`), matched, and inserted
with metadata derived from the chain and the running operation number;
BlockRemoved and AllBlocksCleared update the memory and remove from the
index (on the batch's worker when the strategy tracks it, else only what no
worker holds any more).  An ``oracle`` given is shadowed event by event.
"""
from __future__ import annotations

import numpy as np

from prefixbench.metas import META_MAGIC, make_metas

__all__ = ["CLEARED", "ChainApply", "REMOVED", "STORED", "batch_from_ops", "decode_payload"]

STORED = 0
REMOVED = 1
CLEARED = 2


def batch_from_ops(ops: list, ts: float, worker: int, n_events: int, unknown: dict) -> tuple:
    """The array form of a decoded batch's operations (see the module docstring)."""
    from prefixbench.workloads.model import RemoveOp, StoreOp
    n = len(ops)
    kinds = np.empty(n, dtype=np.int8)
    offsets = np.zeros(n + 1, dtype=np.int64)
    parents = np.zeros(n, dtype=np.uint64)
    has_parent = np.zeros(n, dtype=np.uint8)
    parts = []
    at = 0
    ns = nr = nc = bs = br = 0
    for k, op in enumerate(ops):
        if type(op) is StoreOp:
            kinds[k] = STORED
            parts.append(op.block_hashes)
            at += len(op.block_hashes)
            if op.parent is not None:
                parents[k] = op.parent
                has_parent[k] = 1
            ns += 1
            bs += len(op.block_hashes)
        elif type(op) is RemoveOp:
            kinds[k] = REMOVED
            parts.append(op.block_hashes)
            at += len(op.block_hashes)
            nr += 1
            br += len(op.block_hashes)
        else:
            kinds[k] = CLEARED
            nc += 1
        offsets[k + 1] = at
    hashes = np.concatenate(parts).astype(np.uint64, copy=False) if parts else \
        np.empty(0, dtype=np.uint64)
    return (float(ts), int(worker), int(n_events), kinds, offsets, hashes, parents, has_parent,
            dict(unknown), (ns, nr, nc, bs, br))


def decode_payload(payload: bytes, where: str, frame: int, strict: bool = False) -> tuple:
    """One msgpack EventBatch payload (either form) as a decoded batch tuple."""
    from prefixbench.workloads.kvevents import DecodeStats, batch_header, decode_batch, \
        unpack_payload
    obj = unpack_payload(payload, where)
    stats = DecodeStats()
    ops = decode_batch(obj, where, frame, stats, strict)
    ts, worker = batch_header(obj)
    return batch_from_ops(ops, ts, worker, stats.events, stats.unknown_types)


class ChainApply:
    """Applies decoded batches to ``strategy`` (and ``oracle``); see the module docstring.

    Counters (read with :meth:`counters`): lookups, lookup_blocks, hit_blocks,
    ancestor_blocks, consistency_misses, removes_ignored, ops, oracle_hit_blocks,
    unknown_parents, removed_parents_used, live_blocks, workers (sorted list),
    workers_folded."""

    def __init__(self, strategy, oracle=None, parent_memory: int = 1 << 20,
                 meta_size: int = 16):
        from prefixbench.workloads.kvevents import ChainMemory
        self.strategy = strategy
        self.oracle = oracle
        self.mem = ChainMemory(parent_memory)
        self.meta_size = int(meta_size)
        self.max_w = int(getattr(strategy, "max_workers", 1) or 1)
        self.can_remove = bool(getattr(strategy, "supports_remove", False))
        self.seen: set = set()
        self.folded = False
        self.n_op = self.lookups = self.lookup_blocks = self.hit_blocks = 0
        self.ancestor_blocks = self.misses = self.removes_ignored = self.oracle_hits = 0

    def _metas(self, chain: np.ndarray) -> np.ndarray:
        if self.meta_size == 16:
            words = np.empty((len(chain), 2), dtype=np.uint64)
            np.bitwise_xor(chain, META_MAGIC, out=words[:, 0])
            words[:, 1] = self.n_op
            return words.view(np.uint8)
        return make_metas(chain, self.n_op, self.meta_size)

    def apply(self, batch: tuple) -> None:
        _ts, w, _n, kinds, offsets, hashes, parents, has_parent, _u, _c = batch
        if not len(kinds):
            return
        if w not in self.seen:
            self.seen.add(w)
            if w >= self.max_w:
                self.folded = True
        st, orc, mem = self.strategy, self.oracle, self.mem
        per_worker = self.max_w > 1 and w < self.max_w
        ow = min(w, orc.max_workers - 1) if orc is not None else 0
        for k in range(len(kinds)):
            self.n_op += 1
            ids = hashes[offsets[k]:offsets[k + 1]]
            kind = kinds[k]
            if kind == STORED:
                chain, n_anc = mem.store_ids(w, ids, int(parents[k]) if has_parent[k] else None)
                n = len(chain)
                hit = st.match(chain).n_blocks
                self.lookups += 1
                self.lookup_blocks += n
                self.hit_blocks += hit
                self.ancestor_blocks += n_anc
                if hit < n_anc:
                    self.misses += 1
                metas = self._metas(chain)
                if per_worker:
                    st.insert(chain, metas, worker=w)
                else:
                    st.insert(chain, metas)
                if orc is not None:
                    self.oracle_hits += orc.match(chain).n_blocks
                    orc.insert(chain, metas, worker=ow)
            elif kind == REMOVED:
                gone = mem.remove_ids(w, ids)
                if not self.can_remove:
                    self.removes_ignored += 1
                elif per_worker:
                    st.remove(ids, worker=w)
                elif len(gone):
                    st.remove(gone)
                if orc is not None:
                    orc.remove(ids, worker=ow)
            else:
                gone = mem.clear_worker(w)
                if not self.can_remove:
                    self.removes_ignored += 1
                elif per_worker:
                    st.clear(worker=w)
                elif len(gone):
                    st.remove(gone)
                if orc is not None:
                    orc.clear(worker=ow)

    def counters(self) -> dict:
        m = self.mem
        return {"lookups": self.lookups, "lookup_blocks": self.lookup_blocks,
                "hit_blocks": self.hit_blocks, "ancestor_blocks": self.ancestor_blocks,
                "consistency_misses": self.misses, "removes_ignored": self.removes_ignored,
                "ops": self.n_op, "oracle_hit_blocks": self.oracle_hits,
                "unknown_parents": m.unknown_parents,
                "removed_parents_used": m.removed_parents_used,
                "live_blocks": m.live_blocks, "remembered_removed": len(m.removed),
                "workers": sorted(self.seen), "workers_folded": self.folded}
