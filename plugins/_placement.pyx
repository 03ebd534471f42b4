# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled checkpoint placement: the exact solver and the checkpoint id set.

``solve`` runs the dynamic program of :mod:`prefixbench.plugins._placement_ref`
(same recurrence, same floating-point expression, same tie rule) with each
layer's row minima found by divide and conquer.  A row's candidates are
``K[a] - a * S0[b]`` with ``K[a] = (E[a] - S1[a]) + a * S0[a]`` (the row's
``S1[b]`` added to its minimum), so the inner loop reads one array.  The interval cost
``cost(a, b) = (S1[b] - S1[a]) - a * (S0[b] - S0[a])`` obeys the quadrangle
inequality (the difference is ``(a' - a) * sum(w[b..b'-1]) >= 0``), so the
leftmost minimising ``a`` never moves left as ``b`` grows: a layer costs
O(N log N) and the whole solve O(N * M * log N), all of it without the GIL.

``CheckpointSet`` is an open-addressing set of uint64 block ids (linear
probing, grown at half load) answering "the deepest member of this prefix";
it keeps the GIL (its calls are short and it is then safe to share).
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc, calloc

cnp.import_array()

__all__ = ["CheckpointSet", "prefix_sums", "solve"]


def prefix_sums(weights):
    """``(S0, S1)``: running sums of ``w[d]`` and ``d * w[d]`` (length N + 2, floats)."""
    cdef cnp.ndarray[cnp.float64_t, ndim=1] w = np.ascontiguousarray(weights, dtype=np.float64)
    cdef Py_ssize_t n = w.shape[0], d
    s0 = np.zeros(n + 1, dtype=np.float64)
    s1 = np.zeros(n + 1, dtype=np.float64)
    cdef double[::1] a0 = s0, a1 = s1
    for d in range(n):
        a0[d + 1] = a0[d] + w[d]
        a1[d + 1] = a1[d] + d * w[d]
    return s0, s1


cdef void _layer(const double* s0, const double* s1, const double* k, double* cur,
                 int32_t* arg, int64_t lo, int64_t hi, int64_t optlo, int64_t opthi) noexcept nogil:
    """Rows ``b`` in [lo, hi] of one layer, their minimising ``a`` known to lie in
    [optlo, opthi]; the leftmost minimum of ``k[a] - a * S0[b]`` wins."""
    cdef int64_t mid, a, top, best_a
    cdef double v, best, x
    while lo <= hi:
        mid = (lo + hi) >> 1
        top = opthi if opthi < mid - 1 else mid - 1
        x = s0[mid]
        best_a = optlo
        best = k[optlo] - optlo * x
        a = optlo + 1
        while a <= top:
            v = k[a] - a * x
            if v < best:
                best = v
                best_a = a
            a += 1
        cur[mid] = best + s1[mid]
        arg[mid] = <int32_t>best_a
        # the left half recursively, the right half by looping on
        _layer(s0, s1, k, cur, arg, lo, mid - 1, optlo, best_a)
        lo = mid + 1
        optlo = best_a


def solve(weights, budget):
    """``(positions, total)``: at most ``budget`` checkpoints in 1..N minimising
    ``sum(w[d] * (d - s(d)))``, and that sum (not normalised)."""
    s0_arr, s1_arr = prefix_sums(weights)
    cdef double[::1] s0 = s0_arr, s1 = s1_arr
    cdef int64_t n1 = s0.shape[0] - 1          # N + 1: the end sentinel
    cdef int64_t m = int(budget)
    if m > n1 - 1:
        m = n1 - 1
    if m < 0:
        m = 0
    if n1 >= 0x7FFFFFFF:
        raise ValueError("more than 2**31 - 2 positions")
    prev_arr = np.array(s1_arr, dtype=np.float64)     # E_0(b) = cost(0, b) = S1[b]
    cur_arr = np.zeros(n1 + 1, dtype=np.float64)
    arg_arr = np.zeros((max(m, 1), n1 + 1), dtype=np.int32)
    k_arr = np.zeros(n1 + 1, dtype=np.float64)
    cdef double[::1] prev = prev_arr, cur = cur_arr, kk = k_arr
    cdef int32_t[:, ::1] arg = arg_arr
    cdef int64_t j, a0
    cdef double* tmp
    cdef double* p = &prev[0]
    cdef double* c = &cur[0]
    with nogil:
        for j in range(m):
            for a0 in range(n1 + 1):
                kk[a0] = (p[a0] - s1[a0]) + a0 * s0[a0]
            c[0] = 0.0
            _layer(&s0[0], &s1[0], &kk[0], c, &arg[j, 0], 1, n1, 0, n1 - 1)
            tmp = p
            p = c
            c = tmp
    total = p[n1]
    positions = []
    cdef int64_t b = n1, a
    for j in range(m - 1, -1, -1):
        a = arg[j, b]
        if a == 0:
            break
        positions.append(a)
        b = a
    return np.array(sorted(positions), dtype=np.int64), float(total)


