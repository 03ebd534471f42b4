"""``redis``: the store in a redis-server, through redis-py.

Layout.  A store is a *namespace* on the server: a hash ``pb:NS:v`` (field =
the key as 8 big-endian bytes, value = the value) and a sorted set
``pb:NS:k`` of the same 8-byte members, all with score 0, so ``ZRANGEBYLEX``
walks them in byte order, which is numeric order (scores are doubles and
cannot hold a u64).  A scan chunk is one Lua script (ZRANGEBYLEX, then HMGET
of those members), so each chunk is one consistent read.  ``get_many`` is one
HMGET; a write batch is one ``MULTI/EXEC`` (HSET, ZADD, then HDEL, ZREM), so
it is atomic for readers and across a crash of the client or the server.

Decisions where the issue is silent:

- The store directory (``StoreConfig.path``) holds ``redis-store.json``: the
  namespace (random, made on create) and the url without its password (give
  the password again with ``url=``).  It is the store's identity:
  ``create=False`` opens the namespace recorded there, and a directory without
  it is "no store here", as for the embedded engines.  Two stores on one
  server never share keys.
- ``url=`` (``redis://[:PASSWORD@]HOST:PORT/DB`` or ``unix://``) wins; else
  the url recorded in the directory, else ``$PREFIXBENCH_REDIS_URL``, else
  ``redis://127.0.0.1:6379/0`` (``prefixbench server redis up``'s default).
  Error lines show the url with the password replaced by ``***``.
- Durability is checked against the server at open (``CONFIG GET``):
  ``sync`` needs ``appendonly yes`` and ``appendfsync always`` (every
  acknowledged batch is fsynced by the server before it replies, so it
  survives kill -9 of the server and power loss); ``async`` needs the AOF with
  ``everysec`` or ``always`` (survives kill -9 of the client: the data is in
  the server; the server fsyncs within about a second); ``off`` accepts any
  server.  The engine never changes the server's configuration.
- ``sync()`` is a round trip that returns once every earlier write is applied;
  Redis 7.0 has no command to force an AOF fsync (WAITAOF is 7.2), so under
  ``async`` the server's own once-a-second fsync is the durability point.
- ``size_on_disk`` is the allocated blocks of the server's RDB file and AOF
  directory (``CONFIG GET dir``), read where this machine can see them (a
  server on 127.0.0.1 or a unix socket); for a remote server it is
  ``aof_current_size`` from INFO.  It counts the whole server, not one
  namespace.  The AOF is Redis' data, so ``disk_usage`` reports no separate log.
- ``server_info()`` gives the server-side figures from INFO (memory, keys,
  AOF size, commands processed) and this namespace's entry count.
- ``drop()`` deletes the namespace's keys (for temporary stores); closing
  never deletes anything.
- ``layout=packed`` (with ``pack_bits=B``, default 16, fixed at create and
  recorded in the directory) is the memory-saving layout worth measuring:
  the values live in ``2**B`` small hashes chosen by the keys' top ``B`` bits
  (``pb:NS:p:BUCKET``) and there is no sorted set.  Redis keeps a hash of up
  to ``hash-max-listpack-entries`` fields (512 on Debian's redis-server 7.0
  here; check ``CONFIG GET hash-max-listpack-*``) as one compact listpack, so
  choose ``B`` near ``log2(entries / 400)``.  The ordered scan reads whole
  buckets in key order (HGETALL, 256 per pipeline) and sorts each; a write
  batch is still one MULTI/EXEC; ``get_many`` is one HMGET per bucket,
  pipelined.

  Measured (redis-server 7.0.15, jemalloc, ``INFO memory`` ``used_memory``
  minus the empty server's, divided by the 1,000,063 ssd-blockhash entries of
  8-byte key + 16-byte value that ``recover``'s lmcache-agent build wrote, no
  AOF; the server's RSS after the build in brackets):

  ============================  ==========  ===========  =================
  layout                        B/entry     (RSS B)      entries / bucket
  ============================  ==========  ===========  =================
  ``hash``                      198.3       (215.9)      -
  ``packed``, pack_bits=16      36.9        (63.3)       15, listpack
  ``packed``, pack_bits=13      31.1        (51.8)       122, listpack
  ``packed``, pack_bits=12      30.6        (46.2)       244, listpack
  ``packed``, pack_bits=10      89.3        (105.0)      977, hashtable
  ============================  ==========  ===========  =================

  While the buckets stay listpacks ``packed`` takes 5-6.5x less than
  ``hash``; a bucket past ``hash-max-listpack-entries`` becomes a hash table
  and keeps about half the saving (no sorted set, but a dict entry per field).
  The pre-flight estimate (``harness/preflight.py``) follows these figures.
- ``scan_arrays(start, end)`` is the bulk form of the ordered scan for whole-store
  reads (redis-blockhash's rebuild): per chunk a numpy uint64 key array and one
  bytes object of the values back to back, built by a Lua script that
  concatenates a chunk's members and values on the server, so the client
  decodes three strings with numpy instead of one Python object per entry;
  calls are pipelined (see its docstring).  ``scan()`` stays the per-key
  reference that the tests hold it equal to.  The server's Lua conversions
  (ZRANGEBYLEX and HMGET replies into Lua tables) are now most of its cost.
- ``cache_bytes`` and ``direct_io`` have no meaning for a server (its memory
  is its own ``maxmemory``); they are accepted and ignored.
"""
from __future__ import annotations

