"""report, plot and compare --html/--fail-above, built from the test's own small real runs."""
from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess

import pytest

from cli_support import one_line_error

html5lib = pytest.importorskip("html5lib", reason="pip install html5lib (the test extra)")


@pytest.fixture(scope="session")
def results(tmp_path_factory):
    """Small real runs of every command the report reads (about 15 s here)."""
    from prefixbench.harness.cli import main
    d = tmp_path_factory.mktemp("results")
    small = ["-W", "sessions=12", "--limit", "60"]
    runs = {
        "strategies": ["sweep", "strategies", "-w", "codeact", *small, "-e", "lmdb",
                       "--cap-rule", "fixed", "--breakdown"],
        "retrieval": ["sweep", "retrieval", "-w", "codeact", *small, "--budgets", "1,3"],
        "ablation": ["sweep", "ablation", "-w", "codeact", *small],
        "space": ["sweep", "space", "-w", "codeact", *small],
        "scale": ["scale", "-s", "sarp", "-e", "memory", "-w", "codeact", *small,
                  "--threads", "1,2"],
        "sarp": ["run", "-s", "sarp", "-e", "memory", "-w", "codeact", *small, "--no-runner"],
        "blockhash": ["run", "-s", "ssd-blockhash", "-e", "lmdb", "-w", "codeact", *small,
                      "--no-runner"],
        "recover": ["recover", "-s", "sarp", "-e", "lmdb", "-n", "5e3", "-w", "codeact",
                    "--repeat", "2"],
        "payload": ["payload", "--payload", "4MiB", "--objects", "4,16", "--restores", "2",
                    "--stripe", "1MiB", "--pack-bytes", "8MiB", "--paths", "seq,files,stripes",
                    "--work-dir", str(d / "payload-work")],
    }
    out = {}
    for name, args in runs.items():
        path = str(d / f"{name}.json")
        code = main(["-q", *args, "-o", path])
        assert code == 0, (name, code)
        out[name] = path
    return out


def _parse(path):
    with open(path, "rb") as f:
        return html5lib.parse(f, treebuilder="etree", namespaceHTMLElements=False)


def _decode_image(src: str):
    import matplotlib.image as mpimg
    m = re.match(r"data:image/(png|svg\+xml);base64,(.+)\Z", src, re.S)
    assert m, src[:60]
    data = base64.b64decode(m.group(2), validate=True)
    if m.group(1) == "png":
        img = mpimg.imread(io.BytesIO(data), format="png")
        assert img.shape[0] > 50 and img.shape[1] > 50
    else:
        assert b"<svg" in data
    return data


@pytest.fixture(scope="session")
def report(results, tmp_path_factory):
    from prefixbench.harness.cli import main
    out = str(tmp_path_factory.mktemp("report") / "report.html")
    code = main(["-q", "report", *results.values(), "-o", out, "--prefill-tokens-per-s", "8000"])
    assert code == 0
    return out


def test_report_parses_and_every_figure_has_an_image_and_a_table(report):
    with open(report, "rb") as f:
        html5lib.HTMLParser(strict=True).parse(f)          # raises on any parse error
    doc = _parse(report)
    sections = doc.findall(".//section")
    ids = [s.get("id") for s in sections]
    for fid in ("fig1", "table1", "fig6", "fig7", "fig8", "table3", "table4", "fig9",
                "fig10", "table5", "fig11", "range", "serving"):
        assert fid in ids, (fid, ids)
    for s in sections:
        imgs = s.findall(".//img")
        assert imgs, s.get("id")
        for img in imgs:
            _decode_image(img.get("src"))
        tables = [t for t in s.findall(".//table") if t.get("class") == "ours"]
        assert tables and tables[0].findall(".//tbody/tr"), s.get("id")
        assert s.find(".//figcaption") is not None
        caption = "".join(s.find(".//figcaption").itertext())
        for what in ("command", "commit", "machine", "engine", "cache rule", "cap"):
            assert what in caption, (s.get("id"), what)


def test_report_is_self_contained(report):
    text = open(report, encoding="utf-8").read()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "<script" not in text and "<link" not in text


