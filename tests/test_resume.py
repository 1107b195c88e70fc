"""Resume inside a file (issue 15 item 1): the frames, the receiver's partial store,
and a receiver session resuming a cut stream, driven over a socket pair (no SSH).

The end-to-end cases over real SSH with a cutting proxy are in
reliability/test_resume_e2e.py (slow)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path

import pytest
from receiver_load_helpers import UUID_A
from reliability.session_env import data_file, hello
from test_receiver_session import Env, start_round, verdict, wait_for

from receiver.inventory import recorded_md5
from receiver.layout import SenderFolder
from receiver.partials import PartialStore, key_of, migrate_partials, sweep_all, unclaim
from receiver.recover.replay import recover_all
from sealsync.protocol import (
    PARTIAL_HEAD,
    RESUME_MIN,
    Chunk,
    FileBegin,
    FileEnd,
    Kind,
    Partials,
    PartialsQuery,
    ProtocolError,
    decode_frames,
    encode,
    receive,
    send,
)

NAME = "sequence/sg/0/big.tsfile"
MTIME = 1_700_000_000_123_456_789
NOT_HELD = "the partial upload to resume is no longer held; send the whole file"


def big(seed: bytes = b"a", size: int = RESUME_MIN + 300_000) -> bytes:
    head = data_file("d")
    block = hashlib.sha256(seed).digest() * 2048  # 64 KiB of seed-specific bytes
    body = (block * (size // len(block) + 1))[: size - len(head)]
    return head + body


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# --- frames -----------------------------------------------------------------------


def test_small_file_begin_is_unchanged_on_the_wire() -> None:
    frame = encode(FileBegin(1, NAME, 10, 3, -1))
    assert b"mtime" not in frame and b"offset" not in frame
    assert decode_frames(frame)[0] == [FileBegin(1, NAME, 10, 3, -1)]


def test_file_begin_carries_mtime_and_offset() -> None:
    msg = FileBegin(1, NAME, RESUME_MIN, 3, 4, MTIME, 5000)
    assert decode_frames(encode(msg))[0] == [msg]
    assert msg.resumable and not FileBegin(1, NAME, RESUME_MIN - 1, 3, 4, MTIME).resumable


@pytest.mark.parametrize(
    "extra",
    [
        {"offset": 5},  # an offset without its mtime
        {"mtime": MTIME, "offset": 11},  # past the data file
        {"mtime": MTIME, "offset": 0},  # 0 is never sent
        {"mtime": -5},
        {"mtime": "1"},
        {"mtime": MTIME, "other": 1},
    ],
)
def test_bad_file_begin_resume_keys_are_refused(extra: dict[str, object]) -> None:
    body = {"file_id": 1, "name": NAME, "size": 10, "resource_size": 3, "mods_size": -1}
    body.update(extra)
    payload = json.dumps(body).encode()
    with pytest.raises(ProtocolError):
        decode_frames(bytes([Kind.FILE_BEGIN]) + len(payload).to_bytes(4, "big") + payload)


def test_partials_frames_round_trip_and_validate() -> None:
    assert decode_frames(encode(PartialsQuery()))[0] == [PartialsQuery()]
    good = Partials([[NAME, 100, MTIME, "0" * 32, 50]])
    assert decode_frames(encode(good))[0] == [good]
    for bad in (
        [[NAME, 100, MTIME, "0" * 32, 101]],  # holds more than the file
        [[NAME, 100, MTIME, "0" * 32, 0]],
        [[NAME, 100, MTIME, "X" * 32, 50]],
        [["../x.tsfile", 100, MTIME, "0" * 32, 50]],
        [[NAME, 100, MTIME, "0" * 32, 50], [NAME, 100, MTIME, "0" * 32, 50]],
        [[NAME, 100, MTIME, "0" * 32]],
    ):
        with pytest.raises(ProtocolError):
            decode_frames(encode(Partials(bad)))


# --- the store --------------------------------------------------------------------


def test_store_keeps_lists_and_forgets(tmp_path: Path) -> None:
    store = PartialStore(tmp_path)
    data = big()
    src = tmp_path / "tmp.data"
    src.write_bytes(data[: PARTIAL_HEAD + 1000])
    kept = store.keep(NAME, len(data), MTIME, src, PARTIAL_HEAD + 1000)
    assert kept is not None and not src.exists()
    assert kept.data.suffix == ".tsfile"  # the format is chosen by name when inspected
    assert kept.head == md5(data[:PARTIAL_HEAD])
    assert [p.entry() for p in store.list()] == [
        [NAME, len(data), MTIME, md5(data[:PARTIAL_HEAD]), PARTIAL_HEAD + 1000]
    ]
    assert store.total() == PARTIAL_HEAD + 1000 and store.total(exclude=NAME) == 0
    store.forget(NAME)
    assert store.list() == [] and os.listdir(store.dir) == []


def test_store_keeps_nothing_small(tmp_path: Path) -> None:
    store = PartialStore(tmp_path)
    src = tmp_path / "tmp.data"
    src.write_bytes(b"x" * 1000)
    assert store.keep(NAME, RESUME_MIN - 1, MTIME, src, 1000) is None  # a small file
    assert store.keep(NAME, RESUME_MIN, MTIME, src, 1000) is None  # less than its head


def test_sweep_removes_expired_torn_and_orphaned(tmp_path: Path) -> None:
    store = PartialStore(tmp_path, max_age=3600)
    data = big()
    for i, name in enumerate(["sequence/sg/0/a.tsfile", "sequence/sg/0/b.tsfile"]):
        src = tmp_path / f"{i}.data"
        src.write_bytes(data[: PARTIAL_HEAD * 2])
        store.keep(name, len(data), MTIME, src, PARTIAL_HEAD * 2)
    (store.dir / "orphan.data").write_bytes(b"x")
    a_data, _ = store.paths("sequence/sg/0/a.tsfile")
    with open(a_data, "r+b") as f:
        f.truncate(100)  # torn: shorter than its sidecar says
    assert [p.name for p in store.list()] == ["sequence/sg/0/b.tsfile"]
    assert store.sweep() == 3  # a's sidecar and data, the orphan
    assert [p.name for p in store.list()] == ["sequence/sg/0/b.tsfile"]
    assert store.sweep(now=time.time() + 3601) == 2  # b expired
    assert os.listdir(store.dir) == []


# --- a session --------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.close()


def cut_after(sock: socket.socket, file_id: int, data: bytes, upto: int, offset: int = 0) -> None:
    """A stream of ``data`` (resource b"res") from ``offset``, cut after byte ``upto``."""
    send(sock, FileBegin(file_id, NAME, len(data), 3, -1, MTIME, offset))
    for i in range(offset, upto, 100_000):
        send(sock, Chunk(data[i : min(i + 100_000, upto)]))
    sock.close()


def offer_from(sock: socket.socket, file_id: int, data: bytes, offset: int, mtime: int = MTIME):
    stream = data + b"res"
    send(sock, FileBegin(file_id, NAME, len(data), 3, -1, mtime, offset))
    for i in range(offset, len(stream), 100_000):
        send(sock, Chunk(stream[i : i + 100_000]))
    send(sock, FileEnd(file_id, md5(stream)))


def partials(sock: socket.socket) -> list[list[object]]:
    send(sock, PartialsQuery())
    msg = receive(sock)
    assert isinstance(msg, Partials), msg
    return msg.partials


def session(env: Env) -> socket.socket:
    sock = env.connect()
    hello(sock)
    start_round(sock)
    return sock


def test_cut_stream_is_kept_and_resumed_to_the_exact_bytes(env: Env) -> None:
    data = big()
    cut = len(data) * 8 // 10
    cut_after(session(env), 0, data, cut)
    env.threads[-1].join(10)
    sock = session(env)
    assert partials(sock) == [[NAME, len(data), MTIME, md5(data[:PARTIAL_HEAD]), cut]]
    offer_from(sock, 1, data, cut)
    assert verdict(sock)[2] == "verified"
    wait_for(lambda: env.loaded_path(UUID_A, NAME).exists())
    assert env.loaded_path(UUID_A, NAME).read_bytes() == data
    recorded = recorded_md5(env.loaded_path(UUID_A, NAME))  # tmp file systems take xattrs
    assert recorded == md5(data)  # the data file's own MD5 (reconcile), prefix included
    assert partials(sock) == []


def test_resume_cut_again_keeps_the_longer_prefix(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, PARTIAL_HEAD + 10)
    env.threads[-1].join(10)
    cut_after(session(env), 1, data, len(data) - 5, offset=PARTIAL_HEAD + 10)
    env.threads[-1].join(10)
    sock = session(env)
    assert partials(sock)[0][4] == len(data) - 5
    offer_from(sock, 2, data, len(data) - 5)
    assert verdict(sock)[2] == "verified"
    wait_for(lambda: env.loaded_path(UUID_A, NAME).exists())
    assert env.loaded_path(UUID_A, NAME).read_bytes() == data


def test_a_whole_held_data_file_sends_only_its_sidecar(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, len(data) + 2)  # into the .resource
    env.threads[-1].join(10)
    sock = session(env)
    assert partials(sock)[0][4] == len(data)
    offer_from(sock, 1, data, len(data))
    assert verdict(sock)[2] == "verified"
    wait_for(lambda: env.loaded_path(UUID_A, NAME).exists())
    assert env.loaded_path(UUID_A, NAME).read_bytes() == data
    assert recorded_md5(env.loaded_path(UUID_A, NAME)) == md5(data)


def test_offset_without_a_partial_is_a_mismatch_then_a_full_send_works(env: Env) -> None:
    data = big()
    sock = session(env)
    offer_from(sock, 0, data, 1000)
    assert verdict(sock)[2:] == ("mismatch", NOT_HELD)
    offer_from(sock, 1, data, 0)
    assert verdict(sock)[2] == "verified"


def test_a_different_file_under_the_name_replaces_the_partial(env: Env) -> None:
    """The sender compares the head digest and sends from 0: the stale partial goes,
    and a resume claimed onto a wrong prefix can only end in a mismatch."""
    old, new = big(b"old"), big(b"new")
    cut_after(session(env), 0, old, len(old) // 2)
    env.threads[-1].join(10)
    sock = session(env)
    assert partials(sock)[0][3] == md5(old[:PARTIAL_HEAD]) != md5(new[:PARTIAL_HEAD])
    # a lying (or buggy) sender resuming a different file onto the old prefix
    offer_from(sock, 1, new, len(old) // 2)
    assert verdict(sock)[2] == "mismatch"
    assert partials(sock) == []  # a mismatched partial is gone
    offer_from(sock, 2, new, 0)
    assert verdict(sock)[2] == "verified"
    wait_for(lambda: env.loaded_path(UUID_A, NAME).exists())
    assert env.loaded_path(UUID_A, NAME).read_bytes() == new


def test_a_fresh_stream_of_the_name_drops_an_untaken_partial(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, len(data) // 2)
    env.threads[-1].join(10)
    sock = session(env)
    offer_from(sock, 1, data, 0, mtime=MTIME + 1)
    assert verdict(sock)[2] == "verified"
    assert partials(sock) == []


def test_partials_count_against_max_partial_bytes(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, len(data) // 2)
    env.threads[-1].join(10)
    env.ctx.limits.partial.limit = len(data) + 10  # the partial and a new stream do not fit
    sock = session(env)
    other = "sequence/sg/0/other.tsfile"
    stream = data + b"res"
    send(sock, FileBegin(1, other, len(data), 3, -1, MTIME))
    for i in range(0, len(stream), 100_000):
        send(sock, Chunk(stream[i : i + 100_000]))
    send(sock, FileEnd(1, md5(stream)))
    assert verdict(sock)[2] == "verified"  # the oldest partial made room
    assert partials(sock) == []


def test_receiver_recovery_sweeps_expired_partials(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, len(data) // 2)
    env.threads[-1].join(10)
    folder = env.folder()
    store = PartialStore.of(folder.data_dir, folder.uuid)
    assert len(store.list()) == 1
    recover_all(env.ctx.data_dirs, env.storage, env.owners, env.ctx.inspect, 3600)
    assert len(store.list()) == 1  # young and intact: stays to resume
    recover_all(env.ctx.data_dirs, env.storage, env.owners, env.ctx.inspect, 0)
    assert store.list() == [] and os.listdir(store.dir) == []


def test_expired_partials_are_swept_at_round_start(env: Env) -> None:
    data = big()
    cut_after(session(env), 0, data, len(data) // 2)
    env.threads[-1].join(10)
    env.ctx.partial_max_age = 0.0
    time.sleep(0.01)
    sock = session(env)
    assert partials(sock) == []


# --- the sender's choice ----------------------------------------------------------


def test_sender_resumes_only_the_same_file(tmp_path: Path) -> None:
    """Size, mtime and the first chunk's digest must all match the receiver's partial."""
    from sender.transfer.files import RoundFiles
    from sender.transfer.filestream import open_snapshot_file

    data = big()
    path = tmp_path / NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    Path(f"{path}.resource").write_bytes(b"res")
    os.utime(path, ns=(MTIME, MTIME))
    head = md5(data[:PARTIAL_HEAD])

    def offset(entry: tuple[int, int, str, int]) -> int:
        files = RoundFiles.__new__(RoundFiles)
        files.partials = {NAME: entry}
        files.resumed_bytes = 0
        opened = open_snapshot_file(tmp_path, NAME)
        try:
            assert opened.begin(0).mtime == MTIME
            return files.resume_offset(opened)
        finally:
            opened.close()

    assert offset((len(data), MTIME, head, 5000)) == 5000
    assert offset((len(data), MTIME, md5(b"another head"), 5000)) == 0
    assert offset((len(data), MTIME + 1, head, 5000)) == 0
    assert offset((len(data) + 1, MTIME, head, 5000)) == 0


class _Capture:
    def __init__(self) -> None:
        self.data = bytearray()

    def recv(self, n: int) -> bytes:  # pragma: no cover - never read
        return b""

    def sendall(self, data: bytes | memoryview) -> None:
        self.data += data


@pytest.mark.parametrize("offset", [0, 1, PARTIAL_HEAD, RESUME_MIN + 299_000])
def test_sender_streams_from_the_offset_with_the_whole_streams_md5(
    tmp_path: Path, offset: int
) -> None:
    from sender.transfer.filestream import open_snapshot_file, send_file

    data = big()
    path = tmp_path / NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    Path(f"{path}.resource").write_bytes(b"res")
    out = _Capture()
    opened = open_snapshot_file(tmp_path, NAME)
    try:
        digest = send_file(out, opened, 3, bytearray(65536), None, offset)
    finally:
        opened.close()
    frames, rest = decode_frames(bytes(out.data))
    assert rest == b""
    begin, *chunks, end = frames
    assert isinstance(begin, FileBegin) and begin.offset == offset and begin.mtime > 0
    assert b"".join(bytes(c.data) for c in chunks) == (data + b"res")[offset:]
    assert end == FileEnd(3, md5(data + b"res")) and digest == end.md5


# --- a dead link's buffered bytes ------------------------------------------------------


def test_bytes_read_before_a_failed_window_adjustment_are_kept() -> None:
    """paramiko's recv lost them (and all behind them) when the link was dead."""
    from receiver.chunk_pipe import ChunkPipe, _recv_keeping

    class Transport:
        def _send_user_message(self, m: object) -> None:
            raise EOFError()

    class FakeChannel:
        timeout = 1.0
        remote_chanid = 7
        transport = Transport()

        def __init__(self) -> None:
            self.in_buffer = ChunkPipe()

        def _check_add_window(self, n: int) -> int:
            return n  # every read owes the peer a window adjustment

    channel = FakeChannel()
    channel.in_buffer.feed(b"abc")
    channel.in_buffer.feed(b"def")
    channel.in_buffer.close()  # the transport died after these arrived
    got = b""
    while True:
        piece = _recv_keeping(channel, 4)  # type: ignore[arg-type]
        if not piece:
            break
        got += piece
    assert got == b"abcdef"


