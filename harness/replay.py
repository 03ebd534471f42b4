"""The replay runner: trace -> block IDs -> strategy -> engine -> metrics.

It follows the SARP paper's method (sessions round-robin; each turn
``match(context + input)`` then ``insert(context + input + output)``) and runs
the exact ``radix`` oracle as a shadow in the same replay, so every run
reports its hit-rate loss against exact matching and counts **false hits**: a
returned block beyond the oracle's prefix (never inserted for this prefix), or
whose metadata differs from what was inserted.  Only the strategy's own calls
are timed; the shadow and the checks sit outside the timed regions.

``breakdown=True`` also splits every timed match and insert into phases
(:mod:`prefixbench.phases`: storage, routing, hashing, verify, lock,
...; the SARP paper's Fig. 7): the clocks are on for the whole replay, this
thread's clock is reset before each timed call and read right after it, and
each phase's nanoseconds land in per-request arrays beside ``match_ns`` and
``insert_ns``; ``rest`` is the latency no phase claimed (never negative: the
phases are disjoint intervals inside the timed call).  The clocks cost time
themselves, so the run states it: a calibration loop measures one enter/leave
pair, every request counts its switches, and ``breakdown_overhead`` is the
estimated clock time per match as a fraction of the mean match latency.  The
latencies of a breakdown run include that overhead; compare speed on runs
without it.
"""
from __future__ import annotations

import gc
import itertools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench import phases
from prefixbench.metas import make_metas
from prefixbench.harness.progress import progress
from prefixbench.plugins.strategy import IndexStrategy
from prefixbench.registry import get_registry
from prefixbench.workloads.model import Workload

#: the exact strategy every replay shadows, looked up by name like any plugin
ORACLE = "radix"


def make_oracle(meta_size: int) -> IndexStrategy:
    """A fresh exact oracle (:data:`ORACLE` from the registry) for ``meta_size``-byte metas."""
    return get_registry().get("strategy", ORACLE).factory(meta_size=meta_size)


def _reads(store) -> int:
    """Logical reads so far, through the store contract (0 without a store)."""
    return store.stats().reads if store is not None else 0


def _io(store) -> dict | None:
    """The engine's I/O counters now (None without a store or counters)."""
    return store.io_counters() if store is not None else None


def _io_since(store, before: dict | None) -> dict:
    """What the engine's I/O counters moved since ``before`` (empty without them)."""
    after = _io(store)
    if before is None or after is None:
        return {}
    return {k: after[k] - before.get(k, 0) for k in after}


