"""`prefixbench reproduce`: experiments into OUTDIR, resumable, ending with the report."""
import os

from cli_support import one_line_error

from prefixbench.harness.cli import main


def test_small_fig6_fig9_report_resumes_and_skips(tmp_path, capsys):
    out = tmp_path / "repro"
    argv = ["-q", "reproduce", "sarp", "--scale", "small", "--figures", "fig6,fig9",
            "--limit", "40", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "claim" in printed and "met" in printed           # the summary table
    html = (out / "report.html").read_text()
    for fid in ("fig6", "fig9"):
        assert f'id="{fid}"' in html, fid
    assert {"strategies.done", "retrieval.done", "strategies-codeact.json",
            "retrieval-codeact.counts.json"} <= set(os.listdir(out))
    assert not (out / "fig1.done").exists()                 # only what the figures need
    before = (out / "strategies-codeact.json").stat().st_mtime_ns
    assert main(argv) == 0                                   # a rerun skips completed ones
    err = capsys.readouterr().err
    assert "strategies already complete" in err and "retrieval already complete" in err
    assert (out / "strategies-codeact.json").stat().st_mtime_ns == before


def test_unknown_figure_is_one_line_listing_the_ids(tmp_path, capsys):
    code = main(["reproduce", "sarp", "--figures", "fig99", "-o", str(tmp_path)])
    one_line_error(code, capsys.readouterr().err, "fig99", "fig6", "table5")


def test_outdir_that_cannot_be_written_is_one_line(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    code = main(["reproduce", "sarp", "--figures", "fig9", "-o", str(f)])
    one_line_error(code, capsys.readouterr().err, str(f))


def test_placement_hook_draws_the_frontier(tmp_path, capsys):
    out = tmp_path / "pl"
    assert main(["-q", "reproduce", "placement", "--limit", "30", "-o", str(out)]) == 0
    assert 'id="placement"' in (out / "report.html").read_text()
