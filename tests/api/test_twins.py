"""Every compiled hot path and its pure-Python reference (``prefixbench.twins.TWINS``)
offer the same public names, and the loader picks between them one way.

The behavioural equality of each pair (golden vectors, random inputs against
the reference) is tested beside the feature it serves: test_blockids.py,
test_strategies.py (radix, block-hash tables), test_sarp.py (filters,
match potential, routing directory), test_segments.py (codec, verification),
test_segment_baselines.py (segment-hash records), and the placement tests.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import subprocess
import sys

import pytest
from prefixbench import twins

BUILT = all(importlib.util.find_spec(c) is not None for c, _ in twins.TWINS)
needs_build = pytest.mark.skipif(not BUILT, reason="compiled modules not built "
                                 "(pure-Python install)")


def _own_public(module) -> set:
    """Public functions and classes defined in ``module`` itself (not imported into it)."""
    return {n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isclass(v) or callable(v))
            and not inspect.ismodule(v) and getattr(v, "__module__", None) == module.__name__}


def test_every_twin_is_named_once_with_its_ref_beside_it():
    compiled = [c for c, _ in twins.TWINS]
    assert len(set(compiled)) == len(compiled)
    for comp, ref in twins.TWINS:
        assert ref == comp + "_ref", (comp, ref)


@pytest.mark.parametrize("ref_name", [r for _, r in twins.TWINS])
def test_reference_declares_what_it_defines(ref_name):
    ref = importlib.import_module(ref_name)
    assert sorted(ref.__all__) == sorted(set(ref.__all__)), ref_name
    assert all(hasattr(ref, n) for n in ref.__all__), ref_name
    assert _own_public(ref) <= set(ref.__all__), ref_name


@needs_build
@pytest.mark.parametrize("comp_name, ref_name", twins.TWINS)
def test_twins_export_the_same_public_names(comp_name, ref_name):
    comp = importlib.import_module(comp_name)
    ref = importlib.import_module(ref_name)
    assert sorted(comp.__all__) == sorted(ref.__all__)
    assert _own_public(comp) <= set(comp.__all__), comp_name
    for name in comp.__all__:
        c, r = getattr(comp, name), getattr(ref, name)
        assert inspect.isclass(c) == inspect.isclass(r), name
        assert callable(c) == callable(r), name
        if not callable(c):             # constants: the same value
            assert c == r, name


@pytest.mark.parametrize("comp_name, ref_name", twins.TWINS)
def test_load_picks_the_compiled_module_or_the_reference(comp_name, ref_name):
    impl = twins.load(comp_name)
    assert impl.__name__ == (ref_name if twins.PURE else comp_name)
    assert twins.is_compiled(impl) == (not twins.PURE)
    assert twins.reference(comp_name).__name__ == ref_name
    assert not twins.is_compiled(twins.reference(comp_name))


def test_a_name_outside_the_table_is_refused():
    with pytest.raises(ValueError, match="no entry in prefixbench.twins.TWINS"):
        twins.load("prefixbench.plugins._nothing")
    with pytest.raises(ValueError, match="no entry in prefixbench.twins.TWINS"):
        twins.reference("prefixbench.plugins._nothing")


def test_the_strategy_modules_run_what_the_loader_picks():
    from prefixbench import blockids
    from prefixbench.plugins import blockhash, radix, sarp, segment_hash, segments
    for handle, comp_name in ((radix._radix, "prefixbench.plugins._radix"),
                              (blockhash._blockhash, "prefixbench.plugins._blockhash"),
                              (sarp._sarp, "prefixbench.plugins._sarp"),
                              (segments._segments, "prefixbench.plugins._segments"),
                              (segment_hash._segment_hash, "prefixbench.plugins._segment_hash"),
                              (blockids._impl, "prefixbench._blockids")):
        assert handle is twins.load(comp_name)
    assert blockids.COMPILED == (not twins.PURE)
    assert radix.RadixTree is radix._radix.RadixTree
    assert blockids.chain_tokens is blockids._impl.chain_tokens


def test_the_older_reference_names_still_name_the_references():
    from prefixbench import blockids
    from prefixbench.plugins import blockhash, radix, sarp, segment_hash, segments
    ref = twins.reference
    assert blockids.chain_tokens_py is ref("prefixbench._blockids").chain_tokens
    assert blockids.chain_ids_py is ref("prefixbench._blockids").chain_ids
    assert radix.RadixTreePy is ref("prefixbench.plugins._radix").RadixTree
    assert blockhash.BlockHashTablePy is ref("prefixbench.plugins._blockhash").BlockHashTable
    s = ref("prefixbench.plugins._sarp")
    assert (sarp.RoutingDirectoryPy, sarp.filters_py, sarp.max_potential_py) == \
        (s.RoutingDirectory, s.filters, s.max_potential)
    assert segments.verify_raws_py is ref("prefixbench.plugins._segments").verify_raws
    assert segment_hash.encode_records_py is \
        ref("prefixbench.plugins._segment_hash").encode_records


_UNBUILT = """
import sys
from importlib.abc import MetaPathFinder

class Blocker(MetaPathFinder):          # what a build without a C compiler looks like
    def find_spec(self, name, path=None, target=None):
        if name == "prefixbench.plugins._radix":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
from prefixbench import twins
from prefixbench.errors import ConfigError
stub = twins.load("prefixbench.plugins._radix", defer=True)   # importing still works
assert not twins.is_compiled(stub)
try:
    stub.RadixTree(16)
except ConfigError as e:
    print(e)
try:
    twins.load("prefixbench.plugins._radix")
except ConfigError as e:
    print(e)
"""


@needs_build
def test_a_missing_build_is_one_error_now_or_at_first_use(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != twins.ENV_VAR}
    p = subprocess.run([sys.executable, "-c", _UNBUILT], cwd=tmp_path, env=env,
                       capture_output=True, text=True, check=False, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    want = ("compiled module prefixbench.plugins._radix is not built: reinstall with a C "
            "compiler, or set PREFIXBENCH_PURE=1 to use the pure-Python references")
    assert lines == [want, want]
