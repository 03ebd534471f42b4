"""The pre-flight memory estimate of a redis-server store follows the engine's layout."""
from __future__ import annotations

from prefixbench.harness import preflight as pf

HASH = pf.SERVER_MEMORY_BYTES_PER_BLOCK["redis"]
LISTPACK = pf.PACKED_SERVER_MEMORY_BYTES_PER_BLOCK
TABLE = pf.PACKED_TABLE_SERVER_MEMORY_BYTES_PER_BLOCK


def test_packed_layout_estimates_less_server_memory():
    n = 10**7
    hash_ = pf.strategy_memory_bytes("ssd-blockhash", "redis", n)
    assert hash_ == pf.strategy_memory_bytes("ssd-blockhash", "redis", n,
                                             engine_options={"layout": "hash"})
    packed = pf.strategy_memory_bytes("ssd-blockhash", "redis", n,
                                      engine_options={"layout": "packed"})
    assert hash_ - packed == n * (HASH - LISTPACK)
    assert LISTPACK < TABLE < HASH


def test_buckets_past_the_listpack_limit_take_the_hash_table_figure():
    per = pf.server_memory_bytes_per_block
    # 2**16 buckets (the default): listpacks up to 4/5 of 512 entries each on average
    assert per("redis", 26 * 10**6, {"layout": "packed"}) == LISTPACK
    assert per("redis", 10**8, {"layout": "packed"}) == TABLE
    assert per("redis", 10**6, {"layout": "packed", "pack_bits": "10"}) == TABLE
    assert per("redis", 10**6, {"layout": "packed", "pack_bits": "12"}) == LISTPACK
    # the cluster has no packed layout; a bad pack_bits is left to the engine to refuse
    assert per("redis-cluster", 10**6, {"layout": "packed"}) == 430.0
    assert per("redis", 10**6, {"layout": "packed", "pack_bits": "x"}) == LISTPACK
    assert per("lmdb", 10**6) is None


def test_recover_need_takes_the_engine_options():
    a = pf.recover_need(10**6, "redis-blockhash", "redis", cache_bytes=0)
    b = pf.recover_need(10**6, "redis-blockhash", "redis", cache_bytes=0,
                        engine_options={"layout": "packed"})
    assert a.memory - b.memory == 10**6 * (HASH - LISTPACK)
