# Included by the Cython modules that write or check segment records (_segments,
# _segment_hash): the one C implementation of the record format of
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
