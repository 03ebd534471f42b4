"""``redis-cluster``: the store spread over a Redis Cluster, through redis-py's RedisCluster.

Layout.  The u64 key space is cut into ``buckets`` ranges by its top bits
(default 256 buckets; keys here are hashes, so ranges fill evenly).  Bucket
``B`` is a hash ``{pb:NS:B}:v`` of values and a sorted set ``{pb:NS:B}:k`` of
8-byte big-endian members (score 0, read with ``ZRANGEBYLEX``); the hash tag
puts both in one slot, and the tags spread the buckets over the slots and so
over the masters.  There is one ordered index per bucket, never one global
key on one node.  An ordered scan merges the per-bucket scans: because
buckets are key ranges the merge is an ordered concatenation, bucket after
bucket, each chunk one Lua script on its node (ZRANGEBYLEX + HMGET).
``scan_arrays`` is its bulk form (numpy keys, one value buffer per chunk): the
redis engine's bulk script, bucket by bucket.
``get_many`` is one HMGET per bucket touched, pipelined per node.

Atomic write batches (the guarantee the conformance kit checks).  A batch
whose keys fall in one bucket is one ``MULTI/EXEC`` in its slot.  A batch
spanning buckets is first written whole to an intent journal (a hash
``{pb:NS:j}:log``, one field per batch, in one slot), then applied as one
``MULTI/EXEC`` per bucket, all nodes in parallel.  Its journal field is
deleted together with the next batch's journal write (or on close), and a
single-bucket batch first deletes it.  Opening the store completes every
batch left in the journal, in order, before anything else, and a write that
failed half way is completed by the next write.  So after a crash of the
client or of servers every batch is all or nothing once the store is opened
again.  While a spanning batch is being applied, a reader in another client
may see part of it.  Completing a journal entry repeats its puts and
deletes, which is only right if nothing newer touched those keys: hence one
writing process per store (threads of that process are serialised by a
lock around ``write``), and a store is opened again only once its writer
is gone (opening completes whatever the journal holds).  A left journal
field that ``close`` cannot delete (the cluster is down) stays for the
next open, which repeats that batch harmlessly.

Durability.  As ``redis``: ``sync`` needs ``appendonly yes`` +
``appendfsync always`` on every node, and in addition every write waits for
``WAIT 1`` (one replica) on each master it touched, so an acknowledged batch
survives losing that master (failover); at open every master must have a
replica.  ``async`` needs the AOF with ``everysec`` or ``always``; ``off``
anything.  During a failover writes are retried (topology refreshed) for up
to ``retry_seconds`` (default 30) before one line is raised; reads retry as
redis-py does.  A cluster with slots no node serves is refused at open with
the uncovered ranges.

Other choices as in :mod:`prefixbench.engines.redis` (the store directory's
``redis-store.json``, url precedence with ``$PREFIXBENCH_REDIS_CLUSTER_URL``
and default ``redis://127.0.0.1:7000``, ``server_info``, ``drop``);
``size_on_disk`` sums the RDB and AOF files of every node, replicas included.
``buckets`` is fixed when the store is created and recorded in its directory.
"""
from __future__ import annotations

import struct
import threading
import time

from prefixbench.engines.base import (EngineOption, SegmentStore, StoreConfig, check_options,
                                      chunked_scan, import_binding, int_option)
from prefixbench.engines.redis import (INSTALL, NEEDS, SCAN_BATCH, SCAN_BULK_LUA, SCAN_LUA,
                                       batch_commands, bulk_hash_chunks, scan_arrays_args,
                                       check_aof, decode_chunk, is_local, lex_bounds,
                                       open_namespace, redact, server_error, server_files_bytes,
                                       transaction_error, write_marker)
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl

