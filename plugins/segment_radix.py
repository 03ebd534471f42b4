"""``segment-radix`` and ``segment-radix-capped``: segments in the store plus an
exact radix tree over segments (the SARP paper's section 6.1 baselines).

Metadata lives in window-aligned segments managed by
:class:`prefixbench.plugins.segments.SegmentLayer` (up to ``S`` blocks of one
sequence starting at a multiple of ``S``; reused whole, extended in place,
copied only where two sequences diverge), exactly as SARP stores them.  What
differs is how a query finds them: an **exact in-memory radix tree whose edges
hold segment references instead of block IDs**.

Tree design (why it is exact without copying block IDs):

* No edge crosses a window boundary, so every node lies inside one window
  ``[kS, (k+1)S)``.  A node holds the first block ID of its edge (the key in
  its parent's child map), the **last** block ID of its edge, the edge's start
  depth and length, and the id of a segment that holds the path's blocks from
  the window start through the edge's end.
* Chained block IDs name a whole prefix, so a query whose ID at the edge's
  last position equals the stored last ID matches the whole edge; no other
  block ID of the edge is needed in memory.  The walk therefore finds, in
  memory, every fully matched edge and at most one partly matched edge.
* Per window the deepest reached node names one segment; all of them are read
  with one ``get_many`` (one logical read per window of the match) and every
  reused block is verified against the query (``common_prefix``).  The
  verification also finds the exact divergence inside a partly matched edge,
  so the answer equals the radix oracle's, block for block, metadata included
  (metadata comes from the segments, which keep each block's first record).

Insertion walks the same way, reads the segment of the window where the new
sequence diverges, lets the layer extend it in place or copy its shared
prefix (``extend_or_copy``), writes fresh segments for the following windows,
and then splits one edge (if the divergence is inside an edge) and adds one
node per new window (a leaf extended in place just grows its edge).

**Capped variant** (``cap_nodes=N``; registered as ``segment-radix-capped``
with a default budget): at most ``N`` nodes stay in memory (least recently
used first out, the root pinned); the others are **spilled** to the engine
under key space 2 (``(2 << 56) | node id``) and read back on demand, one
logical store read per spilled node the walk visits.  Evictions happen at the
end of each operation, dirty nodes written in one batch, so a node in use is
never evicted under the walk.  Spilling moves data, never drops it: the capped
tree answers exactly like the uncapped one.  ``cap_fraction=f`` (0 < f <= 1)
sets the budget as a share of the tree instead, applied as it grows:
``max(1, ceil(f * nodes so far))``; it overrides ``cap_nodes``, and 0 (the
default) leaves ``cap_nodes`` in charge.  A snapshot holds the resident nodes
only and recovery reads spilled ones on demand, so recovery time follows the
budget (the design is under "durability" below).

``memory_bytes`` is the size of this design's compact node layout (per
resident node a 40-byte record - first, last, segment id, start, length,
LRU/dirty - and per child entry held by a resident node, the root's included,
a 32-byte child-table slot at load 1/2), i.e. what a compiled tree of this
design allocates; the Python objects used here are larger.  The root stays in
memory (it is on every walk); ``cap_nodes`` counts the nodes below it.

The tree is Python (one dict lookup per node, about one node per window of a
match); every per-block step is NumPy or the layer's compiled
``common_prefix``.  One lock serialises tree walks and updates; segment reads
of a match happen outside it (segments only ever grow, so a concurrent
extension cannot invalidate a planned read).

Removal and workers: the tombstone and location tables of
:mod:`prefixbench.plugins.removal`, for both variants (the tree and the
segments are never rewritten by a remove; ``max_workers = 64``; a remove
costs 5-25 us per call here).  The insert log carries the removes too.
"""
from __future__ import annotations

import math
import struct
import threading
import zlib
from collections import OrderedDict

import numpy as np

