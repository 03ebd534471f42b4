"""The tables commands print, rendered from their result suites only.

``run``, ``scale``, ``recover``, ``crashtest``, ``workload describe``,
``payload``, ``hash-bench``, ``engine-bench``, ``plugins``, ``placement
solve|frontier|bench``, ``demo`` (a run's table per strategy) and ``sweep``
(every kind: :mod:`prefixbench.reports.sweeps`) print through :func:`render` from the suites they just wrote (or built in
memory, without ``-o``), and ``prefixbench show RESULT.json`` renders the same
table from the file, so the two cannot drift.  A figure measured in several
runs shows the median with the min-max; a figure the suite lists as zero
shows 0; one the suite lacks shows ``-``.
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

from prefixbench.reports.tables import fmt_bytes, fmt_seconds, format_table
from prefixbench.schema import SchemaError


def karp_flatt(speedup: float, p: float) -> float:
    """Measured serial fraction ``e = (1/s - 1/p) / (1 - 1/p)`` of a speedup ``s`` at
    ``p`` times the threads (Karp-Flatt); ``1/e`` is the Amdahl bound it implies.
    NaN for ``p <= 1`` or no speedup; e <= 0 means no serial part was measurable."""
    if p <= 1 or not speedup or speedup != speedup:
        return float("nan")
    return (1 / speedup - 1 / p) / (1 - 1 / p)


def device_line(text) -> str:
    """The device probe's figures as one line ('' when the sweep did not probe):
    the most a setting that keeps one device read in flight per thread can scale."""
    if not isinstance(text, str):
        return ""
    try:
        d = json.loads(text)
        if d.get("skipped"):
            return f"device alone: not measured ({d['skipped']})."
        counts, rounds = list(d["threads"]), d["rounds"]
        rates = [statistics.median(r[i] for r in rounds) for i in range(len(counts))]
        parts = [f"{rates[0]:,.0f} reads/s at {counts[0]} thread{'s' if counts[0] > 1 else ''}"]
        for i in range(1, len(counts)):
            sc = [r[i] / r[0] for r in rounds if r[0] > 0]
            parts.append(f"{rates[i]:,.0f} at {counts[i]} ({statistics.median(sc):.2f}x, "
                         f"{min(sc):.2f}-{max(sc):.2f}x)")
        return (f"device alone ({d['block_bytes'] // 1024} KiB random O_DIRECT reads in "
                f"{d['directory']}, {len(rounds)} rounds of {d['seconds']:g} s, scaling taken "
                f"within each round): {', '.join(parts)}; a setting whose threads each wait "
                "on one device read at a time scales at most about this much.")
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError):
        return "device alone: unreadable probe figures in the metadata."


def amdahl_text(e: float) -> str:
    """``1/e`` as a speedup bound, for tables."""
    if e != e:
        return "-"
    return "unbounded" if e <= 0 else f"{1 / e:.2f}x"


def cell(reading, fmt) -> str:
    """A reading as ``median (min-max)``, or its one value; ``-`` without a reading."""
    if reading is None:
        return "-"
    if reading.runs > 1 and reading.low != reading.high:
        return f"{fmt(reading.median)} ({fmt(reading.low)}-{fmt(reading.high)})"
    return fmt(reading.median)


def _int(v) -> str:
    return f"{v:,.0f}"


def _pct4(v) -> str:
    return f"{v:.4%}"


def _latencies(res, which: str, threads=None) -> str:
    return " / ".join(cell(res.get(f"{which}-latency-{q}", None, threads), fmt_seconds)
                      for q in ("mean", "p50", "p99", "p999"))


def options_text(md: dict) -> str:
    """The options a setting was given, then the values in effect of its options
    beyond the paper that it was not given (defaults a reader would not see)."""
    try:
        config = json.loads(md.get("config", "{}"))
        opts = config.get("strategy_options") or {}
        beyond = config.get("beyond_paper_options") or {}
        engine = config.get("setting_engine_options") or {}
    except (TypeError, ValueError, AttributeError):
        opts, beyond, engine = {}, {}, {}
    text = ", ".join(f"{k}={v}" for k, v in opts.items()) or "(defaults)"
    if engine:
        text += "; its engine: " + ", ".join(f"{k}={v}" for k, v in engine.items())
    rest = {k: v for k, v in beyond.items() if k not in opts}
    if rest:
        text += "; beyond the paper: " + ", ".join(f"{k}={_option_value(v)}" for k, v in rest.items())
    return text


def _option_value(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def format_run(res) -> str:
    """``prefixbench run``: the figures of one replay as a two-column table, then the
    pool figures (``--pool-blocks``) or the breakdown (``--breakdown``)."""
    md = res.first()
    engine = md.get("engine", "none")
    g = res.get
    amp = g("space-amplification")
    rows = [
        ("strategy / engine / workload", f"{md.get('strategy', '?')} / "
         f"{'-' if engine == 'none' else engine} / {md.get('workload', '?')}"),
        ("strategy options", options_text(md)),
        ("requests", cell(g("requests"), _int)),
        ("throughput", cell(g("request-throughput"), _int) + " requests/s (match+insert time)"),
        ("match latency mean / p50 / p99 / p999", _latencies(res, "match")),
        ("insert latency mean / p50 / p99 / p999", _latencies(res, "insert")),
        ("token hit rate", f"{cell(g('token-hit-rate'), _pct4)} (oracle "
         f"{cell(g('oracle-hit-rate'), _pct4)}, loss {cell(g('hit-rate-loss'), _pct4)} "
         f"of oracle hits)"),
        ("false hits", cell(g("false-hits"), _int)),
        ("store reads per match", cell(g("store-reads-per-match"), lambda v: f"{v:.2f}")),
        ("store bytes on disk (data / engine log)",
         f"{cell(g('store-bytes'), fmt_bytes)} / {cell(g('store-log-bytes'), fmt_bytes)}"),
        ("logical bytes stored / space amplification",
         f"{cell(g('store-logical-bytes'), fmt_bytes)} / "
         f"{cell(amp, lambda v: f'{v:.2f}x')}"),
        ("index memory", cell(g("index-memory-bytes"), fmt_bytes)),
    ]
    if g("match-latency-warm") is not None:
        rows.append(("warmed match latency (pyperf runner)",
                     cell(g("match-latency-warm"), fmt_seconds)))
    rows.append(("gc", str(md.get("gc", "-"))))
    out = format_table(("figure", "value"), rows)
    if md.get("pool_blocks") is not None:
        out += "\n" + format_pool(res)
    from prefixbench.reports.breakdown import format_breakdown
    from prefixbench.reports.sweeps import SuiteReplay
    split = SuiteReplay(res, None, 1)
    if split.breakdown:
        out += ("\n\nwhere the time goes (paper Fig. 7)\n"
                + format_breakdown([(md.get("strategy", "?"), split)]))
    return out


def format_pool(res) -> str:
    """A bounded-pool run's figures (``run --pool-blocks``), under its table."""
    md, g = res.first(), res.get
    blocks = md.get("pool_blocks")
    prompt = g("prompt-tokens")

    def share(name):
        r = g(name)
        return r.median / prompt.median if r is not None and prompt and prompt.median else 0.0
    remove = g("remove-latency-mean")
    rows = [
        ("pools", f"{md.get('pool_workers', '?')} worker(s) x "
                  f"{blocks if isinstance(blocks, str) else f'{blocks:,}'} blocks, evict "
                  f"{md.get('pool_evict', '?')}, route {md.get('pool_route', '?')}"),
        ("hit rate on the routed worker", f"{cell(g('token-hit-rate'), _pct4)} (oracle, "
                                          f"same pools {cell(g('oracle-hit-rate'), _pct4)})"),
        ("hit rate on any worker", f"{share('any-worker-hit-tokens'):.4%} (oracle "
                                   f"{share('oracle-any-worker-hit-tokens'):.4%})"),
        ("evictions / removals per request",
         f"{cell(g('evictions-per-request'), _f2)} / {cell(g('removals-per-request'), _f2)}"),
        ("remove latency mean / p99 (per call)",
         f"{cell(remove, fmt_seconds)} / {cell(g('remove-latency-p99'), fmt_seconds)}"
         if remove is not None and remove.high else "- (nothing evicted)"),
        ("missing locations", cell(g("missing-locations"), _int)),
        ("index entries at the end", f"{cell(g('index-entries'), _int)} (pools hold "
                                     f"{cell(g('pool-blocks-held'), _int)} blocks)"),
    ]
    return format_table(("pool figure", "value"), rows)


