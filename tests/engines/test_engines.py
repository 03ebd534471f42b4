"""The conformance kit on every built-in engine, plus engine-specific behaviour."""
import os
import random
import subprocess
import sys
import threading

import pytest

from prefixbench.engines.base import StoreConfig, allocated_bytes
from prefixbench.engines.conformance import EngineConformance, EngineFixtures, RoundTripTests
from prefixbench.engines.lmdb import LmdbStore
from prefixbench.engines.memory import MemoryStore
from prefixbench.engines.rocksdb import RocksDBStore
from prefixbench.engines.wiredtiger import URI, WiredTigerStore
from prefixbench.errors import ConfigError, MissingDependencyError, StoreError


class TestMemory(EngineConformance):
    @pytest.fixture
    def engine_factory(self):
        return MemoryStore


class TestMemoryByRegistryName(EngineConformance):
    """The ``engine_name`` route: the kit resolves the engine through the registry."""

    @pytest.fixture
    def engine_name(self):
        return "memory"


class TestMemoryByClassAttribute(EngineFixtures, RoundTripTests):
    """A plain class attribute names the engine too, and one mixin runs on its own."""

    engine_name = "memory"


class TestLmdb(EngineConformance):
    @pytest.fixture
    def engine_factory(self):
        return LmdbStore


class TestLmdbGrowingFromTinyMap(EngineConformance):
    """The whole kit again with a 64 KiB initial map: every test makes the map grow."""

    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return LmdbStore

    @pytest.fixture
    def engine_config(self):
        return {"options": {"map_size": 64 << 10}}


class TestRocksDB(EngineConformance):
    @pytest.fixture
    def engine_factory(self):
        return RocksDBStore


class TestWiredTiger(EngineConformance):
    kill_rounds = 2          # each reopen replays the log in a diagnostic build: slow

    @pytest.fixture
    def engine_factory(self):
        pytest.importorskip("wiredtiger")
        return WiredTigerStore

    @pytest.fixture
    def engine_config(self):
        return {"options": {"log_file_max": "4MiB"}}   # the default 100 MB log opens in ~1 s


# ----- LMDB map growth -------------------------------------------------------

def test_lmdb_map_full_never_reaches_the_caller(tmp_path):
    rng = random.Random(11)
    expect = {}
    with LmdbStore(StoreConfig(path=str(tmp_path / "s"), options={"map_size": 64 << 10})) as s:
        start = s.map_size()
        for b in range(40):                       # ~6 MiB in batches of growing size
            items = [(b * 1000 + i, rng.randbytes(rng.randrange(1, 9000))) for i in range(b + 1)]
            s.put_many(items)
            expect.update(items)
        s.put(10**9, rng.randbytes(3 << 20))     # one value larger than the map so far
        expect[10**9] = s.get(10**9)
        assert s.map_size() > 8 * start
        assert s.get_many(list(expect)) == list(expect.values())
    with LmdbStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                               options={"map_size": 64 << 10})) as again:
        assert dict(again.scan()) == expect


def test_lmdb_map_grows_while_readers_run(tmp_path):
    """Resizing closes every transaction of the process: readers must never see that."""
    s = LmdbStore(StoreConfig(path=str(tmp_path / "s"), options={"map_size": 64 << 10}))
    fixed = {k * 3: b"fixed-%d" % k for k in range(200)}
    s.put_many(fixed.items())
    keys = list(fixed) + [1, 2, 4]
    errors, stop = [], threading.Event()

    def reader(seed):
        r = random.Random(seed)
        try:
            while not stop.is_set():
                batch = r.sample(keys, 16)
                if s.get_many(batch) != [fixed.get(k) for k in batch]:
                    errors.append("get_many")
                k = r.choice(keys)
                if s.get(k) != fixed.get(k):
                    errors.append("get")
                got = [k for k, _ in s.scan(0, 600)]
                if got != sorted(fixed):
                    errors.append("scan")
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        start = s.map_size()
        for b in range(60):
            s.put_many((10**6 + b * 100 + i, bytes(4000)) for i in range(100))
    finally:
        stop.set()
        for t in threads:
            t.join()
        grew = s.map_size() // start
        s.close()
    assert errors == []
    assert grew >= 64


