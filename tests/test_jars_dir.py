"""``[loader] jars_dir``: a session takes the jars a manifest lists, and a folder that
lacks one stops ``load`` (and shows in ``check``) with one line naming the jar and the
command that fills it. ``tests/test_jars_offline.py`` fills a folder with the real
command and loads on a cluster with Maven Central unreachable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from config_helpers import write_config

from sealsync.app.cli import cli
from sealsync.config import load_loader_config
from sealsync.errors import ConfigError
from spark_loader import jars_dir, jvm


def _fill(folder: Path, names: tuple[str, ...] = ("a.jar", "b.jar")) -> list[Path]:
    """A folder as ``sealsync jars fetch`` leaves it, with small stand-in jars."""
    folder.mkdir(parents=True, exist_ok=True)
    jars = []
    for n, name in enumerate(names):
        jar = folder / name
        jar.write_bytes(b"PK" + bytes(n + 1))
        jars.append(jar)
    wanted, excludes = jvm.packages()
    doc = {
        "packages": wanted,
        "excludes": excludes,
        "jars": {j.name: j.stat().st_size for j in jars},
    }
    (folder / jars_dir.MANIFEST).write_text(json.dumps(doc))
    return jars


def _refusal(folder: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        jars_dir.session_jars(folder)
    return str(caught.value)


def test_a_filled_folder_gives_its_jars_and_a_session_resolves_nothing(tmp_path: Path) -> None:
    jars = _fill(tmp_path / "jars")
    found = jars_dir.session_jars(tmp_path / "jars")
    assert found == [str(j) for j in jars]

    conf = jvm.session_conf("spark://h:7077", {"spark.jars": "/opt/mine.jar"}, found)

    assert "spark.jars.packages" not in conf and "spark.jars.excludes" not in conf
    assert conf["spark.jars"] == ",".join(["/opt/mine.jar", str(jvm.JAR), *found])
    assert conf["spark.sql.extensions"] == jvm.DELTA_EXTENSION


def test_each_lack_is_one_line_naming_it_and_the_fill_command(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    fill = f"fill it with `sealsync jars fetch {folder}`"
    assert _refusal(folder) == f"jars_dir {folder} does not exist: {fill}"
    folder.mkdir()
    assert _refusal(folder) == (
        f"jars_dir {folder} holds no sealsync-jars.json (the list of its jars): {fill}"
    )
    jars = _fill(folder)
    jars[1].unlink()
    assert _refusal(folder) == f"jars_dir {folder} lacks b.jar: {fill}"
    jars[1].write_bytes(b"PK\x00")  # one byte short: a copy cut short
    assert _refusal(folder) == (
        f"jars_dir {folder} holds b.jar of 3 bytes, not 4 (a copy cut short?): {fill}"
    )


def test_an_s3a_table_needs_a_folder_filled_with_the_s3_connector(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    jars = _fill(folder)  # filled without --s3
    with pytest.raises(ConfigError) as caught:
        jars_dir.session_jars(folder, s3=True)
    assert str(caught.value) == (
        f"jars_dir {folder} lacks {jvm.hadoop_aws_package()} (it was filled for "
        f"{', '.join(jvm.packages()[0])}): fill it with `sealsync jars fetch {folder} --s3`"
    )
    doc = json.loads((folder / jars_dir.MANIFEST).read_text())
    doc["packages"] = jvm.packages(s3=True)[0]
    (folder / jars_dir.MANIFEST).write_text(json.dumps(doc))
    assert jars_dir.session_jars(folder, s3=True) == [str(j) for j in jars]


def test_a_folder_filled_for_another_release_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    _fill(folder)
    doc = json.loads((folder / jars_dir.MANIFEST).read_text())
    doc["packages"][0] = "io.delta:delta-spark_2.13:0.1.0"
    (folder / jars_dir.MANIFEST).write_text(json.dumps(doc))
    assert _refusal(folder) == (
        f"jars_dir {folder} lacks {jvm.delta_package()} (it was filled for "
        f"io.delta:delta-spark_2.13:0.1.0, {jvm.TSFILE_PACKAGE}): "
        f"fill it with `sealsync jars fetch {folder}`"
    )
    (folder / jars_dir.MANIFEST).write_text('{"jars": "not a table"}')
    assert "has a sealsync-jars.json that is not sealsync's" in _refusal(folder)
    doc = json.loads(json.dumps(doc).replace("0.1.0", jvm.delta_package().rsplit(":", 1)[1]))
    doc["jars"] = {"../outside.jar": 1}
    (folder / jars_dir.MANIFEST).write_text(json.dumps(doc))
    assert "naming '../outside.jar', not a jar in it" in _refusal(folder)


def _loader(tmp_path: Path, jars: Path) -> Path:
    (tmp_path / "recv").mkdir()
    return write_config(
        tmp_path / "loader.toml",
        {
            "loader": {
                "receiver_data_dirs": ["recv"],
                "table_path": "table",
                "state_dir": "state",
                "jars_dir": str(jars),
            }
        },
    )


def test_load_stops_at_once_on_a_missing_jar_and_check_names_it(tmp_path: Path) -> None:
    folder = tmp_path / "jars"
    jars = _fill(folder)
    config = _loader(tmp_path, folder)
    assert load_loader_config(config).jars_dir == folder
    jars[0].unlink()
    line = f"jars_dir {folder} lacks a.jar: fill it with `sealsync jars fetch {folder}`"

    loaded = CliRunner().invoke(cli, ["load", "--config", str(config)])

    assert (loaded.exit_code, loaded.stderr) == (2, f"sealsync: error: {line}\n")
    assert not (tmp_path / "state").exists() and not (tmp_path / "table").exists()
    checked = CliRunner().invoke(cli, ["check", "--config", str(config)])
    assert checked.exit_code == 1 and f"problem: {line}" in checked.stdout.splitlines()
    jars[0].write_bytes(b"PK\x00")
    checked = CliRunner().invoke(cli, ["check", "--config", str(config)])
    assert f"ok: jars_dir {folder} holds the 2 jars the loader needs" in checked.stdout


def test_jars_lists_the_coordinates_a_fetch_resolves() -> None:
    listed = CliRunner().invoke(cli, ["jars", "--s3"])
    assert listed.exit_code == 0
    assert listed.stdout.splitlines()[:3] == [
        jvm.delta_package(),
        jvm.TSFILE_PACKAGE,
        f"org.apache.hadoop:hadoop-aws:{jvm.hadoop_version()}",
    ]
    assert jvm.hadoop_version() == "3.5.0"  # pyspark 4.2.0's Hadoop client
    usage = CliRunner().invoke(cli, ["jars", "fetch"])
    assert usage.exit_code == 2 and "fetch needs the folder to fill" in usage.stderr
