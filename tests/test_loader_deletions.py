"""The loader and deletion files that do not read: the table keeps the rows it holds.

A ``.mods`` or ``.mods2`` that does not read (a line IoTDB is still writing, a
truncated entry) is reported with its line or byte offset and the run fails (exit 1),
while the rows of the version already in the table stay exactly as they are; they
change on the run where the file reads. An ``aborted`` line is no such file: it
cancels the deletion before it (once the loader removed a file's rows for one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_loader_helpers import source_rows, table_rows, two_senders

from sealsync.config import LoaderConfig
from sealsync.formats import mods2
from sealsync.formats.deletion import MIN_TIME
from spark_loader import run_load

pytestmark = pytest.mark.slow  # Spark


def _load(config: LoaderConfig, spark: Any, **options: Any) -> Any:
    return run_load(config, spark=spark, **options)


def test_an_unreadable_deletion_file_keeps_the_rows_already_loaded(
    tmp_path: Path, spark: Any
) -> None:
    _, recv = two_senders(tmp_path)
    ts_a, pq_a, ts_b, pq_b = list(recv.placed)
    recv.add_mods(ts_a[1], "root.sg1.d1", 99000, ts_a[0])
    mods_a = recv.mods_path(ts_a[1], ts_a[0])
    with open(mods_a, "a", encoding="utf-8") as f:
        f.write("aborted\n")  # cancels the line before it: nothing is deleted
    config = recv.config(tmp_path)

    report = _load(config, spark)

    assert report.ok and report.ingested == 4
    before = table_rows(config.table_path)
    assert before == source_rows(recv)
    assert sum(1 for r in before if r[:2] == ts_a) == 80  # every point of the file

    with open(mods_a, "a", encoding="utf-8") as f:
        f.write("DELETION,root.sg1.d1.*,99999999")  # IoTDB is still writing the line
    mods2_b = Path(f"{recv.placed[ts_b]}.mods2")
    entry = mods2.tree_entry("root.sg2.d9.**", MIN_TIME, 5000)
    mods2_b.write_bytes(entry[:20])  # cut inside the path

    # and again, pruning, and rebuilding: nothing changes until the files read
    for options in ({}, {"prune_missing": True}, {"full": True}):
        report = _load(config, spark, **options)

        assert not report.ok and report.removed == 0, options
        assert report.skipped == {
            str(recv.placed[ts_a]): ".mods line 3 has no line end: IoTDB is still writing "
            "it (the next round ships the whole line)",
            str(recv.placed[ts_b]): ".mods2 byte 18 (entry at byte 0): the file ends inside "
            "a path pattern",
        }
        assert table_rows(config.table_path) == before

    with open(mods_a, "a", encoding="utf-8") as f:
        f.write(f",{MIN_TIME},1000\n")
    mods2_b.write_bytes(entry)

    report = _load(config, spark)

    assert report.ok and (report.ingested, report.removed) == (2, 2)
    after = table_rows(config.table_path)
    gone = {(r[2], r[3]) for r in set(before) - set(after)}
    assert gone == {
        (0, "root.sg1.d1"),
        (1000, "root.sg1.d1"),
        *((t, "root.sg2.d9") for t in range(0, 6000, 1000)),
    }
    assert set(after) <= set(before)