@dataclass
class ReplayResult:
    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    oracle_hit_tokens: int = 0
    hit_blocks: int = 0
    false_hits: int = 0
    short_matches: int = 0            # requests where the strategy matched less than the oracle
    store_reads_in_match: int = 0
    match_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    insert_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    #: blocks each timed match was asked for (empty where a replay keeps none)
    query_blocks: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    wall_seconds: float = 0.0
    strategy_stats: dict = field(default_factory=dict)
    #: the strategy's options beyond its paper, as in effect (printed with the results)
    beyond_paper: dict = field(default_factory=dict)
    store_stats: dict = field(default_factory=dict)
    store_bytes: int = 0              # data on disk (allocated blocks), engine logs excluded
    store_log_bytes: int = 0          # the engine's write-ahead/journal logs on disk
    store_memory_bytes: int = 0       # engine memory outside the cache budget (index, filters)
    logical_bytes: int = 0            # live keys + values the index asked the store to keep
    store_records: int = 0            # live records (keys) in the store
    gc_mode: str = ""
    threads: int = 1
    timed_wall_seconds: float = 0.0   # threaded runs: first start to last finish
    #: process CPU time over the timed requests: every thread's, the engine's own
    #: background threads included (what the cores did while the requests ran)
    cpu_seconds: float = 0.0
    #: breakdown runs: phase -> (ns per match, ns per insert), per request, ordered
    #: as phases.ordered (``rest`` last); empty without a breakdown
    phase_ns: dict = field(default_factory=dict)
    #: breakdown runs: phase switches per request (per match, per insert)
    phase_switches: tuple = ()
    #: breakdown runs: the request thread's own CPU ns per request (per match, per
    #: insert), whatever phase it was in; the rest of a latency it spent off a core
    thread_cpu_ns: tuple = ()
    #: breakdown runs: what one enter/leave pair of the clock cost (calibrated), ns
    breakdown_pair_ns: float = 0.0
    #: breakdown runs: estimated clock time per match / mean match latency
    breakdown_overhead: float = 0.0
    #: the same for inserts
    breakdown_overhead_insert: float = 0.0
    #: bounded-pool runs (prefixbench.harness.pools): the pool configuration, empty
    #: without pools; hit tokens then count the prefix on the routed worker
    pool: dict = field(default_factory=dict)
    any_hit_tokens: int = 0           # prefix available on any worker
    oracle_any_hit_tokens: int = 0
    evictions: int = 0                # blocks evicted from the pools
    removals: int = 0                 # availabilities the index's remove calls removed
    missing_locations: int = 0        # matched blocks lacking a worker the oracle has
    #: ns per remove call (requests that evicted something)
    remove_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    #: (requests so far, index entries, blocks held in all pools), sampled
    entries_series: list = field(default_factory=list)
    pool_held: int = 0                # blocks held in all pools at the end
    #: the engine's I/O counters over the timed requests (SegmentStore.io_counters,
    #: e.g. RocksDB with statistics=true); empty where the engine keeps none
    store_io: dict = field(default_factory=dict)

    # ---- derived figures ----------------------------------------------
    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def oracle_hit_rate(self) -> float:
        return self.oracle_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_rate_loss(self) -> float:
        """Share of the oracle's hit tokens this strategy did not reuse."""
        if not self.oracle_hit_tokens:
            return 0.0
        return (self.oracle_hit_tokens - self.hit_tokens) / self.oracle_hit_tokens

    @property
    def busy_seconds(self) -> float:
        return float(self.match_ns.sum() + self.insert_ns.sum() + self.remove_ns.sum()) / 1e9

    @property
    def throughput(self) -> float:
        """Requests per second: of strategy time (match + insert) with one thread,
        of wall time from the first request to the last with several."""
        if self.timed_wall_seconds:
            return self.requests / self.timed_wall_seconds
        return self.requests / self.busy_seconds if self.busy_seconds else 0.0

    @property
    def cores_busy(self) -> float:
        """Process CPU seconds per wall second over the timed requests: how many cores
        the run kept busy (at two threads on two cores, near 2 means no headroom)."""
        wall = self.timed_wall_seconds or self.wall_seconds
        return self.cpu_seconds / wall if wall else 0.0

    @property
    def space_amplification(self) -> float:
        """Data bytes on disk per logical byte stored (0 when nothing is on disk)."""
        return self.store_bytes / self.logical_bytes if self.logical_bytes else 0.0

    @property
    def reads_per_match(self) -> float:
        return self.store_reads_in_match / self.requests if self.requests else 0.0

    def latency(self, which: str, q: float | None = None) -> float:
        """Seconds: mean if ``q`` is None, else the ``q`` percentile (0-100).

        ``which`` is ``match``, ``insert``, ``remove`` (one remove call of a pool
        run) or ``request`` (match + insert of one request).  Latencies are
        buffered per request during the replay and
        summarised only afterwards, so the timed path never touches a histogram.
        """
        if which == "match":
            arr = self.match_ns
        elif which == "insert":
            arr = self.insert_ns
        elif which == "remove":
            arr = self.remove_ns
        else:
            arr = self.match_ns + self.insert_ns
        if not len(arr):
            return 0.0
        v = arr.mean() if q is None else np.percentile(arr, q)
        return float(v) / 1e9

    @property
    def breakdown(self) -> bool:
        """True when the replay split its latencies into phases."""
        return bool(self.phase_ns)

    def phase_mean(self, which: str, name: str) -> float:
        """Mean seconds per request that phase ``name`` took in ``which`` (match or
        insert); 0 for a phase that never ran."""
        return _side_mean(self.phase_ns.get(name), which)

    def cpu_mean(self, which: str) -> float:
        """Mean seconds per request the request thread was on a core in ``which``
        (match or insert); 0 without a breakdown."""
        return _side_mean(self.thread_cpu_ns, which)


def _side_mean(arrs, which: str) -> float:
    """Mean seconds of a ``(per match, per insert)`` pair of ns arrays' ``which`` side;
    0 for no pair or no requests."""
    if not arrs:
        return 0.0
    arr = arrs[0 if which == "match" else 1]
    return float(arr.mean()) / 1e9 if len(arr) else 0.0


