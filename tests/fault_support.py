"""Shared pieces of the fault-injection, corruption and format tests."""
from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from contextlib import contextmanager

#: ``PREFIXBENCH_LONG=1``: every case of every loop, on the disk
LONG = os.environ.get("PREFIXBENCH_LONG") == "1"
SHM = "/dev/shm/"


@contextmanager
def scratch_dir(fallback):
    """A directory for loops that rewrite or fsync small files thousands of times:
    tmpfs (``/dev/shm``) by default, where that is free; ``fallback`` (the test's
    ``tmp_path``, on disk) under ``PREFIXBENCH_LONG=1`` or without ``/dev/shm``."""
    if LONG or not os.path.isdir(SHM) or not os.access(SHM, os.W_OK):
        yield pathlib.Path(fallback)
        return
    d = tempfile.mkdtemp(prefix="pb-faults-", dir=SHM)
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def one_line(msg: str, *needles) -> None:
    """``msg`` is a single line holding every needle (a path, a reason)."""
    assert "\n" not in msg, msg
    for n in needles:
        assert os.fspath(n) in msg, (n, msg)
