"""The canary's chain on the installed releases, and the canary's command without a network.

``tests/canary.py`` runs ``canary_chain.run_chain`` in an environment of the newest
releases; here the same chain runs on what the project installs (the ``tsfile`` package
of this environment, the Java TsFile library of ``spark_loader.jvm``, this PySpark and
Delta), so the canary's own logic is held by the suite: a chain that passes here and fails
in the canary names a release that broke something.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import canary
import canary_chain
import pytest
import tsfile_corpus
from canary_chain import CPP_WRITER, DELTA, JAVA_LIBRARY, SPARK, Case, Outcome

from spark_loader import jvm


@pytest.mark.slow  # Maven, Java and one Spark session (the shared one)
def test_the_chain_passes_on_the_installed_releases(spark: Any, tmp_path: Path) -> None:
    java = tsfile_corpus.build_release(jvm.TSFILE_VERSION)
    libraries = {f["library"] for f in tsfile_corpus.manifest(java)["files"]}
    assert libraries == {f"org.apache.tsfile:tsfile:{jvm.TSFILE_VERSION}"}

    outcome = canary_chain.run_chain(spark, tmp_path, java)

    assert outcome.passed, json.dumps(outcome.problems, indent=1)
    assert outcome.files[CPP_WRITER] >= 15 and outcome.files[JAVA_LIBRARY] >= 20
    assert outcome.loaded_rows > 3_000


def _case(refused: bool = False) -> Case:
    return Case(CPP_WRITER, "tree-X.tsfile", Path("x"), refused, {})


def test_a_verdict_other_than_the_expected_one_is_a_problem() -> None:
    outcome = Outcome()
    canary_chain._check_verdict(outcome, _case(), None)
    canary_chain._check_verdict(outcome, _case(True), "f: RLBE on DOUBLE is not read")
    assert outcome.passed
    canary_chain._check_verdict(outcome, _case(), "f: a new format")
    canary_chain._check_verdict(outcome, _case(True), None)
    canary_chain._check_verdict(outcome, _case(True), "f: CAMEL\nand more")
    assert not outcome.passed and len(outcome.problems[CPP_WRITER]) == 3
    assert outcome.problems[JAVA_LIBRARY] == outcome.problems[SPARK] == []


def test_a_row_the_table_holds_twice_differs_from_any_reference() -> None:
    records = [
        {"sender": "a", "device": "d", "time": 1, "s1": 5, "x": None},
        {"sender": "a", "device": "d", "time": 1, "s1": 5, "x": None},
        {"sender": "b", "device": "d", "time": 1, "s1": bytearray(b"\0"), "x": 1.5},
    ]
    rows = canary_chain._table_rows(records, {"s1": "s1", "x": "x"})
    assert rows["b"] == {("d", 1): {"s1": b"\0", "x": 1.5}}
    assert rows["a"][("d", 1)] != {"s1": 5}


def test_the_lines_name_each_component_its_release_and_verdict() -> None:
    outcome = Outcome()
    outcome.add(DELTA, "t.tsfile read by Delta's reader: row ('d', 1) differs")
    versions = {CPP_WRITER: "2.5.0", JAVA_LIBRARY: "2.4.0", SPARK: "4.2.0", DELTA: "4.4.0"}
    notes = {SPARK: "newest release 4.3.0 is outside pyproject.toml's range"}
    lines = canary.verdict_lines(versions, outcome, notes)
    assert lines[:4] == [
        "tsfile 2.5.0 PASS",
        "org.apache.tsfile:tsfile 2.4.0 PASS",
        "pyspark 4.2.0 PASS (newest release 4.3.0 is outside pyproject.toml's range)",
        "delta-spark 4.4.0 FAIL",
    ]
    assert lines[4:] == ["  delta-spark: t.tsfile read by Delta's reader: row ('d', 1) differs"]


def test_the_newest_release_is_read_from_what_the_registries_answer() -> None:
    said = "tsfile (2.6.0)\nAvailable versions: 2.6.0, 2.5.0\n"
    assert canary.newest_on_pypi_from(said, "tsfile") == "2.6.0"
    with pytest.raises(canary.Unresolved, match="tsfile"):
        canary.newest_on_pypi_from("ERROR: No matching distribution found", "tsfile")
    xml = (
        "<metadata><versioning><latest>2.5.0-SNAPSHOT</latest><release>2.4.0</release>"
        "<versions><version>2.4.0</version></versions></versioning></metadata>"
    )
    assert canary.newest_on_maven_from(xml.encode()) == "2.4.0"
    with pytest.raises(canary.Unresolved, match="Maven"):
        canary.newest_on_maven_from(b"<html>proxy error</html>")


def test_the_requirements_take_the_newest_tsfile_and_pyprojects_ranges() -> None:
    reqs = canary.requirements("2.9.1")
    assert "tsfile==2.9.1" in reqs
    assert not any(r.startswith("tsfile") and r != "tsfile==2.9.1" for r in reqs)
    assert any(r.startswith("pyspark") for r in reqs) and any(
        r.startswith("delta-spark") for r in reqs
    )
    assert any(r.startswith("pyarrow") for r in reqs)


@pytest.mark.slow  # a process
def test_a_typo_in_an_option_is_exit_2_without_a_traceback_or_a_venv(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.canary", "--cahce", str(tmp_path)],
        cwd=canary.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())


def test_the_tsfile_override_names_the_release_and_jar_every_session_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TSFILE_VERSION", "TSFILE_PACKAGE", "JAR"):
        monkeypatch.setattr(jvm, name, getattr(jvm, name))  # put back after the test
    jar = tmp_path / "built.jar"
    with pytest.raises(FileNotFoundError, match="built.jar"):
        jvm.use_tsfile("9.9.9", jar)
    assert jvm.TSFILE_VERSION != "9.9.9"
    jar.write_bytes(b"PK")
    jvm.use_tsfile("9.9.9", jar)
    conf = jvm.session_conf("local[2]", {})
    assert conf["spark.jars"] == str(jar)
    assert "org.apache.tsfile:tsfile:9.9.9" in conf["spark.jars.packages"].split(",")
    assert "org.apache.tsfile:tsfile:9.9.9" in jvm.packages()[0]


def test_the_jar_build_fetches_the_release_it_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def fake_maven(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        asked.extend(a.removeprefix("-Dartifact=") for a in cmd if a.startswith("-Dartifact="))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(jvm.subprocess, "run", fake_maven)
    jars = jvm.tsfile_jars(tmp_path, tsfile_version="9.9.9")
    assert asked[:2] == ["org.apache.tsfile:tsfile:9.9.9", "org.apache.tsfile:common:9.9.9"]
    assert [j.name for j in jars[:2]] == ["tsfile-9.9.9.jar", "common-9.9.9.jar"]
    asked.clear()
    jvm.tsfile_jars(tmp_path)
    assert asked[0] == f"org.apache.tsfile:tsfile:{jvm.TSFILE_VERSION}"


def test_a_chain_that_died_is_charged_to_the_step_it_was_in() -> None:
    died = {"problems": {}, "done": False, "doing": [CPP_WRITER, "writing its files"]}
    found = canary.outcome_of(died, -6)
    assert found["problems"][CPP_WRITER] == [
        "the chain's process ended (exit -6) while writing its files (see above)"
    ]
    assert found["problems"][SPARK] == ["not run: tsfile failed first"]
    lines = canary.verdict_lines({}, found["problems"])
    assert lines[:2] == ["tsfile ? FAIL", "org.apache.tsfile:tsfile ? NOT RUN"]
    assert canary.outcome_of({}, 1)["problems"][SPARK][0].startswith("the chain's process")
    done = {"problems": {CPP_WRITER: []}, "done": True, "files": {CPP_WRITER: 18}}
    assert canary.outcome_of(done, 0) is done
    empty = {"problems": {CPP_WRITER: []}, "done": True}
    assert canary.outcome_of(empty, 0)["problems"] == {SPARK: ["the chain ran no file"]}
