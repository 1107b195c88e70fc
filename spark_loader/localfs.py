"""Hadoop's local file system without a forked ``chmod`` per file and folder.

PySpark ships no Hadoop native library, so Hadoop's ``RawLocalFileSystem`` sets
the permission of every file and folder it creates by forking ``chmod``. The
loader writes one partition per source file, so that is a fork for each of them
and for their folders (449 forks for 200 files), a large part of the loader's
write time. ``PosixLocalFileSystem`` (one small Java class, source in ``java/``,
compiled into ``jars/``) sets the same bits through ``java.nio`` instead.

It is used where it is sure to be loadable: a local master, whose executors are
the driver JVM, which the loader starts with the jar on its class path. On a
cluster, or in a session someone else started without the jar, the writes use
Hadoop's ``RawLocalFileSystem`` as before (slower, same result).

Rebuild the jar after changing the Java source (needs a JDK; the class compiles
against the Hadoop client jar PySpark ships)::

    python -m spark_loader.localfs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from sealsync import durable

CLASS = "io.sealsync.hadoop.PosixLocalFileSystem"
FALLBACK = "org.apache.hadoop.fs.RawLocalFileSystem"
HERE = Path(__file__).resolve().parent
JAR = HERE / "jars" / "sealsync-localfs.jar"
SOURCES = HERE / "java"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same classes give the same jar


def session_conf(master: str, conf: dict[str, str]) -> dict[str, str]:
    """What a new session needs so its driver JVM can load the class (local only)."""
    if not master.startswith("local") or not JAR.is_file():
        return {}
    key = "spark.driver.extraClassPath"
    current = conf.get(key)
    return {key: f"{current}{os.pathsep}{JAR}" if current else str(JAR)}


def implementation(spark: Any) -> str:
    """The ``fs.file.impl`` class the loader's writes use in this session."""
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        return FALLBACK
    try:
        sc._jvm.java.lang.Class.forName(CLASS)
    except Exception:  # not on this JVM's class path: a session the loader did not start
        return FALLBACK
    return CLASS


def hadoop_client_jar() -> Path:
    """The Hadoop API jar PySpark ships, to compile against."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise FileNotFoundError("pyspark ships no hadoop-client-api jar")
    return found[-1]


def build(jar: Path = JAR, javac: str = "javac") -> None:
    """Compile ``java/`` into ``jar`` (Java 17 bytecode), entries in a fixed order and time."""
    sources = sorted(SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-cp",
                str(hadoop_client_jar()),
                "-d",
                str(out),
                *map(str, sources),
            ],
            check=True,
        )
        staged = out / "staged.jar"
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as zf:
            manifest = zipfile.ZipInfo("META-INF/MANIFEST.MF", _EPOCH)
            zf.writestr(manifest, "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(out.rglob("*.class")):
                info = zipfile.ZipInfo(path.relative_to(out).as_posix(), _EPOCH)
                zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
        jar.parent.mkdir(parents=True, exist_ok=True)
        durable.atomic_write(jar, staged.read_bytes())  # a loader never sees half a jar


if __name__ == "__main__":
    build()
    print(f"wrote {JAR}", file=sys.stderr)
