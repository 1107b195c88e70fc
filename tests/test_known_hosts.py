"""The sender's SSH client: host key pinning, identity loading, connection failures.

Runs against a minimal in-test paramiko server that records what the client did,
so "refused before authenticating" is checked, not assumed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from sealsync.errors import SealsyncError
from sealsync.keys import fingerprint, generate_keypair
from sealsync.protocol import SSH_MAX_PACKET_SIZE, SSH_WINDOW_SIZE, SUBSYSTEM
from sender.transfer.client import (
    check_host_key,
    connect,
    known_hosts_name,
    load_identity,
)
from sender.transfer.errors import HostKeyError, Unreachable


class _Policy(paramiko.ServerInterface):
    def __init__(self, authorized: bytes, subsystem_ok: bool) -> None:
        self.authorized = authorized
        self.subsystem_ok = subsystem_ok
        self.auth_attempts: list[str] = []
        self.subsystems: list[str] = []
        self.answer_and_close: bytes | None = None
        """If set: the subsystem writes this and closes the channel before its request
        is answered, as a receiver refusing a greeting's HELLO can."""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.auth_attempts.append(fingerprint(key))
        ok = key.asbytes() == self.authorized
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_UNKNOWN_CHANNEL_TYPE

    def check_channel_subsystem_request(self, channel: paramiko.Channel, name: str) -> bool:
        self.subsystems.append(name)
        if self.answer_and_close is not None:
            channel.sendall(self.answer_and_close)
            channel.close()
        return self.subsystem_ok and name == SUBSYSTEM


class MiniServer:
    """Accepts connections on 127.0.0.1 and runs a paramiko server transport for each."""

    def __init__(
        self, host_keys: list[paramiko.PKey], authorized: bytes, subsystem_ok: bool = True
    ) -> None:
        self.policy = _Policy(authorized, subsystem_ok)
        self.host_keys = host_keys
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.transports: list[paramiko.Transport] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            for key in self.host_keys:
                transport.add_server_key(key)
            self.transports.append(transport)
            try:
                transport.start_server(server=self.policy)
            except (paramiko.SSHException, EOFError, OSError):
                pass

    def close(self) -> None:
        self.listener.close()
        for t in self.transports:
            t.close()


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("host", "other_host", "sender", "stranger"):
        out[name] = tmp_path / "keys" / name
        generate_keypair(out[name], comment=name)
    return out


def pkey(path: Path) -> paramiko.PKey:
    return paramiko.PKey.from_path(path)


def pub_line(path: Path) -> str:
    return Path(f"{path}.pub").read_text().strip()


@pytest.fixture()
def server(keys: dict[str, Path]) -> Iterator[MiniServer]:
    srv = MiniServer([pkey(keys["host"])], pkey(keys["sender"]).asbytes())
    yield srv
    srv.close()


