"""``prefixbench sweep``: each kind runs, reports the right rows and figures,
applies the paper's cache rule, and turns bad input into one line.

Tiny workloads on the memory engine; behaviour only, never timings.
"""
import json
import subprocess
import sys

import pytest

from prefixbench.harness import allocator, sweeps
from prefixbench.errors import ConfigError

from cli_support import one_line_error as _one_line_error

TINY = {"sessions": "20"}


def _cfg(kind, workload="codeact", **kw):
    return sweeps.make_config(kind, workload=workload, workload_options=TINY, engine="memory",
                              **kw)


@pytest.fixture(scope="module")
def retrieval():
    return sweeps.run_sweep(_cfg("retrieval"))


@pytest.fixture(scope="module")
def ablation():
    return sweeps.run_sweep(_cfg("ablation", workload="ultrachat"))


@pytest.fixture(scope="module")
def strategies():
    return sweeps.run_sweep(_cfg("strategies"))




# ----------------------------------------------------------------------------- retrieval
def test_retrieval_rows_and_loss(retrieval):
    labels = [r.setting.label for r in retrieval.rows]
    assert labels == ["retrieval-1", "retrieval-2", "retrieval-3", "retrieval-4",
                      "retrieval-unlimited"]
    assert [r.setting.options["max_retrieval"] for r in retrieval.rows] == [1, 2, 3, 4, 0]
    for r in retrieval.rows:
        assert r.setting.options["backfill"] == "sync"     # repeatable by default
        assert r.result.false_hits == 0
        assert r.loss >= 0 and r.lost_tokens >= 0
        assert r.result.oracle_hit_tokens > 0
        assert r.stats["retrievals_per_query"] > 0
    unlimited = retrieval.row("retrieval-unlimited")
    assert unlimited.loss == 0 and unlimited.lost_tokens == 0
    # every setting replayed the same requests against the same oracle answer
    assert len({r.result.oracle_hit_tokens for r in retrieval.rows}) == 1
    table = retrieval.table()
    for label in ("retrieval-1", "retrieval-unlimited", "loss vs oracle", "retrievals/query"):
        assert label in table


def test_retrieval_pyperf_names_line_up_in_compare_to(tmp_path, run_cli):
    files = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.json"
        code, stdout, err = run_cli("--quiet", "sweep", "retrieval", "-w", "codeact", "-W",
                                    "sessions=20", "-W", f"seed={seed}", "--budgets",
                                    "1,unlimited", "-o", out)
        assert code == 0, err
        assert "retrieval-unlimited" in stdout and "retrieval-2 " not in stdout
        files.append(str(out))
    import pyperf
    suite = pyperf.BenchmarkSuite.load(files[0])
    names = set(suite.get_benchmark_names())
    assert {"retrieval-1-match-latency-mean", "retrieval-unlimited-match-latency-mean"} <= names
    b = suite.get_benchmark("retrieval-1-match-latency-mean")
    md = b.get_metadata()
    assert md["sweep"] == "retrieval" and md["setting"] == "retrieval-1"
    assert md["strategy"] == "sarp" and md["workload"] == "codeact"
    assert json.loads(md["config"])["strategy_options"]["max_retrieval"] == 1
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "r1.counts.json"))
    assert counts.get_benchmark("retrieval-unlimited-hit-tokens").mean() == \
        counts.get_benchmark("retrieval-unlimited-oracle-hit-tokens").mean()
    cmp = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", *files, "--table"],
                         capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    assert "retrieval-1-match-latency-mean" in cmp.stdout


# ----------------------------------------------------------------------------- ablation
def test_ablation_rows_and_mechanisms(ablation):
    labels = [r.setting.label for r in ablation.rows]
    assert labels == ["ablation-full", "ablation-no-refinement", "ablation-no-filtering",
                      "ablation-no-pruning"]
    opts = {r.setting.label: r.setting.options for r in ablation.rows}
    assert opts["ablation-no-refinement"]["refinement"] == "off"
    assert opts["ablation-no-filtering"]["filtering"] == "off"
    assert opts["ablation-no-pruning"]["pruning"] == "off"
    for r in ablation.rows:
        assert r.loss >= 0 and r.result.false_hits == 0
        assert r.stats["candidates_before_filtering"] >= r.stats["candidates_after_filtering"]
    nf = ablation.row("ablation-no-filtering").stats
    # without filtering nothing is ruled out: every candidate is read and verified
    assert nf["candidates_after_filtering"] == nf["candidates_before_filtering"]
    assert nf["candidates_retrieved"] == nf["candidates_before_filtering"]
    # pruning only ever skips routing points
    assert ablation.row("ablation-no-pruning").stats["entries"] >= \
        ablation.row("ablation-full").stats["entries"]
    table = ablation.table()
    for word in ("ablation-no-pruning", "cand. before filter", "routing bytes", "refinement",
                 "filtering", "pruning"):
        assert word in table


# ----------------------------------------------------------------------------- strategies
def test_strategies_paper_cache_rule(strategies):
    s = strategies.sizing
    assert s is not None and strategies.config.cache_rule == "paper"
    # ssd-blockhash's logical store: one 8-byte key + 16-byte value per indexed block
    assert s.logical_bytes == s.entries * 24
    assert strategies.cache_bytes == s.cache_bytes == round(0.10 * s.logical_bytes) > 0
    assert s.entries == strategies.row("ssd-blockhash").indexed_blocks
    assert s.entries == strategies.row("ssd-blockhash").stats["entries"]
    # every SSD-backed strategy's engine was opened with that cache, on a fresh store
    for r in strategies.rows:
        assert r.engine_cache_bytes == s.cache_bytes
        assert r.result.store_stats["reads"] > 0
    times, counts = strategies.suites()
    mds = {b.get_name(): b.get_metadata() for b in times + counts}
    assert mds["sarp-match-latency-mean"]["cache_bytes"] == s.cache_bytes
    names = {b.get_name(): b for b in counts}
    assert names["sizing-cache-bytes"].mean() == s.cache_bytes
    assert names["segment-hash-engine-cache-bytes"].mean() == s.cache_bytes


