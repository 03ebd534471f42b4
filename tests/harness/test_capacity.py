"""``prefixbench sweep capacity``: one row per strategy and capacity, the stack-inclusion
check (it holds for LRU with one worker on a small workload, and a violation is
printed), the suites, and bad input as one line each.

Tiny workloads on the memory engine; behaviour only, never timings.
"""
import pytest

import pool_fakes
from cli_support import one_line_error
from prefixbench.errors import ConfigError
from prefixbench.harness import capacity, pools

TINY = {"sessions": "20"}
CAPS = "250,400,800,1600,5k,unbounded"


@pytest.fixture(scope="module")
def lru_sweep():
    cfg = capacity.make_config(workload="codeact", workload_options=TINY, pool_blocks=CAPS,
                               strategies="radix")
    return capacity.run_capacity(cfg)


def test_rows_ascend_and_exact_strategies_lose_nothing(lru_sweep):
    rows = lru_sweep.rows
    assert [r.capacity for r in rows] == [250, 400, 800, 1600, 5000, pools.UNBOUNDED]
    for r in rows:
        assert r.result.false_hits == 0 and r.result.hit_rate_loss == 0
        assert r.result.strategy_stats["entries"] <= r.capacity
    assert rows[0].result.evictions > rows[-3].result.evictions
    assert rows[-1].result.evictions == 0 and rows[-1].label == "radix-pool-unbounded"
    from prefixbench.harness.bench import make_workload
    from prefixbench.harness.replay import replay
    from prefixbench.registry import get_registry
    plain = replay(get_registry().get("strategy", "radix").factory(),
                   make_workload("codeact", TINY))
    assert rows[-1].result.hit_tokens == plain.hit_tokens   # unbounded = no pools at all


def test_lru_stack_inclusion_holds_on_a_small_workload(lru_sweep):
    rates = [r.result.oracle_hit_rate for r in lru_sweep.rows]
    assert rates == sorted(rates) and rates[0] < rates[-1]
    assert lru_sweep.violations() == []
    table = lru_sweep.table()
    assert "stack inclusion (LRU, one worker): holds" in table
    assert "capacity cliff" in table
    for col in ("pool blocks", "hit rate", "loss", "evictions/req", "remove mean",
                "index entries"):
        assert col in table


def test_a_violation_is_printed(lru_sweep):
    rows = list(lru_sweep.rows)
    bad = capacity.CapacityResult(lru_sweep.config, [rows[-1], rows[0]])
    bad.rows[0], bad.rows[1] = rows[0], rows[-1]
    # swap the results so the larger capacity carries the smaller pool's hit rate
    bad.rows = [capacity.CapacityRow("radix", 250, rows[-1].result, True),
                capacity.CapacityRow("radix", pools.UNBOUNDED, rows[0].result, True)]
    v = bad.violations()
    assert v and v[0][1] == 250 and v[0][3] == pools.UNBOUNDED
    assert "stack inclusion VIOLATED" in bad.table() and "at unbounded blocks" in bad.table()


def test_other_policies_and_workers_are_reported_as_measured():
    cfg = capacity.make_config(workload="codeact", workload_options=TINY,
                               pool_blocks="400,1600", strategies="radix", evict="fifo",
                               workers=2, route="cache-aware")
    res = capacity.run_capacity(cfg)
    assert not cfg.inclusion_applies and res.violations() == []
    assert "stack inclusion: not checked" in res.table()
    assert all(r.result.missing_locations == 0 and r.result.false_hits == 0
               for r in res.rows)


def test_default_strategies_skip_those_that_cannot_remove(registry_with):
    registry_with(pool_fakes.plugin())
    cfg = capacity.make_config(workload="codeact", workload_options=TINY, pool_blocks="1e4",
                               check_fit=False)
    assert "radix" in cfg.strategies
    from prefixbench.registry import get_registry
    for n in capacity.DEFAULT_STRATEGIES:
        if n not in cfg.strategies:
            assert not get_registry().get("strategy", n).factory.supports_remove
            assert any(n in note for note in cfg.notes)


def test_the_sweep_writes_named_suites(run_cli, tmp_path):
    out = tmp_path / "cap.json"
    code, stdout, err = run_cli("-q", "sweep", "capacity", "-w", "codeact", "-W", "sessions=20",
                                "--pool-blocks", "400,1600", "--strategies", "radix", "-o", out)
    assert code == 0, err
    assert "radix" in stdout and "wrote" in stdout
    import pyperf
    from prefixbench import schema
    counts = pyperf.BenchmarkSuite.load(str(tmp_path / "cap.counts.json"))
    names = {b.get_name() for b in counts.get_benchmarks()}
    assert {"radix-pool-400-evictions-per-request", "radix-pool-1600-hit-tokens"} <= names
    times = pyperf.BenchmarkSuite.load(str(out))
    assert "radix-pool-400-remove-latency-mean" in {b.get_name() for b in
                                                     times.get_benchmarks()}
    rs = schema.readings(counts)
    hit = schema.read(rs, "hit-tokens", setting="radix-pool-400")
    assert hit is not None and hit.median > 0


@pytest.mark.parametrize("args,needles", [
    ([], ["--pool-blocks", "capacities"]),
    (["--pool-blocks", "0,1e4"], ["--pool-blocks", "0 blocks"]),
    (["--pool-blocks", "50,1e4"], ["--pool-blocks", "50 blocks", "request 0"]),
    (["--pool-blocks", "1e4", "--evict", "mru"], ["--evict", "fifo, lfu, lru"]),
    (["--pool-blocks", "1e4", "--workers", "65"], ["--workers", "1 to 64"]),
    (["--pool-blocks", "1e4", "--strategies", "fake-no-remove"],
     ["fake-no-remove", "supports_remove"]),
    (["--pool-blocks", "1e4", "--strategies", "fake-one-location", "--workers", "2"],
     ["fake-one-location", "max_workers"]),
    (["--pool-blocks", "1e4", "--cache-rule", "paper"], ["--cache-rule"]),
    (["--pool-blocks", "1e4", "--threads", "2"], ["--threads"]),
])
def test_bad_capacity_input_is_one_line(registry_with, run_cli, args, needles):
    registry_with(pool_fakes.plugin())
    code, _, err = run_cli("-q", "sweep", "capacity", "-w", "codeact", "-W", "sessions=20",
                           *args)
    one_line_error(code, err, *needles)


def test_other_sweeps_refuse_pool_options(run_cli):
    code, _, err = run_cli("-q", "sweep", "retrieval", "-w", "codeact", "--pool-blocks", "1e4")
    one_line_error(code, err, "--pool-blocks", "capacity sweep")
    code, _, err = run_cli("-q", "sweep", "nosuch", "-w", "codeact")
    one_line_error(code, err, "capacity")


def test_capacity_list_parsing():
    assert capacity.parse_capacities("1e4, 1e3,10k") == (1000, 10000)
    assert capacity.parse_capacities("unbounded,1e3") == (1000, pools.UNBOUNDED)
    with pytest.raises(ConfigError, match="not a block count"):
        capacity.parse_capacities("1e3,big")
    with pytest.raises(ConfigError, match="whole number"):
        capacity.parse_capacities("1.5")
