# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled compressed radix tree over block IDs (the exact oracle).

Everything lives in flat C arrays so matching and inserting run without the
GIL and without touching Python objects:

* node table: per node the edge that leads into it, as ``(start, length)``
  into the key pool; node 0 is the root (empty edge);
* key pool (``uint64``) with a parallel metadata pool (``meta_size`` bytes
  per block): an edge's blocks are one contiguous run of both, so the
  metadata of a matched edge is one ``memcpy``;
* child table: open addressing (linear probing) keyed by
  ``(parent node, first block id of the child's edge)``.

A split never moves pool data: the upper half keeps the run's head, the lower
half points further into the same run.  Nodes are never deleted, so the child
table needs no tombstones; a split re-points one entry and adds one.

Workers and removal.  Each pool slot carries a uint64 availability bitmap
(bit w = worker w holds the block) and worker w's metadata lives in plane w,
a pool-parallel array allocated when worker w first inserts (plane 0 is the
metadata pool).  A match stops at the first block whose bitmap is zero and
takes each block's metadata from its lowest set bit.  ``remove`` finds a
block's slots through an id index (open addressing, id -> first slot, with a
per-slot chain for an id that sits at several positions) and clears bits:
the tree's shape never changes on a remove, a removed block stays in the
tree as a zero bitmap and a later insert revives it in place with that
insert's metadata.  Memory therefore follows every block ever inserted, as an
unbounded oracle's would; ``clear()`` of every worker empties the tree and
keeps the allocations for reuse.

A leaf whose sequence is later extended gets a child node (as in SGLang's
RadixCache) rather than being relocated, so edges never need copying.  The
pure-Python reference (:mod:`prefixbench.plugins._radix_ref`) follows the
same rules, node for node.

Thread safety: a readers-writer lock (writer-preferring on glibc) guards the
arrays; it is taken only after the GIL is released and no Python object is
touched while holding it, so the lock can never deadlock with the GIL.
Matches run in parallel, inserts exclusively.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy

from prefixbench.plugins.strategy import Match

__all__ = ["RadixTree"]

cnp.import_array()

include "_rwlock.pxi"


cdef struct Node:
    int64_t start       # first block of the incoming edge in the pool
    uint32_t length     # blocks on the incoming edge (0 only for the root)
    uint32_t pad


cdef struct Slot:
    uint64_t first      # first block id of the child's edge
    uint32_t parent     # EMPTY when the slot is free
    uint32_t child


cdef extern from *:
    """
    static inline int pbr_ctz(unsigned long long v) { return __builtin_ctzll(v); }
    static inline int pbr_popcount(unsigned long long v) { return __builtin_popcountll(v); }
    """
    int pbr_ctz(unsigned long long v) nogil
    int pbr_popcount(unsigned long long v) nogil


cdef struct IdSlot:
    uint64_t key        # block id
    int64_t slot        # its first pool slot; -1 when free


cdef uint32_t EMPTY = 0xFFFFFFFFU
cdef uint32_t MAX_NODES = 0xFFFFFFF0U
cdef uint64_t HK1 = 0x9E3779B97F4A7C15ULL
cdef uint64_t HK2 = 0xD6E8FEB86659FD93ULL


cdef inline uint64_t _slot_hash(uint32_t parent, uint64_t first) noexcept nogil:
    cdef uint64_t h = first ^ ((<uint64_t>parent) * HK1)
    h ^= h >> 31
    return h * HK2          # the top bits index the table


include "_arrays.pxi"


