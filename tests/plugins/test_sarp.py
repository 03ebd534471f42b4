"""SARP against the exact radix oracle, plus its compiled hot paths against
their pure-Python references.

Random branching session sets (a token tree chained into block IDs; inserts
and matches interleaved) drive small geometries (S = 8 blocks, low
thresholds) so that windows, pruning, rematerialization, refinement and the
last-block point all occur within a few dozen blocks.  Invariants:

* never more blocks than the oracle, and the oracle's metadata for every
  returned block (so no unverified or stale block is ever returned);
* with ``max_retrieval=0`` exactly the oracle's answer - at every moment,
  also while back-fill runs in the background (pending entries are invisible
  and their parent stays authoritative);
* at most ``2R + 1`` registrations per segment, every posting list sorted.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prefixbench.engines.memory import MemoryStore
from prefixbench.blockids import chain_ids
from prefixbench.errors import ConfigError
from prefixbench.harness.replay import replay
from prefixbench.plugins import sarp
from prefixbench.plugins.radix import RadixStrategy
from prefixbench import twins
from prefixbench.plugins.sarp import LIVE, PENDING, SarpStrategy
from prefixbench.plugins.segments import Segment, encode_segment
from prefixbench.workloads.synthetic import make_synthetic

from engine_support import ENGINE_NAMES, Stores

_sarp = twins.load("prefixbench.plugins._sarp")      # the reference with PREFIXBENCH_PURE=1
_sarp_ref = twins.reference("prefixbench.plugins._sarp")
RoutingDirectory, RoutingDirectoryPy = _sarp.RoutingDirectory, _sarp_ref.RoutingDirectory
filters_py, max_potential_py = _sarp_ref.filters, _sarp_ref.max_potential

H0 = 0x5A4B
MS = 8
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: a small geometry where every mechanism fires
SMALL = {"S": 8, "R": 2, "N": 4, "b": 16, "stride": 1, "tau": 2, "pruning_threshold": 1,
         "backfill": "sync", "filtering": True}


def ids_of(tokens) -> np.ndarray:
    return chain_ids(np.asarray(tokens, dtype=np.uint64), H0)


def metas_of(ids: np.ndarray, tag: int) -> np.ndarray:
    """Per (block, inserting op): a block keeping its first metadata is observable."""
    words = np.empty((len(ids), 1), dtype=np.uint64)
    words[:, 0] = ids ^ np.uint64(tag * 0x9E3779B97F4A7C15 % (1 << 64))
    return np.ascontiguousarray(words.view(np.uint8).reshape(len(ids), 8)[:, :MS])


@st.composite
def session_sets(draw, max_seqs=12, alphabet=3, max_len=40):
    """Token sequences forming a random tree (long enough for several windows of
    8 blocks), plus interleaved insert/match ops on prefixes and extensions."""
    seqs = []
    for _ in range(draw(st.integers(1, max_seqs))):
        base = []
        if seqs and draw(st.booleans()):
            parent = draw(st.sampled_from(seqs))
            base = parent[:draw(st.integers(0, len(parent)))]
        seqs.append((base + draw(st.lists(st.integers(0, alphabet - 1), max_size=max_len)))[:60])
    ops = draw(st.lists(st.tuples(st.sampled_from(("insert", "insert", "match")),
                                  st.integers(0, len(seqs) - 1), st.integers(0, 60),
                                  st.lists(st.integers(0, alphabet - 1), max_size=3)),
                        min_size=1, max_size=50))
    return [(kind, seqs[i][:cut] + extra) for kind, i, cut, extra in ops]


def run_against_oracle(sarp_s: SarpStrategy, ops, exact: bool) -> None:
    oracle = RadixStrategy(meta_size=MS)
    for step, (kind, toks) in enumerate(ops):
        ids = ids_of(toks)
        if kind == "insert":
            m = metas_of(ids, step)
            oracle.insert(ids, m)
            sarp_s.insert(ids, m)
        got, want = sarp_s.match(ids), oracle.match(ids)
        assert got.metas.shape == (got.n_blocks, MS)
        assert got.n_blocks <= want.n_blocks, (step, toks)
        assert np.array_equal(got.metas, want.metas[:got.n_blocks]), (step, toks)
        if exact:
            assert got.n_blocks == want.n_blocks, (step, toks)


def registrations_ok(s: SarpStrategy) -> None:
    s.dir.check()
    d = s.dir.dump()
    _segs, counts = np.unique(d["segs"], return_counts=True)
    assert counts.max(initial=0) <= 2 * s.R + 1
    # one registration per (segment, routing offset)
    pairs = set(zip(d["segs"].tolist(), d["offs"][d["entry"]].tolist()))
    assert len(pairs) == len(d["segs"])


CONFIGS = {
    "default-budget": {},
    "unlimited": {"max_retrieval": 0},
    "no-refinement": {"refinement": False},
    "no-filtering": {"filtering": False},
    "no-pruning": {"pruning": False},
    "budget-1": {"max_retrieval": 1},
    "wide-filter": {"N": 8, "b": 8, "stride": 2},
    # 1-bit fields collide constantly: exactness then needs the extra retrieval rounds
    "unlimited-tiny-filter": {"max_retrieval": 0, "N": 8, "b": 1},
    "tiny-filter": {"N": 8, "b": 1, "stride": 2},
    # cross-window batched retrieval, geometry in tokens, the insert path's variants
    "batch-2": {"batch_windows": 2},
    "unlimited-batch-3": {"max_retrieval": 0, "batch_windows": 3},
    "budget-1-batch-4-tiny-filter": {"max_retrieval": 1, "batch_windows": 4, "N": 8, "b": 1},
    "tokens": {"segment_tokens": 96, "interval_tokens": 32, "block_tokens": 16},
    "unlimited-tokens-batch-2": {"max_retrieval": 0, "segment_tokens": 20, "interval_tokens": 8,
                                 "block_tokens": 4, "batch_windows": 2},
    "whole-lock": {"insert_lock": "whole"},
    "no-reuse": {"insert_reuse": False},
    "group-order": {"retrieval_order": "group"},
    "group-order-unlimited-tiny-filter": {"retrieval_order": "group", "max_retrieval": 0,
                                          "N": 8, "b": 1},
    "python-batch-tokens": {"directory": "python", "batch_windows": 2, "segment_tokens": 64,
                            "interval_tokens": 16, "block_tokens": 8},
    "id-runs-4": {"id_runs": 4},
    "unlimited-id-runs-16-batch-3": {"max_retrieval": 0, "id_runs": 16, "batch_windows": 3},
}


# ----------------------------------------------------------------------------- oracle properties
@pytest.mark.parametrize("config", sorted(CONFIGS))
@SETTINGS
@given(ops=session_sets())
def test_never_longer_never_unverified(config, ops):
    opts = dict(SMALL, **CONFIGS[config])
    s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
    # without filtering every candidate is verified, so the answer is exact too
    run_against_oracle(s, ops, exact=opts.get("max_retrieval", 3) == 0 or not opts["filtering"])
    registrations_ok(s)
    s.close()


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("ablation", ["all-on", "refinement", "filtering", "pruning"])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(ops=session_sets())
def test_unlimited_budget_is_exact_on_every_engine(engine, ablation, ops):
    opts = dict(SMALL, max_retrieval=0)
    if ablation != "all-on":
        opts[ablation] = False
    with Stores() as stores:
        s = SarpStrategy(stores.open(engine), opts, meta_size=MS)
        run_against_oracle(s, ops, exact=True)
        registrations_ok(s)


@SETTINGS
@given(ops=session_sets())
def test_background_backfill_keeps_the_parent_authoritative(ops):
    """Exact at every step although back-fill jobs publish asynchronously."""
    s = SarpStrategy(MemoryStore(), dict(SMALL, max_retrieval=0, backfill="background"),
                     meta_size=MS)
    try:
        run_against_oracle(s, ops, exact=True)
        s.drain()
        registrations_ok(s)
        d = s.dir.dump()
        assert not (d["next_state"] == PENDING).any() and not (d["refine_state"] == PENDING).any()
        assert d["visible"].all()
    finally:
        s.close()


@SETTINGS
@given(ops=session_sets())
def test_compiled_and_reference_directories_give_identical_answers(ops):
    a = SarpStrategy(MemoryStore(), dict(SMALL), meta_size=MS)
    b = SarpStrategy(MemoryStore(), dict(SMALL, directory="python"), meta_size=MS)
    for step, (kind, toks) in enumerate(ops):
        ids = ids_of(toks)
        if kind == "insert":
            a.insert(ids, metas_of(ids, step))
            b.insert(ids, metas_of(ids, step))
        ma, mb = a.match(ids), b.match(ids)
        assert ma.n_blocks == mb.n_blocks and np.array_equal(ma.metas, mb.metas)
    da, db = a.dir.dump(), b.dir.dump()
    key = lambda d: sorted(zip(d["keys"][d["entry"]].tolist(), d["filters"].tolist(),
                               d["segs"].tolist()))
    assert key(da) == key(db)
    assert sorted(zip(da["keys"].tolist(), da["visible"].tolist(), da["next_state"].tolist(),
                      da["refine_state"].tolist())) == \
        sorted(zip(db["keys"].tolist(), db["visible"].tolist(), db["next_state"].tolist(),
                   db["refine_state"].tolist()))


def run_requests_against_oracle(s: SarpStrategy, ops, exact: bool) -> None:
    """Ops as requests: an insert first matches a prefix of its sequence (the prompt)
    and then inserts the whole sequence, so it starts from what that match read."""
    oracle = RadixStrategy(meta_size=MS)
    for step, (kind, toks) in enumerate(ops):
        ids = ids_of(toks)
        prompt = ids[:max(0, len(ids) - (step % 5))]
        got, want = s.match(prompt), oracle.match(prompt)
        assert got.n_blocks <= want.n_blocks, (step, toks)
        assert np.array_equal(got.metas, want.metas[:got.n_blocks]), (step, toks)
        if exact:
            assert got.n_blocks == want.n_blocks, (step, toks)
        if kind == "insert":
            m = metas_of(ids, step)
            oracle.insert(ids, m)
            s.insert(ids, m)
    for _kind, toks in ops:     # every stored block carries its first metadata
        ids = ids_of(toks)
        got, want = s.match(ids), oracle.match(ids)
        assert got.n_blocks <= want.n_blocks
        assert np.array_equal(got.metas, want.metas[:got.n_blocks])


REQUEST_CONFIGS = {
    "default-budget": {},
    "budget-1-tiny-filter": {"max_retrieval": 1, "N": 8, "b": 1},
    "unlimited": {"max_retrieval": 0},
    "batch-3": {"batch_windows": 3},
    "unlimited-batch-2-tokens": {"max_retrieval": 0, "batch_windows": 2, "segment_tokens": 48,
                                 "interval_tokens": 12, "block_tokens": 4},
    "whole-lock-budget-1": {"insert_lock": "whole", "max_retrieval": 1, "b": 2},
    "no-reuse-budget-1": {"insert_reuse": False, "max_retrieval": 1, "b": 2},
    "python": {"directory": "python", "max_retrieval": 1, "b": 2, "batch_windows": 2},
    "group-order-budget-1": {"retrieval_order": "group", "max_retrieval": 1, "b": 2},
    "id-runs-3-budget-1": {"id_runs": 3, "max_retrieval": 1, "b": 2},
    "unlimited-id-runs-16": {"id_runs": 16, "max_retrieval": 0},
}


def same_answers(a, b, ops):
    """Replay ``ops`` on two strategies in lockstep, asserting every match agrees."""
    for step, (kind, toks) in enumerate(ops):
        ids = ids_of(toks)
        ma, mb = a.match(ids), b.match(ids)
        assert ma.n_blocks == mb.n_blocks and np.array_equal(ma.metas, mb.metas)
        if kind == "insert":
            a.insert(ids, metas_of(ids, step))
            b.insert(ids, metas_of(ids, step))


@pytest.mark.parametrize("config", sorted(REQUEST_CONFIGS))
@SETTINGS
@given(ops=session_sets())
def test_insert_after_match_stays_exact(config, ops):
    """The insert path that starts from its match's records (under any budget, with a
    filter that collides constantly) never stores an indexed block again."""
    opts = dict(SMALL, **REQUEST_CONFIGS[config])
    s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
    run_requests_against_oracle(s, ops, exact=opts.get("max_retrieval", 3) == 0)
    registrations_ok(s)
    assert s.stats()["insert_replans"] == 0       # one thread: nothing to re-plan
    s.close()


@pytest.mark.parametrize("base", [{}, {"max_retrieval": 1, "b": 2}, {"max_retrieval": 0},
                                  {"directory": "python"}])
@SETTINGS
@given(ops=session_sets(), k=st.integers(2, 5))
def test_batched_windows_give_the_same_answers_as_one_window_per_trip(base, ops, k):
    a = SarpStrategy(MemoryStore(), dict(SMALL, batch_windows=1, **base), meta_size=MS)
    b = SarpStrategy(MemoryStore(), dict(SMALL, batch_windows=k, **base), meta_size=MS)
    same_answers(a, b, ops)
    sa, sb = a.stats(), b.stats()
    for key in ("retrievals_per_query", "candidates_before_filtering", "windows_per_match",
                "candidates_after_filtering", "segments", "logical_block_entries"):
        assert sa[key] == sb[key], key
    # speculative reads are store reads too; wasted ones are the only difference
    assert sb["store_reads_per_match"] * sb["matches"] == pytest.approx(
        sa["store_reads_per_match"] * sa["matches"] + sb["speculative_reads_wasted"])
    assert sb["speculative_reads_wasted"] <= sb["speculative_reads"]
    assert sa["speculative_reads"] == 0 and sb["round_trips_per_match"] <= sa["round_trips_per_match"]


# short or colliding filters leave many candidates tied at one potential, some of
# which fall short of it: the cases where the two orders could part
@pytest.mark.parametrize("base", [{}, {"N": 2, "b": 1}, {"max_retrieval": 2, "N": 2, "b": 2},
                                  {"max_retrieval": 0, "N": 2, "b": 1},
                                  {"directory": "python", "N": 2, "b": 1}])
@SETTINGS
@given(ops=session_sets())
def test_sequential_reads_answer_as_the_group_does_with_no_more_reads(base, ops):
    """Potentials bound what a candidate can verify, so stopping at the first candidate
    that reaches its own (the paper's rule) loses nothing the whole top group would
    have found: the same answers, from at most as many segment reads."""
    seq = SarpStrategy(MemoryStore(), dict(SMALL, **base), meta_size=MS)
    grp = SarpStrategy(MemoryStore(), dict(SMALL, retrieval_order="group", **base),
                       meta_size=MS)
    same_answers(seq, grp, ops)
    a, b = seq.stats(), grp.stats()
    assert a["segments"] == b["segments"]
    assert a["retrievals_per_query"] <= b["retrievals_per_query"] + 1e-12
    seq.close()
    grp.close()


class RecordingStore(MemoryStore):
    """A memory engine that remembers every key each get_many asked for."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.asked: list[int] = []

    def _get_many(self, keys):
        self.asked.extend(int(x) for x in keys)
        return super()._get_many(keys)


def test_insert_reuses_the_segment_its_match_verified_and_reads_nothing_twice():
    store = RecordingStore()
    s = SarpStrategy(store, dict(SMALL, max_retrieval=2, tau=1000, pruning=False), meta_size=MS)
    seqs = _fan(3, 12, 13)
    for i, toks in enumerate(seqs):
        ids = ids_of(toks)
        s.insert(ids, metas_of(ids, i))
    before = s.stats()
    turn = ids_of(seqs[4][:13] + [7, 7])    # a branch inside window 1 of a stored sequence
    store.asked.clear()
    m = s.match(turn[:14])
    assert m.n_blocks == 13
    by_match = list(store.asked)
    store.asked.clear()
    s.insert(turn, metas_of(turn, 99))
    by_insert = list(store.asked)
    assert not set(by_match) & set(by_insert)          # never the same record twice
    after = s.stats()
    assert after["insert_segments_reused_from_match"] == before["insert_segments_reused_from_match"] + 1
    assert after["segments_copied"] == before["segments_copied"] + 1
    assert after["insert_reads_per_insert"] * after["inserts"] == \
        before["insert_reads_per_insert"] * before["inserts"] + len(by_insert)
    # the inserts before it followed no match: only this one counts as a serving insert
    assert (before["inserts_after_match"], after["inserts_after_match"]) == (0, 1)
    assert after["insert_reads_per_insert_after_match"] == len(by_insert)
    got = s.match(turn)
    assert got.n_blocks == len(turn)
    first = ids_of(seqs[4])                     # the 3 shared blocks keep seq 0's metadata
    want = np.concatenate([metas_of(first, 0)[:3], metas_of(first, 4)[3:13], metas_of(turn, 99)[13:]])
    assert np.array_equal(got.metas, want)
    # without reuse the insert reads the verified segment again
    t2 = ids_of(seqs[6][:13] + [8, 8])
    s.insert_reuse = False
    s.match(t2[:14])
    store.asked.clear()
    s.insert(t2, metas_of(t2, 100))
    assert store.asked


@SETTINGS
@given(ops=session_sets())
def test_insert_known_prefix_skips_the_known_windows_and_stays_exact(ops):
    """A bulk load's hint (how many leading blocks are indexed) lets the insert start
    at the window holding the last known block (whose segment the new windows
    follow): it reads at most what a plain insert reads, skips exactly the whole
    windows before it, and every answer stays the oracle's."""
    stores = {k: RecordingStore() for k in ("insert", "hint")}
    s = {k: SarpStrategy(st_, dict(SMALL, max_retrieval=0), meta_size=MS)
         for k, st_ in stores.items()}
    oracle = RadixStrategy(meta_size=MS)
    skipped = 0
    for step, (kind, toks) in enumerate(ops):
        ids = ids_of(toks)
        if kind == "insert":
            m = metas_of(ids, step)
            known = oracle.match(ids).n_blocks
            for st_ in stores.values():
                st_.asked.clear()
            s["insert"].insert(ids, m)
            s["hint"].insert_known_prefix(ids, m, known)
            oracle.insert(ids, m)
            assert len(stores["hint"].asked) <= len(stores["insert"].asked)
            skipped += max(known - 1, 0) // 8       # (S = 8)
        want = oracle.match(ids)
        for k in s:
            got = s[k].match(ids)
            assert got.n_blocks == want.n_blocks, (k, step, toks)
            assert np.array_equal(got.metas, want.metas), (k, step, toks)
    h, plain = s["hint"].stats(), s["insert"].stats()
    # an insert starts after the whole windows its match verified or the hint vouches
    # for, whichever reach further (the two strategies' matches answer alike)
    assert h["insert_windows_known"] + h["insert_windows_reused_from_match"] >= \
        max(skipped, plain["insert_windows_reused_from_match"])
    assert plain["insert_windows_known"] == 0
    with pytest.raises(ValueError):
        s["hint"].insert_known_prefix(ids_of([1, 2]), metas_of(ids_of([1, 2]), 0), 3)


def test_a_registration_between_plan_and_publish_forces_a_replan():
    """First writer wins: B publishes while A's unlocked plan is pending; A plans
    again under the lock and copies B's blocks with B's metadata."""
    s = SarpStrategy(MemoryStore(), dict(SMALL), meta_size=MS)
    oracle = RadixStrategy(meta_size=MS)
    A = ids_of(list(range(1, 13)))
    B = ids_of(list(range(1, 7)) + [50, 51])
    mA, mB = metas_of(A, 1), metas_of(B, 2)
    calls = []

    def publish_b_first():
        s._after_plan = None                 # B's own insert must not recurse
        calls.append(1)
        s.insert(B, mB)

    s._after_plan = publish_b_first
    s.match(A)
    s.insert(A, mA)
    oracle.insert(B, mB)
    oracle.insert(A, mA)
    assert calls == [1] and s.stats()["insert_replans"] == 1
    for q in (A, B):
        got, want = s.match(q), oracle.match(q)
        assert got.n_blocks == want.n_blocks == len(q)
        assert np.array_equal(got.metas, want.metas)
    # a publish of an unrelated prefix leaves the plan exact: no re-plan
    C = ids_of(list(range(100, 111)))
    D = ids_of(list(range(1, 7)) + [60, 61, 62])
    s._after_plan = lambda: (setattr(s, "_after_plan", None), s.insert(C, metas_of(C, 3)))
    s.match(D)
    s.insert(D, metas_of(D, 4))
    oracle.insert(C, metas_of(C, 3))
    oracle.insert(D, metas_of(D, 4))
    assert s.stats()["insert_replans"] == 1
    for q in (A, B, C, D):
        got, want = s.match(q), oracle.match(q)
        assert got.n_blocks == want.n_blocks == len(q)
        assert np.array_equal(got.metas, want.metas)
    # the whole-insert lock never plans outside it
    w = SarpStrategy(MemoryStore(), dict(SMALL, insert_lock="whole"), meta_size=MS)
    w._after_plan = lambda: calls.append(2)
    w.insert(A, mA)
    assert calls == [1] and w.stats()["insert_replans"] == 0


@pytest.mark.parametrize("opts", [
    {"max_retrieval": 0, "backfill": "background"},
    {"max_retrieval": 0, "backfill": "background", "batch_windows": 3},
    {"max_retrieval": 3, "backfill": "sync", "b": 2},
    {"max_retrieval": 0, "insert_lock": "whole"},
], ids=["unlimited", "unlimited-batch-3", "budget-3-colliding", "whole-lock"])
def test_four_threads_match_then_insert_stay_exact(opts):
    """Requests (match the prompt, insert the sequence) on 4 threads: no false hit,
    and once quiet the index answers as the oracle."""
    s = SarpStrategy(MemoryStore(), dict(SMALL, **opts), meta_size=MS)
    oracle = RadixStrategy(meta_size=MS)
    seqs = _fan(5, 30, 30, seed=3) + _fan(19, 30, 14, seed=4)
    meta = lambda ids: metas_of(ids, 0)
    errors = []

    def request_thread(k):
        try:
            for i in range(k, len(seqs), 4):
                ids = ids_of(seqs[i])
                got = s.match(ids[:len(ids) - 3])
                want = oracle.match(ids[:len(ids) - 3])
                assert got.n_blocks <= want.n_blocks
                assert np.array_equal(got.metas, want.metas[:got.n_blocks])
                oracle.insert(ids, meta(ids))
                s.insert(ids, meta(ids))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=request_thread, args=(k,)) for k in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)         # interleave plans and publishes: re-plans happen
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    s.drain()
    registrations_ok(s)
    for toks in seqs:
        ids = ids_of(toks)
        got, want = s.match(ids), oracle.match(ids)
        assert np.array_equal(got.metas, want.metas[:got.n_blocks])
        if opts["max_retrieval"] == 0:
            assert got.n_blocks == want.n_blocks == len(ids)
    s.close()


