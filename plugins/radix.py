"""``radix``: the exact in-memory radix tree over block IDs, the hit-rate oracle.

Every other strategy's token hit rate is compared with this one.  The tree is
compiled (:mod:`prefixbench.plugins._radix`, flat C arrays, matching and
inserting without the GIL); :class:`RadixTreePy` below is its pure-Python
reference, kept node-for-node identical (same splits, same node counts) so
the property tests can hold the two equal on random inputs.

Thread safety: the compiled tree carries its own readers-writer lock, so one
:class:`RadixStrategy` may be shared by any number of request threads without
a Python-level lock; matches proceed in parallel, inserts one at a time.
"""
from __future__ import annotations

import numpy as np

from prefixbench.harness.errors import ConfigError
from prefixbench.plugins._radix import RadixTree
from prefixbench.plugins.hookspecs import hookimpl
from prefixbench.plugins.strategy import (
    META_SIZE,
    IndexStrategy,
    Match,
    Option,
    as_block_ids,
    as_metas,
)

__all__ = ["RadixStrategy", "RadixTree", "RadixTreePy"]


def _id_list(block_ids) -> list:
    return as_block_ids(block_ids).tolist()


class _PyNode:
    __slots__ = ("keys", "metas", "children")

    def __init__(self, keys: list, metas: list, children: dict):
        self.keys = keys          # block ids on the incoming edge
        self.metas = metas        # one bytes record per block id
        self.children = children  # first block id of the child's edge -> child


class RadixTreePy:
    """Pure-Python reference of :class:`RadixTree` (dict-based nodes, slow, obvious)."""

    def __init__(self, meta_size: int = META_SIZE):
        if meta_size < 1:
            raise ValueError(f"meta_size must be >= 1, got {meta_size}")
        self.meta_size = meta_size
        self.root = _PyNode([], [], {})
        self.nodes = 0
        self.entries = 0

    def _walk(self, ids: list) -> tuple[int, list]:
        node, i, metas = self.root, 0, []
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                break
            k = 0
            while k < len(child.keys) and i + k < len(ids) and child.keys[k] == ids[i + k]:
                k += 1
            metas.extend(child.metas[:k])
            i += k
            if k < len(child.keys):
                break
            node = child
        return i, metas

    def match(self, block_ids) -> Match:
        ids = _id_list(block_ids)
        n, metas = self._walk(ids)
        out = np.frombuffer(b"".join(metas), dtype=np.uint8).reshape(n, self.meta_size).copy()
        return Match(n, out)

    def match_len(self, block_ids) -> int:
        return self._walk(_id_list(block_ids))[0]

    def insert(self, block_ids, metas) -> None:
        ids = _id_list(block_ids)
        metas = as_metas(metas, len(ids), self.meta_size)
        rows = [metas[j].tobytes() for j in range(len(ids))]
        node, i = self.root, 0
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                node.children[ids[i]] = _PyNode(ids[i:], rows[i:], {})
                self.nodes += 1
                self.entries += len(ids) - i
                return
            k = 1
            while k < len(child.keys) and i + k < len(ids) and child.keys[k] == ids[i + k]:
                k += 1
            if k == len(child.keys):
                node, i = child, i + k
                continue
            if i + k == len(ids):
                return
            mid = _PyNode(child.keys[:k], child.metas[:k], {child.keys[k]: child})
            child.keys, child.metas = child.keys[k:], child.metas[k:]
            node.children[ids[i]] = mid
            self.nodes += 1
            node, i = mid, i + k

    def __len__(self) -> int:
        return self.entries


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
        return self._match(block_ids)

    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        self._insert(block_ids, metas)

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