def _f2(v) -> str:
    return f"{v:.2f}"


def format_scale(res) -> str:
    """``prefixbench scale``: throughput per thread count against the first."""
    counts = res.threads()
    n0 = counts[0]
    base = res.get("request-throughput", None, n0)
    base = base.median if base is not None and base.median else 1.0
    table = []
    for n in counts:
        tp = res.get("request-throughput", None, n)
        s = (tp.median if tp is not None else 0.0) / base
        e = karp_flatt(s, n / n0)
        table.append((n, cell(tp, _int), f"{s:.2f}x", "-" if e != e else f"{e:.3f}",
                      amdahl_text(e),
                      cell(res.get("match-latency-mean", None, n), fmt_seconds),
                      cell(res.get("match-latency-p99", None, n), fmt_seconds),
                      cell(res.get("insert-latency-mean", None, n), fmt_seconds),
                      cell(res.get("insert-latency-p99", None, n), fmt_seconds),
                      cell(res.get("token-hit-rate", None, n), _pct4),
                      cell(res.get("false-hits", None, n), _int)))
    out = (format_table(("threads", "requests/s", f"vs {n0} thr", "serial frac",
                         "Amdahl bound", "match mean", "match p99", "insert mean",
                         "insert p99", "hit rate", "false hits"), table)
           + f"\nserial frac: Karp-Flatt e = (1/s - 1/p) / (1 - 1/p), s the speedup over "
             f"{n0} thread{'s' if n0 > 1 else ''} at p times as many; Amdahl bound: 1/e.")
    device = device_line(res.first().get("device_probe"))
    if device:
        out += "\n" + device
    gil = [(n, res.md(None, n).get("gil_free")) for n in counts]
    if any(g for _, g in gil):
        out += "\nwithout the GIL (Python glue between these parts always holds it):\n"
        out += "\n".join(f"  {n} thr: {g or '-'}" for n, g in gil)
    return out


