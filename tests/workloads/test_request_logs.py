"""Request logs: chat-jsonl lines carrying the model's answer (``response`` or
``choices[0].message``), and Alibaba's Qwen/Bailian trace shape."""
import json

import pytest

from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.registry import get_registry


def make(name, **options):
    return get_registry().get("workload", name).factory(**options)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "What is the capital of France? " * 4}
A1 = {"role": "assistant", "content": "Paris, which is also its largest city. " * 3}
U2 = {"role": "user", "content": "And of Italy, with a short history lesson? " * 3}
A2 = "Rome, founded, as the legend goes, in 753 BC by Romulus. " * 3


def test_a_log_without_the_next_turns_echo_still_counts_every_call(tmp_path):
    echoed = write(tmp_path / "echo.jsonl", [
        {"conversation_id": 1, "messages": [SYS, U1, A1]},
        {"conversation_id": 1, "messages": [SYS, U1, A1, U2, {"role": "assistant", "content": A2}]},
    ])
    logged = write(tmp_path / "log.jsonl", [
        {"conversation_id": 1, "messages": [SYS, U1], "response": A1["content"]},
        {"conversation_id": 1, "messages": [SYS, U1, A1, U2],
         "choices": [{"index": 0, "message": {"role": "assistant", "content": A2},
                      "finish_reason": "stop"}]},
    ])
    a = list(make("chat-jsonl", path=echoed).requests())
    b = list(make("chat-jsonl", path=logged).requests())
    assert len(a) == len(b) == 2
    for x, y in zip(a, b):
        assert (x.match_ids == y.match_ids).all() and (x.insert_ids == y.insert_ids).all()
    # before: the last call's answer was lost, so only the first call was a request
    prompts_only = write(tmp_path / "p.jsonl", [{"conversation_id": 1, "messages": [SYS, U1, A1, U2]}])
    assert len(list(make("chat-jsonl", path=prompts_only).requests())) == 1


def test_response_as_a_message_object_and_bad_answers(tmp_path):
    p = write(tmp_path / "r.jsonl", [{"messages": [U1], "response": {"content": A2}}])
    assert len(list(make("chat-jsonl", path=p).requests())) == 1
    for bad, msg in (({"messages": [U1], "response": 3}, "'response' must be a string"),
                     ({"messages": [U1], "choices": []}, "'choices' must be a list whose first"),
                     ({"messages": [U1], "choices": [{"message": {"role": "assistant"}}]},
                      r"choices\[0\].message: missing field 'content'")):
        p = write(tmp_path / "bad.jsonl", [bad])
        with pytest.raises(TraceFormatError, match=f"bad.jsonl:1: {msg}"):
            make("chat-jsonl", path=p)


def bailian_rows():
    """Shaped like Alibaba's qwen_traceA_blksz_16.jsonl: two conversations, turn 2 of
    the first continuing turn 1 (its hash_ids extend turn 1's), 16-token blocks, the
    last one partial."""
    return [
        {"chat_id": 101, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40,
         "output_length": 12, "type": "text", "turn": 1, "hash_ids": [11, 12, 13]},
        {"chat_id": 202, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 16,
         "output_length": 30, "type": "search", "turn": 1, "hash_ids": [11]},
        {"chat_id": 103, "parent_chat_id": 101, "timestamp": 9.25, "input_length": 70,
         "output_length": 20, "type": "text", "turn": 2, "hash_ids": [11, 12, 14, 15, 16]},
    ]


def test_bailian_trace_shape(tmp_path):
    p = write(tmp_path / "qwen_traceA_blksz_16.jsonl", bailian_rows())
    w = make("bailian", path=p)
    assert w.block_size == 16
    reqs = list(w.requests())
    assert [(r.session, r.turn) for r in reqs] == [(0, 0), (1, 0), (0, 1)]
    assert [r.prompt_tokens for r in reqs] == [40, 16, 70]     # input_length, not whole blocks
    assert (reqs[2].match_ids[:2] == reqs[0].match_ids[:2]).all()
    assert reqs[2].match_ids[2] != reqs[0].match_ids[2]
    assert (reqs[1].match_ids[0] == reqs[0].match_ids[0])       # shared first block
    with pytest.raises(ConfigError, match="workload bailian needs path="):
        make("bailian")


def test_bailian_hit_rate_counts_only_the_prompt(tmp_path):
    from prefixbench.harness.build import build
    from prefixbench.harness.replay import replay
    p = write(tmp_path / "t.jsonl", bailian_rows())
    built = build("dram-blockhash", None)
    try:
        res = replay(built.strategy, make("bailian", path=p), quiet=True)
    finally:
        built.close()
    # request 2 hits block 11 (16 tokens), request 3 hits 11, 12 (32 of 70 tokens)
    assert res.prompt_tokens == 126 and res.hit_tokens == 48
