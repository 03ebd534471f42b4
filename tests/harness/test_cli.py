"""The CLI end to end: runs, pyperf output, and every bad-input path."""
import json
import os
import shutil
import subprocess
import sys

import pytest

SMALL = ["-w", "ultrachat", "-W", "sessions=20"]


def _one_line_error(code, err, *needles):
    assert code != 0
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("prefixbench: error:")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_run_writes_pyperf_suites(run_cli, tmp_path):
    out = tmp_path / "r.json"
    code, stdout, err = run_cli("--quiet", "run", "-s", "dram-blockhash", *SMALL, "--no-runner",
                                "-o", out)
    assert code == 0, err
    assert "false hits" in stdout
    import pyperf
    suite = pyperf.BenchmarkSuite.load(str(out))
    names = suite.get_benchmark_names()
    assert "match-latency-mean" in names and "match-latency-p999" in names
    for b in suite.get_benchmarks():
        assert b.get_unit() == "second"
        md = b.get_metadata()
        assert md["strategy"] == "dram-blockhash" and md["workload"] == "ultrachat"
        assert "git_commit" in md and "numpy_version" in md and json.loads(md["config"])
        assert "dram" not in b.get_name() and "blockhash" not in b.get_name()
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "r.counts.json"))
    units = {b.get_name(): b.get_unit() for b in counts.get_benchmarks()}
    assert units["hit-tokens"] == "integer" and units["index-memory-bytes"] == "byte"
    hit = counts.get_benchmark("hit-tokens").mean()
    oracle = counts.get_benchmark("oracle-hit-tokens").mean()
    assert hit == oracle > 0


def _run_subprocess(args, cwd):
    return subprocess.run([sys.executable, "-m", "prefixbench", *args], cwd=cwd,
                          capture_output=True, text=True)


def test_pyperf_runner_and_compare_to(tmp_path):
    """Two strategies, same workload: pyperf compare_to lines them up by name."""
    files = []
    for strat, extra in (("dram-blockhash", []), ("ssd-blockhash", ["-e", "lmdb"])):
        out = tmp_path / f"{strat}.json"
        p = _run_subprocess(["--quiet", "run", "-s", strat, *extra, *SMALL, "-o", str(out),
                             "--processes", "2", "--values", "2", "--warmups", "0",
                             "--loops", "1"], tmp_path)
        assert p.returncode == 0, p.stderr
        files.append(str(out))
    import pyperf
    warm = pyperf.BenchmarkSuite.load(files[0]).get_benchmark("match-latency-warm")
    assert len(warm.get_values()) == 4 and warm.get_unit() == "second"
    assert warm.get_metadata()["strategy"] == "dram-blockhash"
    cmp = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", *files, "--table"],
                         capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    assert "match-latency-mean" in cmp.stdout
    assert "no benchmark in common" not in cmp.stdout.lower()


def test_unknown_plugin_names(run_cli):
    code, _, err = run_cli("run", "-s", "nosuch", *SMALL, "--no-runner")
    _one_line_error(code, err, "nosuch", "dram-blockhash", "radix")
    code, _, err = run_cli("run", "-s", "ssd-blockhash", "-e", "nodb", *SMALL, "--no-runner")
    _one_line_error(code, err, "nodb", "lmdb")
    code, _, err = run_cli("run", "-s", "radix", "-w", "nowl", "--no-runner")
    _one_line_error(code, err, "nowl", "codeact")


@pytest.mark.parametrize("args,needle", [
    (["--limit", "0"], "--limit"),
    (["--warm-fraction", "1.5"], "--warm-fraction"),
    (["--cache-bytes", "lots"], "--cache-bytes"),
    (["-S", "nosuch=1"], "nosuch"),
    (["-S", "noequals"], "--strategy-option"),
    (["-W", "sessions=-3"], "sessions"),
    (["--status", "-1"], "--status"),
])
def test_out_of_range_options(run_cli, args, needle):
    code, _, err = run_cli("run", "-s", "dram-blockhash", *SMALL, "--no-runner", *args)
    _one_line_error(code, err, needle)


