"""A session's connection as frames: reads under the stall rule, writes that never block long.

The session reads whole frames from a :class:`~sealsync.protocol.ReadBuffer` over the
connection; while a frame or a file stream is incomplete the reads are watched by a
:class:`~receiver.limits.StallWindow` (a sender that trickles bytes holds a session
as surely as a silent one), and between frames only the connection's own idle
timeout applies. Losing the connection, whichever way it is lost, is one exception
(:class:`~sealsync.protocol.ConnectionClosed`), so the session ends it one way.
"""

from __future__ import annotations

import select
import socket
import time
from typing import cast

from receiver.limits import StallWindow
from sealsync.printable import printable
from sealsync.protocol import (
    MAX_TEXT,
    AnyMessage,
    ConnectionClosed,
    Error,
    ReadBuffer,
    Stream,
    receive,
    send,
)

ERROR_REPLY_TIMEOUT = 5.0
"""Longest wait to send a closing ERROR: a peer that reads nothing must not hold it."""


class Stalled(TimeoutError):
    """The sender stopped making progress inside a frame or a file stream."""


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` made fit for a protocol string field (one line, bounded, control
    characters escaped: it may quote a device id from a file) for the peer."""
    text = printable(" ".join(str(text).replace("\x00", " ").split()))
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "..."


class WatchedStream:
    """The connection as the session reads it, with the stall rule of ``StallWindow``.

    Unarmed reads wait as long as the connection's own (idle) timeout allows; armed
    reads wait at most what is left of the current window, and a window without
    enough bytes raises :class:`Stalled`.
    """

    def __init__(self, channel: Stream, window: StallWindow | None) -> None:
        self._channel = channel
        self.window = window
        gettimeout = getattr(channel, "gettimeout", None)
        self._idle: float | None = gettimeout() if gettimeout is not None else None

    def recv(self, n: int) -> bytes:
        window = self.window
        if window is None:
            return self._channel.recv(n)
        if not window.armed:
            data = self._channel.recv(n)
            if data:
                window.arm()  # a frame has begun: the rest of it must keep coming
            return data
        self._set_timeout(window.wait_limit())
        started = time.monotonic()
        try:
            data = self._channel.recv(n)
        except TimeoutError:
            window.record(time.monotonic() - started, 0)
            raise Stalled(window.describe()) from None
        finally:
            self._set_timeout(self._idle)
        if not data:
            return data  # the peer closed: that is not a stall
        if window.record(time.monotonic() - started, len(data)):
            raise Stalled(window.describe())
        return data

    def _set_timeout(self, seconds: float | None) -> None:
        settimeout = getattr(self._channel, "settimeout", None)
        if settimeout is not None:
            settimeout(seconds)

    def sendall(self, data: bytes | memoryview) -> None:
        self._channel.sendall(data)


class SessionChannel:
    """One session's connection: frames in (watched for stalls), frames out."""

    def __init__(self, channel: Stream, stall: StallWindow | None) -> None:
        self.channel = channel
        self._stall = stall
        self._in = ReadBuffer(WatchedStream(channel, stall))  # frames parsed from large reads

    def recv(self, in_stream: bool) -> AnyMessage:
        """The next frame; ``in_stream``: a file stream is open, so waiting is watched
        even between its frames."""
        if self._stall is not None:
            if not in_stream and not self._in.pending():
                self._stall.disarm()  # between frames, outside a file: the idle timeout
            else:
                self._stall.arm()
        try:
            return receive(self._in)
        except TimeoutError:
            raise
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def send(self, msg: AnyMessage) -> None:
        try:
            send(self.channel, msg)
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def send_frames(self, frames: bytes) -> None:
        """Write frames :func:`~sealsync.protocol.encode` made, in one write."""
        try:
            self.channel.sendall(frames)
        except (OSError, EOFError) as exc:
            raise ConnectionClosed(f"connection lost: {exc}") from None

    def send_error(self, code: str, message: str) -> None:
        """The closing ERROR, sent if the peer takes it within ``ERROR_REPLY_TIMEOUT``."""
        try:
            settimeout = getattr(self.channel, "settimeout", None)
            if settimeout is not None:
                settimeout(ERROR_REPLY_TIMEOUT)
            send(self.channel, Error(clean_text(code, 64) or "error", clean_text(message)))
        except Exception:  # the peer may be gone already
            pass

    def data_waiting(self) -> bool:
        """True if the sender's next bytes are already here (no need to flush verdicts yet)."""
        if self._in.pending():
            return True
        ready = getattr(self.channel, "recv_ready", None)
        if ready is not None:  # a paramiko Channel
            return bool(ready())
        readable, _, _ = select.select([cast(socket.socket, self.channel)], [], [], 0)  # a socket
        return bool(readable)
