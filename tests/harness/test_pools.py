"""Bounded KVCache pools: leaf-first eviction against a block-by-block reference,
pinning, stack inclusion, routing, the events the index and the oracle see,
the location check, the pool figures, and bad input as one line each.

Small synthetic traces and tiny workloads; behaviour only, never timings.
"""
import json
import random

import numpy as np
import pytest

import pool_fakes
from cli_support import one_line_error
from prefixbench.errors import ConfigError
from prefixbench.harness import pools
from prefixbench.harness import replay as rp
from prefixbench.harness.bench import make_workload
from prefixbench.workloads.model import Request, Workload

TINY = {"sessions": "20"}


# ----------------------------------------------------------------------------- traces
def random_chains(seed: int, n: int = 120, alphabet: int = 3, max_new: int = 6):
    """Requests as chained id arrays: each extends a cut of an earlier one."""
    rnd = random.Random(seed)
    ids, seqs, out = {}, [()], []
    for _ in range(n):
        base = rnd.choice(seqs)
        base = base[:rnd.randint(0, len(base))]
        seq = base + tuple(rnd.randrange(alphabet) for _ in range(rnd.randint(1, max_new)))
        seqs.append(seq)
        chain, parent = [], 0
        for label in seq:
            parent = ids.setdefault((parent, label), len(ids) + 1)
            chain.append(parent)
        out.append(np.array(chain, dtype=np.uint64))
    return out


class RefPool:
    """Block-by-block reference: repeatedly evict the leaf with the smallest key, as
    SGLang's radix cache does (lru: last use; lfu: uses, then last use; fifo: creation),
    deeper first among equals, never a block of the in-flight request."""

    def __init__(self, capacity, policy):
        self.capacity, self.policy, self.b = capacity, policy, {}

    def key(self, x):
        d = self.b[x]
        if self.policy == "lru":
            return (d["last"], -d["depth"])
        if self.policy == "lfu":
            return (d["hits"], d["last"], -d["depth"])
        return (d["born"], -d["depth"])

    def admit(self, ids, r):
        ids = ids.tolist()
        h = 0
        while h < len(ids) and ids[h] in self.b:
            h += 1
        pinned = set(ids[:h])
        for x in ids[:h]:
            self.b[x]["last"] = r
            self.b[x]["hits"] += 1
        evicted = []
        while len(self.b) + len(ids) - h > self.capacity:
            leaves = [x for x, d in self.b.items() if not d["kids"] and x not in pinned]
            v = min(leaves, key=self.key)
            p = self.b.pop(v)["parent"]
            if p is not None:
                self.b[p]["kids"].discard(v)
            evicted.append(v)
        for i in range(h, len(ids)):
            parent = ids[i - 1] if i else None
            self.b[ids[i]] = {"parent": parent, "depth": i, "last": r, "hits": 1, "born": r,
                              "kids": set()}
            if parent is not None:
                self.b[parent]["kids"].add(ids[i])
        return h, sorted(evicted)


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo"])
@pytest.mark.parametrize("seed,slots,queue,extra", [(1, 4096, 1024, 4), (2, 4096, 1, 4),
                                                    (3, 3, 2, 4), (4, 8, 1, 30),
                                                    (5, 4096, 3, 60)])
def test_pool_evicts_like_the_block_by_block_reference(policy, seed, slots, queue, extra):
    """``queue`` small: the victim queue holds a few blocks and is rebuilt often."""
    reqs = random_chains(seed, n=250)
    cap = max(len(r) for r in reqs) + extra
    pool = pools.Pool(cap, pools.make_policy(policy), initial_slots=slots)
    pool.queue_min = queue
    ref = RefPool(cap, policy)
    for r, ids in enumerate(reqs):
        h, ev = pool.admit(ids, r)
        rh, rev = ref.admit(ids, r)
        assert h == rh
        assert sorted(ev.tolist()) == rev, (policy, r)
        held = set(pool.ids[pool.used].tolist())
        assert held == set(ref.b)
        assert pool.held == len(held) <= cap
        assert pool.lookup(ids).min() >= 0          # the request's blocks are all held now


def test_pool_is_prefix_closed_and_children_are_counted():
    reqs = random_chains(7, n=200)
    pool = pools.Pool(max(len(r) for r in reqs) + 2, pools.make_policy("lru"),
                      initial_slots=1)
    for r, ids in enumerate(reqs):
        pool.admit(ids, r)
        used = np.flatnonzero(pool.used)
        par = pool.parent[used]
        assert pool.used[par[par >= 0]].all()       # every held block's parent is held
        kids = np.bincount(par[par >= 0], minlength=len(pool.used))
        assert np.array_equal(kids[used], pool.kids[used])


