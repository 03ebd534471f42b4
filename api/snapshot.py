"""The one snapshot publication protocol every index strategy uses, and the
durable insert log of strategies whose in-memory state the store cannot rebuild.

Snapshot file ``<dir>/index.pbsnap`` (format version 1, little-endian)::

    0   8  magic  b"PBSNAP\\x00\\x01"
    8   4  format version (1)
    12  4  H = length of the JSON header
    16  H  JSON header: {"strategy", "meta": {...}, "payload_bytes",
                         "sections": [{"name", "dtype", "shape", "offset",
                                       "nbytes", "crc32"}, ...]}
    16+H 4 crc32 of bytes [0, 16 + H)
    ...    payload: the sections, each starting at a multiple of 64 bytes
           from the file start (so a reader may memory-map them), zero padding

Every section carries its own crc32 and the header its crc32, so a flipped
byte anywhere, a cut file (the exact length is known from the header), a
wrong magic or version, or a missing file raise :class:`SnapshotError` - one
line naming the file and what is wrong - and nothing of that file is ever
served.

Publication (:func:`write_snapshot`): write ``index.pbsnap.tmp``, fsync it,
keep the current snapshot as ``index.prev.pbsnap`` (a hard link, renamed into
place), ``rename`` the new one over ``index.pbsnap``, fsync the directory.
``rename`` is atomic, so a reader sees the previous complete snapshot or the
new one, never a mix; a crash before the rename leaves the old snapshot (and a
stale ``.tmp`` that the reader ignores and the next writer replaces).  The
``fault`` hook (or module-level :data:`FAULT_HOOK`) is called after each step
(``"temp-written"``, ``"temp-fsynced"``, ``"previous-kept"``, ``"renamed"``,
``"dir-fsynced"``) so a test can "crash" there by raising.

Two generations: recovery falls back to ``index.prev.pbsnap`` (plus the log
after it) when the newest snapshot is corrupt, so after publishing snapshot N
the insert log is truncated only through snapshot N-1's position
(:meth:`InsertLog.truncate_through`) - it stays bounded by two snapshots'
worth of inserts instead of growing forever.

Insert log ``<dir>/inserts.pblog`` (:class:`InsertLog`): an 8-byte magic and a
u32 meta size, then one record per acknowledged insert: ``u32 n, u64 seq,
n*8 block ids, n*meta_size metadata, u32 crc32`` of everything before it in
the record.  With ``sync=True`` each append is fsynced before ``insert``
returns (durable mode).  A torn record at the tail (a crash mid-append: it was
never acknowledged) ends the log; the reader reports how many bytes it dropped
and the next writer truncates them.

Device faults.  Every write, fsync and rename here goes through
:mod:`prefixbench.faults` (components ``"snapshot"`` and ``"insert-log"``).  A
publication that fails (disk full, I/O error) raises :class:`SnapshotError`,
one line naming the snapshot and the failing path; the temp file is removed
and the published generations are as they were (or the new one is complete,
when only the final directory fsync failed).  A failed append is cut back off
the log, so no later record follows garbage the reader would stop at, and
the log then refuses every change (:meth:`InsertLog.check`): the operation
is already applied in memory but not logged, so only a recovery gives an
index holding exactly what was acknowledged.  A failed truncation leaves the
old log in place.
"""
from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from dataclasses import dataclass, field

import numpy as np

from prefixbench import faults
from prefixbench.durable import fsync_dir
from prefixbench.errors import PrefixbenchError, StoreError

__all__ = ["SnapshotError", "Snapshot", "write_snapshot", "read_snapshot", "snapshot_path",
           "snapshot_bytes", "InsertLog", "FORMAT_VERSION", "SNAPSHOT_FILE", "LOG_FILE",
           "FAULT_STEPS", "PREVIOUS_FILE", "snapshot_log_seq"]

MAGIC = b"PBSNAP\x00\x01"
FORMAT_VERSION = 1
SNAPSHOT_FILE = "index.pbsnap"
PREVIOUS_FILE = "index.prev.pbsnap"
LOG_FILE = "inserts.pblog"
ALIGN = 64
FAULT_STEPS = ("temp-written", "temp-fsynced", "previous-kept", "renamed", "dir-fsynced")
_PREFIX = struct.Struct("<8sII")
_U32 = struct.Struct("<I")
_CHUNK = 64 << 20

#: called as ``FAULT_HOOK(step, path)`` after each publication step when set (tests)
FAULT_HOOK = None


class SnapshotError(PrefixbenchError):
    """A snapshot (or insert log) is missing, truncated, corrupt or of another version."""


@dataclass
class Snapshot:
    path: str
    strategy: str
    meta: dict
    sections: dict = field(default_factory=dict)
    nbytes: int = 0
    #: seconds spent reading bytes and checking checksums
    load_s: float = 0.0


