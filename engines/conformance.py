"""Engine conformance kit: the behaviour every SegmentStore must show.

Fixtures apart from tests, as in fsspec's ``tests/abstract``:
:class:`EngineFixtures` opens the engine under test, and each mixin checks
one behaviour (:class:`RoundTripTests`, :class:`ScanTests`,
:class:`PersistenceTests`, :class:`CheckpointTests`, :class:`WriteMarkTests`,
:class:`BadPathTests`, :class:`StatsTests`, :class:`ThreadTests`,
:class:`KillTests`).  :class:`EngineConformance` is all of them.  A plugin author's test file::

    import pytest
    from prefixbench.engines.conformance import EngineConformance

    class TestMyEngine(EngineConformance):
        @pytest.fixture
        def engine_factory(self):
            return MyStore            # a SegmentStore subclass, or a callable
                                      # (path, **StoreConfig fields) -> store

or, for a registered engine, ``engine_name = "my-engine"`` (a class
attribute or a fixture), or pick mixins:
``class TestScans(EngineFixtures, ScanTests)``.  Optional fixtures:
``engine_config`` (StoreConfig fields used for every open, JSON
serialisable) and ``engine_spec`` (how the kill -9 child process finds the
engine: a registry name or ``"module:Class"``; derived automatically for
registry names and module-level classes).

Volatile engines (``volatile = True``) skip the persistence, disk-size,
path and kill tests.  The kill -9 test runs the writer in a fresh
interpreter (``python -m prefixbench.engines.conformance_child``), never a
fork, and checks that every batch acknowledged before SIGKILL is intact.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from prefixbench.engines.base import MAX_KEY
from prefixbench.engines.conformance_child import batch_items, open_store, resolve_engine
from prefixbench.errors import StoreError

__all__ = ["EngineConformance", "EngineFixtures", "RoundTripTests", "ScanTests", "PersistenceTests",
           "CheckpointTests", "BadPathTests", "StatsTests", "ThreadTests", "KillTests",
           "open_store", "resolve_engine"]


def _value(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


def _read_acks(path) -> list[int]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    return [int(x) for x in lines[:-1]]     # the last piece is unterminated (or empty)


def _names_as_fixtures(cls, names) -> None:
    """Turn plain class attributes (``engine_name = "lmdb"``) into fixtures returning
    them, so the fixtures that depend on them (and parametrised overrides) just work."""
    for name in names:
        value = cls.__dict__.get(name)
        if isinstance(value, str):
            setattr(cls, name, pytest.fixture(name=name)(lambda self, _v=value: _v))


class EngineFixtures:
    """The fixtures every mixin below uses.  Override ``engine_factory``, or name a
    registered engine with the ``engine_name`` fixture or a plain class attribute
    ``engine_name = "my-engine"``; optionally ``engine_config`` and ``engine_spec``."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _names_as_fixtures(cls, ("engine_name",))

    # ----- fixtures plugin authors override ---------------------------
    @pytest.fixture
    def engine_name(self):
        return None

    @pytest.fixture
    def engine_factory(self, engine_name):
        if engine_name is None:
            pytest.fail("EngineConformance subclasses override the engine_factory "
                        "or engine_name fixture")
        return resolve_engine(engine_name)

    @pytest.fixture
    def engine_config(self):
        return {}

    @pytest.fixture
    def engine_spec(self, engine_name, engine_factory):
        if engine_name:
            return engine_name
        if isinstance(engine_factory, type) and "<locals>" not in engine_factory.__qualname__:
            return f"{engine_factory.__module__}:{engine_factory.__qualname__}"
        pytest.skip("override the engine_spec fixture ('module:Class') so the kill -9 "
                    "child process can open this engine")

    # ----- helpers ----------------------------------------------------
    @pytest.fixture
    def store_path(self, tmp_path):
        return tmp_path / "store"

    @pytest.fixture
    def open_engine(self, engine_factory, engine_config, store_path):
        """``open_engine(path=None, **config)`` opens a store; all are closed at teardown."""
        opened = []

        def open_(path=None, **overrides):
            s = open_store(engine_factory, store_path if path is None else path,
                           **{**engine_config, **overrides})
            opened.append(s)
            return s

        yield open_
        for s in reversed(opened):
            s.close()

    @pytest.fixture
    def store(self, open_engine):
        return open_engine()

    @pytest.fixture
    def durable(self, store):
        if store.volatile:
            pytest.skip("volatile engine: nothing persists")
        return store


