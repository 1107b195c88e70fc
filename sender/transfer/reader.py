"""Frames from the receiver, read on their own thread.

Pipelining (docs/design.md §5.2) means the sender keeps streaming files while the receiver's
verdicts for earlier ones arrive; a reader thread takes them off the channel as soon
as they come, so the SSH window never fills with unread answers and the main thread
only blocks when it has nothing else to do.
"""

from __future__ import annotations

import queue
import threading
import time

import paramiko

from sealsync.protocol import (
    AnyMessage,
    ConnectionClosed,
    Error,
    ProtocolError,
    Stream,
    receive,
)
from sender.transfer.errors import ConnectionLost

REPLY_TIMEOUT = 300.0
"""Longest wait for an answer the sender needs before it gives the connection up."""


class _Patient:
    """A stream whose ``recv`` outlasts the socket timeout until the reader is stopped.

    The channel's timeout bounds blocked *sends*; for receiving, a quiet receiver is
    normal (it has nothing to answer while a large file streams), and a timeout inside
    ``recv_exact`` would lose the bytes of a half-read frame.
    """

    def __init__(self, stream: Stream, stopped: threading.Event) -> None:
        self._stream = stream
        self._stopped = stopped

    def recv(self, n: int) -> bytes:
        while True:
            try:
                return self._stream.recv(n)
            except TimeoutError:
                if self._stopped.is_set():
                    return b""

    def sendall(self, data: bytes | memoryview) -> None:  # pragma: no cover - unused
        self._stream.sendall(data)


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def lost(exc: BaseException) -> ConnectionLost:
    """The exception the round sees for a failure of the link itself."""
    if isinstance(exc, ConnectionClosed):
        return ConnectionLost(f"receiver closed the connection ({exc})")
    if isinstance(exc, TimeoutError):
        return ConnectionLost("connection to the receiver stalled (timed out)")
    return ConnectionLost(f"connection to the receiver failed: {exc or type(exc).__name__}")


LINK_ERRORS = (ConnectionClosed, OSError, EOFError, paramiko.SSHException)


class FrameReader:
    """Pumps validated frames from ``stream`` into a queue until the stream ends."""

    def __init__(self, stream: Stream, reply_timeout: float = REPLY_TIMEOUT) -> None:
        self.reply_timeout = reply_timeout
        self._queue: queue.SimpleQueue[AnyMessage | _Failed] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._failure: BaseException | None = None
        self._stream = _Patient(stream, self._stopped)
        self._thread = threading.Thread(target=self._run, name="sealsync-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._queue.put(receive(self._stream))
        except BaseException as exc:  # handed to the main thread, raised there
            self._queue.put(_Failed(exc))

    def _unwrap(self, item: AnyMessage | _Failed) -> AnyMessage:
        if isinstance(item, _Failed):
            self._failure = item.exc
            self._raise()
        return item  # type: ignore[return-value]

    def _raise(self) -> None:
        exc = self._failure
        assert exc is not None
        if isinstance(exc, ProtocolError) and not isinstance(exc, ConnectionClosed):
            raise ProtocolError(f"receiver sent a bad frame: {exc}", exc.code) from None
        if isinstance(exc, LINK_ERRORS):
            raise lost(exc) from None
        raise exc

    def get(self) -> AnyMessage:
        """The next frame; ConnectionLost if the link broke or nothing came in time."""
        msg = self.wait(self.reply_timeout)
        if msg is None:
            raise ConnectionLost(f"no answer from the receiver for {self.reply_timeout:g} s")
        return msg

    def wait(self, timeout: float) -> AnyMessage | None:
        """The next frame, or None if none came within ``timeout`` seconds."""
        if self._failure is not None:
            self._raise()
        try:
            item = self._queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        return self._unwrap(item)

    def poll(self) -> AnyMessage | None:
        """The next frame if one is already here, else None."""
        if self._failure is not None:
            self._raise()
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return None
        return self._unwrap(item)

    def closing_error(self, timeout: float) -> Error | None:
        """The ERROR the receiver sent before it closed the stream, if it sent one.

        For a send that failed because the receiver ended the session: its ERROR
        frame says why, and arrives just before the end of the stream. Frames still
        queued ahead of it are dropped (the session is over; unlogged verdicts only
        cost a resend).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if isinstance(item, _Failed):
                self._failure = item.exc
                return None
            if isinstance(item, Error):
                return item

    def stop(self, join: float = 1.0) -> None:
        """Let the thread end; it does once the stream is closed or its timeout ticks."""
        self._stopped.set()
        self._thread.join(join)
