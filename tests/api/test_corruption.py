"""Every byte of a small snapshot, for every strategy: flipped one at a time, and
the file cut at every length.

Two generations are published (the insert log, or the store, covers what
came after each), then the newest snapshot is damaged.  Every case must be
refused by the reader in one line naming the file (checksum, version,
length), and a recovery from the damaged directory must come from the
previous generation and answer every query exactly as the index that wrote
it did.  Nothing is served from a damaged file and nothing crashes.

The reader runs on every case.  Recovery (a full rebuild, the slow part)
runs on every 23rd flipped byte (and the version and header-length fields)
and every 29th cut length by default, on every case with ``PREFIXBENCH_LONG=1``.  Each test prints
its counts (``pytest -s``).
"""
import os

import numpy as np
import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.memory import MemoryStore
from prefixbench.metas import make_metas
from prefixbench.registry import get_registry
from prefixbench.snapshot import SnapshotError, read_snapshot, snapshot_path

from fault_support import LONG, scratch_dir
STRATEGIES = ["radix", "dram-blockhash", "ssd-blockhash", "sarp", "segment-hash",
              "segment-radix", "segment-radix-capped", "sparse-state"]
OPTS = {"sarp": {"S": 8, "R": 2, "backfill": "sync", "tau": 4, "pruning_threshold": 1,
                 "max_retrieval": 0},
        "segment-hash": {"S": 8}, "segment-radix": {"S": 8},
        "segment-radix-capped": {"S": 8, "cap_nodes": 3},
        "sparse-state": {"policy": "end", "budget": 4}}
WHY = ("checksum", "truncated", "version", "magic", "missing", "header", "trailing",
       "padding", "offset", "unreadable")


def seqs():
    rng = np.random.default_rng(3)
    out = []
    for i in range(6):
        tail = rng.integers(1, 1 << 63, size=int(rng.integers(2, 12)), dtype=np.uint64)
        if out and i % 2:
            tail = np.concatenate([out[-1][:5], tail])
        out.append(tail)
    return out


def build(name, d):
    """Two published generations of ``name`` plus the log or store after each;
    returns (class, store, the writer's answers)."""
    cls = get_registry().get("strategy", name).factory
    store = MemoryStore(StoreConfig()) if cls.needs_store else None
    s = cls(store, OPTS.get(name, {}))
    s.enable_log(d)
    qs = seqs()
    for i, q in enumerate(qs):
        s.insert(q, make_metas(q, i))
        if i in (1, 3):
            s.snapshot(d)
    want = [(m.n_blocks, np.asarray(m.metas).tobytes()) for m in map(s.match, qs)]
    if s._log is not None:
        s._log.close()                  # the store stays open for the recoveries
    return cls, store, want


def cases(data: bytes):
    """(label, damaged bytes, whether recovery runs on it by default)."""
    hlen = 20 + int.from_bytes(data[12:16], "little")      # prefix, header, its crc
    for i in range(len(data)):
        b = bytearray(data)
        b[i] ^= 0xFF
        yield f"flip {i}", bytes(b), LONG or i % 23 == 0 or i in (8, 12, hlen - 2)
    for n in range(len(data)):
        yield f"cut {n}", data[:n], LONG or n % 29 == 0


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_byte_of_a_snapshot(tmp_path, capsys, name):
    with scratch_dir(tmp_path) as d:
        every_byte(d, capsys, name)


def every_byte(tmp_path, capsys, name):
    cls, store, want = build(name, tmp_path)
    path = str(snapshot_path(tmp_path))
    with open(path, "rb") as f:
        good = f.read()
    qs = seqs()
    counts = {"cases": 0, "refused": 0, "recovered": 0}
    try:
        for label, bad, recover_it in cases(good):
            with open(path, "wb") as f:
                f.write(bad)
            counts["cases"] += 1
            with pytest.raises(SnapshotError) as e:
                read_snapshot(tmp_path, name)
            msg = str(e.value)
            assert "\n" not in msg and path in msg and any(w in msg for w in WHY), (label, msg)
            counts["refused"] += 1
            if not recover_it:
                continue
            r = cls.recover(store, tmp_path, OPTS.get(name, {}), durable_log=False, quiet=True)
            assert r.recovery["source"] == "previous-snapshot", (label, r.recovery)
            got = [(m.n_blocks, np.asarray(m.metas).tobytes()) for m in map(r.match, qs)]
            assert got == want, label
            if r._log is not None:
                r._log.close()
            counts["recovered"] += 1
    finally:
        with open(path, "wb") as f:
            f.write(good)
    assert counts["refused"] == counts["cases"] == 2 * len(good)
    with capsys.disabled():
        print(f"\ncorruption, {name} snapshot ({len(good)} bytes): {counts['cases']} cases, "
              f"{counts['refused']} refused in one line, {counts['recovered']} recovered "
              f"from the previous generation (of those tried), 0 served wrong")


def test_a_bumped_version_names_both_versions(tmp_path):
    build("radix", tmp_path)
    path = snapshot_path(tmp_path)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write((2).to_bytes(4, "little"))
    with pytest.raises(SnapshotError, match="format version 2, this prefixbench reads "
                                            "version 1"):
        read_snapshot(tmp_path, "radix")
