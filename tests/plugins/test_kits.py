"""The two conformance kits: the strategy kit on every built-in strategy, the README's
kit examples run verbatim, and a sloppy strategy failing the kit where it is wrong."""
import re
import subprocess
import sys

import pytest

from prefixbench.plugins.conformance import StrategyConformance
from prefixbench.registry import get_registry

from conftest import REPO

BUILTIN_STRATEGIES = sorted(i.name for i in get_registry().all()
                            if i.kind == "strategy" and i.package == "prefixbench")
#: small geometries, so short sequences cross segment windows and caps spill
SMALL = {
    "sarp": {"S": 8, "R": 2, "tau": 4, "backfill": "sync"},
    "segment-hash": {"S": 8},
    "segment-radix": {"S": 8},
    "segment-radix-capped": {"S": 8, "cap_nodes": 4},
    "dram-blockhash": {"initial_capacity": 4},
    "radix": {"initial_blocks": 4},
}


class TestBuiltinStrategies(StrategyConformance):
    max_examples = 25

    @pytest.fixture(params=BUILTIN_STRATEGIES)
    def strategy_name(self, request):
        return request.param

    @pytest.fixture
    def strategy_options(self, strategy_name):
        return SMALL.get(strategy_name, {})


def test_every_builtin_strategy_is_in_the_kit():
    assert {"radix", "dram-blockhash", "ssd-blockhash", "sarp", "segment-hash",
            "segment-radix", "segment-radix-capped"} <= set(BUILTIN_STRATEGIES)


# ----------------------------------------------------------------------------- README
MARKER = re.compile(r"<!-- kit-example: (\w+) -->\s*```python\n(.*?)```", re.S)


def readme_examples() -> dict[str, str]:
    with open(f"{REPO}/README.md", encoding="utf-8") as f:
        return dict(MARKER.findall(f.read()))


def _run_pytest(directory, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
                           str(directory)], capture_output=True, text=True, cwd=directory)


def test_readme_has_both_kit_examples():
    assert set(readme_examples()) == {"strategies", "engines"}


@pytest.mark.parametrize("kind", ["strategies", "engines"])
def test_readme_kit_example_runs(tmp_path, kind):
    """Copied out of README.md (found by its marker comment) and run by pytest in a
    fresh process, outside the repository, as a plugin author would."""
    (tmp_path / f"test_readme_{kind}.py").write_text(readme_examples()[kind])
    out = _run_pytest(tmp_path, "-q")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "error" not in out.stdout.lower(), out.stdout[-2000:]


# ----------------------------------------------------------------------------- not vacuous
SLOPPY = '''
import numpy as np
import prefixbench
import pytest
from hypothesis import Phase
from prefixbench.plugins.conformance import StrategyConformance


class Dict(prefixbench.IndexStrategy):
    """Exact dict index; the subclasses below each break one rule."""
    name = "sloppy"
    exact = True
    uses_insert_log = True
    options = {"fanout": prefixbench.Option(8, min=2, max=64)}

    def __init__(self, store=None, options=None, meta_size=16):
        super().__init__(store, options, meta_size)
        self.t = {}

    def match(self, ids):
        out = []
        for b in ids.tolist():
            if b not in self.t:
                break
            out.append(self.t[b])
        return prefixbench.Match(len(out), np.frombuffer(b"".join(out), np.uint8)
                                 .reshape(len(out), self.meta_size))

    def insert(self, ids, metas):
        for b, m in zip(ids.tolist(), metas):
            self.t.setdefault(b, m.tobytes())

    def _snapshot_state(self):
        keys = np.fromiter(self.t, np.uint64, len(self.t))
        return {}, {"keys": keys, "metas": np.frombuffer(b"".join(self.t.values()), np.uint8)
                    .reshape(len(keys), self.meta_size)}

    def _restore_state(self, meta, sections):
        self.t = dict(zip(sections["keys"].tolist(), (m.tobytes() for m in sections["metas"])))


class LastWriterWins(Dict):
    def insert(self, ids, metas):
        for b, m in zip(ids.tolist(), metas):
            self.t[b] = m.tobytes()


class OneTooMany(Dict):
    def match(self, ids):
        m = super().match(ids)
        if 0 < m.n_blocks < len(ids):
            return prefixbench.Match(m.n_blocks + 1, np.vstack([m.metas, m.metas[-1:]]))
        return m


class NoLog(Dict):
    uses_insert_log = False


class TestGood(StrategyConformance):
    max_examples = 30
    hypothesis_settings = {"phases": (Phase.explicit, Phase.generate)}   # no shrinking

    @pytest.fixture
    def strategy_factory(self):
        return Dict


class TestLastWriterWins(TestGood):
    @pytest.fixture
    def strategy_factory(self):
        return LastWriterWins


class TestOneTooMany(TestGood):
    @pytest.fixture
    def strategy_factory(self):
        return OneTooMany


class TestNoLog(TestGood):
    @pytest.fixture
    def strategy_factory(self):
        return NoLog
'''


