"""One file stream being received: written in place, MD5 in the same pass, then staging.

A FILE_BEGIN announces the sizes of the data file, its ``.resource`` and its
optional ``.mods`` and ``.mods2``; the CHUNKs that follow carry those bytes back to back. They are
written as they arrive and hashed in the same pass, so a file is read from the wire
once and never re-read for its MD5.

They are written at the names the file is staged under in the sender folder's
``data/`` tree, created exclusively: a file there is staged by its name reaching
``sync.log``, not by a rename, so staging renames nothing. Where a name is taken (a
leftover, a copy already staged), the stream goes to temporaries in ``data/``
instead, renamed over the names when staged; nothing is written into an entry that
was there. Temporaries keep the data file's suffix (the format is chosen by name)
and start with ``.incoming-``, which no data name can (names start with
``sequence/`` or ``unsequence/``), so leftovers of a crash are easy to sweep.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import Executor, wait
from pathlib import Path

from receiver.folders import safe_dirs
from receiver.inventory import record_md5
from receiver.partials import Partial, PartialStore, unclaim
from receiver.writer import BackgroundWriter, drop_cached
from sealsync import durable
from sealsync.durable import FSYNC, SYNCFS
from sealsync.protocol import FileBegin

TEMP_PREFIX = ".incoming-"
BACKGROUND_MIN = 4 << 20
"""Streams at least this long are written by the session's BackgroundWriter."""
FSYNC_LANES = 8
"""Tasks a batch's fsyncs are split into (the session's I/O threads run them, see
:class:`Fsyncs`)."""


def sweep_temporaries(folder: Path) -> int:
    """Delete temporaries a crashed session left in ``folder``; returns how many."""
    count = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.startswith(TEMP_PREFIX) and entry.is_file(follow_symlinks=False):
            durable.remove(entry.path)
            count += 1
    return count


