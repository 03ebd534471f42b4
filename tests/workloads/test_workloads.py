"""Workloads: synthetic generators, the Mooncake reader and ``describe``."""
import gzip
import os
import re
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest

from prefixbench.blockids import chain_ids, chain_tokens, namespace_seed
from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.workloads import mooncake as mc
from prefixbench.workloads import synthetic as syn
from prefixbench.workloads.describe import describe, format_table
from prefixbench.workloads.model import Session, SessionWorkload, Turn, replay_turns, resolve_parents
from prefixbench.workloads.profiles import (PAPER_BLOCKS, PROFILES, make_profile,
                                            paper_workload_options)

from conftest import REPO
MOONCAKE_DIR = os.path.join(os.path.dirname(REPO), "shared", "data", "mooncake-fast25")
CONVERSATION = os.path.join(MOONCAKE_DIR, "conversation_trace.jsonl.gz")
needs_trace = pytest.mark.skipif(not os.path.exists(CONVERSATION),
                                 reason="Mooncake sample trace not present")

ALL = sorted(PROFILES)


def small(name, **kw):
    kw.setdefault("sessions", 12)
    return syn.make_synthetic(name, **kw)


def toks(*values):
    return np.array(values, dtype=np.uint32)


# -- synthetic: determinism and ids --------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_ids(name):
    a = [r.insert_ids for r in small(name).requests()]
    b = [r.insert_ids for r in small(name).requests()]
    assert len(a) == len(b) > 0
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_different_seed_changes_tokens():
    a = small("ultrachat").session(3).turns[1].output_tokens
    b = small("ultrachat", seed=7).session(3).turns[1].output_tokens
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", ALL)
def test_namespace_copies_share_no_block(name):
    a = np.concatenate([r.insert_ids for r in small(name).requests()])
    b = np.concatenate([r.insert_ids for r in small(name, namespace="copy-1").requests()])
    assert len(a) == len(b)
    assert len(np.intersect1d(a, b)) == 0


@pytest.mark.parametrize("name", ALL)
def test_tokens_are_below_the_vocabulary(name):
    s = small(name).session(0)
    for t in s.turns:
        assert t.input_tokens.dtype == np.uint32 and t.output_tokens.dtype == np.uint32
        assert int(max(t.input_tokens.max(initial=0), t.output_tokens.max(initial=0))) < 32000