def _s4(v) -> str:
    return f"{v:.4f}"


def format_recover(res) -> str:
    """``prefixbench recover``: the recovery split by phase (median, min-max of repeats)."""
    md, g = res.first(), res.get
    eng = md.get("engine", "none")
    entries = g("unique-block-entries")
    build = md.get("build_seconds")
    probe = md.get("probe_tokens")
    before = g("probe-hit-tokens-before")

    def rate(v):
        return f"{v / max(probe, 1):.6f}" if isinstance(probe, (int, float)) else "-"
    rows = [
        ("strategy / engine", f"{md.get('strategy', '?')} / {'-' if eng == 'none' else eng}"),
        ("unique block entries", f"{cell(entries, _int)} ({md.get('build_copies', '?')} copies "
         f"of {md.get('workload', '?')}, {_int(md.get('build_requests', 0))} requests)"),
        ("build", (f"{build:.2f} s" if isinstance(build, (int, float)) else "-")
         + f"; snapshot written in {cell(g('snapshot-write'), lambda v: f'{v:.3f}')} s"),
        ("snapshot bytes", cell(g("snapshot-bytes"), _int)),
        ("recovery source", str(md.get("recovery_source", "-"))),
        ("plugin registry (imports)", cell(g("recovery-plugin-registry"), _s4) + " s"),
        ("engine open", cell(g("recovery-engine-open"), _s4) + " s"),
        ("load / init / deserialize / rebuild", " / ".join(
            cell(g(f"recovery-{p}"), _s4) for p in ("load", "init", "deserialize", "rebuild"))
         + " s"),
        ("first match", cell(g("recovery-first-match"), _s4) + " s"),
        ("first served match", f"{cell(g('recovery-total'), _s4)} s after the child's start "
         f"({cell(g('recovery-process-start-to-first-match'), lambda v: f'{v:.3f}')} s wall "
         f"incl. interpreter, all probes)"),
        ("index recovery", f"{cell(g('recovery-index'), _s4)} s (load + init + deserialize "
         f"+ rebuild)"),
        ("in-memory entries / bytes", f"{cell(g('index-entries'), _int)} / "
         f"{cell(g('index-memory-bytes'), _int)}"),
        ("peak RSS", cell(g("peak-rss"), lambda v: f"{v / 2**20:,.1f} MiB")),
        ("probe hit rate before / after",
         f"{rate(before.median) if before else '-'} / "
         f"{rate(md['probe_hit_tokens_after']) if 'probe_hit_tokens_after' in md else '-'}"
         f" ({'equal' if md.get('hit_rate_equal') else 'DIFFERENT'})"),
    ]
    n = int(md.get("recoveries", 1) or 1)
    if n > 1:
        rows.append(("recoveries (median shown)", f"{n}, each cell the median (min-max)"))
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:>{w}}  {v}" for k, v in rows)


def format_crashtest(res) -> str:
    """``prefixbench crashtest``: one row per engine and strategy."""
    head = ("engine", "strategy", "kill points", "killed", "acked inserts", "blocks checked",
            "lost", "false matches", "recovery failures", "failing seeds", "kill-at reached")
    rows = []
    for s in res.settings():
        md = res.md(s)
        vals = [cell(res.get(f"crash-{n}", s), _int) for n in (
            "kill-points", "killed", "acked-inserts", "blocks-checked", "lost-inserts",
            "false-matches", "recovery-failures")]
        seeds = str(md.get("failing_seeds", "-")).split(",")
        rows.append((md.get("engine", "?"), md.get("strategy", "?"), *vals,
                     ",".join(seeds[:10]) or "-", str(md.get("kill_at", "-"))))
    return format_table(head, rows)


#: ``workload describe``'s rows: (figure, label, format)
DESCRIBE_ROWS = (
    ("workload-block-size", "block size (tokens)", "d"),
    ("workload-sessions", "sessions", "d"),
    ("workload-turns", "turns", "d"),
    ("workload-requests", "requests", "d"),
    ("workload-prompt-tokens", "prompt tokens", "d"),
    ("workload-inserted-tokens", "inserted tokens (full blocks)", "d"),
    ("workload-unique-blocks", "unique blocks", "d"),
    ("workload-mean-prompt-tokens", "mean prompt tokens", ".1f"),
    ("workload-exact-hit-rate", "token hit rate, exact, infinite cache", "%"),
    ("workload-span-blocks", "span length (blocks)", "d"),
    ("workload-spans", "spans (256 tokens, at least 1 block)", "d"),
    ("span-share-gt3", "spans with > 3 alternatives", "%"),
    ("workload-span-alternatives-mean", "mean alternatives per span", ".2f"),
    ("workload-routing-observations", "routing observations", "d"),
    ("workload-candidates-per-routing-entry", "candidates per routing entry (proxy)", ".2f"),
    ("workload-next-block-observations", "Fig. 3 observations (top 10%)", "d"),
    ("workload-next-block-rule-out", "candidates ruled out by the next block", "%"),
)


