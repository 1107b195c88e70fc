"""The generation of the receiver's security state, kept where a restore does not reach.

``sender_keys.txt`` (which key may act as which sender, and the retired senders)
lives in the schema dir, and a storage restored from an older backup brings older
bindings back: a retired sender accepted again, a replaced key valid again. So every
operator change to it (``sealsync senders rekey``, ``senders retire``) raises the
file's generation (its first line, receiver/auth.py) and records the new generation
in a **witness** file outside the storage, beside ``authorized_keys``::

    <folder of authorized_keys>/sealsync-keys-<storage id>.generation

Why there: it is the receiver's configuration, not its storage, so a restore of the
schema and data dirs (the ``/var/lib/sealsync`` of the docs) does not roll it back;
the operator who re-keys a sender writes in that folder already (the new key goes
into ``authorized_keys``); and ``serve`` only reads it, so a service that may not
write its configuration (systemd's ``ProtectSystem=strict``) is fine. The storage id
(the schema dir's marker, receiver/identity.py) in its name keeps two receivers that
share a key folder apart; a storage wiped and initialised again has a new id, and so
starts at generation 0 with its empty state.

The witness is written before the file: a crash or a refused write between the two
leaves the witness ahead, which stops ``serve`` until an operator looks (fail
closed), never the reverse.

``serve`` (:func:`require_generation`) refuses, exit 2 with one line, a file whose
generation is behind its witness: the state was restored from an older backup, and
the retirements and re-keys made since are undone. The fix: list the senders
(``sealsync senders``) and redo those changes (each raises the generation past the
witness), or take the restored state as it is with ``sealsync senders
accept-restore``. A witness that is missing or behind the file is not refused: a
receiver from before generations, or a configuration folder set up anew. An older copy
restored under a running receiver is caught by the receiver itself: its sender keys
refuse every sender once the file's generation went down (``auth.RolledBack``, an
error line in its log), until the operator redoes a change or the receiver restarts
into this check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from receiver.auth import SenderKeys
from receiver.identity import SCHEMA, inspect_storage
from sealsync import durable
from sealsync.config import ReceiverConfig
from sealsync.errors import ConfigError, LocalIOError

WITNESS_SUFFIX = ".generation"


@dataclass(frozen=True)
class Witness:
    """The generation of one storage's ``sender_keys.txt`` as operators last set it."""

    path: Path

    def read(self) -> int:
        """The recorded generation; 0 when there is none."""
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise ConfigError(
                f"cannot read {self.path} (the generation of the receiver's sender keys): "
                f"{exc.strerror or exc}: give the receiver's user read access to it"
            ) from None
        value = text.strip()
        if not value.isdigit():
            raise ConfigError(
                f"{self.path} is damaged (expected the generation of the receiver's sender "
                "keys, one number): restore it, or remove it and run `sealsync senders "
                "accept-restore` once the senders' keys are checked"
            )
        return int(value)

    def write(self, generation: int) -> None:
        """Record ``generation``; LocalIOError (nothing changed) if it cannot be."""
        try:
            durable.atomic_write(self.path, f"{generation}\n", 0o644)
        except OSError as exc:
            raise LocalIOError(
                f"cannot record the sender keys' generation in {self.path}: "
                f"{exc.strerror or exc}: nothing was changed; run this as a user who may "
                f"write {self.path.parent} (as for editing authorized_keys)"
            ) from None


def witness_for(config: ReceiverConfig, storage: str) -> Witness:
    """The witness of storage ``storage`` of this receiver (see the module)."""
    folder = Path(config.authorized_keys).parent
    return Witness(folder / f"sealsync-keys-{storage}{WITNESS_SUFFIX}")


def storage_witness(config: ReceiverConfig) -> Witness | None:
    """The witness of the configured storage; None for a schema dir not marked yet
    (a storage from before markers, not served since: no id to name it by)."""
    verdict = inspect_storage(config)
    if any(folder.role == SCHEMA for folder in verdict.upgrade):
        return None
    return witness_for(config, verdict.storage)


def operator_keys(config: ReceiverConfig) -> SenderKeys:
    """``sender_keys.txt`` for an operator's change, its generation recorded."""
    return SenderKeys(config.schema_dir, config.max_uuids_per_key, storage_witness(config))


def require_generation(config: ReceiverConfig, storage: str) -> None:
    """ConfigError (exit 2, one line: the cause and the fix) when the storage's
    ``sender_keys.txt`` is at an older generation than its witness."""
    keys = SenderKeys(config.schema_dir)
    have = keys.generation()
    witness = witness_for(config, storage)
    recorded = witness.read()
    if recorded <= have:
        return
    cmd = f"sealsync senders --config {config.source}"
    raise ConfigError(
        f"{keys.path} is at generation {have} but its retirements and re-keys reached "
        f"generation {recorded} ({witness.path}): the receiver's state was restored from an "
        f"older backup, which undoes those made since; list them with `{cmd}` and redo "
        f"them (`{cmd} remove UUID`, `rekey`), or take the restored state as it is with "
        f"`{cmd} accept-restore`"
    )
