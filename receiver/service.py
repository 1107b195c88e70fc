"""The receiver plugin: an SSH server the host process embeds (docs/design.md §4.1, §5.1).

``ReceiverService`` listens on TCP, and for each connection, in this order:

1. checks the socket's **peer address** against the allow list and closes at once
   if it is outside — before any SSH byte, never trusting what the client says
   (docs/design.md §9.7);
2. admits it as a *startup* (:class:`~receiver.limits.Admission`: penalised sources,
   ``per_source_max_startups``, ``max_startups`` with random early drop) or closes it
   at once; a hard bound on all connections backs this up;
3. sets ``TCP_NODELAY`` (paramiko never does; without it a verdict per file waits
   for Nagle + delayed ACK, a few dozen files a second instead of hundreds,
   docs/design.md §5.1);
4. runs a paramiko server ``Transport`` (:mod:`receiver.ssh_server`) announcing
   ``SSH-2.0-sealsync`` (no library name or version for a scanner to match), with the
   host key, AES-GCM first, a window and packets large enough to keep a LAN link full,
   public-key auth only, at most ``MAX_AUTH_TRIES`` keys tried per connection, and
   keepalives (``client_alive_*``,
   :mod:`sealsync.keepalive`) that close it once the sender has gone silent, so a
   dead link frees its session;
5. gives it ``login_grace_time`` from accept to open the ``sealsync`` subsystem on one
   ``session`` channel, and ``SESSION_WAIT`` from its key's acceptance; the
   connection leaves the startup counts once its key is accepted (and takes one of
   the key's ``max_sessions_per_key`` connection slots), and one that fails, runs out
   of time, or authenticates and opens no session earns its source a penalty;
6. runs a :class:`~receiver.session.Session` on the subsystem's thread. Over
   ``max_sessions``, over ``max_sessions_per_key`` for its key, or past the bound on
   connections (a few are served only for this), the sender gets an ERROR frame
   ``busy`` after its HELLO saying which, and retries later.

Log lines about refused connections go through a :class:`~receiver.limits.RefusalLog`
(one per kind and interval, then a summary). A housekeeping thread ends the sessions
of senders retired meanwhile and sweeps expired partial uploads on a timer.

Failures in a connection are logged and end that connection only. ``start()``
takes the storage lock (one receiver per storage, receiver/lock.py), replays
unfinished rounds (``recover_all``) before accepting anything, and serves
``/metrics`` if ``metrics_listen`` is set (receiver/metrics.py).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

from receiver.auth import RETIRED, AuthorizedKeys, SenderKeys, is_allowed, peer_address
from receiver.incoming import sync_method_in_effect
from receiver.inspect_pool import InspectPool, verify_in_worker
from receiver.limits import SESSION_WAIT, Admission, Outcome, RefusalLog, SlotCounter, Startup
from receiver.load.owners import DeviceOwners
from receiver.lock import StorageLock
from receiver.metrics import MetricsServer, ReceiverMetrics
from receiver.partials import sweep_all
from receiver.recover.replay import recover_all
from receiver.rounds import Rounds
from receiver.schema import SchemaStore
from receiver.session import DEFAULT_LOAD_WAIT, Session, SessionContext
from receiver.session_limits import limits_for
from receiver.ssh_server import POLL, SshServer, server_transport, wait_for_subsystem
from receiver.storage import DirectoryStorage, Storage, log_migration
from sealsync.config import ReceiverConfig, format_endpoint
from sealsync.errors import SealsyncError, listen_error
from sealsync.keepalive import ActivitySocket, Keepalive
from sealsync.monoclock import use_monotonic_clock
from sealsync.protocol import (
    SUBSYSTEM,
    Error,
    ErrorCode,
    channel_stream,
    receive,
    send,
)

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

BUSY_REPLY_TIMEOUT = 5.0
STOP_JOIN_TIMEOUT = 5.0
AT_LIMIT_RESERVE = 8
"""Connections past ``max_connections`` served only to answer ``busy`` (at the limit)."""
HOUSEKEEPING_TICK = 1.0
"""Seconds between the service's checks for retired senders."""


