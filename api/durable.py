"""Small file primitives for durable publication, shared by snapshots and engines.

Every write, fsync and rename goes through :mod:`prefixbench.faults` (the
``"durable"`` component).  A failure raises :class:`DurableWriteError`, one
line naming the path and the error, after removing the half-written temp
file, so the file being replaced is untouched and nothing stale is left.
"""
from __future__ import annotations

import os

from prefixbench import faults
from prefixbench.errors import PrefixbenchError


class DurableWriteError(PrefixbenchError, OSError):
    """A durable write, fsync or rename failed (disk full, I/O error)."""


def _fail(what: str, path, e: OSError) -> DurableWriteError:
    err = DurableWriteError(f"{what} {os.fspath(path)} failed: {e.strerror or e}")
    err.errno = e.errno
    return err


def fsync_dir(directory: str, component: str = "durable") -> None:
    """Make a rename or a new file in ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            faults.fsync(fd, directory, component)
        finally:
            os.close(fd)
    except DurableWriteError:
        raise
    except OSError as e:
        raise _fail("fsync of directory", directory, e) from None


def write_file(path: str, data, component: str = "durable") -> None:
    """Write all of ``data`` to ``path`` (replacing it) and fsync the file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            faults.write_all(fd, data, path, component)
            faults.fsync(fd, path, component)
        finally:
            os.close(fd)
    except OSError as e:
        raise _fail("write of", path, e) from None


def publish_file(path: str, data, component: str = "durable") -> None:
    """Replace ``path`` atomically: write a temp file, fsync, rename, fsync the directory.

    A reader sees the old complete file or the new one, never a mix.
    """
    tmp = path + ".tmp"
    try:
        write_file(tmp, data, component)
        try:
            faults.replace(tmp, path, component)
        except OSError as e:
            raise _fail("rename onto", path, e) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)), component)