def format_describe(res) -> str:
    """``workload describe``: a workload's characteristics, two columns (n/a: not measured)."""
    rows = [("workload", str(res.first().get("workload", "?")))]
    for name, label, fmt in DESCRIBE_ROWS:
        r = res.get(name)
        if r is None:
            text = "n/a"
        elif fmt == "%":
            text = f"{100 * r.median:.2f}%"
        elif fmt == "d":
            text = f"{r.median:,.0f}"
        else:
            text = format(r.median, fmt)
        rows.append((label, text))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {text:>14}" for label, text in rows)


def _spread(values) -> float:
    return (max(values) - min(values)) / min(values)


def _point_order(point: str):
    return (1, 0) if point == "layerwise" else (0, int(point[1:]))


def format_payload(res) -> str:
    """``prefixbench payload``: restore time per path and point, then the stripes' shape
    (their spread across object counts, raw and against the adjacent ``seq`` restore)."""
    md = res.first()
    try:
        cfg = json.loads(md.get("config", "{}"))
        points_md = json.loads(md.get("payload_points", "{}"))
    except (TypeError, ValueError):
        cfg, points_md = {}, {}
    found = [r.params for r in res.readings if r.name.startswith("restore-")]
    paths = [p for p in str(cfg.get("paths", "")).split(",") if p]
    paths += [d["path"] for d in found if d["path"] not in paths]
    points = sorted({d["point"] for d in found}, key=_point_order)
    med = statistics.median
    table, by = [], {}
    for p in paths:
        for q in points:
            tag = f"{p}-{q}"
            t = res.get(f"restore-{tag}")
            if t is None:
                continue
            objs, restored, cache = points_md.get(tag, [None, None, "-"])
            gib = [restored / v / (1 << 30) for v in t.values] if restored else []
            by.setdefault(p, {})[q] = (t, med(gib) if gib else None)
            ev = res.get(f"layer-events-{tag}")

            def m(name, fmt):
                r = res.get(f"{name}-{tag}")
                return fmt(med(r.values)) if r is not None else "-"
            table.append((p, q[1:] if q != "layerwise" else f"layerwise ({objs})",
                          f"{t.median:.4f}", f"{t.low:.4f}",
                          "-" if not gib else f"{med(gib):.2f}",
                          m("read-calls", lambda v: str(int(v))),
                          m("bytes-read", lambda v: str(int(v))),
                          m("host-us-per-object", lambda v: f"{v:.1f}"),
                          int(ev.high) if ev is not None and ev.high else "", cache))
    out = [format_table(("path", "objects", "median s", "min s", "GiB/s", "read calls",
                         "bytes read", "us/object", "layer events", "cache"), table)]
    st = {q: v for q, v in by.get("stripes", {}).items() if q != "layerwise"}
    if len(st) > 1:
        out.append(f"stripes: spread across object counts "
                   f"{_spread([t.median for t, _ in st.values()]) * 100:.1f}% of medians, "
                   f"{_spread([t.low for t, _ in st.values()]) * 100:.1f}% of minimums")
    if "stripes" in by and "seq" in by:
        adj = {q: med([a / b for a, b in zip(t.values, by["seq"][q][0].values)])
               for q, (t, _) in by["stripes"].items() if q in by["seq"]}
        flat = [v for q, v in adj.items() if q != "layerwise"]
        if len(flat) > 1:
            out.append("stripes / adjacent seq restore (median per point): "
                       + ", ".join(f"{q[1:] if q != 'layerwise' else q}: {v:.3f}"
                                   for q, v in adj.items())
                       + f"; spread {_spread(flat) * 100:.1f}%")
        bw = {p: [g for _, g in by[p].values() if g] for p in ("stripes", "seq")}
        if bw["stripes"] and bw["seq"]:
            line = f"stripes: {med(bw['stripes']) / med(bw['seq']):.2f} of the sequential " \
                   f"O_DIRECT read bandwidth"
            if flat:
                line += f" ({1 / med(flat):.2f} against the adjacent seq restores)"
            out.append(line)
    return "\n".join(out)


def _value(res, name, default=0.0) -> float:
    r = res.get(name)
    return r.median if r is not None else default


def format_hash_bench(res) -> str:
    """``prefixbench hash-bench``: tokens per second, compiled path against Python."""
    md, g = res.first(), res.get
    best = md.get("hash_repeat", 3)
    return (f"chained hashing, block size {_value(res, 'hash-block-size'):.0f}, one core"
            f"{'' if md.get('hash_compiled', 1) else ' (compiled path not built: both Python)'}"
            f"\n  Cython : {cell(g('hash-compiled-tokens-per-second'), _mtok(1))} M tokens/s "
            f"({_value(res, 'hash-compiled-tokens'):,.0f} tokens, best of {best})\n"
            f"  Python : {cell(g('hash-python-tokens-per-second'), _mtok(3))} M tokens/s "
            f"({_value(res, 'hash-python-tokens'):,.0f} tokens)\n"
            f"  ratio  : {cell(g('hash-speedup'), _int)}x")