def test_strategies_rows_ratios_and_table4(strategies):
    assert [r.setting.label for r in strategies.rows] == list(sweeps.DEFAULT_STRATEGIES)
    ref = strategies.reference.result.throughput
    table = strategies.table()
    for r in strategies.rows:
        assert r.result.false_hits == 0 and r.loss >= 0
        ratio = strategies.throughput_ratio(r)
        assert ratio == pytest.approx(ref / r.result.throughput)
        line = next(ln for ln in table.splitlines() if ln.startswith(r.setting.label + " "))
        # the printed ratio is the printed throughputs' ratio (to rounding)
        cells = line.split()
        shown_tp = float(cells[1].replace(",", ""))
        shown_ratio = float(cells[2].rstrip("x"))
        assert shown_ratio == pytest.approx(ref / shown_tp, rel=0.01, abs=0.01)
    assert strategies.throughput_ratio(strategies.reference) == 1.0
    assert "paper Table 4" in table and "candidates actually retrieved" in table
    assert strategies.row("sarp").memory_bytes_per_block > 0


def test_strategies_fixed_cache_and_custom_list(run_cli):
    code, stdout, err = run_cli("--quiet", "sweep", "strategies", "-w", "ultrachat", "-W",
                                "sessions=20", "--strategies", "segment-hash,sarp",
                                "--cache-bytes", "3MiB", "-S", "segment-hash:S=32",
                                "-S", "tau=8")
    assert code == 0, err
    assert "ssd-blockhash's logical store" not in stdout     # no sizing replay
    assert "3.0 MiB" in stdout and "segment-hash ÷ it" in stdout
    # the header says which malloc the process ran on (--allocator)
    assert f"; malloc {allocator.detect()}\n" in stdout
    # the options table shows what each strategy was given, then the values in effect
    # of its options beyond the paper, defaults included
    opts = stdout[stdout.index("options of each strategy"):].splitlines()
    sarp_line = next(ln for ln in opts if ln.startswith("sarp "))
    assert "tau=8" in sarp_line
    assert "beyond the paper: backfill_wait=true, batch_windows=64, id_runs=64" in sarp_line
    assert "insert_reuse=true" in sarp_line
    hash_line = next(ln for ln in opts if ln.startswith("segment-hash "))
    assert "S=32" in hash_line and "beyond the paper" not in hash_line
    cfg = sweeps.make_config("strategies", workload="ultrachat", workload_options=TINY,
                             strategies="segment-hash,sarp", cache_bytes="3MiB",
                             strategy_options={"segment-hash:S": "32", "tau": "8"})
    assert cfg.cache_rule == "fixed" and cfg.cache_bytes == 3 << 20
    settings = {s.label: s.options for s in sweeps.plan(cfg)}
    assert settings["segment-hash"] == {"S": "32"}
    assert settings["sarp"]["tau"] == "8" and settings["sarp"]["backfill"] == "sync"


def test_a_variant_runs_the_same_strategy_again_with_its_own_options():
    """``sarp+batch_windows=3`` is sarp with the sweep's sarp options and its own on top:
    its matches fetch several windows per round trip, the plain sarp's never do."""
    cfg = _cfg("strategies", strategies="sarp,sarp+batch_windows=3+max_retrieval=2",
               strategy_options={"tau": "8", "batch_windows": "1"})
    settings = {s.label: s for s in sweeps.plan(cfg)}
    variant = settings["sarp+batch_windows=3+max_retrieval=2"]
    assert variant.strategy == "sarp"
    assert variant.options == {"backfill": "sync", "tau": "8", "batch_windows": "3",
                               "max_retrieval": "2"}
    assert settings["sarp"].options == {"backfill": "sync", "tau": "8", "batch_windows": "1"}
    res = sweeps.run_sweep(cfg)
    plain, batched = res.row("sarp"), res.row(variant.label)
    assert plain.stats["speculative_reads"] == 0
    assert batched.stats["speculative_reads"] > 0
    assert plain.result.false_hits == batched.result.false_hits == 0
    assert "sarp+batch_windows=3+max_retrieval=2" in res.table()


def test_a_variants_engine_keys_go_to_its_store_only():
    """``engine.KEY`` keys of a variant leave its strategy options and become engine
    options of that setting alone."""
    cfg = sweeps.make_config("strategies", workload="codeact", workload_options=TINY,
                             engine="rocksdb", engine_options={"statistics": "true"},
                             strategies="sarp,sarp+engine.block_bytes=16KiB+tau=8")
    plain, variant = sweeps.plan(cfg)
    assert plain.engine_options == {} and "block_bytes" not in plain.options
    assert variant.engine_options == {"block_bytes": "16KiB"}
    assert variant.options == {"backfill": "sync", "tau": "8"}
    assert cfg.engine_options == {"statistics": "true"}


