"""redis-blockhash: the strategy kit (radix oracle, snapshot/recover, threads, options)
on the memory engine and on a real redis-server, and recovery after the server restarts."""
from __future__ import annotations

import numpy as np
import pytest

from prefixbench.blockids import chain_ids
from prefixbench.engines.base import StoreConfig
from prefixbench.errors import StoreError
from prefixbench.metas import make_metas
from prefixbench.plugins.conformance import StrategyConformance, branching_sequences
from prefixbench.plugins.redis_blockhash import RedisBlockHashStrategy
from prefixbench.plugins.blockhash import SsdBlockHashStrategy

from redis_support import cluster_always, redis_always, start  # noqa: F401 - fixtures


class TestRedisBlockHashOnMemory(StrategyConformance):
    strategy_name = "redis-blockhash"


class TestRedisBlockHashOnRedis(StrategyConformance):
    strategy_name = "redis-blockhash"
    engine_name = "redis"
    max_examples = 25

    @pytest.fixture(autouse=True)
    def _server(self, redis_always, monkeypatch):
        monkeypatch.setenv("PREFIXBENCH_REDIS_URL", redis_always.url)


def _fill(strategy, n=80, seed=7):
    seqs = branching_sequences(seed, n)
    for i, q in enumerate(seqs):
        strategy.insert(q, make_metas(q, i, 16))
    return seqs


def test_recovery_after_server_restart_is_a_scan_rebuild(tmp_path):
    """Kill -9 the server and the client's table; a restarted server and a scan give back
    every acknowledged insert with its first metadata (sync durability)."""
    from prefixbench.engines.redis import RedisStore
    srv = start("redis", tmp_path / "srv", appendfsync="always")
    try:
        cfg = StoreConfig(path=str(tmp_path / "store"), durability="sync",
                          options={"url": srv.url})
        s = RedisBlockHashStrategy(RedisStore(cfg))
        seqs = _fill(s)
        before = [s.match(q) for q in seqs]
        s.snapshot(tmp_path / "snap")
        more = branching_sequences(8, 20)
        for i, q in enumerate(more):                 # acknowledged after the snapshot
            s.insert(q, make_metas(q, 1000 + i, 16))
        before += [s.match(q) for q in more]
        srv.kill()                                   # SIGKILL: no shutdown save
        srv.start()
        store = RedisStore(StoreConfig(path=str(tmp_path / "store"), create=False,
                                       durability="sync", options={"url": srv.url}))
        r = RedisBlockHashStrategy.recover(store, tmp_path / "snap", quiet=True)
        try:
            assert r.recovery["entries_rebuilt"] == len(s._table)
            for q, b in zip(seqs + more, before):
                m = r.match(q)
                assert m.n_blocks == b.n_blocks and np.array_equal(m.metas, b.metas)
            # the same entries are ssd-blockhash's layout: it reads them straight from Redis
            ssd = SsdBlockHashStrategy(store)
            for q, b in zip(seqs, before[:len(seqs)]):
                assert ssd.match(q).n_blocks == b.n_blocks
        finally:
            r.close()
            s.store.close()
    finally:
        srv.stop()


def test_rebuild_names_a_foreign_value(tmp_path):
    from prefixbench.engines.memory import MemoryStore
    store = MemoryStore()
    store.put(0x1234, b"short")
    s = RedisBlockHashStrategy(store)
    with pytest.raises(StoreError, match="0x1234.*5 bytes, expected 16"):
        s._rebuild_from_store()


def test_existing_blocks_keep_their_first_metadata():
    from prefixbench.engines.memory import MemoryStore
    store = MemoryStore()
    s = RedisBlockHashStrategy(store)
    ids = chain_ids(np.arange(64, dtype=np.uint64), 5)
    first = make_metas(ids, 1, 16)
    s.insert(ids[:3], first[:3])
    s.insert(ids, make_metas(ids, 2, 16))
    assert store.get(int(ids[0])) == first[0].tobytes()
    assert s.stats()["uploaded_entries"] == len(ids)
    assert np.array_equal(s.match(ids).metas[:3], first[:3])


@pytest.mark.parametrize("engine,layout", [("redis", {"layout": "hash"}),
                                           ("redis", {"layout": "packed", "pack_bits": 6}),
                                           ("redis-cluster", {"buckets": 8})])
def test_bulk_rebuild_equals_the_per_key_rebuild(tmp_path, request, engine, layout):
    """The rebuild from the engine's bulk scan and from the per-key reference scan give
    the same table, entry for entry, and the same matches."""
    from prefixbench.engines.redis import RedisStore
    from prefixbench.engines.redis_cluster import RedisClusterStore
    server = request.getfixturevalue("redis_always" if engine == "redis" else "cluster_always")
    cfg = StoreConfig(path=str(tmp_path / "store"), durability="off",
                      options={"url": server.url, **layout})
    store = (RedisStore if engine == "redis" else RedisClusterStore)(cfg)
    try:
        s = RedisBlockHashStrategy(store)
        seqs = _fill(s, n=120)
        tables = {}
        for how in ("bulk", "per-key"):
            r = RedisBlockHashStrategy(store, {"rebuild_scan": how, "rebuild_chunk": 97})
            assert r._rebuild_from_store() == {"entries_rebuilt": len(s._table)}
            tables[how] = r
        (kb, mb), (kp, mp) = tables["bulk"]._table.export(), tables["per-key"]._table.export()
        ob, op = np.argsort(kb), np.argsort(kp)
        assert np.array_equal(kb[ob], kp[op]) and np.array_equal(mb[ob], mp[op])
        ke, me = s._table.export()
        oe = np.argsort(ke)
        assert np.array_equal(kb[ob], ke[oe]) and np.array_equal(mb[ob], me[oe])
        for q in seqs:
            a, b = tables["bulk"].match(q), tables["per-key"].match(q)
            assert a.n_blocks == b.n_blocks and np.array_equal(a.metas, b.metas)
    finally:
        store.drop()
        store.close()


def test_bulk_rebuild_names_a_foreign_value(tmp_path, redis_always):
    from prefixbench.engines.redis import RedisStore
    store = RedisStore(StoreConfig(path=str(tmp_path / "store"), durability="off",
                                   options={"url": redis_always.url}))
    try:
        store.write_items([(0x99, bytes(16)), (0x1234, b"short"), (0x5678, bytes(16))])
        for how in ("bulk", "per-key"):
            s = RedisBlockHashStrategy(store, {"rebuild_scan": how})
            with pytest.raises(StoreError, match="0x1234.*5 bytes, expected 16"):
                s._rebuild_from_store()
    finally:
        store.drop()
        store.close()


def test_rebuild_scan_option_is_checked():
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.errors import ConfigError
    with pytest.raises(ConfigError, match="option rebuild_scan: 'fast' is not one of bulk, "
                                          "per-key"):
        RedisBlockHashStrategy(MemoryStore(), {"rebuild_scan": "fast"})
