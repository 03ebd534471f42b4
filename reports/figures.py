"""Every report figure: which results it reads, its panels, its table, the paper beside it.

A figure id names the paper figure or table it mirrors (``fig6``, ``table4``,
``range``); :data:`FIGURES` lists them in report order with the command that
produces their input.  Each builder takes the loaded results and returns a
:class:`FigureOut` (or None when no result has what it needs): plot panels,
one table, and the comparisons with the paper, each a :class:`Comparison` of
a paper value with ours in the paper's unit.

Decisions where the paper and this harness differ:
- ratios are taken between medians; each cell's min-max is over repeats;
- a paper range over the four datasets is met when every workload we ran
  lies inside it; a single paper value within 25% (``reports.paper``);
- recovery (Fig. 8, Table 1) and thread scaling (Fig. 11) are compared as
  context only when our entry count or thread count differs from the paper's
  (1e9 entries, 42 threads): the met column then says so instead of judging;
- Range's seconds are GPU TTFT, ours are payload restores: only shapes are
  compared (relative spread across object counts, finest over coarsest).
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field

from prefixbench.reports.plots import Panel, Series, point, scaled
from prefixbench.reports.show import device_line
from prefixbench.reports.tables import fmt_bytes, fmt_seconds

US = 1e6


@dataclass
class Comparison:
    paper: object             # reports.paper.PaperValue
    ours: list                # our values in the paper's unit (one per workload/setting)
    note: str = ""
    #: True/False, or None for context only (conditions differ too much to judge)
    judged: bool = True
    #: a fixed verdict for values this harness cannot measure (GPU TTFT, ...)
    verdict: str = ""

    @property
    def met(self) -> bool | None:
        if not self.ours or not self.judged:
            return None
        return all(self.paper.met(v) for v in self.ours)

    def ours_text(self) -> str:
        if not self.ours:
            return "-"
        lo, hi = min(self.ours), max(self.ours)
        u = self.paper.unit
        suffix = {"ratio": "x", "percent": "%", "seconds": " s"}.get(u, "")
        return (f"{_num(lo)}{suffix}" if lo == hi else f"{_num(lo)}-{_num(hi)}{suffix}")

    def met_text(self) -> str:
        if self.verdict:
            return self.verdict
        if not self.ours:
            return "not run"
        if not self.judged:
            return "context"
        return "met" if self.met else "missed"


def _num(x: float) -> str:
    a = abs(x)
    if a and (a < 1e-3 or a >= 1e6):
        return f"{x:.3g}"
    return f"{x:.4g}"


@dataclass
class FigureOut:
    id: str
    title: str
    paper_ref: str
    panels: list
    header: tuple
    rows: list
    results: list
    comparisons: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def cell(reading_or_point, fmt) -> str:
    """``median [min-max]`` (just the median for one run); ``-`` when absent."""
    p = reading_or_point if isinstance(reading_or_point, tuple) or reading_or_point is None \
        else point(reading_or_point)
    if p is None:
        return "-"
    if p[1] == p[2]:
        return fmt(p[0])
    return f"{fmt(p[0])} [{fmt(p[1])}-{fmt(p[2])}]"


def _pct(x):
    return f"{x:.4g}%"


def _us(x):
    return f"{x:,.1f}"


def _x(x):
    return f"{x:.3g}x"


def _workload_labels(results) -> list:
    """One category label per result: the workload, plus the file where it repeats."""
    names = [r.workload() for r in results]
    return [n if names.count(n) == 1 else f"{n} ({r.label})" for n, r in zip(names, results)]


def _ordered_settings(results, threads=None) -> list:
    out = []
    for r in results:
        for s in r.settings(threads):
            if s not in out and s is not None:
                out.append(s)
    return out


def _ratio(a, b):
    """``a ÷ b`` of two readings: within each repeat when both kept every repeat (median
    with min-max), else of the medians; None when either is missing or zero."""
    if a is None or b is None or not b.median:
        return None
    if len(a.values) == len(b.values) > 1 and all(b.values):
        rs = sorted(x / y for x, y in zip(a.values, b.values))
        return (statistics.median(rs), rs[0], rs[-1])
    return (a.median / b.median,) * 3 if a.median else None


# ---------------------------------------------------------------- Fig. 6 and Table 3
def fig6(results, paper, opts):
    rs = [r for r in results if r.kind == "sweep-strategies"]
    if not rs:
        return None
    cats = _workload_labels(rs)
    settings = _ordered_settings(rs, 1)
    panels = []
    for name, title, unit, f in (("request-throughput", "(a) request throughput", "requests/s", 1),
                                 ("match-latency-mean", "(b) mean match latency", "us", US),
                                 ("insert-latency-mean", "(c) mean insert latency", "us", US)):
        series = [Series(s, [scaled(point(r.get(name, s, 1)), f) for r in rs])
                  for s in settings]
        panels.append(Panel("bars", title, unit, cats, series))
    rows, comps = [], []
    ratios = {}          # (series name, measure) -> [ours]
    for r, cat in zip(rs, cats):
        ref = settings[0]
        t0 = r.get("request-throughput", ref, 1)
        m0 = r.get("match-latency-mean", ref, 1)
        i0 = r.get("insert-latency-mean", ref, 1)
        for s in [x for x in settings if x in r.settings(1)]:
            t, m, i = (r.get(n, s, 1) for n in ("request-throughput", "match-latency-mean",
                                                  "insert-latency-mean"))
            tr, mr, ir = _ratio(t0, t), _ratio(m, m0), _ratio(i, i0)
            rows.append((cat, s, cell(t, lambda v: f"{v:,.0f}"), cell(m, lambda v: _us(v * US)),
                         cell(i, lambda v: _us(v * US)), cell(tr, _x), cell(mr, _x),
                         cell(ir, _x)))
            if s != ref:
                for key, v in (("throughput-ratio", tr), ("match-latency-ratio", mr),
                               ("insert-latency-ratio", ir)):
                    if v:
                        ratios.setdefault((s, key), []).append(v[0])
    for pv in paper.find("fig6a") + paper.find("fig6b") + paper.find("fig6c"):
        names = pv.series.replace("sarp", "").replace("/", "").split()
        other = names[0] if names else ""
        ours = ratios.get((other, pv.measure), []) if pv.dataset == "all" else [
            v for (s, k), vs in ratios.items() if s == other and k == pv.measure
            for v, r in zip(vs, rs) if r.workload() == pv.dataset]
        comps.append(Comparison(pv, ours))
    for pv in paper.find("headline", measure="throughput-ratio"):
        ours = [v for (s, k), vs in ratios.items() if k == "throughput-ratio" for v in vs]
        comps.append(Comparison(pv, ours, "over every on-SSD strategy we ran"))
    return FigureOut("fig6", "Throughput, match and insert latency per workload and strategy",
                     "paper Fig. 6a-c (section 6.2)", panels,
                     ("workload", "strategy", "requests/s", "match us", "insert us",
                      f"{settings[0]} ÷ it (throughput)", "match ÷ ref", "insert ÷ ref"),
                     rows, rs, comps,
                     [f"ratios against the first strategy, {settings[0]}; cells: median "
                      "[min-max] over repeats"])


def table3(results, paper, opts):
    rs = [r for r in results if r.kind in ("sweep-strategies", "run")
          and any(x.name == "hit-rate-loss" for x in r.readings)]
    if not rs:
        return None
    cats = _workload_labels(rs)
    own = [[s for s in r.settings(1) if s is not None] or [None] for r in rs]
    names = []
    for r, ss in zip(rs, own):
        for s in ss:
            if (s or r.strategy(None)) not in names:
                names.append(s or r.strategy(None))

    def find(r, ss, name):
        s = next((x for x in ss if (x or r.strategy(None)) == name), "missing")
        return None if s == "missing" else r.get("hit-rate-loss", s, 1)
    series = [Series(n, [scaled(point(find(r, ss, n)), 100) for r, ss in zip(rs, own)])
              for n in names]
    rows, ours = [], []
    for r, cat, ss in zip(rs, cats, own):
        for s in ss:
            h, o, loss = (r.get(n, s, 1) for n in ("token-hit-rate", "oracle-hit-rate",
                                                     "hit-rate-loss"))
            fh = r.get("false-hits", s, 1)
            rows.append((cat, s or r.strategy(None), cell(h, lambda v: f"{v:.4%}"),
                         cell(o, lambda v: f"{v:.4%}"), cell(loss, lambda v: f"{v:.5%}"),
                         cell(fh, lambda v: f"{v:.0f}")))
            if (s or r.strategy(None)) == "sarp" and loss is not None:
                ours.append(loss.median * 100)
    sarp_i = names.index("sarp") if "sarp" in names else None
    pvs = paper.find("table3")
    marks = [(ci, sarp_i, pv.low, pv.high, "paper") for pv in pvs for ci, (r, ss) in
             enumerate(zip(rs, own)) if sarp_i is not None and find(r, ss, "sarp")]
    comps = [Comparison(pv, ours) for pv in pvs]
    comps += [Comparison(pv, ours) for pv in paper.find("headline", measure="hit-rate-loss")]
    return FigureOut("table3", "Token hit rate and loss against the exact oracle",
                     "paper Table 3 (section 6.4)",
                     [Panel("bars", "hit-rate loss vs oracle", "% of oracle hit tokens", cats,
                            series, paper=marks, log=False)],
                     ("workload", "strategy", "token hit rate", "oracle hit rate",
                      "loss vs oracle", "false hits"), rows, rs, comps,
                     ["loss: share of the oracle's hit tokens the strategy missed in the same "
                      "replay; a 0 is a measured zero"])


# ---------------------------------------------------------------- Table 4, Fig. 9, Fig. 10
_CAND = (("index-candidates-before-filtering", "before filtering", "candidates-before-filtering"),
         ("index-candidates-after-filtering", "after filtering", "candidates-after-filtering"),
         ("index-candidates-retrieved", "actually retrieved", "candidates-retrieved"))


def _sarp_setting(r):
    for s in r.settings(1):
        if s in ("sarp", "ablation-full", "retrieval-3"):
            return s
    return None


def table4(results, paper, opts):
    rs = [r for r in results if r.kind in ("sweep-strategies", "sweep-ablation")
          and _sarp_setting(r) and r.get("index-candidates-before-filtering", _sarp_setting(r), 1)]
    if not rs:
        return None
    cats = _workload_labels(rs)
    series = [Series(label, [point(r.get(n, _sarp_setting(r), 1)) for r in rs])
              for n, label, _ in _CAND]
    marks, comps, rows = [], [], []
    for ci, r in enumerate(rs):
        for si, (n, label, measure) in enumerate(_CAND):
            for pv in paper.find("table4", measure=measure, dataset=r.workload()):
                marks.append((ci, si, pv.low, pv.high, "paper"))
    for r, cat in zip(rs, cats):
        s = _sarp_setting(r)
        vals = [r.get(n, s, 1) for n, _, _ in _CAND]
        pvs = [paper.find("table4", measure=m, dataset=r.workload()) for _, _, m in _CAND]
        rows.append((cat, s, *[cell(v, lambda x: f"{x:.3g}") for v in vals],
                     " / ".join(p[0].text_value() if p else "-" for p in pvs)))
    for pv in paper.find("table4"):
        n = next(n for n, _, m in _CAND if m == pv.measure)
        ours = [r.get(n, _sarp_setting(r), 1).median for r in rs if r.workload() == pv.dataset
                and r.get(n, _sarp_setting(r), 1)]
        comps.append(Comparison(pv, ours))
    return FigureOut("table4", "SARP candidates per routing entry", "paper Table 4 (section 6.5)",
                     [Panel("bars", "candidates per routing entry", "candidates", cats, series,
                            paper=marks)],
                     ("workload", "setting", "before filtering", "after filtering",
                      "actually retrieved", "paper (before / after / retrieved)"),
                     rows, rs, comps)


def _budget(setting: str) -> str:
    return setting.split("-", 1)[1] if setting and "-" in setting else str(setting)


def fig9(results, paper, opts):
    rs = [r for r in results if r.kind == "sweep-retrieval"]
    if not rs:
        return None
    budgets = []
    for r in rs:
        for s in r.settings(1):
            if _budget(s) not in budgets:
                budgets.append(_budget(s))
    budgets.sort(key=lambda b: (b == "unlimited", int(b) if b.isdigit() else 0))
    labels = _workload_labels(rs)
    loss = [Series(lab, [scaled(point(r.get("hit-rate-loss", f"retrieval-{b}", 1)), 100)
                         for b in budgets]) for r, lab in zip(rs, labels)]
    retr = [Series(lab, [point(r.get("index-retrievals-per-query", f"retrieval-{b}", 1))
                         for b in budgets]) for r, lab in zip(rs, labels)]
    marks_loss, marks_retr, comps = [], [], []
    workloads = {r.workload() for r in rs}
    for pv in paper.find("fig9"):
        b = pv.series.replace("max_retrieval ", "")
        if b not in budgets or pv.measure not in ("hit-rate-loss", "retrievals-per-query"):
            comps.append(Comparison(pv, []))
            continue
        if pv.dataset != "all" and pv.dataset not in workloads:
            comps.append(Comparison(pv, []))
            continue
        name = "hit-rate-loss" if pv.measure == "hit-rate-loss" else "index-retrievals-per-query"
        f = 100 if pv.measure == "hit-rate-loss" else 1
        ours = [r.get(name, f"retrieval-{b}", 1).median * f for r in rs
                if (pv.dataset == "all" or r.workload() == pv.dataset)
                and r.get(name, f"retrieval-{b}", 1)]
        (marks_loss if f == 100 else marks_retr).append(
            (budgets.index(b), None, pv.low, pv.high, "paper"))
        comps.append(Comparison(pv, ours))
    rows = []
    for r, lab in zip(rs, labels):
        for b in budgets:
            s = f"retrieval-{b}"
            rows.append((lab, b, cell(r.get("hit-rate-loss", s, 1), lambda v: f"{v:.5%}"),
                         cell(r.get("lost-tokens", s, 1), lambda v: f"{v:,.0f}"),
                         cell(r.get("index-retrievals-per-query", s, 1), lambda v: f"{v:.3f}"),
                         cell(r.get("match-latency-mean", s, 1), lambda v: _us(v * US))))
    return FigureOut("fig9", "Retrieval budget: loss and segment retrievals per query",
                     "paper Fig. 9 (section 6.4)",
                     [Panel("lines", "loss vs the oracle", "% of oracle hit tokens", budgets,
                            loss, xlabel="MaxRetrieval", paper=marks_loss),
                      Panel("lines", "segment retrievals per query", "retrievals", budgets, retr,
                            xlabel="MaxRetrieval", paper=marks_retr)],
                     ("workload", "budget", "loss", "lost tokens", "retrievals/query",
                      "match us"), rows, rs, comps)


_ABL = (("fig10a", "refinement: candidates", "ablation-no-refinement",
         "index-candidates-before-filtering", "candidates-change"),
        ("fig10b", "refinement: routing state", "ablation-no-refinement", "index-routing-bytes",
         "routing-state-change"),
        ("fig10c", "pruning: routing state", "ablation-no-pruning", "index-routing-bytes",
         "routing-state-change"),
        ("fig10d", "pruning: retrievals", "ablation-no-pruning", "index-retrievals-per-query",
         "retrievals-change"))


def fig10(results, paper, opts):
    rs = [r for r in results if r.kind == "sweep-ablation"]
    if not rs:
        return None
    labels = _workload_labels(rs)
    cats = [a[1] for a in _ABL]
    series, rows, comps, marks = [], [], [], []
    for si, (r, lab) in enumerate(zip(rs, labels)):
        pts = []
        for fid, title, off, name, measure in _ABL:
            full, other = r.get(name, "ablation-full", 1), r.get(name, off, 1)
            ch = (full.median / other.median - 1) * 100 if full and other and other.median \
                else None
            pts.append((ch, ch, ch) if ch is not None else None)
            pvs = paper.find(fid, dataset=r.workload())
            rows.append((lab, title, cell(full, lambda v: f"{v:,.4g}"),
                         cell(other, lambda v: f"{v:,.4g}"),
                         f"{ch:+.1f}%" if ch is not None else "-",
                         pvs[0].text_value() if pvs else "-"))
            for pv in pvs:
                marks.append((cats.index(title), si, pv.low, pv.high, "paper"))
        series.append(Series(lab, pts))
    for fid, title, off, name, measure in _ABL:
        for pv in paper.find(fid):
            ours = [p.points[cats.index(title)][0] for p, r in zip(series, rs)
                    if r.workload() == pv.dataset and p.points[cats.index(title)]]
            comps.append(Comparison(pv, ours))
    return FigureOut("fig10", "Design breakdown: each mechanism on vs off",
                     "paper Fig. 10a-d (section 6.5)",
                     [Panel("bars", "full sarp vs mechanism off", "change (%)", cats, series,
                            paper=marks, log=False)],
                     ("workload", "effect", "full", "mechanism off", "change", "paper"),
                     rows, rs, comps, ["change = full ÷ off - 1 of the figure named"])


# ---------------------------------------------------------------- Table 5, Fig. 11
def table5(results, paper, opts):
    rs = [r for r in results if r.kind == "sweep-space"]
    if not rs:
        return None
    cats = _workload_labels(rs)
    others = [s for s in _ordered_settings(rs, 1) if s != "ssd-blockhash"]
    panels, comps, rows = [], [], []
    for name, title, measure in (("disk-ratio-to-reference-ppm", "disk ÷ ssd-blockhash",
                                  "disk-ratio"),
                                 ("entries-ratio-to-reference-ppm",
                                  "block-metadata entries ÷ ssd-blockhash", "entries-ratio")):
        series = [Series(s, [scaled(point(r.get(name, s, 1)), 1e-6) for r in rs]) for s in others]
        marks = [(ci, si, pv.low, pv.high, "paper") for pv in paper.find("table5", measure=measure)
                 for ci in range(len(cats)) for si, s in enumerate(others) if s == "sarp"]
        panels.append(Panel("bars", title, "ratio", cats, series, paper=marks, log=False))
        for pv in paper.find("table5", measure=measure):
            comps.append(Comparison(pv, [r.get(name, "sarp", 1).median * 1e-6 for r in rs
                                         if r.get(name, "sarp", 1)]))
    for r, cat in zip(rs, cats):
        for s in _ordered_settings([r], 1):
            rows.append((cat, s, cell(r.get("store-bytes", s, 1), fmt_bytes),
                         cell(r.get("store-logical-bytes", s, 1), fmt_bytes),
                         cell(r.get("space-amplification", s, 1), lambda v: f"{v:.2f}x"),
                         cell(scaled(point(r.get("disk-ratio-to-reference-ppm", s, 1)), 1e-6),
                              lambda v: f"{v:.3f}x"),
                         cell(scaled(point(r.get("entries-ratio-to-reference-ppm", s, 1)), 1e-6),
                              lambda v: f"{v:.3f}x")))
    return FigureOut("table5", "Space: bytes on disk and block-metadata entries vs ssd-blockhash",
                     "paper Table 5 (section 6.6)", panels,
                     ("workload", "strategy", "disk", "logical", "space amp", "disk ÷ ref",
                      "entries ÷ ref"), rows, rs, comps)


def fig11(results, paper, opts):
    lines, cats = [], set()
    rs = [r for r in results if r.kind == "scale" or len(r.threads()) > 1]
    for r in rs:
        for s in (r.settings() or [None]):
            base = r.get("request-throughput", s, r.threads()[0])
            if base is None:
                continue
            pts = {}
            for t in r.threads():
                x = r.get("request-throughput", s, t)
                if x is not None:
                    # a ratio within each repeat when both counts ran every repeat
                    if len(x.values) == len(base.values) > 1:
                        ratios = sorted(a / b for a, b in zip(x.values, base.values) if b)
                        pts[t] = (statistics.median(ratios), ratios[0], ratios[-1])
                    else:
                        pts[t] = (x.median / base.median,) * 3
                    cats.add(t)
            lines.append((f"{r.workload()} {s or r.strategy(None)}", r, pts, s))
    if not lines:
        return None
    cats = sorted(cats)
    series = [Series(lab, [pts.get(t) for t in cats]) for lab, _, pts, _ in lines]
    rows = [(lab, t, cell(r.get("request-throughput", s, t), lambda v: f"{v:,.0f}"),
             cell(pts[t], _x)) for lab, r, pts, s in lines for t in cats if t in pts]
    comps = []
    for pv in paper.find("fig11"):
        ours = [pts[max(pts)][0] for lab, r, pts, s in lines if r.workload() == pv.dataset
                and pv.measure == "speedup" and (s or r.strategy(None)) == "sarp"]
        comps.append(Comparison(pv, ours, f"ours at {max(cats)} threads, the paper's at "
                                          f"{pv.threads or '?'}", judged=False))
    return FigureOut("fig11", "Thread scaling: throughput relative to one thread",
                     "paper Fig. 11 (section 6.7)",
                     [Panel("lines", "throughput vs 1 thread", "speedup", cats, series,
                            xlabel="request threads", log=False)],
                     ("run", "threads", "requests/s", "speedup"), rows, rs, comps,
                     [f"this machine ran {', '.join(map(str, cats))} threads; the paper's 42-"
                      "thread speedups stand beside them as context"]
                     + [f"{r.workload()}: {d}" for r in rs
                        if (d := device_line(r.first().get("device_probe")))])


# ---------------------------------------------------------------- Fig. 8, Table 1 (recovery)
_PHASES = (("recovery-load", "load"), ("recovery-init", "init"),
           ("recovery-deserialize", "deserialize"), ("recovery-rebuild", "rebuild"))


def fig8(results, paper, opts):
    rs = [r for r in results if r.kind == "recover"]
    if not rs:
        return None
    cats = [f"{r.strategy(None)}\n{_entries(r)}" for r in rs]
    series = [Series(label, [point(r.get(n)) for r in rs]) for n, label in _PHASES]
    snap = [Series("snapshot bytes", [point(r.get("snapshot-bytes")) for r in rs])]
    rows = [(r.strategy(None), _entries(r), cell(r.get("recovery-index"), fmt_seconds),
             *[cell(r.get(n), fmt_seconds) for n, _ in _PHASES],
             cell(r.get("recovery-total"), fmt_seconds),
             cell(r.get("snapshot-bytes"), fmt_bytes), cell(r.get("peak-rss"), fmt_bytes),
             str(len(r.get("recovery-index").values)) if r.get("recovery-index") else "-")
            for r in rs]
    by = {r.strategy(None): r for r in rs}
    comps = []
    entries = {int(r.md().get("unique_block_entries", 0) or 0) for r in rs}
    judged = entries == {10 ** 9}
    note = f"ours at {', '.join(f'{e:.3g}' for e in sorted(entries))} entries, the paper's at 1e9"
    for pv in paper.find("fig8a") + paper.find("fig8b"):
        ours = []
        if pv.measure == "recovery-index" and pv.series in by:
            ours = [by[pv.series].get("recovery-index").median]
        elif pv.measure == "recovery-speedup" and "/" in pv.series:
            a, b = (x.strip() for x in pv.series.split("/"))
            if a in by and b in by:
                ours = [by[a].get("recovery-index").median / by[b].get("recovery-index").median]
        elif pv.measure == "recovery-rebuild" and pv.series in by:
            ours = [by[pv.series].get("recovery-rebuild").median]
        elif pv.measure == "snapshot-bytes" and pv.series in by:
            ours = [by[pv.series].get("snapshot-bytes").median]
        elif pv.measure == "snapshot-share" and "/" in pv.series:
            a, b = (x.strip() for x in pv.series.split("/"))
            sa, sb = (by[x].get("snapshot-bytes") if x in by else None for x in (a, b))
            if sa is not None and sb is not None and sb.median:
                ours = [100 * sa.median / sb.median]
        comps.append(Comparison(pv, ours, note, judged=judged))
    for pv in paper.find("headline", measure="recovery-speedup"):
        ours = [by[b].get("recovery-index").median / by["sarp"].get("recovery-index").median
                for b in ("dram-blockhash", "segment-radix") if b in by and "sarp" in by]
        comps.append(Comparison(pv, ours, note + "; in-memory baselines we ran", judged=judged))
    return FigureOut("fig8", "Recovery: time by phase and snapshot bytes",
                     "paper Fig. 8a-b (section 6.3)",
                     [Panel("stacked", "(a) index recovery by phase", "seconds", cats, series,
                            log=False),
                      Panel("bars", "(b) snapshot", "bytes", cats, snap)],
                     ("strategy", "entries", "index recovery", "load", "init", "deserialize",
                      "rebuild", "first served match", "snapshot", "peak RSS", "recoveries"),
                     rows, rs, comps, [note + "; cells: median [min-max] over the recoveries"])


def _entries(r) -> str:
    n = r.md().get("unique_block_entries")
    return f"{float(n):.3g} entries" if n else "?"


def table1(results, paper, opts):
    rs = [r for r in results if r.kind == "recover"]
    if not rs:
        return None
    def label(r):
        eng = r.md().get("engine")
        return f"{r.strategy(None)} on {eng}" if eng in ("redis", "redis-cluster") else \
            r.strategy(None)
    cats = [label(r) for r in rs]
    series = [Series("first served match", [point(r.get("recovery-total")) for r in rs])]
    rows = [(r.strategy(None), r.md().get("engine", "-"), _entries(r),
             cell(r.get("recovery-total"), fmt_seconds), cell(r.get("recovery-index"), fmt_seconds))
            for r in rs]
    entries = {int(float(r.md().get("unique_block_entries", 0) or 0)) for r in rs}
    note = f"ours at {', '.join(f'{e:.3g}' for e in sorted(entries))} entries, the paper's at 1e9"
    comps = []
    for pv in paper.find("table1"):
        # the paper's Redis row: Redis as the index is ssd-blockhash on redis (its
        # recovery is the server's reload); redis-blockhash (reload, then a DRAM rebuild)
        # stands in where that was not run
        mine = ([r for r in rs if pv.series == "redis" and r.get("recovery-total")
                 and r.strategy(None) == "ssd-blockhash" and r.md().get("engine") == "redis"]
                or [r for r in rs if pv.series == "redis" and r.get("recovery-total")
                    and r.strategy(None) == "redis-blockhash"])
        if mine:
            comps.append(Comparison(pv, [mine[0].get("recovery-total").median], note,
                                    judged=entries == {10 ** 9}))
        else:
            comps.append(Comparison(pv, [], "not run here (no recover of ssd-blockhash on "
                                            "redis or of redis-blockhash among the results)"
                                    if pv.series == "redis" else "not run here"))
    return FigureOut("table1", "Index recovery: start to the first served match",
                     "paper Table 1 (sections 1, 3.1)",
                     [Panel("bars", "recovery until the first served match", "seconds", cats,
                            series)],
                     ("strategy", "engine", "entries", "first served match", "index recovery"),
                     rows, rs, comps)


# ---------------------------------------------------------------- Fig. 1, Fig. 7
def fig1(results, paper, opts):
    rs = [r for r in results if r.kind == "run"]
    if not rs:
        return None
    workloads = []
    for r in rs:
        if r.workload() not in workloads:
            workloads.append(r.workload())
    designs = []
    for r in rs:
        d = f"{r.strategy(None)} on {r.md().get('engine', 'none')}"
        if d not in designs:
            designs.append(d)
    cell_of = {(r.workload(), f"{r.strategy(None)} on {r.md().get('engine', 'none')}"): r
               for r in rs}
    series = [Series(d, [scaled(point(cell_of[(w, d)].get("match-latency-mean")), US)
                         if (w, d) in cell_of else None for w in workloads]) for d in designs]
    rows = [(r.workload(), r.strategy(None), r.md().get("engine", "none"),
             cell(r.get("match-latency-mean"), lambda v: _us(v * US)),
             cell(r.get("match-latency-p99"), lambda v: _us(v * US)),
             cell(r.get("request-throughput"), lambda v: f"{v:,.0f}")) for r in rs]
    ratios = []
    for w in workloads:
        dram = [r for (ww, _), r in cell_of.items() if ww == w and r.strategy(None) ==
                "dram-blockhash"]
        ssd = [r for (ww, _), r in cell_of.items() if ww == w and r.strategy(None) ==
               "ssd-blockhash" and r.md().get("engine") not in ("memory", "none")]
        if dram and ssd and dram[0].get("match-latency-mean") and ssd[0].get("match-latency-mean"):
            ratios.append(ssd[0].get("match-latency-mean").median
                          / dram[0].get("match-latency-mean").median)
    comps = [Comparison(pv, ratios if "blockhash" in pv.series or pv.series == "rocksdb / dram"
                        else []) for pv in paper.find("fig1")]
    return FigureOut("fig1", "Mean prefix-match latency per design and engine",
                     "paper Fig. 1 (sections 1, 3.1)",
                     [Panel("bars", "mean match latency", "us", workloads, series)],
                     ("workload", "strategy", "engine", "match mean us", "match p99 us",
                      "requests/s"), rows, rs, comps,
                     ["ratio: ssd-blockhash on an on-disk engine over dram-blockhash, same "
                      "workload"])


def fig7(results, paper, opts):
    rs = [r for r in results if any(x.name.startswith("match-time-") for x in r.readings)]
    if not rs:
        return None
    panels, rows = [], []
    # one phase order and colour for both panels: the store first, what no phase claimed last
    every = []
    for r in rs:
        for x in r.readings:
            ph = x.params.get("phase")
            if x.name.split("-time-")[0] in ("match", "insert") and ph and ph not in every:
                every.append(ph)
    every.sort(key=lambda p: (p != "storage", p == "rest"))
    for side in ("match", "insert"):
        cats, phases, cols = [], list(every), []
        for r in rs:
            for s in _ordered_settings([r], 1) or [None]:
                ph = {x.params.get("phase"): x for x in r.readings if x.setting == s
                      and x.threads == 1 and x.name.startswith(f"{side}-time-")}
                if not ph:
                    continue
                cats.append(f"{r.workload()}\n{s or r.strategy(None)}")
                cols.append(ph)
                total = r.get(f"{side}-latency-mean", s, 1)
                rows.append((r.workload(), s or r.strategy(None), side,
                             cell(total, lambda v: _us(v * US)),
                             ", ".join(f"{p} {_us(x.median * US)}"
                                       + (f" ({x.median / total.median:.0%})" if total else "")
                                       for p, x in ph.items())))
        series = [Series(p, [scaled(point(c.get(p)), US) if c.get(p) else None for c in cols])
                  for p in phases]
        panels.append(Panel("stacked", f"({'a' if side == 'match' else 'b'}) {side} breakdown",
                            "us per request", cats, series, log=False))
    comps = []
    for pv in paper.find("fig7a") + paper.find("fig7b"):
        ours = []
        for r in rs:
            if r.workload() != pv.dataset:
                continue
            if pv.measure == "store-reads-per-match":
                x = r.get("store-reads-per-match", pv.series, 1)
                ours += [x.median] if x else []
            elif pv.measure == "insert-latency-mean":
                x = r.get("insert-latency-mean", pv.series, 1)
                ours += [x.median] if x else []
        comps.append(Comparison(pv, ours))
    return FigureOut("fig7", "Where the time goes: latency breakdown by phase",
                     "paper Fig. 7 (section 6.2)", panels,
                     ("workload", "strategy", "side", "mean us", "phases: us (share)"),
                     rows, rs, comps)


# ---------------------------------------------------------------- Range
def _point_key(p: str):
    return (p == "layerwise", int(p[1:]) if p.startswith("n") and p[1:].isdigit() else 0)


def range_restore(results, paper, opts):
    rs = [r for r in results if r.kind == "payload"]
    if not rs:
        return None
    r = rs[0]
    rest = [x for x in r.readings if x.name.startswith("restore-")]
    points = sorted({x.params.get("point") for x in rest}, key=_point_key)
    paths = []
    for x in rest:
        if x.params.get("path") not in paths:
            paths.append(x.params.get("path"))
    get = {(x.params.get("path"), x.params.get("point")): x for x in rest}
    series = [Series(p, [point(get.get((p, q))) for q in points]) for p in paths]
    rel = []
    for p in paths:
        base = get.get((p, points[0]))
        rel.append(Series(p, [tuple(v / base.median for v in point(get[(p, q)]))
                              if base and (p, q) in get else None for q in points]))
    ttft = {(v.series, v.dataset): v.low for v in paper.find("table3", measure="ttft")}
    rel_marks = []
    if points and ("range", points[0]) in ttft:          # our points are the paper's
        for series_name in ("range", "stock cufile"):
            b = ttft.get((series_name, points[0]))
            for ci, q in enumerate(points):
                if b and (series_name, q) in ttft:
                    v = ttft[(series_name, q)] / b
                    rel_marks.append((ci, None, v, v, f"paper {series_name}"))
    rows = []
    for p in paths:
        for q in points:
            x = get.get((p, q))
            seq = get.get(("seq", q))
            calls = r.get(f"read-calls-{p}-{q}")
            rows.append((p, q, _object_size(r, p, q), cell(x, fmt_seconds),
                         cell(calls, lambda v: f"{v:,.0f}"),
                         f"{x.median / seq.median:.2f}x" if x and seq and p != "seq" else "-"))
    plain = [q for q in points if q != "layerwise"]
    comps = []

    def shape(path):
        meds = [get[(path, q)].median for q in plain if (path, q) in get]
        if len(meds) < 2:
            return None, None
        return ((max(meds) - min(meds)) / min(meds) * 100,
                (get[(path, plain[-1])].median / get[(path, plain[0])].median - 1) * 100)
    spread, finest = shape("stripes")
    for pv in paper.find("fig1"):
        if pv.measure == "finest-over-coarse" and finest is not None:
            comps.append(Comparison(pv, [finest], "ours: stripes path, finest over coarsest "
                                                  "plain point", judged=True))
        else:
            comps.append(Comparison(pv, [], "GPU TTFT: compare the shapes in the notes",
                                    verdict="shape only"))
    for pv in paper.find("table3", measure="ttft"):
        if pv.series in ("range", "stock cufile"):
            comps.append(Comparison(pv, [], "GPU TTFT through cuFile and vLLM, not measured "
                                            "here", verdict="shape only"))
    notes = []
    table3 = {(v.series, v.dataset): v.low for v in paper.find("table3", measure="ttft")}
    rng = [table3[("range", d)] for d in ("n192", "n768", "n3072", "n6144") if ("range", d) in table3]
    cuf = [table3[("stock cufile", d)] for d in ("n192", "n768", "n3072", "n6144")
           if ("stock cufile", d) in table3]
    if rng and cuf:
        notes.append(f"shape, paper Table 3: Range's TTFT spread across 192-6,144 objects is "
                     f"{(max(rng) - min(rng)) / min(rng):.2%} of its fastest point, stock "
                     f"cuFile's {(max(cuf) - min(cuf)) / min(cuf):.1%} (derived from the "
                     f"table's medians)")
    for p in paths:
        s, f = shape(p)
        if s is not None:
            notes.append(f"shape, ours: {p} spread across {plain[0]}-{plain[-1]} is {s:.1f}% of "
                         f"its fastest point; finest over coarsest {f:+.1f}%")
    sizes = r.common().get("config")
    if sizes:
        try:
            cfg = json.loads(sizes)
            notes.append("payload " + ", ".join(f"{k}={v}" for k, v in sorted(cfg.items())
                                                if not isinstance(v, (dict, list))))
        except ValueError:
            pass
    return FigureOut("range", "Payload restore time against object count, per path",
                     "Range Fig. 1 / Table 3 (section 5.1)",
                     [Panel("lines", "(a) restore time", "seconds", points, series,
                            xlabel="objects (n<N>) or layerwise", log=False),
                      Panel("lines", f"(b) relative to {points[0]} (shape)", "ratio", points,
                            rel, xlabel="objects (n<N>) or layerwise", paper=rel_marks,
                            log=False)],
                     ("path", "point", "object size", "restore", "read calls", "÷ seq"), rows,
                     rs, comps,
                     notes)


def _object_size(r, path, q) -> str:
    """Bytes per logical object: bytes read per restore over the object count."""
    if q == "layerwise":
        try:
            return str(json.loads(r.common().get("config", "{}")).get("layer_object", "-"))
        except ValueError:
            return "-"
    b = r.get(f"bytes-read-{path}-{q}")
    n = int(q[1:]) if q.startswith("n") and q[1:].isdigit() else 0
    return fmt_bytes(b.median / n) if b and n else "-"


# ---------------------------------------------------------------- serving view
def serving(results, paper, opts):
    """Prefill tokens saved per request and, with a prefill rate, a simple TTFT model."""
    rate = opts.get("prefill_tokens_per_s")
    cats, saved, oracle, ttft, rows = [], [], [], [], []
    for r in results:
        for s in (_ordered_settings([r], 1) or [None]):
            hit, req = r.get("hit-tokens", s, 1), r.get("requests", s, 1)
            if hit is None or req is None or not req.median:
                continue
            o = r.get("oracle-hit-tokens", s, 1)
            prompt = r.get("prompt-tokens", s, 1)
            match = r.get("match-latency-mean", s, 1)
            label = f"{r.workload()}\n{s or r.strategy(None)}"
            cats.append(label)
            per = hit.median / req.median
            saved.append((per, per, per))
            oracle.append((o.median / req.median,) * 3 if o else None)
            row = [r.workload(), s or r.strategy(None), f"{per:,.1f}",
                   f"{o.median / req.median:,.1f}" if o else "-"]
            if rate and prompt:
                missed = (prompt.median - hit.median) / req.median
                t = missed / rate + (match.median if match else 0.0)
                ttft.append((t, t, t))
                row += [f"{missed:,.1f}", fmt_seconds(t)]
            rows.append(tuple(row))
    if not cats:
        return None
    panels = [Panel("bars", "prefill tokens saved per request", "tokens", cats,
                    [Series("ours", saved), Series("oracle", oracle)])]
    header = ["workload", "strategy", "saved tokens/request", "oracle tokens/request"]
    notes = ["saved: hit tokens per request, the prefill a serving engine skips"]
    if rate:
        panels.append(Panel("bars", f"TTFT model at {rate:,.0f} prefill tokens/s", "seconds",
                            cats, [Series("ttft", ttft)]))
        header += ["missed tokens/request", "modelled TTFT"]
        notes.append(f"TTFT model: missed prompt tokens per request ÷ {rate:,.0f} tokens/s + "
                     "mean match latency (no queueing, no decode)")
    return FigureOut("serving", "Serving view: prefill saved per request", "(not in the paper)",
                     panels, tuple(header), rows, list(results), [], notes)


# ---------------------------------------------------------------- capacity (eviction)
def _pool_capacity(r, setting):
    """A capacity setting's pool size in blocks; None for the unbounded baseline."""
    v = r.md(setting).get("pool_blocks")
    if v is None:
        v = str(setting).rsplit("-pool-", 1)[-1]
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if n < 2 ** 62 else None


