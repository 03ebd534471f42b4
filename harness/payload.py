"""payload-restore (Range, sections 2-3): the same bytes restored as N logical objects.

A fixed payload (default 1 GiB of seeded random bytes) is cut into N equal
objects (sweep 32, 128, 512, 1024, plus the ``layerwise`` point), written
once per path, then restored R times with the page cache bypassed (O_DIRECT)
or, where a path cannot bypass it, dropped first (``posix_fadvise(DONTNEED)``
after an fsync).  Paths, side by side in one run:

* ``seq``     - the device baseline: the payload as one file, read with
  O_DIRECT in stripe-sized requests (written once per run);
* ``files``   - one file per object, one open + read + close per object
  (the stock path);
* ``<engine>`` - any key-value engine (``lmdb``, ``rocksdb``, ``packfile``,
  ...) storing one value per object, restored with one ``get`` per object;
* ``stripes`` - ``packfile`` holding the payload as fixed stripes (32 MiB
  default) published as one range (:class:`~prefixbench.engines.stripes.
  StripeRanges`), each stripe stored so its bytes start on an aligned block;
  a restore is ticket lookup, claim, one native read per stripe (admitted
  through a read bank) straight into the destination buffer whatever N is,
  release (written once per run: the layout does not depend on N).

**The layerwise point** (paper 2.1, 5.2): with layerwise loading the unit
is one chunk of one layer, so a 32-layer model turns each chunk into 32
objects of ``layer_object`` bytes (1 MiB: a 256-token chunk of Llama-3.1-8B
is 32 MiB, 1 MiB per layer).  The payload is then read as the model's
per-layer KV, ``[layer][token][bytes]`` (vLLM keeps one paged KV tensor per
layer), so object (chunk c, layer l) is the 1 MiB at ``l * payload/L + c *
1 MiB``.  Objects are requested **layer-major** (every chunk of layer 0,
then layer 1, ...): that is the order a layerwise loader needs them in,
since attention for layer l waits for all of layer l's tokens and for
nothing of later layers; each path reports a readiness event when the last
object (or stripe) of a layer has landed.  The stripe path stores this
point's range with Range's layout (3.3): each layer's slice cut into its
own stripes, so a layer is ready after ``ceil(payload/L / stripe)`` reads
and the read count is still the number of stripes (payload/stripe when
stripes divide layers), not the number of objects.  A partial hit clips
every layer at the same chunk boundary.

**Order and fairness.**  Everything is written first (per-object paths keep
one copy per object size, so the disk holds paths x distinct sizes x the
payload at once).  One untimed warm-up restore per (path, point) follows
(kept as pyperf warmups), then R rounds; each round visits every point once,
rotating the point order and the path order from round to round
(round-robin), with ``seq`` and ``stripes`` always run back to back, so the
stripes' time can be read against a device baseline measured adjacent in
time (``stripes_vs_adjacent_seq``).

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
without read calls, so their call count is 0 by construction), host time
per object and layer readiness events.  Single-threaded on every path (the
stripe path issues its reads from one read worker).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

from prefixbench.durable import write_file
from prefixbench.errors import ConfigError, StoreError

DEFAULT_OBJECTS = (32, 128, 512, 1024, "layerwise")
LAYERWISE = "layerwise"
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
    point: str = ""          # "32", ..., or "layerwise"
    layer_events: int = 0    # per-layer readiness events (layerwise point)
    seq_no: int = 0          # position in the run's timed order


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


# ----- sweep points ----------------------------------------------------------------
@dataclass
class Point:
    """One point of the sweep: which objects a restore asks for, in which order."""

    label: str               # "32" or "layerwise"
    n: int                   # objects the payload is cut into
    size: int                # bytes per object
    layers: int              # 1, or L for the layerwise point
    order: list              # object indices (contiguous slices of ``size``) in request order
    layer_of: list           # the layer each requested object belongs to
    extents: list            # (offset, length) byte extents the restore covers, per layer
    hit_chunks: int = 0      # layerwise: chunks per layer restored

    @property
    def restored(self) -> int:
        return len(self.order) * self.size


def _points(payload_bytes, objects, hit_bytes, layers, layer_object) -> list[Point]:
    out = []
    for o in objects:
        if o == LAYERWISE:
            per_layer = payload_bytes // layers
            cpl = per_layer // layer_object                     # chunks per layer
            hit = hit_bytes or payload_bytes
            k = min(cpl, hit // (layers * layer_object))        # chunk boundary, every layer
            if k == 0:
                raise ConfigError(f"option hit: {hit_bytes} bytes is less than one chunk of "
                                  f"{layers} layers x {layer_object} bytes")
            order = [l * cpl + c for l in range(layers) for c in range(k)]
            out.append(Point(LAYERWISE, payload_bytes // layer_object, layer_object, layers,
                             order, [i // cpl for i in order],
                             [(l * per_layer, k * layer_object) for l in range(layers)], k))
        else:
            n = int(o)
            size = payload_bytes // n
            end = (hit_bytes or payload_bytes) // size * size
            if end == 0:
                raise ConfigError(f"option hit: {hit_bytes} bytes is less than one of the "
                                  f"{n} objects ({size} bytes)")
            out.append(Point(str(n), n, size, 1, list(range(end // size)),
                             [0] * (end // size), [(0, end)]))
    return out


# ----- paths: each has write(payload, size) and restore(dest, point, on_layer) -> cache mode
def _per_object(dest, point, on_layer, read_one):
    """Restore ``point``'s objects in order with ``read_one(index, view)``; layer events."""
    size, view = point.size, memoryview(dest)
    last = len(point.order) - 1
    for j, i in enumerate(point.order):
        read_one(i, view[i * size:(i + 1) * size])
        if point.layers > 1 and (j == last or point.layer_of[j + 1] != point.layer_of[j]):
            on_layer(point.layer_of[j])


