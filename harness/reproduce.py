"""``prefixbench reproduce sarp|range|placement``: each figure's experiment, then the report.

An *experiment* is one prefixbench command (``sweep strategies``, ``recover``,
``scale``, ...) run with the paper's method, writing its own result into
OUTDIR as ``<experiment>.json`` (+ ``.counts.json``) the moment it completes;
a figure is drawn from the experiments that feed it (Fig. 6, Fig. 7, Table 3
and Table 4 all come from one strategies sweep).  A ``<experiment>.done``
file beside the result says it completed, so a rerun skips it unless
``--force`` and an interrupted reproduction resumes where it stopped.  The run
ends by writing ``OUTDIR/report.html`` from everything in OUTDIR and printing
the summary (claim / paper / ours / met).

The method (the paper's, section 6.1-6.2): SSD-backed strategies on RocksDB
get 10% of ssd-blockhash's logical store as cache (``--cache-rule paper``);
at ``--scale paper`` the strategies sweep builds each profile to the paper's
size with an untimed load phase and a timed run phase (the retrieval, ablation
and space sweeps, which have no phases, replay the paper-sized preset whole),
and Segment-Radix (capped) gets the cap rule (its recovery 0.96-1.96x sarp's, from 1e7-entry builds).  At
``--scale small`` the workloads keep their own size, the cap is the fixed
default (the cap rule's 1e7-entry builds alone take minutes) and recovery
builds 2e5 entries; the report's conditions say so.

``reproduce range`` runs the payload restore at the Range paper's object
counts (192, 768, 3,072, 6,144 and layerwise) with the payload scaled to this
machine (96 MiB small, 1.5 GiB paper, so every count splits into whole 4 KiB
pages: 16 KiB and 256 KiB objects at 6,144; the paper restores 6 GiB).
``reproduce placement`` is the hook for the sparse-caching figures: it runs
``placement frontier`` into OUTDIR.

Pre-flight.  Before the first experiment starts, every experiment still to
run is estimated with :mod:`prefixbench.harness.preflight` (the estimators its
commands use themselves: ``recover -n``, a sweep at its given size or at
``--scale paper``, the cap rule's recovery builds, ``payload``), and one that
will not fit the disk or memory free now is refused in one line naming it and
what to lower (``--scale``, ``--limit``, or ``--figures`` without it), before
hours of the other experiments are spent.  Experiments run one at a time and
each removes its store, so each must fit alone.  A ``--scale paper`` sweep
sizes itself down to what fits, so it is refused only when even its smallest
fraction does not.

``--force`` means "run it anyway": completed experiments are rerun, this
pre-flight is skipped, and ``--force`` is passed on to every command that
takes it (``run``, ``scale``, ``sweep``, ``recover``, ``payload``; asked of
the command's own parser), so none of them refuses on its own pre-flight
either and a paper-scale sweep runs the full paper size.
"""
from __future__ import annotations

import html as _html
import json
import os
import re
import sys
import time
from dataclasses import dataclass

from prefixbench.errors import ConfigError

PAPERS = ("sarp", "range", "placement")
SCALES = ("small", "paper")


@dataclass(frozen=True)
class Experiment:
    """One command whose result feeds ``figures``; ``argv(scale)`` is the command line
    without ``-o`` (a list per result file, for experiments of several runs)."""

    id: str
    figures: tuple
    runs: dict          # result-file stem -> {scale: argv}


def _both(argv: list, small: list = (), paper: list = ()) -> dict:
    return {"small": [*argv, *small], "paper": [*argv, *paper]}


_SWEEP_SMALL = ["--cap-rule", "fixed"]
_SWEEP_PAPER = ["--scale", "paper", "--cap-rule", "paper"]
#: the other sweeps have no load/run phases (``--scale`` is the strategies sweep's):
#: at paper scale they replay the profile's paper-sized preset whole
_PRESET_PAPER = ["-W", "preset=paper"]