import json
import os
import secrets
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from prefixbench import phases as _phases
from prefixbench.engines.base import (EngineOption, MAX_KEY, SCAN_CHUNK, SegmentStore,
                                      StoreConfig, allocated_bytes, check_key, check_options,
                                      choice_option, chunked_scan, decode_key, encode_key,
                                      import_binding, int_option, prepare_store_dir)
from prefixbench.errors import ConfigError, StoreError
from prefixbench.hookspecs import hookimpl

MARKER = "redis-store.json"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
URL_ENV = "PREFIXBENCH_REDIS_URL"
INSTALL = "pip install 'prefixbench[redis]' (redis-py >= 5)"

#: items per scan round trip: more than the base SCAN_CHUNK (a chunk may be longer;
#: fewer round trips for a full scan, e.g. redis-blockhash's rebuild), within the
#: 8000 values Redis' Lua can unpack into one HMGET
SCAN_BATCH = 4096

#: one scan chunk: members of [ARGV[1], ARGV[2]) from the sorted set, then their values
SCAN_LUA = """
local m = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
if #m == 0 then return {{}, {}} end
return {m, redis.call('HMGET', KEYS[2], unpack(m))}
"""

#: entries per call of the bulk scan (:meth:`RedisStore.scan_arrays`) unless asked for
#: fewer: one Lua call of this many entries keeps the server from other clients for
#: about 40 ms on this project's machine (the ``hash`` layout: ZRANGEBYLEX and HMGET
#: replies turned into Lua strings, about 2.5 us an entry, are most of a rebuild now)
SCAN_BULK = 16384
#: the most a caller may ask for per bulk call (the server serves nobody else meanwhile)
SCAN_BULK_MAX = 65536
#: bulk calls sent per pipeline: the server runs the next while the client decodes one
SCAN_BULK_PIPELINE = 4

#: The bulk scripts return a chunk as strings: the members (8 bytes each) back to back,
#: the values back to back, and either one width (every value that long; the lengths
#: string empty) or the values' lengths as little-endian u32s.  Lua's conversions
#: are the cost here, so the lengths are built only when the values differ in length.
_BULK_TAIL = """
local lens = ''
if not same and j > 0 then
  local ls = {}
  for i = 1, j do ls[i] = struct.pack('<I4', #vs[i]) end
  lens = table.concat(ls)
end
"""

#: one bulk chunk of the hash layout: up to ARGV[3] members of [ARGV[1], ARGV[2]) and
#: their values; also the number of members read and the last one
SCAN_BULK_LUA = """
local m = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = #m
if n == 0 then return {'', '', '', 0, 0, ''} end
local ks, vs, j, w, same = {}, {}, 0, -1, true
for i = 1, n, 4096 do
  local top = math.min(i + 4095, n)
  local v = redis.call('HMGET', KEYS[2], unpack(m, i, top))
  for t = 1, top - i + 1 do
    local x = v[t]
    if x then
      local k = m[i + t - 1]
      if #k ~= 8 then return redis.error_reply('a member of ' .. KEYS[1] .. ' is not 8 bytes') end
      j = j + 1
      ks[j] = k
      vs[j] = x
      if w < 0 then w = #x elseif #x ~= w then same = false end
    end
  end
end
""" + _BULK_TAIL + """
return {table.concat(ks), table.concat(vs), lens, w, n, m[n]}
"""

