"""A tiny exact strategy with per-worker locations and ``remove``, for the pool tests.

It keeps the contract the pools drive (``insert(ids, metas, worker)``,
``remove(ids, worker)``, ``clear``, ``Match.locations``) in plain dicts, so the
pool tests do not depend on any built-in strategy's remove.
"""
from __future__ import annotations

from dataclasses import dataclass
import types

import numpy as np

from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.strategy import IndexStrategy


@dataclass
class FakeMatch:
    n_blocks: int
    metas: np.ndarray
    locations: np.ndarray | None


class FakeExact(IndexStrategy):
    """Exact dict index: block -> {worker: metadata}."""

    name = "fake-exact"
    exact = True
    supports_remove = True
    max_workers = 64

    def __init__(self, store=None, options=None, meta_size=16):
        super().__init__(store, options, meta_size)
        self.avail: dict = {}
        self.remove_calls = []
        self.events = []                # ("remove" | "insert", worker), in call order

    def match(self, block_ids):
        metas, locs = [], []
        for b in np.asarray(block_ids, dtype=np.uint64).tolist():
            at = self.avail.get(b)
            if not at:
                break
            metas.append(at[min(at)])
            locs.append(sum(1 << w for w in at))
        m = (np.array(metas, dtype=np.uint8).reshape(len(metas), self.meta_size)
             if metas else np.empty((0, self.meta_size), dtype=np.uint8))
        return FakeMatch(len(metas), m, np.array(locs, dtype=np.uint64))

    def insert(self, block_ids, metas, worker: int = 0):
        self.events.append(("insert", worker))
        for b, meta in zip(np.asarray(block_ids, dtype=np.uint64).tolist(), metas):
            self.avail.setdefault(b, {}).setdefault(worker, meta.copy())

    def remove(self, block_ids, worker=None) -> int:
        ids = np.asarray(block_ids)
        if ids.dtype != np.uint64:
            raise TypeError("block ids must be uint64")
        self.remove_calls.append((ids.copy(), worker))
        self.events.append(("remove", worker))
        gone = 0
        for b in ids.tolist():
            at = self.avail.get(b)
            if not at:
                continue
            if worker is None:
                gone += len(at)
                at.clear()
            elif worker in at:
                del at[worker]
                gone += 1
        return gone

    def clear(self, worker=None) -> None:
        for b in list(self.avail):
            self.remove(np.array([b], dtype=np.uint64), worker)

    def stats(self):
        return {"entries": sum(1 for at in self.avail.values() if at)}

    def held_by(self, worker: int) -> set:
        return {b for b, at in self.avail.items() if worker in at}


class AllWorkers(FakeExact):
    """Claims every block is on every worker (false locations)."""

    name = "fake-all-workers"

    def match(self, block_ids):
        m = super().match(block_ids)
        return FakeMatch(m.n_blocks, m.metas, np.full(m.n_blocks, (1 << 63) - 1 | (1 << 63),
                                                      dtype=np.uint64))


class FirstWorkerOnly(FakeExact):
    """Reports worker 0 alone for every matched block (missing locations)."""

    name = "fake-first-worker"

    def match(self, block_ids):
        m = super().match(block_ids)
        return FakeMatch(m.n_blocks, m.metas, np.ones(m.n_blocks, dtype=np.uint64))


class OneLocation(FakeExact):
    """Tracks one location (``Match.locations`` None)."""

    name = "fake-one-location"
    max_workers = 1

    def match(self, block_ids):
        m = super().match(block_ids)
        return FakeMatch(m.n_blocks, m.metas, None)


class NoRemove(FakeExact):
    name = "fake-no-remove"
    supports_remove = False


def plugin():
    """A plugin object registering the fakes (for ``registry_with``)."""
    @hookimpl
    def prefixbench_register_strategies(register):
        for cls in (FakeExact, OneLocation, NoRemove, AllWorkers, FirstWorkerOnly):
            register(cls.name, cls)
    return types.SimpleNamespace(prefixbench_register_strategies=prefixbench_register_strategies)
