"""Small file primitives for durable publication, shared by snapshots and engines."""
from __future__ import annotations

import os


def fsync_dir(directory: str) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data) -> None:
    """Write all of ``data`` to ``path`` (replacing it) and fsync the file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_file(path: str, data) -> None:
    """Replace ``path`` atomically: write a temp file, fsync, rename, fsync the directory.

    A reader sees the old complete file or the new one, never a mix.
    """
    tmp = path + ".tmp"
    write_file(tmp, data)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
