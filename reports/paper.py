"""The papers' own numbers, from ``reports/paper/<key>.json``, to stand beside ours.

Each entry is one number (or a range ``[low, high]``) the paper's text or a
table body states: the figure or table id, the dataset, the series, the
measure, the unit and the section.  Our copy of the SARP paper has the
captions of Tables 1, 3, 4 and 5 but not their bodies, so those hold only
what the text says.  Entries with a ``claim`` are the headline claims of the
report's summary table.

Met or missed.  Where the measure has a direction (:data:`BETTER`: a loss is
better lower, a speedup higher), a value of ours meets the paper when it is at
least as good as the paper's least favourable value (a loss at most the
range's high end, a speedup at least its low end): the claim is reproduced or
beaten.  Without a direction (candidate counts, shares, ...) it meets a range
when it lies inside it and a single value within 25% of it (the bound the
sweeps' Table 4 check uses).  Percent entries are compared in percent.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from prefixbench.errors import ConfigError

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper")
#: a single paper value is met within this relative distance
TOLERANCE = 0.25
PAPERS = ("sarp", "range")
#: measures with a direction: ``lower`` or ``higher`` is better
BETTER = {
    "hit-rate-loss": "lower", "recovery-time": "lower", "recovery-index": "lower",
    "recovery-rebuild": "lower", "recovery-load-deserialize": "lower",
    "snapshot-bytes": "lower", "snapshot-share": "lower", "disk-ratio": "lower",
    "entries-ratio": "lower", "ttft-spread": "lower", "finest-over-coarse": "lower",
    "throughput-ratio": "higher", "match-latency-ratio": "higher",
    "insert-latency-ratio": "higher", "recovery-speedup": "higher", "speedup": "higher",
}


@dataclass(frozen=True)
class PaperValue:
    id: str
    dataset: str
    series: str
    measure: str
    low: float
    high: float
    unit: str
    section: str
    claim: str = ""
    approx: bool = False
    text: str = ""
    threads: int | None = None

    @property
    def is_range(self) -> bool:
        return self.low != self.high

    def text_value(self) -> str:
        """``3.70-66.6x``, ``0.0030-0.029%``, ``621 s``: as the paper writes it."""
        suffix = {"ratio": "x", "percent": "%", "seconds": " s", "bytes": " B",
                  "count": "", "tokens": " tokens", "threads": " threads"}.get(
                      self.unit, f" {self.unit}")
        body = f"{_g(self.low)}-{_g(self.high)}" if self.is_range else _g(self.low)
        return ("~" if self.approx else "") + body + suffix

    def met(self, ours: float) -> bool:
        """Whether one value of ours (in this entry's unit) meets this paper value."""
        better = BETTER.get(self.measure)
        if better == "lower":
            return ours <= self.high * (1 + (0 if self.is_range else TOLERANCE))
        if better == "higher":
            return ours >= self.low * (1 - (0 if self.is_range else TOLERANCE))
        if self.is_range:
            return self.low <= ours <= self.high
        if self.low == 0:
            return abs(ours) <= TOLERANCE
        return abs(ours - self.low) <= TOLERANCE * abs(self.low)


def _g(x: float) -> str:
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}" if abs(x) < 100 else f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


@dataclass
class Paper:
    key: str
    title: str
    source: str
    conditions: dict
    values: list = field(default_factory=list)

    def find(self, id: str | None = None, *, measure: str | None = None,
             dataset: str | None = None, series: str | None = None) -> list:
        return [v for v in self.values
                if (id is None or v.id == id) and (measure is None or v.measure == measure)
                and (dataset is None or v.dataset == dataset)
                and (series is None or v.series == series)]

    def ids(self) -> list:
        out = []
        for v in self.values:
            if v.id not in out:
                out.append(v.id)
        return out

    def claims(self) -> list:
        return [v for v in self.values if v.claim]


def load(key: str) -> Paper:
    """The data file of one paper (``sarp``, ``range``); one clear line when it is bad."""
    path = os.path.join(HERE, f"{key}.json")
    if not os.path.isfile(path):
        raise ConfigError(f"paper {key!r}: no data file (papers: {', '.join(PAPERS)})")
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the paper's values: {e}") from None
    values = []
    for i, e in enumerate(d.get("values", [])):
        v = e["value"]
        low, high = (float(v[0]), float(v[1])) if isinstance(v, list) else (float(v), float(v))
        values.append(PaperValue(e["id"], e["dataset"], e["series"], e["measure"], low, high,
                                 e["unit"], str(e["section"]), e.get("claim", ""),
                                 bool(e.get("approx", False)), e.get("text", ""),
                                 e.get("threads")))
    return Paper(d.get("key", key), d["paper"], d.get("source", ""), d.get("conditions", {}),
                 values)
