"""The host's storage: where verified files end up (docs/design.md §4.1).

The receiver runs inside a database server, which decides where loaded files live and
how it registers them; ``Storage`` is the small interface it implements. The default,
``DirectoryStorage`` (what ``sealsync serve`` uses), keeps a file of sender ``U`` named
``sequence/<dirs...>/<file>`` at ``<data dir>/sequence/<dirs...>/<U>/<file>`` (same for
``unsequence/``), sidecars beside it. So two senders' files never collide, a delete
from one sender can never reach another's file or the host's own (which never sit in
a folder named by a UUID, docs/design.md §9.4), and ``list`` only has to look at files whose
parent folder is exactly ``U``.

Every operation is idempotent, because the loader replays after a crash without
knowing how far the last attempt got: pieces already moved are recognised, an
identical file already in place is success, a different one is an error and never a
silent skip or overwrite.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from receiver.inventory import held_files
from receiver.layout import check_sender_uuid
from sealsync import durable
from sealsync.errors import SealsyncError
from sealsync.names import DATA_ROOTS, check_data_name


class StorageError(SealsyncError):
    """A load or delete the host's storage cannot do; the staged file is kept."""


class Storage(Protocol):
    """What a host server implements so that the receiver can hand it files."""

    def load(self, sender: str, name: str, staged: Path) -> None:
        """Move ``staged`` and its sidecars (``staged.name + ".resource"``/``".mods"``
        beside it) in as ``sender``'s ``name``; already loaded identical is a no-op,
        a different existing file raises StorageError."""
        ...

    def delete(self, sender: str, name: str) -> bool:
        """Remove only ``sender``'s ``name`` with its sidecars; True if something was there."""
        ...

    def list(self, sender: str) -> set[str]:
        """Relative names loaded from ``sender``."""
        ...

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        """Per relative name loaded from ``sender``: the data file's size and the MD5
        recorded when it was verified ("" if none; :mod:`receiver.inventory`)."""
        ...


# Moved in this order so that ``.resource``, whose presence marks a file complete
# (docs/design.md §1.3), appears last; deleted in the reverse order for the same reason.
LOAD_ORDER = ("", ".mods", ".resource")
DELETE_ORDER = (".resource", ".mods", ".merge", "")


def make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents, each new entry persisted in its parent."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        durable.fsync_dir(folder.parent)


def refuse_links(root: Path, path: Path) -> None:
    """Raise OSError (ELOOP, naming the link) if a component of ``path`` below ``root`` is
    a symbolic link.

    The receiver writes, renames and deletes only inside its own folders. A link planted
    inside them (by another process on the host, a careless restore, a shell) would
    carry those writes and deletes anywhere the receiver may write; so no component
    below the configured folder may be one. ``root`` itself may be (a data dir mounted
    through a link is the operator's choice). Components that do not exist yet are fine:
    the receiver creates them as real folders.
    """
    probe = Path(root)
    for part in Path(path).relative_to(root).parts:
        probe = probe / part
        try:
            mode = os.lstat(probe).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise OSError(
                errno.ELOOP,
                f"{probe} is a symbolic link, and the receiver follows none inside its "
                "storage: replace it with a real folder",
            )


def safe_dirs(root: Path, folder: Path) -> None:
    """``make_dirs(folder)`` after checking that nothing below ``root`` on the way is a link."""
    refuse_links(root, folder)
    make_dirs(folder)


def _same_content(a: str, b: str) -> bool:
    """Byte equality (no stat cache: a replay must see what is on disk now)."""
    if os.stat(a).st_size != os.stat(b).st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk = fa.read(1 << 20)
            if chunk != fb.read(1 << 20):
                return False
            if not chunk:
                return True


def _replaceable(dst: str) -> bool:
    """``.mods`` is the one sidecar that legitimately changes after sealing (points deleted
    later, docs/design.md §3.7, §9.2): a newer list replaces the older one."""
    return dst.endswith(".mods")


