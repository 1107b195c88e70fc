"""The receiver's side of a session, driven over a socket pair (no SSH, in process).

The receiver's side is ``SessionEnv`` from reliability/session_env.py; its data files are
small text stand-ins read by an in-process inspect function (``DEVICES:a,b``). The SSH
tests in test_receiver_service.py use real TsFiles and the worker pool.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest
from receiver_load_helpers import UUID_A, UUID_B, files_under
from receiver_service_helpers import md5, send_file
from reliability.session_env import FP_A, FP_B, PEER, SessionEnv, data_file, fake_inspect, hello
from state_helpers import sync_log_lines

from receiver import commit as commit_module
from receiver import incoming as incoming_module
from receiver import round_state as round_module
from receiver.channel import clean_text
from receiver.commit import MAX_BATCH
from receiver.incoming import Fsyncs, IncomingFile, stage_all
from receiver.inspect_pool import _inspect_each
from receiver.recover.replay import recover_all
from sealsync import durable
from sealsync.durable import FSYNC, SYNC_METHODS, SYNCFS
from sealsync.protocol import (
    ANOTHER_SENDER,
    PROTOCOL_VERSION,
    Bye,
    Chunk,
    Delete,
    DeleteAck,
    Error,
    FileBegin,
    FileEnd,
    FileVerdict,
    Hello,
    Owners,
    OwnersQuery,
    Partials,
    PartialsQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    RoundStart,
    Schema,
    SchemaAck,
    receive,
    send,
)


class Env(SessionEnv):
    """A SessionEnv whose ``connect`` gives just our end and whose ``close`` closes our
    ends and checks that every session ended."""

    def __init__(self, tmp_path: Path, n_dirs: int = 1, load_wait: float = 5.0) -> None:
        super().__init__(tmp_path, n_dirs, load_wait)
        self.socks: list[socket.socket] = []

    def connect(self, fingerprint: str = FP_A, peer: str = PEER) -> socket.socket:
        ours, _thread = super().connect(fingerprint, peer)
        self.socks.append(ours)
        return ours

    def close(self) -> None:
        self.storage.gate.set()
        for s in self.socks:
            s.close()
        super().close()
        assert not [t for t in self.threads if t.is_alive()]


@pytest.fixture
def env(tmp_path: Path):
    e = Env(tmp_path)
    yield e
    e.close()


def start_round(sock: socket.socket, data_dir: int = 0) -> RoundReady:
    send(sock, RoundStart(data_dir))
    msg = receive(sock)
    assert isinstance(msg, RoundReady)
    return msg


offer = partial(send_file, chunk=5)
"""``send_file`` in 5-byte CHUNKs, so that files cross many chunk boundaries."""


def verdict(sock: socket.socket) -> tuple[int, str, str, str]:
    msg = receive(sock)
    assert isinstance(msg, FileVerdict), msg
    return msg.file_id, msg.name, msg.status, msg.reason


def expect_error(sock: socket.socket, code: str) -> str:
    msg = receive(sock)
    assert isinstance(msg, Error), msg
    assert msg.code == code, msg
    assert sock.recv(1) == b""  # the receiver closed the session
    return msg.message


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


# --- a whole round ---------------------------------------------------------------------


def test_round_logs_in_the_sender_vocabulary_and_loads_in_order(env: Env) -> None:
    old = "sequence/sg1/0/old.tsfile"
    old_path = env.loaded_path(UUID_A, old)
    old_path.parent.mkdir(parents=True)
    old_path.write_bytes(b"old")
    Path(f"{old_path}.resource").write_bytes(b"r")
    env.storage.gate.clear()  # hold the loads so the round's state can be observed
    env.ctx.load_wait = 0.2
    files = {
        "sequence/sg1/0/1-1-0.tsfile": (data_file("root.sg1.d1"), b"res1", None),
        "sequence/sg1/0/2-1-0.tsfile": (data_file("root.sg1.d1", "root.sg1.d2"), b"", b"mods2"),
        "unsequence/sg1/0/3-1-0.tsfile": (data_file("root.sg1.d2"), b"res3", b""),
    }
    sock = env.connect()
    hello(sock)
    assert start_round(sock) == RoundReady("ready", "")
    send(sock, Delete(old))
    send(sock, Delete("sequence/sg1/0/never-loaded.tsfile"))
    for i, (name, (data, res, mods)) in enumerate(files.items()):
        offer(sock, i, name, data, res, mods)
    assert receive(sock) == DeleteAck(old)
    assert receive(sock) == DeleteAck("sequence/sg1/0/never-loaded.tsfile")
    assert [verdict(sock) for _ in files] == [
        (i, name, "verified", "") for i, name in enumerate(files)
    ]
    send(sock, RoundEnd())
    assert receive(sock) == RoundDone(False)  # loads are held at the gate
    folder = env.folder()
    deleted = [old, "sequence/sg1/0/never-loaded.tsfile"]
    assert folder.sync_log.read_text() == "\n".join([*sync_log_lines(deleted, files), ""])
    assert folder.sync_end.exists()
    for name, (data, res, mods) in files.items():
        staged = folder.staged(name)
        assert staged.read_bytes() == data
        assert Path(f"{staged}.resource").read_bytes() == res
        assert Path(f"{staged}.mods").exists() == (mods is not None)
        if mods is not None:
            assert Path(f"{staged}.mods").read_bytes() == mods
    wait_for(lambda: not old_path.exists())  # deletes are not gated
    env.storage.gate.set()
    wait_for(  # .resource is moved last
        lambda: all(Path(f"{env.loaded_path(UUID_A, n)}.resource").exists() for n in files)
    )
    for name, (data, res, mods) in files.items():
        target = env.loaded_path(UUID_A, name)
        assert target.read_bytes() == data
        assert Path(f"{target}.resource").read_bytes() == res
        if mods is not None:
            assert Path(f"{target}.mods").read_bytes() == mods
    assert env.owners.by_owner() == {UUID_A: ["root.sg1.d1", "root.sg1.d2"]}
    # The next round finds the last one applied but not cleaned: recovery cleans it.
    wait_for(lambda: env.rounds.loader(folder).pending() == 0)
    assert start_round(sock) == RoundReady("ready", "")
    send(sock, RoundEnd())
    assert receive(sock) == RoundDone(True)
    assert files_under(folder.root) == set()
    send(sock, Bye())
    assert sock.recv(1) == b""


def test_a_rounds_files_are_written_where_they_are_staged(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No temporaries and no staging renames for the files of a round."""
    installed: list[tuple[str, bool]] = []
    real_install = IncomingFile.install

    def install(self: IncomingFile, target: Path) -> None:
        installed.append((self.begin.name, self.in_place))
        real_install(self, target)

    monkeypatch.setattr(IncomingFile, "install", install)
    names = ["sequence/sg1/0/1-1-0.tsfile", "unsequence/sg1/0/2-1-0.tsfile"]
    sock = env.connect()
    hello(sock)
    assert start_round(sock) == RoundReady("ready", "")
    for i, name in enumerate(names):
        offer(sock, i, name, data_file("root.sg1.d1"), b"res", b"mods" if i else None)
    assert [verdict(sock)[2] for _ in names] == ["verified"] * 2
    assert installed == [(name, True) for name in names]
    for name in names:
        wait_for(lambda n=name: env.loaded_path(UUID_A, n).exists())
        assert env.loaded_path(UUID_A, name).read_bytes() == data_file("root.sg1.d1")


