"""The receiver service over real SSH on loopback: keys, allow list, sessions, stop.

Real Ed25519 keys (OpenSSH format), a real paramiko client, real TsFiles inspected in
the worker pool. One pool serves the whole module (its workers take a moment to start).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest
from receiver_inspect_targets import crashing_inspect
from receiver_load_helpers import UUID_A, UUID_B, files_under, loaded_path
from receiver_service_helpers import (
    Client,
    control_frame,
    make_keys,
    md5,
    raw_header,
    receiver_mapping,
    tsfile_bytes,
)
from state_helpers import sync_log_lines

from receiver.inspect_pool import InspectPool
from receiver.layout import SenderFolder
from receiver.limits import SESSION_WAIT
from receiver.load.owners import DeviceOwners
from receiver.serve import serve
from receiver.service import ReceiverService
from receiver.storage import DirectoryStorage
from sealsync import __version__
from sealsync.config import ReceiverConfig
from sealsync.errors import FormatError
from sealsync.formats.common import FileInfo
from sealsync.keys import fingerprint
from sealsync.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Chunk,
    Delete,
    DeleteAck,
    Error,
    FileBegin,
    FileVerdict,
    Kind,
    RoundDone,
    RoundEnd,
    RoundReady,
    Schema,
    SchemaAck,
    Welcome,
    encode,
)
from sealsync.simulator import EdgeInstance

pytestmark = pytest.mark.slow  # real SSH on loopback and the inspect worker pool

LOCAL = "127.0.0.1"
# The one receiver per storage lock files every started service holds (receiver/lock.py).
STORAGE_LOCKS = {"schema/sync/receiver.lock", "data/sync-receiver/receiver.lock"}


@pytest.fixture(scope="module")
def pool():
    with InspectPool(workers=1) as p:
        yield p


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    return make_keys(tmp_path)


def make_config(tmp_path: Path, keys: dict[str, Path], **extra) -> ReceiverConfig:
    config = ReceiverConfig.from_mapping(receiver_mapping(tmp_path, keys, **extra), tmp_path)
    return dataclasses.replace(config, listen_port=0)


@pytest.fixture
def service(tmp_path: Path, keys: dict[str, Path], pool: InspectPool):
    svc = ReceiverService(make_config(tmp_path, keys), inspect=pool.inspect, load_wait=10.0)
    with svc:
        yield svc


def dc_data(tmp_path: Path) -> Path:
    """The receiver's one data dir (see ``receiver_mapping``)."""
    return tmp_path / "dc" / "data"


def folder_of(tmp_path: Path, uuid: str = UUID_A) -> SenderFolder:
    return SenderFolder(dc_data(tmp_path), LOCAL, uuid)


def verdicts(client: Client, n: int) -> list[tuple[int, str, str, str]]:
    out = []
    for _ in range(n):
        msg = client.recv()
        assert isinstance(msg, FileVerdict), msg
        out.append((msg.file_id, msg.name, msg.status, msg.reason))
    return out


def good_round(service: ReceiverService, keys: dict[str, Path], tmp_path: Path) -> None:
    """A well-behaved session: one real TsFile, verified and loaded."""
    name = "sequence/root.ok/0/ok.tsfile"
    data = tsfile_bytes(tmp_path, ["root.ok.d1"])
    with Client(service.address, keys["edge_a"]) as c:
        assert isinstance(c.hello(UUID_A), Welcome)
        assert c.round_start() == RoundReady("ready", "")
        c.send_file(1, name, data)
        assert verdicts(c, 1) == [(1, name, "verified", "")]
        c.send(RoundEnd())
        assert c.recv() == RoundDone(True)
        c.send(Bye())
        assert c.closed_by_peer()
    assert loaded_path(dc_data(tmp_path), UUID_A, name).read_bytes() == data


# --- the happy path ------------------------------------------------------------------


