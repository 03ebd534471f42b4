"""The result schema: every figure prefixbench writes, defined once.

A *figure* is one measured quantity: its schema name, its unit, its kind (what
it is about: latency, hit rate, space, recovery, ...), which direction is
better, and what it means.  Writers emit figures as pyperf benchmarks; readers
(``prefixbench.reports``) find them again through this module and nothing else.

Names
    A figure's schema name is the pyperf benchmark name the harness writes
    (``match-latency-mean``, ``store-bytes``, ``recovery-index``).  Sweeps
    prefix it with the setting, runs above one thread with ``threads-N-``
    (``sarp-threads-2-match-latency-mean``); :func:`parse_name` strips both,
    using the ``setting`` and ``threads`` metadata.  Families with a variable
    part are patterns (``index-<counter>``, ``match-time-<phase>``,
    ``restore-<path>-<point>``).  Figures that today live only in the
    metadata or the CSV row get a schema name too, and :data:`FIGURES` records
    each place they are written today (``throughput_rps`` in the metadata,
    ``ops_per_s`` in the CSV and the reciprocal of ``replay-time-per-request``
    are all ``request-throughput``), so suites written before the schema read
    the same as new ones.  ``workload describe`` and ``crashtest`` print
    ``--json`` documents too; their ``--json`` keys are mapped too (``workload-*``,
    ``crash-*``, :func:`from_json`), and with ``-o`` they write those names
    (a crashtest row's prefixed ``STRATEGY-ENGINE-``, its setting), all in
    one file, with the metadata ``command`` = ``crashtest`` / ``describe``.

Units
    ``seconds``, ``count``, ``bytes``, ``ratio`` (a plain number, 1 = equal),
    ``ppm`` (parts per million), ``per-second``, ``flag`` (0 or 1).  pyperf
    knows only ``second``, ``byte`` and ``integer``: :data:`PYPERF_UNIT`.

Version
    Every benchmark written through the schema carries the metadata
    ``prefixbench_schema`` = :data:`SCHEMA_VERSION`.  A suite without it is
    version 0 (written before the schema) and is read through the mappings
    above.  A version above :data:`SCHEMA_VERSION` is refused with one line.

Zeros
    pyperf refuses a value of 0, so a figure whose value is 0 (no false hits,
    no loss) has no benchmark.  Writers list such figures, by full benchmark
    name, space-separated, in the metadata key ``zero_figures`` of the
    benchmarks they do write (:func:`zero_metadata`); readers give each listed
    name one value 0 per run repeat that lists it.  Metadata figures
    (``false_hits``, ``hit_rate_loss``) carry their zeros themselves.

Repeats
    A figure made from repeated runs keeps every run's value; :class:`Reading`
    gives the median with the min-max.

Writers
    What a writer adds to every benchmark's metadata: :func:`schema_metadata`
    (the version), :func:`zero_metadata` of the figures whose value was 0,
    and the machine under :data:`MACHINE_KEYS` (CPU model, cores, RAM, the
    store's device, the allocator), which reports print in every caption.  Benchmark names
    stay as they are; a figure whose pyperf unit differs from
    :attr:`Figure.pyperf_unit` (``memory-bytes-per-indexed-block``, written
    as ``integer`` before schema version 1) is read the same.

Pools
    A bounded-pool run (``--pool-blocks``) counts hits on the routed worker:
    ``hit-tokens``, ``oracle-hit-tokens`` and ``token-hit-rate`` are then the
    hit rate at capacity beside the oracle with the same pools.  Its
    metadata carries :data:`POOL_KEYS` and the sampled series
    :data:`SERIES_KEY` (a JSON list of ``[requests so far, index entries,
    blocks held in all pools]``), which is not a figure.

Sweep notes
    What a sweep prints around its table that is not a figure rides in the
    metadata under :data:`SWEEP_NOTE_KEYS`; a suite written before a key
    existed lacks it, and the report leaves out what needs it (the paper
    column of Table 4, the paper's thread counts), never fails on it.

Placement
    ``placement frontier -o`` writes ``placement-<tag>-<measure>`` per policy
    and budget (tag: the policy with ``:``/``/`` as ``-``, then ``-m<budget>``)
    and the replay's own figures (``placement-requests``, ``-hits-eval``, ...);
    the rows' order and policy names ride in :data:`PLACEMENT_KEYS`.  A
    frontier suite written before those keys lacks them (and the replay
    figures but two, read from its ``hits_eval`` and ``no_reuse_blocks``
    metadata): the report shows its rows under their tags.  ``solve -o`` and
    ``bench -o`` write ``placement-solve-*`` and ``placement-bench-n<N>-m<M>-*``
    with the metadata ``command`` = ``placement-solve`` / ``placement-bench``.

Commands without a replay
    ``hash-bench``, ``engine-bench`` and ``plugins`` write ``-o OUT.json``
    too, with the metadata ``command`` set to the command: ``hash-*``
    figures, ``engine-*`` figures, and ``plugins-<kind>`` counts with the
    list itself in :data:`PLUGINS_KEY`.

CSV
    ``run --csv`` rows are rendered from the run's suites by
    ``prefixbench.reports.show.csv_row``; :data:`CSV_COLUMNS` are the columns,
    unchanged from before the schema, and each figure's :attr:`Figure.csv`
    records which column holds it (``ops_per_s`` is ``request-throughput``,
    ``match_mean_us`` is ``match-latency-mean`` in microseconds, ...).

This module is pure: it reads any object shaped like a loaded
``pyperf.BenchmarkSuite`` (``get_benchmarks()``; each benchmark
``get_name()``, ``get_runs()``; each run ``values``, ``get_metadata()``) and
imports nothing of the harness.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from prefixbench.errors import PrefixbenchError

#: version written by this prefixbench; readers accept 0 (no key) through this
SCHEMA_VERSION = 1
#: metadata key carrying the schema version
VERSION_KEY = "prefixbench_schema"
#: metadata key listing benchmarks whose value was 0 (space-separated full names)
ZEROS_KEY = "zero_figures"

#: metadata keys naming the machine (CPU model, cores, RAM, the store's device) and the
#: malloc the process ran on (a preloaded jemalloc changes RocksDB's CPU per read)
MACHINE_KEYS = ("cpu_model_name", "cpu_count", "mem_total", "store_device", "allocator")

#: metadata keys of a bounded-pool run's configuration
POOL_KEYS = ("pool_blocks", "pool_evict", "pool_workers", "pool_route", "pool_route_seed")
#: metadata key of a pool run's index-entries series
SERIES_KEY = "index_entries_series"

#: metadata keys the sweeps add for what they print around their tables
SWEEP_NOTE_KEYS = {
    "cap_rule": "the cap rule's line, printed above the strategies table",
    "table4_paper": "JSON [before, after, retrieved]: the paper's Table 4 for the workload",
    "calibration_tolerance": "share of the paper's value a Table 4 figure must be within",
    "span_share_paper": "the paper's share of spans with more than three alternatives",
    "span_share_max_blocks": "above this many indexed blocks the span share is not measured",
    "paper_request_threads": "request threads of the paper's setup (section 6.1)",
    "paper_rocksdb_threads": "RocksDB background threads of the paper's setup",
    "paper_disk_need": "--scale paper below full size: the pre-flight's disk estimate, bytes",
    "paper_memory_need": "--scale paper below full size: the memory estimate, bytes",
    "index_text": "JSON of a strategy's text counters (sarp's geometry)",
    "capacity_blocks": "capacity sweep: the setting's pool blocks per worker (or unbounded)",
    "exact": "capacity sweep: 1 when the strategy is exact (its curve is checked too)",
    "stack_inclusion_checked": "capacity sweep: 1 when the stack-inclusion check applies",
    "capacity_notes": "capacity sweep: JSON list of the note lines above the table",
    "device_watch": "JSON: the device's 4 KiB direct-read latency between each repeat's "
                    "turns (repeat -1: before any store was loaded)",
}
#: metadata key of a ``plugins -o`` suite holding the plugin list (JSON)
PLUGINS_KEY = "plugins"

#: metadata keys the ``placement`` suites add for what their tables need besides figures
PLACEMENT_KEYS = {
    "placement_rows": "frontier: JSON [[policy, budget or null, tag], ...] in table order; "
                      "tag names the row's placement-<tag>-* figures",
    "placement_positions": "solve: JSON list of the chosen checkpoint positions",
    "placement_points": "bench: JSON [[N, M], ...] in table order",
}

#: ``run --csv`` columns (db_bench style), in order
CSV_COLUMNS = (
    "date", "commit", "strategy", "engine", "workload", "threads", "requests", "ops_per_s",
    "match_mean_us", "match_p50_us", "match_p99_us", "match_p999_us",
    "insert_mean_us", "insert_p50_us", "insert_p99_us", "insert_p999_us",
    "hit_rate", "oracle_hit_rate", "loss_vs_oracle", "false_hits", "store_reads_per_match",
    "bytes_on_disk", "index_memory_bytes",
)

#: schema unit -> pyperf unit
PYPERF_UNIT = {"seconds": "second", "bytes": "byte", "count": "integer", "ratio": "integer",
               "ppm": "integer", "per-second": "integer", "flag": "integer"}


class SchemaError(PrefixbenchError):
    """A result file the schema cannot read (other tool, unknown version, bad figure)."""


@dataclass(frozen=True)
class Figure:
    """One figure: schema name (or pattern with ``<part>`` fields), unit, kind, meaning.

    ``better`` is ``lower``, ``higher`` or ``""`` (no direction: a size, a count
    of requests); ``compare --fail-above`` only judges figures with a direction.
    ``metadata``/``csv``: today's metadata keys and CSV columns holding the same
    figure, each with the factor that turns their value into the schema unit.
    """

    name: str
    unit: str
    kind: str
    meaning: str
    better: str = ""
    metadata: tuple = ()
    csv: tuple = ()
    #: a benchmark whose values give this figure as their reciprocal
    reciprocal_of: str = ""
    #: keys of today's ``--json`` outputs (crashtest rows, workload describe) for it
    json: tuple = ()

    @property
    def pyperf_unit(self) -> str:
        return PYPERF_UNIT[self.unit]

    @property
    def is_pattern(self) -> bool:
        return "<" in self.name

    def regex(self) -> re.Pattern:
        parts = re.split(r"<(\w+)>", self.name)
        out = ""
        for i, p in enumerate(parts):
            out += re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)"
        return re.compile(out + r"\Z")


def _latencies():
    out = []
    for which, what in (("match", "one prefix match"), ("insert", "one prefix insert"),
                        ("request", "one request (match then insert)")):
        for label, stat in (("mean", "mean"), ("p50", "median"), ("p90", "90th percentile"),
                            ("p99", "99th percentile"), ("p999", "99.9th percentile"),
                            ("max", "maximum")):
            csv = ((f"{which}_{label}_us", 1e-6),) if which != "request" and label not in (
                "p90", "max") else ()
            out.append(Figure(f"{which}-latency-{label}", "seconds", "latency",
                              f"{stat} latency of {what} during the replay", "lower", csv=csv))
    return out


def _pools():
    """Bounded-pool runs (``--pool-blocks``, ``sweep capacity``)."""
    out = [Figure(f"remove-latency-{label}", "seconds", "latency",
                  f"{stat} latency of one remove call (a pool's evictions) during the replay",
                  "lower")
           for label, stat in (("mean", "mean"), ("p50", "median"),
                               ("p90", "90th percentile"), ("p99", "99th percentile"),
                               ("p999", "99.9th percentile"), ("max", "maximum"))]
    out += [
        Figure("evictions-per-request", "count", "eviction",
               "blocks evicted from the workers' pools per request"),
        Figure("removals-per-request", "count", "eviction",
               "block availabilities the index's remove calls removed, per request"),
        Figure("any-worker-hit-tokens", "count", "hit-rate",
               "prompt tokens available on any worker (the index's answer), pool runs"),
        Figure("oracle-any-worker-hit-tokens", "count", "hit-rate",
               "the oracle's prompt tokens available on any worker, pool runs"),
        Figure("missing-locations", "count", "correctness",
               "matched blocks whose locations lack a worker the oracle has", "lower"),
        Figure("pool-blocks-held", "count", "eviction",
               "blocks held in all workers' pools at the end of the run"),
        Figure("stack-inclusion-violations", "count", "correctness",
               "capacity sweep (LRU, one worker): capacities whose hit rate fell below a "
               "smaller capacity's", "lower"),
    ]
    return out


def _recovery():
    parts = (("total", "process start to the first correctly served match (child clock)"),
             ("process-start-to-first-match", "wall time of the recovering process, "
                                              "interpreter start included"),
             ("plugin-registry", "importing plugins in the fresh process"),
             ("engine-open", "reopening the engine"),
             ("first-match", "the first match after recovery"),
             ("init", "strategy initialisation before the snapshot is read"),
             ("load", "reading the snapshot file"),
             ("deserialize", "decoding the snapshot's records"),
             ("rebuild", "rebuilding the in-memory index"),
             ("index", "load + init + deserialize + rebuild: the paper's recovery time"))
    return [Figure(f"recovery-{n}", "seconds", "recovery", m, "lower") for n, m in parts]


def _describe():
    """``workload describe``: a workload's characteristics (its ``--json`` keys)."""
    return [Figure(f"workload-{n}", unit, "workload", m, json=(key,)) for n, unit, key, m in (
        ("block-size", "count", "block_size", "tokens per block"),
        ("requests", "count", "requests", "requests of the workload"),
        ("prompt-tokens", "count", "prompt_tokens", "prompt tokens of every request"),
        ("span-blocks", "count", "span_blocks", "blocks per 256-token span"),
        ("routing-observations", "count", "routing_observations",
         "base routing points observed"),
        ("next-block-observations", "count", "next_block_observations",
         "routing points of the Fig. 3 measurement (the top 10%)"),
        ("sessions", "count", "sessions", "sessions of the workload"),
        ("turns", "count", "turns", "turns (requests) of the workload"),
        ("inserted-tokens", "count", "inserted_tokens", "tokens inserted over the replay"),
        ("unique-blocks", "count", "unique_blocks", "unique blocks the replay indexes"),
        ("mean-prompt-tokens", "count", "mean_prompt_tokens", "mean prompt tokens per request"),
        ("exact-hit-rate", "ratio", "exact_hit_rate", "token hit rate of exact matching"),
        ("spans", "count", "spans", "256-token spans measured"),
        ("span-alternatives-mean", "count", "span_alternatives_mean",
         "mean alternatives per span"),
        ("candidates-per-routing-entry", "count", "candidates_per_routing_entry",
         "mean posting-list size at a base routing point"),
        ("next-block-rule-out", "ratio", "next_block_rule_out",
         "share of candidates one more routing point rules out (paper Fig. 3)"))]