def capacity_cliff(curve):
    """The capacity cliff of a hit-rate curve ``[(capacity, hit rate), ...]`` (bounded
    capacities, ascending): ``(c0, h0, c1, h1, x)`` for the adjacent pair over which
    the hit rate rises most per decade of capacity, ``(h1 - h0) / log10(c1 / c0)``,
    with ``x = sqrt(c0 * c1)``, the middle of that step on the log axis; None when
    the curve never rises.

    Per decade rather than per step, so unevenly spaced capacities compare fairly:
    the cliff is where each factor of capacity given up costs the most hit rate,
    the size a serving team should stay above.  (``sweep capacity`` prints the
    largest absolute drop between adjacent capacities; with capacities evenly
    spaced on a log scale the two name the same pair.)"""
    best = None
    for (c0, h0), (c1, h1) in zip(curve, curve[1:]):
        if c1 <= c0 or c0 <= 0:
            continue
        slope = (h1 - h0) / math.log10(c1 / c0)
        if slope > 0 and (best is None or slope > best[0]):
            best = (slope, c0, h0, c1, h1)
    if best is None:
        return None
    _, c0, h0, c1, h1 = best
    return c0, h0, c1, h1, math.sqrt(c0 * c1)


def _capacity_conditions(r) -> str:
    """workload (and its options), evict policy, workers, route, engine of one sweep."""
    md = r.first()
    try:
        cfg = json.loads(md.get("config", "{}")) or {}
    except (TypeError, ValueError):
        cfg = {}
    wopts = cfg.get("workload_options") or {}
    wl = r.workload() + (f" ({', '.join(f'{k}={v}' for k, v in sorted(wopts.items()))})"
                         if wopts else "")
    parts = [f"workload {wl}", f"evict {md.get('pool_evict', cfg.get('evict', '?'))}",
             f"{md.get('pool_workers', cfg.get('workers', '?'))} worker(s)",
             f"route {md.get('pool_route', cfg.get('route', '?'))}",
             f"engine {cfg.get('engine', md.get('engine', '?'))} (for the strategies that "
             f"store their index)"]
    if cfg.get("limit"):
        parts.append(f"first {cfg['limit']} requests")
    if md.get("stack_inclusion_checked") in (1, "1", True):
        bad = int(md.get("stack_inclusion_violations", 0) or 0)
        parts.append("stack inclusion (LRU, one worker): " + (
            "holds" if not bad else f"{bad} violation(s)"))
    else:
        parts.append("stack inclusion not checked (it holds for LRU with one worker)")
    return "; ".join(parts)


