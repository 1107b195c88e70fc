"""``sealsync serve``: a minimal host process for the receiver plugin (docs/design.md §7).

Runs the service until SIGTERM or SIGINT (or ``stop_event``, for callers that
host it in a thread), then stops it cleanly: sessions are closed, loaders stop,
and whatever was not applied is replayed by recovery at the next start.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from receiver.service import ReceiverService
from sealsync.config import ReceiverConfig
from sealsync.errors import EXIT_OK

log = logging.getLogger(f"sealsync.{__name__}")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], Any] | int | None
"""What ``signal.signal`` returns and takes: a function, SIG_DFL or SIG_IGN, or None."""


def serve(config: ReceiverConfig, stop_event: threading.Event | None = None) -> int:
    """Host the receiver until a signal or ``stop_event``; returns the exit code.

    Signal handlers are installed only in the main thread (Python allows no other)
    and restored on return. Start-up failures (port in use, bad host key) raise
    SealsyncError for the CLI to print as one line.
    """
    stop = stop_event if stop_event is not None else threading.Event()
    previous: dict[signal.Signals, _Handler] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            previous[sig] = signal.signal(sig, on_signal)
    try:
        with ReceiverService(config) as service:
            host, port = service.address
            log.info("sealsync receiver serving on %s:%d", host, port)
            while not stop.wait(1.0):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
