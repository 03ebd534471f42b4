"""``prefixbench recover``: build an index to N unique block entries, snapshot it,
close it, and time its recovery in a FRESH process.

Build: the workload is replicated with a fresh namespace seed per copy
(``namespace=<workload>-copy<k>``: copies share no block), streamed request by
request, never materialised; every copy has the same unique blocks per
request (counted once on copy 0 by the sweeps' counting pass), so the
build stops at the first request that reaches N.  Only inserts are replayed
(recovery does not depend on how the index answered during the build).  A
probe set - 256 requests of the first copy and 256 of the last - is matched
before the snapshot; its hit tokens and a digest of every returned metadata
record are the reference.

Recovery (a child process started with ``subprocess``, nothing imported from
the build): open the engine, ``Strategy.recover`` (snapshot load with every
checksum verified, deserialize, rebuild / catch-up), then match the first
probe and check it against the reference: that is the first correctly served
match.  ``recovery-total`` runs from the child's first timed statement (after
it read its probe queries) to that point - plugin registry and imports,
engine open, load, deserialize, rebuild, the match - each reported too; ``process-start-to-first-match`` from the parent's spawn (it adds the
interpreter start and imports).  The child then matches every probe; the hit
rate after recovery must equal the hit rate before (exit code 3 otherwise).
Peak RSS: the parent samples the child with psutil every 5 ms; the child also
reports its kernel-counted ``ru_maxrss``.

Server engines (``-e redis``, ``-e redis-cluster``, and ``redis-blockhash``,
whose engine defaults to ``redis``).  Their durable state is the server's, so
recovery is a restart of the server: ``recover`` starts a private server
(through :mod:`prefixbench.harness.servers`) in ``WORK_DIR/server`` on free
ports of 127.0.0.1, AOF on with ``appendfsync`` from ``--durability`` (sync:
always, async: everysec, off: no AOF, RDB only), no automatic RDB saves
(``save ""``), a cluster of 3 masters (plus one replica each under sync,
which waits for one).  After the build and the strategy's own snapshot, the
server's data is made one compact file set, as a snapshot would be
(``BGREWRITEAOF``: an RDB-preamble AOF base; ``BGSAVE`` without an AOF;
timed and added to ``snapshot-write``, its files counted in
``snapshot-bytes``), and the server is stopped (SIGTERM).  Each recovery then
starts the server again and waits until every node answers PING and reports
``loading:0`` (a cluster also ``cluster_state:ok``): that reload is
``recovery-server-reload``, and it is counted in ``recovery-load`` (the
server loading its RDB/AOF is this engine's snapshot load), in
``recovery-index``, ``recovery-total`` and
``recovery-process-start-to-first-match`` (the child is spawned once the
server is ready; for redis-blockhash its rebuild is then the scan of the whole
store into the in-memory table).  The server is stopped after each recovery
and at the end; the work dir (the server's data with it) is removed unless
``--work-dir`` or ``keep`` asked to keep it.  A ``url=`` engine option is
refused: a server recover did not start is one it cannot restart.

Results are pyperf suites: ``OUT.json`` (seconds) and ``OUT.counts.json``
(bytes, counts).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench.errors import ConfigError, PrefixbenchError

N_PROBES = 256
#: engines whose data lives in a server that recover starts and restarts
SERVER_ENGINES = ("redis", "redis-cluster")
#: the private server's AOF policy for each --durability (None: no AOF)
SERVER_APPENDFSYNC = {"sync": "always", "async": "everysec", "off": None}
#: seconds a restarted server may take to reload its data
SERVER_RELOAD_TIMEOUT = 6 * 3600.0


class RecoveryCheckError(PrefixbenchError):
    exit_code = 3


@dataclass
class RecoverSpec:
    strategy: str
    engine: str | None
    entries: int
    workload: str = "lmcache-agent"
    workload_options: dict = field(default_factory=dict)
    strategy_options: dict = field(default_factory=dict)
    engine_options: dict = field(default_factory=dict)
    cache_bytes: int = 64 << 20
    durability: str = "async"
    work_dir: str | None = None
    keep: bool = False
    #: fresh-process recoveries of the one build (each checked; times get one value each)
    repeat: int = 1
    #: build even when the pre-flight estimate says it will not fit
    force: bool = False
    #: the url of the private server (server engines), set by run_recover
    server_url: str | None = None

    def store_options(self) -> dict:
        """The engine options the build and the recoveries open the store with."""
        if self.server_url is None:
            return dict(self.engine_options)
        return dict(self.engine_options, url=self.server_url)


def parse_count(option: str, text) -> int:
    """``1e8``, ``10000000``, ``10M`` -> int."""
    s = str(text).strip()
    mult = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9}.get(s[-1:].lower(), 1)
    if mult != 1:
        s = s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise ConfigError(f"option {option}: {text!r} is not a count (e.g. 1e7 or 10M)") from None
    if not math.isfinite(v) or v < 1:
        raise ConfigError(f"option {option}: {text!r} must be >= 1")
    return int(v)


def _workload(spec: RecoverSpec, copy: int):
    from prefixbench.harness.bench import make_workload
    opts = dict(spec.workload_options, namespace=f"{spec.workload}-copy{copy}")
    return make_workload(spec.workload, opts)


def _per_request_unique(spec: RecoverSpec) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative unique blocks after each request of one copy, and how many leading
    blocks of each request were indexed before it (the sweeps' counting pass; every
    copy has the same)."""
    from prefixbench.harness.sweeps import count_pass
    c = count_pass(_workload(spec, 0))
    if not c.unique_blocks:
        raise ConfigError(f"workload {spec.workload}: no full block to index")
    return c.cumulative, c.known

