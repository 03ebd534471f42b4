"""Shared pieces of the fuzz tests: how many inputs, a fixed seed, a time box per input.

The default run is short and repeatable (``derandomize``: the same inputs on
every machine).  ``PREFIXBENCH_FUZZ=1`` asks for the long run, 10**4 inputs
per target (``PREFIXBENCH_FUZZ=N`` for N); it is still seeded, so a failure it
finds reproduces with the same variable.
"""
from __future__ import annotations

import contextlib
import os
import signal

from hypothesis import HealthCheck, settings

#: inputs per target in the default (CI) run
DEFAULT_EXAMPLES = 150
#: an input that takes longer than this is a hang (generous: 2 shared CPUs)
TIME_BOX_S = 20.0


def fuzz_examples(default: int = DEFAULT_EXAMPLES) -> int:
    v = os.environ.get("PREFIXBENCH_FUZZ", "").strip()
    if not v or v == "0":
        return default
    return 10_000 if v == "1" else max(1, int(v))


def fuzz_settings(default: int = DEFAULT_EXAMPLES):
    return settings(max_examples=fuzz_examples(default), derandomize=True, deadline=None,
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


class Hang(BaseException):
    """Raised in the main thread when one input overruns :data:`TIME_BOX_S`."""


@contextlib.contextmanager
def time_box(seconds: float = TIME_BOX_S):
    """Interrupt the body with :class:`Hang` after ``seconds`` (SIGALRM, main thread)."""
    def on_alarm(signum, frame):
        raise Hang(f"input still running after {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def one_line(e: BaseException) -> str:
    """The error's text, checked to be a single non-empty line."""
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, repr(msg)
    return msg


_COUNTS: dict = {}


def counted(target: str) -> None:
    """Count one input of ``target``; the long run (``-s``) prints a line every 1,000."""
    n = _COUNTS[target] = _COUNTS.get(target, 0) + 1
    if os.environ.get("PREFIXBENCH_FUZZ") and n % 1000 == 0:
        import sys
        print(f"fuzz: {target}: {n} inputs", file=sys.stderr, flush=True)
