"""``sarp``: Sparse Adaptive Routing and Packing (SARP paper, section 4).

Block IDs and metadata live in on-store **segments** (:mod:`.segments`): up to
``S`` consecutive blocks of one sequence, aligned to windows ``[kS, (k+1)S)``.
A sparse in-memory **routing directory** maps the chained block ID at a
*routing point* to a posting list of ``(filter, segment id)`` sorted by filter.

Routing points of a segment starting at ``s`` (offsets in the window):

* base points ``s + i*S/R`` (``i < R``); the first is always registered;
* with ``pruning``: base point ``i+1`` is registered only while the entry at
  base point ``i`` is *expanded* - it has held more than
  ``pruning_threshold`` segments; when an entry first grows past the
  threshold, a background job **rematerializes** the skipped point for every
  segment already in it (reading them from the store);
* with ``refinement``: when a base entry holds more than ``tau`` segments, the
  midpoint ``p + S/(2R)`` of its interval is materialized for its segments;
  in the final interval, a midpoint entry above ``tau`` adds the last-block
  point ``s + S - 1``.  So a segment has at most ``2R + 1`` registrations.

Back-fill jobs (rematerialization, refinement) build their entries privately:
while a parent's job is pending, inserts register the child point into
*pending* entries that queries ignore, so the parent stays authoritative;
:meth:`RoutingDirectory.publish` then merges the job's postings and makes all
children visible under one write lock - a query sees the complete old state
or the complete new one.  A visible entry therefore always lists *every*
segment carrying its key, which is what makes ``max_retrieval=0`` exact.
With a budget the coarser parent can miss what the child would find, so a
match whose route passed over a pending entry waits for the jobs booked
before it and matches again (``backfill_wait``; off, it answers stale, as the
paper's background back-fill does until the worker catches up).

Matching goes window by window: probe the deepest routing point the query
reaches in the window (falling back to earlier ones on a miss); rank the
posting list by filter-derived match potential (binary search, Algorithm 1);
read at most ``max_retrieval`` segments, one at a time in potential order,
stopping at the first whose verified length reaches its filter estimate (the
paper's rule, section 6.5: "retrieval stops once it finds a candidate
matching the filter-estimated length"; ``retrieval_order=group`` instead
reads the whole top-potential group, up to the budget, in one ``get_many``:
fewer round trips, more segments read - on codeact 1.23 segments per routing
entry against 1.05, the paper's Table 4 figure being 1.05); verify block IDs
from the window start; move to the next window only after a full-window
match.  With ``filtering`` off there is no
ranking to choose by, so the cap goes with it (paper section 1: filtering
"prioritizes candidates ... and caps segment retrievals"): every candidate
of the routing entry is read in one batch and verified.

Filters: ``N`` fields of ``b`` bits, field ``i`` = low ``b`` bits of
``fmix64(last block id of region i)``, region ``i`` = blocks ``[p + i*stride,
p + (i+1)*stride)`` clipped to the segment (query) end; fields with no block
are 0; first field in the most significant bits.  A candidate whose first
mismatching field is ``j`` (1-based) can match at most ``j*stride - 1`` blocks
from ``p``.

Insertion skips the whole windows this thread's previous match verified
(when the inserted sequence shares that prefix, as a request's ``insert``
follows its ``match``: chained ids make it the same prefix, and records only
go away in a reclamation, which invalidates every earlier match's memo),
then runs the matching path with an unlimited budget, so the
segment it extends or copies from is the one sharing the longest prefix (a
block already indexed keeps its first metadata, as the contract requires);
it extends that segment in place, copies it on divergence, or writes new
segments; all records of one insert go in one write batch.

The match leaves this thread every record it read in the window that ended
it (segment id -> raw bytes) with the directory version it started at.  The
insert verifies those records from memory - the segment the
match verified is never read twice - and reads only candidates whose filter
potential exceeds the length already verified, with no budget: where the
match's budget may have skipped a longer candidate, the insert still finds
it.  ``insert_reuse=false`` reads everything again (for comparison).

Inserts plan without a lock (routing, reads, verification, which segments to
extend, copy or write; new segments get their ids only at publish, so ids
keep publish order for recovery's ordered scan, or are journalled where
``id_runs`` places them out of it) and take the insert lock only
to publish: write the batch, register, bump the version and log the (window
start, first block id) of every segment written.  Only a segment whose first
block is the inserted sequence's block at that window start can share a
prefix with it there, so a plan is made again under the lock (counted as
``insert_replans``) exactly when a publish since the plan's basis (the
version it started at, or its match's when it used the match's records)
logged one of the plan's (window, block) pairs; concurrent inserts stay exact
and the first writer wins, while inserts of unrelated prefixes never re-plan.
An insert that finds everything stored takes no insert lock (records only
grow outside reclamation, and a pass publishes under the overlay lock, which
every insert holds once anything was removed, so a record read earlier that
holds the sequence still does).  Back-fill jobs
publish routing entries only - which segments exist and what they hold is
unchanged - so they bump nothing.  With ``backfill=sync`` the insert that
booked a job runs it before returning, but reads its segments after releasing
the lock and takes it again only to publish, as the worker does, so another
thread's insert does not wait behind those reads; ``drain`` and snapshots wait
for such jobs to end.  ``insert_lock=whole`` holds the lock for
the whole insert.  Matches take only the directory's read lock (inside its
compiled calls) and run concurrently with inserts and with the background
worker.

Cross-window batched retrieval (``batch_windows=k``, beyond the paper): the
routing keys and filters of every window come from the query alone, so a
match routes up to ``k`` windows up front, fetches each one's first candidate
group in ONE ``get_many`` and verifies window by window; a window that does
not fully match ends the match and the reads fetched for later windows are
wasted (``speculative_reads_wasted``, counted in the store reads).  Further
batches inside a window are as with ``k=1``, so the answers are the same.
Chained ids keep the waste small: a later window's blocks are stored only
where every earlier window is stored whole, so a later window has
candidates to fetch only when the budget missed the longer candidate of the
window that ended the match (or a filter collided); a window without a
routing entry stops the routing.  ``k=64`` is the default: at paper scale on
RocksDB with direct reads ``k=8`` had lowered the mean match latency on
codeact, lmcache-agent and eabf against ``k=1``, and with id runs (below) one
read of every window lets RocksDB fetch a sequence's adjacent data blocks
together (lmcache-agent, 51 windows a match: 1.54 ms at ``k=8``, 1.16 ms at
``k=64``, one run each); matches of at most 8 windows read exactly as with
``k=8`` (``sweep strategies --strategies sarp+batch_windows=1,sarp`` compares
two settings); ``k=1`` is the paper's one round trip per window.

Id runs (``id_runs=K``, beyond the paper): an ordered engine stores adjacent
keys in one data block, so a batched read of a sequence's consecutive windows
costs fewer device reads when their segments have adjacent ids.  With ``K``
>= 2 ids come in aligned runs of ``K`` (each reserved whole when opened): a
new segment takes the id right after the segment of the previous window on
its sequence when that id is the last one its run has handed out, else it
opens a run (:meth:`SegmentLayer.new_ids_after`).  The insert knows each
predecessor from its plan (a stored window, the segment it extends, or a new
segment of the same plan) and, for the windows it skips, from its match
(``_Memo.full_id``); a bulk insert plans from the window holding its last known
block, so even a known prefix that ends on a window boundary gives its
predecessor.  A copy made where a sequence diverges inside a window
opens a run (its predecessor's successor is taken), and the branch's later
windows follow it.  Ids then no longer follow publish order, so an id placed
in a run opened by an earlier publish is journalled with the extensions (a
snapshot taken since may not cover it).  A snapshot keeps the runs with the
store's write mark (:meth:`SegmentStore.write_mark`): recovered from a store
nothing was written to since (a sweep's clone of its loaded state), the index
goes on filling them; otherwise it opens runs above every stored id.  ``K=0``
keeps ids in publish order.

Decision: ``K=64`` is the default (with ``batch_windows=64``), for sarp and the
segment-radix baselines alike (the placement is the shared segment layer's,
so each keeps its best configuration).  At paper scale on RocksDB with direct
reads, one run each, against ``K=0``: lmcache-agent sarp 226 -> 594 req/s at
``K=16`` and 961 at ``K=64`` with ``batch_windows=64``, capped 195 -> 414 at
``K=16``; eabf sarp 405 -> 952, capped 301 -> 575 at ``K=16``; ultrachat (full
size, 2-3 windows a match) 2,876 -> 2,905; codeact (2-3 windows) 2,338 ->
2,011 in one sweep and 382 -> 337 us per match in another, with file reads
2.32 -> 2.21 per request: no measured cost beyond noise where sequences are
short, a halving of match time where they are long.

Geometry in tokens: ``segment_tokens`` and ``interval_tokens`` (0 = use ``S``
and ``R``) are rounded to whole blocks of ``block_tokens`` (which the harness
sets to the workload's block size): see :func:`resolve_geometry`; the
rounding is :meth:`SarpStrategy.geometry` and ``stats()["geometry"]``.
Filters stay in blocks (``N``, ``b``, ``stride``).

Corrupt segment records are counted misses (:class:`SegmentLayer`), never
reused.

Snapshot and recovery: the snapshot holds the routing directory
only (routing keys, offsets, states, posting lists with filters and segment
references; segments stay in the store), taken after back-fill jobs drain, so
every entry is visible and no job is half done; it records the first segment
id it does not cover and the last **extension journal** sequence it covers.
An insert that extends a segment in place (same id) also writes, in the same
engine batch, a journal record under key space 4 (``(4 << 56) | seq``,
value = the extended segment ids as u64, with the ids ``id_runs`` placed in
runs an earlier publish opened).  Recovery loads the directory
(compiled bulk :meth:`RoutingDirectory.load`), then re-registers every
segment an ordered scan finds from the first uncovered id and every segment
journalled after the covered sequence, so every insert acknowledged before
a crash is routable again.  Re-registration is idempotent (an upsert with the
segment's current filter), and back-fill interrupted by a crash is simply
re-triggered by it.  A missing or corrupt snapshot falls back to registering
every segment of the store in id order.

Removal and workers (eviction runs; :mod:`prefixbench.plugins.removal`, the
overlay every segment strategy shares).  A remove never touches the store:

* *Blocks removed inside a segment* get a tombstone in an in-memory table
  beside the directory.  A match still routes, ranks, reads and verifies the
  segment's block ids exactly as before (the never-unverified rule and the
  ``2R + 1`` registrations per segment are untouched: routing never changes
  on a remove), then stops at the first tombstoned block.  An insert that
  covers a tombstoned block revives it with its own metadata (the location
  table holds it), so "a later insert makes it available again with that
  insert's metadata" holds without a segment write.
* *Location changes* (an insert on a worker other than 0) go to the
  location table (a side structure: worker bitmap plus one metadata record
  per worker, about (8 + 16 w) / 0.75 bytes per block listed) instead of a
  segment rewrite; the first time a stored block gets a second location, one
  plain match learns whether worker 0 holds it.  ``max_workers = 64``.

Reclamation (:meth:`SarpStrategy.reclaim`; the background worker runs a pass
once ``reclaim_after`` tombstones have accumulated since the last one) gives
the space of removed blocks back:

* *Segments whose blocks are all gone* are deleted with every posting that
  names them; *mostly-dead segments* - a removed tail of at least
  ``reclaim_fraction`` of their blocks - are rewritten without the tail.  A
  segment holds consecutive blocks, so only a tail can go: removed blocks
  before its last available one stay, tombstoned.  Copies made on divergence
  share their first blocks, so cutting their tails would leave many equal
  records: a cut record whose kept prefix another record keeps (the id at a
  position names the whole prefix) goes whole instead, one record per prefix
  staying.  ``reclaim_age`` delays a cut by that many passes.
* *Routing entries whose candidates all died* are dropped with their last
  posting (:meth:`RoutingDirectory.discard`); an entry re-created later starts
  as a new one (its pruning and refinement state follow its parent's, as for
  any registration).
* *The overlay shrinks*: a tombstone is dropped once no stored record holds
  its block (its revival is then a plain insert of a block the store lacks).
* A pass scans the segments without a lock (one vectorised availability test
  per 4096 records), then publishes the rewrites in batches of 256 under the
  overlay and insert locks, each re-checked there against what inserts and
  removes did meanwhile.  Per batch, in this order: write the shortened
  copies under *new* ids together with a reclamation-journal record (key
  space 5, ``(5 << 56) | seq`` on the extension journal's sequence, value =
  the (segment, routing key) pairs to retire) in one write batch; register the
  copies as an insert would (at most ``2R + 1`` points each, under the
  current pruning and refinement states); retire the old postings under one
  directory write lock; bump the overlay generation; delete the old records.
  After the last batch the store is synced, and only then are tombstones
  dropped (never those of a block an insert touched during the pass).
* Matches never wait.  One that overlaps a generation bump is run again, so
  no match reads a retired record that has gone (a shorter answer) or
  applies tombstones that were dropped after it read a record holding them
  (a removed block served).  Every publish bumps the version and the
  reclamation epoch: a match memo from before a pass says nothing about what
  is stored, so the insert after it plans from scratch.  Since a pass can cut
  an earlier window of a prefix whose later windows it keeps (their blocks
  still available), an insert after any pass routes every window instead of
  assuming that all windows after a new one are new.  A back-fill job whose
  reads straddle a pass reads again under the insert lock.
* Crash safety.  Recovery registers what the store holds past the snapshot,
  then retires every posting the reclamation journal lists after the
  snapshot's sequence and deletes the retired records still there - so a kill
  at any step leaves either the old record (with its tombstones, which come
  back from the snapshot and the log until the synced pass dropped them) or
  the new one, both holding every available block; an acknowledged insert
  made after the pass is in the log or in a record of its own.  A rebuild
  without a snapshot applies the whole journal.

Costs measured here (2 shared cores under a load of 4-7, memory engine,
lmcache-agent at a pool of 5,030 blocks = 10% of its unique blocks): a remove
costs no store access, 0.3-0.45 ms mean per pool eviction call of ~1,300
blocks (``prefixbench run -s sarp -e memory -w lmcache-agent --no-runner
--pool-blocks 5030``); a pass over a store of ~10,000 blocks that frees
~4,800 takes ~5 ms (32 passes in 0.17 s under cProfile), ~2 us per block
freed.  On rocksdb with direct reads and the 10% cache rule, the mean remove
was 1.2-1.7 ms per call on lmcache-agent (5,030-block pool, ~1,300 blocks a
call) and 95-190 us on ultrachat (17,276 blocks, ~58 a call), load 4-9.
Ultrachat under that pool (``prefixbench run -s sarp -w ultrachat -e rocksdb
--direct-io --cache-bytes 414634 --no-runner --pool-blocks 17276``, load
1.7-2.3, three runs each beside the same command unbounded): 2,090-2,177
requests/s against 2,427-2,778 unbounded (0.75-0.90 of it; 0.52-0.68 before
the overlay's corrections were compiled and the candidate filter vectorised),
mean remove 35-42 us a call.  The hit rate falls from 87.9% to 2.2% there, so
nearly every insert stores its whole history again: about 2.75x the blocks
of the unbounded run are written, as copies of the one segment left holding
the shared prefix (reclamation deleted the rest), and that, with its
registrations, is most of what the bounded run still pays (CPU time per
request on the memory engine: match equal, insert about +55 us, and the
background passes about 85 us of the other core).  Passes start when the
tombstones added since the last one reach
``max(reclaim_after, half the blocks that pass kept)``, so the scan costs a
few block tests per block freed; removes during a pass do not queue another
(the next remove after it starts one if it is due).  Journal records every retained snapshot
covers are deleted after each pass (with no snapshot known, every
reclamation record is, once its pass has synced).  Durable mode logs
removes and the inserts made once the overlay is in use; the snapshot
carries both tables beside the directory.

Hot paths are compiled (:mod:`prefixbench.plugins._sarp`: filters, the
match-potential search, the directory, and a whole match - routing, settling
and copying the metadata of every window in one call, ``match_run``;
:mod:`prefixbench.plugins._segments`:
record checks and block-ID verification); ``directory="python"`` runs the
same strategy on their pure-Python references (``_sarp_ref``, ``_segments_ref``),
which the tests hold equal.
"""
from __future__ import annotations

