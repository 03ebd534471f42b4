"""``prefixbench crashtest``: kill -9 a durable replay, recover, check nothing is lost.

One iteration (seed ``s``):

1. A child process builds the strategy on a fresh store (engine durability
   ``sync``; log-keeping strategies - ``dram-blockhash``, ``radix``,
   ``segment-radix`` - also enable their fsynced insert log) and replays the
   workload: for request ``i`` it matches, inserts with ``make_metas(ids, i)``,
   and only then appends ``i`` to an fsynced acknowledgement log.  Every
   ``snapshot_every`` requests it publishes a snapshot.  The workload is the
   configured one with ``namespace=crash-<s>`` and the replay starts at a
   request offset drawn from ``s``, so every seed exercises other data.
2. The parent waits for the child to be ready, sleeps a random time drawn
   from ``s`` (up to ``max_kill_ms``) and sends SIGKILL.
3. A fresh process opens the store, runs ``Strategy.recover`` and checks
   (a) every acknowledged insert matches in full, each block with the
   metadata it was first inserted with; (b) no match - of the acknowledged
   requests and of the next few, possibly half-done ones - returns a block
   that was never inserted or metadata that was never written for it;
   (c) recovery itself did not fail; (d) with removals (``remove_every``, on
   by default for strategies with ``supports_remove``: every Nth request
   also removes the second half of the previous request's blocks before it
   is acknowledged) no match returns a block whose acknowledged remove was
   not followed by an acknowledged insert (``removed_served``), and (a)
   expects each acknowledged sequence only up to its first removed block.
   What recovery fell back to (a corrupt snapshot, a log replay) comes back
   as notes, printed with the iteration's line.

``sarp`` runs with ``max_retrieval=0`` here: with a retrieval budget it may
legitimately return a shorter prefix, which (a) could not tell from a loss;
``sparse-state`` for the same reason with ``policy=block:1``.
A failing iteration prints the command that reproduces it
(``--seed s --iterations 1``, with ``--kill-at POINT:N`` for a deterministic kill).

Deterministic kills inside the risky windows (``--kill-at``: snapshot
publication steps, sarp's back-fill publish, packfile space reuse) and the
``--matrix`` of every durable engine x every strategy are described in
:mod:`prefixbench.harness.crashpoints`.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench.errors import ConfigError

#: options that make a strategy's answer the exact one, so (a) can tell a loss: sarp
#: with unlimited retrieval, sparse-state with a checkpoint at every block (its own
#: placement returns the deepest checkpoint, shorter by design)
CRASH_OPTIONS = {"sarp": {"max_retrieval": 0}, "sparse-state": {"policy": "block:1"}}
EXTRA_QUERIES = 4


@dataclass
class CrashSpec:
    strategies: list
    engines: list
    iterations: int = 10
    seed: int = 0
    workload: str = "codeact"
    workload_options: dict = field(default_factory=dict)
    snapshot_every: int = 50
    max_kill_ms: int = 3000
    durability: str = "sync"
    #: deterministic kill points, ``[(point, nth or None)]`` (see harness.crashpoints)
    kill_at: list = field(default_factory=list)
    #: iterations of a strategy other than ``iterations`` (the matrix: sarp's)
    strategy_iterations: dict = field(default_factory=dict)
    #: every Nth request also removes the second half of the previous request's blocks
    #: (strategies with ``supports_remove``; 0 = no removals)
    remove_every: int = 4


def _workload(cfg: dict):
    from prefixbench.harness.bench import make_workload
    return make_workload(cfg["workload"], dict(cfg["workload_options"],
                                               namespace=f"crash-{cfg['seed']}"))


def _requests(cfg: dict):
    """The replayed requests: the workload from the seed's offset, numbered from 0."""
    wl = _workload(cfg)
    skip = cfg["offset"]
    for j, req in enumerate(wl.requests()):
        if j >= skip:
            yield req


