"""IoTDB 2.x's ``X.mods2`` travels as ``X.mods`` does: in the snapshot, in FILE_BEGIN
(the optional ``mods2_size``), into the receiver's storage beside the data file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sender_transfer_helpers import FAKE_RECEIVER, FakeReceiver, fake_round_config, round_with_fake
from spark_loader_helpers import SENDER_A, Receiver
from state_helpers import write_data_file

from sealsync.formats import mods2
from sealsync.protocol.messages import FileBegin
from sealsync.protocol.spec import ProtocolError
from sealsync.received import DELETE_ORDER, LOAD_ORDER
from sealsync.simulator import EdgeInstance
from sender.manage.layout import SenderPaths
from sender.manage.snapshot import take_snapshot
from sender.transfer.filestream import open_snapshot_file
from spark_loader.discovery import SourceFile, discover, file_id

NAME = "sequence/root.sg/1/0/1-1-0-0.tsfile"


def test_file_begin_carries_mods2_size_only_when_there_is_one() -> None:
    plain = FileBegin(1, NAME, 10, 3, -1)
    assert b"mods2_size" not in plain.payload()  # the frame an older receiver knows
    with_mods2 = FileBegin(1, NAME, 10, 3, 5, mods2_size=31)
    back = FileBegin.from_payload(with_mods2.payload())
    assert back == with_mods2 and isinstance(back, FileBegin)
    assert back.stream_size == 10 + 3 + 5 + 31
    body = with_mods2.payload().replace(b'"mods2_size":31', b'"mods2_size":-1')
    with pytest.raises(ProtocolError, match="FILE_BEGIN.mods2_size"):
        FileBegin.from_payload(body)


def test_the_snapshot_and_the_stream_hold_the_mods2(tmp_path: Path) -> None:
    data, snap = tmp_path / "data", tmp_path / "snap"
    write_data_file(data, NAME, b"x" * 10, b"r" * 3)
    entry = mods2.tree_entry("root.sg.d1.s1", -(1 << 63), 4)
    Path(f"{data / NAME}.mods2").write_bytes(entry)
    Path(f"{data / NAME}.compaction.mods2").write_bytes(entry)  # a copy IoTDB keeps: not shipped
    placed = take_snapshot(data, snap, [NAME], with_mods={NAME})
    assert placed[NAME].has_mods and placed[NAME].stream_size == 10 + 3 + len(entry)
    assert sorted(os.listdir(snap / os.path.dirname(NAME))) == [
        "1-1-0-0.tsfile",
        "1-1-0-0.tsfile.mods2",
        "1-1-0-0.tsfile.resource",
    ]
    opened = open_snapshot_file(snap, NAME)
    try:
        begin = opened.begin(7)
        assert (begin.mods_size, begin.mods2_size) == (-1, len(entry))
        assert begin.stream_size == opened.stream_size
    finally:
        opened.close()


def test_the_receiver_moves_and_deletes_a_mods2_with_its_file() -> None:
    assert ".mods2" in LOAD_ORDER and LOAD_ORDER[-1] == ".resource"  # complete when it shows
    assert ".mods2" in DELETE_ORDER and DELETE_ORDER[0] == ".resource"


@pytest.mark.usefixtures("trusting")  # every listing here is milliseconds old
def test_a_growing_mods2_ships_its_file_again_past_the_idle_mark(tmp_path: Path) -> None:
    """An append to ``X.mods2`` changes no folder: the idle mark checks it as it checks
    ``X.mods``, and the file ships again with the longer ``.mods2``."""
    config = fake_round_config(tmp_path)
    data = config.data_dirs[0]
    paths = SenderPaths(data, FAKE_RECEIVER.host, FAKE_RECEIVER.port)
    write_data_file(data, NAME, b"x" * 100)
    mods2_path = Path(f"{data / NAME}.mods2")
    mods2_path.write_bytes(mods2.tree_entry("root.sg.d1.s1", 0, 1))

    def begins() -> list[tuple[str, int]]:
        got: list[tuple[str, int]] = []
        peer = FakeReceiver()
        peer.on_frame = lambda msg, sock: (
            got.append((msg.name, msg.mods2_size)) if isinstance(msg, FileBegin) else None
        )
        report, _ = round_with_fake(config, peer)
        assert report.ok
        return got

    assert begins() == [(NAME, 31)]
    assert begins() == []
    assert paths.idle_mark.exists()
    with open(mods2_path, "ab") as f:
        f.write(mods2.tree_entry("root.sg.**", 5, 6))
    assert begins() == [(NAME, 31 + 28)]
    assert begins() == []


def test_the_mods2_is_part_of_the_loaded_files_identity(tmp_path: Path) -> None:
    """On the loader's side a ``.mods2`` that appears or grows gives the file a new id
    (its rows are rewritten with the deletions), as a ``.mods`` does."""
    edge = EdgeInstance(tmp_path / "edge")
    recv = Receiver(tmp_path)
    rel = edge.write_file("root.sg1", 0, devices=["root.sg1.d1"], rows_per_device=3)
    recv.place(edge, rel, SENDER_A)

    def only() -> SourceFile:
        found = discover(recv.data_dirs)
        assert found.skipped == {} and len(found.files) == 1
        return found.files[0]

    plain = only()
    path = Path(f"{recv.placed[(SENDER_A, rel)]}.mods2")
    path.write_bytes(mods2.tree_entry("root.sg1.d1.**", 0, 1000))
    first = only()
    st = path.stat()
    assert (first.mods, first.mods2) == (None, (st.st_size, st.st_mtime_ns))
    assert first.file_id == file_id(SENDER_A, rel, plain.size, plain.mtime_ns, None, first.mods2)
    with open(path, "ab") as f:
        f.write(mods2.tree_entry("root.sg1.d1.s1", 5, 6))
    grown = only()
    assert len({plain.file_id, first.file_id, grown.file_id}) == 3
    assert grown.unchanged() and not first.unchanged()
    path.unlink()
    assert only().file_id == plain.file_id
