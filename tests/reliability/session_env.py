"""A receiver's session machinery in process, driven over socket pairs (no SSH).

What ``ReceiverService`` builds for every connection — a ``SessionContext`` with
device owners, sender keys, schema store, rounds and loaders over a real
``DirectoryStorage`` — with the peer being a test writing raw bytes. Data files are
small stand-ins read by :func:`fake_inspect` (``DEVICES:a,b`` on the first line), so
hostile frames exercise the session, not the native TsFile reader (the SSH tests
cover that with the worker pool). Not a test module.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from receiver_load_helpers import UUID_A, loaded_path
from receiver_service_helpers import send_file

from receiver.auth import SenderKeys
from receiver.layout import SenderFolder
from receiver.load.owners import DeviceOwners
from receiver.rounds import Rounds
from receiver.schema import SchemaStore
from receiver.session import Session, SessionContext
from receiver.storage import DirectoryStorage
from sealsync.errors import FormatError
from sealsync.formats.common import FileInfo
from sealsync.protocol import PROTOCOL_VERSION, AnyMessage, Hello, Welcome, receive, send

FP_A = "SHA256:keyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
FP_B = "SHA256:keyBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
PEER = "10.1.2.3"


def fake_inspect(path: Path) -> FileInfo:
    """``DEVICES:d1,d2`` on the first line; anything else is not a data file."""
    head = Path(path).read_bytes().split(b"\n", 1)[0]
    if not head.startswith(b"DEVICES:"):
        raise FormatError(f"{Path(path).name}: no DEVICES header")
    devices = tuple(d for d in head[len(b"DEVICES:") :].decode(errors="replace").split(",") if d)
    return FileInfo(devices=devices, rows=1)


def data_file(*devices: str, body: bytes = b"payload") -> bytes:
    return b"DEVICES:" + ",".join(devices).encode() + b"\n" + body


class GatedStorage(DirectoryStorage):
    """DirectoryStorage whose loads wait while ``gate`` is clear (a slow host)."""

    def __init__(self, data_dirs: list[Path]) -> None:
        super().__init__(data_dirs)
        self.gate = threading.Event()
        self.gate.set()

    def load(self, sender: str, name: str, staged: Path) -> None:
        if not self.gate.wait(30):
            raise OSError("gate never opened")
        super().load(sender, name, staged)


class SessionEnv:
    """Receiver folders under ``root``: ``data0``.., ``schema``; sessions on socket pairs."""

    def __init__(
        self, root: Path, n_dirs: int = 1, load_wait: float = 5.0, timeout: float = 10.0
    ) -> None:
        self.root = root
        self.data_dirs = [root / f"data{i}" for i in range(n_dirs)]
        for d in self.data_dirs:
            d.mkdir(parents=True)
        self.schema_dir = root / "schema"
        self.timeout = timeout
        self.storage = GatedStorage(self.data_dirs)
        self.owners = DeviceOwners(self.schema_dir)
        self.rounds = Rounds(self.storage, self.owners, fake_inspect)
        self.ctx = SessionContext(
            data_dirs=self.data_dirs,
            owners=self.owners,
            inspect=fake_inspect,
            sender_keys=SenderKeys(self.schema_dir),
            schema=SchemaStore(self.schema_dir),
            rounds=self.rounds,
            load_wait=load_wait,
        )
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []

    def connect(
        self, fingerprint: str = FP_A, peer: str = PEER
    ) -> tuple[socket.socket, threading.Thread]:
        ours, theirs = socket.socketpair()
        self.sockets.append(ours)
        ours.settimeout(self.timeout)
        theirs.settimeout(self.timeout)
        session = Session(theirs, self.ctx, peer, fingerprint)

        def run() -> None:
            try:
                session.run()
            finally:
                theirs.close()

        thread = threading.Thread(target=run, name="test-session", daemon=True)
        thread.start()
        self.threads.append(thread)
        return ours, thread

    def folder(self, uuid: str = UUID_A, i: int = 0, peer: str = PEER) -> SenderFolder:
        return SenderFolder(self.data_dirs[i], peer, uuid)

    def loaded_path(self, uuid: str, name: str, i: int = 0) -> Path:
        return loaded_path(self.data_dirs[i], uuid, name)

    def close(self) -> None:
        """Ends every session (the test's ends of their sockets closed too) and the
        receiver's parts."""
        self.storage.gate.set()
        for sock in self.sockets:
            sock.close()
        for t in self.threads:
            t.join(10)
        self.rounds.close()
        self.owners.close()
        self.ctx.executor.shutdown()


def say_hello(sock: socket.socket, uuid: str = UUID_A) -> AnyMessage:
    """HELLO as ``uuid``; the receiver's answer, whatever it is."""
    send(sock, Hello(PROTOCOL_VERSION, uuid, "edge"))
    return receive(sock)


def hello(sock: socket.socket, uuid: str = UUID_A) -> Welcome:
    """HELLO as ``uuid``, which the receiver must welcome."""
    msg = say_hello(sock, uuid)
    assert isinstance(msg, Welcome), msg
    return msg


offer = send_file
"""FILE_BEGIN, CHUNKs, FILE_END for ``data`` and its sidecars; the verdict is read later.
The stand-in files here are far below one 7000-byte CHUNK, so each goes in one."""
