"""``prefixbench sweep capacity`` and ``run --pool-blocks``: replays under bounded pools.

``sweep capacity -w W --pool-blocks 5e3,1e4,5e4 [--evict lru] [--workers K]
[--route R] [--strategies a,b]`` replays the workload once per strategy and
capacity (ascending), each on a fresh store and a fresh radix oracle that
applies the same store and remove events (:mod:`prefixbench.harness.pools`),
and prints one table: hit rate at capacity beside the oracle's, loss, the
any-worker hit rate, evictions per request, requests per second of strategy
time (match + insert + remove), match / insert / remove latency, index entries
and memory.  "Index entries" is the strategy's own ``entries``
counter at the end: unique blocks for the per-block indexes; strategies that
tombstone removed blocks inside their records (the segment layouts, sarp)
keep counting what their records hold, so their figure does not shrink.

Stack inclusion.  With one worker, LRU and a pinned set that is only the
in-flight request's own prefix (the sequential replay), leaf-first LRU is a
stack algorithm (its eviction order does not depend on the capacity), so a
larger pool holds a superset of a smaller one at every request and the exact
hit rate cannot fall as capacity grows.  The sweep checks this on the
oracle's hit rate and on every exact strategy's, and prints each violation;
under other policies, several workers or routing, it prints the curve as
measured and says the check does not apply.

The table is rendered from the sweep's suites (:mod:`prefixbench.reports.sweeps`);
what it needs beyond the figures rides in each benchmark's metadata:
``capacity_blocks``, ``exact`` (the strategy is exact, so its own curve is
checked too), ``stack_inclusion_checked`` and ``capacity_notes`` (JSON list).

Capacity cliff.  Under the table, the adjacent pair of capacities with the
largest drop of the oracle's hit rate, the place a serving team should not
size below.

Strategies default to ``radix``, ``dram-blockhash`` and ``sarp``, keeping
those whose ``supports_remove`` is set (a skipped one is named on a note
line); a strategy given by name that cannot remove is one error line.
``-S STRATEGY:KEY=VALUE`` sets a strategy's option (unprefixed: sarp's).

A capacity may be ``unbounded``: pools that never evict, the baseline with the
same figures beside the bounded ones (``--pool-blocks 5e3,5e4,unbounded``).

``run --pool-blocks N`` is one such replay; it skips the pyperf.Runner
warmed-match benchmark (a pool's content depends on the whole history, so
there is no repeatable warm state) and writes the suites of
:func:`prefixbench.harness.pyperf_io.replay_suites` with the pool figures
(:func:`pooled_suites`), from which it prints the run's table and the pool
figures, as ``show`` does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from prefixbench.errors import ConfigError
from prefixbench.harness import pools as _pools
from prefixbench.harness import pyperf_io
from prefixbench.harness.bench import make_workload
from prefixbench.harness.build import build
from prefixbench.harness.replay import ReplayResult, make_oracle, replay
from prefixbench.plugins.strategy import parse_options
from prefixbench.registry import get_registry
from prefixbench.units import parse_size

DEFAULT_STRATEGIES = ("radix", "dram-blockhash", "sarp")
MAX_CAPACITIES = 32


def parse_capacities(text: str) -> tuple:
    """``5e3,1e4,10k`` -> ascending distinct block counts."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ConfigError("option --pool-blocks: give one or more block counts, e.g. 1e3,1e4")
    caps = sorted({_pools.parse_pool_blocks("--pool-blocks", p) for p in parts})
    if len(caps) > MAX_CAPACITIES:
        raise ConfigError(f"option --pool-blocks: {len(caps)} capacities; give at most "
                          f"{MAX_CAPACITIES}")
    return tuple(caps)


@dataclass
class CapacityConfig:
    workload: str
    workload_options: dict = field(default_factory=dict)
    capacities: tuple = ()
    evict: str = _pools.DEFAULT_EVICT
    workers: int = 1
    route: str = _pools.DEFAULT_ROUTE
    strategies: tuple = DEFAULT_STRATEGIES
    strategy_options: dict = field(default_factory=dict)
    engine: str = "memory"
    engine_options: dict = field(default_factory=dict)
    cache_bytes: int = 64 << 20
    direct_io: bool = False
    durability: str = "async"
    limit: int | None = None
    notes: list = field(default_factory=list)

    def pool(self, capacity: int) -> _pools.PoolConfig:
        return _pools.PoolConfig(capacity, self.evict, self.workers, self.route)

    @property
    def inclusion_applies(self) -> bool:
        return self.evict == "lru" and self.workers == 1

    def describe(self) -> dict:
        return {"workload_options": self.workload_options, "capacities": list(self.capacities),
                "evict": self.evict, "workers": self.workers, "route": self.route,
                "strategies": list(self.strategies), "engine": self.engine,
                "engine_options": self.engine_options, "cache_bytes": self.cache_bytes,
                "direct_io": self.direct_io, "durability": self.durability,
                "limit": self.limit}