# ----------------------------------------------------------------------------- geometry
@pytest.mark.parametrize("args, want", [
    ((64, 4, 0, 0, 16), (64, 4)),
    ((64, 4, 1024, 256, 16), (64, 4)),
    ((64, 4, 1024, 256, 512), (2, 2)),            # Mooncake's blocks: R lowered to 2
    ((64, 4, 1024, 0, 512), (2, 2)),              # interval from R, lowered with S
    ((64, 4, 0, 256, 16), (64, 4)),
    ((64, 4, 256, 256, 512), (1, 1)),             # half a block rounds up to one
    ((64, 4, 200, 100, 512), (1, 1)),             # less than half: still at least one
    ((64, 4, 80, 32, 16), (6, 2)),                # 5 blocks, R=2: rounded to 6
    ((64, 4, 8192, 1024, 512), (16, 8)),
    ((64, 4, 100000, 16, 16), (6223, 127)),       # R capped at its maximum, S to 49 * 127
])
def test_geometry_in_tokens_rounds_to_whole_blocks(args, want):
    S, R, desc = sarp.resolve_geometry(*args)
    assert (S, R) == want and S % R == 0 and desc.endswith(f"R={R}")


def test_geometry_is_reported_and_the_harness_passes_the_block_size():
    from prefixbench.harness.build import build
    s = SarpStrategy(MemoryStore(), {"segment_tokens": 1024, "interval_tokens": 256,
                                     "block_tokens": 512})
    assert (s.S, s.R) == (2, 2)
    assert s.geometry().startswith("segment 1024 tokens -> 2 blocks of 512 tokens, "
                                   "interval 256 tokens -> 1 block, R=2; preset large-blocks "
                                   "(N=4, b=16, stride=2); routing ")
    assert s.geometry().endswith(" B/block")
    st_ = s.stats()
    assert (st_["geometry_S"], st_["geometry_R"], st_["geometry_interval"]) == (2, 2, 1)
    assert "2 blocks" in st_["geometry"]
    b = build("sarp", "memory", strategy_options={"segment_tokens": "1024"}, block_tokens=512)
    try:
        assert b.strategy.S == 2
    finally:
        b.close()
    b = build("sarp", "memory", strategy_options={"segment_tokens": "1024",
                                                  "block_tokens": "256"}, block_tokens=512)
    try:
        assert b.strategy.S == 4                     # the user's block_tokens wins
    finally:
        b.close()
    b = build("sarp", "memory", strategy_options={"segment_tokens": "1024"})
    try:
        assert b.strategy.S == 64                    # no block size given: the default 16
    finally:
        b.close()
    b = build("radix", None, block_tokens=512)      # strategies without the option: unchanged
    b.close()


