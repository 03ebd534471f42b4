"""The result schema: names, units, mappings, zeros, versions and repeats."""
from __future__ import annotations

import pyperf
import pytest

from prefixbench import schema
from prefixbench.schema import SchemaError


def _bench(name, values, **md):
    meta = {"name": name, "unit": "second", "prefixbench_version": "0.1.0", **md}
    return pyperf.Benchmark([pyperf.Run([v], metadata=dict(meta, repeat=i),
                                        collect_metadata=False) for i, v in enumerate(values)])


def _suite(*benches):
    return pyperf.BenchmarkSuite(list(benches))


def test_every_figure_has_a_known_unit_kind_and_meaning():
    names = [f.name for f in schema.FIGURES]
    assert len(names) == len(set(names))
    for f in schema.FIGURES:
        assert f.unit in schema.PYPERF_UNIT and f.kind and f.meaning, f
        assert f.better in ("", "lower", "higher"), f
        assert f.pyperf_unit in ("second", "byte", "integer")


def test_the_harness_names_are_schema_figures():
    """Every name the writers use today parses to a figure (read from their tables)."""
    from prefixbench.harness import pyperf_io, sweeps
    for name, _ in pyperf_io.TIME_FIGURES:
        assert schema.figure(name).unit == "seconds"
    for name, unit, _ in pyperf_io.COUNT_FIGURES + sweeps._SWEEP_COUNTS:
        # today's writers may use pyperf's generic "integer" where the schema says bytes
        assert schema.figure(name).pyperf_unit == unit or unit == "integer", name
    for name in ("recovery-index", "snapshot-bytes", "match-time-storage", "index-routing-bytes",
                 "restore-stripes-n192", "restore-files-layerwise", "read-calls-seq-n4"):
        schema.figure(name)
    assert schema.figure("index-routing-bytes").unit == "bytes"
    assert schema.params("restore-lmdb-n768") == {"path": "lmdb", "point": "n768"}
    assert schema.params("restore-packfile-stripes-layerwise") == {
        "path": "packfile-stripes", "point": "layerwise"}
    with pytest.raises(SchemaError, match="unknown figure"):
        schema.figure("no-such-thing")


def test_names_lose_their_setting_and_thread_prefix():
    md = {"setting": "retrieval-3", "threads": 2}
    assert schema.parse_name("retrieval-3-threads-2-match-latency-mean", md) == (
        "retrieval-3", 2, "match-latency-mean")
    assert schema.parse_name("threads-4-hit-tokens", {}) == (None, 4, "hit-tokens")
    assert schema.parse_name("sizing-cache-bytes", {"setting": "sizing"}) == (
        None, 1, "sizing-cache-bytes")


def test_metadata_and_csv_names_map_onto_the_schema():
    b = _bench("sarp-match-latency-mean", [1e-4], setting="sarp", throughput_rps=1234.5,
               false_hits=0, hit_rate_loss=0.0, token_hit_rate=0.9)
    rs = schema.readings(_suite(b))
    by = {r.name: r for r in rs}
    assert by["request-throughput"].values == (1234.5,)
    assert by["false-hits"].values == (0.0,) and by["false-hits"].source == "metadata"
    assert by["hit-rate-loss"].median == 0.0
    row = {"ops_per_s": "2000", "match_mean_us": "12.5", "loss_vs_oracle": "0", "false_hits": "0"}
    got = schema.from_csv_row(row)
    assert got["request-throughput"] == 2000 and got["match-latency-mean"] == pytest.approx(12.5e-6)
    assert got["hit-rate-loss"] == 0 and got["false-hits"] == 0


def test_every_csv_column_is_a_condition_or_one_figure():
    """The documented mapping is complete: each column a run's row writes is either a
    condition from the metadata or held by exactly one figure."""
    for col in schema.CSV_COLUMNS:
        holders = [f.name for f in schema.FIGURES for c, _ in f.csv if c == col]
        assert (col in schema.CONDITIONS) != bool(holders), col
        assert len(holders) <= 1, (col, holders)


