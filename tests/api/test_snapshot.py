"""Snapshots: the publication protocol, round trips for every strategy, nothing
acknowledged lost after the snapshot, and corrupt snapshots never served."""
import os

import numpy as np
import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.memory import MemoryStore
from prefixbench import snapshot as snap
from prefixbench.metas import make_metas
from prefixbench.snapshot import SnapshotError, read_snapshot, write_snapshot
from prefixbench.registry import get_registry

ALL = ["radix", "dram-blockhash", "ssd-blockhash", "sarp", "segment-hash", "segment-radix",
       "segment-radix-capped"]
OPTS = {"sarp": {"S": 16, "R": 4, "backfill": "sync", "tau": 4, "pruning_threshold": 1},
        "segment-hash": {"S": 16}, "segment-radix": {"S": 16},
        "segment-radix-capped": {"S": 16, "cap_nodes": 6}}
#: options for an exact answer (sarp: every candidate verified)
EXACT = {"sarp": {"max_retrieval": 0}}


def make_seqs(seed: int, n: int = 80, maxlen: int = 120):
    """Sequences of chained-looking ids: many share a prefix of an earlier one."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n):
        tail = rng.integers(1, 1 << 63, size=int(rng.integers(1, maxlen)), dtype=np.uint64)
        if seqs and rng.random() < 0.7:
            p = seqs[int(rng.integers(len(seqs)))]
            cut = int(rng.integers(0, len(p) + 1))
            seqs.append(np.concatenate([p[:cut], tail]))
        else:
            seqs.append(tail)
    return seqs


def new(name, store, extra=None):
    cls = get_registry().get("strategy", name).factory
    opts = dict(OPTS.get(name, {}), **(extra or {}))
    return cls(store if cls.needs_store else None, opts)


def recover(name, store, d, extra=None, **kw):
    cls = get_registry().get("strategy", name).factory
    opts = dict(OPTS.get(name, {}), **(extra or {}))
    return cls.recover(store if cls.needs_store else None, d, opts, **kw)


def answers(s, queries):
    out = []
    for q in queries:
        m = s.match(q)
        out.append((m.n_blocks, np.asarray(m.metas).tobytes()))
    return out


def probes(seqs, seed=1):
    rng = np.random.default_rng(seed)
    qs = list(seqs)
    for q in seqs[:30]:
        k = int(rng.integers(0, len(q) + 1))
        qs.append(np.concatenate([q[:k], rng.integers(1, 1 << 63, size=5, dtype=np.uint64)]))
    return qs


def expected_oracle(seqs):
    """First-inserted metadata per block id."""
    first = {}
    for i, q in enumerate(seqs):
        m = make_metas(q, i)
        for j, b in enumerate(q.tolist()):
            first.setdefault(b, m[j].tobytes())
    return first


# ----------------------------------------------------------------------------- protocol
def sections(v):
    return {"a": np.arange(1000, dtype=np.uint64) * v, "b": np.full((7, 16), v, np.uint8)}


def test_round_trip_of_the_format(tmp_path):
    n = write_snapshot(tmp_path, "x", {"k": 1}, sections(3))
    s = read_snapshot(tmp_path, "x")
    assert s.meta == {"k": 1} and s.nbytes == n == os.path.getsize(snap.snapshot_path(tmp_path))
    assert np.array_equal(s.sections["a"], sections(3)["a"])
    assert s.sections["b"].shape == (7, 16)


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", snap.FAULT_STEPS)
def test_crash_between_publication_steps_leaves_old_or_new(tmp_path, step):
    write_snapshot(tmp_path, "x", {"v": 1}, sections(1))

    def hook(at, path):
        if at == step:
            raise Crash(at)
    with pytest.raises(Crash):
        write_snapshot(tmp_path, "x", {"v": 2}, sections(2), fault=hook)
    s = read_snapshot(tmp_path, "x")
    want = 1 if step in ("temp-written", "temp-fsynced", "previous-kept") else 2
    assert s.meta["v"] == want
    assert np.array_equal(s.sections["a"], sections(want)["a"])
    # the next publication works over a stale temp file
    write_snapshot(tmp_path, "x", {"v": 3}, sections(3))
    assert read_snapshot(tmp_path, "x").meta["v"] == 3
    assert not os.path.exists(snap.snapshot_path(tmp_path) + ".tmp")


def _flip(path, where):
    with open(path, "r+b") as f:
        f.seek(where)
        b = f.read(1)
        f.seek(where)
        f.write(bytes([b[0] ^ 0x40]))


def corrupt(d, case):
    p = snap.snapshot_path(d)
    size = os.path.getsize(p)
    if case == "flip-header":
        _flip(p, 20)
    elif case == "flip-payload":
        _flip(p, size - 3 if size > 200 else size // 2)
    elif case == "cut":
        with open(p, "r+b") as f:
            f.truncate(size - 1 if size > 100 else size // 2)
    elif case == "version":
        with open(p, "r+b") as f:
            f.seek(8)
            f.write((99).to_bytes(4, "little"))
    elif case == "missing":
        os.unlink(p)


CASES = ["flip-header", "flip-payload", "cut", "version", "missing"]


@pytest.mark.parametrize("case", CASES)
def test_corrupt_file_is_detected_in_one_line(tmp_path, case):
    write_snapshot(tmp_path, "x", {}, sections(5))
    corrupt(tmp_path, case)
    with pytest.raises(SnapshotError) as e:
        read_snapshot(tmp_path, "x")
    msg = str(e.value)
    assert "\n" not in msg and snap.snapshot_path(tmp_path) in msg


def test_wrong_strategy_is_refused(tmp_path):
    write_snapshot(tmp_path, "radix", {}, {})
    with pytest.raises(SnapshotError, match="written by strategy radix"):
        read_snapshot(tmp_path, "sarp")


# ----------------------------------------------------------------------------- strategies
@pytest.mark.parametrize("name", ALL)
def test_round_trip_every_strategy(tmp_path, name):
    store = MemoryStore(StoreConfig())
    s = new(name, store)
    seqs = make_seqs(7)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
    qs = probes(seqs)
    before = answers(s, qs)
    info = s.snapshot(tmp_path / "snap")
    assert info["bytes"] == snap.snapshot_bytes(tmp_path / "snap")
    r = recover(name, store, tmp_path / "snap")
    assert r.recovery["source"] == "snapshot"
    assert answers(r, qs) == before
    st_a, st_b = s.stats(), r.stats()
    for k in ("entries", "nodes", "postings"):
        if k in st_a:
            assert st_a[k] == st_b[k], k
    # the recovered index keeps working: new inserts are matchable
    more = make_seqs(8, n=20)
    for i, q in enumerate(more):
        r.insert(q, make_metas(q, 1000 + i))
    for i, q in enumerate(more):
        assert r.match(q).n_blocks >= 1


@pytest.mark.parametrize("name", ALL)
def test_nothing_acknowledged_after_the_snapshot_is_lost(tmp_path, name):
    """Inserts after the snapshot come back: store scan (segments), store (ssd, hash),
    insert log (radix, dram-blockhash, segment-radix)."""
    store = MemoryStore(StoreConfig())
    s = new(name, store, EXACT.get(name))
    d = tmp_path / "snap"
    s.enable_log(d)
    seqs = make_seqs(11, n=120)
    for i, q in enumerate(seqs[:60]):
        s.insert(q, make_metas(q, i))
    s.snapshot(d)
    for i, q in enumerate(seqs[60:], 60):
        s.insert(q, make_metas(q, i))
    # "crash": drop s without closing anything
    r = recover(name, store, d, EXACT.get(name))
    first = expected_oracle(seqs)
    for q in seqs:
        m = r.match(q)
        assert m.n_blocks == len(q), name
        assert [bytes(x) for x in np.asarray(m.metas)] == [first[b] for b in q.tolist()]


@pytest.mark.parametrize("name", ["radix", "dram-blockhash", "segment-radix"])
def test_insert_racing_the_snapshot_capture_is_not_lost(tmp_path, name):
    """An insert acknowledged while the snapshot is being captured (after the state
    was read, before the snapshot is published) must come back: the snapshot's log
    position is read before its state, so that insert is replayed from the log."""
    store = MemoryStore(StoreConfig())
    s = new(name, store, EXACT.get(name))
    d = tmp_path / "snap"
    s.enable_log(d)
    seqs = make_seqs(12, n=40)
    for i, q in enumerate(seqs[:-1]):
        s.insert(q, make_metas(q, i))
    capture = s._snapshot_state
    late = seqs[-1]

    def capture_then_race():
        state = capture()
        s.insert(late, make_metas(late, len(seqs) - 1))     # another thread, acknowledged
        return state
    s._snapshot_state = capture_then_race
    s.snapshot(d)
    r = recover(name, store, d, EXACT.get(name))           # "crash" right after publishing
    assert r.recovery["log_replayed"] >= 1
    first = expected_oracle(seqs)
    for q in seqs:
        m = r.match(q)
        assert m.n_blocks == len(q), name
        assert [bytes(x) for x in np.asarray(m.metas)] == [first[b] for b in q.tolist()]


def test_sarp_extension_journal_is_replayed(tmp_path):
    """An in-place extension after the snapshot (same segment id) is routable again."""
    store = MemoryStore(StoreConfig())
    s = new("sarp", store, EXACT["sarp"])
    rng = np.random.default_rng(3)
    q = rng.integers(1, 1 << 63, size=40, dtype=np.uint64)
    s.insert(q[:5], make_metas(q[:5], 0))
    s.snapshot(tmp_path)
    s.insert(q[:15], make_metas(q[:15], 1))    # extends segment 1 in place (same id)
    s.insert(q, make_metas(q, 2))
    r = recover("sarp", store, tmp_path, EXACT["sarp"])
    assert r.recovery["segments_from_journal"] >= 1
    assert r.match(q).n_blocks == 40
    # the catch-up scan set the next segment id and journal sequence: nothing reused
    assert r.layer.next_id == s.layer.next_id and r._journal_seq == s._journal_seq
    r.insert(q[:3], make_metas(q[:3], 3))
    q2 = np.concatenate([q[:20], rng.integers(1, 1 << 63, size=30, dtype=np.uint64)])
    r.insert(q2, make_metas(q2, 4))
    r2 = recover("sarp", store, tmp_path, EXACT["sarp"])
    assert r2.match(q).n_blocks == 40 and r2.match(q2).n_blocks == 50


REBUILDS = ["sarp", "ssd-blockhash", "segment-hash"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", REBUILDS)
def test_corrupt_snapshot_falls_back_to_the_store(tmp_path, capsys, name, case):
    store = MemoryStore(StoreConfig())
    s = new(name, store, EXACT.get(name))
    seqs = make_seqs(5, n=50)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
    s.snapshot(tmp_path)
    corrupt(tmp_path, case)
    r = recover(name, store, tmp_path, EXACT.get(name))
    assert r.recovery["source"] == "store-rebuild"
    assert str(tmp_path) in r.recovery["snapshot_error"]
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rebuilding from the store" in err
    for q in seqs:
        assert r.match(q).n_blocks == len(q)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["radix", "dram-blockhash", "segment-radix"])
def test_corrupt_snapshot_fails_clearly_without_a_log(tmp_path, name, case):
    store = MemoryStore(StoreConfig())
    s = new(name, store)
    for i, q in enumerate(make_seqs(5, n=30)):
        s.insert(q, make_metas(q, i))
    s.snapshot(tmp_path)
    corrupt(tmp_path, case)
    with pytest.raises(SnapshotError) as e:
        recover(name, store, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg and "cannot rebuild" in msg


@pytest.mark.parametrize("name", ["dram-blockhash", "radix"])
def test_corrupt_snapshot_with_a_complete_log_replays_it(tmp_path, capsys, name):
    s = new(name, None)
    s.enable_log(tmp_path)
    seqs = make_seqs(9, n=40)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
    s.snapshot(tmp_path)
    corrupt(tmp_path, "flip-payload")
    r = recover(name, None, tmp_path)
    assert r.recovery["source"] == "log-rebuild" and r.recovery["log_replayed"] == 40
    assert "replaying the whole insert log" in capsys.readouterr().err
    for q in seqs:
        assert r.match(q).n_blocks == len(q)


def test_torn_log_tail_is_dropped(tmp_path):
    log = snap.InsertLog(tmp_path, 16)
    ids = np.arange(1, 6, dtype=np.uint64)
    log.append(ids, make_metas(ids, 1))
    log.append(ids, make_metas(ids, 2))
    log.close()
    p = os.path.join(tmp_path, snap.LOG_FILE)
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 3)
    recs = list(snap.read_log(tmp_path, 16))
    assert [r[0] for r in recs] == [1]
    log = snap.InsertLog(tmp_path, 16)
    assert log.seq == 1
    log.append(ids, make_metas(ids, 3))
    log.close()
    assert [r[0] for r in snap.read_log(tmp_path, 16)] == [1, 2]


def test_layout_option_mismatch_is_refused(tmp_path):
    store = MemoryStore(StoreConfig())
    s = new("segment-radix", store)
    s.snapshot(tmp_path)
    with pytest.raises(SnapshotError, match="written with S=16"):
        recover("segment-radix", store, tmp_path, {"S": 32})


# ----------------------------------------------------------------------------- two generations
def test_log_is_truncated_through_the_previous_snapshot(tmp_path):
    """After snapshot N the log keeps only the records snapshot N-1 does not cover:
    bounded, and still enough to recover from N-1 if N turns out corrupt."""
    s = new("dram-blockhash", None)
    s.enable_log(tmp_path)
    seqs = make_seqs(21, n=25)

    def logged():
        return [r[0] for r in snap.read_log(tmp_path, 16, after=1 << 63)]
    for i, q in enumerate(seqs[:10]):
        s.insert(q, make_metas(q, i))
    assert s.snapshot(tmp_path)["log_bytes_dropped"] == 0      # no previous generation yet
    assert logged() == list(range(1, 11))
    for i, q in enumerate(seqs[10:20], 10):
        s.insert(q, make_metas(q, i))
    assert s.snapshot(tmp_path)["log_bytes_dropped"] > 0
    assert logged() == list(range(11, 21))
    assert snap.snapshot_log_seq(tmp_path, previous=True) == 10
    for i, q in enumerate(seqs[20:], 20):
        s.insert(q, make_metas(q, i))                          # appends go on after truncation
    s.snapshot(tmp_path)
    assert logged() == list(range(21, 26))
    r = recover("dram-blockhash", None, tmp_path)
    first = expected_oracle(seqs)
    for q in seqs:
        assert [bytes(x) for x in np.asarray(r.match(q).metas)] == [first[b] for b in q.tolist()]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["radix", "dram-blockhash", "segment-radix", "sarp"])
def test_corrupt_newest_snapshot_recovers_from_the_previous_one(tmp_path, capsys, name, case):
    store = MemoryStore(StoreConfig())
    s = new(name, store, EXACT.get(name))
    s.enable_log(tmp_path)
    seqs = make_seqs(22, n=60)
    for i, q in enumerate(seqs):
        s.insert(q, make_metas(q, i))
        if i in (19, 39):
            s.snapshot(tmp_path)
    corrupt(tmp_path, case)
    r = recover(name, store, tmp_path, EXACT.get(name))
    assert r.recovery["source"] == "previous-snapshot", r.recovery
    assert "recovering from the previous snapshot" in capsys.readouterr().err
    first = expected_oracle(seqs)
    for q in seqs:
        m = r.match(q)
        assert m.n_blocks == len(q), name
        assert [bytes(x) for x in np.asarray(m.metas)] == [first[b] for b in q.tolist()]