def snapshot_path(directory, previous: bool = False) -> str:
    return os.path.join(os.fspath(directory), PREVIOUS_FILE if previous else SNAPSHOT_FILE)


def snapshot_bytes(directory) -> int:
    p = snapshot_path(directory)
    return os.path.getsize(p) if os.path.exists(p) else 0


def _crc(buf, crc: int = 0) -> int:
    mv = memoryview(buf).cast("B")
    for i in range(0, len(mv), _CHUNK):
        crc = zlib.crc32(mv[i:i + _CHUNK], crc)
    return crc


def _bytes_of(a: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def write_snapshot(directory, strategy: str, meta: dict, sections: dict, fault=None) -> int:
    """Publish a snapshot of ``sections`` (name -> NumPy array) atomically; returns its bytes."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    hook = fault or FAULT_HOOK
    arrays = {k: np.ascontiguousarray(v) for k, v in sections.items()}
    descs, off = [], 0
    for name, a in arrays.items():
        if a.dtype.hasobject:
            raise TypeError(f"snapshot section {name}: object arrays cannot be stored")
        descs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape),
                      "nbytes": int(a.nbytes), "crc32": _crc(_bytes_of(a)) if a.nbytes else 0})
    head = {"strategy": strategy, "meta": meta, "sections": descs}
    # offsets depend on the header length: fix them with two passes
    for _ in range(8):
        js = json.dumps(head, sort_keys=True).encode()
        base = _PREFIX.size + len(js) + _U32.size
        off = -(-base // ALIGN) * ALIGN
        changed = False
        end = base
        for d in descs:
            if d.get("offset") != off:
                d["offset"], changed = off, True
            end = off + d["nbytes"]
            off = -(-end // ALIGN) * ALIGN
        off = end                       # no padding after the last section
        if head.get("payload_bytes") != off:
            head["payload_bytes"], changed = off, True
        if not changed:
            break
    js = json.dumps(head, sort_keys=True).encode()
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(js)) + js
    final = snapshot_path(directory)
    tmp = final + ".tmp"
    where = tmp
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            faults.write_all(fd, prefix + _U32.pack(zlib.crc32(prefix)), tmp, "snapshot")
            pos = len(prefix) + _U32.size
            for d, a in zip(descs, arrays.values()):
                faults.write_all(fd, b"\0" * (d["offset"] - pos), tmp, "snapshot")
                faults.write_all(fd, _bytes_of(a), tmp, "snapshot")
                pos = d["offset"] + d["nbytes"]
            faults.write_all(fd, b"\0" * (off - pos), tmp, "snapshot")
            if hook:
                hook("temp-written", tmp)
            faults.fsync(fd, tmp, "snapshot")
        finally:
            os.close(fd)
        if hook:
            hook("temp-fsynced", tmp)
        if os.path.exists(final):           # keep the current one as the previous generation
            prev = snapshot_path(directory, previous=True)
            where = prev
            if os.path.exists(prev + ".tmp"):
                os.unlink(prev + ".tmp")
            faults.link(final, prev + ".tmp", "snapshot")
            faults.replace(prev + ".tmp", prev, "snapshot")
            if hook:
                hook("previous-kept", prev)
        where = final
        faults.replace(tmp, final, "snapshot")
        if hook:
            hook("renamed", final)
        where = directory
        fsync_dir(directory, "snapshot")
    except OSError as e:
        # the published generations are untouched (or the new one is complete);
        # the half-written temp file goes, so nothing stale is left behind
        for junk in (tmp, snapshot_path(directory, previous=True) + ".tmp"):
            try:
                os.unlink(junk)
            except OSError:
                pass
        raise SnapshotError(f"snapshot {final}: publication failed ({where}: "
                            f"{e.strerror or e})") from None
    if hook:
        hook("dir-fsynced", final)
    return off


def _read_header(f, bad):
    """``(file size, strategy, meta, section descriptors, payload bytes)`` from an open
    snapshot, magic, version and header checksum verified; ``bad(what)`` makes the error."""
    size = os.fstat(f.fileno()).st_size
    raw = f.read(_PREFIX.size)
    if len(raw) < _PREFIX.size:
        raise bad(f"truncated: {size} bytes, shorter than the header")
    magic, version, hlen = _PREFIX.unpack(raw)
    if magic != MAGIC:
        raise bad("not a prefixbench snapshot (bad magic)")
    if version != FORMAT_VERSION:
        raise bad(f"format version {version}, this prefixbench reads version {FORMAT_VERSION}")
    if hlen > size:
        raise bad(f"truncated: header of {hlen} bytes in a {size}-byte file")
    js = f.read(hlen)
    ck = f.read(_U32.size)
    if len(js) < hlen or len(ck) < _U32.size:
        raise bad("truncated inside the header")
    if zlib.crc32(raw + js) != _U32.unpack(ck)[0]:
        raise bad("header checksum mismatch (corrupt)")
    try:
        head = json.loads(js)
        return (size, head["strategy"], head["meta"], head["sections"],
                int(head["payload_bytes"]))
    except (ValueError, KeyError, TypeError):
        raise bad("unreadable header") from None


def read_snapshot(directory, strategy: str | None = None, previous: bool = False) -> Snapshot:
    """The published snapshot (``previous``: the generation before it), every checksum
    verified; :class:`SnapshotError` otherwise."""
    import time
    t0 = time.perf_counter()
    path = snapshot_path(directory, previous)

    def bad(what: str):
        return SnapshotError(f"snapshot {path}: {what}")

    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise bad("missing (no snapshot was published here)") from None
    except OSError as e:
        raise bad(f"cannot open ({e.strerror or e})") from None
    with f:
        size, name, meta, descs, total = _read_header(f, bad)
        if strategy is not None and name != strategy:
            raise bad(f"written by strategy {name}, not {strategy}")
        if size != total:
            raise bad(f"truncated: {size} bytes, the header says {total}"
                      if size < total else f"{size - total} trailing bytes after the payload")
        sections = {}
        pos = f.tell()
        for d in descs:
            dt = np.dtype(d["dtype"])
            if d["offset"] < pos or d["offset"] - pos >= ALIGN:
                raise bad(f"section {d['name']} at an impossible offset")
            if any(f.read(d["offset"] - pos)):
                raise bad(f"non-zero padding before section {d['name']} (corrupt)")
            a = np.empty(d["nbytes"], dtype=np.uint8)
            if f.readinto(memoryview(a)) != d["nbytes"]:
                raise bad(f"truncated in section {d['name']}")
            if (_crc(a) if d["nbytes"] else 0) != d["crc32"]:
                raise bad(f"checksum mismatch in section {d['name']} (corrupt)")
            pos = d["offset"] + d["nbytes"]
            sections[d["name"]] = a.view(dt).reshape(d["shape"])
    return Snapshot(path, name, meta, sections, size, time.perf_counter() - t0)


def snapshot_log_seq(directory, previous: bool = False) -> int | None:
    """The insert-log position a snapshot covers, from its checked header only;
    None when there is no such snapshot or its header does not verify."""
    try:
        with open(snapshot_path(directory, previous), "rb") as f:
            meta = _read_header(f, SnapshotError)[2]
        seq = meta.get("log_seq")
        return None if seq is None else int(seq)
    except (OSError, SnapshotError, AttributeError, ValueError, TypeError):
        return None


# ----------------------------------------------------------------------------- insert log
_LOG_MAGIC = b"PBLOG\x00\x00\x01"
_REC = struct.Struct("<IQ")


class InsertLog:
    """Append-only, checksummed log of acknowledged inserts (see the module doc)."""

    def __init__(self, directory, meta_size: int, sync: bool = True):
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, LOG_FILE)
        self.meta_size = meta_size
        self.sync = sync
        self.seq = 0
        self.dropped_bytes = 0
        self._lock = threading.Lock()       # appends from several threads, truncation
        good = 0
        if os.path.exists(self.path):
            for seq, _ids, _m, end in read_log(self.directory, meta_size, 1 << 63, self):
                self.seq, good = seq, end
        #: the one-line error of a failed append (then every change is refused)
        self.failed = None
        self._f = open(self.path, "r+b" if os.path.exists(self.path) else "w+b")
        fd = self._f.fileno()
        try:
            if good == 0:
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                faults.write_all(fd, _LOG_MAGIC + _U32.pack(meta_size), self.path, "insert-log")
                good = len(_LOG_MAGIC) + _U32.size
            else:
                os.ftruncate(fd, good)   # a torn tail was never acknowledged
            if sync:
                faults.fsync(fd, self.path, "insert-log")
                fsync_dir(self.directory, "insert-log")
        except OSError as e:
            self._f.close()
            raise StoreError(f"insert log {self.path}: cannot open for appending "
                             f"({e.strerror or e})") from None
        self._end = good
        os.lseek(fd, good, os.SEEK_SET)

    def append(self, ids: np.ndarray, metas: np.ndarray) -> int:
        ids = np.ascontiguousarray(ids, dtype="<u8")
        metas = np.ascontiguousarray(metas, dtype=np.uint8)
        with self._lock:
            self.check()
            seq = self.seq + 1
            body = _REC.pack(len(ids), seq) + ids.tobytes() + metas.tobytes()
            fd = self._f.fileno()
            try:
                os.lseek(fd, self._end, os.SEEK_SET)
                faults.write_all(fd, body + _U32.pack(zlib.crc32(body)), self.path,
                                 "insert-log")
                if self.sync:
                    faults.fdatasync(fd, self.path, "insert-log")
            except OSError as e:
                self._roll_back(e)
                raise StoreError(self.failed) from None
            self._end += len(body) + _U32.size
            self.seq = seq
            return seq

    def check(self) -> None:
        """Raise the one-line error of an earlier failed append, if there was one."""
        if self.failed:
            raise StoreError(self.failed)

    def _roll_back(self, e: OSError) -> None:
        """Cut a failed append off the end, so a later record never follows garbage
        (the reader stops at the first bad record), and refuse from now on: the
        operation is applied in memory but not logged, so only a recovery gives a
        state that holds exactly what was acknowledged."""
        fd = self._f.fileno()
        why = f"append failed ({e.strerror or e})"
        try:
            os.ftruncate(fd, self._end)
            if self.sync:
                os.fdatasync(fd)
        except OSError as e2:
            why += f" and could not be cut off ({e2.strerror or e2})"
        self.failed = (f"insert log {self.path}: {why}; the operation was not acknowledged "
                       f"and the index refuses changes until recovered from "
                       f"{self.directory}")

    def truncate_through(self, seq: int) -> int:
        """Drop the records with sequence numbers up to ``seq`` (a snapshot that is
        kept covers them); returns the bytes dropped.  Published like a snapshot
        (temp file, fsync, rename, fsync of the directory), so a crash leaves the
        old log or the new one; appends wait meanwhile."""
        with self._lock:
            self._f.flush()
            hs = len(_LOG_MAGIC) + _U32.size
            start = hs                       # where the first record to keep begins
            for s, _i, _m, end in read_log(self.directory, self.meta_size, 1 << 63):
                if s > seq:
                    break
                start = end
            if start <= hs:
                return 0
            self._f.seek(start)
            tail = self._f.read(self._end - start)
            tmp = self.path + ".tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    faults.write_all(fd, _LOG_MAGIC + _U32.pack(self.meta_size) + tail, tmp,
                                     "insert-log")
                    faults.fsync(fd, tmp, "insert-log")
                finally:
                    os.close(fd)
                faults.replace(tmp, self.path, "insert-log")
            except OSError as e:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise StoreError(f"insert log {self.path}: not truncated ({e.strerror or e}); "
                                 f"the log is unchanged") from None
            self._f.close()
            self._f = open(self.path, "r+b")
            self._end = hs + len(tail)
            os.lseek(self._f.fileno(), self._end, os.SEEK_SET)
            fsync_dir(self.directory, "insert-log")
            return start - hs

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


def read_log(directory, meta_size: int, after: int = 0, owner=None):
    """Yield ``(seq, ids, metas, end offset)`` of intact records with ``seq > after``.

    Stops at the first torn or corrupt record (the crash tail) and records the
    dropped byte count on ``owner.dropped_bytes`` when given.
    """
    path = os.path.join(os.fspath(directory), LOG_FILE)
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        data = f.read()
    hs = len(_LOG_MAGIC) + _U32.size
    if len(data) < hs or data[:len(_LOG_MAGIC)] != _LOG_MAGIC:
        raise SnapshotError(f"insert log {path}: not a prefixbench insert log (bad magic)")
    (ms,) = _U32.unpack_from(data, len(_LOG_MAGIC))
    if ms != meta_size:
        raise SnapshotError(f"insert log {path}: meta_size {ms}, expected {meta_size}")
    pos = hs
    while pos < len(data):
        if pos + _REC.size > len(data):
            break
        n, seq = _REC.unpack_from(data, pos)
        end = pos + _REC.size + n * (8 + ms) + _U32.size
        if end > len(data):
            break
        (ck,) = _U32.unpack_from(data, end - _U32.size)
        if zlib.crc32(memoryview(data)[pos:end - _U32.size]) != ck:
            break
        if seq > after:
            b = pos + _REC.size
            ids = np.frombuffer(data, dtype="<u8", count=n, offset=b).astype(np.uint64)
            metas = np.frombuffer(data, dtype=np.uint8, count=n * ms,
                                  offset=b + 8 * n).reshape(n, ms)
            yield seq, ids, metas, end
        else:
            yield seq, None, None, end
        pos = end
    if owner is not None:
        owner.dropped_bytes = len(data) - pos


def log_first_seq(directory, meta_size: int) -> int:
    """Sequence number of the log's first intact record (0 if none): a log that
    starts at 1 holds every insert ever acknowledged."""
    for seq, _i, _m, _e in read_log(directory, meta_size, after=1 << 63):
        return seq
    return 0
