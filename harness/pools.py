"""Bounded KVCache pools, workers and routing: the replay under eviction.

The model
    A *worker* is one serving engine with its own KVCache pool of
    ``pool_blocks`` blocks (``--pool-blocks``).  ``--workers K`` (1-64, the
    width of the index's location bitmap) workers share one global index.
    Each request goes to one worker, chosen per request by ``--route``:

    ``round-robin``  request ``i`` to worker ``i % K``;
    ``random``       a seeded uniform choice (seed 0: runs repeat);
    ``cache-aware``  the worker holding the longest prefix of the request
                     according to the index's answer (``Match.locations``,
                     bit ``w`` = worker ``w``), ties to the worker holding the
                     fewest blocks, then the lowest number (a KV-aware router).

    In this sequential replay no request is in flight beside the current one,
    so there is no load to balance against: when every request shares a
    prefix (one system prompt), ``cache-aware`` sends them all to the worker
    that cached it first and the hit rate is a single pool's; without a
    shared prefix, new sessions spread by the fewest-blocks tie-break.

    The routed worker then computes the request: every block of
    ``context + input + output`` it lacks is allocated in its pool.  When the
    pool has too few free slots, blocks are evicted first, by the policy of
    ``--evict`` (:mod:`prefixbench.plugins.eviction`), leaves first as radix
    caches evict: a block with a cached child in the same pool is not a leaf.
    Blocks the in-flight request references (the prefix it found on its
    worker) are pinned and never evicted; the replay is sequential, so the
    in-flight request is the current one.  A pool therefore always holds a
    prefix-closed tree of chains.  A request with more blocks than one pool
    holds cannot run: that is a configuration error naming the request.

Events
    Each request produces at most one remove event and one store event for
    its worker, applied to the index in the order an engine publishes them:
    ``remove(evicted, worker=w)`` (BlockRemoved) before
    ``insert(context + input + output, metas, worker=w)`` (BlockStored; the
    blocks the worker already held keep their first metadata).  The oracle
    applies exactly the same events, so it knows every pool's content.

Hit rate at capacity
    A worker reuses only the KVCache in its own pool (no transfer between
    workers), so a request's hit is the prefix of its prompt available **on
    the routed worker**: the leading blocks whose location bit for that
    worker is set.  The oracle's hit is the same quantity from its own
    locations, which is exact for these pools and this routing; loss is
    measured against it.  The prefix available on *any* worker (the index's
    ``n_blocks``) is reported beside it as ``any-worker-hit-tokens``.  With
    one worker the two are equal.  A strategy that tracks one location
    (``Match.locations`` None) runs with one worker only.

Checks
    Beside the usual false hits (a block beyond the oracle's prefix, or with
    other metadata), every matched block's location bitmap is compared with
    the oracle's: a worker bit the oracle lacks is a false hit (a router would
    send the request to a worker without that block), a bit the index lacks
    is counted as a missing location.

Figures (per run): evictions and index removals per request, match, insert
and remove latency, the routed and any-worker hit rates beside the oracle's,
and index entries over time (``entries_series``: about 64 samples of the
strategy's ``entries`` and the blocks held in all pools, outside the timed
calls).

Cost: per request, NumPy over the request's blocks (lookups in a sorted id
index, which inserts and deletes by one move of the pool's ids) and, when
something must be evicted, a walk of the victim queue: the smallest keys,
kept in order between rebuilds.  A heap-ordered policy's key only grows while
a block is held and a new or touched block's key is checked against the
queue's bound, so the queue stays exact; a rebuild (one pass over the pool)
happens when it runs dry, or when a key lands below the bound (``lfu``, whose
new blocks start at one use).  No per-block Python.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench.errors import ConfigError, UnknownPluginError
from prefixbench.harness.progress import progress
from prefixbench.metas import make_metas
from prefixbench.registry import get_registry

ROUTES = ("round-robin", "random", "cache-aware")
#: ``--pool-blocks unbounded``: pools that never evict (the baseline beside bounded ones)
UNBOUNDED = 1 << 62
MAX_WORKERS = 64
DEFAULT_EVICT = "lru"
DEFAULT_ROUTE = "round-robin"
#: samples of the index-entries series per run
SERIES_POINTS = 64
_ONE = np.uint64(1)


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class PoolConfig:
    pool_blocks: int
    evict: str = DEFAULT_EVICT
    workers: int = 1
    route: str = DEFAULT_ROUTE
    seed: int = 0

    def describe(self) -> dict:
        return {"pool_blocks": (self.pool_blocks if self.pool_blocks < UNBOUNDED
                                else "unbounded"), "pool_evict": self.evict,
                "pool_workers": self.workers, "pool_route": self.route,
                "pool_route_seed": self.seed}


def capacity_text(blocks: int) -> str:
    """``10,000`` or ``unbounded``."""
    return "unbounded" if blocks >= UNBOUNDED else f"{blocks:,}"


def parse_pool_blocks(option: str, text) -> int:
    """``1e4``, ``10000``, ``10k`` -> blocks, ``unbounded`` -> :data:`UNBOUNDED`; 0 or
    less is one line."""
    s = str(text).strip()
    if s.lower() == "unbounded":
        return UNBOUNDED
    mult = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9}.get(s[-1:].lower(), 1)
    try:
        v = float(s[:-1] if mult != 1 else s) * mult
    except ValueError:
        raise ConfigError(f"option {option}: {text!r} is not a block count "
                          "(e.g. 16384, 1e4, 10k or unbounded)") from None
    if not np.isfinite(v) or v != int(v):
        raise ConfigError(f"option {option}: {text!r} is not a whole number of blocks")
    if v < 1:
        raise ConfigError(f"option {option}: {s} blocks; a pool holds at least one "
                          "request's blocks")
    return int(v)


def make_policy(name: str):
    try:
        return get_registry().get("eviction", name).factory()
    except UnknownPluginError:
        known = ", ".join(get_registry().names("eviction"))
        raise ConfigError(f"option --evict: unknown eviction policy {name!r}; "
                          f"known: {known}") from None


def make_config(pool_blocks, evict: str | None = None, workers: int | None = None,
                route: str | None = None, seed: int = 0) -> PoolConfig:
    """A checked :class:`PoolConfig` from the user's options (each problem one line)."""
    blocks = pool_blocks if isinstance(pool_blocks, int) and not isinstance(
        pool_blocks, bool) else parse_pool_blocks("--pool-blocks", pool_blocks)
    if blocks < 1:
        parse_pool_blocks("--pool-blocks", blocks)
    evict = evict or DEFAULT_EVICT
    make_policy(evict)
    workers = 1 if workers is None else workers
    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(f"option --workers: {workers} workers; give 1 to {MAX_WORKERS} "
                          "(the width of the index's location bitmap)")
    route = route or DEFAULT_ROUTE
    if route not in ROUTES:
        raise ConfigError(f"option --route: {route!r} is not one of {', '.join(ROUTES)}")
    return PoolConfig(blocks, evict, workers, route, seed)


