"""``prefixbench report``, ``plot`` and ``compare --html/--fail-above``: files in, reports/ out.

The commands only read result files; nothing is re-run.  Every user error is
one line (a :class:`PrefixbenchError`) and nothing is written on error: the
output path is checked before any work, and the file is written to a
temporary name beside it and renamed, so an existing report is replaced
whole or not at all.  ``compare`` without ``--html`` or ``--fail-above``
keeps its pyperf ``compare_to --table`` output.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile

from prefixbench.errors import ConfigError

FORMATS = ("png", "svg")


def add_commands(sub, commands: dict) -> None:
    """Register ``report`` and ``plot`` and extend ``compare`` on the CLI's subparsers."""
    from prefixbench.reports.figures import IDS
    p = sub.add_parser("report", help="one self-contained HTML report from result files",
                       description="Render result files (pyperf suites written by run, sweep, "
                       "scale, recover, payload) as one HTML file with figures inline, "
                       "tables, captions and the papers' values beside ours.")
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="result files")
    p.add_argument("-o", "--output", default="report.html", help="default: %(default)s")
    p.add_argument("--figures", help=f"comma-separated ids (default: all the results support; "
                   f"ids: {', '.join(IDS)})")
    p.add_argument("--prefill-tokens-per-s", type=float, metavar="R",
                   help="add a TTFT model: missed prompt tokens / R + mean match latency")
    p.add_argument("--title", default="prefixbench report")
    p = sub.add_parser("plot", help="one figure of result files as PNG or SVG",
                       description="Draw one report figure (--figure ID) to an image file.")
    p.add_argument("results", nargs="+", metavar="RESULT.json")
    p.add_argument("--figure", required=True, metavar="ID", help=f"one of: {', '.join(IDS)}")
    p.add_argument("-o", "--output", required=True, help="output .png or .svg")
    p.add_argument("--prefill-tokens-per-s", type=float, metavar="R")
    cmp = sub.choices.get("compare")
    if cmp is not None:
        cmp.add_argument("--html", metavar="OUT.html", help="two results side by side as HTML")
        cmp.add_argument("--fail-above", metavar="P%", help="exit 1 naming every figure that "
                         "regressed by more than P%% with significance")
    p = sub.add_parser("show", help="print the table the command behind a result printed",
                       description="Print the table the command that wrote RESULT.json "
                       "printed (run, scale, recover, crashtest, workload describe, payload, "
                       "sweep of any kind, hash-bench, engine-bench, plugins, placement "
                       "solve/frontier/bench, demo's files), from the file.")
    p.add_argument("result", metavar="RESULT.json", help="a result file (either of a pair)")
    commands["show"] = cmd_show
    old = commands.get("compare")
    old = getattr(old, "plain_compare", old)       # build_parser may run more than once

    def compare_cmd(args, **kw):
        return cmd_compare(args, old, **kw)
    compare_cmd.plain_compare = old
    commands["report"] = cmd_report
    commands["plot"] = cmd_plot
    commands["compare"] = compare_cmd


def check_output(path: str, what: str) -> str:
    """The absolute output path, or one line saying why it cannot be written."""
    path = os.path.abspath(path)
    d = os.path.dirname(path)
    if os.path.isdir(path):
        raise ConfigError(f"{what}: {path} is a directory; give a file name")
    if not os.path.isdir(d):
        raise ConfigError(f"{what}: cannot write {path}: directory {d} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: cannot write {path}: directory {d} is not writable")
    return path


def write_atomic(path: str, data: bytes, what: str) -> None:
    """Write beside ``path`` and rename: a reader sees the old file or the new one."""
    d = os.path.dirname(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".prefixbench-", dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)          # mkstemp's 0600 is not what a report wants
        os.replace(tmp, path)
    except OSError as e:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise ConfigError(f"{what}: cannot write {path}: {e.strerror or e}") from None


def _ids(text: str | None, what: str) -> list | None:
    from prefixbench.reports.figures import IDS
    if not text:
        return None
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in IDS]
    if bad:
        raise ConfigError(f"{what}: unknown figure {bad[0]!r} (figures: {', '.join(IDS)})")
    return out


def _load_all(paths: list) -> list:
    """Each result once: a directory stands for its ``.json`` files, and a result's two
    files (``OUT.json``, ``OUT.counts.json``) name it once."""
    from prefixbench.reports import results
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".json"))
            if not found:
                raise ConfigError(f"{p}: no .json result files in this directory")
            files += found
        else:
            files.append(p)
    out, seen = [], set()
    for f in files:
        key = os.path.abspath(results.pair(f)[0] if not f.endswith(".counts.json")
                              else f[: -len(".counts.json")] + ".json")
        if key in seen:
            continue
        seen.add(key)
        out.append(results.load(f))
    return out


def _papers() -> dict:
    from prefixbench.reports import paper
    return {k: paper.load(k) for k in paper.PAPERS}


def _rate(args) -> dict:
    r = getattr(args, "prefill_tokens_per_s", None)
    if r is not None and not r > 0:
        raise ConfigError("option --prefill-tokens-per-s: give a positive rate")
    return {"prefill_tokens_per_s": r} if r else {}


