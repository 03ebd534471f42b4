"""KV-event streams live: record a publisher, publish a synthetic one, replay a capture.

``record`` is a pyzmq SUB on an engine's event endpoint (vLLM's
``ZmqEventPublisher``: multipart ``[topic, seq (8 bytes big-endian),
msgpack EventBatch]``).  Every frame is written with its receive time to a
capture file (:mod:`prefixbench.workloads.kvevents`).  Sequence numbers are
checked as they arrive: the first frame sets the start (joining a running
stream is normal), a lower or repeated seq is a duplicate (counted, not
written), a jump is a gap.  With ``replay_endpoint`` a gap is repaired at
once through vLLM's ROUTER replay protocol: the recorder sends the first
missing seq as 8 bytes big-endian (a DEALER speaking REQ's envelope, so one
request may be answered by many frames), the publisher answers ``(seq,
payload)`` frames from its buffer and an end marker of seq -1; the missing
frames are written (marked as replayed) before the frame that revealed the
gap, so the file stays in sequence order.  What the buffer no longer holds
stays missing.  A publisher that sends nothing within ``timeout`` seconds,
or a replay endpoint that does not answer, is one line naming it.

``publish`` is the same publisher, for tests and rehearsals: it binds PUB
(and ROUTER for replays), pre-encodes a synthetic stream of BlockStored /
BlockRemoved batches hashed with a real scheme, and sends them at a fixed
rate in either encoding; ``skip`` leaves chosen seqs out of the live stream
(they stay in the replay buffer), which is how the tests make gaps.

``replay`` applies a capture to an index (:func:`replay_events`): events in
order; for each BlockStored the chain is rebuilt from parent memory, matched
(the lookup must find every ancestor: the engine reused exactly those, so a
shorter hit is an index/engine disagreement, counted), then inserted on the
batch's worker; BlockRemoved removes from that worker, AllBlocksCleared
clears it.  A strategy tracking fewer workers than the stream has folds them
onto worker 0 and removes a block only when no worker still holds it.
Decoding and index work are timed apart per batch, as captured.  Both run
compiled (:mod:`prefixbench.workloads._kvevents`): each capture payload's
msgpack is parsed straight into NumPy arrays (event kinds, block-hash offsets,
parents), and the apply loop keeps parent memory in C++ and calls the
strategy once per event (one match and one insert per BlockStored, one
remove or clear per BlockRemoved / AllBlocksCleared), never per block;
``PREFIXBENCH_PURE=1`` runs the pure-Python reference of both.  A lookup
trace (``-W lookups=FILE``: token-jsonl hashed with ``block_hash=``, or
JSONL ``hash_ids`` taken as the engine's own ids) is what a router sees: its
requests are only matched, never inserted, and are interleaved by time with
both clocks taken from their first timestamp; a lookup runs before the first
batch later than it (a batch at the same time goes first).  A trace with a
line lacking a timestamp is matched after the last event.
"""
from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np

from prefixbench import twins
from prefixbench.errors import ConfigError, MissingDependencyError, PrefixbenchError
from prefixbench.workloads.kvevents import (_kv, CaptureWriter, DecodeStats, KvEventsWorkload,
                                            _tokens, iter_decoded)
from prefixbench.workloads.model import StoreOp

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EndpointTimeout(PrefixbenchError):
    exit_code = 4


def _zmq():
    try:
        import zmq
    except ImportError:
        raise MissingDependencyError("events record/publish need pyzmq: "
                                     "pip install 'prefixbench[events]'") from None
    return zmq


def check_endpoint(option: str, endpoint: str) -> str:
    if not isinstance(endpoint, str) or "://" not in endpoint:
        raise ConfigError(f"option {option}: {endpoint!r} is not a ZMQ endpoint "
                          "such as tcp://127.0.0.1:5557")
    return endpoint


