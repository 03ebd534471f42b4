"""Pure-Python reference of :mod:`prefixbench.plugins._sarp`: candidate filters, the
match-potential search (ExistsMatch, paper Algorithm 1), the routing directory and
settling a window, with the same public names, answers, errors and byte accounting.

The rules are documented in :mod:`prefixbench.plugins.sarp`; the tests hold this
module equal to the compiled one, and the sarp strategy runs on it with
``directory=python`` or ``PREFIXBENCH_PURE=1``.
"""
from __future__ import annotations

import bisect
import contextlib
import threading

import numpy as np

from prefixbench.plugins import _segments_ref

__all__ = ["COUNTER_NAMES", "Counters", "LIVE", "NONE", "PENDING", "RoutingDirectory",
           "child_postings", "filters", "first_batch", "insert_plan",
           "match_run", "max_potential", "overlay_cut", "overlay_revive", "record_ids",
           "settle"]

#: states of an entry's pending child points (rematerialization, refinement)
NONE, PENDING, LIVE = 0, 1, 2
_MASK = (1 << 64) - 1


#: sarp's counters: those one match adds, those one insert adds, then the rest
COUNTER_NAMES = (
    "matches", "match_windows", "entry_uses", "cand_before", "cand_after", "retrieved",
    "match_reads", "extra_batches", "speculative_reads", "speculative_wasted",
    "match_round_trips", "match_hidden_routes",
    "inserts", "insert_reads", "inserts_after_match", "insert_reads_after_match",
    "insert_windows_reused", "insert_windows_known", "insert_segments_reused",
    "insert_records_reused", "insert_replans", "segments", "segments_copied",
    "segments_extended", "logical_blocks", "copied_blocks",
    "jobs", "jobs_expand", "jobs_refine", "backfill_reads", "backfill_postings",
    "backfill_waits")


class Counters:
    """sarp's counters (:data:`COUNTER_NAMES`), so that a match or an insert adds all of
    its own in one call.  Safe across threads (here under a lock; the compiled twin adds
    with the GIL held and no call inside)."""

    def __init__(self):
        self._v = dict.fromkeys(COUNTER_NAMES, 0)
        self._lock = threading.Lock()

    def count_match(self, counts) -> None:
        """Add one match: ``counts`` as ``match_run`` returns them (windows, entry uses,
        candidates before and after filtering, retrieved, extra batches, speculative
        reads, wasted speculative reads, round trips, windows routed past a hidden
        entry)."""
        windows, uses, before, after, retrieved, extra, spec, wasted, trips, hidden = counts
        with self._lock:
            v = self._v
            v["matches"] += 1
            v["match_windows"] += windows
            v["entry_uses"] += uses
            v["cand_before"] += before
            v["cand_after"] += after
            v["retrieved"] += retrieved
            v["match_reads"] += retrieved + wasted
            v["extra_batches"] += extra
            v["speculative_reads"] += spec
            v["speculative_wasted"] += wasted
            v["match_round_trips"] += trips
            v["match_hidden_routes"] += hidden

    def count_insert(self, plan_counts, records: int, after_match: bool,
                     windows_reused: int, windows_known: int, replanned: bool) -> None:
        """Add one insert: ``plan_counts`` as ``insert_plan`` returns them (reads, new
        blocks, copied blocks, records extended, records copied, segments and records
        reused from the match), ``records`` the records it wrote."""
        reads, new_blocks, copied, ext, cp, reused_seg, reused_records = plan_counts
        with self._lock:
            v = self._v
            v["inserts"] += 1
            v["insert_reads"] += reads
            if after_match:
                v["inserts_after_match"] += 1
                v["insert_reads_after_match"] += reads
            v["insert_windows_reused"] += windows_reused
            v["insert_windows_known"] += windows_known
            v["insert_segments_reused"] += reused_seg
            v["insert_records_reused"] += reused_records
            v["insert_replans"] += bool(replanned)
            v["segments"] += records - ext
            v["segments_copied"] += cp
            v["segments_extended"] += ext
            v["logical_blocks"] += new_blocks
            v["copied_blocks"] += copied

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._v[name] += n          # (KeyError: not a counter)

    def as_dict(self) -> dict:
        with self._lock:
            return dict(self._v)

    def restore(self, values) -> None:
        """Set the counters ``values`` names (a snapshot's); other names are ignored."""
        with self._lock:
            for k, n in values.items():
                if k in self._v:
                    self._v[k] = int(n)


def _fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK
    x ^= x >> 33
    return x


def filters(ids, n: int, offsets, nfields: int, stride: int, bits: int) -> np.ndarray:
    """The 64-bit filter of the region starting at each of ``offsets`` of ``ids[:n]``."""
    ids = [int(x) for x in np.asarray(ids, dtype=np.uint64)]
    n = min(n, len(ids))
    fmask = (1 << bits) - 1
    out = []
    for off in np.asarray(offsets, dtype=np.int64).tolist():
        f = 0
        for i in range(nfields):
            rs = off + i * stride
            f = (f << bits) & _MASK
            if rs < n:
                f |= _fmix64(ids[min(rs + stride, n) - 1]) & fmask
        out.append((f << (64 - nfields * bits)) & _MASK)
    return np.array(out, dtype=np.uint64)


