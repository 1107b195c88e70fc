"""What one hostile sender makes the receiver keep besides its files, against a real
``sealsync serve`` (issue 43, item 4); the honest sender's round goes through each time.

* The schema log: a sender wrote 300 MiB of ``mlog.txt`` into the schema dir (which
  also holds everyone's ``device_owner.log`` and ``sender_keys.txt``) in 8.6 s, against
  a ``sender_quota_bytes`` of 1 MiB.
* ``device_owner.log``: a sender's files, each with new devices and deleted the round
  after, grew it 1.5 MiB every 4 rounds, for good.
* Staging folders: FILE_BEGINs with ~500-level names made ~20,000 fsynced folders in
  under a minute, outside every quota; an abandoned round still held 18,614 of them
  3 s after its session ended (and the clean-up held the session for minutes).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from receiver_service_helpers import Client, tsfile_bytes
from reliability.figures import record

from sealsync.protocol import (
    MAX_SCHEMA_PAYLOAD,
    Delete,
    DeleteAck,
    Error,
    FileVerdict,
    RoundDone,
    RoundEnd,
    RoundReady,
    Schema,
    SchemaAck,
    Welcome,
)
from security.attacks import Site

pytestmark = pytest.mark.slow

MiB = 1 << 20


def session(site: Site, sender: str) -> Client:
    """A hostile session past HELLO; the key's last one may still be closing."""
    deadline = time.monotonic() + 10
    while True:
        client = site.hostile_session()
        answer = client.hello(sender)
        if isinstance(answer, Welcome):
            client.chan.settimeout(60)
            return client
        client.close()
        assert isinstance(answer, Error) and answer.code == "busy", answer
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)


def folders_under(root: Path) -> int:
    return sum(len(dirs) for _, dirs, _ in os.walk(root)) if root.exists() else 0


