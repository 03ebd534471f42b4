"""The overlay's compiled corrections (``_sarp.overlay_cut``, ``_sarp.overlay_revive``)
against their pure-Python references and against the rule they implement, written
out here block by block:

* a match's block is gone when the location table does not list it and it is
  tombstoned (or every unlisted block, after ``clear()``); the answer stops at the
  first gone block;
* before it, a listed block takes the table's metadata and worker bitmap, any
  other the stored metadata on worker 0 (bitmap 1);
* an insert on worker 0 writes the metadata of every listed or tombstoned block
  (every block after ``clear()``) to the location table, and drops the tombstone
  of every tombstoned block the table did not list.

With ``PREFIXBENCH_PURE=1`` both sides are the reference (the rule checks still
hold it).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prefixbench import twins

_hot = twins.load("prefixbench.plugins._sarp")
_ref = twins.reference("prefixbench.plugins._sarp")

MS = 4


def _expected_cut(stored, n, live, lmetas, llocs, dead, defaults_dead):
    cut = n
    for i in range(n):
        listed = live is not None and bool(live[i])
        if not listed and (defaults_dead or (dead is not None and bool(dead[i]))):
            cut = i
            break
    metas, locs = [], []
    for i in range(cut):
        if live is not None and live[i]:
            metas.append(bytes(lmetas[i]))
            locs.append(int(llocs[i]))
        else:
            metas.append(bytes(stored[i]))
            locs.append(1)
    return cut, metas, locs


@st.composite
def _lookups(draw):
    n = draw(st.integers(0, 40))
    extra = draw(st.integers(0, 3))             # a match may cover fewer blocks than its query
    rows = n + extra
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    stored = rng.integers(0, 256, (rows, MS), dtype=np.uint8)
    live = lmetas = llocs = dead = None
    if draw(st.booleans()):
        live = rng.random(rows) < draw(st.floats(0, 1))
        lmetas = np.where(live[:, None], rng.integers(0, 256, (rows, MS), dtype=np.uint8), 0
                          ).astype(np.uint8)
        llocs = np.where(live, rng.integers(1, 2 ** 63, rows, dtype=np.uint64), 0
                         ).astype(np.uint64)
    if draw(st.booleans()):
        dead = rng.random(rows) < draw(st.floats(0, 1))
    return stored, n, live, lmetas, llocs, dead, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(_lookups())
def test_overlay_cut_matches_the_rule_and_its_reference(args):
    want = _expected_cut(*args)
    for impl in (_hot, _ref):
        cut, metas, locs = impl.overlay_cut(*args)
        assert cut == want[0]
        assert metas.dtype == np.uint8 and metas.shape == (cut, MS)
        assert locs.dtype == np.uint64 and locs.shape == (cut,)
        assert [bytes(r) for r in metas] == want[1]
        assert locs.tolist() == want[2]


def test_overlay_cut_returns_new_arrays():
    stored = np.arange(3 * MS, dtype=np.uint8).reshape(3, MS)
    for impl in (_hot, _ref):
        cut, metas, _locs = impl.overlay_cut(stored, 3, None, None, None, None, False)
        assert cut == 3
        metas[0, 0] = 99
        assert stored[0, 0] == 0


def test_overlay_cut_refuses_short_inputs():
    stored = np.zeros((2, MS), np.uint8)
    for impl in (_hot, _ref):
        with pytest.raises(ValueError):
            impl.overlay_cut(stored, 3, None, None, None, None, False)
        with pytest.raises(ValueError):
            impl.overlay_cut(stored, 2, None, None, None, np.zeros(1, np.bool_), False)
        with pytest.raises(ValueError):
            impl.overlay_cut(stored, 2, np.zeros(1, np.bool_), np.zeros((1, MS), np.uint8),
                             np.zeros(1, np.uint64), None, False)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 2 ** 32 - 1))
def test_overlay_revive_matches_the_rule_and_its_reference(n, has_live, has_dead, cleared,
                                                           seed):
    rng = np.random.default_rng(seed)
    live = rng.random(n) < 0.3 if has_live else None
    dead = rng.random(n) < 0.5 if has_dead else None
    if live is None and dead is None:
        want = (None, None)
    else:
        inl = [bool(x) for x in live] if live is not None else [False] * n
        ind = [bool(x) for x in dead] if dead is not None else [False] * n
        listed = [i for i in range(n) if cleared or inl[i] or ind[i]]
        revived = [i for i in range(n) if ind[i] and not inl[i]]
        want = (listed or None, revived or None)
    for impl in (_hot, _ref):
        got = impl.overlay_revive(live, dead, cleared)
        assert [None if g is None else g.tolist() for g in got] == list(want)
        for g in got:
            assert g is None or g.dtype == np.int64


def test_overlay_revive_refuses_lookups_of_different_lengths():
    for impl in (_hot, _ref):
        with pytest.raises(ValueError):
            impl.overlay_revive(np.zeros(2, np.bool_), np.zeros(3, np.bool_), False)
