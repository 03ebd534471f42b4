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


def _contained(capsys, argv, path):
    """Show's table is one contiguous block of what the command printed (the strategies
    sweep prints live notes around its table)."""
    assert main(argv) == 0
    printed = _table(capsys.readouterr().out).strip().splitlines()
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out.strip().splitlines()
    assert shown and any(printed[i:i + len(shown)] == shown for i in range(len(printed)))
    return "\n".join(shown)


def test_sweep_retrieval(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    shown = _same(capsys, ["-q", "sweep", "retrieval", "-w", "codeact", "-W", "sessions=3",
                           "--budgets", "1,unlimited", "-o", str(out)], out)
    assert "retrieval-unlimited  unlimited" in shown


def test_sweep_strategies_with_repeats(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    shown = _contained(capsys, ["-q", "sweep", "strategies", "-w", "codeact", "-W",
                                "sessions=3", "--strategies", "sarp,segment-hash",
                                "--repeat", "2", "-o", str(out)], out)
    assert "2 repeats (median, min-max)" in shown and "segment-hash" in shown
