"""The SARP paper's cap rule for ``segment-radix-capped`` (section 6.2).

The paper caps Segment-Radix by spilling tree nodes to the store, "reducing
its recovery time to 0.96-1.96 times that of SARP".  :func:`choose_cap` does
the same here, as a library call the sweeps make:

1. build ``sarp`` to ``entries`` unique blocks with ``recover``'s replicated
   build and time ``recoveries`` fresh-process recoveries of it; the figure is
   *index recovery* (load + init + deserialize + rebuild, what ``recover``
   reports as ``recovery-index``), and the reference is their median;
2. search the in-memory share of the tree, ``cap_fraction`` of
   ``segment-radix-capped`` (budget ``max(1, ceil(f * nodes))``), by bisection
   on a log scale between 1e-4 and 1: build and recover the capped tree the
   same way at a guess inside the bracket (interpolated towards the band's
   geometric middle from the points measured so far, else the midpoint; see
   :func:`_next_log_fraction`), keep the part whose ratio (capped median / sarp
   median) can still reach the band, until a median ratio lands in the band.

Decisions where the issue is silent:

* The search measures at most ``max_steps`` fractions and also stops when the
  next fraction would give a node budget already measured (a small tree has
  few distinct budgets).  A search that cannot reach the band returns the
  measured fraction whose ratio is closest to it (distance on a log scale),
  with ``in_band`` False; it never loops further.
* Below 10**7 entries or 5 recoveries the comparison is not the paper's (sarp's
  index recovery at 2.2M entries is 10-14 ms and noisy), so both are refused
  with one :class:`ConfigError` line naming ``--cap-entries`` /
  ``--cap-recoveries`` unless the caller passes ``allow_small=True`` (tests and
  quick looks).  A volatile engine is refused: nothing survives for the fresh
  recovery process.
* ``strategy_options`` maps a strategy name to its options, as the sweeps keep
  them (``{"sarp": {...}, "segment-radix-capped": {"S": 64}}``); the search
  sets ``cap_fraction`` on top of the capped tree's options.
* Every build runs in its own scratch directory (under ``work_dir`` when
  given), removed when its recoveries are timed.
* The JSON cache (:func:`load_choice`, :func:`save_choice`) keys a choice by
  workload, workload options, engine, entries, band and the engine and
  strategy options; recoveries and cache size are not part of the key (more
  recoveries refine the same choice).  An unreadable cache file is one
  ConfigError line naming it and is never overwritten.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field

from prefixbench.errors import ConfigError

__all__ = ["CapChoice", "choose_cap", "load_choice", "save_choice", "choice_key", "BAND",
           "PAPER_ENTRIES", "PAPER_RECOVERIES", "MIN_FRACTION"]

#: the paper's band for capped recovery time / SARP's
BAND = (0.96, 1.96)
#: the smallest build the paper's comparison is made at (issue: >= 1e7 entries)
PAPER_ENTRIES = 10 ** 7
#: fewest fresh-process recoveries per strategy whose median the rule uses
PAPER_RECOVERIES = 5
#: the lower end of the fraction search (the upper end is 1: the whole tree)
MIN_FRACTION = 1e-4
CAPPED = "segment-radix-capped"
REFERENCE = "sarp"
_CACHE_VERSION = 1


@dataclass
class CapChoice:
    """The chosen cap and the recoveries that chose it."""

    fraction: float
    nodes: int                      # resident node budget at the end of the build
    total_nodes: int                # the tree's node count
    sarp_s: list                    # every sarp index recovery, seconds
    capped_s: list                  # every capped index recovery at ``fraction``, seconds
    sarp_median: float
    capped_median: float
    ratio: float                    # capped_median / sarp_median
    in_band: bool
    entries: int
    workload: str
    engine: str
    steps: list                     # (fraction, capped median, ratio) per measured step
    workload_options: dict = field(default_factory=dict)
    band: tuple = BAND
    engine_options: dict = field(default_factory=dict)
    strategy_options: dict = field(default_factory=dict)

    def line(self) -> str:
        """``cap rule: fraction F (N of T nodes), sarp A s, segment-radix-capped B s
        (medians of K), recovery ratio R.RRx`` and, outside the band, why."""
        k = min(len(self.sarp_s), len(self.capped_s))
        same = len(self.sarp_s) == len(self.capped_s)
        medians = f"medians of {k}" if same else (
            f"medians of {len(self.sarp_s)} and {len(self.capped_s)}")
        s = (f"cap rule: fraction {self.fraction:.3g} ({self.nodes:,} of {self.total_nodes:,} "
             f"nodes), sarp {self.sarp_median:.4f} s, {CAPPED} {self.capped_median:.4f} s "
             f"({medians}), recovery ratio {self.ratio:.2f}x")
        if not self.in_band:
            s += (f" (band {self.band[0]:g}-{self.band[1]:g}x not reached in "
                  f"{len(self.steps)} steps: closest shown)")
        return s

    def metadata(self) -> dict:
        """Flat pyperf-safe metadata (str, int, float; no newlines)."""
        return {
            "cap_rule": self.line(),
            "cap_fraction": float(self.fraction),
            "cap_nodes": int(self.nodes),
            "cap_total_nodes": int(self.total_nodes),
            "cap_sarp_recovery_median_s": float(self.sarp_median),
            "cap_capped_recovery_median_s": float(self.capped_median),
            "cap_recovery_ratio": float(self.ratio),
            "cap_in_band": int(bool(self.in_band)),
            "cap_band": f"{self.band[0]:g}-{self.band[1]:g}",
            "cap_entries": int(self.entries),
            "cap_recoveries": min(len(self.sarp_s), len(self.capped_s)),
            "cap_steps": "; ".join(f"{f:.3g}:{m:.4f}s:{r:.2f}x" for f, m, r in self.steps)
                         or "-",
        }

    def to_json(self) -> dict:
        d = asdict(self)
        d["band"] = list(self.band)
        d["steps"] = [list(s) for s in self.steps]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CapChoice":
        d = dict(d)
        d["band"] = tuple(d.get("band", BAND))
        d["steps"] = [tuple(s) for s in d.get("steps", ())]
        return cls(**d)


# ----------------------------------------------------------------------------- measuring
def _measure(strategy: str, options: dict, *, workload: str, workload_options: dict,
             engine: str, entries: int, recoveries: int, engine_options: dict,
             cache_bytes: int, quiet: bool, work_dir) -> tuple[list, dict]:
    """Build ``strategy`` to ``entries`` and time ``recoveries`` fresh-process
    recoveries: (index recovery seconds of each, the build's stats)."""
    from prefixbench.harness.recovery import RecoverSpec, _index_s, run_recover
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"prefixbench-caprule-{strategy}-", dir=work_dir)
    try:
        spec = RecoverSpec(strategy=strategy, engine=engine, entries=entries, workload=workload,
                           workload_options=dict(workload_options),
                           strategy_options=dict(options),
                           engine_options=dict(engine_options), cache_bytes=cache_bytes,
                           work_dir=os.path.join(scratch, "run"), repeat=recoveries)
        res = run_recover(spec, quiet=quiet)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ([_index_s(r["recovery"]) for r in res["runs"]],
            dict(res["reference"].get("stats_before", {})))


