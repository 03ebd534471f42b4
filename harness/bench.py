"""``prefixbench run``: one replay with the oracle shadow, then pyperf.Runner.

1. The main process replays the whole workload once (progress bar, oracle
   shadow, false-hit check) and records the one-shot figures: throughput,
   latency mean/p50/p99/p999, hit rate, store reads, sizes.
2. Unless ``--no-runner``, pyperf.Runner measures the repeating unit: match
   latency over an index warmed by replaying the first part of the workload.
   Its worker processes each rebuild that warmed index in a private store.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pyperf

from prefixbench.harness import allocator, pyperf_io
from prefixbench.harness.build import beyond_paper_options, build
from prefixbench.errors import ConfigError, PrefixbenchError
from prefixbench.harness.replay import ReplayResult, replay
from prefixbench.registry import get_registry


@dataclass
class RunSpec:
    strategy: str
    engine: str | None
    workload: str
    strategy_options: dict = field(default_factory=dict)
    workload_options: dict = field(default_factory=dict)
    engine_options: dict = field(default_factory=dict)
    cache_bytes: int = 64 << 20
    direct_io: bool = False
    durability: str = "async"
    store_dir: str | None = None
    limit: int | None = None
    warm_fraction: float = 0.5
    threads: int = 1
    #: use the request-thread path even for one thread (scale compares like with like)
    threaded: bool = False
    #: seconds between status updates on the progress bar (0 = none)
    status_every: float = 0.0
    max_queries: int = 2000
    #: split each latency into phases (storage, routing, ...; paper Fig. 7)
    breakdown: bool = False

    def config(self) -> dict:
        return {
            "strategy_options": self.strategy_options, "workload_options": self.workload_options,
            "engine_options": self.engine_options, "cache_bytes": self.cache_bytes,
            "direct_io": self.direct_io, "durability": self.durability, "limit": self.limit,
            "warm_fraction": self.warm_fraction, "threads": self.threads,
            "breakdown": self.breakdown,
        }


MAX_THREADS = 256


def check_threads(option: str, n: int) -> int:
    if not 1 <= n <= MAX_THREADS:
        raise ConfigError(f"option {option}: {n} request threads; give 1 to {MAX_THREADS}")
    return n


class FalseHitsError(PrefixbenchError):
    exit_code = 3


def make_workload(name: str, options: dict):
    """The workload plugin ``name`` built with ``options``: the one place every driver
    (run, sweeps, recover, crashtest, ...) turns a workload name into a workload."""
    return get_registry().get("workload", name).factory(**options)


def replay_once(spec: RunSpec, *, quiet: bool, check: bool = True) -> ReplayResult:
    workload = make_workload(spec.workload, spec.workload_options)
    built = build(spec.strategy, spec.engine, strategy_options=spec.strategy_options,
                  store_dir=spec.store_dir, cache_bytes=spec.cache_bytes,
                  direct_io=spec.direct_io, durability=spec.durability,
                  engine_options=spec.engine_options, block_tokens=workload.block_size)
    try:
        desc = f"{spec.strategy}" + (f"/{spec.engine}" if built.store is not None else "")
        res = replay(built.strategy, workload, limit=spec.limit, quiet=quiet, desc=desc,
                     threads=spec.threads, threaded=spec.threaded,
                     status_every=spec.status_every,
                     check=check, breakdown=spec.breakdown)
        res.beyond_paper = beyond_paper_options(built.strategy)
        return res
    finally:
        built.close()


def _warm_match_bench(spec: RunSpec):
    """Build a warmed index in a private store; return (time_func, n_queries, cleanup)."""
    workload = make_workload(spec.workload, spec.workload_options)
    built = build(spec.strategy, spec.engine, strategy_options=spec.strategy_options,
                  store_dir=None, cache_bytes=spec.cache_bytes, direct_io=spec.direct_io,
                  durability=spec.durability, engine_options=spec.engine_options,
                  block_tokens=workload.block_size)
    total = len(workload) if spec.limit is None else min(spec.limit, len(workload))
    n_warm = max(1, int(total * spec.warm_fraction))
    replay(built.strategy, workload, limit=n_warm, quiet=True, check=False)
    queries = []
    for i, req in enumerate(workload.requests()):
        if i < n_warm:
            continue
        if i >= total or len(queries) >= spec.max_queries:
            break
        queries.append(req.match_ids)
    if not queries:  # tiny workloads: re-match the warm part
        queries = [r.match_ids for _, r in zip(range(spec.max_queries), workload.requests())]
    match = built.strategy.match
    clock = time.perf_counter

    def time_func(loops):
        t0 = clock()
        for _ in range(loops):
            for q in queries:
                match(q)
        return clock() - t0

    return time_func, len(queries), built.close


def run_metadata(spec: RunSpec, res: ReplayResult | None = None) -> dict:
    """The metadata of a run's benchmarks: the spec's configuration and, once the
    replay ran, the strategy's options beyond its paper as in effect (what the
    results print beside the options given)."""
    config = spec.config()
    if res is not None and res.beyond_paper:
        config["beyond_paper_options"] = res.beyond_paper
    return pyperf_io.run_metadata(spec.strategy, spec.engine, spec.workload, config)


def _new_runner(**kwargs) -> pyperf.Runner:
    # pyperf allows one Runner per class per process; a fresh subclass per
    # call lets library users (and tests) run more than once in a process.
    cls = type("PrefixbenchRunner", (pyperf.Runner,), {"_created": set()})
    return cls(**kwargs)


def run(spec: RunSpec, *, output: str | None, quiet: bool, our_argv: list[str],
        pyperf_argv: list[str], use_runner: bool = True) -> ReplayResult | None:
    """The whole ``run`` command.  Returns the replay result in the main process."""
    is_worker = "--worker" in pyperf_argv
    res = None if is_worker else replay_once(spec, quiet=quiet)
    metadata = run_metadata(spec, res)
    time_benches: list = []
    count_benches: list = []
    if not is_worker:
        t, c = pyperf_io.replay_suites(res, metadata)
        time_benches += t
        count_benches += c
        if res.false_hits:
            _write(output, time_benches, count_benches)
            raise FalseHitsError(
                f"{spec.strategy}: {res.false_hits} false hits (blocks returned that were never "
                f"inserted or with wrong metadata); results kept in {output or 'no file'}")
    if use_runner:
        worker_args = _worker_args(our_argv)
        runner = _new_runner(program_args=("-m", "prefixbench", "run"),
                             add_cmdline_args=lambda cmd, _args: cmd.extend(worker_args))
        argv = list(pyperf_argv)
        if quiet and not is_worker:
            argv.append("--quiet")
        runner.parse_args(argv)
        from prefixbench import twins
        # pyperf workers start with a clean environment: they keep the pure-Python switch
        # and the allocator this process was started on
        keep = [twins.ENV_VAR] if twins.PURE else []
        keep += [v for v in ("LD_PRELOAD", allocator.GUARD) if v in os.environ]
        if keep:
            runner.args.inherit_environ = [*(runner.args.inherit_environ or []), *keep]
        runner.metadata.update(metadata)
        runner.metadata["gc"] = "frozen+disabled in workers after warm-up"
        time_func, n_queries, cleanup = _warm_match_bench(spec) if is_worker else (None, 1, None)
        try:
            if is_worker:
                import gc
                gc.collect()
                gc.freeze()
                gc.disable()
            bench = runner.bench_time_func("match-latency-warm", time_func or _never,
                                           inner_loops=n_queries)
        finally:
            if cleanup:
                cleanup()
        if is_worker:
            return None
        if bench is not None:
            time_benches.append(bench)
    _write(output, time_benches, count_benches)
    return res


def _never(loops):  # pragma: no cover - the main process never calls it
    raise RuntimeError("time function called outside a pyperf worker")


def _write(output, time_benches, count_benches):
    if output:
        pyperf_io.write_suite(output, time_benches)
        pyperf_io.write_suite(pyperf_io.counts_path(output), count_benches)


def _worker_args(our_argv: list[str]) -> list[str]:
    """Our options for a worker: no output file, no shared store dir, quiet."""
    out, skip = [], False
    for a in our_argv:
        if skip:
            skip = False
            continue
        if a in ("-o", "--output", "--store-dir"):
            skip = True
            continue
        if a.startswith(("--output=", "--store-dir=")) or a == "--quiet":
            continue
        out.append(a)
    return out + ["--quiet"]


def engine_bench_benchmarks(r: dict) -> tuple[list, list]:
    """``engine-bench``'s figures (``engine-*``, ``store-bytes``) as (times, counts)
    benchmarks for ``OUT.json`` and ``OUT.counts.json``; the command prints them
    through ``prefixbench.reports``, so ``show`` prints the same."""
    from prefixbench import schema
    md = pyperf_io.run_metadata("none", r["engine"], "none", {
        k: r[k] for k in ("n_keys", "value_size", "batch", "cache_bytes", "direct_io")})
    md.update({"command": "engine-bench", "direct_io": int(bool(r["direct_io"]))})
    if r.get("note"):
        md["engine_note"] = r["note"]
    benches = pyperf_io.figure_benchmarks(schema.from_json(r), md)
    times = [b for b in benches if b.get_unit() == "second"]
    return times, [b for b in benches if b.get_unit() != "second"]