def test_lmdb_refuses_direct_io(tmp_path):
    with pytest.raises(ConfigError, match="direct_io"):
        LmdbStore(StoreConfig(path=str(tmp_path / "s"), direct_io=True))
    assert not (tmp_path / "s").exists()


def test_size_options_accept_cli_strings(tmp_path):
    with LmdbStore(StoreConfig(path=str(tmp_path / "s"), options={"map_size": "64KiB"})) as s:
        assert s.map_size() == 64 << 10
    with pytest.raises(ConfigError, match="map_size"):
        LmdbStore(StoreConfig(path=str(tmp_path / "t"), options={"map_size": "lots"}))


@pytest.mark.parametrize("cls", [LmdbStore, RocksDBStore, WiredTigerStore, MemoryStore])
def test_unknown_engine_option_is_named(cls, tmp_path):
    if cls is WiredTigerStore:
        pytest.importorskip("wiredtiger")
    with pytest.raises(ConfigError, match="'colour'"):
        cls(StoreConfig(path=str(tmp_path / "s"), options={"colour": "blue"}))


# ----- RocksDB ---------------------------------------------------------------

def test_rocksdb_direct_io_round_trip(tmp_path):
    """Data flushed to SST files and read back with O_DIRECT reads and compaction I/O."""
    rng = random.Random(12)
    items = {rng.getrandbits(64): rng.randbytes(rng.randrange(300)) for _ in range(5000)}
    path = str(tmp_path / "s")
    with RocksDBStore(StoreConfig(path=path, direct_io=True, durability="off")) as s:
        s.put_many(items.items())
        s.sync()                                  # no WAL: flushes the memtable to SST
    assert any(name.endswith(".sst") for name in os.listdir(path))
    with RocksDBStore(StoreConfig(path=path, direct_io=True, create=False)) as s:
        assert s.get_many(list(items)) == list(items.values())
        assert list(s.scan()) == sorted(items.items())


def test_rocksdb_splits_the_budget(tmp_path):
    with RocksDBStore(StoreConfig(path=str(tmp_path / "a"), cache_bytes=64 << 20)) as s:
        assert (s.block_cache_bytes, s.write_buffer_bytes) == (32 << 20, 16 << 20)
    with RocksDBStore(StoreConfig(path=str(tmp_path / "b"), cache_bytes=64 << 20,
                                  options={"write_buffer_bytes": "8MiB"})) as s:
        assert (s.block_cache_bytes, s.write_buffer_bytes) == (56 << 20, 4 << 20)
    with pytest.raises(ConfigError, match="write_buffer_bytes"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "c"), cache_bytes=1 << 20,
                                 options={"write_buffer_bytes": 2 << 20}))


def test_rocksdb_reopened_store_keeps_the_budget(tmp_path):
    """A reopened store (recovery, a checkpoint's clone) gets the budget's block cache
    and memtables, not the defaults rocksdict reads from the store's OPTIONS file."""
    path = str(tmp_path / "s")
    config = StoreConfig(path=path, cache_bytes=4 << 20, options={"l0_compaction_trigger": "6"})
    with RocksDBStore(config) as s:
        s.put(1, b"x")
    for _ in range(2):
        with RocksDBStore(StoreConfig(path=path, cache_bytes=4 << 20, create=False)) as s:
            db = s._db
            assert db.property_int_value("rocksdb.block-cache-capacity") == 2 << 20
            assert s.get(1) == b"x"
        text = max((tmp_path / "s").glob("OPTIONS-*")).read_text()
        assert "\n  write_buffer_size=1048576\n" in text
        assert "\n  level0_file_num_compaction_trigger=4\n" in text     # this open's own