def partial_sweep_interval(max_age: float) -> float:
    """How often expired partial uploads are swept: a tenth of their lifetime, between
    one second and five minutes."""
    return min(max(max_age / 10, 1.0), 300.0)


def load_host_key(path: Path) -> paramiko.PKey:
    """The server's private host key (Ed25519, ECDSA or RSA; OpenSSH or PEM)."""
    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        raise SealsyncError(f"host key {path} does not exist") from None
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise SealsyncError(f"cannot load host key {path}: {exc}") from None


class ReceiverService:
    """The receiver plugin: ``start()``, ``stop()``, or use it as a context manager.

    ``config`` is a ReceiverConfig or the ``[receiver]`` table as a mapping (paths
    relative to ``base_dir``); ``storage`` is the host's adapter (default: files in
    the receiver's data dirs). ``inspect`` replaces the worker pool (a host that
    already isolates parsing, or tests); ``load_wait`` is how long ROUND_END waits
    for the loader before answering ``loaded=False``.
    """

    def __init__(
        self,
        config: ReceiverConfig | Mapping[str, Any],
        storage: Storage | None = None,
        base_dir: Path | str | None = None,
        *,
        inspect: Callable[[Path], FileInfo] | None = None,
        load_wait: float = DEFAULT_LOAD_WAIT,
        inspect_workers: int = 2,
    ) -> None:
        if not isinstance(config, ReceiverConfig):
            config = ReceiverConfig.from_mapping(config, Path(base_dir or Path.cwd()))
        self.config = config
        use_monotonic_clock()  # paramiko's timeouts must not end on a wall-clock step
        self._own_storage = storage is None and config.storage == "iotdb"
        if storage is None and config.storage == "iotdb":
            from receiver.iotdb_storage import storage_for  # the IoTDB client only if asked

            storage = storage_for(config)
        self.storage: Storage = (
            storage if storage is not None else DirectoryStorage(list(config.data_dirs))
        )
        self._storage_lock = StorageLock(config.schema_dir, config.data_dirs)
        self.metrics = ReceiverMetrics(
            [("schema", config.schema_dir), *(("data", d) for d in config.data_dirs)]
        )
        self._metrics_server: MetricsServer | None = None
        # before any worker starts: it may refuse
        limits = limits_for(config, self.storage)
        self._pool: InspectPool | None = None
        inspect_many = None
        if inspect is None:
            self._pool = InspectPool(workers=inspect_workers, target=verify_in_worker)
            inspect = self._pool.inspect
            inspect_many = self.metrics.tracked(self._pool.inspect_many, count=len)
            self.metrics.workers_alive = self._pool.alive
            pool = self._pool
            self.metrics.workers_unavailable = lambda: pool.unavailable is not None
        inspect = self.metrics.tracked(inspect)
        self._inspect = inspect
        self.owners = DeviceOwners(config.schema_dir)
        self.rounds = Rounds(self.storage, self.owners, inspect)
        sender_keys = SenderKeys(config.schema_dir, config.max_uuids_per_key)
        self.metrics.known_senders = lambda: [
            uuid for uuid, b in sender_keys.bindings().items() if b.fingerprint != RETIRED
        ]
        self.context = SessionContext(
            data_dirs=list(config.data_dirs),
            owners=self.owners,
            inspect=inspect,
            inspect_many=inspect_many,
            sender_keys=sender_keys,
            schema=SchemaStore(config.schema_dir),
            rounds=self.rounds,
            load_wait=load_wait,
            limits=limits,
            metrics=self.metrics,
            partial_max_age=config.partial_max_age,
            sync_method=config.sync_method,
        )
        self._authorized = AuthorizedKeys(config.authorized_keys)
        self.admission = Admission(
            config.max_startups, config.per_source_max_startups, config.per_source_penalty_max
        )
        self.key_sessions = SlotCounter(config.max_sessions_per_key)
        """Connections per key, taken when the key is accepted (sessions need one each)."""
        # Startups are bounded by the admission; this bounds everything else (sessions,
        # and authenticated connections on their way to a session or a busy answer).
        self.max_connections = config.max_startups.full + 2 * config.max_sessions + 4
        self.refusals = RefusalLog(lambda level, line: log.log(level, "%s", line))
        self._lock = threading.Lock()
        self._host_key: paramiko.PKey | None = None
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._connections: dict[threading.Thread, paramiko.Transport | None] = {}
        self._live: dict[Session, paramiko.Channel] = {}  # sessions running now
        self._sessions = 0
        self._stopping = threading.Event()
        self._housekeeper: threading.Thread | None = None
        self._state = "new"  # new -> running -> stopped

    # --- lifecycle -------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); useful with port 0."""
        if self._listener is None:
            raise SealsyncError("the receiver is not listening")
        host, port = self._listener.getsockname()[:2]
        return host, port

    @property
    def sessions(self) -> int:
        with self._lock:
            return self._sessions

    def start(self) -> ReceiverService:
        """Lock the storage, recover unfinished rounds, then listen and accept in a
        background thread. ReceiverLocked (exit 75) if another receiver has the storage."""
        if self._state != "new":
            raise SealsyncError(f"the receiver service cannot start: it is {self._state}")
        try:
            self._storage_lock.acquire()
            self._host_key = load_host_key(self.config.host_key)
            if self._pool is not None:
                self._pool.warm()
            if isinstance(self.storage, DirectoryStorage):
                log_migration(list(self.config.data_dirs))
            recover_all(
                list(self.config.data_dirs),
                self.storage,
                self.owners,
                self._inspect,
                self.config.partial_max_age,
            )
            self._listener = self._listen()
            if self.config.metrics_listen is not None:
                host, port = self.config.metrics_listen
                self._metrics_server = MetricsServer(self.metrics, host, port).start()
        except BaseException:
            self.stop()  # the pool may have started for recovery
            raise
        self._state = "running"
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="sealsync-accept", daemon=True
        )
        self._accept_thread.start()
        self._housekeeper = threading.Thread(
            target=self._housekeeping, name="sealsync-housekeeping", daemon=True
        )
        self._housekeeper.start()
        log.info("receiver listening on %s", format_endpoint(*self.address))
        log.info("sync_method %s", sync_method_in_effect(self.config.sync_method))
        return self

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """The bound (host, port) of ``/metrics``, if it is served."""
        return self._metrics_server.address if self._metrics_server is not None else None

    def _listen(self) -> socket.socket:
        host, port = self.config.listen_host, self.config.listen_port
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family = infos[0][0]
            listener = socket.create_server((host, port), family=family, backlog=64)
            listener.settimeout(POLL)  # the accept loop checks for stop() between waits
            return listener
        except OSError as exc:
            raise listen_error(
                f"cannot listen on {self.config.listen}", "[receiver] listen", exc
            ) from None

    def stop(self) -> None:
        """Close the listener and every session, wait for their threads; idempotent."""
        with self._lock:
            if self._state == "stopped":
                return
            was_running = self._state == "running"
            self._state = "stopped"
            transports = [t for t in self._connections.values() if t is not None]
            threads = list(self._connections)
        self._stopping.set()
        if self._housekeeper is not None:
            self._housekeeper.join()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self._listener is not None:
            try:  # wakes the accept() in progress at once
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        if self._accept_thread is not None:
            self._accept_thread.join()
        for transport in transports:
            transport.close()
        self.rounds.close()
        deadline = time.monotonic() + STOP_JOIN_TIMEOUT
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("%s did not stop in time", thread.name)
        self.context.executor.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.close()
        self.owners.close()
        if self._own_storage:
            self.storage.close()  # type: ignore[attr-defined]
        self._storage_lock.release()  # last: nothing of this service touches the storage now
        if was_running:
            log.info("receiver stopped")

    def __enter__(self) -> ReceiverService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- housekeeping ----------------------------------------------------------------

    def _housekeeping(self) -> None:
        """Every second: end the sessions of senders retired meanwhile (``sealsync
        senders remove`` edits the bindings from another process); every
        ``partial_sweep_interval``: sweep expired partial uploads of every sender, so
        that expiry never waits for a round of that sender. Never raises."""
        interval = partial_sweep_interval(self.config.partial_max_age)
        next_sweep = time.monotonic() + interval
        while not self._stopping.wait(HOUSEKEEPING_TICK):
            try:
                self.refusals.flush()
                self._end_retired()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + interval
                    removed = sweep_all(list(self.config.data_dirs), self.config.partial_max_age)
                    if removed:
                        log.info("removed %d expired partial-upload file(s)", removed)
            except Exception:
                log.exception("housekeeping failed")

    def _end_retired(self) -> None:
        """Close the connection of every running session whose sender was retired."""
        with self._lock:
            live = list(self._live.items())
        if not live:
            return
        retired = {
            uuid
            for uuid, binding in self.context.sender_keys.bindings().items()
            if binding.fingerprint == RETIRED
        }
        for session, channel in live:
            if session.uuid and session.uuid in retired:
                log.warning(
                    "sender %s at %s was retired: ending its session", session.uuid, session.peer_ip
                )
                transport = channel.get_transport()
                if transport is not None:
                    transport.close()
                else:
                    channel.close()

    # --- connections -----------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while self._state == "running":
            try:
                sock, _ = listener.accept()  # the address is read back from the socket
            except TimeoutError:
                continue
            except OSError:
                if self._state == "running":
                    log.exception("accept failed")
                    time.sleep(POLL)
                    continue
                return
            try:
                self._admit(sock)
            except Exception:
                log.exception("connection setup failed")
                sock.close()

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
            sock.close()
            return
        with self._lock:
            if self._state != "running":
                sock.close()
                return
            open_now = len(self._connections)
            if open_now >= self.max_connections + AT_LIMIT_RESERVE:
                self.refusals.refused(
                    "connection limit",
                    logging.WARNING,
                    str(ip),
                    f"connection from {ip} refused: {open_now} connections open",
                )
                self.metrics.refused("connections")
                sock.close()
                return
            startup = self.admission.admit(ip)
            if isinstance(startup, str):
                self.refusals.refused(
                    startup.split(" (", 1)[0],
                    logging.INFO,
                    str(ip),
                    f"connection from {ip} refused: {startup}",
                )
                sock.close()
                return
            # Past the bound, a few more are served only to be told why (ERROR busy at
            # their HELLO): a sender then reports the receiver's connection limit rather
            # than a connection closed before the banner.
            at_limit = open_now >= self.max_connections
            thread = threading.Thread(
                target=self._serve_connection,
                args=(sock, str(ip), startup, accepted, at_limit),
                name=f"sealsync-conn-{ip}",
                daemon=True,
            )
            self._connections[thread] = None
        thread.start()

    def _serve_connection(
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
            )
            server.at_limit = at_limit
            with self._lock:
                if self._state != "running":
                    return
                self._connections[me] = transport
            transport.start_server(event=threading.Event(), server=server)  # returns at once
            keepalive = self._keepalive(transport, watched, peer_ip)
            outcome = wait_for_subsystem(
                transport, server, accepted + grace, lambda: self._state == "running"
            )
            if not server.started.is_set():
                if outcome is Outcome.IDLE_AFTER_AUTH:
                    self.refusals.refused(
                        "authenticated, no session",
                        logging.WARNING,
                        peer_ip,
                        f"{peer_ip}: key {server.key_fingerprint} opened no {SUBSYSTEM} session "
                        f"within {SESSION_WAIT:g} s of authenticating, closing",
                    )
                elif outcome is Outcome.GRACE_EXCEEDED or (
                    server.authenticated and transport.is_active() and self._state == "running"
                ):
                    self.refusals.refused(
                        "login grace time",
                        logging.INFO,
                        peer_ip,
                        f"{peer_ip}: no {SUBSYSTEM} session within login_grace_time "
                        f"({self.config.login_grace_time:g} s), closing",
                    )
                else:
                    log.debug("%s: connection closed before a session started", peer_ip)
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
            barred = self.admission.close(startup, outcome)  # before the peer sees the close
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
            with self._lock:
                self._connections.pop(me, None)

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
                admitted = self._state == "running" and self._sessions < self.config.max_sessions
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
