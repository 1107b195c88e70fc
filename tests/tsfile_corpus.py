"""TsFiles written by IoTDB's own Java writers, with the Java reader's answer for each.

The files are generated, not checked in: three small Maven projects under
``tests/tsfile_fixtures/`` (one per TsFile library line IoTDB has shipped: 0.13, 1.3 and
TsFile 2.x) write them, read each back with the same library's ``TsFileSequenceReader`` and
write every point it reads beside the file. This module builds those projects, runs them
and caches the result under ``~/.cache/sealsync/tsfile-corpus/<hash of the generators>/``,
so a change to a generator builds a new corpus and an unchanged one is reused. Only Java
17, Maven and the network to Maven Central are needed; the first build takes about a
minute, later runs none.

``tests/tsfile_fixtures/README.md`` documents the layout, the manifest and the JSON form of
the expected points. ``python tests/tsfile_corpus.py`` builds and prints the corpus folder
(or ``python -m tests.tsfile_corpus``); ``--bench ROWS`` writes two large files (v3 and v4) for the
benchmarks.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from sealsync.formats import table_device

FIXTURES = Path(__file__).resolve().parent / "tsfile_fixtures"
# One Maven project per writer line, in the order they are built.
LINES = ("iotdb-0.13", "iotdb-1.3", "tsfile-2")
# Raised when what this module writes into a corpus folder changes (not the generators,
# whose text is hashed anyway), so an older cached corpus is not reused.
LAYOUT = 1
# A corpus of other generators (or a build left by a killed run) is removed once this old.
STALE_SECONDS = 7 * 24 * 3600
MAVEN_TIMEOUT = 900
# The format v3 generator is one source: common/v3/Generate.java, written against
# org.apache.tsfile 1.x (iotdb-1.3 links it), as is common/Chunks.java (every line's chunk
# writing and reading; iotdb-1.3 and tsfile-2 link it). iotdb-0.13 gets copies whose
# imports name 0.13's packages (the same classes there; TSDataType sat one package deeper),
# rewritten in this order; what else the libraries do apart is in each project's Line.java.
V3_SOURCES = (FIXTURES / "common" / "v3" / "Generate.java", FIXTURES / "common" / "Chunks.java")
V3_LINE = "iotdb-0.13"
V3_IMPORTS = (
    ("import org.apache.tsfile.enums.", "import org.apache.tsfile.file.metadata.enums."),
    ("import org.apache.tsfile.", "import org.apache.iotdb.tsfile."),
)
GENERATE_TIMEOUT = 600
# The line whose pom takes its library's release as a property (``-Dtsfile.version``):
# the canary (tests/canary.py) writes it with the newest TsFile release.
VERSIONED_LINE = "tsfile-2"

EXIT_BUILD_FAILED = 3
EXIT_NO_TOOL = 4


class CorpusBuildError(RuntimeError):
    """A generator could not be built or run; the message names the step and the fix."""


@dataclass(frozen=True)
class Entry:
    """One generated TsFile and what the manifest says about it."""

    path: Path
    expected: Path
    case: str
    line: str
    library: str
    format_version: int
    model: str
    covers: tuple[str, ...]
    devices: tuple[str, ...]
    points: int
    reads_as_written: bool
    chunks: int
    one_page_chunks: int
    max_pages_per_chunk: int
    iotdb_writes: bool
    """False where the library wrote what IoTDB's server never does (an encoding it does
    not allow for the type: ``enc-library-only-<TYPE>``)."""
    plan_indices: bool
    """Each flush ends with IoTDB's operation-index-range marker (0x04, min and max plan
    index as int64), as in files IoTDB's memtable flush writes."""


@dataclass(frozen=True)
class Point:
    """One point as the Java reader reads it, in file order."""

    device: str
    segments: tuple[str | None, ...] | None
    measurement: str
    type: str
    time: int
    value: Any
    chunk: int
    aligned: bool


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sealsync" / "tsfile-corpus"


def _sources() -> Iterator[Path]:
    for path in sorted(FIXTURES.rglob("*")):
        rel = path.relative_to(FIXTURES)
        if path.is_file() and "target" not in rel.parts and path.suffix != ".md":
            yield path