EXPERIMENTS = {
    "sarp": (
        Experiment("fig1", ("fig1",), {
            "fig1-dram-blockhash": _both(["run", "-s", "dram-blockhash", "-w", "codeact",
                                          "--no-runner"]),
            "fig1-ssd-blockhash": _both(["run", "-s", "ssd-blockhash", "-e", "rocksdb", "-w",
                                         "codeact", "--no-runner"]),
        }),
        Experiment("strategies", ("fig6", "fig7", "table3", "table4", "serving"), {
            "strategies-codeact": _both(["sweep", "strategies", "-w", "codeact", "-e",
                                         "rocksdb", "--cache-rule", "paper", "--breakdown"],
                                        _SWEEP_SMALL, _SWEEP_PAPER),
        }),
        Experiment("recovery", ("table1", "fig8"), {
            f"recover-{s}": _both(["recover", "-s", s, *(["-e", "rocksdb"] if e else [])],
                                  ["-n", "2e5", "--repeat", "3"], ["-n", "1e7", "--repeat", "5"])
            for s, e in (("sarp", True), ("segment-radix", True), ("dram-blockhash", False))
        }),
        # the paper's snapshot-backed baselines on a real redis-server, apart from the
        # experiment above so that a machine without one still gets sarp's recovery:
        # Redis as the index (ssd-blockhash on redis; recovery = the server's reload) and
        # a DRAM index whose durable state is Redis (reload, then a rebuild from a scan);
        # at paper scale ssd-blockhash on redis builds 1e6 only (every probe is one
        # network round trip: about 40 minutes for 1e7 here)
        Experiment("recovery-redis", ("table1",), {
            "recover-redis-blockhash": _both(["recover", "-s", "redis-blockhash"],
                                             ["-n", "2e5", "--repeat", "3"],
                                             ["-n", "1e7", "--repeat", "2"]),
            "recover-ssd-blockhash-redis": _both(["recover", "-s", "ssd-blockhash", "-e",
                                                  "redis"], ["-n", "2e4", "--repeat", "3"],
                                                 ["-n", "1e6", "--repeat", "2"]),
        }),
        Experiment("retrieval", ("fig9",), {
            "retrieval-codeact": _both(["sweep", "retrieval", "-w", "codeact", "-e", "rocksdb",
                                        "--cache-rule", "paper"], [], _PRESET_PAPER),
        }),
        Experiment("ablation", ("fig10", "table4"), {
            "ablation-codeact": _both(["sweep", "ablation", "-w", "codeact"], [],
                                      _PRESET_PAPER),
        }),
        Experiment("space", ("table5",), {
            "space-codeact": _both(["sweep", "space", "-w", "codeact", "-e", "rocksdb"], [],
                                   _PRESET_PAPER),
        }),
        Experiment("threads", ("fig11",), {
            "scale-sarp": _both(["scale", "-s", "sarp", "-e", "rocksdb", "-w", "codeact",
                                 "--threads", "1,2,4"]),
        }),
    ),
    "range": (
        Experiment("range", ("range",), {
            "payload-range": _both(["payload", "--objects", "192,768,3072,6144,layerwise",
                                    "--restores", "3"], ["--payload", "96MiB"],
                                   ["--payload", "1536MiB"]),
        }),
    ),
    "placement": (
        Experiment("placement", ("placement",), {
            "placement-frontier": _both(["placement", "frontier", "-w", "codeact"]),
        }),
    ),
}


def figure_ids(paper: str) -> list:
    out = []
    for e in EXPERIMENTS[paper]:
        out += [f for f in e.figures if f not in out]
    return out


def select(paper: str, figures: str | None) -> list:
    """The experiments behind ``figures`` (all when None); one line for an unknown id."""
    exps = list(EXPERIMENTS[paper])
    if not figures:
        return exps
    want = [x.strip() for x in figures.split(",") if x.strip()]
    known = figure_ids(paper)
    bad = [w for w in want if w not in known]
    if bad or not want:
        raise ConfigError(f"option --figures: unknown figure {bad[0] if bad else figures!r} "
                          f"for reproduce {paper} (figures: {', '.join(known)})")
    return [e for e in exps if set(e.figures) & set(want)]


