"""Errors a user can cause.  The CLI prints each as one line and exits non-zero."""
from __future__ import annotations


_CONTROL = {c: f"\\x{c:02x}" for c in range(32)}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x7F: "\\x7f"})


class PrefixbenchError(Exception):
    """Base of every error that reaches the user as one clear line.

    Its text never spans lines: control characters that reach a message from
    user input (a path or an id holding a newline or a carriage return) are
    shown escaped, as ``\\n`` or ``\\x1b``."""

    exit_code = 2

    def __str__(self) -> str:
        return super().__str__().translate(_CONTROL)


class ConfigError(PrefixbenchError, ValueError):
    """An option or configuration value is out of range or malformed."""


class UnknownPluginError(PrefixbenchError, LookupError):
    """A strategy, engine or workload name that no plugin provides."""


class DuplicatePluginError(PrefixbenchError):
    """Two plugins tried to register the same name for the same kind."""


class MissingDependencyError(PrefixbenchError, ImportError):
    """An optional engine's binding is not installed; names the extra."""


class TraceFormatError(PrefixbenchError):
    """A trace file has a malformed line; names the file and line."""


class StoreError(PrefixbenchError, OSError):
    """A store path cannot be opened, read or written."""
