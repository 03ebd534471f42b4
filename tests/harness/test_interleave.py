"""Interleaved timed runs: settings take turns, N requests each, after all of them
are loaded, and each gets exactly the results it gets when run on its own."""
import gc
import itertools
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
        _spied(builts, names, turns)
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
    (["--interleave", "0x", "--threads", "1,2"], ["--interleave"]),
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


def _spied(builts, names, turns):
    for b, name in zip(builts, names):    # record the order the replays' matches run in
        real = b.strategy.match

        def spy(ids, real=real, name=name):
            turns.append(name)
            return real(ids)
        b.strategy.match = spy


def test_threaded_replays_take_turns_of_the_given_size():
    """At 2 threads a turn is still 7 requests (the threads share them), and a 1-thread
    run on the request-thread path takes its 7 in between."""
    wl = make_workload("codeact", {"sessions": "12"})
    names = ("two", "one")
    builts = [build("dram-blockhash", "memory"), build("ssd-blockhash", "memory")]
    turns = []
    try:
        _spied(builts, names, turns)
        runs = [dict(strategy=builts[0].strategy, workload=wl, threads=2, threaded=True),
                dict(strategy=builts[1].strategy, workload=wl, threads=1, threaded=True)]
        results = replay_interleaved(runs, 7)
    finally:
        for b in builts:
            b.close()
    n = len(wl)
    assert n > 3 * 7
    blocks = [(name, len(list(g))) for name, g in itertools.groupby(turns)]
    assert [b[0] for b in blocks] == list(names) * (-(-n // 7))        # round robin
    assert all(k == 7 for _name, k in blocks[:-2])
    assert sum(k for name, k in blocks if name == "two") == n
    for r, t in zip(results, (2, 1)):
        assert r.threads == t and r.requests == n and r.false_hits == 0
        assert (r.match_ns > 0).all() and r.timed_wall_seconds > 0 and r.cpu_seconds > 0
        assert r.hit_tokens > 0 and r.gc_mode == "frozen+disabled during replay"
    assert gc.isenabled()


def test_a_failing_request_thread_ends_the_interleaved_replays():
    wl = make_workload("codeact", {"sessions": "12"})
    builts = [build("dram-blockhash", "memory"), build("ssd-blockhash", "memory")]
    calls = []
    real = builts[0].strategy.match

    def failing(ids):
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("request 10 failed")
        return real(ids)
    builts[0].strategy.match = failing
    try:
        with pytest.raises(RuntimeError, match="request 10 failed"):
            replay_interleaved([dict(strategy=b.strategy, workload=wl, threads=2,
                                     threaded=True) for b in builts], 4)
    finally:
        for b in builts:
            b.close()
    assert gc.isenabled()


def test_interleaved_sweep_at_two_thread_counts(small_paper):
    common = dict(workload="codeact", engine="lmdb", scale="paper", run_requests="60",
                  strategies="sarp,ssd-blockhash", cap_rule="fixed", threads="1,2")
    seq = sweeps.run_sweep(sweeps.make_config("strategies", **common))
    inter = sweeps.run_sweep(sweeps.make_config("strategies", interleave="10", **common))
    key = sorted((r.setting.label, r.threads) for r in seq.all_rows)
    assert sorted((r.setting.label, r.threads) for r in inter.all_rows) == key == [
        ("sarp", 1), ("sarp", 2), ("ssd-blockhash", 1), ("ssd-blockhash", 2)]
    by = {(r.setting.label, r.threads): r for r in seq.all_rows}
    for r in inter.all_rows:
        assert r.result.false_hits == 0 and r.result.requests == 60
        assert r.indexed_blocks == by[(r.setting.label, r.threads)].indexed_blocks
        if r.threads == 1:      # one request thread finds the same, turns or not
            assert _outcome(r.result) == _outcome(by[(r.setting.label, 1)].result)
    table = inter.table()
    assert "timed runs interleaved, 10 requests per turn" in table
    assert "request threads side by side" in table and "speedup 2/1" in table


def test_interleaving_thread_counts_preflight_holds_every_count(monkeypatch):
    seen = []
    real = preflight.sweep_need

    def spy(entries, names, *a, **kw):
        seen.append((list(names), kw.get("together")))
        return real(entries, names, *a, **kw)
    monkeypatch.setattr(preflight, "sweep_need", spy)
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(1e18, 1e18))
    cfg = sweeps.make_config("strategies", workload="codeact", engine="lmdb", scale="paper",
                             strategies="sarp,ssd-blockhash", cap_rule="fixed",
                             threads="1,2", interleave="10")
    sweeps.paper_size(cfg)
    assert seen[-1] == (["sarp", "ssd-blockhash"] * 2, True)


def test_interleaved_threaded_breakdown_clocks_every_request():
    """Request threads keep their per-thread clocks across turns: every request's
    phases add up to its latency, in both replays, and the switch is left off."""
    wl = make_workload("codeact", {"sessions": "8"})
    builts = [build(n, "memory") for n in ("sarp", "segment-hash")]
    try:
        assert not phases.enabled()
        results = replay_interleaved([dict(strategy=b.strategy, workload=wl, threads=2,
                                           threaded=True, breakdown=True) for b in builts], 6)
    finally:
        for b in builts:
            b.close()
    assert not phases.enabled()
    for r in results:
        assert r.requests > 3 * 6 and r.false_hits == 0
        total = sum(m for m, _i in r.phase_ns.values())
        assert (total == r.match_ns).all()
        assert (r.phase_switches[0] > 0).all() and (r.phase_switches[1] > 0).all()
