"""``sealsync load --follow``: a loader that stays up and commits what the receiver loads
as it arrives.

A one-shot ``sealsync load`` spends most of a small run starting: a JVM, Spark, the
Delta log. A follower starts them once and keeps one Spark session. It watches the
receiver's own record of what it loaded and deleted (the logs it appends to,
:func:`sealsync.received.activity_marks`: one listing and a stat per sender, every
``poll`` seconds), and when they change it waits ``window`` seconds more, so that the
files of a round arriving together make one commit, then runs exactly what a
one-shot run does (:func:`.run.run_load` with the kept session): the same locks,
exactly-once commits, held senders, ``last_run.json`` and metrics. ``window`` also
bounds the commit rate: at most one commit per window while loads keep arriving.

Each run records its *lag*: from the receiver's first change it took in (the time
that log was appended to) to the end of its commit (``lag_seconds`` in
``last_run.json``, ``sealsync_loader_last_attempt_lag_seconds``). ``follow.json`` in the
state dir names the follower (pid, start, window) for ``sealsync status``.

SIGTERM and SIGINT stop it: a run in progress finishes (its commit is one Delta
version either way), then it exits 0. A run another loader holds the lock for
(a one-shot ``--full``, say) is simply tried again at the next change or poll; a run
that fails is recorded like any other and tried again after ``retry`` seconds.
With TTL rules a quiet receiver still gets a run every ``ttl_every`` seconds, which
removes the rows expired since (:mod:`.expiry`; nothing expired: nothing committed).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealsync import durable, received
from sealsync.config import LoaderConfig
from sealsync.errors import LockHeld, SealsyncError
from spark_loader.report import LoadReport

log = logging.getLogger(f"sealsync.{__name__}")

FOLLOW_FILE = "follow.json"
DEFAULT_WINDOW = 1.0
DEFAULT_POLL = 0.5
DEFAULT_RETRY = 30.0
#: With TTL rules (``[loader.ttl]``), a run at least this often while the receiver is
#: quiet: rows leave the table as they expire, not at the next load.
DEFAULT_TTL_EVERY = 60.0

Marks = dict[str, tuple[int, int]]


@dataclass
class FollowOptions:
    master: str | None = None
    window: float = DEFAULT_WINDOW
    poll: float = DEFAULT_POLL
    retry: float = DEFAULT_RETRY
    ttl_every: float = DEFAULT_TTL_EVERY
    verbose: bool = False


def marks(config: LoaderConfig) -> Marks:
    """The receiver's activity marks over every data dir the loader reads."""
    out: Marks = {}
    for data_dir in config.receiver_data_dirs:
        out.update(received.activity_marks(data_dir))
    return out


def first_change(before: Marks, now: Marks) -> float | None:
    """When the earliest of the logs that changed since ``before`` was last written
    (epoch seconds); None if none changed."""
    changed = [mtime for path, (size, mtime) in now.items() if before.get(path) != (size, mtime)]
    return min(changed) / 1e9 if changed else None


class Follower:
    """One following loader: :meth:`run` until :meth:`stop` (or a signal)."""

    def __init__(
        self,
        config: LoaderConfig,
        options: FollowOptions,
        load: Callable[..., LoadReport],
        spark: Any,
        said: Callable[[LoadReport], None] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.options = options
        self.load = load
        self.spark = spark
        self.said = said
        self.progress = progress
        self.state_dir = Path(config.state_dir)
        self._stop = threading.Event()
        self.runs = 0

    def stop(self, *_: object) -> None:
        self._stop.set()

    def run(self) -> None:
        """Load once now (whatever arrived while nobody followed), then each time the
        receiver's logs change, until stopped."""
        self._announce()
        try:
            seen = marks(self.config)
            due = True  # catch up at start
            pending: float | None = None  # the first change not committed yet
            next_try = 0.0
            next_ttl = time.monotonic() + self.options.ttl_every
            while not self._stop.is_set():
                now = marks(self.config)
                change = first_change(seen, now)
                if change is not None:
                    pending = change if pending is None else min(pending, change)
                    due = True
                    if not self._stop.wait(self.options.window):
                        now = marks(self.config)  # what the window added joins this run
                seen = now
                if self.config.ttl and time.monotonic() >= next_ttl:
                    due = True  # rows expire while nothing arrives
                if due and time.monotonic() >= next_try and not self._stop.is_set():
                    delay = self._once(pending)
                    next_ttl = time.monotonic() + self.options.ttl_every
                    if delay is None:
                        due, pending = False, None
                    else:
                        next_try = time.monotonic() + delay
                self._stop.wait(self.options.poll)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.state_dir / FOLLOW_FILE)

    def _once(self, changes_since: float | None) -> float | None:
        """One run; None when done, else how long to wait before trying again (another
        loader holds the lock: a window; the run failed: ``retry``)."""
        try:
            report = self.load(
                self.config,
                master=self.options.master,
                spark=self.spark,
                verbose=self.options.verbose,
                changes_since=changes_since,
                progress=self.progress,
            )
        except LockHeld as exc:
            log.info("follow: %s; trying again", exc)
            return self.options.window
        except SealsyncError as exc:
            log.warning("follow: the run failed: %s; trying again in %ss", exc, self.options.retry)
            return self.options.retry
        self.runs += 1
        if self.said is not None:
            self.said(report)
        return None if report.ok else self.options.retry  # a skipped file is tried again

    def _announce(self) -> None:
        body = {
            "pid": os.getpid(),
            "started": time.time(),
            "window": self.options.window,
            "master": self.options.master or self.config.master,
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        durable.atomic_write(self.state_dir / FOLLOW_FILE, json.dumps(body) + "\n")


def read_follower(state_dir: Path) -> dict[str, Any] | None:
    """The follower ``follow.json`` names, if its process is alive (a follower killed
    with -9 leaves the file; a dead pid is no follower)."""
    try:
        doc = json.loads((Path(state_dir) / FOLLOW_FILE).read_text(encoding="utf-8"))
        pid = int(doc["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return dict(doc)


def install_stop_signals(follower: Follower) -> None:
    """SIGTERM and SIGINT end the follower after the run in progress."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, follower.stop)
