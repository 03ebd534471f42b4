"""Local redis-server processes for the redis engine tests: free ports, temporary dirs.

Without a ``redis-server`` binary the tests skip with one line naming the
Debian package; under ``CI=true`` that is a failure instead, because CI
installs it and must prove these tests ran.
"""
from __future__ import annotations

import atexit
import os
import shutil

import pytest

from prefixbench.harness import servers

def _stop_leftovers() -> None:
    """A test process never leaves a server behind, whatever ended it."""
    for pid in list(servers._CHILDREN):
        servers.stop_pid(pid, timeout=10)


atexit.register(_stop_leftovers)

PACKAGE_LINE = "redis-server not installed: apt-get install redis-server (Debian package redis-server)"
PY_LINE = "redis-py not installed: pip install 'prefixbench[redis]'"


def _missing(line: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(line + " - CI=true: these tests must run in CI")
    pytest.skip(line)


def need_redis() -> None:
    """Skip (fail under CI=true) without redis-server, redis-cli or redis-py."""
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        _missing(PACKAGE_LINE)
    try:
        import redis  # noqa: F401
    except ImportError:
        _missing(PY_LINE)


def start(kind: str, work_dir, **kw) -> servers.Server:
    """A server of ``kind`` on free ports under ``work_dir`` (stop it with ``.stop()``)."""
    need_redis()
    span = 1 if kind == "redis" else kw.get("masters", 3) * (1 + kw.get("replicas", 1))
    last = None
    for _ in range(3):                     # a port taken between the check and the bind
        try:
            return servers.up(kind, str(work_dir), port=servers.free_port(span=span), **kw)
        except Exception as e:     # noqa: BLE001 - retried on other ports, then raised
            last = e
            shutil.rmtree(work_dir, ignore_errors=True)
    raise last


_SHARED: dict = {}


def _shared(name: str, tmp_path_factory, kind: str, **kw) -> servers.Server:
    """One server per test process, however many modules import the fixture (each import
    is a fixture of its own); stopped when the process exits."""
    s = _SHARED.get(name)
    if s is None or not all(s.alive()):
        s = _SHARED[name] = start(kind, tmp_path_factory.mktemp(name), **kw)
    return s


@pytest.fixture(scope="session")
def redis_always(tmp_path_factory):
    """A redis-server with appendfsync always: every durability mode's promise holds."""
    return _shared("redis-always", tmp_path_factory, "redis", appendfsync="always")


@pytest.fixture(scope="session")
def cluster_always(tmp_path_factory):
    """3 masters + 1 replica each, appendfsync always."""
    return _shared("cluster-always", tmp_path_factory, "redis-cluster", appendfsync="always",
                   masters=3, replicas=1)
