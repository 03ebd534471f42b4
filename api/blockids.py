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
second per core.  :mod:`prefixbench._blockids` computes the chains;
:mod:`prefixbench._blockids_ref` is its pure-Python reference (the tests hold the
two equal, and golden vectors pin both).
"""
from __future__ import annotations

from prefixbench import twins
# the constants and the word-by-word arithmetic; chain_*_py name the references
from prefixbench._blockids_ref import (K0, K1, K2, K3, K4, K5, MASK,  # noqa: F401
                                       _token_words as token_words, chain_ids as chain_ids_py,
                                       chain_tokens as chain_tokens_py, pbh64_words as pbh64)

SEED_PREFIX = 0x70726566_69786230  # b"prefixb0" read as a big-endian integer

#: token block size used when nothing else is said (tokens per KVCache block)
DEFAULT_BLOCK_SIZE = 16


def namespace_seed(namespace: str | int) -> int:
    """``h_0`` for a namespace (a model/config name, or a replica copy).

    The name's UTF-8 bytes; a lone surrogate (how Python holds command-line
    bytes that are not UTF-8) is encoded as its code point, so any name hashes."""
    data = str(namespace).encode("utf-8", "surrogatepass")
    padded = data + b"\0" * (-len(data) % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    return pbh64(SEED_PREFIX, words, len(data))


# the compiled twin, or its reference in pure-Python mode; a missing build is one
# ConfigError line at the first call (``import prefixbench`` must still work)
_impl = twins.load("prefixbench._blockids", defer=True)
chain_tokens = _impl.chain_tokens
chain_ids = _impl.chain_ids
COMPILED = twins.is_compiled(_impl)
