"""The device probe: what 4 KiB random direct reads give each thread count, as the
context line under a sweep's thread table.  Behaviour only, never timings."""
import json
import os

import pytest

from prefixbench.harness import deviceprobe, sweeps
from prefixbench.reports.show import device_line

SMALL = dict(file_bytes=4 << 20, seconds=0.02)


def test_measures_every_count_every_round_and_leaves_nothing(tmp_path):
    steps = []
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), rounds=2, on_step=lambda: steps.append(1),
                                 **SMALL)
    assert os.listdir(tmp_path) == []
    if r.skipped:                            # a file system without O_DIRECT
        assert "O_DIRECT" in r.skipped and r.rounds == []
        return
    assert len(steps) == 4 and len(r.rounds) == 2
    assert all(len(row) == 2 and min(row) > 0 for row in r.rounds)
    med, lo, hi = r.scaling(2)
    assert lo <= med <= hi
    assert r.rate(1) > 0
    md = r.metadata()
    assert md["threads"] == [1, 2] and md["block_bytes"] == 4096 and md["rounds"] == r.rounds


def test_scaling_is_taken_within_each_round():
    r = deviceprobe.DeviceScaling("/d", (1, 2), 1 << 20, 1.0,
                                  rounds=[[100.0, 150.0], [200.0, 400.0], [100.0, 170.0]])
    assert r.scaling(2) == (1.7, 1.5, 2.0)
    assert r.rate(1) == 100.0 and r.rate(2) == 170.0


def test_too_little_disk_skips_without_writing(tmp_path, monkeypatch):
    class Usage:
        free = 1 << 20
    monkeypatch.setattr(deviceprobe.shutil, "disk_usage", lambda d: Usage)
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert r.rounds == [] and str(tmp_path) in r.skipped and "GiB" in r.skipped
    assert os.listdir(tmp_path) == []


@pytest.fixture
def no_o_direct(monkeypatch):
    """A file system that refuses O_DIRECT opens (EINVAL), as tmpfs did."""
    real = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real(path, flags, *a)
    monkeypatch.setattr(deviceprobe.os, "open", no_direct)


def test_a_file_system_refusing_o_direct_is_skipped(tmp_path, no_o_direct):
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert "refuses O_DIRECT" in r.skipped and r.rounds == []
    assert os.listdir(tmp_path) == []


def test_failing_reads_skip_the_figure_and_remove_the_file(tmp_path, monkeypatch):
    def eio(*a):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(deviceprobe.os, "preadv", eio)
    r = deviceprobe.probe_device(str(tmp_path), (1, 2), **SMALL)
    assert "Input/output error" in r.skipped and r.rounds == []
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kw", [dict(file_bytes=1000), dict(seconds=0), dict(rounds=0)])
def test_bad_arguments(tmp_path, kw):
    with pytest.raises(ValueError):
        deviceprobe.probe_device(str(tmp_path), (1, 2), **{**SMALL, **kw})
    with pytest.raises(ValueError):
        deviceprobe.probe_device(str(tmp_path), (0, 2), **SMALL)


def test_the_line_from_the_metadata():
    md = {"directory": "/data", "block_bytes": 4096, "threads": [1, 2], "file_bytes": 1 << 30,
          "seconds": 1.0, "rounds": [[100.0, 150.0], [200.0, 400.0], [100.0, 170.0]]}
    line = device_line(json.dumps(md))
    assert "4 KiB random O_DIRECT reads in /data, 3 rounds of 1 s" in line
    assert "100 reads/s at 1 thread, 170 at 2 (1.70x, 1.50-2.00x)" in line
    assert device_line(json.dumps({"directory": "/d", "skipped": "no room"})) == \
        "device alone: not measured (no room)."
    assert device_line(None) == ""
    assert "unreadable" in device_line("{not json")


def _cfg(**kw):
    return sweeps.make_config("strategies", workload="codeact", workload_options={
        "sessions": "8"}, engine="memory", **{"strategies": "ssd-blockhash", **kw})