# -- record ---------------------------------------------------------------------
@dataclass
class RecordResult:
    path: str
    frames: int = 0
    live_frames: int = 0
    replayed_frames: int = 0
    gaps: int = 0
    missing: int = 0
    duplicates: int = 0
    malformed: int = 0
    elapsed_s: float = 0.0
    active_s: float = 0.0           # first frame to last
    first_seq: int | None = None
    last_seq: int | None = None
    gap_list: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Frames per second from the first frame to the last."""
        return (self.frames - 1) / self.active_s if self.active_s > 0 else 0.0


def _fetch_replay(zmq, dealer, endpoint: str, start: int, stop: int, timeout: float):
    """Frames ``[start, stop)`` from a replay endpoint: list of (seq, payload)."""
    try:
        dealer.send_multipart((b"", start.to_bytes(8, "big")))
    except zmq.Again:
        raise EndpointTimeout(f"replay endpoint {endpoint}: not reachable within {timeout:g} s "
                              f"(asked for seq {start})") from None
    got = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not dealer.poll(int(left * 1000)):
            raise EndpointTimeout(f"replay endpoint {endpoint}: no end-of-replay marker within "
                                  f"{timeout:g} s (asked for seq {start})")
        parts = dealer.recv_multipart()
        if parts and parts[0] == b"":
            parts = parts[1:]
        if len(parts) < 1 or len(parts[0]) != 8:
            continue
        seq = int.from_bytes(parts[0], "big", signed=True)
        if seq == -1:
            return got
        if start <= seq < stop and len(parts) > 1:
            got.append((seq, parts[1]))


def record(endpoint: str, out: str, *, topic: str = "", duration: float | None = None,
           replay_endpoint: str | None = None, max_frames: int | None = None,
           timeout: float = 10.0, progress=None) -> RecordResult:
    """Record a publisher into ``out`` (see the module docstring)."""
    zmq = _zmq()
    check_endpoint("ENDPOINT", endpoint)
    if replay_endpoint is not None:
        check_endpoint("--replay-endpoint", replay_endpoint)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)                     # never drop on our side
    sub.setsockopt(zmq.RCVBUF, 8 << 20)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
    dealer = None
    writer = None
    res = RecordResult(out)
    try:
        try:
            sub.connect(endpoint)
            if replay_endpoint is not None:
                dealer = ctx.socket(zmq.DEALER)
                dealer.setsockopt(zmq.LINGER, 0)
                dealer.setsockopt(zmq.SNDTIMEO, max(1, int(timeout * 1000)))
                dealer.connect(replay_endpoint)
        except zmq.ZMQError as e:
            raise ConfigError(f"endpoint {endpoint}: {e}") from None
        writer = CaptureWriter(out, endpoint=endpoint, topic=topic, started=time.time())
        expected = None
        start = time.monotonic()
        first_deadline = start + timeout
        stop_at = None if duration is None else start + duration
        poll = sub.poll
        Again = zmq.Again
        recv1 = sub.recv
        more = sub.get
        RCVMORE = int(zmq.RCVMORE)      # plain ints: pyzmq's own recv_multipart converts
        NOBLOCK = int(zmq.NOBLOCK)      # its enum flags on every part

        def recv(flags):
            parts = [recv1(flags)]
            while more(RCVMORE):
                parts.append(recv1(0))
            return parts
        write = writer.write
        time_ns = time.time_ns
        from_bytes = int.from_bytes
        limit = float("inf") if max_frames is None else max_frames
        pending = 0                    # frames not yet shown on the progress bar
        # the hot loop: per frame one recv, one clock read and one write; the stop
        # conditions and the progress bar are looked at every 256 frames or when idle
        while True:
            try:
                parts = recv(NOBLOCK)           # drain what is queued without a poll each
            except Again:
                if pending and progress is not None:
                    progress(pending)
                    pending = 0
                now = time.monotonic()
                if (stop_at is not None and now >= stop_at) or res.frames >= limit:
                    break
                wait = 0.2 if stop_at is None else max(0.0, min(0.2, stop_at - now))
                if not poll(int(wait * 1000)):
                    if res.frames == 0 and time.monotonic() >= first_deadline:
                        raise EndpointTimeout(f"endpoint {endpoint}: no frames within "
                                              f"{timeout:g} s (is the publisher running there, "
                                              "with this topic?)") from None
                continue
            recv_ns = time_ns()
            if len(parts) != 3 or len(parts[1]) != 8:
                res.malformed += 1
                continue
            seq = from_bytes(parts[1], "big")
            if seq != expected:
                if expected is not None and seq < expected:
                    res.duplicates += 1
                    continue
                if expected is not None:
                    res.gaps += 1
                    got = []
                    if dealer is not None:
                        got = _fetch_replay(zmq, dealer, replay_endpoint, expected, seq, timeout)
                        for s, payload in got:
                            write(s, recv_ns, parts[0], payload, 1)
                        res.replayed_frames += len(got)
                        res.frames += len(got)
                    lost = seq - expected - len(got)
                    res.missing += lost
                    res.gap_list.append([expected, seq, lost])
                if res.first_seq is None:
                    res.first_seq = seq
                    t_first = recv_ns
            write(seq, recv_ns, parts[0], parts[2], 0)
            res.frames += 1
            res.live_frames += 1
            t_last = recv_ns
            expected = seq + 1
            pending += 1
            if pending >= 256:
                if progress is not None:
                    progress(pending)
                pending = 0
                if (stop_at is not None and time.monotonic() >= stop_at):
                    break
            if res.frames >= limit:
                break
        if pending and progress is not None:
            progress(pending)
    except KeyboardInterrupt:
        pass
    finally:
        res.elapsed_s = time.monotonic() - start if "start" in locals() else 0.0
        if res.first_seq is not None:
            res.active_s = (t_last - t_first) / 1e9
            res.last_seq = expected - 1
        if writer is not None:
            writer.close({"end": True, "gaps": res.gaps, "missing": res.missing,
                          "duplicates": res.duplicates, "replayed": res.replayed_frames,
                          "gap_list": res.gap_list[:1000]})
        sub.close(0)
        if dealer is not None:
            dealer.close(0)
        ctx.term()
    return res


# -- publish (a synthetic engine) -------------------------------------------------
def synthetic_batches(n: int, *, form: str = "map", scheme: str = "vllm-sha256-cbor",
                      block_size: int = 16, events_per_batch: int = 1, seed: int = 1,
                      workers: int = 1, remove_every: int = 8) -> list[bytes]:
    """``n`` encoded EventBatches of a plausible engine: conversations grow linear
    chains (a store continues its conversation's last block, a new one starts at the
    root); every ``remove_every``-th event evicts a whole conversation, leaf first,
    as an LRU pool does with a cold conversation.  Batch ``b`` comes from rank
    ``b % workers``, which keeps its own conversations."""
    from prefixbench.workloads.hashschemes import make_hash_scheme
    from prefixbench.workloads.kvevents import msgpack_module
    msgpack = msgpack_module()
    sch = make_hash_scheme(scheme)
    rng = np.random.default_rng(seed)
    per_worker: list[list[list]] = [[] for _ in range(workers)]   # [ids so far, last state]
    out = []
    packb = msgpack.Packer(use_bin_type=True).pack
    k = 0
    for b in range(n):
        events = []
        convs = per_worker[b % workers]     # a batch is one rank's; its conversations are its own
        for _ in range(events_per_batch):
            k += 1
            if remove_every and k % remove_every == 0 and len(convs) > 1:
                ids, _ = convs.pop(int(rng.integers(len(convs))))
                ev = {"type": "BlockRemoved", "block_hashes": ids[::-1], "medium": "GPU"}
            else:
                nb = int(rng.integers(1, 4))
                toks = rng.integers(0, 32000, size=nb * block_size).astype(np.uint32)
                if convs and rng.random() < 0.85:
                    conv = convs[int(rng.integers(len(convs)))]
                else:
                    conv = [[], None]
                    convs.append(conv)
                parent = conv[0][-1] if conv[0] else None
                ids, conv[1] = sch.chain(toks, block_size, conv[1])
                idl = [int(x) for x in ids]
                conv[0].extend(idl)
                ev = {"type": "BlockStored", "block_hashes": idl, "parent_block_hash": parent,
                      "token_ids": toks.tolist(), "block_size": block_size, "lora_id": None,
                      "medium": "GPU", "lora_name": None}
            events.append(ev)
        rank = b % workers if workers > 1 else None
        if form == "map":
            batch = {"ts": 1.0e9 + b * 1e-3, "events": events, "data_parallel_rank": rank}
        else:
            arr = []
            for ev in events:
                if ev["type"] == "BlockStored":
                    arr.append(["BlockStored", ev["block_hashes"], ev["parent_block_hash"],
                                ev["token_ids"], ev["block_size"], None, "GPU"])
                else:
                    arr.append(["BlockRemoved", ev["block_hashes"], "GPU"])
            batch = [1.0e9 + b * 1e-3, arr] + ([rank] if rank is not None else [])
        out.append(packb(batch))
    return out


def publish(endpoint: str, payloads: list[bytes], *, replay_endpoint: str | None = None,
            rate: float = 0.0, topic: str = "", skip: set | None = None, delay: float = 1.0,
            linger: float = 1.0) -> int:
    """Send ``payloads`` as seq 0.. at ``rate`` frames/s (0: as fast as possible);
    serves replay requests until ``linger`` seconds after the last frame."""
    zmq = _zmq()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 2000)
    router = None
    try:
        pub.bind(endpoint)
        if replay_endpoint:
            router = ctx.socket(zmq.ROUTER)
            router.bind(replay_endpoint)
        topic_b = topic.encode("utf-8")
        skip = skip or set()

        def serve():
            while router is not None and router.poll(0):
                frames = router.recv_multipart()
                if len(frames) != 3:
                    continue
                ident, _, start_b = frames
                start = int.from_bytes(start_b, "big")
                for s in range(start, len(payloads)):
                    if s > sent:
                        break
                    router.send_multipart((ident, b"", s.to_bytes(8, "big"), payloads[s]))
                router.send_multipart((ident, b"", END_SEQ, b""))

        sent = -1
        end = time.monotonic() + delay
        while time.monotonic() < end:
            serve()
            time.sleep(0.01)
        t0 = time.monotonic()
        # frames due by now go out in a tight run (at most 64, then replays are served),
        # so a high rate is not held back by a clock read and a sleep check per frame
        n = len(payloads)
        send = pub.send_multipart
        mono = time.monotonic
        s = 0
        while s < n:
            upto = n
            if rate > 0:
                now = mono()
                upto = min(n, int((now - t0) * rate) + 1)
                if upto <= s:
                    wait = t0 + s / rate - now
                    if wait > 0.002:
                        time.sleep(min(wait - 0.001, 0.01))
                    continue
            upto = min(upto, s + 64)
            while s < upto:
                sent = s
                if s not in skip:
                    send((topic_b, s.to_bytes(8, "big"), payloads[s]))
                s += 1
            if router is not None:
                serve()
        end = time.monotonic() + linger
        while time.monotonic() < end:
            serve()
            time.sleep(0.005)
        return len(payloads)
    finally:
        pub.close()
        if router is not None:
            router.close(0)
        ctx.term()


# -- replay a capture -------------------------------------------------------------
@dataclass
class EventReplayResult:
    strategy: str
    path: str
    events: int = 0
    batches: int = 0
    stores: int = 0
    removes: int = 0
    clears: int = 0
    blocks_stored: int = 0
    blocks_removed: int = 0
    unknown_events: int = 0
    unknown_types: dict = field(default_factory=dict)
    unknown_parents: int = 0
    lookups: int = 0
    lookup_blocks: int = 0
    hit_blocks: int = 0
    ancestor_blocks: int = 0
    consistency_misses: int = 0
    oracle_hit_blocks: int | None = None
    live_blocks: int = 0
    index_live_blocks: int | None = None
    workers: int = 0
    workers_folded: bool = False
    removes_ignored: int = 0
    seq_gaps: int = 0
    seq_missing: int = 0
    seq_duplicates: int = 0
    replayed_frames: int = 0
    hash_scheme: str | None = None
    hash_checked: int = 0
    hash_mismatches: int = 0
    hash_unverifiable: int = 0
    trace_requests: int = 0
    trace_prompt_tokens: int = 0
    trace_hit_tokens: int = 0
    trace_oracle_hit_tokens: int | None = None
    decode_s: float = 0.0
    index_s: float = 0.0
    wall_s: float = 0.0
    cpu_s: float = 0.0              # this process's CPU time over the whole replay

    @property
    def events_per_s(self) -> float:
        busy = self.decode_s + self.index_s
        return self.events / busy if busy > 0 else 0.0

    @property
    def blocks_per_s(self) -> float:
        busy = self.decode_s + self.index_s
        return self.blocks_stored / busy if busy > 0 else 0.0

    @property
    def trace_hit_rate(self) -> float:
        return self.trace_hit_tokens / self.trace_prompt_tokens if self.trace_prompt_tokens else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(events_per_s=self.events_per_s, blocks_per_s=self.blocks_per_s,
                 decode_us_per_event=1e6 * self.decode_s / self.events if self.events else 0.0,
                 index_us_per_event=1e6 * self.index_s / self.events if self.events else 0.0,
                 trace_hit_rate=self.trace_hit_rate)
        return d


class _HashCheck:
    """Recomputes each BlockStored's ids from its tokens (stream conformance)."""

    def __init__(self, scheme, memory: int, path: str):
        self.scheme = scheme
        self.path = path
        self.memory = max(1024, int(memory))
        self.states: OrderedDict = OrderedDict()

    def check(self, op: StoreOp, default_bs: int, res: EventReplayResult) -> None:
        if op.token_ids is None or not len(op.block_hashes):
            return
        n = len(op.block_hashes)
        bs = op.block_size or default_bs
        sch = self.scheme
        if op.parent is None:
            state = None
        elif op.raw_parent is not None:
            state = sch.state_from_wire(op.raw_parent)
        elif sch.state_is_id:
            state = op.parent
        else:
            state = self.states.get(op.parent)
            if state is None:
                res.hash_unverifiable += 1
                return
        toks = _tokens(op.token_ids, f"{self.path}: frame {op.frame}")
        if len(toks) < n * bs:
            res.hash_unverifiable += 1
            return
        ids, last = sch.chain(toks[:n * bs], bs, state, op.extra_keys)
        res.hash_checked += n
        bad = int(np.count_nonzero(ids != op.block_hashes))
        res.hash_mismatches += bad
        if not sch.state_is_id:
            st = self.states
            st[int(op.block_hashes[-1])] = (sch.state_from_wire(op.raw_hashes[-1])
                                            if op.raw_hashes else last)
            if len(st) > self.memory:
                st.popitem(last=False)


