"""The pre-flight memory estimate of a redis-server store follows the engine's layout."""
from __future__ import annotations

from prefixbench.harness import preflight as pf


def test_packed_layout_estimates_less_server_memory_while_buckets_are_listpacks():
    n = 10**7
    hash_ = pf.strategy_memory_bytes("ssd-blockhash", "redis", n)
    assert hash_ == pf.strategy_memory_bytes("ssd-blockhash", "redis", n,
                                             engine_options={"layout": "hash"})
    packed = pf.strategy_memory_bytes("ssd-blockhash", "redis", n,
                                      engine_options={"layout": "packed", "pack_bits": "17"})
    assert hash_ - packed == n * (pf.SERVER_MEMORY_BYTES_PER_BLOCK["redis"]
                                  - pf.PACKED_SERVER_MEMORY_BYTES_PER_BLOCK)
    # 2**16 buckets (the default) cannot keep 1e7 entries as listpacks of at most 128:
    # the hash layout's figure; at 1e6 they can
    full = pf.strategy_memory_bytes("ssd-blockhash", "redis", n,
                                    engine_options={"layout": "packed"})
    assert full == hash_
    assert pf.server_memory_bytes_per_block("redis", 10**6, {"layout": "packed"}) == 65.0
    # the cluster has no packed layout; a bad pack_bits is left to the engine to refuse
    assert pf.server_memory_bytes_per_block("redis-cluster", n, {"layout": "packed"}) == 430.0
    assert pf.server_memory_bytes_per_block("redis", 10**6, {"layout": "packed",
                                                              "pack_bits": "x"}) == 65.0
    assert pf.server_memory_bytes_per_block("lmdb", n) is None


def test_recover_need_takes_the_engine_options():
    a = pf.recover_need(10**6, "redis-blockhash", "redis", cache_bytes=0)
    b = pf.recover_need(10**6, "redis-blockhash", "redis", cache_bytes=0,
                        engine_options={"layout": "packed"})
    assert a.memory - b.memory == 10**6 * (215.0 - 65.0)
