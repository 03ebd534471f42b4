"""Chained block IDs: ``h_0 = seed(namespace)``, ``h_i = H64(h_{i-1}, block_i)``.

``H64`` is prefixbench's own 64-bit hash (named *pbh64*), fixed and documented
here so that ids are the same in every process and on every machine (never
Python's ``hash()``).  A block is a sequence of 64-bit words:

* token blocks pack token ids (uint32) two to a word, little end first
  (``t[2i] | t[2i+1] << 32``); an odd last token fills a word alone;
* hash-id traces (Mooncake, Alibaba) give one id per block: one word;
* a namespace string is its UTF-8 bytes, zero-padded to whole words.

pbh64(prev, words, n)::

    acc = (prev ^ K0) + n * K1            # n = tokens (or bytes) in the block
    for w in words:
        acc ^= w * K2
        acc = rotl(acc, 31) * K3
    acc ^= acc >> 33; acc *= K4
    acc ^= acc >> 29; acc *= K5
    acc ^= acc >> 32

All arithmetic is modulo 2**64.  The per-word step keeps one multiply on the
dependency chain, so the Cython path runs at several hundred million tokens per
second per core.  The functions in this module are the pure-Python reference;
:mod:`prefixbench._blockids` is the compiled twin the tests hold equal.
"""
from __future__ import annotations

import numpy as np
from prefixbench import twins
from prefixbench.errors import ConfigError

MASK = (1 << 64) - 1
K0 = 0x46DF2EF7ACB7317F
K1 = 0xA13772D18C099AA3
K2 = 0xD98331B2C94C5A2F
K3 = 0x23B3F97FDAD562E5
K4 = 0x2074745E9FDFFE39
K5 = 0x724151119C873779
SEED_PREFIX = 0x70726566_69786230  # b"prefixb0" read as a big-endian integer

#: token block size used when nothing else is said (tokens per KVCache block)
DEFAULT_BLOCK_SIZE = 16


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def pbh64(prev: int, words, n: int) -> int:
    """Reference pbh64 over an iterable of 64-bit words."""
    acc = ((prev ^ K0) + n * K1) & MASK
    for w in words:
        acc ^= (int(w) * K2) & MASK
        acc = (_rotl(acc, 31) * K3) & MASK
    acc ^= acc >> 33
    acc = (acc * K4) & MASK
    acc ^= acc >> 29
    acc = (acc * K5) & MASK
    acc ^= acc >> 32
    return acc


def token_words(tokens) -> list[int]:
    """Pack uint32 token ids two to a 64-bit word (little end first)."""
    toks = [int(t) & 0xFFFFFFFF for t in tokens]
    words = []
    for i in range(0, len(toks), 2):
        lo = toks[i]
        hi = toks[i + 1] if i + 1 < len(toks) else 0
        words.append(lo | (hi << 32))
    return words


def namespace_seed(namespace: str | int) -> int:
    """``h_0`` for a namespace (a model/config name, or a replica copy)."""
    data = str(namespace).encode("utf-8")
    padded = data + b"\0" * (-len(data) % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    return pbh64(SEED_PREFIX, words, len(data))


def chain_tokens_py(tokens, block_size: int, h0: int) -> np.ndarray:
    """Chained ids of every *full* block of ``tokens`` (reference)."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    toks = np.asarray(tokens, dtype=np.uint32)
    n_blocks = len(toks) // block_size
    out = np.empty(n_blocks, dtype=np.uint64)
    h = int(h0) & MASK
    for b in range(n_blocks):
        block = toks[b * block_size:(b + 1) * block_size]
        h = pbh64(h, token_words(block), block_size)
        out[b] = h
    return out


def chain_ids_py(ids, h0: int) -> np.ndarray:
    """Chain per-block hash ids from a trace the same way (reference)."""
    out = np.empty(len(ids), dtype=np.uint64)
    h = int(h0) & MASK
    for i, v in enumerate(ids):
        h = pbh64(h, [int(v) & MASK], 1)
        out[i] = h
    return out


# the compiled twin, or the references above in pure-Python mode (api/twins.py
# decides; a missing build is one clear error, never a silent fallback)
try:
    _compiled, _missing = twins.compiled("prefixbench._blockids"), None
except ConfigError as e:
    # `import prefixbench` must not die with a traceback: the error is raised on
    # first use instead (inside the CLI, which prints it as one line)
    _compiled, _missing = None, str(e)
if _compiled is not None:
    chain_tokens = _compiled.chain_tokens
    chain_ids = _compiled.chain_ids
elif _missing is not None:
    def chain_tokens(*args, **kwargs):
        raise ConfigError(_missing)

    def chain_ids(*args, **kwargs):
        raise ConfigError(_missing)
else:
    chain_tokens = chain_tokens_py
    chain_ids = chain_ids_py
COMPILED = _compiled is not None
