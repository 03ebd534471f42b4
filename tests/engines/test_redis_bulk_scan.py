"""The redis engine's bulk scan (``scan_arrays``) against its reference, the per-key
``scan()``: the same items in the same order, over both layouts, ranges and chunk sizes."""
from __future__ import annotations

import random

import numpy as np
import pytest
import redis

from prefixbench.engines.base import MAX_KEY, StoreConfig
from prefixbench.engines.redis import SCAN_BULK_MAX, RedisStore, take_rows
from prefixbench.engines.redis_cluster import RedisClusterStore
from prefixbench.errors import ConfigError, StoreError

from redis_support import cluster_always, redis_always  # noqa: F401 - fixtures

LAYOUTS = [{"layout": "hash"}, {"layout": "packed", "pack_bits": 5},
           {"layout": "packed", "pack_bits": 10}]


@pytest.fixture(params=LAYOUTS, ids=lambda o: "-".join(map(str, o.values())))
def store(request, tmp_path, redis_always):
    s = RedisStore(StoreConfig(path=str(tmp_path / "store"), durability="off",
                               options={"url": redis_always.url, **request.param}))
    yield s
    s.drop()
    s.close()


@pytest.mark.parametrize("buckets", [1, 16])
def test_cluster_bulk_scan_equals_the_per_key_scan(tmp_path, cluster_always, buckets):
    s = RedisClusterStore(StoreConfig(path=str(tmp_path / "store"), durability="off",
                                      options={"url": cluster_always.url,
                                               "buckets": buckets}))
    try:
        assert list(s.scan_arrays()) == []
        _fill(s, _random_items(6, 3000).items())
        for start, end in RANGES:
            want = list(s.scan(start, end))
            for chunk in (None, 29):
                assert _flat(s.scan_arrays(start, end, chunk)) == want, (start, end, chunk)
        with pytest.raises(ConfigError, match="scan chunk"):
            s.scan_arrays(0, None, SCAN_BULK_MAX + 1)
    finally:
        s.drop()
        s.close()


def _fill(store, items) -> None:
    items = list(items)
    for i in range(0, len(items), 4000):
        store.write_items(items[i:i + 4000])


def _flat(chunks) -> list[tuple[int, bytes]]:
    """The chunks as the per-key items they stand for (checking each chunk's shape)."""
    out = []
    for keys, values, lengths in chunks:
        assert keys.dtype == np.uint64 and lengths.dtype == np.uint32
        assert len(keys) == len(lengths) > 0 and isinstance(values, bytes)
        assert int(lengths.sum()) == len(values)
        ends = np.cumsum(lengths.astype(np.int64))
        starts = ends - lengths
        out += [(int(k), values[a:b]) for k, a, b in zip(keys, starts, ends)]
    return out


def _random_items(seed: int, n: int, widths=range(0, 40)) -> dict[int, bytes]:
    rng = random.Random(seed)
    items = {rng.getrandbits(64): rng.randbytes(rng.choice(widths)) for _ in range(n)}
    items[0] = b"first"
    items[MAX_KEY] = b"last"
    return items


RANGES = [(0, None), (1, MAX_KEY), (5, 1 << 63), (1 << 62, (1 << 62) + (1 << 59)),
          (MAX_KEY, None), (1 << 40, 1 << 40), (1 << 50, 7)]


@pytest.mark.parametrize("chunk", [None, 13, 4096])
def test_bulk_scan_equals_the_per_key_scan(store, chunk):
    _fill(store, _random_items(1, 6000).items())
    for start, end in RANGES:
        want = list(store.scan(start, end))
        assert _flat(store.scan_arrays(start, end, chunk)) == want, (start, end)


def test_one_entry_chunks(store):
    _fill(store, _random_items(4, 300).items())
    want = list(store.scan())
    assert _flat(store.scan_arrays(0, None, 1)) == want
    lo, hi = want[100][0], want[140][0]
    assert _flat(store.scan_arrays(lo, hi, 1)) == want[100:140]