def test_phase_clocks_see_routing_verification_and_the_insert_lock():
    from prefixbench import phases
    s = SarpStrategy(MemoryStore(), dict(SMALL), meta_size=MS)
    ids = ids_of(list(range(30)))
    s.insert(ids, metas_of(ids, 1))
    phases.enable()
    try:
        phases.reset()
        s.match(ids)
        t = phases.totals()
        assert t.get(phases.ROUTING, 0) > 0 and t.get(phases.VERIFY, 0) > 0
        held, go = threading.Event(), threading.Event()

        def hold():
            with s._insert_lock:
                held.set()
                go.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(10)
        threading.Timer(0.05, go.set).start()
        phases.reset()
        more = ids_of(list(range(30)) + [5, 5, 5, 5, 5, 5, 5, 5, 5])
        s.insert(more, metas_of(more, 2))       # waits for the lock to publish
        t.join()
        assert phases.totals().get(phases.LOCK, 0) > 0
    finally:
        phases.enable(False)
        phases.reset()


def test_a_batched_match_routes_its_windows_in_one_clock_phase():
    """The clock's own cost stays small on long matches: the windows a batch routes
    together are one routing phase, so a match switches phases about once per window
    (its verification), not twice."""
    from prefixbench import phases
    s = SarpStrategy(MemoryStore(), dict(SMALL, batch_windows=8), meta_size=MS)
    ids = ids_of(list(range(64)))                    # 8 whole windows of 8 blocks
    s.insert(ids, metas_of(ids, 1))
    phases.enable()
    try:
        phases.reset()
        assert s.match(ids).n_blocks == 64
        assert phases.totals().get(phases.ROUTING, 0) > 0
        assert phases.switches() <= 8 + 3            # 8 verifications, 1 routing, reads
    finally:
        phases.enable(False)
        phases.reset()


