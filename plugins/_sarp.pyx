# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled hot paths of SARP: candidate filters, the match-potential search
(ExistsMatch, paper Algorithm 1), the routing directory and settling a window
(reading and verifying its candidates in potential order).

The rules are documented in :mod:`prefixbench.plugins.sarp`; the pure-Python
reference with the same names, which the tests hold these equal to, is
:mod:`prefixbench.plugins._sarp_ref`.

Routing directory layout: an open-addressing table of 32-bit entry indexes
(linear probing on the key's hash, load <= 1/2, keys compared in the entry;
:meth:`RoutingDirectory.discard` deletes by backward shift, so no probe chain
ever holds a hole) over an array of 32-byte entries; each entry owns a
posting array of packed 12-byte ``(filter, segment id)`` pairs sorted by
filter ascending, then segment id descending (newest first among equal
filters).  A readers-writer lock guards everything: a query sees a posting
list either before or after an update, never in between, and
:meth:`RoutingDirectory.publish` applies a whole back-fill batch under one
write lock, so its entries appear all at once.  Writers and queries take the
lock only after releasing the GIL and touch no Python object while holding
it; ``dump``/``check`` (tests, snapshots) read under the lock with the GIL
held, which cannot deadlock because no lock holder ever waits for the GIL.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc, qsort
from libc.string cimport memmove, memcpy

__all__ = ["COUNTER_NAMES", "Counters", "LIVE", "NONE", "PENDING", "RoutingDirectory",
           "child_postings", "filters", "first_batch", "insert_plan",
           "match_run", "max_potential", "overlay_cut", "overlay_revive", "record_ids",
           "settle"]

cnp.import_array()

include "_rwlock.pxi"
include "_arrays.pxi"

DEF HEADER = 40
DEF CK_OFF = 32

include "_segment_record.pxi"

from cpython.bytes cimport PyBytes_AS_STRING


# ----------------------------------------------------------------------------- counters
# the counters' names, in slot order (the reference module holds the one list; the
# enum below follows it)
from prefixbench.plugins._sarp_ref import COUNTER_NAMES

cdef enum:
    C_MATCHES, C_MATCH_WINDOWS, C_ENTRY_USES, C_CAND_BEFORE, C_CAND_AFTER, C_RETRIEVED,
    C_MATCH_READS, C_EXTRA_BATCHES, C_SPEC_READS, C_SPEC_WASTED, C_ROUND_TRIPS,
    C_HIDDEN_ROUTES,
    C_INSERTS, C_INSERT_READS, C_INSERTS_AFTER_MATCH, C_INSERT_READS_AFTER_MATCH,
    C_WINDOWS_REUSED, C_WINDOWS_KNOWN, C_SEGMENTS_REUSED, C_RECORDS_REUSED, C_REPLANS,
    C_SEGMENTS, C_SEGMENTS_COPIED, C_SEGMENTS_EXTENDED, C_LOGICAL_BLOCKS, C_COPIED_BLOCKS,
    C_JOBS, C_JOBS_EXPAND, C_JOBS_REFINE, C_BACKFILL_READS, C_BACKFILL_POSTINGS,
    C_BACKFILL_WAITS, N_COUNTERS

_COUNTER_SLOT = {name: i for i, name in enumerate(COUNTER_NAMES)}
assert len(COUNTER_NAMES) == N_COUNTERS


cdef class Counters:
    """sarp's counters (:data:`COUNTER_NAMES`), so that a match or an insert adds all of
    its own in one call.  Safe across threads: each method adds with the GIL held and no
    call inside that could give it up."""

    cdef int64_t v[N_COUNTERS]

    def __cinit__(self):
        cdef int i
        for i in range(N_COUNTERS):
            self.v[i] = 0

    def count_match(self, tuple counts):
        """Add one match: ``counts`` as ``match_run`` returns them."""
        cdef int64_t windows, uses, before, after, retrieved, extra, spec, wasted, trips
        cdef int64_t hidden
        windows, uses, before, after, retrieved, extra, spec, wasted, trips, hidden = counts
        cdef int64_t* v = self.v
        v[C_MATCHES] += 1
        v[C_MATCH_WINDOWS] += windows
        v[C_ENTRY_USES] += uses
        v[C_CAND_BEFORE] += before
        v[C_CAND_AFTER] += after
        v[C_RETRIEVED] += retrieved
        v[C_MATCH_READS] += retrieved + wasted
        v[C_EXTRA_BATCHES] += extra
        v[C_SPEC_READS] += spec
        v[C_SPEC_WASTED] += wasted
        v[C_ROUND_TRIPS] += trips
        v[C_HIDDEN_ROUTES] += hidden

    def count_insert(self, tuple plan_counts, int64_t records, bint after_match,
                     int64_t windows_reused, int64_t windows_known, bint replanned):
        """Add one insert: ``plan_counts`` as ``insert_plan`` returns them, ``records``
        the records it wrote."""
        cdef int64_t reads, new_blocks, copied, ext, cp, reused_seg, reused_records
        reads, new_blocks, copied, ext, cp, reused_seg, reused_records = plan_counts
        cdef int64_t* v = self.v
        v[C_INSERTS] += 1
        v[C_INSERT_READS] += reads
        if after_match:
            v[C_INSERTS_AFTER_MATCH] += 1
            v[C_INSERT_READS_AFTER_MATCH] += reads
        v[C_WINDOWS_REUSED] += windows_reused
        v[C_WINDOWS_KNOWN] += windows_known
        v[C_SEGMENTS_REUSED] += reused_seg
        v[C_RECORDS_REUSED] += reused_records
        v[C_REPLANS] += replanned
        v[C_SEGMENTS] += records - ext
        v[C_SEGMENTS_COPIED] += cp
        v[C_SEGMENTS_EXTENDED] += ext
        v[C_LOGICAL_BLOCKS] += new_blocks
        v[C_COPIED_BLOCKS] += copied

    def add(self, str name, int64_t n=1):
        self.v[<Py_ssize_t>_COUNTER_SLOT[name]] += n      # (KeyError: not a counter)

    def as_dict(self):
        return {name: self.v[i] for i, name in enumerate(COUNTER_NAMES)}

    def restore(self, values):
        """Set the counters ``values`` names (a snapshot's); other names are ignored."""
        for k, n in values.items():
            i = _COUNTER_SLOT.get(k)
            if i is not None:
                self.v[<Py_ssize_t>i] = int(n)


# ----------------------------------------------------------------------------- filters
cdef inline uint64_t fmix64(uint64_t x) noexcept nogil:
    x ^= x >> 33
    x *= 0xFF51AFD7ED558CCDULL
    x ^= x >> 33
    x *= 0xC4CEB9FE1A85EC53ULL
    x ^= x >> 33
    return x


cdef inline uint64_t _filter(const uint64_t* ids, Py_ssize_t n, Py_ssize_t off, int nfields,
                             int stride, int bits) noexcept nogil:
    cdef uint64_t f = 0, fmask = (<uint64_t>0xFFFFFFFFFFFFFFFFULL) if bits == 64 \
        else ((<uint64_t>1 << bits) - 1)
    cdef Py_ssize_t rs, re
    cdef int i
    for i in range(nfields):
        rs = off + <Py_ssize_t>i * stride
        if bits < 64:
            f <<= bits
        if rs < n:
            re = rs + stride
            if re > n:
                re = n
            f |= fmix64(ids[re - 1]) & fmask
    if nfields * bits < 64:
        f <<= 64 - nfields * bits
    return f


def filters(ids, Py_ssize_t n, offsets, int nfields, int stride, int bits):
    """The candidate filter at each offset of ``offsets`` over ``ids[:n]``."""
    cdef const uint64_t[::1] a = np.ascontiguousarray(ids, dtype=np.uint64)
    cdef const int64_t[::1] o = np.ascontiguousarray(offsets, dtype=np.int64)
    cdef Py_ssize_t k = o.shape[0], j
    out = np.empty(k, dtype=np.uint64)
    cdef uint64_t[::1] w = out
    if n > a.shape[0]:
        n = a.shape[0]
    if k == 0:
        return out
    cdef const uint64_t* ap = &a[0] if a.shape[0] else NULL
    for j in range(k):
        w[j] = _filter(ap, n, o[j], nfields, stride, bits) if ap != NULL else 0
    return out


cdef inline uint64_t _prefix_mask(int k, int bits) noexcept nogil:
    if k <= 0:
        return 0
    if k * bits >= 64:
        return 0xFFFFFFFFFFFFFFFFULL
    return ~((<uint64_t>0xFFFFFFFFFFFFFFFFULL) >> (k * bits))


cdef packed struct Posting:
    uint64_t filt
    uint32_t seg        # segment ids are < 2**32 here (checked on the way in)


cdef inline Py_ssize_t _lower(const Posting* p, Py_ssize_t n, uint64_t f) noexcept nogil:
    """First index whose filter is >= f."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if p[mid].filt < f:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _upper(const Posting* p, Py_ssize_t n, uint64_t f) noexcept nogil:
    """First index whose filter is > f."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if p[mid].filt <= f:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline bint _exists(const Posting* p, Py_ssize_t n, uint64_t qf, int k, int bits) noexcept nogil:
    """ExistsMatch: some candidate shares the query's first ``k`` fields."""
    cdef uint64_t m = _prefix_mask(k, bits)
    cdef uint64_t fmin = qf & m, fmax = fmin | ~m
    cdef Py_ssize_t i = _lower(p, n, fmin)
    return i < n and p[i].filt <= fmax