def test_unwritable_store_path(run_cli, tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    code, _, err = run_cli("run", "-s", "ssd-blockhash", "-e", "lmdb", *SMALL, "--no-runner",
                           "--store-dir", f / "sub")
    _one_line_error(code, err, str(f / "sub"))
    assert f.read_text() == "keep me"


def test_non_empty_store_dir_is_refused_and_kept(run_cli, tmp_path):
    d = tmp_path / "store"
    d.mkdir()
    (d / "precious").write_bytes(b"data")
    code, _, err = run_cli("run", "-s", "ssd-blockhash", "-e", "lmdb", *SMALL, "--no-runner",
                           "--store-dir", d)
    _one_line_error(code, err, str(d), "not empty")
    assert (d / "precious").read_bytes() == b"data"


def test_missing_optional_engine_dependency(tmp_path):
    code = ("import sys; sys.modules['wiredtiger'] = None;"
            "from prefixbench.harness.cli import main;"
            "sys.exit(main(['--quiet', 'run', '-s', 'ssd-blockhash', '-e', 'wiredtiger',"
            " '-w', 'ultrachat', '-W', 'sessions=5', '--no-runner']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    _one_line_error(p.returncode, p.stderr, "prefixbench[wiredtiger]")


def test_malformed_trace_line_names_file_and_line(run_cli, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"hash_ids": [1, 2, 3], "input_length": 1500, "output_length": 1}\n'
                     '{"hash_ids": [1, 2, oops\n')
    code, _, err = run_cli("run", "-s", "radix", "-w", "mooncake", "-W", f"path={trace}",
                           "--no-runner")
    _one_line_error(code, err, f"{trace}:2")


def test_help_on_every_command(run_cli):
    for cmd in (["run"], ["plugins"], ["workload"], ["workload", "describe"], ["compare"],
                ["demo"], ["hash-bench"], ["engine-bench"]):
        with pytest.raises(SystemExit) as e:
            run_cli(*cmd, "--help")
        assert e.value.code == 0


def test_workload_describe(run_cli):
    code, out, err = run_cli("workload", "describe", "ultrachat", "-W", "sessions=20")
    assert code == 0, err
    assert "sessions" in out and "unique blocks" in out.lower()


def test_hash_bench(run_cli):
    code, out, err = run_cli("hash-bench", "--tokens", "64K")
    assert code == 0, err
    assert "Cython" in out and "Python" in out


def test_strategy_counters_reach_the_counts_suite(run_cli, tmp_path):
    """SARP's Table 4 counters and routing bytes are exported as index-* benchmarks."""
    out = tmp_path / "sarp.json"
    code, _, err = run_cli("--quiet", "run", "-s", "sarp", "-e", "memory", "-w", "codeact",
                           "-W", "sessions=20", "--no-runner", "-o", out)
    assert code == 0, err
    import pyperf
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "sarp.counts.json"))
    names = set(counts.get_benchmark_names())
    for n in ("index-candidates-before-filtering", "index-candidates-after-filtering",
              "index-candidates-retrieved", "index-routing-bytes-per-block",
              "index-retrievals-per-query"):
        assert n in names, n
    assert counts.get_benchmark("index-routing-bytes").get_unit() == "byte"


def test_plugins_options_lists_strategy_parameters(run_cli):
    code, out, _ = run_cli("plugins", "--options")
    assert code == 0
    rows = [ln.split()[:3] for ln in out.splitlines()]
    assert ["sarp", "max_retrieval", "3"] in rows and ["sarp", "tau", "256"] in rows
    # engine options, with defaults as one would give them
    assert ["lmdb", "map_size", "1GiB"] in rows and ["rocksdb", "statistics", "false"] in rows
    assert ["wiredtiger", "log_file_max", "100MiB"] in rows


#: engines that open without a server, each option given its listed default
_EMBEDDED = ("lmdb", "rocksdb", "wiredtiger", "packfile", "memory")
#: what keeps the other options' stores small while one option is tried
_SMALL = {"packfile": {"pack_bytes": "1MiB"}}


