"""Text from elsewhere made safe for a terminal or a log line.

Device ids, file names, sender names and refusal reasons come from other machines
(or from files they wrote). Printed raw, an escape sequence in one of them can
recolour, move or hide what an operator reads, or forge a log line; so such text is
printed with its control characters written as escapes (ESC as ``\\x1b``, a newline
as ``\\n``). Ordinary text, letters of any script included, is left as it is, so
what an operator greps for or copies is what was sent; a backslash is left alone too.
"""

from __future__ import annotations

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
