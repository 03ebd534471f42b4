"""The wheel installs everything under ``prefixbench`` and nothing generic."""
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), REPO], check=True, capture_output=True)
    (whl,) = [p for p in out.iterdir() if p.suffix == ".whl"]
    return whl


@pytest.mark.compiled
def test_wheel_has_only_the_prefixbench_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"prefixbench", "prefixbench-0.1.0.dist-info"}, tops
    for generic in ("harness", "plugins", "engines", "workloads", "reports", "tests"):
        assert generic not in tops
    for mod in ("prefixbench/engines/lmdb.py", "prefixbench/harness/cli.py",
                "prefixbench/registry.py", "prefixbench/workloads/model.py",
                "prefixbench/reports/tables.py"):
        assert mod in names, mod
    compiled = [n for n in names if n.endswith(".so")]
    assert any(n.startswith("prefixbench/_blockids") for n in compiled), compiled


@pytest.mark.compiled
def test_wheel_imports_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    code = ("import prefixbench, prefixbench.engines.lmdb, prefixbench.blockids as b;"
            "assert b.COMPILED; print(prefixbench.__file__)")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith(str(target))


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "prefixbench", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for cmd in ("run", "plugins", "workload", "compare", "demo", "hash-bench", "engine-bench"):
        assert cmd in out
