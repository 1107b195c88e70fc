"""One sender cannot stop ``sealsync load`` for the others (issue 35, item 2).

Sender D shipped ``…/<D>/1-1-0.tsfile.mods/z.tsfile`` and deleted it: the folders
stayed, squatting the path of its own file's ``.mods``; the loader skipped that file
("not a regular file"), found D with "no loaded files left" and stopped before
ingesting anything, on every run, until an operator ran ``--prune-missing``. The
receiver now refuses such a name, so what an earlier receiver left is planted by hand;
then D's folder goes missing. Real ``sealsync serve``, ``send``, ``load`` and ``status``
processes: after each run the honest sender's new files are in the table, D's rows
are all still there, the run exits 1 and ``status`` names D and why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from config_helpers import loader_config_file
from receiver_service_helpers import tsfile_bytes
from reliability.figures import record
from spark_loader_helpers import table_rows

from sealsync.config import LoaderConfig
from sealsync.protocol import (
    Delete,
    DeleteAck,
    FileVerdict,
    RoundDone,
    RoundEnd,
    RoundReady,
    Welcome,
)
from security.attacks import Site, SourcedClient
from spark_loader.state import load_state

pytestmark = pytest.mark.slow

GROUP = "sequence/root.hostile/0"
D_NAMES = [f"{GROUP}/1-1-0.tsfile"]  # its only file: the squat left D "no loaded files"


def _sealsync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sealsync", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _hostile_round(
    site: Site, sender: str, files: list[tuple[str, bytes]], deleted: Sequence[str] = ()
) -> list[FileVerdict]:
    """One round of D's raw client: delete ``deleted`` (a round's deletions come
    first), then ship ``files``."""
    with SourcedClient(site.address, site.hostile_key, "127.0.0.2") as client:
        assert isinstance(client.hello(sender), Welcome)
        assert client.round_start() == RoundReady("ready", "")
        for name in deleted:
            client.send(Delete(name))
            assert client.recv() == DeleteAck(name)
        for i, (name, data) in enumerate(files, 1):
            client.send_file(i, name, data)
        verdicts = []
        for _ in files:
            answer = client.recv()
            assert isinstance(answer, FileVerdict), answer
            verdicts.append(answer)
        client.send(RoundEnd())
        assert isinstance(client.recv(), RoundDone)
    return verdicts


def _wait_stored(paths: list[Path], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.is_file() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(p.is_file() for p in paths), paths


def _recorded(config: LoaderConfig, sender: str) -> set[str]:
    """The names of ``sender``'s files the loader recorded in the table."""
    return {r.name for r in load_state(config.state_dir).files.values() if r.sender == sender}


def _rows_of(config: LoaderConfig, sender: str) -> list[tuple]:
    return [row for row in table_rows(config.table_path) if row[0] == sender]


