"""One sender's reader-killing files cost no other sender anything (issue 16, item 3).

A TsFile with one byte changed (the first chunk header's measurement-name length set
to 0xFF) passes the receiver's metadata check but kills the native reader that
decodes it: the Spark task's Python worker dies, and with it the job. Before, with 40
such files from 40 senders between the files of 8 honest senders, failing jobs were
split in halves and, after 32 failed jobs, whole mixed groups were given up: half the
honest files were missing from the table on every run.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from reliability.figures import record
from spark_loader_helpers import Receiver, source_rows, table_rows

from sealsync.simulator import EdgeInstance
from spark_loader import run_load
from spark_loader.spark_session import create_session
from spark_loader.status import loader_status

pytestmark = pytest.mark.slow

# Discovery lists senders in UUID order: every sixth sender is honest, so that the
# hostile files sit between the honest ones in every batch.
SENDERS = [str(uuid.UUID(int=0x100 + i)) for i in range(48)]
HONEST = SENDERS[::6]
HOSTILE = [s for s in SENDERS if s not in HONEST]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    session = create_session("local[2]", tmp_path_factory.mktemp("spark-logs"))
    yield session
    session.stop()


def reader_killer(path: Path) -> None:
    """Set the first measurement name's length byte to 0xFF: the metadata still reads,
    decoding the chunk kills the reader's process."""
    data = bytearray(path.read_bytes())
    at = data.index(b"s1") - 1
    assert data[at] == 0x04  # the zig-zag varint of len("s1")
    data[at] = 0xFF
    path.write_bytes(bytes(data))


def test_forty_reader_killers_cost_the_honest_senders_nothing(tmp_path: Path, spark: Any) -> None:
    edge = EdgeInstance(tmp_path / "edge")
    receiver = Receiver(tmp_path / "receiver")
    bad: set[tuple[str, str]] = set()
    for i, sender in enumerate(SENDERS):
        for f in range(2 if sender in HONEST else 1):
            rel = edge.write_file(
                f"root.sg{i}",
                0,
                devices=[f"root.sg{i}.d0"],
                rows_per_device=20,
                start_ms=(i * 10 + f) * 1000,
            )
            placed = receiver.place(edge, rel, sender=sender)
            if sender in HOSTILE:
                reader_killer(placed)
                bad.add((sender, rel))
    config = receiver.config(tmp_path)

    first = run_load(config, spark=spark, sync=False)
    after_first = table_rows(config.table_path)
    second = run_load(config, spark=spark, sync=False)
    status = loader_status(config)

    honest_rows = source_rows(receiver, without=bad)
    held = after_first == honest_rows and table_rows(config.table_path) == honest_rows
    record(
        "security", attack="40 senders' reader-killing files among 8 honest", tried=40, held=held
    )
    assert after_first == honest_rows  # every honest row after the first run already
    assert table_rows(config.table_path) == honest_rows
    assert first.ingested == 2 * len(HONEST)
    assert len(first.skipped) == len(HOSTILE)
    assert first.quarantined == set(HOSTILE)
    assert all("honest" not in name for name in first.skipped)
    assert {Path(name).parent.name for name in first.skipped} == set(HOSTILE)
    assert second.ingested == 0 and len(second.skipped) == len(HOSTILE)
    assert second.quarantined == set(HOSTILE)
    assert status["quarantined"] == sorted(HOSTILE)
