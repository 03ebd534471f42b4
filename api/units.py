"""Sizes as people write them (64MiB, 1G, 4096), and yes/no words.

Digits are ASCII only and the number is read exactly (no float rounding, so
``99999999999999999999`` is that many bytes); a fraction of a byte rounds
down.  A size beyond 2**63 - 1 bytes fits no file, cache or C ``int64`` the
engines take, so it is refused in one line like any other bad size.
"""
from __future__ import annotations

import re
from fractions import Fraction

from prefixbench.errors import ConfigError

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?i?b?)?\s*", re.I | re.A)
_MULT = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10,
         "m": 1000**2, "mb": 1000**2, "mib": 1 << 20, "mi": 1 << 20,
         "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "gi": 1 << 30,
         "t": 1000**4, "tb": 1000**4, "tib": 1 << 40, "ti": 1 << 40}
#: the largest size accepted (a signed 64-bit byte count)
MAX_SIZE = (1 << 63) - 1
#: longer texts are not sizes (and are not echoed whole in the error line)
_MAX_TEXT = 64


def parse_size(option: str, text) -> int:
    """'64MiB', '1G', '4096' -> bytes; errors name the option."""
    s = str(text)
    m = _SIZE.fullmatch(s) if len(s) <= _MAX_TEXT else None
    shown = repr(s) if len(s) <= _MAX_TEXT else repr(s[:_MAX_TEXT]) + "..."
    if not m or m.group(2) and m.group(2).lower() not in _MULT:
        raise ConfigError(f"option {option}: {shown} is not a size (e.g. 4096, 64MiB, 1G)")
    n = int(Fraction(m.group(1)) * _MULT[(m.group(2) or "").lower()])
    if n > MAX_SIZE:
        raise ConfigError(f"option {option}: {shown} is too large (at most {MAX_SIZE} bytes)")
    return n


def int_in_range(name: str, value, lo: int, hi: int) -> int:
    """An integer option ``name`` within ``[lo, hi]``, or one ConfigError line naming it
    (booleans and floats are refused rather than truncated)."""
    if isinstance(value, (bool, float)):
        raise ConfigError(f"option {name}: {value!r} is not a valid int")
    try:
        x = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"option {name}: {value!r} is not a valid int") from None
    if not lo <= x <= hi:
        raise ConfigError(f"option {name}: must be in [{lo}, {hi}], got {x}")
    return x


_YES = frozenset(("1", "true", "yes", "on"))
_NO = frozenset(("0", "false", "no", "off"))


def yes_no(text) -> bool | None:
    """1/true/yes/on -> True, 0/false/no/off -> False (any case); None for anything
    else, which each caller refuses in its own words."""
    word = str(text).lower()
    return True if word in _YES else False if word in _NO else None
