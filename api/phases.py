"""Where a request's time goes: per-thread phase clocks (the SARP paper's Fig. 7).

Each thread has one clock with **exclusive** accounting: :func:`enter` pauses
the phase running now and starts the named one, :func:`leave` stops it and
resumes the one below.  Nested phases therefore never count twice - an engine
call made while routing counts as storage, not routing - and what no phase
claims is "the rest" (request latency minus every phase; :data:`REST` is
reserved for it).

Phase names are free text; the built-in strategies use the names below.
Engine calls (:class:`prefixbench.engines.base.SegmentStore`'s get, get_many,
write, sync and scans) time themselves as :data:`STORAGE` through
:func:`storage_call`, which keeps the current phase instead when that is
already a storage kind (``spill``, ``fallback``, ``backfill``): a strategy marks *why*
it reads, the engine measures *how long*.  :func:`enter_storage` is the same
rule as an enter for code that wraps engine work of its own.

Off by default: then every call below is one global test, so strategies may
call them on their hot paths (per window or per store call, never per block).
Code that makes several calls in a row may test the module global ``_ON``
itself first (``if phases._ON: ...``).  :func:`enable` is for the harness,
between requests only (a thread that is inside a phase when the switch flips
simply finds an empty stack, and :func:`reset` clears what is left).

Every :func:`enter` (and every lock wait) counts one *switch*
(:func:`switches`); :func:`calibrate` measures what one enter/leave pair
costs, so a harness can state the clock's own overhead per request as
switches times that cost.  :class:`TimedLock` first tries the lock without
waiting: an uncontended acquire costs no clock call and no switch.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

__all__ = ["STORAGE", "SPILL", "FALLBACK", "BACKFILL", "ROUTING", "HASHING", "VERIFY", "ENCODE",
           "LOCK", "REST", "ORDER", "STORAGE_KINDS", "enable", "enabled", "enter", "enter_storage",
           "leave", "phase", "reset", "storage_call", "timed_call", "totals", "switches", "calibrate",
           "ordered", "TimedLock"]

#: engine calls (reads and writes), attributed by the engine itself
STORAGE = "storage"
#: engine calls a capped tree makes to read back or write out spilled nodes
SPILL = "spill"
#: engine calls segment-hash makes after its first probe fell short (halved sizes)
FALLBACK = "fallback"
#: engine calls SARP's back-fill jobs make (reading a routing entry's segments to
#: build the postings of the point after it) inside the insert that triggered them
BACKFILL = "backfill"
#: routing-directory / tree / table lookups and candidate selection
ROUTING = "routing"
#: computing keys, filters or fingerprints from the query's block IDs
HASHING = "hashing"
#: decoding records and verifying block IDs against the query
VERIFY = "verify"
#: building the records an insert writes (the inverse of decoding)
ENCODE = "encode"
#: waiting to acquire a strategy's lock
LOCK = "lock"
#: latency no phase claimed (computed by the harness, never entered)
REST = "rest"
#: phases that are engine time (an engine call inside one of these keeps it)
STORAGE_KINDS = frozenset({STORAGE, SPILL, FALLBACK, BACKFILL})
#: the order tables and exports list phases in (others follow by name, rest last)
ORDER = (STORAGE, SPILL, FALLBACK, BACKFILL, ROUTING, HASHING, VERIFY, ENCODE, LOCK)

_ON = False
_now = time.perf_counter_ns


class _State:
    __slots__ = ("stack", "totals", "since", "n")

    def __init__(self):
        self.stack: list = []                 # names of the open phases, innermost last
        self.totals = defaultdict(int)        # closed time per phase, ns
        self.since = 0                        # when the innermost phase last (re)started
        self.n = 0                            # enters since the last reset


class _Clock(threading.local):
    def __init__(self):
        self.s = _State()


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
    s = _clock.s
    now = _now()
    st = s.stack
    if st:
        s.totals[st[-1]] += now - s.since
    s.since = now
    s.n += 1
    st.append(name)


def enter_storage() -> None:
    """Start an engine call: :data:`STORAGE`, unless a storage kind is running."""
    if not _ON:
        return
    s = _clock.s
    now = _now()
    st = s.stack
    if st:
        top = st[-1]
        s.totals[top] += now - s.since
        st.append(top if top in STORAGE_KINDS else STORAGE)
    else:
        st.append(STORAGE)
    s.since = now
    s.n += 1


def storage_call(fn, *args):
    """``fn(*args)`` timed as an engine call: :func:`enter_storage`, the call and
    :func:`leave` in one function (the engines' path; cheaper than the pair).
    Inside a storage kind it just calls ``fn``: the time lands in that phase
    either way, so a strategy that marks a loop of engine calls as one storage
    kind pays one switch for the loop, not one per call.  The caller tests
    ``_ON`` first."""
    s = _clock.s
    st = s.stack
    if st:
        top = st[-1]
        if top in STORAGE_KINDS:
            return fn(*args)
        now = _now()
        s.totals[top] += now - s.since
    else:
        now = _now()
    s.n += 1
    try:
        return fn(*args)
    finally:
        end = _now()
        s.totals[STORAGE] += end - now
        s.since = end


def timed_call(name: str, fn, *args):
    """``fn(*args)`` as phase ``name``: :func:`enter`, the call and :func:`leave` in
    one line, for a strategy whose whole call is one phase."""
    if not _ON:
        return fn(*args)
    enter(name)
    try:
        return fn(*args)
    finally:
        leave()


def leave() -> None:
    """End this thread's current phase and resume the one below it."""
    if not _ON:
        return
    s = _clock.s
    st = s.stack
    if st:
        now = _now()
        s.totals[st.pop()] += now - s.since
        s.since = now


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
    """Zero this thread's totals and switch count (the harness does it before each
    timed call)."""
    _clock.s = _State()


def totals() -> dict[str, int]:
    """This thread's nanoseconds per phase since :func:`reset` (closed phases only)."""
    return dict(_clock.s.totals)


def switches() -> int:
    """Phases entered (lock waits included) on this thread since :func:`reset`."""
    return _clock.s.n


def calibrate(pairs: int = 2000, rounds: int = 5) -> float:
    """Nanoseconds one enter/leave pair costs on this thread, nested in an open
    phase (the usual case: an engine call inside routing); the median of
    ``rounds`` loops of ``pairs`` pairs, loop overhead included (so it errs high,
    and higher still for engine calls, which take the cheaper :func:`storage_call`).
    Leaves the clock reset and in the state it found ``enabled``."""
    global _ON
    if pairs < 1 or rounds < 1:
        raise ValueError(f"calibrate: pairs={pairs} and rounds={rounds} must both be >= 1")
    was = _ON
    _ON = True
    samples = []
    try:
        for _ in range(rounds):
            reset()
            enter(ROUTING)
            t0 = _now()
            for _ in range(pairs):
                enter_storage()
                leave()
            samples.append((_now() - t0) / pairs)
            leave()
    finally:
        _ON = was
        reset()
    samples.sort()
    return float(samples[len(samples) // 2])


def ordered(names) -> list[str]:
    """``names`` in :data:`ORDER`, other phases after them by name, :data:`REST` last."""
    names = set(names)
    head = [n for n in ORDER if n in names]
    tail = sorted(n for n in names if n not in ORDER and n != REST)
    return head + tail + ([REST] if REST in names else [])


class TimedLock:
    """A lock whose waits count as :data:`LOCK` (context manager, like the lock).

    An acquire that does not have to wait records nothing."""

    __slots__ = ("_lock",)

    def __init__(self, lock=None):
        self._lock = lock if lock is not None else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not _ON or not blocking:
            return self._lock.acquire(blocking, timeout)
        if self._lock.acquire(False):
            return True
        enter(LOCK)
        try:
            return self._lock.acquire(True, timeout)
        finally:
            leave()

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def guard(self):
        """What a ``with`` block takes: this lock while the clocks run, so its waits
        count, else the plain lock, whose own context manager costs less on a hot path."""
        return self if _ON else self._lock

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False