cdef uint64_t _H = 0x9E3779B97F4A7C15ULL


cdef class CheckpointSet:
    """Chained block ids that carry a stored recurrent state."""

    cdef uint64_t* keys
    cdef char* used
    cdef uint64_t cap, mask
    cdef int shift
    cdef int64_t n

    def __cinit__(self, Py_ssize_t initial=1024):
        self.cap = 1024
        self.mask = self.cap - 1
        self.shift = 64 - 10
        self.n = 0
        self.keys = <uint64_t*>malloc(self.cap * sizeof(uint64_t))
        self.used = <char*>calloc(self.cap, 1)
        if self.keys == NULL or self.used == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.keys)
        free(self.used)

    cdef inline bint _has(self, uint64_t k) noexcept nogil:
        cdef uint64_t i = (k * _H) >> self.shift
        while self.used[i]:
            if self.keys[i] == k:
                return True
            i = (i + 1) & self.mask
        return False

    cdef inline void _put(self, uint64_t k) noexcept nogil:
        cdef uint64_t i = (k * _H) >> self.shift
        while self.used[i]:
            if self.keys[i] == k:
                return
            i = (i + 1) & self.mask
        self.used[i] = 1
        self.keys[i] = k
        self.n += 1

    cdef int _grow(self) except -1:
        cdef uint64_t old_cap = self.cap, i
        cdef uint64_t* old_keys = self.keys
        cdef char* old_used = self.used
        cdef uint64_t* nk = <uint64_t*>malloc(old_cap * 2 * sizeof(uint64_t))
        cdef char* nu = <char*>calloc(old_cap * 2, 1)
        if nk == NULL or nu == NULL:
            free(nk)
            free(nu)
            raise MemoryError()
        self.keys, self.used = nk, nu
        self.cap = old_cap * 2
        self.mask = self.cap - 1
        self.shift -= 1
        self.n = 0
        for i in range(old_cap):
            if old_used[i]:
                self._put(old_keys[i])
        free(old_keys)
        free(old_used)
        return 0

    def add_many(self, block_ids):
        cdef cnp.ndarray[cnp.uint64_t, ndim=1] ids = np.ascontiguousarray(block_ids,
                                                                          dtype=np.uint64)
        cdef Py_ssize_t i
        for i in range(ids.shape[0]):
            if self._has(ids[i]):
                continue
            if (self.n + 1) * 2 > <int64_t>self.cap:
                self._grow()
            self._put(ids[i])

    def deepest(self, block_ids, Py_ssize_t n):
        """The largest k <= n with ``block_ids[k-1]`` in the set (0: none)."""
        cdef cnp.ndarray[cnp.uint64_t, ndim=1] ids = np.ascontiguousarray(block_ids,
                                                                          dtype=np.uint64)
        cdef Py_ssize_t k = n if n < ids.shape[0] else ids.shape[0]
        while k > 0:
            if self._has(ids[k - 1]):
                return k
            k -= 1
        return 0

    def to_array(self):
        """The members, sorted (uint64)."""
        out = np.empty(self.n, dtype=np.uint64)
        cdef uint64_t[::1] o = out
        cdef uint64_t i
        cdef Py_ssize_t j = 0
        for i in range(self.cap):
            if self.used[i]:
                o[j] = self.keys[i]
                j += 1
        out.sort()
        return out

    def __contains__(self, block_id):
        return self._has(<uint64_t>int(block_id))

    def __len__(self):
        return self.n

    @property
    def nbytes(self):
        """Bytes of the key array (the flags add one byte a slot)."""
        return self.cap * 8