def check_strategy(name: str, cfg: PoolConfig) -> None:
    """The strategy can serve these pools: it removes, and tracks ``cfg.workers``."""
    cls = get_registry().get("strategy", name).factory
    if not getattr(cls, "supports_remove", False):
        raise ConfigError(f"option --pool-blocks: strategy {name} cannot remove blocks "
                          "(supports_remove is False), so it cannot follow evicting pools")
    width = int(getattr(cls, "max_workers", 1))
    if cfg.workers > width:
        raise ConfigError(f"option --workers: {cfg.workers} workers; strategy {name} "
                          f"tracks at most {width} (max_workers)")


def check_fits(workload, pool_blocks: int, limit: int | None = None) -> int:
    """The largest request's block count; one line naming the first request that
    does not fit in a pool of ``pool_blocks``."""
    most = 0
    for i, req in enumerate(workload.requests()):
        if limit is not None and i >= limit:
            break
        n = len(req.insert_ids)
        if n > pool_blocks:
            raise ConfigError(f"option --pool-blocks: {pool_blocks} blocks is smaller than "
                              f"request {i} (session {req.session}, turn {req.turn}), which "
                              f"needs {n} blocks on its worker")
        most = max(most, n)
    return most


# ----------------------------------------------------------------------------- one pool
class Pool:
    """One worker's KVCache pool of ``capacity`` blocks: a sorted id index, per-slot
    state for the eviction policy (``last``, ``hits``, ``newest``, ``depth``),
    each slot's parent slot and its number of cached children.  Slot arrays grow
    by doubling up to the capacity, so a large or unbounded pool costs only what
    it holds."""

    _STATE = (("ids", np.uint64, 0), ("parent", np.int64, -1), ("kids", np.int64, 0),
              ("depth", np.int64, 0), ("last", np.int64, 0), ("hits", np.int64, 0),
              ("newest", np.int64, 0), ("used", bool, False))

    def __init__(self, capacity: int, policy, initial_slots: int = 4096):
        self.capacity = capacity
        self.policy = policy
        size = min(capacity, initial_slots)
        for name, dtype, fill in self._STATE:
            setattr(self, name, np.full(size, fill, dtype=dtype))
        self._free = np.arange(size - 1, -1, -1, dtype=np.int64)   # a stack of free slots
        self._top = size
        self._held = 0
        self._sorted = np.empty(0, dtype=np.uint64)       # held ids, ascending
        self._slot_of = np.empty(0, dtype=np.int64)       # their slots
        self.evictions = 0
        # victim queue (heap-ordered policies): the smallest keys, ascending, from
        # _qh on; every held block outside it has a key >= _qbound (None: rebuild)
        self._q = np.empty(0, dtype=np.int64)
        self._qkey = np.empty(0, dtype=np.int64)
        self._qh = 0
        self._qbound = None
        self.queue_min = 1024

    @property
    def held(self) -> int:
        return self._held

    def _grow(self, need: int) -> None:
        """At least ``need`` free slots (the caller has made room under the capacity)."""
        if self._top >= need:
            return
        size = len(self.used)
        new = min(self.capacity, max(2 * size, self._held + need))
        for name, dtype, fill in self._STATE:
            arr = np.full(new, fill, dtype=dtype)
            arr[:size] = getattr(self, name)
            setattr(self, name, arr)
        free = np.empty(new, dtype=np.int64)
        free[:self._top] = self._free[:self._top]
        free[self._top:self._top + new - size] = np.arange(new - 1, size - 1, -1)
        self._free = free
        self._top += new - size

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Slot of each id, -1 where the pool does not hold it."""
        if not len(self._sorted) or not len(ids):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.searchsorted(self._sorted, ids)
        pos_c = np.minimum(pos, len(self._sorted) - 1)
        found = self._sorted[pos_c] == ids
        return np.where(found, self._slot_of[pos_c], -1)

    def prefix(self, ids: np.ndarray) -> tuple[int, np.ndarray]:
        """(leading blocks of ``ids`` held, their slots)."""
        slots = self.lookup(ids)
        miss = np.flatnonzero(slots < 0)
        h = int(miss[0]) if len(miss) else len(ids)
        return h, slots[:h]

    def admit(self, ids: np.ndarray, request: int) -> tuple[int, np.ndarray]:
        """Run one request's blocks on this worker: use the held prefix, evict what
        room the rest needs (never the pinned prefix), allocate the rest.
        Returns (blocks it held before, ids evicted)."""
        n = len(ids)
        if n > self.capacity:
            raise ConfigError(f"option --pool-blocks: {self.capacity} blocks is smaller than "
                              f"request {request}, which needs {n} blocks on its worker")
        h, pinned = self.prefix(ids)
        self.last[pinned] = request
        self.hits[pinned] += 1
        new = n - h
        evicted = np.empty(0, dtype=np.uint64)
        if not new:
            self._changed(pinned)
            return h, evicted
        self.newest[pinned] = request
        self._changed(pinned)
        short = new - (self.capacity - self._held)
        if short > 0:
            evicted = self._evict(short, pinned)
        self._grow(new)
        top = self._top
        slots = self._free[top - new:top][::-1].copy()
        self._top = top - new
        self._held += new
        self.ids[slots] = ids[h:]
        self.depth[slots] = np.arange(h, n, dtype=np.int64)
        self.parent[slots[1:]] = slots[:-1]
        self.parent[slots[0]] = pinned[-1] if h else -1
        self.kids[slots] = 1
        self.kids[slots[-1]] = 0
        if h:
            self.kids[pinned[-1]] += 1
        self.last[slots] = request
        self.hits[slots] = 1
        self.newest[slots] = request
        self.used[slots] = True
        self._changed(slots)
        order = np.argsort(ids[h:], kind="stable")
        new_ids = ids[h:][order]
        at = np.searchsorted(self._sorted, new_ids)
        self._sorted = np.insert(self._sorted, at, new_ids)
        self._slot_of = np.insert(self._slot_of, at, slots[order])
        return h, evicted

    def _changed(self, slots: np.ndarray) -> None:
        """Blocks whose keys may have changed or that are new: a key below the victim
        queue's bound would belong in the queue, so the queue is rebuilt."""
        if self._qbound is not None and len(slots) and \
                int(self.policy.keys(self, slots).min()) < self._qbound:
            self._qbound = None

    def _build_queue(self, count: int, mask: np.ndarray) -> None:
        """The queue of the smallest-key held blocks, pinned ones included (they are
        skipped, not lost, while pinned), with room for ``count`` unpinned ones."""
        cand = np.flatnonzero(self.used)
        keys = self.policy.keys(self, cand)
        n = len(cand)
        k = min(n, max(4 * count + int((~mask[cand]).sum()), self.queue_min, n // 8))
        if k < n:
            part = np.argpartition(keys, k)
            sel, bound = part[:k], int(keys[part[k]])
        else:
            sel, bound = np.arange(n), int(keys.max()) + 1 if n else 0
        sel = sel[np.argsort(keys[sel], kind="stable")]
        self._q, self._qkey, self._qh, self._qbound = cand[sel], keys[sel], 0, bound

    def _pop_queue(self, count: int, mask: np.ndarray) -> np.ndarray:
        """The ``count`` smallest-key blocks ``mask`` allows, from the queue (rebuilt as
        needed).  A queued block whose key is unchanged is still in order; one whose
        key changed was touched (its new key is >= the bound, or the queue would have
        been dropped) and leaves the queue; a pinned one stays for later."""
        out, taken = [], 0
        pinned = self.used & ~mask
        masked = int(pinned.sum())
        while count > 0:
            if self._qbound is None or self._qh >= len(self._q):
                self._build_queue(count, mask)
            h = self._qh        # a chunk reaches past every pinned or already taken block
            chunk = self._q[h:h + max(2 * count, 256) + masked + taken]
            ckey = self._qkey[h:h + len(chunk)]
            alive = self.used[chunk] & (self.policy.keys(self, chunk) == ckey)
            ok = alive & mask[chunk]
            take = np.flatnonzero(ok)[:count]
            end = int(take[-1]) + 1 if len(take) == count else len(chunk)
            held = np.flatnonzero(alive[:end] & pinned[chunk[:end]])
            if len(held):               # pinned blocks keep their place at the front
                self._q = np.concatenate([chunk[held], self._q[h + end:]])
                self._qkey = np.concatenate([ckey[held], self._qkey[h + end:]])
                self._qh = 0
            else:
                self._qh = h + end
            if len(take):
                out.append(chunk[take])
                mask[chunk[take]] = False
                count -= len(take)
                taken += len(take)
            elif h + len(chunk) >= len(self._q):
                self._qbound = None     # only pinned blocks were left in it: rebuild
        return np.concatenate(out) if len(out) > 1 else out[0]

    def _evict(self, count: int, pinned: np.ndarray) -> np.ndarray:
        """Evict ``count`` unpinned blocks, leaves first, by the policy's keys."""
        mask = self.used.copy()
        mask[pinned] = False
        if int(mask.sum()) < count:
            raise ConfigError(f"option --pool-blocks: {self.capacity} blocks cannot hold "
                              "the in-flight request's blocks")
        out = []
        if self.policy.heap_ordered:    # the smallest keys are leaves: take them at once
            pick = self._pop_queue(count, mask)
            self._drop(pick)
            out.append(self.ids[pick].copy())
            count = 0
        while count > 0:                # rounds among the current leaves only
            cand = np.flatnonzero(mask & (self.kids == 0))
            if not len(cand):           # only the pinned prefix is left
                raise ConfigError(f"option --pool-blocks: {self.capacity} blocks cannot hold "
                                  "the in-flight request's blocks")
            take = min(count, len(cand))
            keys = self.policy.keys(self, cand)
            if take < len(cand):
                pick = cand[np.argpartition(keys, take - 1)[:take]]
            else:
                pick = cand
            self._drop(pick)
            mask[pick] = False
            out.append(self.ids[pick].copy())
            count -= take
        evicted = np.concatenate(out) if len(out) > 1 else out[0]
        self.evictions += len(evicted)
        return evicted

    def _drop(self, slots: np.ndarray) -> None:
        par = self.parent[slots]
        par = par[par >= 0]
        np.subtract.at(self.kids, par, 1)
        if (self.kids[slots] != 0).any():
            raise AssertionError(f"eviction policy {self.policy.name} evicted a block with a "
                                 "cached child (its keys are not heap-ordered)")
        self.used[slots] = False
        self.parent[slots] = -1
        ids = np.sort(self.ids[slots])
        at = np.searchsorted(self._sorted, ids)
        self._sorted = np.delete(self._sorted, at)
        self._slot_of = np.delete(self._slot_of, at)
        top = self._top
        self._free[top:top + len(slots)] = slots
        self._top = top + len(slots)
        self._held -= len(slots)


# ----------------------------------------------------------------------------- routing
def prefix_per_worker(locations, n: int, workers: int) -> np.ndarray:
    """Leading matched blocks available on each worker, from a match's bitmaps
    (None: every matched block on worker 0)."""
    out = np.zeros(workers, dtype=np.int64)
    if not n:
        return out
    if locations is None:
        out[0] = n
        return out
    locs = np.asarray(locations, dtype=np.uint64)[:n]
    bits = ((locs[:, None] >> np.arange(workers, dtype=np.uint64)) & _ONE).astype(bool)
    has_gap = ~bits.all(axis=0)
    out[:] = np.where(has_gap, np.argmin(bits, axis=0), n)
    return out


class Cluster:
    """The workers' pools and the router."""

    def __init__(self, cfg: PoolConfig):
        self.cfg = cfg
        policy = make_policy(cfg.evict)
        self.pools = [Pool(cfg.pool_blocks, policy) for _ in range(cfg.workers)]
        self._rng = np.random.default_rng(cfg.seed)

    def route(self, request: int, per_worker: np.ndarray) -> int:
        k = self.cfg.workers
        if k == 1:
            return 0
        if self.cfg.route == "round-robin":
            return request % k
        if self.cfg.route == "random":
            return int(self._rng.integers(k))
        best = per_worker.max()
        ties = np.flatnonzero(per_worker == best)
        if len(ties) == 1:
            return int(ties[0])
        held = np.array([self.pools[w].held for w in ties])
        return int(ties[np.argmin(held)])

    @property
    def held(self) -> int:
        return sum(p.held for p in self.pools)

    @property
    def evictions(self) -> int:
        return sum(p.evictions for p in self.pools)


# ----------------------------------------------------------------------------- the replay
def _check_locations(res, m, om, workers: int) -> None:
    """Location bitmaps of the common prefix against the oracle's."""
    k = min(m.n_blocks, om.n_blocks)
    if not k:
        return
    full = np.uint64((1 << workers) - 1) if workers < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    a = (np.full(k, 1, dtype=np.uint64) if m.locations is None
         else np.asarray(m.locations, dtype=np.uint64)[:k]) & full
    b = np.asarray(om.locations, dtype=np.uint64)[:k] & full
    res.false_hits += int(((a & ~b) != 0).sum())
    res.missing_locations += int(((b & ~a) != 0).sum())


def replay_pooled(strategy, workload, cfg: PoolConfig, *, oracle=None, limit=None,
                  quiet: bool = True, desc: str = "replay", freeze_gc: bool = True,
                  check: bool = True, status_every: float = 0.0):
    """Replay ``workload`` through ``strategy`` with bounded per-worker pools (see the
    module docstring); ``oracle`` (default: a fresh radix oracle) shadows every event."""
    from prefixbench.harness import replay as rp

    cluster = Cluster(cfg)
    if oracle is None and check:
        oracle = rp.make_oracle(strategy.meta_size)
    if check and not getattr(oracle, "supports_remove", False):
        raise ConfigError(f"option --pool-blocks: the oracle {oracle.name or 'radix'} cannot "
                          "remove blocks yet, so it cannot shadow evicting pools")
    res = rp.ReplayResult()
    res.pool = cfg.describe()
    total = len(workload) if limit is None else min(limit, len(workload))
    match_ns = np.zeros(total, dtype=np.int64)
    insert_ns = np.zeros(total, dtype=np.int64)
    remove_ns = np.zeros(total, dtype=np.int64)
    removed_calls = np.zeros(total, dtype=bool)
    store = strategy.store
    block_size = workload.block_size
    meta_size = strategy.meta_size
    workers = cfg.workers
    clock = time.perf_counter_ns
    every = max(1, total // SERIES_POINTS)
    series = []
    res.gc_mode = rp._quiet_gc(freeze_gc)
    t_wall = time.perf_counter()
    bar = progress(total, desc, quiet)
    next_status = t_wall + status_every
    i = 0
    try:
        for req in workload.requests():
            if i >= total:
                break
            q = req.match_ids
            reads0 = rp._reads(store)
            t0 = clock()
            m = strategy.match(q)
            t1 = clock()
            if store is not None:
                res.store_reads_in_match += rp._reads(store) - reads0
            per = prefix_per_worker(m.locations, m.n_blocks, workers)
            w = cluster.route(i, per)
            n_w = int(per[w])
            res.hit_blocks += n_w
            res.hit_tokens += min(n_w * block_size, req.prompt_tokens)
            res.any_hit_tokens += min(m.n_blocks * block_size, req.prompt_tokens)
            res.prompt_tokens += req.prompt_tokens
            if check:
                om = oracle.match(q)
                on_w = int(prefix_per_worker(om.locations, om.n_blocks, workers)[w])
                res.oracle_hit_tokens += min(on_w * block_size, req.prompt_tokens)
                res.oracle_any_hit_tokens += min(om.n_blocks * block_size, req.prompt_tokens)
                rp._check_match(res, m, om)
                _check_locations(res, m, om, workers)
            ids = req.insert_ids
            metas = make_metas(ids, i, meta_size)
            _, evicted = cluster.pools[w].admit(ids, i)
            if len(evicted):
                t4 = clock()
                gone = strategy.remove(evicted, worker=w)
                t5 = clock()
                remove_ns[i] = t5 - t4
                removed_calls[i] = True
                res.removals += int(gone)
                if check:
                    oracle.remove(evicted, worker=w)
            t2 = clock()
            strategy.insert(ids, metas, worker=w)
            t3 = clock()
            if check:
                oracle.insert(ids, metas, worker=w)
            match_ns[i] = t1 - t0
            insert_ns[i] = t3 - t2
            if i % every == 0 or i == total - 1:
                series.append((i + 1, int(strategy.stats().get("entries", 0)), cluster.held))
            i += 1
            bar.update(1)
            if status_every and (i & 255) == 0 and time.perf_counter() >= next_status:
                next_status = time.perf_counter() + status_every
                bar.set_postfix_str(f"evictions {cluster.evictions}, "
                                    f"false hits {res.false_hits}")
    finally:
        bar.close()
        rp._restore_gc(freeze_gc)
    res.wall_seconds = time.perf_counter() - t_wall
    res.requests = i
    res.match_ns = match_ns[:i]
    res.insert_ns = insert_ns[:i]
    res.remove_ns = remove_ns[:i][removed_calls[:i]]
    res.evictions = cluster.evictions
    res.entries_series = series
    res.pool_held = cluster.held
    if not check:
        res.oracle_hit_tokens = res.hit_tokens
        res.oracle_any_hit_tokens = res.any_hit_tokens
    rp._collect_end_state(res, strategy)
    return res
