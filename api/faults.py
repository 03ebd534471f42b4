"""The one seam between prefixbench's own durable files and the operating system,
so a test can make the device fail at an exact call.

Every byte prefixbench writes itself goes through the functions here: the
durable-write helpers (:mod:`prefixbench.durable`), the snapshot writer and the
insert log (:mod:`prefixbench.snapshot`), and the packfile engine's pack reads
and writes, key log and checkpoint.  Each call names its *component*
(``"durable"``, ``"snapshot"``, ``"insert-log"``, ``"packfile"``) and its
*operation* (``"write"``, ``"pwrite"``, ``"pread"``, ``"fsync"``, ``"rename"``),
and passes the path it touches, so an injected error carries the path the way
a real one does.

Unarmed (always, outside tests) a call costs one global read before the
``os`` call.  A test arms one :class:`Plan` at a time::

    with faults.inject("ENOSPC", at=3, component="snapshot") as plan:
        ...                       # the 3rd matching call raises ENOSPC
    plan.calls, plan.fired

Kinds, all firing once at the ``at``-th matching call (1-based):

* ``"ENOSPC"``, ``"EIO"``: the call raises :class:`OSError` with that errno and
  the path, touching nothing;
* ``"short"``: a write writes the first half of its bytes (rounded down to the
  call's alignment, so O_DIRECT writes stay aligned) and returns that count;
  the next matching write raises ENOSPC - a device that fills up mid-write,
  the way short writes happen in practice.  A read returns half its bytes and
  leaves the rest of the buffer as it was.  Renames and fsyncs have no short
  form: a short fault there raises EIO.

``at=0`` never fires: run the work once under :func:`count` to learn how many
fault points it has, then try each one.  Which calls match is decided by
``component``, ``ops`` and ``path`` (a substring of the path; None: any).
"""
from __future__ import annotations

import errno
import os
import threading
from contextlib import contextmanager

__all__ = ["Plan", "inject", "count", "write", "write_all", "pwritev", "preadv", "fsync",
           "fdatasync", "replace", "link", "KINDS", "COMPONENTS"]

KINDS = ("ENOSPC", "EIO", "short")
COMPONENTS = ("durable", "snapshot", "insert-log", "packfile")
_WRITES = ("write", "pwrite")
_active = None
_lock = threading.Lock()


class Plan:
    """One armed fault: what to match, when to fire, and what happened."""

    def __init__(self, kind: str, at: int, component=None, ops=None, path=None):
        if kind not in KINDS:
            raise ValueError(f"fault kind {kind!r}: expected one of {', '.join(KINDS)}")
        self.kind, self.at = kind, int(at)
        self.components = None if component is None else (
            {component} if isinstance(component, str) else set(component))
        self.ops = None if ops is None else ({ops} if isinstance(ops, str) else set(ops))
        self.path = path
        self.calls = 0
        #: under :func:`count`: ``(component, op, path)`` of every matching call
        self.trace = [] if self.at == 0 else None
        self.fired = False
        #: ``(component, op, path)`` of the call the fault hit
        self.hit = None
        self._full = False              # after a short write: the device is full

    def _decide(self, component, op, path):
        """None (proceed), an OSError to raise, or "short"."""
        if self.components is not None and component not in self.components:
            return None
        if self.ops is not None and op not in self.ops:
            return None
        if self.path is not None and self.path not in path:
            return None
        with _lock:
            self.calls += 1
            if self.trace is not None:
                self.trace.append((component, op, path))
            if self._full and op in _WRITES:
                self._full = False
                return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            if self.fired or self.calls != self.at:
                return None
            self.fired, self.hit = True, (component, op, path)
        if self.kind == "short" and op in _WRITES + ("pread",):
            self._full = op in _WRITES
            return "short"
        code = errno.ENOSPC if self.kind == "ENOSPC" else errno.EIO
        return OSError(code, os.strerror(code), path)


@contextmanager
def inject(kind: str, at: int, component=None, ops=None, path=None):
    """Arm a fault for the duration of the ``with`` block; yields the :class:`Plan`."""
    global _active
    plan = Plan(kind, at, component, ops, path)
    prev, _active = _active, plan
    try:
        yield plan
    finally:
        _active = prev


def count(component=None, ops=None, path=None):
    """A plan that never fires: ``plan.calls`` counts the fault points of a run."""
    return inject("EIO", 0, component, ops, path)


def _check(component, op, path):
    plan = _active
    if plan is None:
        return None
    r = plan._decide(component, op, os.fspath(path))
    if isinstance(r, OSError):
        raise r
    return r


def _half(n: int, align: int) -> int:
    return (n // 2) // align * align


def write(fd: int, data, path, component: str) -> int:
    """One ``os.write``; may write fewer bytes than given, as the real call may."""
    if _check(component, "write", path) == "short":
        with memoryview(data) as v, v.cast("B") as view, view[:_half(len(view), 1)] as part:
            return os.write(fd, part) if len(part) else 0
    return os.write(fd, data)


def write_all(fd: int, data, path, component: str) -> None:
    """Write every byte of ``data`` (retrying short writes); a write that makes no
    progress is ENOSPC, as the kernel reports a full device on the next call."""
    with memoryview(data) as v, v.cast("B") as view:
        done, total = 0, len(view)
        while done < total:
            with view[done:] as rest:
                n = write(fd, rest, path, component)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))
            done += n


def pwritev(fd: int, buffers, offset: int, path, component: str, align: int = 1) -> int:
    """``os.pwritev``; a short fault writes half of the first buffer, ``align``-rounded."""
    if _check(component, "pwrite", path) == "short":
        with memoryview(buffers[0]) as v, v.cast("B") as first, \
                first[:_half(len(first), align)] as part:
            return os.pwritev(fd, [part], offset) if len(part) else 0
    return os.pwritev(fd, buffers, offset)


def preadv(fd: int, buffers, offset: int, path, component: str, align: int = 1) -> int:
    """``os.preadv``; a short fault fills only half of the first buffer, ``align``-rounded."""
    if _check(component, "pread", path) == "short":
        with memoryview(buffers[0]) as v, v.cast("B") as first, \
                first[:_half(len(first), align)] as part:
            return os.preadv(fd, [part], offset) if len(part) else 0
    return os.preadv(fd, buffers, offset)


def _no_short(component, op, path):
    if _check(component, op, path) == "short":       # pragma: no cover - see _decide
        raise OSError(errno.EIO, os.strerror(errno.EIO), os.fspath(path))


def fsync(fd: int, path, component: str) -> None:
    _no_short(component, "fsync", path)
    os.fsync(fd)


def fdatasync(fd: int, path, component: str) -> None:
    _no_short(component, "fsync", path)
    os.fdatasync(fd)


def replace(src, dst, component: str) -> None:
    _no_short(component, "rename", dst)
    os.replace(src, dst)


def link(src, dst, component: str) -> None:
    _no_short(component, "rename", dst)
    os.link(src, dst)
