"""Deterministic block metadata, so every returned record can be checked.

Each block's 16-byte record is ``(block_id ^ META_MAGIC, request_number)`` as
two little-endian u64: the first half ties it to the block, the second to the
request that inserted it.  Any other width repeats or truncates that pattern.
"""
from __future__ import annotations

import numpy as np

META_MAGIC = np.uint64(0x6D65746164617461)  # "metadata"


def make_metas(block_ids: np.ndarray, request_number: int, meta_size: int = 16) -> np.ndarray:
    """uint8 array (n, meta_size) for blocks inserted by ``request_number``."""
    n = len(block_ids)
    words = np.empty((n, 2), dtype=np.uint64)
    words[:, 0] = block_ids ^ META_MAGIC
    words[:, 1] = request_number
    raw = words.view(np.uint8).reshape(n, 16)
    if meta_size == 16:
        return raw
    reps = -(-meta_size // 16)
    return np.ascontiguousarray(np.tile(raw, (1, reps))[:, :meta_size])
