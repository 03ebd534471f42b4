"""``prefixbench server``: local redis-server and Redis Cluster processes for the redis engines.

Each server lives in a work directory of its own: ``server.json`` (what is
running: kind, url, one entry per node with port, config file, data
directory and pid), and per node ``node-PORT/redis.conf``,
``node-PORT/data/`` (RDB, AOF, ``nodes.conf``) and ``node-PORT/redis.log``.
Nothing outside the work directory is read or written, and the servers bind
127.0.0.1 only.

Decisions where the issue is silent:

- ``--dir`` defaults to ``.prefixbench/redis`` (``.prefixbench/redis-cluster``)
  under the current directory, so ``up`` and ``down`` without options pair up.
- ``--appendfsync always|everysec|no`` is Redis' own setting with the AOF on
  (``no`` = the OS decides when to fsync); ``--no-aof`` runs without an AOF.
  The engines map their durability onto it: ``sync`` needs ``always``,
  ``async`` ``everysec`` or ``always``, ``off`` anything.
- ``up`` on a work directory that already holds a server restarts the same
  nodes on their data (a cluster keeps its ``nodes.conf``, so it is not
  created again); ``down`` stops them with SIGTERM (Redis fsyncs its AOF on a
  clean shutdown) and keeps the data; ``down --purge`` removes the work dir.
- A port already in use is one line naming the port, checked for every node
  before anything starts.
- Cluster nodes start a new replica's sync at once (``repl-diskless-sync-delay
  0``): on one machine there is nothing to gain from Redis' 5 s wait for more
  replicas, and ``up`` returns only once every replica is attached and in sync.
- Nodes are started without ``daemonize``, in a session of their own, so
  they outlive the command; the pid in ``server.json`` is the server itself.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from prefixbench.errors import ConfigError, MissingDependencyError, StoreError

STATE_FILE = "server.json"
KINDS = ("redis", "redis-cluster")
APPENDFSYNC = ("always", "everysec", "no")
HOST = "127.0.0.1"
#: seconds a node may take to answer PING after it starts (AOF reload included)
START_TIMEOUT = 60.0
CLUSTER_SLOTS = 16384

# Popen handles of nodes this process started, so stopping one reaps it
_CHILDREN: dict[int, subprocess.Popen] = {}


def redis_server_binary() -> str:
    """The redis-server on PATH, or one line naming the Debian package."""
    path = shutil.which("redis-server")
    if not path:
        raise MissingDependencyError("redis-server is not installed: apt-get install "
                                     "redis-server (Debian package redis-server, 7.x)")
    return path


def default_dir(kind: str) -> str:
    return os.path.join(".prefixbench", kind)


def port_in_use(port: int, host: str = HOST) -> bool:
    """True if something already listens on (or holds) ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as redis-server binds: a closed connection's TIME_WAIT does not hold the port
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = HOST, span: int = 1) -> int:
    """A port with ``span`` consecutive free ports from it (and their cluster bus ports).

    Drawn from 15000-22000, so neither the ports nor the bus ports (+10000) fall
    in Linux's ephemeral range (32768-60999), where client sockets - even our
    own PINGs - could take them between the check and the server's bind.
    """
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(15000, 22000 - span)
        ports = list(range(base, base + span))
        if not any(port_in_use(p) or port_in_use(p + 10000) for p in ports):
            return base
    raise StoreError("no free port range found on 127.0.0.1")


# ---------------------------------------------------------------- one node
@dataclass
class Node:
    port: int
    dir: str
    pid: int | None = None

    @property
    def conf(self) -> str:
        return os.path.join(self.dir, "redis.conf")

    @property
    def data_dir(self) -> str:
        return os.path.join(self.dir, "data")

    @property
    def log(self) -> str:
        return os.path.join(self.dir, "redis.log")

    def as_dict(self) -> dict:
        return {"port": self.port, "dir": self.dir, "pid": self.pid}


