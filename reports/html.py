"""One self-contained HTML report: inline PNG figures, tables, captions, the paper beside ours.

Nothing is fetched: the images are ``data:`` URIs, the style is inline and
there is no script.  Order: a summary table of the papers' headline claims
(claim, paper, ours, met/missed/context/not run), then one section per figure
with its image, its caption (command, commit, machine, engine settings, cache
rule, cap choice, scale, threads, files), its table and the paper's values
beside ours with the ratio ours ÷ paper.
"""
from __future__ import annotations

import base64
import datetime
import html
import json
import re

from prefixbench.reports import plots
from prefixbench.reports.results import machine, rendered_on

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:70em;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.met{color:#006d2c;font-weight:600}.missed{color:#b30000;font-weight:600}
.context,.notrun{color:#666}
figure{margin:.5em 0}img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.8em;color:#444}.notes{font-size:.85em;color:#444}
code{font-size:.95em}
"""


#: a cell that is a number (with a unit, a ratio, or a [min-max] after it): right-aligned
NUMERIC = re.compile(r"^[~+-]?[\d.,]+(e[+-]?\d+)?(-[\d.,]+(e[+-]?\d+)?)?"
                     r"\s?(%|x|s|ms|us|ns|B|KiB|MiB|GiB|TiB)?(\s\[[^\]]*\])?$")


def esc(x) -> str:
    return html.escape("" if x is None else str(x))


def table(header, rows, cls: str = "") -> str:
    out = [f'<table class="{esc(cls)}"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in header]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>" + "".join(_td(c) for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _td(c) -> str:
    if isinstance(c, tuple) and len(c) == 2 and c[0] == "class":
        return c[1]
    s = "" if c is None else str(c)
    num = bool(NUMERIC.match(s))
    return f'<td class="num">{esc(s)}</td>' if num else f"<td>{esc(s)}</td>"


def _met_cell(text: str):
    cls = {"met": "met", "missed": "missed", "context": "context",
           "shape only": "context"}.get(text, "notrun")
    return ("class", f'<td class="{cls}">{esc(text)}</td>')


def _config(md: dict) -> dict:
    try:
        return json.loads(md.get("config", "{}")) or {}
    except (TypeError, ValueError):
        return {}


def caption(results) -> list:
    """``(label, value)`` lines describing how the figure's results were measured."""
    lines = []
    for r in results:
        md = r.first()
        cfg = _config(md)
        engine = md.get("engine", "none")
        eng = [f"engine {engine}"]
        if cfg.get("engine_options"):
            eng.append("options " + ", ".join(f"{k}={v}" for k, v in cfg["engine_options"].items()))
        for k in ("direct_io", "durability"):
            if k in cfg:
                eng.append(f"{k}={cfg[k]}")
        if md.get("cache_bytes") is not None:
            eng.append(f"cache {int(md['cache_bytes']):,} B")
        rule = cfg.get("cache_rule")
        cache = f"{rule} ({cfg.get('cache_fraction', 0.1):.0%} of the logical store)" \
            if rule == "paper" else (f"{rule}: {cfg.get('cache_bytes')} B" if rule else "-")
        cap = md.get("cap_rule") if str(md.get("cap_rule", "")).startswith("cap rule") else (
            f"{cfg.get('cap_rule')}" if cfg.get("cap_rule") else "-")
        if "cap_fraction" in md:
            cap += f" (cap_fraction {md['cap_fraction']:.4g}, recovery ratio " \
                   f"{md.get('cap_recovery_ratio', 0):.2f}x)"
        if engine == "none" and cfg.get("engine"):
            # the first setting keeps no store (radix, dram-blockhash); others use this one
            eng[0] = f"engine {cfg['engine']} (for the strategies that store their index)"
        wopts = cfg.get("workload_options") or {}
        items = [("workload", str(md.get("workload", "?")) + (
            f" ({', '.join(f'{k}={v}' for k, v in sorted(wopts.items()))})" if wopts else ""))]
        if "pool_evict" in md:
            items.append(("pools", f"evict {md['pool_evict']}, {md.get('pool_workers', 1)} "
                                   f"worker(s), route {md.get('pool_route', '-')}"))
        lines.append((r.label, [
            ("command", "prefixbench " + str(md.get("prefixbench_argv", "?"))),
            *items,
            ("commit", str(md.get("git_commit", "?"))[:12]),
            ("machine", machine(md)),
            ("engine", "; ".join(eng)),
            ("cache rule", cache),
            ("cap", cap),
            ("scale", f"{md.get('scale', cfg.get('scale', '-'))}"
                      + (f", {md['paper_fraction']:.3g} of the paper size"
                         if "paper_fraction" in md else "")),
            ("threads", f"{md['issuing_threads']} issuing threads (open loop)"
                        if "issuing_threads" in md else _threads(cfg, r)),
            ("implementation", md.get("prefixbench_impl", "?")),
            ("files", ", ".join(r.files)),
        ]))
    return lines


def _caption_html(results) -> str:
    out = []
    for label, items in caption(results):
        out.append(f"<div><b>{esc(label)}</b>: " + "; ".join(
            f"{esc(k)} <code>{esc(v)}</code>" for k, v in items) + "</div>")
    return "".join(out)


def _threads(cfg: dict, r) -> str:
    t = r.threads() if len(r.threads()) > 1 else (cfg.get("threads") or r.threads())
    return ", ".join(map(str, t)) if isinstance(t, (list, tuple)) else str(t)


def conditions(results, paper) -> list:
    """(condition, the paper's, ours) for what differs between the paper's runs and ours."""
    mds = [r.first() for r in results]
    cfgs = [_config(md) for md in mds]

    def ours(fn):
        vals = []
        for md, cfg, r in zip(mds, cfgs, results):
            v = fn(md, cfg, r)
            if v and v not in vals:
                vals.append(v)
        return "; ".join(vals) or "-"
    pc = paper.conditions
    rows = [("machine", pc.get("machine", "-"), ours(lambda md, c, r: machine(md)))]
    if paper.key == "sarp":
        rows += [
            ("scale", pc.get("scale", "-"), ours(lambda md, c, r: (
                f"{md.get('scale', c.get('scale', '-'))}"
                + (f" ({md['paper_fraction']:.3g} of the paper size)" if "paper_fraction" in md
                   else "")
                + (f", {float(md['unique_block_entries']):.3g} entries"
                   if "unique_block_entries" in md else "")))),
            ("threads", pc.get("threads", "-"), ours(lambda md, c, r: "request threads "
                                                     + _threads(c, r))),
            ("engine", pc.get("engine", "-"), ours(lambda md, c, r: f"{md.get('engine', 'none')}"
                                                   + (" direct I/O" if c.get("direct_io") else "")
                                                   + (f", durability {c['durability']}"
                                                      if c.get("durability") else ""))),
            ("cache", pc.get("cache_rule", "-"), ours(lambda md, c, r: (
                f"{c.get('cache_rule')} rule, {int(md['cache_bytes']):,} B"
                if md.get("cache_bytes") is not None and c.get("cache_rule")
                else (f"{int(md['cache_bytes']):,} B" if md.get("cache_bytes") is not None
                      else "")))),
            ("repeats", pc.get("repeats", "-"), ours(lambda md, c, r: f"{md.get('repeats', 1)}"
                                                     if "repeats" in md else "")),
        ]
    else:
        rows += [("stack", pc.get("stack", "-"), "no GPU: payload restores from the store"),
                 ("payload", pc.get("payload", "-"), ours(lambda md, c, r: (
                     f"{c.get('payload')}, stripes {c.get('stripe')}, cache {c.get('cache')}"
                     if c.get("payload") else "")))]
    return rows


def comparison_rows(comps) -> list:
    rows = []
    for c in comps:
        pv = c.paper
        ratio = "-"
        if c.ours and pv.low and not pv.is_range:
            ratio = f"{c.ours[0] / pv.low:.3g}" if len(c.ours) == 1 else "-"
        rows.append((pv.id, pv.dataset, pv.series, pv.measure, pv.text_value(), c.ours_text(),
                     ratio, _met_cell(c.met_text()), pv.section,
                     "; ".join(x for x in (c.note, pv.text) if x)))
    return rows


COMPARISON_HEADER = ("paper id", "dataset", "series", "measure", "paper", "ours",
                     "ours ÷ paper", "met", "section", "note")


def summary(figures, papers) -> list:
    """(claim, paper, ours, met) for every headline claim of the papers in play."""
    found = {}
    for f in figures:
        for c in f.comparisons:
            if c.paper.claim and (c.paper not in found or (c.ours and not found[c.paper].ours)):
                found[c.paper] = c
    keys = ["sarp"] + (["range"] if any(f.id == "range" for f in figures) else [])
    where = {}                                  # paper value -> the section showing it
    for f in figures:
        for c in f.comparisons:
            where.setdefault(c.paper, f.id)
    rows = []
    for k in keys:
        for pv in papers[k].claims():
            c = found.get(pv)
            label = f"{pv.claim} ({papers[k].key} {pv.id}, {pv.dataset})"
            if pv in where:
                label = ("class", f'<td><a href="#{esc(where[pv])}">{esc(label)}</a></td>')
            if c is None:
                rows.append((label, pv.text_value(), "-", _met_cell("not run")))
            else:
                rows.append((label, pv.text_value(), c.ours_text(), _met_cell(c.met_text())))
    return rows


def image(fig, fmt: str = "png") -> str:
    data = plots.draw(fig.panels, fmt=fmt)
    mime = "image/svg+xml" if fmt == "svg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def render(figures, results, papers, title: str = "prefixbench report") -> str:
    """The whole report as one HTML string."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{esc(title)}</h1>",
           f"<p>Rendered {esc(now)} on {esc(rendered_on())} from "
           f"{len(results)} result(s): {esc(', '.join(r.path for r in results))}. "
           f"Figures: {esc(', '.join(f.id for f in figures)) or 'none'}.</p>",
           "<h2 id=\"summary\">Summary: the papers' claims beside ours</h2>",
           table(("claim", "paper", "ours", "met"), summary(figures, papers), "summary"),
           f"<p class=\"notes\">Paper conditions: {esc(papers['sarp'].conditions.get('machine'))}; "
           f"{esc(papers['sarp'].conditions.get('threads'))}; "
           f"{esc(papers['sarp'].conditions.get('engine'))}; cache "
           f"{esc(papers['sarp'].conditions.get('cache_rule'))}; "
           f"{esc(papers['sarp'].conditions.get('scale'))}. Met: at least as good as the paper's "
           "least favourable value where the measure has a direction (a loss at most, a "
           "speedup at least), otherwise inside its range or within 25% of a single value; "
           "context: our scale or threads differ too much to judge; shape only: the paper's "
           "seconds are GPU time-to-first-token, compared by shape.</p>"]
    for f in figures:
        out.append(f'<section id="{esc(f.id)}"><h2>{esc(f.id)}: {esc(f.title)} '
                   f"<small>({esc(f.paper_ref)})</small></h2>")
        out.append(f'<figure><img alt="{esc(f.id)}: {esc(f.title)}" src="{image(f)}">'
                   f"<figcaption>{_caption_html(f.results)}</figcaption></figure>")
        out.append(table(f.header, f.rows, "ours"))
        if f.comparisons:
            out.append("<h3>The paper beside ours</h3>")
            out.append(table(COMPARISON_HEADER, comparison_rows(f.comparisons), "paper"))
            pk = "range" if f.id == "range" else "sarp"
            out.append(table(("condition", "paper", "ours"), conditions(f.results, papers[pk]),
                             "conditions"))
        if f.notes:
            out.append('<div class="notes">' + "".join(f"<p>{esc(n)}</p>" for n in f.notes)
                       + "</div>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)
