"""A real IoTDB's deletions reach the table: points written and deleted on a running
release, its data folder shipped by ``sealsync send`` to ``sealsync serve``, loaded by
``sealsync load`` (real processes all), and the table compared row by row with the
answer a simple reference computes from the statements run -- and with IoTDB's own.

The statements cover what IoTDB writes into ``.mods`` (0.12) and ``.mods2`` (2.x): a
series, one-level ``*`` patterns, ``**`` (2.x) in the middle and at the end, closed
ranges, ``Long.MIN_VALUE``/``MAX_VALUE`` bounds, a time at which a device loses every
value (no row), and a deletion that reaches a file before a point written later to
the same file (IoTDB keeps that point: in 0.12-1.x by the deletion's file offset).

And each release's own reading of a path (:mod:`sealsync.formats.deletion`): 0.12 reads
one as a prefix (``DELETE FROM root.sg WHERE time = 3`` empties every series at 3,
``root.sg.*.*`` reaches five levels, ``root.*.a`` the devices below ``root.sg.a``) and
a ``*`` inside a node as a character (``root.sg.d*.s1`` is written to the ``.mods`` and
deletes nothing), also in the file its ``MERGE`` rewrote; 2.x reads a whole path and
``s*`` as a glob (2.0.1-beta wrote no entry for ``root.sg.d*.s1`` and deleted nothing).
The reference below reads each release so, and is held to the server's own answer
first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import Deployment
from iotdb_helpers import Points, iotdb_answer, load_table, point_sender_at, rows_of, table_rows
from iotdb_server import RELEASES, IoTDBServer

from sealsync.formats import deletion, mods

SERIES = {"root.sg.d1": ("s1", "s2"), "root.sg.d2": ("s1", "s2"), "root.sg.a.d3": ("s1",)}
MERGE_WAIT = 60.0


def _regex(pattern: str, prefix: bool) -> re.Pattern[str]:
    """The reference's own reading of a path pattern: ``*`` one level, ``**`` one or more,
    a node holding ``*`` a glob (2.x); with ``prefix`` (0.12) the pattern is a prefix of
    the path, ``*`` one whole level and any other node a name as written."""
    parts = []
    for node in pattern.split("."):
        if node == "*":
            parts.append(r"[^.]+")
        elif node == "**" and not prefix:
            parts.append(r"[^.]+(?:\.[^.]+)*")
        elif "*" in node and not prefix:
            parts.append("[^.]*".join(re.escape(part) for part in node.split("*")))
        else:
            parts.append(re.escape(node))
    return re.compile(r"\.".join(parts) + (r"(?:\..+)?" if prefix else ""))


def _delete(points: Points, pattern: str, start: int, end: int, prefix: bool) -> None:
    nodes = pattern.split(".")
    if not prefix and any("*" in n and n not in ("*", "**") for n in nodes[:-1]):
        return  # 2.0.1-beta writes no entry for a glob in a device's node, deletes nothing
    regex = _regex(pattern, prefix)
    for (device, measurement), values in points.items():
        if regex.fullmatch(f"{device}.{measurement}"):
            for t in [t for t in values if start <= t <= end]:
                del values[t]


def _merge(server: IoTDBServer) -> None:
    """0.12's ``MERGE``, waited for: every unsequence file rewritten into the sequence."""
    with server.client() as client:
        client.sql("MERGE")
    deadline = time.monotonic() + MERGE_WAIT
    while list((server.data_dir / "unsequence").rglob("*.tsfile")):
        assert time.monotonic() < deadline, "0.12's merge did not finish"
        time.sleep(0.2)


