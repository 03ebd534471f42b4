"""prefixbench: benchmark harness and plugin registry for KVCache prefix indexes.

The public API is small; everything else lives in private-by-convention
modules under ``prefixbench.harness``, ``.plugins``, ``.engines``,
``.workloads`` and ``.reports``.
"""
from prefixbench.engines.base import SegmentStore, StoreConfig, StoreStats, WriteBatch
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
from prefixbench.plugins.strategy import IndexStrategy, Match, Option
from prefixbench.workloads.model import Request, Session, Turn, Workload

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "IndexStrategy", "Match", "MissingDependencyError", "Option",
    "PrefixbenchError", "Request", "SegmentStore", "Session", "StoreConfig", "StoreStats",
    "TraceFormatError", "Turn", "UnknownPluginError", "Workload", "WriteBatch",
    "chain_ids", "chain_tokens", "get_registry", "hookimpl", "namespace_seed",
]