def check_outdir(path: str) -> str:
    """OUTDIR, created if need be, or one line saying why it cannot be written."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"reproduce: {path} is a file; give a directory (-o OUTDIR)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"reproduce: cannot create {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"reproduce: cannot write into {path}: not writable")
    return path


def _done_path(outdir: str, exp: Experiment) -> str:
    return os.path.join(outdir, f"{exp.id}.done")


def is_done(outdir: str, exp: Experiment) -> bool:
    """Completed: its marker is there and every result file it names still is."""
    p = _done_path(outdir, exp)
    if not os.path.isfile(p):
        return False
    return all(os.path.isfile(os.path.join(outdir, f"{stem}.json")) for stem in exp.runs)


_PARSER = []


def _parse(argv: list):
    """``argv`` read by the CLI's own parser: ``(args, leftover)``."""
    if not _PARSER:
        from prefixbench.harness.cli import build_parser
        _PARSER.append(build_parser())
    return _PARSER[0].parse_known_args(argv)


def takes_force(argv: list) -> bool:
    """Whether the command ``argv`` names has a ``--force`` of its own."""
    args, leftover = _parse([*argv, "--force"])
    return "--force" not in leftover and getattr(args, "force", None) is True


def estimate(argv: list) -> list:
    """``(what, Need)`` for each build the command ``argv`` makes, by the estimator the
    command itself uses; empty for commands with no long build (``placement``)."""
    from prefixbench.harness import preflight as pf
    from prefixbench.harness.build import parse_kv
    from prefixbench.units import parse_size
    args, _ = _parse(argv)
    cmd = args.command
    if cmd == "recover":
        from prefixbench.harness.recovery import fmt_count, parse_count
        n = parse_count("--entries", args.entries)
        store = pf._needs_store(args.strategy)
        need = pf.recover_need(n, args.strategy, args.engine if store else None,
                               cache_bytes=parse_size("--cache-bytes", args.cache_bytes),
                               work_dir=args.work_dir, engine_options=_engine_options(args))
        return [(f"recover -s {args.strategy} -n {fmt_count(n)}", need)]
    if cmd in ("run", "scale"):
        wopts = parse_kv("--workload-option", args.workload_option)
        n, need = pf.replay_need([args.strategy], args.engine, args.workload, wopts,
                                 cache_bytes=parse_size("--cache-bytes", args.cache_bytes),
                                 limit=args.limit, engine_options=_engine_options(args))
        return [(f"{cmd} -s {args.strategy} on {args.workload}, about {n:,} blocks", need)]
    if cmd == "sweep":
        return _sweep_estimate(args)
    if cmd == "payload":
        from prefixbench.harness.payload import _parse_objects
        objects = _parse_objects([x.strip() for x in args.objects.split(",") if x.strip()])
        paths = [x.strip() for x in args.paths.split(",") if x.strip()]
        need = pf.payload_need(parse_size("--payload", args.payload), paths, len(objects),
                               parse_size("--pack-bytes", args.pack_bytes), args.work_dir)
        return [(f"payload --payload {args.payload} over {len(paths)} paths", need)]
    return []


def _engine_options(args) -> dict:
    """The ``--engine-option`` pairs of a parsed command (none where it takes none)."""
    from prefixbench.harness.build import parse_kv
    return parse_kv("--engine-option", getattr(args, "engine_option", None) or [])