def test_pinned_prefix_is_never_evicted():
    pool = pools.Pool(6, pools.make_policy("lru"))
    old = np.array([1, 2, 3], dtype=np.uint64)
    pool.admit(old, 0)
    pool.admit(np.array([10, 11, 12], dtype=np.uint64), 1)
    # request 2 reuses the least recently used prefix and needs room for three more:
    # the other chain goes, its own pinned prefix stays
    h, ev = pool.admit(np.array([1, 2, 3, 4, 5, 6], dtype=np.uint64), 2)
    assert h == 3 and sorted(ev.tolist()) == [10, 11, 12]
    assert pool.lookup(old).min() >= 0


def test_a_request_larger_than_the_pool_is_one_line():
    pool = pools.Pool(3, pools.make_policy("lru"))
    with pytest.raises(ConfigError, match="request 5, which needs 4 blocks"):
        pool.admit(np.arange(1, 5, dtype=np.uint64), 5)


def test_lru_stack_inclusion_on_pool_contents():
    reqs = random_chains(11, n=300)
    most = max(len(r) for r in reqs)
    caps = (most, most + 4, most + 12, most + 32)
    ps = [pools.Pool(c, pools.make_policy("lru")) for c in caps]
    for r, ids in enumerate(reqs):
        hs = [p.admit(ids, r)[0] for p in ps]
        assert hs == sorted(hs)                     # a larger pool never hits less
        sets = [set(p.ids[p.used].tolist()) for p in ps]
        for small, big in zip(sets, sets[1:]):
            assert small <= big


# ----------------------------------------------------------------------------- routing
def test_prefix_per_worker_from_bitmaps():
    locs = np.array([0b111, 0b101, 0b001, 0b100], dtype=np.uint64)
    assert pools.prefix_per_worker(locs, 4, 3).tolist() == [3, 1, 2]
    assert pools.prefix_per_worker(None, 5, 2).tolist() == [5, 0]
    assert pools.prefix_per_worker(locs, 0, 3).tolist() == [0, 0, 0]


def test_routes():
    rr = pools.Cluster(pools.make_config(10, workers=3, route="round-robin"))
    assert [rr.route(i, np.zeros(3)) for i in range(5)] == [0, 1, 2, 0, 1]
    a = pools.Cluster(pools.make_config(10, workers=4, route="random"))
    b = pools.Cluster(pools.make_config(10, workers=4, route="random"))
    ra = [a.route(i, np.zeros(4)) for i in range(50)]
    assert ra == [b.route(i, np.zeros(4)) for i in range(50)] and len(set(ra)) > 1
    ca = pools.Cluster(pools.make_config(10, workers=3, route="cache-aware"))
    assert ca.route(0, np.array([1, 4, 2])) == 1
    ca.pools[0].admit(np.array([1, 2], dtype=np.uint64), 0)
    ca.pools[2].admit(np.array([5], dtype=np.uint64), 0)
    assert ca.route(1, np.array([0, 0, 0])) == 1      # a tie: the fewest blocks held
    assert ca.route(1, np.array([2, 0, 2])) == 2


# ----------------------------------------------------------------------------- the replay
class ListWorkload(Workload):
    name = "chains"
    block_size = 16

    def __init__(self, chains, out=1):
        self.chains = chains
        self.out = out

    def requests(self):
        for i, ids in enumerate(self.chains):
            k = max(0, len(ids) - self.out)
            yield Request(i, 0, ids[:k], ids, k * self.block_size)

    def __len__(self):
        return len(self.chains)


@pytest.mark.parametrize("workers,route", [(1, "round-robin"), (3, "round-robin"),
                                           (3, "random"), (3, "cache-aware")])
def test_index_and_oracle_follow_the_pools(workers, route):
    wl = ListWorkload(random_chains(5, n=150))
    cfg = pools.make_config(pools.check_fits(wl, 10 ** 9) + 2, "lru", workers, route)
    strat, oracle = pool_fakes.FakeExact(), pool_fakes.FakeExact()
    res = pools.replay_pooled(strat, wl, cfg, oracle=oracle)
    assert res.false_hits == 0 and res.missing_locations == 0
    assert res.hit_tokens == res.oracle_hit_tokens and res.hit_rate_loss == 0
    assert res.any_hit_tokens >= res.hit_tokens
    assert res.evictions > 0 and res.removals == res.evictions
    assert len(res.remove_ns) == sum(1 for e in strat.events if e[0] == "remove")
    # each request: at most one remove, before its insert, on the same worker
    ev = strat.events
    for a, b in zip(ev, ev[1:]):
        if a[0] == "remove":
            assert b == ("insert", a[1])
    for ids, w in strat.remove_calls:
        assert ids.dtype == np.uint64 and 0 <= w < workers
    assert res.entries_series[-1][0] == res.requests
    assert res.pool_held == sum(len(strat.held_by(w)) for w in range(workers))


