"""Seeded synthetic chat and agent workloads (profiles in :mod:`.profiles`).

Generation is lazy and random-access: the per-session *plans* (turn
lengths, parents, shared prefixes) are drawn for all sessions at once from a
counter-based hash of ``(seed, profile, what, session, turn)``, and so are the
token ids of each turn, when the replay reaches it.  So any session or turn
can be produced alone, and replay keeps only the block ids of turns that a
later turn still continues - never the tokens of the whole workload.  The
plans are flat per-turn arrays (about 24 B a turn), so a paper-size
workload's replay needs no per-session objects.

Shared pieces (system prompts, task prompts, openers) are numbered per
sharing group: group ``g`` of a pool of ``n`` per group owns pieces
``[g*n, (g+1)*n)``, and with one group (the default) the draws are the ones
the profile always had.  A system prompt of a later group starts with the
first ``system_head_tokens`` of group 0's prompt of the same rank.

Block ids are computed incrementally: a turn hashes only its new tokens
(plus the partial last block of its parent) starting from the parent's last
chained id, and prepends the parent's ids.  ``namespace`` changes ``h_0``,
so replicated copies (a fresh namespace each) share no block.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from prefixbench.blockids import DEFAULT_BLOCK_SIZE, chain_tokens, namespace_seed
from prefixbench.errors import ConfigError
from prefixbench.hookspecs import hookimpl
from prefixbench.workloads.model import Request, Session, Turn, Workload
from prefixbench.workloads.profiles import (PRESETS, PROFILES, Profile, make_profile, paper_knobs,
                                            paper_sessions)

_M64 = (1 << 64) - 1
_NO_TOKENS = np.empty(0, dtype=np.uint32)
_NO_IDS = np.empty(0, dtype=np.uint64)

# independent streams of the counter-based generator
(_SYSTEM, _TASK, _OPENER, _TOKENS, _TURNS, _FIRST_LEN, _INPUT_LEN, _OUTPUT_LEN, _PICK_SYSTEM,
 _PICK_TASK, _HAS_OPENER, _PICK_OPENER, _FORK, _FORK_TO, _FORK_FAN, _PIECE_LEN) = range(1, 17)

_C0 = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31, _S11 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(11)


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _key(*parts: int) -> int:
    """Mix small integers into one 64-bit stream key."""
    h = 0x243F6A8885A308D3
    for p in parts:
        h = _splitmix(h ^ (p & _M64))
    return h


def _splitmix_array(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (array arithmetic wraps silently)."""
    x = x + _C0
    x = (x ^ (x >> _S30)) * _C1
    x = (x ^ (x >> _S27)) * _C2
    return x ^ (x >> _S31)


def random_tokens(key: int, n: int, vocab: int) -> np.ndarray:
    """``n`` token ids below ``vocab``: splitmix64 of a counter, vectorised."""
    x = _splitmix_array(np.arange(n, dtype=np.uint64) * _C0 + np.uint64(key))
    return (x % np.uint64(vocab)).astype(np.uint32)