def capacity(results, paper, opts):
    """Hit rate against pool capacity per strategy, beside the oracle under the same pools."""
    rs = [r for r in results if r.kind == "sweep-capacity"]
    if not rs:
        return None
    labels = _workload_labels(rs)
    panels, rows, notes = [], [], []
    for r, lab in zip(rs, labels):
        by = {}                        # strategy -> [(capacity or None, setting)]
        for s in r.settings(1):
            by.setdefault(r.strategy(s), []).append((_pool_capacity(r, s), s))
        caps = sorted({c for pts in by.values() for c, _ in pts if c is not None})
        series, oracles = [], []
        unbounded = None
        for name, pts in by.items():
            at = {c: s for c, s in pts}
            series.append(Series(name, [scaled(point(r.get("token-hit-rate", at.get(c), 1)),
                                                100) if c in at else None for c in caps]))
            oc = [(c, r.get("oracle-hit-rate", at[c], 1)) for c in caps if c in at]
            oracles.append((name, [(c, x.median * 100) for c, x in oc if x is not None]))
            if None in at and unbounded is None:
                u = r.get("oracle-hit-rate", at[None], 1)
                unbounded = u.median * 100 if u is not None else None
            for c, s in sorted(pts, key=lambda p: (p[0] is None, p[0] or 0)):
                g = lambda n: r.get(n, s, 1)          # noqa: E731 - one setting's readings
                rows.append((lab, name, f"{c:,}" if c is not None else "unbounded",
                             cell(g("token-hit-rate"), lambda v: f"{v:.2%}"),
                             cell(g("oracle-hit-rate"), lambda v: f"{v:.2%}"),
                             cell(g("hit-rate-loss"), lambda v: f"{v:.3%}"),
                             cell(g("evictions-per-request"), lambda v: f"{v:,.1f}"),
                             cell(g("match-latency-mean"), lambda v: _us(v * US)),
                             cell(g("match-latency-p99"), lambda v: _us(v * US)),
                             cell(g("remove-latency-mean"), lambda v: _us(v * US)),
                             cell(g("index-entries"), lambda v: f"{v:,.0f}")))
        # the oracle is exact under the same pools: one curve unless the strategies' differ
        distinct = []
        for name, curve in oracles:
            if curve and all(curve != d for _, d in distinct):
                distinct.append((name, curve))
        for name, curve in distinct:
            at = dict(curve)
            series.append(Series("oracle" if len(distinct) == 1 else f"oracle ({name})",
                                 [(at[c],) * 3 if c in at else None for c in caps],
                                 reference=True))
        vlines, hlines = [], []
        cl = capacity_cliff(distinct[0][1]) if distinct else None
        if cl is not None:
            c0, h0, c1, h1, x = cl
            vlines.append((x, f"cliff {c0:,}-{c1:,}"))
            notes.append(f"{lab}: capacity cliff between {c0:,} and {c1:,} pool blocks: the "
                         f"oracle's hit rate {h0:.2f}% -> {h1:.2f}%, "
                         f"{(h1 - h0) / math.log10(c1 / c0):.1f} points per decade of "
                         f"capacity, the steepest step of its curve")
        else:
            notes.append(f"{lab}: no capacity cliff: the oracle's hit rate does not rise over "
                         f"the capacities measured")
        if unbounded is not None:
            hlines.append((unbounded, "oracle, unbounded pool"))
        panels.append(Panel("lines", f"hit rate vs capacity: {lab}", "token hit rate (%)",
                            caps, series, xlabel="pool blocks per worker (log)", log=False,
                            xlog=True, vlines=vlines, hlines=hlines))
        notes.append(f"{lab}: {_capacity_conditions(r)}")
    notes.append("capacity cliff: the adjacent pair of capacities over which the oracle's hit "
                 "rate rises most per decade of capacity (the vertical line, at their geometric "
                 "mean, dash-dotted); cells: median [min-max] over repeats")
    return FigureOut("capacity", "Hit rate against KVCache pool capacity, beside the oracle",
                     "(not in the paper: bounded pools with eviction)", panels,
                     ("workload", "strategy", "pool blocks", "hit rate", "oracle hit rate",
                      "loss vs oracle", "evictions/request", "match mean us", "match p99 us",
                      "remove mean us", "index entries"), rows, rs, [], notes)


