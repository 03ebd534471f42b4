"""The Range payload layer (paper sections 3.2-3.5, Table 1) on the packfile engine.

:class:`StripeRanges` keeps published payload ranges as stripes in a
:class:`~prefixbench.engines.packfile.PackfileStore`: a prefix tree over
token identity, stripes published per generation (per layer when ``layers``
> 1), divergent prefixes sharing the stripes before their divergence,
tickets that lease generations, a fixed pool of read banks released by
their consumer, deferred retirement, and a dirty marker cleared only by a
clean close.  A generation here is the set of stripe records of one publish
(not a whole pack file); retiring it deletes those records and the engine
reclaims their space.

It is a client of the engine, not part of it: it uses the store's ordinary
calls (``put``, ``write_items``, ``scan``, ``sync``, ``close``), its
documented payload-level access (``value_extent``, ``read_into``,
``block``, ``uuid``, :data:`~prefixbench.engines.packfile.RECORD_HEADER_BYTES`,
:func:`~prefixbench.engines.packfile.aligned_buffer`) and the kernel's
durable-file helpers, so the engine's internals can change without it.
It registers nothing: it is a library the payload-restore benchmark uses,
not an engine.
"""
from __future__ import annotations

import json
import os
import threading
import zlib

from prefixbench.durable import fsync_dir, publish_file, write_file
from prefixbench.engines.base import StoreConfig
from prefixbench.engines.packfile import RECORD_HEADER_BYTES, PackfileStore, aligned_buffer
from prefixbench.errors import ConfigError, StoreError


class TicketError(StoreError):
    """A ticket that is stale, released, cancelled or claimed for another query."""


class BankError(StoreError):
    """A read bank misused (released while its read is in flight) or none free in time."""


class _Node:
    """A radix-tree node: the edge ``label`` (tokens) into it, children by first token,
    and the generations whose published path covers the whole edge (insertion order)."""

    __slots__ = ("children", "label", "owners")

    def __init__(self, label=()):
        self.label = label
        self.children: dict = {}
        self.owners: dict = {}


class _RangeTree:
    """Compressed prefix tree over token identity (Range's range directory, 3.2).

    A lookup walks one root-to-leaf path comparing token labels: its cost
    follows the query's tokens and the tree's branches, never the number of
    published ranges.  Every node carries the generations that published a
    path through it, so the deepest edge the query reaches names a
    generation whose plan covers the whole hit.
    """

    def __init__(self):
        self.root = _Node()

    def longest(self, tokens) -> tuple[int, int | None]:
        """(matched tokens, the newest generation covering them) for ``tokens``."""
        node, d, n, gen = self.root, 0, len(tokens), None
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                break
            lab = child.label
            k = 1
            m = min(len(lab), n - d)
            while k < m and lab[k] == tokens[d + k]:
                k += 1
            d += k
            gen = next(reversed(child.owners))
            if k < len(lab):
                break
            node = child
        return d, gen

    def insert(self, tokens, gen) -> None:
        node, d, n = self.root, 0, len(tokens)
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                leaf = _Node(tuple(tokens[d:]))
                leaf.owners[gen] = None
                node.children[tokens[d]] = leaf
                return
            lab = child.label
            k = 1
            m = min(len(lab), n - d)
            while k < m and lab[k] == tokens[d + k]:
                k += 1
            if k < len(lab):                        # split the edge at k
                tail = _Node(lab[k:])
                tail.children, tail.owners = child.children, dict(child.owners)
                child.label, child.children = lab[:k], {lab[k]: tail}
            child.owners[gen] = None
            d += k
            node = child

    def remove(self, tokens, gen) -> None:
        """Drop ``gen`` from its path; prune nodes no generation covers any more."""
        node, d, n = self.root, 0, len(tokens)
        while d < n:
            child = node.children.get(tokens[d])
            if child is None:
                return
            child.owners.pop(gen, None)
            if not child.owners:
                del node.children[tokens[d]]
                return
            d += len(child.label)
            node = child


class Bank:
    """One aligned stripe-sized read buffer: free -> read -> scatter -> free.

    The consumer that owns the scatter calls :meth:`release` once its
    completion is proved; only then may the pool hand the bank out again.
    ``uses`` counts hand-outs, so a test can see a bank was not reused early.
    """

    def __init__(self, pool, index, size):
        self._pool = pool
        self.index = index
        self.buffer = aligned_buffer(size)
        self.state = "free"
        self.owner = None
        self.uses = 0

    def release(self) -> None:
        self._pool._release(self)


