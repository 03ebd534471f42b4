"""The tables ``prefixbench sweep`` prints, from its suites: conditions, then one table.

Each sweep kind (retrieval, ablation, strategies, space, capacity) has its
table here; the command prints it from the suites it wrote, and ``show``
prints the same from the file.  Cells are the median over repeats with the
min-max; a ratio to the reference (the first setting) is taken within each
repeat.  The strategies sweep adds the cap rule's line above its table and,
below it, each strategy at its fastest variant (where one ran in several), each
strategy's options, the threads table and sarp's Table 4 calibration; any sweep
run with ``--breakdown`` ends with the breakdown.  All of it comes from the
suites: the figures, and the metadata keys
:data:`prefixbench.schema.SWEEP_NOTE_KEYS` (a suite written before those keys
shows what its figures allow: no paper column, no paper thread counts).
"""
from __future__ import annotations

import json
import math
import statistics

from prefixbench import phases
from prefixbench.reports.breakdown import format_breakdown
from prefixbench.reports.show import amdahl_text, cell, device_line, karp_flatt, options_text
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
    if cfg.get("interleave"):
        parts.append(f"timed runs interleaved, {cfg['interleave']:,} requests per turn "
                     "(every setting loaded first)")
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
    if md.get("allocator"):
        line2 += f"; malloc {md['allocator']}"
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
        if cfg.get("loads") == "once":
            out += ("\n  each setting loaded once, then kept (engine checkpoint, index and "
                    "oracle snapshots): every run starts from a clone of it, its index "
                    "recovered from the snapshot and the engine's cache cold")
        if f < 1:
            need = ""
            if isinstance(md.get("paper_disk_need"), (int, float)):
                need = (f"this fraction needs about {_gib(md['paper_disk_need'])} of disk "
                        f"and {_gib(md.get('paper_memory_need', 0))} of memory; ")
            out += ("\n  (the full size does not fit here, by the pre-flight estimate; "
                    f"{need}--force runs the full size)")
    return out


def _gib(n: float) -> str:
    g = n / (1 << 30)
    if g >= 1e6:
        return f"{g:.3g} GiB"
    return f"{g:,.1f} GiB" if g >= 0.1 else f"{n / (1 << 20):,.0f} MiB"


def _md_json(md: dict, key: str, default=None):
    """A metadata value the writer stored as JSON; ``default`` when absent or bad."""
    try:
        return json.loads(md[key])
    except (KeyError, TypeError, ValueError):
        return default


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


def _against(g, ref, s) -> tuple:
    """Setting ``s`` against ``ref``, within each repeat (``g(figure, setting)`` reads a
    figure): ref's request throughput over s's, then s's mean match and insert latency
    over ref's."""
    return (cell(_paired(g("request-throughput", ref), g("request-throughput", s), _div),
                 _ratio),
            cell(_paired(g("match-latency-mean", s), g("match-latency-mean", ref), _div),
                 _ratio),
            cell(_paired(g("insert-latency-mean", s), g("insert-latency-mean", ref), _div),
                 _ratio))


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
        per_req, per_match, per_insert = _against(g, ref, s)
        rows.append((s, cell(g("request-throughput", s), _int), per_req,
                     cell(g("match-latency-mean", s), fmt_seconds), per_match,
                     cell(g("insert-latency-mean", s), fmt_seconds), per_insert,
                     cell(g("hit-rate-loss", s), _pct),
                     _int(sum(sum(r.values) for r in false if r is not None)),
                     cell(g("store-reads-per-match", s), _num()),
                     cell(g("memory-bytes-per-indexed-block", s), _num()),
                     cell(g("engine-cache-bytes", s), fmt_bytes)))
    blocks = g("indexed-blocks", ref)
    cap = res.md(ref).get("cap_rule") or next(
        (res.md(s).get("cap_rule") for s in ss if res.md(s).get("cap_rule")), None)
    return "\n".join(([cap] if cap else []) + [
        f"strategies side by side (paper section 6.2)\n{conditions(res)}\n",
        format_table(header, rows),
        f"\n{ref} ÷ it: {ref}'s request throughput over this strategy's; match/insert ÷ "
        f"{ref}: this strategy's mean latency over {ref}'s.  mem B/block: in-memory bytes "
        f"(sarp: routing directory) per unique indexed block ({cell(blocks, _int)}).  false "
        f"hits: over every run."
        + ("  With repeats a ratio is taken within each repeat; cells show the median "
           "(min-max)." if repeat else "")] + strategies_notes(res))


