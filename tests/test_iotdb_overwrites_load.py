"""A real IoTDB's overwrites reach the table as IoTDB answers them: points written in
sequence files, then written again out of order (an unsequence file) and again in
order (a second sequence file holding a time of the first's), the data folder shipped
by ``sealsync send`` to ``sealsync serve`` and loaded by ``sealsync load`` (real
processes all); the table is compared row by row with a reference computed from the
statements run (the last write of a (series, time) wins) and with IoTDB's own answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_helpers import Deployment
from iotdb_helpers import Points, iotdb_answer, load_table, point_sender_at, rows_of, table_rows
from iotdb_server import RELEASES, IoTDBServer

SERIES = {"root.sg.d1": ("s1", "s2"), "root.sg.d2": ("s1",)}


def _write(server: IoTDBServer) -> Points:
    """Write, flush, overwrite on ``server``; the points its answer must hold."""
    two = not server.release.standalone
    points: Points = {(d, m): {} for d, ms in SERIES.items() for m in ms}
    with server.client() as client:
        client.sql("CREATE DATABASE root.sg" if two else "SET STORAGE GROUP TO root.sg")
        for device, measurements in SERIES.items():
            for m in measurements:
                client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE=INT64, ENCODING=RLE")

        def insert(device: str, times: range, measurements: tuple[str, ...], base: int) -> None:
            client.insert(
                [
                    (
                        device,
                        t,
                        list(measurements),
                        ["INT64"] * len(measurements),
                        [base + t] * len(measurements),
                    )
                    for t in times
                ]
            )
            for m in measurements:
                points[(device, m)].update({t: base + t for t in times})

        for device, measurements in SERIES.items():  # a first sequence file: 10..19
            insert(device, range(10, 20), measurements, 100)
        client.sql("FLUSH")
        # out of order (before the flushed file's last time): an unsequence file; s1
        # only, so d1's s2 at those times stays the sequence file's value
        insert("root.sg.d1", range(12, 15), ("s1",), 200)
        client.sql("FLUSH")
        for device, measurements in SERIES.items():  # a second sequence file: 20..24
            insert(device, range(20, 25), measurements, 300)
        client.sql("FLUSH")
        insert("root.sg.d2", range(15, 22), ("s1",), 400)  # overlaps both sequence files
        client.sql("FLUSH")
    return points


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(RELEASES))
def test_the_table_holds_what_iotdb_answers_after_overwrites(
    version: str,
    tmp_path: Path,
    iotdb_server: Callable[[str], IoTDBServer],
    start_deployment: Callable[..., Deployment],
) -> None:
    server = iotdb_server(version)
    expected = rows_of(_write(server))
    assert iotdb_answer(server) == expected  # the reference reads IoTDB as IoTDB does
    unseq = sorted(server.data_dir.glob("unsequence/root.sg/*/*/*.tsfile"))
    assert len(unseq) >= 2, "no unsequence files written"

    dep = start_deployment()
    point_sender_at(dep, server.data_dir)
    sent = dep.senders[0].send()
    assert sent.returncode == 0, sent.stderr
    got = table_rows(load_table(dep, tmp_path))  # asserts no (device, time) twice
    assert got == expected
    assert got[("root.sg.d1", 13)] == {"s1": 213, "s2": 113}
    assert got[("root.sg.d2", 20)] == {"s1": 420}
