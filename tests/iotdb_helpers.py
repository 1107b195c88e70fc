"""What the tests against a real IoTDB share: a sender pointed at a server's data folder,
``sealsync load`` run on what the receiver holds, and IoTDB's answer and the table read
into rows that compare with ``==``.

Kept apart from iotdb_server.py, which starts and stops the servers and knows nothing of
sealsync.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from config_helpers import write_config
from deploy_helpers import Deployment
from iotdb_server import IoTDBClient, IoTDBServer, client_python
from spark_loader_helpers import measurement_columns

from sealsync.permissions import restrict_writes
from spark_loader import read_arrow

Points = dict[tuple[str, str], dict[int, Any]]  # (device, measurement) -> time -> value
Rows = dict[tuple[str, int], dict[str, Any]]  # (device, time) -> measurement -> value


def point_sender_at(dep: Deployment, data_dir: Path, *, index: int = 0) -> None:
    """Make the deployment's sender ``index`` (the first by default) ship ``data_dir`` (a
    server's data folder), as an operator would configure it."""
    sender = dep.senders[index]
    text = re.sub(r"data_dirs = \[.*\]", f'data_dirs = ["{data_dir}"]', sender.config.read_text())
    sender.config.chmod(0o600)
    sender.config.write_text(text)
    restrict_writes(sender.config)


def receiver_on_iotdb(dep: Deployment, dc: IoTDBServer) -> None:
    """Make the deployment's receiver load what it receives into ``dc`` (``[receiver.storage]
    kind = "iotdb"``, the dialect of ``dc``'s release), as an operator would configure it."""
    dialect = "0.12" if dc.release.standalone else "2.0"
    text = dep.receiver_config.read_text() + (
        f'\n[receiver.storage]\nkind = "iotdb"\nport = {dc.rpc_port}\ndialect = "{dialect}"\n'
        f'python = "{client_python()}"\n'
    )
    dep.receiver_config.chmod(0o600)
    dep.receiver_config.write_text(text)
    restrict_writes(dep.receiver_config)


def load_table(dep: Deployment, tmp_path: Path, timeout: int = 600) -> Path:
    """Run ``sealsync load`` (a real process, Spark local[1]) over the receiver's data
    folder; the table it built, under ``tmp_path``."""
    table = tmp_path / "table"
    toml = write_config(
        tmp_path / "loader.toml",
        {
            "loader": {
                "receiver_data_dirs": [str(dep.receiver_data)],
                "table_path": str(table),
                "state_dir": str(tmp_path / "state"),
                "master": "local[1]",
            }
        },
    )
    load = subprocess.run(
        [sys.executable, "-m", "sealsync", "load", "--config", str(toml)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert load.returncode == 0, load.stderr
    return table


def select_all(server: IoTDBServer) -> str:
    """Every series of the server, one row per (device, time): 0.12 has no ``**``, and a
    path there is a prefix, so ``root.sg`` means every series under it."""
    return (
        "SELECT * FROM root.sg ALIGN BY DEVICE"
        if server.release.standalone
        else "SELECT * FROM root.** ALIGN BY DEVICE"
    )


def iotdb_answer(server: IoTDBServer, *, keep_empty: bool = False) -> Rows:
    """The server's answer to ``select_all`` as rows; a row with no value is left out
    unless ``keep_empty`` (to see whether IoTDB answers one)."""
    with server.client() as client:
        result = client.query(select_all(server))
    columns = [c for c in result.columns if c != "Time"]
    assert columns[0] == "Device", result.columns
    answer: Rows = {}
    for row in result.rows:
        t, device, *values = row
        got = {c: v for c, v in zip(columns[1:], values, strict=True) if v is not None}
        if got or keep_empty:
            answer[(device, t)] = got
    return answer


def insert_flush(
    client: IoTDBClient,
    series: dict[str, tuple[str, ...]],
    points: Points,
    times: range,
    base: int,
) -> frozenset[int]:
    """Every one of ``series`` (device -> measurements, INT64) at ``times``, value
    ``base + t``, then ``FLUSH``: a sealed file per storage group. ``points`` records
    what was written; the times are returned."""
    client.insert(
        [
            (d, t, list(ms), ["INT64"] * len(ms), [base + t] * len(ms))
            for d, ms in series.items()
            for t in times
        ]
    )
    client.sql("FLUSH")
    for d, ms in series.items():
        for m in ms:
            points.setdefault((d, m), {}).update({t: base + t for t in times})
    return frozenset(times)


def sealed_files(data_dir: Path) -> dict[str, Path]:
    """A server's sealed files (a ``.tsfile`` with its ``.resource``, and any ``.mods``
    or 2.x ``.mods2``), by path relative to its data folder."""
    out: dict[str, Path] = {}
    for resource in sorted(data_dir.glob("*sequence/**/*.tsfile.resource")):
        tsfile = resource.with_suffix("")
        mods = [tsfile.with_name(tsfile.name + suffix) for suffix in (".mods", ".mods2")]
        for path in (tsfile, resource, *mods):
            if path.is_file():
                out[str(path.relative_to(data_dir))] = path
    return out


def copy_files(files: dict[str, Path], to: Path) -> dict[str, Path]:
    """Copy ``files`` (relative path -> file) under ``to``; the copies by the same keys."""
    for rel, path in files.items():
        (to / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, to / rel)
    return {rel: to / rel for rel in files}


def rows_of(points: Points) -> Rows:
    """The rows a query answers for ``points``: a (device, time) with no value has none."""
    rows: Rows = {}
    for (device, measurement), values in points.items():
        for t, v in values.items():
            rows.setdefault((device, t), {})[measurement] = v
    return rows


def table_rows(table_path: Path) -> Rows:
    """The table's measurements (``s<N>``) as rows, nulls left out, each found by its
    column's metadata (a measurement of two types has two columns); asserts no
    (device, time) is in it twice."""
    table = read_arrow(table_path)
    names = {c: m for c, m in measurement_columns(table_path).items() if re.fullmatch(r"s\d+", m)}
    out: Rows = {}
    for row in table.to_pylist():
        key = (row["device"], row["time"])
        assert key not in out, f"{key} twice in the table"
        out[key] = {m: row[c] for c, m in names.items() if row[c] is not None}
    return out
