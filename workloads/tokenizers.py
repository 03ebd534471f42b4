"""Tokenizer plugins: text -> uint32 token ids for the text-trace readers.

A tokenizer is anything with ``name``, ``vocab_size`` and
``encode(text) -> np.ndarray[uint32]`` (:class:`Tokenizer`).  Plugins register
a factory under the ``tokenizer`` kind with the
``prefixbench_register_tokenizers(register)`` hook; ``factory(**options)``
returns the tokenizer.  Two are built in:

``simple`` (default) - deterministic, offline, no downloads.  Text is cut
GPT-2 style into pieces, each one token: a special marker ``<|name|>``; an
optional space plus a word of up to 6 letters; a longer word in chunks of 4
letters (the first with the space) until the rest fits in 6; an optional
space plus up to three digits; symbol runs by the same rule as words; runs
of up to 16 whitespace characters.  Common short words are whole tokens and
long rare ones a few characters each, as in BPE vocabularies.  A piece's id
is pbh64 (:mod:`prefixbench.blockids`) of its UTF-8 bytes from a
fixed seed, modulo ``vocab_size`` (default 32,000) - the same in every
process and on every machine.  Measured on the 1,167 OASST messages in
``../shared/data/oasst1-en100-trees`` (634,360 characters of message text):
163,526 tokens, 0.258 tokens per character = 3.88 characters per token,
about what a 32k-vocabulary BPE (Llama/Mistral) gives on English (GPT-4's
100k vocabulary gives nearer 4.2).  On the chit-chat text: 0.263 tokens per
character; on the SWE-agent histories (code, shell output): 0.314.  Ids are
not a real vocabulary: only the *counts* and the *sharing* (equal text ->
equal ids) are meant to be realistic, which is all a prefix index sees.

``hf`` - a local HuggingFace ``tokenizer.json`` loaded with the optional
``tokenizers`` package (``pip install tokenizers``; not a dependency of
prefixbench): ``hf`` with option ``path=/path/to/tokenizer.json``.  Nothing is
downloaded.  Special tokens are not added (the chat template of
:mod:`prefixbench.workloads.text` supplies the markers as text).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from prefixbench.blockids import SEED_PREFIX, pbh64
from prefixbench.errors import ConfigError, MissingDependencyError
from prefixbench.hookspecs import hookimpl

DEFAULT_VOCAB_SIZE = 32000


@runtime_checkable
class Tokenizer(Protocol):
    """What the text readers need from a tokenizer."""

    name: str
    vocab_size: int

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as a uint32 array (no special tokens added)."""


# GPT-2-like pre-tokenizer, with the long-word split built in: markers, words of
# up to 6 letters whole, longer words in 4-letter chunks (until the rest fits
# in 6), digit groups, symbol runs (the same rule), whitespace runs; every
# match is one token
_PIECES = re.compile(r" ?<\|[A-Za-z0-9_]{1,32}\|>"
                     r"| ?[^\W\d_]{1,6}(?![^\W\d_])| ?[^\W\d_]{1,4}"
                     r"| ?\d{1,3}"
                     r"| ?[^\s\w]{1,6}(?![^\s\w])| ?[^\s\w]{1,4}|_{1,6}"
                     r"|\s{1,16}(?!\S)|\s{1,16}")
_PIECE_SEED = pbh64(SEED_PREFIX, [0x746F6B656E], 5)   # "token"


def _piece_id(piece: str, vocab: int) -> int:
    data = piece.encode("utf-8")
    padded = data + b"\0" * (-len(data) % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    return pbh64(_PIECE_SEED, words, len(data)) % vocab


class SimpleTokenizer:
    """The built-in offline tokenizer (see the module docstring)."""

    name = "simple"

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE):
        self.vocab_size = int(vocab_size)
        self._cache: dict[str, int] = {}

    def encode(self, text: str) -> np.ndarray:
        pieces = _PIECES.findall(text)
        cache = self._cache
        ids = list(map(cache.get, pieces))
        if None in ids:
            v = self.vocab_size
            for i, x in enumerate(ids):
                if x is None:
                    x = cache.get(pieces[i])
                    if x is None:
                        x = _piece_id(pieces[i], v)
                        if len(cache) < 1 << 21:
                            cache[pieces[i]] = x
                    ids[i] = x
        return np.array(ids, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"SimpleTokenizer(vocab_size={self.vocab_size})"


class HFTokenizer:
    """A local ``tokenizer.json`` through the ``tokenizers`` package."""

    name = "hf"

    def __init__(self, path: str | Path):
        self.path = str(path)
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"tokenizer hf: {self.path}: no such file")
        try:
            text = p.read_text(encoding="utf-8")
            spec = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            msg = (f"{e.msg} (line {e.lineno} column {e.colno})" if isinstance(e, json.JSONDecodeError)
                   else (getattr(e, "strerror", None) or e))
            raise ConfigError(f"{self.path}: not a valid tokenizer.json: {msg}") from None
        if not isinstance(spec, dict) or "model" not in spec:
            raise ConfigError(f"{self.path}: not a valid tokenizer.json: "
                              "expected a JSON object with a 'model' field")
        try:
            from tokenizers import Tokenizer as _HF
        except ImportError:
            raise MissingDependencyError(
                "tokenizer hf needs the 'tokenizers' package: pip install tokenizers") from None
        try:
            self._tok = _HF.from_str(text)
        except Exception as e:  # noqa: BLE001 - the Rust side raises a plain Exception
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"{self.path}: not a valid tokenizer.json: {first}") from None
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> np.ndarray:
        return np.array(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"HFTokenizer({self.path!r})"


def _check_options(name: str, options: dict, allowed: tuple[str, ...]) -> None:
    for key in options:
        if key not in allowed:
            raise ConfigError(f"option {key}: not an option of tokenizer {name} "
                              f"(options: {', '.join(allowed) or 'none'})")


def simple(**options) -> SimpleTokenizer:
    """Built-in offline tokenizer: ~4 characters per token, hashed ids (vocab_size=32000)."""
    _check_options("simple", options, ("vocab_size",))
    v = options.get("vocab_size", DEFAULT_VOCAB_SIZE)
    if isinstance(v, (bool, float)):
        raise ConfigError(f"option vocab_size: {v!r} is not a valid int")
    try:
        v = int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"option vocab_size: {v!r} is not a valid int") from None
    if not 2 <= v <= 1 << 32:
        raise ConfigError(f"option vocab_size: must be in [2, {1 << 32}], got {v}")
    return SimpleTokenizer(v)


def hf(**options) -> HFTokenizer:
    """A local HuggingFace tokenizer.json (needs: pip install tokenizers)."""
    _check_options("hf", options, ("path",))
    path = options.get("path")
    if not path:
        raise ConfigError("option path: tokenizer hf needs the path of a local tokenizer.json "
                          "(workload option tokenizer_file=PATH)")
    return HFTokenizer(path)


def make_tokenizer(name: str = "simple", **options) -> Tokenizer:
    """A registered tokenizer by name (unknown names list the available ones)."""
    from prefixbench.registry import get_registry
    return get_registry().get("tokenizer", name).factory(**options)


@hookimpl
def prefixbench_register_tokenizers(register):
    register("simple", simple)
    register("hf", hf)
