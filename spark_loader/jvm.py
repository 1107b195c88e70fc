"""The loader's own Java classes: one jar, and the TsFile library it reads TsFiles with.

Two small classes, each used only where it is sure to load and run (a local master,
whose executors are the driver JVM, started by the loader with the jar among its
``spark.jars``); anywhere else the loader uses Spark's and Hadoop's own classes, slower and
with the same result:

* ``PosixLocalFileSystem`` (:mod:`.localfs`): Hadoop's local file system without a
  forked ``chmod`` per file and folder;
* ``KeyedParquetFileFormat`` (:mod:`.job`): Spark's Parquet writer putting each
  source file's rows in a folder of their own, without ``partitionBy``'s sort and
  per-row copy.

And the TsFile reader, which runs on every master: ``TsFileRows`` (Spark's side) and
``TsFilePoints`` (the reading, with Apache TsFile's Java library ``TSFILE_PACKAGE``),
used by :mod:`.tsfile_read`. The session the loader starts asks Spark for the
library by its Maven coordinates (``spark.jars.packages``: resolved by Spark's ivy,
cached under the user's home, the same on a cluster), or takes it from a folder
(``[loader] jars_dir``, :mod:`.jars_dir`), and ships the jar to executors
(``spark.jars``) when the master is not local. The library's own dependencies are
all among Spark's jars, so only it and its ``common`` module are fetched.

Rebuild the jar after changing the Java sources in ``java/`` (needs a JDK and Maven;
they compile against the jars PySpark ships and the TsFile library, which Maven
fetches into ``~/.m2``)::

    python -m spark_loader.jvm
"""

from __future__ import annotations

import importlib.metadata
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


#: The TsFile library the Java reader is built and run with (reads formats 3 and 4): the
#: newest release, whose decoders are, codec by codec, the ones every writer's release
#: reads with (docs/formats.md, "What the loader reads exactly").
TSFILE_VERSION = "2.4.0"
TSFILE_PACKAGE = f"org.apache.tsfile:tsfile:{TSFILE_VERSION}"
#: Its dependencies Spark already ships (the same libraries, Spark's versions are used).
TSFILE_EXCLUDES = (
    "com.github.luben:zstd-jni",
    "org.xerial.snappy:snappy-java",
    "commons-io:commons-io",
    "org.apache.commons:commons-lang3",
    "org.lz4:lz4-java",
    "at.yawk.lz4:lz4-java",  # the maintained fork (same classes) the library names from 2.4
    "org.tukaani:xz",
    "org.slf4j:slf4j-api",
    "org.antlr:antlr4-runtime",
)
TSFILE_ROWS = "io.sealsync.spark.TsFileRows"

#: Delta Lake's release when the ``delta-spark`` package's own is unknown, and the
#: Scala line of the Spark it runs in (Spark 4 is built for Scala 2.13 only).
DELTA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def use_tsfile(version: str, jar: Path) -> None:
    """This process's sessions read with TsFile ``version`` and the loader's classes from
    ``jar`` (built against that release by :func:`build`), in place of the project's.

    How the canary (``tests/canary.py``) tries a newer release of the library without a
    change to the project; every session started afterwards takes both.
    """
    global TSFILE_VERSION, TSFILE_PACKAGE, JAR
    if not jar.is_file():
        raise FileNotFoundError(f"{jar}: no such jar; build it with spark_loader.jvm.build")
    TSFILE_VERSION = version
    TSFILE_PACKAGE = f"org.apache.tsfile:tsfile:{version}"
    JAR = jar


def _joined(conf: dict[str, str], key: str, value: str, sep: str) -> dict[str, str]:
    current = conf.get(key)
    if current and value in current.split(sep):
        return {}
    return {key: f"{current}{sep}{value}" if current else value}


def delta_package() -> str:
    """Delta's Maven coordinates, for the ``delta-spark`` Python package installed (as
    its own ``configure_spark_with_delta_pip`` derives them): the jars and the Python
    API are one release."""
    try:
        version = importlib.metadata.version("delta-spark")
    except importlib.metadata.PackageNotFoundError:
        version = DELTA_VERSION
    return f"io.delta:delta-spark_{SCALA_VERSION}:{version}"


