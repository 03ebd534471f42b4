"""Strategy conformance kit: the behaviour every IndexStrategy must show.

Fixtures apart from tests, as in fsspec's ``tests/abstract``:
:class:`StrategyFixtures` builds the strategy under test (with a store when it
``needs_store``) and the exact ``radix`` oracle; each mixin checks one
behaviour:

* :class:`OracleTests` - hypothesis property tests: random branching
  sequences, inserts (plain and ``insert_known_prefix``) and matches
  interleaved, every answer held against the oracle: never longer, never a
  block with metadata other than its first insert's, exactly the oracle's
  answer where the strategy claims ``exact``;
* :class:`SnapshotTests` - ``snapshot`` / ``recover`` round trip, inserts
  acknowledged after the snapshot (durable mode) survive a crash, a corrupt
  snapshot is never served;
* :class:`ThreadTests` - several threads matching and inserting at once;
* :class:`OptionTests` - bad option values and names are one clear line;
* :class:`RemovalTests` - ``remove``/``clear`` (strategies with
  ``supports_remove``; skipped otherwise): hypothesis-interleaved insert,
  match, remove and clear (and a strategy's ``reclaim()``, where it has one,
  at random points) on up to three workers against the oracle (every
  matched block's metadata is its lowest holder's, its locations a subset of
  the oracle's, equal where ``exact``), removes acknowledged after a snapshot
  never served after a crash, several threads removing and inserting at once,
  and each bad argument one ConfigError line.

:class:`StrategyConformance` is all of them.  A plugin author's test file::

    from prefixbench.plugins.conformance import StrategyConformance

    class TestMyIndex(StrategyConformance):
        strategy_name = "my-index"        # the registered name

or override the ``strategy_factory`` fixture (returning the class), and
optionally ``strategy_options``, ``meta_size`` and ``engine_name`` (the
engine a ``needs_store`` strategy gets; ``memory`` by default).  Pick
mixins to run a part: ``class TestMine(StrategyFixtures, OracleTests)``.

Importing this module imports pytest; hypothesis is imported when a property
test runs.  Sizes are class attributes (``max_examples``, ``threads``, ...)
so a slow strategy can run a smaller kit.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading

import numpy as np
import pytest

from prefixbench.blockids import chain_ids
from prefixbench.errors import ConfigError
from prefixbench.metas import make_metas
from prefixbench.registry import get_registry
from prefixbench.snapshot import SnapshotError, snapshot_path

__all__ = ["StrategyConformance", "StrategyFixtures", "OracleTests", "SnapshotTests",
           "ThreadTests", "OptionTests", "RemovalTests", "branching_sequences", "check_answer",
           "check_locations"]

H0 = 0x6B17                     # chain seed of the kit's block ids


# ----------------------------------------------------------------------------- data
def branching_sequences(seed: int, n: int, max_new: int = 40) -> list[np.ndarray]:
    """``n`` chained block-id sequences forming a random tree: each continues a
    random prefix of an earlier one (or starts afresh) with new blocks."""
    rng = np.random.default_rng(seed)
    words: list[np.ndarray] = []
    for _ in range(n):
        base = np.empty(0, dtype=np.uint64)
        if words and rng.random() < 0.8:
            parent = words[int(rng.integers(len(words)))]
            base = parent[:int(rng.integers(len(parent) + 1))]
        new = rng.integers(1, 1 << 63, size=int(rng.integers(1, max_new + 1)), dtype=np.uint64)
        words.append(np.concatenate([base, new]))
    return [chain_ids(w, H0) for w in words]


def check_answer(got, want, ids: np.ndarray, exact: bool, where: str = "") -> None:
    """``got`` (the strategy's Match) against ``want`` (the oracle's) for query ``ids``."""
    n = got.n_blocks
    assert isinstance(n, (int, np.integer)) and 0 <= n <= len(ids), \
        f"{where}: n_blocks {n!r} for a query of {len(ids)} blocks"
    metas = np.asarray(got.metas)
    assert metas.dtype == np.uint8 and metas.shape == (n, want.metas.shape[1]), \
        f"{where}: metas of dtype {metas.dtype} and shape {metas.shape} for {n} blocks"
    assert n <= want.n_blocks, \
        f"{where}: matched {n} blocks, longer than the oracle's {want.n_blocks}"
    assert np.array_equal(metas, np.asarray(want.metas)[:n]), \
        f"{where}: returned metadata differs from the blocks' first inserts"
    if exact:
        assert n == want.n_blocks, \
            f"{where}: exact strategy matched {n} blocks, the oracle {want.n_blocks}"


def check_locations(got, want, exact: bool, where: str = "") -> None:
    """``got.locations`` (when the strategy reports them) against the oracle's: per
    matched block a non-empty subset of the oracle's bitmap, equal where ``exact``."""
    if got.locations is None:
        return
    n = got.n_blocks
    g = np.asarray(got.locations, dtype=np.uint64)
    w = np.asarray(want.locations, dtype=np.uint64)[:n]
    assert g.shape == (n,), f"{where}: {g.shape} locations for {n} blocks"
    assert np.all(g != 0), f"{where}: a matched block with no location"
    assert np.all(g & ~w == 0), f"{where}: locations {g.tolist()} beyond the oracle's {w.tolist()}"
    if exact:
        assert np.array_equal(g, w), f"{where}: locations {g.tolist()}, oracle {w.tolist()}"


