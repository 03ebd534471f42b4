"""Deterministic kill points for ``crashtest --kill-at`` and the ``--matrix`` run.

A random kill rarely lands inside the few microseconds where durability is
at stake.  A kill point makes the replaying child SIGKILL itself at the N-th
time it reaches one such window:

``snapshot:temp-written``, ``snapshot:temp-fsynced``, ``snapshot:previous-kept``,
``snapshot:renamed``, ``snapshot:dir-fsynced``
    between the steps of snapshot publication (write the temp file, fsync it,
    keep the previous generation, rename over the current one, fsync the
    directory), through :data:`prefixbench.snapshot.FAULT_HOOK`.  Every strategy.
``backfill:before-publish``, ``backfill:after-publish``
    ``sarp``: a back-fill job computed but not yet visible, and visible but its
    follow-up triggers not yet scheduled.
``packfile:reuse``, ``packfile:clean-before-commit``, ``packfile:clean-after-commit``
    the ``packfile`` engine reusing space: an emptied pack handed out again
    (its freeing frames flushed, nothing written into it yet), and a cleaning
    pass with its live records copied but the relocation not yet committed,
    and committed but not yet applied in memory.  Crash runs on packfile use
    64 KiB packs so that cleaning and reuse happen within a short replay.

``--kill-at POINT`` kills at an occurrence drawn from the seed (1 to
:data:`MAX_NTH` of that point); ``POINT:N`` at the N-th.  A point that is not
reached before ``--max-kill-ms`` after the child is ready falls back to a
random kill at that time and is reported as not reached, so every iteration is
still a kill point and the counts say which ones were deterministic.

``--matrix`` runs every durable engine (registered, not volatile, opening
here: a server engine without a server is skipped with one line) times every
strategy that runs on it.  Each cell's iterations cycle through a random kill
and every kill point that applies to it, so each point is hit in turn (one
``--kill-at POINT`` alone kills only there, which is how a failing iteration is
reproduced: ``--kill-at POINT:N --seed S --iterations 1``); sarp
gets ``--sarp-iterations`` (default 200 in a matrix), every other strategy
``--iterations`` (default 30 in a matrix).
"""
from __future__ import annotations

import os
import random
import signal
import sys
import tempfile

from prefixbench.errors import ConfigError, PrefixbenchError

SNAPSHOT_STEPS = ("temp-written", "temp-fsynced", "previous-kept", "renamed", "dir-fsynced")
BACKFILL_POINTS = ("before-publish", "after-publish")
PACKFILE_POINTS = ("reuse", "clean-before-commit", "clean-after-commit")
KILL_POINTS = tuple([f"snapshot:{s}" for s in SNAPSHOT_STEPS]
                    + [f"backfill:{s}" for s in BACKFILL_POINTS]
                    + [f"packfile:{s}" for s in PACKFILE_POINTS])
#: a drawn occurrence is at most this (snapshots come every ``snapshot_every`` requests)
MAX_NTH = {"snapshot": 3, "backfill": 20, "packfile": 4}
#: engine options of crash runs: small packs, so space is reused within seconds
CRASH_ENGINE_OPTIONS = {"packfile": {"pack_bytes": 64 << 10}}
RANDOM = "random"
#: iterations per cell of a matrix unless given
MATRIX_ITERATIONS = 30
MATRIX_SARP_ITERATIONS = 200


def parse_kill_at(values) -> list[tuple[str, int | None]]:
    """``['snapshot:renamed', 'backfill:after-publish:3', 'all']`` -> ``[(point, nth)]``."""
    out = []
    for v in values or ():
        v = str(v).strip()
        if v == "all":
            out += [(p, None) for p in KILL_POINTS]
            continue
        point, nth = v, None
        head, sep, tail = v.rpartition(":")
        if sep and tail.isdigit() and head in KILL_POINTS:
            point, nth = head, int(tail)
            if nth < 1:
                raise ConfigError(f"option --kill-at: {v!r}: the occurrence must be >= 1")
        if point not in KILL_POINTS:
            raise ConfigError(f"option --kill-at: {v!r} is not a kill point (points: "
                              f"{', '.join(KILL_POINTS)}, all; POINT:N for the N-th time)")
        out.append((point, nth))
    return out


def applies(point: str, strategy: str, engine: str) -> bool:
    kind = point.split(":", 1)[0]
    if kind == "backfill":
        return strategy == "sarp"
    if kind == "packfile":
        return engine == "packfile"
    return kind == "snapshot"


def point_for(kill_at, strategy: str, engine: str, k: int, seed: int):
    """Iteration ``k``'s ``(point, nth)``: cycling through random and the points that
    apply; the occurrence drawn from the seed where none was given."""
    cycle = [(p, n) for p, n in kill_at if applies(p, strategy, engine)]
    if not cycle:                # none asked for, or none applies to this cell
        return RANDOM, None
    if len(kill_at) > 1:         # a list of points: random kills take their turn too
        cycle.append((RANDOM, None))
    point, nth = cycle[k % len(cycle)]
    if point != RANDOM and nth is None:
        nth = random.Random(f"{point}/{strategy}/{engine}/{seed}").randint(
            1, MAX_NTH[point.split(":", 1)[0]])
    return point, nth


