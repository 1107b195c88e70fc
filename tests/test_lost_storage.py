"""A receiver that lost its storage is noticed by the next plain ``send``
(sender/lost_storage.py), replayed with real ``serve`` and ``send`` processes: the
storage wiped and initialised again, or restored from a backup that lacks a file.
By default the send reconciles on its own (a warning line) and every file is shipped
again; with ``on_lost_storage = "fail"`` it exits 1 with one line naming the
command, sends nothing, and that command then ships them. Nothing is lost either way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deploy_helpers import Deployment, Sender, make_deployment, mark_storage, populate

from receiver.storage import DirectoryStorage
from sealsync.simulator import SCHEMA_LOG
from sender.manage.history import last_attempt
from sender.manage.layout import SchemaPaths

pytestmark = pytest.mark.slow  # real receivers and senders


def shipped_deployment(root: Path, option: str | None = None) -> tuple[Deployment, Sender]:
    """A deployment whose one sender shipped its files once (the receiver stopped)."""
    dep = make_deployment(root)
    sender = dep.senders[0]
    if option is not None:
        text = sender.config.read_text()
        sender.config.write_text(text.replace("max_retries = 3\n", f"max_retries = 3\n{option}\n"))
    populate(sender.edge, groups=2, files=2)
    sender.edge.append_schema(["CREATE DATABASE root.sg0", "CREATE DATABASE root.sg1"])
    dep.start_receiver()
    try:
        first = sender.send()
        assert first.returncode == 0, first.stderr
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()
        assert schema_in_step(dep, sender)
        again = sender.send()  # the storage holds what was shipped: nothing to say
        assert again.returncode == 0 and again.stderr == "", again.stderr
    finally:
        assert dep.stop_receiver() == 0
    return dep, sender


def wipe_and_init(dep: Deployment, sender: Sender) -> None:
    """The receiver's storage lost and set up again, as ``serve --init`` does; the
    edge's schema log grows meanwhile (shipped from where the lost copy ended, it would
    not continue anything the receiver holds)."""
    for folder in (dep.receiver_data, dep.receiver_schema):
        shutil.rmtree(folder)
        folder.mkdir()
    mark_storage(dep.receiver_config)
    sender.edge.append_schema(["CREATE DATABASE root.sg2"])


def schema_in_step(dep: Deployment, sender: Sender) -> bool:
    """The receiver's copy of the sender's schema log is the edge's log."""
    copy = dep.receiver_schema / "sync" / "senders" / sender.uuid / SCHEMA_LOG
    return copy.read_bytes() == (sender.edge.schema_dir / SCHEMA_LOG).read_bytes()


def test_a_wiped_storage_is_refilled_by_the_next_plain_send(tmp_path: Path) -> None:
    dep, sender = shipped_deployment(tmp_path / "site")
    shipped = sender.sealed_hashes()
    wipe_and_init(dep, sender)
    dep.start_receiver()
    try:
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines()[0] == (
            f"sealsync: WARNING: receiver dc holds no file of this sender, which shipped "
            f"{len(shipped)} there (storage lost, or restored from an older backup?): "
            "reconciling, as send --reconcile does"
        )
        assert f"reconcile: {len(shipped)} missing" in result.stdout
        assert dep.loaded_hashes(sender) == shipped
        assert schema_in_step(dep, sender)

        # restored from a backup that lacks one file: the names differ, it is shipped again
        lost = sorted(shipped)[0]
        storage = DirectoryStorage([dep.receiver_data])
        storage.target(dep.receiver_data, sender.uuid, lost).unlink()
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert (
            f"receiver dc holds {len(shipped) - 1} files of this sender, which believes "
            f"{len(shipped)} synced there (storage lost"
        ) in result.stderr
        assert dep.loaded_hashes(sender) == shipped
        quiet = sender.send()  # in step again
        assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    finally:
        assert dep.stop_receiver() == 0


def test_configured_to_fail_the_send_exits_1_naming_the_command(tmp_path: Path) -> None:
    dep, sender = shipped_deployment(tmp_path / "site", 'on_lost_storage = "fail"')
    shipped = sender.sealed_hashes()
    wipe_and_init(dep, sender)
    dep.start_receiver()
    try:
        result = sender.send()
        assert result.returncode == 1, result.stderr
        assert result.stderr == (
            f"sealsync: error: receiver dc holds no file of this sender, which shipped "
            f"{len(shipped)} there (storage lost, or restored from an older backup?): "
            f"nothing was sent; run `sealsync send --reconcile --config {sender.config} "
            "--receiver dc` to ship again what it lacks (or set on_lost_storage = "
            '"reconcile")\n'
        )
        assert dep.loaded_hashes(sender) == {}
        recorded = last_attempt(SchemaPaths(sender.edge.schema_dir, "127.0.0.1", dep.port))
        assert recorded is not None
        assert (recorded["outcome"], recorded["kind"]) == ("failed", "reconcile")
        again = sender.send()  # not forgotten: every plain send says it until it is fixed
        assert again.returncode == 1 and again.stderr == result.stderr
        fixed = sender.send("--reconcile", "--receiver", "dc")
        assert fixed.returncode == 0, fixed.stderr
        assert dep.loaded_hashes(sender) == shipped
        assert schema_in_step(dep, sender)
        quiet = sender.send()
        assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    finally:
        assert dep.stop_receiver() == 0
