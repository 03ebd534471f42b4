"""``wiredtiger``: WiredTiger's row store via its Python binding (optional extra).

One table ``table:segments`` with ``key_format=Q`` (WiredTiger packs ``Q``
so that byte order equals numeric order) and ``value_format=u`` (raw bytes).
WiredTiger sessions are single-threaded, so every thread gets its own
session and cursor; sessions of threads that have ended are closed when the
next thread arrives.  :meth:`close` must run after the other threads stop.

Durability: ``sync`` and ``async`` run with the log on; ``sync`` commits
with ``transaction_sync=(enabled=true,method=fsync)``, ``async`` with
``method=none`` (the log record is written to the OS before the commit
returns, so it survives kill -9; with ``enabled=false`` it would only sit in
an in-memory buffer).  ``off`` runs without a log: only checkpoints are
durable.  A checkpoint runs every ``checkpoint_wait`` seconds (default 60)
and on :meth:`sync` and close.

``cache_size`` is ``cache_bytes`` clamped to WiredTiger's minimum of 1 MiB.
No write waits longer than ``cache_max_wait_ms`` for room in the cache: when
the device fills, eviction can stop for good (its page writes fail and
WiredTiger panics its eviction threads), and a write left waiting for it
would never return.  A batch still in its transaction then fails with a
:class:`StoreError` and stores nothing; one already committed returns.
``direct_io`` opens data and checkpoint files with O_DIRECT.
:meth:`size_on_disk` counts every file in the directory except the log
files (``WiredTigerLog.*``, ``WiredTigerPreplog.*``, ``WiredTigerTmplog.*``):
WiredTiger preallocates those at 100 MB and removes them after checkpoints,
so they are not data.  Table files hold the data as of the last checkpoint.

The wiredtiger 11.3.1 sdist from PyPI builds with HAVE_DIAGNOSTIC=1 and
-Og (see :attr:`diagnostic_build`): its per-call costs are far above a
release build's, so benchmark WiredTiger with a release build.

Creating and preallocating a log file of ``log_file_max`` bytes takes about a
second on open, so small values make short-lived stores open faster.
Options: :data:`OPTIONS` (``prefixbench plugins --options`` lists them with their
defaults).
"""
from __future__ import annotations

import os
import threading
import time
import weakref

from prefixbench.engines.base import (
    EngineOption,
    SegmentStore,
    SCAN_CHUNK,
    StoreConfig,
    check_options,
    chunked_scan,
    import_binding,
    int_option,
    prepare_store_dir,
)
from prefixbench.errors import StoreError
from prefixbench.hookspecs import hookimpl

URI = "table:segments"
_MIN_CACHE = 1 << 20
_LOG_PREFIXES = ("WiredTigerLog.", "WiredTigerPreplog.", "WiredTigerTmplog.")
OPTIONS = {
    "checkpoint_wait": EngineOption(60, "seconds between checkpoints (0: never)"),
    "session_max": EngineOption(1024, "concurrent sessions"),
    "log_file_max": EngineOption(100 << 20, "bytes per log file (made and preallocated "
                                            "on open)"),
    "cache_max_wait_ms": EngineOption(10_000, "ms a write may wait for room in the cache "
                                              "(0: forever)"),
}


