"""Concurrency stress: N threads match, insert and remove on one index, and a checker.

Every registered strategy (``sarp`` twice: its default retrieval budget and
unlimited, both with a small refinement threshold and background back-fill,
so pruning rematerialization and refinement publish while requests run) is
driven by ``threads`` threads on one shared instance.  The sequences: groups
share a prefix that ends inside the second 64-block window (so segments are
copied and posting lists grow past the pruning threshold), and every thread
owns its suffixes.  Shared blocks are only ever inserted; a thread removes
only blocks of its own suffixes (where the strategy ``supports_remove``).  So
every interleaving ends in the state of one serial replay of the threads'
operations, thread after thread, and that replay through the ``radix`` oracle
is what the final state is compared with.  Block metadata depends on the block
alone, so any returned record can be checked.

The checker confirms, and counts as violations otherwise:

* **no unverified block**: every match returns a prefix of its query whose
  every block was inserted by someone (before the match returned) and carries
  exactly that block's metadata;
* **no lower answer than the state guarantees** (exact strategies and sarp
  with unlimited retrieval): a thread matching its own sequence gets at least
  the shared blocks whose insert had completed before the match began and,
  once the whole shared prefix is in, exactly the suffix blocks it knows are
  available (only it changes them);
* **no torn posting list** (sarp): a reader thread walks the routing points
  of the sequences all the while; every visible entry it sees has as many
  filters as segment references, filters in order (segment ids descending
  among equal filters, no duplicate), and every referenced segment holds the
  entry's routing key at the entry's offset;
* **the final state** after the threads join and back-fill drains: for every
  sequence, exact strategies give the oracle's answer (length and metadata);
  the others never a longer one, with the oracle's metadata; sarp with
  unlimited retrieval exactly the oracle's length.

The run is time-boxed under :mod:`faulthandler`: a deadlock dumps every
thread's stack and exits.  ``python -m prefixbench.harness.stress --ops N``
runs the long version and prints one line per strategy.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from prefixbench.errors import PrefixbenchError

#: strategy runs: (label, strategy, options)
SARP_STRESS = {"tau": 8, "backfill": "background"}
DEFAULT_TIME_BOX_S = 600.0
#: the interpreter's thread switch interval during a run (default 5 ms): 20 us
SWITCH_INTERVAL_S = 2e-5


@dataclass
class StressResult:
    label: str
    strategy: str
    ops: int = 0
    matches: int = 0
    inserts: int = 0
    removes: int = 0
    posting_checks: int = 0
    #: the first violations (50 from the run, 50 from the final check) and their count
    violations: list = field(default_factory=list)
    violation_count: int = 0
    backfill_jobs: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        extra = f", {self.backfill_jobs} back-fill jobs" if self.backfill_jobs else ""
        return (f"stress {self.label}: {self.ops} ops ({self.matches} match, {self.inserts} "
                f"insert, {self.removes} remove), {self.posting_checks} posting-list reads"
                f"{extra}, {self.violation_count} violations")


def metas_of(ids: np.ndarray, meta_size: int) -> np.ndarray:
    """Metadata that depends on the block alone: its id, then its complement."""
    ids = np.asarray(ids, dtype=np.uint64)
    words = np.stack([ids, ~ids], axis=1)
    raw = words.view(np.uint8).reshape(len(ids), 16)
    if meta_size <= 16:
        return np.ascontiguousarray(raw[:, :meta_size])
    return np.ascontiguousarray(np.tile(raw, (1, -(-meta_size // 16)))[:, :meta_size])


class Universe:
    """The sequences: ``groups`` shared prefixes, each thread's own suffixes."""

    def __init__(self, threads: int, seed: int, groups: int = 4, per_thread: int = 12,
                 shared_blocks: int = 84):
        rng = np.random.default_rng(seed)
        self.shared = [rng.integers(1, 2 ** 63, shared_blocks, dtype=np.uint64)
                       for _ in range(groups)]
        self.seqs = []            # (thread, group, ids)
        for t in range(threads):
            for j in range(per_thread):
                g = int(rng.integers(groups))
                tail = rng.integers(1, 2 ** 63, int(rng.integers(8, 140)), dtype=np.uint64)
                self.seqs.append((t, g, np.concatenate([self.shared[g], tail])))
        self.shared_len = shared_blocks

    def of_thread(self, t: int) -> list[int]:
        return [i for i, (tt, _g, _s) in enumerate(self.seqs) if tt == t]


def _make(strategy: str, options: dict, engine: str, work_dir: str | None):
    from prefixbench.harness.build import open_engine
    from prefixbench.registry import get_registry
    cls = get_registry().get("strategy", strategy).factory
    store = None
    if cls.needs_store:
        path = None if engine == "memory" else os.path.join(work_dir, strategy)
        store = open_engine(engine, path, durability="off")
    return cls(store, options), cls


