"""What the device alone gives several threads: 4 KiB random ``O_DIRECT`` reads.

A thread-scaling figure says how much a second request thread adds; for a
setting whose requests mostly wait on device reads (ssd-blockhash, say), the
most it can add is what the device itself adds when two reads are in flight
instead of one.  RocksDB's multi-get, as rocksdict ships it, reads one data
block after another (no io_uring), so each request thread keeps at most one
read in flight: ``p`` threads put the device at queue depth ``p``.

The probe writes one scratch file (``file_bytes``, default 1 GiB, so reads
spread over far more than any device cache) in the directory the stores use,
then for each round runs every thread count in turn: ``p`` threads each
reading 4 KiB at random aligned offsets with ``os.preadv`` (which releases
the GIL) for ``seconds``.  Figures are reads per second over all threads; the
scaling at ``p`` is taken within each round (rate at ``p`` over the rate at
the first count), then the median over rounds, as the sweep does with
throughput.  The file is removed whatever happens.

It is skipped, with a reason and no error, where it cannot measure: too
little free disk for the file, a directory whose file system refuses
``O_DIRECT`` (tmpfs on older kernels), or a write or read of the file that
fails; the sweep it serves goes on without the figure.

:class:`DeviceWatch` asks a different question: how fast was the device while
each repeat of an interleaved sweep ran?  On a shared machine a slow repeat of
a setting that mostly waits on device reads may be the device, not the setting.
Between rounds of turns it times a few 4 KiB random reads at queue depth 1 on
its own scratch file (no page cache, so the stores' block caches are
untouched, and none of it falls inside a timed turn) and keeps each repeat's
latencies apart, beside a baseline timed before the sweep loads any store.
A read's latency is seen from the sweep's process, so it includes the time the
reading thread waited for a core once the read was done (the stores'
background threads share the two cores); the watch also takes that wait from
the kernel's per-thread scheduler counters (``/proc/thread-self/schedstat``)
and reports it apart.
"""
from __future__ import annotations

import errno
import json
import mmap
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field

BLOCK = 4096
DEFAULT_FILE_BYTES = 1 << 30
DEFAULT_SECONDS = 1.0
DEFAULT_ROUNDS = 3
#: reads a watch times before each round of turns
DEFAULT_WATCH_READS = 32
#: the watch's key for reads timed before any store of the sweep was loaded
BEFORE_LOADS = -1
#: reads timed under :data:`BEFORE_LOADS`
BEFORE_LOADS_READS = 256
_WRITE_CHUNK = 1 << 20
#: free disk kept beyond the scratch file
_DISK_MARGIN = 256 << 20


@dataclass
class DeviceScaling:
    """Reads per second of ``threads`` (each thread count, every round) in ``directory``."""

    directory: str
    threads: tuple
    file_bytes: int = 0
    seconds: float = 0.0
    #: per round, reads/s for each thread count (same order as ``threads``)
    rounds: list = field(default_factory=list)
    #: why nothing was measured ('' when measured)
    skipped: str = ""

    def rate(self, p: int) -> float:
        """Median reads/s at ``p`` threads over the rounds."""
        i = self.threads.index(p)
        return statistics.median(r[i] for r in self.rounds)

    def scaling(self, p: int) -> tuple:
        """``(median, min, max)`` over rounds of reads/s at ``p`` over the first count's."""
        i = self.threads.index(p)
        vals = [r[i] / r[0] for r in self.rounds if r[0] > 0]
        return statistics.median(vals), min(vals), max(vals)

    def metadata(self) -> dict:
        """Plain values for the suites' metadata (the reports read them back)."""
        if self.skipped:
            return {"directory": self.directory, "skipped": self.skipped}
        return {"directory": self.directory, "block_bytes": BLOCK,
                "threads": list(self.threads), "file_bytes": self.file_bytes,
                "seconds": self.seconds, "rounds": [list(r) for r in self.rounds]}

    def metadata_text(self) -> str:
        """:meth:`metadata` as the compact JSON the suites store under ``device_probe``."""
        return json.dumps(self.metadata(), separators=(",", ":"))


