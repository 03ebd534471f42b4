# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled block-hash table: u64 block id -> fixed-size metadata record.

The layout is chosen for 10^8 entries on a 24 GiB machine: a ``uint64`` key
array and a slot-indexed metadata array (``meta_size`` bytes per slot), both
of power-of-two capacity, linear probing, max load 0.75 by default - about
(8 + 16) / load bytes per entry, no per-entry objects.  Key 0 marks an empty
slot, so the real block id 0 lives in a one-entry side slot; every other u64
(including 2**64 - 1) is an ordinary key.  Growth doubles the capacity and
rehashes.

Workers and removal.  Until a worker other than 0 inserts, an entry means
"on worker 0" and costs nothing more.  The first such insert allocates a
per-slot uint64 bitmap (bit w = worker w holds the block) and a metadata
plane per worker up to it (slot-parallel, plane 0 is the metadata array), so
each (block, worker) keeps its own first metadata and a lookup answers with
the lowest-numbered holder's.  ``remove`` clears bits; an entry whose bitmap
empties is deleted by backward-shift deletion (linear probing needs no
tombstones that way, and probe lengths stay those of a table that never held
the key).  ``clear(worker)`` rehashes the survivors in place of a scan that
would move entries under itself; ``clear()`` empties the table and keeps its
capacity.

Thread safety: a readers-writer lock (writer-preferring on glibc) is taken
only after the GIL is released and no Python object is touched while it is
held, so it cannot deadlock with the GIL.  Lookups run in parallel, inserts
(and rehashes) exclusively.  Counters are updated atomically.

The pure-Python reference is :mod:`prefixbench.plugins._blockhash_ref`.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset

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

cdef extern from *:
    """
    static inline int pbh_ctz(unsigned long long v) { return __builtin_ctzll(v); }
    static inline int pbh_popcount(unsigned long long v) { return __builtin_popcountll(v); }
    """
    int pbh_ctz(unsigned long long v) nogil
    int pbh_popcount(unsigned long long v) nogil


cdef uint64_t FIB = 0x9E3779B97F4A7C15ULL
cdef int MIN_BITS = 4


include "_arrays.pxi"


