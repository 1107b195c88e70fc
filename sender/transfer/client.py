"""The SSH connection to a receiver: reach it, trust it, log in, open the subsystem.

Trust comes first (docs/design.md §5.1): the receiver's host key is checked against the pinned
``known_hosts`` right after key exchange and before the sender authenticates, so an
impostor never sees a signature made with the sender's key. There is no
trust-on-first-use: an unknown host is refused with the line to add after checking
the fingerprint out of band.

The transport is tuned for bulk data (docs/design.md §5.1): ``TCP_NODELAY`` (or
Nagle plus delayed ACKs cap request/response at a few dozen files a second),
``aes128-gcm`` first,
256 KiB packets and an 8 MiB window, and channel data sent and read in one pass
(:mod:`sealsync.ssh_packets`).

A link that goes silent is found by keepalives (:mod:`sealsync.keepalive`, from the
end of the key exchange on, so a stall during authentication is caught too); a
receiver that stops taking data while the link lives, by the channel's timeout
(``stall_timeout``); each step of setting the connection up is bounded by
``connect_timeout``.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko
from paramiko.pkey import UnknownKeyType

from sealsync import ssh_packets, sshfiles
from sealsync.config import ReceiverEndpoint, SenderConfig, format_endpoint
from sealsync.errors import ConfigError
from sealsync.keepalive import ActivitySocket, Keepalive
from sealsync.keys import fingerprint
from sealsync.monoclock import use_monotonic_clock
from sealsync.printable import printable
from sealsync.protocol import (
    KEYS_IGNORED_BANNER,
    SSH_MAX_PACKET_SIZE,
    SSH_WINDOW_SIZE,
    SUBSYSTEM,
    Stream,
    channel_stream,
    preferred_ciphers,
)
from sender.transfer.errors import Busy, HostKeyError, Refused, Unreachable

USERNAME = "sealsync"
IO_TIMEOUT = 120.0
"""Default longest a single send may wait for window space, and the reader's poll period."""

log = logging.getLogger(f"sealsync.{__name__}")
_AUTH_TIMED_OUT = "Authentication timeout."
"""What paramiko's AuthenticationException says when no answer came in ``auth_timeout``."""

# paramiko's transport thread logs a traceback when a handshake is cut short; with no
# handler configured Python would print it on stderr. The CLI's -v still shows it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# known_hosts stores an RSA key as ``ssh-rsa``; the signature algorithms that prove it.
_HOST_KEY_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256")}


