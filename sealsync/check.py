"""``sealsync check --config F``: is this config ready to run, without running it?

Like ``sshd -t`` or ``nginx -t``, for a sender, receiver or loader config: the config
parses, the files it names exist with safe modes, the keys load, the trust files
parse, the folders look like what they should be, and a sender's receivers answer
and accept its key. It changes nothing: the config is loaded without creating any
folder, no state is written, no lock is taken. A sender's connection to a receiver
stops once the ``sealsync`` subsystem is open, before the HELLO: a HELLO binds the
sender's UUID to its key on the receiver (and needs the UUID, which the first round
creates), so it is never sent.

A config that cannot be used at all (it does not parse, names a missing file, a key
others can read, a malformed trust line) is a ConfigError, one line and exit 2 like
every command. Everything else is a finding, one line each, ``ok: ...`` or
``problem: ...``; the command exits 1 if any is a problem.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from sealsync.config import (
    LoaderConfig,
    ReceiverConfig,
    ReceiverEndpoint,
    SenderConfig,
    load_any,
)
from sealsync.errors import ConfigError, SealsyncError
from sealsync.keys import fingerprint
from sealsync.names import DATA_ROOTS
from sealsync.printable import printable
from sealsync.sshfiles import read_authorized_keys


@dataclass(frozen=True)
class Finding:
    """One line of the check: sound (``ok``) or a problem to fix."""

    ok: bool
    text: str

    def line(self) -> str:
        return printable(f"{'ok' if self.ok else 'problem'}: {self.text}")


def _ok(text: str) -> Finding:
    return Finding(True, text)


def _problem(text: str) -> Finding:
    return Finding(False, text)


def check_config(path: str | os.PathLike[str]) -> list[Finding]:
    """Every finding for the config at ``path``; ConfigError if it cannot be used."""
    config = load_any(path, create=False)
    if isinstance(config, SenderConfig):
        return check_sender(config)
    if isinstance(config, ReceiverConfig):
        return check_receiver(config)
    return check_loader(config)


def _roots(folder: Path) -> list[str]:
    return [f"{root}/" for root in DATA_ROOTS if (folder / root).is_dir()]


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _writable_dir(what: str, folder: Path, why: str) -> Finding:
    """A folder this end writes into: it must exist and be writable."""
    quoted = shlex.quote(str(folder))
    if not folder.exists():
        return _problem(
            f"{what} {folder} does not exist (a typo, or a disk not mounted?): "
            f"create it with mkdir -p {quoted}"
        )
    if not folder.is_dir():
        return _problem(f"{what} {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        return _problem(f"{what} {folder} is not writable by this user: {why}")
    return _ok(f"{what} {folder} exists and is writable")


# --- sender --------------------------------------------------------------------------


def check_sender(config: SenderConfig) -> list[Finding]:
    """Keys, trust, the instance's folders, then each receiver up to its subsystem."""
    from sender.transfer.client import load_identity, load_known_hosts

    key = load_identity(config.identity)
    known = load_known_hosts(config.known_hosts)
    out = [
        _ok(
            f"sender config {config.source}: {_plural(len(config.data_dirs), 'data dir')}, "
            f"{_plural(len(config.receivers), 'receiver')}"
        ),
        _ok(f"identity {config.identity}: {key.get_name()} {fingerprint(key)}"),
        _ok(f"known_hosts {config.known_hosts}: {_plural(len(known), 'pinned host name')}"),
        _writable_dir("schema_dir", config.schema_dir, "the sender keeps its UUID and locks there"),
    ]
    out.extend(_instance_dir(d) for d in config.data_dirs)
    out.extend(_receiver_answers(config, r) for r in config.receivers)
    return out


