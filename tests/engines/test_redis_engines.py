"""The redis and redis-cluster engines against real local servers."""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from prefixbench.engines.base import StoreConfig
from prefixbench.engines.conformance import EngineConformance
from prefixbench.engines.conformance_child import batch_items, open_store, resolve_engine
from prefixbench.engines.redis import RedisStore
from prefixbench.engines.redis_cluster import RedisClusterStore
from prefixbench.errors import ConfigError, MissingDependencyError, StoreError
from prefixbench.harness import servers

from redis_support import PACKAGE_LINE, need_redis, start
from redis_support import cluster_always, redis_always  # noqa: F401 - fixtures


class TestRedis(EngineConformance):
    kill_rounds = 2

    @pytest.fixture
    def engine_factory(self):
        return RedisStore

    @pytest.fixture
    def engine_config(self, redis_always):
        return {"options": {"url": redis_always.url}}


class TestRedisPacked(EngineConformance):
    """layout=packed: small hashes by the keys' top bits, no sorted set."""

    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return RedisStore

    @pytest.fixture
    def engine_config(self, redis_always):
        return {"options": {"url": redis_always.url, "layout": "packed", "pack_bits": 6}}


class TestRedisCluster(EngineConformance):
    kill_rounds = 2

    @pytest.fixture
    def engine_factory(self):
        return RedisClusterStore

    @pytest.fixture
    def engine_config(self, cluster_always):
        return {"options": {"url": cluster_always.url}}


class TestRedisClusterOneBucket(EngineConformance):
    """Every batch in one slot: the plain MULTI/EXEC path without the journal."""

    kill_rounds = 1

    @pytest.fixture
    def engine_factory(self):
        return RedisClusterStore

    @pytest.fixture
    def engine_config(self, cluster_always):
        return {"options": {"url": cluster_always.url, "buckets": 1}}


# ----- the server itself killed ------------------------------------------------------------


def _acks(path) -> list[int]:
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        return []
    return [int(x) for x in data.split(b"\n")[:-1]]


def _check_batches(store, seed, acked, label):
    """Every acknowledged batch intact; the one in flight all or nothing; the next absent."""
    for n in acked:
        items = batch_items(seed, n)
        assert store.get_many([k for k, _ in items]) == [v for _, v in items], \
            f"{label}: acknowledged batch {n} is missing or differs after the restart"
    nxt = (acked[-1] + 1) if acked else 0
    items = batch_items(seed, nxt)
    got = store.get_many([k for k, _ in items])
    assert got in ([None] * len(items), [v for _, v in items]), \
        f"{label}: batch {nxt} was applied partially"
    after = batch_items(seed, nxt + 1)
    assert store.get_many([k for k, _ in after]) == [None] * len(after)


def _server_kill_rounds(server, engine, options, tmp_path, rounds=2, seed=77):
    """A writer child writes numbered batches (durability sync); SIGKILL every node of the
    server at a random moment, restart it, check every acknowledged batch."""
    config = {"durability": "sync", "options": options}
    path, ack = tmp_path / "store", tmp_path / "acks"
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    acked: list[int] = []
    for rnd in range(rounds):
        start_at = acked[-1] + 1 if acked else 0
        err = open(tmp_path / f"child-{rnd}.err", "wb")
        child = subprocess.Popen([sys.executable, "-m", "prefixbench.engines.conformance_child",
                                  engine, str(path), str(ack), "--seed", str(seed),
                                  "--start", str(start_at), "--config", json.dumps(config)],
                                 stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 60
        while len(_acks(ack)) < len(acked) + 3:
            assert child.poll() is None, open(tmp_path / f"child-{rnd}.err").read()[-2000:]
            assert time.monotonic() < deadline, "writer acknowledged nothing"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.02, 0.3))
        server.kill()                          # every node, SIGKILL
        child.wait(timeout=120)                # its next write fails: connection lost
        err.close()
        assert child.returncode != 0
        acked = _acks(ack)
        assert acked == list(range(len(acked)))
        server.start()
        store = open_store(resolve_engine(engine), path, **{**config, "create": False})
        try:
            _check_batches(store, seed, acked, f"round {rnd}")
        finally:
            store.close()
    return acked


