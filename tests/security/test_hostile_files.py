"""Hostile files shipped by an authorized sender to a real ``sealsync serve`` (issue 43,
items 3 and 6), the honest sender's round running meanwhile.

Before, each of these cost the receiver (or the loader after it) far more than its
bytes: a 60 MiB ``.mods`` of 2.5 M short lines (the protocol allows 1 GiB) killed the
loader's JVM; a 9 MB TsFile listing one chunk 350,000 times under a 2 MiB measurement
name pinned a check worker for the full 300 s timeout, was then checked again, and an
honest round failed after 136 s; a 7 KiB Parquet file whose dictionary ``device``
column decodes to 1.5 GB was accepted after the worker grew to 1.56 GB; SIGINT took
110 s to stop the receiver while a check ran; a folder ``<uuid>\\u200b`` printed as
another sender's uuid. Each is now refused with one line, quickly, and the honest
round is served.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from receiver_service_helpers import tsfile_bytes
from reliability.figures import record

from sealsync.formats import mods2
from sealsync.protocol import FileVerdict, RoundReady, Welcome
from security.attacks import Site
from security.hostile_files import (
    dictionary_bomb_parquet,
    long_mods,
    many_chunks_tsfile,
    repeated_chunk_tsfile,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    site = Site(tmp_path_factory.mktemp("hostile-files"))
    site.start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("made")


def _ship(site: Site, files: list[tuple[str, bytes, dict[str, bytes]]]) -> list[object]:
    """One hostile session ships ``files`` (name, data, sidecars) and reads their verdicts."""
    client = site.hostile_session()
    client.chan.settimeout(120)
    try:
        assert isinstance(client.hello(HOSTILE), Welcome)
        assert client.round_start() == RoundReady("ready", "")
        for n, (name, data, sidecars) in enumerate(files, start=1):
            client.send_file(n, name, data, chunk=1 << 20, **sidecars)
        return [client.recv() for _ in files]
    finally:
        client.close()


HOSTILE = str(uuid.uuid4())


def test_hostile_files_are_refused_with_one_line_each_while_an_honest_round_runs(
    site: Site, made: Path
) -> None:
    mods_60 = made / "60.mods"
    long_mods(mods_60)  # 2.5 M lines, 60 MB
    mods_many = made / "many.mods"
    long_mods(mods_many, 100_001)  # one deletion more than a file may hold
    chunked = made / "chunk.tsfile"
    repeated_chunk_tsfile(chunked)
    bomb = made / "bomb.parquet"
    bomb_size = dictionary_bomb_parquet(bomb)
    entry = mods2.tree_entry("root.h.**", 0, 1)
    honest_uuid = site.honest.uuid
    files = [
        (
            "sequence/root.h/0/1-1-0-0.tsfile",
            tsfile_bytes(made, ["root.h.d1"]),
            {"mods": mods_60.read_bytes()},
        ),
        (
            "sequence/root.h/0/2-2-0-0.tsfile",
            tsfile_bytes(made, ["root.h.d2"]),
            {"mods": mods_many.read_bytes()},
        ),
        (
            "sequence/root.h/0/3-3-0-0.tsfile",
            tsfile_bytes(made, ["root.h.d3"]),
            {"mods2": entry * 100_001},
        ),
        ("sequence/root.h/0/4-4-0-0.tsfile", chunked.read_bytes(), {}),
        ("sequence/root.h/0/5-5-0-0.parquet", bomb.read_bytes(), {}),
        (f"sequence/{honest_uuid}\u200b/0/6-6-0-0.tsfile", b"not a TsFile", {}),
    ]
    verdicts: list[object] = []
    took: list[float] = []

    def hostile() -> None:
        started = time.monotonic()
        verdicts.extend(_ship(site, files))
        took.append(time.monotonic() - started)

    thread = threading.Thread(target=hostile)
    thread.start()
    started = time.monotonic()
    code, stderr = site.honest_round()
    honest_took = time.monotonic() - started
    thread.join(180)
    log = (site.dep.root / "receiver.log").read_text(errors="replace")

    reasons = [v.reason for v in verdicts if isinstance(v, FileVerdict) and v.status == "refused"]
    wanted = [
        "its .mods is 60000000 bytes, over the limit of 16777216 bytes for a deletion file",
        "its deletions do not read: .mods line 100001: more than 100000 deletions in one file",
        f"its deletions do not read: .mods2 entry at byte {len(entry) * 100_000}: more than",
        "the chunk lists name more header bytes than the data region holds",
        "over the limit of 1073741824 for one Parquet file",
        "not a valid data file",
    ]
    matched = len(reasons) == len(wanted)
    matched = matched and all(w in r for w, r in zip(wanted, reasons, strict=True))
    shown = f"sequence/{honest_uuid}\\u200b/0/6-6-0-0.tsfile"
    held = code == 0 and matched and took and took[0] < 60 and shown in log
    record("security", attack="60 MiB .mods of 2.5 M lines (receiver)", tried=1, held=held)
    record("security", attack="9 MB TsFile: one chunk listed 350,000 times", tried=1, held=held)
    record(
        "security",
        attack=f"{bomb_size} B Parquet decoding to 1.5 GB (receiver)",
        tried=1,
        held=held,
    )
    record("security", attack="a folder <uuid>\\u200b in the receiver's log", tried=1, held=held)
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert len(verdicts) == len(files), verdicts
    assert all(isinstance(v, FileVerdict) and v.status == "refused" for v in verdicts), verdicts
    for want, reason in zip(wanted, reasons, strict=True):
        assert want in reason, (want, reason)
        assert "\n" not in reason and len(reason) < 400
    assert took[0] < 60, took  # the 60 MiB is read and dropped; each check is quick
    assert honest_took < 60, honest_took
    assert shown in log and "\u200b" not in log  # escaped where the operator reads it
    assert "Traceback" not in log


def _being_checked(name: str, within: float) -> bool:
    """Whether a check worker says (in the file named by its pid, in its pool's folder
    under the temporary directory) that it checks a file called ``name``, waiting up to
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for mark in Path(tempfile.gettempdir()).glob("sealsync-checks-*/*"):
            try:
                if name.encode() in mark.read_bytes().split(b"\0", 1)[0]:
                    return True
            except OSError:
                pass
        time.sleep(0.05)
    return False


def test_sigint_stops_the_receiver_at_once_while_a_check_runs(site: Site, made: Path) -> None:
    """A valid file whose metadata lists four million chunks takes its check seconds:
    SIGINT during it stops the receiver without waiting for the check."""
    dense = made / "dense.tsfile"
    many_chunks_tsfile(dense, 4_000_000, devices=1000)
    client = site.hostile_session()
    try:
        assert isinstance(client.hello(HOSTILE), Welcome)
        assert client.round_start() == RoundReady("ready", "")
        client.send_file(1, "sequence/root.h/0/7-7-0-0.tsfile", dense.read_bytes(), chunk=1 << 20)
        assert _being_checked("7-7-0-0.tsfile", within=60)
        started = time.monotonic()
        code = site.dep.stop_receiver(signal.SIGINT)
        took = time.monotonic() - started
    finally:
        client.close()
    log = (site.dep.root / "receiver.log").read_text(errors="replace")
    cut = "7-7-0-0.tsfile refused: the receiver is stopping: file not inspected; retry later"
    held = took < 10 and code == 0 and cut in log
    record("security", attack="SIGINT while a check runs", tried=1, held=held)
    assert "Traceback" not in log
    assert cut in log, log[-2000:]  # the check was ended, not waited for
    assert took < 10, took
    assert code == 0, log[-2000:]  # a clean stop
