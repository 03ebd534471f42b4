"""``radix``: the exact in-memory radix tree over block IDs, the hit-rate oracle.

Every other strategy's token hit rate is compared with this one.  The tree is
compiled (:mod:`prefixbench.plugins._radix`, flat C arrays, matching and
inserting without the GIL); :mod:`prefixbench.plugins._radix_ref` is its
pure-Python reference, kept node-for-node identical (same splits, same node
counts) so the property tests can hold the two equal on random inputs.

Thread safety: the compiled tree carries its own readers-writer lock, so one
:class:`RadixStrategy` may be shared by any number of request threads without
a Python-level lock; matches proceed in parallel, inserts one at a time.

Workers and removal: every block carries a bitmap of the workers holding it
and one metadata record per holding worker (``max_workers = 64``), so the
oracle answers eviction runs exactly: a match stops at the first block no
worker holds and reports each block's locations.  Removed blocks stay in the
tree as empty bitmaps until ``clear()`` (see :mod:`prefixbench.plugins._radix`):
the oracle's memory is that of an unbounded run, never more.  Snapshots carry
the bitmaps and planes; removes are logged like inserts in durable mode.

Where the time goes (:mod:`prefixbench.phases`): the whole tree call,
match or insert, is routing (one switch per call; the tree's own lock waits
happen inside it and count as routing too).
"""
from __future__ import annotations

import numpy as np

from prefixbench import twins
from prefixbench import phases as _phases
from prefixbench.phases import ROUTING
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.strategy import (
    META_SIZE,
    IndexStrategy,
    Match,
    Option,
    check_worker,
)

_radix = twins.load("prefixbench.plugins._radix")

__all__ = ["RadixStrategy", "RadixTree", "RadixTreePy"]

#: the tree: compiled, or its reference in pure-Python mode (``PREFIXBENCH_PURE=1``)
RadixTree = _radix.RadixTree
#: the pure-Python reference tree, in either mode
RadixTreePy = twins.reference("prefixbench.plugins._radix").RadixTree


class RadixStrategy(IndexStrategy):
    """Exact in-memory compressed radix tree over block IDs (the oracle)."""

    name = "radix"
    gil_free_parts = ("tree walk (match)", "tree insert", "tree remove")
    exact = True
    supports_remove = True
    max_workers = 64
    options = {
        "initial_blocks": Option(1024, "key/metadata pool slots allocated up front", min=1,
                                 max=1 << 40),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        if meta_size < 1:
            raise ConfigError(f"option meta_size: {meta_size!r} must be >= 1")
        self._tree = RadixTree(meta_size, self.opts["initial_blocks"])
        self._match = self._tree.match
        self._insert = self._tree.insert

    def match(self, block_ids: np.ndarray) -> Match:
        return _phases.timed_call(ROUTING, self._match, block_ids)

    def insert(self, block_ids: np.ndarray, metas: np.ndarray, worker: int = 0) -> None:
        if worker != 0:
            check_worker("strategy radix", worker, self.max_workers, False)
        _phases.timed_call(ROUTING, self._insert, block_ids, metas, worker)

    def remove(self, block_ids: np.ndarray, worker: int | None = None) -> int:
        ids, w = self._removal_args(block_ids, worker)
        return _phases.timed_call(ROUTING, self._tree.remove, ids, w)

    def clear(self, worker: int | None = None) -> None:
        w = check_worker("strategy radix.clear", worker, self.max_workers, True)
        self._tree.clear(w)

    # durability: the tree's arrays in bulk; acknowledged inserts after the
    # snapshot come back from the insert log (enable_log)
    uses_insert_log = True

    def _snapshot_state(self):
        return {"entries": self._tree.entries}, self._tree.export()

    def _restore_state(self, meta, sections):
        self._tree.restore(sections["scalars"], sections["nodes"], sections["keys"],
                           sections["metas"], sections["slots"], sections.get("avail"),
                           sections.get("planes"))

    def stats(self) -> dict:
        t = self._tree
        return {"nodes": t.nodes, "entries": t.entries, "memory_bytes": t.nbytes,
                "store_reads_per_match": 0.0, "remove_noops": t.remove_noops,
                "removed_slots": t.pool - t.entries}


@hookimpl
def prefixbench_register_strategies(register):
    register("radix", RadixStrategy)
