"""The OpenSSH files sealsync reads: private keys, ``known_hosts``, ``authorized_keys``.

They are parsed here, strictly and without paramiko, so that loading a config can
refuse a broken file before any command changes anything, naming ``file:line`` and
what is wrong with it: a ``.pub`` line pasted into ``known_hosts`` without its host
field (it would pin nothing), key options in ``authorized_keys`` (sealsync would not
enforce them, so the line would grant more than it says), a public key given where
the private one belongs. Each file's mode is checked first (see ``permissions``).

The receiver re-reads ``authorized_keys`` while it runs; there a bad line is skipped
with a warning rather than locking every sender out (``parse_authorized_keys``
returns the problems beside the keys).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from sealsync import permissions
from sealsync.errors import ConfigError
from sealsync.printable import printable

# Key types paramiko can verify.
KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
    }
)
SUPPORTED = "ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa"
EXPECTED_KNOWN_HOST = "expected 'HOSTS KEYTYPE BASE64-KEY [comment]'"
EXPECTED_AUTHORIZED_KEY = "expected 'KEYTYPE BASE64-KEY [comment]', the sender's .pub line"

_TYPE_NAME = re.compile(r"^[a-z0-9][a-z0-9@._-]*$")
_HOST_PORT = re.compile(r"^\[[^\[\]]+\]:[0-9]{1,5}$")
_HEAD = 8192  # enough of a key file to tell a public key from a private one


class TrustFileError(ConfigError):
    """A key or trust file sealsync must not use: ``path[:line]: what is wrong``."""


@dataclass(frozen=True)
class KnownHost:
    """One ``known_hosts`` line: the hosts it names and the key pinned for them."""

    line: int
    hosts: tuple[str, ...]
    key_type: str
    blob: bytes


def _shown(text: str, limit: int = 40) -> str:
    short = text if len(text) <= limit else text[:limit] + "..."
    return printable(short)


def blob_type(blob: bytes) -> str | None:
    """The type name an SSH public key blob starts with (uint32 length, then the name)."""
    if len(blob) < 4:
        return None
    (length,) = struct.unpack_from("!I", blob)
    if length > 64 or len(blob) < 4 + length:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


def decode_key(key_type: str, data: str) -> tuple[bytes, None] | tuple[None, str]:
    """The blob of a ``KEYTYPE BASE64`` pair, or why it is not one."""
    if not _TYPE_NAME.match(key_type):
        return None, f"{_shown(key_type)!r} is not a key type (such as {SUPPORTED})"
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None, f"the key data after {key_type} is not base64"
    found = blob_type(blob)
    if found is None:
        return None, f"the key data after {key_type} is not an SSH public key"
    if found != key_type:
        return None, f"the key data is a {_shown(found)} key, the line says {key_type}"
    if not _framed(blob):
        return None, f"the key data after {key_type} is cut short or damaged"
    return blob, None


def _framed(blob: bytes) -> bool:
    """True if ``blob`` is whole SSH strings end to end, as every public key blob is
    (type name, then the key's fields): a line cut short in copying fails this."""
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            return False
        (length,) = struct.unpack_from("!I", blob, at)
        at += 4 + length
    return at == len(blob)


def _is_key(fields: list[str], at: int = 0) -> bool:
    """True if ``fields[at:]`` start with a ``KEYTYPE BASE64`` pair whose blob agrees."""
    if len(fields) < at + 2:
        return False
    return decode_key(fields[at], fields[at + 1])[0] is not None


def looks_like_public_key(data: bytes) -> bool:
    """True if a key file's first bytes are a public key (OpenSSH line, RFC 4716, PEM)."""
    text = data.decode("ascii", errors="replace").strip()
    if text.startswith(("---- BEGIN SSH2 PUBLIC KEY", "-----BEGIN PUBLIC KEY")):
        return True
    if text.startswith("-----BEGIN RSA PUBLIC KEY"):
        return True
    first = text.splitlines()[0].split() if text else []
    return _is_key(first)


def private_key_problem(path: Path) -> str | None:
    """Why ``path`` cannot serve as a private key to present, or None (OSError if unreadable).

    A public key there is the usual mix-up (``identity = keys/edge.pub``); reading it
    as a private key would only fail later with a parser's message.
    """
    with open(path, "rb") as f:
        head = f.read(_HEAD)
        mode = os.fstat(f.fileno()).st_mode
    if looks_like_public_key(head):
        pair = path.with_name(path.name[: -len(".pub")]) if path.name.endswith(".pub") else None
        hint = f" ({pair}?)" if pair is not None and pair.is_file() else ""
        return (
            f"a public key, not a private one: name the private key instead{hint}; "
            "the .pub line is what the other end trusts"
        )
    return permissions.private_mode_problem(path, mode)


def read_trust_file(path: Path) -> str:
    """The text of a trust file whose mode is safe, or TrustFileError naming the path."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read()
    except FileNotFoundError:
        raise TrustFileError(f"{path} does not exist") from None
    except OSError as exc:
        raise TrustFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    problem = permissions.trust_file_problem(path, mode)
    if problem is not None:
        raise TrustFileError(f"{path}: {problem}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TrustFileError(f"{path}: not a UTF-8 text file") from None


def _lines(text: str) -> list[tuple[int, list[str]]]:
    """``(line number, fields)`` of every line that is not blank or a comment."""
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append((number, line.split()))
    return out


# --- known_hosts ---------------------------------------------------------------------


def _hosts_problem(field: str) -> str | None:
    for pattern in field.split(","):
        name = pattern[1:] if pattern.startswith("!") else pattern
        if not name:
            return f"an empty host name in {_shown(field)!r}"
        if name.startswith("|"):
            parts = name.split("|")
            if len(parts) != 4 or parts[1] != "1" or not all(_base64(p) for p in parts[2:]):
                return f"{_shown(name)!r} is not a hashed host name (|1|salt|hash)"
        elif name.startswith("[") and not _HOST_PORT.match(name):
            return f"{_shown(name)!r}: write a host with a port as [host]:port"
    return None


def _base64(text: str) -> bool:
    try:
        return bool(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return False


def _known_host(number: int, fields: list[str]) -> KnownHost | str:
    if fields[0].startswith("@"):
        return (
            f"{_shown(fields[0])} lines are not supported: sealsync pins host keys; "
            "pin the receiver's key on a plain 'HOST KEYTYPE KEY' line"
        )
    if _is_key(fields):
        return (
            "a public key without the host in front (a .pub file pasted as it is?): "
            "start the line with the receiver's [host]:port, or host for port 22"
        )
    if len(fields) < 3:
        return EXPECTED_KNOWN_HOST
    hosts, key_type, data = fields[:3]
    problem = _hosts_problem(hosts)
    if problem is not None:
        return problem
    blob, problem = decode_key(key_type, data)
    if blob is None:
        return problem or EXPECTED_KNOWN_HOST
    return KnownHost(number, tuple(hosts.split(",")), key_type, blob)


def parse_known_hosts(text: str, source: str) -> list[KnownHost]:
    """Every entry of a ``known_hosts`` text; TrustFileError at the first bad line."""
    entries = []
    for number, fields in _lines(text):
        entry = _known_host(number, fields)
        if isinstance(entry, str):
            raise TrustFileError(f"{source}:{number}: {entry}")
        entries.append(entry)
    return entries


def read_known_hosts(path: Path) -> list[KnownHost]:
    """The entries of the ``known_hosts`` file at ``path`` (mode checked first)."""
    return parse_known_hosts(read_trust_file(path), str(path))


# --- authorized_keys -----------------------------------------------------------------


def _authorized_key(fields: list[str]) -> bytes | str:
    first = fields[0]
    if first.startswith("----"):
        return f"a PEM block, not a public key line: {EXPECTED_AUTHORIZED_KEY}"
    if first in KEY_TYPES or _is_key(fields):
        if len(fields) < 2:
            return f"no key data after {first}"
        blob, problem = decode_key(first, fields[1])
        if blob is None:
            return problem or EXPECTED_AUTHORIZED_KEY
        if first not in KEY_TYPES:
            return f"unsupported key type {_shown(first)} (use {SUPPORTED})"
        return blob
    if any(field in KEY_TYPES or _is_key(fields, i) for i, field in enumerate(fields)):
        return (
            f"key options ({_shown(first)}) are not supported: sealsync would not enforce "
            "them, so the line would grant more than it says; remove them "
            "(the receiver's allow list restricts addresses)"
        )
    return f"not a public key line: {EXPECTED_AUTHORIZED_KEY}"


def parse_authorized_keys(text: str) -> tuple[set[bytes], list[tuple[int, str]]]:
    """The key blobs of an ``authorized_keys`` text, and ``(line, problem)`` of bad lines."""
    blobs: set[bytes] = set()
    problems: list[tuple[int, str]] = []
    for number, fields in _lines(text):
        found = _authorized_key(fields)
        if isinstance(found, str):
            problems.append((number, found))
        else:
            blobs.add(found)
    return blobs, problems


def read_authorized_keys(path: Path) -> set[bytes]:
    """The keys of the file at ``path``, strictly: TrustFileError at the first bad line."""
    blobs, problems = parse_authorized_keys(read_trust_file(path))
    if problems:
        number, problem = problems[0]
        raise TrustFileError(f"{path}:{number}: {problem}")
    return blobs
