"""The loader's jar: how it is built, when its classes are used, and what the keyed
Parquet writer writes, against Spark's own partitioned write of the same rows."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_loader import jvm, localfs
from spark_loader.ingest import KEYED_FORMAT
from spark_loader.table_layout import KEY_COLUMN


def _classes(jar: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(jar) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".class")}


@pytest.mark.slow
def test_the_shipped_jar_is_built_from_the_shipped_source(tmp_path: Path) -> None:
    rebuilt = tmp_path / "rebuilt.jar"
    jvm.build(rebuilt)
    shipped = _classes(jvm.JAR)
    assert list(shipped) == [
        "io/sealsync/delta/ConditionalS3LogStore.class",
        "io/sealsync/hadoop/PosixLocalFileSystem.class",
        "io/sealsync/spark/ExecutorCopy.class",
        "io/sealsync/spark/KeyedParquetFileFormat$Factory.class",
        "io/sealsync/spark/KeyedParquetFileFormat$Writer.class",
        "io/sealsync/spark/KeyedParquetFileFormat.class",
        *(f"io/sealsync/spark/TsFileRows{c}.class" for c in ("$1", "$DataPass", "$Rows")),
        "io/sealsync/spark/TsFileRows$SchemaPass.class",
        "io/sealsync/spark/TsFileRows.class",
        "io/sealsync/tsfile/PathPattern.class",
        "io/sealsync/tsfile/Rules.class",
        "io/sealsync/tsfile/TableDevice.class",
        "io/sealsync/tsfile/TimeRanges.class",
        *(f"io/sealsync/tsfile/TsFilePoints{c}.class" for c in ("$1", "$Deletion", "$Series")),
        "io/sealsync/tsfile/TsFilePoints$Sink.class",
        "io/sealsync/tsfile/TsFilePoints.class",
    ]
    assert _classes(rebuilt) == shipped, (
        "the jar is stale: run python -m spark_loader.jvm and commit it"
    )
    assert rebuilt.read_bytes() == jvm.JAR.read_bytes()  # the build is reproducible


@pytest.mark.slow
def test_rebuilding_the_jar_as_the_docs_say_prints_no_warning() -> None:
    """``python -m spark_loader.jvm`` runs the module once: the package must not import
    it first (runpy then warns of "unpredictable behaviour"). Importing the package
    imports none of the loader."""
    code = "import sys, spark_loader; print(' '.join(m for m in sys.modules if 'spark_' in m))"
    found = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True
    )
    assert found.stdout.split() == ["spark_loader"]
    from spark_loader import LoadReport, read_arrow, run_load  # still there, on first use

    assert (run_load.__module__, read_arrow.__module__, LoadReport.__module__) == (
        "spark_loader.run",
        "spark_loader.delta_log",
        "spark_loader.report",
    )


def test_a_session_gets_the_jar_the_tsfile_library_and_delta() -> None:
    excludes = ",".join(jvm.TSFILE_EXCLUDES)
    delta = "io.delta:delta-spark_2.13:4.4.0"  # the delta-spark package's own release
    assert jvm.delta_package() == delta
    for master in ("local[*]", "spark://h:7077"):
        assert jvm.session_conf(master, {}) == {
            "spark.jars": str(jvm.JAR),
            "spark.jars.packages": f"{delta},{jvm.TSFILE_PACKAGE}",
            "spark.jars.excludes": excludes,
            "spark.sql.extensions": jvm.DELTA_EXTENSION,
            "spark.sql.catalog.spark_catalog": jvm.DELTA_CATALOG,
            jvm.S3_LOG_STORE_KEY: jvm.S3_LOG_STORE,
        }
    mine = {
        "spark.jars": "/opt/x.jar",
        "spark.jars.packages": "a:b:1",
        "spark.sql.extensions": "my.Extension",
        "spark.sql.catalog.spark_catalog": "my.Catalog",
    }
    got = jvm.session_conf("local[2]", mine)
    assert got["spark.jars"] == f"/opt/x.jar,{jvm.JAR}"
    assert got["spark.jars.packages"] == f"a:b:1,{delta},{jvm.TSFILE_PACKAGE}"
    assert got["spark.sql.extensions"] == f"my.Extension,{jvm.DELTA_EXTENSION}"
    assert "spark.sql.catalog.spark_catalog" not in got  # the user's catalog stays
    dynamo = {jvm.S3_LOG_STORE_KEY: "io.delta.storage.S3DynamoDBLogStore"}
    assert jvm.S3_LOG_STORE_KEY not in jvm.session_conf("local[2]", dynamo)  # theirs stays


def test_an_s3a_table_s_session_gets_hadoop_aws_unless_its_settings_name_it() -> None:
    aws = jvm.hadoop_aws_package()
    assert aws == f"org.apache.hadoop:hadoop-aws:{jvm.hadoop_version()}"
    packages = jvm.session_conf("spark://h:7077", {}, s3=True)["spark.jars.packages"]
    assert aws in packages.split(",")
    assert aws not in jvm.session_conf("spark://h:7077", {})["spark.jars.packages"]
    for key in ("spark.driver.extraClassPath", "spark.jars"):  # installed on the nodes
        given = {key: "/opt/hadoop/hadoop-aws-3.5.0.jar:/opt/hadoop/bundle-2.29.jar"}
        assert aws not in jvm.session_conf("local[2]", given, s3=True)["spark.jars.packages"]


class _Jvm:
    """``sc._jvm`` as far as :func:`jvm.loadable` walks it."""

    def __init__(self, loadable: bool, usable: bool = True) -> None:
        self.loadable = loadable
        self.usable = usable
        self.java = SimpleNamespace(
            lang=SimpleNamespace(
                Class=SimpleNamespace(forName=self.for_name),
                Thread=SimpleNamespace(
                    currentThread=lambda: SimpleNamespace(getContextClassLoader=lambda: None)
                ),
            )
        )
        self.io = SimpleNamespace(
            sealsync=SimpleNamespace(
                spark=SimpleNamespace(KeyedParquetFileFormat=SimpleNamespace(usable=self.probe))
            )
        )
        self.asked: list[str] = []

    def for_name(self, name: str, *_: Any) -> Any:
        self.asked.append(name)
        if not self.loadable:
            raise RuntimeError("java.lang.ClassNotFoundException: " + name)
        return name

    def probe(self) -> bool:
        self.asked.append("usable()")
        return self.usable


def _spark(master: str, loadable: bool, usable: bool = True) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master, _jvm=_Jvm(loadable, usable)))


def test_the_classes_are_used_only_where_they_are_sure_to_load() -> None:
    local = _spark("local[*]", loadable=True)
    assert localfs.implementation(local) == localfs.CLASS
    assert local.sparkContext._jvm.asked == [localfs.CLASS]
    # A session someone else started without the jar: Hadoop's own class.
    assert localfs.implementation(_spark("local[2]", loadable=False)) == localfs.FALLBACK
    # A cluster's executors may not have it, whatever the driver has.
    cluster = _spark("spark://h:7077", loadable=True)
    assert localfs.implementation(cluster) == localfs.FALLBACK
    assert not jvm.loadable(cluster, KEYED_FORMAT, probe=True)
    assert cluster.sparkContext._jvm.asked == []


def test_the_keyed_writer_is_used_only_where_its_spark_can_run_it() -> None:
    local = _spark("local[*]", loadable=True)
    assert jvm.loadable(local, KEYED_FORMAT, probe=True)
    assert local.sparkContext._jvm.asked == [KEYED_FORMAT, "usable()"]
    # The jar loads, but this Spark lacks what the class was compiled against.
    assert not jvm.loadable(_spark("local[*]", loadable=True, usable=False), KEYED_FORMAT, True)
    assert not jvm.loadable(_spark("local[*]", loadable=False), KEYED_FORMAT, True)


# ---------------------------------------------------------------- real Spark


_DDL = f"time bigint, device string, s1 double, {KEY_COLUMN} int"
# Keys grouped as a task reads its files, then key 0 again: a second file in its folder.
_ROWS = [
    (1, "d1", 0.5, 0),
    (2, "d1", None, 0),
    (3, "d2", 1.5, 1),
    (4, None, 2.5, 1),
    (5, "d1", 3.5, 2),
    (6, "d2", 4.5, 0),
]


def _folders(out: Path) -> dict[str, list[tuple]]:
    """``key=<k>`` folder -> its rows, sorted; every file must lack the key column."""
    found: dict[str, list[tuple]] = {}
    for part in sorted(out.glob(f"{KEY_COLUMN}=*/*.parquet")):
        table = pq.read_table(part)
        assert table.column_names == ["time", "device", "s1"], part
        rows = [tuple(r.values()) for r in table.to_pylist()]
        found.setdefault(part.parent.name, []).extend(rows)
    return {k: sorted(v, key=repr) for k, v in found.items()}


@pytest.mark.slow
def test_the_keyed_writer_writes_what_spark_partitioned_write_writes(
    tmp_path: Path, spark: Any
) -> None:
    assert jvm.loadable(spark, KEYED_FORMAT, probe=True)  # the loader's session can use it
    df = spark.createDataFrame(_ROWS, _DDL).coalesce(1)  # one task, rows in this order
    keyed, spark_own = tmp_path / "keyed", tmp_path / "partitioned"
    df.write.format(KEYED_FORMAT).save(str(keyed))
    df.write.partitionBy(KEY_COLUMN).parquet(str(spark_own))

    assert _folders(keyed) == _folders(spark_own)
    assert sorted(_folders(keyed)) == [f"{KEY_COLUMN}={k}" for k in (0, 1, 2)]
    assert sum(len(rows) for rows in _folders(keyed).values()) == len(_ROWS)
    # Key 0 came back after other keys: its rows went into a second file, none lost.
    assert len(list((keyed / f"{KEY_COLUMN}=0").glob("*.parquet"))) == 2
    # Nothing but the key folders (and Spark's marker) at the top.
    assert {p.name for p in keyed.iterdir()} == {
        *(f"{KEY_COLUMN}={k}" for k in (0, 1, 2)),
        "_SUCCESS",
        "._SUCCESS.crc",
    }


@pytest.mark.slow
def test_the_keyed_writer_refuses_rows_without_an_int_key_last(tmp_path: Path, spark: Any) -> None:
    df = spark.createDataFrame([(1, "d1", "0")], f"time bigint, device string, {KEY_COLUMN} string")
    with pytest.raises(Exception, match="the last column must be the int folder key"):
        df.write.format(KEYED_FORMAT).save(str(tmp_path / "out"))
    assert not list(tmp_path.glob("out/**/*.parquet"))