def _mtok(digits: int):
    return lambda v: f"{v / 1e6:9.{digits}f}"


#: ``engine-bench``'s lines: (label, figure or metadata key, format)
ENGINE_LINES = (
    ("engine", "md:engine", str), ("n_keys", "engine-keys", _int),
    ("value_size", "engine-value-bytes", _int), ("batch", "engine-batch", _int),
    ("cache_bytes", "engine-cache-bytes", _int), ("direct_io", "md:direct_io", str),
    ("keys_per_pass", "engine-keys-per-pass", _int),
    ("get_s_per_key", "engine-get-latency", lambda v: f"{v * 1e6:.3f} us"),
    ("get_s_per_key_median", "engine-get-latency-median", lambda v: f"{v * 1e6:.3f} us"),
    ("get_many_s_per_key", "engine-get-many-latency", lambda v: f"{v * 1e6:.3f} us"),
    ("get_many_s_per_key_median", "engine-get-many-latency-median",
     lambda v: f"{v * 1e6:.3f} us"),
    ("size_on_disk_bytes", "store-bytes", _int),
)


def format_engine_bench(res) -> str:
    """``prefixbench engine-bench``: one line per figure, the note last."""
    md = res.first()
    lines = []
    for label, src, fmt in ENGINE_LINES:
        if src.startswith("md:"):
            v = md.get(src[3:], "-")
            text = {0: "False", 1: "True"}.get(v, str(v)) if src == "md:direct_io" else str(v)
        else:
            text = cell(res.get(src), fmt)
        lines.append(f"{label:>26}: {text}")
    if md.get("engine_note"):
        lines.append(f"{'note':>26}: {md['engine_note']}")
    return "\n".join(lines)


def format_plugins(res) -> str:
    """``prefixbench plugins``: every plugin, and with ``--options`` each strategy's and
    each engine's options."""
    md = res.first()
    try:
        infos = json.loads(md.get("plugins", "[]"))
    except (TypeError, ValueError):
        raise SchemaError(f"{res.path}: the plugins list in the metadata is not JSON; "
                          f"rerun `prefixbench plugins -o`") from None
    out = format_table(("kind", "name", "package", "version", "summary"),
                       [(i["kind"], i["name"], i["package"], i["version"], i["summary"])
                        for i in infos])
    if md.get("plugins_options"):
        rows = [(i["name"], key, default, meaning) for i in infos if i["kind"] == "strategy"
                for key, default, meaning in i.get("options", [])]
        out += "\n\n" + format_table(("strategy", "option", "default", "meaning"), rows)
        rows = [(i["name"], key, default, meaning) for i in infos if i["kind"] == "engine"
                for key, default, meaning in i.get("options", [])]
        if rows:
            out += "\n\n" + format_table(("engine", "option", "default", "meaning"), rows)
    return out


# ----------------------------------------------------------------------------- placement
@dataclass
class PlacementRow:
    """One policy at one budget of a frontier, as its suite records it."""

    policy: str
    budget: int | None
    ckpt_per_entry: float
    ckpt_bytes: float
    recompute: float            # expected recompute per evaluated hit, blocks
    recompute_tokens: float
    kept: float                 # share of the dense hit kept
    size: int | None            # positions up to the deepest evaluated hit; None: not recorded


#: the per-row measures of ``placement-<tag>-<measure>``
PLACEMENT_MEASURES = ("ckpt-per-entry", "ckpt-bytes", "recompute-blocks", "recompute-tokens",
                      "kept-ppm", "positions")
_ROW_NAME = re.compile(r"placement-(?P<tag>.+)-(?P<what>" + "|".join(PLACEMENT_MEASURES)
                       + r")\Z")


def _tag_policy(tag: str) -> tuple:
    """(policy, budget) from a row tag of a suite without ``placement_rows``: the tag
    spells ``:`` and ``/`` as ``-``, so ``block-4`` reads as ``block:4``."""
    m = re.fullmatch(r"(?P<p>.+?)(?:-m(?P<m>\d+))?", tag)
    pol, budget = m.group("p"), (int(m.group("m")) if m.group("m") else None)
    pol = re.sub(r"\A(block|uniform|geometric)-(\d+)\Z", r"\1:\2", pol)
    return ("dp/entry" if pol == "dp-entry" else pol), budget


def placement_rows(res) -> list:
    """The frontier's rows in table order.  A suite written before ``placement_rows``
    dropped each row's zero values (pyperf refuses 0) and has no positions: a
    measure missing beside the row's others was 0, its size is None."""
    md = res.first()
    try:
        listed = json.loads(md["placement_rows"]) if "placement_rows" in md else None
    except (TypeError, ValueError):
        raise SchemaError(f"{res.path}: the placement rows in the metadata are not JSON; "
                          f"rerun `prefixbench placement frontier -o`") from None
    if listed is None:
        tags = []
        for r in res.readings:
            m = _ROW_NAME.match(r.name)
            if m and m.group("tag") not in tags:
                tags.append(m.group("tag"))
        listed = [[*_tag_policy(t), t] for t in tags]
    out = []
    for policy, budget, tag in listed:
        def v(what):
            r = res.get(f"placement-{tag}-{what}")
            return r.median if r is not None else 0.0
        size = res.get(f"placement-{tag}-positions")
        out.append(PlacementRow(policy, budget, v("ckpt-per-entry"), v("ckpt-bytes"),
                                v("recompute-blocks"), v("recompute-tokens"),
                                v("kept-ppm") / 1e6,
                                int(size.median) if size is not None else
                                (0 if "placement_rows" in md else None)))
    return out


