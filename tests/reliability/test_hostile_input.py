"""Hostile input from the sender's own disk and a stolen identity (issue 7, item 4b-c).

Real ``sealsync serve`` and ``sealsync send`` processes over loopback SSH.

Names: a data dir may hold what a name check alone cannot catch — symbolic links to
files and folders outside it (the only way ``..`` can hide on disk), a symlinked
sidecar, names with a newline, a backslash, a control character, invalid UTF-8, a
path over the protocol's length bound, a FIFO with a data suffix. The sender ships
none of them and follows no link (a secret outside the data dir never reaches the
receiver), reports each as rejected, and the round still ships everything else.

Identity: sender B copies sender A's ``uuid.txt``. The receiver binds a UUID to the
first key that presented it, so B is refused at HELLO with one clear line, exit 1,
and nothing at all changes on the receiver; A keeps syncing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from deploy_helpers import Deployment, make_deployment, populate, sha256
from reliability.figures import record

from receiver.storage import DirectoryStorage
from sealsync.simulator import EdgeInstance
from sender.manage.identity import uuid_path

pytestmark = pytest.mark.slow  # sealsync serve and send as processes

SECRET = b"TOP-SECRET-OUTSIDE-THE-DATA-DIR-7f3a"


def receiver_tree(dep: Deployment) -> dict[str, tuple[int, str]]:
    """Every file the receiver holds (data and schema dirs): relative path -> size, hash."""
    out = {}
    top = dep.receiver_data.parent
    for here, _dirs, files in os.walk(top):
        for name in files:
            path = Path(here) / name
            data = path.read_bytes()
            out[path.relative_to(top).as_posix()] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def _seal(path: Path) -> None:
    Path(f"{path}.resource").write_text('{"devices": []}\n')


def test_hostile_names_in_the_data_dir_are_rejected_and_never_followed(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site", senders=1)
    edge = dep.senders[0].edge
    data = edge.data_dirs[0]
    legit = populate(edge, groups=2, files=2, unsequence=0)

    outside = EdgeInstance(tmp_path / "outside")  # sealed files a link could smuggle in
    out_names = populate(outside, groups=1, files=2, prefix="root.outside", unsequence=1)
    out_data = outside.data_dirs[0]
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)

    group = data / "sequence" / "root.h" / "0"
    group.mkdir(parents=True)
    hostile: dict[str, str] = {}  # reported name -> what the reason must say

    # a symlinked data file whose .resource is a real file next to it
    (group / "link.tsfile").symlink_to(out_data / out_names[0])
    _seal(group / "link.tsfile")
    hostile["sequence/root.h/0/link.tsfile"] = "symbolic link"
    # a symlinked folder pointing at another instance's sealed files
    (data / "sequence" / "root.evil").symlink_to(out_data / "sequence" / "root.outside0")
    hostile["sequence/root.evil"] = "symbolic link"
    # the whole unsequence space is a link
    (data / "unsequence").symlink_to(out_data / "unsequence")
    hostile["unsequence"] = "symbolic link"
    # a real data file whose .resource is a link: never sealed, so never shipped
    shutil.copy(out_data / out_names[1], group / "r.tsfile")
    (group / "r.tsfile.resource").symlink_to(secret)
    hostile["sequence/root.h/0/r.tsfile.resource"] = "symbolic link"
    # a sealed file whose .mods is a link to a secret: it ships, the link never does
    mods_victim = "sequence/root.h/0/m.tsfile"
    shutil.copy(out_data / out_names[1], data / mods_victim)
    _seal(data / mods_victim)
    (group / "m.tsfile.mods").symlink_to(secret)
    hostile["sequence/root.h/0/m.tsfile.mods"] = "symbolic link"
    # names no log line or path join may carry
    for name, why in [
        ("a\nb.tsfile", "newline"),
        ("a\\b.tsfile", "backslash"),
        ("a\x01b.tsfile", "control character"),
    ]:
        shutil.copy(out_data / out_names[1], group / name)
        _seal(group / name)
        hostile[f"sequence/root.h/0/{name}"] = why
    bad_utf8 = os.fsdecode(b"bad-\xff.tsfile")
    shutil.copy(out_data / out_names[1], group / bad_utf8)
    _seal(group / bad_utf8)
    hostile[f"sequence/root.h/0/{bad_utf8}"] = "not valid UTF-8"
    deep = group / "/".join(["d" * 200] * 5)
    deep.mkdir(parents=True)
    shutil.copy(out_data / out_names[1], deep / "long.tsfile")
    _seal(deep / "long.tsfile")
    hostile[(deep / "long.tsfile").relative_to(data).as_posix()] = "longer than 1024 bytes"
    os.mkfifo(group / "fifo.tsfile")  # opening it would block the sender forever
    _seal(group / "fifo.tsfile")
    hostile["sequence/root.h/0/fifo.tsfile"] = "not a regular file"

    dep.start_receiver()
    try:
        result = dep.senders[0].send("--json", timeout=120)
    finally:
        dep.stop_receiver()

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)["receivers"][0]["dirs"][0]
    rejected = report["rejected"]
    assert sorted(rejected) == sorted(hostile)
    for name, why in hostile.items():
        assert why in rejected[name], (name, rejected[name])
    shipped = sorted([*legit, mods_victim])
    assert sorted(report["shipped"]) == shipped
    sender = dep.senders[0]
    assert dep.loaded_hashes(sender) == {n: sha256(data / n) for n in shipped}
    target = DirectoryStorage([dep.receiver_data]).target(
        dep.receiver_data, sender.uuid, mods_victim
    )
    assert target.exists() and not Path(f"{target}.mods").exists()
    for rel, _ in receiver_tree(dep).items():  # the secret reached no file of the receiver
        assert SECRET not in (dep.receiver_data.parent / rel).read_bytes(), rel
    assert dep.round_state_left() == []
    record("hostile input", cases=1, refused=len(hostile))


def test_a_stolen_uuid_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site", senders=2)
    a, b = dep.senders
    populate(a.edge, groups=2, files=2, prefix="root.a")
    populate(b.edge, groups=1, files=2, prefix="root.a")  # A's devices, from B's files
    populate(b.edge, groups=1, files=1, prefix="root.b")
    dep.start_receiver()
    try:
        first = a.send()
        assert first.returncode == 0, first.stderr
        assert dep.loaded_hashes(a) == a.sealed_hashes()
        uuid_path(b.edge.schema_dir).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(uuid_path(a.edge.schema_dir), uuid_path(b.edge.schema_dir))
        assert b.uuid == a.uuid
        before = receiver_tree(dep)

        stolen = b.send()

        assert stolen.returncode == 1
        assert "Traceback" not in stolen.stderr
        assert stolen.stderr.splitlines() == [
            f"sealsync: error: receiver: sender UUID {a.uuid} is bound to another public key"
        ]
        assert receiver_tree(dep) == before  # nothing written, under A's name or any other
        assert dep.loaded_hashes(a) == a.sealed_hashes()

        populate(a.edge, groups=1, files=2, prefix="root.a.later")
        again = a.send()
        assert again.returncode == 0, again.stderr
        assert dep.loaded_hashes(a) == a.sealed_hashes()
        assert dep.round_state_left() == []
    finally:
        dep.stop_receiver()
    assert "claims sender" in dep.log() and "bound to another key" in dep.log()
    record("hostile input", cases=1, refused=1)