def test_match_latency_against_windows_per_query(strategies):
    """Every timed match lands in one bin of windows (sarp's segment size), for every
    setting alike; the table shows each bin with its matches."""
    S = strategies.reference.stats["geometry_S"]
    times, counts = strategies.suites()
    assert counts[0].get_metadata()["windows_segment_blocks"] == S
    for row in strategies.rows:
        label = row.setting.label
        got = {b.get_name()[len(label) + 1:]: b for b in counts
               if b.get_name().startswith(f"{label}-match-requests-windows-")}
        assert sum(int(b.get_values()[0]) for b in got.values()) == row.result.requests
        windows = -(-row.result.query_blocks // S)
        assert int(got["match-requests-windows-2"].get_values()[0]) == int((windows == 2).sum())
        lat = next(b for b in times if b.get_name() == f"{label}-match-latency-windows-2")
        want = row.result.match_ns[windows == 2].mean() / 1e9
        assert lat.get_values()[0] == pytest.approx(want)
    table = strategies.table()
    assert "match latency against windows per query" in table
    assert f"windows of sarp's segment, {S} blocks" in table


def test_windows_bins_cover_every_count():
    from prefixbench.harness.pyperf_io import windows_figures
    from prefixbench.harness.replay import ReplayResult
    import numpy as np
    res = ReplayResult(match_ns=np.array([10, 20, 30, 40, 50, 60], np.int64),
                       query_blocks=np.array([1, 64, 65, 128, 1000, 2000], np.int64))
    got = {n: v for n, _u, v in windows_figures(res, 64)}
    assert got == {"match-latency-windows-1": 15e-9, "match-requests-windows-1": 2,
                   "match-latency-windows-2": 35e-9, "match-requests-windows-2": 2,
                   "match-latency-windows-9-16": 50e-9, "match-requests-windows-9-16": 1,
                   "match-latency-windows-17-plus": 60e-9, "match-requests-windows-17-plus": 1}
    assert windows_figures(ReplayResult(), 64) == []


# ----------------------------------------------------------------------------- space
def test_space_sweep_table5_against_ssd_blockhash(tmp_path, run_cli):
    """ssd-blockhash comes first whatever the order given; its ratios are 1; its
    block-metadata entries are its records (one per block); sarp packs the same
    blocks into far fewer records, each block at least once; segment-hash keeps one
    record per block position, each carrying a power-of-two chunk."""
    import pyperf

    cfg = sweeps.make_config("space", workload="ultrachat", workload_options=TINY,
                             engine="lmdb", strategies="sarp,segment-hash,ssd-blockhash")
    assert [s.strategy for s in sweeps.plan(cfg)] == ["ssd-blockhash", "sarp", "segment-hash"]
    res = sweeps.run_sweep(cfg)
    ref, sarp, shash = res.rows
    unique = ref.indexed_blocks
    assert ref.stats["stored_block_entries"] == ref.stats["entries"] == unique
    assert ref.result.store_records == unique
    assert ref.result.logical_bytes == unique * (8 + 16)
    assert res.disk_ratio(ref) == 1.0 and res.entries_ratio(ref) == 1.0
    for row in (sarp, shash):
        assert row.stats["stored_block_entries"] >= unique
        assert row.result.store_bytes > 0 and row.result.false_hits == 0
        assert res.disk_ratio(row) == row.result.store_bytes / ref.result.store_bytes
    assert sarp.result.store_records < unique / 4
    assert shash.result.store_records == unique
    assert res.entries_ratio(shash) > 1.5        # Fenwick layout: 1 + log2(S)/2 writes per block
    table = res.table()
    assert "Table 5" in table and "entries ÷ ssd-blockhash" in table
    out = tmp_path / "space.json"
    code, _stdout, err = run_cli("--quiet", "sweep", "space", "-w", "ultrachat", "-W",
                                 "sessions=10", "-o", str(out))
    assert code == 0, err
    names = set(pyperf.BenchmarkSuite.load(str(out).replace(".json", ".counts.json"))
                .get_benchmark_names())
    assert {"ssd-blockhash-store-records", "sarp-store-bytes",
            "sarp-disk-ratio-to-reference-ppm", "sarp-entries-ratio-to-reference-ppm",
            "sarp-index-stored-block-entries"} <= names


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args,needle", [
    (["sweep", "nosuch", "-w", "codeact"], "nosuch"),
    (["sweep", "strategies", "-w", "codeact", "--strategies", "sarp,nosuch"], "nosuch"),
    (["sweep", "strategies", "-w", "codeact", "--strategies", "sarp,,segment-hash"],
     "--strategies"),
    (["sweep", "strategies", "-w", "codeact", "--strategies", "sarp,sarp"], "twice"),
    (["sweep", "retrieval", "-w", "codeact", "--budgets", "1,x"], "'x'"),
    (["sweep", "retrieval", "-w", "codeact", "--budgets", "-2"], "--budgets"),
    (["sweep", "ablation", "-w", "codeact", "--budgets", "1"], "--budgets"),
    (["sweep", "retrieval", "-w", "codeact", "--strategies", "sarp"], "--strategies"),
    (["sweep", "strategies", "-w", "codeact", "--cache-fraction", "1.5"], "--cache-fraction"),
    (["sweep", "strategies", "-w", "codeact", "--cache-fraction", "abc"], "--cache-fraction"),
    (["sweep", "strategies", "-w", "codeact", "--cache-rule", "paper", "--cache-bytes", "1MiB"],
     "--cache-bytes"),
    (["sweep", "strategies", "-w", "codeact", "--cache-rule", "tenth"], "--cache-rule"),
    (["sweep", "strategies", "-w", "codeact", "--cache-bytes", "lots"], "--cache-bytes"),
    (["sweep", "retrieval", "-w", "codeact", "-S", "tau=0"], "tau"),
    (["sweep", "retrieval", "-w", "codeact", "-S", "segment-hash:S=32"], "segment-hash"),
    (["sweep", "retrieval", "-w", "codeact", "--backfill", "later"], "--backfill"),
    (["sweep", "retrieval", "-w", "codeact", "--limit", "0"], "--limit"),
    (["sweep", "retrieval", "-w", "nowl"], "nowl"),
    (["sweep", "retrieval", "-w", "codeact", "-e", "nodb"], "nodb"),
    (["sweep", "space", "-w", "codeact", "-e", "memory"], "on-disk engine"),
    (["sweep", "space", "-w", "codeact", "--strategies", "sarp,radix"], "radix"),
    # a variant's engine options: the engine's own names, for a strategy with a store
    (["sweep", "strategies", "-w", "codeact", "-e", "rocksdb", "--strategies",
      "sarp,sarp+engine.block_size=8KiB"], "'sarp+engine.block_size=8KiB': option 'block_size' "
     "is not known to engine rocksdb"),
    (["sweep", "strategies", "-w", "codeact", "--strategies", "sarp+engine.block_bytes=8KiB"],
     "not known to engine memory"),
    (["sweep", "strategies", "-w", "codeact", "-e", "rocksdb", "--strategies",
      "sarp,dram-blockhash+engine.block_bytes=8KiB"], "dram-blockhash keeps nothing in an engine"),
])
def test_bad_input_is_one_line(run_cli, args, needle):
    code, stdout, err = run_cli(*args)
    _one_line_error(code, err, needle)
    assert stdout == ""          # nothing ran