def test_the_index_holds_exactly_what_each_pool_holds():
    wl = ListWorkload(random_chains(9, n=150))
    cfg = pools.make_config(pools.check_fits(wl, 10 ** 9) + 2, "fifo", 2, "round-robin")
    strat = pool_fakes.FakeExact()
    cluster_seen = {}
    orig = pools.Cluster.__init__

    def keep(self, c):
        orig(self, c)
        cluster_seen["c"] = self
    try:
        pools.Cluster.__init__ = keep
        pools.replay_pooled(strat, wl, cfg, oracle=pool_fakes.FakeExact())
    finally:
        pools.Cluster.__init__ = orig
    for w, pool in enumerate(cluster_seen["c"].pools):
        assert strat.held_by(w) == set(pool.ids[pool.used].tolist())


def test_radix_follows_the_pools_with_its_own_oracle():
    wl = make_workload("codeact", TINY)
    cfg = pools.make_config(600, "lru", 2, "cache-aware")
    from prefixbench.registry import get_registry
    radix = get_registry().get("strategy", "radix").factory()
    res = pools.replay_pooled(radix, wl, cfg)
    assert res.false_hits == 0 and res.missing_locations == 0 and res.hit_rate_loss == 0
    assert res.evictions > 0 and res.removals == res.evictions
    fake = pools.replay_pooled(pool_fakes.FakeExact(), wl, cfg, oracle=pool_fakes.FakeExact())
    assert fake.hit_tokens == res.hit_tokens and fake.evictions == res.evictions


def test_wrong_locations_are_caught():
    wl = ListWorkload(random_chains(5, n=150))
    cfg = pools.make_config(pools.check_fits(wl, 10 ** 9) + 2, "lru", 3, "round-robin")
    res = pools.replay_pooled(pool_fakes.AllWorkers(), wl, cfg, oracle=pool_fakes.FakeExact())
    assert res.false_hits > 0
    res = pools.replay_pooled(pool_fakes.FirstWorkerOnly(), wl, cfg,
                              oracle=pool_fakes.FakeExact())
    assert res.missing_locations > 0


def test_an_oracle_without_remove_is_one_line():
    wl = ListWorkload(random_chains(5, n=10))
    with pytest.raises(ConfigError, match="cannot remove"):
        pools.replay_pooled(pool_fakes.FakeExact(), wl, pools.make_config(50),
                            oracle=pool_fakes.NoRemove())


def test_replay_dispatches_pools_and_refuses_threads():
    wl = ListWorkload(random_chains(5, n=30))
    res = rp.replay(pool_fakes.FakeExact(), wl, oracle=pool_fakes.FakeExact(),
                    pools=pools.make_config(pools.check_fits(wl, 10 ** 9)))
    assert res.pool["pool_blocks"] == pools.check_fits(wl, 10 ** 9)
    assert res.latency("remove") > 0
    with pytest.raises(ConfigError, match="one request thread"):
        rp.replay(pool_fakes.FakeExact(), wl, pools=pools.make_config(10), threads=2)


# ----------------------------------------------------------------------------- the CLI
@pytest.fixture
def fakes(registry_with, monkeypatch):
    registry_with(pool_fakes.plugin())


def test_run_writes_the_pool_figures(fakes, run_cli, tmp_path):
    out = tmp_path / "pool.json"
    code, stdout, err = run_cli("-q", "run", "-s", "radix", "-w", "codeact", "-W",
                                "sessions=20", "--pool-blocks", "600", "--workers", "2",
                                "--route", "cache-aware", "--evict", "lfu", "-o", out)
    assert code == 0, err
    assert "hit rate on the routed worker" in stdout and "evictions / removals" in stdout
    import pyperf
    from prefixbench import schema
    times = pyperf.BenchmarkSuite.load(str(out))
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "pool.counts.json"))
    tnames = {b.get_name() for b in times.get_benchmarks()}
    cnames = {b.get_name() for b in counts.get_benchmarks()}
    assert {"remove-latency-mean", "remove-latency-p99", "match-latency-mean"} <= tnames
    assert {"evictions-per-request", "removals-per-request", "any-worker-hit-tokens",
            "pool-blocks-held", "oracle-hit-tokens"} <= cnames
    assert "match-latency-warm" not in tnames          # no Runner part under pools
    md = counts.get_benchmarks()[0].get_runs()[0].get_metadata()
    assert md["pool_blocks"] == 600 and md["pool_workers"] == 2
    assert md["pool_route"] == "cache-aware" and md["pool_evict"] == "lfu"
    series = json.loads(md[schema.SERIES_KEY])
    requests = next(b for b in counts.get_benchmarks() if b.get_name() == "requests")
    assert series[-1][0] == requests.get_values()[0] and len(series) >= 2
    assert all(0 < e <= held for _, e, held in series)  # no more entries than pools hold
    for name in tnames | cnames:
        schema.figure(name)                            # every figure is in the schema