import collections
import math
import queue
import struct
import threading

import numpy as np
from prefixbench import phases, twins
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.segments import (HEADER_SIZE, SEGMENT_KEY_LIMIT, Segment, SegmentLayer,
                                          max_key)
from prefixbench.plugins.strategy import (
    META_SIZE,
    IndexStrategy,
    Match,
    Option,
    as_block_ids,
    as_metas,
    check_known,
)
from prefixbench.plugins import recovery as _recovery
from prefixbench.plugins.removal import TombstoneOverlay

__all__ = ["SarpStrategy", "RoutingDirectory", "RoutingDirectoryPy", "filters_py",
           "max_potential_py", "NONE", "PENDING", "LIVE"]

#: key space of the extension journal: key = (4 << 56) | sequence number
JOURNAL_KEY_SPACE = 4
_JOURNAL_BASE = JOURNAL_KEY_SPACE << 56
#: key space of the reclamation journal: key = (5 << 56) | sequence number (the
#: extension journal's counter), value = the retired postings as u64 (segment, key) pairs
RECLAIM_KEY_SPACE = 5
_RECLAIM_BASE = RECLAIM_KEY_SPACE << 56
#: a background-queue job: one reclamation pass
_RECLAIM_JOB = ("reclaim",)
#: a back-fill job's result when its parent has no segments left: keys, filters, ids
_NO_POSTINGS = (np.empty(0, np.uint64),) * 3
_blockhash = twins.load("prefixbench.plugins._blockhash")


def _blockhash_table(ids: np.ndarray):
    """A compiled set of ``ids`` (membership tests)."""
    t = _blockhash.BlockHashTable(1, 0)
    t.reserve(len(ids))
    t.insert(np.ascontiguousarray(ids, dtype=np.uint64), np.zeros((len(ids), 1), np.uint8))
    return t


