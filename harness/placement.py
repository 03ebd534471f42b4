"""Sparse prefix caching on real traffic: overlap depths, frontiers, the solver bench.

**Entries and hits.**  The replay runs the exact radix oracle alone (match the
prompt, then insert the whole sequence, in the paper's order).  An *entry* is
one retained sequence: an inserted sequence that added at least one block,
i.e. a new root-to-node path of the oracle's tree (an insert that adds nothing
retains no new sequence).  A request *hits* the entry whose insert created the
deepest block of its longest match (the oracle's metadata names the request
that first inserted each block); the chained ids make that entry hold the whole
matched prefix.  A match of zero blocks is no hit.

**Depth relative to the entry's start.**  Every entry is a root-to-node path,
so it starts at block 0 and a hit's depth d is simply its match length in
blocks (tokens = d x block size).  The pooled histogram w(d) counts every hit
at its depth; a per-entry histogram counts only that entry's hits.  A fixed
set of positions means the same prefix lengths on every entry (a position past
an entry's end is simply not there), so a pooled placement is evaluated on the
pooled histogram exactly; per-entry policies (``end``, ``boundary``,
``uniform``, ``geometric`` and per-entry dp) are evaluated entry by entry.

**Boundaries.**  An entry's turn boundaries are where each turn on its path
ended its prompt and its output (``len(match_ids)`` and ``len(insert_ids)``
of that turn and of every earlier turn it continues); messages inside one
turn's input are not visible in the request stream.

**Splits.**  ``offline`` fits and evaluates on every hit; ``online`` fits on the
hits of the first half of the requests and evaluates on the hits of the
second half (the honest figure).  Per-entry dp falls back to the pooled fit
for an entry with no fitted hit.  Checkpoints per entry are means over every
entry of the replay.

**Budgets.**  A budget M caps checkpoints per entry for ``dp``, ``uniform``,
``geometric`` and ``boundary``; ``end`` keeps one; ``block:B`` ignores it
(B, 2B, ... over each entry: its count grows with the entry), so the
frontier runs ``block`` at several B and compares policies at their measured
checkpoints per entry.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench.errors import ConfigError
from prefixbench.metas import make_metas
from prefixbench.plugins import placement as P
from prefixbench.plugins.models import get_model

DEFAULT_BUDGETS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_POLICIES = ("dp", "block", "uniform", "geometric", "end", "boundary")


@dataclass
class Depths:
    """Every entry and every hit of one replay."""

    workload: str
    block_size: int
    requests: int
    entry_len: np.ndarray           # blocks of each entry (entry id = index)
    entry_request: np.ndarray       # the request whose insert created it
    hit_entry: np.ndarray           # per hit: the entry it hit
    hit_depth: np.ndarray           # per hit: depth in blocks from the entry's start
    hit_request: np.ndarray         # per hit: the hitting request's number
    bnd_entry: np.ndarray           # turn boundaries, flat, sorted by (entry, position)
    bnd_pos: np.ndarray

    def pooled(self, mask=None) -> np.ndarray:
        """w(0..D): hits per depth (all hits, or those selected by ``mask``)."""
        d = self.hit_depth if mask is None else self.hit_depth[mask]
        return np.bincount(d, minlength=int(self.entry_len.max(initial=0)) + 1).astype(np.float64)

    def split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(fit mask, evaluation mask) over the hits."""
        if split == "offline":
            m = np.ones(len(self.hit_depth), dtype=bool)
            return m, m
        if split == "online":
            first = self.hit_request < self.requests // 2
            return first, ~first
        raise ConfigError(f"option --split: {split!r} is not one of online, offline")

    def entry_histograms(self, mask=None) -> dict[int, np.ndarray]:
        """Per-entry histograms w_e(0..N_e) of the selected hits."""
        e = self.hit_entry if mask is None else self.hit_entry[mask]
        d = self.hit_depth if mask is None else self.hit_depth[mask]
        out = {}
        if not len(e):
            return out
        order = np.lexsort((d, e))
        e, d = e[order], d[order]
        starts = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
        ends = np.r_[starts[1:], len(e)]
        for s, t in zip(starts.tolist(), ends.tolist()):
            ent = int(e[s])
            out[ent] = np.bincount(d[s:t], minlength=int(self.entry_len[ent]) + 1).astype(
                np.float64)
        return out


