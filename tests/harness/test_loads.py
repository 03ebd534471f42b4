"""``--loads once``: a paper-scale sweep loads each setting once, keeps it (engine
checkpoint, index and oracle snapshots) and starts every run from a clone, and
each run finds exactly what it finds after a load of its own."""
import glob
import os
import tempfile

import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness import preflight, sweeps
from prefixbench.harness.cli import main
from prefixbench.workloads import profiles

FOUR = "sarp,segment-radix-capped,segment-hash,ssd-blockhash"
#: counters that differ by construction after a recovery, each for a stated reason:
#: the routing directory is allocated as recovery sizes it; id runs opened before a
#: recovery count as closed (segments written afterwards open new runs); the
#: engine's write counter starts when the clone opens (the load wrote before it)
APART = {"memory_bytes", "memory_bytes_per_block", "ids_continued", "id_runs_opened",
         "store_writes"}


@pytest.fixture
def small_paper(monkeypatch, tmp_path):
    """codeact's paper size shrunk to 20,000 blocks, free space unlimited, and every
    temporary directory under this test's own."""
    monkeypatch.setitem(profiles.PAPER_BLOCKS, "codeact", 20_000)
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(1e18, 1e18))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _outcome(res):
    return (res.requests, res.hit_tokens, res.oracle_hit_tokens, res.hit_blocks,
            res.false_hits, res.short_matches, res.store_reads_in_match,
            res.query_blocks.tolist())


def _config(**kw):
    common = dict(workload="codeact", scale="paper", run_requests="60", cap_rule="fixed")
    return sweeps.make_config("strategies", **{**common, **kw})


@pytest.mark.parametrize("engine", ["lmdb", "rocksdb"])
def test_runs_from_kept_loads_find_what_runs_after_their_own_load_find(small_paper, engine,
                                                                       monkeypatch):
    # a capped tree small enough to spill: a restored node must not be written again
    common = dict(engine=engine, repeat="2", strategies=FOUR,
                  strategy_options={"segment-radix-capped:cap_nodes": "64"})
    each = sweeps.run_sweep(_config(loads="each", **common))
    loads = []
    real = sweeps.load_phase

    def counted(strategy, oracle, *a, **k):
        loads.append((strategy.name, type(oracle).__name__))
        return real(strategy, oracle, *a, **k)

    monkeypatch.setattr(sweeps, "load_phase", counted)
    once = sweeps.run_sweep(_config(loads="once", **common))
    # one load per setting, the oracle shadowing only the first
    assert [n for n, _ in loads] == FOUR.split(",")
    assert [o for _, o in loads][1:] == ["_NoOracle"] * 3 and loads[0][1] != "_NoOracle"
    assert len(once.all_rows) == len(each.all_rows) == 8
    for a, b in zip(each.all_rows, once.all_rows):
        assert (a.setting.label, a.repeat) == (b.setting.label, b.repeat)
        assert _outcome(a.result) == _outcome(b.result), a.setting.label
        assert a.indexed_blocks == b.indexed_blocks and a.load_requests == b.load_requests
        sa, sb = a.result.strategy_stats, b.result.strategy_stats
        assert set(sa) == set(sb)
        differ = {k for k in sa if sa[k] != sb[k]}
        assert differ <= APART, (a.setting.label, {k: (sa[k], sb[k]) for k in differ - APART})
    capped = [r.result.strategy_stats for r in once.all_rows
              if r.setting.label == "segment-radix-capped"]
    assert all(st["spill_writes"] > 0 for st in capped)
    assert "each setting loaded once, then kept" in once.table()
    assert "loaded once" not in each.table()
    # the kept loads and every clone are gone once the sweep ends
    assert not glob.glob(os.path.join(small_paper, "prefixbench-*"))


@pytest.mark.parametrize("loads", ["each", "once"])
def test_a_variants_engine_options_open_its_every_store(small_paper, monkeypatch, loads):
    """``sarp+engine.block_bytes=16KiB`` loads, and with loads kept clones, every store
    of that row with 16 KiB data blocks and the plain row's with RocksDB's 4 KiB; the
    block size changes no answer, and the options table names it."""
    from prefixbench.engines.rocksdb import RocksDBStore
    opened = []
    real = RocksDBStore.__init__

    def init(self, config=None):
        real(self, config)
        opened.append(self.block_bytes)

    monkeypatch.setattr(RocksDBStore, "__init__", init)
    res = sweeps.run_sweep(_config(engine="rocksdb", repeat="2", loads=loads,
                                   strategies="sarp,sarp+engine.block_bytes=16KiB"))
    # loads once: a row's first run loads it, then every run opens a clone of it
    assert opened == ([4096, 4096, 16384, 16384, 4096, 16384] if loads == "once"
                      else [4096, 16384] * 2)
    plain, tuned = (r for r in res.all_rows if r.repeat == 0)
    assert _outcome(plain.result) == _outcome(tuned.result)
    options = res.table().split("options of each strategy")[1]
    line = next(ln for ln in options.splitlines() if ln.startswith("sarp+engine"))
    assert "its engine: block_bytes=16KiB" in line
    assert "its engine" not in next(ln for ln in options.splitlines()
                                    if ln.startswith("sarp "))


def test_interleaved_thread_counts_run_from_one_load(small_paper, monkeypatch):
    loads = []
    real = sweeps.load_phase
    monkeypatch.setattr(sweeps, "load_phase",
                        lambda s, *a, **k: loads.append(s.name) or real(s, *a, **k))
    res = sweeps.run_sweep(_config(engine="lmdb", strategies="sarp,ssd-blockhash",
                                   threads="1,2", interleave="7"))
    assert res.config.loads == "once"            # chosen: each setting runs twice
    assert loads == ["sarp", "ssd-blockhash"]
    assert [(r.setting.label, r.threads) for r in res.all_rows] == [
        ("sarp", 1), ("ssd-blockhash", 1), ("sarp", 2), ("ssd-blockhash", 2)]
    for r in res.all_rows:
        assert r.result.false_hits == 0 and r.result.requests == 60


