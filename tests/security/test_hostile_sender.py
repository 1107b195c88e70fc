"""A hostile sender: an authorized key used against the others (issue 16, item 2).

A key in ``authorized_keys`` could open every session slot, bind any number of sender
UUIDs, hold sessions open with a byte every 20 s, and fill the disk with temporaries
of files it announces as 1 TiB. Each attack runs against a real ``sealsync serve``;
the honest sender (its own key) must still complete its rounds.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from deploy_helpers import mark_storage
from receiver_service_helpers import Client
from reliability.figures import record

from sealsync.protocol import (
    HEADER,
    Chunk,
    Error,
    FileBegin,
    FileEnd,
    FileVerdict,
    Kind,
    RoundReady,
    Welcome,
    decode,
)
from security.attacks import Site, SourcedClient

pytestmark = pytest.mark.slow

TiB = 1 << 40


def _bindings(site: Site) -> dict[str, str]:
    path = site.dep.receiver_schema / "sync" / "sender_keys.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return {line.split("\t")[0]: line.split("\t")[1] for line in lines}


def test_one_key_cannot_take_every_session_or_bind_many_senders(tmp_path: Path) -> None:
    """(c) One key opens 20 sessions, half as one sender, half as new UUIDs each, and
    holds them; the honest sender is served, and the key acts as one sender only."""
    site = Site(tmp_path / "site")
    site.start()
    clients: list[Client] = []
    answers: list[object] = []
    same = str(uuid.uuid4())
    try:
        for i in range(20):
            client = site.hostile_session()
            clients.append(client)
            answers.append(client.hello(same if i % 2 == 0 else str(uuid.uuid4())))
        welcomed = sum(isinstance(a, Welcome) for a in answers)
        code, stderr = site.honest_round()
    finally:
        for client in clients:
            client.close()
        site.stop()
    bound = _bindings(site)
    hostile_fp = {fp for u, fp in bound.items() if u != site.honest.uuid}
    hostile_uuids = [u for u in bound if u != site.honest.uuid]
    held = code == 0 and welcomed <= 2 and len(hostile_uuids) == 1
    record("security", attack="one key opens 20 sessions as 11 senders", tried=20, held=held)
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert welcomed <= 2, answers
    assert len(hostile_fp) == 1 and hostile_uuids == [same]
    refusals = [a for a in answers if isinstance(a, Error)]
    assert {a.code for a in refusals} <= {"busy", "auth"}
    assert any("max_sessions_per_key" in a.message for a in refusals)


def _dropped_within(client: Client, seconds: float, trickle: bytes) -> tuple[bool, Error | None]:
    """Send ``trickle`` a byte every 0.25 s; whether the receiver closed in time."""
    client.chan.settimeout(0.25)
    deadline = time.monotonic() + seconds
    pieces = iter(trickle)
    error: Error | None = None
    while time.monotonic() < deadline:
        try:
            client.raw(bytes([next(pieces)]))
        except (OSError, EOFError, StopIteration):
            pass
        try:
            data = client.chan.recv(4096)
        except TimeoutError:
            continue
        if not data:
            return True, error
        kind, length = HEADER.unpack_from(data)
        if kind == Kind.ERROR:
            msg = decode(Kind.ERROR, data[HEADER.size : HEADER.size + length])
            error = msg if isinstance(msg, Error) else None
    return False, error


@pytest.mark.parametrize(
    "trickle",
    [
        pytest.param(HEADER.pack(Kind.CHUNK, 1000) + b"x" * 1000, id="inside-a-frame"),
        pytest.param(b"".join(HEADER.pack(Kind.CHUNK, 1) + b"x" for _ in range(400)), id="frames"),
    ],
)
def test_a_one_byte_trickle_is_a_stall(tmp_path: Path, trickle: bytes) -> None:
    """(d) A byte now and then, mid-file, once kept a session (and its slot) forever."""
    site = Site(tmp_path / "site", idle_timeout=3.0)  # the stall window: min(stall, idle)
    site.start()
    try:
        client = site.hostile_session()
        assert isinstance(client.hello(str(uuid.uuid4())), Welcome)
        assert client.round_start() == RoundReady("ready", "")
        client.send(FileBegin(1, "sequence/root.t/0/t.tsfile", 1 << 20, 0, -1))
        started = time.monotonic()
        dropped, error = _dropped_within(client, 12.0, trickle)
        took = time.monotonic() - started
        client.close()
        code, stderr = site.honest_round()
    finally:
        site.stop()
    what = "one frame" if trickle.startswith(HEADER.pack(Kind.CHUNK, 1000)) else "1-byte frames"
    record("security", attack=f"1-byte trickle in a file stream ({what})", tried=1, held=dropped)
    assert dropped, "the trickling session was never dropped"
    assert took < 3.0 + 3.0, took
    assert error is not None and error.code == "timeout" and "stalled" in error.message, error
    assert code == 0, stderr


def test_huge_announced_files_are_refused_and_leave_no_temporaries(tmp_path: Path) -> None:
    """(e) 15 parallel streams announce 1 TiB files and stream as fast as they can."""
    site = Site(tmp_path / "site")
    site.start()
    peak = 0
    verdicts: list[FileVerdict] = []
    stop = threading.Event()
    lock = threading.Lock()

    def stream(i: int) -> None:
        try:  # from another host: its failures are that host's, not the honest sender's
            client = SourcedClient(site.address, site.hostile_key, "127.0.0.2")
        except Exception:
            return
        try:
            if not isinstance(client.hello(str(uuid.uuid4())), Welcome):
                return
            if client.round_start() != RoundReady("ready", ""):
                return
            client.send(FileBegin(1, f"sequence/root.h/0/{i}.tsfile", TiB, 0, -1))
            block = Chunk(b"\0" * (1 << 20))
            until = time.monotonic() + 4.0
            while time.monotonic() < until and not stop.is_set():
                client.send(block)
            client.send(FileEnd(1, "0" * 32))
            answer = client.recv()
            if isinstance(answer, FileVerdict):
                with lock:
                    verdicts.append(answer)
        except Exception:
            pass
        finally:
            client.close()

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(15)]
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, site.temporaries())
            time.sleep(0.1)
        code, stderr = site.honest_round()
    finally:
        stop.set()
        site.stop()
    held = peak < (1 << 20) and code == 0
    record("security", attack="15 streams announcing 1 TiB files", tried=15, held=held)
    assert peak < (1 << 20), f"{peak} bytes of temporaries"
    assert verdicts, "no stream got an answer"
    for v in verdicts:
        assert v.status == "refused" and "max_partial_bytes" in v.reason, v
    assert code == 0, stderr
    assert site.temporaries() == 0


def test_unfinished_uploads_of_a_sender_are_bounded_by_max_partial_bytes(tmp_path: Path) -> None:
    """(e) Two sessions of one sender each announce a file that fits alone; together
    they would not, so the second is refused and never written."""
    cap = 8 << 20
    second_dir = tmp_path / "site" / "dc" / "data2"
    second_dir.mkdir(parents=True)  # a receiver's folders must exist before serve
    site = Site(tmp_path / "site", max_partial_bytes=cap)
    site.configure(data_dirs=[str(site.dep.receiver_data), str(second_dir)])
    mark_storage(site.dep.receiver_config)  # what serve --init does for the new data dir
    site.start()
    peak = 0
    answers: list[object] = []
    pair: list[Client] = []
    try:
        same = str(uuid.uuid4())
        for n in range(2):  # one folder per receiver data dir: two rounds at once
            c = site.hostile_session()
            pair.append(c)
            assert isinstance(c.hello(same), Welcome)
            assert c.round_start(n) == RoundReady("ready", "")
            c.send(FileBegin(1, f"sequence/root.p/0/{n}.tsfile", 6 << 20, 0, -1))
        for _ in range(6):
            for c in pair:
                c.send(Chunk(b"\1" * (1 << 20)))
            peak = max(peak, site.temporaries() + _temporaries(second_dir))
        for c in pair:
            c.send(FileEnd(1, "0" * 32))
            answers.append(c.recv())
    finally:
        for c in pair:
            c.close()
        site.stop()
    held = peak <= cap
    record("security", attack="one sender's uploads over max_partial_bytes", tried=2, held=held)
    assert peak <= cap
    verdicts = [a for a in answers if isinstance(a, FileVerdict)]
    assert [v.status for v in verdicts] == ["mismatch", "refused"], answers  # bad MD5; no room
    assert "max_partial_bytes" in verdicts[1].reason


def _temporaries(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob(".incoming-*") if p.is_file())


def test_a_sender_over_its_quota_is_told_in_one_line_and_syncs_once_raised(
    tmp_path: Path,
) -> None:
    """(e) ``sender_quota_bytes``: the sender stops at the quota with one clear line,
    marks nothing it did not store as synced, and finishes once the quota is raised."""
    site = Site(tmp_path / "site")
    sealed = site.honest.sealed_hashes()
    data = site.honest.edge.data_dirs[0]
    total = sum(
        (data / n).stat().st_size + Path(f"{data / n}.resource").stat().st_size for n in sealed
    )
    site.configure(sender_quota_bytes=total // 2)
    site.start()
    try:
        code, stderr = site.honest_round()
        loaded = site.dep.loaded_hashes(site.honest)
    finally:
        site.stop()
    lines = stderr.strip().splitlines()
    assert code == 1, stderr
    assert len(lines) == 1 and "sender_quota_bytes" in lines[0], stderr
    assert lines[0].startswith("sealsync: error: receiver: sender ")
    assert 0 < len(loaded) < len(sealed)
    assert all(sealed[n] == h for n, h in loaded.items())
    stored = sum(
        (data / n).stat().st_size + Path(f"{data / n}.resource").stat().st_size for n in loaded
    )
    assert stored <= total // 2

    site.configure(sender_quota_bytes=total * 2)
    site.start()
    try:
        code, stderr = site.honest_round()
    finally:
        site.stop()
    held = code == 0 and site.honest_files_loaded()
    record("security", attack="a sender over its storage quota", tried=1, held=held)
    assert code == 0, stderr
    assert site.honest_files_loaded()
