# distutils: language = c++
"""Compiled KV-event batch decoder and replay apply loop; see
:mod:`prefixbench.workloads._kvevents_ref` for the contract both keep.

:func:`decode_payload` parses the msgpack bytes of one EventBatch itself,
without the GIL and without building a Python object per event or hash: it
reads the batch's header, records where each event's fields start (the last
copy of a repeated key wins, as in a Python dict), checks every value it
skips the way msgpack's unpacker would (UTF-8 strings, hashable map keys),
and fills C++ vectors that become the NumPy arrays.  Anything off its fast
path -- an unknown event type, an ext type, a non-string key, a bool where a
number belongs, any error at all -- is handed to the reference, so the
answer (or the one-line error) is the reference's.

:class:`ChainApply` keeps the parent memory in C++ hash maps (the chain of
every live block, shared by the blocks of one store; the bounded LRU of
removed blocks; each worker's live set) and calls the strategy once per
event: one ``match`` and one ``insert`` per BlockStored, one ``remove`` or
``clear`` per BlockRemoved / AllBlocksCleared, with the chain and its
metadata built in C.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from libcpp cimport bool as cbool
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector
from cython.operator cimport dereference as deref, preincrement as inc

import numpy as np
cimport numpy as cnp

from prefixbench.metas import META_MAGIC, make_metas

cnp.import_array()

__all__ = ["CLEARED", "ChainApply", "REMOVED", "STORED", "batch_from_ops", "decode_payload"]

STORED = 0
REMOVED = 1
CLEARED = 2

# -- msgpack, the subset on the fast path ----------------------------------------
cdef enum:
    T_NIL = 0
    T_BOOL = 1
    T_INT = 2        # signed, negative
    T_UINT = 3       # non-negative
    T_FLOAT = 4
    T_STR = 5
    T_BIN = 6
    T_ARR = 7
    T_MAP = 8

cdef struct Rd:
    const uint8_t* p
    Py_ssize_t n
    Py_ssize_t i

cdef struct Val:
    int t
    uint64_t u          # integer bits, or the element count of an array or map
    double f
    Py_ssize_t off      # str/bin: where the bytes start
    Py_ssize_t len      # str/bin: their length

cdef inline bint _need(Rd* r, Py_ssize_t k) noexcept nogil:
    return r.i + k <= r.n

cdef inline uint64_t _be(const uint8_t* s, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int j
    for j in range(k):
        v = (v << 8) | s[j]
    return v

cdef bint _utf8(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Valid UTF-8 by Python's strict decoder (no overlongs, no surrogates, <= U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2:
            return False
        if c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F) or (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80:
                return False
            i += 3
        elif c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F) or (c1 & 0xC0) != 0x80:
                return False
            if (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            i += 4
        else:
            return False
    return True

cdef int _head(Rd* r, Val* v) noexcept nogil:
    """One item's header (a str or bin is read whole); -1 off the fast path."""
    cdef uint8_t b
    cdef Py_ssize_t k = 0
    cdef int sz
    cdef uint64_t bits
    cdef float f32
    cdef double f64
    if not _need(r, 1):
        return -1
    b = r.p[r.i]
    r.i += 1
    if b <= 0x7F:
        v.t = T_UINT
        v.u = b
        return 0
    if b >= 0xE0:
        v.t = T_INT
        v.u = <uint64_t>(<int64_t>(<signed char>b))
        return 0
    if 0x80 <= b <= 0x8F:
        v.t = T_MAP
        v.u = b & 0x0F
        return 0
    if 0x90 <= b <= 0x9F:
        v.t = T_ARR
        v.u = b & 0x0F
        return 0
    if 0xA0 <= b <= 0xBF:
        v.t = T_STR
        k = b & 0x1F
    elif b == 0xC0:
        v.t = T_NIL
        return 0
    elif b == 0xC2 or b == 0xC3:
        v.t = T_BOOL
        v.u = b - 0xC2
        return 0
    elif 0xC4 <= b <= 0xC6 or 0xD9 <= b <= 0xDB:
        sz = 1 << ((b - 0xC4) if b <= 0xC6 else (b - 0xD9))
        if not _need(r, sz):
            return -1
        k = <Py_ssize_t>_be(r.p + r.i, sz)
        r.i += sz
        v.t = T_BIN if b <= 0xC6 else T_STR
    elif b == 0xCA:
        if not _need(r, 4):
            return -1
        bits = _be(r.p + r.i, 4)
        memcpy(&f32, &bits, 4)  # little-endian host: the low 4 bytes of bits
        r.i += 4
        v.t = T_FLOAT
        v.f = f32
        return 0
    elif b == 0xCB:
        if not _need(r, 8):
            return -1
        bits = _be(r.p + r.i, 8)
        memcpy(&f64, &bits, 8)
        r.i += 8
        v.t = T_FLOAT
        v.f = f64
        return 0
    elif 0xCC <= b <= 0xCF:
        sz = 1 << (b - 0xCC)
        if not _need(r, sz):
            return -1
        v.t = T_UINT
        v.u = _be(r.p + r.i, sz)
        r.i += sz
        return 0
    elif 0xD0 <= b <= 0xD3:
        sz = 1 << (b - 0xD0)
        if not _need(r, sz):
            return -1
        bits = _be(r.p + r.i, sz)
        r.i += sz
        if sz < 8 and (bits >> (8 * sz - 1)) & 1:        # sign-extend
            bits |= ~((<uint64_t>1 << (8 * sz)) - 1)
        v.u = bits
        v.t = T_INT if <int64_t>bits < 0 else T_UINT
        return 0
    elif b == 0xDC or b == 0xDE:
        if not _need(r, 2):
            return -1
        v.u = _be(r.p + r.i, 2)
        r.i += 2
        v.t = T_ARR if b == 0xDC else T_MAP
        return 0
    elif b == 0xDD or b == 0xDF:
        if not _need(r, 4):
            return -1
        v.u = _be(r.p + r.i, 4)
        r.i += 4
        v.t = T_ARR if b == 0xDD else T_MAP
        return 0
    else:
        return -1                                     # ext types, 0xc1
    if not _need(r, k):
        return -1
    v.off = r.i
    v.len = k
    r.i += k
    if v.t == T_STR and not _utf8(r.p + v.off, k):
        return -1
    return 0

