"""``status`` and ``owners`` against a real deployment after real rounds."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest
from deploy_helpers import SEALSYNC, Deployment, populate

pytestmark = pytest.mark.slow  # sealsync serve, send, status and owners as processes


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEALSYNC, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def dep(start_deployment: Callable[..., Deployment]) -> Deployment:
    return start_deployment(senders=2)


def test_status_after_synced_pending_and_refused_files(dep: Deployment) -> None:
    a, b = dep.senders
    populate(a.edge, groups=1, files=2, prefix="root.shared", unsequence=0)
    assert a.send().returncode == 0
    mine = populate(b.edge, groups=1, files=3, prefix="root.b", unsequence=0)
    theirs = populate(b.edge, groups=1, files=1, prefix="root.shared", unsequence=0)
    assert b.send().returncode == 1  # one file refused by ownership
    pending = populate(b.edge, groups=1, files=2, prefix="root.later", unsequence=0)
    b.edge.delete(mine[0])

    result = cli("status", "--config", str(b.config), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["role"] == "sender" and doc["uuid"] == b.uuid
    (d,) = doc["receivers"][0]["data_dirs"]
    assert d["synced_files"] == 3
    assert d["pending_new"] == len(pending) + 1  # the later files, and the refused one
    assert d["pending_deleted"] == 1
    assert [x["name"] for x in d["refused"]] == theirs
    assert "is owned by sender '" in d["refused"][0]["reason"]  # named by its HELLO name
    assert a.uuid not in d["refused"][0]["reason"]  # one sender never learns another's id
    assert d["last_round_ok"] is False and d["last_successful_round"] is None
    assert d["last_round"] is not None

    result = cli("status", "--config", str(dep.receiver_config), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["role"] == "receiver"
    assert sorted(s["uuid"] for s in doc["senders"]) == sorted([a.uuid, b.uuid])
    assert all(s["key_fingerprint"].startswith("SHA256:") for s in doc["senders"])
    assert all(s["last_address"] == "127.0.0.1" for s in doc["senders"])
    assert doc["devices_per_owner"] == {a.uuid: 2, b.uuid: 2}
    assert doc["rounds_in_flight"] == []

    text = cli("status", "--config", str(b.config))
    assert text.returncode == 0 and "refused:               1" in text.stdout
    assert "\x1b" not in text.stdout and "\r" not in text.stdout


def test_owners_release_lets_a_refused_sender_load_the_device(dep: Deployment) -> None:
    a, b = dep.senders
    populate(a.edge, groups=1, files=1, prefix="root.moved", unsequence=0)
    assert a.send().returncode == 0
    refused = populate(b.edge, groups=1, files=1, prefix="root.moved", unsequence=0)
    assert b.send().returncode == 1
    assert dep.loaded_hashes(b) == {}

    listing = json.loads(cli("owners", "--config", str(dep.receiver_config), "--json").stdout)
    assert listing == {"owners": {a.uuid: ["root.moved0.d0", "root.moved0.d1"]}}

    released = cli(
        "owners",
        "--config",
        str(dep.receiver_config),
        "release",
        "root.moved0.d0",
        "root.moved0.d1",
        "root.nobody",
    )
    assert released.returncode == 0, released.stderr
    assert released.stdout.splitlines() == [
        "released root.moved0.d0",
        "released root.moved0.d1",
        "not owned: root.nobody",
    ]

    assert b.send().returncode == 0  # released while the receiver runs
    assert set(dep.loaded_hashes(b)) == set(refused)
    listing = json.loads(cli("owners", "--config", str(dep.receiver_config), "--json").stdout)
    assert listing == {"owners": {b.uuid: ["root.moved0.d0", "root.moved0.d1"]}}


def test_owners_usage_errors_are_exit_2(dep: Deployment) -> None:
    for argv in (["release"], ["root.x"]):
        result = cli("owners", "--config", str(dep.receiver_config), *argv)
        assert result.returncode == 2 and "Traceback" not in result.stderr
