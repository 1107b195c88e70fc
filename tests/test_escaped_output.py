"""The command line's output path (sealsync.printable.EscapedOutput): whatever a command
prints goes out with control, C1 and bidi characters escaped, its own line breaks kept,
and no way around it through click's binary stream."""

from __future__ import annotations

import io
import sys
from typing import TextIO, cast

import click
import pytest

from sealsync.app.output import TerminalProgress
from sealsync.printable import EscapedOutput, escaped_std_streams, printable, unescaped

HOSTILE = "a\x1b[2Jb\x9bc\u202ed\te\rf"
SHOWN = "a\\x1b[2Jb\\x9bc\\u202ed\\te\\rf"


def test_text_is_escaped_as_the_log_does_and_line_breaks_are_kept() -> None:
    raw = io.StringIO()
    out = EscapedOutput(raw)
    assert out.write(f"{HOSTILE}\nnext\n") == len(HOSTILE) + 6
    assert raw.getvalue() == f"{SHOWN}\nnext\n"
    assert printable(HOSTILE) == SHOWN  # the same table as every other escape
    with pytest.raises(TypeError):
        out.write(1234)  # type: ignore[arg-type]
    assert not hasattr(out, "buffer")  # click cannot write past the escaping
    assert out.isatty() is False and unescaped(cast(TextIO, out)) is raw


def test_click_echo_and_print_go_through_it_and_the_streams_come_back() -> None:
    # an OSC sequence (set the window title): click strips only CSI ones off a pipe
    hostile, shown = "a\x1b]0;pwned\x07b\x9bc\u202ed", "a\\x1b]0;pwned\\x07b\\x9bc\\u202ed"
    before = sys.stdout, sys.stderr
    raw_out, raw_err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = raw_out, raw_err
    try:
        with escaped_std_streams():
            click.echo(hostile)
            click.echo(hostile, err=True)
            print(hostile)
        restored = sys.stdout, sys.stderr
    finally:
        sys.stdout, sys.stderr = before
    assert restored == (raw_out, raw_err)
    assert raw_out.getvalue() == f"{shown}\n{shown}\n"
    assert raw_err.getvalue() == f"{shown}\n"


def test_a_progress_display_draws_its_own_carriage_returns() -> None:
    raw = io.StringIO()
    progress = TerminalProgress("dc\x1b", stream=cast(TextIO, EscapedOutput(raw)), enabled=True)
    progress("dir_start", bytes=100)
    progress("bytes", sent=50, total=100)
    progress("dir_end")
    drawn = raw.getvalue()
    assert drawn.startswith("\rdc\\x1b: ") and drawn.endswith("\r")
    assert "\\r" not in drawn


def test_bytes_click_writes_are_decoded_and_escaped() -> None:
    """click writes a shell completion's answer as bytes to a stream without a buffer."""
    raw = io.StringIO()
    stream = cast(TextIO, EscapedOutput(raw))

    click.echo(b"plain,send\nplain,\x1b[2Jx", file=stream)

    assert raw.getvalue() == "plain,send\nplain,\\x1b[2Jx\n"
