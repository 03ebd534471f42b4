"""KV events live: a publisher in its own process on 127.0.0.1 (both encodings),
the recorder's gap detection and replay-endpoint recovery, replay into an index,
and the hash command."""
import json
import socket
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

from prefixbench.harness.events import (EndpointTimeout, record, replay_events,  # noqa: E402
                                        synthetic_batches)
from prefixbench.workloads.kvevents import DecodeStats, iter_frames, kv_events  # noqa: E402

VECTORS = "tests/workloads/vectors/block_hash_vectors.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_publisher(port, *args, replay_port=None):
    cmd = [sys.executable, "-m", "prefixbench", "-q", "events", "publish",
           f"tcp://127.0.0.1:{port}", "--delay", "1.0", *map(str, args)]
    if replay_port:
        cmd += ["--replay-endpoint", f"tcp://127.0.0.1:{replay_port}", "--linger", "3"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def record_from(tmp_path, pub, port, n, replay_port=None, name="cap.pbkv"):
    out = str(tmp_path / name)
    try:
        res = record(f"tcp://127.0.0.1:{port}", out, max_frames=n, duration=60, timeout=30,
                     replay_endpoint=f"tcp://127.0.0.1:{replay_port}" if replay_port else None)
    finally:
        pub.wait(timeout=60)
    assert pub.returncode == 0, pub.stderr.read().decode()
    return out, res


def build(name="dram-blockhash"):
    from prefixbench.harness.build import build as b
    return b(name, None)


@pytest.mark.parametrize("form", ["map", "array"])
def test_capture_and_replay_round_trip_both_forms(tmp_path, form):
    port = free_port()
    pub = start_publisher(port, "--batches", 400, "--events-per-batch", 3, "--form", form,
                          "--workers", 2, "--rate", 4000)
    out, res = record_from(tmp_path, pub, port, 400)
    assert (res.frames, res.gaps, res.missing, res.duplicates) == (400, 0, 0, 0)
    assert [f.seq for f in iter_frames(out)] == list(range(400))
    wl = kv_events(path=out, block_hash="vllm-sha256-cbor")
    from prefixbench.harness.replay import make_oracle
    built, oracle = build(), make_oracle(16)
    try:
        r = replay_events(built.strategy, wl, oracle=oracle)
        assert r.events == 1200 and r.workers == 2 and r.unknown_events == 0
        assert r.hash_checked == r.blocks_stored > 0 and r.hash_mismatches == 0
        assert r.consistency_misses == 0 and r.unknown_parents == 0
        assert r.hit_blocks == r.oracle_hit_blocks == r.ancestor_blocks
        assert r.live_blocks == r.blocks_stored - r.blocks_removed
        # what the index still serves is exactly what is live
        mem_removed = [op for op in wl.operations() if type(op).__name__ == "RemoveOp"]
        gone = mem_removed[-1].block_hashes
        assert built.strategy.match(gone[::-1][:1]).n_blocks == 0
    finally:
        built.close()


def test_gaps_are_detected_and_counted_without_a_replay_endpoint(tmp_path):
    port = free_port()
    pub = start_publisher(port, "--batches", 60, "--skip", "10,11,12,40", "--rate", 2000)
    out, res = record_from(tmp_path, pub, port, 56)
    assert res.gaps == 2 and res.missing == 4 and res.replayed_frames == 0
    assert res.gap_list == [[10, 13, 3], [40, 41, 1]]
    stats = DecodeStats()
    list(iter_frames(out, stats))
    assert stats.seq_gaps == 2 and stats.seq_missing == 4


def test_replay_endpoint_recovers_the_missed_batches_in_order(tmp_path):
    port, rport = free_port(), free_port()
    pub = start_publisher(port, "--batches", 80, "--skip", "5,6,50", "--rate", 2000,
                          replay_port=rport)
    out, res = record_from(tmp_path, pub, port, 80, replay_port=rport)
    assert res.gaps == 2 and res.missing == 0 and res.replayed_frames == 3
    frames = list(iter_frames(out))
    assert [f.seq for f in frames] == list(range(80))
    assert [f.seq for f in frames if f.source == 1] == [5, 6, 50]
    r = replay_events(build().strategy, kv_events(path=out, block_hash="vllm-sha256-cbor"))
    assert r.seq_gaps == 0 and r.hash_mismatches == 0 and r.consistency_misses == 0


def test_a_silent_replay_endpoint_times_out_naming_it(tmp_path):
    port, dead = free_port(), free_port()
    pub = start_publisher(port, "--batches", 30, "--skip", "10", "--rate", 1000)
    try:
        with pytest.raises(EndpointTimeout, match=f"replay endpoint tcp://127.0.0.1:{dead}: "):
            record(f"tcp://127.0.0.1:{port}", str(tmp_path / "x.pbkv"), timeout=3.0,
                   replay_endpoint=f"tcp://127.0.0.1:{dead}", duration=30)
    finally:
        pub.wait(timeout=60)


def test_unreachable_endpoints_time_out_naming_them(tmp_path, run_cli):
    port = free_port()
    with pytest.raises(EndpointTimeout, match=f"endpoint tcp://127.0.0.1:{port}: no frames "
                       "within 0.3 s"):
        record(f"tcp://127.0.0.1:{port}", str(tmp_path / "x.pbkv"), timeout=0.3)
    code, _, err = run_cli("-q", "events", "record", "127.0.0.1:1", "-o", tmp_path / "y")
    assert code != 0 and "is not a ZMQ endpoint" in err and len(err.strip().splitlines()) == 1


def test_replay_cli_with_removes_lookups_and_tokens_out_of_range(tmp_path, run_cli):
    path = tmp_path / "s.msgpack"
    path.write_bytes(b"".join(synthetic_batches(300, events_per_batch=2, scheme="sglang-sha256",
                                                form="array")))
    # a lookup trace: the first stored conversation's tokens, as a router would see them
    first = msgpack.unpackb(synthetic_batches(1, scheme="sglang-sha256", form="array")[0])
    toks = first[1][0][3]                       # [ts, [["BlockStored", ids, parent, tokens, ...
    lookups = tmp_path / "lookups.jsonl"
    lookups.write_text(json.dumps({"prompt_token_ids": toks + [1, 2, 3], "timestamp": 0.0}) + "\n")
    code, out, err = run_cli("-q", "events", "replay", path, "-W", "block_hash=sglang-sha256",
                             "-W", f"lookups={lookups}", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "0 mismatches" in out and "lookup trace" in out
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["trace_requests"] == 1 and d["trace_hit_tokens"] == len(toks)
    assert d["removes"] > 0 and d["consistency_misses"] == 0
    code, out, err = run_cli("-q", "events", "bench", path, "--repeat", "1")
    assert code == 0 and "events/s" in out and "us decoding" in out
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(msgpack.packb({"ts": 0, "events": [
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
         "token_ids": [1] * 15 + [1 << 32], "block_size": 16}]}))
    code, _, err = run_cli("-q", "events", "replay", bad, "-W", "block_hash=sglang-sha256")
    assert code != 0 and "frame 1: token_ids[15] = 4294967296 is outside the u32 range" in err


def test_hash_command_prints_the_published_ids(tmp_path, run_cli):
    doc = json.load(open(VECTORS))
    case = next(c for c in doc["cases"] if c["scheme"] == "sglang-sha256"
                and c["block_size"] == 16 and c["tokens_name"] == "random48")
    f = tmp_path / "t.txt"
    f.write_text(" ".join(map(str, case["tokens"])))
    code, out, err = run_cli("hash", "--scheme", "sglang-sha256", "--tokens", f)
    assert code == 0, err
    rows = [ln.split() for ln in out.splitlines() if not ln.startswith("#")]
    assert [int(r[1]) for r in rows] == case["wire"]
    assert [int(r[2], 16) for r in rows] == case["ids"]
    f.write_text("[1, 2, -3]")
    code, _, err = run_cli("hash", "--tokens", f)
    assert code != 0 and "token 2 = -3 is outside the u32 range" in err
    code, _, err = run_cli("hash", "--scheme", "md5", "--tokens", f)
    assert code != 0 and "unknown scheme 'md5'" in err