def replay(strategy: IndexStrategy, workload: Workload, *, oracle: IndexStrategy | None = None,
           limit: int | None = None, quiet: bool = True, desc: str = "replay",
           freeze_gc: bool = True, check: bool = True, threads: int = 1,
           threaded: bool = False, status_every: float = 0.0,
           breakdown: bool = False, pools=None) -> ReplayResult:
    """Replay ``workload`` through ``strategy`` (and the shadow ``oracle``).

    ``pools`` (a :class:`prefixbench.harness.pools.PoolConfig`) bounds each worker's
    KVCache pool: evictions reach the index and the oracle as removes
    (:func:`prefixbench.harness.pools.replay_pooled`).

    ``threads > 1`` (or ``threaded``) runs request threads; see :func:`replay_threaded`.
    ``status_every`` seconds (0 = never) adds match p99 and the false hits so far
    to the progress bar, computed from the buffered latencies outside the
    timed calls (a status line in the spirit of YCSB's ``-s``).
    ``breakdown`` splits each latency into phases (see the module docstring).
    """
    if pools is not None:
        from prefixbench.harness.pools import replay_pooled
        if threads > 1 or threaded or breakdown:
            from prefixbench.errors import ConfigError
            raise ConfigError("option --pool-blocks: pool runs replay on one request thread "
                              "without --breakdown")
        return replay_pooled(strategy, workload, pools, oracle=oracle, limit=limit,
                             quiet=quiet, desc=desc, freeze_gc=freeze_gc, check=check,
                             status_every=status_every)
    if threads > 1 or threaded:
        return replay_threaded(strategy, workload, threads=threads, limit=limit, quiet=quiet,
                               desc=desc, freeze_gc=freeze_gc, check=check,
                               breakdown=breakdown, oracle=oracle)
    return _finish(_replay_steps(strategy, workload, oracle=oracle, limit=limit, quiet=quiet,
                                 desc=desc, freeze_gc=freeze_gc, check=check,
                                 status_every=status_every, breakdown=breakdown))