# ----------------------------------------------------------------------------- hot paths
@pytest.mark.compiled
@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, (1 << 64) - 1), max_size=40), data=st.data())
def test_filters_equal_reference(ids, data):
    b = data.draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
    N = data.draw(st.integers(1, 64 // b))
    stride = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(0, len(ids)))
    offs = data.draw(st.lists(st.integers(0, 45), max_size=6))
    got = _sarp.filters(np.array(ids, np.uint64), n, np.array(offs, np.int64), N, stride, b)
    assert got.tolist() == filters_py(ids, n, offs, N, stride, b).tolist()


@pytest.mark.compiled
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_child_postings_equal_reference_and_keep_only_sound_records_under_the_key(data):
    S, key = 8, 77
    off = data.draw(st.integers(0, 6))
    child = data.draw(st.integers(off + 1, 9))
    raws, sids, want, unsound = [], [], [], []
    for i in range(data.draw(st.integers(0, 12))):
        n = data.draw(st.integers(1, S))
        ids = np.array(data.draw(st.lists(st.integers(1, (1 << 64) - 1), min_size=n,
                                          max_size=n)), np.uint64)
        if n > off and data.draw(st.booleans()):
            ids[off] = key
        sid = 10 + i
        raw = encode_segment(Segment(sid, S * data.draw(st.integers(0, 3)), ids,
                                     np.full((n, MS), i, np.uint8)), MS)
        kind = data.draw(st.sampled_from(["ok", "ok", "ok", "absent", "cut", "flip", "other-key"]))
        if kind == "absent":
            raw = None
        elif kind == "cut":
            raw = raw[:-1]
        elif kind == "flip":
            raw = raw[:-1] + bytes([raw[-1] ^ 1])
        elif kind == "other-key":
            sid += 1000
        raws.append(bytearray(raw) if raw is not None and i % 2 else raw)
        sids.append(sid)
        if kind in ("cut", "flip", "other-key"):
            unsound.append(i)
        elif kind == "ok" and n > child and ids[off] == key:
            want.append((int(ids[child]), int(filters_py(ids, n, [child], 8, 2, 8)[0]), sid))
    args = (raws, np.array(sids, np.uint64), key, off, child, 8, 2, 8, S, MS)
    got = _sarp.child_postings(*args)
    ref = _sarp_ref.child_postings(*args)
    for a, b in zip(got[:3], ref[:3]):
        assert a.dtype == b.dtype == np.uint64 and a.tolist() == b.tolist()
    assert list(got[3]) == list(ref[3]) == unsound
    assert list(zip(*(a.tolist() for a in got[:3]))) == want
    for mod in (_sarp, _sarp_ref):
        with pytest.raises(ValueError, match="child_postings"):
            mod.child_postings(raws, np.array(sids, np.uint64), key, off, child, 8, 2, 8, 0, MS)


@pytest.mark.compiled
@pytest.mark.parametrize("base", [{}, {"max_retrieval": 1, "b": 2}, {"max_retrieval": 0},
                                  {"N": 2, "b": 1, "retrieval_order": "group"},
                                  {"N": 2, "b": 1, "max_retrieval": 2}, {"filtering": False},
                                  {"batch_windows": 3, "b": 2}])
@SETTINGS
@given(ops=session_sets())
def test_compiled_window_settling_answers_as_the_reference(base, ops):
    """The compiled directory, filters and window settling against their references in
    lockstep: the same answers, counters and stored records."""
    a = SarpStrategy(MemoryStore(), dict(SMALL, **base), meta_size=MS)
    b = SarpStrategy(MemoryStore(), dict(SMALL, directory="python", **base), meta_size=MS)
    same_answers(a, b, ops)
    assert a.stats() == b.stats()
    assert dict(a.store.scan()) == dict(b.store.scan())
    a.close()
    b.close()


def _record(seg_id, start, ids, ms=MS):
    ids = np.asarray(ids, np.uint64)
    return encode_segment(Segment(seg_id, start, ids, np.zeros((len(ids), ms), np.uint8)), ms)


@pytest.mark.compiled
@pytest.mark.parametrize("filtering,sequential,budget", [(True, True, 3), (True, False, 0),
                                                         (True, False, 2), (False, True, 0)])
def test_settle_equals_reference_on_corrupt_absent_and_known_records(filtering, sequential,
                                                                      budget):
    q = np.arange(100, 108, dtype=np.uint64)
    good = {7: _record(7, 8, q[:5]), 9: _record(9, 8, q[:3]), 11: _record(11, 8, q),
            13: _record(13, 16, q)}                     # 13 starts elsewhere: never verified
    bad = bytearray(good[11])
    bad[-1] ^= 1                                        # checksum fails
    store = {**good, 12: bytes(bad), 14: None}
    route = (0, np.array([12, 11, 14, 9, 13, 7], np.uint64), np.array([8, 8, 6, 6, 6, 2]), 9, 2,
             False)
    for known in (None, {9: good[9]}, {7: good[7], 14: None}, {12: bytes(bad), 11: good[11]}):
        got = []
        for mod in (_sarp, _sarp_ref):
            reads, corrupt = [], []

            def read(batch):
                reads.append(batch.tolist())
                return [store[int(i)] for i in batch]

            out = mod.settle(route, q, 8, budget, filtering, sequential, 8, MS,
                             dict(known) if known else None, None, read,
                             lambda ids: corrupt.extend(int(i) for i in ids), None)
            got.append((out, reads, corrupt))
        (oa, ra, ca), (ob, rb, cb) = got
        assert oa == ob and ra == rb and ca == cb, known
        assert _sarp.first_batch(route, budget, filtering, sequential).tolist() == \
            _sarp_ref.first_batch(route, budget, filtering, sequential).tolist()
    # the whole query matched: record 11 wins over the corrupt copy read first
    v, best, _info, seen = _sarp.settle(route, q, 8, 0, True, True, 8, MS, None, None,
                                        lambda b: [store[int(i)] for i in b], lambda ids: None,
                                        None)
    assert v == 8 and best == (good[11], 11) and 12 not in seen


def test_filter_layout_most_significant_field_first_zero_padded():
    ids = np.arange(1, 9, dtype=np.uint64)
    f = int(_sarp.filters(ids, 3, np.array([0]), 8, 2, 8)[0])
    fields = [(f >> (56 - 8 * i)) & 0xFF for i in range(8)]
    fp = lambda x: _sarp_ref._fmix64(x) & 0xFF
    assert fields[0] == fp(2) and fields[1] == fp(3)      # region 2 is partial: its last block
    assert fields[2:] == [0] * 6                           # no blocks: zero-padded


@settings(max_examples=300, deadline=None)
@given(cands=st.lists(st.lists(st.integers(0, 2), min_size=6, max_size=6), max_size=30),
       q=st.lists(st.integers(0, 2), min_size=6, max_size=6), stride=st.integers(1, 3))
def test_match_potential_search_equals_reference_and_brute_force(cands, q, stride):
    """Algorithm 1 finds the largest potential any candidate's filter allows."""
    N, b = 6, 8
    pack = lambda fs: sum(v << (64 - b * (i + 1)) for i, v in enumerate(fs))
    flts = sorted(pack(c) for c in cands)
    qf = pack(q)
    got = _sarp.max_potential(np.array(flts, np.uint64), qf, N, stride, b)
    assert tuple(got) == max_potential_py(flts, qf, N, stride, b)
    if not cands:
        return
    lead = [next((i for i in range(N) if c[i] != q[i]), N) for c in cands]
    k = max(lead)
    assert got[0] == (N * stride if k == N else (k + 1) * stride - 1)
    top = sorted(pack(c) for c, l in zip(cands, lead) if l == k)
    assert flts[got[1]:got[2]] == top


@pytest.mark.parametrize("impl", [RoutingDirectory, RoutingDirectoryPy])
def test_directory_plan_probes_deepest_visible_entry_and_ranks_by_potential(impl):
    d = impl()
    N, stride, b = 4, 1, 16
    q = np.arange(100, 108, dtype=np.uint64)
    qf = int(filters_py(q, 8, [0], N, stride, b)[0])
    # entry at offset 0: three candidates agreeing with the query on 4, 3 and 1 fields
    f4, f3, f1 = qf, qf ^ 0xFFFF, qf ^ 0xFFFF_FFFF_0000
    for f, seg in ((f1, 11), (f4, 12), (f3, 13)):
        d.upsert(int(q[0]), 0, f, seg, True)
    d.upsert(int(q[4]), 4, 7, 99, False)                 # a pending (invisible) deeper entry
    j, segs, pots, nb, na, hidden = d.plan(q[[4, 0]], [7, qf], [4, 0], 8, N, stride, b,
                                           True, 0)
    assert j == 1 and nb == 3 and na == 1                # fell back past the pending entry
    assert hidden                                        # and says so
    assert segs.tolist() == [12, 13, 11]
    assert pots.tolist() == [8, 3, 1]                    # saturated, then (k+1)*stride-1
    j, segs, _, _, _, _ = d.plan(q[[4, 0]], [7, qf], [4, 0], 8, N, stride, b, True, 2)
    assert segs.tolist() == [12, 13]                     # limit = the retrieval budget
    j, segs, pots, nb, na, hidden = d.plan(q[[0]], [qf], [0], 8, N, stride, b, False, 0)
    assert segs.tolist() == [13, 12, 11] and na == nb == 3   # no filtering: newest first
    assert not hidden
    assert d.plan(q[[4]], [7], [4], 8, N, stride, b, True, 0)[::5] == (-1, True)
    d.publish([int(q[4])], [4], [5], [98], [int(q[4])], int(q[0]), 0)
    j, segs, _, _, _, hidden = d.plan(q[[4, 0]], [7, qf], [4, 0], 8, N, stride, b, True, 0)
    assert j == 0 and sorted(segs.tolist()) == [98, 99] and not hidden
    assert d.info(int(q[0]))[3] == LIVE
    d.publish([int(q[4])], [4], [6], [99], [], int(q[0]), 1)
    assert d.postings(int(q[4]))[0].tolist().count(7) == 1   # back-fill never overrides
    d.upsert(int(q[4]), 4, 3, 99, True)                        # an insert does
    assert 3 in d.postings(int(q[4]))[0].tolist()
    assert d.n_entries == 2 and d.n_postings == 5 and d.check()
    if impl is RoutingDirectory:        # postings hold 32-bit segment references
        with pytest.raises(OverflowError):
            d.upsert(1, 0, 0, 1 << 32, True)
        with pytest.raises(OverflowError):
            d.publish([1], [0], [0], [1 << 32], [], 1, 0)


@pytest.mark.compiled
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3),
                          st.integers(1, 9), st.booleans()), max_size=60))
