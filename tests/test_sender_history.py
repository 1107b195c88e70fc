"""The round history (``rounds.jsonl``), the metrics built from it, and the pieces of
``sealsync send`` that word failures: in-process, on real files."""

from __future__ import annotations

import errno
import json
import re
import socket
from pathlib import Path

import paramiko
import pytest
from config_helpers import make_sender, sender_doc, write_config
from prometheus_client.parser import text_string_to_metric_families

from sealsync.config import load_sender_config
from sealsync.errors import (
    EXIT_LOCKED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    ConfigError,
    LocalIOError,
    LockHeld,
    SealsyncError,
    Terminated,
    describe_os_error,
    naming_os_errors,
)
from sealsync.metrics import snapshot_registry, write_textfile
from sealsync.protocol import ProtocolError
from sender.manage.history import (
    FAILED,
    OK,
    Attempt,
    append_attempt,
    last_attempt,
    last_success_time,
    read_history,
)
from sender.manage.layout import SchemaPaths, data_dir_problem
from sender.metrics import sender_families
from sender.send import AttemptResult, SendResult, failure_of
from sender.transfer.client import handshake_failure
from sender.transfer.errors import ConnectionLost, HostKeyError, Refused, Unreachable


def paths(tmp_path: Path) -> SchemaPaths:
    return SchemaPaths(tmp_path / "schema", "127.0.0.1", 5555)


def attempt(outcome: str, end: float, kind: str | None = None, new: int = 0) -> Attempt:
    return Attempt(
        receiver="dc1",
        address="127.0.0.1:5555",
        start=end - 1,
        end=end,
        outcome=outcome,
        kind=kind,
        error=None if outcome == OK else "why",
        new=new,
        bytes=new * 10,
    )


# ---------------------------------------------------------------- rounds.jsonl


def test_each_line_carries_running_totals_and_the_last_success(tmp_path: Path) -> None:
    p = paths(tmp_path)
    append_attempt(p, attempt(FAILED, 10.0, kind="unreachable"))
    append_attempt(p, attempt(OK, 20.0, new=3))
    append_attempt(p, attempt(FAILED, 30.0, kind="unreachable"))
    append_attempt(p, attempt("busy", 40.0, kind="busy"))
    append_attempt(p, attempt(OK, 50.0, new=2))
    append_attempt(p, attempt(FAILED, 60.0, kind="local"))
    entries = read_history(p)
    assert [e["end"] for e in entries] == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    assert [e["last_success"] for e in entries] == [None, 20.0, 20.0, 20.0, 50.0, 50.0]
    totals = entries[-1]["totals"]
    assert (totals["new"], totals["bytes"]) == (5, 50)
    assert totals["outcomes"] == {"failed": 3, "ok": 2, "busy": 1}
    assert totals["failures"] == {"unreachable": 2, "local": 1}  # busy is not a failure
    assert last_success_time(entries[-1]) == 50.0 == last_success_time(last_attempt(p))
    # one JSON object per line, nothing else
    lines = p.history.read_text().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["receiver"] == "dc1" for line in lines)


def test_the_history_is_cut_to_its_last_lines_without_losing_totals(tmp_path: Path) -> None:
    p = paths(tmp_path)
    append_attempt(p, attempt(OK, 1.0, new=1), keep=10)
    for i in range(2, 12):  # 11 lines: within the tenth of slack, nothing cut yet
        append_attempt(p, attempt(FAILED, float(i), kind="unreachable"), keep=10)
    assert len(read_history(p)) == 11
    append_attempt(p, attempt(FAILED, 12.0, kind="unreachable"), keep=10)
    entries = read_history(p)
    assert [e["end"] for e in entries] == [float(i) for i in range(3, 13)]
    assert entries[-1]["totals"]["outcomes"] == {"ok": 1, "failed": 11}
    assert entries[-1]["totals"]["new"] == 1
    assert last_success_time(last_attempt(p)) == 1.0  # its line is gone, its time is not


def test_a_torn_or_damaged_line_is_left_out_and_cut_off(tmp_path: Path) -> None:
    p = paths(tmp_path)
    append_attempt(p, attempt(OK, 1.0, new=2))
    with open(p.history, "a", encoding="utf-8") as f:
        f.write('{"outcome": "ok"}\nnot json\n{"outcome": "o')  # damaged, then torn
    assert [e.get("end") for e in read_history(p)] == [1.0, None]  # an object still counts
    append_attempt(p, attempt(OK, 2.0, new=1))
    entries = read_history(p)
    assert [e.get("end") for e in entries] == [1.0, None, 2.0]
    assert entries[-1]["totals"]["new"] == 1  # the previous line had no totals: counted anew
    assert p.history.read_text().endswith("\n")


