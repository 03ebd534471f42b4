"""Load once, run many: a loaded index and its store kept as a checkpoint, and
every run started from a clone of it.

A paper-scale sweep loads each setting with most of a trace before it times the
rest; at ultrachat's size one load takes about half an hour.  Repeats and thread
counts need that same loaded state again, so :class:`LoadedStates` keeps, per
setting, the engine's checkpoint of the store (:meth:`SegmentStore.checkpoint`)
and the strategy's snapshot (:meth:`IndexStrategy.snapshot`), and the oracle's
snapshot once (after the load it is the same for every setting), with the
requests every run replays.  A run then gets a clone of the store
(:meth:`SegmentStore.clone_checkpoint`) with the strategy and the oracle
recovered from their snapshots.

Every run, the first included, starts from a clone, so all of them start alike:
the store's files as the load left them once it settled, the engine's cache cold.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from prefixbench.errors import StoreError
from prefixbench.harness.build import Built, fresh_run_dir, open_engine
from prefixbench.registry import get_registry

__all__ = ["LoadedStates", "can_checkpoint"]


def can_checkpoint(engine: str | None) -> bool:
    """Whether ``engine`` can keep a loaded store (no engine: nothing to keep)."""
    return engine is None or bool(getattr(get_registry().get("engine", engine).factory,
                                          "checkpoints", False))


class LoadedStates:
    """Loaded settings kept on disk under one temporary directory, until :meth:`close`.

    ``engine`` and the store settings are those every clone opens with; the engine
    options are each kept setting's own (:meth:`keep`)."""

    def __init__(self, engine: str | None, *, cache_bytes: int, direct_io: bool = False,
                 durability: str = "async", work_dir: str | None = None):
        self.engine = engine
        self._store_kw = dict(cache_bytes=cache_bytes, direct_io=direct_io,
                              durability=durability)
        self.root = tempfile.mkdtemp(prefix="prefixbench-loaded-", dir=work_dir)
        #: key -> (strategy class, meta size, store checkpoint or None, snapshot dir, extra,
        #: the engine options its clones open with)
        self._kept: dict = {}
        self._oracle = None             # (class, meta size, snapshot dir)
        #: the requests every run replays after the load (the caller keeps them here)
        self.run_requests: list | None = None

    def has(self, key) -> bool:
        return key in self._kept

    @property
    def has_oracle(self) -> bool:
        return self._oracle is not None

    def keep(self, key, built: Built, extra=None, engine_options: dict | None = None) -> None:
        """Checkpoint ``built``'s store and snapshot its strategy under ``key``;
        ``extra`` comes back with every :meth:`open`, whose clones open with
        ``engine_options``.  ``built`` stays open."""
        where = os.path.join(self.root, f"setting-{len(self._kept)}")
        os.makedirs(where)
        store_dir = None
        if built.store is not None:
            store_dir = os.path.join(where, "store")
            built.store.checkpoint(store_dir)
        snap = os.path.join(where, "index")
        os.makedirs(snap)
        built.strategy.snapshot(snap)
        self._kept[key] = (type(built.strategy), built.strategy.meta_size, store_dir, snap,
                           extra, dict(engine_options or {}))

    def keep_oracle(self, oracle) -> None:
        """Snapshot the oracle as the load left it (once: every setting's load is the same)."""
        snap = os.path.join(self.root, "oracle")
        os.makedirs(snap)
        oracle.snapshot(snap)
        self._oracle = (type(oracle), oracle.meta_size, snap)

    def open(self, key) -> tuple:
        """``(built, oracle, extra)``: a fresh clone of ``key``'s store with its strategy
        and a fresh oracle, both recovered from their snapshots; the caller closes
        both (closing ``built`` removes the clone)."""
        if self._oracle is None:
            raise StoreError("loaded states: no oracle was kept (keep_oracle first)")
        cls, meta_size, store_dir, snap, extra, options = self._kept[key]
        store = path = None
        try:
            if store_dir is not None:
                path, _owns = fresh_run_dir(None)
                get_registry().get("engine", self.engine).factory.clone_checkpoint(store_dir,
                                                                                   path)
                store = open_engine(self.engine, path, **self._store_kw, options=dict(options))
            strategy = cls.recover(store, snap, meta_size=meta_size, durable_log=False,
                                   quiet=True)
        except BaseException:
            if store is not None:
                store.close()
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            raise
        built = Built(strategy, store, path, path is not None)
        try:
            ocls, oms, osnap = self._oracle
            oracle = ocls.recover(None, osnap, meta_size=oms, durable_log=False, quiet=True)
        except BaseException:
            built.close()
            raise
        return built, oracle, extra

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