def _row_kind(row) -> str:
    return row.policy.split(":")[0].split("/")[0]


#: heuristics placing the same positions on every entry / placing per entry
FIXED_POLICIES = ("block", "uniform", "geometric")
PER_ENTRY_POLICIES = ("end", "boundary")


def placement_comparison(rows, budgets) -> list:
    """Per budget: ``(M, dp, dp/entry, best fixed heuristic, best per-entry heuristic)``,
    each heuristic the lowest R among those within budget M: a fixed policy with at
    most M positions up to the deepest evaluated hit (offline that is dp's feasible
    set, so offline dp is never worse), a per-entry policy keeping at most M on every
    entry.  Rows need their sizes."""
    out = []
    for m in budgets:
        dp = [r for r in rows if r.policy == "dp" and r.budget == m]
        if not dp:
            continue
        dpe = next((r for r in rows if r.policy == "dp/entry" and r.budget == m), None)

        def best(kinds):
            rivals = [r for r in rows if _row_kind(r) in kinds and r.size <= m]
            return min(rivals, key=lambda r: (r.recompute, r.ckpt_per_entry), default=None)
        out.append((m, dp[0], dpe, best(FIXED_POLICIES), best(PER_ENTRY_POLICIES)))
    return out


def placement_equal_r(rows) -> list:
    """For each block:B row: the fewest dp checkpoints (over the budgets run) with R
    no higher than block's."""
    dps = sorted((r for r in rows if r.policy == "dp"), key=lambda r: r.budget)
    return [(r, next((d for d in dps if d.recompute <= r.recompute + 1e-12), None))
            for r in rows if r.policy.startswith("block:")]


def format_placement_frontier(res) -> str:
    """``placement frontier``: every policy at every budget, dp against the best
    heuristic within each budget, and dp at block:B's recompute.  What an older
    suite did not record shows ``?`` (its comparison, which needs sizes, is left out)."""
    md, g = res.first(), res.get
    model = str(md.get("model", "?"))
    positions = model == "positions"

    def val(name):
        r = g(name)
        return r.median if r is not None else None

    def num(name, fmt):
        v = val(name)
        return "?" if v is None else fmt(v)
    bs, sb, nr = val("placement-block-size"), val("placement-state-bytes"), \
        val("placement-no-reuse-blocks")
    dense = val("placement-dense-ckpt")
    by_bytes = (lambda v: f"{v:.2f}") if positions else fmt_bytes
    lines = [f"placement frontier: {res.workload()} ({num('placement-requests', _int)} "
             f"requests, {num('placement-entries', _int)} entries, mean "
             f"{num('placement-entry-blocks-mean', lambda v: f'{v:.1f}')} blocks; block size "
             f"{num('placement-block-size', lambda v: f'{v:.0f}')}), split "
             f"{md.get('split', '?')}: fit on {num('placement-hits-fit', _int)} hits, "
             f"evaluated on {num('placement-hits-eval', _int)}",
             f"model {model}: "
             f"{'1' if positions else num('placement-state-bytes', fmt_bytes)} per "
             f"checkpoint, dense KV {num('placement-kv-bytes-per-token', fmt_bytes)}/token; "
             f"no-reuse bound {'?' if nr is None else f'{nr:.2f}'} blocks "
             f"({'?' if nr is None or bs is None else f'{nr * bs:,.0f}'} tokens), dense bound "
             f"0 (a state at every position: {'?' if dense is None else f'{dense:.1f}'} "
             f"per entry)"]
    rows = placement_rows(res)
    unit = "ckpt units/entry" if positions else "ckpt bytes/entry"
    table = [("no-reuse", "-", "0", "0", "?" if nr is None else f"{nr:.3f}",
              "?" if nr is None or bs is None else f"{nr * bs:,.1f}", "0.0%"),
             ("dense", "-", "?" if dense is None else f"{dense:.2f}",
              "?" if dense is None or sb is None else by_bytes(dense * sb), "0.000", "0.0",
              "100.0%")]
    for r in rows:
        table.append((r.policy, "-" if r.budget is None else r.budget,
                      f"{r.ckpt_per_entry:.2f}", by_bytes(r.ckpt_bytes), f"{r.recompute:.3f}",
                      f"{r.recompute_tokens:,.1f}", f"{100 * r.kept:.1f}%"))
    lines.append(format_table(("policy", "budget", "ckpt/entry", unit, "recompute (blocks)",
                               "recompute (tokens)", "dense hit kept"), table))
    try:
        budgets = json.loads(md.get("config", "{}")).get("budgets")
    except (TypeError, ValueError, AttributeError):
        budgets = None
    if not isinstance(budgets, list):
        budgets = list(dict.fromkeys(r.budget for r in rows if r.policy == "dp"))
    cmp_rows = []
    if all(r.size is not None for r in rows):
        for m, dp, dpe, fx, pe in placement_comparison(rows, budgets):
            verdict = "-" if fx is None else ("dp <= it" if dp.recompute <= fx.recompute + 1e-9
                                             else "dp worse")
            cmp_rows.append((m, f"{dp.recompute:.3f}", f"{dp.ckpt_per_entry:.2f}",
                             f"{fx.policy} [{fx.size}] ({fx.ckpt_per_entry:.2f})" if fx
                             else "-", f"{fx.recompute:.3f}" if fx else "-", verdict,
                             f"{pe.policy} ({pe.ckpt_per_entry:.2f})" if pe else "-",
                             f"{pe.recompute:.3f}" if pe else "-",
                             f"{dpe.recompute:.3f}" if dpe else "-"))
    if cmp_rows:
        lines += ["", "dp against the best heuristic within budget M (fixed positions - block, "
                  "uniform, geometric - with at most M positions up to the deepest hit; per "
                  "entry, as they are - end, boundary - at most M on every entry):",
                  format_table(("M", "dp R", "dp ckpt", "best fixed [positions] (ckpt)",
                                "its R", "", "best per-entry (ckpt)", "its R", "dp/entry R"),
                               cmp_rows)]
    eq = placement_equal_r(rows)
    if eq:
        er = [(b.policy, f"{b.ckpt_per_entry:.2f}", f"{b.recompute:.3f}",
               f"{m.ckpt_per_entry:.2f} (M={m.budget})" if m else "not within the budgets run",
               f"{b.ckpt_per_entry / m.ckpt_per_entry:.1f}x" if m and m.ckpt_per_entry else "-")
              for b, m in eq]
        lines += ["", "at equal R: the fewest dp checkpoints per entry reaching block:B's R:",
                  format_table(("block", "ckpt/entry", "R", "dp ckpt/entry", "block / dp"), er)]
    return "\n".join(lines)