def test_loads_default_to_once_only_where_a_setting_runs_again_and_the_engine_keeps_it():
    assert _config(engine="lmdb", repeat="2").loads == "once"
    assert _config(engine="rocksdb", threads="1,2").loads == "once"
    assert _config(engine="lmdb").loads == "each"                # one run per setting
    assert _config(engine="memory", repeat="2").loads == "each"  # nothing to checkpoint
    assert _config(engine="lmdb", repeat="2", loads="each").loads == "each"
    assert _config(engine="lmdb", repeat="2").describe()["loads"] == "once"


@pytest.mark.parametrize("kw, words", [
    (dict(engine="memory", loads="once"), ["--loads", "memory", "cannot checkpoint"]),
    (dict(engine="lmdb", loads="twice"), ["--loads", "'twice'"]),
    (dict(engine="lmdb", loads="once", scale="small", run_requests=None),
     ["--loads", "--scale paper"]),
])
def test_bad_loads_is_one_config_error(kw, words):
    with pytest.raises(ConfigError) as e:
        _config(**kw)
    assert len(str(e.value).splitlines()) == 1
    for w in words:
        assert w in str(e.value)


def test_loads_on_the_command_line(capsys):
    code = main(["-q", "sweep", "strategies", "-w", "codeact", "-W", "sessions=4",
                 "--cap-rule", "fixed", "--loads", "once"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and "--loads" in err
    code = main(["-q", "sweep", "capacity", "-w", "codeact", "--pool-blocks", "100",
                 "--loads", "once"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "--loads" in err


def test_a_kept_load_is_let_go_before_its_first_clone_opens(small_paper, monkeypatch):
    """The loaded oracle is freed before a clone recovers its own from the snapshot:
    holding both counts the oracle twice, which the pre-flight does not plan for."""
    import weakref
    from prefixbench.harness import checkpoints
    made, alive = [], []
    real_make, real_open = sweeps.make_oracle, checkpoints.LoadedStates.open

    def make(meta_size):
        oracle = real_make(meta_size)
        made.append(weakref.ref(oracle))
        return oracle

    def open_(self, key):
        alive.append(sum(r() is not None for r in made))
        return real_open(self, key)

    monkeypatch.setattr(sweeps, "make_oracle", make)
    monkeypatch.setattr(checkpoints.LoadedStates, "open", open_)
    sweeps.run_sweep(_config(engine="lmdb", repeat="2", strategies="sarp", loads="once"))
    assert len(made) == 1 and alive == [0, 0]


def test_kept_loads_count_in_the_preflight():
    args = dict(cache_bytes=1 << 20, run_requests=100)
    plain = preflight.sweep_need(10**6, ["sarp", "ssd-blockhash"], "rocksdb", **args)
    kept = preflight.sweep_need(10**6, ["sarp", "ssd-blockhash"], "rocksdb", kept=True, **args)
    stores = sum(preflight.store_disk_bytes(s, "rocksdb", 10**6, needs_store=True)
                 for s in ("sarp", "ssd-blockhash"))
    assert kept.disk >= plain.disk + stores
    # the snapshots copy the loaded oracle's and strategy's arrays while both are held
    assert kept.memory >= plain.memory + 10**6 * preflight.MEMORY_BYTES_PER_BLOCK["radix"]
    assert kept.parts["snapshots"] > 0 == plain.parts["snapshots"]


def test_a_chosen_once_falls_back_to_each_where_the_snapshots_would_not_fit_memory(
        small_paper, monkeypatch):
    def need(loads):
        return preflight.sweep_need(20_000, ["sarp", "ssd-blockhash"], "lmdb",
                                    cache_bytes=round(0.1 * 20_000 * 24), run_requests=60,
                                    kept=loads == "once").memory
    # memory for a load per run at the full size, not for the copies a kept load makes
    memory = (need("each") + need("once")) / 2 / preflight.HEADROOM
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(1e18, memory))
    chosen = sweeps.run_sweep(_config(engine="lmdb", repeat="2", strategies="sarp,ssd-blockhash"))
    assert chosen.config.loads == "each" and chosen.paper.fraction == 1.0


def test_a_chosen_once_falls_back_to_each_where_keeping_loads_would_shrink_the_trace(
        small_paper, monkeypatch):
    def need(loads):
        cfg = _config(engine="lmdb", repeat="2", strategies="sarp,ssd-blockhash", loads=loads)
        n = preflight.sweep_need(20_000, ["sarp", "ssd-blockhash"], "lmdb",
                                 cache_bytes=round(0.1 * 20_000 * 24), run_requests=60,
                                 kept=cfg.loads == "once")
        return n.disk
    # room for a load per run at the full size, not for every setting's kept load
    disk = (need("each") + need("once")) / 2 / preflight.HEADROOM
    monkeypatch.setattr(preflight, "free_space", lambda d: preflight.Free(disk, 1e18))
    chosen = sweeps.run_sweep(_config(engine="lmdb", repeat="2", strategies="sarp,ssd-blockhash"))
    assert chosen.config.loads == "each" and chosen.paper.fraction == 1.0
    given = sweeps.run_sweep(_config(engine="lmdb", repeat="2", strategies="sarp,ssd-blockhash",
                                     loads="once"))
    assert given.config.loads == "once" and given.paper.fraction < 1.0
