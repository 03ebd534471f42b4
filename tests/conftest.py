"""Shared fixtures: a registry with test plugins registered in a fixture."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
MOONCAKE_CONVERSATION = os.path.join(SHARED_DATA, "mooncake-fast25", "conversation_trace.jsonl.gz")


@pytest.fixture
def registry_with(monkeypatch):
    """``registry_with(plugin, ...)``: a fresh process registry with extra plugins."""
    from prefixbench.plugins import registry as reg

    def make(*plugins):
        r = reg.Registry(extra_plugins=plugins)
        monkeypatch.setattr(reg, "_registry", r)
        return r

    yield make


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from prefixbench.harness.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def prefixbench_cmd():
    return [sys.executable, "-m", "prefixbench"]