class RoundTripTests:
    """put/get, write batches, missing keys, empty and large values, overwrite, delete."""

    def test_put_get_round_trip(self, store):
        store.put(1, b"one")
        store.put(2**40, b"\x00\xff" * 10)
        assert store.get(1) == b"one"
        assert store.get(2**40) == b"\x00\xff" * 10

    def test_put_many_round_trip(self, store):
        rng = random.Random(1)
        items = {rng.getrandbits(64): _value(rng, rng.randrange(64)) for _ in range(500)}
        store.put_many(items.items())
        assert [store.get(k) for k in items] == list(items.values())

    def test_write_batch_round_trip(self, store):
        store.put(7, b"old")
        with store.batch() as b:
            b.put(5, b"five")
            b.put(6, b"six")
            b.delete(7)
        assert (store.get(5), store.get(6), store.get(7)) == (b"five", b"six", None)

    def test_batch_applies_puts_before_deletes(self, store):
        """A key put and deleted in one batch ends up deleted, as the contract orders it."""
        with store.batch() as b:
            b.put(9, b"nine")
            b.delete(9)
        assert store.get(9) is None

    def test_batch_discarded_when_block_raises(self, store):
        with pytest.raises(RuntimeError):
            with store.batch() as b:
                b.put(3, b"three")
                raise RuntimeError("abandon")
        assert store.get(3) is None

    def test_missing_keys(self, store):
        store.put(10, b"ten")
        assert store.get(11) is None
        assert store.get(0) is None
        assert store.get(MAX_KEY) is None

    def test_get_many_mixes_hits_misses_and_repeats(self, store):
        import numpy as np
        store.put_many([(1, b"a"), (3, b""), (2**63, b"big")])
        keys = [3, 4, 1, 2**63, 1, 2**64 - 1, 0]
        expect = [b"", None, b"a", b"big", b"a", None, None]
        assert store.get_many(keys) == expect
        assert store.get_many(np.array(keys, dtype=np.uint64)) == expect
        assert store.get_many([]) == []
        assert store.get_many([4, 5]) == [None, None]

    def test_empty_value_is_not_missing(self, store):
        store.put(42, b"")
        assert store.get(42) == b""
        assert store.get_many([42]) == [b""]

    def test_one_mib_value(self, store):
        big = random.Random(2).randbytes(1 << 20)
        store.put(77, big)
        store.put_many([(78, big[::-1]), (79, b"small")])
        assert store.get(77) == big
        assert store.get_many([78, 79, 77]) == [big[::-1], b"small", big]

    def test_overwrite(self, store):
        store.put(5, b"first value, longer")
        store.put(5, b"second")
        assert store.get(5) == b"second"
        store.put_many([(5, b"third"), (6, b"x")])
        assert store.get(5) == b"third"

    def test_delete(self, store):
        store.put_many([(1, b"a"), (2, b"b")])
        store.delete(1)
        assert store.get(1) is None
        assert store.get(2) == b"b"
        assert list(store.scan()) == [(2, b"b")]

    def test_delete_missing_key_is_fine(self, store):
        store.delete(12345)
        store.write_items([], [1, 2, 3])
        store.put(1, b"back")
        assert store.get(1) == b"back"

    def test_settle_keeps_data(self, store):
        rng = random.Random(3)
        items = {rng.getrandbits(64): _value(rng, rng.randrange(64)) for _ in range(300)}
        store.put_many(items.items())
        store.delete(next(iter(items)))
        seconds = store.settle(timeout=60)
        assert seconds >= 0
        assert store.get_many(list(items)) == [None, *list(items.values())[1:]]


