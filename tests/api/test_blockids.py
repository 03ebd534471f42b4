"""pbh64 chained block IDs: compiled twin equals the reference; ids are stable."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench import blockids as b
from prefixbench import twins

ref = twins.reference("prefixbench._blockids")     # the pure-Python reference, in either mode

# Golden vectors: written down once from the reference implementation; any
# change to pbh64 (constants, word packing, finaliser) breaks them on purpose.
GOLDEN_SEEDS = {"prefixbench": 0x1B24222405C7565B, "": 0x2F1AECF4460FE51C}
GOLDEN_TOKENS = [0x19C92DF9440DC0D5, 0x79D5BA160B323E3F, 0xB400D837143F3A86]
GOLDEN_ODD = [0xA4786CE7A59AD52E]
GOLDEN_IDS = [0xE6DC5F408FFF8389, 0x9CB0EE3B2BD22F27, 0xB3EC73D083027B11]


@pytest.mark.compiled
def test_compiled_module_is_built():
    assert b.COMPILED, "prefixbench._blockids did not import: the build is broken"


def test_golden_vectors_reference_and_compiled():
    for ns, v in GOLDEN_SEEDS.items():
        assert b.namespace_seed(ns) == v
    h0 = b.namespace_seed("prefixbench")
    toks = np.arange(48, dtype=np.uint32)
    assert ref.chain_tokens(toks, 16, h0).tolist() == GOLDEN_TOKENS
    assert b.chain_tokens(toks, 16, h0).tolist() == GOLDEN_TOKENS
    odd = np.array([1, 2, 3, 4, 5], dtype=np.uint32)
    assert ref.chain_tokens(odd, 5, 0).tolist() == GOLDEN_ODD
    assert b.chain_tokens(odd, 5, 0).tolist() == GOLDEN_ODD
    ids = np.array([0, 1, 2**64 - 1], dtype=np.uint64)
    h0 = b.namespace_seed("mooncake")
    assert ref.chain_ids(ids, h0).tolist() == GOLDEN_IDS
    assert b.chain_ids(ids, h0).tolist() == GOLDEN_IDS


@pytest.mark.compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=80), st.integers(1, 20),
       st.integers(0, 2**64 - 1))
def test_compiled_equals_reference_on_tokens(tokens, block_size, h0):
    toks = np.array(tokens, dtype=np.uint32)
    assert np.array_equal(b.chain_tokens(toks, block_size, h0),
                          ref.chain_tokens(toks, block_size, h0))


@pytest.mark.compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.integers(0, 2**64 - 1))
def test_compiled_equals_reference_on_hash_ids(ids, h0):
    arr = np.array(ids, dtype=np.uint64)
    assert np.array_equal(b.chain_ids(arr, h0), ref.chain_ids(arr, h0))


@pytest.mark.compiled
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.lists(st.integers(0, 2**64 - 1), max_size=20),
       st.integers(0, 2**32))
def test_compiled_equals_reference_on_words(prev, words, n):
    arr = np.array(words, dtype=np.uint64)
    got = twins.load("prefixbench._blockids").pbh64_words(prev, arr, n)
    assert got == ref.pbh64_words(prev, words, n) == b.pbh64(prev, words, n)


def test_only_full_blocks_and_prefix_property():
    toks = np.arange(100, dtype=np.uint32)
    full = b.chain_tokens(toks, 16, 7)
    assert len(full) == 6
    # a prefix's ids are the prefix of the longer sequence's ids
    assert np.array_equal(b.chain_tokens(toks[:40], 16, 7), full[:2])
    # a change in block 2 changes every id from block 2 on, none before
    t2 = toks.copy()
    t2[33] += 1
    other = b.chain_tokens(t2, 16, 7)
    assert np.array_equal(other[:2], full[:2])
    assert not np.any(other[2:] == full[2:])


def test_namespaces_separate_id_spaces():
    toks = np.arange(64, dtype=np.uint32)
    a = b.chain_tokens(toks, 16, b.namespace_seed("a"))
    c = b.chain_tokens(toks, 16, b.namespace_seed("b"))
    assert not set(a.tolist()) & set(c.tolist())


def test_ids_identical_in_a_fresh_process():
    code = ("import numpy as np; from prefixbench import blockids as b;"
            "print(b.chain_tokens(np.arange(64, dtype=np.uint32), 16,"
            " b.namespace_seed('x')).tolist())")
    env_hashseed = {"PYTHONHASHSEED": "12345"}
    import os
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env_hashseed}, check=True).stdout
    here = b.chain_tokens(np.arange(64, dtype=np.uint32), 16, b.namespace_seed("x")).tolist()
    assert eval(out) == here


def test_bad_block_size():
    with pytest.raises(ValueError):
        b.chain_tokens(np.arange(4, dtype=np.uint32), 0, 0)
    with pytest.raises(ValueError):
        ref.chain_tokens(np.arange(4, dtype=np.uint32), 0, 0)


def test_a_namespace_that_is_not_utf8_still_hashes():
    """Command-line bytes that are not UTF-8 arrive as lone surrogates."""
    odd = b"\xff-model".decode("utf-8", "surrogateescape")
    assert b.namespace_seed(odd) == b.namespace_seed(odd)
    assert b.namespace_seed(odd) != b.namespace_seed("?-model")
    assert b.namespace_seed("\ud800") != b.namespace_seed("\ud801")
