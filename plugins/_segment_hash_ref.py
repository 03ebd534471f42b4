"""Pure-Python reference of :mod:`prefixbench.plugins._segment_hash`: the batch
record encoder with the same public names, checks and bytes."""
from __future__ import annotations

import numpy as np

from prefixbench.plugins import _segments_ref

__all__ = ["encode_records"]


def encode_records(keys, starts, lens, ids, metas, meta_size: int) -> list:
    """``[(key, record)]``: the record of blocks ``[start, start + len)`` of ``ids`` and
    ``metas`` under each key, one reference ``encode`` per record (the compiled
    checks, the same errors)."""
    ids = np.asarray(ids, dtype=np.uint64)
    metas = np.asarray(metas, dtype=np.uint8)
    n = len(ids) if ids.ndim == 1 else 0
    if ids.ndim != 1:
        raise ValueError("block ids must be 1-D")
    if metas.ndim != 2 or metas.shape != (n, meta_size):
        raise ValueError(f"metas must have shape ({n}, {meta_size}), got {metas.shape}")
    if not 1 <= meta_size <= 0xFFFF:
        raise ValueError(f"meta_size must be in 1..65535, got {meta_size}")
    sl, gl = np.asarray(starts, dtype=np.int64).tolist(), np.asarray(lens, dtype=np.int64).tolist()
    if len(sl) != len(np.asarray(keys)) or len(gl) != len(sl):
        raise ValueError("keys, starts and lens must have the same length")
    for i, (a, g) in enumerate(zip(sl, gl)):
        if a < 0 or g < 0 or a + g > n:
            raise ValueError(f"record {i} [{a}, {a + g}) is outside the {n} blocks")
    return [(int(k), _segments_ref.encode(int(k), s, ids[s:s + g], metas[s:s + g], meta_size))
            for k, s, g in zip(np.asarray(keys, dtype=np.uint64).tolist(),
                               np.asarray(starts).tolist(), np.asarray(lens).tolist())]
