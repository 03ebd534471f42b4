"""pyperf integration: one-shot figures as pyperf Runs, repeated units via pyperf.Runner.

Benchmark names never contain the strategy or engine (those go in metadata
and file names), so ``python -m pyperf compare_to a.json b.json --table``
lines up two strategies or two engines on the same workload.  Times are in
seconds and land in ``OUT.json``; counts and sizes (integer/byte units) land
in ``OUT.counts.json`` because compare_to's geometric mean must not mix units.

A replay that ran with ``breakdown`` adds one time benchmark per side and phase,
``match-time-<phase>`` and ``insert-time-<phase>`` (``match-time-storage``,
``insert-time-lock``, ..., ``match-time-rest``): mean seconds per request, like
the latency means, so compare_to lines up where two strategies spend their
time.  A phase that never ran in a run has no benchmark (pyperf refuses 0).
The counts suite gets ``match-phase-switches`` and ``insert-phase-switches``
(clock switches per request).  Its metadata carries ``breakdown_overhead`` (estimated clock time per match
over the mean match latency), ``breakdown_overhead_insert`` and
``breakdown_pair_ns``.

Where the engine keeps I/O counters (RocksDB with ``statistics=true``) the counts
suite gets :data:`IO_FIGURES`: file reads, cache hits and memtable hits per
request, and the compaction and flush bytes of the timed requests.

A bounded-pool run (``--pool-blocks``, :mod:`prefixbench.harness.pools`) adds
``remove-latency-{mean,p50,p90,p99,p999,max}`` (per remove call) to the times and
:data:`POOL_COUNT_FIGURES` (evictions and removals per request, the any-worker
hit tokens beside the oracle's, missing locations, blocks held) to the counts;
its metadata carries the pool configuration (``pool_blocks``, ``pool_evict``,
``pool_workers``, ``pool_route``, ``pool_route_seed``) and ``index_entries_series``: a JSON list of
``[requests so far, index entries, blocks held in all pools]`` samples.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile

import pyperf

from prefixbench import schema
from prefixbench.harness import allocator
from prefixbench.harness.replay import ReplayResult


def _latency(which: str, q: float | None, res: ReplayResult) -> float:
    return res.latency(which, q)


#: (benchmark name, how to read it from a ReplayResult) -- times in seconds
TIME_FIGURES = (
    ("replay-time-per-request", lambda r: 1.0 / r.throughput if r.throughput else 0.0),
) + tuple(
    (f"{which}-latency-{label}", functools.partial(_latency, which, q))
    for which in ("match", "insert", "request")
    for label, q in (("mean", None), ("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9),
                     ("max", 100))
)

#: counts and sizes
COUNT_FIGURES = (
    ("requests", "integer", lambda r: r.requests),
    ("prompt-tokens", "integer", lambda r: r.prompt_tokens),
    ("hit-tokens", "integer", lambda r: r.hit_tokens),
    ("oracle-hit-tokens", "integer", lambda r: r.oracle_hit_tokens),
    ("token-hit-rate-ppm", "integer", lambda r: round(r.hit_rate * 1e6)),
    ("store-reads-per-match", "integer", lambda r: r.reads_per_match),
    ("store-bytes", "byte", lambda r: r.store_bytes),
    ("store-log-bytes", "byte", lambda r: r.store_log_bytes),
    ("store-memory-outside-budget-bytes", "byte", lambda r: r.store_memory_bytes),
    ("store-logical-bytes", "byte", lambda r: r.logical_bytes),
    ("store-records", "integer", lambda r: r.store_records),
    ("space-amplification", "integer", lambda r: r.space_amplification),
    ("cpu-cores-busy", "integer", lambda r: r.cores_busy),
)


def _per_request(key: str, res: ReplayResult):
    io = res.store_io
    return io[key] / res.requests if key in io and res.requests else None


def _io_total(key: str, res: ReplayResult):
    return res.store_io.get(key)


#: the engine's I/O counters over the timed requests; only where the engine keeps
#: them (RocksDB with statistics=true), so each figure may be absent
IO_FIGURES = (
    ("store-device-reads-per-request", "integer",
     functools.partial(_per_request, "device_reads")),
    ("store-cache-hits-per-request", "integer", functools.partial(_per_request, "cache_hits")),
    ("store-memtable-hits-per-request", "integer",
     functools.partial(_per_request, "memtable_hits")),
    ("store-compaction-bytes", "byte", functools.partial(_io_total, "compaction_bytes")),
    ("store-flush-bytes", "byte", functools.partial(_io_total, "flush_bytes")),
)


#: a pool run's remove latency (seconds, per remove call)
POOL_TIME_FIGURES = tuple(
    (f"remove-latency-{label}", functools.partial(_latency, "remove", q))
    for label, q in (("mean", None), ("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9),
                     ("max", 100)))

#: a pool run's counts
POOL_COUNT_FIGURES = (
    ("evictions-per-request", "integer",
     lambda r: r.evictions / r.requests if r.requests else 0),
    ("removals-per-request", "integer",
     lambda r: r.removals / r.requests if r.requests else 0),
    ("any-worker-hit-tokens", "integer", lambda r: r.any_hit_tokens),
    ("oracle-any-worker-hit-tokens", "integer", lambda r: r.oracle_any_hit_tokens),
    ("missing-locations", "integer", lambda r: r.missing_locations),
    ("pool-blocks-held", "integer", lambda r: r.pool_held),
)


def pool_metadata(res: ReplayResult) -> dict:
    """A pool run's configuration and its index-entries series (empty without pools)."""
    if not res.pool:
        return {}
    md = {k: v for k, v in res.pool.items()}
    md["index_entries_series"] = json.dumps([list(s) for s in res.entries_series],
                                            separators=(",", ":"))
    return md


