"""The receiver's batched and zero-copy paths give the same results as the simple ones.

Group commit of loads (Applier.load_many, DirectoryStorage.deferred_sync), claims
for a batch (DeviceOwners.claim_each), inspection of a batch in the worker pool
(InspectPool.inspect_many), the metadata-only format check (formats.verify), and the
paths bytes take in (ChunkPipe, ReadBuffer, BackgroundWriter).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import posix
import socket
import threading
from pathlib import Path

import pytest
from paramiko.buffered_pipe import PipeTimeout
from receiver_load_helpers import UUID_A, UUID_B, inspect, make_env, stage
from receiver_service_helpers import tsfile_bytes

from receiver import writer as writer_module
from receiver.chunk_pipe import ChunkPipe
from receiver.incoming import IncomingFile
from receiver.inspect_pool import InspectPool
from receiver.layout import SenderFolder
from receiver.load import apply as apply_module
from receiver.load.apply import Applier, read_load_log
from receiver.load.owners import DeviceConflict, DeviceIdError, DeviceOwners
from receiver.storage import directory as storage_module
from receiver.writer import BackgroundWriter
from sealsync import durable, formats
from sealsync.errors import FormatError
from sealsync.formats import parquet, tsfile
from sealsync.protocol import Chunk, FileBegin, FileEnd, ReadBuffer, encode, receive


def names(count: int) -> list[str]:
    return [f"sequence/root.sg/0/{1000 + i}-{i}-0.tsfile" for i in range(count)]


# --------------------------------------------------------------------------- loads


def test_load_many_moves_all_then_logs_them_with_one_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    batch = names(5)
    for name in batch:
        stage(folder, name)
    events: list[str] = []
    real_fsync_dir, real_append = durable.fsync_dir, durable.AppendLog.append_many

    def fsync_dir(path: str | os.PathLike[str]) -> None:
        if Path(path).is_relative_to(data_dir):
            events.append(f"fsync {Path(path).relative_to(data_dir).as_posix()}")
        real_fsync_dir(path)

    def append_many(self: durable.AppendLog, lines: list[str]) -> None:
        if self.path == folder.load_log:
            events.append(f"append {len(list(lines))}")
        real_append(self, lines)

    monkeypatch.setattr(storage_module.durable, "fsync_dir", fsync_dir)
    monkeypatch.setattr(durable.AppendLog, "append_many", append_many)
    applier = Applier(folder, storage, owners, inspect)
    try:
        assert applier.load_many([(n, None) for n in batch]) == [None] * 5
    finally:
        applier.close()
    assert storage.list(UUID_A) == set(batch)
    assert read_load_log(folder.load_log).loaded == set(batch)
    target = f"fsync sequence/root.sg/0/{UUID_A}"
    staging = f"fsync sync-receiver/{folder.root.name}/data/sequence/root.sg/0"
    assert events.count(target) == 1 and events.count(staging) == 1  # once for the batch
    appends = [i for i, e in enumerate(events) if e.startswith("append")]
    assert [events[i] for i in appends] == ["append 5"]  # one log write for the batch
    assert events.index(target) < appends[0] and events.index(staging) < appends[0]


def test_load_many_fails_only_the_conflicting_file(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    assert owners.claim(["root.theirs.d"], UUID_B) == {}
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    a, b, c = names(3)
    stage(folder, a)
    stage(folder, b, devices=["root.theirs.d"])
    stage(folder, c)
    applier = Applier(folder, storage, owners, inspect)
    try:
        results = applier.load_many([(a, None), (b, None), (c, ("root.sg.d0",))])
    finally:
        applier.close()
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], DeviceConflict)
    assert storage.list(UUID_A) == {a, c}
    assert read_load_log(folder.load_log).loaded == {a, c}
    assert folder.staged(b).exists()  # kept for recovery


def test_load_many_stops_between_files_when_told(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    batch = names(3)
    for name in batch:
        stage(folder, name)
    applier = Applier(folder, storage, owners, inspect)
    try:
        assert applier.load_many([(n, None) for n in batch], stopping=lambda: True) == [None]
    finally:
        applier.close()
    assert read_load_log(folder.load_log).loaded == {batch[0]}
    assert storage.list(UUID_A) == {batch[0]}


def test_a_failed_folder_fsync_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    batch = names(2)
    for name in batch:
        stage(folder, name)
    real = durable.fsync_dir

    def fsync_dir(path: str | os.PathLike[str]) -> None:
        if Path(path).name == UUID_A:
            raise OSError(5, "Input/output error")
        real(path)

    applier = Applier(folder, storage, owners, inspect)
    monkeypatch.setattr(storage_module.durable, "fsync_dir", fsync_dir)
    try:
        results = applier.load_many([(n, None) for n in batch])
    finally:
        applier.close()
    assert [str(r) for r in results] == ["[Errno 5] Input/output error"] * 2
    assert not folder.load_log.exists()


def test_claimed_devices_are_not_read_again(tmp_path: Path) -> None:
    data_dir, storage, owners = make_env(tmp_path)
    folder = SenderFolder(data_dir, "10.0.0.1", UUID_A)
    (name,) = names(1)
    stage(folder, name)

    def no_inspect(path: Path) -> formats.FileInfo:
        raise AssertionError("inspected again")

    applier = Applier(folder, storage, owners, no_inspect)
    try:
        applier.load(name, claimed=("root.sg.d0",))
    finally:
        applier.close()
    assert storage.list(UUID_A) == {name}
    assert apply_module.read_load_log(folder.load_log).loaded == {name}


# --------------------------------------------------------------------------- claims


def test_claim_each_is_claim_file_by_file(tmp_path: Path) -> None:
    owners = DeviceOwners(tmp_path)
    assert owners.claim(["root.b.d"], UUID_B) == {}
    results = owners.claim_each(
        [["root.a.d1", "root.a.d2"], ["root.a.d1", "root.b.d"], ["bad\tdevice"], ["root.a.d3"]],
        UUID_A,
    )
    assert results[0] == {} and results[3] == {}
    assert results[1] == {"root.b.d": UUID_B}
    assert isinstance(results[2], DeviceIdError)
    owners.close()
    again = DeviceOwners(tmp_path)  # what was claimed is on disk
    assert again.owners_of(["root.a.d1", "root.a.d2", "root.a.d3", "root.b.d"]) == {
        "root.a.d1": UUID_A,
        "root.a.d2": UUID_A,
        "root.a.d3": UUID_A,
        "root.b.d": UUID_B,
    }
    again.close()


# --------------------------------------------------------------------------- inspection


def test_verify_reads_devices_from_metadata_and_refuses_garbage(tmp_path: Path) -> None:
    good = tmp_path / "g.tsfile"
    good.write_bytes(tsfile_bytes(tmp_path, ["root.p.d2", "root.p.d1"], rows=4))
    assert formats.verify(good) == formats.FileInfo(("root.p.d1", "root.p.d2"), -1)
    bad = tmp_path / "b.tsfile"
    bad.write_bytes(b"TsFile" + b"\xff" * 64 + b"TsFile")
    with pytest.raises(FormatError):
        formats.verify(bad)
    table = tsfile.to_arrow(good)
    pq_path = tmp_path / "g.parquet"
    parquet.write_arrow(pq_path, table)
    assert formats.verify(pq_path) == parquet.inspect(pq_path)


@pytest.mark.slow
def test_inspect_many_isolates_a_crashing_file(tmp_path: Path) -> None:
    from receiver_inspect_targets import crashing_inspect

    paths = [tmp_path / f"{n}.tsfile" for n in ("a", "b", "crash", "c", "d")]
    with InspectPool(workers=2, timeout=60.0, target=crashing_inspect) as pool:
        results = pool.inspect_many(paths)
    fine = formats.FileInfo(("root.fine",), 1)
    assert results[:2] == [fine, fine] and results[3:] == [fine, fine]
    assert isinstance(results[2], FormatError)
    assert "crash.tsfile: the file crashed the format reader" in str(results[2])


@pytest.mark.slow
def test_a_worker_starts_with_the_tsfile_reader_imported(tmp_path: Path) -> None:
    """The fork server imports the TsFile package, which the reader imports only on
    first use: each worker forks with it, and a receiver's first file does not wait
    for pandas and a C++ library to load in every worker."""
    from receiver_inspect_targets import modules_loaded

    with InspectPool(workers=1, timeout=60.0, target=modules_loaded) as pool:
        loaded = pool.inspect(tmp_path / "a.tsfile").devices
    assert "tsfile" in loaded and "sealsync.formats" in loaded


@pytest.mark.slow
def test_a_crash_in_the_shared_pool_is_blamed_on_its_own_file_only(tmp_path: Path) -> None:
    """Sessions share the pool: a worker dying broke every check in flight, and each
    innocent file was refused as "crashed the format reader" (issue 16)."""
    from receiver_inspect_targets import crashing_inspect

    results: dict[str, object] = {}

    def check(pool: InspectPool, name: str) -> None:
        try:
            results[name] = pool.inspect(tmp_path / f"{name}.tsfile")
        except FormatError as exc:
            results[name] = exc

    with InspectPool(workers=3, timeout=60.0, target=crashing_inspect) as pool:
        threads = [
            threading.Thread(target=check, args=(pool, name))
            for name in ("slow1", "slow2", "crash-late")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    fine = formats.FileInfo(("root.fine",), 1)
    assert results["slow1"] == fine and results["slow2"] == fine, results
    assert isinstance(results["crash-late"], FormatError)
    assert "crash-late.tsfile: the file crashed the format reader" in str(results["crash-late"])


# --------------------------------------------------------------------------- bytes in


def test_chunk_pipe_reads_like_a_buffered_pipe() -> None:
    pipe = ChunkPipe()
    pipe.feed(b"hello ")
    pipe.feed(b"world")
    assert len(pipe) == 11 and pipe.read_ready()
    assert pipe.read(3) == b"hel"
    assert pipe.read(100) == b"lo world"
    assert not pipe.read_ready()
    with pytest.raises(PipeTimeout):
        pipe.read(10, timeout=0.01)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read(10)))
    reader.start()
    pipe.feed(b"late")
    reader.join(5)
    assert got == [b"late"]
    pipe.feed(b"tail")
    pipe.close()
    assert pipe.read(10) == b"tail"
    assert pipe.read(10) == b""


def test_chunk_pipe_hands_a_large_packet_back_as_it_came_and_joins_small_ones() -> None:
    pipe = ChunkPipe()
    packet = bytearray(os.urandom(64 * 1024))
    pipe.feed_view(memoryview(packet)[10:])  # the data of a decrypted packet
    pipe.feed(b"ab")
    pipe.feed(b"cd")
    out = pipe.read(1 << 20)
    # no copy: the read is a view of the packet itself
    assert isinstance(out, memoryview) and out.obj is packet and bytes(out) == packet[10:]
    assert pipe.read(3) == b"abc"  # small pieces are joined up to what was asked
    first = pipe.read(10)
    assert first == b"d" and not pipe.read_ready()
    pipe.feed_view(memoryview(packet))
    assert bytes(pipe.read(100)) == packet[:100]  # a part of a large piece, then the rest
    assert bytes(pipe.read(1 << 20)) == packet[100:]


def test_frames_split_anywhere_decode_the_same(tmp_path: Path) -> None:
    frames = [
        FileBegin(7, "sequence/g/0/a.tsfile", 300_000, 10, -1),
        Chunk(os.urandom(300_010)),
        FileEnd(7, "0" * 32),
    ]
    wire = b"".join(encode(f) for f in frames)
    a, b = socket.socketpair()
    try:
        sender = threading.Thread(
            target=lambda: [b.sendall(wire[i : i + 7777]) for i in range(0, len(wire), 7777)]
        )
        sender.start()
        buffered = ReadBuffer(a, block=65536)
        got = [receive(buffered) for _ in frames]
        sender.join(5)
    finally:
        a.close()
        b.close()
    assert got[0] == frames[0] and got[2] == frames[2]
    assert bytes(got[1].data) == frames[1].data


def test_background_writes_land_in_order_and_errors_reach_the_file(tmp_path: Path) -> None:
    writer = BackgroundWriter(limit=1 << 20)
    data = os.urandom(6 << 20)
    begin = FileBegin(1, "sequence/g/0/a.tsfile", len(data), 3, -1)
    incoming = IncomingFile(begin, tmp_path, "t1", writer)
    view = memoryview(data + b"res")
    for i in range(0, len(view), 262_144):
        incoming.write(view[i : i + 262_144])
    incoming.finish_writes()
    assert incoming.error is None
    assert incoming.data_tmp.read_bytes() == data
    assert incoming.resource_tmp.read_bytes() == b"res"
    incoming.discard()
    broken = IncomingFile(begin, tmp_path, "t2", writer)
    os.close(broken._fds[0])
    broken._fds[0] = -1  # the next write fails (EBADF), as a full disk would
    broken.write(view[:262_144])
    broken.finish_writes()
    assert isinstance(broken.error, OSError)
    assert not broken.data_tmp.exists()  # a failed stream is discarded
    writer.close()


def test_a_large_stream_has_its_writeback_started_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each completed WRITEBACK_STEP of a large stream is handed to the kernel for
    # writeback as soon as it is written, so the fsync before the verdict finds most
    # of the file on disk already; the bytes are unchanged by it.
    started: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        started.append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(writer_module.os, "posix_fadvise", fadvise)
    writer = BackgroundWriter()
    step = writer_module.WRITEBACK_STEP
    data = os.urandom(2 * step + 12345)
    begin = FileBegin(1, "sequence/g/0/a.tsfile", len(data), 3, -1)
    incoming = IncomingFile(begin, tmp_path, "t1", writer)
    view = memoryview(data + b"res")
    for i in range(0, len(view), 262_144 + 7):  # pieces that straddle the step boundaries
        incoming.write(view[i : i + 262_144 + 7])
    incoming.finish_writes()
    writer.close()
    assert started == [(0, step), (step, step)]
    assert incoming.data_tmp.read_bytes() == data
    incoming.discard()


def resident_pages(path: Path) -> int:
    """How many of ``path``'s pages are in the page cache (mincore(2) of an untouched map)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        vec = ctypes.create_string_buffer(pages)
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        return sum(byte & 1 for byte in vec.raw)
    finally:
        libc.munmap(addr, size)


