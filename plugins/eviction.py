"""Eviction policies for bounded KVCache pools: ``lru``, ``lfu``, ``fifo``.

A policy turns the pool's per-block state into one ``int64`` key per block;
the pool (:mod:`prefixbench.harness.pools`) evicts the blocks with the
smallest keys.  The state is arrays indexed by pool slot, all ``int64``:

``last``    request number of the block's last use (a hit or its insert)
``hits``    uses since the block entered the pool (1 at its insert)
``newest``  request number of the newest block inserted at or below it
``depth``   its position in the chained sequence (0 = first block)

Radix caches evict leaves first: a block with a cached child stays until
that child is gone.  Each built-in's key is *heap-ordered*: it is never
below the key of a cached child (a use of a child is a use of every block
before it; an insert below a block is an insert below its ancestors), and
equal keys go deeper blocks first.  The smallest keys of all unpinned
blocks are therefore always leaves, evicting them one at a time or all at
once gives the same set, and the pool picks them in one NumPy pass.  A
third-party policy that cannot promise this sets ``heap_ordered = False``;
the pool then evicts in rounds, each among the current leaves only.

``fifo`` is first-in-first-out over leaves, as SGLang's radix cache does it:
the leaf created longest ago goes first, and a parent that becomes a leaf
follows at once (its key is its newest descendant's insert).  Under traffic
that extends every session each turn it behaves close to ``lru``.

Keys pack fields into 63 bits: the depth takes the low 24 bits (sequences
of up to 16M blocks); ``lfu`` saturates its use count at 32767 and holds
request numbers below 2**24 (16.7M requests) in the middle 24 bits.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from prefixbench.hookspecs import hookimpl

DEPTH_BITS = 24
DEPTH_MASK = (1 << DEPTH_BITS) - 1
LFU_HITS_MAX = (1 << 15) - 1
LFU_LAST_MASK = (1 << 24) - 1


class EvictionPolicy:
    """Orders a pool's blocks for eviction: smaller keys go first."""

    name: ClassVar[str] = ""
    #: every block's key >= its cached children's (see the module docstring)
    heap_ordered: ClassVar[bool] = True

    def keys(self, state, slots: np.ndarray) -> np.ndarray:
        """``int64`` keys of the blocks at ``slots`` of ``state`` (a pool)."""
        raise NotImplementedError

    @staticmethod
    def _deeper_first(state, slots: np.ndarray) -> np.ndarray:
        return DEPTH_MASK - state.depth[slots]


class LRU(EvictionPolicy):
    """Least recently used leaf first (vLLM, SGLang's default)."""

    name = "lru"

    def keys(self, state, slots):
        return (state.last[slots] << DEPTH_BITS) | self._deeper_first(state, slots)


class LFU(EvictionPolicy):
    """Least frequently used leaf first, the least recent among equals (SGLang's lfu)."""

    name = "lfu"

    def keys(self, state, slots):
        hits = np.minimum(state.hits[slots], LFU_HITS_MAX)
        last = state.last[slots] & LFU_LAST_MASK
        return (hits << 48) | (last << DEPTH_BITS) | self._deeper_first(state, slots)


class FIFO(EvictionPolicy):
    """Oldest leaf first, its parent right after when it becomes a leaf (SGLang's fifo)."""

    name = "fifo"

    def keys(self, state, slots):
        return (state.newest[slots] << DEPTH_BITS) | self._deeper_first(state, slots)


BUILTIN = (LRU, LFU, FIFO)


@hookimpl
def prefixbench_register_evictions(register):
    for cls in BUILTIN:
        register(cls.name, cls)
