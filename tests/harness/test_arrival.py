"""Open-loop arrival: requests issued at their (scaled) trace timestamps."""
import json
import os

import numpy as np
import pytest

from prefixbench.errors import ConfigError
from prefixbench.harness.arrival import ArrivalResult, request_times, saturation
from prefixbench.registry import get_registry

from conftest import MOONCAKE_CONVERSATION


def token_log(path, n=40, gap=0.5):
    rng = np.random.default_rng(5)
    shared = rng.integers(0, 30000, 64).tolist()
    rows = [{"session_id": i % 4, "timestamp": i * gap,
             "prompt_token_ids": shared + rng.integers(0, 30000, 20).tolist()} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_arrival_table_offered_vs_achieved(tmp_path, run_cli):
    p = token_log(tmp_path / "t.jsonl")
    code, out, err = run_cli("-q", "arrival", "-s", "dram-blockhash", "-w", "token-jsonl",
                             "-W", f"path={p}", "--speedup", "100,1000", "--threads", "2",
                             "--json", tmp_path / "a.json")
    assert code == 0, err
    assert "offered req/s" in out and "saturation:" in out
    rows = json.loads((tmp_path / "a.json").read_text())
    assert [r["speedup"] for r in rows] == [100, 1000]
    assert rows[0]["requests"] == 40
    # 39 gaps of 0.5 s over 100: 200 req/s offered
    assert rows[0]["offered_rps"] == pytest.approx(200.0)
    assert all(r["p50_s"] >= 0 and r["p99_s"] >= r["p50_s"] for r in rows)
    assert rows[0]["hit_rate"] > 0.5                # the shared 64-token prefix hits


def test_workloads_without_timestamps_are_one_line(tmp_path, run_cli):
    p = tmp_path / "n.jsonl"
    p.write_text(json.dumps({"prompt_token_ids": [1] * 40}) + "\n"
                 + json.dumps({"prompt_token_ids": [2] * 40, "timestamp": 1}) + "\n")
    wl = get_registry().get("workload", "token-jsonl").factory(path=str(p))
    with pytest.raises(ConfigError, match="has requests without a timestamp"):
        request_times(wl)
    code, _, err = run_cli("-q", "arrival", "-s", "radix", "-w", "lmcache-agent",
                           "-W", "sessions=2")
    assert code != 0 and "has no timestamps" in err
    code, _, err = run_cli("-q", "arrival", "-s", "radix", "-w", "token-jsonl", "-W",
                           f"path={p}", "--speedup", "0")
    assert code != 0 and "option --speedup" in err


def test_mooncake_timestamps_are_seconds():
    if not os.path.exists(MOONCAKE_CONVERSATION):
        pytest.skip("needs ../shared/data/mooncake-fast25")
    wl = get_registry().get("workload", "mooncake").factory(path=MOONCAKE_CONVERSATION)
    t = request_times(wl)
    assert t[0] == 0.0 and 3000 < t[-1] < 4000 and np.all(np.diff(t) >= 0)


def test_saturation_rule():
    def row(x, off, ach, p99):
        return ArrivalResult(x, 10, off, ach, 0.0, p99, p99, 0.0, 0, 1, 0)
    rows = [row(1, 10, 10, 1e-4), row(2, 20, 20, 5e-4), row(4, 40, 30, 1e-2)]
    assert saturation(rows).speedup == 2


class _Timed:
    """A stand-in index whose match takes ``pause`` seconds (a sleep: at least that)."""

    def __init__(self, pause=0.0):
        self.pause = pause

    def match(self, ids):
        import time
        from prefixbench.plugins.strategy import Match
        if self.pause:
            time.sleep(self.pause)
        return Match.empty(16)

    def insert(self, ids, metas):
        pass


def _requests(n):
    from types import SimpleNamespace
    ids = np.arange(1, 5, dtype=np.uint64)
    return [SimpleNamespace(match_ids=ids, insert_ids=ids, prompt_tokens=64) for _ in range(n)]


def test_an_early_issuer_counts_from_its_wake_up_and_reports_it_apart():
    """Requests 20 ms apart, one issuer: it is early for each, so none queued - the
    queued latency is the service time - and its wake-up delay is reported apart."""
    from prefixbench.harness.arrival import replay_open_loop
    rows = replay_open_loop(_Timed(), _requests(12), np.arange(12) * 0.02, block_size=16,
                            threads=1)
    assert rows.late_starts == 0
    assert rows.p50_s == rows.service_p50_s
    assert 0 <= rows.issue_p50_s <= rows.issue_p99_s


def test_a_request_reached_late_keeps_its_queueing():
    """Eight requests due at once, one issuer, 10 ms a match: the last waited for seven
    matches before it, and that wait is in its latency."""
    from prefixbench.harness.arrival import replay_open_loop
    rows = replay_open_loop(_Timed(0.01), _requests(8), np.zeros(8), block_size=16,
                            threads=1)
    assert rows.late_starts >= 7
    assert rows.p999_s >= 7 * 0.01
