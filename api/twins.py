"""The one place that decides between the compiled hot paths and their pure-Python references.

Every Cython module ``_x.pyx`` has a pure-Python reference ``_x_ref.py`` beside
it with the same public names (``__all__``) and the same answers.
:data:`TWINS` lists each pair; it is the one list the loader, ``tox -e
test-pure`` and the twin tests (``tests/test_twins.py``) read.  A module with a
twin gets its implementation one way, ``impl = twins.load("prefixbench.plugins._x")``:

* ``PREFIXBENCH_PURE=1`` in the environment: the reference module, even where
  the ``.so`` files exist (slow, but needs no C compiler; ``tox -e test-pure``
  runs the suite this way);
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
import types

from prefixbench.errors import ConfigError
from prefixbench.units import yes_no

__all__ = ["ENV_VAR", "IMPLEMENTATION", "PURE", "TWINS", "compiled", "is_compiled", "load",
           "pure_requested", "reference"]

#: (compiled module, pure-Python reference module) for every Cython hot path
TWINS = (
    ("prefixbench._blockids", "prefixbench._blockids_ref"),
    ("prefixbench.plugins._radix", "prefixbench.plugins._radix_ref"),
    ("prefixbench.plugins._blockhash", "prefixbench.plugins._blockhash_ref"),
    ("prefixbench.plugins._sarp", "prefixbench.plugins._sarp_ref"),
    ("prefixbench.plugins._segments", "prefixbench.plugins._segments_ref"),
    ("prefixbench.plugins._segment_hash", "prefixbench.plugins._segment_hash_ref"),
    ("prefixbench.plugins._placement", "prefixbench.plugins._placement_ref"),
    ("prefixbench.workloads._kvevents", "prefixbench.workloads._kvevents_ref"),
)

ENV_VAR = "PREFIXBENCH_PURE"


def pure_requested(environ=None) -> bool:
    """True when ``PREFIXBENCH_PURE`` asks for the pure-Python references (1/true/yes/on)."""
    v = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return yes_no(v.strip()) is True


#: True when this process runs the pure-Python references
PURE = pure_requested()
#: "cython" or "pure-python"
IMPLEMENTATION = "pure-python" if PURE else "cython"


def compiled(name: str):
    """The compiled module ``name`` (e.g. ``"prefixbench.plugins._radix"``), or None in
    pure-Python mode; a :class:`ConfigError` line when it is not built.  Modules with a
    twin call :func:`load`, which returns the reference instead of None."""
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


def _reference_name(name: str) -> str:
    for comp, ref in TWINS:
        if comp == name:
            return ref
    raise ValueError(f"{name} has no entry in prefixbench.twins.TWINS (add its "
                     f"(compiled, reference) pair there)")


def reference(name: str):
    """The pure-Python reference module of the compiled module ``name``, in either mode
    (for options that run the references on purpose, and for the twin tests)."""
    return importlib.import_module(_reference_name(name))


class _Unbuilt(types.ModuleType):
    """Stands in for a compiled module that is not built: every name is a function
    raising the one-line :class:`ConfigError`, so importing still works."""

    def __init__(self, name: str, message: str):
        super().__init__(name)
        self._message = message

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        message = self._message

        def unbuilt(*args, **kwargs):
            raise ConfigError(message)
        unbuilt.__name__ = attr
        return unbuilt


def load(name: str, *, defer: bool = False):
    """The implementation of the twin ``name`` (a compiled module listed in :data:`TWINS`):
    the compiled module, or its reference in pure-Python mode.

    A missing build raises the :class:`ConfigError` line here; with ``defer`` (for the
    kernel, whose import must never fail) the error is raised by the first call of any
    of the module's functions instead."""
    ref = _reference_name(name)
    if PURE:
        return importlib.import_module(ref)
    try:
        return compiled(name)
    except ConfigError as e:
        if not defer:
            raise
        return _Unbuilt(name, str(e))


def is_compiled(module) -> bool:
    """True when ``module`` (from :func:`load`) is a built compiled twin."""
    return (isinstance(module, types.ModuleType) and not isinstance(module, _Unbuilt)
            and any(module.__name__ == comp for comp, _ in TWINS))