cdef int _skip(Rd* r, int depth) noexcept nogil:
    """Read one whole value, checked as msgpack's unpacker checks it."""
    cdef Val v
    cdef uint64_t j
    cdef uint8_t b
    if depth > 64 or _head(r, &v) < 0:
        return -1
    if v.t == T_ARR:
        for j in range(v.u):
            if r.i < r.n:                      # token ids: small ints, stepped over inline
                b = r.p[r.i]
                if b <= 0x7F or b >= 0xE0:
                    r.i += 1
                    continue
                if b == 0xCD and r.i + 3 <= r.n:
                    r.i += 3
                    continue
                if b == 0xCE and r.i + 5 <= r.n:
                    r.i += 5
                    continue
            if _skip(r, depth + 1) < 0:
                return -1
    elif v.t == T_MAP:
        for j in range(v.u):
            if _head(r, &v) < 0 or v.t == T_ARR or v.t == T_MAP:   # an unhashable key
                return -1
            if _skip(r, depth + 1) < 0:
                return -1
    return 0

cdef inline bint _is(Rd* r, Val* v, const char* s, Py_ssize_t n) noexcept nogil:
    return v.t == T_STR and v.len == n and memcmp(r.p + v.off, s, n) == 0

cdef int _hash_at(Rd* r, uint64_t* out) noexcept nogil:
    cdef Val v
    cdef int k
    if _head(r, &v) < 0:
        return -1
    if v.t == T_UINT or v.t == T_INT:
        out[0] = v.u
        return 0
    if v.t == T_BIN:
        k = 8 if v.len > 8 else <int>v.len
        out[0] = _be(r.p + v.off + v.len - k, k)
        return 0
    return -1

cdef struct Fields:
    Py_ssize_t hashes, parent, tokens, bsize, extra    # value offsets, -1: absent

