"""Progress bars for long work (tqdm: rate and ETA), silenced by ``--quiet``."""
from __future__ import annotations

import sys

from tqdm import tqdm


def progress(total: int | None, desc: str, quiet: bool = False, unit: str = "req"):
    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, file=sys.stderr,
                dynamic_ncols=True, mininterval=0.25, smoothing=0.1)
