"""Pure-Python mode (``PREFIXBENCH_PURE=1``): the same answers as the compiled
build, recorded in the metadata; and a missing build is one clear line, never a
silent fall-back to the slow references."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pyperf
import pytest
from prefixbench import twins
from prefixbench.harness.pyperf_io import run_metadata

COMPILED_MODULES = tuple(c for c, _ in twins.TWINS)
#: the .so files are installed (absent in `tox -e test-pure`, which builds none)
BUILT = all(importlib.util.find_spec(m) is not None for m in COMPILED_MODULES)

RUNS = {   # small, deterministic runs (sarp back-fills synchronously)
    "radix": ["-s", "radix"],
    "dram-blockhash": ["-s", "dram-blockhash"],
    "sarp": ["-s", "sarp", "-e", "memory", "-S", "backfill=sync"],
    "segment-hash": ["-s", "segment-hash", "-e", "memory"],
}


def _env(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != twins.ENV_VAR}
    if pure:
        env[twins.ENV_VAR] = "1"
    return env


#: count figures that are measurements of the machine, not of the index
MEASURED = {"cpu-cores-busy"}


def _run(tmp_path, name: str, pure: bool) -> tuple[dict, dict]:
    out = tmp_path / f"{name}-{'pure' if pure else 'cython'}.json"
    cmd = [sys.executable, "-m", "prefixbench", "-q", "run", *RUNS[name], "-w", "lmcache-agent",
           "-W", "sessions=3", "--no-runner", "-o", str(out)]
    p = subprocess.run(cmd, env=_env(pure), capture_output=True, text=True, check=False, timeout=300)
    assert p.returncode == 0, p.stderr
    suite = pyperf.BenchmarkSuite.load(str(out).replace(".json", ".counts.json"))
    counts = {b.get_name(): b.get_values() for b in suite if b.get_name() not in MEASURED}
    md = suite.get_benchmarks()[0].get_metadata()
    return counts, md


def test_pure_flag_values():
    assert twins.pure_requested({"PREFIXBENCH_PURE": "1"})
    assert twins.pure_requested({"PREFIXBENCH_PURE": "true"})
    for off in ("", "0", "no"):
        assert not twins.pure_requested({"PREFIXBENCH_PURE": off})
    assert not twins.pure_requested({})
    assert twins.IMPLEMENTATION == ("pure-python" if twins.PURE else "cython")
    assert run_metadata("radix", None, "w", {})["prefixbench_impl"] == twins.IMPLEMENTATION


@pytest.mark.compiled
def test_default_mode_runs_every_compiled_module():
    """Without PREFIXBENCH_PURE every hot path is the compiled twin (a broken build
    must fail here, not run slowly)."""
    from prefixbench import blockids
    from prefixbench.plugins import blockhash, radix, sarp
    assert twins.IMPLEMENTATION == "cython" and blockids.COMPILED
    for name in COMPILED_MODULES:
        impl = twins.load(name)
        assert twins.is_compiled(impl) and impl.__file__.endswith(".so"), name
    assert radix.RadixTree is not radix.RadixTreePy
    assert blockhash.BlockHashTable is not blockhash.BlockHashTablePy
    assert sarp.RoutingDirectory is not sarp.RoutingDirectoryPy


@pytest.mark.parametrize("name", sorted(RUNS))
def test_pure_run_equals_the_compiled_run(tmp_path, name):
    pure, md = _run(tmp_path, name, pure=True)
    assert md["prefixbench_impl"] == "pure-python"
    assert pure["hit-tokens"][0] > 0 and "oracle-hit-tokens" in pure
    if name in ("radix", "dram-blockhash"):            # exact strategies
        assert pure["hit-tokens"] == pure["oracle-hit-tokens"]
    if not BUILT:
        return      # `tox -e test-pure`: nothing compiled to compare with
    compiled, cmd = _run(tmp_path, name, pure=False)
    assert cmd["prefixbench_impl"] == "cython"
    # every count: hits, oracle hits, store reads, the strategy's counters and memory
    assert pure == compiled


_BLOCKER = """
import sys
from importlib.abc import MetaPathFinder

class Blocker(MetaPathFinder):          # what a build without a C compiler looks like
    def find_spec(self, name, path=None, target=None):
        if name == {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from prefixbench.harness.cli import main
sys.argv = ["prefixbench", "-q", "run", "-s", "radix", "-w", "lmcache-agent", "-W", "sessions=2",
            "--no-runner"]
sys.exit(main())
"""


@pytest.mark.parametrize("blocked", ["prefixbench.plugins._radix", "prefixbench._blockids"])
def test_a_missing_compiled_module_is_one_clear_line(tmp_path, blocked):
    p = subprocess.run([sys.executable, "-c", _BLOCKER.format(blocked=blocked)], cwd=tmp_path,
                       env=_env(pure=False), capture_output=True, text=True, check=False, timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    name = re.escape(blocked) if BUILT else r"prefixbench\.\w+\._\w+"
    assert re.fullmatch(rf"prefixbench: error: compiled module {name} is not built: reinstall "
                        r"with a C compiler, or set PREFIXBENCH_PURE=1 to use the pure-Python "
                        r"references", lines[0]), lines[0]
    # and the remedy it names works
    ok = subprocess.run([sys.executable, "-c", _BLOCKER.format(blocked=blocked)], cwd=tmp_path,
                        env=_env(pure=True), capture_output=True, text=True, check=False, timeout=300)
    assert ok.returncode == 0, ok.stderr