def _histories(wl):
    """Full token sequence (context + input + output) of every turn, from scratch."""
    seqs = {}
    for i, s in enumerate(wl.sessions()):
        parents = resolve_parents(s)
        for t, turn in enumerate(s.turns):
            ctx = seqs[i, parents[t]][0] if parents[t] >= 0 else np.empty(0, np.uint32)
            prompt = np.concatenate((ctx, turn.input_tokens))
            seqs[i, t] = (np.concatenate((prompt, turn.output_tokens)), len(prompt))
    return seqs


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("block_size", [16, 7])
def test_incremental_ids_equal_hashing_whole_histories(name, block_size):
    wl = small(name, sessions=6, block_size=block_size)
    seqs = _histories(wl)
    n = 0
    for r in wl.requests():
        full, prompt = seqs[r.session, r.turn]
        assert r.prompt_tokens == prompt
        assert np.array_equal(r.insert_ids, chain_tokens(full, block_size, wl.h0))
        assert np.array_equal(r.match_ids, r.insert_ids[:prompt // block_size])
        n += 1
    assert n == len(wl) == len(seqs)


def test_replay_order_is_round_robin_by_turn():
    wl = small("eabf", sessions=9)
    order = [(r.session, r.turn) for r in wl.requests()]
    assert order == sorted(order, key=lambda st: (st[1], st[0]))
    per_session = defaultdict(list)
    for s, t in order:
        per_session[s].append(t)
    assert sorted(per_session) == list(range(9))
    for i, turns in per_session.items():
        assert turns == list(range(len(wl.session(i).turns)))
    # sessions of different lengths: the longer ones go on alone at the end
    assert len({len(v) for v in per_session.values()}) > 1


@pytest.mark.parametrize("name", ALL)
def test_turn_ids_extend_the_parent_ids(name):
    wl = small(name)
    inserted = {}
    for r in wl.requests():
        assert np.array_equal(r.insert_ids[:len(r.match_ids)], r.match_ids)
        parent = resolve_parents(wl.session(r.session))[r.turn]
        if parent >= 0:
            prev = inserted[r.session, parent]
            assert len(r.match_ids) >= len(prev)
            assert np.array_equal(r.match_ids[:len(prev)], prev)
        inserted[r.session, r.turn] = r.insert_ids


def test_codeact_forks_share_the_parent_prefix_then_diverge():
    wl = small("codeact", sessions=40)
    reqs = {(r.session, r.turn): r for r in wl.requests()}
    forks = 0
    for i in range(40):
        parents = resolve_parents(wl.session(i))
        children = defaultdict(list)
        for t, p in enumerate(parents):
            children[int(p)].append(t)
        for p, kids in children.items():
            if p < 0 or len(kids) < 2:
                continue
            forks += 1
            base = reqs[i, p].insert_ids
            firsts = set()
            for k in kids:
                ids = reqs[i, k].insert_ids
                assert np.array_equal(ids[:len(base)], base)
                firsts.add(int(ids[len(base)]))       # the first block after the shared prefix
            assert len(firsts) == len(kids)
    assert forks > 0


def test_codeact_sessions_share_the_system_prompt():
    wl = small("codeact")
    firsts = [r.insert_ids[:49] for r in wl.requests() if r.turn == 0]
    assert all(np.array_equal(f, firsts[0]) for f in firsts)
    assert len({int(r.insert_ids[49]) for r in wl.requests() if r.turn == 0}) > 1


def test_sessions_and_turn_parents():
    wl = small("codeact", sessions=30)
    for i in range(30):
        s = wl.session(i)
        assert isinstance(s, Session) and s.turns[0].parent is None
        assert all(isinstance(t, Turn) for t in s.turns)
        assert all(t.parent == -1 or (t.parent is not None and 0 <= t.parent < k - 1)
                   for k, t in enumerate(s.turns) if k)


def test_length_scale_and_sessions_knobs():
    a, b = small("ultrachat"), small("ultrachat", length_scale=2)
    ta = sum(r.prompt_tokens for r in a.requests())
    tb = sum(r.prompt_tokens for r in b.requests())
    assert 1.5 * ta < tb < 2.5 * ta
    assert small("ultrachat", sessions=5, scale=3).profile.sessions == 15
    assert len({r.session for r in small("eabf", sessions=4).requests()}) == 4


def test_default_sizes_are_the_profile_defaults():
    for name, cls in PROFILES.items():
        wl = syn.make_synthetic(name)
        assert wl.profile.sessions == cls.sessions
        assert wl.metadata()["workload"] == name


# -- options and registration --------------------------------------------------

@pytest.mark.parametrize("options, option", [
    ({"sessions": "0"}, "sessions"),
    ({"sessions": "many"}, "sessions"),
    ({"sessions": 2.5}, "sessions"),
    ({"scale": "0"}, "scale"),
    ({"seed": "-1"}, "seed"),
    ({"length_scale": "nan"}, "length_scale"),
    ({"length_scale": "-2"}, "length_scale"),
    ({"block_size": "0"}, "block_size"),
    ({"namespace": ""}, "namespace"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_synthetic_options_name_the_option(options, option):
    with pytest.raises(ConfigError, match=f"^option {option}:"):
        syn.make_synthetic("codeact", **options)


def test_string_options_are_parsed():
    wl = syn.make_synthetic("lmcache-agent", sessions="3", seed="5", block_size="32",
                            length_scale="0.5", namespace="n1")
    assert (wl.profile.sessions, wl.profile.seed, wl.block_size) == (3, 5, 32)
    assert wl.profile.length_scale == 0.5 and wl.h0 == namespace_seed("n1")


def test_profile_knobs_are_validated():
    with pytest.raises(ConfigError, match="^option fork_prob:"):
        make_profile("codeact", fork_prob=1.5)
    with pytest.raises(ConfigError, match="^option turns:"):
        make_profile("eabf", turns=(5, 2))
    with pytest.raises(ConfigError, match="^option wings:"):
        make_profile("eabf", wings=2)


def _registered(module):
    got = {}
    module.prefixbench_register_workloads(
        register=lambda name, factory, summary=None: got.setdefault(name, factory))
    return got


def test_hooks_register_every_workload():
    synthetic = _registered(syn)
    assert sorted(synthetic) == ALL
    assert isinstance(synthetic["codeact"](sessions="2"), syn.SyntheticWorkload)
    assert sorted(_registered(mc)) == ["bailian", "mooncake", "mooncake-synthetic"]


# -- describe ------------------------------------------------------------------

def _wl(sessions, block_size=1):
    return SessionWorkload(sessions, block_size=block_size, name="hand")


def _one_turn(*token_lists):
    return [Session([Turn(toks(*t), toks(), None)]) for t in token_lists]


def test_span_alternatives_hand_built():
    # block size 1, spans of 4 blocks: five sessions share blocks 0..3, then differ
    shared = [7, 7, 7, 7]
    wl = _wl(_one_turn(*[shared + [i, 1, 1, 1, 2, 2] for i in range(5)]))
    d = describe(wl, span_tokens=4)
    # per history: [0,4) one path, [4,8) five alternatives, [8,10) one path
    assert (d["spans"], d["span_blocks"]) == (15, 4)
    assert d["span_share_gt3"] == pytest.approx(5 / 15)
    # three alternatives is not "more than three"
    wl = _wl(_one_turn(*[shared + [i, 1, 1, 1] for i in range(3)]))
    assert describe(wl, span_tokens=4)["span_share_gt3"] == 0


def test_span_alternatives_count_extensions_once():
    # one chat whose turns end mid-span: every turn extends the previous one
    turns = [Turn(toks(1, 2), toks(3), None)] + [Turn(toks(4), toks(5 + t)) for t in range(6)]
    d = describe(_wl([Session(turns)]), span_tokens=4)
    assert d["spans"] == 4 and d["span_share_gt3"] == 0 and d["span_alternatives_mean"] == 1


def test_span_alternatives_short_final_span_and_forks():
    # a root and four retries from it, all forking at block 3 of span [0, 4)
    turns = [Turn(toks(1, 2, 3), toks(), None)] + [Turn(toks(10 + k, 0, 0), toks(), 0)
                                                   for k in range(4)]
    d = describe(_wl([Session(turns)]), span_tokens=4)
    # final history = the last retry: 6 blocks -> spans [0,4) and the short [4,6)
    assert d["spans"] == 2
    assert d["span_share_gt3"] == pytest.approx(0.5)     # [0,4) has 4 ends, [4,6) one
    assert d["sessions"] == 1 and d["requests"] == 5


def test_candidates_per_routing_entry_hand_built():
    # window of 8 blocks, routing points at 0 and 4; each query shares 5 blocks
    shared = [9, 9, 9, 9, 9]
    wl = _wl(_one_turn(*[shared + [i, 0, 0, 0] for i in range(4)]))
    d = describe(wl, window_blocks=8, routing_points=2)
    # query 1 meets 1 segment at point 4, query 2 meets 2, query 3 meets 3
    assert d["routing_observations"] == 3
    assert d["candidates_per_routing_entry"] == pytest.approx(2.0)
    # the match ends in [4, 8) (not the first interval) and never reaches block 5
    assert d["next_block_observations"] == 1 and d["next_block_rule_out"] is None


def test_candidates_and_next_block_rule_out_multi_turn():
    # session 0 and 1 share 6 blocks; each then has a second turn extending itself
    s0 = Session([Turn(toks(1, 1, 1, 1, 1, 1, 2, 2), toks(), None), Turn(toks(2, 2), toks())])
    s1 = Session([Turn(toks(1, 1, 1, 1, 1, 1, 3, 3), toks(), None), Turn(toks(3, 3), toks())])
    d = describe(_wl([s0, s1]), window_blocks=8, routing_points=2)
    # s1 turn 0: m=6, deepest point 4: 1 segment (s0's), and block 5 still shared
    # s0 turn 1: m=8, point 4: 2 segments; s1 turn 1: 2 segments
    assert d["routing_observations"] == 3
    assert d["candidates_per_routing_entry"] == pytest.approx(5 / 3)
    assert d["next_block_rule_out"] == 0.0
    assert d["exact_hit_rate"] == pytest.approx((6 + 8 + 8) / (8 + 8 + 10 + 10))


def _brute(wl, span, window, points):
    """describe's span and proxy statistics straight from their definitions."""
    inserted, final, cand = [], {}, []
    interval = window // points
    for r in wl.requests():
        q = [int(x) for x in r.match_ids]
        m = max([next((j for j in range(min(len(q), len(s))) if s[j] != q[j]), min(len(q), len(s)))
                 for s in inserted] or [0])
        for w0 in range(0, m, window):
            last = min(m, w0 + window) - 1
            p = w0 + interval * min(points - 1, (last - w0) // interval)
            group = [s for s in inserted if len(s) > p and s[p] == q[p]]
            ends = {s[min(w0 + window, len(s)) - 1] for s in group}
            cont = {s[j] for s in group for j in range(p, min(w0 + window, len(s)) - 1)}
            cand.append(len(ends - cont))
        s = [int(x) for x in r.insert_ids]
        inserted.append(s)
        final[r.session] = s
    alts = []
    for h in final.values():
        for a in range(0, len(h), span):
            b = min(a + span, len(h))
            group = [s for s in inserted if len(s) > a and (a == 0 or s[a - 1] == h[a - 1])]
            ends = {s[min(b, len(s)) - 1] for s in group}
            cont = {s[j] for s in group for j in range(a, min(b, len(s)) - 1)}
            alts.append(len(ends - cont))
    return alts, cand


@pytest.mark.parametrize("seed", range(6))
def test_describe_matches_brute_force_on_random_trees(seed):
    rng = np.random.default_rng(seed)
    sessions = []
    for _ in range(int(rng.integers(3, 9))):
        turns = []
        for t in range(int(rng.integers(1, 6))):
            parent = None if t == 0 else (int(rng.integers(0, t)) if rng.random() < 0.3 else -1)
            turns.append(Turn(rng.integers(0, 2, int(rng.integers(0, 12))).astype(np.uint32),
                              rng.integers(0, 2, int(rng.integers(0, 8))).astype(np.uint32),
                              parent))
        sessions.append(Session(turns))
    wl = _wl(sessions, block_size=2)
    d = describe(wl, span_tokens=6, window_blocks=6, routing_points=3)
    alts, cand = _brute(wl, span=3, window=6, points=3)
    assert d["spans"] == len(alts)
    assert d["span_share_gt3"] == pytest.approx(np.mean(np.array(alts) > 3) if alts else 0)
    assert d["span_alternatives_mean"] == pytest.approx(np.mean(alts) if alts else 0)
    assert d["routing_observations"] == len(cand)
    assert d["candidates_per_routing_entry"] == pytest.approx(np.mean(cand) if cand else 0)


def test_format_table_is_readable():
    d = describe(small("ultrachat"))
    text = format_table(d)
    assert "spans with > 3 alternatives" in text and "%" in text
    assert f"{d['requests']:,}" in text
    assert len(text.splitlines()) >= 15


@pytest.mark.parametrize("name, span_share, candidates", [
    ("codeact", 0.2131, 59.3),
    ("lmcache-agent", 0.0060, 1.78),
    ("eabf", 0.0178, 1.01),
    ("ultrachat", 0.1685, 24.3),
])
def test_default_profiles_are_calibrated_to_the_paper(name, span_share, candidates):
    d = describe(syn.make_synthetic(name))
    assert d["span_share_gt3"] == pytest.approx(span_share, rel=0.1)
    assert d["candidates_per_routing_entry"] == pytest.approx(candidates, rel=0.1)


# -- the paper's sizes -------------------------------------------------------------

def _reference_requests(wl):
    """The replay of :func:`replay_turns` over the session plans (the streamed one's model)."""
    plans = [wl.plan(i) for i in range(wl.profile.sessions)]
    return replay_turns([p.parents for p in plans],
                        lambda i, t: wl.turn_tokens(i, t, plans[i]), wl.block_size, wl.h0)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("options", [{}, {"preset": "paper", "sessions": 45},
                                     {"block_size": 7, "group_sessions": 4}])
def test_streamed_requests_equal_the_reference_replay(name, options):
    wl = syn.make_synthetic(name, **{"sessions": 30, **options})
    got, ref = list(wl.requests()), list(_reference_requests(wl))
    assert len(got) == len(ref) > 0
    for a, b in zip(got, ref):
        assert (a.session, a.turn, a.prompt_tokens) == (b.session, b.turn, b.prompt_tokens)
        assert np.array_equal(a.match_ids, b.match_ids)
        assert np.array_equal(a.insert_ids, b.insert_ids)


def test_paper_block_counts_follow_the_budgets():
    # 5, 16, 29 and 362 MiB are 10% of 24 bytes per indexed block
    assert PAPER_BLOCKS == {"codeact": 2_184_533, "lmcache-agent": 6_990_506,
                            "eabf": 12_670_293, "ultrachat": 158_160_213}


@pytest.mark.parametrize("name, fraction, span_share, candidates", [
    ("codeact", 1 / 32, 0.2131, 59.3),
    ("lmcache-agent", "1/128", 0.0060, 1.78),
    ("eabf", 1 / 64, 0.0178, 1.01),
    ("ultrachat", "1/256", 0.1685, 24.3),
])
def test_paper_options_give_the_size_and_keep_the_calibration(name, fraction, span_share,
                                                              candidates):
    """Several sharing groups already show the paper-size figures: section 3.2's
    span share (describe) and Table 4's candidates before filtering (sarp's own)."""
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.harness.replay import replay
    from prefixbench.plugins.sarp import SarpStrategy

    wl = syn.make_synthetic(name, **paper_workload_options(name, fraction))
    assert wl.profile.groups >= 2
    d = describe(wl)
    assert d["unique_blocks"] == pytest.approx(float(Fraction(fraction)) * PAPER_BLOCKS[name],
                                               rel=0.1)
    assert d["span_share_gt3"] == pytest.approx(span_share, rel=0.25)
    s = SarpStrategy(MemoryStore(), {"backfill": "sync"})
    try:
        got = replay(s, wl).strategy_stats["candidates_before_filtering"]
    finally:
        s.close()
    assert got == pytest.approx(candidates, rel=0.25)


def test_paper_preset_defaults_to_the_paper_size_and_is_deterministic():
    wl = syn.make_synthetic("codeact", preset="paper")
    assert wl.profile.sessions == paper_workload_options("codeact")["sessions"]
    assert wl.profile.group_sessions == PROFILES["codeact"].sessions
    assert syn.make_synthetic("codeact", preset="paper", scale="0.5").profile.sessions == \
        round(wl.profile.sessions * 0.5)
    a = [r.insert_ids for r in syn.make_synthetic("ultrachat", preset="paper", sessions=50).requests()]
    b = [r.insert_ids for r in syn.make_synthetic("ultrachat", preset="paper", sessions=50).requests()]
    assert len(a) == len(b) > 0 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert paper_workload_options("eabf", 0.5) == paper_workload_options("eabf", "1/2")
    small_default = [r.insert_ids for r in syn.make_synthetic("eabf", sessions=20).requests()]
    small_preset = [r.insert_ids for r in
                    syn.make_synthetic("eabf", sessions=20, preset="small").requests()]
    assert all(np.array_equal(x, y) for x, y in zip(small_default, small_preset))


def test_paper_groups_share_the_system_head_and_differ_after_it():
    wl = syn.make_synthetic("codeact", preset="paper", sessions=600)      # 3 groups of 200
    assert wl.profile.groups == 3
    first = {r.session: r.insert_ids for r in wl.requests() if r.turn == 0}
    # the head (blocks 0..47) is every session's; block 48 is its group's
    assert len({int(ids[47]) for ids in first.values()}) == 1
    by_group = defaultdict(set)
    for i, ids in first.items():
        by_group[i % 3].add(int(ids[48]))
    assert all(len(v) == 1 for v in by_group.values())
    assert len(set.union(*by_group.values())) == 3
    # pooled openers are the group's own: no opening is shared across groups
    uc = syn.make_synthetic("ultrachat", preset="paper", sessions=400, group_sessions=100)
    owner = {}
    for r in uc.requests():
        if r.turn == 0:
            assert owner.setdefault(int(r.insert_ids[0]), r.session % 4) == r.session % 4


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5, "nan", "inf", "abc", "1/0", True, None,
                                      "", [0.5]])
def test_bad_paper_fraction_is_one_line(fraction):
    with pytest.raises(ConfigError, match="^option fraction: ") as err:
        paper_workload_options("codeact", fraction)
    assert "\n" not in str(err.value)


def test_paper_options_unknown_profile():
    with pytest.raises(ConfigError, match="unknown synthetic profile 'chat'"):
        paper_workload_options("chat")


@pytest.mark.parametrize("options, option", [
    ({"preset": "huge"}, "preset"),
    ({"group_sessions": "-1"}, "group_sessions"),
    ({"group_sessions": "some"}, "group_sessions"),
    ({"system_head_tokens": "-3"}, "system_head_tokens"),
])
def test_bad_paper_options_name_the_option(options, option):
    with pytest.raises(ConfigError, match=f"^option {option}:"):
        syn.make_synthetic("codeact", **options)


# -- Mooncake reader -------------------------------------------------------------

LINES = [
    '{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]}',
    '{"timestamp": 1, "input_length": 900, "output_length": 5, "hash_ids": [0, 1, 3, 4]}',
    '{"timestamp": 2, "input_length": 10, "output_length": 5, "hash_ids": [5]}',
]


def _write(path, lines, compress=False):
    data = ("\n".join(lines) + "\n").encode()
    with (gzip.open(path, "wb") if compress else open(path, "wb")) as f:
        f.write(data)
    return str(path)


@pytest.mark.parametrize("name, compress", [
    ("t.jsonl", False), ("t.jsonl.gz", True),
    ("gz-named-plain.jsonl.gz", False), ("plain-named-gz.jsonl", True),
])
def test_mooncake_reads_plain_and_gzip(tmp_path, name, compress):
    wl = mc.HashTraceWorkload(_write(tmp_path / name, LINES, compress))
    reqs = list(wl.requests())
    assert len(reqs) == len(wl) == 3
    assert [(r.session, r.turn) for r in reqs] == [(0, 0), (1, 0), (2, 0)]
    assert [r.prompt_tokens for r in reqs] == [3 * 512, 4 * 512, 512]
    h0 = namespace_seed("mooncake")
    assert np.array_equal(reqs[1].insert_ids, chain_ids(np.array([0, 1, 3, 4], np.uint64), h0))
    assert all(r.match_ids is r.insert_ids or np.array_equal(r.match_ids, r.insert_ids)
               for r in reqs)
    assert np.array_equal(reqs[0].insert_ids[:2], reqs[1].insert_ids[:2])
    assert reqs[0].insert_ids[2] != reqs[1].insert_ids[2]


def test_mooncake_options(tmp_path):
    path = _write(tmp_path / "t.jsonl", LINES)
    wl = mc.mooncake(path=path, block_size="256", namespace="copy")
    assert wl.block_size == 256 and next(iter(wl.requests())).prompt_tokens == 768
    assert wl.h0 == namespace_seed("copy")
    for options, option in [({"block_size": "0"}, "block_size"), ({"block_size": "x"}, "block_size"),
                            ({"rows": "3"}, "rows"), ({"namespace": ""}, "namespace")]:
        with pytest.raises(ConfigError, match=f"^option {option}:"):
            mc.mooncake(path=path, **options)


def test_mooncake_alibaba_session_fields(tmp_path):
    lines = [
        '{"chat_id": 10, "parent_chat_id": -1, "turn": 1, "hash_ids": [1, 2]}',
        '{"chat_id": 11, "parent_chat_id": -1, "turn": 1, "hash_ids": [7]}',
        '{"chat_id": 12, "parent_chat_id": 10, "turn": 2, "hash_ids": [1, 2, 3]}',
    ]
    reqs = list(mc.HashTraceWorkload(_write(tmp_path / "a.jsonl", lines)).requests())
    assert [(r.session, r.turn) for r in reqs] == [(0, 0), (1, 0), (0, 1)]


BAD = [
    ('{"hash_ids": [1, 2', "invalid JSON"),
    ('[1, 2, 3]', "expected a JSON object"),
    ('{"timestamp": 3}', "missing field 'hash_ids'"),
    ('{"hash_ids": "1 2 3"}', "must be a list"),
    ('{"hash_ids": [1, "2"]}', r"hash_ids\[1\] is '2', not an integer"),
    ('{"hash_ids": [1, 2.5]}', r"hash_ids\[1\] is 2.5, not an integer"),
    ('{"hash_ids": [true]}', r"hash_ids\[0\] is True, not an integer"),
    ('{"hash_ids": [4, -3]}', r"hash_ids\[1\] is negative \(-3\)"),
    ('{"hash_ids": [18446744073709551616]}', "does not fit in 64 bits"),
    ('{"hash_ids": [1], "chat_id": "x"}', "'chat_id' must be an integer"),
]


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("line, what", BAD)
def test_mooncake_malformed_line_names_file_and_line(tmp_path, line, what, compress):
    path = _write(tmp_path / ("bad.jsonl.gz" if compress else "bad.jsonl"),
                  LINES[:2] + [line] + LINES[2:], compress)
    with pytest.raises(TraceFormatError, match=f"^{re.escape(path)}:3: .*{what}"):
        mc.HashTraceWorkload(path)


def test_mooncake_truncated_gzip(tmp_path):
    path = _write(tmp_path / "t.jsonl.gz", LINES * 200, compress=True)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(TraceFormatError, match=f"^{re.escape(path)}:\\d+: truncated or corrupt gzip"):
        mc.HashTraceWorkload(path)


def test_mooncake_missing_or_unreadable_file(tmp_path):
    missing = str(tmp_path / "nope.jsonl.gz")
    with pytest.raises(TraceFormatError, match=f"^{re.escape(missing)}: cannot read trace"):
        mc.HashTraceWorkload(missing)
    with pytest.raises(TraceFormatError, match=f"^{re.escape(str(tmp_path))}: cannot read trace"):
        mc.mooncake(path=str(tmp_path))


def test_mooncake_default_path_not_found(monkeypatch):
    monkeypatch.setattr(mc, "_DATA_DIR", mc.Path("no") / "such" / "folder")
    with pytest.raises(ConfigError, match="^option path: .*pass path="):
        mc.mooncake()


@needs_trace
def test_mooncake_conversation_trace():
    wl = mc.mooncake()                      # found next to the checkout
    assert os.path.samefile(wl.path, CONVERSATION)
    reqs = list(wl.requests())
    assert len(reqs) == len(wl) == 12_031
    assert sum(len(r.insert_ids) for r in reqs) == wl.n_blocks == 288_500
    assert len(np.unique(wl.raw_ids)) == 182_790
    d = describe(wl)
    assert d["unique_blocks"] == 182_790          # the trace's ids are prefix-chained already
    assert d["sessions"] == 12_031 and d["span_blocks"] == 1
    assert round(d["exact_hit_rate"], 3) == 0.366  # SOURCE.md's infinite-cache ratio
    assert d["prompt_tokens"] == 288_500 * 512


@needs_trace
def test_mooncake_synthetic_trace():
    wl = mc.mooncake_synthetic()
    assert len(wl) == 3_993 and wl.n_blocks == 121_877
    assert len(np.unique(wl.raw_ids)) == 43_924