def test_redis_server_sigkill_keeps_acknowledged_batches(tmp_path):
    srv = start("redis", tmp_path / "srv", appendfsync="always")
    try:
        acked = _server_kill_rounds(srv, "redis", {"url": srv.url, "socket_timeout": 10},
                                    tmp_path)
        assert len(acked) >= 6
    finally:
        srv.stop()


def test_cluster_sigkill_of_every_node_keeps_acknowledged_batches(tmp_path):
    srv = start("redis-cluster", tmp_path / "srv", appendfsync="always", masters=3,
                replicas=1)
    try:
        acked = _server_kill_rounds(srv, "redis-cluster",
                                    {"url": srv.url, "socket_timeout": 5, "retry_seconds": 2},
                                    tmp_path)
        assert len(acked) >= 6
    finally:
        srv.stop()


# ----- cluster failover ----------------------------------------------------------------------

def _primary_ports(url) -> set[int]:
    import redis
    rc = redis.RedisCluster.from_url(url)
    try:
        return {n.port for n in rc.get_primaries()}
    finally:
        rc.close()


def test_cluster_failover_keeps_every_acknowledged_write(tmp_path):
    """Kill a master while a writer (durability sync: WAIT 1) and a reader run; the replica
    takes over, the old master comes back as its replica; every acknowledged batch is
    readable, and no read ever returns a value that was never written."""
    srv = start("redis-cluster", tmp_path / "srv", appendfsync="always", masters=3,
                replicas=1, node_timeout_ms=1000)
    seed = 91
    try:
        cfg = StoreConfig(path=str(tmp_path / "store"), durability="sync",
                          options={"url": srv.url, "retry_seconds": 60, "socket_timeout": 5})
        store = RedisClusterStore(cfg)
        acked, attempted, errors, bad_reads = [], [], [], []
        stop = threading.Event()

        def writer():
            n = 0
            while not stop.is_set():
                attempted.append(n)
                try:
                    store.write_items(batch_items(seed, n))
                except StoreError as e:
                    errors.append(str(e))
                else:
                    acked.append(n)
                n += 1

        def reader():
            r = random.Random(1)
            while not stop.is_set():
                if not acked:
                    time.sleep(0.01)
                    continue
                n = r.choice(acked[:])
                items = batch_items(seed, n)
                try:
                    got = store.get_many([k for k, _ in items])
                except StoreError:
                    continue                        # the dead master's slots, for a moment
                if got != [v for _, v in items]:
                    bad_reads.append(n)

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        try:
            while len(acked) < 20:
                time.sleep(0.01)
            primaries = _primary_ports(srv.url)
            victim = next(n for n in srv.nodes if n.port in primaries and n.port != srv.nodes[0].port)
            servers.kill_node(victim)
            before_kill = len(acked)
            # the replica takes over (node timeout 1 s); writes to its slots wait meanwhile
            deadline = time.monotonic() + 60
            while victim.port in _primary_ports(srv.url) or len(primaries -
                                                              _primary_ports(srv.url)) == 0:
                assert time.monotonic() < deadline, "no replica took over"
                time.sleep(0.1)
            servers.start_node(victim)           # rejoins as the new master's replica
            deadline = time.monotonic() + 90
            while len(acked) < before_kill + 30:
                assert time.monotonic() < deadline, f"writes did not resume: {errors[-1:]}"
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert victim.port not in _primary_ports(srv.url)
        assert bad_reads == []
        store.close()
        again = RedisClusterStore(StoreConfig(path=str(tmp_path / "store"), create=False,
                                              durability="async", options={"url": srv.url}))
        try:
            for n in attempted:
                items = batch_items(seed, n)
                got = again.get_many([k for k, _ in items])
                if n in acked:
                    assert got == [v for _, v in items], f"acknowledged batch {n} lost"
                else:                              # a failed write: all or nothing
                    assert got in ([None] * len(items), [v for _, v in items])
            later = batch_items(seed, attempted[-1] + 1)
            assert again.get_many([k for k, _ in later]) == [None] * len(later)
        finally:
            again.close()
    finally:
        srv.stop()


# ----- bad input: one line naming the url or option, nothing lost --------------------------

def _one_line(e, *parts):
    text = str(e.value)
    assert "\n" not in text, text
    for p in parts:
        assert p in text, text


