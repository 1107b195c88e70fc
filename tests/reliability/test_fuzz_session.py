"""Hostile frames against a live receiver session (issue 7, item 4a).

After a valid HELLO, hypothesis sends what no well-behaved sender would: random
bytes, frames of every kind with random payloads, control messages whose fields have
the right keys and wrong values, well-formed messages with hostile names (``..``,
absolute, backslashes, NUL, newlines, over-long), file streams with wrong sizes and
digests, and valid rounds with bytes flipped or cut short. Properties, per example:

* the session ends (the peer closing its end is enough) and answers only with
  well-formed frames; it never fails internally (no ``internal`` ERROR, no logged
  traceback);
* nothing is created outside the receiver's folders: every new path is under the
  schema dir, under this sender's own folder in ``sync-receiver/``, or a loaded file
  whose parent folder is this sender's UUID; the host's own file and another
  sender's loaded file are untouched.

After the run, well-behaved rounds from the fuzzed sender and from another one still
load their files. Bounded: ``MAX_EXAMPLES`` examples, a few seconds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from receiver_load_helpers import UUID_A, UUID_B
from receiver_service_helpers import md5
from reliability.figures import record
from reliability.session_env import FP_A, FP_B, PEER, SessionEnv, data_file, hello, offer

from sealsync.protocol import (
    HEADER,
    PROTOCOL_VERSION,
    Bye,
    Chunk,
    Delete,
    Error,
    FileBegin,
    FileEnd,
    FileVerdict,
    Hello,
    Kind,
    Message,
    OwnersQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    Schema,
    Welcome,
    decode_frames,
    encode,
    receive,
    send,
)

MAX_EXAMPLES = 100
CONTENT = data_file("root.fz.d1", "root.fz.d2", body=b"the same bytes for every name")
"""Every well-formed file carries these bytes, so no name ever meets a different
copy of itself in storage (that is an operator matter, not a fuzzing finding)."""

HOSTILE_NAMES = [
    "../x.tsfile",
    "/etc/passwd",
    "/tmp/x.tsfile",
    "sequence/../../x.tsfile",
    "sequence/sg/../../../outside.tsfile",
    "sequence\\..\\..\\x.tsfile",
    "sequence/sg/0/a\x00.tsfile",
    "sequence/sg/0/a\n.tsfile",
    "sequence/sg/0/a\r.tsfile",
    "sequence/./a.tsfile",
    "sequence//a.tsfile",
    "sequence/" + "d" * 300 + "/a.tsfile",
    "sequence/" + "/".join(["d" * 200] * 6) + "/a.tsfile",
    "sequence/sg/0/a.tsfile.resource",
    "sequence/sg/0/a.TSFILE",
    "sync-receiver/x.tsfile",
    "schema/x.tsfile",
    "sequence",
    "",
    "sequence/sg/0/\u202e.tsfile",
    "unsequence/sg/0/\udcff.tsfile",
]
VALID_NAMES = [
    "sequence/sg/0/a.tsfile",
    "sequence/sg/0/b.parquet",
    "unsequence/sg/1/c.tsfile",
    f"sequence/{UUID_B}/x.tsfile",
    "sequence/.incoming-x.tsfile",
    "sequence/sync-receiver/y.tsfile",
    f"sequence/sg/0/{UUID_A}/z.tsfile",
]
names = st.one_of(
    st.sampled_from(HOSTILE_NAMES + VALID_NAMES),
    st.text(max_size=30),
    st.builds(
        lambda a, b: f"{a}/{b}.tsfile",
        st.sampled_from(["sequence", "unsequence"]),
        st.text(max_size=20),
    ),
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=20),
        names,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
CONTROL_FIELDS = {
    Kind.HELLO: ["version", "uuid", "name"],
    Kind.WELCOME: ["version", "receiver"],
    Kind.SCHEMA_ACK: ["position"],
    Kind.ROUND_START: ["data_dir"],
    Kind.ROUND_READY: ["status", "message"],
    Kind.OWNERS_QUERY: ["devices"],
    Kind.OWNERS: ["owners"],
    Kind.DELETE: ["name"],
    Kind.DELETE_ACK: ["name"],
    Kind.FILE_BEGIN: ["file_id", "name", "size", "resource_size", "mods_size"],
    Kind.FILE_END: ["file_id", "md5"],
    Kind.VERDICT: ["file_id", "name", "status", "reason"],
    Kind.ROUND_END: [],
    Kind.ROUND_DONE: ["loaded"],
    Kind.ERROR: ["code", "message"],
    Kind.BYE: [],
    Kind.PARTIALS_QUERY: [],
    Kind.PARTIALS: ["partials"],
    Kind.HELD_QUERY: [],
    Kind.HELD: ["files", "digest"],
}


def frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def raw(msg: object) -> bytes:
    """A message framed without the sender-side validation (hostile fields go out as is).

    Control messages are JSON with ASCII escapes, so that lone surrogates survive.
    """
    if isinstance(msg, Message):
        body = {f.name: getattr(msg, f.name) for f in fields(msg)}  # type: ignore[arg-type]
        if isinstance(msg, FileBegin):  # optional keys, absent unless set (as on the wire)
            if body["mtime"] == -1:
                del body["mtime"]
            if body["offset"] == 0:
                del body["offset"]
            if body["mods2_size"] == -1:
                del body["mods2_size"]
        return frame(int(msg.kind), json.dumps(body).encode())
    return frame(int(msg.kind), bytes(msg.payload()))  # type: ignore[attr-defined]


@st.composite
def control_frames(draw: st.DrawFn) -> bytes:
    """A control kind with its own keys (mostly) and values of any JSON type."""
    kind = draw(st.sampled_from(sorted(CONTROL_FIELDS)))
    keys = CONTROL_FIELDS[kind]
    body = {k: draw(json_values) for k in keys}
    if draw(st.booleans()):
        body.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    return frame(kind, json.dumps(body).encode())


good_names = st.sampled_from(VALID_NAMES)


@st.composite
def file_streams(
    draw: st.DrawFn, name: st.SearchStrategy[str] | None = None, sound: bool = False
) -> bytes:
    """FILE_BEGIN, CHUNKs, FILE_END: sizes, names and digests right or (unless
    ``sound``) wrong."""
    file_id = draw(st.integers(0, 5))
    name_ = draw(name if name is not None else st.one_of(good_names, names))
    good = sound or draw(st.booleans())
    data = CONTENT if good else draw(st.binary(max_size=80))
    resource = b"res" if good else draw(st.sampled_from([b"res", b""]))
    mods = draw(st.sampled_from([None, b"", b"mods"]))  # .mods may change: it is replaced
    stream = data + resource + (mods or b"")
    size = len(data) + (0 if sound else draw(st.sampled_from([0, 0, 0, -1, 1, 1000])))
    begin = FileBegin(file_id, name_, size, len(resource), -1 if mods is None else len(mods))
    out = raw(begin)
    cut = draw(st.integers(1, max(len(stream), 1)))
    for i in range(0, len(stream), cut):
        out += frame(Kind.CHUNK, stream[i : i + cut])
    digest = (
        md5(stream)
        if sound or draw(st.booleans())
        else draw(st.one_of(st.sampled_from(["0" * 32, "zz", ""]), st.text(max_size=40)))
    )
    end_id = file_id if sound or draw(st.integers(0, 4)) else draw(st.integers(-1, 2**60))
    return out + raw(FileEnd(end_id, digest))


@st.composite
def sound_rounds(draw: st.DrawFn) -> bytes:
    """A round a well-behaved sender could send: deletes, files, ROUND_END."""
    out = raw(RoundStart(draw(st.integers(0, 3))))
    for name in draw(st.lists(good_names, max_size=2)):
        out += raw(Delete(name))
    for _ in range(draw(st.integers(0, 3))):
        out += draw(file_streams(name=good_names, sound=draw(st.booleans())))
    if draw(st.booleans()):
        out += raw(RoundEnd())
    return out


pieces = st.one_of(
    st.binary(max_size=40),
    st.builds(frame, st.integers(0, 255), st.binary(max_size=60)),
    st.builds(
        lambda k, n: HEADER.pack(k, n), st.sampled_from(list(Kind)), st.integers(0, 2**32 - 1)
    ),
    control_frames(),
    file_streams(),
    st.builds(lambda n: raw(Delete(n)), names),
    st.builds(lambda d: raw(RoundStart(d)), st.integers(-3, 3000)),
    st.builds(
        lambda devs: raw(OwnersQuery(devs)),
        st.lists(st.one_of(st.text(max_size=12), st.just("root.a\tb")), max_size=5),
    ),
    st.builds(lambda o, d: encode(Schema(o, d)), st.integers(0, 64), st.binary(max_size=40)),
    st.just(raw(RoundEnd())),
    st.just(raw(Bye())),
)


@st.composite
def sessions(draw: st.DrawFn) -> bytes:
    """What follows a valid HELLO: sound rounds, hostile pieces, or a mangled mix."""
    mode = draw(st.sampled_from(["sound", "sound then hostile", "hostile", "mangled"]))
    if mode == "sound":
        return b"".join(draw(st.lists(sound_rounds(), min_size=1, max_size=3)))
    out = draw(
        st.one_of(
            sound_rounds(), st.just(b""), st.builds(lambda d: raw(RoundStart(d)), st.integers(0, 3))
        )
    )
    out += b"".join(draw(st.lists(pieces, min_size=1, max_size=6)))
    if mode == "mangled" and out:  # flip bytes and cut the tail
        buf = bytearray(out)
        for at, xor in draw(
            st.lists(
                st.tuples(st.integers(0, len(buf) - 1), st.integers(1, 255)), min_size=1, max_size=4
            )
        ):
            buf[at] ^= xor
        out = bytes(buf[: draw(st.integers(0, len(buf)))])
    return out


def _sound_file(file_id: int, name: str, mods: bytes | None = None) -> bytes:
    stream = CONTENT + b"res" + (mods or b"")
    begin = FileBegin(file_id, name, len(CONTENT), 3, -1 if mods is None else len(mods))
    return raw(begin) + frame(Kind.CHUNK, stream) + raw(FileEnd(file_id, md5(stream)))


SOUND_ROUND = (
    raw(RoundStart(0))
    + raw(Delete("sequence/sg/0/gone.tsfile"))
    + _sound_file(0, VALID_NAMES[0])
    + _sound_file(1, VALID_NAMES[2], b"mods")
    + raw(RoundEnd())
)
"""Always among the examples, so every run also goes all the way through a round."""


# --- the receiver under fuzzing ----------------------------------------------------------


class Tracebacks(logging.Handler):
    """Log records that carry a traceback or say something failed internally."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