def make_config(*, workload: str, pool_blocks, workload_options: dict | None = None,
                evict: str | None = None, workers: int | None = None, route: str | None = None,
                strategies: str | None = None, strategy_options: dict | None = None,
                engine: str | None = None, engine_options: dict | None = None,
                cache_bytes: str | None = None, direct_io: bool = False,
                durability: str = "async", limit: int | None = None,
                check_fit: bool = True) -> CapacityConfig:
    """Check the user's text (each problem one line, before any replay)."""
    from prefixbench.harness.sweeps import _split_strategy_options, parse_strategies

    if pool_blocks is None:
        raise ConfigError("option --pool-blocks: sweep capacity needs the capacities, "
                          "e.g. --pool-blocks 1e3,1e4,1e5")
    caps = parse_capacities(pool_blocks)
    base = _pools.make_config(caps[0], evict, workers, route)
    if limit is not None and limit < 1:
        raise ConfigError(f"option --limit: {limit} must be >= 1")
    reg = get_registry()
    reg.get("workload", workload)
    engine = engine or "memory"
    reg.get("engine", engine)
    notes = []
    if strategies is not None:
        names = parse_strategies(strategies)
        for n in names:
            _pools.check_strategy(n, base)
    else:
        names, skipped = [], []
        for n in DEFAULT_STRATEGIES:
            try:
                _pools.check_strategy(n, base)
                names.append(n)
            except ConfigError:
                skipped.append(n)
        if skipped:
            notes.append(f"note: skipped {', '.join(skipped)} (cannot remove blocks, or tracks "
                         f"fewer than {base.workers} workers)")
        if not names:
            raise ConfigError("option --strategies: none of the default strategies "
                              f"({', '.join(DEFAULT_STRATEGIES)}) can follow evicting pools")
        names = tuple(names)
    opts = _split_strategy_options(dict(strategy_options or {}), names)
    for n in names:
        cls = reg.get("strategy", n).factory
        parse_options(f"strategy {n}", cls.options, opts.get(n, {}))
    cfg = CapacityConfig(
        workload=workload, workload_options=dict(workload_options or {}), capacities=caps,
        evict=base.evict, workers=base.workers, route=base.route, strategies=names,
        strategy_options=opts, engine=engine, engine_options=dict(engine_options or {}),
        cache_bytes=parse_size("--cache-bytes", cache_bytes if cache_bytes is not None
                               else "64MiB"),
        direct_io=direct_io, durability=durability, limit=limit, notes=notes)
    if check_fit:
        _pools.check_fits(make_workload(workload, cfg.workload_options), caps[0], limit)
    return cfg


@dataclass
class CapacityRow:
    strategy: str
    capacity: int
    result: ReplayResult
    exact: bool

    @property
    def label(self) -> str:
        return f"{self.strategy}-pool-{_pools.capacity_text(self.capacity).replace(',', '')}"


@dataclass
class CapacityResult:
    config: CapacityConfig
    rows: list

    def violations(self) -> list:
        """Stack-inclusion violations: ``(strategy or 'oracle', smaller capacity, its hit
        rate, larger capacity, its hit rate)``; empty where the check does not apply."""
        if not self.config.inclusion_applies:
            return []
        out = []
        for s in self.config.strategies:
            rows = [r for r in self.rows if r.strategy == s]
            curves = [("oracle", [(r.capacity, r.result.oracle_hit_tokens,
                                   r.result.prompt_tokens) for r in rows])]
            if rows and rows[0].exact:
                curves.append((s, [(r.capacity, r.result.hit_tokens, r.result.prompt_tokens)
                                   for r in rows]))
            for who, pts in curves:
                for (c0, h0, p0), (c1, h1, p1) in zip(pts, pts[1:]):
                    if h1 < h0:
                        v = (who if who != "oracle" else f"oracle ({s})", c0, h0 / p0, c1,
                             h1 / p1)
                        if v not in out:
                            out.append(v)
        return out

    def cliff(self):
        """(smaller capacity, its oracle hit rate, larger, its rate) with the largest drop
        going down in capacity, on the first strategy's rows; None with one capacity."""
        rows = [r for r in self.rows if r.strategy == self.config.strategies[0]]
        best = None
        for a, b in zip(rows, rows[1:]):
            drop = b.result.oracle_hit_rate - a.result.oracle_hit_rate
            if best is None or drop > best[0]:
                best = (drop, a.capacity, a.result.oracle_hit_rate, b.capacity,
                        b.result.oracle_hit_rate)
        return best[1:] if best is not None and best[0] > 0 else None

    def table(self) -> str:
        """What the sweep prints: rendered from its suites by ``prefixbench.reports``
        (so ``prefixbench show`` prints the same from the files)."""
        import pyperf

        from prefixbench.reports import results, show
        times, counts = self.suites()
        return show.render(results.from_suites("(not written)", [
            (name, pyperf.BenchmarkSuite(b)) for name, b in (("times", times),
                                                             ("counts", counts)) if b]))

    def suites(self) -> tuple[list, list]:
        cfg = self.config
        times, counts = [], []
        bad = len(self.violations())
        for r in self.rows:
            config = {**cfg.describe(), "setting": r.label,
                      "strategy_options": cfg.strategy_options.get(r.strategy, {})}
            md = pyperf_io.run_metadata(r.strategy, cfg.engine if r.result.store_stats
                                        else None, cfg.workload, config)
            md.update({"sweep": "capacity", "setting": r.label,
                       "stack_inclusion_checked": int(cfg.inclusion_applies),
                       "stack_inclusion_violations": bad, "exact": int(r.exact),
                       "capacity_blocks": (r.capacity if r.capacity < _pools.UNBOUNDED
                                           else "unbounded")})
            if cfg.notes:
                md["capacity_notes"] = json.dumps(cfg.notes)
            t, c = pyperf_io.replay_suites(r.result, md)
            # prefixed, not renamed: the zeros each benchmark lists carry the label too
            times += [pyperf_io.prefixed(b, r.label) for b in t]
            counts += [pyperf_io.prefixed(b, r.label) for b in c]
        return times, counts

    def write(self, output: str) -> tuple[str, str]:
        times, counts = self.suites()
        pyperf_io.write_suite(output, times)
        cpath = pyperf_io.counts_path(output)
        pyperf_io.write_suite(cpath, counts)
        return output, cpath


