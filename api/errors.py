"""Errors a user can cause.  The CLI prints each as one line and exits non-zero."""
from __future__ import annotations


class PrefixbenchError(Exception):
    """Base of every error that reaches the user as one clear line."""

    exit_code = 2


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
