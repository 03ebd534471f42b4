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


def need_redis() -> None:
    if shutil.which("redis-server") and shutil.which("redis-cli"):
        return
    if os.environ.get("CI") == "true":
        pytest.fail(PACKAGE_LINE + " - CI=true: these tests must run in CI")
    pytest.skip(PACKAGE_LINE)
    pytest.importorskip("redis")


def start(kind: str, work_dir, **kw) -> servers.Server:
    """A server of ``kind`` on free ports under ``work_dir`` (stop it with ``.stop()``)."""
    need_redis()
    pytest.importorskip("redis")
    span = 1 if kind == "redis" else kw.get("masters", 3) * (1 + kw.get("replicas", 1))
    last = None
    for _ in range(3):                     # a port taken between the check and the bind
        try:
            return servers.up(kind, str(work_dir), port=servers.free_port(span=span), **kw)
        except Exception as e:     # noqa: BLE001 - retried on other ports, then raised
            last = e
            shutil.rmtree(work_dir, ignore_errors=True)
    raise last


@pytest.fixture(scope="session")
def redis_always(tmp_path_factory):
    """A redis-server with appendfsync always: every durability mode's promise holds."""
    s = start("redis", tmp_path_factory.mktemp("redis-always"), appendfsync="always")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster_always(tmp_path_factory):
    """3 masters + 1 replica each, appendfsync always."""
    s = start("redis-cluster", tmp_path_factory.mktemp("cluster-always"), appendfsync="always",
              masters=3, replicas=1)
    yield s
    s.stop()
