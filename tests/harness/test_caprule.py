"""The paper's cap rule (harness/caprule.py): the search, its limits, the cache,
bad input; one tiny real run (20k entries, 2 fresh-process recoveries)."""
import json
import math
import re

import pyperf
import pytest

from prefixbench.harness import caprule
from prefixbench.harness.caprule import (BAND, CapChoice, choose_cap, load_choice,
                                         save_choice)
from prefixbench.errors import ConfigError

TINY = dict(workload="codeact", workload_options={}, engine="lmdb", entries=20_000,
            recoveries=2, allow_small=True)


class FakeMeasure:
    """Stands in for build + fresh-process recoveries: sarp takes ``sarp`` seconds,
    the capped tree ``capped(fraction)``; records every call."""

    def __init__(self, capped, sarp=0.02, total=100_000):
        self.capped, self.sarp, self.total = capped, sarp, total
        self.calls = []

    def __call__(self, strategy, options, **common):
        self.calls.append((strategy, dict(options), common))
        n = common["recoveries"]
        if strategy == "sarp":
            return [self.sarp * (1 + 0.01 * i) for i in range(n)], {}
        f = options["cap_fraction"]
        t = self.capped(f)
        nodes = max(1, math.ceil(f * self.total))
        return [t] * n, {"nodes": self.total, "cap_nodes_effective": nodes}

    @property
    def capped_calls(self):
        return [c for c in self.calls if c[0] == "segment-radix-capped"]


def test_search_lands_in_the_band(monkeypatch):
    fake = FakeMeasure(lambda f: 0.004 + 0.5 * f)     # ratio 1 at f = 0.032
    monkeypatch.setattr(caprule, "_measure", fake)
    c = choose_cap(**TINY)
    assert c.in_band and BAND[0] <= c.ratio <= BAND[1]
    assert c.ratio == pytest.approx(c.capped_median / c.sarp_median)
    assert c.sarp_median == pytest.approx(0.0201)     # median of 0.02 and 0.0202
    assert len(c.steps) <= 8 and c.steps[-1][0] == c.fraction
    assert c.nodes == math.ceil(c.fraction * 100_000) and c.total_nodes == 100_000
    assert c.sarp_s and c.capped_s and len(c.capped_s) == 2
    # the search moved the right way: too slow -> less in memory, too fast -> more
    for (f0, _m0, r0), (f1, _m1, _r1) in zip(c.steps, c.steps[1:]):
        assert (f1 < f0) if r0 > BAND[1] else (f1 > f0)


def test_search_interpolates_towards_the_band():
    """Recovery about linear in the fraction: the guesses reach the band in at most
    three builds, where bisection from 1e-4..1 needs more (each build is minutes)."""
    fake = FakeMeasure(lambda f: 0.004 + 0.5 * f)
    caprule_measure = caprule._measure
    try:
        caprule._measure = fake
        c = choose_cap(**TINY)
    finally:
        caprule._measure = caprule_measure
    assert c.in_band and len(c.steps) <= 3


@pytest.mark.parametrize("model, want", [(lambda f: 0.001 + 0.005 * f, "low"),
                                         (lambda f: 1.0 + f, "high")])
def test_unreachable_band_reports_the_closest_and_stops(monkeypatch, model, want):
    fake = FakeMeasure(model)
    monkeypatch.setattr(caprule, "_measure", fake)
    c = choose_cap(**TINY, max_steps=5)
    assert not c.in_band
    assert len(fake.capped_calls) == len(c.steps) <= 5
    fracs = [s[0] for s in c.steps]
    # always too fast: the closest is the largest fraction tried; too slow: the smallest
    assert c.fraction == (max(fracs) if want == "low" else min(fracs))
    assert "not reached" in c.line() and "closest" in c.line()


def test_small_tree_stops_when_no_new_budget_is_left(monkeypatch):
    fake = FakeMeasure(lambda f: 0.001, total=3)      # only budgets 1, 2, 3 exist
    monkeypatch.setattr(caprule, "_measure", fake)
    c = choose_cap(**TINY, max_steps=8)
    budgets = [max(1, math.ceil(s[0] * 3)) for s in c.steps]
    assert len(budgets) == len(set(budgets)) <= 3 and not c.in_band


def test_options_reach_the_builds(monkeypatch):
    fake = FakeMeasure(lambda f: 0.02)
    monkeypatch.setattr(caprule, "_measure", fake)
    opts = {"sarp": {"S": 32}, "segment-radix-capped": {"S": 32, "cap_nodes": 7}}
    c = choose_cap(**dict(TINY, engine_options={"map_size": "1GiB"}), strategy_options=opts,
                   cache_bytes=1 << 20)
    (sarp,) = [x for x in fake.calls if x[0] == "sarp"]
    assert sarp[1] == {"S": 32} and sarp[2]["cache_bytes"] == 1 << 20
    for _s, o, common in fake.capped_calls:
        assert o["S"] == 32 and "cap_nodes" not in o and 0 < o["cap_fraction"] <= 1
        assert common["engine_options"] == {"map_size": "1GiB"}
        assert common["entries"] == 20_000 and common["recoveries"] == 2
    assert c.strategy_options == opts


