"""prefixbench: benchmark harness and plugin registry for KVCache prefix indexes.

The package root is the kernel (errors, units, durable writes, chained block
IDs, metas, the snapshot protocol, phase clocks, the compiled-twin table,
hookspecs and the registry); it imports none of the five folders.  The public
names that live in a folder (the store and strategy contracts, the workload
model) are re-exported lazily, by name, so importing the kernel never loads
an engine or a strategy.
"""
from __future__ import annotations

import importlib

from prefixbench.blockids import chain_ids, chain_tokens, namespace_seed
from prefixbench.errors import (
    ConfigError,
    MissingDependencyError,
    PrefixbenchError,
    TraceFormatError,
    UnknownPluginError,
)
from prefixbench.hookspecs import hookimpl
from prefixbench.registry import get_registry

__version__ = "0.1.0"

#: public name -> the module (outside the kernel) that defines it
_LAZY = {
    "SegmentStore": "prefixbench.engines.base",
    "StoreConfig": "prefixbench.engines.base",
    "StoreStats": "prefixbench.engines.base",
    "WriteBatch": "prefixbench.engines.base",
    "IndexStrategy": "prefixbench.plugins.strategy",
    "Match": "prefixbench.plugins.strategy",
    "Option": "prefixbench.plugins.strategy",
    "Request": "prefixbench.workloads.model",
    "Session": "prefixbench.workloads.model",
    "Turn": "prefixbench.workloads.model",
    "Workload": "prefixbench.workloads.model",
}

__all__ = sorted([
    "ConfigError", "MissingDependencyError", "PrefixbenchError", "TraceFormatError",
    "UnknownPluginError", "chain_ids", "chain_tokens", "get_registry", "hookimpl",
    "namespace_seed", *_LAZY,
])


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'prefixbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