def _digest(h, m) -> None:
    h.update(int(m.n_blocks).to_bytes(8, "little"))
    h.update(np.ascontiguousarray(m.metas).tobytes())


def build_and_snapshot(spec: RecoverSpec, quiet: bool = True) -> dict:
    """Phase 1 (this process): build, probe, snapshot, close.  Returns the reference."""
    from prefixbench.harness.build import build
    from prefixbench.metas import make_metas
    from prefixbench.harness.progress import progress

    cum, known = _per_request_unique(spec)
    per_copy = int(cum[-1])
    copies = -(-spec.entries // per_copy)
    last_copy = copies - 1
    need_last = spec.entries - last_copy * per_copy
    last_n = int(np.searchsorted(cum, need_last) + 1)
    store_dir = os.path.join(spec.work_dir, "store")
    snap_dir = os.path.join(spec.work_dir, "snapshot")
    built = build(spec.strategy, spec.engine, strategy_options=spec.strategy_options,
                  store_dir=store_dir if spec.engine else None, cache_bytes=spec.cache_bytes,
                  durability=spec.durability, engine_options=spec.store_options(),
                  block_tokens=_workload(spec, 0).block_size)
    strat = built.strategy
    probes, probe_tokens = [], []
    t0 = time.perf_counter()
    reqno = 0
    bar = progress(spec.entries, f"build {spec.strategy}", quiet, unit="block")
    try:
        for c in range(copies):
            limit = last_n if c == last_copy else len(cum)
            for i, req in enumerate(_workload(spec, c).requests()):
                if i >= limit:
                    break
                ids = req.insert_ids
                strat.insert_known_prefix(ids, make_metas(ids, reqno, strat.meta_size),
                                          int(known[i]))
                reqno += 1
                if (c == 0 and i < N_PROBES) or (c == last_copy and i >= limit - N_PROBES):
                    probes.append(np.asarray(req.match_ids, dtype=np.uint64))
                    probe_tokens.append(req.prompt_tokens)
                bar.update(int(cum[i] - (cum[i - 1] if i else 0)))
        bar.close()
        build_s = time.perf_counter() - t0
        drain = getattr(strat, "drain", None)
        if drain is not None:
            drain()
        h = hashlib.sha256()
        bs = _workload(spec, 0).block_size
        hit_tokens = 0
        for q, pt in zip(probes, probe_tokens):
            m = strat.match(q)
            hit_tokens += min(m.n_blocks * bs, pt)
            _digest(h, m)
        first = strat.match(probes[0])
        stats_before = strat.stats()
        snap = strat.snapshot(snap_dir)
    finally:
        built.strategy.close()
        if built.store is not None:
            built.store.close()
    np.savez(os.path.join(spec.work_dir, "probes.npz"), *probes)
    ref = {
        "entries": spec.entries, "requests": reqno, "copies": copies,
        "unique_blocks_per_copy": per_copy, "build_s": build_s,
        "snapshot_s": snap["seconds"], "snapshot_bytes": snap["bytes"],
        "hit_tokens": hit_tokens, "probe_tokens": int(sum(probe_tokens)),
        "probe_token_list": [int(x) for x in probe_tokens],
        "block_size": bs, "digest": h.hexdigest(),
        "first_n": int(first.n_blocks), "first_digest": _one_digest(first),
        "stats_before": {k: v for k, v in stats_before.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)},
    }
    with open(os.path.join(spec.work_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    return ref


def _one_digest(m) -> str:
    h = hashlib.sha256()
    _digest(h, m)
    return h.hexdigest()


def _note(line: str) -> None:
    """Recovery's notes (what it fell back to) on stderr; the parent keeps them."""
    print(f"prefixbench: {line}", file=sys.stderr)


def _child_main() -> None:
    """Phase 2, in a fresh process: ``python -c ... <spec.json>``; prints one JSON line."""
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    with np.load(cfg["probes"]) as z:       # harness input, outside the timed region
        probes = [z[f"arr_{i}"] for i in range(len(z.files))]
    t_start = time.perf_counter()
    from prefixbench.harness.build import open_engine
    from prefixbench.registry import get_registry
    cls = get_registry().get("strategy", cfg["strategy"]).factory
    t0 = time.perf_counter()
    t_registry = t0 - t_start
    store = None
    if cls.needs_store:
        store = open_engine(cfg["engine"], cfg["store_dir"], cache_bytes=cfg["cache_bytes"],
                            durability=cfg["durability"], options=cfg["engine_options"])
    t_open = time.perf_counter() - t0
    strat = cls.recover(store, cfg["snapshot_dir"], cfg["strategy_options"] or None,
                        durable_log=False, notify=_note)
    t_rec = time.perf_counter()
    m = strat.match(probes[0])
    t_first = time.perf_counter()
    ok_first = _one_digest(m) == cfg["first_digest"]
    h = hashlib.sha256()
    hit_blocks = []
    for q in probes:
        mm = strat.match(q)
        hit_blocks.append(int(mm.n_blocks))
        _digest(h, mm)
    rec = dict(strat.recovery)
    stats = {k: v for k, v in strat.stats().items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = {"open_s": t_open, "first_match_s": t_first - t_start, "first_ok": ok_first,
           "registry_s": t_registry, "match_s": t_first - t_rec,
           "recovery": rec, "digest": h.hexdigest(), "hit_blocks": hit_blocks,
           "stats_after": stats,
           "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    strat.close()
    print(json.dumps(out, default=str))


def recover_in_fresh_process(spec: RecoverSpec, ref: dict) -> dict:
    import psutil
    cfg = {"strategy": spec.strategy, "engine": spec.engine,
           "store_dir": os.path.join(spec.work_dir, "store"),
           "snapshot_dir": os.path.join(spec.work_dir, "snapshot"),
           "probes": os.path.join(spec.work_dir, "probes.npz"),
           "cache_bytes": spec.cache_bytes, "durability": spec.durability,
           "engine_options": spec.store_options(), "strategy_options": spec.strategy_options,
           "first_digest": ref["first_digest"]}
    path = os.path.join(spec.work_dir, "child.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    code = "from prefixbench.harness.recovery import _child_main; _child_main()"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    try:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak = max(peak, ps.memory_info().rss)
            except psutil.Error:
                break
            time.sleep(0.005)
    except psutil.Error:
        pass
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        raise RecoveryCheckError(f"recover: the recovery process failed: {last}")
    res = json.loads(out.strip().splitlines()[-1])
    res["process_wall_s"] = wall
    res["peak_rss_bytes"] = max(peak, res["ru_maxrss_bytes"]) if peak else res["ru_maxrss_bytes"]
    res["peak_rss_sampled_bytes"] = peak
    if err.strip():
        res["stderr"] = err.strip()
    return res


def fmt_count(n: int) -> str:
    """``10**30`` -> ``1e30``, ``12_345`` -> ``12,345``: counts as a user would type them."""
    if n >= 10 ** 6:
        mant, _, exp = f"{n:.2e}".partition("e")
        mant = mant.rstrip("0").rstrip(".")
        if abs(float(f"{mant}e{exp}") - n) <= n * 1e-12:     # exact to float precision
            return f"{mant}e{int(exp)}"
    return f"{n:,}"


def preflight(spec: RecoverSpec) -> None:
    """Refuse a build that will not fit the disk or memory (before anything is made)."""
    from prefixbench.harness import preflight as pf
    need = pf.recover_need(spec.entries, spec.strategy, spec.engine,
                           cache_bytes=spec.cache_bytes, work_dir=spec.work_dir,
                           engine_options=spec.engine_options)
    pf.check(f"recover: -n {fmt_count(spec.entries)}", need, "-n", force=spec.force)


def check_server_spec(spec: RecoverSpec) -> None:
    """One line for what a server engine's recovery cannot do (before anything starts)."""
    if spec.engine not in SERVER_ENGINES:
        return
    if "url" in spec.engine_options:
        from prefixbench.engines.redis import redact
        raise ConfigError(f"option --engine-option url={redact(spec.engine_options['url'])}: "
                          f"recover times the restart of the server, so it starts a private "
                          f"{spec.engine} server in its work dir; drop url= (nothing was "
                          f"changed)")


def start_private_server(spec: RecoverSpec):
    """A fresh server for the build under ``WORK_DIR/server`` (see the module docstring)."""
    from prefixbench.harness import servers
    fsync = SERVER_APPENDFSYNC[spec.durability]
    kind = spec.engine
    masters, replicas = (1, 0) if kind == "redis" else (3, 1 if spec.durability == "sync" else 0)
    span = masters * (1 + replicas)
    last = None
    for _ in range(3):                  # a port taken between the check and the bind
        sdir = os.path.join(spec.work_dir, "server")
        try:
            server = servers.up(kind, sdir, port=servers.free_port(span=span),
                                appendfsync=fsync or "everysec", aof=fsync is not None,
                                masters=masters, replicas=replicas, settings={"save": '""'})
        except ConfigError as e:
            if "already in use" not in str(e):
                raise
            last = e
            shutil.rmtree(sdir, ignore_errors=True)
            continue
        spec.server_url = server.url
        return server
    raise last


def run_recover(spec: RecoverSpec, output: str | None = None, quiet: bool = True) -> dict:
    check_server_spec(spec)
    preflight(spec)
    own = spec.work_dir is None
    if own:
        spec.work_dir = tempfile.mkdtemp(prefix="prefixbench-recover-")
    else:
        if os.path.exists(spec.work_dir) and os.listdir(spec.work_dir):
            raise ConfigError(f"option --work-dir: {spec.work_dir} is not empty "
                              "(nothing was changed)")
        os.makedirs(spec.work_dir, exist_ok=True)
    server = None
    try:
        if spec.engine in SERVER_ENGINES:
            server = start_private_server(spec)
        ref = build_and_snapshot(spec, quiet=quiet)
        if server is not None:
            persisted = server.persist(SERVER_RELOAD_TIMEOUT)
            server.stop()
            ref["server_persist_s"] = persisted["seconds"]
            ref["server_data_bytes"] = persisted["bytes"]
            ref["snapshot_s"] += persisted["seconds"]
        bs = ref["block_size"]
        runs = []
        for _ in range(spec.repeat):
            reload_s = None
            if server is not None:
                reload_s = server.restart_timed(SERVER_RELOAD_TIMEOUT)
            try:
                res = recover_in_fresh_process(spec, ref)
            finally:
                if server is not None:
                    server.stop()
            if reload_s is not None:
                # the child starts once the server is ready: its times follow the reload
                res["server_reload_s"] = reload_s
                res["first_match_s"] += reload_s
                res["process_wall_s"] += reload_s
                res["recovery"]["load_s"] += reload_s
            res["hit_tokens_after"] = int(sum(min(n * bs, pt) for n, pt in
                                              zip(res["hit_blocks"], ref["probe_token_list"])))
            res["same_answers"] = (res["digest"] == ref["digest"]
                                   and res["hit_tokens_after"] == ref["hit_tokens"])
            if not res["first_ok"] or not res["same_answers"]:
                raise RecoveryCheckError(
                    f"recover: {spec.strategy} answers differently after recovery "
                    f"(first match {'ok' if res['first_ok'] else 'WRONG'}, probe answers "
                    f"{'equal' if res['same_answers'] else 'DIFFERENT'}); "
                    f"work dir {spec.work_dir}")
            runs.append(res)
        # the table shows the median recovery; the pyperf suite keeps every one
        res = sorted(runs, key=lambda r: r["first_match_s"])[(len(runs) - 1) // 2]
        result = {"spec": spec, "reference": ref, "recovered": res, "runs": runs}
        if output:
            _write(output, spec, ref, runs)
        return result
    finally:
        if server is not None:
            server.stop()
        if own and not spec.keep:
            shutil.rmtree(spec.work_dir, ignore_errors=True)


def _write(output: str, spec: RecoverSpec, ref: dict, runs: list) -> None:
    from prefixbench.harness.pyperf_io import counts_path, write_suite
    times, counts = recover_benchmarks(spec, ref, runs)
    write_suite(output, times)
    write_suite(counts_path(output), counts)


def recover_benchmarks(spec: RecoverSpec, ref: dict, runs: list) -> tuple[list, list]:
    """(time, count) benchmarks of a recovery: every repeat's value kept, zeros listed."""
    from prefixbench.harness.pyperf_io import (_one_shot, collecting_zeros, run_metadata,
                                               value_runs, with_zeros)
    res = runs[0]
    rec = res["recovery"]
    config = {"entries": spec.entries, "strategy_options": spec.strategy_options,
              "workload_options": spec.workload_options, "engine_options": spec.engine_options,
              "cache_bytes": spec.cache_bytes, "durability": spec.durability}
    md = run_metadata(spec.strategy, spec.engine, spec.workload, config)
    md.update({"recovery_source": rec["source"], "unique_block_entries": spec.entries,
               "hit_rate_equal": int(res["same_answers"])})
    md["recoveries"] = len(runs)
    if "server_data_bytes" in ref:
        fsync = SERVER_APPENDFSYNC[spec.durability]
        md["server_reload"] = (f"private {spec.engine} server restarted per recovery, "
                               + (f"AOF reload (appendfsync {fsync}, rewritten before the stop)"
                                  if fsync else "RDB reload (no AOF)"))
        md["server_persist_seconds"] = round(ref["server_persist_s"], 3)
    md.update({"build_seconds": round(ref["build_s"], 3), "build_copies": ref["copies"],
               "build_requests": ref["requests"], "probe_tokens": ref["probe_tokens"],
               "probe_hit_tokens_after": res["hit_tokens_after"]})

    def each(get):
        return [get(r) for r in runs]
    with collecting_zeros() as zeros:
        times = [
            value_runs("recovery-total", "second", each(lambda r: r["first_match_s"]), md),
            value_runs("recovery-process-start-to-first-match", "second",
                       each(lambda r: r["process_wall_s"]), md),
            value_runs("recovery-plugin-registry", "second",
                       each(lambda r: r.get("registry_s", 0)), md),
            value_runs("recovery-engine-open", "second", each(lambda r: r["open_s"]), md),
            value_runs("recovery-first-match", "second", each(lambda r: r.get("match_s", 0)),
                       md),
            value_runs("recovery-init", "second",
                       each(lambda r: r["recovery"].get("init_s", 0)), md),
            value_runs("recovery-load", "second", each(lambda r: r["recovery"]["load_s"]), md),
            value_runs("recovery-deserialize", "second",
                       each(lambda r: r["recovery"]["deserialize_s"]), md),
            value_runs("recovery-rebuild", "second",
                       each(lambda r: r["recovery"]["rebuild_s"]), md),
            value_runs("recovery-index", "second", each(lambda r: _index_s(r["recovery"])), md),
            value_runs("recovery-server-reload", "second",
                       each(lambda r: r["server_reload_s"]), md)
            if "server_reload_s" in res else None,
            _one_shot("snapshot-write", "second", ref["snapshot_s"], md),
        ]
        st = res["stats_after"]
        counts = [
            _one_shot("snapshot-bytes", "byte", rec["snapshot_bytes"]
                      + ref.get("server_data_bytes", 0), md),
            _one_shot("server-data-bytes", "byte", ref["server_data_bytes"], md)
            if "server_data_bytes" in ref else None,
            _one_shot("peak-rss", "byte", res["peak_rss_bytes"], md),
            _one_shot("unique-block-entries", "integer", spec.entries, md),
            _one_shot("index-entries", "integer", st.get("entries", 0), md),
            _one_shot("index-memory-bytes", "byte", st.get("memory_bytes", 0), md),
            _one_shot("probe-hit-tokens-before", "integer", ref["hit_tokens"], md),
        ]
    return (with_zeros([b for b in times if b], zeros),
            with_zeros([b for b in counts if b], zeros))


def _index_s(rec: dict) -> float:
    return rec["load_s"] + rec.get("init_s", 0) + rec["deserialize_s"] + rec["rebuild_s"]
