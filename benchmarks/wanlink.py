"""An emulated WAN link on loopback: a TCP proxy with a one-way delay, a rate and a cut.

``netem`` is not available on these kernels, so the link is a proxy both tools go
through alike. Each direction of each connection has a reader, which timestamps what
it reads and queues it, and a writer, which sends each piece once ``delay`` has passed
since it was read and the direction's rate allows (one token bucket per direction,
shared by every connection: the rate is the link's, not a connection's). The queue
holds at most ``buffer`` bytes per direction and connection, like a router's buffer:
when it is full the reader stops reading, and TCP's flow control pushes back to the
sender, so a sender sees the link's rate, not the proxy's memory.

``cut_at`` closes every open connection once that many bytes have gone upstream
(client to server) over the link in all, once: what a dropped link does mid-file.
``upstream`` counts the bytes that crossed the link towards the server.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from dataclasses import dataclass, field

PIECE = 64 * 1024


class _Bucket:
    """Paces one direction of the link: ``rate`` bytes per second, 0 for none."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next = 0.0
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        if not self.rate:
            return
        with self._lock:
            start = max(time.monotonic(), self._next)
            self._next = start + n / self.rate
            until = self._next
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


@dataclass
class Link:
    target_port: int
    delay: float = 0.0
    """One-way delay in seconds (the RTT is twice this)."""
    rate: float = 0.0
    """Bytes per second each way; 0 for no limit."""
    buffer: int = 1 << 20
    cut_at: int | None = None
    upstream: int = 0
    cuts: int = 0
    port: int = 0
    _sock: socket.socket | None = None
    _up: _Bucket = field(init=False)
    _down: _Bucket = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: list[socket.socket] = field(default_factory=list)
    _stopped: bool = False

    def __post_init__(self) -> None:
        self._up = _Bucket(self.rate)
        self._down = _Bucket(self.rate)

    def start(self) -> Link:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped = True
        if self._sock is not None:
            self._sock.close()
        self._close_all()

    def reset(self, cut_at: int | None = None) -> None:
        """Before a run: zero the counters, arm a new cut (or none)."""
        with self._lock:
            self.upstream = 0
            self.cuts = 0
            self.cut_at = cut_at

    def __enter__(self) -> Link:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopped:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open += [client, server]
            self._pipe(client, server, self._up, upstream=True)
            self._pipe(server, client, self._down, upstream=False)

    def _pipe(
        self, src: socket.socket, dst: socket.socket, bucket: _Bucket, upstream: bool
    ) -> None:
        queue: collections.deque[tuple[float, bytes]] = collections.deque()
        cond = threading.Condition()
        state = {"queued": 0, "eof": False}

        def read() -> None:
            try:
                while True:
                    with cond:
                        while state["queued"] >= self.buffer and not state["eof"]:
                            cond.wait(0.5)
                        if state["eof"]:
                            return
                    data = src.recv(PIECE)
                    with cond:
                        if not data:
                            state["eof"] = True
                        else:
                            queue.append((time.monotonic() + self.delay, data))
                            state["queued"] += len(data)
                        cond.notify_all()
                    if not data:
                        return
            except OSError:
                with cond:
                    state["eof"] = True
                    cond.notify_all()

        def write() -> None:
            try:
                while True:
                    with cond:
                        while not queue and not state["eof"]:
                            cond.wait(0.5)
                        if not queue:
                            break
                        due, data = queue.popleft()
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    bucket.take(len(data))
                    if upstream and not self._count(len(data)):
                        return  # the link was cut
                    dst.sendall(data)
                    with cond:
                        state["queued"] -= len(data)
                        cond.notify_all()
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            finally:
                with cond:
                    state["eof"] = True
                    cond.notify_all()

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def _count(self, n: int) -> bool:
        """Count ``n`` upstream bytes; False (and every connection closed) at the cut."""
        with self._lock:
            if self.cut_at is not None and self.upstream + n > self.cut_at:
                self.cut_at = None
                self.cuts += 1
                cut = True
            else:
                self.upstream += n
                cut = False
        if cut:
            self._close_all()
        return not cut

    def _close_all(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
