"""Device faults at every call of the kernel's durable writers: the durable-write
helpers, the snapshot writer and the insert log.

For each component and each kind (ENOSPC, EIO, a short write followed by a
full device) the run is done once to count its fault points, then once per
point N with the fault at the N-th call.  Every failure is one line naming
the path; the published file or snapshot stays intact; a recovery afterwards
serves exactly the inserts that were acknowledged (an exact strategy's
answers equal a fresh oracle fed only those).  Each test prints its count
(``pytest -s``).  The loops run on tmpfs (fsyncs are free there);
``PREFIXBENCH_LONG=1`` makes the runs longer and puts them on the disk.
"""
import os

import numpy as np
import pytest

from prefixbench import faults
from prefixbench.durable import DurableWriteError, publish_file, write_file
from prefixbench.engines.base import StoreConfig
from prefixbench.engines.memory import MemoryStore
from prefixbench.errors import PrefixbenchError
from prefixbench.metas import make_metas
from prefixbench.registry import get_registry
from prefixbench.snapshot import read_snapshot, snapshot_path

from fault_support import LONG, scratch_dir

KINDS = faults.KINDS


@pytest.fixture
def scratch(tmp_path):
    with scratch_dir(tmp_path) as d:
        yield d


def one_line(msg, path):
    assert "\n" not in msg and os.fspath(path) in msg, msg


# ----------------------------------------------------------------------------- the seam
def test_plan_counts_and_fires_once(tmp_path):
    p = tmp_path / "f"
    with faults.count("durable") as plan:
        write_file(str(p), b"abc")
    assert plan.calls == 2 and not plan.fired          # one write, one fsync
    with faults.inject("EIO", 2, "durable") as plan:
        with pytest.raises(DurableWriteError) as e:
            write_file(str(p), b"abc")
    assert plan.fired and plan.hit[1] == "fsync" and e.value.errno == 5
    one_line(str(e.value), p)
    with faults.inject("EIO", 1, "snapshot"):          # another component: untouched
        write_file(str(p), b"xyz")
    assert p.read_bytes() == b"xyz"


def test_short_write_then_full_device(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with faults.inject("short", 1, "durable"):
            assert faults.write(fd, b"abcdefgh", "f", "durable") == 4
            with pytest.raises(OSError) as e:
                faults.write(fd, b"efgh", "f", "durable")
            assert e.value.errno == 28
            assert faults.write(fd, b"efgh", "f", "durable") == 4   # space came back
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"abcdefgh"


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="fault kind"):
        faults.Plan("EPERM", 1)


# ----------------------------------------------------------------------------- durable helpers
def test_publish_file_at_every_fault_point(scratch, capsys):
    tmp_path = scratch
    path = str(tmp_path / "doc")
    publish_file(path, b"old" * 100)
    with faults.count("durable") as c:
        publish_file(path, b"new" * 100)
    tried = 0
    for kind in KINDS:
        for n in range(1, c.calls + 1):
            publish_file(path, b"old" * 100)
            with faults.inject(kind, n, "durable") as plan:
                try:
                    publish_file(path, b"new" * 100)
                except DurableWriteError as e:
                    one_line(str(e), tmp_path)
            tried += plan.fired
            with open(path, "rb") as f:
                assert f.read() in (b"old" * 100, b"new" * 100)   # never a mix
            assert not os.path.exists(path + ".tmp")
    assert tried == c.calls * len(KINDS)
    with capsys.disabled():
        print(f"\nfault points, durable-write helper: {tried} ({c.calls} calls x {len(KINDS)} kinds)")


# ----------------------------------------------------------------------------- strategies
N_SEQS = 40 if LONG else 12
SNAP_EVERY = 4


def seqs():
    rng = np.random.default_rng(17)
    out = []
    for i in range(N_SEQS):
        tail = rng.integers(1, 1 << 63, size=int(rng.integers(1, 9)), dtype=np.uint64)
        if out and i % 2:
            p = out[int(rng.integers(len(out)))]
            tail = np.concatenate([p[:int(rng.integers(0, len(p) + 1))], tail])
        out.append(tail)
    return out


def cls_of(name):
    return get_registry().get("strategy", name).factory


