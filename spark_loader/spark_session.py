"""The Spark session the loader runs in, quiet unless asked to talk.

Spark's chatter (log4j INFO/WARN lines, the JVM's start-up messages, progress
bars) must not reach a cron mail or an operator's terminal: log4j is configured
from a file we write (level WARN, or ERROR at run time), console progress is off,
and, unless verbose, the driver JVM's stderr is a log file in the state dir (the
JVM inherits it at launch, so whatever it prints later lands there too).

No Hive metastore, no UI, no shuffle-heavy defaults: the loader only reads files
and writes a path-based Delta table (Delta's jars and SQL extension: :mod:`.jvm`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sealsync import durable
from sealsync.errors import LockHeld, SealsyncError
from spark_loader import hdfs_close, jar_cache, jvm
from spark_loader import jars_dir as jars_dir_module
from spark_loader.failure import describe, last_error_line
from spark_loader.javacheck import check_java
from spark_loader.mastercheck import check_masters
from spark_loader.state import DRIVER_LOCK_FILE

LOG_FILE = "spark-driver.log"
LOG4J_FILE = "log4j2.properties"
_LOG_LIMIT = 16 * 1024 * 1024

#: Fixed when the session starts (only when the loader creates it).
SESSION_CONF = {
    "spark.app.name": "sealsync-load",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.catalogImplementation": "in-memory",
}

#: Set for the duration of a run and restored afterwards (the session may be the caller's).
RUN_CONF = {
    # Where the loader writes with ``partitionBy`` (not its keyed writer: job.py), rows
    # are sorted by the key before the write (Spark's planned write), one Parquet
    # writer open at a time: measured faster than concurrent writers, which keep
    # every partition's writer and buffers open until the task ends.
    "spark.sql.optimizer.plannedWrite.enabled": "true",
    # Measurement names are case sensitive (IoTDB), so are our columns.
    "spark.sql.caseSensitive": "true",
    # The one partition column of the link folders is a file's number in its batch,
    # read as the int it is (job.py).
    "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.parquet.mergeSchema": "false",
    # List the link folders on the driver: a Spark job per listing costs more than
    # a few thousand local directory reads.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
}

_LOG4J = """\
status = error
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


def _quiet_python_warnings() -> None:
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support.*")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\..*)?")


@contextmanager
def python_warnings_quiet() -> Iterator[None]:
    """PySpark's own Python warnings (pandas versions) are not the user's business."""
    with warnings.catch_warnings():
        _quiet_python_warnings()
        yield


@contextmanager
def py4j_logs_to(path: Path, verbose: bool) -> Iterator[None]:
    """Where py4j's reports of a broken or interrupted call go while the loader runs.

    py4j reports them with ``logging.exception`` on the root logger, and with no
    handler there Python prints each with its traceback on stderr: a Ctrl-C during a
    Spark job printed two before "sealsync: interrupted". Unless verbose, and unless
    the process has configured logging itself, they go to the driver log, beside the
    JVM's own messages.
    """
    root = logging.getLogger()
    if verbose or root.handlers:
        yield
        return
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 at ``path`` while the JVM is launched, so the JVM keeps it for life."""
    try:
        if path.stat().st_size > _LOG_LIMIT:
            durable.rename(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def active_session() -> Any | None:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def create_session(
    master: str,
    log_dir: Path,
    verbose: bool = False,
    conf: dict[str, str] | None = None,
    python: str | None = None,
    jars_dir: Path | None = None,
    s3: bool = False,
) -> Any:
    """A new SparkSession on ``master`` (``local[*]`` needs nothing but Java).

    Raises ConfigError (exit 2) first if ``jars_dir`` lacks a jar, JavaUnavailable
    (exit 69) if there is no Java Spark can start with, and SealsyncError if no
    standalone master of ``master`` can be reached at all.

    ``python``: the interpreter executors start for the TsFile reader; it must have
    pyarrow and tsfile. PySpark takes it from ``PYSPARK_PYTHON`` when the session
    starts, so that is where it goes.

    ``jars_dir``: a folder ``sealsync jars fetch`` filled; the session takes Delta's and
    the TsFile library's jars from it and resolves nothing (:mod:`.jars_dir`).

    ``s3``: the table is on ``s3a://``: the session gets Hadoop's S3 connector
    (``hadoop-aws``, from ``jars_dir`` or by its coordinates) unless ``conf`` names it.
    """
    from pyspark.sql import SparkSession

    s3 = s3 and not jvm.has_hadoop_aws(conf or {})
    jars = None if jars_dir is None else jars_dir_module.session_jars(jars_dir, s3=s3)
    check_java()  # else "Java gateway process exited before sending its port number"
    check_masters(master)  # else a minute of retries before "All masters are unresponsive"
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    props = log_dir / LOG4J_FILE
    durable.atomic_write(props, _LOG4J.format(level="warn"))
    settings = dict(SESSION_CONF)
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    elif master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # Python workers must have this interpreter's packages (pyarrow, tsfile,
        # sealsync); PySpark starts ``python3`` from the PATH, maybe another one.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(master)
    merged = {**settings, **hdfs_close.session_settings(conf or {}), **(conf or {})}
    merged.update(jvm.session_conf(master, merged, jars, s3=s3))
    merged, resolving = jar_cache.apply(master, merged)
    for key, value in merged.items():
        builder = builder.config(key, value)
    java_opts = f"-Dlog4j2.configurationFile={props.resolve().as_uri()}"  # no spaces: a URI
    extra = (conf or {}).get("spark.driver.extraJavaOptions")
    builder = builder.config(
        "spark.driver.extraJavaOptions", f"{java_opts} {extra}" if extra else java_opts
    )
    log = log_dir / LOG_FILE
    before = _size(log)
    try:
        with python_warnings_quiet():
            if verbose:
                spark = builder.getOrCreate()
            else:
                with _stderr_to(log):
                    spark = builder.getOrCreate()
    except Exception as exc:
        # The JVM logs why it gave up (a typo'd master URL: "Master must either be
        # yarn or start with spark, k8s, or local"); py4j and PySpark say only that it
        # did ("Java gateway process exited"). Only this launch's lines count.
        first = last_error_line(_tail(log, since=before)) or describe(exc).reason
        raise SealsyncError(f"cannot start Spark on {master}: {first} (see {log})") from None
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    if resolving is not None:
        jar_cache.remember(resolving, merged, spark)
    jvm.ship_packages(spark)
    return spark


@contextmanager
def conf_set(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Apply ``settings`` to the session for the body, then put the caller's values
    back (the session may be the caller's)."""
    before: dict[str, str | None] = {}
    for key, value in settings.items():
        before[key] = spark.conf.get(key, None)
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, earlier in before.items():
            if earlier is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, earlier)