def test_round_without_deletes_or_files_has_an_empty_tsfile_section(env: Env) -> None:
    env.storage.gate.clear()
    env.ctx.load_wait = 0.0
    sock = env.connect()
    hello(sock)
    start_round(sock)
    send(sock, RoundEnd())
    assert receive(sock) == RoundDone(True)  # nothing to load: finished at once
    assert not env.folder().sync_log.exists()
    env.storage.gate.set()


def test_round_start_picks_data_dir_modulo_their_number(tmp_path: Path) -> None:
    env = Env(tmp_path, n_dirs=2)
    try:
        env.storage.gate.clear()
        env.ctx.load_wait = 0.0
        sock = env.connect()
        hello(sock)
        start_round(sock, data_dir=3)
        offer(sock, 0, "sequence/sg/0/a.tsfile", data_file("d"))
        assert verdict(sock)[2] == "verified"
        assert env.folder(i=1).staged("sequence/sg/0/a.tsfile").exists()
        assert not (env.data_dirs[0] / "sync-receiver").exists()
    finally:
        env.close()


# --- verdicts ----------------------------------------------------------------------------


def test_bad_md5_and_wrong_sizes_are_mismatches_and_nothing_is_staged(env: Env) -> None:
    env.storage.gate.clear()
    env.ctx.load_wait = 0.0
    sock = env.connect()
    hello(sock)
    start_round(sock)
    good = data_file("root.d1")
    name = "sequence/sg/0/f.tsfile"
    offer(sock, 1, name, good, digest="0" * 32)
    # more bytes than announced
    send(sock, FileBegin(2, name, len(good), 3, -1))
    send(sock, Chunk(good + b"res" + b"extra"))
    send(sock, FileEnd(2, md5(good + b"res" + b"extra")))
    # fewer bytes than announced
    send(sock, FileBegin(3, name, len(good) + 10, 3, -1))
    send(sock, Chunk(good + b"res"))
    send(sock, FileEnd(3, md5(good + b"res")))
    statuses = [verdict(sock) for _ in range(3)]
    assert [(i, s) for i, _, s, _ in statuses] == [
        (1, "mismatch"),
        (2, "mismatch"),
        (3, "mismatch"),
    ]
    assert statuses[0][3] == "MD5 mismatch"
    assert statuses[1][3] == f"received {len(good) + 8} bytes, announced {len(good) + 3}"
    folder = env.folder()
    assert files_under(folder.data) == set()
    offer(sock, 4, name, good)  # the resend is accepted
    assert verdict(sock) == (4, name, "verified", "")
    assert files_under(folder.data) == {"sequence/sg/0/f.tsfile", "sequence/sg/0/f.tsfile.resource"}


