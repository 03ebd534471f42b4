"""``prefixbench sweep``: the SARP paper's comparisons, each as one command.

Three kinds, each a list of *settings* replayed one after the other on the
same workload, every one on a fresh store, with the exact ``radix`` oracle
shadowing it in the same replay (so "loss" is always measured against the
oracle *of that run*, as the paper's Fig. 9 does):

``retrieval``  (Fig. 9)  ``sarp`` at ``max_retrieval`` 1, 2, 3, 4 and
                         unlimited (0): token loss vs the oracle, segment
                         retrievals per query, store reads per match, latency.
``ablation``   (Fig. 10, Table 4)  full ``sarp`` and ``sarp`` with refinement,
                         filtering, pruning each switched off: candidates per
                         routing entry before/after filtering and retrieved,
                         routing entries and bytes, retrievals per query, loss.
``strategies`` (section 6.2, Fig. 6)  ``sarp``, ``ssd-blockhash``,
                         ``segment-radix-capped``, ``segment-hash`` side by
                         side: throughput and the first strategy's ratio to
                         each, mean match/insert latency, loss, false hits,
                         store reads per match, in-memory bytes per block,
                         and match latency against the windows a query
                         spans; ``name+key=value`` entries add variants
                         (``name+engine.key=value``: an engine option of
                         that variant's store).
``space``      (section 6.6, Table 5)  ``ssd-blockhash`` (the non-packing
                         layout, always first) beside segment layouts (default
                         ``sarp``) on the same on-disk engine and workload:
                         data and log bytes on disk, logical bytes, space
                         amplification, disk bytes and logical block-metadata
                         entries each as a ratio to ``ssd-blockhash``'s.

``sarp`` runs with ``backfill=sync`` unless told otherwise: back-fill jobs
then publish inside the insert that triggered them, so a sweep's hit rates
and candidate counts are the same on every run (with the background worker
they depend on thread timing).  The paper runs back-fill in a background
worker, off the insert path (section 4); what sync costs sarp, measured on
codeact at ``--scale paper`` (RocksDB direct reads, 10% rule, the two
interleaved with segment-radix-capped in turns of 50 requests, median of 3):
mean insert 105.96 us with ``backfill=sync`` against 91.55 us with
``sarp+backfill=background`` (capped 91.91 us), request throughput 0.97x.

**Cache rule.**  ``cache_rule="paper"`` applies the paper's budget (section
6.1): every SSD-backed strategy's engine gets 10% (``cache_fraction``) of
ssd-blockhash's *uncompressed* store size.  That size is learnt by first
replaying ``ssd-blockhash`` on the same engine and workload (no oracle) and is
taken as the **logical** size, ``entries x (8-byte key + meta_size)`` -
24 bytes per indexed block at the default 16-byte metadata.  We use the
logical size, not what the engine reports on disk, because it is what the
paper calls uncompressed, it does not depend on compression, compaction
timing, WAL and SST overhead, and so it gives the same budget on every engine
and every run; the engine's on-disk size is reported next to it.  The cache
is then passed to each engine as ``StoreConfig.cache_bytes`` (RocksDB splits
it half block cache, half memtables).  ``cache_rule="fixed"`` uses
``cache_bytes`` as given.

**Scale.**  ``scale="small"`` replays the whole (default-sized) workload, as
above.  ``scale="paper"`` (strategies sweep only) builds the index to the
paper's sizes (section 6.1: about 2.2M, 7.0M, 12.7M and 158M indexed blocks
for codeact, lmcache-agent, eabf and ultrachat; the workload options come
from :func:`prefixbench.workloads.profiles.paper_workload_options`), in two
phases as YCSB does:

* one counting pass over the trace (NumPy over chunks of requests) gives the
  unique-block count and, per request, how many leading blocks were indexed
  before it;
* the **load** phase, untimed, inserts every request but the last
  ``run_requests`` through each strategy's bulk path
  (``insert_known_prefix`` with those counts), the radix oracle inserting
  beside it; the store then settles (its flushes and compactions finish,
  ``SegmentStore.settle``), so the run is not charged for the load's write debt;
* the **run** phase is :func:`~prefixbench.harness.replay.replay` over the
  last ``run_requests`` requests (match, then insert, timed), the same oracle
  shadowing it, so loss is measured against an oracle that saw the whole
  trace.

The cache rule then needs no sizing replay: 10% of ``unique blocks x 24 B``.
Before anything is generated, :mod:`prefixbench.harness.preflight` estimates
disk and memory; a profile that does not fit runs at the largest power-of-two
fraction (1/2, 1/4, ...) of its paper size that does, and the table header
says so (``force`` keeps the full size).  A ``run_requests`` larger than the
trace is refused, naming the trace's request count.

**Loading once** (``loads="once"``, the default where a setting runs more than
once at paper scale on an engine that can checkpoint): each setting is loaded
once and kept (:mod:`prefixbench.harness.checkpoints`), with the oracle's
snapshot (taken after the first load; later loads skip the oracle) and the run
phase's requests; every run, the first included, starts from a clone.

**Repeats and threads** (strategies sweep).  ``repeat`` runs every setting
that many times (repeat-major: all settings once, then all again, so drift
hits every setting alike); the table shows each figure as the median, with
min-max, of per-repeat values - a ratio is taken within one repeat, then the
median over repeats.  The pyperf suites keep every run.  ``threads=(1, 2)``
runs every setting at each count; with more than one count, every count
(1 included) runs on the request-thread path and throughput is requests over
wall time, so the speedups compare like with like.  For each count ``p`` above
the first the table gives the speedup ``s``, the Karp-Flatt serial fraction
``e = (1/s - 1/p) / (1 - 1/p)`` and the Amdahl bound ``1/e`` it implies.
Threaded runs get block-derived metadata (request number 0, load included)
and are checked after the timed window against the sweep's own oracle, which
replays the run requests in order after the load; to know what each request
was answered, the strategy is wrapped in a thin recorder (one dict lookup and
one list store per match, inside the timed call).
What the serial fraction is made of, on CPython: for sarp on codeact at paper
scale (RocksDB direct reads, 60,000 timed requests) the speedup at 2 threads
is 1.21x, serial fraction 0.65.  A native profile of the two request threads
(py-spy ``--native --idle``) puts 27% of their time in taking the GIL back
after rocksdict's multi-get, 25% in ``pread64`` and under 1% on RocksDB's
mutexes: the reads overlap, and what serialises is the GIL-held rest (sarp's
planning, publishing and registration, and rocksdict's writes, which keep
the GIL).
With direct I/O the sweep first measures what the device alone gives the
same thread counts (:mod:`prefixbench.harness.deviceprobe`, metadata
``device_probe``): rocksdict's multi-get reads one block after another, so a
setting that mostly waits on device reads scales at most about that much.
With ``interleave`` the thread counts take turns too (10,000 timed requests,
turns of 200, median of 3 on codeact at paper scale): sarp 1.27x (1.22-1.28),
ssd-blockhash ``probe=batch`` 1.55x (1.50-1.57), the device alone 1.65x
(1.63-1.95); the same command without turns gave 1.49x (1.23-1.67) and 1.53x
(1.38-1.70).

**Interleaving** (strategies sweep).  ``interleave=N`` builds and loads every
setting first, at every thread count, and holds them all at once (the
pre-flight adds their stores and oracles up), then lets their timed runs take
turns, N requests each, round robin (:func:`replay_interleaved`).  At several
thread counts a run's threads take tickets for the turn's N requests, each
before its next request of its own sessions, so a thread ends a turn at most
one request after the others (the imbalance this costs shrinks as N grows).
On a shared
machine the load other tenants put on the cores and the device comes and goes
over minutes; one run after another then compares different minutes, and on
codeact at paper scale the same sarp ÷ segment-radix-capped ratio came out at
1.22x, 1.52x and 1.57x in three sequential runs of one day.  Taking turns puts
that drift on every setting alike.  Each setting still has its own store,
cache budget and oracle, and its results other than timings are the same as
when it runs alone (tested); what a turn cannot keep apart is the other
stores' background threads (a flush or compaction of one setting's load may
still run during another's turn: the loads settle first, so little is left).
Their run-phase compactions matter little too: holding each RocksDB store's
automatic compactions while it was between turns (codeact at paper scale,
sarp, segment-radix-capped and ssd-blockhash ``probe=batch`` at 1 and 2
threads, 10,000 timed requests in turns of 200, median of 3, one run with and
one without) moved no ratio by more than 0.02: sarp ÷ capped 1.49x against
1.51x, sarp's 2-thread speedup 1.28x against 1.26x, ssd-blockhash's 1.54x
against 1.55x; so turns do not hold them.
With direct I/O an interleaved sweep also watches the device between rounds
of turns (a few 4 KiB reads at queue depth 1 on a scratch file of its own,
:class:`prefixbench.harness.deviceprobe.DeviceWatch`, metadata
``device_watch``), and with repeats the report shows each repeat apart with
the device's read latency in it, so a slow repeat can be told from a slow
device under it.

**Cap rule** (strategies sweep with ``segment-radix-capped``).
``cap_rule="paper"`` (the default) asks
:func:`prefixbench.harness.caprule.choose_cap` for the cap fraction whose
recovery lands within 0.96-1.96x of sarp's (paper section 6.2), applies it as
``cap_fraction``, prints the choice above the table and stores its metadata
in the suites; ``cap_cache=FILE`` loads a saved choice from FILE when it
exists and saves the new one there otherwise.  ``cap_rule="fixed"`` keeps
``cap_nodes`` as given; it is the default on a volatile engine (``memory``),
where no recovery can be timed, so the plain ``sweep strategies`` still runs.
Under ``paper`` a ``cap_nodes`` or ``cap_fraction`` of the user's is refused:
the rule chooses the cap.

**Calibration.**  Under the table the strategies sweep prints sarp's Table 4
candidate counts beside the paper's (:data:`PAPER_TABLE4`, one place; the suites
carry the workload's values as ``table4_paper``) and whether each is within 25%,
at whatever scale the sweep ran.  At ``--scale paper`` those are the run
phase's; the load also counts them, untimed and apart, over up to
:data:`LOAD_MATCH_SAMPLES` of its queries spread evenly over it (sarp's
``candidate_counts``, which adds nothing to its own counters): the figures
``index-load-candidates-*``, judged the same way.  The paper counts over its
whole workload, and a round-robin replay's last requests can meet other routing
entries than the trace as a whole (ultrachat's run phase: 1.0 against 24).

Output: :meth:`SweepResult.table` for the terminal, rendered from the sweep's
suites by :mod:`prefixbench.reports.sweeps` (so ``show`` prints the same);
:meth:`SweepResult.write`
writes pyperf suites, one benchmark per figure and setting, named
``<setting>-<figure>`` (``retrieval-1-match-latency-mean``,
``ablation-no-pruning-hit-tokens``, ``sarp-insert-latency-mean``), so two
sweep files of the same kind line up in ``python -m pyperf compare_to``;
times go to ``OUT.json``, counts and sizes to ``OUT.counts.json``.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from prefixbench.harness import pyperf_io
from prefixbench.harness.build import beyond_paper_options, build
from prefixbench.engines.base import check_options
from prefixbench.errors import ConfigError
from prefixbench.harness.bench import make_workload
from prefixbench.harness.replay import ReplayResult, make_oracle, replay, replay_interleaved
from prefixbench.metas import make_metas
from prefixbench.harness.progress import progress
from prefixbench.units import parse_size
from prefixbench.registry import get_registry
from prefixbench.plugins.strategy import META_SIZE, parse_options

KINDS = {
    "retrieval": "sarp at MaxRetrieval 1, 2, 3, 4, unlimited (paper Fig. 9)",
    "ablation": "sarp with refinement, filtering, pruning each off (paper Fig. 10, Table 4)",
    "strategies": "strategies side by side under one cache rule (paper section 6.2, Fig. 6)",
    "space": "on-disk bytes and block-metadata entries vs ssd-blockhash (paper 6.6, Table 5)",
}
DEFAULT_BUDGETS = (1, 2, 3, 4, 0)
#: how often a paper-scale sweep loads a setting (:attr:`SweepConfig.loads`)
LOADS = ("once", "each")
DEFAULT_STRATEGIES = ("sarp", "ssd-blockhash", "segment-radix-capped", "segment-hash")
#: the space sweep's reference (the paper's non-packing version) and default company
SPACE_REFERENCE = "ssd-blockhash"
DEFAULT_SPACE_STRATEGIES = (SPACE_REFERENCE, "sarp")
#: (label, sarp options that differ from the full design)
ABLATIONS = (
    ("full", {}),
    ("no-refinement", {"refinement": "off"}),
    ("no-filtering", {"filtering": "off"}),
    ("no-pruning", {"pruning": "off"}),
)
PAPER_CACHE_FRACTION = 0.10
CACHE_RULES = ("paper", "fixed")
#: key + value of one ssd-blockhash entry, per indexed block (value = metadata)
KEY_BYTES = 8
SCALES = ("small", "paper")
DEFAULT_RUN_REQUESTS = 2000
CAP_RULES = ("paper", "fixed")
CAPPED = "segment-radix-capped"
DEFAULT_CAP_ENTRIES = 10 ** 7
DEFAULT_CAP_RECOVERIES = 5
MAX_REPEAT = 100
#: smallest share of a profile's paper size the pre-flight tries before refusing
MIN_PAPER_FRACTION = 1 / 1024
#: the paper's setup (section 6.1), printed beside this machine's
PAPER_REQUEST_THREADS = 42
PAPER_ROCKSDB_THREADS = 14
#: sarp in the paper's Table 4: candidates per routing entry before filtering,
#: after filtering, and actually retrieved
PAPER_TABLE4 = {
    "codeact": (59.3, 31.1, 1.05),
    "lmcache-agent": (1.78, 1.66, 1.00),
    "eabf": (1.01, 1.00, 1.00),
    "ultrachat": (24.3, 1.26, 1.03),
}
TABLE4_FIGURES = ("candidates_before_filtering", "candidates_after_filtering",
                  "candidates_retrieved")
#: queries of a paper-scale load whose Table 4 candidates are counted (untimed, evenly
#: spread, counted apart from the run's): the load's bulk path routes nothing, and a
#: round-robin replay's last requests - the run phase - are late turns, which may meet
#: other routing entries than the trace as a whole (ultrachat's: 1.0 against 24)
LOAD_MATCH_SAMPLES = 10_000
#: the paper's section 3.2: share of 256-token spans with more than three alternatives
PAPER_SPAN_SHARE = {"codeact": 0.2131, "lmcache-agent": 0.0060, "eabf": 0.0178,
                    "ultrachat": 0.1685}
#: the span statistic walks the trace in Python (~20 s per million blocks, ~150 B per
#: block): above this many unique blocks the sweep skips it and says so
SPAN_STAT_MAX_BLOCKS = 15_000_000
#: a calibration figure "holds" within this share of the paper's value
CALIBRATION_TOLERANCE = 0.25


# ----------------------------------------------------------------------------- configuration
@dataclass
class SweepConfig:
    """Everything one sweep needs; build it with :func:`make_config` from user text."""

    kind: str
    workload: str
    workload_options: dict = field(default_factory=dict)
    engine: str = "memory"
    engine_options: dict = field(default_factory=dict)
    cache_rule: str = "fixed"
    cache_bytes: int = 64 << 20
    cache_fraction: float = PAPER_CACHE_FRACTION
    direct_io: bool = False
    durability: str = "async"
    limit: int | None = None
    budgets: tuple = DEFAULT_BUDGETS
    strategies: tuple = DEFAULT_STRATEGIES
    #: strategy name -> its options (sarp's include ``backfill``)
    strategy_options: dict = field(default_factory=dict)
    backfill: str = "sync"
    scale: str = "small"
    #: paper scale: timed requests at the end of the trace
    run_requests: int = DEFAULT_RUN_REQUESTS
    repeat: int = 1
    threads: tuple = (1,)
    cap_rule: str = "fixed"
    cap_entries: int = DEFAULT_CAP_ENTRIES
    cap_recoveries: int = DEFAULT_CAP_RECOVERIES
    cap_cache: str | None = None
    breakdown: bool = False
    #: run at the full paper size even where the pre-flight says it does not fit
    force: bool = False
    #: requests per turn when the settings' timed runs take turns (0: one after another)
    interleave: int = 0
    #: with several thread counts and direct I/O: measure what the device alone gives
    #: those counts (:mod:`prefixbench.harness.deviceprobe`)
    device_probe: bool = True
    #: paper scale: ``once`` loads each setting once and starts every run from a clone
    #: of it (:mod:`prefixbench.harness.checkpoints`); ``each`` loads before every run
    loads: str = "each"
    #: ``loads`` was chosen, not given: it falls back to ``each`` where keeping every
    #: setting's load would shrink the paper-scale trace
    loads_chosen: bool = False

    @property
    def probes_device(self) -> bool:
        """Whether this sweep measures the device's own thread scaling."""
        return (self.device_probe and self.kind == "strategies" and len(self.threads) > 1
                and self.direct_io)

    @property
    def watches_device(self) -> bool:
        """Whether this sweep times a few device reads between its turns, per repeat
        (:class:`prefixbench.harness.deviceprobe.DeviceWatch`)."""
        return (self.device_probe and self.kind == "strategies" and self.direct_io
                and bool(self.interleave))

    @property
    def threaded(self) -> bool:
        """Several thread counts: every count runs on the request-thread path."""
        return len(self.threads) > 1 or self.threads[0] > 1

    def describe(self) -> dict:
        """The configuration as plain values (pyperf metadata, reports)."""
        return {"kind": self.kind, "workload_options": self.workload_options,
                "engine_options": self.engine_options, "cache_rule": self.cache_rule,
                "cache_fraction": self.cache_fraction, "direct_io": self.direct_io,
                "durability": self.durability, "limit": self.limit, "backfill": self.backfill,
                "scale": self.scale, "run_requests": self.run_requests if
                self.scale == "paper" else None, "repeat": self.repeat,
                "threads": list(self.threads), "cap_rule": self.cap_rule,
                "interleave": self.interleave, "device_probe": self.probes_device,
                "device_watch": self.watches_device,
                "loads": self.loads}


