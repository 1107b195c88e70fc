"""One Delta commit per load run, through Delta's own transaction (``delta-spark``).

The loader writes its data files itself (fast, :mod:`.job`) into the table's folders,
where no reader sees them: a Delta reader reads only the files the log names. At the
end of a run this module hands Delta one transaction: the ``add`` of every new file,
the ``remove`` of every file whose rows leave, the new schema if columns were added,
and a ``txn`` action (``SetTransaction``: the loader's application id and the run's
number). ``OptimisticTransaction.commit`` writes it as the next version of the log,
atomically (the log store's put-if-absent), runs Delta's checks on it (schema,
partition values, protocol) and writes a checkpoint every ten versions. Readers see
the table before the commit or after it, whole.

The run's number is the last one the table records for the loader's application id
plus one: read from the table itself, so whether a run committed is decided by the
table and never by a state file (:mod:`.table`'s recovery). Each loader writing the
table has an application id of its own, and its transaction starts at the version
its run read: Delta's conflict checks let two loaders' commits of different files
both in, and fail the later of two that touch the same (a schema both changed).

The log store makes a version's file appear once: on HDFS a rename that never
replaces; on S3, Delta's S3 log store checks for the file and then creates it without
overwrite, which Hadoop's S3A (3.5, ``fs.s3a.create.conditional.enabled``, on by
default) sends as a conditional PUT (``If-None-Match: *``): a second writer of the
same version fails instead of replacing the first (docs/operations.md says which
stores honour it, and what to do where none does).

The actions are built as the JSON lines of the Delta protocol and parsed by Delta
(``Action.fromJson``), which keeps this side independent of the Scala constructors'
argument lists, which change between Delta releases.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sealsync import durable
from sealsync.config.location import TableLocation
from sealsync.errors import SealsyncError
from spark_loader.delta_log import APP_ID, log_folder
from spark_loader.spark_session import conf_set
from spark_loader.store import java_reason

#: How the commits appear in the table's history.
OPERATION = "DeltaOperations$ManualUpdate$"


#: Set for the commit and restored after (the session may be the caller's). Delta's
#: version checksum (``<version>.crc``, optional in the protocol) is computed from the
#: whole table state by Spark jobs after each commit: measured at 8 of the 9 seconds a
#: 20-file run's commit took, which made the loader five times slower than a plain
#: Spark copy. Readers do without it.
COMMIT_CONF = {"spark.databricks.delta.writeChecksumFile.enabled": "false"}


#: The session setting Delta takes a commit's ``userMetadata`` from.
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


class TableChanged(SealsyncError):
    """Another writer committed to the table while this run prepared its commit: the
    run commits nothing (its files are removed by the next run, which starts again
    from the table as it is then)."""

    kind = "table_changed"


class CommitFailed(SealsyncError):
    """Delta refused the run's commit (its reason is Delta's): nothing was committed."""

    kind = "commit"


def _jvm_object(jvm: Any, name: str) -> Any:
    """A Scala ``object`` of Delta's by its class name, through py4j."""
    package = jvm.org.apache.spark.sql.delta
    return getattr(getattr(package, name), "MODULE$")


def _parser(jvm: Any) -> Any:
    """Delta's ``Action.fromJson``, looked up once per commit (each py4j lookup is a
    round trip to the JVM, and a commit parses an action per file)."""
    actions = jvm.org.apache.spark.sql.delta.actions
    try:
        parse = actions.Action.fromJson
        parse('{"txn":{"appId":"probe","version":0}}')
    except Exception:  # no static forwarder on a trait's companion: the object itself
        parse = getattr(getattr(actions, "Action$"), "MODULE$").fromJson
    return parse


def _action(parse: Any, action: dict[str, Any]) -> Any:
    return parse(json.dumps(action, separators=(",", ":")))


def commit(
    spark: Any,
    table: TableLocation,
    actions: list[dict[str, Any]],
    metadata: dict[str, Any] | None,
    read_version: int,
    run_version: int,
    app_id: str = APP_ID,
) -> int:
    """Commit ``actions`` (and ``metadata``, if the schema changed or the table is new)
    as one version of ``table``; its number.

    ``read_version`` is the version the run planned against: the transaction starts
    there, so that Delta checks what other writers committed since (another loader's
    files in other partitions are no conflict; a schema both changed, or a file both
    removed, is: CommitFailed, nothing written, the next run starts again from the
    table as it is then). ``run_version`` goes into the ``txn`` action under ``app_id``
    (each loader of the table has its own).
    """
    added = sum(1 for a in actions if "add" in a)
    removed = sum(1 for a in actions if "remove" in a)
    # DESCRIBE HISTORY's userMetadata: which run a version is, and what it changed.
    said = f"sealsync load run {run_version}: {added} files added, {removed} removed"
    with conf_set(spark, {**COMMIT_CONF, USER_METADATA: said}):
        return _commit(spark, table, actions, metadata, read_version, run_version, app_id)