def store_failure_reason(exc: OSError, what: str = "the file") -> str:
    """The reason a sender sees when the receiver could not store ``what``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"receiver disk full: {exc.strerror or exc}"
    return f"receiver could not store {what}: {exc.strerror or exc}"


class IncomingFile:
    """The temporaries of one file stream; ``problem`` is set once something failed."""

    def __init__(
        self,
        begin: FileBegin,
        temp_dir: Path,
        token: str,
        writer: BackgroundWriter | None = None,
        resume: Partial | None = None,
        staged: str | None = None,
    ) -> None:
        """``token`` is unique per stream in ``temp_dir`` (a sender's file ids may repeat);
        ``writer`` writes a large stream's chunks while the next ones are hashed;
        ``resume`` is the partial upload a FILE_BEGIN with ``offset`` continues: its
        data file is written in place from ``offset`` on, after its first ``offset``
        bytes were read back into the MD5. ``staged``: where the file will be staged,
        its folder made; the stream is written there directly when none of its pieces
        is there yet (see :meth:`install`), else into temporaries."""
        self.begin = begin
        self.root = temp_dir
        self._writer = writer if begin.stream_size >= BACKGROUND_MIN else None
        self.write_error: OSError | None = None  # set by the writer thread
        self.resume = resume
        self.received = 0
        self.error: OSError | None = None
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._data_md5: str | None = None
        """The data file's own MD5, taken from the stream's as it passes its end."""
        self._fds: list[int] = []
        self._written: list[str] = []  # the temporaries opened, until installed
        # (end offset in the stream, fd index) for data, resource, mods
        self._parts: list[tuple[int, int]] = []
        self.in_place = False
        """Written at its staged names: staging it renames nothing."""
        # Paths as strings: this runs for every file on the session's thread, the
        # round's serial path, where building Path objects was a third of its work.
        try:
            if resume is not None:
                self._name_pieces(os.fspath(resume.data))
                self._open_pieces()
                self._read_prefix(begin.offset)
                return
            if staged is not None:
                self._name_pieces(staged)
                self.in_place = self._open_pieces(exclusive=True)
            if not self.in_place:
                suffix = os.path.splitext(begin.name.rpartition("/")[2])[1]
                self._name_pieces(os.path.join(temp_dir, f"{TEMP_PREFIX}{token}{suffix}"))
                self._open_pieces()
        except OSError as exc:
            self._fail(exc)

    def _name_pieces(self, data: str) -> None:
        self._data = data
        self._resource = data + ".resource"
        self._mods = data + ".mods"
        self._mods2 = data + ".mods2"

    def _open_pieces(self, exclusive: bool = False) -> bool:
        """Open (create) every piece; ``exclusive``: only where no entry is, else False
        with nothing left open or created. Pieces already staged under these names (a
        file sent again, a leftover) are never written into: their file may be in
        ``sync.log`` and waiting to load."""
        end = 0
        for size, path in self._layout():
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW  # a planted link is refused
            if exclusive:
                flags |= os.O_EXCL
            elif path != self._data or self.resume is None:
                flags |= os.O_TRUNC
            try:
                fd = os.open(path, flags, 0o644)
            except FileExistsError:
                if not exclusive:
                    raise
                self.discard()
                self._parts = []
                return False
            self._fds.append(fd)
            self._written.append(path)
            end += size
            self._parts.append((end, len(self._fds) - 1))
        return True

    @property
    def data_tmp(self) -> Path:
        """Where the data file is written: its staged name, a temporary, or a resumed
        partial's data file."""
        return Path(self._data)

    @property
    def data_tmp_name(self) -> str:
        """``data_tmp`` as a string: its sidecars' temporaries are in the same folder."""
        return self._data

    @property
    def resource_tmp(self) -> Path:
        return Path(self._resource)

    @property
    def mods_tmp(self) -> Path:
        return Path(self._mods)

    def _read_prefix(self, offset: int) -> None:
        """Hash the partial's first ``offset`` bytes and continue writing after them."""
        fd = self._fds[0]
        with open(os.open(self._data, os.O_RDONLY | os.O_NOFOLLOW), "rb", buffering=0) as f:
            left = offset
            while left:
                data = f.read(min(left, 1 << 20))
                if not data:
                    raise OSError(f"partial upload of {self.begin.name} shorter than {offset}")
                self._md5.update(data)
                left -= len(data)
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        self.received = offset
        if offset == self.begin.size:
            self._data_md5 = self._md5.hexdigest()

    def _layout(self) -> list[tuple[int, str]]:
        parts = [(self.begin.size, self._data), (self.begin.resource_size, self._resource)]
        if self.begin.mods_size >= 0:
            parts.append((self.begin.mods_size, self._mods))
        if self.begin.mods2_size >= 0:
            parts.append((self.begin.mods2_size, self._mods2))
        return parts

    def write(self, data: bytes | memoryview) -> None:
        """Hash and write the next bytes of the stream; bytes past the announced size only count."""
        view = memoryview(data)
        start = self.received
        boundary = self.begin.size - start
        if self._data_md5 is None and 0 <= boundary <= len(view):
            # the data file ends in this piece: its own MD5 is the stream's state here
            self._md5.update(view[:boundary])
            self._data_md5 = self._md5.hexdigest()
            self._md5.update(view[boundary:])
        else:
            self._md5.update(view)
        self.received += len(view)
        if self.error is not None:
            return
        try:
            for end, index in self._parts:
                if start >= end or not view:
                    continue
                take = min(end - start, len(view))
                piece, view = view[:take], view[take:]
                if self._writer is not None:
                    self._writer.submit(self, self._fds[index], piece)
                else:
                    while piece:
                        piece = piece[os.write(self._fds[index], piece) :]
                start += take
        except OSError as exc:
            self._fail(exc)

    def finish_writes(self) -> None:
        """Wait for the background writes; a failed one becomes this file's ``error``."""
        if self._writer is not None:
            self._writer.wait_for(self)
            if self.write_error is not None and self.error is None:
                self._fail(self.write_error)

    def check(self, md5: str) -> str | None:
        """None if the stream is complete and intact, else why the sender should resend."""
        expected = self.begin.stream_size
        if self.received != expected:
            return f"received {self.received} bytes, announced {expected}"
        if self._md5.hexdigest() != md5:
            return "MD5 mismatch"
        return None

    def fsync(self) -> None:
        """Put the received bytes on disk; the temporaries stay open (see :meth:`release`)."""
        for fd in self.written():
            os.fsync(fd)

    def written(self) -> list[int]:
        """The temporaries' descriptors once every byte and the MD5 record is written
        to them, ready to be made durable (by :meth:`fsync` or a ``syncfs``)."""
        self.finish_writes()
        if self.error is not None:
            raise self.error
        if self._data_md5 is not None and self._fds:
            record_md5(self._fds[0], self._data_md5)  # for send --reconcile
        return self._fds

    def release(self) -> None:
        """Close the (fsynced) temporaries, each leaving the page cache (see
        ``writer.drop_cached``): once checked, nothing in the receiver reads them again.
        Not before the check: the worker that reads the file would then read the disk."""
        for fd in self._fds:
            drop_cached(fd)
        self._close_fds()

    def install(self, target: Path) -> None:
        """Put the (fsynced) pieces at ``target`` and its sidecars' names: nothing to
        move for a stream written there (``in_place``), else renames of temporaries.

        Sidecars first and the data file last: a staged data file is complete with
        its sidecars, and anything a crash leaves earlier is swept by recovery. The
        caller has made ``target``'s folder (:func:`receiver.folders.safe_dirs`) and
        persists the renames by fsyncing it.
        """
        staged = os.fspath(target)
        if self.begin.mods_size < 0:
            # A stale one, staged earlier. Even written in place: the data file and
            # ``.resource`` were new here, but a ``.mods`` may outlive them (a clean-up
            # that stopped half-way).
            durable.unlink(staged + ".mods")
        if self.begin.mods2_size < 0:
            durable.unlink(staged + ".mods2")  # the same for IoTDB 2.x's deletions
        if self.in_place and staged == self._data:
            self._written = []
            return
        os.replace(self._resource, staged + ".resource")
        if self.begin.mods_size >= 0:
            os.replace(self._mods, staged + ".mods")
        if self.begin.mods2_size >= 0:
            os.replace(self._mods2, staged + ".mods2")
        os.replace(self._data, staged)
        self._written = []  # nothing left for discard() to delete
        if self.resume is not None:  # its data is staged: the sidecar describes nothing now
            os.unlink(self.resume.sidecar)
            unclaim(self.resume)
            self.resume = None

    def keep(self, store: PartialStore) -> bool:
        """Keep what a cut stream wrote of its data file as a partial upload (the
        session died inside it); False, and everything discarded, if it is not worth
        keeping or cannot be kept."""
        begin = self.begin
        if not begin.resumable or self.error is not None or not self._fds:
            self.discard()
            return False
        try:
            self.finish_writes()
            if self.error is not None:
                return False
            held = min(self.received, begin.size)
            os.fsync(self._fds[0])
            self._close_fds()
            for path in (self._resource, self._mods, self._mods2):
                durable.unlink(path)
            kept = store.keep(
                begin.name, begin.size, begin.mtime, self.data_tmp, held, fsynced=True
            )
        except OSError:
            self.discard()
            return False
        if kept is None:
            self.discard()
            return False
        if self.resume is not None:
            unclaim(self.resume)
        self.resume = None  # the store owns the files now
        return True

    def discard(self) -> None:
        """Close and delete the temporaries (idempotent); a resumed partial goes too."""
        if self._writer is not None:
            self._writer.wait_for(self)  # no queued write may outlive its descriptor
        self._close_fds()
        if self.resume is not None:
            try:
                durable.remove(self.resume.sidecar)  # first: a sidecar never outlives its bytes
            finally:
                unclaim(self.resume)
                self.resume = None
        paths, self._written = self._written, []
        for path in paths:
            try:
                durable.unlink(path)
            except OSError:  # best effort: recovery sweeps what is left
                pass

    def _fail(self, exc: OSError) -> None:
        self.error = exc
        self.discard()

    def _close_fds(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def sync_method_in_effect(method: str) -> str:
    """What ``sync_method`` does on this machine, in the operator's words."""
    if method == FSYNC:
        return "fsync: each received file is fsynced on its own"
    if durable.can_syncfs():
        return "syncfs: each batch of received files takes one syncfs of its file system"
    return (
        "syncfs, not usable here (it needs Linux 5.8 or later, which reports its write "
        "errors): each received file is fsynced on its own"
    )


class Fsyncs:
    """Several received files being made durable on the I/O threads.

    With ``method`` ``syncfs`` (and more than one file, where ``durable.can_syncfs``)
    one task waits for the files' writes and then syncs their file system once: the
    batch shares one write-back and one flush of the disk's cache instead of one per
    file and sidecar, and the kernel's per-fsync work goes with them. Otherwise each
    file is fsynced, in ``FSYNC_LANES`` tasks that take their share one after the
    other: as many fsyncs in flight as with a task per file, and a wake-up per lane.
    Started before a batch's format check, they run while the worker pool reads the
    files (a refused file's sync is wasted, and rare).
    """

    def __init__(
        self, files: Sequence[IncomingFile], executor: Executor, method: str = SYNCFS
    ) -> None:
        if method == SYNCFS and len(files) > 1 and durable.can_syncfs():
            batch = list(files)
            self._lanes = [(batch, executor.submit(_sync_together, batch))]
            return
        lanes = [list(files[i::FSYNC_LANES]) for i in range(min(FSYNC_LANES, len(files)))]
        self._lanes = [(lane, executor.submit(_fsync_each, lane)) for lane in lanes]

    def wait(self) -> None:
        """Wait for every fsync, whatever came of them."""
        wait([future for _, future in self._lanes])

    def errors(self) -> dict[int, OSError | None]:
        """Wait for every fsync; each file's error (or None) by ``id()`` of the file."""
        found: dict[int, OSError | None] = {}
        for lane, future in self._lanes:
            for incoming, error in zip(lane, future.result(), strict=True):
                found[id(incoming)] = error
        return found


def stage_all(
    files: Sequence[tuple[IncomingFile, Path]],
    executor: Executor,
    fsyncs: Fsyncs | None = None,
) -> list[OSError | None]:
    """fsync, rename and persist several received files for about one journal commit.

    Sequential fsyncs cost one file-system journal commit each (four a file with its
    sidecar and folders); issued together from several threads they share commits,
    so a batch costs about what two files did (figures in docs/performance.md). The result lists,
    per file, None when it is staged durably or the OSError that stopped it.

    ``fsyncs``: those of the files, started earlier (it may hold more files than
    ``files``: those refused since are not staged), else they start here.
    """
    if fsyncs is None:
        fsyncs = Fsyncs([f for f, _ in files], executor)
    synced = fsyncs.errors()
    errors: list[OSError | None] = [synced[id(incoming)] for incoming, _ in files]
    folders: dict[Path, list[int]] = {}
    made: dict[Path, OSError | None] = {}  # each target folder checked for links and made once
    for i, (incoming, target) in enumerate(files):
        if errors[i] is None:
            if target.parent not in made:
                try:
                    safe_dirs(incoming.root, target.parent)
                    made[target.parent] = None
                except OSError as exc:
                    made[target.parent] = exc
            if made[target.parent] is not None:
                errors[i] = made[target.parent]
                continue
            try:
                incoming.release()
                incoming.install(target)
            except OSError as exc:
                errors[i] = exc
                continue
            folders.setdefault(target.parent, []).append(i)
    for folder, error in zip(folders, executor.map(_fsync_dir, folders), strict=True):
        if error is not None:
            for i in folders[folder]:
                errors[i] = error
    return errors


def _sync_together(files: list[IncomingFile]) -> list[OSError | None]:
    """Every file's writes, then one ``syncfs`` per file system they are on; each
    file's error is its own. A failed ``syncfs`` may report another program's file
    on that file system, so its files are then fsynced one by one, which tells
    whose it was: none is answered *verified* on the strength of a call that failed."""
    errors: list[OSError | None] = []
    devices: list[int | None] = []
    one_on: dict[int, int] = {}  # file system (st_dev) -> a descriptor on it
    folders: dict[str, int] = {}  # a file's sidecars are in its folder: one fstat each
    for incoming in files:
        device = None
        try:
            fds = incoming.written()
            if fds:
                folder = os.path.dirname(incoming.data_tmp_name)
                device = folders.get(folder)
                if device is None:
                    device = folders[folder] = os.fstat(fds[0]).st_dev
                one_on.setdefault(device, fds[0])
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
        devices.append(device)
    failed = set()
    for device, fd in one_on.items():
        try:
            durable.syncfs(fd)
        except OSError:
            failed.add(device)
    for i, incoming in enumerate(files):
        if devices[i] in failed:
            errors[i] = _fsync(incoming)
    return errors


def _fsync_each(files: list[IncomingFile]) -> list[OSError | None]:
    """One lane's files, one after the other; each one's error is its own."""
    return [_fsync(incoming) for incoming in files]


def _fsync(incoming: IncomingFile) -> OSError | None:
    try:
        incoming.fsync()
    except OSError as exc:
        return exc
    return None


def _fsync_dir(folder: Path) -> OSError | None:
    try:
        durable.fsync_dir(folder)
    except OSError as exc:
        return exc
    return None