# --------------------------------------------------------------------- in the child
def _die(marker: str, point: str, nth: int) -> None:
    """Leave a note for the parent, then SIGKILL this process (no cleanup runs)."""
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, f"{point}:{nth}\n".encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def arm(cfg: dict, strat, store) -> None:
    """Install the kill point of ``cfg`` (``kill_at`` = [point, nth]) in this process."""
    point, nth = (cfg.get("kill_at") or [RANDOM, None])
    if point == RANDOM:
        return
    marker = cfg["kill_marker"]
    seen = [0]

    def reached():
        seen[0] += 1
        if seen[0] == nth:
            _die(marker, point, nth)

    kind, step = point.split(":", 1)
    if kind == "snapshot":
        from prefixbench import snapshot

        def hook(name, path):
            if name == step:
                reached()
        snapshot.FAULT_HOOK = hook
    elif kind == "backfill":
        original = strat._publish

        def publish(job, result):
            if step == "before-publish":
                reached()
            original(job, result)
            if step == "after-publish":
                reached()
        strat._publish = publish
    elif kind == "packfile":
        _arm_packfile(store, step, reached)


def _arm_packfile(store, step: str, reached) -> None:
    if store is None or not all(hasattr(store, a) for a in ("_alloc", "_clean", "_commit",
                                                             "_apply", "_packs")):
        raise ConfigError("kill point packfile:*: the store is not a packfile store")
    cleaning = [False]
    alloc, clean, commit, apply = store._alloc, store._clean, store._commit, store._apply

    def _alloc(need, pinned, relocating, exclude):
        empty = {pk.no for pk in store._packs if not pk.live_records and pk.ptr > store.block}
        pk = alloc(need, pinned, relocating, exclude)
        if step == "reuse" and pk.no in empty and pk.ptr == store.block:
            reached()
        return pk

    def _clean(pinned, need, spare):
        cleaning[0] = True
        try:
            return clean(pinned, need, spare)
        finally:
            cleaning[0] = False

    def _commit(placed, deletes, touched):
        if cleaning[0] and step == "clean-before-commit":
            reached()
        return commit(placed, deletes, touched)

    def _apply(placed, deletes):
        if cleaning[0] and step == "clean-after-commit":
            reached()
        return apply(placed, deletes)

    store._alloc, store._clean, store._commit, store._apply = _alloc, _clean, _commit, _apply


def read_marker(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


# --------------------------------------------------------------------- the matrix
def durable_engines(only=(), notify=None) -> list[str]:
    """Registered engines that survive a kill and open here (``only``: restrict to these)."""
    from prefixbench.harness.build import open_engine
    from prefixbench.registry import get_registry
    reg = get_registry()
    out = []
    for name in only or reg.names("engine"):
        info = reg.get("engine", name)
        if getattr(info.factory, "volatile", False):
            if only:
                raise ConfigError(f"option --engine: {name} is volatile (nothing survives a "
                                  "kill); use a persistent engine")
            continue
        with tempfile.TemporaryDirectory(prefix="prefixbench-probe-") as d:
            try:
                open_engine(name, os.path.join(d, "s"), durability="sync",
                            options=CRASH_ENGINE_OPTIONS.get(name)).close()
            except (PrefixbenchError, OSError, ImportError) as e:
                if only:
                    raise
                if notify:
                    notify(f"crashtest: skipping engine {name}: {str(e).splitlines()[0]}")
                continue
        out.append(name)
    return out


def runnable_strategies(engines, only=(), notify=None) -> dict[str, list[str]]:
    """engine -> strategies that construct on it (a strategy needing another engine
    kind, e.g. a server-only one, is skipped with one line)."""
    from prefixbench.harness.build import open_engine
    from prefixbench.registry import get_registry
    reg = get_registry()
    names = list(only) or reg.names("strategy")
    out = {}
    for engine in engines:
        ok = []
        for s in names:
            cls = reg.get("strategy", s).factory
            if not cls.needs_store:
                ok.append(s)
                continue
            with tempfile.TemporaryDirectory(prefix="prefixbench-probe-") as d:
                try:
                    store = open_engine(engine, os.path.join(d, "s"), durability="sync",
                                        options=CRASH_ENGINE_OPTIONS.get(engine))
                    from prefixbench.harness.crashtest import CRASH_OPTIONS
                    cls(store, CRASH_OPTIONS.get(s, {})).close()
                except PrefixbenchError as e:
                    if only:
                        raise
                    if notify:
                        notify(f"crashtest: skipping {s} on {engine}: {str(e).splitlines()[0]}")
                    continue
            ok.append(s)
        out[engine] = ok
    return out


def matrix_cells(engines=(), strategies=(), notify=None) -> list[tuple[str, list[str]]]:
    """The matrix as ``[(engine, strategies)]``.  A strategy that keeps no index in an
    engine (radix, dram-blockhash, ...) is the same on every engine: it runs once, in
    the first engine's row."""
    from prefixbench.registry import get_registry
    reg = get_registry()
    notify = notify or (lambda line: print(line, file=sys.stderr))
    engs = durable_engines(engines, notify)
    per = runnable_strategies(engs, strategies, notify)
    out, done = [], set()
    for e in engs:
        row = []
        for s in per[e]:
            if not reg.get("strategy", s).factory.needs_store:
                if s in done:
                    continue
                done.add(s)
            row.append(s)
        out.append((e, row))
    return out


def kill_point_lines(summary: list[dict]) -> list[str]:
    """One line per row: its kill points, random and deterministic, and how many of the
    deterministic ones were reached (the rest fell back to a random kill)."""
    out = []
    for r in summary:
        tried = r.get("kill_at_tried", 0)
        det = (f", {tried} at --kill-at points ({r.get('kill_at_reached', 0)} reached)"
               if tried else "")
        out.append(f"kill points: {r['strategy']} on {r['engine']}: {r['iterations']} "
                   f"({r['iterations'] - tried} random{det}), {r['killed']} killed, "
                   f"{r['lost']} lost, {r['false']} false")
    return out