def _crashtest():
    """``crashtest``: one row per engine and strategy (its summary keys)."""
    return [Figure(f"crash-{n}", "count", "correctness", m, better, json=(key,))
            for n, key, m, better in (
                ("kill-points", "iterations", "random kill points tried", ""),
                ("killed", "killed", "children killed mid-replay", ""),
                ("acked-inserts", "acked", "acknowledged inserts checked after recovery", ""),
                ("blocks-checked", "checked_blocks", "blocks checked after recovery", ""),
                ("lost-inserts", "lost", "acknowledged inserts not matchable after recovery",
                 "lower"),
                ("false-matches", "false", "matches returning a block never inserted",
                 "lower"),
                ("recovery-failures", "recovery_failures", "recoveries that failed", "lower"))]


def _hashbench():
    """``hash-bench``: chained block hashing, compiled path against the Python reference."""
    return [Figure(f"hash-{n}", unit, "hashing", m, better, json=(key,) if key else ())
            for n, unit, key, m, better in (
                ("compiled-tokens-per-second", "per-second", "cython_tokens_per_s",
                 "tokens per second of the compiled chained hash, best of 3, one core",
                 "higher"),
                ("python-tokens-per-second", "per-second", "python_tokens_per_s",
                 "tokens per second of the pure-Python reference, one core", "higher"),
                ("speedup", "ratio", "speedup", "compiled tokens/s over Python tokens/s",
                 "higher"),
                ("compiled-tokens", "count", "cython_tokens", "tokens the compiled path "
                 "hashed per pass", ""),
                ("python-tokens", "count", "python_tokens", "tokens the Python reference "
                 "hashed", ""),
                # its key is also workload describe's: hashbench names it itself
                ("block-size", "count", None, "tokens per block", ""))]


