"""The receiver's storage identity (receiver.identity), replayed with real processes:
an unmounted disk or a typo'd path is refused by ``serve`` and ``check`` with one
line, exit 2, nothing written; ``serve --init`` marks a new storage; a storage served
before markers existed is recognised by its state and marked once, logged."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, make_deployment, populate, tree

from receiver.identity import MARKER, read_record, record_path
from sealsync.config import load_receiver_config

pytestmark = pytest.mark.slow  # real receivers and senders

EXIT_USAGE = 2


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def not_a_storage(dep: Deployment, key: str, path: Path) -> str:
    return (
        f"sealsync: error: {dep.receiver_config}: [receiver] {key}: {path} is not a sealsync "
        f"storage (no {MARKER}): a disk not mounted, or a wrong path? mount it or fix the path; "
        "for a new storage run `sealsync serve --init` once\n"
    )


def storage_gone(dep: Deployment, key: str, path: Path) -> str:
    """The line for a recorded folder that holds no storage now (receiver.identity)."""
    config = load_receiver_config(dep.receiver_config)
    record = read_record(config)
    assert record is not None
    return (
        f"sealsync: error: {dep.receiver_config}: [receiver] {key}: storage gone: {path} holds "
        f"no sealsync storage (no {MARKER}), but this receiver served storage {record.storage} "
        f"there ({record.path}): a disk not mounted, or the folder replaced? mount it back "
        "(nothing was written); if that storage is lost for good, start a new one with "
        f"`sealsync serve --init --replaces {record.storage}`\n"
    )


def forget_record(dep: Deployment) -> None:
    """As a receiver of an earlier release left things: no record of its storage."""
    record_path(load_receiver_config(dep.receiver_config)).unlink()


def unmount(dep: Deployment) -> None:
    """The data dir's disk is not mounted: its mount point is an empty folder."""
    shutil.rmtree(dep.receiver_data)
    dep.receiver_data.mkdir()


def test_an_unmounted_data_dir_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    unmount(dep)
    before = tree(dep.root)
    for command in ("serve", "check"):
        result = run(command, "--config", str(dep.receiver_config))
        assert result.returncode == EXIT_USAGE, result.stderr
        assert result.stdout == ""
        assert result.stderr == storage_gone(dep, "data_dirs[0]", dep.receiver_data)
        assert tree(dep.root) == before  # no receiver.lock on the root file system
    assert not any(dep.receiver_data.iterdir())
    forget_record(dep)  # a storage set up by an earlier release: the marker alone says it
    result = run("serve", "--config", str(dep.receiver_config))
    assert result.returncode == EXIT_USAGE
    assert result.stderr == not_a_storage(dep, "data_dirs[0]", dep.receiver_data)


def test_a_lock_left_on_a_mount_point_by_an_older_receiver_is_no_storage(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    forget_record(dep)
    unmount(dep)
    (dep.receiver_data / "sync-receiver").mkdir()
    (dep.receiver_data / "sync-receiver" / "receiver.lock").write_text("4242\n")
    result = run("serve", "--config", str(dep.receiver_config))
    assert result.returncode == EXIT_USAGE
    assert result.stderr == not_a_storage(dep, "data_dirs[0]", dep.receiver_data)
    assert not (dep.receiver_data / MARKER).exists()


def test_a_typod_data_dir_naming_another_folder_is_refused(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    elsewhere = dep.root / "dc" / "dat"  # exists, holds things, is no storage
    (elsewhere / "notes").mkdir(parents=True)
    text = dep.receiver_config.read_text().replace(str(dep.receiver_data), str(elsewhere))
    dep.receiver_config.write_text(text)
    before = tree(dep.root)
    result = run("serve", "--config", str(dep.receiver_config))
    assert result.returncode == EXIT_USAGE
    assert result.stderr == not_a_storage(dep, "data_dirs[0]", elsewhere)
    assert tree(dep.root) == before


def test_a_data_dir_of_another_receivers_storage_is_refused(tmp_path: Path) -> None:
    ours = make_deployment(tmp_path / "ours")
    theirs = make_deployment(tmp_path / "theirs")
    text = ours.receiver_config.read_text().replace(
        str(ours.receiver_data), str(theirs.receiver_data)
    )
    ours.receiver_config.write_text(text)
    result = run("serve", "--config", str(ours.receiver_config))
    assert result.returncode == EXIT_USAGE and result.stderr.count("\n") == 1
    assert f"{theirs.receiver_data} belongs to another receiver's storage" in result.stderr
    assert f"remove {theirs.receiver_data / MARKER} and run `sealsync serve --init`" in (
        result.stderr
    )


def test_swapped_schema_dir_and_data_dir_are_refused(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    text = dep.receiver_config.read_text()
    text = text.replace(str(dep.receiver_data), "@DATA@").replace(
        str(dep.receiver_schema), str(dep.receiver_data)
    )
    dep.receiver_config.write_text(text.replace("@DATA@", str(dep.receiver_schema)))
    result = run("check", "--config", str(dep.receiver_config))
    assert result.returncode == EXIT_USAGE and result.stderr.count("\n") == 1
    assert "are schema_dir and data_dirs swapped?" in result.stderr


def test_serve_init_marks_a_new_storage_and_serves_it(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    for folder in (dep.receiver_schema, dep.receiver_data):
        (folder / MARKER).unlink()  # as mkdir left them
    forget_record(dep)  # never served
    result = run("check", "--config", str(dep.receiver_config))
    assert result.returncode == EXIT_USAGE
    proc = subprocess.Popen(
        [*SEALSYNC, "serve", "--init", "--config", str(dep.receiver_config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    dep.proc = proc
    try:
        dep.wait_listening()
        markers = [
            json.loads((f / MARKER).read_text()) for f in (dep.receiver_schema, dep.receiver_data)
        ]
        assert [m["role"] for m in markers] == ["schema dir", "data dir"]
        assert markers[0]["storage"] == markers[1]["storage"]
        sender = dep.senders[0]
        populate(sender.edge, groups=1, files=2)
        assert sender.send().returncode == 0
    finally:
        assert dep.stop_receiver() == 0
    result = run("check", "--config", str(dep.receiver_config))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_storage_from_before_markers_is_recognised_and_marked_once(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=2)
    dep.start_receiver()
    try:
        assert sender.send().returncode == 0
    finally:
        assert dep.stop_receiver() == 0
    for folder in (dep.receiver_schema, dep.receiver_data):
        (folder / MARKER).unlink()  # as an older receiver left its storage
    forget_record(dep)
    before = tree(dep.root)
    result = run("check", "--config", str(dep.receiver_config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"ok: data_dirs[0] {dep.receiver_data} holds state from before storage markers: "
        f"`sealsync serve` marks it ({MARKER}) at its next start"
    ) in result.stdout.splitlines()
    assert tree(dep.root) == before  # check writes nothing
    dep.start_receiver()
    try:
        populate(sender.edge, groups=1, files=1, prefix="root.more")
        assert sender.send().returncode == 0
    finally:
        assert dep.stop_receiver() == 0
    log = dep.log()
    assert log.count("recognised as this receiver's data dir by the state it holds") == 1
    assert log.count("recognised as this receiver's schema dir by the state it holds") == 1
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    dep.start_receiver()  # marked now: nothing more to say
    assert dep.stop_receiver() == 0
    assert dep.log().count("recognised as this receiver's") == 2
