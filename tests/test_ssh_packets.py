"""Channel data over ``sealsync.ssh_packets`` arrives whole, in both directions, between two
sealsync ends and with paramiko's own transport at the other end (an earlier release),
across a rekey; the fast path is the one taken; an oversized packet is refused."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import paramiko
import pytest

from receiver import chunk_pipe
from sealsync import ssh_packets
from sealsync.protocol import SSH_MAX_PACKET_SIZE, SSH_WINDOW_SIZE, recv_exact

pytestmark = pytest.mark.slow  # real SSH handshakes over loopback

CIPHER = "aes128-gcm@openssh.com"
OLD_PACKET = 64 * 1024
"""The largest packet an earlier release advertised."""


class _Server(paramiko.ServerInterface):
    def __init__(self, ours: bool) -> None:
        self.ours = ours
        self.ready = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        return "none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.common.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.common.OPEN_SUCCEEDED

    def check_channel_shell_request(self, channel: paramiko.Channel) -> bool:
        if self.ours:
            chunk_pipe.install(channel)  # as the receiver does: views in, fast sends out
        self.ready.set()
        return True


def _transport(sock: socket.socket, ours: bool, packet: int) -> paramiko.Transport:
    kind = ssh_packets.Transport if ours else paramiko.Transport
    transport = kind(sock, default_window_size=SSH_WINDOW_SIZE, default_max_packet_size=packet)
    transport.get_security_options().ciphers = (CIPHER,)
    return transport


@contextmanager
def connected(
    client_ours: bool = True, server_ours: bool = True
) -> Iterator[tuple[paramiko.Transport, paramiko.Channel, paramiko.Transport, paramiko.Channel]]:
    """A client and a server transport over loopback and the session channel at each
    end; each end ours (``ssh_packets``, this release's packet size) or paramiko's own
    (64 KiB packets, as an earlier release)."""
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    listener = socket.create_server(("127.0.0.1", 0))
    client_sock = socket.create_connection(listener.getsockname())
    server_sock, _ = listener.accept()
    listener.close()
    server = _transport(
        server_sock, server_ours, SSH_MAX_PACKET_SIZE if server_ours else OLD_PACKET
    )
    server.add_server_key(paramiko.ECDSAKey.generate())
    policy = _Server(server_ours)
    server.start_server(event=threading.Event(), server=policy)  # returns at once
    client = _transport(
        client_sock, client_ours, SSH_MAX_PACKET_SIZE if client_ours else OLD_PACKET
    )
    try:
        client.connect()
        client.auth_none("test")
        channel = client.open_session()
        if client_ours:
            ssh_packets.fast_sends(channel)
        channel.invoke_shell()
        accepted = server.accept(10)
        assert accepted is not None and policy.ready.wait(10)
        yield client, channel, server, accepted
    finally:
        client.close()
        server.close()


def _exchange(writer: paramiko.Channel, reader: paramiko.Channel, pieces: list[bytes]) -> bytes:
    """Everything ``pieces`` holds, written on one end while the other reads it."""
    total = sum(len(p) for p in pieces)

    def write() -> None:
        for piece in pieces:
            writer.sendall(memoryview(piece) if len(piece) % 2 else piece)

    thread = threading.Thread(target=write)
    thread.start()
    got = recv_exact(reader, total)  # type: ignore[arg-type]
    thread.join(30)
    return bytes(got)


def _pieces() -> list[bytes]:
    sizes = [1, 5, 16 * 1024, SSH_MAX_PACKET_SIZE - 64, SSH_MAX_PACKET_SIZE, 3 << 20, 70_001]
    return [os.urandom(n) for n in sizes]


def test_the_fast_path_is_available_with_the_installed_paramiko() -> None:
    # paramiko's private packetizer state under the names the fast path uses: a
    # paramiko release that renames them would silently take the slower path
    a, b = socket.socketpair()
    try:
        assert ssh_packets.fast_path_ready(ssh_packets.Packetizer(a))
    finally:
        a.close()
        b.close()


def test_data_arrives_whole_both_ways_between_two_sealsync_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast_in: list[int] = []
    fast_out: list[int] = []
    feed_view = chunk_pipe.ChunkPipe.feed_view
    send_message = ssh_packets.Packetizer.send_message

    def counted_feed(pipe: chunk_pipe.ChunkPipe, data: memoryview) -> None:
        fast_in.append(len(data))
        feed_view(pipe, data)

    def counted_send(packetizer: ssh_packets.Packetizer, data: paramiko.Message) -> None:
        if isinstance(data, ssh_packets.ChannelData):
            fast_out.append(len(data.data))
        send_message(packetizer, data)

    monkeypatch.setattr(chunk_pipe.ChunkPipe, "feed_view", counted_feed)
    monkeypatch.setattr(ssh_packets.Packetizer, "send_message", counted_send)
    pieces = _pieces()
    with connected() as (_, client, _, server):
        assert client.out_max_packet_size == SSH_MAX_PACKET_SIZE
        assert _exchange(client, server, pieces) == b"".join(pieces)
        assert _exchange(server, client, pieces[:4]) == b"".join(pieces[:4])
    sent = sum(len(p) for p in pieces)
    # every byte went out as ChannelData and came in as views of decrypted packets
    assert sum(fast_in) == sent
    assert sum(fast_out) == sent + sum(len(p) for p in pieces[:4])
    assert max(fast_out) == SSH_MAX_PACKET_SIZE - 64  # a whole packet at a time


@pytest.mark.parametrize("ours", ["client", "server"])
def test_an_end_of_an_earlier_release_exchanges_data_with_ours(ours: str) -> None:
    pieces = _pieces()
    with connected(client_ours=ours == "client", server_ours=ours == "server") as (
        _,
        client,
        _,
        server,
    ):
        # the earlier end's 64 KiB packets are what ours sends it
        assert min(client.out_max_packet_size, server.out_max_packet_size) == OLD_PACKET
        assert _exchange(client, server, pieces) == b"".join(pieces)
        assert _exchange(server, client, pieces) == b"".join(pieces)


def test_data_arrives_whole_across_rekeys_on_the_fast_path() -> None:
    pieces = [os.urandom(1 << 20) for _ in range(12)]
    with connected() as (client_t, client, server_t, server):
        kex: list[str] = []
        for name, transport in (("client", client_t), ("server", server_t)):
            transport.packetizer.REKEY_BYTES = 2 << 20  # type: ignore[misc]
            start = transport._send_kex_init  # type: ignore[attr-defined]

            def counted(start: object = start, name: str = name) -> None:
                kex.append(name)
                start()  # type: ignore[operator]

            transport._send_kex_init = counted  # type: ignore[attr-defined]
        expected = hashlib.md5(b"".join(pieces)).hexdigest()
        assert hashlib.md5(_exchange(client, server, pieces)).hexdigest() == expected
        assert hashlib.md5(_exchange(server, client, pieces)).hexdigest() == expected
        assert "client" in kex and "server" in kex  # both ends rekeyed meanwhile


def test_a_packet_longer_than_openssh_allows_is_refused_before_it_is_read() -> None:
    with connected() as (client_t, _, server_t, _):
        assert server_t.is_active()
        raw = client_t.sock
        # a packet length far past PACKET_MAX_SIZE, in the clear as under AES-GCM
        raw.sendall((ssh_packets.MAX_PACKET_LENGTH + 16).to_bytes(4, "big"))
        deadline = time.monotonic() + 10
        while server_t.is_active() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not server_t.is_active()


def test_a_plaintext_buffer_is_reused_only_once_nothing_views_it() -> None:
    a, b = socket.socketpair()
    try:
        packetizer = ssh_packets.Packetizer(a)
        # only a view is held, as the session holds a packet's data (ids: a reference
        # here would keep a buffer in use)
        held = memoryview(packetizer._free_buffer())[10:20]
        first = id(held.obj)
        second = id(packetizer._free_buffer())
        assert second != first
        assert id(packetizer._free_buffer()) == second  # free: reused, not allocated
        del held
        assert id(packetizer._free_buffer()) == first
    finally:
        a.close()
        b.close()
