"""SSH channel data in one pass each way, instead of paramiko's copies (both ends use it).

paramiko builds an outgoing data packet through a ``Message`` (the data copied into a
``BytesIO`` and out again, into the packet, the packet's tail sliced off for the cipher
and the ciphertext joined to the length) and takes an incoming one apart the same way
(the reads joined, the ciphertext sliced, the payload sliced, copied into a ``Message``
and out of it). Profiled on a bulk transfer, those copies and the interpreter's work
per packet were a sizeable part of each end's CPU beside MD5 and AES itself.

With AES-GCM, which both ends negotiate (``SSH_PREFERRED_CIPHERS``), this module does
it in one pass: the data is copied once into a reused plaintext buffer and encrypted
into a reused ciphertext buffer that goes to the socket as it is; a received packet
is read into a reused buffer and decrypted, and its data goes on to the channel's
buffer as a view of the plaintext (:meth:`_Feeder.feed_view`), which the session
hashes and writes from. Everything else (key exchange, other ciphers, every other
message) stays paramiko's own code.

The fast path uses paramiko's ``Packetizer`` state by its private names; if a
paramiko release renames any of it, :func:`fast_path_ready` is False and paramiko's
own path runs (``tests/test_ssh_packets.py`` fails, so that a slower transfer does
not go unnoticed). On the fast path a packet longer than OpenSSH's
``PACKET_MAX_SIZE`` is refused before its bytes are read.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
import sys
from collections import deque
from typing import Any, Protocol, cast

import paramiko
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from paramiko.channel import Channel
from paramiko.common import MSG_CHANNEL_DATA
from paramiko.packet import Packetizer as _Packetizer

MAX_PACKET_LENGTH = 256 * 1024
"""The longest ``packet_length`` read (OpenSSH's ``PACKET_MAX_SIZE``): a peer that
claims more is refused before its bytes are read. Both ends advertise a channel
maximum packet below it (``SSH_MAX_PACKET_SIZE``)."""
TAG = 16
"""AES-GCM's authentication tag, after each packet's ciphertext."""
_DATA_HEAD = struct.Struct(">BBII")
"""padding_length, SSH_MSG_CHANNEL_DATA, recipient channel, data length."""
POOLED = MAX_PACKET_LENGTH // 2
"""A received packet at least this long is decrypted into a reused buffer
(:meth:`Packetizer._free_buffer`); a shorter one into bytes of its own size, so that a
small packet a channel buffer keeps never holds a buffer twice its size."""
POOL = 32
"""Reused plaintext buffers at most (8 MiB): what the session holds at once."""
_REFCOUNTS = not hasattr(sys, "_is_gil_enabled") or sys._is_gil_enabled()
"""Whether ``sys.getrefcount`` tells a free buffer (not so without the GIL)."""
_RANDOM_POOL = 4096
"""Bytes of padding drawn from ``os.urandom`` at a time (up to 19 a packet)."""

_STATE = (
    "block_engine_out",
    "block_engine_in",
    "aead_out",
    "aead_in",
    "iv_out",
    "iv_in",
    "write_lock",
    "sequence_number_out",
    "sequence_number_in",
    "sent_bytes",
    "sent_packets",
    "received_bytes",
    "received_packets",
    "received_bytes_overflow",
    "received_packets_overflow",
    "need_rekey",
    "compress_engine_out",
    "compress_engine_in",
    "dump_packets",
    "remainder",
    "socket",
    "closed",
    "mac_size_in",
    "block_size_out",
)
"""The ``Packetizer`` state the fast path reads and keeps up to date."""


def _private(name: str) -> str:
    return f"_Packetizer__{name}"


def fast_path_ready(packetizer: _Packetizer) -> bool:
    """True if ``packetizer`` holds every piece of state the fast path needs, and the
    ``cryptography`` release encrypts and decrypts into a given buffer."""
    state = vars(packetizer)
    return (
        all(_private(name) in state for name in _STATE)
        and hasattr(packetizer, "_inc_iv_counter")
        and hasattr(AESGCM, "encrypt_into")
        and hasattr(AESGCM, "decrypt_into")
    )


class ChannelData(paramiko.Message):
    """An outgoing ``SSH_MSG_CHANNEL_DATA``: the channel and a view of the data, which
    :class:`Packetizer` encrypts from where it lies. ``asbytes`` gives the message
    as paramiko's own path sends it (another cipher)."""

    def __init__(self, channel: int, data: memoryview) -> None:
        super().__init__()
        self.channel = channel
        self.data = data

    def asbytes(self) -> bytes:
        head = _DATA_HEAD.pack(0, MSG_CHANNEL_DATA, self.channel, len(self.data))[1:]
        return head + self.data.tobytes()


class ReceivedData(paramiko.Message):
    """An incoming ``SSH_MSG_CHANNEL_DATA`` over its decrypted packet, without a copy.

    The transport reads the channel number from it (``get_int``); :meth:`view` is the
    data as a view of the packet, and ``get_binary`` a copy of it, for a channel
    buffer that takes bytes only."""

    def __init__(self, plain: bytes | bytearray, end: int) -> None:
        super().__init__(bytes(plain[2:6]))  # the recipient channel
        self._plain = plain
        self._end = end

    def view(self) -> memoryview:
        if self._end < 10:
            raise paramiko.SSHException("channel data shorter than its length field")
        (length,) = struct.unpack_from(">I", self._plain, 6)
        if 10 + length > self._end:
            raise paramiko.SSHException("channel data longer than its packet")
        return memoryview(self._plain)[10 : 10 + length]

    def get_binary(self) -> bytes:
        return self.view().tobytes()


class Packetizer(_Packetizer):
    """paramiko's packetizer, with channel data sent and received in one pass under an
    AEAD cipher (AES-GCM). Any other message, cipher or state is paramiko's path."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self._ready = fast_path_ready(self)
        self._plain = bytearray()
        self._sealed = bytearray()
        self._incoming = bytearray()
        self._buffers: deque[bytearray] = deque()
        self._pool = b""
        self._pool_at = 0

    @property
    def _paramiko(self) -> Any:
        """This packetizer, for paramiko's own private methods (not in its stubs)."""
        return self

    def _get(self, name: str) -> Any:
        return self.__dict__[_private(name)]

    def _set(self, name: str, value: object) -> None:
        self.__dict__[_private(name)] = value

    def _padding(self, n: int) -> bytes:
        """``n`` random bytes of padding (as paramiko pads under a cipher)."""
        if self._pool_at + n > len(self._pool):
            self._pool, self._pool_at = os.urandom(_RANDOM_POOL), 0
        at = self._pool_at
        self._pool_at = at + n
        return self._pool[at : at + n]

    # ------------------------------------------------------------------ sending

    def send_message(self, data: paramiko.Message) -> None:
        if (
            not isinstance(data, ChannelData)
            or not self._ready
            or not self._get("aead_out")
            or self._get("compress_engine_out") is not None
            or self._get("dump_packets")
        ):
            super().send_message(data)
            return
        n = len(data.data)
        block = self._get("block_size_out")
        payload = 9 + n  # message number, channel, length, data
        padding = 3 + block - ((payload + 4) % block)
        length = 1 + payload + padding  # packet_length: what is encrypted
        with self._get("write_lock"):
            plain = self._plain
            if len(plain) < length:
                plain.extend(bytes(length - len(plain)))
                self._sealed.extend(bytes(4 + length + TAG - len(self._sealed)))
            sealed = memoryview(self._sealed)
            _DATA_HEAD.pack_into(plain, 0, padding, MSG_CHANNEL_DATA, data.channel, n)
            plain[10 : 10 + n] = data.data
            plain[10 + n : length] = self._padding(padding)
            head = length.to_bytes(4, "big")
            sealed[:4] = head
            iv = self._get("iv_out")
            self._get("block_engine_out").encrypt_into(
                iv, memoryview(plain)[:length], head, sealed[4 : 4 + length + TAG]
            )
            self._set("iv_out", self._paramiko._inc_iv_counter(iv))
            self._count_sent(4 + length + TAG)
            self.write_all(sealed[: 4 + length + TAG])
            self._rekey_if_due_out()

    def _count_sent(self, size: int) -> None:
        seq = (self._get("sequence_number_out") + 1) & 0xFFFFFFFF
        if seq == 0 and not self._paramiko._initial_kex_done:
            raise paramiko.SSHException("Sequence number rolled over during initial kex!")
        self._set("sequence_number_out", seq)
        self._set("sent_bytes", self._get("sent_bytes") + size)
        self._set("sent_packets", self._get("sent_packets") + 1)

    def _rekey_now(self) -> None:
        """Start a key exchange, as paramiko's packetizer does once either direction
        reaches its limit: the overflow counters count from here."""
        self._set("received_bytes_overflow", 0)
        self._set("received_packets_overflow", 0)
        self._paramiko._trigger_rekey()

    def _rekey_if_due_out(self) -> None:
        if self._get("need_rekey"):
            return
        if (
            self._get("sent_packets") >= self.REKEY_PACKETS
            or self._get("sent_bytes") >= self.REKEY_BYTES
        ):
            self._rekey_now()

    # ---------------------------------------------------------------- receiving

    def read_message(self) -> tuple[int, paramiko.Message]:
        if (
            not self._ready
            or not self._get("aead_in")
            or self._get("compress_engine_in") is not None
            or self._get("dump_packets")
            or self._get("remainder")
        ):
            return _Packetizer.read_message(self)
        head = self.read_all(4, check_rekey=True)
        length = int.from_bytes(head, "big")
        if not 16 <= length <= MAX_PACKET_LENGTH or length % 16:
            raise paramiko.SSHException(f"invalid packet length {length}")
        size = length + self._get("mac_size_in")
        if len(self._incoming) < size:
            self._incoming.extend(bytes(size - len(self._incoming)))
        sealed = memoryview(self._incoming)[:size]
        self._read_into(sealed)
        iv = self._get("iv_in")
        engine = self._get("block_engine_in")
        plain: bytes | bytearray
        if length >= POOLED:
            plain = self._free_buffer()
            engine.decrypt_into(iv, sealed, head, memoryview(plain)[:length])
        else:
            plain = engine.decrypt(iv, sealed, head)
        self._set("iv_in", self._paramiko._inc_iv_counter(iv))
        padding = plain[0]
        end = length - padding
        if padding < 4 or end < 2:
            raise paramiko.SSHException("invalid packet padding")
        seq = self._count_received(4 + size)
        kind = plain[1]
        msg = (
            ReceivedData(plain, end)
            if kind == MSG_CHANNEL_DATA
            else paramiko.Message(bytes(plain[2:end]))
        )
        msg.seqno = seq
        return kind, msg

    def _free_buffer(self) -> bytearray:
        """A buffer for a large packet's plaintext that nothing refers to any more (no
        view of an earlier packet's data, which the session may still be hashing or
        writing): reused, the pages of a fresh one each packet cost page faults that
        were a tenth of the receiver's CPU in a bulk transfer. Beyond ``POOL`` in
        use, a new one that is dropped after use."""
        pool = self._buffers
        for _ in range(len(pool)):
            # only the pool and this call refer to it: free (CPython's count; the
            # views of the session hold the buffer, and the message holds it too)
            if sys.getrefcount(pool[0]) == 2:
                pool.rotate(-1)
                return pool[-1]
            pool.rotate(-1)
        buffer = bytearray(MAX_PACKET_LENGTH)
        if len(pool) < POOL and _REFCOUNTS:
            pool.append(buffer)
        return buffer

    def _read_into(self, view: memoryview) -> None:
        """Fill ``view`` from the socket, waiting as paramiko's ``read_all`` does."""
        sock = self._get("socket")
        got = 0
        while got < len(view):
            if self.handshake_timed_out():
                raise EOFError()
            try:
                n = sock.recv_into(view[got:])
            except TimeoutError:
                if self._get("closed"):
                    raise EOFError() from None
                self._paramiko._check_keepalive()
                continue
            except BlockingIOError:
                if self._get("closed"):
                    raise EOFError() from None
                continue
            except OSError:
                if self._get("closed"):
                    raise EOFError() from None
                raise
            if not n:
                raise EOFError()
            got += n

    def _count_received(self, size: int) -> int:
        seq: int = self._get("sequence_number_in")
        nxt = (seq + 1) & 0xFFFFFFFF
        if nxt == 0 and not self._paramiko._initial_kex_done:
            raise paramiko.SSHException("Sequence number rolled over during initial kex!")
        self._set("sequence_number_in", nxt)
        self._set("received_bytes", self._get("received_bytes") + size)
        self._set("received_packets", self._get("received_packets") + 1)
        if self._get("need_rekey"):
            over_bytes = self._get("received_bytes_overflow") + size
            over_packets = self._get("received_packets_overflow") + 1
            self._set("received_bytes_overflow", over_bytes)
            self._set("received_packets_overflow", over_packets)
            if (
                over_packets >= self.REKEY_PACKETS_OVERFLOW_MAX
                or over_bytes >= self.REKEY_BYTES_OVERFLOW_MAX
            ):
                raise paramiko.SSHException("Remote transport is ignoring rekey requests")
        elif (
            self._get("received_packets") >= self.REKEY_PACKETS
            or self._get("received_bytes") >= self.REKEY_BYTES
        ):
            self._rekey_now()
        return seq


class _Feeder(Protocol):
    """A channel buffer that takes received data as views (``receiver.chunk_pipe``)."""

    def feed_view(self, data: memoryview) -> None: ...


def _feed(channel: Channel, msg: paramiko.Message) -> None:
    """The transport's handler of ``SSH_MSG_CHANNEL_DATA``: a view of the packet to a
    buffer that takes views, else paramiko's own (a copy)."""
    feed_view = getattr(channel.in_buffer, "feed_view", None)
    if isinstance(msg, ReceivedData) and feed_view is not None:
        cast(_Feeder, channel.in_buffer).feed_view(msg.view())
    else:
        Channel._feed(channel, msg)  # type: ignore[attr-defined]  # not in the stubs


class Transport(paramiko.Transport):
    """paramiko's transport with :class:`Packetizer` and the views it gives to channels
    whose buffer takes them."""

    _channel_handler_table = {  # noqa: RUF012 - paramiko's class-level table, extended
        **paramiko.Transport._channel_handler_table,  # type: ignore[attr-defined]
        MSG_CHANNEL_DATA: _feed,
    }

    def __init__(self, sock: Any, **kwargs: Any) -> None:
        super().__init__(sock, packetizer_class=Packetizer, **kwargs)


def fast_sends(channel: Channel) -> None:
    """``channel.send``/``sendall`` that hand :class:`Packetizer` a view of the data
    (paramiko's copy it into a ``Message``, and ``sendall`` copies the unsent rest of
    bytes at every packet)."""
    channel.send = functools.partial(_send, channel)  # type: ignore[method-assign]
    channel.sendall = functools.partial(_sendall, channel)  # type: ignore[method-assign]


def _send(channel: Channel, data: bytes | bytearray | memoryview) -> int:
    """``Channel.send``: as much of ``data`` as the window and a packet allow."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    with channel.lock:
        if channel.closed:
            raise OSError("Socket is closed")
        size = channel._wait_for_send_window(len(view))  # type: ignore[attr-defined]
        if size == 0:
            return 0
    transport = channel.transport
    assert transport is not None
    transport._send_user_message(ChannelData(channel.remote_chanid, view[:size]))  # type: ignore[attr-defined]
    return int(size)


def _sendall(channel: Channel, data: bytes | bytearray | memoryview) -> None:
    """``Channel.sendall``, its rest a view rather than a copy."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    while view:
        sent = _send(channel, view)
        view = view[sent:]