def write_node_config(node: Node, appendfsync: str = "everysec", aof: bool = True,
                      cluster: bool = False, node_timeout_ms: int = 2000,
                      password: str | None = None, settings: dict | None = None) -> str:
    """Write ``node.conf``: the whole configuration of one node, nothing inherited."""
    os.makedirs(node.data_dir, exist_ok=True)
    lines = [
        f"bind {HOST}", f"port {node.port}", "protected-mode yes", "daemonize no",
        f"dir {node.data_dir}", f"logfile {node.log}",
        f"appendonly {'yes' if aof else 'no'}", f"appendfsync {appendfsync}",
        "appenddirname appendonlydir", "dbfilename dump.rdb",
    ]
    if cluster:
        # a replica's first sync starts at once, not after the 5 s Redis waits for more
        # replicas to share one diskless transfer
        lines += ["cluster-enabled yes", "cluster-config-file nodes.conf",
                  f"cluster-node-timeout {node_timeout_ms}", "repl-diskless-sync-delay 0"]
    if password:
        lines.append(f"requirepass {password}")
        if cluster:
            lines.append(f"masterauth {password}")
    for key, value in (settings or {}).items():
        lines.append(f"{key} {value}")
    with open(node.conf, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return node.conf


def _ping(port: int, password: str | None = None, timeout: float = 1.0) -> str:
    """The first reply line to PING (after AUTH), '' if nothing answers."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            if password:
                s.sendall(b"AUTH %s\r\n" % password.encode())
                if not s.recv(256).startswith(b"+OK"):
                    return "-AUTH"
            s.sendall(b"PING\r\n")
            return s.recv(256).decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid: int | None, port: int | None = None) -> bool:
    """True while ``pid`` runs; with ``port``, only if it is the redis-server of that
    port (a pid in ``server.json`` may since belong to another process)."""
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        if port is not None:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
            if b"redis-server" not in cmd or b":%d" % port not in cmd:
                return False
        return True
    except (OSError, IndexError):
        return False


def _log_tail(node: Node) -> str:
    try:
        with open(node.log, errors="replace") as fh:
            lines = [ln.strip() for ln in fh if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines):
        if "#" in ln or "error" in ln.lower():
            return ln
    return lines[-1] if lines else "empty log"


def start_node(node: Node, password: str | None = None, timeout: float = START_TIMEOUT) -> int:
    """Start redis-server on ``node.conf`` and wait until it answers PING (a server
    still loading its RDB/AOF answers ``-LOADING``, so this waits out the reload)."""
    binary = redis_server_binary()
    if port_in_use(node.port):
        raise ConfigError(f"server up: port {node.port} on {HOST} is already in use; "
                          f"choose another --port")
    proc = subprocess.Popen([binary, node.conf], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=node.dir)
    _CHILDREN[proc.pid] = proc
    node.pid = proc.pid
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise StoreError(f"redis-server on port {node.port} exited with {proc.returncode}: "
                             f"{_log_tail(node)} (log {node.log})")
        reply = _ping(node.port, password)
        if reply.startswith("+PONG"):
            return proc.pid
        if time.monotonic() > deadline:
            stop_pid(proc.pid)
            raise StoreError(f"redis-server on port {node.port} did not answer PING within "
                             f"{timeout:.0f} s: {_log_tail(node)} (log {node.log})")
        time.sleep(0.005)


def stop_pid(pid: int | None, sig: int = signal.SIGTERM, timeout: float = 60.0,
             port: int | None = None) -> None:
    """Signal a node and wait until it is gone (SIGKILL if it outlives ``timeout``);
    with ``port``, a pid that is no longer that node's redis-server is left alone."""
    if not _alive(pid, port):
        _CHILDREN.pop(pid, None)
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid, port):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.02)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait()


def kill_node(node: Node) -> None:
    """SIGKILL a node (crash tests): nothing is flushed beyond what Redis already wrote."""
    stop_pid(node.pid, signal.SIGKILL, port=node.port)


