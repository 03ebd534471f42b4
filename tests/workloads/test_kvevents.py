"""KV-event decoding: both EventBatch forms, capture files, bad input, parent memory."""
import numpy as np
import pytest

from prefixbench.errors import ConfigError, TraceFormatError
from prefixbench.workloads.kvevents import (MAGIC, CaptureWriter, ChainMemory, DecodeStats,
                                            iter_batches, kv_events)
from prefixbench.workloads.model import ClearOp, RemoveOp, StoreOp

msgpack = pytest.importorskip("msgpack")
TOKS = list(range(32))


def stored_map(hashes, parent, **extra):
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
          "token_ids": TOKS[:16 * len(hashes)], "block_size": 16, "lora_id": None,
          "medium": "GPU", "lora_name": None}
    ev.update(extra)
    return ev


def write_stream(path, batches):
    with open(path, "wb") as f:
        for b in batches:
            f.write(msgpack.packb(b, use_bin_type=True))
    return str(path)


def decode(path, strict=False):
    stats = DecodeStats()
    ops = [op for _, batch in iter_batches(str(path), stats, strict) for op in batch]
    return ops, stats


def test_tagged_map_and_positional_array_forms_decode_the_same(tmp_path):
    maps = [{"ts": 1.5, "events": [stored_map([11, 12], None),
                                   {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"},
                                   {"type": "AllBlocksCleared"}], "data_parallel_rank": 2}]
    arrays = [[1.5, [["BlockStored", [11, 12], None, TOKS, 16, None, "GPU"],
                     ["BlockRemoved", [12], "GPU"], ["AllBlocksCleared"]], 2]]
    a, sa = decode(write_stream(tmp_path / "m.msgpack", maps))
    b, sb = decode(write_stream(tmp_path / "a.msgpack", arrays))
    for x, y in zip(a, b):
        assert type(x) is type(y) and x.worker == y.worker == 2 and x.ts == y.ts == 1.5
        if isinstance(x, (StoreOp, RemoveOp)):
            assert np.array_equal(x.block_hashes, y.block_hashes)
    assert [type(o) for o in a] == [StoreOp, RemoveOp, ClearOp]
    assert a[0].token_ids == b[0].token_ids == TOKS and a[0].block_size == 16
    assert sa.events == sb.events == 3 and sa.blocks_stored == 2 and sa.blocks_removed == 1


def test_older_positional_events_without_trailing_fields_and_no_rank(tmp_path):
    ops, _ = decode(write_stream(tmp_path / "o.msgpack",
                                 [[0.0, [["BlockStored", [5], 4, TOKS[:16], 16, None]]]]))
    assert ops[0].worker == 0 and ops[0].parent == 4


def test_bytes_and_signed_hashes_become_the_same_64_bits(tmp_path):
    digest = bytes(range(32))
    batches = [{"ts": 0, "events": [stored_map([digest], None),
                                    stored_map([-1, -(1 << 63)], digest)]}]
    ops, _ = decode(write_stream(tmp_path / "b.msgpack", batches))
    assert int(ops[0].block_hashes[0]) == int.from_bytes(digest[-8:], "big")
    assert ops[0].raw_hashes == [digest]
    assert [int(x) for x in ops[1].block_hashes] == [(1 << 64) - 1, 1 << 63]
    assert ops[1].parent == int.from_bytes(digest[-8:], "big") and ops[1].raw_parent == digest


def test_unknown_event_types_are_counted_or_strict_errors(tmp_path):
    p = write_stream(tmp_path / "u.msgpack",
                     [{"ts": 0, "events": [{"type": "BlockStored2"}, stored_map([1], None)]}])
    ops, stats = decode(p)
    assert len(ops) == 1 and stats.unknown_types == {"BlockStored2": 1}
    with pytest.raises(TraceFormatError, match=r"u.msgpack: frame 1 event 0: unknown event "
                       r"type 'BlockStored2'"):
        decode(p, strict=True)


def test_truncated_plain_stream_names_the_frame(tmp_path):
    p = tmp_path / "t.msgpack"
    good = msgpack.packb({"ts": 0, "events": [stored_map([1], None)]})
    p.write_bytes(good + good + good[:-5])
    with pytest.raises(TraceFormatError, match=r"t.msgpack: frame 3: truncated msgpack frame"):
        decode(p)


def test_capture_file_round_trip_gaps_duplicates_and_truncated_payload(tmp_path):
    p = str(tmp_path / "c.pbkv")
    w = CaptureWriter(p, endpoint="tcp://127.0.0.1:1", topic="kv")
    payload = msgpack.packb([0.0, [["BlockStored", [7], None, TOKS[:16], 16, None]]])
    for seq in (0, 1, 1, 4, 5):
        w.write(seq, 10, b"kv", payload)
    w.close({"end": True})
    assert open(p, "rb").read(8) == MAGIC
    ops, stats = decode(p)
    assert len(ops) == 4 and stats.seq_duplicates == 1
    assert stats.seq_gaps == 1 and stats.seq_missing == 2
    w = CaptureWriter(p)
    w.write(0, 1, b"", payload)
    w.write(1, 1, b"", payload[:-4])
    w.close()
    with pytest.raises(TraceFormatError, match=r"c.pbkv: frame 2 \(seq 1\): truncated msgpack "
                       "payload"):
        decode(p)
    open(p, "wb").write(MAGIC + b"\x81")
    with pytest.raises(TraceFormatError, match="c.pbkv: capture header is truncated or corrupt"):
        decode(p)


@pytest.mark.parametrize("bad, msg", [
    ({"ts": 0, "events": 3}, "EventBatch 'events' must be a list"),
    ({"ts": 0, "events": [7]}, "frame 1 event 0: not an event"),
    ({"ts": 0, "events": [stored_map("x", None)]}, "'block_hashes' must be a list"),
    ({"ts": 0, "events": [stored_map([1.5], None)]}, r"block_hashes\[0\] is 1.5"),
    ({"ts": 0, "events": [stored_map([1], "p")]}, "parent_block_hash is 'p'"),
    ({"ts": 0, "events": [], "data_parallel_rank": -1}, "data_parallel_rank -1"),
    ("hello", "not an EventBatch"),
])
def test_bad_batches_are_one_line(tmp_path, bad, msg):
    with pytest.raises(TraceFormatError, match=msg):
        decode(write_stream(tmp_path / "x.msgpack", [bad]))


def test_chain_memory_rebuilds_chains_through_removed_parents_and_counts_unknown():
    mem = ChainMemory(parent_memory=2)
    u = lambda *v: np.array(v, dtype=np.uint64)  # noqa: E731
    chain, n = mem.store(StoreOp(0, u(1, 2), None))
    assert list(chain) == [1, 2] and n == 0
    chain, n = mem.store(StoreOp(0, u(3), 2))
    assert list(chain) == [1, 2, 3] and n == 2
    mem.store(StoreOp(1, u(3), 2))                 # worker 1 built on 1, 2 too
    assert mem.live[1] == {1, 2, 3}
    assert list(mem.remove(RemoveOp(0, u(3, 2)))) == []    # still on worker 1
    assert list(mem.remove(RemoveOp(1, u(3, 2)))) == [3, 2]
    chain, n = mem.store(StoreOp(0, u(4), 2))      # parent evicted: remembered, live again
    assert list(chain) == [1, 2, 4] and mem.removed_parents_used == 1
    assert 2 in mem.live[0] and 2 not in mem.removed
    mem.store(StoreOp(0, u(9), 12345))
    assert mem.unknown_parents == 1
    gone = mem.clear(ClearOp(0))
    assert set(gone.tolist()) == {2, 4, 9} and mem.live_blocks == 1   # 1 on worker 1
    assert len(mem.removed) == 2                   # bounded by parent_memory
    assert mem.chain_of(1) is not None and mem.chain_of(3) is None


def test_workload_options_and_closed_loop_requests(tmp_path):
    p = write_stream(tmp_path / "w.msgpack", [{"ts": 0, "events": [stored_map([1, 2], None)]},
                                              {"ts": 1, "events": [stored_map([3], 2)]}])
    w = kv_events(path=p)
    reqs = list(w.requests())
    assert [list(r.insert_ids) for r in reqs] == [[1, 2], [1, 2, 3]]
    assert list(reqs[1].match_ids) == [1, 2] and reqs[1].prompt_tokens == 32
    assert len(w) == 2 and w.metadata()["format"] == "msgpack-stream"
    with pytest.raises(ConfigError, match="workload kv-events needs path="):
        kv_events()
    with pytest.raises(ConfigError, match="option nope: not an option of workload kv-events"):
        kv_events(path=p, nope=1)
    with pytest.raises(ConfigError, match="unknown scheme 'md5'"):
        kv_events(path=p, block_hash="md5")
    with pytest.raises(ConfigError, match="no such file"):
        kv_events(path=str(tmp_path / "missing"))


def test_sglang_shapes_positional_batch_around_maps_and_trailing_fields(tmp_path):
    """SGLang 0.5.23: [ts, events, attn_dp_rank] with tagged-map events and signed ids;
    an array-form event may carry cache_salt, session_id and lora_name after medium."""
    batches = [[3.0, [{"type": "BlockStored", "block_hashes": [-5], "parent_block_hash": None,
                       "token_ids": TOKS[:16], "block_size": 16, "lora_id": None,
                       "medium": "GPU", "cache_salt": "s", "session_id": "abc"}], 1],
               [4.0, [["BlockStored", [-6], -5, TOKS[:16], 16, None, "GPU", "salt", "sess",
                       "my-lora"]]]]
    ops, stats = decode(write_stream(tmp_path / "sg.msgpack", batches))
    assert [o.worker for o in ops] == [1, 0]
    assert int(ops[0].block_hashes[0]) == (1 << 64) - 5 and ops[1].parent == (1 << 64) - 5
    assert ops[1].extra_keys is None and stats.unknown_events == 0


def test_odd_frames_and_unhashable_map_keys_are_one_line(tmp_path):
    p = str(tmp_path / "f.pbkv")
    payload = msgpack.packb({"ts": 0, "events": []})
    w = CaptureWriter(p)
    w.write(0, 1, b"", payload)
    w._f.write(msgpack.packb([1, "x", b"", payload, 0]))
    w.close()
    with pytest.raises(TraceFormatError, match=r"f.pbkv: frame 2: not a capture frame"):
        decode(p)
    raw = tmp_path / "k.msgpack"
    raw.write_bytes(b"\x81\x91\x01\x01")              # {[1]: 1}
    with pytest.raises(TraceFormatError, match=r"k.msgpack: frame 1: corrupt msgpack"):
        decode(raw)
    w = CaptureWriter(p)
    w.write(0, 1, b"", b"\x81\x91\x01\x01")
    w.close()
    with pytest.raises(TraceFormatError, match=r"frame 1 \(seq 0\): corrupt msgpack payload"):
        decode(p)
