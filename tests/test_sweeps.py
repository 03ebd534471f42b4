"""``prefixbench sweep``: each kind runs, reports the right rows and figures,
applies the paper's cache rule, and turns bad input into one line.

Tiny workloads on the memory engine; behaviour only, never timings.
"""
import json
import subprocess
import sys

import pytest

from prefixbench.harness import sweeps
from prefixbench.harness.errors import ConfigError

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


def _one_line_error(code, err, *needles):
    assert code != 0
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("prefixbench: error:") and "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


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
    cfg = sweeps.make_config("strategies", workload="ultrachat", workload_options=TINY,
                             strategies="segment-hash,sarp", cache_bytes="3MiB",
                             strategy_options={"segment-hash:S": "32", "tau": "8"})
    assert cfg.cache_rule == "fixed" and cfg.cache_bytes == 3 << 20
    settings = {s.label: s.options for s in sweeps.plan(cfg)}
    assert settings["segment-hash"] == {"S": "32"}
    assert settings["sarp"]["tau"] == "8" and settings["sarp"]["backfill"] == "sync"


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
])
def test_bad_input_is_one_line(run_cli, args, needle):
    code, stdout, err = run_cli(*args)
    _one_line_error(code, err, needle)
    assert stdout == ""          # nothing ran


def test_make_config_raises_config_error():
    with pytest.raises(ConfigError, match="unknown kind"):
        sweeps.make_config("fig9", workload="codeact")
    assert sweeps.parse_budgets("3, unlimited,1") == (3, 0, 1)
