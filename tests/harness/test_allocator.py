"""The malloc a run's process uses is chosen before anything is built (``--allocator``)
and recorded with the machine: a preloaded jemalloc changes what each RocksDB read
costs, so results must say which ran."""
import glob
import json
import os
import subprocess
import sys

import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness import allocator

from cli_support import one_line_error as _one_line_error

JEMALLOC = next(iter(sorted(glob.glob("/usr/lib/*/libjemalloc.so.2"))), None)
LIBC_ONLY = ("7f00-7f10 r-xp 00000000 fe:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
             "7f20-7f30 r-xp 00000000 fe:01 43 /usr/lib/x86_64-linux-gnu/libm.so.6\n")
FAKE_LIB = "/opt/lib/libjemalloc.so.2"


def _needs_jemalloc():
    if JEMALLOC is None:
        line = "needs Debian package libjemalloc2 (apt-get install -y libjemalloc2)"
        if os.environ.get("CI") == "true":
            pytest.fail(line + " - CI=true: this test must run in CI")
        pytest.skip(line)


@pytest.mark.parametrize("extra, want", [
    ("", "libc"),
    ("7f40-7f50 r-xp 00000000 fe:01 44 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n",
     "jemalloc"),
    ("7f40-7f50 r-xp 00000000 fe:01 45 /opt/gperftools/lib/libtcmalloc_minimal.so.4\n",
     "tcmalloc"),
    ("7f40-7f50 r-xp 00000000 fe:01 46 /home/me/jemalloc-tests/libc-shim.so\n", "libc")])
def test_the_allocator_is_read_from_the_mapped_libraries(tmp_path, extra, want):
    maps = tmp_path / "maps"
    maps.write_text(LIBC_ONLY + extra)
    assert allocator.detect(str(maps)) == want


def test_an_unreadable_map_says_unknown(tmp_path):
    assert allocator.detect(str(tmp_path / "absent")) == "unknown"


def _recorded(env):
    code = ("from prefixbench.harness.pyperf_io import run_metadata; "
            "print(run_metadata('radix', None, 'codeact', {})['allocator'])")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def _env_without_preload():
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.GUARD)}


def test_every_run_records_the_allocator_it_ran_on():
    env = _env_without_preload()
    assert _recorded(env) == "libc"
    _needs_jemalloc()
    assert _recorded({**env, "LD_PRELOAD": JEMALLOC}) == "jemalloc"


# ------------------------------------------------------------------ what a choice asks for
@pytest.fixture
def installed(monkeypatch):
    """jemalloc installed at FAKE_LIB, nothing else."""
    monkeypatch.setattr(allocator, "find_library",
                        lambda name: FAKE_LIB if name == "jemalloc" else None)


@pytest.mark.parametrize("choice, command, current, want", [
    ("auto", "sweep", "libc", ("jemalloc", FAKE_LIB)),
    ("auto", "run", "libc", ("jemalloc", FAKE_LIB)),
    ("auto", "show", "libc", None),               # not a timing command: left as it is
    ("auto", "sweep", "tcmalloc", None),          # the user's own preload is kept
    ("auto", "sweep", "jemalloc", None),
    ("libc", "show", "jemalloc", ("libc", None)),
    ("jemalloc", "plugins", "libc", ("jemalloc", FAKE_LIB)),
])
def test_what_each_choice_asks_for(installed, choice, command, current, want):
    assert allocator.resolve(choice, command, current) == want


def test_auto_stays_on_libc_where_jemalloc_is_not_installed(monkeypatch):
    monkeypatch.setattr(allocator, "find_library", lambda name: None)
    assert allocator.resolve("auto", "sweep", "libc") is None


@pytest.mark.parametrize("choice, needle", [
    ("tcmalloc", "tcmalloc is not installed"),
    ("hoard", "'hoard' is not one of auto, libc, jemalloc, tcmalloc, mimalloc"),
    ("/nowhere/libjemalloc.so.2", "/nowhere/libjemalloc.so.2 does not exist"),
])
def test_a_choice_that_cannot_be_met_is_one_error(installed, choice, needle):
    with pytest.raises(ConfigError, match="option --allocator") as e:
        allocator.resolve(choice, "sweep", "libc")
    assert needle in str(e.value)


def test_a_path_must_be_a_shared_library(tmp_path):
    fake = tmp_path / "libjemalloc.so.2"
    fake.write_bytes(b"not a library")
    with pytest.raises(ConfigError, match="is not a shared library"):
        allocator.resolve(str(fake), "sweep", "libc")
    fake.write_bytes(b"\x7fELF" + b"\0" * 60)
    assert allocator.resolve(str(fake), "sweep", "libc") == ("jemalloc", str(fake))


