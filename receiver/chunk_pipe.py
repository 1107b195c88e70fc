"""A paramiko channel buffer that keeps the received packets instead of copying them.

paramiko's ``BufferedPipe`` appends every packet to one ``array`` and, on ``recv``,
copies the requested bytes out twice (a slice, then ``tobytes``) and shifts the rest
of the array down. With a file streaming in, that is four copies of every byte
under the GIL, which the transport thread decrypting the next packets waits for:
profiled at a third of the receiver's GIL time in a 1 GiB transfer. This pipe keeps
the packets as they came: the transport (``sealsync.ssh_packets``) hands it each
packet's data as a view of the decrypted packet (:meth:`ChunkPipe.feed_view`), and a
read gives a large packet back as it is, so that a CHUNK frame filling a packet
reaches MD5 and the file without a copy; small packets are joined.

It replaces a channel's ``in_buffer`` from the transport thread while that thread
handles the subsystem request, so no packet can be fed concurrently.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import paramiko
from paramiko.buffered_pipe import BufferedPipe, PipeTimeout
from paramiko.common import cMSG_CHANNEL_WINDOW_ADJUST
from paramiko.message import Message

from sealsync import ssh_packets

if TYPE_CHECKING:

    class _Pipe(BufferedPipe[bytes]):
        """paramiko's ``BufferedPipe`` with the state its ``__init__`` sets, which this
        subclass shares and paramiko's type stubs leave out."""

        _lock: threading.Lock
        _cv: threading.Condition
        _event: threading.Event | None
        _closed: bool

else:
    _Pipe = BufferedPipe  # not subscriptable at run time


ALONE = 16 * 1024
"""A buffered packet at least this long is returned by itself, as it is (a view);
shorter ones are joined up to the size asked for."""


class ChunkPipe(_Pipe):
    """``BufferedPipe`` with the same locking and semantics, over a deque of packets.

    ``read`` returns ``bytes`` or, for a packet fed as a view, a ``memoryview`` of it:
    either is a bytes-like object, which is all the session's reads need."""

    def __init__(self) -> None:
        super().__init__()
        self._chunks: deque[bytes | memoryview] = deque()
        self._size = 0

    def _buffer_frombytes(self, data: bytes) -> None:  # called by feed() under the lock
        if data:
            self._chunks.append(bytes(data))
            self._size += len(data)

    def feed_view(self, data: memoryview) -> None:
        """``feed`` for a view of a received packet, kept without a copy (the packet's
        plaintext stays alive as long as the view does)."""
        with self._lock:
            if self._event is not None:
                self._event.set()
            if data:
                self._chunks.append(data)
                self._size += len(data)
            self._cv.notify_all()

    def set_event(self, event: threading.Event) -> None:
        with self._lock:
            self._event = event
            if self._closed or self._size:
                event.set()
            else:
                event.clear()

    def read_ready(self) -> bool:
        with self._lock:
            return self._size > 0

    def read(self, nbytes: int, timeout: float | None = None) -> bytes:
        with self._lock:
            if not self._size:
                if self._closed:
                    return b""
                if timeout == 0.0:
                    raise PipeTimeout()
                while not self._size and not self._closed:
                    then = time.monotonic()  # a timeout: a wall-clock step must not end it
                    self._cv.wait(timeout)
                    if timeout is not None:
                        timeout -= time.monotonic() - then
                        if timeout <= 0.0:
                            raise PipeTimeout()
                if not self._size:
                    return b""
            out = self._take(nbytes)
            if not self._size and self._event is not None and not self._closed:
                self._event.clear()
            return out

    def _take(self, nbytes: int) -> bytes:
        chunks = self._chunks
        first = chunks[0]
        if len(first) >= nbytes or len(first) >= ALONE:  # one piece, as it is
            if len(first) <= nbytes:
                out = chunks.popleft()
            else:
                view = first if isinstance(first, memoryview) else memoryview(first)
                out, chunks[0] = view[:nbytes], view[nbytes:]
            self._size -= len(out)
            return cast(bytes, out)  # bytes-like: see the class
        parts: list[bytes | memoryview] = []
        want = nbytes
        while chunks and want > 0 and (not parts or len(chunks[0]) < ALONE):
            piece = chunks[0]
            if len(piece) <= want:
                parts.append(chunks.popleft())
                want -= len(piece)
            else:
                view = piece if isinstance(piece, memoryview) else memoryview(piece)
                parts.append(view[:want])
                chunks[0] = view[want:]
                want = 0
        joined = b"".join(parts)
        self._size -= len(joined)
        return joined

    def empty(self) -> bytes:
        with self._lock:
            out = b"".join(self._chunks)
            self._chunks.clear()
            self._size = 0
            if self._event is not None and not self._closed:
                self._event.clear()
            return out

    def __len__(self) -> int:
        return self._size


def install(channel: paramiko.Channel) -> None:
    """Give ``channel`` a ChunkPipe, carrying over anything already buffered, and
    sends that hand the transport views (:func:`sealsync.ssh_packets.fast_sends`).

    Call it on the transport thread (a ``ServerInterface`` callback): that thread is
    the only one that feeds the buffer, so nothing arrives during the swap.
    """
    old = channel.in_buffer
    if isinstance(old, ChunkPipe):
        return
    pipe = ChunkPipe()
    pending = old.empty()
    if pending:
        pipe.feed(pending)
    if cast("_Pipe", old)._closed:  # every BufferedPipe has it
        pipe.close()
    channel.in_buffer = pipe
    channel.recv = functools.partial(_recv_keeping, channel)  # type: ignore[method-assign]
    ssh_packets.fast_sends(channel)  # the session's answers, without paramiko's copies


def _recv_keeping(channel: paramiko.Channel, nbytes: int) -> bytes:
    """``Channel.recv``, except that bytes already taken from the buffer are returned
    even when the window adjustment that follows cannot be sent (the link died).

    paramiko's ``recv`` takes the bytes, then sends a window adjustment; on a dead
    transport that raises and the bytes are lost, and with them everything still
    buffered behind them: a cut link lost up to a window (8 MiB) of a file the
    sender had already sent, which a resumed upload would then send again. Here the
    session reads on until the buffer is drained, then gets b"" (closed)."""
    try:
        out: bytes = channel.in_buffer.read(nbytes, channel.timeout)
    except PipeTimeout:
        raise TimeoutError() from None
    try:
        ack = cast(Any, channel)._check_add_window(len(out))  # not in paramiko's stubs
        if ack > 0:
            m = Message()
            m.add_byte(cMSG_CHANNEL_WINDOW_ADJUST)
            m.add_int(channel.remote_chanid)
            m.add_int(ack)
            channel.transport._send_user_message(m)  # type: ignore[union-attr]
    except (OSError, EOFError, paramiko.SSHException):
        if not out:
            raise
    return out
