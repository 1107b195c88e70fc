"""The ERROR codes the receiver sends are exactly the documented ones (issue 16)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sealsync.protocol import ERROR_CODES, ErrorCode, Kind, ProtocolError, decode

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    *sorted((ROOT / "receiver").rglob("*.py")),
    *sorted((ROOT / "sealsync" / "protocol").rglob("*.py")),
]


def _documented() -> set[str]:
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text.split("### Error codes", 1)[1]
    return set(re.findall(r"^\| `([a-z-]+)` \|", section, re.MULTILINE))


def test_every_code_the_receiver_names_is_in_the_enum() -> None:
    literal = re.compile(r"""(?:code=|send_error\(|(?<![A-Za-z])Error\()\s*["']([^"']+)["']""")
    member = re.compile(r"ErrorCode\.([A-Z_]+)")
    literals, members = set(), set()
    for path in SOURCES:
        text = path.read_text()
        literals |= set(literal.findall(text))
        members |= set(member.findall(text))
    assert literals == set(), f"codes written as bare strings: {sorted(literals)}"
    assert members, "the receiver names no ErrorCode at all: the scan is broken"
    assert members <= set(ErrorCode.__members__)


def test_the_doc_table_lists_every_code_and_no_other() -> None:
    assert _documented() == {str(c) for c in ERROR_CODES}


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in the JSON decoder
        json.dumps({"version": 1, "uuid": {"a": [1] * 3}, "name": "x"}).encode(),
        b'{"version": 1e999, "uuid": "u", "name": "n"}',
        b"\xff\xfe",
    ],
)
def test_any_undecodable_hello_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError) as err:
        decode(Kind.HELLO, payload)
    assert err.value.code == ErrorCode.PROTOCOL
