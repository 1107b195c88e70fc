"""A loopback TCP proxy that breaks connections on purpose (issue 7, network faults).

Sits between ``sealsync send`` and ``sealsync serve``: the sender's config points at
the proxy's port, the proxy forwards every byte to the receiver and back. A test
*plans* faults for the next connections the proxy accepts; each fault fires when the
byte count of its direction reaches its offset:

* ``drop``: forward the bytes before the offset, then cut both sides (FIN, or RST
  with ``reset=True``) — a link that dies mid-protocol;
* ``stall``: forward the bytes before the offset, then forward nothing in that
  direction for ``seconds`` (TCP back-pressure does the rest) — a link that hangs;
* ``flip``: invert the byte at the offset — corruption on the wire (SSH's MAC turns
  it into a dropped connection, never into wrong data);
* ``freeze``: forward the bytes before the offset, then nothing more in *either*
  direction, without closing anything, until :meth:`FaultProxy.thaw` or the end — a
  link gone silent (a dead route, a NAT that forgot the connection), which only
  keepalives and timeouts can notice. At offset 0 the connection is silent from its
  first byte on (the receiver's SSH banner never arrives either).

Offsets count the bytes of one direction of one connection from its start, so a
test can aim at a protocol phase by size (the handshake is a few KiB, a schema log
or a data file is as large as the test makes it). Connections without a plan are
forwarded untouched: a sender's reconnect after a fault goes through clean.
Traffic is only ever to 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

UP = "up"
"""Client (sender) to server (receiver)."""
DOWN = "down"
"""Server (receiver) to client (sender)."""

DROP = "drop"
STALL = "stall"
FLIP = "flip"
FREEZE = "freeze"

_BUFSIZE = 64 * 1024
_POLL = 0.2


@dataclass(frozen=True)
class Fault:
    direction: str
    offset: int
    action: str
    seconds: float = 0.0
    """How long a ``stall`` forwards nothing."""
    reset: bool = False
    """A ``drop`` that resets (RST) both sides instead of closing them (FIN)."""

    def __post_init__(self) -> None:
        if self.direction not in (UP, DOWN):
            raise ValueError(f"direction must be {UP!r} or {DOWN!r}")
        if self.action not in (DROP, STALL, FLIP, FREEZE):
            raise ValueError(f"action must be {DROP!r}, {STALL!r}, {FLIP!r} or {FREEZE!r}")
        if self.offset < 0:
            raise ValueError("offset must be >= 0")


@dataclass
class Fired:
    """A fault that happened: at which connection, and when (monotonic seconds)."""

    connection: int
    fault: Fault
    at: float


@dataclass
class Connection:
    """One proxied connection: bytes forwarded per direction, faults still to fire."""

    index: int
    client: socket.socket
    server: socket.socket
    faults: list[Fault]
    forwarded: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})
    done: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    frozen: bool = False
    """Nothing is forwarded either way (a ``freeze`` fault fired, not yet thawed)."""
    _pumps: int = 2
    _lock: threading.Lock = field(default_factory=threading.Lock)


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; use as a context manager."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=16)
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._plans: deque[list[Fault]] = deque()
        self._lock = threading.Lock()
        self.connections: list[Connection] = []
        self.fired: list[Fired] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="faultproxy", daemon=True)

    # --- control -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def plan(self, *faults: Fault) -> None:
        """Faults for the next connection that has no plan yet (call again for the next)."""
        with self._lock:
            self._plans.append(sorted(faults, key=lambda f: f.offset))

    def clear(self) -> None:
        """Forget plans not yet used by a connection."""
        with self._lock:
            self._plans.clear()

    @property
    def pending_plans(self) -> int:
        with self._lock:
            return len(self._plans)

    def fired_since(self, connection: int) -> list[Fired]:
        with self._lock:
            return [f for f in self.fired if f.connection >= connection]

    def count(self) -> int:
        with self._lock:
            return len(self.connections)

    def thaw(self) -> None:
        """Let every frozen connection forward again (what it held goes on first)."""
        with self._lock:
            conns = list(self.connections)
        for conn in conns:
            conn.frozen = False

    def freeze(self) -> None:
        """Silence every open connection now, both ways (as a ``freeze`` fault does)."""
        with self._lock:
            conns = list(self.connections)
        for conn in conns:
            conn.frozen = True

    def frozen(self) -> list[int]:
        """Indexes of the connections that are frozen now."""
        with self._lock:
            return [c.index for c in self.connections if c.frozen and not c.done.is_set()]

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True once every connection so far has ended on both directions."""
        deadline = time.monotonic() + timeout
        with self._lock:
            conns = list(self.connections)
        return all(c.done.wait(max(0.0, deadline - time.monotonic())) for c in conns)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._listener.close()
        with self._lock:
            conns = list(self.connections)
        for conn in conns:
            self._kill(conn, reset=False)
        for conn in conns:
            conn.done.wait(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- forwarding ----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the receiver is down: the sender sees a closed connection
                continue
            for s in (client, server):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                faults = self._plans.popleft() if self._plans else []
                conn = Connection(len(self.connections), client, server, faults)
                self.connections.append(conn)
                for fault in [f for f in faults if f.action == FREEZE and f.offset == 0]:
                    faults.remove(fault)  # silent from the start, whichever side speaks first
                    conn.frozen = True
                    self.fired.append(Fired(conn.index, fault, time.monotonic()))
            for direction, src, dst in ((UP, client, server), (DOWN, server, client)):
                threading.Thread(
                    target=self._pump,
                    args=(conn, direction, src, dst),
                    name=f"faultproxy-{conn.index}-{direction}",
                    daemon=True,
                ).start()

    def _pump(
        self, conn: Connection, direction: str, src: socket.socket, dst: socket.socket
    ) -> None:
        try:
            while True:
                try:
                    data = src.recv(_BUFSIZE)
                except OSError:
                    data = b""
                if not data:
                    if self._hold(conn):  # a silent link passes no FIN either
                        try:
                            dst.shutdown(socket.SHUT_WR)  # pass the half-close on
                        except OSError:
                            pass
                    return
                if not self._forward(conn, direction, bytearray(data), dst):
                    return
        finally:
            with conn._lock:
                conn._pumps -= 1
                last = conn._pumps == 0
            if last:
                for s in (conn.client, conn.server):
                    s.close()
                conn.done.set()

    def _forward(
        self, conn: Connection, direction: str, buf: bytearray, dst: socket.socket
    ) -> bool:
        """Send ``buf`` on, applying the faults that fall inside it; False once dropped."""
        if not self._hold(conn):
            return False
        start = conn.forwarded[direction]
        end = start + len(buf)
        sent = 0  # bytes of buf already sent
        for fault in list(conn.faults):
            if fault.direction != direction or not start <= fault.offset < end:
                continue
            at = fault.offset - start
            conn.faults.remove(fault)
            with self._lock:
                self.fired.append(Fired(conn.index, fault, time.monotonic()))
            if fault.action == FLIP:
                buf[at] ^= 0xFF
                continue
            if not self._send(conn, direction, dst, buf[sent:at]):
                return False
            sent = at
            if fault.action == STALL:
                time.sleep(fault.seconds)
            elif fault.action == FREEZE:
                conn.frozen = True
                if not self._hold(conn):
                    return False
            else:
                self._kill(conn, reset=fault.reset)
                return False
        return self._send(conn, direction, dst, buf[sent:])

    def _hold(self, conn: Connection) -> bool:
        """Wait while ``conn`` is frozen; False if it was killed (or the proxy stopped)."""
        while conn.frozen and not conn.killed and not self._stopped.is_set():
            time.sleep(_POLL / 4)
        return not conn.killed

    def _send(self, conn: Connection, direction: str, dst: socket.socket, data: bytearray) -> bool:
        if not data:
            return True
        try:
            dst.sendall(data)
        except OSError:
            return False
        conn.forwarded[direction] += len(data)
        return True

    def _kill(self, conn: Connection, reset: bool) -> None:
        with conn._lock:
            if conn.killed:
                return
            conn.killed = True
        for s in (conn.client, conn.server):
            try:
                if reset:  # no FIN: wake the pumps, the close then sends RST
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.shutdown(socket.SHUT_RD)
                else:
                    s.shutdown(socket.SHUT_RDWR)  # wakes the other pump blocked in recv
            except OSError:
                pass