def test_invalid_file_is_refused_and_conflict_names_device_and_owner(env: Env) -> None:
    env.ctx.load_wait = 5.0
    a = env.connect(FP_A)
    hello(a, UUID_A)
    start_round(a)
    offer(a, 0, "sequence/sg/0/a.tsfile", data_file("root.d1", "root.d2"))
    assert verdict(a)[2] == "verified"
    send(a, RoundEnd())
    assert receive(a) == RoundDone(True)
    b = env.connect(FP_B)
    hello(b, UUID_B)
    start_round(b)
    offer(b, 0, "sequence/sg/0/b.tsfile", data_file("root.d3", "root.d2"))
    offer(b, 1, "sequence/sg/0/c.tsfile", b"not a data file")
    offer(b, 2, "sequence/sg/0/d.tsfile", data_file("root.d3"))
    assert verdict(b) == (
        0,
        "sequence/sg/0/b.tsfile",
        "conflict",
        "device root.d2 is owned by another sender",
    )
    assert verdict_refused(b)[:2] == (1, "sequence/sg/0/c.tsfile")
    assert verdict(b) == (2, "sequence/sg/0/d.tsfile", "verified", "")
    send(b, RoundEnd())
    assert receive(b) == RoundDone(True)
    # the conflicting file claimed nothing: root.d3 went to B with d.tsfile only
    assert env.owners.by_owner() == {UUID_A: ["root.d1", "root.d2"], UUID_B: ["root.d3"]}
    assert not env.loaded_path(UUID_B, "sequence/sg/0/b.tsfile").exists()
    assert not env.loaded_path(UUID_B, "sequence/sg/0/c.tsfile").exists()
    assert env.loaded_path(UUID_B, "sequence/sg/0/d.tsfile").exists()


def verdict_refused(sock: socket.socket) -> tuple[int, str, str, str]:
    file_id, name, status, reason = verdict(sock)
    assert status == "refused"
    assert reason.startswith("not a valid data file: ")
    assert reason == f"not a valid data file: {name.rsplit('/', 1)[1]}: no DEVICES header"
    return file_id, name, status, reason