cdef int _hashes(Rd* r, Py_ssize_t at, vector[uint64_t]* out, uint64_t* n) noexcept nogil:
    cdef Val v
    cdef uint64_t j, h
    if at < 0:
        return -1
    r.i = at
    if _head(r, &v) < 0 or v.t != T_ARR:
        return -1
    n[0] = v.u
    for j in range(v.u):
        if _hash_at(r, &h) < 0:
            return -1
        out.push_back(h)
    return 0

cdef int _stored(Rd* r, Fields* f, vector[uint64_t]* hs, uint64_t* parent,
                 uint8_t* has_parent) noexcept nogil:
    cdef Val v
    cdef uint64_t n = 0
    cdef int k
    if _hashes(r, f.hashes, hs, &n) < 0:
        return -1
    parent[0] = 0
    has_parent[0] = 0
    if f.parent >= 0:
        r.i = f.parent
        if _head(r, &v) < 0:
            return -1
        if v.t == T_UINT or v.t == T_INT:
            parent[0] = v.u
            has_parent[0] = 1
        elif v.t == T_BIN:
            k = 8 if v.len > 8 else <int>v.len
            parent[0] = _be(r.p + v.off + v.len - k, k)
            has_parent[0] = 1
        elif v.t != T_NIL:
            return -1
    if f.tokens >= 0:
        r.i = f.tokens
        if _head(r, &v) < 0 or (v.t != T_NIL and v.t != T_ARR):
            return -1
    if f.bsize >= 0:
        r.i = f.bsize
        if _head(r, &v) < 0 or (v.t != T_NIL and v.t != T_UINT):
            return -1
    if f.extra >= 0:
        r.i = f.extra
        if _head(r, &v) < 0 or (v.t != T_NIL and (v.t != T_ARR or v.u != n)):
            return -1
    return 0

ctypedef signed char int8_t_

cdef struct Out:
    double ts
    int worker
    int64_t n_events
    vector[int8_t_] kinds
    vector[int64_t] offsets
    vector[uint64_t] hashes
    vector[uint64_t] parents
    vector[uint8_t] has_parent
    int64_t counts[5]

cdef int _event(Rd* r, Out* o) noexcept nogil:
    """One event into ``o``; -1 off the fast path (unknown types included)."""
    cdef Val v, key
    cdef Fields f
    cdef uint64_t j, cnt, n0
    cdef int kind = -1
    cdef Py_ssize_t tpos = -1, end, at
    f.hashes = f.parent = f.tokens = f.bsize = f.extra = -1
    if _head(r, &v) < 0:
        return -1
    if v.t == T_MAP:
        cnt = v.u
        for j in range(cnt):
            if _head(r, &key) < 0 or key.t != T_STR:
                return -1
            at = r.i
            if _is(r, &key, b"type", 4):
                tpos = at
            elif _is(r, &key, b"block_hashes", 12):
                f.hashes = at
            elif _is(r, &key, b"parent_block_hash", 17):
                f.parent = at
            elif _is(r, &key, b"token_ids", 9):
                f.tokens = at
            elif _is(r, &key, b"block_size", 10):
                f.bsize = at
            elif _is(r, &key, b"extra_keys", 10):
                f.extra = at
            if _skip(r, 1) < 0:
                return -1
        end = r.i
        if tpos < 0:
            return -1
        r.i = tpos
        if _head(r, &key) < 0:
            return -1
    elif v.t == T_ARR:
        cnt = v.u
        if cnt == 0 or _head(r, &key) < 0:
            return -1
        for j in range(1, cnt):
            at = r.i
            if j == 1:
                f.hashes = at
            elif j == 2:
                f.parent = at
            elif j == 3:
                f.tokens = at
            elif j == 4:
                f.bsize = at
            if _skip(r, 1) < 0:
                return -1
        end = r.i
    else:
        return -1
    if _is(r, &key, b"BlockStored", 11):
        kind = 0
    elif _is(r, &key, b"BlockRemoved", 12):
        kind = 1
        if v.t == T_ARR:           # positional: [tag, block_hashes, medium]
            f.parent = f.tokens = f.bsize = -1
    elif _is(r, &key, b"AllBlocksCleared", 16):
        kind = 2
    else:
        return -1
    n0 = o.hashes.size()
    if kind == 0:
        o.parents.push_back(0)
        o.has_parent.push_back(0)
        if _stored(r, &f, &o.hashes, &o.parents.back(), &o.has_parent.back()) < 0:
            return -1
        o.counts[0] += 1
        o.counts[3] += <int64_t>(o.hashes.size() - n0)
    elif kind == 1:
        if _hashes(r, f.hashes, &o.hashes, &cnt) < 0:
            return -1
        o.parents.push_back(0)
        o.has_parent.push_back(0)
        o.counts[1] += 1
        o.counts[4] += <int64_t>cnt
    else:
        o.parents.push_back(0)
        o.has_parent.push_back(0)
        o.counts[2] += 1
    o.kinds.push_back(<int8_t_>kind)
    o.offsets.push_back(<int64_t>o.hashes.size())
    r.i = end
    return 0

