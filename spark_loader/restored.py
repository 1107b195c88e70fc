"""A restored receiver storage: the same files with other times keep their rows.

A file's id names its size and mtime (:mod:`.discovery`), so a storage copied back by
a tool that drops nanoseconds or sets new times (``cp -r``, ``tar``, ``rsync``
without ``-t``) would look like every file replaced, and the next run would remove
every row and ingest everything again. Instead, a listed file whose id the table does
not hold is matched to the record of the same sender and name when every piece is
provably the same:

* the data file: its size and mtime are the ones last seen, or its size is and the
  MD5 of its bytes now equals the MD5 the receiver recorded when it verified the
  file (:func:`sealsync.received.recorded_md5`, kept in the record when the file was
  ingested). If the file still carries that attribute, it must say the same;
* each ``.mods``/``.mods2``: absent both times, or its size and mtime are the ones
  last seen, or its size is and the SHA-256 of its bytes equals the recorded one.

A matched file keeps the record's id (:class:`Restored`): its partition stays,
nothing is ingested or removed, and the record takes the new times, so the next run
(and the receiver's deletion log, which names the times it sees) knows the file by
them without reading it again. Without that evidence (a record from before the MD5
was kept, a restore that dropped it from the file when the record has none, a changed
byte) the file is a new version, as before: never trusted without evidence.

The evidence is recorded (:func:`record_evidence`) for every record whose file is
listed as the very version it names and that has none yet: the files ingested this
run, and those of states written before it was kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sealsync import received
from sealsync.protocol.spec import MAX_DELETION_FILE_SIZE
from spark_loader.discovery import SourceFile
from spark_loader.state import FileRecord, IngestState, Sidecar, sidecar_of, sidecar_text

CHUNK = 1 << 20
"""How much of a file one read takes while hashing it: memory stays bounded."""


@dataclass(frozen=True)
class Restored(SourceFile):
    """A listed file matched to a recorded version by content: it keeps that id."""

    kept_id: str = ""

    @property
    def file_id(self) -> str:
        return self.kept_id


@dataclass
class Matched:
    files: list[SourceFile]  # the listed files, matched ones as :class:`Restored`
    proven: int = 0  # matched by reading their content this run
    updated: bool = False  # a record took new times


def digest(
    path: Path, version: tuple[int, int], algorithm: str, limit: int | None = None
) -> str | None:
    """The hex digest of the file at ``path`` if it is still the ``(size, mtime_ns)``
    ``version`` before and after it is read (and no larger than ``limit``); None if
    it is not, or does not read."""
    if limit is not None and version[0] > limit:
        return None
    hasher = hashlib.new(algorithm)
    try:
        with open(path, "rb") as f:
            if _version(os.fstat(f.fileno())) != version:
                return None
            left = version[0]
            while left > 0:
                block = f.read(min(CHUNK, left))
                if not block:
                    return None
                hasher.update(block)
                left -= len(block)
            if f.read(1) or _version(os.fstat(f.fileno())) != version:
                return None
    except OSError:
        return None
    return hasher.hexdigest()


def _version(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def _sidecar(path: Path, version: tuple[int, int] | None) -> str:
    """The record of a sidecar version (:func:`.state.sidecar_text`); "" if it cannot
    be read as that version (it changed meanwhile: the next run sees the new one)."""
    if version is None:
        return sidecar_text(None)
    sha = digest(path, version, "sha256", MAX_DELETION_FILE_SIZE)
    return "" if sha is None else sidecar_text((*version, sha))


def record_evidence(state: IngestState, listed: dict[str, SourceFile]) -> bool:
    """Record what proves a restored copy the same (module docstring) for each record
    without it whose file is listed as its version; True if a record changed."""
    changed = False
    for fid, record in list(state.files.items()):
        source = listed.get(fid)
        if record.proved or source is None:
            continue
        if (source.size, source.mtime_ns) != (record.size, record.mtime_ns):
            continue
        md5 = received.recorded_md5(source.path)
        try:
            still = _version(os.stat(source.path)) == (record.size, record.mtime_ns)
        except OSError:
            still = False
        mods = _sidecar(source.mods_path, source.mods)
        mods2 = _sidecar(source.mods2_path, source.mods2)
        if not (still and mods and mods2):
            continue  # changed while we looked: the next run sees the new version
        state.files[fid] = dataclasses.replace(record, md5=md5, mods=mods, mods2=mods2)
        changed = True
    return changed


def match(
    state: IngestState,
    present: Iterable[str],
    files: list[SourceFile],
    say: Callable[[str], None] | None = None,
    *,
    compare: bool = True,
) -> Matched:
    """The listed ``files`` with each file whose id is not ``present`` (in the table)
    but that proves the same as a present record of its sender and name replaced by a
    :class:`Restored` of that record's id, whose record takes the new times.

    Without ``compare`` (a read-only look, ``sealsync status``) only the files the
    records know by their times are matched: nothing is read, no record changes."""
    held = set(present)
    by_name: dict[tuple[str, str], list[str]] = {}
    for fid, record in sorted(state.files.items()):
        if fid in held and record.proved:
            by_name.setdefault((record.sender, record.name), []).append(fid)
    out = Matched(files=[])
    told = say is None
    for f in files:
        kept = None
        for fid in [] if f.file_id in held else by_name.get((f.sender, f.name), []):
            record = state.files[fid]
            seen = _seen(f, record)
            if not seen and not compare:
                continue
            if not seen and not told and say is not None:
                say("files whose times changed: comparing their content with the record")
                told = True
            proof = _proof(f, record)
            if proof is None:
                continue
            kept = fid
            new = dataclasses.replace(
                record, mtime_ns=f.mtime_ns, mods=proof[0], mods2=proof[1], data_dir=_dir(f)
            )
            if compare:
                out.updated |= new != record
                out.proven += not seen
                state.files[fid] = new
            break
        if kept is None:
            out.files.append(f)
        else:
            fields = {x.name: getattr(f, x.name) for x in dataclasses.fields(SourceFile)}
            out.files.append(Restored(**fields, kept_id=kept))
    return out


def _dir(f: SourceFile) -> str:
    return str(f.data_dir or "")


def _seen(f: SourceFile, record: FileRecord) -> bool:
    """Whether ``f`` is, piece by piece, the version the record last saw."""
    try:
        mods, mods2 = sidecar_of(record.mods), sidecar_of(record.mods2)
    except ValueError:
        return False
    return (
        (f.size, f.mtime_ns) == (record.size, record.mtime_ns)
        and f.mods == (None if mods is None else mods[:2])
        and f.mods2 == (None if mods2 is None else mods2[:2])
    )


def _proof(f: SourceFile, record: FileRecord) -> tuple[str, str] | None:
    """The sidecar records of ``f`` if it holds the content ``record`` names (module
    docstring), else None. Sizes first, then the sidecars, then the data file: the
    cheap refusals before any read."""
    try:
        recorded = (sidecar_of(record.mods), sidecar_of(record.mods2))
    except ValueError:
        return None
    pieces = ((f.mods_path, f.mods, recorded[0]), (f.mods2_path, f.mods2, recorded[1]))
    if f.size != record.size or any(
        (now[0] if now else None) != (then[0] if then else None) for _, now, then in pieces
    ):
        return None
    texts = []
    for path, now, then in pieces:
        if not _same_sidecar(path, now, then):
            return None
        texts.append(sidecar_text(None if then is None or now is None else (*now, then[2])))
    if (f.size, f.mtime_ns) != (record.size, record.mtime_ns) and not _same_data(f, record):
        return None
    return texts[0], texts[1]


def _same_sidecar(path: Path, now: tuple[int, int] | None, then: Sidecar | None) -> bool:
    if now is None or then is None:
        return now is None and then is None
    if now == then[:2]:
        return True
    return digest(path, now, "sha256", MAX_DELETION_FILE_SIZE) == then[2]


def _same_data(f: SourceFile, record: FileRecord) -> bool:
    if not record.md5:
        return False  # nothing the content could be compared with
    on_file = received.recorded_md5(f.path)
    if on_file and on_file != record.md5:
        return False  # the receiver says it verified other bytes
    return digest(f.path, (f.size, f.mtime_ns), "md5") == record.md5
