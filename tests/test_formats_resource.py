"""``X.resource`` (sealsync/formats/resource.py) in IoTDB 2.x's binary layout: what the
writer puts where, what the reader takes back, and the bytes it refuses.
tests/test_simulator_vs_iotdb.py holds both to a real 2.0.1-beta's files."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sealsync.errors import FormatError
from sealsync.formats import resource
from sealsync.formats.common import read_up_to

MIN, MAX = -(1 << 63), (1 << 63) - 1


def _i32(n: int) -> bytes:
    return struct.pack(">i", n)


def _i64(n: int) -> bytes:
    return struct.pack(">q", n)


def _var(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 64  # one zig-zag varint byte
    return bytes([len(raw) << 1]) + raw


def test_one_device_is_written_field_by_field() -> None:
    got = resource.serialize({"root.sg.d1": (0, 9)}, progress_index=resource.iot_progress_index(7))
    want = (
        b"\x01\x03"  # version 1, an array device time index
        + _i32(1)
        + _i64(0)
        + _i64(9)  # one device: start and end
        + b"\x02"
        + _var("root.sg")
        + _var("d1")
        + _i32(0)  # its id, two segments, and its index
        + _i64(MIN)
        + _i64(MAX)  # no plan index
        + _i32(-1)  # no shared modification file
        + b"\x01"
        + struct.pack(">h", 2)
        + _i32(1)
        + _i32(1)
        + _i64(7)  # an IoTProgressIndex: peer 1 at search index 7
    )
    assert got == want


def test_devices_read_back_in_order_with_their_times(tmp_path: Path) -> None:
    devices = {"root.sg.d2": (5, 6), "root.sg.a.d3": (-1, 1), "root": (7, 7), "root.x": (0, 0)}
    path = tmp_path / "x.tsfile.resource"
    path.write_bytes(resource.serialize(devices))
    back = resource.read(path)
    assert back.devices == devices and list(back.devices) == list(devices)
    assert back.device_ids == (("root.sg", "d2"), ("root.sg.a", "d3"), ("root",), ("root", "x"))
    assert (back.max_plan_index, back.min_plan_index) == (MIN, MAX)
    assert (back.mod_file, back.mod_file_offset, back.progress_index) == (None, None, None)
    assert resource.device_segments("root.sg.a.b.c") == ("root.sg.a", "b", "c")


def test_what_only_the_reader_meets() -> None:
    """Pairs in index order whatever order the ids come in, a shared ``.mods2`` and its
    offset, a null segment, the 1.x plain index, an old file without the tail."""
    head = b"\x01\x03" + _i32(2) + _i64(1) + _i64(2) + _i64(3) + _i64(4)
    ids = b"\x01" + _var("root.b") + _i32(1) + b"\x02" + _var("t") + b"\x01" + _i32(0)
    tail = _i64(0) + _i64(0) + _i32(11) + b"xyz/s.mods2" + _i64(42) + b"\x00"
    got = resource.parse(head + ids + tail)
    assert got.devices == {"t.null": (1, 2), "root.b": (3, 4)}
    assert got.device_ids == (("t", None), ("root.b",))
    assert (got.mod_file, got.mod_file_offset) == ("xyz/s.mods2", 42)
    plain = b"\x01\x01" + _i32(1) + _i64(5) + _i64(6) + _i32(10) + b"root.sg.d1" + _i32(0)
    old = resource.parse(plain + _i64(1) + _i64(2))
    assert old.devices == {"root.sg.d1": (5, 6)} and old.time_index_type == 1
    assert (old.max_plan_index, old.min_plan_index, old.mod_file) == (1, 2, None)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x02\x03", "version 2"),
        (b"\x01\x02" + _i32(0), "time index type 2"),
        (b"\x01\x03" + _i32(5) + _i64(0), "device count 5"),
        (b"\x01\x03" + _i32(1) + _i64(0) + _i64(1) + b"\x01" + _var("a") + _i32(3), "indexes"),
        (b"\x01\x03" + _i32(0) + _i64(0), "ends early"),
        (b"\x01\x03" + _i32(0) + _i64(0) + _i64(0) + _i32(-1) + b"\x07", "block type 7"),
        (b"\x01\x03" + _i32(0) + _i64(0) + _i64(0) + _i32(9) + b"x", "out of range"),
    ],
)
def test_bytes_that_do_not_read_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(FormatError, match=r"^\.resource: ") as caught:
        resource.parse(data)
    assert why in str(caught.value)


@pytest.mark.slow  # a process of its own, with its address space bounded
def test_a_small_resource_reads_in_a_worker_with_little_address_space(tmp_path: Path) -> None:
    """A check worker's address space is what it holds plus a budget (1 GiB by
    default); reading a sidecar must not reserve its whole cap (1 GiB) up front, or a
    .mods whose reading consults its .resource is refused as over the memory budget."""
    path = tmp_path / "x.tsfile.resource"
    path.write_bytes(resource.serialize({"root.sg.d1": (0, 9)}))
    code = (
        "import resource as r, sys\n"
        "from sealsync.formats import resource\n"
        "held = int(open('/proc/self/statm').read().split()[0]) * r.getpagesize()\n"
        "r.setrlimit(r.RLIMIT_AS, (held + (256 << 20), r.RLIM_INFINITY))\n"
        "print(list(resource.read(sys.argv[1]).devices))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['root.sg.d1']"


def test_read_up_to_stops_one_byte_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (3 << 20))
    assert len(read_up_to(path, 5)) == 6
    assert len(read_up_to(path, (2 << 20) + 7)) == (2 << 20) + 8
    assert read_up_to(path, 4 << 20) == b"x" * (3 << 20)
