"""The receiver plugin: an SSH server the host process embeds (docs/design.md §4.1, §5.1).

``ReceiverService`` is the plugin's lifecycle: ``start()`` takes the storage lock (one
receiver per storage, receiver/lock.py), replays unfinished rounds (``recover_all``)
before accepting anything, listens, and serves ``/metrics`` if ``metrics_listen`` is
set (receiver/metrics_http.py); ``stop()`` closes the listener and every connection
and waits for their threads. What happens to each connection, from the allow list and
the admission limits to its session or its ``busy`` answer, is
:class:`~receiver.connections.Connections`. A housekeeping thread ends the sessions of
senders retired meanwhile, writes the refused-connection summaries, and sweeps expired
partial uploads on a timer.
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

from receiver import umask
from receiver.auth import RETIRED, SenderKeys
from receiver.connections import Connections
from receiver.identity import folders
from receiver.incoming import sync_method_in_effect
from receiver.inspect_pool import InspectPool, verify_in_worker
from receiver.leases import Leases
from receiver.limits import RefusalLog
from receiver.liveness import INTERVAL, StorageWatch
from receiver.load.owners import DeviceOwners, scope_for
from receiver.lock import StorageLock
from receiver.metrics import ReceiverMetrics
from receiver.metrics_http import MetricsServer
from receiver.partials import sweep_all
from receiver.recover.replay import recover_all
from receiver.rounds import Rounds
from receiver.schema import SchemaStore
from receiver.session import DEFAULT_LOAD_WAIT, SessionContext
from receiver.session_limits import limits_for
from receiver.ssh_server import POLL
from receiver.storage import Storage, as_storage, open_storage
from sealsync.config import ReceiverConfig, format_endpoint
from sealsync.errors import SealsyncError, listen_error
from sealsync.monoclock import use_monotonic_clock

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

log = logging.getLogger(f"sealsync.{__name__}")

STOP_JOIN_TIMEOUT = 5.0
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
        self._own_storage = storage is None  # the host closes what it passed
        self.storage: Storage = as_storage(storage) if storage is not None else open_storage(config)
        self._storage_lock = StorageLock(config.schema_dir, config.data_dirs)
        self.watch = StorageWatch(folders(config))
        self._storage_down = False
        self.metrics = ReceiverMetrics(
            [("schema", config.schema_dir), *(("data", d) for d in config.data_dirs)],
            paths=config.metrics_paths,
        )
        self.metrics.remember_senders(config.schema_dir, list(config.data_dirs))
        watch = self.watch
        self.metrics.storage_ok = lambda: watch.ok
        self._metrics_server: MetricsServer | None = None
        self.owners = DeviceOwners(config.schema_dir, config.max_devices_per_sender)
        # before any worker starts: it may refuse
        limits = limits_for(config, self.storage, self.owners)
        self._device_scope = scope_for(config, self.storage)  # IoTDB keeps one owner: exit 2
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
        leases = Leases(config.schema_dir)
        self.owners.names = leases.name_of  # a conflict names the owner by its name
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
            storage_problem=self.watch.check,
            leases=leases,
        )
        self.refusals = RefusalLog(lambda level, line: log.log(level, "%s", line))
        self.connections = Connections(config, self.context, self.metrics, self.refusals)
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._housekeeper: threading.Thread | None = None
        self._state = "new"  # new -> running -> stopped
        self._umask_held = False  # receiver/umask.py, from start() to stop()

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
        """Sessions running now."""
        return self.connections.sessions

    @property
    def max_connections(self) -> int:
        """The bound on open connections (past it, a few more only hear ``busy``)."""
        return self.connections.max_connections

    def start(self) -> ReceiverService:
        """Lock the storage, recover unfinished rounds, then listen and accept in a
        background thread. ReceiverLocked (exit 75) if another receiver has the storage."""
        if self._state != "new":
            raise SealsyncError(f"the receiver service cannot start: it is {self._state}")
        umask.tighten()  # given back at stop(), which a failed start runs too
        self._umask_held = True
        try:
            self._storage_lock.acquire()
            self.watch.start()  # the storage's identity, looked at again while it runs
            self.owners.set_scope(self._device_scope)
            host_key = load_host_key(self.config.host_key)
            if self._pool is not None:
                self._pool.warm()
            self.storage.start()
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
                self._metrics_server = MetricsServer(
                    self.metrics,
                    host,
                    port,
                    allow=self.config.metrics_allow,
                    max_connections=self.config.metrics_max_connections,
                    timeout=self.config.metrics_timeout,
                ).start()
        except BaseException:
            self.stop()  # the pool may have started for recovery
            raise
        self._state = "running"
        self.connections.open(host_key)
        self._accept_thread = threading.Thread(
            target=self.connections.accept_loop,
            args=(self._listener, POLL),
            name="sealsync-accept",
            daemon=True,
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
        transports, threads = self.connections.shut()
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
        if self._pool is not None:
            self._pool.close()  # a check in progress ends now: no session waits for it
        deadline = time.monotonic() + STOP_JOIN_TIMEOUT
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("%s did not stop in time", thread.name)
        self.context.executor.shutdown(wait=False, cancel_futures=True)
        self.owners.close()
        if self._own_storage:
            self.storage.close()
        self._storage_lock.release()  # last: nothing of this service touches the storage now
        if self._umask_held:
            self._umask_held = False
            umask.release()
        if was_running:
            log.info("receiver stopped")

    def __enter__(self) -> ReceiverService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- housekeeping ----------------------------------------------------------------

    def _housekeeping(self) -> None:
        """Every second: end the sessions of senders retired meanwhile (``sealsync
        senders retire`` edits the bindings from another process); every
        ``partial_sweep_interval``: sweep expired partial uploads of every sender, so
        that expiry never waits for a round of that sender. Never raises."""
        interval = partial_sweep_interval(self.config.partial_max_age)
        next_sweep = time.monotonic() + interval
        next_look = time.monotonic() + INTERVAL
        while not self._stopping.wait(HOUSEKEEPING_TICK):
            try:
                self.refusals.flush()
                self._end_retired()
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + INTERVAL
                    self._watch_storage()
                if self._storage_down:
                    continue  # nothing is swept in whatever is at the storage's path now
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + interval
                    removed = sweep_all(list(self.config.data_dirs), self.config.partial_max_age)
                    if removed:
                        log.info("removed %d expired partial-upload file(s)", removed)
            except Exception:
                log.exception("housekeeping failed")

    def _watch_storage(self) -> None:
        """Look at the storage (receiver/liveness.py): gone, stop its loaders and end
        every session; back, take rounds again."""
        problem = self.watch.check()
        if problem is not None and not self._storage_down:
            self._storage_down = True
            self.rounds.suspend(problem)
            for _, channel in self.connections.live():
                transport = channel.get_transport()
                (transport or channel).close()
        elif problem is None and self._storage_down:
            self._storage_down = False
            self.rounds.resume()

    def _end_retired(self) -> None:
        """Close the connection of every running session whose sender was retired."""
        live = self.connections.live()
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