def _names_as_fixtures(cls, names) -> None:
    """Turn plain class attributes (``strategy_name = "radix"``) into fixtures returning
    them, so the fixtures that depend on them (and parametrised overrides) just work."""
    for name in names:
        value = cls.__dict__.get(name)
        if isinstance(value, str):
            setattr(cls, name, pytest.fixture(name=name)(lambda self, _v=value: _v))


class _Instances:
    """Strategies (and their stores) built for one test; all closed at teardown."""

    def __init__(self, cls, options: dict, meta_size: int, engine: str | None):
        self.cls, self.options, self.meta_size, self.engine = cls, options, meta_size, engine
        self.open: list = []
        self.stores: list = []
        self.dirs: list[str] = []

    def store(self):
        """A fresh store of the kit's engine (None for strategies without one)."""
        if not self.cls.needs_store:
            return None
        from prefixbench.engines.base import StoreConfig
        factory = get_registry().get("engine", self.engine).factory
        path = tempfile.mkdtemp(prefix="pb-kit-")
        self.dirs.append(path)
        store = factory(StoreConfig(path=os.path.join(path, "store"), durability="off"))
        self.stores.append(store)
        return store

    def __call__(self, options: dict | None = None, store=None):
        """A new instance of the strategy (on a fresh store unless one is given)."""
        if store is None:
            store = self.store()
        s = self.cls(store, {**self.options, **(options or {})}, self.meta_size)
        self.open.append(s)
        return s

    def adopt(self, strategy):
        """Close ``strategy`` (e.g. a recovered one) with the rest at teardown."""
        self.open.append(strategy)
        return strategy

    def close(self, strategy) -> None:
        if strategy in self.open:
            self.open.remove(strategy)
            store = strategy.store
            strategy.close()
            if store in self.stores:
                self.stores.remove(store)

    def close_all(self) -> None:
        for s in reversed(self.open):
            s.close()
        for store in self.stores:
            store.close()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.open, self.stores, self.dirs = [], [], []


