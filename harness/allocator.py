"""Which malloc a timing command runs on, chosen before anything is built.

A request through RocksDB allocates on every call (read and decompression
buffers, the bytes the binding hands back, NumPy arrays around them), and
RocksDB's own guidance is to run it on jemalloc; glibc's ``_int_malloc`` was
7.7% of a paper-scale codeact run's samples here.  An allocator can only be
swapped before the process starts, so a timing command whose process does not
run on the one asked for executes itself again, once, with that library in
``LD_PRELOAD`` (and any other allocator taken out of it).  Every row of a run
shares the process, so the choice is the same for every strategy compared;
every suite records it (``allocator`` in the metadata).

``auto`` (the default) means jemalloc for the commands that time an engine
where its library is installed, unless the process already runs on a preloaded
allocator; elsewhere, and for the other commands, the process is left as it
started.  A name asks for that allocator, a path for that library.
"""
from __future__ import annotations

import ctypes.util
import glob
import os
import sys

from prefixbench.errors import ConfigError

#: allocators a process may have preloaded, each by the name its library's file carries
ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")
#: what ``--allocator`` takes besides a library's path
CHOICES = ("auto", "libc", *ALLOCATORS)
#: the commands ``auto`` moves to jemalloc: those that time requests on an engine
TIMED_COMMANDS = frozenset(("run", "scale", "sweep", "recover", "engine-bench"))
#: set in the environment of the process executed again, so a preload that did not
#: take is reported instead of executed once more
GUARD = "PREFIXBENCH_ALLOCATOR_EXEC"
#: the library names tried for each allocator, in order
_LIBRARY_NAMES = {"jemalloc": ("jemalloc",), "tcmalloc": ("tcmalloc", "tcmalloc_minimal"),
                  "mimalloc": ("mimalloc",)}


def detect(maps: str = "/proc/self/maps") -> str:
    """The malloc this process runs on: a preloaded allocator found among its mapped
    libraries, else the C library's own (``libc``); ``unknown`` where nothing says."""
    try:
        with open(maps) as fh:
            mapped = fh.read()
    except OSError:
        return "unknown"
    for line in mapped.splitlines():
        name = kind_of(line.rsplit(" ", 1)[-1])
        if name:
            return name
    return "libc"


def kind_of(path: str) -> str | None:
    """The allocator a library file is, by its file name (``libjemalloc.so.2``)."""
    base = os.path.basename(path)
    for name in ALLOCATORS:
        if base.startswith(f"lib{name}"):
            return name
    return None


def find_library(name: str) -> str | None:
    """A path (or a name the dynamic loader finds) of ``name``'s library, None if none
    is installed."""
    for lib in _LIBRARY_NAMES[name]:
        found = ctypes.util.find_library(lib)
        if found:
            return found
        for pattern in (f"/usr/lib/*/lib{lib}.so*", f"/usr/lib/lib{lib}.so*",
                        f"/usr/local/lib/lib{lib}.so*"):
            hits = sorted(glob.glob(pattern))
            if hits:
                return hits[0]
    return None


def resolve(choice: str, command: str | None, current: str) -> tuple[str, str | None] | None:
    """What ``--allocator choice`` asks of ``command``: ``(allocator, library)`` (library
    None for libc), or None to leave the process as it is."""
    if choice == "auto":
        if command not in TIMED_COMMANDS or current != "libc":
            return None
        lib = find_library("jemalloc")
        return ("jemalloc", lib) if lib else None
    if choice == "libc":
        return ("libc", None)
    if choice in ALLOCATORS:
        lib = find_library(choice)
        if lib is None:
            raise ConfigError(f"option --allocator: {choice} is not installed (no lib{choice} "
                              f"found; on Debian: apt-get install lib{choice}"
                              f"{'2' if choice == 'jemalloc' else ''})")
        return (choice, lib)
    name = kind_of(choice)
    if name is None:
        raise ConfigError(f"option --allocator: {choice!r} is not one of {', '.join(CHOICES)} "
                          f"nor the path of a lib{{{','.join(ALLOCATORS)}}} library")
    if not os.path.isfile(choice):
        raise ConfigError(f"option --allocator: {choice} does not exist")
    try:
        with open(choice, "rb") as fh:
            elf = fh.read(4) == b"\x7fELF"
    except OSError as e:
        raise ConfigError(f"option --allocator: {choice} cannot be read ({e.strerror})") from None
    if not elf:
        raise ConfigError(f"option --allocator: {choice} is not a shared library (no ELF header)")
    return (name, os.path.abspath(choice))


def _preload_without_allocators(value: str) -> list[str]:
    """``LD_PRELOAD``'s entries (separated by spaces or colons) that are no allocator."""
    return [p for p in value.replace(":", " ").split() if not kind_of(p)]


def ensure(choice: str, command: str | None, *, environ=None, execve=os.execve,
           argv: list[str] | None = None, current: str | None = None) -> None:
    """Return if the process runs on what ``choice`` asks for ``command``; else execute
    it again with that allocator preloaded (``execve`` does not return), or raise
    :class:`ConfigError` where that was done already and did not take."""
    environ = os.environ if environ is None else environ
    current = detect() if current is None else current
    if current == "unknown":
        if choice == "auto":
            return            # no /proc/self/maps (not Linux): nothing to check a preload by
        raise ConfigError(f"option --allocator: {choice} needs Linux (/proc/self/maps "
                          "shows which allocator a process runs on)")
    want = resolve(choice, command, current)
    if want is None or want[0] == current:
        return
    name, lib = want
    if environ.get(GUARD):
        if choice == "auto":
            return
        raise ConfigError(f"option --allocator: {lib or name} could not be preloaded "
                          f"(the process runs on {current})")
    env = dict(environ)
    env[GUARD] = "1"
    preload = _preload_without_allocators(env.get("LD_PRELOAD", ""))
    if lib:
        preload.insert(0, lib)
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    sys.stdout.flush()
    sys.stderr.flush()
    args = list(sys.orig_argv if argv is None else argv)
    execve(sys.executable, args, env)