class BankPool:
    """A fixed pool of read banks carved once at startup (paper 3.4; default 8)."""

    def __init__(self, count: int, size: int, timeout: float = 30.0):
        if count < 1:
            raise ConfigError(f"option banks: {count} must be >= 1")
        self._cond = threading.Condition()
        self.banks = [Bank(self, i, size) for i in range(count)]
        self._free = list(self.banks)
        self.timeout = timeout

    def free_count(self) -> int:
        with self._cond:
            return len(self._free)

    def acquire(self, owner, timeout: float | None = None) -> Bank:
        wait = self.timeout if timeout is None else timeout
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout=wait):
                raise BankError(f"no free read bank after {wait:g} s: all {len(self.banks)} "
                                f"are held by reads or unreleased scatters")
            bank = self._free.pop(0)
            bank.state, bank.owner = "read", owner
            bank.uses += 1
            return bank

    def _release(self, bank) -> None:
        with self._cond:
            if bank.state == "read":
                raise BankError(f"read bank {bank.index} released while its read is in flight")
            if bank.state == "free":
                raise BankError(f"read bank {bank.index} released twice")
            bank.state, bank.owner = "free", None
            self._free.append(bank)
            self._cond.notify_all()

    def close(self):
        for b in self.banks:
            b.buffer.close()


class Ticket:
    """A lookup's answer (paper 3.2): the promised endpoint and the generations holding it.

    Fields checked at :meth:`claim`: the owner ``epoch`` of the directory that
    issued it, every generation in ``gens`` still visible, the exact query
    ``tokens``, and the promised endpoint ``hit_tokens`` (``hit_bytes`` in
    payload bytes, all layers).  ``segments`` is the physical plan clipped
    at the endpoint: ``(first token, end token, generation, generation's
    first token)`` per run of stripes.
    """

    def __init__(self, ranges, epoch, segments, tokens, hit_tokens, hit_bytes):
        self._ranges = ranges
        self.epoch = epoch
        self.segments = segments
        self.gens = tuple(sorted({s[2] for s in segments}))
        self.gen = segments[-1][2]                 # the generation that answered
        self.tokens = tuple(tokens)
        self.hit_tokens = hit_tokens
        self.hit_bytes = hit_bytes
        self.state = "lookup"          # lookup -> claimed -> released
        self.cancelled = False
        self.in_flight = 0             # reads issued and not yet drained
        self._release_pending = False

    def claim(self, tokens) -> None:
        """Bind the ticket to its request: the exact query and still-visible generations."""
        self._ranges._claim(self, tokens)

    def cancel(self) -> None:
        """Stop issuing reads; leases and banks stay owned until in-flight reads drain."""
        self.cancelled = True

    def release(self) -> None:
        """Drop the leases, now or (with reads in flight) when the last read drains."""
        self._ranges._release(self)


