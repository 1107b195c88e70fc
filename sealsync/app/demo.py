"""``sealsync demo``: the whole pipeline on this machine, as separate processes.

The demo drives the same commands an operator would (``serve``, ``send``, ``load``)
as child processes, so what it shows is the product, not a test harness: keys and
trust files, an edge instance that writes and seals TsFiles, a receiver on a free
loopback port, two sender rounds around a compaction and a ``.mods2`` deletion, and the
Spark loader on ``local[*]``. Every child is stopped on exit, error or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealsync.errors import EXIT_USAGE, SealsyncError
from sealsync.keys import generate_keypair
from sealsync.permissions import restrict_writes

MARKER = ".sealsync-demo"
GROUPS = ("root.sg1", "root.sg2", "root.sg3")
DEVICES_PER_GROUP = 2
ROWS_PER_DEVICE = 2000
SERVE_START_TIMEOUT = 30.0

Echo = Callable[[str], None]


@dataclass
class DemoSummary:
    workdir: str
    receiver: str
    rounds: list[dict[str, Any]] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    rows_per_device: dict[str, int] = field(default_factory=dict)
    expected_rows_per_device: dict[str, int] = field(default_factory=dict)
    edge_sealed_files: list[str] = field(default_factory=list)
    receiver_files: list[str] = field(default_factory=list)
    folders: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.rows_per_device == self.expected_rows_per_device
            and sorted(self.receiver_files) == sorted(self.edge_sealed_files)
            and all(r.get("ok") for r in self.rounds)
            and bool(self.load.get("ok"))
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workdir": self.workdir,
            "receiver": self.receiver,
            "rounds": self.rounds,
            "load": self.load,
            "rows_per_device": self.rows_per_device,
            "expected_rows_per_device": self.expected_rows_per_device,
            "edge_sealed_files": self.edge_sealed_files,
            "receiver_files": self.receiver_files,
            "folders": self.folders,
            "seconds": round(self.seconds, 2),
        }


def _prepare_workdir(workdir: Path) -> None:
    """Start from an empty folder; only ever wipe a folder an earlier demo made."""
    if workdir.exists():
        if (workdir / MARKER).exists():
            shutil.rmtree(workdir)
        elif any(workdir.iterdir()):
            raise SealsyncError(
                f"{workdir} exists and is not an earlier demo's folder; choose another --workdir",
                EXIT_USAGE,
            )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("made by sealsync demo; removed by the next demo run\n")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, text: str) -> Path:
    """Configs and trust files no one else may write, whatever the umask (else refused)."""
    path.write_text(text, encoding="utf-8")
    restrict_writes(path)
    return path


def _sealsync(*args: str) -> list[str]:
    return [sys.executable, "-m", "sealsync", *args]


def _run_json(args: list[str], what: str, log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run a sealsync command that prints JSON; its stderr goes to ``log``."""
    with open(log, "ab") as err:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=err, env=env, check=False)
    result: dict[str, Any]  # every sealsync --json output is one object
    try:
        result = json.loads(proc.stdout.decode("utf-8") or "{}")
    except ValueError:
        result = {}
    if proc.returncode not in (0, 1) or not result:
        raise SealsyncError(f"demo: {what} failed (exit {proc.returncode}); see {log}")
    return result


@contextmanager
def _receiver_process(config: Path, port: int, log: Path, env: dict[str, str]):  # type: ignore[no-untyped-def]
    """``sealsync serve`` as a child, up and listening, stopped on the way out."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            _sealsync("serve", "--init", "--config", str(config)),  # a first start
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        deadline = time.monotonic() + SERVE_START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise SealsyncError(f"demo: the receiver exited at start (see {log})")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SealsyncError(f"demo: the receiver did not listen (see {log})") from None
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _table_rows_per_device(table_path: Path) -> dict[str, int]:
    """Rows per device in the Delta table's latest version: the files its log names,
    as every Delta reader sees them (never the folder's Parquet files as such, which
    hold removed versions too)."""
    from spark_loader import read_arrow

    if not table_path.exists():
        return {}
    table = read_arrow(table_path)
    if "device" not in table.column_names:
        return {}
    return dict(sorted(Counter(table.column("device").to_pylist()).items()))


def _start_ms(group: int, index: int) -> int:
    """First timestamp of the demo's ``index``-th sequence file of group ``group``."""
    return 1_700_000_000_000 + (group * 10 + index) * 10_000_000


