"""``segment-hash``: segments whose store keys are computed from the query alone
(the SARP paper's section 6.1 baseline), with halved-size retries on a miss.

Layout (one record per indexed block position, Fenwick-style).  Windows are
``[kS, (k+1)S)`` with ``S`` a power of two.  For the block at window offset
``r - 1`` (``r`` in ``1..S``) the store holds one segment record covering the
``g = lowbit(r)`` blocks ``[kS + r - g, kS + r)``, keyed by the chained block
ID at its last block (``key = (3 << 56) | mix64(h) >> 8``).  So per window there
is one record of ``S`` blocks (the whole window, keyed at its last block), one
of ``S/2`` (its first half), two of ``S/4`` (the first quarter of each half),
... and ``S/2`` single-block records: exactly the segments a halving search
asks for, and only those (a chunk that ends where a larger one ends is never
asked for, so it is never written).  Each granularity's key thus maps to a
record with that chunk's blocks of the window, not the window's whole prefix:
prefix records would make one probe enough but write about ``S/2`` times the
data; this layout writes ``1 + log2(S)/2`` times.

Matching, window by window from the first: compute all keys from the query
(NumPy), then in window ``k`` try the largest segment that fits; on a hit
that verifies (start, length and every block ID compared with the query) take
its metadata and move on, on a miss halve the size.  A full window costs one
read; a partial one at most ``log2(S) + 1`` reads (the fallback reads).  The
next window is probed only after a full-window match.  Because every stored
prefix has a record at every position, this greedy descent finds the exact
longest indexed prefix (the tests hold it equal to the radix oracle); the
strategy still declares ``exact = False`` because two prefixes whose 56-bit
keys collide keep only the first writer's record (the other one is never
reused: verification rejects it).

Insertion matches first (the fallback I/O during insertion), then writes one
record per *new* position ``e`` in one batch (encoded by the compiled
:func:`encode_records`, byte-identical to ``encode_segment``); a record
covering blocks that were already indexed carries their first metadata (taken
from the match), so every block keeps its first record.  Write amplification - block entries
written over new blocks - is ``1 + log2(S)/2`` for long sequences (4 at
``S=64``) and is reported as ``write_amplification``.  Nothing is kept in
memory (``memory_bytes`` 0).  Matches take no lock; inserts are serialised by
one lock so two threads cannot both write a prefix's records.

Where the time goes (:mod:`prefixbench.phases`): computing the record
keys is hashing; a window's first read is storage and every later read of the
same window (the halved sizes) is fallback, timed by the engine; decoding and
verifying records, and the probe loop that chooses the next size, are verify;
an insert's record encoding is encode and its wait for the insert lock is lock.
One switch per store call or per window, never per block.

Removal and workers: the tombstone and location tables of
:mod:`prefixbench.plugins.removal` (records are never rewritten by a remove;
``max_workers = 64``; a remove costs 5-20 us per call here, no store access).
"""
from __future__ import annotations

import threading

import numpy as np

from prefixbench import twins
from prefixbench import phases as _phases
from prefixbench.phases import ENCODE, FALLBACK, HASHING, VERIFY
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.segments import CorruptSegmentError, common_prefix, decode_segment
from prefixbench.plugins.strategy import (
    IndexStrategy,
    META_SIZE,
    Match,
    Option,
    as_block_ids,
    as_metas,
)
from prefixbench.plugins.removal import TombstoneOverlay

__all__ = ["SegmentHashStrategy", "HASH_KEY_SPACE", "record_keys", "record_spans",
           "encode_records", "encode_records_py"]

#: key space of segment-hash records: key = (3 << 56) | (mix64(block id) >> 8)
HASH_KEY_SPACE = 3
_BASE = np.uint64(HASH_KEY_SPACE << 56)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S8 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(8)


def record_keys(block_ids: np.ndarray) -> np.ndarray:
    """Store key of the record ending at each block (splitmix64 finaliser, top byte = space)."""
    x = np.asarray(block_ids, dtype=np.uint64)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    x = x ^ (x >> _S31)
    return (x >> _S8) | _BASE


def record_spans(lo: int, hi: int, S: int) -> tuple[np.ndarray, np.ndarray]:
    """``(start, length)`` of the records ending at positions ``lo .. hi-1``."""
    e = np.arange(lo, hi, dtype=np.int64)
    r = e % S + 1
    g = r & -r
    return e + 1 - g, g


#: the batch encoder: compiled, or its reference in pure-Python mode (``PREFIXBENCH_PURE=1``)
_segment_hash = twins.load("prefixbench.plugins._segment_hash")
encode_records = _segment_hash.encode_records
#: the pure-Python reference encoder, in either mode
encode_records_py = twins.reference("prefixbench.plugins._segment_hash").encode_records


