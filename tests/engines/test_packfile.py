"""The packfile engine: conformance kit, real direct I/O, reopen, space reuse, bad input."""
import os
import random
import warnings

import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.conformance import EngineConformance
from prefixbench.engines.packfile import LOG, PackfileStore
from prefixbench.errors import ConfigError, StoreError

MiB = 1 << 20


def _open(path, **kw):
    options = kw.pop("options", {})
    return PackfileStore(StoreConfig(path=str(path), options={"pack_bytes": 4 * MiB, **options},
                                     **kw))


class TestPackfile(EngineConformance):
    """The whole kit (kill -9 included) with 4 MiB packs so tests create several."""

    @pytest.fixture
    def engine_factory(self):
        return PackfileStore

    @pytest.fixture
    def engine_config(self):
        return {"options": {"pack_bytes": 4 * MiB}}


class TestPackfileTinyCheckpoints(EngineConformance):
    """Checkpoints every 4 KiB of log and 2 MiB packs: reopen mixes checkpoint and log."""

    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return PackfileStore

    @pytest.fixture
    def engine_config(self):
        return {"options": {"pack_bytes": 2 * MiB, "checkpoint_bytes": 4096}}


def _read_bytes():
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    pytest.skip("no read_bytes in /proc/self/io")


def test_reads_bypass_the_page_cache(tmp_path):
    """Reading the same records again still reaches the device: nothing was cached.

    Buffered reads of a warm file add 0 to the kernel's per-process
    ``read_bytes``; O_DIRECT reads add the full aligned extent every time.
    """
    rng = random.Random(1)
    items = {k: rng.randbytes(20000) for k in range(64)}
    with _open(tmp_path / "s") as s:
        s.put_many(items.items())
    with _open(tmp_path / "s", create=False) as s:
        assert s.direct
        for _ in range(2):                              # warm anything that could be warmed
            assert s.get_many(list(items)) == list(items.values())
        before = _read_bytes()
        rounds = 5
        for _ in range(rounds):
            for k, v in items.items():
                assert s.get(k) == v
        grew = _read_bytes() - before
    assert grew >= rounds * sum(len(v) for v in items.values())


def test_reopen_with_many_keys_from_checkpoint_and_log(tmp_path):
    rng = random.Random(2)
    expect = {}
    s = _open(tmp_path / "s", options={"checkpoint_bytes": 64 << 10})
    for b in range(60):
        items = {rng.getrandbits(64): rng.randbytes(rng.randrange(40)) for _ in range(500)}
        s.put_many(items.items())
        expect.update(items)
        gone = rng.sample(list(expect), 50)
        s.write_items([], gone)
        for k in gone:
            del expect[k]
    assert os.path.getsize(tmp_path / "s" / LOG) < 64 << 10      # the log was checkpointed
    s.close()
    with _open(tmp_path / "s", create=False) as again:
        assert len(list(again.scan())) == len(expect)
        assert again.get_many(list(expect)) == list(expect.values())


def test_unclean_stop_replays_the_log(tmp_path):
    """No close (as after kill -9): the index comes back from the log alone."""
    s = _open(tmp_path / "s")
    s.put_many((k, b"v%d" % k) for k in range(1000))
    s.delete(5)
    s._close_fds()                      # drop the store without its closing checkpoint
    s._closed = True
    with _open(tmp_path / "s", create=False) as again:
        assert again.get(5) is None and again.get(6) == b"v6"
        assert len(list(again.scan())) == 999



def test_disk_usage_counts_the_index_log_apart_from_the_packs(tmp_path):
    s = _open(tmp_path)
    try:
        s.put_many((k, b"v" * 100) for k in range(1, 500))
        s.flush()
        usage = s.disk_usage()
        log = os.stat(os.path.join(str(tmp_path), LOG)).st_blocks * 512
        assert usage["log_bytes"] == log > 0
        assert usage["data_bytes"] >= s.pack_bytes       # the preallocated pack
    finally:
        s.close()

