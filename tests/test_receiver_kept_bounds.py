"""What one sender makes the receiver keep besides its files, bounded: its copy of the
schema log (receiver/schema.py), its lines of device_owner.log
(receiver/load/owners.py), its staging folders (receiver/round_state.py); and all of
them counted in its quota (receiver/session_limits.py).

In-process and quick; tests/security/test_kept_bounds.py runs the attacks against a
real ``sealsync serve``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from receiver_load_helpers import UUID_A, UUID_B

from receiver.layout import SenderFolder
from receiver.limits import ByteLedger, Quota
from receiver.load.owners import (
    COMPACT_MIN,
    RECEIVER_SCOPE,
    SENDER_SCOPE,
    DeviceLimit,
    DeviceOwners,
)
from receiver.round_state import MAX_STAGING_DEPTH, RoundState
from receiver.schema import SchemaStore, schema_log_size
from receiver.session_limits import SessionAdmission, SessionLimits, limits_for
from receiver.storage import DirectoryStorage
from sealsync.config import ReceiverConfig
from sealsync.protocol import ErrorCode, ProtocolError

MiB = 1 << 20


def admission_for(limits: SessionLimits, uuid: str = UUID_A) -> SessionAdmission:
    admission = SessionAdmission(limits, lambda: False)
    admission.open_session(uuid, "192.0.2.7")
    return admission


# --- the schema log -------------------------------------------------------------------------


def test_a_session_appends_at_most_its_share_of_schema_log_and_a_refusal_writes_nothing(
    tmp_path: Path,
) -> None:
    store = SchemaStore(tmp_path)
    limits = SessionLimits(schema_per_session=3 * MiB, schema_max=5 * MiB)
    first = admission_for(limits)
    chunk = b"x" * MiB
    for i in range(3):
        assert store.append(UUID_A, i * MiB, chunk, first.admit_schema) == (i + 1) * MiB
    assert store.append(UUID_A, 0, chunk, first.admit_schema) == 3 * MiB  # a resend: nothing new
    with pytest.raises(ProtocolError) as err:
        store.append(UUID_A, 3 * MiB, chunk, first.admit_schema)
    assert err.value.code == ErrorCode.QUOTA
    assert "max_schema_bytes_per_session" in str(err.value)
    assert "next connection" in str(err.value)
    assert store.position(UUID_A) == 3 * MiB  # nothing of the refused frame written
    second = admission_for(limits)  # the next connection goes on, up to the copy's cap
    assert store.append(UUID_A, 3 * MiB, chunk + chunk, second.admit_schema) == 5 * MiB
    with pytest.raises(ProtocolError) as err:
        store.append(UUID_A, 5 * MiB, b"y", second.admit_schema)
    assert "max_schema_bytes (5242880)" in str(err.value)
    assert store.position(UUID_A) == 5 * MiB == schema_log_size(tmp_path, UUID_A)
    assert store.append(UUID_B, 0, b"other", second.admit_schema) == 5  # per sender


def test_the_schema_log_counts_against_the_quota(tmp_path: Path) -> None:
    store = SchemaStore(tmp_path)
    files = {UUID_A: 600_000}
    quota = Quota(MiB, lambda uuid: files[uuid] + schema_log_size(tmp_path, uuid))
    admission = admission_for(SessionLimits(quota=quota))
    assert store.append(UUID_A, 0, b"s" * 400_000, admission.admit_schema) == 400_000
    with pytest.raises(ProtocolError) as err:
        store.append(UUID_A, 400_000, b"s" * 100_000, admission.admit_schema)
    assert err.value.code == ErrorCode.QUOTA
    assert "its schema log included" in str(err.value) and "sender_quota_bytes" in str(err.value)
    assert quota.used(UUID_A) == MiB - 48_576  # measured once, then counted as it grew
    assert schema_log_size(tmp_path, UUID_A) == 400_000


def test_the_quota_measures_files_schema_log_and_device_claims(tmp_path: Path) -> None:
    for folder in ("schema", "data"):
        (tmp_path / folder).mkdir()
    (tmp_path / "host").write_text("x\n")
    (tmp_path / "host").chmod(0o600)
    (tmp_path / "authorized_keys").write_text("")
    config = ReceiverConfig.from_mapping(
        {
            "listen": "127.0.0.1:5555",
            "host_key": str(tmp_path / "host"),
            "authorized_keys": str(tmp_path / "authorized_keys"),
            "schema_dir": str(tmp_path / "schema"),
            "data_dirs": [str(tmp_path / "data")],
            "sender_quota_bytes": MiB,
        },
        tmp_path,
    )
    owners = DeviceOwners(config.schema_dir)
    limits = limits_for(config, DirectoryStorage([tmp_path / "data"]), owners)
    assert limits.quota is not None
    SchemaStore(config.schema_dir).append(UUID_A, 0, b"m" * 1000)
    owners.claim(["root.sg.d1", "root.sg.d2"], UUID_A)
    owners.claim(["root.sg.d3"], UUID_B)
    line = len(f"claim\t{UUID_A}\troot.sg.d1\n")
    assert owners.owned_bytes(UUID_A) == 2 * line
    assert limits.quota.used(UUID_A) == 1000 + 2 * line  # measured at its first use
    assert limits.quota.used(UUID_B) == line


# --- device_owner.log -----------------------------------------------------------------------


def test_a_sender_owns_at_most_max_devices_and_a_file_past_it_claims_nothing(
    tmp_path: Path,
) -> None:
    owners = DeviceOwners(tmp_path, max_devices=3)
    assert owners.claim(["root.a", "root.b"], UUID_A) == {}
    with pytest.raises(DeviceLimit, match=r"owns 2 devices; 2 more would exceed .*\(3\)"):
        owners.claim(["root.a", "root.c", "root.d"], UUID_A)
    assert owners.claim(["root.a", "root.c"], UUID_A) == {}  # its own again, one new: fits
    assert owners.claim(["root.x", "root.y", "root.z"], UUID_B) == {}  # per sender
    results = owners.claim_each([["root.b"], ["root.e"], ["root.b", "root.a"]], UUID_A)
    assert results[0] == {} and results[2] == {}
    assert isinstance(results[1], DeviceLimit)
    assert owners.by_owner()[UUID_A] == ["root.a", "root.b", "root.c"]
    owners.release(["root.c"])
    assert owners.claim_each([["root.e"], ["root.f"]], UUID_A)[0] == {}  # room again
    assert isinstance(owners.claim_each([["root.f"]], UUID_A)[0], DeviceLimit)


def test_claim_and_release_churn_is_compacted_and_every_reader_follows(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    other = DeviceOwners(tmp_path)  # as another process (sealsync owners release) sees it
    log = tmp_path / "sync" / "device_owner.log"
    owners.claim(["root.keep.a", "root.keep.b"], UUID_A)
    owners.claim(["root.keep.c"], UUID_B)
    largest = 0
    for i in range(COMPACT_MIN // 100 + 2):
        batch = [f"root.churn.d{i}.{j}" for j in range(50)]
        owners.claim(batch, UUID_A)
        owners.release(batch)
        largest = max(largest, log.stat().st_size)
    lines = log.read_text().splitlines()
    assert len(lines) < COMPACT_MIN // 2  # compacted on the way
    assert largest < (2 * COMPACT_MIN + 200) * len(f"claim\t{UUID_A}\troot.churn.d0.0\n")
    expected = {UUID_A: ["root.keep.a", "root.keep.b"], UUID_B: ["root.keep.c"]}
    assert owners.by_owner() == expected
    assert other.by_owner() == expected  # read again from the replaced file
    assert other.claim(["root.keep.a"], UUID_B) == {"root.keep.a": UUID_A}
    assert other.claim(["root.new"], UUID_B) == {}  # appends to the new file, not the old
    assert DeviceOwners(tmp_path).by_owner()[UUID_B] == ["root.keep.c", "root.new"]
    assert owners.owned_bytes(UUID_A) == sum(
        len(f"claim\t{UUID_A}\t{d}\n") for d in ("root.keep.a", "root.keep.b")
    )


def test_compaction_keeps_the_sender_scope_and_every_claimant(tmp_path: Path) -> None:
    """Under ``device_scope = "sender"`` several senders claim one device: the
    compacted log keeps the scope, the first claimant as owner, and every claimant."""
    owners = DeviceOwners(tmp_path)
    owners.claim(["root.shared"], UUID_A)
    owners.set_scope(SENDER_SCOPE)
    owners.claim(["root.shared", "root.b"], UUID_B)
    for i in range(COMPACT_MIN // 100 + 2):
        batch = [f"root.churn.{i}.{j}" for j in range(50)]
        owners.claim(batch, UUID_B)
        owners.release(batch)
    log = tmp_path / "sync" / "device_owner.log"
    assert len(log.read_text().splitlines()) < COMPACT_MIN // 2
    again = DeviceOwners(tmp_path)
    assert again.scope == SENDER_SCOPE
    assert again.by_owner() == {UUID_A: ["root.shared"], UUID_B: ["root.b", "root.shared"]}
    again.set_scope(RECEIVER_SCOPE)
    assert again.owners_of(["root.shared"]) == {"root.shared": UUID_A}  # the first claimant


# --- staging folders ------------------------------------------------------------------------


class _Loader:
    """No loads happen in these tests: a round only needs the object."""


def round_state(tmp_path: Path, budget: ByteLedger, ip: str = "192.0.2.7") -> RoundState:
    folder = SenderFolder(tmp_path, ip, UUID_A)
    folder.data.mkdir(parents=True, exist_ok=True)
    loader: Any = _Loader()
    return RoundState(folder, loader, budget)


def test_a_name_too_deep_is_refused_before_any_folder_is_made(tmp_path: Path) -> None:
    rnd = round_state(tmp_path, ByteLedger(None))
    deep = "sequence/" + "/".join(["a"] * MAX_STAGING_DEPTH) + "/f.tsfile"
    problem = rnd.staging_problem(deep)
    assert problem is not None and f"stages at most {MAX_STAGING_DEPTH}" in problem
    fits = "sequence/" + "/".join(["a"] * (MAX_STAGING_DEPTH - 1)) + "/f.tsfile"
    assert rnd.staging_problem(fits) is None
    assert os.listdir(rnd.folder.data) == []  # checked, not made


def test_staging_folders_are_counted_per_sender_and_pruned_when_a_round_ends(
    tmp_path: Path,
) -> None:
    budget = ByteLedger(10)
    one = round_state(tmp_path, budget)
    two = round_state(tmp_path, budget, ip="192.0.2.8")  # the sender from another address
    assert one.staging_problem("sequence/root.sg/0/0/1-1-0-0.tsfile") is None  # 4 folders
    assert one.staging_problem("sequence/root.sg/0/0/2-2-0-0.tsfile") is None  # none new
    assert one.staging_problem("sequence/root.sg/0/1/3-3-0-0.tsfile") is None  # 1 new
    assert budget.held(UUID_A) == 5
    assert two.staging_problem("sequence/a/b/c/d/e.tsfile") is None  # 5: all it may
    problem = two.staging_problem("sequence/x/y.tsfile")
    assert problem is not None and "max_staging_folders (10)" in problem
    for name in ("sequence/root.sg/0/0/1-1-0-0.tsfile", "sequence/root.sg/0/1/3-3-0-0.tsfile"):
        path = one.staging_path(name)
        assert path is not None
    Path(one.folder.staged_name("sequence/root.sg/0/0/1-1-0-0.tsfile")).write_bytes(b"kept")
    assert one.prune() == 1  # only .../0/1 was empty; the folders of the staged file stay
    assert sorted(p.name for p in (one.folder.data / "sequence" / "root.sg" / "0").iterdir()) == [
        "0"
    ]
    assert budget.held(UUID_A) == 5  # what the first round took is back
    assert two.staging_problem("sequence/x/y.tsfile") is None
    assert two.staging_path("sequence/a/b/c/d/e.tsfile") is not None
    two.abandon()
    assert not (two.folder.data / "sequence").exists()  # all it made, none kept anything
    assert budget.held(UUID_A) == 0


def test_prune_never_removes_what_the_round_did_not_make_or_anything_through_a_link(
    tmp_path: Path,
) -> None:
    rnd = round_state(tmp_path, ByteLedger(None))
    earlier = rnd.folder.data / "sequence" / "old"
    earlier.mkdir(parents=True)  # an earlier round's, empty: recovery's to clear, not this
    outside = tmp_path / "outside"
    outside.mkdir()
    (rnd.folder.data / "sequence" / "link").symlink_to(outside)
    assert rnd.staging_problem("sequence/old/new/f.tsfile") is None
    assert rnd.staging_path("sequence/old/new/f.tsfile") is not None
    assert rnd.staging_problem("sequence/link/f.tsfile") is None  # a link: nothing to make
    assert rnd.staging_path("sequence/link/f.tsfile") is None  # and staging refuses it
    assert rnd.prune() == 1
    assert earlier.is_dir() and outside.is_dir()
    assert (rnd.folder.data / "sequence" / "link").is_symlink()


def test_the_folders_of_logged_files_are_left_to_the_loader(tmp_path: Path) -> None:
    """A logged file's folder is the loader's: it moves the file out and then persists
    the folder, so pruning it when the round ends would fail the load; it goes with
    the round's clean-up instead."""
    rnd = round_state(tmp_path, ByteLedger(10))
    logged, refused = "sequence/root.sg/0/0/1-1-0-0.tsfile", "sequence/root.sg/0/9/x.tsfile"
    for name in (logged, refused):
        assert rnd.staging_problem(name) is None
        assert rnd.staging_path(name) is not None
    rnd.log_tsfiles([logged])
    staged_folder = Path(rnd.folder.staged_name(logged)).parent
    assert rnd.prune() == 1  # .../0/9 only: .../0/0 is empty too, but the loader's
    assert staged_folder.is_dir()
    assert not Path(rnd.folder.staged_name(refused)).parent.exists()


def test_the_budget_is_shared_safely_by_concurrent_rounds(tmp_path: Path) -> None:
    budget = ByteLedger(100)
    rounds = [round_state(tmp_path, budget, ip=f"192.0.2.{i}") for i in range(4)]
    refused: list[str] = []

    def stage(rnd: RoundState, n: int) -> None:
        for i in range(50):
            problem = rnd.staging_problem(f"sequence/r{n}/d{i}/f.tsfile")
            if problem is not None:
                refused.append(problem)

    threads = [threading.Thread(target=stage, args=(r, n)) for n, r in enumerate(rounds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.held(UUID_A) == 100
    assert refused
    for rnd in rounds:
        rnd.prune()
    assert budget.held(UUID_A) == 0