def strategies_notes(res) -> list:
    """What the strategies sweep prints below its table: each strategy at its fastest
    variant (where one ran in several), each strategy's options, the threads table
    (more than one thread count), each repeat apart (more than one), sarp's Table 4
    beside the paper's."""
    ss = settings(res)
    out = []
    best = best_variants_table(res)
    if best:
        out.append(best)
    out.append("\noptions of each strategy\n" + format_table(
        ("strategy", "options"), [(s, options_text(res.md(s))) for s in ss]))
    counts = config(res).get("threads") or [1]
    if len(counts) > 1:
        out.append(threads_table(res, counts))
    repeats = repeats_table(res)
    if repeats:
        out.append(repeats)
    windows = windows_table(res)
    if windows:
        out.append(windows)
    sarp = [s for s in ss if res.md(s).get("strategy") == "sarp"]
    if sarp:
        out.append(table4(res, sarp[0]))
    return out


def best_variants(res) -> dict:
    """Each strategy's settings in run order, keyed by strategy name, and the fastest of
    them (highest median request throughput at the first thread count):
    ``{name: (best setting, [settings])}``."""
    t = res.threads()[0]
    groups: dict = {}
    for s in settings(res):
        groups.setdefault(res.md(s).get("strategy") or s, []).append(s)

    def rate(s):
        r = res.get("request-throughput", s, t)
        return r.median if r is not None else -math.inf
    return {name: (max(group, key=rate), group) for name, group in groups.items()}


def best_variants_table(res) -> str | None:
    """Where a strategy ran in more than one variant (block sizes, compression, ...):
    every strategy at its fastest variant, and the first setting's strategy at its
    fastest over each, within each repeat - the comparison the table above does not
    make when the reference's own best is not the first row.  None when every
    strategy ran once."""
    best = best_variants(res)
    if all(len(group) == 1 for _b, group in best.values()):
        return None
    t = res.threads()[0]
    first = next(iter(best))
    ref = best[first][0]

    def g(n, s):
        return res.get(n, s, t)
    rows = [(name, s, len(group), cell(g("request-throughput", s), _int), *_against(g, ref, s))
            for name, (s, group) in best.items()]
    header = ("strategy", "its fastest variant", "variants", "req/s", f"{first} best ÷ it",
              f"match ÷ {first} best", f"insert ÷ {first} best")
    return (f"\neach strategy at its fastest variant (highest median req/s among its rows "
            f"in this run; ratios against {first}'s fastest, within each repeat)\n"
            + format_table(header, rows))


def _watch_cells(text, n: int) -> tuple:
    """The device watch's median and p90 read latency for repeats ``0..n-1`` as cells
    ('-' where a repeat has none; a reason where it measured nothing), and the line of
    its baseline timed before any load ('' without one); ``(None, '')`` without a watch."""
    if not isinstance(text, str):
        return None, ""
    try:
        d = json.loads(text)
        by = {int(r[0]): _watch_text(r) for r in d.get("repeats", [])}
    except (ValueError, TypeError, IndexError, KeyError):
        return ["unreadable"] * n, ""
    base = by.pop(-1, None)
    line = f"device before the sweep loaded any store: {base}" if base else ""
    if not by:
        return [f"not measured ({d.get('skipped', 'no reads')})"] + ["-"] * (n - 1), line
    return [by.get(i, "-") for i in range(n)], line


def _watch_text(r) -> str:
    """``[repeat, median, p90, reads(, core wait per read)]`` as a cell."""
    wait = r[4] if len(r) > 4 else None
    return (f"{float(r[1]):.1f} us (p90 {float(r[2]):.1f}"
            + ("" if wait is None else f", {float(wait):.1f} of it waiting for a core")
            + f"; {int(r[3]):,} reads)")


