"""The SSH side of one receiver connection: paramiko's server policy and transport.

Public keys only, at most ``MAX_AUTH_TRIES`` per connection, one ``session`` channel
and on it one ``sealsync`` subsystem, whose thread runs the session. The server
announces ``SSH_VERSION`` (no library name or version for a scanner to match), and
paramiko's own log lines are demoted (``_PeerGone``): the service logs each
connection's outcome itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paramiko
from paramiko.auth_handler import AuthHandler
from paramiko.common import (
    AUTH_FAILED,
    AUTH_SUCCESSFUL,
    OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
    OPEN_SUCCEEDED,
)

from receiver import chunk_pipe
from receiver.auth import AuthorizedKeys
from receiver.limits import (
    SESSION_WAIT,
    Admission,
    KeyPenalties,
    Outcome,
    RefusalLog,
    SlotCounter,
    Startup,
)
from receiver.metrics import ReceiverMetrics
from sealsync import ssh_packets
from sealsync.keepalive import ActivitySocket
from sealsync.keys import fingerprint
from sealsync.protocol import (
    KEYS_IGNORED_BANNER,
    SSH_MAX_PACKET_SIZE,
    SSH_WINDOW_SIZE,
    SUBSYSTEM,
    preferred_ciphers,
)

log = logging.getLogger("sealsync.receiver.service")  # a connection's lines are the service's

MAX_AUTH_TRIES = 6
"""Keys one connection may try (OpenSSH's ``MaxAuthTries``); more and it is closed."""
SSH_VERSION = "SSH-2.0-sealsync"
"""The version line the server announces: names the protocol, not the library."""
POLL = 0.2
"""Seconds between the service's checks for stop(), and for a connection's progress
towards its subsystem."""

SSH_LOG = "sealsync.receiver.ssh"


class _PeerGone(logging.Filter):
    """paramiko logs any failure of one connection (a peer's abrupt disconnect, a port
    probe that never sends a banner, a failed handshake) as ERROR lines with a
    traceback, and every connection's handshake at INFO; for a server that is routine
    (a sender killed by cron, a health check, a port scanner) and says nothing about
    the service, which logs each connection's outcome itself. So all of it is
    demoted to DEBUG: visible with ``-v``, out of the way otherwise. The logger let
    the record through at its original level, so the demoted level is checked here."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


logging.getLogger(SSH_LOG).addFilter(_PeerGone())


class SshServer(paramiko.ServerInterface):
    """Policy for one connection: public keys only, one session, one subsystem."""

    def __init__(
        self,
        authorized: AuthorizedKeys,
        peer_ip: str,
        metrics: ReceiverMetrics,
        admission: Admission | None = None,
        startup: Startup | None = None,
        key_slots: SlotCounter | None = None,
        refusals: RefusalLog | None = None,
        key_penalties: KeyPenalties | None = None,
        busy_slots: SlotCounter | None = None,
    ) -> None:
        self.authorized = authorized
        self.busy_slots = busy_slots
        self.key_penalties = key_penalties
        self.peer_ip = peer_ip
        self.metrics = metrics
        self.admission = admission
        self.startup = startup
        self.key_slots = key_slots
        self.refusals = refusals
        self.key_fingerprint = ""
        self.key_slot = False
        """This connection holds one of its key's connection slots (``max_sessions_per_key``)."""
        self.over_key_cap = False
        """Its key had every slot taken when it authenticated: it hears ``busy`` at HELLO
        (holding one of ``busy_slots``)."""
        self.at_limit = False
        """Accepted past the receiver's connection bound: it hears ``busy`` at HELLO."""
        self.authenticated_at = 0.0
        self.authenticated = False
        """The client proved it holds an authorized key (see :meth:`confirm`)."""
        self.offered = ""
        """The authorized key the client last offered, accepted if its signature verifies."""
        self.key_full = False
        """Its key, verified, was refused: every one of its connections was taken."""
        self._confirm_lock = threading.Lock()
        self.auth_failures = 0
        self.auth_attempted = False
        """The client asked to authenticate (any method): it is past its first step."""
        self.channel_opened = False
        self.handler: SessionHandler | None = None
        self.started = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        self.auth_attempted = True
        return "publickey"

    def get_banner(self) -> tuple[str | None, str | None]:
        """Sent before authentication: a receiver whose authorized_keys grants nothing
        says so (a fixed text), so the sender does not blame its key."""
        if self.authorized.ignored():
            return KEYS_IGNORED_BANNER, "en"
        return None, None

    def check_auth_none(self, username: str) -> int:
        self.auth_attempted = True
        return AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        self.auth_attempted = True
        return AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        """Whether ``key`` may log in. paramiko asks this before it verifies the
        signature (and for a mere query without one), so nothing is counted here: anyone
        may present an authorized *public* key. The connection is counted as its key's
        once paramiko has verified it (:meth:`confirm`)."""
        self.auth_attempted = True
        if self.auth_failures >= MAX_AUTH_TRIES:
            return AUTH_FAILED  # the connection thread closes it
        if self.authenticated:  # one key per connection
            return AUTH_SUCCESSFUL if fingerprint(key) == self.key_fingerprint else AUTH_FAILED
        if self.authorized.allows(key.asbytes()):
            fp = fingerprint(key)
            barred = self.key_penalties.refused_for(fp) if self.key_penalties else 0.0
            if barred > 0:
                return self._key_penalised(fp, barred)
            self.offered = fp
            return AUTH_SUCCESSFUL
        self.auth_failures += 1
        ignored = self.authorized.ignored()
        message = (
            f"{self.peer_ip}: public key {fingerprint(key)} refused: "
            f"{self.authorized.path} is ignored ({ignored})"
            if ignored
            else f"{self.peer_ip}: public key {fingerprint(key)} not authorized"
        )
        if self.refusals is not None:
            self.refusals.refused("key not authorized", logging.WARNING, self.peer_ip, message)
        else:
            log.warning("%s", message)
        self.metrics.refused("key")
        return AUTH_FAILED

    def confirm(self) -> bool:
        """The transport says the client authenticated (its signature verified): count
        the connection as its key's, in one of its ``max_sessions_per_key`` slots or, with
        those taken, in one of as many kept to hear ``busy``. False if both are taken
        meanwhile (the caller closes the connection). Idempotent; called from the
        transport's thread (a channel request) and the connection's. A key refused here
        for having every connection taken is the key's doing, not its address's: the key
        is penalised (:meth:`_refuse_full`), the address only as for a connection that
        left without authenticating."""
        with self._confirm_lock:
            if self.authenticated:
                return True
            if not self.offered:
                return False
            fp = self.offered
            if self.key_slots is not None:
                # Connections count, not only sessions: a key's connections that never
                # open one would otherwise fill the receiver.
                self.key_slot = self.key_slots.acquire(fp)
                if not self.key_slot:
                    if self.busy_slots is not None and not self.busy_slots.acquire(fp):
                        self._refuse_full(fp)
                        return False
                    self.over_key_cap = True
            self.key_fingerprint = fp
            self.authenticated_at = time.monotonic()
            self.authenticated = True
            if self.admission is not None and self.startup is not None:
                self.admission.authenticated(self.startup)
            return True

    def _key_penalised(self, fp: str, left: float) -> int:
        """An authorized key refused for a while: its connections kept opening no session."""
        self.auth_failures += 1
        message = (
            f"{self.peer_ip}: key {fp} refused ({left:.0f} s left): its connections keep "
            "authenticating and opening no session"
        )
        if self.refusals is not None:
            self.refusals.refused("penalised key", logging.WARNING, self.peer_ip, message)
        else:
            log.warning("%s", message)
        self.metrics.refused("key")
        return AUTH_FAILED

    def _refuse_full(self, fp: str) -> None:
        """An authorized key, its signature verified, with every connection slot and
        every ``busy`` answer taken: refused on this connection (a sender never has so
        many open at once), and the key penalised as for a failed login."""
        self.key_full = True
        limit = self.key_slots.limit if self.key_slots is not None else 0
        message = (
            f"{self.peer_ip}: key {fp} refused: it already has {limit} connections open and "
            f"{limit} more waiting to hear busy (max_sessions_per_key)"
        )
        barred = self.key_penalties.failed(fp, Outcome.AUTH_FAILED) if self.key_penalties else 0
        if self.refusals is not None:
            self.refusals.refused("key connections full", logging.WARNING, self.peer_ip, message)
            if barred:
                self.refusals.refused(
                    "key penalised",
                    logging.WARNING,
                    self.peer_ip,
                    f"key {fp}: refused for {barred:.0f} s from every address: its "
                    "connections keep coming past max_sessions_per_key",
                )
        else:
            log.warning("%s", message)
        self.metrics.refused("key")

    def release_key_slot(self) -> None:
        """Give the key's connection slot, or its ``busy`` slot, back (once)."""
        if self.key_slot and self.key_slots is not None:
            self.key_slots.release(self.key_fingerprint)
        elif self.over_key_cap and self.busy_slots is not None:
            self.busy_slots.release(self.key_fingerprint)
        self.key_slot = False
        self.over_key_cap = False

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session" and not self.channel_opened and self.confirm():
            self.channel_opened = True
            return OPEN_SUCCEEDED
        return OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_subsystem_request(self, channel: paramiko.Channel, name: str) -> bool:
        if name != SUBSYSTEM or self.handler is not None:
            return False
        chunk_pipe.install(channel)  # before the session thread can start reading
        return bool(super().check_channel_subsystem_request(channel, name))

    def attach(self, handler: SessionHandler) -> None:
        self.handler = handler


class SessionHandler(paramiko.SubsystemHandler):
    """The ``sealsync`` subsystem of one channel: runs ``run`` on its own thread."""

    def __init__(
        self, channel: paramiko.Channel, name: str, server: SshServer, run: RunSession
    ) -> None:
        super().__init__(channel, name, server)
        self.daemon = True
        self.name = f"sealsync-session-{server.peer_ip}"
        self.run_session = run
        server.attach(self)

    def start_subsystem(self, name: str, transport: paramiko.Transport, channel: Any) -> None:
        server = self.get_server()
        assert isinstance(server, SshServer)
        server.started.set()  # the thread runs: the connection thread may join it now
        self.run_session(channel, server)


RunSession = Callable[[paramiko.Channel, SshServer], None]
"""What runs on a subsystem's thread: the service's session, given the channel."""


def server_transport(
    sock: ActivitySocket, host_key: paramiko.PKey, grace: float, run: RunSession
) -> paramiko.Transport:
    """A server transport on ``sock``: the host key, AES-GCM first, the window and
    packet size both ends use, and the ``sealsync`` subsystem running ``run``.

    ``grace`` (``login_grace_time``) bounds paramiko's own banner, handshake and auth
    waits; the connection thread enforces it exactly.
    """
    transport = ssh_packets.Transport(
        sock,
        default_window_size=SSH_WINDOW_SIZE,
        default_max_packet_size=SSH_MAX_PACKET_SIZE,
    )
    options = transport.get_security_options()
    options.ciphers = preferred_ciphers(options.ciphers)
    transport.set_log_channel(SSH_LOG)  # under sealsync's logger, with _PeerGone
    transport.local_version = SSH_VERSION
    transport.add_server_key(host_key)
    transport.set_subsystem_handler(SUBSYSTEM, SessionHandler, run)
    transport.banner_timeout = grace
    transport.handshake_timeout = grace
    transport.auth_timeout = grace
    return transport


class _ConfirmingAuth(AuthHandler):
    """paramiko's server-side authentication, which lets the server count a connection
    as its key's (:meth:`SshServer.confirm`) once the signature is verified and before
    the client hears that it succeeded: so a sender's connection has left the startup
    counts by the time it could open another. paramiko calls no server hook at that
    point; ``_send_auth_result`` is the step every answer takes (in every release since
    1.x). Were it renamed, the connection would be confirmed at its channel request or
    at its thread's next look instead (:func:`wait_for_subsystem`)."""

    def __init__(self, transport: paramiko.Transport, server: SshServer) -> None:
        super().__init__(transport)
        self._server = server

    def _send_auth_result(self, username: str, method: str, result: int) -> None:
        if result == AUTH_SUCCESSFUL and not self._server.confirm():
            result = AUTH_FAILED  # its key's connections were all taken meanwhile
        super()._send_auth_result(username, method, result)  # type: ignore[misc]


def confirm_on_success(transport: paramiko.Transport, server: SshServer) -> None:
    """Install :class:`_ConfirmingAuth` on a server ``transport`` not yet started."""
    transport.auth_handler = _ConfirmingAuth(transport, server)


@dataclass(frozen=True)
class PreAuth:
    """``preauth_timeout`` for one connection: a peer that has sent nothing ``timeout``
    seconds after ``accepted`` (``heard`` says whether it has), or no authentication
    request ``timeout`` seconds after the receiver finished the key exchange, is idle.
    Between the two, while the exchange runs, ``login_grace_time`` alone applies: the
    receiver's own slowness under load is never held against a sender."""

    accepted: float
    timeout: float
    heard: Callable[[], bool]


def wait_for_subsystem(
    transport: paramiko.Transport,
    server: SshServer,
    deadline: float,
    running: Callable[[], bool],
    session_wait: float = SESSION_WAIT,
    preauth: PreAuth | None = None,
) -> Outcome:
    """Wait until ``deadline`` for auth, a channel and the subsystem; how it went.
    ``running``: False once the service stops, which ends the wait too. Once the key
    is accepted, the session must start within ``session_wait`` seconds too; before
    the first authentication request, :class:`PreAuth`'s rule applies."""
    kex_done: float | None = None
    while not server.started.wait(POLL):
        if server.auth_failures >= MAX_AUTH_TRIES:
            return Outcome.AUTH_FAILED
        if not transport.is_active() or not running():
            break
        now = time.monotonic()
        if not server.authenticated and transport.is_authenticated() and not server.confirm():
            return Outcome.NO_AUTH  # its key has every connection taken (the key's penalty)
        if server.authenticated and now - server.authenticated_at >= session_wait:
            return Outcome.IDLE_AFTER_AUTH
        if preauth is not None and not server.auth_attempted:
            if kex_done is None and transport.initial_kex_done:
                kex_done = now
            if kex_done is not None:
                if now - kex_done >= preauth.timeout:
                    return Outcome.IDLE_BEFORE_AUTH
            elif now - preauth.accepted >= preauth.timeout and not preauth.heard():
                return Outcome.IDLE_BEFORE_AUTH
        if now >= deadline:
            return Outcome.AUTHENTICATED if server.authenticated else Outcome.GRACE_EXCEEDED
    if server.authenticated or server.started.is_set():
        return Outcome.AUTHENTICATED
    if server.key_full:  # penalised as the key's, not the address's
        return Outcome.NO_AUTH
    if server.auth_failures or server.offered:  # a key refused, or a signature that failed
        return Outcome.AUTH_FAILED
    return Outcome.NO_AUTH
