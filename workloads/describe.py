"""Workload characteristics, including the SARP paper's sharing statistics.

:func:`describe` replays a workload once (in its replay order) against an
exact prefix trie kept as sets and dicts over chained block ids, and reports
sizes plus three statistics of how many *alternatives* follow a prefix:

**Spans with more than three alternatives** (paper section 3.2).  Cut each
session's final history (the ``insert_ids`` of its last request) into
consecutive spans of ``span = max(1, 256 // block_size)`` blocks from block
0; the last span may be shorter.  For a span ``[a, b)`` the alternatives are
the distinct ways an inserted sequence of the *whole* workload can continue
a prefix that reaches ``a``: among inserted sequences whose chained id at
``a - 1`` equals the history's (all sequences when ``a = 0``) and that have
a block at ``a``, the distinct chained ids at ``min(b, len) - 1``, where an
id at which another such sequence continues (a prefix of a longer one) does
not count separately.  Equivalently: the leaves of the trie of all inserted
sequences below the node at ``a - 1``, cut at depth ``b - 1``.  Reported: the
share of spans whose count exceeds 3.

**Candidates per routing entry, a proxy for Table 4 "before filtering".**
Block windows ``[64w, 64w + 64)`` with routing points at offsets 0, 16, 32,
48.  For each request whose exact match reaches ``m >= 1`` blocks (against
the sequences inserted *before* it), every window with ``64w < m`` is one
observation; its count is the number of distinct segments - window contents
of inserted sequences, cut the same leaf-wise way at the window end - that
share the query's prefix through the deepest routing point below ``m``.
It uses the base routing points only (no refinement, no pruning) and exact
segment sharing; it is not a measurement of SARP itself.

**Candidates ruled out by the next block** (paper section 4.2, Figure 3).
Observations: requests whose match ends in a routing interval ``[p, p+16)``
other than the first; keep the 10% with the largest count at ``p``; among
those whose match reaches ``p + 1``, the share of those candidates whose
block ``p + 1`` differs from the query's.  At 16-token blocks this is "stops
matching within 16 tokens of the routing point", the block-granular analogue
of the paper's "93% of CodeAct's references stop matching at the 14th token"
(token-level positions are not visible to a block index).
"""
from __future__ import annotations

import math

import numpy as np

from prefixbench.workloads.model import Workload

_ROOT = np.uint64(0)     # anchor of spans that start at block 0 (no chained id is 0)


def _matched(seen: set, ids: np.ndarray, lo: int = 0) -> int:
    """Longest prefix of ``ids`` in the (prefix-closed) trie, by binary search."""
    hi = len(ids)
    if hi == 0:
        return 0
    if int(ids[hi - 1]) in seen:
        return hi
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(ids[mid - 1]) in seen:
            lo = mid
        else:
            hi = mid - 1
    return lo