def test_make_config_raises_config_error():
    with pytest.raises(ConfigError, match="unknown kind"):
        sweeps.make_config("fig9", workload="codeact")
    assert sweeps.parse_budgets("3, unlimited,1") == (3, 0, 1)


# ----------------------------------------------------------------------------- paper scale
@pytest.fixture
def small_paper(monkeypatch):
    """codeact's paper size shrunk to 20,000 blocks (about 1,200 requests), free space
    unlimited: the real sizes take hours."""
    from prefixbench.harness import preflight
    from prefixbench.workloads import profiles
    monkeypatch.setitem(profiles.PAPER_BLOCKS, "codeact", 20_000)
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(1e18, 1e18))


def test_paper_scale_loads_then_times_the_last_requests(small_paper, monkeypatch):
    """The load phase goes through insert_known_prefix with the counting pass's
    prefix counts; the run phase times exactly --run-requests; the oracle saw both."""
    from prefixbench.registry import get_registry

    cls = get_registry().get("strategy", "ssd-blockhash").factory
    calls = []
    real = cls.insert_known_prefix

    def spy(self, ids, metas, known):
        calls.append((len(ids), known))
        return real(self, ids, metas, known)
    monkeypatch.setattr(cls, "insert_known_prefix", spy)
    cfg = sweeps.make_config("strategies", workload="codeact", engine="lmdb", scale="paper",
                             run_requests="100", strategies="sarp,ssd-blockhash",
                             cap_rule="fixed")
    res = sweeps.run_sweep(cfg)
    p = res.paper
    assert p.fraction == 1.0 and p.run_requests == 100
    assert p.load_requests == p.requests - 100 > 0
    assert abs(p.unique_blocks - 20_000) < 2_000          # about the (shrunk) paper size
    assert len(calls) == p.load_requests
    assert any(known > 0 for _n, known in calls) and all(k <= n for n, k in calls)
    for r in res.rows:
        assert r.result.requests == 100 and r.load_requests == p.load_requests
        assert r.result.false_hits == 0 and r.loss >= 0
        assert r.indexed_blocks == p.unique_blocks       # the oracle shadowed the load too
        assert r.result.oracle_hit_tokens > 0
    # the cache rule needs no sizing replay: 10% of unique blocks x 24 B
    assert res.sizing.disk_bytes is None and res.sizing.entries == p.unique_blocks
    assert res.cache_bytes == round(0.1 * p.unique_blocks * 24)
    assert all(r.engine_cache_bytes == res.cache_bytes for r in res.rows)
    table = res.table()
    assert "scale paper: the full paper size of codeact" in table
    assert "load phase" in table and "the last 100 timed" in table
    assert "at --scale paper" in table
    # the load's bulk path routes nothing: Table 4 says its counts are the run phase's
    assert "candidates counted over the run phase's 100 matches" in table
    assert res.span_share is not None and "spans with > 3 alternatives" in table
    _times, counts = res.suites()
    md = counts[0].get_metadata()
    assert md["scale"] == "paper" and md["run_requests"] == 100
    # sarp's reads per insert count the run's inserts, each after its match, not the load's
    assert "segment reads per insert after a match" in table
    got = {b.get_name(): b.mean() for b in counts}
    assert got["sarp-index-inserts-after-match"] == 100
    assert md["load_requests"] == p.load_requests