def test_an_unwritable_history_is_one_line_naming_the_path(tmp_path: Path) -> None:
    p = paths(tmp_path)
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema/sync").write_text("a file where a folder must be")
    with pytest.raises(LocalIOError) as e:
        append_attempt(p, attempt(OK, 1.0))
    assert str(e.value) == (
        f"cannot record the attempt in {tmp_path}/schema/sync/127.0.0.1_5555: Not a directory"
    )


# ---------------------------------------------------------------- metrics


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_come_from_the_history_of_every_receiver(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556})
    config = load_sender_config(make_sender(tmp_path, doc))
    p = SchemaPaths(config.schema_dir, "127.0.0.1", 5555)
    append_attempt(p, attempt(OK, 100.0, new=4))
    append_attempt(p, attempt(FAILED, 200.0, kind="refused"))
    out = tmp_path / "sender.prom"
    write_textfile(out, snapshot_registry(sender_families(config)))
    samples = parse(out.read_text())

    def v(name: str, receiver: str = "dc1", **labels: str) -> float:
        return samples[
            (f"sealsync_sender_{name}", tuple(sorted({"receiver": receiver, **labels}.items())))
        ]

    assert v("last_attempt_timestamp_seconds") == 200.0
    assert v("last_success_timestamp_seconds") == 100.0
    assert v("last_attempt_success") == 0.0
    assert v("last_attempt_duration_seconds") == 1.0
    assert v("last_attempt_shipped_files") == 0.0
    assert v("shipped_files_total") == 4.0 and v("shipped_bytes_total") == 40.0
    assert v("failures_total", kind="refused") == 1.0
    assert v("failures_total", kind="unreachable") == 0.0  # written before it happens
    assert v("attempts_total", outcome="ok") == 1.0
    # a receiver never tried: zeros, so "no success for a while" fires for it too
    assert v("last_success_timestamp_seconds", "dc2") == 0.0
    assert v("attempts_total", "dc2", outcome="failed") == 0.0
    # counters carry no _created sample (its time would be the time of writing)
    assert not any(name.endswith("_created") for name, _ in samples)


def test_an_unwritable_metrics_textfile_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "metrics").write_text("a file where a folder must be")
    target = tmp_path / "metrics" / "sender.prom"
    with pytest.raises(LocalIOError) as e:
        write_textfile(target, snapshot_registry([]))
    assert str(e.value).startswith(f"cannot write the metrics textfile {tmp_path}/metrics/")
    assert str(e.value).endswith(": Not a directory")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("out/sender.txt", "{p} must end in .prom (node_exporter reads only *.prom)"),
        ("missing/sender.prom", "{d} (its folder) does not exist"),
    ],
)
def test_metrics_textfile_is_checked_when_the_config_loads(
    tmp_path: Path, value: str, message: str
) -> None:
    (tmp_path / "out").mkdir()
    doc = sender_doc()
    doc["sender"]["metrics_textfile"] = value
    path = make_sender(tmp_path, doc)
    with pytest.raises(ConfigError) as e:
        load_sender_config(path)
    target = tmp_path / value
    expected = message.format(p=target, d=target.parent)
    assert str(e.value) == f"{path}: [sender] metrics_textfile: {expected}"
    doc["sender"]["metrics_textfile"] = "out/sender.prom"
    write_config(path, doc)
    assert load_sender_config(path).metrics_textfile == tmp_path / "out/sender.prom"


# ---------------------------------------------------------------- wording failures


def test_data_dir_problem_names_the_folder_and_where_the_instance_is(tmp_path: Path) -> None:
    root = tmp_path / "iotdb"
    (root / "data/datanode/data/sequence").mkdir(parents=True)
    (root / "conf").mkdir()
    data = root / "data/datanode/data"
    assert data_dir_problem(data) is None
    assert data_dir_problem(tmp_path / "empty") is None  # missing: the scan reports it
    (tmp_path / "fresh/sync-sender").mkdir(parents=True)
    assert data_dir_problem(tmp_path / "fresh") is None  # a fresh instance, nothing yet
    assert data_dir_problem(root) == (
        f"{root} holds neither sequence/ nor unsequence/, so nothing in it would ship: "
        f"did you mean {data}?"
    )
    (tmp_path / "other/x").mkdir(parents=True)
    assert data_dir_problem(tmp_path / "other") == (
        f"{tmp_path / 'other'} holds neither sequence/ nor unsequence/, so nothing in it "
        "would ship: name the folder that holds them"
    )