def run_conf(spark: Any) -> Any:
    """Apply RUN_CONF for the body, then put the caller's values back."""
    return conf_set(spark, RUN_CONF)


@contextmanager
def driver_lock(spark: Any, state_dir: Path) -> Iterator[None]:
    """The driver JVM holds ``spark-driver.lock`` while the run may write the table.

    Held by the JVM, not by Python, so that it outlives a killed Python process
    for exactly as long as the JVM that could still commit does (see
    :mod:`.state`).
    """
    path = Path(state_dir) / DRIVER_LOCK_FILE
    jvm = spark.sparkContext._jvm
    handle = jvm.java.io.RandomAccessFile(str(path), "rw")
    try:
        lock = handle.getChannel().tryLock()
    except Exception as exc:
        handle.close()
        raise SealsyncError(f"cannot lock {path} in the Spark driver: {exc}") from None
    if lock is None:
        handle.close()
        raise LockHeld(f"another Spark driver holds {path}")
    try:
        yield
    finally:
        try:
            lock.release()
        finally:
            handle.close()


@contextmanager
def stage_progress(
    spark: Any, report: Callable[[str], None] | None, label: str, every: float = 5.0
) -> Iterator[None]:
    """While the body runs, report the active stages' task counts every few seconds."""
    if report is None:
        yield
        return
    done = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        last = ""
        while not done.wait(every):
            parts = []
            try:
                for stage_id in sorted(tracker.getActiveStageIds()):
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        parts.append(
                            f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                        )
            except Exception:  # the tracker is best effort; never break the run
                return
            line = f"{label}: {', '.join(parts)}" if parts else ""
            if line and line != last:
                report(line)
                last = line

    thread = threading.Thread(target=poll, name="sealsync-load-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)


def check_executor_python(spark: Any) -> None:
    """Fail the run in one line if executors cannot run the loader's Python readers
    (TsFiles without the Java reader, Parquet files through Arrow).

    Otherwise every file would be skipped with the same reason, one line each. The
    probe is a closure, so it is shipped by value and imports only on the executor.
    """

    def probe(_: Any) -> str | None:
        try:
            import pyarrow  # noqa: F401
            import tsfile  # noqa: F401

            import spark_loader.tsfile_read  # noqa: F401
        except BaseException as exc:  # the reason is the answer
            return f"{type(exc).__name__}: {exc}"
        return None

    python = spark.sparkContext.pythonExec
    try:
        found = spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    except Exception as exc:  # the interpreter could not even start
        found = describe(exc).reason
    if found:
        raise SealsyncError(
            f"executors cannot read received files with {python}: {found[:300]}; set [loader] "
            "python to an interpreter on the workers that has pyarrow and tsfile"
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, since: int = 0, size: int = 64 * 1024) -> str:
    """The last ``size`` bytes of what ``path`` gained after offset ``since`` (from
    its start if it was rotated and is shorter now)."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(end - size, since if since <= end else 0))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
