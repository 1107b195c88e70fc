"""A hostile sender's deletion files against the real loader (issue 43, item 3): Spark
on ``local[2]``, the loader's own jar.

* A 60 MiB ``.mods`` of 2.5 M short lines beside the sender's own file: the driver
  read it whole and handed 2.5 M records to the executor, whose unpickler died of
  OutOfMemoryError; the JVM went, nothing committed, every sender was held.
* One ``.mods`` line whose pattern ends in the glob node ``*a*a*a*a*a*a*a*a*a*a*a*a*b``
  against a 60-character measurement: Java's regex backtracked for hours and the load
  hung.

The receiver refuses both kinds of file now (``test_hostile_files.py``); here they are
placed in the receiver's storage as an older receiver stored them, and the loader
holds by itself: the first skipped with one line, the second applied in linear time,
the honest sender's rows all in the table after one run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from reliability.figures import record
from spark_loader_helpers import SENDER_A, SENDER_B, Receiver, source_rows, table_rows

from sealsync.formats import mods
from sealsync.simulator import EdgeInstance
from security.hostile_files import GLOB_NAME, glob_mods, long_mods
from spark_loader import run_load
from spark_loader.spark_session import create_session

pytestmark = pytest.mark.slow

HONEST, HOSTILE = SENDER_A, SENDER_B


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    session = create_session("local[2]", tmp_path_factory.mktemp("spark-logs"))
    yield session
    session.stop()


def test_a_huge_mods_and_a_backtracking_glob_cost_the_honest_sender_nothing(
    tmp_path: Path, spark: Any
) -> None:
    edge = EdgeInstance(tmp_path / "edge")
    receiver = Receiver(tmp_path / "receiver")
    for i in range(2):
        rel = edge.write_file(
            "root.sg", 0, devices=[f"root.sg.d{i}"], rows_per_device=50, start_ms=i * 100_000
        )
        receiver.place(edge, rel, sender=HONEST)
    huge = edge.write_file("root.h", 0, devices=["root.h.d0"], rows_per_device=20)
    placed = receiver.place(edge, huge, sender=HOSTILE)
    long_mods(Path(f"{placed}.mods"))  # 60 MB, 2.5 M lines
    globbed = edge.write_file(
        "root.h", 1, devices=["root.h.d1"], rows_per_device=20, measurements=(GLOB_NAME, "s1")
    )
    placed = receiver.place(edge, globbed, sender=HOSTILE)
    glob_mods(Path(f"{placed}.mods"), placed.stat().st_size)
    config = receiver.config(tmp_path)

    started = time.monotonic()
    report = run_load(config, spark=spark, sync=False)
    took = time.monotonic() - started
    expected = source_rows(receiver, without={(HOSTILE, huge)})
    got = table_rows(config.table_path)

    reasons = list(report.skipped.values())
    huge_skipped = (
        len(reasons) == 1 and f"over the limit of {mods.MAX_MODS_SIZE} bytes" in reasons[0]
    )
    held = got == expected and huge_skipped and took < 300
    record("security", attack="60 MiB .mods of 2.5 M lines (loader)", tried=1, held=held)
    record("security", attack="backtracking glob in a .mods line (loader)", tried=1, held=held)
    assert got == expected  # every honest row, and the globbed file whole (it deletes nothing)
    assert report.ingested == 3
    assert list(report.skipped) == [str(receiver.placed[(HOSTILE, huge)])], report.skipped
    assert huge_skipped, reasons
    assert "\n" not in reasons[0] and len(reasons[0]) < 300
    assert took < 300, took