#: one bulk chunk of the packed layout: every field of the buckets ARGV[2]..ARGV[3]
#: (hex suffixes of the prefix ARGV[1]), bucket by bucket, unsorted within a bucket.
#: The bucket names are made here, not passed as KEYS: passing thousands of KEYS costs
#: the server more than reading them (a standalone server needs no declared keys)
SCAN_PACKED_LUA = """
local ks, vs, j, w, same = {}, {}, 0, -1, true
for b = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local name = ARGV[1] .. string.format('%x', b)
  local f = redis.call('HGETALL', name)
  for i = 1, #f, 2 do
    if #f[i] ~= 8 then return redis.error_reply('a field of ' .. name .. ' is not 8 bytes') end
    local x = f[i + 1]
    j = j + 1
    ks[j] = f[i]
    vs[j] = x
    if w < 0 then w = #x elseif #x ~= w then same = false end
  end
end
""" + _BULK_TAIL + """
return {table.concat(ks), table.concat(vs), lens, w}
"""

#: ``hash``: one hash of values + one sorted set of keys per store; ``packed``: the
#: values in 2**pack_bits small hashes by the keys' top bits, no sorted set
LAYOUTS = ("hash", "packed")
#: ``pack_bits`` of ``layout=packed``: the default and the largest allowed
DEFAULT_PACK_BITS = 16
MAX_PACK_BITS = 24
OPTIONS = {
    "url": EngineOption(f"the store's, else ${URL_ENV}, else {DEFAULT_URL}",
                        "the server (redis:// or unix://)"),
    "socket_timeout": EngineOption(30, "seconds a call may wait for the server"),
    "layout": EngineOption("hash", "hash (hash + sorted set) or packed (small hashes by "
                           "key bits), fixed at creation"),
    "pack_bits": EngineOption(DEFAULT_PACK_BITS, f"layout=packed: 2**B small hashes by the "
                              f"keys' top B bits (1 to {MAX_PACK_BITS}), fixed at creation"),
}
#: buckets read per pipeline by a packed scan
PACKED_SCAN_BUCKETS = 256

#: what each durability mode needs of the server's AOF
NEEDS = {"sync": ("always",), "async": ("everysec", "always"), "off": None}


def redact(url: str) -> str:
    """``url`` with its password (if any) shown as ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed url>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "unix" or parts.hostname in ("127.0.0.1", "localhost", "::1")


def server_error(where: str, exc: BaseException, action: str = "",
                 oom_note: str = "") -> StoreError:
    """One line for what the server or the network said, naming the url (``where``)."""
    redis = import_binding("redis", "redis", INSTALL)
    ex = redis.exceptions
    msg = " ".join(str(exc).split())
    low = msg.lower()
    doing = f" ({action})" if action else ""
    oom_outcome = oom_note or "the batch was not applied"
    if "noauth" in low or "authentication required" in low or "already authenticated" in low:
        text = "the server needs a password: give it in url=redis://:PASSWORD@host:port"
    elif isinstance(exc, ex.AuthenticationError) or "wrongpass" in low or "invalid password" in low:
        text = "authentication failed: wrong password or user (AUTH refused)"
    elif isinstance(exc, ex.OutOfMemoryError) or "maxmemory" in low:
        text = (f"server is out of memory (maxmemory reached, OOM): {oom_outcome}; "
                f"raise the server's maxmemory or free memory")
    elif isinstance(exc, ex.TimeoutError):
        text = f"no answer in time{doing}: {msg}"
    elif isinstance(exc, ex.ConnectionError):
        if "refused" in low or "errno 111" in low:
            text = "connection refused: is a server running there? (prefixbench server redis up)"
        else:
            text = f"connection lost{doing}: {msg}"
    else:
        text = f"{msg}{doing}"
    return StoreError(f"{where}: {text}")


def check_aof(where: str, durability: str, appendonly: str, appendfsync: str) -> None:
    """One line if the server's AOF cannot keep the promise of ``durability``."""
    needs = NEEDS[durability]
    if needs is None:
        return
    if appendonly != "yes":
        raise ConfigError(f"{where}: durability={durability} needs the server's AOF, but it "
                          f"runs without one (appendonly no); start it with "
                          f"'prefixbench server ... up --appendfsync {needs[0]}' or use "
                          f"durability=off")
    if appendfsync not in needs:
        raise ConfigError(f"{where}: durability={durability} needs appendfsync "
                          f"{' or '.join(needs)}, the server has appendfsync {appendfsync}")


