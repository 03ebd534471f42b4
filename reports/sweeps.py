"""The tables ``prefixbench sweep`` prints, from its suites: conditions, then one table.

Each sweep kind (retrieval, ablation, strategies, space) has its main table
here; the command prints it from the suites it wrote, and ``show`` prints the
same from the file.  Cells are the median over repeats with the min-max; a
ratio to the reference (the first setting) is taken within each repeat.  What
the strategies sweep prints after its table (each strategy's options, sarp's
Table 4 calibration, the threads table, the breakdown) and the cap rule's line
before it come from the live run and are not in the suites' tables.
"""
from __future__ import annotations

import json
import math
import statistics

from prefixbench.reports.show import cell
from prefixbench.reports.tables import fmt_bytes, fmt_seconds, format_table

#: bytes per indexed block of the paper's uncompressed logical store (8-byte key + metadata)
ENTRY_BYTES = 24


def _pct(x: float) -> str:
    """Losses run from ~1e-6 to ~1e-3 of the oracle's hits: five decimals in percent."""
    return f"{x * 100:.5f}%"


def _num(digits=2):
    return lambda x: f"{x:,.{digits}f}"


def _ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}x"


def _int(x) -> str:
    return f"{x:,.0f}"


def _change(new, old) -> str:
    if new is None or old is None or not old.median:
        return "n/a"
    return f"{(new.median / old.median - 1) * 100:+.1f}%"


def config(res) -> dict:
    try:
        return json.loads(res.first().get("config", "{}"))
    except (TypeError, ValueError):
        return {}


def settings(res) -> list:
    """The sweep's settings in run order (the sizing replay apart)."""
    t = res.threads()[0] if res.threads() else 1
    return [s for s in res.settings(t) if s is not None]


def _sarp_option(res, name):
    for s in settings(res):
        md = res.md(s)
        if md.get("strategy") == "sarp":
            opts = json.loads(md.get("config", "{}")).get("strategy_options") or {}
            return opts.get(name)
    return None


def conditions(res) -> str:
    """The two (or more) lines above a sweep's table: workload, requests, threads,
    repeats; engine, I/O, durability, cache and the cache rule; the paper scale."""
    cfg, md = config(res), res.first()
    ss = settings(res)
    wl = str(md.get("workload", "?"))
    opts = cfg.get("workload_options") or {}
    if opts:
        wl += f" ({', '.join(f'{k}={v}' for k, v in opts.items())})"
    first = res.get("requests", ss[0]) if ss else None
    reqs = f"{cell(first, _int)} requests" + (f" (--limit {cfg['limit']})"
                                              if cfg.get("limit") else "")
    paper = "paper_fraction" in md
    if paper:
        reqs += " timed"
    counts = cfg.get("threads") or [1]
    threads = ("one request thread" if counts == [1] else
               "request threads " + ", ".join(map(str, counts)) + f" (ratios at {counts[0]})")
    parts = [f"workload {wl}", reqs, threads]
    if (cfg.get("repeat") or 1) > 1:
        parts.append(f"{cfg['repeat']} repeats (median, min-max)")
    cache = next((res.get("engine-cache-bytes", s) for s in ss
                  if res.get("engine-cache-bytes", s) is not None), None)
    line2 = (f"engine {md.get('engine', '?')}, direct I/O "
             f"{'on' if cfg.get('direct_io') else 'off'}, durability "
             f"{cfg.get('durability', '?')}, cache "
             f"{fmt_bytes(cache.median) if cache else fmt_bytes(cfg.get('cache_bytes') or 0)}")
    entries = res.get("sizing-ssd-blockhash-entries")
    if entries is not None:
        logical = res.get("sizing-ssd-blockhash-logical-bytes")
        disk = res.get("sizing-ssd-blockhash-disk-bytes")
        where = ("counted from the trace, no sizing replay" if disk is None
                 else f"{fmt_bytes(disk.median)} on disk")
        line2 += (f" = {cfg.get('cache_fraction', 0.1):.0%} of ssd-blockhash's logical store "
                  f"({entries.median:,.0f} entries x {ENTRY_BYTES} B = "
                  f"{fmt_bytes(logical.median if logical else 0)}; {where})")
    if cache is None:
        line2 += " (no setting uses the engine)"
    backfill = _sarp_option(res, "backfill")
    if any(res.md(s).get("strategy") == "sarp" for s in ss):
        line2 += f"; sarp backfill={backfill or cfg.get('backfill', '?')}"
    out = ", ".join(parts) + "\n" + line2
    if paper:
        f = float(md["paper_fraction"])
        text = "the full paper size" if f >= 1 else f"1/{round(1 / f)} of the paper size"
        load, run = int(md.get("load_requests", 0)), int(md.get("run_requests", 0))
        out += (f"\nscale paper: {text} of {md.get('workload', '?')} "
                f"({int(md.get('paper_blocks', 0)):,} blocks in the paper, section 6.1) -> "
                f"{int(md.get('unique_blocks', 0)):,} unique blocks in {load + run:,} "
                f"requests; load phase {load:,} requests untimed (bulk insert_known_prefix), "
                f"run phase the last {run:,} timed (match, then insert); the oracle shadows "
                f"both")
        if f < 1:
            out += ("\n  (the full size does not fit here, by the pre-flight estimate; "
                    "--force runs the full size)")
    return out


