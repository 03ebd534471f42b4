"""Where a request's time goes: per-thread phase clocks (the SARP paper's Fig. 7).

Each thread has one clock with **exclusive** accounting: :func:`enter` pauses
the phase running now and starts the named one, :func:`leave` stops it and
resumes the one below.  Nested phases therefore never count twice - an engine
call made while routing counts as storage, not routing - and what no phase
claims is "the rest" (request latency minus every phase).

Phase names are free text; the built-in strategies use the names below.
Engine calls (:class:`prefixbench.engines.base.SegmentStore`'s get, get_many
and write) enter :data:`STORAGE` by themselves through :func:`enter_storage`,
which keeps the current phase instead when that is already a storage kind
(``spill``, ``fallback``): a strategy marks *why* it reads, the engine
measures *how long*.

Off by default: then every call below is one global test, so strategies may
call them on their hot paths (per window or per store call, never per block).
:func:`enable` is for the harness, between requests only (a thread that is
inside a phase when the switch flips simply finds an empty stack).
"""
from __future__ import annotations

import threading
import time

__all__ = ["STORAGE", "SPILL", "FALLBACK", "ROUTING", "HASHING", "VERIFY", "LOCK",
           "STORAGE_KINDS", "enable", "enabled", "enter", "enter_storage", "leave", "phase",
           "reset", "totals", "TimedLock"]

#: engine calls (reads and writes), attributed by the engine itself
STORAGE = "storage"
#: engine calls a capped tree makes to read back or write out spilled nodes
SPILL = "spill"
#: engine calls segment-hash makes after its first probe fell short (halved sizes)
FALLBACK = "fallback"
#: routing-directory / tree / table lookups and candidate selection
ROUTING = "routing"
#: computing keys, filters or fingerprints from the query's block IDs
HASHING = "hashing"
#: decoding records and verifying block IDs against the query
VERIFY = "verify"
#: waiting to acquire a strategy's lock
LOCK = "lock"
#: phases that are engine time (an engine call inside one of these keeps it)
STORAGE_KINDS = frozenset({STORAGE, SPILL, FALLBACK})

_ON = False
_now = time.perf_counter_ns


class _Clock(threading.local):
    def __init__(self):
        self.totals: dict[str, int] = {}
        self.stack: list = []          # [name, started_ns] per open phase


_clock = _Clock()


def enable(on: bool = True) -> None:
    """Turn every thread's clock on or off (harness only, between requests)."""
    global _ON
    _ON = bool(on)


def enabled() -> bool:
    return _ON


def enter(name: str) -> None:
    """Start phase ``name`` on this thread, pausing the one running now."""
    if not _ON:
        return
    c = _clock
    now = _now()
    st = c.stack
    if st:
        top = st[-1]
        c.totals[top[0]] = c.totals.get(top[0], 0) + now - top[1]
    st.append([name, now])


def enter_storage() -> None:
    """Start an engine call: :data:`STORAGE`, unless a storage kind is running."""
    if not _ON:
        return
    st = _clock.stack
    enter(st[-1][0] if st and st[-1][0] in STORAGE_KINDS else STORAGE)


def leave() -> None:
    """End this thread's current phase and resume the one below it."""
    if not _ON:
        return
    c = _clock
    st = c.stack
    if not st:
        return
    now = _now()
    name, started = st.pop()
    c.totals[name] = c.totals.get(name, 0) + now - started
    if st:
        st[-1][1] = now


class _Phase:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        enter(self.name)
        return self

    def __exit__(self, *exc):
        leave()
        return False


_PHASES: dict[str, _Phase] = {}


def phase(name: str) -> _Phase:
    """``with phase("routing"): ...`` - :func:`enter` and :func:`leave` as a block."""
    p = _PHASES.get(name)
    if p is None:
        p = _PHASES[name] = _Phase(name)
    return p


def reset() -> None:
    """Zero this thread's totals (the harness does it before each timed call)."""
    c = _clock
    c.totals = {}
    c.stack = []


def totals() -> dict[str, int]:
    """This thread's nanoseconds per phase since :func:`reset` (closed phases only)."""
    return dict(_clock.totals)


class TimedLock:
    """A lock whose waits count as :data:`LOCK` (context manager, like the lock)."""

    __slots__ = ("_lock",)

    def __init__(self, lock=None):
        self._lock = lock if lock is not None else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not _ON:
            return self._lock.acquire(blocking, timeout)
        enter(LOCK)
        try:
            return self._lock.acquire(blocking, timeout)
        finally:
            leave()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False
