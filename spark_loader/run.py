"""One ``sealsync load`` run: reconcile, remove what left, ingest what arrived.

Exactly once, built on three facts:

1. Each source file version has its own partition ``file_id=<id>`` (identity in
   :mod:`.discovery`) of the Delta table (:mod:`.table`); a run writes its files into
   a private staging folder and moves them into the table's folders, where no reader
   sees them, and a removed version's files are only marked to go.
2. All of a run's changes are one Delta commit (:mod:`.delta_commit`) carrying the
   run's number as Delta's idempotent transaction id: a crash before it leaves the
   table as it was (the next run removes the files moved in), a crash after it
   leaves the whole run in, and the table itself says which happened.
3. The table is the truth; ``ingested.json`` is reconciled against it at the start
   of every run (recorded but missing: re-ingested; present but not recorded:
   adopted), and then the wanted set (the files on the receiver now) decides: files
   without a partition are ingested, and partitions of files no longer listed are
   removed only on evidence that the receiver deleted or replaced them
   (:mod:`.removals`; a short listing removes nothing). A rerun with nothing new
   commits nothing.

``--full`` removes every file of the table and ingests every file again, in one
overwrite commit: readers see the old table or the new one, never an empty or half
one. It ends with the same partitions and rows as incremental runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sealsync.config import LoaderConfig
from sealsync.errors import FormatError, LocalIOError, SealsyncError
from spark_loader import jvm, lastrun, removals, resolve, restored, swap, table_binding
from spark_loader import schema as schemas
from spark_loader.columns import keys_of_field
from spark_loader.discovery import Discovery, SourceFile, discover
from spark_loader.expiry import Expiry, due_partitions
from spark_loader.ingest import Ingest, read_deletions
from spark_loader.inputs import Prepared
from spark_loader.report import LoadReport
from spark_loader.spark_session import (
    LOG_FILE,
    active_session,
    check_executor_python,
    create_session,
    driver_lock,
    py4j_logs_to,
    python_warnings_quiet,
    run_conf,
)
from spark_loader.state import (
    FileRecord,
    IngestState,
    load_state,
    loader_lock,
    save_state,
    wait_for_previous_driver,
)
from spark_loader.store import HadoopStore
from spark_loader.table import Partition, Table
from spark_loader.table_layout import LINKS, PARTITION_COLUMNS

Progress = Callable[[str], None]

#: The state dir folder of a ``--full`` build of earlier releases: removed if one is left.
FULL_BUILD_STATE = "full-build"
DEFAULT_BATCH_BYTES = 4 << 30
DEFAULT_BATCH_FILES = 2000


@dataclass(frozen=True)
class _Options:
    master: str | None
    full: bool
    verbose: bool
    spark: Any
    batch_bytes: int
    batch_files: int
    sync: bool
    driver_wait: float
    prune_missing: bool
    now: float | None


def run_load(
    config: LoaderConfig,
    master: str | None = None,
    full: bool = False,
    progress: Progress | None = None,
    *,
    verbose: bool = False,
    spark: Any = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_files: int = DEFAULT_BATCH_FILES,
    sync: bool = True,
    driver_wait: float = 120.0,
    prune_missing: bool = False,
    changes_since: float | None = None,
    now: float | None = None,
) -> LoadReport:
    """Bring the table at ``config.table_path`` in line with the receiver's files.

    Uses ``spark`` if given, else the active SparkSession, else starts one on
    ``master`` (default: the config's) and stops it at the end. Batches bound how
    much one Spark job writes (and how much a crash redoes). ``sync=False`` skips
    the fsync of written partitions (tests). ``driver_wait``: how long to wait for
    the Spark driver of a killed earlier run to exit. ``prune_missing``: remove the
    rows of files missing from the receiver without a logged deletion
    (:mod:`.removals`; by default they are kept and counted). ``changes_since``: when
    the receiver made the first change this run takes in (``sealsync load --follow``),
    recorded as the run's lag. ``now``: the run's clock for the edges' TTL
    (:mod:`.expiry`), in seconds since the epoch; None, the wall clock at its start
    (tests give one to see rows expire without waiting).
    """
    started = time.monotonic()
    options = _Options(
        master,
        full,
        verbose,
        spark,
        batch_bytes,
        batch_files,
        sync,
        driver_wait,
        prune_missing,
        now,
    )
    run = _Run(config, options, progress)
    table_binding.refuse_another_table(config)  # a typo'd table_path: nothing written
    try:
        run.state_dir.mkdir(parents=True, exist_ok=True)
        if config.table_path.local:
            Table(config.table_path).ensure()
    except OSError as exc:
        raise SealsyncError(f"cannot create {exc.filename}: {exc.strerror}") from None
    with loader_lock(run.state_dir), py4j_logs_to(run.state_dir / LOG_FILE, verbose):
        wall = time.time()
        try:
            try:
                bound = table_binding.bind(config)  # under the lock: one run binds it
                if bound is not None:
                    run.report.notes.append(bound)
                    run.say(bound)
                try:
                    run.run()
                finally:
                    run.close()
            except OSError as exc:  # a full disk, a permission: one line, not a traceback
                where = f" {exc.filename}" if exc.filename else ""
                raise LocalIOError(f"loader failed on{where}: {exc.strerror or exc}") from None
        except BaseException as exc:
            run.report.seconds = time.monotonic() - started
            with contextlib.suppress(Exception):  # never hide why the run failed
                lastrun.record_run(config, run.report, wall, exc, changes_since)
            raise
        run.report.seconds = time.monotonic() - started
        lastrun.record_run(config, run.report, wall, None, changes_since)
    return run.report  # the caller prints the summary: once, where it wants it


def _deletions_unreadable(
    files: list[SourceFile], loaded: set[str], report: LoadReport
) -> set[str]:
    """The ids of the new versions in ``files`` whose ``.mods``/``.mods2`` do not read,
    each reported (the file kind and the line or byte offset).

    Such a version is not loaded, and the rows of the version of that file the table
    holds stay (:func:`_hold_for_unreadable`): they change only on a run where the
    deletions read. A version already in the table was read when it was loaded.
    """
    out = set()
    for f in files:
        if (f.mods is not None or f.mods2 is not None) and f.file_id not in loaded:
            try:
                read_deletions(f)
            except FormatError as exc:
                report.skip(str(f.path), str(exc))
                out.add(f.file_id)
            except OSError as exc:
                report.skip(str(f.path), f"cannot read its deletions: {exc.strerror or exc}")
                out.add(f.file_id)
    return out


def _hold_for_unreadable(
    verdict: removals.Verdict, files: list[SourceFile], unreadable: set[str]
) -> list[str]:
    """Take out of ``verdict.remove`` the older versions of the files whose new version
    is unreadable (listed, so they would go as replaced); their ids."""
    names = {f"{f.sender}:{f.name}" for f in files if f.file_id in unreadable}
    held = [fid for fid in verdict.remove if verdict.labels.get(fid) in names]
    verdict.remove = [fid for fid in verdict.remove if fid not in held]
    return held


class _Run:
    """One run under the locks: reconcile, remove, ingest."""

    def __init__(self, config: LoaderConfig, options: _Options, progress: Progress | None) -> None:
        self.config = config
        self.options = options
        self.progress = progress
        self.report = LoadReport()
        self.state_dir = Path(config.state_dir)
        self.table = Table(config.table_path)  # on another file system: see ``run``
        self._spark: Any = None
        self._owned = False
        self._settled = True  # every stale group of the pending senders rewritten
        self._senders: set[str] = set()  # this loader's (:meth:`_ours`)
        self._listed: dict[str, SourceFile] = {}  # the listed files by id
        #: The edges' TTL at the run's one ``now``, and the partitions it rewrites.
        self.expiry = Expiry.at(config.ttl, config.timestamp_precision, options.now)
        self._expired: frozenset[str] = frozenset()
        if self.expiry.active:
            self.report.ttl_now = self.expiry.now

    def close(self) -> None:
        """Stop the Spark session if this run started it."""
        if self._owned and self._spark is not None:
            self._spark.stop()
        self._spark, self._owned = None, False

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def run(self) -> None:
        report = self.report
        wait_for_previous_driver(self.state_dir, self.options.driver_wait)
        location = self.config.table_path
        self.table = Table(location, writer=table_binding.loader_id(self.state_dir))
        if location.path is not None:
            for note in swap.recover(location.path):
                report.notes.append(note)
                self.say(note)
        else:  # its store is the session's Hadoop client: Spark starts first
            self.table.attach(HadoopStore(self._session(), location.uri))
            self.table.ensure()
            if location.scheme == "s3a":
                self._check_log_store()
        table = self.table
        shutil.rmtree(self.state_dir / FULL_BUILD_STATE, ignore_errors=True)
        for name in {LINKS, table.names.links}:  # a killed run's inputs
            shutil.rmtree(self.state_dir / name, ignore_errors=True)
        table.sweep()
        for note in table.open():
            report.notes.append(note)
            self.say(note)
        state = load_state(self.state_dir)
        if state.rebuilt:
            report.notes.append(state.rebuilt)
            self.say(state.rebuilt)
        _adopt_table_columns(state, table)
        found = discover(list(self.config.receiver_data_dirs))
        for name, reason in found.skipped.items():
            report.skip(name, reason)
        senders = len({f.sender for f in found.files})
        self.say(f"found {len(found.files)} loaded files from {senders} senders")
        partitions = self._ours(table.partitions(), state, found)
        in_table = set(partitions) | {fid for fid, r in state.files.items() if r.rows == 0}
        matched = restored.match(state, in_table, found.files, self.say)
        found.files = matched.files
        if matched.proven:
            report.restored = matched.proven
            note = (
                f"{matched.proven} files with changed times hold the content recorded: "
                "kept their rows, recorded the new times"
            )
            report.notes.append(note)
            self.say(note)
        wanted = {f.file_id: f for f in found.files}
        self._listed = wanted
        changed = _reconcile(state, table, partitions, wanted, report) or matched.updated
        verdict = removals.decide(
            state,
            partitions,
            found.files,
            list(self.config.receiver_data_dirs),
            self.options.prune_missing,
            found.troubles,
        )
        # A held sender's files all wait, none of its rows leaves; the others go on.
        for sender, reason in verdict.held.items():
            report.hold(sender, reason)
        loadable = [f for f in found.files if f.sender not in verdict.held]
        unreadable = _deletions_unreadable(loadable, {*partitions, *state.files}, report)
        if verdict.pruned:
            report.notes.append(
                f"--prune-missing: removed the rows of {verdict.pruned} files missing "
                "from the receiver without a logged deletion"
            )
        held = _hold_for_unreadable(verdict, found.files, unreadable)
        if verdict.kept:
            report.kept_missing = len(verdict.kept)
            report.kept_example = verdict.labels[verdict.kept[0]]
        verdict.kept += held  # carried into a --full build, as files kept for lack of evidence
        verdict.kept += verdict.waiting  # and so are a held sender's
        readable = [f for f in loadable if f.file_id not in unreadable]
        if self.options.full:
            self.full(state, partitions, verdict, readable)
            return
        present = set(partitions) | {fid for fid, r in state.files.items() if r.rows == 0}
        # The senders whose overlapping files must be resolved again (:mod:`.resolve`),
        # recorded before anything changes: a run killed after this is completed by the next.
        changed_senders = {partitions[f].sender for f in verdict.remove if f in partitions}
        changed_senders |= {f.sender for f in readable if f.file_id not in present}
        listed = {f.file_id: f for f in readable if f.file_id not in verdict.remove}
        self._expired = due_partitions(self.expiry, partitions, listed)
        if self._expired:
            report.expired = len(self._expired)
            self.say(f"rewriting {report.expired} files with rows the TTL expired since")
        changed_senders |= {partitions[f].sender for f in self._expired}
        settle = resolve.mark_pending(self.state_dir, changed_senders) - verdict.held.keys()
        if verdict.remove:
            self.say(f"removing the rows of {len(verdict.remove)} files the receiver deleted")
        for fid in verdict.remove:
            record = state.files.pop(fid, None)
            partition = partitions.get(fid)
            rows = record.rows if record else (partition.rows if partition else 0)
            if partition is not None:
                table.delete(partition)
            report.removed += 1
            report.rows_removed += rows
        todo = [f for f in readable if f.file_id not in present]
        report.unchanged = len(readable) - len(todo)
        if todo or settle:
            self.ingest(todo, state, settle=settle, wanted=wanted)
        self.commit(state, changed or bool(verdict.remove))
        if settle and self._settled and not self._held_pending():
            resolve.clear_pending(self.state_dir)

    def _check_log_store(self) -> None:
        """A note when the session commits ``s3a://`` tables with Delta's single-driver
        log store (a session the loader did not start): another writer's commit could
        then replace this run's (docs/operations.md, "Several loaders, one table")."""
        found = jvm.s3_log_store(self._session())
        if found != jvm.S3_LOG_STORE and "DynamoDB" not in found:
            note = (
                f"this session commits to s3a:// with {found}, which assumes one writer per "
                f"table: run no other loader on it, or start the session with "
                f"{jvm.S3_LOG_STORE_KEY}={jvm.S3_LOG_STORE} (sealsync load's own do)"
            )
            self.report.notes.append(note)
            self.say(note)

    def _ours(
        self, partitions: dict[str, Partition], state: IngestState, found: Discovery
    ) -> dict[str, Partition]:
        """The partitions of this loader's senders: those its receiver data dirs list,
        or its record names. Another loader's (a table fed by several receivers) are
        not this run's to ingest, keep or remove, whatever ``--full`` or
        ``--prune-missing`` say; they are counted in a note."""
        senders = {f.sender for f in found.files} | set(found.troubled)
        senders |= {record.sender for record in state.files.values()}
        ours = {fid: p for fid, p in partitions.items() if p.sender in senders}
        self._senders = senders
        others = {p.sender for p in partitions.values()} - senders
        if others:
            note = (
                f"the table holds the rows of {len(others)} senders this loader's receiver "
                f"does not list ({len(partitions) - len(ours)} files): another loader's, "
                "left as they are"
            )
            self.report.notes.append(note)
            self.say(note)
        return ours

    def commit(self, state: IngestState, record_changed: bool) -> None:
        """The run's one Delta commit (if the table changes), then the record of it.
        A ``--full`` is no other: its commit removes every old file and adds the new."""
        table = self.table
        record_changed |= restored.record_evidence(state, self._listed)
        if table.changed or table.schema_change(state.columns, state.keys):
            plan = table.plan(state.columns, state.keys, sync=self.options.sync)
            if plan is not None:
                self.say("committing the run to the Delta table")
                session = self._session()
                with python_warnings_quiet(), driver_lock(session, self.state_dir):
                    version = table.commit(session, plan)
                self.say(f"committed version {version} of the Delta table")
            save_state(self.state_dir, state)
        elif record_changed or self.report.ingested:
            save_state(self.state_dir, state)

    def full(
        self,
        old: IngestState,
        partitions: dict[str, Partition],
        verdict: removals.Verdict,
        files: list[SourceFile],
    ) -> None:
        """Rebuild the table from every file, committed as one overwrite.

        Every file of the table is removed and every file ingested again in the run's
        one commit: until it, readers and a failed or killed run see the old table
        whole. Files kept for lack of evidence (:mod:`.removals`) keep their rows: their
        data files stay in the table. The columns stay those of the table (a Delta
        table's schema only grows).
        """
        state = IngestState(
            columns=dict(old.columns), keys={c: list(k) for c, k in old.keys.items()}
        )
        kept = set(verdict.kept)
        for fid in kept:
            record = old.files.get(fid)
            if record is not None:
                state.files[fid] = record
        for fid, partition in partitions.items():
            if fid not in kept:
                self.table.delete(partition)
        self.say(f"full rebuild: ingesting {len(files)} files into one overwrite commit")
        if files:
            senders = {f.sender for f in files}
            wanted = {f.file_id: f for f in files}
            self.ingest(files, state, settle=senders, wanted=wanted)
        self.commit(state, True)
        if self._settled and not self._held_pending():
            resolve.clear_pending(self.state_dir)  # the new table was resolved whole
        now = [p for p in self.table.partitions().values() if p.sender in self._senders]
        self.report.notes.append(
            f"full rebuild: {len(now)} partitions replaced the table's "
            f"{len(partitions)} in one commit"
        )

    def _settle(
        self,
        job: Ingest,
        table: Table,
        ours: bool,
        senders: set[str],
        wanted: dict[str, SourceFile],
    ) -> None:
        """Rewrite the stale groups of overlapping files (:mod:`.resolve`); on the
        loader's own table, forget the pending senders once all are settled."""
        numbers = iter(range(1_000_000, 2_000_000))

        def rewrite(groups: list[list[resolve.Member]]) -> bool:
            return job.rewrite_groups(groups, next(numbers))

        del ours  # the pending senders are forgotten once the run's commit is in
        done, stale = resolve.settle(table, None, senders, wanted, rewrite, self.say, self._expired)
        if self._expired and done == stale:  # points a TTL gave back may overlap other files
            again = resolve.settle(table, None, senders, wanted, rewrite, self.say)
            done, stale = done + again[0], stale + again[1]
        self.report.resolved += done
        self._settled = done == stale

    def _held_pending(self) -> bool:
        """Whether a held sender is pending: it stays so (its groups are settled on the
        run it is back), and so do the others, settled again then at no cost."""
        return bool(resolve.pending(self.state_dir) & self.report.held.keys())

    def _session(self) -> Any:
        """The run's Spark session: the caller's, the active one, or one started here
        (and stopped by :meth:`close`)."""
        if self._spark is None:
            self._spark, self._owned = self._start_session()
        return self._spark

    def _start_session(self) -> tuple[Any, bool]:
        if self.options.spark is not None:
            return self.options.spark, False
        existing = active_session()
        if existing is not None:
            return existing, False
        return start_session(self.config, self.options.master, self.options.verbose), True

    def ingest(
        self,
        todo: list[SourceFile],
        state: IngestState,
        table: Table | None = None,
        state_dir: Path | None = None,
        *,
        settle: set[str] | None = None,
        wanted: dict[str, SourceFile] | None = None,
    ) -> None:
        """Ingest ``todo`` into ``table`` (default: the table), recording in
        ``state_dir``'s state file (default: the loader's); then resolve the overlapping
        files of the ``settle`` senders among the ``wanted`` ones (:mod:`.resolve`)."""
        table = table or self.table
        if todo:
            self.say(f"ingesting {len(todo)} files")
        session = self._session()
        run_id = uuid.uuid4().hex
        try:
            with python_warnings_quiet(), run_conf(session), driver_lock(session, self.state_dir):
                if todo and _remote_python(session):  # TsFile and Parquet reads run in Python
                    check_executor_python(session)
                job = Ingest(
                    session,
                    table,
                    state,
                    state_dir or self.state_dir,
                    self.report,
                    self.progress,
                    run_id,
                    self.options.sync,
                    self.config.max_new_columns,
                    self.expiry,
                )
                admitted = [item for item in job.prepare(todo) if job.admit(item)]
                batches = _batches(
                    admitted,
                    self.options.batch_bytes,
                    self.options.batch_files,
                    lastrun.quarantined(self.state_dir),
                )
                for i, batch in enumerate(batches, start=1):
                    megabytes = sum(p.source.size for p in batch) / 1e6
                    label = f"batch {i}/{len(batches)}"
                    self.say(f"{label}: {len(batch)} files, {megabytes:.1f} MB")
                    job.write(batch, i, label)
                if settle:
                    self._settle(job, table, state_dir is None, settle, wanted or {})
        finally:
            table.remove_run_folder(table.links_folder(run_id))
            shutil.rmtree(self.state_dir / table.names.links / run_id, ignore_errors=True)


def start_session(config: LoaderConfig, master: str | None, verbose: bool = False) -> Any:
    """The loader's Spark session on ``master`` (default: the config's): its jars, its
    settings, and on a cluster the loader's package shipped to the executors."""
    url = master or config.master
    state_dir = Path(config.state_dir)
    created = create_session(
        url,
        state_dir,
        verbose=verbose,
        conf=config.spark,
        python=config.python,
        jars_dir=config.jars_dir,
        s3=config.table_path.scheme == "s3a",
    )
    if not url.startswith("local"):
        _ship_package(created, state_dir)
    return created


def _remote_python(session: Any) -> bool:
    """Executors may run a Python other than this one: on a cluster, or when told to."""
    sc = session.sparkContext
    return not sc.master.startswith("local") or sc.pythonExec != sys.executable


def _reconcile(
    state: IngestState,
    table: Table,
    partitions: dict[str, Partition],
    wanted: dict[str, SourceFile],
    report: LoadReport,
) -> bool:
    """Make the record agree with the table; True if it changed."""
    missing = [fid for fid, r in state.files.items() if r.rows > 0 and fid not in partitions]
    backfilled = 0
    for fid, known in list(state.files.items()):
        found = wanted.get(fid)
        if found is not None and not known.data_dir and found.data_dir is not None:
            state.files[fid] = dataclasses.replace(known, data_dir=str(found.data_dir))
            backfilled += 1
    for fid in missing:
        del state.files[fid]
    adopted = 0
    for fid, partition in partitions.items():
        source = wanted.get(fid)
        record = state.files.get(fid)
        if source is None or (record is not None and record.rows > 0):
            continue  # unwanted partitions are decided on next (.removals)
        rows = partition.rows
        _adopt_columns(state, partition)
        state.files[fid] = FileRecord(
            source.sender,
            source.name,
            source.size,
            source.mtime_ns,
            rows,
            str(source.data_dir or ""),
        )
        adopted += 1
    if missing:
        report.notes.append(
            f"{len(missing)} recorded files were missing from the table; ingesting them again"
        )
    if adopted:
        report.notes.append(f"{adopted} files were in the table but not recorded; recorded them")
    return bool(missing or adopted or backfilled)


def partition_schema(partition: Partition) -> pa.Schema:
    """The columns of a partition's data files, from their footers."""
    footers = [partition.store.footer(f.path) for f in partition.files]
    return pa.unify_schemas([meta.schema.to_arrow_schema() for meta in footers])


def _adopt_columns(state: IngestState, partition: Partition) -> None:
    from pyspark.sql.pandas.types import from_arrow_type

    skip = {*PARTITION_COLUMNS, "time", "device"}
    for field in partition_schema(partition):
        if field.name not in skip and field.name not in state.columns:
            state.columns[field.name] = schemas.to_json(
                schemas.normalize(from_arrow_type(field.type))
            )


def _adopt_table_columns(state: IngestState, table: Table) -> None:
    """The measurement columns of the table's schema, in the record (a Delta schema
    only grows: a file must fit the columns it has, whatever the record says)."""
    skip = {*PARTITION_COLUMNS, "time", "device"}
    for field in table.schema_fields():
        if field["name"] not in skip:
            state.columns[field["name"]] = json.dumps(
                field["type"], separators=(",", ":"), sort_keys=True
            )
            state.keys[field["name"]] = list(keys_of_field(field))


def _batches(
    items: list[Prepared], max_bytes: int, max_files: int, quarantined: Set[str] = frozenset()
) -> list[list[Prepared]]:
    """Batches of at most ``max_bytes``/``max_files``; the files of a ``quarantined``
    sender (a file of theirs killed its job alone last run) go last, in batches of their
    own sender only, so that a file of theirs that kills a job again costs no other
    sender's files a retry."""
    kept = [item for item in items if item.source.sender not in quarantined]
    by_sender: dict[str, list[Prepared]] = {}
    for item in items:
        if item.source.sender in quarantined:
            by_sender.setdefault(item.source.sender, []).append(item)
    out = _fill(kept, max_bytes, max_files)
    for sender in sorted(by_sender):
        out += _fill(by_sender[sender], max_bytes, max_files)
    return out


def _fill(items: list[Prepared], max_bytes: int, max_files: int) -> list[list[Prepared]]:
    out: list[list[Prepared]] = []
    current: list[Prepared] = []
    size = 0
    for item in items:
        if current and (size + item.source.size > max_bytes or len(current) >= max_files):
            out.append(current)
            current, size = [], 0
        current.append(item)
        size += item.source.size
    if current:
        out.append(current)
    return out


def _ship_package(spark: Any, state_dir: Path) -> None:
    """On a cluster, executors import ``spark_loader`` (the TsFile reader) and the
    ``sealsync`` modules it uses from this zip.

    The native ``tsfile`` and ``pyarrow`` packages must be installed there already.
    """
    import sealsync

    packages = [Path(__file__).resolve().parent, Path(sealsync.__file__).resolve().parent]
    target = state_dir / "sealsync-executor.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in packages:
            for path in sorted(package.rglob("*.py")):
                zf.write(path, path.relative_to(package.parent).as_posix())
    spark.sparkContext.addPyFile(str(target))
