"""KV-event streams as vLLM and SGLang publish them, and their capture files.

**Wire format.**  An engine publishes ZMQ multipart messages ``[topic, seq,
payload]``: ``seq`` an 8-byte big-endian counter, ``payload`` one msgpack
``EventBatch``.  Two encodings are accepted, per batch and per event:

* tagged maps (vLLM >= 0.10's msgspec structs without ``array_like``):
  ``{"ts": float, "events": [...], "data_parallel_rank": int|None}``, each
  event ``{"type": "BlockStored", "block_hashes", "parent_block_hash",
  "token_ids", "block_size", "lora_id", "medium", "lora_name",
  "extra_keys", ...}``, ``{"type": "BlockRemoved", "block_hashes",
  "medium"}`` or ``{"type": "AllBlocksCleared"}``; unknown keys are ignored;
* positional arrays (vLLM's older ``array_like=True`` structs; SGLang 0.5.23
  still sends its batch as ``[ts, events, attn_dp_rank]`` around tagged-map
  events): ``[ts, [events], data_parallel_rank?]``, each event ``[tag, field,
  ...]`` (``["BlockStored", block_hashes, parent, token_ids, block_size,
  lora_id, medium?, cache_salt?, session_id?, lora_name?]``, SGLang's order
  after ``medium``); trailing defaulted fields may be missing.

Block hashes are unsigned 64-bit ints (vLLM with
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``), signed int64 (SGLang; the same 64
bits are kept unsigned) or bytes digests (vLLM's default; the 64-bit id is the
digest read big-endian masked to 64 bits, as ``maybe_convert_block_hash``
does, and the digest is kept for the hash conformance check).  A batch's
``data_parallel_rank`` (None or absent: 0) is the worker.

**Capture files** (written by ``prefixbench events record``): the 8 bytes
``PBKVCAP1`` then a msgpack stream: one header map (``format``,
``version``, ``endpoint``, ``topic``, ``started``), then one array per frame
``[seq, recv_ns, topic, payload, source]`` (``source`` 0 live, 1 fetched
from the replay endpoint), optionally one closing map (``frames``, ``gaps``,
``missing``).  Frames are in sequence order.  A file without the magic is
read as a plain concatenation of msgpack ``EventBatch`` payloads (frame
numbers then count payloads, and there is no sequence to check).

**Reading** is strict about structure (a truncated frame, a non-map event, a
wrong field type: one :class:`TraceFormatError` line naming the file and
frame, and the event within it) and lenient about content: an unknown event
type is counted and skipped (an error with ``strict``), a sequence gap or
duplicate is counted (duplicates are skipped), a parent never seen starts its
chain there (counted by :class:`ChainMemory`).

**Fast path.**  :func:`iter_decoded` gives each frame as arrays (the batch
tuple of :mod:`prefixbench.workloads._kvevents_ref`), parsed from the capture
payload's msgpack bytes by the compiled twin
(:mod:`prefixbench.workloads._kvevents`), which hands any payload off its
fast path to the reference so the answer and the error line are the same;
``prefixbench events replay`` and ``bench`` read captures this way.

**The workload** ``kv-events`` (``-W path=FILE``) yields the store, remove and
clear operations (:mod:`prefixbench.workloads.model`); ``prefixbench events
replay`` applies them to an index.  Its ``requests()`` is the closed-loop
view for ``prefixbench run``: one request per BlockStored (match the
ancestors, insert the whole chain), removes and clears left out.
"""
from __future__ import annotations

from collections import OrderedDict
from itertools import repeat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from prefixbench import twins
from prefixbench.errors import ConfigError, MissingDependencyError, TraceFormatError
from prefixbench.hookspecs import hookimpl
from prefixbench.units import int_in_range
from prefixbench.workloads.model import ClearOp, RemoveOp, Request, StoreOp, Workload

