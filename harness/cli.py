"""The ``prefixbench`` command line.

Every user error (:class:`PrefixbenchError`) is printed as one line on stderr
with a non-zero exit code and no traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from prefixbench.errors import ConfigError, PrefixbenchError

EPILOG = "Run 'prefixbench COMMAND --help' for a command's options."


def _add_store_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--engine", "-e", help="engine for strategies that store their index "
                   "(see 'prefixbench plugins')")
    g.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine-specific option (repeatable)")
    g.add_argument("--cache-bytes", default="64MiB",
                   help="engine cache budget, e.g. 16MiB (default: %(default)s)")
    g.add_argument("--direct-io", action="store_true", help="bypass the OS page cache for reads")
    g.add_argument("--durability", choices=("sync", "async", "off"), default="async",
                   help="sync: survives power loss; async: survives kill -9; off: no log "
                   "(default: %(default)s)")
    g.add_argument("--store-dir", help="new or empty directory for the store "
                   "(default: a temporary directory, removed afterwards)")


def _add_pool_options(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    g = p.add_argument_group("bounded KVCache pools (prefixbench.harness.pools)")
    if sweep:
        g.add_argument("--pool-blocks", metavar="N,N,...", help="capacity: comma-separated "
                       "pool sizes in blocks per worker, e.g. 1e3,1e4,1e5,unbounded")
    else:
        g.add_argument("--pool-blocks", metavar="N", help="KVCache capacity of each worker in "
                       "blocks: evicted blocks are removed from the index (one replay, no "
                       "pyperf.Runner part)")
    g.add_argument("--evict", metavar="POLICY", help="eviction policy, leaves first: lru, lfu, "
                   "fifo or a plugin's (default: lru)")
    g.add_argument("--workers", type=int, metavar="K", help="workers, each with its own pool "
                   "(1-64; default: 1)")
    g.add_argument("--route", metavar="ROUTE", help="round-robin, random or cache-aware "
                   "(longest prefix by the index's locations, ties to the fewest blocks "
                   "held; default: round-robin)")


def _pool_config(args, sweep: bool = False):
    """The run's PoolConfig, or None without --pool-blocks (the other pool options then
    are one error line)."""
    if args.pool_blocks is None:
        for option, given in (("--evict", args.evict), ("--workers", args.workers),
                              ("--route", args.route)):
            if given is not None:
                raise ConfigError(f"option {option}: needs --pool-blocks (the pools it "
                                  "configures)")
        return None
    from prefixbench.harness import pools
    return pools.make_config(args.pool_blocks, args.evict, args.workers, args.route)


def _add_workload_options(p: argparse.ArgumentParser, required=True) -> None:
    p.add_argument("--workload", "-w", required=required,
                   help="workload name (see 'prefixbench plugins')")
    p.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option, e.g. sessions=200 or path=trace.jsonl.gz (repeatable)")
    p.add_argument("--limit", type=int, help="replay only the first N requests")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefixbench",
        description="Benchmark harness and plugin registry for KVCache prefix indexes.",
        epilog=EPILOG)
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    from prefixbench.harness import allocator
    allocator_help = (f"malloc of the process: auto (jemalloc where installed, for "
                      f"{', '.join(sorted(allocator.TIMED_COMMANDS))}), "
                      f"{', '.join(allocator.CHOICES[1:])} or a library's path; another than "
                      "the process started on executes it again with that library preloaded "
                      "(default: auto)")
    parser.add_argument("--allocator", default="auto", metavar="NAME|PATH", help=allocator_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # no abbreviations: pyperf's own --worker (passed through to its worker processes)
    # must not be taken for --workers
    p = sub.add_parser("run", help="replay a workload through a strategy and record pyperf results",
                       allow_abbrev=False,
                       description="Replay a workload through an index strategy (with the exact "
                       "radix oracle as a shadow), then measure warmed match latency with "
                       "pyperf.Runner. Unrecognised options (--fast, --rigorous, -p N, -n N, "
                       "--loops N, ...) are passed to pyperf.",
                       epilog="Writes OUT.json (times) and OUT.counts.json (counts, sizes); "
                       "compare runs with 'python -m pyperf compare_to a.json b.json --table'.")
    p.add_argument("--strategy", "-s", required=True, help="index strategy name")
    p.add_argument("--strategy-option", "-S", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy parameter (repeatable)")
    _add_workload_options(p)
    _add_store_options(p)
    p.add_argument("-o", "--output", help="pyperf JSON output file")
    p.add_argument("--threads", type=int, default=1,
                   help="request threads sharing one index; sessions are partitioned across "
                   "them (default: %(default)s)")
    p.add_argument("--status", type=float, default=0.0, metavar="SECONDS",
                   help="every SECONDS, show match p99 and false hits so far on the progress bar")
    p.add_argument("--csv", metavar="FILE", help="append one row of db_bench-style columns "
                   "to FILE (.tsv for tabs)")
    p.add_argument("--no-runner", action="store_true",
                   help="skip the pyperf.Runner warmed-match benchmark (one replay only)")
    p.add_argument("--force", action="store_true", help="run even when the pre-flight "
                   "estimate says the workload's index will not fit in disk or memory")
    p.add_argument("--warm-fraction", type=float, default=0.5,
                   help="share of requests replayed before the warmed-match benchmark "
                   "(default: %(default)s)")
    p.add_argument("--breakdown", action="store_true", help="split match and insert latency "
                   "into storage, routing, hashing, verify, lock and the rest (paper Fig. 7) "
                   "and print that table")
    p.add_argument("--arrival", choices=("closed", "trace"), default="closed",
                   help="closed: each request when the last finished (default); trace: open "
                   "loop, requests start at their trace timestamps / --speedup from --threads "
                   "issuing threads (offered vs achieved req/s, match latency with queueing)")
    p.add_argument("--speedup", metavar="X", help="--arrival trace: time compression factor "
                   "(default: 1)")
    _add_pool_options(p)
    p.add_argument("--quiet", "-q", action="store_true", dest="quiet_sub", help="no progress bars")

    p = sub.add_parser("scale", help="thread scaling: throughput at 1, 2, 4, 8 request threads",
                       description="Replay the workload at each thread count on a fresh index "
                       "and report throughput, throughput relative to the first count, and "
                       "match/insert latency (the SARP paper's Fig. 11).")
    p.add_argument("--strategy", "-s", required=True, help="index strategy name")
    p.add_argument("--strategy-option", "-S", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy parameter (repeatable)")
    _add_workload_options(p)
    _add_store_options(p)
    p.add_argument("--threads", default="1,2,4,8",
                   help="comma-separated thread counts (default: %(default)s)")
    p.add_argument("--no-device-probe", dest="device_probe", action="store_false",
                   help="with --direct-io: skip measuring what the device alone gives these "
                   "thread counts (4 KiB random direct reads, about 10 s and a 1 GiB "
                   "scratch file where the stores go)")
    p.add_argument("--force", action="store_true", help="run even when the pre-flight "
                   "estimate says the workload's index will not fit in disk or memory")
    p.add_argument("-o", "--output", help="pyperf JSON output (times; counts go to OUT.counts.json)")

    p = sub.add_parser("plugins", help="list every strategy, engine, workload and tokenizer plugin",
                       description="List plugins with kind, name, providing package and version.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--options", action="store_true",
                   help="also list each strategy's options (-S KEY=VALUE) and each "
                   "engine's (--engine-option KEY=VALUE) with defaults")
    p.add_argument("-o", "--output", metavar="OUT.json", help="also write the list as a "
                   "pyperf suite (plugins-<kind> counts; 'prefixbench show' prints it)")

    p = sub.add_parser("workload", help="inspect workloads",
                       description="Inspect workloads.")
    wsub = p.add_subparsers(dest="workload_command", metavar="SUBCOMMAND")
    d = wsub.add_parser("describe", help="print a workload's characteristics table",
                        description="Print sessions, turns, requests, tokens, unique blocks and "
                        "the share of 256-token spans with more than three alternatives.")
    d.add_argument("name", help="workload name")
    d.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option (repeatable)")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument("-o", "--output", metavar="OUT.json",
                   help="also write the figures (workload-*) as a pyperf suite")

    p = sub.add_parser("compare", help="compare pyperf result files (pyperf compare_to --table)",
                       description="Compare result files with 'python -m pyperf compare_to "
                       "--table'; the first file is the reference.")
    p.add_argument("files", nargs="+", help="two or more pyperf JSON files")

    p = sub.add_parser("demo", help="newcomer's job: dram-blockhash vs ssd-blockhash on LMDB",
                       description="Replay a small synthetic profile through dram-blockhash and "
                       "ssd-blockhash (on LMDB by default) and print the comparison.")
    p.add_argument("--workload", "-w", default="lmcache-agent", help="default: %(default)s")
    p.add_argument("--workload-option", "-W", action="append", default=None,
                   metavar="KEY=VALUE", help="workload option (default: sessions=10)")
    p.add_argument("--engine", "-e", default="lmdb", help="default: %(default)s")
    p.add_argument("--out-dir", default="results/demo", help="default: %(default)s")

    p = sub.add_parser("sweep", help="the paper's sweeps: retrieval budget, ablation, "
                       "strategies, space",
                       description="Replay one workload under several settings, one after the "
                       "other, each on a fresh store with the exact radix oracle as a shadow in "
                       "the same run, and print one table. KIND is retrieval (sarp at "
                       "max_retrieval 1, 2, 3, 4, unlimited: loss vs the oracle, retrievals per "
                       "query; paper Fig. 9), ablation (sarp with refinement, filtering, pruning "
                       "each off: candidate counts, routing state; Fig. 10, Table 4) or "
                       "strategies (sarp, ssd-blockhash, segment-radix-capped, segment-hash side "
                       "by side: throughput ratios, latency, loss, bytes per block; section 6.2) "
                       "or space (ssd-blockhash beside sarp or other stored layouts on one "
                       "on-disk engine: bytes on disk, logical bytes, space amplification, "
                       "block-metadata entries, each as a ratio to ssd-blockhash; section 6.6, "
                       "Table 5) or capacity (bounded KVCache pools at each --pool-blocks: hit "
                       "rate at capacity beside the oracle with the same pools, loss, evictions, "
                       "match/insert/remove latency, index size; LRU with one worker is checked "
                       "for stack inclusion).",
                       epilog="Cache: --cache-rule paper first replays ssd-blockhash on the engine "
                       "and gives every SSD-backed strategy 10%% (--cache-fraction) of its logical "
                       "store, entries x (8-byte key + 16-byte metadata; at --scale paper counted "
                       "from the trace's unique blocks instead); it is the default for "
                       "'strategies', a fixed --cache-bytes (default 64MiB) for the others. "
                       "-o OUT.json writes pyperf suites with benchmarks named SETTING-FIGURE "
                       "(retrieval-1-match-latency-mean, sarp-insert-latency-mean, ...) and "
                       "OUT.counts.json; compare two sweeps with 'python -m pyperf compare_to'.")
    p.add_argument("kind", metavar="KIND", help="retrieval, ablation, strategies, space, "
                   "capacity or arrival (open loop at each --speedup: offered vs achieved "
                   "req/s, p50/p99/p99.9 with queueing, the saturation point)")
    p.add_argument("--strategy", "-s", help="arrival: the index strategy")
    p.add_argument("--speedup", default="1,2,4,8", metavar="X[,X...]",
                   help="arrival: time compression factors (default: %(default)s)")
    _add_workload_options(p)
    g = p.add_argument_group("engine")
    g.add_argument("--engine", "-e",
                   help="engine for SSD-backed strategies (default: memory; lmdb for space)")
    g.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine-specific option (repeatable)")
    g.add_argument("--cache-rule", metavar="RULE",
                   help="paper: 10%% of ssd-blockhash's logical store (learnt by replaying it "
                   "first); fixed: --cache-bytes (default: paper for strategies, else fixed)")
    g.add_argument("--cache-bytes", help="fixed engine cache, e.g. 16MiB (default: 64MiB "
                   "unless the paper rule applies)")
    g.add_argument("--cache-fraction", help="share of ssd-blockhash's logical store for "
                   "--cache-rule paper (default: 0.1)")
    g.add_argument("--direct-io", action="store_true", help="bypass the OS page cache for reads")
    g.add_argument("--durability", choices=("sync", "async", "off"), default="async",
                   help="engine durability mode (default: %(default)s)")
    p.add_argument("--budgets", help="retrieval: comma-separated max_retrieval values, "
                   "'unlimited' or 0 for no cap (default: 1,2,3,4,unlimited)")
    p.add_argument("--strategies", help="strategies: comma-separated strategy names, the first "
                   "is the one ratios are taken from (default: sarp,ssd-blockhash,"
                   "segment-radix-capped,segment-hash); NAME+KEY=VALUE[+KEY=VALUE] adds a "
                   "variant of a strategy with those options (sarp+batch_windows=8), "
                   "an engine.KEY=VALUE option of that variant's store "
                   "(sarp+engine.block_bytes=64KiB); space: "
                   "the layouts beside ssd-blockhash, which always comes first (default: sarp); capacity: the strategies at "
                   "every capacity (default: radix,dram-blockhash,sarp, those that can "
                   "remove)")
    p.add_argument("--strategy-option", "-S", action="append", default=[],
                   metavar="[STRATEGY:]KEY=VALUE",
                   help="strategy parameter, sarp's unless prefixed with a strategy name, e.g. "
                   "tau=128 or segment-radix-capped:cap_nodes=4096 (repeatable)")
    p.add_argument("--backfill", default="sync", metavar="MODE",
                   help="sarp back-fill jobs: sync (inside insert; repeatable results) or "
                   "background (default: %(default)s)")
    g = p.add_argument_group("scale, repeats and threads (strategies)")
    g.add_argument("--scale", metavar="SCALE", help="small: the workload's own size, replayed "
                   "whole; paper: the paper's sizes (section 6.1), loaded untimed by each "
                   "strategy's bulk path, then the last --run-requests timed (default: small)")
    g.add_argument("--run-requests", metavar="K", help="--scale paper: timed requests at the "
                   f"end of the trace (default: 2000)")
    g.add_argument("--repeat", type=int, metavar="N", help="run every setting N times; the "
                   "table shows medians with min-max, the pyperf suites keep every run "
                   "(default: 1)")
    g.add_argument("--threads", metavar="LIST", help="comma-separated request-thread counts, "
                   "shown side by side with speedup, serial fraction and Amdahl bound "
                   "(default: 1)")
    g.add_argument("--interleave", metavar="N", help="strategies: build and load every "
                   "setting first, at every --threads count (all held at once), then let "
                   "their timed runs take turns, N requests each, so load from other tenants "
                   "of a shared machine falls on every setting alike (default: 0, one after "
                   "another)")
    g.add_argument("--loads", metavar="once|each", help="--scale paper: 'once' loads each "
                   "setting once, keeps its store (an engine checkpoint) and index snapshot, "
                   "and starts every run (repeats, --threads counts) from a clone of them; "
                   "'each' loads before every run (default: once where a setting runs more "
                   "than once and the engine can checkpoint)")
    g.add_argument("--no-device-probe", dest="device_probe", action="store_false",
                   default=None, help="with --direct-io: skip measuring what the device "
                   "alone gives the --threads counts (4 KiB random direct reads, about 10 s "
                   "and a 1 GiB scratch file where the stores go) and, with --interleave, "
                   "watching its read latency between the turns of each repeat")
    g.add_argument("--force", action="store_true", help="--scale paper: run the full paper "
                   "size even where the pre-flight estimate of disk and memory says it does "
                   "not fit; other sizes: run even where the workload will not fit")
    g = p.add_argument_group("cap rule (segment-radix-capped)")
    g.add_argument("--cap-rule", metavar="RULE", help="paper: choose cap_fraction so its index "
                   "recovery is 0.96-1.96x sarp's (paper section 6.2); fixed: cap_nodes as "
                   "given (default: paper on an on-disk engine, else fixed)")
    g.add_argument("--cap-entries", metavar="N", help="entries of the recovery builds the "
                   "rule compares (default: 1e7)")
    g.add_argument("--cap-recoveries", metavar="N", help="fresh-process recoveries per "
                   "strategy, whose medians the rule compares (default: 5)")
    g.add_argument("--cap-cache", metavar="FILE", help="reuse the choice saved in FILE for "
                   "these settings; a new choice is saved there")
    p.add_argument("--breakdown", action="store_true", help="split match and insert latency "
                   "into storage, routing, hashing, verify, lock and the rest (paper Fig. 7) "
                   "and print that table under the sweep")
    _add_pool_options(p, sweep=True)
    p.add_argument("-o", "--output", help="pyperf JSON output file (counts go to OUT.counts.json)")
    p.add_argument("--quiet", "-q", action="store_true", dest="quiet_sub", help="no progress bars")

    p = sub.add_parser("recover", help="recovery benchmark: build to N entries, snapshot, "
                       "recover in a fresh process",
                       description="Build an index to N unique block entries (the workload "
                       "replicated with a fresh namespace seed per copy, streamed), snapshot "
                       "and close it, then time recovery in a fresh process: snapshot load, "
                       "deserialize, rebuild, first correctly served match; snapshot bytes, "
                       "peak RSS; the probe hit rate after recovery must equal the one before.",
                       epilog="Writes OUT.json (times) and OUT.counts.json (sizes, counts).")
    p.add_argument("--strategy", "-s", required=True, help="index strategy name")
    p.add_argument("--strategy-option", "-S", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy parameter (repeatable)")
    p.add_argument("--entries", "-n", default="1e6",
                   help="unique block entries to build, e.g. 1e7 or 10M (default: %(default)s)")
    p.add_argument("--workload", "-w", default="lmcache-agent",
                   help="workload to replicate (default: %(default)s)")
    p.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option (repeatable; namespace is set per copy)")
    p.add_argument("--engine", "-e", help="engine for strategies that store their index "
                   "(redis-blockhash: redis by default). redis and redis-cluster: recover "
                   "starts a private server in the work dir and each recovery restarts it "
                   "(its RDB/AOF reload is timed as recovery-server-reload, part of load)")
    p.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--cache-bytes", default="64MiB", help="engine cache budget (default: %(default)s)")
    p.add_argument("--durability", choices=("sync", "async", "off"), default="async")
    p.add_argument("--work-dir", help="new or empty directory for the store and the snapshot "
                   "(default: a temporary directory, removed afterwards)")
    p.add_argument("--force", action="store_true",
                   help="build even when the pre-flight estimate of disk and memory says "
                   "it will not fit")
    p.add_argument("--repeat", type=int, default=1, metavar="K",
                   help="recover the one build K times, each in a fresh process and checked "
                   "(default: 1; 1-100)")
    p.add_argument("-o", "--output", help="pyperf JSON output file")

    p = sub.add_parser("crashtest", help="kill -9 a durable replay at random points and check "
                       "that nothing acknowledged is lost",
                       description="Repeatedly: a child replays a workload in durable mode and "
                       "logs each acknowledged insert; the parent kills it (SIGKILL) at a random "
                       "moment, recovers in a fresh process and checks that every acknowledged "
                       "insert matches with its metadata, no match returns a block never "
                       "inserted, and recovery did not fail.  --kill-at kills inside the "
                       "risky windows instead (snapshot publication steps, sarp's back-fill "
                       "publish, packfile space reuse); --matrix runs every durable engine x "
                       "every strategy.")
    p.add_argument("--strategy", "-s", action="append", default=[],
                   help="strategy (repeatable; required unless --matrix, which it restricts)")
    p.add_argument("--engine", "-e", action="append", default=[],
                   help="engine (repeatable; memory is volatile and refused)")
    p.add_argument("--iterations", "-i", type=int, default=None, help="kill points per "
                   "engine x strategy (default: 10; 30 with --matrix)")
    p.add_argument("--sarp-iterations", type=int, default=None, metavar="N",
                   help="kill points per engine for sarp (default: --iterations; 200 with "
                   "--matrix)")
    p.add_argument("--kill-at", action="append", default=[], metavar="POINT[:N]",
                   help="kill deterministically at the N-th time (default: drawn from the "
                   "seed) the child reaches POINT: snapshot:temp-written, "
                   "snapshot:temp-fsynced, snapshot:previous-kept, snapshot:renamed, "
                   "snapshot:dir-fsynced, backfill:before-publish, backfill:after-publish, "
                   "packfile:reuse, packfile:clean-before-commit, packfile:clean-after-commit, "
                   "or all (repeatable; with several, iterations cycle through them and "
                   "random kills)")
    p.add_argument("--matrix", action="store_true", help="every durable engine x every "
                   "strategy that runs on it (-e/-s restrict it), every kill point in turn "
                   "unless --kill-at says which")
    p.add_argument("--force", action="store_true", help="run even when the pre-flight "
                   "estimate says the matrix will not fit in disk or memory")
    p.add_argument("--seed", type=int, default=0, help="seed of the first iteration")
    p.add_argument("--workload", "-w", default="codeact")
    p.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--snapshot-every", type=int, default=50,
                   help="the child snapshots after every N requests (default: %(default)s)")
    p.add_argument("--max-kill-ms", type=int, default=3000,
                   help="kill within this many ms after the child is ready (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="OUT.json",
                   help="write the rows' figures (crash-*) as a pyperf suite")

    p = sub.add_parser("hash-bench", help="chained block hashing throughput (Cython vs Python)",
                       description="Measure chained block-ID hashing in tokens/s for the "
                       "compiled path and the pure-Python reference on one core.")
    p.add_argument("--tokens", default="64M", help="tokens for the compiled path (default: %(default)s)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("-o", "--output", metavar="OUT.json", help="also write the figures "
                   "(hash-*) as a pyperf suite")

    p = sub.add_parser("engine-bench", help="point-get and batch-get cost per key of an engine",
                       description="Fill an engine and time get and get_many per key from Python.")
    p.add_argument("--engine", "-e", required=True)
    p.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option (repeatable), e.g. url=redis://127.0.0.1:6379/0")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--value-bytes", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--cache-bytes", default="64MiB")
    p.add_argument("--direct-io", action="store_true")
    p.add_argument("-o", "--output", metavar="OUT.json", help="also write the figures "
                   "(engine-*): seconds here, counts and sizes in OUT.counts.json")

    p = sub.add_parser("payload", help="payload-restore (Range): one payload restored as N "
                       "objects per path, page cache bypassed or dropped",
                       description="Write a fixed payload once per path (one file per object, "
                       "one value per object in each key-value engine, packfile stripes, and a "
                       "plain O_DIRECT sequential read as the device baseline), restore it R "
                       "times per object count, verify every byte by hash, and report time, "
                       "native read calls, bytes read and host time per object.")
    p.add_argument("--payload", default="1GiB", help="payload bytes (default: %(default)s)")
    p.add_argument("--objects", default="32,128,512,1024,layerwise",
                   help="comma-separated object counts; 'layerwise' adds the layerwise point: "
                   "payload/--layer-object objects, one chunk of one layer each, requested "
                   "layer by layer with per-layer readiness (default: %(default)s)")
    p.add_argument("--layers", type=int, default=32,
                   help="model layers of the layerwise point (default: %(default)s)")
    p.add_argument("--layer-object", default="1MiB",
                   help="bytes of one chunk of one layer (default: %(default)s)")
    p.add_argument("--paths", default="seq,files,lmdb,rocksdb,packfile,stripes",
                   help="comma-separated: seq, files, stripes, or engine names "
                   "(default: %(default)s)")
    p.add_argument("--restores", type=int, default=3, help="timed restores per path and "
                   "point, after one untimed warm-up each; rounds rotate the order of points "
                   "and paths (default: %(default)s)")
    p.add_argument("--stripe", default="32MiB", help="packfile stripe bytes (default: %(default)s)")
    p.add_argument("--pack-bytes", default="1GiB", help="packfile pack size (default: %(default)s)")
    p.add_argument("--hit", help="partial-hit endpoint in bytes (default: the whole payload)")
    p.add_argument("--cache", choices=("direct", "drop"), default="direct",
                   help="bypass the page cache with O_DIRECT where a path can, else drop it")
    p.add_argument("--work-dir", help="new or empty directory (default: a temporary one under "
                   "the current directory, removed afterwards)")
    p.add_argument("--json", help="write every restore and the summary as JSON here")
    p.add_argument("--force", action="store_true", help="run even when the pre-flight "
                   "estimate says the payload's copies will not fit in disk or memory")
    p.add_argument("--output", "-o", help="pyperf suite: restore seconds per path and point "
                   "here, read calls/bytes/host us per object in OUT.counts.json")
    p = sub.add_parser("placement", help="sparse prefix caching: checkpoint placement "
                       "(solve, frontier on a workload, solver bench)",
                       description="Where to keep recurrent-state checkpoints: the exact "
                       "O(N*M) placement, frontiers of every policy on a workload, solver timing.")
    psub = p.add_subparsers(dest="placement_command", metavar="SUBCOMMAND")
    d = psub.add_parser("solve", help="the exact placement for a depth histogram")
    d.add_argument("--depths", required=True, metavar="FILE.json",
                   help='{"weights": [w_0, ..., w_N]}: weight of each overlap depth')
    d.add_argument("--budget", type=int, required=True, metavar="M", help="checkpoints at most")
    d.add_argument("--json", action="store_true", help="one JSON object on stdout")
    d.add_argument("-o", "--output", metavar="OUT.json", help="also write the placement as "
                   "a pyperf suite (placement-solve-*; 'prefixbench show' prints it)")
    d = psub.add_parser("frontier", help="every policy at every budget on a workload's hits")
    _add_workload_options(d)
    d.add_argument("--budgets", default="1,2,4,8,16,32,64", help="checkpoints per entry "
                   "(default: %(default)s)")
    d.add_argument("--policies", default="dp,block,uniform,geometric,end,boundary",
                   help="comma-separated; a bare 'block' sweeps B (default: %(default)s)")
    d.add_argument("--split", default="offline", help="offline: fit and evaluate on every hit; "
                   "online: fit on the first half of the requests, evaluate on the second")
    d.add_argument("--model", default="positions", help="cost preset: positions, nemotron-h-8b, "
                   "qwen3-next-80b (default: %(default)s)")
    d.add_argument("-o", "--output", help="pyperf suite of every policy, budget and figure")
    d.add_argument("--save-depths", metavar="FILE.json", help="write the fitted hits: the "
                   "pooled weights (a depths file for 'solve') and each hit entry's histogram")
    d = psub.add_parser("bench", help="solver time over N in 12.5k..100k, M in 8, 64")
    d.add_argument("--repeats", type=int, default=5, help="best of (default: %(default)s)")
    d.add_argument("-o", "--output", metavar="OUT.json", help="also write the times as a "
                   "pyperf suite (placement-bench-*; 'prefixbench show' prints it)")
    from prefixbench.harness import servers
    servers.add_parser(sub, COMMANDS)
    from prefixbench.harness import reporting      # report, plot; compare --html/--fail-above
    reporting.add_commands(sub, COMMANDS)
    from prefixbench.harness import reproduce      # reproduce sarp|range|placement
    reproduce.add_command(sub, COMMANDS)
    from prefixbench.harness import events        # events record/publish/replay/bench; hash
    events.add_commands(sub, COMMANDS)
    from prefixbench.harness import arrival       # open-loop arrival at trace timestamps
    arrival.add_commands(sub, COMMANDS)
    for name in sorted(allocator.TIMED_COMMANDS):
        sub.choices[name].add_argument("--allocator", dest="allocator_sub", metavar="NAME|PATH",
                                       help=allocator_help)
    return parser


def _split_argv(argv: list[str], leftover: list[str]) -> list[str]:
    """argv minus the (ordered) tokens argparse did not recognise."""
    ours, j = [], 0
    for a in argv:
        if j < len(leftover) and a == leftover[j]:
            j += 1
        else:
            ours.append(a)
    return ours


def main(argv: list[str] | None = None) -> int:
    """The command line; with ``argv`` None (the ``prefixbench`` program itself) it may
    first execute the process again on another allocator (``--allocator``)."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, leftover = parser.parse_known_args(argv)
    if args.command != "run" and leftover:
        parser.error(f"unrecognized arguments: {' '.join(leftover)}")
    if args.command is None:
        parser.print_help()
        return 2
    quiet = args.quiet or getattr(args, "quiet_sub", False)
    try:
        if own_process:
            from prefixbench.harness import allocator
            allocator.ensure(getattr(args, "allocator_sub", None) or args.allocator, args.command)
        code = COMMANDS[args.command](args, leftover=leftover, argv=argv, quiet=quiet) or 0
        sys.stdout.flush()          # inside the try: a closed pipe is caught below
        return code
    except PrefixbenchError as e:
        print(f"prefixbench: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("prefixbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``prefixbench show X | head``): not an error of ours, and
        # the interpreter's final flush must not raise again on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