def test_os_errors_are_worded_with_operation_and_path(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "sync.log"))
    assert describe_os_error(full, "write") == (
        f"cannot write {tmp_path}/sync.log: No space left on device"
    )
    link = OSError(errno.EACCES, "Permission denied", "/a", None, "/b")
    assert describe_os_error(link, "link") == "cannot link /a to /b: Permission denied"
    with pytest.raises(LocalIOError, match=r"^cannot write .*/nope/x: No such file"):
        with naming_os_errors("write"):
            (tmp_path / "nope/x").write_text("")
    with pytest.raises(ConnectionResetError):  # a socket's error names no file: left as is
        with naming_os_errors("write"):
            raise ConnectionResetError(errno.ECONNRESET, "reset")


def test_failure_kinds() -> None:
    assert failure_of(Unreachable("x")) == ("unreachable", "x")
    assert failure_of(HostKeyError("x"))[0] == "host_key"
    assert failure_of(Refused("x"))[0] == "refused"
    assert failure_of(ConnectionLost("x"))[0] == "connection_lost"
    assert failure_of(ProtocolError("receiver: cannot store"))[0] == "receiver"
    assert failure_of(ProtocolError("expected X, got Y"))[0] == "protocol"
    assert failure_of(LocalIOError("x"))[0] == "local"
    assert failure_of(SealsyncError("a\nb")) == ("error", "a b")
    assert failure_of(PermissionError(13, "Permission denied", "/x")) == (
        "local",
        "cannot access /x: Permission denied",
    )
    assert failure_of(ValueError("bug")) == ("internal", "internal error: ValueError: bug")


def _result(code: int, error: BaseException | None = None) -> AttemptResult:
    return AttemptResult(attempt(OK if code == 0 else FAILED, 1.0), None, code, error)


def test_exit_code_of_a_run() -> None:
    assert SendResult([_result(0), _result(0)]).exit_code == 0
    assert SendResult([_result(EXIT_LOCKED), _result(0)]).exit_code == EXIT_LOCKED
    assert SendResult([_result(EXIT_LOCKED), _result(1)]).exit_code == 1
    assert SendResult([_result(EXIT_USAGE), _result(EXIT_USAGE)]).exit_code == EXIT_USAGE
    stopped = SendResult([_result(1), _result(EXIT_TERMINATED, Terminated())])
    assert stopped.exit_code == EXIT_TERMINATED
    assert SendResult([_result(0)], metrics_error="cannot write").exit_code == 1
    assert LockHeld("x").exit_code == EXIT_LOCKED


@pytest.mark.slow
def test_a_receiver_that_hangs_up_before_the_banner_is_named(tmp_path: Path) -> None:
    """The allow list closes the socket at once: paramiko's bare "Error reading SSH
    protocol banner" becomes the likely causes; a silent port is told apart."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        server.accept()[0].close()
        transport = paramiko.Transport(client)
        with pytest.raises(paramiko.SSHException) as e:
            transport.start_client(timeout=5)
        transport.close()
    assert handshake_failure(f"127.0.0.1:{port}", e.value) == (
        f"the receiver at 127.0.0.1:{port} closed the connection before the SSH banner: "
        "this sender's address may not be in its allow list, or the port is not a sealsync "
        "receiver"
    )
    silent = paramiko.SSHException("Error reading SSH protocol banner")
    silent.__context__ = TimeoutError()
    assert "sent no SSH banner in time" in handshake_failure("h:1", silent)
    other = paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)")
    assert handshake_failure("h:1", other) == (
        "SSH handshake with receiver h:1 failed: Incompatible ssh peer "
        "(no acceptable kex algorithm)"
    )


def test_the_example_alerts_use_metrics_the_sender_writes(tmp_path: Path) -> None:
    config = load_sender_config(make_sender(tmp_path))
    written = {f.name for f in sender_families(config)}
    rules = (Path(__file__).resolve().parent.parent / "examples/alerts.yml").read_text()
    used = set(re.findall(r"\b(sealsync_sender_[a-z_]+)", rules))
    assert "sealsync_sender_last_success_timestamp_seconds" in used
    # prometheus_client names a counter family without its _total suffix
    assert used <= written | {f"{n}_total" for n in written}, used - written
    assert "> 3 * 300" in rules  # no success for 3 intervals of examples/crontab
