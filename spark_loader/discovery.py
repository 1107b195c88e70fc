"""Which data files the receiver has loaded, and what identifies each one.

The receiver's default storage (docs/design.md §4.8) puts a file of sender ``U`` with the
relative name ``sequence/<dirs...>/<file>`` at ``<data dir>/sequence/<dirs...>/U/<file>``
(same for ``unsequence/``). So a loaded file is a data file whose parent folder is
named by a canonical UUID; everything else under ``sequence/`` and ``unsequence/``
belongs to the host and is never read. ``sync-receiver/`` (files still being
verified or waiting to load) is outside those roots, so it is never seen.

**File identity.** A source file is ``(sender, relative name)``; one *version* of it
is that plus its size and modification time in nanoseconds, plus the size and mtime of
its ``X.mods`` and of its ``X.mods2`` (the points deleted after sealing:
:mod:`sealsync.formats.mods`, :mod:`sealsync.formats.mods2`) or "none", and
``file_id`` is a hash of them. Storage files are never modified in place (a load
renames a whole file in), so a file replaced under the same name with other content
has a new size or mtime, hence a new ``file_id``: its old rows leave the table and the
new ones come in. A ``.mods`` that appears, grows, is replaced or goes away changes
the id the same way, so the file's partition is rewritten with the deletions applied:
the table never keeps a point deleted after it was loaded. Without a ``.mods`` or
``.mods2`` the hash covers the first four fields alone, exactly as before deletions
counted, so upgrading the loader does not rewrite a table of such files. The id starts
with a letter so that no reader's partition type inference ever turns it into a
number.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from sealsync.errors import BadName
from sealsync.names import DATA_ROOTS, DATA_SUFFIXES, MODS2_SUFFIX, MODS_SUFFIX, check_data_name

PARQUET = ".parquet"
TSFILE = ".tsfile"


def is_sender_folder(name: str) -> bool:
    """A folder named by a sender UUID, in the one spelling the receiver writes."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def file_id(
    sender: str,
    name: str,
    size: int,
    mtime_ns: int,
    mods: tuple[int, int] | None = None,
    mods2: tuple[int, int] | None = None,
) -> str:
    """The id of one version of a source file (see the module docstring).

    ``mods``/``mods2`` are the ``(size, mtime_ns)`` of its ``X.mods``/``X.mods2``, None
    if it has none. The keys with and without them differ in their fields (a name
    holds no NUL), so no version with deletions shares an id with one without.
    """
    key = f"{sender}\0{name}\0{size}\0{mtime_ns}"
    if mods is not None:
        key += f"\0mods\0{mods[0]}\0{mods[1]}"
    if mods2 is not None:
        key += f"\0mods2\0{mods2[0]}\0{mods2[1]}"
    return "f" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def mods_version(path: Path) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of the ``.mods`` at ``path``; None if there is none.

    Raises OSError when it cannot be told (and for a ``.mods`` that is no regular
    file: its deletions cannot be read, so no version of it can be loaded).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class SourceFile:
    """One loaded data file as found in the receiver's storage."""

    path: Path  # where it is in the receiver's storage
    sender: str
    name: str  # relative name on the sender: sequence/<dirs...>/<file>
    size: int
    mtime_ns: int
    mods: tuple[int, int] | None = None  # (size, mtime_ns) of its X.mods, if it has one
    data_dir: Path | None = None  # the configured data dir it was found in
    mods2: tuple[int, int] | None = None  # (size, mtime_ns) of its X.mods2, if it has one

    @property
    def file_id(self) -> str:
        return file_id(self.sender, self.name, self.size, self.mtime_ns, self.mods, self.mods2)

    @property
    def mods_path(self) -> Path:
        return self.path.with_name(self.path.name + MODS_SUFFIX)

    @property
    def mods2_path(self) -> Path:
        return self.path.with_name(self.path.name + MODS2_SUFFIX)

    def unchanged(self) -> bool:
        """Whether the receiver still holds this version (data file, ``.mods``, ``.mods2``)."""
        try:
            st = os.stat(self.path)
            mods = mods_version(self.mods_path)
            mods2 = mods_version(self.mods2_path)
        except OSError:
            return False
        return (st.st_size, st.st_mtime_ns, mods, mods2) == (
            self.size,
            self.mtime_ns,
            self.mods,
            self.mods2,
        )

    @property
    def suffix(self) -> str:
        return PARQUET if self.name.endswith(PARQUET) else TSFILE

    @property
    def label(self) -> str:
        """How reports name the file: the sender and its relative name."""
        return f"{self.sender}:{self.name}"


@dataclass
class Discovery:
    files: list[SourceFile]
    skipped: dict[str, str]  # storage path -> reason


def _relative_name(parts: tuple[str, ...]) -> str | None:
    """``(root, dirs..., uuid, file)`` -> ``root/dirs.../file``, or None if not a sender's."""
    if len(parts) < 3 or not is_sender_folder(parts[-2]):
        return None
    return "/".join((*parts[:-2], parts[-1]))


def discover(data_dirs: list[Path]) -> Discovery:
    """Every loaded data file of every sender, in a stable order.

    A name the receiver could not have written (it fails the name gate) and a
    second copy of one (sender, name) in another data dir are reported, not read.
    """
    found: dict[tuple[str, str], SourceFile] = {}
    skipped: dict[str, str] = {}
    for data_dir in data_dirs:
        for root in DATA_ROOTS:
            top = Path(data_dir) / root
            for dirpath, dirnames, filenames in os.walk(top):
                listed = {*filenames, *dirnames}  # a .mods that is a folder is a bad .mods
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                rel_dir = Path(dirpath).relative_to(data_dir).parts
                if not rel_dir or not is_sender_folder(rel_dir[-1]):
                    continue
                for fname in sorted(filenames):
                    if fname.startswith(".") or not fname.endswith(DATA_SUFFIXES):
                        continue  # sidecars, temporaries
                    path = Path(dirpath) / fname
                    name = _relative_name((*rel_dir, fname))
                    if name is None:
                        continue
                    try:
                        check_data_name(name)
                        st = os.stat(path)
                    except BadName as exc:
                        skipped[str(path)] = f"not a name the receiver writes: {exc}"
                        continue
                    except FileNotFoundError:
                        continue  # deleted while we looked: simply not there
                    except OSError as exc:
                        skipped[str(path)] = f"cannot stat: {exc.strerror or exc}"
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    versions: dict[str, tuple[int, int] | None] = {}
                    for suffix in (MODS_SUFFIX, MODS2_SUFFIX):
                        versions[suffix] = None
                        if fname + suffix in listed:  # a stat only for files that have one
                            try:
                                versions[suffix] = mods_version(path.with_name(fname + suffix))
                            except OSError as exc:
                                skipped[str(path)] = (
                                    f"cannot stat its {suffix}: {exc.strerror or exc}"
                                )
                                break
                    if str(path) in skipped:
                        continue
                    mods = versions[MODS_SUFFIX]
                    sender = rel_dir[-1]
                    key = (sender, name)
                    if key in found:
                        skipped[str(path)] = (
                            f"duplicate of {found[key].path} (same sender and name)"
                        )
                        continue
                    found[key] = SourceFile(
                        path,
                        sender,
                        name,
                        st.st_size,
                        st.st_mtime_ns,
                        mods,
                        Path(data_dir),
                        versions[MODS2_SUFFIX],
                    )
    files = sorted(found.values(), key=lambda f: (f.sender, f.name))
    return Discovery(files=files, skipped=skipped)
