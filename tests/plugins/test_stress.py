"""Concurrency stress of every strategy (prefixbench.harness.stress), and of the checker.

Short by default (4 threads, a few hundred operations each, fixed seeds); the
long run is ``python -m prefixbench.harness.stress --ops 1000000``.  The
checker is itself tested on strategies broken on purpose: each kind of
violation it claims to catch, it catches.
"""
import numpy as np
import pytest

from prefixbench.harness import stress
from prefixbench.registry import get_registry

RUNS = stress.stress_runs()


@pytest.mark.parametrize("label,strategy,options", RUNS, ids=[r[0] for r in RUNS])
def test_stress(label, strategy, options, tmp_path):
    r = stress.run_stress(strategy, options, threads=4, ops_per_thread=250, seed=1,
                          work_dir=str(tmp_path), label=label, time_box_s=300)
    assert r.violations == [], r.line() + "\n" + "\n".join(r.violations)
    assert r.ops == 1000 and r.matches > 0 and r.inserts > 0
    cls = get_registry().get("strategy", strategy).factory
    assert (r.removes > 0) == bool(getattr(cls, "supports_remove", False))
    if strategy == "sarp":
        assert r.posting_checks > 0 and r.backfill_jobs > 0   # back-fill ran under the load


def test_sarp_on_lmdb(tmp_path):
    r = stress.run_stress("sarp", dict(stress.SARP_STRESS, max_retrieval=0), threads=3,
                          ops_per_thread=200, seed=2, engine="lmdb", work_dir=str(tmp_path),
                          time_box_s=300)
    assert r.violations == [], r.violations


# ------------------------------------------------------------------ the checker catches
def _broken(monkeypatch, how):
    """radix with one defect, registered as strategy 'radix' for one run."""
    cls = get_registry().get("strategy", "radix").factory
    orig_match, orig_insert = cls.match, cls.insert
    calls = [0]

    def match(self, ids):
        m = orig_match(self, ids)
        if how == "longer" and m.n_blocks < len(ids):
            metas = np.concatenate([np.asarray(m.metas),
                                    stress.metas_of(ids[m.n_blocks:m.n_blocks + 1], 16)])
            return type(m)(m.n_blocks + 1, metas)
        if how == "metas" and m.n_blocks:
            metas = np.array(m.metas, copy=True)
            metas[0, 0] ^= 1
            return type(m)(m.n_blocks, metas)
        return m

    def insert(self, ids, metas, worker=0):
        calls[0] += 1
        if how == "drop" and calls[0] % 7 == 0:
            return None
        return orig_insert(self, ids, metas, worker)
    monkeypatch.setattr(cls, "match", match)
    monkeypatch.setattr(cls, "insert", insert)


@pytest.mark.parametrize("how,needle", [("longer", "never inserted"),
                                        ("metas", "wrong metadata"),
                                        ("drop", "the state says")])
def test_checker_catches_a_broken_strategy(monkeypatch, how, needle):
    _broken(monkeypatch, how)
    r = stress.run_stress("radix", {}, threads=3, ops_per_thread=150, seed=3, time_box_s=120)
    assert any(needle in v for v in r.violations), r.violations


def test_checker_catches_a_torn_posting_list(monkeypatch):
    """The reader sees a posting list with one filter missing: reported, by key."""
    cls = get_registry().get("strategy", "sarp").factory
    init = cls.__init__

    class Torn:
        def __init__(self, d):
            self._d = d

        def __getattr__(self, name):
            return getattr(self._d, name)

        def postings(self, key):
            f, s = self._d.postings(key)
            return (f[1:], s) if len(f) > 1 else (f, s)

    def patched(self, *a, **kw):
        init(self, *a, **kw)
        self.dir = Torn(self.dir)
    monkeypatch.setattr(cls, "__init__", patched)
    r = stress.run_stress("sarp", dict(stress.SARP_STRESS), threads=2, ops_per_thread=150,
                          seed=4, time_box_s=120)
    assert any("filters" in v and "posting list" in v for v in r.violations), r.violations


def test_final_state_is_checked_against_the_serial_replay(monkeypatch):
    """An index that forgets a removal is longer than the oracle (radix) at the end."""
    cls = get_registry().get("strategy", "dram-blockhash").factory
    monkeypatch.setattr(cls, "remove", lambda self, ids, worker=None: 0)
    r = stress.run_stress("dram-blockhash", {}, threads=2, ops_per_thread=200, seed=5,
                          time_box_s=120)
    assert any(v.startswith("final: ") and "longer than the oracle" in v
               for v in r.violations), r.violations
