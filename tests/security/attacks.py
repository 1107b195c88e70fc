"""What the attacks in this folder are made of: a site, hostile connections, probes.

A site is a real deployment (deploy_helpers): ``sealsync serve`` and ``sealsync send``
as processes, an honest sender ``edge0`` and a second authorized key ``edge1`` that the
hostile-sender attacks use. Hostile connections come from their own loopback
addresses (127.0.0.2 and up; Linux routes all of 127/8 to ``lo``), as an attacker on
another host would, so that the receiver's per-source rules see two parties. Not a test
module.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import paramiko
from deploy_helpers import Deployment, Sender, make_deployment, populate
from receiver_service_helpers import Client

HONEST_SOURCE = "127.0.0.1"


class Site:
    """A receiver process and its senders; ``extra`` lines go into ``[receiver]``."""

    def __init__(self, root: Path, **extra: object) -> None:
        self.dep: Deployment = make_deployment(root, senders=2)
        self.honest: Sender = self.dep.senders[0]
        self.hostile_key: Path = root / "keys" / "edge1"
        self.names = populate(self.honest.edge, groups=2, files=2, unsequence=1)
        self.configure(**extra)

    def configure(self, **extra: object) -> None:
        """Rewrite the receiver config with ``extra`` keys (takes effect at the next start)."""
        lines = self.dep.receiver_config.read_text().splitlines()
        base = [line for line in lines if line.split("=", 1)[0].strip() not in extra]
        for key, value in extra.items():
            base.append(f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}")
        self.dep.receiver_config.write_text("\n".join(base) + "\n")

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.dep.port)

    def start(self) -> None:
        self.dep.start_receiver()

    def stop(self) -> None:
        self.dep.stop_receiver()

    def honest_round(self, timeout: float = 90) -> tuple[int, str]:
        """One ``sealsync send`` of the honest sender: exit code and stderr."""
        result = self.honest.send(timeout=timeout)
        return result.returncode, result.stderr

    def honest_files_loaded(self) -> bool:
        return self.dep.loaded_hashes(self.honest) == self.honest.sealed_hashes()

    def hostile_session(self) -> Client:
        """An authenticated session with the second key (a hostile sender)."""
        return Client(self.address, self.hostile_key)

    def temporaries(self) -> int:
        """Bytes of unfinished uploads (``.incoming-*``) on the receiver now."""
        total = 0
        for here, _dirs, files in os.walk(self.dep.receiver_data):
            for name in files:
                if name.startswith(".incoming-"):
                    try:
                        total += os.lstat(os.path.join(here, name)).st_size
                    except FileNotFoundError:
                        pass
        return total


def connect_from(address: tuple[str, int], source: str, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(address, timeout=timeout, source_address=(source, 0))


class Held(Protocol):
    def alive(self) -> bool: ...

    def close(self) -> None: ...


class KexOnly:
    """An SSH connection that finishes the key exchange and never authenticates."""

    def __init__(self, address: tuple[str, int], source: str) -> None:
        self.sock = connect_from(address, source)
        self.transport = paramiko.Transport(self.sock)
        try:
            self.transport.start_client(timeout=10)
            self.transport.get_remote_server_key()  # raises unless the exchange finished
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        return bool(self.transport.is_active())

    def close(self) -> None:
        self.transport.close()
        self.sock.close()


class Silent:
    """A TCP connection that sends nothing at all."""

    def __init__(self, address: tuple[str, int], source: str) -> None:
        self.sock = connect_from(address, source)
        self.sock.setblocking(False)

    def alive(self) -> bool:
        try:
            while True:  # drain what the server sent (its banner)
                if not self.sock.recv(65536):
                    return False
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()


@dataclass
class Flood:
    """``count`` hostile connections kept open: any the receiver closes is opened again.

    Bounded: each worker makes at most ``max_attempts`` connections, and pauses
    ``pause`` seconds after a refused or closed one.
    """

    open_one: Callable[[], Held]
    count: int
    max_attempts: int = 40
    pause: float = 0.3
    attempts: int = 0
    opened: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _holding: int = 0

    def start(self) -> Flood:
        for i in range(self.count):
            t = threading.Thread(target=self._work, name=f"flood-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    @property
    def holding(self) -> int:
        with self._lock:
            return self._holding

    def wait_attempts(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.attempts < n and time.monotonic() < deadline:
            time.sleep(0.05)

    def _work(self) -> None:
        for _ in range(self.max_attempts):
            if self._stop.is_set():
                return
            with self._lock:
                self.attempts += 1
            try:
                conn = self.open_one()
            except Exception:  # refused, or closed before the handshake ended
                self._stop.wait(self.pause)
                continue
            with self._lock:
                self.opened += 1
                self._holding += 1
            try:
                while conn.alive() and not self._stop.wait(0.1):
                    pass
            finally:
                conn.close()
                with self._lock:
                    self._holding -= 1
            self._stop.wait(self.pause)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def banner(address: tuple[str, int], source: str = HONEST_SOURCE, timeout: float = 5.0) -> bytes:
    """The first line the receiver sends on a new connection (b"" if it closes first)."""
    with connect_from(address, source, timeout) as sock:
        data = b""
        try:
            while b"\n" not in data:
                part = sock.recv(256)
                if not part:
                    break
                data += part
        except (ConnectionResetError, TimeoutError):
            pass
    return data.split(b"\n", 1)[0]


class SourcedClient(Client):
    """:class:`Client` whose connection comes from ``source`` (another loopback address:
    another host, as the receiver's per-source rules see it)."""

    def __init__(
        self, address: tuple[str, int], key_path: Path, source: str, timeout: float = 10.0
    ) -> None:
        self.sock = connect_from(address, source, timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = paramiko.Transport(self.sock)
        try:
            self.transport.start_client(timeout=timeout)
            self.host_key = self.transport.get_remote_server_key()
            self.transport.auth_publickey("sealsync", paramiko.PKey.from_path(key_path))
            self.chan = self.transport.open_session(timeout=timeout)
            self.chan.invoke_subsystem("sealsync")
            self.chan.settimeout(timeout)
        except BaseException:
            self.transport.close()
            self.sock.close()
            raise


class AuthOnly:
    """An SSH connection that authenticates with a valid key and opens no channel."""

    def __init__(self, address: tuple[str, int], source: str, key_path: Path) -> None:
        self.sock = connect_from(address, source)
        self.transport = paramiko.Transport(self.sock)
        try:
            self.transport.start_client(timeout=10)
            self.transport.auth_publickey("sealsync", paramiko.PKey.from_path(key_path))
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        return bool(self.transport.is_active())

    def close(self) -> None:
        self.transport.close()
        self.sock.close()


def snapshot(root: Path) -> dict[str, tuple[bool, int, bytes]]:
    """Every entry under ``root`` (links not followed): is it a folder, its size, its
    bytes; to show that nothing outside the receiver's folders changed."""
    found: dict[str, tuple[bool, int, bytes]] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs:
            path = os.path.join(here, name)
            found[os.path.relpath(path, root)] = (True, 0, b"")
        for name in files:
            path = os.path.join(here, name)
            with open(path, "rb") as f:
                body = f.read()
            found[os.path.relpath(path, root)] = (False, len(body), body)
    return found


class Touches:
    """Everything any process does under ``root`` from now on, as inotify reports it: a
    folder opened or listed, a file read, anything made, changed or removed (each event
    as ``"<folder>/<name> <mask>"``). The folders under ``root`` now are watched; the
    watcher's own walk is not counted. Linux only."""

    IN_ALL_EVENTS = 0xFFF
    _EVENT = struct.Struct("iIII")

    def __init__(self, root: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._folders: dict[int, str] = {}
        for here, _dirs, _files in os.walk(root):
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(here), self.IN_ALL_EVENTS)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {here}")
            self._folders[wd] = here
        self._read()  # the walk above opened the folders: not what is watched for

    def _read(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return out
            at = 0
            while at < len(data):
                wd, mask, _cookie, size = self._EVENT.unpack_from(data, at)
                name = data[at + self._EVENT.size : at + self._EVENT.size + size].rstrip(b"\0")
                folder = self._folders.get(wd, "?")
                out.append(f"{folder}/{os.fsdecode(name)} {mask:#x}")
                at += self._EVENT.size + size

    def events(self) -> list[str]:
        """The events since the last call."""
        return self._read()

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> Touches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
