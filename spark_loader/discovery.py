"""Which data files the receiver has loaded, and what identifies each one.

The receiver's storage keeps loaded files in the received-files layout
(:mod:`sealsync.received`, docs/design.md §4.8): a file of sender ``U`` with the
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
A copy of a version with other times and the same content (a restored storage) keeps
that version's id: :mod:`.restored`.

**Per sender.** A file the listing sees but cannot identify (its stat fails, or its
``.mods``/``.mods2`` is no regular file, such as a folder squatted at that path) is a
*trouble* of its sender (:class:`Trouble`): the listing of that sender is incomplete,
so the run leaves all of that sender's files as they are (nothing ingested, nothing
removed) and reports why, while every other sender's files go in
(:mod:`.removals`, :mod:`.ingest`). A folder that cannot be listed is the trouble of
the sender it belongs to, or reported as skipped when it is a host folder above every
sender's. A name the receiver could not have written, or a second copy of one file,
is never loadable and is reported on its own, holding nobody.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sealsync import received
from sealsync.errors import BadName
from sealsync.names import MODS2_SUFFIX, MODS_SUFFIX, check_data_name

PARQUET = ".parquet"
TSFILE = ".tsfile"


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


@dataclass(frozen=True)
class Trouble:
    """A file (or folder) of one sender the listing saw but could not identify."""

    sender: str
    data_dir: Path  # the configured data dir it is in
    path: Path
    reason: str

    @property
    def text(self) -> str:
        """One line for reports: what and why."""
        return f"{self.path}: {self.reason}"


def troubled(troubles: Iterable[Trouble]) -> dict[str, str]:
    """Sender -> why its files wait (its first trouble by path), in sender order."""
    out: dict[str, str] = {}
    for t in sorted(troubles, key=lambda t: (t.sender, str(t.path))):
        out.setdefault(t.sender, f"its listing is incomplete: {t.text}")
    return out


@dataclass
class Discovery:
    files: list[SourceFile]
    skipped: dict[str, str]  # storage path -> reason
    troubles: list[Trouble] = field(default_factory=list)

    @property
    def troubled(self) -> dict[str, str]:
        """Sender -> why its files wait this run (:func:`troubled`)."""
        return troubled(self.troubles)

    def by_sender(self) -> dict[str, list[SourceFile]]:
        """The listed files of each sender, senders in order (troubled ones too)."""
        out: dict[str, list[SourceFile]] = {}
        for f in self.files:
            out.setdefault(f.sender, []).append(f)
        for t in self.troubles:
            out.setdefault(t.sender, [])
        return dict(sorted(out.items()))


def discover(data_dirs: list[Path]) -> Discovery:
    """Every loaded data file of every sender, in a stable order.

    A name the receiver could not have written (it fails the name gate) and a
    second copy of one (sender, name) in another data dir are reported, not read.
    What cannot be identified is its sender's :class:`Trouble` (module docstring).
    """
    found: dict[tuple[str, str], SourceFile] = {}
    skipped: dict[str, str] = {}
    troubles: list[Trouble] = []
    for data_dir in data_dirs:
        data_dir = Path(data_dir)

        def unlisted(exc: OSError, data_dir: Path = data_dir) -> None:
            if isinstance(exc, FileNotFoundError) or exc.filename is None:
                return  # a data root that does not exist, or gone while we looked
            where = Path(exc.filename)
            reason = f"cannot list it: {exc.strerror or exc}"
            try:
                owner = received.owner_of(where.relative_to(data_dir).parts)
            except ValueError:
                owner = None
            if owner is None:
                skipped[str(where)] = reason
            else:
                troubles.append(Trouble(owner, data_dir, where, reason))

        for root in received.ROOTS:
            top = data_dir / root
            for dirpath, dirnames, filenames in os.walk(top, onerror=unlisted):
                listed = {*filenames, *dirnames}  # a .mods that is a folder is a bad .mods
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                rel_dir = Path(dirpath).relative_to(data_dir).parts
                sender = received.sender_of_folder(rel_dir)
                if sender is None:
                    continue
                for fname in sorted(filenames):
                    if not received.is_data_file(fname):
                        continue  # sidecars, temporaries
                    path = Path(dirpath) / fname
                    name = received.name_in(rel_dir, fname)
                    try:
                        check_data_name(name)
                        st = os.stat(path)
                    except BadName as exc:
                        skipped[str(path)] = f"not a name the receiver writes: {exc}"
                        continue
                    except FileNotFoundError:
                        continue  # deleted while we looked: simply not there
                    except OSError as exc:
                        reason = f"cannot stat: {exc.strerror or exc}"
                        skipped[str(path)] = reason
                        troubles.append(Trouble(sender, data_dir, path, reason))
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
                                reason = f"cannot stat its {suffix}: {exc.strerror or exc}"
                                skipped[str(path)] = reason
                                troubles.append(Trouble(sender, data_dir, path, reason))
                                break
                    if str(path) in skipped:
                        continue
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
                        versions[MODS_SUFFIX],
                        data_dir,
                        versions[MODS2_SUFFIX],
                    )
    files = sorted(found.values(), key=lambda f: (f.sender, f.name))
    return Discovery(files=files, skipped=skipped, troubles=troubles)