def test_hash_and_engine_bench_keys_have_schema_names():
    hashed = schema.from_json({"compiled": True, "block_size": 16, "cython_tokens": 64000,
                               "cython_tokens_per_s": 8e8, "python_tokens": 64000,
                               "python_tokens_per_s": 8e5, "speedup": 1000.0})
    # block_size is also workload describe's key: hash-bench names hash-block-size itself
    assert set(hashed) == {"workload-block-size", "hash-compiled-tokens",
                           "hash-compiled-tokens-per-second", "hash-python-tokens",
                           "hash-python-tokens-per-second", "hash-speedup"}
    engine = schema.from_json({"engine": "memory", "n_keys": 10, "value_size": 16, "batch": 4,
                               "cache_bytes": 1024, "direct_io": False, "keys_per_pass": 10,
                               "get_s_per_key": 1e-7, "get_s_per_key_median": 2e-7,
                               "get_many_s_per_key": 1e-7, "get_many_s_per_key_median": 2e-7,
                               "size_on_disk_bytes": 0})
    assert engine["store-bytes"] == 0 and engine["engine-cache-bytes"] == 1024
    assert schema.figure("engine-get-latency").unit == "seconds"
    assert len(engine) == 10                          # every number but the direct_io flag
    assert schema.params("plugins-eviction-policy") == {"kind": "eviction-policy"}


def test_describe_and_crashtest_keys_have_schema_names():
    got = schema.from_json({"sessions": 40, "span_share_gt3": 0.2, "lost": 0, "false": 0,
                            "recovery_failures": 1, "workload": "codeact"})
    assert got == {"workload-sessions": 40.0, "span-share-gt3": 0.2, "crash-lost-inserts": 0.0,
                   "crash-false-matches": 0.0, "crash-recovery-failures": 1.0}


def test_throughput_is_the_reciprocal_of_replay_time_when_the_metadata_lacks_it():
    rs = schema.readings(_suite(_bench("replay-time-per-request", [0.002, 0.004])))
    r = schema.read(rs, "request-throughput")
    assert r.source == "reciprocal" and sorted(r.values) == [250.0, 500.0]


def test_zeros_round_trip_through_a_written_suite(tmp_path):
    """pyperf refuses 0: the zero is listed in the metadata and read back as a 0."""
    with pytest.raises(ValueError):
        pyperf.Run([0.0], metadata={"name": "x"}, collect_metadata=False)
    values = {"lost-tokens": 0, "hit-tokens": 120}
    keep, zeros = schema.split_zeros(values)
    assert keep == {"hit-tokens": 120} and zeros == ["lost-tokens"]
    md = {**schema.schema_metadata(), **schema.zero_metadata(zeros)}
    path = tmp_path / "counts.json"
    _suite(*[_bench(n, [v], **md) for n, v in keep.items()]).dump(str(path))
    rs = schema.readings(pyperf.BenchmarkSuite.load(str(path)))
    lost = schema.read(rs, "lost-tokens")
    assert lost is not None and lost.values == (0.0,) and lost.source == "zero"
    assert schema.read(rs, "hit-tokens").values == (120.0,)
    assert schema.zero_metadata([]) == {}


def test_repeats_keep_every_run_with_median_and_min_max():
    r = schema.read(schema.readings(_suite(_bench("recovery-index", [3.0, 1.0, 2.0]))),
                    "recovery-index")
    assert r.runs == 3 and (r.median, r.low, r.high) == (2.0, 1.0, 3.0)


def test_versions():
    ok = _bench("hit-tokens", [5], prefixbench_schema=schema.SCHEMA_VERSION)
    assert schema.readings(_suite(ok))
    assert schema.version_of({}) == 0
    future = _bench("hit-tokens", [5], prefixbench_schema=schema.SCHEMA_VERSION + 1)
    with pytest.raises(SchemaError, match="schema version 2 is unknown"):
        schema.readings(_suite(future))
    assert schema.is_prefixbench({"prefixbench_schema": 1})
    assert not schema.is_prefixbench({"name": "bm"})