cdef int _batch(const uint8_t* p, Py_ssize_t n, Out* o) noexcept nogil:
    cdef Rd r
    cdef Val v, key
    cdef uint64_t j, cnt
    cdef Py_ssize_t ts_at = -1, ev_at = -1, rank_at = -1, end
    r.p = p
    r.n = n
    r.i = 0
    o.counts[0] = o.counts[1] = o.counts[2] = o.counts[3] = o.counts[4] = 0
    o.offsets.push_back(0)
    if _head(&r, &v) < 0:
        return -1
    if v.t == T_MAP:
        for j in range(v.u):
            if _head(&r, &key) < 0 or key.t != T_STR:
                return -1
            if _is(&r, &key, b"ts", 2):
                ts_at = r.i
            elif _is(&r, &key, b"events", 6):
                ev_at = r.i
            elif _is(&r, &key, b"data_parallel_rank", 18):
                rank_at = r.i
            if _skip(&r, 1) < 0:
                return -1
    elif v.t == T_ARR and v.u >= 2:
        cnt = v.u
        for j in range(cnt):
            if j == 0:
                ts_at = r.i
            elif j == 1:
                ev_at = r.i
            elif j == 2:
                rank_at = r.i
            if _skip(&r, 1) < 0:
                return -1
    else:
        return -1
    end = r.i
    if end != n:
        return -1                                       # bytes after the batch
    o.ts = 0.0
    if ts_at >= 0:
        r.i = ts_at
        if _head(&r, &v) < 0:
            return -1
        if v.t == T_FLOAT:
            o.ts = v.f
        elif v.t == T_UINT:
            o.ts = <double>v.u
        elif v.t == T_INT:
            o.ts = <double>(<int64_t>v.u)
        elif v.t != T_NIL:
            return -1
    o.worker = 0
    if rank_at >= 0:
        r.i = rank_at
        if _head(&r, &v) < 0:
            return -1
        if v.t == T_UINT and v.u < 65536:
            o.worker = <int>v.u
        elif v.t != T_NIL:
            return -1
    if ev_at < 0:
        return -1
    r.i = ev_at
    if _head(&r, &v) < 0 or v.t != T_ARR:
        return -1
    o.n_events = <int64_t>v.u
    for j in range(v.u):
        if _event(&r, o) < 0:
            return -1
    return 0

cdef object _array(const void* src, Py_ssize_t n, int typenum, Py_ssize_t itemsize):
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    a = cnp.PyArray_SimpleNew(1, dims, typenum)
    if n:
        memcpy(cnp.PyArray_DATA(a), src, n * itemsize)
    return a


def batch_from_ops(ops, ts, worker, n_events, unknown):
    """The array form of a decoded batch's operations (the reference's, used as is)."""
    from prefixbench.workloads._kvevents_ref import batch_from_ops as ref
    return ref(ops, ts, worker, n_events, unknown)