cdef int _max_fields(const Posting* p, Py_ssize_t n, uint64_t qf, int nfields, int stride,
                     int bits) noexcept nogil:
    """Algorithm 1: binary search over L in [0, N*stride] for the largest L whose
    filter interval is non-empty; returns k* = L* // stride (fields matched)."""
    cdef int lo = 0, hi = nfields * stride, mid
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _exists(p, n, qf, mid // stride, bits):
            lo = mid
        else:
            hi = mid - 1
    return lo // stride


# ----------------------------------------------------------------------------- settling a window
cdef inline Py_ssize_t _emit(const Posting* lst, Py_ssize_t a, Py_ssize_t b, int64_t pot,
                             uint64_t* out_s, int64_t* out_p, Py_ssize_t cnt,
                             Py_ssize_t m) noexcept nogil:
    """Append postings ``[a, b)`` with potential ``pot`` to the output, up to ``m`` in
    all; the new count."""
    while a < b and cnt < m:
        out_s[cnt] = lst[a].seg
        out_p[cnt] = pot
        cnt += 1
        a += 1
    return cnt


@cython.final
@cython.freelist(64)
cdef class _Route:
    """One window's routing answer held in C: the probed entry (``j``, -1 for none),
    its candidates and their potentials (``cnt`` of each), and the entry's size
    before (``n``) and after (``n_after``) filtering, and whether a deeper point's
    entry was passed over as hidden (``hidden``: it waits on a back-fill job, so the
    answer may be coarser than it will be once the job is published).  The match
    and insert loops pass it from routing to settling; the Python API's tuple ``(j,
    segs, pots, n, n_after, hidden)`` is :meth:`as_tuple`.  Up to four candidates
    (a MaxRetrieval of 3) live inside the object, so a routed window allocates no
    arrays."""
    cdef Py_ssize_t j, cnt, n, n_after
    cdef bint hidden
    cdef uint64_t* segs
    cdef int64_t* pots
    cdef uint64_t segs_in[4]
    cdef int64_t pots_in[4]

    def __cinit__(self):
        self.j = -1
        self.cnt = self.n = self.n_after = 0
        self.hidden = False
        self.segs = self.segs_in
        self.pots = self.pots_in

    def __dealloc__(self):
        if self.segs != self.segs_in:
            free(self.segs)
        if self.pots != self.pots_in:
            free(self.pots)

    cdef int reserve(self, Py_ssize_t m) noexcept nogil:
        """Room for ``m`` candidates (once, before any is written); -1 if out of memory."""
        if m <= 4:
            return 0
        self.segs = <uint64_t*>malloc(m * sizeof(uint64_t))
        self.pots = <int64_t*>malloc(m * sizeof(int64_t))
        if self.segs == NULL or self.pots == NULL:
            free(self.segs)
            free(self.pots)
            self.segs, self.pots = self.segs_in, self.pots_in
            return -1
        return 0

    cdef tuple as_tuple(self):
        return (self.j, _array_of(self.segs, self.cnt, cnp.NPY_UINT64),
                _array_of(self.pots, self.cnt, cnp.NPY_INT64), self.n, self.n_after,
                self.hidden)


cdef _Route _route_of(tuple route):
    """A route tuple ``(j, segs, pots, n, n_after)`` as a :class:`_Route`."""
    cdef cnp.ndarray cands = as_carray(route[1], cnp.NPY_UINT64, 1, "candidates")
    cdef cnp.ndarray pots = as_carray(route[2], cnp.NPY_INT64, 1, "potentials")
    cdef Py_ssize_t ncand = cnp.PyArray_DIM(cands, 0)
    if cnp.PyArray_DIM(pots, 0) != ncand:
        raise ValueError("settle: one potential per candidate")
    cdef _Route r = _Route.__new__(_Route)
    if r.reserve(ncand) < 0:
        raise MemoryError()
    r.j, r.n, r.n_after, r.cnt = route[0], route[3], route[4], ncand
    r.hidden = route[5]
    if ncand:
        memcpy(r.segs, cnp.PyArray_DATA(cands), ncand * sizeof(uint64_t))
        memcpy(r.pots, cnp.PyArray_DATA(pots), ncand * sizeof(int64_t))
    return r


cdef cnp.ndarray _array_of(const void* p, Py_ssize_t m, int typenum):
    """A new 1-d array of ``m`` 8-byte items (``typenum`` uint64 or int64) copied from ``p``."""
    cdef cnp.npy_intp dim = m
    cdef cnp.ndarray a = cnp.PyArray_EMPTY(1, &dim, typenum, 0)
    if m:
        memcpy(cnp.PyArray_DATA(a), p, m * 8)
    return a


cdef Py_ssize_t _first_count(Py_ssize_t j, Py_ssize_t ncand, const int64_t* pp, Py_ssize_t na,
                             Py_ssize_t budget, bint filtering, bint sequential) noexcept:
    if j < 0 or ncand == 0:
        return 0
    if not filtering:
        return ncand
    if pp[0] <= 0:
        return 0
    if sequential:
        return 1
    cdef Py_ssize_t m = budget if budget else 2
    if na < m:
        m = na
    if ncand < m:
        m = ncand
    return m if m > 1 else 1


cdef inline Py_ssize_t _run_of(const int64_t* pp, Py_ssize_t i, Py_ssize_t n) noexcept:
    cdef Py_ssize_t e = i + 1
    while e < n and pp[e] == pp[i]:
        e += 1
    return e - i


cdef Py_ssize_t _verify_record(object raw, uint64_t key, Py_ssize_t S, Py_ssize_t meta_size,
                               uint64_t ws, const uint64_t* q, Py_ssize_t qn) except -2:
    """``_seg_verify`` of one record held as bytes (or any buffer: copied)."""
    cdef bytes b = raw if type(raw) is bytes else bytes(raw)
    return _seg_verify(<const uint8_t*>PyBytes_AS_STRING(b), len(b), key, S, meta_size, ws,
                       q, qn)


def first_batch(tuple route, Py_ssize_t budget, bint filtering, bint sequential):
    """The candidates a window reads first: as the reference's ``first_batch``."""
    cands = route[1]
    cdef cnp.ndarray pots = as_carray(route[2], cnp.NPY_INT64, 1, "potentials")
    cdef Py_ssize_t m = _first_count(route[0], cnp.PyArray_DIM(pots, 0),
                                     <const int64_t*>cnp.PyArray_DATA(pots), route[4], budget,
                                     filtering, sequential)
    return cands[:m]


def settle(tuple route, qw, uint64_t ws, Py_ssize_t budget, bint filtering, bint sequential,
           Py_ssize_t S, Py_ssize_t meta_size, dict known, first, read, count_corrupt,
           verify_phase):
    """Best verified record for one query window: as the reference's ``settle`` (its
    doc has the rules), with the verification and the candidate bookkeeping in C."""
    cdef cnp.ndarray qa = as_ids(qw)
    return _settle(_route_of(route), <const uint64_t*>cnp.PyArray_DATA(qa),
                   cnp.PyArray_DIM(qa, 0), ws,
                   budget, filtering, sequential, S, meta_size, known, first, read,
                   count_corrupt, verify_phase)


cdef tuple _settle(_Route route, const uint64_t* q, Py_ssize_t qlen, uint64_t ws,
                   Py_ssize_t budget, bint filtering, bint sequential, Py_ssize_t S,
                   Py_ssize_t meta_size, dict known, first, read, count_corrupt, verify_phase):
    """:func:`settle` of the ``qlen`` query ids at ``q``."""
    if not filtering:
        budget = 0
    cdef Py_ssize_t j = route.j
    nb, na = route.n, route.n_after
    cdef Py_ssize_t ncand = route.cnt
    cdef const int64_t* pp = route.pots
    cdef const uint64_t* cp = route.segs
    cdef Py_ssize_t best_v = 0, v, t, m, nk, kept, got = 0, batches = 0, i = 0, bv, bk
    cdef uint64_t key
    cdef bint filtered = False, has_known = bool(known)
    cdef _Route left
    cdef list ids
    cdef uint64_t* kbuf
    seen = {}
    best_raw, best_id = None, 0
    if has_known:
        if verify_phase is not None:
            verify_phase.__enter__()
        try:
            for sid, raw in known.items():
                if raw is None:
                    seen[sid] = None
                    continue
                v = _verify_record(raw, sid, S, meta_size, ws, q, qlen)
                if v < 0:
                    continue
                seen[sid] = raw
                if v > best_v:
                    best_v, best_raw, best_id = v, raw, sid
        finally:
            if verify_phase is not None:
                verify_phase.__exit__(None, None, None)
        if ncand:
            nk = len(known)
            kbuf = <uint64_t*>malloc(nk * sizeof(uint64_t))
            if kbuf == NULL:
                raise MemoryError()
            t = 0
            for sid in known:
                kbuf[t] = <uint64_t>sid
                t += 1
            left = _Route.__new__(_Route)
            if left.reserve(ncand) < 0:
                free(kbuf)
                raise MemoryError()
            kept = 0
            for i in range(ncand):
                for t in range(nk):
                    if cp[i] == kbuf[t]:
                        break
                else:
                    left.segs[kept] = cp[i]
                    left.pots[kept] = pp[i]
                    kept += 1
            free(kbuf)
            i = 0
            if kept < ncand:
                route, filtered = left, True       # (route keeps the buffers alive)
                ncand = kept
                cp, pp = left.segs, left.pots
    if j < 0:
        return best_v, (best_raw, best_id) if best_raw is not None else None, None, seen
    if has_known and (best_v >= qlen or (filtering and ncand and pp[0] <= best_v)):
        m = 0       # what is in hand already beats every candidate left
    else:
        # the first group: after dropping known records, the run sharing the top potential
        m = _first_count(j, ncand, pp, _run_of(pp, 0, ncand) if filtered and ncand else na,
                         budget, filtering, sequential)
    while m:
        if first is not None:
            raws = first
            first = None
            ids = [cp[i + t] for t in range(m)]
        else:
            batch = _array_of(cp + i, m, cnp.NPY_UINT64)
            raws = read(batch)
            ids = batch.tolist()
        if len(raws) != m:
            raise ValueError("settle: one record per candidate read")
        batches += 1
        got += m
        bv, bk = 0, -1
        corrupt = None
        if verify_phase is not None:
            verify_phase.__enter__()
        try:
            for t in range(m):
                raw = raws[t]
                if raw is None:
                    seen[ids[t]] = None
                    continue
                v = _verify_record(raw, ids[t], S, meta_size, ws, q, qlen)
                if v < 0:
                    if corrupt is None:
                        corrupt = []
                    corrupt.append(t)
                    continue
                seen[ids[t]] = raw
                if v > bv:
                    bv, bk = v, t
        finally:
            if verify_phase is not None:
                verify_phase.__exit__(None, None, None)
        i += m
        if corrupt is not None:
            count_corrupt(np.array([ids[t] for t in corrupt], dtype=np.uint64))
        if bv > best_v:
            best_v, best_raw, best_id = bv, raws[bk], ids[bk]
        if best_v >= qlen or i >= ncand or (budget and got >= budget):
            break
        if pp[i] <= best_v:
            break       # nobody left can beat what was verified
        if sequential:
            t = 1
        else:
            t = _run_of(pp, i, ncand)
            if budget:
                if budget - got < t:
                    t = budget - got
            elif 2 * m < t:
                t = 2 * m
        m = t if t < ncand - i else ncand - i
    best = (best_raw, best_id) if best_raw is not None else None
    return best_v, best, (nb, na, got, batches), seen


def max_potential(filters_sorted, uint64_t qf, int nfields, int stride, int bits):
    """``(L*, lo, hi)``: the largest filter-derived match potential in blocks from
    the routing point, and the posting-list slice of the candidates reaching it."""
    cdef cnp.ndarray f = np.ascontiguousarray(filters_sorted, dtype=np.uint64)
    cdef Py_ssize_t n = f.shape[0], i
    if n == 0:
        return 0, 0, 0
    cdef Posting* p = <Posting*>malloc(n * sizeof(Posting))
    cdef const uint64_t* fp = <const uint64_t*>cnp.PyArray_DATA(f)
    cdef int k
    cdef uint64_t m, fmin
    cdef Py_ssize_t lo, hi
    for i in range(n):
        p[i].filt = fp[i]
        p[i].seg = 0
    k = _max_fields(p, n, qf, nfields, stride, bits)
    m = _prefix_mask(k, bits)
    fmin = qf & m
    lo = _lower(p, n, fmin)
    hi = _upper(p, n, fmin | ~m)
    free(p)
    L = nfields * stride if k >= nfields else (k + 1) * stride - 1
    return L, lo, hi


# ----------------------------------------------------------------------------- records
cdef inline Py_ssize_t _sound_count(const uint8_t* p, Py_ssize_t ln, uint64_t key, Py_ssize_t S,
                                    Py_ssize_t meta_size) noexcept nogil:
    """Block count of the ``ln``-byte record at ``p`` read under ``key``, or -1 unless it
    is sound: :func:`_seg_verify`'s checks and a start aligned to ``S``."""
    cdef uint64_t start
    cdef uint32_t cnt
    if _seg_verify(p, ln, key, S, meta_size, 0, NULL, 0) < 0:
        return -1
    memcpy(&start, p + 24, 8)
    if start % <uint64_t>S:
        return -1
    memcpy(&cnt, p + 8, 4)
    return cnt


def child_postings(list raws, seg_ids, uint64_t key, Py_ssize_t off, Py_ssize_t child,
                   int nfields, int stride, int bits, Py_ssize_t S, Py_ssize_t meta_size):
    """A back-fill job's postings, from the raw records of its parent entry's segments
    (``raws[i]`` read under ``seg_ids[i]``; None: absent): for each sound record with
    more than ``child`` blocks whose block at ``off`` is ``key``, in record order, the
    block id at ``child`` (the child's routing key), the filter of the region from
    ``child`` and the segment id.  Returns ``(keys, filters, seg_ids, unsound)``,
    ``unsound`` the indexes of records that fail any check (magic, version, meta
    size, their own key, a start aligned to ``S``, at most ``S`` blocks, length,
    checksum)."""
    cdef const uint64_t[::1] k = np.ascontiguousarray(seg_ids, dtype=np.uint64)
    cdef Py_ssize_t n = len(raws), i, ln, m = 0
    if k.shape[0] != n:
        raise ValueError("child_postings: one segment id per record")
    if off < 0 or child < 0 or S < 1:
        raise ValueError("child_postings: negative block offset or empty window")
    keys = np.empty(n, dtype=np.uint64)
    flts = np.empty(n, dtype=np.uint64)
    sids = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] kv = keys
    cdef uint64_t[::1] fv = flts
    cdef uint64_t[::1] sv = sids
    cdef uint64_t* buf = <uint64_t*>malloc(S * sizeof(uint64_t))
    if buf == NULL:
        raise MemoryError()
    cdef const uint8_t* p
    cdef Py_ssize_t cnt
    cdef uint64_t at
    cdef bytes b
    unsound = []
    try:
        for i in range(n):
            r = raws[i]
            if r is None:
                continue
            b = r if type(r) is bytes else bytes(r)
            p = <const uint8_t*>PyBytes_AS_STRING(b)
            ln = len(b)
            cnt = _sound_count(p, ln, k[i], S, meta_size)
            if cnt < 0:
                unsound.append(i)
                continue
            if cnt <= child or cnt <= off:
                continue
            memcpy(&at, p + HEADER + 8 * off, 8)
            if at != key:
                continue
            memcpy(buf, p + HEADER, <size_t>cnt * 8)
            kv[m] = buf[child]
            fv[m] = _filter(buf, cnt, child, nfields, stride, bits)
            sv[m] = k[i]
            m += 1
    finally:
        free(buf)
    return keys[:m], flts[:m], sids[:m], unsound


