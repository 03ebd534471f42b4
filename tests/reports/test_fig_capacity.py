"""The capacity figure: hit rate against pool capacity beside the oracle, with the cliff.

Built from a small real ``sweep capacity`` run (memory engine, 20 codeact
sessions); behaviour only: the image decodes, the table and caption are in the
HTML, the cliff is where the curve is steepest per decade.
"""
from __future__ import annotations

import base64
import io
import re

import pytest

from cli_support import one_line_error

html5lib = pytest.importorskip("html5lib", reason="pip install html5lib (the test extra)")

CAPS = "250,400,800,1600,unbounded"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from prefixbench.harness.cli import main
    out = str(tmp_path_factory.mktemp("capacity") / "cap.json")
    code = main(["-q", "sweep", "capacity", "-w", "codeact", "-W", "sessions=20",
                 "--pool-blocks", CAPS, "--strategies", "radix,sarp", "-o", out])
    assert code == 0
    return out


def _png(data: bytes):
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(data), format="png")
    assert img.shape[0] > 50 and img.shape[1] > 50
    assert img[..., :3].std() > 0.01                 # not a blank canvas
    return img


def _section(path: str, fid: str):
    with open(path, "rb") as f:
        doc = html5lib.parse(f, treebuilder="etree", namespaceHTMLElements=False)
    return next(s for s in doc.findall(".//section") if s.get("id") == fid)


def test_report_draws_capacity_with_its_table_and_conditions(sweep, run_cli, tmp_path):
    out = tmp_path / "report.html"
    code, _, err = run_cli("-q", "report", sweep, "-o", out, "--figures", "capacity")
    assert code == 0, err
    with open(out, "rb") as f:
        html5lib.HTMLParser(strict=True).parse(f)
    sec = _section(str(out), "capacity")
    src = sec.find(".//img").get("src")
    m = re.match(r"data:image/png;base64,(.+)\Z", src, re.S)
    assert m
    _png(base64.b64decode(m.group(1), validate=True))
    table = next(t for t in sec.findall(".//table") if t.get("class") == "ours")
    header = ["".join(th.itertext()) for th in table.findall(".//thead//th")]
    assert header[:5] == ["workload", "strategy", "pool blocks", "hit rate", "oracle hit rate"]
    rows = [["".join(td.itertext()) for td in tr.findall("td")]
            for tr in table.findall(".//tbody/tr")]
    assert {(r[1], r[2]) for r in rows} == {(s, c) for s in ("radix", "sarp")
                                            for c in ("250", "400", "800", "1,600", "unbounded")}
    # radix is exact: its hit rate is the oracle's at every capacity, and its loss a real 0
    assert all(r[3] == r[4] and r[5] == "0.000%" for r in rows if r[1] == "radix")
    caption = "".join(sec.find(".//figcaption").itertext())
    for what in ("command", "workload", "codeact (sessions=20)", "evict lru",
                 "1 worker(s)", "engine memory"):
        assert what in caption, what
    notes = " ".join("".join(p.itertext()) for p in sec.findall(".//div[@class='notes']/p"))
    assert "capacity cliff between" in notes and "per decade" in notes
    assert "stack inclusion (LRU, one worker): holds" in notes


def test_the_panel_is_log_x_with_the_cliff_marked(sweep):
    from prefixbench.harness.reporting import _papers
    from prefixbench.reports import figures, results
    fig = figures.build([results.load(sweep)], _papers(), only=["capacity"])[0]
    (panel,) = fig.panels
    assert panel.xlog and panel.categories == [250, 400, 800, 1600]
    assert [s.label for s in panel.series] == ["radix", "sarp", "oracle"]
    assert [s.reference for s in panel.series] == [False, False, True]   # drawn apart, on top
    oracle = [p[0] for p in panel.series[-1].points]
    cl = figures.capacity_cliff(list(zip(panel.categories, oracle)))
    assert cl is not None
    (x, label), = panel.vlines
    assert x == pytest.approx(cl[4]) and cl[0] < x < cl[2]
    assert label == f"cliff {cl[0]:,}-{cl[2]:,}"
    # the unbounded pool is a reference level, not a point on the log axis
    assert [lab for _, lab in panel.hlines] == ["oracle, unbounded pool"]


def test_plot_capacity_writes_an_image(sweep, run_cli, tmp_path):
    out = tmp_path / "cap.png"
    code, _, err = run_cli("-q", "plot", sweep, "--figure", "capacity", "-o", out)
    assert code == 0, err
    _png(out.read_bytes())


def test_the_cliff_is_the_steepest_step_per_decade():
    from prefixbench.reports.figures import capacity_cliff
    # 100 -> 200 gains 10 points (33 per decade); 200 -> 2000 gains 20 (20 per decade):
    # the largest absolute rise is the second step, the cliff the first
    c0, h0, c1, h1, x = capacity_cliff([(100, 50.0), (200, 60.0), (2000, 80.0)])
    assert (c0, c1) == (100, 200) and x == pytest.approx((100 * 200) ** 0.5)
    assert capacity_cliff([(100, 50.0), (1000, 50.0), (10000, 40.0)]) is None
    assert capacity_cliff([(100, 50.0)]) is None


def test_plot_capacity_of_another_result_is_one_line(run_cli, tmp_path):
    from prefixbench.harness.cli import main
    run = str(tmp_path / "run.json")
    assert main(["-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=5",
                 "--no-runner", "-o", run]) == 0
    code, _, err = run_cli("plot", run, "--figure", "capacity", "-o", tmp_path / "x.png")
    one_line_error(code, err, "capacity", "sweep capacity", "run result")
    assert not (tmp_path / "x.png").exists()


def test_an_unknown_figure_lists_capacity_among_the_ids(sweep, run_cli, tmp_path):
    code, _, err = run_cli("plot", sweep, "--figure", "capacty", "-o", tmp_path / "x.png")
    one_line_error(code, err, "capacty", "capacity", "fig6")