def decode_payload(bytes payload, str where, frame, strict=False):
    """One msgpack EventBatch payload (either form) as a decoded batch tuple."""
    cdef Out o
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
    cdef int rc
    with nogil:
        rc = _batch(p, n, &o)
    if rc < 0:
        from prefixbench.workloads._kvevents_ref import decode_payload as ref
        return ref(payload, where, frame, strict)
    nk = o.kinds.size()
    return (o.ts, o.worker, o.n_events,
            _array(o.kinds.data(), nk, cnp.NPY_INT8, 1),
            _array(o.offsets.data(), nk + 1, cnp.NPY_INT64, 8),
            _array(o.hashes.data(), o.hashes.size(), cnp.NPY_UINT64, 8),
            _array(o.parents.data(), nk, cnp.NPY_UINT64, 8),
            _array(o.has_parent.data(), nk, cnp.NPY_UINT8, 1),
            {}, (o.counts[0], o.counts[1], o.counts[2], o.counts[3], o.counts[4]))


# -- the apply loop ------------------------------------------------------------------
cdef extern from *:
    """
    #include <cstdint>
    #include <vector>
    #include <unordered_map>
    #include <algorithm>

    /* Linear-probing map from a 64-bit block id to V; backward-shift deletion, so
       no tombstones.  Pointers returned stay valid until the next put or erase. */
    template <typename V>
    struct PBMap {
        std::vector<uint64_t> k;
        std::vector<V> v;
        std::vector<uint8_t> used;
        uint64_t mask, n;
        int shift;
        PBMap() : n(0) { init(4); }
        void init(int bits) {
            uint64_t cap = 1ULL << bits;
            k.assign(cap, 0); v.assign(cap, V()); used.assign(cap, 0);
            mask = cap - 1; shift = 64 - bits; n = 0;
        }
        inline uint64_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ULL) >> shift; }
        V* find(uint64_t key) {
            uint64_t i = slot(key);
            while (used[i]) { if (k[i] == key) return &v[i]; i = (i + 1) & mask; }
            return nullptr;
        }
        void grow() {
            std::vector<uint64_t> ok; std::vector<V> ov; std::vector<uint8_t> ou;
            ok.swap(k); ov.swap(v); ou.swap(used);
            init(64 - shift + 1);
            for (size_t i = 0; i < ok.size(); i++) if (ou[i]) *put(ok[i], nullptr) = ov[i];
        }
        /* the value slot of key, created (V()) when absent; *fresh says which */
        V* put(uint64_t key, bool* fresh) {
            if ((n + 1) * 10 > (mask + 1) * 7) grow();
            uint64_t i = slot(key);
            while (used[i]) {
                if (k[i] == key) { if (fresh) *fresh = false; return &v[i]; }
                i = (i + 1) & mask;
            }
            used[i] = 1; k[i] = key; v[i] = V(); n++;
            if (fresh) *fresh = true;
            return &v[i];
        }
        bool erase(uint64_t key, V* out) {
            uint64_t i = slot(key);
            while (used[i]) {
                if (k[i] == key) break;
                i = (i + 1) & mask;
            }
            if (!used[i]) return false;
            if (out) *out = v[i];
            uint64_t j = i;
            for (;;) {
                j = (j + 1) & mask;
                if (!used[j]) break;
                uint64_t h = slot(k[j]);
                bool move = (j > i) ? (h <= i || h > j) : (h <= i && h > j);
                if (move) { k[i] = k[j]; v[i] = v[j]; i = j; }
            }
            used[i] = 0; v[i] = V(); n--;
            return true;
        }
    };

    struct PBLoc { uint32_t chain; uint32_t pos; };
    struct PBRem { PBLoc loc; uint64_t stamp; };

    /* ChainMemory (prefixbench.workloads.kvevents) in C++: chains in an arena with
       reference counts, the removed blocks' LRU as a stamped FIFO. */
    struct PBChainMemory {
        std::vector<std::vector<uint64_t> > chains;
        std::vector<int64_t> refs;
        std::vector<uint32_t> free_ids;
        PBMap<PBLoc> where;
        PBMap<PBRem> removed;
        std::vector<std::pair<uint64_t, uint64_t> > fifo;   /* (block, stamp), oldest first */
        size_t fifo_head = 0;
        uint64_t stamp = 0;
        std::unordered_map<int, PBMap<uint8_t> > live;
        int64_t parent_memory = 0, unknown_parents = 0, removed_parents_used = 0;

        void ref(uint32_t c) { refs[c]++; }
        void unref(uint32_t c) {
            if (--refs[c] == 0) {
                std::vector<uint64_t>().swap(chains[c]);
                free_ids.push_back(c);
            }
        }
        uint32_t new_chain() {
            uint32_t c;
            if (!free_ids.empty()) { c = free_ids.back(); free_ids.pop_back(); }
            else { c = (uint32_t)chains.size(); chains.emplace_back(); refs.push_back(0); }
            refs[c] = 1;                       /* held by the caller until release */
            return c;
        }
        void set_where(uint64_t h, PBLoc loc) {
            bool fresh;
            PBLoc* p = where.put(h, &fresh);
            ref(loc.chain);
            if (!fresh) unref(p->chain);
            *p = loc;
        }
        bool chain_of(uint64_t block, PBLoc* out) {
            PBLoc* p = where.find(block);
            if (p) { *out = *p; return true; }
            PBRem* r = removed.find(block);
            if (r) { removed_parents_used++; *out = r->loc; return true; }
            return false;
        }
        void drop_removed(uint64_t h) {
            PBRem old;
            if (removed.erase(h, &old)) unref(old.loc.chain);
        }
        /* the chain id (the caller releases it) and the number of ancestors */
        uint32_t store(int worker, const uint64_t* nw, size_t n, uint64_t parent, bool has_parent,
                       int64_t* n_anc) {
            PBLoc anc;
            bool found = false;
            if (has_parent) {
                found = chain_of(parent, &anc);
                if (!found) unknown_parents++;
            }
            uint32_t c = new_chain();
            std::vector<uint64_t>& ch = chains[c];
            size_t na = 0;
            if (found) {
                na = (size_t)anc.pos + 1;
                const std::vector<uint64_t>& a = chains[anc.chain];
                ch.reserve(na + n);
                ch.insert(ch.end(), a.begin(), a.begin() + na);
            } else ch.reserve(n);
            ch.insert(ch.end(), nw, nw + n);
            for (size_t i = 0; i < n; i++) set_where(nw[i], PBLoc{c, (uint32_t)(na + i)});
            PBMap<uint8_t>& lv = live[worker];
            if (na && !lv.find(parent)) {
                for (size_t i = 0; i < na; i++) {
                    uint64_t h = chains[c][i];
                    lv.put(h, nullptr);
                    if (!where.find(h)) {
                        set_where(h, PBLoc{c, (uint32_t)i});
                        drop_removed(h);
                    }
                }
            }
            for (size_t i = 0; i < n; i++) lv.put(nw[i], nullptr);
            *n_anc = (int64_t)na;
            return c;
        }
        void forget(const std::vector<uint64_t>& keys, std::vector<uint64_t>& gone) {
            for (uint64_t h : keys) {
                bool held = false;
                for (auto& w : live) if (w.second.find(h)) { held = true; break; }
                if (held) continue;
                gone.push_back(h);
                PBLoc loc;
                if (!where.erase(h, &loc)) continue;
                bool fresh;
                PBRem* r = removed.put(h, &fresh);
                if (!fresh) unref(r->loc.chain);     /* the where entry's reference moves */
                r->loc = loc;
                r->stamp = ++stamp;
                fifo.emplace_back(h, stamp);
            }
            while ((int64_t)removed.n > parent_memory) {
                std::pair<uint64_t, uint64_t> e = fifo[fifo_head++];
                PBRem* r = removed.find(e.first);
                if (r && r->stamp == e.second) drop_removed(e.first);
            }
            if (fifo_head > 4096 && fifo_head * 2 > fifo.size()) {
                fifo.erase(fifo.begin(), fifo.begin() + fifo_head);
                fifo_head = 0;
            }
        }
        /* returns false when the worker was never seen (nothing forgotten) */
        bool remove(int worker, const uint64_t* ids, size_t n, std::vector<uint64_t>& gone) {
            auto it = live.find(worker);
            if (it == live.end()) return false;
            std::vector<uint64_t> held;
            for (size_t i = 0; i < n; i++) if (it->second.find(ids[i])) held.push_back(ids[i]);
            for (uint64_t h : held) it->second.erase(h, nullptr);
            forget(held, gone);
            return true;
        }
        void clear(int worker, std::vector<uint64_t>& gone) {
            std::vector<uint64_t> keys;
            auto it = live.find(worker);
            if (it != live.end()) {
                PBMap<uint8_t>& s = it->second;
                for (size_t i = 0; i < s.used.size(); i++) if (s.used[i]) keys.push_back(s.k[i]);
                live.erase(it);
                std::sort(keys.begin(), keys.end());
            }
            forget(keys, gone);
        }
    };
    """
    cppclass PBChainMemory:
        vector[vector[uint64_t]] chains
        int64_t parent_memory, unknown_parents, removed_parents_used
        PBChainMemory()
        uint32_t store(int worker, const uint64_t* nw, size_t n, uint64_t parent,
                       cbool has_parent, int64_t* n_anc)
        void unref(uint32_t c)
        cbool remove(int worker, const uint64_t* ids, size_t n, vector[uint64_t]& gone)
        void clear(int worker, vector[uint64_t]& gone)
        size_t live_blocks "where.n"
        size_t remembered "removed.n"