def test_refused_connection(tmp_path):
    need_redis()
    port = servers.free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with pytest.raises(StoreError) as e:
        RedisStore(StoreConfig(path=str(tmp_path / "s"), options={"url": url}))
    _one_line(e, url, "connection refused")
    assert os.listdir(tmp_path / "s") == []


def test_wrong_and_missing_password(tmp_path):
    srv = start("redis", tmp_path / "srv", password="right-one")
    try:
        port = srv.nodes[0].port
        good = RedisStore(StoreConfig(path=str(tmp_path / "s"),
                                      options={"url": f"redis://:right-one@127.0.0.1:{port}/0"}))
        good.put(1, b"kept")
        good.close()
        with pytest.raises(StoreError) as e:
            RedisStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                                   options={"url": f"redis://:wrong@127.0.0.1:{port}/0"}))
        _one_line(e, f"redis://:***@127.0.0.1:{port}/0", "wrong password")
        assert "wrong@" not in str(e.value)
        with pytest.raises(StoreError) as e:
            RedisStore(StoreConfig(path=str(tmp_path / "s"), create=False))
        _one_line(e, f"127.0.0.1:{port}", "needs a password")
        again = RedisStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                                       options={"url": f"redis://:right-one@127.0.0.1:{port}/0"}))
        assert again.get(1) == b"kept"
        again.close()
    finally:
        srv.stop()


def test_durability_the_server_cannot_keep(tmp_path):
    no_aof = start("redis", tmp_path / "a", aof=False)
    lazy = start("redis", tmp_path / "b", appendfsync="no")
    try:
        with pytest.raises(ConfigError) as e:
            RedisStore(StoreConfig(path=str(tmp_path / "s1"), durability="sync",
                                   options={"url": no_aof.url}))
        _one_line(e, no_aof.url, "durability=sync", "appendonly no")
        with pytest.raises(ConfigError) as e:
            RedisStore(StoreConfig(path=str(tmp_path / "s2"), durability="async",
                                   options={"url": lazy.url}))
        _one_line(e, lazy.url, "appendfsync everysec or always", "appendfsync no")
        with pytest.raises(ConfigError) as e:
            RedisStore(StoreConfig(path=str(tmp_path / "s3"), durability="sync",
                                   options={"url": lazy.url}))
        _one_line(e, "needs appendfsync always")
        for p in ("s1", "s2", "s3"):
            assert not (tmp_path / p / "redis-store.json").exists()
        RedisStore(StoreConfig(path=str(tmp_path / "s4"), durability="off",
                               options={"url": no_aof.url})).close()
    finally:
        no_aof.stop()
        lazy.stop()


def test_out_of_memory_is_surfaced_and_loses_nothing(tmp_path):
    srv = start("redis", tmp_path / "srv",
                settings={"maxmemory": "3mb", "maxmemory-policy": "noeviction"})
    try:
        s = RedisStore(StoreConfig(path=str(tmp_path / "s"), options={"url": srv.url}))
        written = {}
        with pytest.raises(StoreError) as e:
            for b in range(1000):
                items = [(b * 1000 + i, bytes([b % 256]) * 1000) for i in range(100)]
                s.put_many(items)
                written.update(items)
        _one_line(e, srv.url, "OOM", "maxmemory", "not applied")
        assert s.get_many(list(written)) == list(written.values())
        assert s.get_many([b * 1000 + i for i in range(100)]) == [None] * 100
        s.delete(0)                      # deletes still work, and free memory
        s.close()
    finally:
        srv.stop()


def test_cluster_with_uncovered_slots(tmp_path):
    import redis
    srv = start("redis-cluster", tmp_path / "srv", masters=3, replicas=0)
    try:
        seed = srv.nodes[0]
        r = redis.Redis(port=seed.port)
        owner = next(row for row in r.execute_command("CLUSTER SLOTS") if row[0] == 0)
        assert owner[2][1] == seed.port
        r.execute_command("CLUSTER DELSLOTSRANGE", 0, 99)
        r.close()
        with pytest.raises(StoreError) as e:
            RedisClusterStore(StoreConfig(path=str(tmp_path / "s"),
                                          options={"url": srv.url}))
        _one_line(e, srv.url, "slots 0-99 are not served")
    finally:
        srv.stop()