# ---------------------------------------------------------------- commands
def cmd_run(args, leftover, argv, quiet):
    from prefixbench.harness.bench import RunSpec, run
    from prefixbench.harness.build import parse_kv, parse_size

    if not 0.0 < args.warm_fraction < 1.0:
        raise ConfigError(f"option --warm-fraction: {args.warm_fraction} must be between 0 and 1")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"option --limit: {args.limit} must be >= 1")
    if args.csv:
        from prefixbench.harness.export import check_export_path
        check_export_path(args.csv)
    from prefixbench.harness.bench import check_threads
    check_threads("--threads", args.threads)
    if args.status < 0:
        raise ConfigError(f"option --status: {args.status} must be >= 0 seconds")
    spec = RunSpec(
        strategy=args.strategy, engine=args.engine, workload=args.workload,
        threads=args.threads, status_every=args.status,
        strategy_options=parse_kv("--strategy-option", args.strategy_option),
        workload_options=parse_kv("--workload-option", args.workload_option),
        engine_options=parse_kv("--engine-option", args.engine_option),
        cache_bytes=parse_size("--cache-bytes", args.cache_bytes), direct_io=args.direct_io,
        durability=args.durability, store_dir=args.store_dir, limit=args.limit,
        warm_fraction=args.warm_fraction, breakdown=args.breakdown)
    if args.arrival == "closed" and args.speedup is not None:
        raise ConfigError("option --speedup: only with --arrival trace (closed loop has no clock)")
    from prefixbench.harness import preflight
    preflight.check_replay("run", [spec.strategy], spec.engine, spec.workload,
                           spec.workload_options, cache_bytes=spec.cache_bytes,
                           limit=spec.limit, work_dir=spec.store_dir, force=args.force,
                           engine_options=spec.engine_options)
    if args.arrival == "trace":
        from prefixbench.harness import arrival
        if leftover or _pool_config(args) is not None:
            raise ConfigError("option --arrival trace: an open-loop run takes no pools and no "
                              "pyperf options")
        return arrival.run_trace(spec, args.speedup or "1", args.threads, args.output, quiet)
    pool = _pool_config(args)
    if pool is not None:
        if leftover:
            raise ConfigError(f"option {leftover[0]}: pool runs (--pool-blocks) have no "
                              "pyperf.Runner part to pass it to")
        return _run_pooled(args, spec, pool, quiet)
    our_argv = _split_argv(argv, leftover)
    if our_argv and our_argv[0] in ("--quiet", "-q"):
        our_argv = our_argv[1:]
    if our_argv and our_argv[0] == "run":
        our_argv = our_argv[1:]
    res = run(spec, output=args.output, quiet=quiet, our_argv=our_argv,
              pyperf_argv=leftover, use_runner=not args.no_runner)
    if res is not None:
        from prefixbench.harness import pyperf_io
        from prefixbench.harness.bench import run_metadata
        _report_run(args, spec, res, pyperf_io.replay_suites(res, run_metadata(spec, res)))
    return 0