def test_summary_lists_the_claims_with_paper_ours_and_verdict(report):
    doc = _parse(report)
    summary = next(t for t in doc.findall(".//table") if t.get("class") == "summary")
    header = ["".join(th.itertext()) for th in summary.findall(".//thead//th")]
    assert header == ["claim", "paper", "ours", "met"]
    rows = [["".join(td.itertext()) for td in tr.findall("td")]
            for tr in summary.findall(".//tbody/tr")]
    assert len(rows) >= 10
    assert all(r[3] in ("met", "missed", "context", "not run", "shape only") for r in rows)
    loss = next(r for r in rows if "sarp table3" in r[0])
    assert loss[1] == "0.003-0.029%" and loss[2] != "-"      # ours measured, zero included
    links = {a.get("href") for a in summary.findall(".//a")}
    sections = {s.get("id") for s in doc.findall(".//section")}
    assert "#table3" in links and all(h[1:] in sections for h in links)


def test_paper_values_stand_beside_every_figure_the_paper_quantifies(report):
    from prefixbench.reports import paper
    sarp = paper.load("sarp")
    doc = _parse(report)
    for s in doc.findall(".//section"):
        fid = s.get("id")
        quantified = sarp.find(fid) if fid != "range" else paper.load("range").find("fig1")
        tables = [t for t in s.findall(".//table") if t.get("class") == "paper"]
        if quantified:
            assert tables, fid
            assert len(tables[0].findall(".//tbody/tr")) >= len(quantified), fid
            cond = [t for t in s.findall(".//table") if t.get("class") == "conditions"]
            rows = ["".join(cond[0].find(".//tbody/tr/td").itertext())] if cond else []
            assert rows == ["machine"], fid             # the conditions that differ, first row


def test_small_report_with_chosen_figures(results, run_cli, tmp_path):
    out = tmp_path / "two.html"
    code, stdout, err = run_cli("report", results["strategies"], results["retrieval"],
                                "--figures", "fig6,fig9", "-o", out)
    assert code == 0, err
    ids = [s.get("id") for s in _parse(out).findall(".//section")]
    assert ids == ["fig6", "fig9"]
    assert "fig6, fig9" in stdout


def test_serving_view_models_ttft(report):
    doc = _parse(report)
    s = next(x for x in doc.findall(".//section") if x.get("id") == "serving")
    text = "".join(s.itertext())
    assert "saved tokens/request" in text and "modelled TTFT" in text and "8,000" in text


def test_plot_writes_png_and_svg(results, run_cli, tmp_path):
    for ext in ("png", "svg"):
        out = tmp_path / f"fig6.{ext}"
        code, _, err = run_cli("plot", results["strategies"], "--figure", "fig6", "-o", out)
        assert code == 0, err
        data = out.read_bytes()
        mime = "png" if ext == "png" else "svg+xml"
        _decode_image(f"data:image/{mime};base64,{base64.b64encode(data).decode()}")
    assert oct(os.stat(tmp_path / "fig6.png").st_mode & 0o077) != "0o0"


def test_compare_fails_above_the_threshold_naming_the_figure(results, run_cli, tmp_path):
    """sarp vs ssd-blockhash: the second reads the store once per block (a replay count, so
    the verdict holds whatever the machine's speed)."""
    out = tmp_path / "cmp.html"
    code, stdout, err = run_cli("compare", results["sarp"], results["blockhash"],
                                "--fail-above", "5%", "--html", out)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("prefixbench: compare: regressed by more than 5.0%: ")
    row = next(ln for ln in stdout.splitlines() if ln.startswith("store-reads-per-match "))
    assert row.split()[-1] == "worse" and "n<2" in row
    assert "significance" in stdout
    doc = _parse(out)
    for img in doc.findall(".//img"):
        _decode_image(img.get("src"))
    code, stdout, err = run_cli("compare", results["sarp"], results["sarp"], "--fail-above", "5%")
    assert code == 0, err


def test_compare_without_new_options_stays_pyperf_compare_to(results, run_cli):
    code, stdout, err = run_cli("compare", results["sarp"], results["blockhash"])
    assert code == 0, err
    assert "Benchmark" in stdout and "significance" not in stdout


# ------------------------------------------------------------------ bad input: one line each
def _other_tool_suite(path):
    import pyperf
    b = pyperf.Benchmark([pyperf.Run([1.0, 2.0], metadata={"name": "bm", "unit": "second"},
                                     collect_metadata=False)])
    pyperf.BenchmarkSuite([b]).dump(str(path), replace=True)


def _future_suite(src, path):
    import json
    d = json.load(open(src))
    for b in d["benchmarks"]:
        for r in b["runs"]:
            r.setdefault("metadata", {})["prefixbench_schema"] = 99
    json.dump(d, open(path, "w"))