def test_round_over_ssh_verifies_stages_and_loads_byte_identical(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    edge = EdgeInstance(tmp_path / "edge")  # the files an edge node would ship
    names = [
        edge.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=5),
        edge.write_file("root.sg1", 0, devices=["root.sg1.d1", "root.sg1.d2"], rows_per_device=3),
        edge.write_file(
            "root.sg1", 0, devices=["root.sg1.d3"], rows_per_device=500, unsequence=True
        ),
        edge.write_file(
            "root.sg2", 0, devices=["root.sg2.d1", "root.sg2.d2"], rows_per_device=4, fmt="parquet"
        ),
    ]
    edge.add_mods(names[1], "root.sg1.d1", 1000)
    files = {}
    for name in names:
        mods2 = edge.path(name + ".mods2")
        files[name] = (
            edge.path(name).read_bytes(),
            edge.path(name + ".resource").read_bytes(),
            mods2.read_bytes() if mods2.exists() else None,
        )
    assert [n.split("/")[0] for n in files] == ["sequence", "sequence", "unsequence", "sequence"]
    assert files[names[1]][2] is not None and files[names[3]][0][:4] == b"PAR1"
    old = "sequence/root.sg1/0/0-0-0.tsfile"
    old_path = loaded_path(dc_data(tmp_path), UUID_A, old)
    old_path.parent.mkdir(parents=True)
    old_path.write_bytes(b"old")
    gate = threading.Event()

    config = make_config(tmp_path, keys)
    svc = ReceiverService(config, inspect=pool.inspect, load_wait=0.3)
    real_load = svc.storage.load

    def gated_load(sender: str, name: str, staged: Path) -> None:
        assert gate.wait(10)
        real_load(sender, name, staged)

    svc.storage.load = gated_load  # type: ignore[method-assign]
    with svc, Client(svc.address, keys["edge_a"]) as c:
        assert c.host_key.asbytes() == paramiko.PKey.from_path(keys["host"]).asbytes()
        assert c.hello(UUID_A) == Welcome(PROTOCOL_VERSION, f"sealsync {__version__}")
        assert c.round_start() == RoundReady("ready", "")
        c.send(Delete(old))
        for i, (name, (data, res, mods2)) in enumerate(files.items()):
            c.send_file(i, name, data, res, chunk=60000, mods2=mods2)
        assert c.recv() == DeleteAck(old)
        assert verdicts(c, 4) == [(i, name, "verified", "") for i, name in enumerate(files)]
        c.send(RoundEnd())
        assert c.recv() == RoundDone(False)  # held at the gate
        folder = folder_of(tmp_path)
        assert folder.sync_log.read_text() == "".join(
            f"{line}\n" for line in sync_log_lines([old], files)
        )
        assert folder.sync_end.read_bytes() == b""
        for name, (data, res, _mods) in files.items():
            assert folder.staged(name).read_bytes() == data
            assert Path(f"{folder.staged(name)}.resource").read_bytes() == res
        gate.set()
        deadline = time.monotonic() + 10
        resources = [Path(f"{loaded_path(dc_data(tmp_path), UUID_A, n)}.resource") for n in files]
        while not all(p.exists() for p in resources):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for name, (data, res, mods2) in files.items():
            target = loaded_path(dc_data(tmp_path), UUID_A, name)
            assert target.read_bytes() == data
            assert Path(f"{target}.resource").read_bytes() == res
            assert Path(f"{target}.mods2").exists() == (mods2 is not None)
            if mods2 is not None:
                assert Path(f"{target}.mods2").read_bytes() == mods2
        assert not old_path.exists()
        c.send(Bye())
        assert c.closed_by_peer()
    owners = DeviceOwners(tmp_path / "dc" / "schema")
    assert owners.by_owner() == {
        UUID_A: ["root.sg1.d1", "root.sg1.d2", "root.sg1.d3", "root.sg2.d1", "root.sg2.d2"]
    }
    binding = (tmp_path / "dc" / "schema" / "sync" / "sender_keys.txt").read_text().split("\t")
    pub = (keys["edge_a"].parent / "edge_a.pub").read_text()
    assert binding[:3] == [UUID_A, fingerprint(pub), LOCAL]