def _enginebench():
    """``engine-bench``: cost per key of point and batched gets on one engine."""
    out = [Figure(f"engine-{n}", "seconds", "engine", m, "lower", json=(key,))
           for n, key, m in (
               ("get-latency", "get_s_per_key", "seconds per key of a point get, best pass"),
               ("get-latency-median", "get_s_per_key_median",
                "seconds per key of a point get, median pass"),
               ("get-many-latency", "get_many_s_per_key",
                "seconds per key of a batched get_many, best pass"),
               ("get-many-latency-median", "get_many_s_per_key_median",
                "seconds per key of a batched get_many, median pass"))]
    out += [Figure(f"engine-{n}", unit, "engine", m, json=(key,)) for n, unit, key, m in (
        ("keys", "count", "n_keys", "keys the store was filled with"),
        ("value-bytes", "bytes", "value_size", "bytes of each value"),
        ("batch", "count", "batch", "keys per get_many call"),
        ("keys-per-pass", "count", "keys_per_pass", "keys looked up per timed pass"))]
    return out


def _placement():
    """``placement frontier`` (the replay) and ``placement solve``."""
    out = [Figure(f"placement-{n}", unit, "placement", m, metadata=md)
           for n, unit, m, md in (
               ("requests", "count", "frontier: requests replayed", ()),
               ("entries", "count", "frontier: retained entries (new root-to-node paths)",
                ()),
               ("entry-blocks-mean", "count", "frontier: mean blocks per entry", ()),
               ("block-size", "count", "frontier: tokens per block", ()),
               ("hits-fit", "count", "frontier: hits the placements were fitted on", ()),
               ("hits-eval", "count", "frontier: hits the placements were evaluated on",
                (("hits_eval", 1.0),)),
               ("no-reuse-blocks", "count", "frontier: mean recompute per hit without any "
                "checkpoint, blocks", (("no_reuse_blocks", 1.0),)),
               ("dense-ckpt", "count", "frontier: checkpoints per entry of a state at every "
                "position", ()),
               ("state-bytes", "bytes", "frontier: bytes of one checkpoint under the model",
                ()),
               ("kv-bytes-per-token", "bytes", "frontier: dense attention KV bytes per token "
                "under the model", ()))]
    out += [Figure(f"placement-solve-{n}", "count", "placement", m, better)
            for n, m, better in (
                ("expected-recompute", "solve: expected recompute, positions", "lower"),
                ("no-reuse", "solve: expected recompute without checkpoints", ""),
                ("dense", "solve: expected recompute with a state at every position", ""),
                ("n", "solve: positions N of the depth histogram", ""),
                ("budget", "solve: the budget M after clamping to N", ""),
                ("positions", "solve: checkpoints used", ""))]
    return out


