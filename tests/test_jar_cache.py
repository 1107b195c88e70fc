"""The jars Spark resolved for a session's packages are remembered, and used instead of
resolving again only while every one of them is still there and nothing that decides
a resolution changed (:mod:`spark_loader.jar_cache`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_loader import jar_cache, jvm

PACKAGES = "io.delta:delta-spark_2.13:4.4.0,org.apache.tsfile:tsfile:2.1.1"
CONF = {
    "spark.jars.packages": PACKAGES,
    "spark.jars.excludes": "org.slf4j:slf4j-api",
    "spark.jars": "/opt/own.jar",
    "spark.ui.enabled": "false",
}


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _jars(tmp_path: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        jar = tmp_path / "ivy" / name
        jar.parent.mkdir(parents=True, exist_ok=True)
        jar.write_bytes(b"PK")
        out.append(jar)
    return out


def _spark_listing(*jars: str) -> SimpleNamespace:
    """What a session that resolved packages answers for its local jars."""
    conf = {"spark.repl.local.jars": ",".join(jars)}
    return SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: conf))


def _remembered(tmp_path: Path) -> list[Path]:
    jars = _jars(tmp_path, "delta.jar", "tsfile.jar")
    conf, key = jar_cache.apply("local[*]", CONF)
    assert conf == CONF and key is not None  # nothing remembered yet: resolve
    spark = _spark_listing("file:///opt/own.jar", *(j.as_uri() for j in jars))
    jar_cache.remember(key, conf, spark)
    return jars


def test_a_resolution_is_remembered_and_replaces_the_packages_next_time(tmp_path: Path) -> None:
    jars = _remembered(tmp_path)
    conf, key = jar_cache.apply("local[2]", CONF)
    assert key is None
    assert "spark.jars.packages" not in conf and "spark.jars.excludes" not in conf
    assert conf["spark.jars"].split(",") == ["/opt/own.jar", *map(str, jars)]
    assert conf["spark.ui.enabled"] == "false"  # the rest as it was


def test_a_missing_jar_resolves_again(tmp_path: Path) -> None:
    jars = _remembered(tmp_path)
    jars[1].unlink()
    conf, key = jar_cache.apply("local[*]", CONF)
    assert conf == CONF and key is not None


@pytest.mark.parametrize(
    "change",
    [
        {"spark.jars.packages": PACKAGES + ",org.example:more:1.0"},
        {"spark.jars.excludes": ""},
        {"spark.jars.repositories": "https://repo.example.org/maven"},
        {"spark.jars.ivySettings": "/etc/ivysettings.xml"},
        {"spark.jars.ivy": "/var/ivy"},
    ],
)
def test_another_resolution_is_not_served_by_the_entry(
    tmp_path: Path, change: dict[str, str]
) -> None:
    _remembered(tmp_path)
    other = {**CONF, **change}
    conf, _ = jar_cache.apply("local[*]", other)
    assert conf == other


def test_a_cluster_master_always_resolves(tmp_path: Path) -> None:
    _remembered(tmp_path)
    assert jar_cache.apply("spark://127.0.0.1:7077", CONF) == (CONF, None)


def test_an_unreadable_cache_file_is_no_entries(tmp_path: Path, cache_home: Path) -> None:
    _remembered(tmp_path)
    jar_cache.cache_file().write_text("{not json")
    conf, key = jar_cache.apply("local[*]", CONF)
    assert conf == CONF and key is not None
    # the next resolution writes a good file again
    jar_cache.remember(key, conf, _spark_listing(*(j.as_uri() for j in _jars(tmp_path, "a.jar"))))
    assert list(json.loads(jar_cache.cache_file().read_text()).values()) == [
        [str(tmp_path / "ivy" / "a.jar")]
    ]


def test_a_cache_folder_that_cannot_be_written_only_means_resolving_again(
    tmp_path: Path, cache_home: Path
) -> None:
    cache_home.write_text("a file where the folder would be")
    conf, key = jar_cache.apply("local[*]", CONF)
    assert key is not None
    jar_cache.remember(key, conf, _spark_listing(*(j.as_uri() for j in _jars(tmp_path, "a.jar"))))
    assert jar_cache.apply("local[*]", CONF) == (CONF, key)


_SESSION = """
import sys
from pathlib import Path
from spark_loader import jvm
from spark_loader.spark_session import create_session
spark = create_session("local[1]", Path(sys.argv[1]) / "logs")
conf = spark.sparkContext.getConf()
spark.range(5).write.format("delta").save(sys.argv[1] + "/table")
print(conf.get("spark.jars.packages"), jvm.tsfile_reader(spark),
      spark.read.format("delta").load(sys.argv[1] + "/table").count())
"""


@pytest.mark.slow  # two Spark sessions in processes of their own
def test_the_second_session_starts_from_the_remembered_jars_and_runs_delta_and_the_tsfile_reader(
    tmp_path: Path, cache_home: Path
) -> None:
    def start(name: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", _SESSION, str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "XDG_CACHE_HOME": str(cache_home)},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    # the first session resolves the packages (Spark's ivy) and remembers the jars
    packages = f"{jvm.delta_package()},{jvm.TSFILE_PACKAGE}"
    assert start("first") == [packages, "True", "5"]
    entries = json.loads(jar_cache.cache_file().read_text())
    [jars] = entries.values()
    names = {Path(j).name for j in jars}
    assert any(n.startswith("io.delta_delta-spark_2.13-") for n in names), names
    assert any(n.startswith("org.apache.tsfile_tsfile-") for n in names), names
    assert all(Path(j).is_file() for j in jars)
    # the second starts from them, without packages, and has Delta and the reader
    assert start("second") == ["None", "True", "5"]
