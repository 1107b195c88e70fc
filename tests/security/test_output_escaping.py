"""What the command line prints about names from elsewhere (issue 35, item 6), as a
person at a terminal sees it.

``sealsync load`` printed file names with C1 controls and bidirectional overrides raw;
error lines printed the path they named raw. A name holding ESC (a terminal's
escape sequences: clear the screen, recolour, move the cursor), the C1 control CSI
(``\\x9b``, the same in one byte) or U+202E (right-to-left override: the rest of the
line reads backwards) can hide or forge what an operator reads. Each command here
runs as a real process on a pseudo-terminal, and what reaches the terminal must show
those characters escaped as the receiver's log writes them (``\\x1b``, ``\\x9b``,
``\\u202e``) and hold none of them raw.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from config_helpers import write_config
from deploy_helpers import SEALSYNC
from reliability.figures import record

pytestmark = pytest.mark.slow

HOSTILE = "ev\x1b[2Jil\x9b31m\u202etxt.gnp"
"""ESC + clear screen, CSI in one C1 byte + a colour, and a right-to-left override."""
SHOWN = "ev\\x1b[2Jil\\x9b31m\\u202etxt.gnp"
"""What the terminal must show instead."""
RAW = (b"\x1b[2J", "\x9b".encode(), "\u202e".encode())


def in_terminal(args: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """Run ``args`` with stdout and stderr on a pseudo-terminal; its exit code and
    every byte it printed there (decoded; the terminal's CRLF made LF)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True
        )
    finally:
        os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            out += chunk
        else:
            proc.kill()
            raise AssertionError(f"{args} did not end in {timeout:g} s: {out!r}")
        code = proc.wait(timeout=10)
    finally:
        os.close(master)
    for raw in RAW:
        assert raw not in out, f"raw {raw!r} reached the terminal: {out!r}"
    return code, out.decode("utf-8").replace("\r\n", "\n")


def test_error_lines_and_inspect_show_hostile_names_escaped(tmp_path: Path) -> None:
    """An error line naming a config file, and ``inspect`` naming a file it refuses."""
    folder = tmp_path / HOSTILE
    folder.mkdir()
    config = folder / "receiver.toml"
    config.write_text("[receiver\n")  # not TOML: the error line names the file
    code, shown = in_terminal([*SEALSYNC, "check", "--config", str(config)])
    assert code == 2, shown
    assert shown.startswith("sealsync: error: ") and SHOWN in shown, shown

    junk = tmp_path / f"{HOSTILE}.tsfile"
    junk.write_bytes(b"not a TsFile at all")
    inspected, listed = in_terminal([*SEALSYNC, "inspect", str(junk)])
    assert inspected == 1, listed
    assert f"{SHOWN}.tsfile" in listed, listed
    record("security", attack="hostile name in an error line and inspect", tried=2, held=True)


def test_load_shows_a_hostile_file_name_escaped(tmp_path: Path) -> None:
    """A file in a sender's folder on the receiver whose name holds the three, with a
    folder where its ``.mods`` would be: ``sealsync load`` skips it and says so on the
    terminal, naming it escaped."""
    data = tmp_path / "dc" / "data"
    folder = data / "sequence" / "root.sg0" / "0" / str(uuid.uuid4())
    folder.mkdir(parents=True)
    bad = folder / f"{HOSTILE}-1-0-0.tsfile"
    bad.write_bytes(b"not a TsFile at all")
    Path(f"{bad}.mods").mkdir()  # a .mods that is a folder: the file is skipped, by name
    loader = {
        "receiver_data_dirs": [str(data)],
        "table_path": str(tmp_path / "table"),
        "state_dir": str(tmp_path / "state"),
        "master": "local[1]",
    }
    config = write_config(tmp_path / "loader.toml", {"loader": loader})
    code, shown = in_terminal([*SEALSYNC, "load", "--config", str(config)], timeout=300)
    held = SHOWN in shown
    record("security", attack="hostile file name in load's output", tried=1, held=held)
    assert code == 1, shown
    assert "skipped" in shown and f"{SHOWN}-1-0-0.tsfile" in shown, shown
