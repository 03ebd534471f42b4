"""The segment store layer shared by every segment strategy (sarp, segment-hash,
segment-radix).

A **segment** holds the block IDs and metadata of up to ``S`` consecutive
blocks of one cached sequence, starting at a window boundary ``kS`` (windows
are ``[kS, (k+1)S)``).  It is stored as one engine record under its segment id,
in the segment key space ``[0, 1 << 56)``; other key spaces a strategy may use
are ``(space << 56) | id``.

Record layout (version 1, little-endian, columnar so that verification scans
one contiguous id array)::

    0   4  magic  b"PBSG"
    4   2  version (1)
    6   2  meta_size
    8   4  n      blocks in the segment
    12  4  reserved (0)
    16  8  seg_id
    24  8  start  block position of the first block (a multiple of S)
    32  8  checksum over bytes [0, 32) and [40, end)
    40     n * 8 block ids, then n * meta_size metadata bytes

Checksum (*pbsum64*): ``h = C0 ^ (len * C1)``; for each little-endian 64-bit
word ``w`` of ``raw[:32]`` then ``raw[40:]`` (each part zero-padded to whole
words): ``h = (h ^ w) * C2; h ^= h >> 29``; finally ``h ^= h >> 32; h *= C3;
h ^= h >> 29`` (mod 2**64).  ``len`` is the checksummed byte count.

A record that fails any check raises :class:`CorruptSegmentError` in
:func:`decode_segment`; :class:`SegmentLayer` treats it as a miss, counts it
and remembers the id, so a corrupt record is never reused.

The compiled codec and verification are :mod:`prefixbench.plugins._segments`;
:mod:`prefixbench.plugins._segments_ref` is their pure-Python reference (the
``*_py`` functions here call it).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from prefixbench import twins
from prefixbench.errors import ConfigError, PrefixbenchError

#: the codec: compiled, or its reference in pure-Python mode (``PREFIXBENCH_PURE=1``)
_segments = twins.load("prefixbench.plugins._segments")
_ref = twins.reference("prefixbench.plugins._segments")

__all__ = ["SEGMENT_KEY_SPACE", "KEY_SPACE_BITS", "CorruptSegmentError", "Segment", "SegmentLayer",
           "encode_segment", "decode_segment", "common_prefix", "space_key", "max_key",
           "encode_segment_py", "decode_segment_py", "common_prefix_py", "checksum_py",
           "verify_raws", "verify_raws_py"]

SEGMENT_KEY_SPACE = 0
KEY_SPACE_BITS = 56
SEGMENT_KEY_LIMIT = 1 << KEY_SPACE_BITS
MAGIC, VERSION, HEADER_SIZE = _ref.MAGIC, _ref.VERSION, _ref.HEADER_SIZE
C0, C1, C2, C3 = _ref.C0, _ref.C1, _ref.C2, _ref.C3     # pbsum64


def space_key(space: int, ident: int) -> int:
    """Key of ``ident`` in key space ``space`` (segments are space 0)."""
    if not 0 <= space < 256 or not 0 <= ident < SEGMENT_KEY_LIMIT:
        raise ValueError(f"key space {space} / id {ident} out of range")
    return (space << KEY_SPACE_BITS) | ident


class CorruptSegmentError(PrefixbenchError):
    """A segment record failed its magic, version, length or checksum check."""


@dataclass
class Segment:
    seg_id: int
    start: int
    ids: np.ndarray     # uint64, n <= S
    metas: np.ndarray   # uint8, (n, meta_size)

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def end(self) -> int:
        """Exclusive block position of the segment's last block."""
        return self.start + len(self.ids)


# ----------------------------------------------------------------------------- codec
def _segment(r) -> Segment:
    if isinstance(r, str):
        raise CorruptSegmentError(f"corrupt segment record: {r}")
    return Segment(*r)


def encode_segment(seg: Segment, meta_size: int) -> bytes:
    """Versioned, checksummed, columnar record of ``seg`` (compiled)."""
    return _segments.encode(seg.seg_id, seg.start, seg.ids, seg.metas, meta_size)