def _finish(steps) -> ReplayResult:
    """Run a replay generator to its end: its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _run_length(workload: Workload, limit: int | None) -> int:
    """Requests a one-thread replay of ``workload`` runs under ``limit``."""
    return len(workload) if limit is None else min(limit, len(workload))


def _replay_steps(strategy: IndexStrategy, workload: Workload, *, oracle=None,
                  limit: int | None = None, quiet: bool = True, desc: str = "replay",
                  freeze_gc: bool = True, check: bool = True, status_every: float = 0.0,
                  breakdown: bool = False, step: int = 0):
    """The one-thread replay as a generator: it yields the number of requests it just
    ran after every ``step`` of them (never with ``step`` 0) and returns the
    :class:`ReplayResult`.  Wall and CPU time count only while it runs, so several
    of them can take turns (:func:`replay_interleaved`)."""
    if oracle is None and check:
        oracle = make_oracle(strategy.meta_size)
    res = ReplayResult()
    total = _run_length(workload, limit)
    match_ns = np.zeros(total, dtype=np.int64)
    insert_ns = np.zeros(total, dtype=np.int64)
    query_blocks = np.zeros(total, dtype=np.int64)
    store = strategy.store
    block_size = workload.block_size
    meta_size = strategy.meta_size
    clock = time.perf_counter_ns
    thread_cpu = time.thread_time_ns
    reset, p_totals, p_switches = phases.reset, phases.totals, phases.switches

    res.gc_mode = _quiet_gc(freeze_gc)
    wall = cpu = 0.0
    t_wall = time.perf_counter()
    cpu0 = time.process_time()
    bar = progress(total, desc, quiet)
    next_status = t_wall + status_every
    i = 0
    io0 = _io(store)
    bd = _Breakdown(total) if breakdown else None      # clocks on from here to finally
    try:
        for req in workload.requests():
            if i >= total:
                break
            if step and i and i % step == 0:
                wall += time.perf_counter() - t_wall
                cpu += time.process_time() - cpu0
                yield step
                if bd:
                    phases.enable(True)     # another replay's turn may have ended its clocks
                t_wall = time.perf_counter()
                cpu0 = time.process_time()
            q = req.match_ids
            reads0 = _reads(store)
            if bd:
                reset()
                c0 = thread_cpu()
            t0 = clock()
            m = strategy.match(q)
            t1 = clock()
            if bd:
                bd.record(0, i, p_totals(), p_switches(), thread_cpu() - c0)
            if store is not None:
                res.store_reads_in_match += _reads(store) - reads0
            n = m.n_blocks
            res.hit_blocks += n
            res.hit_tokens += min(n * block_size, req.prompt_tokens)
            res.prompt_tokens += req.prompt_tokens
            if check:
                om = oracle.match(q)
                res.oracle_hit_tokens += min(om.n_blocks * block_size, req.prompt_tokens)
                _check_match(res, m, om)
            ids = req.insert_ids
            metas = make_metas(ids, i, meta_size)
            if bd:
                reset()
                c2 = thread_cpu()
            t2 = clock()
            strategy.insert(ids, metas)
            t3 = clock()
            if bd:
                bd.record(1, i, p_totals(), p_switches(), thread_cpu() - c2)
            if check:
                oracle.insert(ids, metas)
            match_ns[i] = t1 - t0
            insert_ns[i] = t3 - t2
            query_blocks[i] = len(q)
            i += 1
            bar.update(1)
            if status_every and (i & 255) == 0 and time.perf_counter() >= next_status:
                next_status = time.perf_counter() + status_every
                p99 = np.percentile(match_ns[:i], 99) / 1e3
                bar.set_postfix_str(f"match p99 {p99:.1f}us, false hits {res.false_hits}")
    finally:
        bar.close()
        _restore_gc(freeze_gc)
        if bd:
            bd.stop()
    res.wall_seconds = wall + time.perf_counter() - t_wall
    res.cpu_seconds = cpu + time.process_time() - cpu0
    res.store_io = _io_since(store, io0)
    res.requests = i
    res.match_ns = match_ns[:i]
    res.insert_ns = insert_ns[:i]
    res.query_blocks = query_blocks[:i]
    if bd:
        bd.finish(res, i)
    if not check:
        res.oracle_hit_tokens = res.hit_tokens
    _collect_end_state(res, strategy)
    return res


def replay_interleaved(runs: list[dict], step: int, *, quiet: bool = True,
                       desc: str = "interleaved", freeze_gc: bool = True,
                       before_round=None) -> list[ReplayResult]:
    """Replays that take turns, ``step`` requests each, until all are done.

    Each of ``runs`` holds :func:`replay`'s keywords for one replay (``strategy``,
    ``workload``, ``oracle``, ``breakdown``, ``threads`` and ``threaded`` for
    request threads, whose turns every thread shares equally: see
    :func:`_threaded_steps`, ...).  On a shared machine, load that
    comes and goes then falls on every replay alike, so their ratios hold where one
    replay after the other would compare different minutes.  Each replay's
    latencies, wall and CPU time count only its own turns (the CPU time is the
    process's, so another store's background threads running during a turn count
    too).  The collector is kept out of every turn, as :func:`replay` does.
    ``before_round`` (no arguments) runs before each round of turns, outside them
    (a sweep's device watch)."""
    if step < 1:
        raise ValueError("replay_interleaved: step must be >= 1")
    was_on = phases.enabled()
    mode = _quiet_gc(freeze_gc)
    gens = [_steps({"quiet": True, **run, "freeze_gc": False, "step": step}) for run in runs]
    results: list = [None] * len(gens)
    total = sum(_run_length(r["workload"], r.get("limit")) for r in runs)
    done_so_far = [0] * len(gens)
    bar = progress(total, desc, quiet)
    try:
        live = list(range(len(gens)))
        while live:
            if before_round is not None:
                before_round()
            for k in list(live):
                try:
                    ran = next(gens[k])
                except StopIteration as end:
                    results[k] = end.value
                    live.remove(k)
                    ran = end.value.requests - done_so_far[k]
                done_so_far[k] += ran
                bar.update(ran)
    finally:
        bar.close()
        for g in gens:
            g.close()
        _restore_gc(freeze_gc)
        phases.enable(was_on)
    for r in results:
        r.gc_mode = mode
    return results


def _steps(kw: dict):
    """The replay generator ``kw`` asks for: request threads (``threads``, ``threaded``)
    or the one-thread replay."""
    threaded = kw.pop("threaded", False)
    if threaded or kw.get("threads", 1) > 1:
        return _threaded_steps(**kw)
    kw.pop("threads", None)
    return _replay_steps(**kw)


class _Breakdown:
    """Per-request phase nanoseconds of one replay (arrays made as phases appear).

    Creating it calibrates the clock and turns it on; :meth:`stop` restores the
    switch as it was."""

    def __init__(self, total: int):
        self.total = total
        self.ns: dict = {}
        self.switches = (np.zeros(total, dtype=np.int64), np.zeros(total, dtype=np.int64))
        #: the request thread's CPU ns per match and per insert
        self.cpu = (np.zeros(total, dtype=np.int64), np.zeros(total, dtype=np.int64))
        self._lock = threading.Lock()
        self.pair_ns = phases.calibrate()
        self._was = phases.enabled()
        phases.enable(True)

    def stop(self) -> None:
        phases.enable(self._was)
        phases.reset()

    def record(self, side: int, i: int, totals: dict, switches: int, cpu_ns: int) -> None:
        """Store request ``i``'s phases of its match (side 0) or insert (side 1), and
        the CPU time its thread spent in it."""
        self.cpu[side][i] = cpu_ns
        ns = self.ns
        for name, t in totals.items():
            arrs = ns.get(name)
            if arrs is None:
                with self._lock:       # request threads may meet a phase at once
                    arrs = ns.get(name)
                    if arrs is None:
                        arrs = (np.zeros(self.total, dtype=np.int64),
                                np.zeros(self.total, dtype=np.int64))
                        ns[name] = arrs
            arrs[side][i] = t
        self.switches[side][i] = switches

    def finish(self, res: ReplayResult, n: int) -> None:
        """Put the first ``n`` requests' arrays, ``rest`` and the overhead in ``res``."""
        lat = (res.match_ns, res.insert_ns)
        claimed = [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)]
        out = {}
        for name, (m, ins) in self.ns.items():
            if name == phases.REST:
                continue
            out[name] = (m[:n], ins[:n])
            claimed[0] += m[:n]
            claimed[1] += ins[:n]
        out[phases.REST] = (lat[0] - claimed[0], lat[1] - claimed[1])
        res.phase_ns = {name: out[name] for name in phases.ordered(out)}
        sw = (self.switches[0][:n], self.switches[1][:n])
        res.phase_switches = sw
        res.thread_cpu_ns = (self.cpu[0][:n], self.cpu[1][:n])
        res.breakdown_pair_ns = self.pair_ns
        for side, attr in ((0, "breakdown_overhead"), (1, "breakdown_overhead_insert")):
            mean = float(lat[side].mean()) if n else 0.0
            cost = float(sw[side].mean()) * self.pair_ns if n else 0.0
            setattr(res, attr, cost / mean if mean else 0.0)


