"""``sealsync demo`` with a real Apache IoTDB on both ends, from a source checkout.

    python examples/iotdb_demo.py [--release 0.12.0|2.0.1-beta] [--workdir DIR]

Where ``sealsync demo`` writes its edge's files with the project's simulator, this
script starts two real IoTDB servers of one release (the edge and the data centre),
writes to the edge through IoTDB's Python client (in-order points, out-of-order points
that overwrite some, ``DELETE`` of a series and of a device over time ranges, ``FLUSH``),
and runs the same commands an operator would: ``sealsync serve`` with ``storage =
"iotdb"`` (each verified file loaded into the data centre's IoTDB), two ``sealsync
send`` rounds pointed at the edge's data folder, and ``sealsync load`` (Spark on
``local[*]``). Last it asks both servers ``SELECT * ... ALIGN BY DEVICE`` and reads the
Spark table, and prints whether the three answers are the same, row by row.

It needs Java 17+, Maven and a Maven Central it can reach (the servers are resolved
from there the first time, then cached in ``~/.m2`` and ``~/.cache/sealsync/iotdb``),
and PyPI once for IoTDB's Python client (installed into a virtual environment of its
own beside the cache). The server launcher is the tests' (``tests/iotdb_server.py``),
which is why this is an example of the source checkout and not a ``sealsync``
command: the installed package ships no IoTDB launcher. Without Java, Maven or the
network it prints one line naming what is missing and exits 69.

Exit codes: 0 the three answers agree; 1 they differ (the first differences are
printed) or a step failed; 2 a bad option or a work folder that is not an earlier
demo's; 69 no Java, Maven, Maven Central or client to run IoTDB with.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXIT_UNAVAILABLE = 69
DATABASE = "root.demo"
DEVICES = ("root.demo.d1", "root.demo.d2")
SERIES = {"temperature": "DOUBLE", "pulses": "INT64", "label": "TEXT"}
POINTS = 600  # per device per batch
MERGE_WAIT = 60.0

Rows = dict[tuple[str, int], dict[str, Any]]  # (device, time) -> measurement -> value


def _value(measurement: str, t: int, device: int) -> Any:
    if measurement == "temperature":
        return t / 4 + device  # exact in a double, so answers compare with ==
    if measurement == "pulses":
        return t * 10 + device
    return f"d{device}-{t % 7}"


def _records(t_values: range, overwrite: bool = False) -> list[Any]:
    out = []
    for device_no, device in enumerate(DEVICES, 1):
        for t in t_values:
            values = [_value(m, t, device_no) for m in SERIES]
            if overwrite:
                values[0] = -1.0
            out.append((device, t, list(SERIES), list(SERIES.values()), values))
    return out


def _select(standalone: bool) -> str:
    # 0.12's paths are prefixes; 1.x and 2.x name every level below with **.
    return f"SELECT * FROM {DATABASE}{'' if standalone else '.**'} ALIGN BY DEVICE"


def _answer(server: Any) -> Rows:
    with server.client() as client:
        result = client.query(_select(server.release.standalone))
    names = result.columns[2:]
    rows: Rows = {}
    for t, device, *values in result.rows:
        got = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        if got:
            rows[(device, t)] = got
    return rows


def _table(table_path: Path) -> Rows:
    from spark_loader import read_arrow

    rows: Rows = {}
    if not table_path.exists():
        return rows
    for row in read_arrow(table_path).to_pylist():
        got = {m: row[m] for m in SERIES if row.get(m) is not None}
        if got:
            rows[(row["device"], row["time"])] = got
    return rows


def _differences(name: str, want: Rows, got: Rows, limit: int = 5) -> list[str]:
    keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    return [f"  {k}: edge {want.get(k)} != {name} {got.get(k)}" for k in keys[:limit]]


def _settle(server: Any, client: Any) -> None:
    """0.12: merge the unsequence files before deleting (0.12.0 can lose a DELETE that
    reaches points its merge is moving, docs/iotdb.md)."""
    if not server.release.standalone:
        return
    client.sql("MERGE")
    deadline = time.monotonic() + MERGE_WAIT
    while list((server.data_dir / "unsequence").rglob("*.tsfile")):
        if time.monotonic() > deadline:
            raise RuntimeError("0.12's MERGE did not finish")
        time.sleep(0.2)


@contextlib.contextmanager
def _servers(launcher: Any, version: str, workdir: Path) -> Iterator[tuple[Any, Any]]:
    release = launcher.RELEASES[version]
    started: list[Any] = []
    try:
        for role in ("edge", "dc"):
            server = launcher.IoTDBServer(release, workdir / f"iotdb-{role}")
            started.append(server)
            server.start()
        yield started[0], started[1]
    finally:
        for server in reversed(started):
            server.stop()


def run(version: str, workdir: Path) -> int:
    sys.path.insert(0, str(REPO / "tests"))  # the tests' IoTDB launcher
    import iotdb_server as launcher

    from sealsync.app import demo as pipeline
    from sealsync.keys import generate_keypair

    try:  # what IoTDB needs, before anything is written
        launcher.find_java()
        release = launcher.RELEASES[version]
        for node in release.nodes:
            launcher.resolve_classpath(release, node)
        client_python = launcher.client_python()
    except launcher.IoTDBUnavailable as exc:
        reason = str(exc).splitlines()[0]
        print(
            f"iotdb_demo: error: cannot run IoTDB {version}: {reason} "
            "(needs Java 17+, Maven and Maven Central; `sealsync demo` needs none of them)",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE

    workdir = workdir.resolve()
    pipeline._prepare_workdir(workdir)
    keys, logs, sync_state = workdir / "keys", workdir / "logs", workdir / "edge-sync"
    for folder in (keys, logs, sync_state):
        folder.mkdir()
    port = pipeline._free_port()
    edge_pub = generate_keypair(keys / "edge", comment="edge@iotdb-demo")
    host_pub = generate_keypair(keys / "host", comment="receiver@iotdb-demo")
    pipeline._write(keys / "authorized_keys", edge_pub + "\n")
    key_type, key_b64 = host_pub.split()[:2]
    pipeline._write(keys / "known_hosts", f"[127.0.0.1]:{port} {key_type} {key_b64}\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    print(f"[1/6] starting IoTDB {version} twice (edge, data centre) in {workdir}")
    try:
        with _servers(launcher, version, workdir) as (edge, dc):
            print(f"      edge on port {edge.rpc_port}, data centre on port {dc.rpc_port}")
            sender_toml = pipeline._write(
                workdir / "sender.toml",
                f"""\