def test_space_is_reclaimed_after_overwrite_and_delete(tmp_path):
    """40 MiB of overwrites and deletes in a 4-pack (16 MiB) area never fill it."""
    rng = random.Random(3)
    with _open(tmp_path / "s", options={"max_packs": 4}) as s:
        live = {}
        for rnd in range(40):
            keys = rng.sample(range(400), 128)
            items = [(k, rng.randbytes(8000)) for k in keys]
            s.put_many(items)
            live.update(items)
            if rnd % 5 == 4:
                gone = rng.sample(list(live), 40)
                s.write_items([], gone)
                for k in gone:
                    del live[k]
        assert s.pack_count() <= 4
        assert s.get_many(list(live)) == list(live.values())
        assert s.size_on_disk() <= 4 * 4 * MiB + MiB
    with _open(tmp_path / "s", create=False, options={"max_packs": 4}) as s:
        assert dict(s.scan()) == live


def test_full_pack_area_is_one_line_and_keeps_data(tmp_path):
    with _open(tmp_path / "s", options={"max_packs": 2}) as s:
        s.put_many((k, bytes([k % 251]) * 100000) for k in range(30))
        with pytest.raises(StoreError) as ei:
            for b in range(10):
                s.put_many((1000 + b * 10 + i, bytes(100000)) for i in range(10))
        msg = str(ei.value)
        assert "pack area full" in msg and "max_packs" in msg and "\n" not in msg
        assert [s.get(k) for k in range(30)] == [bytes([k % 251]) * 100000 for k in range(30)]
        s.put(1, b"small still fits")
        assert s.get(1) == b"small still fits"


def test_torn_or_corrupt_record_reads_as_missing(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"A" * 5000)
        s.put(2, b"B" * 5000)
    pack = tmp_path / "s" / "pack-000000.pack"
    data = bytearray(pack.read_bytes())
    at = data.find(b"A" * 5000)
    data[at + 100] ^= 0xFF                      # one flipped byte inside key 1's value
    pack.write_bytes(bytes(data))
    with _open(tmp_path / "s", create=False) as s:
        assert s.get(1) is None
        assert s.get_many([1, 2]) == [None, b"B" * 5000]
        assert list(s.scan()) == [(2, b"B" * 5000)]
        s.put(1, b"new")                        # the key can be written again
        assert s.get(1) == b"new"


def test_torn_log_frame_is_cut_off(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"one")
    log = tmp_path / "s" / LOG
    with open(log, "ab") as fh:
        fh.write(b"PBFL" + os.urandom(30))      # half a frame, as a crash leaves it
    with _open(tmp_path / "s", create=False) as s:
        assert s.get(1) == b"one"
        s.put(2, b"two")
    with _open(tmp_path / "s", create=False) as s:
        assert s.get_many([1, 2]) == [b"one", b"two"]


def test_value_larger_than_a_pack_is_refused(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"keep")
        with pytest.raises(StoreError) as ei:
            s.put_many([(2, b"x"), (3, bytes(4 * MiB))])
        assert "pack_bytes" in str(ei.value) and "\n" not in str(ei.value)
        assert s.get_many([1, 2, 3]) == [b"keep", None, None]


def test_misaligned_raw_reads_are_refused(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"x")
        for pack, off, n in [(0, 1, 4096), (0, 0, 100), (0, 4 * MiB, 4096), (7, 0, 4096)]:
            with pytest.raises(ConfigError) as ei:
                s.read_aligned(pack, off, n)
            assert "\n" not in str(ei.value)
        assert len(s.read_aligned(0, 0, 8192)) == 8192
        import mmap
        buf = mmap.mmap(-1, 3 * 4096)
        with pytest.raises(ConfigError, match="buffer address"):
            s.read_into(0, 0, memoryview(buf)[1:4097])          # misaligned destination
        with pytest.raises(ConfigError, match="read-only"):
            s.read_into(0, 0, bytes(4096))
        assert s.read_into(0, 4096, memoryview(buf)[4096:8192]) == 4096
        assert s.get(1) == b"x"


