"""The papers' data files: well formed, and holding every number the issue lists."""
from __future__ import annotations

import json
import os

import pytest

from prefixbench.reports import paper

UNITS = {"ratio", "percent", "seconds", "bytes", "count", "tokens", "threads", "GiB/s",
         "percentage points"}
DATASETS = {"codeact", "lmcache-agent", "eabf", "ultrachat"}


@pytest.mark.parametrize("key", paper.PAPERS)
def test_every_entry_is_complete(key):
    with open(os.path.join(paper.HERE, f"{key}.json")) as f:
        raw = json.load(f)
    assert raw["paper"] and raw["conditions"]
    for e in raw["values"]:
        assert set(e) >= {"id", "dataset", "series", "measure", "value", "unit", "section"}, e
        v = e["value"]
        nums = v if isinstance(v, list) else [v]
        assert len(nums) in (1, 2) and all(isinstance(x, (int, float)) for x in nums), e
        if len(nums) == 2:
            assert nums[0] < nums[1], e
        assert e["unit"] in UNITS, e
        assert e["section"], e
    p = paper.load(key)
    assert len(p.values) == len(raw["values"])
    # no entry stated twice
    keys = [(v.id, v.dataset, v.series, v.measure) for v in p.values]
    assert len(keys) == len(set(keys))


def _one(p, id, **kw):
    hits = p.find(id, **kw)
    assert len(hits) == 1, (id, kw, hits)
    return hits[0]


def _is(v, low, high=None):
    assert (v.low, v.high) == (low, low if high is None else high), v


def test_sarp_numbers_the_issue_lists():
    p = paper.load("sarp")
    _is(_one(p, "fig1", series="rocksdb / dram"), 39, 402)
    _is(_one(p, "table1", series="redis"), 621)
    _is(_one(p, "table1", series="mooncake"), 33 * 60)
    _is(_one(p, "table1", series="dynamo 1.3"), 52 * 60)
    _is(_one(p, "fig6a", series="sarp / ssd-blockhash"), 3.70, 66.6)
    _is(_one(p, "fig6a", series="sarp / segment-radix-capped"), 2.04, 5.67)
    _is(_one(p, "fig6a", series="sarp / segment-hash"), 1.15, 6.78)
    _is(_one(p, "fig6b", series="ssd-blockhash / sarp"), 16.6, 53.9)
    _is(_one(p, "fig6c", series="ssd-blockhash / sarp", dataset="all"), 1.98, 111)
    _is(_one(p, "fig8a", series="sarp", measure="recovery-index"), 4.42, 12.4)
    _is(_one(p, "fig8a", series="segment-radix", measure="recovery-index"), 43.6, 108)
    _is(_one(p, "fig8a", series="dram-blockhash", measure="recovery-index"), 339, 385)
    _is(_one(p, "fig8b", measure="snapshot-bytes"), 0.99e9, 3.78e9)
    _is(_one(p, "fig8b", measure="snapshot-share"), 2.7, 9.5)
    _is(_one(p, "table3"), 0.0030, 0.029)
    _is(_one(p, "fig9", series="max_retrieval 1"), 0.0025, 0.114)
    _is(_one(p, "fig9", series="max_retrieval 3", measure="hit-rate-loss"), 0.020)
    _is(_one(p, "fig9", series="max_retrieval 3", measure="retrievals-per-query"), 1.41)
    for fid, measure, values in (
            ("fig10a", "candidates-change", (-29, -96, 0, -33)),
            ("fig10c", "routing-state-change", (-42, -74, -75, -67)),
            ("fig10d", "retrievals-change", (4.5, 2.1, 0.1, 2.5))):
        got = [_one(p, fid, measure=measure, dataset=d).low
               for d in ("codeact", "lmcache-agent", "eabf", "ultrachat")]
        assert tuple(got) == values, fid
    assert [_one(p, "fig10b", dataset=d).low for d in ("codeact", "ultrachat")] == [42, 3]
    _is(_one(p, "table5", measure="disk-ratio"), 0.58, 0.84)
    _is(_one(p, "table5", measure="entries-ratio"), 1.001, 1.415)
    assert [_one(p, "fig11", dataset=d, measure="speedup").low
            for d in ("lmcache-agent", "eabf", "ultrachat")] == [13.8, 20.0, 13.8]


def test_table4_is_complete():
    p = paper.load("sarp")
    want = {"codeact": (59.3, 31.1, 1.05), "lmcache-agent": (1.78, 1.66, 1.00),
            "eabf": (1.01, 1.00, 1.00), "ultrachat": (24.3, 1.26, 1.03)}
    for d, vals in want.items():
        got = tuple(_one(p, "table4", dataset=d, measure=m).low for m in (
            "candidates-before-filtering", "candidates-after-filtering", "candidates-retrieved"))
        assert got == vals, d


def test_range_numbers_the_issue_lists():
    p = paper.load("range")
    points = ("n192", "n768", "n3072", "n6144")
    assert [_one(p, "table3", series="range", dataset=d).low for d in points] == \
        [1.790, 1.796, 1.797, 1.803]
    assert [_one(p, "table3", series="stock cufile", dataset=d).low for d in points] == \
        [2.124, 2.184, 2.538, 3.012]
    _is(_one(p, "fig1", measure="ttft-spread"), 0.015)
    _is(_one(p, "fig1", series="range vs stock cufile", dataset="n6144"), -40.1)
    _is(_one(p, "fig1", series="range vs stock o_direct", dataset="n6144"), -37.7)
    _is(_one(p, "table3", series="range", dataset="layerwise"), 1.788)
    _is(_one(p, "table3", series="stock cufile", dataset="layerwise"), 2.664)
    _is(_one(p, "table3", series="stock o_direct", dataset="layerwise"), 2.235)


def test_every_claim_has_a_figure_in_the_report():
    """A headline claim names a figure id the report builds (or the paper's headline)."""
    from prefixbench.reports.figures import IDS
    for key in paper.PAPERS:
        for v in paper.load(key).claims():
            fid = v.id.rstrip("abcd") if v.id.startswith("fig") else v.id
            assert fid in IDS or fid == "headline" or (key == "range" and fid == "fig1"), v


def test_met_follows_the_measure_direction():
    p = paper.load("sarp")
    loss = _one(p, "table3")
    assert loss.met(0.0) and loss.met(0.02) and not loss.met(0.05)
    speed = _one(p, "fig6a", series="sarp / ssd-blockhash")
    assert speed.met(70) and speed.met(3.70) and not speed.met(1.2)
    cand = _one(p, "table4", dataset="codeact", measure="candidates-before-filtering")
    assert cand.met(59.3 * 1.2) and not cand.met(59.3 * 1.3) and not cand.met(7.8)
    assert _one(p, "fig6a", series="sarp / ssd-blockhash").text_value() == "3.7-66.6x"


def test_dataset_names_are_the_workload_names():
    p = paper.load("sarp")
    for v in p.values:
        if v.id in ("table4", "fig10a", "fig10c", "fig10d", "fig11", "span-share"):
            assert v.dataset in DATASETS, v


def test_an_unknown_paper_is_one_line():
    from prefixbench.errors import ConfigError
    with pytest.raises(ConfigError, match="papers: sarp, range"):
        paper.load("nope")
