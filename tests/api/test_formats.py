"""Files written by another release: they open, or they are refused in one line
naming both format versions.

The fixtures in ``tests/fixtures/formats/`` were written by
``make_fixtures.py`` there (a snapshot per strategy with its packfile store,
a packfile store, a Range stripe layer) and are opened from a copy, since
opening writes.  Each current fixture must serve what ``expected.json``
says; the same fixture with its version field bumped (as a later release
would write it, checksums made valid) must be refused naming both versions.
The previous releases' packfile checkpoint (version 1: its checksum covers
the arrays only) and stripe snapshot (no version field) are made from the
current fixtures and must still open.  A strategy that keeps its data in a
store refuses the newer snapshot and rebuilds from the store, saying why.
"""
import hashlib
import json
import mmap
import os
import shutil
import struct
import warnings
import zlib

import numpy as np
import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.packfile import CKPT, PackfileStore
from prefixbench.errors import StoreError
from prefixbench.registry import get_registry
from prefixbench.snapshot import FORMAT_VERSION, SnapshotError, read_snapshot, snapshot_path

from fault_support import one_line

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "fixtures", "formats")
with open(os.path.join(HERE, "expected.json")) as _f:
    EXPECTED = json.load(_f)
QUERIES = [np.array(q, dtype=np.uint64) for q in EXPECTED["queries"]]
BOTH = f"this prefixbench reads version {FORMAT_VERSION}"


def copy(sub, tmp_path):
    dst = tmp_path / sub.replace("/", "-")
    shutil.copytree(os.path.join(HERE, sub), dst)
    return dst


def open_pack(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return PackfileStore(StoreConfig(path=str(path), create=False, durability="sync",
                                         options={"allow_buffered": True}, **kw))


def recover(name, d, notes=None):
    cls = get_registry().get("strategy", name).factory
    store = open_pack(d / "store") if cls.needs_store else None
    r = cls.recover(store, d, EXPECTED["snapshots"][name]["options"], durable_log=False,
                    notify=(notes.append if notes is not None else lambda line: None))
    return r, store


def answers(index):
    return [[int(m.n_blocks), np.asarray(m.metas).tobytes().hex()] for m in map(index.match,
                                                                               QUERIES)]


@pytest.mark.parametrize("name", sorted(EXPECTED["snapshots"]))
def test_the_current_snapshot_fixture_opens(tmp_path, name):
    d = copy(f"snapshots/{name}", tmp_path)
    r, store = recover(name, d)
    try:
        assert r.recovery["source"] == "snapshot"
        assert answers(r) == EXPECTED["snapshots"][name]["answers"]
    finally:
        if store is not None:
            store.close()


@pytest.mark.parametrize("name", sorted(EXPECTED["snapshots"]))
def test_a_newer_snapshot_is_refused_naming_both_versions(tmp_path, name):
    d = copy(f"snapshots/{name}", tmp_path)
    path = snapshot_path(d)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", FORMAT_VERSION + 1))
    with pytest.raises(SnapshotError) as e:
        read_snapshot(d, name)
    one_line(str(e.value), path, f"format version {FORMAT_VERSION + 1}", BOTH)
    cls = get_registry().get("strategy", name).factory
    notes = []
    if cls.rebuild_from_store:
        r, store = recover(name, d, notes)
        try:
            assert r.recovery["source"] == "store-rebuild"
            assert f"format version {FORMAT_VERSION + 1}" in notes[0] and BOTH in notes[0]
            assert answers(r) == EXPECTED["snapshots"][name]["answers"]
        finally:
            store.close()
    else:
        with pytest.raises(SnapshotError) as e:
            recover(name, d, notes)
        one_line(str(e.value), path, f"format version {FORMAT_VERSION + 1}", BOTH)


def expected_values():
    return {int(k): bytes.fromhex(v) for k, v in EXPECTED["packfile"].items()}


def test_the_current_packfile_fixture_opens(tmp_path):
    want = expected_values()
    with open_pack(copy("packfile", tmp_path)) as s:
        assert s.get_many(list(want)) == list(want.values())
        assert sorted(k for k, _ in s.scan()) == sorted(want)


def test_a_newer_packfile_store_is_refused_naming_both_versions(tmp_path):
    d = copy("packfile", tmp_path)
    meta = d / "packfile.meta"
    doc = json.loads(meta.read_text())
    body = {k: doc[k] for k in ("format", "version", "pack_bytes", "block", "uuid")}
    body["version"] += 1
    doc = dict(body, crc=zlib.crc32(json.dumps(body, sort_keys=True).encode()))
    meta.write_text(json.dumps(doc, sort_keys=True) + "\n")
    with pytest.raises(StoreError) as e:
        open_pack(d)
    one_line(str(e.value), d, f"format version {body['version']}",
             f"this prefixbench reads version {body['version'] - 1}")


def _ckpt(d):
    data = (d / CKPT).read_bytes()
    magic, ver, seq, count, _crc = struct.unpack_from("<8sIQQI", data)
    return data, magic, ver, seq, count


def test_the_previous_checkpoint_format_opens_and_a_newer_one_is_refused(tmp_path):
    d = copy("packfile", tmp_path)
    data, magic, ver, seq, count = _ckpt(d)
    body = data[32:]
    # version 1, as the previous release wrote it: the checksum covers the arrays only
    (d / CKPT).write_bytes(struct.pack("<8sIQQI", magic, 1, seq, count, zlib.crc32(body)) + body)
    want = expected_values()
    with open_pack(d) as s:
        assert s.get_many(list(want)) == list(want.values())
        s.put(99, b"new")                   # and it closes with the current version
    data, magic, new_ver, seq, count = _ckpt(d)
    assert new_ver == ver
    fields = struct.pack("<8sIQQ", magic, ver + 1, seq, count)
    body = data[32:]
    (d / CKPT).write_bytes(fields + struct.pack("<I", zlib.crc32(body, zlib.crc32(fields)))
                           + body)
    with pytest.raises(StoreError) as e:
        open_pack(d)
    one_line(str(e.value), d, CKPT, f"format version {ver + 1}", f"versions 1 to {ver}")


def open_ranges(path):
    from prefixbench.engines.stripes import StripeRanges
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return StripeRanges(str(path), stripe_bytes=8 << 10, bytes_per_token=1024,
                            pack_bytes=64 << 10, allow_buffered=True)


def read_range(d):
    r = open_ranges(d)
    try:
        n = EXPECTED["ranges"]["tokens"]
        t = r.lookup(range(n))
        t.claim(range(n))
        dest = mmap.mmap(-1, n * 1024)
        r.read(t, dest)
        t.release()
        return hashlib.sha256(dest[:]).hexdigest()
    finally:
        r.close()


def test_the_current_and_previous_stripe_snapshots_open(tmp_path):
    d = copy("ranges", tmp_path)
    assert read_range(d) == EXPECTED["ranges"]["sha256"]
    snap = d / "ranges.snapshot"
    doc = json.loads(snap.read_text())
    doc.pop("version")                  # the previous release wrote no version field
    snap.write_text(json.dumps(doc))
    assert read_range(d) == EXPECTED["ranges"]["sha256"]


def test_a_newer_stripe_snapshot_is_refused_naming_both_versions(tmp_path):
    d = copy("ranges", tmp_path)
    snap = d / "ranges.snapshot"
    doc = json.loads(snap.read_text())
    doc["version"] += 1
    snap.write_text(json.dumps(doc))
    with pytest.raises(StoreError) as e:
        open_ranges(d)
    one_line(str(e.value), d, f"format version {doc['version']}",
             f"this prefixbench reads version {doc['version'] - 1}")