def test_pack_of_wrong_size_is_refused(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"keep")
    pack = tmp_path / "s" / "pack-000000.pack"
    os.truncate(pack, 3 * MiB)
    with pytest.raises(StoreError) as ei:
        _open(tmp_path / "s", create=False)
    assert "pack-000000.pack is 3145728 bytes" in str(ei.value) and "\n" not in str(ei.value)
    assert os.path.getsize(pack) == 3 * MiB       # not "repaired" behind our back
    os.truncate(pack, 4 * MiB)
    with _open(tmp_path / "s", create=False) as s:
        assert s.get(1) == b"keep"


def test_foreign_pack_is_refused(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"keep")
    with _open(tmp_path / "other") as o:
        o.put(1, b"other")
    os.rename(tmp_path / "s" / "pack-000000.pack", tmp_path / "mine.pack")
    os.rename(tmp_path / "other" / "pack-000000.pack", tmp_path / "s" / "pack-000000.pack")
    with pytest.raises(StoreError, match="not a pack of this store") as ei:
        _open(tmp_path / "s", create=False)
    assert "\n" not in str(ei.value)
    os.replace(tmp_path / "mine.pack", tmp_path / "s" / "pack-000000.pack")
    with _open(tmp_path / "s", create=False) as s:
        assert s.get(1) == b"keep"


def test_foreign_metadata_is_refused(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "packfile.meta").write_bytes(b'{"format": "something else"}\n')
    with pytest.raises(StoreError, match="packfile.meta is not a valid") as ei:
        _open(d, create=False)
    assert str(d) in str(ei.value)
    assert (d / "packfile.meta").read_bytes() == b'{"format": "something else"}\n'


def test_pack_bytes_is_fixed_at_creation(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"x")
    with pytest.raises(ConfigError, match="pack_bytes"):
        PackfileStore(StoreConfig(path=str(tmp_path / "s"), options={"pack_bytes": 8 * MiB}))
    with PackfileStore(StoreConfig(path=str(tmp_path / "s"))) as s:     # stored size wins
        assert s.pack_bytes == 4 * MiB and s.get(1) == b"x"


@pytest.mark.parametrize("bad", [{"pack_bytes": 1000}, {"pack_bytes": 100000},
                                 {"max_packs": 1}, {"colour": "blue"}])
def test_bad_options_are_named(bad, tmp_path):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        PackfileStore(StoreConfig(path=str(tmp_path / "s"), options=bad))


def _shm_dir():
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")
    import tempfile
    return tempfile.mkdtemp(dir="/dev/shm", prefix="pb-packfile-")


def test_tmpfs_without_allow_buffered_is_one_line(tmp_path):
    import shutil
    base = _shm_dir()
    try:
        path = os.path.join(base, "s")
        with pytest.raises(StoreError) as ei:
            PackfileStore(StoreConfig(path=path))
        msg = str(ei.value)
        assert path in msg and "O_DIRECT" in msg and "allow_buffered" in msg and "\n" not in msg
        assert not os.path.exists(path)
    finally:
        shutil.rmtree(base)


def test_tmpfs_with_allow_buffered_warns_once_and_works(tmp_path):
    import shutil
    base = _shm_dir()
    try:
        path = os.path.join(base, "s")
        cfg = dict(options={"allow_buffered": True, "pack_bytes": MiB})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with PackfileStore(StoreConfig(path=path, **cfg)) as s:
                assert not s.direct
                s.put_many((k, b"v" * k) for k in range(100))
            with PackfileStore(StoreConfig(path=path, create=False, **cfg)) as s:
                assert s.get_many(range(100)) == [b"v" * k for k in range(100)]
        said = [w for w in caught if "O_DIRECT" in str(w.message)]
        assert len(said) == 1 and "\n" not in str(said[0].message)
    finally:
        shutil.rmtree(base)


def test_registered_under_its_name():
    from prefixbench.registry import get_registry
    assert get_registry().get("engine", "packfile").factory is PackfileStore