def test_fixed_width_values_and_an_empty_store(store):
    assert list(store.scan_arrays()) == []
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 1 << 63, 5000, dtype=np.uint64) * 2)
    metas = rng.integers(0, 256, (len(keys), 16), dtype=np.uint8)
    _fill(store, zip(keys.tolist(), (m.tobytes() for m in metas)))
    chunks = list(store.scan_arrays(chunk=700))
    got_keys = np.concatenate([c[0] for c in chunks])
    assert np.array_equal(got_keys, keys)
    assert all((c[2] == 16).all() for c in chunks)
    assert b"".join(c[1] for c in chunks) == metas.tobytes()
    assert _flat(chunks) == list(store.scan())


@pytest.mark.parametrize("shape", ["dense", "clustered"])
def test_uneven_key_density_keeps_order_and_loses_nothing(store, shape):
    """The hash layout sizes its pipelined key ranges from the density seen so far;
    keys packed far tighter than that estimate (a range fuller than a call) must
    neither be skipped nor come twice."""
    rng = random.Random(5)
    if shape == "dense":
        keys = list(range(1500))
    else:
        keys = [rng.getrandbits(64) for _ in range(300)]
        keys += [(1 << 63) + i for i in range(1500)]           # a dense cluster mid-way
        keys += [MAX_KEY - i for i in range(50)]
    _fill(store, ((k, b"%d" % (k % 1000)) for k in keys))
    want = list(store.scan())
    assert len(want) == len(set(keys))
    for chunk in (7, 64, 1000):
        assert _flat(store.scan_arrays(0, None, chunk)) == want


def test_bulk_scan_sees_deletes_and_overwrites(store):
    items = _random_items(9, 2000, widths=[16])
    _fill(store, items.items())
    keys = sorted(items)
    store.write_items([(keys[3], b"new value")], keys[10:400])
    assert _flat(store.scan_arrays()) == list(store.scan())
    assert len(_flat(store.scan_arrays())) == len(keys) - 390


def test_bad_arguments_are_one_line(store):
    with pytest.raises(ConfigError, match="scan chunk: 0 must be between 1 and"):
        store.scan_arrays(0, None, 0)
    with pytest.raises(ValueError, match="scan start: -1 is not an unsigned 64-bit key"):
        store.scan_arrays(-1)
    with pytest.raises(ValueError, match="scan end"):
        store.scan_arrays(0, 1 << 64)


def test_a_foreign_member_is_one_store_error(tmp_path, redis_always):
    """Something else wrote a member that is not an 8-byte key into the store's keys."""
    for opts in LAYOUTS[:2]:
        s = RedisStore(StoreConfig(path=str(tmp_path / opts["layout"]), durability="off",
                                   options={"url": redis_always.url, **opts}))
        try:
            s.put(5, b"v")
            r = redis.Redis.from_url(redis_always.url)
            if s.layout == "hash":
                r.hset(s._vkey, b"abc", b"v")
                r.zadd(s._zkey, {b"abc": 0})
            else:
                r.hset(s._bucket_key(5), b"abc", b"v")
            with pytest.raises(StoreError, match=r"redis .*not 8 bytes"):
                list(s.scan_arrays())
        finally:
            s.drop()
            s.close()


def test_take_rows_gathers_variable_length_values():
    rng = random.Random(2)
    vals = [rng.randbytes(rng.randrange(0, 9)) for _ in range(300)]
    keys = np.arange(300, dtype=np.uint64)[::-1].copy()
    lengths = np.array([len(v) for v in vals], dtype=np.uint32)
    order = np.array(sorted(range(300), key=lambda i: (i * 37) % 300)[:250])
    k, v, ln = take_rows(keys, b"".join(vals), lengths, order)
    assert k.tolist() == keys[order].tolist()
    assert ln.tolist() == [len(vals[i]) for i in order]
    assert v == b"".join(vals[i] for i in order)
