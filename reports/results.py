"""Result files in, schema readings out: what every report, plot and comparison reads.

A result is the pair of suites one command writes, ``OUT.json`` (times) and
``OUT.counts.json`` (counts and sizes); either file names the pair, and the
other is read too when it exists.  Every failure is one line naming the file:
no such file, truncated or malformed JSON, a pyperf suite some other tool
wrote (no prefixbench metadata), an unknown schema version.

The command behind a result (its *kind*) comes from the metadata and the
names: ``sweep-<kind>`` from ``sweep``, ``recover`` (``recovery-*``),
``payload`` (workload ``payload-restore``), ``placement`` (``placement-*``),
``scale`` (``threads-N-*`` without a setting), ``crashtest``, ``describe``,
``hash-bench``, ``engine-bench``, ``plugins``, ``placement-solve`` and
``placement-bench`` and ``arrival`` (metadata ``command``),
otherwise ``run``.
"""
from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field

from prefixbench import schema
from prefixbench.schema import SchemaError


def counts_path(path: str) -> str:
    root, ext = os.path.splitext(path)
    return f"{root}.counts{ext or '.json'}"


def pair(path: str) -> list:
    """The files of the result ``path`` names, the given one first."""
    if path.endswith(".counts.json"):
        other = path[: -len(".counts.json")] + ".json"
    else:
        other = counts_path(path)
    return [path] + ([other] if os.path.isfile(other) else [])


def load_suite(path: str):
    """One pyperf suite, or a :class:`SchemaError` line naming the file."""
    import pyperf
    if not os.path.exists(path):
        raise SchemaError(f"{path}: no such result file")
    if os.path.isdir(path):
        raise SchemaError(f"{path}: is a directory; give a result .json file")
    try:
        suite = pyperf.BenchmarkSuite.load(path)
    except json.JSONDecodeError as e:
        if e.pos == 0:
            raise SchemaError(f"{path}: not JSON; give a result .json file (a pyperf suite a "
                              f"prefixbench command wrote)") from None
        raise SchemaError(f"{path}: truncated or malformed JSON (line {e.lineno}, column "
                          f"{e.colno}: {e.msg}); rerun the command that wrote it") from None
    except OSError as e:
        raise SchemaError(f"{path}: cannot read: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SchemaError(f"{path}: not a pyperf result file ({type(e).__name__}: "
                          f"{str(e)[:80]})") from None
    benches = suite.get_benchmarks()
    if not any(schema.is_prefixbench(run.get_metadata())
               for b in benches for run in b.get_runs()[:1]):
        raise SchemaError(f"{path}: a pyperf suite from another tool (no prefixbench "
                          f"metadata); give a file a prefixbench command wrote")
    return suite


@dataclass
class Result:
    """The readings of one command's result files."""

    path: str
    files: list
    readings: list
    #: metadata of the first run of each benchmark, by (setting, threads)
    metadata: dict
    kind: str
    names: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return os.path.basename(self.path)

    def common(self) -> dict:
        """Metadata every setting shares (the first one's where they differ)."""
        mds = list(self.metadata.values())
        if not mds:
            return {}
        out = dict(mds[0])
        for md in mds[1:]:
            for k in list(out):
                if md.get(k) != out[k]:
                    out.pop(k)
        return out

    def first(self) -> dict:
        return next(iter(self.metadata.values()), {})

    def settings(self, threads: int | None = None) -> list:
        out = []
        for r in self.readings:
            if (threads is None or r.threads == threads) and r.setting not in out:
                out.append(r.setting)
        return out

    def threads(self) -> list:
        """Request-thread counts the settings ran at (readings outside every setting,
        such as a sweep's sizing replay, only when nothing else ran)."""
        ran = {r.threads for r in self.readings if r.setting is not None}
        return sorted(ran or {r.threads for r in self.readings})

    def get(self, name: str, setting=None, threads: int | None = None):
        return schema.read(self.readings, name, setting, threads)

    def md(self, setting=None, threads: int = 1) -> dict:
        return self.metadata.get((setting, threads)) or next(
            (m for (s, _), m in self.metadata.items() if s == setting), {})

    def workload(self) -> str:
        return str(self.first().get("workload", "?"))

    def strategy(self, setting=None) -> str:
        return str(self.md(setting).get("strategy", setting or "?"))


#: commands named by the metadata ``command`` of the suites they write
COMMANDS = ("crashtest", "describe", "hash-bench", "engine-bench", "plugins",
            "placement-solve", "placement-bench", "arrival")


def _kind(md: dict, names: list, readings: list) -> str:
    if md.get("command") in COMMANDS:
        return md["command"]
    if md.get("sweep"):
        return f"sweep-{md['sweep']}"
    if any(n.startswith("recovery-") for n in names):
        return "recover"
    if md.get("workload") == "payload-restore":
        return "payload"
    if any(n.startswith("placement-") for n in names):
        return "placement"
    if any(n.startswith("threads-") for n in names):
        return "scale"
    return "run"


def load(path: str) -> Result:
    """A result from one of its files (see the module docstring for the errors)."""
    files = pair(path)
    return from_suites(path, [(f, load_suite(f)) for f in files])


def from_suites(path: str, suites: list) -> Result:
    """A result from ``(file name, loaded suite)`` pairs: files, or suites a command
    built in memory (``path`` then names the command's output, or none)."""
    files = [f for f, _ in suites]
    readings, metadata, names = [], {}, []
    for f, suite in suites:
        try:
            readings += schema.readings(suite)
        except SchemaError as e:
            raise SchemaError(f"{f}: {e}") from None
        for b in suite.get_benchmarks():
            names.append(b.get_name())
            md = b.get_runs()[0].get_metadata() if b.get_runs() else {}
            setting, threads, _ = schema.parse_name(b.get_name(), md)
            metadata.setdefault((setting, threads), md)
    # one reading per (setting, threads, name): the time file's wins over the metadata copy
    seen, unique = set(), []
    for r in readings:
        key = (r.setting, r.threads, r.name)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    first = next(iter(metadata.values()), {})
    return Result(path, files, unique, metadata, _kind(first, names, unique), names)


def machine(md: dict) -> str:
    """The machine a result was measured on, from what its metadata records."""
    labels = {"cpu_count": "{} cores", "mem_total": "{} RAM", "store_device": "store on {}",
              "allocator": "malloc {}"}
    parts = [labels.get(k, "{}").format(md[k]) for k in schema.MACHINE_KEYS if k in md]
    return ", ".join(parts) if parts else "not recorded in the suite"


def rendered_on() -> str:
    """Where the report itself was rendered (not where the numbers came from)."""
    return f"{platform.node() or '?'} ({platform.machine()}, {os.cpu_count()} cores)"