def _int_list(option: str, text: str, *, allow_unlimited: bool) -> tuple:
    items = [t.strip() for t in str(text).split(",")]
    if not text or any(not t for t in items):
        raise ConfigError(f"option {option}: {text!r} is not a comma-separated list "
                          "(e.g. 1,2,3,4,unlimited)")
    out = []
    for t in items:
        if allow_unlimited and t.lower() in ("unlimited", "inf", "0"):
            out.append(0)
            continue
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"option {option}: {t!r} is not a whole number"
                              + (" or 'unlimited'" if allow_unlimited else "")) from None
        if v < 1:
            raise ConfigError(f"option {option}: {v} must be >= 1"
                              + (" (or 'unlimited')" if allow_unlimited else ""))
        out.append(v)
    if len(set(out)) != len(out):
        raise ConfigError(f"option {option}: {text!r} lists a value twice")
    return tuple(out)


def parse_budgets(text: str) -> tuple:
    """``'1,2,3,4,unlimited'`` -> ``(1, 2, 3, 4, 0)`` (0 = unlimited, sarp's spelling)."""
    return _int_list("--budgets", text, allow_unlimited=True)


#: separates a strategy from the options of one variant of it: ``sarp+batch_windows=8``
VARIANT_SEP = "+"
#: a variant's key with this prefix is an engine option of that setting's store
#: (``sarp+engine.block_bytes=64KiB``), over the sweep's ``--engine-option``s
ENGINE_KEY = "engine."


