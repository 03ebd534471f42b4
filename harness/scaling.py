"""``prefixbench scale``: request throughput at 1, 2, 4, ... threads (SARP Fig. 11).

Each thread count replays the workload on a freshly built index and store,
so the runs differ only in the number of request threads.
"""
from __future__ import annotations

import dataclasses

from prefixbench.harness import pyperf_io
from prefixbench.harness.bench import RunSpec, check_threads, replay_once
from prefixbench.harness.errors import ConfigError
from prefixbench.harness.progress import progress
from prefixbench.harness.replay import ReplayResult
from prefixbench.reports.tables import fmt_seconds, format_table


def parse_thread_list(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"option --threads: {text!r} is not a comma-separated list of integers") from None
    if not counts:
        raise ConfigError("option --threads: give at least one thread count")
    return [check_threads("--threads", n) for n in counts]


def scale(spec: RunSpec, thread_counts: list[int], quiet: bool) -> list[tuple[int, ReplayResult]]:
    rows = []
    bar = progress(len(thread_counts), "thread counts", quiet, unit="run")
    for n in thread_counts:
        rows.append((n, replay_once(dataclasses.replace(spec, threads=n, threaded=True), quiet=True)))
        bar.update(1)
    bar.close()
    return rows


def format_scale(rows: list[tuple[int, ReplayResult]]) -> str:
    base = rows[0][1].throughput or 1.0
    table = []
    for n, r in rows:
        table.append((n, f"{r.throughput:,.0f}", f"{r.throughput / base:.2f}x",
                      fmt_seconds(r.latency("match")), fmt_seconds(r.latency("match", 99)),
                      fmt_seconds(r.latency("insert")), fmt_seconds(r.latency("insert", 99)),
                      f"{r.hit_rate:.4%}", r.false_hits))
    return format_table(("threads", "requests/s", f"vs {rows[0][0]} thr", "match mean",
                         "match p99", "insert mean", "insert p99", "hit rate", "false hits"),
                        table)


def scale_suites(rows, metadata: dict) -> tuple[list, list]:
    """Benchmarks named ``threads-N-<figure>`` so two scale runs compare by name."""
    times, counts = [], []
    for n, r in rows:
        md = dict(metadata, threads=n, throughput_rps=round(r.throughput, 3),
                  false_hits=r.false_hits)
        t, c = pyperf_io.replay_suites(r, md)
        for b in t + c:
            (times if b in t else counts).append(_renamed(b, f"threads-{n}-{b.get_name()}"))
    return times, counts


def _renamed(bench, name: str):
    import pyperf
    runs = []
    for run in bench.get_runs():
        md = dict(run.get_metadata(), name=name)
        runs.append(pyperf.Run(run.values, metadata=md, collect_metadata=False))
    return pyperf.Benchmark(runs)
