"""Device faults under the engines.

packfile: its pack writes and reads, fsyncs, key log and checkpoint go
through the fault seam, so ENOSPC, EIO and a short write (then a full
device) are injected at every call of a small run, in ``sync`` and ``async``
durability.  Each failed call is one line naming the store; the open store
keeps serving exactly the acknowledged batches, and so does a reopen.

RocksDB, LMDB and WiredTiger write from C, past the seam: they get ENOSPC
from a size-limited tmpfs (mounting needs root, as CI runs; elsewhere they
skip with one line).  After the device fills, the tmpfs is grown and the
store reopened: every acknowledged batch is there, the failed one is not.
Each test prints its count of fault points (``pytest -s``);
``PREFIXBENCH_LONG=1`` makes the runs longer.
"""
import os
import random
import shutil
import subprocess
import warnings

import pytest

from prefixbench import faults
from prefixbench.engines.base import StoreConfig
from prefixbench.engines.packfile import PackfileStore
from prefixbench.errors import StoreError
from prefixbench.registry import get_registry

from fault_support import LONG, SHM, scratch_dir
KiB = 1 << 10


def batches(n):
    """Puts (mostly overwrites) and deletes over a few large values, and every fourth
    batch a wide one of small values: enough to fill 64 KiB packs, checkpoint
    mid-run and clean a pack."""
    rng = random.Random(5)
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(([(100 + j, bytes([i]) * 8) for j in range(120)], []))
            continue
        puts = [(rng.randrange(12), bytes([i]) * rng.randrange(2 * KiB, 14 * KiB))
                for _ in range(rng.randrange(1, 4))]
        dels = [rng.randrange(12)] if i % 3 == 2 else []
        out.append((puts, [k for k in dels if k not in {p[0] for p in puts}]))
    return out


N_BATCHES = 40 if LONG else 12
KEYS = list(range(12)) + list(range(100, 220))


def open_pack(d, durability, create=True):
    """A store of small packs; under /dev/shm (the default run: tmpfs makes every
    fsync free) with buffered I/O, on disk with O_DIRECT."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return PackfileStore(StoreConfig(path=str(d), durability=durability, create=create,
                                         options={"pack_bytes": 64 * KiB, "max_packs": 3,
                                                  "checkpoint_bytes": 4 * KiB,
                                                  "allow_buffered": str(d).startswith(SHM)}))



@pytest.fixture
def scratch(tmp_path):
    """Where the every-point loops run: tmpfs by default (every fsync free), the disk
    (O_DIRECT, a real fsync per batch: minutes) with PREFIXBENCH_LONG=1."""
    with scratch_dir(tmp_path) as d:
        yield d


def read_all(s, errors):
    """Every key's value; a read the fault hit is one line and is retried once."""
    for _ in range(2):
        try:
            return s.get_many(KEYS)
        except StoreError as e:
            errors.append(str(e))
    raise AssertionError("a second read failed: the fault fires once")


def pack_run(d, durability, kind=None, at=0):
    model, errors = {}, []
    ctx = faults.inject(kind, at, "packfile") if kind else faults.count("packfile")
    with ctx as plan:
        try:
            s = open_pack(d, durability)
        except StoreError as e:
            return model, [str(e)], plan
        for puts, dels in batches(N_BATCHES):
            try:
                s.write_items(puts, dels)
                model.update(puts)
                for k in dels:
                    model.pop(k, None)
            except StoreError as e:
                errors.append(str(e))
            assert read_all(s, errors) == [model.get(k) for k in KEYS]
        try:
            s.close()
        except StoreError as e:
            errors.append(str(e))
    return model, errors, plan


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_packfile_at_every_fault_point(scratch, capsys, durability):
    tmp_path = scratch
    _, errors, c = pack_run(tmp_path / "count", durability)
    assert not errors
    tried = 0
    for kind in faults.KINDS:
        for n in range(1, c.calls + 1):
            d = tmp_path / f"{kind}-{n}"
            model, errors, plan = pack_run(d, durability, kind, n)
            tried += plan.fired
            for e in errors:
                assert "\n" not in e and str(d) in e, e
            if not os.path.exists(d / "packfile.meta"):
                continue                      # the store was never created
            with open_pack(d, durability, create=False) as s:
                assert s.get_many(KEYS) == [model.get(k) for k in KEYS], (kind, n, plan.hit)
            shutil.rmtree(d)
    assert tried == c.calls * len(faults.KINDS)
    with capsys.disabled():
        print(f"\nfault points, packfile pwrite/pread/fsync/log ({durability}): {tried} "
              f"({c.calls} calls x {len(faults.KINDS)} kinds)")