def test_bad_inputs_are_one_line_and_write_nothing(results, run_cli, tmp_path):
    other = tmp_path / "other.json"
    _other_tool_suite(other)
    cut = tmp_path / "cut.json"
    cut.write_bytes(open(results["sarp"], "rb").read()[:500])
    future = tmp_path / "future.json"
    _future_suite(results["sarp"], future)
    out = tmp_path / "r.html"
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    not_pyperf = tmp_path / "plain.json"
    not_pyperf.write_text('{"rows": []}')
    csv = tmp_path / "rows.csv"
    csv.write_text("date,commit\n")
    cases = [
        (["report", other, "-o", out], ["other.json", "another tool"]),
        (["report", not_pyperf, "-o", out], ["plain.json", "not a pyperf result file"]),
        (["report", csv, "-o", out], ["rows.csv", "not JSON"]),
        (["report", cut, "-o", out], ["cut.json", "truncated or malformed JSON"]),
        (["report", results["sarp"], "--figures", "fig6,nope", "-o", out],
         ["unknown figure 'nope'", "fig1, table1, fig6"]),
        (["plot", results["sarp"], "--figure", "nope", "-o", tmp_path / "x.png"],
         ["unknown figure 'nope'", "fig9"]),
        (["report", results["sarp"], "-o", blocked / "r.html"], ["cannot write", "a-file"]),
        (["report", results["sarp"], "-o", tmp_path / "no" / "such" / "r.html"],
         ["does not exist"]),
        (["report", future, "-o", out], ["future.json", "schema version 99 is unknown"]),
        (["plot", results["sarp"], "--figure", "fig9", "-o", tmp_path / "x.png"],
         ["fig9 needs", "sweep retrieval"]),
        (["compare", results["sarp"], results["blockhash"], "--fail-above", "lots"],
         ["--fail-above", "not a percentage"]),
    ]
    for args, needles in cases:
        code, _, err = run_cli(*args)
        one_line_error(code, err, *needles)
    assert not out.exists() and not (tmp_path / "x.png").exists()