def _run_pooled(args, spec, pool, quiet):
    from prefixbench.harness.capacity import pooled_suites, run_pooled

    res = run_pooled(spec, pool, output=args.output, quiet=quiet)
    _report_run(args, spec, res, pooled_suites(spec, pool, res))
    return 0


def _report_run(args, spec, res, benches) -> None:
    """A run's table (through the renderer ``show`` uses), its ``--csv`` row and the
    files written."""
    from prefixbench.harness.pyperf_io import counts_path, git_commit
    from prefixbench.harness.reporting import table_of
    print(table_of(args.output, *benches))
    if args.csv:
        from prefixbench.harness.export import append_row, row
        append_row(args.csv, row(spec, res, git_commit()))
    if args.output:
        print(f"wrote {args.output} and {counts_path(args.output)}")


def cmd_scale(args, leftover, argv, quiet):
    from prefixbench.harness import pyperf_io, scaling
    from prefixbench.harness.bench import RunSpec
    from prefixbench.harness.build import parse_kv, parse_size

    counts = scaling.parse_thread_list(args.threads)
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"option --limit: {args.limit} must be >= 1")
    if args.store_dir:
        raise ConfigError("option --store-dir: scale builds a fresh store per thread count; "
                          "leave it out")
    spec = RunSpec(
        strategy=args.strategy, engine=args.engine, workload=args.workload,
        strategy_options=parse_kv("--strategy-option", args.strategy_option),
        workload_options=parse_kv("--workload-option", args.workload_option),
        engine_options=parse_kv("--engine-option", args.engine_option),
        cache_bytes=parse_size("--cache-bytes", args.cache_bytes), direct_io=args.direct_io,
        durability=args.durability, limit=args.limit)
    from prefixbench.harness import preflight
    preflight.check_replay("scale", [spec.strategy], spec.engine, spec.workload,
                           spec.workload_options, cache_bytes=spec.cache_bytes,
                           limit=spec.limit, force=args.force,
                           engine_options=spec.engine_options)
    device = scaling.probe_device(counts, quiet) \
        if args.device_probe and spec.direct_io and len(counts) > 1 else None
    rows = scaling.scale(spec, counts, quiet)
    from prefixbench.harness.reporting import table_of
    md = pyperf_io.run_metadata(spec.strategy, spec.engine, spec.workload, spec.config())
    if device is not None:
        md["device_probe"] = device.metadata_text()
    times, cnts = scaling.scale_suites(rows, md, spec)
    if args.output:
        pyperf_io.write_suite(args.output, times)
        pyperf_io.write_suite(pyperf_io.counts_path(args.output), cnts)
    print(table_of(args.output, times, cnts))
    if args.output:
        print(f"wrote {args.output} and {pyperf_io.counts_path(args.output)}")
    bad = sum(r.false_hits for _, r in rows)
    if bad:
        from prefixbench.harness.bench import FalseHitsError
        raise FalseHitsError(f"{spec.strategy}: {bad} false hits under threads")
    return 0


