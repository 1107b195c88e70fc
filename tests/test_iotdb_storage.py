"""The IoTDB storage's statements and its record of what IoTDB loaded, with the client
replaced by a list of the statements it was given (the real server: test_iotdb_pipeline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from receiver_load_helpers import UUID_A, UUID_B, copy_file, stage

from receiver.layout import SenderFolder
from receiver.load.owners import DeviceOwners
from receiver.storage import StorageError
from receiver.storage.iotdb import (
    IoTDBClient,
    IoTDBRefused,
    IoTDBSettings,
    IoTDBStorage,
    load_statement,
)
from sealsync.errors import ConfigError
from sealsync.formats.deletion import MIN_TIME

NAME = "sequence/root.sg/0/0/100-1-0-0.tsfile"
TSFILE_SIZE_FLOOR = 8


def test_load_statements_per_dialect() -> None:
    assert load_statement("0.12", "/d/it's.tsfile") == "LOAD '/d/it''s.tsfile'"
    assert load_statement("2.0", "/d/a.tsfile") == (
        "LOAD '/d/a.tsfile' WITH ('on-success'='none', 'convert-on-type-mismatch'='false')"
    )
    assert load_statement("2.0", "/d/a.tsfile", table_database="it's", convert_key=False) == (
        "LOAD '/d/a.tsfile' WITH ('on-success'='none', 'model'='table', 'database-name'='it''s')"
    )


class Recorder:
    """The client: statements recorded; a statement starting with ``refuse`` fails as a
    lost session (StorageError); one holding a key of ``refusals`` is refused by IoTDB
    with its message; queries answer from ``types`` (series path -> IoTDB's type name)
    and ``counts`` (count query -> points)."""

    def __init__(self, refuse: str = "") -> None:
        self.statements: list[str] = []
        self.queries: list[str] = []
        self.refuse = refuse
        self.refusals: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def sql(self, statement: str) -> None:
        if self.refuse and statement.startswith(self.refuse):
            raise StorageError(f"IoTDB refused {statement}")
        for part, message in self.refusals.items():
            if part in statement:
                raise IoTDBRefused(f"IoTDB refused {statement}: RuntimeError: 1100: {message}")
        self.statements.append(statement)

    def query(self, statement: str) -> tuple[list[str], list[list[Any]]]:
        self.queries.append(statement)
        if statement.startswith("SHOW TIMESERIES "):
            return ["Timeseries", "DataType"], [[p, t] for p, t in self.types.items()]
        return ["count(s1)"], [[self.counts.get(statement, 0)]]

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass


def _storage(tmp_path: Path, dialect: str, recorder: Recorder) -> IoTDBStorage:
    storage = IoTDBStorage([tmp_path / "data"], tmp_path / "schema", IoTDBSettings(dialect=dialect))
    storage.client = recorder  # type: ignore[assignment]
    storage.start()
    return storage


@pytest.fixture
def dirs(tmp_path: Path) -> Path:
    """The receiver's folders, ``root.sg.d0`` owned by sender A (the loader claims a
    file's devices before the storage loads it) and ``root.sg.d9`` by sender B."""
    (tmp_path / "data").mkdir()
    (tmp_path / "schema").mkdir()
    with DeviceOwners(tmp_path / "schema") as owners:
        assert owners.claim(["root.sg.d0"], UUID_A) == {}
        assert owners.claim(["root.sg.d9"], UUID_B) == {}
    return tmp_path


def _mods(*lines: tuple[str, int, int, int]) -> bytes:
    return "".join(f"DELETION,{p},{o},{a},{b}\n" for p, o, a, b in lines).encode()


def test_a_file_loads_once_and_its_deletions_follow_0_12(dirs: Path) -> None:
    recorder = Recorder()
    storage = _storage(dirs, "0.12", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    staged = stage(folder, NAME, mods=_mods(("root.sg.d0.s1", 1 << 40, MIN_TIME, 5)))
    keep = dirs / "keep.tsfile"
    copy_file(staged, keep)
    storage.load(UUID_A, NAME, staged)
    load, delete = recorder.statements
    assert load.startswith("LOAD '") and load.endswith(
        "/iotdb-load/" + UUID_A + "/100-1-0-0.tsfile'"
    )
    assert delete == "DELETE FROM root.sg.d0.s1 WHERE time <= 5"
    target = storage.target(dirs / "data", UUID_A, NAME)
    assert target.exists() and Path(f"{target}.resource").exists()  # the receiver's copy
    assert not list((dirs / "data" / "iotdb-load" / UUID_A).iterdir())  # links gone

    # A replay of the same load (a crash before load.log): nothing sent again.
    storage.load(UUID_A, NAME, staged)
    assert len(recorder.statements) == 2
    # A restart reads what IoTDB has: the same again; a grown .mods sends only the new.
    storage.close()
    again = _storage(dirs, "0.12", Recorder())
    copy_file(keep, staged)
    Path(f"{staged}.resource").write_bytes(b"resource")
    Path(f"{staged}.mods").write_bytes(
        _mods(("root.sg.d0.s1", 1 << 40, MIN_TIME, 5), ("root.sg.*.s2", 1 << 40, 7, 8))
    )
    again.load(UUID_A, NAME, staged)
    assert again.client.statements == [  # type: ignore[attr-defined]
        "DELETE FROM root.sg.d0.s2 WHERE time >= 7 AND time <= 8"  # not root.sg.d9's
    ]
    assert again.loaded_into_iotdb(UUID_A) == {NAME}
    # A file deleted by the sender: 0.12 removes IoTDB's copy; loaded again if shipped again.
    assert again.delete(UUID_A, NAME)
    assert again.client.statements[-1].startswith("REMOVE '")  # type: ignore[attr-defined]
    assert again.client.statements[-1].endswith(f"/{NAME}'")  # type: ignore[attr-defined]
    assert again.loaded_into_iotdb(UUID_A) == set()
    again.close()
    assert _storage(dirs, "0.12", Recorder()).loaded_into_iotdb(UUID_A) == set()


def test_a_deletion_at_the_file_head_covers_nothing(dirs: Path) -> None:
    recorder = Recorder()
    storage = _storage(dirs, "0.12", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    staged = stage(folder, NAME, mods=_mods(("root.sg.d0.s1", 7, MIN_TIME, 5)))
    storage.load(UUID_A, NAME, staged)
    assert [s.split()[0] for s in recorder.statements] == ["LOAD"]


def test_2_0_loads_the_mods2_with_the_file_and_keeps_points_of_a_deleted_file(
    dirs: Path,
) -> None:
    from sealsync.formats.mods2 import tree_entry

    recorder = Recorder()
    storage = _storage(dirs, "2.0", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    staged = stage(folder, NAME)
    Path(f"{staged}.mods2").write_bytes(tree_entry("root.sg.d0.s1", 1, 2))
    keep = dirs / "keep.tsfile"
    copy_file(staged, keep)
    storage.load(UUID_A, NAME, staged)
    assert len(recorder.statements) == 1
    assert recorder.statements[0].endswith(
        "100-1-0-0.tsfile' WITH ('on-success'='none', 'convert-on-type-mismatch'='false')"
    )
    copy_file(keep, staged)
    Path(f"{staged}.resource").write_bytes(b"resource")
    Path(f"{staged}.mods2").write_bytes(
        tree_entry("root.sg.d0.s1", 1, 2) + tree_entry("root.sg.**", 5, 6)
    )
    storage.load(UUID_A, NAME, staged)
    assert recorder.statements[1:] == ["DELETE FROM root.`sg`.`d0`.* WHERE time >= 5 AND time <= 6"]
    storage.delete(UUID_A, NAME)
    assert len(recorder.statements) == 2  # no statement unloads a file in 2.x


def test_a_refused_load_is_a_storage_error_and_is_tried_again(dirs: Path) -> None:
    storage = _storage(dirs, "2.0", Recorder(refuse="LOAD"))
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    staged = stage(folder, NAME)
    with pytest.raises(StorageError, match="refused LOAD"):
        storage.load(UUID_A, NAME, staged)
    assert storage.loaded_into_iotdb(UUID_A) == set()
    storage.client = Recorder()  # type: ignore[assignment]
    storage.load(UUID_A, NAME, staged)  # the replay: placed already, now loaded
    assert storage.loaded_into_iotdb(UUID_A) == {NAME}


@pytest.mark.slow
def test_a_python_without_the_client_is_one_line_with_the_fix(tmp_path: Path) -> None:
    # This project's environment does not have apache-iotdb (its stray 'tests' package).
    probe = subprocess.run([sys.executable, "-c", "import iotdb"], capture_output=True)
    assert probe.returncode != 0
    client = IoTDBClient(IoTDBSettings(python=sys.executable, connect_timeout=1))
    with pytest.raises(ConfigError, match=r"pip install 'sealsync\[iotdb\]'") as caught:
        client.connect()
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
    missing = IoTDBClient(IoTDBSettings(python=str(tmp_path / "no-python")))
    with pytest.raises(ConfigError, match=r"\[receiver.storage\] python: cannot run"):
        missing.connect()


@pytest.mark.slow
def test_the_worker_imports_the_client_not_the_storage_beside_it(tmp_path: Path) -> None:
    """The worker's folder holds the storage's ``iotdb.py``; a Python runs a script with
    its folder first on the path, where that module would hide the client's package."""
    client = tmp_path / "site" / "iotdb"
    client.mkdir(parents=True)
    (client / "__init__.py").write_text("")
    (client / "Session.py").write_text(
        "class Session:\n"
        "    def __init__(self, *args):\n        pass\n"
        "    def open(self, compression):\n        raise OSError('the stand-in client')\n"
    )
    from receiver.storage.iotdb import WORKER

    run = subprocess.run(
        [sys.executable, str(WORKER), "127.0.0.1", "1", "root", "0"],
        input="root\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path / "site")},
    )
    assert run.returncode == 4, run.stdout + run.stderr  # it reached the client's Session
    assert "the stand-in client" in run.stdout


def test_an_entry_left_out_is_said_once_and_not_tried_again(
    dirs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On 0.12 ``DELETE FROM root.sg.d0.*`` would also reach B's device below A's."""
    with DeviceOwners(dirs / "schema") as owners:
        assert owners.claim(["root.sg.d0.sub"], UUID_B) == {}
    recorder = Recorder()
    storage = _storage(dirs, "0.12", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    mods = _mods(("root.sg.d0.*", 1 << 40, MIN_TIME, 5), ("root.sg.d0.s1", 1 << 40, 7, 8))
    staged = stage(folder, NAME, mods=mods)
    keep = dirs / "keep.tsfile"
    copy_file(staged, keep)
    with caplog.at_level("WARNING", logger="sealsync.receiver.storage.iotdb"):
        storage.load(UUID_A, NAME, staged)
    assert recorder.statements[1:] == ["DELETE FROM root.sg.d0.s1 WHERE time >= 7 AND time <= 8"]
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{NAME} of {UUID_A}: the deletion at .mods line 1 is not applied to device root.sg.d0: "
        "IoTDB 0.12 reads DELETE FROM root.sg.d0.* as a prefix, which reaches "
        "root.sg.d0.sub of another sender; delete those points in IoTDB by hand if they "
        "should go"
    ]
    copy_file(keep, staged)  # a replay of the same load: nothing sent or said again
    Path(f"{staged}.resource").write_bytes(b"resource")
    Path(f"{staged}.mods").write_bytes(mods)
    caplog.clear()
    storage.load(UUID_A, NAME, staged)
    assert len(recorder.statements) == 2 and not caplog.records


def _loads(recorder: Recorder) -> list[str]:
    return [s.split("/")[-1] for s in recorder.statements if s.startswith("LOAD")]


def test_a_file_iotdb_refuses_is_held_aside_once_and_loaded_when_iotdb_takes_it(
    dirs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    recorder.refusals["LOAD"] = "Auto create or verify schema error"
    storage = _storage(dirs, "2.0", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    other = "sequence/root.sg/0/0/200-2-0-0.tsfile"
    with caplog.at_level("WARNING", logger="sealsync.receiver.storage.iotdb"):
        storage.load(UUID_A, NAME, stage(folder, NAME))  # no error: the round goes on
        storage.load(UUID_A, other, stage(folder, other))
    assert set(storage.held_from_iotdb(UUID_A)) == {NAME, other}
    assert storage.loaded_into_iotdb(UUID_A) == set() and recorder.statements == []
    assert storage.list(UUID_A) == {NAME, other}  # the receiver's copies: the loader reads them
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said  # one line each, not one per try
    assert "held aside" in said[0] and "Auto create or verify schema error" in said[0]
    storage.close()
    # IoTDB takes them now: the next start tries the held files, lowest priority first
    again = _storage(dirs, "2.0", Recorder())
    assert again.loaded_into_iotdb(UUID_A) == {NAME, other}
    assert again.held_from_iotdb(UUID_A) == {}
    assert _loads(again.client) == [
        "100-1-0-0.tsfile' WITH ('on-success'='none', "  # type: ignore[arg-type]
        "'convert-on-type-mismatch'='false')",
        "200-2-0-0.tsfile' WITH ('on-success'='none', 'convert-on-type-mismatch'='false')",
    ]
    # a held file the sender deletes is forgotten, as a loaded one
    again.close()
    third = _storage(dirs, "2.0", Recorder())
    assert third.loaded_into_iotdb(UUID_A) == {NAME, other}


def test_a_table_model_file_goes_into_the_database_its_name_gives(dirs: Path) -> None:
    recorder = Recorder()
    recorder.refusals["'false')"] = "Attempted to load a table-model TsFile into tree-model."
    storage = _storage(dirs, "2.0", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    name = "sequence/db1/1/0/100-1-0-0.tsfile"
    storage.load(UUID_A, name, stage(folder, name))
    assert _loads(recorder) == [
        "100-1-0-0.tsfile' WITH ('on-success'='none', 'convert-on-type-mismatch'='false', "
        "'model'='table', 'database-name'='db1')"
    ]
    assert storage.loaded_into_iotdb(UUID_A) == {name}


def test_1_3_without_the_conversion_key_is_asked_without_it(dirs: Path) -> None:
    recorder = Recorder()
    recorder.refusals["convert-on-type-mismatch"] = (
        "Invalid parameter 'convert-on-type-mismatch' for LOAD TSFILE command."
    )
    storage = _storage(dirs, "2.0", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    storage.load(UUID_A, NAME, stage(folder, NAME))
    other = "sequence/root.sg/0/0/200-2-0-0.tsfile"
    storage.load(UUID_A, other, stage(folder, other))
    assert _loads(recorder) == [
        "100-1-0-0.tsfile' WITH ('on-success'='none')",
        "200-2-0-0.tsfile' WITH ('on-success'='none')",
    ]


@pytest.mark.parametrize("dialect", ["0.12", "2.0"])
def test_a_series_iotdb_holds_with_another_type_is_settled_as_the_edge_settled_it(
    dirs: Path, dialect: str
) -> None:
    recorder = Recorder()
    device = "root.sg.d0" if dialect == "0.12" else "root.`sg`.`d0`"
    count = f"SELECT count({'s1' if dialect == '0.12' else '`s1`'}) FROM {device}"
    recorder.types["root.sg.d0.s1"] = "DOUBLE"  # the file's s1 is INT64
    recorder.types["root.sg.d0.sub.s1"] = "TEXT"  # a device below: 0.12 lists it too
    recorder.counts[count] = 3
    storage = _storage(dirs, dialect, recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    storage.load(UUID_A, NAME, stage(folder, NAME))
    assert storage.held_from_iotdb(UUID_A) == {
        NAME: "series root.sg.d0.s1 is INT64 in the file and DOUBLE in IoTDB, which holds 3 "
        "points of it (delete them in IoTDB, or the series with DELETE TIMESERIES, to load it)"
    }
    assert recorder.statements == [] and recorder.queries[0] == f"SHOW TIMESERIES {device}.*"
    # the edge's deletion of every point arrives and is applied: the series is empty
    recorder.counts[count] = 0
    other = "sequence/root.sg/0/0/200-2-0-0.tsfile"
    storage.load(UUID_A, other, stage(folder, other, devices=("root.sg.d9",)))
    assert storage.held_from_iotdb(UUID_A) == {}
    dropped = "root.sg.d0.s1" if dialect == "0.12" else "root.`sg`.`d0`.`s1`"
    at = recorder.statements.index(f"DELETE TIMESERIES {dropped}")
    after = [s.split("/")[-1].split("'")[0] for s in recorder.statements[at + 1 :]]
    # 2.x: the file it outranks at the edge (its .resource unreadable: may overlap) again
    assert after == ["100-1-0-0.tsfile"] + (["200-2-0-0.tsfile"] if dialect == "2.0" else [])


def test_files_that_outrank_a_new_one_at_the_edge_are_loaded_again_after_it(
    dirs: Path,
) -> None:
    """A compaction target (sequence, the first source's version) arriving after an
    unsequence file that overwrote a point of it: 2.x answers from the file loaded last."""
    from sealsync.formats.resource import serialize

    recorder = Recorder()
    storage = _storage(dirs, "2.0", recorder)
    folder = SenderFolder(dirs / "data", "10.0.0.1", UUID_A)
    d0 = serialize({"root.sg.d0": (1, 20)})
    names = {
        "sequence/root.sg/1/0/10-1-0-0.tsfile": d0,  # a source
        "unsequence/root.sg/1/0/30-3-0-0.tsfile": serialize({"root.sg.d0": (5, 5)}),
        "unsequence/root.sg/1/0/40-4-0-0.tsfile": serialize({"root.sg.d9": (5, 5)}),
        "unsequence/root.sg/2/0/50-5-0-0.tsfile": serialize({"root.sg.d0": (5, 5)}),
    }
    for name, res in names.items():
        storage.load(UUID_A, name, stage(folder, name, resource=res))
    recorder.statements.clear()
    target = "sequence/root.sg/1/0/10-1-1-0.tsfile"
    storage.load(UUID_A, target, stage(folder, target, resource=d0))
    # the target, then the overwrite it meets (not the other device's, not another region's)
    assert [s.split("/")[-1].split("'")[0] for s in recorder.statements] == [
        "10-1-1-0.tsfile",
        "30-3-0-0.tsfile",
    ]
    # 0.12 takes a loaded file's version from its name: nothing loaded again there
    storage.close()
    old = Recorder()
    (dirs / "old" / "data").mkdir(parents=True)
    storage12 = IoTDBStorage(
        [dirs / "old" / "data"], dirs / "schema", IoTDBSettings(dialect="0.12")
    )
    storage12.client = old  # type: ignore[assignment]
    storage12._state_path = dirs / "old" / "iotdb-loaded.log"
    storage12.start()
    folder12 = SenderFolder(dirs / "old" / "data", "10.0.0.1", UUID_A)
    for name, res in [*names.items(), (target, d0)]:
        storage12.load(UUID_A, name, stage(folder12, name, resource=res))
    assert len(_loads(old)) == len(names) + 1


def test_the_files_to_load_again_are_every_overlap_chain_above_the_new_one() -> None:
    from receiver.storage.iotdb_order import database_of, load_again, partition_of

    ranges = {
        "sequence/db/1/0/10-1-1-0.tsfile": {"root.a.d": (0, 10)},  # the new one
        "unsequence/db/1/0/20-2-0-0.tsfile": {"root.a.d": (5, 15)},  # overlaps it
        "unsequence/db/1/0/30-3-0-0.tsfile": {"root.a.d": (12, 20)},  # overlaps the one above
        "unsequence/db/1/0/40-4-0-0.tsfile": {"root.a.d": (30, 40)},  # overlaps none
        "sequence/db/1/0/5-0-0-0.tsfile": {"root.a.d": (0, 10)},  # below it
        "unsequence/db/1/0/50-5-0-0.tsfile": None,  # unreadable: may overlap
    }
    new, *others = ranges
    assert load_again(new, others, ranges.__getitem__) == [
        "unsequence/db/1/0/20-2-0-0.tsfile",
        "unsequence/db/1/0/30-3-0-0.tsfile",
        "unsequence/db/1/0/50-5-0-0.tsfile",
    ]
    assert partition_of(new) == ("db", "1", "0") and partition_of("a/b.tsfile") is None
    assert database_of("unsequence/db1/2/0/x.tsfile") == "db1" and database_of("x.tsfile") is None