#: the hot paths: compiled, or their reference in pure-Python mode (``PREFIXBENCH_PURE=1``)
_sarp = twins.load("prefixbench.plugins._sarp")
#: the pure-Python reference, in either mode (``directory=python``)
_sarp_ref = twins.reference("prefixbench.plugins._sarp")
NONE, PENDING, LIVE = _sarp.NONE, _sarp.PENDING, _sarp.LIVE
RoutingDirectory = _sarp.RoutingDirectory
RoutingDirectoryPy = _sarp_ref.RoutingDirectory
filters_py = _sarp_ref.filters
max_potential_py = _sarp_ref.max_potential


# ----------------------------------------------------------------------------- strategy
class _Geometry:
    """Routing-point offsets of a window and how they hang together."""

    def __init__(self, S: int, R: int, refinement: bool):
        step = S // R
        self.base = [i * step for i in range(R)]
        half = step // 2
        self.mids = [b + half for b in self.base] if (refinement and half >= 1) else []
        last = S - 1
        self.last = last if (self.mids and last not in self.base and last not in self.mids) else None
        offs = set(self.base) | set(self.mids) | ({self.last} if self.last is not None else set())
        self.probe_desc = np.array(sorted(offs, reverse=True), dtype=np.int64)
        self.asc = sorted(offs)
        self.next_base = {b: self.base[i + 1] for i, b in enumerate(self.base[:-1])}
        self.mid_of = {b: m for b, m in zip(self.base, self.mids)}
        self.final_mid = self.mids[-1] if self.mids else None
        # what RoutingDirectory.register walks
        self.base_arr = np.array(self.base, dtype=np.int64)
        self.mids_arr = np.array(self.mids, dtype=np.int64)
        self.last_point = -1 if self.last is None else self.last     # -1: none


def _half_up(x: float) -> int:
    """Nearest whole number, halves up (``round`` would round 2.5 to 2)."""
    return int(math.floor(x + 0.5))


