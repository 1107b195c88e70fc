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
from typing import Any

import paramiko
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
    ) -> None:
        self.authorized = authorized
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
        """Its key had every slot taken when it authenticated: it hears ``busy`` at HELLO."""
        self.at_limit = False
        """Accepted past the receiver's connection bound: it hears ``busy`` at HELLO."""
        self.authenticated_at = 0.0
        self.authenticated = False
        self.auth_failures = 0
        self.channel_opened = False
        self.handler: SessionHandler | None = None
        self.started = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def get_banner(self) -> tuple[str | None, str | None]:
        """Sent before authentication: a receiver whose authorized_keys grants nothing
        says so (a fixed text), so the sender does not blame its key."""
        if self.authorized.ignored():
            return KEYS_IGNORED_BANNER, "en"
        return None, None

    def check_auth_none(self, username: str) -> int:
        return AUTH_FAILED

    def check_auth_password(self, username: str, password: str) -> int:
        return AUTH_FAILED

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if self.auth_failures >= MAX_AUTH_TRIES:
            return AUTH_FAILED  # the connection thread closes it
        if self.authorized.allows(key.asbytes()):
            fp = fingerprint(key)
            barred = self.key_penalties.refused_for(fp) if self.key_penalties else 0.0
            if barred > 0:
                return self._key_penalised(fp, barred)
            if self.authenticated and fp == self.key_fingerprint:
                return AUTH_SUCCESSFUL  # paramiko asks again once the key's signature is in
            self.release_key_slot()  # a query for another key came first
            self.key_fingerprint = fp
            if not self.authenticated:
                self.authenticated_at = time.monotonic()
            self.authenticated = True
            if self.key_slots is not None:
                # Connections count, not only sessions: a key's connections that never
                # open one would otherwise fill the receiver.
                self.key_slot = self.key_slots.acquire(self.key_fingerprint)
                self.over_key_cap = not self.key_slot
            if self.admission is not None and self.startup is not None:
                self.admission.authenticated(self.startup)
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

    def release_key_slot(self) -> None:
        """Give the key's connection slot back (once)."""
        if self.key_slot and self.key_slots is not None:
            self.key_slots.release(self.key_fingerprint)
        self.key_slot = False

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session" and not self.channel_opened:
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


def wait_for_subsystem(
    transport: paramiko.Transport,
    server: SshServer,
    deadline: float,
    running: Callable[[], bool],
    session_wait: float = SESSION_WAIT,
) -> Outcome:
    """Wait until ``deadline`` for auth, a channel and the subsystem; how it went.
    ``running``: False once the service stops, which ends the wait too. Once the key
    is accepted, the session must start within ``session_wait`` seconds too."""
    while not server.started.wait(POLL):
        if server.auth_failures >= MAX_AUTH_TRIES:
            return Outcome.AUTH_FAILED
        if not transport.is_active() or not running():
            break
        if server.authenticated and time.monotonic() - server.authenticated_at >= session_wait:
            return Outcome.IDLE_AFTER_AUTH
        if time.monotonic() >= deadline:
            return Outcome.AUTHENTICATED if server.authenticated else Outcome.GRACE_EXCEEDED
    if server.authenticated or server.started.is_set():
        return Outcome.AUTHENTICATED
    return Outcome.AUTH_FAILED if server.auth_failures else Outcome.NO_AUTH
