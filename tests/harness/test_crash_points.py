"""``crashtest --kill-at`` and ``--matrix``: deterministic kills inside the risky windows.

In-process tests arm each kill point with the kill replaced by an exception, so
they prove the point is reached where the docs say; the command-line tests
then kill real children there (one short run per window) and run a short
matrix.  A full matrix is ``prefixbench crashtest --matrix`` (see the report of
issue 17 for its figures).
"""
import re

import numpy as np
import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness import crashpoints

from cli_support import one_line_error


class Killed(Exception):
    pass


@pytest.fixture
def no_kill(monkeypatch):
    """``_die`` raises instead of SIGKILL-ing the test process; returns the points hit."""
    hits = []

    def die(marker, point, nth):
        hits.append((point, nth))
        raise Killed(point)
    monkeypatch.setattr(crashpoints, "_die", die)
    return hits


# ------------------------------------------------------------------ parsing and cycling
def test_parse_kill_at():
    assert crashpoints.parse_kill_at(["snapshot:renamed", "backfill:after-publish:3"]) == [
        ("snapshot:renamed", None), ("backfill:after-publish", 3)]
    assert [p for p, _n in crashpoints.parse_kill_at(["all"])] == list(crashpoints.KILL_POINTS)
    for bad in ("snapshot", "snapshot:renamed:0", "packfile:reuse:x", "nowhere"):
        with pytest.raises(ConfigError, match=r"^option --kill-at: "):
            crashpoints.parse_kill_at([bad])


def test_points_cycle_with_random_kills_and_apply_only_where_they_can():
    pts = crashpoints.parse_kill_at(["all"])
    seen = [crashpoints.point_for(pts, "sarp", "packfile", k, k)[0] for k in range(11)]
    assert set(seen) == set(crashpoints.KILL_POINTS) | {"random"}
    radix = {crashpoints.point_for(pts, "radix", "lmdb", k, k)[0] for k in range(12)}
    assert radix == {f"snapshot:{s}" for s in crashpoints.SNAPSHOT_STEPS} | {"random"}
    # one point alone kills only there (how a failing iteration is reproduced)
    one = crashpoints.parse_kill_at(["snapshot:renamed:2"])
    assert crashpoints.point_for(one, "radix", "lmdb", 0, 5) == ("snapshot:renamed", 2)
    assert crashpoints.point_for(crashpoints.parse_kill_at(["backfill:before-publish"]),
                                 "radix", "lmdb", 0, 0) == ("random", None)
    p, n = crashpoints.point_for(crashpoints.parse_kill_at(["backfill:before-publish"]),
                                 "sarp", "lmdb", 0, 7)
    assert p == "backfill:before-publish" and 1 <= n <= crashpoints.MAX_NTH["backfill"]


# ------------------------------------------------------------------ in-process: points are reached
@pytest.mark.parametrize("step", crashpoints.SNAPSHOT_STEPS)
def test_snapshot_steps_are_reached_in_order(no_kill, monkeypatch, tmp_path, step):
    from prefixbench import snapshot
    from prefixbench.metas import make_metas
    from prefixbench.registry import get_registry
    monkeypatch.setattr(snapshot, "FAULT_HOOK", None)
    strat = get_registry().get("strategy", "radix").factory(None, {})
    crashpoints.arm({"kill_at": [f"snapshot:{step}", 2], "kill_marker": ""}, strat, None)
    ids = np.arange(1, 9, dtype=np.uint64)
    strat.insert(ids, make_metas(ids, 0, strat.meta_size))
    published = 0
    with pytest.raises(Killed):
        for _ in range(3):
            strat.snapshot(tmp_path)
            published += 1
    # occurrence 2 is in the second publication; a previous generation is first kept by
    # the second, so its occurrence 2 is in the third
    assert published == (2 if step == "previous-kept" else 1)
    assert no_kill == [(f"snapshot:{step}", 2)]


def _packfile(tmp_path):
    from prefixbench.harness.build import open_engine
    return open_engine("packfile", str(tmp_path / "pf"), durability="async",
                       options=crashpoints.CRASH_ENGINE_OPTIONS["packfile"])


@pytest.mark.parametrize("step", crashpoints.PACKFILE_POINTS)
def test_packfile_space_reuse_points_are_reached(no_kill, tmp_path, step):
    """Overwriting the same keys fills 64 KiB packs with dead records: cleaning and
    the reuse of emptied packs follow within a few hundred batches."""
    store = _packfile(tmp_path)
    crashpoints.arm({"kill_at": [f"packfile:{step}", 1], "kill_marker": ""}, None, store)
    value = bytes(3000)
    with pytest.raises(Killed):
        for i in range(5000):
            store.put_many([(k, value) for k in range(i % 7, i % 7 + 4)])
    assert no_kill == [(f"packfile:{step}", 1)]
    store._failed = None