class _SeqPath:
    """One file, O_DIRECT reads of ``stripe`` bytes: what the device gives one thread."""

    per_n = False

    def __init__(self, root, stripe, **_):
        self.file = os.path.join(root, "payload.bin")
        self.stripe = stripe

    def write(self, payload, size):
        write_file(self.file, payload)

    def restore(self, dest, point, on_layer):
        fd = os.open(self.file, os.O_RDONLY | os.O_DIRECT)
        try:
            view = memoryview(dest)
            for layer, (start, length) in enumerate(point.extents):
                end = start + length
                for off in range(start, end, self.stripe):
                    os.preadv(fd, [view[off:min(end, off + self.stripe)]], off)
                if point.layers > 1:
                    on_layer(layer)
        finally:
            os.close(fd)
        return "direct"


class _FilesPath:
    """One file per object: open, read, close per object (the stock per-object path)."""

    per_n = True

    def __init__(self, root, cache_mode, **_):
        self.root = root
        self.direct = cache_mode == "direct"

    def write(self, payload, size):
        for i in range(len(payload) // size):
            write_file(os.path.join(self.root, f"obj-{i:06d}"), payload[i * size:(i + 1) * size])

    def prepare(self):
        if not self.direct:
            _drop_cache(self.root)

    def restore(self, dest, point, on_layer):
        flags = os.O_RDONLY | (os.O_DIRECT if self.direct else 0)
        root = self.root

        def one(i, view):
            fd = os.open(os.path.join(root, f"obj-{i:06d}"), flags)
            try:
                os.preadv(fd, [view], 0)
            finally:
                os.close(fd)

        _per_object(dest, point, on_layer, one)
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

    def write(self, payload, size):
        store = self._open(True)
        try:
            for i in range(len(payload) // size):
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

    def restore(self, dest, point, on_layer):
        size, get = point.size, self.store.get

        def one(i, view):
            v = get(i)
            if v is None or len(v) != size:
                raise StoreError(f"payload restore: engine {self.engine} lost object {i}")
            view[:] = v

        _per_object(dest, point, on_layer, one)
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
    clipped at the hit endpoint -> release.  With a layerwise point in the
    sweep the payload is published a second time, in its own directory (a
    separate namespace: the layout differs), as ``layers`` per-layer slices
    of tokens of ``gcd(stripe, layer object, payload/L, 4 KiB)`` bytes per
    layer (4 KiB: Llama-3.1-8B's per-layer token, paper 3.3), each layer's
    slice cut into its own stripes.
    """

    per_n = False

    def __init__(self, root, stripe, pack_bytes, per_token=128 << 10, layers=1,
                 layer_object=1 << 20, layered=False, banks=8, **_):
        from prefixbench.engines.stripes import StripeRanges
        self.root, self.stripe, self.pack_bytes = root, stripe, pack_bytes
        self.per_token, self.banks = per_token, banks
        self.ranges = StripeRanges(os.path.join(root, "packs"), stripe_bytes=stripe,
                                   bytes_per_token=per_token, pack_bytes=pack_bytes, banks=banks)
        self.store = self.ranges.store
        self.layers, self.layer_object = layers, layer_object
        self.layered = None
        self._want_layered = layered
        self.tokens = self.ltokens = None

    def write(self, payload, size):
        self.tokens = list(range(len(payload) // self.per_token))
        self.ranges.publish(self.tokens, payload)
        self.store.sync()
        if self._want_layered:
            from prefixbench.engines.stripes import StripeRanges
            L = self.layers
            sl = math.gcd(self.stripe, self.layer_object, len(payload) // L, 4096)
            self.layered = StripeRanges(os.path.join(self.root, "layered"),
                                        stripe_bytes=self.stripe, bytes_per_token=sl * L,
                                        pack_bytes=self.pack_bytes, layers=L, banks=self.banks)
            self.ltokens = list(range(len(payload) // (sl * L)))
            self.layered.publish(self.ltokens, payload)
            self.layered.store.sync()

    def restore(self, dest, point, on_layer):
        if point.layers > 1:
            ranges = self.layered
            per_layer_tokens = point.size // ranges.per_layer_token
            query = self.ltokens[:point.hit_chunks * per_layer_tokens]
            stride = point.n * point.size // point.layers
            want = len(query) * ranges.per_token
        else:
            ranges, stride = self.ranges, None
            want = point.restored
            query = self.tokens[:want // self.per_token]
        ticket = ranges.lookup(query)
        if ticket is None or ticket.hit_bytes != want:
            raise StoreError("payload restore: the stripe range lost its published payload")
        try:
            ticket.claim(query)
            ranges.read(ticket, dest, on_layer=on_layer if point.layers > 1 else None,
                        layer_stride=stride)
        finally:
            ticket.release()
        return "direct" if self.store.direct else "dropped"

    def close(self):
        self.ranges.close()
        if self.layered is not None:
            self.layered.close()


def _make_path(name, root, **kw):
    if name == "seq":
        return _SeqPath(root, **kw)
    if name == "files":
        return _FilesPath(root, **kw)
    if name == "stripes":
        return _StripesPath(root, **kw)
    return _EnginePath(root, engine=name, **kw)


def _parse_objects(objects) -> list:
    out = []
    for o in objects:
        if isinstance(o, str) and o.strip().lower() == LAYERWISE:
            out.append(LAYERWISE)
            continue
        try:
            out.append(int(o))
        except (TypeError, ValueError):
            raise ConfigError(f"option objects: {o!r} is neither an object count nor "
                              f"{LAYERWISE!r}") from None
    if not out:
        raise ConfigError("option objects: give at least one object count")
    return out


def _check(payload_bytes, objects, stripe, hit_bytes, restores, cache_mode, layers,
           layer_object):
    if cache_mode not in ("direct", "drop"):
        raise ConfigError(f"option cache: {cache_mode!r} is not one of direct, drop")
    if restores < 1:
        raise ConfigError(f"option restores: {restores} must be >= 1")
    if stripe < ALIGN or stripe % ALIGN:
        raise ConfigError(f"option stripe: {stripe} must be a positive multiple of {ALIGN}")
    if payload_bytes < ALIGN or payload_bytes % ALIGN:
        raise ConfigError(f"option payload: {payload_bytes} must be a multiple of {ALIGN}")
    for n in objects:
        if n == LAYERWISE:
            if layers < 1 or layer_object < ALIGN or layer_object % ALIGN \
                    or payload_bytes % (layers * layer_object):
                raise ConfigError(f"option layers/layer_object: {payload_bytes} bytes do not "
                                  f"split into {layers} layers of {layer_object}-byte objects "
                                  f"(a multiple of {ALIGN})")
        elif n < 1 or payload_bytes % (n * ALIGN):
            raise ConfigError(f"option objects: {payload_bytes} bytes do not split into {n} "
                              f"objects of a multiple of {ALIGN} bytes")
    if hit_bytes is not None and not 0 < hit_bytes <= payload_bytes:
        raise ConfigError(f"option hit: {hit_bytes} must be in (0, {payload_bytes}]")


def _round_order(points, paths, r):
    """Round ``r``'s (point, path) visits: rotated points and paths, seq beside stripes."""
    pts = points[r % len(points):] + points[:r % len(points)]
    units, seen = [], set()
    for name in paths:
        if name in seen:
            continue
        if name in ("seq", "stripes") and "seq" in paths and "stripes" in paths:
            pair = ["seq", "stripes"] if r % 2 == 0 else ["stripes", "seq"]
            units.append(pair)
            seen.update(pair)
        else:
            units.append([name])
            seen.add(name)
    k = r % len(units)
    units = units[k:] + units[:k]
    return [(pt, name) for pt in pts for unit in units for name in unit]


def check_payload(payload_bytes, objects, paths, restores, stripe, hit_bytes, cache_mode,
                  pack_bytes, work_dir, layers, layer_object, force=False) -> tuple[list, list]:
    """Every option of :func:`run_payload` checked - one :class:`ConfigError` line for
    the first bad one, before anything is written; returns the parsed object counts
    and the sweep's points.  Then the pre-flight: the payload must fit on the disk
    of the work directory and in memory (:mod:`prefixbench.harness.preflight`),
    unless ``force``."""
    objects = _parse_objects(objects)
    _check(payload_bytes, objects, stripe, hit_bytes, restores, cache_mode, layers,
           layer_object)
    if not paths:
        raise ConfigError("option paths: give at least one path")
    from prefixbench.engines.conformance_child import resolve_engine
    for name in paths:
        if name not in ("seq", "files", "stripes"):
            resolve_engine(name)         # an unknown engine fails here, before any work
    if pack_bytes < stripe + 2 * ALIGN:
        raise ConfigError(f"option pack_bytes: {pack_bytes} cannot hold a {stripe}-byte stripe")
    if work_dir is not None and os.path.exists(work_dir) and (
            not os.path.isdir(work_dir) or os.listdir(work_dir)):
        raise ConfigError(f"payload work dir {work_dir}: must be a new or empty directory")
    points = _points(payload_bytes, objects, hit_bytes, layers, layer_object)
    from prefixbench.harness import preflight
    preflight.check_payload(payload_bytes, paths, len({p.size for p in points}), pack_bytes,
                            work_dir=work_dir, force=force)
    return objects, points


def run_payload(payload_bytes: int = 1 << 30, objects=DEFAULT_OBJECTS, paths=DEFAULT_PATHS,
                restores: int = 3, stripe: int = 32 << 20, hit_bytes: int | None = None,
                cache_mode: str = "direct", pack_bytes: int = 1 << 30, work_dir: str | None = None,
                seed: int = 0, progress=None, layers: int = 32, layer_object: int = 1 << 20,
                warmup: bool = True, warmups: list | None = None,
                force: bool = False) -> list[Restore]:
    """Run the sweep; returns one :class:`Restore` per timed (path, point, restore), in
    run order.  ``warmups``, if a list, receives the untimed warm-up restores (one per
    path and point, unverified; ``progress`` sees them too, with ``restore`` 0).

    ``work_dir`` must be missing or empty (default: a temporary directory,
    removed afterwards); every path's files are removed at the end.
    """
    objects, points = check_payload(payload_bytes, objects, paths, restores, stripe, hit_bytes,
                                    cache_mode, pack_bytes, work_dir, layers, layer_object,
                                    force)
    flat = [p.size for p in points if p.layers == 1]
    per_token = math.gcd(stripe, 128 << 10, *flat) if flat else ALIGN
    payload = make_payload(payload_bytes, seed)
    dest = mmap.mmap(-1, payload_bytes)
    import numpy as np
    zero = [np.frombuffer(dest, dtype=np.uint8)]     # dropped before dest is closed
    hashes = {}                            # (size, index) -> sha1 of the payload's object

    def want(point):
        out = []
        for i in point.order:
            h = hashes.get((point.size, i))
            if h is None:
                h = hashes[point.size, i] = hashlib.sha1(
                    payload[i * point.size:(i + 1) * point.size]).digest()
            out.append(h)
        return out

    rows: list[Restore] = []
    made: dict = {}                        # (path, size or None) -> path object
    oc, ob = _counter_overhead()
    kw = {"stripe": stripe, "cache_mode": cache_mode, "pack_bytes": pack_bytes,
          "per_token": per_token, "layers": layers, "layer_object": layer_object,
          "layered": any(p.layers > 1 for p in points)}

    def path_for(name, point):
        for key in ((name, None), (name, point.size)):
            if key in made:
                return made[key]
        raise AssertionError(name)

    def restore_once(name, point, timed, seq_no):
        path = path_for(name, point)
        if hasattr(path, "prepare"):
            path.prepare()                               # cache dropping is not timed
        events = []
        c0, b0 = _io_counters()
        t0 = time.perf_counter()
        mode = path.restore(dest, point, events.append)
        secs = time.perf_counter() - t0
        c1, b1 = _io_counters()
        ok = True
        if timed:
            size, view = point.size, memoryview(dest)
            ok = all(hashlib.sha1(view[i * size:(i + 1) * size]).digest() == h
                     for i, h in zip(point.order, want(point)))
            ok = ok and events == (list(range(point.layers)) if point.layers > 1 else [])
        zero[0][:] = 0                                   # the next restore starts from zeros
        row = Restore(name, point.n, 0, secs, c1 - c0 - oc, b1 - b0 - ob, point.restored,
                      secs / len(point.order) * 1e6, mode, ok, point.label, len(events), seq_no)
        return row

    own = work_dir is None               # made last: nothing between here and the
    if own:                              # try below can fail and leave it behind
        work_dir = tempfile.mkdtemp(prefix="prefixbench-payload-", dir=os.getcwd())
    os.makedirs(work_dir, exist_ok=True)
    try:
        for name in paths:                               # write everything first
            sizes = [None] if name in ("seq", "stripes") else \
                sorted({p.size for p in points}, reverse=True)
            for size in sizes:
                root = os.path.join(work_dir, f"{name}-{size or 'once'}")
                os.makedirs(root)
                path = _make_path(name, root, **kw)
                made[name, size] = path
                path.write(payload, size or payload_bytes)
        if warmup:
            for pt, name in _round_order(points, paths, 0):
                row = restore_once(name, pt, False, 0)
                if warmups is not None:
                    warmups.append(row)
                if progress:
                    progress(row)
        count: dict = {}
        for r in range(restores):
            for pt, name in _round_order(points, paths, r):
                row = restore_once(name, pt, True, len(rows) + 1)
                count[name, pt.label] = row.restore = count.get((name, pt.label), 0) + 1
                rows.append(row)
                if progress:
                    progress(row)
    finally:
        zero.clear()
        for path in made.values():
            if hasattr(path, "close"):
                with contextlib.suppress(Exception):     # cleanup must reach every path
                    path.close()
        dest.close()
        if own:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            for name, size in made:
                shutil.rmtree(os.path.join(work_dir, f"{name}-{size or 'once'}"),
                              ignore_errors=True)
    bad = [r for r in rows if not r.verified]
    if bad:
        raise StoreError(f"payload restore: {bad[0].path} with {bad[0].point} objects "
                         f"restored bytes that differ from the payload")
    return rows


def _spread(values) -> float:
    return (max(values) - min(values)) / min(values)


def summarize(rows: list[Restore]) -> dict:
    """Median and min restore seconds per (path, point); the stripes' flatness, raw and
    against the ``seq`` restore measured next to each stripes restore; bandwidth ratio.

    Keys of the per-path dicts are object counts (int) for the numeric points
    and ``"layerwise"``; spreads cover the numeric points only.
    """
    by: dict = {}
    for r in rows:
        key = r.objects if r.point != LAYERWISE else LAYERWISE
        by.setdefault(r.path, {}).setdefault(key, []).append(r)
    out = {"median_seconds": {}, "min_seconds": {}, "read_calls": {}, "gib_per_s": {},
           "bytes_read": {}, "us_per_object": {}, "layer_events": {}}
    for p, by_n in by.items():
        for field, f in (("median_seconds", lambda v: statistics.median(x.seconds for x in v)),
                         ("min_seconds", lambda v: min(x.seconds for x in v)),
                         ("read_calls", lambda v: statistics.median(x.read_calls for x in v)),
                         ("bytes_read", lambda v: statistics.median(x.bytes_read for x in v)),
                         ("us_per_object", lambda v: statistics.median(x.per_object_us
                                                                      for x in v)),
                         ("layer_events", lambda v: max(x.layer_events for x in v)),
                         ("gib_per_s", lambda v: statistics.median(
                             x.restored_bytes / x.seconds / (1 << 30) for x in v))):
            out[field][p] = {n: f(v) for n, v in by_n.items()}
    st = {n: v for n, v in out["median_seconds"].get("stripes", {}).items() if n != LAYERWISE}
    if len(st) > 1:
        out["stripes_spread"] = _spread(list(st.values()))
        out["stripes_spread_min"] = _spread([v for n, v in out["min_seconds"]["stripes"].items()
                                             if n != LAYERWISE])
    if "stripes" in by and "seq" in by:
        seqbw = statistics.median(out["gib_per_s"]["seq"].values())
        out["stripes_vs_seq"] = statistics.median(out["gib_per_s"]["stripes"].values()) / seqbw
        # each stripes restore against the seq restore of the same point and round (adjacent)
        seq_at = {(r.point, r.restore): r for r in rows if r.path == "seq"}
        ratio: dict = {}
        for r in rows:
            s = seq_at.get((r.point, r.restore)) if r.path == "stripes" else None
            if s is not None:
                key = r.objects if r.point != LAYERWISE else LAYERWISE
                ratio.setdefault(key, []).append(r.seconds / s.seconds)
        out["stripes_over_adjacent_seq"] = {n: statistics.median(v) for n, v in ratio.items()}
        flat = [v for n, v in out["stripes_over_adjacent_seq"].items() if n != LAYERWISE]
        if len(flat) > 1:
            out["stripes_spread_vs_adjacent_seq"] = _spread(flat)
        if flat:
            out["stripes_vs_adjacent_seq"] = 1 / statistics.median(flat)
    return out


def rows_as_dicts(rows):
    return [asdict(r) for r in rows]


def write_pyperf(output: str, rows: list[Restore], warmups: list[Restore] | None = None,
                 config: dict | None = None) -> tuple[str, str]:
    """``OUT.json``: one benchmark per path x point (``restore-<path>-n<N>`` or
    ``restore-<path>-layerwise``), one value per timed restore in seconds (the
    warm-up restore as a pyperf warmup); ``OUT.counts.json``: native read
    calls, bytes read, host microseconds per object and layer events per
    restore.  Values of 0 (read calls of a memory-mapped engine) are left out:
    pyperf refuses them.  Returns both paths."""
    from prefixbench.harness.pyperf_io import counts_path, write_suite
    times, counts = payload_benchmarks(rows, warmups, config)
    cpath = counts_path(output)
    write_suite(output, times)
    write_suite(cpath, counts)
    return output, cpath


def _tag(path: str, point: str) -> str:
    return f"{path}-{'layerwise' if point == LAYERWISE else 'n' + point}"


def payload_benchmarks(rows: list[Restore], warmups: list[Restore] | None = None,
                       config: dict | None = None) -> tuple[list, list]:
    """(time, count) benchmarks of :func:`write_pyperf`; the metadata ``payload_points``
    gives each ``<path>-<point>`` its objects, restored bytes and cache mode."""
    from prefixbench.harness.pyperf_io import (collecting_zeros, run_metadata, value_runs,
                                               with_zeros)
    md = {k: v for k, v in run_metadata("none", None, "payload-restore", config or {}).items()
          if v not in ("", None)}
    warm = {(w.path, w.point): w.seconds for w in warmups or ()}
    by: dict = {}
    for r in rows:
        by.setdefault((r.path, r.point), []).append(r)
    md["payload_points"] = json.dumps({_tag(p, n): [rs[0].objects, rs[0].restored_bytes,
                                                    rs[0].cache]
                                       for (p, n), rs in by.items()}, separators=(",", ":"))

    def bench(name, unit, values, warmup=None):
        """The benchmark, or its name when every value was 0 (listed as a zero)."""
        with collecting_zeros() as zeros:
            b = value_runs(name, unit, values, md, warmup)
        return zeros[0] if zeros else b

    times, counts = [], []
    for (path, point), rs in by.items():
        tag = _tag(path, point)
        times.append(bench(f"restore-{tag}", "second", [r.seconds for r in rs],
                           warm.get((path, point))))
        counts.append(bench(f"read-calls-{tag}", "integer", [r.read_calls for r in rs]))
        counts.append(bench(f"bytes-read-{tag}", "byte", [r.bytes_read for r in rs]))
        counts.append(bench(f"host-us-per-object-{tag}", "integer",
                            [r.per_object_us for r in rs]))
        if point == LAYERWISE:
            counts.append(bench(f"layer-events-{tag}", "integer", [r.layer_events for r in rs]))
    zeros = [n for n in (b if isinstance(b, str) else None for b in times + counts) if n]
    times = [b for b in times if b and not isinstance(b, str)]
    counts = [b for b in counts if b and not isinstance(b, str)]
    return with_zeros(times, zeros), with_zeros(counts, zeros)