def _budget(setting: str) -> str:
    return setting.rsplit("-", 1)[-1]


def format_retrieval(res) -> str:
    header = ("setting", "max_retrieval", "hit rate", "oracle", "loss vs oracle", "lost tokens",
              "retrievals/query", "store reads/match", "match mean", "insert mean",
              "false hits")
    rows = []
    for s in settings(res):
        g = (lambda n, s=s: res.get(n, s, res.threads()[0]))
        rows.append((s, _budget(s), cell(g("token-hit-rate"), lambda v: f"{v:.4%}"),
                     cell(g("oracle-hit-rate"), lambda v: f"{v:.4%}"),
                     cell(g("hit-rate-loss"), _pct), cell(g("lost-tokens"), _int),
                     cell(g("index-retrievals-per-query"), _num(3)),
                     cell(g("store-reads-per-match"), _num(2)),
                     cell(g("match-latency-mean"), fmt_seconds),
                     cell(g("insert-latency-mean"), fmt_seconds),
                     cell(g("false-hits"), _int)))
    return (f"retrieval-budget sweep (sarp, paper Fig. 9)\n{conditions(res)}\n\n"
            + format_table(header, rows))


def format_ablation(res) -> str:
    header = ("setting", "cand. before filter", "after filter", "retrieved", "retrievals/query",
              "routing entries", "routing bytes", "B/block", "loss vs oracle", "false hits")
    rows = []
    t = res.threads()[0]
    for s in settings(res):
        def g(n, s=s):
            return res.get(n, s, t)
        rows.append((s, cell(g("index-candidates-before-filtering"), _num()),
                     cell(g("index-candidates-after-filtering"), _num()),
                     cell(g("index-candidates-retrieved"), _num()),
                     cell(g("index-retrievals-per-query"), _num(3)),
                     cell(g("index-entries"), _int), cell(g("memory-bytes"), _int),
                     cell(g("memory-bytes-per-indexed-block"), _num()),
                     cell(g("hit-rate-loss"), _pct), cell(g("false-hits"), _int)))
    out = [f"ablation (sarp, paper Fig. 10 and Table 4)\n{conditions(res)}\n",
           format_table(header, rows)]
    labels = set(settings(res))
    if "ablation-full" in labels:
        def g(n, s):
            return res.get(n, s, t)
        full = "ablation-full"
        eff = []
        if "ablation-no-refinement" in labels:
            nr = "ablation-no-refinement"
            eff.append(("refinement", "candidates before filtering "
                        + _change(g("index-candidates-before-filtering", full),
                                  g("index-candidates-before-filtering", nr))
                        + ", routing bytes " + _change(g("memory-bytes", full),
                                                       g("memory-bytes", nr))))
        eff.append(("filtering", f"candidates "
                    f"{cell(g('index-candidates-before-filtering', full), _num())} -> "
                    f"{cell(g('index-candidates-after-filtering', full), _num())} after "
                    f"filtering -> {cell(g('index-candidates-retrieved', full), _num())} "
                    f"retrieved per routing entry"))
        if "ablation-no-pruning" in labels:
            npr = "ablation-no-pruning"
            eff.append(("pruning", "routing bytes " + _change(g("memory-bytes", full),
                                                              g("memory-bytes", npr))
                        + ", retrievals/query "
                        + _change(g("index-retrievals-per-query", full),
                                  g("index-retrievals-per-query", npr))))
        out.append("\neffect of each mechanism (full design vs that mechanism off)\n"
                   + format_table(("mechanism", "effect"), eff))
    return "\n".join(out)


