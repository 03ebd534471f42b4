# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled block-hash table: u64 block id -> fixed-size metadata record.

The layout is chosen for 10^8 entries on a 24 GiB machine: a ``uint64`` key
array and a slot-indexed metadata array (``meta_size`` bytes per slot), both
of power-of-two capacity, linear probing, max load 0.75 by default - about
(8 + 16) / load bytes per entry, no per-entry objects.  Key 0 marks an empty
slot, so the real block id 0 lives in a one-entry side slot; every other u64
(including 2**64 - 1) is an ordinary key.  Entries are never deleted, so no
tombstones are needed.  Growth doubles the capacity and rehashes.

Thread safety: a readers-writer lock (writer-preferring on glibc) is taken
only after the GIL is released and no Python object is touched while it is
held, so it cannot deadlock with the GIL.  Lookups run in parallel, inserts
(and rehashes) exclusively.  Counters are updated atomically.

The pure-Python reference is :mod:`prefixbench.plugins._blockhash_ref`.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy

from prefixbench.plugins.strategy import Match

__all__ = ["BlockHashTable"]

cnp.import_array()

include "_rwlock.pxi"

cdef extern from *:
    """
    static inline void pbh_count(unsigned long long *p, unsigned long long v) {
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    }
    """
    void pbh_count(unsigned long long *p, unsigned long long v) nogil


cdef uint64_t FIB = 0x9E3779B97F4A7C15ULL
cdef int MIN_BITS = 4


include "_arrays.pxi"