# ---------------------------------------------------------------- open-loop arrival
_QUEUED = (("match-latency-queued-p50", "p50"), ("match-latency-queued-p99", "p99"),
           ("match-latency-queued-p999", "p99.9"))


def _arrival_rows(r) -> list:
    """``(speedup, setting)`` of one arrival result, ascending speedup."""
    out = []
    for s in r.settings(1):
        try:
            x = float(r.md(s).get("speedup"))
        except (TypeError, ValueError):
            continue
        if r.get("offered-load", s, 1) is not None:
            out.append((x, s))
    return sorted(out, key=lambda p: p[0])


def arrival(results, paper, opts):
    """Match latency including queueing against offered load, the saturation point marked.

    The saturation point is the one ``arrival`` recorded (metadata
    ``saturation_speedup``): the first speedup, ascending, whose achieved load
    fell below 95% of the offered load or whose p99 rose past 10x the first
    speedup's; 0 there means every speedup was served."""
    rs = [r for r in results if r.first().get("command") == "arrival" and _arrival_rows(r)]
    if not rs:
        return None
    labels = [f"{r.strategy(_arrival_rows(r)[0][1])} on {w}"
              for r, w in zip(rs, _workload_labels(rs))]
    panels, rows, notes = [], [], []
    loads, achieved = [], []
    for r, lab in zip(rs, labels):
        pts = _arrival_rows(r)
        offered = [r.get("offered-load", s, 1).median for _, s in pts]
        series = [Series(name, [scaled(point(r.get(n, s, 1)), US) for _, s in pts])
                  for n, name in _QUEUED]
        md = r.md(pts[0][1])
        knee = float(md.get("saturation_speedup", 0) or 0)
        vlines = []
        at = {x: (s, o) for (x, s), o in zip(pts, offered)}
        if knee and knee in at:
            vlines.append((at[knee][1], f"saturation (speedup {knee:g})"))
            first = knee == pts[0][0]
            notes.append(f"{lab}: saturation point at speedup {knee:g}, "
                         f"{at[knee][1]:,.1f} req/s offered" + (
                             ": not served even at the first speedup" if first else
                             f"; sustained {float(md.get('sustained_rps', 0) or 0):,.1f} "
                             f"req/s offered (the speedup before it)"))
        else:
            notes.append(f"{lab}: every speedup served, up to {offered[-1]:,.1f} req/s offered: "
                         f"no saturation point in the range (raise --speedup)")
        panels.append(Panel("lines", f"queued match latency: {lab}", "us (log)", offered, series,
                            xlabel="offered load, requests/s (log)", xlog=True, vlines=vlines,
                            log=True))
        loads += [o for o in offered if o not in loads]
        achieved.append((lab, dict(zip(offered, (point(r.get("achieved-load", s, 1))
                                                   for _, s in pts)))))
        for (x, s), o in zip(pts, offered):
            a = r.get("achieved-load", s, 1)
            hit, prompt = r.get("hit-tokens", s, 1), r.get("prompt-tokens", s, 1)
            m = r.md(s)
            rows.append((lab, f"{x:g}", f"{o:,.1f}", cell(a, lambda v: f"{v:,.1f}"),
                         f"{a.median / o:.1%}" if a is not None and o else "-",
                         *[cell(r.get(n, s, 1), lambda v: _us(v * US)) for n, _ in _QUEUED],
                         cell(r.get("match-latency-service-p50", s, 1), lambda v: _us(v * US)),
                         cell(r.get("late-starts", s, 1), lambda v: f"{v:,.0f}"),
                         cell(r.get("issue-lateness-p50", s, 1), lambda v: _us(v * US)),
                         cell(r.get("issue-lateness-p99", s, 1), lambda v: _us(v * US)),
                         f"{hit.median / prompt.median:.2%}" if hit and prompt and
                         prompt.median else "-",
                         {1: "yes", 0: "no"}.get(_int_or_none(m.get("served")), "-")))
        notes.append(f"{lab}: {_arrival_conditions(r, pts)}")
    loads.sort()
    series = [Series(lab, [got.get(o) for o in loads]) for lab, got in achieved]
    series.append(Series("offered (achieved = offered)", [(o, o, o) for o in loads],
                         reference=True))
    panels.append(Panel("lines", "achieved against offered load", "requests/s (log)", loads,
                        series, xlabel="offered load, requests/s (log)", xlog=True, log=True))
    notes.append("latency: match completion minus the request's due time (service plus "
                 "queueing for a free issuing thread), or minus the issuer's wake-up when "
                 "an issuer was early; issue lateness: how late early issuers woke (the "
                 "harness's timing, not the index's); served: achieved >= 95% of offered "
                 "and p99 <= 10x the first speedup's")
    return FigureOut("arrival", "Open-loop arrival: queued match latency against offered load",
                     "(not in the paper: requests at their trace timestamps)", panels,
                     ("run", "speedup", "offered req/s", "achieved req/s", "achieved/offered",
                      "p50 us", "p99 us", "p99.9 us", "service p50 us", "late starts",
                      "issue lateness p50 us", "p99 us", "hit rate", "served"), rows, rs, [],
                     notes)


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _arrival_conditions(r, pts) -> str:
    md = r.md(pts[0][1])
    req = r.get("requests", pts[0][1], 1)
    try:
        wopts = (json.loads(md.get("config", "{}")) or {}).get("workload_options") or {}
    except (TypeError, ValueError):
        wopts = {}
    wl = r.workload() + (f" ({', '.join(f'{k}={v}' for k, v in sorted(wopts.items()))})"
                         if wopts else "")
    return "; ".join([f"workload {wl}", f"strategy {r.strategy(pts[0][1])}",
                      f"engine {md.get('engine', 'none')}",
                      f"{md.get('issuing_threads', '?')} issuing threads",
                      f"{req.median:,.0f} requests per speedup" if req else "requests ?",
                      "speedups " + ", ".join(f"{x:g}" for x, _ in pts)])