def test_paper_scale_samples_table4_over_the_load_and_counts_it_apart(small_paper,
                                                                     monkeypatch):
    """sarp's candidate counts over queries spread across the load (which routes
    nothing of its own) are figures of their own, judged against the paper; the
    run phase's figures and answers are the same as without the samples."""
    def sweep(samples):
        monkeypatch.setattr(sweeps, "LOAD_MATCH_SAMPLES", samples)
        cfg = sweeps.make_config("strategies", workload="codeact", engine="lmdb",
                                 scale="paper", run_requests="100", strategies="sarp",
                                 cap_rule="fixed")
        res = sweeps.run_sweep(cfg)
        _times, counts = res.suites()
        return res, {b.get_name(): b.mean() for b in counts}

    plain, plain_counts = sweep(0)
    res, counts = sweep(300)
    load = res.paper.load_requests
    step = -(-load // 300)
    assert counts["sarp-index-load-match-samples"] == -(-load // step) <= 300
    assert counts["sarp-index-load-candidates-before-filtering"] > 1
    assert "sarp-index-load-match-samples" not in plain_counts
    for name, value in plain_counts.items():
        if "-index-" in name:       # every run-phase counter as if no query was sampled
            assert counts[name] == value, name
    assert res.rows[0].result.hit_tokens == plain.rows[0].result.hit_tokens
    assert res.rows[0].result.false_hits == 0
    table = res.table()
    assert f"and (rows ', load') over {int(counts['sarp-index-load-match-samples']):,} " in table
    assert "candidates per routing entry before filtering, load" in table
    assert ", load" not in plain.table()
    from prefixbench.reports import sweeps as report
    assert "index-load-candidates-before-filtering" in report.calibration(res.report(), "sarp")
    assert "index-load-candidates-before-filtering" not in report.calibration(plain.report(),
                                                                              "sarp")


def test_paper_scale_settles_the_store_between_load_and_run(small_paper, monkeypatch):
    """The load's flushes and compactions finish before the timed run starts, once
    per setting, and the seconds that took are in the suites' metadata."""
    from prefixbench.engines.rocksdb import RocksDBStore
    from prefixbench.registry import get_registry

    cls = get_registry().get("strategy", "sarp").factory
    events = []
    real_settle, real_match = RocksDBStore.settle, cls.match

    def settle(self, timeout=600.0):
        events.append("settle")
        return real_settle(self, timeout)

    def match(self, ids):
        if not events or events[-1] != "match":
            events.append("match")
        return real_match(self, ids)
    monkeypatch.setattr(RocksDBStore, "settle", settle)
    monkeypatch.setattr(cls, "match", match)
    cfg = sweeps.make_config("strategies", workload="codeact", engine="rocksdb",
                             scale="paper", run_requests="50", strategies="sarp",
                             cap_rule="fixed")
    res = sweeps.run_sweep(cfg)
    assert events == ["settle", "match"]
    assert res.rows[0].settle_seconds > 0
    times, _counts = res.suites()
    assert times[0].get_metadata()["load_settle_seconds"] == round(res.rows[0].settle_seconds, 6)


def test_paper_scale_threads_are_checked_against_the_loaded_oracle(small_paper):
    cfg = sweeps.make_config("strategies", workload="codeact", engine="lmdb", scale="paper",
                             run_requests="80", strategies="sarp,ssd-blockhash",
                             cap_rule="fixed", threads="1,2")
    res = sweeps.run_sweep(cfg)
    assert {(r.setting.label, r.threads) for r in res.all_rows} == {
        ("sarp", 1), ("sarp", 2), ("ssd-blockhash", 1), ("ssd-blockhash", 2)}
    for r in res.all_rows:
        assert r.result.requests == 80 and r.result.false_hits == 0
        assert r.result.oracle_hit_tokens >= r.result.hit_tokens > 0
        assert r.indexed_blocks == res.paper.unique_blocks


def test_threaded_replay_checks_against_a_loaded_oracle():
    """replay_threaded with a given oracle (holding a load phase) counts no false hit for
    a strategy loaded the same way - a fresh oracle would - and still catches a lie."""
    import numpy as np

    from prefixbench.metas import make_metas
    from prefixbench.harness.replay import replay
    from prefixbench.plugins.radix import RadixStrategy
    from prefixbench.plugins.strategy import Match
    from prefixbench.workloads.model import Request

    ids = np.arange(1, 9, dtype=np.uint64)

    class Trace:
        name, block_size = "t", 16

        def requests(self):
            return iter([Request(0, 0, ids[:4], ids, 64)])

        def __len__(self):
            return 1

    class Lying(RadixStrategy):
        def match(self, block_ids):
            m = super().match(block_ids)
            return Match(m.n_blocks, make_metas(block_ids[:m.n_blocks], 5, 16))

    for cls, false_hits in ((RadixStrategy, 0), (Lying, 4)):
        strat, oracle = cls(meta_size=16), RadixStrategy(meta_size=16)
        for s in (strat, oracle):             # the load phase
            s.insert(ids, make_metas(ids, 0, 16))
        res = replay(strat, Trace(), threads=2, threaded=True, oracle=oracle)
        assert res.false_hits == false_hits and res.oracle_hit_tokens == 64


def test_run_requests_beyond_the_trace_is_one_line(small_paper, run_cli):
    from prefixbench.harness.bench import make_workload
    from prefixbench.workloads.profiles import paper_workload_options
    n = len(make_workload("codeact", paper_workload_options("codeact", 1.0)))
    code, out, err = run_cli("sweep", "strategies", "-w", "codeact", "-e", "lmdb",
                             "--scale", "paper", "--cap-rule", "fixed", "--run-requests",
                             str(n + 1))
    _one_line_error(code, err, "--run-requests", f"{n + 1:,}", f"trace's {n:,} requests")
    assert out == ""


# ----------------------------------------------------------------------------- repeats, threads
def test_repeats_and_threads_side_by_side():
    cfg = _cfg("strategies", strategies="sarp,ssd-blockhash", repeat=2, threads="1,2")
    assert cfg.threads == (1, 2) and cfg.repeat == 2 and cfg.threaded
    res = sweeps.run_sweep(cfg)
    assert len(res.all_rows) == 2 * 2 * 2
    assert [r.setting.label for r in res.rows] == ["sarp", "ssd-blockhash"]
    assert all(r.repeat == 0 and r.threads == 1 for r in res.rows)
    for r in res.all_rows:
        assert r.result.threads == r.threads and r.result.false_hits == 0
        # the process did work while the requests ran
        assert r.result.cpu_seconds > 0 and r.result.cores_busy > 0
    # the speedup is the median over repeats of each repeat's 2-thread / 1-thread throughput
    ones = {r.repeat: r.result.throughput for r in res.runs("sarp", 1)}
    twos = [r.result.throughput / ones[r.repeat] for r in res.runs("sarp", 2)]
    med, lo, hi = res.speedup("sarp", 2)
    assert med == pytest.approx(sum(twos) / 2) and (lo, hi) == (min(twos), max(twos))
    ratios = [a.result.throughput / b.result.throughput
              for a, b in zip(res.runs("sarp"), res.runs("ssd-blockhash"))]
    assert res.spread("ssd-blockhash", lambda a, b: a.result.throughput
                      / b.result.throughput)[1:] == (min(ratios), max(ratios))
    table = res.table()
    assert "2 repeats (median, min-max)" in table
    assert "request threads side by side" in table and "42 request threads" in table
    assert "14 RocksDB threads" in table and "cores" in table
    assert "speedup 2/1" in table and "serial frac @2" in table and "Amdahl bound @2" in table
    assert "cores busy @1" in table and "cores busy @2" in table
    times, counts = res.suites()
    names = {b.get_name(): b for b in times + counts}
    busy = names["sarp-threads-2-cpu-cores-busy"].get_runs()[0].values[0]
    assert busy == pytest.approx(res.runs("sarp", 2)[0].result.cores_busy)
    one = names["sarp-match-latency-mean"]
    assert len(one.get_runs()) == 2                        # every repeat's value is kept
    assert [r.get_metadata()["repeat"] for r in one.get_runs()] == [0, 1]
    assert names["sarp-threads-2-match-latency-mean"].get_runs()[0].get_metadata()[
        "threads"] == 2


def test_strategies_at_one_thread_count_above_one_print_their_table(run_cli):
    """The sizing replay's readings (one thread) do not count as a thread count the
    strategies ran at: --threads 2 alone renders the strategies table at 2."""
    code, out, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-e", "memory",
                             "-W", "sessions=10", "--strategies", "sarp,radix",
                             "--threads", "2")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert ["sarp", "radix"] == [r[0] for r in rows if r and r[0] in ("sarp", "radix")][:2]
    assert "request threads 2" in out


def test_karp_flatt():
    from prefixbench.reports.show import amdahl_text, karp_flatt
    assert karp_flatt(1.6, 2) == pytest.approx(0.25)
    assert amdahl_text(karp_flatt(1.6, 2)) == "4.00x"
    assert karp_flatt(2.0, 2) == pytest.approx(0.0) and amdahl_text(0.0) == "unbounded"
    assert karp_flatt(0.75, 2) == pytest.approx((1 / 0.75 - 0.5) / 0.5)
    assert karp_flatt(1.0, 1) != karp_flatt(1.0, 1)      # nan: no parallelism to measure


def test_scale_prints_serial_fraction(run_cli):
    code, out, err = run_cli("--quiet", "scale", "-s", "dram-blockhash", "-w", "codeact",
                             "-W", "sessions=10", "--threads", "1,2")
    assert code == 0, err
    assert "serial frac" in out and "Amdahl bound" in out and "Karp-Flatt" in out


# ----------------------------------------------------------------------------- cap rule
def _fake_choice(fraction=0.25):
    from prefixbench.harness.caprule import CapChoice
    return CapChoice(fraction=fraction, nodes=12, total_nodes=48, sarp_s=[0.1] * 5,
                     capped_s=[0.15] * 5, sarp_median=0.1, capped_median=0.15, ratio=1.5,
                     in_band=True, entries=10 ** 7, workload="codeact", engine="lmdb",
                     steps=[(fraction, 0.15, 1.5)])


@pytest.fixture
def fake_cap(monkeypatch):
    """choose_cap stands in for the slow search; records how it was called."""
    from prefixbench.harness import caprule
    calls = []

    def choose(**kw):
        calls.append(kw)
        c = _fake_choice()
        c.workload_options = kw["workload_options"]
        c.engine_options = kw["engine_options"]
        c.strategy_options = kw["strategy_options"]
        return c
    monkeypatch.setattr(caprule, "choose_cap", choose)
    return calls


def test_cap_rule_paper_applies_the_chosen_fraction(fake_cap, tmp_path, run_cli):
    out = tmp_path / "s.json"
    code, stdout, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-W",
                                "sessions=20", "-e", "lmdb", "--strategies",
                                "sarp,segment-radix-capped", "-o", out)
    assert code == 0, err
    (call,) = fake_cap
    assert call["entries"] == 10 ** 7 and call["recoveries"] == 5
    assert call["engine"] == "lmdb" and call["workload"] == "codeact"
    assert call["workload_options"] == {"sessions": "20"}
    assert call["strategy_options"]["sarp"]["backfill"] == "sync"
    line = _fake_choice().line()
    assert stdout.splitlines()[0] == line                 # above the table
    assert "recovery ratio 1.50x" in line
    import pyperf
    suite = pyperf.BenchmarkSuite.load(str(out))
    md = suite.get_benchmark("segment-radix-capped-match-latency-mean").get_metadata()
    assert md["cap_fraction"] == 0.25 and md["cap_recovery_ratio"] == 1.5
    assert json.loads(md["config"])["strategy_options"]["cap_fraction"] == 0.25
    assert md["cap_rule"] == line


