"""The token-jsonl workload: token-id request logs, any block-hash scheme."""
import json

import numpy as np
import pytest

from prefixbench.blockids import chain_tokens, namespace_seed
from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.registry import get_registry
from prefixbench.workloads.hashschemes import make_hash_scheme


def make(**options):
    return get_registry().get("workload", "token-jsonl").factory(**options)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


RNG = np.random.default_rng(7)
A, O, B = (RNG.integers(0, 150000, n).tolist() for n in (40, 10, 25))


def test_requests_match_prompt_insert_prompt_plus_output_any_session_cut(tmp_path):
    p = write(tmp_path / "t.jsonl", [
        {"session_id": "x", "prompt_token_ids": A, "output_token_ids": O},
        {"session_id": "x", "prompt_token_ids": A + O + B},
        {"prompt_token_ids": A},
    ])
    w = make(path=p)
    reqs = list(w.requests())
    h0 = namespace_seed("")
    full = chain_tokens(np.array(A + O + B, dtype=np.uint32), 16, h0)
    assert np.array_equal(reqs[1].insert_ids, full) and reqs[1].prompt_tokens == 75
    assert np.array_equal(reqs[0].match_ids, full[:2]) and len(reqs[0].insert_ids) == 3
    assert (reqs[0].session, reqs[1].session, reqs[2].session) == (0, 0, 1)
    assert reqs[1].turn == 1 and np.array_equal(reqs[2].match_ids, full[:2])
    assert len(w) == 3 and w.metadata()["block_hash"] == "pbh64"


@pytest.mark.parametrize("scheme", ["vllm-sha256-cbor", "sglang-sha256", "dynamo-xxh3"])
def test_engine_schemes_give_the_engines_ids(tmp_path, scheme):
    p = write(tmp_path / "t.jsonl", [{"session_id": 1, "prompt_token_ids": A, "output_token_ids": O},
                                     {"session_id": 1, "prompt_token_ids": A + O + B}])
    reqs = list(make(path=p, block_hash=scheme).requests())
    ids, _ = make_hash_scheme(scheme).chain(np.array(A + O + B), 16)
    assert np.array_equal(reqs[1].insert_ids, ids)


def test_timestamps_order_the_replay(tmp_path):
    p = write(tmp_path / "t.jsonl", [{"prompt_token_ids": A, "timestamp": 2.0},
                                     {"prompt_token_ids": B, "timestamp": 1.0}])
    w = make(path=p)
    assert [r.prompt_tokens for r in w.requests()] == [25, 40]


@pytest.mark.parametrize("line, msg", [
    ('{"output_token_ids": [1]}', r":1: missing field 'prompt_token_ids'"),
    ('{"prompt_token_ids": [1, -2]}', r":1: prompt_token_ids\[1\] = -2 is outside the u32 range"),
    ('{"prompt_token_ids": [4294967296]}', r"prompt_token_ids\[0\] = 4294967296 is outside"),
    ('{"prompt_token_ids": [1.5]}', r"prompt_token_ids\[0\] is 1.5, not an integer"),
    ('{"prompt_token_ids": [1], "timestamp": "x"}', "'timestamp' must be a number"),
    ('{"prompt_token_ids": [1]', ":1: invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_lines_are_one_line_with_the_line_number(tmp_path, line, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(TraceFormatError, match=msg):
        make(path=str(p))


def test_options(tmp_path):
    p = write(tmp_path / "t.jsonl", [{"prompt_token_ids": A}] * 5)
    assert len(make(path=p, limit="2")) == 2
    with pytest.raises(ConfigError, match="needs path="):
        make()
    with pytest.raises(ConfigError, match="option x: not an option of workload token-jsonl"):
        make(path=p, x=1)
    with pytest.raises(ConfigError, match="unknown scheme"):
        make(path=p, block_hash="crc")
    with pytest.raises(ConfigError, match="option block_size: must be in"):
        make(path=p, block_size=0)