def test_short_direct_write_continues_aligned(tmp_path):
    """On disk with O_DIRECT: the rest of a short pack write goes on at an aligned
    offset (or the batch fails in one line), and what was acknowledged reads back."""
    with open_pack(tmp_path / "s", "sync") as s:
        assert s.direct
        s.put(1, b"x" * 100)
        with faults.inject("short", 1, "packfile", "pwrite") as plan:
            with pytest.raises(StoreError, match="No space left") as e:
                s.put_many([(2, b"y" * 9000), (3, b"z" * 20)])
        assert plan.fired and "\n" not in str(e.value)
        s.put(4, b"w" * 9000)
        assert s.get_many([1, 2, 3, 4]) == [b"x" * 100, None, None, b"w" * 9000]
    with open_pack(tmp_path / "s", "sync", create=False) as s:
        assert s.get_many([1, 2, 3, 4]) == [b"x" * 100, None, None, b"w" * 9000]


def test_short_read_is_one_line_never_stale_bytes(tmp_path):
    with open_pack(tmp_path / "s", "sync") as s:
        s.put(1, b"a" * 5000)
        s.put(2, b"b" * 5000)
        assert s.get(1) == b"a" * 5000            # fills the reused read buffer
        with faults.inject("short", 1, "packfile", "pread"):
            with pytest.raises(StoreError, match="short read") as e:
                s.get(2)
        assert str(tmp_path) in str(e.value) and s.get(2) == b"b" * 5000


def test_a_checkpoint_failing_after_the_commit_keeps_the_batch(tmp_path):
    d = tmp_path / "s"
    items = [(k, bytes([k]) * 100) for k in range(10)]
    with open_pack(d, "sync") as s:
        with faults.inject("ENOSPC", 1, "packfile", "rename", path="index.ckpt") as plan:
            for _ in range(40):               # the log outgrows checkpoint_bytes
                s.put_many(items)
        assert plan.fired and s.checkpoint_error and "\n" not in s.checkpoint_error
    with open_pack(d, "sync", create=False) as s:
        assert s.get_many(range(10)) == [v for _, v in items]


# ----------------------------------------------------------------------------- C engines
C_ENGINES = ["lmdb", "rocksdb", "wiredtiger"]


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MiB tmpfs at ``tmp_path/fs``, grown to 64 MiB by calling the returned function."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def grow():
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
    try:
        yield mnt, grow
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def engine_cls(name):
    try:
        return get_registry().get("engine", name).factory
    except Exception as e:          # a missing binding: one line naming it
        pytest.skip(f"engine {name}: {str(e).splitlines()[0]}")


def fill(cls, path):
    """Sync-mode batches of incompressible values until the device is full."""
    s = cls(StoreConfig(path=str(path), durability="sync", cache_bytes=1 << 20))
    acked, failed, err, calls = {}, None, None, 0
    for i in range(4000):
        items = [(i * 8 + j, os.urandom(4000)) for j in range(4)]
        calls += 1
        try:
            s.write_items(items)
            acked.update(items)
        except Exception as e:
            failed, err = dict(items), e
            break
    return s, acked, failed, err, calls


