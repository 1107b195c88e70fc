"""Attempts at several receivers at once, one thread per ``[[receiver]]``: a send's
fleet (docs/design.md §1.1).

Each receiver's attempt keeps what it has when it runs alone — its own lock, snapshot,
state folder, connection and bandwidth cap — so running them side by side changes
nothing in any of them, and a slow or dead receiver delays only its own attempt: the
others finish and record their state while it waits out its timeouts and retries.

What the attempts of one process do share is handled here:

- **progress**: one terminal line shows every running attempt; each attempt's
  ``TerminalProgress`` writes into its own part of it (:class:`SharedLine`);
- **output**: outcomes come back in config order once every attempt is done, so the
  summary lines keep a stable order whatever finished first;
- **signals**: Python runs signal handlers, and so raises ``KeyboardInterrupt``, on
  the main thread only. The main thread waits here; interrupted, it cancels every
  attempt (no new connection, its connection closed so a blocked read or write returns
  at once), gives them a moment to unwind through their clean-up, and re-raises;
- **crash points** are counted under a lock, and a crash kills the whole process, as
  any crash does; logging is thread-safe.

An attempt at a single receiver runs on the calling thread, exactly as it always has.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TextIO, TypeVar, cast

from sealsync.config import ReceiverEndpoint
from sealsync.errors import SealsyncError
from sealsync.printable import unescaped

T = TypeVar("T")

UNWIND_SECONDS = 10.0
"""How long an interrupted fleet waits for its attempts to clean up before it exits."""
_POLL = 0.2
SEPARATOR = "  |  "


class Cancel:
    """Ends an attempt from another thread: no new connection, and the open connection closed,
    so that a read or write blocked on it returns at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: BaseException | None = None
        """What cancelled the attempt (the main thread's interruption), if anything did."""
        self._lock = threading.Lock()
        self._closers: list[Callable[[], None]] = []

    @property
    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self, reason: BaseException | None = None) -> None:
        with self._lock:
            if not self.event.is_set():
                self.reason = reason
            self.event.set()
            closers = list(self._closers)
        for close in closers:
            _quietly(close)

    @contextmanager
    def closing(self, close: Callable[[], None]) -> Iterator[None]:
        """Calls ``close`` if the attempt is cancelled while the body runs (or already was)."""
        with self._lock:
            self._closers.append(close)
            cancelled = self.event.is_set()
        if cancelled:
            _quietly(close)
        try:
            yield
        finally:
            with self._lock:
                self._closers.remove(close)


def _quietly(close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:  # closing a connection that already failed
        pass


@dataclass
class Lane:
    """What one receiver's attempt gets from the fleet."""

    receiver: ReceiverEndpoint
    cancel: Cancel = field(default_factory=Cancel)
    progress: TextIO | None = None
    """Where its progress line goes (None: stderr, as for an attempt on its own)."""


@dataclass
class Outcome(Generic[T]):
    """One receiver's result, or the expected failure that ended its attempt."""

    receiver: ReceiverEndpoint
    result: T | None = None
    error: SealsyncError | None = None


def run_fleet(
    receivers: Sequence[ReceiverEndpoint],
    run_one: Callable[[Lane], T],
    *,
    stream: TextIO | None = None,
    unwind: float = UNWIND_SECONDS,
) -> list[Outcome[T]]:
    """``run_one(lane)`` for every receiver, concurrently; outcomes in ``receivers`` order.

    A SealsyncError ends only its own receiver's attempt (its outcome carries it); any
    other exception is a bug and is raised here once every attempt has ended.
    ``stream`` is the terminal the shared progress line is drawn on (default stderr).
    """
    if len(receivers) == 1:
        lane = Lane(receivers[0])
        try:
            return [Outcome(lane.receiver, result=run_one(lane))]
        except SealsyncError as e:
            return [Outcome(lane.receiver, error=e)]
    line = SharedLine(unescaped(stream if stream is not None else sys.stderr))  # draws \r
    lanes = [Lane(r, progress=line.slot(i)) for i, r in enumerate(receivers)]
    outcomes: list[Outcome[T]] = [Outcome(r) for r in receivers]
    bugs: list[BaseException | None] = [None] * len(lanes)
    # Ended attempts are told by events, not Thread.join: a join that a signal interrupts
    # marks its thread as stopped on Python 3.11, and the unwinding wait would skip it.
    done = [threading.Event() for _ in lanes]

    def work(i: int) -> None:
        try:
            outcomes[i].result = run_one(lanes[i])
        except SealsyncError as e:
            outcomes[i].error = e
        except BaseException as e:  # raised on the main thread once all are done
            bugs[i] = e
        finally:
            done[i].set()

    for i, r in enumerate(receivers):
        name = f"sealsync-attempt-{r.name}"
        threading.Thread(target=work, args=(i,), name=name, daemon=True).start()
    try:
        for ended in done:
            while not ended.wait(_POLL):  # a bounded wait lets a signal through at once
                pass
    except BaseException as exc:
        for lane in lanes:
            lane.cancel.set(exc)
        deadline = time.monotonic() + unwind
        for ended in done:
            ended.wait(max(0.0, deadline - time.monotonic()))
        raise
    finally:
        line.clear()
    for bug in bugs:
        if bug is not None:
            raise bug
    return outcomes


class SharedLine:
    """One terminal line for several progress displays, each in a slot of its own.

    A ``TerminalProgress`` draws by writing ``"\\r" + text`` and erases by writing
    ``"\\r" + spaces + "\\r"``; a slot keeps the text after the last ``\\r`` as its part,
    and the line shows the parts in slot order, redrawn under one lock.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._parts: dict[int, str] = {}
        self._width = 0
        self._lock = threading.Lock()

    def slot(self, key: int) -> TextIO:
        return cast(TextIO, _Slot(self, key))

    def isatty(self) -> bool:
        return bool(self.stream.isatty())

    def update(self, key: int, text: str) -> None:
        with self._lock:
            if text:
                self._parts[key] = text
            else:
                self._parts.pop(key, None)
            self._draw()

    def clear(self) -> None:
        with self._lock:
            self._parts.clear()
            self._draw()

    def _draw(self) -> None:
        line = SEPARATOR.join(self._parts[k] for k in sorted(self._parts))
        if not line and not self._width:
            return
        tail = "\r" if not line else ""
        self.stream.write("\r" + line.ljust(self._width) + tail)
        self.stream.flush()
        self._width = len(line)


class _Slot:
    """The file-like object one attempt's progress display writes to."""

    def __init__(self, line: SharedLine, key: int) -> None:
        self._line = line
        self._key = key

    def isatty(self) -> bool:
        return self._line.isatty()

    def write(self, text: str) -> int:
        self._line.update(self._key, text.rsplit("\r", 1)[-1].rstrip())
        return len(text)

    def flush(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # anything else a TextIO has: the terminal's
        return getattr(self._line.stream, name)
