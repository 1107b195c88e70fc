"""The real IoTDB fixture works, and what each release writes is what the project's
docs say it writes: a sealed ``.tsfile`` with its ``.resource`` in the release's data
folder after ``FLUSH``, the release's TsFile format version, the query answer equal
to what was inserted, and a ``.mods``/``.mods2`` beside the file after a ``DELETE``.

The ``.mods`` content is printed (``pytest -s``) as the reference for the project's own
``.mods`` reader and writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from iotdb_helpers import iotdb_answer
from iotdb_server import RELEASES, IoTDBServer, group_alive

# device -> (aligned, [(measurement, type, encoding)]); a measurement name has one type
# on every device, as ALIGN BY DEVICE needs.
SCHEMA: dict[str, tuple[bool, list[tuple[str, str, str]]]] = {
    "root.sg.d1": (
        False,
        [("s1", "INT64", "RLE"), ("s2", "DOUBLE", "GORILLA"), ("s3", "TEXT", "PLAIN")],
    ),
    "root.sg.d2": (
        False,
        [("s4", "BOOLEAN", "RLE"), ("s5", "INT32", "RLE"), ("s6", "FLOAT", "GORILLA")],
    ),
    "root.sg.d3": (True, [("s5", "INT32", "RLE"), ("s6", "FLOAT", "GORILLA")]),
    "root.sg.d4": (
        False,
        [("s7", "DATE", "PLAIN"), ("s8", "TIMESTAMP", "PLAIN"), ("s9", "BLOB", "PLAIN")]
        + [("s10", "STRING", "PLAIN")],
    ),
}
NEW_TYPES = {"DATE", "TIMESTAMP", "BLOB", "STRING"}  # 1.3 and later
POINTS = 10  # times 1..POINTS on every device
DELETE_UNTIL = 4  # DELETE FROM root.sg.d1.s1 WHERE time <= DELETE_UNTIL


def _value(kind: str, time_: int, device_no: int) -> Any:
    if kind == "BOOLEAN":
        return time_ % 2 == 0
    if kind in ("INT32", "INT64"):
        return time_ * 10 + device_no
    if kind in ("FLOAT", "DOUBLE"):
        return time_ + 0.5  # exact in float32, so the answer compares with ==
    if kind == "TIMESTAMP":
        return time_ * 1000 + device_no
    if kind == "DATE":
        return f"2024-01-{time_:02d}"
    if kind == "BLOB":
        return bytes([time_, device_no, 0]).hex()
    return f"v{device_no}-{time_}"


def _devices(server: IoTDBServer) -> dict[str, tuple[bool, list[tuple[str, str, str]]]]:
    if not server.release.standalone:
        return SCHEMA
    # 0.12 has no aligned series and none of the newer types.
    return {
        device: (aligned, series)
        for device, (aligned, series) in SCHEMA.items()
        if not aligned and not NEW_TYPES & {kind for _, kind, _ in series}
    }


def _write(server: IoTDBServer) -> dict[tuple[str, int], dict[str, Any]]:
    """Create the schema and insert the points; return what a query should answer."""
    expected: dict[tuple[str, int], dict[str, Any]] = {}
    with server.client() as client:
        if server.release.standalone:
            client.sql("SET STORAGE GROUP TO root.sg")
        else:
            client.sql("CREATE DATABASE root.sg")
        for device_no, (device, (aligned, series)) in enumerate(_devices(server).items(), 1):
            if aligned:
                columns = ", ".join(f"{m} {kind} encoding={e}" for m, kind, e in series)
                client.sql(f"CREATE ALIGNED TIMESERIES {device}({columns})")
            else:
                for m, kind, e in series:
                    client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE={kind}, ENCODING={e}")
            records = []
            for t in range(1, POINTS + 1):
                values = [_value(kind, t, device_no) for _, kind, _ in series]
                records.append(
                    (device, t, [m for m, _, _ in series], [k for _, k, _ in series], values)
                )
                expected[(device, t)] = {m: v for (m, _, _), v in zip(series, values, strict=True)}
            client.insert(records, aligned=aligned)
        client.sql("FLUSH")
    return expected


def _tree(root: Path) -> str:
    lines = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        size = "" if path.is_dir() else f"  ({path.stat().st_size} bytes)"
        lines.append(f"{'  ' * (len(rel.parts) - 1)}{rel.name}{'/' if path.is_dir() else ''}{size}")
    return "\n".join(lines)


def _dump(data: bytes) -> str:
    if all(32 <= b < 127 or b in (9, 10, 13) for b in data):
        return data.decode("ascii")
    return "\n".join(f"{i:06x}  {data[i : i + 16].hex(' ')}" for i in range(0, len(data), 16))


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(RELEASES))
def test_real_iotdb_writes_sealed_files_and_mods(
    version: str, iotdb_server: Callable[[str], IoTDBServer]
) -> None:
    server = iotdb_server(version)
    release = server.release
    print(f"\nIoTDB {version}: started in {server.start_seconds:.1f}s, port {server.rpc_port}")

    expected = _write(server)
    sequence = server.data_dir / "sequence" / "root.sg"
    sealed = sorted(sequence.glob("*/*/*.tsfile"))
    assert sealed, f"no .tsfile under {sequence} after FLUSH:\n{_tree(server.data_dir)}"
    for tsfile in sealed:
        # <database>/<virtual storage group or data region>/<time partition>/<file>
        group, partition = tsfile.parent.parent.name, tsfile.parent.name
        assert group.isdigit() and partition == "0", tsfile
        assert Path(f"{tsfile}.resource").is_file(), f"{tsfile} has no .resource"
        head = tsfile.read_bytes()
        assert head[:6] == b"TsFile" and head[-6:] == b"TsFile", f"{tsfile} is not sealed"
        assert head[6] == release.tsfile_version, (tsfile, head[6])
    print(f"data folder after FLUSH ({server.data_dir}):\n{_tree(server.data_dir)}")

    assert iotdb_answer(server, keep_empty=True) == expected

    with server.client() as client:
        client.sql(f"DELETE FROM root.sg.d1.s1 WHERE time <= {DELETE_UNTIL}")
    for t in range(1, DELETE_UNTIL + 1):
        del expected[("root.sg.d1", t)]["s1"]
    mods_suffix = ".mods" if release.tsfile_version == 3 else ".mods2"
    deadline = time.monotonic() + 10
    while not (mods := sorted(sequence.glob(f"*/*/*{mods_suffix}"))):
        assert time.monotonic() < deadline, f"no {mods_suffix}:\n{_tree(server.data_dir)}"
        time.sleep(0.2)
    for path in mods:
        assert Path(str(path)[: -len(mods_suffix)]).name.endswith(".tsfile"), path
        print(f"{path.relative_to(server.data_dir)}:\n{_dump(path.read_bytes())}")
    print(f"data folder after DELETE:\n{_tree(server.data_dir)}")

    assert iotdb_answer(server, keep_empty=True) == expected

    # Patterns and ranges: one level (*), any levels (** from 0.13 on), closed intervals.
    every = "root.sg.**" if not release.standalone else "root.sg.*.*"
    with server.client() as client:
        client.sql("DELETE FROM root.sg.d2.* WHERE time >= 5 AND time <= 6")
        client.sql("DELETE FROM root.sg.d2.s4 WHERE time >= 9")
        client.sql(f"DELETE FROM {every} WHERE time <= 1")
    for (device, t), values in expected.items():
        if t <= 1 or (device == "root.sg.d2" and 5 <= t <= 6):
            values.clear()
        elif device == "root.sg.d2" and t >= 9:
            values.pop("s4")
    expected = {key: values for key, values in expected.items() if values}
    for path in sorted(sequence.glob(f"*/*/*{mods_suffix}")):
        print(f"{path.relative_to(server.data_dir)}:\n{_dump(path.read_bytes())}")
    # A device whose every value at a time is deleted has no row at that time.
    assert iotdb_answer(server, keep_empty=True) == expected

    groups = [process.pid for _, process in server.processes]
    server.stop()
    print(f"IoTDB {version}: stopped in {server.stop_seconds:.1f}s, exit {server.exit_codes}")
    assert not server.processes
    assert not any(group_alive(g) for g in groups)
