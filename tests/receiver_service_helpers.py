"""Builders for the receiver service and session tests: keys, config, a raw test client.

The client speaks the wire protocol by hand over a real paramiko client transport, so
that tests can send what a well-behaved sender never would (bad names, bad MD5,
garbage bytes). Not a test module; imported by name (pytest puts this folder on
``sys.path``).
"""

from __future__ import annotations

import hashlib
import itertools
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import paramiko
import tsfile
from receiver_load_helpers import UUID_A

from sealsync.keys import generate_keypair
from sealsync.protocol import (
    HEADER,
    PROTOCOL_VERSION,
    SUBSYSTEM,
    AnyMessage,
    Chunk,
    FileBegin,
    FileEnd,
    Hello,
    Kind,
    RoundStart,
    receive,
    send,
)

_stamp = itertools.count(1)


# --- keys and config ------------------------------------------------------------------


def make_keys(tmp_path: Path, senders: Iterable[str] = ("edge_a", "edge_b")) -> dict[str, Path]:
    """A host key and sender keys (Ed25519, OpenSSH format) under ``tmp_path/keys``."""
    keys = tmp_path / "keys"
    paths = {"host": keys / "host"}
    generate_keypair(paths["host"], comment="host")
    for name in senders:
        paths[name] = keys / name
        generate_keypair(paths[name], comment=name)
    return paths


def authorize(authorized_keys: Path, *private_keys: Path) -> None:
    lines = [Path(f"{k}.pub").read_text(encoding="utf-8") for k in private_keys]
    authorized_keys.write_text("".join(lines), encoding="utf-8")


def receiver_mapping(
    tmp_path: Path,
    keys: dict[str, Path],
    authorized: Iterable[str] = ("edge_a", "edge_b"),
    **extra: Any,
) -> dict[str, Any]:
    """A ``[receiver]`` table on an ephemeral loopback port; its folders exist."""
    for folder in ("schema", "data"):
        (tmp_path / "dc" / folder).mkdir(parents=True, exist_ok=True)
    authorized_keys = tmp_path / "keys" / "authorized_keys"
    authorize(authorized_keys, *(keys[name] for name in authorized))
    table: dict[str, Any] = {
        "listen": "127.0.0.1:1",  # tests then set port 0, which a config may not hold
        "host_key": str(keys["host"]),
        "authorized_keys": str(authorized_keys),
        "schema_dir": str(tmp_path / "dc" / "schema"),
        "data_dirs": [str(tmp_path / "dc" / "data")],
        "allow": ["127.0.0.0/8"],
    }
    table.update(extra)
    return table


# --- data files -------------------------------------------------------------------------


def tsfile_bytes(tmp_path: Path, devices: Iterable[str], rows: int = 3) -> bytes:
    """A tiny complete tree-model TsFile holding ``devices``; each call differs."""
    stamp = next(_stamp)
    path = tmp_path / f".gen-{stamp}.tsfile"
    writer = tsfile.TsFileWriter(str(path))
    for device in devices:
        writer.register_timeseries(device, tsfile.TimeseriesSchema("s1", tsfile.TSDataType.INT64))
        for t in range(rows):
            field = tsfile.Field("s1", stamp * 100 + t, tsfile.TSDataType.INT64)
            writer.write_row_record(tsfile.RowRecord(device, 1000 + t, [field]))
    writer.close()
    data = path.read_bytes()
    path.unlink()
    return data


def md5(*parts: bytes) -> str:
    h = hashlib.md5(usedforsecurity=False)
    for part in parts:
        h.update(part)
    return h.hexdigest()


def send_file(
    conn: Any,
    file_id: int,
    name: str,
    data: bytes,
    resource: bytes = b"res",
    mods: bytes | None = None,
    digest: str | None = None,
    chunk: int = 7000,
    mods2: bytes | None = None,
) -> None:
    """FILE_BEGIN, CHUNKs of ``chunk`` bytes, FILE_END on ``conn`` (a socket or a channel),
    without waiting: the verdict is read later. ``digest`` replaces the stream's MD5;
    ``mods2`` is an ``X.mods2`` sent after the ``X.mods``."""
    stream = data + resource + (mods or b"") + (mods2 or b"")
    sizes = len(data), len(resource), -1 if mods is None else len(mods)
    extra = {} if mods2 is None else {"mods2_size": len(mods2)}
    send(conn, FileBegin(file_id, name, *sizes, **extra))
    for i in range(0, len(stream), chunk):
        send(conn, Chunk(stream[i : i + chunk]))
    send(conn, FileEnd(file_id, digest or md5(stream)))


# --- the test client ----------------------------------------------------------------------


class Client:
    """A paramiko client transport on the ``sealsync`` subsystem, frames by hand."""

    def __init__(self, address: tuple[str, int], key_path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = paramiko.Transport(self.sock)
        try:
            self.transport.start_client(timeout=timeout)
            self.host_key = self.transport.get_remote_server_key()
            self.transport.auth_publickey("sealsync", paramiko.PKey.from_path(key_path))
            self.chan = self.transport.open_session(timeout=timeout)
            self.chan.invoke_subsystem(SUBSYSTEM)
            self.chan.settimeout(timeout)
        except BaseException:
            self.transport.close()
            self.sock.close()
            raise

    def send(self, msg: AnyMessage) -> None:
        send(self.chan, msg)

    def raw(self, data: bytes) -> None:
        self.chan.sendall(data)

    def recv(self) -> AnyMessage:
        return receive(self.chan)

    def closed_by_peer(self) -> bool:
        """True once the receiver closed the channel (EOF), reading anything left first."""
        try:
            while True:
                if not self.chan.recv(65536):
                    return True
        except TimeoutError:
            return False

    def hello(self, uuid: str = UUID_A, version: int = PROTOCOL_VERSION) -> AnyMessage:
        self.send(Hello(version, uuid, "test-sender"))
        return self.recv()

    def round_start(self, data_dir: int = 0) -> AnyMessage:
        self.send(RoundStart(data_dir))
        return self.recv()

    def send_file(self, *args: Any, **kwargs: Any) -> None:
        """:func:`send_file` on this channel (file_id, name, data, resource, mods, digest,
        chunk, mods2): FILE_BEGIN, CHUNKs, FILE_END without waiting (the verdict is read
        later)."""
        send_file(self.chan, *args, **kwargs)

    def close(self) -> None:
        self.transport.close()
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def raw_header(kind: int, length: int) -> bytes:
    return HEADER.pack(kind, length)


def control_frame(kind: Kind, body: bytes) -> bytes:
    """A frame with an arbitrary payload (bypasses the message classes)."""
    return HEADER.pack(kind, len(body)) + body
