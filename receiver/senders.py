"""``sealsync senders``: who may act as which sender UUID, re-keying, retiring.

The binding of a UUID to a key is what keeps one sender's folders and devices from
another key (receiver/auth.py). Changing it by editing ``sender_keys.txt`` left a
window in which the UUID was free and any authorized key could claim it first; these
operations change it in one write, under the lock the running receiver also takes,
and never touch a sender's data files. Each raises the file's generation, recorded
outside the storage as well (receiver/key_generation.py), so that a restore of an
older copy cannot undo it silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from receiver.auth import RETIRED, KeyLimit, SenderBinding
from receiver.key_generation import operator_keys
from receiver.layout import check_sender_uuid
from receiver.load.owners import DeviceOwners
from receiver.status import receiver_status
from receiver.storage import open_storage
from sealsync import sshfiles
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError, SealsyncError
from sealsync.keys import fingerprint


def sender_rows(config: ReceiverConfig) -> list[dict[str, Any]]:
    """Each known sender: key fingerprint (or ``retired``), last address and round,
    devices owned and data files held in the storage."""
    storage = open_storage(config)  # built, not started: listing opens nothing
    rows: list[dict[str, Any]] = receiver_status(config)["senders"]
    for row in rows:
        row["retired"] = row["key_fingerprint"] == RETIRED
        row["files"] = len(storage.list(row["uuid"]))
    return rows


def _uuid(value: str) -> str:
    try:
        return check_sender_uuid(value)
    except SealsyncError as exc:
        raise ConfigError(f"{value!r}: {exc}") from None


def read_public_key(path: Path) -> bytes:
    """The key blob of an OpenSSH ``.pub`` file; ConfigError naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"--key {path}: cannot read it ({exc.strerror or exc})") from None
    blobs, problems = sshfiles.parse_authorized_keys(text)
    if problems:
        raise ConfigError(f"--key {path}:{problems[0][0]}: {problems[0][1]}")
    if len(blobs) != 1:
        raise ConfigError(f"--key {path}: expected one public key line, found {len(blobs)}")
    return next(iter(blobs))


def rekey(config: ReceiverConfig, uuid: str, key_path: Path) -> tuple[str, SenderBinding | None]:
    """Bind ``uuid`` to the key in ``key_path`` in one write; the new fingerprint and the
    binding it replaced. The key must already be in ``authorized_keys``: a binding to a
    key that cannot log in would lock the sender out."""
    uuid = _uuid(uuid)
    blob = read_public_key(key_path)
    if blob not in sshfiles.read_authorized_keys(config.authorized_keys):
        raise ConfigError(
            f"--key {key_path} is not in {config.authorized_keys}: add it first "
            f"(cat {key_path} >> {config.authorized_keys}), then run this again"
        )
    fp = fingerprint(blob)
    try:
        return fp, operator_keys(config).set_key(uuid, fp)
    except KeyLimit as exc:
        raise ConfigError(f"--key {key_path}: {exc}") from None


def retire(
    config: ReceiverConfig, uuid: str, release_devices: bool
) -> tuple[SenderBinding, list[str]]:
    """Retire a known ``uuid`` (no key may claim it again, and its key binds no new
    UUID until :func:`rekey` binds it to one) and, if asked, free the devices it owns;
    its files stay where they are. The old binding, devices freed."""
    uuid = _uuid(uuid)
    keys = operator_keys(config)
    if uuid not in keys.bindings():
        raise SealsyncError(
            f"sender {uuid} is not known to this receiver (sealsync senders lists them); "
            "nothing changed"
        )
    old = keys.retire(uuid)
    assert old is not None
    released: list[str] = []
    if release_devices:
        with DeviceOwners(config.schema_dir) as book:
            owned = book.by_owner().get(uuid, [])
            released = book.release(owned) if owned else []
    return old, released


def accept_restore(config: ReceiverConfig) -> int:
    """Take ``sender_keys.txt`` as it is after a restore: its generation is raised past
    the one recorded outside the storage, so ``serve`` starts again; returns it."""
    return operator_keys(config).accept()
