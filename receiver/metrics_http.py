"""``/metrics`` over HTTP, held to an allow list and a bound on connections.

The endpoint has no authentication, and whoever reaches it must not be able to take
the receiver's threads: prometheus_client's own server gives every connection a
thread of its own with no time limit, so a few hundred clients that send a byte now
and then (a slowloris) held as many threads. Here

* a connection from outside ``metrics_allow`` (default: loopback) is closed at once,
  before a byte is read;
* at most ``metrics_max_connections`` are served at once; one more is closed at once;
* each has ``metrics_timeout`` seconds in all, from accept to its last byte written,
  however slowly its bytes come: a watch on the server's own thread cuts the socket
  of one that runs over (a per-read timeout alone would be renewed by each byte).

Refusals are logged through a :class:`~receiver.limits.RefusalLog` (one line per kind
and interval) and counted as ``refusals_total{reason="metrics"}``.
"""

from __future__ import annotations

import http.server
import logging
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from ipaddress import ip_network
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from receiver.auth import is_allowed, peer_address
from receiver.limits import RefusalLog
from receiver.metrics import ReceiverMetrics
from sealsync.config import DEFAULT_ALLOW, IPNetwork, format_endpoint
from sealsync.errors import SealsyncError, listen_error

log = logging.getLogger("sealsync.receiver.metrics")

DEFAULT_MAX_CONNECTIONS = 8
DEFAULT_TIMEOUT = 10.0
WATCH_INTERVAL = 0.25
"""Seconds between the watch's looks at the connections' deadlines."""


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET ``/metrics`` (or ``/``): the registry in the format the scraper asks for."""

    server: _Server
    server_version = "sealsync"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.timeout_seconds)  # each read and write

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = urllib.parse.urlsplit(self.path).path
        if path not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        """No line per scrape: a scraper every 15 s would fill the receiver's log."""


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() cuts the connections instead of waiting on them
    allow_reuse_address = True
    request_queue_size = 64  # a burst of connections is accepted and refused, not left waiting

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        registry: CollectorRegistry,
        allow: Sequence[IPNetwork],
        max_connections: int,
        timeout: float,
        refusals: RefusalLog,
        on_refused: Callable[[], None],
    ) -> None:
        self.address_family = family
        self.registry = registry
        self.allow = list(allow)
        self.max_connections = max_connections
        self.timeout_seconds = timeout
        self.refusals = refusals
        self.on_refused = on_refused
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._last_watch = 0.0
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse lookup of the address (a DNS query at start)."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._deadlines)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        try:
            ip = peer_address(str(client_address[0]))
        except ValueError:
            return False
        if not is_allowed(ip, self.allow):
            self._refuse(
                "metrics allow list",
                str(ip),
                f"/metrics connection from {ip} refused: address not in metrics_allow",
            )
            return False
        with self._lock:
            open_now = len(self._deadlines)
            if open_now < self.max_connections:
                self._deadlines[request] = time.monotonic() + self.timeout_seconds
                return True
        self._refuse(
            "metrics connection limit",
            str(ip),
            f"/metrics connection from {ip} refused: {open_now} connections open "
            "(metrics_max_connections)",
        )
        return False

    def _refuse(self, kind: str, ip: str, message: str) -> None:
        self.refusals.refused(kind, logging.WARNING, ip, message)
        self.on_refused()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """On the serving thread between accepts: cut the connections past their time
        (the handler's blocked read or write then fails and its thread ends)."""
        now = time.monotonic()
        if now - self._last_watch < WATCH_INTERVAL:
            return
        self._last_watch = now
        self.refusals.flush()
        self.cut(now)

    def cut(self, now: float | None = None) -> None:
        """Cut the connections whose time ran out by ``now`` (None: every one)."""
        with self._lock:
            late = [s for s, deadline in self._deadlines.items() if now is None or deadline <= now]
        for sock in late:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone mid-answer or cut by the watch: routine, one debug line."""
        log.debug("/metrics connection from %s ended early", client_address[0])


class MetricsServer:
    """``/metrics`` over HTTP on its own thread, for as long as the service runs."""

    def __init__(
        self,
        metrics: ReceiverMetrics,
        host: str,
        port: int,
        *,
        allow: Sequence[IPNetwork] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        ProcessCollector(registry=self.registry)  # start time, memory, open files
        self.metrics = metrics
        self.host, self.port = host, port
        self.allow = list(allow) if allow is not None else [ip_network(n) for n in DEFAULT_ALLOW]
        self.max_connections = max_connections
        self.timeout = timeout
        self.refusals = RefusalLog(lambda level, line: log.log(level, "%s", line))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); useful with port 0."""
        if self._server is None:
            raise SealsyncError("the metrics endpoint is not serving")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def active(self) -> int:
        """Connections being served now."""
        return self._server.active if self._server is not None else 0

    def start(self) -> MetricsServer:
        try:
            infos = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            self._server = _Server(
                (self.host, self.port),
                infos[0][0],
                self.registry,
                self.allow,
                self.max_connections,
                self.timeout,
                self.refusals,
                lambda: self.metrics.refused("metrics"),
            )
        except OSError as exc:
            where = format_endpoint(self.host, self.port)
            raise listen_error(
                f"cannot serve metrics on {where}", "[receiver] metrics_listen", exc
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": WATCH_INTERVAL},
            name="sealsync-metrics",
            daemon=True,
        )
        self._thread.start()
        host, port = self.address
        log.info("metrics on http://%s/metrics", format_endpoint(host, port))
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server's thread; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.cut()  # a connection in progress ends now, not at its deadline
        server.server_close()
        if self._thread is not None:
            self._thread.join()