def _prefix_mask(k: int, bits: int) -> int:
    if k <= 0:
        return 0
    if k * bits >= 64:
        return _MASK
    return _MASK ^ (_MASK >> (k * bits))


def _range(flts: list, qf: int, k: int, bits: int) -> tuple[int, int]:
    m = _prefix_mask(k, bits)
    fmin = qf & m
    return bisect.bisect_left(flts, fmin), bisect.bisect_right(flts, fmin | (_MASK ^ m))


def max_potential(filters_sorted, qf: int, nfields: int, stride: int, bits: int):
    """``(L, lo, hi)``: the largest match potential of ``qf`` over the sorted filters
    (ExistsMatch, Algorithm 1, literally) and the index range of the filters reaching it."""
    flts = [int(x) for x in filters_sorted]
    if not flts:
        return 0, 0, 0

    def exists(L):
        lo, hi = _range(flts, qf, L // stride, bits)
        return lo < hi

    lo, hi = 0, nfields * stride
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if exists(mid):
            lo = mid
        else:
            hi = mid - 1
    k = lo // stride
    L = nfields * stride if k >= nfields else (k + 1) * stride - 1
    a, b = _range(flts, qf, k, bits)
    return L, a, b


def first_batch(route, budget: int, filtering: bool, sequential: bool):
    """The candidates a window reads first (a slice of the route's): every one without
    filtering, else the first of the top-potential group (sequential) or the group
    capped by the budget (unlimited: 2); none when even the best potential is 0."""
    j, cands, pots, _nb, na, _hidden = route
    if j < 0 or not len(cands):
        return cands[:0]
    if not filtering:
        return cands
    if pots[0] <= 0:
        return cands[:0]
    if sequential:
        return cands[:1]
    return cands[:max(1, min(na, budget if budget else 2, len(cands)))]


def _run(pots, i: int) -> int:
    """Candidates from ``i`` on that share ``pots[i]`` (potentials descend)."""
    return int(np.searchsorted(-pots[i:], -pots[i], side="right"))


def settle(route, qw, ws: int, budget: int, filtering: bool, sequential: bool, S: int,
           meta_size: int, known, first, read, count_corrupt, verify_phase):
    """Best verified record for the query window ``qw`` (starting at block ``ws``) from
    its ``route`` (``RoutingDirectory.route``), reading candidates in potential order
    until none left can beat what was verified or the budget is spent.

    ``known``: ``{segment id: raw}`` already in hand for the window (verified, never
    read again, and dropped from the candidates); ``first``: the raw records of
    :func:`first_batch`, already fetched; ``read(ids)``: raw records of a batch (one
    store call); ``count_corrupt(ids)``: reports records that failed their checks;
    ``verify_phase``: a context timing verification, or None.  Returns ``(v, best,
    info, seen)``: the shared prefix length, ``(raw, segment id)`` of the first record
    sharing it (None when none verified a block), ``(n_before, n_after, retrieved,
    batches)`` (None without a visible entry) and every intact record in hand
    (``{segment id: raw or None}``)."""
    timed = verify_phase if verify_phase is not None else contextlib.nullcontext()
    if not filtering:
        budget = 0
    j, cands, pots, nb, na, hidden = route
    qlen = len(qw)
    seen = {}
    best_v, best_raw, best_id = 0, None, 0
    filtered = False
    if known:
        kid = np.fromiter(known.keys(), np.uint64, len(known))
        kraw = list(known.values())
        with timed:
            k, v, corrupt = _segments_ref.verify_raws(kraw, kid, qw, ws, S, meta_size)
        seen = dict(zip(kid.tolist(), kraw))
        for t in corrupt:
            del seen[int(kid[t])]
        if v > 0:
            best_v, best_raw, best_id = v, kraw[k], int(kid[k])
        if len(cands):
            keep = ~np.isin(cands, kid)
            if not keep.all():
                cands, pots, filtered = cands[keep], pots[keep], True
    if j < 0:
        return best_v, (best_raw, best_id) if best_raw is not None else None, None, seen
    ncand = len(cands)
    got = batches = i = 0
    if known and (best_v >= qlen or (filtering and ncand and pots[0] <= best_v)):
        batch = cands[:0]       # what is in hand already beats every candidate left
    else:
        # the first group: after dropping known records, the run sharing the top potential
        na = _run(pots, 0) if filtered and ncand else na
        batch = first_batch((j, cands, pots, nb, na, hidden), budget, filtering, sequential)
    while len(batch):
        raws = first if first is not None else read(batch)
        first = None
        batches += 1
        got += len(batch)
        i += len(batch)
        with timed:
            k, v, corrupt = _segments_ref.verify_raws(list(raws), batch, qw, ws, S, meta_size)
        if corrupt:
            count_corrupt(batch[corrupt])
            bad = set(corrupt)
            seen.update((sid, raws[t]) for t, sid in enumerate(batch.tolist()) if t not in bad)
        else:
            seen.update(zip(batch.tolist(), raws))
        if v > best_v:
            best_v, best_raw, best_id = v, raws[k], int(batch[k])
        if best_v >= qlen or i >= ncand or (budget and got >= budget):
            break
        if pots[i] <= best_v:
            break       # nobody left can beat what was verified
        # next group: candidates sharing the next potential (at most the budget left)
        if sequential:
            m = 1
        else:
            run = _run(pots, i)
            m = min(run, budget - got) if budget else min(run, 2 * len(batch))
        batch = cands[i:i + m]
    best = (best_raw, best_id) if best_raw is not None else None
    return best_v, best, (nb, na, got, batches), seen


def match_run(d, q, S: int, budget: int, k: int, filtering: bool, sequential: bool,
              meta_size: int, probe_desc, nfields: int, stride: int, bits: int, read,
              count_corrupt, routing_phase, verify_phase):
    """A whole match of the query ``q`` (uint64 ids) window by window from the first:
    route the window (``d.route``), :func:`settle` it, take the first ``v`` metadata
    rows of the record it verified, and go on while whole windows verify.

    With ``k`` > 1, while more than one window is left, up to ``k`` windows are routed
    at once (their keys and filters come from ``q`` alone; routing stops after a
    window without a visible entry) and the first group of every one of them
    (:func:`first_batch`) is fetched in one ``read``, then settled in order; the
    groups of windows after the one that ended the match are wasted speculative
    reads.  ``routing_phase`` / ``verify_phase``: contexts timing routing and
    verification, or None; each is one phase for a plan's windows (verification
    takes in the metadata copy and the bookkeeping between windows), since a
    clock switch per window would cost about 5% of a long match.  Returns ``(pos,
    metas, last_id, full_id, raws_by_window, counts)``: the matched blocks, their
    metadata (``pos`` rows), the segment the last verified block came from, the
    last segment verified whole,
    ``{window start: records in hand}`` of a window that verified short, and
    ``(windows, entry uses, candidates before and after filtering, retrieved, extra
    batches, speculative reads, wasted ones, round trips, windows whose route passed
    a hidden entry)``."""
    timed = routing_phase if routing_phase is not None else contextlib.nullcontext()
    vtimed = verify_phase if verify_phase is not None else contextlib.nullcontext()
    q = np.ascontiguousarray(q, dtype=np.uint64)
    if not 1 <= k <= 64:
        raise ValueError("match_run: k must be in 1..64")
    n = len(q)
    limit = budget if filtering else 0

    def route_at(w):
        return d.route(q[w:w + S], probe_desc, nfields, stride, bits, filtering, limit)

    pos = windows = uses = before = after = retrieved = extra = spec = wasted = trips = 0
    hidden = 0
    last_id = full_id = 0
    parts, raws_by_window = [], {}
    done = False
    while pos < n and not done:
        batched = k > 1 and n - pos > S
        routes = []
        with timed:     # one routing phase for the plan's windows, not one per window
            for w in range(pos, min(n, pos + k * S) if batched else pos + 1, S):
                routes.append(route_at(w))
                if routes[-1][0] < 0:
                    break
        if batched:
            firsts = [first_batch(r, budget, filtering, sequential) for r in routes]
            sizes = [len(f) for f in firsts]
            allraws = []
            if sum(sizes):
                allraws = read(np.concatenate(firsts))
                if len(allraws) != sum(sizes):
                    raise ValueError("match_run: one record per candidate read")
                trips += 1
            spec += sum(sizes[1:])
            plan, lo = [], 0
            for r, m in zip(routes, sizes):
                plan.append((r, allraws[lo:lo + m] if m else None))
                lo += m
        else:
            plan, sizes = [(routes[0], None)], [0]
        with vtimed:
            for t, (route, first) in enumerate(plan):
                windows += 1
                hidden += bool(route[5])
                v, best, info, seen = settle(route, q[pos:pos + S], pos, budget, filtering,
                                             sequential, S, meta_size, None, first, read,
                                             count_corrupt, None)
                if seen and v < S:
                    raws_by_window[pos] = seen
                if info is not None:
                    uses += 1
                    before += info[0]
                    after += info[1]
                    retrieved += info[2]
                    extra += info[3] - 1
                    trips += info[3] - (first is not None)
                if v:
                    parts.append(_segments_ref.metas_prefix(bytes(best[0]), v, meta_size))
                    last_id = best[1]
                    if v == S:
                        full_id = last_id
                    pos += v
                if v < S or pos >= n:
                    wasted += sum(sizes[t + 1:])
                    done = True
                    break
    metas = np.concatenate(parts) if parts else np.empty((0, meta_size), np.uint8)
    return (pos, metas.reshape(pos, meta_size), last_id, full_id, raws_by_window,
            (windows, uses, before, after, retrieved, extra, spec, wasted, trips, hidden))


def insert_plan(d, x, xm, ws: int, prev: int, S: int, known_by_window, best_hint,
                reclaimed: bool, meta_size: int, probe_desc, nfields: int, stride: int,
                bits: int, filtering: bool, sequential: bool, read, count_corrupt,
                routing_phase, verify_phase):
    """What inserting ``x`` (metadata ``xm``) from window ``ws`` writes, from reads only.

    Window by window with an unlimited budget (route, then :func:`settle`), so the
    segment a window extends or copies from is the one sharing the longest prefix
    (copying from one that shares less would store indexed blocks again with new
    metadata): a window stored whole is skipped; one that shares ``v`` blocks with a stored
    segment gets it extended in place (when it shared the whole segment) or a copy
    of its first ``v`` blocks followed by ``x``'s (a fresh segment); one sharing
    nothing gets a fresh segment.  Past the first window sharing nothing every later
    window is fresh too, unless ``reclaimed`` (a reclamation may have cut an earlier
    window of a prefix whose later ones it kept: every window is routed).

    ``known_by_window``: ``{window start: {segment id: raw}}`` records the caller's
    match read (verified from memory, never read again), or None; ``best_hint``:
    ``(window start, segment id)`` that match verified, to count reuse; ``prev``: id
    of the segment before window ``ws`` on ``x`` (0: unknown).  Returns ``(writes,
    after, extended, log, counts)``: ``(segment id, start, ids, metas)`` per record
    to write in order (id 0: fresh, numbered when published), the predecessor of
    each fresh one (an id, 0 unknown, or ``-(j + 1)`` for this plan's j-th fresh
    record), the ids extended in place, ``(start, first block id)`` per record, and
    ``(reads, new blocks, copied blocks, extended, copied, segments reused, records
    reused)``."""
    timed = routing_phase if routing_phase is not None else contextlib.nullcontext()
    vtimed = verify_phase if verify_phase is not None else contextlib.nullcontext()
    x = np.ascontiguousarray(x, dtype=np.uint64)
    n = len(x)
    writes, after, extended, log = [], [], [], []
    reads = new_blocks = copied = ext = cp = reused_seg = reused_records = 0
    fresh = 0

    def add_fresh(w, ids, metas):
        nonlocal fresh
        writes.append((0, w, ids, metas))
        after.append(prev)
        log.append((w, int(ids[0])))
        fresh += 1
        return -fresh

    while ws < n:
        xw = x[ws:ws + S]
        known = known_by_window.get(ws) if known_by_window else None
        with timed:
            route = d.route(xw, probe_desc, nfields, stride, bits, filtering, 0)
        v, best, info, _seen = settle(route, xw, ws, 0, filtering, sequential, S, meta_size,
                                      known or None, None, read, count_corrupt, verify_phase)
        if info is not None:
            reads += info[2]
        if known:
            reused_records += len(known)
            if best_hint is not None and best_hint[0] == ws and best is not None \
                    and best[1] == best_hint[1]:
                reused_seg += 1
        if best is not None and v == S:
            ws += S                       # the whole window is stored already
            prev = best[1]
            continue
        if best is not None:
            if v == len(xw):              # (a last, partial window stored whole)
                prev = best[1]
            else:
                with vtimed:
                    sid, start, n_old, ids, metas = _segments_ref.splice_record(
                        bytes(best[0]), xw, xm[ws:ws + S], v, S, meta_size)
                if v == n_old:            # it shared the whole segment: extend in place
                    writes.append((sid, start, ids, metas))
                    log.append((start, int(ids[0])))
                    extended.append(sid)
                    ext += 1
                    new_blocks += len(ids) - n_old
                    prev = sid
                else:
                    prev = add_fresh(start, ids, metas)
                    cp += 1
                    copied += v
                    new_blocks += len(ids)
            ws += S
        elif reclaimed:
            prev = add_fresh(ws, xw, xm[ws:ws + S])
            new_blocks += len(xw)
            ws += S
        if reclaimed:
            continue
        while ws < n:                     # every later window is new: nobody shares it
            xw = x[ws:ws + S]
            prev = add_fresh(ws, xw, xm[ws:ws + S])
            new_blocks += len(xw)
            ws += S
    return writes, after, extended, log, (reads, new_blocks, copied, ext, cp, reused_seg,
                                          reused_records)


_MAX_SEG = 0xFFFFFFFF
_ENTRY_BYTES, _POSTING_BYTES, _SLOT_BYTES = 32, 12, 4     # the compiled layout's sizes


def _sound_ids(raw, key: int, S: int, meta_size: int):
    """The block ids of the record ``raw`` read under ``key``, or None unless it is
    sound (decodes, holds its own key, starts aligned to ``S``, at most ``S`` blocks)."""
    got = _segments_ref.decode(raw, meta_size)
    if isinstance(got, str) or got[0] != key or got[1] % S or len(got[2]) > S:
        return None
    return np.asarray(got[2], np.uint64)


def child_postings(raws, seg_ids, key: int, off: int, child: int, nfields: int, stride: int,
                   bits: int, S: int, meta_size: int):
    seg_ids = np.asarray(seg_ids, np.uint64).tolist()
    if len(seg_ids) != len(raws):
        raise ValueError("child_postings: one segment id per record")
    if off < 0 or child < 0 or S < 1:
        raise ValueError("child_postings: negative block offset or empty window")
    keys, flts, sids, unsound = [], [], [], []
    for i, (raw, sid) in enumerate(zip(raws, seg_ids)):
        if raw is None:
            continue
        ids = _sound_ids(raw, sid, S, meta_size)
        if ids is None:
            unsound.append(i)
            continue
        n = len(ids)
        if n <= child or n <= off or int(ids[off]) != key:
            continue
        keys.append(int(ids[child]))
        flts.append(int(filters(ids, n, [child], nfields, stride, bits)[0]))
        sids.append(sid)
    return (np.array(keys, np.uint64), np.array(flts, np.uint64), np.array(sids, np.uint64),
            unsound)


def record_ids(raws, keys, S: int, meta_size: int):
    keys = np.asarray(keys, np.uint64).tolist()
    if len(keys) != len(raws):
        raise ValueError("record_ids: one key per record")
    counts = np.zeros(len(raws), dtype=np.int64)
    parts = []
    for i, (raw, key) in enumerate(zip(raws, keys)):
        if raw is None:
            continue
        ids = _sound_ids(raw, key, S, meta_size)
        if ids is None:
            continue
        counts[i] = len(ids)
        parts.append(ids)
    return counts, (np.concatenate(parts) if parts else np.empty(0, np.uint64))


def overlay_cut(stored, n: int, live_found, live_metas, live_locs, dead_found,
                defaults_dead: bool):
    """A match of ``n`` blocks corrected by the tombstone and location tables:
    ``(cut, metas, locations)`` (see the compiled twin)."""
    stored = np.asarray(stored, dtype=np.uint8)
    if len(stored) < n:
        raise ValueError("overlay_cut: fewer stored records than blocks")
    in_live = (np.zeros(n, np.bool_) if live_found is None
               else np.asarray(live_found, dtype=np.bool_))
    if len(in_live) < n or (live_found is not None and (len(live_metas) < n
                                                        or len(live_locs) < n)):
        raise ValueError("overlay_cut: location lookup does not cover the blocks")
    in_live = in_live[:n]
    if dead_found is not None and len(dead_found) < n:
        raise ValueError("overlay_cut: tombstone lookup does not cover the blocks")
    if defaults_dead:
        gone = ~in_live
    elif dead_found is not None:
        gone = np.asarray(dead_found, dtype=np.bool_)[:n] & ~in_live
    else:
        gone = np.zeros(n, np.bool_)
    cut = int(np.argmax(gone)) if gone.any() else n
    out = np.array(stored[:cut], dtype=np.uint8, copy=True)
    locs = np.ones(cut, dtype=np.uint64)
    if live_found is not None:
        sel = in_live[:cut]
        out[sel] = np.asarray(live_metas, dtype=np.uint8)[:cut][sel]
        locs[sel] = np.asarray(live_locs, dtype=np.uint64)[:cut][sel]
    return cut, out, locs


def overlay_revive(live_found, dead_found, defaults_dead: bool):
    """``(listed, revived)`` positions for an insert on worker 0 (see the compiled
    twin); None where there is none."""
    if live_found is None and dead_found is None:
        return None, None
    if live_found is not None and dead_found is not None and len(live_found) != len(dead_found):
        raise ValueError("overlay_revive: lookups of different lengths")
    n = len(live_found if live_found is not None else dead_found)
    inl = np.zeros(n, np.bool_) if live_found is None else np.asarray(live_found, np.bool_)
    ind = np.zeros(n, np.bool_) if dead_found is None else np.asarray(dead_found, np.bool_)
    listed = np.flatnonzero(inl | ind | bool(defaults_dead))
    revived = np.flatnonzero(ind & ~inl)
    return (listed if len(listed) else None), (revived if len(revived) else None)


class _Entry:
    __slots__ = ("off", "visible", "next_state", "refine_state", "items", "cap")

    def __init__(self, off, visible):
        self.off, self.visible = off, visible
        self.next_state = self.refine_state = NONE
        self.items: list[tuple[int, int]] = []    # sorted by (filter, -seg)
        self.cap = 0                              # the compiled posting array's capacity


class RoutingDirectory:
    """The compiled directory's pure-Python reference (dicts and lists, one lock).

    The same API, answers, errors and byte accounting (``nbytes``/``used_bytes``
    follow the compiled table's and posting arrays' growth rules); :meth:`dump`
    and :meth:`load` use the same arrays, so a snapshot of either loads in the other.
    """

    def __init__(self):
        self._d: dict[int, _Entry] = {}
        self._lock = threading.Lock()
        self._cap_ent, self._n_slots = 64, 128
        self._n_post = self._post_bytes = 0

    # ---- accounting of the compiled layout (under the lock) -----------------
    def _create(self, key: int, off: int, visible: bool) -> _Entry:
        if (len(self._d) + 1) * 2 > self._n_slots:
            self._n_slots *= 2
        if len(self._d) == self._cap_ent:
            self._cap_ent *= 2
        e = self._d[key] = _Entry(int(off) & 0xFFFFFFFF, bool(visible))
        return e

    def _add(self, e: _Entry, filt: int, seg: int, replace: bool) -> None:
        for i, (f, s) in enumerate(e.items):
            if -s == seg:
                if not replace or f == filt:
                    return
                del e.items[i]
                self._n_post -= 1
                break
        if len(e.items) == e.cap:
            cap = 1 if e.cap == 0 else (e.cap * 2 if e.cap < 64 else e.cap + e.cap // 2)
            self._post_bytes += (cap - e.cap) * _POSTING_BYTES
            e.cap = cap
        bisect.insort(e.items, (filt, -seg))
        self._n_post += 1

    # ---- mutation -------------------------------------------------------------
    def upsert(self, key, off, filt, seg, visible_if_new):
        key, filt, seg = int(key), int(filt), int(seg)
        if seg > _MAX_SEG:
            raise OverflowError(f"segment id {seg} does not fit the 32-bit posting reference")
        with self._lock:
            e = self._d.get(key)
            if e is None:
                e = self._create(key, off, visible_if_new)
            # items hold (filter, -seg): ascending order is filter up, segment id down
            self._add(e, filt, seg, True)
            return len(e.items), e.visible, e.next_state, e.refine_state

    def register(self, ids, seg, base, mids, last, nfields, stride, bits, pruning,
                 refinement, pruning_threshold, tau):
        """Register segment ``seg`` (block ids ``ids``) at its routing points.

        ``base``: the window's base offsets; ``mids``: one midpoint per base (empty
        without refinement); ``last``: the last-block point (-1: none).  Base point
        ``i + 1`` follows only while base ``i``'s entry is expanded (``pruning``),
        a midpoint only while its base is refined, the last block only while the
        final midpoint is; a new entry under a PENDING parent stays hidden and is
        listed in ``pending`` as ``(parent key, which, key)`` (0 pruning, 1
        refinement) for the back-fill to reveal.  A visible entry that outgrew its
        threshold is marked PENDING at once (so the next point sees it) and listed
        in ``jobs`` as ``(key, offset, which)``, in order.  Returns ``(jobs, pending)``.
        """
        ids = np.ascontiguousarray(ids, np.uint64)
        n, seg = len(ids), int(seg)
        base, mids, last = [int(b) for b in base], [int(m) for m in mids], int(last)
        if mids and len(mids) != len(base):
            raise ValueError("register: one midpoint per base point")
        if seg > _MAX_SEG:
            raise OverflowError(f"segment id {seg} does not fit the 32-bit posting reference")
        points = sorted({o for o in (*base, *mids, last) if 0 <= o < n})
        fl = dict(zip(points, filters(ids, n, np.array(points, np.int64), nfields, stride,
                                      bits).tolist()))
        key = {o: int(ids[o]) for o in points}
        jobs, pending = [], []

        def trigger(k, off, size, ns, rs, expands, refines):
            if pruning and ns == NONE and size > pruning_threshold and expands:
                self.set_state(k, next_state=PENDING)
                jobs.append((k, off, 0))
            if refinement and rs == NONE and size > tau and refines:
                self.set_state(k, refine_state=PENDING)
                jobs.append((k, off, 1))

        reached = 0             # base points reached: a prefix of base
        state = LIVE
        for i, b in enumerate(base):
            if b >= n:
                break
            if i > 0 and pruning:
                state = self.info(key[base[i - 1]])[3]
                if state == NONE:
                    break
            size, vis, ns, rs = self.upsert(key[b], b, fl[b], seg, state == LIVE)
            if state == PENDING and not vis:
                pending.append((key[base[i - 1]], 0, key[b]))
            reached += 1
            if vis:
                trigger(key[b], b, size, ns, rs, i < len(base) - 1, bool(mids))
        if not refinement or not mids:
            return jobs, pending
        for i in range(reached):
            m = mids[i]
            if m >= n:
                continue
            parent = key[base[i]]
            state = self.info(parent)[4]
            if state == NONE:
                continue
            size, vis, ns, rs = self.upsert(key[m], m, fl[m], seg, state == LIVE)
            if state == PENDING and not vis:
                pending.append((parent, 1, key[m]))
            final = i == len(mids) - 1
            if vis:
                trigger(key[m], m, size, ns, rs, False, final and last >= 0)
            if final and 0 <= last < n:
                state = self.info(key[m])[4]
                if state == NONE:
                    continue
                _size, vis, _ns, _rs = self.upsert(key[last], last, fl[last], seg,
                                                   state == LIVE)
                if state == PENDING and not vis:
                    pending.append((key[m], 1, key[last]))
        return jobs, pending

    def register_writes(self, writes, sids, base, mids, last, nfields, stride, bits,
                        pruning, refinement, pruning_threshold, tau):
        """:meth:`register` of a plan's records in order (``writes[i][2]`` the block ids
        of segment ``sids[i]``): all their jobs, then all their pending entries, each
        in the order the records were registered."""
        if mids is not None and len(mids) and len(mids) != len(base):
            raise ValueError("register: one midpoint per base point")
        if len(sids) != len(writes):
            raise ValueError("register_writes: one segment id per record")
        for seg in sids:
            if int(seg) > _MAX_SEG:
                raise OverflowError(f"segment id {seg} does not fit the 32-bit posting "
                                    f"reference")
        jobs, pending = [], []
        for w, seg in zip(writes, sids):
            j, p = self.register(w[2], seg, base, mids, last, nfields, stride, bits, pruning,
                                 refinement, pruning_threshold, tau)
            jobs += j
            pending += p
        return jobs, pending

    def set_state(self, key, next_state=-1, refine_state=-1):
        with self._lock:
            e = self._d.get(int(key))
            if e is not None:
                if next_state >= 0:
                    e.next_state = next_state
                if refine_state >= 0:
                    e.refine_state = refine_state
        if e is None:
            raise KeyError(key)

    def publish(self, keys, offs, filts, segs, flip_keys, parent, which):
        keys, offs = np.asarray(keys, np.uint64).tolist(), np.asarray(offs).tolist()
        filts, segs = np.asarray(filts, np.uint64).tolist(), np.asarray(segs, np.uint64).tolist()
        if not len(offs) == len(filts) == len(segs) == len(keys):
            raise ValueError("publish: keys, offs, filts and segs differ in length")
        for s in segs:
            if s > _MAX_SEG:
                raise OverflowError(f"segment id {s} does not fit the 32-bit posting reference")
        with self._lock:
            for k, o, f, s in zip(keys, offs, filts, segs):
                e = self._d.get(k)
                if e is None:
                    e = self._create(k, o, True)
                e.visible = True
                self._add(e, f, s, False)
            for k in np.asarray(flip_keys, np.uint64).tolist():
                if k in self._d:
                    self._d[k].visible = True
            p = self._d.get(int(parent))
            if p is not None:
                if which == 0:
                    p.next_state = LIVE
                else:
                    p.refine_state = LIVE

    def discard(self, keys, segs):
        keys, segs = np.asarray(keys, np.uint64).tolist(), np.asarray(segs, np.uint64).tolist()
        if len(keys) != len(segs):
            raise ValueError("discard: keys and segs differ in length")
        gone = dropped = 0
        with self._lock:
            for k, s in zip(keys, segs):
                e = self._d.get(k)
                if e is None:
                    continue
                for i, (_f, t) in enumerate(e.items):
                    if -t == s:
                        del e.items[i]
                        self._n_post -= 1
                        gone += 1
                        break
                if not e.items:
                    self._post_bytes -= e.cap * _POSTING_BYTES
                    del self._d[k]
                    dropped += 1
        return gone, dropped

    # ---- queries ----------------------------------------------------------------
    def info(self, key):
        with self._lock:
            e = self._d.get(int(key))
            if e is None:
                return None
            return e.off, len(e.items), e.visible, e.next_state, e.refine_state

    def postings(self, key):
        with self._lock:
            e = self._d.get(int(key))
            if e is None:
                raise KeyError(key)
            return (np.array([f for f, _ in e.items], dtype=np.uint64),
                    np.array([-s for _, s in e.items], dtype=np.uint64))

    def plan(self, keys, qfilters, offsets, qlen, nfields, stride, bits, filtering, limit):
        keys = np.asarray(keys, np.uint64).tolist()
        offsets = np.asarray(offsets, np.int64).tolist()
        qfilters = np.asarray(qfilters, np.uint64).tolist()
        if len(qfilters) < len(keys) and filtering:
            raise ValueError("plan: fewer query filters than keys")
        if len(offsets) < len(keys):
            raise ValueError("plan: fewer offsets than keys")
        hidden = False
        with self._lock:
            for j, k in enumerate(keys):
                e = self._d.get(k)
                if e is not None and e.visible and e.items:
                    items = list(e.items)
                    break
                hidden = hidden or (e is not None and not e.visible)
            else:
                return -1, np.empty(0, np.uint64), np.empty(0, np.int64), 0, 0, hidden
        n = len(items)
        m = n if limit <= 0 else min(limit, n)
        if not filtering:
            segs = sorted((-s for _, s in items), reverse=True)[:m]
            return (j, np.array(segs, np.uint64), np.full(len(segs), qlen, np.int64), n, n,
                    hidden)
        flts = [f for f, _ in items]
        qf = qfilters[j]
        L, lo, hi = max_potential(flts, qf, nfields, stride, bits)
        kstar = L // stride
        out, pots, prev = [], [], None
        for k in range(kstar, -1, -1):
            a, b = _range(flts, qf, k, bits)
            pot = qlen if k >= nfields else min(offsets[j] + (k + 1) * stride - 1, qlen)
            idx = range(a, b) if prev is None else list(range(a, prev[0])) + list(range(prev[1], b))
            for i in idx:
                out.append(-items[i][1])
                pots.append(pot)
            prev = (a, b)
        return (j, np.array(out[:m], np.uint64), np.array(pots[:m], np.int64), n, hi - lo,
                hidden)

    def route(self, qw, probe_desc, nfields, stride, bits, filtering, limit):
        """:meth:`plan` for the query window ``qw`` (probe points = the offsets of
        ``probe_desc`` below ``len(qw)``), as the compiled ``route``."""
        q = np.ascontiguousarray(qw, dtype=np.uint64)
        pd = np.ascontiguousarray(probe_desc, dtype=np.int64)
        if len(pd) > 256:
            raise ValueError("route: more than 256 routing points per window")
        qlen = len(q)
        offs = pd[pd < qlen] if qlen else pd[:0]
        if len(offs) == 0:
            return -1, np.empty(0, np.uint64), np.empty(0, np.int64), 0, 0, False
        qf = filters(q, qlen, offs, nfields, stride, bits) if filtering else \
            np.zeros(len(offs), np.uint64)
        return self.plan(q[offs], qf, offs, qlen, nfields, stride, bits, filtering, limit)

    def dump(self):
        with self._lock:
            keys = list(self._d)
            es = [self._d[k] for k in keys]
            ent = [i for i, e in enumerate(es) for _ in e.items]
            return {"keys": np.array(keys, np.uint64), "offs": np.array([e.off for e in es], np.uint32),
                    "visible": np.array([e.visible for e in es], np.bool_),
                    "next_state": np.array([e.next_state for e in es], np.uint8),
                    "refine_state": np.array([e.refine_state for e in es], np.uint8),
                    "sizes": np.array([len(e.items) for e in es], np.int64),
                    "entry": np.array(ent, np.int64),
                    "filters": np.array([f for e in es for f, _ in e.items], np.uint64),
                    "segs": np.array([-s for e in es for _, s in e.items], np.uint64)}

    def load(self, keys, offs, visible, next_state, refine_state, sizes, filters, segs):
        keys, offs = np.asarray(keys, np.uint64).tolist(), np.asarray(offs).tolist()
        visible, sizes = np.asarray(visible).tolist(), np.asarray(sizes, np.int64).tolist()
        next_state, refine_state = np.asarray(next_state).tolist(), np.asarray(refine_state).tolist()
        fl, sg = np.asarray(filters, np.uint64).tolist(), np.asarray(segs, np.uint64).tolist()
        with self._lock:
            if self._d:
                raise ValueError("load: the directory is not empty")
            if not (len(offs) == len(visible) == len(next_state) == len(refine_state)
                    == len(sizes) == len(keys)):
                raise ValueError("load: entry arrays differ in length")
            if sum(sizes) != len(fl) or len(fl) != len(sg):
                raise ValueError("load: posting arrays do not match the entry sizes")
            if sg and max(sg) > _MAX_SEG:
                raise OverflowError("load: a segment id does not fit the 32-bit posting reference")
            c = 0
            for k, o, v, ns, rs, n in zip(keys, offs, visible, next_state, refine_state, sizes):
                e = self._create(k, o, bool(v))
                e.next_state, e.refine_state = ns, rs
                e.items = [(fl[i], -sg[i]) for i in range(c, c + n)]
                e.cap = n
                self._n_post += n
                self._post_bytes += n * _POSTING_BYTES
                c += n

    def check(self):
        with self._lock:
            for i, e in enumerate(self._d.values()):
                if e.items != sorted(e.items):
                    raise AssertionError(f"entry {i} unsorted")
                if len({s for _, s in e.items}) != len(e.items):
                    raise AssertionError(f"entry {i} lists a segment twice")
        return True

    @property
    def n_entries(self):
        return len(self._d)

    @property
    def n_postings(self):
        return self._n_post

    @property
    def nbytes(self):
        """Bytes the compiled directory would allocate: entry array, hash table, posting arrays."""
        return self._cap_ent * _ENTRY_BYTES + self._n_slots * _SLOT_BYTES + self._post_bytes

    @property
    def used_bytes(self):
        """Bytes the live state needs in the compiled layout (no spare capacity)."""
        return len(self._d) * _ENTRY_BYTES + self._n_slots * _SLOT_BYTES \
            + self._n_post * _POSTING_BYTES

    def __len__(self):
        return len(self._d)
