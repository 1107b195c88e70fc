"""Which TsFile reader a session uses, and what the C++ fallback refuses to read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from spark_loader import jvm
from spark_loader.tsfile_read import cpp_refusal


def _file(tmp_path: Path, head: bytes) -> str:
    path = tmp_path / "1700000000000-1-0-0.tsfile"
    path.write_bytes(head + b"\0" * 64)
    return str(path)


def test_the_cpp_fallback_refuses_format_3_and_names_what_the_session_needs(
    tmp_path: Path,
) -> None:
    reason = cpp_refusal(_file(tmp_path, b"TsFile\x03"))
    assert reason is not None and "format version 3" in reason
    assert "spark.jars.packages=org.apache.tsfile:tsfile" in reason and "\n" not in reason
    assert cpp_refusal(_file(tmp_path, b"TsFile\x04")) is None
    assert cpp_refusal(str(tmp_path / "gone.tsfile")) is None  # the reader says why


class _Rows:
    def __init__(self, usable: bool) -> None:
        self._usable = usable

    def usable(self) -> bool:
        return self._usable


def _session(rows: Any) -> Any:
    tsfile_rows = SimpleNamespace(TsFileRows=rows)
    view = SimpleNamespace(io=SimpleNamespace(sealsync=SimpleNamespace(spark=tsfile_rows)))
    return SimpleNamespace(sparkContext=SimpleNamespace(_jvm=view, master="local[2]"))


def test_the_java_reader_is_used_only_where_the_session_has_the_library() -> None:
    assert jvm.tsfile_reader(_session(_Rows(True)))
    assert not jvm.tsfile_reader(_session(_Rows(False)))  # the jar without the library
    assert not jvm.tsfile_reader(_session(None))  # not on the class path at all