def cmd_plugins(args, leftover, argv, quiet):
    from prefixbench.registry import get_registry

    infos = get_registry().all()
    if args.json:
        print(json.dumps([{"kind": i.kind, "name": i.name, "package": i.package,
                           "version": i.version, "summary": i.summary} for i in infos], indent=1))
        return 0
    from prefixbench.harness import pyperf_io
    from prefixbench.harness.reporting import check_output, plugins_benchmarks, table_of
    if args.output:
        check_output(args.output, "plugins")
    benches = plugins_benchmarks(infos, args.options)
    if args.output:
        pyperf_io.write_suite(args.output, benches)
    print(table_of(args.output, benches))
    if args.output and not quiet:
        print(f"wrote {args.output}")
    return 0


def cmd_workload(args, leftover, argv, quiet):
    from prefixbench.harness.bench import make_workload
    from prefixbench.harness.build import parse_kv

    if args.workload_command != "describe":
        raise ConfigError("workload: give a subcommand: describe NAME")
    from prefixbench.workloads.describe import describe

    options = parse_kv("--workload-option", args.workload_option)
    if args.output:
        from prefixbench.harness.reporting import check_output
        check_output(args.output, "workload describe")
    wl = make_workload(args.name, options)
    facts = describe(wl)
    from prefixbench.harness import pyperf_io
    benches = pyperf_io.describe_benchmarks(facts, options)
    if args.output:
        pyperf_io.write_suite(args.output, benches)
    if args.json:
        print(json.dumps(facts, indent=1, default=str))
    else:
        from prefixbench.harness.reporting import table_of
        print(table_of(args.output, benches))
    if args.output and not quiet:
        print(f"wrote {args.output}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_compare(args, leftover, argv, quiet):
    for f in args.files:
        if not os.path.isfile(f):
            raise ConfigError(f"compare: {f}: no such file")
    if len(args.files) < 2:
        raise ConfigError("compare: give at least two result files")
    proc = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", *args.files, "--table"],
                          capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode:
        raise ConfigError(f"compare: pyperf compare_to failed: {proc.stderr.strip().splitlines()[-1:]}")
    return 0


def cmd_demo(args, leftover, argv, quiet):
    from prefixbench.harness import pyperf_io
    from prefixbench.harness.bench import RunSpec, run, run_metadata
    from prefixbench.harness.build import parse_kv
    from prefixbench.harness.reporting import table_of

    os.makedirs(args.out_dir, exist_ok=True)
    opts = parse_kv("--workload-option", args.workload_option or ["sessions=10"])
    outs = []
    for strategy in ("dram-blockhash", "ssd-blockhash"):
        spec = RunSpec(strategy=strategy, engine=args.engine, workload=args.workload,
                       workload_options=opts)
        out = os.path.join(args.out_dir, f"{strategy}.json")
        res = run(spec, output=out, quiet=quiet, our_argv=[], pyperf_argv=[], use_runner=False)
        # run's table from the suites just written: `prefixbench show OUT` prints it too
        print(table_of(out, *pyperf_io.replay_suites(res, run_metadata(spec, res))))
        outs.append(out)
    print(f"\n$ python -m pyperf compare_to {' '.join(outs)} --table")
    proc = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", *outs, "--table"],
                          capture_output=True, text=True)
    print(proc.stdout or proc.stderr)
    return 0


