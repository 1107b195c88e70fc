"""Failures of the transfer, sorted by what the round does about them.

A round retries only what a new connection can fix: the link dropping mid-round
(:class:`ConnectionLost`), the receiver being unreachable while reconnecting
(:class:`Unreachable`), or the receiver saying it is too busy to take this connection
now (:class:`Busy`, from the first connection on). A refused key or an unknown host
key would fail the same way on every attempt, so they end the run at once.

Each class's ``kind`` is what the round history and the metrics count it as.
"""

from __future__ import annotations

from sealsync.errors import SealsyncError


class Unreachable(SealsyncError):
    """No SSH session could be set up: connect refused or timed out, handshake failed."""

    kind = "unreachable"


class Busy(Unreachable):
    """The receiver turned the connection away for its load and said so ("receiver
    busy: ... retry later"): at its connection limit, too many unauthenticated
    connections, this sender's or key's sessions all open; a later connection may be
    served, so it is retried within ``reconnect_time``."""


class HostKeyError(SealsyncError):
    """The receiver's host key is not pinned in known_hosts, or differs from the pinned one."""

    kind = "host_key"


class Refused(SealsyncError):
    """The receiver does not take this sender: its key is not authorized, or the
    ``sealsync`` subsystem is not opened."""

    kind = "refused"


class ConnectionLost(SealsyncError):
    """An established session broke: the peer closed it, the socket failed or went silent."""

    kind = "connection_lost"
