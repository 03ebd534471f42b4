# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled segment-record codec and block-ID verification.

The record layout, the checksum and the verification rule are documented in
:mod:`prefixbench.plugins.segments`; the pure-Python reference with the same
names, which the tests hold these functions equal to, is
:mod:`prefixbench.plugins._segments_ref`.  Checksumming and verification run
without the GIL.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.stdlib cimport free, malloc
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

__all__ = ["HEADER_SIZE", "MAGIC", "VERSION", "checksum", "common_prefix", "decode", "encode",
           "encode_writes", "metas_prefix", "place_ids", "splice", "splice_record",
           "verify_raws", "views"]

cnp.import_array()

# views of a record are built per verified window: positional ndarray() calls with
# these dtypes cost a third of np.frombuffer's keyword form
_ndarray = np.ndarray
_U64 = np.dtype("<u8")
_U8 = np.dtype(np.uint8)

DEF HEADER = 40
DEF CK_OFF = 32
DEF KEY_LIMIT = 1 << 56

include "_segment_record.pxi"
include "_arrays.pxi"


cdef inline tuple _record_arrays(bytes buf, Py_ssize_t count, Py_ssize_t meta_size):
    """Read-only ``(ids, metas)`` views of a record of ``count`` blocks."""
    return (_ndarray((count,), _U64, buf, HEADER),
            _ndarray((count, meta_size), _U8, buf, HEADER + count * 8))


MAGIC = b"PBSG"
VERSION = 1
HEADER_SIZE = HEADER


def checksum(raw):
    """The record checksum of an encoded record (its checksum field is skipped)."""
    cdef const uint8_t[:] v = memoryview(raw).cast("B")
    cdef Py_ssize_t n = v.shape[0]
    cdef uint64_t h
    if n < HEADER:
        raise ValueError(f"a segment record has at least {HEADER} bytes, got {n}")
    h = _seg_checksum(&v[0], n)
    return h


def encode(uint64_t seg_id, uint64_t start, ids, metas, Py_ssize_t meta_size):
    """One record: header, all block ids (u64 LE), then all metadata rows."""
    cdef cnp.ndarray a = as_carray(ids, cnp.NPY_UINT64, 1, "segment ids")
    cdef cnp.ndarray m = as_carray(metas, cnp.NPY_UINT8, 2, "segment metas")
    cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0)
    if cnp.PyArray_DIM(m, 0) != n or cnp.PyArray_DIM(m, 1) != meta_size:
        raise ValueError(f"segment metas must have shape ({n}, {meta_size}), "
                         f"got {(<object>m).shape}")
    if meta_size < 1 or meta_size > 0xFFFF:
        raise ValueError(f"meta_size must be in 1..65535, got {meta_size}")
    cdef Py_ssize_t total = HEADER + n * (8 + meta_size)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef const uint8_t* ap = <const uint8_t*>cnp.PyArray_DATA(a)
    cdef const uint8_t* mp = <const uint8_t*>cnp.PyArray_DATA(m)
    _seg_write(p, seg_id, start, ap, <uint32_t>n, mp, <uint16_t>meta_size)
    return out