cdef class BlockHashTable:
    """Open-addressing hash table of block id -> metadata; first writer wins."""

    cdef uint64_t* keys
    cdef uint8_t* metas
    cdef uint64_t cap, mask, count, grow_at
    cdef int shift
    cdef bint has_zero
    cdef uint8_t* zero_meta
    cdef readonly Py_ssize_t meta_size
    cdef readonly double max_load
    cdef unsigned long long n_lookups, n_hits, n_matches
    cdef pb_rwlock lock
    cdef bint lock_ok

    def __cinit__(self, Py_ssize_t meta_size=16, Py_ssize_t initial_capacity=1024,
                  double max_load=0.75):
        if meta_size < 1:
            raise ValueError(f"meta_size must be >= 1, got {meta_size}")
        if not 0.05 <= max_load <= 0.95:
            raise ValueError(f"max_load must be in [0.05, 0.95], got {max_load}")
        if initial_capacity < 0:
            raise ValueError(f"initial_capacity must be >= 0, got {initial_capacity}")
        self.meta_size = meta_size
        self.max_load = max_load
        self.zero_meta = <uint8_t*>malloc(meta_size)
        if self.zero_meta == NULL:
            raise MemoryError()
        cdef int bits = MIN_BITS
        while (<double>(1ULL << bits)) * max_load < initial_capacity:
            bits += 1
        if self._alloc(bits, &self.keys, &self.metas) != 0:
            raise MemoryError(f"block-hash table: cannot allocate 2**{bits} slots")
        self._set_bits(bits)
        if pb_rwlock_init(&self.lock) != 0:
            raise MemoryError("cannot create the table lock")
        self.lock_ok = True

    def __dealloc__(self):
        free(self.keys)
        free(self.metas)
        free(self.zero_meta)
        if self.lock_ok:
            pb_rwlock_destroy(&self.lock)

    cdef int _alloc(self, int bits, uint64_t** keys, uint8_t** metas) noexcept nogil:
        cdef uint64_t n = 1ULL << bits
        keys[0] = <uint64_t*>calloc(n, sizeof(uint64_t))   # zeroed = all empty
        metas[0] = <uint8_t*>malloc(n * self.meta_size)
        if keys[0] == NULL or metas[0] == NULL:
            free(keys[0])
            free(metas[0])
            return -1
        return 0

    cdef void _set_bits(self, int bits) noexcept nogil:
        self.cap = 1ULL << bits
        self.mask = self.cap - 1
        self.shift = 64 - bits
        self.grow_at = <uint64_t>(<double>self.cap * self.max_load)
        if self.grow_at >= self.cap:
            self.grow_at = self.cap - 1   # always keep one empty slot

    cdef int _grow(self) noexcept nogil:
        """Double the capacity and rehash every key (under the write lock)."""
        cdef int bits = 64 - self.shift + 1
        cdef uint64_t* nk
        cdef uint8_t* nm
        cdef uint64_t* ok = self.keys
        cdef uint8_t* om = self.metas
        cdef uint64_t old_cap = self.cap, i, j, k, new_mask
        cdef Py_ssize_t ms = self.meta_size
        if self._alloc(bits, &nk, &nm) != 0:
            return -1
        new_mask = (1ULL << bits) - 1
        for i in range(old_cap):
            k = ok[i]
            if k != 0:
                j = (k * FIB) >> (64 - bits)
                while nk[j] != 0:
                    j = (j + 1) & new_mask
                nk[j] = k
                memcpy(nm + j * ms, om + i * ms, ms)
        self.keys = nk
        self.metas = nm
        self._set_bits(bits)
        free(ok)
        free(om)
        return 0

    cdef inline const uint8_t* _find(self, uint64_t key) noexcept nogil:
        """Metadata of ``key``, or NULL if absent."""
        cdef uint64_t i, k
        if key == 0:
            return self.zero_meta if self.has_zero else NULL
        i = (key * FIB) >> self.shift
        while True:
            k = self.keys[i]
            if k == key:
                return self.metas + i * self.meta_size
            if k == 0:
                return NULL
            i = (i + 1) & self.mask

    cdef inline int _put(self, uint64_t key, const uint8_t* meta) noexcept nogil:
        """1 if inserted, 0 if present (its metadata kept), -1 out of memory."""
        cdef uint64_t i, k
        cdef Py_ssize_t ms = self.meta_size
        if key == 0:
            if self.has_zero:
                return 0
            memcpy(self.zero_meta, meta, ms)
            self.has_zero = True
            self.count += 1
            return 1
        i = (key * FIB) >> self.shift
        while True:
            k = self.keys[i]
            if k == key:
                return 0
            if k == 0:
                break
            i = (i + 1) & self.mask
        if self.count - self.has_zero >= self.grow_at:
            if self._grow() != 0:
                return -1
            i = (key * FIB) >> self.shift
            while self.keys[i] != 0:
                i = (i + 1) & self.mask
        self.keys[i] = key
        memcpy(self.metas + i * ms, meta, ms)
        self.count += 1
        return 1

    cdef Py_ssize_t _match(self, const uint64_t* q, Py_ssize_t n, uint8_t* out) noexcept nogil:
        cdef Py_ssize_t i = 0, ms = self.meta_size
        cdef const uint8_t* m
        while i < n:
            m = self._find(q[i])
            if m == NULL:
                break
            memcpy(out + i * ms, m, ms)
            i += 1
        return i

    # ---------------------------------------------------------------- Python API
    def match(self, block_ids):
        """Probe from the first block until the first miss; a :class:`Match`."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), got
        cdef cnp.npy_intp dims[2]
        dims[0] = n
        dims[1] = self.meta_size
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_UINT8, 0)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint8_t* o = <uint8_t*>cnp.PyArray_DATA(out)
        with nogil:
            pb_rdlock(&self.lock)
            got = self._match(q, n, o)
            pb_unlock(&self.lock)
            pbh_count(&self.n_matches, 1)
            pbh_count(&self.n_lookups, got + (got < n))
            pbh_count(&self.n_hits, got)
        if got < n:
            out = out[:got]
        return Match(got, out)

    def insert(self, block_ids, metas):
        """Add every block not yet present; returns how many were new."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), i, ms = self.meta_size
        cdef cnp.ndarray m = as_metas(metas, n, ms)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef const uint8_t* mp = <const uint8_t*>cnp.PyArray_DATA(m)
        cdef Py_ssize_t added = 0
        cdef int r = 0
        if n == 0:
            return 0
        with nogil:
            pb_wrlock(&self.lock)
            for i in range(n):
                r = self._put(q[i], mp + i * ms)
                if r < 0:
                    break
                added += r
            pb_unlock(&self.lock)
        if r < 0:
            raise MemoryError("block-hash table: out of memory while growing")
        return added

    def lookup(self, block_ids):
        """Independent lookups: ``(found bool array, metas array)``; absent rows are zero."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), i, ms = self.meta_size
        cdef cnp.ndarray found = np.zeros(n, dtype=np.bool_)
        cdef cnp.ndarray out = np.zeros((n, ms), dtype=np.uint8)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint8_t* f = <uint8_t*>cnp.PyArray_DATA(found)
        cdef uint8_t* o = <uint8_t*>cnp.PyArray_DATA(out)
        cdef const uint8_t* mp
        with nogil:
            pb_rdlock(&self.lock)
            for i in range(n):
                mp = self._find(q[i])
                if mp != NULL:
                    f[i] = 1
                    memcpy(o + i * ms, mp, ms)
            pb_unlock(&self.lock)
        return found, out

    def reserve(self, Py_ssize_t entries):
        """Grow now so that ``entries`` keys fit without a rehash later."""
        cdef int r = 0
        with nogil:
            pb_wrlock(&self.lock)
            while <double>self.grow_at < <double>entries and r == 0:
                r = self._grow()
            pb_unlock(&self.lock)
        if r != 0:
            raise MemoryError(f"block-hash table: cannot reserve {entries} entries")

    def export(self):
        """Every entry as ``(keys uint64[count], metas uint8[count, meta_size])`` (snapshots).

        One C pass over the slot arrays under the read lock; no per-entry Python.
        """
        cdef cnp.npy_intp dims[2]
        cdef uint64_t i, c = 0, n
        cdef Py_ssize_t ms = self.meta_size
        cdef cnp.ndarray ko, mo
        cdef uint64_t* kp
        cdef uint8_t* mp
        with nogil:
            pb_rdlock(&self.lock)
        try:
            n = self.count
            dims[0] = <cnp.npy_intp>n
            dims[1] = ms
            ko = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT64, 0)
            mo = cnp.PyArray_EMPTY(2, dims, cnp.NPY_UINT8, 0)
            kp = <uint64_t*>cnp.PyArray_DATA(ko)
            mp = <uint8_t*>cnp.PyArray_DATA(mo)
            with nogil:
                if self.has_zero:
                    kp[0] = 0
                    memcpy(mp, self.zero_meta, ms)
                    c = 1
                for i in range(self.cap):
                    if self.keys[i] != 0:
                        kp[c] = self.keys[i]
                        memcpy(mp + c * ms, self.metas + i * ms, ms)
                        c += 1
        finally:
            pb_unlock(&self.lock)
        return ko, mo

    def __len__(self):
        return self.count

    @property
    def capacity(self):
        """Slots in the main array (a power of two)."""
        return self.cap

    @property
    def nbytes(self):
        """Bytes allocated: key array, metadata array and the side slot."""
        return self.cap * (8 + self.meta_size) + self.meta_size

    def counters(self):
        """``{"matches", "lookups", "hits"}`` made by :meth:`match` since creation."""
        return {"matches": self.n_matches, "lookups": self.n_lookups, "hits": self.n_hits}
