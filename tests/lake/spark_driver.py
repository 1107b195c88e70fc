"""A Spark driver in a process of its own, answering JSON requests one per line.

Why a process: a test process can hold one SparkContext, and the tests' shared local
session (``tests/conftest.py``'s ``spark``) may be it; a driver on a cluster needs its
own. It runs in the test's mount namespace, as the loader's driver does, so it sees the
folders the cluster's workers do not.

Requests on stdin, answers on the stdout it was started with (the JVM's own output goes
to stderr):

* ``{"op": "start", "master", "conf", "log_dir", "executors"}``: the loader's session
  (``spark_loader.spark_session.create_session``: Delta, the TsFile reader), once
  ``executors`` executors have registered;
* ``{"op": "look", "path", "tasks"}``: whether the driver and each task can read
  ``path``, and in which mount namespace each ran;
* ``{"op": "write", "uri", "first", "count", "mode"}``: rows ``id``, ``id * 2`` for ids
  ``first`` to ``first + count - 1``, written as Delta by the executors;
* ``{"op": "read", "uri", "version"}``: the table's rows (or those of a version);
* ``{"op": "load", "config", "full"}``: ``sealsync load`` of that loader file in this
  session (``spark_loader.run_load``): its report;
* ``{"op": "rows", "uri", "version"}``: every row of a loader's table (or of a version)
  as Spark SQL answers ``SELECT * FROM delta.`<uri>```, each a dict;
* ``{"op": "list", "uri"}``: every file below ``uri`` on its store (Hadoop's
  ``FileSystem``, the session's configuration), as URIs;
* ``{"op": "two_creates", "uri", "conditional"}``: two writers create the file ``uri``
  without overwrite at the same time (both streams open before either closes), as two
  Delta log stores writing the same version do; with ``conditional``, asking S3A for
  a conditional PUT (``fs.option.create.conditional.overwrite``): what each got
  (``null`` or its error) and what the file holds after;
* ``{"op": "log_store_writes", "uri"}``: the loader's S3 log store writes the file
  ``uri`` twice without overwrite: what each write got and what the file holds;
* ``{"op": "stop"}``.

Each answer is ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_spark: Any = None


def _look(path: str) -> dict[str, Any]:
    """What this process sees of ``path``: its mount namespace, whether it can read it."""
    found: dict[str, Any] = {"mnt": os.readlink("/proc/self/ns/mnt"), "pid": os.getpid()}
    try:
        with open(path, "rb") as f:
            found["read"] = f.read().decode("utf-8", "replace")
    except OSError as exc:
        found["error"] = type(exc).__name__
    return found


def _start(request: dict[str, Any]) -> dict[str, Any]:
    global _spark
    from spark_loader.spark_session import create_session

    began = time.monotonic()
    _spark = create_session(
        request["master"],
        Path(request["log_dir"]),
        conf=request.get("conf") or {},
        python=sys.executable,
    )
    wanted = int(request.get("executors", 1))
    status = _spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + 120
    while status.size() - 1 < wanted:  # the driver is listed too
        if time.monotonic() > deadline:
            raise RuntimeError(f"{status.size() - 1} of {wanted} executors registered in 120s")
        time.sleep(0.2)
        status = _spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    return {"seconds": time.monotonic() - began, "app": _spark.sparkContext.applicationId}


def _tasks_look(request: dict[str, Any]) -> dict[str, Any]:
    path, tasks = request["path"], int(request.get("tasks", 8))

    def probe(_: Any) -> dict[str, Any]:
        time.sleep(0.3)  # long enough that every executor gets tasks
        return _look(path)

    seen = _spark.sparkContext.parallelize(range(tasks), tasks).map(probe).collect()
    return {"driver": _look(path), "tasks": seen}


def _write(request: dict[str, Any]) -> dict[str, Any]:
    first, count = int(request.get("first", 0)), int(request["count"])
    frame = _spark.range(first, first + count, numPartitions=4).selectExpr(
        "id", "id * 2 AS doubled"
    )
    frame.write.format("delta").mode(request.get("mode", "append")).save(request["uri"])
    return {}


def _read(request: dict[str, Any]) -> dict[str, Any]:
    reader = _spark.read.format("delta")
    if request.get("version") is not None:
        reader = reader.option("versionAsOf", int(request["version"]))
    frame = reader.load(request["uri"])
    rows = sorted((r["id"], r["doubled"]) for r in frame.collect())
    return {"rows": rows, "files": sorted(frame.inputFiles())}


def _load(request: dict[str, Any]) -> dict[str, Any]:
    from sealsync.config.loader import load_loader_config
    from spark_loader import run_load

    config = load_loader_config(request["config"])
    report = run_load(config, spark=_spark, full=bool(request.get("full")))
    return {"report": report.to_dict()}


def _rows(request: dict[str, Any]) -> dict[str, Any]:
    sql = f"SELECT * FROM delta.`{request['uri']}`"
    if request.get("version") is not None:
        sql += f" VERSION AS OF {int(request['version'])}"
    return {"rows": [row.asDict() for row in _spark.sql(sql).collect()]}


def _list(request: dict[str, Any]) -> dict[str, Any]:
    jvm = _spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(request["uri"])
    fs = root.getFileSystem(_spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return {"files": []}
    found = fs.listFiles(root, True)
    files = []
    while found.hasNext():
        files.append(str(found.next().getPath().toString()))
    return {"files": sorted(files)}


def _two_creates(request: dict[str, Any]) -> dict[str, Any]:
    jvm = _spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(request["uri"])
    fs = path.getFileSystem(_spark.sparkContext._jsc.hadoopConfiguration())

    def first_line(exc: Exception) -> str:
        java = getattr(exc, "java_exception", None)
        text = f"{java.getClass().getName()}: {java.getMessage()}" if java else str(exc)
        return (text.strip().splitlines() or [type(exc).__name__])[0][:300]

    outcome: list[str | None] = [None, None]
    streams: list[Any] = [None, None]
    for n, text in enumerate(("first", "second")):
        try:
            if request.get("conditional"):
                builder = fs.createFile(path).overwrite(False)
                option = "fs.option.create.conditional.overwrite"
                streams[n] = builder.must(option, True).build()
            else:  # as Delta's own log stores create a version's file
                streams[n] = fs.create(path, False)
            streams[n].write(bytearray(text.encode()))
        except Exception as exc:
            outcome[n] = first_line(exc)
    for n, stream in enumerate(streams):
        if stream is not None:
            try:
                stream.close()
            except Exception as exc:
                outcome[n] = first_line(exc)
    return {"outcome": outcome, "holds": _text(fs, path)}


def _text(fs: Any, path: Any) -> str:
    held = fs.open(path)
    try:
        return bytes(
            _spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toByteArray(held)
        ).decode()
    finally:
        held.close()


def _log_store_writes(request: dict[str, Any]) -> dict[str, Any]:
    jvm = _spark.sparkContext._jvm
    conf = _spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(request["uri"])
    store = jvm.io.sealsync.delta.ConditionalS3LogStore(conf)
    outcome: list[str | None] = []
    for text in ("first", "second"):
        lines = jvm.java.util.ArrayList()
        lines.add(text)
        try:
            store.write(path, lines.iterator(), False, conf)
            outcome.append(None)
        except Exception as exc:
            java = getattr(exc, "java_exception", None)
            outcome.append(str(java.getClass().getName()) if java is not None else repr(exc))
    return {"outcome": outcome, "holds": _text(path.getFileSystem(conf), path)}


OPS = {
    "start": _start,
    "look": _tasks_look,
    "write": _write,
    "read": _read,
    "load": _load,
    "rows": _rows,
    "list": _list,
    "two_creates": _two_creates,
    "log_store_writes": _log_store_writes,
}


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else prints (the JVM, PySpark) goes to stderr
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "stop":
            break
        try:
            answer = {"ok": True, **OPS[request["op"]](request)}
        except Exception as exc:
            traceback.print_exc()
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000]}
        answers.write(json.dumps(answer) + "\n")
    if _spark is not None:
        _spark.stop()
    answers.write(json.dumps({"ok": True}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
