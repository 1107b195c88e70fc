"""Expected failures and the exit codes they map to (docs/design.md §7).

Every failure a user can cause or meet in operation is one of these; the CLI turns
it into one line on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LOCKED = 75


class SealsyncError(Exception):
    """A failure with a message fit for one stderr line and a process exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(SealsyncError):
    """The configuration file is unreadable, malformed or has unknown/missing keys."""

    exit_code = EXIT_USAGE


class LockHeld(SealsyncError):
    """Another sender already holds ``sync.lock`` for this receiver."""

    exit_code = EXIT_LOCKED


class BadName(SealsyncError):
    """A file name (from disk or the wire) that must never reach a path join."""


class FormatError(SealsyncError):
    """A data file that is incomplete, corrupt or not of the format its name claims."""