def collect(workload, limit: int | None = None, progress=None) -> Depths:
    """Replay ``workload`` through the exact oracle and record entries and hits."""
    from prefixbench.harness.replay import make_oracle
    tree = make_oracle(16)
    entry_of: dict[int, int] = {}
    entry_len, entry_req = [], []
    hits_e, hits_d, hits_r = [], [], []
    bnd_e, bnd_p = [], []
    past: dict[int, list] = {}          # session -> [(length, last id, boundaries)]
    n = 0
    for r, req in enumerate(workload.requests()):
        if limit is not None and r >= limit:
            break
        n = r + 1
        mids, iids = req.match_ids, req.insert_ids
        m = tree.match(mids)
        L = m.n_blocks
        if L:
            inserter = int(m.metas[L - 1, 8:16].view(np.uint64)[0])
            hits_e.append(entry_of[inserter])
            hits_d.append(L)
            hits_r.append(r)
        before = tree.stats()["entries"]
        tree.insert(iids, make_metas(iids, r))
        # turn boundaries: the deepest earlier turn of the session this one continues
        sess = past.setdefault(req.session, [])
        base = ()
        best = 0
        for ln, last, bnds in sess:
            if best < ln <= len(iids) and int(iids[ln - 1]) == last:
                best, base = ln, bnds
        bnds = tuple(sorted(set(base) | {len(mids), len(iids)} - {0}))
        if len(iids):
            sess.append((len(iids), int(iids[-1]), bnds))
        if tree.stats()["entries"] > before:
            ent = len(entry_len)
            entry_of[r] = ent
            entry_len.append(len(iids))
            entry_req.append(r)
            bnd_e.extend([ent] * len(bnds))
            bnd_p.extend(bnds)
        if progress is not None:
            progress(1)
    i64 = lambda x: np.asarray(x, dtype=np.int64)   # noqa: E731
    return Depths(getattr(workload, "name", "workload"), int(workload.block_size), n,
                  i64(entry_len), i64(entry_req), i64(hits_e), i64(hits_d), i64(hits_r),
                  i64(bnd_e), i64(bnd_p))


# ----------------------------------------------------------------------------- evaluation
def _flat_resume(hit_e, hit_d, pos_e, pos_p, span: int) -> np.ndarray:
    """s(d) per hit for per-entry position sets given flat, sorted by (entry, position)."""
    if not len(pos_e) or not len(hit_e):
        return np.zeros(len(hit_e), dtype=np.float64)
    key = pos_e * span + pos_p
    i = np.searchsorted(key, hit_e * span + hit_d, side="right") - 1
    ok = (i >= 0) & (pos_e[np.maximum(i, 0)] == hit_e)
    return np.where(ok, pos_p[np.maximum(i, 0)], 0).astype(np.float64)


@dataclass
class Row:
    policy: str
    budget: int | None
    ckpt_per_entry: float
    recompute: float            # expected recompute, blocks (positions)
    kept: float                 # share of the dense hit kept
    size: int = 0               # positions up to the deepest evaluated hit (per entry: most kept)


@dataclass
class Frontier:
    depths: Depths
    split: str
    model: object
    rows: list[Row] = field(default_factory=list)
    hits_fit: int = 0
    hits_eval: int = 0
    no_reuse: float = 0.0
    dense_ckpt: float = 0.0


def _block_sizes(depths: Depths) -> list[int]:
    """B values for ``block``: powers of two from 1 up to the longest entry."""
    top = int(depths.entry_len.max(initial=1))
    out, b = [], 1
    while b <= top:
        out.append(b)
        b *= 2
    return out