def _run(server: IoTDBServer) -> tuple[Points, dict[Path, tuple[bytes, int]]]:
    """Write, flush, delete on ``server``; the points its answer must hold, and the
    deletion files it wrote before any merge."""
    two = not server.release.standalone
    prefix = not two  # how the release reads a DELETE's path
    series = SERIES
    points: Points = {(d, m): {} for d, ms in series.items() for m in ms}
    with server.client() as client:
        client.sql("CREATE DATABASE root.sg" if two else "SET STORAGE GROUP TO root.sg")
        for device, measurements in series.items():
            for m in measurements:
                client.sql(f"CREATE TIMESERIES {device}.{m} WITH DATATYPE=INT64, ENCODING=RLE")
        for n, (device, measurements) in enumerate(series.items(), 1):
            records = [
                (device, t, list(measurements), ["INT64"] * len(measurements), [t * 10 + n] * 2)
                for t in range(1, 11)
            ]
            client.insert([(d, t, ms, ty, vs[: len(ms)]) for d, t, ms, ty, vs in records])
            for m in measurements:
                points[(device, m)].update({t: t * 10 + n for t in range(1, 11)})
        # Before the flush: a deletion on the working file, then a point written after it.
        client.sql("DELETE FROM root.sg.d1.s2 WHERE time <= 3")
        _delete(points, "root.sg.d1.s2", -(1 << 63), 3, prefix)
        client.insert([("root.sg.d1", 2, ["s2"], ["INT64"], [999])])
        points[("root.sg.d1", "s2")][2] = 999
        client.sql("FLUSH")
        statements = [
            ("root.sg.d1.s1", None, 4),
            ("root.sg.d2.*", 5, 6),
            ("root.sg.d2.s2", 9, None),
            ("root.sg.**" if two else "root.sg.*.*", None, 1),
        ]
        if two:
            statements += [("root.**.d3.s1", 7, 7), ("root.sg.**.s2", 8, 8)]
        else:  # a prefix: a storage group, a device, a * for one whole node
            statements += [("root.sg", 3, 3), ("root.*.a", 8, 8), ("root.sg.d1", 10, 10)]
        # a * inside a node: a character in 0.12 (which deletes nothing), in 2.x a glob
        # of the series' own node (a device's node: nothing written, nothing deleted)
        statements += [("root.sg.d*.s1", 7, 7), ("root.sg.d2.s*", 2, 2)]
        _delete_all(client, points, statements, prefix)
    before_merge = _mods_written(server)
    if not two:  # out-of-order points, merged into new sequence files, then more deletions
        with server.client() as client:
            # every device: 0.12.0's merge fails on a device the unsequence file lacks
            client.insert(
                [(d, 5, list(ms), ["INT64"] * len(ms), [555] * len(ms)) for d, ms in series.items()]
            )
            for key in points:
                points[key][5] = 555
            client.sql("FLUSH")
        _merge(server)
        with server.client() as client:
            _delete_all(client, points, [("root.sg", 6, 6), ("root.sg.d*", 5, 5)], prefix)
    return points, before_merge


def _delete_all(
    client: Any,
    points: Points,
    statements: list[tuple[str, int | None, int | None]],
    prefix: bool,
) -> None:
    for pattern, start, end in statements:
        where = " AND ".join(
            w
            for w in (
                f"time >= {start}" if start is not None else "",
                f"time <= {end}" if end is not None else "",
            )
            if w
        )
        client.sql(f"DELETE FROM {pattern} WHERE {where}")
        _delete(
            points,
            pattern,
            -(1 << 63) if start is None else start,
            (1 << 63) - 1 if end is None else end,
            prefix,
        )


def _mods_written(server: IoTDBServer) -> dict[Path, tuple[bytes, int]]:
    """Each deletion file the server wrote, its bytes and its data file's size."""
    suffix = ".mods" if server.release.tsfile_version == 3 else ".mods2"
    written = sorted(server.data_dir.glob(f"sequence/root.sg/*/*/*.tsfile{suffix}"))
    return {p: (p.read_bytes(), Path(str(p)[: -len(suffix)]).stat().st_size) for p in written}


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(RELEASES))
def test_the_table_holds_what_iotdb_answers_after_its_deletions(
    version: str,
    tmp_path: Path,
    iotdb_server: Callable[[str], IoTDBServer],
    start_deployment: Callable[..., Deployment],
) -> None:
    server = iotdb_server(version)
    points, before_merge = _run(server)
    expected = rows_of(points)
    assert iotdb_answer(server) == expected  # the reference reads IoTDB as IoTDB does
    print(f"IoTDB {version} answers {len(expected)} rows")
    assert before_merge, "no deletion file written"
    for path, (content, _) in before_merge.items():
        print(f"{path.name}: {content!r}")
    if server.release.tsfile_version == 3:  # the pre-flush deletion: below the file's chunks
        content, size = next(iter(before_merge.values()))
        first = content.decode()
        assert int(first.splitlines()[0].split(",")[2]) < size
        # 0.12 wrote the lines as the statements gave them: a prefix, and d* as a name
        assert "\nDELETION,root.sg," in first and "\nDELETION,root.sg.d*.s1," in first
        after = "".join(c.decode() for c, _ in _mods_written(server).values())
        assert "\nDELETION,root.sg.d*," in "\n" + after, after  # in the file the merge made
        # 0.12's own .resource and lines: read by 0.12's rules
        read = [d for path in _mods_written(server) for d in mods.read(path)]
        assert {d.rules for d in read} == {deletion.RULES_012}

    dep = start_deployment()
    point_sender_at(dep, server.data_dir)
    sent = dep.senders[0].send()
    assert sent.returncode == 0, sent.stderr
    got: Any = table_rows(load_table(dep, tmp_path))
    assert got == expected
    assert ("root.sg.d2", 6) not in got  # every value of the device deleted: no row
    assert got[("root.sg.d1", 2)]["s2"] == 999  # written after the deletion: kept
