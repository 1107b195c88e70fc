"""``sealsync serve``: a minimal host process for the receiver plugin (docs/design.md §7).

Runs the service until SIGTERM or SIGINT (or ``stop_event``, for callers that
host it in a thread), then stops it cleanly: sessions are closed, loaders stop,
and whatever was not applied is replayed by recovery at the next start.

A server's log is read later, often by a program: every line carries an ISO 8601
timestamp, the default level shows the service's start, one line per finished
round and every problem, and ``log_file`` (``[receiver]``) appends the same lines
to a file that logrotate may move away (it is reopened when that happens).
"""

from __future__ import annotations

import datetime as dt
import logging
import logging.handlers
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from receiver import umask
from receiver.lock import ReceiverLocked, holder
from receiver.openfiles import raise_open_files_limit
from receiver.service import ReceiverService
from sealsync.config import ReceiverConfig
from sealsync.errors import EXIT_OK, ConfigError

log = logging.getLogger(f"sealsync.{__name__}")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
LOG_FORMAT = "%(asctime)s sealsync %(levelname)s: %(message)s"


class IsoFormatter(logging.Formatter):
    """``2026-11-23T12:05:01.123+00:00 sealsync INFO: ...``: local time with its offset."""

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        stamp = dt.datetime.fromtimestamp(record.created).astimezone()
        return stamp.isoformat(timespec="milliseconds")


@contextmanager
def server_logging(verbose: int, quiet: bool) -> Iterator[None]:
    """A server's level and line format on the ``sealsync`` logger's handlers, for the
    ``with`` body (then restored: a test runner hosts several commands in one process).

    INFO by default (the start, each round, each problem), DEBUG with ``-v``
    (paramiko's handshakes and disconnects among them), errors only with ``-q``.
    """
    root = logging.getLogger("sealsync")
    level, formats = root.level, [(h, h.formatter) for h in root.handlers]
    root.setLevel(logging.ERROR if quiet else logging.INFO if verbose == 0 else logging.DEBUG)
    for handler, _ in formats:
        handler.setFormatter(IsoFormatter())
    try:
        yield
    finally:
        root.setLevel(level)
        for handler, formatter in formats:
            handler.setFormatter(formatter)


def open_log_file(config: ReceiverConfig) -> logging.Handler | None:
    """The ``log_file`` handler, attached to the ``sealsync`` logger; None without one."""
    if config.log_file is None:
        return None
    try:
        handler = logging.handlers.WatchedFileHandler(config.log_file, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{config.source}: [receiver] log_file: cannot open {config.log_file}: "
            f"{exc.strerror or exc}"
        ) from None
    handler.setFormatter(IsoFormatter())
    logging.getLogger("sealsync").addHandler(handler)
    return handler


_Handler = Callable[[int, FrameType | None], Any] | int | None
"""What ``signal.signal`` returns and takes: a function, SIG_DFL or SIG_IGN, or None."""


def serve(config: ReceiverConfig, stop_event: threading.Event | None = None) -> int:
    """Host the receiver until a signal or ``stop_event``; returns the exit code.

    Signal handlers are installed only in the main thread (Python allows no other)
    and restored on return; so is the process umask, which the receiver tightens while
    it runs (receiver/umask.py). Start-up failures (port in use, bad host key, storage
    locked by another receiver) raise SealsyncError for the CLI to print as one line.
    """
    stop = stop_event if stop_event is not None else threading.Event()
    running = holder(config.schema_dir, config.data_dirs)
    if running is not None:  # before the service reads anything: one line, nothing else
        raise ReceiverLocked(running.message())
    umask.tighten()  # before the log file and the service make anything
    try:
        return _serve(config, stop)
    finally:
        umask.release()


def _serve(config: ReceiverConfig, stop: threading.Event) -> int:
    """:func:`serve` once the storage is known free and the umask is the receiver's."""
    previous: dict[signal.Signals, _Handler] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    file_handler = open_log_file(config)
    raise_open_files_limit(config.max_sessions)
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            previous[sig] = signal.signal(sig, on_signal)
    try:
        with ReceiverService(config):  # logs "receiver listening on HOST:PORT"
            while not stop.wait(1.0):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if file_handler is not None:
            logging.getLogger("sealsync").removeHandler(file_handler)
            file_handler.close()
    return EXIT_OK
