"""The wire protocol: round trips, validation of every field, and fuzzing of the decoder."""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealsync import protocol as p

UUID = "12345678-1234-4234-8234-123456789abc"
NAME = "sequence/root.sg1/0/1-1-0.tsfile"

SAMPLES: list[p.AnyMessage] = [
    p.Hello(p.PROTOCOL_VERSION, UUID, "edge-1"),
    p.Welcome(p.PROTOCOL_VERSION, "dc1"),
    p.Schema(7, b"CREATE TIMESERIES root.sg1.d1.s1\n"),
    p.SchemaAck(40),
    p.RoundStart(1),
    p.RoundReady("busy", "previous round still loading"),
    p.OwnersQuery(["root.sg1.d1", "root.sg1.d2"]),
    p.Owners({"root.sg1.d1": UUID, "root.sg1.d2": ""}),
    p.Delete(NAME),
    p.DeleteAck(NAME),
    p.FileBegin(3, NAME, 1000, 20, -1),
    p.Chunk(b"\x00\x01" * 5000),
    p.FileEnd(3, "0123456789abcdef0123456789abcdef"),
    p.FileVerdict(3, NAME, p.Verdict.CONFLICT, "root.sg1.d1 is owned by " + UUID),
    p.RoundEnd(),
    p.RoundDone(True),
    p.Error("busy", "too many sessions"),
    p.Bye(),
    p.InventoryQuery(NAME),
    p.Inventory([[NAME, 1000, "0123456789abcdef0123456789abcdef"]], True),
    p.PartialsQuery(),
    p.Partials(
        [[NAME, 5 << 20, 1_700_000_000_000_000_000, "0123456789abcdef0123456789abcdef", 4096]]
    ),
    p.HeldQuery(),
    p.Held(1, p.held_digest([NAME])),
    p.Lease("", "edge-1:/var/lib/iotdb/schema", False),
    p.Lease(f"7-{'a' * 16}-{'b' * 32}", "edge-1", True),
    p.LeaseGrant(f"8-{'c' * 16}-{'d' * 32}"),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.kind.name)
def test_every_message_round_trips(msg: p.AnyMessage) -> None:
    frames, rest = p.decode_frames(p.encode(msg))
    assert rest == b""
    assert len(frames) == 1
    got = frames[0]
    assert type(got) is type(msg)
    assert bytes(got.payload()) == bytes(msg.payload())


def test_every_kind_has_a_sample() -> None:
    assert {m.kind for m in SAMPLES} == set(p.Kind)


def test_stream_send_and_receive_over_a_socket() -> None:
    a, b = socket.socketpair()
    big = bytes(range(256)) * 4096  # 1 MiB: exactly the chunk limit
    received: list[p.AnyMessage] = []

    def reader() -> None:
        for _ in range(len(SAMPLES) + 1):
            received.append(p.receive(b))

    t = threading.Thread(target=reader)
    t.start()
    for msg in SAMPLES:
        p.send(a, msg)
    p.send(a, p.Chunk(memoryview(big)))
    t.join(10)
    assert [m.kind for m in received] == [m.kind for m in SAMPLES] + [p.Kind.CHUNK]
    assert received[-1].data == big
    a.close()
    with pytest.raises(p.ConnectionClosed):
        p.receive(b)
    b.close()


def control(kind: p.Kind, body: object) -> bytes:
    payload = json.dumps(body).encode()
    return p.HEADER.pack(kind, len(payload)) + payload


BAD_NAMES = [
    "/etc/passwd",
    "sequence/../../etc/passwd.tsfile",
    "sequence/g/0/a\x00.tsfile",
    "sequence/g/0/a\n.tsfile",
    "other/g/0/a.tsfile",
    "sequence/g/0/a.txt",
    "sequence//a.tsfile",
    "sequence/./a.tsfile",
    "sequence/" + "x" * 300 + ".tsfile",
    "sequence/" + "d/" * 600 + "a.tsfile",
    "",
]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("kind", [p.Kind.DELETE, p.Kind.DELETE_ACK])
def test_hostile_names_are_refused(kind: p.Kind, name: str) -> None:
    with pytest.raises(p.ProtocolError) as err:
        p.decode_frames(control(kind, {"name": name}))
    assert err.value.code in ("bad-name", "protocol")


@pytest.mark.parametrize(
    "kind,body",
    [
        (p.Kind.HELLO, {"version": True, "uuid": UUID, "name": "x"}),
        (p.Kind.HELLO, {"version": 1, "uuid": UUID.upper(), "name": "x"}),
        (p.Kind.HELLO, {"version": 1, "uuid": UUID, "name": "x", "extra": 1}),
        (p.Kind.HELLO, {"version": 1, "uuid": UUID}),
        (p.Kind.HELLO, {"version": 1, "uuid": UUID, "name": "a\nb"}),
        (p.Kind.HELLO, [1, 2, 3]),
        (
            p.Kind.FILE_BEGIN,
            {"file_id": 1, "name": NAME, "size": -1, "resource_size": 0, "mods_size": -1},
        ),
        (
            p.Kind.FILE_BEGIN,
            {"file_id": 1, "name": NAME, "size": 1 << 41, "resource_size": 0, "mods_size": -1},
        ),
        (
            p.Kind.FILE_BEGIN,
            {"file_id": 1, "name": NAME, "size": 1.5, "resource_size": 0, "mods_size": -1},
        ),
        (p.Kind.FILE_END, {"file_id": 1, "md5": "XYZ"}),
        (p.Kind.VERDICT, {"file_id": 1, "name": NAME, "status": "maybe", "reason": ""}),
        (p.Kind.ROUND_START, {"data_dir": 5000}),
        (p.Kind.OWNERS_QUERY, {"devices": ["ok", "bad\x00"]}),
        (p.Kind.OWNERS_QUERY, {"devices": ["d"] * (p.MAX_DEVICES_PER_QUERY + 1)}),
        (p.Kind.OWNERS, {"owners": {"d": "not-a-uuid"}}),
        (p.Kind.ROUND_DONE, {"loaded": 1}),
    ],
)
def test_out_of_bounds_fields_are_refused(kind: p.Kind, body: object) -> None:
    with pytest.raises(p.ProtocolError):
        p.decode_frames(control(kind, body))


