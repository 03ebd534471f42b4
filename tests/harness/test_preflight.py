"""Pre-flight: long builds that will not fit are refused in one line before anything
is made, each refusal names what to lower, and ``--force`` goes ahead anyway.

Free space is monkeypatched, so the outcome never depends on this machine.
"""
import os

import pytest

from prefixbench.harness import preflight, recovery, sweeps
from prefixbench.errors import ConfigError, PrefixbenchError

from cli_support import one_line_error as _one_line_error

HUGE = 1e18




def _free(monkeypatch, disk=HUGE, memory=HUGE):
    monkeypatch.setattr(preflight, "free_space",
                        lambda d: preflight.Free(float(disk), float(memory)))


class _Reached(PrefixbenchError):
    exit_code = 7


def _stop_at_build(monkeypatch):
    """The build itself is replaced: reaching it proves the pre-flight let it through."""
    def build(spec, quiet=True):
        raise _Reached(f"reached the build of {spec.entries} entries")
    monkeypatch.setattr(recovery, "build_and_snapshot", build)


# ----------------------------------------------------------------------------- recover
def test_recover_1e30_refuses_before_building(run_cli, monkeypatch, tmp_path):
    """No monkeypatched space: 1e30 entries fit nowhere; nothing is created."""
    _stop_at_build(monkeypatch)
    work = tmp_path / "work"
    code, out, err = run_cli("recover", "-s", "sarp", "-e", "lmdb", "-n", "1e30",
                             "--work-dir", work)
    _one_line_error(code, err, "recover: -n 1e30 needs about", "of disk in", "free",
                    "lower -n or give --force")
    assert out == "" and not work.exists()


def test_recover_refuses_on_memory(run_cli, monkeypatch):
    _free(monkeypatch, disk=HUGE, memory=1 << 30)
    _stop_at_build(monkeypatch)
    code, _out, err = run_cli("recover", "-s", "dram-blockhash", "-n", "1e8")
    _one_line_error(code, err, "-n 1e8", "of memory", "available", "lower -n")


def test_recover_counts_the_redis_servers_memory(run_cli, monkeypatch):
    """A store in a local redis-server costs that server's memory, not a cache budget:
    1e7 entries need some 2 GiB there, so 1 GiB available refuses; an embedded engine
    at the same size fits."""
    assert (preflight.strategy_memory_bytes("ssd-blockhash", "redis", 10**7)
            >= 10**7 * 200 > preflight.strategy_memory_bytes("ssd-blockhash", "lmdb", 10**7))
    _free(monkeypatch, disk=HUGE, memory=1 << 30)
    _stop_at_build(monkeypatch)
    code, _out, err = run_cli("recover", "-s", "ssd-blockhash", "-e", "redis", "-n", "1e7")
    _one_line_error(code, err, "-n 1e7", "of memory", "available", "lower -n")
    code, _out, err = run_cli("recover", "-s", "ssd-blockhash", "-e", "lmdb", "-n", "1e7")
    assert code == _Reached.exit_code, err


def test_recover_refuses_on_disk_naming_the_work_dir(run_cli, monkeypatch, tmp_path):
    _free(monkeypatch, disk=1 << 20, memory=HUGE)
    _stop_at_build(monkeypatch)
    code, _out, err = run_cli("recover", "-s", "ssd-blockhash", "-e", "rocksdb", "-n", "1e7",
                              "--work-dir", tmp_path / "new")
    _one_line_error(code, err, "of disk in " + str(tmp_path), "1 MiB free")


def test_recover_force_goes_ahead(run_cli, monkeypatch):
    _free(monkeypatch, disk=1, memory=1)
    _stop_at_build(monkeypatch)
    code, _out, err = run_cli("recover", "-s", "sarp", "-e", "lmdb", "-n", "1e30", "--force")
    assert code == 7 and "reached the build" in err