@pytest.mark.parametrize("in_cache", ["false", "true"])
def test_rocksdb_index_and_filters_outside_the_cache_are_reported(tmp_path, in_cache):
    """RocksDB's default keeps index and filter blocks in the table readers; that
    memory is reported, and with ``index_in_cache`` there is none to report."""
    path = str(tmp_path / "s")
    with RocksDBStore(StoreConfig(path=path, durability="off",
                                  options={"index_in_cache": in_cache})) as s:
        s.put_many((i, bytes(100)) for i in range(20000))
        s.flush()
        assert s.get_many([5, 20001]) == [bytes(100), None]
        outside = s.memory_outside_budget()
        assert (outside > 0) == (in_cache == "false"), outside


def test_rocksdb_index_in_cache_takes_only_yes_or_no(tmp_path):
    with pytest.raises(ConfigError, match="index_in_cache.*'sometimes'"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "s"),
                                 options={"index_in_cache": "sometimes"}))
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("given, want", [(None, (4, 20, 36)), ("16", (16, 32, 48))])
def test_rocksdb_l0_compaction_trigger_reaches_rocksdb_with_its_stall_triggers(tmp_path, given,
                                                                            want):
    options = {} if given is None else {"l0_compaction_trigger": given}
    path = tmp_path / "s"
    with RocksDBStore(StoreConfig(path=str(path), options=options)) as s:
        s.put_many((i, bytes(10)) for i in range(10))
    text = max(path.glob("OPTIONS-*")).read_text()
    got = tuple(int(text.split(f"\n  {name}=")[1].split("\n")[0])
                for name in ("level0_file_num_compaction_trigger",
                             "level0_slowdown_writes_trigger", "level0_stop_writes_trigger"))
    assert got == want


@pytest.mark.parametrize("given, want", [(None, 4096), ("64KiB", 65536)])
def test_rocksdb_block_bytes_is_the_tables_block_size(tmp_path, given, want):
    options = {} if given is None else {"block_bytes": given}
    path = tmp_path / "s"
    with RocksDBStore(StoreConfig(path=str(path), options=options)) as s:
        s.put_many((i, bytes(100)) for i in range(1000))
        assert s.block_bytes == want
    text = max(path.glob("OPTIONS-*")).read_text()
    assert f"\n  block_size={want}\n" in text


@pytest.mark.parametrize("given, want", [(None, "kSnappyCompression"), ("none", "kNoCompression"),
                                         ("lz4", "kLZ4Compression"), ("zstd", "kZSTD")])
def test_rocksdb_compression_reaches_the_tables(tmp_path, given, want):
    """``compression`` is what RocksDB writes its tables with, and every kind reads
    back what was stored."""
    options = {} if given is None else {"compression": given}
    path = tmp_path / "s"
    with RocksDBStore(StoreConfig(path=str(path), durability="off", options=options)) as s:
        s.put_many((i, i.to_bytes(8, "little") * 8) for i in range(3000))
        s.flush()
        assert s.get_many([0, 2999, 3000]) == [bytes(64), (2999).to_bytes(8, "little") * 8, None]
        assert s.compression == (given or "snappy")
    text = max(path.glob("OPTIONS-*")).read_text()
    assert f"\n  compression={want}\n" in text


def test_rocksdb_compression_refuses_an_unknown_kind(tmp_path):
    with pytest.raises(ConfigError, match="option compression: 'brotli' is not one of snappy"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "s"), options={"compression": "brotli"}))
    assert not (tmp_path / "s").exists()


def test_rocksdb_level_files_count_the_table_files_by_level(tmp_path):
    """``level_files`` holds every table file of the store, by level; an engine
    without levels has none to give."""
    path = tmp_path / "s"
    with RocksDBStore(StoreConfig(path=str(path), durability="off")) as s:
        assert s.level_files() == {}
        for k in range(3):
            s.put_many((i, bytes(50)) for i in range(k * 100, k * 100 + 100))
            s.flush()
        files = s.level_files()
        assert sum(files.values()) == len(list(path.glob("*.sst"))) == 3
        assert all(isinstance(level, int) and n > 0 for level, n in files.items())
    with MemoryStore(StoreConfig()) as m:
        assert m.level_files() is None


def test_rocksdb_block_bytes_refuses_a_tiny_block(tmp_path):
    with pytest.raises(ConfigError, match="option block_bytes: 100 must be"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "s"), options={"block_bytes": "100"}))
    assert not (tmp_path / "s").exists()