def repeats_table(res) -> str | None:
    """Each repeat apart at the first thread count: every setting's request throughput
    and the first setting's over it within that repeat, and, where the sweep watched
    the device, its read latency between that repeat's turns - whether a slow repeat
    was a setting or the device under it.  None with one repeat."""
    ss = settings(res)
    t = res.threads()[0]
    tps = [res.get("request-throughput", s, t) for s in ss]
    n = max((len(x.values) for x in tps if x is not None), default=0)
    if n < 2:
        return None
    ref = tps[0]
    rows = []
    for k, (s, x) in enumerate(zip(ss, tps)):
        row = [s]
        for i in range(n):
            if x is None or i >= len(x.values):
                row.append("-")
                continue
            v = x.values[i]
            if k and ref is not None and i < len(ref.values):
                row.append(f"{_int(v)} ({_ratio(_div(ref.values[i], v))})")
            else:
                row.append(_int(v))
        rows.append(tuple(row))
    watch, before = _watch_cells(res.first().get("device_watch"), n)
    if watch is not None:
        rows.append(("device: 4 KiB direct read", *watch))
    return ("\neach repeat (request throughput; in brackets " + ss[0] + "'s over it in that "
            "repeat" + ("; device: the median and p90 latency of 4 KiB random O_DIRECT "
                        "reads at queue depth 1, timed from this process between that "
                        "repeat's turns, and the mean time a read's thread waited for a "
                        "core in it"
                        if watch is not None else "") + ")\n"
            + format_table(("setting",) + tuple(f"repeat {i + 1}" for i in range(n)), rows)
            + (f"\n{before}" if before else ""))


def windows_table(res) -> str | None:
    """Mean match latency against the windows a query spans, one column per setting
    (median over repeats, with the matches of the first), or None without the figures."""
    t = res.threads()[0] if res.threads() else 1
    ss = settings(res)
    bins = {r.params["windows"] for r in res.readings if r.threads == t
            and r.figure.name == "match-requests-windows-<windows>"}
    if not bins:
        return None
    order = sorted(bins, key=lambda b: int(b.split("-")[0]))
    rows = []
    for b in order:
        row = [b.replace("-plus", "+")]
        for s in ss:
            lat = res.get(f"match-latency-windows-{b}", s, t)
            n = res.get(f"match-requests-windows-{b}", s, t)
            row.append("-" if lat is None else
                       f"{cell(lat, fmt_seconds)} n={_int(n.values[0]) if n else '?'}")
        rows.append(tuple(row))
    seg = res.first().get("windows_segment_blocks", "?")
    return ("\nmatch latency against windows per query (windows of sarp's segment, "
            f"{seg} blocks; cells: mean match latency, n= the matches that many windows long)\n"
            + format_table(("windows",) + tuple(ss), rows))


#: sarp's Table 4 figures (paper order) and their labels
TABLE4 = (("index-candidates-before-filtering", "candidates per routing entry before filtering"),
          ("index-candidates-after-filtering", "candidates after filtering"),
          ("index-candidates-retrieved", "candidates actually retrieved"))
#: the same figures over queries sampled across a paper-scale load (``load_table4``)
TABLE4_LOAD = tuple((name.replace("index-", "index-load-", 1), label) for name, label in TABLE4)


def calibration(res, setting) -> dict:
    """``{figure: (paper value, within the tolerance)}`` for sarp's Table 4 figures and
    the trace's span share, from the paper values the suite carries; {} without them."""
    md = res.md(setting)
    t = res.threads()[0]
    paper, tol = _md_json(md, "table4_paper"), md.get("calibration_tolerance")
    if not isinstance(paper, list) or not isinstance(tol, (int, float)):
        return {}

    def within(name, want):
        """Whether ``name``'s median is within the tolerance of ``want``; None unmeasured."""
        got = res.get(name, setting, t)
        return None if got is None else abs(got.median - want) <= tol * want

    out = {}
    for (name, _), (load_name, _l), want in zip(TABLE4, TABLE4_LOAD, paper):
        out[name] = (want, bool(within(name, want)))
        ok = within(load_name, want)
        if ok is not None:
            out[load_name] = (want, ok)
    want = md.get("span_share_paper")
    if isinstance(want, (int, float)):
        out["span-share-gt3"] = (want, within("span-share-gt3", want))
    return out


def _yes(ok) -> str:
    return "-" if ok is None else ("yes" if ok else "NO")


