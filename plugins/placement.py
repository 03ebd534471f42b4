"""Sparse prefix caching: where to keep recurrent-state checkpoints.

The model (the sparse-prefix-caching paper's, in blocks):

* A retained cache entry covers positions 1..N.  The unit is blocks; tokens =
  blocks x block size.
* A later request that hits the entry overlaps it to depth d in {0..N}, with
  weight w(d).
* With checkpoints C, a subset of {1..N}, the request resumes at
  s(d) = max({0} | {c in C : c <= d}) and recomputes d - s(d) positions of the
  shared prefix exactly.
* Expected recompute: R(C) = sum w(d) (d - s(d)) / sum w(d).
* Problem: minimise R(C) subject to |C| <= M.

Bounds: ``dense`` (a state at every position, R = 0) and ``no_reuse`` (no
checkpoint: R = E[d], the whole overlap recomputed).  The cost model prices a
checkpoint at the model's recurrent state bytes and dense attention KV at
bytes per token (:mod:`prefixbench.plugins.models`).

Policies (one parser, :func:`parse_policy`).  ``dp``, ``block``, ``uniform``
and ``geometric`` are fixed sets of positions relative to an entry's start
(over the pooled histogram's span 1..N when fitted to traffic); ``end`` and
``boundary`` depend on each entry and are compared as they are:

``dp``
    the exact placement for the given weights (:func:`solve`; O(N*M) layers
    of row minima in :mod:`._placement`, the interval cost being Monge).
    Ties go to the shallower position; a checkpoint that saves nothing is not
    placed, so dp may return fewer than M positions.
``block:B``
    a state every B blocks (B, 2B, ...), the way block-granular hybrid caches
    keep state; its count grows with the entry and ignores the budget.
``uniform[:M]``
    M positions round(k*N/M), k = 1..M (M defaults to the budget).
``end``
    the state at the end of each cached sequence only.
``boundary``
    the entry's turn boundaries (where a prompt or an output ended); with a
    budget below their count, M of them evenly spread by rank, the last
    always kept.
``geometric[:M]``
    N, ceil(N/2), ceil(N/4), ...: a state at the end and halving towards the
    start, M of them (M defaults to the budget).

Bad input is one :class:`ConfigError` line: negative, NaN or all-zero weights,
N = 0 (only w_0), M < 0, an unknown policy.  M > N is clamped to N and said so
(through ``note``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prefixbench import twins
from prefixbench.errors import ConfigError

#: the solver and checkpoint set in use: compiled, or the reference with PREFIXBENCH_PURE=1
impl = twins.load("prefixbench.plugins._placement")
CheckpointSet = impl.CheckpointSet

__all__ = ["POLICIES", "Placement", "Policy", "CheckpointSet", "check_budget", "check_weights",
           "expected_recompute", "no_reuse", "parse_policy", "policy_positions", "solve"]

#: policy kinds and whether they take a ``:N`` parameter (True: required)
POLICIES = {"dp": False, "block": True, "uniform": None, "end": False, "boundary": False,
            "geometric": None}


@dataclass(frozen=True)
class Policy:
    kind: str
    param: int | None = None

    @property
    def text(self) -> str:
        return self.kind if self.param is None else f"{self.kind}:{self.param}"


def parse_policy(text, option: str = "policy") -> Policy:
    """``"block:16"`` -> ``Policy("block", 16)``; one line naming ``option`` otherwise."""
    s = str(text).strip()
    kind, sep, arg = s.partition(":")
    known = "dp, block:B, uniform[:M], end, boundary, geometric[:M]"
    if kind not in POLICIES:
        raise ConfigError(f"option {option}: unknown policy {s!r}; known: {known}")
    takes = POLICIES[kind]
    if not sep:
        if takes is True:
            raise ConfigError(f"option {option}: policy {kind} needs a block count ({kind}:B)")
        return Policy(kind)
    if takes is False:
        raise ConfigError(f"option {option}: policy {kind} takes no parameter, got {s!r}")
    try:
        v = int(arg)
    except ValueError:
        v = 0
    if v < 1 or str(v) != arg.strip():
        raise ConfigError(f"option {option}: {s!r}: the parameter must be an integer >= 1")
    return Policy(kind, v)


def check_weights(weights, where: str = "weights") -> np.ndarray:
    """``w_0..w_N`` as float64, or one line naming ``where``: not a list of numbers,
    N = 0, negative, NaN/infinite or all zero."""
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: must be a list of numbers w_0..w_N") from None
    if w.ndim != 1:
        raise ConfigError(f"{where}: must be a flat list of numbers w_0..w_N")
    if len(w) < 2:
        raise ConfigError(f"{where}: N = 0 (only w_0 given): an entry needs at least one "
                          f"position")
    bad = ~np.isfinite(w)
    if bad.any():
        raise ConfigError(f"{where}: w_{int(np.argmax(bad))} is {w[bad][0]} (NaN or infinite)")
    if (w < 0).any():
        i = int(np.argmax(w < 0))
        raise ConfigError(f"{where}: w_{i} is negative ({w[i]:g})")
    if not (w > 0).any():
        raise ConfigError(f"{where}: all weights are zero")
    return w


def check_budget(budget, n: int, option: str = "budget", note=None) -> int:
    """``budget`` as an int in 0..n; M < 0 is an error, M > N is clamped (and
    ``note`` is told so)."""
    try:
        m = int(budget)
        if m != float(budget):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"option {option}: {budget!r} is not an integer") from None
    if m < 0:
        raise ConfigError(f"option {option}: {m} is negative (a budget is a checkpoint count)")
    if m > n:
        if note is not None:
            note(f"{option} {m} is more than N = {n} positions: clamped to {n}")
        m = n
    return m


def expected_recompute(weights, positions) -> float:
    """R(C): the weighted mean of d - s(d) over w_0..w_N (normalised by sum w)."""
    w = np.asarray(weights, dtype=np.float64)
    d = np.arange(len(w), dtype=np.float64)
    s = resume_points(np.arange(len(w)), positions)
    return float((w * (d - s)).sum() / w.sum())


def resume_points(depths, positions) -> np.ndarray:
    """s(d) for each depth: the deepest position <= d, 0 when none."""
    p = np.unique(np.asarray(positions, dtype=np.int64))
    p = p[p >= 1]
    depths = np.asarray(depths, dtype=np.int64)
    if not len(p):
        return np.zeros(len(depths), dtype=np.float64)
    i = np.searchsorted(p, depths, side="right")
    return np.where(i > 0, p[np.maximum(i - 1, 0)], 0).astype(np.float64)


def no_reuse(weights) -> float:
    """E[d]: the recompute with no checkpoint at all (every overlap recomputed)."""
    w = np.asarray(weights, dtype=np.float64)
    return float((w * np.arange(len(w))).sum() / w.sum())


@dataclass
class Placement:
    positions: np.ndarray
    expected_recompute: float
    no_reuse: float
    dense: float = 0.0
    policy: str = "dp"
    budget: int = 0
    notes: list = field(default_factory=list)

    def as_json(self) -> dict:
        return {"positions": [int(p) for p in self.positions],
                "expected_recompute": self.expected_recompute, "no_reuse": self.no_reuse,
                "dense": self.dense, "policy": self.policy}


def solve(weights, budget, where: str = "weights", option: str = "budget") -> Placement:
    """The exact placement of at most ``budget`` checkpoints for ``weights``
    (checked; M > N clamped with a note)."""
    w = check_weights(weights, where)
    notes: list[str] = []
    m = check_budget(budget, len(w) - 1, option, notes.append)
    pos, total = impl.solve(w, m)
    return Placement(np.asarray(pos, dtype=np.int64), float(total / w.sum()), no_reuse(w),
                     policy="dp", budget=m, notes=notes)


def policy_positions(policy: Policy, n: int, budget: int | None = None, weights=None,
                     boundaries=None) -> np.ndarray:
    """The positions (sorted, in 1..n) ``policy`` keeps on an entry of ``n`` blocks.

    ``budget`` caps ``uniform``/``geometric`` (when they carry no ``:M``),
    ``boundary`` and ``dp``; ``weights`` are dp's histogram (w_0.., any
    length: positions past ``n`` are dropped); ``boundaries`` the entry's turn
    boundaries for ``boundary``."""
    n = int(n)
    if n < 1:
        return np.empty(0, dtype=np.int64)
    k = policy.kind
    m = policy.param if policy.param is not None and k != "block" else budget
    if k == "block":
        return np.arange(policy.param, n + 1, policy.param, dtype=np.int64)
    if k == "end":
        return np.array([n], dtype=np.int64) if m is None or m >= 1 else np.empty(0, np.int64)
    if m is None:
        raise ConfigError(f"policy {policy.text}: needs a budget")
    m = max(0, min(int(m), n))
    if m == 0:
        return np.empty(0, dtype=np.int64)
    if k == "uniform":
        return np.unique(np.maximum(1, np.floor(np.arange(1, m + 1) * n / m + 0.5))
                         ).astype(np.int64)
    if k == "geometric":
        return np.unique(np.ceil(n / 2.0 ** np.arange(m))).astype(np.int64)
    if k == "boundary":
        b = np.unique(np.asarray(boundaries if boundaries is not None else [], dtype=np.int64))
        b = b[(b >= 1) & (b <= n)]
        if len(b) <= m:
            return b
        idx = np.ceil(np.arange(1, m + 1) * len(b) / m).astype(np.int64) - 1
        return b[np.unique(idx)]
    if k == "dp":
        if weights is None:
            return np.array([n], dtype=np.int64)
        w = np.asarray(weights, dtype=np.float64)[:n + 1]
        if not (w > 0).any():
            return np.empty(0, dtype=np.int64)
        pos, _ = impl.solve(w, min(m, len(w) - 1))
        return np.asarray(pos, dtype=np.int64)
    raise ConfigError(f"unknown policy {policy.text!r}")   # pragma: no cover - parse_policy guards


def budget_from_bytes(budget_bytes: int, state_bytes: int) -> int:
    """Checkpoints per entry that fit ``budget_bytes`` at ``state_bytes`` each."""
    return int(budget_bytes // max(1, int(state_bytes)))

