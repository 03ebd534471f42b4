"""payload-restore: every path restores verified bytes; stripes issue reads per stripe."""
import os
import subprocess
import sys

import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness import payload as pl

MiB = 1 << 20


def _run(tmp_path, **kw):
    args = dict(payload_bytes=8 * MiB, objects=(4, 32), restores=2, stripe=MiB,
                pack_bytes=16 * MiB, work_dir=str(tmp_path / "w"))
    args.update(kw)
    return pl.run_payload(**args)


def test_every_path_restores_every_byte_and_cleans_up(tmp_path):
    rows = _run(tmp_path)
    paths = {r.path for r in rows}
    assert paths == set(pl.DEFAULT_PATHS)
    assert len(rows) == len(paths) * 2 * 2
    assert all(r.verified and r.restored_bytes == 8 * MiB for r in rows)
    assert os.listdir(tmp_path / "w") == []          # each path's data removed afterwards


def test_stripe_reads_do_not_depend_on_the_object_count(tmp_path):
    """8 MiB in 1 MiB stripes: 8 native reads at 4 and at 32 objects; files pay per object."""
    rows = _run(tmp_path, paths=("stripes", "files"))
    calls = {(r.path, r.objects): r.read_calls for r in rows}
    assert calls["stripes", 4] == calls["stripes", 32] == 8
    assert calls["files", 4] == 4 and calls["files", 32] == 32
    direct = [r for r in rows if r.cache == "direct"]
    assert direct and all(r.bytes_read >= r.restored_bytes for r in direct)


def test_partial_hit_clips_the_restore(tmp_path):
    """A 5.5 MiB hit: 32 objects of 256 KiB -> 22 objects; the stripe path reads 6 stripes."""
    rows = _run(tmp_path, objects=(32,), hit_bytes=5 * MiB + MiB // 2,
                paths=("stripes", "files", "lmdb"))
    for r in rows:
        assert r.restored_bytes == 22 * (256 << 10) and r.verified
    assert {r.read_calls for r in rows if r.path == "stripes"} == {6}
    assert {r.read_calls for r in rows if r.path == "files"} == {22}


def test_summary_figures(tmp_path):
    rows = _run(tmp_path, paths=("seq", "stripes"), restores=1)
    s = pl.summarize(rows)
    assert set(s["median_seconds"]) == {"seq", "stripes"}
    assert s["stripes_spread"] >= 0 and s["stripes_vs_seq"] > 0


@pytest.mark.parametrize("kw, option", [
    (dict(objects=(3,)), "objects"),
    (dict(stripe=1000), "stripe"),
    (dict(hit_bytes=0), "hit"),
    (dict(cache_mode="warm"), "cache"),
    (dict(pack_bytes=MiB), "pack_bytes"),
    (dict(objects=("layerwise",), layers=0), "layers"),
])
def test_bad_options_are_one_line(tmp_path, kw, option):
    with pytest.raises(ConfigError, match=option) as ei:
        _run(tmp_path, **kw)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("args, option", [(["--layer-object", "lots"], "--layer-object"),
                                          (["--layers", "0"], "layers"),
                                          (["--objects", "4", "--paths", "seq,nodb"], "nodb")])
