"""Pure-Python reference of :mod:`prefixbench.plugins._segments`: the segment-record
codec and block-ID verification with the same public names, checks, messages and
bytes, written from the layout :mod:`prefixbench.plugins.segments` documents.

Per-block work that would be a Python loop (the common prefix) is NumPy, so
pure-Python mode stays usable; the checksum is the one word-by-word loop.
"""
from __future__ import annotations

import struct

import numpy as np

__all__ = ["HEADER_SIZE", "MAGIC", "VERSION", "checksum", "common_prefix", "decode", "encode",
           "encode_writes", "metas_prefix", "place_ids", "splice", "splice_record",
           "verify_raws", "views"]

MAGIC = b"PBSG"
VERSION = 1
HEADER_SIZE = 40
#: pbsum64 constants
C0 = 0x8F1BBCDCCA62C1D6
C1 = 0x9E3779B97F4A7C15
C2 = 0xFF51AFD7ED558CCD
C3 = 0xC4CEB9FE1A85EC53
_HEADER = struct.Struct("<4sHHIIQQQ")
_MASK = (1 << 64) - 1
#: segment ids live in key space 0: below 1 << 56
_KEY_LIMIT = 1 << 56


def _words(data: bytes) -> list[int]:
    pad = (-len(data)) % 8
    return list(struct.unpack(f"<{(len(data) + pad) // 8}Q", data + b"\0" * pad))


def _checksum(raw: bytes) -> int:
    """pbsum64 over bytes [0, 32) and [40, end) of a record."""
    h = C0 ^ (((len(raw) - 8) * C1) & _MASK)
    for part in (raw[:32], raw[HEADER_SIZE:]):
        for w in _words(part):
            h = ((h ^ w) * C2) & _MASK
            h ^= h >> 29
    h ^= h >> 32
    h = (h * C3) & _MASK
    h ^= h >> 29
    return h


def checksum(raw) -> int:
    """The record checksum of an encoded record (its checksum field is skipped)."""
    raw = memoryview(raw).cast("B").tobytes()
    if len(raw) < HEADER_SIZE:
        raise ValueError(f"a segment record has at least {HEADER_SIZE} bytes, got {len(raw)}")
    return _checksum(raw)


def encode(seg_id, start, ids, metas, meta_size) -> bytes:
    """One record: header, all block ids (u64 LE), then all metadata rows."""
    a = np.ascontiguousarray(ids, dtype=np.uint64)
    m = np.ascontiguousarray(metas, dtype=np.uint8)
    if a.ndim != 1:
        raise ValueError("segment ids must be 1-D")
    if m.ndim != 2 or m.shape != (len(a), meta_size):
        raise ValueError(f"segment metas must have shape ({len(a)}, {meta_size}), got {m.shape}")
    if not 1 <= meta_size <= 0xFFFF:
        raise ValueError(f"meta_size must be in 1..65535, got {meta_size}")
    if not (0 <= seg_id <= _MASK and 0 <= start <= _MASK):
        raise OverflowError("segment id and start must fit in 64 bits")
    head = _HEADER.pack(MAGIC, VERSION, meta_size, len(a), 0, int(seg_id), int(start), 0)
    raw = bytearray(head + a.astype("<u8").tobytes() + m.tobytes())
    raw[32:40] = struct.pack("<Q", _checksum(bytes(raw)))
    return bytes(raw)


