"""Plain-text tables for the terminal (no styling, pipes cleanly)."""
from __future__ import annotations


def format_table(header, rows) -> str:
    rows = [tuple("" if c is None else str(c) for c in r) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(out)


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.2f} us"
    return f"{s * 1e9:.0f} ns"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_replay(spec, res) -> str:
    """The figures of one replay as a two-column table."""
    engine = spec.engine if res.store_stats else "-"
    rows = [
        ("strategy / engine / workload", f"{spec.strategy} / {engine} / {spec.workload}"),
        ("requests", f"{res.requests:,}"),
        ("throughput", f"{res.throughput:,.0f} requests/s (match+insert time)"),
        ("match latency mean / p50 / p99 / p999",
         " / ".join(fmt_seconds(res.latency("match", q)) for q in (None, 50, 99, 99.9))),
        ("insert latency mean / p50 / p99 / p999",
         " / ".join(fmt_seconds(res.latency("insert", q)) for q in (None, 50, 99, 99.9))),
        ("token hit rate", f"{res.hit_rate:.4%} (oracle {res.oracle_hit_rate:.4%}, "
                           f"loss {res.hit_rate_loss:.4%} of oracle hits)"),
        ("false hits", str(res.false_hits)),
        ("store reads per match", f"{res.reads_per_match:.2f}"),
        ("store bytes on disk (data / engine log)",
         f"{fmt_bytes(res.store_bytes)} / {fmt_bytes(res.store_log_bytes)}"),
        ("logical bytes stored / space amplification",
         f"{fmt_bytes(res.logical_bytes)} / {res.space_amplification:.2f}x"),
        ("index memory", fmt_bytes(res.strategy_stats.get("memory_bytes", 0))),
        ("gc", res.gc_mode),
    ]
    return format_table(("figure", "value"), rows)
