"""Pure-Python reference of :mod:`prefixbench._blockids`: the same public names and
the same ids, computed word by word as :mod:`prefixbench.blockids` defines pbh64.

It also holds the hash constants, which :mod:`prefixbench.blockids` re-exports.
"""
from __future__ import annotations

import numpy as np

__all__ = ["chain_ids", "chain_tokens", "pbh64_words"]

MASK = (1 << 64) - 1
K0 = 0x46DF2EF7ACB7317F
K1 = 0xA13772D18C099AA3
K2 = 0xD98331B2C94C5A2F
K3 = 0x23B3F97FDAD562E5
K4 = 0x2074745E9FDFFE39
K5 = 0x724151119C873779


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def pbh64_words(prev: int, words, n: int) -> int:
    """pbh64 of ``prev`` and an iterable of 64-bit words, ``n`` the tokens (or bytes)
    the words stand for."""
    acc = ((int(prev) ^ K0) + int(n) * K1) & MASK
    for w in words:
        acc ^= (int(w) * K2) & MASK
        acc = (_rotl(acc, 31) * K3) & MASK
    acc ^= acc >> 33
    acc = (acc * K4) & MASK
    acc ^= acc >> 29
    acc = (acc * K5) & MASK
    acc ^= acc >> 32
    return acc


def _token_words(tokens) -> list[int]:
    """Pack uint32 token ids two to a 64-bit word (little end first)."""
    toks = [int(t) & 0xFFFFFFFF for t in tokens]
    words = []
    for i in range(0, len(toks), 2):
        lo = toks[i]
        hi = toks[i + 1] if i + 1 < len(toks) else 0
        words.append(lo | (hi << 32))
    return words


def chain_tokens(tokens, block_size: int, h0: int) -> np.ndarray:
    """Chained ids of every *full* block of ``tokens``."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    toks = np.asarray(tokens, dtype=np.uint32)
    n_blocks = len(toks) // block_size
    out = np.empty(n_blocks, dtype=np.uint64)
    h = int(h0) & MASK
    for b in range(n_blocks):
        block = toks[b * block_size:(b + 1) * block_size]
        h = pbh64_words(h, _token_words(block), block_size)
        out[b] = h
    return out


def chain_ids(ids, h0: int) -> np.ndarray:
    """Chain per-block hash ids from a trace (one word per block)."""
    out = np.empty(len(ids), dtype=np.uint64)
    h = int(h0) & MASK
    for i, v in enumerate(ids):
        h = pbh64_words(h, [int(v) & MASK], 1)
        out[i] = h
    return out