def format_space(res) -> str:
    ss = settings(res)
    t = res.threads()[0]
    ref = ss[0]
    header = ("strategy", "data on disk", "engine log", "logical bytes", "records",
              "space amp", "disk ÷ " + ref, "block-metadata entries", "entries ÷ " + ref,
              "loss vs oracle", "false hits")
    rows = []
    for s in ss:
        def g(n, s=s):
            return res.get(n, s, t)
        rows.append((s, cell(g("store-bytes"), fmt_bytes), cell(g("store-log-bytes"), fmt_bytes),
                     cell(g("store-logical-bytes"), fmt_bytes), cell(g("store-records"), _int),
                     cell(g("space-amplification"), lambda v: f"{v:.2f}x"),
                     cell(g("disk-ratio-to-reference-ppm"), lambda v: _ratio(v / 1e6)),
                     cell(g("index-stored-block-entries"), _int),
                     cell(g("entries-ratio-to-reference-ppm"), lambda v: _ratio(v / 1e6)),
                     cell(g("hit-rate-loss"), _pct), cell(g("false-hits"), _int)))
    blocks = res.get("indexed-blocks", ref, t)
    return (f"space amplification (paper section 6.6, Table 5)\n{conditions(res)}\n\n"
            + format_table(header, rows)
            + f"\n\ndata on disk: allocated blocks after a flush, the engine's logs apart; "
            f"logical bytes: live keys (8 B) + values; space amp: data on disk ÷ logical bytes; "
            f"block-metadata entries: block records the store holds, a block counted once per "
            f"record that carries it ({cell(blocks, _int)} unique blocks indexed).")


def _paired(a, b, fn):
    """``fn(a_i, b_i)`` per repeat (the i-th value of each) as a reading-like spread."""
    if a is None or b is None:
        return None
    vals = [fn(x, y) for x, y in zip(a.values, b.values)]
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    return _Spread(tuple(vals)) if vals else None


class _Spread:
    def __init__(self, values):
        self.values = values
        self.median, self.low, self.high = statistics.median(values), min(values), max(values)
        self.runs = len(values)


def _div(a, b):
    return a / b if b else math.inf


def format_strategies(res) -> str:
    ss = settings(res)
    t = res.threads()[0]
    ref = ss[0]
    repeat = (config(res).get("repeat") or 1) > 1
    header = ("strategy", "req/s", f"{ref} ÷ it", "match mean", "match ÷ " + ref,
              "insert mean", "insert ÷ " + ref, "loss vs oracle", "false hits",
              "store reads/match", "mem B/block", "engine cache")
    rows = []

    def g(n, s):
        return res.get(n, s, t)
    for s in ss:
        false = [res.get("false-hits", s, n) for n in res.threads()]
        rows.append((s, cell(g("request-throughput", s), _int),
                     cell(_paired(g("request-throughput", ref), g("request-throughput", s),
                                  _div), _ratio),
                     cell(g("match-latency-mean", s), fmt_seconds),
                     cell(_paired(g("match-latency-mean", s), g("match-latency-mean", ref),
                                  _div), _ratio),
                     cell(g("insert-latency-mean", s), fmt_seconds),
                     cell(_paired(g("insert-latency-mean", s), g("insert-latency-mean", ref),
                                  _div), _ratio),
                     cell(g("hit-rate-loss", s), _pct),
                     _int(sum(sum(r.values) for r in false if r is not None)),
                     cell(g("store-reads-per-match", s), _num()),
                     cell(g("memory-bytes-per-indexed-block", s), _num()),
                     cell(g("engine-cache-bytes", s), fmt_bytes)))
    blocks = g("indexed-blocks", ref)
    return "\n".join([
        f"strategies side by side (paper section 6.2)\n{conditions(res)}\n",
        format_table(header, rows),
        f"\n{ref} ÷ it: {ref}'s request throughput over this strategy's; match/insert ÷ "
        f"{ref}: this strategy's mean latency over {ref}'s.  mem B/block: in-memory bytes "
        f"(sarp: routing directory) per unique indexed block ({cell(blocks, _int)}).  false "
        f"hits: over every run."
        + ("  With repeats a ratio is taken within each repeat; cells show the median "
           "(min-max)." if repeat else "")])


#: sweep kind -> its table
FORMATTERS = {"sweep-retrieval": format_retrieval, "sweep-ablation": format_ablation,
              "sweep-space": format_space, "sweep-strategies": format_strategies}