def _lookup_requests(path: str, scheme_name: str | None, hash_options: dict, block_size: int):
    """(timestamps, requests) of a lookup trace: token-jsonl, or hash-id JSONL whose
    ``hash_ids`` are the engine's own block hashes (used as given)."""
    from prefixbench.errors import TraceFormatError
    from prefixbench.workloads.model import Request
    try:
        with open(path, "rb") as f:
            first = next((ln for ln in f if ln.strip()), b"{}")
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        keys = json.loads(first)
    except ValueError:
        raise TraceFormatError(f"{path}:1: invalid JSON") from None
    if isinstance(keys, dict) and "hash_ids" in keys:
        stamps, reqs = [], []
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                obj = json.loads(line)
                ids = obj.get("hash_ids")
                if not isinstance(ids, list):
                    raise TraceFormatError(f"{path}:{lineno}: 'hash_ids' must be a list")
                a = np.array([int(x) & ((1 << 64) - 1) for x in ids], dtype=np.uint64)
                stamps.append(float(obj.get("timestamp", np.nan)))
                reqs.append(Request(0, len(reqs), a, a, len(a) * block_size))
        return np.array(stamps), reqs
    if not scheme_name:
        raise ConfigError("option lookups: a token-jsonl lookup trace is hashed with the "
                          "engine's scheme; give block_hash= (e.g. vllm-sha256-cbor)")
    from prefixbench.workloads.tokenjsonl import TokenJsonlWorkload
    w = TokenJsonlWorkload(path, block_size=block_size, block_hash=scheme_name,
                           hash_options=hash_options)
    reqs = list(w.requests())
    return w.timestamps[w.order], reqs