def test_progress_is_one_line_per_step_unless_quiet(monkeypatch, capsys):
    monkeypatch.setattr(caprule, "_measure", FakeMeasure(lambda f: 0.001))
    c = choose_cap(**TINY, max_steps=3, quiet=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 + len(c.steps) == 4
    assert all(ln.startswith("cap rule: ") for ln in err)
    assert sum("step " in ln for ln in err) == 3
    choose_cap(**TINY, max_steps=3)
    assert capsys.readouterr().err == ""


def test_line_and_metadata():
    c = CapChoice(fraction=0.0123, nodes=1234, total_nodes=100_321, sarp_s=[0.0228] * 5,
                  capped_s=[0.0301] * 5, sarp_median=0.0228, capped_median=0.0301,
                  ratio=0.0301 / 0.0228, in_band=True, entries=10 ** 7, workload="codeact",
                  engine="rocksdb", steps=[(0.01, 0.0301, 1.32)])
    assert c.line() == ("cap rule: fraction 0.0123 (1,234 of 100,321 nodes), sarp 0.0228 s, "
                        "segment-radix-capped 0.0301 s (medians of 5), recovery ratio 1.32x")
    md = c.metadata()
    assert md["cap_rule"] == c.line() and md["cap_recovery_ratio"] == pytest.approx(1.3202, 1e-3)
    assert md["cap_in_band"] == 1 and md["cap_nodes"] == 1234 and md["cap_recoveries"] == 5
    run = pyperf.Run([1.0], metadata=dict(md, name="x"), collect_metadata=False)
    assert run.get_metadata()["cap_fraction"] == 0.0123


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, option", [
    ({"entries": 20_000, "allow_small": False}, "--cap-entries"),
    ({"entries": 0}, "--cap-entries"),
    ({"recoveries": 2, "entries": 10 ** 7, "allow_small": False}, "--cap-recoveries"),
    ({"recoveries": 0}, "--cap-recoveries"),
    ({"band": (2.0, 1.0)}, "--cap-band"),
    ({"band": (0, 1.0)}, "--cap-band"),
    ({"band": "wide"}, "--cap-band"),
    ({"max_steps": 0}, "--cap-steps"),
    ({"engine": "memory"}, "--engine"),
    ({"engine": None}, "--engine"),
])
def test_bad_input_is_one_line_before_any_build(monkeypatch, kw, option):
    fake = FakeMeasure(lambda f: 0.02)
    monkeypatch.setattr(caprule, "_measure", fake)
    with pytest.raises(ConfigError) as e:
        choose_cap(**dict(TINY, **kw))
    msg = str(e.value)
    assert option in msg and "\n" not in msg
    assert fake.calls == []


def test_default_refuses_small_builds():
    with pytest.raises(ConfigError, match="--cap-entries.*10,000,000"):
        choose_cap(workload="codeact", workload_options={}, engine="lmdb", entries=20_000)


# ----------------------------------------------------------------------------- cache
def _choice(**kw):
    base = dict(fraction=0.01, nodes=10, total_nodes=1000, sarp_s=[0.01, 0.011],
                capped_s=[0.012, 0.013], sarp_median=0.0105, capped_median=0.0125,
                ratio=0.0125 / 0.0105, in_band=True, entries=20_000, workload="codeact",
                engine="lmdb", steps=[(0.01, 0.0125, 0.0125 / 0.0105)],
                workload_options={"sessions": 20})
    base.update(kw)
    return CapChoice(**base)


def test_cache_round_trip_and_key(tmp_path):
    p = tmp_path / "caps.json"
    key = dict(workload="codeact", workload_options={"sessions": 20}, engine="lmdb",
               entries=20_000)
    assert load_choice(p, **key) is None                     # no file yet
    a = _choice()
    save_choice(p, a)
    assert load_choice(p, **key) == a
    b = _choice(engine="rocksdb", fraction=0.5)
    save_choice(p, b)                                        # a second key, a kept
    assert load_choice(p, **key) == a
    assert load_choice(p, **dict(key, engine="rocksdb")) == b
    for other in ({"entries": 30_000}, {"workload_options": {"sessions": 21}},
                  {"workload": "eabf"}, {"band": (0.5, 2.0)},
                  {"strategy_options": {"segment-radix-capped": {"S": 32}}}):
        assert load_choice(p, **dict(key, **other)) is None, other
    c = _choice(fraction=0.02)
    save_choice(p, c)                                        # same key: replaced
    assert load_choice(p, **key).fraction == 0.02
    assert len(json.loads(p.read_text())["choices"]) == 2


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"version": 99, "choices": {}}'])
def test_unreadable_cache_is_one_line_and_never_overwritten(tmp_path, content):
    p = tmp_path / "caps.json"
    p.write_text(content)
    key = dict(workload="codeact", workload_options={}, engine="lmdb", entries=20_000)
    with pytest.raises(ConfigError) as e:
        load_choice(p, **key)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError):
        save_choice(p, _choice())
    assert p.read_text() == content


# ----------------------------------------------------------------------------- real, tiny
def test_choose_cap_on_a_tiny_real_build(tmp_path):
    """Builds and fresh-process recoveries for real (20k entries, 2 each)."""
    work = tmp_path / "work"
    c = choose_cap(**TINY, max_steps=2, work_dir=str(work))
    assert len(c.sarp_s) == 2 and len(c.capped_s) == 2
    assert all(t > 0 for t in c.sarp_s + c.capped_s)
    assert 1 <= len(c.steps) <= 2 and 0 < c.fraction <= 1
    assert 1 <= c.nodes <= c.total_nodes and c.total_nodes > 100
    assert c.nodes == max(1, math.ceil(c.fraction * c.total_nodes))
    assert c.ratio == pytest.approx(c.capped_median / c.sarp_median)
    assert re.fullmatch(r"cap rule: fraction \S+ \([\d,]+ of [\d,]+ nodes\), sarp \d\.\d{4} s, "
                        r"segment-radix-capped \d\.\d{4} s \(medians of 2\), recovery ratio "
                        r"\d+\.\d\dx( \(band .*\))?", c.line()), c.line()
    assert list(work.iterdir()) == []                        # scratch builds removed