def _quiet_gc(freeze: bool) -> str:
    """Keep full collections out of timed regions; say what was done."""
    if not freeze:
        return "enabled"
    gc.collect()
    gc.freeze()
    gc.disable()
    return "frozen+disabled during replay"


def _restore_gc(freeze: bool) -> None:
    if freeze:
        gc.enable()
        gc.unfreeze()


def replay_threaded(strategy: IndexStrategy, workload: Workload, *, threads: int,
                    limit: int | None = None, quiet: bool = True, desc: str = "replay",
                    freeze_gc: bool = True, check: bool = True,
                    breakdown: bool = False,
                    oracle: IndexStrategy | None = None) -> ReplayResult:
    """N request threads against one shared index.

    Sessions are partitioned across threads (session ``s`` goes to thread
    ``s % N``) and each thread keeps the round-robin order of its sessions.
    Which thread first inserts a shared block depends on scheduling, so block
    metadata here is derived from the block ID alone (request number 0) and
    the checks run after the timed window against an oracle that replayed
    every request in workload order: a returned block must be one the oracle
    holds for that query, with the same metadata (no false hits), and the
    hit rate is compared with the oracle's sequential replay.  A given ``oracle``
    (one that already holds a load phase) is used for those checks and takes
    the run's inserts; otherwise a fresh one is made.
    ``breakdown`` splits each latency into phases per thread (each request
    thread has its own clock; lock waits show as ``lock``).
    """
    return _finish(_threaded_steps(strategy, workload, threads=threads, limit=limit,
                                   quiet=quiet, desc=desc, freeze_gc=freeze_gc, check=check,
                                   breakdown=breakdown, oracle=oracle))