def cmd_sweep(args, leftover, argv, quiet):
    from prefixbench.harness import sweeps
    from prefixbench.harness.build import parse_kv

    if args.kind == "capacity":
        return _sweep_capacity(args, quiet)
    if args.kind == "arrival":
        from prefixbench.harness.arrival import cmd_arrival
        return cmd_arrival(args, leftover, argv, quiet)
    for option, given in (("--pool-blocks", args.pool_blocks), ("--evict", args.evict),
                          ("--workers", args.workers), ("--route", args.route)):
        if given is not None:
            raise ConfigError(f"option {option}: only the capacity sweep takes pools")
    cfg = sweeps.make_config(
        args.kind, workload=args.workload,
        workload_options=parse_kv("--workload-option", args.workload_option),
        engine=args.engine, engine_options=parse_kv("--engine-option", args.engine_option),
        cache_rule=args.cache_rule, cache_bytes=args.cache_bytes,
        cache_fraction=args.cache_fraction, direct_io=args.direct_io,
        durability=args.durability, limit=args.limit, budgets=args.budgets,
        strategies=args.strategies,
        strategy_options=parse_kv("--strategy-option", args.strategy_option),
        backfill=args.backfill, scale=args.scale, run_requests=args.run_requests,
        repeat=args.repeat, threads=args.threads, cap_rule=args.cap_rule,
        cap_entries=args.cap_entries, cap_recoveries=args.cap_recoveries,
        cap_cache=args.cap_cache, breakdown=args.breakdown, force=args.force,
        interleave=args.interleave, device_probe=args.device_probe, loads=args.loads)
    if cfg.scale != "paper":             # --scale paper sizes itself to what fits
        from prefixbench.harness import preflight
        preflight.check_replay(f"sweep {args.kind}", sweeps.strategy_names(cfg.strategies),
                               cfg.engine, cfg.workload, cfg.workload_options,
                               cache_bytes=cfg.cache_bytes or 0,
                               limit=cfg.limit, force=cfg.force,
                               engine_options=cfg.engine_options)
    result = sweeps.run_sweep(cfg, quiet=quiet)
    written = result.write(args.output) if args.output else None
    from prefixbench.harness.reporting import table_of
    print(table_of(args.output, *result.suites()))
    if written:
        print("wrote {} and {}".format(*written))
    return 0