cdef class RadixTree:
    """Exact compressed radix tree: ``match`` and ``insert`` over chained block IDs."""

    cdef Node* nodes
    cdef int64_t n_nodes, cap_nodes
    cdef uint64_t* keys
    cdef uint8_t* metas
    cdef int64_t n_pool, cap_pool
    cdef Slot* slots
    cdef uint64_t n_slots, slot_mask
    cdef int slot_shift
    cdef int64_t n_used
    cdef readonly Py_ssize_t meta_size
    cdef pb_rwlock lock
    cdef bint lock_ok
    cdef uint64_t* avail          # per pool slot: bitmap of the workers holding it
    cdef int64_t* dup             # per pool slot: next slot with the same id, or -1
    cdef uint8_t* planes[64]      # per worker: metadata, pool-parallel (planes[0] = metas)
    cdef int n_planes
    cdef IdSlot* idx              # block id -> first pool slot
    cdef uint64_t idx_n, idx_mask
    cdef int idx_shift
    cdef int64_t idx_used
    cdef int64_t n_live           # pool slots available on at least one worker
    cdef unsigned long long n_noops

    def __cinit__(self, Py_ssize_t meta_size=16, Py_ssize_t initial_blocks=1024):
        if meta_size < 1:
            raise ValueError(f"meta_size must be >= 1, got {meta_size}")
        if initial_blocks < 1:
            initial_blocks = 1
        self.meta_size = meta_size
        self.cap_nodes = 64
        self.nodes = <Node*>malloc(self.cap_nodes * sizeof(Node))
        self.cap_pool = initial_blocks
        self.keys = <uint64_t*>malloc(self.cap_pool * sizeof(uint64_t))
        self.metas = <uint8_t*>malloc(self.cap_pool * meta_size)
        self.n_slots = 64
        self.slot_mask = self.n_slots - 1
        self.slot_shift = 64 - 6
        self.slots = <Slot*>malloc(self.n_slots * sizeof(Slot))
        self.avail = <uint64_t*>malloc(self.cap_pool * sizeof(uint64_t))
        self.dup = <int64_t*>malloc(self.cap_pool * sizeof(int64_t))
        self.idx_n = 64
        self.idx = <IdSlot*>malloc(self.idx_n * sizeof(IdSlot))
        if not (self.nodes and self.keys and self.metas and self.slots and self.avail
                and self.dup and self.idx):
            raise MemoryError()
        self.planes[0] = self.metas
        self.n_planes = 1
        self._reset()
        if pb_rwlock_init(&self.lock) != 0:
            raise MemoryError("cannot create the tree lock")
        self.lock_ok = True

    def __dealloc__(self):
        cdef int w
        free(self.nodes)
        free(self.keys)
        free(self.metas)
        free(self.slots)
        free(self.avail)
        free(self.dup)
        free(self.idx)
        for w in range(1, self.n_planes):
            free(self.planes[w])
        if self.lock_ok:
            pb_rwlock_destroy(&self.lock)

    # ---------------------------------------------------------------- child table
    cdef inline int64_t _child(self, uint32_t parent, uint64_t first) noexcept nogil:
        """Child of ``parent`` whose edge starts with ``first``, or -1."""
        cdef uint64_t i = _slot_hash(parent, first) >> self.slot_shift
        cdef Slot* s
        while True:
            s = &self.slots[i]
            if s.parent == parent and s.first == first:
                return s.child
            if s.parent == EMPTY:
                return -1
            i = (i + 1) & self.slot_mask

    cdef inline void _set_child(self, uint32_t parent, uint64_t first, uint32_t child) noexcept nogil:
        """Insert or re-point the entry; capacity was reserved by the caller."""
        cdef uint64_t i = _slot_hash(parent, first) >> self.slot_shift
        cdef Slot* s
        while True:
            s = &self.slots[i]
            if s.parent == EMPTY:
                s.parent = parent
                s.first = first
                s.child = child
                self.n_used += 1
                return
            if s.parent == parent and s.first == first:
                s.child = child
                return
            i = (i + 1) & self.slot_mask

    cdef int _grow_slots(self) noexcept nogil:
        cdef uint64_t new_n = self.n_slots * 2, i, j
        cdef Slot* old = self.slots
        cdef uint64_t old_n = self.n_slots
        cdef Slot* fresh = <Slot*>malloc(new_n * sizeof(Slot))
        if fresh == NULL:
            return -1
        for i in range(new_n):
            fresh[i].parent = EMPTY
        self.slots = fresh
        self.n_slots = new_n
        self.slot_mask = new_n - 1
        self.slot_shift -= 1
        for i in range(old_n):
            if old[i].parent != EMPTY:
                j = _slot_hash(old[i].parent, old[i].first) >> self.slot_shift
                while fresh[j].parent != EMPTY:
                    j = (j + 1) & self.slot_mask
                fresh[j] = old[i]
        free(old)
        return 0

    cdef void _reset(self) noexcept nogil:
        """Empty tree and index (allocations kept)."""
        cdef uint64_t i
        for i in range(self.n_slots):
            self.slots[i].parent = EMPTY
        self.idx_mask = self.idx_n - 1
        self.idx_shift = 64 - pbr_ctz(self.idx_n)
        for i in range(self.idx_n):
            self.idx[i].slot = -1
        self.nodes[0].start = 0
        self.nodes[0].length = 0
        self.n_nodes = 1
        self.n_pool = 0
        self.n_used = 0
        self.idx_used = 0
        self.n_live = 0

    # ---------------------------------------------------------------- id index
    cdef inline int64_t _idx_find(self, uint64_t key) noexcept nogil:
        cdef uint64_t i = (key * HK1) >> self.idx_shift
        while True:
            if self.idx[i].slot < 0:
                return -1
            if self.idx[i].key == key:
                return self.idx[i].slot
            i = (i + 1) & self.idx_mask

    cdef inline void _idx_add(self, uint64_t key, int64_t p) noexcept nogil:
        """Record pool slot ``p`` for ``key`` (room was reserved)."""
        cdef uint64_t i = (key * HK1) >> self.idx_shift
        cdef int64_t head
        self.dup[p] = -1
        while True:
            head = self.idx[i].slot
            if head < 0:
                self.idx[i].key = key
                self.idx[i].slot = p
                self.idx_used += 1
                return
            if self.idx[i].key == key:
                self.dup[p] = self.dup[head]
                self.dup[head] = p
                return
            i = (i + 1) & self.idx_mask

    cdef int _grow_idx(self, uint64_t new_n) noexcept nogil:
        cdef IdSlot* old = self.idx
        cdef uint64_t old_n = self.idx_n, i, j
        cdef IdSlot* fresh = <IdSlot*>malloc(new_n * sizeof(IdSlot))
        if fresh == NULL:
            return -1
        for i in range(new_n):
            fresh[i].slot = -1
        self.idx = fresh
        self.idx_n = new_n
        self.idx_mask = new_n - 1
        self.idx_shift = 64 - pbr_ctz(new_n)
        for i in range(old_n):
            if old[i].slot >= 0:
                j = (old[i].key * HK1) >> self.idx_shift
                while fresh[j].slot >= 0:
                    j = (j + 1) & self.idx_mask
                fresh[j] = old[i]
        free(old)
        return 0

    cdef int _ensure_planes(self, int worker) noexcept nogil:
        """Allocate metadata planes up to ``worker`` (pool-sized)."""
        cdef int w
        while self.n_planes <= worker:
            w = self.n_planes
            self.planes[w] = <uint8_t*>malloc(self.cap_pool * self.meta_size)
            if self.planes[w] == NULL:
                return -1
            self.n_planes += 1
        return 0

    cdef inline void _mark(self, int64_t p, int worker, const uint8_t* meta) noexcept nogil:
        """Make pool slot ``p`` available on ``worker`` (first metadata kept)."""
        cdef uint64_t a = self.avail[p], bit = (<uint64_t>1) << worker
        if a & bit:
            return
        if a == 0:
            self.n_live += 1
        self.avail[p] = a | bit
        memcpy(self.planes[worker] + p * self.meta_size, meta, self.meta_size)

    # ---------------------------------------------------------------- capacity
    cdef int _reserve(self, int64_t blocks) noexcept nogil:
        """Room for one insert: ``blocks`` pool entries, 2 nodes, 2 child entries."""
        cdef int64_t cap
        cdef void* p
        cdef int w
        while (self.idx_used + blocks) * 2 > <int64_t>self.idx_n:
            if self._grow_idx(self.idx_n * 2) != 0:
                return -1
        if self.n_pool + blocks > self.cap_pool:
            cap = self.cap_pool * 2
            while cap < self.n_pool + blocks:
                cap *= 2
            p = realloc(self.keys, cap * sizeof(uint64_t))
            if p == NULL:
                return -1
            self.keys = <uint64_t*>p
            p = realloc(self.metas, cap * self.meta_size)
            if p == NULL:
                return -1
            self.metas = <uint8_t*>p
            self.planes[0] = self.metas
            for w in range(1, self.n_planes):
                p = realloc(self.planes[w], cap * self.meta_size)
                if p == NULL:
                    return -1
                self.planes[w] = <uint8_t*>p
            p = realloc(self.avail, cap * sizeof(uint64_t))
            if p == NULL:
                return -1
            self.avail = <uint64_t*>p
            p = realloc(self.dup, cap * sizeof(int64_t))
            if p == NULL:
                return -1
            self.dup = <int64_t*>p
            self.cap_pool = cap
        if self.n_nodes + 2 > self.cap_nodes:
            if self.n_nodes + 2 > MAX_NODES:
                return -2
            cap = self.cap_nodes * 2
            p = realloc(self.nodes, cap * sizeof(Node))
            if p == NULL:
                return -1
            self.nodes = <Node*>p
            self.cap_nodes = cap
        # keep the load factor at or below 1/2 so probes stay short
        while (self.n_used + 2) * 2 > <int64_t>self.n_slots:
            if self._grow_slots() != 0:
                return -1
        return 0

    # ---------------------------------------------------------------- core
    cdef Py_ssize_t _match(self, const uint64_t* q, Py_ssize_t n, uint8_t* out,
                           uint64_t* locs) noexcept nogil:
        cdef uint32_t cur = 0
        cdef int64_t c, s
        cdef Py_ssize_t i = 0, j, k, length, lim
        cdef Py_ssize_t ms = self.meta_size
        cdef const uint64_t* pool = self.keys
        cdef const uint64_t* av = self.avail
        cdef uint64_t a
        while i < n:
            c = self._child(cur, q[i])
            if c < 0:
                break
            s = self.nodes[c].start
            length = self.nodes[c].length
            lim = n - i
            if length < lim:
                lim = length
            k = 0
            while k < lim and pool[s + k] == q[i + k] and av[s + k] != 0:
                k += 1
            for j in range(k):
                a = av[s + j]
                if out != NULL:
                    memcpy(out + (i + j) * ms, self.planes[pbr_ctz(a)] + (s + j) * ms, ms)
                if locs != NULL:
                    locs[i + j] = a
            i += k
            if k < length:
                break
            cur = <uint32_t>c
        return i

    cdef int _insert(self, const uint64_t* q, Py_ssize_t n, const uint8_t* m,
                     int worker) noexcept nogil:
        """0 if done, -1 out of memory, -2 too many nodes."""
        cdef uint32_t cur = 0, mid, leaf
        cdef int64_t c, s
        cdef Py_ssize_t i = 0, j, k, length, lim, rest
        cdef Py_ssize_t ms = self.meta_size
        cdef uint64_t bit = (<uint64_t>1) << worker
        cdef int r = self._reserve(n)
        if r != 0:
            return r
        if self._ensure_planes(worker) != 0:
            return -1
        while i < n:
            c = self._child(cur, q[i])
            if c < 0:
                # a new leaf holding the rest of the sequence
                rest = n - i
                s = self.n_pool
                memcpy(self.keys + s, q + i, rest * sizeof(uint64_t))
                memcpy(self.planes[worker] + s * ms, m + i * ms, rest * ms)
                for j in range(rest):
                    self.avail[s + j] = bit
                    self._idx_add(q[i + j], s + j)
                self.n_live += rest
                self.n_pool += rest
                leaf = <uint32_t>self.n_nodes
                self.n_nodes += 1
                self.nodes[leaf].start = s
                self.nodes[leaf].length = <uint32_t>rest
                self._set_child(cur, q[i], leaf)
                return 0
            s = self.nodes[c].start
            length = self.nodes[c].length
            lim = n - i
            if length < lim:
                lim = length
            k = 1
            while k < lim and self.keys[s + k] == q[i + k]:
                k += 1
            for j in range(k):
                self._mark(s + j, worker, m + (i + j) * ms)
            if k == length:
                cur = <uint32_t>c
                i += k
                continue
            if i + k == n:
                return 0        # the sequence ends inside an edge: all marked
            # diverge after k blocks: mid takes the head, c keeps the tail
            mid = <uint32_t>self.n_nodes
            self.n_nodes += 1
            self.nodes[mid].start = s
            self.nodes[mid].length = <uint32_t>k
            self.nodes[c].start = s + k
            self.nodes[c].length = <uint32_t>(length - k)
            self._set_child(cur, q[i], mid)
            self._set_child(mid, self.keys[s + k], <uint32_t>c)
            cur = mid
            i += k
        return 0

    cdef int64_t _remove(self, const uint64_t* q, Py_ssize_t n, int worker) noexcept nogil:
        """Clear ``worker``'s bit (every bit if < 0) of each listed block's slots."""
        cdef uint64_t mask = <uint64_t>0xFFFFFFFFFFFFFFFFULL
        cdef uint64_t a, c
        cdef int64_t p, got, removed = 0
        cdef Py_ssize_t i
        if worker >= 0:
            mask = (<uint64_t>1) << worker
        for i in range(n):
            got = 0
            p = self._idx_find(q[i])
            while p >= 0:
                a = self.avail[p]
                c = a & mask
                if c:
                    got += pbr_popcount(c)
                    self.avail[p] = a & ~c
                    if a == c:
                        self.n_live -= 1
                p = self.dup[p]
            if got == 0:
                self.n_noops += 1
            removed += got
        return removed

    cdef void _clear_worker(self, int worker) noexcept nogil:
        cdef uint64_t bit = (<uint64_t>1) << worker, a
        cdef int64_t p
        for p in range(self.n_pool):
            a = self.avail[p]
            if a & bit:
                self.avail[p] = a & ~bit
                if a == bit:
                    self.n_live -= 1

    # ---------------------------------------------------------------- Python API
    def match(self, block_ids):
        """Longest available prefix of ``block_ids`` as a :class:`Match` (metas copied,
        with each block's worker bitmap in ``locations``)."""
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
        if got < n:
            out = out[:got]
            locs = locs[:got]
        return Match(got, out, locs)

    def match_len(self, block_ids):
        """Number of blocks of the longest indexed prefix (no metadata copied)."""
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), got
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        with nogil:
            pb_rdlock(&self.lock)
            got = self._match(q, n, NULL, NULL)
            pb_unlock(&self.lock)
        return got

    def insert(self, block_ids, metas, int worker=0):
        """Make a sequence available on ``worker``; blocks already available there
        keep their first metadata."""
        if not 0 <= worker < 64:
            raise ValueError(f"worker {worker} outside 0..63")
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0)
        cdef cnp.ndarray m = as_metas(metas, n, self.meta_size)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef const uint8_t* mp = <const uint8_t*>cnp.PyArray_DATA(m)
        cdef int r
        if n == 0:
            return
        if n > 0xFFFFFFFF:
            raise ValueError("a sequence of more than 2**32 - 1 blocks")
        with nogil:
            pb_wrlock(&self.lock)
            r = self._insert(q, n, mp, worker)
            pb_unlock(&self.lock)
        if r == -1:
            raise MemoryError("radix tree: out of memory")
        if r == -2:
            raise OverflowError("radix tree: more than 2**32 - 16 nodes")

    def remove(self, block_ids, int worker=-1):
        """Make the listed blocks unavailable on ``worker`` (every worker if < 0);
        returns the (block, worker) availabilities cleared."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        cdef cnp.ndarray a = as_ids(block_ids)
        cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0)
        cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(a)
        cdef int64_t got
        with nogil:
            pb_wrlock(&self.lock)
            got = self._remove(q, n, worker)
            pb_unlock(&self.lock)
        return got

    def clear(self, int worker=-1):
        """Every block unavailable on ``worker``; with ``worker < 0`` an empty tree."""
        if worker >= 64:
            raise ValueError(f"worker {worker} outside 0..63")
        with nogil:
            pb_wrlock(&self.lock)
            if worker < 0:
                self._reset()
            else:
                self._clear_worker(worker)
            pb_unlock(&self.lock)

    @property
    def remove_noops(self):
        """Listed blocks a ``remove`` found unavailable already."""
        return self.n_noops

    @property
    def pool(self):
        """Pool slots held, removed blocks included."""
        return self.n_pool

    def export(self):
        """The raw arrays (snapshots): a dict of NumPy copies of the node table, the
        pools (with availability and the workers' metadata planes) and the child
        table, plus the scalar fields; :meth:`restore` is its inverse."""
        cdef int w
        pb_rdlock(&self.lock)
        try:
            nodes = np.empty(self.n_nodes * sizeof(Node), dtype=np.uint8)
            keys = np.empty(self.n_pool, dtype=np.uint64)
            metas = np.empty((self.n_pool, self.meta_size), dtype=np.uint8)
            slots = np.empty(self.n_slots * sizeof(Slot), dtype=np.uint8)
            if self.n_nodes:
                memcpy(cnp.PyArray_DATA(nodes), self.nodes, self.n_nodes * sizeof(Node))
            if self.n_pool:
                memcpy(cnp.PyArray_DATA(keys), self.keys, self.n_pool * sizeof(uint64_t))
                memcpy(cnp.PyArray_DATA(metas), self.metas, self.n_pool * self.meta_size)
            memcpy(cnp.PyArray_DATA(slots), self.slots, self.n_slots * sizeof(Slot))
            avail = np.empty(self.n_pool, dtype=np.uint64)
            planes = np.empty((self.n_planes - 1, self.n_pool, self.meta_size), dtype=np.uint8)
            if self.n_pool:
                memcpy(cnp.PyArray_DATA(avail), self.avail, self.n_pool * sizeof(uint64_t))
                for w in range(1, self.n_planes):
                    memcpy(<uint8_t*>cnp.PyArray_DATA(planes) + (w - 1) * self.n_pool * self.meta_size,
                           self.planes[w], self.n_pool * self.meta_size)
            scal = np.array([self.n_nodes, self.n_pool, self.n_slots, self.slot_shift,
                             self.n_used, self.meta_size], dtype=np.int64)
        finally:
            pb_unlock(&self.lock)
        return {"scalars": scal, "nodes": nodes, "keys": keys, "metas": metas, "slots": slots,
                "avail": avail, "planes": planes}

    def restore(self, scalars, nodes, keys, metas, slots, avail=None, planes=None):
        """Replace this (empty) tree's arrays with an :meth:`export` (bulk copies).
        Without ``avail`` (an export from before removal) every block is on worker 0."""
        cdef cnp.ndarray sc = np.ascontiguousarray(scalars, dtype=np.int64)
        cdef cnp.ndarray nd = np.ascontiguousarray(nodes, dtype=np.uint8)
        cdef cnp.ndarray ky = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef cnp.ndarray mt = np.ascontiguousarray(metas, dtype=np.uint8)
        cdef cnp.ndarray sl = np.ascontiguousarray(slots, dtype=np.uint8)
        cdef int64_t n_nodes = sc[0], n_pool = sc[1], n_slots = sc[2]
        if sc.shape[0] != 6 or sc[5] != self.meta_size:
            raise ValueError("radix restore: scalars do not match this tree's meta_size")
        if (nd.nbytes != n_nodes * sizeof(Node) or ky.shape[0] != n_pool
                or mt.nbytes != n_pool * self.meta_size or sl.nbytes != n_slots * sizeof(Slot)
                or n_nodes < 1 or n_slots < 64 or (n_slots & (n_slots - 1))):
            raise ValueError("radix restore: array sizes are inconsistent")
        cdef Node* nn = <Node*>malloc(max(n_nodes, 64) * sizeof(Node))
        cdef uint64_t* nk = <uint64_t*>malloc(max(n_pool, 1) * sizeof(uint64_t))
        cdef uint8_t* nm = <uint8_t*>malloc(max(n_pool, 1) * self.meta_size)
        cdef Slot* ns = <Slot*>malloc(n_slots * sizeof(Slot))
        cdef cnp.ndarray av = (np.ones(n_pool, dtype=np.uint64) if avail is None
                               else np.ascontiguousarray(avail, dtype=np.uint64))
        cdef cnp.ndarray pl = (np.empty((0, n_pool, self.meta_size), dtype=np.uint8)
                               if planes is None else np.ascontiguousarray(planes, dtype=np.uint8))
        cdef int n_planes = 1 + <int>pl.shape[0], w
        cdef int64_t p, cap = max(n_pool, 1)
        cdef uint64_t idx_n = 64
        if (av.shape[0] != n_pool or pl.ndim != 3 or pl.shape[1] != n_pool
                or pl.shape[2] != self.meta_size or n_planes > 64):
            free(nn); free(nk); free(nm); free(ns)
            raise ValueError("radix restore: availability arrays are inconsistent")
        while <uint64_t>n_pool * 2 > idx_n:
            idx_n *= 2
        cdef uint64_t* na = <uint64_t*>malloc(cap * sizeof(uint64_t))
        cdef int64_t* nd2 = <int64_t*>malloc(cap * sizeof(int64_t))
        cdef IdSlot* ni = <IdSlot*>malloc(idx_n * sizeof(IdSlot))
        cdef uint8_t* npl[64]
        cdef bint ok = nn and nk and nm and ns and na and nd2 and ni
        for w in range(1, n_planes):
            npl[w] = <uint8_t*>malloc(cap * self.meta_size)
            ok = ok and npl[w] != NULL
        if not ok:
            free(nn); free(nk); free(nm); free(ns); free(na); free(nd2); free(ni)
            for w in range(1, n_planes):
                free(npl[w])
            raise MemoryError("radix restore: out of memory")
        memcpy(na, cnp.PyArray_DATA(av), n_pool * sizeof(uint64_t))
        for w in range(1, n_planes):
            memcpy(npl[w], <uint8_t*>cnp.PyArray_DATA(pl) + (w - 1) * n_pool * self.meta_size,
                   n_pool * self.meta_size)
        memcpy(nn, cnp.PyArray_DATA(nd), n_nodes * sizeof(Node))
        memcpy(nk, cnp.PyArray_DATA(ky), n_pool * sizeof(uint64_t))
        memcpy(nm, cnp.PyArray_DATA(mt), n_pool * self.meta_size)
        memcpy(ns, cnp.PyArray_DATA(sl), n_slots * sizeof(Slot))
        pb_wrlock(&self.lock)
        free(self.nodes); free(self.keys); free(self.metas); free(self.slots)
        free(self.avail); free(self.dup); free(self.idx)
        for w in range(1, self.n_planes):
            free(self.planes[w])
        self.nodes, self.keys, self.metas, self.slots = nn, nk, nm, ns
        self.avail, self.dup, self.idx = na, nd2, ni
        self.planes[0] = nm
        for w in range(1, n_planes):
            self.planes[w] = npl[w]
        self.n_planes = n_planes
        self.idx_n = idx_n
        self.idx_mask = idx_n - 1
        self.idx_shift = 64 - pbr_ctz(idx_n)
        self.idx_used = 0
        self.n_live = 0
        for p in range(<int64_t>idx_n):
            ni[p].slot = -1
        for p in range(n_pool):
            self._idx_add(nk[p], p)
            if na[p] != 0:
                self.n_live += 1
        self.n_nodes, self.cap_nodes = n_nodes, max(n_nodes, 64)
        self.n_pool, self.cap_pool = n_pool, max(n_pool, 1)
        self.n_slots = n_slots
        self.slot_mask = n_slots - 1
        self.slot_shift = sc[3]
        self.n_used = sc[4]
        pb_unlock(&self.lock)

    @property
    def nodes(self):
        """Nodes below the root (= edges)."""
        return self.n_nodes - 1

    @property
    def entries(self):
        """Blocks available on at least one worker (= distinct indexed prefixes)."""
        return self.n_live

    @property
    def nbytes(self):
        """Bytes allocated for the node table, the pools (keys, metadata planes,
        availability, id chains), the child table and the id index."""
        return (self.cap_nodes * sizeof(Node)
                + self.cap_pool * (sizeof(uint64_t) * 3 + self.meta_size * self.n_planes)
                + self.n_slots * sizeof(Slot) + self.idx_n * sizeof(IdSlot))

    def __len__(self):
        return self.n_live