def _threaded_steps(strategy: IndexStrategy, workload: Workload, *, threads: int,
                    limit: int | None = None, quiet: bool = True, desc: str = "replay",
                    freeze_gc: bool = True, check: bool = True, breakdown: bool = False,
                    oracle: IndexStrategy | None = None, step: int = 0):
    """:func:`replay_threaded` as a generator, for turns as :func:`_replay_steps`.

    With ``step`` the request threads run in turns of ``step`` requests: each
    thread takes a ticket before each request of its own sessions and stops for
    the turn once the turn's tickets are gone, so the threads share a turn as
    they would share the time (a thread ends a turn at most one request after
    the others), then all wait while the generator yields the requests the turn
    ran.  The threads live across the turns.  Timed wall time is the sum over
    turns of first start to last end; CPU time counts only inside turns.
    Without ``step`` there is one turn of every request: the whole run."""
    reqs = []
    for req in workload.requests():
        if limit is not None and len(reqs) >= limit:
            break
        reqs.append(req)
    total = len(reqs)
    parts = [[i for i, r in enumerate(reqs) if r.session % threads == t] for t in range(threads)]
    per_turn = step or total
    tickets = [itertools.count()]      # this turn's: a request runs on a number < per_turn
    meta_size = strategy.meta_size
    insert_metas = [make_metas(r.insert_ids, 0, meta_size) for r in reqs]
    match_ns = np.zeros(total, dtype=np.int64)
    insert_ns = np.zeros(total, dtype=np.int64)
    got: list = [None] * total
    store = strategy.store
    io0 = _io(store)
    # each thread's own match reads (the store's totals mix in other threads' inserts)
    match_reads = np.zeros(threads, dtype=np.int64)
    if store is not None:
        store.count_reads_per_thread()
    thread_reads = store.thread_reads if store is not None else (lambda: 0)
    clock = time.perf_counter_ns
    thread_cpu = time.thread_time_ns
    # per turn: each thread's first start and last end (0: it had nothing to run)
    starts = np.zeros(threads, dtype=np.int64)
    ends = np.zeros(threads, dtype=np.int64)
    ran = np.zeros(threads, dtype=np.int64)
    go = threading.Barrier(threads + 1)         # a turn starts
    done_turn = threading.Barrier(threads + 1)  # every thread ended its share of it
    errors: list = []
    bar = progress(total, desc, quiet)

    def worker(t: int) -> None:
        reset, p_totals, p_switches = phases.reset, phases.totals, phases.switches
        mine, at, done = parts[t], 0, 0
        try:
            while True:
                go.wait()
                if at >= len(mine) and stopping:
                    bar.update(done % 64)
                    return
                take = tickets[0]
                n0 = at
                starts[t] = clock()
                while at < len(mine) and next(take) < per_turn:
                    i = mine[at]
                    at += 1
                    r = reqs[i]
                    if bd:
                        reset()
                        c0 = thread_cpu()
                    r0 = thread_reads()
                    t0 = clock()
                    m = strategy.match(r.match_ids)
                    t1 = clock()
                    match_reads[t] += thread_reads() - r0
                    if bd:               # the insert is timed from after the clock's reset
                        bd.record(0, i, p_totals(), p_switches(), thread_cpu() - c0)
                        reset()
                        c2 = thread_cpu()
                        t2 = clock()
                    else:
                        t2 = t1
                    strategy.insert(r.insert_ids, insert_metas[i])
                    t3 = clock()
                    if bd:
                        bd.record(1, i, p_totals(), p_switches(), thread_cpu() - c2)
                    match_ns[i] = t1 - t0
                    insert_ns[i] = t3 - t2
                    got[i] = m
                    done += 1
                    if done % 64 == 0:
                        bar.update(64)
                ends[t] = clock()
                ran[t] = at - n0
                done_turn.wait()
        except threading.BrokenBarrierError:
            return
        except BaseException as e:  # re-raised in the generator's thread
            errors.append(e)
            go.abort()
            done_turn.abort()

    res = ReplayResult(threads=threads)
    res.gc_mode = _quiet_gc(freeze_gc)
    t_wall = time.perf_counter()
    stopping = False
    timed_ns = 0
    cpu = 0.0
    finished = 0
    bd = _Breakdown(total) if breakdown else None      # clocks on from here to finally
    pool = [threading.Thread(target=worker, args=(t,), name=f"request-{t}", daemon=True)
            for t in range(threads)]
    try:
        for th in pool:
            th.start()
        while True:
            tickets[0] = itertools.count()
            cpu0 = time.process_time()
            try:
                go.wait()
                done_turn.wait()
            except threading.BrokenBarrierError:
                break                   # a worker failed: its error is raised below
            cpu += time.process_time() - cpu0
            busy = starts[ran > 0]
            if len(busy):
                timed_ns += int(ends[ran > 0].max() - busy.min())
            n = int(ran.sum())
            finished += n
            if finished >= total:
                break
            if step:
                yield n
                if bd:
                    phases.enable(True)     # another replay's turn may have ended its clocks
        stopping = True
        try:
            go.wait()                   # let the threads see the end and return
        except threading.BrokenBarrierError:
            pass
        for th in pool:
            th.join()
    finally:
        if not stopping:                # closed mid-run: release the waiting threads
            go.abort()
            done_turn.abort()
        bar.close()
        _restore_gc(freeze_gc)
        if bd:
            bd.stop()
        if store is not None:
            store.count_reads_per_thread(False)
    if errors:
        raise errors[0]
    res.cpu_seconds = cpu
    res.wall_seconds = time.perf_counter() - t_wall
    res.timed_wall_seconds = timed_ns / 1e9
    res.requests = total
    res.match_ns, res.insert_ns = match_ns, insert_ns
    res.query_blocks = np.fromiter((len(r.match_ids) for r in reqs), np.int64, total)
    if bd:
        bd.finish(res, total)
    if store is not None:
        res.store_reads_in_match = int(match_reads.sum())
    res.store_io = _io_since(store, io0)
    block_size = workload.block_size
    if oracle is None and check:
        oracle = make_oracle(meta_size)
    for i, r in enumerate(reqs):
        m = got[i]
        res.hit_blocks += m.n_blocks
        res.hit_tokens += min(m.n_blocks * block_size, r.prompt_tokens)
        res.prompt_tokens += r.prompt_tokens
        if oracle is not None:
            om = oracle.match(r.match_ids)   # sequential order: the reference hit rate
            res.oracle_hit_tokens += min(om.n_blocks * block_size, r.prompt_tokens)
            oracle.insert(r.insert_ids, insert_metas[i])
    if oracle is not None:
        for i, r in enumerate(reqs):     # every returned block must exist, same metadata
            _check_match(res, got[i], oracle.match(r.match_ids))
    else:
        res.oracle_hit_tokens = res.hit_tokens
    _collect_end_state(res, strategy)
    return res