def test_cap_rule_cache_reuses_a_saved_choice(fake_cap, tmp_path):
    cache = tmp_path / "cap.json"
    kw = dict(strategies="sarp,segment-radix-capped", cap_cache=str(cache))
    cfg = sweeps.make_config("strategies", workload="codeact", workload_options=TINY,
                             engine="lmdb", **kw)
    assert cfg.cap_rule == "paper"
    first = sweeps.run_sweep(cfg)
    assert len(fake_cap) == 1 and cache.exists()
    second = sweeps.run_sweep(cfg)
    assert len(fake_cap) == 1                          # loaded, not searched again
    assert second.cap_choice.fraction == first.cap_choice.fraction == 0.25
    assert second.row("segment-radix-capped").setting.options["cap_fraction"] == 0.25


def test_cap_rule_fixed_keeps_cap_nodes(fake_cap):
    cfg = sweeps.make_config("strategies", workload="codeact", workload_options=TINY,
                             engine="lmdb", strategies="sarp,segment-radix-capped",
                             cap_rule="fixed",
                             strategy_options={"segment-radix-capped:cap_nodes": "64"})
    opts = {s.label: s.options for s in sweeps.plan(cfg)}
    assert opts["segment-radix-capped"] == {"cap_nodes": "64"}
    res = sweeps.run_sweep(cfg)
    assert fake_cap == [] and res.cap_choice is None
    # on the memory engine nothing survives a recovery: the default is then fixed
    assert _cfg("strategies").cap_rule == "fixed"


# ----------------------------------------------------------------------------- breakdown, calibration
def test_breakdown_table_under_the_sweep(run_cli):
    code, out, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-W",
                             "sessions=10", "--strategies", "sarp,dram-blockhash",
                             "--breakdown")
    assert code == 0, err
    head, _, tail = out.partition("where the time goes (paper Fig. 7)")
    assert "strategies side by side" in head
    assert "sarp" in tail and "dram-blockhash" in tail and "clock overhead" in tail


def test_breakdown_on_rocksdb_says_where_the_reads_were_served(run_cli, tmp_path):
    """A breakdown on RocksDB turns its statistics on: the counts suites carry the
    file reads, cache and memtable hits per request, and the sweep prints them."""
    out_json = str(tmp_path / "sw.json")
    code, out, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-W",
                             "sessions=10", "--strategies", "sarp,ssd-blockhash", "-e",
                             "rocksdb", "--cache-bytes", "1MiB", "--breakdown", "-o", out_json)
    assert code == 0, err
    assert "what storage alone allows (sarp's storage time per request" in out
    _, _, reads = out.partition("where the reads were served")
    assert "file reads/request" in reads and "sarp" in reads and "ssd-blockhash" in reads
    assert "table files at start" in reads
    from prefixbench.reports.results import load
    res = load(out_json)
    # the store was empty when these timed requests began (no load phase at this scale)
    assert res.md("sarp")["store_level_files"] == "none"
    for s in ("sarp", "ssd-blockhash"):
        served = sum(r.median for r in (res.get(f, s) for f in (
            "store-device-reads-per-request", "store-cache-hits-per-request",
            "store-memtable-hits-per-request")) if r is not None)
        assert served > 0, s
    # without a breakdown the engine keeps no statistics and no such figure is written
    code, out, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-W",
                             "sessions=10", "--strategies", "ssd-blockhash", "-e", "rocksdb",
                             "--cache-bytes", "1MiB", "-o", str(tmp_path / "plain.json"))
    assert code == 0, err
    assert "where the reads were served" not in out
    plain = load(str(tmp_path / "plain.json"))
    assert plain.get("store-device-reads-per-request", "ssd-blockhash") is None