def split_entry(entry: str) -> tuple[str, dict]:
    """``'sarp+batch_windows=8+max_retrieval=2'`` -> ``('sarp', {'batch_windows': '8',
    'max_retrieval': '2'})``; a bare name has no options of its own."""
    name, *parts = entry.split(VARIANT_SEP)
    opts = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"option --strategies: {entry!r}: {part!r} is not KEY=VALUE "
                              f"(a variant is NAME{VARIANT_SEP}KEY=VALUE, e.g. "
                              f"sarp{VARIANT_SEP}batch_windows=8)")
        if key in opts:
            raise ConfigError(f"option --strategies: {entry!r} sets {key} twice")
        opts[key] = value
    return name, opts


def strategy_names(entries) -> tuple:
    """The distinct strategies of a list of entries (variants included), in order."""
    return tuple(dict.fromkeys(split_entry(e)[0] for e in entries))


def parse_strategies(text: str, *, variants: bool = False) -> tuple:
    """``'sarp,ssd-blockhash'`` -> names, each a registered strategy, none twice.

    With ``variants``, an entry may also be ``NAME+KEY=VALUE[+KEY=VALUE...]``: the same
    strategy again with those options over its others, so two configurations of one
    strategy run side by side (``sarp,sarp+batch_windows=8``)."""
    names = [t.strip() for t in str(text).split(",")]
    if not text or any(not n for n in names):
        raise ConfigError(f"option --strategies: {text!r} is not a comma-separated list of "
                          "strategy names (e.g. sarp,ssd-blockhash)")
    if len(set(names)) != len(names):
        raise ConfigError(f"option --strategies: {text!r} names a strategy twice")
    reg = get_registry()
    for n in names:
        if VARIANT_SEP in n and not variants:
            raise ConfigError(f"option --strategies: {n!r}: variants (NAME{VARIANT_SEP}KEY="
                              "VALUE) are for the strategies sweep; give strategy names")
        base, _opts = split_entry(n)
        if base not in reg.names("strategy"):
            raise ConfigError(f"option --strategies: unknown strategy {base!r}; available: "
                              f"{', '.join(reg.names('strategy'))}")
    return tuple(names)


def _parse_fraction(text) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"option --cache-fraction: {text!r} is not a number") from None
    if not (0.0 < v <= 1.0) or math.isnan(v):
        raise ConfigError(f"option --cache-fraction: {text} must be in (0, 1]")
    return v


def _split_strategy_options(kv: dict, strategies: tuple) -> dict:
    """``{'tau': '100', 'segment-hash:S': '32'}`` -> per-strategy dicts; bare keys are sarp's."""
    out: dict = {}
    for key, value in kv.items():
        name, sep, opt = key.rpartition(":")
        name = name if sep else "sarp"
        if not opt:
            raise ConfigError(f"option --strategy-option: {key}={value} has no option name")
        if name not in strategies:
            raise ConfigError(f"option --strategy-option: {key}={value} is for strategy "
                              f"{name!r}, which this sweep does not run "
                              f"({', '.join(strategies)})")
        out.setdefault(name, {})[opt] = value
    return out


def make_config(kind: str, *, workload: str, workload_options: dict | None = None,
                engine: str | None = None, engine_options: dict | None = None,
                cache_rule: str | None = None, cache_bytes: str | None = None,
                cache_fraction: str | None = None, direct_io: bool = False,
                durability: str = "async", limit: int | None = None,
                budgets: str | None = None, strategies: str | None = None,
                strategy_options: dict | None = None, backfill: str = "sync",
                scale: str | None = None, run_requests=None, repeat=None, threads=None,
                cap_rule: str | None = None, cap_entries=None, cap_recoveries=None,
                cap_cache: str | None = None, breakdown: bool = False,
                force: bool = False, interleave=None, device_probe=None,
                loads: str | None = None) -> SweepConfig:
    """Check the user's text and build a :class:`SweepConfig`; every problem is one
    :class:`ConfigError` line, raised before any replay starts."""
    if kind not in KINDS:
        raise ConfigError(f"sweep: unknown kind {kind!r}; choose one of "
                          f"{', '.join((*KINDS, 'capacity'))}")
    scale = "small" if scale is None else scale
    if scale not in SCALES:
        raise ConfigError(f"option --scale: {scale!r} is not one of {', '.join(SCALES)}")
    if scale == "paper" and kind != "strategies":
        raise ConfigError("option --scale: only the strategies sweep runs at --scale paper")
    if run_requests is not None and scale != "paper":
        raise ConfigError("option --run-requests: only --scale paper has a run phase "
                          "(--scale small replays the whole trace; --limit shortens it)")
    run_requests = _positive_int("--run-requests", run_requests, DEFAULT_RUN_REQUESTS)
    if scale == "paper" and limit is not None:
        raise ConfigError("option --limit: --scale paper times the last --run-requests "
                          "requests of the paper-sized trace; leave --limit out")
    repeat = _positive_int("--repeat", repeat, 1)
    if repeat > MAX_REPEAT:
        raise ConfigError(f"option --repeat: {repeat} must be between 1 and {MAX_REPEAT}")
    thread_counts = _thread_counts(threads)
    for option, given in (("--repeat", repeat != 1), ("--threads", thread_counts != (1,)),
                          ("--cap-rule", cap_rule is not None),
                          ("--interleave", interleave is not None),
                          ("--loads", loads is not None),
                          ("--no-device-probe", device_probe is False)):
        if given and kind != "strategies":
            raise ConfigError(f"option {option}: only the strategies sweep takes {option}")
    # 0 (or left out): the settings run one after another
    interleave = 0 if interleave in (None, 0, "0") else _positive_int("--interleave",
                                                                      interleave, 0)
    if budgets is not None and kind != "retrieval":
        raise ConfigError("option --budgets: only the retrieval sweep takes budgets")
    if strategies is not None and kind not in ("strategies", "space"):
        raise ConfigError("option --strategies: only the strategies and space sweeps take a "
                          "strategy list")
    if limit is not None and limit < 1:
        raise ConfigError(f"option --limit: {limit} must be >= 1")
    if backfill not in ("sync", "background"):
        raise ConfigError(f"option --backfill: {backfill!r} is not one of sync, background")
    if cache_rule is not None and cache_rule not in CACHE_RULES:
        raise ConfigError(f"option --cache-rule: {cache_rule!r} is not one of "
                          f"{', '.join(CACHE_RULES)}")
    if cache_rule is None:
        # the side-by-side comparison follows the paper unless a fixed cache is given
        if cache_bytes is not None:
            cache_rule = "fixed"
        elif cache_fraction is not None or kind == "strategies":
            cache_rule = "paper"
        else:
            cache_rule = "fixed"
    if cache_rule == "paper" and cache_bytes is not None:
        raise ConfigError("option --cache-bytes: a fixed cache contradicts --cache-rule paper; "
                          "give one of them")
    if cache_rule == "fixed" and cache_fraction is not None:
        raise ConfigError("option --cache-fraction: only --cache-rule paper takes a fraction")
    reg = get_registry()
    engine = engine or ("lmdb" if kind == "space" else "memory")
    engine_cls = reg.get("engine", engine).factory
    reg.get("workload", workload)
    if kind == "space" and getattr(engine_cls, "volatile", False):
        raise ConfigError(f"option --engine: {engine} keeps nothing on disk; the space sweep "
                          "needs an on-disk engine (lmdb, rocksdb, wiredtiger, packfile, ...)")
    if kind == "strategies":
        names = parse_strategies(strategies, variants=True) if strategies is not None \
            else DEFAULT_STRATEGIES
    elif kind == "space":
        names = parse_strategies(strategies) if strategies is not None \
            else DEFAULT_SPACE_STRATEGIES
        names = (SPACE_REFERENCE,) + tuple(n for n in names if n != SPACE_REFERENCE)
        for n in names:
            if not getattr(reg.get("strategy", n).factory, "needs_store", False):
                raise ConfigError(f"option --strategies: {n} keeps nothing in the engine; the "
                                  "space sweep compares strategies that store their index")
    else:
        names = ("sarp",)
    cfg = SweepConfig(
        kind=kind, workload=workload, workload_options=dict(workload_options or {}),
        engine=engine, engine_options=dict(engine_options or {}), cache_rule=cache_rule,
        cache_bytes=parse_size("--cache-bytes", cache_bytes if cache_bytes is not None
                               else "64MiB"),
        cache_fraction=(_parse_fraction(cache_fraction) if cache_fraction is not None
                        else PAPER_CACHE_FRACTION),
        direct_io=direct_io, durability=durability, limit=limit,
        budgets=parse_budgets(budgets) if budgets is not None else DEFAULT_BUDGETS,
        strategies=names,
        strategy_options=_split_strategy_options(dict(strategy_options or {}),
                                                 strategy_names(names)),
        backfill=backfill, scale=scale, run_requests=run_requests, repeat=repeat,
        threads=thread_counts, breakdown=bool(breakdown), force=bool(force),
        interleave=interleave, device_probe=device_probe is not False)
    cfg.loads, cfg.loads_chosen = _loads(cfg, loads), loads is None
    _cap_config(cfg, cap_rule, cap_entries, cap_recoveries, cap_cache)
    if cfg.scale == "paper":
        _paper_workload_options(cfg, fraction=1.0)      # the workload has a paper size
    for s in plan(cfg, cap_fraction=0.5 if cfg.cap_rule == "paper" else None):
        cls = reg.get("strategy", s.strategy).factory      # option names and ranges fail
        parse_options(f"strategy {s.strategy}", cls.options, s.options)   # now, not mid-sweep
        if s.engine_options:
            _check_setting_engine_options(s, engine, engine_cls, cls)
    return cfg