def _check_match(res: ReplayResult, m, om) -> None:
    """Count ``m``'s false hits against the oracle's answer ``om`` for the same query:
    blocks beyond the oracle's prefix, and blocks of the common prefix whose metadata
    differs; a match shorter than the oracle's is a short match (not an error)."""
    n, on = m.n_blocks, om.n_blocks
    if n > on:
        res.false_hits += n - on
    elif n < on:
        res.short_matches += 1
    k = min(n, on)
    if k and not np.array_equal(m.metas[:k], om.metas[:k]):
        res.false_hits += int((m.metas[:k] != om.metas[:k]).any(axis=1).sum())


def _collect_end_state(res: ReplayResult, strategy: IndexStrategy) -> None:
    """Strategy counters and the store's size after the timed replay."""
    drain = getattr(strategy, "drain", None)
    if callable(drain):       # background back-fill (SARP) finishes before sizes are read
        drain()
    res.strategy_stats = strategy.stats()
    store = strategy.store
    if store is not None:
        store.flush()
        res.store_stats = store.stats().as_dict()
        usage = store.disk_usage()
        res.store_bytes = usage["data_bytes"]
        res.store_log_bytes = usage["log_bytes"]
        res.store_memory_bytes = store.memory_outside_budget()
        res.store_records, res.logical_bytes = store.logical_size()
