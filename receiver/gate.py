"""What a session checks before a sender may write (docs/design.md §4.2, §4.10, §5.1).

Three gates, each answered with an ERROR frame and the end of that session only:

* at HELLO, the protocol version (``spec.negotiate``: one version older or newer than
  the receiver's is served, at the older of the two);
* the storage: still the one the service started with (receiver/liveness.py), looked
  at before the key binding is written at HELLO, before a sender's schema or round
  writes, and before a round's commit; gone, ERROR ``io`` with the watch's line;
* the sender's identity lease (receiver/leases.py): offered at LEASE, recorded when
  the sender's next frame arrives; a sender that holds one here must present it
  before it writes (SCHEMA, ROUND_START), and cannot speak protocol version 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from receiver.leases import Grant, Leases, Refused
from receiver.metrics import ReceiverMetrics
from sealsync.errors import SealsyncError
from sealsync.printable import printable
from sealsync.protocol import (
    PROTOCOL_VERSION,
    ErrorCode,
    Hello,
    Lease,
    LeaseGrant,
    ProtocolError,
    negotiate,
)

log = logging.getLogger(f"sealsync.{__name__}")


class StorageGone(ProtocolError):
    """The storage is not the one the service started with: ERROR ``io``, the session
    ends, nothing is written (receiver/liveness.py)."""


class SessionGate:
    """One session's gates (see the module)."""

    def __init__(
        self,
        storage_problem: Callable[[], str | None],
        leases: Leases | None,
        metrics: ReceiverMetrics,
        peer_ip: str,
    ) -> None:
        self._storage_problem = storage_problem
        self._leases = leases
        self._metrics = metrics
        self._peer_ip = peer_ip
        self._uuid = ""
        self._name = ""
        self._grant: Grant | None = None  # offered, recorded at the sender's next frame
        self._leased = False

    def hello(self, msg: Hello) -> int:
        """The session's protocol version; ERROR ``version`` or ``io`` otherwise."""
        version = negotiate(msg.version)
        if version is None:
            log.warning(
                "refused: sender %s from %s speaks protocol version %d, this receiver %d",
                msg.uuid,
                self._peer_ip,
                msg.version,
                PROTOCOL_VERSION,
            )
            raise ProtocolError(
                f"protocol version {msg.version} not supported (receiver speaks "
                f"{PROTOCOL_VERSION}, and serves one version older and newer): upgrade "
                f"the {'receiver' if msg.version > PROTOCOL_VERSION else 'sender'}",
                code=ErrorCode.VERSION,
            )
        self.storage()  # before the key binding is written into the schema dir
        return version

    def admitted(self, uuid: str, name: str, version: int) -> None:
        """The sender's key binding holds; a sender with a lease here must speak the
        version that presents it (ERROR ``auth`` otherwise)."""
        self._uuid, self._name = uuid, name
        if version < 2 and self._leases is not None and self._leases.held(uuid):
            log.warning("refused: sender %s from %s: protocol version 1", uuid, self._peer_ip)
            raise ProtocolError(
                f"sender {uuid} holds an identity lease on this receiver, which a sender "
                "of protocol version 1 cannot show: upgrade this sender",
                code=ErrorCode.AUTH,
            )

    def storage(self) -> None:
        """StorageGone (ERROR ``io``, the watch's line) unless the storage is there."""
        problem = self._storage_problem()
        if problem is not None:
            raise StorageGone(problem, code=ErrorCode.IO)

    def may_write(self) -> None:
        """Before a sender's schema or round: its lease presented, the storage there."""
        if not self._leased and self._leases is not None and self._leases.held(self._uuid):
            raise ProtocolError(
                f"sender {self._uuid} holds an identity lease on this receiver: LEASE first",
                code=ErrorCode.IDENTITY,
            )
        self.storage()

    def lease(self, msg: Lease) -> LeaseGrant:
        """The answer to LEASE: the next lease, or ERROR ``identity``."""
        if self._leased or self._grant is not None:
            raise ProtocolError("LEASE not expected twice", code=ErrorCode.UNEXPECTED)
        if self._leases is None:  # a host that checks no leases: one of its own making
            self._leased = True
            return LeaseGrant(f"1-{'0' * 16}-{'0' * 32}")
        self.storage()
        try:
            self._grant = self._leases.offer(
                self._uuid, msg.lease, msg.reclaim, self._name, msg.host, self._peer_ip
            )
        except Refused as exc:
            raise self._refused(exc) from None
        except SealsyncError as exc:  # its own records unreadable: the receiver's problem
            raise ProtocolError(str(exc), code=ErrorCode.IO) from None
        return LeaseGrant(self._grant.token)

    def arrived(self) -> None:
        """A frame arrived: the sender recorded the lease it was offered (it sends
        nothing before), which is recorded here now."""
        grant, self._grant = self._grant, None
        if grant is None or self._leases is None:
            return
        try:
            self._leases.confirm(grant)
        except Refused as exc:
            raise self._refused(exc) from None
        except SealsyncError as exc:
            raise ProtocolError(str(exc), code=ErrorCode.IO) from None
        self._leased = True

    def _refused(self, exc: Refused) -> ProtocolError:
        log.warning("refused: %s", printable(exc))
        self._metrics.refused("identity", self._uuid)
        return ProtocolError(str(exc), code=ErrorCode.IDENTITY)
