"""Ed25519 key pairs for senders and receivers (``sealsync keygen``).

paramiko reads Ed25519 keys but cannot generate them, so generation and the OpenSSH
serialization come from ``cryptography`` (already a paramiko dependency). Keys are
OpenSSH formats so that ``ssh-keygen``, ``authorized_keys`` and ``known_hosts`` tooling
all work with them.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealsync.durable import atomic_write
from sealsync.errors import SealsyncError


def public_path(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".pub")


def generate_keypair(
    path: str | os.PathLike[str], comment: str = "sealsync", force: bool = False
) -> str:
    """Write a new Ed25519 key at ``path`` (0600) and ``path.pub``; return the public line.

    An existing key is kept unless ``force``: overwriting a deployed identity would
    lock its sender out of every receiver that trusts it.
    """
    path = Path(path)
    pub = public_path(path)
    if any(ch in comment for ch in "\r\n\x00"):
        raise SealsyncError("key comment must be a single line")
    if not force:
        for p in (path, pub):
            if p.exists() or p.is_symlink():
                raise SealsyncError(f"{p} already exists (use --force to overwrite)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        public_blob = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        line = public_blob.decode("ascii") + (f" {comment}" if comment else "")
        # 0600 from the first byte; without force, linked into place (never overwrites)
        atomic_write(path, private, 0o600, replace=force)
        atomic_write(pub, line + "\n", 0o644, replace=force)
    except FileExistsError as e:
        target = e.filename2 or e.filename or path  # os.link names the target second
        raise SealsyncError(f"{target} already exists (use --force to overwrite)") from None
    except OSError as e:
        raise SealsyncError(f"cannot write key {path}: {e.strerror or e}") from None
    return line


def _key_blob(key: object) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        parts = key.split()
        if len(parts) < 2:
            raise SealsyncError(f"not an OpenSSH public key line: {key[:40]!r}")
        try:
            return base64.b64decode(parts[1], validate=True)
        except ValueError:
            raise SealsyncError(f"not an OpenSSH public key line: {key[:40]!r}") from None
    asbytes = getattr(key, "asbytes", None)  # paramiko.PKey
    if callable(asbytes):
        return bytes(asbytes())
    raise TypeError(f"cannot take the fingerprint of {type(key).__name__}")


def fingerprint(key: str | bytes | object) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint of a public key line, blob or paramiko key.

    The same string ``ssh-keygen -lf`` prints, so operators can compare keys by eye.
    """
    digest = hashlib.sha256(_key_blob(key)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")