def test_a_sweep_probes_only_with_several_thread_counts_and_direct_io():
    assert _cfg(threads="1,2", direct_io=True).probes_device
    assert not _cfg(threads="1,2").probes_device
    assert not _cfg(direct_io=True).probes_device
    assert not _cfg(threads="1,2", direct_io=True, device_probe=False).probes_device


def test_the_sweep_stores_the_probe_and_prints_its_line(monkeypatch):
    seen = {}

    def fake(directory, threads, on_step=None):
        seen["threads"] = threads
        for _ in range(len(threads) * deviceprobe.DEFAULT_ROUNDS):
            on_step()
        return deviceprobe.DeviceScaling("/tmp", tuple(threads), 1 << 30, 1.0,
                                         rounds=[[10.0, 16.0]] * 3)
    monkeypatch.setattr(deviceprobe, "probe_device", fake)
    res = sweeps.run_sweep(_cfg(threads="1,2", direct_io=True))
    assert seen["threads"] == (1, 2)
    assert "10 reads/s at 1 thread, 16 at 2 (1.60x, 1.60-1.60x)" in res.table()
    times, counts = res.suites()
    md = times[0].get_metadata()
    assert json.loads(md["device_probe"])["rounds"] == [[10.0, 16.0]] * 3
    assert json.loads(md["config"])["device_probe"] is True
    # without direct I/O nothing is probed
    res = sweeps.run_sweep(_cfg(threads="1,2"))
    assert "device alone" not in res.table()
    assert "device_probe" not in res.suites()[0][0].get_metadata()


def _fake_probe(monkeypatch, seen):
    def fake(directory, threads, on_step=None):
        seen.append(tuple(threads))
        return deviceprobe.DeviceScaling("/tmp", tuple(threads), 1 << 30, 1.0,
                                         rounds=[[10.0, 16.0]] * 3)
    monkeypatch.setattr(deviceprobe, "probe_device", fake)


def test_scale_prints_and_stores_the_probe_with_direct_io(run_cli, tmp_path, monkeypatch):
    seen = []
    _fake_probe(monkeypatch, seen)
    out_json = tmp_path / "scale.json"
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-w", "codeact",
                             "-W", "sessions=8", "-e", "rocksdb", "--direct-io",
                             "--threads", "1,2", "-o", str(out_json))
    assert code == 0, err
    assert seen == [(1, 2)]
    assert "10 reads/s at 1 thread, 16 at 2 (1.60x, 1.60-1.60x)" in out
    suite = json.loads(out_json.read_text())
    md = suite["metadata"] if "device_probe" in suite.get("metadata", {}) else \
        suite["benchmarks"][0]["metadata"]
    assert json.loads(md["device_probe"])["threads"] == [1, 2]


@pytest.mark.parametrize("args", [[], ["--direct-io", "--no-device-probe"]])
def test_scale_without_direct_io_or_with_no_device_probe_does_not_probe(run_cli, monkeypatch,
                                                                       args):
    seen = []
    _fake_probe(monkeypatch, seen)
    code, out, err = run_cli("--quiet", "scale", "-s", "ssd-blockhash", "-w", "codeact",
                             "-W", "sessions=8", "-e", "rocksdb", *args, "--threads", "1,2")
    assert code == 0, err
    assert seen == [] and "device alone" not in out


# ---- the watch: the device's read latency between the turns of each repeat
WATCH = dict(file_bytes=1 << 20, reads=4)