def test_readers_never_see_wrong_values_while_packs_are_cleaned_and_reused(tmp_path):
    """Fixed keys are relocated by cleaning under concurrent readers; reads stay exact."""
    import threading
    fixed = {k: b"fixed-%d-" % k * 50 for k in range(300)}
    errors, stop = [], threading.Event()
    with _open(tmp_path / "s", options={"pack_bytes": MiB, "max_packs": 4}) as s:
        s.put_many(fixed.items())

        def reader(seed):
            r = random.Random(seed)
            keys = list(fixed)
            while not stop.is_set():
                batch = r.sample(keys, 20)
                if s.get_many(batch) != [fixed[k] for k in batch]:
                    errors.append("get_many")
                k = r.choice(keys)
                if s.get(k) != fixed[k]:
                    errors.append("get")

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        try:
            rng = random.Random(9)
            for rnd in range(150):                 # ~12 MiB of churn through a 4 MiB area
                s.put_many((1000 + rng.randrange(60), rng.randbytes(1300)) for _ in range(60))
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert errors == []
        assert s.get_many(list(fixed)) == list(fixed.values())


def test_second_open_of_the_same_store_is_refused(tmp_path):
    with _open(tmp_path / "s") as s:
        s.put(1, b"x")
        with pytest.raises(StoreError, match="in use") as ei:
            _open(tmp_path / "s", create=False)
        assert "\n" not in str(ei.value)
        assert s.get(1) == b"x"


# ----- Range ownership rules (paper 3.5, Table 1) -------------------------------

def _ranges(path, **kw):
    from prefixbench.engines.stripes import StripeRanges
    return StripeRanges(str(path), stripe_bytes=64 << 10, bytes_per_token=4096,
                        pack_bytes=4 * MiB, **kw)


def _payload(n_tokens, seed):
    return random.Random(seed).randbytes(n_tokens * 4096)


def test_ranges_divergent_prefixes_hit_only_the_common_part(tmp_path):
    import mmap
    r = _ranges(tmp_path / "r")
    a = list(range(100, 140))                       # 40 tokens = 160 KiB: 3 stripes
    data = _payload(40, 1)
    r.publish(a, data)
    query = a[:25] + [7, 7, 7]                      # diverges after token 25
    t = r.lookup(query)
    assert (t.hit_tokens, t.hit_bytes) == (25, 25 * 4096)
    t.claim(query)
    dest = mmap.mmap(-1, 40 * 4096)
    assert r.read(t, dest) == 25 * 4096
    assert dest[:25 * 4096] == data[:25 * 4096]     # clipped at the endpoint
    assert dest[25 * 4096:] == bytes(15 * 4096)
    t.release()
    assert r.lookup([1, 2, 3]) is None
    r.close()


def test_ranges_stale_ticket_and_deferred_retirement(tmp_path):
    import mmap
    r = _ranges(tmp_path / "r")
    toks = list(range(16))
    gen = r.publish(toks, _payload(16, 2))
    held = r.lookup(toks)
    held.claim(toks)
    waiting = r.lookup(toks)                        # looked up, not yet claimed
    r.invalidate(gen)
    assert r.lookup(toks) is None                   # no longer visible to new lookups
    with pytest.raises(StoreError, match="stale ticket"):
        waiting.claim(toks)
    assert not r.retired(gen)                       # two tickets still hold it
    dest = mmap.mmap(-1, 16 * 4096)
    assert r.read(held, dest) == 16 * 4096          # the claimed reader still reads its bytes
    held.release()
    assert not r.retired(gen)
    waiting.release()
    assert r.retired(gen)                           # retired at zero references
    assert r.store.get(r._key(gen, 0, 0)) is None   # stripes deleted: space reclaimable
    r.close()


def test_ranges_ticket_is_bound_to_its_query(tmp_path):
    r = _ranges(tmp_path / "r")
    r.publish(range(8), _payload(8, 3))
    t = r.lookup(range(8))
    with pytest.raises(StoreError, match="different query"):
        t.claim([0, 1, 2])
    t.claim(range(8))
    with pytest.raises(StoreError, match="claimed, not claimable"):
        t.claim(range(8))
    t.release()
    r.close()