def _check_setting_engine_options(s: Setting, engine: str, engine_cls, strategy_cls) -> None:
    """A variant's ``engine.`` keys name options of the sweep's engine, for a strategy
    that keeps a store (values are checked when the store opens, as ``--engine-option``)."""
    where = f"option --strategies: {s.label!r}"
    if not getattr(strategy_cls, "needs_store", False):
        raise ConfigError(f"{where}: {s.strategy} keeps nothing in an engine, so it takes no "
                          f"{ENGINE_KEY}KEY=VALUE")
    try:
        check_options(engine, s.engine_options, getattr(engine_cls, "OPTIONS", {}))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _loads(cfg: SweepConfig, loads: str | None) -> str:
    """``once`` or ``each`` (see :attr:`SweepConfig.loads`).  Left out: ``once`` where
    a setting runs more than once (repeats, thread counts) at paper scale on an engine
    that can checkpoint, since a load is most of such a sweep's time; else ``each``."""
    from prefixbench.harness.checkpoints import can_checkpoint
    if loads is None:
        runs = cfg.repeat * len(cfg.threads)
        return "once" if (cfg.scale == "paper" and runs > 1
                          and can_checkpoint(cfg.engine)) else "each"
    if loads not in LOADS:
        raise ConfigError(f"option --loads: {loads!r} is not one of {', '.join(LOADS)}")
    if loads == "once" and cfg.scale != "paper":
        raise ConfigError("option --loads: only --scale paper has a load phase to keep")
    if loads == "once" and not can_checkpoint(cfg.engine):
        raise ConfigError(f"option --loads: engine {cfg.engine} cannot checkpoint a store, "
                          "so each run loads (--loads each)")
    return loads


def _positive_int(option: str, value, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, str):
        from prefixbench.harness.recovery import parse_count
        return parse_count(option, value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"option {option}: {value!r} must be a whole number >= 1")
    return value


def _thread_counts(threads) -> tuple:
    """``'1,2'`` (or a sequence of ints) -> ``(1, 2)``: each 1-256, none twice."""
    from prefixbench.harness.bench import check_threads
    if threads is None:
        return (1,)
    if isinstance(threads, str):
        from prefixbench.harness.scaling import parse_thread_list
        counts = parse_thread_list(threads)
    else:
        counts = [check_threads("--threads", int(n)) for n in threads]
    if len(set(counts)) != len(counts):
        raise ConfigError(f"option --threads: {threads!r} lists a thread count twice")
    return tuple(counts)


def _cap_config(cfg: SweepConfig, rule, entries, recoveries, cache) -> None:
    """The cap rule: ``paper`` by default wherever segment-radix-capped runs."""
    runs_capped = cfg.kind == "strategies" and CAPPED in strategy_names(cfg.strategies)
    if rule is not None and rule not in CAP_RULES:
        raise ConfigError(f"option --cap-rule: {rule!r} is not one of {', '.join(CAP_RULES)}")
    volatile = getattr(get_registry().get("engine", cfg.engine).factory, "volatile", False)
    if rule is None:
        rule = "paper" if runs_capped and not volatile else "fixed"
    if rule == "paper" and runs_capped and volatile:
        raise ConfigError(f"option --cap-rule: paper times recoveries in fresh processes and "
                          f"engine {cfg.engine} keeps nothing; give an on-disk engine (-e) or "
                          "--cap-rule fixed")
    cfg.cap_rule = rule
    given = [o for o, v in (("--cap-entries", entries), ("--cap-recoveries", recoveries),
                            ("--cap-cache", cache)) if v is not None]
    if given and not runs_capped:
        raise ConfigError(f"option {given[0]}: this sweep does not run {CAPPED}")
    if rule == "fixed":
        if given:
            raise ConfigError(f"option {given[0]}: only --cap-rule paper chooses a cap")
        return
    if not runs_capped:
        cfg.cap_rule = "fixed"      # nothing to cap: the rule has no effect
        return
    mine = cfg.strategy_options.get(CAPPED, {})
    for opt in ("cap_nodes", "cap_fraction"):
        if opt in mine:
            raise ConfigError(f"option --strategy-option: {CAPPED}:{opt} contradicts "
                              "--cap-rule paper (which chooses the cap); give one of them")
    cfg.cap_entries = _positive_int("--cap-entries", entries, DEFAULT_CAP_ENTRIES)
    cfg.cap_recoveries = _positive_int("--cap-recoveries", recoveries, DEFAULT_CAP_RECOVERIES)
    caprule = _caprule()
    if cfg.cap_entries < caprule.PAPER_ENTRIES:
        raise ConfigError(f"option --cap-entries: {cfg.cap_entries:,} is below the paper "
                          f"rule's {caprule.PAPER_ENTRIES:,} (sarp's recovery is too short to "
                          "compare there)")
    if cfg.cap_recoveries < caprule.PAPER_RECOVERIES:
        raise ConfigError(f"option --cap-recoveries: {cfg.cap_recoveries} is below the paper "
                          f"rule's {caprule.PAPER_RECOVERIES} (it compares medians)")
    if cache is not None:
        cache = str(cache)
        parent = os.path.dirname(os.path.abspath(cache))
        if os.path.isdir(cache) or not os.path.isdir(parent):
            raise ConfigError(f"option --cap-cache: {cache} is not a file path in an "
                              "existing directory")
        cfg.cap_cache = cache


def _caprule():
    """The cap-rule module (tests replace this to stand in for its slow search)."""
    try:
        from prefixbench.harness import caprule
    except ImportError:
        raise ConfigError("option --cap-rule: paper needs prefixbench.harness.caprule, which "
                          "this build lacks; give --cap-rule fixed") from None
    return caprule


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """One replay of a sweep: ``label`` prefixes its pyperf benchmark names."""

    label: str
    strategy: str
    options: dict
    #: engine options of this setting's store over the sweep's (its ``engine.`` keys)
    engine_options: dict = field(default_factory=dict)


def budget_label(budget: int) -> str:
    return "unlimited" if budget == 0 else str(budget)


def _sarp_base(cfg: SweepConfig) -> dict:
    return {"backfill": cfg.backfill, **cfg.strategy_options.get("sarp", {})}


def plan(cfg: SweepConfig, *, cap_fraction: float | None = None) -> list[Setting]:
    """The settings of ``cfg``'s sweep, in replay order (``cap_fraction``: the cap
    rule's choice, applied to segment-radix-capped)."""
    if cfg.kind == "retrieval":
        base = _sarp_base(cfg)
        return [Setting(f"retrieval-{budget_label(b)}", "sarp", {**base, "max_retrieval": b})
                for b in cfg.budgets]
    if cfg.kind == "ablation":
        base = _sarp_base(cfg)
        return [Setting(f"ablation-{label}", "sarp", {**base, **diff})
                for label, diff in ABLATIONS]
    out = []
    for entry in cfg.strategies:
        name, own = split_entry(entry)
        opts = _sarp_base(cfg) if name == "sarp" else dict(cfg.strategy_options.get(name, {}))
        engine = {k[len(ENGINE_KEY):]: v for k, v in own.items() if k.startswith(ENGINE_KEY)}
        own = {k: v for k, v in own.items() if not k.startswith(ENGINE_KEY)}
        if name == CAPPED and cap_fraction is not None and not {"cap_nodes",
                                                                "cap_fraction"} & set(own):
            opts["cap_fraction"] = cap_fraction
        out.append(Setting(entry, name, {**opts, **own}, engine))
    return out


# ----------------------------------------------------------------------------- results
@dataclass
class Row:
    """One setting's replay and the figures a sweep derives from it."""

    setting: Setting
    result: ReplayResult
    #: unique blocks the oracle indexed in the same replay (the per-block denominator)
    indexed_blocks: int
    #: cache bytes the engine was opened with (None: the strategy has no store)
    engine_cache_bytes: int | None
    threads: int = 1
    #: which repeat (0-based) this run was
    repeat: int = 0
    #: requests inserted untimed before the timed ones (paper scale's load phase)
    load_requests: int = 0
    #: seconds the store took to settle after the load (its flushes and compactions)
    settle_seconds: float = 0.0
    #: the values in effect of the strategy's options marked beyond its paper
    beyond_paper: dict = field(default_factory=dict)
    #: the store's table files per level when the timed requests began (LSM engines)
    level_files: dict | None = None

    @property
    def stats(self) -> dict:
        return self.result.strategy_stats

    @property
    def loss(self) -> float:
        return self.result.hit_rate_loss

    @property
    def lost_tokens(self) -> int:
        return self.result.oracle_hit_tokens - self.result.hit_tokens

    @property
    def memory_bytes(self) -> int:
        """Routing bytes for sarp (live directory state), in-memory bytes otherwise."""
        s = self.stats
        return int(s.get("routing_bytes", s.get("memory_bytes", 0)))

    @property
    def memory_bytes_per_block(self) -> float:
        return self.memory_bytes / self.indexed_blocks if self.indexed_blocks else 0.0


