"""The in-process-chmod local file system: the jar, and when the loader uses it."""

from __future__ import annotations

import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_loader import localfs


def _classes(jar: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(jar) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".class")}


@pytest.mark.slow
def test_the_shipped_jar_is_built_from_the_shipped_source(tmp_path: Path) -> None:
    rebuilt = tmp_path / "rebuilt.jar"
    localfs.build(rebuilt)
    shipped = _classes(localfs.JAR)
    assert list(shipped) == ["io/sealsync/hadoop/PosixLocalFileSystem.class"]
    assert _classes(rebuilt) == shipped, (
        "the jar is stale: run python -m spark_loader.localfs and commit it"
    )
    assert rebuilt.read_bytes() == localfs.JAR.read_bytes()  # the build is reproducible


def test_a_local_session_gets_the_jar_on_its_class_path() -> None:
    assert localfs.session_conf("local[*]", {}) == {"spark.driver.extraClassPath": str(localfs.JAR)}
    mine = {"spark.driver.extraClassPath": "/opt/x.jar"}
    assert localfs.session_conf("local[2]", mine) == {
        "spark.driver.extraClassPath": f"/opt/x.jar:{localfs.JAR}"
    }
    assert localfs.session_conf("spark://h:7077", {}) == {}


class _Jvm:
    def __init__(self, loadable: bool) -> None:
        self.loadable = loadable
        self.java = SimpleNamespace(
            lang=SimpleNamespace(Class=SimpleNamespace(forName=self.for_name))
        )
        self.asked: list[str] = []

    def for_name(self, name: str) -> Any:
        self.asked.append(name)
        if not self.loadable:
            raise RuntimeError("java.lang.ClassNotFoundException: " + name)
        return name


def _spark(master: str, loadable: bool) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master, _jvm=_Jvm(loadable)))


def test_the_class_is_used_only_where_it_is_sure_to_load() -> None:
    local = _spark("local[*]", loadable=True)
    assert localfs.implementation(local) == localfs.CLASS
    assert local.sparkContext._jvm.asked == [localfs.CLASS]
    # A session someone else started without the jar: Hadoop's own class.
    assert localfs.implementation(_spark("local[2]", loadable=False)) == localfs.FALLBACK
    # A cluster's executors may not have it, whatever the driver has.
    cluster = _spark("spark://h:7077", loadable=True)
    assert localfs.implementation(cluster) == localfs.FALLBACK
    assert cluster.sparkContext._jvm.asked == []