def _arrival():
    """Open-loop arrival (``arrival``, ``sweep arrival``, ``run --arrival trace``)."""
    out = [Figure(f"match-latency-{n}", "seconds", "latency", m, "lower") for n, m in (
        ("queued-p50", "median match completion minus the request's due time (queueing "
         "included; from the issuer's wake-up when an issuer was early), open loop"),
        ("queued-p99", "99th percentile of that queued match latency"),
        ("queued-p999", "99.9th percentile of that queued match latency"),
        ("service-p50", "median of the match call alone, open loop"))]
    out += [Figure("offered-load", "per-second", "throughput", "requests per second the "
                   "scaled trace offers", metadata=(("offered_rps", 1.0),)),
            Figure("achieved-load", "per-second", "throughput", "requests per second served "
                   "until the last one finished", "higher",
                   metadata=(("achieved_rps", 1.0),)),
            Figure("late-starts", "count", "throughput", "requests an issuer reached after "
                   "their due time", "lower")]
    out += [Figure(f"issue-lateness-{q}", "seconds", "latency", f"{m} of how late an issuer "
                   "that reached its request early started it (the harness's timing)")
            for q, m in (("p50", "median"), ("p99", "99th percentile"))]
    return out


#: every figure, exact names first, patterns last
FIGURES: tuple = tuple([
    Figure("replay-time-per-request", "seconds", "throughput",
           "replay time (match + insert) per request: 1 / request throughput", "lower"),
    Figure("request-throughput", "per-second", "throughput",
           "requests per second of match + insert time", "higher",
           metadata=(("throughput_rps", 1.0),), csv=(("ops_per_s", 1.0),),
           reciprocal_of="replay-time-per-request"),
    *_latencies(),
    Figure("match-latency-warm", "seconds", "latency",
           "warmed match latency measured by pyperf.Runner workers", "lower"),
    Figure("requests", "count", "workload", "requests replayed", csv=(("requests", 1.0),)),
    Figure("prompt-tokens", "count", "workload", "prompt tokens of every request"),
    Figure("hit-tokens", "count", "hit-rate", "prompt tokens the strategy matched", "higher"),
    Figure("oracle-hit-tokens", "count", "hit-rate", "prompt tokens the exact radix oracle "
           "matched in the same replay"),
    Figure("token-hit-rate", "ratio", "hit-rate", "hit tokens / prompt tokens", "higher",
           metadata=(("token_hit_rate", 1.0),), csv=(("hit_rate", 1.0),)),
    Figure("token-hit-rate-ppm", "ppm", "hit-rate", "token hit rate in parts per million",
           "higher"),
    Figure("oracle-hit-rate", "ratio", "hit-rate", "the oracle's token hit rate",
           metadata=(("oracle_hit_rate", 1.0),), csv=(("oracle_hit_rate", 1.0),)),
    Figure("hit-rate-loss", "ratio", "hit-rate", "share of the oracle's hit tokens the "
           "strategy missed (paper Table 3, Fig. 9)", "lower",
           metadata=(("hit_rate_loss", 1.0),), csv=(("loss_vs_oracle", 1.0),)),
    Figure("hit-rate-loss-ppm", "ppm", "hit-rate", "hit-rate loss in parts per million",
           "lower"),
    Figure("lost-tokens", "count", "hit-rate", "oracle hit tokens the strategy missed",
           "lower"),
    Figure("false-hits", "count", "correctness", "returned blocks never inserted or with "
           "wrong metadata", "lower", metadata=(("false_hits", 1.0),),
           csv=(("false_hits", 1.0),)),
    Figure("store-reads-per-match", "count", "store", "logical store reads per prefix match",
           "lower", csv=(("store_reads_per_match", 1.0),)),
    Figure("store-bytes", "bytes", "space", "data bytes on disk (allocated blocks)", "lower",
           csv=(("bytes_on_disk", 1.0),), json=("size_on_disk_bytes",)),
    Figure("store-log-bytes", "bytes", "space", "the engine's WAL/journal bytes"),
    Figure("store-memory-outside-budget-bytes", "bytes", "memory",
           "engine memory the cache budget does not bound (RocksDB index and filters)"),
    Figure("store-device-reads-per-request", "count", "store", "reads the engine made from "
           "its files per timed request (RocksDB statistics; background read-aheads too)",
           "lower"),
    Figure("store-cache-hits-per-request", "count", "store", "the engine's data-cache hits "
           "per timed request"),
    Figure("store-memtable-hits-per-request", "count", "store", "reads the engine's write "
           "buffer answered per timed request"),
    Figure("store-compaction-bytes", "bytes", "store", "bytes compactions read and wrote "
           "during the timed requests", "lower"),
    Figure("store-flush-bytes", "bytes", "store", "bytes flushes wrote during the timed "
           "requests"),
    Figure("store-logical-bytes", "bytes", "space", "live keys + values the index stored"),
    Figure("store-records", "count", "space", "records in the store"),
    Figure("space-amplification", "ratio", "space", "disk bytes / logical bytes", "lower"),
    Figure("cpu-cores-busy", "ratio", "throughput", "process CPU seconds (every thread, the "
           "engine's own included) per wall second of the timed requests"),
    Figure("indexed-blocks", "count", "workload", "unique blocks indexed"),
    Figure("memory-bytes", "bytes", "memory", "in-memory bytes of the index", "lower",
           csv=(("index_memory_bytes", 1.0),)),
    Figure("memory-bytes-per-indexed-block", "bytes", "memory",
           "in-memory bytes per unique indexed block", "lower"),
    Figure("engine-cache-bytes", "bytes", "conditions", "the engine cache the run was given",
           metadata=(("cache_bytes", 1.0),), json=("cache_bytes",)),
    Figure("disk-ratio-to-reference-ppm", "ppm", "space", "space sweep: disk bytes over "
           "ssd-blockhash's (paper Table 5)", "lower"),
    Figure("entries-ratio-to-reference-ppm", "ppm", "space", "space sweep: stored block-"
           "metadata entries over ssd-blockhash's (paper Table 5)", "lower"),
    Figure("sizing-ssd-blockhash-entries", "count", "sizing", "entries of the sizing replay"),
    Figure("sizing-ssd-blockhash-logical-bytes", "bytes", "sizing",
           "logical store of the sizing replay (24 B per entry)"),
    Figure("sizing-ssd-blockhash-disk-bytes", "bytes", "sizing",
           "on-disk store of the sizing replay"),
    Figure("sizing-cache-bytes", "bytes", "sizing", "cache the cache rule chose"),
    Figure("match-phase-switches", "count", "breakdown", "clock switches per match"),
    Figure("insert-phase-switches", "count", "breakdown", "clock switches per insert"),
    Figure("breakdown-overhead", "ratio", "breakdown", "clock cost per match / mean match "
           "latency", "lower", metadata=(("breakdown_overhead", 1.0),)),
    Figure("breakdown-overhead-insert", "ratio", "breakdown", "clock cost per insert / mean "
           "insert latency", "lower", metadata=(("breakdown_overhead_insert", 1.0),)),
    *_recovery(),
    *_pools(),
    Figure("snapshot-write", "seconds", "recovery", "writing and publishing the snapshot",
           "lower"),
    Figure("snapshot-bytes", "bytes", "recovery", "bytes of the published snapshot", "lower"),
    Figure("peak-rss", "bytes", "recovery", "peak resident memory of the recovering process",
           "lower"),
    Figure("unique-block-entries", "count", "recovery", "unique block entries built",
           metadata=(("unique_block_entries", 1.0),)),
    Figure("probe-hit-tokens-before", "count", "recovery", "probe hit tokens before the "
           "restart"),
    Figure("hit-rate-equal", "flag", "correctness", "1 when the hit rate after recovery "
           "equals the one before", "higher", metadata=(("hit_rate_equal", 1.0),)),
    Figure("span-share-gt3", "ratio", "workload", "share of 256-token spans with more than "
           "three alternatives (paper section 3.2)", metadata=(("span_share_gt3", 1.0),),
           json=("span_share_gt3",)),
    *_describe(),
    *_crashtest(),
    *_hashbench(),
    *_placement(),
    *_arrival(),
    *_enginebench(),
    Figure("match-cpu-time", "seconds", "breakdown", "mean seconds per match the request "
           "thread was on a core (its own CPU clock, any phase); the rest of the latency "
           "it waited: for the device, a lock or a core", "lower"),
    Figure("insert-cpu-time", "seconds", "breakdown", "the same per insert", "lower"),
    Figure("cap-recovery-ratio", "ratio", "conditions", "capped tree's recovery over sarp's "
           "under the cap rule (paper: 0.96-1.96)", metadata=(("cap_recovery_ratio", 1.0),)),
    # patterns
    Figure("match-time-<phase>", "seconds", "breakdown", "mean seconds per match spent in "
           "one phase (paper Fig. 7)", "lower"),
    Figure("insert-time-<phase>", "seconds", "breakdown", "mean seconds per insert spent in "
           "one phase (paper Fig. 7)", "lower"),
    Figure("match-latency-windows-<windows>", "seconds", "latency", "mean latency of one "
           "match whose query spans that many of sarp's windows (1, 2, 3, 4, 5-8, 9-16, "
           "17-plus)", "lower"),
    Figure("match-requests-windows-<windows>", "count", "latency", "timed matches whose "
           "query spans that many of sarp's windows"),
    Figure("index-<counter>", "count", "counter", "a strategy counter (bytes for *-bytes)"),
    Figure("restore-<path>-<point>", "seconds", "restore", "payload restore time through "
           "one path at one object count or layerwise (Range)", "lower"),
    Figure("read-calls-<path>-<point>", "count", "restore", "native read calls per restore",
           "lower"),
    Figure("bytes-read-<path>-<point>", "bytes", "restore", "bytes read per restore"),
    Figure("host-us-per-object-<path>-<point>", "count", "restore",
           "host microseconds per logical object", "lower"),
    Figure("layer-events-<path>-<point>", "count", "restore", "per-layer readiness events"),
    Figure("placement-bench-n<n>-m<m>-cpu", "seconds", "placement", "placement bench: CPU "
           "seconds of one exact solve at N positions and budget M, best of the rounds",
           "lower"),
    Figure("placement-bench-n<n>-m<m>-wall", "seconds", "placement", "placement bench: wall "
           "seconds of that solve, best of the rounds", "lower"),
    Figure("placement-<tag>-ckpt-per-entry", "count", "placement", "frontier: checkpoints "
           "per entry of one policy at one budget"),
    Figure("placement-<tag>-ckpt-bytes", "bytes", "placement", "frontier: checkpoint bytes "
           "per entry under the cost model"),
    Figure("placement-<tag>-recompute-blocks", "count", "placement", "frontier: expected "
           "recompute per evaluated hit, blocks", "lower"),
    Figure("placement-<tag>-recompute-tokens", "count", "placement", "frontier: expected "
           "recompute per evaluated hit, tokens", "lower"),
    Figure("placement-<tag>-kept-ppm", "ppm", "placement", "frontier: share of the dense "
           "hit kept", "higher"),
    Figure("placement-<tag>-positions", "count", "placement", "frontier: checkpoint "
           "positions up to the deepest evaluated hit (per entry: the most kept)"),
    Figure("placement-<name>", "count", "placement", "sparse prefix caching placement figure"),
    Figure("plugins-<kind>", "count", "plugins", "plugins of one kind (strategy, engine, "
           "workload, ...) the registry loaded"),
])