def test_directory_compiled_equals_reference_on_random_updates(ops):
    a, b = RoutingDirectory(), RoutingDirectoryPy()
    for key, off, filt, seg, vis in ops:
        assert a.upsert(key, off, filt << 62, seg, vis) == b.upsert(key, off, filt << 62, seg, vis)
    for key in range(6):
        assert a.info(key) == b.info(key)
        # budgets below, at and above the four candidates a compiled route holds inline
        for filtering, limit in ((True, 0), (True, 3), (True, 4), (True, 5), (False, 0)):
            # (behind the key: another, so a route may pass over a hidden entry)
            keys = [key, (key + 1) % 6]
            ra = a.plan(keys, [1 << 62] * 2, [0, 0], 8, 2, 1, 2, filtering, limit)
            rb = b.plan(keys, [1 << 62] * 2, [0, 0], 8, 2, 1, 2, filtering, limit)
            assert ra[0] == rb[0] and ra[3:] == rb[3:]
            assert ra[1].tolist() == rb[1].tolist() and ra[2].tolist() == rb[2].tolist()
    assert a.n_postings == b.n_postings and a.check() and b.check()


def _reg_geometry(R, refine):
    base = [i * 4 for i in range(R)]
    mids = [b + 2 for b in base] if refine else []
    return base, mids, (4 * R - 1 if refine else -1)


@pytest.mark.compiled
@settings(max_examples=150, deadline=None)
@given(R=st.integers(1, 4), refine=st.booleans(), pruning=st.booleans(),
       pt=st.integers(0, 3), tau=st.integers(0, 3),
       states=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 2), st.integers(0, 2)),
                       max_size=12),
       segs=st.lists(st.tuples(st.integers(1, 16), st.integers(0, 3)), min_size=1,
                     max_size=12))
def test_directory_register_compiled_equals_reference(R, refine, pruning, pt, tau, states,
                                                       segs):
    """The walk of one segment's routing points (which points it reaches, what stays
    hidden under a pending parent, which entries it marks for back-fill) is the same
    in the compiled directory and its reference, from any entry states."""
    base, mids, last = _reg_geometry(R, refine)
    a, b = RoutingDirectory(), RoutingDirectoryPy()
    prefixes = [np.arange(1, 4 * R + 1, dtype=np.uint64) * 1000 + p for p in range(4)]
    # earlier registrations, then arbitrary states on some of their entries
    for d in (a, b):
        for p in prefixes[:2]:
            d.register(p, 100, base, mids, last, 2, 2, 4, pruning, refine, pt, tau)
    for slot, ns, rs in states:
        k = int(prefixes[slot % 2][slot % (4 * R)])
        if a.info(k) is not None:
            a.set_state(k, ns, rs)
            b.set_state(k, ns, rs)
    for seg, (n, p) in enumerate(segs, 1):
        ids = prefixes[p][:min(n, 4 * R)]
        got = a.register(ids, seg, base, mids, last, 2, 2, 4, pruning, refine, pt, tau)
        want = b.register(ids, seg, base, mids, last, 2, 2, 4, pruning, refine, pt, tau)
        assert got == want
    assert _entries(a) == _entries(b)
    assert a.n_postings == b.n_postings and a.check() and b.check()


@pytest.mark.parametrize("impl", ["compiled", "python"])
@settings(max_examples=100, deadline=None)
@given(R=st.integers(1, 4), refine=st.booleans(), pruning=st.booleans(),
       pt=st.integers(0, 3), tau=st.integers(0, 3),
       segs=st.lists(st.tuples(st.integers(0, 16), st.integers(0, 3)), min_size=1,
                     max_size=12))
def test_register_writes_is_register_of_each_record_in_order(impl, R, refine, pruning, pt,
                                                             tau, segs):
    """A plan's records registered in one call leave the directory as registering them
    one by one does, with the same jobs and pending entries in the same order."""
    if impl == "compiled" and _sarp is _sarp_ref:
        pytest.skip("pure-Python mode: the compiled directory is the reference")
    cls = RoutingDirectory if impl == "compiled" else RoutingDirectoryPy
    base, mids, last = _reg_geometry(R, refine)
    prefixes = [np.arange(1, 4 * R + 1, dtype=np.uint64) * 1000 + p for p in range(4)]
    writes = [(0, 0, prefixes[p][:min(n, 4 * R)], None) for n, p in segs]
    sids = list(range(1, len(writes) + 1))
    one, batch = cls(), cls()
    jobs, pending = [], []
    for w, sid in zip(writes, sids):
        j, p = one.register(w[2], sid, base, mids, last, 2, 2, 4, pruning, refine, pt, tau)
        jobs += j
        pending += p
    got = batch.register_writes(writes, sids, base, mids, last, 2, 2, 4, pruning, refine, pt,
                                tau)
    assert got == (jobs, pending)
    assert _entries(one) == _entries(batch)
    with pytest.raises(ValueError, match="one segment id per record"):
        batch.register_writes(writes, sids[1:], base, mids, last, 2, 2, 4, pruning, refine,
                              pt, tau)
    with pytest.raises(OverflowError, match="32-bit"):
        batch.register_writes(writes[:1], [1 << 33], base, mids, last, 2, 2, 4, pruning,
                              refine, pt, tau)


def _entries(d):
    """A directory's entries and postings, in an order both implementations share."""
    x = d.dump()
    return (sorted(zip(x["keys"].tolist(), x["offs"].tolist(), x["visible"].tolist(),
                       x["next_state"].tolist(), x["refine_state"].tolist())),
            sorted(zip(x["keys"][x["entry"]].tolist(), x["filters"].tolist(),
                       x["segs"].tolist())))


def test_register_marks_a_grown_entry_before_the_next_point_is_reached():
    """A base entry that outgrows the pruning threshold is PENDING for the very next
    point of the same walk: that point registers hidden, listed for the back-fill."""
    base, mids, last = _reg_geometry(2, False)
    for d in (RoutingDirectory(), RoutingDirectoryPy()):
        ids = [np.array([7, 100 + i, 200 + i, 300 + i, 400 + i, 500 + i, 600 + i, 700 + i],
                        np.uint64) for i in range(3)]
        assert d.register(ids[0], 1, base, mids, last, 2, 2, 4, True, False, 1, 99) == ([], [])
        assert d.info(int(ids[0][4])) is None            # pruned: the first entry holds 1
        jobs, pending = d.register(ids[1], 2, base, mids, last, 2, 2, 4, True, False, 1, 99)
        assert jobs == [(7, 0, 0)]                       # 2 > threshold 1: expand, once
        assert pending == [(7, 0, int(ids[1][4]))]       # reached, hidden under PENDING
        assert d.info(7)[3] == PENDING and d.info(int(ids[1][4]))[2] is False
        assert d.register(ids[2], 3, base, mids, last, 2, 2, 4, True, False, 1, 99) == \
            ([], [(7, 0, int(ids[2][4]))])


# ----------------------------------------------------------------------------- mechanisms
def _fan(prefix_len: int, branches: int, tail: int, seed=0):
    """``branches`` sequences sharing ``prefix_len`` tokens, then diverging."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 1 << 30, prefix_len).tolist()
    return [shared + rng.integers(0, 1 << 30, tail).tolist() for _ in range(branches)]


def test_refinement_adds_midpoint_and_last_block_points():
    opts = dict(SMALL, tau=2, pruning=False)
    s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
    # 6 segments diverging at block 7 of window 0: the final interval [4, 8)
    for i, toks in enumerate(_fan(7, 6, 1)):
        ids = ids_of(toks)
        s.insert(ids, metas_of(ids, i))
    offs = s.dir.dump()["offs"]
    # both base lists exceed tau: midpoints 2 and 6; the final midpoint list too: last block 7
    assert set(offs.tolist()) == {0, 2, 4, 6, 7}
    assert s.stats()["refinements"] >= 2
    registrations_ok(s)
    # once refined, later segments register their midpoint / last-block keys too
    shared = _fan(7, 1, 1)[0][:7]
    late = ids_of(shared + [123456])                  # same key at offset 6 as the fan
    s.insert(late, metas_of(late, 50))
    seg_ids = set(s.dir.postings(int(late[6]))[1].tolist())
    assert len(seg_ids) == 7
    assert set(s.dir.postings(int(late[7]))[1].tolist()) < seg_ids
    assert s.match(late).n_blocks == 8
    off_r = SarpStrategy(MemoryStore(), dict(opts, refinement=False), meta_size=MS)
    for i, toks in enumerate(_fan(7, 6, 1)):
        ids = ids_of(toks)
        off_r.insert(ids, metas_of(ids, i))
    assert set(off_r.dir.dump()["offs"].tolist()) == {0, 4}


@pytest.mark.parametrize("wait", [True, False])
def test_a_match_routed_past_an_entry_the_worker_holds_waits_for_it(wait):
    """Background back-fill: while the worker holds a job, the deeper entries it will
    publish are hidden and the route answers from the coarser entry, whose budget
    skips the segment that matches.  The match waits for the jobs booked before it
    and matches again, so it answers as with the jobs published;
    ``backfill_wait=false`` keeps the paper's stale answer."""
    opts = dict(SMALL, backfill="background", backfill_wait=wait, max_retrieval=1,
                pruning_threshold=1, refinement=False)
    seqs = [ids_of(t) for t in _fan(5, 4, 3)]
    s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
    release = threading.Event()
    compute, await_backfill = s._compute, s._await_backfill

    def gated(job):
        assert release.wait(30)
        return compute(job)

    def releasing(ended):
        release.set()           # the worker may go on once a match waits for it
        return await_backfill(ended)

    s._compute, s._await_backfill = gated, releasing
    for i, ids in enumerate(seqs):
        s.insert(ids, metas_of(ids, i))
    got = s.match(seqs[0])
    release.set()
    s.drain()
    full = s.match(seqs[0])
    assert full.n_blocks == 8
    st = s.stats()
    assert st["match_hidden_routes"] >= 1
    if wait:
        assert got.n_blocks == 8 and np.array_equal(got.metas, full.metas)
        assert st["backfill_waits"] == 1
    else:
        assert got.n_blocks == 5 and st["backfill_waits"] == 0
    s.close()


