"""``sealsync serve`` and ``sealsync send`` as two real processes over loopback SSH."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest
from deploy_helpers import Deployment, populate

from sender.manage.identity import hostname

pytestmark = pytest.mark.slow  # sealsync serve and send as processes over SSH


@pytest.fixture
def dep(start_deployment: Callable[..., Deployment]) -> Deployment:
    return start_deployment(senders=2, data_dirs=2)


def test_two_processes_move_an_instance_completely(dep: Deployment) -> None:
    edge = dep.senders[0]
    populate(edge.edge, groups=3, files=3)
    populate(edge.edge, groups=2, files=2, prefix="root.other", data_dir=1)
    edge.edge.append_schema(["CREATE DATABASE root.sg0"])

    result = edge.send()
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "\r" not in result.stdout and "\x1b" not in result.stdout  # no bars without a tty
    assert result.stdout.count("\n") == 1  # one summary line per receiver under cron
    assert result.stdout.startswith("dc (127.0.0.1:") and ": ok: shipped 18 files" in result.stdout
    assert dep.loaded_hashes(edge) == edge.sealed_hashes()
    assert dep.round_state_left() == []

    again = edge.send_json()
    assert again["ok"] is True and again["receivers"][0]["shipped_files"] == 0
    assert dep.loaded_hashes(edge) == edge.sealed_hashes()

    # deletions and new files in one round
    gone = edge.edge.sealed_files(0)[:3]
    for rel in gone:
        edge.edge.delete(rel)
    populate(edge.edge, groups=1, files=2, prefix="root.late")
    doc = edge.send_json()
    assert doc["ok"] is True
    deleted = sorted(n for d in doc["receivers"][0]["dirs"] for n in d["deleted"])
    assert deleted == sorted(gone)
    assert dep.loaded_hashes(edge) == edge.sealed_hashes()
    assert dep.round_state_left() == []


def test_conflict_exits_1_with_one_line_per_refused_file(dep: Deployment) -> None:
    a, b = dep.senders
    populate(a.edge, groups=1, files=1, prefix="root.shared")
    assert a.send().returncode == 0
    mine = populate(b.edge, groups=1, files=1, prefix="root.b")
    theirs = populate(b.edge, groups=1, files=1, prefix="root.shared", unsequence=0)
    result = b.send()
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"sealsync: dc: refused {theirs[0]}: ")
    assert f"is owned by sender '{hostname()}'" in lines[0]  # the owner, by its HELLO name
    assert a.uuid not in lines[0]  # one sender never learns another's id
    assert set(dep.loaded_hashes(b)) == set(mine)
    doc = json.loads(b.send("--json").stdout)
    assert doc["ok"] is False
    assert list(doc["receivers"][0]["dirs"][0]["refused"]) == theirs


def test_unreachable_receiver_is_one_line_exit_1(dep: Deployment) -> None:
    edge = dep.senders[0]
    populate(edge.edge, groups=1, files=1)
    assert dep.stop_receiver(signal.SIGTERM) == 0
    result = edge.send()
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"127.0.0.1:{dep.port}" in result.stderr