def test_invalid_tsfile_refused_and_conflict_named_over_ssh(
    service: ReceiverService, keys: dict[str, Path], tmp_path: Path
) -> None:
    with Client(service.address, keys["edge_a"]) as a:
        a.hello(UUID_A)
        a.round_start()
        a.send_file(0, "sequence/root.x/0/a.tsfile", tsfile_bytes(tmp_path, ["root.x.d1"]))
        assert verdicts(a, 1)[0][2] == "verified"
        a.send(RoundEnd())
        assert a.recv() == RoundDone(True)
    with Client(service.address, keys["edge_b"]) as b:
        b.hello(UUID_B)
        b.round_start()
        b.send_file(0, "sequence/root.x/0/b.tsfile", tsfile_bytes(tmp_path, ["root.x.d1"]))
        b.send_file(1, "sequence/root.x/0/c.tsfile", b"TsFile" + b"\x00" * 100)
        got = verdicts(b, 2)
        assert got[0] == (
            0,
            "sequence/root.x/0/b.tsfile",
            "conflict",
            "device root.x.d1 is owned by another sender",
        )
        assert got[1][:3] == (1, "sequence/root.x/0/c.tsfile", "refused")
        assert got[1][3].startswith("not a valid data file: ")
        assert ".incoming-" not in got[1][3]
    assert files_under(folder_of(tmp_path, UUID_B).data) == set()


def test_bad_md5_is_a_mismatch_and_nothing_is_staged(
    service: ReceiverService, keys: dict[str, Path], tmp_path: Path
) -> None:
    name = "sequence/root.m/0/m.tsfile"
    data = tsfile_bytes(tmp_path, ["root.m.d1"])
    with Client(service.address, keys["edge_a"]) as c:
        c.hello()
        c.round_start()
        c.send_file(5, name, data, digest=md5(b"something else"))
        assert verdicts(c, 1) == [(5, name, "mismatch", "MD5 mismatch")]
        assert files_under(folder_of(tmp_path).data) == set()
        assert folder_of(tmp_path).sync_log.read_text() == "sync start\n"
        c.send_file(6, name, data)
        assert verdicts(c, 1) == [(6, name, "verified", "")]


def test_schema_increment_resent_is_stored_once(
    service: ReceiverService, keys: dict[str, Path], tmp_path: Path
) -> None:
    increment = b"CREATE TIMESERIES root.sg1.d1.s1 INT64\n"
    with Client(service.address, keys["edge_a"]) as c:
        c.hello()
        c.send(Schema(0, b""))
        assert c.recv() == SchemaAck(0)
        c.send(Schema(0, increment))
        assert c.recv() == SchemaAck(len(increment))
        c.send(Schema(0, increment))
        assert c.recv() == SchemaAck(len(increment))
    mlog = tmp_path / "dc" / "schema" / "sync" / "senders" / UUID_A / "mlog.txt"
    assert mlog.read_bytes() == increment