def _sweep_capacity(args, quiet):
    from prefixbench.harness import capacity
    from prefixbench.harness.build import parse_kv

    for option, given in (("--cache-rule", args.cache_rule),
                          ("--cache-fraction", args.cache_fraction),
                          ("--budgets", args.budgets), ("--scale", args.scale),
                          ("--run-requests", args.run_requests), ("--repeat", args.repeat),
                          ("--threads", args.threads), ("--cap-rule", args.cap_rule),
                          ("--interleave", args.interleave), ("--loads", args.loads),
                          ("--no-device-probe", False if args.device_probe is False else None),
                          ("--breakdown", args.breakdown or None)):
        if given is not None:
            raise ConfigError(f"option {option}: the capacity sweep does not take it")
    cfg = capacity.make_config(
        workload=args.workload, pool_blocks=args.pool_blocks,
        workload_options=parse_kv("--workload-option", args.workload_option),
        evict=args.evict, workers=args.workers, route=args.route, strategies=args.strategies,
        strategy_options=parse_kv("--strategy-option", args.strategy_option),
        engine=args.engine, engine_options=parse_kv("--engine-option", args.engine_option),
        cache_bytes=args.cache_bytes, direct_io=args.direct_io, durability=args.durability,
        limit=args.limit)
    result = capacity.run_capacity(cfg, quiet=quiet)
    written = result.write(args.output) if args.output else None
    from prefixbench.harness.reporting import table_of
    print(table_of(args.output, *result.suites()))
    if written:
        print("wrote {} and {}".format(*written))
    return 0