def encode_writes(list writes, fresh_ids, Py_ssize_t S, Py_ssize_t meta_size):
    """A plan's records in one call: as the reference's ``encode_writes`` (its doc has
    the rules)."""
    cdef list items = [], sids = []
    cdef Py_ssize_t blocks = 0, f = 0, nf = len(fresh_ids), n
    cdef uint64_t seg_id, start
    cdef cnp.ndarray a, m
    cdef tuple w
    if meta_size < 1 or meta_size > 0xFFFF:
        raise ValueError(f"meta_size must be in 1..65535, got {meta_size}")
    for w in writes:
        seg_id = w[0]
        if seg_id == 0:
            if f >= nf:
                raise ValueError("encode_writes: fewer fresh ids than fresh records")
            seg_id = fresh_ids[f]
            f += 1
        start = w[1]
        a = as_carray(w[2], cnp.NPY_UINT64, 1, "segment ids")
        m = as_carray(w[3], cnp.NPY_UINT8, 2, "segment metas")
        n = cnp.PyArray_DIM(a, 0)
        if start % <uint64_t>S or n > S or seg_id == 0 or seg_id >= KEY_LIMIT:
            raise ValueError(f"segment {seg_id} at {start} with {n} blocks does not fit a "
                             f"window of {S}")
        if cnp.PyArray_DIM(m, 0) != n or cnp.PyArray_DIM(m, 1) != meta_size:
            raise ValueError(f"segment metas must have shape ({n}, {meta_size}), "
                             f"got {(<object>m).shape}")
        out = PyBytes_FromStringAndSize(NULL, HEADER + n * (8 + meta_size))
        _seg_write(<uint8_t*>PyBytes_AS_STRING(out), seg_id, start,
                   <const uint8_t*>cnp.PyArray_DATA(a), <uint32_t>n,
                   <const uint8_t*>cnp.PyArray_DATA(m), <uint16_t>meta_size)
        items.append((seg_id, out))
        sids.append(seg_id)
        blocks += n
    return items, sids, blocks


def place_ids(after, int64_t run, bytearray slots, r0, int64_t next_id):
    """Fresh segment ids in runs: as the reference's ``place_ids`` (its doc has the
    rules), ``slots`` updated in place."""
    cdef list ids = [], earlier = []
    cdef int64_t p, r, slot, i, base, opened_from = -1, continued = 0, opened = 0
    cdef int64_t rr0 = -1 if r0 is None else r0
    if run < 2 or run > 255:
        raise ValueError("id runs need 2 <= run <= 255")
    for a in after:
        p = a
        if p < 0:
            p = ids[-p - 1]
        if p > 0 and rr0 >= 0:
            r = p // run
            slot = p % run
            i = r - rr0
            if 0 <= i < len(slots) and slots[i] == slot + 1 and slot + 1 < run:
                slots[i] = slot + 2
                ids.append(p + 1)
                if opened_from < 0 or i < opened_from:
                    earlier.append(p + 1)
                continued += 1
                continue
        base = (next_id + run - 1) // run * run
        if base + run > KEY_LIMIT:
            raise OverflowError("segment ids exhausted the 56-bit key space")
        r = base // run
        if rr0 < 0:
            rr0 = r
        i = r - rr0
        if i > len(slots):
            slots.extend(bytes([run]) * (i - len(slots)))    # skipped: closed
        slots.append(1)
        if opened_from < 0:
            opened_from = i
        next_id = base + run
        ids.append(base)
        opened += 1
    return ids, earlier, (None if rr0 < 0 else rr0), next_id, continued, opened


cdef Py_ssize_t _header(bytes raw, Py_ssize_t meta_size, uint64_t* seg_id,
                        uint64_t* start) except -1:
    """The block count of a record :func:`verify_raws` accepted, its id and start put
    in ``seg_id``/``start``; only the length is re-checked (no checksum pass)."""
    cdef Py_ssize_t ln = len(raw)
    cdef uint32_t cnt
    if ln < HEADER:
        raise ValueError("record shorter than its header")
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(raw)
    memcpy(&cnt, p + 8, 4)
    memcpy(seg_id, p + 16, 8)
    memcpy(start, p + 24, 8)
    if ln != HEADER + <Py_ssize_t>cnt * (8 + meta_size):
        raise ValueError("record length does not match its block count")
    return cnt


cdef tuple _splice(const uint8_t* ids, const uint8_t* metas, Py_ssize_t na, qids, qmetas,
                   Py_ssize_t shared, Py_ssize_t S, Py_ssize_t ms):
    """``(ids, metas)`` new arrays: the first ``shared`` of ``na`` stored blocks (their
    ids and ``ms``-byte metas at ``ids``/``metas``), then the query's up to ``S``."""
    cdef cnp.ndarray q = as_ids(qids)
    cdef cnp.ndarray qm = as_carray(qmetas, cnp.NPY_UINT8, 2, "query metas")
    cdef Py_ssize_t nq = cnp.PyArray_DIM(q, 0)
    cdef Py_ssize_t n = nq if nq < S else S
    if cnp.PyArray_DIM(qm, 0) < n or cnp.PyArray_DIM(qm, 1) != ms:
        raise ValueError("splice: one metadata row of the same size per block")
    if not 0 <= shared <= min(na, n):
        raise ValueError(f"shared={shared} outside 0..{min(na, n)}")
    return _seg_spliced(ids, metas, shared, <const uint8_t*>cnp.PyArray_DATA(q),
                        <const uint8_t*>cnp.PyArray_DATA(qm), n, ms)


