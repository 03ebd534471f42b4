"""Open-loop arrival: requests start at their trace timestamps, not when the last one ends.

A closed-loop replay measures an index's service time; a router meets
requests when users send them, and a slow index makes them queue.  Here
request i is due at ``(t_i - t_0) / speedup`` after the start and a small
pool of issuing threads (``threads``, default 4) takes the requests in
arrival order: each sleeps until its request is due, then matches and
inserts it.  A request's latency is its match completion minus its due time,
so it includes the wait for a free issuer (queueing).

**The issuer's own lateness.**  An issuer that reaches its request early
sleeps to ``WAKE_MARGIN_S`` before the due time, then yields in a loop
(``time.sleep(0)``, which lets the other issuers run) until it is due.  It
still starts late by its wake-up: on this 2-core VM 0.05-0.2 ms at the median
and up to several ms at the p99, the scheduler's and the GIL's, not the
index's.  That delay is reported apart as ``issue-lateness`` (over the
requests an issuer reached early), and such a request's latency counts from
when its issuer woke: an issuer was free for it, so it did not queue.  A
request its issuer reached after the due time keeps completion minus due
time, so queueing behind busy issuers is always counted (no coordinated
omission).  Offered load is the
requests over the trace's span divided by the speedup; achieved load is the
requests over the time until the last one finished.  As the speedup grows,
achieved load stops following offered load and the queueing latency climbs.

**Saturation.**  With the speedups in ascending order, a speedup is *served*
when its achieved rate is at least 95% of its offered rate and its queueing
p99 is at most 10x the unloaded p99 (the first speedup's p99).  The
*saturation point* is the first speedup that is not served; the load a
configuration sustains is the offered rate of the speedup before it.  When
every speedup is served there is no saturation point in the range (raise the
speedups); when the first is not, the index does not keep up with the trace
even at that speed.

Sessions are not serialised: a turn can start before its previous turn's
insert finished, as in a serving system under load.  Workloads with
timestamps: ``mooncake`` (milliseconds), ``bailian`` (seconds),
``token-jsonl`` (seconds, every line).  ``prefixbench arrival`` and
``prefixbench sweep arrival`` run one replay per ``--speedup`` value on a
fresh index and print the table; ``prefixbench run --arrival trace --speedup
X`` runs one (``--arrival closed``, the default, is the closed-loop replay).

**Results** (``-o OUT.json``): two pyperf suites written by
:func:`write_suites`, OUT.json (seconds) and OUT.counts.json (rates and
counts).  Benchmark names, one per speedup, prefixed ``speedup-X-`` (X as
given: ``speedup-2-``, ``speedup-0.5-``; ``run --arrival trace`` writes them
unprefixed):

* OUT.json: ``match-latency-queued-p50``, ``match-latency-queued-p99``,
  ``match-latency-queued-p999`` (match completion minus the request's due
  time, or minus its issuer's wake-up when the issuer was early: service plus
  queueing), ``match-latency-service-p50`` (the match call alone),
  ``issue-lateness-p50`` and ``issue-lateness-p99`` (how late issuers that
  were early started their requests: the harness's timing precision);
* OUT.counts.json: ``offered-load`` and ``achieved-load`` (requests/s, pyperf
  unit integer holding a float), ``requests``, ``late-starts`` (requests an
  issuer reached after their due time), ``hit-tokens``, ``prompt-tokens``.

Metadata on every benchmark: ``command`` (``arrival``), ``arrival``
(``trace``), ``speedup`` (float), ``setting`` (``speedup-X``, absent from
``run``'s), ``issuing_threads``, ``offered_rps``, ``achieved_rps``,
``token_hit_rate``, ``served`` (1 when the row is served by the rule above,
else 0), ``saturation_speedup`` (the saturation point's speedup; 0 when every
speedup is served) and ``sustained_rps`` (the offered rate of the last served
speedup before it, 0 when none is), besides the run metadata (strategy,
engine, workload, versions, commit).
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from prefixbench.errors import ConfigError
from prefixbench.metas import make_metas

#: an early issuer sleeps to this long before its request is due, then yields in a loop
WAKE_MARGIN_S = 0.002


def request_times(workload) -> np.ndarray:
    """Arrival time (seconds) of each request, in ``requests()`` order."""
    ts = getattr(workload, "timestamps", None)
    if ts is None:
        raise ConfigError(f"--arrival trace: workload {workload.name} has no timestamps "
                          "(mooncake, bailian and token-jsonl with a timestamp on every line do)")
    ts = np.asarray(ts, dtype=np.float64)
    order = getattr(workload, "order", None)
    if order is not None:
        ts = ts[np.asarray(order)]
    if not len(ts) or np.isnan(ts).any():
        raise ConfigError(f"--arrival trace: workload {workload.name} has requests without a "
                          "timestamp")
    return ts


@dataclass
class ArrivalResult:
    speedup: float
    requests: int
    offered_rps: float
    achieved_rps: float
    p50_s: float
    p99_s: float
    p999_s: float
    service_p50_s: float
    hit_tokens: int
    prompt_tokens: int
    late_starts: int              # requests an issuer reached after their due time
    issue_p50_s: float = 0.0      # wake-up delay of issuers that were early (p50, p99)
    issue_p99_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def replay_open_loop(strategy, requests: list, times: np.ndarray, *, block_size: int,
                     speedup: float = 1.0, threads: int = 4, meta_size: int = 16) -> ArrivalResult:
    """One open-loop replay of ``requests`` due at ``times`` (seconds) / ``speedup``."""
    if speedup <= 0:
        raise ConfigError(f"option --speedup: {speedup} must be > 0")
    if not 1 <= threads <= 256:
        raise ConfigError(f"option --threads: {threads} issuing threads; give 1 to 256")
    n = len(requests)
    due = (times[:n] - times[0]) / speedup
    lat = np.zeros(n)
    service = np.zeros(n)
    woke = np.full(n, np.nan)       # wake-up delay, for requests reached early
    done = np.zeros(n)
    hits = np.zeros(n, dtype=np.int64)
    late = [0] * threads
    counter = itertools.count()
    metas = [make_metas(r.insert_ids, i, meta_size) for i, r in enumerate(requests)]
    start_evt = threading.Event()
    t0_box = [0.0]
    errors: list = []

    def issuer(k: int) -> None:
        start_evt.wait()
        t0 = t0_box[0]
        perf = time.perf_counter
        try:
            while True:
                i = next(counter)
                if i >= n:
                    return
                at = t0 + due[i]
                now = perf()
                early = now < at
                if early:
                    if at - now > WAKE_MARGIN_S:
                        time.sleep(at - now - WAKE_MARGIN_S)
                    while perf() < at:
                        time.sleep(0)               # yields the GIL to busy issuers
                else:
                    late[k] += 1
                r = requests[i]
                s = perf()
                m = strategy.match(r.match_ids)
                e = perf()
                strategy.insert(r.insert_ids, metas[i])
                if early:
                    woke[i] = s - at
                    lat[i] = e - s                  # an issuer was free: no queueing
                else:
                    lat[i] = e - at
                service[i] = e - s
                done[i] = perf()
                hits[i] = m.n_blocks
        except BaseException as exc:   # noqa: BLE001 - reported on the main thread
            errors.append(exc)

    pool = [threading.Thread(target=issuer, args=(k,), daemon=True) for k in range(threads)]
    for t in pool:
        t.start()
    t0_box[0] = time.perf_counter() + 0.01
    start_evt.set()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    span = float(due[-1] - due[0]) if n > 1 else 0.0
    elapsed = float(done.max() - t0_box[0]) if n else 0.0
    prompt = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
    hit_tok = int(np.minimum(hits * block_size, prompt).sum())
    return ArrivalResult(
        speedup=speedup, requests=n,
        offered_rps=(n - 1) / span if span > 0 else float("inf"),
        achieved_rps=n / elapsed if elapsed > 0 else float("inf"),
        p50_s=float(np.percentile(lat, 50)), p99_s=float(np.percentile(lat, 99)),
        p999_s=float(np.percentile(lat, 99.9)), service_p50_s=float(np.percentile(service, 50)),
        hit_tokens=hit_tok, prompt_tokens=int(prompt.sum()), late_starts=sum(late),
        issue_p50_s=_pct(woke, 50), issue_p99_s=_pct(woke, 99))


def _pct(values: np.ndarray, q: float) -> float:
    """Percentile over the values that are set (0.0 when none is)."""
    v = values[~np.isnan(values)]
    return float(np.percentile(v, q)) if len(v) else 0.0


def served(row: ArrivalResult, base_p99: float) -> bool:
    """The saturation rule's test for one row (see the module docstring)."""
    return row.achieved_rps >= 0.95 * row.offered_rps and row.p99_s <= 10 * max(base_p99, 1e-9)


