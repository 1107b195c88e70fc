"""One sender's deletions cannot reach another sender's points in the data centre's IoTDB.

With ``[receiver.storage] kind = "iotdb"`` a sender's ``.mods``/``.mods2`` entries
become ``DELETE`` statements on the one IoTDB every sender's files are loaded into.
Sent as written, a hostile sender's entry ``root.**`` (or, on 0.12, ``root``, which it
reads as a prefix) deleted every sender's points, and a path holding a comma,
``root.h.d1,root.victim.**``, was two paths. Here, against a real server of each
dialect (one per release, for the whole module), ``sealsync serve`` and two ``sealsync
send`` processes: the honest sender ships ``root.victim``, the hostile one ``root.h``
with a deletion of its own; then the hostile sender ships the same file's grown
deletions, those entries among them, and a last one of its own. The honest sender's
points are all still there, and every deletion of the hostile sender applied to its own
devices.

2.0.1-beta loads the simulator's files (format 4, as 2.0 writes them); 0.12.0 loads
files written by a second 0.12.0 server, the edge.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import Deployment, Sender, make_deployment
from iotdb_helpers import copy_files, receiver_on_iotdb, sealed_files
from iotdb_server import RELEASES, IoTDBServer
from reliability.figures import record

from sealsync.formats import mods, mods2
from sealsync.formats.deletion import MAX_TIME, MIN_TIME

pytestmark = pytest.mark.slow

VICTIM = tuple(f"root.victim.d{i}" for i in range(4))
HOSTILE = ("root.h.d1", "root.h.d2")
MEASUREMENTS = ("s1", "s2")
STEP = 1000  # ms between points
VICTIM_ROWS, HOSTILE_ROWS = 120, 60
OWN_FIRST = 9 * STEP  # the hostile sender's own deletion of root.h.d1.*, time <= this
SWEEP = (0, 29 * STEP)  # the range of its entries that name every device
OWN_LATER = (30 * STEP, 39 * STEP)  # its later deletion of root.h.d2.s1
COMMA = "root.h.d1,root.victim.**"


@pytest.fixture(scope="module", params=sorted(RELEASES))
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[IoTDBServer, IoTDBServer | None]]:
    """The data centre, and for 0.12 an edge that writes the senders' files."""
    release = RELEASES[request.param]
    home = tmp_path_factory.mktemp(f"iotdb-{release.version}")
    started = [IoTDBServer(release, home / "dc").start()]
    try:
        if release.standalone:
            started.append(IoTDBServer(release, home / "edge").start())
        yield started[0], started[1] if len(started) > 1 else None
    finally:
        for server in reversed(started):
            server.stop()


def _counts(server: IoTDBServer, database: str) -> dict[str, int]:
    """Points per series under ``database`` (0.12 reads a path as a prefix)."""
    path = database if server.release.standalone else f"{database}.**"
    with server.client() as client:
        result = client.query(f"SELECT count(*) FROM {path}")
    columns = [c for c in result.columns if c != "Time"]
    values = result.rows[0][-len(columns) :] if result.rows else [0] * len(columns)
    return {c[len("count(") : -1]: int(v) for c, v in zip(columns, values, strict=True)}


def _expected_hostile() -> dict[str, int]:
    """What the hostile sender's own deletions leave of its points."""
    times = range(0, HOSTILE_ROWS * STEP, STEP)
    out = {}
    for device in HOSTILE:
        for m in MEASUREMENTS:
            left = [t for t in times if not SWEEP[0] <= t <= SWEEP[1]]
            if device == "root.h.d1":
                left = [t for t in left if t > OWN_FIRST]
            if (device, m) == ("root.h.d2", "s1"):
                left = [t for t in left if not OWN_LATER[0] <= t <= OWN_LATER[1]]
            out[f"{device}.{m}"] = len(left)
    return out