def test_disk_full_is_refused_with_reason_and_the_session_goes_on(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.ctx.load_wait = 5.0
    full = threading.Event()
    full.set()

    class FullDisk:
        """The os module as incoming.py sees it, with a full disk while ``full`` is set."""

        def __getattr__(self, name: str):
            return getattr(os, name)

        @staticmethod
        def write(fd: int, data) -> int:
            if full.is_set():
                raise OSError(errno.ENOSPC, "No space left on device")
            return os.write(fd, data)

    monkeypatch.setattr(incoming_module, "os", FullDisk())
    sock = env.connect()
    hello(sock)
    start_round(sock)
    offer(sock, 0, "sequence/sg/0/a.tsfile", data_file("root.d1"))
    assert verdict(sock) == (
        0,
        "sequence/sg/0/a.tsfile",
        "refused",
        "receiver disk full: No space left on device",
    )
    folder = env.folder()
    assert files_under(folder.data) == set()  # temporaries removed
    full.clear()
    offer(sock, 1, "sequence/sg/0/a.tsfile", data_file("root.d1"))
    assert verdict(sock) == (1, "sequence/sg/0/a.tsfile", "verified", "")
    send(sock, RoundEnd())
    assert receive(sock) == RoundDone(True)


# --- owners and schema -----------------------------------------------------------------


def test_owners_query_answers_only_what_the_sender_was_told(env: Env) -> None:
    """A sender hears about its own devices and those a conflict verdict to it named;
    another sender's device is "another sender's", never its UUID, and a device no
    verdict named is left out, whoever owns it."""
    env.owners.claim(["root.x", "root.v"], UUID_B)
    env.owners.claim(["root.z"], UUID_A)
    sock = env.connect()
    hello(sock)
    send(sock, OwnersQuery(["root.x", "root.y", "root.z", "root.v"]))
    assert receive(sock) == Owners({"root.z": UUID_A})
    # a file of A's with root.x is refused: its verdict names root.x
    assert env.owners.claim_each([["root.w", "root.x"]], UUID_A) == [{"root.x": UUID_B}]
    start_round(sock)
    send(sock, OwnersQuery(["root.x", "root.y", "root.v"]))
    assert receive(sock) == Owners({"root.x": ANOTHER_SENDER})
    env.owners.release(["root.x"])
    send(sock, OwnersQuery(["root.x"]))
    assert receive(sock) == Owners({"root.x": ""})


def test_schema_increments_are_idempotent(env: Env) -> None:
    sock = env.connect()
    hello(sock)
    send(sock, Schema(0, b""))
    assert receive(sock) == SchemaAck(0)
    send(sock, Schema(0, b"create a\n"))
    assert receive(sock) == SchemaAck(9)
    send(sock, Schema(0, b"create a\n"))  # the same increment again
    assert receive(sock) == SchemaAck(9)
    send(sock, Schema(5, b"e a\ncreate b\n"))  # overlaps the end
    assert receive(sock) == SchemaAck(18)
    send(sock, Schema(0, b""))
    assert receive(sock) == SchemaAck(18)
    path = env.schema_dir / "sync" / "senders" / UUID_A / "mlog.txt"
    assert path.read_bytes() == b"create a\ncreate b\n"
    send(sock, Schema(19, b"x"))
    assert "offset 19 is past the receiver's position 18" in expect_error(sock, "schema-gap")
    assert path.read_bytes() == b"create a\ncreate b\n"


# --- order and identity ------------------------------------------------------------------


def test_a_version_two_ahead_is_refused(env: Env) -> None:
    sock = env.connect()
    send(sock, Hello(PROTOCOL_VERSION + 2, UUID_A, "edge"))
    assert expect_error(sock, "version") == (
        f"protocol version {PROTOCOL_VERSION + 2} not supported (receiver speaks "
        f"{PROTOCOL_VERSION}, and serves one version older and newer): upgrade the receiver"
    )
    assert not (env.schema_dir / "sync" / "sender_keys.txt").exists()


def test_uuid_is_bound_to_the_first_key(env: Env) -> None:
    a = env.connect(FP_A)
    hello(a, UUID_A)
    b = env.connect(FP_B, peer="10.9.9.9")
    send(b, Hello(PROTOCOL_VERSION, UUID_A, "impostor"))
    assert expect_error(b, "auth") == f"sender UUID {UUID_A} is bound to another public key"
    lines = (env.schema_dir / "sync" / "sender_keys.txt").read_text().splitlines()
    assert [line.split("\t")[:3] for line in lines] == [[UUID_A, FP_A, PEER]]


@pytest.mark.parametrize(
    "frames, code",
    [
        ([RoundStart(0)], "unexpected"),  # before HELLO
        ([Hello(PROTOCOL_VERSION, UUID_A, "e"), Chunk(b"x")], "unexpected"),
        ([Hello(PROTOCOL_VERSION, UUID_A, "e"), RoundStart(0), Chunk(b"x")], "unexpected"),
        ([Hello(PROTOCOL_VERSION, UUID_A, "e"), RoundStart(0), Bye()], "unexpected"),
        (
            [
                Hello(PROTOCOL_VERSION, UUID_A, "e"),
                RoundStart(0),
                FileBegin(1, "sequence/a.tsfile", 1, 0, -1),
                Chunk(b"x"),
                FileEnd(2, "0" * 32),
            ],
            "unexpected",
        ),
        (
            [
                Hello(PROTOCOL_VERSION, UUID_A, "e"),
                RoundStart(0),
                FileBegin(1, "sequence/a.tsfile", 1, 0, -1),
                Delete("sequence/b.tsfile"),
            ],
            "unexpected",
        ),
        ([Hello(PROTOCOL_VERSION, UUID_A, "e"), OwnersQuery(["a\tb"])], "bad-device"),
    ],
    ids=[
        "round-before-hello",
        "chunk-outside-round",
        "chunk-before-file-begin",
        "bye-mid-round",
        "file-end-wrong-id",
        "delete-inside-file",
        "device-with-tab",
    ],
)
def test_out_of_order_frames_end_the_session(env: Env, frames, code: str) -> None:
    sock = env.connect()
    for frame in frames:
        send(sock, frame)
    while True:
        msg = receive(sock)
        if isinstance(msg, Error):
            break
    assert msg.code == code
    assert sock.recv(1) == b""
    assert files_under(env.folder().data) == set()


def test_delete_after_a_file_is_a_protocol_error(env: Env) -> None:
    sock = env.connect()
    hello(sock)
    start_round(sock)
    offer(sock, 0, "sequence/sg/0/a.tsfile", data_file("d"))
    assert verdict(sock)[2] == "verified"
    send(sock, Delete("sequence/sg/0/b.tsfile"))
    assert expect_error(sock, "unexpected") == "DELETE not expected after the first file"


# --- busy and recovery ---------------------------------------------------------------------


def test_round_is_busy_while_the_last_one_loads_then_recovered(env: Env) -> None:
    env.storage.gate.clear()
    env.ctx.load_wait = 0.0
    name = "sequence/sg/0/a.tsfile"
    sock = env.connect()
    hello(sock)
    start_round(sock)
    offer(sock, 0, name, data_file("d"))
    assert verdict(sock)[2] == "verified"
    send(sock, RoundEnd())
    assert receive(sock) == RoundDone(False)
    ready = start_round(sock)
    assert ready.status == "busy"
    assert ready.message == "still loading 1 files of the last round"
    env.storage.gate.set()
    folder = env.folder()
    wait_for(lambda: env.rounds.loader(folder).pending() == 0)
    assert start_round(sock) == RoundReady("ready", "")
    assert folder.sync_log.read_text() == "sync start\n"  # the old round was recovered first
    assert env.loaded_path(UUID_A, name).read_bytes() == data_file("d")


def test_second_session_on_the_same_folder_is_busy(env: Env) -> None:
    env.ctx.load_wait = 0.2  # how long the second round start waits before it says busy
    a = env.connect()
    hello(a)
    start_round(a)
    b = env.connect()
    hello(b)
    ready = start_round(b)
    assert ready == RoundReady("busy", "another session is in a round for this sender and data dir")
    # a sender asks for its partial uploads right after ROUND_START, before it reads the
    # answer: after a busy one the query is answered (nothing to resume), not an error
    send(b, PartialsQuery())
    assert receive(b) == Partials([])
    send(b, RoundStart(0))
    assert receive(b) == RoundReady(
        "busy", "another session is in a round for this sender and data dir"
    )


def test_session_dying_mid_round_is_recovered_at_the_next_round(env: Env) -> None:
    env.storage.gate.clear()  # the loads outlast load_wait: the round cannot be cleared yet
    env.ctx.load_wait = 0.0
    name = "sequence/sg/0/a.tsfile"
    sock = env.connect()
    hello(sock)
    start_round(sock)
    offer(sock, 0, name, data_file("d"))
    assert verdict(sock)[2] == "verified"
    offer(sock, 1, "sequence/sg/0/b.tsfile", data_file("d"))  # cut mid-file below
    sock.close()
    env.threads[-1].join(10)
    folder = env.folder()
    assert folder.sync_log.exists() and not folder.sync_end.exists()
    env.storage.gate.set()
    sock2 = env.connect()
    hello(sock2)
    wait_for(lambda: env.rounds.loader(folder).pending() == 0)
    assert start_round(sock2) == RoundReady("ready", "")
    assert env.loaded_path(UUID_A, name).read_bytes() == data_file("d")
    assert files_under(folder.data) == set()  # the cut file's temporaries are gone


def test_session_dying_mid_round_forgets_the_round_once_loaded(env: Env) -> None:
    """A sender killed mid-round whose rerun has nothing left to ship starts no round, so
    the receiver must not wait for one to clear the abandoned round (crash tests)."""
    name = "sequence/sg/0/a.tsfile"
    sock = env.connect()
    hello(sock)
    start_round(sock)
    send(sock, Delete("sequence/sg/0/gone.tsfile"))
    assert receive(sock) == DeleteAck("sequence/sg/0/gone.tsfile")
    offer(sock, 0, name, data_file("d"))
    assert verdict(sock)[2] == "verified"
    sock.close()
    env.threads[-1].join(10)
    folder = env.folder()
    assert [p.name for p in (folder.sync_log, folder.load_log, folder.sync_end) if p.exists()] == []
    assert files_under(folder.data) == set()
    assert env.loaded_path(UUID_A, name).read_bytes() == data_file("d")
    sock2 = env.connect()
    hello(sock2)
    assert start_round(sock2) == RoundReady("ready", "")
    assert folder.sync_log.read_text() == "sync start\n"


# --- pieces ---------------------------------------------------------------------------------


def test_incoming_routes_bytes_across_chunk_boundaries(tmp_path: Path) -> None:
    begin = FileBegin(7, "sequence/sg/0/x.parquet", 5, 3, 4)
    inc = IncomingFile(begin, tmp_path, "tok-0")
    assert inc.data_tmp.name == ".incoming-tok-0.parquet"
    stream = b"DATA!resMODS"
    for piece in (stream[:2], stream[2:6], stream[6:11], stream[11:]):
        inc.write(piece)
    assert inc.check(md5(stream)) is None
    target = tmp_path / "staged" / "x.parquet"
    with ThreadPoolExecutor(2) as ex:
        assert stage_all([(inc, target)], ex) == [None]
    assert target.read_bytes() == b"DATA!"
    assert Path(f"{target}.resource").read_bytes() == b"res"
    assert Path(f"{target}.mods").read_bytes() == b"MODS"
    assert files_under(tmp_path) == {
        "staged/x.parquet",
        "staged/x.parquet.resource",
        "staged/x.parquet.mods",
    }


def test_a_file_staged_without_mods_removes_a_stale_staged_mods(tmp_path: Path) -> None:
    # The same name staged again (a resend after a lost verdict) without a ``.mods``:
    # the one staged with the earlier copy would otherwise be loaded with this one.
    target = tmp_path / "staged" / "x.tsfile"
    with ThreadPoolExecutor(2) as ex:
        for token, stream, mods in (("a", b"DATA!resMODS", 4), ("b", b"DATA!res", -1)):
            inc = IncomingFile(FileBegin(1, "sequence/sg/0/x.tsfile", 5, 3, mods), tmp_path, token)
            inc.write(stream)
            assert stage_all([(inc, target)], ex) == [None]
    assert files_under(tmp_path) == {"staged/x.tsfile", "staged/x.tsfile.resource"}
    assert target.read_bytes() == b"DATA!"


def test_a_stream_is_written_at_its_staged_names_when_they_are_free(tmp_path: Path) -> None:
    # Staging then renames nothing: the pieces staged are the inodes written.
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "x.tsfile.mods").write_bytes(b"stale")  # a clean-up stopped half-way
    target = staged / "x.tsfile"
    inc = IncomingFile(
        FileBegin(1, "sequence/sg/0/x.tsfile", 5, 3, -1), tmp_path, "t", None, None, str(target)
    )
    assert inc.in_place
    inc.write(b"DATA!res")
    inodes = {p.name: p.stat().st_ino for p in staged.iterdir()}
    with ThreadPoolExecutor(2) as ex:
        assert stage_all([(inc, target)], ex) == [None]
    assert files_under(tmp_path) == {"staged/x.tsfile", "staged/x.tsfile.resource"}
    assert {p.name: p.stat().st_ino for p in staged.iterdir()} == {
        n: i for n, i in inodes.items() if not n.endswith(".mods")
    }
    assert target.read_bytes() == b"DATA!"
    assert Path(f"{target}.resource").read_bytes() == b"res"