class _Trie:
    """The exact trie of inserted sequences, plus per-routing-node segment counts."""

    def __init__(self, span: int, window: int, points: int):
        self.span, self.window, self.interval = span, window, window // points
        offs = sorted({o for r in range(points) for o in (r * self.interval, r * self.interval + 1)
                       if o < window})
        self.tracked = np.array(offs, dtype=np.int64)
        self.seen: set[int] = set()
        self.leaves: set[int] = set()       # sequence ends nothing extends (yet)
        self.count: dict[int, int] = {}      # tracked node -> segments below it in its window
        self.ids: list[np.ndarray] = []      # every node once: id, position, span anchor
        self.pos: list[np.ndarray] = []
        self.anchor: list[np.ndarray] = []

    def insert(self, s: np.ndarray, k: int) -> None:
        """Add sequence ``s`` whose first ``k`` blocks are already present."""
        n = len(s)
        if k >= n:
            return
        pos = np.arange(k, n, dtype=np.int64)
        apos = (pos // self.span) * self.span - 1
        anchor = s[np.maximum(apos, 0)]
        anchor[apos < 0] = _ROOT
        self.ids.append(s[k:])
        self.pos.append(pos)
        self.anchor.append(anchor)
        new = s[k:].tolist()
        self.seen.update(new)

        z_internal = False
        if k > 0:
            z = int(s[k - 1])
            z_internal = z not in self.leaves
            self.leaves.discard(z)
        self.leaves.add(new[-1])

        count, w = self.count, self.window
        w0 = (k // w) * w
        for p in (w0 + self.tracked).tolist():
            if p >= n:
                break
            if p >= k:
                count[int(s[p])] = 1            # a new node: only this path below it
            elif z_internal:
                count[int(s[p])] += 1           # a new branch below an existing node
        rest = ((np.arange(k // w + 1, -(-n // w), dtype=np.int64) * w)[:, None]
                + self.tracked[None, :]).ravel()
        rest = rest[rest < n]
        if len(rest):
            count.update(dict.fromkeys(s[rest].tolist(), 1))

    def span_alternatives(self, histories: list[np.ndarray]) -> np.ndarray:
        """Alternatives of every span of every history (see the module docstring)."""
        if not self.ids or not histories:
            return np.zeros(0, dtype=np.int64)
        span = self.span
        ids = np.concatenate(self.ids)
        pos = np.concatenate(self.pos)
        anchors = np.concatenate(self.anchor)
        leaf = np.isin(ids, np.fromiter(self.leaves, dtype=np.uint64, count=len(self.leaves)))
        uniq, a_idx = np.unique(anchors, return_inverse=True)
        keys = a_idx.astype(np.int64) * span + pos % span
        leaf_keys = np.sort(keys[leaf])
        keys.sort()

        q_anchor, q_len = [], []
        for h in histories:
            n = len(h)
            if n == 0:
                continue
            starts = np.arange(0, n, span, dtype=np.int64)
            a = h[np.maximum(starts - 1, 0)]
            a[0] = _ROOT
            q_anchor.append(a)
            q_len.append(np.minimum(span, n - starts))
        qa = np.searchsorted(uniq, np.concatenate(q_anchor)).astype(np.int64) * span
        end = qa + np.concatenate(q_len) - 1
        at_end = np.searchsorted(keys, end, "right") - np.searchsorted(keys, end, "left")
        leaves_before = np.searchsorted(leaf_keys, end, "left") - np.searchsorted(leaf_keys, qa, "left")
        return at_end + leaves_before


def describe(workload: Workload, *, span_tokens: int = 256, window_blocks: int = 64,
             routing_points: int = 4, top_share: float = 0.10) -> dict:
    """Characteristics of ``workload`` as a flat dict (see the module docstring)."""
    bs = workload.block_size
    span = max(1, span_tokens // bs)
    trie = _Trie(span, window_blocks, routing_points)
    interval, window = trie.interval, window_blocks
    count = trie.count

    n_req = prompt = hit_blocks = inserted_blocks = 0
    final: dict[int, np.ndarray] = {}
    cand_sum = cand_obs = 0
    fig_c: list[int] = []
    fig_c1: list[int] = []
    for req in workload.requests():
        q, s = req.match_ids, req.insert_ids
        n_req += 1
        prompt += int(req.prompt_tokens)
        inserted_blocks += len(s)
        m = _matched(trie.seen, q)
        hit_blocks += m
        if m:
            starts = np.arange(0, m, window, dtype=np.int64)
            last = np.minimum(m, starts + window) - 1
            deepest = starts + interval * np.minimum(routing_points - 1, (last - starts) // interval)
            cand_sum += sum(count[x] for x in q[deepest].tolist())
            cand_obs += len(starts)
            p = interval * ((m - 1) // interval)
            if p > 0:
                fig_c.append(count[int(q[p])])
                fig_c1.append(count[int(q[p + 1])] if m - 1 > p else -1)
        lo = m if (m and m <= len(s) and s[m - 1] == q[m - 1]) else 0
        trie.insert(s, _matched(trie.seen, s, lo))
        final[req.session] = s

    alts = trie.span_alternatives(list(final.values()))
    out = {
        "workload": workload.name,
        "block_size": bs,
        "sessions": len(final),
        "turns": n_req,
        "requests": n_req,
        "prompt_tokens": prompt,
        "inserted_tokens": inserted_blocks * bs,
        "unique_blocks": len(trie.seen),
        "mean_prompt_tokens": prompt / n_req if n_req else 0.0,
        "exact_hit_rate": hit_blocks * bs / prompt if prompt else 0.0,
        "span_blocks": span,
        "spans": int(len(alts)),
        "span_share_gt3": float(np.mean(alts > 3)) if len(alts) else 0.0,
        "span_alternatives_mean": float(np.mean(alts)) if len(alts) else 0.0,
        "routing_observations": cand_obs,
        "candidates_per_routing_entry": cand_sum / cand_obs if cand_obs else 0.0,
    }
    out.update(_next_block_rule_out(np.array(fig_c, dtype=np.int64),
                                    np.array(fig_c1, dtype=np.int64), top_share))
    return out


def _next_block_rule_out(c: np.ndarray, c1: np.ndarray, top_share: float) -> dict:
    if len(c) == 0:
        return {"next_block_observations": 0, "next_block_rule_out": None}
    top = np.argsort(-c, kind="stable")[:math.ceil(top_share * len(c))]
    c, c1 = c[top], c1[top]
    reach = c1 >= 0
    total = int(c[reach].sum())
    return {"next_block_observations": int(len(top)),
            "next_block_rule_out": float((c[reach] - c1[reach]).sum() / total) if total else None}


_ROWS = (
    ("workload", "workload", "s"),
    ("block_size", "block size (tokens)", "d"),
    ("sessions", "sessions", "d"),
    ("turns", "turns", "d"),
    ("requests", "requests", "d"),
    ("prompt_tokens", "prompt tokens", "d"),
    ("inserted_tokens", "inserted tokens (full blocks)", "d"),
    ("unique_blocks", "unique blocks", "d"),
    ("mean_prompt_tokens", "mean prompt tokens", ".1f"),
    ("exact_hit_rate", "token hit rate, exact, infinite cache", "%"),
    ("span_blocks", "span length (blocks)", "d"),
    ("spans", "spans (256 tokens, at least 1 block)", "d"),
    ("span_share_gt3", "spans with > 3 alternatives", "%"),
    ("span_alternatives_mean", "mean alternatives per span", ".2f"),
    ("routing_observations", "routing observations", "d"),
    ("candidates_per_routing_entry", "candidates per routing entry (proxy)", ".2f"),
    ("next_block_observations", "Fig. 3 observations (top 10%)", "d"),
    ("next_block_rule_out", "candidates ruled out by the next block", "%"),
)


def format_table(info: dict) -> str:
    """A two-column text table of :func:`describe`'s result."""
    lines = []
    width = max(len(label) for _, label, _ in _ROWS)
    for key, label, fmt in _ROWS:
        if key not in info:
            continue
        v = info[key]
        if v is None:
            text = "n/a"
        elif fmt == "%":
            text = f"{100 * v:.2f}%"
        elif fmt == "d":
            text = f"{v:,}"
        elif fmt == "s":
            text = str(v)
        else:
            text = format(v, fmt)
        lines.append(f"{label:<{width}}  {text:>14}")
    return "\n".join(lines)