def test_rocksdb_l0_compaction_trigger_refuses_zero(tmp_path):
    with pytest.raises(ConfigError, match="option l0_compaction_trigger: 0 must be"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "s"), options={"l0_compaction_trigger": "0"}))
    assert not (tmp_path / "s").exists()


def test_rocksdb_io_counters_say_where_reads_were_served(tmp_path):
    """With ``statistics`` on, a get the memtable answers counts as a memtable hit,
    a get of a flushed key as a file read or a cache hit, and a flush counts bytes."""
    path = str(tmp_path / "s")
    with RocksDBStore(StoreConfig(path=path, durability="off", cache_bytes=1 << 20,
                                  options={"statistics": "true"})) as s:
        start = s.io_counters()
        assert set(start) == set(s.IO_COUNTERS)
        s.put_many((i, bytes(100)) for i in range(1, 2000))
        assert s.get(5) == bytes(100)
        mid = s.io_counters()
        assert mid["memtable_hits"] == start["memtable_hits"] + 1
        assert mid["flush_bytes"] == start["flush_bytes"]
        s.flush()
        flushed = s.io_counters()
        assert flushed["flush_bytes"] > mid["flush_bytes"]
        assert s.get_many([7, 1500]) == [bytes(100), bytes(100)]
        after = s.io_counters()
        assert after["memtable_hits"] == flushed["memtable_hits"]
        served = (after["device_reads"] - flushed["device_reads"]
                  + after["cache_hits"] - flushed["cache_hits"])
        assert served >= 2, after


@pytest.mark.parametrize("row", [0, 512 << 10])
def test_rocksdb_row_cache_takes_the_block_caches_share_and_serves_rereads(tmp_path, row):
    """``row_cache_bytes`` comes out of the block cache's share (the budget stays
    ``cache_bytes``); here it is all of it, so no block cache is left, and a record
    read again comes from the row cache, not the file.  Without it, the same
    reread goes to the file."""
    if row:
        options = {"statistics": "true", "write_buffer_bytes": 512 << 10, "row_cache_bytes": row}
    else:                                           # no block cache, no row cache
        options = {"statistics": "true", "write_buffer_bytes": 1 << 20}
    with RocksDBStore(StoreConfig(path=str(tmp_path / "s"), durability="off", cache_bytes=1 << 20,
                                  options=options)) as s:
        assert s.row_cache_bytes == row
        assert s.block_cache_bytes == 0
        s.put_many((i, bytes([i % 251]) * 100) for i in range(1, 2000))
        s.flush()
        assert s.get_many([7, 1500]) == [bytes([7]) * 100, bytes([1500 % 251]) * 100]
        before = s.io_counters()
        assert s.get_many([7, 1500]) == [bytes([7]) * 100, bytes([1500 % 251]) * 100]
        after = s.io_counters()
    reads = after["device_reads"] - before["device_reads"]
    hits = after["cache_hits"] - before["cache_hits"]
    assert (reads, hits) == ((0, 2) if row else (2, 0))


@pytest.mark.parametrize("given, message", [
    ("1MiB", r"option row_cache_bytes: 1048576 exceeds the block cache's share of cache_bytes "
             r"\(524288\)"),
    ("lots", r"option row_cache_bytes: 'lots' is not a size"),
    ("-1", r"option row_cache_bytes: '-1' is not a size")])
def test_rocksdb_row_cache_refuses_more_than_the_block_caches_share(tmp_path, given, message):
    with pytest.raises(ConfigError, match=message):
        RocksDBStore(StoreConfig(path=str(tmp_path / "s"), cache_bytes=1 << 20,
                                 options={"row_cache_bytes": given}))
    assert not (tmp_path / "s").exists()


def test_rocksdb_io_counters_are_off_by_default_and_take_only_yes_or_no(tmp_path):
    with RocksDBStore(StoreConfig(path=str(tmp_path / "a"))) as s:
        assert s.io_counters() is None
    with pytest.raises(ConfigError, match="statistics.*'loud'"):
        RocksDBStore(StoreConfig(path=str(tmp_path / "b"), options={"statistics": "loud"}))
    assert not (tmp_path / "b").exists()