DEFAULT_URL = "redis://127.0.0.1:7000"
URL_ENV = "PREFIXBENCH_REDIS_CLUSTER_URL"
OPTIONS = {
    "url": EngineOption(f"the store's, else ${URL_ENV}, else {DEFAULT_URL}",
                        "a node of the cluster"),
    "buckets": EngineOption(256, "key ranges the u64 key space is cut into (a power of two "
                            "<= 65536), fixed at creation"),
    "socket_timeout": EngineOption(30, "seconds a call may wait for a node"),
    "retry_seconds": EngineOption(30, "how long writes retry through a failover before one "
                                  "error line"),
    "wait_timeout_ms": EngineOption(5000, "WAIT timeout for a replica to take a write"),
}
SLOTS = 16384
_PUT = struct.Struct(">QI")
_HEAD = struct.Struct(">4sII")
_SEQ = struct.Struct(">QQ")
MAGIC = b"PBJ1"


def encode_record(puts, deletes) -> bytes:
    """A journal record: every put (key, length, value) and every delete of one batch."""
    out = bytearray(_HEAD.pack(MAGIC, len(puts), len(deletes)))
    for k, v in puts:
        out += _PUT.pack(k, len(v))
        out += v
    for k in deletes:
        out += k.to_bytes(8, "big")
    return bytes(out)


def decode_record(data: bytes):
    magic, n_puts, n_dels = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError("not a journal record")
    pos, puts = _HEAD.size, []
    for _ in range(n_puts):
        k, n = _PUT.unpack_from(data, pos)
        pos += _PUT.size
        puts.append((k, data[pos:pos + n]))
        pos += n
    dels = [int.from_bytes(data[pos + 8 * i:pos + 8 * i + 8], "big") for i in range(n_dels)]
    return puts, dels


def uncovered_ranges(slot_table) -> list[tuple[int, int]]:
    """Slot ranges no node serves, from ``CLUSTER SLOTS`` rows ``[start, end, ...]``."""
    covered = sorted((int(r[0]), int(r[1])) for r in slot_table)
    gaps, nxt = [], 0
    for a, b in covered:
        if a > nxt:
            gaps.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt < SLOTS:
        gaps.append((nxt, SLOTS - 1))
    return gaps


class _Retry(Exception):
    """A node answered with a topology error (MOVED, a dead connection, ...): retry."""


