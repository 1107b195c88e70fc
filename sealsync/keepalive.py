"""Dead-link detection on an SSH connection, the same on both ends (OpenSSH's
``ServerAliveInterval``/``ServerAliveCountMax`` on the sender, ``ClientAlive*`` on the
receiver).

TCP does not notice a link that goes silent — a NAT that dropped its mapping, a
stalled VPN, a route that vanished: nothing arrives, nothing fails, and every read
waits. OpenSSH's answer: after ``interval`` seconds in which nothing came from the
peer, send a global request that wants a reply (``keepalive@openssh.com``; an SSH
peer answers any request it does not know with a failure, which is an answer too),
and once ``count_max`` such intervals have passed without a byte from the peer, call
the link dead and close the connection. With the defaults (15 s, 3) a silent link is
closed after about a minute.

paramiko's own ``Transport.set_keepalive`` sends its request without asking for a
reply and never counts missing ones, so it keeps a NAT mapping open but cannot tell a
dead link. Here :class:`ActivitySocket` is the socket paramiko reads from, and notes
when the peer last sent any byte; :class:`Keepalive` is a thread that asks for an
answer after each silent interval and closes the transport when the silence reaches
``interval × (count_max + 1)``.

The asking runs on a thread of its own: on a dead link a write can block (the
socket's send buffer full, or paramiko's write lock held by a writer that is itself
blocked), and the watch must never wait behind it. Closing the transport wakes every
reader and writer of its channels, so the session above sees a lost connection at once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import paramiko

REQUEST = "keepalive@openssh.com"
READ_AHEAD = 256 * 1024
"""Most bytes one ``ActivitySocket.recv`` takes from the kernel (a few SSH packets)."""
MAX_TICK = 1.0
"""Longest the watch sleeps between looks at the clock."""


class ActivitySocket:
    """A socket for paramiko's ``Transport`` that remembers when the peer last sent a byte.

    paramiko takes "a socket or socket-like object"; everything but ``recv`` is the
    wrapped socket's own. ``recv`` also reads ahead: paramiko asks for each packet's
    header and then its body, two system calls (each a poll and a read, the socket
    having a timeout) and two releases of the interpreter lock per packet, which the
    receiver's other threads then contend for. One read of up to ``READ_AHEAD`` bytes
    serves the packets that have arrived; a caller still never gets more than it
    asked for.
    """

    def __init__(self, sock: socket.socket, clock: Callable[[], float] = time.monotonic) -> None:
        self._sock = sock
        self._clock = clock
        self.last_received = clock()
        """When the peer's last bytes arrived (or when the connection was made)."""
        # One buffer for the connection's life: a fresh one per read would be pages
        # the kernel must supply each time (bulk transfers lost to that).
        self._ahead = bytearray(READ_AHEAD)
        self._view = memoryview(self._ahead)
        self._at = self._end = 0

    def recv(self, n: int, *flags: int) -> bytes:
        if self._at < self._end:
            take = min(n, self._end - self._at)
            data = bytes(self._view[self._at : self._at + take])
            self._at += take
            return data
        if flags:
            data = self._sock.recv(n, *flags)
        else:
            got = self._sock.recv_into(self._ahead)
            take = min(n, got)
            data = bytes(self._view[:take])
            self._at, self._end = take, got
        if data:
            self.last_received = self._clock()
        return data

    def recv_into(self, view: memoryview) -> int:
        """``recv`` into the caller's buffer: what was read ahead first, then the
        socket straight into ``view`` (a packet body that is larger than the read-ahead
        buffer's share is copied no more than once)."""
        if self._at < self._end:
            take = min(len(view), self._end - self._at)
            view[:take] = self._view[self._at : self._at + take]
            self._at += take
            return take
        if len(view) < READ_AHEAD // 2:  # small: read ahead, as ``recv`` does
            got = self._sock.recv_into(self._ahead)
            take = min(len(view), got)
            view[:take] = self._view[:take]
            self._at, self._end = take, got
        else:
            take = self._sock.recv_into(view)
        if take:
            self.last_received = self._clock()
        return take

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class Keepalive:
    """Watches one transport; ``dead`` says why it was closed, once it was.

    ``label`` names the peer in the log line and in ``dead``; ``keys`` are the names of
    the settings for the interval and the count, so the line says what to tune.
    ``level`` is the log level of that line (the sender reports the failure itself).
    """

    def __init__(
        self,
        transport: paramiko.Transport,
        sock: ActivitySocket,
        interval: float,
        count_max: int,
        *,
        label: str,
        keys: tuple[str, str],
        log: logging.Logger,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.sock = sock
        self.interval = interval
        self.count_max = count_max
        self.label = label
        self.keys = keys
        self.log = log
        self.level = level
        self._clock = clock
        self.dead: str | None = None
        """Why the link was declared dead, or None while it is not."""
        self.probes = 0
        """Requests sent so far (each asks for a reply)."""
        self._stopped = threading.Event()
        self._asking: threading.Thread | None = None
        self._asked_at = 0.0
        self._thread = threading.Thread(
            target=self._watch, name=f"sealsync-keepalive-{label}", daemon=True
        )

    @property
    def limit(self) -> float:
        """Seconds of silence after which the link is dead."""
        return self.interval * (self.count_max + 1)

    def start(self) -> Keepalive:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the connection ends for another reason); does not close it."""
        self._stopped.set()

    def _watch(self) -> None:
        tick = min(self.interval / 4, MAX_TICK)
        while not self._stopped.wait(tick):
            if not self.transport.is_active():
                return
            now = self._clock()
            silent = now - self.sock.last_received
            if silent >= self.limit:
                self._declare_dead(silent)
                return
            since = max(self.sock.last_received, self._asked_at)
            if now - since >= self.interval and not self._is_asking():
                self._ask(now)

    def _is_asking(self) -> bool:
        return self._asking is not None and self._asking.is_alive()

    def _ask(self, now: float) -> None:
        self._asked_at = now
        self.probes += 1
        self._asking = threading.Thread(
            target=self._request, name=f"sealsync-keepalive-ask-{self.label}", daemon=True
        )
        self._asking.start()

    def _request(self) -> None:
        try:  # returns on the reply (any reply) or once the transport is closed
            self.transport.global_request(REQUEST, wait=True)
        except Exception:  # the link failed under it: the watch decides what that means
            pass

    def _declare_dead(self, silent: float) -> None:
        interval_key, count_key = self.keys
        self.dead = (
            f"{self.label}: link dead, nothing received for {silent:.0f} s "
            f"({interval_key} {self.interval:g} s, {count_key} {self.count_max})"
        )
        self.log.log(self.level, "%s; closing the connection", self.dead)
        self.transport.close()
