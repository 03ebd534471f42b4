"""The session/turn model and the request stream the replay consumes.

A workload is a set of sessions; a session is an ordered list of turns; a
turn adds new input tokens and produces output tokens, and may name a parent
turn of the same session (agents fork).  The context of a turn is the whole
sequence of its parent (parent context + parent input + parent output), or
empty for a root turn.

Replay follows the SARP paper's method: sessions in round-robin order, the
current turn of every session before any session's next turn; for each turn
``match(context + input)`` then ``insert(context + input + output)``.
:meth:`Workload.requests` yields the turns in that order, already cut into
chained block IDs, so the harness never touches tokens on its hot path.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from prefixbench.blockids import DEFAULT_BLOCK_SIZE, chain_tokens, namespace_seed


@dataclass
class Turn:
    input_tokens: np.ndarray            # uint32 new tokens of the request
    output_tokens: np.ndarray           # uint32 tokens the model produced
    parent: int | None = -1             # index in the session; -1 = previous turn; None = root


@dataclass
class Session:
    turns: list[Turn] = field(default_factory=list)


@dataclass
class Request:
    """One turn, ready for the index: ids are chained uint64 block IDs."""

    session: int
    turn: int
    match_ids: np.ndarray    # full blocks of context + input
    insert_ids: np.ndarray   # full blocks of context + input + output
    prompt_tokens: int       # tokens in context + input (the hit-rate denominator)


class Workload(abc.ABC):
    """A replayable workload.  Subclasses yield :class:`Request` in replay order."""

    name: str = ""
    block_size: int = DEFAULT_BLOCK_SIZE

    @abc.abstractmethod
    def requests(self) -> Iterator[Request]:
        """Requests in replay order (deterministic for a given configuration)."""

    def __len__(self) -> int:
        """Number of requests (used for progress bars); may be an estimate."""
        return sum(1 for _ in self.requests())

    def metadata(self) -> dict:
        """Parameters that identify this workload, recorded with every result."""
        return {"workload": self.name, "block_size": self.block_size}


def resolve_parents(session: Session) -> np.ndarray:
    """Each turn's parent as an index, ``-1`` for a root turn.

    ``Turn.parent`` of -1 means the previous turn (a root for turn 0) and
    None a root; any other value must name an earlier turn.
    """
    out = np.empty(len(session.turns), dtype=np.int64)
    for t, turn in enumerate(session.turns):
        p = turn.parent
        if p is None:
            out[t] = -1
        elif p == -1:
            out[t] = t - 1
        elif 0 <= p < t:
            out[t] = p
        else:
            raise ValueError(f"turn {t}: parent {p!r} is not an earlier turn of its session")
    return out


_NO_TOKENS = np.empty(0, dtype=np.uint32)
_NO_IDS = np.empty(0, dtype=np.uint64)


def replay_turns(parents: Sequence[np.ndarray],
                 tokens: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
                 block_size: int, h0: int, chain: Callable | None = None) -> Iterator[Request]:
    """Requests of sessions in the paper's replay order, ids chained incrementally.

    ``parents[i][t]`` is turn t's parent in session i (-1: root) and
    ``tokens(i, t)`` its ``(input, output)`` tokens, asked for once, in replay
    order.  A turn hashes only its new tokens (after the partial last block
    of its parent) from the parent's last chained id; the state of a turn is
    kept only until the last turn that continues it.  ``chain`` replaces
    :func:`chain_tokens` (same signature) for another block-hash scheme
    (:class:`~prefixbench.workloads.hashschemes.SchemeChain`).
    """
    chain = chain_tokens if chain is None else chain
    n_sess = len(parents)
    last_use = []
    for par in parents:
        lu = np.full(len(par), -1, dtype=np.int64)
        child = np.nonzero(par >= 0)[0]
        np.maximum.at(lu, par[child], child)
        last_use.append(lu.tolist())
    plist = [p.tolist() for p in parents]
    # per session: turn -> (full-block ids, partial tail tokens, total tokens)
    state: list[dict[int, tuple[np.ndarray, np.ndarray, int]]] = [{} for _ in range(n_sess)]
    active = [i for i in range(n_sess) if len(plist[i])]
    t = 0
    while active:
        for i in active:
            inp, out = tokens(i, t)
            par = plist[i][t]
            if par < 0:
                ctx_ids, tail, ctx_tokens, h = _NO_IDS, _NO_TOKENS, 0, h0
            else:
                ctx_ids, tail, ctx_tokens = state[i][par]
                h = int(ctx_ids[-1]) if len(ctx_ids) else h0
            new = np.concatenate((tail, inp, out)) if len(tail) else np.concatenate((inp, out))
            new_ids = chain(new, block_size, h)
            ids = np.concatenate((ctx_ids, new_ids)) if len(ctx_ids) else new_ids
            prompt = ctx_tokens + len(inp)
            if last_use[i][t] > t:
                state[i][t] = (ids, new[len(new_ids) * block_size:], prompt + len(out))
            if par >= 0 and last_use[i][par] <= t:
                del state[i][par]
            yield Request(i, t, ids[:prompt // block_size], ids, prompt)
        t += 1
        active = [i for i in active if len(plist[i]) > t]


class SessionWorkload(Workload):
    """In-memory sessions (token-id traces, hand-built test cases), replayed
    round-robin with chained ids from ``h_0 = namespace_seed(namespace)``."""

    def __init__(self, sessions: Sequence[Session], *, block_size: int = DEFAULT_BLOCK_SIZE,
                 namespace: str = "", name: str = "sessions", scheme=None):
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.sessions = list(sessions)
        self.block_size = int(block_size)
        self.namespace = namespace
        self.name = name
        self.h0 = namespace_seed(namespace)
        #: a non-pbh64 block-hash scheme (:mod:`~prefixbench.workloads.hashschemes`), or None
        self.scheme = scheme
        self._parents = [resolve_parents(s) for s in self.sessions]

    def requests(self) -> Iterator[Request]:
        def tokens(i: int, t: int):
            turn = self.sessions[i].turns[t]
            return (np.asarray(turn.input_tokens, dtype=np.uint32),
                    np.asarray(turn.output_tokens, dtype=np.uint32))
        if self.scheme is not None:
            from prefixbench.workloads.hashschemes import SchemeChain
            chain = SchemeChain(self.scheme)
            return replay_turns(self._parents, tokens, self.block_size, chain.h0, chain)
        return replay_turns(self._parents, tokens, self.block_size, self.h0)

    def __len__(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def metadata(self) -> dict:
        md = {"workload": self.name, "block_size": self.block_size, "namespace": self.namespace}
        if self.scheme is not None:
            md.update(self.scheme.options())
        return md


# -- KV-event operations (engines' BlockStored / BlockRemoved / AllBlocksCleared) --
@dataclass(slots=True)
class StoreOp:
    """Blocks a worker's KVCache now holds: ``block_hashes`` continue the block
    ``parent`` (None: the chain starts here); ids as the engine published them."""

    worker: int
    block_hashes: np.ndarray            # uint64
    parent: int | None
    token_ids: list | None = None        # as decoded; u32-checked where they are hashed
    block_size: int = 0
    extra_keys: list | None = None
    frame: int = 0                       # capture frame number (1-based)
    ts: float = 0.0
    raw_hashes: list | None = None       # bytes digests when the engine published bytes
    raw_parent: bytes | None = None


@dataclass(slots=True)
class RemoveOp:
    """Blocks a worker evicted."""

    worker: int
    block_hashes: np.ndarray            # uint64
    frame: int = 0
    ts: float = 0.0


@dataclass(slots=True)
class ClearOp:
    """A worker dropped every block."""

    worker: int
    frame: int = 0
    ts: float = 0.0