def test_cluster_sync_without_replicas_and_standalone_url(tmp_path, redis_always):
    srv = start("redis-cluster", tmp_path / "srv", masters=3, replicas=0, appendfsync="always")
    try:
        with pytest.raises(ConfigError) as e:
            RedisClusterStore(StoreConfig(path=str(tmp_path / "s"), durability="sync",
                                          options={"url": srv.url}))
        _one_line(e, "has no replica", "WAIT 1")
        RedisClusterStore(StoreConfig(path=str(tmp_path / "t"), durability="async",
                                      options={"url": srv.url})).close()
    finally:
        srv.stop()
    with pytest.raises(ConfigError) as e:
        RedisClusterStore(StoreConfig(path=str(tmp_path / "u"), options={"url": redis_always.url}))
    _one_line(e, "not a cluster", "-e redis")


def test_bad_options_name_the_option(tmp_path, redis_always):
    with pytest.raises(ConfigError, match="'colour'"):
        RedisStore(StoreConfig(path=str(tmp_path / "a"), options={"colour": "x"}))
    with pytest.raises(ConfigError, match="option url"):
        RedisStore(StoreConfig(path=str(tmp_path / "b"), options={"url": "http://x"}))
    with pytest.raises(ConfigError, match="option buckets"):
        RedisClusterStore(StoreConfig(path=str(tmp_path / "c"), options={"buckets": 3}))
    with pytest.raises(StoreError, match="no store there"):
        RedisStore(StoreConfig(path=str(tmp_path / "a"), create=False,
                               options={"url": redis_always.url}))


def test_missing_redis_py_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingDependencyError) as e:
        RedisStore(StoreConfig(path=str(tmp_path / "s")))
    _one_line(e, "pip install 'prefixbench[redis]'")
    assert not (tmp_path / "s").exists()


def test_missing_redis_server_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as e:
        need_redis()
    assert str(e.value) == PACKAGE_LINE
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        need_redis()
    with pytest.raises(MissingDependencyError, match="apt-get install redis-server"):
        servers.redis_server_binary()


# ----- prefixbench server ----------------------------------------------------------------------

def test_server_up_on_a_port_in_use_is_one_line(tmp_path, run_cli):
    need_redis()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        code, out, err = run_cli("server", "redis", "up", "--port", port, "--dir", tmp_path / "w")
        assert code == 2 and out == ""
        assert err.strip() == (f"prefixbench: error: server up: port {port} on 127.0.0.1 is "
                               f"already in use; choose another --port")
        assert not (tmp_path / "w").exists()
    finally:
        holder.close()


def test_server_cli_up_status_down(tmp_path, run_cli):
    need_redis()
    port = servers.free_port()
    w = tmp_path / "w"
    code, out, err = run_cli("server", "redis", "up", "--port", port, "--dir", w,
                             "--appendfsync", "always")
    try:
        assert code == 0, err
        assert f"url=redis://127.0.0.1:{port}/0" in out
        conf = (w / f"node-{port}" / "redis.conf").read_text()
        assert "appendfsync always" in conf and f"port {port}" in conf
        s = RedisStore(StoreConfig(path=str(tmp_path / "s"), durability="sync",
                                   options={"url": f"redis://127.0.0.1:{port}/0"}))
        s.put(5, b"five")
        s.close()
        code, out, _ = run_cli("server", "redis", "status", "--dir", w)
        assert code == 0 and f"node 127.0.0.1:{port}" in out and " up" in out
    finally:
        code, out, _ = run_cli("server", "redis", "down", "--dir", w)
    assert code == 0 and "data kept" in out
    assert not servers.port_in_use(port)
    code, out, _ = run_cli("server", "redis", "up", "--dir", w)      # same dir: same data
    try:
        s = RedisStore(StoreConfig(path=str(tmp_path / "s"), create=False))
        assert s.get(5) == b"five"
        s.close()
    finally:
        run_cli("server", "redis", "down", "--dir", w, "--purge")
    assert not w.exists()


@pytest.mark.parametrize("engine", ["redis", "redis-cluster"])
def test_server_info_counts_this_store(engine, tmp_path, redis_always, cluster_always):
    url = (redis_always if engine == "redis" else cluster_always).url
    s = open_store(resolve_engine(engine), tmp_path / "s", options={"url": url})
    try:
        s.put_many((k << 50, b"x" * 100) for k in range(1000))
        info = s.server_info()
        assert info["entries"] == 1000 and info["used_memory"] > 0
        assert s.logical_size() == (1000, 1000 * 108)
        assert s.size_on_disk() > 100_000           # the AOF holds what was just written
        s.drop()
        assert s.server_info()["entries"] == 0 and list(s.scan()) == []
    finally:
        s.close()


