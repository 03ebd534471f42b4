"""The IndexStrategy contract: what every prefix index provides.

Block IDs travel as ``uint64`` NumPy arrays; block metadata as ``uint8`` arrays
of shape ``(n_blocks, meta_size)`` (default 16 bytes per block).

Semantics every strategy keeps (the property tests check them against the
``radix`` oracle):

* ``match(ids)`` returns the longest prefix of ``ids`` whose blocks are all
  indexed, with their metadata in order.  A strategy may return a *shorter*
  prefix (e.g. SARP under a retrieval budget) but never a longer one, and
  never a block whose ID it did not verify.
* ``insert(ids, metas)`` registers a processed sequence.  A block that is
  already indexed keeps the metadata it was first inserted with (the cached
  KVCache block already exists; re-processing it creates no new copy).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from prefixbench.engines.base import SegmentStore
from prefixbench.harness.errors import ConfigError

META_SIZE = 16
EMPTY_IDS = np.empty(0, dtype=np.uint64)


@dataclass
class Match:
    n_blocks: int
    metas: np.ndarray  # uint8, shape (n_blocks, meta_size)

    @classmethod
    def empty(cls, meta_size: int = META_SIZE) -> "Match":
        return cls(0, np.empty((0, meta_size), dtype=np.uint8))


@dataclass(frozen=True)
class Option:
    """One configurable strategy parameter with its default and valid range."""

    default: object
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None

    def parse(self, name: str, value):
        kind = type(self.default)
        try:
            if kind is bool and isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                v = value.lower() in ("1", "true", "yes", "on")
            else:
                v = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"option {name}: {value!r} is not a valid {kind.__name__}") from None
        if self.choices is not None and v not in self.choices:
            raise ConfigError(f"option {name}: {v!r} is not one of {', '.join(map(str, self.choices))}")
        if self.min is not None and v < self.min:
            raise ConfigError(f"option {name}: {v!r} is below the minimum {self.min}")
        if self.max is not None and v > self.max:
            raise ConfigError(f"option {name}: {v!r} is above the maximum {self.max}")
        return v


def parse_options(owner: str, spec: dict[str, Option], given: dict | None) -> dict:
    """Defaults from ``spec`` overridden by ``given``; unknown keys are errors."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(spec))
    if unknown:
        known = ", ".join(sorted(spec)) or "none"
        raise ConfigError(f"option {unknown[0]}: not an option of {owner} (options: {known})")
    return {k: (opt.parse(k, given[k]) if k in given else opt.default) for k, opt in spec.items()}


class IndexStrategy(abc.ABC):
    """A prefix index.  One instance serves many request threads."""

    #: plugin name, e.g. "dram-blockhash"
    name: ClassVar[str] = ""
    #: True if the strategy keeps its index in a SegmentStore
    needs_store: ClassVar[bool] = False
    #: True if the strategy always returns the exact longest prefix
    exact: ClassVar[bool] = False
    #: configurable parameters
    options: ClassVar[dict[str, Option]] = {}

    def __init__(self, store: SegmentStore | None = None, options: dict | None = None,
                 meta_size: int = META_SIZE):
        if self.needs_store and store is None:
            raise ConfigError(f"strategy {self.name} needs an engine (--engine)")
        self.store = store
        self.meta_size = meta_size
        self.opts = parse_options(f"strategy {self.name}", self.options, options)

    @abc.abstractmethod
    def match(self, block_ids: np.ndarray) -> Match: ...

    @abc.abstractmethod
    def insert(self, block_ids: np.ndarray, metas: np.ndarray) -> None: ...

    def stats(self) -> dict:
        """Counters: entries, in-memory bytes, logical store reads, ..."""
        return {}

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