@pytest.mark.parametrize("there", ["", ".resource", ".mods"])
def test_a_stream_whose_staged_name_is_taken_goes_to_temporaries(
    tmp_path: Path, there: str
) -> None:
    # A piece already staged under the name may be a file in sync.log waiting to load:
    # nothing is written into it or removed, unless and until this stream is staged.
    staged = tmp_path / "staged"
    staged.mkdir()
    target = staged / "x.tsfile"
    Path(f"{target}{there}").write_bytes(b"earlier")
    begin = FileBegin(1, "sequence/sg/0/x.tsfile", 5, 3, 4)
    bad = IncomingFile(begin, tmp_path, "bad", None, None, str(target))
    assert not bad.in_place
    assert bad.data_tmp.name == ".incoming-bad.tsfile"
    bad.write(b"DATA!resMOD?")
    bad.discard()  # say, an MD5 mismatch
    assert files_under(tmp_path) == {f"staged/x.tsfile{there}"}
    assert Path(f"{target}{there}").read_bytes() == b"earlier"
    good = IncomingFile(begin, tmp_path, "good", None, None, str(target))
    good.write(b"DATA!resMODS")
    with ThreadPoolExecutor(2) as ex:
        assert stage_all([(good, target)], ex) == [None]
    assert [Path(f"{target}{s}").read_bytes() for s in ("", ".resource", ".mods")] == [
        b"DATA!",
        b"res",
        b"MODS",
    ]
    assert files_under(tmp_path) == {f"staged/x.tsfile{s}" for s in ("", ".resource", ".mods")}