def read_marker(path: str, engine: str) -> dict | None:
    f = os.path.join(path, MARKER)
    try:
        with open(f) as fh:
            meta = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StoreError(f"{engine} store {f}: unreadable ({e})") from None
    if meta.get("engine") != engine or not isinstance(meta.get("namespace"), str):
        raise StoreError(f"{engine} store {f}: not a {engine} store (engine "
                         f"{meta.get('engine')!r})")
    return meta


def write_marker(path: str, meta: dict) -> None:
    f = os.path.join(path, MARKER)
    tmp = f + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, f)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_namespace(config: StoreConfig, engine: str, env: str, default: str,
                   layout: dict | None = None):
    """``(path, url, meta, new)`` of the store at ``config.path``.

    ``meta`` is the marker's content (namespace, url, the ``layout`` options
    the store was created with); ``new`` says it still has to be written,
    once the server has been reached.  A password is never written to it.
    An explicit layout option that differs from the store's is one error.
    """
    path = prepare_store_dir(config.path, config.create, engine, MARKER)
    meta = read_marker(path, engine)
    url = config.options.get("url") or (meta or {}).get("url") or os.environ.get(env) or default
    if not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"option url: {redact(str(url))!r} is not a redis:// or unix:// url")
    layout = dict(layout or {})
    if meta is not None:
        for key, value in layout.items():
            had = meta.get(key, value)
            if key in config.options and had != value:
                raise ConfigError(f"option {key}: the {engine} store at {path} was created "
                                  f"with {key}={had}, not {value}")
            meta[key] = had
        return path, url, meta, False
    recorded = redact(url).replace(":***@", "@").replace("//@", "//")
    meta = {"engine": engine, "namespace": secrets.token_hex(8), "url": recorded, **layout}
    return path, url, meta, True


def pack_commands_and_read(conn, commands, ex) -> list:
    """Send ``commands`` on one connection in one write; every reply, errors as values."""
    conn.send_packed_command(conn.pack_commands(commands))
    replies = []
    for _ in commands:
        try:
            replies.append(conn.read_response())
        except ex.ResponseError as e:
            replies.append(e)
    return replies


def transaction_error(replies, ex):
    """The error that stopped a MULTI/EXEC block: a queueing error, an abort or a failed command."""
    for r in replies:
        if isinstance(r, ex.ResponseError) and not isinstance(r, ex.ExecAbortError):
            return r
        if isinstance(r, list):
            for x in r:
                if isinstance(x, ex.ResponseError):
                    return x
    for r in replies:
        if isinstance(r, ex.ResponseError):
            return r
    return None


def batch_commands(vkey, zkey, puts, deletes) -> list[tuple]:
    """HSET/ZADD of the puts (the last put of a key wins), then HDEL/ZREM of the deletes."""
    cmds = []
    if puts:
        last = {}
        for k, v in puts:
            last[encode_key(k)] = v
        flat, zflat = [], []
        for m, v in last.items():
            flat += (m, v)
            zflat += (0, m)
        cmds += [("HSET", vkey, *flat), ("ZADD", zkey, *zflat)]
    if deletes:
        members = list({encode_key(k) for k in deletes})
        cmds += [("HDEL", vkey, *members), ("ZREM", zkey, *members)]
    return cmds


def scan_arrays_args(start, end, chunk) -> tuple[int, int | None, int]:
    """``(start, end, entries per call)`` of a ``scan_arrays`` call, checked."""
    lo = check_key(start, "scan start")
    hi = None if end is None else check_key(end, "scan end")
    limit = SCAN_BULK if chunk is None else int(chunk)
    if not 1 <= limit <= SCAN_BULK_MAX:
        raise ConfigError(f"scan chunk: {chunk!r} must be between 1 and {SCAN_BULK_MAX}")
    return lo, hi, limit


