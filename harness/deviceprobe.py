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
    free = shutil.disk_usage(directory).free
    if free < file_bytes + _DISK_MARGIN:
        out.skipped = (f"{free / 2**30:.1f} GiB free in {directory}, the probe's file needs "
                       f"{(file_bytes + _DISK_MARGIN) / 2**30:.1f} GiB")
        return out
    fd, path = tempfile.mkstemp(prefix="prefixbench-device-", dir=directory)
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
            out.skipped = f"the file system of {directory} refuses O_DIRECT"
            return out
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