def _json_md(res, key: str, command: str):
    try:
        return json.loads(res.first()[key])
    except (KeyError, TypeError, ValueError):
        raise SchemaError(f"{res.path}: the metadata {key} is missing or not JSON; rerun "
                          f"`prefixbench {command} -o`") from None


def format_placement_solve(res) -> str:
    """``placement solve``: the exact placement and its bounds."""
    pos = _json_md(res, "placement_positions", "placement solve")
    g = res.get

    def v(name, fmt):
        r = g(f"placement-solve-{name}")
        return "?" if r is None else format(r.median, fmt)
    return (f"positions: {' '.join(map(str, pos)) or '(none)'}\n"
            f"expected recompute: {v('expected-recompute', '.6g')} positions (N = "
            f"{v('n', '.0f')}, budget {v('budget', '.0f')}, {v('positions', '.0f')} used)\n"
            f"no-reuse bound: {v('no-reuse', '.6g')}; dense bound: {v('dense', 'g')}")


def format_placement_bench(res) -> str:
    """``placement bench``: solver time per (N, M) and the ratio to the previous N."""
    points = _json_md(res, "placement_points", "placement bench")
    body, prev, last_m = [], None, None
    for n, m in points:
        if m != last_m:
            prev, last_m = None, m
        cpu = res.get(f"placement-bench-n{n}-m{m}-cpu")
        wall = res.get(f"placement-bench-n{n}-m{m}-wall")
        c = cpu.median if cpu is not None else None
        ratio = c / prev if c is not None and prev else None
        body.append((n, m, cell(cpu, fmt_seconds), cell(wall, fmt_seconds),
                     f"{ratio:.2f}" if ratio else "-"))
        prev = c
    return (f"placement solver ({res.first().get('prefixbench_impl', '?')}), seeded random "
            f"weights, best of the rounds (each round times every N once)\n"
            + format_table(("N", "M", "CPU time", "wall time", "ratio to N/2 (CPU)"), body))


