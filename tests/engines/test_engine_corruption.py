"""Every byte of the packfile engine's checkpoint and key log, and of a Range
stripe-index snapshot: flipped one at a time, and each file cut at every length.

* checkpoint (``index.ckpt``): every flip and every cut is refused in one line
  naming the store (checksum, version, length); there is one generation,
  and opening on a guessed map could serve wrong values.
* key log (``index.log``, as an unclean stop leaves it): every flip is refused
  in one line (a committed frame that fails its checks is corruption, not a
  torn append); a cut is what a torn append looks like, so the store opens
  at the last complete batch before the cut - exactly that earlier state,
  never a mix.
* stripe-index snapshot (``ranges.snapshot``): every flip and cut is refused in
  one line.

Each test prints its counts (``pytest -s``).  The loops run on tmpfs by
default and on the disk with ``PREFIXBENCH_LONG=1``.
"""
import mmap
import os
import random
import shutil
import subprocess
import sys
import warnings

import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.packfile import CKPT, LOG, PackfileStore
from prefixbench.errors import StoreError

from fault_support import SHM, one_line, scratch_dir

KiB = 1 << 10
PACK_OPTS = {"pack_bytes": 64 * KiB, "checkpoint_bytes": 1 << 20}


def open_pack(d, create=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return PackfileStore(StoreConfig(path=str(d), durability="sync", create=create,
                                         options=dict(PACK_OPTS,
                                                      allow_buffered=str(d).startswith(SHM))))


BATCHES = [([(1, b"one"), (2, b"two" * 50)], []), ([(3, b"three")], [1]),
           ([(2, b"TWO"), (4, b"four" * 9)], []), ([(5, b"five")], [3])]
KEYS = [1, 2, 3, 4, 5]


def state_after(k):
    m = {}
    for puts, dels in BATCHES[:k]:
        m.update(puts)
        for key in dels:
            m.pop(key, None)
    return [m.get(key) for key in KEYS]


def flips_and_cuts(data):
    for i in range(len(data)):
        b = bytearray(data)
        b[i] ^= 0xFF
        yield f"flip {i}", bytes(b), None
    for n in range(len(data)):
        yield f"cut {n}", data[:n], n


@pytest.fixture
def scratch(tmp_path):
    with scratch_dir(tmp_path) as d:
        yield d


def test_every_byte_of_a_packfile_checkpoint(scratch, capsys):
    d = scratch / "s"
    with open_pack(d, create=True) as s:
        for puts, dels in BATCHES:
            s.write_items(puts, dels)
    path = d / CKPT
    good = path.read_bytes()
    counts = dict(cases=0, refused=0)
    try:
        for label, bad, _ in flips_and_cuts(good):
            path.write_bytes(bad)
            counts["cases"] += 1
            with pytest.raises(StoreError) as e:
                open_pack(d).close()
            one_line(str(e.value), d, CKPT)
            assert any(w in str(e.value) for w in ("checksum", "version", "length",
                                                    "truncated", "magic")), (label, e.value)
            counts["refused"] += 1
    finally:
        path.write_bytes(good)
    with open_pack(d) as s:
        assert s.get_many(KEYS) == state_after(len(BATCHES))
    assert counts["refused"] == counts["cases"] == 2 * len(good)
    with capsys.disabled():
        print(f"\ncorruption, packfile checkpoint ({len(good)} bytes): {counts['cases']} cases, "
              f"{counts['refused']} refused in one line, 0 served wrong")


CRASH = """
import os, sys, warnings
warnings.simplefilter("ignore")
from prefixbench.engines.base import StoreConfig
from prefixbench.engines.packfile import PackfileStore
s = PackfileStore(StoreConfig(path=sys.argv[1], durability="sync", options={
    "pack_bytes": 65536, "checkpoint_bytes": 1 << 20, "allow_buffered": sys.argv[2] == "1"}))
for puts, dels in %r:
    s.write_items(puts, dels)
os._exit(0)                     # an unclean stop: the log holds every batch
"""


def test_every_byte_of_a_packfile_key_log(scratch, capsys):
    pristine = scratch / "pristine"
    subprocess.run([sys.executable, "-c", CRASH % (BATCHES,), str(pristine),
                    "1" if str(pristine).startswith(SHM) else "0"], check=True)
    assert not (pristine / CKPT).exists()
    good = (pristine / LOG).read_bytes()
    frame_ends, pos = [], 0
    while pos < len(good):                       # frame sizes, from their headers
        pos += 28 + int.from_bytes(good[pos + 24:pos + 28], "little")
        frame_ends.append(pos)
    assert len(frame_ends) == len(BATCHES)
    counts = dict(cases=0, refused=0, opened_at_an_earlier_batch=0)
    d = scratch / "case"
    for label, bad, cut in flips_and_cuts(good):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(pristine, d)
        (d / LOG).write_bytes(bad)
        counts["cases"] += 1
        if cut is None:
            with pytest.raises(StoreError) as e:
                open_pack(d).close()
            one_line(str(e.value), d, LOG, "corrupt")
            counts["refused"] += 1
            continue
        k = sum(end <= cut for end in frame_ends)
        with open_pack(d) as s:
            assert s.get_many(KEYS) == state_after(k), label
        counts["opened_at_an_earlier_batch"] += 1
    assert counts["refused"] == len(good) and counts["cases"] == 2 * len(good)
    with capsys.disabled():
        print(f"\ncorruption, packfile key log ({len(good)} bytes, {len(BATCHES)} frames): "
              f"{counts['cases']} cases, {counts['refused']} flips refused in one line, "
              f"{counts['opened_at_an_earlier_batch']} cuts opened at the last complete "
              f"batch before the cut, 0 served wrong")


def ranges(d):
    from prefixbench.engines.stripes import StripeRanges
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return StripeRanges(str(d), stripe_bytes=8 * KiB, bytes_per_token=1024,
                            pack_bytes=64 * KiB, allow_buffered=str(d).startswith(SHM))


def test_every_byte_of_a_stripe_index_snapshot(scratch, capsys):
    d = scratch / "r"
    data = random.Random(4).randbytes(24 * 1024)
    r = ranges(d)
    r.publish(range(24), data)
    r.publish(list(range(10)) + [99, 98], data[:10 * 1024] + data[:2 * 1024])
    r.close()
    path = d / "ranges.snapshot"
    good = path.read_bytes()
    counts = dict(cases=0, refused=0)
    try:
        for label, bad, _ in flips_and_cuts(good):
            path.write_bytes(bad)
            counts["cases"] += 1
            with pytest.raises(StoreError) as e:
                ranges(d).close()
            one_line(str(e.value), d, "ranges.snapshot")
            counts["refused"] += 1
    finally:
        path.write_bytes(good)
    r = ranges(d)
    t = r.lookup(range(24))
    t.claim(range(24))
    dest = mmap.mmap(-1, len(data))
    r.read(t, dest)
    assert dest[:] == data
    t.release()
    r.close()
    assert counts["refused"] == counts["cases"] == 2 * len(good)
    with capsys.disabled():
        print(f"\ncorruption, stripe-index snapshot ({len(good)} bytes): {counts['cases']} "
              f"cases, {counts['refused']} refused in one line, 0 served wrong")