def test_level_files_text_names_each_level_that_holds_files():
    from prefixbench.harness.sweeps import level_files_text
    assert level_files_text({6: 41, 0: 4}) == "L0 4, L6 41"
    assert level_files_text({}) == "none"


class _Rows:
    """A stand-in for one setting's breakdown figures (seconds)."""

    def __init__(self, match, insert, store_match=0.0, store_insert=0.0, breakdown=True,
                 backfill_insert=0.0):
        self.breakdown = breakdown
        self._lat = {"match": match, "insert": insert}
        self._phases = {("match", "storage"): store_match, ("insert", "storage"): store_insert,
                        ("insert", "backfill"): backfill_insert}

    def latency(self, which):
        return self._lat[which]

    def phase_mean(self, which, name):
        return self._phases.get((which, name), 0.0)


def test_storage_bound_counts_every_storage_kind():
    from prefixbench.reports.sweeps import storage_bound
    # sarp's back-fill reads are engine time too: 300 + 50 + 50 us of storage in all
    text = storage_bound([("sarp", _Rows(400e-6, 150e-6, 300e-6, 50e-6, backfill_insert=50e-6)),
                          ("segment-radix-capped", _Rows(700e-6, 100e-6))])
    assert ["segment-radix-capped", "800.0", "us", "400.0", "us", "2.00x"] in \
        [ln.split() for ln in text.splitlines()]


def test_storage_bound_is_the_others_request_over_the_firsts_storage():
    from prefixbench.reports.sweeps import storage_bound
    text = storage_bound([("sarp", _Rows(400e-6, 150e-6, 300e-6, 50e-6)),
                          ("segment-radix-capped", _Rows(600e-6, 100e-6))])
    rows = [ln.split() for ln in text.splitlines()]
    assert text.startswith("what storage alone allows (sarp's storage time per request")
    # (600 + 100) us over sarp's 300 + 50 us of storage: at most 2.00x
    assert ["segment-radix-capped", "700.0", "us", "350.0", "us", "2.00x"] in rows
    assert "file reads" not in text         # no engine counters given
    text = storage_bound([("sarp", _Rows(400e-6, 150e-6, 300e-6, 50e-6)),
                          ("segment-radix-capped", _Rows(600e-6, 100e-6)),
                          ("segment-hash", _Rows(500e-6, 100e-6))],
                         {"sarp": 2.0, "segment-radix-capped": 3.0})
    rows = [ln.split() for ln in text.splitlines()]
    assert rows[1][-4:] == ["file", "reads", "÷", "sarp"]
    assert ["segment-radix-capped", "700.0", "us", "350.0", "us", "2.00x", "1.50x"] in rows
    assert ["segment-hash", "600.0", "us", "350.0", "us", "1.71x", "-"] in rows
    # nothing to bound without the first's storage time, or with nobody beside it
    assert storage_bound([("sarp", _Rows(1e-4, 1e-4)), ("x", _Rows(1e-4, 1e-4))]) is None
    assert storage_bound([("sarp", _Rows(1e-4, 1e-4, 5e-5, 5e-5))]) is None
    assert storage_bound([("sarp", _Rows(1e-4, 1e-4, 5e-5, 5e-5, breakdown=False)),
                          ("x", _Rows(1e-4, 1e-4))]) is None


def test_run_breakdown(run_cli):
    code, out, err = run_cli("--quiet", "run", "-s", "dram-blockhash", "-w", "codeact", "-W",
                             "sessions=10", "--no-runner", "--breakdown")
    assert code == 0, err
    assert "where the time goes" in out and "clock overhead" in out


def test_calibration_against_table4(strategies):
    """The suites carry the paper's Table 4 for the workload; the report judges each
    figure within 25% of it, from the figures in the same suites."""
    from prefixbench.reports import sweeps as report
    res = strategies.report()
    md = res.md("sarp")
    assert json.loads(md["table4_paper"]) == list(sweeps.PAPER_TABLE4["codeact"])
    assert md["calibration_tolerance"] == sweeps.CALIBRATION_TOLERANCE
    cal = report.calibration(res, "sarp")
    got = res.get("index-candidates-before-filtering", "sarp").median
    want, ok = cal["index-candidates-before-filtering"]
    assert want == 59.3 and ok == (abs(got - 59.3) <= 0.25 * 59.3)
    assert set(cal) == {"index-candidates-before-filtering", "index-candidates-after-filtering",
                        "index-candidates-retrieved", "span-share-gt3"}
    # a workload the paper did not measure carries no paper values: no paper column
    plain = strategies.report()
    for b in plain.metadata.values():
        b.pop("table4_paper", None)
    assert report.calibration(plain, "sarp") == {}
    assert "within 25%" not in report.table4(plain, "sarp")
    assert set(sweeps.PAPER_TABLE4) == {"codeact", "lmcache-agent", "eabf", "ultrachat"}


def test_strategies_table_shows_calibration(strategies):
    table = strategies.table()
    assert "at --scale small" in table and "within 25%" in table and "59.30" in table
    # the trace's section 3.2 statistic, measured on the same workload
    from prefixbench.harness.bench import make_workload
    from prefixbench.workloads.describe import describe
    cfg = strategies.config
    want = describe(make_workload(cfg.workload, cfg.workload_options))["span_share_gt3"]
    assert strategies.span_share == pytest.approx(want)
    line = next(ln for ln in table.splitlines() if ln.startswith("spans with > 3"))
    assert f"{want:.2%}" in line and "21.31%" in line
    _times, counts = strategies.suites()
    assert counts[0].get_metadata()["span_share_gt3"] == round(want, 6)