def test_rocksdb_settle_leaves_no_flush_or_compaction_owed(tmp_path):
    """Writes scattered over the key space through a small memtable leave L0 files
    and compactions behind; settle returns once none is pending or running."""
    rng = random.Random(9)
    path = str(tmp_path / "s")
    with RocksDBStore(StoreConfig(path=path, durability="off", cache_bytes=1 << 20)) as s:
        keys = [rng.getrandbits(63) for _ in range(40000)]
        for lo in range(0, len(keys), 2000):
            s.put_many((k, bytes(200)) for k in keys[lo:lo + 2000])
        s.settle(timeout=120)
        db = s._db
        assert db.property_int_value("rocksdb.num-entries-active-mem-table") == 0
        assert [db.property_int_value(p) for p in s._BACKGROUND] == [0] * len(s._BACKGROUND)
        assert s.get_many(keys[::997]) == [bytes(200)] * len(keys[::997])



# ----- WiredTiger ------------------------------------------------------------

def test_wiredtiger_size_on_disk_leaves_out_preallocated_logs(tmp_path):
    pytest.importorskip("wiredtiger")
    path = str(tmp_path / "s")
    with WiredTigerStore(StoreConfig(path=path)) as s:
        s.put_many((i, bytes(1000)) for i in range(1000))
        s.sync()
        assert allocated_bytes(path) >= 100 << 20          # the log files are there
        assert 1 << 20 <= s.size_on_disk() < 20 << 20       # but are not counted


def test_wiredtiger_cache_is_clamped_to_its_minimum(tmp_path):
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"), cache_bytes=0)) as s:
        assert s.cache_size == 1 << 20
        s.put(1, b"x")
        assert s.get(1) == b"x"


def test_wiredtiger_reclaims_sessions_of_finished_threads(tmp_path):
    """More short-lived threads than session_max: each ended thread's session is closed."""
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"),
                                     options={"session_max": 16})) as s:
        s.put(1, b"x")
        seen = []
        for _ in range(40):
            t = threading.Thread(target=lambda: seen.append(s.get_many([1, 2])))
            t.start()
            t.join()
        assert seen == [[b"x", None]] * 40


def test_wiredtiger_concurrent_writers_on_the_same_keys(tmp_path):
    """Write conflicts (WT_ROLLBACK) between threads are retried, never raised."""
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"))) as s:
        errors = []

        def writer(tag):
            try:
                for n in range(100):
                    s.put_many((k, b"%d-%d" % (tag, n)) for k in range(20))
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        final = s.get_many(range(20))
        assert len(set(final)) == 1 and final[0].endswith(b"-99")   # batches stay atomic


def test_wiredtiger_batch_larger_than_the_cache_is_a_clear_error(tmp_path):
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"), cache_bytes=1 << 20)) as s:
        s.put(1, b"kept")
        with pytest.raises(StoreError, match="does not fit in the 1 MiB cache"):
            s.put_many((k, bytes(64)) for k in range(2, 100_000))   # ~6 MiB: never fits
        assert s.get(1) == b"kept" and s.get(2) is None
        s.put(3, b"still usable")
        assert s.get(3) == b"still usable"


@pytest.mark.timeout(120)
def test_wiredtiger_write_waiting_for_cache_room_returns(tmp_path):
    """A commit that waits for eviction no longer waits forever: another session's
    uncommitted batch fills the 1 MiB cache, so eviction can free nothing."""
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"), durability="off",
                                     cache_bytes=1 << 20,
                                     options={"cache_max_wait_ms": 50})) as s:
        with open(os.path.join(s.path, "WiredTiger.basecfg")) as f:
            assert "cache_max_wait_ms=50\n" in f.read()   # the option reached wiredtiger_open
        # The filler may wait as long as it needs (0: forever), so that on a slow
        # machine it is not itself rolled back for cache overflow; the store's
        # own writes below wait at most the 50 ms it was opened with.
        s._conn.reconfigure("cache_max_wait_ms=0")
        other = s._conn.open_session()
        cur = other.open_cursor(URI, None, None)
        other.begin_transaction()
        for k in range(200):                # ~800 KB held uncommitted
            cur.set_key(1_000_000 + k)
            cur.set_value(os.urandom(4000))
            cur.insert()
        s._conn.reconfigure(f"cache_max_wait_ms={s.cache_max_wait_ms}")
        for k in range(3):
            s.put(k, b"v%d" % k)
        other.rollback_transaction()
        other.close()
        assert s.get_many(range(3)) == [b"v0", b"v1", b"v2"]


