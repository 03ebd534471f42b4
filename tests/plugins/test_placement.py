"""Checkpoint placement (issue 13): the solver against its reference and brute force,
R(C), the policies, the depth distributions, the frontier, and every bad-input line."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pyperf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_support import one_line_error
from prefixbench.errors import ConfigError
from prefixbench.harness import placement as H
from prefixbench.plugins import _placement_ref as ref
from prefixbench.plugins import placement as P
from prefixbench.plugins.models import MODELS, get_model
from prefixbench.workloads.model import Session, SessionWorkload, Turn

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

int_weights = st.lists(st.integers(0, 6), min_size=2, max_size=60).filter(lambda w: any(w))
float_weights = st.lists(st.floats(0, 10, allow_nan=False), min_size=2, max_size=40).filter(
    lambda w: sum(w) > 1e-6)


def brute(w, m):
    """Least total recompute over every subset of at most m positions."""
    n = len(w) - 1
    best = None
    for k in range(min(m, n) + 1):
        for c in itertools.combinations(range(1, n + 1), k):
            cost = sum(w[d] * (d - max([0] + [x for x in c if x <= d])) for d in range(n + 1))
            best = cost if best is None or cost < best else best
    return best


# ----------------------------------------------------------------------------- the solver
@pytest.mark.compiled
@SETTINGS
@given(int_weights, st.integers(0, 12))
def test_compiled_solver_equals_reference(w, m):
    from prefixbench.plugins import _placement as comp
    got, want = comp.solve(np.array(w, float), m), ref.solve(np.array(w, float), m)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]


@pytest.mark.compiled
@SETTINGS
@given(float_weights, st.integers(0, 8))
def test_compiled_solver_equals_reference_on_real_weights(w, m):
    from prefixbench.plugins import _placement as comp
    got, want = comp.solve(np.array(w), m), ref.solve(np.array(w), m)
    assert got[1] == pytest.approx(want[1], rel=1e-9, abs=1e-9)


@SETTINGS
@given(st.lists(st.integers(0, 5), min_size=2, max_size=13).filter(any), st.integers(0, 13))
def test_solver_and_reference_equal_brute_force_up_to_n_12(w, m):
    best = brute(w, m)
    for solve in (P.impl.solve, ref.solve):
        pos, total = solve(np.array(w, float), m)
        assert total == pytest.approx(best, abs=1e-9)
        assert len(pos) <= m


@SETTINGS
@given(float_weights, st.integers(0, 10))
def test_recomputed_r_equals_the_reported_cost(w, m):
    res = P.solve(w, m)
    assert list(res.positions) == sorted(set(res.positions.tolist()))
    assert all(1 <= p <= len(w) - 1 for p in res.positions)
    assert len(res.positions) <= m
    assert P.expected_recompute(w, res.positions) == pytest.approx(res.expected_recompute,
                                                                   rel=1e-9, abs=1e-9)
    assert res.expected_recompute <= res.no_reuse + 1e-12
    assert res.dense == 0.0


def test_ties_take_the_shallower_position_and_useless_checkpoints_are_not_placed():
    assert P.solve([0, 1, 1], 1).positions.tolist() == [1]      # c=1 and c=2 both cost 1
    assert P.solve([0, 0, 0, 5], 3).positions.tolist() == [3]   # only depth 3 is ever hit
    assert P.solve([0, 1, 0, 3, 0, 0, 5], 2).positions.tolist() == [3, 6]
    assert P.solve([0, 1, 0, 3, 0, 0, 5], 0).positions.tolist() == []


def test_large_instance_matches_the_reference_exactly():
    rng = np.random.default_rng(7)
    w = rng.integers(0, 20, 400).astype(float)
    for m in (1, 5, 17):
        a, b = P.impl.solve(w, m), ref.solve(w, m)
        assert np.array_equal(a[0], b[0]) and a[1] == b[1]


# ----------------------------------------------------------------------------- checkpoint set
@pytest.mark.compiled
@SETTINGS
@given(st.lists(st.integers(0, 2**64 - 1), max_size=3000), st.integers(0, 50))
def test_compiled_checkpoint_set_equals_reference(ids, n):
    from prefixbench.plugins import _placement as comp
    a, b = comp.CheckpointSet(), ref.CheckpointSet()
    arr = np.array(ids, dtype=np.uint64)
    a.add_many(arr[::2])
    b.add_many(arr[::2])
    assert len(a) == len(b) and np.array_equal(a.to_array(), b.to_array())
    assert a.nbytes == b.nbytes
    q = arr[:60]
    assert a.deepest(q, n) == b.deepest(q, n)
    for x in ids[:20]:
        assert (x in a) == (x in b)


# ----------------------------------------------------------------------------- policies
def test_policy_parser_and_positions():
    pp = P.policy_positions
    assert pp(P.parse_policy("block:4"), 10, 1).tolist() == [4, 8]
    assert pp(P.parse_policy("uniform:2"), 10).tolist() == [5, 10]
    assert pp(P.parse_policy("uniform"), 10, 3).tolist() == [3, 7, 10]
    assert pp(P.parse_policy("geometric"), 10, 3).tolist() == [3, 5, 10]
    assert pp(P.parse_policy("end"), 10).tolist() == [10]
    assert pp(P.parse_policy("boundary"), 10, 2, boundaries=[2, 5, 7, 10]).tolist() == [5, 10]
    assert pp(P.parse_policy("boundary"), 10, 9, boundaries=[2, 5, 12]).tolist() == [2, 5]
    assert pp(P.parse_policy("dp"), 6, 2, weights=[0, 1, 0, 3, 0, 0, 5]).tolist() == [3, 6]
    assert pp(P.parse_policy("uniform"), 3, 8).tolist() == [1, 2, 3]        # M > N: every one
    assert pp(P.parse_policy("end"), 0).tolist() == []
    assert P.parse_policy(" geometric:4 ").text == "geometric:4"


@pytest.mark.parametrize("text, needle", [
    ("lru", "unknown policy 'lru'"), ("block", "needs a block count"),
    ("end:3", "takes no parameter"), ("uniform:0", "integer >= 1"),
    ("block:x", "integer >= 1"), ("dp:2", "takes no parameter")])
def test_bad_policies_are_one_line(text, needle):
    with pytest.raises(ConfigError, match=needle):
        P.parse_policy(text)


@pytest.mark.parametrize("weights, needle", [
    ([0, -1, 2], "w_1 is negative"), ([0, float("nan"), 1], "w_1 is nan"),
    ([0, 0, 0], "all weights are zero"), ([3], "N = 0"), ([], "N = 0"),
    ("abc", "list of numbers"), ([[1, 2], [3, 4]], "flat list"),
    ([1, float("inf")], "NaN or infinite")])
def test_bad_weights_are_one_line(weights, needle):
    with pytest.raises(ConfigError, match=needle):
        P.solve(weights, 1)


def test_budget_checks():
    with pytest.raises(ConfigError, match="budget: -1 is negative"):
        P.solve([0, 1], -1)
    res = P.solve([0, 1, 1], 9)
    assert res.budget == 2 and res.notes == ["budget 9 is more than N = 2 positions: clamped to 2"]
    with pytest.raises(ConfigError, match="not an integer"):
        P.check_budget("x", 3)


def test_model_presets_from_published_configs():
    nh, qn = get_model("nemotron-h-8b"), get_model("qwen3-next-80b")
    # 24 Mamba-2 layers x (128 heads x 64 x 128 state + 10,240 conv channels x 3) x 2 bytes
    assert nh.state_bytes == 24 * (128 * 64 * 128 + 10_240 * 3) * 2 == 51_806_208
    assert nh.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2
    # 36 DeltaNet layers x (32 heads x 128 x 128 + 8,192 conv channels x 3) x 2 bytes
    assert qn.state_bytes == 36 * (32 * 128 * 128 + 8_192 * 3) * 2 == 39_518_208
    assert qn.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert MODELS["positions"].state_bytes == 1
    with pytest.raises(ConfigError, match="unknown model preset 'gpt'"):
        get_model("gpt")


# ----------------------------------------------------------------------------- distributions
def _toks(seed, n):
    return np.random.default_rng(seed).integers(0, 1000, n).astype(np.uint32)


def _shared_prompt_workload():
    """Three one-turn sessions sharing a 64-token prompt (4 blocks), then a second turn."""
    shared = _toks(0, 64)
    sessions = []
    for i in range(3):
        t0 = Turn(np.concatenate([shared, _toks(10 + i, 32)]), _toks(20 + i, 32))
        t1 = Turn(_toks(30 + i, 16), _toks(40 + i, 16))
        sessions.append(Session([t0, t1]))
    return SessionWorkload(sessions, block_size=16, name="shared")


def test_collect_attributes_hits_to_entries():
    d = H.collect(_shared_prompt_workload())
    # round robin: s0t0, s1t0, s2t0, s0t1, s1t1, s2t1
    assert d.requests == 6 and d.entry_len.tolist() == [8, 8, 8, 10, 10, 10]
    # s1t0 and s2t0 hit s0t0's entry at the shared 4 blocks; each t1 its own t0 at its end
    assert d.hit_entry.tolist() == [0, 0, 0, 1, 2]
    assert d.hit_depth.tolist() == [4, 4, 8, 8, 8]
    assert d.hit_request.tolist() == [1, 2, 3, 4, 5]
    # boundaries: t0's prompt end (6 blocks) and end (8); t1 adds its own (9, 10)
    b = {e: d.bnd_pos[d.bnd_entry == e].tolist() for e in range(6)}
    assert b[0] == [6, 8] and b[3] == [6, 8, 9, 10]
    assert d.pooled().tolist()[:9] == [0, 0, 0, 0, 2, 0, 0, 0, 3]
    fit, ev = d.split("online")
    assert fit.tolist() == [True, True, False, False, False] and (ev == ~fit).all()


def test_frontier_offline_dp_is_never_worse_than_a_fixed_heuristic_within_budget():
    from prefixbench.harness.bench import make_workload
    d = H.collect(make_workload("document-qa", {"sessions": 60}))
    budgets = (1, 2, 4, 8)
    fr = H.frontier(d, budgets, split="offline", model="nemotron-h-8b")
    names = {r.policy for r in fr.rows}
    assert {"dp", "dp/entry", "uniform", "geometric", "end", "boundary", "block:1"} <= names
    for m, dp, dpe, fixed, per_entry in H.comparison(fr, budgets):
        assert fixed is not None and dp.recompute <= fixed.recompute + 1e-9
        assert dpe.recompute <= dp.recompute + 1e-9          # fitted on each entry's own hits
    for r in fr.rows:
        assert 0 <= r.recompute <= fr.no_reuse + 1e-9 and 0 <= r.kept <= 1 + 1e-12
    assert [r for r in fr.rows if r.policy == "block:1"][0].recompute == 0
    text = H.format_frontier(fr, budgets)
    assert "dp against the best heuristic" in text and "at equal R" in text
    on = H.frontier(d, budgets, split="online")
    assert on.hits_fit + on.hits_eval == len(d.hit_depth)


def test_a_workload_without_hits_is_one_line():
    one = SessionWorkload([Session([Turn(_toks(1, 64), _toks(2, 16))])], block_size=16,
                          name="lonely")
    d = H.collect(one)
    assert d.requests == 1 and len(d.hit_depth) == 0 and d.entry_len.tolist() == [5]
    with pytest.raises(ConfigError, match="workload lonely: no request of the replay hits"):
        H.frontier(d, (1,))


def test_bench_reports_ratios():
    rows = H.bench(ns=(200, 400), ms=(3,), repeats=1)
    assert [r["n"] for r in rows] == [200, 400] and rows[0]["ratio"] is None
    assert rows[1]["ratio"] > 0 and rows[1]["wall_seconds"] > 0
    assert "ratio to N/2" in H.format_bench(rows)


def test_placement_profiles_register_and_check_options():
    from prefixbench.harness.bench import make_workload
    for name in ("document-qa", "system-prompts"):
        wl = make_workload(name, {"sessions": "5", "seed": "1"})
        assert wl.name == name and len(wl) >= 5
        with pytest.raises(ConfigError, match="option colour: not an option"):
            make_workload(name, {"colour": "red"})
        with pytest.raises(ConfigError, match="option sessions"):
            make_workload(name, {"sessions": "0"})


# ----------------------------------------------------------------------------- command line
def _depths(tmp_path, obj, name="d.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_cli_solve_json_shape(run_cli, tmp_path):
    f = _depths(tmp_path, {"weights": [0, 1, 0, 3, 0, 0, 5]})
    code, out, err = run_cli("placement", "solve", "--depths", f, "--budget", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"positions", "expected_recompute", "no_reuse", "dense", "policy"}
    assert doc["positions"] == [3, 6] and doc["policy"] == "dp" and doc["dense"] == 0.0
    assert doc["expected_recompute"] == pytest.approx(1 / 9)
    assert doc["no_reuse"] == pytest.approx((1 + 9 + 30) / 9)
    code, out, err = run_cli("placement", "solve", "--depths", f, "--budget", "2")
    assert code == 0 and "positions: 3 6" in out and "no-reuse bound" in out


def test_cli_solve_clamps_a_budget_above_n_and_says_so(run_cli, tmp_path):
    f = _depths(tmp_path, {"weights": [0, 1, 1]})
    code, out, err = run_cli("placement", "solve", "--depths", f, "--budget", "7", "--json")
    assert code == 0 and json.loads(out)["positions"] == [1, 2]
    assert err.strip() == "prefixbench: note: --budget 7 is more than N = 2 positions: " \
                          "clamped to 2"


@pytest.mark.parametrize("content, needles", [
    ({"weights": [0, -2, 1]}, ("field weights", "w_1 is negative")),
    ('{"weights": [0, NaN, 1]}', ("field weights", "NaN")),
    ({"weights": [0, 0]}, ("field weights", "all weights are zero")),
    ({"weights": [4]}, ("field weights", "N = 0")),
    ({"weight": [1, 2]}, ("field weights is missing",)),
    ({"weights": "1,2"}, ("field weights must be a list",)),
    ({"weights": [1, True]}, ("field weights must be a list",)),
    ('{"weights": [1, 2', ("not JSON", "line 1")),
    ("[1, 2]", ("must be a JSON object",)),
])
def test_cli_solve_bad_depths_files_are_one_line(run_cli, tmp_path, content, needles):
    f = _depths(tmp_path, content)
    code, out, err = run_cli("placement", "solve", "--depths", f, "--budget", "1")
    one_line_error(code, err, str(f), *needles)
    assert out == ""


def test_cli_solve_missing_file_and_negative_budget(run_cli, tmp_path):
    code, _, err = run_cli("placement", "solve", "--depths", tmp_path / "no.json", "--budget", "1")
    one_line_error(code, err, "no.json", "no such file")
    f = _depths(tmp_path, {"weights": [0, 1]})
    code, _, err = run_cli("placement", "solve", "--depths", f, "--budget", "-1")
    one_line_error(code, err, "--budget", "negative")


@pytest.mark.parametrize("args, needles", [
    (["--policies", "dp,lru"], ("--policies", "unknown policy 'lru'")),
    (["--model", "gpt-9"], ("unknown model preset 'gpt-9'",)),
    (["--budgets", "1,x"], ("--budgets", "'x' is not an integer")),
    (["--budgets", "-2"], ("--budgets", "negative")),
    (["--split", "later"], ("--split", "online, offline")),
])
def test_cli_frontier_bad_options_are_one_line(run_cli, args, needles):
    code, _, err = run_cli("-q", "placement", "frontier", "-w", "document-qa", "-W",
                           "sessions=5", *args)
    one_line_error(code, err, *needles)


def test_cli_frontier_unknown_workload_is_one_line(run_cli):
    code, _, err = run_cli("-q", "placement", "frontier", "-w", "nope")
    one_line_error(code, err, "unknown workload 'nope'")


def test_cli_frontier_writes_pyperf_suites(run_cli, tmp_path):
    out = tmp_path / "f.json"
    code, text, err = run_cli("-q", "placement", "frontier", "-w", "system-prompts", "-W",
                              "sessions=40", "--budgets", "1,4", "--model", "qwen3-next-80b",
                              "--split", "online", "-o", out)
    assert code == 0, err
    assert "placement frontier: system-prompts" in text and "split online" in text
    suite = pyperf.BenchmarkSuite.load(str(out))
    names = suite.get_benchmark_names()
    assert "placement-dp-m4-recompute-blocks" in names and "placement-dp-m1-ckpt-bytes" in names
    md = suite.get_benchmarks()[0].get_metadata()
    assert md["model"] == "qwen3-next-80b" and md["split"] == "online"
    assert md["workload"] == "system-prompts"


def test_cli_frontier_saves_depths_that_solve_reads(run_cli, tmp_path):
    f = tmp_path / "depths.json"
    code, _, err = run_cli("-q", "placement", "frontier", "-w", "document-qa", "-W",
                           "sessions=20", "--budgets", "2", "--save-depths", f)
    assert code == 0, err
    doc = json.loads(f.read_text())
    assert doc["workload"] == "document-qa" and doc["split"] == "offline"
    assert sum(doc["weights"]) == sum(sum(e["hits"].values()) for e in doc["entries"])
    code, out, err = run_cli("placement", "solve", "--depths", f, "--budget", "2", "--json")
    assert code == 0, err
    assert len(json.loads(out)["positions"]) <= 2
    code, _, err = run_cli("-q", "placement", "frontier", "-w", "document-qa", "-W",
                           "sessions=5", "--save-depths", tmp_path / "no" / "d.json")
    one_line_error(code, err, "--save-depths")


@pytest.mark.compiled
def test_cli_bench_prints_the_table(run_cli, monkeypatch):
    monkeypatch.setattr(H, "BENCH_N", (100, 200))
    monkeypatch.setattr(H, "BENCH_M", (2,))
    orig = H.bench
    monkeypatch.setattr(H, "bench", lambda repeats, progress: orig(H.BENCH_N, H.BENCH_M,
                                                                     repeats, progress=progress))
    code, out, err = run_cli("-q", "placement", "bench", "--repeats", "1")
    assert code == 0, err
    assert "ratio to N/2" in out
    code, _, err = run_cli("-q", "placement", "bench", "--repeats", "0")
    one_line_error(code, err, "--repeats")


def test_cli_bench_refuses_the_pure_reference(run_cli, monkeypatch):
    monkeypatch.setattr(P, "impl", ref)
    code, _, err = run_cli("-q", "placement", "bench")
    one_line_error(code, err, "PREFIXBENCH_PURE=1", "reference")


def test_cli_placement_without_subcommand_is_one_line(run_cli):
    code, _, err = run_cli("placement")
    one_line_error(code, err, "solve, frontier or bench")
