"""``sealsync check`` of a receiver config: the host key loads, authorized_keys grants
someone, the folders are there and are this receiver's storage (their markers,
:mod:`receiver.identity`), and its sender keys were not restored from before their last
change (:mod:`receiver.key_generation`). Nothing is created and nothing listens."""

from __future__ import annotations

from receiver.identity import MARKER, SCHEMA, inspect_storage
from receiver.incoming import sync_method_in_effect
from receiver.key_generation import require_generation
from receiver.load.owners import scope_for
from receiver.service import load_host_key
from receiver.storage import open_storage
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError, SealsyncError
from sealsync.findings import Finding, plural, problem, sound, writable_dir
from sealsync.keys import fingerprint
from sealsync.sshfiles import read_authorized_keys


def check_receiver(config: ReceiverConfig) -> list[Finding]:
    """The host key loads, authorized_keys grants someone, the folders are there."""
    try:
        key = load_host_key(config.host_key)
    except SealsyncError as exc:
        raise ConfigError(f"{config.source}: [receiver] host_key: {exc}") from None
    blobs = read_authorized_keys(config.authorized_keys)
    allow = ", ".join(str(n) for n in config.allow) or "nobody"
    out = [
        sound(
            f"receiver config {config.source}: listen {config.listen}, "
            f"{plural(len(config.data_dirs), 'data dir')}, allow {allow}"
        ),
        sound(f"host key {config.host_key}: {key.get_name()} {fingerprint(key)}"),
        sound(f"authorized_keys {config.authorized_keys}: {plural(len(blobs), 'key')}")
        if blobs
        else problem(
            f"authorized_keys {config.authorized_keys} holds no key: no sender can log in "
            "(append each sender's .pub line)"
        ),
    ]
    if not config.allow:
        out.append(problem("allow is empty: every connection is refused"))
    out.append(
        writable_dir(
            "schema_dir", config.schema_dir, "the receiver keeps senders' keys and owners there"
        )
    )
    out.extend(
        writable_dir("data dir", d, "the receiver stores what senders ship there")
        for d in config.data_dirs
    )
    verdict = inspect_storage(config)  # not this receiver's storage: exit 2, one line
    if not any(folder.role == SCHEMA for folder in verdict.upgrade):
        require_generation(config, verdict.storage)  # restored sender keys: exit 2, one line
    for folder in verdict.upgrade:
        out.append(
            sound(
                f"{folder.key} {folder.path} holds state from before storage markers: "
                f"`sealsync serve` marks it ({MARKER}) at its next start"
            )
        )
    out.append(sound(f"sync_method {sync_method_in_effect(config.sync_method)}"))
    storage = open_storage(config)  # an unknown kind or a bad [receiver.storage] key: exit 2
    scope = scope_for(config, storage)  # per-sender devices in a storage that merges them: 2
    out.append(sound(f"storage: kind {config.storage.kind}, device_scope {scope}"))
    return out