class StripeRanges:
    """Published payload ranges as packfile stripes, owned through tickets.

    Layout (3.3): a range of ``T`` tokens with ``layers`` layers is the
    payload ``[layer][token][bytes_per_token / layers]``; each layer's slice
    is cut into stripes of ``stripe_bytes`` (``tokens_per_stripe`` tokens),
    one packfile record each, stored so its bytes start on an aligned block.
    A restore reads one native call per stripe, whatever the number of
    logical objects that name the same bytes.

    * ``publish(tokens, payload)`` writes the new generation's stripes and
      only then makes it visible.  Where the tokens share a prefix with a
      published range, whole stripes before the divergence are referenced
      from the generations that hold them; the stripe in which they diverge
      is rewritten (divergent prefixes).  A failure part-way leaves nothing
      visible and its stripes are deleted (partial completion is not
      completion).  Publishing a range that is already fully present joins
      the existing generation.
    * ``lookup(tokens)`` walks the prefix tree (:class:`_RangeTree`) and
      returns a :class:`Ticket` leasing every generation of the hit, or None.
    * ``invalidate(gen)`` hides a generation and every generation that
      references its stripes, pruning their branches at once; their stripes
      are retired (deleted, space reclaimed) only at zero leases.
    * ``read(ticket, dest)`` reads the claimed range clipped at the hit
      endpoint, stripes in layer order, each admitted through a read bank
      (:class:`BankPool`); ``on_layer(l)`` fires when every stripe of layer
      ``l`` has landed.  Cancellation stops issuing reads; banks and leases
      stay owned until the reads in flight have drained.
    * Clean ``close`` drains, syncs, writes a checksummed snapshot bound to
      the store's identity, then removes the dirty marker; a reopen that
      finds the marker (an unclean stop) discards the directory and deletes
      its stripes instead of reconstructing anything from payload.  The
      snapshot carries a format ``version`` (one written without it, by the
      previous release, is version 1); another version, a bad checksum or a
      cut file is refused in one line.
    """

    SNAPSHOT = "ranges.snapshot"
    #: the snapshot's format version (a snapshot without one is version 1)
    VERSION = 1
    DIRTY = "ranges.dirty"

    def __init__(self, path, stripe_bytes=32 << 20, bytes_per_token=4096, pack_bytes=1 << 30,
                 durability="async", allow_buffered=False, layers=1, banks=8, read_workers=1,
                 bank_timeout=30.0):
        self.store = PackfileStore(StoreConfig(path=path, durability=durability, options={
            "pack_bytes": pack_bytes, "allow_buffered": allow_buffered}))
        self.path = self.store.path
        B = self.store.block
        if layers < 1 or bytes_per_token < 1 or bytes_per_token % layers:
            self.store.close()
            raise ConfigError(f"option layers: {layers} must be >= 1 and divide "
                              f"bytes_per_token={bytes_per_token}")
        per_layer = bytes_per_token // layers
        if stripe_bytes % B or stripe_bytes % per_layer:
            self.store.close()
            raise ConfigError(f"option stripe_bytes: {stripe_bytes} must be a multiple of the "
                              f"{B}-byte alignment and of the {per_layer} bytes a token holds "
                              f"per layer (bytes_per_token={bytes_per_token}, layers={layers})")
        if read_workers < 1:
            self.store.close()
            raise ConfigError(f"option read_workers: {read_workers} must be >= 1")
        self.stripe = stripe_bytes
        self.per_token = bytes_per_token
        self.layers = layers
        self.per_layer_token = per_layer
        self.tps = stripe_bytes // per_layer        # tokens per stripe
        self._pad = B - RECORD_HEADER_BYTES
        self._lock = threading.Lock()
        self._tree = _RangeTree()
        self._gens: dict[int, dict] = {}           # gen -> tokens, first (k0), plan
        self._visible: set[int] = set()
        self._dependents: dict[int, set] = {}
        self._refs: dict[int, int] = {}
        self._retiring: set[int] = set()
        self._next_gen = 1
        self.epoch = 1
        self._closed = False
        self.discarded_unclean = False
        dirty = os.path.join(self.path, self.DIRTY)
        snap = os.path.join(self.path, self.SNAPSHOT)
        try:
            if os.path.exists(dirty):
                self.discarded_unclean = True
                self._discard_all()
            elif os.path.exists(snap):
                self._load_snapshot(snap)
            write_file(dirty, b"open\n")          # through the fault seam, one-line errors
            fsync_dir(self.path)
        except BaseException:
            self.store.close()
            raise
        self.banks = BankPool(banks, stripe_bytes, bank_timeout)
        self._workers = read_workers
        self._executor = None

    # stripe j of layer l of generation gen
    @staticmethod
    def _key(gen, layer, j):
        return (gen << 32) | (layer << 20) | j

    def _n_stripes(self, info) -> int:
        return -(-(len(info["tokens"]) - info["first"]) // self.tps)

    def _discard_all(self):
        keys = [k for k, _ in self.store.scan()]
        for i in range(0, len(keys), 4096):
            self.store.write_items([], keys[i:i + 4096])
        try:
            os.unlink(os.path.join(self.path, self.SNAPSHOT))
        except FileNotFoundError:
            pass

    def _identity(self) -> dict:
        return {"uuid": self.store.uuid.hex(), "stripe": self.stripe,
                "bytes_per_token": self.per_token, "layers": self.layers}

    def _load_snapshot(self, snap):
        version, raw = None, b""
        try:
            with open(snap, "rb") as fh:
                raw = fh.read()
            doc = json.loads(raw)
            version = doc.get("version", 1)     # the previous release wrote no version
            body = json.dumps(doc["body"], sort_keys=True).encode()
            ok = doc.get("crc") == zlib.crc32(body) and version == self.VERSION
            body = doc["body"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if version != self.VERSION and isinstance(version, int):
            raise StoreError(f"stripe ranges {self.path}: {self.SNAPSHOT} has format version "
                             f"{version}; this prefixbench reads version {self.VERSION}")
        if not ok:
            why = "cut short or unreadable" if version is None else "bad checksum"
            raise StoreError(f"stripe ranges {self.path}: {self.SNAPSHOT} is corrupt "
                             f"({why}, {len(raw)} bytes)")
        if body.get("identity") != self._identity():
            raise StoreError(f"stripe ranges {self.path}: {self.SNAPSHOT} belongs to another "
                             f"store or layout ({body.get('identity')})")
        for gen, info in sorted(((int(g), v) for g, v in body["gens"].items())):
            tokens = tuple(info["tokens"])
            self._gens[gen] = {"tokens": tokens, "first": info["first"],
                               "plan": [tuple(s) for s in info["plan"]]}
            self._visible.add(gen)
            self._tree.insert(tokens, gen)
            for s in info["plan"]:
                if s[2] != gen:
                    self._dependents.setdefault(s[2], set()).add(gen)
        self._next_gen = body["next_gen"]
        self.epoch = body["epoch"] + 1

    # ----- publish / invalidate -------------------------------------------------
    @staticmethod
    def _clip(plan, end):
        out = []
        for a, b, g, base in plan:
            if a >= end:
                break
            out.append((a, min(b, end), g, base))
        return out

    def publish(self, tokens, payload) -> int:
        """Store ``payload`` (``len(tokens) * bytes_per_token`` bytes, layer-major); visible
        on return.  Returns the generation (an existing one if the range is already there)."""
        tokens = tuple(int(t) for t in tokens)
        view = memoryview(payload).cast("B")
        n, sl = len(tokens), self.per_layer_token
        if len(view) != n * self.per_token or not n:
            raise ConfigError(f"stripe ranges publish: {len(view)} payload bytes for "
                              f"{n} tokens of {self.per_token} bytes")
        with self._lock:
            m, parent = self._tree.longest(tokens)
            if m == n:
                return parent                      # duplicate stores join the existing one
            first = m // self.tps * self.tps
            base = self._clip(self._gens[parent]["plan"], first) if parent and first else []
            held = {s[2] for s in base}
            for g in held:                         # the referenced stripes stay while we write
                self._refs[g] = self._refs.get(g, 0) + 1
            gen = self._next_gen
            self._next_gen += 1
        pad = bytes(self._pad)
        written = []
        try:
            for layer in range(self.layers):
                lo = layer * n * sl
                for j, t in enumerate(range(first, n, self.tps)):
                    end = min(n, t + self.tps)
                    key = self._key(gen, layer, j)
                    self.store.put(key, pad + bytes(view[lo + t * sl:lo + end * sl]))
                    written.append(key)
            with self._lock:
                lost = held - self._visible
                if not lost:
                    self._gens[gen] = {"tokens": tokens, "first": first,
                                       "plan": base + [(first, n, gen, first)]}
                    self._visible.add(gen)
                    self._tree.insert(tokens, gen)
                    for g in held:
                        self._dependents.setdefault(g, set()).add(gen)
            if lost:
                raise TicketError(f"stripe ranges publish: generations {sorted(lost)} holding "
                                  f"the shared prefix were invalidated during the publish")
        except BaseException:
            self.store.write_items([], written)      # never visible: reclaim what was written
            raise
        finally:
            with self._lock:
                for g in held:
                    self._drop_ref(g)
            self._retire_unreferenced()
        return gen

    def invalidate(self, gen: int) -> None:
        """Hide ``gen`` and every generation built on its stripes; retire at zero leases."""
        with self._lock:
            todo = [gen]
            while todo:
                g = todo.pop()
                if g not in self._visible:
                    continue
                self._visible.discard(g)
                self._tree.remove(self._gens[g]["tokens"], g)
                self._retiring.add(g)
                todo.extend(self._dependents.pop(g, ()))
        self._retire_unreferenced()

    def _drop_ref(self, g):
        self._refs[g] -= 1
        if not self._refs[g]:
            del self._refs[g]

    def _retire_unreferenced(self):
        with self._lock:
            gone = [g for g in self._retiring if not self._refs.get(g)]
            infos = []
            for g in gone:
                self._retiring.discard(g)
                info = self._gens.pop(g)
                for s in info["plan"]:
                    if s[2] != g and s[2] in self._dependents:
                        self._dependents[s[2]].discard(g)
                infos.append((g, info))
        for g, info in infos:
            n = self._n_stripes(info)
            self.store.write_items([], [self._key(g, layer, j) for layer in range(self.layers)
                                        for j in range(n)])

    def retired(self, gen: int) -> bool:
        return gen not in self._gens

    # ----- tickets --------------------------------------------------------------
    def lookup(self, tokens) -> Ticket | None:
        tokens = tuple(int(t) for t in tokens)
        with self._lock:
            if self._closed:
                raise TicketError(f"stripe ranges {self.path} is closed")
            d, gen = self._tree.longest(tokens)
            if not d:
                return None
            segments = self._clip(self._gens[gen]["plan"], d)
            for g in {s[2] for s in segments}:
                self._refs[g] = self._refs.get(g, 0) + 1
            return Ticket(self, self.epoch, segments, tokens, d, d * self.per_token)

    def _claim(self, ticket, tokens):
        with self._lock:
            if ticket.state != "lookup":
                raise TicketError(f"ticket for generation {ticket.gen} is {ticket.state}, "
                                  f"not claimable")
            if ticket._ranges is not self or ticket.epoch != self.epoch or self._closed:
                raise TicketError(f"ticket of owner epoch {ticket.epoch} presented to epoch "
                                  f"{self.epoch}")
            if tuple(int(t) for t in tokens) != ticket.tokens:
                raise TicketError("ticket claimed for a different query than it was issued for")
            stale = [g for g in ticket.gens if g not in self._visible]
            if stale:
                raise TicketError(f"stale ticket: generation {stale[0]} was invalidated")
            ticket.state = "claimed"

    def _release(self, ticket):
        with self._lock:
            if ticket.state in ("released", "releasing"):
                return
            if ticket.in_flight:
                ticket.state = "releasing"        # the last draining read finishes it
                return
            self._finish_release(ticket)
        self._retire_unreferenced()

    def _finish_release(self, ticket):
        ticket.state = "released"
        for g in ticket.gens:
            self._drop_ref(g)

    def _plan_reads(self, ticket, layer_stride):
        """(layer, key, dest offset, bytes) per stripe, in layer order."""
        sl, jobs = self.per_layer_token, []
        for layer in range(self.layers):
            for a, b, g, base in ticket.segments:
                for t in range(a, b, self.tps):
                    key = self._key(g, layer, (t - base) // self.tps)
                    jobs.append((layer, key, layer * layer_stride + t * sl,
                                 (min(b, t + self.tps) - t) * sl))
        return jobs

    def read(self, ticket: Ticket, dest, on_stripe=None, on_layer=None, layer_stride=None,
             staged=False, fence=None) -> int:
        """Restore the claimed range into ``dest``; returns bytes restored.

        Layer ``l`` lands at ``dest[l * layer_stride:]`` (default: the hit's
        bytes per layer rounded up to the alignment), token-major.  Each
        stripe is admitted through a read bank: with ``staged`` it is read
        into the bank and scattered (copied) into ``dest``, else read straight
        into ``dest`` (page-aligned) with the bank held for the read and the
        scatter.  The bank returns to the pool when the scatter's completion
        is proved: at once for the synchronous copy, or - with ``fence(bank,
        stripe)`` given - when the consumer calls ``bank.release()``.
        ``on_stripe(i)`` and ``on_layer(l)`` run in the caller's thread, in
        order.  A cancelled ticket stops issuing reads, drains the ones in
        flight, then raises.
        """
        if ticket.state != "claimed":
            raise TicketError(f"ticket for generation {ticket.gen} is {ticket.state}; "
                              f"claim it before reading")
        from concurrent.futures import ThreadPoolExecutor
        view = memoryview(dest).cast("B")
        B, sl = self.store.block, self.per_layer_token
        if layer_stride is None:
            layer_stride = -(-ticket.hit_tokens * sl // B) * B
        need = (self.layers - 1) * layer_stride + -(-ticket.hit_tokens * sl // B) * B
        if layer_stride % B or len(view) < need:
            raise ConfigError(f"stripe ranges read: destination of {len(view)} bytes with a "
                              f"layer stride of {layer_stride} cannot hold {self.layers} layers "
                              f"of {ticket.hit_tokens * sl} bytes at a {B}-byte alignment")
        jobs = self._plan_reads(ticket, layer_stride)
        left = [0] * self.layers
        for job in jobs:
            left[job[0]] += 1
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="ranges-read")
        store = self.store

        def one(bank, key, off, take):
            ext = store.value_extent(key)
            if ext is None:
                raise TicketError(f"generation {key >> 32} lost stripe {key & 0xFFFFF} "
                                  f"under a lease")
            span = -(-take // B) * B
            if staged:
                store.read_into(ext[0], ext[1] + self._pad, memoryview(bank.buffer)[:span])
                bank.state = "scatter"
                view[off:off + take] = memoryview(bank.buffer)[:take]
            else:
                store.read_into(ext[0], ext[1] + self._pad, view[off:off + span])
                bank.state = "scatter"
            return take

        pending = []            # (future, bank, job index) in issue order
        done = nxt = 0
        error = None
        try:
            while nxt < len(jobs) or pending:
                while nxt < len(jobs) and not ticket.cancelled and error is None \
                        and (not pending or self.banks.free_count()):
                    bank = self.banks.acquire(ticket)
                    with self._lock:
                        ticket.in_flight += 1
                    layer, key, off, take = jobs[nxt]
                    pending.append((self._executor.submit(one, bank, key, off, take), bank, nxt))
                    nxt += 1
                if not pending:
                    break
                fut, bank, i = pending.pop(0)
                try:
                    got = fut.result()
                except Exception as e:  # noqa: BLE001 - any failed read still returns its bank
                    error = error or e
                    bank.state = "scatter"          # the read returned; nothing to scatter
                    bank.release()
                    continue
                finally:
                    with self._lock:
                        ticket.in_flight -= 1
                if error is not None or ticket.cancelled:
                    bank.release()                   # drained, not delivered
                    continue
                done += got
                if fence is not None:
                    fence(bank, i)                   # the consumer releases it when proved
                else:
                    bank.release()
                if on_stripe:
                    on_stripe(i)
                layer = jobs[i][0]
                left[layer] -= 1
                if not left[layer] and on_layer:
                    on_layer(layer)
        finally:
            for fut, bank, _i in pending:            # only on an exception in a callback
                fut.exception()                      # waits; the callback's error wins
                bank.state = "scatter"
                bank.release()
                with self._lock:
                    ticket.in_flight -= 1
            with self._lock:
                finish = ticket.state == "releasing" and not ticket.in_flight
                if finish:
                    self._finish_release(ticket)
            if finish:
                self._retire_unreferenced()
        if error is not None:
            raise error
        if ticket.cancelled and done < sum(j[3] for j in jobs):
            raise TicketError(f"ticket for generation {ticket.gen} was cancelled after "
                              f"{done} bytes")
        return done

    # ----- shutdown -----------------------------------------------------------
    def close(self, clean: bool = True) -> None:
        """Clean: drain, sync, snapshot, then clear the dirty marker."""
        if clean:
            with self._lock:
                if self._refs:
                    raise TicketError(f"stripe ranges {self.path}: {sum(self._refs.values())} "
                                      f"tickets still hold leases; release them first")
                gens = {str(g): {"tokens": list(self._gens[g]["tokens"]),
                                 "first": self._gens[g]["first"],
                                 "plan": [list(s) for s in self._gens[g]["plan"]]}
                        for g in sorted(self._visible)}
            self._retire_unreferenced()
            self.store.sync()
            body = {"gens": gens, "next_gen": self._next_gen, "epoch": self.epoch,
                    "identity": self._identity()}
            doc = {"version": self.VERSION, "body": body,
                   "crc": zlib.crc32(json.dumps(body, sort_keys=True).encode())}
            publish_file(os.path.join(self.path, self.SNAPSHOT), json.dumps(doc).encode())
            os.unlink(os.path.join(self.path, self.DIRTY))
            fsync_dir(self.path)
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.banks.close()
        self.store.close()
