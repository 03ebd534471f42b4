"""payload-restore (Range, sections 2-3): the same bytes restored as N logical objects.

A fixed payload (default 1 GiB of seeded random bytes) is cut into N equal
objects (sweep 32, 128, 512, 1024), written once per path, then restored R
times with the page cache bypassed (O_DIRECT) or, where a path cannot bypass
it, dropped first (``posix_fadvise(DONTNEED)`` after an fsync).  Paths, side
by side in one run:

* ``seq``     - the device baseline: the payload as one file, read with
  O_DIRECT in stripe-sized requests (written once per run);
* ``files``   - one file per object, one open + read + close per object
  (the stock path);
* ``<engine>`` - any key-value engine (``lmdb``, ``rocksdb``, ``packfile``,
  ...) storing one value per object, restored with one ``get`` per object;
* ``stripes`` - ``packfile`` holding the payload as fixed stripes (32 MiB
  default) published as one range (:class:`~prefixbench.engines.packfile.
  StripeRanges`), each stripe stored so its bytes start on an aligned block;
  a restore is ticket lookup, claim, one native read per stripe straight
  into the destination buffer whatever N is, release (written once per
  run: the layout does not depend on N).

Every restore lands in one page-aligned destination buffer (the stand-in for
the GPU's paged KV), only up to the hit endpoint (``hit_bytes`` rounded down
to an object boundary, as a framework's reuse boundary would be; the stripe
path clips its last read there).  Timed: the restore only.  Then every
restored object is hashed (SHA-1) and compared with the payload's, so no
path can win by reading less.  Dropping happens before the
timer starts (engines that map their files are closed, dropped, reopened).
Per restore: seconds, native read calls and
bytes read as the kernel counts them for this process (``syscr`` and
``read_bytes`` in ``/proc/self/io``; memory-mapped engines fault pages in
without read calls, so their call count is 0 by construction), and host
time per object.  Single-threaded on every path.
"""
from __future__ import annotations

import hashlib
import math
import mmap
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

from prefixbench.harness.durable import write_file
from prefixbench.harness.errors import ConfigError, StoreError

DEFAULT_OBJECTS = (32, 128, 512, 1024)
DEFAULT_PATHS = ("seq", "files", "lmdb", "rocksdb", "packfile", "stripes")
ALIGN = 4096


@dataclass
class Restore:
    path: str
    objects: int
    restore: int
    seconds: float
    read_calls: int
    bytes_read: int
    restored_bytes: int
    per_object_us: float
    cache: str               # "direct" (bypassed) or "dropped"
    verified: bool


def _io_counters() -> tuple[int, int]:
    syscr = rbytes = 0
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("syscr:"):
                    syscr = int(line.split()[1])
                elif line.startswith("read_bytes:"):
                    rbytes = int(line.split()[1])
    except OSError:
        pass
    return syscr, rbytes


def _counter_overhead() -> tuple[int, int]:
    """Read calls that reading ``/proc/self/io`` itself costs (subtracted from each delta)."""
    a = _io_counters()
    b = _io_counters()
    return b[0] - a[0], b[1] - a[1]


def make_payload(nbytes: int, seed: int = 0) -> bytes:
    import numpy as np
    return np.random.default_rng(seed).bytes(nbytes)