def format_arrival(res) -> str:
    """``arrival``, ``sweep arrival`` and ``run --arrival trace``: offered against
    achieved load per speedup, then the saturation point by each row's ``served``
    flag (the rule is the writer's; the module docstring of the harness states it)."""
    md = res.first()
    rows = []
    for s in res.settings():
        m = res.md(s)

        def v(name, key=None):
            r = res.get(name, s)
            if r is not None:
                return r.median
            return float(m[key]) if key and isinstance(m.get(key), (int, float)) else 0.0
        prompt = v("prompt-tokens")
        rows.append({"speedup": float(m.get("speedup", 0.0)), "served": bool(m.get("served")),
                     "offered": v("offered-load", "offered_rps"),
                     "achieved": v("achieved-load", "achieved_rps"),
                     "p50": v("match-latency-queued-p50"), "p99": v("match-latency-queued-p99"),
                     "p999": v("match-latency-queued-p999"),
                     "service": v("match-latency-service-p50"),
                     "late": v("late-starts"), "requests": v("requests"),
                     "woke50": v("issue-lateness-p50"), "woke99": v("issue-lateness-p99"),
                     "hit": v("hit-tokens") / prompt if prompt else 0.0})
    head = (f"{'speedup':>8} {'offered req/s':>14} {'achieved req/s':>15} {'p50':>10} "
            f"{'p99':>10} {'p99.9':>10} {'service p50':>12} {'late starts':>12} "
            f"{'wake-up p50':>12} {'wake-up p99':>12} {'hit rate':>9}")
    lines = [f"open-loop arrival: {md.get('strategy', '?')} on {res.workload()} (match "
             f"latency includes queueing)", head]
    for r in rows:
        lines.append(f"{r['speedup']:>8g} {r['offered']:>14,.1f} {r['achieved']:>15,.1f} "
                     f"{r['p50'] * 1e6:>8.1f}us {r['p99'] * 1e6:>8.1f}us "
                     f"{r['p999'] * 1e6:>8.1f}us {r['service'] * 1e6:>10.1f}us "
                     f"{r['late']:>12,.0f} {r['woke50'] * 1e6:>10.1f}us "
                     f"{r['woke99'] * 1e6:>10.1f}us {r['hit']:>9.2%}")
    ordered = sorted(rows, key=lambda r: r["speedup"])
    knee = next((r for r in ordered if not r["served"]), None)
    if knee is None:
        sat = ordered[-1] if ordered else None
    else:
        i = ordered.index(knee)
        sat = ordered[i - 1] if i else None
    lines.append("saturation: " + (f"served up to {sat['offered']:,.1f} req/s offered (speedup "
                                   f"{sat['speedup']:g})" if sat else "not served even at the "
                                   "first speedup") +
                 (f"; saturation point at speedup {knee['speedup']:g} ({knee['offered']:,.1f} "
                  f"req/s offered, {knee['achieved']:,.1f} achieved, p99 "
                  f"{knee['p99'] * 1e6:,.1f}us)" if knee is not None else
                  " (every speedup served: raise --speedup to find the saturation point)") +
                 " [rule: achieved >= 95% of offered and p99 <= 10x the first speedup's]")
    lines.append("late starts: requests no issuer was free for at their due time (their "
                 "latency includes the wait); wake-up: how late issuers that were early "
                 "started (the harness's timing, left out of their latency)")
    return "\n".join(lines)


def _csv_value(res, column: str):
    from prefixbench import schema
    for f in schema.FIGURES:
        for col, factor in f.csv:
            if col == column:
                r = res.get(f.name)
                if r is None and f.name == "memory-bytes":
                    r = res.get("index-memory-bytes")      # a run's is the strategy's counter
                return None if r is None else r.median / factor
    return None


#: CSV column -> decimals it is rounded to (None: an integer)
CSV_DIGITS = {"ops_per_s": 1, "hit_rate": 6, "oracle_hit_rate": 6, "loss_vs_oracle": 8,
              "store_reads_per_match": 3, "requests": None, "false_hits": None,
              "bytes_on_disk": None, "index_memory_bytes": None}


def csv_row(res, date: str | None = None) -> dict:
    """One ``run --csv`` row (:data:`prefixbench.schema.CSV_COLUMNS`) from a run's
    suites: figures through each one's ``Figure.csv`` column, conditions from the
    metadata; a figure the suite lacks is 0, as a zero the suite lists."""
    from prefixbench import schema
    md = res.first()
    try:
        cfg = json.loads(md.get("config", "{}"))
    except (TypeError, ValueError):
        cfg = {}
    row = {"date": date or md.get("date", ""), "commit": str(md.get("git_commit", ""))[:12],
           "strategy": md.get("strategy", ""), "engine": md.get("engine", "none"),
           "workload": md.get("workload", ""),
           "threads": int(md.get("threads", cfg.get("threads", 1)) or 1)}
    for col in schema.CSV_COLUMNS:
        if col in row:
            continue
        v = _csv_value(res, col) or 0.0
        digits = CSV_DIGITS.get(col, 3)
        row[col] = int(round(v)) if digits is None else round(v, digits)
    return row


#: result kind -> its table
FORMATTERS = {"run": format_run, "scale": format_scale, "recover": format_recover,
              "crashtest": format_crashtest, "describe": format_describe,
              "payload": format_payload, "hash-bench": format_hash_bench,
              "engine-bench": format_engine_bench, "plugins": format_plugins,
              "placement": format_placement_frontier,
              "placement-solve": format_placement_solve,
              "placement-bench": format_placement_bench, "arrival": format_arrival}


def render(res) -> str:
    """The table the command behind ``res`` printed, or one line naming what is missing."""
    f = FORMATTERS.get(res.kind)
    if f is None:
        from prefixbench.reports import sweeps
        f = sweeps.FORMATTERS.get(res.kind)
    if f is None:
        from prefixbench.reports import sweeps
        known = sorted(FORMATTERS) + sorted(sweeps.FORMATTERS)
        raise SchemaError(f"{res.path}: show cannot print a {res.kind} result (it prints "
                          f"{', '.join(known)}); `prefixbench report` draws it")
    return f(res)

