"""Pre-flight: will a long build fit on this machine?  Decided before it starts.

A ``--scale paper`` sweep or a ``recover -n`` build can run for an hour and
then die of a full disk or the OOM killer.  So both first estimate what they
will need from the entry count and the layout, compare it with what is free
(``shutil.disk_usage`` of the directory the store goes to,
``psutil.virtual_memory().available``), and refuse with one line that names
what to lower; ``--force`` skips the refusal.  ``reproduce`` runs the same
estimates for every experiment it has still to run before the first starts
(:func:`prefixbench.harness.reproduce.check_resources`).

The estimates are deliberately rough and on the high side - they are bytes
per indexed block measured on this project's layouts (lmcache-agent, 750k
blocks), times margins:

* on disk, a store strategy's *logical* bytes per block (ssd-blockhash's
  8-byte key + 16-byte value = 24 B; segment layouts somewhat more, since
  copied segments repeat blocks; segment-hash about six records per block)
  times the engine's amplification (disk / logical: lmdb's half-full B-tree
  pages about 2.2x, RocksDB's SST plus WAL and compaction headroom 2x);
  the ``memory`` engine keeps that store in RAM instead;
* in memory, each strategy's own state per block (``dram-blockhash`` 24 B /
  table load 0.7, sarp's routing directory ~2 B), the counting pass's sorted
  arrays of seen blocks, the workload stream's live contexts (8 B per block at
  worst), the replay's per-request arrays, the engine cache, and the
  interpreter's baseline.  The ``radix`` tree (the oracle of every sweep) is
  counted as it allocates (:func:`radix_memory_bytes`): its pools and its id
  index double, so it holds 120-150 B per block, not the 37 B its snapshot
  writes;
* a kept load (``--loads once``) snapshots the oracle and the strategy while
  both are loaded, and a snapshot is a copy of the state's arrays: their
  bytes come on top of the loaded state at that moment.

A check passes when the need is at most :data:`HEADROOM` of what is free:
the machine keeps a tenth for everything else.  Unknown strategies and
engines get conservative defaults, so a plugin is never refused for lack of
a figure, only for size.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from prefixbench.errors import ConfigError

GIB = 1 << 30
#: share of the free disk / memory a build may plan to use
HEADROOM = 0.9
#: the interpreter, NumPy, the engine bindings: resident before any index exists
BASE_RSS = 300 << 20

#: logical store bytes per indexed block (keys + values the layout writes)
STORE_BYTES_PER_BLOCK = {
    "ssd-blockhash": 24.0,
    "sarp": 27.0,
    "segment-radix": 27.0,
    "segment-radix-capped": 27.0,
    "segment-hash": 150.0,
}
DEFAULT_STORE_BYTES_PER_BLOCK = 150.0
#: disk bytes per logical byte, per engine
ENGINE_AMPLIFICATION = {"lmdb": 2.2, "rocksdb": 2.0, "wiredtiger": 2.0, "packfile": 1.6}
DEFAULT_AMPLIFICATION = 2.5
#: engines that keep the store in this process's memory (amplification applies there)
IN_MEMORY_ENGINES = frozenset({"memory"})
#: a strategy's own in-memory bytes per indexed block (for ``radix``: what its
#: snapshot holds; its resident tree is :func:`radix_memory_bytes`)
MEMORY_BYTES_PER_BLOCK = {
    "radix": 42.0,
    "dram-blockhash": 24.0 / 0.7,
    "sarp": 2.0,
    "segment-radix": 2.0,
    "segment-radix-capped": 2.0,
    "ssd-blockhash": 0.0,
    "segment-hash": 0.0,
}
DEFAULT_MEMORY_BYTES_PER_BLOCK = 64.0
#: the radix tree's allocation (plugins/_radix.pyx): per pool slot a block id, an
#: availability word and an id-chain link (8 B each) plus the metadata; per slot of
#: its id index 16 B
RADIX_POOL_SLOT_BYTES = 24
RADIX_ID_SLOT_BYTES = 16
#: the pool's first allocation (the strategy's ``initial_blocks`` default)
RADIX_INITIAL_POOL = 1024
#: its node table and child table (16 B entries each, with their power-of-two
#: slack) per block: the profiles hold 0.05-0.07 nodes per block
RADIX_NODE_BYTES_PER_BLOCK = 10.0


def snapshot_bytes(strategy: str, entries: int) -> float:
    """Bytes of ``strategy``'s snapshot at ``entries`` blocks: on disk once written, and
    in memory while it is taken (a copy of the state's arrays)."""
    return entries * MEMORY_BYTES_PER_BLOCK.get(strategy, DEFAULT_MEMORY_BYTES_PER_BLOCK)


def _doubled(start: int, at_least: float) -> int:
    """``start`` doubled until it reaches ``at_least``: a table that grows by doubling."""
    n = start
    while n < at_least:
        n *= 2
    return n


def radix_memory_bytes(entries: int, meta_size: int = 16) -> float:
    """Resident bytes of a radix tree holding ``entries`` blocks, as it allocates:
    its pools double from :data:`RADIX_INITIAL_POOL` slots, and its id index doubles
    to keep at least two slots per block (measured: 124.5 B per block on ultrachat
    at 4.95M blocks, 142.7 on codeact at 0.55M; this gives 132 and 147)."""
    pool = _doubled(RADIX_INITIAL_POOL, entries)
    index = _doubled(64, 2 * entries)
    return (pool * (RADIX_POOL_SLOT_BYTES + meta_size) + index * RADIX_ID_SLOT_BYTES
            + entries * RADIX_NODE_BYTES_PER_BLOCK)


#: the counting pass: sorted uint64 arrays of the blocks seen, 8 B per block and about 17 while the two largest merge
COUNTING_BYTES_PER_BLOCK = 24.0
#: the synthetic stream's live per-session contexts, at worst every block once
STREAM_BYTES_PER_BLOCK = 8.0
#: per request: known-prefix counts and latency buffers (int64 each)
REQUEST_BYTES = 32.0
#: requests are at most this many blocks apart on average (a bound for the arrays)
BLOCKS_PER_REQUEST_LOW = 8.0


@dataclass
class Need:
    """Bytes one build needs: ``disk`` under ``disk_dir``, ``memory`` resident."""

    disk: float
    memory: float
    disk_dir: str
    parts: dict = field(default_factory=dict)


@dataclass
class Free:
    disk: float
    memory: float


def store_disk_bytes(strategy: str, engine: str | None, entries: int, *,
                     needs_store: bool = True) -> float:
    """Disk bytes of ``strategy``'s store on ``engine`` at ``entries`` blocks."""
    if not needs_store or engine is None or engine in IN_MEMORY_ENGINES:
        return 0.0
    per = STORE_BYTES_PER_BLOCK.get(strategy, DEFAULT_STORE_BYTES_PER_BLOCK)
    return entries * per * ENGINE_AMPLIFICATION.get(engine, DEFAULT_AMPLIFICATION)


#: resident bytes per entry of a local redis-server holding the store in the default
#: ``layout=hash`` (measured: about 2.1 GB of RSS at 1e7 ssd-blockhash/redis-blockhash
#: entries; 216 B RSS, 198 B used_memory at 1e6); a cluster's replicas hold a second copy
SERVER_MEMORY_BYTES_PER_BLOCK = {"redis": 215.0, "redis-cluster": 430.0}
#: the same for the redis engine's ``layout=packed`` while its buckets stay listpacks
#: (at most 4/5 of ``PACKED_LISTPACK_ENTRIES`` entries per bucket on average, so that
#: hardly any bucket passes the limit; measured 46-63 B
#: RSS, 31-37 B used_memory per entry at 1e6 entries, pack_bits 12-16), and once they
#: are hash tables (measured 105 B RSS, 89 B used_memory, pack_bits 10: 977 per bucket)
PACKED_SERVER_MEMORY_BYTES_PER_BLOCK = 65.0
PACKED_TABLE_SERVER_MEMORY_BYTES_PER_BLOCK = 110.0
#: hash-max-listpack-entries of Debian's redis-server 7.0 (CONFIG GET says 512)
PACKED_LISTPACK_ENTRIES = 512


def server_memory_bytes_per_block(engine: str, entries: int,
                                  engine_options: dict | None = None) -> float | None:
    """Resident server bytes per entry for a server engine (None: not a server engine);
    the redis engine's ``layout`` and ``pack_bits`` options decide its figure."""
    if engine not in SERVER_MEMORY_BYTES_PER_BLOCK:
        return None
    opts = engine_options or {}
    if engine == "redis" and opts.get("layout") == "packed":
        from prefixbench.engines.redis import DEFAULT_PACK_BITS, MAX_PACK_BITS
        try:
            bits = int(opts.get("pack_bits", DEFAULT_PACK_BITS))
        except (TypeError, ValueError):
            bits = DEFAULT_PACK_BITS        # the engine refuses it with its own line
        if entries * 5 <= 4 * PACKED_LISTPACK_ENTRIES * (1 << max(0, min(bits, MAX_PACK_BITS))):
            return PACKED_SERVER_MEMORY_BYTES_PER_BLOCK
        return PACKED_TABLE_SERVER_MEMORY_BYTES_PER_BLOCK
    return SERVER_MEMORY_BYTES_PER_BLOCK[engine]


def strategy_memory_bytes(strategy: str, engine: str | None, entries: int, *,
                          needs_store: bool = True, cache_bytes: int = 0,
                          engine_options: dict | None = None) -> float:
    """Resident bytes of ``strategy`` (and an in-memory engine's store) at ``entries``."""
    if strategy == "radix":
        mem = radix_memory_bytes(entries)
    else:
        mem = entries * MEMORY_BYTES_PER_BLOCK.get(strategy, DEFAULT_MEMORY_BYTES_PER_BLOCK)
    if needs_store and engine is not None:
        server = server_memory_bytes_per_block(engine, entries, engine_options)
        if engine in IN_MEMORY_ENGINES:
            per = STORE_BYTES_PER_BLOCK.get(strategy, DEFAULT_STORE_BYTES_PER_BLOCK)
            mem += entries * per * 1.5
        elif server is not None:
            mem += entries * server
        else:
            mem += cache_bytes
    return mem


def existing_dir(path: str | None) -> str:
    """``path`` or its nearest existing parent (the build creates the rest)."""
    p = os.path.abspath(path or tempfile.gettempdir())
    while not os.path.isdir(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def free_space(disk_dir: str) -> Free:
    """What is free now: disk under ``disk_dir`` and available memory."""
    import psutil
    return Free(float(shutil.disk_usage(disk_dir).free),
                float(psutil.virtual_memory().available))


def _needs_store(strategy: str) -> bool:
    from prefixbench.registry import get_registry
    try:
        return bool(getattr(get_registry().get("strategy", strategy).factory,
                            "needs_store", False))
    except Exception:
        return True


def sweep_need(entries: int, strategies, engine: str | None, *, cache_bytes: int,
               work_dir: str | None = None, run_requests: int = 0,
               engine_options: dict | None = None, together: bool = False,
               kept: bool = False) -> Need:
    """A load/run sweep: one counting pass, then each strategy on a fresh store in turn
    beside the radix oracle (stores are removed between settings: the largest counts).
    ``together``: every strategy's store and oracle are held at once (interleaved runs),
    so they add up.  ``kept``: each strategy's loaded store and index snapshot, and one
    oracle snapshot, stay on disk for the whole sweep (``--loads once``), and taking
    those snapshots copies the loaded oracle's and strategy's arrays in memory."""
    pick = sum if together else (lambda xs: max(xs, default=0.0))
    store = {s: store_disk_bytes(s, engine, entries, needs_store=_needs_store(s))
             for s in dict.fromkeys(strategies)}
    disk = pick([store[s] for s in strategies])
    if kept:
        disk += sum(b + snapshot_bytes(s, entries)
                    for s, b in store.items()) + snapshot_bytes("radix", entries)
    requests = entries / BLOCKS_PER_REQUEST_LOW
    counting = entries * (COUNTING_BYTES_PER_BLOCK + STREAM_BYTES_PER_BLOCK)
    oracle = radix_memory_bytes(entries) * (len(strategies) if together else 1)
    biggest = pick([strategy_memory_bytes(s, engine, entries, needs_store=_needs_store(s),
                                          cache_bytes=cache_bytes,
                                          engine_options=engine_options) for s in strategies])
    loading = oracle + biggest + entries * STREAM_BYTES_PER_BLOCK
    snapshots = 0.0
    if kept:        # the oracle's and one strategy's snapshot copies, beside both
        snapshots = snapshot_bytes("radix", entries) + max(
            (snapshot_bytes(s, entries) for s in strategies), default=0.0)
        loading += snapshots
    memory = BASE_RSS + requests * REQUEST_BYTES + run_requests * REQUEST_BYTES \
        + max(counting, loading)
    return Need(disk, memory, existing_dir(work_dir),
                {"store": disk, "oracle": oracle, "index": biggest, "counting": counting,
                 "snapshots": snapshots})


def recover_need(entries: int, strategy: str, engine: str | None, *, cache_bytes: int,
                 work_dir: str | None = None, engine_options: dict | None = None) -> Need:
    """``recover``: one build (its store, or a snapshot the size of its in-memory state)."""
    store = _needs_store(strategy)
    disk = store_disk_bytes(strategy, engine, entries, needs_store=store)
    mem = strategy_memory_bytes(strategy, engine, entries, needs_store=store,
                                cache_bytes=cache_bytes, engine_options=engine_options)
    snapshot = snapshot_bytes(strategy, entries)
    # the recovery child holds a second copy of the in-memory state while the parent waits
    memory = BASE_RSS * 2 + mem + snapshot
    return Need(disk + snapshot, memory, existing_dir(work_dir),
                {"store": disk, "snapshot": snapshot, "index": mem})


def shortfall(need: Need, free: Free) -> str | None:
    """Which resource does not fit, as a phrase for the refusal line (None: it fits)."""
    if need.disk > free.disk * HEADROOM:
        return (f"about {fmt_gib(need.disk)} of disk in {need.disk_dir}, "
                f"{fmt_gib(free.disk)} free")
    if need.memory > free.memory * HEADROOM:
        return f"about {fmt_gib(need.memory)} of memory, {fmt_gib(free.memory)} available"
    return None


def fits(need: Need, free: Free | None = None) -> bool:
    return shortfall(need, free or free_space(need.disk_dir)) is None


def check(what: str, need: Need, lower: str, *, force: bool = False,
          free: Free | None = None) -> None:
    """Refuse (one :class:`ConfigError` line) unless ``need`` fits or ``force``."""
    if force:
        return
    short = shortfall(need, free or free_space(need.disk_dir))
    if short is not None:
        raise ConfigError(f"{what} needs {short}; lower {lower} or give --force")


def fmt_gib(n: float) -> str:
    g = n / GIB
    if g >= 1e6:
        return f"{g:.3g} GiB"
    return f"{g:,.1f} GiB" if g >= 0.1 else f"{n / (1 << 20):,.0f} MiB"


#: the crash workload's blocks are replayed at most this many times per iteration store
CRASH_STORE_MARGIN = 2.0


def crashtest_need(spec, work_dir: str | None = None) -> Need:
    """``crashtest``: iterations run one at a time, each on a fresh store that is
    removed afterwards, so the largest single store (and a snapshot and insert log
    of the in-memory state) is what must fit, beside a child and a checker process."""
    entries = int(workload_entries(spec.workload, spec.workload_options) * CRASH_STORE_MARGIN)
    disk = mem = 0.0
    for engine in spec.engines:
        for s in spec.strategies:
            store = _needs_store(s)
            snap = snapshot_bytes(s, entries)
            log = entries * (8 + 16) if s in ("radix", "dram-blockhash", "segment-radix") else 0
            disk = max(disk, store_disk_bytes(s, engine, entries, needs_store=store)
                       + 2 * snap + log)
            mem = max(mem, strategy_memory_bytes(s, engine, entries, needs_store=store))
    return Need(disk, BASE_RSS * 3 + 2 * mem, existing_dir(work_dir or tempfile.gettempdir()),
                {"store": disk, "index": mem})


def check_crashtest(spec, *, force: bool = False, free: Free | None = None) -> None:
    """Refuse a crash run whose one iteration cannot fit (name what to lower)."""
    if force:
        return
    need = crashtest_need(spec)
    what = "crashtest --matrix" if len(spec.engines) * len(spec.strategies) > 1 else "crashtest"
    check(f"{what} on workload {spec.workload}", need,
          "the workload (-W sessions=...) or the engines and strategies (-e/-s)", free=free)


# --------------------------------------------------------------------- other long builds
def workload_entries(name: str, options: dict) -> int:
    """About how many unique blocks workload ``name`` indexes, without generating it.

    Synthetic profiles: sessions (``sessions=``, ``scale=``, ``preset=paper``) times
    the profile's measured unique blocks per session, stretched by ``length_scale``
    and by a block size under 16.  Readers of a file: its requests' blocks (the file
    is read once; it bounds the index).  Unknown plugins: their requests' blocks.
    """
    from prefixbench.workloads import profiles
    if name in profiles.BLOCKS_PER_SESSION:
        def num(key, kind, default):
            try:
                v = kind(options.get(key, default))
            except (TypeError, ValueError):
                return default             # the workload itself names the bad value
            return v if v == v and v not in (float("inf"), float("-inf")) else default
        sessions = profiles.PROFILES[name].sessions
        if options.get("preset") == "paper":
            sessions = profiles.paper_sessions(name)
        sessions = num("sessions", int, sessions)
        sessions = max(1, round(sessions * num("scale", float, 1.0)))
        stretch = max(1.0, num("length_scale", float, 1.0)) * max(1.0, 16 / max(
            1, num("block_size", int, 16)))
        return int(sessions * profiles.BLOCKS_PER_SESSION[name] * stretch)
    from prefixbench.harness.bench import make_workload
    wl = make_workload(name, dict(options))
    n = getattr(wl, "n_blocks", None)
    if n is None:
        n = sum(len(r.insert_ids) for r in wl.requests())
    return int(n)


def check_replay(what: str, strategies, engine, workload: str, workload_options: dict, *,
                 cache_bytes: int = 0, limit: int | None = None, force: bool = False,
                 work_dir: str | None = None, free: Free | None = None,
                 engine_options: dict | None = None) -> Need | None:
    """``scale``, ``run``, a sweep at its given size: replays of one workload on a fresh
    store per setting beside the radix oracle.  Refuses with the line naming the
    workload's size knob; returns the estimate (None with ``force``)."""
    if force:
        return None
    entries, need = replay_need(strategies, engine, workload, workload_options,
                                cache_bytes=cache_bytes, limit=limit, work_dir=work_dir,
                                engine_options=engine_options)
    check(f"{what} on workload {workload} (about {entries:,} blocks)", need,
          "the workload (-W sessions=... or a smaller trace) or --limit", free=free)
    return need


def replay_entries(workload: str, workload_options: dict, limit: int | None = None) -> int:
    """Blocks a replay of ``workload`` indexes, bounded by ``--limit`` where it applies."""
    entries = workload_entries(workload, workload_options)
    if limit is not None and workload not in ("mooncake", "mooncake-synthetic"):
        entries = min(entries, int(limit * 64 * 4))     # a request adds at most a few windows
    return entries


def replay_need(strategies, engine, workload: str, workload_options: dict, *,
                cache_bytes: int = 0, limit: int | None = None,
                work_dir: str | None = None,
                engine_options: dict | None = None) -> tuple[int, Need]:
    """``(entries, Need)`` of replays of one workload, each setting on a fresh store
    beside the radix oracle (``run``, ``scale``, a sweep at its given size)."""
    entries = replay_entries(workload, workload_options, limit)
    return entries, sweep_need(entries, list(strategies), engine, cache_bytes=cache_bytes,
                               work_dir=work_dir, engine_options=engine_options)


#: bytes a payload path writes per payload byte (engines: their amplification)
PAYLOAD_PATH_AMPLIFICATION = {"seq": 1.0, "files": 1.05, "stripes": 1.1}


def payload_need(payload_bytes: int, paths, sizes: int, pack_bytes: int,
                 work_dir: str | None = None) -> Need:
    """``payload``: every path writes the payload before any restore (seq and stripes
    once, files and each engine once per object size), and the process holds the
    payload and the restore destination (two payloads) in memory."""
    disk = 0.0
    for p in paths:
        copies = 1 if p in ("seq", "stripes") else max(1, sizes)
        amp = PAYLOAD_PATH_AMPLIFICATION.get(p, ENGINE_AMPLIFICATION.get(p, DEFAULT_AMPLIFICATION))
        disk += copies * payload_bytes * amp
        if p in ("stripes", "packfile"):
            disk += copies * pack_bytes          # a partly filled last pack is allocated whole
    memory = BASE_RSS + 2.0 * payload_bytes
    return Need(disk, memory, existing_dir(work_dir or os.getcwd()),
                {"payload": payload_bytes, "paths": len(paths)})


def check_payload(payload_bytes: int, paths, sizes: int, pack_bytes: int, *,
                  work_dir: str | None = None, force: bool = False,
                  free: Free | None = None) -> None:
    if force:
        return
    need = payload_need(payload_bytes, paths, sizes, pack_bytes, work_dir)
    check(f"payload --payload {payload_bytes:,} bytes over {len(paths)} paths", need,
          "--payload, the object counts (--objects) or --paths", free=free)
