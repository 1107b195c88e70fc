"""What a ``load --full`` of the plain Parquet table (the layout before Delta) left beside
it is cleaned up before the next run converts the table (spark_loader.swap.recover): a
killed build, the old table parked between two renames, an old table awaiting removal."""

from __future__ import annotations

import os
from pathlib import Path

from spark_loader import swap


def _table(path: Path, marker: str, files: int = 3) -> None:
    """Partitions of the same names in every generation, part files named per
    generation (Spark names each part file anew)."""
    path.mkdir(parents=True)
    for i in range(files):
        part = path / f"sender=s/file_id=f{i}"
        part.mkdir(parents=True)
        (part / f"part-{marker}.parquet").write_text(marker)


def _markers(path: Path) -> set[str]:
    return {p.read_text() for p in path.rglob("part-*.parquet")}


def test_recover_removes_a_killed_builds_leftovers(tmp_path: Path) -> None:
    table = tmp_path / "points"
    _table(table, "old")
    _table(swap.build_path(table), "half")

    done = swap.recover(table)

    assert len(done) == 1 and "unfinished full rebuild" in done[0]
    assert _markers(table) == {"old"} and sorted(os.listdir(tmp_path)) == ["points"]
    assert swap.recover(table) == []
    _table(tmp_path / ".points.sealsync-old-0123", "killed while removing it")
    assert "removed the old table" in swap.recover(table)[0]
    assert sorted(os.listdir(tmp_path)) == ["points"]


def test_recover_restores_the_old_table_between_the_fallback_renames(tmp_path: Path) -> None:
    table = tmp_path / "points"
    _table(swap.old_path(table), "old")  # killed after the first rename
    _table(swap.build_path(table), "new")

    done = swap.recover(table)

    assert any("restored the table" in line for line in done)
    assert _markers(table) == {"old"} and sorted(os.listdir(tmp_path)) == ["points"]
    # and once the new table was in place, the old one only needs removing
    _table(swap.old_path(table), "older")
    assert "removed the old table" in swap.recover(table)[0]
    assert _markers(table) == {"old"}


def test_recover_restores_the_old_table_over_the_empty_folder_a_run_made(tmp_path: Path) -> None:
    """The loader creates the table folder before it recovers: an empty folder there is
    no table, and the parked old one goes back in its place."""
    table = tmp_path / "points"
    _table(swap.old_path(table), "old")
    table.mkdir()

    done = swap.recover(table)

    assert any("restored the table" in line for line in done)
    assert _markers(table) == {"old"} and sorted(os.listdir(tmp_path)) == ["points"]