[sender]
schema_dir = "{sync_state}"
data_dirs = ["{edge.data_dir}"]
identity = "{keys / "edge"}"
known_hosts = "{keys / "known_hosts"}"

[[receiver]]
name = "dc1"
host = "127.0.0.1"
port = {port}
""",
            )
            dialect = "0.12" if release.standalone else "2.0"
            receiver_toml = pipeline._write(
                workdir / "receiver.toml",
                f"""\
[receiver]
listen = "127.0.0.1:{port}"
host_key = "{keys / "host"}"
authorized_keys = "{keys / "authorized_keys"}"
allow = ["127.0.0.0/8"]
schema_dir = "{workdir / "dc" / "schema"}"
data_dirs = ["{workdir / "dc" / "data"}"]

[receiver.storage]
kind = "iotdb"
port = {dc.rpc_port}
dialect = "{dialect}"
python = "{client_python}"
""",
            )
            table_path = workdir / "warehouse" / "points"
            loader_toml = pipeline._write(
                workdir / "loader.toml",
                f"""\
[loader]
receiver_data_dirs = ["{workdir / "dc" / "data"}"]
table_path = "{table_path}"
state_dir = "{workdir / "warehouse" / "_state"}"
master = "local[*]"
""",
            )
            send = pipeline._sealsync("send", "--config", str(sender_toml), "--json")

            print("[2/6] edge: points in order, FLUSH")
            with edge.client() as client:
                create = "SET STORAGE GROUP TO" if release.standalone else "CREATE DATABASE"
                client.sql(f"{create} {DATABASE}")
                for device in DEVICES:
                    for m, type_name in SERIES.items():
                        client.sql(
                            f"CREATE TIMESERIES {device}.{m} WITH DATATYPE={type_name}, "
                            "ENCODING=PLAIN"
                        )
                client.insert(_records(range(POINTS)))
                client.sql("FLUSH")

            with pipeline._receiver_process(receiver_toml, port, logs / "receiver.log", env):
                print(f"[3/6] receiver (storage = iotdb) on 127.0.0.1:{port}; round 1")
                first = pipeline._run_json(send, "round 1", logs / "send.log", env)
                pipeline._echo_round(print, pipeline._round_summary(first))

                print("[4/6] edge: more points, out-of-order overwrites, DELETEs; round 2")
                with edge.client() as client:
                    client.insert(_records(range(POINTS, 2 * POINTS)))
                    client.sql("FLUSH")
                    client.insert(_records(range(100, 150), overwrite=True))
                    client.sql("FLUSH")
                    _settle(edge, client)
                    client.sql(f"DELETE FROM {DEVICES[1]}.* WHERE time >= 200 AND time <= 299")
                    client.sql(f"DELETE FROM {DEVICES[0]}.label WHERE time <= 50")
                    client.sql("FLUSH")
                second = pipeline._run_json(send, "round 2", logs / "send.log", env)
                pipeline._echo_round(print, pipeline._round_summary(second))

            print("[5/6] sealsync load (Spark on local[*])")
            load = pipeline._run_json(
                pipeline._sealsync("load", "--config", str(loader_toml), "--json"),
                "load",
                logs / "load.log",
                env,
            )
            print(f"      {load.get('ingested', 0)} files, {load.get('rows_written', 0)} rows")

            print("[6/6] the edge's answer, the data centre's and the table, row by row")
            edge_rows, dc_rows, table_rows = _answer(edge), _answer(dc), _table(table_path)
    except launcher.IoTDBUnavailable as exc:
        print(f"iotdb_demo: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except RuntimeError as exc:  # a statement IoTDB refused, a merge that did not end
        print(f"iotdb_demo: error: {str(exc).splitlines()[0]} (logs in {logs})", file=sys.stderr)
        return 1

    print(f"      rows: edge {len(edge_rows)}, data centre {len(dc_rows)}, table {len(table_rows)}")
    problems = _differences("data centre", edge_rows, dc_rows)
    problems += _differences("table", edge_rows, table_rows)
    if problems or not edge_rows:
        print("MISMATCH:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    print(f"edge, data centre and table agree: {len(edge_rows)} rows (logs in {logs})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--release", default="0.12.0", help="0.12.0 (default) or 2.0.1-beta")
    parser.add_argument("--workdir", type=Path, default=Path("sealsync-iotdb-demo"))
    args = parser.parse_args(argv)
    releases = ("0.12.0", "2.0.1-beta")
    if args.release not in releases:
        parser.error(f"--release: one of {', '.join(releases)}")
    from sealsync.errors import SealsyncError

    try:
        return run(args.release, args.workdir)
    except SealsyncError as exc:
        print(f"iotdb_demo: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
