"""Pure-Python reference of :mod:`prefixbench.plugins._placement`: the same public
names, the same arithmetic, the same tie rule, so the tests can hold the two equal.

``solve(weights, budget)`` is the checkpoint-placement dynamic program of
:mod:`prefixbench.plugins.placement` in its plain O(N^2 * M) form: every layer
scans every earlier position for every position.  ``CheckpointSet`` is a set of
chained block ids with "the deepest member of this prefix" as its one query.

The recurrence (positions 0..N carry weights ``w[d]``; a checkpoint at ``a``
serves depths ``a..b-1`` when the next one is at ``b``)::

    S0[x] = sum(w[d] for d < x)        S1[x] = sum(d * w[d] for d < x)
    cost(a, b) = (S1[b] - S1[a]) - a * (S0[b] - S0[a])
    E_0(b) = cost(0, b)
    E_j(b) = min over a in [0, b-1] of E_{j-1}(a) + cost(a, b)     (E_{j-1}(0) = 0)

A row is evaluated as ``min_a (K[a] - a * S0[b]) + S1[b]`` with
``K[a] = (E_{j-1}(a) - S1[a]) + a * S0[a]`` (the same value, one array read
per candidate; the compiled twin evaluates exactly these expressions).
``E_M(N + 1)`` is the least total recompute with at most M checkpoints; ``a = 0``
stands for "no further checkpoint".  Ties take the smallest ``a`` (the shallower
position), so a checkpoint that saves nothing is never placed.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CheckpointSet", "prefix_sums", "solve"]


def prefix_sums(weights) -> tuple[list, list]:
    """``(S0, S1)``: running sums of ``w[d]`` and ``d * w[d]`` (length N + 2, floats)."""
    s0, s1 = [0.0], [0.0]
    for d, x in enumerate(np.asarray(weights, dtype=np.float64).tolist()):
        s0.append(s0[-1] + x)
        s1.append(s1[-1] + d * x)
    return s0, s1


def solve(weights, budget: int) -> tuple[np.ndarray, float]:
    """``(positions, total)``: at most ``budget`` checkpoints in 1..N minimising
    ``sum(w[d] * (d - s(d)))``, and that sum (not normalised).  ``weights`` is
    ``w[0..N]``, already checked; ``budget`` is clamped to ``0..N``."""
    s0, s1 = prefix_sums(weights)
    n1 = len(s0) - 1                         # N + 1: the end sentinel
    m = max(0, min(int(budget), n1 - 1))
    prev = [(s1[b] - s1[0]) - 0 * (s0[b] - s0[0]) for b in range(n1 + 1)]
    arg = []
    for _j in range(m):
        cur = [0.0] * (n1 + 1)
        row = [0] * (n1 + 1)
        k = [(prev[a] - s1[a]) + a * s0[a] for a in range(n1 + 1)]
        for b in range(1, n1 + 1):
            x = s0[b]
            best, best_a = None, 0
            for a in range(b):
                v = k[a] - a * x
                if best is None or v < best:
                    best, best_a = v, a
            cur[b], row[b] = best + s1[b], best_a
        arg.append(row)
        prev = cur
    total = prev[n1]
    positions = []
    b = n1
    for j in range(m - 1, -1, -1):
        a = arg[j][b]
        if a == 0:
            break
        positions.append(a)
        b = a
    return np.array(sorted(positions), dtype=np.int64), float(total)


class CheckpointSet:
    """Chained block ids that carry a stored recurrent state."""

    def __init__(self, initial: int = 1024):
        self._ids: set[int] = set()

    def add_many(self, block_ids) -> None:
        self._ids.update(np.asarray(block_ids, dtype=np.uint64).tolist())

    def deepest(self, block_ids, n: int) -> int:
        """The largest k <= n with ``block_ids[k-1]`` in the set (0: none)."""
        ids = np.asarray(block_ids, dtype=np.uint64)[:max(0, int(n))].tolist()
        for k in range(len(ids), 0, -1):
            if ids[k - 1] in self._ids:
                return k
        return 0

    def to_array(self) -> np.ndarray:
        """The members, sorted (uint64)."""
        return np.array(sorted(self._ids), dtype=np.uint64)

    def __contains__(self, block_id) -> bool:
        return int(block_id) in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def nbytes(self) -> int:
        """What the compiled set would allocate for the same members."""
        cap = 1024
        while len(self._ids) * 2 > cap:
            cap *= 2
        return cap * 8