def test_a_failed_stream_written_in_place_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "x.tsfile"
    inc = IncomingFile(
        FileBegin(1, "sequence/sg/0/x.tsfile", 5, 3, 4), tmp_path, "t", None, None, str(target)
    )
    assert inc.in_place
    inc.write(b"DATA!res")  # cut short
    assert inc.check(md5(b"DATA!resMODS")) is not None
    inc.discard()
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize("method", SYNC_METHODS)
def test_staging_a_batch_keeps_each_files_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    # fsync: a batch's fsyncs run in lanes, several files each. syncfs: the batch's one
    # syncfs fails (its error may be any file's on the file system), so each file is
    # fsynced. Either way a file whose fsync fails is refused with its own error, and
    # every other file is still staged, whatever the batch's size.
    failing = {3, 11, 17}
    real_fsync = IncomingFile.fsync

    def fsync(self: IncomingFile) -> None:
        if int(self.begin.file_id) in failing:
            raise OSError(28, f"No space left on device ({self.begin.file_id})")
        real_fsync(self)

    def syncfs(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(IncomingFile, "fsync", fsync)
    monkeypatch.setattr(durable, "syncfs", syncfs)
    for count in (1, 5, 20):
        files = []
        for i in range(count):
            begin = FileBegin(i, f"sequence/sg/0/{count}-{i}.tsfile", 4, 3, -1)
            inc = IncomingFile(begin, tmp_path, f"t{count}-{i}")
            inc.write(b"DATAres")
            files.append((inc, tmp_path / "staged" / f"{count}-{i}.tsfile"))
        with ThreadPoolExecutor(3) as ex:
            errors = stage_all(files, ex, Fsyncs([inc for inc, _ in files], ex, method))
        for i, error in enumerate(errors):
            if i in failing:
                assert isinstance(error, OSError) and f"({i})" in str(error)
                assert not (tmp_path / "staged" / f"{count}-{i}.tsfile").exists()
            else:
                assert error is None
                assert (tmp_path / "staged" / f"{count}-{i}.tsfile").read_bytes() == b"DATA"
            files[i][0].discard()


@pytest.mark.parametrize(
    ("method", "available", "count", "syncfs_calls", "fsync_calls"),
    [
        (SYNCFS, True, 6, 1, 0),  # one syncfs for the batch, no fsync
        (SYNCFS, True, 1, 0, 1),  # a batch of one file: its fsync is as cheap
        (SYNCFS, False, 6, 0, 6),  # no syncfs that reports errors here: file by file
        (FSYNC, True, 6, 0, 6),  # the operator chose fsync
    ],
)
def test_how_a_batch_is_made_durable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    available: bool,
    count: int,
    syncfs_calls: int,
    fsync_calls: int,
) -> None:
    calls = {"syncfs": 0, "fsync": 0}
    real_syncfs, real_fsync = durable.syncfs, IncomingFile.fsync

    def syncfs(fd: int) -> None:
        calls["syncfs"] += 1
        real_syncfs(fd)  # the real call: it must accept a temporary's descriptor

    def fsync(self: IncomingFile) -> None:
        calls["fsync"] += 1
        real_fsync(self)

    monkeypatch.setattr(durable, "syncfs", syncfs)
    monkeypatch.setattr(durable, "can_syncfs", lambda: available)
    monkeypatch.setattr(IncomingFile, "fsync", fsync)
    files = []
    for i in range(count):
        inc = IncomingFile(FileBegin(i, f"sequence/sg/0/{i}.tsfile", 4, 3, -1), tmp_path, f"t{i}")
        inc.write(b"DATA" + bytes([65 + i]) * 3)
        files.append((inc, tmp_path / "staged" / f"{i}.tsfile"))
    with ThreadPoolExecutor(3) as ex:
        errors = stage_all(files, ex, Fsyncs([inc for inc, _ in files], ex, method))
    assert errors == [None] * count
    assert calls == {"syncfs": syncfs_calls, "fsync": fsync_calls}
    for i in range(count):
        target = tmp_path / "staged" / f"{i}.tsfile"
        assert target.read_bytes() == b"DATA"
        assert Path(f"{target}.resource").read_bytes() == bytes([65 + i]) * 3
    assert {p for p in files_under(tmp_path) if ".incoming-" in p} == set()