def _uniform(key: int, *cols: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1), one per element of ``cols`` (random access)."""
    h = np.full(np.shape(cols[0]), key, dtype=np.uint64)
    for c in cols:
        h = _splitmix_array(h ^ np.asarray(c).astype(np.uint64))
    return (h >> _S11).astype(np.float64) * (1.0 / (1 << 53))


def _lengths(u: np.ndarray, rng_range: tuple[int, int], scale: float) -> np.ndarray:
    """Log-uniform integer lengths in ``scale * [lo, hi]`` (a long right tail)."""
    lo, hi = rng_range[0] * scale, rng_range[1] * scale
    if hi < 1:
        return np.zeros(len(u), dtype=np.int64)
    if lo >= 1:
        vals = np.exp(np.log(lo) + u * (np.log(hi + 1) - np.log(lo)))
    else:  # a zero lower bound: uniform instead (log of 0 is undefined)
        vals = lo + u * (hi + 1 - lo)
    return np.minimum(np.floor(vals), np.floor(hi)).astype(np.int64)


@dataclass
class SessionPlan:
    """Everything about one session except its tokens."""

    prefix: tuple[tuple[int, int, int], ...]   # shared pieces of turn 0: (stream, index, length)
    inputs: np.ndarray                         # own input tokens per turn (int64)
    outputs: np.ndarray                        # output tokens per turn (int64)
    parents: np.ndarray                        # parent turn per turn; -1 for the root turn


class SyntheticWorkload(Workload):
    """A profile's sessions, replayed round-robin as chained block ids."""

    def __init__(self, profile: Profile, *, block_size: int = DEFAULT_BLOCK_SIZE,
                 namespace: str | None = None):
        if block_size < 1:
            raise ConfigError(f"option block_size: must be at least 1, got {block_size}")
        self.profile = profile.validate()
        self.name = profile.name
        self.block_size = int(block_size)
        self.namespace = profile.name if namespace is None else str(namespace)
        self.h0 = namespace_seed(self.namespace)
        self._tag = zlib.crc32(profile.name.encode("utf-8"))
        self._pieces: dict[tuple[int, int], np.ndarray] = {}
        self._build_plans()

    # -- plans: all sessions at once, each one independent of the others ------
    def _u(self, stream: int, *cols) -> np.ndarray:
        return _uniform(_key(self.profile.seed, self._tag, stream), *cols)

    def _build_plans(self) -> None:
        p = self.profile
        n_sess, scale = p.sessions, p.length_scale
        sess = np.arange(n_sess, dtype=np.int64)
        lo, hi = p.turns
        n_turns = lo + np.floor(self._u(_TURNS, sess) * (hi - lo + 1)).astype(np.int64)
        self._n_turns = n_turns
        self._offsets = np.concatenate(([0], np.cumsum(n_turns)))
        flat_sess = np.repeat(sess, n_turns)
        flat_turn = np.arange(len(flat_sess), dtype=np.int64) - self._offsets[flat_sess]
        self._inputs = _lengths(self._u(_INPUT_LEN, flat_sess, flat_turn), p.input_tokens, scale)
        self._inputs[self._offsets[:-1]] = _lengths(self._u(_FIRST_LEN, sess),
                                                    p.first_input_tokens, scale)
        self._outputs = _lengths(self._u(_OUTPUT_LEN, flat_sess, flat_turn), p.output_tokens, scale)
        self._parents = flat_turn - 1
        if p.fork_prob > 0:
            self._fork(flat_sess, flat_turn)

        # shared pieces of the first turn: (stream, index) per session, -1 = none;
        # group g owns pieces [g*n, (g+1)*n) of each pool of n per group
        groups = p.groups
        group = sess % groups
        n_sys = p.system_prompts if p.system_tokens[1] else 0
        n_task = p.tasks if p.task_tokens[1] else 0
        self._system = self._pick(_PICK_SYSTEM, sess, n_sys, group)
        self._task = self._pick(_PICK_TASK, sess, n_task, group)
        self._opener = np.full(n_sess, -1, dtype=np.int64)
        if p.openers and p.opener_share > 0:
            w = 1.0 / np.arange(1, p.openers + 1, dtype=np.float64) ** p.opener_skew
            cdf = np.cumsum(w / w.sum())
            which = np.searchsorted(cdf, self._u(_PICK_OPENER, sess), side="right")
            which = np.minimum(which, p.openers - 1) + group * p.openers
            has = self._u(_HAS_OPENER, sess) < p.opener_share
            self._opener[has] = which[has]
        self._piece_len = {
            _SYSTEM: self._piece_lengths(_SYSTEM, groups * p.system_prompts, p.system_tokens),
            _TASK: self._piece_lengths(_TASK, groups * n_task, p.task_tokens),
            _OPENER: self._piece_lengths(_OPENER, groups * p.openers, p.opener_tokens),
        }

    def _pick(self, stream: int, sess: np.ndarray, n: int, group: np.ndarray) -> np.ndarray:
        """Uniform pick among the ``n`` pieces of each session's group."""
        if n == 0:
            return np.full(len(sess), -1, dtype=np.int64)
        local = np.minimum(np.floor(self._u(stream, sess) * n).astype(np.int64), n - 1)
        return local + group * n

    def _piece_lengths(self, stream: int, n: int, rng_range) -> np.ndarray:
        idx = np.arange(n, dtype=np.int64)
        return _lengths(self._u(_PIECE_LEN, np.full(n, stream), idx), rng_range,
                        self.profile.length_scale)

    def _fork(self, flat_sess: np.ndarray, flat_turn: np.ndarray) -> None:
        """Forks: ``fanout`` turns that all retry one earlier turn (not the last)."""
        p = self.profile
        coin = self._u(_FORK, flat_sess, flat_turn).tolist()
        to = self._u(_FORK_TO, flat_sess, flat_turn).tolist()
        fan = self._u(_FORK_FAN, flat_sess, flat_turn).tolist()
        flo, fhi = p.fork_fanout
        parents = self._parents
        for i, n in enumerate(self._n_turns.tolist()):
            base = int(self._offsets[i])
            t = 2
            while t < n:
                f = base + t
                if coin[f] < p.fork_prob:
                    j = min(int(to[f] * (t - 1)), t - 2)
                    k = flo + min(int(fan[f] * (fhi - flo + 1)), fhi - flo)
                    parents[f:base + min(n, t + k)] = j   # the next turn goes on from the last retry
                    t += k
                else:
                    t += 1

    def _prefix(self, i: int) -> tuple[tuple[int, int, int], ...]:
        prefix = []
        for stream, pick in ((_SYSTEM, self._system), (_TASK, self._task),
                             (_OPENER, self._opener)):
            k = int(pick[i])
            if k >= 0 and self._piece_len[stream][k] > 0:
                prefix.append((stream, k, int(self._piece_len[stream][k])))
        return tuple(prefix)

    def plan(self, i: int) -> SessionPlan:
        """Session ``i`` without its tokens."""
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return SessionPlan(self._prefix(i), self._inputs[a:b], self._outputs[a:b],
                           self._parents[a:b])

    # -- tokens --------------------------------------------------------------
    def _piece(self, stream: int, index: int, length: int) -> np.ndarray:
        got = self._pieces.get((stream, index))
        if got is None:
            p = self.profile
            key = _key(p.seed, self._tag, stream, index)
            got = random_tokens(key, length, p.vocab)
            if stream == _SYSTEM and p.system_head_tokens and index >= p.system_prompts:
                # a later group's prompt opens with the head of group 0's prompt
                j = index % p.system_prompts
                first = self._piece(stream, j, int(self._piece_len[stream][j]))
                head = min(p.system_head_tokens, length, len(first))
                got[:head] = first[:head]
            self._pieces[(stream, index)] = got
        return got

    def turn_tokens(self, session: int, turn: int, plan: SessionPlan | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """``(input, output)`` uint32 tokens of one turn (shared prefixes in turn 0)."""
        if plan is None:
            f = int(self._offsets[session]) + turn
            n_in, n_out = int(self._inputs[f]), int(self._outputs[f])
            prefix = self._prefix(session) if turn == 0 else ()
        else:
            n_in, n_out = int(plan.inputs[turn]), int(plan.outputs[turn])
            prefix = plan.prefix if turn == 0 else ()
        toks = random_tokens(_key(self.profile.seed, self._tag, _TOKENS, session, turn),
                             n_in + n_out, self.profile.vocab)
        inp, out = toks[:n_in], toks[n_in:]
        if prefix:
            inp = np.concatenate([self._piece(*piece) for piece in prefix] + [inp])
        return inp, out

    def session(self, i: int) -> Session:
        """Session ``i`` with its tokens (materialised; for tests and exports)."""
        plan = self.plan(i)
        turns = []
        for t in range(len(plan.parents)):
            inp, out = self.turn_tokens(i, t, plan)
            par = int(plan.parents[t])
            turns.append(Turn(inp, out, None if par < 0 else (-1 if par == t - 1 else par)))
        return Session(turns)

    def sessions(self) -> Iterator[Session]:
        for i in range(self.profile.sessions):
            yield self.session(i)

    # -- replay --------------------------------------------------------------
    def requests(self) -> Iterator[Request]:
        """Round-robin replay: turn t of every session before any turn t + 1.

        The same requests as :func:`~prefixbench.workloads.model.replay_turns`
        over the plans, streamed from the flat per-turn arrays: tokens are
        made one turn at a time, and the only per-session state is the block
        ids (and partial last block) of turns a later turn still continues.
        """
        return self._stream()

    def _stream(self) -> Iterator[Request]:
        bs, h0 = self.block_size, self.h0
        offsets, n_turns = self._offsets, self._n_turns
        parents = self._parents
        # last_use[f]: the last turn (session-local) continuing flat turn f, -1 if none
        base = np.repeat(offsets[:-1], n_turns)          # flat index of each turn's turn 0
        child = np.nonzero(parents >= 0)[0]
        last_use = np.full(len(parents), -1, dtype=np.int64)
        np.maximum.at(last_use, base[child] + parents[child], child - base[child])
        del base, child
        state: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        t = 0
        active = np.nonzero(n_turns > 0)[0]
        while len(active):
            flats = (offsets[active] + t).tolist()
            pars = parents[flats].tolist()
            uses = last_use[flats].tolist()
            for i, f, par, use in zip(active.tolist(), flats, pars, uses):
                inp, out = self.turn_tokens(i, t)
                if par < 0:
                    ctx_ids, tail, ctx_tokens, h = _NO_IDS, _NO_TOKENS, 0, h0
                else:
                    pf = f - t + par
                    ctx_ids, tail, ctx_tokens = state[pf]
                    h = int(ctx_ids[-1]) if len(ctx_ids) else h0
                    if last_use[pf] <= t:
                        del state[pf]
                new = np.concatenate((tail, inp, out)) if len(tail) else np.concatenate((inp, out))
                new_ids = chain_tokens(new, bs, h)
                ids = np.concatenate((ctx_ids, new_ids)) if len(ctx_ids) else new_ids
                prompt = ctx_tokens + len(inp)
                if use > t:
                    state[f] = (ids, new[len(new_ids) * bs:], prompt + len(out))
                yield Request(i, t, ids[:prompt // bs], ids, prompt)
            t += 1
            active = active[n_turns[active] > t]

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def metadata(self) -> dict:
        p = self.profile
        return {"workload": self.name, "block_size": self.block_size,
                "namespace": self.namespace, "sessions": p.sessions, "seed": p.seed,
                "length_scale": p.length_scale, "group_sessions": p.group_sessions,
                "system_head_tokens": p.system_head_tokens}


# -- plugin registration ------------------------------------------------------
_OPTIONS = ("preset", "sessions", "scale", "seed", "length_scale", "group_sessions",
            "system_head_tokens", "namespace", "block_size")


def _parse(name: str, value, kind, lo=None, hi=None):
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        raise ConfigError(f"option {name}: {value!r} is not a valid {kind.__name__}")
    try:
        v = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"option {name}: {value!r} is not a valid {kind.__name__}") from None
    if kind is float and not np.isfinite(v):
        raise ConfigError(f"option {name}: must be finite, got {value!r}")
    if lo is not None and v < lo:
        raise ConfigError(f"option {name}: must be at least {lo}, got {v}")
    if hi is not None and v > hi:
        raise ConfigError(f"option {name}: must be at most {hi}, got {v}")
    return v


def make_synthetic(profile: str, **options) -> SyntheticWorkload:
    """Build a synthetic workload from (possibly string) CLI options.

    ``preset=paper`` starts from the paper's size with sharing grown in groups
    (:data:`~prefixbench.workloads.profiles.PAPER_KNOBS`; ``small``, the
    default, is the profile as defined); ``sessions=N`` sets the number of
    sessions, ``scale=X`` multiplies it, ``seed=``, ``length_scale=``,
    ``group_sessions=``, ``system_head_tokens=``, ``namespace=`` and
    ``block_size=`` as in :class:`SyntheticWorkload` and
    :class:`~prefixbench.workloads.profiles.Profile`.
    """
    if profile not in PROFILES:
        raise ConfigError(f"unknown synthetic profile {profile!r}; "
                          f"available: {', '.join(sorted(PROFILES))}")
    for key in options:
        if key not in _OPTIONS:
            raise ConfigError(f"option {key}: not an option of workload {profile} "
                              f"(options: {', '.join(_OPTIONS)})")
    knobs = {}
    sessions = PROFILES[profile].sessions
    preset = options.get("preset", "small")
    if preset not in PRESETS:
        raise ConfigError(f"option preset: {preset!r} is not one of {', '.join(PRESETS)}")
    if preset == "paper":
        knobs.update(paper_knobs(profile))
        sessions = paper_sessions(profile)
    if "sessions" in options:
        sessions = _parse("sessions", options["sessions"], int, 1, 10**9)
    if "scale" in options:
        scale = _parse("scale", options["scale"], float, 1e-9, 1e6)
        sessions = max(1, round(sessions * scale))
    knobs["sessions"] = sessions
    if "seed" in options:
        knobs["seed"] = _parse("seed", options["seed"], int, 0, 2**63 - 1)
    if "length_scale" in options:
        knobs["length_scale"] = _parse("length_scale", options["length_scale"], float, 1e-6, 1000)
    if "group_sessions" in options:
        knobs["group_sessions"] = _parse("group_sessions", options["group_sessions"], int, 0, 10**9)
    if "system_head_tokens" in options:
        knobs["system_head_tokens"] = _parse("system_head_tokens", options["system_head_tokens"],
                                             int, 0, 10**9)
    block_size = DEFAULT_BLOCK_SIZE
    if "block_size" in options:
        block_size = _parse("block_size", options["block_size"], int, 1, 1 << 20)
    namespace = options.get("namespace")
    if namespace is not None and (not isinstance(namespace, (str, int)) or namespace == ""):
        raise ConfigError(f"option namespace: must be a non-empty string, got {namespace!r}")
    return SyntheticWorkload(make_profile(profile, **knobs), block_size=block_size,
                             namespace=namespace)


def _factory(profile: str):
    def factory(**options) -> SyntheticWorkload:
        return make_synthetic(profile, **options)
    factory.__name__ = factory.__qualname__ = f"make_{profile.replace('-', '_')}"
    factory.__doc__ = PROFILES[profile].summary
    return factory


@hookimpl
def prefixbench_register_workloads(register):
    for name, cls in PROFILES.items():
        register(name, _factory(name), summary=cls.summary)
