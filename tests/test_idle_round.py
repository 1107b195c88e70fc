"""An idle round takes the short way (scan cache + idle mark) and a change never does.

``sync_to_receiver`` against the scripted receiver: after a round with nothing to do, the
next one must not even read ``last_local_files.txt``; a new, a deleted or a newly
sealed file must still be seen on the very next round.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sender_transfer_helpers import (
    FAKE_RECEIVER,
    fake_round_config,
    round_with_fake,
)
from state_helpers import write_data_file

from sealsync.config import SenderConfig
from sender import attempt as attempt_mod
from sender.manage import scan_cache
from sender.manage.layout import SenderPaths
from sender.manage.state import read_file_set

pytestmark = pytest.mark.usefixtures("trusting")  # every listing here is milliseconds old

RECEIVER = FAKE_RECEIVER
A = "sequence/root.sg1/0/1-1-0.tsfile"
B = "sequence/root.sg1/0/2-2-0.tsfile"
C = "sequence/root.sg1/0/3-3-0.tsfile"


config_for = fake_round_config


def one_round(config: SenderConfig) -> list[tuple[str, object]]:
    """Run a round; the frames the receiver got (file names for FILE_BEGIN, DELETE)."""
    report, peer = round_with_fake(config)
    assert report.ok
    return [(k, v) for k, v in peer.frames if k in ("FILE_BEGIN", "DELETE")]


def test_idle_rounds_skip_the_selection_until_something_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(tmp_path)
    data = config.data_dirs[0]
    paths = SenderPaths(data, RECEIVER.host, RECEIVER.port)
    write_data_file(data, A, b"a" * 100)
    write_data_file(data, C, b"c" * 100)
    (data / f"{C}.resource").unlink()  # not sealed yet
    assert one_round(config) == [("FILE_BEGIN", A)]
    assert one_round(config) == []  # nothing to do: the idle mark is written
    assert paths.idle_mark.exists()

    reads: list[Path] = []

    def counting_read(path: Path, known: frozenset[str] = frozenset()) -> set[str]:
        reads.append(path)
        return read_file_set(path, known)

    scans: list[Path] = []
    real_scan = attempt_mod.scan

    def counting_scan(data_dir: Path, cache: Path | None = None):  # type: ignore[no-untyped-def]
        scans.append(data_dir)
        return real_scan(data_dir, cache=cache)

    monkeypatch.setattr(attempt_mod, "read_file_set", counting_read)
    monkeypatch.setattr(attempt_mod, "scan", counting_scan)
    assert one_round(config) == []
    assert (reads, scans) == ([], [])  # the short way: nothing listed, nothing read

    write_data_file(data, B, b"b" * 100)  # a new sealed file
    assert one_round(config) == [("FILE_BEGIN", B)]
    assert one_round(config) == []
    (data / f"{C}.resource").write_bytes(b"R")  # C gets sealed
    assert one_round(config) == [("FILE_BEGIN", C)]
    assert one_round(config) == []
    (data / A).unlink()  # A is deleted
    assert one_round(config) == [("DELETE", A)]
    assert read_file_set(paths.last_local_files) == {B, C}
    reads.clear()
    scans.clear()
    assert one_round(config) == []
    assert (len(reads), len(scans)) == (1, 1)  # last_local_files changed: one full round
    assert one_round(config) == []
    assert (len(reads), len(scans)) == (1, 1)


def test_a_changed_last_local_files_means_the_full_selection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(tmp_path)
    data = config.data_dirs[0]
    paths = SenderPaths(data, RECEIVER.host, RECEIVER.port)
    write_data_file(data, A, b"a" * 100)
    assert one_round(config) == [("FILE_BEGIN", A)]
    assert one_round(config) == []
    paths.last_local_files.unlink()  # state lost (say, restored from an old backup)
    assert one_round(config) == [("FILE_BEGIN", A)]  # shipped again, never skipped


def test_nothing_is_marked_while_folders_are_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan_cache, "RACY_NS", 2_000_000_000)  # the real window
    config = config_for(tmp_path)
    data = config.data_dirs[0]
    paths = SenderPaths(data, RECEIVER.host, RECEIVER.port)
    write_data_file(data, A, b"a" * 100)
    assert one_round(config) == [("FILE_BEGIN", A)]
    assert one_round(config) == []
    assert not paths.idle_mark.exists()  # changed milliseconds ago: not to be relied on
    write_data_file(data, B, b"b" * 100)
    assert one_round(config) == [("FILE_BEGIN", B)]
