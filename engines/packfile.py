"""``packfile``: records in preallocated pack files, read and written with O_DIRECT.

No storage library: the store directory holds

* ``packfile.meta`` - JSON identity (format, version, pack size, alignment,
  store uuid) with a CRC of its own fields;
* ``pack-NNNNNN.pack`` - pack files of exactly ``pack_bytes`` (default 1 GiB),
  preallocated with ``posix_fallocate``.  Block 0 is a checksummed header
  naming the store and the pack number; records follow.  Each batch is
  written as one *extent* (records back to back, zero-padded to the
  alignment) with a single ``pwritev`` from a page-aligned ``mmap`` buffer;
* ``index.log`` - the durable key -> location structure: one checksummed
  frame per batch (sequence number, the puts' new locations, the deletes).
  A batch is committed when its frame is in the log, so a batch is all or
  nothing after kill -9; a torn frame at the tail is cut off on reopen;
* ``index.ckpt`` - a compact checkpoint of the whole map (NumPy arrays of
  keys, offsets, lengths), written at clean close and whenever the log outgrows
  ``checkpoint_bytes``; the log is then emptied.  Reopen = load the
  checkpoint + replay the (short) log tail, never a scan of the packs.

A record is ``magic u32, crc32 u32, key u64, length u32`` + value; the CRC
covers key, length and value, so a torn or corrupted record is detected: a
read treats it as missing and never returns it.

**Alignment.**  Every pack read and write is aligned to ``block`` =
max(device logical block size from ``/sys/dev/block/MAJ:MIN/.../queue``,
filesystem block size from ``os.statvfs().f_bsize``, 4096): 4 KiB here
(512 B logical, 4 KiB ext4 blocks), which also avoids read-modify-write.

**Direct I/O.**  Packs are always opened with ``O_DIRECT`` (``direct_io`` is
implied; this engine exists to measure the raw path).  A filesystem that
refuses it (EINVAL at open) or silently ignores it (tmpfs accepts unaligned
O_DIRECT reads: probed at open) is reported in one line; the store then opens
with buffered I/O only with ``options={"allow_buffered": True}``.  The index
log and checkpoint are small metadata files written through the page cache.

**Durability.**  ``sync``: the touched packs and the log are fdatasync'ed per
batch.  ``async``: extents are written with O_DIRECT and the frame with
``write()`` before the call returns (survives kill -9).  ``off``: frames are
buffered in memory (up to 1 MiB) and written at ``sync``/close.

**Space.**  An overwritten or deleted record is dead space.  A pack with no
live record is reused (after its freeing frames are in the log).  When the
append head fills, a pack whose live bytes are at most half of it is
cleaned: its live records are copied (one committed relocation batch) and
the pack reused.  One empty pack (or one not yet created, under
``max_packs``) is kept as the cleaning destination; when neither new packs
nor cleaning can make room, the batch fails with "pack area full" and
nothing stored changes.  ``size_on_disk`` counts allocated blocks, so it
includes the preallocated packs.

There is no engine-side cache: ``cache_bytes`` is not used, every ``get``
is a device read (the point of the engine).  Batch reads coalesce records
that are close in a pack and issue the spans from a small thread pool.
One open store per directory (``index.log`` is flock'ed).  Reopen cost, 1M
keys of 16 B on this 2-CPU VM: ~0.8 s from the checkpoint, ~1.3 s replaying
a 20 MB log after an unclean stop.

:class:`StripeRanges` is the Range payload layer on top (paper 3.2-3.5,
Table 1): a prefix tree over token identity, stripes published per
generation (per layer when ``layers`` > 1), divergent prefixes sharing the
stripes before their divergence, tickets that lease generations, a fixed
pool of read banks released by their consumer, deferred retirement, and a
dirty marker cleared only by a clean close.  A generation here is the set of
stripe records of one publish (not a whole pack file); retiring it deletes
those records and the engine reclaims their space.

Options: ``pack_bytes`` (default 1 GiB, fixed at creation), ``max_packs``
(default 65536), ``checkpoint_bytes`` (default 64 MiB), ``allow_buffered``.
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import json
import mmap
import os
import struct
import threading
import uuid
import warnings
import zlib

from prefixbench.engines.base import (
    SegmentStore,
    StoreConfig,
    allocated_bytes,
    check_options,
    int_option,
    prepare_store_dir,
)
from prefixbench.durable import fsync_dir, publish_file
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl

FORMAT = "prefixbench-packfile"
VERSION = 1
META = "packfile.meta"
LOG = "index.log"
CKPT = "index.ckpt"
_OPTIONS = {"pack_bytes", "max_packs", "checkpoint_bytes", "allow_buffered"}

_REC = struct.Struct("<IIQI")            # magic, crc(key..value), key, value length
_REC_MAGIC = 0x52424650                  # "PFBR"
_PACK_HDR = struct.Struct("<8sIIQQ16sI")  # magic, version, block, pack_bytes, pack_no, uuid, crc
_PACK_MAGIC = b"PBPACK\x00\x01"
_FRAME = struct.Struct("<IIQIII")        # magic, crc(rest), seq, n_puts, n_dels, payload bytes
_FRAME_MAGIC = 0x4C464250                # "PBFL"
_PUT = struct.Struct("<QQI")             # key, global record offset, value length
_DEL = struct.Struct("<Q")
_CKPT_HDR = struct.Struct("<8sIQQI")     # magic, version, seq, count, crc(arrays)
_CKPT_MAGIC = b"PBCKPT01"
_SPAN_MAX = 8 << 20                      # coalesced reads stop here
_SPAN_GAP = 64 << 10                     # ... and at gaps larger than this
_OFF_LOG_BUFFER = 1 << 20
_BUF_MAX = 64 << 20                      # largest per-thread read buffer kept
_warned: set = set()
_POOL = None
_POOL_LOCK = threading.Lock()


def _pool():
    """Threads that issue a batch's reads concurrently (shared by all stores)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                from concurrent.futures import ThreadPoolExecutor
                _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="packfile-read")
    return _POOL


def device_block_size(path: str) -> int:
    """The alignment for direct I/O under ``path`` (see the module docstring)."""
    logical = 512
    try:
        st = os.stat(path)
        base = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        for q in (base + "/queue/logical_block_size", base + "/../queue/logical_block_size"):
            if os.path.exists(q):
                with open(q) as fh:
                    logical = int(fh.read().strip())
                break
    except (OSError, ValueError):
        pass
    try:
        fs = os.statvfs(path).f_bsize
    except OSError:
        fs = 4096
    return max(logical, fs, 4096)


def _aligned(n: int) -> mmap.mmap:
    return mmap.mmap(-1, max(n, 1))


def _check_record(view, pos: int, key: int, length: int):
    """The value at ``view[pos:]`` if its header and CRC match ``key``/``length``, else None."""
    if pos + _REC.size + length > len(view):
        return None
    magic, crc, k, n = _REC.unpack_from(view, pos)
    if magic != _REC_MAGIC or k != key or n != length:
        return None
    end = pos + _REC.size + length
    if zlib.crc32(view[pos + 8:end]) != crc:
        return None
    return bytes(view[pos + _REC.size:end])


