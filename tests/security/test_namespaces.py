"""One sender against another's files and against the receiver's folders (issue 35,
items 1, 4, 5), each against a real ``sealsync serve`` with the honest sender's real
``sealsync send``; the hostile sender is a raw client on the project's protocol module
with the second authorized key.

* A sender once wrote inside another sender's storage folder (a name with the other's
  UUID as a folder), or squatted the path of a file's ``.mods``; it learnt the other's
  UUID from ``OWNERS`` and from conflict verdicts.
* Deleting deep-named files left their folders behind (inodes no quota counts).
* Partial uploads were kept per source address: one sender held three times
  ``max_partial_bytes`` from three addresses, outside its quota, expired only when that
  address started a round.
* A link at a folder the receiver makes carried writes (and a sweep's deletions) out.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from receiver_service_helpers import tsfile_bytes
from reliability.figures import record

from sealsync.protocol import (
    ANOTHER_SENDER,
    Chunk,
    Delete,
    DeleteAck,
    Error,
    FileBegin,
    FileVerdict,
    Owners,
    OwnersQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    Schema,
    Welcome,
)
from security.attacks import Site, SourcedClient, snapshot

pytestmark = pytest.mark.slow

MiB = 1 << 20


def _claims(site: Site) -> dict[str, str]:
    """device -> owner, from the receiver's device_owner.log."""
    owners: dict[str, str] = {}
    path = site.dep.receiver_schema / "sync" / "device_owner.log"
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if parts[0] == "claim":
            owners.setdefault(parts[2], parts[1])
        elif parts[0] == "release":
            owners.pop(parts[1], None)
    return owners


def _ship(client: SourcedClient, files: list[tuple[str, bytes]]) -> list[FileVerdict]:
    for i, (name, data) in enumerate(files, 1):
        client.send_file(i, name, data)
    verdicts = []
    for _ in files:
        answer = client.recv()
        assert isinstance(answer, FileVerdict), answer
        verdicts.append(answer)
    return verdicts


def _end_round(client: SourcedClient) -> None:
    client.send(RoundEnd())
    assert isinstance(client.recv(), RoundDone)


def test_a_sender_cannot_reach_into_another_senders_folder(tmp_path: Path) -> None:
    """Sender B ships files named with A's UUID as a folder (A's next file name as a
    folder under it), and folders named like A's sidecars; A's round then ships all of
    its files, verified and loaded. B learns no UUID of A's, and its deep-named files,
    once deleted, leave no folder behind."""
    site = Site(tmp_path / "site")
    site.start()
    a = site.honest.uuid
    b = str(uuid.uuid4())
    names = sorted(site.names)
    group = "/".join(names[0].split("/")[:-1])  # sequence/<group>/<partition>
    hostile = [
        f"{group}/{a}/{names[0].rsplit('/', 1)[1]}/x.tsfile",
        f"{group}/{a.upper()}/y.tsfile",
        f"{group}/{names[0].rsplit('/', 1)[1]}.mods/z.tsfile",
        f"{group}/{b}/{names[0].rsplit('/', 1)[1]}.mods/z.tsfile",
        f"{group}/w.tsfile.resource/z.tsfile",
        f"{group}/.incoming-x/z.tsfile",
    ]
    deep = ["sequence/" + "/".join(f"d{i}-{j}" for j in range(40)) + "/f.tsfile" for i in range(5)]
    try:
        with SourcedClient(site.address, site.hostile_key, "127.0.0.2") as client:
            assert isinstance(client.hello(b), Welcome)
            assert client.round_start() == RoundReady("ready", "")
            body = [(n, tsfile_bytes(tmp_path, ["root.hostile.d1"])) for n in hostile]
            squat = _ship(client, body)
            kept = _ship(client, [(n, tsfile_bytes(tmp_path, ["root.hostile.d2"])) for n in deep])
            _end_round(client)
        code, stderr = site.honest_round()
        devices = [d for d, owner in _claims(site).items() if owner == a]
        with SourcedClient(site.address, site.hostile_key, "127.0.0.2") as client:
            assert isinstance(client.hello(b), Welcome)
            client.send(OwnersQuery(devices[:5]))
            owners = client.recv()
            assert client.round_start() == RoundReady("ready", "")
            for name in deep:
                client.send(Delete(name))
                assert client.recv() == DeleteAck(name)
            conflict = _ship(client, [(f"{group}/c.tsfile", tsfile_bytes(tmp_path, devices[:1]))])
            client.send(OwnersQuery(devices[:5]))
            told = client.recv()  # what the conflict verdict named, and only that
            _end_round(client)
        time.sleep(1.0)  # the folder loader applies the deletions
    finally:
        site.stop()
    data = site.dep.receiver_data
    honest = {f"{'/'.join(n.split('/')[:-1])}/{a}/{n.split('/')[-1]}" for n in names}
    strays = []  # anything in A's folders but A's files and their sidecars
    for path in data.rglob("*"):
        rel = path.relative_to(data).as_posix()
        if a in path.parts and not rel.startswith("sync-receiver/"):
            if (
                path.is_dir()
                and path.name != a
                or path.is_file()
                and (rel.removesuffix(".resource").removesuffix(".mods") not in honest)
            ):
                strays.append(rel)
    leftover = [p for p in (data / "sequence").iterdir() if p.name.startswith("d")]
    leaked = a in repr(owners) + repr(told) or any(a in v.reason for v in conflict)
    held = (
        code == 0
        and site.honest_files_loaded()
        and all(v.status == "refused" for v in squat)
        and not strays
        and not leftover
        and not leaked
    )
    record("security", attack="a sender ships into another sender's folder", tried=12, held=held)
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert [v.status for v in squat] == ["refused"] * len(hostile), squat
    assert all("stores no file named so" in v.reason for v in squat)
    assert [v.status for v in kept] == ["verified"] * len(deep), kept
    assert strays == [], strays
    assert leftover == [], leftover  # the deletions removed the folders they emptied
    assert owners == Owners({})  # A's devices, guessed right: nothing said of them
    assert told == Owners({devices[0]: ANOTHER_SENDER})
    assert [v.status for v in conflict] == ["conflict"]
    # the owner is named by its HELLO name, never by its UUID
    assert "is owned by sender '" in conflict[0].reason and a not in conflict[0].reason


