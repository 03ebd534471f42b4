"""The malloc a run's process used is recorded with the machine: a preloaded
jemalloc changes what each RocksDB read costs, so results must say which ran."""
import glob
import os
import subprocess
import sys

import pytest

from prefixbench.harness import pyperf_io

JEMALLOC = next(iter(sorted(glob.glob("/usr/lib/*/libjemalloc.so.2"))), None)
LIBC_ONLY = ("7f00-7f10 r-xp 00000000 fe:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
             "7f20-7f30 r-xp 00000000 fe:01 43 /usr/lib/x86_64-linux-gnu/libm.so.6\n")


@pytest.mark.parametrize("extra, want", [
    ("", "libc"),
    ("7f40-7f50 r-xp 00000000 fe:01 44 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n",
     "jemalloc"),
    ("7f40-7f50 r-xp 00000000 fe:01 45 /opt/gperftools/lib/libtcmalloc_minimal.so.4\n",
     "tcmalloc")])
def test_the_allocator_is_read_from_the_mapped_libraries(tmp_path, extra, want):
    maps = tmp_path / "maps"
    maps.write_text(LIBC_ONLY + extra)
    assert pyperf_io._allocator(str(maps)) == want


def test_an_unreadable_map_says_unknown(tmp_path):
    assert pyperf_io._allocator(str(tmp_path / "absent")) == "unknown"


def _recorded(env):
    code = ("from prefixbench.harness.pyperf_io import run_metadata; "
            "print(run_metadata('radix', None, 'codeact', {})['allocator'])")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_every_run_records_the_allocator_it_ran_on():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert _recorded(env) == "libc"
    if JEMALLOC is None:
        line = "needs Debian package libjemalloc2 (apt-get install -y libjemalloc2)"
        if os.environ.get("CI") == "true":
            pytest.fail(line + " - CI=true: this test must run in CI")
        pytest.skip(line)
    assert _recorded({**env, "LD_PRELOAD": JEMALLOC}) == "jemalloc"