def _expected_rows_per_device(data_dir: Path, names: list[str]) -> dict[str, int]:
    """Rows the edge still has: each sealed file's rows minus what its ``.mods2`` deleted."""
    from sealsync import formats
    from sealsync.formats import deletion, mods2
    from sealsync.names import MODS2_SUFFIX

    counts: Counter[str] = Counter()
    for name in names:
        table = formats.format_for(name).to_arrow(data_dir / name)
        gone = mods2.read(data_dir / (name + MODS2_SUFFIX))
        table = deletion.apply(table, gone)
        counts.update(table.column("device").to_pylist())
    return dict(sorted(counts.items()))


def _receiver_files(data_dir: Path, sender: str) -> list[str]:
    """Sender-relative names of what the receiver loaded (default storage layout)."""
    from receiver.storage import DirectoryStorage

    return sorted(DirectoryStorage([data_dir]).list(sender))


def run_demo(workdir: Path, echo: Echo = print) -> DemoSummary:
    """Run the pipeline in ``workdir``; the summary says what moved and what Spark holds."""
    from sealsync.simulator import EdgeInstance, time_partition
    from sender.manage.identity import sender_uuid

    started = time.monotonic()
    workdir = workdir.resolve()
    _prepare_workdir(workdir)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    keys, logs = workdir / "keys", workdir / "logs"
    keys.mkdir(mode=0o700)  # no one else may replace a key or trust file, whatever the umask
    logs.mkdir()
    port = _free_port()

    echo(f"[1/6] keys and trust files in {keys}")
    edge_pub = generate_keypair(keys / "edge", comment="edge@demo")
    host_pub = generate_keypair(keys / "host", comment="receiver@demo")
    _write(keys / "authorized_keys", edge_pub + "\n")
    key_type, key_b64 = host_pub.split()[:2]
    _write(keys / "known_hosts", f"[127.0.0.1]:{port} {key_type} {key_b64}\n")

    echo("[2/6] edge instance: writing and sealing TsFiles")
    edge = EdgeInstance(workdir / "edge")
    first: dict[str, list[str]] = {}
    for g, group in enumerate(GROUPS):
        devices = [f"{group}.d{d}" for d in range(1, DEVICES_PER_GROUP + 1)]
        first[group] = [
            edge.write_file(
                group,
                time_partition(_start_ms(g, i)),
                devices=devices,
                rows_per_device=ROWS_PER_DEVICE,
                start_ms=_start_ms(g, i),
            )
            for i in range(3)
        ]
        edge.write_file(
            group,
            time_partition(1_600_000_000_000 + g * 10_000_000),
            devices=devices,
            rows_per_device=ROWS_PER_DEVICE // 4,
            start_ms=1_600_000_000_000 + g * 10_000_000,
            unsequence=True,
        )
    edge.append_schema([f"CREATE DATABASE {g}" for g in GROUPS])

    dc = workdir / "dc"
    sender_toml = _write(
        workdir / "sender.toml",
        f"""\
[sender]
schema_dir = "edge/schema"
data_dirs = ["edge/data"]
identity = "keys/edge"
known_hosts = "keys/known_hosts"

[[receiver]]
name = "dc1"
host = "127.0.0.1"
port = {port}
""",
    )
    receiver_toml = _write(
        workdir / "receiver.toml",
        f"""\
[receiver]
listen = "127.0.0.1:{port}"
host_key = "keys/host"
authorized_keys = "keys/authorized_keys"
allow = ["127.0.0.0/8"]
schema_dir = "dc/schema"
data_dirs = ["dc/data"]
""",
    )
    loader_toml = _write(
        workdir / "loader.toml",
        """\
[loader]
receiver_data_dirs = ["dc/data"]
table_path = "warehouse/points"
state_dir = "warehouse/_state"
master = "local[*]"
""",
    )
    summary = DemoSummary(workdir=str(workdir), receiver=f"127.0.0.1:{port}")
    send = _sealsync("send", "--config", str(sender_toml), "--json")

    with _receiver_process(receiver_toml, port, logs / "receiver.log", env):
        echo(f"[3/6] receiver listening on 127.0.0.1:{port}; round 1")
        summary.rounds.append(_round_summary(_run_json(send, "round 1", logs / "send.log", env)))
        _echo_round(echo, summary.rounds[-1])

        echo("[4/6] compaction of root.sg1, a .mods2 deletion in root.sg2, new files; round 2")
        edge.merge(first["root.sg1"], "root.sg1", time_partition(_start_ms(0, 0)))
        # IoTDB's DELETE of root.sg2.d1's first half: an X.mods2 on a file already synced
        half = _start_ms(GROUPS.index("root.sg2"), 0) + ROWS_PER_DEVICE // 2 * 1000
        edge.add_mods(first["root.sg2"][0], "root.sg2.d1", half - 1)
        for group in GROUPS[1:]:
            edge.write_file(
                group,
                time_partition(1_800_000_000_000),
                devices=[f"{group}.d1"],
                rows_per_device=ROWS_PER_DEVICE,
                start_ms=1_800_000_000_000,
            )
        summary.rounds.append(_round_summary(_run_json(send, "round 2", logs / "send.log", env)))
        _echo_round(echo, summary.rounds[-1])

    echo("[5/6] Spark loader on local[*]")
    summary.load = _run_json(
        _sealsync("load", "--config", str(loader_toml), "--json"), "load", logs / "load.log", env
    )
    echo(
        f"      {summary.load.get('ingested', 0)} files ingested, "
        f"{summary.load.get('rows_written', 0)} rows, {summary.load.get('seconds', 0):.1f} s"
    )

    echo("[6/6] checking the table against the edge instance")
    summary.edge_sealed_files = edge.sealed_files()
    summary.receiver_files = _receiver_files(dc / "data", sender_uuid(edge.schema_dir))
    summary.rows_per_device = _table_rows_per_device(workdir / "warehouse" / "points")
    summary.expected_rows_per_device = _expected_rows_per_device(
        edge.data_dirs[0], summary.edge_sealed_files
    )
    summary.folders = {
        "edge instance": str(edge.root),
        "sender state": str(edge.data_dirs[0] / "sync-sender"),
        "receiver storage": str(dc / "data"),
        "spark table": str(workdir / "warehouse" / "points"),
        "configs": str(workdir),
        "logs": str(logs),
    }
    summary.seconds = time.monotonic() - started
    return summary