def frontier(depths: Depths, budgets=DEFAULT_BUDGETS, policies=DEFAULT_POLICIES,
             split: str = "offline", model: str = "positions") -> Frontier:
    """Every policy at every budget, evaluated on ``split``."""
    preset = get_model(model)
    # a bare "block" sweeps B (powers of two); every other name parses as a policy
    pols = [P.Policy("block") if str(p).strip() == "block" else P.parse_policy(p, "--policies")
            for p in policies]
    for b in budgets:
        P.check_budget(b, 1 << 62, "--budgets")
    fit, ev = depths.split(split)
    fr = Frontier(depths, split, preset, hits_fit=int(fit.sum()), hits_eval=int(ev.sum()))
    if not fr.hits_eval:
        raise ConfigError(f"workload {depths.workload}: no request of the "
                          f"{'second half' if split == 'online' else 'replay'} hits a cached "
                          f"entry, so there is nothing to place checkpoints for")
    he, hd = depths.hit_entry[ev], depths.hit_depth[ev].astype(np.float64)
    hdi = depths.hit_depth[ev]
    n_e = depths.entry_len
    hn = n_e[he]
    dense_hit = hd.sum()
    fr.no_reuse = float(hd.mean())
    fr.dense_ckpt = float(n_e.mean())
    span = int(n_e.max(initial=0)) + 2
    w_fit = depths.pooled(fit)
    nz = np.flatnonzero(w_fit)
    span_fit = int(nz[-1]) if len(nz) else 0     # D: the deepest fitted hit

    def add(policy, budget, ckpt, s, size):
        rec = float((hd - s).sum() / len(hd))
        fr.rows.append(Row(policy, budget, float(ckpt), rec,
                           float(s.sum() / dense_hit) if dense_hit else 1.0, int(size)))

    span_eval = int(hdi.max())

    def in_span(pos):      # positions an evaluated hit can reach
        return int(np.searchsorted(pos, span_eval, side="right"))

    for pol in pols:
        k = pol.kind
        if k == "block":
            for b in ([pol.param] if pol.param else _block_sizes(depths)):
                pos = np.arange(b, span, b)
                add(f"block:{b}", None, (n_e // b).mean(), P.resume_points(hdi, pos),
                    in_span(pos))
            continue
        if k == "end":
            add("end", None, (n_e >= 1).mean(), np.where(hdi == hn, hd, 0.0), 1)
            continue
        for m in budgets:
            if pol.param is not None and k in ("uniform", "geometric"):
                if m != budgets[0]:
                    continue
                m = pol.param
            if k == "dp":
                if (w_fit > 0).any():
                    pos, _ = P.impl.solve(w_fit, min(m, len(w_fit) - 1))
                else:
                    pos = np.empty(0, dtype=np.int64)
                add("dp", m, np.searchsorted(pos, n_e, side="right").mean(),
                    P.resume_points(hdi, pos), len(pos))
                ent_e, ent_p, counts = _per_entry_dp(depths, fit, m, pos)
                add("dp/entry", m, counts.mean(), _flat_resume(he, hdi, ent_e, ent_p, span),
                    counts.max(initial=0))
            elif k in ("uniform", "geometric"):
                # fixed positions over the fitted histogram's span 1..D
                pos = P.policy_positions(P.Policy(k, pol.param), span_fit, m)
                add(pol.text if pol.param else k, m,
                    np.searchsorted(pos, n_e, side="right").mean(), P.resume_points(hdi, pos),
                    in_span(pos))
            elif k == "boundary":
                be, bp, counts = _kept_boundaries(depths, m)
                add("boundary", m, counts.mean(), _flat_resume(he, hdi, be, bp, span),
                    counts.max(initial=0))
    return fr


def _per_entry_dp(depths: Depths, fit, m: int, pooled_pos):
    """Per-entry dp placements: (flat entries, flat positions, count per entry)."""
    hists = depths.entry_histograms(fit)
    n_e = depths.entry_len
    counts = np.zeros(len(n_e), dtype=np.int64)
    pe, pp = [], []
    for ent, w in hists.items():
        nz = np.flatnonzero(w[1:]) + 1
        pos = nz if len(nz) <= m else P.impl.solve(w, min(m, len(w) - 1))[0]
        counts[ent] = len(pos)
        pe.append(np.full(len(pos), ent, dtype=np.int64))
        pp.append(np.asarray(pos, dtype=np.int64))
    if depths.requests and len(pooled_pos) and len(hists) < len(n_e) and fit is not None \
            and not fit.all():
        # online: entries with no fitted hit keep the pooled placement
        rest = np.setdiff1d(np.arange(len(n_e)), np.fromiter(hists, dtype=np.int64))
        k = np.searchsorted(pooled_pos, n_e[rest], side="right")
        counts[rest] = k
        pe.append(np.repeat(rest, k))
        pp.append(np.concatenate([pooled_pos[:c] for c in k.tolist()]) if len(rest)
                  else np.empty(0, np.int64))
    if not pe:
        return np.empty(0, np.int64), np.empty(0, np.int64), counts
    e, p = np.concatenate(pe), np.concatenate(pp)
    order = np.lexsort((p, e))
    return e[order], p[order], counts


def _kept_boundaries(depths: Depths, m: int):
    """Each entry's boundaries, at most ``m`` (evenly by rank, the last kept)."""
    e, p = depths.bnd_entry, depths.bnd_pos
    counts = np.bincount(e, minlength=len(depths.entry_len)) if len(e) else \
        np.zeros(len(depths.entry_len), dtype=np.int64)
    if not len(e):
        return e, p, counts
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    rank = np.arange(len(e)) - starts[e]
    c = counts[e]
    keep = c <= m
    big = ~keep
    if big.any() and m > 0:
        # kept ranks: ceil(k * c / m) - 1 for k = 1..m  <=>  rank r is kept when
        # floor((r + 1) * m / c) > floor(r * m / c)
        r, cc = rank[big], c[big]
        keep[big] = ((r + 1) * m) // cc > (r * m) // cc
    if m == 0:
        keep[:] = False
    kept_counts = np.bincount(e[keep], minlength=len(depths.entry_len))
    return e[keep], p[keep], kept_counts


# ----------------------------------------------------------------------------- tables
def comparison(fr: Frontier, budgets) -> list[tuple]:
    """Per budget: ``(M, dp, dp/entry, best fixed heuristic, best per-entry heuristic)``
    (:func:`prefixbench.reports.show.placement_comparison`, the table's own rule)."""
    from prefixbench.reports.show import placement_comparison
    return placement_comparison(fr.rows, budgets)


def equal_r(fr: Frontier) -> list[tuple]:
    """For each block:B row: the fewest dp checkpoints with R no higher than block's."""
    from prefixbench.reports.show import placement_equal_r
    return placement_equal_r(fr.rows)


def format_frontier(fr: Frontier, budgets, metadata: dict | None = None) -> str:
    """The frontier's table, rendered from its suite as ``show`` renders the file."""
    from prefixbench.harness.reporting import table_of
    return table_of(None, frontier_benchmarks(fr, metadata or _metadata(fr, budgets)))


def _metadata(fr: Frontier, budgets, config: dict | None = None) -> dict:
    from prefixbench.harness.pyperf_io import run_metadata
    return run_metadata("placement", None, fr.depths.workload,
                        dict(config or {}, budgets=list(budgets)))


def _tag(row: Row) -> str:
    return row.policy.replace(":", "-").replace("/", "-") + (
        f"-m{row.budget}" if row.budget is not None else "")


def frontier_benchmarks(fr: Frontier, metadata: dict) -> list:
    """pyperf benchmarks: the replay's figures, then one per policy, budget and measure;
    the rows' order and names in ``placement_rows``, zeros listed (schema)."""
    import json

    from prefixbench.harness.pyperf_io import figure_benchmarks
    d = fr.depths
    bs, sb = d.block_size, fr.model.state_bytes
    md = dict(metadata, split=fr.split, model=fr.model.name, hits_eval=fr.hits_eval,
              no_reuse_blocks=round(fr.no_reuse, 6),
              placement_rows=json.dumps([[r.policy, r.budget, _tag(r)] for r in fr.rows]))
    figs = {"placement-requests": d.requests, "placement-entries": len(d.entry_len),
            "placement-entry-blocks-mean": float(d.entry_len.mean()) if len(d.entry_len)
            else 0.0,
            "placement-block-size": bs, "placement-hits-fit": fr.hits_fit,
            "placement-hits-eval": fr.hits_eval, "placement-no-reuse-blocks": fr.no_reuse,
            "placement-dense-ckpt": fr.dense_ckpt, "placement-state-bytes": sb,
            "placement-kv-bytes-per-token": fr.model.kv_bytes_per_token}
    for r in fr.rows:
        tag = _tag(r)
        figs.update({f"placement-{tag}-ckpt-per-entry": r.ckpt_per_entry,
                     f"placement-{tag}-ckpt-bytes": r.ckpt_per_entry * sb,
                     f"placement-{tag}-recompute-blocks": r.recompute,
                     f"placement-{tag}-recompute-tokens": r.recompute * bs,
                     f"placement-{tag}-kept-ppm": round(r.kept * 1e6),
                     f"placement-{tag}-positions": r.size})
    return figure_benchmarks({k: float(v) for k, v in figs.items()}, md)


def solve_benchmarks(res, n: int, metadata: dict) -> list:
    """``placement solve``'s figures, the positions in ``placement_positions``."""
    import json

    from prefixbench.harness.pyperf_io import figure_benchmarks
    md = dict(metadata, command="placement-solve",
              placement_positions=json.dumps(res.positions.tolist()))
    return figure_benchmarks({
        "placement-solve-expected-recompute": float(res.expected_recompute),
        "placement-solve-no-reuse": float(res.no_reuse),
        "placement-solve-dense": float(res.dense), "placement-solve-n": float(n),
        "placement-solve-budget": float(res.budget),
        "placement-solve-positions": float(len(res.positions))}, md)


def bench_benchmarks(rows, metadata: dict) -> list:
    """``placement bench``'s CPU and wall seconds per (N, M), the order in
    ``placement_points``."""
    import json

    from prefixbench.harness.pyperf_io import figure_benchmarks
    md = dict(metadata, command="placement-bench",
              placement_points=json.dumps([[r["n"], r["m"]] for r in rows]))
    figs = {}
    for r in rows:
        figs[f"placement-bench-n{r['n']}-m{r['m']}-cpu"] = float(r["seconds"])
        figs[f"placement-bench-n{r['n']}-m{r['m']}-wall"] = float(r["wall_seconds"])
    return figure_benchmarks(figs, md)


# ----------------------------------------------------------------------------- bench
BENCH_N = (12_500, 25_000, 50_000, 100_000)
BENCH_M = (8, 64)


def bench(ns=BENCH_N, ms=BENCH_M, repeats: int = 3, seed: int = 0, progress=None) -> list[dict]:
    """Solver time for each (N, M) on a seeded random histogram: the best of
    ``repeats`` rounds, each round visiting every N once (so a busy moment of the
    machine falls on all sizes alike), as CPU seconds of the solving thread (time
    spent descheduled by other processes is not counted) with the wall time beside
    it, and the ratio to the previous N of the same M."""
    rng = np.random.default_rng(seed)
    weights = {n: rng.random(n + 1) for n in ns}
    out = []
    for m in ms:
        cpu = {n: float("inf") for n in ns}
        wall = dict(cpu)
        for _ in range(repeats):
            for n in ns:
                t0, c0 = time.perf_counter(), time.thread_time()
                P.impl.solve(weights[n], m)
                cpu[n] = min(cpu[n], time.thread_time() - c0)
                wall[n] = min(wall[n], time.perf_counter() - t0)
                if progress is not None:
                    progress(1)
        prev = None
        for n in ns:
            out.append({"n": n, "m": m, "seconds": cpu[n], "wall_seconds": wall[n],
                        "ratio": cpu[n] / prev if prev else None})
            prev = cpu[n]
    return out


def format_bench(rows, metadata: dict | None = None) -> str:
    """The bench's table, rendered from its suite as ``show`` renders the file."""
    from prefixbench.harness.pyperf_io import run_metadata
    from prefixbench.harness.reporting import table_of
    md = metadata or run_metadata("none", None, "none", {})
    return table_of(None, bench_benchmarks(rows, md))


# ----------------------------------------------------------------------------- command line
def _int_list(option: str, text: str) -> tuple[int, ...]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(f"option {option}: {part!r} is not an integer") from None
    if not out:
        raise ConfigError(f"option {option}: give at least one value")
    return tuple(out)


def read_depths(path: str) -> np.ndarray:
    """The ``weights`` of a depths file ``{"weights": [w_0, ..., w_N]}``, checked;
    every problem one line naming the file (and the field)."""
    import json
    import os
    if not os.path.isfile(path):
        raise ConfigError(f"--depths {path}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--depths {path}: not JSON (line {e.lineno}, column {e.colno}: "
                          f"{e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--depths {path}: cannot be read ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--depths {path}: must be a JSON object with the field weights")
    if "weights" not in doc:
        raise ConfigError(f"--depths {path}: field weights is missing")
    ws = doc["weights"]
    if not isinstance(ws, list) or any(isinstance(x, bool) or not isinstance(x, (int, float))
                                       for x in ws):
        raise ConfigError(f"--depths {path}: field weights must be a list of numbers "
                          f"[w_0, ..., w_N]")
    return P.check_weights(ws, f"--depths {path}: field weights")


def save_depths(depths: Depths, split: str, path: str) -> None:
    """The fitted hits as JSON: ``weights`` (pooled, a depths file for ``placement
    solve``) and ``entries`` (each hit entry's length and histogram as {depth: hits})."""
    import json
    fit, _ = depths.split(split)
    entries = [{"entry": e, "length": int(depths.entry_len[e]),
                "hits": {str(int(d)): int(w[d]) for d in np.flatnonzero(w)}}
               for e, w in sorted(depths.entry_histograms(fit).items())]
    doc = {"workload": depths.workload, "block_size": depths.block_size, "split": split,
           "weights": [int(x) for x in depths.pooled(fit)], "entries": entries}
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
    except OSError as e:
        raise ConfigError(f"option --save-depths: {path}: {e.strerror or e}") from None


def cli(args, quiet: bool) -> int:
    """``prefixbench placement solve|frontier|bench``: each prints its table from the
    suite it writes with ``-o`` (or builds in memory), so ``show`` prints it again."""
    import json
    import sys
    from prefixbench.harness.progress import progress
    from prefixbench.harness.pyperf_io import run_metadata
    from prefixbench.harness.reporting import check_output, table_of
    what = args.placement_command
    output = getattr(args, "output", None)
    if output and what in ("solve", "frontier", "bench"):
        check_output(output, f"placement {what}")
    if what == "solve":
        w = read_depths(args.depths)
        res = P.solve(w, args.budget, where=f"--depths {args.depths}: field weights",
                      option="--budget")
        for note in res.notes:
            print(f"prefixbench: note: {note}", file=sys.stderr)
        md = run_metadata("none", None, "none", {"depths": args.depths,
                                                  "budget": args.budget})
        benches = solve_benchmarks(res, len(w) - 1, md)
        if output:
            from prefixbench.harness.pyperf_io import write_suite
            write_suite(output, benches)
        if args.json:
            print(json.dumps(res.as_json()))
        else:
            print(table_of(output, benches))
        if output and not quiet:
            print(f"wrote {output}", file=sys.stderr if args.json else sys.stdout)
        return 0
    if what == "frontier":
        from prefixbench.harness.bench import make_workload
        from prefixbench.harness.build import parse_kv
        budgets = _int_list("--budgets", args.budgets)
        for b in budgets:
            P.check_budget(b, 1 << 62, "--budgets")
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        for p in policies:
            if p != "block":
                P.parse_policy(p, "--policies")
        get_model(args.model)
        if args.split not in ("online", "offline"):
            raise ConfigError(f"option --split: {args.split!r} is not one of online, offline")
        if args.limit is not None and args.limit < 1:
            raise ConfigError(f"option --limit: {args.limit} must be >= 1")
        wopts = parse_kv("--workload-option", args.workload_option)
        wl = make_workload(args.workload, wopts)
        total = len(wl) if args.limit is None else min(args.limit, len(wl))
        with progress(total, f"placement {args.workload}", quiet) as bar:
            dep = collect(wl, args.limit, progress=bar.update)
        fr = frontier(dep, budgets, policies, args.split, args.model)
        md = run_metadata("placement", None, args.workload,
                          {"workload_options": wopts, "budgets": list(budgets),
                           "policies": policies, "split": args.split, "model": args.model,
                           "limit": args.limit})
        benches = frontier_benchmarks(fr, md)
        if output:
            from prefixbench.harness.pyperf_io import write_suite
            write_suite(output, benches)
        print(table_of(output, benches))
        if args.save_depths:
            save_depths(dep, args.split, args.save_depths)
        if output and not quiet:
            print(f"wrote {output}")
        return 0
    if what == "bench":
        if args.repeats < 1:
            raise ConfigError(f"option --repeats: {args.repeats} must be >= 1")
        from prefixbench import twins
        if not twins.is_compiled(P.impl):
            raise ConfigError("placement bench times the compiled solver; with "
                              f"{twins.ENV_VAR}=1 it would run the O(N^2*M) reference "
                              "(hours at N = 100,000): unset it")
        with progress(len(BENCH_N) * len(BENCH_M) * args.repeats, "placement bench", quiet,
                      unit="solve") as bar:
            rows = bench(repeats=args.repeats, progress=bar.update)
        benches = bench_benchmarks(rows, run_metadata("none", None, "none",
                                                      {"repeats": args.repeats}))
        if output:
            from prefixbench.harness.pyperf_io import write_suite
            write_suite(output, benches)
        print(table_of(output, benches))
        if output and not quiet:
            print(f"wrote {output}")
        return 0
    raise ConfigError("placement: give a subcommand: solve, frontier or bench")