def record_ids(list raws, keys, Py_ssize_t S, Py_ssize_t meta_size):
    """Reclamation's scan of raw segment records (``raws[i]`` read under ``keys[i]``):
    ``(counts, ids)`` - per record its block count, 0 unless it is sound (magic,
    version, meta size, its own key, a start aligned to ``S``, at most ``S``
    blocks, length, checksum), and the block ids of every sound record, in order."""
    cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef Py_ssize_t n = len(raws), i, total = 0, c = 0
    if k.shape[0] != n:
        raise ValueError("record_ids: one key per record")
    counts = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] cv = counts
    cdef const uint8_t* p
    cdef Py_ssize_t ln
    cdef Py_ssize_t cnt
    bufs = [r if r is None or isinstance(r, bytes) else bytes(r) for r in raws]
    for i in range(n):
        r = bufs[i]
        if r is None:
            continue
        p = <const uint8_t*>PyBytes_AS_STRING(r)
        ln = len(<bytes>r)
        cnt = _sound_count(p, ln, k[i], S, meta_size)
        if cnt < 0:
            continue
        cv[i] = cnt
        total += cnt
    ids = np.empty(total, dtype=np.uint64)
    cdef uint64_t[::1] iv = ids
    for i in range(n):
        if cv[i]:
            p = <const uint8_t*>PyBytes_AS_STRING(bufs[i])
            memcpy(&iv[c], p + HEADER, cv[i] * 8)
            c += cv[i]
    return counts, ids


# ----------------------------------------------------------------------------- overlay
def overlay_cut(stored, Py_ssize_t n, live_found, live_metas, live_locs, dead_found,
                bint defaults_dead):
    """A match of ``n`` blocks whose stored metadata is ``stored[:n]``, corrected by
    the tombstone and location tables (:class:`prefixbench.plugins.removal._Overlay`):
    ``(cut, metas, locations)``.

    ``live_found``/``live_metas``/``live_locs``: the location table's lookup of the
    ``n`` blocks (None: the table is empty); ``dead_found``: the tombstone table's
    (None: no tombstone).  A block is gone when it is not listed and is tombstoned
    or ``defaults_dead``; ``cut`` is the first gone block (``n`` if none).  Blocks
    before it take the listed metadata and bitmap where listed, else the stored
    metadata on worker 0 (bitmap 1).  One pass, new arrays."""
    cdef cnp.ndarray st = as_carray(stored, cnp.NPY_UINT8, 2, "overlay_cut: stored metadata")
    cdef Py_ssize_t ms = cnp.PyArray_DIM(st, 1), i, cut = n
    if n < 0 or cnp.PyArray_DIM(st, 0) < n:
        raise ValueError("overlay_cut: fewer stored records than blocks")
    cdef const uint8_t* sp = <const uint8_t*>cnp.PyArray_DATA(st)
    cdef const uint8_t* lf = NULL
    cdef const uint8_t* lm = NULL
    cdef const uint64_t* ll = NULL
    cdef const uint8_t* df = NULL
    cdef cnp.ndarray a, b, c, d
    if live_found is not None:
        a = as_carray(live_found, cnp.NPY_BOOL, 1, "overlay_cut: live_found")
        b = as_carray(live_metas, cnp.NPY_UINT8, 2, "overlay_cut: live_metas")
        c = as_carray(live_locs, cnp.NPY_UINT64, 1, "overlay_cut: live_locs")
        if (cnp.PyArray_DIM(a, 0) < n or cnp.PyArray_DIM(b, 0) < n or cnp.PyArray_DIM(c, 0) < n
                or cnp.PyArray_DIM(b, 1) != ms):
            raise ValueError("overlay_cut: location lookup does not cover the blocks")
        lf = <const uint8_t*>cnp.PyArray_DATA(a)
        lm = <const uint8_t*>cnp.PyArray_DATA(b)
        ll = <const uint64_t*>cnp.PyArray_DATA(c)
    if dead_found is not None:
        d = as_carray(dead_found, cnp.NPY_BOOL, 1, "overlay_cut: dead_found")
        if cnp.PyArray_DIM(d, 0) < n:
            raise ValueError("overlay_cut: tombstone lookup does not cover the blocks")
        df = <const uint8_t*>cnp.PyArray_DATA(d)
    if defaults_dead or df != NULL:
        for i in range(n):
            if lf != NULL and lf[i]:
                continue
            if defaults_dead or df[i]:
                cut = i
                break
    cdef cnp.npy_intp dims[2]
    dims[0] = cut
    dims[1] = ms
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_UINT8, 0)
    cdef cnp.ndarray locs = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT64, 0)
    cdef uint8_t* o = <uint8_t*>cnp.PyArray_DATA(out)
    cdef uint64_t* lo = <uint64_t*>cnp.PyArray_DATA(locs)
    with nogil:
        if cut:
            memcpy(o, sp, cut * ms)
        for i in range(cut):
            if lf != NULL and lf[i]:
                memcpy(o + i * ms, lm + i * ms, ms)
                lo[i] = ll[i]
            else:
                lo[i] = 1
    return cut, out, locs