MAGIC = b"PBKVCAP1"
FORMAT = "prefixbench-kv-capture"
VERSION = 1
MASK64 = (1 << 64) - 1
U32 = 0xFFFFFFFF
EVENT_TYPES = ("BlockStored", "BlockRemoved", "AllBlocksCleared")
DEFAULT_PARENT_MEMORY = 1 << 20

#: the batch decoder and apply loop: compiled, or the reference with PREFIXBENCH_PURE=1
_kv = twins.load("prefixbench.workloads._kvevents")


def msgpack_module():
    try:
        import msgpack
    except ImportError:
        raise MissingDependencyError("KV events need the 'msgpack' package: "
                                     "pip install 'prefixbench[events]'") from None
    return msgpack


@dataclass
class DecodeStats:
    """What reading a stream found besides the operations."""

    frames: int = 0
    batches: int = 0
    events: int = 0
    stores: int = 0
    removes: int = 0
    clears: int = 0
    blocks_stored: int = 0
    blocks_removed: int = 0
    unknown_types: dict = field(default_factory=dict)
    seq_gaps: int = 0
    seq_missing: int = 0
    seq_duplicates: int = 0
    replayed_frames: int = 0

    @property
    def unknown_events(self) -> int:
        return sum(self.unknown_types.values())


def _ids(values, where, what: str):
    """A list of published hashes as (uint64 array, bytes digests or None); ``where``
    is formatted only for an error."""
    if type(values) is not list:
        raise TraceFormatError(f"{where}: '{what}' must be a list, got {type(values).__name__}")
    if not values:
        return np.empty(0, dtype=np.uint64), None
    try:
        a = np.array(values)
    except (OverflowError, TypeError, ValueError):
        a = None
    if a is not None and a.ndim == 1:
        if a.dtype == np.int64:               # signed int64 (SGLang): the same 64 bits
            return a.view(np.uint64), None
        if a.dtype == np.uint64:
            return a, None
    out = np.empty(len(values), dtype=np.uint64)
    raw = None
    for i, v in enumerate(values):
        if type(v) is int and -(1 << 63) <= v <= MASK64:
            out[i] = v & MASK64
        elif isinstance(v, bytes):
            if raw is None:
                raw = [None] * len(values)
            raw[i] = v
            out[i] = int.from_bytes(v, "big") & MASK64
        else:
            raise TraceFormatError(f"{where}: {what}[{i}] is {v!r}, not a 64-bit integer or bytes")
    return out, raw


def _parent(v, where):
    if v is None:
        return None, None
    if type(v) is int and -(1 << 63) <= v <= MASK64:
        return v & MASK64, None
    if isinstance(v, bytes):
        return int.from_bytes(v, "big") & MASK64, v
    raise TraceFormatError(f"{where}: parent_block_hash is {v!r}, not a 64-bit integer, "
                           "bytes or nil")


class _At:
    """``FILE: frame N event K``, formatted only when an error names it."""

    __slots__ = ("where", "k")

    def __init__(self, where: str, k: int):
        self.where, self.k = where, k

    def __str__(self) -> str:
        return f"{self.where} event {self.k}"

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


def _tokens(v, where: str):
    """``token_ids`` as u32 (checked when the hash check needs them, not at decode)."""
    if v is None:
        return None
    if not isinstance(v, list):
        raise TraceFormatError(f"{where}: 'token_ids' must be a list, got {type(v).__name__}")
    try:
        a = np.array(v, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        j = next((j for j, x in enumerate(v) if type(x) is not int or not 0 <= x <= U32), 0)
        raise TraceFormatError(f"{where}: token_ids[{j}] = {v[j]!r} is not a u32 token id") from None
    if a.ndim != 1:
        raise TraceFormatError(f"{where}: 'token_ids' must be a flat list of integers")
    if a.size and (a.min() < 0 or a.max() > U32):
        j = int(np.nonzero((a < 0) | (a > U32))[0][0])
        raise TraceFormatError(f"{where}: token_ids[{j}] = {v[j]} is outside the u32 range")
    return a.astype(np.uint32)


# positional fields after ``medium`` follow SGLang (the form's current user); vLLM's
# ``lora_name`` and ``extra_keys`` are read from tagged maps only
_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                  "medium", "cache_salt", "session_id", "lora_name")
_REMOVED_FIELDS = ("block_hashes", "medium")