def test_recover_that_fits_goes_ahead(run_cli, monkeypatch):
    _free(monkeypatch)
    _stop_at_build(monkeypatch)
    code, _out, err = run_cli("recover", "-s", "radix", "-n", "1e6")
    assert code == 7 and "reached the build" in err


def test_estimates_grow_with_entries_and_layout():
    small = preflight.recover_need(10 ** 6, "ssd-blockhash", "lmdb", cache_bytes=0)
    big = preflight.recover_need(10 ** 8, "ssd-blockhash", "lmdb", cache_bytes=0)
    assert big.disk == pytest.approx(100 * small.disk)
    assert small.disk == pytest.approx(10 ** 6 * 24 * preflight.ENGINE_AMPLIFICATION["lmdb"])
    # segment-hash writes several records per block; the memory engine keeps its store in RAM
    assert preflight.store_disk_bytes("segment-hash", "lmdb", 10 ** 6) > small.disk
    mem = preflight.recover_need(10 ** 6, "ssd-blockhash", "memory", cache_bytes=0)
    assert mem.disk == 0 and mem.memory > small.memory
    # an in-memory strategy needs no store, but its snapshot lands on disk
    dram = preflight.recover_need(10 ** 6, "dram-blockhash", None, cache_bytes=0)
    assert dram.parts["store"] == 0 and dram.disk > 0


@pytest.mark.parametrize("blocks", [1_500, 70_000, 300_000])
def test_radix_estimate_bounds_what_the_tree_allocates(blocks):
    """The oracle's tree is counted as it allocates (its pools and id index double):
    never under what it holds, and not far over it."""
    import numpy as np
    from prefixbench.harness.replay import make_oracle
    oracle = make_oracle(16)
    rng = np.random.default_rng(blocks)
    shared = rng.integers(1, 2**63, 40, dtype=np.uint64)
    done = 0
    while done < blocks:        # sessions sharing a head, then their own blocks
        n = int(rng.integers(20, 200))
        own = rng.integers(1, 2**63, n, dtype=np.uint64)
        ids = np.concatenate([shared[:int(rng.integers(0, 40))], own])
        oracle.insert(ids, np.zeros((len(ids), 16), dtype=np.uint8))
        done += n
    st = oracle.stats()
    estimate = preflight.radix_memory_bytes(st["entries"])
    assert st["memory_bytes"] <= estimate <= 1.3 * st["memory_bytes"]
    assert preflight.strategy_memory_bytes("radix", None, st["entries"]) == estimate
    oracle.close()


def test_replay_estimates_take_the_engine_options():
    """A redis store packed into hashes needs less server memory than one key per
    entry, and the sweep, run and reproduce estimates all see the option."""
    plain = preflight.sweep_need(10 ** 7, ["ssd-blockhash"], "redis", cache_bytes=0)
    packed = preflight.sweep_need(10 ** 7, ["ssd-blockhash"], "redis", cache_bytes=0,
                                  engine_options={"layout": "packed"})
    assert packed.memory < plain.memory
    _n, via_replay = preflight.replay_need(["ssd-blockhash"], "redis", "codeact",
                                           {"sessions": "100"},
                                           engine_options={"layout": "packed"})
    _n, plain_replay = preflight.replay_need(["ssd-blockhash"], "redis", "codeact",
                                             {"sessions": "100"})
    assert via_replay.parts["index"] < plain_replay.parts["index"]
    from prefixbench.harness import reproduce
    argv = ["sweep", "strategies", "-w", "codeact", "-W", "sessions=100", "-e", "redis",
            "--strategies", "ssd-blockhash,ssd-blockhash+probe=batch"]
    (_what, est), = reproduce.estimate(argv)
    (_what, est_packed), = reproduce.estimate(argv + ["--engine-option", "layout=packed"])
    assert est_packed.parts["index"] < est.parts["index"]


def test_existing_dir_walks_up():
    assert preflight.existing_dir("/tmp/does/not/exist/yet") == "/tmp"
    assert os.path.isdir(preflight.existing_dir(None))