def table4(res, s) -> str:
    """sarp's Table 4 (candidates per routing entry) and its routing state."""
    t = res.threads()[0]
    md = res.md(s)
    cal = calibration(res, s)

    def g(n):
        return res.get(n, s, t)

    def t4(name, label, digits=2):
        row = [label, cell(g(name), _num(digits))]
        if cal:
            want, ok = cal.get(name, (None, None))
            row += ["-" if want is None else _num()(want), _yes(ok)]
        return tuple(row)
    rows = [t4(n, label) for n, label in TABLE4]
    sampled = g("index-load-match-samples")
    if sampled is not None:
        rows += [t4(n, f"{label}, load") for n, label in TABLE4_LOAD]
    rows.append(t4("index-retrievals-per-query", "segment retrievals per query", 3))
    if "span-share-gt3" in cal:
        want, ok = cal["span-share-gt3"]
        got = g("span-share-gt3")
        limit = md.get("span_share_max_blocks")
        rows.append(("spans with > 3 alternatives (section 3.2, the trace)",
                     (f"not measured (over {limit:,} blocks)" if isinstance(limit, int)
                      else "not measured") if got is None else f"{got.median:.2%}",
                     f"{want:.2%}", _yes(ok)))
    extra = [("routing entries", cell(g("index-entries"), _int)),
             ("routing bytes (per indexed block)",
              f"{cell(g('memory-bytes'), _int)} "
              f"({cell(g('memory-bytes-per-indexed-block'), _num())} B/block)"),
             ("segments (copied, extended in place)",
              f"{cell(g('index-segments'), _int)} ({cell(g('index-segments-copied'), _int)}, "
              f"{cell(g('index-segments-extended'), _int)})")]
    text = _md_json(md, "index_text", {}) or {}
    if text.get("geometry"):
        extra.append(("geometry", f"{text['geometry']}, preset "
                                  f"{text.get('geometry_preset', '-')}"))
    if g("index-insert-reads-per-insert-after-match") is not None:
        extra.append(("segment reads per insert after a match (records reused from it)",
                      f"{cell(g('index-insert-reads-per-insert-after-match'), _num(3))} "
                      f"({cell(g('index-insert-records-reused-from-match'), _int)})"))
    pad = ("", "") if cal else ()
    rows += [(a, b, *pad) for a, b in extra]
    tol = md.get("calibration_tolerance")
    head = ("figure", "value") + (("paper", f"within {tol:.0%}") if cal else ())
    scale = (f"--scale {config(res).get('scale') or md.get('scale') or 'small'}, "
             f"{cell(res.get('indexed-blocks', settings(res)[0], t), _int)} indexed blocks")
    run = md.get("run_requests")
    if isinstance(run, int) and md.get("load_requests"):
        # the load's bulk path routes nothing: the candidate counts are the run phase's
        scale += f"; candidates counted over the run phase's {run:,} matches"
        if sampled is not None:
            scale += (f", and (rows ', load') over {int(sampled.median):,} of the load's "
                      "queries spread evenly over it, untimed and counted apart")
    return f"\nsarp, paper Table 4 (at {scale})\n" + format_table(head, rows)


def threads_table(res, counts: list) -> str:
    """Throughput per thread count side by side, with the speedup over the first count
    (median over repeats, each repeat against its own), Karp-Flatt and Amdahl."""
    base = counts[0]
    more = [c for c in counts if c > base]
    header = ["strategy"] + [f"req/s @{c}" for c in counts]
    for c in more:
        header += [f"speedup {c}/{base}", f"serial frac @{c}", f"Amdahl bound @{c}"]
    busy = any(res.get("cpu-cores-busy", s, c) is not None for s in settings(res) for c in counts)
    if busy:
        header += [f"cores busy @{c}" for c in counts]
    rows = []
    for s in settings(res):
        tps = {c: res.get("request-throughput", s, c) for c in counts}
        row = [s] + [cell(tps[c], _int) for c in counts]
        for c in more:
            sp = _paired(tps[c], tps[base], lambda a, b: a / b if b else None)
            e = karp_flatt(sp.median if sp is not None else math.nan, c / base)
            row += [cell(sp, lambda v: f"{v:.2f}x"), "-" if math.isnan(e) else f"{e:.3f}",
                    amdahl_text(e)]
        if busy:
            row += [cell(res.get("cpu-cores-busy", s, c), lambda v: f"{v:.2f}") for c in counts]
        rows.append(tuple(row))
    md = res.first()
    paper = ""
    if isinstance(md.get("paper_request_threads"), int):
        paper = (f" the paper ran {md['paper_request_threads']} request threads and "
                 f"{md.get('paper_rocksdb_threads', '?')} RocksDB threads;")
    device = device_line(md.get("device_probe"))
    return (f"\nrequest threads side by side (paper Fig. 11):{paper} this machine has "
            f"{md.get('cpu_count', '?')} cores.  Every count ran on the request-thread "
            f"path (throughput = requests / wall time).\n"
            + format_table(tuple(header), rows)
            + "\nserial frac: Karp-Flatt e = (1/s - 1/p) / (1 - 1/p) from the median speedup "
              "s at p times the threads; Amdahl bound: 1/e, the most any thread count gives."
            + ("  cores busy: process CPU seconds (request threads and the engine's own) per "
               "wall second of the timed requests." if busy else "")
            + (f"\n{device}" if device else ""))