@dataclass
class Sizing:
    """ssd-blockhash's store, learnt by replaying it (cache rule ``paper``), or at
    paper scale counted from the trace's unique blocks (``disk_bytes`` None)."""

    entries: int
    logical_bytes: int
    disk_bytes: int | None
    cache_bytes: int


@dataclass
class PaperSize:
    """What ``--scale paper`` ran: the share of the paper's size and the phases."""

    fraction: float
    paper_blocks: int
    workload_options: dict
    requests: int = 0
    unique_blocks: int = 0
    load_requests: int = 0
    run_requests: int = 0
    #: the pre-flight's estimate at that fraction (bytes)
    disk_need: float = 0.0
    memory_need: float = 0.0

    @property
    def fraction_text(self) -> str:
        if self.fraction >= 1:
            return "the full paper size"
        return f"1/{round(1 / self.fraction)} of the paper size"


@dataclass
class Counting:
    """One pass over the trace: request count, unique blocks, and per request how many
    leading blocks were already indexed (chained ids make those a prefix)."""

    requests: int
    unique_blocks: int
    known: object          # int64 array, one per request
    #: int64 array: unique blocks indexed after each request (recover's build stops on it)
    cumulative: object = None


@dataclass
class SweepResult:
    config: SweepConfig
    rows: list
    sizing: Sizing | None
    #: the cache every SSD-backed setting was given
    cache_bytes: int
    #: every run (all repeats and thread counts); ``rows`` are the first count's first
    all_rows: list = field(default_factory=list)
    paper: PaperSize | None = None
    #: the cap rule's choice (a caprule.CapChoice), None under ``cap_rule="fixed"``
    cap_choice: object = None
    #: the trace's share of spans with > 3 alternatives (None: not measured)
    span_share: float | None = None
    #: what the device alone gives the sweep's thread counts (None: not probed)
    device: object = None
    #: the device's read latency between the turns of each repeat (None: not watched)
    device_watch: object = None

    def __post_init__(self):
        if not self.all_rows:
            self.all_rows = list(self.rows)

    def runs(self, label: str, threads: int | None = None) -> list:
        """Every repeat of one setting at one thread count (default: the first)."""
        t = self.config.threads[0] if threads is None else threads
        return [r for r in self.all_rows if r.setting.label == label and r.threads == t]

    def spread(self, label: str, fn, threads: int | None = None) -> tuple:
        """``(median, min, max)`` of ``fn(reference_run, run)`` over the repeats, each
        repeat's run paired with the reference's of the same repeat and thread count."""
        t = self.config.threads[0] if threads is None else threads
        ref = {r.repeat: r for r in self.runs(self.reference.setting.label, t)}
        vals = [fn(ref[r.repeat], r) for r in self.runs(label, t) if r.repeat in ref]
        return _stats(vals)

    def speedup(self, label: str, threads: int) -> tuple:
        """``(median, min, max)`` over repeats of throughput at ``threads`` over the
        first thread count's (same repeat)."""
        base = {r.repeat: r for r in self.runs(label, self.config.threads[0])}
        vals = [r.result.throughput / base[r.repeat].result.throughput
                for r in self.runs(label, threads)
                if r.repeat in base and base[r.repeat].result.throughput]
        return _stats(vals)

    def row(self, label: str) -> Row:
        for r in self.rows:
            if r.setting.label == label:
                return r
        raise KeyError(label)

    @property
    def reference(self) -> Row:
        """Strategies sweep: the row ratios are taken from (the first strategy)."""
        return self.rows[0]

    def throughput_ratio(self, row: Row) -> float:
        """Reference throughput / ``row``'s throughput (how many times faster)."""
        t = row.result.throughput
        return self.reference.result.throughput / t if t else math.inf

    def latency_ratio(self, row: Row, which: str) -> float:
        """``row``'s mean latency / the reference's (how many times slower ``row`` is)."""
        ref = self.reference.result.latency(which)
        return row.result.latency(which) / ref if ref else math.inf

    def report(self):
        """The sweep's suites, read through the schema (what ``show`` reads from files)."""
        import pyperf

        from prefixbench.reports import results
        times, counts = self.suites()
        return results.from_suites("(not written)", [
            (name, pyperf.BenchmarkSuite(b)) for name, b in (("times", times),
                                                             ("counts", counts)) if b])

    def table(self) -> str:
        """What the command prints: rendered from the suites by ``prefixbench.reports``."""
        from prefixbench.reports import show
        return show.render(self.report())

    def disk_ratio(self, row: Row) -> float:
        """Space sweep: ``row``'s data bytes on disk over the reference's."""
        ref = self.reference.result.store_bytes
        return row.result.store_bytes / ref if ref else math.inf

    def entries_ratio(self, row: Row) -> float:
        """Space sweep: ``row``'s stored block-metadata entries over the reference's."""
        ref = self.reference.stats.get("stored_block_entries", 0)
        return row.stats.get("stored_block_entries", 0) / ref if ref else math.inf

    def suites(self) -> tuple[list, list]:
        return _suites(self)

    def breakdown_table(self) -> str:
        """Where each setting's time went (medians over repeats, the first thread count)."""
        from prefixbench.reports import sweeps as report
        return report.breakdown(self.report()) or "no breakdown recorded"

    def write(self, output: str) -> tuple[str, str]:
        """Write OUT.json (times) and OUT.counts.json (counts, sizes); returns both paths."""
        times, counts = self.suites()
        pyperf_io.write_suite(output, times)
        cpath = pyperf_io.counts_path(output)
        pyperf_io.write_suite(cpath, counts)
        return output, cpath


# ----------------------------------------------------------------------------- running
def size_store(cfg: SweepConfig, workload, *, quiet: bool = True) -> Sizing:
    """Replay ssd-blockhash (no oracle) on ``cfg``'s engine and apply the cache rule.

    The sizing replay itself runs with the fixed ``cfg.cache_bytes`` (64 MiB by
    default): the cache changes how fast it runs, never how many entries it writes.
    """
    built = build("ssd-blockhash", cfg.engine, store_dir=None, cache_bytes=cfg.cache_bytes,
                  direct_io=cfg.direct_io, durability=cfg.durability,
                  engine_options=cfg.engine_options)
    try:
        res = replay(built.strategy, workload, limit=cfg.limit, quiet=quiet,
                     desc="[sizing] ssd-blockhash", check=False)
        entries = int(res.strategy_stats["entries"])
    finally:
        built.close()
    logical = entries * (KEY_BYTES + META_SIZE)
    return Sizing(entries, logical, res.store_bytes, int(round(cfg.cache_fraction * logical)))


def _breakdown_kw(cfg: SweepConfig) -> dict:
    return {"breakdown": True} if cfg.breakdown else {}


def _run_engine_options(cfg: SweepConfig) -> dict:
    """The engine options a timed setting runs with: a breakdown also turns on the
    engine's I/O counters where it has a switch for them (RocksDB's statistics),
    unless the user set it, so the breakdown can say how many reads reached the
    device."""
    opts = dict(cfg.engine_options)
    if cfg.breakdown and cfg.engine:
        switch = getattr(get_registry().get("engine", cfg.engine).factory,
                         "io_counters_option", None)
        if switch:
            opts.setdefault(switch, "true")
    return opts


def _store_options(cfg: SweepConfig, setting: Setting) -> dict:
    """The engine options ``setting``'s stores open with: its own over the run's."""
    return {**_run_engine_options(cfg), **setting.engine_options}


class _Tail:
    """A workload of the next ``n`` requests of a shared request iterator: the run
    phase after the load phase consumed the first part (the trace is made once)."""

    def __init__(self, base, requests, n: int):
        self.name = getattr(base, "name", "")
        self.block_size = base.block_size
        self._requests = requests
        self._n = n

    def requests(self):
        if self._n <= 0:
            return
        it = self._requests if not isinstance(self._requests, list) else iter(self._requests)
        for i, req in enumerate(it):
            yield req
            if i + 1 >= self._n:
                return

    def __len__(self) -> int:
        return self._n


#: blocks the counting pass gathers before it looks them up in one vectorised step
COUNT_CHUNK_BLOCKS = 1 << 20


