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

**Device faults.**  Pack reads and writes, fsyncs, the key log and the
checkpoint go through :mod:`prefixbench.faults` (component ``"packfile"``).
A failed write or fsync is one line naming the store, and the batch is not
committed: a frame that failed to write or to sync is cut back off the log
(under ``off``, where buffered frames go with it, the store then refuses
writes until reopened), so a reopen never finds a batch the caller saw
fail.  A short pack write is continued where it stopped; a read error or a
short read is one line (never the stale bytes of an earlier read).  A
checkpoint that fails after its batch committed does not fail the batch:
the log still holds it, ``checkpoint_error`` says why, and it is retried
once the log has grown by another ``checkpoint_bytes``.

**Damage.**  ``index.ckpt`` (format 2: its checksum covers its header fields
and the arrays; format 1, the previous release's, covers the arrays only and
still opens) that fails a check is one line (length, version, checksum) and
the store does not open.  In ``index.log`` only what a cut append leaves is
a torn tail (a prefix of the next frame, bytes that are not its header, or
zeros) and cut off; a committed frame that fails its checks - a flipped
byte - is one line and the store does not open, since cutting there would
drop acknowledged batches.

There is no engine-side cache: ``cache_bytes`` is not used, every ``get``
is a device read (the point of the engine).  Batch reads coalesce records
that are close in a pack and issue the spans from a small thread pool.
One open store per directory (``index.log`` is flock'ed).  Reopen cost, 1M
keys of 16 B on this 2-CPU VM: ~0.8 s from the checkpoint, ~1.3 s replaying
a 20 MB log after an unclean stop.

Payload-level access (:meth:`PackfileStore.read_into`, :meth:`~PackfileStore.
value_extent`, :data:`RECORD_HEADER_BYTES`, :func:`aligned_buffer`) lets a
caller read values as raw aligned spans; the Range stripe layer
(:mod:`prefixbench.engines.stripes`) is built on those and the ordinary
store calls alone.

Options: :data:`OPTIONS` (``prefixbench plugins --options`` lists them with their
defaults).
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
    EngineOption,
    SegmentStore,
    StoreConfig,
    allocated_bytes,
    bool_option,
    check_options,
    int_option,
    prepare_store_dir,
)
from prefixbench import faults
from prefixbench.durable import fsync_dir, publish_file
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl

FORMAT = "prefixbench-packfile"
VERSION = 1
#: the checkpoint's own format: 2 checksums its header fields too (1 still opens)
CKPT_VERSION = 2
META = "packfile.meta"
LOG = "index.log"
CKPT = "index.ckpt"
OPTIONS = {
    "pack_bytes": EngineOption(1 << 30, "bytes per pack file, fixed at creation"),
    "max_packs": EngineOption(65536, "pack files the store may grow to"),
    "checkpoint_bytes": EngineOption(64 << 20, "index.log bytes between index checkpoints"),
    "allow_buffered": EngineOption(False, "fall back to buffered I/O where O_DIRECT "
                                          "is refused"),
}

_REC = struct.Struct("<IIQI")            # magic, crc(key..value), key, value length
#: bytes of the record header in front of every value in a pack: a caller that
#: wants a value's bytes to start on an aligned block (reading them with
#: :meth:`PackfileStore.read_into`) prefixes its value with
#: ``block - RECORD_HEADER_BYTES`` bytes of padding
RECORD_HEADER_BYTES = _REC.size
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


