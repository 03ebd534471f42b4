"""``radix``: the exact in-memory radix tree over block IDs, the hit-rate oracle.

Every other strategy's token hit rate is compared with this one.  The tree is
compiled (:mod:`prefixbench.plugins._radix`, flat C arrays, matching and
inserting without the GIL); :mod:`prefixbench.plugins._radix_ref` is its
pure-Python reference, kept node-for-node identical (same splits, same node
counts) so the property tests can hold the two equal on random inputs.

Thread safety: the compiled tree carries its own readers-writer lock, so one
:class:`RadixStrategy` may be shared by any number of request threads without
a Python-level lock; matches proceed in parallel, inserts one at a time.

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
    gil_free_parts = ("tree walk (match)", "tree insert")
    exact = True
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

    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        _phases.timed_call(ROUTING, self._insert, block_ids, metas)

    # durability: the tree's arrays in bulk; acknowledged inserts after the
    # snapshot come back from the insert log (enable_log)
    uses_insert_log = True

    def _snapshot_state(self):
        return {"entries": self._tree.entries}, self._tree.export()

    def _restore_state(self, meta, sections):
        self._tree.restore(sections["scalars"], sections["nodes"], sections["keys"],
                           sections["metas"], sections["slots"])

    def stats(self) -> dict:
        t = self._tree
        return {"nodes": t.nodes, "entries": t.entries, "memory_bytes": t.nbytes,
                "store_reads_per_match": 0.0}


@hookimpl
def prefixbench_register_strategies(register):
    register("radix", RadixStrategy)
