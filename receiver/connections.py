"""Every connection of a receiver from accept to close (docs/design.md §4.1, §5.1, §9.7).

:class:`Connections` is what stands between the listening socket and a
:class:`~receiver.session.Session`. For each accepted socket, in this order, it

1. checks the socket's **peer address** against the allow list and closes at once
   if it is outside — before any byte, never trusting what the client says;
2. admits it as a *startup* (:class:`~receiver.limits.Admission`: penalised sources
   and networks, ``per_source_max_startups``, ``max_startups`` with random early drop,
   a reserve for the addresses of known senders) or refuses it; a hard bound on all
   connections backs this up. A connection refused for the receiver's load (its
   connection limit, ``max_startups``, the source's startups, a failing network) is
   told why in one line before the SSH version line (RFC 4253 allows such lines;
   :class:`Farewells`), so an honest sender reports "at its connection limit" rather
   than a connection closed for no reason, and retries; one from a penalised source,
   as from an address outside the allow list, gets no byte;
3. sets ``TCP_NODELAY`` (paramiko never does; without it a verdict per file waits
   for Nagle + delayed ACK, a few dozen files a second instead of hundreds);
4. runs a paramiko server ``Transport`` (:mod:`receiver.ssh_server`) with keepalives
   (``client_alive_*``, :mod:`sealsync.keepalive`) that close it once the sender has
   gone silent, so a dead link frees its session;
5. gives it ``login_grace_time`` from accept to open the ``sealsync`` subsystem on one
   ``session`` channel, ``preauth_timeout`` for each of its first steps (its first
   byte from accept, its first authentication request from the end of the key
   exchange: a client that finishes the exchange and idles is cut early; see
   :class:`~receiver.ssh_server.PreAuth`) and ``SESSION_WAIT`` from its key's
   acceptance; the connection leaves the startup counts once its key is accepted (and
   takes one of the key's ``max_sessions_per_key`` connection slots, or, with those
   taken, one of as many kept only to hear ``busy``; past those the key is refused on
   this connection), and one that fails, runs out of time, or authenticates and opens
   no session earns its source (and its network) a penalty (and, for the last, its
   key: a penalised key is refused at authentication from any address); one whose
   session opens makes its address a known sender's;
6. runs the session on the subsystem's thread. Over ``max_sessions``, over
   ``max_sessions_per_key`` for its key, or past the bound on connections (a few are
   served only for this), the sender gets an ERROR frame ``busy`` after its HELLO
   saying which, and retries later.

Log lines about refused connections go through a :class:`~receiver.limits.RefusalLog`
(one per kind and interval, then a summary), at WARNING: a refusal is what an operator
under attack, or with a misconfigured sender, needs to see. Failures in a connection
are logged and end that connection only.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paramiko

from receiver.auth import AuthorizedKeys, is_allowed, peer_address
from receiver.layout import sender_folders
from receiver.limits import (
    SESSION_WAIT,
    Admission,
    KeyPenalties,
    Outcome,
    RefusalLog,
    SlotCounter,
    Startup,
    source_of,
)
from receiver.metrics import ReceiverMetrics
from receiver.session import Session, SessionContext
from receiver.ssh_server import (
    PreAuth,
    SshServer,
    confirm_on_success,
    server_transport,
    wait_for_subsystem,
)
from sealsync.config import ReceiverConfig
from sealsync.keepalive import ActivitySocket, Keepalive
from sealsync.protocol import SUBSYSTEM, Error, ErrorCode, channel_stream, receive, send

log = logging.getLogger("sealsync.receiver.service")  # a connection's lines are the service's

BUSY_REPLY_TIMEOUT = 5.0
"""Seconds a connection served only to hear ``busy`` may take to say HELLO."""
AT_LIMIT_RESERVE = 8
"""Connections past ``max_connections`` served only to answer ``busy`` (at the limit)."""
FAREWELL_PREFIX = "sealsync: "
"""What starts the line a refused connection is told before it is closed."""
FAREWELL_LINGER = 2.0
"""Seconds a refused connection is kept half-closed for its peer to read the line."""
MAX_FAREWELLS = 64
"""Refused connections kept lingering at once; past this they are closed unanswered."""


class Farewells:
    """Refused connections told why in one line, then closed once the peer has read it.

    Closing a socket whose peer's bytes are still unread sends a reset, and a reset can
    make the peer drop what it received but had not read yet: the line would be lost.
    So a refused socket is sent its line and half-closed, then kept, at most
    ``FAREWELL_LINGER`` seconds, while what the peer sends (its own version line) is
    read and thrown away, until the peer closes. Only the accept thread uses it, and
    never blocks on it: every socket is non-blocking, at most ``MAX_FAREWELLS`` linger
    (a flood of refused connections gets closes, as before), and :meth:`tick` runs
    between accepts.
    """

    def __init__(self, linger: float = FAREWELL_LINGER, limit: int = MAX_FAREWELLS) -> None:
        self.linger = linger
        self.limit = limit
        self._socks: collections.deque[tuple[float, socket.socket]] = collections.deque()

    def __len__(self) -> int:
        return len(self._socks)

    def say(self, sock: socket.socket, reason: str) -> None:
        """Send ``reason`` as the connection's one line, then close it (later)."""
        if len(self._socks) >= self.limit:
            sock.close()
            return
        line = FAREWELL_PREFIX + " ".join(reason.split())[:200] + "\r\n"
        try:
            sock.setblocking(False)
            sock.send(line.encode("utf-8"))  # a fresh socket's buffer takes one short line
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        self._socks.append((time.monotonic() + self.linger, sock))

    def tick(self) -> None:
        """Read what the lingering peers sent; close those that closed or ran out of time."""
        now = time.monotonic()
        kept: collections.deque[tuple[float, socket.socket]] = collections.deque()
        for deadline, sock in self._socks:
            if _drained(sock) or now >= deadline:
                sock.close()
            else:
                kept.append((deadline, sock))
        self._socks = kept

    def close(self) -> None:
        for _, sock in self._socks:
            sock.close()
        self._socks.clear()


