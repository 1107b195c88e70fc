"""``sealsync check --config F`` as a real process, against a real receiver over
loopback SSH: one ``ok:``/``problem:`` line per finding, exit 0/1/2, and nothing
changed on either side (no folder, no state, no UUID, no binding on the receiver)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from config_helpers import loader_doc, write_config
from deploy_helpers import SEALSYNC, Deployment, make_deployment, mark_storage, populate, tree

from sealsync.keys import generate_keypair

pytestmark = pytest.mark.slow


def check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def findings(result: subprocess.CompletedProcess[str]) -> tuple[list[str], list[str]]:
    """The ``ok:`` and ``problem:`` lines; every line of stdout is one or the other."""
    lines = result.stdout.splitlines()
    ok = [line[4:] for line in lines if line.startswith("ok: ")]
    problems = [line[9:] for line in lines if line.startswith("problem: ")]
    assert len(ok) + len(problems) == len(lines), result.stdout
    assert result.stderr == ""
    return ok, problems


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site")
    populate(d.senders[0].edge, groups=1, files=1)
    d.start_receiver()
    yield d
    d.stop_receiver()


def test_a_sound_sender_is_all_ok_and_nothing_changes(dep: Deployment) -> None:
    sender = dep.senders[0]
    before = tree(dep.root)
    result = check(sender.config)
    assert result.returncode == 0, result.stdout + result.stderr
    ok, problems = findings(result)
    assert problems == []
    assert ok[0] == f"sender config {sender.config}: 1 data dir, 1 receiver"
    assert ok[1].startswith(f"identity {dep.root / 'keys' / 'edge0'}: ssh-ed25519 SHA256:")
    assert f"data dir {sender.edge.data_dirs[0]} holds sequence/ and unsequence/" in ok
    assert ok[-1] == (
        f"receiver dc (127.0.0.1:{dep.port}) answers with the pinned host key, accepts this "
        "sender's key and opens the sealsync subsystem"
    )
    assert tree(dep.root) == before  # no uuid.txt, lock, sync-sender/, binding, folder
    assert not (dep.receiver_schema / "sync" / "sender_keys.txt").exists()
    assert "session open" not in dep.log()  # stopped before the HELLO
    assert sender.send().returncode == 0  # and the receiver serves the next round as usual


def test_sender_problems_are_one_line_each_and_exit_1(dep: Deployment, tmp_path: Path) -> None:
    sender = dep.senders[0]
    edge_root = sender.edge.data_dirs[0].parent  # the instance root, not its data dir
    config = sender.config
    config.write_text(config.read_text().replace(f'"{sender.edge.data_dirs[0]}"', f'"{edge_root}"'))
    dep.stop_receiver()
    before = tree(dep.root)
    result = check(config)
    assert result.returncode == 1
    ok, problems = findings(result)
    assert problems == [
        f"data dir {edge_root} holds neither sequence/ nor unsequence/, so a round would ship "
        f"nothing from it: name the instance's data folder (such as {sender.edge.data_dirs[0]}, "
        "which holds them)",
        f"receiver dc: cannot connect to receiver 127.0.0.1:{dep.port}: Connection refused"
        " (nothing listens there: is the receiver running, and are the [[receiver]] host and"
        " port right?)",
    ]
    assert len(ok) == 4
    assert tree(dep.root) == before


def test_a_receiver_that_refuses_the_key_or_shows_another_host_key(dep: Deployment) -> None:
    sender = dep.senders[0]
    authorized = dep.root / "keys" / "authorized_keys"
    authorized.write_text("")  # the receiver re-reads it: this key is no longer let in
    result = check(sender.config)
    assert result.returncode == 1
    _, problems = findings(result)
    assert len(problems) == 1
    assert problems[0].startswith(f"receiver dc: receiver 127.0.0.1:{dep.port} refused key ")

    known = dep.root / "keys" / "known_hosts"
    other = generate_keypair(dep.root / "other" / "host").split()
    known.write_text(f"[127.0.0.1]:{dep.port} {other[0]} {other[1]}\n")
    result = check(sender.config)
    assert result.returncode == 1
    _, problems = findings(result)
    assert len(problems) == 1
    assert f"host key for [127.0.0.1]:{dep.port} CHANGED" in problems[0]


def test_an_unusable_config_is_one_error_line_and_exit_2(dep: Deployment) -> None:
    key = dep.root / "keys" / "edge0"
    key.chmod(0o644)
    result = check(dep.senders[0].config)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sealsync: error: ")
    assert lines[0].endswith(f"run chmod 600 {key}")


def test_a_receiver_check_creates_no_folder(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    shutil.rmtree(dep.root / "dc")  # a receiver whose folders were never made (or unmounted)
    for record in (dep.root / "keys").glob("sealsync-served-*.json"):
        record.unlink()  # never served, so no record of its storage either
    before = tree(dep.root)
    result = check(dep.receiver_config)
    assert result.returncode == 1
    ok, problems = findings(result)
    assert problems == [
        f"schema_dir {dep.receiver_schema} does not exist (a typo, or a disk not mounted?): "
        f"create it with mkdir -p {dep.receiver_schema}",
        f"data dir {dep.receiver_data} does not exist (a typo, or a disk not mounted?): "
        f"create it with mkdir -p {dep.receiver_data}",
    ]
    assert ok[0].startswith(f"receiver config {dep.receiver_config}: listen 127.0.0.1:")
    assert ok[1].startswith(f"host key {dep.root / 'keys' / 'host'}: ssh-ed25519 SHA256:")
    assert ok[2] == f"authorized_keys {dep.root / 'keys' / 'authorized_keys'}: 1 key"
    # the kernel here (and CI's) reports syncfs errors, so the default is in effect
    assert (
        "sync_method syncfs: each batch of received files takes one syncfs of its file system"
    ) in ok
    assert ok[-1] == "storage: kind directory, device_scope receiver"
    assert tree(dep.root) == before
    assert not (dep.root / "dc").exists()

    dep.receiver_schema.mkdir(parents=True)
    dep.receiver_data.mkdir(parents=True)
    result = check(dep.receiver_config)  # mkdir'd, not marked: an empty mount point?
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"sealsync: error: {dep.receiver_config}: [receiver] schema_dir: {dep.receiver_schema} "
        "is not a sealsync storage (no sealsync-storage.json): a disk not mounted, or a wrong "
        "path? mount it or fix the path; for a new storage run `sealsync serve --init` once\n"
    )
    assert not any(dep.receiver_data.iterdir()) and not any(dep.receiver_schema.iterdir())
    mark_storage(dep.receiver_config)
    result = check(dep.receiver_config)
    assert result.returncode == 0
    assert findings(result)[1] == []


def test_a_loader_check_finds_an_empty_receiver_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "dc" / "data"
    data.mkdir(parents=True)
    config = write_config(tmp_path / "L.toml", loader_doc())
    before = tree(tmp_path)
    result = check(config)
    assert result.returncode == 1
    ok, problems = findings(result)
    assert problems == [
        f"receiver data dir {data} is empty (a typo, or a disk not mounted?): the loader would "
        "find no file in it"
    ]
    assert f"table_path {tmp_path / 'warehouse/points'} does not exist yet: the first load " in (
        "\n".join(ok)
    )
    assert tree(tmp_path) == before  # no table, no state folder

    (data / "sequence").mkdir()
    result = check(config)
    assert result.returncode == 0
    assert f"receiver data dir {data} holds sequence/" in findings(result)[0]
