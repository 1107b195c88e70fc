"""A restored storage whose times changed is matched by content (no Spark): the evidence
a record keeps, and what proves a listed file the same (spark_loader.restored)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from spark_loader_helpers import SENDER_A, SENDER_B

from sealsync import received
from sealsync.names import MODS2_SUFFIX, MODS_SUFFIX
from spark_loader import restored
from spark_loader.discovery import SourceFile, discover
from spark_loader.report import LoadReport
from spark_loader.state import FileRecord, IngestState, sidecar_of, sidecar_text

NAME_1 = "sequence/root.sg1/0/0/1000-1-0-0.tsfile"
NAME_2 = "unsequence/root.sg1/0/0/2000-2-0-0.tsfile"


def _place(data_dir: Path, sender: str, name: str, data: bytes, xattr: bool = True) -> Path:
    """A held data file as the receiver leaves it: the MD5 it verified on the file."""
    path = Path(received.held_path(data_dir, sender, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if xattr:
        fd = os.open(path, os.O_RDONLY)
        try:
            received.record_md5(fd, hashlib.md5(data).hexdigest())
        finally:
            os.close(fd)
    return path


def _restore_times(path: Path) -> None:
    """What a copy that keeps whole seconds only does to a file's mtime (one second
    back if it had none to drop, so that it always changes)."""
    mtime = path.stat().st_mtime_ns
    whole = mtime // 1_000_000_000 * 1_000_000_000
    if whole == mtime:
        whole -= 1_000_000_000
    os.utime(path, ns=(whole, whole))


def _ingested(data_dir: Path) -> tuple[IngestState, set[str]]:
    """The state after a run that ingested every listed file (each with rows)."""
    state = IngestState()
    files = discover([data_dir]).files
    for f in files:
        state.files[f.file_id] = FileRecord(f.sender, f.name, f.size, f.mtime_ns, 7, str(data_dir))
    assert restored.record_evidence(state, {f.file_id: f for f in files})
    return state, set(state.files)


@pytest.fixture
def held(tmp_path: Path) -> tuple[Path, Path, Path]:
    data_dir = tmp_path / "data"
    one = _place(data_dir, SENDER_A, NAME_1, b"tsfile one " * 100)
    two = _place(data_dir, SENDER_B, NAME_2, b"tsfile two " * 100)
    Path(f"{one}{MODS_SUFFIX}").write_text("a deletion\n")
    return data_dir, one, two


def _ids(files: list[SourceFile]) -> list[str]:
    return [f.file_id for f in files]


def test_a_record_keeps_the_receivers_md5_and_its_sidecars_content(
    held: tuple[Path, Path, Path],
) -> None:
    data_dir, one, two = held
    state, _ = _ingested(data_dir)

    by_name = {r.name: r for r in state.files.values()}
    first, second = by_name[NAME_1], by_name[NAME_2]
    assert first.md5 == hashlib.md5(one.read_bytes()).hexdigest()
    assert second.md5 == hashlib.md5(two.read_bytes()).hexdigest()
    mods = Path(f"{one}{MODS_SUFFIX}")
    st = mods.stat()
    sha = hashlib.sha256(mods.read_bytes()).hexdigest()
    assert first.mods == f"{st.st_size}:{st.st_mtime_ns}:{sha}"
    assert sidecar_of(first.mods) == (st.st_size, st.st_mtime_ns, sha)
    assert first.mods2 == second.mods == second.mods2 == sidecar_text(None) == "-"
    assert first.proved and second.proved
    # recorded once: a second pass changes nothing
    listed = {f.file_id: f for f in discover([data_dir]).files}
    assert not restored.record_evidence(state, listed)


def test_state_files_before_the_evidence_was_kept_still_load(tmp_path: Path) -> None:
    old = {
        "version": 1,
        "files": {"fa": {"sender": SENDER_A, "name": NAME_1, "size": 3, "mtime_ns": 4, "rows": 5}},
        "columns": {},
    }
    state = IngestState.from_json(json.dumps(old))
    assert state.files["fa"] == FileRecord(SENDER_A, NAME_1, 3, 4, 5)
    assert not state.files["fa"].proved
    record = FileRecord(SENDER_A, NAME_1, 3, 4, 5, "d", "0" * 32, "-", f"1:2:{'a' * 64}")
    again = IngestState.from_json(IngestState(files={"fb": record}).to_json())
    assert again.files == {"fb": record}


def test_whole_second_times_keep_the_recorded_ids_and_record_the_new_times(
    held: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, one, two = held
    state, present = _ingested(data_dir)
    before = dict(state.files)
    for path in (one, Path(f"{one}{MODS_SUFFIX}"), two):
        _restore_times(path)
    listed = discover([data_dir]).files
    assert not set(_ids(listed)) & present  # every id changed
    look = restored.match(state, present, listed, compare=False)  # before any run compared
    assert not set(_ids(look.files)) & present and state.files == before

    said: list[str] = []
    matched = restored.match(state, present, listed, said.append)

    assert sorted(_ids(matched.files)) == sorted(present)
    assert matched.proven == 2 and matched.updated
    assert said == ["files whose times changed: comparing their content with the record"]
    assert set(state.files) == present
    for f in matched.files:
        record = state.files[f.file_id]
        assert (record.size, record.mtime_ns) == (f.size, f.mtime_ns)
        assert record.md5 == before[f.file_id].md5
        assert f.path.stat().st_mtime_ns % 1_000_000_000 == 0
    first = next(r for r in state.files.values() if r.name == NAME_1)
    mods_st = Path(f"{one}{MODS_SUFFIX}").stat()
    assert sidecar_of(first.mods)[:2] == (mods_st.st_size, mods_st.st_mtime_ns)  # type: ignore[index]

    # the next run knows them by their new times: nothing read again
    def unread(*args: object, **kwargs: object) -> str:
        raise AssertionError("read a file whose times the record holds")

    # a read-only look (sealsync status) knows them too, and reads nothing either
    look = restored.match(state, present, discover([data_dir]).files, compare=False)
    assert sorted(_ids(look.files)) == sorted(present) and not look.updated

    again = restored.match(state, present, discover([data_dir]).files)
    assert sorted(_ids(again.files)) == sorted(present)
    assert again.proven == 0 and not again.updated
    monkeypatch.setattr(restored, "digest", unread)
    assert sorted(_ids(restored.match(state, present, discover([data_dir]).files).files)) == sorted(
        present
    )


def test_a_copy_without_the_attribute_is_matched_by_its_bytes(
    held: tuple[Path, Path, Path],
) -> None:
    data_dir, one, _ = held
    state, present = _ingested(data_dir)
    os.removexattr(one, received.MD5_XATTR)  # rsync without -X
    _restore_times(one)

    matched = restored.match(state, present, discover([data_dir]).files)

    assert sorted(_ids(matched.files)) == sorted(present) and matched.proven == 1


@pytest.mark.parametrize(
    "change",
    ["byte", "no_md5_recorded", "other_md5_on_file", "mods_byte", "mods_appears", "size"],
)
def test_without_evidence_a_changed_file_is_a_new_version(
    held: tuple[Path, Path, Path], change: str
) -> None:
    data_dir, one, two = held
    if change == "no_md5_recorded":
        os.removexattr(one, received.MD5_XATTR)  # none when it was ingested
    state, present = _ingested(data_dir)
    mods = Path(f"{one}{MODS_SUFFIX}")
    if change == "byte":  # same size, the receiver's attribute still on it
        data = bytearray(one.read_bytes())
        data[5] ^= 1
        one.write_bytes(bytes(data))
        assert received.recorded_md5(one) == state.files[_id_of(state, NAME_1)].md5
    elif change == "other_md5_on_file":
        os.setxattr(one, received.MD5_XATTR, b"0" * 32)
    elif change == "mods_byte":
        mods.write_text("b deletion\n")
    elif change == "mods_appears":
        Path(f"{two}{MODS2_SUFFIX}").write_bytes(b"x")
    elif change == "size":
        with open(one, "ab") as f:
            f.write(b"more")
    for path in (one, mods, two):
        _restore_times(path)
    listed = discover([data_dir]).files
    before = {fid: r for fid, r in state.files.items()}

    matched = restored.match(state, present, listed)

    changed = NAME_2 if change == "mods_appears" else NAME_1
    new = {f.name for f in matched.files if f.file_id not in present}
    assert new == {changed}
    assert matched.proven == 1  # the other one
    assert state.files[_id_of(state, changed)] == before[_id_of(state, changed)]  # untouched


def _id_of(state: IngestState, name: str) -> str:
    return next(fid for fid, r in state.files.items() if r.name == name)


def test_only_records_in_the_table_are_matched(held: tuple[Path, Path, Path]) -> None:
    data_dir, one, two = held
    state, present = _ingested(data_dir)
    for path in (one, Path(f"{one}{MODS_SUFFIX}"), two):
        _restore_times(path)
    gone = _id_of(state, NAME_1)  # its partition is missing: it is ingested again

    matched = restored.match(state, present - {gone}, discover([data_dir]).files)

    assert {f.name for f in matched.files if f.file_id not in present} == {NAME_1}


def test_digest_refuses_a_file_that_is_not_the_version_named(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc" * 1000)
    st = path.stat()
    version = (st.st_size, st.st_mtime_ns)
    assert restored.digest(path, version, "md5") == hashlib.md5(b"abc" * 1000).hexdigest()
    assert restored.digest(path, (st.st_size + 1, st.st_mtime_ns), "md5") is None
    assert restored.digest(path, (st.st_size, st.st_mtime_ns + 1), "md5") is None
    assert restored.digest(path, version, "sha256", limit=st.st_size - 1) is None
    assert restored.digest(tmp_path / "missing", version, "md5") is None


def test_the_report_counts_the_files_matched_by_content() -> None:
    report = LoadReport(unchanged=4, restored=3)
    assert report.to_dict()["restored"] == 3
    assert "; 3 with changed times matched by content" in report.summary()
