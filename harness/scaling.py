"""``prefixbench scale``: request throughput at 1, 2, 4, ... threads (SARP Fig. 11).

Each thread count replays the workload on a freshly built index and store,
so the runs differ only in the number of request threads.

Threads only overlap where the GIL is released, so every run also says which
parts of its requests ran without it: the strategy's compiled parts that
release it (:attr:`IndexStrategy.gil_free_parts`; none in pure-Python mode)
and, counted from the run's store statistics, how many of its store calls went
through a binding call that releases it (:attr:`SegmentStore.gil_free_calls`,
e.g. rocksdict releases it only in batch gets).  With direct I/O it first
measures what the device alone gives the same thread counts
(:func:`probe_device`): a strategy that waits on device reads scales at most
about that much.
"""
from __future__ import annotations

import dataclasses

from prefixbench.harness import pyperf_io
from prefixbench.harness.bench import RunSpec, check_threads, replay_once
from prefixbench.errors import ConfigError
from prefixbench.harness.progress import progress
from prefixbench.harness.replay import ReplayResult
from prefixbench.registry import get_registry


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


def probe_device(counts, quiet: bool):
    """What the device alone gives ``counts`` threads of 4 KiB random direct reads
    (:mod:`prefixbench.harness.deviceprobe`), where the stores go, with a progress bar."""
    from prefixbench.harness import deviceprobe
    bar = progress(deviceprobe.DEFAULT_ROUNDS * len(counts),
                   "device probe (4 KiB random direct reads)", quiet, unit="step")
    try:
        return deviceprobe.probe_device(None, counts, on_step=lambda: bar.update(1))
    finally:
        bar.close()


def gil_free_calls(result: ReplayResult, calls: frozenset) -> dict:
    """Store calls of one run, and how many of them released the GIL."""
    st = result.store_stats or {}
    batch = int(st.get("batch_read_calls", 0))
    single = int(st.get("read_calls", 0)) - batch
    writes = int(st.get("write_batches", 0))
    return {"single_gets": single, "batch_gets": batch, "write_batches": writes,
            "free": (single if "get" in calls else 0) + (batch if "get_many" in calls else 0)
            + (writes if "write" in calls else 0),
            "total": single + batch + writes}


def gil_statement(spec: RunSpec, result: ReplayResult) -> str:
    """One line: which parts of this run's requests ran without the GIL."""
    from prefixbench import twins

    reg = get_registry()
    strat = reg.get("strategy", spec.strategy).factory
    if twins.PURE:
        parts = "strategy: nothing (pure-Python mode)"
    elif strat.gil_free_parts:
        parts = "strategy: " + ", ".join(strat.gil_free_parts)
    else:
        parts = "strategy: nothing (its own work holds the GIL)"
    if not result.store_stats:
        return parts + "; no store"
    engine = reg.get("engine", spec.engine).factory
    calls = frozenset(getattr(engine, "gil_free_calls", ()))
    c = gil_free_calls(result, calls)

    def kind(n, name, call):
        return f"{n:,} {name} ({'free' if call in calls else 'held'})"
    share = f"{c['free'] / c['total']:.0%}" if c["total"] else "-"
    return (f"{parts}; store {spec.engine}: {share} of {c['total']:,} calls without the GIL - "
            + ", ".join((kind(c["single_gets"], "single gets", "get"),
                         kind(c["batch_gets"], "batch gets", "get_many"),
                         kind(c["write_batches"], "write batches", "write"))))


def scale_suites(rows, metadata: dict, spec: RunSpec | None = None) -> tuple[list, list]:
    """Benchmarks named ``threads-N-<figure>`` so two scale runs compare by name."""
    times, counts = [], []
    for n, r in rows:
        md = dict(metadata, threads=n, throughput_rps=round(r.throughput, 3),
                  false_hits=r.false_hits)
        if spec is not None:
            md["gil_free"] = gil_statement(spec, r)
        t, c = pyperf_io.replay_suites(r, md)
        for b in t + c:
            (times if b in t else counts).append(pyperf_io.prefixed(b, f"threads-{n}"))
    return times, counts

