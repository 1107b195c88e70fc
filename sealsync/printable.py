"""Text from elsewhere made safe for a terminal or a log line.

Device ids, file names, sender names and refusal reasons come from other machines
(or from files they wrote). Printed raw, an escape sequence in one of them can
recolour, move or hide what an operator reads, or forge a log line; and a character
that draws nothing (a zero-width space, a tag character) makes one name print as
another. So such text is printed with those characters written as escapes (ESC as
``\\x1b``, a newline as ``\\n``, a zero-width space as ``\\u200b``). Ordinary text,
letters of any script included, is left as it is, so what an operator greps for or
copies is what was sent; a backslash is left alone too.

The command line prints through :func:`escaped_std_streams`: everything a command
writes to stdout and stderr (its lines, its log lines, click's errors, a traceback
under ``-v``) is escaped the same way on its way out, line breaks kept, so no message
can print a name raw by forgetting to call :func:`printable`. A progress display that
draws with ``\\r`` writes to :func:`unescaped` of its stream.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Bidirectional overrides and isolates reorder what a terminal shows ("Trojan
# Source"); the line and paragraph separators break a line in some viewers; format
# characters (Unicode category Cf: zero-width spaces and joiners, the word joiner, the
# byte order mark, the soft hyphen, tag characters) and the other default-ignorable
# code points draw nothing, so ``<uuid>\u200b`` would print as ``<uuid>``.
_ALWAYS = frozenset({0x2028, 0x2029})
_IGNORABLE = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # unassigned, default ignorable
    (0xE0000, 0xE0FFF),  # tags, variation selectors supplement, reserved
)
_MAX_CACHED = 1 << 16
"""Code points remembered per table; past that the table starts again, so that text
holding every code point cannot grow it without end."""


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _hidden(code: int) -> bool:
    """Whether a code point must be escaped: a control (C0, DEL, C1), a format character
    (category Cf), a surrogate (undecodable bytes, as ``surrogateescape`` gives them), a
    line or paragraph separator, or another default-ignorable code point."""
    if code < 0x20 or 0x7F <= code < 0xA0 or code in _ALWAYS:
        return True
    if code < 0xAD:
        return False
    if unicodedata.category(chr(code)) in ("Cf", "Cs", "Cc"):
        return True
    return any(low <= code <= high for low, high in _IGNORABLE)


class _Escapes(dict[int, str]):
    """A ``str.translate`` table deciding each code point on first sight (a table of
    every code point up front costs a third of a second at every command's start)."""

    def __init__(self, keep: str = "") -> None:
        super().__init__()
        self.keep = frozenset(ord(c) for c in keep)

    def __missing__(self, code: int) -> str:
        if len(self) >= _MAX_CACHED:
            self.clear()
        out = _escape(code) if code not in self.keep and _hidden(code) else chr(code)
        self[code] = out
        return out


_TABLE = _Escapes()


def printable(text: object) -> str:
    """``text`` (any object, as ``str()`` gives it) with control characters escaped."""
    return str(text).translate(_TABLE)


def single_line(text: str) -> str:
    """``text`` with its line breaks and runs of white space folded into single spaces,
    so that an error message from elsewhere stays one line of a log or a terminal."""
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


_KEEP_LINES = _Escapes(keep="\n")


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