def run_stress(strategy: str, options: dict | None = None, *, threads: int = 4,
               ops_per_thread: int = 1000, seed: int = 0, engine: str = "memory",
               work_dir: str | None = None, label: str | None = None,
               time_box_s: float = DEFAULT_TIME_BOX_S) -> StressResult:
    """One strategy under ``threads`` threads; returns its counts and violations."""
    options = dict(options or {})
    strat, cls = _make(strategy, options, engine, work_dir)
    res = StressResult(label or strategy, strategy)
    # the sequences grow with the run, so back-fill keeps publishing under the load
    per_thread = max(12, ops_per_thread // 25)
    uni = Universe(threads, seed, groups=max(4, per_thread * threads // 10),
                   per_thread=per_thread)
    meta_size = strat.meta_size
    can_remove = bool(getattr(cls, "supports_remove", False))
    exact = bool(cls.exact) or (strategy == "sarp" and options.get("max_retrieval") == 0)
    ever = set()                                  # blocks some insert has started on
    ever_lock = threading.Lock()
    shared_done = [0] * len(uni.shared)           # shared prefix length surely inserted
    logs = [[] for _ in range(threads)]           # per thread: ("i"|"r", seq index, n)
    violations = []
    vlock = threading.Lock()
    stop = threading.Event()
    counts = np.zeros((threads, 3), dtype=np.int64)

    n_violations = [0]

    def violation(text, final=False):
        """Keep the first 50 seen during the run, and up to 50 of the final check."""
        with vlock:
            n_violations[0] += 1
            if sum(v.startswith("final: ") == final for v in violations) < 50:
                violations.append(text)

    def check_match(q, m, where):
        n = int(m.n_blocks)
        if not 0 <= n <= len(q):
            violation(f"{where}: returned {n} blocks for a {len(q)}-block query")
            return n
        got = np.asarray(m.metas)
        if n and (got.shape[0] < n or not np.array_equal(got[:n], metas_of(q[:n], meta_size))):
            violation(f"{where}: wrong metadata in the first {n} blocks")
        if n:
            with ever_lock:
                missing = [b for b in q[:n].tolist() if b not in ever]
            if missing:
                violation(f"{where}: returned block {missing[0]:#x} that was never inserted")
        return n

    def worker(t: int):
        rng = np.random.default_rng([seed, t])
        mine = uni.of_thread(t)
        # what this thread knows of its own suffixes: available prefix length per sequence
        avail = {i: 0 for i in mine}
        for k in range(ops_per_thread):
            if stop.is_set():
                return
            i = mine[int(rng.integers(len(mine)))]
            _t, g, seq = uni.seqs[i]
            r = rng.random()
            if r < 0.5:
                base = shared_done[g]
                m = strat.match(seq)
                n = check_match(seq, m, f"thread {t} op {k} match seq {i}")
                counts[t, 0] += 1
                if exact:
                    want_min = min(base, uni.shared_len)
                    if n < want_min:
                        violation(f"thread {t} op {k}: match of seq {i} gave {n} blocks, "
                                  f"{want_min} shared blocks were inserted before it began")
                    # the suffix is this thread's alone, so it knows the exact answer
                    if base >= uni.shared_len and n != uni.shared_len + avail[i]:
                        violation(f"thread {t} op {k}: match of seq {i} gave {n} blocks, "
                                  f"the state says {uni.shared_len + avail[i]}")
            elif r < 0.85 or not can_remove:
                cut = len(seq) if rng.random() < 0.7 else int(rng.integers(1, len(seq) + 1))
                ids = seq[:cut]
                with ever_lock:
                    ever.update(ids.tolist())
                strat.insert(ids, metas_of(ids, meta_size))
                counts[t, 1] += 1
                logs[t].append(("i", i, cut))
                # shared blocks are never removed: a completed insert keeps them available
                shared_done[g] = max(shared_done[g], min(cut, uni.shared_len))
                # a suffix's available blocks are always a prefix of it: inserts extend it
                avail[i] = max(avail[i], cut - uni.shared_len)
            else:
                # remove a tail of one of this thread's own suffixes
                suffix = len(seq) - uni.shared_len
                frm = int(rng.integers(0, suffix))
                ids = np.ascontiguousarray(seq[uni.shared_len + frm:])
                strat.remove(ids)
                counts[t, 2] += 1
                logs[t].append(("r", i, uni.shared_len + frm))
                avail[i] = min(avail[i], frm)        # removes cut it back

    posting_checks = [0]

    def reader():
        keys = sorted({int(s[o]) for _t, _g, s in uni.seqs for o in range(0, len(s), 16)})
        layer = strat.layer
        while not stop.is_set():
            for key in keys:
                if stop.is_set():
                    break
                try:
                    info = strat.dir.info(key)
                    if info is None:
                        continue
                    filters, segs = strat.dir.postings(key)
                except KeyError:
                    continue
                posting_checks[0] += 1
                off, _size, visible = info[0], info[1], info[2]
                if len(filters) != len(segs):
                    violation(f"posting list {key:#x}: {len(filters)} filters, {len(segs)} segments")
                    continue
                f = np.asarray(filters, dtype=np.uint64)
                s = np.asarray(segs, dtype=np.uint64)
                if len(f) > 1:
                    up = f[1:] >= f[:-1]
                    same = f[1:] == f[:-1]
                    if not up.all() or (same & (s[1:] >= s[:-1])).any():
                        violation(f"posting list {key:#x}: out of order")
                if not visible or not len(s):
                    continue
                for seg in layer.read_many(s[:8]):
                    if seg is None:
                        continue               # a counted miss, never served
                    if seg.n <= off or int(seg.ids[off]) != key:
                        violation(f"posting list {key:#x}: segment {seg.seg_id} does not hold "
                                  f"the key at offset {off}")

    t0 = time.perf_counter()
    faulthandler.dump_traceback_later(time_box_s, exit=True)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)      # many more thread switches per operation
    try:
        rd = None
        if strategy == "sarp":
            rd = threading.Thread(target=reader, name="stress-reader", daemon=True)
            rd.start()
        errors = []

        def guarded(fn, t):
            try:
                fn(t)
            except BaseException as e:     # an exception in a request thread is a violation
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
                stop.set()
        pool = [threading.Thread(target=guarded, args=(worker, t), name=f"stress-{t}")
                for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        if hasattr(strat, "drain"):
            strat.drain()
        stop.set()
        if rd is not None:
            rd.join()
        for e in errors:
            violation(e)
        _check_final(strat, uni, logs, meta_size, exact, strategy, options,
                     lambda text: violation(text, final=True))
    finally:
        sys.setswitchinterval(switch)
        faulthandler.cancel_dump_traceback_later()
        stop.set()
    res.seconds = time.perf_counter() - t0
    res.matches, res.inserts, res.removes = (int(x) for x in counts.sum(axis=0))
    res.ops = res.matches + res.inserts + res.removes
    res.posting_checks = posting_checks[0]
    res.violations = violations
    res.violation_count = n_violations[0]
    res.backfill_jobs = int(strat.stats().get("backfill_jobs", 0) or 0)
    strat.close()
    return res


def _check_final(strat, uni, logs, meta_size, exact, strategy, options, violation):
    """The final state against the radix oracle's serial replay of the same operations."""
    from prefixbench.registry import get_registry
    oracle = get_registry().get("strategy", "radix").factory(None, {})
    for log in logs:
        for op, i, n in log:
            seq = uni.seqs[i][2]
            if op == "i":
                oracle.insert(seq[:n], metas_of(seq[:n], meta_size))
            else:
                oracle.remove(np.ascontiguousarray(seq[n:]))
    unlimited = strategy == "sarp" and options.get("max_retrieval") == 0
    for i, (_t, _g, seq) in enumerate(uni.seqs):
        want = oracle.match(seq)
        got = strat.match(seq)
        n, w = int(got.n_blocks), int(want.n_blocks)
        if n > w:
            violation(f"final: seq {i}: {n} blocks, longer than the oracle's {w}")
            continue
        if n and not np.array_equal(np.asarray(got.metas)[:n], np.asarray(want.metas)[:n]):
            violation(f"final: seq {i}: metadata differ from the oracle's")
        if (exact or unlimited) and n != w:
            violation(f"final: seq {i}: {n} blocks, the oracle has {w}")
    oracle.close()


def stress_runs(strategies=None):
    """``[(label, strategy, options)]``: every registered strategy; sarp three times
    (its sync back-fill reads outside the insert lock too, like the worker)."""
    from prefixbench.registry import get_registry
    names = strategies or get_registry().names("strategy")
    runs = []
    for s in names:
        if s == "sarp":
            runs.append(("sarp", "sarp", dict(SARP_STRESS)))
            runs.append(("sarp-unlimited", "sarp", dict(SARP_STRESS, max_retrieval=0)))
            runs.append(("sarp-sync", "sarp", dict(SARP_STRESS, backfill="sync")))
        else:
            runs.append((s, s, {}))
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m prefixbench.harness.stress",
                                 description="Concurrency stress of every strategy (see the "
                                 "module docstring); one line per strategy, exit 3 on a "
                                 "violation.")
    ap.add_argument("--ops", type=int, default=10 ** 6, help="total operations over all "
                    "strategies and threads (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default="memory")
    ap.add_argument("-s", "--strategy", action="append", default=[])
    ap.add_argument("--time-box", type=float, default=3600.0)
    args = ap.parse_args(argv)
    import tempfile
    runs = stress_runs(args.strategy or None)
    per = max(1, -(-args.ops // (len(runs) * args.threads)))   # at least --ops in all
    total = bad = 0
    with tempfile.TemporaryDirectory(prefix="prefixbench-stress-") as d:
        for label, s, opts in runs:
            try:
                r = run_stress(s, opts, threads=args.threads, ops_per_thread=per, seed=args.seed,
                               engine=args.engine, work_dir=d, label=label,
                               time_box_s=args.time_box)
            except PrefixbenchError as e:
                print(f"stress {label}: skipped: {e}")
                continue
            print(r.line() + f" in {r.seconds:.0f} s", flush=True)
            for v in r.violations[:5]:
                print(f"  {v}")
            total += r.ops
            bad += r.violation_count
    print(f"stress: {total} operations, {bad} violations")
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
