"""Shared fixtures for the receiver loading tests: real TsFiles staged as a session would.

A staged file is what the session leaves in a sender folder's ``data/``: the data file
(a real, tiny tree-model TsFile written with the ``tsfile`` package) and its
``.resource`` (and maybe ``.mods``), with its name logged in the folder's ``sync.log``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import tsfile

from receiver.folders import make_dirs
from receiver.layout import SenderFolder, SyncLog
from receiver.load.owners import DeviceOwners
from receiver.storage import DirectoryStorage
from sealsync.formats import FileInfo
from sealsync.formats import inspect as real_inspect

UUID_A = "1f0e6a52-9b8c-4d3e-8a7f-0c1b2d3e4f5a"
UUID_B = "9c8b7a65-4d3e-4f2a-9b1c-0d2e3f4a5b6c"

_stamp = itertools.count(1)


def write_tsfile(path: Path, devices: Iterable[str]) -> None:
    """A tiny complete TsFile holding ``devices``; every call writes different bytes."""
    make_dirs(path.parent)
    if path.exists():
        path.unlink()
    stamp = next(_stamp)
    writer = tsfile.TsFileWriter(str(path))
    for device in devices:
        writer.register_timeseries(device, tsfile.TimeseriesSchema("s1", tsfile.TSDataType.INT64))
        field = tsfile.Field("s1", stamp, tsfile.TSDataType.INT64)
        writer.write_row_record(tsfile.RowRecord(device, stamp, [field]))
    writer.close()


def inspect(path: Path) -> FileInfo:
    """The receiver's inspection: the real one, reading devices from the file itself."""
    return real_inspect(path)


def stage(
    folder: SenderFolder,
    name: str,
    devices: Iterable[str] = ("root.sg.d0",),
    mods: bytes | None = None,
    resource: bytes = b"resource",
) -> Path:
    """Put ``name`` with its sidecars in the folder's ``data/``; returns the data file."""
    path = folder.staged(name)
    write_tsfile(path, devices)
    Path(f"{path}.resource").write_bytes(resource)
    if mods is not None:
        Path(f"{path}.mods").write_bytes(mods)
    return path


def copy_file(src: Path, dst: Path) -> None:
    make_dirs(dst.parent)
    dst.write_bytes(src.read_bytes())


class Round:
    """A round as the session writes it: ``sync.log`` lines, then ``sync.end``."""

    def __init__(self, folder: SenderFolder) -> None:
        self.folder = folder
        make_dirs(folder.data)
        self.log = SyncLog(folder.sync_log)
        self.log.start()

    def deleted(self, names: Iterable[str]) -> None:
        self.log.deleted_start()
        for name in names:
            self.log.deleted(name)
        self.log.deleted_end()

    def new(self, names: Iterable[str]) -> None:
        self.log.tsfile_start()
        for name in names:
            self.log.tsfile(name)
        self.log.tsfile_end()

    def end(self) -> None:
        self.log.end()
        self.log.close()
        self.folder.sync_end.write_bytes(b"")


def files_under(top: Path) -> set[str]:
    """Every file below ``top``, relative, POSIX style."""
    found = set()
    for here, _dirs, files in os.walk(top):
        for file in files:
            found.add((Path(here) / file).relative_to(top).as_posix())
    return found


def assert_clean(folder: SenderFolder) -> None:
    """No round is in flight in ``folder``: no logs, no marker, no file left anywhere in
    it, and no empty sub-folder left in ``data/``."""
    assert not folder.sync_log.exists()
    assert not folder.load_log.exists()
    assert not folder.sync_end.exists()
    assert files_under(folder.root) == set()
    assert list(folder.data.iterdir()) == []


def loaded_path(data_dir: Path, uuid: str, name: str) -> Path:
    """Where the default layout puts a sender's loaded file: its UUID is the last folder."""
    *dirs, file = name.split("/")
    return data_dir.joinpath(*dirs, uuid, file)


def sender_files_on_disk(data_dir: Path, uuid: str) -> set[str]:
    """Relative names of data files a sender has on disk under the default layout."""
    names = set()
    for rel in files_under(data_dir):
        parts = rel.split("/")
        if parts[0] in ("sequence", "unsequence") and len(parts) >= 3 and parts[-2] == uuid:
            if rel.endswith((".tsfile", ".parquet")):
                names.add("/".join(parts[:-2] + parts[-1:]))
    return names


def make_env(tmp_path: Path) -> tuple[Path, DirectoryStorage, DeviceOwners]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    return data_dir, DirectoryStorage([data_dir]), DeviceOwners(tmp_path / "schema")