class SuiteReplay:
    """One setting's breakdown figures, shaped as the replay result
    :func:`prefixbench.reports.breakdown.format_breakdown` reads."""

    def __init__(self, res, setting, threads):
        self._res, self._s, self._t = res, setting, threads
        md = res.md(setting, threads)
        self.breakdown = isinstance(md.get("breakdown_overhead"), (int, float))
        self.breakdown_overhead = float(md.get("breakdown_overhead", 0.0))
        self.breakdown_overhead_insert = float(md.get("breakdown_overhead_insert", 0.0))
        self.breakdown_pair_ns = float(md.get("breakdown_pair_ns", 0.0))
        self.phase_ns = {r.params["phase"].replace("-", "_"): None for r in res.readings
                         if r.setting == setting and r.threads == threads
                         and r.figure.name in ("match-time-<phase>", "insert-time-<phase>")}

    def _median(self, name: str) -> float:
        r = self._res.get(name, self._s, self._t)
        return r.median if r is not None else 0.0

    def latency(self, which: str) -> float:
        return self._median(f"{which}-latency-mean")

    def phase_mean(self, which: str, name: str) -> float:
        return self._median(f"{which}-time-{name.replace('_', '-')}")

    def cpu_mean(self, which: str) -> float:
        return self._median(f"{which}-cpu-time")


def breakdown(res) -> str | None:
    """The breakdown under a sweep run with ``--breakdown`` (None without one)."""
    t = res.threads()[0] if res.threads() else 1
    rows = [(s, SuiteReplay(res, s, t)) for s in settings(res)]
    if not any(r.breakdown for _, r in rows):
        return None
    out = "where the time goes (paper Fig. 7)\n" + format_breakdown(rows)
    reads = {s: r.median for s, _r in rows
             if (r := res.get(_FILE_READS, s, t)) is not None}
    for part in (storage_bound(rows, reads), _io_table(res, t)):
        if part:
            out += "\n\n" + part
    return out


def storage_bound(rows, file_reads=None) -> str | None:
    """How far the first setting could lead each other one on its storage time alone:
    the other's mean match + insert over the first's storage time per request, the
    ratio it would reach with every other part of its own request at zero.  With the
    engine's counters (``file_reads``: setting -> file reads per request), also their
    ratio, which a throughput ratio tends to once the device is the bottleneck (many
    request threads).  A target above both needs fewer or cheaper reads and writes,
    not less code around them."""
    (first, ref), others = rows[0], rows[1:]
    if not ref.breakdown or not others:
        return None
    store = sum(ref.phase_mean(w, kind) for w in ("match", "insert")
                for kind in phases.STORAGE_KINDS)
    if store <= 0:
        return None
    file_reads = file_reads or {}
    mine = file_reads.get(first)
    with_reads = bool(mine) and any(file_reads.get(label) for label, _r in others)
    table = []
    for label, r in others:
        req = r.latency("match") + r.latency("insert")
        if req <= 0:
            continue
        row = [label, f"{req * 1e6:.1f} us", f"{store * 1e6:.1f} us", _ratio(req / store)]
        if with_reads:
            theirs = file_reads.get(label)
            row.append(_ratio(theirs / mine) if theirs else "-")
        table.append(tuple(row))
    if not table:
        return None
    header = ["strategy", "its match + insert", f"{first} storage", f"{first} ÷ it at most"]
    notes = [f"storage: {first}'s mean storage time in match plus insert (reads and writes, "
             "every storage kind and cache hits included); a throughput target above it needs "
             "fewer or cheaper store calls"]
    if with_reads:
        header.append("file reads ÷ " + first)
        notes.append(f"file reads ÷ {first}: the engine's file reads per request over "
                     f"{first}'s, what a throughput ratio tends to when the device is the "
                     "bottleneck")
    return (f"what storage alone allows ({first}'s storage time per request, every other "
            "part of its request at zero)\n" + format_table(tuple(header), table)
            + "\n" + "\n".join(notes))