def _positional(ev: list, names: tuple) -> dict:
    return dict(zip(names, ev[1:]))


def _header(obj, where: str):
    """``(ts, events, worker)`` of an EventBatch (either form), checked."""
    if type(obj) is dict:
        ts, events, rank = obj.get("ts"), obj.get("events"), obj.get("data_parallel_rank")
    elif isinstance(obj, (list, tuple)) and len(obj) >= 2:
        ts, events = obj[0], obj[1]
        rank = obj[2] if len(obj) > 2 else None
    else:
        raise TraceFormatError(f"{where}: not an EventBatch (expected a map with 'ts' and "
                               f"'events' or an array [ts, events, rank?]), got "
                               f"{type(obj).__name__}")
    if type(events) is not list:
        raise TraceFormatError(f"{where}: EventBatch 'events' must be a list, "
                               f"got {type(events).__name__}")
    if ts is not None and not isinstance(ts, (int, float)):
        raise TraceFormatError(f"{where}: EventBatch 'ts' must be a number, got {ts!r}")
    ts = float(ts or 0.0)
    if rank is None:
        worker = 0
    elif type(rank) is int and 0 <= rank < 1 << 16:
        worker = rank
    else:
        raise TraceFormatError(f"{where}: data_parallel_rank {rank!r} is not a small "
                               "non-negative integer")
    return ts, events, worker


def batch_header(obj) -> tuple[float, int]:
    """``(ts, worker)`` of an EventBatch :func:`decode_batch` has accepted."""
    ts, _, worker = _header(obj, "")
    return ts, worker


def decode_batch(obj, where: str, frame: int, stats: DecodeStats, strict: bool = False) -> list:
    """One EventBatch (either form) as a list of operations."""
    ts, events, worker = _header(obj, where)
    out = []
    append = out.append
    n_store = n_remove = n_clear = b_store = b_remove = 0
    for k, ev in enumerate(events):
        if type(ev) is dict:
            kind = ev.get("type")
            get = ev.get
        elif isinstance(ev, (list, tuple)) and ev:
            kind = ev[0]
            get = _positional(ev, _STORED_FIELDS if kind == "BlockStored"
                              else _REMOVED_FIELDS if kind == "BlockRemoved" else ()).get
        else:
            raise TraceFormatError(f"{where} event {k}: not an event (a tagged map or a "
                                   f"[tag, ...] array), got {ev!r:.60}")
        if kind == "BlockStored":
            at = _At(where, k)
            hashes, raw = _ids(get("block_hashes"), at, "block_hashes")
            parent = get("parent_block_hash")
            if parent is None or (type(parent) is int and 0 <= parent <= MASK64):
                raw_parent = None
            else:
                parent, raw_parent = _parent(parent, at)
            toks = get("token_ids")
            if toks is not None and type(toks) is not list:
                raise TraceFormatError(f"{at}: 'token_ids' must be a list, "
                                       f"got {type(toks).__name__}")
            bs = get("block_size") or 0
            if type(bs) is not int or bs < 0:
                raise TraceFormatError(f"{at}: block_size {bs!r} is not a non-negative integer")
            extra = get("extra_keys")
            if extra is not None and (type(extra) is not list or len(extra) != len(hashes)):
                raise TraceFormatError(f"{at}: extra_keys must be a list with one entry per block")
            append(StoreOp(worker, hashes, parent, toks, bs, extra, frame, ts, raw, raw_parent))
            n_store += 1
            b_store += len(hashes)
        elif kind == "BlockRemoved":
            hashes, _ = _ids(get("block_hashes"), _At(where, k), "block_hashes")
            append(RemoveOp(worker, hashes, frame, ts))
            n_remove += 1
            b_remove += len(hashes)
        elif kind == "AllBlocksCleared":
            append(ClearOp(worker, frame, ts))
            n_clear += 1
        else:
            name = str(kind)[:40]
            if strict:
                raise TraceFormatError(f"{where} event {k}: unknown event type {name!r} (known: "
                                       f"{', '.join(EVENT_TYPES)}; without --strict it is "
                                       "counted and skipped)")
            stats.unknown_types[name] = stats.unknown_types.get(name, 0) + 1
    stats.batches += 1
    stats.events += len(events)
    stats.stores += n_store
    stats.removes += n_remove
    stats.clears += n_clear
    stats.blocks_stored += b_store
    stats.blocks_removed += b_remove
    return out