cdef class ChainApply:
    """Applies decoded batches to ``strategy`` (and ``oracle``); the reference's contract,
    with :class:`prefixbench.workloads.kvevents.ChainMemory`'s semantics in C++."""

    cdef object strategy, oracle, st_match, st_insert
    cdef PBChainMemory mem
    cdef int meta_size, max_w
    cdef bint can_remove, folded
    cdef unordered_set[int] seen
    cdef int64_t n_op, lookups, lookup_blocks, hit_blocks, ancestor_blocks, misses
    cdef int64_t removes_ignored, oracle_hits
    cdef uint64_t magic

    def __init__(self, strategy, oracle=None, parent_memory=1 << 20, meta_size=16):
        self.strategy = strategy
        self.oracle = oracle
        self.st_match = strategy.match
        self.st_insert = strategy.insert
        self.mem.parent_memory = int(parent_memory)
        self.meta_size = int(meta_size)
        self.max_w = int(getattr(strategy, "max_workers", 1) or 1)
        self.can_remove = bool(getattr(strategy, "supports_remove", False))
        self.folded = False
        self.magic = <uint64_t>int(META_MAGIC)

    cdef object _remove(self, int worker, const uint64_t* ids, Py_ssize_t n):
        cdef vector[uint64_t] gone
        self.mem.remove(worker, ids, n, gone)
        return _array(gone.data(), gone.size(), cnp.NPY_UINT64, 8)

    cdef object _clear(self, int worker):
        cdef vector[uint64_t] gone
        self.mem.clear(worker, gone)
        return _array(gone.data(), gone.size(), cnp.NPY_UINT64, 8)

    cdef object _metas(self, object chain, Py_ssize_t n):
        cdef cnp.npy_intp dims[2]
        cdef uint64_t* wd
        cdef const uint64_t* c
        cdef Py_ssize_t i
        if self.meta_size != 16:
            return make_metas(chain, self.n_op, self.meta_size)
        dims[0] = n
        dims[1] = 16
        m = cnp.PyArray_SimpleNew(2, dims, cnp.NPY_UINT8)
        wd = <uint64_t*>cnp.PyArray_DATA(m)
        c = <const uint64_t*>cnp.PyArray_DATA(chain)
        for i in range(n):
            wd[2 * i] = c[i] ^ self.magic
            wd[2 * i + 1] = <uint64_t>self.n_op
        return m

    def apply(self, tuple batch):
        cdef int w = batch[1]
        cdef cnp.ndarray kinds_a = batch[3], offs_a = batch[4], hs_a = batch[5]
        cdef cnp.ndarray par_a = batch[6], hp_a = batch[7]
        cdef const signed char* kinds = <const signed char*>cnp.PyArray_DATA(kinds_a)
        cdef const int64_t* offs = <const int64_t*>cnp.PyArray_DATA(offs_a)
        cdef const uint64_t* hs = <const uint64_t*>cnp.PyArray_DATA(hs_a)
        cdef const uint64_t* par = <const uint64_t*>cnp.PyArray_DATA(par_a)
        cdef const uint8_t* hp = <const uint8_t*>cnp.PyArray_DATA(hp_a)
        cdef Py_ssize_t nk = cnp.PyArray_DIM(kinds_a, 0), k, n, a, b
        cdef int64_t na, hit
        cdef uint32_t c
        cdef bint per_worker
        cdef int ow = 0
        if nk == 0:
            return
        if not (kinds_a.dtype == np.int8 and offs_a.dtype == np.int64 and hs_a.dtype == np.uint64
                and par_a.dtype == np.uint64 and hp_a.dtype == np.uint8
                and kinds_a.flags.c_contiguous and offs_a.flags.c_contiguous
                and hs_a.flags.c_contiguous and par_a.flags.c_contiguous
                and hp_a.flags.c_contiguous and cnp.PyArray_DIM(offs_a, 0) == nk + 1
                and cnp.PyArray_DIM(par_a, 0) == nk and cnp.PyArray_DIM(hp_a, 0) == nk):
            raise ValueError("ChainApply.apply: not a decoded batch")
        if offs[nk] > cnp.PyArray_DIM(hs_a, 0) or offs[0] < 0:
            raise ValueError("ChainApply.apply: offsets outside the hashes")
        if self.seen.count(w) == 0:
            self.seen.insert(w)
            if w >= self.max_w:
                self.folded = True
        st = self.strategy
        orc = self.oracle
        per_worker = self.max_w > 1 and w < self.max_w
        if orc is not None:
            ow = min(w, orc.max_workers - 1)
        match, insert = self.st_match, self.st_insert
        for k in range(nk):
            self.n_op += 1
            a, b = offs[k], offs[k + 1]
            if b < a:
                raise ValueError("ChainApply.apply: offsets go backwards")
            if kinds[k] == 0:
                c = self.mem.store(w, hs + a, b - a, par[k], hp[k] != 0, &na)
                n = self.mem.chains[c].size()
                arr = _array(self.mem.chains[c].data(), n, cnp.NPY_UINT64, 8)
                self.mem.unref(c)
                hit = match(arr).n_blocks
                self.lookups += 1
                self.lookup_blocks += n
                self.hit_blocks += hit
                self.ancestor_blocks += na
                if hit < na:
                    self.misses += 1
                metas = self._metas(arr, n)
                if per_worker:
                    insert(arr, metas, worker=w)
                else:
                    insert(arr, metas)
                if orc is not None:
                    self.oracle_hits += orc.match(arr).n_blocks
                    orc.insert(arr, metas, worker=ow)
            elif kinds[k] == 1:
                gone = self._remove(w, hs + a, b - a)
                if not self.can_remove:
                    self.removes_ignored += 1
                elif per_worker:
                    st.remove(hs_a[a:b], worker=w)
                elif len(gone):
                    st.remove(gone)
                if orc is not None:
                    orc.remove(hs_a[a:b], worker=ow)
            elif kinds[k] == 2:
                gone = self._clear(w)
                if not self.can_remove:
                    self.removes_ignored += 1
                elif per_worker:
                    st.clear(worker=w)
                elif len(gone):
                    st.remove(gone)
                if orc is not None:
                    orc.clear(worker=ow)
            else:
                raise ValueError(f"ChainApply.apply: unknown kind {kinds[k]}")

    def counters(self):
        return {"lookups": self.lookups, "lookup_blocks": self.lookup_blocks,
                "hit_blocks": self.hit_blocks, "ancestor_blocks": self.ancestor_blocks,
                "consistency_misses": self.misses, "removes_ignored": self.removes_ignored,
                "ops": self.n_op, "oracle_hit_blocks": self.oracle_hits,
                "unknown_parents": self.mem.unknown_parents,
                "removed_parents_used": self.mem.removed_parents_used,
                "live_blocks": self.mem.live_blocks, "remembered_removed": self.mem.remembered,
                "workers": sorted(self.seen), "workers_folded": bool(self.folded)}