def _target(data_dir: str | os.PathLike[str], sender: str, name: str) -> str:
    """Where ``sender``'s ``name`` lives in ``data_dir``, both checked first."""
    check_sender_uuid(sender)
    folder, _, base = check_data_name(name).rpartition("/")
    return os.path.join(data_dir, folder, sender, base)


class DirectoryStorage:
    """The default storage of ``sealsync serve``: plain folders in the receiver's data dirs.

    A file loads into the data dir its staged copy is in, so that the load is a rename
    on one file system, never a copy.
    """

    def __init__(self, data_dirs: list[Path]) -> None:
        if not data_dirs:
            raise StorageError("no receiver data dirs")
        self.data_dirs = [Path(d) for d in data_dirs]
        self._resolved = [Path(os.path.realpath(d)) for d in self.data_dirs]
        self._local = threading.local()  # deferred_sync's state, per loader thread
        self._noreplace = True
        """False once a rename without replacing was declined (see ``_load_new``)."""

    def target(self, data_dir: Path, sender: str, name: str) -> Path:
        """Where ``sender``'s ``name`` lives in ``data_dir``."""
        return Path(_target(data_dir, sender, name))

    def _data_dir_of(self, folder: str) -> Path:
        """The data dir a staged file in ``folder`` is in (a string: see ``load``)."""
        known = getattr(self._local, "data_dir_of", None)
        if known is not None and folder in known:
            return known[folder]  # type: ignore[no-any-return]
        real = Path(os.path.realpath(folder))
        for data_dir, resolved in zip(self.data_dirs, self._resolved, strict=True):
            if real.is_relative_to(resolved):
                if known is not None:
                    known[folder] = data_dir
                return data_dir
        raise StorageError(f"staged file outside every receiver data dir: {folder}")

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Loads on this thread inside the block do not fsync after every rename: each
        folder they touched is fsynced once when the block ends (group commit; the
        loader applies a round's files in batches). Durable when the block exits,
        exception or not; until then a crash may keep or undo each rename, whole,
        which a replay handles as always. An fsync failure raises OSError: nothing of
        the block is known durable then.
        """
        if getattr(self._local, "defer", None) is not None:
            yield  # nested: the outer block syncs
            return
        folders: dict[str, None] = {}
        self._local.defer = folders
        # Per block, not longer: a folder checked for links (and made) and a staging
        # folder's data dir are looked up once for all the batch's files, not per file.
        self._local.checked = set()
        self._local.data_dir_of = {}
        try:
            yield
        finally:
            self._local.defer = None
            self._local.checked = None
            self._local.data_dir_of = None
            for folder in folders:
                durable.fsync_dir(folder)

    def load(self, sender: str, name: str, staged: Path) -> None:
        # Paths as strings, not Path objects: this runs for every file received, on
        # the loader's thread, and building Paths was most of its interpreter time.
        check_sender_uuid(sender)  # before any path use
        staged_folder, _, staged_base = os.fspath(staged).rpartition("/")
        if staged_base != check_data_name(name).rpartition("/")[2]:
            raise StorageError(f"staged file {staged} does not match the name {name}")
        data_dir = self._data_dir_of(staged_folder)
        target = _target(data_dir, sender, name)
        target_folder = target.rpartition("/")[0]
        if self._load_new(os.fspath(staged), target, staged_folder, target_folder, data_dir):
            return
        # Each piece's presence is looked up once: this loader thread is the only one
        # that moves a sender's staged files.
        pieces = [
            (src, dst, os.path.exists(src), os.path.exists(dst))
            for src, dst in ((f"{staged}{suffix}", f"{target}{suffix}") for suffix in LOAD_ORDER)
        ]
        if not pieces[0][2] and not pieces[0][3]:  # LOAD_ORDER starts with the data file
            raise StorageError(f"{name}: the staged file is missing and it is not loaded")
        same: list[bool] = []
        for src, dst, src_there, dst_there in pieces:  # refuse before moving anything
            same.append(src_there and dst_there and _same_content(src, dst))
            if src_there and dst_there and not same[-1] and not _replaceable(dst):
                raise StorageError(
                    f"{name}: a different {os.path.basename(dst)} is already loaded from "
                    f"this sender; the staged copy is kept in {staged_folder}"
                )
        for (src, dst, src_there, _), identical in zip(pieces, same, strict=True):
            if not src_there:
                continue  # moved by an earlier attempt, or an optional sidecar never shipped
            if identical:  # already in place (an earlier attempt)
                durable.remove(src)
                continue
            self._move_in(src, dst, staged_folder, target_folder, data_dir)

    def _load_new(
        self, staged: str, target: str, staged_folder: str, target_folder: str, data_dir: Path
    ) -> bool:
        """The usual load, a file not loaded before, in one rename per piece; False with
        nothing moved when it is not that case, and ``load``'s lookups then decide.

        Each piece moves only if its target name is free (``rename_noreplace``), so the
        renames themselves find out what ``load`` would otherwise look up: a target
        already there (a replay, a file loaded before), a staged piece gone (an earlier
        attempt moved it), or a file system without the flag. Whatever moved is moved
        back before returning False. Only inside ``deferred_sync``, whose folder fsyncs
        make the renames durable.
        """
        defer = getattr(self._local, "defer", None)
        if defer is None or not self._noreplace:
            return False
        self._checked(target_folder, data_dir)
        moved: list[tuple[str, str]] = []
        try:
            for suffix in LOAD_ORDER:
                src, dst = staged + suffix, target + suffix
                try:
                    if not durable.rename_noreplace(src, dst):
                        self._noreplace = False
                        break
                except FileNotFoundError:
                    if not suffix:
                        break  # the data file: moved by an earlier attempt, or missing
                    continue  # an optional sidecar never shipped
                except FileExistsError:
                    break
                moved.append((src, dst))
            else:
                defer[target_folder] = None
                defer[staged_folder] = None
                return True
        except BaseException:
            self._undo(moved)
            raise
        self._undo(moved)
        return False

    @staticmethod
    def _undo(moved: list[tuple[str, str]]) -> None:
        """Move pieces back where ``_load_new`` took them from (a crash meanwhile leaves
        a partly loaded file, which a replay finishes as any other)."""
        for src, dst in reversed(moved):
            os.rename(dst, src)

    def _checked(self, folder: str, data_dir: Path) -> None:
        """Make ``folder`` (a target's) free of links, once per ``deferred_sync`` block."""
        checked = getattr(self._local, "checked", None)
        if checked is None or folder not in checked:
            safe_dirs(data_dir, Path(folder))
            if checked is not None:
                checked.add(folder)

    def _move_in(self, src: str, dst: str, src_folder: str, folder: str, data_dir: Path) -> None:
        """Move one piece into ``folder`` (its target's), made free of links."""
        self._checked(folder, data_dir)
        defer = getattr(self._local, "defer", None)
        if defer is None:
            durable.rename(src, dst)
        else:
            os.replace(src, dst)
            defer[folder] = None
            defer[src_folder] = None

    def delete(self, sender: str, name: str) -> bool:
        removed = False
        for data_dir in self.data_dirs:
            target = self.target(data_dir, sender, name)
            refuse_links(data_dir, target.parent)
            for suffix in DELETE_ORDER:
                removed |= durable.remove(f"{target}{suffix}")
        return removed

    def usage(self, sender: str) -> int:
        """Bytes of ``sender``'s loaded files and their sidecars (``sender_quota_bytes``)."""
        check_sender_uuid(sender)
        total = 0
        for data_dir in self.data_dirs:
            for root in DATA_ROOTS:
                top = data_dir / root
                for folder, _dirs, files in os.walk(top):
                    if os.path.basename(folder) != sender or folder == str(top):
                        continue
                    for file in files:
                        try:
                            total += os.lstat(os.path.join(folder, file)).st_size
                        except OSError:
                            pass  # deleted meanwhile
        return total

    def list(self, sender: str) -> set[str]:
        check_sender_uuid(sender)
        return set(held_files(self.data_dirs, sender, md5=False))

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        check_sender_uuid(sender)
        return held_files(self.data_dirs, sender)
