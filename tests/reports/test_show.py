"""`prefixbench show RESULT.json` prints the table the command printed when it wrote it."""
import json

from prefixbench.harness.cli import main


def _table(out: str) -> str:
    """The command's table: its output without the 'wrote ...' line."""
    return "\n".join(ln for ln in out.splitlines() if not ln.startswith("wrote "))


def _same(capsys, argv, path):
    """The command's table (its first lines; notes may follow it) equals show's."""
    assert main(argv) == 0
    printed = _table(capsys.readouterr().out).strip().splitlines()
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out.strip().splitlines()
    assert shown and printed[:len(shown)] == shown
    return "\n".join(shown)


def test_run(tmp_path, capsys):
    out = tmp_path / "run.json"
    shown = _same(capsys, ["-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=3",
                           "--no-runner", "-o", str(out)], out)
    assert "false hits" in shown
    # a figure whose value was 0 reads as 0, not a blank
    md = json.load(open(tmp_path / "run.counts.json"))["metadata"]
    assert "store-bytes" in md["zero_figures"].split()
    assert md["prefixbench_schema"] == 1 and md["cpu_count"] >= 1 and md["mem_total"]


def test_run_prints_the_options_given_and_those_beyond_the_paper_in_effect(tmp_path, capsys):
    """A default that shapes a result is never hidden behind "(defaults)": the run's
    table names the options given, then the values in effect of those its paper
    does not have, and ``show`` reads them back from the file."""
    out = tmp_path / "sarp.json"
    shown = _same(capsys, ["-q", "run", "-s", "sarp", "-e", "memory", "-w", "codeact", "-W",
                           "sessions=3",
                           "-S", "max_retrieval=2", "-S", "batch_windows=8", "--no-runner",
                           "-o", str(out)], out)
    row = next(ln for ln in shown.splitlines() if ln.startswith("strategy options"))
    given, _, beyond = row.partition("; beyond the paper: ")
    assert sorted(given.split()[-2:]) == ["batch_windows=8,", "max_retrieval=2"]
    assert "backfill_wait=true" in beyond and "id_runs=64" in beyond
    assert "batch_windows" not in beyond                 # given: listed once, as given
    shown = _same(capsys, ["-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=3",
                           "--no-runner", "-o", str(tmp_path / "radix.json")],
                  tmp_path / "radix.json")
    assert any(ln.split()[-1:] == ["(defaults)"] for ln in shown.splitlines()
               if ln.startswith("strategy options"))


def test_run_with_pools(tmp_path, capsys):
    out = tmp_path / "pool.json"
    shown = _exact(capsys, ["-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=3",
                            "--pool-blocks", "unbounded", "-o", str(out)], out)
    assert "pools                                 1 worker(s) x unbounded blocks" in shown
    assert "- (nothing evicted)" in shown


def test_run_with_breakdown(tmp_path, capsys):
    out = tmp_path / "bd.json"
    shown = _exact(capsys, ["-q", "run", "-s", "dram-blockhash", "-w", "codeact", "-W",
                            "sessions=3", "--no-runner", "--breakdown", "-o", str(out)], out)
    head, _, tail = shown.partition("\n\nwhere the time goes (paper Fig. 7)\n")
    assert "false hits" in head and tail.startswith("strategy")
    assert "dram-blockhash  match" in tail and "clock overhead" in tail


def test_scale(tmp_path, capsys):
    out = tmp_path / "scale.json"
    shown = _same(capsys, ["-q", "scale", "-s", "dram-blockhash", "-w", "codeact", "-W",
                           "sessions=3", "--threads", "1,2", "-o", str(out)], out)
    assert "Amdahl bound" in shown and "\n2 " in shown


def test_recover_keeps_every_repeat(tmp_path, capsys):
    out = tmp_path / "rec.json"
    shown = _same(capsys, ["-q", "recover", "-s", "dram-blockhash", "-n", "1000",
                           "--repeat", "2", "-o", str(out)], out)
    assert "recoveries (median shown)  2, each cell the median (min-max)" in shown
    from prefixbench.reports import results
    assert results.load(str(out)).get("recovery-index").runs == 2