def test_one_senders_squatted_mods_and_missing_folder_hold_only_its_files(
    tmp_path: Path,
) -> None:
    site = Site(tmp_path / "site")
    d = str(uuid.uuid4())
    honest = site.honest.uuid
    data = site.dep.receiver_data
    d_folder = data / GROUP / d
    config = LoaderConfig([data], tmp_path / "table", tmp_path / "state")
    toml = loader_config_file(tmp_path / "loader.toml", config)
    site.start()
    try:
        code, stderr = site.honest_round()
        assert code == 0, stderr
        shipped = _hostile_round(
            site,
            d,
            [(n, tsfile_bytes(tmp_path, [f"root.hostile.d{i}"])) for i, n in enumerate(D_NAMES)],
        )
        assert [v.status for v in shipped] == ["verified"], shipped
        _wait_stored([d_folder / n.rsplit("/", 1)[1] for n in D_NAMES])

        first = _sealsync("load", "--config", str(toml))
        assert first.returncode == 0, first.stderr
        assert _recorded(config, d) == set(D_NAMES)
        d_rows = _rows_of(config, d)
        assert d_rows

        # The attack: D ships a file under a folder named like its own file's .mods, and
        # deletes it. The receiver refuses the name; an earlier one stored it and, the
        # file deleted, left the folders: they are planted as it left them.
        squat_name = f"{GROUP}/{d}/1-1-0.tsfile.mods/z.tsfile"
        squat = _hostile_round(site, d, [(squat_name, tsfile_bytes(tmp_path, ["root.hostile.d9"]))])
        assert [v.status for v in squat] == ["refused"], squat
        assert _hostile_round(site, d, [], [squat_name]) == []
        squatted = d_folder / "1-1-0.tsfile.mods"
        (squatted / d).mkdir(parents=True)
        new = [
            site.honest.edge.write_file(
                "root.fresh1", 0, devices=["root.fresh1.d0"], rows_per_device=7, start_ms=9_000_000
            )
        ]
        code, stderr = site.honest_round()
        assert code == 0, stderr

        second = _sealsync("load", "--config", str(toml))
        status_squat = json.loads(_sealsync("status", "--config", str(toml), "--json").stdout)
        text_squat = _sealsync("status", "--config", str(toml)).stdout
        honest_after_squat = _recorded(config, honest)
        d_rows_after_squat = _rows_of(config, d)

        # Then D's folder goes missing (moved away by hand), the stray folder removed.
        shutil.rmtree(squatted)
        moved = tmp_path / "moved"
        shutil.move(d_folder, moved)
        new.append(
            site.honest.edge.write_file(
                "root.fresh2", 0, devices=["root.fresh2.d0"], rows_per_device=5, start_ms=9_500_000
            )
        )
        code, stderr = site.honest_round()
        assert code == 0, stderr

        third = _sealsync("load", "--config", str(toml))
        status_missing = json.loads(_sealsync("status", "--config", str(toml), "--json").stdout)
        honest_after_missing = _recorded(config, honest)
        d_rows_after_missing = _rows_of(config, d)

        shutil.move(moved, d_folder)  # D's folder back: the next run is clean
        fourth = _sealsync("load", "--config", str(toml))
        status_back = json.loads(_sealsync("status", "--config", str(toml), "--json").stdout)
    finally:
        site.stop()

    honest_names = set(site.honest.sealed_hashes())
    honest_rows = {row[1] for row in table_rows(config.table_path) if row[0] == honest}
    held = (
        second.returncode == 1
        and third.returncode == 1
        and honest_after_squat == honest_names - {new[1]}
        and honest_after_missing == honest_names
        and d_rows_after_squat == d_rows == d_rows_after_missing
        and d in status_squat["last_run"]["error"]
        and set(status_squat["held"]) == {d}
        and set(status_missing["held"]) == {d}
    )
    attack = "a sender's squatted .mods and missing folder in one load run"
    record("security", attack=attack, tried=2, held=held)

    # The squatted .mods: D waits, the honest sender's new file went in, exit 1.
    assert second.returncode == 1, second.stderr
    assert f"the files of sender {d} wait: its listing is incomplete" in second.stderr
    assert "1-1-0.tsfile: cannot stat its .mods: not a regular file" in second.stderr
    assert "the files of 1 senders wait" in second.stdout
    assert honest_after_squat == honest_names - {new[1]}  # every honest file so far
    assert new[0] in honest_rows
    assert d_rows_after_squat == d_rows  # nothing of D's removed
    assert set(status_squat["held"]) == {d}
    assert "cannot stat its .mods: not a regular file" in status_squat["held"][d]
    assert status_squat["last_run"]["outcome"] == "failed"
    assert d in status_squat["last_run"]["error"]
    assert f"                {d}: its listing is incomplete" in text_squat
    assert "  held:         the files of 1 senders waited in the last run" in text_squat

    # The missing folder: D waits, the honest sender's new file went in, exit 1.
    assert third.returncode == 1, third.stderr
    assert f"the files of sender {d} wait: sender {d} has no loaded files left" in third.stderr
    assert honest_after_missing == honest_names
    assert new[1] in honest_rows
    assert d_rows_after_missing == d_rows
    assert set(status_missing["held"]) == {d}
    assert "has no loaded files left" in status_missing["held"][d]

    # D back: nothing was lost, nothing waits.
    assert fourth.returncode == 0, fourth.stderr
    assert _recorded(config, d) == set(D_NAMES) and _rows_of(config, d) == d_rows
    assert status_back["held"] == {} and status_back["troubled"] == {}