class ScanTests:
    """Ordered scans: numeric key order over the whole 64-bit range, and bounds."""

    EDGE_KEYS = [0, 1, 255, 256, 2**32, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1]

    def test_scan_is_in_numeric_order(self, store):
        rng = random.Random(4)
        keys = set(self.EDGE_KEYS) | {rng.getrandbits(64) for _ in range(3000)}
        store.put_many((k, k.to_bytes(8, "little")) for k in keys)
        got = list(store.scan())
        assert [k for k, _ in got] == sorted(keys)
        assert all(v == k.to_bytes(8, "little") for k, v in got)

    def test_scan_bounds(self, store):
        rng = random.Random(5)
        keys = sorted(set(self.EDGE_KEYS) | {rng.getrandbits(64) for _ in range(2500)})
        store.put_many((k, b"v") for k in keys)
        for start, end in [(2**63, None), (0, 2**63), (256, 2**63 + 1), (keys[100], keys[2200]),
                           (keys[100] + 1, keys[2200] + 1), (5, 5), (2**64 - 1, None),
                           (2**63 + 2, 2**64 - 2), (0, 1)]:
            want = [k for k in keys if k >= start and (end is None or k < end)]
            assert [k for k, _ in store.scan(start, end)] == want, (start, end)

    def test_scan_of_empty_store(self, store):
        assert list(store.scan()) == []
        assert list(store.scan(2**63)) == []


class PersistenceTests:
    """Reopening keeps the data; size on disk grows with it (skipped for volatile engines)."""

    def test_reopen_keeps_data(self, open_engine, durable):
        rng = random.Random(6)
        expect = {rng.getrandbits(64): _value(rng, rng.randrange(200)) for _ in range(2000)}
        durable.put_many(expect.items())
        gone = list(expect)[:100]
        for k in gone[:50]:
            durable.delete(k)
            del expect[k]
        for k in gone[50:]:
            expect[k] = b"rewritten"
            durable.put(k, b"rewritten")
        durable.close()
        again = open_engine(create=False)
        assert list(again.scan()) == sorted(expect.items())
        assert again.get_many(list(expect)) == list(expect.values())

    def test_size_on_disk_grows(self, durable):
        before = durable.size_on_disk()
        rng = random.Random(7)
        for b in range(8):
            durable.put_many((b * 1000 + i, rng.randbytes(8192)) for i in range(64))
        durable.sync()
        logical = 8 * 64 * 8192
        assert durable.size_on_disk() - before >= logical // 2


class CheckpointTests:
    """A checkpoint holds every acknowledged write; each clone of it opens as a store
    that changes apart from the checkpoint, the other clones and the original.  An
    engine that cannot checkpoint (``checkpoints`` False) refuses with one line."""

    def test_checkpoint_clones_are_independent_copies(self, open_engine, store, tmp_path):
        if not store.checkpoints:
            with pytest.raises(StoreError, match="cannot checkpoint"):
                store.checkpoint(tmp_path / "checkpoint")
            return
        rng = random.Random(8)
        expect = {rng.getrandbits(64): _value(rng, rng.randrange(300)) for _ in range(2000)}
        store.put_many(expect.items())
        ck = tmp_path / "checkpoint"
        store.checkpoint(ck)
        store.put(1, b"original, after the checkpoint")
        cls = type(store)
        cls.clone_checkpoint(ck, tmp_path / "a")
        cls.clone_checkpoint(ck, tmp_path / "b")
        a = open_engine(path=tmp_path / "a", create=False)
        assert list(a.scan()) == sorted(expect.items())
        # enough writes for the clone to flush and compact what it shares with the others
        for b in range(8):
            a.put_many((b * 10_000 + i, rng.randbytes(1024)) for i in range(500))
        for k in list(expect)[:100]:
            a.delete(k)
        a.settle()
        a.close()
        b = open_engine(path=tmp_path / "b", create=False)
        assert list(b.scan()) == sorted(expect.items())
        assert store.get(1) == b"original, after the checkpoint" and b.get(1) is None
        assert open_engine(path=tmp_path / "a", create=False).get(list(expect)[0]) is None