def lex_bounds(start: int, end: int | None) -> tuple[bytes, bytes]:
    return b"[" + encode_key(start), b"+" if end is None else b"(" + encode_key(end)


def decode_chunk(reply) -> list[tuple[int, bytes]]:
    members, values = reply
    return [(decode_key(m), v) for m, v in zip(members, values) if v is not None]


def bulk_arrays(ks: bytes, vs: bytes, ls: bytes, width: int):
    """``(keys, values, lengths)`` of one bulk reply (see ``_BULK_TAIL``): u64 keys,
    the values concatenated, their lengths (u32)."""
    keys = np.frombuffer(ks, dtype=">u8").astype(np.uint64)
    if ls or not len(keys):
        lengths = np.frombuffer(ls, dtype="<u4").astype(np.uint32)
    else:
        lengths = np.full(len(keys), width, dtype=np.uint32)
    if len(lengths) != len(keys) or int(lengths.sum(dtype=np.uint64)) != len(vs):
        raise StoreError("redis bulk scan: a reply whose parts do not agree "
                         f"({len(keys)} keys, {len(lengths)} lengths, {len(vs)} value bytes)")
    return keys, vs, lengths


def take_rows(keys, values: bytes, lengths, order):
    """The entries at positions ``order`` (in that order): keys, values, lengths.

    Values are gathered with one index array (numpy), not entry by entry."""
    lens = lengths[order]
    if len(order) == len(keys) and np.array_equal(order, np.arange(len(keys))):
        return keys, values, lengths
    buf = np.frombuffer(values, dtype=np.uint8)
    if len(lengths) and (lengths == lengths[0]).all():
        width = int(lengths[0])
        rows = buf.reshape(len(keys), width)[order]
        return keys[order], rows.tobytes(), lens
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    out_starts = np.zeros(len(order), dtype=np.int64)
    np.cumsum(lens[:-1], out=out_starts[1:])
    total = int(lens.sum(dtype=np.int64))
    shift = np.repeat(starts[order] - out_starts, lens.astype(np.int64))
    return keys[order], buf[np.arange(total, dtype=np.int64) + shift].tobytes(), lens