def test_sync_backfill_reads_outside_the_insert_lock_and_drain_waits_for_them():
    """A sync job reads with the insert lock free (another thread's insert need not
    wait behind it), and drain() returns only once every job is published."""
    s = SarpStrategy(MemoryStore(), dict(SMALL, tau=2, pruning=False), meta_size=MS)
    held, entered, release = [], threading.Event(), threading.Event()
    compute = s._compute

    def gated(job):
        held.append(s._insert_lock._is_owned())
        entered.set()
        release.wait(30)
        return compute(job)

    s._compute = gated
    errors = []

    def writer():
        try:
            for i, toks in enumerate(_fan(7, 6, 1)):
                ids = ids_of(toks)
                s.insert(ids, metas_of(ids, i))
        except BaseException as e:
            errors.append(e)

    w = threading.Thread(target=writer)
    w.start()
    assert entered.wait(30)
    assert s._insert_lock.acquire(timeout=30)      # free while the job reads
    s._insert_lock.release()
    drainer = threading.Thread(target=s.drain)
    drainer.start()
    drainer.join(0.2)
    assert drainer.is_alive()                       # it waits for the job in flight
    release.set()
    w.join(30)
    drainer.join(30)
    assert not errors, errors[0]
    s.drain()
    assert held and not any(held)
    d = s.dir.dump()
    assert PENDING not in d["next_state"] and PENDING not in d["refine_state"]
    assert set(d["offs"].tolist()) == {0, 2, 4, 6, 7}   # as with the jobs under the lock
    registrations_ok(s)


def test_pruning_skips_points_then_rematerializes_them():
    opts = dict(SMALL, refinement=False, pruning_threshold=2)
    s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
    seqs = _fan(2, 4, 10)
    for i, toks in enumerate(seqs[:2]):
        ids = ids_of(toks)
        s.insert(ids, metas_of(ids, i))
    # two segments in window 0's first entry: at the threshold, offset 4 is pruned
    d = s.dir.dump()
    assert 4 not in d["offs"][d["entry"]].tolist()
    for i, toks in enumerate(seqs[2:], 2):
        ids = ids_of(toks)
        s.insert(ids, metas_of(ids, i))
    # the list outgrew the threshold: offset 4 rematerialized for all four segments
    w0 = set(s.dir.postings(int(ids_of(seqs[0])[0]))[1].tolist())
    at4 = set()
    for toks in seqs:
        at4 |= set(s.dir.postings(int(ids_of(toks)[4]))[1].tolist())
    assert at4 == w0 and len(w0) == 4
    assert s.stats()["rematerializations"] >= 1
    unpruned = SarpStrategy(MemoryStore(), dict(opts, pruning=False), meta_size=MS)
    for i, toks in enumerate(seqs[:2]):
        ids = ids_of(toks)
        unpruned.insert(ids, metas_of(ids, i))
    assert unpruned.dir.n_postings > SarpStrategy(MemoryStore(), opts, meta_size=MS).dir.n_postings


def test_rematerialization_skips_and_counts_a_corrupt_parent_segment():
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL, refinement=False, pruning_threshold=2), meta_size=MS)
    seqs = [ids_of(toks) for toks in _fan(2, 4, 10)]
    for i, ids in enumerate(seqs[:2]):
        s.insert(ids, metas_of(ids, i))
    # seqs[1]'s window-0 segment: its block 4 (past the shared prefix) is seqs[1]'s own
    victim = next(k for k, v in store.scan(0, 1 << 56)
                  if v[24:32] == bytes(8) and v[72:80] == seqs[1][4:5].tobytes())
    raw = bytearray(store.get(victim))
    raw[-1] ^= 0x55
    store.write_items([(victim, bytes(raw))])
    for i, ids in enumerate(seqs[2:], 2):
        s.insert(ids, metas_of(ids, i))
    assert s.stats()["rematerializations"] >= 1 and s.stats()["corrupt_segments"] >= 1
    at4 = set()
    for ids in seqs[0:1] + seqs[2:]:
        at4 |= set(s.dir.postings(int(ids[4]))[1].tolist())
    with pytest.raises(KeyError):           # no point at offset 4 for the corrupt segment
        s.dir.postings(int(seqs[1][4]))
    assert victim not in at4 and len(at4) == 3


def test_backfill_entries_stay_private_until_published_atomically():
    """While a rematerialization is pending, inserts register the child point in
    private entries; queries keep using the parent; publish shows all at once."""
    s = SarpStrategy(MemoryStore(), dict(SMALL, refinement=False, pruning_threshold=2,
                                         max_retrieval=0, backfill="background"), meta_size=MS)
    computed = threading.Event()
    compute = s._compute

    def compute_and_signal(job):
        out = compute(job)
        computed.set()
        return out

    s._compute = compute_and_signal
    A = ids_of([1, 2, 10, 11, 12, 13, 14, 15, 16, 17])
    B = ids_of([1, 2, 10, 11, 12, 13, 20, 21, 22])
    C = ids_of([1, 2, 30, 31, 32, 33, 34, 35])
    D = ids_of([1, 2, 40, 41, 42, 43, 44, 45])
    E = ids_of([1, 2, 50, 51, 52, 53, 54, 55])     # a child key the job never saw
    try:
        with s._insert_lock:                  # the worker cannot publish while we hold it
            for i, x in enumerate((A, C, D)):
                s.insert(x, metas_of(x, i))   # the third outgrows the threshold: a job
            assert computed.wait(10)
            s.insert(B, metas_of(B, 3))       # B's offset-4 key is A's: a private entry
            s.insert(E, metas_of(E, 4))
            info = s.dir.info(int(A[4]))
            assert info is not None and info[2] is False and info[1] == 1
            assert s.dir.info(int(E[4]))[2] is False
            for x in (A, B, C, D, E):            # exact although the deeper entry is private
                assert s.match(x).n_blocks == len(x)
        s.drain()
        info = s.dir.info(int(A[4]))
        assert info[2] is True and info[1] == 2
        assert s.dir.dump()["visible"].all()
        for x in (A, B, C, D, E):
            assert s.match(x).n_blocks == len(x)
    finally:
        s.close()


def test_segments_are_reused_extended_in_place_and_copied_on_divergence():
    s = SarpStrategy(MemoryStore(), dict(SMALL), meta_size=MS)
    a = ids_of(list(range(20)))
    s.insert(a[:5], metas_of(a[:5], 1))
    s.insert(a[:7], metas_of(a[:7], 2))              # extends the window-0 segment in place
    st_ = s.stats()
    assert st_["segments"] == 1 and st_["segments_extended"] == 1
    s.insert(a, metas_of(a, 3))                      # window 0 reused/extended, 1 and 2 new
    assert s.stats()["segments"] == 3
    b = ids_of(list(range(10)) + [99, 98])
    s.insert(b, metas_of(b, 4))                      # diverges inside window 1: one copy
    st_ = s.stats()
    assert st_["segments"] == 4 and st_["segments_copied"] == 1
    assert st_["logical_block_entries"] == 20 + 12 - 8   # the copy repeats 2 shared blocks
    m = s.match(b)
    assert m.n_blocks == 12
    # first metadata kept: blocks 0..9 carry the metadata of their first insert
    want = np.concatenate([metas_of(a[:5], 1), metas_of(a[5:7], 2), metas_of(a[7:10], 3),
                           metas_of(b[10:], 4)])
    assert np.array_equal(m.metas, want)


def test_retrievals_per_window_are_bounded_and_batched():
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL, max_retrieval=2, tau=1000, pruning=False), meta_size=MS)
    seqs = _fan(3, 12, 13)
    for i, toks in enumerate(seqs):
        ids = ids_of(toks)
        s.insert(ids, metas_of(ids, i))
    q = ids_of(seqs[5][:3] + [7, 7, 7])
    r0, c0 = store.stats().reads, store.stats().read_calls
    m = s.match(q)
    assert m.n_blocks == 3
    assert store.stats().reads - r0 <= 2 and store.stats().read_calls - c0 == 1
    # without filtering there is no ranking to cap by: every candidate, one batch
    store2 = MemoryStore()
    nf = SarpStrategy(store2, dict(SMALL, max_retrieval=2, tau=1000, pruning=False,
                                   filtering=False), meta_size=MS)
    for i, toks in enumerate(seqs):
        ids = ids_of(toks)
        nf.insert(ids, metas_of(ids, i))
    r0, c0 = store2.stats().reads, store2.stats().read_calls
    assert nf.match(q).n_blocks == 3
    assert store2.stats().reads - r0 == 12 and store2.stats().read_calls - c0 == 1


def test_corrupt_segment_is_a_counted_miss_never_reused():
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL), meta_size=MS)
    ids = ids_of(list(range(20)))
    s.insert(ids, metas_of(ids, 1))
    assert s.match(ids).n_blocks == 20
    # corrupt the window-1 segment's metadata bytes
    victim = next(k for k, v in store.scan(0, 1 << 56) if int.from_bytes(v[24:32], "little") == 8)
    raw = bytearray(store.get(victim))
    raw[-1] ^= 0x55
    store.write_items([(victim, bytes(raw))])
    m = s.match(ids)
    assert m.n_blocks == 8 and np.array_equal(m.metas, metas_of(ids, 1)[:8])
    assert s.stats()["corrupt_segments"] >= 1