def test_the_watch_keeps_each_repeats_reads_apart_and_leaves_nothing(tmp_path):
    with deviceprobe.DeviceWatch(str(tmp_path), **WATCH) as w:
        if w.skipped:                        # a file system without O_DIRECT
            assert "O_DIRECT" in w.skipped
            w.sample(0)
            assert w.samples == {}
            return
        assert len(os.listdir(tmp_path)) == 1
        w.sample(0)
        w.sample(0)
        w.sample(1)
        w.sample(deviceprobe.BEFORE_LOADS, 3)
    assert os.listdir(tmp_path) == []
    assert [len(w.samples[r]) for r in (0, 1, -1)] == [8, 4, 3]
    assert all(ns > 0 for r in (0, 1) for ns in w.samples[r])
    md = w.metadata()
    assert md["reads_per_round"] == 4 and md["block_bytes"] == 4096 and "skipped" not in md
    assert [r[0] for r in md["repeats"]] == [-1, 0, 1]
    assert [r[3] for r in md["repeats"]] == [3, 8, 4]
    assert all(0 < r[1] <= r[2] for r in md["repeats"])      # median <= p90
    # the time the reading thread waited for a core, per read, where the kernel says
    if deviceprobe._core_wait_ns() is not None:
        assert all(r[4] is not None and r[4] >= 0 for r in md["repeats"])


def test_the_watch_summary_is_the_median_and_p90_in_microseconds():
    w = deviceprobe.DeviceWatch("/d", **WATCH)
    w.samples = {0: [i * 1000 for i in range(1, 11)], 2: [40_000]}
    w.core_wait = {0: 25_000}
    assert w.metadata()["repeats"] == [[0, 5.5, 10.0, 10, 2.5], [2, 40.0, 40.0, 1, None]]


def test_the_core_wait_is_the_schedulers_run_queue_time(monkeypatch):
    import io
    seen = []

    def schedstat(path, *a, **k):
        seen.append(path)
        return io.StringIO("5 1234 7\n")
    monkeypatch.setattr("builtins.open", schedstat)
    assert deviceprobe._core_wait_ns() == 1234
    assert seen == ["/proc/thread-self/schedstat"]

    def missing(path, *a, **k):
        raise FileNotFoundError(path)
    monkeypatch.setattr("builtins.open", missing)
    assert deviceprobe._core_wait_ns() is None


def test_the_watch_skips_a_file_system_refusing_o_direct(tmp_path, no_o_direct):
    with deviceprobe.DeviceWatch(str(tmp_path), **WATCH) as w:
        w.sample(0)
    assert "refuses O_DIRECT" in w.skipped and w.samples == {}
    assert os.listdir(tmp_path) == []


def test_the_watch_skips_without_room_and_writes_nothing(tmp_path, monkeypatch):
    class Usage:
        free = 1 << 20
    monkeypatch.setattr(deviceprobe.shutil, "disk_usage", lambda d: Usage)
    with deviceprobe.DeviceWatch(str(tmp_path), **WATCH) as w:
        w.sample(0)
    assert "GiB" in w.skipped and w.samples == {} and os.listdir(tmp_path) == []
    assert w.metadata()["skipped"] == w.skipped


def test_a_failing_read_keeps_what_was_timed_and_stops_the_watch(tmp_path, monkeypatch):
    with deviceprobe.DeviceWatch(str(tmp_path), **WATCH) as w:
        if w.skipped:
            return
        w.sample(0)

        def eio(*a):
            raise OSError(5, "Input/output error")
        monkeypatch.setattr(deviceprobe.os, "preadv", eio)
        w.sample(1)
        w.sample(2)
    assert "Input/output error" in w.skipped
    assert len(w.samples[0]) == 4 and w.samples.get(1) == [] and 2 not in w.samples
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kw", [dict(file_bytes=1000), dict(reads=0)])
def test_the_watch_refuses_bad_arguments(kw):
    with pytest.raises(ValueError):
        deviceprobe.DeviceWatch("/d", **{**WATCH, **kw})


def test_a_sweep_watches_only_interleaved_strategies_with_direct_io():
    assert _cfg(direct_io=True, interleave="5").watches_device
    assert not _cfg(interleave="5").watches_device
    assert not _cfg(direct_io=True).watches_device
    assert not _cfg(direct_io=True, interleave="5", device_probe=False).watches_device