def test_cluster_batch_cut_after_its_journal_write_is_completed_on_open(tmp_path, cluster_always,
                                                                        monkeypatch):
    """The writer dies between the journal write and the per-bucket transactions (or half
    way through them): the next open completes the batch, in order, and empties the journal."""
    cfg = StoreConfig(path=str(tmp_path / "s"), options={"url": cluster_always.url})
    s = RedisClusterStore(cfg)
    first = [(k << 56 | 7, b"first") for k in range(16)]           # 16 buckets
    s.put_many(first)
    second = [(k << 56 | 7, b"second-%d" % k) for k in range(8)] + [(9 << 56, b"new")]
    calls = []
    real = RedisClusterStore._apply

    def dies_half_way(self, puts, deletes, action):
        calls.append(len(puts))
        real(self, puts[:3], deletes, action)             # three buckets made it
        raise SystemExit("killed")                       # nothing after this line runs

    monkeypatch.setattr(RedisClusterStore, "_apply", dies_half_way)
    with pytest.raises(SystemExit):
        s.write_items(second, [15 << 56 | 7])
    monkeypatch.setattr(RedisClusterStore, "_apply", real)
    assert calls == [len(second)]
    assert s.get(5 << 56 | 7) == b"first"                 # the cut batch is half applied now
    s._rc.close()                                         # the process is gone: no close()
    again = RedisClusterStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                                          options={"url": cluster_always.url}))
    try:
        want = dict(first)
        want.update(second)
        del want[15 << 56 | 7]
        assert dict(again.scan()) == want
        assert again._rc.hlen(again._jkey) == 0
    finally:
        again.close()


@pytest.mark.parametrize("engine", ["redis", "redis-cluster"])
@pytest.mark.parametrize("how", ["environment", "option"])
def test_engine_bench_reaches_the_server_and_leaves_no_keys(engine, how, tmp_path, monkeypatch,
                                                            redis_always, cluster_always):
    """engine-bench finds the server through the environment or ``url=``, and drops its
    keys afterwards: a server outlives the bench, and it is the user's."""
    from prefixbench.harness.enginebench import measure_engine
    url = redis_always.url if engine == "redis" else cluster_always.url
    options = {}
    if how == "option":
        options = {"url": url}
    elif engine == "redis":
        monkeypatch.setenv("PREFIXBENCH_REDIS_URL", url)
    else:
        monkeypatch.setenv("PREFIXBENCH_REDIS_CLUSTER_URL", url)
    r = measure_engine(engine, str(tmp_path / "s"), n_keys=500, batch=8, repeat=1, sample=100,
                       options=options)
    assert r["get_s_per_key"] > 0 and r["get_many_s_per_key"] > 0
    s = open_store(resolve_engine(engine), tmp_path / "s", create=False, options={"url": url})
    try:
        assert list(s.scan()) == []
    finally:
        s.close()


def test_cluster_keys_spread_over_every_master(tmp_path, cluster_always):
    import redis
    s = RedisClusterStore(StoreConfig(path=str(tmp_path / "s"),
                                      options={"url": cluster_always.url}))
    try:
        rng = random.Random(3)
        s.put_many((rng.getrandbits(64), b"v") for _ in range(2000))
        per_master = []
        for node in s._rc.get_primaries():
            r = redis.Redis(host=node.host, port=node.port)
            per_master.append(len(list(r.scan_iter(match=f"{{pb:{s.namespace}:*"))))
            r.close()
        assert len(per_master) == 3 and min(per_master) > 0
        # a hash and a sorted set per bucket, and the journal (its last field is deleted
        # with the next spanning batch or on close)
        assert sum(per_master) == 2 * 256 + 1
    finally:
        s.close()