def _record(key: int, value: bytes) -> bytes:
    body = struct.pack("<QI", key, len(value)) + value
    return struct.pack("<II", _REC_MAGIC, zlib.crc32(body)) + body


class _Pack:
    __slots__ = ("no", "fd", "ptr", "live_bytes", "live_records")

    def __init__(self, no, fd, ptr):
        self.no, self.fd, self.ptr = no, fd, ptr
        self.live_bytes = 0
        self.live_records = 0


class PackfileStore(SegmentStore):
    """Raw O_DIRECT pack files with a checksummed index log and checkpoints."""

    name = "packfile"
    volatile = False
    gil_free_calls = frozenset(("get", "get_many", "write"))
    log_file_patterns = (LOG,)          # the key-index redo log (checkpointed), not data

    def __init__(self, config: StoreConfig | None = None):
        config = config or StoreConfig()
        super().__init__(config)
        opts = check_options(self.name, config.options, _OPTIONS)
        want_pack = int_option(opts, "pack_bytes", 1 << 30, 64 << 10, size=True)
        self.max_packs = int_option(opts, "max_packs", 65536, 2)
        self.checkpoint_bytes = int_option(opts, "checkpoint_bytes", 64 << 20, 4096, size=True)
        allow = opts.get("allow_buffered", False)
        if isinstance(allow, str):
            allow = allow.lower() in ("1", "true", "yes", "on")
        existed = config.path is not None and os.path.isdir(config.path)
        self.path = prepare_store_dir(config.path, config.create, self.name, META)
        self._wlock = threading.RLock()
        self._tls = threading.local()
        self._packs: list[_Pack] = []
        self._index: dict[int, int] = {}
        self._sorted: list[int] = []
        self._sorted_dirty = True
        self._logbuf: list[bytes] = []
        self._logbuf_bytes = 0
        self._seq = 0
        self._head = None
        self._log_fd = -1
        meta_path = os.path.join(self.path, META)
        try:
            self.direct = self._probe_direct(bool(allow), existed)
            if os.path.exists(meta_path):
                self._read_meta(meta_path, opts, want_pack)
            else:
                self.block = device_block_size(self.path)
                if want_pack % self.block:
                    raise ConfigError(f"option pack_bytes: {want_pack} is not a multiple of the "
                                      f"{self.block}-byte I/O alignment")
                self.pack_bytes = want_pack
                self.uuid = uuid.uuid4().bytes
                self._write_meta(meta_path)
            if self.block < device_block_size(self.path):
                raise StoreError(f"packfile store {self.path}: written with {self.block}-byte "
                                 f"alignment, this device needs more")
            self._open_packs()
            self._load_index()
        except BaseException:
            self._close_fds()
            raise

    # ----- opening ----------------------------------------------------
    def _flags(self) -> int:
        return os.O_RDWR | (os.O_DIRECT if self.direct else 0)

    def _probe_direct(self, allow: bool, existed: bool) -> bool:
        """True if O_DIRECT is honoured here; refused or ignored -> one line, maybe fallback."""
        probe = os.path.join(self.path, f".odirect-probe-{os.getpid()}-{threading.get_ident()}")
        why = None
        try:
            with open(probe, "wb") as fh:
                fh.write(bytes(8192))
            try:
                fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                why = "refuses O_DIRECT"
            else:
                try:
                    buf = _aligned(4096)
                    try:
                        os.preadv(fd, [memoryview(buf)[:512]], 1)   # misaligned on purpose
                        why = "ignores O_DIRECT (it accepted a misaligned read, e.g. tmpfs)"
                    except OSError as e:
                        if e.errno != errno.EINVAL:
                            raise
                finally:
                    os.close(fd)
        except OSError as e:
            raise StoreError(f"packfile store {self.path}: cannot probe direct I/O "
                             f"({e.strerror or e})") from None
        finally:
            try:
                os.unlink(probe)
            except OSError:
                pass
        if why is None:
            return True
        if not allow:
            if not existed:
                try:
                    os.rmdir(self.path)        # only the empty directory we just made
                except OSError:
                    pass
            raise StoreError(f"packfile store {self.path}: the filesystem {why}; "
                             f"set option allow_buffered=true to use buffered I/O")
        if self.path not in _warned:
            _warned.add(self.path)
            warnings.warn(f"packfile store {self.path}: the filesystem {why}; "
                          f"using buffered I/O (allow_buffered)", RuntimeWarning, stacklevel=3)
        return False

    def _read_meta(self, meta_path, opts, want_pack):
        try:
            with open(meta_path, "rb") as fh:
                doc = json.loads(fh.read())
            body = {k: doc[k] for k in ("format", "version", "pack_bytes", "block", "uuid")}
            ok = doc["format"] == FORMAT and doc.get("crc") == zlib.crc32(
                json.dumps(body, sort_keys=True).encode())
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise StoreError(f"packfile store {self.path}: {META} is not a valid "
                             f"{FORMAT} metadata file")
        if doc["version"] != VERSION:
            raise StoreError(f"packfile store {self.path}: format version {doc['version']} "
                             f"is not supported (this is {VERSION})")
        self.pack_bytes = int(doc["pack_bytes"])
        self.block = int(doc["block"])
        self.uuid = bytes.fromhex(doc["uuid"])
        if "pack_bytes" in opts and want_pack != self.pack_bytes:
            raise ConfigError(f"option pack_bytes: {want_pack} differs from the store's "
                              f"{self.pack_bytes} at {self.path} (fixed at creation)")

    def _write_meta(self, meta_path):
        body = {"format": FORMAT, "version": VERSION, "pack_bytes": self.pack_bytes,
                "block": self.block, "uuid": self.uuid.hex()}
        doc = dict(body, crc=zlib.crc32(json.dumps(body, sort_keys=True).encode()))
        self._atomic_write(meta_path, json.dumps(doc, sort_keys=True).encode() + b"\n")

    def _atomic_write(self, path, data: bytes):
        publish_file(path, data)

    def _fsync_dir(self):
        fsync_dir(self.path)

    def _pack_path(self, no: int) -> str:
        return os.path.join(self.path, f"pack-{no:06d}.pack")

    def _pack_header(self, no: int) -> bytes:
        raw = _PACK_HDR.pack(_PACK_MAGIC, VERSION, self.block, self.pack_bytes, no, self.uuid, 0)
        crc = zlib.crc32(raw[:-4])
        return raw[:-4] + struct.pack("<I", crc)

    def _open_packs(self):
        names = sorted(n for n in os.listdir(self.path) if n.startswith("pack-"))
        for n in names:
            if n.endswith(".tmp"):            # a pack whose creation was interrupted
                os.unlink(os.path.join(self.path, n))
        names = [n for n in names if n.endswith(".pack")]
        for i, n in enumerate(names):
            p = os.path.join(self.path, n)
            if n != f"pack-{i:06d}.pack":
                raise StoreError(f"packfile store {self.path}: {n} found where "
                                 f"pack-{i:06d}.pack was expected (missing pack)")
            size = os.stat(p).st_size
            if size != self.pack_bytes:
                raise StoreError(f"packfile store {self.path}: {n} is {size} bytes, expected "
                                 f"{self.pack_bytes} (pack_bytes); not opened")
            fd = os.open(p, self._flags())
            self._packs.append(_Pack(i, fd, self.block))
            buf = _aligned(self.block)
            os.preadv(fd, [buf], 0)
            if bytes(buf[:_PACK_HDR.size]) != self._pack_header(i):
                raise StoreError(f"packfile store {self.path}: {n} is not a pack of this "
                                 f"store (foreign format or header corrupt); not opened")

    def _new_pack(self) -> _Pack:
        no = len(self._packs)
        final = self._pack_path(no)
        tmp = final + ".tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                os.posix_fallocate(fd, 0, self.pack_bytes)
            except OSError as e:
                raise StoreError(f"packfile store {self.path}: cannot preallocate a "
                                 f"{self.pack_bytes}-byte pack ({e.strerror or e})") from None
            os.close(fd)
            fd = os.open(tmp, self._flags())
            buf = _aligned(self.block)
            buf[:_PACK_HDR.size] = self._pack_header(no)
            os.pwritev(fd, [buf], 0)
            os.fsync(fd)
            os.rename(tmp, final)
            self._fsync_dir()
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        pack = _Pack(no, fd, self.block)
        self._packs.append(pack)
        return pack

    # ----- the index: checkpoint + log ----------------------------------
    def _load_index(self):
        """Checkpoint (vectorised) + log replay; then each pack's live space and append point."""
        import numpy as np
        index, packs, P = self._index, self._packs, self.pack_bytes
        ends = [self.block] * len(packs)
        ckpt = os.path.join(self.path, CKPT)
        if os.path.exists(ckpt):
            with open(ckpt, "rb") as fh:
                data = fh.read()
            bad = len(data) < _CKPT_HDR.size
            if not bad:
                magic, ver, seq, count, crc = _CKPT_HDR.unpack_from(data)
                body = memoryview(data)[_CKPT_HDR.size:]
                bad = (magic != _CKPT_MAGIC or ver != VERSION or len(body) != count * 20
                       or zlib.crc32(body) != crc)
            if bad:
                raise StoreError(f"packfile store {self.path}: {CKPT} is corrupt (bad "
                                 f"checksum); the store cannot be opened safely")
            keys = np.frombuffer(body, "<u8", count, 0)
            gpos = np.frombuffer(body, "<u8", count, count * 8)
            lens = np.frombuffer(body, "<u4", count, count * 16)
            which = (gpos // np.uint64(P)).astype(np.int64)
            self._check_pack_refs(int(which.max()) if count else -1)
            size = lens.astype(np.uint64) + np.uint64(_REC.size)
            n_rec = np.bincount(which, minlength=len(packs))
            n_live = np.bincount(which, weights=size, minlength=len(packs))
            top = np.zeros(len(packs), np.uint64)
            np.maximum.at(top, which, gpos % np.uint64(P) + size)
            for pk in packs:
                pk.live_records = int(n_rec[pk.no])
                pk.live_bytes = int(n_live[pk.no])
                ends[pk.no] = max(ends[pk.no], int(top[pk.no]))
            if count and int(gpos.max()) < (1 << 32):      # locations fit 64 bits: vectorise
                locs = ((gpos << np.uint64(32)) | lens.astype(np.uint64)).tolist()
            else:
                locs = [(g << 32) | n for g, n in zip(gpos.tolist(), lens.tolist())]
            index.update(zip(keys.tolist(), locs))
            self._seq = seq
        logp = os.path.join(self.path, LOG)
        self._log_fd = os.open(logp, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self._log_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"packfile store {self.path}: in use by another open store "
                             f"(index.log is locked)") from None
        with open(logp, "rb") as fh:
            data = fh.read()
        view = memoryview(data)
        pos, good = 0, 0
        while pos + _FRAME.size <= len(data):
            magic, crc, seq, n_puts, n_dels, size = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + size
            if (magic != _FRAME_MAGIC or end > len(data)
                    or size != n_puts * _PUT.size + n_dels * _DEL.size
                    or zlib.crc32(view[pos + 8:end]) != crc):
                break
            if seq > self._seq:
                body = pos + _FRAME.size
                placed = list(_PUT.iter_unpack(view[body:body + n_puts * _PUT.size]))
                dels = np.frombuffer(data, "<u8", n_dels, body + n_puts * _PUT.size).tolist()
                if placed:
                    self._check_pack_refs(max(g for _, g, _ in placed) // P)
                    for _, g, n in placed:
                        p, off = divmod(g, P)
                        if off + _REC.size + n > ends[p]:
                            ends[p] = off + _REC.size + n
                self._apply(placed, dels)
                self._seq = seq
            pos = good = end
        self._log_bytes = good
        if good != len(data):
            os.ftruncate(self._log_fd, good)   # a torn frame: the batch never committed
        for pk in packs:
            pk.ptr = -(-ends[pk.no] // self.block) * self.block
        self._head = None

    def _check_pack_refs(self, top: int):
        if top >= len(self._packs):
            raise StoreError(f"packfile store {self.path}: the index refers to pack {top} "
                             f"but only {len(self._packs)} packs exist")

    def _write_checkpoint(self):
        """Compact map to ``index.ckpt`` (temp + fsync + rename), then empty the log."""
        import numpy as np
        self._flush_log()
        n = len(self._index)
        keys = np.fromiter(self._index.keys(), "<u8", n)
        locs = list(self._index.values())
        gpos = np.fromiter((v >> 32 for v in locs), "<u8", n)
        lens = np.fromiter((v & 0xFFFFFFFF for v in locs), "<u4", n)
        body = keys.tobytes() + gpos.tobytes() + lens.tobytes()
        hdr = _CKPT_HDR.pack(_CKPT_MAGIC, VERSION, self._seq, n, zlib.crc32(body))
        for pk in self._packs:
            os.fdatasync(pk.fd)
        os.fdatasync(self._log_fd)
        self._atomic_write(os.path.join(self.path, CKPT), hdr + body)
        os.ftruncate(self._log_fd, 0)
        self._log_bytes = 0

    def _flush_log(self):
        if self._logbuf:
            data = b"".join(self._logbuf)
            self._logbuf, self._logbuf_bytes = [], 0
            view = memoryview(data)
            while view:
                view = view[os.write(self._log_fd, view):]

    def _commit(self, puts, deletes, touched):
        """Append the batch's frame: from here on the batch is durable per the mode."""
        self._seq += 1
        payload = b"".join([_PUT.pack(k, g, n) for k, g, n in puts]
                           + [_DEL.pack(k) for k in deletes])
        head = struct.pack("<QIII", self._seq, len(puts), len(deletes), len(payload))
        crc = zlib.crc32(payload, zlib.crc32(head))
        frame = struct.pack("<II", _FRAME_MAGIC, crc) + head + payload
        mode = self.config.durability
        if mode == "sync":
            for p in touched:
                os.fdatasync(self._packs[p].fd)
        self._logbuf.append(frame)
        self._logbuf_bytes += len(frame)
        if mode != "off" or self._logbuf_bytes >= _OFF_LOG_BUFFER:
            self._flush_log()
        if mode == "sync":
            os.fdatasync(self._log_fd)
        self._log_bytes += len(frame)

    # ----- reads ------------------------------------------------------
    def _locate(self, loc):
        g = loc >> 32
        p, off = divmod(g, self.pack_bytes)
        return self._packs[p], off, loc & 0xFFFFFFFF

    def _read_loc(self, key, loc):
        pk, off, n = self._locate(loc)
        B = self.block
        a = off - off % B
        size = -(-(off + _REC.size + n - a) // B) * B
        buf = self._buffer(size)
        mv = memoryview(buf)[:size]
        os.preadv(pk.fd, [mv], a)
        return _check_record(mv, off - a, key, n)

    def _buffer(self, size):
        """A page-aligned read buffer of at least ``size`` bytes, reused per thread up to
        64 MiB (fresh buffers cost a page fault per 4 KiB on every read)."""
        if size > _BUF_MAX:
            return _aligned(size)
        buf = getattr(self._tls, "buf", None)
        if buf is None or len(buf) < size:
            cap = 65536
            while cap < size:
                cap *= 2
            buf = self._tls.buf = _aligned(cap)
        return buf

    def _get(self, key):
        for _ in range(4):
            loc = self._index.get(key)
            if loc is None:
                return None
            v = self._read_loc(key, loc)
            if v is not None or self._index.get(key) == loc:
                return v            # valid, or corrupt/torn on disk: read as missing
        return None

    def _read_many(self, items):
        """Values of ``(key, loc)`` items: nearby records coalesced into one read per span,
        spans read concurrently (``preadv`` releases the GIL) so a batch waits ~once."""
        out = {}
        if not items:
            return out
        items = sorted(items, key=lambda kv: kv[1] >> 32)
        P = self.pack_bytes
        spans = []
        i, n = 0, len(items)
        while i < n:
            g0 = items[i][1] >> 32
            p0 = g0 // P
            j, end = i, g0
            while j < n:
                g = items[j][1] >> 32
                rend = g + _REC.size + (items[j][1] & 0xFFFFFFFF)
                if j > i and (g // P != p0 or g - end > _SPAN_GAP or rend - g0 > _SPAN_MAX):
                    break
                end = max(end, rend)
                j += 1
            spans.append((p0, g0, end, items[i:j]))
            i = j
        if len(spans) > 1:
            for part in _pool().map(self._read_span, spans):
                out.update(part)
        else:
            out.update(self._read_span(spans[0]))
        return out

    def _read_span(self, span):
        p0, g0, end, items = span
        P, B = self.pack_bytes, self.block
        a = (g0 % P) // B * B
        size = -(-((end - p0 * P) - a) // B) * B
        buf = self._buffer(size)
        mv = memoryview(buf)[:size]
        os.preadv(self._packs[p0].fd, [mv], a)
        base = p0 * P + a
        out = {k: _check_record(mv, (loc >> 32) - base, k, loc & 0xFFFFFFFF) for k, loc in items}
        mv.release()
        return out

    def _get_many(self, keys):
        index = self._index
        want = {}
        for k in keys:
            loc = index.get(k)
            if loc is not None:
                want[k] = loc
        got = self._read_many(list(want.items()))
        res = []
        for k in keys:
            if k not in want:
                res.append(None)
                continue
            v = got[k]
            if v is None and index.get(k) != want[k]:
                v = self._get(k)      # moved by a writer while we read: read it again
            res.append(v)
        return res

    def _scan(self, start, end):
        with self._wlock:
            if self._sorted_dirty:
                self._sorted = sorted(self._index)
                self._sorted_dirty = False
            keys = self._sorted
        lo = bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        for c in range(lo, hi, 1024):
            chunk = keys[c:min(hi, c + 1024)]
            for k, v in zip(chunk, self._get_many(chunk)):
                if v is not None:
                    yield k, v

    # ----- writes -----------------------------------------------------
    def _write(self, puts, deletes):
        if not puts and not deletes:
            return
        limit = self.pack_bytes - self.block
        for k, v in puts:
            if _REC.size + len(v) > limit:
                raise StoreError(f"packfile store {self.path}: value of key {k} is {len(v)} "
                                 f"bytes; a {self.pack_bytes}-byte pack holds at most "
                                 f"{limit - _REC.size} (option pack_bytes)")
        with self._wlock:
            if self._closed:
                raise StoreError(f"packfile store {self.path}: store is closed")
            placed, touched = self._place([(k, _record(k, v)) for k, v in puts], set(), False)
            self._commit(placed, deletes, touched)
            self._apply(placed, deletes)
            if self._log_bytes > self.checkpoint_bytes:
                self._write_checkpoint()

    def _apply(self, placed, deletes):
        index, P, packs = self._index, self.pack_bytes, self._packs
        for k, g, n in placed:
            old = index.get(k)
            if old is None:
                self._sorted_dirty = True
            else:
                self._kill(old)
            index[k] = (g << 32) | n
            pk = packs[g // P]
            pk.live_bytes += _REC.size + n
            pk.live_records += 1
        for k in deletes:
            old = index.pop(k, None)
            if old is not None:
                self._sorted_dirty = True
                self._kill(old)

    def _kill(self, loc):
        pk = self._packs[(loc >> 32) // self.pack_bytes]
        pk.live_bytes -= _REC.size + (loc & 0xFFFFFFFF)
        pk.live_records -= 1

    def _place(self, records, pinned, relocating, exclude=()):
        """Write records as extents in free space; returns ``[(key, gpos, len)]`` and packs."""
        placed, touched = [], set()
        B, P = self.block, self.pack_bytes
        i, n = 0, len(records)
        while i < n:
            need = -(-len(records[i][1]) // B) * B
            pk = self._alloc(need, pinned | touched, relocating, exclude)
            touched.add(pk.no)
            room = P - pk.ptr
            parts, used = [], 0
            while i < n and used + len(records[i][1]) <= room:
                k, rec = records[i]
                placed.append((k, pk.no * P + pk.ptr + used, len(rec) - _REC.size))
                parts.append(rec)
                used += len(rec)
                i += 1
            size = -(-used // B) * B
            buf = _aligned(size)
            pos = 0
            for rec in parts:
                buf[pos:pos + len(rec)] = rec
                pos += len(rec)
            try:
                os.pwritev(pk.fd, [buf], pk.ptr)
            except OSError as e:
                raise StoreError(f"packfile store {self.path}: write to pack {pk.no} failed "
                                 f"({e.strerror or e})") from None
            finally:
                buf.close()
            pk.ptr += size
            self._head = pk
        return placed, touched

    def _alloc(self, need, pinned, relocating, exclude):
        """A pack with ``need`` bytes free at its tail (see "Space" in the module doc)."""
        P = self.pack_bytes
        for _ in range(8):
            head = self._head
            if (head is not None and head.no not in exclude and P - head.ptr >= need
                    and (head.live_records or head.no in pinned)):
                return head
            for pk in self._packs:
                if (pk.no not in exclude and P - pk.ptr >= need
                        and (pk.live_records or pk.no in pinned)):
                    return pk
            empties = [pk for pk in self._packs if not pk.live_records
                       and pk.no not in pinned and pk.no not in exclude]
            spare = len(empties) + self.max_packs - len(self._packs)
            if not relocating and self._clean(pinned, need, spare):
                continue
            if spare >= (1 if relocating else 2):
                if empties:
                    pk = empties[0]
                    self._flush_log()         # the frames that emptied it come first
                    pk.ptr = self.block
                    return pk
                return self._new_pack()
            break
        live = sum(pk.live_bytes for pk in self._packs)
        raise StoreError(f"packfile store {self.path}: pack area full ({len(self._packs)} of "
                         f"max_packs={self.max_packs} packs of {P} bytes, {live} live bytes); "
                         f"delete data or raise max_packs")

    def _clean(self, pinned, need, spare) -> bool:
        """Copy the live records of a mostly dead pack elsewhere, so it can be reused."""
        P, B = self.pack_bytes, self.block
        cands = [pk for pk in self._packs if pk.live_records and pk.no not in pinned]
        if not cands:
            return False
        v = min(cands, key=lambda pk: pk.live_bytes)
        gain = P - B - v.live_bytes
        if not (v.live_bytes <= (P - B) // 2 or (spare <= 1 and gain >= need + B)):
            return False
        lo, hi = v.no * P, (v.no + 1) * P
        items = [(k, loc) for k, loc in self._index.items() if lo <= loc >> 32 < hi]
        values = self._read_many(items)
        records, dead = [], []
        for k, _loc in items:
            val = values[k]
            if val is None:
                dead.append(k)           # corrupt on disk: it reads as missing anyway
            else:
                records.append((k, _record(k, val)))
        try:
            placed, touched = self._place(records, pinned, True, {v.no})
        except StoreError:
            return False                 # nothing committed; the extents written are garbage
        self._commit(placed, dead, touched)
        self._apply(placed, dead)
        return True

    # ----- payload-level access -----------------------------------------
    def read_into(self, pack_no: int, offset: int, buf) -> int:
        """One native read of pack ``pack_no`` at ``offset`` into writable buffer ``buf``.

        Offset, length and the buffer's address must be aligned to ``block``
        and the span must lie inside the pack: anything else is refused in
        one line before any I/O (O_DIRECT would fail with a bare EINVAL).
        """
        import ctypes
        B = self.block
        view = memoryview(buf).cast("B")
        length = len(view)
        if view.readonly:
            raise ConfigError("packfile read_into: the destination buffer is read-only")
        addr = ctypes.addressof((ctypes.c_char * max(length, 1)).from_buffer(view)) \
            if length else 0
        if offset % B or length % B or length <= 0 or addr % B:
            raise ConfigError(f"packfile read at offset {offset}, length {length}, buffer "
                              f"address {addr:#x}: all must be multiples of the {B}-byte "
                              f"alignment (and the length > 0)")
        if not 0 <= pack_no < len(self._packs) or offset < 0 \
                or offset + length > self.pack_bytes:
            raise ConfigError(f"packfile read of pack {pack_no} [{offset}, {offset + length}): "
                              f"outside the {len(self._packs)} packs of {self.pack_bytes} bytes")
        return os.preadv(self._packs[pack_no].fd, [view], offset)

    def read_aligned(self, pack_no: int, offset: int, length: int) -> mmap.mmap:
        """:meth:`read_into` a new page-aligned buffer of ``length`` bytes."""
        if length <= 0 or length % self.block:
            raise ConfigError(f"packfile read at offset {offset}, length {length}: the length "
                              f"must be a positive multiple of the {self.block}-byte alignment")
        buf = _aligned(length)
        self.read_into(pack_no, offset, buf)
        return buf

    def value_extent(self, key: int):
        """``(pack_no, byte offset, length)`` of ``key``'s value in its pack, or None.

        For callers that read values as raw aligned spans (the payload-restore
        stripes): they must verify what they read themselves.
        """
        loc = self._index.get(key)
        if loc is None:
            return None
        pk, off, n = self._locate(loc)
        return pk.no, off + _REC.size, n

    def live_bytes(self) -> int:
        """Bytes of live records (headers included) in the packs."""
        return sum(pk.live_bytes for pk in self._packs)

    def pack_count(self) -> int:
        return len(self._packs)

    # ----- the rest of the contract -------------------------------------
    def _sync(self):
        with self._wlock:
            self._flush_log()
            for pk in self._packs:
                os.fdatasync(pk.fd)
            os.fdatasync(self._log_fd)

    def _size_on_disk(self):
        return allocated_bytes(self.path)

    def _close_fds(self):
        for pk in self._packs:
            try:
                os.close(pk.fd)
            except OSError:
                pass
        self._packs = []
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = -1

    def _close(self):
        with self._wlock:
            try:
                if self._log_bytes or not os.path.exists(os.path.join(self.path, CKPT)):
                    self._write_checkpoint()
            finally:
                self._close_fds()



# ----- Range payload layer (paper sections 3.2-3.5, Table 1) -----------------
class TicketError(StoreError):
    """A ticket that is stale, released, cancelled or claimed for another query."""


class BankError(StoreError):
    """A read bank misused (released while its read is in flight) or none free in time."""


class _Node:
    """A radix-tree node: the edge ``label`` (tokens) into it, children by first token,
    and the generations whose published path covers the whole edge (insertion order)."""

    __slots__ = ("children", "label", "owners")

    def __init__(self, label=()):
        self.label = label
        self.children: dict = {}
        self.owners: dict = {}


class _RangeTree:
    """Compressed prefix tree over token identity (Range's range directory, 3.2).

    A lookup walks one root-to-leaf path comparing token labels: its cost
    follows the query's tokens and the tree's branches, never the number of
    published ranges.  Every node carries the generations that published a
    path through it, so the deepest edge the query reaches names a
    generation whose plan covers the whole hit.
    """

    def __init__(self):
        self.root = _Node()

    def longest(self, tokens) -> tuple[int, int | None]:
        """(matched tokens, the newest generation covering them) for ``tokens``."""
        node, d, n, gen = self.root, 0, len(tokens), None
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                break
            lab = child.label
            k = 1
            m = min(len(lab), n - d)
            while k < m and lab[k] == tokens[d + k]:
                k += 1
            d += k
            gen = next(reversed(child.owners))
            if k < len(lab):
                break
            node = child
        return d, gen

    def insert(self, tokens, gen) -> None:
        node, d, n = self.root, 0, len(tokens)
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                leaf = _Node(tuple(tokens[d:]))
                leaf.owners[gen] = None
                node.children[tokens[d]] = leaf
                return
            lab = child.label
            k = 1
            m = min(len(lab), n - d)
            while k < m and lab[k] == tokens[d + k]:
                k += 1
            if k < len(lab):                        # split the edge at k
                tail = _Node(lab[k:])
                tail.children, tail.owners = child.children, dict(child.owners)
                child.label, child.children = lab[:k], {lab[k]: tail}
            child.owners[gen] = None
            d += k
            node = child

    def remove(self, tokens, gen) -> None:
        """Drop ``gen`` from its path; prune nodes no generation covers any more."""
        node, d, n = self.root, 0, len(tokens)
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                return
            child.owners.pop(gen, None)
            if not child.owners:
                del node.children[tokens[d]]
                return
            d += len(child.label)
            node = child


class Bank:
    """One aligned stripe-sized read buffer: free -> read -> scatter -> free.

    The consumer that owns the scatter calls :meth:`release` once its
    completion is proved; only then may the pool hand the bank out again.
    ``uses`` counts hand-outs, so a test can see a bank was not reused early.
    """

    def __init__(self, pool, index, size):
        self._pool = pool
        self.index = index
        self.buffer = _aligned(size)
        self.state = "free"
        self.owner = None
        self.uses = 0

    def release(self) -> None:
        self._pool._release(self)


class BankPool:
    """A fixed pool of read banks carved once at startup (paper 3.4; default 8)."""

    def __init__(self, count: int, size: int, timeout: float = 30.0):
        if count < 1:
            raise ConfigError(f"option banks: {count} must be >= 1")
        self._cond = threading.Condition()
        self.banks = [Bank(self, i, size) for i in range(count)]
        self._free = list(self.banks)
        self.timeout = timeout

    def free_count(self) -> int:
        with self._cond:
            return len(self._free)

    def acquire(self, owner, timeout: float | None = None) -> Bank:
        wait = self.timeout if timeout is None else timeout
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout=wait):
                raise BankError(f"no free read bank after {wait:g} s: all {len(self.banks)} "
                                f"are held by reads or unreleased scatters")
            bank = self._free.pop(0)
            bank.state, bank.owner = "read", owner
            bank.uses += 1
            return bank

    def _release(self, bank) -> None:
        with self._cond:
            if bank.state == "read":
                raise BankError(f"read bank {bank.index} released while its read is in flight")
            if bank.state == "free":
                raise BankError(f"read bank {bank.index} released twice")
            bank.state, bank.owner = "free", None
            self._free.append(bank)
            self._cond.notify_all()

    def close(self):
        for b in self.banks:
            b.buffer.close()


class Ticket:
    """A lookup's answer (paper 3.2): the promised endpoint and the generations holding it.

    Fields checked at :meth:`claim`: the owner ``epoch`` of the directory that
    issued it, every generation in ``gens`` still visible, the exact query
    ``tokens``, and the promised endpoint ``hit_tokens`` (``hit_bytes`` in
    payload bytes, all layers).  ``segments`` is the physical plan clipped
    at the endpoint: ``(first token, end token, generation, generation's
    first token)`` per run of stripes.
    """

    def __init__(self, ranges, epoch, segments, tokens, hit_tokens, hit_bytes):
        self._ranges = ranges
        self.epoch = epoch
        self.segments = segments
        self.gens = tuple(sorted({s[2] for s in segments}))
        self.gen = segments[-1][2]                 # the generation that answered
        self.tokens = tuple(tokens)
        self.hit_tokens = hit_tokens
        self.hit_bytes = hit_bytes
        self.state = "lookup"          # lookup -> claimed -> released
        self.cancelled = False
        self.in_flight = 0             # reads issued and not yet drained
        self._release_pending = False

    def claim(self, tokens) -> None:
        """Bind the ticket to its request: the exact query and still-visible generations."""
        self._ranges._claim(self, tokens)

    def cancel(self) -> None:
        """Stop issuing reads; leases and banks stay owned until in-flight reads drain."""
        self.cancelled = True

    def release(self) -> None:
        """Drop the leases, now or (with reads in flight) when the last read drains."""
        self._ranges._release(self)


class StripeRanges:
    """Published payload ranges as packfile stripes, owned through tickets.

    Layout (3.3): a range of ``T`` tokens with ``layers`` layers is the
    payload ``[layer][token][bytes_per_token / layers]``; each layer's slice
    is cut into stripes of ``stripe_bytes`` (``tokens_per_stripe`` tokens),
    one packfile record each, stored so its bytes start on an aligned block.
    A restore reads one native call per stripe, whatever the number of
    logical objects that name the same bytes.

    * ``publish(tokens, payload)`` writes the new generation's stripes and
      only then makes it visible.  Where the tokens share a prefix with a
      published range, whole stripes before the divergence are referenced
      from the generations that hold them; the stripe in which they diverge
      is rewritten (divergent prefixes).  A failure part-way leaves nothing
      visible and its stripes are deleted (partial completion is not
      completion).  Publishing a range that is already fully present joins
      the existing generation.
    * ``lookup(tokens)`` walks the prefix tree (:class:`_RangeTree`) and
      returns a :class:`Ticket` leasing every generation of the hit, or None.
    * ``invalidate(gen)`` hides a generation and every generation that
      references its stripes, pruning their branches at once; their stripes
      are retired (deleted, space reclaimed) only at zero leases.
    * ``read(ticket, dest)`` reads the claimed range clipped at the hit
      endpoint, stripes in layer order, each admitted through a read bank
      (:class:`BankPool`); ``on_layer(l)`` fires when every stripe of layer
      ``l`` has landed.  Cancellation stops issuing reads; banks and leases
      stay owned until the reads in flight have drained.
    * Clean ``close`` drains, syncs, writes a checksummed snapshot bound to
      the store's identity, then removes the dirty marker; a reopen that
      finds the marker (an unclean stop) discards the directory and deletes
      its stripes instead of reconstructing anything from payload.
    """

    SNAPSHOT = "ranges.snapshot"
    DIRTY = "ranges.dirty"

    def __init__(self, path, stripe_bytes=32 << 20, bytes_per_token=4096, pack_bytes=1 << 30,
                 durability="async", allow_buffered=False, layers=1, banks=8, read_workers=1,
                 bank_timeout=30.0):
        self.store = PackfileStore(StoreConfig(path=path, durability=durability, options={
            "pack_bytes": pack_bytes, "allow_buffered": allow_buffered}))
        self.path = self.store.path
        B = self.store.block
        if layers < 1 or bytes_per_token < 1 or bytes_per_token % layers:
            self.store.close()
            raise ConfigError(f"option layers: {layers} must be >= 1 and divide "
                              f"bytes_per_token={bytes_per_token}")
        per_layer = bytes_per_token // layers
        if stripe_bytes % B or stripe_bytes % per_layer:
            self.store.close()
            raise ConfigError(f"option stripe_bytes: {stripe_bytes} must be a multiple of the "
                              f"{B}-byte alignment and of the {per_layer} bytes a token holds "
                              f"per layer (bytes_per_token={bytes_per_token}, layers={layers})")
        if read_workers < 1:
            self.store.close()
            raise ConfigError(f"option read_workers: {read_workers} must be >= 1")
        self.stripe = stripe_bytes
        self.per_token = bytes_per_token
        self.layers = layers
        self.per_layer_token = per_layer
        self.tps = stripe_bytes // per_layer        # tokens per stripe
        self._pad = B - _REC.size
        self._lock = threading.Lock()
        self._tree = _RangeTree()
        self._gens: dict[int, dict] = {}           # gen -> tokens, first (k0), plan
        self._visible: set[int] = set()
        self._dependents: dict[int, set] = {}
        self._refs: dict[int, int] = {}
        self._retiring: set[int] = set()
        self._next_gen = 1
        self.epoch = 1
        self._closed = False
        self.discarded_unclean = False
        dirty = os.path.join(self.path, self.DIRTY)
        snap = os.path.join(self.path, self.SNAPSHOT)
        try:
            if os.path.exists(dirty):
                self.discarded_unclean = True
                self._discard_all()
            elif os.path.exists(snap):
                self._load_snapshot(snap)
            with open(dirty, "wb") as fh:
                fh.write(b"open\n")
                os.fsync(fh.fileno())
            self.store._fsync_dir()
        except BaseException:
            self.store.close()
            raise
        self.banks = BankPool(banks, stripe_bytes, bank_timeout)
        self._workers = read_workers
        self._executor = None

    # stripe j of layer l of generation gen
    @staticmethod
    def _key(gen, layer, j):
        return (gen << 32) | (layer << 20) | j

    def _n_stripes(self, info) -> int:
        return -(-(len(info["tokens"]) - info["first"]) // self.tps)

    def _discard_all(self):
        keys = [k for k, _ in self.store.scan()]
        for i in range(0, len(keys), 4096):
            self.store.write_items([], keys[i:i + 4096])
        try:
            os.unlink(os.path.join(self.path, self.SNAPSHOT))
        except FileNotFoundError:
            pass

    def _identity(self) -> dict:
        return {"uuid": self.store.uuid.hex(), "stripe": self.stripe,
                "bytes_per_token": self.per_token, "layers": self.layers}

    def _load_snapshot(self, snap):
        try:
            with open(snap, "rb") as fh:
                doc = json.loads(fh.read())
            body = json.dumps(doc["body"], sort_keys=True).encode()
            ok = doc.get("crc") == zlib.crc32(body)
            body = doc["body"]
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise StoreError(f"stripe ranges {self.path}: {self.SNAPSHOT} is corrupt")
        if body.get("identity") != self._identity():
            raise StoreError(f"stripe ranges {self.path}: {self.SNAPSHOT} belongs to another "
                             f"store or layout ({body.get('identity')})")
        for gen, info in sorted(((int(g), v) for g, v in body["gens"].items())):
            tokens = tuple(info["tokens"])
            self._gens[gen] = {"tokens": tokens, "first": info["first"],
                               "plan": [tuple(s) for s in info["plan"]]}
            self._visible.add(gen)
            self._tree.insert(tokens, gen)
            for s in info["plan"]:
                if s[2] != gen:
                    self._dependents.setdefault(s[2], set()).add(gen)
        self._next_gen = body["next_gen"]
        self.epoch = body["epoch"] + 1

    # ----- publish / invalidate -------------------------------------------------
    @staticmethod
    def _clip(plan, end):
        out = []
        for a, b, g, base in plan:
            if a >= end:
                break
            out.append((a, min(b, end), g, base))
        return out

    def publish(self, tokens, payload) -> int:
        """Store ``payload`` (``len(tokens) * bytes_per_token`` bytes, layer-major); visible
        on return.  Returns the generation (an existing one if the range is already there)."""
        tokens = tuple(int(t) for t in tokens)
        view = memoryview(payload).cast("B")
        n, sl = len(tokens), self.per_layer_token
        if len(view) != n * self.per_token or not n:
            raise ConfigError(f"stripe ranges publish: {len(view)} payload bytes for "
                              f"{n} tokens of {self.per_token} bytes")
        with self._lock:
            m, parent = self._tree.longest(tokens)
            if m == n:
                return parent                      # duplicate stores join the existing one
            first = m // self.tps * self.tps
            base = self._clip(self._gens[parent]["plan"], first) if parent and first else []
            held = {s[2] for s in base}
            for g in held:                         # the referenced stripes stay while we write
                self._refs[g] = self._refs.get(g, 0) + 1
            gen = self._next_gen
            self._next_gen += 1
        pad = bytes(self._pad)
        written = []
        try:
            for layer in range(self.layers):
                lo = layer * n * sl
                for j, t in enumerate(range(first, n, self.tps)):
                    end = min(n, t + self.tps)
                    key = self._key(gen, layer, j)
                    self.store.put(key, pad + bytes(view[lo + t * sl:lo + end * sl]))
                    written.append(key)
            with self._lock:
                lost = held - self._visible
                if not lost:
                    self._gens[gen] = {"tokens": tokens, "first": first,
                                       "plan": base + [(first, n, gen, first)]}
                    self._visible.add(gen)
                    self._tree.insert(tokens, gen)
                    for g in held:
                        self._dependents.setdefault(g, set()).add(gen)
            if lost:
                raise TicketError(f"stripe ranges publish: generations {sorted(lost)} holding "
                                  f"the shared prefix were invalidated during the publish")
        except BaseException:
            self.store.write_items([], written)      # never visible: reclaim what was written
            raise
        finally:
            with self._lock:
                for g in held:
                    self._drop_ref(g)
            self._retire_unreferenced()
        return gen

    def invalidate(self, gen: int) -> None:
        """Hide ``gen`` and every generation built on its stripes; retire at zero leases."""
        with self._lock:
            todo = [gen]
            while todo:
                g = todo.pop()
                if g not in self._visible:
                    continue
                self._visible.discard(g)
                self._tree.remove(self._gens[g]["tokens"], g)
                self._retiring.add(g)
                todo.extend(self._dependents.pop(g, ()))
        self._retire_unreferenced()

    def _drop_ref(self, g):
        self._refs[g] -= 1
        if not self._refs[g]:
            del self._refs[g]

    def _retire_unreferenced(self):
        with self._lock:
            gone = [g for g in self._retiring if not self._refs.get(g)]
            infos = []
            for g in gone:
                self._retiring.discard(g)
                info = self._gens.pop(g)
                for s in info["plan"]:
                    if s[2] != g and s[2] in self._dependents:
                        self._dependents[s[2]].discard(g)
                infos.append((g, info))
        for g, info in infos:
            n = self._n_stripes(info)
            self.store.write_items([], [self._key(g, layer, j) for layer in range(self.layers)
                                        for j in range(n)])

    def retired(self, gen: int) -> bool:
        return gen not in self._gens

    # ----- tickets --------------------------------------------------------------
    def lookup(self, tokens) -> Ticket | None:
        tokens = tuple(int(t) for t in tokens)
        with self._lock:
            if self._closed:
                raise TicketError(f"stripe ranges {self.path} is closed")
            d, gen = self._tree.longest(tokens)
            if not d:
                return None
            segments = self._clip(self._gens[gen]["plan"], d)
            for g in {s[2] for s in segments}:
                self._refs[g] = self._refs.get(g, 0) + 1
            return Ticket(self, self.epoch, segments, tokens, d, d * self.per_token)

    def _claim(self, ticket, tokens):
        with self._lock:
            if ticket.state != "lookup":
                raise TicketError(f"ticket for generation {ticket.gen} is {ticket.state}, "
                                  f"not claimable")
            if ticket._ranges is not self or ticket.epoch != self.epoch or self._closed:
                raise TicketError(f"ticket of owner epoch {ticket.epoch} presented to epoch "
                                  f"{self.epoch}")
            if tuple(int(t) for t in tokens) != ticket.tokens:
                raise TicketError("ticket claimed for a different query than it was issued for")
            stale = [g for g in ticket.gens if g not in self._visible]
            if stale:
                raise TicketError(f"stale ticket: generation {stale[0]} was invalidated")
            ticket.state = "claimed"

    def _release(self, ticket):
        with self._lock:
            if ticket.state in ("released", "releasing"):
                return
            if ticket.in_flight:
                ticket.state = "releasing"        # the last draining read finishes it
                return
            self._finish_release(ticket)
        self._retire_unreferenced()

    def _finish_release(self, ticket):
        ticket.state = "released"
        for g in ticket.gens:
            self._drop_ref(g)

    def _plan_reads(self, ticket, layer_stride):
        """(layer, key, dest offset, bytes) per stripe, in layer order."""
        sl, jobs = self.per_layer_token, []
        for layer in range(self.layers):
            for a, b, g, base in ticket.segments:
                for t in range(a, b, self.tps):
                    key = self._key(g, layer, (t - base) // self.tps)
                    jobs.append((layer, key, layer * layer_stride + t * sl,
                                 (min(b, t + self.tps) - t) * sl))
        return jobs

    def read(self, ticket: Ticket, dest, on_stripe=None, on_layer=None, layer_stride=None,
             staged=False, fence=None) -> int:
        """Restore the claimed range into ``dest``; returns bytes restored.

        Layer ``l`` lands at ``dest[l * layer_stride:]`` (default: the hit's
        bytes per layer rounded up to the alignment), token-major.  Each
        stripe is admitted through a read bank: with ``staged`` it is read
        into the bank and scattered (copied) into ``dest``, else read straight
        into ``dest`` (page-aligned) with the bank held for the read and the
        scatter.  The bank returns to the pool when the scatter's completion
        is proved: at once for the synchronous copy, or - with ``fence(bank,
        stripe)`` given - when the consumer calls ``bank.release()``.
        ``on_stripe(i)`` and ``on_layer(l)`` run in the caller's thread, in
        order.  A cancelled ticket stops issuing reads, drains the ones in
        flight, then raises.
        """
        if ticket.state != "claimed":
            raise TicketError(f"ticket for generation {ticket.gen} is {ticket.state}; "
                              f"claim it before reading")
        from concurrent.futures import ThreadPoolExecutor
        view = memoryview(dest).cast("B")
        B, sl = self.store.block, self.per_layer_token
        if layer_stride is None:
            layer_stride = -(-ticket.hit_tokens * sl // B) * B
        need = (self.layers - 1) * layer_stride + -(-ticket.hit_tokens * sl // B) * B
        if layer_stride % B or len(view) < need:
            raise ConfigError(f"stripe ranges read: destination of {len(view)} bytes with a "
                              f"layer stride of {layer_stride} cannot hold {self.layers} layers "
                              f"of {ticket.hit_tokens * sl} bytes at a {B}-byte alignment")
        jobs = self._plan_reads(ticket, layer_stride)
        left = [0] * self.layers
        for job in jobs:
            left[job[0]] += 1
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="ranges-read")
        store = self.store

        def one(bank, key, off, take):
            ext = store.value_extent(key)
            if ext is None:
                raise TicketError(f"generation {key >> 32} lost stripe {key & 0xFFFFF} "
                                  f"under a lease")
            span = -(-take // B) * B
            if staged:
                store.read_into(ext[0], ext[1] + self._pad, memoryview(bank.buffer)[:span])
                bank.state = "scatter"
                view[off:off + take] = memoryview(bank.buffer)[:take]
            else:
                store.read_into(ext[0], ext[1] + self._pad, view[off:off + span])
                bank.state = "scatter"
            return take

        pending = []            # (future, bank, job index) in issue order
        done = nxt = 0
        error = None
        try:
            while nxt < len(jobs) or pending:
                while nxt < len(jobs) and not ticket.cancelled and error is None \
                        and (not pending or self.banks.free_count()):
                    bank = self.banks.acquire(ticket)
                    with self._lock:
                        ticket.in_flight += 1
                    layer, key, off, take = jobs[nxt]
                    pending.append((self._executor.submit(one, bank, key, off, take), bank, nxt))
                    nxt += 1
                if not pending:
                    break
                fut, bank, i = pending.pop(0)
                try:
                    got = fut.result()
                except Exception as e:  # noqa: BLE001 - any failed read still returns its bank
                    error = error or e
                    bank.state = "scatter"          # the read returned; nothing to scatter
                    bank.release()
                    continue
                finally:
                    with self._lock:
                        ticket.in_flight -= 1
                if error is not None or ticket.cancelled:
                    bank.release()                   # drained, not delivered
                    continue
                done += got
                if fence is not None:
                    fence(bank, i)                   # the consumer releases it when proved
                else:
                    bank.release()
                if on_stripe:
                    on_stripe(i)
                layer = jobs[i][0]
                left[layer] -= 1
                if not left[layer] and on_layer:
                    on_layer(layer)
        finally:
            for fut, bank, _i in pending:            # only on an exception in a callback
                fut.exception()                      # waits; the callback's error wins
                bank.state = "scatter"
                bank.release()
                with self._lock:
                    ticket.in_flight -= 1
            with self._lock:
                finish = ticket.state == "releasing" and not ticket.in_flight
                if finish:
                    self._finish_release(ticket)
            if finish:
                self._retire_unreferenced()
        if error is not None:
            raise error
        if ticket.cancelled and done < sum(j[3] for j in jobs):
            raise TicketError(f"ticket for generation {ticket.gen} was cancelled after "
                              f"{done} bytes")
        return done

    # ----- shutdown -----------------------------------------------------------
    def close(self, clean: bool = True) -> None:
        """Clean: drain, sync, snapshot, then clear the dirty marker."""
        if clean:
            with self._lock:
                if self._refs:
                    raise TicketError(f"stripe ranges {self.path}: {sum(self._refs.values())} "
                                      f"tickets still hold leases; release them first")
                gens = {str(g): {"tokens": list(self._gens[g]["tokens"]),
                                 "first": self._gens[g]["first"],
                                 "plan": [list(s) for s in self._gens[g]["plan"]]}
                        for g in sorted(self._visible)}
            self._retire_unreferenced()
            self.store.sync()
            body = {"gens": gens, "next_gen": self._next_gen, "epoch": self.epoch,
                    "identity": self._identity()}
            doc = {"body": body, "crc": zlib.crc32(json.dumps(body, sort_keys=True).encode())}
            self.store._atomic_write(os.path.join(self.path, self.SNAPSHOT),
                                     json.dumps(doc).encode())
            os.unlink(os.path.join(self.path, self.DIRTY))
            self.store._fsync_dir()
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.banks.close()
        self.store.close()

@hookimpl
def prefixbench_register_engines(register):
    register("packfile", PackfileStore)
