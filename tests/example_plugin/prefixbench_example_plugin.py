"""A third-party prefixbench plugin: a strategy and an engine, found by entry point.

``example-dict`` is the plain Python-dict chained-hash index (one dict entry
per block, probe until the first miss) - the simplest exact strategy, and a
handy yardstick; it snapshots its entries and, in durable mode, logs inserts
(the contract does the logging).  ``example-memory`` is the built-in memory
engine under another name, to show an engine plugin.  ``test_example_plugin.py``
runs both conformance kits on them.
"""
import numpy as np

import prefixbench
from prefixbench.engines.memory import MemoryStore


class DictStrategy(prefixbench.IndexStrategy):
    """Python dict of block id -> metadata bytes (example plugin)."""

    name = "example-dict"
    exact = True

    def __init__(self, store=None, options=None, meta_size=16):
        super().__init__(store, options, meta_size)
        self._table = {}

    def match(self, block_ids):
        table = self._table
        out = []
        for bid in block_ids.tolist():
            meta = table.get(bid)
            if meta is None:
                break
            out.append(meta)
        metas = np.frombuffer(b"".join(out), dtype=np.uint8).reshape(len(out), self.meta_size)
        return prefixbench.Match(len(out), metas)

    def insert(self, block_ids, metas):
        table = self._table
        for bid, meta in zip(block_ids.tolist(), metas):
            if bid not in table:
                table[bid] = meta.tobytes()

    def stats(self):
        return {"entries": len(self._table)}

    # durability: a snapshot holds every entry as two arrays; inserts acknowledged
    # after it come back from the insert log the contract keeps in durable mode
    uses_insert_log = True

    def _snapshot_state(self):
        keys = np.fromiter(self._table, dtype=np.uint64, count=len(self._table))
        metas = np.frombuffer(b"".join(self._table.values()), dtype=np.uint8)
        return {"entries": len(keys)}, {"keys": keys,
                                        "metas": metas.reshape(len(keys), self.meta_size)}

    def _restore_state(self, meta, sections):
        keys, metas = sections["keys"], sections["metas"]
        if metas.shape != (len(keys), self.meta_size):
            raise ValueError("keys and metas do not match")
        self._table = dict(zip(keys.tolist(), (m.tobytes() for m in metas)))


class ExampleMemoryStore(MemoryStore):
    """The memory engine, registered by a third-party package."""

    name = "example-memory"


@prefixbench.hookimpl
def prefixbench_register_strategies(register):
    register("example-dict", DictStrategy)


@prefixbench.hookimpl
def prefixbench_register_engines(register):
    register("example-memory", ExampleMemoryStore)