@dataclass
class Frame:
    number: int          # 1-based position in the file
    seq: int | None
    recv_ns: int
    payload: bytes | None
    source: int = 0
    obj: object = None   # the decoded EventBatch of a plain concatenation


def _open(path: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None


def read_header(path: str) -> dict | None:
    """The capture header, or None for a plain concatenation of payloads."""
    msgpack = msgpack_module()
    with _open(path) as f:
        if f.read(len(MAGIC)) != MAGIC:
            return None
        up = msgpack.Unpacker(f, raw=False, strict_map_key=False)
        try:
            head = next(up)
        except (StopIteration, ValueError, msgpack.UnpackException) as e:
            raise TraceFormatError(f"{path}: capture header is truncated or corrupt ({e})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TraceFormatError(f"{path}: not a prefixbench KV capture (bad header)")
    if head.get("version") != VERSION:
        raise TraceFormatError(f"{path}: capture version {head.get('version')!r}; this "
                               f"prefixbench reads version {VERSION}")
    return head


def iter_frames(path: str, stats: DecodeStats | None = None) -> Iterator[Frame]:
    """Frames of a capture (or payloads of a plain concatenation), in file order;
    sequence gaps and duplicates are counted in ``stats`` and duplicates skipped."""
    msgpack = msgpack_module()
    stats = stats if stats is not None else DecodeStats()
    header = read_header(path)
    with _open(path) as f:
        if header is not None:
            f.read(len(MAGIC))
        up = msgpack.Unpacker(f, raw=False, strict_map_key=False, max_buffer_size=1 << 30)
        n = 0
        last = None
        if header is not None:
            next(up)
        while True:
            try:
                obj = next(up)
            except StopIteration:
                break
            except (ValueError, TypeError, msgpack.UnpackException) as e:
                # TypeError: a map keyed by an array or a map (unhashable in Python)
                raise TraceFormatError(f"{path}: frame {n + 1}: corrupt msgpack ({e})") from None
            if header is not None:
                if isinstance(obj, dict):
                    continue                                  # closing summary
                if (not isinstance(obj, list) or len(obj) < 4 or type(obj[0]) is not int
                        or not isinstance(obj[3], bytes)
                        or (obj[1] is not None and type(obj[1]) is not int)):
                    raise TraceFormatError(f"{path}: frame {n + 1}: not a capture frame "
                                           "[seq, recv_ns, topic, payload, source]")
                n += 1
                stats.frames += 1
                seq = obj[0]
                source = obj[4] if len(obj) > 4 else 0
                if source:
                    stats.replayed_frames += 1
                if last is not None:
                    if seq <= last:
                        stats.seq_duplicates += 1
                        continue
                    if seq > last + 1:
                        stats.seq_gaps += 1
                        stats.seq_missing += seq - last - 1
                last = seq
                yield Frame(n, seq, int(obj[1] or 0), obj[3], source)
            else:
                n += 1
                stats.frames += 1
                yield Frame(n, None, 0, None, 0, obj)
        # bytes left over that do not make a whole object: the file was cut
        left = up.tell()
        f.seek(0, 2)
        size = f.tell() - (len(MAGIC) if header is not None else 0)
        if left < size:
            raise TraceFormatError(f"{path}: frame {n + 1}: truncated msgpack frame "
                                   f"({size - left} trailing bytes do not make a whole frame)")


def iter_batches(path: str, stats: DecodeStats | None = None, strict: bool = False
                 ) -> Iterator[tuple[Frame, list]]:
    """``(frame, operations)`` per frame, decoded in order."""
    msgpack = msgpack_module()
    stats = stats if stats is not None else DecodeStats()
    unpackb = msgpack.unpackb
    for fr in iter_frames(path, stats):
        where = f"{path}: frame {fr.number}" + (f" (seq {fr.seq})" if fr.seq is not None else "")
        obj = fr.obj if fr.payload is None else unpack_payload(fr.payload, where, unpackb)
        yield fr, decode_batch(obj, where, fr.number, stats, strict)


def unpack_payload(payload: bytes, where: str, unpackb=None):
    """One frame's msgpack payload as Python objects; one line naming ``where`` if bad."""
    msgpack = msgpack_module()
    try:
        return (unpackb or msgpack.unpackb)(payload, raw=False, strict_map_key=False)
    except msgpack.ExtraData:
        raise TraceFormatError(f"{where}: payload has bytes after its EventBatch") from None
    except (ValueError, msgpack.UnpackException) as e:
        raise TraceFormatError(f"{where}: truncated msgpack payload ({e})") from None
    except TypeError as e:          # a map keyed by an array or a map
        raise TraceFormatError(f"{where}: corrupt msgpack payload ({e})") from None


def _count(stats: DecodeStats, batch: tuple) -> None:
    ns, nr, nc, bs, br = batch[9]
    stats.batches += 1
    stats.events += batch[2]
    stats.stores += ns
    stats.removes += nr
    stats.clears += nc
    stats.blocks_stored += bs
    stats.blocks_removed += br
    for name, c in batch[8].items():
        stats.unknown_types[name] = stats.unknown_types.get(name, 0) + c


def iter_decoded(path: str, stats: DecodeStats | None = None, strict: bool = False,
                 ops: bool = False) -> Iterator[tuple[Frame, tuple, list | None]]:
    """``(frame, batch, operations)`` per frame: ``batch`` the array form of
    :mod:`prefixbench.workloads._kvevents_ref` (decoded by the compiled twin from a
    capture's payload bytes), ``operations`` the :func:`decode_batch` list when ``ops``
    is asked for (the hash check needs the token ids), else None.  Counts go to
    ``stats`` as :func:`iter_batches` counts them."""
    stats = stats if stats is not None else DecodeStats()
    decode = _kv.decode_payload
    for fr in iter_frames(path, stats):
        where = f"{path}: frame {fr.number}" + (f" (seq {fr.seq})" if fr.seq is not None else "")
        if fr.payload is not None and not ops:
            batch = decode(fr.payload, where, fr.number, strict)
            lst = None
        else:
            obj = fr.obj if fr.payload is None else unpack_payload(fr.payload, where)
            one = DecodeStats()
            lst = decode_batch(obj, where, fr.number, one, strict)
            ts, worker = batch_header(obj)
            batch = _kv.batch_from_ops(lst, ts, worker, one.events, one.unknown_types)
        _count(stats, batch)
        yield fr, batch, lst


class CaptureWriter:
    """Writes a capture file (see the module docstring), buffered; ``close`` adds
    the closing summary map."""

    def __init__(self, path: str, *, endpoint: str = "", topic: str = "", started: float = 0.0):
        self.msgpack = msgpack_module()
        self.path = str(path)
        try:
            self._f = open(self.path, "wb", buffering=1 << 20)
        except OSError as e:
            raise ConfigError(f"option -o: {self.path}: cannot write: {e.strerror or e}") from None
        self._pack = self.msgpack.Packer(use_bin_type=True).pack
        self._f.write(MAGIC)
        self._f.write(self._pack({"format": FORMAT, "version": VERSION, "endpoint": endpoint,
                                  "topic": topic, "started": float(started)}))
        self.frames = 0

    def write(self, seq: int, recv_ns: int, topic: bytes, payload: bytes, source: int = 0) -> None:
        self._f.write(self._pack([seq, recv_ns, topic, payload, source]))
        self.frames += 1

    def close(self, summary: dict | None = None) -> None:
        if self._f.closed:
            return
        if summary is not None:
            self._f.write(self._pack(dict(summary, frames=self.frames)))
        self._f.close()


# -- parent memory: chains rebuilt from parent_block_hash ----------------------
class ChainMemory:
    """The full chain of every live block, and of the most recently removed ones.

    A ``BlockStored`` names only its first block's parent; the index needs the
    whole sequence from the root.  Every block maps to ``(chain, position)``
    where ``chain`` is the uint64 array of the store that brought it (shared by
    its blocks, so memory is one array per store event, not per block).
    Blocks held by no worker move to a bounded LRU of ``parent_memory``
    entries, so a chain continuing an evicted parent still rebuilds; a parent
    in neither is unknown: counted, and the chain starts at the event.
    """

    def __init__(self, parent_memory: int = DEFAULT_PARENT_MEMORY):
        self.parent_memory = int(parent_memory)
        self.where: dict[int, tuple[np.ndarray, int]] = {}
        self.removed: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self.live: dict[int, set] = {}
        self.unknown_parents = 0
        self.removed_parents_used = 0

    def chain_of(self, block: int) -> np.ndarray | None:
        loc = self.where.get(block)
        if loc is None:
            loc = self.removed.get(block)
            if loc is None:
                return None
            self.removed_parents_used += 1
        arr, pos = loc
        return arr[:pos + 1]

    def store(self, op: StoreOp) -> tuple[np.ndarray, int]:
        """The op's full chain and how many of its blocks are ancestors."""
        return self.store_ids(op.worker, op.block_hashes, op.parent)

    def store_ids(self, worker: int, new: np.ndarray, parent: int | None
                  ) -> tuple[np.ndarray, int]:
        """:meth:`store` of a BlockStored given as its worker, hashes and parent."""
        anc = None
        if parent is not None:
            anc = self.chain_of(parent)
            if anc is None:
                self.unknown_parents += 1
        if anc is None or not len(anc):
            chain, n_anc = new, 0
        else:
            chain, n_anc = np.concatenate((anc, new)), len(anc)
        keys = new.tolist()
        where = self.where
        where.update(zip(keys, zip(repeat(chain), range(n_anc, n_anc + len(keys)))))
        live = self.live.get(worker)
        if live is None:
            live = self.live[worker] = set()
        if n_anc and parent not in live:
            # the engine holds the prefix it built on: its ancestors are live there again
            anc_keys = chain[:n_anc].tolist()
            live.update(anc_keys)
            rem = self.removed
            for i, h in enumerate(anc_keys):
                if h not in where:
                    where[h] = (chain, i)
                    rem.pop(h, None)
        live.update(keys)       # a stale copy in ``removed`` is harmless: ``where`` is read first
        return chain, n_anc

    def _forget(self, keys) -> np.ndarray:
        """Blocks no worker holds any more: into the removed LRU; returns them."""
        others = self.live.values()
        gone = [h for h in keys if not any(h in s for s in others)]
        rem, where = self.removed, self.where
        for h in gone:
            loc = where.pop(h, None)
            if loc is not None:
                rem[h] = loc
                rem.move_to_end(h)
        while len(rem) > self.parent_memory:
            rem.popitem(last=False)
        return np.array(gone, dtype=np.uint64)

    def remove(self, op: RemoveOp) -> np.ndarray:
        """Drop the blocks from the op's worker; returns those now held by no worker."""
        return self.remove_ids(op.worker, op.block_hashes)

    def remove_ids(self, worker: int, ids: np.ndarray) -> np.ndarray:
        keys = ids.tolist()
        live = self.live.get(worker)
        if live is None:
            return np.empty(0, dtype=np.uint64)
        held = [h for h in keys if h in live]
        live.difference_update(held)
        return self._forget(held)

    def clear(self, op: ClearOp) -> np.ndarray:
        return self.clear_worker(op.worker)

    def clear_worker(self, worker: int) -> np.ndarray:
        """Drop every block of ``worker``; those held by no other worker go to the removed
        memory in ascending id order (so the order does not depend on a set's layout)."""
        keys = self.live.pop(worker, set())
        return self._forget(sorted(keys))

    @property
    def live_blocks(self) -> int:
        """Distinct blocks held by at least one worker."""
        return len(self.where)


# -- the workload ---------------------------------------------------------------
class KvEventsWorkload(Workload):
    """A KV-event capture (or plain EventBatch concatenation), read lazily."""

    name = "kv-events"

    def __init__(self, path: str, *, block_size: int = 16, strict: bool = False,
                 parent_memory: int = DEFAULT_PARENT_MEMORY, lookups: str | None = None,
                 block_hash: str | None = None, hash_options: dict | None = None):
        self.path = str(path)
        if not Path(self.path).is_file():
            raise ConfigError(f"option path: {self.path}: no such file")
        self.header = read_header(self.path)
        self.block_size = int(block_size)
        self.strict = bool(strict)
        self.parent_memory = int(parent_memory)
        self.lookups = lookups
        self.block_hash = block_hash
        self.hash_options = dict(hash_options or {})
        self._len: int | None = None

    def batches(self, stats: DecodeStats | None = None) -> Iterator[tuple[Frame, list]]:
        return iter_batches(self.path, stats, self.strict)

    def operations(self, stats: DecodeStats | None = None):
        for _, ops in self.batches(stats):
            yield from ops

    def requests(self) -> Iterator[Request]:
        mem = ChainMemory(self.parent_memory)
        bs = self.block_size
        for i, op in enumerate(self.operations()):
            if isinstance(op, StoreOp):
                chain, n_anc = mem.store(op)
                yield Request(op.worker, i, chain[:n_anc], chain, n_anc * bs)
            elif isinstance(op, RemoveOp):
                mem.remove(op)
            else:
                mem.clear(op)

    def __len__(self) -> int:
        if self._len is None:
            stats = DecodeStats()
            for _ in self.operations(stats):
                pass
            self._len = stats.stores
        return self._len

    def metadata(self) -> dict:
        md = {"workload": self.name, "block_size": self.block_size, "path": self.path,
              "format": "capture" if self.header else "msgpack-stream"}
        if self.header:
            md["endpoint"] = self.header.get("endpoint", "")
        if self.block_hash:
            md["block_hash"] = self.block_hash
        return md


_OPTIONS = ("path", "block_size", "strict", "parent_memory", "lookups", "block_hash", "hash_seed")


def _bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"option {name}: {v!r} is not a valid bool")


def kv_events(**options) -> KvEventsWorkload:
    """vLLM/SGLang KV-event capture or msgpack EventBatch stream (path= required)."""
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload kv-events "
                              f"(options: {', '.join(_OPTIONS)})")
    path = options.get("path")
    if not path:
        raise ConfigError("option path: workload kv-events needs path= (a capture from "
                          "'prefixbench events record' or concatenated msgpack EventBatches)")
    hash_opts = {}
    if options.get("hash_seed") not in (None, ""):
        hash_opts["hash_seed"] = str(options["hash_seed"])
    scheme = options.get("block_hash") or None
    if scheme is not None:
        from prefixbench.workloads.hashschemes import make_hash_scheme
        make_hash_scheme(scheme, **hash_opts)             # unknown names fail here
    block_size = int_in_range("block_size", options.get("block_size", 16), 1, 1 << 20)
    strict = _bool("strict", options.get("strict", False))
    memory = int_in_range("parent_memory", options.get("parent_memory", DEFAULT_PARENT_MEMORY),
                          0, 1 << 40)
    return KvEventsWorkload(
        str(path), block_size=block_size,
        strict=strict, parent_memory=memory,
        lookups=options.get("lookups") or None, block_hash=scheme, hash_options=hash_opts)


@hookimpl
def prefixbench_register_workloads(register):
    register("kv-events", kv_events)