def _distance(ratio: float, band) -> float:
    """How far a ratio lies outside the band, on a log scale (0 inside)."""
    lo, hi = band
    if ratio <= 0:
        return math.inf
    if ratio < lo:
        return math.log(lo / ratio)
    if ratio > hi:
        return math.log(ratio / hi)
    return 0.0


def _budget(fraction: float, total: int) -> int:
    return max(1, math.ceil(fraction * total)) if total else 1


def _check(entries, recoveries, band, max_steps, engine, allow_small) -> None:
    if not isinstance(entries, int) or entries < 1:
        raise ConfigError(f"option --cap-entries: {entries!r} must be a count >= 1")
    if entries < PAPER_ENTRIES and not allow_small:
        raise ConfigError(f"option --cap-entries: {entries:,} entries is below the paper's "
                          f"{PAPER_ENTRIES:,} (sarp's index recovery is too short to compare "
                          f"below that)")
    if not isinstance(recoveries, int) or recoveries < 1:
        raise ConfigError(f"option --cap-recoveries: {recoveries!r} must be >= 1")
    if recoveries < PAPER_RECOVERIES and not allow_small:
        raise ConfigError(f"option --cap-recoveries: {recoveries} is below "
                          f"{PAPER_RECOVERIES} (the rule compares medians of >= "
                          f"{PAPER_RECOVERIES} recoveries)")
    try:
        lo, hi = (float(x) for x in band)
    except (TypeError, ValueError):
        raise ConfigError(f"option --cap-band: {band!r} is not two numbers LO,HI") from None
    if not (0 < lo <= hi and math.isfinite(hi)):
        raise ConfigError(f"option --cap-band: {lo:g},{hi:g} needs 0 < LO <= HI")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(f"option --cap-steps: {max_steps!r} must be >= 1")
    if not engine:
        raise ConfigError("option --engine: the cap rule needs an engine "
                          "(recovery is timed in fresh processes)")
    from prefixbench.registry import get_registry
    info = get_registry().get("engine", engine)
    if getattr(info.factory, "volatile", False):
        raise ConfigError(f"option --engine: {engine} is volatile (nothing survives for the "
                          "fresh recovery process); use a persistent engine")