class _FakeWatch(deviceprobe.DeviceWatch):
    """Times nothing: each round records one 'read' of 1000 ns times the repeat + 1,
    the baseline ``reads`` reads of 500 ns."""
    made: list = []

    def __init__(self):
        super().__init__("/nowhere", **WATCH)
        _FakeWatch.made.append(self)
        self.closed = False

    def open(self):
        pass

    def sample(self, repeat, reads=None):
        if repeat == deviceprobe.BEFORE_LOADS:
            self.samples.setdefault(repeat, []).extend([500] * reads)
            return
        self.samples.setdefault(repeat, []).append(1000 * (repeat + 1))

    def close(self):
        self.closed = True


def test_the_sweep_watches_every_round_of_each_repeat_and_prints_it(monkeypatch):
    _FakeWatch.made = []
    monkeypatch.setattr(deviceprobe, "DeviceWatch", _FakeWatch)
    cfg = _cfg(direct_io=True, interleave="5", repeat="2",
               strategies="ssd-blockhash,segment-hash")
    res = sweeps.run_sweep(cfg)
    (w,) = _FakeWatch.made
    assert w.closed
    requests = res.rows[0].result.requests
    rounds = -(-requests // 5)              # one round per turn of 5 requests
    assert [len(w.samples[r]) for r in (0, 1)] == [rounds, rounds]
    times, _counts = res.suites()
    md = json.loads(times[0].get_metadata()["device_watch"])
    assert [r[:2] for r in md["repeats"]] == [[-1, 0.5], [0, 1.0], [1, 2.0]]
    assert md["repeats"][0][3] == deviceprobe.BEFORE_LOADS_READS
    assert json.loads(times[0].get_metadata()["config"])["device_watch"] is True
    text = res.table()
    block = text[text.index("\neach repeat"):]
    assert "repeat 1" in block and "repeat 2" in block
    assert f"1.0 us (p90 1.0; {rounds} reads)" in block
    assert f"2.0 us (p90 2.0; {rounds} reads)" in block
    assert "device before the sweep loaded any store: 0.5 us (p90 0.5; 256 reads)" in block
    # each row's throughput in each repeat, the others with the first's over theirs
    tps = [r.result.throughput for r in res.all_rows if r.setting.label == "segment-hash"]
    ref = [r.result.throughput for r in res.all_rows if r.setting.label == "ssd-blockhash"]
    assert f"{tps[1]:,.0f} ({ref[1] / tps[1]:.2f}x)" in block


def test_without_direct_io_the_sweep_prints_each_repeat_but_no_device(monkeypatch):
    _FakeWatch.made = []
    monkeypatch.setattr(deviceprobe, "DeviceWatch", _FakeWatch)
    res = sweeps.run_sweep(_cfg(interleave="5", repeat="2"))
    assert _FakeWatch.made == []
    text = res.table()
    assert "\neach repeat" in text and "direct read" not in text
    # one repeat: no such table
    assert "\neach repeat" not in sweeps.run_sweep(_cfg(interleave="5")).table()


def test_the_watch_cells_say_why_nothing_was_measured():
    from prefixbench.reports.sweeps import _watch_cells
    assert _watch_cells(None, 2) == (None, "")
    assert _watch_cells(json.dumps({"repeats": [], "skipped": "no room"}), 2) == \
        (["not measured (no room)", "-"], "")
    assert _watch_cells("{not json", 2) == (["unreadable", "unreadable"], "")
    assert _watch_cells(json.dumps({"repeats": [[1, 50.0, 70.5, 9]]}), 2) == \
        (["-", "50.0 us (p90 70.5; 9 reads)"], "")
    cells, line = _watch_cells(json.dumps({"repeats": [[-1, 48.0, 52.5, 256, 0.5],
                                                        [0, 150.0, 190.0, 320, 41.25]]}), 2)
    assert cells == ["150.0 us (p90 190.0, 41.2 of it waiting for a core; 320 reads)", "-"]
    assert line == ("device before the sweep loaded any store: 48.0 us (p90 52.5, 0.5 of it "
                    "waiting for a core; 256 reads)")