def answers(s, queries):
    return [(m.n_blocks, np.asarray(m.metas).tobytes()) for m in map(s.match, queries)]


OPTS = {"sarp": {"S": 8, "R": 2, "backfill": "sync", "max_retrieval": 0},
        "segment-radix": {"S": 8}}


def run(name, d, kind=None, at=0, component=None, store=None):
    """Inserts with a snapshot every few; returns (acknowledged seq indexes, errors, plan)."""
    s = cls_of(name)(store, OPTS.get(name, {}))
    s.enable_log(d)
    acked, errors = [], []
    ctx = faults.inject(kind, at, component) if kind else faults.count(component)
    with ctx as plan:
        for i, q in enumerate(seqs()):
            try:
                s.insert(q, make_metas(q, i))
                acked.append(i)
            except PrefixbenchError as e:
                errors.append(str(e))
            if i % SNAP_EVERY == SNAP_EVERY - 1:
                had = os.path.exists(snapshot_path(d))
                try:
                    s.snapshot(d)
                except PrefixbenchError as e:
                    errors.append(str(e))
                    if had:
                        read_snapshot(d, name)      # the published one is still whole
    if store is None:
        s.close()
    return acked, errors, plan


def expected(name, acked):
    o = cls_of("radix")(None, {})
    all_seqs = seqs()
    for i in acked:
        o.insert(all_seqs[i], make_metas(all_seqs[i], i))
    return o


def new_store(name):
    return MemoryStore(StoreConfig()) if cls_of(name).needs_store else None


@pytest.mark.parametrize("name, component", [
    ("radix", "snapshot"), ("radix", "insert-log"), ("dram-blockhash", "snapshot"),
    ("dram-blockhash", "insert-log"), ("sarp", "snapshot"), ("segment-radix", "insert-log")])
def test_strategy_at_every_fault_point(scratch, capsys, name, component):
    tmp_path = scratch
    _, _, c = run(name, tmp_path / "count", component=component, store=new_store(name))
    queries = seqs()
    tried = 0
    for kind in KINDS:
        for n in range(1, c.calls + 1):
            d = tmp_path / f"{kind}-{n}"
            store = new_store(name)
            acked, errors, plan = run(name, d, kind, n, component, store)
            tried += plan.fired
            for e in errors:
                one_line(e, d)
            r = cls_of(name).recover(store, d, OPTS.get(name, {}), quiet=True)
            assert answers(r, queries) == answers(expected(name, acked), queries), \
                (kind, n, plan.hit, errors)
            r.close()
    assert tried == c.calls * len(KINDS)
    with capsys.disabled():
        print(f"\nfault points, {component} ({name}): {tried} "
              f"({c.calls} calls x {len(KINDS)} kinds)")


def test_a_failed_append_refuses_changes_until_recovered(tmp_path):
    s = cls_of("radix")(None, {})
    s.enable_log(tmp_path)
    q = np.arange(1, 5, dtype=np.uint64)
    s.insert(q, make_metas(q, 0))
    with faults.inject("ENOSPC", 1, "insert-log"):
        with pytest.raises(PrefixbenchError) as e:
            s.insert(q + 10, make_metas(q + 10, 1))
    one_line(str(e.value), tmp_path)
    for op in (lambda: s.insert(q + 20, make_metas(q + 20, 2)), lambda: s.snapshot(tmp_path)):
        with pytest.raises(PrefixbenchError, match="until recovered"):
            op()
    s.close()
    r = cls_of("radix").recover(None, tmp_path, {}, quiet=True)
    assert r.match(q).n_blocks == 4 and r.match(q + 10).n_blocks == 0
    r.insert(q + 20, make_metas(q + 20, 2))            # a recovered index takes changes
    assert r.match(q + 20).n_blocks == 4


def test_the_command_fails_in_one_line_naming_the_path(tmp_path, run_cli):
    with faults.inject("ENOSPC", 1, "snapshot") as plan:
        code, _out, err = run_cli("--quiet", "recover", "-s", "radix", "-n", "2000",
                                  "--work-dir", tmp_path / "w", "-o", tmp_path / "r.json")
    assert plan.fired and code == 2
    line = err.strip().splitlines()[-1]
    assert "index.pbsnap" in line and "No space left on device" in line, err
    one_line(line, tmp_path / "w")