def choose_cap(*, workload: str, workload_options: dict, engine: str, entries: int = PAPER_ENTRIES,
               recoveries: int = PAPER_RECOVERIES, band=BAND, max_steps: int = 8,
               engine_options=None, cache_bytes: int = 64 << 20, quiet: bool = True,
               work_dir=None, strategy_options=None, allow_small: bool = False) -> CapChoice:
    """The paper's cap: the in-memory fraction of segment-radix-capped whose index
    recovery is ``band`` times sarp's (see the module doc)."""
    _check(entries, recoveries, band, max_steps, engine, allow_small)
    band = (float(band[0]), float(band[1]))
    workload_options = dict(workload_options or {})
    engine_options = dict(engine_options or {})
    strategy_options = {k: dict(v) for k, v in (strategy_options or {}).items()}
    common = dict(workload=workload, workload_options=workload_options, engine=engine,
                  entries=entries, recoveries=recoveries, engine_options=engine_options,
                  cache_bytes=cache_bytes, quiet=quiet, work_dir=work_dir)

    def say(text: str) -> None:
        if not quiet:
            print(f"cap rule: {text}", file=sys.stderr, flush=True)

    sarp_s, _ = _measure(REFERENCE, strategy_options.get(REFERENCE, {}), **common)
    sarp_median = statistics.median(sarp_s)
    say(f"sarp index recovery median {sarp_median:.4f} s ({len(sarp_s)} recoveries of "
        f"{entries:,} entries, {workload} on {engine})")
    base = dict(strategy_options.get(CAPPED, {}))
    base.pop("cap_nodes", None)                 # cap_fraction overrides it anyway
    lo, hi = math.log(MIN_FRACTION), 0.0
    total = 0
    seen: set = set()
    steps: list = []
    best = None                                 # (distance, fraction, nodes, capped_s, median, ratio)
    for step in range(1, max_steps + 1):
        f = math.exp(_next_log_fraction(lo, hi, steps, band))
        if total:
            nodes = _budget(f, total)
            if nodes in seen:                   # no budget left between the ends: converged
                break
        capped_s, st = _measure(CAPPED, dict(base, cap_fraction=f), **common)
        total = int(st.get("nodes", total))
        nodes = int(st.get("cap_nodes_effective", _budget(f, total)))
        seen.add(nodes)
        median = statistics.median(capped_s)
        ratio = median / sarp_median if sarp_median > 0 else math.inf
        steps.append((f, median, ratio))
        say(f"step {step}/{max_steps}: fraction {f:.3g} ({nodes:,} of {total:,} nodes), "
            f"{CAPPED} {median:.4f} s, ratio {ratio:.2f}x")
        d = _distance(ratio, band)
        if best is None or d < best[0]:
            best = (d, f, nodes, capped_s, median, ratio)
        if d == 0:
            break
        if ratio > band[1]:
            hi = math.log(f)                    # recovers too slowly: keep less in memory
        else:
            lo = math.log(f)
    _d, f, nodes, capped_s, median, ratio = best
    return CapChoice(fraction=f, nodes=nodes, total_nodes=total, sarp_s=list(sarp_s),
                     capped_s=list(capped_s), sarp_median=sarp_median, capped_median=median,
                     ratio=ratio, in_band=_d == 0, entries=entries, workload=workload,
                     engine=engine, steps=steps, workload_options=workload_options, band=band,
                     engine_options=engine_options, strategy_options=strategy_options)