def test_kit_fails_sloppy_strategies_where_they_are_wrong(tmp_path):
    (tmp_path / "test_sloppy.py").write_text(SLOPPY)
    out = _run_pytest(tmp_path, "-v")
    outcome = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "::" in parts[0] and parts[1] in ("PASSED", "FAILED", "SKIPPED"):
            _, cls, test = parts[0].split("::")
            outcome.setdefault(cls, {})[test] = parts[1]
    failed = {cls: {t for t, o in tests.items() if o == "FAILED"} for cls, tests in outcome.items()}
    assert failed.get("TestGood") == set(), out.stdout[-3000:]
    assert "test_answers_against_the_oracle" in failed["TestLastWriterWins"]
    assert "test_answers_against_the_oracle" in failed["TestOneTooMany"]
    assert failed["TestNoLog"] == {"test_inserts_after_the_snapshot_are_not_lost"}
    assert outcome["TestGood"]["test_bad_option_values_are_one_line"] == "PASSED"


SLOPPY_REMOVERS = '''
import numpy as np
import prefixbench
import pytest
from hypothesis import Phase
from prefixbench.plugins.conformance import RemovalTests, StrategyFixtures
from prefixbench.plugins.radix import RadixStrategy


class Forgetful(RadixStrategy):
    def remove(self, block_ids, worker=None):
        self._removal_args(block_ids, worker)
        return 0


class Unlogged(RadixStrategy):
    pass


def _remove_unlogged(self, block_ids, worker=None):
    ids, w = self._removal_args(block_ids, worker)
    return self._tree.remove(ids, w)


Unlogged.remove = _remove_unlogged       # past the contract's log wrapper


class StaleRevive(prefixbench.IndexStrategy):
    """Removes by marking; a later insert clears the mark but keeps the old metadata."""
    name = "stale-revive"
    supports_remove = True

    def __init__(self, store=None, options=None, meta_size=16):
        super().__init__(store, options, meta_size)
        self.t, self.gone = {}, set()

    def match(self, ids):
        out = []
        for b in ids.tolist():
            if b not in self.t or b in self.gone:
                break
            out.append(self.t[b])
        return prefixbench.Match(len(out), np.frombuffer(b"".join(out), np.uint8)
                                 .reshape(len(out), self.meta_size))

    def insert(self, ids, metas):
        for b, m in zip(ids.tolist(), metas):
            self.t.setdefault(b, m.tobytes())
            self.gone.discard(b)

    def remove(self, block_ids, worker=None):
        ids, _w = self._removal_args(block_ids, worker)
        n = 0
        for b in ids.tolist():
            if b in self.t and b not in self.gone:
                self.gone.add(b)
                n += 1
        return n

    def clear(self, worker=None):
        self.gone.update(self.t)


class TestRadix(StrategyFixtures, RemovalTests):
    removal_examples = 25
    hypothesis_settings = {"phases": (Phase.explicit, Phase.generate)}   # no shrinking
    strategy_name = "radix"


class TestForgetful(TestRadix):
    @pytest.fixture
    def strategy_factory(self):
        return Forgetful


class TestUnlogged(TestRadix):
    @pytest.fixture
    def strategy_factory(self):
        return Unlogged


class TestStaleRevive(TestRadix):
    @pytest.fixture
    def strategy_factory(self):
        return StaleRevive
'''


def test_removal_kit_fails_sloppy_removers_where_they_are_wrong(tmp_path):
    (tmp_path / "test_sloppy_removers.py").write_text(SLOPPY_REMOVERS)
    out = _run_pytest(tmp_path, "-v")
    outcome = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "::" in parts[0] and parts[1] in ("PASSED", "FAILED", "SKIPPED"):
            _, cls, test = parts[0].split("::")
            outcome.setdefault(cls, {})[test] = parts[1]
    failed = {cls: {t for t, o in tests.items() if o == "FAILED"} for cls, tests in outcome.items()}
    assert failed.get("TestRadix") == set(), out.stdout[-3000:]
    assert {"test_removed_block_comes_back_with_the_new_metadata",
            "test_removes_after_the_snapshot_are_never_served"} <= failed["TestForgetful"], \
        out.stdout[-3000:]
    assert failed["TestUnlogged"] == {"test_removes_after_the_snapshot_are_never_served"}, \
        out.stdout[-3000:]
    assert "test_removed_block_comes_back_with_the_new_metadata" in failed["TestStaleRevive"], \
        out.stdout[-3000:]


def test_kits_import_pytest_and_hypothesis_only_when_used():
    """The package and its plugins never load the kits; the strategy kit loads
    hypothesis only when a property test runs."""
    code = ("import sys, prefixbench\n"
            "prefixbench.get_registry().get('strategy', 'radix')\n"
            "assert 'pytest' not in sys.modules, 'pytest'\n"
            "assert not any(m.endswith('.conformance') for m in sys.modules), 'kit'\n"
            "import prefixbench.plugins.conformance, prefixbench.engines.conformance\n"
            "assert 'hypothesis' not in sys.modules, 'hypothesis'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