#: the figure of the engine's file reads per request (the I/O table and the storage bound)
_FILE_READS = "store-device-reads-per-request"
#: (column, figure, how to show its median) of the engine's I/O counters table
_IO_COLUMNS = (
    ("file reads/request", _FILE_READS, lambda v: f"{v:.2f}"),
    ("cache hits/request", "store-cache-hits-per-request", lambda v: f"{v:.2f}"),
    ("memtable hits/request", "store-memtable-hits-per-request", lambda v: f"{v:.2f}"),
    ("compaction bytes", "store-compaction-bytes", fmt_bytes),
    ("flush bytes", "store-flush-bytes", fmt_bytes),
)


def _io_table(res, threads) -> str | None:
    """Where each setting's reads were served, from the engine's own counters (None
    when no setting has them)."""
    rows = []
    for s in settings(res):
        got = [res.get(fig, s, threads) for _c, fig, _f in _IO_COLUMNS]
        if all(g is None for g in got):
            continue
        rows.append((s, *(cell(g, f) for (_c, _fig, f), g in zip(_IO_COLUMNS, got)),
                     res.md(s, threads).get("store_level_files", "-")))
    if not rows:
        return None
    return ("where the reads were served (the engine's counters over the timed requests; "
            "RocksDB statistics, on with --breakdown)\n"
            + format_table(("strategy",) + tuple(c for c, _f, _g in _IO_COLUMNS)
                           + ("table files at start",), rows)
            + "\nfile reads: reads from the engine's files, a compaction's read-aheads "
              "included; cache hits: data blocks found in the block cache (and records in a row "
              "cache); the byte columns "
              "are what compactions read and wrote and flushes wrote during those requests; "
              "table files at start: the store's table files per level (L0 first) when its "
              "timed requests began, which sets how many files a read may look in")


def _capacity_text(pool_blocks) -> str:
    return pool_blocks if isinstance(pool_blocks, str) else f"{pool_blocks:,}"


def _capacity_rows(res):
    """``(setting, strategy, capacity, metadata)`` per setting, in run order."""
    out = []
    for s in settings(res):
        md = res.md(s)
        cap = md.get("capacity_blocks", md.get("pool_blocks"))
        out.append((s, str(md.get("strategy", s)), cap, md))
    return out


def _rate(res, name, s):
    """``name`` / prompt tokens of setting ``s`` (median of the per-run ratios)."""
    return _paired(res.get(name, s), res.get("prompt-tokens", s),
                   lambda a, b: a / b if b else None)


def capacity_violations(res) -> list:
    """Stack-inclusion violations, ``(who, smaller cap, its rate, larger cap, its
    rate)``: the oracle's hit rate (and an exact strategy's) must not fall as capacity
    grows; empty where the suite says the check does not apply."""
    rows = _capacity_rows(res)
    if not rows or not rows[0][3].get("stack_inclusion_checked"):
        return []
    out = []
    for strategy in dict.fromkeys(r[1] for r in rows):
        mine = [r for r in rows if r[1] == strategy]
        curves = [("oracle", "oracle-hit-tokens")]
        if mine[0][3].get("exact"):
            curves.append((strategy, "hit-tokens"))
        for who, fig in curves:
            pts = []
            for s, _, cap, _ in mine:
                h, p = res.get(fig, s), res.get("prompt-tokens", s)
                pts.append((cap, h.median if h else 0.0, p.median if p else 0.0))
            for (c0, h0, p0), (c1, h1, p1) in zip(pts, pts[1:]):
                if h1 < h0:
                    v = (who if who != "oracle" else f"oracle ({strategy})", c0,
                         h0 / p0 if p0 else 0.0, c1, h1 / p1 if p1 else 0.0)
                    if v not in out:
                        out.append(v)
    return out