def test_crashtest(tmp_path, capsys):
    out = tmp_path / "crash.json"
    shown = _same(capsys, ["-q", "crashtest", "-s", "radix", "-e", "lmdb", "-i", "1", "-W",
                           "sessions=3", "--max-kill-ms", "200", "-o", str(out)], out)
    row = [ln for ln in shown.splitlines() if ln.startswith("lmdb")][0].split()
    assert row[:3] == ["lmdb", "radix", "1"] and row[6] == "0"     # lost: a zero, shown as 0


def test_describe(tmp_path, capsys):
    out = tmp_path / "desc.json"
    shown = _same(capsys, ["-q", "workload", "describe", "codeact", "-W", "sessions=3",
                           "-o", str(out)], out)
    assert "unique blocks" in shown and "codeact" in shown


def test_show_of_a_truncated_file_is_one_line(tmp_path, capsys):
    from cli_support import one_line_error
    p = tmp_path / "x.json"
    p.write_text("{")
    code = main(["show", str(p)])
    one_line_error(code, capsys.readouterr().err, str(p))


def test_payload(tmp_path, capsys):
    out = tmp_path / "payload.json"
    shown = _same(capsys, ["-q", "payload", "--payload", "4MiB", "--objects", "4,16,layerwise",
                           "--layers", "2", "--layer-object", "512KiB", "--restores", "2",
                           "--stripe", "1MiB", "--pack-bytes", "8MiB", "--paths",
                           "seq,files,stripes", "--work-dir", str(tmp_path / "w"),
                           "-o", str(out)], out)
    assert "layerwise (" in shown and "stripes / adjacent seq restore" in shown