def known_hosts_name(host: str, port: int) -> str:
    """The name OpenSSH files a host under: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def load_identity(path: Path) -> paramiko.PKey:
    """The sender's private key (Ed25519, ECDSA or RSA; OpenSSH or PEM), unencrypted.

    Read before connecting, so a broken key costs no connection attempt; a sender runs
    from cron, so a passphrase could never be typed and is refused as such. A key the
    config names is a config matter: every problem with it is a ConfigError (exit 2),
    a public key given in its place and a key others can read included.
    """
    path = Path(path)
    try:
        problem = sshfiles.private_key_problem(path)
        if problem is not None:
            raise ConfigError(f"identity {path}: {problem}")
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        raise ConfigError(f"identity {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read identity {path}: {exc.strerror or exc}") from None
    except (TypeError, paramiko.PasswordRequiredException):
        raise ConfigError(
            f"identity {path} is encrypted: sealsync needs a key without a passphrase "
            "(create one with `sealsync keygen`)"
        ) from None
    except UnknownKeyType:
        raise ConfigError(
            f"identity {path}: unsupported key type (use Ed25519, ECDSA or RSA)"
        ) from None
    except (ValueError, paramiko.SSHException, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"identity {path} is not a usable private key (OpenSSH or PEM): {exc}"
        ) from None


def load_known_hosts(path: Path) -> paramiko.HostKeys:
    """The pinned host keys, from a file others cannot write.

    A line that is not a ``known_hosts`` line is a ConfigError naming ``file:line``
    (a ``.pub`` line pasted without its host would otherwise pin nothing, or stop
    paramiko's parser); keys of types paramiko cannot use are skipped, as OpenSSH
    skips types it does not know.
    """
    path = Path(path)
    try:
        entries = sshfiles.read_known_hosts(path)
    except ConfigError as exc:
        raise ConfigError(f"known_hosts {exc}") from None
    keys = paramiko.HostKeys()
    for entry in entries:
        try:
            key = paramiko.PKey.from_type_string(entry.key_type, entry.blob)
        except UnknownKeyType:
            continue
        except (paramiko.SSHException, ValueError, TypeError) as exc:
            raise ConfigError(
                f"known_hosts {path}:{entry.line}: not a valid {entry.key_type} key: {exc}"
            ) from None
        for host in entry.hosts:
            keys.add(host, entry.key_type, key)
    return keys


def host_key_types(
    known: paramiko.HostKeys, host: str, port: int, supported: tuple[str, ...]
) -> tuple[str, ...]:
    """Host key algorithms to ask for: those of the pinned keys (as OpenSSH does).

    Without this a receiver holding several host keys could present one we have not
    pinned and be refused as "changed" although the pinned one is still valid.
    """
    entry = known.lookup(known_hosts_name(host, port))
    if not entry:
        return ()
    types: list[str] = []
    for key_type in entry.keys():
        for algorithm in _HOST_KEY_ALGORITHMS.get(key_type, (key_type,)):
            if algorithm in supported and algorithm not in types:
                types.append(algorithm)
    return tuple(types)


def check_host_key(
    known: paramiko.HostKeys, host: str, port: int, key: paramiko.PKey, known_hosts: Path
) -> None:
    """Raise HostKeyError unless ``key`` is the one pinned for ``host:port``."""
    name = known_hosts_name(host, port)
    offered = fingerprint(key)
    entry = known.lookup(name)
    if not entry:
        raise HostKeyError(
            f"host key for {name} not in {known_hosts} (add it: check that the receiver's "
            f"host key fingerprint is {offered}, then append the line "
            f"'{name} {key.get_name()} {key.get_base64()}' to {known_hosts})"
        )
    pinned = entry.get(key.get_name())
    if pinned is not None and pinned.asbytes() == key.asbytes():
        return
    expected = ", ".join(fingerprint(k) for k in entry.values())
    raise HostKeyError(
        f"host key for {name} CHANGED: receiver offered {key.get_name()} {offered}, "
        f"{known_hosts} pins {expected}; possible man-in-the-middle, refusing to connect "
        f"(if the receiver's key really changed, replace its line in {known_hosts})"
    )


@dataclass
class Connection:
    """An open ``sealsync`` subsystem channel and what carries it."""

    address: str
    sock: socket.socket
    transport: paramiko.Transport
    channel: paramiko.Channel
    keepalive: Keepalive | None = None
    greeted: bool = False
    """True if the session's first frame went out with the subsystem request."""

    @property
    def stream(self) -> Stream:
        return channel_stream(self.channel)

    @property
    def lost_reason(self) -> str | None:
        """Why the connection was given up from under the session (a dead link), if it was."""
        return self.keepalive.dead if self.keepalive is not None else None

    def close(self) -> None:
        if self.keepalive is not None:
            self.keepalive.stop()
        for close in (self.channel.close, self.transport.close, self.sock.close):
            try:
                close()
            except (OSError, EOFError, paramiko.SSHException):
                pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_socket(host: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket with Nagle off, or Unreachable with the OS's reason."""
    address = format_endpoint(host, port)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except TimeoutError:
        raise Unreachable(
            f"cannot connect to receiver {address}: timed out after {timeout:g} s"
        ) from None
    except socket.gaierror as exc:
        raise Unreachable(f"cannot resolve receiver host {host}: {exc.strerror or exc}") from None
    except ConnectionRefusedError as exc:
        raise Unreachable(
            f"cannot connect to receiver {address}: {exc.strerror} (nothing listens there: "
            "is the receiver running, and are the [[receiver]] host and port right?)"
        ) from None
    except OSError as exc:
        raise Unreachable(f"cannot connect to receiver {address}: {exc.strerror or exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


RECEIVER_SAYS = b"sealsync: "
"""What starts the line a receiver sends before closing a connection it refuses (its
connection limit, a penalised address); an SSH client may be sent lines before the
server's version line (RFC 4253, section 4.2)."""
SAID_MAX = 512


class _FirstBytes(ActivitySocket):
    """The connection's socket, keeping the first bytes the receiver sent: the line a
    refusing receiver says before it closes is read, and dropped, by paramiko."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.said = b""

    def recv(self, n: int, *flags: int) -> bytes:
        data = super().recv(n, *flags)
        if len(self.said) < SAID_MAX:
            self.said += data[: SAID_MAX - len(self.said)]
        return data


def refusal_line(said: bytes) -> str | None:
    """The receiver's reason for refusing the connection, if it sent one, made safe."""
    if not said.startswith(RECEIVER_SAYS):
        return None
    line = said[len(RECEIVER_SAYS) :].split(b"\n", 1)[0].decode("utf-8", "replace")
    return printable(" ".join(line.split()))[:200] or None


def handshake_failure(address: str, exc: BaseException, said: bytes = b"") -> str:
    """The one line for a failed SSH handshake, naming the likely cause.

    A receiver that refuses a connection it could serve later (at its connection limit,
    its address penalised) says why in a line before closing (``said``, the first bytes
    it sent); that is the cause. Otherwise paramiko says "Error reading SSH protocol
    banner" both when the peer hung up at once (a receiver whose allow list leaves this
    address out closes the socket before saying anything) and when it said nothing in
    time; the exception it was raised from tells them apart.
    """
    reason = refusal_line(said)
    if reason is not None:
        return f"receiver {address} refused the connection: {reason}"
    if isinstance(exc, paramiko.SSHException) and "protocol banner" in str(exc):
        cause = exc.__context__
        if isinstance(cause, EOFError | ConnectionResetError | BrokenPipeError):
            return (
                f"the receiver at {address} closed the connection before the SSH banner: "
                "this sender's address may not be in its allow list, or the port is not a "
                "sealsync receiver"
            )
        if isinstance(cause, TimeoutError):
            return (
                f"receiver {address} sent no SSH banner in time: the port may not be a "
                "sealsync receiver, or the receiver is overloaded"
            )
    return f"SSH handshake with receiver {address} failed: {exc}"


def _banner(transport: paramiko.Transport) -> str:
    """The authentication banner the receiver sent ("" if none), compared whole by the
    caller and never printed: it is the receiver's text."""
    handler = transport.auth_handler
    raw = getattr(handler, "banner", None) if handler is not None else None
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace").strip()
    return raw.strip() if isinstance(raw, str) else ""


def connect(
    host: str,
    port: int,
    *,
    identity: Path,
    known_hosts: Path,
    timeout: float = 10.0,
    alive_interval: float = 15.0,
    alive_count_max: int = 3,
    stall_timeout: float = IO_TIMEOUT,
    greeting: bytes = b"",
) -> Connection:
    """Reach, verify, authenticate and open the subsystem; every failure is one line.

    ``greeting`` (the session's first frame) is sent on the channel just before the
    subsystem request: the receiver reads it once the subsystem starts, and its answer
    follows the request's at once, so the first exchange costs no round trip of its
    own, which on a slow link is a visible part of every session."""
    use_monotonic_clock()  # paramiko's timeouts must not end on a wall-clock step
    address = format_endpoint(host, port)
    key = load_identity(identity)
    known = load_known_hosts(known_hosts)
    sock = open_socket(host, port, timeout)
    watched = _FirstBytes(sock)
    transport = ssh_packets.Transport(
        watched,
        default_window_size=SSH_WINDOW_SIZE,
        default_max_packet_size=SSH_MAX_PACKET_SIZE,
    )
    transport.auth_timeout = timeout
    keepalive: Keepalive | None = None
    try:
        options = transport.get_security_options()
        options.ciphers = preferred_ciphers(options.ciphers)
        types = host_key_types(known, host, port, tuple(options.key_types))
        if types:
            options.key_types = types
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            busy = refusal_line(watched.said) is not None  # it said why: it may take a later one
            raise (Busy if busy else Unreachable)(
                handshake_failure(address, exc, watched.said)
            ) from None
        try:  # start_client returns quietly on timeout: only the key says it finished
            server_key = transport.get_remote_server_key()
        except paramiko.SSHException:
            raise Unreachable(
                f"SSH handshake with receiver {address} failed: timed out after {timeout:g} s"
            ) from None
        check_host_key(known, host, port, server_key, known_hosts)
        keepalive = Keepalive(
            transport,
            watched,
            alive_interval,
            alive_count_max,
            label=f"receiver {address}",
            keys=("server_alive_interval", "server_alive_count_max"),
            log=log,
            level=logging.INFO,  # the round reports the lost connection itself
        ).start()
        try:
            transport.auth_publickey(USERNAME, key)
        except paramiko.AuthenticationException as exc:
            if keepalive.dead is not None or str(exc) == _AUTH_TIMED_OUT:
                raise Unreachable(
                    f"receiver {address} did not answer authentication within {timeout:g} s"
                ) from None
            if _banner(transport) == KEYS_IGNORED_BANNER:
                raise Refused(
                    f"receiver {address} refused key {fingerprint(key)} ({identity}): it "
                    "ignores its authorized_keys and accepts no key (a file group or "
                    "others may write, or one it cannot read): its log names the fix"
                ) from None
            raise Refused(
                f"receiver {address} refused key {fingerprint(key)} ({identity}): "
                f"add {identity}.pub to the receiver's authorized_keys"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise Unreachable(
                f"receiver {address} closed the connection during authentication: {exc}"
            ) from None
        try:
            channel = transport.open_session(timeout=timeout)
            ssh_packets.fast_sends(channel)
            if greeting:
                channel.sendall(greeting)
            channel.invoke_subsystem(SUBSYSTEM)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if keepalive.dead is not None:
                raise Unreachable(keepalive.dead) from None
            if not (greeting and channel.recv_ready()):
                raise Refused(
                    f"receiver {address} did not open the '{SUBSYSTEM}' subsystem: {exc}"
                ) from None
            # The subsystem started and answered the greeting, then closed the channel
            # before the request's own answer went out (an ERROR: a refused HELLO). The
            # session reads that answer and reports its reason.
        channel.settimeout(stall_timeout)
    except BaseException:
        if keepalive is not None:
            keepalive.stop()
        transport.close()
        sock.close()
        raise
    return Connection(
        address=address,
        sock=sock,
        transport=transport,
        channel=channel,
        keepalive=keepalive,
        greeted=bool(greeting),
    )


def connect_receiver(
    config: SenderConfig, receiver: ReceiverEndpoint, greeting: bytes = b""
) -> Connection:
    return connect(
        receiver.host,
        receiver.port,
        identity=config.identity,
        known_hosts=config.known_hosts,
        timeout=config.connect_timeout,
        alive_interval=config.server_alive_interval,
        alive_count_max=config.server_alive_count_max,
        stall_timeout=config.stall_timeout,
        greeting=greeting,
    )