_EXACT = {f.name: f for f in FIGURES if not f.is_pattern}
_PATTERNS = [(f, f.regex()) for f in FIGURES if f.is_pattern]

#: conditions (not figures): CSV column -> metadata key
CONDITIONS = {"date": "date", "commit": "git_commit", "strategy": "strategy",
              "engine": "engine", "workload": "workload", "threads": "threads"}


def figure(name: str) -> Figure:
    """The figure a bare name (no setting, no thread prefix) stands for."""
    f = _EXACT.get(name)
    if f is not None:
        return f
    for f, rx in _PATTERNS:
        if rx.match(name):
            if f.name == "index-<counter>" and name.endswith("-bytes"):
                return Figure(name, "bytes", "counter", f.meaning)
            return f
    raise SchemaError(f"unknown figure {name!r}")


def params(name: str) -> dict:
    """The variable parts of a patterned name (``{'phase': 'storage'}``); {} for exact."""
    if name in _EXACT:
        return {}
    for f, rx in _PATTERNS:
        m = rx.match(name)
        if m:
            d = m.groupdict()
            if "point" in d:           # restore-<path>-<point>: the point is n<N> or layerwise
                m2 = re.match(r"(?P<path>.+)-(?P<point>n\d+|layerwise)\Z", name[len(
                    f.name.split("<")[0]):])
                if m2:
                    d = m2.groupdict()
            return d
    return {}