#: (id, builder, the command that produces its input)
#: ``placement-<policy>[-m<budget>]-<measure>`` (``placement frontier -o``)
_PLACEMENT = None


def _placement_name(name: str):
    import re
    global _PLACEMENT
    if _PLACEMENT is None:
        _PLACEMENT = re.compile(r"placement-(?P<policy>.+?)(?:-m(?P<m>\d+))?-(?P<what>"
                                r"ckpt-per-entry|ckpt-bytes|recompute-blocks|recompute-tokens"
                                r"|kept-ppm)\Z")
    return _PLACEMENT.match(name)


def placement(results, paper, opts):
    """Sparse prefix caching: recompute per hit against checkpoints per entry, per policy."""
    rs = [r for r in results if r.kind == "placement"]
    if not rs:
        return None
    r = rs[0]
    by: dict = {}
    for rd in r.readings:
        m = _placement_name(rd.name)
        if m and m.group("m"):
            by.setdefault(m.group("policy"), {}).setdefault(int(m.group("m")), {})[
                m.group("what")] = rd
    budgets = sorted({b for d in by.values() for b in d})
    series = [Series(p, [point(d[b]["recompute-blocks"]) if b in d and "recompute-blocks"
                         in d[b] else None for b in budgets]) for p, d in by.items()]
    rows = [(p, b, cell(d[b].get("ckpt-per-entry"), lambda v: f"{v:.2f}"),
             cell(d[b].get("recompute-blocks"), lambda v: f"{v:,.1f}"),
             cell(d[b].get("kept-ppm"), lambda v: f"{v / 1e4:.2f}%"))
            for p, d in by.items() for b in sorted(d)]
    return FigureOut("placement", "Sparse prefix caching: recompute against checkpoint budget",
                     f"placement frontier on {r.workload()} (no paper values)",
                     [Panel("lines", "recompute per hit", "blocks recomputed", budgets, series,
                            xlabel="checkpoints per entry (M)")],
                     ("policy", "M", "checkpoints/entry", "recompute blocks", "kept"), rows,
                     rs, [])


