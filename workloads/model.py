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
from typing import Iterator

import numpy as np

from prefixbench.harness.blockids import DEFAULT_BLOCK_SIZE


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