def run_capacity(cfg: CapacityConfig, *, quiet: bool = True) -> CapacityResult:
    """Every strategy at every capacity, ascending, each on a fresh store and oracle."""
    workload = make_workload(cfg.workload, cfg.workload_options)
    reg = get_registry()
    rows = []
    for s in cfg.strategies:
        exact = bool(getattr(reg.get("strategy", s).factory, "exact", False))
        for cap in cfg.capacities:
            res = replay_one(s, cfg.strategy_options.get(s, {}), workload, cfg.pool(cap),
                             engine=cfg.engine, engine_options=cfg.engine_options,
                             cache_bytes=cfg.cache_bytes, direct_io=cfg.direct_io,
                             durability=cfg.durability, limit=cfg.limit, quiet=quiet,
                             desc=f"{s} pool {_pools.capacity_text(cap)}")
            rows.append(CapacityRow(s, cap, res, exact))
    return CapacityResult(cfg, rows)


def replay_one(strategy: str, options: dict, workload, pool: _pools.PoolConfig, *,
               engine, engine_options=None, cache_bytes=64 << 20, direct_io=False,
               durability="async", store_dir=None, limit=None, quiet=True,
               desc="replay", status_every=0.0) -> ReplayResult:
    """One pooled replay of ``strategy`` on a fresh store beside a fresh oracle."""
    built = build(strategy, engine, strategy_options=options, store_dir=store_dir,
                  cache_bytes=cache_bytes, direct_io=direct_io, durability=durability,
                  engine_options=engine_options or {}, block_tokens=workload.block_size)
    oracle = make_oracle(built.strategy.meta_size)
    try:
        return replay(built.strategy, workload, oracle=oracle, limit=limit, quiet=quiet,
                      desc=desc, status_every=status_every, pools=pool)
    finally:
        oracle.close()
        built.close()


def run_pooled(spec, pool: _pools.PoolConfig, *, output: str | None, quiet: bool):
    """``prefixbench run --pool-blocks``: one pooled replay, its suites written to
    ``output``; a run with false hits keeps its results and raises FalseHitsError."""
    from prefixbench.harness.bench import FalseHitsError, _write

    if spec.threads != 1:
        raise ConfigError("option --threads: pool runs replay on one request thread")
    if spec.breakdown:
        raise ConfigError("option --breakdown: pool runs do not split latency into phases")
    _pools.check_strategy(spec.strategy, pool)
    workload = make_workload(spec.workload, spec.workload_options)
    _pools.check_fits(workload, pool.pool_blocks, spec.limit)
    engine = _pooled_engine(spec)
    desc = (spec.strategy + (f"/{engine}" if engine else "")
            + f" pool {_pools.capacity_text(pool.pool_blocks)}")
    res = replay_one(spec.strategy, spec.strategy_options, workload, pool, engine=engine,
                     engine_options=spec.engine_options, cache_bytes=spec.cache_bytes,
                     direct_io=spec.direct_io, durability=spec.durability,
                     store_dir=spec.store_dir, limit=spec.limit, quiet=quiet, desc=desc,
                     status_every=spec.status_every)
    times, counts = pooled_suites(spec, pool, res)
    _write(output, times, counts)
    if res.false_hits:
        raise FalseHitsError(f"{spec.strategy}: {res.false_hits} false hits under pools "
                             f"(blocks or worker locations the oracle does not hold); "
                             f"results kept in {output or 'no file'}")
    return res


def _pooled_engine(spec):
    cls = get_registry().get("strategy", spec.strategy).factory
    return spec.engine if cls.needs_store else None


def pooled_suites(spec, pool: _pools.PoolConfig, res: ReplayResult) -> tuple[list, list]:
    """(times, counts) of one pooled run: what ``run --pool-blocks`` writes and prints
    through ``prefixbench.reports`` (its table, then the pool figures)."""
    md = pyperf_io.run_metadata(spec.strategy, _pooled_engine(spec), spec.workload,
                                {**spec.config(), **pool.describe()})
    return pyperf_io.replay_suites(res, md)
