"""``sparse-state``: an exact index that keeps recurrent state only at placed checkpoints.

A recurrent (SSM) layer resumes from one stored state, so a hybrid-model cache
need not keep state at every block: it keeps it at a sparse set of checkpoint
positions (:mod:`prefixbench.plugins.placement`) and recomputes the rest.  This
strategy indexes every inserted block in the exact radix tree (the oracle's,
:mod:`prefixbench.plugins.radix`) and a checkpoint set of chained block ids
(a chained id names its whole prefix, so a checkpoint serves every sequence
that shares that prefix).  ``match`` returns the deepest checkpointed prefix
of the exact match, with the tree's metadata: the replay's hit rate is then
the resumable fraction and its loss against the oracle the recompute share.
It never returns more than the exact match, and every block it returns was
verified by the tree walk.

Options: ``policy`` (``dp``, ``block:B``, ``end``, ``uniform[:M]``,
``boundary``, ``geometric[:M]``), ``budget`` (checkpoints per inserted
sequence) or ``budget_bytes`` with ``model`` (a preset of
:mod:`prefixbench.plugins.models`; the budget is then the checkpoints that
fit), ``replan_every`` (K).  Decisions where the issue is silent:

* every policy applies to each inserted sequence as an entry of N blocks;
  positions are placed only past the point this request resumed from (the
  deepest checkpoint its own preceding match returned): states before it were
  never computed by this request;
* ``dp`` keeps a pooled histogram of the exact match depths its ``match``
  calls saw and re-solves it every K inserts (default 16: a solve over a few
  thousand positions costs well under a millisecond, and until the first plan
  every insert keeps its ``end`` state, the costly part); before its first
  plan it keeps the ``end`` state (nothing is known yet);
* removal and workers are the tree's (``max_workers = 64``, exact counts):
  ``remove`` clears availability in the tree and a match stops at the first
  block no worker holds, so a checkpoint past a removed block serves nothing
  until the block is inserted again; checkpoints themselves are kept (they
  name prefixes, and re-inserting the prefix makes them valid again), and
  snapshots carry the tree's availability;
* ``boundary`` checkpoints the end of the prompt matched just before an insert
  of the same sequence (on the same thread) and the end of the sequence:
  the turn boundaries the request stream shows.
"""
from __future__ import annotations

import threading

import numpy as np

from prefixbench import phases as _phases
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.phases import ROUTING
from prefixbench.plugins import placement as P
from prefixbench.plugins.models import MODELS, get_model
from prefixbench.plugins.radix import RadixTree
from prefixbench.plugins.strategy import (META_SIZE, IndexStrategy, Match, Option, as_block_ids,
                                          as_metas, check_worker)
from prefixbench.units import parse_size

__all__ = ["SparseStateStrategy"]


