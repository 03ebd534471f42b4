"""The import layers of DESIGN.md, checked by import-linter (contracts in setup.cfg).

import-linter walks the installed package's folders, which an editable install
(folders mapped from the repository root) does not have; so the check runs on a
plain pure-Python copy installed into a temporary directory.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed_copy(tmp_path_factory):
    if shutil.which("lint-imports") is None and not (pathlib.Path(sys.executable).parent / "lint-imports").exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    src = tmp_path_factory.mktemp("src")      # the sources only: a stale build/ never leaks in
    for name in ("api", "harness", "plugins", "engines", "workloads", "reports"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns(
            "__pycache__", "*.so", "*.c"))
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    target = tmp_path_factory.mktemp("site")
    env = dict(os.environ, PREFIXBENCH_PURE="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True, env=env, capture_output=True)
    return target


def _lint(site, config):
    exe = pathlib.Path(sys.executable).parent / "lint-imports"
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([str(exe), "--config", str(config), "--no-cache"], cwd=site, env=env,
                          capture_output=True, text=True)


def test_every_layer_contract_is_kept(installed_copy):
    r = _lint(installed_copy, ROOT / "setup.cfg")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in r.stdout, r.stdout[-2000:]


def test_a_broken_layer_fails_the_check(installed_copy, tmp_path):
    """An engine importing the harness must break the engines contract."""
    bad = installed_copy / "prefixbench" / "engines" / "zz_layer_probe.py"
    bad.write_text("from prefixbench.harness import replay\n")
    try:
        r = _lint(installed_copy, ROOT / "setup.cfg")
    finally:
        bad.unlink()
    assert r.returncode != 0
    assert "engines import only the kernel BROKEN" in r.stdout, r.stdout[-2000:]


def test_every_kernel_module_is_under_the_kernel_contract():
    """A new module in api/ must join the kernel contract, or the rule would not cover it."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["importlinter:contract:kernel"]["source_modules"].split())
    modules = {f"prefixbench.{p.stem}" for p in (ROOT / "api").glob("*.py")
               if p.stem not in ("__init__", "__main__")}
    assert modules - listed == set(), "add these to [importlinter:contract:kernel] in setup.cfg"