def replay_events(strategy, workload: KvEventsWorkload, *, oracle=None, check_hashes: bool = True,
                  progress=None, meta_size: int = 16, clock=time.perf_counter) -> EventReplayResult:
    """Apply a capture to ``strategy`` (and ``oracle``, when given); see the module docstring.
    ``clock`` times decoding and index work (``time.process_time`` counts this process's
    CPU only, for a machine shared with other work)."""
    res = EventReplayResult(getattr(strategy, "name", "?"), workload.path)
    stats = DecodeStats()
    scheme = None
    if workload.block_hash and check_hashes:
        from prefixbench.workloads.hashschemes import make_hash_scheme
        scheme = make_hash_scheme(workload.block_hash, **workload.hash_options)
        res.hash_scheme = workload.block_hash
    hcheck = _HashCheck(scheme, workload.parent_memory, workload.path) if scheme is not None else None
    trace_ts, trace = (None, [])
    if workload.lookups:
        trace_ts, trace = _lookup_requests(workload.lookups, workload.block_hash,
                                           workload.hash_options, workload.block_size)
    ti = 0
    t_ev0 = None
    timed = bool(len(trace)) and not np.isnan(trace_ts).any()
    t_tr0 = float(trace_ts[0]) if timed else 0.0
    if oracle is not None:
        res.oracle_hit_blocks = 0
        if trace:
            res.trace_oracle_hit_tokens = 0
    bs = workload.block_size
    perf = clock
    it = iter_decoded(workload.path, stats, workload.strict, ops=hcheck is not None)
    applier = _kv.ChainApply(strategy, oracle, workload.parent_memory, meta_size)
    apply = applier.apply
    wall0 = time.perf_counter()
    cpu0 = time.process_time()

    def run_lookups(upto: float | None):
        nonlocal ti
        if upto is not None and not timed:
            return
        while ti < len(trace) and (upto is None or trace_ts[ti] - t_tr0 < upto):
            r = trace[ti]
            ti += 1
            m = strategy.match(r.match_ids)
            res.trace_requests += 1
            res.trace_prompt_tokens += r.prompt_tokens
            res.trace_hit_tokens += m.n_blocks * bs
            if oracle is not None:
                res.trace_oracle_hit_tokens += oracle.match(r.match_ids).n_blocks * bs

    while True:
        t0 = perf()
        try:
            fr, batch, ops = next(it)
        except StopIteration:
            res.decode_s += perf() - t0
            break
        t1 = perf()
        res.decode_s += t1 - t0
        n_ops = len(batch[3])
        if trace and n_ops:
            if t_ev0 is None:
                t_ev0 = batch[0]
            run_lookups(batch[0] - t_ev0)
            t1 = perf()
        if hcheck is not None:
            for op in ops:
                if type(op) is StoreOp:
                    hcheck.check(op, bs, res)
        apply(batch)
        res.index_s += perf() - t1
        if progress is not None:
            progress(n_ops)
    run_lookups(None)
    res.wall_s = time.perf_counter() - wall0
    res.cpu_s = time.process_time() - cpu0
    c = applier.counters()
    res.lookups, res.lookup_blocks, res.hit_blocks = c["lookups"], c["lookup_blocks"], \
        c["hit_blocks"]
    res.ancestor_blocks, res.consistency_misses = c["ancestor_blocks"], c["consistency_misses"]
    res.removes_ignored = c["removes_ignored"]
    if oracle is not None:
        res.oracle_hit_blocks = c["oracle_hit_blocks"]
    for k in ("events", "batches", "stores", "removes", "clears", "blocks_stored",
              "blocks_removed", "seq_gaps", "seq_missing", "seq_duplicates", "replayed_frames"):
        setattr(res, k, getattr(stats, k))
    res.unknown_types = dict(stats.unknown_types)
    res.unknown_events = stats.unknown_events
    res.unknown_parents = c["unknown_parents"]
    res.live_blocks = c["live_blocks"]
    res.workers = len(c["workers"])
    res.workers_folded = c["workers_folded"]
    st = strategy.stats() if hasattr(strategy, "stats") else {}
    for key in ("live_blocks", "entries", "blocks"):
        if isinstance(st.get(key), (int, np.integer)):
            res.index_live_blocks = int(st[key])
            break
    return res


