"""Terminal safety: device ids, file names and text from senders reach an operator's
terminal and logs with their control characters escaped (ESC as ``\\x1b``), in
``owners``, ``status``, the receiver's log and the refusals a sender prints.

The end-to-end test ships a real TsFile whose device id holds ``ESC[31m`` from a real
sender to a real receiver over loopback SSH, then reads every output an operator
would: none holds an escape byte, each shows the device id escaped."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, make_deployment, populate

from receiver.channel import clean_text
from sealsync.app.status import render
from sealsync.printable import printable

ESC = "\x1b"
DEVICE = "root.sg.\x1b[31mred"
SHOWN = "root.sg.\\x1b[31mred"


# --- the helper --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("root.sg1.d1", "root.sg1.d1"),
        ("héllo wörld 设备", "héllo wörld 设备"),  # letters of any script stay
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("tab\there\nnew\rline", "tab\\there\\nnew\\rline"),
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("c1\x9bcsi", "c1\\x9bcsi"),
        ("bidi\u202eevil\u2066", "bidi\\u202eevil\\u2066"),
        ("back\\slash", "back\\slash"),
    ],
)
def test_printable_escapes_control_characters_only(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_takes_any_object() -> None:
    assert printable(ValueError("bad \x1b[0m")) == "bad \\x1b[0m"


def test_status_lines_escape_what_came_from_elsewhere() -> None:
    doc = {
        "role": "loader",
        "table_path": "/t",
        "state_dir": "/s",
        "last_run": {
            "started": None,
            "ended": None,
            "outcome": "failed",
            "kind": "missing_folder",
            # a loader error names folders, which come from disk
            "error": f"the receiver data dir /d/evil{ESC}]0;title\x07 holds no loaded files",
            "ingested": 0,
            "removed": 0,
            "unchanged": 0,
            "rows_written": 0,
            "rows_removed": 0,
            "kept_missing": 0,
            "skipped": 0,
        },
        "last_success": None,
        "pending": {"new_files": 0, "missing_files": 0},
        "table": {"files": 0, "rows": 0},
    }
    lines = render(doc)
    assert all(ESC not in line and "\x07" not in line for line in lines)
    assert any("evil\\x1b]0;title\\x07" in line for line in lines)


def test_reasons_sent_to_a_sender_are_escaped() -> None:
    assert clean_text(f"device {DEVICE} is owned by sender x") == (
        f"device {SHOWN} is owned by sender x"
    )


# --- end to end --------------------------------------------------------------------------


def sealsync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site", senders=2)
    d.start_receiver()
    yield d
    d.stop_receiver()


@pytest.mark.slow
def test_a_device_id_with_an_escape_sequence_is_shown_escaped_everywhere(
    dep: Deployment,
) -> None:
    a, b = dep.senders
    populate(a.edge, groups=1, files=1)
    a.edge.write_file("root.sg", 0, devices=[DEVICE], rows_per_device=10)
    shipped = a.send()
    assert shipped.returncode == 0, shipped.stderr

    owners = sealsync("owners", "--config", str(dep.receiver_config))
    assert owners.returncode == 0
    assert ESC not in owners.stdout
    assert f"  {SHOWN}\n" in owners.stdout
    as_json = sealsync("owners", "--config", str(dep.receiver_config), "--json")
    assert DEVICE in json.loads(as_json.stdout)["owners"][a.uuid]  # JSON keeps the real id

    # another sender's file with the same device: refused as a conflict, and the
    # refusal, the receiver's log and the sender's status all show the id escaped
    b.edge.write_file("root.sg", 0, devices=[DEVICE], rows_per_device=10)
    refused = b.send()
    assert refused.returncode == 1
    assert ESC not in refused.stderr + refused.stdout
    assert f"device {SHOWN} is owned by sender '" in refused.stderr
    assert ESC not in dep.log()
    assert f"conflict: device {SHOWN} is owned by sender '" in dep.log()
    status = sealsync("status", "--config", str(b.config))
    assert status.returncode == 0
    assert ESC not in status.stdout
    assert SHOWN in status.stdout

    released = sealsync("owners", "--config", str(dep.receiver_config), "release", DEVICE)
    assert released.returncode == 0
    assert released.stdout == f"released {SHOWN}\n"


@pytest.mark.slow
def test_a_hostile_file_name_on_the_sender_is_shown_escaped_by_status(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    edge = dep.senders[0].edge
    hostile = edge.data_dirs[0] / "sequence" / "root.sg" / "0" / f"{ESC}[2J1-1-0.tsfile"
    hostile.parent.mkdir(parents=True, exist_ok=True)
    hostile.write_bytes(b"x")
    hostile.with_name(hostile.name + ".resource").write_bytes(b"r")
    status = sealsync("status", "--config", str(dep.senders[0].config))
    assert status.returncode == 0, status.stderr
    assert ESC not in status.stdout
    name = "sequence/root.sg/0/\\x1b[2J1-1-0.tsfile"
    assert f"      {name}: file name with a control character: " in status.stdout
