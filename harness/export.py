"""One row per run in CSV/TSV, the columns a user sorts and plots (db_bench style).

The row is rendered by :func:`prefixbench.reports.show.csv_row` from the run's
pyperf suites, through the schema (:data:`prefixbench.schema.CSV_COLUMNS`; each
figure's ``Figure.csv`` names its column), exactly as it would be from the
files ``-o`` writes.  The columns are the ones written before the schema, so
old and new CSV files append to each other.
"""
from __future__ import annotations

import csv
import datetime
import os

from prefixbench.errors import ConfigError
from prefixbench.schema import CSV_COLUMNS as COLUMNS


def check_export_path(path: str) -> None:
    """Fail before the run, not after it, when the row could not be written."""
    if os.path.isdir(path):
        raise ConfigError(f"option --csv: {path} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"option --csv: directory {parent} does not exist")


def row(spec, res, commit: str, threads: int | None = None) -> dict:
    """The CSV row of one replay, rendered from the suites it writes (``threads``:
    the run's request threads, default the spec's)."""
    import pyperf

    from prefixbench.harness import pyperf_io
    from prefixbench.reports import results, show
    md = pyperf_io.run_metadata(spec.strategy, spec.engine if res.store_stats else None,
                                spec.workload, spec.config())
    md.update({"git_commit": commit, "threads": threads or getattr(spec, "threads", 1)})
    suites = [(name, pyperf.BenchmarkSuite(b)) for name, b in
              zip(("times", "counts"), pyperf_io.replay_suites(res, md)) if b]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return show.csv_row(results.from_suites("(csv row)", suites), date=date)


def append_row(path: str, values: dict) -> None:
    """Append one row; write the header when the file is new.  ``.tsv`` uses tabs."""
    check_export_path(path)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    delim = "\t" if path.endswith(".tsv") else ","
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, delimiter=delim)
        if new:
            w.writeheader()
        w.writerow(values)