def format_event_replay(res: EventReplayResult) -> str:
    """The replay's figures as a short table."""
    rows = [
        ("events", f"{res.events:,} in {res.batches:,} batches ({res.stores:,} stored, "
                   f"{res.removes:,} removed, {res.clears:,} cleared)"),
        ("blocks stored / removed", f"{res.blocks_stored:,} / {res.blocks_removed:,}"),
        ("ingest", f"{res.events_per_s:,.0f} events/s, {res.blocks_per_s:,.0f} blocks/s"),
        ("per event", f"{1e6 * res.decode_s / max(res.events, 1):.2f} us decoding + "
                      f"{1e6 * res.index_s / max(res.events, 1):.2f} us index work"),
        ("lookups (BlockStored chains)", f"{res.lookups:,}: {res.hit_blocks:,} of "
                                         f"{res.lookup_blocks:,} blocks hit"),
        ("consistency misses", f"{res.consistency_misses:,} lookups found fewer than their "
                               f"{res.ancestor_blocks:,} ancestor blocks in total"),
        ("unknown parents", f"{res.unknown_parents:,} (chains started there)"),
        ("unknown event types", f"{res.unknown_events:,}"
                                + (f" {res.unknown_types}" if res.unknown_types else "")),
        ("live blocks at the end", f"{res.live_blocks:,} on {res.workers} worker(s)"
                                   + (" (folded onto worker 0)" if res.workers_folded else "")),
        ("sequence", f"{res.seq_gaps} gaps ({res.seq_missing} frames missing), "
                     f"{res.seq_duplicates} duplicates, {res.replayed_frames} replayed frames"),
    ]
    if res.oracle_hit_blocks is not None:
        rows.append(("oracle hit blocks", f"{res.oracle_hit_blocks:,}"))
    if res.removes_ignored:
        rows.append(("removes ignored", f"{res.removes_ignored:,} (the strategy cannot remove)"))
    if res.hash_scheme:
        rows.append((f"hash check ({res.hash_scheme})",
                     f"{res.hash_checked:,} blocks recomputed, {res.hash_mismatches:,} mismatches, "
                     f"{res.hash_unverifiable:,} events unverifiable"))
    if res.trace_requests:
        extra = ""
        if res.trace_oracle_hit_tokens is not None and res.trace_prompt_tokens:
            extra = f" (oracle {res.trace_oracle_hit_tokens / res.trace_prompt_tokens:.2%})"
        rows.append(("lookup trace", f"{res.trace_requests:,} requests, token hit rate "
                                     f"{res.trace_hit_rate:.2%}{extra}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def write_json(path: str, res: EventReplayResult) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(res.as_dict(), f, indent=1, default=str)
    os.replace(tmp, path)


# -- the command line ---------------------------------------------------------------
def add_commands(sub, commands: dict) -> None:
    """``events record|publish|replay|bench`` and ``hash`` on the CLI's subparsers."""
    p = sub.add_parser("events", help="KV-event streams: record a publisher, publish a "
                       "synthetic one, replay a capture into an index",
                       description="vLLM/SGLang KV events (ZMQ [topic, seq, msgpack EventBatch]).")
    esub = p.add_subparsers(dest="events_command", metavar="SUBCOMMAND")
    r = esub.add_parser("record", help="record a publisher's frames (with gap detection)",
                        description="A pyzmq SUB that writes every frame with its receive time; "
                        "sequence gaps are detected and, with --replay-endpoint, fetched through "
                        "vLLM's ROUTER replay protocol.")
    r.add_argument("endpoint", metavar="tcp://HOST:PORT", help="the publisher's PUB endpoint")
    r.add_argument("-o", "--output", required=True, help="capture file to write")
    r.add_argument("--topic", default="", help="topic prefix to subscribe to (default: all)")
    r.add_argument("--duration", type=float, metavar="S", help="stop after S seconds "
                   "(default: until Ctrl-C or --frames)")
    r.add_argument("--frames", type=int, metavar="N", help="stop after N frames")
    r.add_argument("--replay-endpoint", metavar="tcp://HOST:PORT",
                   help="the publisher's ROUTER replay endpoint, to fetch missed batches")
    r.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="fail when nothing arrives for S seconds at the start, or a replay "
                   "request goes unanswered (default: %(default)s)")
    r.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    pb = esub.add_parser("publish", help="publish a synthetic stream like vLLM's publisher",
                         description="Bind PUB (and ROUTER for replays) and send N synthetic "
                         "EventBatches hashed with a real scheme, at a fixed rate.")
    pb.add_argument("endpoint", metavar="tcp://HOST:PORT")
    pb.add_argument("--replay-endpoint", metavar="tcp://HOST:PORT")
    pb.add_argument("--batches", type=int, default=10000, help="default: %(default)s")
    pb.add_argument("--events-per-batch", type=int, default=1, help="default: %(default)s")
    pb.add_argument("--rate", type=float, default=0.0, metavar="FRAMES/S",
                    help="frames per second (default: as fast as possible)")
    pb.add_argument("--form", choices=("map", "array"), default="map",
                    help="tagged maps (vLLM now) or positional arrays (older) (default: map)")
    pb.add_argument("--block-hash", default="vllm-sha256-cbor", help="default: %(default)s")
    pb.add_argument("--workers", type=int, default=1, help="data_parallel_rank values to cycle")
    pb.add_argument("--skip", default="", metavar="SEQ,SEQ",
                    help="seqs left out of the live stream (still served by replay)")
    pb.add_argument("--topic", default="")
    pb.add_argument("--delay", type=float, default=1.0, help="seconds to wait for subscribers")
    pb.add_argument("--linger", type=float, default=1.0, help="seconds to keep serving replays")
    pb.add_argument("--seed", type=int, default=1)
    pb.add_argument("--cycle", type=int, metavar="N",
                    help="encode only N distinct batches and send them over and over (for "
                    "long high-rate runs, where encoding every batch would take longer "
                    "than sending it)")
    for name, helptext in (("replay", "apply a capture to an index and report what it saw"),
                           ("bench", "ingest rate of a capture: events/s with the per-event "
                            "split into decoding and index work (no oracle)")):
        q = esub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        q.add_argument("capture", nargs="?" if name == "bench" else None,
                       help="capture file, or concatenated msgpack EventBatches"
                       + (" (bench with --record-rate: optional; the recorded capture is "
                          "ingested when it is left out)" if name == "bench" else ""))
        q.add_argument("--strategy", "-s", default="dram-blockhash", help="default: %(default)s")
        q.add_argument("--strategy-option", "-S", action="append", default=[], metavar="KEY=VALUE")
        q.add_argument("--engine", "-e", help="engine, for strategies that store their index")
        q.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
        q.add_argument("--cache-bytes", default="64MiB")
        q.add_argument("--workload-option", "-W", action="append", default=[], metavar="KEY=VALUE",
                       help="kv-events option: block_size=, block_hash= (recompute and check "
                       "every block hash), hash_seed=, parent_memory=, lookups=FILE, strict=1")
        q.add_argument("--strict", action="store_true", help="an unknown event type is an error")
        q.add_argument("--json", metavar="FILE", help="write the figures as JSON")
        if name == "replay":
            q.add_argument("--no-oracle", action="store_true",
                           help="no radix oracle shadowing the index")
        else:
            q.add_argument("--repeat", type=int, default=3, help="best of (default: %(default)s)")
            q.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                           help="time the decode/index split with the wall clock, or this "
                           "process's CPU time (for a machine shared with other work); both "
                           "totals are printed either way (default: %(default)s)")
            q.add_argument("--record-rate", type=float, metavar="EVENTS/S",
                           help="first measure record: 'events publish' in a separate process "
                           "on 127.0.0.1 sends one event per frame at this rate, 'events "
                           "record' takes it here; prints frames, gaps and the rate kept")
            q.add_argument("--record-seconds", type=float, default=5.0, metavar="S",
                           help="how long the publisher sends for --record-rate "
                           "(default: %(default)s)")
    commands["events"] = cmd_events
    h = sub.add_parser("hash", help="a block-hash scheme's ids for a token file",
                       description="Print the block ids a scheme gives a token sequence, to check "
                       "them against your deployment's KV events.")
    h.add_argument("--scheme", default="pbh64", help="pbh64, vllm-sha256-cbor, vllm-xxhash, "
                   "sglang-sha256, dynamo-xxh3 (default: %(default)s)")
    h.add_argument("--tokens", required=True, metavar="FILE",
                   help="token ids: a JSON list, a JSON object with prompt_token_ids, or "
                   "integers separated by spaces, commas or newlines ('-' reads stdin)")
    h.add_argument("--block-size", type=int, default=16, help="default: %(default)s")
    h.add_argument("--hash-seed", help="vLLM schemes: the engine's PYTHONHASHSEED (default 0)")
    commands["hash"] = cmd_hash


