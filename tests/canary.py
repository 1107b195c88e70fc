"""The canary: the newest releases of every writer and reader sealsync depends on, through
the chain, before a user meets them.

    python -m tests.canary [--cache DIR] [--tsfile RELEASE] [--tsfile-java RELEASE]

Installs, in a virtual environment of its own (``<cache>/venv``; the project's ``.venv``
is never touched), the newest ``tsfile`` package on PyPI (past pyproject.toml's bound:
that bound is raised once the canary passes on a release) and the newest PySpark and
delta-spark within pyproject.toml's ranges, with the project's other dependencies as
pyproject.toml gives them; finds the newest release of the Java TsFile library
(``org.apache.tsfile:tsfile``) in Maven Central's metadata; builds the loader's jar against
that release (``spark_loader.jvm.build``) and the corpus generator's ``tsfile-2`` line
with it (``tsfile_corpus.build_release``); and runs ``canary_chain.run_chain`` there in
one Spark session that reads with that release.

It prints one line per component, ``<name> <version> PASS|FAIL``, each failure's details
indented below, then one summary line. Exit codes: 0 every component passed; 1 the chain
failed on the newest releases (upstream broke something, or a bound must stay);
2 a bad option; 3 the newest releases could not be resolved or installed (PyPI, Maven
Central or pip unreachable or refusing: the line names which; nothing was tried);
69 no Java or Maven; 130/143 interrupted. Everything it fetches is cached (pip's cache,
``~/.m2``, Spark's ivy cache, the jar and the corpus under ``<cache>``, default
``~/.cache/sealsync/canary``), so a run when nothing new was released installs nothing.
``--tsfile`` and ``--tsfile-java`` try a given release in place of the newest (one about
to be pinned, or an older one to see what the chain says of it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
MAVEN_METADATA = "https://repo1.maven.org/maven2/org/apache/tsfile/tsfile/maven-metadata.xml"
#: The components: the Python package, the Java library, Spark and Delta (canary_chain).
CPP_WRITER, JAVA_LIBRARY, SPARK, DELTA = (
    "tsfile",
    "org.apache.tsfile:tsfile",
    "pyspark",
    "delta-spark",
)
COMPONENTS = (CPP_WRITER, JAVA_LIBRARY, SPARK, DELTA)
PYPI_COMPONENTS = (CPP_WRITER, SPARK, DELTA)
EXIT_FAILED = 1
EXIT_UNRESOLVED = 3
EXIT_NO_TOOL = 69
PIP_TIMEOUT = 900
QUERY_TIMEOUT = 60


class Unresolved(Exception):
    """The newest releases could not be found or installed: exit 3, one line."""


class MissingTool(Exception):
    """No Java or Maven: exit 69, one line."""


class Terminated(Exception):
    """SIGTERM (``timeout``, CI's bound): exit 143, one line."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sealsync" / "canary"


# ------------------------------------------------------------------ what is newest


def newest_on_pypi_from(said: str, name: str) -> str:
    """The newest release in what ``pip index versions NAME`` printed (no pre-releases)."""
    found = re.search(rf"^{re.escape(name)} \(([^)\s]+)\)", said, re.MULTILINE | re.IGNORECASE)
    if found is None:
        last = said.strip().splitlines()[-1:] or ["nothing"]
        raise Unresolved(f"PyPI gave no release of {name}: {last[0][:300]}")
    return found.group(1)


def newest_on_pypi(python: Path, name: str) -> str:
    """The newest release of ``name`` the environment's pip finds (its index, its proxy)."""
    done = _run([str(python), "-m", "pip", "index", "versions", name], QUERY_TIMEOUT, "pip index")
    return newest_on_pypi_from(done.stdout + done.stderr, name)


def newest_on_maven_from(metadata: bytes) -> str:
    """The release Maven's metadata names (``<release>``: never a snapshot)."""
    try:
        found = ET.fromstring(metadata).findtext("versioning/release")
    except ET.ParseError:
        found = None
    if not found:
        raise Unresolved(f"Maven Central's metadata names no release ({MAVEN_METADATA})")
    return found.strip()


def newest_on_maven() -> str:
    try:
        with urllib.request.urlopen(MAVEN_METADATA, timeout=QUERY_TIMEOUT) as answer:
            return newest_on_maven_from(answer.read(1 << 20))
    except (urllib.error.URLError, OSError) as exc:
        raise Unresolved(f"Maven Central unreachable ({MAVEN_METADATA}): {exc}") from None


def _pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def requirements(tsfile_version: str) -> list[str]:
    """What the environment installs: pyproject.toml's dependencies, the ``tsfile``
    package at ``tsfile_version`` in place of its range."""
    out = []
    for req in _pyproject()["project"]["dependencies"]:
        out.append(f"tsfile=={tsfile_version}" if _name(req) == "tsfile" else req)
    return out


def allowed(name: str, version: str) -> bool | None:
    """Whether pyproject.toml's range of ``name`` takes ``version`` (None: unknown here)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return None
    for req in _pyproject()["project"]["dependencies"]:
        if _name(req) == name:
            return Requirement(req).specifier.contains(version, prereleases=True)
    return None


# ------------------------------------------------------------------ the environment


def _run(cmd: list[str], timeout: float, what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise Unresolved(f"{what} took over {timeout:.0f} s") from None


def environment(cache: Path) -> Path:
    """The canary's own virtual environment (made once, reused); its Python."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    if python.exists():
        if subprocess.run([str(python), "-c", "pass"], capture_output=True).returncode == 0:
            return python
        shutil.rmtree(venv)  # its base Python is gone: made again
    cache.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        said = (made.stdout + made.stderr).strip().splitlines()[-1:] or ["?"]
        raise MissingTool(f"{sys.executable} -m venv failed ({said[0][:300]}): install venv")
    return python


def install(python: Path, reqs: list[str]) -> dict[str, str]:
    """``reqs`` at their newest (eager upgrade); the installed release of each component."""
    cmd = [str(python), "-m", "pip", "install", "-q", "--upgrade", "--upgrade-strategy", "eager"]
    done = _run([*cmd, *reqs], PIP_TIMEOUT, "pip install")
    if done.returncode != 0:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise Unresolved(f"pip could not install {' '.join(reqs)}: {(said or ['?'])[-1][:400]}")
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    return dict(json.loads(_run([str(python), "-c", code, *PYPI_COMPONENTS], 60, "").stdout))


def _tools() -> None:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise MissingTool(f"{tool} not found on PATH: install Java 17 and Maven 3")


# ------------------------------------------------------------------ inside the environment


def _jar(cache: Path, tsfile_version: str) -> Path:
    """The loader's jar built against ``tsfile_version`` and this PySpark and Delta,
    kept under ``cache/jars`` (one per sources and releases)."""
    import importlib.metadata

    from spark_loader import jvm

    spark = importlib.metadata.version("pyspark")
    h = hashlib.sha256(f"{tsfile_version} {spark} {jvm.delta_version()}".encode())
    for source in sorted(jvm.SOURCES.rglob("*.java")):
        h.update(source.read_bytes())
    jar = cache / "jars" / f"sealsync-spark-{tsfile_version}-{h.hexdigest()[:12]}.jar"
    if not jar.is_file():
        jar.parent.mkdir(parents=True, exist_ok=True)
        for old in jar.parent.glob("sealsync-spark-*.jar"):
            old.unlink()
        jvm.build(jar, tsfile_version=tsfile_version)
    return jar


def inside(cache: Path, tsfile_version: str, result: Path) -> None:
    """The canary's run inside its environment: the jar, the corpus, one session, the
    chain; what it found is written to ``result`` (JSON)."""
    sys.path.insert(0, str(TESTS))
    import canary_chain
    import tsfile_corpus

    from spark_loader import jvm
    from spark_loader.spark_session import create_session, py4j_logs_to

    signal.signal(signal.SIGINT, signal.default_int_handler)  # the canary ignores it for us
    found: dict[str, Any] = {"problems": {}, "unresolved": None, "done": False}

    def step(component: str, what: str) -> None:
        """Recorded before it starts: a writer's crash takes this process down with it."""
        found["doing"] = [component, what]
        result.write_text(json.dumps(found), encoding="utf-8")

    try:
        try:
            step(JAVA_LIBRARY, "building the loader's jar against it")
            jar = _jar(cache, tsfile_version)
        except RuntimeError as exc:  # Maven could not fetch the release
            raise Unresolved(str(exc).splitlines()[0]) from None
        except subprocess.CalledProcessError:
            why = "the loader's Java sources do not compile against it (javac's errors above)"
            found["problems"] = _not_run(JAVA_LIBRARY, why)
            return
        try:
            step(JAVA_LIBRARY, "building the corpus generator with it")
            corpus = tsfile_corpus.build_release(tsfile_version, cache / "corpus")
        except tsfile_corpus.CorpusBuildError as exc:
            why = f"the corpus generator: {exc}".splitlines()[0]
            found["problems"] = _not_run(JAVA_LIBRARY, why)
            return
        jvm.use_tsfile(tsfile_version, jar)
        step(SPARK, "starting Spark")
        logs = cache / "spark-logs"
        spark = create_session("local[2]", logs)
        try:
            # py4j's reports of a call Ctrl-C broke go to the log, not the terminal
            with py4j_logs_to(logs / "py4j.log", verbose=False):
                outcome = canary_chain.run_chain(spark, _emptied(cache / "work"), corpus, step)
        finally:
            spark.stop()
        found["problems"] = outcome.problems
        found["files"] = outcome.files
        found["rows"] = outcome.loaded_rows
    except Unresolved as exc:
        found["unresolved"] = str(exc)
    except KeyboardInterrupt:
        found["interrupted"] = True
    except Exception as exc:  # what a new release breaks, charged to the step it broke
        component, what = found["doing"]
        line = canary_chain.first_line(exc)
        found["problems"] = _not_run(component, f"{what} failed: {line}")
    finally:
        found["done"] = True
        result.write_text(json.dumps(found), encoding="utf-8")


def _emptied(folder: Path) -> Path:
    """``folder``, emptied of what an earlier run left (a writer's crash leaves it)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _not_run(component: str, why: str) -> dict[str, list[str]]:
    """``component``'s problem ``why``, which left the chain unrun for the others."""
    others = {n: [f"not run: {component} failed first"] for n in COMPONENTS if n != component}
    return {component: [why], **others}


def outcome_of(found: dict[str, Any], returncode: int) -> dict[str, Any]:
    """What the chain's process left in its result: complete, or the step it died in."""
    if found.get("done"):
        if not any(found.get("problems", {}).values()) and not found.get("files"):
            return {**found, "problems": {SPARK: ["the chain ran no file"]}}
        return found
    component, what = found.get("doing") or [SPARK, "starting"]
    why = f"the chain's process ended (exit {returncode}) while {what} (see above)"
    return {**found, "problems": _not_run(component, why)}


# ------------------------------------------------------------------ the report


def verdict_lines(
    versions: dict[str, str], problems: Any, notes: dict[str, str] | None = None
) -> list[str]:
    """One line per component (its release and PASS or FAIL, a note in brackets), then
    each problem indented under its component."""
    found: dict[str, list[str]] = getattr(problems, "problems", problems)
    lines, details = [], []
    for name in COMPONENTS:
        mine = found.get(name, [])
        note = (notes or {}).get(name)
        skipped = mine and all(p.startswith("not run:") for p in mine)
        verdict = "NOT RUN" if skipped else "FAIL" if mine else "PASS"
        lines.append(f"{name} {versions.get(name, '?')} {verdict}" + (f" ({note})" if note else ""))
        details.extend(f"  {name}: {p}" for p in mine)
    return lines + details


def _notes(python: Path, versions: dict[str, str]) -> dict[str, str]:
    """Where the newest release and pyproject.toml's range part."""
    notes = {}
    if allowed(CPP_WRITER, versions[CPP_WRITER]) is False:
        notes[CPP_WRITER] = "outside pyproject.toml's range"
    for name in (SPARK, DELTA):
        newest = newest_on_pypi(python, name)
        if newest != versions[name]:
            notes[name] = f"newest release {newest} is outside pyproject.toml's range"
    return notes


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.canary",
        description="The newest releases of sealsync's TsFile writers and readers, Spark and "
        "Delta, through the receiver's check and the loader; one line per component.",
    )
    parser.add_argument("--cache", type=Path, default=cache_root(), help="(default: %(default)s)")
    parser.add_argument(
        "--tsfile", metavar="RELEASE", help="this release of the tsfile package, not the newest"
    )
    parser.add_argument(
        "--tsfile-java",
        metavar="RELEASE",
        help="this release of org.apache.tsfile:tsfile, not the newest",
    )
    parser.add_argument("--inside", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cache = args.cache.resolve()
    for given in (args.tsfile, args.tsfile_java):
        if given is not None and not re.fullmatch(r"[0-9][0-9A-Za-z.\-]*", given):
            parser.error(f"{given!r} is no release (a version such as 2.4.0)")
    if args.inside is not None:
        if args.tsfile_java is None:
            parser.error("--inside needs --tsfile-java")
        inside(cache, args.tsfile_java, args.inside)
        return 0
    signal.signal(signal.SIGTERM, _stop)
    started = time.monotonic()
    try:
        return _canary(cache, started, args.tsfile, args.tsfile_java)
    except Unresolved as exc:
        said = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Maven's colours
        print(f"canary: could not resolve or install the releases: {said}", file=sys.stderr)
        return EXIT_UNRESOLVED
    except MissingTool as exc:
        print(f"canary: {exc}", file=sys.stderr)
        return EXIT_NO_TOOL
    except KeyboardInterrupt:
        print("canary: interrupted; nothing of the project was changed", file=sys.stderr)
        return 130
    except Terminated:
        print("canary: stopped by SIGTERM; nothing of the project was changed", file=sys.stderr)
        return 143


def _canary(cache: Path, started: float, tsfile: str | None, tsfile_java: str | None) -> int:
    _tools()
    python = environment(cache)
    versions = install(python, requirements(tsfile or newest_on_pypi(python, CPP_WRITER)))
    notes = _notes(python, versions)
    versions[JAVA_LIBRARY] = tsfile_java or newest_on_maven()
    result = cache / "result.json"
    result.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [str(python), "-m", "tests.canary", "--cache", str(cache), "--inside", str(result)]
    # Unbounded here: CI bounds the whole canary (``timeout``, which signals the process
    # group: this process, the chain's and its Spark JVM).
    # Ctrl-C reaches the chain's process too (one process group): it stops its Spark
    # session and says so in its result.
    ignoring = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ran = subprocess.run([*cmd, "--tsfile-java", versions[JAVA_LIBRARY]], cwd=ROOT, env=env)
    finally:
        signal.signal(signal.SIGINT, ignoring)
    try:
        found = json.loads(result.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = {}
    if found.get("interrupted"):
        raise KeyboardInterrupt
    found = outcome_of(found, ran.returncode)
    if found.get("unresolved"):
        raise Unresolved(found["unresolved"])
    lines = verdict_lines(versions, found["problems"], notes)
    print("\n".join(lines))
    failed = any(found["problems"].values())
    seconds = time.monotonic() - started
    files = sum((found.get("files") or {}).values())
    verdict = "FAIL" if failed else "PASS"
    print(f"canary: {verdict}: {files} files through the chain in {seconds:.0f} s")
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