class _OverflowingSession:
    """A WiredTiger session whose commits roll back for cache overflow, as
    ``cache_max_wait_ms`` makes them when eviction cannot free room."""

    def __init__(self, rollback_error):
        self.error, self.commits = rollback_error, 0

    def begin_transaction(self):
        pass

    def commit_transaction(self):
        self.commits += 1
        raise self.error("WT_ROLLBACK")

    def rollback_transaction(self):
        pass

    def get_rollback_reason(self):
        return "transaction rolled back because of cache overflow"


def test_wiredtiger_cache_overflow_is_one_clear_error_without_retries(tmp_path):
    pytest.importorskip("wiredtiger")
    with WiredTigerStore(StoreConfig(path=str(tmp_path / "s"))) as s:
        s.put(1, b"kept")
        session = s._state()[0]
        fake = _OverflowingSession(s._wt.WiredTigerRollbackError)
        s._tls.session = fake
        try:
            with pytest.raises(StoreError) as e:
                s.put(2, b"lost")
        finally:
            s._tls.session = session
        assert fake.commits == 1
        msg = str(e.value)
        assert "\n" not in msg and str(tmp_path / "s") in msg
        assert "10000 ms" in msg and "cache_max_wait_ms" in msg
        assert s.get(1) == b"kept"


def test_wiredtiger_cache_max_wait_ms_rejects_a_negative_value(tmp_path):
    pytest.importorskip("wiredtiger")
    with pytest.raises(ConfigError, match="option cache_max_wait_ms: -1 must be an integer >= 0"):
        WiredTigerStore(StoreConfig(path=str(tmp_path / "s"),
                                    options={"cache_max_wait_ms": -1}))
    assert not (tmp_path / "s").exists()


# ----- dependencies ----------------------------------------------------------

@pytest.mark.parametrize("cls, module, hint", [
    (WiredTigerStore, "wiredtiger", "pip install 'prefixbench[wiredtiger]'"),
    (LmdbStore, "lmdb", "pip install lmdb"),
    (RocksDBStore, "rocksdict", "pip install rocksdict"),
])
def test_missing_binding_names_the_install(cls, module, hint, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, module, None)      # makes `import module` fail
    with pytest.raises(MissingDependencyError) as ei:
        cls(StoreConfig(path=str(tmp_path / "s")))
    assert hint in str(ei.value) and "\n" not in str(ei.value)
    assert not (tmp_path / "s").exists()


