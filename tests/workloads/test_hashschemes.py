"""Block-hash schemes match their golden vectors bit for bit (vectors/ holds the
script that computed them with the upstream packages, and its versions)."""
import hashlib
import json
import os

import numpy as np
import pytest

from prefixbench.errors import ConfigError
from prefixbench.workloads.hashschemes import (SCHEMES, SchemeChain, cbor_uint_array,
                                               make_hash_scheme)
from prefixbench.workloads.model import Session, SessionWorkload, Turn

VECTORS = os.path.join(os.path.dirname(__file__), "vectors", "block_hash_vectors.json")
DOC = json.load(open(VECTORS))
CASES = DOC["cases"]


def test_vectors_cover_every_upstream_scheme():
    assert {c["scheme"] for c in CASES} == set(SCHEMES) - {"pbh64"}
    prov = DOC["provenance"]
    assert prov["ai-dynamo-runtime"] and prov["cbor2"] and prov["xxhash"]
    assert "0.5.5" in prov["sglang get_hash_str"] and "v0.17.0" in prov["vllm"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['scheme']}-{c['tokens_name']}-"
                         f"bs{c['block_size']}-{c['options'].get('hash_seed', '')}"
                         f"{'-extra' if c.get('extra_keys') else ''}")
def test_golden_vector(case):
    scheme = make_hash_scheme(case["scheme"], **case["options"])
    ids, _ = scheme.chain(np.array(case["tokens"], dtype=np.uint32), case["block_size"],
                          extra_keys=case.get("extra_keys"))
    assert [int(x) for x in ids] == case["ids"]
    if "wire" in case:
        assert [scheme.wire(x) for x in ids] == case["wire"]
    if "local" in case:
        assert [int(x) for x in scheme.local_hashes(np.array(case["tokens"]),
                                                    case["block_size"])] == case["local"]


@pytest.mark.parametrize("name", [s for s in SCHEMES])
def test_chaining_in_pieces_equals_one_call(name):
    """A turn continues its parent's last block state: ids do not depend on the cut."""
    scheme = make_hash_scheme(name)
    toks = np.random.default_rng(3).integers(0, 1 << 32, size=96, dtype=np.uint64).astype(np.uint32)
    whole, _ = scheme.chain(toks, 16)
    a, state = scheme.chain(toks[:32], 16)
    b, _ = scheme.chain(toks[32:], 16, state)
    assert np.array_equal(np.concatenate((a, b)), whole)


def test_cbor_encoding_matches_cbor2():
    cbor2 = pytest.importorskip("cbor2")
    toks = np.array([0, 23, 24, 255, 256, 65535, 65536, 4294967295, 7], dtype=np.uint32)
    buf, off = cbor_uint_array(toks)
    assert buf.tobytes() == b"".join(cbor2.dumps(int(t), canonical=True) for t in toks)
    assert off[-1] == len(buf)


def test_vllm_none_hash_is_sha256_cbor_of_the_seed():
    cbor2 = pytest.importorskip("cbor2")
    s = make_hash_scheme("vllm-sha256-cbor", hash_seed="1234")
    assert s.none_hash == hashlib.sha256(cbor2.dumps("1234", canonical=True)).digest()


def test_session_workload_with_a_scheme_chains_turns_across_the_tail():
    rng = np.random.default_rng(1)
    inp, out, inp2 = (rng.integers(0, 5000, size=n).astype(np.uint32) for n in (20, 13, 30))
    sess = [Session([Turn(inp, out), Turn(inp2, np.empty(0, np.uint32))])]
    scheme = make_hash_scheme("vllm-sha256-cbor")
    w = SessionWorkload(sess, block_size=16, scheme=scheme)
    reqs = list(w.requests())
    whole, _ = scheme.chain(np.concatenate((inp, out, inp2)), 16)
    assert np.array_equal(reqs[1].match_ids, whole)
    assert w.metadata()["block_hash"] == "vllm-sha256-cbor"


def test_scheme_chain_root_and_unknown_names():
    with pytest.raises(ConfigError, match="unknown scheme 'nope'; available: pbh64"):
        make_hash_scheme("nope")
    with pytest.raises(ConfigError, match="option hash_seed: not an option of block_hash dynamo"):
        make_hash_scheme("dynamo-xxh3", hash_seed="1")
    chain = SchemeChain(make_hash_scheme("sglang-sha256"))
    ids = chain(np.arange(32, dtype=np.uint32), 16, chain.h0)
    more = chain(np.arange(16, dtype=np.uint32), 16, int(ids[-1]))
    whole, _ = chain.scheme.chain(np.concatenate((np.arange(32), np.arange(16))), 16)
    assert np.array_equal(np.concatenate((ids, more)), whole)


def test_tokens_outside_u32_are_one_line():
    with pytest.raises(ConfigError, match="token id 4294967296 is outside the u32 range"):
        make_hash_scheme("sglang-sha256").chain(np.array([1, 1 << 32], dtype=np.int64), 1)