# ----------------------------------------------------------------------------- fixtures
class StrategyFixtures:
    """The fixtures every mixin below uses.  Override ``strategy_factory``, or name a
    registered strategy with ``strategy_name`` (a class attribute or a fixture)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _names_as_fixtures(cls, ("strategy_name", "engine_name"))

    @pytest.fixture
    def strategy_name(self):
        return None

    @pytest.fixture
    def strategy_factory(self, strategy_name):
        if strategy_name is None:
            pytest.fail("StrategyFixtures subclasses set strategy_name or override the "
                        "strategy_factory fixture")
        return get_registry().get("strategy", strategy_name).factory

    @pytest.fixture
    def strategy_options(self):
        """Options every instance of the kit gets (small sizes make the kit fast)."""
        return {}

    @pytest.fixture
    def meta_size(self):
        return 16

    @pytest.fixture
    def engine_name(self):
        """The engine a ``needs_store`` strategy is built on."""
        return "memory"

    @pytest.fixture
    def new_strategy(self, strategy_factory, strategy_options, meta_size, engine_name):
        """``new_strategy(options=None, store=None)``: an instance, closed at teardown;
        ``new_strategy.store()`` opens a fresh store of the kit's engine."""
        made = _Instances(strategy_factory, dict(strategy_options), meta_size, engine_name)
        yield made
        made.close_all()

    @pytest.fixture
    def strategy(self, new_strategy):
        return new_strategy()

    @pytest.fixture
    def oracle_factory(self, meta_size):
        """``oracle_factory()``: an empty exact radix oracle."""
        radix = get_registry().get("strategy", "radix").factory
        return lambda: radix(None, None, meta_size)


# ----------------------------------------------------------------------------- mixins
class OracleTests:
    """Answers held against the radix oracle on random branching traffic."""

    #: hypothesis examples per property, and any other ``hypothesis.settings`` keywords
    max_examples = 60
    hypothesis_settings: dict = {}

    def test_answers_against_the_oracle(self, new_strategy, oracle_factory, meta_size):
        """Never longer, never a wrong block or metadata, exact where ``exact``."""
        hyp = _hypothesis()
        st = hyp.strategies

        @st.composite
        def traffic(draw):
            # sequences over a small alphabet so siblings share prefixes at many depths
            seqs = []
            for _ in range(draw(st.integers(1, 8))):
                base = []
                if seqs and draw(st.booleans()):
                    parent = draw(st.sampled_from(seqs))
                    base = parent[:draw(st.integers(0, len(parent)))]
                seqs.append(base + draw(st.lists(st.integers(0, 3), max_size=40)))
            ops = draw(st.lists(st.tuples(st.sampled_from(("insert", "known", "match")),
                                          st.integers(0, len(seqs) - 1),
                                          st.integers(0, 120),
                                          st.lists(st.integers(0, 3), max_size=3)),
                                min_size=1, max_size=30))
            return [(kind, seqs[i][:cut] + extra) for kind, i, cut, extra in ops]

        exact = new_strategy.cls.exact

        @hyp.settings(**{"max_examples": self.max_examples, "deadline": None,
                         "suppress_health_check": list(hyp.HealthCheck),
                         **self.hypothesis_settings})
        @hyp.given(traffic())
        def check(ops):
            s, oracle = new_strategy(), oracle_factory()
            try:
                inserted = []
                for step, (kind, tokens) in enumerate(ops):
                    ids = chain_ids(np.asarray(tokens, dtype=np.uint64), H0)
                    if kind == "match":
                        check_answer(s.match(ids), oracle.match(ids), ids, exact,
                                     f"step {step}")
                        continue
                    metas = make_metas(ids, step, meta_size)
                    if kind == "known":
                        s.insert_known_prefix(ids, metas, oracle.match(ids).n_blocks)
                    else:
                        s.insert(ids, metas)
                    oracle.insert(ids, metas)
                    inserted.append(ids)
                for k, ids in enumerate(inserted):
                    check_answer(s.match(ids), oracle.match(ids), ids, exact,
                                 f"inserted sequence {k}")
            finally:
                new_strategy.close(s)
        check()

    def test_empty_query_and_empty_index(self, strategy, meta_size):
        ids = branching_sequences(1, 1)[0]
        for q in (ids[:0], ids):
            m = strategy.match(q)
            assert m.n_blocks == 0 and np.asarray(m.metas).shape == (0, meta_size)