def _partial_bytes(site: Site) -> int:
    """Bytes of kept partial uploads on the receiver (every sender folder)."""
    top = site.dep.receiver_data / "sync-receiver"
    return sum(
        p.stat().st_size for p in top.rglob("*") if p.is_file() and p.parent.name == "partial"
    )


def _cut_stream(site: Site, source: str, sender: str, name: str, size: int, sent: int) -> None:
    """Open a round from ``source``, stream ``sent`` bytes of a resumable ``size``-byte
    file, and drop the connection (a partial upload for the receiver to keep)."""
    client = SourcedClient(site.address, site.hostile_key, source)
    try:
        assert isinstance(client.hello(sender), Welcome)
        answer = client.round_start()
        if answer != RoundReady("ready", ""):
            assert isinstance(answer, Error) and "symbolic link" in answer.message, answer
            return  # a link at the sender's own folder: the round is refused, naming it
        client.send(FileBegin(1, name, size, 3, -1, 1_700_000_000_000_000_000))
        block = os.urandom(MiB)
        for _ in range(sent // MiB):
            client.send(Chunk(block))
        time.sleep(0.5)  # the receiver reads it all before the cut
    finally:
        client.close()


def test_partials_are_the_senders_whatever_address_it_uses(tmp_path: Path) -> None:
    """Three source addresses, one sender, a cut 7 MiB stream from each: the kept
    partials stay within ``max_partial_bytes`` (16 MiB) together, and within the
    quota; the timer expires them without any round of that sender."""
    cap = 16 * MiB
    site = Site(
        tmp_path / "site",
        max_partial_bytes=cap,
        sender_quota_bytes=64 * MiB,
        partial_max_age=20.0,
    )
    site.start()
    b = str(uuid.uuid4())
    peak = 0
    try:
        for i, source in enumerate(("127.0.0.2", "127.0.0.3", "127.0.0.4")):
            _cut_stream(site, source, b, f"sequence/root.p/0/{i}.tsfile", 8 * MiB, 7 * MiB)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the session's end keeps it
                time.sleep(0.3)
                if f"kept {7 * MiB}" in site.dep.log() or i == 2:
                    break
            peak = max(peak, _partial_bytes(site))
        time.sleep(2.0)
        peak = max(peak, _partial_bytes(site))
        kept_before_expiry = _partial_bytes(site)
        deadline = time.monotonic() + 40
        while _partial_bytes(site) and time.monotonic() < deadline:
            time.sleep(1.0)
        expired = _partial_bytes(site) == 0
        code, stderr = site.honest_round()
    finally:
        site.stop()
    held = peak <= cap and expired and code == 0 and site.honest_files_loaded()
    attack = "partials from three addresses over max_partial_bytes"
    record("security", attack=attack, tried=3, held=held)
    assert kept_before_expiry > 0, site.dep.log()
    assert peak <= cap, f"{peak} bytes of partial uploads kept (max_partial_bytes {cap})"
    assert expired, "the partial uploads never expired without a round"
    assert code == 0, stderr
    assert site.honest_files_loaded()


LINKED = [
    "sync-receiver/{ip}_{a}",
    "sync-receiver/{ip}_{a}/data",
    "sync-receiver/{ip}_{a}/data/{group}",
    "sync-receiver/{b}",
    "sync-receiver/{b}/partial",
    "sync-receiver/127.0.0.2_{b}/partial",  # where earlier versions kept them
    "{group}/{a}",
]


@pytest.mark.parametrize("where", LINKED)
def test_no_link_under_the_receivers_folders_is_followed(tmp_path: Path, where: str) -> None:
    """A link, pointing outside, planted at a folder the receiver makes: the honest
    sender's round, a hostile sender's cut stream (kept as a partial upload), the
    sweeps at round start and on the timer, and a restart's recovery all run; nothing
    outside changes, and once the link is gone the honest sender's files all load."""
    site = Site(tmp_path / "site", partial_max_age=2.0)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    for i in range(3):
        (outside / f"precious-{i}.tsfile").write_bytes(b"not the receiver's %d" % i)
        (outside / "sub" / f"x{i}.json").write_text("{}")
    b = str(uuid.uuid4())
    group = "/".join(sorted(site.names)[0].split("/")[:2])
    planted = where.format(ip="127.0.0.1", a=site.honest.uuid, b=b, group=group)
    link = site.dep.receiver_data / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    site.start()
    try:
        first = site.honest.send()
        _cut_stream(site, "127.0.0.2", b, "sequence/root.l/0/big.tsfile", 6 * MiB, 5 * MiB)
        time.sleep(4.0)  # the timer's sweep (partial_max_age 2 s)
        site.stop()
        site.start()  # recovery and its sweeps
        after_restart = snapshot(outside)
        site.stop()
        link.unlink(missing_ok=True)  # the receiver may have removed the link itself
        site.start()
        code, stderr = site.honest_round()
    finally:
        site.stop()
    log = (site.dep.root / "receiver.log").read_text(errors="replace")
    held = after_restart == before and code == 0 and site.honest_files_loaded()
    shown = where.format(ip="<ip>", a="<uuid>", b="<uuid>", group="<group>")
    record("security", attack=f"link planted at {shown}", tried=1, held=held)
    assert after_restart == before, "something outside the receiver's folders changed"
    assert snapshot(outside) == before
    assert "Traceback" not in first.stderr + log
    assert code == 0, stderr
    assert site.honest_files_loaded()


def test_a_link_at_the_receivers_own_state_folders_is_refused(tmp_path: Path) -> None:
    """``sync-receiver`` in a data dir a link: ``serve`` stops at start in one line naming
    it, writing nothing outside. A link at a sender's schema-copy folder: that sender's
    SCHEMA is refused, nothing is appended outside, the honest sender is served."""
    site = Site(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    before = snapshot(outside)
    state = site.dep.receiver_data / "sync-receiver"
    moved = tmp_path / "moved-state"
    if state.exists():
        state.rename(moved)
    state.symlink_to(outside, target_is_directory=True)
    site.dep.start_receiver(wait=False)
    assert site.dep.proc is not None
    code = site.dep.proc.wait(60)
    site.dep.proc = None
    refused_start = snapshot(outside) == before and code != 0
    assert code != 0
    assert "is a symbolic link, and the receiver follows none" in site.dep.log()
    assert snapshot(outside) == before
    state.unlink()
    if moved.exists():
        moved.rename(state)

    b = str(uuid.uuid4())
    copy = site.dep.receiver_schema / "sync" / "senders" / b
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.symlink_to(outside, target_is_directory=True)
    site.start()
    try:
        with SourcedClient(site.address, site.hostile_key, "127.0.0.2") as client:
            assert isinstance(client.hello(b), Welcome)
            client.send(Schema(0, b"create timeseries root.x.s1\n"))
            answer = client.recv()
        code, stderr = site.honest_round()
    finally:
        site.stop()
    held = refused_start and snapshot(outside) == before and code == 0
    record("security", attack="link at the receiver's own state folders", tried=2, held=held)
    assert isinstance(answer, Error) and "symbolic link" in answer.message, answer
    assert snapshot(outside) == before
    assert code == 0, stderr
    assert site.honest_files_loaded()
