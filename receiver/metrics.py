"""The receiver's counters, and ``/metrics`` for Prometheus when ``metrics_listen`` is set.

The service, its sessions and rounds count what happens through one
:class:`ReceiverMetrics` object: plain integers under a lock, so that a receiver
nobody scrapes pays an increment per file and nothing else. What is a state rather
than an event (sessions open, inspect workers alive, checks in flight, disk free of
each folder) is read when Prometheus asks, by :meth:`ReceiverMetrics.collect`; disk
space in particular is the file system's answer at scrape time (``statvfs``), never
a stale copy.

:class:`MetricsServer` serves them with prometheus_client's HTTP server, on its own
registry (nothing else in the host process leaks into it), on a thread the service
starts and stops with itself.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from sealsync.config import format_endpoint
from sealsync.errors import SealsyncError, listen_error
from sealsync.protocol import Verdict

log = logging.getLogger(f"sealsync.{__name__}")

PREFIX = "sealsync_receiver"
VERDICTS = (Verdict.VERIFIED, Verdict.MISMATCH, Verdict.CONFLICT, Verdict.REFUSED)
REFUSALS = {
    "allow_list": "the peer address is not in the allow list",
    "connections": "too many connections open",
    "key": "the public key is not in authorized_keys",
    "sender_key": "the sender UUID is bound to another public key",
    "sessions": "max_sessions open: the sender was told busy",
    "round_busy": "the sender folder was busy (a round or loads in progress)",
}
"""Why the receiver turned a connection, session or round away (the ``reason`` label)."""
ROUND_OUTCOMES = ("done", "abandoned")

_F = TypeVar("_F", bound=Callable[..., Any])


class ReceiverMetrics:
    """What one receiver service counts; every method is cheap and thread-safe."""

    def __init__(self, folders: Sequence[tuple[str, Path]] = ()) -> None:
        """``folders``: ``(role, path)`` whose free space is reported at scrape time."""
        self.folders = list(folders)
        self.workers_alive: Callable[[], int] | None = None
        """The inspect pool's live worker count, if the service has a pool."""
        self.workers_unavailable: Callable[[], bool] | None = None
        """Whether the pool's workers do not start (the format check cannot run)."""
        self._lock = threading.Lock()
        self._sessions_open = 0
        self._sessions = 0
        self._bytes = 0
        self._deleted = 0
        self._in_flight = 0
        self._verdicts = dict.fromkeys(VERDICTS, 0)
        self._refusals = dict.fromkeys(REFUSALS, 0)
        self._rounds = dict.fromkeys(ROUND_OUTCOMES, 0)

    # --- events -------------------------------------------------------------------

    def session_opened(self) -> None:
        with self._lock:
            self._sessions += 1
            self._sessions_open += 1

    def session_closed(self) -> None:
        with self._lock:
            self._sessions_open -= 1

    def refused(self, reason: str) -> None:
        """A connection, session or round turned away; ``reason`` is a key of REFUSALS."""
        with self._lock:
            self._refusals[reason] += 1

    def received(self, nbytes: int) -> None:
        """A file stream received whole (its data file and sidecars), whatever its verdict."""
        with self._lock:
            self._bytes += nbytes

    def verdict(self, kind: str) -> None:
        with self._lock:
            self._verdicts[kind] = self._verdicts.get(kind, 0) + 1

    def deleted(self) -> None:
        with self._lock:
            self._deleted += 1

    def round_ended(self, outcome: str) -> None:
        """``done`` at ROUND_END, ``abandoned`` when the session ended inside a round."""
        with self._lock:
            self._rounds[outcome] += 1

    def tracked(self, inspect: _F, count: Callable[..., int] = lambda *_: 1) -> _F:
        """``inspect`` counting its checks in flight (``count``: how many a call makes)."""

        def call(*args: Any) -> Any:
            n = count(*args)
            with self._lock:
                self._in_flight += n
            try:
                return inspect(*args)
            finally:
                with self._lock:
                    self._in_flight -= n

        return call  # type: ignore[return-value]

    # --- reading ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The event counts as plain values (tests, and one consistent read per scrape)."""
        with self._lock:
            return {
                "sessions_open": self._sessions_open,
                "sessions": self._sessions,
                "bytes_received": self._bytes,
                "files_received": self._verdicts[Verdict.VERIFIED],
                "files_deleted": self._deleted,
                "checks_in_flight": self._in_flight,
                "verdicts": dict(self._verdicts),
                "refusals": dict(self._refusals),
                "rounds": dict(self._rounds),
            }

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not scrape the disks at registration."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The Prometheus families, read now (prometheus_client's Collector protocol)."""
        s = self.snapshot()

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        yield gauge("sessions_open", "Sender sessions in progress.", s["sessions_open"])
        yield counter("sessions", "Sender sessions opened (after HELLO).", s["sessions"])
        yield counter(
            "bytes_received",
            "Bytes of file streams received whole (data file and sidecars).",
            s["bytes_received"],
        )
        yield counter(
            "files_received",
            "Files verified, stored and handed to the loader.",
            s["files_received"],
        )
        yield counter("files_deleted", "Deletions acknowledged to senders.", s["files_deleted"])
        verdicts = CounterMetricFamily(
            f"{PREFIX}_verdicts", "File verdicts sent, by kind.", labels=["verdict"]
        )
        for kind, n in s["verdicts"].items():
            verdicts.add_metric([kind], n)
        yield verdicts
        refusals = CounterMetricFamily(
            f"{PREFIX}_refusals",
            "Connections, sessions and rounds turned away, by reason.",
            labels=["reason"],
        )
        for reason, n in s["refusals"].items():
            refusals.add_metric([reason], n)
        yield refusals
        rounds = CounterMetricFamily(
            f"{PREFIX}_rounds", "Rounds ended, by outcome.", labels=["outcome"]
        )
        for outcome, n in s["rounds"].items():
            rounds.add_metric([outcome], n)
        yield rounds
        yield gauge(
            "inspect_checks_in_flight",
            "Format checks of received files submitted and not yet answered.",
            s["checks_in_flight"],
        )
        if self.workers_alive is not None:
            yield gauge(
                "inspect_workers_alive", "Live inspect worker processes.", self.workers_alive()
            )
        if self.workers_unavailable is not None:
            yield gauge(
                "inspect_unavailable",
                "1 while the format check's worker processes do not start (the receiver's "
                "fault: files are answered 'retry later'), else 0.",
                int(self.workers_unavailable()),
            )
        free = GaugeMetricFamily(
            f"{PREFIX}_disk_free_bytes",
            "Space available to the receiver in the file system of each folder.",
            labels=["role", "path"],
        )
        size = GaugeMetricFamily(
            f"{PREFIX}_disk_size_bytes",
            "Size of the file system of each folder.",
            labels=["role", "path"],
        )
        for role, path in self.folders:
            try:
                st = os.statvfs(path)
            except OSError:  # gone or unmounted: no sample, rather than a wrong one
                continue
            free.add_metric([role, str(path)], st.f_bavail * st.f_frsize)
            size.add_metric([role, str(path)], st.f_blocks * st.f_frsize)
        yield free
        yield size


class MetricsServer:
    """``/metrics`` over HTTP on its own thread, for as long as the service runs."""

    def __init__(self, metrics: ReceiverMetrics, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        ProcessCollector(registry=self.registry)  # start time, memory, open files
        self.host, self.port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); useful with port 0."""
        if self._server is None:
            raise SealsyncError("the metrics endpoint is not serving")
        host, port = self._server.server_address[:2]
        return host, port

    def start(self) -> MetricsServer:
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
        except OSError as exc:
            where = format_endpoint(self.host, self.port)
            raise listen_error(
                f"cannot serve metrics on {where}", "[receiver] metrics_listen", exc
            ) from None
        host, port = self.address
        log.info("metrics on http://%s/metrics", format_endpoint(host, port))
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server's thread; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
