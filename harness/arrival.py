"""Open-loop arrival: requests start at their trace timestamps, not when the last one ends.

A closed-loop replay measures an index's service time; a router meets
requests when users send them, and a slow index makes them queue.  Here
request i is due at ``(t_i - t_0) / speedup`` after the start and a small
pool of issuing threads (``threads``, default 4) takes the requests in
arrival order: each sleeps until its request is due, then matches and
inserts it.  A request's latency is its match completion minus its due time,
so it includes the wait for a free issuer (queueing).  Offered load is the
requests over the trace's span divided by the speedup; achieved load is the
requests over the time until the last one finished.  As the speedup grows,
achieved load stops following offered load and the queueing latency climbs:
the saturation point is the highest offered load still served within 5% of
it with p99 under 10x the unloaded p99 (the first speedup's).

Sessions are not serialised: a turn can start before its previous turn's
insert finished, as in a serving system under load.  Workloads with
timestamps: ``mooncake`` (milliseconds), ``bailian`` (seconds),
``token-jsonl`` (seconds, every line).  ``prefixbench arrival`` runs one
replay per ``--speedup`` value on a fresh index and prints the table.
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

import numpy as np

from prefixbench.errors import ConfigError
from prefixbench.metas import make_metas


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
                if now < at:
                    time.sleep(at - now)
                else:
                    late[k] += 1
                r = requests[i]
                s = perf()
                m = strategy.match(r.match_ids)
                e = perf()
                strategy.insert(r.insert_ids, metas[i])
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
        hit_tokens=hit_tok, prompt_tokens=int(prompt.sum()), late_starts=sum(late))


def saturation(rows: list[ArrivalResult]) -> ArrivalResult | None:
    """The highest offered load served within 5% with p99 under 10x the first row's."""
    if not rows:
        return None
    base = max(rows[0].p99_s, 1e-9)
    ok = [r for r in rows if r.achieved_rps >= 0.95 * r.offered_rps and r.p99_s <= 10 * base]
    return max(ok, key=lambda r: r.offered_rps) if ok else None


def format_table(strategy: str, workload: str, rows: list[ArrivalResult]) -> str:
    head = (f"{'speedup':>8} {'offered req/s':>14} {'achieved req/s':>15} {'p50':>10} "
            f"{'p99':>10} {'p99.9':>10} {'service p50':>12} {'hit rate':>9}")
    lines = [f"open-loop arrival: {strategy} on {workload} (match latency includes queueing)",
             head]
    for r in rows:
        lines.append(f"{r.speedup:>8g} {r.offered_rps:>14,.1f} {r.achieved_rps:>15,.1f} "
                     f"{r.p50_s * 1e6:>8.1f}us {r.p99_s * 1e6:>8.1f}us {r.p999_s * 1e6:>8.1f}us "
                     f"{r.service_p50_s * 1e6:>10.1f}us {r.hit_rate:>9.2%}")
    sat = saturation(rows)
    lines.append("saturation: " + (f"served up to {sat.offered_rps:,.1f} req/s offered (speedup "
                                   f"{sat.speedup:g})" if sat else "not served even at the "
                                   "first speedup") +
                 ("" if sat is None or sat is rows[-1] else "; beyond it achieved load or p99 "
                  "falls away") +
                 (" (every speedup served: raise --speedup to find the knee)"
                  if sat is rows[-1] else ""))
    return "\n".join(lines)


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
    commands["arrival"] = cmd_arrival


def cmd_arrival(args, leftover, argv, quiet):
    import json
    from dataclasses import asdict
    from prefixbench.harness.bench import make_workload
    from prefixbench.harness.build import build, parse_kv, parse_size
    try:
        speedups = [float(x) for x in args.speedup.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"option --speedup: {args.speedup!r} is not a list of numbers") from None
    if not speedups or any(x <= 0 for x in speedups):
        raise ConfigError(f"option --speedup: {args.speedup!r}: give positive factors")
    if args.limit is not None and args.limit < 2:
        raise ConfigError(f"option --limit: {args.limit} must be >= 2")
    wl = make_workload(args.workload, parse_kv("--workload-option", args.workload_option))
    times = request_times(wl)
    reqs = list(itertools.islice(wl.requests(), args.limit))
    rows = []
    for x in speedups:
        built = build(args.strategy, args.engine,
                      strategy_options=parse_kv("--strategy-option", args.strategy_option),
                      cache_bytes=parse_size("--cache-bytes", args.cache_bytes),
                      engine_options=parse_kv("--engine-option", args.engine_option),
                      block_tokens=wl.block_size)
        try:
            rows.append(replay_open_loop(built.strategy, reqs, times, block_size=wl.block_size,
                                         speedup=x, threads=args.threads))
        finally:
            built.close()
    print(format_table(args.strategy, args.workload, rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([asdict(r) | {"hit_rate": r.hit_rate} for r in rows], f, indent=1)
    return 0
