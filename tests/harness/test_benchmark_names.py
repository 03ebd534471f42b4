"""The names every command publishes, pinned.

pyperf compare_to lines results up by benchmark name, users sort CSV rows by
column and tables by metadata key, so these are public names: each is written
out literally here, from one small real run of ``run``, ``sweep strategies``,
``scale``, ``recover`` and ``payload``.  Renaming a figure means editing this
file on purpose (and saying so to the users), never as a side effect of a
refactor.  Units are pinned too: compare_to refuses to mix them.
"""
import csv
import subprocess
import sys

import pyperf

SMALL = ["-w", "ultrachat", "-W", "sessions=20"]

LATENCIES = {f"{side}-latency-{stat}" for side in ("match", "insert", "request")
             for stat in ("mean", "p50", "p90", "p99", "p999", "max")}
#: OUT.json of every replay (run, each sweep setting, each thread count)
REPLAY_TIMES = {"replay-time-per-request"} | LATENCIES
#: OUT.counts.json of every replay, whatever the strategy (zero figures are left out)
REPLAY_COUNTS = {"hit-tokens", "oracle-hit-tokens", "prompt-tokens", "requests",
                 "store-logical-bytes", "store-reads-per-match", "store-records",
                 "token-hit-rate-ppm", "cpu-cores-busy"}
#: ... where the store has data on disk
ON_DISK = {"store-bytes", "space-amplification"}
#: ``index-<counter>`` for every numeric counter of the strategy's stats()
INDEX_COUNTERS = {
    "ssd-blockhash": {"entries", "inserts", "inserts-from-match", "matches",
                      "store-read-calls", "store-reads", "store-reads-per-insert",
                      "store-reads-per-match", "store-writes", "stored-block-entries"},
    "sarp": {"candidates-after-filtering", "candidates-before-filtering",
             "candidates-retrieved", "entries", "geometry-R", "geometry-S",
             "geometry-interval", "id-runs", "id-runs-opened", "ids-continued",
             "insert-records-reused-from-match",
             "insert-segments-reused-from-match", "insert-windows-reused-from-match",
             "inserts", "inserts-after-match", "logical-block-entries", "matches",
             "memory-bytes",
             "memory-bytes-per-block", "postings", "postings-per-segment",
             "retrievals-per-query", "round-trips-per-match", "routing-bytes",
             "routing-bytes-per-block", "routing-entries-per-block", "segments",
             "segments-copied", "segments-extended", "speculative-reads",
             "store-reads-per-match",
             "stored-block-entries", "unique-blocks", "windows-per-match"},
    "segment-radix-capped": {"cap-nodes-effective", "entries", "id-runs", "id-runs-opened",
                             "ids-continued", "matches", "memory-bytes",
                             "memory-nodes", "nodes", "segment-block-entries", "segments",
                             "store-reads-per-match", "stored-block-entries"},
    "segment-hash": {"block-entries-written", "entries", "fallback-reads-per-match",
                     "insert-reads", "matches", "records", "store-reads-per-match",
                     "stored-block-entries", "write-amplification"},
}
#: per sweep setting, beside the replay's counts
SWEEP_SETTING_COUNTS = {"engine-cache-bytes", "indexed-blocks"}
#: ... and for strategies with in-memory state
MEMORY_COUNTS = {"memory-bytes", "memory-bytes-per-indexed-block"}
SWEEP_STRATEGIES = ("sarp", "ssd-blockhash", "segment-radix-capped", "segment-hash")

CSV_COLUMNS = [
    "date", "commit", "strategy", "engine", "workload", "threads", "requests", "ops_per_s",
    "match_mean_us", "match_p50_us", "match_p99_us", "match_p999_us",
    "insert_mean_us", "insert_p50_us", "insert_p99_us", "insert_p999_us",
    "hit_rate", "oracle_hit_rate", "loss_vs_oracle", "false_hits", "store_reads_per_match",
    "bytes_on_disk", "index_memory_bytes",
]

#: metadata keys of every benchmark (pyperf adds its own beside them)
RUN_METADATA = {"strategy", "engine", "workload", "config", "git_commit", "prefixbench_argv",
                "prefixbench_impl", "prefixbench_version", "numpy_version", "pyperf_version",
                "python_version"}