def aligned_buffer(n: int) -> mmap.mmap:
    """A page-aligned, writable buffer of ``n`` bytes (anonymous mmap), as O_DIRECT
    reads into it need."""
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
    """Raw O_DIRECT pack files with a checksummed index log and checkpoints.

    Public attributes once open: ``path`` (the store directory), ``block`` (the
    I/O alignment in bytes), ``pack_bytes``, ``uuid`` (16 bytes naming this
    store, fixed at creation) and ``direct`` (False only under ``allow_buffered``).
    """

    name = "packfile"
    OPTIONS = OPTIONS
    volatile = False
    gil_free_calls = frozenset(("get", "get_many", "write"))
    log_file_patterns = (LOG,)          # the key-index redo log (checkpointed), not data

    def __init__(self, config: StoreConfig | None = None):
        config = config or StoreConfig()
        super().__init__(config)
        opts = check_options(self.name, config.options, OPTIONS)
        want_pack = int_option(opts, "pack_bytes", OPTIONS["pack_bytes"].default, 64 << 10,
                               size=True)
        self.max_packs = int_option(opts, "max_packs", OPTIONS["max_packs"].default, 2)
        self.checkpoint_bytes = int_option(opts, "checkpoint_bytes",
                                           OPTIONS["checkpoint_bytes"].default, 4096, size=True)
        allow = bool_option(opts, "allow_buffered", OPTIONS["allow_buffered"].default)
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
        self._log_written = 0
        self._failed = None
        self._ckpt_deferred = 0
        #: why the last checkpoint attempt failed (the log kept every batch), or None
        self.checkpoint_error = None
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
                    buf = aligned_buffer(4096)
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
        other = False
        try:
            with open(meta_path, "rb") as fh:
                doc = json.loads(fh.read())
            # another release's store is named as such even if its fields differ
            other = (isinstance(doc, dict) and doc.get("format") == FORMAT
                     and isinstance(doc.get("version"), int) and doc["version"] != VERSION)
            if other:
                raise ValueError
            body = {k: doc[k] for k in ("format", "version", "pack_bytes", "block", "uuid")}
            ok = doc["format"] == FORMAT and doc.get("crc") == zlib.crc32(
                json.dumps(body, sort_keys=True).encode())
            ok = ok and doc["version"] == VERSION
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if other:
            raise StoreError(f"packfile store {self.path}: format version {doc['version']}; "
                             f"this prefixbench reads version {VERSION}")
        if not ok:
            raise StoreError(f"packfile store {self.path}: {META} is not a valid "
                             f"{FORMAT} metadata file (corrupt or foreign)")
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
        try:
            publish_file(path, data, "packfile")
        except OSError as e:
            raise StoreError(f"packfile store {self.path}: {e}") from None

    def _fsync_dir(self):
        try:
            fsync_dir(self.path, "packfile")
        except OSError as e:
            raise StoreError(f"packfile store {self.path}: {e}") from None

    def _pwrite_all(self, fd, buf, offset, path):
        """Every byte of ``buf`` at ``offset`` (a short write is continued where it
        stopped; one that writes nothing is a full device)."""
        done, total = 0, len(buf)
        with memoryview(buf) as view:
            while done < total:
                with view[done:] as rest:
                    n = faults.pwritev(fd, [rest], offset + done, path, "packfile", self.block)
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                done += n

    def _pread(self, fd, bufs, offset, path):
        """Fill ``bufs`` from ``offset``: a read error or a short read is one line,
        never the stale bytes of an earlier read taken for this one."""
        want = sum(len(memoryview(b)) for b in bufs)
        try:
            n = faults.preadv(fd, bufs, offset, path, "packfile", self.block)
        except OSError as e:
            raise StoreError(f"packfile store {self.path}: read of {os.path.basename(path)} "
                             f"at {offset} failed ({e.strerror or e})") from None
        if n != want:
            raise StoreError(f"packfile store {self.path}: short read of "
                             f"{os.path.basename(path)} at {offset} ({n} of {want} bytes)")

    def _sync_fd(self, fd, path):
        try:
            faults.fdatasync(fd, path, "packfile")
        except OSError as e:
            raise StoreError(f"packfile store {self.path}: fsync of {os.path.basename(path)} "
                             f"failed ({e.strerror or e})") from None

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
            buf = aligned_buffer(self.block)
            self._pread(fd, [buf], 0, p)
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
            buf = aligned_buffer(self.block)
            buf[:_PACK_HDR.size] = self._pack_header(no)
            try:
                self._pwrite_all(fd, buf, 0, tmp)
                faults.fsync(fd, tmp, "packfile")
                faults.replace(tmp, final, "packfile")
            except OSError as e:
                raise StoreError(f"packfile store {self.path}: cannot create {final} "
                                 f"({e.strerror or e})") from None
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
            magic, ver, seq, count, crc, body = self._check_checkpoint(data)
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
        pos, good, last_seq = 0, 0, self._seq
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
            last_seq = seq
        if good != len(data):
            self._check_torn_tail(data, good, last_seq + 1)
            os.ftruncate(self._log_fd, good)   # a torn frame: the batch never committed
        self._log_bytes = self._log_written = good
        for pk in packs:
            pk.ptr = -(-ends[pk.no] // self.block) * self.block
        self._head = None

    def _check_checkpoint(self, data):
        """The checkpoint's header fields and arrays, or one line saying what is wrong
        (length, version, checksum).  Version 2 checksums its header fields with the
        arrays; version 1 (the previous release) checksums the arrays alone."""
        def bad(what):
            return StoreError(f"packfile store {self.path}: {CKPT} {what}; the store "
                              f"cannot be opened safely")
        if len(data) < _CKPT_HDR.size:
            raise bad(f"is truncated ({len(data)} bytes, shorter than its header)")
        magic, ver, seq, count, crc = _CKPT_HDR.unpack_from(data)
        if magic != _CKPT_MAGIC:
            raise bad("is not a checkpoint (bad magic)")
        if ver not in (1, CKPT_VERSION):
            raise bad(f"has format version {ver}; this prefixbench reads versions 1 to "
                      f"{CKPT_VERSION}")
        body = memoryview(data)[_CKPT_HDR.size:]
        if len(body) != count * 20:
            raise bad(f"has the wrong length ({len(body)} bytes of arrays for {count} keys, "
                      f"expected {count * 20})")
        want = zlib.crc32(body) if ver == 1 else zlib.crc32(body, zlib.crc32(data[:28]))
        if want != crc:
            raise bad("is corrupt (bad checksum)")
        return magic, ver, seq, count, crc, body

    def _check_torn_tail(self, data, at, expected):
        """Bytes after the last intact frame are a torn append (cut off on open) only
        if they look like what a cut append leaves: a prefix of the next frame, a
        header that is not this log's next frame at all (foreign bytes), or zeros.
        Corruption of a committed frame - an intact frame further on, a complete
        frame failing its checksum, or the next frame's own header (its sequence
        number ``expected``) with inconsistent fields - is one line instead: cutting
        there would silently drop acknowledged batches."""
        rest = memoryview(data)[at:]
        n = len(rest)
        magic_b = _FRAME_MAGIC.to_bytes(4, "little")
        torn = True
        if n < _FRAME.size:
            torn = bytes(rest[:4]) == magic_b[:min(n, 4)] or not any(rest)
        elif any(rest):
            magic, _c, seq, n_puts, n_dels, size = _FRAME.unpack_from(rest)
            if magic == _FRAME_MAGIC and size == n_puts * _PUT.size + n_dels * _DEL.size:
                torn = _FRAME.size + size > n
            else:
                torn = seq != expected
        p = data.find(magic_b, at + 1)
        while torn and p >= 0:              # an intact frame after the bad one
            if p + _FRAME.size <= len(data):
                magic, crc, _s, n_puts, n_dels, size = _FRAME.unpack_from(data, p)
                end = p + _FRAME.size + size
                if (size == n_puts * _PUT.size + n_dels * _DEL.size and end <= len(data)
                        and zlib.crc32(memoryview(data)[p + 8:end]) == crc):
                    torn = False
            p = data.find(magic_b, p + 1)
        if not torn:
            raise StoreError(f"packfile store {self.path}: {LOG} is corrupt at byte {at} "
                             f"(a committed frame fails its checks, {n} bytes from there); "
                             f"the store cannot be opened safely")

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
        fields = _CKPT_HDR.pack(_CKPT_MAGIC, CKPT_VERSION, self._seq, n, 0)[:28]
        hdr = fields + struct.pack("<I", zlib.crc32(body, zlib.crc32(fields)))
        for pk in self._packs:
            self._sync_fd(pk.fd, self._pack_path(pk.no))
        self._sync_fd(self._log_fd, os.path.join(self.path, LOG))
        self._atomic_write(os.path.join(self.path, CKPT), hdr + body)
        os.ftruncate(self._log_fd, 0)
        self._log_bytes = self._log_written = 0

    def _flush_log(self):
        if self._logbuf:
            data = b"".join(self._logbuf)
            self._logbuf, self._logbuf_bytes = [], 0
            try:
                faults.write_all(self._log_fd, data, os.path.join(self.path, LOG), "packfile")
            except OSError as e:
                self._cut_log(e)
                raise StoreError(f"packfile store {self.path}: write of {LOG} failed "
                                 f"({e.strerror or e}); the batch was not committed") from None
            self._log_written += len(data)

    def _cut_log(self, e):
        """Take a frame that failed to write (or to sync) back off the log, so no later
        frame follows garbage and recovery never finds a batch the caller saw fail.
        Frames buffered under ``off`` are lost with it: refuse writes until reopened."""
        try:
            os.ftruncate(self._log_fd, self._log_written)
            if self.config.durability == "off":
                raise OSError(errno.EIO, "buffered frames lost")
        except OSError as e2:
            self._failed = (f"packfile store {self.path}: {LOG} write failed "
                            f"({e.strerror or e}) and could not be rolled back "
                            f"({e2.strerror or e2}); reopen the store")

    def _commit(self, puts, deletes, touched):
        """Append the batch's frame: from here on the batch is durable per the mode."""
        self._seq += 1
        payload = b"".join([_PUT.pack(k, g, n) for k, g, n in puts]
                           + [_DEL.pack(k) for k in deletes])
        head = struct.pack("<QIII", self._seq, len(puts), len(deletes), len(payload))
        crc = zlib.crc32(payload, zlib.crc32(head))
        frame = struct.pack("<II", _FRAME_MAGIC, crc) + head + payload
        mode = self.config.durability
        try:
            if mode == "sync":
                for p in touched:
                    self._sync_fd(self._packs[p].fd, self._pack_path(p))
            self._logbuf.append(frame)
            self._logbuf_bytes += len(frame)
            if mode != "off" or self._logbuf_bytes >= _OFF_LOG_BUFFER:
                self._flush_log()
            if mode == "sync":
                try:
                    faults.fdatasync(self._log_fd, os.path.join(self.path, LOG), "packfile")
                except OSError as e:
                    self._log_written -= len(frame)
                    self._cut_log(e)
                    raise StoreError(f"packfile store {self.path}: fsync of {LOG} failed "
                                     f"({e.strerror or e}); the batch was not "
                                     f"committed") from None
        except BaseException:
            self._seq -= 1
            raise
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
        self._pread(pk.fd, [mv], a, self._pack_path(pk.no))
        return _check_record(mv, off - a, key, n)

    def _buffer(self, size):
        """A page-aligned read buffer of at least ``size`` bytes, reused per thread up to
        64 MiB (fresh buffers cost a page fault per 4 KiB on every read)."""
        if size > _BUF_MAX:
            return aligned_buffer(size)
        buf = getattr(self._tls, "buf", None)
        if buf is None or len(buf) < size:
            cap = 65536
            while cap < size:
                cap *= 2
            buf = self._tls.buf = aligned_buffer(cap)
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
        self._pread(self._packs[p0].fd, [mv], a, self._pack_path(p0))
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
            if self._failed:
                raise StoreError(self._failed)
            placed, touched = self._place([(k, _record(k, v)) for k, v in puts], set(), False)
            self._commit(placed, deletes, touched)
            self._apply(placed, deletes)
            if self._log_bytes > self.checkpoint_bytes + self._ckpt_deferred:
                # the batch is committed: a checkpoint that fails now must not fail
                # it; the log (still complete) is checkpointed on a later try
                try:
                    self._write_checkpoint()
                    self._ckpt_deferred = 0
                except StoreError as e:
                    self.checkpoint_error = str(e)
                    self._ckpt_deferred = self._log_bytes
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
            buf = aligned_buffer(size)
            pos = 0
            for rec in parts:
                buf[pos:pos + len(rec)] = rec
                pos += len(rec)
            try:
                self._pwrite_all(pk.fd, buf, pk.ptr, self._pack_path(pk.no))
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
        self._pread(self._packs[pack_no].fd, [view], offset, self._pack_path(pack_no))
        return length

    def read_aligned(self, pack_no: int, offset: int, length: int) -> mmap.mmap:
        """:meth:`read_into` a new page-aligned buffer of ``length`` bytes."""
        if length <= 0 or length % self.block:
            raise ConfigError(f"packfile read at offset {offset}, length {length}: the length "
                              f"must be a positive multiple of the {self.block}-byte alignment")
        buf = aligned_buffer(length)
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
                self._sync_fd(pk.fd, self._pack_path(pk.no))
            self._sync_fd(self._log_fd, os.path.join(self.path, LOG))

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


@hookimpl
def prefixbench_register_engines(register):
    register("packfile", PackfileStore)