@pytest.mark.parametrize("args,needles", [
    (["--pool-blocks", "0"], ["--pool-blocks", "0 blocks"]),
    (["--pool-blocks", "-5"], ["--pool-blocks"]),
    (["--pool-blocks", "lots"], ["--pool-blocks", "not a block count"]),
    (["--pool-blocks", "50"], ["--pool-blocks", "request 0", "session 0", "needs"]),
    (["--pool-blocks", "1e4", "--evict", "mru"], ["--evict", "mru", "fifo, lfu, lru"]),
    (["--pool-blocks", "1e4", "--workers", "0"], ["--workers", "1 to 64"]),
    (["--pool-blocks", "1e4", "--workers", "65"], ["--workers", "1 to 64"]),
    (["--pool-blocks", "1e4", "--route", "nearest"], ["--route", "cache-aware"]),
    (["--evict", "lru"], ["--evict", "needs --pool-blocks"]),
    (["--workers", "2"], ["--workers", "needs --pool-blocks"]),
    (["--pool-blocks", "1e4", "--threads", "2"], ["--threads", "one request thread"]),
    (["--pool-blocks", "1e4", "--breakdown"], ["--breakdown"]),
])
def test_run_bad_pool_input_is_one_line(fakes, run_cli, args, needles):
    code, _, err = run_cli("-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=20",
                           *args)
    one_line_error(code, err, *needles)


def test_strategy_without_remove_or_locations_is_one_line(fakes, run_cli):
    base = ("-q", "run", "-w", "codeact", "-W", "sessions=20", "--pool-blocks", "1e4")
    code, _, err = run_cli(*base, "-s", "fake-no-remove")
    one_line_error(code, err, "fake-no-remove", "supports_remove")
    code, _, err = run_cli(*base, "-s", "fake-one-location", "--workers", "2")
    one_line_error(code, err, "--workers", "fake-one-location", "max_workers")
    code, out, err = run_cli(*base, "-s", "fake-one-location")
    assert code == 0, err                               # one worker needs no locations


def test_pyperfs_worker_flag_is_not_taken_for_workers():
    from prefixbench.harness.cli import build_parser
    args, left = build_parser().parse_known_args(["run", "-s", "radix", "-w", "codeact",
                                                  "--worker", "--pipe", "3"])
    assert args.workers is None and "--worker" in left


def test_pyperf_options_under_pools_are_one_line(run_cli):
    code, _, err = run_cli("-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=20",
                           "--pool-blocks", "1e4", "--fast")
    one_line_error(code, err, "--fast", "pyperf.Runner")


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo"])
@pytest.mark.parametrize("queue", [1, 1024])
def test_large_evictions_match_the_smallest_keys(policy, queue):
    """Requests of thousands of blocks evicting hundreds at once, more than one walk of
    the victim queue takes (lmcache-agent in a pool barely larger than its largest
    request): each eviction is exactly the smallest keys among the unpinned blocks,
    computed here from scratch."""
    wl = make_workload("lmcache-agent", {})
    reqs = [r.insert_ids for _, r in zip(range(260), wl.requests())]
    pool = pools.Pool(4000, pools.make_policy(policy))
    pool.queue_min = queue
    big = 0
    for r, ids in enumerate(reqs):
        h, slots = pool.prefix(ids)
        short = len(ids) - h - (pool.capacity - pool.held)
        free = np.flatnonzero(pool.used)
        free = free[~np.isin(free, slots)]
        want = np.sort(pool.ids[free[np.argsort(pool.policy.keys(pool, free))[:max(short, 0)]]])
        _, ev = pool.admit(ids, r)
        assert np.array_equal(np.sort(ev), want), r
        big = max(big, len(ev))
    assert big > 300
