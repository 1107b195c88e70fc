"""A standalone master nobody can reach, found in seconds instead of Spark's minute.

Spark's standalone client tries to register three times, twenty seconds apart, before
it gives up with "All masters are unresponsive", whatever the reason the masters did
not answer. When every master of a ``spark://`` URL refuses the connection, has no
route or no address, that end is certain, so the loader says so at once, with each
master's reason. A master that only lets the connection time out is left to Spark: a
slow or lossy link may still answer within its minute. Any other URL, or one this
module cannot parse, is Spark's to judge (its own error says what is wrong).
"""

from __future__ import annotations

import socket

from sealsync.config import parse_listen
from sealsync.errors import SealsyncError

PREFIX = "spark://"
PROBE_TIMEOUT = 5.0
"""Seconds one master's TCP connection may take before it is left to Spark."""


def masters(url: str) -> list[tuple[str, int]] | None:
    """The (host, port) pairs of a ``spark://h1:p1,h2:p2`` URL; None if it is not one."""
    if not url.startswith(PREFIX):
        return None
    try:
        return [parse_listen(part) for part in url[len(PREFIX) :].split(",")]
    except ValueError:
        return None


def check_masters(url: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise SealsyncError when no master of ``url`` can be connected to, for certain."""
    pairs = masters(url)
    if not pairs:
        return
    reasons = []
    for host, port in pairs:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except TimeoutError:
            return  # maybe slow, not dead: Spark decides
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
    raise SealsyncError(
        f"cannot start Spark on {url}: no master answers ({'; '.join(reasons)}): "
        "start the master, or fix --master or the [loader] master key"
    )