# ------------------------------------------------------------------ executing again
class _Exec(Exception):
    pass


def _ensure(choice, command, current, environ):
    """``ensure`` with the execution captured: (program, args, env), or None."""
    seen = []

    def execve(program, args, env):
        seen.append((program, args, env))
        raise _Exec

    try:
        allocator.ensure(choice, command, environ=environ, execve=execve,
                         argv=["prefixbench", command], current=current)
    except _Exec:
        return seen[0]
    return None


def test_a_timing_command_executes_itself_again_on_jemalloc(installed):
    program, args, env = _ensure("auto", "sweep", "libc",
                                 {"LD_PRELOAD": "/opt/x/libfoo.so:/opt/y/libtcmalloc.so.4",
                                  "HOME": "/root"})
    assert program == sys.executable and args == ["prefixbench", "sweep"]
    # jemalloc first, another allocator taken out, any other preload kept
    assert env["LD_PRELOAD"] == f"{FAKE_LIB} /opt/x/libfoo.so"
    assert env[allocator.GUARD] == "1" and env["HOME"] == "/root"


def test_nothing_happens_where_the_process_runs_on_the_choice(installed):
    assert _ensure("auto", "sweep", "jemalloc", {}) is None
    assert _ensure("libc", "sweep", "libc", {}) is None
    assert _ensure("auto", "show", "libc", {}) is None


def test_libc_takes_a_preloaded_allocator_out(installed):
    _, _, env = _ensure("libc", "run", "jemalloc", {"LD_PRELOAD": FAKE_LIB})
    assert "LD_PRELOAD" not in env


def test_a_preload_that_did_not_take_is_one_error_not_a_loop(installed):
    guard = {allocator.GUARD: "1", "LD_PRELOAD": FAKE_LIB}
    with pytest.raises(ConfigError, match=f"{FAKE_LIB} could not be preloaded "
                                          r"\(the process runs on libc\)"):
        _ensure("jemalloc", "sweep", "libc", guard)
    assert _ensure("auto", "sweep", "libc", guard) is None     # auto runs on what it got


def test_without_proc_maps_only_auto_goes_on(installed):
    assert _ensure("auto", "sweep", "unknown", {}) is None
    with pytest.raises(ConfigError, match="needs Linux"):
        _ensure("jemalloc", "sweep", "unknown", {})


# ------------------------------------------------------------------ the command line
def _run(tmp_path, *args, env=None):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "prefixbench", *args, "run", "-s", "radix", "-w", "ultrachat",
           "-W", "sessions=5", "--no-runner", "-o", str(out)]
    p = subprocess.run(cmd, env=env or _env_without_preload(), capture_output=True, text=True)
    return p, out


def _suite_allocator(out):
    suite = json.loads(out.read_text())
    found = {b.get("metadata", {}).get("allocator") for b in suite["benchmarks"]}
    found.add(suite.get("metadata", {}).get("allocator"))
    return found - {None}


def test_the_program_runs_on_the_allocator_asked_for(tmp_path):
    _needs_jemalloc()
    p, out = _run(tmp_path, "--quiet")                       # auto: jemalloc for run
    assert p.returncode == 0, p.stderr
    assert _suite_allocator(out) == {"jemalloc"}
    p, out = _run(tmp_path, "--quiet", "--allocator", "libc",
                  env={**_env_without_preload(), "LD_PRELOAD": JEMALLOC})
    assert p.returncode == 0, p.stderr
    assert _suite_allocator(out) == {"libc"}


def test_a_bad_allocator_is_one_line_and_writes_nothing(tmp_path):
    fake = tmp_path / "libjemalloc.so.2"
    fake.write_text("not a library")
    p, out = _run(tmp_path, "--quiet", "--allocator", str(fake))
    _one_line_error(p.returncode, p.stderr, "option --allocator", "is not a shared library")
    assert not out.exists()


def test_in_process_calls_never_execute_again(run_cli, tmp_path, monkeypatch):
    """``main(argv)`` (tests, embedding programs) leaves the process alone."""
    monkeypatch.setattr(allocator, "ensure", lambda *a, **k: pytest.fail("ensure called"))
    out = tmp_path / "r.json"
    code, _, err = run_cli("--quiet", "--allocator", "jemalloc", "run", "-s", "radix",
                           "-w", "ultrachat", "-W", "sessions=5", "--no-runner", "-o", str(out))
    assert code == 0, err
    assert out.exists()