def _removed_ids(cfg: dict, i: int, prev):
    """The blocks request ``i`` removes after its insert (None for most requests)."""
    every = cfg.get("remove_every") or 0
    if not every or prev is None or i % every != every - 1:
        return None
    return np.ascontiguousarray(prev[len(prev) // 2:], dtype=np.uint64)


def _open(cfg: dict, create: bool):
    from prefixbench.harness.build import open_engine
    from prefixbench.registry import get_registry
    cls = get_registry().get("strategy", cfg["strategy"]).factory
    store = None
    if cls.needs_store:
        store = open_engine(cfg["engine"], cfg["store_dir"], durability=cfg["durability"],
                            options=cfg.get("engine_options"))
    return cls, store


def _child_main() -> None:
    """The replaying child (killed by the parent)."""
    from prefixbench.metas import make_metas
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    cls, store = _open(cfg, True)
    strat = cls(store, cfg["strategy_options"])
    from prefixbench.harness.crashpoints import arm
    arm(cfg, strat, store)
    strat.enable_log(cfg["snapshot_dir"], sync=True)
    ack = open(cfg["ack_log"], "ab")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    every = cfg["snapshot_every"]
    prev = None
    for i, req in enumerate(_requests(cfg)):
        strat.match(req.match_ids)
        ids = req.insert_ids
        strat.insert(ids, make_metas(ids, i, strat.meta_size))
        gone = _removed_ids(cfg, i, prev)
        if gone is not None:
            strat.remove(gone)
        prev = ids
        ack.write(f"{i}\n".encode())
        ack.flush()
        os.fsync(ack.fileno())
        if every and (i + 1) % every == 0:
            strat.snapshot(cfg["snapshot_dir"])
    sys.stdout.write("done\n")
    sys.stdout.flush()
    strat.close()


def _read_acks(path: str) -> int:
    """Number of acknowledged requests (they are consecutive from 0; a torn last line is not one)."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    n = 0
    for ln in lines[:-1]:          # the part after the last newline is torn
        if int(ln) != n:
            raise AssertionError(f"acknowledgement log out of order at line {n}")
        n += 1
    return n


def _verify_main() -> None:
    """The recovering, checking process; prints one JSON line."""
    from prefixbench.metas import make_metas
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    out = {"acked": 0, "lost": 0, "false": 0, "checked_blocks": 0, "error": None,
           "source": None, "removes": 0, "removed_served": 0}
    try:
        n_ack = _read_acks(cfg["ack_log"])
        out["acked"] = n_ack
        cls, store = _open(cfg, False)
        notes = []
        strat = cls.recover(store, cfg["snapshot_dir"], cfg["strategy_options"],
                            durable_log=False, notify=notes.append)
        out["source"] = strat.recovery["source"]
        out["notes"] = notes
    except Exception as e:           # (c) recovery failed
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return
    first: dict[int, bytes] = {}     # available block -> metadata of its (acknowledged) insert
    maybe: dict[int, set] = {}       # blocks of the possibly half-done requests after them
    removed: set = set()             # blocks whose acknowledged remove no insert undid
    maybe_gone: set = set()          # blocks the request in flight may have removed
    reqs = []
    prev = None
    for i, req in enumerate(_requests(cfg)):
        if i >= n_ack + EXTRA_QUERIES:
            break
        ids = req.insert_ids
        metas = make_metas(ids, i, strat.meta_size)
        gone = _removed_ids(cfg, i, prev)
        prev = ids
        if i < n_ack:
            for b, m in zip(ids.tolist(), metas):
                if b not in first:
                    first[b] = m.tobytes()
                    removed.discard(b)
            if gone is not None:
                out["removes"] += 1
                for b in gone.tolist():
                    if first.pop(b, None) is not None:
                        removed.add(b)
        elif i == n_ack:             # the request in flight may be (partly) done
            for b, m in zip(ids.tolist(), metas):
                if b not in first:
                    maybe.setdefault(b, set()).add(m.tobytes())
            if gone is not None:
                maybe_gone.update(gone.tolist())
        reqs.append((i, req))
    for i, req in reqs:
        ids = req.insert_ids
        if i < n_ack:                # (a) acknowledged: the sequence up to its first removed
            m = strat.match(ids)     #     block, each block with its metadata
            need = 0
            for b in ids.tolist():
                if b not in first or b in maybe_gone:
                    break
                need += 1
            want = [first[b] for b in ids.tolist()[:need]]
            got = [bytes(x) for x in np.asarray(m.metas)]
            if m.n_blocks < need or got[:need] != want:
                out["lost"] += 1
            out["checked_blocks"] += need
        for q in (req.match_ids, ids):   # (b) nothing returned that was never inserted,
            m = strat.match(q)           # (d) nor a block whose remove was acknowledged
            for b, meta in zip(q[:m.n_blocks].tolist(), np.asarray(m.metas)):
                mb = bytes(meta)
                if first.get(b) != mb and mb not in maybe.get(b, ()):
                    if b in removed:
                        out["removed_served"] += 1
                    else:
                        out["false"] += 1
    strat.close()
    print(json.dumps(out))


def _py(entry: str, path: str, **kw) -> subprocess.Popen:
    code = f"from prefixbench.harness.crashtest import {entry}; {entry}()"
    return subprocess.Popen([sys.executable, "-c", code, path], **kw)


def run_iteration(strategy: str, engine: str, seed: int, spec: CrashSpec, root: str,
                  kill_at=("random", None)) -> dict:
    from prefixbench.harness import crashpoints
    rng = random.Random(f"{strategy}/{engine}/{seed}")
    work = tempfile.mkdtemp(prefix=f"crash-{seed}-", dir=root)
    try:
        n_req = len(_workload({"workload": spec.workload,
                               "workload_options": spec.workload_options, "seed": seed}))
        from prefixbench.registry import get_registry
        removes = getattr(get_registry().get("strategy", strategy).factory, "supports_remove",
                          False)
        cfg = {"strategy": strategy, "engine": engine, "seed": seed,
               "remove_every": spec.remove_every if removes else 0,
               "strategy_options": CRASH_OPTIONS.get(strategy, {}),
               "workload": spec.workload, "workload_options": spec.workload_options,
               "offset": rng.randrange(max(1, n_req // 2)),
               "store_dir": os.path.join(work, "store"),
               "snapshot_dir": os.path.join(work, "snapshot"),
               "ack_log": os.path.join(work, "acks.log"),
               "snapshot_every": spec.snapshot_every, "durability": spec.durability,
               "engine_options": crashpoints.CRASH_ENGINE_OPTIONS.get(engine),
               "kill_at": list(kill_at), "kill_marker": os.path.join(work, "killed-at")}
        path = os.path.join(work, "cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        child = _py("_child_main", path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = child.stdout.readline()
        delay = rng.uniform(0, spec.max_kill_ms / 1000.0)
        if kill_at[0] != crashpoints.RANDOM:
            delay = spec.max_kill_ms / 1000.0     # the child kills itself; this is the fallback
        killed = False
        if line.strip() == b"ready":
            t_end = time.monotonic() + delay
            while time.monotonic() < t_end and child.poll() is None:
                time.sleep(min(0.005, max(0.0, t_end - time.monotonic())))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                killed = True
        _out, err = child.communicate()
        reached = crashpoints.read_marker(cfg["kill_marker"])
        if reached is not None:
            killed = child.returncode == -signal.SIGKILL
        if not killed and child.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            return {"seed": seed, "error": f"child failed before the kill: {last}", "acked": 0,
                    "lost": 0, "false": 0, "checked_blocks": 0, "killed": False}
        v = _py("_verify_main", path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        vout, verr = v.communicate()
        if v.returncode != 0 or not vout.strip():
            last = (verr.strip().splitlines() or ["?"])[-1]
            res = {"acked": 0, "lost": 0, "false": 0, "checked_blocks": 0,
                   "error": f"recovery process failed: {last}"}
        else:
            res = json.loads(vout.strip().splitlines()[-1])
        res.update(seed=seed, killed=killed, kill_ms=round(delay * 1000),
                   kill_point=reached or crashpoints.RANDOM)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_crashtest(spec: CrashSpec, quiet: bool = True) -> list[dict]:
    from prefixbench.harness import crashpoints
    from prefixbench.registry import get_registry
    reg = get_registry()
    for e in spec.engines:
        info = reg.get("engine", e)
        if getattr(info.factory, "volatile", False):
            raise ConfigError(f"option --engine: {e} is volatile (nothing survives a kill); "
                              "use a persistent engine")
    for s in spec.strategies:
        reg.get("strategy", s)
    summary = []
    root = tempfile.mkdtemp(prefix="prefixbench-crashtest-")
    try:
        for engine in spec.engines:
            for strategy in spec.strategies:
                row = {"engine": engine, "strategy": strategy, "iterations": 0, "killed": 0,
                       "acked": 0, "checked_blocks": 0, "lost": 0, "false": 0,
                       "removes": 0, "removed_served": 0,
                       "recovery_failures": 0, "failures": 0, "failing_seeds": []}
                row.update(kill_at_tried=0, kill_at_reached=0)
                for k in range(spec.strategy_iterations.get(strategy, spec.iterations)):
                    seed = spec.seed + k
                    point = crashpoints.point_for(spec.kill_at, strategy, engine, k, seed)
                    r = run_iteration(strategy, engine, seed, spec, root, point)
                    row["iterations"] += 1
                    row["killed"] += bool(r.get("killed"))
                    if point[0] != crashpoints.RANDOM:
                        row["kill_at_tried"] += 1
                        row["kill_at_reached"] += r.get("kill_point", "random") != "random"
                    for key in ("acked", "checked_blocks", "lost", "false", "removes",
                                "removed_served"):
                        row[key] += r.get(key, 0)
                    failed = (bool(r.get("error")) or r.get("lost") or r.get("false")
                              or r.get("removed_served"))
                    row["recovery_failures"] += bool(r.get("error"))
                    if failed:
                        row["failures"] += 1
                        row["failing_seeds"].append(seed)
                        print(f"crashtest: FAILED {strategy} on {engine}, seed {seed}: "
                              f"lost {r.get('lost')}, false {r.get('false')}, "
                              f"removed served {r.get('removed_served')}, "
                              f"error {r.get('error')}; reproduce with: prefixbench crashtest "
                              f"-s {strategy} -e {engine} --seed {seed} --iterations 1 "
                              f"-w {spec.workload} --max-kill-ms {spec.max_kill_ms} "
                              f"--snapshot-every {spec.snapshot_every}"
                              + (f" --kill-at {point[0]}:{point[1]}"
                                 if point[0] != crashpoints.RANDOM else ""), file=sys.stderr)
                    elif not quiet:
                        at = (f"killed at {r['kill_point']}" if r.get("kill_point", "random")
                              != "random" else f"killed at {r.get('kill_ms')} ms")
                        print(f"crashtest: {strategy}/{engine} seed {seed}: ok "
                              f"({r.get('acked')} acked, {at}, "
                              f"recovered from {r.get('source')})", file=sys.stderr)
                    if failed or not quiet:
                        for note in r.get("notes", ()):     # what recovery fell back to
                            print(f"crashtest: {strategy}/{engine} seed {seed}: {note}",
                                  file=sys.stderr)
                summary.append(row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return summary


def crash_benchmarks(summary: list[dict], spec: CrashSpec) -> list:
    """One benchmark per row and ``crash-*`` figure, named ``STRATEGY-ENGINE-crash-...``
    (the row is the setting), its failing seeds in the metadata; zeros listed."""
    from prefixbench import schema
    from prefixbench.harness import pyperf_io
    out = []
    for row in summary:
        setting = f"{row['strategy']}-{row['engine']}"
        md = pyperf_io.run_metadata(row["strategy"], row["engine"], spec.workload, {
            "workload_options": spec.workload_options, "iterations": spec.iterations,
            "seed": spec.seed, "snapshot_every": spec.snapshot_every,
            "max_kill_ms": spec.max_kill_ms})
        md.update(command="crashtest", setting=setting,
                  failing_seeds=",".join(map(str, row["failing_seeds"])) or "-")
        if row.get("kill_at_tried"):          # deterministic kill points: reached / tried
            md["kill_at"] = f"{row.get('kill_at_reached', 0)}/{row['kill_at_tried']}"
        out += pyperf_io.figure_benchmarks(schema.from_json(row), md, prefix=setting)
    return out


def format_summary(summary: list[dict]) -> str:
    head = ("engine", "strategy", "kill points", "killed", "acked inserts", "blocks checked",
            "lost", "false matches", "recovery failures", "failing seeds", "kill-at reached")
    rows = [(r["engine"], r["strategy"], r["iterations"], r["killed"], r["acked"],
             r["checked_blocks"], r["lost"], r["false"], r["recovery_failures"],
             ",".join(map(str, r["failing_seeds"][:10])) or "-",
             f"{r.get('kill_at_reached', 0)}/{r.get('kill_at_tried', 0)}"
             if r.get("kill_at_tried") else "-") for r in summary]
    from prefixbench.reports.tables import format_table
    return format_table(head, rows)
