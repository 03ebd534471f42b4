# Included by the Cython modules that write or check segment records (_segments,
# _segment_hash): the one C implementation of the record checksum that
# plugins/segments.checksum_py documents - a 64-bit fold of everything but the
# checksum field (bytes [0, 32) and [40, n)), words little-endian, the last one
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
