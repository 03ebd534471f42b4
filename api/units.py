"""Sizes as people write them (64MiB, 1G, 4096)."""
from __future__ import annotations

import re

from prefixbench.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.I)
_MULT = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "ki": 1 << 10,
         "m": 1000**2, "mb": 1000**2, "mib": 1 << 20, "mi": 1 << 20,
         "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "gi": 1 << 30,
         "t": 1000**4, "tb": 1000**4, "tib": 1 << 40, "ti": 1 << 40}


def parse_size(option: str, text) -> int:
    """'64MiB', '1G', '4096' -> bytes; errors name the option."""
    m = _SIZE.match(str(text))
    if not m or m.group(2) and m.group(2).lower() not in _MULT:
        raise ConfigError(f"option {option}: {text!r} is not a size (e.g. 4096, 64MiB, 1G)")
    return int(float(m.group(1)) * _MULT[(m.group(2) or "").lower()])
