"""The simulator (``sealsync demo``'s edge, sealsync/simulator.py) lays out its files as a
real IoTDB does: the same folders, the same file names and sidecars, the same ``.mods``
line for the same ``DELETE``.

One real 0.12.0 (it starts in seconds, and writes the text ``.mods`` the simulator
writes) and the simulator each get one device of ten points, then a ``DELETE`` of every
series of the device up to a time; then what each wrote is compared field by field. The
name's time is the clock when the file was made on both, so it is compared as such.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from iotdb_server import V3_RELEASE, IoTDBServer

from sealsync.formats import mods
from sealsync.simulator import EdgeInstance

DEVICE = "root.sg.d1"
POINTS = 10
UNTIL = 4  # DELETE FROM root.sg.d1.* WHERE time <= UNTIL
# <space>/<group>/<region>/<partition>/<time>-<version>-<inner>-<cross>.tsfile
LAYOUT = re.compile(r"(sequence|unsequence)/(root\.sg)/(\d+)/(\d+)/(\d+)-(\d+)-(\d+)-(\d+)\.tsfile")
MODS_LINE = re.compile(r"DELETION,([^,]+),(\d+),(-?\d+),(-?\d+)")


def _written(data_dir: Path) -> dict[str, list[str]]:
    """Each data file's relative name -> the suffixes of the sidecars beside it."""
    out: dict[str, list[str]] = {}
    for path in sorted(data_dir.rglob("*.tsfile")):
        rel = path.relative_to(data_dir).as_posix()
        out[rel] = sorted(
            p.name[len(path.name) :]
            for p in path.parent.iterdir()
            if p.name.startswith(path.name) and p.name != path.name
        )
    return out


def _fields(rel: str, began_ms: int) -> tuple[str, ...]:
    """What the layout and name say, the clock field checked and left out."""
    match = LAYOUT.fullmatch(rel)
    assert match, f"{rel} is not <space>/<group>/<region>/<partition>/<4-field name>"
    space, group, region, partition, made, version, inner, cross = match.groups()
    assert began_ms <= int(made) <= time.time_ns() // 1_000_000, (rel, began_ms)
    return space, group, region, partition, version, inner, cross


def _mods_line(tsfile: Path) -> tuple[str, int, int]:
    """The one line of a file's ``.mods``: its path and range, its offset checked to be
    the file's size (what both write)."""
    lines = Path(f"{tsfile}.mods").read_text().splitlines()
    assert len(lines) == 1, lines
    match = MODS_LINE.fullmatch(lines[0])
    assert match, lines[0]
    path, offset, start, end = match.groups()
    assert int(offset) == tsfile.stat().st_size, (lines[0], tsfile.stat().st_size)
    # sealsync's own reader reads both lines alike
    (parsed,) = mods.parse(lines[0] + "\n")
    assert (parsed.start, parsed.end) == (int(start), int(end))
    return path, int(start), int(end)


@pytest.mark.slow
def test_the_simulator_writes_what_a_real_iotdb_writes(
    tmp_path: Path, iotdb_server: Callable[[str], IoTDBServer]
) -> None:
    began = time.time_ns() // 1_000_000
    server = iotdb_server(V3_RELEASE)
    with server.client() as client:
        client.sql("SET STORAGE GROUP TO root.sg")
        for m in ("s1", "s2"):
            client.sql(f"CREATE TIMESERIES {DEVICE}.{m} WITH DATATYPE=INT64, ENCODING=RLE")
        client.insert(
            [(DEVICE, t, ["s1", "s2"], ["INT64", "INT64"], [t, -t]) for t in range(POINTS)]
        )
        client.sql("FLUSH")
        client.sql(f"DELETE FROM {DEVICE}.* WHERE time <= {UNTIL}")
    real = _written(server.data_dir)

    edge = EdgeInstance(tmp_path / "simulated")
    rel = edge.write_file("root.sg", 0, devices=[DEVICE], rows_per_device=POINTS, step_ms=1)
    edge.add_mods(rel, DEVICE, UNTIL)
    simulated = _written(edge.data_dirs[0])
    print(f"IoTDB {V3_RELEASE}: {real}\nsimulator: {simulated}")

    assert len(real) == 1 and len(simulated) == 1
    (real_rel, real_sidecars), (sim_rel, sim_sidecars) = *real.items(), *simulated.items()
    # folders (space, group, region, partition) and the name's version and compactions
    assert _fields(sim_rel, began) == _fields(real_rel, began)
    assert sim_sidecars == real_sidecars == [".mods", ".resource"]
    real_line = _mods_line(server.data_dir / real_rel)
    assert _mods_line(edge.path(sim_rel)) == real_line == (f"{DEVICE}.*", -(2**63), UNTIL)
