"""One plot style for every figure: the Agg backend, the Okabe-Ito palette, one font size.

Agg renders without a display, so reports build on servers and in CI.  The
Okabe-Ito palette stays distinguishable under the common colour-vision
deficiencies; series beyond its eight colours repeat it with hatching.
"""
from __future__ import annotations

#: Okabe & Ito (2008), black last
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")
HATCHES = ("", "//", "..", "xx")
#: the paper's values: drawn in this colour and marker everywhere
PAPER_COLOUR = "#000000"
PAPER_MARKER = "D"
#: the exact oracle's curve beside the strategies
ORACLE_COLOUR = "#000000"
ORACLE_LINE = (0, (4, 2))
#: a place marked on a line plot (capacity cliff, saturation point)
MARK_COLOUR = "#555555"
MARK_LINE = "-."
#: a reference level drawn across a line plot (the unbounded pool)
REFERENCE_COLOUR = "#888888"
REFERENCE_LINE = ":"

RC = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "svg.fonttype": "none",
}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def hatch(i: int) -> str:
    return HATCHES[(i // len(PALETTE)) % len(HATCHES)]


def apply() -> None:
    """Select Agg and set the style (idempotent).  matplotlib is imported here, not at
    module import, so the CLI starts without it."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams.update(RC)
