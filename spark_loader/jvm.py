"""The loader's own Java classes: one jar, on the class path of the driver it starts.

Two small classes, each used only where it is sure to load and run (a local master,
whose executors are the driver JVM, started by the loader with the jar on its class
path); anywhere else the loader uses Spark's and Hadoop's own classes, slower and
with the same result:

* ``PosixLocalFileSystem`` (:mod:`.localfs`): Hadoop's local file system without a
  forked ``chmod`` per file and folder;
* ``KeyedParquetFileFormat`` (:mod:`.job`): Spark's Parquet writer putting each
  source file's rows in a folder of their own, without ``partitionBy``'s sort and
  per-row copy.

Rebuild the jar after changing the Java sources in ``java/`` (needs a JDK; they
compile against the jars PySpark ships)::

    python -m spark_loader.jvm
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

HERE = Path(__file__).resolve().parent
JAR = HERE / "jars" / "sealsync-spark.jar"
SOURCES = HERE / "java"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same classes give the same jar


def session_conf(master: str, conf: dict[str, str]) -> dict[str, str]:
    """What a new session needs so its driver JVM can load the classes (local only)."""
    if not master.startswith("local") or not JAR.is_file():
        return {}
    key = "spark.driver.extraClassPath"
    current = conf.get(key)
    return {key: f"{current}{os.pathsep}{JAR}" if current else str(JAR)}


def loadable(spark: Any, name: str, probe: bool = False) -> bool:
    """Whether this session's writes can use class ``name`` of the jar.

    ``probe``: the class also has a static ``usable()`` that says whether the Spark
    it runs in has what it was compiled against (the jar is built for the PySpark
    the project installs; another may be in use).
    """
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        return False  # a cluster's executors may not have the jar, whatever the driver has
    try:
        sc._jvm.java.lang.Class.forName(name)
        if probe:
            cls = sc._jvm
            for part in name.split("."):
                cls = getattr(cls, part)
            return bool(cls.usable())
    except Exception:  # not on this JVM's class path: a session the loader did not start
        return False
    return True


def spark_jars() -> Path:
    """The folder of the jars PySpark ships, to compile against."""
    import pyspark

    found = Path(pyspark.__file__).parent / "jars"
    if not any(found.glob("hadoop-client-api-*.jar")):
        raise FileNotFoundError(f"{found} holds no hadoop-client-api jar")
    return found


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
                str(spark_jars() / "*"),
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