def decode_segment(raw, meta_size: int) -> Segment:
    """Inverse of :func:`encode_segment`; :class:`CorruptSegmentError` on any bad field."""
    return _segment(_segments.decode(raw, meta_size))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Leading positions where two uint64 id arrays agree (compiled, nogil)."""
    return _segments.common_prefix(a, b)


def verify_raws(raws, seg_ids, query_ids, start: int, S: int, meta_size: int):
    """Check raw records and verify them against a query window (compiled, nogil).

    Returns ``(best, v, corrupt)``: index of the first record sharing the
    longest block-ID prefix with ``query_ids`` (-1 if none shares a block),
    that length, and the indexes of records that fail any check (including
    being stored under another key, misaligned, or longer than ``S``).
    Records starting elsewhere than ``start`` are valid but never verified.
    """
    return _segments.verify_raws(list(raws), seg_ids, query_ids, start, S, meta_size)


# the same four (and the checksum) on the pure-Python reference, in either mode
def encode_segment_py(seg: Segment, meta_size: int) -> bytes:
    """Reference of :func:`encode_segment`."""
    return _ref.encode(seg.seg_id, seg.start, seg.ids, seg.metas, meta_size)


def decode_segment_py(raw, meta_size: int) -> Segment:
    """Reference of :func:`decode_segment`."""
    return _segment(_ref.decode(raw, meta_size))


common_prefix_py = _ref.common_prefix
verify_raws_py = _ref.verify_raws
checksum_py = _ref.checksum


# ----------------------------------------------------------------------------- layer
def max_key(store, lo: int, hi: int) -> int | None:
    """The largest key in ``[lo, hi)`` of ``store``, or None if there is none.

    Galloping then binary search over "is there a key in [k, hi)", so an
    ordered engine answers with O(log range) seeks instead of a full scan.
    """
    def has_at_least(k: int) -> bool:
        it = store.scan(k, hi)
        try:
            return next(iter(it), None) is not None
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
    if not has_at_least(lo):
        return None
    a = lo                       # invariant: a key >= a exists
    step = 1
    b = min(lo + step, hi)
    while b < hi and has_at_least(b):
        a, step = b, step * 2
        b = min(lo + step, hi)
    # a key >= a exists, none >= b (or b is hi)
    while b - a > 1:
        mid = (a + b) // 2
        if has_at_least(mid):
            a = mid
        else:
            b = mid
    return a


class SegmentLayer:
    """Segments in a :class:`SegmentStore`: ids, windows, reads, writes, counters.

    Thread-safe: ids come from a locked counter; reads and writes go straight
    to the engine (which is itself thread-safe).  Callers that modify a
    segment in place must serialise those modifications themselves.
    """

    def __init__(self, store, segment_blocks: int = 64, meta_size: int = 16):
        if not isinstance(segment_blocks, int) or segment_blocks < 1:
            raise ConfigError(f"option S: {segment_blocks!r} must be an integer >= 1")
        if not isinstance(meta_size, int) or not 1 <= meta_size <= 0xFFFF:
            raise ConfigError(f"option meta_size: {meta_size!r} must be an integer in 1..65535")
        self.store = store
        self.S = segment_blocks
        self.meta_size = meta_size
        self._id_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._next: int | None = None   # found in the store on first use (see _next_id)
        #: id runs (see new_ids_after): next free slot of each run opened since
        #: ``_run0`` (runs opened earlier count as closed, and so do those of a
        #: snapshot that :meth:`restore_runs` could not reopen)
        self._run_slots = bytearray()
        self._run0: int | None = None
        self.ids_continued = 0       # fresh ids placed right after their predecessor
        self.id_runs_opened = 0
        self.logical_reads = 0       # segment keys requested
        self.read_calls = 0          # get / get_many calls
        self.misses = 0              # requested ids with no record
        self.corrupt_reads = 0       # records that failed decoding (treated as misses)
        self.corrupt_ids: list[int] = []
        self.segments_written = 0    # records put (new or rewritten)
        self.blocks_written = 0

    @property
    def _next_id(self) -> int:
        """The next segment id, found in the store on first use (lazily, so a
        recovery that scans the store anyway can set it with :meth:`resume_at`)."""
        n = self._next
        if n is None:
            n = self._next = self._recover_next_id()
        return n

    @_next_id.setter
    def _next_id(self, value: int) -> None:
        self._next = value

    def resume_at(self, next_id: int) -> None:
        """Set the next id from a complete ordered scan of the segment key space
        (recovery), sparing the store search; ``next_id`` must exceed every stored id.
        The id runs close, unless ``next_id`` is the one :meth:`restore_runs` set."""
        with self._id_lock:
            next_id = max(int(next_id), 1)
            if next_id != self._next:
                self._run_slots, self._run0 = bytearray(), None
            self._next = next_id

    def run_state(self) -> tuple[dict, np.ndarray]:
        """The id runs for a snapshot: ``({"next_segment_id", "first_run",
        "store_mark"}, slots)``, read together with the store's write mark."""
        with self._id_lock:
            mark = self.store.write_mark() if self.store is not None else None
            meta = {"next_segment_id": self._next_id, "first_run": self._run0,
                    "store_mark": mark}
            return meta, np.frombuffer(bytes(self._run_slots), dtype=np.uint8)

    def restore_runs(self, meta: dict, slots=None) -> bool:
        """Reopen the id runs :meth:`run_state` saved, if the store's write mark is still
        the one saved with them (nothing written since, so no id they hold free was
        handed out).  Otherwise, or for a state without them (``slots`` None), leave
        the runs closed (new ids open new runs).  True if reopened."""
        mark = meta.get("store_mark")
        if slots is None or mark is None or "first_run" not in meta or self.store is None \
                or self.store.write_mark() != mark:
            return False
        slots = np.asarray(slots)
        if slots.dtype != np.uint8 or slots.ndim != 1:
            raise ValueError("id run slots must be a 1-d uint8 array")
        r0 = meta["first_run"]
        with self._id_lock:
            self._next = max(int(meta["next_segment_id"]), 1)
            self._run0 = None if r0 is None else int(r0)
            self._run_slots = bytearray(slots.tobytes()) if r0 is not None else bytearray()
        return True

    def _recover_next_id(self) -> int:
        """One past the largest key in the segment key space (1 for an empty store)."""
        top = max_key(self.store, 0, SEGMENT_KEY_LIMIT)
        return 1 if top is None else top + 1

    # ---- ids and windows --------------------------------------------------
    def new_id(self) -> int:
        """A fresh segment id, larger than every id handed out or stored before."""
        return self.new_ids(1)[0]

    def new_ids(self, k: int) -> range:
        """``k`` fresh consecutive segment ids (one lock for a whole batch)."""
        with self._id_lock:
            i = self._next_id
            if i + k > SEGMENT_KEY_LIMIT:
                raise OverflowError("segment ids exhausted the 56-bit key space")
            self._next_id = i + k
            return range(i, i + k)

    def new_ids_after(self, after, run: int) -> tuple[list[int], list[int]]:
        """Fresh ids placed next to their predecessors, so that a sequence's
        consecutive windows sit under adjacent keys (one engine data block then
        serves several windows of one read).

        Ids come in runs of ``run`` aligned ids, each run reserved whole when
        opened.  ``after[i]`` is the id of the segment that precedes the i-th
        new one on its sequence (0: none; ``-(j + 1)``: the j-th id of this
        call).  The i-th id is that id + 1 when it is the last id handed out in
        its run and the run has room, else the first id of a new run.  Returns
        the ids and those of them that continue a run opened before this call
        (a snapshot taken since may not cover them: the caller journals them).
        """
        with self._id_lock:
            ids, earlier, self._run0, self._next, continued, opened = _segments.place_ids(
                after, run, self._run_slots, self._run0, self._next_id)
            self.ids_continued += continued
            self.id_runs_opened += opened
        return ids, earlier

    @property
    def next_id(self) -> int:
        return self._next_id

    def window(self, pos: int) -> tuple[int, int]:
        """The window ``[kS, (k+1)S)`` holding block position ``pos``."""
        s = (pos // self.S) * self.S
        return s, s + self.S

    # ---- reads ------------------------------------------------------------
    def _decode(self, seg_id: int, raw) -> Segment | None:
        if raw is None:
            return None
        try:
            seg = decode_segment(raw, self.meta_size)
            if seg.seg_id != seg_id or seg.start % self.S or seg.n > self.S:
                raise CorruptSegmentError(
                    f"corrupt segment record: key {seg_id} holds segment {seg.seg_id} "
                    f"at {seg.start} with {seg.n} blocks")
        except CorruptSegmentError:
            with self._count_lock:
                self.corrupt_reads += 1
                if len(self.corrupt_ids) < 1000:
                    self.corrupt_ids.append(seg_id)
            return None
        return seg

    def read(self, seg_id: int) -> Segment | None:
        """The segment, or None if absent or corrupt (counted)."""
        raw = self.store.get(seg_id)
        with self._count_lock:
            self.logical_reads += 1
            self.read_calls += 1
            self.misses += raw is None
        return self._decode(seg_id, raw)

    def read_raw_many(self, seg_ids) -> list:
        """Raw records for ``seg_ids`` (one ``get_many``), counted like :meth:`read_many`;
        the caller checks them (:func:`verify_raws`) and reports corrupt ones
        with :meth:`count_corrupt`."""
        ids = seg_ids.tolist() if isinstance(seg_ids, np.ndarray) else [int(i) for i in seg_ids]
        if not ids:
            return []
        raws = self.store.get_many(ids)
        with self._count_lock:
            self.logical_reads += len(ids)
            self.read_calls += 1
            self.misses += raws.count(None)
        return raws

    def count_corrupt(self, seg_ids) -> None:
        """Record corrupt records found by the caller (treated as misses)."""
        with self._count_lock:
            for i in seg_ids:
                self.corrupt_reads += 1
                if len(self.corrupt_ids) < 1000:
                    self.corrupt_ids.append(int(i))

    def decode(self, seg_id: int, raw) -> Segment | None:
        """Decode a raw record read under ``seg_id`` (None if absent or corrupt, counted)."""
        return self._decode(seg_id, raw)

    def read_many(self, seg_ids) -> list[Segment | None]:
        """Segments for ``seg_ids`` in order, with ONE ``store.get_many`` call."""
        ids = seg_ids.tolist() if isinstance(seg_ids, np.ndarray) else [int(i) for i in seg_ids]
        return [self._decode(i, r) for i, r in zip(ids, self.read_raw_many(ids))]

    # ---- writes -----------------------------------------------------------
    def write(self, seg: Segment) -> None:
        self.write_many([seg])

    def write_many(self, segs, extra=()) -> None:
        """All records (and ``extra`` ``(key, bytes)`` items, e.g. a strategy's
        journal record) in one engine write batch (atomic where the engine is); a
        segment with id 0, or one that does not fit its window, is a ValueError."""
        self.write_planned([(s.seg_id, s.start, s.ids, s.metas) for s in segs], (), extra)

    def write_planned(self, writes, fresh_ids, extra=()) -> list[int]:
        """A plan's records (``(segment id, start, ids, metas)``, id 0 taking the next of
        ``fresh_ids``) and ``extra`` items in one engine write batch, as
        :meth:`write_many` does with segments; returns each record's segment id."""
        items, sids, blocks = _segments.encode_writes(writes, fresh_ids, self.S,
                                                      self.meta_size)
        if not items:
            return sids
        nsegs = len(items)
        items.extend(extra)
        self.store.write_items(items)
        with self._count_lock:
            self.segments_written += nsegs
            self.blocks_written += blocks
        return sids

    # ---- the insertion primitive -------------------------------------------
    def extend_or_copy(self, seg: Segment, query_ids, query_metas, shared: int,
                       assign_id: bool = True) -> tuple[Segment, bool]:
        """Make ``query_ids`` (the query's blocks from ``seg.start``) a prefix of a segment.

        ``shared`` is ``common_prefix(seg.ids, query_ids)``.  Returns ``(segment,
        is_new)``:

        * the query adds nothing (``shared == len(query_ids)``): ``seg`` itself,
          False;
        * ``shared`` reaches the segment's end: the same id extended in place
          with the query's suffix (capped at the window end), False;
        * otherwise a NEW segment (fresh id) with ``seg``'s first ``shared``
          blocks (their first metadata kept) and the query's suffix, True.

        The caller writes the result when it differs from ``seg``.  With
        ``assign_id`` False a new segment gets id 0, for the caller to replace
        with :meth:`new_id` when it publishes (a plan made without a lock keeps
        ids in publish order that way).
        """
        n = min(len(query_ids), self.S)
        if not 0 <= shared <= min(seg.n, n):
            raise ValueError(f"shared={shared} outside 0..{min(seg.n, n)}")
        if shared == n:
            return seg, False
        ids, metas = _segments.splice(seg.ids, seg.metas, query_ids, query_metas, shared, self.S)
        return self._spliced(seg.seg_id, seg.start, seg.n, ids, metas, shared, assign_id)

    def _spliced(self, seg_id, start, n_old, ids, metas, shared, assign_id):
        """The segment a splice of ``shared`` stored blocks made: the same id extended
        in place when it shared the whole stored segment, else a new one."""
        if shared == n_old:
            return Segment(seg_id, start, ids, metas), False
        return Segment(self.new_id() if assign_id else 0, start, ids, metas), True

    def new_segment(self, start: int, ids, metas, assign_id: bool = True) -> Segment:
        """A fresh segment for blocks ``ids`` at window start ``start`` (id 0 without
        ``assign_id``, as in :meth:`extend_or_copy`)."""
        if start % self.S:
            raise ValueError(f"segment start {start} is not a multiple of {self.S}")
        ids = np.ascontiguousarray(ids, dtype=np.uint64)[:self.S]
        metas = np.ascontiguousarray(metas, dtype=np.uint8)[:self.S]
        return Segment(self.new_id() if assign_id else 0, start, ids, metas)

    def stats(self) -> dict:
        return {"segment_reads": self.logical_reads, "segment_read_calls": self.read_calls,
                "segment_misses": self.misses, "corrupt_segments": self.corrupt_reads,
                "segments_written": self.segments_written, "next_segment_id": self._next_id,
                "ids_continued": self.ids_continued, "id_runs_opened": self.id_runs_opened}