def close_quietly(s):
    try:
        s.close()
    except Exception:
        pass                        # closing a store that hit a full device may fail too


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", C_ENGINES)
def test_enospc_loses_no_acknowledged_batch(small_fs, capsys, name):
    mnt, grow = small_fs
    cls = engine_cls(name)
    s, acked, failed, err, calls = fill(cls, mnt / name)
    # space comes back before the store closes: RocksDB's close waits for its
    # background recovery from a no-space error, which needs room to finish
    grow()
    close_quietly(s)
    assert err is not None and acked, "the device never filled"
    assert "\n" not in str(err)
    s = cls(StoreConfig(path=str(mnt / name), durability="sync", create=False))
    try:
        got = s.get_many(sorted(acked))
        assert got == [acked[k] for k in sorted(acked)]
        assert s.get_many(sorted(failed)) in ([None] * len(failed),
                                              [failed[k] for k in sorted(failed)])
        s.put(1 << 40, b"after")                  # and it takes writes again
        assert s.get(1 << 40) == b"after"
    finally:
        s.close()
    with capsys.disabled():
        print(f"\nfault points, {name} ENOSPC from a full tmpfs: 1 (after {calls - 1} "
              f"acknowledged batches)")
    assert isinstance(err, StoreError), f"{name}: {type(err).__name__} {err}"
    assert str(mnt / name) in str(err), err


# ----------------------------------------------------------------------------- RocksDB stalls
class _StallingDB:
    """A rocksdict handle whose writes stall (as RocksDB's ``no_slowdown`` reports a
    stop) for the first ``n`` calls, then pass through."""

    def __init__(self, db, n, stopped=1):
        self._db, self.n, self.stopped, self.calls = db, n, stopped, 0

    def _stall(self, opts):
        self.calls += 1
        if self.calls <= self.n:
            assert opts is not None and opts.no_slowdown, "a write sent that could hang"
            raise Exception("Result incomplete: Write stall")

    def write(self, batch, opts=None):
        self._stall(opts)
        return self._db.write(batch, opts)

    def put(self, key, value, opts=None):
        self._stall(opts)
        return self._db.put(key, value, opts)

    def property_int_value(self, name):
        assert name == "rocksdb.is-write-stopped"
        return self.stopped

    def __getattr__(self, name):
        return getattr(self._db, name)


def _rocksdb(path, **options):
    cls = engine_cls("rocksdb")
    return cls(StoreConfig(path=str(path), durability="sync",
                           options={k: str(v) for k, v in options.items()}))


@pytest.mark.parametrize("items", [
    [(7, b"after the stall")],                      # a lone record goes as a put
    [(7, b"after the stall"), (8, b"and its pair")],        # more as one batch
])
@pytest.mark.parametrize("stalls,stopped,calls", [
    (5, 1, 6),      # stopped: retried until it goes
    (1, 0, 2),      # only slowed: sent again the ordinary way, taking RocksDB's delay
])
def test_a_stalled_rocksdb_write_goes_through(tmp_path, stalls, stopped, calls, items):
    s = _rocksdb(tmp_path / "r")
    try:
        real = s._db
        s._db = _StallingDB(real, stalls, stopped)
        s.put_many(items)
        assert s._db.calls == calls
        s._db = real
        assert s.get_many([k for k, _ in items]) == [v for _, v in items]
    finally:
        s.close()


def test_a_rocksdb_write_stopped_past_the_deadline_is_one_line_and_keeps_the_rest(tmp_path):
    s = _rocksdb(tmp_path / "r", write_stall_seconds=1)
    try:
        s.put(1, b"acknowledged")
        real = s._db
        s._db = _StallingDB(real, 10 ** 9)
        with pytest.raises(StoreError) as e:
            s.put(2, b"never written")
        msg = str(e.value)
        assert "\n" not in msg and str(tmp_path / "r") in msg and "stalled for 1 s" in msg
        s._db = real
        assert s.get_many([1, 2]) == [b"acknowledged", None]
    finally:
        s.close()


def test_write_stall_seconds_is_checked(tmp_path):
    from prefixbench.errors import ConfigError
    with pytest.raises(ConfigError, match="write_stall_seconds"):
        _rocksdb(tmp_path / "r", write_stall_seconds=0)