class WriteMarkTests:
    """Where an engine keeps a write mark, every write batch moves it to a value not seen
    before and nothing else moves it; a checkpoint's clones open at the checkpoint's
    mark.  Engines that keep none (``write_mark()`` None) are skipped."""

    def test_write_mark_moves_with_every_write_and_nothing_else(self, store):
        if store.write_mark() is None:
            pytest.skip(f"engine {store.name} keeps no write mark")
        seen = [store.write_mark()]
        for write in (lambda: store.put(1, b"a"), lambda: store.put_many([(2, b"b"), (3, b"c")]),
                      lambda: store.delete(1), lambda: store.write_items([(4, b"d")], [2])):
            write()
            mark = store.write_mark()
            assert mark not in seen
            seen.append(mark)
            store.get(3)
            store.get_many([1, 3, 4])
            list(store.scan())
            store.sync()
            store.flush()
            store.settle(timeout=60)
            assert store.write_mark() == mark

    def test_checkpoint_clones_open_at_its_mark(self, open_engine, store, tmp_path):
        if store.write_mark() is None or not store.checkpoints:
            pytest.skip(f"engine {store.name} keeps no write mark or cannot checkpoint")
        store.put_many((k, b"v" * k) for k in range(1, 200))
        mark = store.write_mark()
        store.checkpoint(tmp_path / "checkpoint")
        assert store.write_mark() == mark
        type(store).clone_checkpoint(tmp_path / "checkpoint", tmp_path / "clone")
        clone = open_engine(path=tmp_path / "clone", create=False)
        assert clone.write_mark() == mark
        clone.put(500, b"after")
        assert clone.write_mark() != mark


class BadPathTests:
    """A bad path is one clear line naming it, and nothing already there is touched."""

    def test_path_that_is_a_file(self, open_engine, durable, tmp_path):
        f = tmp_path / "a-file"
        f.write_bytes(b"precious")
        with pytest.raises(StoreError) as ei:
            open_engine(path=f)
        assert str(f) in str(ei.value) and "\n" not in str(ei.value)
        assert f.read_bytes() == b"precious"

    def test_path_under_a_file(self, open_engine, durable, tmp_path):
        f = tmp_path / "a-file"
        f.write_bytes(b"precious")
        with pytest.raises(StoreError) as ei:
            open_engine(path=f / "store")
        assert str(f / "store") in str(ei.value) and "\n" not in str(ei.value)
        assert f.read_bytes() == b"precious"

    def test_create_false_on_missing_store(self, open_engine, durable, tmp_path):
        missing = tmp_path / "missing"
        with pytest.raises(StoreError) as ei:
            open_engine(path=missing, create=False)
        assert str(missing) in str(ei.value) and "\n" not in str(ei.value)
        assert not missing.exists()

    def test_create_false_on_foreign_directory(self, open_engine, durable, tmp_path):
        d = tmp_path / "other"
        d.mkdir()
        (d / "notes.txt").write_bytes(b"keep me")
        with pytest.raises(StoreError) as ei:
            open_engine(path=d, create=False)
        assert str(d) in str(ei.value)
        assert sorted(os.listdir(d)) == ["notes.txt"]
        assert (d / "notes.txt").read_bytes() == b"keep me"


class StatsTests:
    """The logical counters ``stats()`` reports, call by call."""

    def test_stats_counters(self, store):
        store.reset_stats()
        store.put(1, b"ab")
        store.put_many([(2, b"c"), (3, b"")])
        with store.batch() as b:
            b.put(4, b"dddd")
            b.delete(1)
        store.delete(99)
        assert store.get(2) == b"c"
        assert store.get(1) is None
        assert store.get_many([2, 3, 4, 5]) == [b"c", b"", b"dddd", None]
        list(store.scan())
        store.sync()
        s = store.stats().as_dict()
        assert s == {"reads": 6, "read_calls": 3, "batch_read_calls": 1, "hits": 4,
                     "bytes_read": 6, "writes": 4, "write_batches": 4, "deletes": 2,
                     "bytes_written": 7, "scans": 1, "syncs": 1}


class ThreadTests:
    """Concurrent readers and a writer see what single gets see."""

    def test_get_many_from_threads_equals_single_gets(self, store):
        """Readers in several threads, one writer on other keys, results match single gets."""
        rng = random.Random(8)
        items = {rng.getrandbits(62) * 4: _value(rng, rng.randrange(100)) for _ in range(3000)}
        store.put_many(items.items())
        keys = list(items) + [k + 1 for k in list(items)[:500]]   # k + 1 never exists
        expect = {k: store.get(k) for k in keys}
        assert all(expect[k] == items.get(k) for k in keys)
        errors, stop = [], threading.Event()

        def reader(seed):
            r = random.Random(seed)
            try:
                for _ in range(150):
                    batch = r.sample(keys, 32)
                    got = store.get_many(batch)
                    if got != [expect[k] for k in batch]:
                        errors.append(f"thread {seed}: get_many differs from single gets")
                        return
            except Exception as e:     # pragma: no cover - reported below
                errors.append(f"thread {seed}: {e!r}")

        def writer():
            n = 0
            try:
                while not stop.is_set() and n < 20000:
                    store.put_many(((n + i) * 4 + 2, b"w" * 64) for i in range(50))
                    n += 50
            except Exception as e:     # pragma: no cover - reported below
                errors.append(f"writer: {e!r}")

        w = threading.Thread(target=writer)
        readers = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        w.start()
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        w.join()
        assert errors == []


