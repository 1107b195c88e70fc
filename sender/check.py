"""``sealsync check`` of a sender config: keys, trust, the instance's folders, and each
receiver up to its subsystem.

The connection to a receiver stops once the ``sealsync`` subsystem is open, before
the HELLO: a HELLO binds the sender's UUID to its key on the receiver (and needs the
UUID, which the first round creates), so it is never sent.
"""

from __future__ import annotations

import os
from pathlib import Path

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import ConfigError, SealsyncError
from sealsync.findings import Finding, data_roots, plural, problem, sound, writable_dir
from sealsync.keys import fingerprint
from sender.manage.data_owner import owner_problem
from sender.transfer.client import connect, load_identity, load_known_hosts


def check_sender(config: SenderConfig) -> list[Finding]:
    """Keys, trust, the instance's folders, then each receiver up to its subsystem."""
    key = load_identity(config.identity)
    known = load_known_hosts(config.known_hosts)
    out = [
        sound(
            f"sender config {config.source}: {plural(len(config.data_dirs), 'data dir')}, "
            f"{plural(len(config.receivers), 'receiver')}"
        ),
        sound(f"identity {config.identity}: {key.get_name()} {fingerprint(key)}"),
        sound(f"known_hosts {config.known_hosts}: {plural(len(known), 'pinned host name')}"),
        writable_dir("schema_dir", config.schema_dir, "the sender keeps its UUID and locks there"),
    ]
    out.extend(_instance_dir(d) for d in config.data_dirs)
    for i, data_dir in enumerate(config.data_dirs):  # another sender's: exit 2, one line
        owned = owner_problem(config.source, i, data_dir, config.schema_dir)
        if owned is not None:
            raise ConfigError(owned)
    out.extend(_receiver_answers(config, r) for r in config.receivers)
    return out


def _instance_dir(data_dir: Path) -> Finding:
    """A data dir of the instance holds ``sequence/`` or ``unsequence/`` (else nothing ships)."""
    roots = data_roots(data_dir)
    if not roots:
        inside = sorted(
            child
            for child in _children(data_dir)
            if child.is_dir() and not child.is_symlink() and data_roots(child)
        )
        hint = f" (such as {inside[0]}, which holds them)" if inside else ""
        return problem(
            f"data dir {data_dir} holds neither sequence/ nor unsequence/, so a round would "
            f"ship nothing from it: name the instance's data folder{hint}"
        )
    if not os.access(data_dir, os.W_OK | os.X_OK):
        return problem(
            f"data dir {data_dir} is not writable by this user: the sender keeps its state "
            "and snapshots in its sync-sender/ folder"
        )
    return sound(f"data dir {data_dir} holds {' and '.join(roots)}")


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _receiver_answers(config: SenderConfig, receiver: ReceiverEndpoint) -> Finding:
    """Connect, verify the host key, authenticate, open the subsystem; then hang up."""
    try:
        with connect(
            receiver.host,
            receiver.port,
            identity=config.identity,
            known_hosts=config.known_hosts,
            timeout=config.connect_timeout,
        ):
            pass
    except ConfigError:
        raise
    except SealsyncError as exc:
        return problem(f"receiver {receiver.name}: {exc}")
    return sound(
        f"receiver {receiver.name} ({receiver.address}) answers with the pinned host key, "
        "accepts this sender's key and opens the sealsync subsystem"
    )