def source_hash() -> str:
    """Hash of every generator source and pom (symlinks read through), and of LAYOUT."""
    h = hashlib.sha256(f"layout {LAYOUT}\n{V3_IMPORTS!r}\n".encode())
    for path in _sources():
        h.update(str(path.relative_to(FIXTURES)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise CorpusBuildError(f"{name} not found on PATH: {hint}")
    return found


def _run(cmd: list[str], cwd: Path, timeout: int, what: str, log: Path) -> None:
    with log.open("wb") as out:
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise CorpusBuildError(f"{what} took over {timeout} s; see {log}") from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        raise CorpusBuildError(
            f"{what} failed (exit {proc.returncode}); see {log}:\n  " + "\n  ".join(tail)
        )


def source_for_013(source: Path) -> str:
    """A shared generator source with its imports naming IoTDB 0.13's TsFile packages."""
    text = source.read_text(encoding="utf-8")
    for old, new in V3_IMPORTS:
        text = text.replace(old, new)
    if "org.apache.tsfile." in text:
        raise CorpusBuildError(
            f"{source} names org.apache.tsfile outside an import line; "
            f"0.13 has no such package: move that use into {V3_LINE}'s Line.java"
        )
    return text


def _compile(line: str, build: Path, tsfile_version: str | None = None) -> str:
    """Copies one generator project (symlinks resolved) into ``build`` and compiles it with
    Maven (with ``tsfile_version``, the library release of :data:`VERSIONED_LINE`'s pom);
    returns the class path of its dependencies (in ~/.m2)."""
    mvn = _tool("mvn", "install Maven 3 (apt-get install maven) and Java 17")
    project = build / line
    shutil.copytree(FIXTURES / line, project, symlinks=False)
    if line == V3_LINE:
        for source in V3_SOURCES:
            target = project / "src" / "main" / "java" / source.name
            target.write_text(source_for_013(source), encoding="utf-8")
    release = [f"-Dtsfile.version={tsfile_version}"] if tsfile_version else []
    _run(
        [mvn, "-B", "-q", "-Dstyle.color=never", *release, "compile"],
        project,
        MAVEN_TIMEOUT,
        f"building the {line} generator with Maven (needs Maven Central or ~/.m2)",
        build / f"{line}.maven.log",
    )
    return (project / "target" / "classpath.txt").read_text().strip()


def _classpath(build: Path, line: str) -> str:
    """The run class path of a generator compiled into ``build`` by ``_compile``."""
    deps = (build / f"{line}.classpath").read_text()
    return os.pathsep.join([str(build / line / "target" / "classes"), deps])


def _generate(line: str, classpath: str, args: list[str], build: Path) -> None:
    java = _tool("java", "install Java 17 (apt-get install openjdk-17-jdk-headless)")
    _run(
        [java, "-cp", classpath, "Generate", *args],
        build,
        GENERATE_TIMEOUT,
        f"running the {line} generator",
        build / f"{line}.generate.log",
    )


def _merge_manifests(out: Path, written: tuple[str, ...] = LINES) -> None:
    lines: dict[str, Any] = {}
    files: list[Any] = []
    for line in written:
        m = json.loads((out / line / "manifest.json").read_text(encoding="utf-8"))
        files.extend(m.pop("files"))
        lines[line] = m
    merged = {"layout": LAYOUT, "generators": source_hash(), "lines": lines, "files": files}
    text = json.dumps(merged, indent=1, ensure_ascii=False) + "\n"
    (out / "manifest.json").write_text(text, encoding="utf-8")


def _build_into(out: Path) -> None:
    """Compiles the three generators and runs them into the empty folder ``out``; keeps the
    compiled generators in ``out/_build`` for ``--bench``."""
    build = out / "_build"
    build.mkdir(parents=True)
    for line in LINES:
        (build / f"{line}.classpath").write_text(_compile(line, build))
        _generate(line, _classpath(build, line), [str(out)], build)
    _merge_manifests(out)


def build(root: Path | None = None) -> Path:
    """The corpus folder for the current generators, built first if not cached yet."""
    root = root or cache_root()
    return _cached(root, root / source_hash(), _build_into)


def _build_line_into(out: Path, tsfile_version: str) -> None:
    """:data:`VERSIONED_LINE`'s generator built with TsFile ``tsfile_version`` and run into
    the empty folder ``out``, with a manifest of its files alone."""
    build = out / "_build"
    build.mkdir(parents=True)
    line = VERSIONED_LINE
    (build / f"{line}.classpath").write_text(_compile(line, build, tsfile_version))
    _generate(line, _classpath(build, line), [str(out)], build)
    _merge_manifests(out, (line,))


def build_release(tsfile_version: str, root: Path | None = None) -> Path:
    """The corpus of :data:`VERSIONED_LINE` alone, written and read back by the TsFile
    library ``tsfile_version`` (any 2.x release), built once per generators and release
    and cached beside the full corpus."""
    if not re.fullmatch(r"[0-9A-Za-z.\-]+", tsfile_version):
        raise CorpusBuildError(f"{tsfile_version!r} is no TsFile release")
    root = root or cache_root()
    final = root / f"{source_hash()}-tsfile-{tsfile_version}"
    return _cached(root, final, lambda out: _build_line_into(out, tsfile_version))


def _cached(root: Path, final: Path, fill: Callable[[Path], None]) -> Path:
    """``final``, filled by ``fill(folder)`` first if not complete yet.

    Built in a temporary folder beside the cache entry and renamed into place, so a
    cached corpus is always complete; a lock keeps two test runs from building it twice.
    """
    if (final / "manifest.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(final) + ".lock"):
        if (final / "manifest.json").is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", suffix=".tmp", dir=root))
        try:
            fill(tmp)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        _prune(root, final)
    return final


# A cache entry's name: the generators' hash, a release's corpus, or a build in progress.
_CACHED = r"[0-9a-f]{16}(-tsfile-[0-9A-Za-z.\-]+?)?(\..*\.tmp)?"


def _prune(root: Path, keep: Path) -> None:
    """Removes cached corpora of older generators, and builds a killed run left behind,
    once unused for a week (a test run elsewhere may still read a recent one)."""
    now = time.time()
    for path in root.iterdir():
        if path == keep or not re.fullmatch(_CACHED, path.name):
            continue
        try:
            if path.is_dir() and now - path.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def corpus(folder: Path | None = None) -> list[Entry]:
    """Every generated file (built if needed), in manifest order; a table-model file's
    devices named as the loader names them (from their segments: ``table_device``)."""
    entries = [
        e
        if e.model != "table"
        else dataclasses.replace(
            e, devices=tuple(dict.fromkeys(p.device for p in expected_points(e)))
        )
        for e in _manifest_entries(folder or build())
    ]
    return entries


def _manifest_entries(folder: Path) -> list[Entry]:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    return [
        Entry(
            path=folder / f["file"],
            expected=folder / f["expected"],
            case=f["case"],
            line=f["line"],
            library=f["library"],
            format_version=int(f["format_version"]),
            model=f["model"],
            covers=tuple(f["covers"]),
            devices=tuple(f["devices"]),
            points=int(f["points"]),
            reads_as_written=bool(f["reads_as_written"]),
            chunks=int(f["chunks"]),
            one_page_chunks=int(f["one_page_chunks"]),
            max_pages_per_chunk=int(f["max_pages_per_chunk"]),
            iotdb_writes=bool(f.get("iotdb_writes", True)),
            plan_indices=bool(f.get("plan_indices", False)),
        )
        for f in manifest["files"]
    ]


def manifest(folder: Path | None = None) -> dict[str, Any]:
    folder = folder or build()
    result: dict[str, Any] = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    return result


_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode_value(type_: str, value: Any) -> Any:
    """A value of the JSON form (README.md) as Python holds it: bool, int (INT32, INT64,
    TIMESTAMP), float (FLOAT widened exactly, DOUBLE), str (TEXT, STRING), bytes (BLOB),
    datetime.date (DATE)."""
    if type_ in ("FLOAT", "DOUBLE"):
        return _SPECIAL_FLOATS[value] if isinstance(value, str) else float(value)
    if type_ in ("TEXT", "STRING"):
        return bytes.fromhex(value).decode("utf-8")
    if type_ == "BLOB":
        return bytes.fromhex(value)
    if type_ == "DATE":
        return dt.date.fromisoformat(value)
    if type_ == "BOOLEAN":
        if not isinstance(value, bool):
            raise ValueError(f"BOOLEAN value {value!r} is not true or false")
        return value
    if type_ in ("INT32", "INT64", "TIMESTAMP"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{type_} value {value!r} is not an integer")
        return value
    raise ValueError(f"unknown data type {type_!r}")


def expected_points(entry: Entry) -> list[Point]:
    """Every point the Java reader reads from the file, in its order: per device, per
    series, every chunk in file order (so a repeated (series, time) appears once per
    chunk that holds it). Nulls of aligned rows are not points. A table-model device is
    named from its segments as the loader names it (``table_device``)."""
    points = []
    with entry.expected.open(encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            seg = p.get("segments")
            table = entry.model == "table" and seg is not None
            points.append(
                Point(
                    device=table_device.name(seg) if table else p["device"],
                    segments=None if seg is None else tuple(seg),
                    measurement=p["measurement"],
                    type=p["type"],
                    time=p["time"],
                    value=decode_value(p["type"], p["value"]),
                    chunk=p["chunk"],
                    aligned=p["aligned"],
                )
            )
    return points


def refused_because(entry: Entry) -> str | None:
    """What the receiver and the loader must refuse the file for, or None if both take it
    (``sealsync.formats.tsfile_support``): RLBE on FLOAT or DOUBLE (the codec of TsFile up
    to 2.0.3 rounds, that of 2.1.0 on does not, and neither a format-3 nor a format-4 file
    can be read as its writer reads it), and in format 4 SPRINTZ (the C++ writer encodes it
    otherwise than the Java one, and the file does not say which wrote it)."""
    for p in expected_points(entry):
        name = p.measurement.lower()
        if p.type in ("FLOAT", "DOUBLE") and "rlbe" in name:
            return "RLBE"
        if entry.format_version == 4 and "sprintz" in name:
            return "SPRINTZ"
    return None


def expected_rows(entry: Entry) -> dict[tuple[str, int], dict[str, Any]]:
    """The file as IoTDB answers a query on it: for a repeated (device, measurement, time)
    the point of the later chunk (higher chunk offset; later in the chunk on a tie) wins,
    and a null never overrides a value. Rows are keyed by (device, time) and hold only the
    measurements with a value, so a row whose every measurement is null is absent."""
    best: dict[tuple[str, str, int], tuple[int, int, Any]] = {}
    for i, p in enumerate(expected_points(entry)):
        key = (p.device, p.measurement, p.time)
        rank = (p.chunk, i)
        old = best.get(key)
        if old is None or rank > old[:2]:
            best[key] = (p.chunk, i, p.value)
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for (device, measurement, at), (_, _, value) in sorted(best.items()):
        rows.setdefault((device, at), {})[measurement] = value
    return rows


def values_equal(a: Any, b: Any) -> bool:
    """Equality for expected values: NaN equals NaN, and -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and bool(a == b)


def format_version_of(path: Path) -> int:
    """The version byte after the ``TsFile`` magic (3 or 4; 0x30 begins the old ``00000x``)."""
    with path.open("rb") as f:
        head = f.read(7)
    if len(head) < 7 or head[:6] != b"TsFile":
        raise ValueError(f"{path} does not start with the TsFile magic")
    return head[6]


def bench(rows: int, out: Path | None = None) -> list[Path]:
    """Writes a v3 file (the IoTDB 1.3 line) and a v4 tree file (TsFile 2.x) of ``rows``
    rows each (a row: one device at one time), unless already there: four non-aligned
    devices of INT64, DOUBLE, FLOAT, INT32 and BOOLEAN series with noisy values, IoTDB's
    default encodings and the library's default compressor. Returns their paths."""
    folder = build()
    out = out or folder / "bench"
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for line, version in (("iotdb-1.3", 3), ("tsfile-2", 4)):
        target = out / f"bench-v{version}-{line}-{rows}.tsfile"
        if not target.exists():
            tmp = target.with_name(target.name + ".tmp")
            tmp.unlink(missing_ok=True)
            classpath = _classpath(folder / "_build", line)
            _generate(line, classpath, ["--bench", str(rows), str(tmp)], folder / "_build")
            tmp.rename(target)
        made.append(target)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/tsfile_corpus.py",
        description="Build the TsFile corpus written by IoTDB's own writers; print its folder.",
    )
    parser.add_argument("--out", type=Path, help="build into this new folder, not the cache")
    parser.add_argument(
        "--bench", type=int, metavar="ROWS", help="also write a v3 and a v4 file of ROWS rows"
    )
    args = parser.parse_args(argv)
    try:
        if args.out is not None and args.bench is None:
            if args.out.exists() and any(args.out.iterdir()):
                print(f"error: {args.out} is not empty: name a new folder", file=sys.stderr)
                return 2
            _build_into(args.out)
            print(args.out)
            return 0
        folder = build()
        print(folder)
        if args.bench is not None:
            for path in bench(args.bench, args.out):
                print(path)
    except CorpusBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_NO_TOOL if "not found on PATH" in str(e) else EXIT_BUILD_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
