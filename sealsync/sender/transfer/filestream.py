"""One file's stream: FILE_BEGIN, the bytes of the data file and its sidecars, FILE_END.

The bytes come from the round's snapshot (hard links), never the live data dir, so a
merge or TTL cannot pull a file away mid-stream. One pass: each chunk is read into a
reused buffer, hashed and sent as a view of that buffer, with no per-chunk answer
awaited (DESIGN §5). A file at most one chunk long goes out as a single write,
frames and all, which is what keeps thousands of small files fast.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sealsync.crashpoints import crash_point
from sealsync.protocol import (
    HEADER,
    MAX_CHUNK_PAYLOAD,
    MAX_FILE_SIZE,
    MAX_SIDECAR_SIZE,
    Chunk,
    FileBegin,
    FileEnd,
    Kind,
    Stream,
    encode,
    send,
)
from sealsync.sender.manage.snapshot import snapshot_path

BROKEN_MD5 = "0" * 32
"""Sent when a file changed under us mid-stream: the receiver answers mismatch, we resend."""


class Unsendable(Exception):
    """This file cannot be offered at all (missing from the snapshot, too large)."""


@dataclass
class OpenedFile:
    """A data file and its sidecars, opened together so their sizes belong together."""

    name: str
    parts: list[tuple[BinaryIO, int]]
    size: int
    resource_size: int
    mods_size: int

    @property
    def stream_size(self) -> int:
        return sum(size for _, size in self.parts)

    def begin(self, file_id: int) -> FileBegin:
        return FileBegin(file_id, self.name, self.size, self.resource_size, self.mods_size)

    def close(self) -> None:
        for f, _ in self.parts:
            f.close()


def open_snapshot_file(snapshot_dir: Path, name: str) -> OpenedFile:
    """Open ``name`` with its ``.resource`` and, if present, ``.mods`` from the snapshot."""
    path = os.fspath(snapshot_path(snapshot_dir, name))
    opened: list[tuple[BinaryIO, int]] = []
    try:
        for suffix, required in (("", True), (".resource", True), (".mods", False)):
            try:
                f = open(path + suffix, "rb", buffering=0)  # noqa: SIM115 - closed by OpenedFile
            except FileNotFoundError:
                if required:
                    raise Unsendable(f"{name}{suffix} missing from the snapshot") from None
                continue
            opened.append((f, os.fstat(f.fileno()).st_size))  # type: ignore[arg-type]
    except OSError as exc:
        for f, _ in opened:
            f.close()
        raise Unsendable(f"cannot read {name} from the snapshot: {exc.strerror or exc}") from None
    except BaseException:
        for f, _ in opened:
            f.close()
        raise
    sizes = [size for _, size in opened]
    result = OpenedFile(name, opened, sizes[0], sizes[1], sizes[2] if len(sizes) > 2 else -1)
    if result.size > MAX_FILE_SIZE or max(sizes[1:]) > MAX_SIDECAR_SIZE:
        result.close()
        raise Unsendable(f"{name} is larger than the protocol allows")
    return result


def _fill(f: BinaryIO, view: memoryview) -> bool:
    """Read exactly ``len(view)`` bytes; False (rest zeroed) if the file ended early."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            view[got:] = bytes(len(view) - got)
            return False
        got += n
    return True


def send_file(
    stream: Stream,
    opened: OpenedFile,
    file_id: int,
    buffer: bytearray,
    on_bytes: Callable[[int], None] | None = None,
) -> str:
    """Stream the file; the MD5 sent in FILE_END (BROKEN_MD5 if it shrank meanwhile)."""
    chunk = min(len(buffer), MAX_CHUNK_PAYLOAD)
    view = memoryview(buffer)
    md5 = hashlib.md5()
    intact = True
    total = opened.stream_size
    if total <= chunk:
        at = 0
        for f, size in opened.parts:
            intact = _fill(f, view[at : at + size]) and intact
            at += size
        md5.update(view[:total])
        digest = md5.hexdigest() if intact else BROKEN_MD5
        stream.sendall(
            encode(opened.begin(file_id))
            + HEADER.pack(Kind.CHUNK, total)
            + view[:total]
            + encode(FileEnd(file_id, digest))
        )
        if on_bytes is not None:
            on_bytes(total)
        return digest
    send(stream, opened.begin(file_id))
    for f, size in opened.parts:
        left = size
        while left:
            n = min(left, chunk)
            part = view[:n]
            intact = _fill(f, part) and intact
            md5.update(part)
            send(stream, Chunk(part))
            crash_point("sender.file.mid_chunk")
            left -= n
            if on_bytes is not None:
                on_bytes(n)
    digest = md5.hexdigest() if intact else BROKEN_MD5
    send(stream, FileEnd(file_id, digest))
    return digest