def test_ranges_partial_publish_is_never_visible(tmp_path):
    r = _ranges(tmp_path / "r")
    real_put = r.store.put
    calls = []

    def failing_put(k, v):
        calls.append(k)
        if len(calls) == 3:
            raise StoreError("disk gone")
        real_put(k, v)

    r.store.put = failing_put
    with pytest.raises(StoreError, match="disk gone"):
        r.publish(range(64), _payload(64, 4))       # 4 stripes; the third fails
    r.store.put = real_put
    assert r.lookup(range(64)) is None
    assert list(r.store.scan()) == []               # the two written stripes were reclaimed
    r.close()


def test_ranges_cancel_during_in_flight_reads_keeps_the_lease_until_drained(tmp_path):
    import mmap
    r = _ranges(tmp_path / "r")
    toks = list(range(64))
    gen = r.publish(toks, _payload(64, 5))
    t = r.lookup(toks)
    t.claim(toks)

    def after_stripe(i):
        if i == 1:
            t.cancel()
            r.invalidate(gen)                       # invalidated while reads are in flight
            assert not r.retired(gen)               # the lease still protects the stripes

    with pytest.raises(StoreError, match="cancelled after 131072 bytes"):
        r.read(t, mmap.mmap(-1, 64 * 4096), on_stripe=after_stripe)
    assert not r.retired(gen)                       # cancellation is not completion evidence
    t.release()                                     # the reads drained: now it may go
    assert r.retired(gen)
    r.close()


def test_ranges_clean_reopen_keeps_and_dirty_reopen_discards(tmp_path):
    import mmap
    r = _ranges(tmp_path / "r")
    data = _payload(32, 6)
    r.publish(range(32), data)
    r.close()
    assert not (tmp_path / "r" / "ranges.dirty").exists()
    r = _ranges(tmp_path / "r")                     # clean reopen: the snapshot is used
    assert not r.discarded_unclean
    t = r.lookup(range(32))
    t.claim(range(32))
    dest = mmap.mmap(-1, 32 * 4096)
    r.read(t, dest)
    assert dest[:] == data
    t.release()
    r.close(clean=False)                            # an unclean stop leaves the marker
    r = _ranges(tmp_path / "r")
    assert r.discarded_unclean and r.lookup(range(32)) is None
    assert list(r.store.scan()) == []               # discarded, not rebuilt from payload
    r.close()


def test_ranges_close_refuses_while_tickets_hold_leases(tmp_path):
    r = _ranges(tmp_path / "r")
    r.publish(range(4), _payload(4, 7))
    t = r.lookup(range(4))
    with pytest.raises(StoreError, match="leases"):
        r.close()
    t.release()
    r.close()


def _read_all(r, t, n_bytes, **kw):
    import mmap
    dest = mmap.mmap(-1, max(n_bytes, 4096))
    got = r.read(t, dest, **kw)
    return got, dest


def test_ranges_divergent_prefixes_inside_a_stripe(tmp_path):
    """Two publishes share 25 tokens and diverge inside the second 16-token stripe: the
    second stores only from that stripe on and references the first one's stripe 0;
    a lookup of each returns its own bytes and endpoint."""
    r = _ranges(tmp_path / "r")
    a, b = list(range(100, 140)), list(range(100, 125)) + list(range(500, 520))
    da, db = _payload(40, 11), _payload(45, 12)
    db = da[:25 * 4096] + db[25 * 4096:]                # the shared prefix has the same KV
    ga = r.publish(a, da)
    gb = r.publish(b, db)
    assert r._gens[gb]["first"] == 16                   # stripe 1 onward rewritten
    assert len(list(r.store.scan())) == 3 + 2          # 3 stripes of a, 2 of b
    for toks, data, gens in ((a, da, (ga,)), (b, db, (ga, gb))):
        t = r.lookup(toks + [9])                         # one token past the range
        assert (t.hit_tokens, t.hit_bytes) == (len(toks), len(toks) * 4096)
        assert t.gens == gens                           # generations that supply the hit
        t.claim(toks + [9])
        got, dest = _read_all(r, t, len(data))
        assert got == len(data) and dest[:len(data)] == data
        t.release()
    t = r.lookup(b[:20])                                # ends before the divergence
    assert t.hit_tokens == 20 and t.segments[0][2] == ga
    t.claim(b[:20])
    got, dest = _read_all(r, t, 20 * 4096)
    assert got == 20 * 4096 and dest[:got] == da[:got]
    t.release()
    t = r.lookup(b[:10])                                # inside the shared stripe
    assert t.gens == (ga,)
    t.release()
    assert r.publish(b, db) == gb                       # a duplicate store joins gb
    r.close()


