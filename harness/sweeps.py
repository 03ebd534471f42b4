"""``prefixbench sweep``: the SARP paper's comparisons, each as one command.

Three kinds, each a list of *settings* replayed one after the other on the
same workload, every one on a fresh store, with the exact ``radix`` oracle
shadowing it in the same replay (so "loss" is always measured against the
oracle *of that run*, as the paper's Fig. 9 does):

``retrieval``  (Fig. 9)  ``sarp`` at ``max_retrieval`` 1, 2, 3, 4 and
                         unlimited (0): token loss vs the oracle, segment
                         retrievals per query, store reads per match, latency.
``ablation``   (Fig. 10, Table 4)  full ``sarp`` and ``sarp`` with refinement,
                         filtering, pruning each switched off: candidates per
                         routing entry before/after filtering and retrieved,
                         routing entries and bytes, retrievals per query, loss.
``strategies`` (section 6.2, Fig. 6)  ``sarp``, ``ssd-blockhash``,
                         ``segment-radix-capped``, ``segment-hash`` side by
                         side: throughput and the first strategy's ratio to
                         each, mean match/insert latency, loss, false hits,
                         store reads per match, in-memory bytes per block.
``space``      (section 6.6, Table 5)  ``ssd-blockhash`` (the non-packing
                         layout, always first) beside segment layouts (default
                         ``sarp``) on the same on-disk engine and workload:
                         data and log bytes on disk, logical bytes, space
                         amplification, disk bytes and logical block-metadata
                         entries each as a ratio to ``ssd-blockhash``'s.

``sarp`` runs with ``backfill=sync`` unless told otherwise: back-fill jobs
then publish inside the insert that triggered them, so a sweep's hit rates
and candidate counts are the same on every run (with the background worker
they depend on thread timing).

**Cache rule.**  ``cache_rule="paper"`` applies the paper's budget (section
6.1): every SSD-backed strategy's engine gets 10% (``cache_fraction``) of
ssd-blockhash's *uncompressed* store size.  That size is learnt by first
replaying ``ssd-blockhash`` on the same engine and workload (no oracle) and is
taken as the **logical** size, ``entries x (8-byte key + meta_size)`` -
24 bytes per indexed block at the default 16-byte metadata.  We use the
logical size, not what the engine reports on disk, because it is what the
paper calls uncompressed, it does not depend on compression, compaction
timing, WAL and SST overhead, and so it gives the same budget on every engine
and every run; the engine's on-disk size is reported next to it.  The cache
is then passed to each engine as ``StoreConfig.cache_bytes`` (RocksDB splits
it half block cache, half memtables).  ``cache_rule="fixed"`` uses
``cache_bytes`` as given.

Output: :meth:`SweepResult.table` for the terminal; :meth:`SweepResult.write`
writes pyperf suites, one benchmark per figure and setting, named
``<setting>-<figure>`` (``retrieval-1-match-latency-mean``,
``ablation-no-pruning-hit-tokens``, ``sarp-insert-latency-mean``), so two
sweep files of the same kind line up in ``python -m pyperf compare_to``;
times go to ``OUT.json``, counts and sizes to ``OUT.counts.json``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from prefixbench.harness import pyperf_io
from prefixbench.harness.build import build
from prefixbench.harness.errors import ConfigError
from prefixbench.harness.replay import ReplayResult, replay
from prefixbench.harness.units import parse_size
from prefixbench.plugins.registry import get_registry
from prefixbench.plugins.strategy import META_SIZE, parse_options
from prefixbench.reports.tables import fmt_bytes, fmt_seconds, format_table

KINDS = {
    "retrieval": "sarp at MaxRetrieval 1, 2, 3, 4, unlimited (paper Fig. 9)",
    "ablation": "sarp with refinement, filtering, pruning each off (paper Fig. 10, Table 4)",
    "strategies": "strategies side by side under one cache rule (paper section 6.2, Fig. 6)",
    "space": "on-disk bytes and block-metadata entries vs ssd-blockhash (paper 6.6, Table 5)",
}
DEFAULT_BUDGETS = (1, 2, 3, 4, 0)
DEFAULT_STRATEGIES = ("sarp", "ssd-blockhash", "segment-radix-capped", "segment-hash")
#: the space sweep's reference (the paper's non-packing version) and default company
SPACE_REFERENCE = "ssd-blockhash"
DEFAULT_SPACE_STRATEGIES = (SPACE_REFERENCE, "sarp")
#: (label, sarp options that differ from the full design)
ABLATIONS = (
    ("full", {}),
    ("no-refinement", {"refinement": "off"}),
    ("no-filtering", {"filtering": "off"}),
    ("no-pruning", {"pruning": "off"}),
)
PAPER_CACHE_FRACTION = 0.10
CACHE_RULES = ("paper", "fixed")
#: key + value of one ssd-blockhash entry, per indexed block (value = metadata)
KEY_BYTES = 8


# ----------------------------------------------------------------------------- configuration
@dataclass
class SweepConfig:
    """Everything one sweep needs; build it with :func:`make_config` from user text."""

    kind: str
    workload: str
    workload_options: dict = field(default_factory=dict)
    engine: str = "memory"
    engine_options: dict = field(default_factory=dict)
    cache_rule: str = "fixed"
    cache_bytes: int = 64 << 20
    cache_fraction: float = PAPER_CACHE_FRACTION
    direct_io: bool = False
    durability: str = "async"
    limit: int | None = None
    budgets: tuple = DEFAULT_BUDGETS
    strategies: tuple = DEFAULT_STRATEGIES
    #: strategy name -> its options (sarp's include ``backfill``)
    strategy_options: dict = field(default_factory=dict)
    backfill: str = "sync"

    def describe(self) -> dict:
        """The configuration as plain values (pyperf metadata, reports)."""
        return {"kind": self.kind, "workload_options": self.workload_options,
                "engine_options": self.engine_options, "cache_rule": self.cache_rule,
                "cache_fraction": self.cache_fraction, "direct_io": self.direct_io,
                "durability": self.durability, "limit": self.limit, "backfill": self.backfill}


def _int_list(option: str, text: str, *, allow_unlimited: bool) -> tuple:
    items = [t.strip() for t in str(text).split(",")]
    if not text or any(not t for t in items):
        raise ConfigError(f"option {option}: {text!r} is not a comma-separated list "
                          "(e.g. 1,2,3,4,unlimited)")
    out = []
    for t in items:
        if allow_unlimited and t.lower() in ("unlimited", "inf", "0"):
            out.append(0)
            continue
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"option {option}: {t!r} is not a whole number"
                              + (" or 'unlimited'" if allow_unlimited else "")) from None
        if v < 1:
            raise ConfigError(f"option {option}: {v} must be >= 1"
                              + (" (or 'unlimited')" if allow_unlimited else ""))
        out.append(v)
    if len(set(out)) != len(out):
        raise ConfigError(f"option {option}: {text!r} lists a value twice")
    return tuple(out)


def parse_budgets(text: str) -> tuple:
    """``'1,2,3,4,unlimited'`` -> ``(1, 2, 3, 4, 0)`` (0 = unlimited, sarp's spelling)."""
    return _int_list("--budgets", text, allow_unlimited=True)


def parse_strategies(text: str) -> tuple:
    """``'sarp,ssd-blockhash'`` -> names, each a registered strategy, none twice."""
    names = [t.strip() for t in str(text).split(",")]
    if not text or any(not n for n in names):
        raise ConfigError(f"option --strategies: {text!r} is not a comma-separated list of "
                          "strategy names (e.g. sarp,ssd-blockhash)")
    if len(set(names)) != len(names):
        raise ConfigError(f"option --strategies: {text!r} names a strategy twice")
    reg = get_registry()
    for n in names:
        if n not in reg.names("strategy"):
            raise ConfigError(f"option --strategies: unknown strategy {n!r}; available: "
                              f"{', '.join(reg.names('strategy'))}")
    return tuple(names)


def _parse_fraction(text) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"option --cache-fraction: {text!r} is not a number") from None
    if not (0.0 < v <= 1.0) or math.isnan(v):
        raise ConfigError(f"option --cache-fraction: {text} must be in (0, 1]")
    return v


