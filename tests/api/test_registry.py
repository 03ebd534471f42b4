"""The plugin registry: built-ins, entry points, duplicates, unknown names."""
import importlib.metadata
import subprocess
import sys

import pytest

import prefixbench
from prefixbench.errors import DuplicatePluginError, UnknownPluginError
from prefixbench.registry import get_registry

BUILTIN = {
    "strategy": {"radix", "dram-blockhash", "ssd-blockhash"},
    "engine": {"memory", "lmdb", "rocksdb", "wiredtiger"},
    "workload": {"codeact", "lmcache-agent", "eabf", "ultrachat", "mooncake"},
}


def test_builtins_registered():
    reg = get_registry()
    for kind, names in BUILTIN.items():
        assert names <= set(reg.names(kind)), kind


def test_unknown_name_lists_available():
    with pytest.raises(UnknownPluginError) as e:
        get_registry().get("engine", "nosuch")
    msg = str(e.value)
    assert "nosuch" in msg and "lmdb" in msg and "rocksdb" in msg


class _DupPlugin:
    @prefixbench.hookimpl
    def prefixbench_register_engines(self, register):
        register("memory", object)


def test_duplicate_name_rejected(registry_with):
    with pytest.raises(DuplicatePluginError) as e:
        registry_with(_DupPlugin())
    assert "'memory'" in str(e.value) and "twice" in str(e.value)


class _TestPlugin:
    @prefixbench.hookimpl
    def prefixbench_register_strategies(self, register):
        from prefixbench.plugins.radix import RadixStrategy

        class Renamed(RadixStrategy):
            """radix under a test name"""
            name = "test-radix"

        register("test-radix", Renamed)


def test_plugin_registered_in_fixture(registry_with):
    reg = registry_with(_TestPlugin())
    info = reg.get("strategy", "test-radix")
    assert info.summary == "radix under a test name"
    assert "test-radix" in get_registry().names("strategy")


def _example_plugin_installed():
    try:
        importlib.metadata.distribution("prefixbench-example-plugin")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_entry_point_plugin_loaded():
    """tests/example_plugin is pip-installed by .ci/run; its plugins arrive by entry point."""
    if not _example_plugin_installed():
        pytest.fail("install the example plugin first: pip install tests/example_plugin")
    reg = get_registry()
    info = reg.get("strategy", "example-dict")
    assert info.package == "prefixbench-example-plugin" and info.version == "0.1.0"
    assert reg.get("engine", "example-memory").package == "prefixbench-example-plugin"
    out = subprocess.run([sys.executable, "-m", "prefixbench", "plugins"], capture_output=True,
                         text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if "example-dict" in ln)
    assert "strategy" in line and "prefixbench-example-plugin" in line and "0.1.0" in line


def test_entry_point_strategy_replays_exactly():
    if not _example_plugin_installed():
        pytest.fail("install the example plugin first: pip install tests/example_plugin")
    from prefixbench.harness.bench import RunSpec, replay_once

    res = replay_once(RunSpec("example-dict", None, "ultrachat", workload_options={"sessions": "20"}),
                      quiet=True)
    assert res.requests > 0 and res.false_hits == 0
    assert res.hit_tokens == res.oracle_hit_tokens > 0


def test_plugins_command_lists_every_kind(run_cli):
    code, out, _ = run_cli("plugins")
    assert code == 0
    for kind, names in BUILTIN.items():
        for name in names:
            assert any(ln.split()[:2] == [kind, name] for ln in out.splitlines()), (kind, name)
    assert "prefixbench" in out