def encode_writes(writes, fresh_ids, S, meta_size):
    """Records of a plan's ``writes`` (``(segment id, start, ids, metas)``, id 0 for a
    fresh one, which takes the next of ``fresh_ids``): ``(items, ids, blocks)`` with
    ``items`` the ``(key, record)`` pairs in order, ``ids`` every record's segment id
    and ``blocks`` their block count.  A record that does not fit a window of ``S``,
    or an id outside the segment key space, is a ValueError naming it."""
    items, sids, blocks, f = [], [], 0, 0
    for seg_id, start, ids, metas in writes:
        if seg_id == 0:
            if f >= len(fresh_ids):
                raise ValueError("encode_writes: fewer fresh ids than fresh records")
            seg_id = fresh_ids[f]
            f += 1
        n = len(ids)
        if start % S or n > S or not 0 < seg_id < _KEY_LIMIT:
            raise ValueError(f"segment {seg_id} at {start} with {n} blocks does not fit a "
                             f"window of {S}")
        items.append((seg_id, encode(seg_id, start, ids, metas, meta_size)))
        sids.append(seg_id)
        blocks += n
    return items, sids, blocks


def place_ids(after, run, slots, r0, next_id):
    """Fresh segment ids in runs of ``run`` (the rules are
    :meth:`prefixbench.plugins.segments.SegmentLayer.new_ids_after`'s): ``slots`` (a
    bytearray, updated in place) holds the next free slot of each run opened since
    run ``r0`` (None: none yet), ``next_id`` the first id no run holds.  Returns
    ``(ids, earlier, r0, next_id, continued, opened)``; OverflowError when the ids
    would leave the segment key space."""
    if not 2 <= run <= 255:
        raise ValueError("id runs need 2 <= run <= 255")
    ids, earlier = [], []
    opened_from = None
    continued = opened = 0
    for a in after:
        p = ids[-a - 1] if a < 0 else a
        if p > 0 and r0 is not None:
            r, slot = divmod(p, run)
            i = r - r0
            if 0 <= i < len(slots) and slots[i] == slot + 1 and slot + 1 < run:
                slots[i] += 1
                ids.append(p + 1)
                if opened_from is None or i < opened_from:
                    earlier.append(p + 1)
                continued += 1
                continue
        base = -(-next_id // run) * run
        if base + run > _KEY_LIMIT:
            raise OverflowError("segment ids exhausted the 56-bit key space")
        r = base // run
        if r0 is None:
            r0 = r
        i = r - r0
        if i > len(slots):
            slots.extend(bytes([run]) * (i - len(slots)))    # skipped: closed
        slots.append(1)
        if opened_from is None:
            opened_from = i
        next_id = base + run
        ids.append(base)
        opened += 1
    return ids, earlier, r0, next_id, continued, opened


def _problem(raw, meta_size: int):
    """``(raw as bytes, (seg_id, start, n))`` of a sound record, or a ``str`` saying what
    is wrong (the compiled checks, in their order, with their messages)."""
    try:
        raw = memoryview(raw).cast("B").tobytes()
    except TypeError:
        return f"value is not bytes-like ({type(raw).__name__})"
    if len(raw) < HEADER_SIZE:
        return f"record has {len(raw)} bytes, shorter than the {HEADER_SIZE}-byte header"
    magic, ver, ms, n, _res, seg_id, start, ck = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        return "bad magic"
    if ver != VERSION:
        return f"unsupported record version {ver}"
    if ms != meta_size:
        return f"record meta_size {ms}, expected {meta_size}"
    if len(raw) != HEADER_SIZE + n * (8 + meta_size):
        return f"record length {len(raw)} does not match {n} blocks"
    if _checksum(raw) != ck:
        return "checksum mismatch"
    return raw, (seg_id, start, n)


def _arrays(raw: bytes, n: int, meta_size: int):
    ids = np.frombuffer(raw, dtype="<u8", count=n, offset=HEADER_SIZE)
    metas = np.frombuffer(raw, dtype=np.uint8, count=n * meta_size,
                          offset=HEADER_SIZE + 8 * n).reshape(n, meta_size)
    return ids, metas


def decode(raw, meta_size):
    """``(seg_id, start, ids, metas)`` or a ``str`` saying what is wrong."""
    r = _problem(raw, meta_size)
    if isinstance(r, str):
        return r
    raw, (seg_id, start, n) = r
    return (seg_id, start, *_arrays(raw, n, meta_size))


def common_prefix(a, b) -> int:
    """Number of leading positions where the two uint64 id arrays agree."""
    x = np.ascontiguousarray(a, dtype=np.uint64)
    y = np.ascontiguousarray(b, dtype=np.uint64)
    n = min(len(x), len(y))
    if n == 0:
        return 0
    diff = np.flatnonzero(x[:n] != y[:n])
    return int(diff[0]) if len(diff) else n


def verify_raws(raws, seg_ids, qw, ws, S, meta_size):
    """``(best, v, corrupt)``: the first record sharing the longest block-ID prefix with
    the query window ``qw`` (-1 if none), that length, and the records failing a check
    (stored under another id, longer than ``S``); records starting elsewhere than
    ``ws`` are valid but not verified."""
    raws, sids = list(raws), np.asarray(seg_ids, np.uint64).reshape(-1).tolist()
    if len(sids) != len(raws):
        raise ValueError("verify_raws: one segment id per record")
    best, bestv, corrupt = -1, 0, []
    for i, (raw, sid) in enumerate(zip(raws, sids)):
        if raw is None:
            continue
        r = _problem(raw, meta_size)
        if isinstance(r, str):
            corrupt.append(i)
            continue
        data, (seg_id, start, n) = r
        if seg_id != sid or n > S:
            corrupt.append(i)
            continue
        if start != ws:
            continue
        v = common_prefix(_arrays(data, n, meta_size)[0], qw)
        if v > bestv:
            best, bestv = i, v
    return best, bestv, corrupt


def views(raw, meta_size):
    """``(seg_id, start, ids, metas)`` views of a record :func:`verify_raws` accepted
    (only the length is re-checked)."""
    if not isinstance(raw, bytes):
        raise TypeError(f"views: expected bytes, got {type(raw).__name__}")
    if len(raw) < HEADER_SIZE:
        raise ValueError("record shorter than its header")
    _m, _v, _ms, cnt, _r, seg_id, start, _ck = _HEADER.unpack_from(raw)
    if len(raw) != HEADER_SIZE + cnt * (8 + meta_size):
        raise ValueError("record length does not match its block count")
    return (seg_id, start, *_arrays(raw, cnt, meta_size))


def metas_prefix(raw, v, meta_size):
    """The first ``v`` blocks' metadata of a record :func:`verify_raws` accepted."""
    _sid, _start, _ids, metas = views(raw, meta_size)
    if not 0 <= v <= len(metas):
        raise ValueError(f"metas_prefix: {v} blocks of a record of {len(metas)}")
    return metas[:v]


def splice_record(raw, qids, qmetas, shared, S, meta_size):
    """``(seg_id, start, n, ids, metas)``: a verified record's header (``n`` its block
    count) and :func:`splice` of its blocks with the query's."""
    seg_id, start, ids, metas = views(raw, meta_size)
    return (seg_id, start, len(ids), *splice(ids, metas, qids, qmetas, shared, S))


def splice(ids, metas, qids, qmetas, shared, S):
    """``(ids, metas)``: a segment's first ``shared`` blocks, then the query's from
    ``shared`` up to ``min(len(qids), S)``."""
    ids, qids = np.asarray(ids, np.uint64), np.asarray(qids, np.uint64)
    metas, qmetas = np.asarray(metas, np.uint8), np.asarray(qmetas, np.uint8)
    n = min(len(qids), S)
    if metas.ndim != 2 or qmetas.ndim != 2 or len(metas) != len(ids) or len(qmetas) < n \
            or qmetas.shape[1] != metas.shape[1]:
        raise ValueError("splice: one metadata row of the same size per block")
    if not 0 <= shared <= min(len(ids), n):
        raise ValueError(f"shared={shared} outside 0..{min(len(ids), n)}")
    return (np.concatenate((ids[:shared], qids[shared:n])),
            np.concatenate((metas[:shared], qmetas[shared:n])))