def cmd_recover(args, leftover, argv, quiet):
    from prefixbench.harness.build import parse_kv, parse_size
    from prefixbench.harness.recovery import RecoverSpec, parse_count, run_recover

    spec = RecoverSpec(
        strategy=args.strategy, engine=args.engine,
        entries=parse_count("--entries", args.entries), workload=args.workload,
        workload_options=parse_kv("--workload-option", args.workload_option),
        strategy_options=parse_kv("--strategy-option", args.strategy_option),
        engine_options=parse_kv("--engine-option", args.engine_option),
        cache_bytes=parse_size("--cache-bytes", args.cache_bytes), durability=args.durability,
        work_dir=args.work_dir, repeat=args.repeat, force=args.force)
    if not 1 <= args.repeat <= 100:
        raise ConfigError(f"option --repeat: {args.repeat} must be between 1 and 100")
    from prefixbench.registry import get_registry
    cls = get_registry().get("strategy", spec.strategy).factory
    if cls.needs_store and not spec.engine:
        spec.engine = getattr(cls, "default_engine", None)
    if cls.needs_store and not spec.engine:
        raise ConfigError(f"option --engine: strategy {spec.strategy} stores its index in an engine")
    if not cls.needs_store:
        spec.engine = None
    result = run_recover(spec, output=args.output, quiet=quiet)
    from prefixbench.harness.recovery import recover_benchmarks
    from prefixbench.harness.reporting import table_of
    print(table_of(args.output, *recover_benchmarks(spec, result["reference"],
                                                    result.get("runs") or [result["recovered"]])))
    if args.output:
        from prefixbench.harness.pyperf_io import counts_path
        print(f"wrote {args.output} and {counts_path(args.output)}")
    return 0