def test_clean_text_makes_one_bounded_line() -> None:
    assert clean_text("a\nb\x00c\r\n d") == "a b c d"
    long = clean_text("é" * 2000)
    assert len(long.encode()) <= 1024 and long.endswith("...")


def test_pipelined_files_keep_their_order_with_repeated_file_ids(env: Env) -> None:
    env.storage.gate.clear()
    env.ctx.load_wait = 0.0
    env.owners.claim(["root.taken"], UUID_B)
    sock = env.connect()
    hello(sock)
    start_round(sock)
    plan = []
    for i in range(12):
        name = f"sequence/sg/0/{i}.tsfile"
        if i == 3:
            offer(sock, 1, name, data_file("root.d"), digest="f" * 32)
            plan.append((1, name, "mismatch"))
        elif i == 5:
            offer(sock, 1, name, data_file("root.taken"))
            plan.append((1, name, "conflict"))
        else:
            offer(sock, 1, name, data_file("root.d", body=str(i).encode()))  # same file id
            plan.append((1, name, "verified"))
    assert [verdict(sock)[:3] for _ in plan] == plan
    verified = [name for _, name, status in plan if status == "verified"]
    lines = env.folder().sync_log.read_text().splitlines()
    assert lines == ["sync start", "sync tsfile start", *verified]
    for i, name in enumerate(n for _, n, _ in plan):
        if name in verified:
            staged = env.folder().staged(name)
            assert staged.read_bytes() == data_file("root.d", body=str(i).encode())
    assert {p for p in files_under(env.folder().data) if ".incoming-" in p} == set()


def test_every_queued_batch_is_answered_when_the_sender_stops_sending(env: Env) -> None:
    # Several batches queue on the commit thread while files stream in; once the bytes
    # stop, the session must answer all of them before it waits for more (a sender at
    # the end of its pipeline waits for exactly these verdicts).
    env.ctx.load_wait = 0.0
    sock = env.connect()
    sock.settimeout(60)  # a session that stopped answering fails here instead of hanging
    hello(sock)
    start_round(sock)
    names = [f"sequence/sg/0/{i}.tsfile" for i in range(3 * MAX_BATCH + 5)]
    for i, name in enumerate(names):
        send_file(sock, i, name, data_file("root.d", body=str(i).encode()), chunk=1 << 16)
    assert [verdict(sock)[:3] for _ in names] == [
        (i, name, "verified") for i, name in enumerate(names)
    ]
    assert env.folder().sync_log.read_text().splitlines()[2:] == names


class _Buffered:
    """A socket stand-in that keeps what is sent, to go out later in one write."""

    def __init__(self) -> None:
        self.data = bytearray()

    def sendall(self, data: bytes) -> None:
        self.data += data


def offer_at_once(env: Env, bodies: list[bytes]) -> tuple[list[str], list[tuple[int, str, str]]]:
    """A round whose files' frames all go out in one write, so every file is waiting
    at once: the names offered and their verdicts (file id, name, status), in order."""
    env.ctx.load_wait = 0.0
    sock = env.connect()
    sock.settimeout(60)
    hello(sock)
    start_round(sock)
    names = [f"sequence/sg/0/{i}.tsfile" for i in range(len(bodies))]
    frames = _Buffered()
    for i, (name, body) in enumerate(zip(names, bodies, strict=True)):
        send_file(frames, i, name, body, chunk=1 << 16)
    sock.sendall(bytes(frames.data))
    return names, [verdict(sock)[:3] for _ in names]


