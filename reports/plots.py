"""The paper's figure forms, drawn with matplotlib from plain data (no result objects).

- ``bars``: grouped bars, one group per category (workload, setting), one bar
  per series (strategy); error bars are the min-max over repeats around the
  median; a log axis when the positive values span more than a decade.
- ``stacked``: one bar per category, one segment per series (phases of a
  latency breakdown, stages of recovery).
- ``lines``: one line per series over numeric or ordered x (budget sweep,
  thread scaling, restore time against object count, hit rate against
  capacity on a log x axis); vertical markers name a place on x (a capacity
  cliff, a saturation point), horizontal ones a reference level (the
  unbounded pool's hit rate).
The paper's values are black diamonds (a range is a vertical bar between two
diamonds) at the category and series they belong to.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

from prefixbench.reports import style


@dataclass
class Series:
    label: str
    #: one (median, low, high) per category, None where this series has no value
    points: list
    #: the exact reference (the oracle): lines draw it in its own style, on top, so
    #: a strategy that matches it exactly still shows beneath
    reference: bool = False


@dataclass
class Panel:
    kind: str                 # bars, stacked, lines
    title: str
    ylabel: str
    categories: list
    series: list
    xlabel: str = ""
    #: (category index, series index or None, low, high, label)
    paper: list = field(default_factory=list)
    log: bool | None = None   # None: decide from the data
    #: lines only, numeric categories: a log-scaled x axis
    xlog: bool = False
    #: (x, label): a vertical marker at a place on the x axis (a cliff, a saturation point)
    vlines: list = field(default_factory=list)
    #: (y, label): a horizontal reference level (a baseline outside the x range)
    hlines: list = field(default_factory=list)


def spans_decade(values) -> bool:
    pos = [v for v in values if v and v > 0]
    return len(pos) > 1 and max(pos) / min(pos) > 10


def _values(panel: Panel) -> list:
    out = [p[0] for s in panel.series for p in s.points if p]
    out += [x for m in panel.paper for x in (m[2], m[3])]
    return out


def _bars(ax, panel: Panel, stacked: bool) -> None:
    n = max(len(panel.series), 1)
    xs = list(range(len(panel.categories)))
    width = 0.8 if stacked else 0.8 / n
    bottom = [0.0] * len(xs)
    for i, s in enumerate(panel.series):
        med = [p[0] if p else 0.0 for p in s.points]
        if stacked:
            pos = xs
        else:
            pos = [x - 0.4 + width * (i + 0.5) for x in xs]
        lo = [max(p[0] - p[1], 0) if p else 0 for p in s.points]
        hi = [max(p[2] - p[0], 0) if p else 0 for p in s.points]
        ax.bar(pos, med, width, bottom=bottom if stacked else None, label=s.label,
               color=style.colour(i), hatch=style.hatch(i), edgecolor="white", linewidth=0.5,
               yerr=None if stacked or not any(lo + hi) else [lo, hi], capsize=2,
               error_kw={"elinewidth": 0.8})
        if stacked:
            bottom = [b + m for b, m in zip(bottom, med)]
    for ci, si, low, high, _ in panel.paper:
        x = ci if stacked or si is None else ci - 0.4 + width * (si + 0.5)
        ax.plot([x, x], [low, high], color=style.PAPER_COLOUR, linewidth=1.2)
        ax.plot([x] * (1 if low == high else 2), [low] if low == high else [low, high],
                style.PAPER_MARKER, color=style.PAPER_COLOUR, markersize=4)
    ax.set_xticks(xs)
    tilt = len(xs) > 3 or any(len(str(c)) > 14 for c in panel.categories)
    ax.set_xticklabels(panel.categories, rotation=25 if tilt else 0,
                       ha="right" if tilt else "center", fontsize=7 if tilt else None)


def _lines(ax, panel: Panel) -> None:
    xs = list(range(len(panel.categories)))
    numeric = all(isinstance(c, (int, float)) for c in panel.categories)
    x_of = (lambda i: panel.categories[i]) if numeric else (lambda i: i)
    for i, s in enumerate(panel.series):
        pts = [(x_of(j), p) for j, p in enumerate(s.points) if p]
        if not pts:
            continue
        x = [a for a, _ in pts]
        med = [p[0] for _, p in pts]
        yerr = [[p[0] - p[1] for _, p in pts], [p[2] - p[0] for _, p in pts]]
        if s.reference:
            ax.errorbar(x, med, yerr=yerr, marker="x", markersize=4, capsize=2, label=s.label,
                        color=style.ORACLE_COLOUR, linestyle=style.ORACLE_LINE,
                        linewidth=1.0, zorder=3)
            continue
        ax.errorbar(x, med, yerr=yerr, marker="o", markersize=3.5, capsize=2, label=s.label,
                    color=style.colour(i), linewidth=1.4)
    for ci, _, low, high, _ in panel.paper:
        x = x_of(ci)
        ax.plot([x, x], [low, high], color=style.PAPER_COLOUR, linewidth=1.2)
        ax.plot([x] * (1 if low == high else 2), [low] if low == high else [low, high],
                style.PAPER_MARKER, color=style.PAPER_COLOUR, markersize=4)
    if not numeric:
        ax.set_xticks(xs)
        ax.set_xticklabels([str(c) for c in panel.categories])
    elif panel.xlog and all(c > 0 for c in panel.categories):
        # ticks at the measured points, labelled 250, 1.6k, 2M: the log axis's own
        # minor labels (3x10^2 4x10^2 ...) collide at a handful of points
        from matplotlib.ticker import NullFormatter
        ax.set_xscale("log")
        ax.set_xticks(list(panel.categories))
        ax.set_xticklabels([compact(c) for c in panel.categories],
                           rotation=30 if len(panel.categories) > 6 else 0)
        ax.xaxis.set_minor_formatter(NullFormatter())
    for y, label in panel.hlines:
        ax.axhline(y, color=style.REFERENCE_COLOUR, linestyle=style.REFERENCE_LINE,
                   linewidth=1.0, label=label)
    for x, label in panel.vlines:
        ax.axvline(x, color=style.MARK_COLOUR, linestyle=style.MARK_LINE, linewidth=1.1,
                   label=label)


def compact(x: float) -> str:
    """``1600`` -> ``1.6k``, ``2e6`` -> ``2M``: a tick label that stays short."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def draw(panels: list, fmt: str = "png", title: str = "") -> bytes:
    """The panels side by side as one image (``png`` or ``svg``) in memory."""
    style.apply()
    import matplotlib.pyplot as plt
    n = max(len(panels), 1)
    # wide enough for every bar: about a third of an inch per bar, at least 4.2 per panel
    width = sum(max(4.2, 0.33 * len(p.categories) * (max(len(p.series), 1) if p.kind == "bars"
                                                    else 1)) for p in panels) or 4.2
    fig, axes = plt.subplots(1, n, figsize=(min(width, 13), 3.6), squeeze=False)
    try:
        for ax, panel in zip(axes[0], panels):
            if panel.kind == "lines":
                _lines(ax, panel)
            else:
                _bars(ax, panel, panel.kind == "stacked")
            log = panel.log if panel.log is not None else spans_decade(_values(panel))
            if log and all(v > 0 for v in _values(panel) if v is not None) and _values(panel):
                ax.set_yscale("log")
            ax.set_title(panel.title)
            ax.set_ylabel(panel.ylabel)
            if panel.xlabel:
                ax.set_xlabel(panel.xlabel)
            handles, labels = ax.get_legend_handles_labels()
            if panel.paper:
                from matplotlib.lines import Line2D
                handles.append(Line2D([], [], marker=style.PAPER_MARKER, linestyle="-",
                                      color=style.PAPER_COLOUR, markersize=4))
                labels.append("paper")
            if labels and panel.kind == "stacked":
                ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 1.0))
            elif labels:
                ax.legend(handles, labels, loc="best")
        if title:
            import textwrap
            # about one character per 0.09 inch at the title size: wrap, never clip
            fig.suptitle("\n".join(textwrap.wrap(title, max(30, int(fig.get_figwidth()
                                                                      / 0.09)))))
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        return buf.getvalue()
    finally:
        plt.close(fig)


def point(reading) -> tuple | None:
    """``(median, low, high)`` of a schema reading, None when absent or not finite."""
    if reading is None or not reading.values:
        return None
    m = reading.median
    return None if m is None or (isinstance(m, float) and math.isnan(m)) else (
        m, reading.low, reading.high)


def scaled(p: tuple | None, factor: float) -> tuple | None:
    return None if p is None else tuple(x * factor for x in p)