# --- one store per sender, no link followed -------------------------------------------


def _kept(tmp_path: Path, store: PartialStore, name: str = NAME) -> None:
    data = big()
    src = tmp_path / f"src-{key_of(name)}"
    src.write_bytes(data[: PARTIAL_HEAD + 10])
    assert store.keep(name, len(data), MTIME, src, PARTIAL_HEAD + 10) is not None


def test_a_store_behind_a_link_is_neither_written_nor_swept(tmp_path: Path) -> None:
    """A link at the partial folder once carried a cut stream into its target, and the
    next sweep deleted every file there."""
    data_dir = tmp_path / "data"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    store = PartialStore.of(data_dir, UUID_A, max_age=0)
    store.dir.parent.mkdir(parents=True)
    store.dir.symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        store.sweep()
    with pytest.raises(OSError, match="symbolic link"):
        _kept(tmp_path, store)
    assert sweep_all([data_dir], 0) == 0
    assert sorted(os.listdir(outside)) == ["precious.txt"]


def test_a_claimed_partial_outlives_sweeps_and_old_per_address_ones_move(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    store = PartialStore.of(data_dir, UUID_A, max_age=0)
    _kept(tmp_path, store)
    partial = store.take(NAME)
    assert partial is not None and store.take(NAME) is None  # one resume at a time
    assert sweep_all([data_dir], 0) == 0  # expired, but being resumed
    unclaim(partial)
    assert sweep_all([data_dir], 0) == 2 and store.list() == []
    old_root = SenderFolder(data_dir, "10.0.0.9", UUID_A).root
    old = PartialStore(old_root / "partial")
    _kept(tmp_path, old, "sequence/sg/0/old.tsfile")
    assert migrate_partials(old_root, data_dir, UUID_A) == 1
    moved = PartialStore.of(data_dir, UUID_A).list()
    assert [p.name for p in moved] == ["sequence/sg/0/old.tsfile"]
    assert not (old_root / "partial").exists()