def _sweep_estimate(args) -> list:
    from prefixbench.harness import preflight as pf
    from prefixbench.harness import sweeps
    from prefixbench.harness.build import parse_kv
    cfg = sweeps.make_config(
        args.kind, workload=args.workload,
        workload_options=parse_kv("--workload-option", args.workload_option),
        engine=args.engine, engine_options=_engine_options(args), cache_rule=args.cache_rule,
        cache_bytes=args.cache_bytes, cache_fraction=args.cache_fraction, limit=args.limit,
        strategies=args.strategies, scale=args.scale, run_requests=args.run_requests,
        cap_rule=args.cap_rule, cap_entries=args.cap_entries)
    out = []
    if cfg.scale == "paper":
        from prefixbench.workloads import profiles
        n = max(1, int(profiles.PAPER_BLOCKS[cfg.workload] * sweeps.MIN_PAPER_FRACTION))
        cache = cfg.cache_bytes
        if cfg.cache_rule == "paper":
            cache = int(round(cfg.cache_fraction * n * (sweeps.KEY_BYTES + sweeps.META_SIZE)))
        need = pf.sweep_need(n, sweeps.strategy_names(cfg.strategies), cfg.engine,
                             cache_bytes=cache, run_requests=cfg.run_requests,
                             engine_options=cfg.engine_options)
        out.append((f"sweep {cfg.kind} --scale paper at its smallest size, 1/"
                    f"{round(1 / sweeps.MIN_PAPER_FRACTION)} of {cfg.workload}'s", need))
    else:
        n, need = pf.replay_need(sweeps.strategy_names(cfg.strategies), cfg.engine,
                                 cfg.workload, cfg.workload_options,
                                 cache_bytes=cfg.cache_bytes or 0, limit=cfg.limit,
                                 engine_options=cfg.engine_options)
        out.append((f"sweep {cfg.kind} on {cfg.workload}, about {n:,} blocks", need))
    if cfg.kind == "strategies" and cfg.cap_rule == "paper":
        from prefixbench.harness.recovery import fmt_count
        for name in ("sarp", sweeps.CAPPED):
            out.append((f"sweep {cfg.kind} --cap-rule paper: {name} at "
                        f"{fmt_count(cfg.cap_entries)} entries",
                        pf.recover_need(cfg.cap_entries, name, cfg.engine,
                                        cache_bytes=cfg.cache_bytes,
                                        engine_options=cfg.engine_options)))
    return out


def _argv(exp: Experiment, stem: str, scale: str, limit: int | None, force: bool) -> list:
    """The command line one result of ``exp`` runs (without ``-o``)."""
    argv = list(exp.runs[stem][scale])
    if limit and argv[0] in LIMITED:
        argv += ["--limit", str(limit)]
    if force and takes_force(argv):
        argv.append("--force")
    return argv


def check_resources(paper: str, exps: list, *, scale: str, limit: int | None) -> None:
    """Refuse (one line) the first experiment whose build will not fit what is free now."""
    from prefixbench.harness import preflight as pf
    for exp in exps:
        for stem in exp.runs:
            argv = _argv(exp, stem, scale, limit, False)
            for what, need in estimate(argv):
                short = pf.shortfall(need, pf.free_space(need.disk_dir))
                if short is None:
                    continue
                lower = (["--scale small"] if scale == "paper" else
                         ["--limit"] if argv[0] in LIMITED else [])
                lower.append(f"--figures without {', '.join(exp.figures)}")
                raise ConfigError(f"reproduce {paper}: experiment {exp.id} ({what}) needs "
                                  f"{short}; lower {' or '.join(lower)}, or give --force")


def _run_one(argv: list, quiet: bool) -> int:
    from prefixbench.harness.cli import main
    return main((["--quiet"] if quiet else []) + argv)


#: commands that take ``--limit N`` (replay only the first N requests)
LIMITED = ("run", "sweep", "scale", "placement")


def reproduce(paper: str, outdir: str, *, scale: str = "small", figures: str | None = None,
              force: bool = False, quiet: bool = False, limit: int | None = None) -> dict:
    """Run what ``figures`` need into ``outdir``; returns ``{experiment: seconds | 'skipped'
    | 'failed'}`` (the report is written by :func:`cmd_reproduce`)."""
    from prefixbench.harness.progress import progress
    exps = select(paper, figures)
    outdir = check_outdir(outdir)
    if not force:
        check_resources(paper, [e for e in exps if not is_done(outdir, e)], scale=scale,
                        limit=limit)
    status = {}
    bar = progress(len(exps), f"reproduce {paper}", quiet, unit="experiment")
    try:
        for exp in exps:
            if is_done(outdir, exp) and not force:
                status[exp.id] = "skipped"
                bar.write(f"reproduce: {exp.id} already complete in {outdir} (skipped; "
                          f"--force reruns it)", file=sys.stderr)
                bar.update(1)
                continue
            if os.path.exists(_done_path(outdir, exp)):
                os.unlink(_done_path(outdir, exp))
            t0 = time.perf_counter()
            ok = True
            ran = {}
            for stem in exp.runs:
                out = os.path.join(outdir, f"{stem}.json")
                bar.set_postfix_str(f"{exp.id}: {stem}")
                argv = ran[stem] = _argv(exp, stem, scale, limit, force)
                code = _run_one([*argv, "-o", out], quiet)
                if code == 130:             # the command was interrupted: stop them all
                    raise KeyboardInterrupt
                if code != 0:
                    ok = False
                    bar.write(f"reproduce: {exp.id}: `prefixbench {' '.join(argv)}` "
                              f"exited {code}; its figures are left out", file=sys.stderr)
                    break
            took = time.perf_counter() - t0
            if ok:
                with open(_done_path(outdir, exp), "w") as fh:
                    json.dump({"experiment": exp.id, "figures": list(exp.figures),
                               "scale": scale, "seconds": round(took, 1),
                               "limit": limit, "force": force, "commands": ran}, fh)
            status[exp.id] = round(took, 1) if ok else "failed"
            bar.update(1)
    finally:
        bar.close()
    return status