def test_fmt_count():
    assert recovery.fmt_count(10 ** 30) == "1e30"
    assert recovery.fmt_count(10 ** 8) == "1e8"
    assert recovery.fmt_count(25 * 10 ** 6) == "2.5e7"
    assert recovery.fmt_count(12_345) == "12,345"
    assert recovery.fmt_count(12_345_678) == "12,345,678"


# ----------------------------------------------------------------------------- sweep
@pytest.fixture
def small_paper(monkeypatch):
    """codeact's paper size shrunk to 20,000 blocks (the real one is 2.2M)."""
    from prefixbench.workloads import profiles
    monkeypatch.setitem(profiles.PAPER_BLOCKS, "codeact", 20_000)


def _paper_cfg(**kw):
    return sweeps.make_config("strategies", workload="codeact", engine="lmdb", scale="paper",
                              strategies="sarp,ssd-blockhash", cap_rule="fixed", **kw)


def _need(cfg, fraction):
    entries = int(20_000 * fraction)
    cache = round(cfg.cache_fraction * entries * 24)
    return preflight.sweep_need(entries, cfg.strategies, cfg.engine, cache_bytes=cache,
                                run_requests=cfg.run_requests)


def test_sweep_paper_halves_until_it_fits(small_paper):
    cfg = _paper_cfg()
    quarter = _need(cfg, 0.25)
    half = _need(cfg, 0.5)
    free = preflight.Free((quarter.disk + half.disk) / 2 / preflight.HEADROOM, HUGE)
    p = sweeps.paper_size(cfg, free=free)
    assert p.fraction == 0.25 and p.fraction_text == "1/4 of the paper size"
    assert p.workload_options["sessions"] < sweeps.paper_size(
        cfg, free=preflight.Free(HUGE, HUGE)).workload_options["sessions"]
    full = sweeps.paper_size(cfg, free=preflight.Free(HUGE, HUGE))
    assert full.fraction == 1.0 and full.fraction_text == "the full paper size"


def test_sweep_paper_refuses_when_nothing_fits(small_paper, run_cli, monkeypatch):
    _free(monkeypatch, disk=1, memory=HUGE)
    code, out, err = run_cli("sweep", "strategies", "-w", "codeact", "-e", "lmdb",
                             "--scale", "paper", "--cap-rule", "fixed")
    _one_line_error(code, err, "--scale paper", "codeact needs about", "of disk", "--force")
    assert out == ""


def test_sweep_paper_force_keeps_the_full_size(small_paper):
    cfg = _paper_cfg(force=True)
    p = sweeps.paper_size(cfg, free=preflight.Free(1, 1))
    assert p.fraction == 1.0


def test_check_force_and_fits():
    need = preflight.Need(disk=10 * preflight.GIB, memory=0, disk_dir="/x")
    free = preflight.Free(1 * preflight.GIB, HUGE)
    assert not preflight.fits(need, free)
    preflight.check("thing", need, "--size", force=True, free=free)
    with pytest.raises(ConfigError, match=r"thing needs about 10.0 GiB of disk in /x, "
                                          r"1.0 GiB free; lower --size or give --force"):
        preflight.check("thing", need, "--size", free=free)


def test_cap_rule_builds_are_preflighted(run_cli, monkeypatch):
    from prefixbench.harness import caprule

    def never(**kw):
        raise AssertionError("the search must not start")
    monkeypatch.setattr(caprule, "choose_cap", never)
    _free(monkeypatch, disk=1 << 20, memory=HUGE)
    code, out, err = run_cli("--quiet", "sweep", "strategies", "-w", "codeact", "-W",
                             "sessions=10", "-e", "lmdb", "--strategies",
                             "sarp,segment-radix-capped")
    _one_line_error(code, err, "--cap-rule paper: sarp at --cap-entries 1e7 needs about",
                    "lower --cap-entries or give --force")
    assert out == ""