def test_packfile_points_need_a_packfile_store(no_kill):
    with pytest.raises(ConfigError, match="not a packfile store"):
        crashpoints.arm({"kill_at": ["packfile:reuse", 1], "kill_marker": ""}, None, None)


@pytest.mark.parametrize("step", crashpoints.BACKFILL_POINTS)
def test_backfill_publish_points_are_reached(no_kill, step):
    from prefixbench.engines.memory import MemoryStore
    from prefixbench.metas import make_metas
    from prefixbench.registry import get_registry
    strat = get_registry().get("strategy", "sarp").factory(MemoryStore(), {"backfill": "sync"})
    crashpoints.arm({"kill_at": [f"backfill:{step}", 1], "kill_marker": ""}, strat, None)
    rng = np.random.default_rng(0)
    shared = rng.integers(1, 2 ** 63, 64 + 20, dtype=np.uint64)   # diverge inside window 2
    with pytest.raises(Killed):
        for i in range(200):               # many sequences through one routing point
            ids = np.concatenate([shared, rng.integers(1, 2 ** 63, 70, dtype=np.uint64)])
            strat.insert(ids, make_metas(ids, i, strat.meta_size))
            strat.drain()
    assert no_kill == [(f"backfill:{step}", 1)]


# ------------------------------------------------------------------ real kills
def _kill_line(out):
    m = re.search(r"kill points: (\S+) on (\S+): (\d+) \((\d+) random(?:, (\d+) at --kill-at "
                  r"points \((\d+) reached\))?\), (\d+) killed, (\d+) lost, (\d+) false", out)
    assert m, out
    return m


SMALL = ["-W", "sessions=40", "--snapshot-every", "10", "--max-kill-ms", "4000"]


@pytest.mark.parametrize("strategy,point", [
    ("radix", "snapshot:temp-written:1"),
    ("dram-blockhash", "snapshot:temp-fsynced:2"),
    ("sarp", "snapshot:previous-kept:1"),
    ("segment-radix", "snapshot:renamed:2"),
    ("ssd-blockhash", "snapshot:dir-fsynced:1"),
    ("sarp", "backfill:after-publish:2"),
    ("sparse-state", "snapshot:renamed:1"),      # its own placement answers shorter by design
])
def test_kill_at_a_point_loses_nothing(run_cli, strategy, point):
    code, out, err = run_cli("--quiet", "crashtest", "-s", strategy, "-e", "lmdb", "--kill-at",
                             point, "--iterations", "1", *SMALL)
    assert code == 0, err
    m = _kill_line(out)
    assert m.group(5) == "1" and m.group(6) == "1", out      # the point was reached
    assert m.group(7) == "1" and m.group(8) == "0" and m.group(9) == "0"


def test_kill_at_packfile_reuse_loses_nothing(run_cli):
    code, out, err = run_cli("--quiet", "crashtest", "-s", "sarp", "-e", "packfile",
                             "--kill-at", "packfile:clean-before-commit:1", "--iterations", "1",
                             "--max-kill-ms", "6000")
    assert code == 0, err
    m = _kill_line(out)
    assert m.group(6) == "1" and m.group(8) == "0" and m.group(9) == "0", out


def test_short_matrix(run_cli):
    """The matrix restricted to one engine and two strategies, each point in turn."""
    code, out, err = run_cli("--quiet", "crashtest", "--matrix", "-e", "lmdb", "-s", "sarp",
                             "-s", "radix", "--iterations", "2", "--sarp-iterations", "3",
                             *SMALL)
    assert code == 0, err
    lines = [_kill_line(ln) for ln in out.splitlines() if ln.startswith("kill points:")]
    got = {(m.group(1), m.group(2)): int(m.group(3)) for m in lines}
    assert got == {("sarp", "lmdb"): 3, ("radix", "lmdb"): 2}
    assert all(m.group(8) == "0" and m.group(9) == "0" for m in lines)
    assert all(m.group(5) is not None for m in lines)    # deterministic points were tried


def test_bad_kill_at_and_missing_strategy_are_one_line(run_cli):
    code, _out, err = run_cli("crashtest", "-s", "sarp", "--kill-at", "snapshot:nowhere")
    one_line_error(code, err, "option --kill-at: 'snapshot:nowhere' is not a kill point")
    code, _out, err = run_cli("crashtest", "-e", "lmdb")
    one_line_error(code, err, "option --strategy: give at least one strategy (or --matrix)")
    code, _out, err = run_cli("crashtest", "--matrix", "-e", "memory")
    one_line_error(code, err, "memory is volatile")
