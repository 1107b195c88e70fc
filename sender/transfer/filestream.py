"""One file's stream: FILE_BEGIN, the bytes of the data file and its sidecars, FILE_END.

The bytes come from the round's snapshot (hard links), never the live data dir, so a
merge or TTL cannot pull a file away mid-stream. One pass: each chunk is read into a
reused buffer, hashed and sent as a view of that buffer, with no per-chunk answer
awaited (docs/design.md §5.2); for a larger file a reader thread reads and hashes the next
chunks while this one sends (``_ReadAhead``). A file at most one chunk long goes out
as a single write, frames and all, read into the session's buffer between its
FILE_BEGIN and its FILE_END (``FRAME_ROOM``): one SSH packet, and no copy of its bytes
here, which is what keeps thousands of small files fast.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sealsync.crashpoints import crash_point
from sealsync.protocol import (
    HEADER,
    MAX_CHUNK_PAYLOAD,
    MAX_FILE_SIZE,
    MAX_SIDECAR_SIZE,
    PARTIAL_HEAD,
    RESUME_MIN,
    SSH_MAX_PACKET_SIZE,
    FileBegin,
    FileEnd,
    Kind,
    Stream,
    encode,
    send,
)
from sender.manage.snapshot import pieces, snapshot_path

BROKEN_MD5 = "0" * 32
"""Sent when a file changed under us mid-stream: the receiver answers mismatch, we resend."""


class Unsendable(Exception):
    """This file cannot be offered at all (missing from the snapshot, too large)."""


@dataclass
class OpenedFile:
    """A data file and its sidecars, opened together so their sizes belong together."""

    name: str
    parts: list[tuple[io.FileIO, int]]
    size: int
    resource_size: int
    mods_size: int
    mtime: int = -1
    """The data file's mtime in ns (part of a partial upload's identity)."""
    mods2_size: int = -1

    @property
    def stream_size(self) -> int:
        return sum(size for _, size in self.parts)

    @property
    def resumable(self) -> bool:
        return self.size >= RESUME_MIN

    def begin(self, file_id: int, offset: int = 0) -> FileBegin:
        if not self.resumable:  # a small file's frame is as it always was
            return FileBegin(
                file_id,
                self.name,
                self.size,
                self.resource_size,
                self.mods_size,
                mods2_size=self.mods2_size,
            )
        return FileBegin(
            file_id,
            self.name,
            self.size,
            self.resource_size,
            self.mods_size,
            self.mtime,
            offset,
            self.mods2_size,
        )

    def head_md5(self) -> str:
        """MD5 of the data file's first ``PARTIAL_HEAD`` bytes (a partial's identity)."""
        f = self.parts[0][0]
        want = min(self.size, PARTIAL_HEAD)
        data = os.pread(f.fileno(), want, 0)
        md5 = hashlib.md5(usedforsecurity=False)
        md5.update(data)
        return md5.hexdigest() if len(data) == want else BROKEN_MD5

    def close(self) -> None:
        for f, _ in self.parts:
            f.close()


def open_snapshot_file(snapshot_dir: Path, name: str, mods: bool = True) -> OpenedFile:
    """Open ``name`` with its ``.resource`` and, if present, ``.mods`` and ``.mods2``
    from the snapshot; ``mods=False``: the snapshot has neither for it
    (``Placed.has_mods``), so none is looked for."""
    path = snapshot_path(snapshot_dir, name)
    opened: list[tuple[io.FileIO, int]] = []
    by_suffix: dict[str, int] = {}
    mtime = -1
    try:
        for suffix, required in pieces(mods):
            try:
                f = open(path + suffix, "rb", buffering=0)  # noqa: SIM115 - closed by OpenedFile
            except FileNotFoundError:
                if required:
                    raise Unsendable(f"{name}{suffix} missing from the snapshot") from None
                continue
            st = os.fstat(f.fileno())
            opened.append((f, st.st_size))
            by_suffix[suffix] = st.st_size
            if not suffix:
                mtime = st.st_mtime_ns
    except OSError as exc:
        for f, _ in opened:
            f.close()
        raise Unsendable(f"cannot read {name} from the snapshot: {exc.strerror or exc}") from None
    except BaseException:
        for f, _ in opened:
            f.close()
        raise
    sizes = [size for _, size in opened]
    result = OpenedFile(
        name,
        opened,
        sizes[0],
        sizes[1],
        by_suffix.get(".mods", -1),
        mtime,
        by_suffix.get(".mods2", -1),
    )
    if result.size > MAX_FILE_SIZE or max(sizes[1:]) > MAX_SIDECAR_SIZE:
        result.close()
        raise Unsendable(f"{name} is larger than the protocol allows")
    return result


def _fill(f: io.FileIO, view: memoryview) -> bool:
    """Read exactly ``len(view)`` bytes; False (rest zeroed) if the file ended early."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            view[got:] = bytes(len(view) - got)
            return False
        got += n
    return True


