"""Device ownership: first come, first served, durable, safe across threads and processes."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from receiver_load_helpers import UUID_A, UUID_B

from receiver.load.owners import DeviceIdError, DeviceOwners
from sealsync.errors import BadName

UUID_C = "c3a9e1d2-6b5f-4e8a-9d7c-0a1b2c3d4e03"


def test_first_claim_wins_and_a_conflict_claims_nothing(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    assert owners.claim(["root.a", "root.b"], UUID_A) == {}
    assert owners.claim(["root.b", "root.c"], UUID_A) == {}  # own device again: fine
    assert owners.claim(["root.d", "root.b"], UUID_B) == {"root.b": UUID_A}
    assert owners.owners_of(["root.a", "root.b", "root.c", "root.d"]) == {
        "root.a": UUID_A,
        "root.b": UUID_A,
        "root.c": UUID_A,
        "root.d": "",  # not claimed: the claim conflicted as a whole
    }
    assert owners.by_owner() == {UUID_A: ["root.a", "root.b", "root.c"]}


def test_log_format_is_one_tab_separated_event_per_line(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    owners.claim(["root.a", "root.b", "root.a"], UUID_A)
    assert owners.release(["root.a", "root.zz"]) == ["root.a"]
    owners.claim(["root.a"], UUID_B)
    assert (tmp_path / "sync" / "device_owner.log").read_text() == (
        f"claim\t{UUID_A}\troot.a\n"
        f"claim\t{UUID_A}\troot.b\n"
        "release\troot.a\n"
        f"claim\t{UUID_B}\troot.a\n"
    )


def test_state_survives_a_restart(tmp_path: Path) -> None:
    with DeviceOwners(tmp_path) as owners:
        owners.claim(["root.a", "root.b"], UUID_A)
        owners.release(["root.b"])
        owners.claim(["root.b", "root.c"], UUID_B)
    again = DeviceOwners(tmp_path)
    assert again.by_owner() == {UUID_A: ["root.a"], UUID_B: ["root.b", "root.c"]}


def test_torn_last_line_is_not_an_event_and_is_cut_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / "sync" / "device_owner.log"
    path.parent.mkdir()
    path.write_text(f"claim\t{UUID_A}\troot.a\nclaim\t{UUID_A}\troot.b")  # crash mid-append
    owners = DeviceOwners(tmp_path)
    assert owners.owners_of(["root.a", "root.b"]) == {"root.a": UUID_A, "root.b": ""}
    assert owners.claim(["root.b"], UUID_B) == {}
    assert path.read_text() == f"claim\t{UUID_A}\troot.a\nclaim\t{UUID_B}\troot.b\n"
    assert DeviceOwners(tmp_path).by_owner() == {UUID_A: ["root.a"], UUID_B: ["root.b"]}


def test_unknown_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "sync" / "device_owner.log"
    path.parent.mkdir()
    path.write_text(f"garbage\nclaim\t{UUID_A}\nclaim\t{UUID_A}\troot.a\n")
    assert DeviceOwners(tmp_path).by_owner() == {UUID_A: ["root.a"]}


@pytest.mark.parametrize("device", ["root.a\tb", "root.a\nb", "root.a\rb", ""])
def test_device_ids_that_would_forge_fields_are_rejected(tmp_path: Path, device: str) -> None:
    owners = DeviceOwners(tmp_path)
    with pytest.raises(DeviceIdError):
        owners.claim(["root.ok", device], UUID_A)
    with pytest.raises(DeviceIdError):
        owners.release([device])
    assert owners.by_owner() == {}


def test_sender_uuid_must_be_canonical(tmp_path: Path) -> None:
    with pytest.raises(BadName):
        DeviceOwners(tmp_path).claim(["root.a"], UUID_A.upper())


def test_concurrent_claims_from_threads_give_each_device_one_owner(tmp_path: Path) -> None:
    devices = [f"root.sg.d{i}" for i in range(60)]
    uuids = [UUID_A, UUID_B, UUID_C]
    # two instances on one file, as two parts of one process might hold
    instances = [DeviceOwners(tmp_path), DeviceOwners(tmp_path)]
    granted: dict[str, list[list[str]]] = {u: [] for u in uuids}
    start = threading.Barrier(6)

    def worker(index: int) -> None:
        uuid = uuids[index % 3]
        owners = instances[index % 2]
        rng = random.Random(index)
        start.wait()
        for _ in range(40):
            batch = rng.sample(devices, 4)
            if owners.claim(batch, uuid) == {}:
                granted[uuid].append(batch)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    final = DeviceOwners(tmp_path).owners_of(devices)
    for uuid, batches in granted.items():
        for batch in batches:
            assert {final[d] for d in batch} == {uuid}
    lines = (tmp_path / "sync" / "device_owner.log").read_text().splitlines()
    claimed = [line.split("\t")[2] for line in lines]
    assert sorted(claimed) == sorted(set(claimed))  # never claimed twice
    assert set(claimed) == {d for d, owner in final.items() if owner}
    assert instances[0].owners_of(devices) == final == instances[1].owners_of(devices)
    assert sum(len(b) for b in granted.values()) > 0


@pytest.mark.slow
def test_release_from_another_process_is_seen(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    owners.claim(["root.a", "root.b"], UUID_A)
    assert owners.claim(["root.a"], UUID_B) == {"root.a": UUID_A}
    script = (
        "import sys; from pathlib import Path\n"
        "from receiver.load.owners import DeviceOwners\n"
        "print(DeviceOwners(Path(sys.argv[1])).release(['root.a', 'root.x']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == "['root.a']"
    assert owners.owners_of(["root.a", "root.b"]) == {"root.a": "", "root.b": UUID_A}
    assert owners.claim(["root.a"], UUID_B) == {}
    assert owners.by_owner() == {UUID_A: ["root.b"], UUID_B: ["root.a"]}


@pytest.mark.slow
def test_claims_from_another_process_are_seen_before_claiming(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    owners.claim(["root.a"], UUID_A)
    script = (
        "import sys; from pathlib import Path\n"
        "from receiver.load.owners import DeviceOwners\n"
        f"print(DeviceOwners(Path(sys.argv[1])).claim(['root.a', 'root.b'], '{UUID_A}'))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=60)
    assert owners.claim(["root.b"], UUID_B) == {"root.b": UUID_A}


def test_a_conflict_is_told_by_its_first_device_and_remembered_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What OWNERS_QUERY may answer a sender about (receiver/queries.py): the device each
    conflict verdict to it named, the first in order, per sender, the newest kept."""
    from receiver.load import owners as module

    monkeypatch.setattr(module, "MAX_TOLD", 2)
    book = DeviceOwners(tmp_path)
    book.claim(["root.b", "root.c", "root.d", "root.e"], UUID_B)
    assert book.claim_each([["root.a", "root.c", "root.b"]], UUID_A) == [
        {"root.b": UUID_B, "root.c": UUID_B}
    ]
    assert book.told(UUID_A) == {"root.b"} and book.told(UUID_B) == set()
    book.claim_each([["root.d"], ["root.e"]], UUID_A)
    assert book.told(UUID_A) == {"root.d", "root.e"}  # root.b, the oldest, forgotten
    book.claim_each([["root.d"]], UUID_A)
    book.claim_each([["root.c"]], UUID_A)
    assert book.told(UUID_A) == {"root.d", "root.c"}  # root.d told again: kept
    book.close()
