"""The one place that decides between the compiled hot paths and their pure-Python references.

Every module with a Cython twin asks :func:`compiled` for it; :data:`TWINS`
lists each compiled module beside its pure-Python reference, and is the one
list the loader, ``tox -e test-pure`` and the twin tests read:

* ``PREFIXBENCH_PURE=1`` in the environment: always ``None`` - the caller
  uses its pure-Python reference, even where the ``.so`` files exist (slow,
  but needs no C compiler; ``tox -e test-pure`` runs the suite this way);
* otherwise the compiled module, or - when it is not built - one clear
  :class:`ConfigError` line naming it: a missing build never silently runs
  at pure-Python speed.

:data:`IMPLEMENTATION` (``"cython"`` or ``"pure-python"``) says which is in
use; every run records it in its pyperf metadata as ``prefixbench_impl``.
The choice is made once per process, when this module is first imported.
"""
from __future__ import annotations

import importlib
import os

from prefixbench.errors import ConfigError

__all__ = ["ENV_VAR", "IMPLEMENTATION", "PURE", "TWINS", "compiled", "pure_requested"]

#: (compiled module, pure-Python reference module) for every Cython hot path
TWINS = (
    ("prefixbench._blockids", "prefixbench.blockids"),
    ("prefixbench.plugins._radix", "prefixbench.plugins.radix"),
    ("prefixbench.plugins._blockhash", "prefixbench.plugins.blockhash"),
    ("prefixbench.plugins._sarp", "prefixbench.plugins.sarp"),
    ("prefixbench.plugins._segments", "prefixbench.plugins.segments"),
    ("prefixbench.plugins._segment_hash", "prefixbench.plugins.segment_hash"),
    ("prefixbench.plugins._placement", "prefixbench.plugins._placement_ref"),
)

ENV_VAR = "PREFIXBENCH_PURE"


def pure_requested(environ=None) -> bool:
    """True when ``PREFIXBENCH_PURE`` asks for the pure-Python references (1/true/yes/on)."""
    v = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return v.strip().lower() in ("1", "true", "yes", "on")


#: True when this process runs the pure-Python references
PURE = pure_requested()
#: "cython" or "pure-python"
IMPLEMENTATION = "pure-python" if PURE else "cython"


def compiled(name: str):
    """The compiled module ``name`` (e.g. ``"prefixbench.plugins._radix"``), or None in
    pure-Python mode; a :class:`ConfigError` line when it is not built."""
    if PURE:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if e.name not in (None, name):     # the module exists but one of ITS imports failed
            raise
        msg = str(getattr(e, "msg", "") or e)
        why = "is not built" if msg.startswith("No module named") else \
            f"cannot be imported ({msg.splitlines()[0] if msg else type(e).__name__})"
        raise ConfigError(
            f"compiled module {name} {why}: reinstall with a C compiler, or set "
            f"{ENV_VAR}=1 to use the pure-Python references") from None