from prefixbench import phases
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.plugins.segments import SegmentLayer, common_prefix
from prefixbench.plugins.strategy import (
    IndexStrategy,
    META_SIZE,
    Match,
    Option,
    as_block_ids,
    as_metas,
)
from prefixbench.plugins.removal import TombstoneOverlay

__all__ = ["SegmentRadixStrategy", "CappedSegmentRadixStrategy", "SPILL_KEY_SPACE"]

#: key space of spilled tree nodes: key = (2 << 56) | node id
SPILL_KEY_SPACE = 2
_SPILL_BASE = SPILL_KEY_SPACE << 56
_ID_LIMIT = 1 << 56

#: modeled bytes: a 40-byte record per resident node, a 32-byte slot per child entry
NODE_BYTES = 40
SLOT_BYTES = 32

# spilled node record: version, first, last, seg, start, length, n_kids, then
# n_kids (first id, node id) u64 pairs, then crc32 of everything before it
_NODE_HEAD = struct.Struct("<BQQQQII")
_NODE_VERSION = 1
_CRC = struct.Struct("<I")
# key (2 << 56) | 0 (the root is never spilled): the highest node id handed out
# when the batch was written, then its crc32
_HIGH = struct.Struct("<Q")


class _Node:
    """One edge of the tree; ``kids`` maps a child's first block ID to its node id.

    ``dirty``: differs from its spill record (or has none); ``durable``: a spill
    record of it exists, so a record may name it.  Not durable implies dirty
    and resident."""

    __slots__ = ("first", "last", "seg", "start", "length", "kids", "dirty", "durable")

    def __init__(self, first: int, last: int, seg: int, start: int, length: int, kids=None):
        self.first = first
        self.last = last
        self.seg = seg
        self.start = start
        self.length = length
        self.kids = kids
        self.dirty = True
        self.durable = False


def _encode_node(node: _Node) -> bytes:
    kids = node.kids or {}
    pairs = np.fromiter((v for kv in kids.items() for v in kv), dtype=np.uint64,
                        count=2 * len(kids))
    body = _NODE_HEAD.pack(_NODE_VERSION, node.first, node.last, node.seg, node.start,
                           node.length, len(kids)) + pairs.tobytes()
    return body + _CRC.pack(zlib.crc32(body))


