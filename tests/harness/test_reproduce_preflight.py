"""`reproduce` pre-flight: an experiment that will not fit is refused in one line before
any experiment runs, naming it and what to lower; ``--force`` goes past the refusal and
past each sub-command's own pre-flight, which it reaches by passing ``--force`` on.

Free space is monkeypatched, so the outcome never depends on this machine.
"""
import json
import os

import pytest

from cli_support import one_line_error
from prefixbench.harness import preflight, reproduce
from prefixbench.harness.cli import main

TINY = 1 << 20                      # 1 MiB of disk and of memory: nothing fits


def _free(monkeypatch, disk=1e18, memory=1e18):
    monkeypatch.setattr(preflight, "free_space",
                        lambda d: preflight.Free(float(disk), float(memory)))


def test_refuses_before_running_anything_naming_the_experiment(monkeypatch, tmp_path, capsys):
    _free(monkeypatch, memory=TINY)
    out = tmp_path / "repro"
    code = main(["-q", "reproduce", "sarp", "--figures", "fig8", "-o", str(out)])
    one_line_error(code, capsys.readouterr().err, "reproduce sarp", "experiment recovery",
                   "recover -s sarp", "of memory", "--figures without table1, fig8",
                   "--force")
    assert os.listdir(out) == []                  # no result, no marker, no report


def test_paper_scale_refusal_says_lower_the_scale(monkeypatch, tmp_path, capsys):
    _free(monkeypatch, disk=TINY)
    code = main(["-q", "reproduce", "sarp", "--scale", "paper", "--figures", "fig9",
                 "-o", str(tmp_path / "p")])
    one_line_error(code, capsys.readouterr().err, "experiment retrieval", "of disk",
                   "--scale small", "--figures without fig9")


def test_a_later_experiment_that_does_not_fit_stops_the_first_too(monkeypatch, tmp_path,
                                                                    capsys):
    """fig1's runs fit, the recovery builds after them do not: nothing starts."""
    exps = {e.id: e for e in reproduce.EXPERIMENTS["sarp"]}

    def most(exp):
        return max(need.memory for stem in exp.runs for _, need in
                   reproduce.estimate(reproduce._argv(exp, stem, "small", None, False)))
    room = most(exps["fig1"]) / preflight.HEADROOM * 1.01
    assert most(exps["recovery"]) > room * preflight.HEADROOM
    _free(monkeypatch, memory=room)
    out = tmp_path / "r"
    code = main(["-q", "reproduce", "sarp", "--figures", "fig1,fig8", "-o", str(out)])
    one_line_error(code, capsys.readouterr().err, "experiment recovery", "of memory")
    assert os.listdir(out) == []


def test_force_passes_the_subcommands_preflight_and_resume_skips_it(monkeypatch, tmp_path,
                                                                    capsys):
    _free(monkeypatch, disk=TINY, memory=TINY)
    out = tmp_path / "forced"
    argv = ["-q", "reproduce", "sarp", "--figures", "fig9", "--limit", "30", "-o", str(out)]
    # the sweep on its own refuses under this much free space ...
    code = main(["-q", "sweep", "retrieval", "-w", "codeact", "--limit", "30"])
    one_line_error(code, capsys.readouterr().err, "sweep retrieval", "--force")
    # ... and reproduce --force gets it through, since --force goes on to the sweep
    assert main([*argv, "--force"]) == 0
    done = json.loads((out / "retrieval.done").read_text())
    assert done["force"] is True and done["commands"]["retrieval-codeact"][-1] == "--force"
    assert 'id="fig9"' in (out / "report.html").read_text()
    capsys.readouterr()
    # a completed experiment is not estimated again: the resume is not refused
    assert main(argv) == 0
    assert "retrieval already complete" in capsys.readouterr().err


@pytest.mark.parametrize("argv, takes", [
    (["run", "-s", "radix", "-w", "codeact"], True),
    (["scale", "-s", "sarp", "-w", "codeact"], True),
    (["sweep", "retrieval", "-w", "codeact"], True),
    (["recover", "-s", "sarp", "-e", "rocksdb", "-n", "2e5"], True),
    (["payload", "--objects", "192"], True),
    (["placement", "frontier", "-w", "codeact"], False),
])
def test_force_goes_only_to_commands_that_take_it(argv, takes):
    assert reproduce.takes_force(argv) is takes


def test_every_experiment_has_an_estimate_except_the_placement_hook():
    """Each long build is estimated at both scales (a refused argv would raise here)."""
    for paper, exps in reproduce.EXPERIMENTS.items():
        for scale in reproduce.SCALES:
            for exp in exps:
                for stem in exp.runs:
                    got = reproduce.estimate(reproduce._argv(exp, stem, scale, None, False))
                    assert bool(got) is (paper != "placement"), (paper, scale, stem)
                    assert all(need.disk >= 0 and need.memory > 0 for _, need in got)