def delta_conf(conf: dict[str, str], *, by_coordinates: bool = True) -> dict[str, str]:
    """Delta Lake in a session: its jars by coordinates (resolved by Spark's ivy, cached
    under the user's home; on a cluster the executors get the same) unless
    ``by_coordinates`` is false (the caller names the jars), its SQL extension and
    catalog (``DELETE``, ``VACUUM``, ``DESCRIBE HISTORY``, ``VERSION AS OF``)."""
    out = _joined(conf, "spark.jars.packages", delta_package(), ",") if by_coordinates else {}
    out.update(_joined(conf, "spark.sql.extensions", DELTA_EXTENSION, ","))
    if "spark.sql.catalog.spark_catalog" not in conf:
        out["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    return out


def packages(*, s3: bool = False) -> tuple[list[str], list[str]]:
    """The Maven coordinates a loader's session resolves, and the excludes it resolves
    them with: Delta Lake, the TsFile library (with ``s3``, Hadoop's S3 connector too)."""
    wanted = [delta_package(), TSFILE_PACKAGE] + ([hadoop_aws_package()] if s3 else [])
    return wanted, list(TSFILE_EXCLUDES)


#: Where a session's settings may name ``hadoop-aws`` already (a cluster that installs
#: it on every node puts it on the class paths).
_CLASS_PATH_KEYS = (
    "spark.jars",
    "spark.jars.packages",
    "spark.driver.extraClassPath",
    "spark.executor.extraClassPath",
)


#: Delta's setting of the log store for ``s3a://`` tables, and the loader's store
#: (java/io/sealsync/delta/ConditionalS3LogStore.java: a version's file created by a
#: conditional PUT, so that two loaders' commits never replace each other).
S3_LOG_STORE_KEY = "spark.delta.logStore.s3a.impl"
S3_LOG_STORE = "io.sealsync.delta.ConditionalS3LogStore"


def _log_store(conf: dict[str, str]) -> dict[str, str]:
    """The loader's S3 log store, unless ``conf`` names one (a DynamoDB one, say)."""
    if not JAR.is_file() or S3_LOG_STORE_KEY in conf or "spark.delta.logStore.class" in conf:
        return {}
    return {S3_LOG_STORE_KEY: S3_LOG_STORE}


def s3_log_store(spark: Any) -> str:
    """The log store class the session's Delta commits ``s3a://`` tables with."""
    conf = spark.sparkContext.getConf()
    found = conf.get(S3_LOG_STORE_KEY) or conf.get("spark.delta.logStore.class")
    return str(found or "io.delta.storage.S3SingleDriverLogStore")


def has_hadoop_aws(conf: dict[str, str]) -> bool:
    """Whether ``conf`` gives the session Hadoop's S3 connector itself."""
    return any("hadoop-aws" in conf.get(key, "") for key in _CLASS_PATH_KEYS)


def session_conf(
    master: str, conf: dict[str, str], jars: list[str] | None = None, *, s3: bool = False
) -> dict[str, str]:
    """What a new session needs: Delta Lake (the table's format), the TsFile library for
    every master, and the jar on the driver's class path (local) or shipped to the
    executors (any other master); with ``s3`` (a table on ``s3a://``), Hadoop's S3
    connector unless ``conf`` names it already.

    ``jars``: the packages' jars as files (``[loader] jars_dir``), put in ``spark.jars``
    in place of their coordinates: nothing is resolved.
    """
    if jars is not None:
        out = delta_conf(conf, by_coordinates=False)
        for jar in ([str(JAR)] if JAR.is_file() else []) + jars:
            out.update(_joined({**conf, **out}, "spark.jars", jar, ","))
        return {**out, **_log_store(conf)}
    out = {**delta_conf(conf), **_log_store(conf)}
    if s3 and not has_hadoop_aws(conf):
        out.update(_joined({**conf, **out}, "spark.jars.packages", hadoop_aws_package(), ","))
    if not JAR.is_file():
        return out
    out.update(_joined({**conf, **out}, "spark.jars.packages", TSFILE_PACKAGE, ","))
    for name in TSFILE_EXCLUDES:
        out.update(_joined({**conf, **out}, "spark.jars.excludes", name, ","))
    out.update(_joined(conf, "spark.jars", str(JAR), ","))
    return out


def ship_packages(spark: Any) -> None:
    """Make the executors of a non-local master load the packages' jars as jars.

    ``spark-submit`` puts the jars it resolves for ``spark.jars.packages`` on the
    driver's class path, but, since the session names its own ``spark.jars`` (the
    loader's jar), hands them to a Python application's executors only as files, not
    on their class path. Added as jars here, before any job, executors fetch them with
    the loader's jar into the one class loader.
    """
    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return  # the executors are the driver, which has them
    conf = sc.getConf()
    listed = str(sc._jsc.sc().listJars().mkString(","))
    shipped = {j.rsplit("/", 1)[-1] for j in listed.split(",") if j}
    for jar in (conf.get("spark.repl.local.jars") or "").split(","):
        name = jar.rsplit("/", 1)[-1]
        if jar and name.endswith(".jar") and name not in shipped:
            sc._jsc.addJar(jar)
            shipped.add(name)


def tsfile_reader(spark: Any) -> bool:
    """Whether this session can read TsFiles with the Java reader: the jar's classes and
    the TsFile library are on its class path (a session the loader started has both)."""
    try:
        cls = spark.sparkContext._jvm
        for part in TSFILE_ROWS.split("."):
            cls = getattr(cls, part)
        return bool(cls.usable())
    except Exception:  # not on this JVM's class path: a session the loader did not start
        return False


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
        # The session's jars (``spark.jars``) are on the loader of its user classes.
        lang = sc._jvm.java.lang
        lang.Class.forName(name, True, lang.Thread.currentThread().getContextClassLoader())
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


def hadoop_version() -> str:
    """The Hadoop release whose client PySpark ships (``hadoop-client-api-<v>.jar``):
    Hadoop's own connectors (``hadoop-aws``) must be of the same release."""
    names = sorted(p.name for p in spark_jars().glob("hadoop-client-api-*.jar"))
    return names[-1].removeprefix("hadoop-client-api-").removesuffix(".jar")


def hadoop_aws_package() -> str:
    """The coordinates of Hadoop's S3 connector (``s3a://``) matching PySpark's Hadoop;
    it brings the AWS SDK bundle it is built with."""
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"


def delta_version() -> str:
    """The Delta Lake release of the session's packages (:func:`delta_package`)."""
    return delta_package().rsplit(":", 1)[1]


def tsfile_jars(into: Path, mvn: str = "mvn", tsfile_version: str | None = None) -> list[Path]:
    """The jars the sources compile against besides PySpark's: the TsFile library (it
    and ``common``, of ``tsfile_version``, else :data:`TSFILE_VERSION`) and Delta's log
    store interface (``delta-storage``), fetched by Maven into ``~/.m2`` and copied into
    ``into``."""
    version = tsfile_version or TSFILE_VERSION
    out = []
    for coords in (
        f"org.apache.tsfile:tsfile:{version}",
        f"org.apache.tsfile:common:{version}",
        f"io.delta:delta-storage:{delta_version()}",
    ):
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-Dstyle.color=never",
                "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy",
                f"-Dartifact={coords}",
                f"-DoutputDirectory={into}",
            ],
            cwd=into,
            capture_output=True,  # Maven's quiet mode still prints colour codes
            text=True,
        )
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip()[-2000:]
            raise RuntimeError(f"Maven could not fetch {coords}: {said}")
        _, artifact, version = coords.split(":")
        out.append(into / f"{artifact}-{version}.jar")
    return out


def build(jar: Path = JAR, javac: str = "javac", tsfile_version: str | None = None) -> None:
    """Compile ``java/`` into ``jar`` (Java 17 bytecode), entries in a fixed order and time,
    against the TsFile library ``tsfile_version`` (else :data:`TSFILE_VERSION`)."""
    sources = sorted(SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        libs = out / "lib"
        libs.mkdir()
        found = tsfile_jars(libs, tsfile_version=tsfile_version)
        classpath = os.pathsep.join([str(spark_jars() / "*"), *map(str, found)])
        classes = out / "classes"
        subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-cp",
                classpath,
                "-d",
                str(classes),
                *map(str, sources),
            ],
            check=True,
        )
        staged = out / "staged.jar"
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as zf:
            manifest = zipfile.ZipInfo("META-INF/MANIFEST.MF", _EPOCH)
            zf.writestr(manifest, "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                info = zipfile.ZipInfo(path.relative_to(classes).as_posix(), _EPOCH)
                zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
        jar.parent.mkdir(parents=True, exist_ok=True)
        durable.atomic_write(jar, staged.read_bytes())  # a loader never sees half a jar


if __name__ == "__main__":
    build()
    print(f"wrote {JAR}", file=sys.stderr)
