"""run --arrival trace and sweep arrival: the suites, the table, the saturation point and
the bad-input lines."""
import json

import pyperf
import pytest

from prefixbench.harness.arrival import (ArrivalResult, parse_speedups, saturation,
                                         saturation_point)
from prefixbench.errors import ConfigError


def token_log(path, n=40):
    rows = [{"session_id": f"s{i % 4}", "prompt_token_ids": [7] * 64 + [i] * 32,
             "output_token_ids": [i + 1] * 16, "timestamp": 0.5 * i} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def names(path):
    return {b.get_name(): b for b in pyperf.BenchmarkSuite.load(str(path)).get_benchmarks()}


def test_run_arrival_trace_writes_offered_achieved_and_queued_latency(tmp_path, run_cli):
    p = token_log(tmp_path / "t.jsonl")
    out = tmp_path / "r.json"
    code, text, err = run_cli("-q", "run", "-s", "dram-blockhash", "-w", "token-jsonl",
                              "-W", f"path={p}", "--arrival", "trace", "--speedup", "200",
                              "--threads", "2", "-o", out)
    assert code == 0, err
    assert "offered req/s" in text and "saturation:" in text
    t, c = names(out), names(tmp_path / "r.counts.json")
    assert {"match-latency-queued-p50", "match-latency-queued-p99",
            "match-latency-queued-p999"} <= set(t)
    assert t["match-latency-queued-p99"].get_unit() == "second"
    md = c["offered-load"].get_metadata()
    # 39 gaps of 0.5 s at speedup 200: 400 req/s offered
    assert c["offered-load"].get_values()[0] == pytest.approx(400.0)
    assert md["arrival"] == "trace" and md["speedup"] == 200.0 and md["issuing_threads"] == 2
    assert c["requests"].get_values() == (40.0,)
    assert md["strategy"] == "dram-blockhash"


def test_sweep_arrival_one_suite_with_every_speedup(tmp_path, run_cli):
    p = token_log(tmp_path / "t.jsonl")
    out = tmp_path / "s.json"
    code, text, err = run_cli("-q", "sweep", "arrival", "-s", "radix", "-w", "token-jsonl",
                              "-W", f"path={p}", "--speedup", "100,1000", "-o", out)
    assert code == 0, err
    t, c = names(out), names(tmp_path / "s.counts.json")
    for x in ("100", "1000"):
        assert f"speedup-{x}-match-latency-queued-p99" in t
        assert f"speedup-{x}-achieved-load" in c
        assert c[f"speedup-{x}-offered-load"].get_metadata()["setting"] == f"speedup-{x}"
    lines = text.splitlines()
    assert sum(1 for ln in lines if ln.split()[:1] in (["100"], ["1000"])) == 2


def test_closed_loop_run_is_unchanged_and_refuses_a_speedup(run_cli):
    code, _, err = run_cli("-q", "run", "-s", "radix", "-w", "ultrachat", "-W", "sessions=2",
                           "--speedup", "2", "--no-runner")
    assert code != 0 and "option --speedup: only with --arrival trace" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bad, msg", [("0", "must be a finite number > 0"),
                                      ("-2", "must be a finite number > 0"),
                                      ("fast", "'fast' is not a number"),
                                      ("inf", "must be a finite number > 0"),
                                      (",", "give at least one factor")])
def test_bad_speedups_are_one_line(bad, msg, tmp_path, run_cli):
    with pytest.raises(ConfigError, match=msg):
        parse_speedups(bad)
    p = token_log(tmp_path / "t.jsonl", 4)
    for argv in (("run", "-s", "radix", "--arrival", "trace"), ("sweep", "arrival", "-s", "radix")):
        code, _, err = run_cli("-q", *argv, "-w", "token-jsonl", "-W", f"path={p}",
                               "--speedup", bad)
        assert code != 0 and msg in err and len(err.strip().splitlines()) == 1, err


def test_trace_arrival_on_a_workload_without_timestamps_is_one_line(run_cli):
    code, _, err = run_cli("-q", "run", "-s", "radix", "-w", "ultrachat", "-W", "sessions=2",
                           "--arrival", "trace")
    assert code != 0 and "has no timestamps" in err and len(err.strip().splitlines()) == 1


def test_saturation_point_is_the_first_speedup_not_served():
    def row(x, off, ach, p99):
        return ArrivalResult(x, 10, off, ach, 0.0, p99, p99, 0.0, 0, 1, 0)
    rows = [row(4, 40, 30, 1e-2), row(1, 10, 10, 1e-4), row(2, 20, 20, 5e-4),
            row(8, 80, 80, 1e-4)]
    assert saturation_point(rows).speedup == 4        # achieved under 95% of offered
    assert saturation(rows).speedup == 2              # served before it, not the later 8
    rows = [row(1, 10, 10, 1e-4), row(2, 20, 20, 2e-3)]
    assert saturation_point(rows).speedup == 2        # p99 above 10x the unloaded p99
    assert saturation_point([row(1, 10, 10, 1e-4)]) is None
    assert saturation([row(1, 10, 5, 1e-4)]) is None