def known_hosts(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def entry(name: str, key_path: Path) -> str:
    key_type, blob = pub_line(key_path).split()[:2]
    return f"{name} {key_type} {blob}"


@pytest.mark.slow
def test_known_host_connects_with_the_fast_settings(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{server.port}", keys["host"]))
    with connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh) as conn:
        assert conn.transport.is_authenticated()
        assert conn.transport.local_cipher == "aes128-gcm@openssh.com"
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert (conn.channel.in_window_size, conn.channel.in_max_packet_size) == (
            SSH_WINDOW_SIZE,
            SSH_MAX_PACKET_SIZE,
        )
        assert conn.address == f"127.0.0.1:{server.port}"
    assert server.policy.subsystems == [SUBSYSTEM]
    assert server.policy.auth_attempts == [fingerprint(pkey(keys["sender"]))]


@pytest.mark.slow
def test_unknown_host_is_refused_before_authenticating(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    kh = known_hosts(tmp_path, entry("[127.0.0.1]:1", keys["host"]), entry("dc2", keys["host"]))
    with pytest.raises(HostKeyError) as info:
        connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh)
    name = f"[127.0.0.1]:{server.port}"
    message = str(info.value)
    assert message.startswith(f"host key for {name} not in {kh} (add it: ")
    assert fingerprint(pkey(keys["host"])) in message
    assert f"'{entry(name, keys['host'])}'" in message
    assert server.policy.auth_attempts == []


@pytest.mark.slow
def test_plain_host_entry_does_not_pin_another_port(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    kh = known_hosts(tmp_path, entry("127.0.0.1", keys["host"]))
    with pytest.raises(HostKeyError, match=r"not in"):
        connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh)
    assert server.policy.auth_attempts == []


@pytest.mark.slow
def test_changed_host_key_is_refused_before_authenticating(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    name = f"[127.0.0.1]:{server.port}"
    kh = known_hosts(tmp_path, entry(name, keys["other_host"]))
    with pytest.raises(HostKeyError) as info:
        connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh)
    message = str(info.value)
    assert message.startswith(f"host key for {name} CHANGED: receiver offered ssh-ed25519 ")
    assert fingerprint(pkey(keys["host"])) in message
    assert f"{kh} pins {fingerprint(pkey(keys['other_host']))}" in message
    assert "possible man-in-the-middle" in message
    assert server.policy.auth_attempts == []


@pytest.mark.slow
def test_hashed_entry_pins_the_host(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{server.port}")
    kh = known_hosts(tmp_path, "# a comment", entry(hashed, keys["host"]))
    with connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh) as conn:
        assert conn.transport.is_authenticated()


@pytest.mark.slow
def test_hashed_entry_with_another_key_is_changed(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{server.port}")
    kh = known_hosts(tmp_path, entry(hashed, keys["other_host"]))
    with pytest.raises(HostKeyError, match="CHANGED"):
        connect("127.0.0.1", server.port, identity=keys["sender"], known_hosts=kh)
    assert server.policy.auth_attempts == []


@pytest.mark.slow
def test_only_pinned_key_types_are_asked_for(tmp_path: Path, keys: dict[str, Path]) -> None:
    """A receiver with an Ed25519 and an RSA host key, only the RSA one pinned: the
    client must ask for RSA, or the Ed25519 key would look like a changed key."""
    rsa_path = tmp_path / "keys" / "host_rsa"
    rsa_key = paramiko.RSAKey.generate(2048)
    rsa_key.write_private_key_file(str(rsa_path))
    srv = MiniServer([pkey(keys["host"]), rsa_key], pkey(keys["sender"]).asbytes())
    try:
        name = f"[127.0.0.1]:{srv.port}"
        kh = known_hosts(tmp_path, f"{name} ssh-rsa {rsa_key.get_base64()}")
        with connect("127.0.0.1", srv.port, identity=keys["sender"], known_hosts=kh) as conn:
            assert conn.transport.get_remote_server_key().get_name() == "ssh-rsa"
    finally:
        srv.close()


def test_known_hosts_name() -> None:
    assert known_hosts_name("dc1.example", 22) == "dc1.example"
    assert known_hosts_name("dc1.example", 5555) == "[dc1.example]:5555"
    assert known_hosts_name("::1", 5555) == "[::1]:5555"


def test_port_22_uses_the_plain_host_entry(tmp_path: Path, keys: dict[str, Path]) -> None:
    kh = known_hosts(tmp_path, entry("dc1.example", keys["host"]))
    known = paramiko.HostKeys(str(kh))
    check_host_key(known, "dc1.example", 22, pkey(keys["host"]), kh)  # no error
    with pytest.raises(HostKeyError, match=r"host key for \[dc1.example\]:2222 not in"):
        check_host_key(known, "dc1.example", 2222, pkey(keys["host"]), kh)
    with pytest.raises(HostKeyError, match="host key for dc1.example CHANGED"):
        check_host_key(known, "dc1.example", 22, pkey(keys["other_host"]), kh)


@pytest.mark.slow
def test_refused_key_names_its_fingerprint(
    tmp_path: Path, keys: dict[str, Path], server: MiniServer
) -> None:
    kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{server.port}", keys["host"]))
    fp = fingerprint(pkey(keys["stranger"]))
    with pytest.raises(SealsyncError) as info:
        connect("127.0.0.1", server.port, identity=keys["stranger"], known_hosts=kh)
    assert str(info.value) == (
        f"receiver 127.0.0.1:{server.port} refused key {fp} ({keys['stranger']}): "
        f"add {keys['stranger']}.pub to the receiver's authorized_keys"
    )
    assert server.policy.auth_attempts == [fp]


@pytest.mark.slow
@pytest.mark.parametrize("greeting", [b"", b"the first frame, sent with the request"])
def test_subsystem_not_served(tmp_path: Path, keys: dict[str, Path], greeting: bytes) -> None:
    srv = MiniServer([pkey(keys["host"])], pkey(keys["sender"]).asbytes(), subsystem_ok=False)
    try:
        kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{srv.port}", keys["host"]))
        with pytest.raises(SealsyncError, match="did not open the 'sealsync' subsystem"):
            connect(
                "127.0.0.1", srv.port, identity=keys["sender"], known_hosts=kh, greeting=greeting
            )
    finally:
        srv.close()


@pytest.mark.slow
def test_an_answer_to_the_greeting_before_the_subsystem_reply_reaches_the_session(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    # A receiver that refuses the greeting's HELLO writes its ERROR and closes the
    # channel, which can happen before the subsystem request is answered: the session
    # must get to read that ERROR (its reason), not a "did not open the subsystem".
    srv = MiniServer([pkey(keys["host"])], pkey(keys["sender"]).asbytes())
    srv.policy.answer_and_close = b"the receiver's reason"
    try:
        kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{srv.port}", keys["host"]))
        conn = connect(
            "127.0.0.1", srv.port, identity=keys["sender"], known_hosts=kh, greeting=b"HELLO"
        )
        try:
            assert conn.channel.recv(100) == b"the receiver's reason"
        finally:
            conn.close()
        with pytest.raises(SealsyncError, match="did not open the 'sealsync' subsystem"):
            connect("127.0.0.1", srv.port, identity=keys["sender"], known_hosts=kh)
    finally:
        srv.close()


def test_connection_refused_is_one_line(tmp_path: Path, keys: dict[str, Path]) -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{port}", keys["host"]))
    with pytest.raises(Unreachable) as info:
        connect("127.0.0.1", port, identity=keys["sender"], known_hosts=kh)
    assert str(info.value) == (
        f"cannot connect to receiver 127.0.0.1:{port}: Connection refused (nothing listens "
        "there: is the receiver running, and are the [[receiver]] host and port right?)"
    )


@pytest.mark.slow
def test_silent_server_times_out_in_the_handshake(tmp_path: Path, keys: dict[str, Path]) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) but never speaks
    port = silent.getsockname()[1]
    try:
        kh = known_hosts(tmp_path, entry(f"[127.0.0.1]:{port}", keys["host"]))
        with pytest.raises(Unreachable) as info:
            connect("127.0.0.1", port, identity=keys["sender"], known_hosts=kh, timeout=0.5)
    finally:
        silent.close()
    assert str(info.value).startswith(f"SSH handshake with receiver 127.0.0.1:{port} failed: ")


# --- identity ----------------------------------------------------------------------------


def private_file(path: Path) -> Path:
    """An empty file of mode 0600, for a key written next (sealsync refuses 0644 keys)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    return path


def test_identity_formats(tmp_path: Path, keys: dict[str, Path]) -> None:
    ecdsa = ec.generate_private_key(ec.SECP256R1())
    private_file(tmp_path / "ecdsa").write_bytes(
        ecdsa.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    rsa_key = rsa.generate_private_key(65537, 2048)
    private_file(tmp_path / "rsa.pem").write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    assert load_identity(keys["sender"]).get_name() == "ssh-ed25519"
    assert load_identity(tmp_path / "ecdsa").get_name() == "ecdsa-sha2-nistp256"
    assert load_identity(tmp_path / "rsa.pem").get_name() == "ssh-rsa"


def test_identity_problems_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SealsyncError, match=r"identity .*/missing does not exist$"):
        load_identity(tmp_path / "missing")
    private_file(tmp_path / "junk").write_text("not a key\n")
    with pytest.raises(SealsyncError, match=r"identity .*/junk is not a usable private key"):
        load_identity(tmp_path / "junk")
    encrypted = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.BestAvailableEncryption(b"secret"),
    )
    private_file(tmp_path / "enc").write_bytes(encrypted)
    with pytest.raises(SealsyncError, match=r"identity .*/enc is encrypted"):
        load_identity(tmp_path / "enc")
    (tmp_path / "dir").mkdir()
    with pytest.raises(SealsyncError, match=r"cannot read identity .*/dir: Is a directory"):
        load_identity(tmp_path / "dir")


def test_missing_known_hosts(tmp_path: Path, keys: dict[str, Path]) -> None:
    with pytest.raises(SealsyncError, match=r"known_hosts .*/nope does not exist"):
        connect("127.0.0.1", 1, identity=keys["sender"], known_hosts=tmp_path / "nope")
