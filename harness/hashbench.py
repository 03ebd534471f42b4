"""Chained block hashing throughput: compiled path vs the pure-Python reference.

``hash-bench`` prints its figures from the suite :func:`benchmarks` builds (and
``-o`` writes), so ``prefixbench show`` prints the same.
"""
from __future__ import annotations

import time

import numpy as np

from prefixbench import blockids


def _best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(n_tokens: int, block_size: int = 16, py_tokens: int = 65536, repeat: int = 3) -> dict:
    rng = np.random.default_rng(0)
    toks = rng.integers(0, 32000, size=n_tokens, dtype=np.uint32)
    small = toks[:py_tokens]
    t_c = _best_of(lambda: blockids.chain_tokens(toks, block_size, 1), repeat)
    t_py = _best_of(lambda: blockids.chain_tokens_py(small, block_size, 1), 1)
    return {
        "compiled": blockids.COMPILED,
        "block_size": block_size,
        "cython_tokens": n_tokens,
        "cython_tokens_per_s": n_tokens / t_c,
        "python_tokens": len(small),
        "python_tokens_per_s": len(small) / t_py,
        "speedup": (n_tokens / t_c) / (len(small) / t_py),
    }


def benchmarks(r: dict, repeat: int = 3) -> list:
    """The figures of :func:`measure` (``hash-*``) as one suite's benchmarks, which the
    command prints through ``prefixbench.reports`` and ``-o`` writes."""
    from prefixbench import schema
    from prefixbench.harness import pyperf_io
    md = pyperf_io.run_metadata("none", None, "none", {"block_size": r["block_size"],
                                                       "tokens": r["cython_tokens"]})
    md.update({"command": "hash-bench", "hash_compiled": int(bool(r["compiled"])),
               "hash_repeat": repeat})
    figures = schema.from_json({k: v for k, v in r.items() if k != "block_size"})
    figures["hash-block-size"] = float(r["block_size"])
    return pyperf_io.figure_benchmarks(figures, md)