def _drop_cache(path: str) -> None:
    """Evict every file under ``path`` from the page cache (fsync first: dirty pages stay)."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(r, f) for r, _d, fs in os.walk(path) for f in fs]
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ----- paths: each has write(payload, n) and restore(dest, n, end) -> cache mode ----------
class _SeqPath:
    """One file, O_DIRECT reads of ``stripe`` bytes: what the device gives one thread."""

    per_n = False

    def __init__(self, root, stripe, **_):
        self.file = os.path.join(root, "payload.bin")
        self.stripe = stripe

    def write(self, payload, n):
        write_file(self.file, payload)

    def restore(self, dest, n, end):
        fd = os.open(self.file, os.O_RDONLY | os.O_DIRECT)
        try:
            view = memoryview(dest)
            for off in range(0, end, self.stripe):
                os.preadv(fd, [view[off:min(end, off + self.stripe)]], off)
        finally:
            os.close(fd)
        return "direct"


class _FilesPath:
    """One file per object: open, read, close per object (the stock per-object path)."""

    per_n = True

    def __init__(self, root, cache_mode, **_):
        self.root = root
        self.direct = cache_mode == "direct"

    def write(self, payload, n):
        size = len(payload) // n
        for i in range(n):
            write_file(os.path.join(self.root, f"obj-{i:06d}"), payload[i * size:(i + 1) * size])

    def prepare(self):
        if not self.direct:
            _drop_cache(self.root)

    def restore(self, dest, n, end):
        size = len(dest) // n
        flags = os.O_RDONLY | (os.O_DIRECT if self.direct else 0)
        view = memoryview(dest)
        for i in range(end // size):
            fd = os.open(os.path.join(self.root, f"obj-{i:06d}"), flags)
            try:
                os.preadv(fd, [view[i * size:(i + 1) * size]], 0)
            finally:
                os.close(fd)
        return "direct" if self.direct else "dropped"


class _EnginePath:
    """A key-value engine, one value per object, one ``get`` per object on restore."""

    per_n = True

    def __init__(self, root, engine, cache_mode, pack_bytes, **_):
        from prefixbench.engines.conformance_child import resolve_engine
        self.factory = resolve_engine(engine)
        self.engine = engine
        self.root = os.path.join(root, "store")
        self.direct = cache_mode == "direct" and engine in ("rocksdb", "packfile")
        self.options = {"pack_bytes": pack_bytes} if engine == "packfile" else {}
        self.store = None

    def _open(self, create):
        from prefixbench.engines.conformance_child import open_store
        return open_store(self.factory, self.root, direct_io=self.direct, create=create,
                          durability="async", options=self.options)

    def write(self, payload, n):
        size = len(payload) // n
        store = self._open(True)
        try:
            for i in range(n):
                store.put(i, payload[i * size:(i + 1) * size])
            store.sync()
        finally:
            store.close()
        self.store = self._open(False)      # reopened: data in files, not memtables

    def prepare(self):
        """Pages a process has mapped (LMDB) survive fadvise: close, drop, reopen."""
        if not self.direct:
            self.store.close()
            _drop_cache(self.root)
            self.store = self._open(False)

    def restore(self, dest, n, end):
        size = len(dest) // n
        get = self.store.get
        for i in range(end // size):
            v = get(i)
            if v is None or len(v) != size:
                raise StoreError(f"payload restore: engine {self.engine} lost object {i}")
            dest[i * size:(i + 1) * size] = v
        return "direct" if self.direct else "dropped"

    def close(self):
        if self.store is not None:
            self.store.close()
            self.store = None


class _StripesPath:
    """packfile stripes behind Range tickets; reads per stripe whatever N is.

    The payload is published once as one range of tokens (``bytes_per_token``
    = gcd(stripe, every object size, 128 KiB) - 128 KiB is one token of
    Llama-3.1-8B KV); a restore is lookup -> claim -> one read per stripe,
    clipped at the hit endpoint -> release.
    """

    per_n = False

    def __init__(self, root, stripe, pack_bytes, per_token=128 << 10, **_):
        from prefixbench.engines.packfile import StripeRanges
        self.root = os.path.join(root, "packs")
        self.ranges = StripeRanges(self.root, stripe_bytes=stripe, bytes_per_token=per_token,
                                   pack_bytes=pack_bytes)
        self.store = self.ranges.store
        self.per_token = per_token
        self.tokens = None

    def write(self, payload, n):
        self.tokens = list(range(len(payload) // self.per_token))
        self.ranges.publish(self.tokens, payload)
        self.store.sync()

    def restore(self, dest, n, end):
        query = self.tokens[:end // self.per_token]
        ticket = self.ranges.lookup(query)
        if ticket is None or ticket.hit_bytes != end:
            raise StoreError("payload restore: the stripe range lost its published payload")
        try:
            ticket.claim(query)
            self.ranges.read(ticket, dest)
        finally:
            ticket.release()
        return "direct" if self.store.direct else "dropped"

    def close(self):
        self.ranges.close()


def _make_path(name, root, **kw):
    if name == "seq":
        return _SeqPath(root, **kw)
    if name == "files":
        return _FilesPath(root, **kw)
    if name == "stripes":
        return _StripesPath(root, **kw)
    return _EnginePath(root, engine=name, **kw)


def _check(payload_bytes, objects, stripe, hit_bytes, restores, cache_mode):
    if cache_mode not in ("direct", "drop"):
        raise ConfigError(f"option cache: {cache_mode!r} is not one of direct, drop")
    if restores < 1:
        raise ConfigError(f"option restores: {restores} must be >= 1")
    if stripe < ALIGN or stripe % ALIGN:
        raise ConfigError(f"option stripe: {stripe} must be a positive multiple of {ALIGN}")
    if payload_bytes < ALIGN or payload_bytes % ALIGN:
        raise ConfigError(f"option payload: {payload_bytes} must be a multiple of {ALIGN}")
    for n in objects:
        if n < 1 or payload_bytes % (n * ALIGN):
            raise ConfigError(f"option objects: {payload_bytes} bytes do not split into {n} "
                              f"objects of a multiple of {ALIGN} bytes")
    if hit_bytes is not None and not 0 < hit_bytes <= payload_bytes:
        raise ConfigError(f"option hit: {hit_bytes} must be in (0, {payload_bytes}]")


def run_payload(payload_bytes: int = 1 << 30, objects=DEFAULT_OBJECTS, paths=DEFAULT_PATHS,
                restores: int = 3, stripe: int = 32 << 20, hit_bytes: int | None = None,
                cache_mode: str = "direct", pack_bytes: int = 1 << 30, work_dir: str | None = None,
                seed: int = 0, progress=None) -> list[Restore]:
    """Run the sweep; returns one :class:`Restore` per (path, N, restore), in run order.

    ``work_dir`` must be missing or empty (default: a temporary directory,
    removed afterwards); each path's files are removed once it is measured.
    """
    objects = [int(n) for n in objects]
    _check(payload_bytes, objects, stripe, hit_bytes, restores, cache_mode)
    if not paths:
        raise ConfigError("option paths: give at least one path")
    from prefixbench.engines.conformance_child import resolve_engine
    for name in paths:
        if name not in ("seq", "files", "stripes"):
            resolve_engine(name)         # an unknown engine fails here, before any work
    if pack_bytes < stripe + 2 * ALIGN:
        raise ConfigError(f"option pack_bytes: {pack_bytes} cannot hold a {stripe}-byte stripe")
    own = work_dir is None
    if own:
        work_dir = tempfile.mkdtemp(prefix="prefixbench-payload-", dir=os.getcwd())
    elif os.path.exists(work_dir) and (not os.path.isdir(work_dir) or os.listdir(work_dir)):
        raise ConfigError(f"payload work dir {work_dir}: must be a new or empty directory")
    os.makedirs(work_dir, exist_ok=True)
    per_token = math.gcd(stripe, 128 << 10, *(payload_bytes // n for n in objects))
    payload = make_payload(payload_bytes, seed)
    dest = mmap.mmap(-1, payload_bytes)
    rows: list[Restore] = []
    once: dict = {}
    oc, ob = _counter_overhead()
    try:
        for n in objects:
            size = payload_bytes // n
            end = (hit_bytes or payload_bytes) // size * size
            if end == 0:
                raise ConfigError(f"option hit: {hit_bytes} bytes is less than one of the "
                                  f"{n} objects ({size} bytes)")
            want = [hashlib.sha1(payload[i * size:(i + 1) * size]).digest()
                    for i in range(end // size)]
            for name in paths:
                kw = dict(stripe=stripe, cache_mode=cache_mode, pack_bytes=pack_bytes,
                          per_token=per_token)
                path = once.get(name)
                try:
                    if path is None:
                        root = os.path.join(work_dir, f"{name}-n{n}")
                        os.makedirs(root)
                        path = _make_path(name, root, **kw)
                        if not path.per_n:
                            once[name] = path
                            path.root_dir = root
                        path.write(payload, n)
                    for r in range(restores):
                        if hasattr(path, "prepare"):
                            path.prepare()               # cache dropping is not timed
                        c0, b0 = _io_counters()
                        t0 = time.perf_counter()
                        mode = path.restore(dest, n, end)
                        secs = time.perf_counter() - t0
                        c1, b1 = _io_counters()
                        ok = all(hashlib.sha1(dest[i * size:(i + 1) * size]).digest() == h
                                 for i, h in enumerate(want))
                        rows.append(Restore(name, n, r + 1, secs, c1 - c0 - oc, b1 - b0 - ob, end,
                                            secs / (end // size) * 1e6, mode, ok))
                        dest[:end] = bytes(end)          # the next restore starts from zeros
                        if progress:
                            progress(rows[-1])
                finally:
                    if path is None or path.per_n:
                        if hasattr(path, "close"):
                            path.close()
                        shutil.rmtree(os.path.join(work_dir, f"{name}-n{n}"),
                                      ignore_errors=True)
    finally:
        for path in once.values():
            if hasattr(path, "close"):
                path.close()
        dest.close()
        if own:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            for path in once.values():
                shutil.rmtree(path.root_dir, ignore_errors=True)
    bad = [r for r in rows if not r.verified]
    if bad:
        raise StoreError(f"payload restore: {bad[0].path} with {bad[0].objects} objects "
                         f"restored bytes that differ from the payload")
    return rows


def summarize(rows: list[Restore]) -> dict:
    """Median restore seconds per (path, N); the stripes' flatness and bandwidth ratio."""
    med: dict = {}
    for r in rows:
        med.setdefault(r.path, {}).setdefault(r.objects, []).append(r)
    out = {"median_seconds": {}, "read_calls": {}, "gib_per_s": {}}
    for p, by_n in med.items():
        out["median_seconds"][p] = {n: statistics.median(x.seconds for x in v)
                                    for n, v in by_n.items()}
        out["read_calls"][p] = {n: statistics.median(x.read_calls for x in v)
                                for n, v in by_n.items()}
        out["gib_per_s"][p] = {n: statistics.median(x.restored_bytes / x.seconds / (1 << 30)
                                                    for x in v) for n, v in by_n.items()}
    st = out["median_seconds"].get("stripes")
    if st and len(st) > 1:
        out["stripes_spread"] = (max(st.values()) - min(st.values())) / min(st.values())
    if st and "seq" in out["gib_per_s"]:
        seq = statistics.median(out["gib_per_s"]["seq"].values())
        out["stripes_vs_seq"] = statistics.median(out["gib_per_s"]["stripes"].values()) / seq
    return out


def rows_as_dicts(rows):
    return [asdict(r) for r in rows]
