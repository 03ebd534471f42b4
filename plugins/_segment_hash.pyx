# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Batch encoder of segment-hash records (the insert hot path).

An insert writes one record per new block position, so encoding them one
``encode_segment`` call at a time would be a per-block Python loop.  This
builds all of them in one C loop, byte for byte in the record format of
:mod:`prefixbench.plugins.segments` (version 1: 40-byte header, block ids,
then metadata rows, pbsum64 checksum at offset 32 - the algorithm as that
module documents it).  The pure-Python reference,
:mod:`prefixbench.plugins._segment_hash_ref`, encodes one record at a time;
the tests hold the two equal.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

__all__ = ["encode_records"]

cnp.import_array()

DEF HEADER = 40
DEF CK_OFF = 32

include "_segment_record.pxi"


def encode_records(keys, starts, lens, ids, metas, Py_ssize_t meta_size):
    """Records ``i``: segment ``keys[i]`` holding blocks ``[starts[i], starts[i] + lens[i])``
    of ``ids``/``metas``; returns the list of ``(key, record bytes)`` items."""
    cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef const int64_t[::1] s = np.ascontiguousarray(starts, dtype=np.int64)
    cdef const int64_t[::1] g = np.ascontiguousarray(lens, dtype=np.int64)
    cdef cnp.ndarray a = np.ascontiguousarray(ids, dtype=np.uint64)
    cdef cnp.ndarray m = np.ascontiguousarray(metas, dtype=np.uint8)
    cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), r = k.shape[0], i
    if cnp.PyArray_NDIM(a) != 1:
        raise ValueError("block ids must be 1-D")
    if cnp.PyArray_NDIM(m) != 2 or cnp.PyArray_DIM(m, 0) != n or cnp.PyArray_DIM(m, 1) != meta_size:
        raise ValueError(f"metas must have shape ({n}, {meta_size}), got {(<object>m).shape}")
    if not 1 <= meta_size <= 0xFFFF:
        raise ValueError(f"meta_size must be in 1..65535, got {meta_size}")
    if s.shape[0] != r or g.shape[0] != r:
        raise ValueError("keys, starts and lens must have the same length")
    for i in range(r):
        if s[i] < 0 or g[i] < 0 or s[i] + g[i] > n:
            raise ValueError(f"record {i} [{s[i]}, {s[i] + g[i]}) is outside the {n} blocks")
    cdef const uint8_t* ap = <const uint8_t*>cnp.PyArray_DATA(a)
    cdef const uint8_t* mp = <const uint8_t*>cnp.PyArray_DATA(m)
    cdef list out = PyList_New(r)
    cdef Py_ssize_t total, cnt
    cdef uint8_t* p
    cdef uint64_t key
    cdef object rec, item
    for i in range(r):
        cnt = g[i]
        total = HEADER + cnt * (8 + meta_size)
        rec = PyBytes_FromStringAndSize(NULL, total)
        p = <uint8_t*>PyBytes_AS_STRING(rec)
        key = k[i]
        _seg_write(p, key, <uint64_t>s[i], ap + s[i] * 8, <uint32_t>cnt,
                   mp + s[i] * meta_size, <uint16_t>meta_size)
        item = (int(key), rec)
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out
