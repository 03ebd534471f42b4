"""The plugin registry: built-in modules plus the ``prefixbench`` entry points.

Each hook receives a typed register object for its kind; registering a name
twice is an error naming both providers.  Lookups of unknown names list what
is available.

:data:`BUILTIN_PLUGINS` is the one place where plugin modules are named by
string (import-linter's layer contracts do not see these imports), so the
kernel can load every built-in without importing a folder.  The harness asks
for what it needs by name through :func:`get_registry` (the oracle is
``get("strategy", "radix")``), never by importing a plugin's module.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

import pluggy

from prefixbench.errors import DuplicatePluginError, UnknownPluginError
from prefixbench import hookspecs

ENTRY_POINT_GROUP = "prefixbench"
KINDS = ("strategy", "engine", "workload", "tokenizer", "eviction")

#: built-in plugins, registered by module like any third-party plugin
BUILTIN_PLUGINS = (
    "prefixbench.plugins.radix",
    "prefixbench.plugins.blockhash",
    "prefixbench.plugins.segment_hash",
    "prefixbench.plugins.segment_radix",
    "prefixbench.plugins.sarp",
    "prefixbench.plugins.redis_blockhash",
    "prefixbench.plugins.sparse_state",
    "prefixbench.plugins.eviction",
    "prefixbench.engines.memory",
    "prefixbench.engines.lmdb",
    "prefixbench.engines.rocksdb",
    "prefixbench.engines.wiredtiger",
    "prefixbench.engines.packfile",
    "prefixbench.engines.redis",
    "prefixbench.engines.redis_cluster",
    "prefixbench.workloads.synthetic",
    "prefixbench.workloads.placement_profiles",
    "prefixbench.workloads.mooncake",
    "prefixbench.workloads.text",
    "prefixbench.workloads.tokenizers",
    "prefixbench.workloads.kvevents",
    "prefixbench.workloads.tokenjsonl",
)

T = TypeVar("T")


@dataclass(frozen=True)
class PluginInfo:
    kind: str
    name: str
    factory: Callable
    package: str
    version: str
    summary: str


class Register(Generic[T]):
    """Collects ``name -> factory`` for one plugin kind while hooks run."""

    def __init__(self, kind: str, registry: "Registry"):
        self.kind = kind
        self._registry = registry
        self._current: tuple[str, str] = ("prefixbench", "")

    def __call__(self, name: str, factory: T, summary: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")
        table = self._registry._plugins[self.kind]
        package, version = self._current
        if name in table:
            first = table[name]
            raise DuplicatePluginError(
                f"{self.kind} {name!r} is registered twice: by {first.package} and by {package}")
        if summary is None:
            doc = (getattr(factory, "__doc__", None) or "").strip()
            summary = doc.splitlines()[0] if doc else ""
        table[name] = PluginInfo(self.kind, name, factory, package, version, summary)


class Registry:
    """All plugins of all kinds, loaded once."""

    def __init__(self, load_entry_points: bool = True, extra_plugins=()):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        for modname in BUILTIN_PLUGINS:
            self.pm.register(importlib.import_module(modname), name=modname)
        if load_entry_points:
            self.pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        for plugin in extra_plugins:
            self.pm.register(plugin)
        self.pm.check_pending()
        self._plugins: dict[str, dict[str, PluginInfo]] = {k: {} for k in KINDS}
        self._collect()

    def _collect(self) -> None:
        dists = {id(p): (d.project_name, d.version) for p, d in self.pm.list_plugin_distinfo()}
        hooks = {
            "strategy": self.pm.hook.prefixbench_register_strategies,
            "engine": self.pm.hook.prefixbench_register_engines,
            "workload": self.pm.hook.prefixbench_register_workloads,
            "tokenizer": self.pm.hook.prefixbench_register_tokenizers,
            "eviction": self.pm.hook.prefixbench_register_evictions,
        }
        own_version = _own_version()
        for kind, hook in hooks.items():
            reg: Register = Register(kind, self)
            # call each implementation ourselves so we know who registers what
            for impl in reversed(hook.get_hookimpls()):
                reg._current = dists.get(id(impl.plugin), ("prefixbench", own_version))
                impl.function(register=reg)

    def get(self, kind: str, name: str) -> PluginInfo:
        table = self._plugins[kind]
        try:
            return table[name]
        except KeyError:
            avail = ", ".join(sorted(table)) or "none"
            raise UnknownPluginError(f"unknown {kind} {name!r}; available: {avail}") from None

    def names(self, kind: str) -> list[str]:
        return sorted(self._plugins[kind])

    def all(self) -> list[PluginInfo]:
        return [info for kind in KINDS for _, info in sorted(self._plugins[kind].items())]


def _own_version() -> str:
    try:
        from importlib.metadata import version
        return version("prefixbench")
    except Exception:  # pragma: no cover - running from a source tree
        return "0+unknown"


_registry: Registry | None = None
_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry (built on first use)."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = Registry()
        return _registry


def reset_registry(registry: Registry | None = None) -> None:
    """Replace the process-wide registry (tests register plugins this way)."""
    global _registry
    with _lock:
        _registry = registry