def test_an_existing_report_survives_a_failed_render(results, run_cli, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("previous report")
    cut = tmp_path / "cut.json"
    cut.write_text('{"version": "1.0", "benchmarks": [')
    code, _, err = run_cli("report", cut, "-o", out)
    one_line_error(code, err, "cut.json")
    assert out.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json", "r.html"]


# ------------------------------------------------------------------ a real browser
def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def _screenshot(page, tmp_path):
    """(screenshot path, console lines) of ``page`` in headless Chromium."""
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("headless Chromium is missing: apt-get install -y chromium")
        pytest.skip("needs Debian package chromium (apt-get install -y --no-install-recommends "
                    "chromium)")
    shot = tmp_path / "shot.png"
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--window-size=1280,2400",
                           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
                           "--v=0", f"--screenshot={shot}", f"file://{page}"],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    return shot, [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def test_the_console_check_sees_a_script_error(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>nosuch();</script></body></html>")
    _, console = _screenshot(page, tmp_path)
    assert any("nosuch" in ln for ln in console), console


def test_report_renders_in_headless_chromium(report, tmp_path):
    shot, console = _screenshot(report, tmp_path)
    assert not console, console
    import matplotlib.image as mpimg
    img = mpimg.imread(str(shot))
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    flat = img[..., :3].reshape(-1, 3)
    assert flat.std(axis=0).max() > 0.05            # not one flat colour
    assert (flat.sum(axis=1) < 1.5).mean() > 0.001  # some dark pixels: text and bars drawn


def test_a_directory_and_both_files_of_a_result_name_it_once(results, run_cli, tmp_path):
    d = tmp_path / "outdir"
    d.mkdir()
    for name in ("strategies", "retrieval"):
        src = results[name]
        for f in (src, src[: -len(".json")] + ".counts.json"):
            shutil.copy(f, d / os.path.basename(f))
    out = tmp_path / "dir.html"
    counts = str(d / "strategies.counts.json")
    code, stdout, err = run_cli("report", d, counts, "-o", out)
    assert code == 0, err
    text = open(out, encoding="utf-8").read()
    assert "from 2 result(s)" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli("report", empty, "-o", out)
    one_line_error(code, err, "no .json result files")


def test_the_caption_names_the_machine_when_the_suite_records_it():
    from prefixbench.reports.results import machine
    md = {"cpu_model_name": "Xeon Gold 6330", "cpu_count": 56, "mem_total": "751 GiB",
          "store_device": "Samsung 980 PRO"}
    assert machine(md) == "Xeon Gold 6330, 56 cores, 751 GiB RAM, store on Samsung 980 PRO"
    assert machine({}) == "not recorded in the suite"
    assert machine({**md, "allocator": "jemalloc"}).endswith(
        "store on Samsung 980 PRO, malloc jemalloc")


def test_range_shape_markers_at_the_papers_object_counts(tmp_path):
    """At 192-6,144 objects the paper's Range and cuFile TTFT shapes are drawn beside ours."""
    import pyperf

    from prefixbench.reports import figures, paper, results
    md = {"workload": "payload-restore", "prefixbench_version": "0.1.0", "unit": "second",
          "config": '{"payload": "6GiB", "stripe": "32MiB"}'}
    benches = [pyperf.Benchmark([pyperf.Run([t], metadata=dict(md, name=f"restore-{p}-n{n}"),
                                            collect_metadata=False)])
               for p, ts in (("stripes", (1.0, 1.0, 1.01, 1.02)), ("files", (1.0, 1.2, 1.5, 2.0)))
               for n, t in zip((192, 768, 3072, 6144), ts)]
    path = tmp_path / "payload.json"
    pyperf.BenchmarkSuite(benches).dump(str(path))
    fig = figures.range_restore([results.load(str(path))], paper.load("range"), {})
    shape = fig.panels[1]
    assert shape.categories == ["n192", "n768", "n3072", "n6144"]
    assert len(shape.paper) == 8                      # Range and stock cuFile at four points
    assert shape.paper[3][2] == pytest.approx(1.803 / 1.790)
    finest = next(c for c in fig.comparisons if c.paper.measure == "finest-over-coarse")
    assert finest.ours == [pytest.approx(2.0)] and finest.met_text() == "missed"
    assert any("Range's TTFT spread" in n for n in fig.notes)


def test_table1_puts_redis_blockhash_beside_the_papers_redis(tmp_path):
    import pyperf

    from prefixbench.reports import figures, paper, results
    md = {"strategy": "redis-blockhash", "engine": "redis", "prefixbench_version": "0.1.0",
          "unique_block_entries": 10 ** 6, "unit": "second"}
    benches = [pyperf.Benchmark([pyperf.Run([v], metadata=dict(md, name=n),
                                            collect_metadata=False)])
               for n, v in (("recovery-total", 0.7), ("recovery-index", 0.6))]
    path = tmp_path / "rec.json"
    pyperf.BenchmarkSuite(benches).dump(str(path))
    r = results.load(str(path))
    assert r.kind == "recover"
    fig = figures.table1([r], paper.load("sarp"), {})
    redis = next(c for c in fig.comparisons if c.paper.series == "redis")
    assert redis.ours == [0.7] and redis.met_text() == "context"      # 1e6 entries, not 1e9
    assert next(c for c in fig.comparisons if c.paper.series == "mooncake").met_text() == \
        "not run"


def _recover_suite(path, values):
    import pyperf
    md = {"strategy": "sarp", "prefixbench_version": "0.1.0", "unit": "second"}
    pyperf.BenchmarkSuite([pyperf.Benchmark([
        pyperf.Run([v], metadata=dict(md, name="recovery-index"), collect_metadata=False)
        for v in values])]).dump(str(path))


def test_fail_above_needs_significance_when_both_sides_repeat(run_cli, tmp_path):
    base, noisy, slow = tmp_path / "base.json", tmp_path / "noisy.json", tmp_path / "slow.json"
    _recover_suite(base, [1.0, 1.2, 0.8, 1.1, 0.9])
    _recover_suite(noisy, [1.5, 0.6, 1.4, 0.7, 1.3])      # median +10%, not significant
    _recover_suite(slow, [2.0, 2.1, 1.9, 2.05, 1.95])     # twice as slow, significant
    code, stdout, err = run_cli("compare", base, noisy, "--fail-above", "5%")
    assert code == 0, err
    assert "not significant" in stdout
    code, stdout, err = run_cli("compare", base, slow, "--fail-above", "5%")
    assert code == 1
    assert "recovery-index +100.0% (significant)" in err.strip().splitlines()[-1]