def test_ranges_lookup_walks_the_tree_not_every_range(tmp_path):
    r = _ranges(tmp_path / "r")
    for i in range(50):
        r.publish([i, i + 1000, 7], _payload(3, 20 + i))

    class NoScan(set):
        def __iter__(self):
            raise AssertionError("lookup scanned the published ranges")

    r._visible = NoScan(r._visible)
    t = r.lookup([31, 1031, 7, 8])
    assert t.hit_tokens == 3 and t.gens == (32,)
    r._visible = set(r._visible.copy())
    t.release()
    r.close()


def test_ranges_invalidating_a_prefix_hides_ranges_built_on_it(tmp_path):
    r = _ranges(tmp_path / "r")
    a, b = list(range(40)), list(range(20)) + list(range(900, 920))
    ga = r.publish(a, _payload(40, 30))
    gb = r.publish(b, _payload(40, 31))
    held = r.lookup(b)
    held.claim(b)
    r.invalidate(ga)                                    # gb reads ga's stripe 0
    assert r.lookup(b) is None and r.lookup(a) is None
    assert not r.retired(ga) and not r.retired(gb)      # the claimed ticket leases both
    got, _ = _read_all(r, held, 40 * 4096)
    assert got == 40 * 4096
    held.release()
    assert r.retired(ga) and r.retired(gb)
    assert list(r.store.scan()) == []
    r.close()


def test_ranges_repeated_lookup_cannot_replace_a_claimed_query(tmp_path):
    r = _ranges(tmp_path / "r")
    r.publish(range(32), _payload(32, 40))
    t = r.lookup(range(32))
    t.claim(range(32))
    again = r.lookup(range(10))                         # same request looks up again
    assert t.tokens == tuple(range(32)) and t.hit_tokens == 32
    with pytest.raises(StoreError, match="claimed, not claimable"):
        t.claim(range(10))
    with pytest.raises(StoreError, match="different query"):
        again.claim(range(32))
    assert t.epoch == r.epoch
    again.release()
    t.release()
    r.close()


def test_ranges_read_banks_are_not_reused_before_release(tmp_path):
    """Two banks; the consumer keeps each bank until its (asynchronous) scatter is proved:
    the third stripe cannot get a bank, and no bank was handed out twice meanwhile."""
    from prefixbench.engines.stripes import BankError
    r = _ranges(tmp_path / "r", banks=2, bank_timeout=0.2)
    toks = list(range(64))                              # 4 stripes
    data = _payload(64, 50)
    r.publish(toks, data)
    t = r.lookup(toks)
    t.claim(toks)
    held = []
    with pytest.raises(BankError, match="no free read bank"):
        _read_all(r, t, len(data), fence=lambda bank, i: held.append(bank))
    assert len(held) == 2 and [b.uses for b in r.banks.banks] == [1, 1]
    assert all(b.state == "scatter" for b in held)
    for b in held:
        b.release()                                     # completion proved
    with pytest.raises(StoreError, match="released twice"):
        held[0].release()
    assert r.banks.free_count() == 2
    t.release()
    t = r.lookup(toks)
    t.claim(toks)
    got, dest = _read_all(r, t, len(data),
                          fence=lambda bank, i: bank.release())
    assert got == len(data) and dest[:] == data
    t.release()
    r.close()


