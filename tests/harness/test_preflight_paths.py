"""Pre-flight on every long build beyond ``recover -n`` and ``--scale paper``:
``payload``, ``scale``, ``run``, a sweep at its given size and ``crashtest``
(the ``--matrix`` above all).  Each refuses in one line naming what to lower,
before anything is built, and goes ahead with ``--force``.

Free space is monkeypatched (the outcome never depends on this machine), and
the work itself is replaced by a stub that proves the pre-flight let it through.
"""
import pytest

from prefixbench.errors import PrefixbenchError
from prefixbench.harness import preflight

from cli_support import one_line_error

HUGE = 1e18


def _free(monkeypatch, disk=HUGE, memory=HUGE):
    monkeypatch.setattr(preflight, "free_space",
                        lambda d: preflight.Free(float(disk), float(memory)))


class _Reached(PrefixbenchError):
    exit_code = 7


def _stub(monkeypatch, module, name):
    def reached(*a, **kw):
        raise _Reached(f"reached {name}")
    monkeypatch.setattr(module, name, reached)


# ------------------------------------------------------------------ payload
def test_payload_refuses_on_disk_and_writes_nothing(run_cli, monkeypatch, tmp_path):
    _free(monkeypatch, disk=1 << 30)
    work = tmp_path / "work"
    code, out, err = run_cli("--quiet", "payload", "--payload", "1GiB", "--paths",
                             "seq,files,lmdb", "--objects", "32,64", "--work-dir", work)
    one_line_error(code, err, "payload --payload 1,073,741,824 bytes over 3 paths needs about",
                   "of disk in", "lower --payload, the object counts (--objects) or --paths",
                   "give --force")
    assert out == "" and not work.exists()


def test_payload_refuses_on_memory(run_cli, monkeypatch):
    _free(monkeypatch, memory=1 << 30)
    code, _out, err = run_cli("payload", "--payload", "1GiB", "--paths", "seq")
    one_line_error(code, err, "of memory", "available", "lower --payload")


def test_payload_force_and_fit_go_ahead(run_cli, monkeypatch):
    from prefixbench.harness import payload
    _stub(monkeypatch, payload, "make_payload")
    _free(monkeypatch, disk=1, memory=1)
    code, _out, err = run_cli("--quiet", "payload", "--payload", "1MiB", "--paths", "seq",
                              "--objects", "32", "--force")
    assert code == 7 and "reached make_payload" in err
    _free(monkeypatch)
    code, _out, err = run_cli("--quiet", "payload", "--payload", "1MiB", "--paths", "seq",
                              "--objects", "32")
    assert code == 7 and "reached make_payload" in err


def test_payload_estimate_counts_every_copy():
    one = preflight.payload_need(1 << 30, ["seq"], 4, 1 << 30)
    many = preflight.payload_need(1 << 30, ["seq", "files"], 4, 1 << 30)
    assert one.disk == pytest.approx(1 << 30)
    assert many.disk == pytest.approx((1 + 4 * 1.05) * (1 << 30))   # files: one per size
    assert one.memory == preflight.BASE_RSS + 2 * (1 << 30)


# ------------------------------------------------------------------ scale, run, sweep
def test_scale_refuses_before_building(run_cli, monkeypatch):
    from prefixbench.harness import scaling
    _stub(monkeypatch, scaling, "scale")
    _free(monkeypatch, disk=1 << 20)
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-e", "lmdb", "-w",
                             "ultrachat", "-W", "sessions=1000000")
    one_line_error(code, err, "scale on workload ultrachat (about", "blocks) needs about",
                   "of disk", "lower the workload (-W sessions=... or a smaller trace) or "
                   "--limit or give --force")
    assert out == ""
    code, _out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-e", "lmdb", "-w",
                              "ultrachat", "-W", "sessions=1000000", "--force")
    assert code == 7 and "reached scale" in err


def test_run_refuses_a_workload_that_does_not_fit_in_memory(run_cli, monkeypatch):
    from prefixbench.harness import bench
    _stub(monkeypatch, bench, "make_workload")      # never generated: estimated from options
    _free(monkeypatch, memory=1 << 30)
    code, _out, err = run_cli("--quiet", "run", "-s", "radix", "-w", "codeact", "-W",
                              "sessions=10000000", "--no-runner")
    one_line_error(code, err, "run on workload codeact", "of memory", "-W sessions=")


def test_sweep_at_its_given_size_is_preflighted(run_cli, monkeypatch):
    from prefixbench.harness import sweeps
    _stub(monkeypatch, sweeps, "run_sweep")
    _free(monkeypatch, memory=1 << 30)
    code, out, err = run_cli("--quiet", "sweep", "retrieval", "-w", "ultrachat", "-W",
                             "sessions=100000000")
    one_line_error(code, err, "sweep retrieval on workload ultrachat", "of memory",
                   "give --force")
    assert out == ""
    code, _out, err = run_cli("--quiet", "sweep", "retrieval", "-w", "ultrachat", "-W",
                              "sessions=100000000", "--force")
    assert code == 7 and "reached run_sweep" in err
    _free(monkeypatch)
    code, _out, err = run_cli("--quiet", "sweep", "retrieval", "-w", "codeact", "-W",
                              "sessions=10")
    assert code == 7 and "reached run_sweep" in err


def test_entries_are_estimated_without_generating():
    from prefixbench.workloads import profiles
    small = preflight.workload_entries("codeact", {})
    assert small == pytest.approx(200 * profiles.BLOCKS_PER_SESSION["codeact"], rel=0.01)
    big = preflight.workload_entries("codeact", {"sessions": "2000", "scale": "2"})
    assert big == pytest.approx(20 * small, rel=0.01)
    assert preflight.workload_entries("codeact", {"block_size": "8"}) == pytest.approx(
        2 * small, rel=0.01)
    paper = preflight.workload_entries("codeact", {"preset": "paper"})
    assert paper == pytest.approx(profiles.PAPER_BLOCKS["codeact"], rel=0.05)
    # a bad value is left to the workload's own one-line error
    assert preflight.workload_entries("codeact", {"sessions": "many"}) == small


# ------------------------------------------------------------------ crashtest
def test_crashtest_matrix_refuses_before_any_child(run_cli, monkeypatch):
    from prefixbench.harness import crashtest
    _stub(monkeypatch, crashtest, "run_iteration")
    _free(monkeypatch, disk=1 << 20)
    code, out, err = run_cli("--quiet", "crashtest", "--matrix", "-e", "lmdb", "-s", "sarp",
                             "-s", "radix")
    one_line_error(code, err, "crashtest --matrix on workload codeact needs about",
                   "lower the workload (-W sessions=...) or the engines and strategies (-e/-s)",
                   "give --force")
    assert out == ""
    code, _out, err = run_cli("--quiet", "crashtest", "-s", "sarp", "-e", "lmdb", "--force",
                              "--iterations", "1")
    assert code == 7 and "reached run_iteration" in err