def _text(c) -> str:
    if isinstance(c, tuple) and len(c) == 2 and c[0] == "class":
        return _html.unescape(re.sub(r"<[^>]+>", "", c[1]))
    return "" if c is None else str(c)


def add_command(sub, commands: dict) -> None:
    p = sub.add_parser("reproduce", help="run the experiments behind a paper's figures, then "
                       "write the report", description="Run each figure's experiment with the "
                       "paper's method into OUTDIR (one result per experiment, written as it "
                       "completes; a rerun skips completed ones), then write "
                       "OUTDIR/report.html and print the summary.")
    p.add_argument("paper", choices=PAPERS, help="sarp, range, or placement (the "
                   "sparse-caching frontier)")
    p.add_argument("--scale", choices=SCALES, default="small", help="small: the workloads' "
                   "own sizes; paper: the paper's sizes with load and run phases "
                   "(default: %(default)s)")
    p.add_argument("--figures", metavar="LIST", help="comma-separated figure ids (default: "
                   "all of the paper's)")
    p.add_argument("-o", "-d", "--outdir", dest="outdir", required=True, metavar="OUTDIR")
    p.add_argument("--force", action="store_true", help="run anyway: rerun completed "
                   "experiments, skip the disk and memory pre-flight, and pass --force to "
                   "every command that takes it (run, scale, sweep, recover, payload)")
    p.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests "
                   "in each run, sweep and scale (a quick check, not a reproduction)")
    commands["reproduce"] = cmd_reproduce


def cmd_reproduce(args, quiet=False, **_):
    from prefixbench.harness import reporting
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"option --limit: {args.limit} must be >= 1")
    t0 = time.perf_counter()
    status = reproduce(args.paper, args.outdir, scale=args.scale, figures=args.figures,
                       force=args.force, quiet=quiet, limit=args.limit)
    outdir = os.path.abspath(args.outdir)
    have = [f for f in os.listdir(outdir) if f.endswith(".json")]
    if not have:
        raise ConfigError(f"reproduce: no experiment completed, nothing in {outdir} to report")
    from prefixbench.reports import figures as figs
    from prefixbench.reports import html
    from prefixbench.reports.tables import format_table
    rs = reporting._load_all([outdir])
    papers = reporting._papers()
    built = figs.build(rs, papers)
    out = os.path.join(outdir, "report.html")
    reporting.write_atomic(out, html.render(built, rs, papers,
                                            f"prefixbench reproduce {args.paper}").encode(),
                           "reproduce")
    tag = f"({args.paper} "                    # only the claims of the paper reproduced
    rows = [tuple(_text(c) for c in row) for row in html.summary(built, papers)]
    rows = [r for r in rows if tag in r[0]]
    if rows:
        print(format_table(("claim", "paper", "ours", "met"), rows))
    print(f"wrote {out} ({len(built)} figures: {', '.join(f.id for f in built) or 'none'}) "
          f"in {time.perf_counter() - t0:.0f} s; "
          + ", ".join(f"{k} {v if isinstance(v, str) else f'{v:.0f} s'}"
                      for k, v in status.items()))
    return 1 if "failed" in status.values() else 0
