"""Request threads: partitioned sessions, the post-hoc false-hit check, scale."""
import numpy as np
import pytest

from prefixbench.harness.replay import replay
from prefixbench.plugins.blockhash import DramBlockHashStrategy as DramBlockHash
from prefixbench.plugins.radix import RadixStrategy
from prefixbench.plugins.strategy import Match
from prefixbench.workloads.synthetic import make_synthetic

from test_cli import _one_line_error


def _workload():
    return make_synthetic("ultrachat", sessions=40)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threaded_replay_has_no_false_hits(threads):
    res = replay(DramBlockHash(), _workload(), threads=threads, threaded=True)
    assert res.requests == len(_workload()) and res.threads == threads
    assert res.false_hits == 0 and res.hit_tokens > 0
    assert res.throughput > 0 and res.timed_wall_seconds > 0


class _OverReaching(RadixStrategy):
    """Returns one block more than it has whenever it can: a false hit."""

    def match(self, block_ids):
        m = super().match(block_ids)
        if 0 < m.n_blocks < len(block_ids):
            metas = np.vstack([m.metas, np.zeros((1, self.meta_size), np.uint8)])
            return Match(m.n_blocks + 1, metas)
        return m


def test_threaded_check_catches_false_hits():
    res = replay(_OverReaching(), _workload(), threads=2)
    assert res.false_hits > 0


def test_scale_command(run_cli):
    code, out, err = run_cli("--quiet", "scale", "-s", "radix", "-w", "ultrachat",
                             "-W", "sessions=20", "--threads", "1,2")
    assert code == 0, err
    rows = [ln.split() for ln in out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["1", "2"] and rows[0][2] == "1.00x"
    assert all(r[-1] == "0" for r in rows)


@pytest.mark.parametrize("cmd,value", [("run", "0"), ("run", "1000"), ("scale", "1,0"),
                                       ("scale", "two")])
def test_bad_thread_counts(run_cli, cmd, value):
    code, _, err = run_cli(cmd, "-s", "radix", "-w", "ultrachat", "-W", "sessions=5",
                           "--threads", value, *(["--no-runner"] if cmd == "run" else []))
    _one_line_error(code, err, "--threads")