class RedisClusterStore(SegmentStore):
    """Key ranges (buckets) over the slots of a Redis Cluster; journaled spanning batches."""

    name = "redis-cluster"
    OPTIONS = OPTIONS
    gil_free_calls = frozenset({"get", "get_many", "write"})

    def __init__(self, config: StoreConfig):
        super().__init__(config)
        opts = check_options(self.name, config.options, OPTIONS)
        self._timeout = int_option(opts, "socket_timeout", OPTIONS["socket_timeout"].default, 1)
        self._retry_s = int_option(opts, "retry_seconds", OPTIONS["retry_seconds"].default, 0)
        self._wait_ms = int_option(opts, "wait_timeout_ms", OPTIONS["wait_timeout_ms"].default, 1)
        nb = int_option(opts, "buckets", OPTIONS["buckets"].default, 1)
        if nb & (nb - 1) or nb > 1 << 16:
            raise ConfigError(f"option buckets: {nb} must be a power of two <= 65536")
        self._bits = nb.bit_length() - 1
        self._shift = 64 - self._bits
        self.buckets = nb
        redis = import_binding(self.name, "redis", INSTALL)
        self._redis, self._ex = redis, redis.exceptions
        self.path, self.url, meta, new = open_namespace(
            config, self.name, URL_ENV, DEFAULT_URL, {"buckets": nb})
        self.namespace = meta["namespace"]
        nb = int(meta["buckets"])
        self._bits = nb.bit_length() - 1
        self._shift = 64 - self._bits
        self.buckets = nb
        self.where = f"redis-cluster {redact(self.url)}"
        self._wait = 1 if config.durability == "sync" else 0
        ns = self.namespace
        self._vkeys = [f"{{pb:{ns}:{b:04x}}}:v".encode() for b in range(nb)]
        self._zkeys = [f"{{pb:{ns}:{b:04x}}}:k".encode() for b in range(nb)]
        self._jkey = f"{{pb:{ns}:j}}:log".encode()
        self._wlock = threading.Lock()
        self._seq_base = time.time_ns()
        self._seq = 0
        self._done_field: bytes | None = None     # applied, its journal field not yet deleted
        self._unfinished: tuple | None = None     # (field, puts, deletes) of a failed write
        self._rc = None
        try:
            self._check_cluster()
            self._rc = redis.RedisCluster.from_url(
                self.url, socket_timeout=self._timeout, socket_connect_timeout=self._timeout,
                require_full_coverage=True)
            self._scan_script = self._rc.register_script(SCAN_LUA)
            self._bulk_script = self._rc.register_script(SCAN_BULK_LUA)
            if new:
                write_marker(self.path, meta)
            with self._wlock:
                self._complete_journal()
        except self._ex.RedisError as e:
            self._close()
            raise server_error(self.where, e, "opening the store") from None
        except BaseException:
            self._close()
            raise

    # ----- open-time checks ---------------------------------------------
    def _node_client(self, host, port):
        parts = self._redis.connection.parse_url(self.url)
        return self._redis.Redis(host=host, port=port, username=parts.get("username"),
                                 password=parts.get("password"), socket_timeout=self._timeout,
                                 socket_connect_timeout=self._timeout)

    def _check_cluster(self):
        """Every slot served, every node's AOF fit for the durability, replicas under sync."""
        parts = self._redis.connection.parse_url(self.url)
        seed = self._node_client(parts.get("host", "127.0.0.1"), parts.get("port", 7000))
        try:
            try:
                table = seed.execute_command("CLUSTER SLOTS")
            except self._ex.ResponseError as e:
                if "cluster support disabled" in str(e):
                    raise ConfigError(f"{self.where}: the server is not a cluster (cluster "
                                      f"support disabled); use -e redis for it") from None
                raise
            gaps = uncovered_ranges(table)
            if gaps:
                shown = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in gaps[:4])
                more = f" and {len(gaps) - 4} more ranges" if len(gaps) > 4 else ""
                raise StoreError(f"{self.where}: slots {shown}{more} are not served by any "
                                 f"node (cluster_state fail); every slot must be covered")
            info = seed.execute_command("CLUSTER INFO")
            if isinstance(info, bytes):
                info = info.decode()
            if isinstance(info, str):
                info = dict(ln.split(":", 1) for ln in info.split() if ":" in ln)
            if str(info.get("cluster_state", "ok")).strip() != "ok":
                raise StoreError(f"{self.where}: cluster_state {info.get('cluster_state')} "
                                 f"({info.get('cluster_slots_fail', '?')} slots on failed "
                                 f"nodes, {info.get('cluster_slots_ok', '?')} ok); every slot "
                                 f"must be served")
        finally:
            seed.close()
        nodes = set()
        for row in table:
            nodes.update((n[0].decode() if isinstance(n[0], bytes) else n[0], int(n[1]))
                         for n in row[2:])
        if self._wait:
            self._check_replicas(parts)
        if NEEDS[self.config.durability] is None:
            return
        for host, port in sorted(nodes):
            c = self._node_client(host, port)
            try:
                cfg = {}
                for name in ("appendonly", "appendfsync"):
                    for k, v in c.config_get(name).items():
                        cfg[k.decode() if isinstance(k, bytes) else k] = (
                            v.decode() if isinstance(v, bytes) else v)
            except self._ex.ResponseError as e:
                raise StoreError(f"{self.where}: cannot check durability="
                                 f"{self.config.durability} on node {host}:{port} (CONFIG GET "
                                 f"refused: {e}); use durability=off") from None
            finally:
                c.close()
            check_aof(f"{self.where} node {host}:{port}", self.config.durability,
                      cfg.get("appendonly", "no"), cfg.get("appendfsync", "?"))

    def _check_replicas(self, parts):
        """Under sync every master serving slots needs a live replica (from CLUSTER NODES)."""
        seed = self._node_client(parts.get("host", "127.0.0.1"), parts.get("port", 7000))
        try:
            text = seed.execute_command("CLUSTER NODES")
        finally:
            seed.close()
        replicas: dict[str, int] = {}
        for info in text.values():        # redis-py parses CLUSTER NODES by address
            flags = str(info.get("flags", ""))
            if "slave" in flags and "fail" not in flags and info.get("master_id") not in ("-", None):
                replicas[info["master_id"]] = replicas.get(info["master_id"], 0) + 1
        for addr, info in text.items():
            flags = str(info.get("flags", ""))
            if "master" in flags and info.get("slots") and not replicas.get(info.get("node_id")):
                raise ConfigError(f"{self.where}: master {addr.split('@')[0]} has no replica; "
                                  f"durability=sync waits for one (WAIT 1): start the cluster "
                                  f"with --replicas 1 or use durability=async")

    # ----- raw MULTI/EXEC blocks on the nodes ------------------------------
    def _retryable(self, err) -> bool:
        ex = self._ex
        return isinstance(err, (ex.ConnectionError, ex.TimeoutError, ex.MovedError, ex.AskError,
                                ex.TryAgainError, ex.ClusterDownError, ex.ReadOnlyError,
                                ex.BusyLoadingError, ex.MasterDownError, _Retry)) or \
            "CLUSTERDOWN" in str(err) or "MOVED" in str(err)

    def _refresh(self):
        try:
            self._rc.nodes_manager.initialize()
        except Exception:     # noqa: BLE001 - the next round retries; the deadline raises
            pass

    def _run_blocks(self, blocks, action: str, oom_note: str = "", retry_s: float | None = None):
        """Run ``[(routing_key, [commands])]``, each as MULTI/EXEC in its key's slot, nodes in
        parallel, ``WAIT`` per node under sync; blocks that met a topology error are retried
        for ``retry_s`` (default: the ``retry_seconds`` option)."""
        ex = self._ex
        pending = list(blocks)
        retry_s = self._retry_s if retry_s is None else retry_s
        deadline = time.monotonic() + retry_s
        fatal = None
        attempt, last = 0, None
        while pending:
            by_node: dict = {}
            failed = []
            for blk in pending:
                try:
                    node = self._rc.get_node_from_key(blk[0])
                except Exception as e:    # noqa: BLE001 - no node for the slot yet
                    failed.append(blk)
                    last = e
                    continue
                by_node.setdefault(node.name, (node, []))[1].append(blk)
            sent = []
            for node, blks in by_node.values():
                cmds = []
                for _key, bc in blks:
                    cmds += [("MULTI",), *bc, ("EXEC",)]
                if self._wait:
                    cmds.append(("WAIT", self._wait, self._wait_ms))
                pool = conn = None
                try:
                    pool = self._rc.get_redis_connection(node).connection_pool
                    conn = pool.get_connection()
                    conn.send_packed_command(conn.pack_commands(cmds))
                    sent.append((node, blks, len(cmds), pool, conn))
                except ex.RedisError as e:
                    if conn is not None:
                        conn.disconnect()
                        pool.release(conn)
                    failed += blks
                    last = e
            for node, blks, n, pool, conn in sent:
                replies = []
                try:
                    for _ in range(n):
                        try:
                            replies.append(conn.read_response())
                        except ex.ResponseError as e:
                            replies.append(e)
                except ex.RedisError as e:
                    conn.disconnect()
                    failed += blks
                    last = e
                    continue
                finally:
                    pool.release(conn)
                i, bad = 0, []
                for blk in blks:
                    k = len(blk[1]) + 2
                    err = transaction_error(replies[i:i + k], ex)
                    i += k
                    if err is None:
                        continue
                    if not self._retryable(err):
                        # read every other node's replies first: the connections go back
                        # to their pools clean
                        fatal = fatal or server_error(f"{self.where} node {node.name}", err,
                                                      action, oom_note)
                        continue
                    bad.append(blk)
                    last = err
                if self._wait and not bad:
                    got = replies[-1]
                    if isinstance(got, Exception) or int(got) < self._wait:
                        bad = blks
                        last = _Retry(f"no replica acknowledged the write within "
                                      f"{self._wait_ms} ms (WAIT {self._wait})")
                failed += bad
            if fatal is not None:
                raise fatal
            if not failed:
                return
            if time.monotonic() > deadline:
                raise server_error(self.where, last, f"{action}; gave up after "
                                   f"{retry_s} s of retries")
            attempt += 1
            time.sleep(min(0.05 * attempt, 0.5))
            self._refresh()
            pending = failed

    # ----- the journal ------------------------------------------------------
    def _bucket(self, key: int) -> int:
        return key >> self._shift if self._bits else 0

    def _apply(self, puts, deletes, action):
        groups: dict[int, tuple[list, list]] = {}
        for k, v in puts:
            groups.setdefault(self._bucket(k), ([], []))[0].append((k, v))
        for k in deletes:
            groups.setdefault(self._bucket(k), ([], []))[1].append(k)
        blocks = [(self._vkeys[b], batch_commands(self._vkeys[b], self._zkeys[b], p, d))
                  for b, (p, d) in sorted(groups.items())]
        self._run_blocks(blocks, action, "the batch is in the intent journal and is completed "
                         "by the next write or open")
        return len(groups)

    def _complete_journal(self):
        """Finish every batch a crashed or failed writer left in the journal, in order."""
        fields = self._call("journal", self._rc.hgetall, self._jkey)
        for field in sorted(fields):
            try:
                puts, dels = decode_record(fields[field])
            except (ValueError, struct.error):
                raise StoreError(f"{self.where}: journal entry {field.hex()} in "
                                 f"{self._jkey.decode()} is not a prefixbench record") from None
            self._apply(puts, dels, "completing a journaled batch")
        if fields:
            self._run_blocks([(self._jkey, [("HDEL", self._jkey, *fields)])], "journal")

    def _write(self, puts, deletes):
        with self._wlock:
            if self._unfinished is not None:
                field, p, d = self._unfinished
                self._apply(p, d, "completing the batch of a failed write")
                self._done_field, self._unfinished = field, None
            buckets = {self._bucket(k) for k, _ in puts} | {self._bucket(k) for k in deletes}
            if len(buckets) <= 1:
                if self._done_field is not None:
                    self._run_blocks([(self._jkey, [("HDEL", self._jkey, self._done_field)])],
                                     "journal")
                    self._done_field = None
                if buckets:
                    self._apply(puts, deletes, "write batch")
                return
            self._seq += 1
            field = _SEQ.pack(self._seq_base, self._seq)
            cmds = []
            if self._done_field is not None:
                cmds.append(("HDEL", self._jkey, self._done_field))
            cmds.append(("HSET", self._jkey, field, encode_record(puts, deletes)))
            try:
                self._run_blocks([(self._jkey, cmds)], "write batch (journal)")
            except StoreError:
                # the record may or may not be there: completing it later is right either way
                self._unfinished = (field, list(puts), list(deletes))
                raise
            self._done_field = None
            try:
                self._apply(puts, deletes, "write batch")
            except StoreError:
                self._unfinished = (field, list(puts), list(deletes))
                raise
            self._done_field = field

    # ----- reads --------------------------------------------------------------
    def _call(self, action, fn, *args):
        try:
            return fn(*args)
        except self._ex.RedisError as e:
            raise server_error(self.where, e, action) from None

    def _get(self, key):
        b = self._bucket(key)
        return self._call("get", self._rc.hget, self._vkeys[b], key.to_bytes(8, "big"))

    def _get_many(self, keys):
        groups: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(self._bucket(k), []).append(i)
        if len(groups) == 1:
            (b, idx), = groups.items()
            return self._call("get_many", self._rc.hmget, self._vkeys[b],
                              [k.to_bytes(8, "big") for k in keys])
        pipe = self._rc.pipeline()
        order = list(groups.items())
        for b, idx in order:
            pipe.hmget(self._vkeys[b], [keys[i].to_bytes(8, "big") for i in idx])
        replies = self._call("get_many", pipe.execute)
        out = [None] * len(keys)
        for (b, idx), vals in zip(order, replies):
            for i, v in zip(idx, vals):
                out[i] = v
        return out

    def _bucket_chunk(self, b, lo, end):
        lo_b, hi_b = lex_bounds(lo, end)
        reply = self._call("scan", self._scan_script, [self._zkeys[b], self._vkeys[b]],
                           [lo_b, hi_b, SCAN_BATCH])
        return decode_chunk(reply)

    def _scan(self, start, end):
        for b, lo, hi in self._bucket_ranges(start, end):
            yield from chunked_scan(lambda x, b=b, hi=hi: self._bucket_chunk(b, x, hi), lo, hi)

    def scan_arrays(self, start: int = 0, end: int | None = None, chunk: int | None = None):
        """The bulk ordered scan, as :meth:`prefixbench.engines.redis.RedisStore.scan_arrays`
        (numpy keys and one value buffer per chunk): bucket after bucket, each bucket's
        chunks one Lua call after another on its node."""
        lo, hi, limit = scan_arrays_args(start, end, chunk)
        self._stats.scans += 1
        if hi is not None and hi <= lo:
            return iter(())
        return self._bulk(lo, hi, limit)

    def _bulk(self, start, end, limit):
        def run(calls):
            return [self._call("scan", script, keys, args) for script, keys, args in calls]

        for b, lo, hi in self._bucket_ranges(start, end):
            yield from bulk_hash_chunks(run, self._bulk_script, self._zkeys[b], self._vkeys[b],
                                        lo, hi, limit)

    def _bucket_ranges(self, start, end):
        """``(bucket, lo, hi)`` of every bucket ``[start, end)`` touches (``hi`` None: the
        key space's end), in key order."""
        first = self._bucket(start)
        last = self.buckets - 1 if end is None or end == 0 else self._bucket(end - 1)
        for b in range(first, last + 1):
            lo = max(start, b << self._shift) if self._bits else start
            hi = None if b == self.buckets - 1 else (b + 1) << self._shift
            if end is not None and (hi is None or end < hi):
                hi = end
            if hi is not None and lo >= hi:
                continue
            yield b, lo, hi

    def _sync(self):
        self._call("sync", self._rc.ping)

    def _size_on_disk(self):
        total = 0
        for node in self._rc.get_nodes():
            r = self._rc.get_redis_connection(node)

            def cfg(r=r):
                out = {}
                for name in ("dir", "dbfilename", "appenddirname"):
                    for k, v in r.config_get(name).items():
                        out[k.decode() if isinstance(k, bytes) else k] = (
                            v.decode() if isinstance(v, bytes) else v)
                return out

            total += self._call("size_on_disk", server_files_bytes, cfg,
                                lambda r=r: r.info("persistence"), is_local(self.url))
        return total

    def server_info(self) -> dict:
        """Figures from INFO summed over the masters, and this store's entries."""
        out: dict = {"masters": 0}
        for node in self._rc.get_primaries():
            info = self._call("info", self._rc.get_redis_connection(node).info)
            out["masters"] += 1
            for k in ("used_memory", "used_memory_rss", "aof_current_size",
                      "total_commands_processed", "keyspace_hits", "keyspace_misses"):
                if k in info:
                    out[k] = out.get(k, 0) + int(info[k])
        pipe = self._rc.pipeline()
        for v in self._vkeys:
            pipe.hlen(v)
        out["entries"] = sum(self._call("info", pipe.execute))
        return out

    def drop(self) -> None:
        """Delete this store's keys (every bucket and the journal) from the cluster."""
        for key in [*self._vkeys, *self._zkeys, self._jkey]:
            self._call("drop", self._rc.unlink, key)

    def _close(self):
        rc, self._rc = self._rc, None
        if rc is None:
            return
        try:
            if self._done_field is not None and self._unfinished is None:
                self._rc = rc
                self._run_blocks([(self._jkey, [("HDEL", self._jkey, self._done_field)])],
                                 "closing", retry_s=0)
                self._done_field = None
        except Exception:     # noqa: BLE001 - a left field is completed at the next open
            pass
        finally:
            self._rc = None
            try:
                rc.close()
            except Exception:     # noqa: BLE001
                pass


@hookimpl
def prefixbench_register_engines(register):
    register("redis-cluster", RedisClusterStore, "a Redis Cluster (RedisCluster, url=): "
             "key-range buckets over the slots, journaled atomic batches; durability sync "
             "(appendfsync always + WAIT 1) survives kill -9 of servers and a failover")