class SnapshotTests:
    """``snapshot(dir)`` and ``Strategy.recover(store, dir, ...)``."""

    #: sequences inserted before (and, in durable mode, after) the snapshot
    snapshot_sequences = 60

    def _queries(self, seqs):
        return seqs + [q[:len(q) // 2] for q in seqs]

    def test_snapshot_recover_round_trip(self, new_strategy, tmp_path, meta_size):
        """A recovered instance answers every query exactly as the original did."""
        s = new_strategy()
        seqs = branching_sequences(2, self.snapshot_sequences)
        for i, q in enumerate(seqs):
            s.insert(q, make_metas(q, i, meta_size))
        before = [s.match(q) for q in self._queries(seqs)]
        info = s.snapshot(tmp_path)
        assert info["bytes"] > 0
        notes = []
        r = new_strategy.adopt(new_strategy.cls.recover(
            s.store, tmp_path, new_strategy.options, meta_size, durable_log=False,
            notify=notes.append))
        assert r.recovery["source"] == "snapshot" and notes == []
        for k, (q, b) in enumerate(zip(self._queries(seqs), before)):
            m = r.match(q)
            assert m.n_blocks == b.n_blocks, f"query {k}: {m.n_blocks} blocks, {b.n_blocks} before"
            assert np.array_equal(np.asarray(m.metas), np.asarray(b.metas)), f"query {k}"

    def test_inserts_after_the_snapshot_are_not_lost(self, new_strategy, tmp_path, meta_size,
                                                     oracle_factory):
        """Durable mode: inserts acknowledged after the last snapshot come back after a
        crash (the instance dropped, nothing closed), with their first metadata."""
        s = new_strategy()
        oracle = oracle_factory()
        s.enable_log(tmp_path)
        seqs = branching_sequences(3, 2 * self.snapshot_sequences)
        half = len(seqs) // 2
        for i, q in enumerate(seqs):
            if i == half:
                s.snapshot(tmp_path)
            metas = make_metas(q, i, meta_size)
            s.insert(q, metas)
            oracle.insert(q, metas)
        before = [s.match(q) for q in seqs]
        r = new_strategy.adopt(new_strategy.cls.recover(
            s.store, tmp_path, new_strategy.options, meta_size, durable_log=False,
            notify=lambda line: None))
        for k, (q, b) in enumerate(zip(seqs, before)):
            m = r.match(q)
            check_answer(m, oracle.match(q), q, new_strategy.cls.exact, f"sequence {k}")
            assert m.n_blocks >= b.n_blocks, \
                f"sequence {k}: {m.n_blocks} blocks after recovery, {b.n_blocks} before"

    def test_corrupt_snapshot_is_never_served(self, new_strategy, tmp_path, meta_size,
                                              oracle_factory):
        """A flipped byte: one clear SnapshotError line, or a rebuild (with a note)
        whose answers still hold against the oracle."""
        s = new_strategy()
        oracle = oracle_factory()
        seqs = branching_sequences(4, self.snapshot_sequences)
        for i, q in enumerate(seqs):
            metas = make_metas(q, i, meta_size)
            s.insert(q, metas)
            oracle.insert(q, metas)
        s.snapshot(tmp_path)
        path = snapshot_path(tmp_path)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x5A]))
        notes = []
        try:
            r = new_strategy.cls.recover(s.store, tmp_path, new_strategy.options, meta_size,
                                         durable_log=False, notify=notes.append)
        except SnapshotError as e:
            assert "\n" not in str(e) and str(tmp_path) in str(e), str(e)
            return
        new_strategy.adopt(r)
        assert r.recovery["source"] != "snapshot", "a corrupt snapshot was served"
        assert len(notes) == 1 and "\n" not in notes[0], notes
        for k, q in enumerate(seqs):
            check_answer(r.match(q), oracle.match(q), q, False, f"sequence {k}")