def strategy_figures(stats: dict) -> list[tuple[str, str, float]]:
    """Every numeric strategy counter as ``index-<name>`` (bytes for ``*_bytes``).

    Strategies report different counters (SARP's candidate counts, the
    capped radix's spills, ...); compare_to lines up whatever two runs share.
    """
    out = []
    for key, value in sorted(stats.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        unit = "byte" if key.endswith("bytes") else "integer"
        out.append((f"index-{key.replace('_', '-')}", unit, value))
    return out


def git_commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    out = {"python_version": platform.python_version()}
    from importlib.metadata import PackageNotFoundError, version
    for pkg in ("prefixbench", "numpy", "pyperf", "lmdb", "rocksdict", "wiredtiger"):
        try:
            out[f"{pkg}_version"] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _mem_total() -> str:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown"


def _store_device(path: str) -> str:
    """The block device (and whether it rotates) under ``path``, from mountinfo."""
    try:
        dev = os.stat(path).st_dev
        want = f"{os.major(dev)}:{os.minor(dev)}"
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                parts = line.split()
                if parts[2] == want and " - " in line:
                    fstype, source = line.split(" - ", 1)[1].split()[:2]
                    name = os.path.basename(source)
                    rot = f"/sys/class/block/{name}/queue/rotational"
                    kind = ""
                    if os.path.exists(rot):
                        kind = ", hdd" if open(rot).read().strip() == "1" else ", ssd"
                    return f"{source} ({fstype}{kind})"
    except (OSError, IndexError, ValueError):
        pass
    return "unknown"


@functools.lru_cache(maxsize=8)
def machine_metadata(store_dir: str | None = None) -> dict:
    """The machine under :data:`schema.MACHINE_KEYS`; the store's device is the one
    holding ``store_dir`` (default: the temporary directory stores are built in)."""
    return {"cpu_model_name": _cpu_model(), "cpu_count": os.cpu_count() or 1,
            "mem_total": _mem_total(),
            "store_device": _store_device(store_dir or tempfile.gettempdir()),
            "allocator": allocator.detect()}


def run_metadata(strategy: str, engine: str | None, workload: str, config: dict) -> dict:
    """Metadata recorded in every benchmark of a run (str/int/float, one line each):
    the schema version and the machine too, which every report caption prints."""
    from prefixbench import twins
    md = {
        "strategy": strategy,
        "engine": engine or "none",
        "workload": workload,
        "config": json.dumps(config, sort_keys=True, default=str),
        "git_commit": git_commit(),
        "prefixbench_argv": " ".join(sys.argv[1:])[:500] or "(none)",
        # "cython" or "pure-python" (PREFIXBENCH_PURE=1): never compare the two unknowingly
        "prefixbench_impl": twins.IMPLEMENTATION,
    }
    md.update(versions())
    md.update(schema.schema_metadata())
    md.update(machine_metadata())
    return md


#: open :func:`collecting_zeros` blocks, innermost last
_ZERO_SINKS: list = []


@contextlib.contextmanager
def collecting_zeros():
    """Within the block, the names :func:`value_runs` leaves out because every value
    was 0 (pyperf refuses 0); the writer lists them with :func:`with_zeros`."""
    names: list = []
    _ZERO_SINKS.append(names)
    try:
        yield names
    finally:
        _ZERO_SINKS.remove(names)


def with_zeros(benches: list, names) -> list:
    """``benches`` with ``names`` added to every run's ``zero_figures`` metadata, so a
    reader gives those figures 0 instead of leaving them blank."""
    names = [n for n in names if n]
    if not names:
        return list(benches)
    out = []
    for b in benches:
        runs = []
        for run in b.get_runs():
            md = run.get_metadata()
            md.update(schema.zero_metadata(str(md.get(schema.ZEROS_KEY, "")).split() + names))
            runs.append(pyperf.Run(run.values, warmups=run.warmups or None, metadata=md,
                                   collect_metadata=False))
        out.append(pyperf.Benchmark(runs))
    return out


def prefixed(bench: pyperf.Benchmark, prefix: str) -> pyperf.Benchmark:
    """``bench`` renamed ``PREFIX-name``, the zeros it lists renamed alike."""
    runs = []
    for run in bench.get_runs():
        md = dict(run.get_metadata(), name=f"{prefix}-{bench.get_name()}")
        zeros = str(md.pop(schema.ZEROS_KEY, "")).split()
        md.update(schema.zero_metadata(f"{prefix}-{z}" for z in zeros))
        runs.append(pyperf.Run(run.values, warmups=run.warmups or None, metadata=md,
                               collect_metadata=False))
    return pyperf.Benchmark(runs)


def value_runs(name: str, unit: str, values, metadata: dict,
               warmup: float | None = None) -> pyperf.Benchmark | None:
    """A benchmark of one pyperf run per value (the first run carrying ``warmup`` as
    its pyperf warmup).  Zero, None and infinite values are left out - pyperf refuses
    0, and absent means "none happened"; None when no value is left.  Inside
    :func:`collecting_zeros`, a name whose values were all 0 is collected."""
    given = [v for v in values if v is not None]
    vals = [float(v) for v in given if v > 0 and not math.isinf(v)]
    if not vals:
        if given and _ZERO_SINKS and all(v == 0 for v in given):
            _ZERO_SINKS[-1].append(name)
        return None
    md = dict(metadata, name=name, unit=unit, loops=1)
    return pyperf.Benchmark([
        pyperf.Run([v], warmups=[(1, float(warmup))] if warmup and i == 0 else None,
                   metadata=md, collect_metadata=False)
        for i, v in enumerate(vals)])


def _one_shot(name: str, unit: str, value: float, metadata: dict) -> pyperf.Benchmark | None:
    return value_runs(name, unit, [value], metadata)


def renamed(bench: pyperf.Benchmark, name: str) -> pyperf.Benchmark:
    """``bench`` under another name (sweeps and scale prefix their settings' names)."""
    return pyperf.Benchmark([pyperf.Run(run.values, metadata=dict(run.get_metadata(), name=name),
                                        collect_metadata=False) for run in bench.get_runs()])


def breakdown_figures(res: ReplayResult) -> list[tuple[str, float]]:
    """``(name, mean seconds per request)`` per side and phase of a breakdown run,
    in the phases' table order (``rest`` last), then the request thread's CPU time
    per side; empty without a breakdown."""
    parts = [(f"{which}-time-{name.replace('_', '-')}", res.phase_mean(which, name))
             for which in ("match", "insert") for name in res.phase_ns]
    if res.thread_cpu_ns:
        parts += [(f"{which}-cpu-time", res.cpu_mean(which)) for which in ("match", "insert")]
    return parts


def breakdown_metadata(res: ReplayResult) -> dict:
    """The clock's overhead figures of a breakdown run (empty without one)."""
    if not res.breakdown:
        return {}
    return {"breakdown_overhead": round(res.breakdown_overhead, 6),
            "breakdown_overhead_insert": round(res.breakdown_overhead_insert, 6),
            "breakdown_pair_ns": round(res.breakdown_pair_ns, 1)}


def replay_suites(res: ReplayResult, metadata: dict,
                  segment_blocks: int = 0) -> tuple[list, list]:
    """(time benchmarks, count/size benchmarks) for one replay; the figures whose
    value was 0 are listed in every benchmark's ``zero_figures``.  With
    ``segment_blocks``, match latency per bin of windows that long (see
    :func:`windows_figures`)."""
    with collecting_zeros() as zeros:
        times, counts = _replay_suites(res, metadata, segment_blocks)
    return with_zeros(times, zeros), with_zeros(counts, zeros)


def _replay_suites(res: ReplayResult, metadata: dict,
                   segment_blocks: int = 0) -> tuple[list, list]:
    md = dict(metadata)
    md.update({
        "token_hit_rate": round(res.hit_rate, 9),
        "oracle_hit_rate": round(res.oracle_hit_rate, 9),
        "hit_rate_loss": round(res.hit_rate_loss, 9),
        "false_hits": res.false_hits,
        "throughput_rps": round(res.throughput, 3),
        "gc": res.gc_mode,
    })
    md.update(breakdown_metadata(res))
    md.update(pool_metadata(res))
    times = [_one_shot(n, "second", f(res), md) for n, f in TIME_FIGURES]
    if res.pool:
        times += [_one_shot(n, "second", f(res), md) for n, f in POOL_TIME_FIGURES]
    times += [_one_shot(n, "second", v, md) for n, v in breakdown_figures(res)]
    counts = [_one_shot(n, u, f(res), md) for n, u, f in COUNT_FIGURES]
    for n, u, v in windows_figures(res, segment_blocks) if segment_blocks else ():
        (times if u == "second" else counts).append(_one_shot(n, u, v, md))
    counts += [_one_shot(n, u, v, md) for n, u, f in IO_FIGURES if (v := f(res)) is not None]
    counts += [_one_shot(n, u, v, md) for n, u, v in strategy_figures(res.strategy_stats)]
    if res.pool:
        counts += [_one_shot(n, u, f(res), md) for n, u, f in POOL_COUNT_FIGURES]
    if res.breakdown:          # the clock's switches per request, what its overhead counts
        counts += [_one_shot(f"{which}-phase-switches", "integer", float(sw.mean()), md)
                   for which, sw in zip(("match", "insert"), res.phase_switches) if len(sw)]
    return [b for b in times if b], [b for b in counts if b]


#: windows-per-query bins of the match latency table: (label, fewest, most windows)
WINDOW_BINS = (("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4", 4, 4), ("5-8", 5, 8),
               ("9-16", 9, 16), ("17-plus", 17, None))


def windows_figures(res: ReplayResult, segment_blocks: int) -> list:
    """``(name, unit, value)`` of the mean match latency and the request count per bin
    of windows the query spans, windows being ``segment_blocks`` long; bins no request
    fell in are left out, and so is everything for a replay that kept no query sizes."""
    qb = res.query_blocks
    if not len(qb) or len(qb) != len(res.match_ns) or segment_blocks < 1:
        return []
    windows = -(-qb // segment_blocks)
    out = []
    for label, lo, hi in WINDOW_BINS:
        sel = (windows >= lo) if hi is None else ((windows >= lo) & (windows <= hi))
        n = int(sel.sum())
        if n:
            out.append((f"match-latency-windows-{label}", "second",
                        float(res.match_ns[sel].mean()) / 1e9))
            out.append((f"match-requests-windows-{label}", "integer", n))
    return out


def figure_benchmarks(figures: dict, metadata: dict, prefix: str = "") -> list:
    """``{schema name: value}`` (:func:`schema.from_json`) as benchmarks in each figure's
    pyperf unit, named ``PREFIX-name`` when a prefix is given; zeros listed."""
    keep, zeros = schema.split_zeros(figures)
    full = (lambda n: f"{prefix}-{n}") if prefix else (lambda n: n)
    benches = [value_runs(full(n), schema.figure(n).pyperf_unit, [v], metadata)
               for n, v in keep.items()]
    return with_zeros([b for b in benches if b], [full(z) for z in zeros])


def describe_benchmarks(facts: dict, options: dict) -> list:
    """``workload describe``'s figures (``workload-*``) as one suite's benchmarks."""
    md = run_metadata("none", None, str(facts.get("workload", "?")), {"workload_options":
                                                                      options})
    md["command"] = "describe"
    return figure_benchmarks(schema.from_json(facts), md)


def counts_path(out: str) -> str:
    root, ext = os.path.splitext(out)
    return f"{root}.counts{ext or '.json'}"


def write_suite(path: str, benchmarks: list) -> None:
    if not benchmarks:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    pyperf.BenchmarkSuite(benchmarks).dump(path, replace=True)