class SparseStateStrategy(IndexStrategy):
    """Exact radix index holding recurrent state only at placed checkpoints."""

    name = "sparse-state"
    exact = False
    supports_remove = True
    max_workers = 64
    gil_free_parts = ("tree walk (match)", "tree insert", "placement solve")
    options = {
        "policy": Option("dp", "checkpoint policy: dp, block:B, end, uniform[:M], boundary, "
                         "geometric[:M]"),
        "budget": Option(8, "checkpoints per inserted sequence (dp, uniform, geometric, "
                         "boundary)", min=0, max=1 << 30),
        "budget_bytes": Option("", "checkpoint bytes per inserted sequence (with model=); "
                               "overrides budget"),
        "model": Option("positions", "model preset pricing a checkpoint",
                        choices=tuple(sorted(MODELS))),
        "replan_every": Option(16, "dp re-solves its histogram every K inserts", min=1,
                               max=1 << 30),
        "initial_blocks": Option(1024, "tree pool slots allocated up front", min=1, max=1 << 40),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        if meta_size < 1:
            raise ConfigError(f"option meta_size: {meta_size!r} must be >= 1")
        self.policy = P.parse_policy(self.opts["policy"], "policy")
        self.model = get_model(self.opts["model"])
        budget = self.opts["budget"]
        if self.opts["budget_bytes"]:
            nbytes = parse_size("budget_bytes", self.opts["budget_bytes"])
            budget = P.budget_from_bytes(nbytes, self.model.state_bytes)
        self.budget = int(budget)
        self._tree = RadixTree(meta_size, self.opts["initial_blocks"])
        self._ckpt = P.CheckpointSet()
        self._lock = threading.Lock()
        self._hist = np.zeros(64, dtype=np.float64)
        self._plan: np.ndarray | None = None
        self._since = 0
        self._inserts = 0
        self._placed = 0
        self._replans = 0
        self._local = threading.local()

    # ------------------------------------------------------------------ serving
    def match(self, block_ids: np.ndarray) -> Match:
        ids = as_block_ids(block_ids)
        m = _phases.timed_call(ROUTING, self._tree.match, ids)
        n = m.n_blocks
        if n and self.policy.kind == "dp":
            with self._lock:
                if n >= len(self._hist):
                    grown = np.zeros(max(n + 1, 2 * len(self._hist)), dtype=np.float64)
                    grown[:len(self._hist)] = self._hist
                    self._hist = grown
                self._hist[n] += 1.0
        k = self._ckpt.deepest(ids, n) if n else 0
        self._local.last = (ids, k)
        return Match(k, m.metas[:k], m.locations[:k])

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        ids, w = self._removal_args(block_ids, worker)
        return _phases.timed_call(ROUTING, self._tree.remove, ids, w)

    def clear(self, worker: int | None = None) -> None:
        self._tree.clear(check_worker("strategy sparse-state.clear", worker, self.max_workers,
                                      True))

    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None:
        if worker != 0:
            check_worker("strategy sparse-state", worker, self.max_workers, False)
        ids = as_block_ids(block_ids)
        n = len(ids)
        metas = as_metas(metas, n, self.meta_size)
        _phases.timed_call(ROUTING, self._tree.insert, ids, metas, worker)
        if n == 0:
            return
        resume, prompt_end = 0, 0
        last = getattr(self._local, "last", None)
        if last is not None:
            q, k = last
            lq = len(q)
            if 0 < lq <= n and q[lq - 1] == ids[lq - 1]:
                resume, prompt_end = k, lq      # this insert continues that match
            self._local.last = None
        with self._lock:
            pos = self._positions(n, prompt_end)
            pos = pos[pos > resume]
            if len(pos):
                self._ckpt.add_many(ids[pos - 1])
                self._placed += len(pos)
            self._inserts += 1
            self._since += 1
            if self.policy.kind == "dp" and self._since >= self.opts["replan_every"]:
                self._replan()

    def _positions(self, n: int, prompt_end: int) -> np.ndarray:
        pol = self.policy
        if pol.kind == "dp":
            if self._plan is None:
                return np.array([n], dtype=np.int64) if self.budget >= 1 else \
                    np.empty(0, np.int64)
            return self._plan[self._plan <= n]
        bnd = [prompt_end, n] if pol.kind == "boundary" else None
        return P.policy_positions(pol, n, self.budget, boundaries=bnd)

    def _replan(self) -> None:
        self._since = 0
        w = self._hist
        if not (w > 0).any():
            return
        top = int(np.flatnonzero(w)[-1])
        pos, _ = P.impl.solve(w[:top + 1], min(self.budget, top))
        self._plan = np.asarray(pos, dtype=np.int64)
        self._replans += 1

    # ------------------------------------------------------------------ state
    uses_insert_log = True

    def _snapshot_state(self):
        with self._lock:
            meta = {"entries": self._tree.entries, "inserts": self._inserts,
                    "placed": self._placed, "replans": self._replans, "since": self._since}
            sections = dict(self._tree.export())
            sections["checkpoints"] = self._ckpt.to_array()
            sections["histogram"] = self._hist.copy()
            sections["plan"] = (self._plan if self._plan is not None
                                else np.full(1, -1, dtype=np.int64))
        return meta, sections

    def _restore_state(self, meta, sections):
        self._tree.restore(sections["scalars"], sections["nodes"], sections["keys"],
                           sections["metas"], sections["slots"], sections.get("avail"),
                           sections.get("planes"))
        self._ckpt.add_many(np.asarray(sections["checkpoints"], dtype=np.uint64))
        self._hist = np.array(sections["histogram"], dtype=np.float64)
        plan = np.asarray(sections["plan"], dtype=np.int64)
        self._plan = None if (len(plan) == 1 and plan[0] == -1) else plan
        self._inserts, self._placed = int(meta["inserts"]), int(meta["placed"])
        self._replans, self._since = int(meta["replans"]), int(meta["since"])

    def stats(self) -> dict:
        t = self._tree
        n_ck = len(self._ckpt)
        return {"nodes": t.nodes, "entries": t.entries, "checkpoints": n_ck,
                "checkpoints_per_insert": self._placed / self._inserts if self._inserts else 0.0,
                "checkpoint_state_bytes": n_ck * self.model.state_bytes,
                "budget": self.budget, "replans": self._replans,
                "memory_bytes": t.nbytes + self._ckpt.nbytes, "store_reads_per_match": 0.0,
                "remove_noops": t.remove_noops}


@hookimpl
def prefixbench_register_strategies(register):
    register("sparse-state", SparseStateStrategy)