def probe_device(directory: str | None = None, threads=(1, 2), *,
                 file_bytes: int = DEFAULT_FILE_BYTES, seconds: float = DEFAULT_SECONDS,
                 rounds: int = DEFAULT_ROUNDS, on_step=None) -> DeviceScaling:
    """Measure 4 KiB random direct reads at each of ``threads`` in ``directory``
    (default: the temporary directory, where the sweeps' stores go); ``on_step`` is
    called after each thread count of each round (a progress bar)."""
    directory = os.path.abspath(directory or tempfile.gettempdir())
    threads = tuple(int(p) for p in threads)
    if file_bytes < BLOCK or file_bytes % BLOCK or seconds <= 0 or rounds < 1 or \
            not threads or min(threads) < 1:
        raise ValueError("probe_device: file_bytes a positive multiple of 4096, "
                         "seconds > 0, rounds >= 1 and thread counts >= 1")
    out = DeviceScaling(directory, threads, file_bytes, seconds)
    path, out.skipped = _scratch_file(directory, file_bytes, "probe", "prefixbench-device-")
    if path is None:
        return out
    try:
        for _ in range(rounds):
            row = []
            for p in threads:
                row.append(_rate(path, p, file_bytes, seconds))
                if on_step is not None:
                    on_step()
            out.rounds.append(row)
    except OSError as e:
        # a context figure: the sweep it serves goes on without it
        out.rounds = []
        out.skipped = f"the probe's file in {directory} failed ({e.strerror or e})"
    finally:
        os.unlink(path)
    return out


def _scratch_file(directory: str, file_bytes: int, owner: str, prefix: str) -> tuple:
    """``(path, '')`` of a new ``file_bytes`` file in ``directory`` that ``O_DIRECT``
    reads can use, or ``(None, why not)`` with nothing left behind: too little free
    disk, a file system that refuses ``O_DIRECT``, or a write that fails (``owner``
    names the measurement in the reason)."""
    free = shutil.disk_usage(directory).free
    if free < file_bytes + _DISK_MARGIN:
        return None, (f"{free / 2**30:.1f} GiB free in {directory}, the {owner}'s file needs "
                      f"{(file_bytes + _DISK_MARGIN) / 2**30:.1f} GiB")
    fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    try:
        try:
            _fill(fd, file_bytes)
        finally:
            os.close(fd)
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            os.unlink(path)
            return None, f"the file system of {directory} refuses O_DIRECT"
    except OSError as e:
        os.unlink(path)
        return None, f"the {owner}'s file in {directory} failed ({e.strerror or e})"
    return path, ""