# ---------------------------------------------------------------- a server (one or many nodes)
@dataclass
class Server:
    kind: str
    dir: str
    nodes: list
    password: str | None = None
    masters: int = 1
    replicas: int = 0
    appendfsync: str = "everysec"
    aof: bool = True

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{HOST}:{self.nodes[0].port}" + ("/0" if self.kind == "redis" else "")

    def save(self) -> None:
        state = {"kind": self.kind, "url": self.url, "masters": self.masters,
                 "replicas": self.replicas, "appendfsync": self.appendfsync, "aof": self.aof,
                 "password": self.password, "nodes": [n.as_dict() for n in self.nodes]}
        tmp = os.path.join(self.dir, STATE_FILE + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=1)
        os.replace(tmp, os.path.join(self.dir, STATE_FILE))

    def alive(self) -> list[bool]:
        return [_alive(n.pid, n.port) for n in self.nodes]

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start every node that is not running (their configs are already written)
        and return once each has loaded its data (and a cluster says ok)."""
        for n in self.nodes:
            if not _alive(n.pid, n.port):
                start_node(n, self.password, timeout)
        self.save()
        if self.kind == "redis-cluster":
            wait_cluster_ok(self, timeout)

    def info(self, node: Node, section: str = "persistence") -> dict:
        """``INFO section`` of one node as a dict ({} if it does not answer)."""
        return _fields(_bulk(node.port, self.password, b"INFO " + section.encode()))

    def persist(self, timeout: float = 3600.0) -> dict:
        """Make every node's data one compact file set, as a snapshot: ``BGREWRITEAOF``
        with the AOF on (an RDB-preamble base, no command tail), else ``BGSAVE``; waits
        until each node finished and reports success.  Returns seconds and data bytes."""
        t0 = time.monotonic()
        cmd = b"BGREWRITEAOF" if self.aof else b"BGSAVE"
        for n in self.nodes:
            reply = _simple(n.port, self.password, cmd)
            if reply.startswith("-") and "already in progress" not in reply:
                raise StoreError(f"redis-server on port {n.port}: {cmd.decode()} refused: "
                                 f"{reply[1:]}")
        busy, status = (("aof_rewrite_in_progress", "aof_rewrite_scheduled"),
                        "aof_last_bgrewrite_status") if self.aof else (
                        ("rdb_bgsave_in_progress",), "rdb_last_bgsave_status")
        deadline = t0 + timeout
        for n in self.nodes:
            while True:
                info = self.info(n)
                if info and not any(info.get(k, "0") != "0" for k in busy):
                    break
                if time.monotonic() > deadline:
                    raise StoreError(f"redis-server on port {n.port}: {cmd.decode()} not done "
                                     f"after {timeout:.0f} s (log {n.log})")
                time.sleep(0.02)
            if info.get(status) != "ok":
                raise StoreError(f"redis-server on port {n.port}: {cmd.decode()} failed "
                                 f"({status}:{info.get(status)}; log {n.log})")
        return {"seconds": time.monotonic() - t0, "bytes": self.data_bytes()}

    def data_bytes(self) -> int:
        """Allocated bytes of every node's data directory (RDB, AOF, nodes.conf)."""
        from prefixbench.engines.base import allocated_bytes
        return sum(allocated_bytes(n.data_dir) for n in self.nodes)

    def restart_timed(self, timeout: float = 3600.0) -> float:
        """Start the stopped nodes and wait until every one has reloaded its RDB/AOF
        (answers PING, ``INFO persistence`` says ``loading:0``) and a cluster is ok:
        the seconds from the spawn to that point."""
        t0 = time.perf_counter()
        self.start(timeout)
        for n in self.nodes:
            while self.info(n).get("loading", "1") != "0":
                if time.perf_counter() - t0 > timeout:
                    raise StoreError(f"redis-server on port {n.port}: still loading after "
                                     f"{timeout:.0f} s (log {n.log})")
                time.sleep(0.005)
        return time.perf_counter() - t0

    def stop(self) -> None:
        for n in self.nodes:
            stop_pid(n.pid, port=n.port)
            n.pid = None
        self.save()

    def kill(self) -> None:
        for n in self.nodes:
            kill_node(n)
            n.pid = None
        self.save()