def splice(ids, metas, qids, qmetas, Py_ssize_t shared, Py_ssize_t S):
    """``(ids, metas)`` of a segment's first ``shared`` blocks followed by the query's
    blocks from ``shared`` up to ``min(len(qids), S)`` (new arrays): what extending a
    segment in place or copying its shared prefix stores."""
    cdef cnp.ndarray a = as_ids(ids)
    cdef cnp.ndarray am = as_carray(metas, cnp.NPY_UINT8, 2, "segment metas")
    cdef Py_ssize_t na = cnp.PyArray_DIM(a, 0)
    if cnp.PyArray_DIM(am, 0) != na:
        raise ValueError("splice: one metadata row of the same size per block")
    return _splice(<const uint8_t*>cnp.PyArray_DATA(a), <const uint8_t*>cnp.PyArray_DATA(am),
                   na, qids, qmetas, shared, S, cnp.PyArray_DIM(am, 1))


def splice_record(bytes raw, qids, qmetas, Py_ssize_t shared, Py_ssize_t S,
                  Py_ssize_t meta_size):
    """``(seg_id, start, n, ids, metas)``: the header of a record :func:`verify_raws`
    accepted (``n`` its block count) and :func:`splice` of its blocks with the query's,
    copied straight from the record (no views of it are made)."""
    cdef uint64_t seg_id, start
    cdef Py_ssize_t na = _header(raw, meta_size, &seg_id, &start)
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(raw)
    oi, om = _splice(p + HEADER, p + HEADER + na * 8, na, qids, qmetas, shared, S, meta_size)
    return seg_id, start, na, oi, om


def decode(raw, Py_ssize_t meta_size):
    """``(seg_id, start, ids, metas)`` or a ``str`` saying what is wrong.

    ``ids``/``metas`` are read-only views of ``raw`` when it is ``bytes``.
    """
    cdef const uint8_t[:] v
    try:
        v = memoryview(raw).cast("B")
    except TypeError:
        return f"value is not bytes-like ({type(raw).__name__})"
    cdef Py_ssize_t n = v.shape[0]
    cdef uint16_t ver, ms16
    cdef uint32_t count
    cdef uint64_t seg_id, start, stored, h
    if n < HEADER:
        return f"record has {n} bytes, shorter than the {HEADER}-byte header"
    cdef const uint8_t* p = &v[0]
    if p[0] != 80 or p[1] != 66 or p[2] != 83 or p[3] != 71:   # b"PBSG"
        return "bad magic"
    memcpy(&ver, p + 4, 2)
    memcpy(&ms16, p + 6, 2)
    memcpy(&count, p + 8, 4)
    memcpy(&seg_id, p + 16, 8)
    memcpy(&start, p + 24, 8)
    memcpy(&stored, p + CK_OFF, 8)
    if ver != VERSION:
        return f"unsupported record version {ver}"
    if ms16 != meta_size:
        return f"record meta_size {ms16}, expected {meta_size}"
    if n != HEADER + <Py_ssize_t>count * (8 + meta_size):
        return f"record length {n} does not match {count} blocks"
    h = _seg_checksum(p, n)
    if h != stored:
        return "checksum mismatch"
    return (seg_id, start, *_record_arrays(raw if isinstance(raw, bytes) else bytes(raw),
                                           count, meta_size))