def overlay_revive(live_found, dead_found, bint defaults_dead):
    """For an insert on worker 0 of blocks with these lookups (None: that table is
    empty): ``(listed, revived)`` - the positions whose metadata goes to the location
    table (listed there already, tombstoned, or every block when ``defaults_dead``)
    and those whose tombstone goes (tombstoned and not listed); None where there is
    none (both lookups None: ``(None, None)``)."""
    cdef const uint8_t* lf = NULL
    cdef const uint8_t* df = NULL
    cdef cnp.ndarray a, b
    cdef Py_ssize_t n = -1, i, na = 0, nb = 0
    if live_found is not None:
        a = as_carray(live_found, cnp.NPY_BOOL, 1, "overlay_revive: live_found")
        n = cnp.PyArray_DIM(a, 0)
        lf = <const uint8_t*>cnp.PyArray_DATA(a)
    if dead_found is not None:
        b = as_carray(dead_found, cnp.NPY_BOOL, 1, "overlay_revive: dead_found")
        if n >= 0 and cnp.PyArray_DIM(b, 0) != n:
            raise ValueError("overlay_revive: lookups of different lengths")
        n = cnp.PyArray_DIM(b, 0)
        df = <const uint8_t*>cnp.PyArray_DATA(b)
    if n < 0:
        return None, None
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    cdef cnp.ndarray listed = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    cdef cnp.ndarray revived = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    cdef int64_t* lv = <int64_t*>cnp.PyArray_DATA(listed)
    cdef int64_t* rv = <int64_t*>cnp.PyArray_DATA(revived)
    cdef bint inl, ind
    with nogil:
        for i in range(n):
            inl = lf != NULL and lf[i] != 0
            ind = df != NULL and df[i] != 0
            if defaults_dead or inl or ind:
                lv[na] = i
                na += 1
            if ind and not inl:
                rv[nb] = i
                nb += 1
    return (listed[:na] if na else None), (revived[:nb] if nb else None)


# ----------------------------------------------------------------------------- directory
cdef struct Entry:
    uint64_t key
    Posting* list
    uint32_t n
    uint32_t cap
    uint32_t off
    uint8_t visible
    uint8_t next_state
    uint8_t refine_state
    uint8_t in_slab      # list points into the directory's load slab (not its own malloc)




cdef struct Job:            # a back-fill job register() found: (key, offset, which)
    uint64_t key
    int64_t off
    uint8_t which


cdef struct Hidden:         # an entry register() left hidden under a PENDING parent
    uint64_t parent
    uint8_t which
    uint64_t key


cdef inline uint64_t _slot_hash(uint64_t key) noexcept nogil:
    return fmix64(key ^ 0x9E3779B97F4A7C15ULL)


cdef inline bint _before(uint64_t fa, uint32_t sa, uint64_t fb, uint32_t sb) noexcept nogil:
    """Posting order: filter ascending, then segment id descending."""
    return fa < fb or (fa == fb and sa > sb)


cdef int _cmp_seg_desc(const void* a, const void* b) noexcept nogil:
    cdef uint32_t x = (<const Posting*>a).seg, y = (<const Posting*>b).seg
    return -1 if x > y else (1 if x < y else 0)


NONE, PENDING, LIVE = 0, 1, 2
DEF NONE_ = 0
DEF PENDING_ = 1
DEF LIVE_ = 2
cdef uint64_t MAX_SEG = 0xFFFFFFFFULL


