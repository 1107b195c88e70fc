"""``sealsync demo``, the README's first command, end to end; its summary checked
against the files themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sealsync import formats
from sealsync.formats import deletion, mods2
from sealsync.names import MODS2_SUFFIX
from sealsync.simulator import EdgeInstance

pytestmark = pytest.mark.slow  # sealsync demo as a process (Spark included)


def test_demo_runs_the_whole_pipeline_and_its_summary_matches_the_files(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "sealsync", "demo", "--workdir", str(workdir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["ok"] is True

    # the rounds: 12 files, then a merge of 3 (1 new, 3 deleted), 2 new files and the
    # synced file whose .mods2 changed, shipped again
    moved = [(r["shipped_files"], r["deleted_files"]) for r in summary["rounds"]]
    assert moved == [(12, 0), (4, 3)]
    assert all(r["shipped_bytes"] > 0 and r["ok"] for r in summary["rounds"])

    # the edge's sealed files, read independently of the demo
    edge = EdgeInstance(workdir / "edge")
    sealed = edge.sealed_files()
    assert len(sealed) == 12 and summary["edge_sealed_files"] == sealed
    assert sorted(summary["receiver_files"]) == sealed
    want: Counter[str] = Counter()
    raw: Counter[str] = Counter()
    for name in sealed:
        table = formats.format_for(name).to_arrow(edge.path(name))
        raw.update(table.column("device").to_pylist())
        kept = deletion.apply(table, mods2.read(edge.path(name + MODS2_SUFFIX)))
        want.update(kept.column("device").to_pylist())
    assert want["root.sg2.d1"] < raw["root.sg2.d1"]  # the .mods2 deletion took points away

    # the table, read with pyarrow (no Spark), holds exactly those rows
    table = ds.dataset(
        str(workdir / "warehouse" / "points"), format="parquet", partitioning="hive"
    ).to_table()
    assert dict(Counter(table.column("device").to_pylist())) == dict(want)
    assert summary["rows_per_device"] == dict(sorted(want.items()))
    assert set(table.column("source_file").to_pylist()) == set(sealed)
    assert summary["load"]["ok"] is True

    # a .mods2 deletion never deletes the file (docs/design.md §9.2), and no process is left
    assert any(Path(edge.path(n + MODS2_SUFFIX)).exists() for n in sealed)
    for folder, path in summary["folders"].items():
        assert Path(path).exists(), folder

    # the example reads the same table with Spark SQL (Delta, no metastore)
    example = Path(__file__).resolve().parent.parent / "examples" / "query_table.py"
    query = subprocess.run(
        [
            sys.executable,
            str(example),
            "--table",
            str(workdir / "warehouse" / "points"),
            "--master",
            "local[2]",
            "--readers",
            "sql",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert query.returncode == 0, query.stderr[-2000:]
    lines = [x for x in query.stdout.splitlines() if x][3:-1]  # the devices', not the total
    rows = {line.split()[0]: int(line.split()[1]) for line in lines}
    assert rows == dict(want)