def test_start_recovers_an_unfinished_round_before_accepting(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    name = "sequence/root.r/0/r.tsfile"
    data = tsfile_bytes(tmp_path, ["root.r.d1"])
    folder = folder_of(tmp_path)
    staged = folder.staged(name)
    staged.parent.mkdir(parents=True)
    staged.write_bytes(data)
    Path(f"{staged}.resource").write_bytes(b"res")
    folder.sync_log.write_text(f"sync start\nsync tsfile start\n{name}\n")  # crashed here
    with ReceiverService(make_config(tmp_path, keys), inspect=pool.inspect):
        assert loaded_path(dc_data(tmp_path), UUID_A, name).read_bytes() == data
        assert files_under(folder.root) == set()
    owners = DeviceOwners(tmp_path / "dc" / "schema")
    assert owners.by_owner() == {UUID_A: ["root.r.d1"]}


# --- who may connect --------------------------------------------------------------------------


def test_key_not_authorized_fails_auth_and_writes_nothing(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    config = make_config(tmp_path, keys, authorized=("edge_a",))
    with ReceiverService(config, inspect=pool.inspect) as svc:
        with pytest.raises(paramiko.AuthenticationException):
            Client(svc.address, keys["edge_b"])
    assert files_under(tmp_path / "dc") == STORAGE_LOCKS


def test_peer_outside_allow_list_is_closed_before_ssh(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    config = make_config(tmp_path, keys, allow=["10.0.0.0/8"])
    with ReceiverService(config, inspect=pool.inspect) as svc:
        with socket.create_connection(svc.address, timeout=5) as sock:
            try:
                got = sock.recv(100)
            except ConnectionResetError:
                got = b""
        assert got == b""  # not even the SSH banner
        with pytest.raises(paramiko.SSHException):
            Client(svc.address, keys["edge_a"])
    assert files_under(tmp_path / "dc") == STORAGE_LOCKS


def test_uuid_claimed_by_a_second_key_gets_error_auth(
    service: ReceiverService, keys: dict[str, Path], tmp_path: Path
) -> None:
    with Client(service.address, keys["edge_a"]) as a:
        assert isinstance(a.hello(UUID_A), Welcome)
    with Client(service.address, keys["edge_b"]) as b:
        msg = b.hello(UUID_A)
        assert msg == Error("auth", f"sender UUID {UUID_A} is bound to another public key")
        assert b.closed_by_peer()
    with Client(service.address, keys["edge_b"]) as b:
        assert isinstance(b.hello(UUID_B), Welcome)
    lines = (tmp_path / "dc" / "schema" / "sync" / "sender_keys.txt").read_text().splitlines()
    fps = {u: f for u, f, *_ in (line.split("\t") for line in lines)}
    pub = {k: (keys[k].parent / f"{k}.pub").read_text() for k in ("edge_a", "edge_b")}
    assert fps == {UUID_A: fingerprint(pub["edge_a"]), UUID_B: fingerprint(pub["edge_b"])}


# --- hostile frames -----------------------------------------------------------------------------

HOSTILE = {
    "absolute-name": (True, encode(FileBegin(1, "/etc/evil.tsfile", 1, 0, -1)), "bad-name"),
    "dotdot-name": (
        True,
        encode(FileBegin(1, "sequence/../../../../evil.tsfile", 1, 0, -1)),
        "bad-name",
    ),
    "nul-name": (True, encode(Delete("sequence/a\x00/../../evil.tsfile")), "bad-name"),
    "oversized-length": (True, raw_header(Kind.CHUNK, 1 << 31), "protocol"),
    "garbage": (False, b"\xde\xad\xbe\xef" * 32, "protocol"),
    "unknown-kind": (True, raw_header(99, 0), "protocol"),
    "bad-json": (True, control_frame(Kind.DELETE, b"{not json"), "protocol"),
    "chunk-before-file-begin": (True, encode(Chunk(b"x" * 10)), "unexpected"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_frame_ends_only_that_session(
    service: ReceiverService, keys: dict[str, Path], tmp_path: Path, case: str
) -> None:
    in_round, frame, code = HOSTILE[case]
    with Client(service.address, keys["edge_a"]) as c:
        c.hello()
        if in_round:
            assert c.round_start() == RoundReady("ready", "")
        c.raw(frame)
        msg = c.recv()
        assert isinstance(msg, Error) and msg.code == code, msg
        assert c.closed_by_peer()
    # the round the hostile frame ended logged nothing to load: it is forgotten at once
    assert files_under(tmp_path / "dc") == {
        "schema/sync/sender_keys.txt",
        "schema/sync/sender_keys.txt.lock",
        *STORAGE_LOCKS,
    }
    assert not list(tmp_path.glob("**/evil.tsfile"))
    good_round(service, keys, tmp_path)  # the service still serves


# --- bounds and lifecycle -------------------------------------------------------------------------


def test_a_key_over_its_connections_and_a_receiver_at_its_limit_say_so(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    """Connections count from authentication: a key's third one hears that its key has
    its connections open, and past as many again waiting for that answer the key is
    refused on the connection; past the receiver's bound, one hears that the receiver
    is at its connection limit (not a close before the banner); idle authenticated ones
    are closed after SESSION_WAIT."""
    from security.attacks import AuthOnly

    config = make_config(tmp_path, keys, max_startups="1", max_sessions=1)
    with ReceiverService(config, inspect=pool.inspect) as svc:
        assert svc.max_connections == 7
        held = [AuthOnly(svc.address, "127.0.0.2", keys["edge_a"]) for _ in range(2)]
        try:
            with Client(svc.address, keys["edge_a"]) as third:
                answer = third.hello(UUID_A)
            assert isinstance(answer, Error) and answer.code == "busy", answer
            assert "connections open (max_sessions_per_key)" in answer.message
            held += [AuthOnly(svc.address, "127.0.0.3", keys["edge_b"]) for _ in range(4)]
            with pytest.raises(paramiko.AuthenticationException):  # 2 open, 2 to hear busy
                AuthOnly(svc.address, "127.0.0.4", keys["edge_b"])
            deadline = time.monotonic() + 5  # its server side ends at its next look
            while svc.connections.admission.startups and time.monotonic() < deadline:
                time.sleep(0.02)
            held.append(AuthOnly(svc.address, "127.0.0.2", keys["edge_a"]))  # 7 open now
            with Client(svc.address, keys["edge_a"]) as over:
                answer = over.hello(UUID_A)
            assert isinstance(answer, Error) and answer.code == "busy", answer
            assert "at its connection limit" in answer.message
            deadline = time.monotonic() + SESSION_WAIT + 3
            while any(h.alive() for h in held) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not any(h.alive() for h in held)  # closed: no session within SESSION_WAIT
        finally:
            for h in held:
                h.close()
        good_round(svc, keys, tmp_path)  # another source: the idle ones' penalty is theirs


def test_max_sessions_bound_answers_busy(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    config = make_config(tmp_path, keys, max_sessions=2)
    with ReceiverService(config, inspect=pool.inspect) as svc:
        first = Client(svc.address, keys["edge_a"])
        second = Client(svc.address, keys["edge_b"])
        assert isinstance(first.hello(UUID_A), Welcome)
        assert isinstance(second.hello(UUID_B), Welcome)
        assert svc.sessions == 2
        with Client(svc.address, keys["edge_a"]) as third:
            assert third.hello(UUID_A) == Error(
                "busy", "receiver busy: 2 sessions open, retry later"
            )
            assert third.closed_by_peer()
        first.send(Bye())
        assert first.closed_by_peer()
        first.close()
        deadline = time.monotonic() + 5
        while svc.sessions != 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with Client(svc.address, keys["edge_a"]) as fourth:
            assert isinstance(fourth.hello(UUID_A), Welcome)
        second.close()


def test_idle_session_is_closed_with_error_timeout(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    config = make_config(tmp_path, keys, idle_timeout=0.5)
    with ReceiverService(config, inspect=pool.inspect) as svc:
        with Client(svc.address, keys["edge_a"]) as c:
            c.hello()
            assert c.recv() == Error("timeout", "session idle for too long")
            assert c.closed_by_peer()


def test_stop_returns_promptly_with_sessions_open(
    tmp_path: Path, keys: dict[str, Path], pool: InspectPool
) -> None:
    svc = ReceiverService(make_config(tmp_path, keys), inspect=pool.inspect).start()
    a = Client(svc.address, keys["edge_a"])
    b = Client(svc.address, keys["edge_b"])
    a.hello(UUID_A)
    b.hello(UUID_B)
    b.round_start()
    b.send(FileBegin(1, "sequence/root.s/0/s.tsfile", 1 << 20, 0, -1))  # mid-file
    b.send(Chunk(b"x" * 1000))
    time.sleep(0.1)
    started = time.monotonic()
    svc.stop()
    assert time.monotonic() - started < 3.0
    assert a.closed_by_peer() and b.closed_by_peer()
    svc.stop()  # idempotent
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", a.sock.getpeername()[1]), timeout=2)
    a.close()
    b.close()
    assert files_under(folder_of(tmp_path, UUID_B).data) == set()  # temporaries gone


def test_serve_runs_until_stop_event(tmp_path: Path, keys: dict[str, Path]) -> None:
    with socket.socket() as probe:  # a free port for the config
        probe.bind((LOCAL, 0))
        port = probe.getsockname()[1]
    config = dataclasses.replace(make_config(tmp_path, keys), listen_port=port)
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(serve(config, stop)))
    thread.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            with Client((LOCAL, port), keys["edge_a"]) as c:
                assert isinstance(c.hello(), Welcome)
            break
        except (OSError, paramiko.SSHException):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    stop.set()
    thread.join(10)
    assert result == [0]


# --- the worker pool ---------------------------------------------------------------------


def test_inspect_pool_reads_real_tsfiles_and_refuses_garbage(
    pool: InspectPool, tmp_path: Path
) -> None:
    good = tmp_path / "g.tsfile"
    good.write_bytes(tsfile_bytes(tmp_path, ["root.p.d2", "root.p.d1"], rows=4))
    info = pool.inspect(good)
    assert sorted(info.devices) == ["root.p.d1", "root.p.d2"]
    assert info.rows == 8
    bad = tmp_path / "b.tsfile"
    bad.write_bytes(b"TsFile" + b"\xff" * 64 + b"TsFile")
    with pytest.raises(FormatError):
        pool.inspect(bad)


def test_inspect_pool_survives_a_worker_crash_and_a_hang(tmp_path: Path) -> None:
    fine = FileInfo(("root.fine",), 1)
    with InspectPool(workers=1, timeout=60.0, target=crashing_inspect) as p:
        assert p.inspect(tmp_path / "fine.tsfile") == fine  # workers up
        with pytest.raises(FormatError, match="crash.tsfile: the file crashed the format reader"):
            p.inspect(tmp_path / "crash.tsfile")
        assert p.inspect(tmp_path / "fine.tsfile") == fine  # a new pool
        p.timeout = 0.5
        started = time.monotonic()
        with pytest.raises(FormatError, match=r"hang.tsfile: the format reader did not finish"):
            p.inspect(tmp_path / "hang.tsfile")
        assert time.monotonic() - started < 5
        p.timeout = 60.0
        assert p.inspect(tmp_path / "fine.tsfile") == fine


def test_service_takes_the_receiver_table_as_a_mapping(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    table = receiver_mapping(tmp_path, keys)
    table.update(schema_dir="dc/schema", data_dirs=["dc/data", "dc/data2"], max_sessions=3)
    (tmp_path / "dc" / "data2").mkdir()
    svc = ReceiverService({"receiver": table}, base_dir=tmp_path)
    assert svc.config.schema_dir == tmp_path / "dc" / "schema"
    assert svc.config.data_dirs == [tmp_path / "dc" / "data", tmp_path / "dc" / "data2"]
    assert svc.config.max_sessions == 3
    assert isinstance(svc.storage, DirectoryStorage)
    assert svc.storage.data_dirs == svc.config.data_dirs
    svc.stop()  # never started: still safe


SERVE_SCRIPT = """
import json, logging, sys
from pathlib import Path
from sealsync.config import ReceiverConfig
from receiver.serve import serve
logging.basicConfig(level=logging.INFO)
sys.exit(serve(ReceiverConfig.from_mapping(json.loads(sys.argv[1]), Path(sys.argv[2]))))
"""


def test_serve_stops_cleanly_on_sigterm(tmp_path: Path, keys: dict[str, Path]) -> None:
    with socket.socket() as probe:
        probe.bind((LOCAL, 0))
        port = probe.getsockname()[1]
    table = receiver_mapping(tmp_path, keys, listen=f"{LOCAL}:{port}")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT, json.dumps({"receiver": table}), str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with Client((LOCAL, port), keys["edge_a"]) as c:
                    assert isinstance(c.hello(), Welcome)
                break
            except (OSError, paramiko.SSHException):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert "received SIGTERM, stopping" in err
    assert "receiver stopped" in err
