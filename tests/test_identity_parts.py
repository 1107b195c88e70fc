"""The parts behind fleet identity and storage liveness, without processes: identity
leases (receiver/leases.py) and a session's gates (receiver/gate.py), device scopes
(receiver/load/owners.py), the storage watch (receiver/liveness.py) and the record of
the storage kept outside it (receiver/identity.py). The slow tests replay the same
with real ``serve`` and ``send`` processes (test_sender_clone.py,
test_storage_liveness.py, test_device_scope.py)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from config_helpers import make_receiver

from receiver.gate import SessionGate, StorageGone
from receiver.identity import MARKER, folders, read_record, record_path, require_storage
from receiver.leases import Leases, Refused
from receiver.liveness import StorageWatch
from receiver.load.owners import DeviceOwners
from receiver.metrics import ReceiverMetrics
from sealsync.config import ReceiverConfig, load_receiver_config
from sealsync.errors import ConfigError
from sealsync.protocol import LEASE_RE, ErrorCode, Hello, Lease, ProtocolError

UUID = "3f672bfa-8ba5-4379-999d-5342ef54edc1"
OTHER = "11111111-2222-4333-8444-555555555555"


def offer(leases: Leases, token: str = "", reclaim: bool = False, host: str = "a") -> str:
    """A session's exchange: offered, then recorded at the sender's next frame."""
    grant = leases.offer(UUID, token, reclaim, "edge", host, "10.0.0.7")
    leases.confirm(grant)
    return grant.token


def test_each_session_takes_the_next_lease_and_an_older_one_is_refused(tmp_path: Path) -> None:
    leases = Leases(tmp_path)
    first = offer(leases)
    assert LEASE_RE.match(first) and first.startswith("1-")
    second = offer(leases, first)
    assert second.startswith("2-")
    with pytest.raises(Refused) as refused:  # a copy still holding the first
        leases.offer(UUID, first, False, "edge", "b", "10.0.0.8")
    assert str(refused.value).startswith(
        f"sender {UUID} is in use by another host: 'a' at 10.0.0.7 (since "
    )
    assert "this host 'b' at 10.0.0.8 holds an older lease of it" in str(refused.value)
    with pytest.raises(Refused, match="holds no lease of it this receiver granted"):
        leases.offer(UUID, "", False, "edge", "b", "10.0.0.8")
    forged = second[:-1] + ("0" if second[-1] != "0" else "1")
    with pytest.raises(Refused):
        leases.offer(UUID, forged, False, "edge", "b", "10.0.0.8")
    assert leases.name_of(UUID) == "edge"


def test_a_session_cut_before_either_side_recorded_leaves_them_in_step(tmp_path: Path) -> None:
    leases = Leases(tmp_path)
    first = offer(leases)
    leases.offer(UUID, first, False, "edge", "a", "x")  # cut before the sender recorded it
    second = offer(leases, first)  # it presents the one it holds: taken
    assert second.startswith("2-")
    # cut after the sender recorded the grant, before its next frame reached the receiver
    kept = leases.offer(UUID, second, False, "edge", "a", "x")
    assert offer(leases, kept.token).startswith(f"{kept.number + 1}-")


def test_of_two_grants_of_one_lease_only_the_first_recorded_stands(tmp_path: Path) -> None:
    leases = Leases(tmp_path)
    first = offer(leases)
    original = leases.offer(UUID, first, False, "edge", "a", "x")
    copy = leases.offer(UUID, first, False, "edge", "b", "y")  # before either recorded it
    leases.confirm(original)
    with pytest.raises(Refused):
        leases.confirm(copy)
    with pytest.raises(Refused):
        leases.offer(UUID, copy.token, False, "edge", "b", "y")


def test_reclaim_takes_the_lease_back_and_the_other_host_is_refused(tmp_path: Path) -> None:
    leases = Leases(tmp_path)
    first = offer(leases, host="a")
    taken = offer(leases, first, host="a")
    restored = offer(leases, first, reclaim=True, host="b")  # an older lease, reclaimed
    with pytest.raises(Refused):
        offer(leases, taken, host="a")
    assert offer(leases, restored, host="b")


def test_a_restored_receiver_takes_its_senders_newer_leases(tmp_path: Path) -> None:
    leases = Leases(tmp_path)
    first = offer(leases)
    record = tmp_path / "sync" / "senders" / UUID / "lease.json"
    backup = record.read_bytes()
    newer = offer(leases, offer(leases, first))
    record.write_bytes(backup)  # the schema dir restored: its record two leases behind
    assert offer(leases, newer).startswith("4-")
    record.unlink()  # no record at all: a first lease, whatever is presented
    assert offer(leases, "").startswith("1-")


def gate(tmp_path: Path, problem: list[str | None]) -> tuple[SessionGate, Leases]:
    leases = Leases(tmp_path)
    return SessionGate(lambda: problem[0], leases, ReceiverMetrics(), "10.0.0.7"), leases


def test_the_gate_wants_the_lease_before_a_write_and_the_storage_there(tmp_path: Path) -> None:
    problem: list[str | None] = [None]
    first, leases = gate(tmp_path, problem)
    assert first.hello(Hello(2, UUID, "edge")) == 2
    first.admitted(UUID, "edge", 2)
    first.may_write()  # no record yet: a new sender
    token = first.lease(Lease("", "edge:/schema", False)).lease
    first.arrived()  # the sender's next frame: recorded
    assert leases.holder(UUID) is not None
    with pytest.raises(ProtocolError) as twice:
        first.lease(Lease(token, "edge:/schema", False))
    assert twice.value.code == ErrorCode.UNEXPECTED

    second, _ = gate(tmp_path, problem)
    second.admitted(UUID, "edge", 2)
    with pytest.raises(ProtocolError) as unleased:
        second.may_write()
    assert unleased.value.code == ErrorCode.IDENTITY
    with pytest.raises(ProtocolError) as older:
        second.lease(Lease("", "copy:/schema", False))
    assert older.value.code == ErrorCode.IDENTITY

    old, _ = gate(tmp_path, problem)
    with pytest.raises(ProtocolError) as v1:
        old.admitted(UUID, "edge", 1)
    assert v1.value.code == ErrorCode.AUTH and "upgrade this sender" in str(v1.value)

    problem[0] = "storage gone: data_dirs[0] /srv/data vanished"
    third, _ = gate(tmp_path, problem)
    with pytest.raises(StorageGone) as gone:
        third.hello(Hello(2, UUID, "edge"))
    assert gone.value.code == ErrorCode.IO and str(gone.value) == problem[0]


def test_device_scopes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    owners = DeviceOwners(tmp_path)
    owners.names = {UUID: "plant-a"}.get
    assert owners.claim(["root.plant.line1"], UUID) == {}
    assert owners.claim(["root.plant.line1"], OTHER) == {"root.plant.line1": UUID}
    assert owners.describe(UUID) == "sender 'plant-a'" and owners.describe(OTHER) == (
        "another sender"
    )
    owners.set_scope("sender")
    assert owners.claim(["root.plant.line1", "root.plant.line2"], OTHER) == {}
    assert owners.owners_of(["root.plant.line1", "root.plant.line2"], asking=OTHER) == {
        "root.plant.line1": OTHER,
        "root.plant.line2": OTHER,
    }
    assert owners.owners_of(["root.plant.line2"], asking=UUID) == {"root.plant.line2": ""}
    reader = DeviceOwners(tmp_path)  # another process (sealsync owners) reads the scope
    assert reader.scope == "sender"
    assert reader.by_owner() == {
        UUID: ["root.plant.line1"],
        OTHER: ["root.plant.line1", "root.plant.line2"],
    }
    with caplog.at_level(logging.INFO, logger="sealsync"):
        owners.set_scope("receiver")
    assert "1 devices were claimed by several senders" in caplog.text
    assert owners.claim(["root.plant.line1"], OTHER) == {"root.plant.line1": UUID}
    assert DeviceOwners(tmp_path).by_owner()[UUID] == ["root.plant.line1"]


def receiver_config(tmp_path: Path) -> ReceiverConfig:
    return load_receiver_config(make_receiver(tmp_path))


def test_the_watch_sees_a_folder_replaced_its_marker_lost_and_the_storage_back(
    tmp_path: Path,
) -> None:
    config = receiver_config(tmp_path)
    storage = require_storage(config, init=True)
    watch = StorageWatch(folders(config))
    watch.start()
    metrics = ReceiverMetrics()
    metrics.storage_ok = lambda: watch.ok
    assert watch.check() is None and watch.ok
    data = tmp_path / "dc" / "data"
    os.rename(data, tmp_path / "moved")
    data.mkdir()
    problem = watch.check()
    assert problem is not None and problem.startswith(
        f"storage gone: data_dirs[0] {data} (storage {storage}) is another folder now"
    )
    gauge = [m for m in metrics.collect() if m.name == "sealsync_receiver_storage_ok"]
    assert [s.value for s in gauge[0].samples] == [0]
    data.rmdir()
    os.rename(tmp_path / "moved", data)
    assert watch.check() is None and watch.ok
    (data / MARKER).rename(tmp_path / "marker")
    assert f"lost its {MARKER}" in (watch.check() or "")
    (tmp_path / "marker").rename(data / MARKER)
    os.rename(data, tmp_path / "moved")
    assert " vanished since the receiver started" in (watch.check() or "")


def test_the_record_outside_the_storage(tmp_path: Path) -> None:
    config = receiver_config(tmp_path)
    storage = require_storage(config, init=True)
    record = read_record(config)
    assert record is not None and record.storage == storage
    assert record.path == record_path(config) and record.path.parent == tmp_path / "keys"
    body = json.loads(record.path.read_text())
    assert body["folders"] == [str(tmp_path / "dc" / "schema"), str(tmp_path / "dc" / "data")]
    (tmp_path / "dc" / "data" / MARKER).unlink()
    with pytest.raises(ConfigError, match="storage gone: .* holds no sealsync storage"):
        require_storage(config, init=True)
    with pytest.raises(ConfigError, match=f"the storage this receiver served is {storage}"):
        require_storage(config, init=True, replaces=OTHER)
    assert require_storage(config, init=True, replaces=storage) == storage
    assert json.loads((tmp_path / "dc" / "data" / MARKER).read_text())["storage"] == storage