class WiredTigerStore(SegmentStore):
    """WiredTiger row store; a session per thread; log on unless durability is off."""

    name = "wiredtiger"
    OPTIONS = OPTIONS
    volatile = False
    gil_free_calls = frozenset(("get", "get_many", "write"))

    def __init__(self, config: StoreConfig | None = None):
        config = config or StoreConfig()
        super().__init__(config)
        wiredtiger = import_binding(
            "wiredtiger", "wiredtiger", "pip install 'prefixbench[wiredtiger]'")
        self._wt = wiredtiger
        self.write_errors = (OSError, wiredtiger.WiredTigerError)
        #: True when the binding was compiled with HAVE_DIAGNOSTIC (assertions
        #: on, -Og): the PyPI sdist builds that way and every call is slower
        self.diagnostic_build = bool(getattr(wiredtiger, "diagnostic_build", lambda: 0)())
        opts = check_options(self.name, config.options, OPTIONS)
        wait = int_option(opts, "checkpoint_wait", OPTIONS["checkpoint_wait"].default, 0)
        session_max = int_option(opts, "session_max", OPTIONS["session_max"].default, 16)
        log_max = int_option(opts, "log_file_max", OPTIONS["log_file_max"].default, 100 << 10,
                             size=True)
        self.cache_max_wait_ms = int_option(opts, "cache_max_wait_ms",
                                            OPTIONS["cache_max_wait_ms"].default, 0)
        self.cache_size = max(config.cache_bytes, _MIN_CACHE)
        self.path = prepare_store_dir(config.path, config.create, self.name, "WiredTiger")
        parts = [f"cache_size={self.cache_size}", f"session_max={session_max}",
                 f"checkpoint=(wait={wait})", f"cache_max_wait_ms={self.cache_max_wait_ms}"]
        if config.create:
            parts.append("create")
        if config.durability == "off":
            parts.append("log=(enabled=false)")
        else:
            method = "fsync" if config.durability == "sync" else "none"
            parts += [f"log=(enabled=true,file_max={log_max})",
                      f"transaction_sync=(enabled=true,method={method})"]
        if config.direct_io:
            parts.append("direct_io=[data,checkpoint]")
        try:
            self._conn = wiredtiger.wiredtiger_open(self.path, ",".join(parts))
        except wiredtiger.WiredTigerError as e:
            raise StoreError(f"wiredtiger store path {self.path}: cannot open ({e})") from None
        try:
            s = self._conn.open_session()
            if not config.create:
                c = s.open_cursor("metadata:", None, None)
                c.set_key(URI)
                missing = c.search() != 0
                c.close()
                if missing:
                    raise StoreError(f"wiredtiger store path {self.path}: no table "
                                     f"{URI} (create=False)")
            s.create(URI, "key_format=Q,value_format=u")
            s.close()
        except BaseException:
            self._conn.close()
            raise
        self._tls = threading.local()
        self._sessions: list = []       # (weakref to thread, session)
        self._sessions_lock = threading.Lock()

    # ----- per-thread sessions ----------------------------------------
    def _cursor(self):
        try:
            return self._tls.cursor
        except AttributeError:
            return self._open_thread_session()[1]

    def _state(self):
        try:
            return self._tls.session, self._tls.cursor
        except AttributeError:
            return self._open_thread_session()

    def _open_thread_session(self):
        with self._sessions_lock:
            alive = []
            for ref, session in self._sessions:
                t = ref()
                if t is None or not t.is_alive():
                    session.close()      # its thread has ended
                else:
                    alive.append((ref, session))
            session = self._conn.open_session()
            alive.append((weakref.ref(threading.current_thread()), session))
            self._sessions = alive
        cursor = session.open_cursor(URI, None, None)
        self._tls.session, self._tls.cursor = session, cursor
        return session, cursor

    # ----- reads -----------------------------------------------------
    def _get(self, key):
        cur = self._cursor()
        cur.set_key(key)
        value = cur.get_value() if cur.search() == 0 else None
        cur.reset()
        return value

    def _get_many(self, keys):
        session, cur = self._state()
        out = []
        session.begin_transaction()     # one snapshot for the batch
        try:
            for k in keys:
                cur.set_key(k)
                out.append(cur.get_value() if cur.search() == 0 else None)
        finally:
            cur.reset()
            session.rollback_transaction()
        return out

    def _scan_chunk(self, lo, end):
        session, _ = self._state()
        cur = session.open_cursor(URI, None, None)
        out = []
        try:
            cur.set_key(lo)
            exact = cur.search_near()
            if exact == self._wt.WT_NOTFOUND:
                return out
            if exact < 0 and cur.next() != 0:
                return out
            while True:
                k = cur.get_key()
                if end is not None and k >= end:
                    break
                out.append((k, cur.get_value()))
                if len(out) == SCAN_CHUNK or cur.next() != 0:
                    break
        finally:
            cur.close()
        return out

    def _scan(self, start, end):
        return chunked_scan(lambda lo: self._scan_chunk(lo, end), start, end)

    # ----- writes ----------------------------------------------------
    def _write(self, puts, deletes):
        session, cur = self._state()
        rollback = self._wt.WiredTigerRollbackError
        evicted = 0
        for attempt in range(1000):
            committing = False
            session.begin_transaction()
            try:
                for k, v in puts:
                    cur.set_key(k)
                    cur.set_value(v)
                    cur.insert()
                for k in deletes:
                    cur.set_key(k)
                    cur.remove()         # WT_NOTFOUND for a missing key is fine
                cur.reset()
                committing = True
                session.commit_transaction()
                return
            except rollback as e:
                # a conflict with another thread's write (retry); a batch too
                # big for the cache, "rolled back for eviction" (give up); or
                # "cache overflow": cache_max_wait_ms passed without room (give up)
                reason = session.get_rollback_reason() or str(e)
                cur.reset()
                if not committing:       # WT rolls back a failed commit itself
                    session.rollback_transaction()
                if "cache overflow" in reason:
                    raise StoreError(
                        f"wiredtiger store path {self.path}: a write waited over "
                        f"{self.cache_max_wait_ms} ms for room in the "
                        f"{self.cache_size >> 20} MiB cache and gave up ({reason}); "
                        f"is the device full? otherwise raise cache_bytes or the "
                        f"cache_max_wait_ms option") from None
                if "eviction" in reason:
                    evicted += 1
                    if evicted == 3:
                        raise StoreError(
                            f"wiredtiger store path {self.path}: a batch of "
                            f"{len(puts) + len(deletes)} items does not fit in the "
                            f"{self.cache_size >> 20} MiB cache ({reason}); "
                            f"raise cache_bytes") from None
                time.sleep(min(1e-5 * 2 ** min(attempt, 10), 0.01))
            except BaseException:
                cur.reset()
                if not committing:
                    session.rollback_transaction()
                raise
        raise StoreError(f"wiredtiger store path {self.path}: batch kept conflicting "
                         f"with concurrent writers")

    def _sync(self):
        session, _ = self._state()
        session.checkpoint()

    log_file_patterns = tuple(p + "*" for p in _LOG_PREFIXES)

    def _size_on_disk(self):
        total = 0
        for name in os.listdir(self.path):
            if name.startswith(_LOG_PREFIXES):
                continue
            try:
                total += os.stat(os.path.join(self.path, name)).st_blocks * 512
            except FileNotFoundError:
                pass
        return total

    def _close(self):
        with self._sessions_lock:
            self._sessions = []
        self._tls = threading.local()
        self._conn.close()


@hookimpl
def prefixbench_register_engines(register):
    register("wiredtiger", WiredTigerStore)