def cmd_crashtest(args, leftover, argv, quiet):
    from prefixbench.harness.build import parse_kv
    from prefixbench.harness.crashtest import CrashSpec, run_crashtest

    from prefixbench.harness import crashpoints
    kill_at = crashpoints.parse_kill_at(args.kill_at)
    iterations = args.iterations
    if iterations is None:
        iterations = crashpoints.MATRIX_ITERATIONS if args.matrix else 10
    sarp_iterations = args.sarp_iterations
    if sarp_iterations is None and args.matrix and args.iterations is None:
        sarp_iterations = crashpoints.MATRIX_SARP_ITERATIONS
    for option, n in (("--iterations", iterations), ("--sarp-iterations", sarp_iterations)):
        if n is not None and n < 1:
            raise ConfigError(f"option {option}: {n} must be >= 1")
    if not args.matrix and not args.strategy:
        raise ConfigError("option --strategy: give at least one strategy (or --matrix)")
    cells = [(e, args.strategy) for e in args.engine or ["lmdb"]]
    if args.matrix:
        cells = crashpoints.matrix_cells(args.engine, args.strategy)
        kill_at = kill_at or crashpoints.parse_kill_at(["all"])
    spec = CrashSpec(strategies=list(dict.fromkeys(s for _e, ss in cells for s in ss)),
                     engines=[e for e, _ss in cells],
                     iterations=iterations, seed=args.seed, workload=args.workload,
                     workload_options=parse_kv("--workload-option", args.workload_option),
                     snapshot_every=args.snapshot_every, max_kill_ms=args.max_kill_ms,
                     kill_at=kill_at,
                     strategy_iterations={"sarp": sarp_iterations} if sarp_iterations else {})
    from prefixbench.harness.preflight import check_crashtest
    check_crashtest(spec, force=args.force)
    if args.output:
        from prefixbench.harness.reporting import check_output
        check_output(args.output, "crashtest")
    import dataclasses
    summary = []
    for engine, strategies in cells:         # a matrix row: the strategies that run there
        if strategies:
            summary += run_crashtest(dataclasses.replace(spec, engines=[engine],
                                                         strategies=strategies), quiet=quiet)
    from prefixbench.harness import pyperf_io
    from prefixbench.harness.crashtest import crash_benchmarks
    from prefixbench.harness.reporting import table_of
    benches = crash_benchmarks(summary, spec)
    if args.output:
        pyperf_io.write_suite(args.output, benches)
    print(table_of(args.output, benches))
    from prefixbench.harness.crashpoints import kill_point_lines
    for line in kill_point_lines(summary):
        print(line)
    if args.output and not quiet:
        print(f"wrote {args.output}")
    return 0 if all(r["failures"] == 0 for r in summary) else 3


def cmd_hash_bench(args, leftover, argv, quiet):
    from prefixbench.harness.build import parse_size
    from prefixbench.harness import pyperf_io
    from prefixbench.harness.hashbench import benchmarks, measure
    from prefixbench.harness.reporting import check_output, table_of

    n = parse_size("--tokens", args.tokens)
    if n < args.block_size or args.block_size < 1:
        raise ConfigError("option --tokens: must be at least one block")
    if args.output:
        check_output(args.output, "hash-bench")
    benches = benchmarks(measure(n, args.block_size))
    if args.output:
        pyperf_io.write_suite(args.output, benches)
    print(table_of(args.output, benches))
    if args.output and not quiet:
        print(f"wrote {args.output}")
    return 0


def cmd_engine_bench(args, leftover, argv, quiet):
    from prefixbench.harness.build import parse_kv, parse_size
    from prefixbench.harness.enginebench import measure_engine

    if args.keys < 1 or args.batch < 1:
        raise ConfigError("option --keys/--batch: must be >= 1")
    from prefixbench.harness import pyperf_io
    from prefixbench.harness.bench import engine_bench_benchmarks
    from prefixbench.harness.reporting import check_output, table_of
    if args.output:
        check_output(args.output, "engine-bench")
    with tempfile.TemporaryDirectory(prefix="prefixbench-enginebench-") as d:
        r = measure_engine(args.engine, d, n_keys=args.keys, value_size=args.value_bytes,
                           batch=args.batch, cache_bytes=parse_size("--cache-bytes", args.cache_bytes),
                           direct_io=args.direct_io,
                           options=parse_kv("--engine-option", args.engine_option))
    times, counts = engine_bench_benchmarks(r)
    if args.output:
        pyperf_io.write_suite(args.output, times)
        pyperf_io.write_suite(pyperf_io.counts_path(args.output), counts)
    print(table_of(args.output, times, counts))
    if args.output and not quiet:
        print(f"wrote {args.output} and {pyperf_io.counts_path(args.output)}")
    return 0


def cmd_payload(args, leftover, argv, quiet):
    from prefixbench.units import parse_size
    from prefixbench.harness.payload import (
        _parse_objects,
        check_payload,
        rows_as_dicts,
        run_payload,
        summarize,
        write_pyperf,
    )

    objects = _parse_objects([x.strip() for x in args.objects.split(",") if x.strip()])
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    from prefixbench.harness.progress import progress
    total = len(objects) * len(paths) * (args.restores + 1)     # + one warm-up each
    warm = []
    config = {"payload": args.payload, "objects": args.objects, "paths": args.paths,
              "restores": args.restores, "stripe": args.stripe, "pack_bytes": args.pack_bytes,
              "hit": args.hit, "cache": args.cache, "layers": args.layers,
              "layer_object": args.layer_object}
    # every size is parsed before the progress bar starts: a bad one is the only output
    sizes = dict(payload_bytes=parse_size("--payload", args.payload),
                 stripe=parse_size("--stripe", args.stripe),
                 hit_bytes=parse_size("--hit", args.hit) if args.hit else None,
                 pack_bytes=parse_size("--pack-bytes", args.pack_bytes),
                 layer_object=parse_size("--layer-object", args.layer_object))
    check_payload(objects=objects, paths=paths, restores=args.restores, cache_mode=args.cache,
                  work_dir=args.work_dir, layers=args.layers, force=args.force, **sizes)
    with progress(total, "restores", quiet, unit="restore") as bar:
        rows = run_payload(objects=objects, paths=paths, restores=args.restores,
                           cache_mode=args.cache, work_dir=args.work_dir,
                           progress=lambda r: bar.update(1), layers=args.layers,
                           warmups=warm, force=args.force, **sizes)
    summ = summarize(rows)
    from prefixbench.harness.payload import payload_benchmarks
    from prefixbench.harness.reporting import table_of
    benches = payload_benchmarks(rows, warm, config)
    if args.output:
        written = write_pyperf(args.output, rows, warm, config)
    print(table_of(args.output, *benches))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"restores": rows_as_dicts(rows), "warmups": rows_as_dicts(warm),
                       "summary": summ}, fh, indent=1, default=str)
    if args.output:
        for f in written:
            if not quiet:
                print(f"wrote {f}")
    return 0


def cmd_placement(args, leftover, argv, quiet):
    from prefixbench.harness.placement import cli
    return cli(args, quiet)


COMMANDS = {
    "run": cmd_run, "scale": cmd_scale, "plugins": cmd_plugins, "workload": cmd_workload, "compare": cmd_compare,
    "demo": cmd_demo, "hash-bench": cmd_hash_bench, "engine-bench": cmd_engine_bench,
    "sweep": cmd_sweep, "recover": cmd_recover, "crashtest": cmd_crashtest,
    "payload": cmd_payload, "placement": cmd_placement,
}
