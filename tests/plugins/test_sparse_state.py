"""The ``sparse-state`` strategy against the exact radix oracle: never longer, never
unverified, exact where every position is a checkpoint; options, re-planning,
snapshot and recovery, and a replay through the CLI."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixbench.blockids import chain_ids
from prefixbench.errors import ConfigError
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.plugins.sparse_state import SparseStateStrategy

H0 = 0x5EED
MS = 16
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
POLICIES = ["dp", "end", "block:1", "block:3", "uniform:2", "geometric", "boundary"]


def ids_of(tokens) -> np.ndarray:
    return chain_ids(np.asarray(tokens, dtype=np.uint64), H0)


def metas_of(ids, tag):
    words = np.empty((len(ids), 2), dtype=np.uint64)
    words[:, 0] = ids
    words[:, 1] = tag
    return words.view(np.uint8).reshape(len(ids), 16)


@st.composite
def traffic(draw, max_seqs=8, alphabet=3):
    """Sequences forming a random tree and interleaved match/insert ops, a match
    usually followed by the insert of its extension (the replay's order)."""
    seqs = []
    for _ in range(draw(st.integers(1, max_seqs))):
        base = []
        if seqs and draw(st.booleans()):
            parent = draw(st.sampled_from(seqs))
            base = parent[:draw(st.integers(0, len(parent)))]
        seqs.append(base + draw(st.lists(st.integers(0, alphabet - 1), max_size=14)))
    ops = []
    for _ in range(draw(st.integers(1, 30))):
        s = seqs[draw(st.integers(0, len(seqs) - 1))]
        cut = draw(st.integers(0, len(s)))
        ops.append(("match", s[:cut]))
        if draw(st.integers(0, 3)):
            ops.append(("insert", s))
    return ops


@SETTINGS
@given(traffic(), st.sampled_from(POLICIES), st.integers(0, 4), st.integers(1, 3))
def test_never_longer_than_the_oracle_and_never_unverified(ops, policy, budget, every):
    oracle = RadixStrategy()
    s = SparseStateStrategy(options={"policy": policy, "budget": budget, "replan_every": every})
    for step, (kind, tokens) in enumerate(ops):
        ids = ids_of(tokens)
        if kind == "insert":
            m = metas_of(ids, step)
            oracle.insert(ids, m)
            s.insert(ids, m)
        else:
            got, want = s.match(ids), oracle.match(ids)
            assert got.n_blocks <= want.n_blocks
            assert got.metas.shape == (got.n_blocks, MS)
            assert np.array_equal(got.metas, want.metas[:got.n_blocks])   # verified blocks only
            if policy == "block:1":
                assert got.n_blocks == want.n_blocks      # a state at every position: exact


def test_end_serves_a_repeated_sequence_and_resumes_at_the_deepest_checkpoint():
    s = SparseStateStrategy(options={"policy": "end"})
    a = ids_of([1, 2, 3, 4, 5, 6])
    s.insert(a, metas_of(a, 1))
    assert s.match(a).n_blocks == 6
    assert s.match(ids_of([1, 2, 3, 4, 5, 6, 7])).n_blocks == 6
    assert s.match(ids_of([1, 2, 3, 9])).n_blocks == 0         # no checkpoint at or before 3
    b = ids_of([1, 2, 3, 4, 5, 6, 7, 8])
    s.match(b[:6])                                             # resumes at 6, then extends
    s.insert(b, metas_of(b, 2))
    assert s.match(b).n_blocks == 8 and s.stats()["checkpoints"] == 2


def test_block_policy_places_every_b_blocks():
    s = SparseStateStrategy(options={"policy": "block:4"})
    a = ids_of(list(range(10)))
    s.insert(a, metas_of(a, 1))
    assert [s.match(a[:k]).n_blocks for k in (3, 4, 7, 8, 10)] == [0, 4, 4, 8, 8]


def test_dp_replans_from_the_depths_it_saw():
    s = SparseStateStrategy(options={"policy": "dp", "budget": 1, "replan_every": 2})
    shared = list(range(100, 110))                # 10 shared blocks, then diverse tails
    for i in range(6):
        seq = ids_of(shared + [i, i + 1, i + 2])
        s.match(seq)
        s.insert(seq, metas_of(seq, i))
    st_ = s.stats()
    assert st_["replans"] >= 1 and st_["budget"] == 1
    probe = ids_of(shared + [99])
    assert s.match(probe).n_blocks == 10          # the plan learnt depth 10


def test_budget_bytes_with_a_model_sets_the_budget():
    s = SparseStateStrategy(options={"policy": "uniform", "budget_bytes": "200MiB",
                                     "model": "nemotron-h-8b"})
    assert s.budget == (200 << 20) // 51_806_208 == 4


@pytest.mark.parametrize("options, needle", [
    ({"policy": "lru"}, "unknown policy 'lru'"),
    ({"policy": "block"}, "needs a block count"),
    ({"budget": -1}, "below the minimum"),
    ({"model": "gpt"}, "is not one of"),
    ({"budget_bytes": "lots"}, "budget_bytes"),
    ({"colour": 1}, "not an option of strategy sparse-state"),
])
def test_bad_options_are_config_errors(options, needle):
    with pytest.raises(ConfigError, match=needle):
        SparseStateStrategy(options=options)


def test_registered_as_a_builtin_strategy():
    from prefixbench.registry import get_registry
    assert get_registry().get("strategy", "sparse-state").factory is SparseStateStrategy


def test_snapshot_and_recover_keep_every_checkpoint(tmp_path):
    s = SparseStateStrategy(options={"policy": "dp", "budget": 2, "replan_every": 1})
    seqs = [ids_of([7, 7, 7, i, i]) for i in range(5)]
    for i, q in enumerate(seqs):
        s.match(q)
        s.insert(q, metas_of(q, i))
    before = [s.match(q).n_blocks for q in seqs]
    s.snapshot(tmp_path)
    r = SparseStateStrategy.recover(None, tmp_path, {"policy": "dp", "budget": 2,
                                                     "replan_every": 1}, quiet=True)
    assert [r.match(q).n_blocks for q in seqs] == before
    assert r.stats()["checkpoints"] == s.stats()["checkpoints"]
    assert r.stats()["replans"] == s.stats()["replans"]


@pytest.mark.parametrize("policy", ["dp", "end", "boundary", "block:8"])
def test_replay_through_the_cli_has_no_false_hits(run_cli, tmp_path, policy):
    out = tmp_path / "r.json"
    code, text, err = run_cli("-q", "run", "-s", "sparse-state", "-S", f"policy={policy}",
                              "-w", "document-qa", "-W", "sessions=30", "--no-runner", "-o", out)
    assert code == 0, err
    assert "false hits                                  0" in text
    import pyperf
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "r.counts.json"))
    hit = counts.get_benchmark("hit-tokens").mean()
    oracle = counts.get_benchmark("oracle-hit-tokens").mean()
    assert 0 < hit <= oracle
