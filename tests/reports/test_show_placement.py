"""`prefixbench show` prints what `placement solve|frontier|bench` printed."""
import json

import pytest

from prefixbench.harness.cli import main

from test_show import _exact, _set_metadata, _table


def _depths(tmp_path, weights):
    p = tmp_path / "depths.json"
    p.write_text(json.dumps({"weights": weights}))
    return str(p)


def test_placement_solve(tmp_path, capsys):
    f = _depths(tmp_path, [0, 1, 0, 3, 0, 0, 5])
    out = tmp_path / "solve.json"
    shown = _exact(capsys, ["-q", "placement", "solve", "--depths", f, "--budget", "2",
                            "-o", str(out)], out)
    assert shown.splitlines() == [
        "positions: 3 6",
        "expected recompute: 0.111111 positions (N = 6, budget 2, 2 used)",
        "no-reuse bound: 4.44444; dense bound: 0"]
    from prefixbench.reports import results
    assert results.load(str(out)).kind == "placement-solve"


def test_placement_solve_at_budget_zero_shows_its_zeros(tmp_path, capsys):
    f = _depths(tmp_path, [0, 1, 0, 3])
    out = tmp_path / "solve.json"
    shown = _exact(capsys, ["-q", "placement", "solve", "--depths", f, "--budget", "0",
                            "-o", str(out)], out)
    assert shown.splitlines()[0] == "positions: (none)"
    assert "(N = 3, budget 0, 0 used)" in shown


def test_placement_solve_json_still_writes_the_suite(tmp_path, capsys):
    f = _depths(tmp_path, [0, 1, 0, 3])
    out = tmp_path / "solve.json"
    assert main(["placement", "solve", "--depths", f, "--budget", "1", "--json",
                 "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["positions"] == [3]
    assert printed.err.strip() == f"wrote {out}"
    assert main(["show", str(out)]) == 0
    assert capsys.readouterr().out.startswith("positions: 3\n")


def test_placement_frontier(tmp_path, capsys):
    out = tmp_path / "frontier.json"
    shown = _exact(capsys, ["-q", "placement", "frontier", "-w", "document-qa", "-W",
                            "sessions=20", "--budgets", "1,2", "--model", "nemotron-h-8b",
                            "--split", "online", "-o", str(out)], out)
    lines = shown.splitlines()
    assert lines[0].startswith("placement frontier: document-qa (") and "split online" in lines[0]
    assert lines[1].startswith("model nemotron-h-8b: ")
    rows = [ln.split()[:2] for ln in lines]
    assert ["dp/entry", "2"] in rows and ["block:1", "-"] in rows and ["end", "-"] in rows
    assert "dp against the best heuristic within budget M" in shown and "at equal R" in shown
    from prefixbench.reports import results
    assert results.load(str(out)).kind == "placement"       # what the report's figure reads


#: what a frontier suite written before the placement rows and replay figures lacked
OLD_FIGURES = ("placement-requests", "placement-entries", "placement-entry-blocks-mean",
               "placement-block-size", "placement-hits-fit", "placement-hits-eval",
               "placement-no-reuse-blocks", "placement-dense-ckpt", "placement-state-bytes",
               "placement-kv-bytes-per-token")


def test_show_reads_a_frontier_written_before_the_placement_rows(tmp_path, capsys):
    """No rows list, no replay figures, no positions, no zeros listed: the rows show
    under names read back from their tags, zeros as 0; what needs the rest is left out."""
    out = tmp_path / "old.json"
    assert main(["-q", "placement", "frontier", "-w", "document-qa", "-W", "sessions=20",
                 "--budgets", "1,2", "--policies", "dp,block,uniform:3,end",
                 "-o", str(out)]) == 0
    printed = _table(capsys.readouterr().out).strip()
    doc = json.load(open(out))
    for key in ("placement_rows", "prefixbench_schema", "zero_figures"):
        _set_metadata(doc, key, drop=True)
    doc["benchmarks"] = [b for b in doc["benchmarks"]
                         if b["metadata"]["name"] not in OLD_FIGURES
                         and not b["metadata"]["name"].endswith("-positions")]
    json.dump(doc, open(out, "w"))
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out.strip()
    table, *sections = shown.split("\n\n")
    old_table, *old_sections = printed.split("\n\n")
    # every policy row as printed (the two bounds' rows need what the suite lacked)
    assert table.splitlines()[6:] == old_table.splitlines()[6:]
    assert any(ln.startswith("block:1 ") for ln in table.splitlines())
    assert any(ln.startswith("uniform:3 ") for ln in table.splitlines())
    # the comparison needs each row's positions: left out; dp at equal R is as printed
    assert len(old_sections) == 2 and sections == old_sections[1:]
    assert table.splitlines()[0] == "placement frontier: document-qa (? requests, ? " \
        "entries, mean ? blocks; block size ?), split offline: fit on ? hits, evaluated " \
        "on " + old_table.splitlines()[0].rsplit("evaluated on ", 1)[1]


@pytest.mark.compiled
def test_placement_bench(tmp_path, capsys, monkeypatch):
    from prefixbench.harness import placement as H
    monkeypatch.setattr(H, "BENCH_N", (100, 200, 400))
    monkeypatch.setattr(H, "BENCH_M", (2, 3))
    orig = H.bench
    monkeypatch.setattr(H, "bench", lambda repeats, progress: orig(
        H.BENCH_N, H.BENCH_M, repeats, progress=progress))
    out = tmp_path / "bench.json"
    shown = _exact(capsys, ["-q", "placement", "bench", "--repeats", "1", "-o", str(out)], out)
    rows = [ln.split() for ln in shown.splitlines()[3:]]
    assert [r[:2] for r in rows] == [["100", "2"], ["200", "2"], ["400", "2"],
                                     ["100", "3"], ["200", "3"], ["400", "3"]]
    assert rows[0][-1] == "-" and rows[3][-1] == "-"        # no ratio at each M's first N


def test_placement_output_that_cannot_be_written_is_one_line(tmp_path, capsys):
    from cli_support import one_line_error
    bad = str(tmp_path / "no" / "x.json")
    f = _depths(tmp_path, [0, 1])
    for argv, what in ((["solve", "--depths", f, "--budget", "1"], "placement solve"),
                       (["frontier", "-w", "document-qa", "-W", "sessions=5"],
                        "placement frontier"),
                       (["bench", "--repeats", "1"], "placement bench")):
        code = main(["-q", "placement", *argv, "-o", bad])
        got = capsys.readouterr()
        one_line_error(code, got.err, what, "does not exist")
        assert got.out == ""