REPLAY_METADATA = RUN_METADATA | {"token_hit_rate", "oracle_hit_rate", "hit_rate_loss",
                                  "false_hits", "throughput_rps", "gc"}


def _index(strategy):
    return {f"index-{c}" for c in INDEX_COUNTERS[strategy]}


def _unit(name: str, suite: str) -> str:
    """The unit each figure must carry: seconds in OUT.json; sizes in bytes; counts."""
    if suite == "times":
        return "second"
    if name.endswith(("-bytes", "-bytes-per-indexed-block")) or name == "peak-rss" \
            or name.startswith("bytes-read-"):
        return "byte"
    return "integer"


def _load(path, kind="times", apart=()):
    """The benchmark names of a suite, each unit checked, and the metadata keys all of
    them share (the benchmarks named in ``apart`` left out of that)."""
    suite = pyperf.BenchmarkSuite.load(str(path))
    benches = suite.get_benchmarks()
    units = {b.get_name(): b.get_unit() for b in benches}
    wrong = {n: u for n, u in units.items() if u != _unit(n, kind)}
    assert not wrong, f"{path}: unexpected units {wrong}"
    keys = set.intersection(*(set(b.get_metadata()) for b in benches
                              if b.get_name() not in apart))
    return set(units), keys


def _pair(out):
    return out, out.with_name(out.stem + ".counts.json")


