"""Expected failures and the exit codes they map to (docs/design.md §7).

Every failure a user can cause or meet in operation is one of these; the CLI turns
it into one line on stderr and its exit code, never a traceback.

Each error also has a ``kind``: the word the sender's round history and metrics
count failures by (``sealsync_sender_failures_total{kind=...}``), so that an alert
can tell a receiver that is down from a key it refuses or a full disk here.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69  # sysexits' EX_UNAVAILABLE: a service this run needs is missing
EXIT_LOCKED = 75
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, the shell's code for a Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143, the shell's code for a SIGTERM

#: Every exit code any command returns, and what it means: the one table that
#: ``sealsync --help``, README.md and docs/operations.md show.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "failure: something was not synced or loaded (the reason is on stderr)",
    EXIT_USAGE: "usage or configuration error",
    EXIT_UNAVAILABLE: "load: no usable Java for Spark (none found, JAVA_HOME wrong, too old)",
    EXIT_LOCKED: "another run holds the lock (send to that receiver, load, serve on that storage)",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C (SIGINT): stopped cleanly, the next run recovers",
    EXIT_TERMINATED: "stopped by SIGTERM, as cleanly as by Ctrl-C",
}


class SealsyncError(Exception):
    """A failure with a message fit for one stderr line and a process exit code."""

    exit_code = EXIT_FAILURE
    kind: ClassVar[str] = "error"

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(SealsyncError):
    """The configuration file is unreadable, malformed or has unknown/missing keys."""

    exit_code = EXIT_USAGE
    kind = "config"


class LockHeld(SealsyncError):
    """Another sender already holds ``sync.lock`` for this receiver."""

    exit_code = EXIT_LOCKED
    kind = "busy"


class LocalIOError(SealsyncError):
    """This machine's own files failed us: permission, full disk, a file where a folder
    must be. The message names the operation and the path (``describe_os_error``)."""

    kind = "local"


class BadName(SealsyncError):
    """A file name (from disk or the wire) that must never reach a path join."""


class FormatError(SealsyncError):
    """A data file that is incomplete, corrupt or not of the format its name claims."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt.

    A KeyboardInterrupt subclass so that every path that stops cleanly on Ctrl-C
    (a round's clean-up in ``finally``, the attempt recorded as interrupted) does the
    same on SIGTERM without knowing about it; only the exit code differs.
    """

    exit_code = EXIT_TERMINATED


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


def interrupt_name(exc: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def raise_terminated(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop the main thread the way Ctrl-C would."""
    raise Terminated()


def describe_os_error(exc: OSError, operation: str) -> str:
    """``cannot <operation> <path>: <reason>``, the one line for a failed file operation.

    The path comes from the exception (a rename or link names both ends); the
    operation from the caller, who knows what it was doing.
    """
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return f"cannot {operation}: {reason}"
    where = os.fsdecode(exc.filename)
    if exc.filename2 is not None:
        where += f" to {os.fsdecode(exc.filename2)}"
    return f"cannot {operation} {where}: {reason}"


@contextmanager
def naming_os_errors(operation: str) -> Iterator[None]:
    """Turn a failed file operation in the body into a one-line ``LocalIOError``.

    Only errors that name a file are turned: a socket's OSError (no file name) is a
    network failure that the transfer code classifies itself.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        raise LocalIOError(describe_os_error(exc, operation)) from exc


_LISTEN_FIXES = {
    errno.EADDRINUSE: "address already in use (another program, or another receiver, listens "
    "there): stop it, or change {key}",
    errno.EADDRNOTAVAIL: "no interface of this host has that address: fix {key}",
    errno.EACCES: "permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE): "
    "choose a port above 1023 in {key}",
}


def listen_error(what: str, key: str, exc: OSError) -> SealsyncError:
    """``<what>: <reason and fix>`` for a listening socket that could not be opened.

    The usual causes have one fix each, named with the config ``key`` that sets the
    address; socket.create_server's own text ("while attempting to bind on address
    ...") repeats the address, so the errno's is used instead.
    """
    if exc.errno in _LISTEN_FIXES:
        return SealsyncError(f"{what}: {_LISTEN_FIXES[exc.errno].format(key=key)}")
    return SealsyncError(f"{what}: {os.strerror(exc.errno) if exc.errno else exc}")