def resolve_geometry(S: int, R: int, segment_tokens: int = 0, interval_tokens: int = 0,
                     block_tokens: int = 16, max_S: int = 1 << 16, max_R: int = 127):
    """``(S, R, description)``: the window size in blocks and the base routing points
    per window, from block counts or from token counts rounded to whole blocks.

    ``segment_tokens``/``interval_tokens`` of 0 leave ``S``/``R`` as given (then
    ``R`` must divide ``S``).  Otherwise S = max(1, round(segment_tokens /
    block_tokens)) blocks, the routing interval max(1, round(interval_tokens /
    block_tokens)) blocks (unset: S // R), R = max(1, S // interval) (so R drops
    when S has fewer blocks than R), and S is rounded to the nearest multiple of
    R; halves round up.
    """
    if not segment_tokens and not interval_tokens:
        if S % R:
            raise ConfigError(f"option S: {S} is not a multiple of R={R}")
        return S, R, f"segment {S} blocks, interval {S // R} blocks, R={R}"
    seg = max(1, _half_up(segment_tokens / block_tokens)) if segment_tokens else S
    if interval_tokens:
        interval = max(1, _half_up(interval_tokens / block_tokens))
    else:
        interval = max(1, seg // min(R, seg))
    r = min(max(1, seg // interval), max_R)
    s2 = max(r, r * _half_up(seg / r))
    if s2 > max_S:
        what = "segment_tokens" if segment_tokens else "S"
        raise ConfigError(f"option {what}: {s2} blocks per segment exceed the maximum {max_S}")
    bt = f"{block_tokens} token{'s' if block_tokens != 1 else ''}"

    def blocks(n):
        return f"{n} block{'s' if n != 1 else ''}"
    part1 = (f"segment {segment_tokens} tokens -> {blocks(s2)} of {bt}" if segment_tokens
             else f"segment {blocks(s2)} of {bt}")
    if s2 != seg:
        part1 += f" (rounded from {seg} so that R={r} divides it)"
    part2 = (f"interval {interval_tokens} tokens -> {blocks(interval)}" if interval_tokens
             else f"interval {blocks(interval)}")
    if s2 // r != interval:
        part2 += f" (routing step {blocks(s2 // r)})"
    return s2, r, f"{part1}, {part2}, R={r}"


class _Memo:
    """What this thread's last match learnt, for the insert that follows it.

    ``full``/``key``: the match verified whole windows through block ``full``
    (``key`` = the query's block id at ``full - 1``); ``version``: the directory
    version when the match started; ``raws``: window start -> ``{segment id: raw
    record}`` of every record the match read in the window that ended it (the
    one window the insert routes again), valid while the version is unchanged;
    ``best``: ``(window start, segment id)`` the match verified there;
    ``full_id``: the segment it verified whole in the window ending at ``full``."""

    __slots__ = ("full", "key", "version", "raws", "best", "epoch", "full_id")

    def __init__(self, full, key, version, raws, best, epoch, full_id=0):
        self.full, self.key, self.version, self.raws, self.best = full, key, version, raws, best
        self.epoch, self.full_id = epoch, full_id


class _Plan:
    """An insert's decision (the hot module's ``insert_plan``): the records to write,
    in order, and what it cost to find them."""

    __slots__ = ("writes", "after", "extended", "log", "counts", "basis", "_keys", "_looked")

    def __init__(self, planned=None):
        #: ``(segment id, start, ids, metas)`` per record, id 0 for a fresh one;
        #: ``after``: per fresh record, the segment before it on the sequence (an id,
        #: 0 unknown, or ``-(j + 1)`` for the plan's j-th fresh record); ``log``:
        #: ``(start, first block id)`` per record, what a conflict check compares
        #: ``counts``: what finding the records cost and saved, as ``insert_plan`` returns
        #: it (``Counters.count_insert`` adds it)
        self.writes, self.after, self.extended, self.log, self.counts = (
            planned if planned is not None else ([], [], [], [], (0,) * 7))
        self.basis = 0
        self._keys: frozenset | None = frozenset()
        self._looked = None

    def look_from(self, x, ws: int, S: int) -> None:
        """The plan looks at every window of ``x`` from block ``ws``; its :attr:`keys`
        are built only when a conflict check needs them (rarely: one thread never does)."""
        self._keys, self._looked = None, (x, ws, S)

    @property
    def keys(self) -> frozenset:
        """``(window start, block id)`` of every window the plan looked at."""
        if self._keys is None:
            x, ws, S = self._looked
            self._keys = frozenset((w, int(x[w])) for w in range(ws, len(x), S))
        return self._keys

    @keys.setter
    def keys(self, value: frozenset) -> None:
        self._keys = value


#: blocks of at least this many tokens get the ``large-blocks`` preset under ``auto``
LARGE_BLOCK_TOKENS = 256
#: the ``large-blocks`` preset: with 512-token blocks (Mooncake) a posting list holds
#: thousands of segments and 8-bit fields collide (0.998% of the oracle's tokens lost at
#: the paper's settings); 16-bit fields and R=2 keep the loss near 0.016% at <= 4 B/block.
#: The paper has no such traces; these values are ours.
LARGE_BLOCKS = {"R": 2, "N": 4, "b": 16, "stride": 2}


class SarpStrategy(TombstoneOverlay):
    """Sparse adaptive routing over on-store segments (SARP, paper section 4)."""

    name = "sarp"
    needs_store = True
    #: none per request: its compiled calls are sub-microsecond, and at two request
    #: threads giving up the GIL for them cost more than they take (see _rwlock.pxi)
    gil_free_parts = ()
    exact = False
    options = {
        "S": Option(64, "blocks per segment (window size)", min=1, max=1 << 16),
        "R": Option(4, "base routing points per segment; must divide S", min=1, max=127),
        "N": Option(8, "filter fields", min=1, max=64),
        "b": Option(8, "bits per filter field; must divide 64, N*b <= 64", min=1, max=64),
        "stride": Option(2, "blocks per filter region", min=1, max=1 << 16),
        "tau": Option(256, "posting-list size that triggers refinement", min=1, max=1 << 32),
        "pruning_threshold": Option(3, "posting-list size at or below which the next base "
                                    "point is pruned", min=0, max=1 << 32),
        "max_retrieval": Option(3, "segment retrievals per window (0 = unlimited)", min=0,
                                max=1 << 20),
        "refinement": Option(True, "adaptive routing-point refinement"),
        "filtering": Option(True, "candidate filtering: rank by match potential and cap "
                            "retrievals at max_retrieval (off: verify every candidate)"),
        "pruning": Option(True, "adaptive routing-point pruning"),
        "backfill": Option("background", "run back-fill jobs in a background worker or "
                           "synchronously inside insert", choices=("background", "sync")),
        "backfill_wait": Option(True, "a match whose routing passed over an entry a "
                                "back-fill job has yet to publish waits for the jobs booked "
                                "so far and matches again (false: answer from the coarser "
                                "entry, as the paper's stale routing does, losing hits while "
                                "the worker lags)", beyond_paper=True),
        "directory": Option("compiled", "hot-path implementation: compiled, or python = the "
                            "pure-Python references of the directory, filters and "
                            "verification (for tests)", choices=("compiled", "python")),
        "retrieval_order": Option("sequential", "sequential = the paper's: one candidate per "
                                  "read, in potential order, stopping at the first whose "
                                  "verified length reaches its potential; group = read every "
                                  "candidate of the top potential group (up to the budget) "
                                  "in one get_many", choices=("sequential", "group")),
        "batch_windows": Option(64, "windows whose first candidates one match fetches in one "
                                "get_many (1 = the paper's one window per round trip)",
                                min=1, max=64, beyond_paper=True),
        "id_runs": Option(64, "a new segment takes the id right after "
                          "the segment of the previous window, in runs of this many "
                          "ids, so one engine block holds several windows of a sequence "
                          "(0 = ids in publish order)", min=0, max=255, beyond_paper=True),
        "insert_reuse": Option(True, "insert starts from the records its match read "
                               "instead of reading them again", beyond_paper=True),
        "insert_lock": Option("publish", "what the insert lock covers: publish = only writing "
                              "and registering (plans run unlocked, re-planned under the lock "
                              "when another insert published a segment of the same prefix "
                              "meanwhile), whole = the whole insert",
                              choices=("publish", "whole"), beyond_paper=True),
        "segment_tokens": Option(0, "segment size in tokens, rounded to whole blocks "
                                 "(0 = use S)", min=0, max=1 << 30),
        "interval_tokens": Option(0, "routing interval in tokens, rounded to whole blocks; "
                                  "R = segment / interval (0 = use R)", min=0, max=1 << 30),
        "block_tokens": Option(16, "tokens per block, for segment_tokens and interval_tokens "
                               "(the harness passes the workload's block size)",
                               min=1, max=1 << 20),
        "reclaim_after": Option(4096, "tombstones added since the last reclamation pass "
                                "that start one in the background (0 = only reclaim())",
                                min=0, max=1 << 40),
        "reclaim_fraction": Option(0.5, "share of a segment's blocks in a removed tail that "
                                   "gets the segment rewritten without it (a wholly removed "
                                   "segment is always deleted)", min=0.0, max=1.0),
        "reclaim_age": Option(0, "passes a record must have been a candidate before "
                              "it is cut (0 = at once): a tail revived before then is "
                              "not written again", min=0, max=1 << 10),
        "preset": Option("auto", "routing and filter defaults: paper (R=4, N=8, b=8, "
                         "stride=2), large-blocks (R=2, N=4, b=16, stride=2, for blocks of "
                         f"{LARGE_BLOCK_TOKENS}+ tokens), auto = large-blocks when block_tokens "
                         f">= {LARGE_BLOCK_TOKENS}; options given explicitly win",
                         choices=("auto", "paper", "large-blocks")),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        o = self.opts
        preset = o["preset"]
        if preset == "auto":
            preset = "large-blocks" if o["block_tokens"] >= LARGE_BLOCK_TOKENS else "paper"
        if preset == "large-blocks":
            for k, v in LARGE_BLOCKS.items():
                if k not in (options or {}):
                    o[k] = v
        self.preset = preset
        b, N = o["b"], o["N"]
        S, R, self._geometry = resolve_geometry(o["S"], o["R"], o["segment_tokens"],
                                                o["interval_tokens"], o["block_tokens"])
        if 64 % b:
            raise ConfigError(f"option b: {b} filter bits do not divide 64")
        if N * b > 64:
            raise ConfigError(f"option N: {N} fields of {b} bits exceed the 64-bit filter")
        self.S, self.R, self.N, self.bits, self.stride = S, R, N, b, o["stride"]
        self.tau, self.pt = o["tau"], o["pruning_threshold"]
        self.budget = o["max_retrieval"]
        self.refinement, self.filtering, self.pruning = o["refinement"], o["filtering"], o["pruning"]
        self.batch_windows = o["batch_windows"]
        self.id_runs = o["id_runs"] if o["id_runs"] > 1 else 0
        self.sequential = o["retrieval_order"] == "sequential"
        self.insert_reuse = o["insert_reuse"]
        self.backfill_wait = o["backfill_wait"]
        self.narrow_lock = o["insert_lock"] == "publish"
        self.layer = SegmentLayer(store, S, meta_size)
        hot = _sarp if o["directory"] == "compiled" else _sarp_ref
        self.dir = hot.RoutingDirectory()
        self._filters = hot.filters
        self._record_ids = hot.record_ids
        self._child_postings = hot.child_postings
        self._match_run = hot.match_run
        self._insert_plan = hot.insert_plan
        self.geo = _Geometry(S, R, self.refinement)
        self._insert_lock = threading.RLock()
        self._timed_lock = phases.TimedLock(self._insert_lock)
        #: inserts running their sync back-fill jobs outside the lock, and their end
        self._jobs_running = 0
        self._jobs_idle = threading.Condition(self._insert_lock)
        #: bumped after every publish of segments (insert, recovery registration), which
        #: logs the (window start, first block id) of the segments it wrote (None: any),
        #: what a conflict check compares - neither changes once published
        self._version = 0
        self._pub_log: collections.deque = collections.deque(maxlen=4096)
        #: test hook: called between an unlocked plan and taking the lock to publish it
        self._after_plan = None
        self._pending_children: dict[tuple[int, int], set] = {}
        self._jobs: "queue.Queue" = queue.Queue()
        #: back-fill jobs booked, and those ended (published, or failed on the worker)
        self._jobs_booked = self._jobs_ended = 0
        self._jobs_ended_cv = threading.Condition(threading.Lock())
        self._sync_jobs: list = []
        self._worker: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._closed = False
        #: every counter behind stats(); a match and an insert each add theirs in one call
        self._c = hot.Counters()
        self._tl = threading.local()
        self._journal = None        # last journal sequence, found on first use
        #: bumped by every reclamation publish (under the overlay and insert locks):
        #: a match's memo from before it no longer says what is stored
        self._reclaim_epoch = 0
        self._reclaim_lock = threading.Lock()
        self._reclaim_queued = False
        self._dead_after_pass = 0
        self._stored_after_pass = 0
        #: journal sequences the last snapshots taken or recovered from cover (a
        #: journal record at or below all of them is needed by no recovery)
        self._snap_seqs: collections.deque = collections.deque(maxlen=3)
        #: while a pass runs: ids of the segments inserts extended in place meanwhile
        self._extended_watch: set | None = None
        self.reclaim_after = o["reclaim_after"]
        self.reclaim_fraction = float(o["reclaim_fraction"])
        self.reclaim_age = o["reclaim_age"]
        #: segment id -> passes it has been a candidate in, without being cut
        self._aging: dict[int, int] = {}
        self._rc = dict.fromkeys(("passes", "segments_scanned", "segments_deleted",
                                  "segments_rewritten", "blocks_reclaimed", "postings_dropped",
                                  "entries_dropped", "tombstones_dropped", "bytes_reclaimed"), 0)
        self._rc_seconds = 0.0

    def geometry(self) -> str:
        """One line: the window and routing interval in blocks (and the tokens they came
        from), R, and the routing bytes per block so far."""
        st = self.stats()
        return (f"{self._geometry}; preset {self.preset} (N={self.N}, b={self.bits}, "
                f"stride={self.stride}); routing {st['routing_bytes_per_block']:.2f} B/block")

    # ------------------------------------------------------------------ match
    def match(self, block_ids: np.ndarray) -> Match:
        q = as_block_ids(block_ids)
        S = self.S
        version, epoch, ended = self._version, self._reclaim_epoch, self._jobs_ended
        pos, metas, last_id, full_id, raws_by_window, counts = self._match_once(q)
        if counts[9] and self.backfill_wait and self._await_backfill(ended):
            # a routed window passed over an entry still hidden: with the jobs booked
            # before this match published, the deeper entry answers as it would have
            version, epoch = self._version, self._reclaim_epoch
            pos, metas, last_id, full_id, raws_by_window, again = self._match_once(q)
            counts = tuple(a + b for a, b in zip(counts, again))
        self._c.count_match(counts)
        full = pos - pos % S
        old = getattr(self._tl, "memo", None)
        if full:
            key = int(q[full - 1])
        elif old is not None and old.epoch == epoch:
            full, key = old.full, old.key  # an earlier verified prefix stays stored
            full_id = old.full_id
        else:
            key = 0
        best = (pos - pos % S, int(last_id)) if pos and pos % S else None
        self._tl.memo = _Memo(full, key, version, raws_by_window, best, epoch, int(full_id))
        if not pos:
            return Match.empty(self.meta_size)
        return Match(pos, metas)

    def _match_once(self, q):
        on = phases._ON
        return self._match_run(
            self.dir, q, self.S, self.budget, self.batch_windows, self.filtering,
            self.sequential, self.meta_size, self.geo.probe_desc, self.N, self.stride,
            self.bits, self.layer.read_raw_many, self.layer.count_corrupt,
            phases.phase(phases.ROUTING) if on else None,
            phases.phase(phases.VERIFY) if on else None)

    def candidate_counts(self, block_ids: np.ndarray) -> tuple[int, int, int, int]:
        """Paper Table 4's counts for one query, matched as :meth:`match` would and
        counted apart: ``(routing entries used, candidates before filtering, after
        filtering, retrieved)``.  Nothing is added to :meth:`stats` and nothing kept
        for the next insert, so a harness can sample the candidate counts over a
        bulk load (which routes nothing) without changing what the timed requests
        count."""
        counts = self._match_once(as_block_ids(block_ids))[5]
        return int(counts[1]), int(counts[2]), int(counts[3]), int(counts[4])

    def _await_backfill(self, ended: int) -> bool:
        """Wait until every back-fill job booked so far has ended; False (at once) when
        none is outstanding and none has ended since ``ended`` jobs had: the entries
        the match found hidden are not waiting on any job, and matching again would
        find them as they were.  An entry is hidden only while a booked job is
        to publish it, so after the wait the match's route finds it visible."""
        with self._jobs_ended_cv:
            target = self._jobs_booked
            if self._jobs_ended == ended and ended >= target:
                return False
        if self.opts["backfill"] == "background" and self._insert_lock._is_owned():
            return False        # (the worker publishes under the lock this thread holds)
        self._c.add("backfill_waits")
        if self.opts["backfill"] == "sync":
            self.drain()            # (another thread's insert may be running its jobs)
            return True
        with self._jobs_ended_cv:
            while (self._jobs_ended < target and self._worker is not None
                   and self._worker.is_alive()):
                self._jobs_ended_cv.wait(1.0)
        self._check_worker()
        return True

    # ------------------------------------------------------------------ insert
    def insert_known_prefix(self, block_ids: np.ndarray, metas: np.ndarray, known: int) -> None:
        """``insert``, planning from the window that holds block ``known - 1``.

        The caller vouches that the first ``known`` blocks are indexed, and every
        insert stores each window of its sequence whole, so each whole window
        before that one is stored already and costs no reads (a paper-scale load's
        bulk path; segment-hash and ssd-blockhash skip the known prefix too).  The
        removal overlay's wrapper calls this only while no block was ever removed
        (else plain :meth:`insert`), so no reclamation can have cut such a window; a
        remove landing during the insert makes the wrapper insert again, unhinted."""
        self._tl.known = check_known(known, len(block_ids))
        try:
            self.insert(block_ids, metas)
        finally:
            self._tl.known = 0

    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        x = as_block_ids(block_ids)
        n = len(x)
        xm = as_metas(metas, n, self.meta_size)
        known = getattr(self._tl, "known", 0)
        self._tl.known = 0                  # the hint is for this one call
        if n == 0:
            return
        self._check_worker()
        ws = prev = 0
        memo = getattr(self._tl, "memo", None)
        self._tl.memo = None
        after_match = memo is not None
        if memo is not None and memo.epoch != self._reclaim_epoch:
            memo = None         # a reclamation since the match: its records may be gone
        if memo is not None and memo.full and memo.full <= n and int(x[memo.full - 1]) == memo.key:
            # this thread's last match verified whole windows through memo.full; chained
            # ids make that this sequence's prefix, and no pass has run since (epoch)
            ws, prev = memo.full, memo.full_id
        reused = ws
        # the window holding the last known block: where the known prefix ends on a
        # window boundary, the plan then reads the last whole window and learns the
        # segment the new windows follow (else they would open an id run)
        kw = (known - 1) // self.S * self.S if known else 0
        if kw > ws:
            ws, prev = kw, 0                # (0: the segment before is not known)
        if not self.insert_reuse:
            memo = None
        replanned = False
        if self.narrow_lock:
            plan = self._plan(x, xm, ws, memo, prev)
            if self._after_plan is not None:
                self._after_plan()
            if plan.writes:
                with self._timed_lock.guard():
                    if self._conflicts(plan):
                        # another insert published where this plan looked: plan again,
                        # under the lock (with what the store holds now)
                        replanned = True
                        plan = self._plan(x, xm, ws, None, prev)
                    self._publish_plan(plan)
                    jobs, self._sync_jobs = self._sync_jobs, []
                    self._jobs_running += bool(jobs)
                if jobs:
                    self._run_jobs_unlocked(jobs)
        else:
            with self._timed_lock.guard():
                plan = self._plan(x, xm, ws, memo if self._conflicts_memo(memo, x) is False
                                  else None, prev)
                self._publish_plan(plan)
                self._run_sync_jobs()
        self._c.count_insert(plan.counts, len(plan.writes), after_match, reused // self.S,
                             (ws - reused) // self.S, replanned)

    def _conflicts(self, plan) -> bool:
        """Whether a publish since ``plan.basis`` wrote a segment in a window the plan
        looked at that starts with ``x``'s block there - the only segments that can
        share a prefix with ``x`` in that window (caller holds the insert lock).
        Publishes elsewhere leave the plan exact."""
        if self._version == plan.basis:
            return False
        log = self._pub_log
        if not log or log[0][0] > plan.basis + 1:
            return True                     # older than the log remembers
        looked = plan.keys
        for ver, keys in reversed(log):
            if ver <= plan.basis:
                return False
            if keys is None or any(k in looked for k in keys):
                return True
        return False

    def _conflicts_memo(self, memo, x) -> bool:
        """Whether ``memo``'s records may be stale for ``x`` (caller holds the lock)."""
        if memo is None or not memo.raws:
            return True
        p = _Plan()
        p.basis = memo.version
        p.keys = frozenset((w, int(x[w])) for w in memo.raws if w < len(x))
        return self._conflicts(p)

    def _plan(self, x, xm, ws: int, memo, prev=0):
        """What inserting ``x`` from block ``ws`` writes, decided from reads only
        (the hot module's ``insert_plan`` has the rules).

        The records ``memo`` holds (read by this thread's match) are verified from
        memory instead of being read again; the plan's ``basis`` is then the
        match's version, else the version it started at, and its ``keys`` the
        (window start, block id) of every window from ``ws``, for
        :meth:`_conflicts`.  New segments get their ids when published, so ids
        keep the publish order that recovery's ordered scan relies on; ``prev``
        (the id of the segment before window ``ws`` on ``x``, 0 if unknown) and
        each new segment's predecessor (``plan.after``) place them for ``id_runs``.
        """
        basis = self._version
        raws = memo.raws if memo is not None else None
        if raws:
            basis = min(basis, memo.version)
        on = phases._ON
        layer = self.layer
        plan = _Plan(self._insert_plan(
            self.dir, x, xm, ws, prev, self.S, raws or None,
            memo.best if memo is not None else None, bool(self._reclaim_epoch),
            self.meta_size, self.geo.probe_desc, self.N, self.stride, self.bits,
            self.filtering, self.sequential, layer.read_raw_many, layer.count_corrupt,
            phases.phase(phases.ROUTING) if on else None,
            phases.phase(phases.VERIFY) if on else None))
        plan.basis = basis
        plan.look_from(x, ws, self.S)
        return plan

    def _publish_plan(self, plan) -> None:
        """Give the plan's new segments their ids, write everything in one batch and
        register it (caller holds the insert lock)."""
        if not plan.writes:
            return
        fresh, journalled = (), plan.extended
        if plan.after and self.id_runs:
            fresh, earlier = self.layer.new_ids_after(plan.after, self.id_runs)
            if earlier:
                # below the first id a snapshot taken before this publish does not
                # cover: recovery finds them through the journal, as extensions
                journalled = plan.extended + earlier
        elif plan.after:
            fresh = self.layer.new_ids(len(plan.after))
        journal = ()
        if journalled:
            self._journal_seq += 1
            journal = [(_JOURNAL_BASE | self._journal_seq,
                        struct.pack(f"<{len(journalled)}Q", *journalled))]
        sids = self.layer.write_planned(plan.writes, fresh, journal)
        if self._extended_watch is not None and plan.extended:
            self._extended_watch.update(plan.extended)
        phases.timed_call(phases.ROUTING, self._register_writes, plan.writes, sids)
        self._version += 1
        # what a conflict check compares (the segments themselves may die with the insert)
        self._pub_log.append((self._version, plan.log))

    # ------------------------------------------------------------------ registration
    def _register_all(self, segs) -> None:
        """:meth:`_register` each of ``segs`` in order (one routing phase for the lot)."""
        for seg in segs:
            self._register(seg)

    def _register_writes(self, writes, sids) -> None:
        """:meth:`_register` a plan's records, ``sids`` their segment ids, in order
        (one directory call for the lot)."""
        geo = self.geo
        self._book(*self.dir.register_writes(
            writes, sids, geo.base_arr, geo.mids_arr, geo.last_point, self.N, self.stride,
            self.bits, self.pruning, self.refinement, self.pt, self.tau))

    def _register(self, seg: Segment) -> None:
        """Register ``seg``'s routing points (caller holds the insert lock): the
        directory walks them (``RoutingDirectory.register``), marking entries that
        outgrew a threshold; their back-fill jobs and the hidden entries waiting on
        a parent are booked here, in the order the walk found them."""
        geo = self.geo
        self._book(*self.dir.register(seg.ids, seg.seg_id, geo.base_arr, geo.mids_arr,
                                      geo.last_point, self.N, self.stride, self.bits,
                                      self.pruning, self.refinement, self.pt, self.tau))

    def _book(self, jobs, pending) -> None:
        """Book what a registration found: the hidden entries waiting on a parent, then
        the back-fill jobs, in the order the walk found them."""
        for parent, which, key in pending:
            self._pending_children.setdefault((parent, which), set()).add(key)
        for job in jobs:
            self._schedule(job)

    def _maybe_trigger(self, key: int, off: int, size: int, ns: int, rs: int) -> None:
        """Schedule rematerialization / refinement for a visible entry that outgrew
        its threshold (caller holds the insert lock)."""
        geo = self.geo
        if (self.pruning and ns == NONE and size > self.pt and off in geo.next_base):
            self.dir.set_state(key, next_state=PENDING)
            self._schedule((key, off, 0))
        if self.refinement and rs == NONE and size > self.tau:
            if off in geo.mid_of or (off == geo.final_mid and geo.last is not None):
                self.dir.set_state(key, refine_state=PENDING)
                self._schedule((key, off, 1))

    # ------------------------------------------------------------------ back-fill
    def _schedule(self, job) -> None:
        self._c.add("jobs")
        self._c.add("jobs_expand" if job[2] == 0 else "jobs_refine")
        with self._jobs_ended_cv:
            self._jobs_booked += 1
        if self.opts["backfill"] == "sync":
            self._sync_jobs.append(job)
            return
        self._schedule_job(job)

    def _schedule_job(self, job) -> None:
        """Queue ``job`` for the background worker, starting it on first use."""
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="sarp-backfill", daemon=True)
            self._worker.start()
        self._jobs.put(job)

    def _job_ended(self) -> None:
        with self._jobs_ended_cv:
            self._jobs_ended += 1
            self._jobs_ended_cv.notify_all()

    def _run_sync_jobs(self) -> None:
        while self._sync_jobs:
            job = self._sync_jobs.pop(0)
            self._publish(job, self._compute(job))
            self._job_ended()

    def _run_jobs_unlocked(self, jobs: list) -> None:
        """The sync back-fill ``jobs`` a publish booked, in the same order as
        :meth:`_run_sync_jobs`, reading outside the insert lock and taking it only to
        publish each - as the background worker does, so another thread's insert
        need not wait behind these reads.  The caller counted this run in
        ``_jobs_running``; :meth:`drain` and snapshots wait for it to end."""
        try:
            while jobs:
                job = jobs.pop(0)
                epoch = self._reclaim_epoch
                result = self._compute(job)
                with self._timed_lock.guard():
                    self._publish_computed(job, result, epoch)
                    self._job_ended()
                    jobs.extend(self._sync_jobs)        # the jobs this publish booked
                    self._sync_jobs = []
        finally:
            with self._insert_lock:
                if jobs:                # (an error: whoever drains next runs the rest)
                    self._sync_jobs[:0] = jobs
                self._jobs_running -= 1
                self._jobs_idle.notify_all()

    def _publish_computed(self, job, result, epoch: int) -> None:
        """Publish ``result``, computed outside the lock at reclamation ``epoch``; a pass
        since then retired records it read, so it is read again (caller holds the
        insert lock)."""
        if epoch != self._reclaim_epoch:
            result = self._compute(job)
        self._publish(job, result)

    def _wait_jobs_idle(self) -> None:
        """Wait until no insert is running sync jobs outside the lock (caller holds
        the insert lock once)."""
        while self._jobs_running:
            self._jobs_idle.wait()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if job is _RECLAIM_JOB:
                    # (queued stays set until the pass is over: the tombstones removes
                    # add meanwhile count towards the next pass, which the first remove
                    # after this one starts if they are due - never a pass right behind
                    # this one that would find next to nothing to do)
                    try:
                        if self._worker_error is None:
                            self.reclaim()
                    finally:
                        self._reclaim_queued = False
                elif self._worker_error is None:
                    epoch = self._reclaim_epoch
                    result = self._compute(job)
                    with self._insert_lock:
                        self._publish_computed(job, result, epoch)
            except BaseException as e:  # surfaced by drain() / the next insert
                self._worker_error = e
            finally:
                if job is not None and job is not _RECLAIM_JOB:
                    self._job_ended()
                self._jobs.task_done()

    def _child_offset(self, off: int, which: int) -> int:
        geo = self.geo
        if which == 0:
            return geo.next_base[off]
        return geo.mid_of.get(off, geo.last)

    def _compute(self, job):
        """Read the parent's segments and build the child postings (no lock held)."""
        key, off, which = job
        child = self._child_offset(off, which)
        try:
            _f, segs = self.dir.postings(key)
        except KeyError:                # a reclamation retired every segment under it
            return (child, *_NO_POSTINGS)
        parts = []
        for lo in range(0, len(segs), 256):
            batch = segs[lo:lo + 256]
            with phases.phase(phases.BACKFILL):
                raws = self.layer.read_raw_many(batch)
            *got, unsound = self._child_postings(raws, batch, key, off, child, self.N,
                                                 self.stride, self.bits, self.S, self.meta_size)
            if unsound:
                self.layer.count_corrupt(batch[unsound])
            parts.append(got)
        if len(parts) > 1:
            parts = [tuple(np.concatenate(c) for c in zip(*parts))]
        keys, flts, sids = parts[0] if parts else _NO_POSTINGS
        self._c.add("backfill_reads", len(segs))
        self._c.add("backfill_postings", len(keys))
        return child, keys, flts, sids

    def _publish(self, job, result) -> None:
        """Make the job's entries visible at once (caller holds the insert lock)."""
        key, _off, which = job
        child, keys, flts, sids = result
        pend = self._pending_children.pop((key, which), set())
        flip = np.array(sorted(pend), dtype=np.uint64)
        self.dir.publish(keys, np.full(len(keys), child, np.uint32), flts, sids, flip, key,
                         which)
        for k in set(keys.tolist()) | pend:
            inf = self.dir.info(k)
            if inf is not None:
                o, size, _vis, ns, rs = inf      # published: visible
                self._maybe_trigger(k, o, size, ns, rs)

    def drain(self) -> None:
        """Wait until every scheduled back-fill job is published (tests, harness)."""
        if self.opts["backfill"] == "sync":
            with self._insert_lock:
                self._wait_jobs_idle()
                self._run_sync_jobs()
        elif self._worker is not None:
            self._jobs.join()
        self._check_worker()

    flush_background = drain

    def _check_worker(self) -> None:
        if self._worker_error is not None:
            e, self._worker_error = self._worker_error, None
            raise RuntimeError(f"sarp back-fill worker failed: {e!r}") from e

    # ------------------------------------------------------------------ reclamation
    def _after_remove(self) -> None:
        if not self.reclaim_after or self._closed or _recovery.REPLAYING.on:
            return                      # (a log replay ends where the pass can start)
        ov = self._overlay()
        if len(ov.dead) < self._dead_after_pass:
            self._dead_after_pass = len(ov.dead)        # a clear() emptied the table
        # a pass scans the whole store: start one when the tombstones added since the
        # last pass reach half of what that pass kept, so its cost is a few block
        # tests per block it can free
        due = max(self.reclaim_after, self._stored_after_pass // 2)
        if len(ov.dead) - self._dead_after_pass < due:
            return
        if self.opts["backfill"] == "sync":
            self.reclaim()
            return
        if self._reclaim_queued:
            return
        self._reclaim_queued = True
        self._schedule_job(_RECLAIM_JOB)

    def _cuts(self, lens, ids, alive_of, dedupe: bool = False):
        """For records of ``lens`` blocks whose ids are ``ids`` (concatenated):
        ``(keep, held, dup)`` - per record the blocks to keep (its length: no
        change; 0: delete), the removed block ids the kept parts still hold, and
        with ``dedupe`` which records go whole as duplicates (else None).  One
        vectorised pass over all of them."""
        alive = alive_of(ids)
        starts = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        pos = np.arange(len(ids), dtype=np.int64)
        last = np.maximum.reduceat(np.where(alive, pos, -1), starts)
        live_len = np.where(last >= starts, last - starts + 1, 0)
        tail = lens - live_len
        cut = (tail > 0) & ((live_len == 0) | (tail >= self.reclaim_fraction * lens))
        keep = np.where(cut, live_len, lens)
        inside = pos - np.repeat(starts, lens)
        dup = None
        if dedupe:
            dup = self._duplicates(lens, ids, keep, starts, inside)
            keep = np.where(dup, 0, keep)
        kept = inside < np.repeat(keep, lens)
        return keep, ids[kept & ~alive], dup

    @staticmethod
    def _duplicates(lens, ids, keep, starts, inside):
        """Records whose cut leaves a prefix another record keeps too (copies made
        on divergence share their first blocks; cutting their tails leaves many
        equal records): per record True when it can go whole.  The id at a
        position names the whole prefix before it (chained ids), so a cut record
        is a duplicate unless it is the top holder of its last kept id - the one
        keeping the most blocks, ties to the first - and the top holder of any id
        is never a duplicate of a record that keeps less."""
        rec = np.repeat(np.arange(len(lens)), lens)
        kept = inside < np.repeat(keep, lens)
        kid, krec = ids[kept], rec[kept]
        order = np.lexsort((krec, -keep[krec], kid))
        sk, sr = kid[order], krec[order]
        first = np.ones(len(sk), np.bool_)
        first[1:] = sk[1:] != sk[:-1]
        top_ids, top_rec = sk[first], sr[first]
        cand = np.flatnonzero((keep > 0) & (keep < lens))
        dup = np.zeros(len(lens), np.bool_)
        if len(cand):
            last = ids[starts[cand] + keep[cand] - 1]
            dup[cand] = top_rec[np.searchsorted(top_ids, last)] != cand
        return dup

    def reclaim(self) -> dict:
        """One reclamation pass in the calling thread (the background worker runs it
        when ``reclaim_after`` tombstones have accumulated); returns what it did.
        Matches run on throughout; inserts and removes wait only while a batch of
        rewrites is published."""
        ov = self._overlay()
        if ov.idle():
            return {}
        import time
        t0 = time.perf_counter()
        with self._reclaim_lock:
            before = dict(self._rc)
            with ov.lock, self._insert_lock:
                start_dead = ov.watch_start()
                self._extended_watch = set()
            held, cands = [], []
            ok = False
            stored = 0
            aging, still = self._aging, {}
            try:
                # phase 1, no lock: which records have a removed tail worth cutting
                for sids, raws, lens, ids in self._scan_records():
                    keep, h, dup = self._cuts(lens, ids, ov.alive, dedupe=True)
                    held.append(h)
                    stored += int(keep.sum())
                    self._rc["segments_scanned"] += len(sids)
                    young = []
                    for t in np.flatnonzero(keep < lens).tolist():
                        age = aging.get(sids[t], 0)
                        if age < self.reclaim_age:
                            still[sids[t]] = age + 1        # cut on a later pass
                            young.append(t)
                            continue
                        g = self.layer.decode(sids[t], raws[t])
                        if g is not None:
                            cands.append((g, bool(dup[t])))
                    if young:                   # kept whole this time: they hold theirs
                        stored += int((lens[young] - keep[young]).sum())
                        sel = np.zeros(len(lens), np.bool_)
                        sel[young] = True
                        yid = ids[np.repeat(sel, lens)]
                        held.append(yid[~ov.alive(yid)])
                # phase 2: publish the rewrites in batches, each checked again under the
                # locks against what inserts and removes did meanwhile
                for lo in range(0, len(cands), 256):
                    held.extend(self._retire(cands[lo:lo + 256], ov))
                if cands:
                    self.store.sync()       # the retired records are gone for good
                self._prune_journals()
                ok = True
            finally:
                with ov.lock:
                    if not ok:              # a failed pass drops no tombstone
                        start_dead = start_dead[:0]
                    allheld = np.concatenate(held) if held else np.empty(0, np.uint64)
                    self._rc["tombstones_dropped"] += ov.watch_stop(start_dead, allheld)
                    self._dead_after_pass = len(ov.dead)
                    self._extended_watch = None
                    self._stored_after_pass = stored
                    self._aging = still
            self._rc["passes"] += 1
            self._rc_seconds += time.perf_counter() - t0
            return {k: self._rc[k] - before[k] for k in self._rc}

    def _scan_records(self, chunk: int = 4096):
        """The store's sound, non-empty segment records in id order, ``chunk`` at a
        time: ``(ids, raws, block counts, block ids concatenated)`` (compiled
        checks, no per-record decoding)."""
        items = []
        for kv in self._scan(1, SEGMENT_KEY_LIMIT, chunk):
            items.append(kv)
            if len(items) >= chunk:
                yield self._records(items)
                items = []
        if items:
            yield self._records(items)

    def _records(self, items):
        sids = [k for k, _r in items]
        raws = [r for _k, r in items]
        lens, ids = self._record_ids(raws, np.array(sids, np.uint64), self.S, self.meta_size)
        ok = lens > 0
        if not ok.all():
            sel = np.flatnonzero(ok).tolist()
            sids, raws, lens = [sids[t] for t in sel], [raws[t] for t in sel], lens[ok]
        return sids, raws, lens, ids

    def _retire(self, cands, ov) -> list:
        """Rewrite or delete the segments of ``cands`` (``(segment as the scan read it,
        duplicate)``) whose removed tail (still) warrants it, under the overlay and
        insert locks; returns the removed ids the records it keeps still hold.
        Records an insert extended since the scan are read again; availability is
        tested afresh for all.  A duplicate goes whole only while its record and
        its blocks are as the scan saw them (no insert touched them since), so
        the record that keeps its prefix still does.

        Order (crash-safe at every step, and invisible to matches until they can no
        longer reach what goes): write the shortened copies under new ids with a
        journal record of the postings to retire, in one batch; register the
        copies; unroute the old records (one directory write lock); bump the
        overlay generation (a match spanning it retries); delete the old records.
        """
        held = []
        with ov.lock, self._insert_lock:
            grown = [g.seg_id for g, _d in cands if g.seg_id in self._extended_watch]
            if grown:
                fresh = {i: self.layer.decode(i, r)
                         for i, r in zip(grown, self.store.get_many(grown))}
                cands = [(fresh[g.seg_id], False) if g.seg_id in fresh else (g, d)
                         for g, d in cands]
                cands = [(g, d) for g, d in cands if g is not None and g.n]
            if not cands:
                return held
            segs = [g for g, _d in cands]
            lens = np.fromiter((g.n for g in segs), np.int64, len(segs))
            ids = np.concatenate([g.ids for g in segs])
            keep, h, _d = self._cuts(lens, ids, ov.alive)
            held.append(h)
            dup = np.fromiter((d for _g, d in cands), np.bool_, len(cands))
            if dup.any() and ov.watch:
                touched = _blockhash_table(np.concatenate(ov.watch))
                hit = touched.lookup(ids)[0]
                dup &= ~np.logical_or.reduceat(hit, np.cumsum(lens) - lens)
            keep = np.where(dup, 0, keep)
            news = []
            cut = keep < lens
            if not cut.any():
                return held
            gone_segs = [g for g, c in zip(segs, cut.tolist()) if c]
            kk = keep[cut]
            lens = np.fromiter((g.n for g in gone_segs), np.int64, len(gone_segs))
            old = [g.seg_id for g in gone_segs]
            # the (segment, routing key) of every routing point each retired record has
            point = np.zeros(self.S, np.bool_)
            point[self.geo.asc] = True
            ids = np.concatenate([g.ids for g in gone_segs])
            inside = np.arange(len(ids)) - np.repeat(np.cumsum(lens) - lens, lens)
            sel = point[inside]
            pr = np.stack([np.repeat(np.array(old, np.uint64), lens)[sel], ids[sel]], 1)
            for g, k in zip(gone_segs, kk.tolist()):
                if k:
                    news.append(Segment(self.layer.new_id(), g.start, g.ids[:k].copy(),
                                        g.metas[:k].copy()))
            reclaimed = int((lens - kk).sum())
            freed = int((lens - kk).sum()) * (8 + self.meta_size) + HEADER_SIZE * (len(old) - len(news))
            self._journal_seq += 1
            journal = [(_RECLAIM_BASE | self._journal_seq, pr.astype("<u8").tobytes())]
            if news:
                self.layer.write_many(news, journal)
            else:
                self.store.write_items(journal)
            phases.timed_call(phases.ROUTING, self._register_all, news)
            gone, dropped = self.dir.discard(pr[:, 1], pr[:, 0])
            ov.gen += 1
            self.store.write_items((), old)
            self._version += 1
            self._pub_log.append((self._version, None))
            self._reclaim_epoch += 1
            self._run_sync_jobs()
            rc = self._rc
            rc["segments_deleted"] += len(old) - len(news)
            rc["segments_rewritten"] += len(news)
            rc["blocks_reclaimed"] += reclaimed
            rc["postings_dropped"] += gone
            rc["entries_dropped"] += dropped
            rc["bytes_reclaimed"] += freed
        return held

    def _prune_journals(self) -> None:
        """Delete the journal records no recovery can need: those every retained
        snapshot covers; with no snapshot known, also every reclamation record (its
        pass has finished, and no snapshot predates it)."""
        with self._insert_lock:
            seq = self._journal_seq
            snap = min(self._snap_seqs) if self._snap_seqs else 0
            bounds = ((_RECLAIM_BASE, snap if self._snap_seqs else seq), (_JOURNAL_BASE, snap))
            dead = [k for base, upto in bounds if upto > 0
                    for k, _v in self._scan(base | 1, base | (upto + 1))]
            if dead:
                self.store.write_items((), dead)

    def _replay_reclaims(self, covered: int) -> int:
        """Recovery: retire the postings journalled by reclamations after sequence
        ``covered`` and delete the records they retired (a pass cut short by a crash
        finishes here); returns the last sequence seen."""
        last = covered
        pairs = []
        for k, raw in self._scan(_RECLAIM_BASE | (covered + 1), _RECLAIM_BASE + SEGMENT_KEY_LIMIT):
            pairs.append(np.frombuffer(raw, dtype="<u8"))
            last = k - _RECLAIM_BASE
        if pairs:
            pr = np.concatenate(pairs).astype(np.uint64).reshape(-1, 2)
            self.dir.discard(pr[:, 1], pr[:, 0])
            old = np.unique(pr[:, 0]).tolist()
            present = [i for i, r in zip(old, self.store.get_many(old)) if r is not None]
            if present:
                self.store.write_items((), present)
                self.store.sync()
        return last

    # ------------------------------------------------------------------ durability
    @property
    def _journal_seq(self) -> int:
        j = self._journal
        if j is None:
            j = 0
            for base in (_JOURNAL_BASE, _RECLAIM_BASE):
                top = max_key(self.store, base, base + SEGMENT_KEY_LIMIT)
                if top is not None:
                    j = max(j, top - base)
            self._journal = j
        return j

    @_journal_seq.setter
    def _journal_seq(self, value: int) -> None:
        self._journal = value

    rebuild_from_store = True
    layout_options = ("S", "R", "N", "b", "stride", "refinement", "pruning", "segment_tokens",
                      "interval_tokens", "block_tokens", "preset")
    _SECTIONS = ("keys", "offs", "visible", "next_state", "refine_state", "sizes", "filters",
                 "segs")

    def _quiesce(self) -> None:
        self.drain()

    def _snapshot_state(self):
        with self._insert_lock:
            self._wait_jobs_idle()
            self._run_sync_jobs()
            d = self.dir.dump()
            c = self._c.as_dict()
            self._snap_seqs.append(self._journal_seq)
            runs, slots = self.layer.run_state()
            meta = {**runs, "journal_seq": self._journal_seq,
                    "counters": c, "routing_entries": int(len(d["keys"]))}
        d["visible"] = d["visible"].astype(np.uint8)
        d["segs"] = d["segs"].astype(np.uint32)
        return meta, {**{k: d[k] for k in self._SECTIONS}, "run_slots": slots}

    def _restore_state(self, meta, sections):
        # first, before anything here writes: the id runs hold only if the store is
        # as the snapshot saw it
        self._runs_reopened = self.layer.restore_runs(meta, sections.get("run_slots"))
        self.dir.load(*(sections[k] for k in self._SECTIONS))
        self._snap_seqs.append(int(meta.get("journal_seq", 0)))
        self._c.restore(meta.get("counters", {}))

    def _reregister(self, records) -> int:
        """Register every decodable segment of ``records`` ((id, raw) pairs)."""
        n = 0
        self._last_seen = None
        with self._insert_lock:
            for sid, raw in records:
                self._last_seen = sid
                seg = self.layer.decode(sid, raw)
                if seg is not None and seg.seg_id == sid and seg.n and seg.start % self.S == 0:
                    self._register(seg)
                    self._version += 1
                    self._pub_log.append((self._version, None))
                    self._run_sync_jobs()
                    n += 1
        return n

    def _scan(self, lo: int, hi: int, chunk: int = 4096):
        """Ordered ``(key, raw)`` items of ``[lo, hi)``, each scan closed before the
        items are used (engines dislike reads under an open cursor)."""
        while lo < hi:
            it = self.store.scan(lo, hi)
            items = []
            try:
                for kv in it:
                    items.append(kv)
                    if len(items) >= chunk:
                        break
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
            yield from items
            if len(items) < chunk:
                return
            lo = items[-1][0] + 1

    def _catch_up(self, meta):
        first = int(meta["next_segment_id"])
        covered = int(meta["journal_seq"])
        later = self._reregister(self._scan(first, SEGMENT_KEY_LIMIT))
        # that scan ran to the end of the segment key space: it knows the next id
        self.layer.resume_at(max(first, (self._last_seen or 0) + 1))
        ext = []
        last_j = covered
        for k, raw in self._scan(_JOURNAL_BASE | (covered + 1), _JOURNAL_BASE + SEGMENT_KEY_LIMIT):
            ext.extend(np.frombuffer(raw, dtype="<u8").tolist())
            last_j = k - _JOURNAL_BASE
        with self._insert_lock:
            self._journal_seq = last_j
        ext = sorted({i for i in ext if i < first})
        journal = 0
        for lo in range(0, len(ext), 256):
            ids = ext[lo:lo + 256]
            journal += self._reregister(zip(ids, self.store.get_many(ids)))
        # after every registration: a retired record a crash left behind was
        # registered again above, and loses its postings here
        last_r = self._replay_reclaims(covered)
        with self._insert_lock:
            self._journal_seq = max(last_j, last_r)
        self.drain()
        return {"segments_rescanned": later, "segments_from_journal": journal,
                "id_runs_reopened": self._runs_reopened and not later}

    def _rebuild_from_store(self):
        n = self._reregister(self._scan(1, SEGMENT_KEY_LIMIT))
        self.layer.resume_at((self._last_seen or 0) + 1)
        self._replay_reclaims(0)
        self.drain()
        return {"segments_rescanned": n}

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict:
        c = self._c.as_dict()
        d = self.dir
        m = c["matches"] or 1
        uses = c["entry_uses"] or 1
        blocks = c["logical_blocks"]
        unique = blocks - c["copied_blocks"]
        mem = d.nbytes
        return {
            "entries": d.n_entries, "memory_bytes": mem, "postings": d.n_postings,
            "matches": c["matches"], "inserts": c["inserts"],
            "inserts_after_match": c["inserts_after_match"],
            "store_reads_per_match": c["match_reads"] / m,
            "retrievals_per_query": c["retrieved"] / m,
            "windows_per_match": c["match_windows"] / m,
            "candidates_before_filtering": c["cand_before"] / uses,
            "candidates_after_filtering": c["cand_after"] / uses,
            "candidates_retrieved": c["retrieved"] / uses,
            "extra_batches_per_match": c["extra_batches"] / m,
            "insert_reads_per_insert": c["insert_reads"] / (c["inserts"] or 1),
            # a serving system's inserts (a paper-scale load's bulk inserts follow no match)
            "insert_reads_per_insert_after_match":
                c["insert_reads_after_match"] / (c["inserts_after_match"] or 1),
            "insert_windows_reused_from_match": c["insert_windows_reused"],
            # whole windows a bulk load's known-prefix hint skipped
            "insert_windows_known": c["insert_windows_known"],
            "insert_segments_reused_from_match": c["insert_segments_reused"],
            "insert_records_reused_from_match": c["insert_records_reused"],
            "insert_replans": c["insert_replans"],
            "speculative_reads": c["speculative_reads"],
            "speculative_reads_wasted": c["speculative_wasted"],
            "round_trips_per_match": c["match_round_trips"] / m,
            "id_runs": self.id_runs, "ids_continued": self.layer.ids_continued,
            "id_runs_opened": self.layer.id_runs_opened,
            "geometry": self._geometry, "geometry_preset": self.preset,
            "geometry_S": self.S, "geometry_R": self.R,
            "geometry_interval": self.S // self.R,
            "segments": c["segments"], "segments_copied": c["segments_copied"],
            "segments_extended": c["segments_extended"],
            "logical_block_entries": blocks,
            "stored_block_entries": blocks - self._rc["blocks_reclaimed"],
            "unique_blocks": unique,
            "routing_entries_per_block": d.n_entries / unique if unique else 0.0,
            "memory_bytes_per_block": mem / unique if unique else 0.0,
            "routing_bytes": d.used_bytes,
            "routing_bytes_per_block": d.used_bytes / unique if unique else 0.0,
            "postings_per_segment": d.n_postings / c["segments"] if c["segments"] else 0.0,
            "backfill_jobs": c["jobs"], "rematerializations": c["jobs_expand"],
            "refinements": c["jobs_refine"], "backfill_reads": c["backfill_reads"],
            "backfill_postings": c["backfill_postings"],
            # windows a match routed past an entry a job had yet to publish, and the
            # matches that waited for the jobs (backfill_wait) and matched again
            "match_hidden_routes": c["match_hidden_routes"],
            "backfill_waits": c["backfill_waits"],
            "corrupt_segments": self.layer.corrupt_reads,
            "reclaim_passes": self._rc["passes"],
            "reclaim_seconds": self._rc_seconds,
            "reclaim_segments_deleted": self._rc["segments_deleted"],
            "reclaim_segments_rewritten": self._rc["segments_rewritten"],
            "reclaim_blocks": self._rc["blocks_reclaimed"],
            "reclaim_postings_dropped": self._rc["postings_dropped"],
            "reclaim_entries_dropped": self._rc["entries_dropped"],
            "reclaim_tombstones_dropped": self._rc["tombstones_dropped"],
            "reclaim_bytes": self._rc["bytes_reclaimed"],
        }

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._worker is not None:
                self._jobs.join()
                self._jobs.put(None)
                self._worker.join()
        super().close()


@hookimpl
def prefixbench_register_strategies(register):
    register("sarp", SarpStrategy)
