"""``sync_to_receiver``: recovery first, select → snapshot → transfer → clean-up, retries.

The first tests run against the scripted receiver over a socketpair (exact frames);
the end-to-end test at the bottom runs the real receiver service over SSH.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sender_transfer_helpers import FakeReceiver, connect_fake, frame_kinds
from state_helpers import write_data_file

from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.durable import write_lines
from sealsync.protocol import Verdict
from sender import attempt as attempt_mod
from sender.attempt import sync_to_receiver
from sender.manage.history import read_round_record
from sender.manage.identity import hostname
from sender.manage.layout import SchemaPaths, SenderPaths
from sender.manage.state import read_file_set
from sender.transfer.errors import Unreachable
from sender.transfer.refusals import read_refusals, refused_path

RECEIVER = ReceiverEndpoint("dc1", "127.0.0.1", 5555)

A = "sequence/root.sg1/0/0/1-1-0.tsfile"
B = "sequence/root.sg1/0/0/2-2-0.tsfile"
C = "sequence/root.sg1/0/0/3-3-0.tsfile"
U = "unsequence/root.sg1/0/0/9-9-0.tsfile"
P = "sequence/root.sg2/1/0/5-5-0.parquet"


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import tenacity

    monkeypatch.setattr(attempt_mod, "ROUND_WAIT", tenacity.wait_none())


def make_config(tmp_path: Path, dirs: int = 2, **extra: object) -> SenderConfig:
    schema = tmp_path / "edge" / "schema"
    schema.mkdir(parents=True)
    data_dirs = []
    for i in range(dirs):
        d = tmp_path / "edge" / f"data{i}"
        d.mkdir(parents=True)
        data_dirs.append(d)
    args: dict[str, object] = {
        "schema_dir": schema,
        "data_dirs": data_dirs,
        "identity": tmp_path / "unused",
        "known_hosts": tmp_path / "unused",
        "receivers": [RECEIVER],
        "chunk_size": 4096,
    }
    args.update(extra)
    return SenderConfig(**args)  # type: ignore[arg-type]


class Peers:
    """A connector handing out one scripted receiver per connection."""

    def __init__(self, *peers: FakeReceiver) -> None:
        self.peers = list(peers)
        self.used: list[FakeReceiver] = []
        self.threads: list = []

    def __call__(self, config: SenderConfig, receiver: ReceiverEndpoint):
        peer = self.peers.pop(0)
        self.used.append(peer)
        conn, thread = connect_fake(peer)
        self.threads.append(thread)
        return conn

    def join(self) -> None:
        for t in self.threads:
            t.join(5)
        for p in self.used:
            assert p.error is None


def data(name: str) -> bytes:
    return (name.encode() + b"|") * 50


def put(data_dir: Path, *names: str, mods: bool = False) -> None:
    for name in names:
        write_data_file(
            data_dir, name, data(name), b"resource:" + name.encode(), mods=b"mods" if mods else None
        )


def stream(data_dir: Path, name: str) -> bytes:
    path = data_dir / name
    out = path.read_bytes() + Path(f"{path}.resource").read_bytes()
    mods = Path(f"{path}.mods")
    return out + (mods.read_bytes() if mods.exists() else b"")


def begins(peer: FakeReceiver) -> list[str]:
    return [v for k, v in peer.frames if k == "FILE_BEGIN"]


def assert_round_cleaned_up(config: SenderConfig) -> None:
    for d in config.data_dirs:
        paths = SenderPaths(d, RECEIVER.host, RECEIVER.port)
        assert not paths.sync_log.exists()
        assert not paths.snapshot.exists()
        assert not paths.current_local_files.exists()


def test_round_ships_everything_then_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d0, d1 = config.data_dirs
    put(d0, A, B, U)
    put(d1, P, mods=True)
    write_data_file(d0, C, b"not sealed yet", b"")
    (d0 / f"{C}.resource").unlink()  # no X.resource: not sealed, not shipped
    (d0 / "sequence" / "link.tsfile").symlink_to(d0 / A)
    schema = SchemaPaths(config.schema_dir, RECEIVER.host, RECEIVER.port)
    schema.schema_log.write_bytes(b"CREATE DATABASE root.sg1\n")
    peers = Peers(FakeReceiver(), FakeReceiver())

    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    first = peers.used[0]
    assert frame_kinds(first.frames)[:3] == ["HELLO", "SCHEMA", "ROUND_START"]
    assert [v for k, v in first.frames if k == "ROUND_START"] == [0, 1]
    assert begins(first) == [A, B, U, P]
    assert first.files == {n: stream(d0, n) for n in (A, B, U)} | {P: stream(d1, P)}
    assert bytes(first.schema) == b"CREATE DATABASE root.sg1\n"
    assert report.ok and report.attempts == 1 and report.schema_bytes == 25
    assert [d.shipped for d in report.dirs] == [[A, B, U], [P]]
    assert report.dirs[0].rejected == {"sequence/link.tsfile": "symbolic link, not followed"}
    assert report.shipped_files == 4
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == {A, B, U}
    assert read_file_set(SenderPaths(d1, "127.0.0.1", 5555).last_local_files) == {P}
    assert_round_cleaned_up(config)
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["ok"] is True
    assert as_json["dirs"][0]["shipped"] == [A, B, U]
    assert as_json["dirs"][1]["shipped_bytes"] == len(stream(d1, P))

    again = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert peers.used[1].frames == [("HELLO", peers.used[0].frames[0][1]), ("BYE", None)]
    assert again.ok and again.shipped_files == 0 and again.schema_bytes == 0
    assert_round_cleaned_up(config)


def test_deleted_file_is_sent_as_delete(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=1)
    d0 = config.data_dirs[0]
    put(d0, A, B)
    peers = Peers(FakeReceiver(), FakeReceiver())
    sync_to_receiver(config, RECEIVER, connector=peers)
    for suffix in ("", ".resource"):
        (d0 / f"{A}{suffix}").unlink()
    put(d0, C)
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    second = peers.used[1]
    assert [(k, v) for k, v in second.frames if k in ("DELETE", "FILE_BEGIN")] == [
        ("DELETE", A),
        ("FILE_BEGIN", C),
    ]
    assert report.dirs[0].deleted == [A] and report.dirs[0].shipped == [C]
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == {B, C}


def test_file_gaining_mods_is_not_deleted(tmp_path: Path) -> None:
    """docs/design.md §9.2: a synced file that gains X.mods must not be shipped as deleted; it
    ships again, whole, with its new X.mods (tests/test_mods_resend.py has the rest)."""
    config = make_config(tmp_path, dirs=1)
    d0 = config.data_dirs[0]
    put(d0, A)
    peers = Peers(FakeReceiver(), FakeReceiver(), FakeReceiver())
    sync_to_receiver(config, RECEIVER, connector=peers)
    (d0 / f"{A}.mods").write_bytes(b"deletion")
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    again = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    second, third = peers.used[1], peers.used[2]
    assert [(k, v) for k, v in second.frames if k in ("DELETE", "FILE_BEGIN")] == [
        ("FILE_BEGIN", A)
    ]
    assert second.files[A] == stream(d0, A) and second.files[A].endswith(b"deletion")
    assert report.dirs[0].deleted == [] and report.dirs[0].shipped == [A]
    assert third.frames[1:] == [("BYE", None)] and again.dirs[0].shipped == []
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == {A}


def test_recovery_runs_before_the_diff(tmp_path: Path) -> None:
    """docs/design.md §9.1: a crashed round's sync.log counts before the diff: A is not resent."""
    config = make_config(tmp_path, dirs=1)
    d0 = config.data_dirs[0]
    put(d0, A, B)
    paths = SenderPaths(d0, "127.0.0.1", 5555)
    paths.snapshot.mkdir(parents=True)
    write_lines(paths.sync_log, ["sync start", "sync tsfile start", A])
    peers = Peers(FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert begins(peers.used[0]) == [B]
    assert report.dirs[0].shipped == [B]
    assert read_file_set(paths.last_local_files) == {A, B}
    assert_round_cleaned_up(config)


def test_dropped_connection_is_retried_without_resending_verified_files(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, dirs=2, pipeline_depth=1)
    d0, d1 = config.data_dirs
    put(d0, A, B, C)
    put(d1, P)
    events: list[tuple[str, dict]] = []
    peers = Peers(FakeReceiver(drop_after_files=2), FakeReceiver())
    report = sync_to_receiver(
        config, RECEIVER, connector=peers, progress=lambda e, **f: events.append((e, f))
    )
    peers.join()
    # A was verified and logged before the drop; B's verdict never came.
    assert begins(peers.used[0]) == [A, B]
    assert begins(peers.used[1]) == [B, C, P]
    assert report.attempts == 2
    assert [d.shipped for d in report.dirs] == [[A, B, C], [P]]
    assert report.ok
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == {A, B, C}
    assert read_file_set(SenderPaths(d1, "127.0.0.1", 5555).last_local_files) == {P}
    assert [f["attempt"] for e, f in events if e == "retry"] == [1]
    assert_round_cleaned_up(config)


def test_gives_up_after_max_retries(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=1, pipeline_depth=1, max_retries=2)
    d0 = config.data_dirs[0]
    put(d0, A, B, C)
    peers = Peers(FakeReceiver(drop_after_files=1), FakeReceiver(drop_after_files=1))
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert len(peers.used) == 2
    assert report.attempts == 2 and not report.ok
    note = report.dirs[0].note
    assert note is not None and note.startswith("connection lost, gave up after 2 connections: ")
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == set()
    assert_round_cleaned_up(config)


def test_unreachable_on_first_connection_is_not_retried(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=1)
    calls = []

    def connector(config: SenderConfig, receiver: ReceiverEndpoint):
        calls.append(receiver)
        raise Unreachable("cannot connect to receiver 127.0.0.1:5555: Connection refused")

    with pytest.raises(Unreachable, match="Connection refused"):
        sync_to_receiver(config, RECEIVER, connector=connector)
    assert calls == [RECEIVER]


def test_busy_data_dir_makes_the_run_fail_but_others_go_on(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d0, d1 = config.data_dirs
    put(d0, A)
    put(d1, P)
    peers = Peers(FakeReceiver(busy={0}))
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert begins(peers.used[0]) == [P]
    assert not report.ok
    assert report.dirs[0].note is not None and "busy" in report.dirs[0].note
    assert report.dirs[1].ok
    assert read_file_set(SenderPaths(d0, "127.0.0.1", 5555).last_local_files) == set()
    assert_round_cleaned_up(config)


def test_conflict_is_remembered_across_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sender.transfer import files as files_mod

    monkeypatch.setattr(files_mod, "_devices", lambda path, inspect: ("root.sg1.d1",))
    config = make_config(tmp_path, dirs=1)
    d0 = config.data_dirs[0]
    put(d0, A, B)
    other = "fedcba98-7654-3210-fedc-ba9876543210"

    def policy(name: str, attempt: int, data: bytes) -> tuple[str, str]:
        if name == B:
            return Verdict.CONFLICT, f"device root.sg1.d1 is owned by sender {other}"
        return Verdict.VERIFIED, ""

    owned = {"root.sg1.d1": other}
    peers = Peers(FakeReceiver(policy=policy), FakeReceiver(owners=owned), FakeReceiver(owners={}))
    first = sync_to_receiver(config, RECEIVER, connector=peers)
    second = sync_to_receiver(config, RECEIVER, connector=peers)
    paths = SenderPaths(d0, "127.0.0.1", 5555)
    assert list(read_refusals(refused_path(paths))) == [B]
    third = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()

    assert not first.ok and first.dirs[0].refused == {
        B: f"conflict: device root.sg1.d1 is owned by sender {other}"
    }
    assert begins(peers.used[1]) == []
    assert [v for k, v in peers.used[1].frames if k == "OWNERS_QUERY"] == [("root.sg1.d1",)]
    assert not second.ok and list(second.dirs[0].refused) == [B]
    assert begins(peers.used[2]) == [B]
    assert third.ok and third.dirs[0].shipped == [B]
    assert not refused_path(paths).exists()
    assert read_file_set(paths.last_local_files) == {A, B}


def test_progress_reports_bytes(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=1)
    d0 = config.data_dirs[0]
    put(d0, A, B)
    events: list[tuple[str, dict]] = []
    peers = Peers(FakeReceiver())
    sync_to_receiver(
        config, RECEIVER, connector=peers, progress=lambda e, **f: events.append((e, f))
    )
    peers.join()
    total = len(stream(d0, A)) + len(stream(d0, B))
    starts = [f for e, f in events if e == "dir_start"]
    assert starts == [{"index": 0, "files": 2, "bytes": total, "deleted": 0}]
    sent = [f["sent"] for e, f in events if e == "bytes"]
    assert sent[-1] == total
    assert [f["name"] for e, f in events if e == "file"] == [A, B]


def test_nothing_to_do_creates_no_state(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=1)
    peers = Peers(FakeReceiver())
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert report.ok
    folder = SenderPaths(config.data_dirs[0], RECEIVER.host, RECEIVER.port).folder
    assert sorted(p.name for p in folder.iterdir()) == ["last_round.json"]  # only the record
    record = read_round_record(SenderPaths(config.data_dirs[0], RECEIVER.host, RECEIVER.port))
    assert record is not None and record["ok"] is True and record["shipped"] == 0
    assert [d.complete for d in report.dirs] == [True]


# --- end to end over SSH, against the real receiver service -------------------------------


class Site:
    """A real receiver service on loopback and sender configs that trust it."""

    def __init__(self, tmp_path: Path) -> None:
        import dataclasses

        from receiver.service import ReceiverService
        from sealsync.config import ReceiverConfig
        from sealsync.formats import inspect
        from sealsync.keys import generate_keypair

        self.tmp = tmp_path
        self.keys = tmp_path / "keys"
        generate_keypair(self.keys / "host", comment="host")
        for sender in ("edge_a", "edge_b"):
            generate_keypair(self.keys / sender, comment=sender)
        (self.keys / "authorized_keys").write_text(
            (self.keys / "edge_a.pub").read_text() + (self.keys / "edge_b.pub").read_text()
        )
        self.data_dirs = [tmp_path / "dc" / "data0", tmp_path / "dc" / "data1"]
        for folder in (*self.data_dirs, tmp_path / "dc" / "schema"):
            folder.mkdir(parents=True)
        config = ReceiverConfig.from_mapping(
            {
                "listen": "127.0.0.1:1",
                "host_key": str(self.keys / "host"),
                "authorized_keys": str(self.keys / "authorized_keys"),
                "schema_dir": str(tmp_path / "dc" / "schema"),
                "data_dirs": [str(d) for d in self.data_dirs],
            },
            tmp_path,
        )
        self.config = dataclasses.replace(config, listen_port=0)
        self.service = ReceiverService(self.config, inspect=inspect, load_wait=10.0).start()
        self.port = self.service.address[1]
        key_type, blob = (self.keys / "host.pub").read_text().split()[:2]
        (self.keys / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {key_type} {blob}\n")
        self.endpoint = ReceiverEndpoint("dc", "127.0.0.1", self.port)

    def sender(self, edge, key: str) -> SenderConfig:
        return SenderConfig(
            schema_dir=edge.schema_dir,
            data_dirs=list(edge.data_dirs),
            identity=self.keys / key,
            known_hosts=self.keys / "known_hosts",
            receivers=[self.endpoint],
            chunk_size=65536,  # so that one file goes in several chunks
        )

    def landed(self, sender_uuid: str, data_dir: int, name: str) -> Path:
        """Where the default storage puts a sender's file (receiver_api.md)."""
        folder, file = name.rsplit("/", 1)
        return self.data_dirs[data_dir % len(self.data_dirs)] / folder / sender_uuid / file


def _uuid_of(config: SenderConfig) -> str:
    import uuid

    from sender.manage.identity import sender_uuid

    return str(uuid.UUID(sender_uuid(config.schema_dir)))


def _assert_mirrored(site: Site, edge, config: SenderConfig) -> None:
    """Every sealed file of every data dir is on the receiver, byte for byte, sidecars too."""
    me = _uuid_of(config)
    for i in range(len(edge.data_dirs)):
        for name in edge.sealed_files(i):
            for suffix in ("", ".resource", ".mods2"):
                source = edge.path(name + suffix, i)
                target = site.landed(me, i, name + suffix)
                assert target.exists() == source.exists(), target
                if source.exists():
                    assert target.read_bytes() == source.read_bytes(), target


@pytest.mark.slow
def test_end_to_end_over_ssh(tmp_path: Path) -> None:
    from sealsync.simulator import EdgeInstance

    site = Site(tmp_path)
    try:
        edge = EdgeInstance(tmp_path / "edge_a", data_dirs=2)
        names = [
            edge.write_file(
                "root.sg1", 0, devices=["root.sg1.d1", "root.sg1.d2"], rows_per_device=20
            ),
            edge.write_file(
                "root.sg1",
                0,
                devices=["root.sg1.d1"],
                rows_per_device=5,
                start_ms=100_000,
                unsequence=True,
            ),
            edge.write_file("root.sg2", 1, devices=["root.sg2.d1"], rows_per_device=30000),
            edge.write_file(
                "root.sg3", 0, devices=["root.sg3.d1"], rows_per_device=10, fmt="parquet"
            ),
            edge.write_file("root.sg4", 0, devices=["root.sg4.d1"], rows_per_device=10, data_dir=1),
            edge.write_file(
                "root.sg4",
                1,
                devices=["root.sg4.d2"],
                rows_per_device=10,
                unsequence=True,
                data_dir=1,
            ),
        ]
        unsealed = edge.write_file(
            "root.sg1", 0, devices=["root.sg1.d3"], rows_per_device=3, seal=False
        )
        edge.add_mods(names[0], "root.sg1.d1", 5000)
        edge.append_schema(["CREATE DATABASE root.sg1", "CREATE DATABASE root.sg2"])
        config = site.sender(edge, "edge_a")
        big = edge.path(names[2])
        assert big.stat().st_size > 2 * config.chunk_size

        report = sync_to_receiver(config, site.endpoint)
        assert report.ok, report.to_dict()
        assert [sorted(d.shipped) for d in report.dirs] == [sorted(names[:4]), sorted(names[4:])]
        assert [d.loaded for d in report.dirs] == [True, True]
        assert report.schema_bytes == len((edge.schema_dir / "mlog.txt").read_bytes())
        _assert_mirrored(site, edge, config)
        assert not site.landed(_uuid_of(config), 0, unsealed).exists()

        # the database moves on: a file sealed, one expired, two merged
        edge.seal(unsealed)
        edge.delete(names[1])
        merged = edge.merge([names[4], names[5]], "root.sg4", 0, data_dir=1)
        second = sync_to_receiver(config, site.endpoint)
        assert second.ok, second.to_dict()
        assert [d.shipped for d in second.dirs] == [[unsealed], [merged]]
        assert [d.deleted for d in second.dirs] == [[names[1]], sorted(names[4:])]
        _assert_mirrored(site, edge, config)
        for gone, i in ((names[1], 0), (names[4], 1), (names[5], 1)):
            assert not site.landed(_uuid_of(config), i, gone).exists()

        third = sync_to_receiver(config, site.endpoint)
        assert third.ok and third.shipped_files == 0 and third.schema_bytes == 0
        assert_round_cleaned_up(config)
    finally:
        site.service.stop()


@pytest.mark.slow
def test_conflict_end_to_end(tmp_path: Path) -> None:
    """Sender B offers a device A owns: refused with the reason, remembered, skipped
    while owned (OWNERS_QUERY), shipped once an operator releases the device."""
    from receiver.load.owners import DeviceOwners
    from sealsync.simulator import EdgeInstance

    site = Site(tmp_path)
    try:
        edge_a = EdgeInstance(tmp_path / "edge_a")
        edge_b = EdgeInstance(tmp_path / "edge_b")
        edge_a.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=5)
        clash = edge_b.write_file(
            "root.sg1",
            0,
            devices=["root.sg1.d1", "root.sg1.d9"],
            rows_per_device=5,
            start_ms=50_000,
        )
        fine = edge_b.write_file("root.sg2", 0, devices=["root.sg2.d1"], rows_per_device=5)
        config_a, config_b = site.sender(edge_a, "edge_a"), site.sender(edge_b, "edge_b")
        assert sync_to_receiver(config_a, site.endpoint).ok

        first = sync_to_receiver(config_b, site.endpoint)
        assert not first.ok
        assert first.dirs[0].shipped == [fine]
        assert first.dirs[0].refused == {
            clash: f"conflict: device root.sg1.d1 is owned by sender '{hostname()}'"
        }  # named by its HELLO name (the host's, by default), never by its UUID
        paths = SenderPaths(edge_b.data_dirs[0], "127.0.0.1", site.port)
        remembered = read_refusals(refused_path(paths))
        assert list(remembered) == [clash]
        assert remembered[clash].devices == ("root.sg1.d1", "root.sg1.d9")
        assert read_file_set(paths.last_local_files) == {fine}

        second = sync_to_receiver(config_b, site.endpoint)
        assert second.dirs[0].shipped == []
        assert second.dirs[0].refused == {
            clash: f"conflict: device root.sg1.d1 owned by sender '{hostname()}' on the receiver; "
            "not resent until released there (`sealsync owners release`)"
        }

        assert DeviceOwners(site.config.schema_dir).release(["root.sg1.d1"]) == ["root.sg1.d1"]
        third = sync_to_receiver(config_b, site.endpoint)
        assert third.ok, third.to_dict()
        assert third.dirs[0].shipped == [clash]
        assert not refused_path(paths).exists()
        assert site.landed(_uuid_of(config_b), 0, clash).read_bytes() == (
            edge_b.path(clash).read_bytes()
        )
    finally:
        site.service.stop()


def test_round_trips_overlap_the_senders_own_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ROUND_START goes out before the snapshot is taken (its answer is read after), and
    # the last round's ROUND_END carries the BYE: on a WAN link each of these was a round
    # trip of its own. Earlier rounds still wait for ROUND_DONE before going on.
    import select
    import socket
    import threading

    from sealsync.protocol import RoundEnd, RoundStart

    config = make_config(tmp_path)
    d0, d1 = config.data_dirs
    put(d0, A)
    put(d1, P)
    asked = threading.Semaphore(0)
    asked_first: list[bool] = []
    bye_waiting: list[bool] = []
    real_snapshot = attempt_mod.take_snapshot

    def take_snapshot(*args: object, **kwargs: object) -> object:
        asked_first.append(asked.acquire(timeout=5))  # ROUND_START reached the receiver
        return real_snapshot(*args, **kwargs)  # type: ignore[arg-type]

    def probe(msg: object, sock: socket.socket) -> None:
        if isinstance(msg, RoundStart):
            asked.release()
        elif isinstance(msg, RoundEnd):
            bye_waiting.append(bool(select.select([sock], [], [], 0)[0]))

    monkeypatch.setattr(attempt_mod, "take_snapshot", take_snapshot)
    peers = Peers(FakeReceiver(on_frame=probe))
    report = sync_to_receiver(config, RECEIVER, connector=peers)
    peers.join()
    assert report.ok
    assert asked_first == [True, True]
    assert bye_waiting == [False, True]
    assert frame_kinds(peers.used[0].frames)[-2:] == ["ROUND_END", "BYE"]