@pytest.mark.parametrize("bad, word", [
    ({"S": 60, "R": 8}, "option S"), ({"b": 7}, "option b"), ({"N": 9, "b": 8}, "option N"),
    ({"tau": 0}, "option tau"), ({"max_retrieval": -1}, "option max_retrieval"),
    ({"R": 0}, "option R"), ({"stride": 0}, "option stride"), ({"S": "x"}, "option S"),
    ({"backfill": "later"}, "option backfill"), ({"filtering": "maybe"}, "option filtering"),
    ({"pruning_threshold": -2}, "option pruning_threshold"), ({"bogus": 1}, "option bogus"),
    ({"batch_windows": 0}, "option batch_windows"), ({"batch_windows": 65}, "option batch_windows"),
    ({"segment_tokens": -1}, "option segment_tokens"), ({"interval_tokens": "x"},
                                                         "option interval_tokens"),
    ({"block_tokens": 0}, "option block_tokens"), ({"insert_lock": "none"}, "option insert_lock"),
    ({"insert_reuse": "perhaps"}, "option insert_reuse"),
    ({"backfill_wait": "maybe"}, "option backfill_wait"),
    ({"segment_tokens": 1 << 30, "block_tokens": 1}, "option segment_tokens"),
    ({"S": 1 << 16, "interval_tokens": 16 * 7281}, "option S"),      # rounds S up past its max
])
def test_out_of_range_options_are_config_errors(bad, word):
    with pytest.raises(ConfigError, match=word):
        SarpStrategy(MemoryStore(), bad)


def test_needs_an_engine_and_registers_as_sarp():
    with pytest.raises(ConfigError, match="engine"):
        SarpStrategy(None)
    got = {}
    sarp.prefixbench_register_strategies(register=lambda name, f, *a, **k: got.setdefault(name, f))
    assert got == {"sarp": SarpStrategy}
    s = SarpStrategy(MemoryStore())
    assert (s.S, s.R, s.N, s.bits, s.stride, s.tau, s.pt, s.budget) == (64, 4, 8, 8, 2, 256, 3, 3)
    assert s.refinement and s.filtering and s.pruning
    st_ = s.stats()
    assert {"entries", "memory_bytes", "store_reads_per_match", "candidates_before_filtering",
            "candidates_after_filtering", "candidates_retrieved", "retrievals_per_query",
            "segments", "logical_block_entries", "memory_bytes_per_block"} <= set(st_)


# ----------------------------------------------------------------------------- concurrency
def test_concurrent_match_and_insert_against_the_oracle():
    """4 request threads; no false hit, no torn posting list, exact once quiet."""
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL, max_retrieval=0, backfill="background"), meta_size=MS)
    oracle = RadixStrategy(meta_size=MS)
    seqs = _fan(5, 40, 30, seed=1) + _fan(17, 40, 20, seed=2)
    # metadata depends on the block alone, so first-writer order cannot differ
    meta = lambda ids: metas_of(ids, 0)
    errors, stop = [], threading.Event()

    def request_thread(k):
        try:
            for i in range(k, len(seqs), 4):
                ids = ids_of(seqs[i])
                q = ids_of(seqs[(i * 7) % len(seqs)][:25])
                got = s.match(q)                # sarp first, oracle after: the oracle
                want = oracle.match(q)          # has every block sarp could have
                assert got.n_blocks <= want.n_blocks
                assert np.array_equal(got.metas, want.metas[:got.n_blocks])
                oracle.insert(ids, meta(ids))   # oracle first, then sarp
                s.insert(ids, meta(ids))
        except BaseException as e:
            errors.append(e)

    def checker():
        while not stop.is_set():
            try:
                s.dir.check()
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=request_thread, args=(k,)) for k in range(4)]
    chk = threading.Thread(target=checker)
    chk.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    chk.join()
    assert not errors, errors[0]
    s.drain()
    registrations_ok(s)
    for toks in seqs:
        ids = ids_of(toks)
        got, want = s.match(ids), oracle.match(ids)
        assert got.n_blocks == want.n_blocks == len(ids)
        assert np.array_equal(got.metas, want.metas)
    s.close()


# ----------------------------------------------------------------------------- replay
@pytest.mark.parametrize("profile", ["codeact", "lmcache-agent", "eabf", "ultrachat"])
def test_replay_on_synthetic_profiles(profile):
    wl = make_synthetic(profile, scale=0.03)
    s = SarpStrategy(MemoryStore(), {"backfill": "sync"})
    r = replay(s, wl)
    assert r.requests > 0 and r.false_hits == 0 and r.hit_rate_loss >= 0
    assert r.hit_rate > 0
    exact = SarpStrategy(MemoryStore(), {"max_retrieval": 0})
    r0 = replay(exact, wl)
    exact.drain()
    assert r0.false_hits == 0 and r0.hit_rate_loss == 0
    st_ = r.strategy_stats
    assert st_["candidates_retrieved"] <= st_["candidates_after_filtering"] + 1e-9
    assert st_["candidates_after_filtering"] <= st_["candidates_before_filtering"] + 1e-9
    exact.close()
    s.close()


@pytest.mark.parametrize("meta_size", [1, 16, 40])
def test_extreme_ids_other_meta_sizes_and_bad_inputs(meta_size):
    s = SarpStrategy(MemoryStore(), dict(SMALL, max_retrieval=0), meta_size=meta_size)
    assert s.match(np.empty(0, np.uint64)).n_blocks == 0
    s.insert(np.empty(0, np.uint64), np.empty((0, meta_size), np.uint8))
    top = (1 << 64) - 1
    ids = np.array([0, top, 0, 1, top, 5, 0, top, 9, 9, top, 0], dtype=np.uint64)
    metas = np.arange(len(ids) * meta_size, dtype=np.uint64).astype(np.uint8).reshape(-1, meta_size)
    s.insert(ids, metas)
    m = s.match(ids)
    assert m.n_blocks == len(ids) and np.array_equal(m.metas, metas)
    assert s.match(ids[:3]).n_blocks == 3
    assert s.match(np.array([top], np.uint64)).n_blocks == 0
    with pytest.raises(ValueError):
        s.insert(ids, metas[:, :0] if meta_size > 1 else metas[:-1])
    with pytest.raises(ValueError):
        s.match(ids.reshape(2, -1))
    s.close()


# ----------------------------------------------------------------------------- presets
def test_auto_preset_gives_large_blocks_their_filter_and_explicit_options_win():
    wide = SarpStrategy(MemoryStore(), {"block_tokens": 512})
    assert (wide.preset, wide.R, wide.N, wide.bits, wide.stride) == ("large-blocks", 2, 4, 16, 2)
    assert "preset large-blocks (N=4, b=16, stride=2)" in wide.geometry()
    small = SarpStrategy(MemoryStore(), {"block_tokens": 16})
    assert (small.preset, small.R, small.N, small.bits, small.stride) == ("paper", 4, 8, 8, 2)
    mixed = SarpStrategy(MemoryStore(), {"block_tokens": 512, "N": 8, "b": 8})
    assert (mixed.R, mixed.N, mixed.bits) == (2, 8, 8)          # given options win
    paper = SarpStrategy(MemoryStore(), {"block_tokens": 512, "preset": "paper"})
    assert (paper.preset, paper.R, paper.N) == ("paper", 4, 8)
    forced = SarpStrategy(MemoryStore(), {"preset": "large-blocks"})
    assert (forced.R, forced.N, forced.bits) == (2, 4, 16)
    with pytest.raises(ConfigError, match="option preset"):
        SarpStrategy(MemoryStore(), {"preset": "huge"})


def test_a_snapshot_recovers_with_the_preset_it_was_written_with(tmp_path):
    store = MemoryStore()
    s = SarpStrategy(store, {"block_tokens": 512, "backfill": "sync"}, meta_size=MS)
    ids = ids_of(list(range(40)))
    s.insert(ids, metas_of(ids, 1))
    s.snapshot(tmp_path)
    r = SarpStrategy.recover(store, tmp_path, meta_size=MS)
    assert (r.preset, r.R, r.N, r.bits) == ("large-blocks", 2, 4, 16)
    assert r.match(ids).n_blocks == 40
    r.close()
    s.close()


@SETTINGS
@given(ops=session_sets())
def test_large_blocks_preset_never_longer_never_unverified(ops):
    opts = {k: v for k, v in SMALL.items() if k not in ("R", "N", "b", "stride")}
    s = SarpStrategy(MemoryStore(), dict(opts, block_tokens=512), meta_size=MS)
    assert s.preset == "large-blocks"
    run_against_oracle(s, ops, exact=False)
    registrations_ok(s)
    s.close()


# ----------------------------------------------------------------------------- id runs
def _segment_ids(store) -> dict[int, tuple[int, int]]:
    """Segment id -> (window start, first block id) of every segment record in ``store``."""
    from prefixbench.plugins.segments import SEGMENT_KEY_LIMIT, decode_segment
    return {k: (seg.start, int(seg.ids[0])) for k, v in store.scan(1, SEGMENT_KEY_LIMIT)
            for seg in [decode_segment(v, MS)]}


def _turns(s, toks, upto):
    """One conversation growing turn by turn: match the prefix, insert the whole."""
    for i, n in enumerate(upto):
        ids = ids_of(toks[:n])
        s.match(ids)
        s.insert(ids, metas_of(ids, i))


def _ids_of_conversation(store, toks):
    """The segment ids holding ``toks``'s windows, in window order."""
    x = ids_of(toks)
    where = {v: k for k, v in _segment_ids(store).items()}
    return [where[(w, int(x[w]))] for w in range(0, len(x), 8)]