def read_token_file(path: str) -> np.ndarray:
    """Token ids from a file (see ``prefixbench hash --help``); one line on bad input."""
    import sys
    from prefixbench.errors import TraceFormatError
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    s = text.strip()
    if s.startswith("[") or s.startswith("{"):
        try:
            obj = json.loads(s)
        except ValueError as e:
            raise TraceFormatError(f"{path}: invalid JSON: {e}") from None
        if isinstance(obj, dict):
            obj = obj.get("prompt_token_ids", obj.get("token_ids"))
        if not isinstance(obj, list):
            raise TraceFormatError(f"{path}: expected a list of token ids")
        vals = obj
    else:
        vals = s.replace(",", " ").split()
    out = np.empty(len(vals), dtype=np.uint32)
    for i, v in enumerate(vals):
        try:
            x = int(v)
            if isinstance(v, (bool, float)):
                raise ValueError
        except (TypeError, ValueError):
            raise TraceFormatError(f"{path}: token {i} is {v!r}, not an integer") from None
        if not 0 <= x <= 0xFFFFFFFF:
            raise TraceFormatError(f"{path}: token {i} = {x} is outside the u32 range "
                                   "[0, 4294967295]")
        out[i] = x
    return out


def cmd_hash(args, leftover, argv, quiet):
    from prefixbench.workloads.hashschemes import make_hash_scheme
    if args.block_size < 1:
        raise ConfigError(f"option --block-size: {args.block_size} must be >= 1")
    opts = {} if args.hash_seed is None else {"hash_seed": args.hash_seed}
    scheme = make_hash_scheme(args.scheme, **opts)
    toks = read_token_file(args.tokens)
    ids, _ = scheme.chain(toks, args.block_size)
    print(f"# {scheme.name}: {scheme.upstream}; {len(toks)} tokens, {len(ids)} full blocks of "
          f"{args.block_size}; columns: block, id as published, hex")
    for i, x in enumerate(ids.tolist()):
        print(f"{i} {scheme.wire(x)} {x:016x}")
    return 0


