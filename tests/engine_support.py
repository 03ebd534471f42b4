"""Engines the strategy property tests run on: ``memory`` and ``lmdb`` (on disk)."""
from __future__ import annotations

import shutil
import tempfile

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.lmdb import LmdbStore
from prefixbench.engines.memory import MemoryStore

ENGINES = {"memory": MemoryStore, "lmdb": LmdbStore}
ENGINE_NAMES = list(ENGINES)


class Stores:
    """Opens engines in scratch directories; closes and removes them on exit.

    ``Stores(engine)`` fixes the engine so that ``open()`` needs no argument.
    """

    def __init__(self, engine: str | None = None):
        self.engine, self.opened, self.dirs = engine, [], []

    def open(self, engine: str | None = None, path: str | None = None):
        engine = engine or self.engine
        if path is None:
            path = tempfile.mkdtemp(prefix=f"pb-{engine}-")
            self.dirs.append(path)
        store = ENGINES[engine](StoreConfig(path=path, durability="off"))
        self.opened.append(store)
        return store

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for s in self.opened:
            s.close()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        return False