class ThreadTests:
    """One instance serving several request threads at once."""

    threads = 4
    #: sequences each thread inserts (they share prefixes across threads)
    thread_sequences = 40

    def test_threads_match_and_insert_concurrently(self, new_strategy, oracle_factory,
                                                   meta_size):
        """Every answer during the run is a verified prefix; afterwards every sequence
        holds against an oracle of all inserts (metadata depends on the block alone,
        so any interleaving gives the same first metadata)."""
        s = new_strategy()
        n = self.threads
        seqs = branching_sequences(5, n * self.thread_sequences)
        oracle = oracle_factory()
        for q in seqs:
            oracle.insert(q, make_metas(q, 0, meta_size))
        errors: list[str] = []
        start = threading.Barrier(n)

        def work(t: int):
            try:
                start.wait()
                for k in range(t, len(seqs), n):
                    q = seqs[k]
                    for query in (q, q[:len(q) // 2]):
                        m = s.match(query)
                        check_answer(m, oracle.match(query), query, False, f"thread {t}")
                    s.insert(q, make_metas(q, 0, meta_size))
            except BaseException as e:          # reported by the main thread
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
                start.abort()

        workers = [threading.Thread(target=work, args=(t,)) for t in range(n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == []
        drain = getattr(s, "drain", None)
        if drain is not None:
            drain()
        for k, q in enumerate(seqs):
            check_answer(s.match(q), oracle.match(q), q, new_strategy.cls.exact,
                         f"sequence {k} after the threads")


class OptionTests:
    """Options: defaults build, bad names and values are one line naming the option."""

    def test_defaults_build_and_report_stats(self, strategy):
        stats = strategy.stats()
        assert isinstance(stats, dict)

    def test_unknown_option_is_one_line(self, new_strategy):
        with pytest.raises(ConfigError) as e:
            new_strategy({"no_such_option": "1"})
        msg = str(e.value)
        assert "no_such_option" in msg and "\n" not in msg, msg

    def test_bad_option_values_are_one_line(self, new_strategy):
        spec = new_strategy.cls.options
        for name, opt in spec.items():
            for value in _bad_values(opt):
                with pytest.raises(ConfigError) as e:
                    new_strategy({name: value})
                msg = str(e.value)
                assert name in msg and "\n" not in msg, (name, value, msg)
        if not spec:
            pytest.skip("the strategy has no options")

    def test_needs_store_without_one_is_one_line(self, new_strategy, meta_size):
        cls = new_strategy.cls
        if not cls.needs_store:
            pytest.skip("the strategy needs no store")
        with pytest.raises(ConfigError) as e:
            cls(None, new_strategy.options, meta_size)
        assert "engine" in str(e.value) and "\n" not in str(e.value)


class RemovalTests:
    """``remove`` and ``clear`` against the oracle (skipped without ``supports_remove``)."""

    removal_examples = 40
    #: workers the removal properties use (capped by the strategy's ``max_workers``)
    removal_workers = 3
    removal_threads = 3

    def _removing(self, new_strategy):
        cls = new_strategy.cls
        if not cls.supports_remove:
            pytest.skip(f"strategy {cls.name} does not support remove")
        return cls, max(1, min(self.removal_workers, cls.max_workers))

    def test_remove_against_the_oracle(self, new_strategy, oracle_factory, meta_size):
        """Interleaved insert, match, remove and clear on several workers."""
        cls, workers = self._removing(new_strategy)
        hyp = _hypothesis()
        st = hyp.strategies
        kinds = ("insert", "insert", "match", "remove", "remove", "remove-all", "clear",
                 "reclaim")

        @st.composite
        def traffic(draw):
            seqs = []
            for _ in range(draw(st.integers(1, 6))):
                base = []
                if seqs and draw(st.booleans()):
                    parent = draw(st.sampled_from(seqs))
                    base = parent[:draw(st.integers(0, len(parent)))]
                seqs.append(base + draw(st.lists(st.integers(0, 3), max_size=30)))
            ops = draw(st.lists(st.tuples(st.sampled_from(kinds),
                                          st.integers(0, len(seqs) - 1),
                                          st.integers(0, 60), st.integers(0, workers - 1),
                                          st.integers(0, 40), st.integers(0, 40),
                                          st.integers(0, 9)),
                                min_size=3, max_size=40))
            return [(kind, seqs[i][:cut], w, lo, hi, r) for kind, i, cut, w, lo, hi, r in ops]

        @hyp.settings(**{"max_examples": self.removal_examples, "deadline": None,
                         "suppress_health_check": list(hyp.HealthCheck),
                         **getattr(self, "hypothesis_settings", {})})
        @hyp.given(traffic())
        def check(ops):
            s, oracle = new_strategy(), oracle_factory()
            try:
                seen = []
                for step, (kind, tokens, w, lo, hi, r) in enumerate(ops):
                    ids = chain_ids(np.asarray(tokens, dtype=np.uint64), H0)
                    where = f"step {step} ({kind} on worker {w})"
                    if kind == "insert":
                        metas = make_metas(ids, step, meta_size)
                        s.insert(ids, metas, w)
                        oracle.insert(ids, metas, w)
                        seen.append(ids)
                    elif kind in ("remove", "remove-all"):
                        a, b = sorted((lo * len(ids) // 40, hi * len(ids) // 40 + 1))
                        part = np.ascontiguousarray(ids[a:b])
                        worker = None if kind == "remove-all" else w
                        got, want = s.remove(part, worker), oracle.remove(part, worker)
                        if cls.exact_remove_count:
                            assert got == want, f"{where}: removed {got}, oracle {want}"
                    elif kind == "clear" and r < 3:       # rarer than the rest
                        worker = None if r == 0 else w
                        s.clear(worker)
                        oracle.clear(worker)
                    elif kind == "reclaim" and callable(getattr(s, "reclaim", None)):
                        s.reclaim()         # space reclamation at a random point
                    got, want = s.match(ids), oracle.match(ids)
                    check_answer(got, want, ids, cls.exact, where)
                    check_locations(got, want, cls.exact, where)
                for k, ids in enumerate(seen):
                    got, want = s.match(ids), oracle.match(ids)
                    check_answer(got, want, ids, cls.exact, f"inserted sequence {k}")
                    check_locations(got, want, cls.exact, f"inserted sequence {k}")
            finally:
                new_strategy.close(s)
        check()

    def test_removed_block_comes_back_with_the_new_metadata(self, new_strategy, meta_size):
        cls, _w = self._removing(new_strategy)
        s = new_strategy()
        q = branching_sequences(11, 1, 20)[0]
        s.insert(q, make_metas(q, 1, meta_size))
        s.remove(np.ascontiguousarray(q[5:6]))
        assert s.match(q).n_blocks <= 5
        fresh = make_metas(q, 2, meta_size)
        s.insert(q, fresh)
        m = s.match(q)
        assert np.array_equal(np.asarray(m.metas)[5:6], fresh[5:6]) if m.n_blocks > 5 else True
        assert np.array_equal(np.asarray(m.metas)[:5], make_metas(q, 1, meta_size)[:min(5, m.n_blocks)])
        before = s.stats().get("remove_noops", 0)
        s.remove(np.ascontiguousarray(q[:2]))
        s.remove(np.ascontiguousarray(q[:2]))             # already gone: counted no-ops
        assert s.stats().get("remove_noops", 0) - before >= 2
        assert s.match(q).n_blocks == 0
        s.clear()
        assert s.match(q).n_blocks == 0

    def test_removes_after_the_snapshot_are_never_served(self, new_strategy, tmp_path,
                                                         meta_size, oracle_factory):
        """Durable mode: a crash after removes, worker inserts and a clear of one
        worker; the recovered instance serves none of what was removed."""
        cls, workers = self._removing(new_strategy)
        s = new_strategy()
        oracle = oracle_factory()
        s.enable_log(tmp_path)
        seqs = branching_sequences(12, 30)
        for i, q in enumerate(seqs):
            if i == 10:
                s.snapshot(tmp_path)
            metas = make_metas(q, i, meta_size)
            w = i % workers
            for target in (s, oracle):
                target.insert(q, metas, w)
            if i % 3 == 2:      # a sequence inserted on worker 0, which the clear spares
                cut = np.ascontiguousarray(seqs[i - 2][len(seqs[i - 2]) // 2:])
                for target in (s, oracle):
                    target.remove(cut, None if i % 2 else (i - 2) % workers)
            if i == 20:
                s.snapshot(tmp_path)
        if workers > 1:
            s.clear(1)
            oracle.clear(1)
        r = new_strategy.adopt(cls.recover(s.store, tmp_path, new_strategy.options, meta_size,
                                           durable_log=False, notify=lambda line: None))
        for k, q in enumerate(seqs):
            got, want = r.match(q), oracle.match(q)
            check_answer(got, want, q, False, f"sequence {k} after recovery")
            check_locations(got, want, False, f"sequence {k} after recovery")

    def test_threads_remove_and_insert_concurrently(self, new_strategy, oracle_factory,
                                                    meta_size):
        """Each thread inserts, removes and re-inserts on its own worker (or, with one
        location, its own sequences); afterwards the index equals an oracle that ran
        every thread's operations, which commute."""
        cls, workers = self._removing(new_strategy)
        n = self.removal_threads
        shared = workers >= n
        s = new_strategy()
        plans = []
        for t in range(n):
            seqs = branching_sequences(21 if shared else 21 + t, 12)
            w = t if shared else 0
            ops = []
            for k, q in enumerate(seqs):
                ops.append(("insert", q, make_metas(q, 100 * t + k, meta_size), w))
                if k % 2:
                    ops.append(("remove", np.ascontiguousarray(q[len(q) // 3:]), None, w))
                if k % 4 == 3:
                    ops.append(("insert", q, make_metas(q, 100 * t + 50 + k, meta_size), w))
            plans.append((seqs, ops))
        errors: list[str] = []
        start = threading.Barrier(n)

        def work(t: int):
            try:
                start.wait()
                for kind, q, metas, w in plans[t][1]:
                    if kind == "insert":
                        s.insert(q, metas, w)
                    else:
                        s.remove(q, w)
                    m = s.match(q)
                    assert 0 <= m.n_blocks <= len(q)
            except BaseException as e:          # reported by the main thread
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
                start.abort()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        drain = getattr(s, "drain", None)
        if drain is not None:
            drain()
        if callable(getattr(s, "reclaim", None)):
            s.reclaim()
        oracle = oracle_factory()
        for _seqs, ops in plans:
            for kind, q, metas, w in ops:
                if kind == "insert":
                    oracle.insert(q, metas, w)
                else:
                    oracle.remove(q, w)
        for t, (seqs, _ops) in enumerate(plans):
            for k, q in enumerate(seqs):
                got, want = s.match(q), oracle.match(q)
                check_answer(got, want, q, cls.exact, f"thread {t} sequence {k}")
                check_locations(got, want, cls.exact, f"thread {t} sequence {k}")

    def test_bad_remove_arguments_are_one_line(self, new_strategy):
        cls, _w = self._removing(new_strategy)
        s = new_strategy()
        q = branching_sequences(13, 1)[0]
        for bad in (q.tolist(), q.astype(np.int64), np.stack([q, q])):
            with pytest.raises(ConfigError) as e:
                s.remove(bad)
            assert "uint64" in str(e.value) and "\n" not in str(e.value)
        for worker in (cls.max_workers, -1, "0"):
            for call in (lambda: s.remove(q, worker), lambda: s.clear(worker),
                         lambda: s.insert(q, make_metas(q, 0, s.meta_size), worker)):
                with pytest.raises(ConfigError) as e:
                    call()
                assert "worker" in str(e.value) and "\n" not in str(e.value)


class StrategyConformance(StrategyFixtures, OracleTests, SnapshotTests, ThreadTests,
                          OptionTests, RemovalTests):
    """The whole kit: subclass and set ``strategy_name`` (or ``strategy_factory``)."""


# ----------------------------------------------------------------------------- helpers
def _bad_values(opt) -> list[str]:
    """Values ``opt`` must refuse, as a user types them (``-S key=value``)."""
    kind = type(opt.default)
    bad = []
    if kind is bool:
        bad.append("maybe")
    elif kind in (int, float):
        bad.append("not-a-number")
    if opt.choices is not None:
        bad.append("no-such-choice")
    if opt.min is not None and kind in (int, float):
        bad.append(str(kind(opt.min) - 1))
    if opt.max is not None and kind in (int, float):
        bad.append(str(kind(opt.max) + 1))
    return bad


def _hypothesis():
    try:
        import hypothesis
        import hypothesis.strategies  # noqa: F401
    except ImportError:
        pytest.fail("the strategy kit's property tests need hypothesis: pip install hypothesis")
    return hypothesis