def test_oversized_and_unknown_headers_are_refused_before_reading_the_payload() -> None:
    with pytest.raises(p.ProtocolError, match="over the limit"):
        p.decode_header(p.HEADER.pack(p.Kind.CHUNK, p.MAX_CHUNK_PAYLOAD + 1))
    with pytest.raises(p.ProtocolError, match="over the limit"):
        p.decode_header(p.HEADER.pack(p.Kind.HELLO, 0xFFFFFFFF))
    with pytest.raises(p.ProtocolError, match="unknown frame kind"):
        p.decode_header(p.HEADER.pack(200, 0))


def test_encoding_refuses_to_build_an_oversized_frame() -> None:
    with pytest.raises(p.ProtocolError):
        p.encode(p.Chunk(b"x" * (p.MAX_CHUNK_PAYLOAD + 1)))


def test_schema_frame_shorter_than_its_offset_is_refused() -> None:
    with pytest.raises(p.ProtocolError):
        p.decode(p.Kind.SCHEMA, b"\x00\x01")


def test_expect_turns_a_peer_error_into_its_code() -> None:
    with pytest.raises(p.ProtocolError) as err:
        p.expect(p.Error("auth", "uuid bound to another key"), p.Welcome)
    assert err.value.code == "auth"
    with pytest.raises(p.ProtocolError) as err:
        p.expect(p.Bye(), p.Welcome)
    assert err.value.code == "unexpected"
    assert p.expect(SAMPLES[1], p.Welcome) is SAMPLES[1]


# --- fuzzing: the decoder either returns validated messages or raises ProtocolError ------


def _assert_decodes_or_refuses(data: bytes) -> None:
    try:
        frames, rest = p.decode_frames(data)
    except p.ProtocolError:
        return
    assert len(rest) < len(data) + 1
    for msg in frames:
        assert msg.kind in set(p.Kind)
        if isinstance(msg, p.Delete | p.DeleteAck | p.FileBegin | p.FileVerdict):
            assert not msg.name.startswith("/") and ".." not in msg.name.split("/")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_random_bytes(data: bytes) -> None:
    _assert_decodes_or_refuses(data)


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(p.encode(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip" and frame:
            i = draw(st.integers(0, len(frame) - 1))
            frame[i] ^= draw(st.integers(1, 255))
        elif op == "cut" and frame:
            del frame[draw(st.integers(0, len(frame) - 1)) :]
        else:
            i = draw(st.integers(0, len(frame)))
            frame[i:i] = draw(st.binary(min_size=1, max_size=8))
    return bytes(frame)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_frames())
def test_fuzz_mutated_frames(data: bytes) -> None:
    _assert_decodes_or_refuses(data)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(
            st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.lists(st.integers())
        ),
        max_size=6,
    ),
    st.sampled_from([k for k in p.Kind if k not in (p.Kind.CHUNK, p.Kind.SCHEMA)]),
)
def test_fuzz_json_bodies(body: dict, kind: p.Kind) -> None:
    _assert_decodes_or_refuses(control(kind, body))


def test_header_layout_is_kind_then_big_endian_length() -> None:
    raw = p.encode(p.RoundEnd())
    assert raw[:5] == struct.pack("!BI", p.Kind.ROUND_END, 2)
    assert raw[5:] == b"{}"


def test_preferred_ciphers_put_ours_first_and_add_none() -> None:
    from sealsync.protocol import SSH_PREFERRED_CIPHERS, preferred_ciphers

    offered = ("chacha20-poly1305@openssh.com", "aes256-ctr", "aes128-gcm@openssh.com", "x")
    assert preferred_ciphers(offered) == (
        "aes128-gcm@openssh.com",
        "aes256-ctr",
        "chacha20-poly1305@openssh.com",
        "x",
    )
    assert preferred_ciphers(()) == ()
    assert preferred_ciphers(SSH_PREFERRED_CIPHERS[::-1]) == SSH_PREFERRED_CIPHERS


@pytest.mark.parametrize(
    "files",
    [
        [["sequence/a.tsfile", 1, ""], ["sequence/a.tsfile", 1, ""]],  # not increasing
        [["sequence/b.tsfile", 1, ""], ["sequence/a.tsfile", 1, ""]],  # out of order
        [["../x.tsfile", 1, ""]],  # not a data-file name
        [["sequence/a.tsfile", -1, ""]],  # negative size
        [["sequence/a.tsfile", 1, "XYZ"]],  # not an MD5
        [["sequence/a.tsfile", 1]],  # not [name, size, md5]
        [["sequence/a.tsfile", 1, ""]] * (p.MAX_INVENTORY_PAGE + 1),  # over a page
    ],
)
def test_an_inventory_page_is_validated(files: list[list[object]]) -> None:
    payload = json.dumps({"files": files, "more": False}).encode()
    with pytest.raises(p.ProtocolError):
        p.decode(p.Kind.INVENTORY, payload)
