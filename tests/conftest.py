"""Shared fixtures: a registry with test plugins registered in a fixture."""
import os
import sys

import pytest
from prefixbench import twins

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
MOONCAKE_CONVERSATION = os.path.join(SHARED_DATA, "mooncake-fast25", "conversation_trace.jsonl.gz")


@pytest.fixture
def registry_with(monkeypatch):
    """``registry_with(plugin, ...)``: a fresh process registry with extra plugins."""
    from prefixbench import registry as reg

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


# ------------------------------------------------------------------ pure-Python mode
# PREFIXBENCH_PURE=1 (`tox -e test-pure`) runs the suite on the pure-Python
# references: tests marked `compiled` (a compiled twin held equal to its
# reference, or checks of the built extensions) skip; everything else runs.
PURE_SKIP = ("needs the compiled Cython modules (compares them with their references); "
             "PREFIXBENCH_PURE=1 runs the pure-Python references only")


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled: needs the compiled Cython modules; "
                            "skipped with PREFIXBENCH_PURE=1")


def pytest_collection_modifyitems(config, items):
    if not twins.PURE:
        return
    skip = pytest.mark.skip(reason=PURE_SKIP)
    for item in items:
        if item.get_closest_marker("compiled") is not None:
            item.add_marker(skip)


def pytest_report_header(config):
    return f"prefixbench implementation: {twins.IMPLEMENTATION}"

