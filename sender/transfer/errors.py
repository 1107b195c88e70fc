"""Failures of the transfer, sorted by what the round does about them.

A round retries only what a new connection can fix: the link dropping mid-round
(:class:`ConnectionLost`), or the receiver being unreachable while reconnecting
(:class:`Unreachable`). A refused key or an unknown host key would fail the same way
on every attempt, so they are plain :class:`SealsyncError`\\ s and end the run at once.
"""

from __future__ import annotations

from sealsync.errors import SealsyncError


class Unreachable(SealsyncError):
    """No SSH session could be set up: connect refused or timed out, handshake failed."""


class HostKeyError(SealsyncError):
    """The receiver's host key is not pinned in known_hosts, or differs from the pinned one."""


class ConnectionLost(SealsyncError):
    """An established session broke: the peer closed it, the socket failed or went silent."""
