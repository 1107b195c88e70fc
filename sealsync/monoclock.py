"""paramiko's timeouts on the monotonic clock.

paramiko measures the timeouts of its waits (a channel's read and its send window,
the banner, the handshake, authentication, keepalive intervals) with ``time.time()``,
the wall clock. When that clock steps (NTP correcting a drifted edge node, a virtual
machine resumed, ``date -s``), every wait in progress ends at once on a forward step
(a spurious timeout: the session drops) or is stretched by the step on a backward
one (a dead link noticed hours late, keepalives stop). Durations belong on the
monotonic clock, which never steps.

:func:`use_monotonic_clock` gives each of those paramiko modules a ``time`` of its
own whose ``time()`` is ``time.monotonic()``; everything else (``sleep``, ...) is the
``time`` module's. Those modules use ``time.time()`` for durations only, never for a
timestamp shown or stored, so nothing else changes. The rest of sealsync measures
its timeouts and rates with ``time.monotonic()`` itself; wall-clock time is kept for
timestamps (history lines, log lines, file ages against mtimes).
"""

from __future__ import annotations

import importlib
import threading
import time
from types import ModuleType
from typing import Any

PARAMIKO_MODULES = (
    "paramiko.auth_handler",
    "paramiko.buffered_pipe",
    "paramiko.channel",
    "paramiko.packet",
    "paramiko.transport",
)
"""The paramiko modules that time their waits with ``time.time()``."""


class _MonotonicTime(ModuleType):
    """The ``time`` module, except that ``time()`` is ``monotonic()``."""

    def __init__(self) -> None:
        super().__init__("time", "time.time() is time.monotonic() (sealsync.monoclock)")

    @staticmethod
    def time() -> float:
        return time.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


MONOTONIC_TIME = _MonotonicTime()
_lock = threading.Lock()


def use_monotonic_clock() -> None:
    """Point paramiko's timeouts at the monotonic clock (idempotent, thread-safe)."""
    with _lock:
        for name in PARAMIKO_MODULES:
            module = importlib.import_module(name)
            if getattr(module, "time", None) is time:
                module.time = MONOTONIC_TIME  # type: ignore[attr-defined]
