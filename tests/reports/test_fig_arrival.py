"""The arrival figure: queued match latency (p50, p99, p99.9) against offered load, the
saturation point marked, achieved beside offered load.

One small real open-loop run for the image, the table and the caption; the
saturation marker from rows of known values written by ``arrival``'s own suite
writer, since whether a real run saturates depends on the machine.
"""
from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest

from cli_support import one_line_error

html5lib = pytest.importorskip("html5lib", reason="pip install html5lib (the test extra)")


def _trace(path, n=30, gap=0.25):
    """A token-jsonl log with a timestamp on every line, sharing a 48-token prefix."""
    rng = np.random.default_rng(11)
    head = rng.integers(1, 32000, 48).tolist()
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"session_id": i % 3, "timestamp": round(i * gap, 3),
                                "prompt_token_ids": head + rng.integers(1, 32000, 24).tolist()})
                    + "\n")
    return str(path)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from prefixbench.harness.cli import main
    d = tmp_path_factory.mktemp("arrival")
    out = str(d / "arr.json")
    code = main(["-q", "arrival", "-s", "dram-blockhash", "-w", "token-jsonl",
                 "-W", f"path={_trace(d / 't.jsonl')}", "--speedup", "50,400", "--threads", "2",
                 "-o", out])
    assert code == 0
    return out


def _known(tmp_path, rows, name="known.json", prefixed=True):
    """Suites of hand-made rows, written the way ``arrival -o`` writes them (unprefixed:
    the way ``run --arrival trace`` does)."""
    from prefixbench.harness import arrival, pyperf_io
    md = pyperf_io.run_metadata("radix", None, "token-jsonl", {"workload_options": {}})
    out = str(tmp_path / name)
    arrival.write_suites(out, *arrival.suites(rows, md, threads=2, prefixed=prefixed))
    return out


def _row(speedup, offered, achieved, p99):
    from prefixbench.harness.arrival import ArrivalResult
    return ArrivalResult(speedup=speedup, requests=100, offered_rps=offered,
                         achieved_rps=achieved, p50_s=p99 / 4, p99_s=p99, p999_s=p99 * 1.5,
                         service_p50_s=1e-5, hit_tokens=600, prompt_tokens=1000, late_starts=0)


def _figure(path):
    from prefixbench.harness.reporting import _papers
    from prefixbench.reports import figures, results
    got = figures.build([results.load(path)], _papers(), only=["arrival"])
    assert len(got) == 1
    return got[0]


def test_report_draws_arrival_with_its_table_and_caption(real, run_cli, tmp_path):
    out = tmp_path / "report.html"
    code, _, err = run_cli("-q", "report", real, "-o", out, "--figures", "arrival")
    assert code == 0, err
    with open(out, "rb") as f:
        html5lib.HTMLParser(strict=True).parse(f)
    with open(out, "rb") as f:
        doc = html5lib.parse(f, treebuilder="etree", namespaceHTMLElements=False)
    sec = next(s for s in doc.findall(".//section") if s.get("id") == "arrival")
    m = re.match(r"data:image/png;base64,(.+)\Z", sec.find(".//img").get("src"), re.S)
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(base64.b64decode(m.group(1), validate=True)), format="png")
    assert img.shape[0] > 50 and img[..., :3].std() > 0.01
    table = next(t for t in sec.findall(".//table") if t.get("class") == "ours")
    rows = [["".join(td.itertext()) for td in tr.findall("td")]
            for tr in table.findall(".//tbody/tr")]
    assert [r[1] for r in rows] == ["50", "400"]
    # 29 gaps of 0.25 s: 4 req/s in the trace, so 200 and 1,600 req/s offered
    assert [r[2] for r in rows] == ["200.0", "1,600.0"]
    assert all(r[0] == "dram-blockhash on token-jsonl" and r[-1] in ("yes", "no") for r in rows)
    caption = "".join(sec.find(".//figcaption").itertext())
    assert "2 issuing threads (open loop)" in caption and "workload" in caption
    notes = " ".join("".join(p.itertext()) for p in sec.findall(".//div[@class='notes']/p"))
    assert "30 requests per speedup" in notes
    assert ("saturation point at speedup" in notes) or ("every speedup served" in notes)


def test_the_saturation_point_is_marked_at_its_offered_load(tmp_path):
    rows = [_row(1, 100.0, 100.0, 1e-4), _row(2, 200.0, 199.0, 2e-4),
            _row(4, 400.0, 250.0, 5e-3), _row(8, 800.0, 260.0, 9e-3)]
    fig = _figure(_known(tmp_path, rows))
    lat, load = fig.panels
    assert lat.xlog and lat.categories == [100.0, 200.0, 400.0, 800.0]
    assert [s.label for s in lat.series] == ["p50", "p99", "p99.9"]
    assert lat.series[1].points[2][0] == pytest.approx(5e-3 * 1e6)         # p99 in us
    assert lat.vlines == [(400.0, "saturation (speedup 4)")]
    assert [r[-1] for r in fig.rows] == ["yes", "yes", "no", "no"]
    assert any("saturation point at speedup 4, 400.0 req/s offered; sustained 200.0" in n
               for n in fig.notes)
    # achieved beside offered, the identity as the reference line
    assert load.series[0].points[2][0] == pytest.approx(250.0)
    assert load.series[-1].reference and load.series[-1].points[3][0] == 800.0


def test_no_marker_when_every_speedup_is_served_and_a_note_when_none_is(tmp_path):
    fig = _figure(_known(tmp_path, [_row(1, 100.0, 100.0, 1e-4), _row(2, 200.0, 200.0, 1e-4)]))
    assert fig.panels[0].vlines == []
    assert any("every speedup served, up to 200.0 req/s" in n for n in fig.notes)
    fig = _figure(_known(tmp_path, [_row(1, 100.0, 40.0, 1e-4), _row(2, 200.0, 41.0, 1e-4)],
                         "none.json"))
    assert fig.panels[0].vlines == [(100.0, "saturation (speedup 1)")]
    assert any("not served even at the first speedup" in n for n in fig.notes)


def test_plot_arrival_writes_an_image_and_refuses_another_result(real, run_cli, tmp_path):
    code, _, err = run_cli("-q", "plot", real, "--figure", "arrival", "-o", tmp_path / "a.svg")
    assert code == 0, err
    assert b"<svg" in (tmp_path / "a.svg").read_bytes()
    from prefixbench.harness.cli import main
    run = str(tmp_path / "run.json")
    assert main(["-q", "run", "-s", "radix", "-w", "codeact", "-W", "sessions=4",
                 "--no-runner", "-o", run]) == 0
    code, _, err = run_cli("plot", run, "--figure", "arrival", "-o", tmp_path / "b.png")
    one_line_error(code, err, "figure arrival", "sweep arrival", "run result")
    assert not (tmp_path / "b.png").exists()


def test_one_run_arrival_trace_is_one_point(tmp_path):
    fig = _figure(_known(tmp_path, [_row(3, 300.0, 299.0, 1e-4)], prefixed=False))
    assert fig.panels[0].categories == [300.0] and fig.panels[0].vlines == []
    assert [r[1] for r in fig.rows] == ["3"]