def _round_summary(result: dict[str, Any]) -> dict[str, Any]:
    receivers = result.get("receivers") or [result]
    r = receivers[0]
    dirs = r.get("dirs", [])
    return {
        "ok": bool(r.get("ok")),
        "shipped_files": int(r.get("shipped_files", 0)),
        "shipped_bytes": int(r.get("shipped_bytes", 0)),
        "deleted_files": sum(len(d.get("deleted", [])) for d in dirs),
        "seconds": float(r.get("seconds", 0.0)),
    }


def _echo_round(echo: Echo, r: dict[str, Any]) -> None:
    rate = r["shipped_bytes"] / r["seconds"] / 2**20 if r["seconds"] else 0.0
    echo(
        f"      shipped {r['shipped_files']} files ({r['shipped_bytes'] / 2**20:.1f} MiB, "
        f"{rate:.1f} MiB/s), deleted {r['deleted_files']}, {r['seconds']:.2f} s"
    )


def print_summary(summary: DemoSummary, echo: Echo = print) -> None:
    echo("")
    echo("rows per device in the Spark table (expected from the edge's sealed files):")
    for device, rows in summary.rows_per_device.items():
        want = summary.expected_rows_per_device.get(device)
        echo(f"  {device:<16} {rows:>8}  {'ok' if rows == want else f'expected {want}'}")
    echo("")
    echo("folders:")
    for what, where in summary.folders.items():
        echo(f"  {what:<17} {where}")
    echo("")
    verdict = "the pipeline works" if summary.ok else "MISMATCH: see above and the logs"
    echo(f"demo finished in {summary.seconds:.1f} s: {verdict}")