def test_run_names_csv_columns_and_metadata(tmp_path):
    """One ``run`` with the pyperf runner (one worker, one value) and ``--csv``."""
    out, csv_path = tmp_path / "run.json", tmp_path / "run.csv"
    p = subprocess.run([sys.executable, "-m", "prefixbench", "--quiet", "run",
                        "-s", "ssd-blockhash", "-e", "lmdb", *SMALL, "-o", str(out),
                        "--csv", str(csv_path), "--processes", "1", "--values", "1",
                        "--warmups", "0", "--loops", "1"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    times, counts = _pair(out)
    names, keys = _load(times, apart={"match-latency-warm"})
    assert names == REPLAY_TIMES | {"match-latency-warm"}
    assert REPLAY_METADATA <= keys
    warm = pyperf.BenchmarkSuite.load(str(times)).get_benchmark("match-latency-warm")
    assert RUN_METADATA | {"gc"} <= set(warm.get_metadata())
    names, keys = _load(counts, "counts")
    assert names == REPLAY_COUNTS | ON_DISK | _index("ssd-blockhash")
    assert REPLAY_METADATA <= keys
    with open(csv_path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == CSV_COLUMNS and len(rows) == 2 and len(rows[1]) == len(CSV_COLUMNS)
    from prefixbench.harness.export import COLUMNS
    assert list(COLUMNS) == CSV_COLUMNS


def test_sweep_strategies_names(tmp_path, run_cli):
    out = tmp_path / "sweep.json"
    code, _stdout, err = run_cli("-q", "sweep", "strategies", *SMALL, "-o", out)
    assert code == 0, err
    times, counts = _pair(out)
    names, keys = _load(times)
    # the windows bins a trace fills are its own; every setting has the same ones
    bins = {n.rpartition("-match-latency-windows-")[2] for n in names
            if "-match-latency-windows-" in n}
    assert bins and bins <= {"1", "2", "3", "4", "5-8", "9-16", "17-plus"}
    windows = {f"match-latency-windows-{b}" for b in bins}
    assert names == {f"{s}-{n}" for s in SWEEP_STRATEGIES for n in REPLAY_TIMES | windows}
    assert REPLAY_METADATA | {"setting", "sweep", "scale", "repeat", "repeats", "threads",
                              "cache_bytes"} <= keys
    want = {"sizing-cache-bytes", "sizing-ssd-blockhash-entries",
            "sizing-ssd-blockhash-logical-bytes"}
    for s in SWEEP_STRATEGIES:
        own = REPLAY_COUNTS | SWEEP_SETTING_COUNTS | _index(s) | {
            f"match-requests-windows-{b}" for b in bins}
        if "memory-bytes" in INDEX_COUNTERS[s]:
            own |= MEMORY_COUNTS
        want |= {f"{s}-{n}" for n in own}
    names, keys = _load(counts, "counts")
    assert names == want
    assert RUN_METADATA | {"setting", "sweep", "scale", "repeats"} <= keys


def test_scale_names(tmp_path, run_cli):
    out = tmp_path / "scale.json"
    code, _stdout, err = run_cli("-q", "scale", "-s", "ssd-blockhash", "-e", "lmdb", *SMALL,
                                 "--threads", "1,2", "-o", out)
    assert code == 0, err
    times, counts = _pair(out)
    names, keys = _load(times)
    assert names == {f"threads-{t}-{n}" for t in (1, 2) for n in REPLAY_TIMES}
    assert REPLAY_METADATA | {"threads", "gil_free"} <= keys
    names, keys = _load(counts, "counts")
    assert names == {f"threads-{t}-{n}" for t in (1, 2)
                     for n in REPLAY_COUNTS | ON_DISK | _index("ssd-blockhash")}
    assert REPLAY_METADATA | {"threads", "gil_free"} <= keys


def test_recover_names(tmp_path, run_cli):
    out = tmp_path / "recover.json"
    code, _stdout, err = run_cli("-q", "recover", "-s", "dram-blockhash", "-n", "2e4",
                                 "-o", out)
    assert code == 0, err
    times, counts = _pair(out)
    names, keys = _load(times)
    assert names == {f"recovery-{n}" for n in (
        "total", "index", "load", "init", "deserialize", "rebuild", "engine-open",
        "plugin-registry", "first-match", "process-start-to-first-match")} | {"snapshot-write"}
    recover_md = RUN_METADATA | {"recovery_source", "recoveries", "hit_rate_equal",
                                 "unique_block_entries"}
    assert recover_md <= keys
    names, keys = _load(counts, "counts")
    assert names == {"index-entries", "index-memory-bytes", "peak-rss",
                     "probe-hit-tokens-before", "snapshot-bytes", "unique-block-entries"}
    assert recover_md <= keys


def test_payload_names(tmp_path, run_cli):
    paths = ("seq", "files", "lmdb", "packfile", "stripes")
    out = tmp_path / "payload.json"
    code, _stdout, err = run_cli("-q", "payload", "--payload", "8MiB", "--objects",
                                 "4,layerwise", "--layers", "4", "--restores", "1",
                                 "--stripe", "1MiB", "--pack-bytes", "16MiB",
                                 "--paths", ",".join(paths), "--work-dir", tmp_path / "w",
                                 "-o", out)
    assert code == 0, err
    times, counts = _pair(out)
    tags = {f"{p}-{pt}" for p in paths for pt in ("n4", "layerwise")}
    names, keys = _load(times)
    assert names == {f"restore-{t}" for t in tags}
    assert RUN_METADATA <= keys
    names, keys = _load(counts, "counts")
    # zero values are left out (a memory-mapped engine makes no read calls; a fast
    # host can round per-object microseconds to 0): every name is one of these ...
    every = ({f"{f}-{t}" for f in ("read-calls", "bytes-read", "host-us-per-object")
              for t in tags} | {f"layer-events-{p}-layerwise" for p in paths})
    assert names <= every, names - every
    # ... and these are never zero: reads through the kernel, and the layer events
    assert {f"read-calls-{p}-{pt}" for p in ("seq", "files", "packfile", "stripes")
            for pt in ("n4", "layerwise")} <= names
    assert {f"layer-events-{p}-layerwise" for p in paths} <= names
    assert RUN_METADATA <= keys


ZERO_ON_LMDB = {"store-log-bytes", "store-memory-outside-budget-bytes"}


def test_replay_figure_tables():
    """The replay's figure tables name what the runs above publish, plus the one figure
    they leave out as zero: ``store-log-bytes`` (LMDB keeps no separate log) and
    ``store-memory-outside-budget-bytes`` (LMDB keeps none)."""
    from prefixbench.harness import pyperf_io
    assert {n for n, _f in pyperf_io.TIME_FIGURES} == REPLAY_TIMES
    assert {n for n, _u, _f in pyperf_io.COUNT_FIGURES} == \
        REPLAY_COUNTS | ON_DISK | ZERO_ON_LMDB
    assert {n: u for n, u, _f in pyperf_io.COUNT_FIGURES} == {
        n: _unit(n, "counts") for n in REPLAY_COUNTS | ON_DISK | ZERO_ON_LMDB}