def cmd_report(args, quiet=False, **_):
    from prefixbench.reports import figures, html
    out = check_output(args.output, "report")
    only = _ids(args.figures, "report")
    opts = _rate(args)
    rs = _load_all(args.results)
    papers = _papers()
    figs = figures.build(rs, papers, opts, only)
    if only:
        missing = [i for i in only if i not in {f.id for f in figs}]
        if missing:
            raise ConfigError(f"report: no result has what figure {missing[0]} needs "
                              f"({_needs(missing[0])})")
    text = html.render(figs, rs, papers, args.title)
    write_atomic(out, text.encode("utf-8"), "report")
    if not quiet:
        print(f"wrote {out} ({len(figs)} figures: {', '.join(f.id for f in figs) or 'none'})")
    return 0


def _needs(fid: str) -> str:
    from prefixbench.reports.figures import FIGURES
    return next(cmd for i, _, cmd in FIGURES if i == fid)


def cmd_plot(args, quiet=False, **_):
    from prefixbench.reports import figures, plots
    fid = _ids(args.figure, "plot")[0]
    ext = os.path.splitext(args.output)[1].lstrip(".").lower()
    if ext not in FORMATS:
        raise ConfigError(f"plot: {args.output}: give a .png or .svg file name")
    out = check_output(args.output, "plot")
    rs = _load_all(args.results)
    figs = figures.build(rs, _papers(), _rate(args), [fid])
    if not figs:
        kinds = ", ".join(f"{r.path} is a {r.kind} result" for r in rs)
        raise ConfigError(f"plot: figure {fid} needs a result of `{_needs(fid)}`; {kinds}")
    write_atomic(out, plots.draw(figs[0].panels, fmt=ext, title=f"{fid}: {figs[0].title}"),
                 "plot")
    if not quiet:
        print(f"wrote {out}")
    return 0


def cmd_show(args, quiet=False, **_):
    from prefixbench.reports import results, show
    print(show.render(results.load(args.result)))
    return 0


def table_of(output: str | None, *benchmark_lists) -> str:
    """The table of what a command just wrote: read back from ``output`` when it wrote
    one (so it is exactly what ``show`` prints), else from the benchmarks in memory."""
    import pyperf

    from prefixbench.reports import results, show
    if output and os.path.isfile(output):
        return show.render(results.load(output))
    suites = [(output or "(not written)", pyperf.BenchmarkSuite(b))
              for b in benchmark_lists if b]
    return show.render(results.from_suites(output or "(not written)", suites))


def _engine_default(value) -> str:
    """An engine option's default as one would give it (``1GiB``, ``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        for unit, shift in (("GiB", 30), ("MiB", 20)):
            if value >= 1 << shift and value % (1 << shift) == 0:
                return f"{value >> shift}{unit}"
    return str(value)


def plugins_benchmarks(infos, options: bool) -> list:
    """``plugins``: one ``plugins-<kind>`` count per kind, the list itself (and each
    strategy's options) in the metadata, so ``show`` prints the table again."""
    import json

    from prefixbench import schema
    from prefixbench.harness import pyperf_io
    listed = []
    for i in infos:
        d = {"kind": i.kind, "name": i.name, "package": i.package, "version": i.version,
             "summary": i.summary}
        if i.kind == "strategy":
            d["options"] = [[key, repr(opt.default), opt.help] for key, opt in
                            sorted(getattr(i.factory, "options", {}).items())]
        elif i.kind == "engine":
            d["options"] = [[key, _engine_default(opt.default), opt.help] for key, opt in
                            sorted(getattr(i.factory, "OPTIONS", {}).items())]
        listed.append(d)
    md = pyperf_io.run_metadata("none", None, "none", {})
    md.update({"command": "plugins", schema.PLUGINS_KEY: json.dumps(listed),
               "plugins_options": int(bool(options))})
    kinds: dict = {}
    for d in listed:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    return pyperf_io.figure_benchmarks({f"plugins-{k}": float(n) for k, n in kinds.items()},
                                       md)


def parse_percent(text: str) -> float:
    """``5%`` or ``5`` -> 0.05; one line for anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%?\s*", text or "")
    if not m:
        raise ConfigError(f"option --fail-above: {text!r} is not a percentage (e.g. 5%)")
    return float(m.group(1)) / 100


def cmd_compare(args, old, leftover=(), argv=(), quiet=False):
    html_out = getattr(args, "html", None)
    fail = getattr(args, "fail_above", None)
    if not html_out and fail is None:
        return old(args, leftover=leftover, argv=argv, quiet=quiet)
    from prefixbench.reports import compare
    limit = parse_percent(fail) if fail is not None else None
    if len(args.files) != 2:
        raise ConfigError("compare: --html and --fail-above take exactly two result files "
                          "(BASE.json NEW.json)")
    out = check_output(html_out, "compare") if html_out else None
    from prefixbench.reports import results
    a, b = (results.load(f) for f in args.files)        # the same file twice is allowed here
    chs = compare.changes(a, b)
    if not chs:
        raise ConfigError(f"compare: {a.path} and {b.path} share no figure")
    print(compare.format_text(chs, a.path, b.path))
    if out:
        write_atomic(out, compare.render_html(chs, a, b, limit).encode("utf-8"), "compare")
        if not quiet:
            print(f"wrote {out}")
    if limit is not None:
        bad = compare.regressions(chs, limit)
        if bad:
            bad.sort(key=lambda c: -c.regression)
            more = f" and {len(bad) - 8} more (table above)" if len(bad) > 8 else ""
            print(f"prefixbench: compare: regressed by more than {limit:.1%}: "
                  + ", ".join(f"{c.label} {compare.fmt_change(c)} ({c.sig_text()})"
                              for c in bad[:8]) + more, file=sys.stderr)
            return 1
    return 0