FIGURES = (
    ("fig1", fig1, "prefixbench run -s S -e E -w W (dram-blockhash and ssd-blockhash)"),
    ("table1", table1, "prefixbench recover -s S -n N"),
    ("fig6", fig6, "prefixbench sweep strategies -w W -e rocksdb"),
    ("fig7", fig7, "prefixbench sweep strategies --breakdown (or run --breakdown)"),
    ("fig8", fig8, "prefixbench recover -s sarp|segment-radix|dram-blockhash -n N --repeat K"),
    ("table3", table3, "prefixbench sweep strategies -w W"),
    ("table4", table4, "prefixbench sweep strategies|ablation -w W"),
    ("fig9", fig9, "prefixbench sweep retrieval -w W"),
    ("fig10", fig10, "prefixbench sweep ablation -w W"),
    ("table5", table5, "prefixbench sweep space -w W -e rocksdb"),
    ("fig11", fig11, "prefixbench scale -s S -w W --threads 1,2,4"),
    ("range", range_restore, "prefixbench payload --objects ... -o OUT.json"),
    ("capacity", capacity, "prefixbench sweep capacity -w W --pool-blocks N,N,... [--evict P]"),
    ("arrival", arrival, "prefixbench sweep arrival -s S -w W --speedup 1,2,4,... -o OUT.json "
                         "(or arrival -o)"),
    ("serving", serving, "any run or sweep"),
    ("placement", placement, "prefixbench placement frontier -w W -o OUT.json"),
)
IDS = tuple(i for i, _, _ in FIGURES)


def build(results, papers: dict, opts: dict | None = None, only=None) -> list:
    """Every figure the results support, in report order (``only``: those ids)."""
    opts = opts or {}
    out = []
    for fid, fn, _ in FIGURES:
        if only is not None and fid not in only:
            continue
        paper = papers["range"] if fid == "range" else papers["sarp"]
        f = fn(results, paper, opts)
        if f is not None:
            out.append(f)
    return out
