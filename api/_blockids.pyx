# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled pbh64 chaining; see prefixbench.blockids for the definition."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint32_t, uint64_t

__all__ = ["chain_ids", "chain_tokens", "pbh64_words"]

cnp.import_array()

cdef uint64_t K0 = 0x46DF2EF7ACB7317FULL
cdef uint64_t K1 = 0xA13772D18C099AA3ULL
cdef uint64_t K2 = 0xD98331B2C94C5A2FULL
cdef uint64_t K3 = 0x23B3F97FDAD562E5ULL
cdef uint64_t K4 = 0x2074745E9FDFFE39ULL
cdef uint64_t K5 = 0x724151119C873779ULL


cdef inline uint64_t _rotl31(uint64_t x) noexcept nogil:
    return (x << 31) | (x >> 33)


cdef inline uint64_t _finish(uint64_t acc) noexcept nogil:
    acc ^= acc >> 33
    acc *= K4
    acc ^= acc >> 29
    acc *= K5
    acc ^= acc >> 32
    return acc


cdef inline uint64_t _block_hash(uint64_t prev, const uint32_t* t, Py_ssize_t n) noexcept nogil:
    cdef uint64_t acc = (prev ^ K0) + (<uint64_t>n) * K1
    cdef Py_ssize_t i = 0
    cdef uint64_t w
    while i + 1 < n:
        w = (<uint64_t>t[i]) | ((<uint64_t>t[i + 1]) << 32)
        acc ^= w * K2
        acc = _rotl31(acc) * K3
        i += 2
    if i < n:
        acc ^= (<uint64_t>t[i]) * K2
        acc = _rotl31(acc) * K3
    return _finish(acc)


def pbh64_words(uint64_t prev, const uint64_t[::1] words, uint64_t n):
    """pbh64 over explicit 64-bit words (for tests and namespace seeds)."""
    cdef uint64_t acc = (prev ^ K0) + n * K1
    cdef Py_ssize_t i
    with nogil:
        for i in range(words.shape[0]):
            acc ^= words[i] * K2
            acc = _rotl31(acc) * K3
        acc = _finish(acc)
    return acc


def chain_tokens(tokens, Py_ssize_t block_size, uint64_t h0):
    """Chained ids of every full block of a uint32 token array."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    cdef const uint32_t[::1] toks = np.ascontiguousarray(tokens, dtype=np.uint32)
    cdef Py_ssize_t n_blocks = toks.shape[0] // block_size
    out = np.empty(n_blocks, dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef uint64_t h = h0
    cdef Py_ssize_t b
    if n_blocks == 0:
        return out
    with nogil:
        for b in range(n_blocks):
            h = _block_hash(h, &toks[b * block_size], block_size)
            o[b] = h
    return out


def chain_ids(ids, uint64_t h0):
    """Chain per-block hash ids (one word per block)."""
    cdef const uint64_t[::1] v = np.ascontiguousarray(ids, dtype=np.uint64)
    out = np.empty(v.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef uint64_t h = h0, acc
    cdef Py_ssize_t i
    with nogil:
        for i in range(v.shape[0]):
            acc = (h ^ K0) + K1
            acc ^= v[i] * K2
            acc = _rotl31(acc) * K3
            h = _finish(acc)
            o[i] = h
    return out
