"""Text from elsewhere made safe for a terminal or a log line.

Device ids, file names, sender names and refusal reasons come from other machines
(or from files they wrote). Printed raw, an escape sequence in one of them can
recolour, move or hide what an operator reads, or forge a log line; so such text is
printed with its control characters written as escapes (ESC as ``\\x1b``, a newline
as ``\\n``). Ordinary text, letters of any script included, is left as it is, so
what an operator greps for or copies is what was sent; a backslash is left alone too.

The command line prints through :func:`escaped_std_streams`: everything a command
writes to stdout and stderr (its lines, its log lines, click's errors, a traceback
under ``-v``) is escaped the same way on its way out, line breaks kept, so no message
can print a name raw by forgetting to call :func:`printable`. A progress display that
draws with ``\\r`` writes to :func:`unescaped` of its stream.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Bidirectional overrides and isolates reorder what a terminal shows ("Trojan
# Source"); the line and paragraph separators break a line in some viewers.
_INVISIBLE = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {
    code: _escape(code)
    for code in [*range(0x20), *range(0x7F, 0xA0), *(ord(c) for c in _INVISIBLE)]
}


def printable(text: object) -> str:
    """``text`` (any object, as ``str()`` gives it) with control characters escaped."""
    return str(text).translate(_TABLE)


def single_line(text: str) -> str:
    """``text`` with its line breaks and runs of white space folded into single spaces,
    so that an error message from elsewhere stays one line of a log or a terminal."""
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


_KEEP_LINES = {code: text for code, text in _TABLE.items() if code != ord("\n")}


class EscapedOutput:
    """A text stream that writes through to ``raw`` with control, C1 and bidi
    characters escaped as :func:`printable` does, newlines kept.

    It has no ``buffer``: click would otherwise write to the binary stream under it
    and past the escaping. Everything else (``isatty``, ``fileno``, ``encoding``) is
    ``raw``'s own.
    """

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str | bytes) -> int:
        if isinstance(text, bytes | bytearray):
            # click writes bytes (a shell completion's answer) to a stream without a
            # buffer: decoded here, so they are escaped like any text
            decoded = bytes(text).decode(getattr(self.raw, "encoding", None) or "utf-8", "replace")
            self.raw.write(decoded.translate(_KEEP_LINES))
            return len(text)
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.raw.write(text.translate(_KEEP_LINES))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name: str) -> Any:
        if name in ("buffer", "raw"):  # raw: not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.raw, name)


def unescaped(stream: TextIO) -> TextIO:
    """The stream under an :class:`EscapedOutput` (a progress display's own ``\\r``)."""
    return stream.raw if isinstance(stream, EscapedOutput) else stream


@contextmanager
def escaped_std_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escaped (:class:`EscapedOutput`) for the body."""
    saved = sys.stdout, sys.stderr
    if sys.stdout is not None and not isinstance(sys.stdout, EscapedOutput):
        sys.stdout = cast(TextIO, EscapedOutput(sys.stdout))
    if sys.stderr is not None and not isinstance(sys.stderr, EscapedOutput):
        sys.stderr = cast(TextIO, EscapedOutput(sys.stderr))
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = saved