def test_sweep_retrieval(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    shown = _same(capsys, ["-q", "sweep", "retrieval", "-w", "codeact", "-W", "sessions=3",
                           "--budgets", "1,unlimited", "-o", str(out)], out)
    assert "retrieval-unlimited  unlimited" in shown


def test_sweep_strategies_with_repeats(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    shown = _same(capsys, ["-q", "sweep", "strategies", "-w", "codeact", "-W",
                           "sessions=3", "--strategies", "sarp,segment-hash",
                           "--repeat", "2", "-o", str(out)], out)
    assert "2 repeats (median, min-max)" in shown and "segment-hash" in shown
    assert "fastest variant" not in shown       # each strategy ran in one variant


def test_sweep_strategies_each_at_its_fastest_variant(tmp_path, capsys):
    """With a strategy in several variants, a table sets each at its fastest (highest
    median req/s) against the first strategy's fastest, paired within each repeat."""
    import statistics
    from prefixbench.reports import results
    out = tmp_path / "sweep.json"
    shown = _exact(capsys, ["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=3",
                            "--strategies", "sarp,sarp+max_retrieval=1,ssd-blockhash,"
                            "ssd-blockhash+probe=batch", "--repeat", "2",
                            "-o", str(out)], out)
    res = results.load(str(out))

    def rates(s):
        return res.get("request-throughput", s, 1).values
    fast = {name: max(group, key=lambda s: statistics.median(rates(s)))
            for name, group in (("sarp", ["sarp", "sarp+max_retrieval=1"]),
                                ("ssd-blockhash", ["ssd-blockhash", "ssd-blockhash+probe=batch"]))}
    ratio = statistics.median(a / b for a, b in zip(rates(fast["sarp"]),
                                                    rates(fast["ssd-blockhash"])))
    lines = shown.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("each strategy at its fastest"))
    rows = {ln.split()[0]: ln.split() for ln in lines[at + 3:at + 5]}
    # cells: median, then (min-max)
    assert rows["sarp"][1:3] == [fast["sarp"], "2"] and rows["sarp"][5] == "1.00x"
    assert rows["ssd-blockhash"][1:3] == [fast["ssd-blockhash"], "2"]
    assert rows["ssd-blockhash"][5] == f"{ratio:.2f}x"
    assert at < shown.index("options of each strategy")


def _exact(capsys, argv, path):
    """Everything the command printed but its 'wrote' line is what show prints."""
    assert main(argv) == 0
    printed = _table(capsys.readouterr().out).strip()
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out.strip()
    assert shown and printed == shown
    return shown


def test_sweep_strategies_notes_threads_and_breakdown(tmp_path, capsys):
    """The options, threads, Table 4 and breakdown sections come from the suites."""
    out = tmp_path / "sweep.json"
    shown = _exact(capsys, ["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=3",
                            "--strategies", "sarp,dram-blockhash", "--threads", "1,2",
                            "--breakdown", "-o", str(out)], out)
    rows = [ln.split() for ln in shown.splitlines()]
    assert ["sarp", "backfill=sync;", "beyond", "the", "paper:", "backfill_wait=true,",
            "batch_windows=64,",
            "id_runs=64,", "insert_lock=publish,", "insert_reuse=true"] in rows
    assert ["dram-blockhash", "(defaults)"] in rows
    for needle in ("options of each strategy", "request threads side by side",
                   "the paper ran 42 request threads", "serial frac @2", "Amdahl bound @2",
                   "sarp, paper Table 4 (at --scale small", "within 25%", "59.30",
                   "geometry", "where the time goes (paper Fig. 7)", "clock overhead"):
        assert needle in shown, needle
    assert shown.index("options of each") < shown.index("request threads side") \
        < shown.index("paper Table 4") < shown.index("where the time goes")


def test_sweep_strategies_cap_rule_line(tmp_path, capsys, monkeypatch):
    """The cap rule's line above the table is the suite's cap_rule metadata."""
    from prefixbench.harness import caprule
    from prefixbench.harness.caprule import CapChoice

    def choose(**kw):
        return CapChoice(fraction=0.25, nodes=12, total_nodes=48, sarp_s=[0.1] * 5,
                         capped_s=[0.15] * 5, sarp_median=0.1, capped_median=0.15, ratio=1.5,
                         in_band=True, entries=10 ** 7, workload="codeact", engine="lmdb",
                         steps=[(0.25, 0.15, 1.5)])
    monkeypatch.setattr(caprule, "choose_cap", choose)
    out = tmp_path / "sweep.json"
    shown = _exact(capsys, ["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=3",
                            "-e", "lmdb", "--strategies", "sarp,segment-radix-capped",
                            "-o", str(out)], out)
    assert shown.splitlines()[0].startswith("cap rule: fraction 0.25 (12 of 48 nodes)")
    assert ["segment-radix-capped", "cap_fraction=0.25;", "beyond", "the", "paper:",
            "id_runs=64"] in [ln.split() for ln in shown.splitlines()]


def test_sweep_capacity(tmp_path, capsys):
    out = tmp_path / "cap.json"
    shown = _exact(capsys, ["-q", "sweep", "capacity", "-w", "codeact", "-W", "sessions=3",
                            "--pool-blocks", "200,unbounded", "--strategies",
                            "radix,dram-blockhash", "-o", str(out)], out)
    rows = [ln.split() for ln in shown.splitlines()]
    unbounded = [r for r in rows if r[:2] == ["radix", "unbounded"]][0]
    assert unbounded[6] == "0.0"                  # no evictions: a zero, shown as 0
    assert unbounded[14] == "-"     # and no remove call to time (latencies are 2 tokens)
    assert "stack inclusion (LRU, one worker): holds" in shown


def test_sweep_capacity_violation_and_note_from_the_suite(tmp_path):
    """A violation and the notes line are rendered from the metadata and figures."""
    from prefixbench.harness import capacity, pools
    cfg = capacity.make_config(workload="codeact", workload_options={"sessions": "20"},
                               pool_blocks="250,unbounded", strategies="radix")
    res = capacity.run_capacity(cfg)
    small, big = res.rows
    assert big.result.oracle_hit_tokens > small.result.oracle_hit_tokens
    res.rows = [capacity.CapacityRow("radix", 200, big.result, True),
                capacity.CapacityRow("radix", pools.UNBOUNDED, small.result, True)]
    cfg.notes = ["note: skipped sarp (cannot remove blocks)"]
    report = res.table()
    assert report.splitlines()[1] == "note: skipped sarp (cannot remove blocks)"
    assert "stack inclusion VIOLATED: radix hit rate" in report
    assert "stack inclusion VIOLATED: oracle (radix) hit rate" in report
    assert "at 200 blocks" in report            # the row's capacity, not its pool's


def test_hash_bench(tmp_path, capsys):
    out = tmp_path / "hash.json"
    shown = _exact(capsys, ["-q", "hash-bench", "--tokens", "32K", "-o", str(out)], out)
    assert "M tokens/s (32,000 tokens, best of 3)" in shown and "ratio  :" in shown
    from prefixbench.reports import results
    res = results.load(str(out))
    assert res.kind == "hash-bench" and res.get("hash-block-size").median == 16
    assert res.get("workload-block-size") is None


def test_engine_bench(tmp_path, capsys):
    out = tmp_path / "eng.json"
    shown = _exact(capsys, ["-q", "engine-bench", "-e", "memory", "--keys", "500",
                            "-o", str(out)], out)
    lines = dict(ln.strip().split(": ", 1) for ln in shown.splitlines())
    assert lines["engine"] == "memory" and lines["n_keys"] == "500"
    assert lines["size_on_disk_bytes"] == "0"     # the memory engine: a zero, shown as 0
    assert lines["get_s_per_key"].endswith(" us")


def test_plugins(tmp_path, capsys):
    out = tmp_path / "plugins.json"
    shown = _exact(capsys, ["-q", "plugins", "--options", "-o", str(out)], out)
    rows = [ln.split()[:3] for ln in shown.splitlines()]
    assert ["strategy", "sarp", "prefixbench"] in rows and ["sarp", "tau", "256"] in rows
    from prefixbench.reports import results
    assert results.load(str(out)).get("plugins-strategy").median >= 6


def test_plugins_list_that_is_not_json_is_one_line(tmp_path, capsys):
    from cli_support import one_line_error
    out = tmp_path / "plugins.json"
    assert main(["-q", "plugins", "-o", str(out)]) == 0
    capsys.readouterr()
    doc = json.load(open(out))
    _set_metadata(doc, "plugins", "[not json")
    json.dump(doc, open(out, "w"))
    one_line_error(main(["show", str(out)]), capsys.readouterr().err, "plugins list")


def _set_metadata(node, key, value=None, drop=False):
    """Every metadata dict of a pyperf JSON document gets ``key`` (or loses it)."""
    if isinstance(node, dict):
        for k, v in list(node.items()):
            if k == "metadata" and isinstance(v, dict):
                if drop:
                    v.pop(key, None)
                else:
                    v[key] = value
            else:
                _set_metadata(v, key, value, drop)
    elif isinstance(node, list):
        for v in node:
            _set_metadata(v, key, value, drop)


def test_unknown_sweep_kind_is_one_line(tmp_path, capsys):
    from cli_support import one_line_error
    out = tmp_path / "sweep.json"
    assert main(["-q", "sweep", "retrieval", "-w", "codeact", "-W", "sessions=3",
                 "--budgets", "1", "-o", str(out)]) == 0
    capsys.readouterr()
    for f in (out, tmp_path / "sweep.counts.json"):
        doc = json.load(open(f))
        _set_metadata(doc, "sweep", "tuning")
        json.dump(doc, open(f, "w"))
    code = main(["show", str(out)])
    err = capsys.readouterr().err
    one_line_error(code, err, "sweep-tuning")
    assert "sweep-capacity" in err and "hash-bench" in err


#: metadata keys a strategies sweep suite lacked before it carried its notes
NEW_KEYS = ("table4_paper", "calibration_tolerance", "span_share_paper",
            "span_share_max_blocks", "paper_request_threads", "paper_rocksdb_threads",
            "index_text", "prefixbench_schema", "zero_figures")


def test_show_reads_a_sweep_written_before_the_note_keys(tmp_path, capsys):
    """A version-0 suite (no schema key, no zeros, no note keys) still shows: the
    sections it has data for, without the paper column or the paper's threads."""
    out = tmp_path / "old.json"
    assert main(["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=3",
                 "--strategies", "sarp,dram-blockhash", "--threads", "1,2",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    for f in (out, tmp_path / "old.counts.json"):
        doc = json.load(open(f))
        for key in NEW_KEYS:
            _set_metadata(doc, key, drop=True)
        json.dump(doc, open(f, "w"))
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "strategies side by side" in shown and "options of each strategy" in shown
    assert "sarp, paper Table 4" in shown and "within 25%" not in shown
    assert "geometry" not in shown                       # a text counter it never stored
    assert "request threads side by side (paper Fig. 11): this machine has" in shown
    assert "the paper ran" not in shown


def test_show_reads_a_capacity_sweep_written_before_the_note_keys(tmp_path, capsys):
    out = tmp_path / "old.json"
    assert main(["-q", "sweep", "capacity", "-w", "codeact", "-W", "sessions=3",
                 "--pool-blocks", "200,unbounded", "--strategies", "radix",
                 "-o", str(out)]) == 0
    printed = _table(capsys.readouterr().out).strip()
    for f in (out, tmp_path / "old.counts.json"):
        doc = json.load(open(f))
        for key in ("capacity_blocks", "exact", "prefixbench_schema"):
            _set_metadata(doc, key, drop=True)
        json.dump(doc, open(f, "w"))
    assert main(["show", str(out)]) == 0
    assert capsys.readouterr().out.strip() == printed    # pool_blocks names the capacity


def test_csv_row_is_rendered_from_the_run_suites(tmp_path, capsys):
    """run --csv writes the row reports render from the suites -o wrote."""
    import csv

    from prefixbench import schema
    from prefixbench.reports import results, show
    out, rows = tmp_path / "run.json", tmp_path / "rows.csv"
    assert main(["-q", "run", "-s", "dram-blockhash", "-w", "codeact", "-W", "sessions=3",
                 "--no-runner", "-o", str(out), "--csv", str(rows)]) == 0
    (row,) = list(csv.DictReader(rows.open()))
    assert tuple(row) == schema.CSV_COLUMNS               # the columns as before the schema
    again = show.csv_row(results.load(str(out)), date=row["date"])
    assert row == {k: str(v) for k, v in again.items()}
    res = results.load(str(out))
    assert int(row["requests"]) == res.get("requests").median
    assert float(row["match_mean_us"]) == round(res.get("match-latency-mean").median * 1e6, 3)
    assert row["false_hits"] == "0" and row["bytes_on_disk"] == "0"     # zeros, not blanks


def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """hash-bench, engine-bench and plugins check -o before any work."""
    from cli_support import one_line_error
    bad = str(tmp_path / "no" / "such" / "x.json")
    for argv, what in ((["hash-bench", "--tokens", "32K"], "hash-bench"),
                       (["engine-bench", "-e", "memory", "--keys", "10"], "engine-bench"),
                       (["plugins"], "plugins")):
        code = main(["-q", *argv, "-o", bad])
        out = capsys.readouterr()
        one_line_error(code, out.err, what, "does not exist")
        assert out.out == ""


def test_demo_prints_each_run_as_show_prints_its_file(tmp_path, capsys):
    """demo's two tables are run's table of the files it wrote, then the comparison."""
    d = tmp_path / "demo"
    assert main(["-q", "demo", "-W", "sessions=3", "-e", "memory", "--out-dir", str(d)]) == 0
    printed = capsys.readouterr().out
    shown = []
    for strategy in ("dram-blockhash", "ssd-blockhash"):
        assert main(["show", str(d / f"{strategy}.json")]) == 0
        shown.append(capsys.readouterr().out)
    assert "ssd-blockhash / memory / lmcache-agent" in shown[1]
    assert printed.startswith(shown[0] + shown[1] + "\n$ python -m pyperf compare_to ")


def _token_log(path, n=40):
    rows = [{"session_id": f"s{i % 4}", "prompt_token_ids": [7] * 64 + [i] * 32,
             "output_token_ids": [i + 1] * 16, "timestamp": 0.5 * i} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_sweep_arrival(tmp_path, capsys):
    p = _token_log(tmp_path / "t.jsonl")
    out = tmp_path / "arr.json"
    shown = _exact(capsys, ["-q", "sweep", "arrival", "-s", "radix", "-w", "token-jsonl",
                            "-W", f"path={p}", "--speedup", "100,1000", "-o", str(out)], out)
    lines = shown.splitlines()
    assert lines[0] == "open-loop arrival: radix on token-jsonl (match latency includes queueing)"
    assert [ln.split()[:2] for ln in lines[2:4]] == [["100", "200.0"], ["1000", "2,000.0"]]
    assert "late starts" in lines[1] and "wake-up p99" in lines[1]
    assert lines[-2].startswith("saturation: ") and lines[-1].startswith("late starts: ")


def test_run_arrival_trace(tmp_path, capsys):
    p = _token_log(tmp_path / "t.jsonl")
    out = tmp_path / "arr.json"
    shown = _exact(capsys, ["-q", "run", "-s", "dram-blockhash", "-w", "token-jsonl", "-W",
                            f"path={p}", "--arrival", "trace", "--speedup", "200",
                            "--threads", "2", "-o", str(out)], out)
    assert shown.splitlines()[2].split()[:2] == ["200", "400.0"]
    assert "saturation: served up to 400.0 req/s offered (speedup 200)" in shown