def parse_name(bench_name: str, metadata: dict) -> tuple:
    """``(setting, threads, figure name)`` of a benchmark name, using its metadata."""
    name = bench_name
    setting = metadata.get("setting")
    if setting and setting != "sizing" and name.startswith(f"{setting}-"):
        name = name[len(setting) + 1:]
    m = re.match(r"threads-(\d+)-(.+)\Z", name)
    threads = int(metadata.get("threads", 1) or 1)
    if m:
        threads, name = int(m.group(1)), m.group(2)
    return (setting if setting and setting != "sizing" else None), threads, name


def version_of(metadata: dict) -> int:
    """The schema version of a benchmark's metadata (0 before the schema)."""
    v = metadata.get(VERSION_KEY, 0)
    try:
        return int(v)
    except (TypeError, ValueError):
        raise SchemaError(f"schema version {v!r} is not a number") from None


def check_version(metadata: dict) -> int:
    """The version, or one line refusing a version this prefixbench does not know."""
    v = version_of(metadata)
    if v < 0 or v > SCHEMA_VERSION:
        raise SchemaError(f"result schema version {v} is unknown (this prefixbench "
                          f"reads versions 0-{SCHEMA_VERSION}); upgrade prefixbench")
    return v


def is_prefixbench(metadata: dict) -> bool:
    """Whether a benchmark's metadata says prefixbench wrote it."""
    return VERSION_KEY in metadata or "prefixbench_version" in metadata \
        or "prefixbench_impl" in metadata