def test_layout_is_fixed_at_create(tmp_path, redis_always, cluster_always):
    url = {"url": redis_always.url}
    s = RedisStore(StoreConfig(path=str(tmp_path / "p"),
                               options={**url, "layout": "packed", "pack_bits": 10}))
    s.put_many((k << 54 | 1, b"%d" % k) for k in range(1024))
    assert [k for k, _ in s.scan(5 << 54, 9 << 54)] == [k << 54 | 1 for k in range(5, 9)]
    s.close()
    again = RedisStore(StoreConfig(path=str(tmp_path / "p"), create=False, options=url))
    assert (again.layout, again.pack_bits) == ("packed", 10)
    assert again.get(77 << 54 | 1) == b"77" and again.server_info()["entries"] == 1024
    again.drop()
    assert again.server_info()["entries"] == 0
    again.close()
    with pytest.raises(ConfigError) as e:
        RedisStore(StoreConfig(path=str(tmp_path / "p"), create=False,
                               options={**url, "layout": "hash"}))
    _one_line(e, "option layout", str(tmp_path / "p"), "layout=packed")
    with pytest.raises(ConfigError, match="option layout"):
        RedisStore(StoreConfig(path=str(tmp_path / "q"), options={**url, "layout": "zip"}))
    c = RedisClusterStore(StoreConfig(path=str(tmp_path / "c"),
                                      options={"url": cluster_always.url, "buckets": 4}))
    c.put(1, b"one")
    c.close()
    c = RedisClusterStore(StoreConfig(path=str(tmp_path / "c"), create=False,
                                      options={"url": cluster_always.url}))
    assert c.buckets == 4 and c.get(1) == b"one"
    c.close()
    with pytest.raises(ConfigError, match="created with buckets=4"):
        RedisClusterStore(StoreConfig(path=str(tmp_path / "c"), create=False,
                                      options={"url": cluster_always.url, "buckets": 8}))


def test_server_outlives_the_command_and_down_stops_it(tmp_path):
    """As a user runs it: 'up' returns and the server keeps running; 'down' from another
    process stops exactly that server (its pid checked against the port)."""
    need_redis()
    port = servers.free_port()
    w = str(tmp_path / "w")
    cmd = [sys.executable, "-m", "prefixbench", "server", "redis"]
    up = subprocess.run(cmd + ["up", "--port", str(port), "--dir", w], capture_output=True,
                        text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    try:
        st = subprocess.run(cmd + ["status", "--dir", w], capture_output=True, text=True)
        assert f"node 127.0.0.1:{port}" in st.stdout and " up" in st.stdout
    finally:
        down = subprocess.run(cmd + ["down", "--dir", w], capture_output=True, text=True,
                              timeout=90)
    assert down.returncode == 0, down.stderr
    assert not servers.port_in_use(port)
    st = subprocess.run(cmd + ["status", "--dir", w], capture_output=True, text=True)
    assert " down" in st.stdout


def test_cluster_with_a_password(tmp_path):
    srv = start("redis-cluster", tmp_path / "srv", masters=3, replicas=0, password="pw-1")
    try:
        port = srv.nodes[0].port
        good = f"redis://:pw-1@127.0.0.1:{port}"
        s = RedisClusterStore(StoreConfig(path=str(tmp_path / "s"), options={"url": good}))
        s.put_many((k << 58, b"%d" % k) for k in range(64))
        s.close()
        with pytest.raises(StoreError) as e:
            RedisClusterStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                                          options={"url": f"redis://:nope@127.0.0.1:{port}"}))
        _one_line(e, f"redis://:***@127.0.0.1:{port}", "wrong password")
        again = RedisClusterStore(StoreConfig(path=str(tmp_path / "s"), create=False,
                                              options={"url": good}))
        assert dict(again.scan()) == {k << 58: b"%d" % k for k in range(64)}
        again.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("engine", ["redis", "redis-cluster"])
def test_scan_across_many_round_trips(engine, tmp_path, redis_always, cluster_always):
    """More items than one scan round trip returns, a bound inside a chunk, writes between."""
    url = (redis_always if engine == "redis" else cluster_always).url
    s = open_store(resolve_engine(engine), tmp_path / "s",
                   options={"url": url, **({"buckets": 2} if engine != "redis" else {})})
    try:
        keys = sorted({k * 0x9E3779B97F4A7C15 % (1 << 64) for k in range(1, 10001)})
        s.put_many((k, b"") for k in keys)
        got = []
        for k, _ in s.scan(keys[17], keys[9000]):
            got.append(k)
            if len(got) == 5000:
                s.put(keys[9500], b"written while scanning")
        assert got == keys[17:9000]
    finally:
        s.close()
