"""Where the time goes: the breakdown table (the SARP paper's Fig. 7).

One row per strategy and side (match, insert) of replays run with
``breakdown=True``; one column per phase any row has, in the phases' table
order (storage kinds first, ``rest`` last), each cell the mean microseconds
per request and its share of that side's mean latency (a row's shares add up
to 100%: ``rest`` is what no phase claimed).  A phase a side never entered
shows ``-``.  The last column is the clock's own estimated cost per request
(switches times the calibrated pair cost) as a share of the side's mean
latency; the line under the table says what that estimate means and flags a
match overhead at or above 5%, the bound past which the split is too coarse
to trust.  Column ``on CPU`` is the request thread's own CPU time in that side,
whatever phase it was in (it overlaps the phase columns: a device read costs
CPU too, in the kernel and, on a virtual machine, in its I/O path); the rest
of the latency the thread was off a core, waiting for the device, a lock or a
core.  Results recorded before it was measured show ``-`` there.  Replays
without a breakdown are listed under the table, not dropped silently.
"""
from __future__ import annotations

from prefixbench import phases
from prefixbench.reports.tables import format_table

#: match overhead (share of mean match latency) past which the table warns
OVERHEAD_LIMIT = 0.05


def _cell(seconds: float, mean: float) -> str:
    share = seconds / mean if mean else 0.0
    return f"{seconds * 1e6:.1f} ({share:.1%})"


def format_breakdown(rows) -> str:
    """``rows``: ``(label, ReplayResult)`` pairs -> one plain-text table."""
    rows = list(rows)
    with_bd = [(label, res) for label, res in rows if res.breakdown]
    without = [label for label, res in rows if not res.breakdown]
    if not with_bd:
        return "no breakdown to show (replay with breakdown=True, e.g. run --breakdown)"
    names = phases.ordered({n for _, res in with_bd for n in res.phase_ns})
    header = ("strategy", "side", "mean us") + tuple(names) + ("on CPU", "clock overhead")
    table = []
    over = []
    for label, res in with_bd:
        for which, overhead in (("match", res.breakdown_overhead),
                                ("insert", res.breakdown_overhead_insert)):
            mean = res.latency(which)
            cells = [_cell(t, mean) if (t := res.phase_mean(which, n)) > 0 else "-"
                     for n in names]
            cpu = res.cpu_mean(which)
            table.append((label, which, f"{mean * 1e6:.1f}", *cells,
                          _cell(cpu, mean) if cpu > 0 else "-", f"{overhead:.1%}"))
        if res.breakdown_overhead >= OVERHEAD_LIMIT:
            over.append(f"{label} {res.breakdown_overhead:.1%}")
    pair = max(res.breakdown_pair_ns for _, res in with_bd)
    notes = [f"cells: mean us per request (share of the side's mean latency); on CPU: "
             f"the request thread's own CPU time in that side, any phase (the rest of the "
             f"latency it waited: for the device, a lock or a core); clock overhead: phase "
             f"switches per request x their calibrated cost (up to {pair:.0f} ns each), "
             f"already inside the latencies"]
    if over:
        notes.append(f"warning: match overhead at or above {OVERHEAD_LIMIT:.0%} "
                     f"({', '.join(over)}): the split is coarse for these rows")
    else:
        notes.append(f"match overhead under {OVERHEAD_LIMIT:.0%} in every row")
    if without:
        notes.append(f"no breakdown recorded: {', '.join(without)}")
    return format_table(header, table) + "\n" + "\n".join(notes)