def _next_log_fraction(lo: float, hi: float, steps: list, band) -> float:
    """The next log fraction to measure inside the bracket ``(lo, hi)``.

    Capped recovery grows about linearly with the resident share, so the guess
    aims at the band's geometric middle: by interpolating log ratio against log
    fraction between the measured points that bracket the band, or - with one
    side measured - by scaling that point's fraction in proportion.  A guess
    within a tenth of the bracket of either end, or with nothing measured yet,
    falls back to the bracket's midpoint, so the search always shrinks the
    bracket as bisection would.
    """
    mid = (lo + hi) / 2
    target = (math.log(band[0]) + math.log(band[1])) / 2
    pts = [(math.log(f), math.log(r)) for f, _m, r in steps if f > 0 and 0 < r < math.inf]
    below = [p for p in pts if p[1] < target]
    above = [p for p in pts if p[1] > target]
    if below and above:
        (fl, rl), (fh, rh) = max(below), min(above)
        guess = fl + (target - rl) * (fh - fl) / (rh - rl) if rh != rl else mid
    elif pts:
        f0, r0 = (max(below) if below else min(above))
        guess = f0 + (target - r0)
    else:
        return mid
    margin = (hi - lo) / 10
    return guess if lo + margin < guess < hi - margin else mid


# ----------------------------------------------------------------------------- cache
def choice_key(*, workload: str, workload_options: dict, engine: str, entries: int,
               band=BAND, engine_options=None, strategy_options=None) -> str:
    """The cache key of a choice: what the measured recoveries depend on."""
    return json.dumps({"workload": workload, "workload_options": dict(workload_options or {}),
                       "engine": engine, "entries": int(entries),
                       "band": [float(band[0]), float(band[1])],
                       "engine_options": dict(engine_options or {}),
                       "strategy_options": {k: dict(v) for k, v in
                                            (strategy_options or {}).items()}},
                      sort_keys=True, default=str)


def _key_of(c: CapChoice) -> str:
    return choice_key(workload=c.workload, workload_options=c.workload_options,
                      engine=c.engine, entries=c.entries, band=c.band,
                      engine_options=c.engine_options, strategy_options=c.strategy_options)


def _read_cache(path) -> dict:
    path = os.fspath(path)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("version") != _CACHE_VERSION or not isinstance(data.get("choices"), dict):
            raise ValueError("not a cap-rule cache of this version")
        return data["choices"]
    except (OSError, ValueError, AttributeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise ConfigError(f"cap cache {path}: unreadable ({why}); remove it or name "
                          "another file") from None


def load_choice(path, *, workload: str, workload_options: dict, engine: str, entries: int,
                band=BAND, engine_options=None, strategy_options=None) -> CapChoice | None:
    """The cached choice for these settings, or None if the file has none."""
    key = choice_key(workload=workload, workload_options=workload_options, engine=engine,
                     entries=entries, band=band, engine_options=engine_options,
                     strategy_options=strategy_options)
    d = _read_cache(path).get(key)
    if d is None:
        return None
    try:
        return CapChoice.from_json(d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"cap cache {os.fspath(path)}: unreadable entry ({e}); remove it "
                          "or name another file") from None


def save_choice(path, choice: CapChoice) -> None:
    """Add (or replace) ``choice`` in the cache file; written to a temporary file
    and renamed, so a crash leaves the old cache or the new one."""
    path = os.fspath(path)
    choices = _read_cache(path)
    choices[_key_of(choice)] = choice.to_json()
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": _CACHE_VERSION, "choices": choices}, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