class SegmentHashStrategy(TombstoneOverlay):
    """Segments keyed by the query's chained block IDs; halved sizes on a miss."""

    name = "segment-hash"
    needs_store = True
    gil_free_parts = ("segment decode and verification",)
    options = {
        "S": Option(64, "blocks per full segment, a power of two (windows aligned at "
                    "multiples of S; retries halve it down to 1 block)", min=1, max=4096),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        if not isinstance(meta_size, int) or meta_size < 1:
            raise ConfigError(f"option meta_size: {meta_size!r} must be an integer >= 1")
        S = self.opts["S"]
        if S & (S - 1):
            raise ConfigError(f"option S: {S} is not a power of two (segment-hash halves "
                              f"the segment size down to one block)")
        self.S = S
        self._sizes = [S >> i for i in range(S.bit_length())]      # S, S/2, ..., 1
        self._insert_lock = _phases.TimedLock()
        self._count_lock = threading.Lock()
        self._entries = 0
        self._records = 0
        self._blocks_written = 0
        self._matches = 0
        self._match_reads = 0
        self._fallback_reads = 0
        self._insert_reads = 0
        self._corrupt = 0

    # ------------------------------------------------------------------ core
    def _find(self, q: np.ndarray, start: int = 0) -> tuple[int, list, int, int, int]:
        """Longest verified prefix: ``(blocks, metadata parts from window ``start``,
        reads, fallback reads, corrupt records seen)``; ``start`` (a window start)
        skips windows known to be indexed."""
        n = len(q)
        if n == 0:
            return 0, [], 0, 0, 0
        if not _phases._ON:
            return self._probe(q, record_keys(q).tolist(), False, start)
        _phases.enter(HASHING)
        try:
            keys = record_keys(q).tolist()
        finally:
            _phases.leave()
        _phases.enter(VERIFY)
        try:
            return self._probe(q, keys, True, start)
        finally:
            _phases.leave()

    def _probe(self, q: np.ndarray, keys: list, timed: bool,
               start: int = 0) -> tuple[int, list, int, int, int]:
        """:meth:`_find`'s window loop over the precomputed ``keys``; ``timed`` marks
        the reads after each window's first as fallback."""
        n, S = len(q), self.S
        get = self.store.get
        ms = self.meta_size
        parts: list = []
        reads = fallback = corrupt = 0
        ws = start
        while ws < n:
            qlen = min(S, n - ws)
            p = 0
            probes = 0
            for g in self._sizes:
                if p + g > qlen:
                    continue
                reads += 1
                if probes == 0:
                    raw = get(keys[ws + p + g - 1])
                elif timed:
                    _phases.enter(FALLBACK)
                    try:
                        raw = get(keys[ws + p + g - 1])
                    finally:
                        _phases.leave()
                else:
                    raw = get(keys[ws + p + g - 1])
                fallback += probes > 0                # every probe after the window's first
                probes += 1
                if raw is None:
                    continue
                try:
                    seg = decode_segment(raw, ms)
                except CorruptSegmentError:
                    corrupt += 1
                    continue
                lo = ws + p
                if (seg.start == lo and seg.seg_id == keys[ws + p + g - 1] and len(seg.ids) == g
                        and common_prefix(seg.ids, q[lo:lo + g]) == g):
                    parts.append(seg.metas)
                    p += g
            if p < S:
                return ws + p, parts, reads, fallback, corrupt
            ws += S
        return n, parts, reads, fallback, corrupt

    # ------------------------------------------------------------------ API
    def match(self, block_ids: np.ndarray) -> Match:
        q = as_block_ids(block_ids)
        n, parts, reads, fallback, corrupt = self._find(q)
        with self._count_lock:
            self._matches += 1
            self._match_reads += reads
            self._fallback_reads += fallback
            self._corrupt += corrupt
        if n == 0:
            return Match.empty(self.meta_size)
        return Match(n, parts[0] if len(parts) == 1 else np.concatenate(parts))

    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        self._insert(block_ids, metas, 0)

    def insert_known_prefix(self, block_ids: np.ndarray, metas: np.ndarray, known: int) -> None:
        """``insert``, probing only from the window that holds block ``known``: the
        records of a window are keyed by chained ids, which name the whole prefix, so
        the windows before it need no reads (bulk loads know ``known`` from a first pass)."""
        self._insert(block_ids, metas, (max(0, int(known)) // self.S) * self.S)

    def _insert(self, block_ids: np.ndarray, metas: np.ndarray, start: int) -> None:
        q = as_block_ids(block_ids)
        n, ms = len(q), self.meta_size
        m = as_metas(metas, n, ms)
        if n == 0:
            return
        with self._insert_lock.guard():
            d, parts, reads, _, corrupt = self._find(q, start)
            with self._count_lock:
                self._insert_reads += reads
                self._corrupt += corrupt
            if d == n:
                return
            on = _phases._ON
            if on:
                _phases.enter(ENCODE)
            try:
                starts, lens = record_spans(d, n, self.S)
                lo = int(starts.min())
                if lo < d:                           # records reaching back keep first metadata
                    m = m.copy()
                    m[lo:d] = np.concatenate(parts)[lo - start:d - start]
                items = encode_records(record_keys(q[d:]), starts, lens, q, m, ms)
            finally:
                if on:
                    _phases.leave()
            self.store.write_items(items)
            self._entries += n - d
            self._records += len(items)
            self._blocks_written += int(lens.sum())

    # durability: every record is in the engine; reopening it is the recovery
    rebuild_from_store = True
    layout_options = ("S",)

    def _snapshot_state(self):
        return {"entries": self._entries, "records": self._records,
                "blocks_written": self._blocks_written, "insert_reads": self._insert_reads}, {}

    def _restore_state(self, meta, sections):
        self._entries = int(meta.get("entries", 0))
        self._records = int(meta.get("records", 0))
        self._blocks_written = int(meta.get("blocks_written", 0))
        self._insert_reads = int(meta.get("insert_reads", 0))

    def stats(self) -> dict:
        mt, e = self._matches, self._entries
        return {
            "entries": e,
            "memory_bytes": 0,
            "records": self._records,
            "block_entries_written": self._blocks_written,
            "stored_block_entries": self._blocks_written,
            "write_amplification": self._blocks_written / e if e else 0.0,
            "matches": mt,
            "store_reads_per_match": self._match_reads / mt if mt else 0.0,
            "fallback_reads_per_match": self._fallback_reads / mt if mt else 0.0,
            "insert_reads": self._insert_reads,
            "corrupt_segments": self._corrupt,
        }


@hookimpl
def prefixbench_register_strategies(register):
    register("segment-hash", SegmentHashStrategy)
