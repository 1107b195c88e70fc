"""``/metrics`` held to an allow list, a bound on connections and a time limit, with no
file system path in its labels (issue 35, item 6), against a real ``sealsync serve``.

* The endpoint had no allow list: anyone who reached the port read it.
* prometheus_client's server gave each connection an untimed thread: 300 slow clients
  made 326 threads in the receiver.
* The disk series were labelled with the receiver's storage paths.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from deploy_helpers import free_port
from reliability.figures import record

from security.attacks import Site, connect_from

pytestmark = pytest.mark.slow


def _log(site: Site) -> str:
    return (site.dep.root / "receiver.log").read_text(errors="replace")


def _scrape(port: int, source: str = "127.0.0.1", timeout: float = 5.0) -> bytes:
    """What ``GET /metrics`` from ``source`` gets back (b"" if the connection is closed)."""
    data = b""
    try:
        with connect_from(("127.0.0.1", port), source, timeout) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: receiver\r\n\r\n")
            while chunk := sock.recv(65536):
                data += chunk
    except ConnectionResetError:
        pass
    return data


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def test_metrics_answer_only_the_allow_list_and_name_no_paths(tmp_path: Path) -> None:
    """``metrics_allow = ["127.0.0.1/32"]``: another loopback address (another host, as
    the receiver sees it) gets no byte; the allowed one reads metrics whose disk
    series name the config's keys, not the receiver's paths."""
    port = free_port()
    site = Site(
        tmp_path / "site", metrics_listen=f"127.0.0.1:{port}", metrics_allow=["127.0.0.1/32"]
    )
    site.start()
    try:
        outside = [_scrape(port, "127.0.0.2") for _ in range(3)]
        inside = _scrape(port)
    finally:
        site.stop()
    body = inside.decode("utf-8", "replace")
    paths = [str(p) for p in (site.dep.root, site.dep.receiver_data, site.dep.receiver_schema)]
    held = outside == [b"", b"", b""] and inside.startswith(b"HTTP/1.0 200")
    held = held and not any(p in body for p in paths)
    record("security", attack="/metrics read from outside metrics_allow", tried=3, held=held)
    assert outside == [b"", b"", b""], outside
    assert inside.startswith(b"HTTP/1.0 200"), inside[:200]
    assert 'sealsync_receiver_disk_free_bytes{path="data_dirs[0]",role="data"}' in body
    assert 'path="schema_dir"' in body
    assert not [p for p in paths if p in body]
    assert 'sealsync_receiver_refusals_total{reason="metrics"} 3.0' in body
    assert "/metrics connection from 127.0.0.2 refused: address not in metrics_allow" in _log(site)


def test_slow_metrics_clients_cannot_take_the_receivers_threads(tmp_path: Path) -> None:
    """For 8 s, 60 clients keep ``/metrics`` connections open, each sending its request
    a byte every half second (a slowloris), and open a new one whenever one is closed
    (300 at most). The receiver serves at most ``metrics_max_connections`` of them at
    once, each for at most ``metrics_timeout`` seconds in all, and closes the rest at
    once: its thread count stays bounded, no connection outlives the timeout, a scrape
    after the attack is answered, and the honest sender's round succeeds."""
    port = free_port()
    site = Site(
        tmp_path / "site",
        metrics_listen=f"127.0.0.1:{port}",
        metrics_max_connections=4,
        metrics_timeout=2.0,
    )
    site.start()
    assert site.dep.proc is not None
    pid = site.dep.proc.pid
    time.sleep(1.0)  # the service's own threads are up
    base = _threads(pid)
    opened: dict[socket.socket, float] = {}
    lasted: list[float] = []
    peak = base
    made = 0

    def open_one() -> None:
        nonlocal made
        sock = connect_from(("127.0.0.1", port), f"127.0.0.{2 + made % 8}")
        sock.setblocking(False)
        opened[sock] = time.monotonic()
        made += 1

    try:
        for _ in range(60):
            open_one()
        until = time.monotonic() + 8.0
        while time.monotonic() < until:
            for sock, started in list(opened.items()):
                try:
                    sock.send(b"G")
                    if sock.recv(4096) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    lasted.append(time.monotonic() - started)
                    sock.close()
                    del opened[sock]
                    if made < 300:
                        open_one()
            peak = max(peak, _threads(pid))
            time.sleep(0.5)
        now = time.monotonic()
        overdue = [now - t for t in opened.values() if now - t > 2.0 + 2.0]
        scrape = _scrape(port)
        code, stderr = site.honest_round()
    finally:
        for sock in opened:
            sock.close()
        site.stop()
    held = peak - base <= 6 and not overdue and scrape.startswith(b"HTTP/1.0 200")
    held = held and code == 0
    record("security", attack="slowloris on /metrics", tried=made, held=held)
    assert peak - base <= 6, f"{peak - base} threads more under the attack"
    assert not overdue, f"{len(overdue)} slow connections outlived metrics_timeout"
    assert lasted and max(lasted) < 2.0 + 2.0, max(lasted, default=0)
    assert made > 60  # the closed ones were opened again
    assert scrape.startswith(b"HTTP/1.0 200"), scrape[:200]
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert "(metrics_max_connections)" in _log(site)