cdef inline Py_ssize_t _common_prefix(const uint64_t* a, Py_ssize_t na,
                                      const uint64_t* b, Py_ssize_t nb) noexcept nogil:
    cdef Py_ssize_t n = na if na < nb else nb
    cdef Py_ssize_t i = 0
    # four at a time, then the rest: the compiler vectorises the wide compare
    while i + 4 <= n and a[i] == b[i] and a[i + 1] == b[i + 1] and a[i + 2] == b[i + 2] \
            and a[i + 3] == b[i + 3]:
        i += 4
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_prefix(a, b):
    """Number of leading positions where the two uint64 id arrays agree."""
    cdef const uint64_t[::1] x = np.ascontiguousarray(a, dtype=np.uint64)
    cdef const uint64_t[::1] y = np.ascontiguousarray(b, dtype=np.uint64)
    cdef Py_ssize_t nx = x.shape[0], ny = y.shape[0], r
    if nx == 0 or ny == 0:
        return 0
    r = _common_prefix(&x[0], nx, &y[0], ny)
    return r


def verify_raws(list raws, seg_ids, qw, uint64_t ws, Py_ssize_t S, Py_ssize_t meta_size):
    """Check and verify a batch of raw records against the query window ``qw``.

    For each record (None = absent): full record check (magic, version,
    meta_size, length, checksum, the key it was read under, aligned start
    ``ws``, at most ``S`` blocks), then the block-ID common prefix with
    ``qw``.  Returns ``(best, v, corrupt)``: the index of the first record
    with the longest verified prefix (-1 if none verified a block), that
    length, and the indexes of corrupt records.  Runs without the GIL.
    """
    cdef Py_ssize_t n = len(raws), i, count_ok = 0, best = -1, bestv = 0, v
    # called per batch of records: typed memoryviews would cost more than the checks
    cdef cnp.ndarray qa = as_ids(qw)
    cdef cnp.ndarray sa = as_carray(seg_ids, cnp.NPY_UINT64, 1, "segment ids")
    cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(qa)
    cdef const uint64_t* sid = <const uint64_t*>cnp.PyArray_DATA(sa)
    cdef Py_ssize_t qn = cnp.PyArray_DIM(qa, 0)
    if cnp.PyArray_DIM(sa, 0) != n:
        raise ValueError("verify_raws: one segment id per record")
    if n == 0:
        return -1, 0, []
    cdef const uint8_t** ptr = <const uint8_t**>malloc(n * sizeof(uint8_t*))
    cdef Py_ssize_t* lens = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    cdef int* status = <int*>malloc(n * sizeof(int))
    if ptr == NULL or lens == NULL or status == NULL:
        free(ptr); free(lens); free(status)
        raise MemoryError()
    keep = []
    for i in range(n):
        r = raws[i]
        if r is None:
            ptr[i] = NULL
            lens[i] = 0
        else:
            if not isinstance(r, bytes):
                r = bytes(r)
            keep.append(r)
            ptr[i] = <const uint8_t*>PyBytes_AS_STRING(r)
            lens[i] = len(<bytes>r)
    for i in range(n):
        status[i] = 0
        if ptr[i] == NULL:
            continue
        v = _seg_verify(ptr[i], lens[i], sid[i], S, meta_size, ws, q, qn)
        if v < 0:
            status[i] = 1
        elif v > bestv:
            bestv = v
            best = i
    corrupt = [i for i in range(n) if status[i] == 1]
    free(ptr); free(lens); free(status)
    return best, bestv, corrupt


def views(bytes raw, Py_ssize_t meta_size):
    """``(seg_id, start, ids, metas)`` views of a record :func:`verify_raws` accepted
    (no second checksum pass; only the length is re-checked)."""
    cdef uint64_t seg_id, start
    cdef Py_ssize_t cnt = _header(raw, meta_size, &seg_id, &start)
    return (seg_id, start, *_record_arrays(raw, cnt, meta_size))


def metas_prefix(bytes raw, Py_ssize_t v, Py_ssize_t meta_size):
    """A read-only view of the first ``v`` blocks' metadata of a record
    :func:`verify_raws` accepted (what a match returns from it), without the ids."""
    cdef Py_ssize_t at = _seg_metas_at(<const uint8_t*>PyBytes_AS_STRING(raw), len(raw), v,
                                       meta_size)
    return _ndarray((v, meta_size), _U8, raw, at)