def _core_wait_ns() -> int | None:
    """Nanoseconds this thread has waited on a run queue (the second field of
    ``/proc/thread-self/schedstat``), None where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _fill(fd: int, file_bytes: int) -> None:
    """Write ``file_bytes`` of incompressible bytes and make them durable."""
    chunk = os.urandom(_WRITE_CHUNK)
    left = file_bytes
    while left > 0:
        left -= os.write(fd, chunk[:min(left, _WRITE_CHUNK)])
    os.fsync(fd)


def _rate(path: str, p: int, file_bytes: int, seconds: float) -> float:
    """Reads per second of ``p`` threads reading 4 KiB at random for ``seconds``."""
    counts = [0] * p
    errors: list = []
    blocks = file_bytes // BLOCK
    fds = []
    try:
        for _ in range(p):              # opened here: a failure is raised, not lost in a thread
            fds.append(os.open(path, os.O_RDONLY | os.O_DIRECT))
        start = threading.Barrier(p + 1)

        def reader(i: int) -> None:
            buf = mmap.mmap(-1, BLOCK)         # page-aligned, as O_DIRECT wants
            pick = random.Random(i * 7919 + p).randrange
            n = 0
            try:
                start.wait()
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    os.preadv(fds[i], [buf], pick(blocks) * BLOCK)
                    n += 1
            except OSError as e:
                errors.append(e)
            finally:
                counts[i] = n
                buf.close()

        ts = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(p)]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        for fd in fds:
            os.close(fd)
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


class DeviceWatch:
    """4 KiB random ``O_DIRECT`` reads at queue depth 1, timed a few at a time between
    the timed turns of an interleaved sweep, kept per repeat.

    :meth:`open` writes the scratch file (``file_bytes`` in ``directory``, the
    temporary directory by default) or sets :attr:`skipped` with a reason, as
    :func:`probe_device` does; :meth:`sample` times ``reads`` reads for one repeat
    (nothing once skipped; a failing read skips the rest of the watch and keeps what
    was timed); :meth:`close` removes the file.  Use it as a context manager."""

    def __init__(self, directory: str | None = None, *, file_bytes: int = DEFAULT_FILE_BYTES,
                 reads: int = DEFAULT_WATCH_READS, seed: int = 0):
        if file_bytes < BLOCK or file_bytes % BLOCK or reads < 1:
            raise ValueError("DeviceWatch: file_bytes a positive multiple of 4096, reads >= 1")
        self.directory = os.path.abspath(directory or tempfile.gettempdir())
        self.file_bytes = file_bytes
        self.reads = reads
        #: repeat -> nanoseconds of each timed read, in order
        self.samples: dict = {}
        #: repeat -> nanoseconds the reading thread waited for a core during those reads
        #: (absent where the kernel's scheduler counters cannot be read)
        self.core_wait: dict = {}
        #: why nothing (more) is measured ('' while measuring)
        self.skipped = ""
        self._pick = random.Random(seed).randrange
        self._path = None
        self._fd = -1
        self._buf = None

    def __enter__(self) -> "DeviceWatch":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        self._path, self.skipped = _scratch_file(self.directory, self.file_bytes, "watch",
                                                 "prefixbench-watch-")
        if self._path is None:
            return
        self._fd = os.open(self._path, os.O_RDONLY | os.O_DIRECT)
        self._buf = mmap.mmap(-1, BLOCK)          # page-aligned, as O_DIRECT wants

    def sample(self, repeat: int, reads: int | None = None) -> None:
        """Time ``reads`` (default :attr:`reads`) reads at random aligned offsets for
        ``repeat`` (:data:`BEFORE_LOADS`: the baseline)."""
        if self._fd < 0 or self.skipped:
            return
        repeat = int(repeat)
        out = self.samples.setdefault(repeat, [])
        blocks = self.file_bytes // BLOCK
        clock = time.perf_counter_ns
        w0 = _core_wait_ns()
        try:
            for _ in range(self.reads if reads is None else reads):
                off = self._pick(blocks) * BLOCK
                t0 = clock()
                os.preadv(self._fd, [self._buf], off)
                out.append(clock() - t0)
        except OSError as e:
            self.skipped = f"a read of the watch's file failed ({e.strerror or e})"
        w1 = _core_wait_ns()
        if w0 is not None and w1 is not None:
            self.core_wait[repeat] = self.core_wait.get(repeat, 0) + w1 - w0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._buf is not None:
            self._buf.close()
            self._buf = None
        if self._path is not None:
            os.unlink(self._path)
            self._path = None

    def metadata(self) -> dict:
        """Plain values for the suites: per repeat ``[repeat, median, p90, reads, core
        wait per read]`` (microseconds, the wait None where unknown; repeat
        :data:`BEFORE_LOADS` is the baseline)."""
        reps = []
        for r in sorted(self.samples):
            ns = sorted(self.samples[r])
            if ns:
                wait = self.core_wait.get(r)
                reps.append([r, round(statistics.median(ns) / 1e3, 2),
                             round(ns[min(len(ns) - 1, int(0.9 * len(ns)))] / 1e3, 2), len(ns),
                             None if wait is None else round(wait / len(ns) / 1e3, 2)])
        md = {"directory": self.directory, "block_bytes": BLOCK, "file_bytes": self.file_bytes,
              "reads_per_round": self.reads, "repeats": reps}
        if self.skipped:
            md["skipped"] = self.skipped
        return md

    def metadata_text(self) -> str:
        """:meth:`metadata` as the compact JSON the suites store under ``device_watch``."""
        return json.dumps(self.metadata(), separators=(",", ":"))