def test_a_senders_schema_log_is_bounded_per_session_and_by_its_quota(tmp_path: Path) -> None:
    """The hostile sender ships 1 MiB SCHEMA frames as fast as it can, reconnecting
    whenever it is refused: each session appends at most ``max_schema_bytes_per_session``
    (1 MiB), the copy stops at the quota (2 MiB, which counts it), and every refusal is
    one ERROR ``quota`` line naming the key."""
    site = Site(tmp_path / "site", sender_quota_bytes=2 * MiB, max_schema_bytes_per_session=MiB)
    site.start()
    hostile = str(uuid.uuid4())
    refusals: list[Error] = []
    sessions = 0
    block = b"root.h.d1.s1,INT64,PLAIN,SNAPPY\n" * (MAX_SCHEMA_PAYLOAD // 32)
    started = time.monotonic()
    try:
        while sessions < 6:
            sessions += 1
            with session(site, hostile) as client:
                position = 0
                while True:
                    client.send(Schema(position, block))
                    answer = client.recv()
                    if not isinstance(answer, SchemaAck):
                        assert isinstance(answer, Error), answer
                        refusals.append(answer)
                        break
                    position = answer.position
            if refusals and "sender_quota_bytes" in refusals[-1].message:
                break
        took = time.monotonic() - started
        code, stderr = site.honest_round()
    finally:
        site.stop()
    log = site.dep.receiver_schema / "sync" / "senders" / hostile / "mlog.txt"
    size = log.stat().st_size
    held = size <= 2 * MiB and code == 0 and site.honest_files_loaded()
    record("security", attack="schema log flood against the quota", tried=sessions, held=held)
    assert size <= 2 * MiB, f"{size} bytes of schema log in {took:.1f} s"
    assert {r.code for r in refusals} == {"quota"}, refusals
    assert "max_schema_bytes_per_session" in refusals[0].message
    assert "sender_quota_bytes" in refusals[-1].message
    assert "its schema log included" in refusals[-1].message
    assert sessions <= 3  # 1 MiB, then the quota's rest, then the quota
    assert code == 0, stderr
    assert site.honest_files_loaded()


def _round(client: Client, files: list[tuple[str, bytes]], deletes: list[str]) -> list[str]:
    """One round: DELETEs, then the files; the verdicts' statuses and reasons."""
    assert client.round_start() == RoundReady("ready", "")
    for name in deletes:
        client.send(Delete(name))
        assert client.recv() == DeleteAck(name)
    for i, (name, data) in enumerate(files, 1):
        client.send_file(i, name, data)
    answers = []
    for _ in files:
        answer = client.recv()
        assert isinstance(answer, FileVerdict), answer
        answers.append(f"{answer.status}: {answer.reason}")
    client.send(RoundEnd())
    assert isinstance(client.recv(), RoundDone)
    return answers


def test_device_claims_of_a_sender_are_bounded(tmp_path: Path) -> None:
    """Each round the hostile sender ships files with 40 new long-named devices and
    deletes the last round's: its devices stop at ``max_devices_per_sender`` (100), a
    file past it is refused with one line naming the key, and device_owner.log stops
    growing; the honest sender's files still load."""
    site = Site(tmp_path / "site", max_devices_per_sender=100)
    site.start()
    hostile = str(uuid.uuid4())
    owner_log = site.dep.receiver_schema / "sync" / "device_owner.log"
    sizes: list[int] = []
    answers: list[str] = []
    previous: list[str] = []
    try:
        with session(site, hostile) as client:
            for r in range(6):
                pad = "x" * 200
                files = [
                    (
                        f"sequence/root.h/0/0/{r}{f}-{r}{f}-0-0.tsfile",
                        tsfile_bytes(tmp_path, [f"root.h.r{r}.f{f}.d{d}{pad}" for d in range(10)]),
                    )
                    for f in range(4)
                ]
                answers += _round(client, files, previous)
                previous = [name for name, _ in files]
                time.sleep(0.5)  # the loader applies the round
                sizes.append(owner_log.stat().st_size)
        code, stderr = site.honest_round()
    finally:
        site.stop()
    hostile_lines = [
        line for line in owner_log.read_text().splitlines() if line.split("\t")[1:2] == [hostile]
    ]
    refused = [a for a in answers if a.startswith("refused")]
    held = len(hostile_lines) <= 100 and sizes[-1] == sizes[-3] and code == 0
    record("security", attack="device claims churned every round", tried=len(answers), held=held)
    assert len(hostile_lines) == 100, len(hostile_lines)
    assert sizes[-1] == sizes[-2] == sizes[-3], sizes  # no growth once at the cap
    assert refused and all("max_devices_per_sender (100)" in a for a in refused), refused
    assert code == 0, stderr
    assert site.honest_files_loaded()


def test_staging_folders_are_bounded_and_an_abandoned_rounds_are_removed(tmp_path: Path) -> None:
    """The hostile sender announces a ~500-level name (refused: too deep, nothing made)
    and then 40-level names, each needing ~40 new folders, until
    ``max_staging_folders`` (300) refuses them; it then drops the connection mid-round.
    The folders never pass 300, and those of the abandoned round are gone at once."""
    site = Site(tmp_path / "site", max_staging_folders=300)
    site.start()
    hostile = str(uuid.uuid4())
    staging = site.dep.receiver_data / "sync-receiver" / f"127.0.0.1_{hostile}" / "data"
    answers: list[str] = []
    try:
        client = session(site, hostile)
        assert client.round_start() == RoundReady("ready", "")
        deepest = "sequence/" + "/".join(["a"] * 500) + "/f.tsfile"
        names = [deepest] + [
            "sequence/" + "/".join(f"n{i}-{j}" for j in range(40)) + "/f.tsfile" for i in range(20)
        ]
        for i, name in enumerate(names, 1):
            client.send_file(i, name, b"not a tsfile" * 10)
        for _ in names:
            answer = client.recv()
            assert isinstance(answer, FileVerdict), answer
            answers.append(f"{answer.status}: {answer.reason}")
        peak = folders_under(staging)
        client.close()  # abandoned mid-round
        deadline = time.monotonic() + 10
        while folders_under(staging) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = folders_under(staging)
        code, stderr = site.honest_round()
    finally:
        site.stop()
    held = peak <= 300 and left == 0 and code == 0
    record("security", attack="deep staging folders, round abandoned", tried=len(names), held=held)
    assert "stages at most 64" in answers[0], answers[0]
    assert any("max_staging_folders (300)" in a for a in answers), answers
    assert 200 <= peak <= 300, peak  # they were made (and refused once at the bound)
    assert left == 0, left
    assert code == 0, stderr
    assert site.honest_files_loaded()
