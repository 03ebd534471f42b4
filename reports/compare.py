"""Two results side by side: every figure both have, the change, pyperf's significance.

Significance is pyperf's two-sample t-test (``pyperf._utils.is_significant``,
what ``compare_to`` uses).  It needs at least two values on each side; a
figure with one value on either side (a deterministic replay count, a
one-shot latency) is marked ``n<2`` and judged on its change alone.

A regression is a change in the worse direction of the figure's schema
``better`` (higher latency, lower throughput or hit rate).  ``--fail-above
P%`` fails when any figure regresses by more than P% and is significant (or
untestable, ``n<2``); figures without a direction (sizes, counters) are
shown, never judged.  A figure that goes from 0 to a positive value in the
worse direction is a regression of any size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from prefixbench.reports.plots import Panel, Series


@dataclass
class Change:
    key: tuple            # (setting, threads, name)
    a: object             # schema.Reading
    b: object
    change: float         # b / a - 1 (inf when a is 0 and b is not)
    significant: bool | None   # None: fewer than two values on a side
    t_score: float | None

    @property
    def label(self) -> str:
        setting, threads, name = self.key
        parts = [p for p in (setting, f"threads-{threads}" if threads != 1 else None, name) if p]
        return "-".join(parts)

    @property
    def better(self) -> str:
        return self.a.figure.better

    @property
    def regression(self) -> float:
        """How much worse B is than A, as a fraction (0 when not worse or no direction)."""
        if self.better == "lower":
            return max(self.change, 0.0)
        if self.better == "higher":
            return max(-self.change, 0.0)
        return 0.0

    def sig_text(self) -> str:
        if self.significant is None:
            return "n<2"
        return "significant" if self.significant else "not significant"


def _significance(a, b):
    if len(a) < 2 or len(b) < 2:
        return None, None
    if len(set(a)) == 1 and len(set(b)) == 1:
        return (a[0] != b[0]), None
    from pyperf._utils import is_significant
    try:
        sig, t = is_significant(list(a), list(b))
    except (ZeroDivisionError, ValueError):
        return None, None
    return bool(sig), float(t)


def changes(result_a, result_b) -> list:
    """Every figure both results have, in A's order."""
    b_by = {(r.setting, r.threads, r.name): r for r in result_b.readings}
    out = []
    for ra in result_a.readings:
        key = (ra.setting, ra.threads, ra.name)
        rb = b_by.get(key)
        if rb is None:
            continue
        ma, mb = ra.median, rb.median
        if ma == 0:
            ch = 0.0 if mb == 0 else math.inf
        else:
            ch = mb / ma - 1
        sig, t = _significance(ra.values, rb.values)
        out.append(Change(key, ra, rb, ch, sig, t))
    return out


def regressions(chs, threshold: float) -> list:
    """Changes worse than ``threshold`` (a fraction) that are significant or untestable."""
    return [c for c in chs if c.regression > threshold and c.significant is not False]


def fmt_change(c: Change) -> str:
    if math.isinf(c.change):
        return "from 0"
    return f"{c.change:+.1%}"


def table_rows(chs) -> list:
    from prefixbench.reports.figures import _num
    return [(c.label, c.a.figure.unit, f"{_num(c.a.median)}", f"{_num(c.b.median)}",
             fmt_change(c), c.sig_text(), c.better or "-",
             "worse" if c.regression else ("better" if c.better and c.change else "-"))
            for c in chs]


HEADER = ("figure", "unit", "A median", "B median", "change", "significance", "better",
          "verdict")


def format_text(chs, a_label: str, b_label: str) -> str:
    from prefixbench.reports.tables import format_table
    return f"A = {a_label}\nB = {b_label}\n" + format_table(HEADER, table_rows(chs))


def panels(chs, a_label: str, b_label: str, top: int = 12) -> list:
    """Bars of A beside B for the figures with a direction that moved most, by unit."""
    out = []
    judged = [c for c in chs if c.better and not math.isinf(c.change)]
    for unit in ("seconds", "per-second", "ratio", "count", "bytes", "ppm"):
        group = sorted([c for c in judged if c.a.figure.unit == unit],
                       key=lambda c: -abs(c.change))[:top]
        if not group:
            continue
        cats = [c.label + ("*" if c.significant else "") for c in group]
        out.append(Panel("bars", f"{unit} (* significant)", unit, cats, [
            Series(a_label, [(c.a.median, c.a.low, c.a.high) for c in group]),
            Series(b_label, [(c.b.median, c.b.low, c.b.high) for c in group])]))
    return out


def render_html(chs, a, b, limit: float | None = None) -> str:
    """One self-contained page: the bars, then every figure's row."""
    import base64

    from prefixbench.reports import plots
    from prefixbench.reports.html import CSS, esc, table
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>compare {esc(a.label)} vs {esc(b.label)}</title><style>{CSS}</style>"
             "</head><body>", f"<h1>A {esc(a.path)} vs B {esc(b.path)}</h1>"]
    if limit is not None:
        bad = regressions(chs, limit)
        parts.append(f"<p>Threshold {limit:.1%}: " + (
            "regressed: " + esc(", ".join(f"{c.label} {fmt_change(c)}" for c in bad))
            if bad else "no figure regressed") + "</p>")
    for i, p in enumerate(panels(chs, "A", "B")):
        data = base64.b64encode(plots.draw([p])).decode("ascii")
        parts.append(f'<figure><img alt="compare panel {i + 1}" '
                     f'src="data:image/png;base64,{data}"></figure>')
    parts.append(table(HEADER, table_rows(chs), "compare"))
    parts.append("</body></html>")
    return "\n".join(parts)
