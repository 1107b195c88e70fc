"""The generation of ``sender_keys.txt`` (receiver/key_generation.py): an operator's
re-key or retirement raises it and records it beside ``authorized_keys``, out of
the storage's reach, so that a restore of an older copy stops ``serve`` (exit 2,
one line naming the fix) instead of accepting a retired sender again. Replayed with
real ``serve``, ``senders`` and ``send`` processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, make_deployment, populate, tree

from receiver.auth import RETIRED, Retired, RolledBack, SenderKeys
from receiver.key_generation import Witness
from sealsync.errors import ConfigError, LocalIOError

UUID_A = "6f1c2d3e-0000-4000-8000-00000000000a"
UUID_B = "6f1c2d3e-0000-4000-8000-00000000000b"
FP_A = "SHA256:" + "a" * 43


def test_operator_changes_raise_the_generation_and_the_receivers_own_keep_it(
    tmp_path: Path,
) -> None:
    witness = Witness(tmp_path / "keys" / "w.generation")
    witness.path.parent.mkdir()
    keys = SenderKeys(tmp_path / "schema", witness=witness)
    assert keys.bind(UUID_A, FP_A, "10.0.0.1") is not None  # a new sender: no generation
    assert (keys.generation(), witness.read()) == (0, 0)
    assert not keys.path.read_text().startswith("#")
    keys.retire(UUID_A)
    assert (keys.generation(), witness.read()) == (1, 1)
    assert keys.path.read_text().splitlines()[0] == "# generation 1"
    assert witness.path.read_text() == "1\n"
    assert keys.bind(UUID_B, "SHA256:" + "b" * 43, "10.0.0.2") is not None
    assert keys.generation() == 1  # kept by the receiver's own write
    assert keys.bindings()[UUID_A].fingerprint == RETIRED
    # a copy of the file from before the retirement, as a restore leaves it
    keys.path.write_text(f"{UUID_A}\t{FP_A}\t10.0.0.1\t2026-01-01T00:00:00+00:00\n")
    restored = SenderKeys(tmp_path / "schema", witness=witness)
    assert restored.generation() == 0 and witness.read() == 1
    assert restored.accept() == 2  # past the witness, the bindings as they are
    assert (restored.generation(), witness.read()) == (2, 2)
    assert restored.bindings()[UUID_A].fingerprint == FP_A


def test_a_copy_restored_under_a_running_receiver_accepts_nobody(tmp_path: Path) -> None:
    keys = SenderKeys(tmp_path / "schema")
    assert keys.bind(UUID_A, FP_A, "10.0.0.1") is not None
    older = keys.path.read_bytes()
    keys.retire(UUID_A)
    with pytest.raises(Retired):
        keys.bind(UUID_A, FP_A, "10.0.0.1")
    keys.path.write_bytes(older)  # restored while the receiver runs
    for uuid in (UUID_A, UUID_B):
        with pytest.raises(RolledBack, match="restored from an older copy"):
            keys.bind(uuid, FP_A, "10.0.0.1")
    keys.retire(UUID_A)  # the operator redoes the retirement: the generation is back
    assert keys.bind(UUID_B, "SHA256:" + "b" * 43, "10.0.0.2") is not None
    with pytest.raises(Retired):
        keys.bind(UUID_A, FP_A, "10.0.0.1")


def test_a_witness_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    keys = SenderKeys(tmp_path / "schema", witness=Witness(tmp_path / "gone" / "w.generation"))
    assert keys.bind(UUID_A, FP_A, "10.0.0.1") is not None
    before = keys.path.read_bytes()
    with pytest.raises(LocalIOError, match="nothing was changed; run this as a user who may"):
        keys.retire(UUID_A)
    assert keys.path.read_bytes() == before
    assert keys.bindings()[UUID_A].fingerprint == FP_A


def test_a_damaged_witness_is_named(tmp_path: Path) -> None:
    witness = Witness(tmp_path / "w.generation")
    witness.path.write_text("seven\n")
    with pytest.raises(ConfigError, match="is damaged"):
        witness.read()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


@pytest.mark.slow  # real receivers and senders
def test_a_restored_older_sender_keys_stops_serve_and_the_retired_sender_stays_out(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path / "site", senders=2)
    retired, other = dep.senders
    populate(retired.edge, groups=1, files=1)
    populate(other.edge, groups=1, files=1, prefix="root.other")
    config = str(dep.receiver_config)
    sender_keys = dep.receiver_schema / "sync" / "sender_keys.txt"
    storage = json.loads((dep.receiver_schema / "sealsync-storage.json").read_text())["storage"]
    witness = dep.root / "keys" / f"sealsync-keys-{storage}.generation"
    dep.start_receiver()
    try:
        assert retired.send().returncode == 0
        assert other.send().returncode == 0
        backup = sender_keys.read_bytes()  # a backup of the state, taken now
        removed = run("senders", "--config", config, "remove", retired.uuid)
        assert removed.returncode == 0, removed.stderr
        assert witness.read_text() == "1\n"
        refused = retired.send()
        assert refused.returncode == 1 and "was retired on this receiver" in refused.stderr
    finally:
        assert dep.stop_receiver() == 0

    sender_keys.write_bytes(backup)  # the state restored from that backup
    populate(retired.edge, groups=1, files=1, prefix="root.later")
    before = tree(dep.root / "dc")
    served = run("serve", "--config", config)
    assert served.returncode == 2, served.stderr
    cmd = f"sealsync senders --config {config}"
    assert served.stderr == (
        f"sealsync: error: {sender_keys} is at generation 0 but its retirements and re-keys "
        f"reached generation 1 ({witness}): the receiver's state was restored from an older "
        f"backup, which undoes those made since; list them with `{cmd}` and redo them "
        f"(`{cmd} remove UUID`, `rekey`), or take the restored state as it is with "
        f"`{cmd} accept-restore`\n"
    )
    assert tree(dep.root / "dc") == before  # nothing written, no lock taken
    checked = run("check", "--config", config)  # check says the same
    assert (checked.returncode, checked.stderr) == (2, served.stderr)

    # the fix the line names: the retirement redone, then serve starts again
    again = run("senders", "--config", config, "remove", retired.uuid)
    assert again.returncode == 0, again.stderr
    assert witness.read_text() == "2\n"
    assert sender_keys.read_text().splitlines()[0] == "# generation 2"
    dep.start_receiver()
    try:
        refused = retired.send()
        assert refused.returncode == 1 and "was retired on this receiver" in refused.stderr
        assert other.send().returncode == 0
    finally:
        assert dep.stop_receiver() == 0
    assert not any("/root.later" in name for name in dep.loaded_hashes(retired))


@pytest.mark.slow  # real receivers
def test_accept_restore_takes_the_restored_state_as_it_is(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=1)
    config = str(dep.receiver_config)
    sender_keys = dep.receiver_schema / "sync" / "sender_keys.txt"
    dep.start_receiver()
    try:
        assert sender.send().returncode == 0
        backup = sender_keys.read_bytes()
        assert run("senders", "--config", config, "remove", sender.uuid).returncode == 0
    finally:
        assert dep.stop_receiver() == 0
    sender_keys.write_bytes(backup)
    assert run("serve", "--config", config).returncode == 2
    accepted = run("senders", "--config", config, "accept-restore")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == "sender keys accepted as they are, now at generation 2\n"
    dep.start_receiver()  # starts: the operator took the state as it is
    try:
        assert sender.send().returncode == 0  # the restored binding, not retired
    finally:
        assert dep.stop_receiver() == 0
    usage = run("senders", "--config", config, "accept-restore", sender.uuid)
    assert usage.returncode == 2