cdef class BlockHashTable:
    """Open-addressing hash table of block id -> metadata per worker; first writer wins."""

    cdef uint64_t* keys
    cdef uint8_t* metas
    cdef uint64_t* locs            # NULL while every entry is on worker 0 only
    cdef uint8_t* planes[64]       # planes[0] is metas
    cdef int n_planes
    cdef uint64_t cap, mask, count, grow_at
    cdef int shift
    cdef bint has_zero
    cdef uint64_t zero_locs
    cdef uint8_t* zero_meta        # n_planes records for block id 0
    cdef readonly Py_ssize_t meta_size
    cdef readonly double max_load
    cdef unsigned long long n_lookups, n_hits, n_matches, n_noops
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
        self.n_planes = 1
        self.zero_meta = <uint8_t*>malloc(meta_size)
        if self.zero_meta == NULL:
            raise MemoryError()
        cdef int bits = MIN_BITS
        while (<double>(1ULL << bits)) * max_load < initial_capacity:
            bits += 1
        if self._alloc(bits, &self.keys, self.planes, &self.locs, False) != 0:
            raise MemoryError(f"block-hash table: cannot allocate 2**{bits} slots")
        self.metas = self.planes[0]
        self._set_bits(bits)
        if pb_rwlock_init(&self.lock) != 0:
            raise MemoryError("cannot create the table lock")
        self.lock_ok = True

    def __dealloc__(self):
        cdef int w
        free(self.keys)
        for w in range(self.n_planes):
            free(self.planes[w])
        free(self.locs)
        free(self.zero_meta)
        if self.lock_ok:
            pb_rwlock_destroy(&self.lock)

    cdef int _alloc(self, int bits, uint64_t** keys, uint8_t** planes, uint64_t** locs,
                    bint with_locs) noexcept nogil:
        """Fresh key array (zeroed = all empty), ``n_planes`` planes, bitmaps if asked."""
        cdef uint64_t n = 1ULL << bits
        cdef int w
        cdef bint ok
        keys[0] = <uint64_t*>calloc(n, sizeof(uint64_t))
        ok = keys[0] != NULL
        for w in range(self.n_planes):
            planes[w] = <uint8_t*>malloc(n * self.meta_size)
            ok = ok and planes[w] != NULL
        locs[0] = NULL
        if with_locs:
            locs[0] = <uint64_t*>malloc(n * sizeof(uint64_t))
            ok = ok and locs[0] != NULL
        if not ok:
            free(keys[0])
            for w in range(self.n_planes):
                free(planes[w])
            free(locs[0])
            return -1
        return 0

    cdef void _set_bits(self, int bits) noexcept nogil:
        self.cap = 1ULL << bits
        self.mask = self.cap - 1
        self.shift = 64 - bits
        self.grow_at = <uint64_t>(<double>self.cap * self.max_load)
        if self.grow_at >= self.cap:
            self.grow_at = self.cap - 1   # always keep one empty slot

    cdef inline uint64_t _bitmap(self, uint64_t i) noexcept nogil:
        return self.locs[i] if self.locs != NULL else 1

    cdef int _rehash(self, int bits, uint64_t drop) noexcept nogil:
        """Move every entry into 2**bits fresh slots, clearing the ``drop`` bits first
        and leaving out entries left with none (under the write lock)."""
        cdef uint64_t* nk
        cdef uint8_t* np_[64]
        cdef uint64_t* nl
        cdef uint64_t* ok = self.keys
        cdef uint64_t* ol = self.locs
        cdef uint64_t old_cap = self.cap, i, j, k, a, new_mask
        cdef Py_ssize_t ms = self.meta_size
        cdef int w
        if self._alloc(bits, &nk, np_, &nl, ol != NULL) != 0:
            return -1
        new_mask = (1ULL << bits) - 1
        for i in range(old_cap):
            k = ok[i]
            if k == 0:
                continue
            a = (ol[i] if ol != NULL else 1) & ~drop
            if a == 0:
                self.count -= 1
                continue
            j = (k * FIB) >> (64 - bits)
            while nk[j] != 0:
                j = (j + 1) & new_mask
            nk[j] = k
            if nl != NULL:
                nl[j] = a
            for w in range(self.n_planes):
                memcpy(np_[w] + j * ms, self.planes[w] + i * ms, ms)
        free(ok)
        free(ol)
        for w in range(self.n_planes):
            free(self.planes[w])
            self.planes[w] = np_[w]
        self.keys = nk
        self.locs = nl
        self.metas = self.planes[0]
        self._set_bits(bits)
        return 0

    cdef int _grow(self) noexcept nogil:
        """Double the capacity and rehash every key (under the write lock)."""
        return self._rehash(64 - self.shift + 1, 0)

    cdef int _workers_upto(self, int worker) noexcept nogil:
        """Bitmaps and metadata planes for workers 0..``worker`` (under the write lock)."""
        cdef uint64_t i
        cdef void* p
        if worker == 0:
            return 0
        if self.locs == NULL:
            self.locs = <uint64_t*>malloc(self.cap * sizeof(uint64_t))
            if self.locs == NULL:
                return -1
            for i in range(self.cap):
                self.locs[i] = 1
        while self.n_planes <= worker:
            self.planes[self.n_planes] = <uint8_t*>malloc(self.cap * self.meta_size)
            if self.planes[self.n_planes] == NULL:
                return -1
            self.n_planes += 1
            p = realloc(self.zero_meta, self.n_planes * self.meta_size)
            if p == NULL:
                return -1
            self.zero_meta = <uint8_t*>p
        if self.has_zero and self.zero_locs == 0:
            self.zero_locs = 1
        return 0

    cdef inline int64_t _slot(self, uint64_t key) noexcept nogil:
        """Slot of a non-zero ``key``, or -1 if absent."""
        cdef uint64_t i = (key * FIB) >> self.shift, k
        while True:
            k = self.keys[i]
            if k == key:
                return <int64_t>i
            if k == 0:
                return -1
            i = (i + 1) & self.mask

    cdef inline const uint8_t* _find(self, uint64_t key, uint64_t* bitmap) noexcept nogil:
        """Metadata of ``key`` at its lowest holder (its bitmap in ``bitmap``), or NULL."""
        cdef int64_t i
        cdef uint64_t a
        if key == 0:
            if not self.has_zero:
                return NULL
            a = self.zero_locs if self.locs != NULL else 1
            bitmap[0] = a
            return self.zero_meta + pbh_ctz(a) * self.meta_size
        i = self._slot(key)
        if i < 0:
            return NULL
        a = self._bitmap(i)
        bitmap[0] = a
        return self.planes[pbh_ctz(a)] + i * self.meta_size

    cdef inline int _put(self, uint64_t key, const uint8_t* meta, int worker) noexcept nogil:
        """1 if newly available on ``worker``, 0 if it was (metadata kept), -1 out of memory."""
        cdef uint64_t i, k, bit = (<uint64_t>1) << worker
        cdef int64_t at
        cdef Py_ssize_t ms = self.meta_size
        if key == 0:
            if self.has_zero:
                if self.locs == NULL or self.zero_locs & bit:
                    return 0
                self.zero_locs |= bit
            else:
                self.has_zero = True
                self.zero_locs = bit
                self.count += 1
            memcpy(self.zero_meta + worker * ms, meta, ms)
            return 1
        at = self._slot(key)
        if at >= 0:
            if self.locs == NULL or self.locs[at] & bit:
                return 0
            self.locs[at] |= bit
            memcpy(self.planes[worker] + at * ms, meta, ms)
            return 1
        if self.count - self.has_zero >= self.grow_at:
            if self._grow() != 0:
                return -1
        i = (key * FIB) >> self.shift
        while self.keys[i] != 0:
            i = (i + 1) & self.mask
        self.keys[i] = key
        if self.locs != NULL:
            self.locs[i] = bit
        memcpy(self.planes[worker] + i * ms, meta, ms)
        self.count += 1
        return 1

    cdef void _delete(self, uint64_t i) noexcept nogil:
        """Empty slot ``i`` by backward-shift deletion (no tombstones)."""
        cdef uint64_t j = i, h
        cdef Py_ssize_t ms = self.meta_size
        cdef int w
        while True:
            j = (j + 1) & self.mask
            if self.keys[j] == 0:
                break
            h = (self.keys[j] * FIB) >> self.shift
            # the entry at j may move to i only if its home is not in (i, j]
            if (i <= j and i < h and h <= j) or (i > j and (i < h or h <= j)):
                continue
            self.keys[i] = self.keys[j]
            if self.locs != NULL:
                self.locs[i] = self.locs[j]
            for w in range(self.n_planes):
                memcpy(self.planes[w] + i * ms, self.planes[w] + j * ms, ms)
            i = j
        self.keys[i] = 0
        self.count -= 1

    cdef int64_t _remove(self, uint64_t key, uint64_t mask) noexcept nogil:
        """Clear ``mask``'s bits of ``key``; the availabilities cleared."""
        cdef int64_t at
        cdef uint64_t a, c
        if key == 0:
            if not self.has_zero:
                return 0
            a = self.zero_locs if self.locs != NULL else 1
            c = a & mask
            if c == a:
                self.has_zero = False
                self.zero_locs = 0
                self.count -= 1
            else:
                self.zero_locs = a & ~c
            return pbh_popcount(c)
        at = self._slot(key)
        if at < 0:
            return 0
        a = self._bitmap(at)
        c = a & mask
        if c == 0:
            return 0
        if c == a:
            self._delete(at)
        else:
            self.locs[at] = a & ~c
        return pbh_popcount(c)

    cdef Py_ssize_t _match(self, const uint64_t* q, Py_ssize_t n, uint8_t* out,
                           uint64_t* locs) noexcept nogil:
        cdef Py_ssize_t i = 0, ms = self.meta_size
        cdef const uint8_t* m
        cdef uint64_t a = 1
        while i < n:
            m = self._find(q[i], &a)
            if m == NULL:
                break
            memcpy(out + i * ms, m, ms)
            if locs != NULL:
                locs[i] = a
            i += 1
        return i

    # ---------------------------------------------------------------- Python API
    def match(self, block_ids):
        """Probe from the first block until the first miss; a :class:`Match` (with
        ``locations`` once a worker other than 0 has inserted)."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), got
        cdef cnp.npy_intp dims[2]
        dims[0] = n
        dims[1] = self.meta_size
        cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_UINT8, 0)
        cdef cnp.ndarray locs = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT64, 0)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint8_t* o = <uint8_t*>cnp.PyArray_DATA(out)
        cdef uint64_t* lp = <uint64_t*>cnp.PyArray_DATA(locs)
        with nogil:
            pb_rdlock(&self.lock)
            got = self._match(q, n, o, lp)
            pb_unlock(&self.lock)
            pbh_count(&self.n_matches, 1)
            pbh_count(&self.n_lookups, got + (got < n))
            pbh_count(&self.n_hits, got)
        if got < n:
            out = out[:got]
            locs = locs[:got]
        return Match(got, out, locs)

    def insert(self, block_ids, metas, int worker=0):
        """Make every block available on ``worker`` where it is not yet; returns how
        many (block, worker) availabilities were new."""
        if not 0 <= worker < 64:
            raise ValueError(f"worker {worker} outside 0..63")
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
            r = self._workers_upto(worker)
            if r == 0:
                for i in range(n):
                    r = self._put(q[i], mp + i * ms, worker)
                    if r < 0:
                        break
                    added += r
            pb_unlock(&self.lock)
        if r < 0:
            raise MemoryError("block-hash table: out of memory while growing")
        return added

    def remove(self, block_ids, int worker=-1):
        """Make the listed blocks unavailable on ``worker`` (every worker if < 0);
        returns the (block, worker) availabilities cleared."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), i
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint64_t mask = <uint64_t>0xFFFFFFFFFFFFFFFFULL
        cdef int64_t got, removed = 0
        cdef unsigned long long noops = 0
        if worker >= 0:
            mask = (<uint64_t>1) << worker
        with nogil:
            pb_wrlock(&self.lock)
            for i in range(n):
                got = self._remove(q[i], mask)
                removed += got
                noops += got == 0
            pb_unlock(&self.lock)
            pbh_count(&self.n_noops, noops)
        return removed

    def tombstone(self, BlockHashTable live, block_ids, int worker, bint defaults_dead):
        """The removal overlay's remove (:mod:`prefixbench.plugins.removal`), this table
        holding the tombstones: per listed block, clear ``worker``'s bit (every bit if
        < 0) in ``live``, tombstoning first a block that loses its last location there;
        a block ``live`` does not list is on worker 0 by default, so it is tombstoned
        when ``worker`` is 0 or every worker, unless tombstoned already or
        ``defaults_dead``.  Returns ``(removed, noops)``.  Both tables' write locks
        are held throughout, so a match sees the tombstone no later than the loss."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), i
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint64_t mask = <uint64_t>0xFFFFFFFFFFFFFFFFULL, bm = 0, c
        cdef uint8_t zero[1]
        cdef int64_t removed = 0, noops = 0
        cdef int r = 0
        zero[0] = 0
        if worker >= 0:
            mask = (<uint64_t>1) << worker
        with nogil:
            pb_wrlock(&self.lock)
            pb_wrlock(&live.lock)
            for i in range(n):
                if live._find(q[i], &bm) != NULL:
                    c = bm & mask
                    if c == 0:
                        noops += 1
                        continue
                    if c == bm:
                        r = self._put(q[i], zero, 0)
                        if r < 0:
                            break
                    removed += live._remove(q[i], mask)
                elif defaults_dead or worker > 0 or self._find(q[i], &bm) != NULL:
                    noops += 1
                else:
                    r = self._put(q[i], zero, 0)
                    if r < 0:
                        break
                    removed += 1
            pb_unlock(&live.lock)
            pb_unlock(&self.lock)
        if r < 0:
            raise MemoryError("block-hash table: out of memory while growing")
        return removed, noops

    def clear(self, int worker=-1):
        """Every block unavailable on ``worker``; with ``worker < 0`` an empty table
        (capacity kept)."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        cdef int r = 0
        with nogil:
            pb_wrlock(&self.lock)
            if worker < 0:
                memset(self.keys, 0, self.cap * sizeof(uint64_t))
                self.count = 0
                self.has_zero = False
                self.zero_locs = 0
            else:
                if self.has_zero:
                    self._remove(0, (<uint64_t>1) << worker)
                r = self._rehash(64 - self.shift, (<uint64_t>1) << worker)
            pb_unlock(&self.lock)
        if r != 0:
            raise MemoryError("block-hash table: out of memory while clearing a worker")

    def lookup(self, block_ids, bint locations=False):
        """Independent lookups: ``(found bool array, metas array)``; absent rows are zero.
        With ``locations``, a third array: each block's worker bitmap (0 if absent)."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), i, ms = self.meta_size
        cdef cnp.ndarray found = np.zeros(n, dtype=np.bool_)
        cdef cnp.ndarray out = np.zeros((n, ms), dtype=np.uint8)
        cdef cnp.ndarray locs = np.zeros(n, dtype=np.uint64)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef uint8_t* f = <uint8_t*>cnp.PyArray_DATA(found)
        cdef uint8_t* o = <uint8_t*>cnp.PyArray_DATA(out)
        cdef uint64_t* lp = <uint64_t*>cnp.PyArray_DATA(locs)
        cdef const uint8_t* mp
        cdef uint64_t bm
        with nogil:
            pb_rdlock(&self.lock)
            for i in range(n):
                mp = self._find(q[i], &bm)
                if mp != NULL:
                    f[i] = 1
                    lp[i] = bm
                    memcpy(o + i * ms, mp, ms)
            pb_unlock(&self.lock)
        if locations:
            return found, out, locs
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

    def export(self, bint workers=False):
        """Every entry as ``(keys uint64[count], metas uint8[count, meta_size])``
        (snapshots; ``metas`` at each block's lowest holder).  With ``workers``,
        ``(keys, locations uint64[count], planes uint8[n_planes, count, meta_size])``:
        row w of a plane is zero where worker w does not hold the block.

        One C pass over the slot arrays under the read lock; no per-entry Python.
        """
        cdef cnp.npy_intp dims[3]
        cdef uint64_t i, c = 0, n, a
        cdef Py_ssize_t ms = self.meta_size
        cdef int w, np_ = self.n_planes if workers else 1
        cdef cnp.ndarray ko, lo, mo
        cdef uint64_t* kp
        cdef uint64_t* lp
        cdef uint8_t* mp
        with nogil:
            pb_rdlock(&self.lock)
        try:
            n = self.count
            dims[0] = <cnp.npy_intp>n
            ko = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT64, 0)
            lo = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT64, 0)
            dims[0] = np_
            dims[1] = <cnp.npy_intp>n
            dims[2] = ms
            mo = cnp.PyArray_ZEROS(3, dims, cnp.NPY_UINT8, 0)
            kp = <uint64_t*>cnp.PyArray_DATA(ko)
            lp = <uint64_t*>cnp.PyArray_DATA(lo)
            mp = <uint8_t*>cnp.PyArray_DATA(mo)
            with nogil:
                if self.has_zero:
                    a = self.zero_locs if self.locs != NULL else 1
                    kp[0] = 0
                    lp[0] = a
                    for w in range(np_):
                        if workers and a & ((<uint64_t>1) << w):
                            memcpy(mp + (w * n) * ms, self.zero_meta + w * ms, ms)
                    if not workers:
                        memcpy(mp, self.zero_meta + pbh_ctz(a) * ms, ms)
                    c = 1
                for i in range(self.cap):
                    if self.keys[i] != 0:
                        a = self._bitmap(i)
                        kp[c] = self.keys[i]
                        lp[c] = a
                        if workers:
                            for w in range(np_):
                                if a & ((<uint64_t>1) << w):
                                    memcpy(mp + (w * n + c) * ms, self.planes[w] + i * ms, ms)
                        else:
                            memcpy(mp + c * ms, self.planes[pbh_ctz(a)] + i * ms, ms)
                        c += 1
        finally:
            pb_unlock(&self.lock)
        if workers:
            return ko, lo, mo
        return ko, mo[0]

    def __len__(self):
        return self.count

    @property
    def capacity(self):
        """Slots in the main array (a power of two)."""
        return self.cap

    @property
    def workers(self):
        """Metadata planes allocated (1 + the highest worker that inserted)."""
        return self.n_planes

    @property
    def nbytes(self):
        """Bytes allocated: key array, metadata planes, bitmaps and the side slot."""
        return (self.cap * (8 + self.meta_size * self.n_planes)
                + (self.cap * 8 if self.locs != NULL else 0) + self.meta_size * self.n_planes)

    def counters(self):
        """``{"matches", "lookups", "hits", "remove_noops"}`` since creation."""
        return {"matches": self.n_matches, "lookups": self.n_lookups, "hits": self.n_hits,
                "remove_noops": self.n_noops}