@pytest.mark.parametrize("engine", _EMBEDDED)
def test_every_engine_option_listed_is_accepted(engine, tmp_path):
    """What ``plugins --options`` lists is what the engine itself accepts: a store
    opens with each listed option set to its listed default (those whose default is
    a value, not words), and an unlisted name is one error from the engine naming it."""
    from prefixbench.engines.base import StoreConfig
    from prefixbench.errors import ConfigError
    from prefixbench.registry import get_registry
    info = get_registry().get("engine", engine)
    if engine == "wiredtiger":
        pytest.importorskip("wiredtiger")
    known = info.factory.OPTIONS
    tried = 0
    for n, (name, opt) in enumerate(sorted(known.items())):
        if isinstance(opt.default, str) and " " in opt.default:
            continue                    # words: the configuration decides it
        value = str(opt.default).lower() if isinstance(opt.default, bool) else str(opt.default)
        path = tmp_path / f"s{n}"
        store = info.factory(StoreConfig(path=str(path), cache_bytes=1 << 20,
                                         options={**_SMALL.get(engine, {}), name: value}))
        store.close()
        shutil.rmtree(path, ignore_errors=True)     # a default pack is 1 GiB preallocated
        tried += 1
    assert tried or not known
    with pytest.raises(ConfigError, match=f"'colour' is not known to engine {engine}"):
        info.factory(StoreConfig(path=str(tmp_path / "bad"), options={"colour": "blue"}))


def test_csv_export_appends_rows(run_cli, tmp_path):
    import csv
    f = tmp_path / "runs.csv"
    for strat in ("dram-blockhash", "radix"):
        code, _, err = run_cli("--quiet", "run", "-s", strat, *SMALL, "--no-runner", "--csv", f)
        assert code == 0, err
    rows = list(csv.DictReader(f.open()))
    assert [r["strategy"] for r in rows] == ["dram-blockhash", "radix"]
    assert rows[0]["hit_rate"] == rows[1]["hit_rate"] and float(rows[0]["ops_per_s"]) > 0
    assert rows[0]["false_hits"] == "0" and rows[0]["workload"] == "ultrachat"


def test_csv_export_path_that_is_a_directory(run_cli, tmp_path):
    code, _, err = run_cli("run", "-s", "radix", *SMALL, "--no-runner", "--csv", tmp_path)
    _one_line_error(code, err, "--csv", str(tmp_path))


def test_percentiles_published_as_their_own_benchmarks(run_cli, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli("--quiet", "run", "-s", "radix", *SMALL, "--no-runner", "-o", out)
    assert code == 0, err
    import pyperf
    suite = pyperf.BenchmarkSuite.load(str(out))
    vals = {b.get_name(): b.mean() for b in suite.get_benchmarks()}
    for w in ("match", "insert", "request"):
        seq = [vals[f"{w}-latency-{q}"] for q in ("p50", "p90", "p99", "p999", "max")]
        assert seq == sorted(seq), (w, seq)


@pytest.mark.parametrize("engine", ["lmdb", "rocksdb"])
def test_space_amplification_is_reported(run_cli, tmp_path, engine):
    """ssd-blockhash keeps 8-byte keys and 16-byte records: logical bytes are exact."""
    out = tmp_path / "s.json"
    code, stdout, err = run_cli("--quiet", "run", "-s", "ssd-blockhash", "-e", engine, *SMALL,
                                "--no-runner", "-o", out)
    assert code == 0, err
    import pyperf
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "s.counts.json"))
    entries = counts.get_benchmark("index-entries").mean()
    logical = counts.get_benchmark("store-logical-bytes").mean()
    data = counts.get_benchmark("store-bytes").mean()
    assert logical == entries * 24
    amp = counts.get_benchmark("space-amplification").mean()
    assert amp == pytest.approx(data / logical)
    assert "space amplification" in stdout


def test_status_line_shows_p99_so_far(tmp_path):
    """--status puts match p99 and false hits on the progress bar while running."""
    p = _run_subprocess(["run", "-s", "radix", "-w", "ultrachat", "-W", "sessions=300",
                         "--no-runner", "--status", "0.000001"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "match p99" in p.stderr and "false hits 0" in p.stderr


def test_sweep_and_recover_help_name_the_new_options(run_cli):
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        run_cli("sweep", "--help")
    text = buf.getvalue()
    for opt in ("--scale", "--run-requests", "--repeat", "--threads", "--force", "--cap-rule",
                "--cap-entries", "--cap-recoveries", "--cap-cache", "--breakdown"):
        assert opt in text, opt
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        run_cli("recover", "--help")
    assert "--force" in buf.getvalue()


def test_a_closed_pipe_ends_quietly(tmp_path):
    """``prefixbench plugins | head -1`` where the reader has already gone: the
    output meets a closed pipe, and no traceback follows."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "prefixbench", "plugins"], cwd=tmp_path,
                              stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 141