FRAME_ROOM = 4096
"""Room in the session's buffer (:func:`file_buffer`) before a small file's bytes for
its FILE_BEGIN and CHUNK header, and after them for its FILE_END."""
_END_ROOM = 256
"""Of ``FRAME_ROOM``, what is kept after the bytes: a FILE_END frame is under 100."""


def file_buffer(chunk_size: int) -> bytearray:
    """A session's buffer: a chunk, and room for the frames around a small file."""
    return bytearray(chunk_size + FRAME_ROOM)


def send_file(
    stream: Stream,
    opened: OpenedFile,
    file_id: int,
    buffer: bytearray,
    on_bytes: Callable[[int], None] | None = None,
    offset: int = 0,
    packet_payload: int | None = None,
) -> str:
    """Stream the file; the MD5 sent in FILE_END (BROKEN_MD5 if it shrank meanwhile).

    ``buffer``: from :func:`file_buffer`. With ``offset`` (a partial upload the
    receiver holds, never past the data file) the first ``offset`` bytes are read and
    hashed here but not sent. ``packet_payload``: channel bytes per SSH packet, as
    the peer's maximum packet allows (:data:`PACKET_PAYLOAD` if not given)."""
    chunk = min(len(buffer) - FRAME_ROOM, MAX_CHUNK_PAYLOAD)
    total = opened.stream_size
    if total <= chunk and not offset:
        return _send_small(stream, opened, file_id, memoryview(buffer), on_bytes)
    send(stream, opened.begin(file_id, offset))
    payload = PACKET_PAYLOAD if packet_payload is None else packet_payload
    ahead = _ReadAhead(opened, packet_aligned(chunk, payload), offset)
    try:
        for frame, n in ahead.frames():
            stream.sendall(frame)
            crash_point("sender.file.mid_chunk")
            if on_bytes is not None:
                on_bytes(n)
    finally:
        ahead.close()
    digest = ahead.md5.hexdigest() if ahead.intact else BROKEN_MD5
    send(stream, FileEnd(file_id, digest))
    return digest


def _send_small(
    stream: Stream,
    opened: OpenedFile,
    file_id: int,
    view: memoryview,
    on_bytes: Callable[[int], None] | None,
) -> str:
    """A file no longer than a chunk: FILE_BEGIN, one CHUNK and FILE_END in one write,
    its bytes read where they go out (between the frames, in ``view``)."""
    total = opened.stream_size
    begin = encode(opened.begin(file_id))
    data_at = len(view) - _END_ROOM - total
    start = data_at - HEADER.size - len(begin)
    if start < 0:  # a FILE_BEGIN longer than the room (no name is): read, then join
        data_at = 0
    intact = True
    at = data_at
    for f, size in opened.parts:
        intact = _fill(f, view[at : at + size]) and intact
        at += size
    digest = hashlib.md5(view[data_at:at]).hexdigest() if intact else BROKEN_MD5
    end = encode(FileEnd(file_id, digest))
    if start >= 0:
        view[start : data_at - HEADER.size] = begin
        HEADER.pack_into(view, data_at - HEADER.size, Kind.CHUNK, total)
        view[at : at + len(end)] = end
        stream.sendall(view[start : at + len(end)])
    else:
        stream.sendall(begin + HEADER.pack(Kind.CHUNK, total) + view[:total] + end)
    if on_bytes is not None:
        on_bytes(total)
    return digest


PACKET_PAYLOAD = SSH_MAX_PACKET_SIZE - 64
"""Channel bytes paramiko puts in one SSH packet at this release's maximum packet (it
keeps 64 of the peer's maximum for the packet's own fields)."""


