"""The loader's state dir records the table it loads (spark_loader.table_binding): a
typo'd ``table_path`` with the same ``state_dir`` is refused by ``load`` and ``check``
(real processes: one line, exit 2, no second table, nothing written) instead of
building a second table silently."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from spark_loader_helpers import two_senders

from sealsync.config import LoaderConfig
from sealsync.errors import ConfigError
from spark_loader import run_load
from spark_loader.discovery import discover
from spark_loader.state import FileRecord, IngestState, save_state
from spark_loader.table import Table
from spark_loader.table_binding import BINDING_FILE, bind, binding_problem, loader_id


def tree(root: Path) -> dict[str, tuple[bool, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (path.is_dir(), st.st_size, st.st_mtime_ns)
    return out


def toml(path: Path, config: LoaderConfig, table_path: Path) -> Path:
    dirs = ", ".join(f'"{d}"' for d in config.receiver_data_dirs)
    path.write_text(
        f'[loader]\nreceiver_data_dirs = [{dirs}]\ntable_path = "{table_path}"\n'
        f'state_dir = "{config.state_dir}"\nmaster = "local[1]"\n'
    )
    return path


def loaded_state(config: LoaderConfig) -> None:
    """A state dir (from before table.json) recording every file as ingested (rows 0:
    a run then has nothing to do and starts no Spark)."""
    state = IngestState()
    for f in discover(list(config.receiver_data_dirs)).files:
        state.files[f.file_id] = FileRecord(
            f.sender, f.name, f.size, f.mtime_ns, 0, str(f.data_dir)
        )
    Path(config.state_dir).mkdir()
    save_state(Path(config.state_dir), state)


def test_a_new_state_dir_records_its_table(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    Path(config.state_dir).mkdir()
    assert binding_problem(config) is None
    assert bind(config) is None  # a new state dir: nothing to note
    recorded = json.loads((Path(config.state_dir) / BINDING_FILE).read_text())
    writer = recorded.pop("loader")
    assert recorded == {"table_path": str(config.table_path)}
    assert re.fullmatch("[0-9a-f]{32}", writer) and loader_id(Path(config.state_dir)) == writer
    assert bind(config) is None and binding_problem(config) is None
    assert loader_id(Path(config.state_dir)) == writer  # made once, kept


def test_a_state_dir_bound_before_loaders_had_ids_keeps_the_plain_names(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    Path(config.state_dir).mkdir()
    (Path(config.state_dir) / BINDING_FILE).write_text(
        json.dumps({"table_path": str(config.table_path)})
    )
    assert bind(config) is None and loader_id(Path(config.state_dir)) is None
    names = Table(config.table_path, writer=None).names
    assert (names.staging, names.links, names.uncommitted) == (
        ".sealsync-staging",
        ".sealsync-links",
        ".sealsync-uncommitted.json",
    )
    assert Table(config.table_path, writer="0" * 32).app_id == "sealsync-load-" + "0" * 32


@pytest.mark.parametrize("writer", ["", "x" * 32, "../" + "0" * 29, 7])
def test_a_damaged_loader_id_is_refused(tmp_path: Path, writer: object) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / BINDING_FILE).write_text(json.dumps({"table_path": "/t", "loader": writer}))
    with pytest.raises(ConfigError, match="is damaged: restore it"):
        loader_id(state)


@pytest.mark.parametrize(
    ("recorded", "given", "same"),
    [
        ("hdfs://nn:8020/lake/t", "hdfs://NN:8020/lake/t/", True),
        ("hdfs://nn:8020/lake/t", "hdfs://nn:8020/lake/u", False),
        ("s3a://bucket/t", "s3a://bucket/t", True),
        ("s3a://bucket/t", "s3a://other/t", False),
        ("/data/table", "file:///data/table", True),
        ("/data/table", "s3a://data/table", False),
        ("s3a://data/table", "/data/table", False),
    ],
)
def test_the_typo_guard_compares_locations(
    tmp_path: Path, recorded: str, given: str, same: bool
) -> None:
    """A table URI is compared as a location: its scheme and host in any case, a
    trailing slash or a file:// spelling of the same folder are the same table; a
    remote table is never taken for a local folder or the other way round."""
    _, recv = two_senders(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / BINDING_FILE).write_text(json.dumps({"table_path": recorded}))
    config = LoaderConfig(recv.data_dirs, given, state)
    problem = binding_problem(config)
    assert (problem is None) == same, problem
    if not same:
        assert f"is not the table state_dir {state} loads ({recorded})" in (problem or "")


@pytest.mark.slow  # sealsync processes
def test_a_typod_table_path_is_refused_by_load_and_check(tmp_path: Path) -> None:
    _, recv = two_senders(tmp_path)
    config = recv.config(tmp_path)
    loaded_state(config)
    report = run_load(config)  # the first run after the upgrade records the table
    assert report.ok
    assert report.notes == [
        f"state dir {config.state_dir} now records the table it loads: {config.table_path}"
    ]
    recorded = json.loads((Path(config.state_dir) / BINDING_FILE).read_text())
    assert recorded == {"table_path": str(config.table_path), "loader": recorded["loader"]}
    typo = tmp_path / "main-tabel"
    path = toml(tmp_path / "typo.toml", config, typo)
    before = tree(tmp_path)
    for command in ("load", "check"):
        result = subprocess.run(
            [sys.executable, "-m", "sealsync", command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert result.stdout == ""
        assert result.stderr == (
            f"sealsync: error: {path}: [loader] table_path: {typo} is not the table "
            f"state_dir {config.state_dir} loads ({config.table_path}): a typo? fix "
            "table_path; a second table needs a state_dir of its own\n"
        )
        assert tree(tmp_path) == before  # no second table, no state written
    assert not typo.exists()
    right = toml(tmp_path / "right.toml", config, Path(config.table_path))
    result = subprocess.run(
        [sys.executable, "-m", "sealsync", "check", "--config", str(right)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