cdef class RoutingDirectory:
    """Routing key -> posting list of ``(filter, segment id)``; see the module doc."""

    cdef Entry* entries
    cdef Py_ssize_t n_ent, cap_ent
    cdef uint32_t* slots     # entry index + 1 per slot; 0 = empty (keys live in the entries)
    cdef uint64_t n_slots
    cdef int64_t n_post
    cdef int64_t post_bytes
    cdef Posting* slab       # every loaded posting list, one allocation (see load)
    cdef pb_rwlock lock
    cdef bint lock_ok

    def __cinit__(self):
        self.cap_ent = 64
        self.entries = <Entry*>malloc(self.cap_ent * sizeof(Entry))
        self.n_slots = 128
        self.slots = <uint32_t*>malloc(self.n_slots * sizeof(uint32_t))
        if self.entries == NULL or self.slots == NULL:
            raise MemoryError()
        cdef uint64_t i
        for i in range(self.n_slots):
            self.slots[i] = 0
        self.n_ent = 0
        self.n_post = 0
        self.post_bytes = 0
        self.slab = NULL
        if pb_rwlock_init(&self.lock) != 0:
            raise MemoryError("cannot create the directory lock")
        self.lock_ok = True

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.entries != NULL:
            for i in range(self.n_ent):
                if not self.entries[i].in_slab:
                    free(self.entries[i].list)
        free(self.entries)
        free(self.slots)
        free(self.slab)
        if self.lock_ok:
            pb_rwlock_destroy(&self.lock)

    # ---- table --------------------------------------------------------------
    cdef inline Py_ssize_t _find(self, uint64_t key) noexcept nogil:
        cdef uint64_t mask = self.n_slots - 1
        cdef uint64_t i = _slot_hash(key) & mask
        cdef uint32_t x
        while True:
            x = self.slots[i]
            if x == 0:
                return -1
            if self.entries[x - 1].key == key:
                return <Py_ssize_t>(x - 1)
            i = (i + 1) & mask

    cdef int _grow_slots(self) noexcept nogil:
        cdef uint64_t new_n = self.n_slots * 2, i, j, mask = new_n - 1
        cdef uint32_t* fresh = <uint32_t*>malloc(new_n * sizeof(uint32_t))
        if fresh == NULL:
            return -1
        for i in range(new_n):
            fresh[i] = 0
        for i in range(self.n_slots):
            if self.slots[i] != 0:
                j = _slot_hash(self.entries[self.slots[i] - 1].key) & mask
                while fresh[j] != 0:
                    j = (j + 1) & mask
                fresh[j] = self.slots[i]
        free(self.slots)
        self.slots = fresh
        self.n_slots = new_n
        return 0

    cdef Py_ssize_t _create(self, uint64_t key, uint32_t off, uint8_t visible) noexcept nogil:
        """A new empty entry (caller checked it is absent); -1 when out of memory."""
        cdef void* p
        cdef uint64_t i, mask
        cdef Entry* e
        if self.n_ent >= <Py_ssize_t>4294967280LL:
            return -1
        if (self.n_ent + 1) * 2 > <Py_ssize_t>self.n_slots:
            if self._grow_slots() != 0:
                return -1
        if self.n_ent == self.cap_ent:
            p = realloc(self.entries, self.cap_ent * 2 * sizeof(Entry))
            if p == NULL:
                return -1
            self.entries = <Entry*>p
            self.cap_ent *= 2
        e = &self.entries[self.n_ent]
        e.key = key
        e.list = NULL
        e.n = 0
        e.cap = 0
        e.off = off
        e.visible = visible
        e.next_state = 0
        e.refine_state = 0
        e.in_slab = 0
        mask = self.n_slots - 1
        i = _slot_hash(key) & mask
        while self.slots[i] != 0:
            i = (i + 1) & mask
        self.slots[i] = <uint32_t>(self.n_ent + 1)
        self.n_ent += 1
        return self.n_ent - 1

    cdef int _add(self, Entry* e, uint64_t filt, uint32_t seg, bint replace) noexcept nogil:
        """Upsert ``seg`` into ``e``'s list: 1 added, 0 unchanged/replaced, -1 OOM."""
        cdef Py_ssize_t i, pos = -1, lo, hi, mid
        cdef uint32_t cap
        cdef void* p
        for i in range(e.n):
            if e.list[i].seg == seg:
                pos = i
                break
        if pos >= 0:
            if not replace or e.list[pos].filt == filt:
                return 0
            memmove(&e.list[pos], &e.list[pos + 1], (e.n - pos - 1) * sizeof(Posting))
            e.n -= 1
            self.n_post -= 1
        if e.n == e.cap:
            cap = 1 if e.cap == 0 else (e.cap * 2 if e.cap < 64 else e.cap + e.cap // 2)
            if e.in_slab:        # a loaded list moves out of the slab when it first grows
                p = malloc(cap * sizeof(Posting))
                if p == NULL:
                    return -1
                memcpy(p, e.list, e.n * sizeof(Posting))
                e.in_slab = 0
            else:
                p = realloc(e.list, cap * sizeof(Posting))
                if p == NULL:
                    return -1
            self.post_bytes += (cap - e.cap) * sizeof(Posting)
            e.list = <Posting*>p
            e.cap = cap
        lo = 0
        hi = e.n
        while lo < hi:
            mid = (lo + hi) >> 1
            if _before(e.list[mid].filt, e.list[mid].seg, filt, seg):
                lo = mid + 1
            else:
                hi = mid
        memmove(&e.list[lo + 1], &e.list[lo], (e.n - lo) * sizeof(Posting))
        e.list[lo].filt = filt
        e.list[lo].seg = seg
        e.n += 1
        self.n_post += 1
        return 1 if pos < 0 else 0

    # ---- mutation -------------------------------------------------------------
    def upsert(self, uint64_t key, uint32_t off, uint64_t filt, uint64_t seg, bint visible_if_new):
        """Register ``seg`` under ``key`` (replacing its filter if present).

        Returns ``(size, visible, next_state, refine_state)`` of the entry after.
        """
        cdef Py_ssize_t e
        cdef Entry* ent
        cdef uint32_t size
        cdef uint8_t vis, ns, rs
        if seg > MAX_SEG:
            raise OverflowError(f"segment id {seg} does not fit the 32-bit posting reference")
        pb_wrlock_gil(&self.lock)
        e = self._put(key, off, filt, <uint32_t>seg, visible_if_new)
        if e >= 0:
            ent = &self.entries[e]
            size, vis, ns, rs = ent.n, ent.visible, ent.next_state, ent.refine_state
        pb_unlock(&self.lock)
        if e < 0:
            raise MemoryError("routing directory: out of memory")
        return size, bool(vis), ns, rs

    cdef Py_ssize_t _put_point(self, const uint64_t* ip, Py_ssize_t n, Py_ssize_t p,
                               uint8_t state, uint64_t parent, uint8_t which, uint32_t seg,
                               int nfields, int stride, int bits, Hidden* hidden,
                               Py_ssize_t* nh) noexcept nogil:
        """Register block ``p`` of the segment ``ip`` (``n`` blocks) under a parent in
        ``state`` (caller holds the write lock); an entry left hidden under a PENDING
        parent is booked in ``hidden``.  The entry's index, -1 on OOM."""
        cdef Py_ssize_t e = self._put(ip[p], <uint32_t>p, _filter(ip, n, p, nfields, stride, bits),
                                      seg, state == LIVE_)
        if e >= 0 and state == PENDING_ and not self.entries[e].visible:
            hidden[nh[0]] = Hidden(parent, which, ip[p])
            nh[0] += 1
        return e

    cdef Py_ssize_t _put(self, uint64_t key, uint32_t off, uint64_t filt, uint32_t seg,
                         bint visible_if_new) noexcept nogil:
        """:meth:`upsert` under the caller's write lock: the entry's index, -1 on OOM."""
        cdef Py_ssize_t e = self._find(key)
        if e < 0:
            e = self._create(key, off, visible_if_new)
        if e < 0 or self._add(&self.entries[e], filt, seg, True) < 0:
            return -1
        return e

    cdef inline uint8_t _state(self, uint64_t key, bint refine) noexcept nogil:
        cdef Py_ssize_t e = self._find(key)
        if e < 0:
            return NONE_
        return self.entries[e].refine_state if refine else self.entries[e].next_state

    cdef int _register_core(self, const uint64_t* ip, Py_ssize_t n, uint32_t s32,
                            const int64_t* bo, Py_ssize_t R, const int64_t* mo, Py_ssize_t M,
                            Py_ssize_t last, int nfields, int stride, int bits, bint pruning,
                            bint refinement, Py_ssize_t pruning_threshold, Py_ssize_t tau,
                            Job* jobs, Py_ssize_t* nj, Hidden* hidden,
                            Py_ssize_t* nh) noexcept nogil:
        """Register one segment (``n`` block ids at ``ip``) at its routing points (caller
        holds the write lock), appending to ``jobs``/``hidden`` (room for ``2 * (R + M +
        1)`` and ``R + M + 1`` more); -1 on OOM."""
        cdef Py_ssize_t nreg = 0, i, e, b, m
        cdef uint8_t state
        cdef uint64_t k, parent
        cdef Entry* ent
        cdef bint final
        state = LIVE_
        for i in range(R):          # base points; the ones reached are a prefix
            b = bo[i]
            if b >= n:
                break
            if i > 0 and pruning:
                state = self._state(ip[bo[i - 1]], False)
                if state == NONE_:
                    break
            k = ip[b]
            e = self._put_point(ip, n, b, state, ip[bo[i - 1]] if i > 0 else 0, 0, s32,
                                nfields, stride, bits, hidden, nh)
            if e < 0:
                return -1
            ent = &self.entries[e]
            nreg += 1
            if ent.visible:
                if pruning and ent.next_state == NONE_ and ent.n > pruning_threshold \
                        and i < R - 1:
                    ent.next_state = PENDING_
                    jobs[nj[0]] = Job(k, b, 0)
                    nj[0] += 1
                if refinement and ent.refine_state == NONE_ and ent.n > tau and M > 0:
                    ent.refine_state = PENDING_
                    jobs[nj[0]] = Job(k, b, 1)
                    nj[0] += 1
        for i in range(nreg if refinement and M > 0 else 0):
            m = mo[i]
            if m >= n:
                continue
            parent = ip[bo[i]]
            state = self._state(parent, True)
            if state == NONE_:
                continue
            k = ip[m]
            e = self._put_point(ip, n, m, state, parent, 1, s32, nfields, stride, bits,
                                hidden, nh)
            if e < 0:
                return -1
            ent = &self.entries[e]
            final = i == M - 1
            if ent.visible and final and last >= 0 and ent.refine_state == NONE_ \
                    and ent.n > tau:
                ent.refine_state = PENDING_
                jobs[nj[0]] = Job(k, m, 1)
                nj[0] += 1
            if final and 0 <= last < n:
                state = self._state(k, True)
                if state == NONE_:
                    continue
                if self._put_point(ip, n, last, state, k, 1, s32, nfields, stride, bits,
                                   hidden, nh) < 0:
                    return -1
        return 0

    def register(self, ids, uint64_t seg, base, mids, Py_ssize_t last, int nfields,
                 int stride, int bits, bint pruning, bint refinement,
                 Py_ssize_t pruning_threshold, Py_ssize_t tau):
        """Register segment ``seg`` (block ids ``ids``) at its routing points under one
        write lock; ``(jobs, pending)`` as the reference's ``register`` (its doc has
        the rules)."""
        return self.register_writes([(seg, 0, ids, None)], [seg], base, mids, last, nfields,
                                    stride, bits, pruning, refinement, pruning_threshold, tau)

    def register_writes(self, list writes, list sids, base, mids, Py_ssize_t last,
                        int nfields, int stride, int bits, bint pruning, bint refinement,
                        Py_ssize_t pruning_threshold, Py_ssize_t tau):
        """:meth:`register` of a plan's records in order (``writes[i][2]`` the block ids
        of segment ``sids[i]``) under one write lock: their jobs and pending entries
        in that order, as the reference's ``register_writes``."""
        cdef cnp.ndarray boa = as_carray(base, cnp.NPY_INT64, 1, "base points")
        cdef cnp.ndarray moa = as_carray(mids, cnp.NPY_INT64, 1, "midpoints")
        cdef const int64_t* bo = <const int64_t*>cnp.PyArray_DATA(boa)
        cdef const int64_t* mo = <const int64_t*>cnp.PyArray_DATA(moa)
        cdef Py_ssize_t R = cnp.PyArray_DIM(boa, 0), M = cnp.PyArray_DIM(moa, 0)
        cdef Py_ssize_t k = len(writes), i, nj = 0, nh = 0, r = 0
        cdef uint64_t seg
        if M and M != R:
            raise ValueError("register: one midpoint per base point")
        if len(sids) != k:
            raise ValueError("register_writes: one segment id per record")
        if k == 0 or R == 0:
            return [], []
        arrays = [as_ids((<tuple>w)[2]) for w in writes]
        for i in range(k):
            seg = sids[i]
            if seg > MAX_SEG:
                raise OverflowError(f"segment id {seg} does not fit the 32-bit posting "
                                    f"reference")
        # at most one job per mechanism and one hidden entry per point reached
        cdef Py_ssize_t cap = R + M + 1
        cdef Job* jobs = <Job*>malloc(2 * cap * k * sizeof(Job))
        cdef Hidden* hidden = <Hidden*>malloc(cap * k * sizeof(Hidden))
        cdef const uint64_t** ips = <const uint64_t**>malloc(k * sizeof(uint64_t*))
        cdef Py_ssize_t* ns = <Py_ssize_t*>malloc(k * sizeof(Py_ssize_t))
        cdef uint32_t* s32 = <uint32_t*>malloc(k * sizeof(uint32_t))
        if jobs == NULL or hidden == NULL or ips == NULL or ns == NULL or s32 == NULL:
            free(jobs)
            free(hidden)
            free(ips)
            free(ns)
            free(s32)
            raise MemoryError()
        for i in range(k):
            a = <cnp.ndarray>arrays[i]
            ips[i] = <const uint64_t*>cnp.PyArray_DATA(a)
            ns[i] = cnp.PyArray_DIM(a, 0)
            s32[i] = <uint32_t>(<uint64_t>sids[i])
        pb_wrlock_gil(&self.lock)
        for i in range(k):
            if ns[i] and self._register_core(ips[i], ns[i], s32[i], bo, R, mo, M, last,
                                             nfields, stride, bits, pruning, refinement,
                                             pruning_threshold, tau, jobs, &nj, hidden,
                                             &nh) < 0:
                r = -1
                break
        pb_unlock(&self.lock)
        out = ([(jobs[i].key, jobs[i].off, jobs[i].which) for i in range(nj)],
               [(hidden[i].parent, hidden[i].which, hidden[i].key) for i in range(nh)])
        free(jobs)
        free(hidden)
        free(ips)
        free(ns)
        free(s32)
        if r < 0:
            raise MemoryError("routing directory: out of memory")
        return out

    def set_state(self, uint64_t key, int next_state=-1, int refine_state=-1):
        """Set an entry's pruning (``next_state``) or refinement state; -1 keeps it."""
        cdef Py_ssize_t e
        pb_wrlock_gil(&self.lock)
        e = self._find(key)
        if e >= 0:
            if next_state >= 0:
                self.entries[e].next_state = <uint8_t>next_state
            if refine_state >= 0:
                self.entries[e].refine_state = <uint8_t>refine_state
        pb_unlock(&self.lock)
        if e < 0:
            raise KeyError(key)

    def publish(self, keys, offs, filts, segs, flip_keys, uint64_t parent, int which):
        """Atomically: merge back-filled postings (existing registrations win, they
        are newer), make ``flip_keys`` and every merged entry visible, and mark
        the parent's ``which`` state (0 pruning, 1 refinement) LIVE."""
        cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef const uint32_t[::1] o = np.ascontiguousarray(offs, dtype=np.uint32)
        cdef const uint64_t[::1] f = np.ascontiguousarray(filts, dtype=np.uint64)
        cdef const uint64_t[::1] s = np.ascontiguousarray(segs, dtype=np.uint64)
        cdef const uint64_t[::1] fl = np.ascontiguousarray(flip_keys, dtype=np.uint64)
        cdef Py_ssize_t n = k.shape[0], nf = fl.shape[0], i, e
        cdef int r = 0
        if not (o.shape[0] == n and f.shape[0] == n and s.shape[0] == n):
            raise ValueError("publish: keys, offs, filts and segs differ in length")
        for i in range(n):
            if s[i] > MAX_SEG:
                raise OverflowError(f"segment id {s[i]} does not fit the 32-bit posting reference")
        pb_wrlock_gil(&self.lock)
        for i in range(n):
            e = self._find(k[i])
            if e < 0:
                e = self._create(k[i], o[i], 1)
                if e < 0:
                    r = -1
                    break
            self.entries[e].visible = 1
            if self._add(&self.entries[e], f[i], <uint32_t>s[i], False) < 0:
                r = -1
                break
        for i in range(nf):
            e = self._find(fl[i])
            if e >= 0:
                self.entries[e].visible = 1
        e = self._find(parent)
        if e >= 0:
            if which == 0:
                self.entries[e].next_state = 2
            else:
                self.entries[e].refine_state = 2
        pb_unlock(&self.lock)
        if r < 0:
            raise MemoryError("routing directory: out of memory")

    cdef void _drop_entry(self, Py_ssize_t e) noexcept nogil:
        """Delete entry ``e`` (caller holds the write lock): backward-shift its slot
        out of the probe chain, free its list, move the last entry into its place."""
        cdef uint64_t mask = self.n_slots - 1
        cdef uint64_t i = _slot_hash(self.entries[e].key) & mask, j, k
        cdef Py_ssize_t last = self.n_ent - 1
        while self.slots[i] != <uint32_t>(e + 1):
            i = (i + 1) & mask
        self.slots[i] = 0
        j = i
        while True:
            j = (j + 1) & mask
            if self.slots[j] == 0:
                break
            k = _slot_hash(self.entries[self.slots[j] - 1].key) & mask
            # the item at j stays when its home lies cyclically in (i, j]
            if (i <= j and i < k and k <= j) or (i > j and (i < k or k <= j)):
                continue
            self.slots[i] = self.slots[j]
            self.slots[j] = 0
            i = j
        self.post_bytes -= self.entries[e].cap * sizeof(Posting)
        self.n_post -= self.entries[e].n
        if not self.entries[e].in_slab:
            free(self.entries[e].list)
        if e != last:
            self.entries[e] = self.entries[last]
            i = _slot_hash(self.entries[e].key) & mask
            while self.slots[i] != <uint32_t>(last + 1):
                i = (i + 1) & mask
            self.slots[i] = <uint32_t>(e + 1)
        self.n_ent -= 1

    def discard(self, keys, segs):
        """Remove the postings ``(keys[i], segs[i])`` that exist, and every entry
        left empty, under one write lock (reclamation: a query sees all of them
        or none).  Returns ``(postings removed, entries removed)``."""
        cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef const uint64_t[::1] s = np.ascontiguousarray(segs, dtype=np.uint64)
        cdef Py_ssize_t n = k.shape[0], i, e, t
        cdef int64_t gone = 0, dropped = 0
        cdef Entry* ent
        if s.shape[0] != n:
            raise ValueError("discard: keys and segs differ in length")
        pb_wrlock_gil(&self.lock)
        for i in range(n):
            if s[i] > MAX_SEG:
                continue
            e = self._find(k[i])
            if e < 0:
                continue
            ent = &self.entries[e]
            for t in range(ent.n):
                if ent.list[t].seg == <uint32_t>s[i]:
                    memmove(&ent.list[t], &ent.list[t + 1], (ent.n - t - 1) * sizeof(Posting))
                    ent.n -= 1
                    self.n_post -= 1
                    gone += 1
                    break
            if ent.n == 0:
                self._drop_entry(e)
                dropped += 1
        pb_unlock(&self.lock)
        return gone, dropped

    # ---- queries ----------------------------------------------------------------
    def info(self, uint64_t key):
        """``(off, size, visible, next_state, refine_state)`` or None."""
        cdef Py_ssize_t e
        cdef uint32_t off = 0, size = 0
        cdef uint8_t vis = 0, ns = 0, rs = 0
        pb_rdlock_gil(&self.lock)
        e = self._find(key)
        if e >= 0:
            off, size = self.entries[e].off, self.entries[e].n
            vis, ns, rs = self.entries[e].visible, self.entries[e].next_state, \
                self.entries[e].refine_state
        pb_unlock(&self.lock)
        if e < 0:
            return None
        return off, size, bool(vis), ns, rs

    def postings(self, uint64_t key):
        """Copies ``(filters, segment ids)`` of the entry, in list order."""
        cdef Py_ssize_t e, i, n = 0
        cdef Posting* tmp = NULL
        pb_rdlock_gil(&self.lock)
        e = self._find(key)
        if e >= 0:
            n = self.entries[e].n
            tmp = <Posting*>malloc((n if n else 1) * sizeof(Posting))
            if tmp != NULL and n:
                memcpy(tmp, self.entries[e].list, n * sizeof(Posting))
        pb_unlock(&self.lock)
        if e < 0:
            raise KeyError(key)
        if tmp == NULL:
            raise MemoryError()
        f = np.empty(n, dtype=np.uint64)
        s = np.empty(n, dtype=np.uint64)
        for i in range(n):
            f[i] = tmp[i].filt
            s[i] = tmp[i].seg
        free(tmp)
        return f, s

    def plan(self, keys, qfilters, offsets, Py_ssize_t qlen, int nfields, int stride, int bits,
             bint filtering, Py_ssize_t limit):
        """Route one query window.

        ``keys``/``qfilters``/``offsets``: the query's probe points, deepest
        first.  The first key with a visible, non-empty entry is used.  Returns
        ``(j, segs, pots, n_before, n_after, hidden)``: the probe index (-1 on a
        miss), up to ``limit`` (0 = all) candidate segment ids ranked by match
        potential (groups in decreasing potential; list order inside a group),
        their potentials as window-relative match-length bounds (capped at
        ``qlen``), the list size, the size of the top-potential group, and
        whether a key before the one used has a hidden entry (one a back-fill
        job will publish).  Without ``filtering`` candidates come newest first,
        all with potential ``qlen``.
        """
        cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef const uint64_t[::1] qf = np.ascontiguousarray(qfilters, dtype=np.uint64)
        cdef const int64_t[::1] o = np.ascontiguousarray(offsets, dtype=np.int64)
        cdef Py_ssize_t nk = k.shape[0]
        if qf.shape[0] < nk and filtering:
            raise ValueError("plan: fewer query filters than keys")
        if o.shape[0] < nk:
            raise ValueError("plan: fewer offsets than keys")
        if nk == 0:
            return _Route.__new__(_Route).as_tuple()
        return self._plan(&k[0], &qf[0] if filtering else &k[0], &o[0], nk, qlen, nfields,
                          stride, bits, filtering, limit, NULL).as_tuple()

    def route(self, qw, probe_desc, int nfields, int stride, int bits, bint filtering,
              Py_ssize_t limit):
        """:meth:`plan` for the query window ``qw``: the probe points are the
        offsets of ``probe_desc`` (deepest first) below ``len(qw)``; keys and
        query filters are computed here, in one call."""
        # called once per routed window: typed memoryviews would cost more than the routing
        cdef cnp.ndarray qa = as_ids(qw)
        cdef cnp.ndarray pda = as_carray(probe_desc, cnp.NPY_INT64, 1, "probe offsets")
        return self._route(<const uint64_t*>cnp.PyArray_DATA(qa), cnp.PyArray_DIM(qa, 0),
                           <const int64_t*>cnp.PyArray_DATA(pda), cnp.PyArray_DIM(pda, 0),
                           nfields, stride, bits, filtering, limit).as_tuple()

    cdef _Route _route(self, const uint64_t* q, Py_ssize_t qlen, const int64_t* pd,
                       Py_ssize_t npd, int nfields, int stride, int bits, bint filtering,
                       Py_ssize_t limit):
        """:meth:`route` of ``qlen`` ids at ``q`` (the match loop calls it per window)."""
        cdef Py_ssize_t i, nk = 0
        cdef uint64_t kbuf[256]
        cdef int64_t obuf[256]
        if npd > 256:
            raise ValueError("route: more than 256 routing points per window")
        if qlen == 0:
            return _Route.__new__(_Route)
        for i in range(npd):
            if pd[i] < qlen:
                kbuf[nk] = q[pd[i]]
                obuf[nk] = pd[i]
                nk += 1
        if nk == 0:
            return _Route.__new__(_Route)
        # the query filter is needed at the one point whose entry is used: _plan makes it
        return self._plan(kbuf, NULL, obuf, nk, qlen, nfields, stride, bits, filtering, limit,
                          q)

    cdef _Route _plan(self, const uint64_t* k, const uint64_t* qf, const int64_t* o, Py_ssize_t nk,
                      Py_ssize_t qlen, int nfields, int stride, int bits, bint filtering,
                      Py_ssize_t limit, const uint64_t* q):
        """:meth:`plan`; with ``qf`` NULL the query filter at the probed point is made
        from the ``qlen`` query ids at ``q``."""
        cdef Py_ssize_t j = -1, e = -1, n = 0, cnt = 0, m = 0, i, lo, hi, plo, phi
        cdef Py_ssize_t n_after = 0
        cdef _Route r = _Route.__new__(_Route)
        cdef uint64_t* out_s = NULL
        cdef int64_t* out_p = NULL
        cdef bint short = False, hidden = False
        cdef const Posting* lst
        cdef Posting* tmp
        cdef int kstar = 0, kk
        cdef int64_t pot
        cdef uint64_t mask, fmin
        cdef uint64_t qfj = 0
        cdef int64_t offj = 0
        pb_rdlock_gil(&self.lock)
        for j in range(nk):
            e = self._find(k[j])
            if e >= 0 and self.entries[e].visible and self.entries[e].n > 0:
                break
            if e >= 0 and not self.entries[e].visible:
                hidden = True
            e = -1
        if e >= 0:
            lst = self.entries[e].list
            n = self.entries[e].n
            m = n if (limit <= 0 or limit > n) else limit
            short = r.reserve(m) < 0
            out_s, out_p = r.segs, r.pots
            if not short:
                offj = o[j]
                if not filtering:
                    tmp = <Posting*>malloc(n * sizeof(Posting))
                    if tmp != NULL:
                        memcpy(tmp, lst, n * sizeof(Posting))
                        qsort(tmp, n, sizeof(Posting), _cmp_seg_desc)
                        for i in range(m):
                            out_s[i] = tmp[i].seg
                            out_p[i] = qlen
                        cnt = m
                        free(tmp)
                    n_after = n
                else:
                    qfj = qf[j] if qf != NULL else _filter(q, qlen, o[j], nfields, stride,
                                                           bits)
                    kstar = _max_fields(lst, n, qfj, nfields, stride, bits)
                    plo = n
                    phi = n
                    kk = kstar
                    while kk >= 0 and cnt < m:
                        mask = _prefix_mask(kk, bits)
                        fmin = qfj & mask
                        lo = _lower(lst, n, fmin)
                        hi = _upper(lst, n, fmin | ~mask)
                        if kk >= nfields:
                            pot = qlen
                        else:
                            pot = offj + (kk + 1) * stride - 1
                            if pot > qlen:
                                pot = qlen
                        if kk == kstar:
                            n_after = hi - lo
                            plo = hi
                            phi = hi
                        # the part of [lo, hi) not emitted at a higher field count
                        cnt = _emit(lst, lo, plo, pot, out_s, out_p, cnt, m)
                        cnt = _emit(lst, phi, hi, pot, out_s, out_p, cnt, m)
                        plo = lo
                        phi = hi
                        kk -= 1
        pb_unlock(&self.lock)
        if e >= 0 and (short or (cnt < m and m > 0)):
            raise MemoryError("routing directory: out of memory in plan")
        r.j = j if e >= 0 else -1
        r.cnt, r.n, r.n_after = cnt, n, n_after
        r.hidden = hidden
        return r

    def dump(self):
        """Every entry and posting (tests, snapshots): a dict of arrays.

        Entries come in slot-table order, so :meth:`load` fills its table (the
        same size for the same entry count) front to back instead of at random:
        at 1.6M entries that makes a load ~3x faster (a random slot write is a
        cache miss)."""
        cdef Py_ssize_t i, j, t, c = 0
        cdef uint64_t s
        cdef int64_t[::1] ov
        pb_rdlock_gil(&self.lock)
        try:
            ne = self.n_ent
            order = np.empty(ne, dtype=np.int64)
            ov = order
            j = 0
            for s in range(self.n_slots):
                if self.slots[s] != 0:
                    ov[j] = self.slots[s] - 1
                    j += 1
            keys = np.empty(ne, dtype=np.uint64)
            offs = np.empty(ne, dtype=np.uint32)
            vis = np.empty(ne, dtype=np.bool_)
            nxt = np.empty(ne, dtype=np.uint8)
            ref = np.empty(ne, dtype=np.uint8)
            sizes = np.empty(ne, dtype=np.int64)
            total = sum(self.entries[i].n for i in range(ne))
            pent = np.empty(total, dtype=np.int64)
            pf = np.empty(total, dtype=np.uint64)
            ps = np.empty(total, dtype=np.uint64)
            for j in range(ne):
                i = ov[j]
                keys[j] = self.entries[i].key
                offs[j] = self.entries[i].off
                vis[j] = self.entries[i].visible
                nxt[j] = self.entries[i].next_state
                ref[j] = self.entries[i].refine_state
                sizes[j] = self.entries[i].n
                for t in range(self.entries[i].n):
                    pent[c] = j
                    pf[c] = self.entries[i].list[t].filt
                    ps[c] = self.entries[i].list[t].seg
                    c += 1
        finally:
            pb_unlock(&self.lock)
        return {"keys": keys, "offs": offs, "visible": vis, "next_state": nxt,
                "refine_state": ref, "sizes": sizes, "entry": pent, "filters": pf, "segs": ps}

    def load(self, keys, offs, visible, next_state, refine_state, sizes, filters, segs):
        """Fill this EMPTY directory from a :meth:`dump` (snapshots): one C pass,
        posting lists copied as they were dumped (already sorted).

        Recovery speed: the slot table and the entry array are sized once for
        every entry (no rehash, no regrowth) and all posting lists share one
        slab allocation instead of a malloc each; a list leaves the slab (is
        copied to its own allocation) the first time an insert grows it."""
        cdef const uint64_t[::1] k = np.ascontiguousarray(keys, dtype=np.uint64)
        cdef const uint32_t[::1] o = np.ascontiguousarray(offs, dtype=np.uint32)
        cdef const uint8_t[::1] v = np.ascontiguousarray(visible, dtype=np.uint8)
        cdef const uint8_t[::1] ns = np.ascontiguousarray(next_state, dtype=np.uint8)
        cdef const uint8_t[::1] rs = np.ascontiguousarray(refine_state, dtype=np.uint8)
        cdef const int64_t[::1] sz = np.ascontiguousarray(sizes, dtype=np.int64)
        cdef const uint64_t[::1] f = np.ascontiguousarray(filters, dtype=np.uint64)
        cdef const uint64_t[::1] sg = np.ascontiguousarray(segs, dtype=np.uint64)
        cdef Py_ssize_t n = k.shape[0], i, e, t, c = 0
        cdef int r = 0
        cdef Entry* ent
        if self.n_ent:
            raise ValueError("load: the directory is not empty")
        if not (o.shape[0] == n and v.shape[0] == n and ns.shape[0] == n and rs.shape[0] == n
                and sz.shape[0] == n):
            raise ValueError("load: entry arrays differ in length")
        if f.shape[0] != sg.shape[0] or int(np.asarray(sz).sum()) != f.shape[0]:
            raise ValueError("load: posting arrays do not match the entry sizes")
        if sg.shape[0] and int(np.asarray(sg).max()) > MAX_SEG:
            raise OverflowError("load: a segment id does not fit the 32-bit posting reference")
        cdef Py_ssize_t total = f.shape[0]
        cdef uint64_t want = 128
        cdef void* p
        while <uint64_t>(n + 1) * 2 > want:
            want *= 2
        with nogil:
            pb_wrlock(&self.lock)
            if want > self.n_slots:
                p = calloc(want, sizeof(uint32_t))
                if p == NULL:
                    r = -1
                else:
                    free(self.slots)
                    self.slots = <uint32_t*>p
                    self.n_slots = want
            if r == 0 and n > self.cap_ent:
                p = realloc(self.entries, n * sizeof(Entry))
                if p == NULL:
                    r = -1
                else:
                    self.entries = <Entry*>p
                    self.cap_ent = n
            if r == 0 and total > 0:
                self.slab = <Posting*>malloc(total * sizeof(Posting))
                if self.slab == NULL:
                    r = -1
            for i in range(n if r == 0 else 0):
                e = self._create(k[i], o[i], v[i])
                if e < 0:
                    r = -1
                    break
                ent = &self.entries[e]
                ent.next_state = ns[i]
                ent.refine_state = rs[i]
                if sz[i] > 0:
                    ent.list = self.slab + c
                    ent.in_slab = 1
                    ent.cap = <uint32_t>sz[i]
                    ent.n = <uint32_t>sz[i]
                    self.post_bytes += sz[i] * sizeof(Posting)
                    self.n_post += sz[i]
                    for t in range(sz[i]):
                        ent.list[t].filt = f[c]
                        ent.list[t].seg = <uint32_t>sg[c]
                        c += 1
            pb_unlock(&self.lock)
        if r < 0:
            raise MemoryError("routing directory: out of memory")

    def check(self):
        """Structural invariants: every list sorted and free of duplicate segments,
        every entry reachable through the table.  Raises AssertionError."""
        cdef Py_ssize_t i, t
        cdef bint ok = True
        bad = ""
        pb_rdlock_gil(&self.lock)
        try:
            for i in range(self.n_ent):
                if self._find(self.entries[i].key) != i:
                    bad = f"entry {i} unreachable"
                    break
                for t in range(1, self.entries[i].n):
                    if not _before(self.entries[i].list[t - 1].filt, self.entries[i].list[t - 1].seg,
                                   self.entries[i].list[t].filt, self.entries[i].list[t].seg):
                        bad = f"entry {i} unsorted at {t}"
                        break
                if bad:
                    break
                segs = [self.entries[i].list[t].seg for t in range(self.entries[i].n)]
                if len(set(segs)) != len(segs):
                    bad = f"entry {i} lists a segment twice"
                    break
        finally:
            pb_unlock(&self.lock)
        if bad:
            raise AssertionError(bad)
        return True

    @property
    def n_entries(self):
        return self.n_ent

    @property
    def n_postings(self):
        return self.n_post

    @property
    def nbytes(self):
        """Bytes allocated: entry array, hash table, posting arrays."""
        return self.cap_ent * sizeof(Entry) + self.n_slots * sizeof(uint32_t) + self.post_bytes

    @property
    def used_bytes(self):
        """Bytes the live state needs: entries, the table, postings (no spare capacity)."""
        return self.n_ent * sizeof(Entry) + self.n_slots * sizeof(uint32_t) \
            + self.n_post * sizeof(Posting)

    def __len__(self):
        return self.n_ent


# ----------------------------------------------------------------------------- a whole match
cdef _Route _route_at(RoutingDirectory rd, d, cnp.ndarray qa, Py_ssize_t w, Py_ssize_t qlen,
                      probe_desc, const int64_t* pd, Py_ssize_t npd, int nfields, int stride,
                      int bits, bint filtering, Py_ssize_t limit):
    if rd is not None:
        return rd._route(<const uint64_t*>cnp.PyArray_DATA(qa) + w, qlen, pd, npd, nfields,
                         stride, bits, filtering, limit)
    return _route_of(d.route(qa[w:w + qlen], probe_desc, nfields, stride, bits, filtering,
                             limit))


cdef inline Py_ssize_t _first_of(_Route route, Py_ssize_t budget, bint filtering,
                                 bint sequential) noexcept:
    return _first_count(route.j, route.cnt, route.pots, route.n_after, budget, filtering,
                        sequential)


cdef int _copy_metas(object raw, Py_ssize_t v, Py_ssize_t meta_size, uint8_t* out) except -1:
    """The first ``v`` metadata rows of a record ``_seg_verify`` accepted, into ``out``."""
    cdef bytes b = raw if type(raw) is bytes else bytes(raw)
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(b)
    memcpy(out, p + _seg_metas_at(p, len(b), v, meta_size), v * meta_size)
    return 0


def match_run(d, qobj, Py_ssize_t S, Py_ssize_t budget, Py_ssize_t k,
              bint filtering, bint sequential, Py_ssize_t meta_size, probe_desc, int nfields,
              int stride, int bits, read, count_corrupt, routing_phase, verify_phase):
    """A whole match: as the reference's ``match_run`` (its doc has the rules), with
    the routing, the settling and the metadata copy of every window in C."""
    cdef cnp.ndarray qa = as_ids(qobj)
    cdef cnp.ndarray pda = as_carray(probe_desc, cnp.NPY_INT64, 1, "probe offsets")
    cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(qa)
    cdef const int64_t* pd = <const int64_t*>cnp.PyArray_DATA(pda)
    cdef Py_ssize_t n = cnp.PyArray_DIM(qa, 0), npd = cnp.PyArray_DIM(pda, 0)
    cdef Py_ssize_t limit = budget if filtering else 0
    cdef RoutingDirectory rd = d if type(d) is RoutingDirectory else None
    cdef Py_ssize_t pos = 0, w, t, u, nplan, total, lo, v, m
    cdef Py_ssize_t windows = 0, uses = 0, before = 0, after = 0, retrieved = 0, extra = 0
    cdef Py_ssize_t spec = 0, wasted = 0, trips = 0, hidden = 0
    cdef uint64_t last_id = 0, full_id = 0
    cdef Py_ssize_t sizes[64]
    cdef bint batched, done = False
    cdef list routes
    cdef _Route route
    cdef tuple res
    cdef dict raws_by_window = {}
    cdef cnp.npy_intp dims[2]
    cdef cnp.npy_intp nids
    cdef cnp.ndarray ids
    cdef uint64_t* ip
    if not 1 <= k <= 64:
        raise ValueError("match_run: k must be in 1..64")
    dims[0] = n
    dims[1] = meta_size
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(2, dims, cnp.NPY_UINT8, 0)
    cdef uint8_t* op = <uint8_t*>cnp.PyArray_DATA(out)
    allraws = None
    while pos < n and not done:
        batched = k > 1 and n - pos > S
        # route the window at pos, or up to k windows when batched (their keys and
        # filters come from q alone), in one routing phase: a clock switch per window
        # would be about 5% of a long match's latency
        routes = []
        w = pos
        if routing_phase is not None:
            routing_phase.__enter__()
        try:
            while True:
                route = _route_at(rd, d, qa, w, S if n - w > S else n - w, probe_desc, pd,
                                  npd, nfields, stride, bits, filtering, limit)
                routes.append(route)
                w += S
                if not batched or route.j < 0 or w >= n or w >= pos + k * S:
                    break       # (no entry: the match cannot pass this window)
        finally:
            if routing_phase is not None:
                routing_phase.__exit__(None, None, None)
        nplan = len(routes)
        if batched:
            # fetch every window's first group in one read, verify in order
            total = 0
            for t in range(nplan):
                sizes[t] = _first_of(<_Route>routes[t], budget, filtering, sequential)
                total += sizes[t]
            if total:
                nids = total
                ids = cnp.PyArray_EMPTY(1, &nids, cnp.NPY_UINT64, 0)
                ip = <uint64_t*>cnp.PyArray_DATA(ids)
                lo = 0
                for t in range(nplan):
                    if sizes[t]:
                        memcpy(ip + lo, (<_Route>routes[t]).segs, sizes[t] * sizeof(uint64_t))
                        lo += sizes[t]
                allraws = read(ids)
                if len(allraws) != total:
                    raise ValueError("match_run: one record per candidate read")
                trips += 1
            spec += total - sizes[0]
        lo = 0
        # the plan's windows verified in one phase too (the metadata copy with them)
        if verify_phase is not None:
            verify_phase.__enter__()
        try:
            for t in range(nplan):
                route = <_Route>routes[t]
                first = None
                if batched:
                    m = sizes[t]
                    if m:
                        first = allraws[lo:lo + m]
                    lo += m
                windows += 1
                hidden += route.hidden
                res = _settle(route, q + pos, S if n - pos > S else n - pos, pos, budget,
                              filtering, sequential, S, meta_size, None, first, read,
                              count_corrupt, None)
                v = res[0]
                info = res[2]
                if res[3] and v < S:
                    raws_by_window[pos] = res[3]    # the window an insert will route again
                if info is not None:
                    uses += 1
                    before += info[0]
                    after += info[1]
                    retrieved += info[2]
                    extra += info[3] - 1
                    trips += info[3] - (first is not None)
                if v:
                    _copy_metas(res[1][0], v, meta_size, op + pos * meta_size)
                    last_id = res[1][1]
                    if v == S:
                        full_id = last_id
                    pos += v
                if v < S or pos >= n:
                    if batched:
                        for u in range(t + 1, nplan):
                            wasted += sizes[u]
                    done = True
                    break
        finally:
            if verify_phase is not None:
                verify_phase.__exit__(None, None, None)
    return (pos, out[:pos], last_id, full_id, raws_by_window,
            (windows, uses, before, after, retrieved, extra, spec, wasted, trips, hidden))


cdef inline void _add_fresh(list writes, list after, list log, uint64_t start, ids, metas,
                            prev) except *:
    """Book a fresh record (numbered when published) at window ``start``, after ``prev``."""
    writes.append((0, start, ids, metas))
    after.append(prev)
    log.append((start, (<const uint64_t*>cnp.PyArray_DATA(<cnp.ndarray>ids))[0]))


def insert_plan(d, x, xm, Py_ssize_t ws, prev, Py_ssize_t S, dict known_by_window,
                best_hint, bint reclaimed, Py_ssize_t meta_size, probe_desc, int nfields,
                int stride, int bits, bint filtering, bint sequential, read, count_corrupt,
                routing_phase, verify_phase):
    """What inserting ``x`` from window ``ws`` writes: as the reference's
    ``insert_plan`` (its doc has the rules), with the routing, the settling and the
    splicing of every window in C."""
    cdef cnp.ndarray qa = as_ids(x)
    cdef Py_ssize_t n = cnp.PyArray_DIM(qa, 0)
    cdef cnp.ndarray ma = as_metas(xm, n, meta_size)
    cdef cnp.ndarray pda = as_carray(probe_desc, cnp.NPY_INT64, 1, "probe offsets")
    cdef const uint64_t* q = <const uint64_t*>cnp.PyArray_DATA(qa)
    cdef const int64_t* pd = <const int64_t*>cnp.PyArray_DATA(pda)
    cdef Py_ssize_t npd = cnp.PyArray_DIM(pda, 0)
    cdef RoutingDirectory rd = d if type(d) is RoutingDirectory else None
    cdef Py_ssize_t reads = 0, new_blocks = 0, copied = 0, ext = 0, cp = 0
    cdef Py_ssize_t reused_seg = 0, reused_records = 0, fresh = 0, qlen, v, at
    cdef uint32_t n_old
    cdef uint64_t sid, start
    cdef _Route route
    cdef tuple res
    cdef bytes raw
    cdef const uint8_t* rp
    cdef list writes = [], after = [], extended = [], log = []
    while ws < n:
        qlen = S if n - ws > S else n - ws
        known = known_by_window.get(ws) if known_by_window else None
        if routing_phase is not None:
            routing_phase.__enter__()
        try:
            route = _route_at(rd, d, qa, ws, qlen, probe_desc, pd, npd, nfields, stride,
                              bits, filtering, 0)
        finally:
            if routing_phase is not None:
                routing_phase.__exit__(None, None, None)
        res = _settle(route, q + ws, qlen, ws, 0, filtering, sequential, S, meta_size,
                      known or None, None, read, count_corrupt, verify_phase)
        v = res[0]
        best = res[1]
        if res[2] is not None:
            reads += res[2][2]
        if known:
            reused_records += len(known)
            if best_hint is not None and best_hint[0] == ws and best is not None \
                    and best[1] == best_hint[1]:
                reused_seg += 1
        if best is not None and v == S:
            ws += S                       # the whole window is stored already
            prev = best[1]
            continue
        if best is not None:
            if v == qlen:                 # (a last, partial window stored whole)
                prev = best[1]
            else:
                raw = best[0] if type(best[0]) is bytes else bytes(best[0])
                rp = <const uint8_t*>PyBytes_AS_STRING(raw)
                if verify_phase is not None:
                    verify_phase.__enter__()
                try:
                    at = _seg_metas_at(rp, len(raw), v, meta_size)
                    memcpy(&n_old, rp + 8, 4)
                    memcpy(&sid, rp + 16, 8)
                    memcpy(&start, rp + 24, 8)
                    ids, metas = _seg_spliced(
                        rp + HEADER, rp + at, v, <const uint8_t*>(q + ws),
                        <const uint8_t*>cnp.PyArray_DATA(ma) + ws * meta_size, qlen,
                        meta_size)
                finally:
                    if verify_phase is not None:
                        verify_phase.__exit__(None, None, None)
                if v == n_old:            # it shared the whole segment: extend in place
                    writes.append((sid, start, ids, metas))
                    log.append((start, q[ws]))
                    extended.append(sid)
                    ext += 1
                    new_blocks += qlen - n_old
                    prev = sid
                else:
                    _add_fresh(writes, after, log, start, ids, metas, prev)
                    fresh += 1
                    prev = -fresh
                    cp += 1
                    copied += v
                    new_blocks += qlen
            ws += S
        elif reclaimed:
            _add_fresh(writes, after, log, ws, qa[ws:ws + qlen], ma[ws:ws + qlen], prev)
            fresh += 1
            prev = -fresh
            new_blocks += qlen
            ws += S
        if reclaimed:
            continue
        while ws < n:                     # every later window is new: nobody shares it
            qlen = S if n - ws > S else n - ws
            _add_fresh(writes, after, log, ws, qa[ws:ws + qlen], ma[ws:ws + qlen], prev)
            fresh += 1
            prev = -fresh
            new_blocks += qlen
            ws += S
    return writes, after, extended, log, (reads, new_blocks, copied, ext, cp, reused_seg,
                                          reused_records)