class KillTests:
    """SIGKILL a writer process; every acknowledged batch must be intact."""

    #: SIGKILLs per durability mode, the seed of their delays, and the delay range (s)
    kill_rounds = 3
    kill_seed = 1129
    kill_delay = (0.02, 0.3)
    #: seconds a child may take to acknowledge its first batch
    child_timeout = 60.0

    @pytest.mark.parametrize("durability", ["async", "sync"])
    def test_kill9_keeps_acknowledged_batches(self, durability, engine_factory, engine_config,
                                              engine_spec, store_path, tmp_path):
        """SIGKILL a writer at random moments; every acknowledged batch must be intact."""
        config = {**engine_config, "durability": durability}
        probe = open_store(engine_factory, store_path, **config)
        volatile = probe.volatile
        probe.close()
        if volatile:
            pytest.skip("volatile engine: nothing survives the process")
        rng = random.Random(f"{self.kill_seed}/{durability}")
        seed = rng.randrange(1 << 20)
        ack = tmp_path / "acks"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        acked: list[int] = []
        for rnd in range(self.kill_rounds):
            start = acked[-1] + 1 if acked else 0
            errpath = tmp_path / f"child-{rnd}.stderr"
            cmd = [sys.executable, "-m", "prefixbench.engines.conformance_child", engine_spec,
                   str(store_path), str(ack), "--seed", str(seed), "--start", str(start),
                   "--config", json.dumps(config)]
            with open(errpath, "wb") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
                try:
                    self._wait_for_ack(proc, ack, len(acked) + 1, errpath)
                    time.sleep(rng.uniform(*self.kill_delay))
                finally:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == -9, errpath.read_text()[-2000:]
            acked = _read_acks(ack)
            assert acked == list(range(len(acked))), "acknowledgement file is not contiguous"
            self._check_after_kill(engine_factory, store_path, config, seed, acked[-1], durability)

    def _wait_for_ack(self, proc, ack, need, errpath):
        deadline = time.monotonic() + self.child_timeout
        while len(_read_acks(ack)) < need:
            if proc.poll() is not None:
                pytest.fail(f"writer child exited with {proc.returncode} before being killed:\n"
                            + errpath.read_text()[-2000:])
            if time.monotonic() > deadline:
                pytest.fail(f"writer child acknowledged nothing in {self.child_timeout} s")
            time.sleep(0.005)

    @staticmethod
    def _check_after_kill(factory, path, config, seed, last, durability):
        store = open_store(factory, path, **{**config, "create": False})
        try:
            for n in range(last + 1):
                items = batch_items(seed, n)
                got = store.get_many([k for k, _ in items])
                if got != [v for _, v in items]:
                    bad = sum(g != v for g, (_, v) in zip(got, items))
                    pytest.fail(f"durability={durability}: batch {n} was acknowledged before "
                                f"kill -9 but {bad} of its {len(items)} values are missing "
                                f"or differ after reopening")
            # the batch in flight is all or nothing; the one after it never started
            items = batch_items(seed, last + 1)
            got = store.get_many([k for k, _ in items])
            assert got == [None] * len(items) or got == [v for _, v in items], \
                f"durability={durability}: batch {last + 1} was applied partially"
            assert store.get_many([k for k, _ in batch_items(seed, last + 2)]) == \
                [None] * len(items), f"batch {last + 2} was never written but is present"
        finally:
            store.close()


class EngineConformance(EngineFixtures, RoundTripTests, ScanTests, PersistenceTests,
                        CheckpointTests, WriteMarkTests, BadPathTests, StatsTests, ThreadTests,
                        KillTests):
    """The whole kit: subclass and override ``engine_factory`` or ``engine_name``."""
