"""``send --reconcile`` after receiver-side loss, against a real ``sealsync serve``.

The receiver's storage is damaged the ways a restore damages it — a file gone, one
truncated, one with bytes changed at the same size, one the sender had deleted put
back — and reconcile must find each, report it without changing anything under
``--dry-run``, then repair all in one round; with the sender's data dirs empty it
must refuse and delete nothing. The comparison logic has fast tests of its own below.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_helpers import Deployment, populate, tree

from receiver.inventory import MD5_XATTR, recorded_md5
from receiver.storage import DirectoryStorage
from sender.reconcile import DirState, NothingHere, compare

# ------------------------------------------------------------------ comparison (fast)


def state(tmp_path: Path, files: dict[str, bytes], last: set[str]) -> DirState:
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return DirState(tmp_path, set(files), set(files), last)


def md5(data: bytes) -> str:
    import hashlib

    return hashlib.md5(data).hexdigest()


def test_compare_finds_missing_different_and_extra(tmp_path: Path) -> None:
    a, b, c, d = (f"sequence/sg/0/0/{n}.tsfile" for n in "abcd")
    here = state(tmp_path, {a: b"aaaa", b: b"bbbb", c: b"cccc"}, last={a, b, c, d})
    held = {
        b: (3, ""),  # another size
        c: (4, md5(b"CCCC")),  # same size, another MD5
        d: (4, ""),  # deleted here and synced: this round deletes it anyway, not extra
        "sequence/sg/0/0/e.tsfile": (4, ""),  # held there only
    }
    (found,) = compare(held, [here], "dc1")
    assert (found.missing, found.different, found.extra) == (
        [a],
        [b, c],
        ["sequence/sg/0/0/e.tsfile"],
    )
    assert found.reship == {a, b, c}


def test_compare_trusts_a_copy_of_equal_size_without_a_recorded_md5(tmp_path: Path) -> None:
    a = "sequence/sg/0/0/a.tsfile"
    here = state(tmp_path, {a: b"aaaa"}, last={a})
    assert compare({a: (4, "")}, [here], "dc1")[0].reship == set()
    assert compare({a: (4, md5(b"aaaa"))}, [here], "dc1")[0].reship == set()


def test_compare_puts_extras_on_the_first_data_dir_only(tmp_path: Path) -> None:
    a, b = "sequence/sg/0/0/a.tsfile", "sequence/sg/0/0/b.tsfile"
    one = state(tmp_path / "one", {a: b"a"}, last={a})
    two = state(tmp_path / "two", {b: b"b"}, last={b})
    held = {a: (1, ""), b: (1, ""), "unsequence/x/0/0/z.tsfile": (1, "")}
    first, second = compare(held, [one, two], "dc1")
    assert first.extra == ["unsequence/x/0/0/z.tsfile"] and second.extra == []
    assert first.missing == second.missing == []  # b is in the second dir, not extra


def test_compare_refuses_when_the_data_dirs_hold_nothing(tmp_path: Path) -> None:
    empty = DirState(tmp_path, set(), set(), {"sequence/sg/0/0/a.tsfile"})
    with pytest.raises(NothingHere, match="deleted"):
        compare({"sequence/sg/0/0/a.tsfile": (1, "")}, [empty], "dc1")
    assert compare({}, [empty], "dc1")[0].extra == []  # nothing held: nothing to refuse


# ------------------------------------------------------------------ end to end (slow)


def damage(dep: Deployment, uuid: str, names: list[str]) -> dict[str, str]:
    """Damage the receiver's copies as a bad restore would (one gone, one cut short, one
    another file of the same size, restored with the MD5 recorded for it); returns
    name -> what reconcile must call it."""
    storage = DirectoryStorage([dep.receiver_data])
    gone, short, flipped = names[0], names[1], names[2]
    storage.target(dep.receiver_data, uuid, gone).unlink()
    path = storage.target(dep.receiver_data, uuid, short)
    os.truncate(path, path.stat().st_size - 10)
    path = storage.target(dep.receiver_data, uuid, flipped)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))  # another file of the same size under this name,
    os.setxattr(path, MD5_XATTR, md5(bytes(data)).encode())  # with its own record
    return {gone: "missing", short: "different", flipped: "different"}


@pytest.mark.slow
def test_reconcile_repairs_a_damaged_receiver_and_dry_run_changes_nothing(
    start_deployment: Callable[..., Deployment],
) -> None:
    dep = start_deployment()
    sender = dep.senders[0]
    names = populate(sender.edge, groups=2, files=3, rows=20)
    assert sender.send().returncode == 0
    storage = DirectoryStorage([dep.receiver_data])
    held = storage.inventory(sender.uuid)
    assert set(held) == set(names)
    # the receiver recorded each data file's own MD5 (not the stream's) as it verified it
    for name in names:
        local = sender.edge.path(name).read_bytes()
        assert held[name] == (len(local), md5(local))
        assert recorded_md5(storage.target(dep.receiver_data, sender.uuid, name)) == md5(local)

    # the edge deletes a file and ships that; the receiver's restore brings it back
    kept = storage.target(dep.receiver_data, sender.uuid, names[-1]).read_bytes()
    sender.edge.delete(names[-1])
    assert sender.send().returncode == 0
    back = storage.target(dep.receiver_data, sender.uuid, names[-1])
    back.parent.mkdir(parents=True, exist_ok=True)  # the deletion removed the folder it emptied
    back.write_bytes(kept)
    expected = damage(dep, sender.uuid, sorted(names[:-1]))

    # a plain run notices that the receiver holds other names than it shipped; told to
    # fail (on_lost_storage), it says so, names the command and changes nothing
    config = sender.config.read_text()
    sender.config.write_text(config.replace("[sender]\n", '[sender]\non_lost_storage = "fail"\n'))
    held_before = tree(dep.receiver_data)
    plain = sender.send("--json")
    assert plain.returncode == 1, plain.stderr
    n = len(names) - 1
    assert f"holds {n} files of this sender, which believes {n} synced there, not the" in (
        plain.stderr
    )
    assert "sealsync send --reconcile" in plain.stderr
    assert json.loads(plain.stdout)["receivers"] == []
    assert tree(dep.receiver_data) == held_before
    sender.config.write_text(config)

    before = (tree(dep.root), tree(sender.edge.root))
    dry = sender.send("--reconcile", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    found = json.loads(dry.stdout)["receivers"][0]["data_dirs"][0]["reconcile"]
    want = {
        "missing": sorted(n for n, w in expected.items() if w == "missing"),
        "different": sorted(n for n, w in expected.items() if w == "different"),
        "extra": [names[-1]],
    }
    assert found == want
    text = sender.send("--reconcile", "--dry-run")
    assert "reconcile: 1 missing, 2 different, 1 extra on the receiver" in text.stdout
    assert (tree(dep.root), tree(sender.edge.root)) == before  # nothing changed on either side

    result = sender.send("--reconcile", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["receivers"][0]
    assert report["dirs"][0]["reconcile"] == want
    assert sorted(report["dirs"][0]["shipped"]) == want["missing"] + want["different"]
    # the different copies are deleted before they are shipped again: storage never
    # replaces a loaded file by another
    assert sorted(report["dirs"][0]["deleted"]) == sorted(want["different"] + want["extra"])
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    assert dep.round_state_left() == []
    summary = sender.send("--reconcile")
    assert "reconcile: 0 missing, 0 different, 0 extra on the receiver" in summary.stdout


@pytest.mark.slow
def test_reconcile_with_empty_data_dirs_refuses_and_deletes_nothing(
    start_deployment: Callable[..., Deployment], tmp_path: Path
) -> None:
    dep = start_deployment()
    sender = dep.senders[0]
    names = populate(sender.edge, groups=1, files=3, rows=20)
    assert sender.send().returncode == 0
    held = dep.loaded_hashes(sender)
    data_dir = sender.edge.data_dirs[0]
    for root in ("sequence", "unsequence"):  # a disk that did not mount: empty roots
        shutil.move(data_dir / root, tmp_path / root)
        (data_dir / root).mkdir()
    before = tree(dep.receiver_data)
    for args in (("--reconcile", "--dry-run"), ("--reconcile",)):
        result = sender.send(*args)
        assert result.returncode == 1, (args, result.stderr)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr
        assert f"holds {len(names)} files of this sender but its data dirs" in lines[0]
        assert "nothing is deleted" in lines[0]
    assert dep.loaded_hashes(sender) == held
    assert {k: v for k, v in tree(dep.receiver_data).items() if "sync-receiver" not in k} == {
        k: v for k, v in before.items() if "sync-receiver" not in k
    }
