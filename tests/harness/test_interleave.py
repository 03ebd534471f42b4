"""Interleaved timed runs: settings take turns, N requests each, after all of them
are loaded, and each gets exactly the results it gets when run on its own."""
import gc
import json

import pytest

from prefixbench import phases
from prefixbench.errors import ConfigError
from prefixbench.harness import preflight, sweeps
from prefixbench.harness.build import build
from prefixbench.harness.cli import main
from prefixbench.harness.replay import replay, replay_interleaved
from prefixbench.harness.bench import make_workload
from prefixbench.workloads import profiles


@pytest.fixture
def small_paper(monkeypatch):
    """codeact's paper size shrunk to 20,000 blocks, free space unlimited."""
    monkeypatch.setitem(profiles.PAPER_BLOCKS, "codeact", 20_000)
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(1e18, 1e18))


def _outcome(res):
    """What a replay found, apart from its timings."""
    return (res.requests, res.hit_tokens, res.oracle_hit_tokens, res.hit_blocks,
            res.false_hits, res.short_matches, res.store_reads_in_match,
            res.query_blocks.tolist())


def test_interleaved_replays_find_what_each_finds_alone():
    wl = make_workload("codeact", {"sessions": "12"})
    names = ("sarp", "ssd-blockhash", "segment-hash")
    alone = []
    for name in names:
        built = build(name, "memory", strategy_options={"backfill": "sync"} if name == "sarp"
                      else {})
        try:
            alone.append(_outcome(replay(built.strategy, wl)))
        finally:
            built.close()
    builts = [build(name, "memory", strategy_options={"backfill": "sync"} if name == "sarp"
                    else {}) for name in names]
    turns = []
    try:
        runs = [dict(strategy=b.strategy, workload=wl) for b in builts]
        for b, name in zip(builts, names):    # record the order the replays' matches run in
            real = b.strategy.match

            def spy(ids, real=real, name=name):
                turns.append(name)
                return real(ids)
            b.strategy.match = spy
        results = replay_interleaved(runs, 7)
    finally:
        for b in builts:
            b.close()
    assert [_outcome(r) for r in results] == alone
    n = alone[0][0]
    assert n > 7 * 3
    # turns of 7 matches each, round robin
    assert turns[:21] == [names[0]] * 7 + [names[1]] * 7 + [names[2]] * 7
    assert len(turns) == 3 * n
    for r in results:
        assert len(r.match_ns) == n and (r.match_ns > 0).all()
        assert r.wall_seconds > 0 and r.gc_mode == "frozen+disabled during replay"
    assert gc.isenabled()


def test_interleaved_breakdown_clocks_every_turn_and_leaves_the_switch_as_it_was():
    wl = make_workload("codeact", {"sessions": "8"})
    builts = [build(n, "memory") for n in ("sarp", "segment-hash")]
    try:
        assert not phases.enabled()
        results = replay_interleaved([dict(strategy=b.strategy, workload=wl, breakdown=True)
                                      for b in builts], 5)
    finally:
        for b in builts:
            b.close()
    assert not phases.enabled()
    for r in results:
        # each replay's phases add up to its latencies in every request, turns included
        total = sum(m for m, _i in r.phase_ns.values())
        assert (total == r.match_ns).all()
        # the clocks ran in every request: the first replay to finish stopping them
        # must not leave the other's last turns unclocked
        assert r.requests > 3 * 5
        assert (r.phase_switches[0] > 0).all() and (r.phase_switches[1] > 0).all()


def test_replay_interleaved_refuses_a_turn_of_no_requests():
    with pytest.raises(ValueError):
        replay_interleaved([], 0)


def test_interleaved_sweep_rows_equal_the_sweep_one_after_another(small_paper):
    common = dict(workload="codeact", engine="lmdb", scale="paper", run_requests="60",
                  strategies="sarp,segment-radix-capped", cap_rule="fixed")
    seq = sweeps.run_sweep(sweeps.make_config("strategies", **common))
    inter = sweeps.run_sweep(sweeps.make_config("strategies", interleave="9", **common))
    assert [r.setting.label for r in inter.rows] == [r.setting.label for r in seq.rows]
    for a, b in zip(seq.rows, inter.rows):
        assert _outcome(a.result) == _outcome(b.result)
        assert a.indexed_blocks == b.indexed_blocks and a.load_requests == b.load_requests
        assert a.result.strategy_stats.get("inserts_after_match") == \
            b.result.strategy_stats.get("inserts_after_match")
    table = inter.table()
    assert "timed runs interleaved, 9 requests per turn (every setting loaded first)" in table
    _times, counts = inter.suites()
    assert json.loads(counts[0].get_metadata()["config"])["interleave"] == 9
    assert "interleaved" not in seq.table()


@pytest.mark.parametrize("args, words", [
    (["--interleave", "-3"], ["--interleave"]),
    (["--interleave", "x"], ["--interleave"]),
    (["--interleave", "10", "--threads", "1,2"], ["--interleave", "leave out --threads"]),
])
def test_bad_interleave_is_one_line(capsys, args, words):
    code = main(["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=4",
                 "--cap-rule", "fixed", *args])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1
    for w in words:
        assert w in err


def test_only_the_strategies_sweep_interleaves():
    with pytest.raises(ConfigError, match="only the strategies sweep takes --interleave"):
        sweeps.make_config("retrieval", workload="codeact", interleave="5")
    code = main(["-q", "sweep", "capacity", "-w", "codeact", "--pool-blocks", "100",
                 "--interleave", "5"])
    assert code != 0


def test_interleaving_preflight_adds_the_settings_up():
    one = preflight.sweep_need(10**6, ["sarp", "ssd-blockhash"], "lmdb", cache_bytes=1 << 20)
    both = preflight.sweep_need(10**6, ["sarp", "ssd-blockhash"], "lmdb",
                                cache_bytes=1 << 20, together=True)
    assert both.disk > one.disk and both.memory > one.memory
    assert both.parts["oracle"] == 2 * one.parts["oracle"]
