"""Cost per key of point ``get`` and batched ``get_many`` on one engine, from Python.

The store is filled with ``n_keys`` random u64 keys, closed and reopened
(so data sits in the engine's files, not only in a memtable or log), warmed
by one pass over every key, then timed: ``repeat`` passes over a random
sample of keys, each timed as a whole with ``time.perf_counter`` and the
garbage collector off.  Results are seconds per key; the best pass is the
figure least disturbed by the rest of the machine, the median is given too.
Every looked-up key exists (hits only).  The OS page cache is not dropped,
so this is the warm-cache cost of the binding plus the engine.
"""
from __future__ import annotations

import gc
import os
import random
import statistics
import time

from prefixbench.engines.conformance_child import open_store, resolve_engine
from prefixbench.errors import ConfigError

_FILL_BATCH = 256


def measure_engine(engine_name: str, path: str, n_keys: int = 100_000, value_size: int = 16,
                   batch: int = 32, cache_bytes: int = 64 << 20, direct_io: bool = False,
                   repeat: int = 5, sample: int = 50_000, seed: int = 0,
                   options: dict | None = None) -> dict:
    """Fill ``engine_name`` (registry name or ``module:Class``) at ``path`` and time reads.

    ``path`` must be missing or an empty directory: nothing there is deleted.
    """
    if n_keys < 1 or batch < 1 or repeat < 1 or value_size < 0:
        raise ConfigError("measure_engine: n_keys, batch and repeat must be >= 1, "
                          "value_size >= 0")
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise ConfigError(f"engine bench store path {path}: must be a new or empty directory")
    factory = resolve_engine(engine_name)
    config = dict(cache_bytes=cache_bytes, direct_io=direct_io, durability="async",
                  options=dict(options or {}))
    rng = random.Random(seed)
    unique: set[int] = set()
    while len(unique) < n_keys:
        unique.add(rng.getrandbits(64))
    keys = list(unique)
    values = {k: rng.randbytes(value_size) for k in keys}

    store = open_store(factory, path, **config)
    try:
        for i in range(0, n_keys, _FILL_BATCH):
            store.put_many((k, values[k]) for k in keys[i:i + _FILL_BATCH])
        store.sync()
        if not store.volatile:
            store.close()
            store = open_store(factory, path, **{**config, "create": False})
        probe = rng.sample(keys, min(sample, n_keys))
        batches = [probe[i:i + batch] for i in range(0, len(probe), batch)]
        # warm up, and check the answers once (outside the timed passes)
        for i in range(0, n_keys, 4096):
            chunk = keys[i:i + 4096]
            if store.get_many(chunk) != [values[k] for k in chunk]:
                raise RuntimeError(f"engine {engine_name} returned wrong values after reopen")
        get, get_many = store.get, store.get_many
        get_times, many_times = [], []
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(repeat):
                t0 = time.perf_counter()
                for k in probe:
                    get(k)
                get_times.append((time.perf_counter() - t0) / len(probe))
                t0 = time.perf_counter()
                for b in batches:
                    get_many(b)
                many_times.append((time.perf_counter() - t0) / len(probe))
        finally:
            if gc_was_enabled:
                gc.enable()
        size = store.size_on_disk()
        diagnostic = getattr(store, "diagnostic_build", False)
    finally:
        try:
            # a server-backed store outlives this process: leave no keys on the user's server
            if getattr(store, "drop", None) is not None:
                store.drop()
        finally:
            store.close()
    result = {
        "engine": engine_name,
        "n_keys": n_keys,
        "value_size": value_size,
        "batch": batch,
        "cache_bytes": cache_bytes,
        "direct_io": direct_io,
        "keys_per_pass": len(probe),
        "get_s_per_key": min(get_times),
        "get_s_per_key_median": statistics.median(get_times),
        "get_many_s_per_key": min(many_times),
        "get_many_s_per_key_median": statistics.median(many_times),
        "size_on_disk_bytes": size,
    }
    if diagnostic:
        result["note"] = "engine binding is a diagnostic build (assertions on): costs inflated"
    return result