@pytest.mark.parametrize("method", SYNC_METHODS)
def test_a_batchs_fsyncs_run_while_its_files_are_checked(
    env: Env, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    # The disk's work on a batch (its fsyncs, or its syncfs) and the worker pool's (the
    # format check) overlap: every file of the batch is durable while its check is
    # still running. Files the check refuses were synced for nothing, and are still
    # not staged.
    fsynced: set[str] = set()
    lock = threading.Condition()
    real_fsync = IncomingFile.fsync
    real_together = incoming_module._sync_together

    def synced(names: list[str]) -> None:
        with lock:
            fsynced.update(names)
            lock.notify_all()

    def fsync(self: IncomingFile) -> None:
        real_fsync(self)
        synced([self.begin.name])

    def together(files: list[IncomingFile]) -> list[OSError | None]:
        errors = real_together(files)
        synced([incoming.begin.name for incoming in files])
        return errors

    overlapped: list[bool] = []

    def inspect_many(paths: list[Path]) -> list[object]:
        with lock:  # the check ends only once the batch's fsyncs are done, if they run
            overlapped.append(lock.wait_for(lambda: len(fsynced) >= len(paths), timeout=5))
        return _inspect_each(lambda path: fake_inspect(Path(path)), [str(p) for p in paths])

    monkeypatch.setattr(IncomingFile, "fsync", fsync)
    monkeypatch.setattr(incoming_module, "_sync_together", together)
    env.ctx.sync_method = method
    env.ctx.inspect_many = inspect_many  # type: ignore[assignment]
    bodies = [data_file("root.d", body=b"x"), b"not a data file", data_file("root.d"), b"no"]
    names, verdicts = offer_at_once(env, bodies)  # one batch
    assert [status for _, _, status in verdicts] == ["verified", "refused", "verified", "refused"]
    assert overlapped == [True]
    assert fsynced == set(names)
    wait_for(lambda: all(env.loaded_path(UUID_A, names[i]).exists() for i in (0, 2)))
    # then, with the loads landed (a file mid-rename would escape a walk), nothing else
    assert {p.name for p in env.root.rglob("*.tsfile")} == {"0.tsfile", "2.tsfile"}


def test_a_later_batch_is_logged_after_an_earlier_one_that_commits_slowly(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two batches commit at once: the second, checked quickly, waits for the first
    # (its check held up) before its names reach sync.log and the loader, so both keep
    # the order the files arrived in, and so do the verdicts.
    monkeypatch.setattr(commit_module, "MAX_BATCH", 2)
    calls: list[int] = []
    second_checked = threading.Event()
    logging = threading.Event()  # a batch's names are about to reach sync.log
    log_tsfiles = round_module.RoundState.log_tsfiles

    def log_recorded(self: object, names: list[str]) -> None:
        logging.set()
        log_tsfiles(self, names)  # type: ignore[arg-type]

    def inspect_many(paths: list[Path]) -> list[object]:
        calls.append(len(paths))
        if len(calls) == 1:
            assert second_checked.wait(10)  # the first batch's check ends after the second's
            logging.wait(1)  # time for the second batch to log, were it not held back
        else:
            second_checked.set()
        return [fake_inspect(path) for path in paths]

    monkeypatch.setattr(round_module.RoundState, "log_tsfiles", log_recorded)

    loaded: list[str] = []
    load = env.storage.load

    def recorded(sender: str, name: str, staged: Path) -> None:
        loaded.append(name)
        load(sender, name, staged)

    monkeypatch.setattr(env.storage, "load", recorded)
    env.ctx.inspect_many = inspect_many  # type: ignore[assignment]
    bodies = [data_file("root.d", body=str(i).encode()) for i in range(4)]
    names, verdicts = offer_at_once(env, bodies)  # two batches of two
    assert verdicts == [(i, name, "verified") for i, name in enumerate(names)]
    assert calls == [2, 2]
    lines = env.folder().sync_log.read_text().splitlines()
    assert lines[lines.index("sync tsfile start") + 1 :] == names
    deadline = time.monotonic() + 10
    while len(loaded) < len(names) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loaded == names


def test_a_round_cut_by_the_receiver_stopping_is_one_line_and_recovered(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    # stop() closes the loaders while a session may be committing: the session ends
    # with ERROR busy (the sender retries), its log says so in one line, not as a
    # failure with a traceback, and the staged file is loaded at the next start.
    sock = env.connect()
    hello(sock)
    start_round(sock)
    env.rounds.close()  # what ReceiverService.stop() does to the loaders
    name = "sequence/sg/0/1.tsfile"
    with caplog.at_level(logging.INFO, logger="sealsync"):
        send_file(sock, 1, name, data_file("root.d"))
        assert "stopping" in expect_error(sock, "busy")
        wait_for(lambda: not env.threads[-1].is_alive())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("the receiver is stopping" in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
    assert env.folder().sync_log.read_text().splitlines()[-1] == name
    recover_all(env.data_dirs, env.storage, env.owners, fake_inspect)  # the next start
    assert env.loaded_path(UUID_A, name).read_bytes() == data_file("root.d")


def test_a_batch_closes_at_its_byte_bound_while_files_stream_in(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # While the sender's next bytes are already waiting, a batch is committed once its
    # files add up to MAX_BATCH_BYTES, so that their fsyncs run while the next ones
    # stream in; the bytes are counted as files arrive and start again at each batch.
    bodies = [data_file("root.d", body=str(i).encode()) for i in range(12)]
    stream = len(bodies[0]) + len(b"res")
    assert all(len(b) + len(b"res") == stream for b in bodies[:10])
    monkeypatch.setattr(commit_module, "MAX_BATCH_BYTES", 3 * stream)
    sizes: list[int] = []
    commit = commit_module.BatchCommitter.commit

    def recorded(
        self: commit_module.BatchCommitter, batch: list, rnd: object, earlier: object = None
    ) -> None:
        sizes.append(len(batch))
        commit(self, batch, rnd, earlier)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_module.BatchCommitter, "commit", recorded)
    names, verdicts = offer_at_once(env, bodies[:10])
    assert verdicts == [(i, name, "verified") for i, name in enumerate(names)]
    assert sum(sizes) == len(names)
    assert max(sizes) == 3  # never more than the bound allows, while more was waiting
    assert sizes.count(3) >= 2  # and the count starts again after each batch