def tree(top: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``top`` (relative) -> (size, mtime_ns); folders too."""
    out = {}
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(here) / name
            st_ = path.lstat()
            out[path.relative_to(top).as_posix()] = (st_.st_size, st_.st_mtime_ns)
    return out


def allowed(rel: str, is_dir: bool) -> bool:
    """May a session of sender A from PEER have created ``rel`` (relative to the root)?"""
    parts = rel.split("/")
    if parts[0] == "schema":
        return True
    if parts[0] != "data0" or len(parts) < 2:
        return False
    inner = parts[1:]
    if inner[0] == "sync-receiver":
        # its own round folder, and the log of its own deletions (sealsync.deletions)
        return len(inner) == 1 or inner[1] in (f"{PEER}_{UUID_A}", f"deleted_{UUID_A}.log")
    if inner[0] in ("sequence", "unsequence"):
        return is_dir or (len(inner) >= 3 and inner[-2] == UUID_A)
    return False


@pytest.fixture
def env(tmp_path: Path) -> Iterator[SessionEnv]:
    e = SessionEnv(tmp_path / "root", load_wait=1.0, timeout=5.0)
    yield e
    e.close()


def feed(env: SessionEnv, blob: bytes) -> list[object]:
    """One session of sender A: HELLO, ``blob``, close; every frame the receiver sent back."""
    sock, thread = env.connect(FP_A)
    try:
        send(sock, Hello(PROTOCOL_VERSION, UUID_A, "fuzz"))
        assert isinstance(receive(sock), Welcome)
        try:
            sock.sendall(blob)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the receiver ended the session already (an ERROR waits below)
        answer = b""
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            answer += part
    finally:
        sock.close()
    thread.join(15)
    assert not thread.is_alive(), "the session did not end"
    frames, rest = decode_frames(answer)
    assert rest == b""
    return frames


def well_behaved_round(env: SessionEnv, fingerprint: str, uuid: str, name: str) -> None:
    sock, thread = env.connect(fingerprint)
    try:
        hello(sock, uuid)
        send(sock, RoundStart(0))
        assert receive(sock) == RoundReady("ready", "")
        body = data_file(f"root.{uuid[:4]}.d1", body=name.encode())
        offer(sock, 7, name, body)
        assert receive(sock) == FileVerdict(7, name, "verified", "")
        send(sock, RoundEnd())
        assert receive(sock) == RoundDone(True)
        send(sock, Bye())
        assert sock.recv(1) == b""
    finally:
        sock.close()
    thread.join(10)
    assert env.loaded_path(uuid, name).read_bytes() == body
    folder = env.folder(uuid)
    assert [p for p in (folder.sync_log, folder.load_log, folder.sync_end) if p.exists()] == []


def test_hostile_frames_never_crash_the_receiver_or_escape_its_folders(env: SessionEnv) -> None:
    root = env.root
    outside = root.parent / "outside"
    outside.mkdir()
    host_file = env.data_dirs[0] / "sequence" / "sg" / "0" / "host.tsfile"
    host_file.parent.mkdir(parents=True)
    host_file.write_bytes(b"the host's own file")
    well_behaved_round(env, FP_B, UUID_B, "sequence/sg/0/b-own.tsfile")
    protected = {  # the host's file and sender B's loaded file with its sidecar
        rel: v
        for rel, v in tree(root).items()
        if rel.startswith(("data0/sequence", "data0/unsequence")) and (root / rel).is_file()
    }
    assert len(protected) == 3
    watcher = Tracebacks()
    logging.getLogger("sealsync").addHandler(watcher)
    examples = [0]
    seen: Counter[str] = Counter()

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(blob=sessions())
    @example(blob=SOUND_ROUND)
    @example(blob=SOUND_ROUND + raw(Delete("../escape.tsfile")) + SOUND_ROUND)
    @example(blob=raw(RoundStart(1)) + _sound_file(0, "sequence/sg/0/\udcff.tsfile"))
    @example(blob=raw(OwnersQuery(["root.\udcff"])))
    def one(blob: bytes) -> None:
        examples[0] += 1
        before = tree(root)
        frames = feed(env, blob)
        seen.update(
            f"verdict {f.status}" if isinstance(f, FileVerdict) else type(f).__name__
            for f in frames
        )
        assert [f for f in frames if isinstance(f, Error) and f.code == "internal"] == []
        assert watcher.records == [], [r.getMessage() for r in watcher.records]
        after = tree(root)
        new = sorted(set(after) - set(before))
        escaped = [rel for rel in new if not allowed(rel, (root / rel).is_dir())]
        assert escaped == []
        assert list(outside.iterdir()) == []
        for rel, stamp in protected.items():
            assert after.get(rel) == stamp, f"{rel} changed"

    try:
        one()
    finally:
        logging.getLogger("sealsync").removeHandler(watcher)
    assert examples[0] >= MAX_EXAMPLES // 2
    # the run went deep, not only into the first frame's validation
    assert seen["verdict verified"] >= 1 and seen["Error"] >= 1 and seen["RoundDone"] >= 1, seen
    assert host_file.read_bytes() == b"the host's own file"

    # the receiver still serves well-behaved rounds, the fuzzed sender's included
    well_behaved_round(env, FP_A, UUID_A, "sequence/sg/0/after-fuzz.tsfile")
    well_behaved_round(env, FP_B, UUID_B, "sequence/sg/0/b-after.tsfile")
    record("fuzz", cases=examples[0])


def test_frames_that_claim_huge_lengths_are_refused_before_reading(env: SessionEnv) -> None:
    """A header announcing 4 GiB of CHUNK is an ERROR at once, not a 4 GiB buffer."""
    frames = feed(env, raw(RoundStart(0)) + struct.pack("!BI", Kind.CHUNK, 2**32 - 1))
    assert [type(f).__name__ for f in frames] == ["RoundReady", "Error"]
    error = frames[1]
    assert isinstance(error, Error) and error.code == "protocol"
    assert "over the limit" in error.message
    record("fuzz", cases=1)


def test_chunk_outside_a_file_stream_ends_only_that_session(env: SessionEnv) -> None:
    frames = feed(env, raw(RoundStart(0)) + encode(Chunk(b"stray bytes")))
    assert frames == [
        RoundReady("ready", ""),
        Error("unexpected", "CHUNK not expected inside a round"),
    ]
    well_behaved_round(env, FP_A, UUID_A, "sequence/sg/0/next.tsfile")
    record("fuzz", cases=1)


def test_text_that_is_not_utf8_is_refused_at_the_frame_not_inside(env: SessionEnv) -> None:
    """Regression (found by the fuzzer): JSON's ``\\udcff`` escape gives a lone surrogate,
    which passed the name check; the receiver staged a file under an undecodable name
    and then failed internally writing ``sync.log`` (an OWNERS answer likewise)."""
    name = "sequence/sg/0/\udcff.tsfile"
    before = tree(env.root)
    for blob, what in [
        (raw(RoundStart(0)) + _sound_file(0, name), "FILE_BEGIN.name"),
        (raw(RoundStart(0)) + raw(Delete(name)), "DELETE.name"),
    ]:
        frames = feed(env, blob)
        assert frames == [
            RoundReady("ready", ""),
            Error(
                "bad-name",
                f"{what}: file name that is not valid UTF-8: sequence/sg/0/\\udcff.tsfile",
            ),
        ]
    assert feed(env, raw(OwnersQuery(["root.\udcff"]))) == [
        Error("protocol", "OWNERS_QUERY.devices[]: not valid UTF-8")
    ]
    new = set(tree(env.root)) - set(before)
    assert not [rel for rel in new if "tsfile" in rel]  # nothing staged under that name
    well_behaved_round(env, FP_A, UUID_A, "sequence/sg/0/next.tsfile")
    record("fuzz", cases=3)