def test_a_received_file_leaves_the_page_cache_once_it_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing in the receiver reads a received file again once it is checked and
    # fsynced (it is only renamed after): its pages, and its sidecars', are released
    # then for the next file's writes, large files and small, and not at the fsync,
    # which may run while the worker pool still reads the file.
    monkeypatch.setattr(os, "fsync", posix.fsync)  # only clean pages can be dropped
    writer = BackgroundWriter()
    data = os.urandom(writer_module.WRITEBACK_STEP + 12345)
    begin = FileBegin(1, "sequence/g/0/a.tsfile", len(data), 3, -1)
    large = IncomingFile(begin, tmp_path, "large", writer)
    large.write(memoryview(data + b"res"))
    large.finish_writes()
    assert resident_pages(large.data_tmp) > 0  # the last, unfinished step is still cached
    large.fsync()
    assert resident_pages(large.data_tmp) > 0  # the format check may still read it
    large.release()
    assert resident_pages(large.data_tmp) == 0
    assert large.data_tmp.read_bytes() == data
    small_data = os.urandom(64 << 10)
    resource = os.urandom(5000)
    small = IncomingFile(
        FileBegin(2, "sequence/g/0/b.tsfile", len(small_data), len(resource), -1),
        tmp_path,
        "small",
        writer,
    )
    small.write(memoryview(small_data + resource))
    assert resident_pages(small.data_tmp) == len(small_data) // mmap.PAGESIZE
    assert resident_pages(small.resource_tmp) == 2
    small.fsync()
    small.release()
    assert resident_pages(small.data_tmp) == 0
    assert resident_pages(small.resource_tmp) == 0
    assert small.data_tmp.read_bytes() == small_data
    assert small.resource_tmp.read_bytes() == resource
    writer.close()
    large.discard()
    small.discard()


def test_a_declined_writeback_hint_does_not_fail_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def declined(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(writer_module.os, "posix_fadvise", declined)
    writer = BackgroundWriter()
    data = os.urandom(writer_module.WRITEBACK_STEP + 4096)
    begin = FileBegin(1, "sequence/g/0/a.tsfile", len(data), 3, -1)
    incoming = IncomingFile(begin, tmp_path, "t1", writer)
    incoming.write(memoryview(data + b"res"))
    incoming.fsync()  # the hint to drop the durable file's pages is declined too
    writer.close()
    assert incoming.error is None
    assert incoming.data_tmp.read_bytes() == data
    incoming.discard()