def _commit(
    spark: Any,
    table: TableLocation,
    actions: list[dict[str, Any]],
    metadata: dict[str, Any] | None,
    read_version: int,
    run_version: int,
    app_id: str,
) -> int:
    jvm = spark.sparkContext._jvm
    delta = jvm.org.apache.spark.sql.delta
    try:  # a table deleted and made again at the path: no cached log of the old one
        delta.DeltaLog.invalidateCache(
            spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(table.uri)
        )
    except Exception:
        pass  # nothing cached
    log = delta.DeltaLog.forTable(spark._jsparkSession, table.uri)
    txn = _transaction(jvm, log, read_version)
    if txn.readVersion() != read_version:
        raise TableChanged(
            f"the Delta table {table} is at version {txn.readVersion()}, not the "
            f"{read_version} this run read: another writer created it meanwhile; nothing "
            "committed, run the load again"
        )
    _read_app(txn, app_id, run_version, table)
    now = int(time.time() * 1000)
    try:
        parse = _parser(jvm)
        if metadata is not None:
            txn.updateMetadata(_action(parse, {"metaData": metadata}), False)
        listed = jvm.java.util.ArrayList()
        for action in actions:
            listed.add(_action(parse, action))
        txn_action = {"appId": app_id, "version": run_version, "lastUpdated": now}
        listed.add(_action(parse, {"txn": txn_action}))
        seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(listed).toSeq()
        version = int(txn.commit(seq, _jvm_object(jvm, OPERATION)))
    except Exception as exc:  # Delta refused it (a concurrent writer, a check): one line
        raise CommitFailed(
            f"the Delta commit to {table} failed: {java_reason(exc)}; nothing committed"
        ) from None
    _sync(table, version)
    return version


def _read_app(txn: Any, app_id: str, run_version: int, table: TableLocation) -> None:
    """Tell Delta's transaction that it read ``app_id``'s last run, so that its conflict
    check fails this commit if a commit of the same application lands after the read
    version (two runs of one loader never both commit).

    Delta's ``txnVersion`` does that and returns the number, but computes the whole
    table state for it with Spark jobs: in a one-shot run of a few files, most of the
    commit's time. The run already read that number from the log at the same version
    (``run_version`` is it plus one, :mod:`.delta_log`), so the id goes into the
    transaction's reads (``readTxn``, what ``txnVersion`` adds it to) directly; a Delta
    release that does not expose them is asked ``txnVersion`` as before."""
    try:
        getattr(txn.readTxn(), "$plus$eq")(app_id)
        return
    except Exception:
        pass
    if txn.txnVersion(app_id) >= run_version:
        raise TableChanged(f"the Delta table {table} already records run {run_version}")


def _transaction(jvm: Any, log: Any, read_version: int) -> Any:
    """Delta's transaction on the version the run read (the latest for a new table):
    Delta checks, at commit, every version committed after it against this one."""
    if read_version < 0:
        return log.startTransaction()
    none = jvm.scala.Option.empty()
    try:
        snapshot = log.getSnapshotAt(read_version, none, none, False)
    except Exception as exc:  # the version is gone (a log cleaned up meanwhile)
        raise TableChanged(
            f"the Delta table's version {read_version}, which this run read, cannot be read "
            f"any more ({java_reason(exc)}): nothing committed, run the load again"
        ) from None
    return log.startTransaction(none, jvm.scala.Option.apply(snapshot))


def _sync(table: TableLocation, version: int) -> None:
    """Make the commit durable on a local disk: the log store renames it in, but does
    not fsync. (A distributed store's files are durable once written.)"""
    if table.path is None:
        return
    path = Path(log_folder(table.path)) / f"{version:020d}.json"
    try:
        durable.fsync_file(path)
        durable.fsync_dir(path.parent)
    except OSError:
        pass  # the commit is in; its durability is the file system's from here
