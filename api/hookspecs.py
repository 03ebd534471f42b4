"""The hooks a prefixbench plugin may implement: one per plugin kind.

A plugin module (built-in, or loaded from the ``prefixbench`` entry-point
group) implements any of these with ``@prefixbench.hookimpl`` and calls
``register(name, factory)`` for each thing it provides.
"""
from __future__ import annotations

import pluggy

PROJECT = "prefixbench"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def prefixbench_register_strategies(register):
    """Register index strategies: ``register(name, cls)``, cls an IndexStrategy subclass."""


@hookspec
def prefixbench_register_engines(register):
    """Register engines: ``register(name, cls)``, cls a SegmentStore subclass."""


@hookspec
def prefixbench_register_workloads(register):
    """Register workloads: ``register(name, factory)``, factory(**options) -> Workload."""


@hookspec
def prefixbench_register_tokenizers(register):
    """Register tokenizers: ``register(name, factory)``, factory(**options) -> Tokenizer."""


@hookspec
def prefixbench_register_evictions(register):
    """Register KVCache-pool eviction policies: ``register(name, cls)``, cls an
    ``EvictionPolicy`` subclass (see ``prefixbench.plugins.eviction``)."""