def bulk_hash_chunks(run, script, zkey: bytes, vkey: bytes, lo: int, end: int | None,
                     limit: int):
    """The bulk chunks of ``[lo, end)`` of one sorted set of members + hash of values
    (``SCAN_BULK_LUA``), ``SCAN_BULK_PIPELINE`` calls per ``run(calls)`` (each call
    ``(script, keys, args)``; ``run`` returns their replies in order)."""
    stop = MAX_KEY + 1 if end is None else end
    keys2 = [zkey, vkey]
    first, seen, width = lo, 0, None
    while lo < stop:
        if width is None:
            ranges = [(lo, stop)]
        else:
            ranges, a = [], lo
            while a < stop and len(ranges) < SCAN_BULK_PIPELINE:
                b = min(stop, a + width)
                ranges.append((a, b))
                a = b
        calls = [(script, keys2, list(lex_bounds(a, None if b > MAX_KEY else b)) + [limit])
                 for a, b in ranges]
        for (a, b), (ks, vs, ls, w, n, last) in zip(ranges, run(calls)):
            seen += n
            if ks:
                yield bulk_arrays(ks, vs, ls, w)
            if n >= limit:              # more in [a, b): go on after its last member
                k = decode_key(last)
                if k == MAX_KEY:
                    return
                lo = k + 1
                break
            lo = b
        # the next calls' key width: about 3/4 of a call's entries at the density seen
        width = max(1, (lo - first) * (limit - limit // 4) // seen) if seen else stop - lo


def server_files_bytes(config_get, info_get, local: bool) -> int:
    """Allocated bytes of a server's RDB file and AOF directory (see the module docstring)."""
    cfg = config_get()
    d = cfg.get("dir", "")
    if local and d and os.path.isdir(d):
        total = allocated_bytes(os.path.join(d, cfg.get("dbfilename", "dump.rdb")))
        if cfg.get("appenddirname"):
            total += allocated_bytes(os.path.join(d, cfg["appenddirname"]))
        return total
    return int(info_get().get("aof_current_size", 0))


class RedisStore(SegmentStore):
    """A namespace in a redis-server: hash of values + sorted set of 8-byte members."""

    name = "redis"
    OPTIONS = OPTIONS
    #: redis-py's socket reads release the GIL while they wait for the server
    gil_free_calls = frozenset({"get", "get_many", "write"})

    def __init__(self, config: StoreConfig):
        super().__init__(config)
        opts = check_options(self.name, config.options, OPTIONS)
        self._timeout = int_option(opts, "socket_timeout", OPTIONS["socket_timeout"].default, 1)
        layout = choice_option(opts, "layout", OPTIONS["layout"].default, LAYOUTS)
        bits = int_option(opts, "pack_bits", OPTIONS["pack_bits"].default, 1)
        if bits > MAX_PACK_BITS:
            raise ConfigError(f"option pack_bits: {bits} must be between 1 and {MAX_PACK_BITS}")
        redis = import_binding(self.name, "redis", INSTALL)
        self._ex = redis.exceptions
        self.path, self.url, meta, new = open_namespace(
            config, self.name, URL_ENV, DEFAULT_URL, {"layout": layout, "pack_bits": bits})
        self.namespace = meta["namespace"]
        self.layout, self.pack_bits = meta["layout"], int(meta["pack_bits"])
        self._packed = self.layout == "packed"
        self._shift = 64 - self.pack_bits
        self.where = f"redis {redact(self.url)}"
        self._vkey = f"pb:{self.namespace}:v".encode()
        self._zkey = f"pb:{self.namespace}:k".encode()
        self._pkey = f"pb:{self.namespace}:p:".encode()
        try:
            self._client = redis.Redis.from_url(self.url, socket_timeout=self._timeout,
                                                socket_connect_timeout=self._timeout,
                                                health_check_interval=0)
            self._client.ping()
            self._check_server()
        except self._ex.RedisError as e:
            self._client.close()
            raise server_error(self.where, e, "opening the store") from None
        except BaseException:
            self._client.close()
            raise
        if new:
            write_marker(self.path, meta)
        self._scan_script = self._client.register_script(SCAN_LUA)
        self._bulk_script = self._client.register_script(SCAN_BULK_LUA)
        self._packed_script = self._client.register_script(SCAN_PACKED_LUA)

    def _check_server(self):
        try:
            cfg = self._config_get("appendonly", "appendfsync")
        except self._ex.ResponseError as e:
            if NEEDS[self.config.durability] is None:
                return
            raise StoreError(f"{self.where}: cannot check durability={self.config.durability} "
                             f"against the server (CONFIG GET refused: {e}); use durability=off"
                             ) from None
        check_aof(self.where, self.config.durability, cfg.get("appendonly", "no"),
                  cfg.get("appendfsync", "?"))

    def _config_get(self, *names) -> dict:
        out = {}
        for name in names:
            for k, v in self._client.config_get(name).items():
                out[k.decode() if isinstance(k, bytes) else k] = (
                    v.decode() if isinstance(v, bytes) else v)
        return out

    def _call(self, action, fn, *args):
        try:
            return fn(*args)
        except self._ex.RedisError as e:
            raise server_error(self.where, e, action) from None

    # ----- primitives --------------------------------------------------
    def _bucket_key(self, key: int) -> bytes:
        return self._pkey + b"%x" % (key >> self._shift)

    def _get(self, key):
        vkey = self._bucket_key(key) if self._packed else self._vkey
        return self._call("get", self._client.hget, vkey, encode_key(key))

    def _get_many(self, keys):
        if not self._packed:
            return self._call("get_many", self._client.hmget, self._vkey,
                              [encode_key(k) for k in keys])
        groups: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(self._bucket_key(k), []).append(i)
        pipe = self._client.pipeline(transaction=False)
        for bkey, idx in groups.items():
            pipe.hmget(bkey, [encode_key(keys[i]) for i in idx])
        out = [None] * len(keys)
        for idx, vals in zip(groups.values(), self._call("get_many", pipe.execute)):
            for i, v in zip(idx, vals):
                out[i] = v
        return out

    def _packed_commands(self, puts, deletes) -> list[tuple]:
        """HSET per bucket (the last put of a key wins), then HDEL per bucket."""
        cmds = []
        last: dict[bytes, dict] = {}
        for k, v in puts:
            last.setdefault(self._bucket_key(k), {})[encode_key(k)] = v
        for bkey, fields in last.items():
            flat = []
            for m, v in fields.items():
                flat += (m, v)
            cmds.append(("HSET", bkey, *flat))
        gone: dict[bytes, set] = {}
        for k in deletes:
            gone.setdefault(self._bucket_key(k), set()).add(encode_key(k))
        cmds += [("HDEL", bkey, *members) for bkey, members in gone.items()]
        return cmds

    def _write(self, puts, deletes):
        if self._packed:
            cmds = self._packed_commands(puts, deletes)
        else:
            cmds = batch_commands(self._vkey, self._zkey, puts, deletes)
        if not cmds:
            return
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            replies = pack_commands_and_read(conn, [("MULTI",), *cmds, ("EXEC",)], self._ex)
        except self._ex.RedisError as e:
            conn.disconnect()
            raise server_error(self.where, e, "write batch; its outcome is unknown") from None
        finally:
            pool.release(conn)
        err = transaction_error(replies, self._ex)
        if err is not None:
            raise server_error(self.where, err, "write batch not applied")

    def _read_chunk(self, lo, end):
        lo_b, hi_b = lex_bounds(lo, end)
        reply = self._call("scan", self._scan_script, [self._zkey, self._vkey],
                           [lo_b, hi_b, SCAN_BATCH])
        return decode_chunk(reply)

    def _read_packed(self, lo, end):
        """Whole buckets from ``lo``'s, HGETALL pipelined, until SCAN_CHUNK items or the end."""
        items: list[tuple[int, bytes]] = []
        b = lo >> self._shift
        last = (1 << self.pack_bits) - 1 if end is None else (end - 1) >> self._shift
        while b <= last and len(items) < SCAN_CHUNK:
            top = min(last, b + PACKED_SCAN_BUCKETS - 1)
            pipe = self._client.pipeline(transaction=False)
            for x in range(b, top + 1):
                pipe.hgetall(self._pkey + b"%x" % x)
            for fields in self._call("scan", pipe.execute):
                got = sorted((decode_key(m), v) for m, v in fields.items())
                items += [(k, v) for k, v in got if k >= lo and (end is None or k < end)]
            b = top + 1
        return items

    def _scan(self, start, end):
        if end is not None and end <= start:
            return iter(())
        if self._packed:
            return chunked_scan(lambda lo: self._read_packed(lo, end), start, end)
        return chunked_scan(lambda lo: self._read_chunk(lo, end), start, end)

    # ----- bulk scan ------------------------------------------------------
    def scan_arrays(self, start: int = 0, end: int | None = None, chunk: int | None = None):
        """The items of ``[start, end)`` in increasing key order, in chunks of arrays.

        Yields ``(keys, values, lengths)`` per chunk: ``keys`` a numpy uint64
        array, ``values`` one bytes object holding the chunk's values back to
        back in key order, ``lengths`` a numpy uint32 array of their sizes.
        Together they hold exactly what :meth:`scan` yields (the tests hold
        the two equal), decoded with numpy instead of one Python object per
        entry: each call to the server is a Lua script that concatenates a
        chunk's members and values into three strings.  ``chunk`` bounds the
        entries one call reads (default ``SCAN_BULK``, at most ``SCAN_BULK_MAX``);
        a ``packed`` call reads whole buckets, about ``chunk`` entries.  Calls
        go ``SCAN_BULK_PIPELINE`` to a pipeline: the ``hash`` layout splits the
        rest of the range into that many consecutive key ranges sized from the
        density seen so far (a range that turns out fuller than one call ends
        the round: the ranges after it are read again from its last key), so the
        order is kept and no entry is read twice into the output.  Each call is
        one consistent read; the whole scan, like :meth:`scan`, is not a snapshot.
        """
        lo, hi, limit = scan_arrays_args(start, end, chunk)
        self._stats.scans += 1
        if hi is not None and hi <= lo:
            return iter(())
        if self._packed:
            return self._bulk_packed(lo, hi, limit)
        return self._bulk_hash(lo, hi, limit)

    def _pipelined(self, calls):
        """Run ``calls`` (each ``(script, keys, args)``) in one pipeline; their replies."""
        pipe = self._client.pipeline(transaction=False)
        for script, keys, args in calls:
            script(keys=keys, args=args, client=pipe)
        if _phases._ON:
            return _phases.storage_call(self._call, "scan", pipe.execute)
        return self._call("scan", pipe.execute)

    def _bulk_hash(self, lo, end, limit):
        return bulk_hash_chunks(self._pipelined, self._bulk_script, self._zkey, self._vkey,
                                lo, end, limit)

    def _bulk_packed(self, lo, end, limit):
        b = lo >> self._shift
        last = (1 << self.pack_bits) - 1 if end is None else (end - 1) >> self._shift
        stop = MAX_KEY + 1 if end is None else end
        per, buckets_seen, seen = 64, 0, 0
        while b <= last:
            groups = []
            while b <= last and len(groups) < SCAN_BULK_PIPELINE:
                top = min(last, b + per - 1)
                groups.append((b, top))
                b = top + 1
            replies = self._pipelined([(self._packed_script, [], [self._pkey, g0, g1])
                                       for g0, g1 in groups])
            for (g0, g1), reply in zip(groups, replies):
                keys, vs, ls = bulk_arrays(*reply)
                buckets_seen += g1 - g0 + 1
                seen += len(keys)
                order = np.argsort(keys, kind="stable")
                sk = keys[order]
                order = order[(sk >= np.uint64(lo)) & (sk <= np.uint64(stop - 1))]
                if len(order):
                    yield take_rows(keys, vs, ls, order)
            # buckets per call: about ``limit`` entries at the density seen
            per = max(1, min(4096, limit * buckets_seen // seen if seen else per * 4))

    def _all_keys(self) -> list[bytes]:
        if not self._packed:
            return [self._vkey, self._zkey]
        return [self._pkey + b"%x" % x for x in range(1 << self.pack_bits)]

    def _sync(self):
        self._call("sync", self._client.ping)

    def _size_on_disk(self):
        return self._call("size_on_disk", server_files_bytes,
                          lambda: self._config_get("dir", "dbfilename", "appenddirname"),
                          lambda: self._client.info("persistence"), is_local(self.url))

    def logical_size(self) -> tuple[int, int]:
        n = total = 0
        for _k, v in self._scan(0, None):
            n += 1
            total += 8 + len(v)
        return n, total

    def _entries(self) -> int:
        if not self._packed:
            return self._call("info", self._client.hlen, self._vkey)
        keys, n = self._all_keys(), 0
        for i in range(0, len(keys), 4096):
            pipe = self._client.pipeline(transaction=False)
            for k in keys[i:i + 4096]:
                pipe.hlen(k)
            n += sum(self._call("info", pipe.execute))
        return n

    def server_info(self) -> dict:
        """Server-side figures from INFO, and this namespace's entries (HLEN)."""
        info = {}
        for section in ("memory", "persistence", "stats", "keyspace"):
            info.update(self._call("info", self._client.info, section))
        keep = ("used_memory", "used_memory_rss", "used_memory_peak", "maxmemory",
                "aof_enabled", "aof_current_size", "rdb_changes_since_last_save",
                "total_commands_processed", "keyspace_hits", "keyspace_misses")
        out = {k: info[k] for k in keep if k in info}
        out["entries"] = self._entries()
        return out

    def drop(self) -> None:
        """Delete this namespace's keys from the server (the directory stays)."""
        keys = self._all_keys()
        for i in range(0, len(keys), 4096):
            self._call("drop", self._client.unlink, *keys[i:i + 4096])

    def _close(self):
        try:
            self._client.close()
        except Exception:   # pragma: no cover - a dead connection is closed anyway
            pass


@hookimpl
def prefixbench_register_engines(register):
    register("redis", RedisStore, "a redis-server (redis-py, url=): hash + sorted set per "
             "store, MULTI/EXEC batches; durability sync needs appendfsync always and survives "
             "kill -9 of the server, async (everysec) survives kill -9 of the client")
