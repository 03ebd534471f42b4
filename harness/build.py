"""Turning names and options into live objects: the one place that opens engines."""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from prefixbench.engines.base import SegmentStore, StoreConfig
from prefixbench.errors import ConfigError, StoreError
from prefixbench.units import parse_size  # noqa: F401  (re-exported for the CLI)
from prefixbench.registry import get_registry
from prefixbench.plugins.strategy import IndexStrategy

def parse_kv(option: str, items) -> dict:
    """['a=1', 'b=x'] -> {'a': '1', 'b': 'x'}; values stay strings for the plugin to parse."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"option {option}: {item!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


@dataclass
class Built:
    strategy: IndexStrategy
    store: SegmentStore | None
    store_dir: str | None
    owns_dir: bool

    def close(self) -> None:
        self.strategy.close()
        if self.store is not None:
            self.store.close()
        if self.owns_dir and self.store_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)


def fresh_run_dir(store_dir: str | None) -> tuple[str, bool]:
    """A fresh directory for a run's store.  An existing non-empty directory is
    refused rather than reused, so a run never overwrites data it did not make."""
    if store_dir is None:
        return tempfile.mkdtemp(prefix="prefixbench-store-"), True
    if os.path.exists(store_dir):
        if not os.path.isdir(store_dir):
            raise StoreError(f"store path {store_dir}: exists and is not a directory")
        if os.listdir(store_dir):
            raise StoreError(f"store path {store_dir}: directory is not empty; "
                             "give a new or empty directory (nothing was changed)")
    try:
        os.makedirs(store_dir, exist_ok=True)
        probe = os.path.join(store_dir, ".prefixbench-write-probe")
        with open(probe, "wb") as fh:
            fh.write(b"x")
        os.unlink(probe)
    except OSError as e:
        raise StoreError(f"store path {store_dir}: cannot write ({e.strerror or e})") from None
    return store_dir, False


def open_engine(engine: str, path: str | None, *, cache_bytes: int = 64 << 20,
                direct_io: bool = False, durability: str = "async",
                options: dict | None = None) -> SegmentStore:
    info = get_registry().get("engine", engine)
    config = StoreConfig(path=path, cache_bytes=cache_bytes, direct_io=direct_io,
                         durability=durability, options=dict(options or {}))
    return info.factory(config)


def beyond_paper_options(strategy) -> dict:
    """``{option: value in effect}`` of the strategy's options marked ``beyond_paper``,
    which a comparison prints even at their defaults."""
    spec = getattr(type(strategy), "options", {}) or {}
    opts = getattr(strategy, "opts", {}) or {}
    return {k: opts[k] for k, o in spec.items() if getattr(o, "beyond_paper", False) and k in opts}


def build(strategy: str, engine: str | None, *, strategy_options: dict | None = None,
          store_dir: str | None = None, cache_bytes: int = 64 << 20, direct_io: bool = False,
          durability: str = "async", engine_options: dict | None = None,
          block_tokens: int | None = None) -> Built:
    """Strategy (+ its engine when it needs one) ready to replay.

    ``block_tokens``: the workload's block size in tokens, given to a strategy
    that declares a ``block_tokens`` option (so geometry given in tokens rounds
    to the workload's blocks) unless the user set that option; None changes
    nothing.
    """
    reg = get_registry()
    cls = reg.get("strategy", strategy).factory
    if block_tokens is not None and "block_tokens" in getattr(cls, "options", {}):
        strategy_options = dict(strategy_options or {})
        strategy_options.setdefault("block_tokens", block_tokens)
    store = None
    path, owns = None, False
    if getattr(cls, "needs_store", False):
        if engine is None:
            raise ConfigError(f"option --engine: strategy {strategy} stores its index in an engine; "
                              f"choose one of {', '.join(reg.names('engine'))}")
        reg.get("engine", engine)  # unknown names fail before anything is created
        path, owns = fresh_run_dir(store_dir)
        try:
            store = open_engine(engine, path, cache_bytes=cache_bytes, direct_io=direct_io,
                                durability=durability, options=engine_options)
        except BaseException:
            if owns:
                shutil.rmtree(path, ignore_errors=True)
            raise
    try:
        strat = cls(store, strategy_options or {})
    except BaseException:
        if store is not None:
            store.close()
        if owns:
            shutil.rmtree(path, ignore_errors=True)
        raise
    return Built(strat, store, path, owns)
