"""One row per run in CSV/TSV, the columns a user sorts and plots (db_bench style)."""
from __future__ import annotations

import csv
import datetime
import os

from prefixbench.errors import ConfigError

COLUMNS = (
    "date", "commit", "strategy", "engine", "workload", "threads", "requests", "ops_per_s",
    "match_mean_us", "match_p50_us", "match_p99_us", "match_p999_us",
    "insert_mean_us", "insert_p50_us", "insert_p99_us", "insert_p999_us",
    "hit_rate", "oracle_hit_rate", "loss_vs_oracle", "false_hits", "store_reads_per_match",
    "bytes_on_disk", "index_memory_bytes",
)


def check_export_path(path: str) -> None:
    """Fail before the run, not after it, when the row could not be written."""
    if os.path.isdir(path):
        raise ConfigError(f"option --csv: {path} is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"option --csv: directory {parent} does not exist")


def row(spec, res, commit: str, threads: int = 1) -> dict:
    us = 1e6
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit[:12], "strategy": spec.strategy,
        "engine": spec.engine if res.store_stats else "none", "workload": spec.workload,
        "threads": threads, "requests": res.requests, "ops_per_s": round(res.throughput, 1),
        **{f"{w}_{lab}_us": round(res.latency(w, q) * us, 3)
           for w in ("match", "insert")
           for lab, q in (("mean", None), ("p50", 50), ("p99", 99), ("p999", 99.9))},
        "hit_rate": round(res.hit_rate, 6), "oracle_hit_rate": round(res.oracle_hit_rate, 6),
        "loss_vs_oracle": round(res.hit_rate_loss, 8), "false_hits": res.false_hits,
        "store_reads_per_match": round(res.reads_per_match, 3), "bytes_on_disk": res.store_bytes,
        "index_memory_bytes": res.strategy_stats.get("memory_bytes", 0),
    }


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