def test_engine_modules_import_no_binding():
    """The registry imports every engine module at start-up; bindings load on open."""
    code = ("import sys, prefixbench.engines.lmdb, prefixbench.engines.rocksdb, "
            "prefixbench.engines.wiredtiger; "
            "print(sorted(m for m in ('lmdb', 'rocksdict', 'wiredtiger') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----- the kit as a plugin author uses it ------------------------------------

PLUGIN_TESTS = '''
import pytest
from prefixbench.engines.conformance import EngineConformance
from prefixbench.engines.lmdb import LmdbStore
from prefixbench.engines.memory import MemoryStore


class ThirdPartyStore(LmdbStore):
    """A durable engine defined outside prefixbench (the kill child imports it by path)."""
    name = "third-party"


class SloppyStore(MemoryStore):
    """Scans in insertion order and loses empty values: the kit must notice both."""
    def _scan(self, start, end):
        return iter([(k, v) for k, v in self._data.items()
                     if k >= start and (end is None or k < end)])

    def _write(self, puts, deletes):
        super()._write([(k, v) for k, v in puts if v], deletes)


class TestThirdParty(EngineConformance):
    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return ThirdPartyStore


class TestSloppy(EngineConformance):
    @pytest.fixture
    def engine_factory(self):
        return lambda path, **config: SloppyStore()
'''


def test_kit_from_a_plugin_authors_test_file(tmp_path):
    """Outside the repo: the kill child imports a module:Class engine from the author's
    test file, and a sloppy engine fails the kit exactly where it is wrong."""
    (tmp_path / "test_plugin_engine.py").write_text(PLUGIN_TESTS)
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                          "-k", "TestSloppy or kill9", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    outcome = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and "::" in parts[0] and parts[1] in ("PASSED", "FAILED", "SKIPPED"):
            _, cls, test = parts[0].split("::")
            outcome[cls, test] = parts[1]
    third = {t: o for (c, t), o in outcome.items() if c == "TestThirdParty"}
    assert third == {"test_kill9_keeps_acknowledged_batches[async]": "PASSED",
                     "test_kill9_keeps_acknowledged_batches[sync]": "PASSED"}, out.stdout
    sloppy = {t for (c, t), o in outcome.items() if c == "TestSloppy" and o == "FAILED"}
    assert {"test_scan_is_in_numeric_order", "test_empty_value_is_not_missing"} <= sloppy
    assert "test_delete" not in sloppy and "test_overwrite" not in sloppy


def test_child_finds_engines_by_registry_name(tmp_path):
    """The kill child opens registered engines by name; acknowledged batches are readable."""
    from prefixbench.engines.conformance_child import batch_items
    ack = tmp_path / "acks"
    subprocess.run([sys.executable, "-m", "prefixbench.engines.conformance_child", "lmdb",
                    str(tmp_path / "s"), str(ack), "--seed", "5", "--max-batches", "3"],
                   check=True, capture_output=True)
    assert ack.read_text() == "0\n1\n2\n"
    with LmdbStore(StoreConfig(path=str(tmp_path / "s"), create=False)) as s:
        for n in range(3):
            items = batch_items(5, n)
            assert s.get_many([k for k, _ in items]) == [v for _, v in items]


# ----- measure_engine --------------------------------------------------------

def test_measure_engine_reports_per_key_costs(tmp_path):
    from prefixbench.harness.enginebench import measure_engine
    r = measure_engine("prefixbench.engines.lmdb:LmdbStore", str(tmp_path / "s"),
                       n_keys=3000, value_size=16, batch=8, repeat=2, sample=500)
    assert r["keys_per_pass"] == 500 and r["batch"] == 8
    assert r["get_s_per_key"] > 0 and r["get_many_s_per_key"] > 0
    assert r["get_s_per_key"] <= r["get_s_per_key_median"]
    assert r["size_on_disk_bytes"] > 3000 * 16
    with LmdbStore(StoreConfig(path=str(tmp_path / "s"), create=False)) as s:
        assert len(list(s.scan())) == 3000


def test_measure_engine_never_reuses_a_full_directory(tmp_path):
    from prefixbench.harness.enginebench import measure_engine
    (tmp_path / "keep.txt").write_text("data")
    with pytest.raises(ConfigError, match=str(tmp_path)):
        measure_engine("memory", str(tmp_path), n_keys=10)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_wiredtiger_binding_is_installed_as_a_release_build():
    """.ci/install-wiredtiger.sh leaves an importable, non-diagnostic binding.

    The engine tests above skip without the binding; this one does not, so a
    broken install cannot pass unnoticed.  Set PREFIXBENCH_SKIP_WIREDTIGER=1
    to run the suite on a machine without it.
    """
    if os.environ.get("PREFIXBENCH_SKIP_WIREDTIGER") == "1":
        pytest.skip("PREFIXBENCH_SKIP_WIREDTIGER=1")
    import wiredtiger

    assert wiredtiger.wiredtiger_version()[0].startswith("WiredTiger 11.3.1")
    assert not wiredtiger.diagnostic_build(), "debug build: run .ci/install-wiredtiger.sh"
