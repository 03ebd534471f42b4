"""Writer process for the kill -9 durability test of the conformance kit.

``python -m prefixbench.engines.conformance_child ENGINE PATH ACK --seed S
--start N --config JSON`` opens ENGINE (a registry name or ``module:Class``)
at PATH and writes numbered batches N, N+1, ... forever.  After each batch
call returns it appends the batch number to ACK and fsyncs it, so an
acknowledged batch is one the engine reported as written.  The parent kills
this process with SIGKILL and checks every acknowledged batch.

Kept free of pytest so it starts fast and works in any environment.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys

KEYS_PER_BATCH = 16
_MASK = (1 << 64) - 1


def resolve_engine(spec: str):
    """``module:attr`` import path, else an engine name looked up in the registry."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    from prefixbench.registry import get_registry
    return get_registry().get("engine", spec).factory


def open_store(factory, path, **config):
    """Open a store from an engine class (given a StoreConfig) or a (path, **config) callable."""
    from prefixbench.engines.base import SegmentStore, StoreConfig
    if isinstance(factory, type) and issubclass(factory, SegmentStore):
        return factory(StoreConfig(path=None if path is None else str(path), **config))
    return factory(path, **config)


def _mix64(x: int) -> int:
    """splitmix64 finaliser: a bijection, so distinct inputs give distinct keys."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def batch_items(seed: int, n: int) -> list[tuple[int, bytes]]:
    """Deterministic keys (spread over all 64 bits) and values (0..300 bytes) of batch n."""
    items = []
    for i in range(KEYS_PER_BATCH):
        key = _mix64((seed << 40) ^ (n * KEYS_PER_BATCH + i))
        d = hashlib.blake2b(f"{seed}/{n}/{i}".encode(), digest_size=64).digest()
        length = int.from_bytes(d[:2], "little") % 301
        items.append((key, (d * (length // 64 + 1))[:length]))
    return items


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("engine")
    p.add_argument("path")
    p.add_argument("ack")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--max-batches", type=int, default=10_000_000)
    p.add_argument("--config", default="{}", help="StoreConfig fields as JSON")
    args = p.parse_args(argv)
    store = open_store(resolve_engine(args.engine), args.path, **json.loads(args.config))
    fd = os.open(args.ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for n in range(args.start, args.start + args.max_batches):
        store.write_items(batch_items(args.seed, n))
        os.write(fd, b"%d\n" % n)
        os.fsync(fd)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