@pytest.mark.parametrize("runs", [8, 0])
def test_id_runs_give_each_growing_conversation_consecutive_ids(runs):
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL, id_runs=runs), meta_size=MS)
    a, b = list(range(1, 61)), list(range(1001, 1061))
    for n in [12, 20, 30, 44]:                      # two conversations, turns interleaved
        _turns(s, a, [n])
        _turns(s, b, [n])
    ia, ib = _ids_of_conversation(store, a[:44]), _ids_of_conversation(store, b[:44])
    consecutive = [ia == list(range(ia[0], ia[0] + 6)), ib == list(range(ib[0], ib[0] + 6))]
    assert consecutive == ([True, True] if runs else [False, False])
    if not runs:
        return
    # a branch inside window 1 copies it: the copy's predecessor (window 0) already has
    # a successor, so the copy opens a run, and the branch's later windows follow it
    fork = a[:11] + [99] * 14
    _turns(s, fork, [len(fork)])
    f = _ids_of_conversation(store, fork)
    assert f[0] == ia[0] and f[1] % runs == 0 and f[1] > max(ia + ib)
    assert f[1:] == [f[1], f[1] + 1, f[1] + 2]
    st_ = s.stats()
    assert st_["ids_continued"] == 2 * 5 + 2 and st_["id_runs_opened"] == 3
    s.close()


def test_a_bulk_load_keeps_consecutive_ids_where_the_known_prefix_ends_on_a_window():
    """``insert_known_prefix`` learns the segment its new windows follow even when the
    known prefix ends exactly on a window boundary (the window holding block ``known``
    is new, so the plan reads the whole window before it)."""
    store = MemoryStore()
    s = SarpStrategy(store, dict(SMALL, id_runs=8), meta_size=MS)
    a, b = list(range(1, 61)), list(range(1001, 1061))
    for n, known in [(16, 0), (24, 16), (40, 24), (44, 40)]:    # 16, 24, 40: whole windows
        for toks in (a, b):                                  # interleaved, as a load runs
            ids = ids_of(toks[:n])
            s.insert_known_prefix(ids, metas_of(ids, n), known)
    ia, ib = _ids_of_conversation(store, a[:44]), _ids_of_conversation(store, b[:44])
    assert ia == list(range(ia[0], ia[0] + 6)) and ib == list(range(ib[0], ib[0] + 6))
    assert s.stats()["id_runs_opened"] == 2
    hit = s.match(ids_of(a[:44]))
    assert hit.n_blocks == 44
    s.close()


def test_a_snapshot_recovers_segments_placed_in_runs_it_predates(tmp_path):
    """Ids a run hands out after a snapshot lie below the first id the snapshot does
    not cover: recovery finds them through the journal."""
    store = MemoryStore()
    opts = dict(SMALL, id_runs=16, max_retrieval=0)
    s = SarpStrategy(store, opts, meta_size=MS)
    rng = np.random.default_rng(3)
    convs = [rng.integers(1, 1 << 30, 90).tolist() for _ in range(5)]
    for c in convs:
        _turns(s, c, [10])
    s.snapshot(tmp_path)
    for c in convs:
        _turns(s, c, [30, 50, 90])                   # later windows continue the old runs
    assert s.stats()["ids_continued"] >= 5 * 9
    want = [s.match(ids_of(c)).metas for c in convs]
    r = SarpStrategy.recover(store, tmp_path, opts, meta_size=MS)
    for c, m in zip(convs, want):
        got = r.match(ids_of(c))
        assert got.n_blocks == 90 and np.array_equal(got.metas, m)
    # the recovered index keeps placing ids in fresh runs above every stored id
    before = set(_segment_ids(store))
    _turns(r, convs[0] + [7] * 20, [110])
    new = sorted(set(_segment_ids(store)) - before)
    assert new[0] > max(before) and new[0] % 16 == 0 and new == [new[0], new[0] + 1]
    r.close()
    s.close()


def test_a_snapshot_of_the_store_as_it_still_is_keeps_the_id_runs_open(tmp_path):
    """Recovered from a snapshot with nothing written since (a sweep's loaded state,
    cloned), the index places each conversation's next windows right after its
    earlier ones, as it would have without the recovery."""
    store = MemoryStore()
    opts = dict(SMALL, id_runs=8)
    s = SarpStrategy(store, opts, meta_size=MS)
    a, b = list(range(1, 61)), list(range(1001, 1061))
    for toks in (a, b):
        _turns(s, toks, [20])
    s.snapshot(tmp_path)
    r = SarpStrategy.recover(store, tmp_path, opts, meta_size=MS)
    for toks in (a, b):
        _turns(r, toks, [44])
    ia, ib = _ids_of_conversation(store, a[:44]), _ids_of_conversation(store, b[:44])
    assert ia == list(range(ia[0], ia[0] + 6)) and ib == list(range(ib[0], ib[0] + 6))
    assert s.stats()["id_runs_opened"] == 2 and r.stats()["id_runs_opened"] == 0
    assert r.match(ids_of(b[:44])).n_blocks == 44
    r.close()
    s.close()


# ----------------------------------------------------------------------------- counters
_counter_ops = st.lists(st.one_of(
    st.tuples(st.just("match"), st.tuples(*[st.integers(0, 1 << 20)] * 10)),
    st.tuples(st.just("insert"), st.tuples(*[st.integers(0, 1 << 20)] * 7),
              st.integers(0, 1 << 20), st.booleans(), st.integers(0, 1 << 10),
              st.integers(0, 1 << 10), st.booleans()),
    st.tuples(st.just("add"), st.sampled_from(_sarp_ref.COUNTER_NAMES),
              st.integers(0, 1 << 20))), max_size=40)


@SETTINGS
@given(ops=_counter_ops)
def test_counters_twins_add_the_same(ops):
    """A match's, an insert's and a single counter's additions land on the same names in
    the compiled counters and the reference."""
    got = [_sarp.Counters(), _sarp_ref.Counters()]
    for op in ops:
        for c in got:
            if op[0] == "match":
                c.count_match(op[1])
            elif op[0] == "insert":
                c.count_insert(*op[1:])
            else:
                c.add(op[1], op[2])
    assert got[0].as_dict() == got[1].as_dict()
    assert list(got[0].as_dict()) == list(_sarp_ref.COUNTER_NAMES) == list(_sarp.COUNTER_NAMES)


def test_counters_count_a_match_and_an_insert_by_name():
    for mod in (_sarp, _sarp_ref):
        c = mod.Counters()
        c.count_match((2, 3, 40, 5, 4, 1, 6, 1, 2, 1))
        c.count_insert((3, 70, 10, 1, 2, 1, 4), 5, True, 2, 1, False)
        d = c.as_dict()
        assert (d["matches"], d["match_windows"], d["entry_uses"], d["cand_before"],
                d["cand_after"], d["retrieved"], d["match_reads"], d["extra_batches"],
                d["speculative_reads"], d["speculative_wasted"],
                d["match_round_trips"], d["match_hidden_routes"]) == \
            (1, 2, 3, 40, 5, 4, 5, 1, 6, 1, 2, 1)
        assert (d["inserts"], d["insert_reads"], d["inserts_after_match"],
                d["insert_reads_after_match"], d["logical_blocks"], d["copied_blocks"],
                d["segments_extended"], d["segments_copied"], d["insert_segments_reused"],
                d["insert_records_reused"], d["segments"], d["insert_windows_reused"],
                d["insert_windows_known"], d["insert_replans"]) == \
            (1, 3, 1, 3, 70, 10, 1, 2, 1, 4, 4, 2, 1, 0)
        c.count_insert((1, 0, 0, 0, 0, 0, 0), 1, False, 0, 0, True)
        d = c.as_dict()
        assert (d["inserts"], d["inserts_after_match"], d["insert_replans"]) == (2, 1, 1)


def test_candidate_counts_are_a_matchs_and_leave_the_counters_and_the_next_insert_alone():
    """``candidate_counts`` gives what a match adds to Table 4's counters, and adds
    nothing itself: the counters, and the insert after it, are as without it."""
    opts = dict(SMALL, backfill="sync", pruning_threshold=1)
    seqs = [ids_of(t) for t in _fan(12, 5, 9)]

    def built():
        s = SarpStrategy(MemoryStore(), opts, meta_size=MS)
        for i, ids in enumerate(seqs):
            s.insert(ids, metas_of(ids, i))
        return s

    s, t = built(), built()
    q = seqs[2]
    before = s._c.as_dict()
    got = s.candidate_counts(q)
    assert s._c.as_dict() == before
    t.match(q)
    d = {k: t._c.as_dict()[k] - before[k] for k in before}
    assert got == (d["entry_uses"], d["cand_before"], d["cand_after"], d["retrieved"])
    assert got[0] >= 1 and got[1] >= got[2] >= 1
    # the insert after it plans as after no match (nothing kept for it)
    new = np.concatenate([q, ids_of(range(900, 917))])
    s.insert(new, metas_of(new, 99))
    assert s._c.as_dict()["inserts_after_match"] == before["inserts_after_match"]
    assert s.match(new).n_blocks == len(new)


def test_counters_restore_sets_known_names_and_refuse_unknown_ones():
    for mod in (_sarp, _sarp_ref):
        c = mod.Counters()
        c.add("jobs", 3)
        c.restore({"jobs": 7, "matches": 2, "not_a_counter": 9})
        d = c.as_dict()
        assert (d["jobs"], d["matches"]) == (7, 2) and "not_a_counter" not in d
        with pytest.raises(KeyError):
            c.add("not_a_counter")


def test_counters_add_exactly_across_threads():
    """Four threads each counting 5,000 matches lose none (the compiled twin adds with
    the GIL held, the reference under its lock)."""
    for mod in (_sarp, _sarp_ref):
        c = mod.Counters()

        def work():
            for _ in range(5000):
                c.count_match((1, 1, 1, 1, 1, 0, 0, 0, 1, 0))
                c.add("jobs")

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        d = c.as_dict()
        assert d["matches"] == d["match_windows"] == d["jobs"] == 20000