def _split_strategy_options(kv: dict, strategies: tuple) -> dict:
    """``{'tau': '100', 'segment-hash:S': '32'}`` -> per-strategy dicts; bare keys are sarp's."""
    out: dict = {}
    for key, value in kv.items():
        name, sep, opt = key.rpartition(":")
        name = name if sep else "sarp"
        if not opt:
            raise ConfigError(f"option --strategy-option: {key}={value} has no option name")
        if name not in strategies:
            raise ConfigError(f"option --strategy-option: {key}={value} is for strategy "
                              f"{name!r}, which this sweep does not run "
                              f"({', '.join(strategies)})")
        out.setdefault(name, {})[opt] = value
    return out


def make_config(kind: str, *, workload: str, workload_options: dict | None = None,
                engine: str | None = None, engine_options: dict | None = None,
                cache_rule: str | None = None, cache_bytes: str | None = None,
                cache_fraction: str | None = None, direct_io: bool = False,
                durability: str = "async", limit: int | None = None,
                budgets: str | None = None, strategies: str | None = None,
                strategy_options: dict | None = None, backfill: str = "sync") -> SweepConfig:
    """Check the user's text and build a :class:`SweepConfig`; every problem is one
    :class:`ConfigError` line, raised before any replay starts."""
    if kind not in KINDS:
        raise ConfigError(f"sweep: unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    if budgets is not None and kind != "retrieval":
        raise ConfigError("option --budgets: only the retrieval sweep takes budgets")
    if strategies is not None and kind not in ("strategies", "space"):
        raise ConfigError("option --strategies: only the strategies and space sweeps take a "
                          "strategy list")
    if limit is not None and limit < 1:
        raise ConfigError(f"option --limit: {limit} must be >= 1")
    if backfill not in ("sync", "background"):
        raise ConfigError(f"option --backfill: {backfill!r} is not one of sync, background")
    if cache_rule is not None and cache_rule not in CACHE_RULES:
        raise ConfigError(f"option --cache-rule: {cache_rule!r} is not one of "
                          f"{', '.join(CACHE_RULES)}")
    if cache_rule is None:
        # the side-by-side comparison follows the paper unless a fixed cache is given
        if cache_bytes is not None:
            cache_rule = "fixed"
        elif cache_fraction is not None or kind == "strategies":
            cache_rule = "paper"
        else:
            cache_rule = "fixed"
    if cache_rule == "paper" and cache_bytes is not None:
        raise ConfigError("option --cache-bytes: a fixed cache contradicts --cache-rule paper; "
                          "give one of them")
    if cache_rule == "fixed" and cache_fraction is not None:
        raise ConfigError("option --cache-fraction: only --cache-rule paper takes a fraction")
    reg = get_registry()
    engine = engine or ("lmdb" if kind == "space" else "memory")
    engine_cls = reg.get("engine", engine).factory
    reg.get("workload", workload)
    if kind == "space" and getattr(engine_cls, "volatile", False):
        raise ConfigError(f"option --engine: {engine} keeps nothing on disk; the space sweep "
                          "needs an on-disk engine (lmdb, rocksdb, wiredtiger, packfile, ...)")
    if kind == "strategies":
        names = parse_strategies(strategies) if strategies is not None else DEFAULT_STRATEGIES
    elif kind == "space":
        names = parse_strategies(strategies) if strategies is not None \
            else DEFAULT_SPACE_STRATEGIES
        names = (SPACE_REFERENCE,) + tuple(n for n in names if n != SPACE_REFERENCE)
        for n in names:
            if not getattr(reg.get("strategy", n).factory, "needs_store", False):
                raise ConfigError(f"option --strategies: {n} keeps nothing in the engine; the "
                                  "space sweep compares strategies that store their index")
    else:
        names = ("sarp",)
    cfg = SweepConfig(
        kind=kind, workload=workload, workload_options=dict(workload_options or {}),
        engine=engine, engine_options=dict(engine_options or {}), cache_rule=cache_rule,
        cache_bytes=parse_size("--cache-bytes", cache_bytes if cache_bytes is not None
                               else "64MiB"),
        cache_fraction=(_parse_fraction(cache_fraction) if cache_fraction is not None
                        else PAPER_CACHE_FRACTION),
        direct_io=direct_io, durability=durability, limit=limit,
        budgets=parse_budgets(budgets) if budgets is not None else DEFAULT_BUDGETS,
        strategies=names,
        strategy_options=_split_strategy_options(dict(strategy_options or {}), names),
        backfill=backfill)
    for s in plan(cfg):          # option names and ranges fail now, not mid-sweep
        cls = reg.get("strategy", s.strategy).factory
        parse_options(f"strategy {s.strategy}", cls.options, s.options)
    return cfg


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """One replay of a sweep: ``label`` prefixes its pyperf benchmark names."""

    label: str
    strategy: str
    options: dict


def budget_label(budget: int) -> str:
    return "unlimited" if budget == 0 else str(budget)


def _sarp_base(cfg: SweepConfig) -> dict:
    return {"backfill": cfg.backfill, **cfg.strategy_options.get("sarp", {})}


def plan(cfg: SweepConfig) -> list[Setting]:
    """The settings of ``cfg``'s sweep, in replay order."""
    if cfg.kind == "retrieval":
        base = _sarp_base(cfg)
        return [Setting(f"retrieval-{budget_label(b)}", "sarp", {**base, "max_retrieval": b})
                for b in cfg.budgets]
    if cfg.kind == "ablation":
        base = _sarp_base(cfg)
        return [Setting(f"ablation-{label}", "sarp", {**base, **diff})
                for label, diff in ABLATIONS]
    out = []
    for name in cfg.strategies:
        opts = _sarp_base(cfg) if name == "sarp" else dict(cfg.strategy_options.get(name, {}))
        out.append(Setting(name, name, opts))
    return out


# ----------------------------------------------------------------------------- results
@dataclass
class Row:
    """One setting's replay and the figures a sweep derives from it."""

    setting: Setting
    result: ReplayResult
    #: unique blocks the oracle indexed in the same replay (the per-block denominator)
    indexed_blocks: int
    #: cache bytes the engine was opened with (None: the strategy has no store)
    engine_cache_bytes: int | None

    @property
    def stats(self) -> dict:
        return self.result.strategy_stats

    @property
    def loss(self) -> float:
        return self.result.hit_rate_loss

    @property
    def lost_tokens(self) -> int:
        return self.result.oracle_hit_tokens - self.result.hit_tokens

    @property
    def memory_bytes(self) -> int:
        """Routing bytes for sarp (live directory state), in-memory bytes otherwise."""
        s = self.stats
        return int(s.get("routing_bytes", s.get("memory_bytes", 0)))

    @property
    def memory_bytes_per_block(self) -> float:
        return self.memory_bytes / self.indexed_blocks if self.indexed_blocks else 0.0


@dataclass
class Sizing:
    """ssd-blockhash's store, learnt by replaying it (cache rule ``paper``)."""

    entries: int
    logical_bytes: int
    disk_bytes: int
    cache_bytes: int


@dataclass
class SweepResult:
    config: SweepConfig
    rows: list
    sizing: Sizing | None
    #: the cache every SSD-backed setting was given
    cache_bytes: int

    def row(self, label: str) -> Row:
        for r in self.rows:
            if r.setting.label == label:
                return r
        raise KeyError(label)

    @property
    def reference(self) -> Row:
        """Strategies sweep: the row ratios are taken from (the first strategy)."""
        return self.rows[0]

    def throughput_ratio(self, row: Row) -> float:
        """Reference throughput / ``row``'s throughput (how many times faster)."""
        t = row.result.throughput
        return self.reference.result.throughput / t if t else math.inf

    def latency_ratio(self, row: Row, which: str) -> float:
        """``row``'s mean latency / the reference's (how many times slower ``row`` is)."""
        ref = self.reference.result.latency(which)
        return row.result.latency(which) / ref if ref else math.inf

    def table(self) -> str:
        return {"retrieval": _retrieval_table, "ablation": _ablation_table,
                "strategies": _strategies_table, "space": _space_table}[self.config.kind](self)

    def disk_ratio(self, row: Row) -> float:
        """Space sweep: ``row``'s data bytes on disk over the reference's."""
        ref = self.reference.result.store_bytes
        return row.result.store_bytes / ref if ref else math.inf

    def entries_ratio(self, row: Row) -> float:
        """Space sweep: ``row``'s stored block-metadata entries over the reference's."""
        ref = self.reference.stats.get("stored_block_entries", 0)
        return row.stats.get("stored_block_entries", 0) / ref if ref else math.inf

    def suites(self) -> tuple[list, list]:
        return _suites(self)

    def write(self, output: str) -> tuple[str, str]:
        """Write OUT.json (times) and OUT.counts.json (counts, sizes); returns both paths."""
        times, counts = self.suites()
        pyperf_io.write_suite(output, times)
        cpath = pyperf_io.counts_path(output)
        pyperf_io.write_suite(cpath, counts)
        return output, cpath


# ----------------------------------------------------------------------------- running
def _make_workload(cfg: SweepConfig):
    return get_registry().get("workload", cfg.workload).factory(**cfg.workload_options)


def size_store(cfg: SweepConfig, workload, *, quiet: bool = True) -> Sizing:
    """Replay ssd-blockhash (no oracle) on ``cfg``'s engine and apply the cache rule.

    The sizing replay itself runs with the fixed ``cfg.cache_bytes`` (64 MiB by
    default): the cache changes how fast it runs, never how many entries it writes.
    """
    built = build("ssd-blockhash", cfg.engine, store_dir=None, cache_bytes=cfg.cache_bytes,
                  direct_io=cfg.direct_io, durability=cfg.durability,
                  engine_options=cfg.engine_options)
    try:
        res = replay(built.strategy, workload, limit=cfg.limit, quiet=quiet,
                     desc="[sizing] ssd-blockhash", check=False)
        entries = int(res.strategy_stats["entries"])
    finally:
        built.close()
    logical = entries * (KEY_BYTES + META_SIZE)
    return Sizing(entries, logical, res.store_bytes, int(round(cfg.cache_fraction * logical)))


def run_setting(cfg: SweepConfig, setting: Setting, workload, cache_bytes: int, *,
                quiet: bool = True, desc: str | None = None) -> Row:
    """Replay one setting on a fresh store with its own oracle shadow."""
    from prefixbench.plugins.radix import RadixStrategy

    built = build(setting.strategy, cfg.engine, strategy_options=setting.options,
                  store_dir=None, cache_bytes=cache_bytes, direct_io=cfg.direct_io,
                  durability=cfg.durability, engine_options=cfg.engine_options)
    oracle = RadixStrategy(meta_size=built.strategy.meta_size)
    try:
        engine_cache = built.store.config.cache_bytes if built.store is not None else None
        res = replay(built.strategy, workload, oracle=oracle, limit=cfg.limit, quiet=quiet,
                     desc=desc or setting.label)
        indexed = int(oracle.stats()["entries"])
    finally:
        oracle.close()
        built.close()
    return Row(setting, res, indexed, engine_cache)


def run_sweep(cfg: SweepConfig, *, quiet: bool = True) -> SweepResult:
    """Run every setting of ``cfg`` one after the other (one request thread)."""
    workload = _make_workload(cfg)
    sizing = None
    cache = cfg.cache_bytes
    if cfg.cache_rule == "paper":
        sizing = size_store(cfg, workload, quiet=quiet)
        cache = sizing.cache_bytes
    settings = plan(cfg)
    rows = []
    for i, s in enumerate(settings, 1):
        rows.append(run_setting(cfg, s, workload, cache, quiet=quiet,
                                desc=f"[{i}/{len(settings)}] {s.label}"))
    return SweepResult(cfg, rows, sizing, cache)


# ----------------------------------------------------------------------------- tables
def _pct(x: float) -> str:
    """Losses run from ~1e-6 to ~1e-3 of the oracle's hits: five decimals in percent."""
    return f"{x * 100:.5f}%"


def _num(x, digits=2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _ratio(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}x"


def _change(new: float, old: float) -> str:
    if not old:
        return "n/a"
    return f"{(new / old - 1) * 100:+.1f}%"


def _conditions(res: SweepResult) -> str:
    cfg = res.config
    rows = res.rows
    stored = any(r.engine_cache_bytes is not None for r in rows)
    wl = cfg.workload
    if cfg.workload_options:
        wl += f" ({', '.join(f'{k}={v}' for k, v in cfg.workload_options.items())})"
    reqs = f"{rows[0].result.requests:,} requests" + (f" (--limit {cfg.limit})" if cfg.limit
                                                      else "")
    parts = [f"workload {wl}", reqs,
             "one request thread"]
    line2 = f"engine {cfg.engine}, direct I/O {'on' if cfg.direct_io else 'off'}, " \
            f"durability {cfg.durability}, cache {fmt_bytes(res.cache_bytes)}"
    if res.sizing is not None:
        s = res.sizing
        line2 += (f" = {cfg.cache_fraction:.0%} of ssd-blockhash's logical store "
                  f"({s.entries:,} entries x {KEY_BYTES + META_SIZE} B = "
                  f"{fmt_bytes(s.logical_bytes)}; {fmt_bytes(s.disk_bytes)} on disk)")
    if not stored:
        line2 += " (no setting uses the engine)"
    sarp = [r.setting.options for r in rows if r.setting.strategy == "sarp"]
    if sarp:
        line2 += f"; sarp backfill={sarp[0].get('backfill', cfg.backfill)}"
    return ", ".join(parts) + "\n" + line2


def _retrieval_table(res: SweepResult) -> str:
    header = ("setting", "max_retrieval", "hit rate", "oracle", "loss vs oracle", "lost tokens",
              "retrievals/query", "store reads/match", "match mean", "insert mean",
              "false hits")
    rows = []
    for r in res.rows:
        x = r.result
        rows.append((r.setting.label, budget_label(r.setting.options["max_retrieval"]),
                     f"{x.hit_rate:.4%}", f"{x.oracle_hit_rate:.4%}", _pct(r.loss),
                     f"{r.lost_tokens:,}", _num(r.stats.get("retrievals_per_query"), 3),
                     _num(x.reads_per_match, 2), fmt_seconds(x.latency("match")),
                     fmt_seconds(x.latency("insert")), x.false_hits))
    return (f"retrieval-budget sweep (sarp, paper Fig. 9)\n{_conditions(res)}\n\n"
            + format_table(header, rows))


def _ablation_table(res: SweepResult) -> str:
    header = ("setting", "cand. before filter", "after filter", "retrieved", "retrievals/query",
              "routing entries", "routing bytes", "B/block", "loss vs oracle", "false hits")
    rows = []
    for r in res.rows:
        s = r.stats
        rows.append((r.setting.label, _num(s.get("candidates_before_filtering")),
                     _num(s.get("candidates_after_filtering")), _num(s.get("candidates_retrieved")),
                     _num(s.get("retrievals_per_query"), 3), f"{s.get('entries', 0):,}",
                     f"{r.memory_bytes:,}", _num(r.memory_bytes_per_block),
                     _pct(r.loss), r.result.false_hits))
    out = [f"ablation (sarp, paper Fig. 10 and Table 4)\n{_conditions(res)}\n",
           format_table(header, rows)]
    labels = {r.setting.label for r in res.rows}
    if "ablation-full" in labels:
        full = res.row("ablation-full").stats
        fb = res.row("ablation-full").memory_bytes
        eff = []
        if "ablation-no-refinement" in labels:
            nr = res.row("ablation-no-refinement")
            eff.append(("refinement", "candidates before filtering "
                        + _change(full["candidates_before_filtering"],
                                  nr.stats["candidates_before_filtering"])
                        + ", routing bytes " + _change(fb, nr.memory_bytes)))
        eff.append(("filtering", f"candidates {_num(full['candidates_before_filtering'])} -> "
                    f"{_num(full['candidates_after_filtering'])} after filtering -> "
                    f"{_num(full['candidates_retrieved'])} retrieved per routing entry"))
        if "ablation-no-pruning" in labels:
            npr = res.row("ablation-no-pruning")
            eff.append(("pruning", "routing bytes " + _change(fb, npr.memory_bytes)
                        + ", retrievals/query "
                        + _change(full["retrievals_per_query"], npr.stats["retrievals_per_query"])))
        out.append("\neffect of each mechanism (full design vs that mechanism off)\n"
                   + format_table(("mechanism", "effect"), eff))
    return "\n".join(out)


def _space_table(res: SweepResult) -> str:
    ref = res.reference.setting.label
    header = ("strategy", "data on disk", "engine log", "logical bytes", "records",
              "space amp", "disk ÷ " + ref, "block-metadata entries", "entries ÷ " + ref,
              "loss vs oracle", "false hits")
    rows = []
    for r in res.rows:
        x = r.result
        rows.append((r.setting.label, fmt_bytes(x.store_bytes), fmt_bytes(x.store_log_bytes),
                     fmt_bytes(x.logical_bytes), f"{x.store_records:,}",
                     f"{x.space_amplification:.2f}x", _ratio(res.disk_ratio(r)),
                     f"{int(r.stats.get('stored_block_entries', 0)):,}",
                     _ratio(res.entries_ratio(r)), _pct(r.loss), x.false_hits))
    return (f"space amplification (paper section 6.6, Table 5)\n{_conditions(res)}\n\n"
            + format_table(header, rows)
            + f"\n\ndata on disk: allocated blocks after a flush, the engine's logs apart; "
            f"logical bytes: live keys (8 B) + values; space amp: data on disk ÷ logical bytes; "
            f"block-metadata entries: block records the store holds, a block counted once per "
            f"record that carries it ({res.rows[0].indexed_blocks:,} unique blocks indexed).")


def _strategies_table(res: SweepResult) -> str:
    ref = res.reference.setting.label
    header = ("strategy", "req/s", f"{ref} ÷ it", "match mean", "match ÷ " + ref,
              "insert mean", "insert ÷ " + ref, "loss vs oracle", "false hits",
              "store reads/match", "mem B/block", "engine cache")
    rows = []
    for r in res.rows:
        x = r.result
        rows.append((r.setting.label, f"{x.throughput:,.0f}", _ratio(res.throughput_ratio(r)),
                     fmt_seconds(x.latency("match")), _ratio(res.latency_ratio(r, "match")),
                     fmt_seconds(x.latency("insert")), _ratio(res.latency_ratio(r, "insert")),
                     _pct(r.loss), x.false_hits, _num(x.reads_per_match),
                     _num(r.memory_bytes_per_block),
                     "-" if r.engine_cache_bytes is None else fmt_bytes(r.engine_cache_bytes)))
    out = [f"strategies side by side (paper section 6.2)\n{_conditions(res)}\n",
           format_table(header, rows),
           f"\n{ref} ÷ it: {ref}'s request throughput over this strategy's; match/insert ÷ "
           f"{ref}: this strategy's mean latency over {ref}'s.  mem B/block: in-memory bytes "
           f"(sarp: routing directory) per unique indexed block ({res.rows[0].indexed_blocks:,})."]
    sarp = [r for r in res.rows if r.setting.strategy == "sarp"]
    if sarp:
        s = sarp[0].stats
        t4 = [("candidates per routing entry before filtering",
               _num(s["candidates_before_filtering"])),
              ("candidates after filtering", _num(s["candidates_after_filtering"])),
              ("candidates actually retrieved", _num(s["candidates_retrieved"])),
              ("segment retrievals per query", _num(s["retrievals_per_query"], 3)),
              ("routing entries", f"{s['entries']:,}"),
              ("routing bytes (per indexed block)",
               f"{sarp[0].memory_bytes:,} ({_num(sarp[0].memory_bytes_per_block)} B/block)"),
              ("segments (copied, extended in place)",
               f"{s['segments']:,} ({s['segments_copied']:,}, {s['segments_extended']:,})")]
        out.append("\nsarp, paper Table 4\n" + format_table(("figure", "value"), t4))
    return "\n".join(out)


# ----------------------------------------------------------------------------- pyperf
#: figures only a sweep knows (strategy counters arrive from pyperf_io as ``index-*``);
#: each is added to the counts suite unless pyperf_io already exports that name
_SWEEP_COUNTS = (
    ("lost-tokens", "integer", lambda r: r.lost_tokens),
    ("hit-rate-loss-ppm", "integer", lambda r: r.loss * 1e6),
    ("false-hits", "integer", lambda r: r.result.false_hits),
    ("indexed-blocks", "integer", lambda r: r.indexed_blocks),
    ("memory-bytes", "byte", lambda r: r.memory_bytes),
    ("memory-bytes-per-indexed-block", "integer", lambda r: r.memory_bytes_per_block),
    ("engine-cache-bytes", "byte", lambda r: r.engine_cache_bytes or 0),
)
#: space sweep only: ratios to the reference, in parts per million (pyperf values are numbers)
_SPACE_COUNTS = (
    ("disk-ratio-to-reference-ppm", "integer", lambda res, r: res.disk_ratio(r) * 1e6),
    ("entries-ratio-to-reference-ppm", "integer", lambda res, r: res.entries_ratio(r) * 1e6),
)


def _prefixed(bench, prefix: str):
    return pyperf_io.renamed(bench, f"{prefix}-{bench.get_name()}")


def _suites(res: SweepResult) -> tuple[list, list]:
    cfg = res.config
    times, counts = [], []
    for r in res.rows:
        s = r.setting
        config = {**cfg.describe(), "setting": s.label, "strategy_options": s.options,
                  "cache_bytes": r.engine_cache_bytes}
        md = pyperf_io.run_metadata(s.strategy, cfg.engine if r.engine_cache_bytes is not None
                                    else None, cfg.workload, config)
        md.update({"sweep": cfg.kind, "setting": s.label})
        if r.engine_cache_bytes is not None:
            md["cache_bytes"] = r.engine_cache_bytes
        t, c = pyperf_io.replay_suites(r.result, md)
        times += [_prefixed(b, s.label) for b in t]
        c = [_prefixed(b, s.label) for b in c]
        have = {b.get_name() for b in c}
        for name, unit, f in _SWEEP_COUNTS:
            full = f"{s.label}-{name}"
            if full not in have:
                b = pyperf_io._one_shot(full, unit, f(r), md)
                if b is not None:
                    c.append(b)
        if cfg.kind == "space":
            for name, unit, f in _SPACE_COUNTS:
                b = pyperf_io._one_shot(f"{s.label}-{name}", unit, f(res, r), md)
                if b is not None:
                    c.append(b)
        counts += c
    if res.sizing is not None:
        md = pyperf_io.run_metadata("ssd-blockhash", cfg.engine, cfg.workload,
                                    {**cfg.describe(), "setting": "sizing"})
        md.update({"sweep": cfg.kind, "setting": "sizing"})
        for name, unit, v in (("sizing-ssd-blockhash-entries", "integer", res.sizing.entries),
                              ("sizing-ssd-blockhash-logical-bytes", "byte",
                               res.sizing.logical_bytes),
                              ("sizing-ssd-blockhash-disk-bytes", "byte", res.sizing.disk_bytes),
                              ("sizing-cache-bytes", "byte", res.sizing.cache_bytes)):
            b = pyperf_io._one_shot(name, unit, v, md)
            if b is not None:
                counts.append(b)
    return times, counts