def schema_metadata() -> dict:
    """What a writer adds to every benchmark's metadata."""
    return {VERSION_KEY: SCHEMA_VERSION}


def zero_metadata(names) -> dict:
    """Metadata recording benchmarks whose value was 0 (pyperf refuses 0)."""
    names = sorted({n for n in names if n})
    return {ZEROS_KEY: " ".join(names)} if names else {}


def split_zeros(values: dict) -> tuple[dict, list]:
    """``{name: value}`` -> (the non-zero ones, the names whose value is 0)."""
    keep = {n: v for n, v in values.items() if v}
    return keep, sorted(n for n, v in values.items() if v == 0)


@dataclass(frozen=True)
class Reading:
    """Every run's value of one figure at one setting and thread count."""

    figure: Figure
    name: str
    values: tuple
    setting: str | None = None
    threads: int = 1
    params: dict = field(default_factory=dict)
    #: ``benchmark``, ``zero``, ``metadata`` or ``reciprocal``
    source: str = "benchmark"

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def runs(self) -> int:
        return len(self.values)


def _runs_metadata(bench) -> list:
    return [run.get_metadata() for run in bench.get_runs()]


def readings(suite) -> list:
    """Every figure of a loaded suite: benchmarks, listed zeros, metadata figures.

    Metadata figures are read once per (setting, threads) from the runs of the
    first benchmark of that group, one value per run (repeats kept).  Raises
    :class:`SchemaError` for an unknown version.
    """
    out, have, groups, zeros = [], set(), {}, {}
    for bench in suite.get_benchmarks():
        mds = _runs_metadata(bench)
        md = mds[0] if mds else {}
        for m in mds:
            check_version(m)
        setting, threads, name = parse_name(bench.get_name(), md)
        try:
            fig = figure(name)
        except SchemaError:
            continue
        values = tuple(v for run in bench.get_runs() for v in run.values)
        if not values:
            continue
        out.append(Reading(fig, name, values, setting, threads, params(name)))
        have.add((setting, threads, name))
        groups.setdefault((setting, threads), mds)
        for m in mds:
            for z in str(m.get(ZEROS_KEY, "")).split():
                zeros.setdefault(z, set()).add((m.get("repeat", 0), m.get("setting"),
                                                m.get("threads", 1)))
    for full, keys in zeros.items():
        rep, setting, threads = next(iter(keys))
        s, t, name = parse_name(full, {"setting": setting, "threads": threads})
        if (s, t, name) in have:
            continue
        try:
            fig = figure(name)
        except SchemaError:
            continue
        out.append(Reading(fig, name, tuple(0.0 for _ in keys), s, t, params(name), "zero"))
        have.add((s, t, name))
    for (setting, threads), mds in groups.items():
        for fig in FIGURES:
            if (setting, threads, fig.name) in have:
                continue
            vals = []
            for key, factor in fig.metadata:
                vals = [float(m[key]) * factor for m in mds
                        if isinstance(m.get(key), (int, float))]
                if vals:
                    break
            if vals:
                out.append(Reading(fig, fig.name, tuple(vals), setting, threads, {},
                                   "metadata"))
                have.add((setting, threads, fig.name))
            elif fig.reciprocal_of and (setting, threads, fig.reciprocal_of) in have:
                src = next(r for r in out if (r.setting, r.threads, r.name)
                           == (setting, threads, fig.reciprocal_of))
                out.append(Reading(fig, fig.name, tuple(1.0 / v for v in src.values if v),
                                   setting, threads, {}, "reciprocal"))
                have.add((setting, threads, fig.name))
    return out


def read(suite_or_readings, name: str, setting: str | None = None,
         threads: int | None = None) -> Reading | None:
    """One figure's reading (first thread count when ``threads`` is None), or None."""
    rs = suite_or_readings if isinstance(suite_or_readings, list) else readings(
        suite_or_readings)
    hits = [r for r in rs if r.name == name and r.setting == setting
            and (threads is None or r.threads == threads)]
    return min(hits, key=lambda r: r.threads) if hits else None


def from_json(doc: dict) -> dict:
    """A ``--json`` output's keys (describe, a crashtest row) as ``{schema name: value}``."""
    return {f.name: float(doc[k]) for f in FIGURES for k in f.json
            if isinstance(doc.get(k), (int, float)) and not isinstance(doc.get(k), bool)}


def from_csv_row(row: dict) -> dict:
    """A CSV row (harness/export.py columns) as ``{schema name: value}`` in schema units."""
    out = {}
    for f in FIGURES:
        for col, factor in f.csv:
            if row.get(col) not in (None, ""):
                out[f.name] = float(row[col]) * factor
    return out