def load_server(work_dir: str) -> Server | None:
    path = os.path.join(work_dir, STATE_FILE)
    try:
        with open(path) as fh:
            st = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StoreError(f"server state {path}: unreadable ({e})") from None
    nodes = [Node(d["port"], d["dir"], d.get("pid")) for d in st["nodes"]]
    return Server(st["kind"], os.path.abspath(work_dir), nodes, st.get("password"),
                  st.get("masters", 1), st.get("replicas", 0), st.get("appendfsync", "everysec"),
                  st.get("aof", True))


def _check_args(kind, port, appendfsync, masters, replicas):
    if kind not in KINDS:
        raise ConfigError(f"server: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if appendfsync not in APPENDFSYNC:
        raise ConfigError(f"option --appendfsync: {appendfsync!r} is not one of "
                          f"{', '.join(APPENDFSYNC)}")
    n = masters * (1 + replicas)
    if kind == "redis" and not 1 <= port <= 65535:
        raise ConfigError(f"option --port: {port} is not a port (1-65535)")
    if kind == "redis-cluster" and (not 1 <= port or port + n - 1 + 10000 > 65535):
        raise ConfigError(f"option --port: {port} leaves no room for {n} node(s) and their "
                          f"cluster bus ports (port + 10000)")
    if kind == "redis-cluster" and (masters < 1 or replicas < 0):
        raise ConfigError(f"option --masters/--replicas: {masters}/{replicas}: need >= 1 "
                          f"master and >= 0 replicas")


def up(kind: str, work_dir: str, port: int | None = None, appendfsync: str = "everysec",
       aof: bool = True, masters: int = 3, replicas: int = 1, password: str | None = None,
       node_timeout_ms: int = 2000, settings: dict | None = None) -> Server:
    """Start a server (restart it if ``work_dir`` already holds one) and return it."""
    work_dir = os.path.abspath(work_dir)
    old = load_server(work_dir)
    if old is not None:
        if old.kind != kind:
            raise ConfigError(f"option --dir: {work_dir} holds a {old.kind} server, not {kind}")
        if port is not None and port != old.nodes[0].port:
            raise ConfigError(f"option --port: {work_dir} holds a server on port "
                              f"{old.nodes[0].port}; give that port or another --dir")
        busy = [n.port for n, a in zip(old.nodes, old.alive()) if not a and port_in_use(n.port)]
        if busy:
            raise ConfigError(f"server up: port {busy[0]} on {HOST} is already in use; "
                              f"stop what holds it or use another --dir and --port")
        old.start()
        return old
    if kind == "redis":
        masters, replicas = 1, 0
    if port is None:
        port = 6379 if kind == "redis" else 7000
    _check_args(kind, port, appendfsync, masters, replicas)
    redis_server_binary()
    ports = list(range(port, port + masters * (1 + replicas)))
    for p in ports:
        if port_in_use(p) or (kind == "redis-cluster" and port_in_use(p + 10000)):
            raise ConfigError(f"server up: port {p} on {HOST} is already in use; "
                              f"choose another --port")
    if os.path.exists(work_dir) and (not os.path.isdir(work_dir) or os.listdir(work_dir)):
        raise ConfigError(f"option --dir: {work_dir} is not empty and holds no server")
    os.makedirs(work_dir, exist_ok=True)
    nodes = [Node(p, os.path.join(work_dir, f"node-{p}")) for p in ports]
    for n in nodes:
        write_node_config(n, appendfsync, aof, cluster=kind == "redis-cluster",
                          node_timeout_ms=node_timeout_ms, password=password, settings=settings)
    server = Server(kind, work_dir, nodes, password, masters, replicas, appendfsync, aof)
    try:
        for n in nodes:
            start_node(n, password)
        server.save()
        if kind == "redis-cluster":
            create_cluster(server)
    except BaseException:
        for n in nodes:
            stop_pid(n.pid)
        raise
    server.save()
    return server


def create_cluster(server: Server) -> None:
    """``redis-cli --cluster create`` over the nodes, then wait until every node says ok."""
    cli = shutil.which("redis-cli")
    if not cli:
        raise MissingDependencyError("redis-cli is not installed: apt-get install redis-tools")
    cmd = [cli]
    if server.password:
        cmd += ["-a", server.password, "--no-auth-warning"]
    cmd += ["--cluster", "create", *[f"{HOST}:{n.port}" for n in server.nodes],
            "--cluster-replicas", str(server.replicas), "--cluster-yes"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0 or "[OK]" not in out.stdout:
        last = (out.stderr.strip() or out.stdout.strip()).splitlines()
        raise StoreError(f"redis-cli --cluster create failed: {last[-1] if last else out.returncode}")
    wait_cluster_ok(server)


def _ask(port: int, password: str | None, command: bytes, timeout: float, read) -> str:
    """Send ``command`` on a fresh connection (after AUTH when a password is set) and
    return ``read(reply file)``; '' when nothing answers or the reply is malformed."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            f = s.makefile("rb")
            if password:
                s.sendall(b"AUTH %s\r\n" % password.encode())
                f.readline()
            s.sendall(command + b"\r\n")
            return read(f)
    except (OSError, ValueError):
        return ""


def _read_bulk(f) -> str:
    head = f.readline()
    if not head.startswith(b"$"):
        return ""
    return f.read(int(head[1:])).decode(errors="replace")


def _bulk(port: int, password: str | None, command: bytes) -> str:
    """The bulk-string reply of ``command`` (INFO, CLUSTER INFO, CLUSTER NODES), '' on failure."""
    return _ask(port, password, command, 2.0, _read_bulk)


def _simple(port: int, password: str | None, command: bytes) -> str:
    """The first reply line of ``command`` ('-...' for an error, '' if nothing answers)."""
    return _ask(port, password, command, 5.0,
                lambda f: f.readline().decode(errors="replace").strip())


def _fields(text: str) -> dict:
    info = {}
    for line in text.splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            info[k] = v.strip()
    return info


def _cluster_info(port: int, password: str | None) -> dict:
    return _fields(_bulk(port, password, b"CLUSTER INFO"))


def _replicas_seen(port: int, password: str | None) -> int:
    """Replicas (attached to a master) in a node's view of the cluster."""
    lines = _bulk(port, password, b"CLUSTER NODES").splitlines()
    return sum(1 for ln in lines if " slave " in f" {ln.split(' ')[2].replace(',', ' ')} "
               and ln.split(" ")[3] != "-" and "fail" not in ln.split(" ")[2])


def wait_cluster_ok(server: Server, timeout: float = 60.0) -> None:
    """Wait until every running node reports ``cluster_state:ok`` with all slots assigned."""
    deadline = time.monotonic() + timeout
    while True:
        infos = [_cluster_info(n.port, server.password)
                 for n, a in zip(server.nodes, server.alive()) if a]
        if infos and all(i.get("cluster_state") == "ok"
                         and i.get("cluster_slots_ok") == str(CLUSTER_SLOTS) for i in infos):
            want = server.masters * server.replicas
            links = [_fields(_bulk(n.port, server.password, b"INFO replication"))
                     for n, a in zip(server.nodes, server.alive()) if a]
            if not want or (all(_replicas_seen(n.port, server.password) >= want
                                for n, a in zip(server.nodes, server.alive()) if a)
                            and all(i.get("master_link_status", "up") == "up" for i in links)):
                return
        if time.monotonic() > deadline:
            bad = next((i for i in infos if i.get("cluster_state") != "ok"), {})
            raise StoreError(f"cluster at {server.url}: not ok after {timeout:.0f} s "
                             f"(cluster_state {bad.get('cluster_state', '?')}, slots ok "
                             f"{bad.get('cluster_slots_ok', '?')})")
        time.sleep(0.05)


def down(work_dir: str, purge: bool = False) -> Server | None:
    server = load_server(os.path.abspath(work_dir))
    if server is None:
        return None
    server.stop()
    if purge:
        shutil.rmtree(server.dir, ignore_errors=True)
    return server


def status_lines(work_dir: str) -> list[str]:
    server = load_server(os.path.abspath(work_dir))
    if server is None:
        return [f"no server in {os.path.abspath(work_dir)}"]
    fsync = server.appendfsync if server.aof else "no AOF"
    lines = [f"{server.kind} {server.url} in {server.dir} (appendfsync {fsync})"]
    for n, alive in zip(server.nodes, server.alive()):
        reply = _ping(n.port, server.password) if alive else ""
        state = "up" if reply.startswith("+PONG") else ("starting" if alive else "down")
        lines.append(f"  node {HOST}:{n.port} pid {n.pid or '-'} {state}")
    return lines


# ---------------------------------------------------------------- the CLI
def add_parser(sub, commands: dict) -> None:
    """``prefixbench server redis|redis-cluster up|down|status``, registered in ``commands``."""
    commands["server"] = cmd_server
    p = sub.add_parser("server", help="start, stop or inspect a local redis-server or Redis Cluster",
                       description="Run a local redis-server (engine 'redis') or Redis Cluster "
                       "(engine 'redis-cluster') on 127.0.0.1 with a config file of its own under "
                       "a work dir. Durability: the engine's 'sync' needs --appendfsync always "
                       "(an acknowledged write survives kill -9 of the server; on a cluster it also "
                       "waits for a replica, WAIT 1); 'async' needs everysec or always (survives "
                       "kill -9 of the client: the data is in the server; the server fsyncs each "
                       "second); 'off' works on any server.")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--port", type=int, help="first port (default: 6379 for redis, 7000 for "
                   "redis-cluster; a cluster uses PORT..PORT+N-1 and their bus ports +10000)")
    p.add_argument("--dir", help="work dir (default: .prefixbench/KIND)")
    p.add_argument("--appendfsync", choices=APPENDFSYNC, default="everysec",
                   help="Redis' AOF fsync policy (default: %(default)s)")
    p.add_argument("--no-aof", action="store_true", help="run without an AOF (durability=off only)")
    p.add_argument("--masters", type=int, default=3, help="cluster masters (default: %(default)s)")
    p.add_argument("--replicas", type=int, default=1,
                   help="replicas per master (default: %(default)s)")
    p.add_argument("--password", help="requirepass (give it in the engine's url=)")
    p.add_argument("--purge", action="store_true", help="with down: remove the work dir too")


def cmd_server(args, leftover=(), argv=(), quiet=False) -> int:
    work_dir = args.dir or default_dir(args.kind)
    if args.action == "up":
        t0 = time.monotonic()
        server = up(args.kind, work_dir, port=args.port, appendfsync=args.appendfsync,
                    aof=not args.no_aof, masters=args.masters, replicas=args.replicas,
                    password=args.password)
        took = time.monotonic() - t0
        print(f"{server.kind} up at {server.url} ({len(server.nodes)} node(s), "
              f"{took:.1f} s) in {server.dir}")
        print(f"use: -e {server.kind} --engine-option url={server.url}")
        return 0
    server = load_server(os.path.abspath(work_dir))
    if server is not None and server.kind != args.kind:
        raise ConfigError(f"option --dir: {os.path.abspath(work_dir)} holds a {server.kind} "
                          f"server, not {args.kind}")
    if args.action == "down":
        if down(work_dir, purge=args.purge) is None:
            print(f"no server in {os.path.abspath(work_dir)}")
            return 0
        print(f"{args.kind} stopped ({server.url}); data "
              f"{'removed' if args.purge else 'kept in ' + server.dir}")
        return 0
    print("\n".join(status_lines(work_dir)))
    return 0