def format_capacity(res) -> str:
    """``sweep capacity``: hit rate at each capacity beside the oracle with the same
    pools, then the stack-inclusion check and the capacity cliff."""
    rows = _capacity_rows(res)
    md = res.first()
    cfg = config(res)
    head = (f"capacity sweep: {md.get('workload', '?')}, {md.get('pool_workers', '?')} "
            f"worker(s), route {md.get('pool_route', '?')}, evict {md.get('pool_evict', '?')}, "
            f"engine {cfg.get('engine', md.get('engine', '?'))}")
    table = []
    for s, strategy, cap, _ in rows:
        def g(n, s=s):
            return res.get(n, s)
        table.append((strategy, _capacity_text(cap), cell(g("token-hit-rate"), _pct2),
                      cell(g("oracle-hit-rate"), _pct2),
                      cell(g("hit-rate-loss"), lambda v: f"{v:.3%}"),
                      cell(_rate(res, "any-worker-hit-tokens", s), _pct2),
                      cell(g("evictions-per-request"), lambda v: f"{v:.1f}"),
                      cell(g("request-throughput"), _int),
                      cell(g("match-latency-mean"), fmt_seconds),
                      cell(g("match-latency-p99"), fmt_seconds),
                      cell(g("insert-latency-mean"), fmt_seconds),
                      _remove_mean(g("remove-latency-mean")),
                      cell(g("index-entries"), _int), cell(g("index-memory-bytes"), fmt_bytes),
                      cell(g("false-hits"), _int)))
    notes = _md_json(md, "capacity_notes", []) or []
    lines = [head, *notes, format_table(
        ("strategy", "pool blocks", "hit rate", "oracle", "loss", "any worker",
         "evictions/req", "req/s", "match mean", "match p99", "insert mean", "remove mean",
         "index entries", "index memory", "false hits"), table)]
    if md.get("stack_inclusion_checked"):
        bad = capacity_violations(res)
        if not bad:
            lines.append("stack inclusion (LRU, one worker): holds - the hit rate never "
                         "falls as capacity grows")
        for who, c0, h0, c1, h1 in bad:
            lines.append(f"stack inclusion VIOLATED: {who} hit rate {h1:.4%} at "
                         f"{_capacity_text(c1)} blocks < {h0:.4%} at "
                         f"{_capacity_text(c0)} blocks")
    else:
        lines.append("stack inclusion: not checked (it holds for --evict lru with one "
                     "worker); the curve is as measured")
    first = [r for r in rows if r[1] == rows[0][1]] if rows else []
    best = None
    for (sa, _, ca, _), (sb, _, cb, _) in zip(first, first[1:]):
        ra, rb = res.get("oracle-hit-rate", sa), res.get("oracle-hit-rate", sb)
        if ra is None or rb is None:
            continue
        drop = rb.median - ra.median
        if best is None or drop > best[0]:
            best = (drop, ca, ra.median, cb, rb.median)
    if best is not None and best[0] > 0:
        _, c0, h0, c1, h1 = best
        lines.append(f"capacity cliff: oracle hit rate {h1:.2%} at {_capacity_text(c1)} "
                     f"blocks, {h0:.2%} at {_capacity_text(c0)} blocks (the largest drop)")
    return "\n".join(lines)


def _remove_mean(r) -> str:
    """A pool that never evicted made no remove call: no latency, not one of 0 s."""
    return "-" if r is None or not r.high else cell(r, fmt_seconds)


def _pct2(v) -> str:
    return f"{v:.2%}"


def _with_breakdown(fmt):
    def render(res) -> str:
        bd = breakdown(res)
        return fmt(res) + (f"\n\n{bd}" if bd else "")
    render.__doc__ = fmt.__doc__
    return render


#: sweep kind -> its table
FORMATTERS = {k: _with_breakdown(f) for k, f in {
    "sweep-retrieval": format_retrieval, "sweep-ablation": format_ablation,
    "sweep-space": format_space, "sweep-strategies": format_strategies,
    "sweep-capacity": format_capacity}.items()}