def _write_012(edge: IoTDBServer, honest: Sender, hostile: Sender, base: int) -> list[str]:
    """Points written on the 0.12 edge, flushed, the hostile sender's own deletion run;
    the sealed files copied to each sender's data dir. Returns the hostile file names."""
    with edge.client() as client:
        if base == 0:
            for group in ("root.victim", "root.h"):
                client.sql(f"SET STORAGE GROUP TO {group}")
        batches = [(VICTIM, VICTIM_ROWS)] + ([(HOSTILE, HOSTILE_ROWS)] if base == 0 else [])
        for devices, rows in batches:
            client.insert(
                [
                    (d, base + t * STEP, list(MEASUREMENTS), ["INT64"] * 2, [t, t])
                    for d in devices
                    for t in range(rows)
                ]
            )
        client.sql("FLUSH")
        if base == 0:
            client.sql(f"DELETE FROM root.h.d1.* WHERE time <= {OWN_FIRST}")
    files = sealed_files(edge.data_dir)
    copy_files({r: p for r, p in files.items() if "/root.victim/" in r}, honest.edge.data_dirs[0])
    mine = {r: p for r, p in files.items() if "/root.h/" in r}
    copy_files(mine, hostile.edge.data_dirs[0])
    return sorted(r for r in mine if r.endswith(".tsfile"))


def _write_20(honest: Sender, hostile: Sender, base: int) -> list[str]:
    """The simulator's files (2.0's), the hostile one with its own deletion."""
    honest.edge.write_file(
        "root.victim", 0, devices=list(VICTIM), rows_per_device=VICTIM_ROWS, start_ms=base
    )
    if base:
        return []
    rel = hostile.edge.write_file(
        "root.h", 0, devices=list(HOSTILE), rows_per_device=HOSTILE_ROWS, start_ms=0
    )
    hostile.edge.add_mods(rel, "root.h.d1", OWN_FIRST)
    return [rel]


def _grow(hostile: Sender, rel: str, text: bool) -> int:
    """The hostile sender's file gets the attack's entries and one of its own."""
    start, end = SWEEP
    path = hostile.edge.path(rel)
    if text:  # .mods, as IoTDB 0.12 writes it (the offset: Long.MAX_VALUE, every chunk)
        lines = [
            mods.line("root", MAX_TIME, start, end),  # 0.12: a prefix of every path
            mods.line("root.**", MAX_TIME, start, end),
            mods.line(COMMA, MAX_TIME, MIN_TIME, MAX_TIME),
            mods.line("root.h.d2.s1", MAX_TIME, *OWN_LATER),
        ]
        with open(f"{path}.mods", "a", encoding="utf-8") as f:
            f.write("".join(lines))
        return len(lines)
    entries = [
        mods2.tree_entry("root.**", start, end),
        mods2.tree_entry(COMMA, MIN_TIME, MAX_TIME),
        mods2.tree_entry("root.h.d2.s1", *OWN_LATER),
    ]
    with open(f"{path}.mods2", "ab") as f:
        f.write(b"".join(entries))
    return len(entries)


def _send(sender: Sender, dep: Deployment) -> None:
    result = sender.send()
    assert result.returncode == 0, f"{sender.name}: {result.stderr}\n{dep.log()}"


def test_a_senders_deletions_reach_only_its_own_devices(
    servers: tuple[IoTDBServer, IoTDBServer | None], tmp_path: Path
) -> None:
    dc, edge = servers
    dep = make_deployment(tmp_path / "site", senders=2)
    honest, hostile = dep.senders
    receiver_on_iotdb(dep, dc)

    def write(base: int) -> list[str]:
        if edge is not None:
            return _write_012(edge, honest, hostile, base)
        return _write_20(honest, hostile, base)

    hostile_files = write(0)
    dep.start_receiver()
    try:
        _send(honest, dep)
        _send(hostile, dep)
        victim_before = _counts(dc, "root.victim")
        entries = _grow(hostile, hostile_files[0], text=edge is not None)
        _send(hostile, dep)  # ships the grown deletions
        write(VICTIM_ROWS * STEP)  # the honest sender's next round, after the attack
        _send(honest, dep)
    finally:
        assert dep.stop_receiver() == 0, dep.log()
    victim_after = _counts(dc, "root.victim")
    hostile_after = _counts(dc, "root.h")
    log = dep.log()

    rows = VICTIM_ROWS
    held = victim_after == {f"{d}.{m}": 2 * rows for d in VICTIM for m in MEASUREMENTS}
    record(
        "security",
        attack=f"iotdb storage: .mods root.**/comma path ({dc.release.version})",
        tried=entries,
        held=held,
    )
    assert victim_before == {f"{d}.{m}": rows for d in VICTIM for m in MEASUREMENTS}
    assert held, victim_after  # every point of the honest sender, both rounds'
    assert hostile_after == _expected_hostile()  # its own deletions all applied
    assert "Traceback" not in log
