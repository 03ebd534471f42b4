# Included by the Cython modules that write or check segment records (_segments,
# _segment_hash, _sarp; each cimports numpy as cnp first): the one C implementation
# of the record format of
# plugins/segments (version 1) - the writer, and the checksum that
# segments.checksum_py documents: a 64-bit fold of everything but the checksum
# field (bytes [0, 32) and [40, n)), words little-endian, the last one
# zero-padded.  Needs HEADER (40) and CK_OFF (32) defined by the includer.

cdef uint64_t _SEG_C0 = 0x8F1BBCDCCA62C1D6ULL
cdef uint64_t _SEG_C1 = 0x9E3779B97F4A7C15ULL
cdef uint64_t _SEG_C2 = 0xFF51AFD7ED558CCDULL
cdef uint64_t _SEG_C3 = 0xC4CEB9FE1A85EC53ULL


cdef inline uint64_t _seg_fold(uint64_t h, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Fold ``n`` bytes (the last word zero-padded) into ``h``."""
    cdef Py_ssize_t i = 0, j
    cdef uint64_t w
    while i + 8 <= n:
        memcpy(&w, p + i, 8)          # little-endian hosts only (x86-64, aarch64)
        h = (h ^ w) * _SEG_C2
        h ^= h >> 29
        i += 8
    if i < n:
        w = 0
        for j in range(n - i):
            w |= (<uint64_t>p[i + j]) << (8 * j)
        h = (h ^ w) * _SEG_C2
        h ^= h >> 29
    return h


cdef inline uint64_t _seg_checksum(const uint8_t* raw, Py_ssize_t n) noexcept nogil:
    """Checksum of ``raw[:32] + raw[40:]`` (everything but the checksum field)."""
    cdef uint64_t h = _SEG_C0 ^ (<uint64_t>(n - 8) * _SEG_C1)
    h = _seg_fold(h, raw, CK_OFF)
    h = _seg_fold(h, raw + HEADER, n - HEADER)
    h ^= h >> 32
    h *= _SEG_C3
    h ^= h >> 29
    return h


cdef inline void _seg_write(uint8_t* p, uint64_t seg_id, uint64_t start,
                            const uint8_t* ids, uint32_t n, const uint8_t* metas,
                            uint16_t meta_size) noexcept nogil:
    """Encode one record into ``p`` (``HEADER + n * (8 + meta_size)`` bytes): magic,
    version, meta size, block count, segment id, start, the ids, the metadata rows,
    then the checksum into its field."""
    cdef uint16_t ver = 1
    cdef uint32_t zero = 0
    cdef Py_ssize_t total = HEADER + <Py_ssize_t>n * (8 + meta_size)
    cdef uint64_t h
    memcpy(p, b"PBSG", 4)
    memcpy(p + 4, &ver, 2)
    memcpy(p + 6, &meta_size, 2)
    memcpy(p + 8, &n, 4)
    memcpy(p + 12, &zero, 4)
    memcpy(p + 16, &seg_id, 8)
    memcpy(p + 24, &start, 8)
    memcpy(p + HEADER, ids, <size_t>n * 8)
    memcpy(p + HEADER + <Py_ssize_t>n * 8, metas, <size_t>n * meta_size)
    h = _seg_checksum(p, total)
    memcpy(p + CK_OFF, &h, 8)


cdef inline Py_ssize_t _seg_metas_at(const uint8_t* p, Py_ssize_t n, Py_ssize_t v,
                                     Py_ssize_t meta_size) except -1:
    """Offset of the metadata rows of the ``n``-byte record at ``p``, checking that
    its length matches its block count and that it holds ``v`` blocks."""
    cdef uint32_t cnt
    if n < HEADER:
        raise ValueError("record shorter than its header")
    memcpy(&cnt, p + 8, 4)
    if n != HEADER + <Py_ssize_t>cnt * (8 + meta_size):
        raise ValueError("record length does not match its block count")
    if not 0 <= v <= cnt:
        raise ValueError(f"metas_prefix: {v} blocks of a record of {cnt}")
    return HEADER + <Py_ssize_t>cnt * 8


cdef inline Py_ssize_t _seg_prefix(const uint8_t* a, Py_ssize_t na,
                                   const uint64_t* b, Py_ssize_t nb) noexcept nogil:
    """Leading positions where a record's (unaligned) ids and ``b`` agree."""
    cdef Py_ssize_t n = na if na < nb else nb
    cdef Py_ssize_t i = 0
    cdef uint64_t w
    while i < n:
        memcpy(&w, a + 8 * i, 8)
        if w != b[i]:
            break
        i += 1
    return i


cdef inline Py_ssize_t _seg_verify(const uint8_t* p, Py_ssize_t n, uint64_t key, Py_ssize_t S,
                                   Py_ssize_t meta_size, uint64_t ws, const uint64_t* q,
                                   Py_ssize_t qn) noexcept nogil:
    """The verification rule of plugins/segments.verify_raws for one record read under
    ``key``: -1 when it fails any check (magic, version, meta size, key, at most ``S``
    blocks, length, checksum), else the block-ID prefix it shares with ``q`` (0 when
    it starts elsewhere than ``ws``)."""
    cdef uint16_t ver, ms16
    cdef uint32_t cnt
    cdef uint64_t rkey, start, stored
    if n < HEADER or p[0] != 80 or p[1] != 66 or p[2] != 83 or p[3] != 71:
        return -1
    memcpy(&ver, p + 4, 2)
    memcpy(&ms16, p + 6, 2)
    memcpy(&cnt, p + 8, 4)
    memcpy(&rkey, p + 16, 8)
    memcpy(&start, p + 24, 8)
    memcpy(&stored, p + CK_OFF, 8)
    if ver != 1 or ms16 != meta_size or rkey != key or cnt > S \
            or n != HEADER + <Py_ssize_t>cnt * (8 + meta_size):
        return -1
    if _seg_checksum(p, n) != stored:
        return -1
    if start != ws or qn == 0 or cnt == 0:
        return 0
    return _seg_prefix(p + HEADER, cnt, q, qn)


cdef inline tuple _seg_spliced(const uint8_t* ids, const uint8_t* metas, Py_ssize_t shared,
                               const uint8_t* qids, const uint8_t* qmetas, Py_ssize_t n,
                               Py_ssize_t ms):
    """``(ids, metas)`` new arrays of ``n`` blocks: the first ``shared`` ids and
    ``ms``-byte metadata rows from ``ids``/``metas``, the rest from the query's
    ``qids``/``qmetas`` (both at the query's block 0) - what extending a segment in
    place or copying its shared prefix stores."""
    cdef cnp.npy_intp d1 = n
    cdef cnp.npy_intp d2[2]
    d2[0] = n
    d2[1] = ms
    cdef cnp.ndarray oi = cnp.PyArray_EMPTY(1, &d1, cnp.NPY_UINT64, 0)
    cdef cnp.ndarray om = cnp.PyArray_EMPTY(2, d2, cnp.NPY_UINT8, 0)
    cdef uint8_t* pi = <uint8_t*>cnp.PyArray_DATA(oi)
    cdef uint8_t* pm = <uint8_t*>cnp.PyArray_DATA(om)
    memcpy(pi, ids, shared * 8)
    memcpy(pi + shared * 8, qids + shared * 8, (n - shared) * 8)
    memcpy(pm, metas, shared * ms)
    memcpy(pm + shared * ms, qmetas + shared * ms, (n - shared) * ms)
    return oi, om