def known_senders(data_dirs: list[Path]) -> list[tuple[str, float]]:
    """(source, seconds since its last round) of every address a sender folder names:
    only a session that opened a round made one (``<ip>_<uuid>``), and each round
    changes it, so these are the addresses of known senders across restarts."""
    now = time.time()
    found = []
    for folder in sender_folders(list(data_dirs)):
        try:
            ip = peer_address(folder.ip.replace("-", ":"))  # IPv6 colons are dashes there
            age = now - folder.root.lstat().st_mtime
        except (ValueError, OSError):
            continue
        found.append((source_of(ip), max(age, 0.0)))
    return found


def _heard(sock: ActivitySocket) -> Callable[[], bool]:
    """Whether the peer of ``sock`` (made now, nothing read yet) has sent a byte since."""
    silent_since = sock.last_received
    return lambda: sock.last_received != silent_since


def _drained(sock: socket.socket) -> bool:
    """Reads what has arrived; True once the peer has closed (or the socket failed)."""
    try:
        for _ in range(16):
            if not sock.recv(4096):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    return False


class Connections:
    """The connections of one receiver service: admission, SSH, and the session or the
    ``busy`` answer each one gets. Thread-safe; :meth:`accept_loop` runs on the
    service's accept thread, each connection on a thread of its own."""

    def __init__(
        self,
        config: ReceiverConfig,
        context: SessionContext,
        metrics: ReceiverMetrics,
        refusals: RefusalLog,
    ) -> None:
        self.config = config
        self.context = context
        self.metrics = metrics
        self.refusals = refusals
        self._authorized = AuthorizedKeys(config.authorized_keys)
        self.admission = Admission(
            config.max_startups,
            config.per_source_max_startups,
            config.per_source_penalty_max,
            # at most max_sessions known senders are served at once anyway
            reserved=min(config.max_startups.start, config.max_sessions),
        )
        self.key_sessions = SlotCounter(config.max_sessions_per_key)
        """Connections per key, taken when the key is accepted (sessions need one each)."""
        self.key_busy = SlotCounter(config.max_sessions_per_key)
        """Connections per key past its slots, kept only to hear ``busy`` (as many again)."""
        self.key_penalties = KeyPenalties(config.per_source_penalty_max)
        """Keys whose connections keep authenticating and opening no session."""
        # Startups are bounded by the admission; this bounds everything else (sessions,
        # and authenticated connections on their way to a session or a busy answer).
        self.max_connections = config.max_startups.full + 2 * config.max_sessions + 4
        self.farewells = Farewells()
        self._lock = threading.Lock()
        self._host_key: paramiko.PKey | None = None
        self._open = False
        self._threads: dict[threading.Thread, paramiko.Transport | None] = {}
        self._live: dict[Session, paramiko.Channel] = {}  # sessions running now
        self._sessions = 0

    # --- from the service ------------------------------------------------------------

    def open(self, host_key: paramiko.PKey) -> None:
        """Start admitting connections, served with ``host_key``; the addresses the
        sender folders name are known senders' (see :func:`known_senders`)."""
        self.admission.remember(known_senders(self.config.data_dirs))
        with self._lock:
            self._host_key = host_key
            self._open = True

    def shut(self) -> tuple[list[paramiko.Transport], list[threading.Thread]]:
        """Admit nothing more; the transports to close and the threads to join."""
        with self._lock:
            self._open = False
            transports = [t for t in self._threads.values() if t is not None]
            return transports, list(self._threads)

    @property
    def accepting(self) -> bool:
        with self._lock:
            return self._open

    @property
    def sessions(self) -> int:
        """Sessions admitted and running now."""
        with self._lock:
            return self._sessions

    def live(self) -> list[tuple[Session, paramiko.Channel]]:
        """The sessions running now and their channels."""
        with self._lock:
            return list(self._live.items())

    def accept_loop(self, listener: socket.socket, poll: float) -> None:
        """Accept until :meth:`shut` (the listener has a timeout of ``poll`` seconds)."""
        try:
            while self.accepting:
                self.farewells.tick()
                try:
                    sock, _ = listener.accept()  # the address is read back from the socket
                except TimeoutError:
                    continue
                except OSError:
                    if self.accepting:
                        log.exception("accept failed")
                        time.sleep(poll)
                        continue
                    return
                try:
                    self._admit(sock)
                except Exception:
                    log.exception("connection setup failed")
                    sock.close()
        finally:
            self.farewells.close()

    # --- one connection --------------------------------------------------------------

    def _admit(self, sock: socket.socket) -> None:
        """Allow list first (the socket's own peer address), then the startup limits."""
        accepted = time.monotonic()
        try:
            ip = peer_address(sock.getpeername()[0])
        except OSError:  # gone already
            sock.close()
            return
        if not is_allowed(ip, self.config.allow):
            self.refusals.refused(
                "allow list",
                logging.WARNING,
                str(ip),
                f"connection from {ip} refused: address not in the allow list",
            )
            self.metrics.refused("allow_list")
            sock.close()  # not a byte to an address outside: nothing to learn here
            return
        with self._lock:
            if not self._open:
                sock.close()
                return
            open_now = len(self._threads)
            if open_now >= self.max_connections + AT_LIMIT_RESERVE:
                self.refusals.refused(
                    "connection limit",
                    logging.WARNING,
                    str(ip),
                    f"connection from {ip} refused: {open_now} connections open",
                )
                self.metrics.refused("connections")
                self.farewells.say(
                    sock,
                    f"receiver busy: at its connection limit ({open_now} connections open), "
                    "retry later",
                )
                return
            startup = self.admission.admit(ip)
            if not isinstance(startup, Startup):
                self.refusals.refused(
                    startup.kind,
                    logging.WARNING,
                    str(ip),
                    f"connection from {ip} refused: {startup}",
                )
                if startup.silent:
                    sock.close()  # as sshd: a failing source learns nothing more
                else:  # a crowd of startups: a sender with a key may retry soon
                    self.farewells.say(sock, f"receiver busy: {startup}, retry later")
                return
            # Past the bound, a few more are served only to be told why (ERROR busy at
            # their HELLO): a sender then reports the receiver's connection limit rather
            # than a connection closed before the banner.
            at_limit = open_now >= self.max_connections
            thread = threading.Thread(
                target=self._serve,
                args=(sock, str(ip), startup, accepted, at_limit),
                name=f"sealsync-conn-{ip}",
                daemon=True,
            )
            self._threads[thread] = None
        thread.start()

    def _serve(
        self,
        sock: socket.socket,
        peer_ip: str,
        startup: Startup,
        accepted: float,
        at_limit: bool = False,
    ) -> None:
        me = threading.current_thread()
        transport: paramiko.Transport | None = None
        server: SshServer | None = None
        keepalive: Keepalive | None = None
        outcome = Outcome.NO_AUTH
        try:
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            watched = ActivitySocket(sock)
            heard = _heard(watched)  # before paramiko reads a byte
            assert self._host_key is not None
            grace = self.config.login_grace_time
            if at_limit:  # served only to hear why: no long stay
                grace = min(grace, BUSY_REPLY_TIMEOUT)
            transport = server_transport(watched, self._host_key, grace, self._run_session)
            server = SshServer(
                self._authorized,
                peer_ip,
                self.metrics,
                self.admission,
                startup,
                key_slots=self.key_sessions,
                refusals=self.refusals,
                key_penalties=self.key_penalties,
                busy_slots=self.key_busy,
            )
            server.at_limit = at_limit
            confirm_on_success(transport, server)
            with self._lock:
                if not self._open:
                    return
                self._threads[me] = transport
            transport.start_server(event=threading.Event(), server=server)  # returns at once
            keepalive = self._keepalive(transport, watched, peer_ip)
            outcome = wait_for_subsystem(
                transport,
                server,
                accepted + grace,
                lambda: self.accepting,
                preauth=PreAuth(accepted, self.config.preauth_timeout, heard),
            )
            if server.started.is_set():
                self.admission.logged_in(startup)
            else:
                self._log_no_session(transport, server, peer_ip, outcome)
                return
            assert server.handler is not None
            server.handler.join()
        except (paramiko.SSHException, EOFError, OSError) as exc:
            # A port probe, a scanner, a sender killed mid-handshake: routine (receiver.ssh_server).
            log.debug("%s: connection ended: %s", peer_ip, exc or type(exc).__name__)
        except Exception:
            log.exception("%s: connection failed", peer_ip)
        finally:
            if keepalive is not None:
                keepalive.stop()
            if server is not None and server.auth_failures and not server.authenticated:
                outcome = Outcome.AUTH_FAILED
            if server is not None:
                server.release_key_slot()
            barred, barred_block = self.admission.closed(startup, outcome)  # before the close
            fp = server.key_fingerprint if server is not None else ""
            barred_key = 0.0
            if fp and outcome is Outcome.IDLE_AFTER_AUTH:
                barred_key = self.key_penalties.failed(fp, outcome)
            if transport is not None:
                transport.close()
            sock.close()
            if barred:
                self.refusals.refused(
                    "penalised",
                    logging.WARNING,
                    peer_ip,
                    f"{peer_ip}: refused for {barred:.0f} s: its connections keep failing "
                    f"(last: {outcome.value})",
                )
            if barred_block:
                self.refusals.refused(
                    "network penalised",
                    logging.WARNING,
                    peer_ip,
                    f"{startup.block}: refused for {barred_block:.0f} s: connections from "
                    f"its addresses keep failing (last: {peer_ip}, {outcome.value}); "
                    "addresses of known senders are still served",
                )
            if barred_key:
                self.refusals.refused(
                    "key penalised",
                    logging.WARNING,
                    peer_ip,
                    f"key {fp}: refused for {barred_key:.0f} s from every address: its "
                    f"connections keep authenticating and opening no {SUBSYSTEM} session",
                )
            with self._lock:
                self._threads.pop(me, None)

    def _log_no_session(
        self, transport: paramiko.Transport, server: SshServer, peer_ip: str, outcome: Outcome
    ) -> None:
        """Why a connection ends without a session, rate-limited where a flood can repeat it."""
        if outcome is Outcome.IDLE_BEFORE_AUTH:
            self.refusals.refused(
                "idle before authenticating",
                logging.WARNING,
                peer_ip,
                f"{peer_ip}: silent, or no authentication request after the key exchange, "
                f"for preauth_timeout ({self.config.preauth_timeout:g} s), closing",
            )
        elif outcome is Outcome.IDLE_AFTER_AUTH:
            self.refusals.refused(
                "authenticated, no session",
                logging.WARNING,
                peer_ip,
                f"{peer_ip}: key {server.key_fingerprint} opened no {SUBSYSTEM} session "
                f"within {SESSION_WAIT:g} s of authenticating, closing",
            )
        elif outcome is Outcome.GRACE_EXCEEDED or (
            server.authenticated and transport.is_active() and self.accepting
        ):
            self.refusals.refused(
                "login grace time",
                logging.WARNING,
                peer_ip,
                f"{peer_ip}: no {SUBSYSTEM} session within login_grace_time "
                f"({self.config.login_grace_time:g} s), closing",
            )
        else:
            log.debug("%s: connection closed before a session started", peer_ip)

    def _keepalive(
        self, transport: paramiko.Transport, sock: ActivitySocket, peer_ip: str
    ) -> Keepalive:
        """Closes the connection once its sender has been silent too long (a dead link):
        the session then ends and its place is free."""
        return Keepalive(
            transport,
            sock,
            self.config.client_alive_interval,
            self.config.client_alive_count_max,
            label=peer_ip,
            keys=("client_alive_interval", "client_alive_count_max"),
            log=log,
        ).start()

    # --- its session -----------------------------------------------------------------

    def _run_session(self, channel: paramiko.Channel, server: SshServer) -> None:
        """Runs on the subsystem's thread; never raises."""
        fp = server.key_fingerprint
        refusal = None
        kind = "busy"
        if server.at_limit:
            admitted, kind = False, "connection limit"
            refusal = (
                f"receiver busy: at its connection limit ({self.max_connections} connections "
                "open), retry later"
            )
        elif server.over_key_cap:
            admitted, kind = False, "max_sessions_per_key"
            refusal = (
                f"receiver busy: key {fp} already has {self.config.max_sessions_per_key} "
                "connections open (max_sessions_per_key), retry later"
            )
        else:
            with self._lock:
                admitted = self._open and self._sessions < self.config.max_sessions
                if admitted:
                    self._sessions += 1
            if not admitted:
                kind = "max_sessions"
                refusal = f"receiver busy: {self.config.max_sessions} sessions open, retry later"
        try:
            if refusal is not None:
                self._refuse_busy(channel, server.peer_ip, refusal, kind)
                return
            channel.settimeout(self.config.idle_timeout)
            stream = channel_stream(channel)
            session = Session(stream, self.context, server.peer_ip, fp)
            with self._lock:
                self._live[session] = channel
            try:
                session.run()
            finally:
                with self._lock:
                    self._live.pop(session, None)
        except Exception:
            log.exception("%s: session failed", server.peer_ip)
        finally:
            if admitted:
                with self._lock:
                    self._sessions -= 1
            try:
                channel.close()
            except Exception:  # the peer or the transport is gone already
                pass

    def _refuse_busy(
        self, channel: paramiko.Channel, peer_ip: str, message: str, kind: str
    ) -> None:
        """Over a session bound: answer the HELLO with ERROR busy so the sender retries."""
        self.refusals.refused(
            kind,
            logging.WARNING,
            peer_ip,
            f"{peer_ip}: session refused: {message}",
        )
        self.metrics.refused("sessions")
        channel.settimeout(BUSY_REPLY_TIMEOUT)
        stream = channel_stream(channel)
        try:
            receive(stream)  # the HELLO; the sender reads the answer after sending it
        except Exception:
            pass
        try:
            send(stream, Error(ErrorCode.BUSY, message))
        except Exception:
            pass