def _instance_dir(data_dir: Path) -> Finding:
    """A data dir of the instance holds ``sequence/`` or ``unsequence/`` (else nothing ships)."""
    roots = _roots(data_dir)
    if not roots:
        inside = sorted(
            child
            for child in _children(data_dir)
            if child.is_dir() and not child.is_symlink() and _roots(child)
        )
        hint = f" (such as {inside[0]}, which holds them)" if inside else ""
        return _problem(
            f"data dir {data_dir} holds neither sequence/ nor unsequence/, so a round would "
            f"ship nothing from it: name the instance's data folder{hint}"
        )
    if not os.access(data_dir, os.W_OK | os.X_OK):
        return _problem(
            f"data dir {data_dir} is not writable by this user: the sender keeps its state "
            "and snapshots in its sync-sender/ folder"
        )
    return _ok(f"data dir {data_dir} holds {' and '.join(roots)}")


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _receiver_answers(config: SenderConfig, receiver: ReceiverEndpoint) -> Finding:
    """Connect, verify the host key, authenticate, open the subsystem; then hang up."""
    from sender.transfer.client import connect

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
        return _problem(f"receiver {receiver.name}: {exc}")
    return _ok(
        f"receiver {receiver.name} ({receiver.address}) answers with the pinned host key, "
        "accepts this sender's key and opens the sealsync subsystem"
    )


# --- receiver ------------------------------------------------------------------------


def check_receiver(config: ReceiverConfig) -> list[Finding]:
    """The host key loads, authorized_keys grants someone, the folders are there."""
    from receiver.incoming import sync_method_in_effect
    from receiver.service import load_host_key

    try:
        key = load_host_key(config.host_key)
    except SealsyncError as exc:
        raise ConfigError(f"{config.source}: [receiver] host_key: {exc}") from None
    blobs = read_authorized_keys(config.authorized_keys)
    allow = ", ".join(str(n) for n in config.allow) or "nobody"
    out = [
        _ok(
            f"receiver config {config.source}: listen {config.listen}, "
            f"{_plural(len(config.data_dirs), 'data dir')}, allow {allow}"
        ),
        _ok(f"host key {config.host_key}: {key.get_name()} {fingerprint(key)}"),
        _ok(f"authorized_keys {config.authorized_keys}: {_plural(len(blobs), 'key')}")
        if blobs
        else _problem(
            f"authorized_keys {config.authorized_keys} holds no key: no sender can log in "
            "(append each sender's .pub line)"
        ),
    ]
    if not config.allow:
        out.append(_problem("allow is empty: every connection is refused"))
    out.append(
        _writable_dir(
            "schema_dir", config.schema_dir, "the receiver keeps senders' keys and owners there"
        )
    )
    out.extend(
        _writable_dir("data dir", d, "the receiver stores what senders ship there")
        for d in config.data_dirs
    )
    out.append(_ok(f"sync_method {sync_method_in_effect(config.sync_method)}"))
    return out


# --- loader --------------------------------------------------------------------------


def check_loader(config: LoaderConfig) -> list[Finding]:
    """The receiver's data dirs hold something, the table and state can be written."""
    out = [_ok(f"loader config {config.source}: table {config.table_path}, master {config.master}")]
    out.extend(_receiver_data_dir(d) for d in config.receiver_data_dirs)
    out.append(_creatable("table_path", config.table_path))
    out.append(_creatable("state_dir", config.state_dir))
    return out


def _receiver_data_dir(folder: Path) -> Finding:
    try:
        empty = not any(folder.iterdir())
    except OSError as exc:
        return _problem(f"receiver data dir {folder}: cannot list it: {exc.strerror or exc}")
    if empty:
        return _problem(
            f"receiver data dir {folder} is empty (a typo, or a disk not mounted?): "
            "the loader would find no file in it"
        )
    roots = _roots(folder)
    if not roots:
        return _problem(
            f"receiver data dir {folder} holds neither sequence/ nor unsequence/: "
            "name a folder of the receiver's data_dirs"
        )
    return _ok(f"receiver data dir {folder} holds {' and '.join(roots)}")


def _creatable(what: str, path: Path) -> Finding:
    """A folder the loader writes: present and writable, or creatable by its first run."""
    if path.exists():
        if not path.is_dir():
            return _problem(f"{what} {path} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            return _problem(f"{what} {path} is not writable by this user")
        return _ok(f"{what} {path} exists and is writable")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return _problem(f"{what} {path} cannot be created: {parent} is not writable by this user")
    return _ok(f"{what} {path} does not exist yet: the first load creates it")
