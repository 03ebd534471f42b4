"""Eviction policies: registered as a plugin kind, heap-ordered keys (a block never
goes before a cached child), and a third-party policy without that promise still
evicts leaves only."""
import random
import types

import numpy as np
import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness import pools
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins import eviction
from prefixbench.registry import get_registry


def _chains(seed, n=200):
    rnd = random.Random(seed)
    ids, seqs = {}, [()]
    for _ in range(n):
        base = rnd.choice(seqs)
        seq = base[:rnd.randint(0, len(base))] + tuple(rnd.randrange(3) for _ in range(
            rnd.randint(1, 5)))
        seqs.append(seq)
        chain, parent = [], 0
        for label in seq:
            parent = ids.setdefault((parent, label), len(ids) + 1)
            chain.append(parent)
        yield np.array(chain, dtype=np.uint64)


def test_builtins_are_registered_as_their_own_kind():
    reg = get_registry()
    assert reg.names("eviction") == ["fifo", "lfu", "lru"]
    assert all(reg.get("eviction", n).summary for n in ("lru", "lfu", "fifo"))
    assert {i.kind for i in reg.all()} >= {"eviction", "strategy"}


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"--evict: unknown eviction policy 'mru'; known: "
                                          r"fifo, lfu, lru"):
        pools.make_policy("mru")


@pytest.mark.parametrize("name", ["lru", "lfu", "fifo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_keys_are_heap_ordered(name, seed):
    policy = pools.make_policy(name)
    assert policy.heap_ordered
    pool = pools.Pool(10_000, policy)
    for r, ids in enumerate(_chains(seed)):
        pool.admit(ids, r)
        used = np.flatnonzero(pool.used)
        keys = np.zeros(len(pool.used), dtype=np.int64)
        keys[used] = policy.keys(pool, used)
        child = used[pool.parent[used] >= 0]
        assert (keys[pool.parent[child]] > keys[child]).all()
        assert len(np.unique(keys[used])) == len(used)       # a total order


class MostRecentLeaf(eviction.EvictionPolicy):
    """A plugin policy whose keys are not heap-ordered: newest leaf first."""

    name = "mru-leaf"
    heap_ordered = False

    def keys(self, state, slots):
        return -state.last[slots]


def test_a_plugin_policy_without_heap_order_evicts_leaves_only(registry_with):
    @hookimpl
    def prefixbench_register_evictions(register):
        register("mru-leaf", MostRecentLeaf)
    registry_with(types.SimpleNamespace(prefixbench_register_evictions=
                                        prefixbench_register_evictions))
    cfg = pools.make_config(40, "mru-leaf")
    pool = pools.Cluster(cfg).pools[0]
    for r, ids in enumerate(_chains(3)):
        if len(ids) > 40:
            continue
        pool.admit(ids, r)                      # _drop asserts no evicted block had a child
        used = np.flatnonzero(pool.used)
        par = pool.parent[used]
        assert pool.used[par[par >= 0]].all()
    assert pool.evictions > 0


class DeepestFirst(eviction.EvictionPolicy):
    """Heap-ordered keys that uses never change: the deepest block first, then by id."""

    name = "deepest"

    def keys(self, state, slots):
        return ((eviction.DEPTH_MASK - state.depth[slots]) << 32) | (
            state.ids[slots] & np.uint64(0xFFFFFFFF)).astype(np.int64)


@pytest.mark.parametrize("queue", [1, 4, 1024])
def test_static_heap_ordered_keys_keep_pinned_blocks_queued(queue):
    """Keys that a use does not change leave pinned blocks alive in the victim queue:
    they must be skipped while pinned and still come out in order afterwards."""
    policy = DeepestFirst()
    chains = [c for c in _chains(5, n=300) if len(c) <= 30]
    pool = pools.Pool(30, policy, initial_slots=2)
    pool.queue_min = queue
    for r, ids in enumerate(chains):
        h, _ = pool.prefix(ids)
        held = np.flatnonzero(pool.used)
        short = len(ids) - h - (pool.capacity - pool.held)
        pinned = set(pool.lookup(ids[:h]).tolist())
        free = [s for s in held.tolist() if s not in pinned]
        keys = dict(zip(free, policy.keys(pool, np.array(free, dtype=np.int64)).tolist())) \
            if free else {}
        want = sorted(int(pool.ids[s]) for s in sorted(free, key=keys.get)[:max(short, 0)])
        _, ev = pool.admit(ids, r)
        assert sorted(ev.tolist()) == want, r
    assert pool.evictions > 0