def test_bad_cli_option_is_the_only_output(tmp_path, args, option):
    """Refused before the progress bar starts and before anything is written."""
    proc = subprocess.run([sys.executable, "-m", "prefixbench", "payload", "--payload", "8MiB",
                           "--work-dir", str(tmp_path / "w"), *args],
                          capture_output=True, text=True, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and option in lines[0], proc.stderr
    assert not (tmp_path / "w").exists()


def test_work_dir_with_files_is_refused(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    (d / "keep").write_text("x")
    with pytest.raises(ConfigError, match=str(d)):
        _run(tmp_path)
    assert os.listdir(d) == ["keep"]


def test_payload_command(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "prefixbench", "--quiet", "payload",
                           "--payload", "4MiB",
                           "--objects", "4,16", "--restores", "1", "--stripe", "1MiB",
                           "--pack-bytes", "8MiB", "--paths", "seq,files,stripes",
                           "--work-dir", str(tmp_path / "w"), "--json", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "stripes" in proc.stdout and "files" in proc.stdout
    import json
    doc = json.loads(out.read_text())
    assert len(doc["restores"]) == 6 and all(r["verified"] for r in doc["restores"])


def test_object_counts_that_do_not_divide_each_other(tmp_path):
    """12 and 16 objects of a 3 MiB payload: token size adapts, every restore verifies."""
    rows = _run(tmp_path, payload_bytes=3 * MiB, objects=(12, 16), paths=("stripes", "files"),
                restores=1, hit_bytes=2 * MiB)
    assert all(r.verified for r in rows)
    assert {r.restored_bytes for r in rows if r.objects == 12} == {2 * MiB}


def test_unknown_path_is_named_before_any_work(tmp_path):
    from prefixbench.errors import UnknownPluginError
    with pytest.raises(UnknownPluginError, match="nosuchengine"):
        _run(tmp_path, paths=("files", "nosuchengine"))
    assert not (tmp_path / "w").exists()


def test_a_failing_path_leaves_no_files(tmp_path, monkeypatch):
    """A path that fails while writing: the error reaches the caller, its files do not stay."""
    from prefixbench.errors import StoreError

    def broken_write(self, payload, n):
        open(os.path.join(self.root, "partial"), "wb").close()
        raise StoreError("disk full")

    monkeypatch.setattr(pl._FilesPath, "write", broken_write)
    with pytest.raises(StoreError, match="disk full"):
        _run(tmp_path, paths=("stripes", "files"))
    assert os.listdir(tmp_path / "w") == []


# ----- layerwise point, interleaving, pyperf output ----------------------------------

def test_layerwise_point_reads_per_stripe_and_reports_every_layer(tmp_path):
    """8 MiB as 4 layers of 512 KiB objects (16 objects) requested layer-major: the stripe
    path still issues 8 reads (one per 1 MiB stripe, 2 per layer), every path reports 4
    layer readiness events, and every object verifies."""
    rows = _run(tmp_path, objects=(4, "layerwise"), layers=4, layer_object=512 << 10,
                paths=("seq", "stripes", "files", "lmdb"))
    lw = [r for r in rows if r.point == "layerwise"]
    assert lw and all(r.verified and r.objects == 16 and r.layer_events == 4 for r in lw)
    assert all(r.layer_events == 0 for r in rows if r.point != "layerwise")
    calls = {(r.path, r.point): r.read_calls for r in rows}
    assert calls["stripes", "layerwise"] == calls["stripes", "4"] == 8
    assert calls["files", "layerwise"] == 16


def test_layerwise_partial_hit_clips_every_layer(tmp_path):
    """A 5.5 MiB hit over 4 layers x 512 KiB chunks: 2 chunks of every layer (4 MiB);
    the stripe path reads one 1 MiB stripe per layer."""
    rows = _run(tmp_path, objects=("layerwise",), layers=4, layer_object=512 << 10,
                hit_bytes=5 * MiB + MiB // 2, paths=("stripes", "files", "seq"))
    assert all(r.verified and r.restored_bytes == 4 * MiB and r.layer_events == 4 for r in rows)
    assert {r.read_calls for r in rows if r.path == "stripes"} == {4}
    assert {r.read_calls for r in rows if r.path == "files"} == {8}


def test_layerwise_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="layers") as ei:
        _run(tmp_path, objects=("layerwise",), layers=32)     # 8 MiB < 32 x 1 MiB
    assert "\n" not in str(ei.value)
    with pytest.raises(ConfigError, match="objects"):
        _run(tmp_path, objects=("layerwise", "many"))


def test_rounds_interleave_points_and_keep_seq_beside_stripes(tmp_path):
    warm = []
    rows = _run(tmp_path, objects=(4, 16, 32), restores=3, warmups=warm,
                paths=("seq", "files", "stripes"))
    assert len(warm) == 9 and all(w.seq_no == 0 for w in warm)
    firsts = [rows[i * 9].point for i in range(3)]
    assert firsts == ["4", "16", "32"]                      # the point order rotates
    for r in range(3):                                       # seq and stripes back to back
        rnd = rows[r * 9:(r + 1) * 9]
        names = [x.path for x in rnd]
        for k in range(0, 9, 3):
            trio = names[k:k + 3]
            j = trio.index("seq")
            assert "stripes" in trio[max(0, j - 1):j + 2]
    assert [x.restore for x in rows if x.path == "seq" and x.point == "16"] == [1, 2, 3]
    s = pl.summarize(rows)
    assert set(s["stripes_over_adjacent_seq"]) == {4, 16, 32}
    assert s["stripes_spread_vs_adjacent_seq"] >= 0 and s["stripes_spread_min"] >= 0
    assert all(s["min_seconds"]["seq"][n] <= s["median_seconds"]["seq"][n] for n in (4, 16, 32))


def _payload_cmd(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "prefixbench", "--quiet", "payload",
                           "--payload", "8MiB", "--objects", "4,16,layerwise", "--layers", "4",
                           "--restores", "2", "--stripe", "1MiB", "--pack-bytes", "16MiB",
                           "--paths", "seq,files,stripes", "--work-dir",
                           str(tmp_path / f"w-{name}"), "-o", str(out), *extra],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def test_payload_writes_pyperf_suites_that_compare_to_reads(tmp_path):
    import pyperf
    a = _payload_cmd(tmp_path, "a")
    b = _payload_cmd(tmp_path, "b")
    suite = pyperf.BenchmarkSuite.load(str(a))
    names = set(suite.get_benchmark_names())
    assert names == {f"restore-{p}-{n}" for p in ("seq", "files", "stripes")
                     for n in ("n4", "n16", "layerwise")}
    bench = suite.get_benchmark("restore-stripes-n16")
    assert bench.get_nvalue() == 2 and bench.get_unit() == "second"
    assert bench.get_metadata()["workload"] == "payload-restore"
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "a.counts.json"))
    assert counts.get_benchmark("read-calls-stripes-n4").mean() == 8
    assert counts.get_benchmark("read-calls-files-n16").mean() == 16
    assert counts.get_benchmark("layer-events-stripes-layerwise").mean() == 4
    for x, y in ((a, b), (tmp_path / "a.counts.json", tmp_path / "b.counts.json")):
        proc = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", "--table",
                               str(x), str(y)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