def _decode_node(raw: bytes) -> _Node | None:
    """The node, or None if the record is truncated, of another version or fails its CRC."""
    hs = _NODE_HEAD.size
    if len(raw) < hs + _CRC.size:
        return None
    (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
    if zlib.crc32(memoryview(raw)[:-_CRC.size]) != crc:
        return None
    version, first, last, seg, start, length, nk = _NODE_HEAD.unpack_from(raw)
    if version != _NODE_VERSION or len(raw) != hs + 16 * nk + _CRC.size:
        return None
    pairs = np.frombuffer(raw, dtype=np.uint64, count=2 * nk, offset=hs).tolist()
    kids = dict(zip(pairs[0::2], pairs[1::2])) if nk else None
    node = _Node(first, last, seg, start, length, kids)
    node.dirty = False
    node.durable = True
    return node


def _encode_high_water(last_id: int) -> bytes:
    body = _HIGH.pack(last_id)
    return body + _CRC.pack(zlib.crc32(body))


def _decode_high_water(raw: bytes) -> int | None:
    if len(raw) != _HIGH.size + _CRC.size:
        return None
    if zlib.crc32(raw[:_HIGH.size]) != _CRC.unpack_from(raw, _HIGH.size)[0]:
        return None
    return _HIGH.unpack_from(raw)[0]


class _NodeTable:
    """Node id -> node; with a budget, least recently used nodes spill to the store."""

    def __init__(self, store, cap: int, fraction: float = 0.0):
        self.store = store
        self.cap = cap                      # 0: everything stays in memory
        self.fraction = fraction            # > 0: the budget is this share of count
        self.capped = bool(cap or fraction)
        self.root = _Node(0, 0, 0, 0, 0)
        self.resident: OrderedDict[int, _Node] = OrderedDict()
        self.count = 0                      # nodes below the root
        self.last_id = 0                    # highest id handed out (>= count after a crash)
        self.spill_reads = 0
        self.spill_writes = 0
        self.corrupt = 0

    def budget(self) -> int:
        """Resident nodes allowed now (0: no cap)."""
        if self.fraction:
            return max(1, math.ceil(self.fraction * self.count))
        return self.cap

    def add(self, node: _Node) -> int:
        self.count += 1
        self.last_id += 1
        nid = self.last_id
        if nid >= _ID_LIMIT:
            raise OverflowError("segment-radix: more than 2**56 tree nodes")
        self.resident[nid] = node
        return nid

    def get(self, nid: int) -> _Node | None:
        node = self.resident.get(nid)
        if node is not None:
            if self.capped:
                self.resident.move_to_end(nid)
            return node
        self.spill_reads += 1
        if phases._ON:
            with phases.phase(phases.SPILL):
                raw = self.store.get(_SPILL_BASE | nid)
        else:
            raw = self.store.get(_SPILL_BASE | nid)
        node = None if raw is None else _decode_node(raw)
        if node is None:
            self.corrupt += 1
            return None
        self.resident[nid] = node
        return node

    def _emit(self, nid: int, node: _Node, puts: list) -> None:
        """Append ``node``'s record to ``puts`` after those of every resident child
        that has none yet: a record never names a node without one."""
        stack = [(nid, node, False)]
        while stack:
            i, n, ready = stack.pop()
            if not n.dirty:
                continue
            if not ready:
                stack.append((i, n, True))
                for cid in (n.kids or {}).values():
                    c = self.resident.get(cid)
                    if c is not None and not c.durable:
                        stack.append((cid, c, False))
                continue
            puts.append((_SPILL_BASE | i, _encode_node(n)))
            n.dirty = False
            n.durable = True

    def trim(self) -> None:
        """Spill least recently used nodes until the budget holds (one write batch,
        which also records the highest node id so far)."""
        cap = self.budget()
        if not cap or len(self.resident) <= cap:
            return
        puts: list = []
        while len(self.resident) > cap:
            nid, node = self.resident.popitem(last=False)
            if node.dirty:
                self._emit(nid, node, puts)
        if puts:
            puts.append((_SPILL_BASE, _encode_high_water(self.last_id)))
            if phases._ON:
                with phases.phase(phases.SPILL):
                    self.store.write_items(puts)
            else:
                self.store.write_items(puts)
            self.spill_writes += len(puts) - 1

    def stored_high_water(self) -> int:
        """The highest node id any earlier run handed out and may have named in a
        spill record: the batch-written high-water record, or (if that is
        unreadable) the highest spilled node's key."""
        raw = self.store.get(_SPILL_BASE)
        if raw is None:
            return 0                        # no spill batch was ever written
        hw = _decode_high_water(raw)
        if hw is not None:
            return hw
        hw = 0
        for key, _v in self.store.scan(_SPILL_BASE + 1, _SPILL_BASE + _ID_LIMIT):
            hw = max(hw, key - _SPILL_BASE)
        return hw

    @property
    def spilled(self) -> int:
        return max(0, self.count - len(self.resident))


class SegmentRadixStrategy(TombstoneOverlay):
    """Segments in the store plus an exact in-memory radix tree over segments."""

    name = "segment-radix"
    needs_store = True
    gil_free_parts = ("segment encode, decode and verification",)
    exact = True
    options = {
        "S": Option(64, "blocks per segment (windows aligned at multiples of S)", min=1, max=4096),
        "cap_nodes": Option(0, "tree nodes kept in memory; the rest spill to the engine "
                            "(0: no cap)", min=0, max=1 << 40),
        "id_runs": Option(64, "a new segment takes the id right after the segment of the "
                          "previous window, in runs of this many ids, so one engine block "
                          "holds several windows of a sequence (0 = ids in write order)",
                          min=0, max=255, beyond_paper=True),
    }

    def __init__(self, store=None, options=None, meta_size: int = META_SIZE):
        super().__init__(store, options, meta_size)
        if not isinstance(meta_size, int) or meta_size < 1:
            raise ConfigError(f"option meta_size: {meta_size!r} must be an integer >= 1")
        self.S = self.opts["S"]
        self.layer = SegmentLayer(store, segment_blocks=self.S, meta_size=meta_size)
        self.id_runs = self.opts["id_runs"] if self.opts["id_runs"] > 1 else 0
        fraction = float(self.opts.get("cap_fraction", 0.0))
        if not math.isfinite(fraction):
            raise ConfigError(f"option cap_fraction: {fraction!r} must be a number in (0, 1]")
        self._nodes = _NodeTable(store, self.opts["cap_nodes"], fraction)
        self._deserialized = 0
        self._lock = threading.Lock()
        self._entries = 0
        self._segments = 0
        self._segment_blocks = 0          # block records written into segments
        self._matches = 0
        self._match_reads = 0             # segment reads + spill reads during matches
        self._match_spill_reads = 0
        self._corrupt_segments = 0

    # ------------------------------------------------------------------ walk
    def _walk(self, q: np.ndarray, n: int):
        """In-memory descent: ``(plan, parent, partial)``.

        ``plan`` lists per reached window ``[window start, end to verify, seg id]``
        (the deepest node's segment); ``parent`` is the deepest fully matched node
        (the root if none); ``partial`` the node whose edge the query enters but
        may leave early (its last ID did not confirm it), or None.
        """
        S = self.S
        get = self._nodes.get
        node, d = self._nodes.root, 0
        plan: list = []
        while d < n and node.kids:
            cid = node.kids.get(int(q[d]))
            if cid is None:
                break
            child = get(cid)
            if child is None:                       # unreadable spilled node: a miss
                break
            end = child.start + child.length
            ws = d - d % S
            hi = min(end, n)
            if plan and plan[-1][0] == ws:
                plan[-1][1], plan[-1][2] = hi, child.seg
            else:
                plan.append([ws, hi, child.seg])
            if end <= n and int(q[end - 1]) == child.last:
                node, d = child, end
                continue
            return plan, node, child
        return plan, node, None

    @staticmethod
    def _verify(q: np.ndarray, plan: list, segs: list) -> tuple[int, list, int]:
        """Blocks verified against the segments, their metadata parts, and 1 if an
        unreadable (missing or corrupt) segment cut the match short."""
        matched, metas = 0, []
        for (ws, hi, _sid), seg in zip(plan, segs):
            if seg is None or seg.start != ws:
                return matched, metas, 1
            want = hi - ws
            c = common_prefix(seg.ids[:want], q[ws:hi])
            if c:
                metas.append(seg.metas[:c])
            matched = ws + c
            if c < want:
                break
        return matched, metas, 0

    # ------------------------------------------------------------------ match
    def match(self, block_ids: np.ndarray) -> Match:
        q = as_block_ids(block_ids)
        n = len(q)
        with self._lock:
            spill0 = self._nodes.spill_reads
            plan, _parent, _partial = self._walk(q, n) if n else ([], None, None)
            self._nodes.trim()
            spill = self._nodes.spill_reads - spill0
        segs = self.layer.read_many([p[2] for p in plan]) if plan else []
        matched, metas, corrupt = self._verify(q, plan, segs)
        with self._lock:
            self._corrupt_segments += corrupt
            self._matches += 1
            self._match_reads += len(plan) + spill
            self._match_spill_reads += spill
        if not matched:
            return Match.empty(self.meta_size)
        return Match(matched, np.concatenate(metas) if len(metas) > 1 else metas[0])

    # ------------------------------------------------------------------ insert
    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None:
        q = as_block_ids(block_ids)
        n, S = len(q), self.S
        m = as_metas(metas, n, self.meta_size)
        if n == 0:
            return
        with self._lock:
            try:
                self._insert(q, m, n, S)
            finally:
                self._nodes.trim()

    def _insert(self, q: np.ndarray, m: np.ndarray, n: int, S: int) -> None:
        plan, parent, partial = self._walk(q, n)
        seg = None
        if partial is None:
            d = parent.start + parent.length
            if d == n:
                return                              # everything is indexed already
            if d % S:                               # diverges inside the parent's window
                seg = self.layer.read(parent.seg)
                if seg is None:
                    self._corrupt_segments += 1
                    return                          # keep what is stored; index nothing new
        else:
            ws = partial.start - partial.start % S
            seg = self.layer.read(partial.seg)
            if seg is None or seg.start != ws:
                self._corrupt_segments += 1
                return
            end = partial.start + partial.length
            hi = min(end, n)
            c = common_prefix(seg.ids[partial.start - ws:hi - ws], q[partial.start:hi])
            d = partial.start + c
            if d == n:
                return                              # the sequence ends inside an edge
            if c == 0:                              # first ID matched but the segment disagrees
                self._corrupt_segments += 1
                return
            if d == end:                            # last-ID collision: the edge did match
                parent, partial = partial, None
        ws = d - d % S
        we = min(ws + S, n)
        writes = []
        now = not self.id_runs                      # ids now, else placed below
        if d > ws:
            first_seg, is_new = self.layer.extend_or_copy(seg, q[ws:we], m[ws:we], d - ws,
                                                          assign_id=now)
        else:
            first_seg, is_new = self.layer.new_segment(ws, q[ws:we], m[ws:we], now), True
        writes.append(first_seg)
        for s in range(we, n, S):
            e = min(s + S, n)
            writes.append(self.layer.new_segment(s, q[s:e], m[s:e], now))
        if not now:
            self._place_ids(writes, is_new, plan, ws)
        self.layer.write_many(writes)
        self._segments += len(writes) - (0 if is_new else 1)
        self._segment_blocks += int(sum(len(w.ids) for w in writes)) - (0 if is_new else d - ws)
        self._entries += n - d

        # ---- tree update (the segments are durable first) ----
        nodes = self._nodes
        if partial is not None:                     # split the edge at d
            old_first = int(seg.ids[d - ws])
            lower = _Node(old_first, partial.last, partial.seg, d,
                          partial.start + partial.length - d, partial.kids)
            lid = nodes.add(lower)
            partial.length = d - partial.start
            partial.last = int(q[d - 1])
            partial.kids = {old_first: lid}
            partial.dirty = True
            parent = partial
        grow = (not is_new and parent is not nodes.root and not parent.kids
                and parent.seg == first_seg.seg_id and parent.start >= ws)
        if grow:                                    # a leaf extended in place: longer edge
            parent.length = we - parent.start
            parent.last = int(q[we - 1])
            parent.dirty = True
        else:
            parent = self._attach(parent, _Node(int(q[d]), int(q[we - 1]), first_seg.seg_id,
                                                d, we - d))
        for w in writes[1:]:
            e = w.start + len(w.ids)
            parent = self._attach(parent, _Node(int(q[w.start]), int(q[e - 1]), w.seg_id,
                                                w.start, e - w.start))

    def _place_ids(self, writes: list, is_new: bool, plan: list, ws: int) -> None:
        """Ids for the new segments of one insert, each right after the segment of its
        sequence's previous window where its run allows (:meth:`SegmentLayer.new_ids_after`):
        the first new one follows the window before ``ws`` the walk reached (or the
        segment extended in place), each later one the new one before it.  Recovery
        replays the insert log, so ids need not keep write order."""
        fresh = writes if is_new else writes[1:]
        if not fresh:
            return
        if is_new:
            prev = next((sid for w, _hi, sid in plan if w == ws - self.S), 0) if ws else 0
        else:
            prev = writes[0].seg_id
        after = [prev] + [-(j + 1) for j in range(len(fresh) - 1)]
        ids, _continued = self.layer.new_ids_after(after, self.id_runs)
        for w, i in zip(fresh, ids):
            w.seg_id = i

    def _attach(self, parent: _Node, child: _Node) -> _Node:
        cid = self._nodes.add(child)
        if parent.kids is None:
            parent.kids = {}
        parent.kids[child.first] = cid
        parent.dirty = True
        return child

    # ------------------------------------------------------------------ durability
    # The snapshot holds the RESIDENT nodes only - one row per node (id, first,
    # last, segment, start, length, flags: 1 dirty, 2 durable) in LRU order and
    # one per child link of the root and of each resident node (parent id, first
    # id, child id) - plus the
    # counters; a spilled node stays in the spill space and is read on demand
    # after recovery as in normal operation, so recovery work is proportional
    # to the in-memory part (the whole tree when uncapped).
    #
    # Why a spill space that keeps changing after the snapshot never makes the
    # recovered tree wrong:
    #
    # * every node the snapshot does not hold has a spill record (evicting a
    #   dirty node writes it), and the snapshot syncs the engine before it is
    #   published;
    # * a spill record is only ever replaced by a state of the same node at
    #   least as new as the one any usable snapshot saw (a recovered instance
    #   descends from the snapshot it loaded), and a newer state covers
    #   everything an older one reached: a node keeps its first block and start
    #   depth forever, a split moves the lower part of its edge and its
    #   children into a new node it names, a leaf only grows, children are only
    #   added;
    # * a record never names a node without a record: the batch that writes a
    #   node first writes each resident child that has none (batches are
    #   atomic), so a crash cannot leave a dangling child id;
    # * node ids are never reused: each batch also writes the highest id handed
    #   out (key ``(2 << 56) | 0``), and recovery allocates beyond it.
    #
    # So whatever mix of snapshot-time and later node states recovery finds,
    # every sequence the snapshot covered is reachable, and every reachable
    # block was inserted (and is verified against the segments anyway); the
    # inserts acknowledged after the snapshot's log position are replayed from
    # the insert log (enable_log: a segment does not record which segment
    # precedes it, so the tree cannot be rebuilt from the store), and replayed
    # inserts that find their blocks already reachable change nothing.  The
    # same holds for the previous generation (a corrupt newest snapshot).
    # After a crash the counters (entries, nodes) may undercount blocks that
    # later spill records already held.
    uses_insert_log = True
    layout_options = ("S",)

    def _snapshot_state(self):
        nodes = self._nodes
        with self._lock:
            res = list(nodes.resident.items())          # LRU order, least recent first
            rows = np.array([(nid, n.first, n.last, n.seg, n.start, n.length,
                              n.dirty | n.durable << 1) for nid, n in res],
                            dtype=np.uint64).reshape(-1, 7)
            edges = np.array([(pid, f, c) for pid, n in [(0, nodes.root)] + res if n.kids
                              for f, c in n.kids.items()], dtype=np.uint64).reshape(-1, 3)
            meta = {"count": nodes.count, "last_id": nodes.last_id, "entries": self._entries,
                    "segments": self._segments, "segment_blocks": self._segment_blocks,
                    "spill_reads": nodes.spill_reads, "spill_writes": nodes.spill_writes}
            if nodes.capped and self.store is not None:
                self.store.sync()                       # the records the snapshot relies on
            runs, slots = self.layer.run_state()
        return {**meta, **runs}, {"nodes": rows, "edges": edges, "run_slots": slots}

    def _restore_state(self, meta, sections):
        # first, before trimming the tree spills a node: the id runs hold only if the
        # store is as the snapshot saw it
        self._runs_reopened = self.layer.restore_runs(meta, sections.get("run_slots"))
        rows, edges = sections["nodes"], sections["edges"]
        if rows.ndim != 2 or rows.shape[1] not in (6, 7) or edges.ndim != 2 \
                or edges.shape[1] != 3:
            raise ValueError("node or edge table of the wrong shape")
        nodes = self._nodes
        table = {0: nodes.root}
        for row in rows.tolist():
            nid, first, last, seg, start, length = row[:6]
            n = _Node(first, last, seg, start, length)
            if len(row) == 7:
                # as at the snapshot: a clean node's spill record held its state then
                # (the snapshot synced the engine), and a later record of it is only
                # newer, so leaving it unwritten loses nothing; without the flags
                # (older snapshots) every node is dirty and rewritten when spilled
                n.dirty, n.durable = bool(row[6] & 1), bool(row[6] & 2)
            table[nid] = n
            nodes.resident[nid] = n
        for pid, first, cid in edges.tolist():
            p = table[pid]
            if p.kids is None:
                p.kids = {}
            p.kids[first] = cid
        nodes.count = int(meta["count"])
        nodes.last_id = max(int(meta.get("last_id", nodes.count)), nodes.stored_high_water())
        self._entries = int(meta["entries"])
        self._segments = int(meta["segments"])
        self._segment_blocks = int(meta["segment_blocks"])
        nodes.spill_reads = int(meta.get("spill_reads", 0))
        nodes.spill_writes = int(meta.get("spill_writes", 0))
        self._deserialized = len(rows)
        nodes.trim()

    def _catch_up(self, meta: dict) -> dict:
        return {"nodes_deserialized": self._deserialized, "id_runs_reopened": self._runs_reopened}

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict:
        nodes = self._nodes
        with self._lock:
            resident = len(nodes.resident)
            slots = len(nodes.root.kids or ()) + sum(
                len(x.kids) for x in nodes.resident.values() if x.kids)
        mt = self._matches
        return {
            "entries": self._entries,
            "memory_bytes": (resident + 1) * NODE_BYTES + slots * SLOT_BYTES,
            "nodes": nodes.count,
            "memory_nodes": resident,
            "cap_fraction": nodes.fraction,
            "cap_nodes_effective": nodes.budget(),
            "spilled_nodes": nodes.spilled,
            "spill_reads": nodes.spill_reads,
            "spill_writes": nodes.spill_writes,
            "corrupt_nodes": nodes.corrupt,
            "segments": self._segments,
            "segment_block_entries": self._segment_blocks,
            "stored_block_entries": self._segment_blocks,
            "corrupt_segments": self._corrupt_segments,
            "matches": mt,
            "store_reads_per_match": self._match_reads / mt if mt else 0.0,
            "spill_reads_per_match": self._match_spill_reads / mt if mt else 0.0,
            "id_runs": self.id_runs, "ids_continued": self.layer.ids_continued,
            "id_runs_opened": self.layer.id_runs_opened,
        }


class CappedSegmentRadixStrategy(SegmentRadixStrategy):
    """Segment-radix whose in-memory tree nodes are capped; the rest spill to the engine."""

    name = "segment-radix-capped"
    options = {
        "S": SegmentRadixStrategy.options["S"],
        "cap_nodes": Option(1024, "tree nodes kept in memory (about 72 KiB); the rest spill "
                            "to the engine", min=1, max=1 << 40),
        "cap_fraction": Option(0.0, "in-memory budget as a fraction of the tree's nodes, "
                               "max(1, ceil(f * nodes)) as it grows; overrides cap_nodes "
                               "(0: cap_nodes applies)", min=0.0, max=1.0),
        "id_runs": SegmentRadixStrategy.options["id_runs"],
    }


@hookimpl
def prefixbench_register_strategies(register):
    register("segment-radix", SegmentRadixStrategy)
    register("segment-radix-capped", CappedSegmentRadixStrategy)