def saturation_point(rows: list[ArrivalResult]) -> ArrivalResult | None:
    """The first row, in ascending speedup, that is not served; None when all are."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: r.speedup)
    base = ordered[0].p99_s
    return next((r for r in ordered if not served(r, base)), None)


def saturation(rows: list[ArrivalResult]) -> ArrivalResult | None:
    """The last served row before the saturation point (the load sustained), or None
    when even the first speedup is not served."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: r.speedup)
    knee = saturation_point(ordered)
    if knee is None:
        return ordered[-1]
    i = ordered.index(knee)
    return ordered[i - 1] if i else None


def parse_speedups(text, option: str = "--speedup") -> list[float]:
    """``1,2,4`` as floats; one line for a value that is not a finite number > 0."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            x = float(part)
        except ValueError:
            raise ConfigError(f"option {option}: {part!r} is not a number (give time "
                              "compression factors such as 1,2,4)") from None
        if not (x > 0 and math.isfinite(x)):
            raise ConfigError(f"option {option}: {part} must be a finite number > 0")
        out.append(x)
    if not out:
        raise ConfigError(f"option {option}: {text!r}: give at least one factor, e.g. 1,2,4")
    return out


def _label(x: float) -> str:
    return f"{x:g}"


def suites(rows: list[ArrivalResult], metadata: dict, *, prefixed: bool = True,
           threads: int = 4) -> tuple[list, list]:
    """(seconds benchmarks, rate/count benchmarks) of the rows; names and metadata in
    the module docstring."""
    from prefixbench.harness.pyperf_io import value_runs
    knee, sat = saturation_point(rows), saturation(rows)
    base = min(rows, key=lambda r: r.speedup).p99_s if rows else 0.0
    times, counts = [], []
    for r in rows:
        pre = f"speedup-{_label(r.speedup)}-" if prefixed else ""
        md = dict(metadata, command="arrival", arrival="trace", speedup=float(r.speedup),
                  issuing_threads=int(threads), offered_rps=round(r.offered_rps, 3),
                  achieved_rps=round(r.achieved_rps, 3), token_hit_rate=round(r.hit_rate, 9),
                  served=int(served(r, base)),
                  saturation_speedup=float(knee.speedup) if knee is not None else 0.0,
                  sustained_rps=round(sat.offered_rps, 3) if sat is not None else 0.0)
        if prefixed:
            md["setting"] = f"speedup-{_label(r.speedup)}"
        for name, v in (("match-latency-queued-p50", r.p50_s), ("match-latency-queued-p99", r.p99_s),
                        ("match-latency-queued-p999", r.p999_s),
                        ("match-latency-service-p50", r.service_p50_s),
                        ("issue-lateness-p50", r.issue_p50_s),
                        ("issue-lateness-p99", r.issue_p99_s)):
            times.append(value_runs(pre + name, "second", [v], md))
        for name, v in (("offered-load", r.offered_rps), ("achieved-load", r.achieved_rps),
                        ("requests", r.requests), ("late-starts", r.late_starts),
                        ("hit-tokens", r.hit_tokens), ("prompt-tokens", r.prompt_tokens)):
            counts.append(value_runs(pre + name, "integer", [v], md))
    return [b for b in times if b], [b for b in counts if b]


def write_suites(path: str, times: list, counts: list) -> tuple[str, str]:
    from prefixbench.harness.pyperf_io import counts_path, write_suite
    write_suite(path, times)
    write_suite(counts_path(path), counts)
    return path, counts_path(path)


def run_speedups(*, strategy: str, engine, workload: str, workload_options: dict,
                 strategy_options: dict, engine_options: dict, cache_bytes: int,
                 speedups: list[float], threads: int = 4, limit: int | None = None,
                 quiet: bool = False):
    """One open-loop replay per speedup, each on a fresh index: (workload, rows)."""
    from prefixbench.harness.bench import make_workload
    from prefixbench.harness.build import build
    from prefixbench.harness.progress import progress
    if limit is not None and limit < 2:
        raise ConfigError(f"option --limit: {limit} must be >= 2")
    wl = make_workload(workload, workload_options)
    times = request_times(wl)
    reqs = list(itertools.islice(wl.requests(), limit))
    rows = []
    bar = progress(len(speedups) * len(reqs), f"arrival {strategy}", quiet, unit="req")
    try:
        for x in speedups:
            built = build(strategy, engine, strategy_options=strategy_options,
                          cache_bytes=cache_bytes, engine_options=engine_options,
                          block_tokens=wl.block_size)
            try:
                rows.append(replay_open_loop(built.strategy, reqs, times,
                                             block_size=wl.block_size, speedup=x,
                                             threads=threads))
            finally:
                built.close()
            bar.update(len(reqs))
    finally:
        bar.close()
    return wl, rows


def add_commands(sub, commands: dict) -> None:
    p = sub.add_parser("arrival", help="open-loop arrival at trace timestamps: offered vs "
                       "achieved load and queueing latency per speedup",
                       description="Replay a timestamped workload open-loop once per --speedup "
                       "value, each on a fresh index, and print offered and achieved requests/s "
                       "and match latency including queueing.")
    p.add_argument("--strategy", "-s", required=True)
    p.add_argument("--strategy-option", "-S", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--engine", "-e")
    p.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--cache-bytes", default="64MiB")
    p.add_argument("--workload", "-w", required=True)
    p.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--speedup", default="1", metavar="X[,X...]",
                   help="time compression factors, e.g. 1,2,4,8 (default: %(default)s)")
    p.add_argument("--threads", type=int, default=4, help="issuing threads (default: %(default)s)")
    p.add_argument("--limit", type=int, help="only the first N requests")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("-o", "--output", help="pyperf suites OUT.json and OUT.counts.json "
                   "(names in prefixbench.harness.arrival's docstring)")
    commands["arrival"] = cmd_arrival


def cmd_arrival(args, leftover, argv, quiet):
    """``prefixbench arrival`` and ``prefixbench sweep arrival``."""
    import json
    from dataclasses import asdict
    from prefixbench.harness.build import parse_kv, parse_size
    from prefixbench.harness.pyperf_io import run_metadata
    speedups = parse_speedups(args.speedup)
    strategy = getattr(args, "strategy", None)
    if not strategy:
        raise ConfigError("option --strategy: sweep arrival needs -s STRATEGY")
    threads = getattr(args, "arrival_threads", None) or getattr(args, "threads", None) or 4
    try:
        threads = int(threads)
    except (TypeError, ValueError):
        raise ConfigError(f"option --threads: {threads!r} is not a number of issuing "
                          "threads") from None
    wopts = parse_kv("--workload-option", args.workload_option)
    sopts = parse_kv("--strategy-option", args.strategy_option)
    eopts = parse_kv("--engine-option", args.engine_option)
    cache = parse_size("--cache-bytes", getattr(args, "cache_bytes", None) or "64MiB")
    wl, rows = run_speedups(strategy=strategy, engine=args.engine, workload=args.workload,
                            workload_options=wopts, strategy_options=sopts,
                            engine_options=eopts, cache_bytes=cache, speedups=speedups,
                            threads=threads, limit=args.limit, quiet=quiet)
    if getattr(args, "json", None):
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([asdict(r) | {"hit_rate": r.hit_rate} for r in rows], f, indent=1)
    md = run_metadata(strategy, args.engine, args.workload,
                      {"workload_options": wopts, "strategy_options": sopts,
                       "speedups": ",".join(_label(x) for x in speedups)})
    _print_and_write(getattr(args, "output", None), suites(rows, md, threads=threads))
    return 0


def _print_and_write(output: str | None, benches: tuple[list, list]) -> None:
    """Write the suites (when asked), then print their table through the renderer
    ``show`` uses, so the two cannot differ."""
    from prefixbench.harness.reporting import table_of
    written = write_suites(output, *benches) if output else None
    print(table_of(output, *benches))
    if written:
        print("wrote {} and {}".format(*written))


def run_trace(spec, speedup_text: str, threads: int, output: str | None, quiet: bool) -> int:
    """``prefixbench run --arrival trace --speedup X``: one open-loop replay of the run's
    spec, its table, and OUT.json / OUT.counts.json with the unprefixed names."""
    from prefixbench.harness.pyperf_io import run_metadata
    speedups = parse_speedups(speedup_text)
    if len(speedups) != 1:
        raise ConfigError(f"option --speedup: run takes one factor, got {speedup_text!r} "
                          "(sweep arrival takes a list)")
    _, rows = run_speedups(strategy=spec.strategy, engine=spec.engine, workload=spec.workload,
                           workload_options=spec.workload_options,
                           strategy_options=spec.strategy_options,
                           engine_options=spec.engine_options, cache_bytes=spec.cache_bytes,
                           speedups=speedups, threads=threads, limit=spec.limit, quiet=quiet)
    md = run_metadata(spec.strategy, spec.engine, spec.workload, spec.config())
    _print_and_write(output, suites(rows, md, prefixed=False, threads=threads))
    return 0
