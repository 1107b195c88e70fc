"""Complete file streams committed in batches: checked, staged, logged, loaded, answered.

A file's name is in ``sync.log`` only once the file is staged (fsynced at its name in
``data/``, where it was written or renamed to) and its ownership claimed; the loader
gets it right after, and only then does the sender hear *verified*. Verdicts are sent
in the order files arrived, and nothing is awaited from the sender between files, so
the sender may pipeline.

Complete files are committed in batches (:class:`CommitPipeline`): those that arrived
while the previous batch was being committed, flushed as soon as the sender's next
bytes are not already waiting (it may be waiting for verdicts) or after ``MAX_BATCH``
files. A batch's fsyncs run together and share file-system journal commits, and its
names take one ``sync.log`` fsync, much cheaper per file than one by one. A full batch
whose sender is still streaming is committed on the session's commit threads while
the session reads on; batches queue there in arrival order, ``COMMIT_THREADS``
committing at a time (a later one logs only after the earlier), and their verdicts
are still sent by the session's thread, in order, as each commit is done. When the
sender's bytes stop (it may be waiting for verdicts) the session waits only for the
oldest batch, so it reads the next files as soon as that batch's verdicts have let
the sender go on.

What one batch's commit does is :class:`BatchCommitter`'s job; the pipeline only
orders batches, threads and answers.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from receiver.incoming import Fsyncs, IncomingFile, stage_all, store_failure_reason
from receiver.inspect_pool import DELETION_SUFFIXES, InspectUnavailable, checking_for
from receiver.load.owners import DeviceOwners
from receiver.round_state import RoundState
from receiver.session_limits import SessionAdmission
from sealsync.crashpoints import crash_point
from sealsync.errors import FormatError, SealsyncError
from sealsync.protocol import FileBegin, Verdict

if TYPE_CHECKING:
    from sealsync.formats import FileInfo

MAX_BATCH = 128
"""Files committed together while more stream in; the sender's default pipeline (1,024)
holds several batches, so it sends the next ones while this one commits. Each batch
costs a few syncs (its files', its folders', ``sync.log``'s, the loader's) whatever its
size, so larger batches pay them less often per file; with many files in flight a
batch of 128 moved more files a second than one of 64 or 32 (docs/performance.md)."""
MAX_BATCH_BYTES = 16 << 20
"""...or as soon as this many bytes arrived: a large file's fsync then runs while the
next file streams in, instead of all of them at the end of the round."""
COMMIT_THREADS = 2
"""Batches committed at once. A batch's commit is mostly waiting (the worker pool's
check, the disk's fsyncs), and with one at a time the commit thread would be the
round's serial path; the second batch checks and stages while the first logs, and
names still reach ``sync.log`` and the loader in arrival order."""
MAX_ARRIVED = 2 * MAX_BATCH
"""Complete streams waiting for a verdict before the next FILE_BEGIN waits for their
commit: each holds descriptors and temporaries, and a sender that never reads its
verdicts must not pile them up without end. Two batches, so that ``receiver.openfiles``
asks for the descriptors of a bounded number of streams per session."""


class Arrived:
    """A complete file stream and, once decided, its verdict.

    ``incoming`` is None for a stream refused at FILE_BEGIN (it has its verdict).
    """

    __slots__ = ("begin", "incoming", "status", "reason", "devices")

    def __init__(self, begin: FileBegin, incoming: IncomingFile | None) -> None:
        self.begin = begin
        self.incoming = incoming
        self.status: str | None = None
        self.reason = ""
        self.devices: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.begin.name

    @property
    def file(self) -> IncomingFile:
        """The temporaries of a stream still to be decided (those always have them)."""
        assert self.incoming is not None
        return self.incoming

    def verdict(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason


class BatchCommitter:
    """Verify, stage, log and hand to the loader one batch; decides each verdict, sends none."""

    def __init__(
        self,
        inspect: Callable[[Path], FileInfo],
        inspect_many: Callable[[list[Path]], list[FileInfo | FormatError]] | None,
        owners: DeviceOwners,
        executor: Executor,
        sync_method: str,
        admission: SessionAdmission,
    ) -> None:
        self.inspect = inspect
        self.inspect_many = inspect_many
        self.owners = owners
        self.executor = executor
        self.sync_method = sync_method
        self.admission = admission  # whose sender the files are, what they held

    def commit(
        self, batch: list[Arrived], rnd: RoundState, earlier: Future[None] | None = None
    ) -> None:
        """Done for a batch at a time so that the fsyncs of many files share journal
        commits and ``sync.log`` takes one fsync per batch; a verdict is still sent
        only once its file is staged, logged and handed to the loader. ``earlier`` is
        the batch that arrived before this one, if still committing: this one is
        checked and staged meanwhile, but logged only after it (and not at all if it
        failed, which ends the session: staged and unlogged, recovery sweeps them).
        """
        fsyncs = None
        try:
            # the disk works while the worker pool checks the files
            fsyncs = Fsyncs(
                [item.file for item in batch if item.status is None],
                self.executor,
                self.sync_method,
            )
            self.check(batch)
            accepted = [item for item in batch if item.status is None]
            errors = stage_all(
                [(item.file, rnd.folder.staged(item.name)) for item in accepted],
                self.executor,
                fsyncs,
            )
            staged = []
            for item, error in zip(accepted, errors, strict=True):
                if error is None:
                    staged.append(item)
                else:
                    item.verdict(Verdict.REFUSED, store_failure_reason(error))
            if earlier is not None:
                earlier.result()
            if staged:
                crash_point("receiver.staged")
                try:
                    rnd.log_tsfiles([item.name for item in staged])
                except OSError as exc:  # staged but not logged: recovery sweeps them
                    for item in staged:
                        item.verdict(Verdict.REFUSED, store_failure_reason(exc))
                    staged = []
            for item in staged:
                rnd.loader.load(item.name, item.devices)  # read once: the loader reuses them
                item.verdict(Verdict.VERIFIED, "")
                self.admission.stored(item.begin.stream_size)
        finally:
            if fsyncs is not None:
                fsyncs.wait()  # no fsync may outlive the descriptor discard() closes
            for item in batch:
                if item.incoming is not None:
                    item.incoming.discard()  # a no-op for the staged ones
                    self.admission.release(item.incoming)

    def check(self, batch: list[Arrived]) -> None:
        """Format and devices (inspected concurrently, and with the worker pool each
        file's ``.mods``/``.mods2`` too), then ownership in arrival order."""
        todo = [item for item in batch if item.status is None]
        many = self.inspect_many
        infos: list[FileInfo | str]
        if many is not None and todo:
            sidecars = [(n, path) for n, item in enumerate(todo) for path in _deletion_files(item)]
            with checking_for(self.admission.uuid):  # workers go to senders in turn
                found = many([item.file.data_tmp for item in todo] + [p for _, p in sidecars])
            infos = [
                _format_problem(item, info) if isinstance(info, FormatError) else info
                for item, info in zip(todo, found, strict=False)
            ]
            for (n, path), got in zip(sidecars, found[len(todo) :], strict=True):
                if isinstance(got, FormatError) and not isinstance(infos[n], str):
                    infos[n] = _deletions_problem(todo[n], path, got)
        else:
            infos = list(self.executor.map(self._inspect, todo))
        valid = []
        for item, info in zip(todo, infos, strict=True):
            if isinstance(info, str):
                item.verdict(Verdict.REFUSED, info)
            else:
                valid.append((item, info))
        claims = self.owners.claim_each([info.devices for _, info in valid], self.admission.uuid)
        for (item, info), conflicts in zip(valid, claims, strict=True):
            if isinstance(conflicts, SealsyncError):
                item.verdict(Verdict.REFUSED, f"device ownership not recorded: {conflicts}")
            elif conflicts:
                item.verdict(Verdict.CONFLICT, _conflict_reason(conflicts, self.owners.describe))
            else:
                item.devices = info.devices

    def _inspect(self, item: Arrived) -> FileInfo | str:
        """The file's devices, or why it is not a valid data file."""
        try:
            return self.inspect(item.file.data_tmp)
        except FormatError as exc:
            return _format_problem(item, exc)


def _format_problem(item: Arrived, exc: FormatError) -> str:
    """The refusal reason, named after the sender's file rather than the temporary; a
    check that could not run at all is the receiver's fault, never the file's."""
    if isinstance(exc, InspectUnavailable):
        return f"{exc}; retry later"
    incoming = item.file
    reason = str(exc).replace(str(incoming.data_tmp), item.name)
    reason = reason.replace(incoming.data_tmp.name, PurePosixPath(item.name).name)
    return f"not a valid data file: {reason}"


def _deletion_files(item: Arrived) -> list[Path]:
    """The ``.mods``/``.mods2`` a stream brought (written beside its data file)."""
    sizes = (item.begin.mods_size, item.begin.mods2_size)
    return [
        Path(item.file.data_tmp_name + suffix)
        for suffix, size in zip(DELETION_SUFFIXES, sizes, strict=True)
        if size >= 0
    ]


def _deletions_problem(item: Arrived, path: Path, exc: FormatError) -> str:
    """The refusal reason for a file whose deletions do not read (or over their bounds)."""
    if isinstance(exc, InspectUnavailable):
        return f"{exc}; retry later"
    suffix = path.name[len(item.file.data_tmp.name) :]
    reason = str(exc).replace(str(path), item.name + suffix).replace(path.name, item.name + suffix)
    return f"its deletions do not read: {reason}"


def _conflict_reason(conflicts: dict[str, str], describe: Callable[[str], str]) -> str:
    devices = sorted(conflicts)
    first = devices[0]
    more = f" (and {len(devices) - 1} more devices)" if len(devices) > 1 else ""
    # The owner is named by the name its HELLO gave, never its UUID: a sender learns no
    # other sender's (operators see them in ``sealsync owners`` and ``sealsync senders``).
    return f"device {first} is owned by {describe(conflicts[first])}{more}"


CommitFn = Callable[[list[Arrived], RoundState, "Future[None] | None"], None]


class CommitPipeline:
    """Complete streams, in arrival order, through ``commit`` on the commit threads to
    ``answer`` on the caller's thread.

    ``data_waiting`` says whether the sender's next bytes are already here: then a
    batch is committed only once it is full, and the caller reads on meanwhile.
    The caller's thread is the only one that calls these methods; ``commit`` runs on
    the commit threads, ``answer`` on the caller's.
    """

    def __init__(
        self,
        commit: CommitFn,
        answer: Callable[[list[Arrived]], None],
        data_waiting: Callable[[], bool],
        max_batch: int | None = None,
        max_batch_bytes: int | None = None,
        max_arrived: int | None = None,
    ) -> None:
        self._commit = commit
        self._answer = answer
        self._data_waiting = data_waiting
        self.max_batch = MAX_BATCH if max_batch is None else max_batch
        self.max_batch_bytes = MAX_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
        self.max_arrived = MAX_ARRIVED if max_arrived is None else max_arrived
        self._arrived: list[Arrived] = []  # complete streams waiting for their verdicts
        self._arrived_bytes = 0  # their stream bytes, kept as they arrive (checked per frame)
        # batches handed to the commit threads, oldest first: each answered once done
        self._committing: collections.deque[tuple[Future[None], list[Arrived]]] = (
            collections.deque()
        )
        self._threads: ThreadPoolExecutor | None = None

    @property
    def pending(self) -> bool:
        """Streams arrived or committing, not answered yet."""
        return bool(self._arrived or self._committing)

    def add(self, item: Arrived) -> None:
        """A complete stream, decided or not, to be answered in its turn."""
        self._arrived.append(item)
        self._arrived_bytes += item.begin.stream_size

    def make_room(self, rnd: RoundState | None) -> None:
        """Wait until fewer than ``max_arrived`` streams are unanswered: before a new
        stream's temporaries are made."""
        while len(self._arrived) + sum(len(b) for _, b in self._committing) >= self.max_arrived:
            if not self._committing:
                self._queue(rnd)
            self._answer_done(wait_oldest=True)

    def pump(self, rnd: RoundState | None) -> None:
        """Commit in the background while the sender's next files stream in.

        A full batch is queued on the commit threads while the caller reads on;
        verdicts go out (from the caller's thread, in order) as each batch is done.
        With nothing left to read the sender may be waiting for verdicts: what arrived
        is queued too, and the caller waits for the oldest batch only, then reads
        again if the sender's next bytes came meanwhile.
        """
        self._answer_done()
        if self._data_waiting():
            if len(self._arrived) >= self.max_batch or self._arrived_bytes >= self.max_batch_bytes:
                self._queue(rnd)
            return
        self._queue(rnd)
        while self._committing:
            self._answer_done(wait_oldest=True)
            if self._committing and self._data_waiting():
                return  # the answers let the sender go on: read while the rest commits

    def flush(self, rnd: RoundState | None) -> bool:
        """Commit and answer every complete stream, in arrival order; False if there
        was none."""
        pending = self.pending
        self._queue(rnd)
        self._answer_done(wait_all=True)
        return pending

    def close(self) -> list[Arrived]:
        """Let the batches committing finish (they may be writing ``sync.log``) and
        stop the threads; returns the streams never committed, unanswered."""
        while self._committing:
            future, _ = self._committing.popleft()
            try:
                future.result()
            except Exception:  # never answered: the sender sends its files again
                pass
        if self._threads is not None:
            self._threads.shutdown(wait=True)
        arrived, self._arrived, self._arrived_bytes = self._arrived, [], 0
        return arrived

    def _queue(self, rnd: RoundState | None) -> None:
        """Hand what arrived to the commit threads as one batch (streams arrive only
        inside a round: ``rnd`` is None only when there are none)."""
        batch, self._arrived, self._arrived_bytes = self._arrived, [], 0
        if not batch:
            return
        assert rnd is not None
        if self._threads is None:
            self._threads = ThreadPoolExecutor(COMMIT_THREADS, "sealsync-commit")
        earlier = self._committing[-1][0] if self._committing else None  # else all answered
        future = self._threads.submit(self._commit, batch, rnd, earlier)
        self._committing.append((future, batch))

    def _answer_done(self, wait_oldest: bool = False, wait_all: bool = False) -> None:
        """Answer the queued batches that are done, oldest first (waiting as told)."""
        while self._committing:
            future, batch = self._committing[0]
            if not (wait_all or wait_oldest) and not future.done():
                return
            wait_oldest = False
            self._committing.popleft()
            future.result()  # the commit's exception is the caller's
            self._answer(batch)