def test_ranges_cancel_while_a_read_is_in_flight_keeps_bank_and_lease(tmp_path):
    import threading
    r = _ranges(tmp_path / "r", banks=3)
    toks = list(range(64))
    gen = r.publish(toks, _payload(64, 60))
    t = r.lookup(toks)
    t.claim(toks)
    real = r.store.read_into
    started, go = threading.Event(), threading.Event()
    calls = []

    def slow_read(pack, off, buf):
        calls.append(off)
        if len(calls) == 2:                             # the second stripe's read blocks
            started.set()
            assert go.wait(10)
        return real(pack, off, buf)

    r.store.read_into = slow_read
    err = []

    def reader():
        try:
            _read_all(r, t, 64 * 4096)
        except StoreError as e:
            err.append(e)

    th = threading.Thread(target=reader)
    th.start()
    assert started.wait(10)
    t.cancel()
    t.release()                                         # deferred: a read is in flight
    r.invalidate(gen)
    assert t.state == "releasing" and not r.retired(gen)
    assert any(b.state != "free" for b in r.banks.banks)  # the in-flight read's bank
    go.set()
    th.join(10)
    assert err and "cancelled" in str(err[0])
    assert t.state == "released" and r.retired(gen)     # drained: now retired
    assert r.banks.free_count() == 3
    r.close()


def test_ranges_bank_cannot_be_released_while_its_read_is_in_flight(tmp_path):
    from prefixbench.engines.stripes import BankError
    r = _ranges(tmp_path / "r", banks=1)
    bank = r.banks.acquire("me")
    with pytest.raises(BankError, match="in flight"):
        bank.release()
    bank.state = "scatter"
    bank.release()
    r.close()


def test_ranges_layers_deliver_per_layer_and_clip_every_layer(tmp_path):
    """4 layers, 1 KiB per token per layer: each layer's slice has its own stripes; a
    partial hit clips every layer at the same token; readiness fires per layer, in order."""
    from prefixbench.engines.stripes import StripeRanges
    r = StripeRanges(str(tmp_path / "r"), stripe_bytes=64 << 10, bytes_per_token=4096,
                     pack_bytes=4 * MiB, layers=4)
    T, sl = 96, 1024                                    # 96 KiB per layer: 2 stripes
    data = _payload(T, 70)
    r.publish(range(T), data)
    t = r.lookup(list(range(80)) + [5000])
    assert t.hit_tokens == 80
    t.claim(list(range(80)) + [5000])
    ready, stripes = [], []
    got, dest = _read_all(r, t, 4 * T * sl, layer_stride=T * sl, on_layer=ready.append,
                          on_stripe=stripes.append)
    assert got == 4 * 80 * sl and ready == [0, 1, 2, 3] and len(stripes) == 8
    for layer in range(4):
        lo = layer * T * sl
        assert dest[lo:lo + 80 * sl] == data[lo:lo + 80 * sl]
    t.release()
    r.close()
    with pytest.raises(StoreError, match="another store or layout") as ei:
        _ranges(tmp_path / "r")                         # same directory, one layer
    assert "\n" not in str(ei.value)


def test_ranges_clean_reopen_serves_divergent_ranges_and_bumps_the_epoch(tmp_path):
    r = _ranges(tmp_path / "r")
    a, b = list(range(40)), list(range(20)) + list(range(900, 920))
    da = _payload(40, 80)
    db = da[:20 * 4096] + _payload(20, 81)
    r.publish(a, da)
    gb = r.publish(b, db)
    epoch = r.epoch
    r.close()
    r = _ranges(tmp_path / "r")
    assert r.epoch == epoch + 1 and not r.discarded_unclean
    t = r.lookup(b)
    assert t.gens == (1, gb)
    t.claim(b)
    _got, dest = _read_all(r, t, 40 * 4096)
    assert dest[:40 * 4096] == db
    t.release()
    r.close()