def _merge_disjoint(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two sorted uint64 arrays with no common value, merged in O(len) (no sort)."""
    pos = np.searchsorted(a, b)
    pos += np.arange(len(b), dtype=pos.dtype)
    out = np.empty(len(a) + len(b), dtype=np.uint64)
    keep = np.ones(len(out), dtype=bool)
    keep[pos] = False
    out[pos] = b
    out[keep] = a
    return out


class _SeenBlocks:
    """A growing set of block ids kept as sorted, disjoint NumPy runs (a tiny LSM).

    A lookup is one ``searchsorted`` per run; adding appends a run and merges
    runs of similar size, so each run is more than twice the next and there are
    about log2(n / chunk) of them.  8 bytes per id, about twice that while the
    two largest runs merge: within the pre-flight's counting budget.
    """

    def __init__(self):
        self.runs: list = []

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` (sorted) -> bool array, True where already in the set."""
        found = np.zeros(len(ids), dtype=bool)
        for run in self.runs:
            pos = np.searchsorted(run, ids)
            np.minimum(pos, len(run) - 1, out=pos)
            found |= run[pos] == ids
        return found

    def add(self, ids: np.ndarray) -> None:
        """Add ``ids``: sorted, unique and none of them in the set yet."""
        if not len(ids):
            return
        runs = self.runs
        runs.append(ids)
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            b = runs.pop()
            runs.append(_merge_disjoint(runs.pop(), b))


def _new_per_request(seen: _SeenBlocks, chunk: list, lens: np.ndarray) -> np.ndarray:
    """How many of each request's blocks the set had not seen, in request order (a
    block repeated later in the chunk counts once, at its first request); adds them."""
    cat = np.concatenate(chunk) if chunk else np.empty(0, np.uint64)
    uniq, first = np.unique(cat, return_index=True)
    new = ~seen.contains(uniq)
    owner = np.repeat(np.arange(len(lens)), lens)
    seen.add(uniq[new])
    return np.bincount(owner[first[new]], minlength=len(lens))


def count_pass(workload, *, quiet: bool = True) -> Counting:
    """Unique blocks of the trace and each request's already-indexed prefix length.

    Streams the trace once; requests are gathered into chunks of about
    :data:`COUNT_CHUNK_BLOCKS` blocks and each chunk is counted with NumPy
    (:class:`_SeenBlocks`), so no index strategy is involved.  Chained ids make
    the already-seen blocks of a request a prefix, so their count is its length.
    """
    seen = _SeenBlocks()
    known = np.zeros(max(len(workload), 1), dtype=np.int64)
    cum = np.zeros(len(known), dtype=np.int64)
    total = n = 0
    chunk, lens, size = [], [], 0

    def flush():
        nonlocal total, known, cum
        lens_a = np.asarray(lens, dtype=np.int64)
        new = _new_per_request(seen, chunk, lens_a)
        end = n
        start = end - len(lens_a)
        if end > len(known):
            grow = max(end, 2 * len(known))
            known = np.resize(known, grow)
            cum = np.resize(cum, grow)
        known[start:end] = lens_a - new
        cum[start:end] = total + np.cumsum(new)
        total += int(new.sum())
        chunk.clear()
        lens.clear()

    bar = progress(len(workload), "[count] unique blocks", quiet)
    try:
        for req in workload.requests():
            ids = np.asarray(req.insert_ids, dtype=np.uint64)
            chunk.append(ids)
            lens.append(len(ids))
            size += len(ids)
            n += 1
            if size >= COUNT_CHUNK_BLOCKS:
                flush()
                size = 0
            bar.update(1)
        if lens:
            flush()
    finally:
        bar.close()
    return Counting(n, int(total), known[:n], cum[:n])


def load_phase(strategy, oracle, requests, known, n: int, *, block_metas: bool,
               quiet: bool = True, desc: str = "load",
               samples: int | None = None) -> tuple[float, dict | None]:
    """Untimed: the first ``n`` requests into ``strategy`` by its bulk path and into the
    oracle.  ``block_metas``: metadata from the block alone (what threaded runs use).
    The store then settles (its flushes and compactions finish), so the timed run
    is not charged for the load's write debt.  Returns the seconds that took, and
    for a strategy that counts Table 4's candidates (``candidate_counts``) those
    counts over up to ``samples`` of the load's queries spread evenly over it, each
    before its insert (``samples`` None: :data:`LOAD_MATCH_SAMPLES`; the figures:
    :func:`load_table4`; else None)."""
    meta_size = strategy.meta_size
    samples = LOAD_MATCH_SAMPLES if samples is None else samples
    probe = getattr(strategy, "candidate_counts", None) if samples > 0 else None
    step = -(-n // samples) if probe is not None and n else 0
    sums = [0, 0, 0, 0]
    sampled = 0
    bar = progress(n, f"{desc} [load]", quiet)
    try:
        for i in range(n):
            req = next(requests)
            ids = req.insert_ids
            if step and i % step == 0:
                for k, v in enumerate(probe(req.match_ids)):
                    sums[k] += v
                sampled += 1
            metas = make_metas(ids, 0 if block_metas else i, meta_size)
            strategy.insert_known_prefix(ids, metas, int(known[i]))
            oracle.insert(ids, metas)
            bar.update(1)
    finally:
        bar.close()
    drain = getattr(strategy, "drain", None)
    if callable(drain):
        drain()
    settle = strategy.store.settle() if strategy.store is not None else 0.0
    return settle, (load_table4(sums, sampled) if step else None)


def load_table4(sums, sampled: int) -> dict:
    """Table 4's figures from summed ``candidate_counts`` (entry uses, candidates
    before and after filtering, retrieved) over ``sampled`` queries, named as the
    strategy's own stats with ``load_`` before them."""
    uses = sums[0] or 1
    return {"load_match_samples": sampled,
            **{f"load_{name}": v / uses for name, v in zip(TABLE4_FIGURES, sums[1:])}}


class _Opened:
    """One setting's store, built and loaded, with its oracle: what its timed run needs."""

    def __init__(self, setting, built, oracle, workload, settle: float, load_requests: int,
                 load_counts: dict | None = None):
        self.setting, self.built, self.oracle = setting, built, oracle
        self.workload, self.settle, self.load_requests = workload, settle, load_requests
        self.load_counts = load_counts      # Table 4 over the load's sampled queries
        self.beyond = beyond_paper_options(built.strategy)
        self.engine_cache = built.store.config.cache_bytes if built.store is not None else None
        self.level_files = built.store.level_files() if built.store is not None else None

    def row(self, res, threads: int, repeat: int) -> Row:
        """Close the store and the oracle; the setting's row of ``res``."""
        try:
            indexed = int(self.oracle.stats()["entries"])
        finally:
            self.close()
        if self.load_counts:
            res.strategy_stats = {**res.strategy_stats, **self.load_counts}
        return Row(self.setting, res, indexed, self.engine_cache, threads=threads,
                   repeat=repeat, load_requests=self.load_requests,
                   settle_seconds=self.settle, beyond_paper=self.beyond,
                   level_files=self.level_files)

    def close(self) -> None:
        try:
            self.oracle.close()
        finally:
            self.built.close()


class _NoOracle:
    """Stands in for the oracle in a load whose oracle state is already kept."""

    def insert(self, ids, metas) -> None:
        pass

    def close(self) -> None:
        pass


def _open_setting(cfg: SweepConfig, setting: Setting, workload, cache_bytes: int, *,
                  quiet: bool, desc: str, threaded: bool, counting: Counting | None,
                  load_requests: int, loaded=None) -> _Opened:
    """A fresh store for ``setting`` with its own oracle, the first ``load_requests``
    requests loaded untimed (needs ``counting``); its run phase is the workload's rest,
    up to ``cfg.limit`` requests.  With ``loaded`` (a
    :class:`~prefixbench.harness.checkpoints.LoadedStates`, ``loads="once"``), the
    first open of a setting loads it and keeps it, with the run phase's requests the
    first time; every open (that one too) gets a clone of what was kept."""
    if loaded is None or not load_requests:
        return _load_setting(cfg, setting, workload, cache_bytes, quiet=quiet, desc=desc,
                             threaded=threaded, counting=counting,
                             load_requests=load_requests)
    if not loaded.has(setting.label):
        opened = _load_setting(cfg, setting, workload, cache_bytes, quiet=quiet, desc=desc,
                               threaded=threaded, counting=counting,
                               load_requests=load_requests,
                               oracle=_NoOracle() if loaded.has_oracle else None)
        try:
            if loaded.run_requests is None:
                loaded.run_requests = list(opened.workload.requests())
            loaded.keep(setting.label, opened.built, (opened.settle, opened.load_counts),
                        engine_options=_store_options(cfg, setting))
            if not loaded.has_oracle:
                loaded.keep_oracle(opened.oracle)
        finally:
            opened.close()
        # the loaded oracle and index go before a clone recovers its own: holding both
        # would count the oracle twice (closing a tree does not free it, dropping it does)
        del opened
    built, oracle, (settle, load_counts) = loaded.open(setting.label)
    run = loaded.run_requests
    return _Opened(setting, built, oracle, _Tail(workload, run, len(run)), settle,
                   load_requests, load_counts)


def _load_setting(cfg: SweepConfig, setting: Setting, workload, cache_bytes: int, *,
                  quiet: bool, desc: str, threaded: bool, counting: Counting | None,
                  load_requests: int, oracle=None) -> _Opened:
    """:func:`_open_setting` without kept states: build and load (``oracle``: what
    shadows the load, a fresh oracle by default)."""
    built = build(setting.strategy, cfg.engine, strategy_options=setting.options,
                  store_dir=None, cache_bytes=cache_bytes, direct_io=cfg.direct_io,
                  durability=cfg.durability, engine_options=_store_options(cfg, setting),
                  block_tokens=workload.block_size)
    if oracle is None:
        oracle = make_oracle(built.strategy.meta_size)
    settle, load_counts = 0.0, None
    try:
        it = iter(workload.requests())
        if load_requests:
            settle, load_counts = load_phase(built.strategy, oracle, it, counting.known,
                                             load_requests, block_metas=threaded,
                                             quiet=quiet, desc=desc)
        n = len(workload) - load_requests
        if cfg.limit is not None:
            n = min(n, cfg.limit)
        run = _Tail(workload, it, n)
    except BaseException:
        oracle.close()
        built.close()
        raise
    return _Opened(setting, built, oracle, run, settle, load_requests, load_counts)


def run_setting(cfg: SweepConfig, setting: Setting, workload, cache_bytes: int, *,
                quiet: bool = True, desc: str | None = None, threads: int | None = None,
                counting: Counting | None = None, load_requests: int = 0,
                repeat: int = 0, loaded=None) -> Row:
    """Replay one setting on a fresh store with its own oracle shadow.

    With ``load_requests`` the first that many requests are loaded untimed first (needs
    ``counting``; with ``loaded``, once per sweep); with request threads the run is
    checked afterwards by the oracle."""
    threads = cfg.threads[0] if threads is None else threads
    threaded = cfg.threaded
    desc = desc or setting.label
    opened = _open_setting(cfg, setting, workload, cache_bytes, quiet=quiet, desc=desc,
                           threaded=threaded, counting=counting, load_requests=load_requests,
                           loaded=loaded)
    try:
        strategy, oracle = opened.built.strategy, opened.oracle
        if not threaded:
            res = replay(strategy, opened.workload, oracle=oracle, quiet=quiet, desc=desc,
                         **_breakdown_kw(cfg))
        else:
            res = replay(strategy, opened.workload, threads=threads, threaded=True,
                         oracle=oracle, quiet=quiet, desc=f"{desc} x{threads}",
                         **_breakdown_kw(cfg))
    except BaseException:
        opened.close()
        raise
    return opened.row(res, threads, repeat)


def run_interleaved(cfg: SweepConfig, settings: list, workload, cache_bytes: int, *,
                    quiet: bool = True, counting: Counting | None = None,
                    load_requests: int = 0, repeat: int = 0, first: int = 1,
                    total_runs: int = 0, loaded=None, watch=None) -> list[Row]:
    """Every setting at every thread count built and loaded first, all held at once;
    then their timed runs take turns, ``cfg.interleave`` requests each
    (:func:`replay_interleaved`; at several thread counts every count runs on the
    request-thread path, each thread taking an equal share of a turn).  ``watch`` (a
    ``DeviceWatch``) times its reads before each round of turns, for ``repeat``."""
    pairs = [(s, t) for t in cfg.threads for s in settings]
    threaded = cfg.threaded
    opened: list = []
    try:
        for k, (s, t) in enumerate(pairs):
            opened.append(_open_setting(
                cfg, s, workload, cache_bytes, quiet=quiet,
                desc=f"[{first + k}/{total_runs}] {s.label}" + (f" x{t}" if threaded else ""),
                threaded=threaded, counting=counting, load_requests=load_requests,
                loaded=loaded))
        runs = [dict(strategy=o.built.strategy, workload=o.workload, oracle=o.oracle,
                     **({"threads": t, "threaded": True} if threaded else {}),
                     **_breakdown_kw(cfg)) for o, (_s, t) in zip(opened, pairs)]
        results = replay_interleaved(
            runs, cfg.interleave, quiet=quiet,
            desc=f"[{first}-{first + len(pairs) - 1}/{total_runs}] interleaved",
            before_round=None if watch is None else (lambda: watch.sample(repeat)))
    except BaseException:
        for o in opened:
            o.close()
        raise
    rows = []
    for k, (o, res) in enumerate(zip(opened, results)):
        try:
            rows.append(o.row(res, pairs[k][1], repeat))
        except BaseException:
            for rest in opened[k + 1:]:
                rest.close()
            raise
    return rows


def _paper_workload_options(cfg: SweepConfig, fraction: float) -> dict:
    """The workload options for ``fraction`` of the paper size, the user's own
    (seed, ...) kept; a size option of the user's contradicts the scale."""
    from prefixbench.workloads import profiles
    blocks = getattr(profiles, "PAPER_BLOCKS", None)
    options = getattr(profiles, "paper_workload_options", None)
    if blocks is None or options is None:
        raise ConfigError("option --scale: this build has no paper sizes "
                          "(prefixbench.workloads.profiles.PAPER_BLOCKS)")
    if cfg.workload not in blocks:
        raise ConfigError(f"option --scale: workload {cfg.workload} has no paper size; "
                          f"--scale paper runs {', '.join(blocks)}")
    sized = options(cfg.workload, fraction)
    clash = sorted(set(sized) & set(cfg.workload_options))
    if clash:
        raise ConfigError(f"option --workload-option: {clash[0]}= sets the size, which "
                          "--scale paper chooses; leave it out or use --scale small")
    return {**cfg.workload_options, **sized}


def paper_size(cfg: SweepConfig, *, free=None) -> PaperSize:
    """The largest power-of-two fraction of the paper's size the pre-flight fits
    (the full size under ``force``), or one ConfigError line naming what is short."""
    from prefixbench.harness import preflight
    from prefixbench.workloads import profiles

    paper_blocks = int(profiles.PAPER_BLOCKS[cfg.workload])
    cache = cfg.cache_bytes
    f = 1.0
    first = None
    while True:
        entries = int(paper_blocks * f)
        if cfg.cache_rule == "paper":
            cache = int(round(cfg.cache_fraction * entries * (KEY_BYTES + META_SIZE)))
        # interleaved runs hold every setting (variants too) at every thread count at once
        names = ([split_entry(e)[0] for e in cfg.strategies] * len(cfg.threads)
                 if cfg.interleave else strategy_names(cfg.strategies))
        need = preflight.sweep_need(entries, names, cfg.engine, cache_bytes=cache,
                                    run_requests=cfg.run_requests,
                                    engine_options=cfg.engine_options,
                                    together=bool(cfg.interleave), kept=cfg.loads == "once")
        short = preflight.shortfall(need, free or preflight.free_space(need.disk_dir))
        first = first or short
        if short is None or cfg.force:
            return PaperSize(f, paper_blocks, _paper_workload_options(cfg, f),
                             disk_need=need.disk, memory_need=need.memory)
        if f / 2 < MIN_PAPER_FRACTION:
            raise ConfigError(f"sweep strategies --scale paper: {cfg.workload} needs {first} "
                              f"at its paper size ({paper_blocks:,} blocks) and does not fit "
                              f"even at 1/{round(1 / f)}; free space, choose a smaller "
                              "engine or strategy list, or give --force")
        f /= 2


def _choose_cap(cfg: SweepConfig, workload_options: dict, cache: int, quiet: bool):
    """The paper's cap rule (or the saved choice in ``cap_cache``)."""
    caprule = _caprule()
    strategy_options = {"sarp": _sarp_base(cfg),
                        CAPPED: dict(cfg.strategy_options.get(CAPPED, {}))}
    key = dict(workload=cfg.workload, workload_options=workload_options, engine=cfg.engine,
               entries=cfg.cap_entries, engine_options=cfg.engine_options,
               strategy_options=strategy_options)
    if cfg.cap_cache and os.path.exists(cfg.cap_cache):
        choice = caprule.load_choice(cfg.cap_cache, **key)
        if choice is not None:
            return choice
    from prefixbench.harness import preflight
    from prefixbench.harness.recovery import fmt_count
    for name in ("sarp", CAPPED):        # the search builds each to cap_entries, one at a time
        need = preflight.recover_need(cfg.cap_entries, name, cfg.engine, cache_bytes=cache,
                                      engine_options=cfg.engine_options)
        preflight.check(f"--cap-rule paper: {name} at --cap-entries "
                        f"{fmt_count(cfg.cap_entries)}", need, "--cap-entries", force=cfg.force)
    choice = caprule.choose_cap(recoveries=cfg.cap_recoveries, cache_bytes=cache, quiet=quiet,
                                **key)
    if cfg.cap_cache:
        caprule.save_choice(cfg.cap_cache, choice)
    return choice


def run_sweep(cfg: SweepConfig, *, quiet: bool = True) -> SweepResult:
    """Every setting of ``cfg``, ``repeat`` times at each thread count, one after the
    other (repeat-major); at paper scale each run loads, then times the run phase."""
    paper = counting = None
    sizing = None
    cache = cfg.cache_bytes
    if cfg.scale == "paper":
        paper = paper_size(cfg)
        if cfg.loads == "once" and cfg.loads_chosen:
            each = paper_size(replace(cfg, loads="each"))
            if each.fraction > paper.fraction:
                # keeping every setting's load would not fit the size a load per run
                # fits: the trace's size comes first
                cfg.loads, paper = "each", each
        workload = make_workload(cfg.workload, paper.workload_options)
        total = len(workload)
        if cfg.run_requests > total:
            raise ConfigError(f"option --run-requests: {cfg.run_requests:,} is more than the "
                              f"trace's {total:,} requests")
        counting = count_pass(workload, quiet=quiet)
        if cfg.run_requests > counting.requests:
            raise ConfigError(f"option --run-requests: {cfg.run_requests:,} is more than the "
                              f"trace's {counting.requests:,} requests")
        paper.requests, paper.unique_blocks = counting.requests, counting.unique_blocks
        paper.run_requests = cfg.run_requests
        paper.load_requests = counting.requests - cfg.run_requests
        if cfg.cache_rule == "paper":
            logical = counting.unique_blocks * (KEY_BYTES + META_SIZE)
            cache = int(round(cfg.cache_fraction * logical))
            sizing = Sizing(counting.unique_blocks, logical, None, cache)
        wl_options = paper.workload_options
    else:
        workload = make_workload(cfg.workload, cfg.workload_options)
        if cfg.cache_rule == "paper":
            sizing = size_store(cfg, workload, quiet=quiet)
            cache = sizing.cache_bytes
        wl_options = cfg.workload_options
    choice = None
    if cfg.cap_rule == "paper":
        choice = _choose_cap(cfg, wl_options, cache, quiet)
    settings = plan(cfg, cap_fraction=choice.fraction if choice is not None else None)
    device = _probe_device(cfg, quiet) if cfg.probes_device else None
    watch = None
    runs = []
    total_runs = cfg.repeat * len(cfg.threads) * len(settings)
    k = 0
    load = paper.load_requests if paper else 0
    loaded = None
    if cfg.loads == "once":
        from prefixbench.harness.checkpoints import LoadedStates
        loaded = LoadedStates(cfg.engine, cache_bytes=cache, direct_io=cfg.direct_io,
                              durability=cfg.durability)
    try:
        if cfg.watches_device:
            from prefixbench.harness import deviceprobe
            watch = deviceprobe.DeviceWatch()
            watch.open()
            watch.sample(deviceprobe.BEFORE_LOADS, deviceprobe.BEFORE_LOADS_READS)
        for rep in range(cfg.repeat):
            if cfg.interleave:
                runs.extend(run_interleaved(cfg, settings, workload, cache, quiet=quiet,
                                            counting=counting, load_requests=load, repeat=rep,
                                            first=k + 1, total_runs=total_runs, loaded=loaded,
                                            watch=watch))
                k += len(settings) * len(cfg.threads)
                continue
            for t in cfg.threads:
                for s in settings:
                    k += 1
                    runs.append(run_setting(
                        cfg, s, workload, cache, quiet=quiet,
                        desc=f"[{k}/{total_runs}] {s.label}", threads=t, counting=counting,
                        load_requests=load, repeat=rep, loaded=loaded))
    finally:
        if watch is not None:
            watch.close()
        if loaded is not None:
            loaded.close()
    first = [r for r in runs if r.repeat == 0 and r.threads == cfg.threads[0]]
    spans = None
    if cfg.kind == "strategies" and cfg.workload in PAPER_SPAN_SHARE and \
            first[0].indexed_blocks <= SPAN_STAT_MAX_BLOCKS:
        from prefixbench.workloads.describe import describe
        spans = float(describe(workload)["span_share_gt3"])
    return SweepResult(cfg, first, sizing, cache, all_rows=runs, paper=paper,
                       cap_choice=choice, span_share=spans, device=device, device_watch=watch)


def _probe_device(cfg: SweepConfig, quiet: bool):
    """The device's own scaling over the sweep's thread counts, where the stores go."""
    from prefixbench.harness.scaling import probe_device
    return probe_device(cfg.threads, quiet)


def _stats(vals) -> tuple:
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return (math.nan, math.nan, math.nan)
    return (statistics.median(vals), min(vals), max(vals))


# ----------------------------------------------------------------------------- pyperf
#: figures only a sweep knows (strategy counters arrive from pyperf_io as ``index-*``);
#: each is added to the counts suite unless pyperf_io already exports that name
_SWEEP_COUNTS = (
    ("lost-tokens", "integer", lambda r: r.lost_tokens),
    ("hit-rate-loss-ppm", "integer", lambda r: r.loss * 1e6),
    ("false-hits", "integer", lambda r: r.result.false_hits),
    ("indexed-blocks", "integer", lambda r: r.indexed_blocks),
    ("memory-bytes", "byte", lambda r: r.memory_bytes),
    ("memory-bytes-per-indexed-block", "byte", lambda r: r.memory_bytes_per_block),
    ("engine-cache-bytes", "byte", lambda r: r.engine_cache_bytes or 0),
)
#: space sweep only: ratios to the reference, in parts per million (pyperf values are numbers)
_SPACE_COUNTS = (
    ("disk-ratio-to-reference-ppm", "integer", lambda res, r: res.disk_ratio(r) * 1e6),
    ("entries-ratio-to-reference-ppm", "integer", lambda res, r: res.entries_ratio(r) * 1e6),
)


def level_files_text(files: dict) -> str:
    """``{0: 4, 6: 41}`` as ``L0 4, L6 41`` (``none`` for an empty store)."""
    return ", ".join(f"L{level} {n}" for level, n in sorted(files.items())) or "none"


def _prefixed(bench, prefix: str):
    return pyperf_io.prefixed(bench, prefix)


def _scalar_metadata(d: dict) -> dict:
    """pyperf metadata values are strings or numbers: anything else as JSON."""
    return {k: v if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            else json.dumps(v, default=str) for k, v in d.items()}


def _sweep_metadata(res: SweepResult) -> dict:
    """What every benchmark of the sweep shares: scale, phases, the cap choice."""
    md = {"scale": res.config.scale, "repeats": res.config.repeat}
    if res.paper is not None:
        p = res.paper
        md.update({"paper_fraction": p.fraction, "paper_blocks": p.paper_blocks,
                   "load_requests": p.load_requests, "run_requests": p.run_requests,
                   "unique_blocks": p.unique_blocks})
    if res.cap_choice is not None:
        md.update(_scalar_metadata(res.cap_choice.metadata()))
    if res.span_share is not None:
        md["span_share_gt3"] = round(res.span_share, 6)
    if res.device is not None:
        md["device_probe"] = res.device.metadata_text()
    if res.device_watch is not None:
        md["device_watch"] = res.device_watch.metadata_text()
    if res.config.kind == "strategies":
        md.update({"paper_request_threads": PAPER_REQUEST_THREADS,
                   "paper_rocksdb_threads": PAPER_ROCKSDB_THREADS,
                   "span_share_max_blocks": SPAN_STAT_MAX_BLOCKS})
        if res.config.workload in PAPER_TABLE4:
            md.update({"table4_paper": json.dumps(list(PAPER_TABLE4[res.config.workload])),
                       "calibration_tolerance": CALIBRATION_TOLERANCE})
            if res.config.workload in PAPER_SPAN_SHARE:
                md["span_share_paper"] = PAPER_SPAN_SHARE[res.config.workload]
    if res.paper is not None and res.paper.fraction < 1:
        md.update({"paper_disk_need": float(res.paper.disk_need),
                   "paper_memory_need": float(res.paper.memory_need)})
    return md


def _text_stats(stats: dict) -> dict:
    """A strategy's counters that are text (sarp's geometry), which no figure carries."""
    text = {k: v for k, v in sorted(stats.items()) if isinstance(v, str) and v}
    return {"index_text": json.dumps(text, separators=(",", ":"))} if text else {}


def _merge(benches: list) -> list:
    """Benchmarks of the same name (one per repeat) as one benchmark with every run."""
    import pyperf
    by: dict = {}
    for b in benches:
        by.setdefault(b.get_name(), []).append(b)
    out = []
    for group in by.values():
        if len(group) == 1:
            out.append(group[0])
        else:
            out.append(pyperf.Benchmark([run for b in group for run in b.get_runs()]))
    return out


def setting_name(row: Row) -> str:
    """A run's benchmark-name prefix: the setting, plus ``-threads-N`` above one thread."""
    return row.setting.label if row.threads == 1 else f"{row.setting.label}-threads-{row.threads}"


def _suites(res: SweepResult) -> tuple[list, list]:
    cfg = res.config
    times, counts = [], []
    shared = _sweep_metadata(res)
    # every setting's matches binned by sarp's windows, so the bins mean the same for all
    window = next((int(r.stats["geometry_S"]) for r in res.all_rows
                   if r.stats.get("geometry_S")), 0) if cfg.kind == "strategies" else 0
    if window:
        shared["windows_segment_blocks"] = window
    for r in res.all_rows:
        s = r.setting
        label = setting_name(r)
        config = {**cfg.describe(), "setting": s.label, "strategy_options": s.options,
                  "beyond_paper_options": r.beyond_paper, "cache_bytes": r.engine_cache_bytes}
        if s.engine_options:
            config["setting_engine_options"] = s.engine_options
            config["engine_options"] = {**cfg.engine_options, **s.engine_options}
        md = pyperf_io.run_metadata(s.strategy, cfg.engine if r.engine_cache_bytes is not None
                                    else None, cfg.workload, config)
        md.update({"sweep": cfg.kind, "setting": s.label, **shared})
        md.update({"threads": r.threads, "repeat": r.repeat})
        if r.load_requests:
            md["load_settle_seconds"] = round(r.settle_seconds, 6)
        if r.level_files is not None:
            md["store_level_files"] = level_files_text(r.level_files)
        md.update(_text_stats(r.stats))
        if r.engine_cache_bytes is not None:
            md["cache_bytes"] = r.engine_cache_bytes
        t, c = pyperf_io.replay_suites(r.result, md, window)
        t = [_prefixed(b, label) for b in t]
        c = [_prefixed(b, label) for b in c]
        zeros = []
        have = {b.get_name() for b in c}
        for name, unit, f in _SWEEP_COUNTS:
            full = f"{label}-{name}"
            if full not in have:
                b = pyperf_io._one_shot(full, unit, f(r), md)
                if b is not None:
                    c.append(b)
                elif f(r) == 0 and name != "engine-cache-bytes":   # no engine: not a 0
                    zeros.append(full)
        if cfg.kind == "space":
            for name, unit, f in _SPACE_COUNTS:
                b = pyperf_io._one_shot(f"{label}-{name}", unit, f(res, r), md)
                if b is not None:
                    c.append(b)
                elif f(res, r) == 0:
                    zeros.append(f"{label}-{name}")
        times += pyperf_io.with_zeros(t, zeros)
        counts += pyperf_io.with_zeros(c, zeros)
    times, counts = _merge(times), _merge(counts)
    if res.sizing is not None:
        md = pyperf_io.run_metadata("ssd-blockhash", cfg.engine, cfg.workload,
                                    {**cfg.describe(), "setting": "sizing"})
        md.update({"sweep": cfg.kind, "setting": "sizing", **shared})
        for name, unit, v in (("sizing-ssd-blockhash-entries", "integer", res.sizing.entries),
                              ("sizing-ssd-blockhash-logical-bytes", "byte",
                               res.sizing.logical_bytes),
                              ("sizing-ssd-blockhash-disk-bytes", "byte", res.sizing.disk_bytes),
                              ("sizing-cache-bytes", "byte", res.sizing.cache_bytes)):
            b = pyperf_io._one_shot(name, unit, v, md)
            if b is not None:
                counts.append(b)
    return times, counts