def _kv_workload(args):
    from prefixbench.harness.build import parse_kv
    from prefixbench.workloads.kvevents import kv_events
    opts = parse_kv("--workload-option", args.workload_option)
    opts["path"] = args.capture
    if args.strict:
        opts["strict"] = True
    return kv_events(**opts)


def _build(args, block_tokens: int):
    from prefixbench.harness.build import build, parse_kv, parse_size
    return build(args.strategy, args.engine,
                 strategy_options=parse_kv("--strategy-option", args.strategy_option),
                 cache_bytes=parse_size("--cache-bytes", args.cache_bytes),
                 engine_options=parse_kv("--engine-option", args.engine_option),
                 block_tokens=block_tokens)


def cmd_events(args, leftover, argv, quiet):
    sub = getattr(args, "events_command", None)
    if sub is None:
        raise ConfigError("events: give a subcommand: record, publish, replay or bench")
    if sub == "record":
        if args.duration is not None and args.duration <= 0:
            raise ConfigError(f"option --duration: {args.duration} must be > 0 seconds")
        if args.timeout <= 0:
            raise ConfigError(f"option --timeout: {args.timeout} must be > 0 seconds")
        from prefixbench.harness.progress import progress
        bar = progress(None, "record", quiet, unit="frame")
        try:
            res = record(args.endpoint, args.output, topic=args.topic, duration=args.duration,
                         replay_endpoint=args.replay_endpoint, max_frames=args.frames,
                         timeout=args.timeout, progress=bar.update)
        finally:
            bar.close()
        print(f"recorded {res.frames:,} frames ({res.live_frames:,} live, "
              f"{res.replayed_frames:,} replayed) in {res.elapsed_s:.2f} s, "
              f"{res.rate:,.0f} frames/s from the first to the last, to {res.path}; "
              f"seq {res.first_seq}..{res.last_seq}: "
              f"{res.gaps} gaps, {res.missing} frames missing, {res.duplicates} duplicates"
              + (f", {res.malformed} malformed" if res.malformed else ""))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(asdict(res) | {"rate": res.rate}, f, indent=1)
        return 0
    if sub == "publish":
        check_endpoint("ENDPOINT", args.endpoint)
        try:
            skip = {int(x) for x in args.skip.split(",") if x.strip()}
        except ValueError:
            raise ConfigError(f"option --skip: {args.skip!r} is not a list of seqs") from None
        if args.batches < 1 or args.events_per_batch < 1 or args.workers < 1:
            raise ConfigError("options --batches, --events-per-batch, --workers: must be >= 1")
        if args.cycle is not None and args.cycle < 1:
            raise ConfigError(f"option --cycle: {args.cycle} must be >= 1")
        distinct = min(args.batches, args.cycle or args.batches)
        payloads = synthetic_batches(distinct, form=args.form, scheme=args.block_hash,
                                     events_per_batch=args.events_per_batch, seed=args.seed,
                                     workers=args.workers)
        if distinct < args.batches:
            payloads = [payloads[i % distinct] for i in range(args.batches)]
        t0 = time.monotonic()
        n = publish(args.endpoint, payloads, replay_endpoint=args.replay_endpoint,
                    rate=args.rate, topic=args.topic, skip=skip, delay=args.delay,
                    linger=args.linger)
        if not quiet:
            print(f"published {n:,} batches ({n * args.events_per_batch:,} events) in "
                  f"{time.monotonic() - t0:.2f} s")
        return 0
    if sub == "bench" and args.record_rate is not None:
        rec = bench_record(args.record_rate, args.record_seconds, quiet)
        if args.capture is None:
            args.capture = rec["path"]
    elif sub == "bench" and args.capture is None:
        raise ConfigError("events bench: give a capture file, or --record-rate to record one")
    wl = _kv_workload(args)
    if sub == "replay":
        from prefixbench.harness.progress import progress
        built = _build(args, wl.block_size)
        oracle = None
        if not args.no_oracle:
            from prefixbench.harness.replay import make_oracle
            oracle = make_oracle(16)
        bar = progress(None, f"events {args.strategy}", quiet, unit="ev")
        try:
            res = replay_events(built.strategy, wl, oracle=oracle, progress=bar.update)
        finally:
            bar.close()
            built.close()
        print(format_event_replay(res))
        if args.json:
            write_json(args.json, res)
        return 0
    # bench: decode everything once (timed), then apply (timed), best of --repeat
    if args.repeat < 1:
        raise ConfigError(f"option --repeat: {args.repeat} must be >= 1")
    best = None
    for _ in range(args.repeat):
        built = _build(args, wl.block_size)
        try:
            res = replay_events(built.strategy, wl, oracle=None, check_hashes=False,
                                clock=time.process_time if args.clock == "cpu" else time.perf_counter)
        finally:
            built.close()
        if best is None or res.events_per_s > best.events_per_s:
            best = res
    print(f"{best.strategy}: {best.events:,} events ({best.blocks_stored:,} blocks stored) "
          f"from {wl.path}, batched as captured, no oracle, best of {args.repeat}, "
          f"split timed by {'CPU time' if args.clock == 'cpu' else 'the wall clock'} "
          f"({twins.IMPLEMENTATION})")
    print(f"  {best.events_per_s:,.0f} events/s, {best.blocks_per_s:,.0f} blocks/s; per event "
          f"{1e6 * best.decode_s / max(best.events, 1):.2f} us decoding + "
          f"{1e6 * best.index_s / max(best.events, 1):.2f} us index work")
    ev = max(best.events, 1)
    print(f"  whole run: {best.wall_s:.3f} s wall ({best.events / best.wall_s if best.wall_s else 0:,.0f}"
          f" events/s), {best.cpu_s:.3f} s CPU ({best.events / best.cpu_s if best.cpu_s else 0:,.0f}"
          f" events/s, {1e6 * best.cpu_s / ev:.2f} us per event)")
    if args.json:
        write_json(args.json, best)
    return 0


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_record(rate: float, seconds: float, quiet: bool, out: str | None = None) -> dict:
    """``record`` against a local publisher in a separate process (one event per frame,
    ``rate`` frames/s for ``seconds``); prints and returns what the recorder saw."""
    import subprocess
    import sys
    import tempfile
    if not rate > 0:
        raise ConfigError(f"option --record-rate: {rate} must be > 0 events/s")
    if not seconds > 0:
        raise ConfigError(f"option --record-seconds: {seconds} must be > 0")
    n = max(1, int(rate * seconds))
    if out is None:
        out = os.path.join(tempfile.mkdtemp(prefix="prefixbench-record-"), "bench.pbkv")
    port = _free_port()
    cmd = [sys.executable, "-m", "prefixbench", "-q", "events", "publish",
           f"tcp://127.0.0.1:{port}", "--batches", str(n), "--rate", repr(float(rate)),
           "--cycle", "4096", "--block-hash", "pbh64", "--delay", "1.5", "--linger", "0.2"]
    pub = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    from prefixbench.harness.progress import progress
    bar = progress(n, "record", quiet, unit="frame")
    cpu0 = time.process_time()
    try:
        res = record(f"tcp://127.0.0.1:{port}", out, max_frames=n,
                     duration=seconds + 30.0, timeout=20.0, progress=bar.update)
    finally:
        bar.close()
        try:
            _, err = pub.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pub.kill()
            _, err = pub.communicate()
    cpu = time.process_time() - cpu0
    if pub.returncode:
        line = (err or b"").decode("utf-8", "replace").strip().splitlines()
        raise PrefixbenchError(f"events bench --record-rate: the publisher exited with "
                               f"{pub.returncode}: {line[-1] if line else 'no message'}")
    print(f"record: publisher at {rate:,.0f} events/s (one event per frame, separate process, "
          f"127.0.0.1) for {seconds:g} s: {res.frames:,} of {n:,} frames recorded, "
          f"{res.rate:,.0f} frames/s kept from the first to the last; {res.gaps} gaps, "
          f"{res.missing} missing, {res.duplicates} duplicates; recorder CPU "
          f"{1e6 * cpu / max(res.frames, 1):.2f} us per frame; capture {out}")
    return asdict(res) | {"rate": res.rate, "offered_rate": rate, "path": out,
                          "recorder_cpu_s": cpu}
