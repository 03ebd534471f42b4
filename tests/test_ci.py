"""CI runs the README's marked code blocks; they must be there and say what the README promises."""
from __future__ import annotations

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _block(step: str) -> subprocess.CompletedProcess:
    script = ROOT / ".ci" / "run"
    # run only the extraction function of .ci/run, not the steps
    text = script.read_text()
    fn = text[text.index("block() {"):text.index("\nfor step in")]
    return subprocess.run(["bash", "-c", f"{fn}\nblock {step}"], cwd=ROOT, capture_output=True,
                          text=True)


def test_each_ci_step_is_one_readme_block():
    setup, test, system = (_block(s) for s in ("setup", "test", "system"))
    for r in (setup, test, system):
        assert r.returncode == 0, r.stderr
    assert "pip install -e '.[test]'" in setup.stdout and "prefixbench demo" in setup.stdout
    assert test.stdout.strip() == "bash tests/run.sh"
    assert system.stdout.startswith("apt-get update && apt-get install")


def test_a_missing_block_is_one_line_naming_the_marker():
    r = _block("nonexistent")
    assert r.returncode != 0
    assert r.stderr.strip() == "README.md: no ```sh block after <!-- ci: nonexistent -->"


def test_the_test_command_runs_both_passes():
    text = (ROOT / "tests" / "run.sh").read_text()
    assert "\npython -m pytest -q" in text
    assert "\nPREFIXBENCH_PURE=1 python -m pytest -q" in text
