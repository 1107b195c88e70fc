"""IoTDB 2.x's ``X.mods2`` travels as ``X.mods`` does: in the snapshot, in FILE_BEGIN
(the optional ``mods2_size``), into the receiver's storage beside the data file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from state_helpers import write_data_file

from receiver.storage import DELETE_ORDER, LOAD_ORDER
from sealsync.formats import mods2
from sealsync.protocol.messages import FileBegin
from sealsync.protocol.spec import ProtocolError
from sender.manage.snapshot import take_snapshot
from sender.transfer.filestream import open_snapshot_file

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