def packet_aligned(chunk: int, payload: int = PACKET_PAYLOAD) -> int:
    """A chunk payload whose CHUNK frame fills whole SSH packets of ``payload`` bytes.

    Sent after its 5-byte header, a 256 KiB payload would go out in 64 KiB packets as
    six: the header alone, four full ones and a 261-byte tail. Every packet costs
    the per-packet work on both ends, as much for 5 bytes as for a full one; four
    full ones carry the same bytes. At 256 KiB packets a chunk is one packet.
    """
    packets = (chunk + HEADER.size) // payload
    return packets * payload - HEADER.size if packets else chunk


class _ReadAhead:
    """A file's chunks, read and hashed on a thread while the caller sends earlier ones.

    Reading, MD5 and sending taking turns on one thread would bound a large transfer
    by their sum (docs/performance.md); all three release the GIL for their C work,
    so on threads of their own they overlap. ``SLOTS`` buffers circulate:
    one is refilled only after the chunk it held was sent.

    A resumed stream (``skip`` bytes held by the receiver) is hashed by a thread of
    its own, from byte 0 with ``pread``, while this one reads the rest for sending:
    the first byte goes out at once instead of after the MD5 of the whole prefix,
    which would be link time lost.
    """

    SLOTS = 4

    def __init__(self, opened: OpenedFile, chunk: int, skip: int = 0) -> None:
        self._opened = opened
        self._chunk = chunk
        self._skip = skip
        # each slot keeps room for the CHUNK header before its bytes: header and bytes
        # then go out in one write, as one frame, without a copy
        self._buffers = [memoryview(bytearray(HEADER.size + chunk)) for _ in range(self.SLOTS)]
        self._free: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        for i in range(self.SLOTS):
            self._free.put(i)
        self._ready: queue.SimpleQueue[tuple[int, int] | BaseException | None] = queue.SimpleQueue()
        self.md5 = hashlib.md5()
        self.intact = True
        self._stop = threading.Event()
        self._ready_done = False
        self._hash_error: BaseException | None = None
        self._hasher: threading.Thread | None = None
        if skip:
            self._hasher = threading.Thread(target=self._hash, name="sealsync-md5", daemon=True)
            self._hasher.start()
        self._thread = threading.Thread(target=self._run, name="sealsync-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            skip = self._skip
            hashing = not skip
            for f, size in self._opened.parts:
                left = size
                if skip:  # resumed: the receiver holds these; the hasher reads them
                    f.seek(skip)
                    left -= skip
                    skip = 0
                while left:
                    slot = self._free.get()
                    if slot is None:
                        return  # the caller gave up
                    n = min(left, self._chunk)
                    part = self._buffers[slot][HEADER.size : HEADER.size + n]
                    self.intact = _fill(f, part) and self.intact
                    if hashing:
                        self.md5.update(part)
                    self._ready.put((slot, n))
                    left -= n
            self._ready.put(None)
        except BaseException as exc:  # raised on the caller's thread
            self._ready.put(exc)

    def _hash(self) -> None:
        """The whole stream's MD5, for a resumed stream (see the class)."""
        try:
            step = 1 << 20
            for f, size in self._opened.parts:
                pos = 0
                while pos < size:
                    if self._stop.is_set():
                        return
                    data = os.pread(f.fileno(), min(step, size - pos), pos)
                    if not data:
                        self.intact = False
                        self.md5.update(bytes(size - pos))
                        break
                    self.md5.update(data)
                    pos += len(data)
        except BaseException as exc:
            self._hash_error = exc

    def frames(self) -> Iterator[tuple[memoryview, int]]:
        """Each chunk as a whole CHUNK frame, with its payload's length, in order; each
        stays valid until the next one is asked for."""
        while True:
            item = self._ready.get()
            if item is None:
                self._ready_done = True
                return
            if isinstance(item, BaseException):
                raise item
            slot, n = item
            buffer = self._buffers[slot]
            HEADER.pack_into(buffer, 0, Kind.CHUNK, n)
            yield buffer[: HEADER.size + n], n
            self._free.put(slot)

    def close(self) -> None:
        """Stop reading; for a resumed stream, wait for its MD5 (complete unless the
        caller gave up: ``chunks`` ended, or raised)."""
        self._free.put(None)
        self._thread.join()
        if self._hasher is not None:
            if self._ready_done is False:
                self._stop.set()
            self._hasher.join()
            if self._hash_error is not None and not self._stop.is_set():
                raise self._hash_error