@pytest.mark.parametrize("args,needle", [
    (["--scale", "huge"], "--scale"),
    (["--run-requests", "100"], "--run-requests"),                       # small scale
    (["--scale", "paper", "--limit", "10", "-e", "lmdb"], "--limit"),
    (["--scale", "paper", "-W", "sessions=10", "-e", "lmdb"], "sessions="),
    (["--scale", "paper", "--run-requests", "0", "-e", "lmdb"], "--run-requests"),
    (["--scale", "paper", "--run-requests", "lots", "-e", "lmdb"], "--run-requests"),
    (["--repeat", "0"], "--repeat"),
    (["--repeat", "101"], "--repeat"),
    (["--threads", "0"], "--threads"),
    (["--threads", "1,x"], "--threads"),
    (["--threads", "1,1"], "twice"),
    (["--cap-rule", "tenth"], "--cap-rule"),
    (["--cap-rule", "paper"], "memory"),                                # volatile engine
    (["-e", "lmdb", "--cap-rule", "fixed", "--cap-entries", "1e7"], "--cap-entries"),
    (["-e", "lmdb", "--cap-entries", "1e5"], "--cap-entries"),
    (["-e", "lmdb", "--cap-recoveries", "2"], "--cap-recoveries"),
    (["-e", "lmdb", "--cap-recoveries", "x"], "--cap-recoveries"),
    (["-e", "lmdb", "--cap-cache", "/no/such/dir/cap.json"], "--cap-cache"),
    (["-e", "lmdb", "-S", "segment-radix-capped:cap_nodes=64"], "cap_nodes"),
    (["-e", "lmdb", "--strategies", "sarp,ssd-blockhash", "--cap-entries", "1e7"],
     "segment-radix-capped"),
    (["--strategies", "sarp,sarp+batch_windows"], "'batch_windows' is not KEY=VALUE"),
    (["--strategies", "sarp,sarp+batch_windows="], "is not KEY=VALUE"),
    (["--strategies", "sarp+tau=8+tau=9"], "sets tau twice"),
    (["--strategies", "sarp,sarp+batch_windows=0"], "batch_windows"),
    (["--strategies", "sarp,sarp+no_such_option=1"], "no_such_option"),
    (["--strategies", "sarp,nosuch+tau=8"], "unknown strategy 'nosuch'"),
    (["--strategies", "sarp+tau=8,sarp+tau=8"], "twice"),
])
def test_bad_strategies_options_are_one_line(run_cli, args, needle):
    code, stdout, err = run_cli("sweep", "strategies", "-w", "codeact", *args)
    _one_line_error(code, err, needle)
    assert stdout == ""


@pytest.mark.parametrize("args,needle", [
    (["sweep", "retrieval", "-w", "codeact", "--scale", "paper"], "--scale"),
    (["sweep", "ablation", "-w", "codeact", "--repeat", "3"], "--repeat"),
    (["sweep", "space", "-w", "codeact", "--threads", "1,2"], "--threads"),
    (["sweep", "retrieval", "-w", "codeact", "--cap-rule", "fixed"], "--cap-rule"),
    (["sweep", "retrieval", "-w", "codeact", "--no-device-probe"], "--no-device-probe"),
    (["sweep", "capacity", "-w", "codeact", "--pool-blocks", "1e3", "--no-device-probe"],
     "--no-device-probe"),
    (["sweep", "strategies", "-w", "oasst", "--scale", "paper", "-e", "lmdb"], "oasst"),
    (["sweep", "space", "-w", "codeact", "--strategies", "sarp+tau=8"], "variants"),
    (["sweep", "capacity", "-w", "codeact", "--pool-blocks", "1e3", "--strategies",
      "sarp+tau=8"], "variants"),
])
def test_options_of_other_kinds_are_one_line(run_cli, args, needle):
    code, stdout, err = run_cli(*args)
    _one_line_error(code, err, needle)
    assert stdout == ""


def test_paper_scale_without_paper_sizes_is_one_line(run_cli, monkeypatch):
    from prefixbench.workloads import profiles
    monkeypatch.delattr(profiles, "PAPER_BLOCKS")
    code, stdout, err = run_cli("sweep", "strategies", "-w", "codeact", "--scale", "paper",
                                "-e", "lmdb")
    _one_line_error(code, err, "--scale", "no paper sizes")


@pytest.mark.parametrize("chunk", [1 << 20, 64, 1])
def test_count_pass_matches_a_set_of_seen_blocks(monkeypatch, chunk):
    """The counting pass (NumPy over chunks) against a plain Python set, with chunk
    sizes that exercise one chunk, many run merges, and one block at a time."""
    import numpy as np

    from prefixbench.harness.bench import make_workload
    monkeypatch.setattr(sweeps, "COUNT_CHUNK_BLOCKS", chunk)
    wl = make_workload("codeact", {"sessions": 12})
    seen, known, cum = set(), [], []
    for req in wl.requests():
        ids = [int(x) for x in req.insert_ids]
        new = [k for k in dict.fromkeys(ids) if k not in seen]
        seen.update(new)
        known.append(len(ids) - len(new))
        cum.append(len(seen))
    c = sweeps.count_pass(wl)
    assert c.requests == len(known) and c.unique_blocks == len(seen)
    assert c.known.tolist() == known and c.cumulative.tolist() == cum
    assert c.known.dtype == np.int64 and c.cumulative.dtype == np.int64


def test_count_pass_set_keeps_disjoint_sorted_runs():
    import numpy as np
    s = sweeps._SeenBlocks()
    rng = np.random.default_rng(1)
    every = np.unique(rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64))
    rng.shuffle(every)
    for part in np.array_split(every, 37):
        part = np.sort(part)
        assert not s.contains(part).any()
        s.add(part)
        assert s.contains(part).all()
    merged = np.concatenate(s.runs)
    assert len(merged) == len(every) and len(np.unique(merged)) == len(every)
    assert all((r[1:] > r[:-1]).all() for r in s.runs)
    assert all(len(a) > 2 * len(b) for a, b in zip(s.runs, s.runs[1:]))
