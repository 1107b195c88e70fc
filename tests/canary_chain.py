"""The canary's chain: TsFiles written by a release of each writer, through the receiver's
check and the loader into a Delta table, read back and compared with what was written.

The part of the canary (``tests/canary.py``) that runs with whatever releases the Python
running it has: the canary runs it in an environment of the newest releases, and
``tests/test_canary.py`` on the installed ones, so the canary's own logic is held by the
suite. Writers: the ``tsfile`` package's C++ writer (``tests/tsfile_cpp_writers.py``, tree
model, every type with every encoding and compressor it accepts; table model through
``dataframe_to_tsfile``) and the Java TsFile library of the corpus generator
(``tests/tsfile_corpus.py``'s ``tsfile-2`` line, tree and table model). Each file gets the
receiver's verdict (``formats.tsfile.check``), then every file it accepts goes into one
``run_load`` (one Spark session, one Delta commit; each file a sender of its own, so no
two files' rows meet), and the table is read back twice: by the project's Delta log
reader (``read_arrow``) and by Delta's own reader in Spark. A file must be accepted or
refused (in one line) as the project's table of what it reads exactly says
(``tsfile_support``: the files the suite's differential tests refuse, which also hold the
loader's own refusal of them), and an accepted file's rows must be exactly the
reference: the written values (C++), what the writer's own release reads back (Java).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tsfile_corpus
import tsfile_cpp_writers
from tsfile_read_helpers import Rows, differences, plain, receiver_verdict

#: Cases of the Java corpus the chain leaves out: ``wide`` (300 devices, 300 series in
#: one) adds hundreds of columns and a minute, and tests the loader, not a release.
SKIPPED_CASES = frozenset({"wide"})
#: The components, in the order their lines are printed.
CPP_WRITER = "tsfile"
JAVA_LIBRARY = "org.apache.tsfile:tsfile"
SPARK = "pyspark"
DELTA = "delta-spark"
COMPONENTS = (CPP_WRITER, JAVA_LIBRARY, SPARK, DELTA)


@dataclass
class Case:
    """One file through the chain: whose, where, and the answer it must give."""

    component: str
    name: str
    path: Path
    refused: bool  # by the receiver, in one line: it never reaches the loader
    rows: Rows


@dataclass
class Outcome:
    """What the chain found: per component the problems (none: it passed)."""

    problems: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in COMPONENTS})
    files: dict[str, int] = field(default_factory=lambda: {c: 0 for c in COMPONENTS})
    loaded_rows: int = 0

    def add(self, component: str, problem: str) -> None:
        self.problems[component].append(problem)

    @property
    def passed(self) -> bool:
        return not any(self.problems.values())


def cpp_cases(folder: Path) -> list[Case]:
    """The C++ writer's files, and the written values each must load as."""
    corpus = tsfile_cpp_writers.build(folder)
    out = []
    for written in corpus.files:
        refused = written.path.name in tsfile_cpp_writers.REFUSED_FILES
        out.append(Case(CPP_WRITER, written.path.name, written.path, refused, written.rows))
    return out


def java_cases(corpus_folder: Path) -> list[Case]:
    """The Java library's files (``tsfile_corpus.build_release``), and what the same
    release read back from each."""
    out = []
    for entry in tsfile_corpus.corpus(corpus_folder):
        if entry.case in SKIPPED_CASES:
            continue
        name = f"{entry.line}/{entry.case}/{entry.path.name}"
        refused = tsfile_corpus.refused_because(entry) is not None
        out.append(
            Case(JAVA_LIBRARY, name, entry.path, refused, tsfile_corpus.expected_rows(entry))
        )
    return out


def _one_line(text: str | None) -> bool:
    return bool(text) and "\n" not in (text or "")


def _table_rows(records: list[dict[str, Any]], columns: dict[str, str]) -> dict[str, Rows]:
    """The table's rows per sender: (device, time) -> {measurement: value}."""
    from spark_loader.table_layout import SENDER_COLUMN

    out: dict[str, Rows] = {}
    for r in records:
        values = {m: plain(r[c]) for c, m in columns.items() if r.get(c) is not None}
        rows = out.setdefault(str(r[SENDER_COLUMN]), {})
        key = (r["device"], r["time"])
        if key in rows:
            values = {"<a second row>": True}  # shows as a difference: a row loaded twice
        rows[key] = values
    return out


def run_chain(
    spark: Any, work: Path, java_corpus: Path, step: Callable[[str, str], None] | None = None
) -> Outcome:
    """Every file of both writers through the chain, in ``spark`` (a session the loader
    would start: the Java reader and Delta's jars on its class path); ``work`` is an empty
    folder for the receiver, the table and the C++ writer's files. ``step(component,
    what)`` is told each step before it starts (a writer may take its process down)."""
    step = step or (lambda component, what: None)
    from spark_loader_helpers import Receiver, measurement_columns

    from spark_loader import read_arrow, run_load

    outcome = Outcome()
    cases: list[Case] = []
    for component, make in (
        (CPP_WRITER, lambda: cpp_cases(work / "cpp")),
        (JAVA_LIBRARY, lambda: java_cases(java_corpus)),
    ):
        step(component, "writing its files")
        try:
            cases.extend(_made(make))
        except Exception as exc:  # a writer of a new release may fail any way
            outcome.add(component, f"writing the corpus failed: {first_line(exc)}")
    recv = Receiver(work / "receiver")
    placed: dict[str, tuple[Case, Path]] = {}
    for i, case in enumerate(cases):
        outcome.files[case.component] += 1
        sender = str(uuid.UUID(int=i + 1))
        rel = f"sequence/root.canary/0/0/{1700000000000 + i}-{i + 1}-0-0.tsfile"
        step(case.component, f"the receiver's check of {case.name}")
        verdict = receiver_verdict(case.path)
        _check_verdict(outcome, case, verdict)
        if verdict is not None:
            continue  # the receiver keeps it from the loader
        target = recv.storage.target(recv.data_dirs[0], sender, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(case.path, target)
        placed[sender] = (case, target)
    config = recv.config(work)
    step(SPARK, "loading the files into the Delta table")
    try:
        report = run_load(config, spark=spark)
    except Exception as exc:  # Spark, Delta or the reader of a new release
        outcome.add(SPARK, f"the load failed: {first_line(exc)}")
        return outcome
    step(DELTA, "reading the table back")
    columns = {**measurement_columns(config.table_path)}
    by_arrow = _table_rows(read_arrow(config.table_path).to_pylist(), columns)
    try:
        frame = spark.read.format("delta").load(str(config.table_path))
        by_delta = _table_rows([r.asDict() for r in frame.collect()], columns)
    except Exception as exc:
        outcome.add(DELTA, f"Delta's reader could not read the table: {first_line(exc)}")
        by_delta = None
    outcome.loaded_rows = sum(len(rows) for rows in by_arrow.values())
    for sender, (case, target) in placed.items():
        skipped = report.skipped.get(str(target))
        if case.refused:
            continue  # accepted by the receiver, a problem already
        if skipped is not None:
            outcome.add(case.component, f"{case.name}: the loader refused it: {skipped}")
            continue
        diffs = differences(by_arrow.get(sender, {}), case.rows, limit=2)
        if diffs:
            outcome.add(case.component, f"{case.name}: " + "; ".join(diffs))
        if by_delta is not None:
            diffs = differences(by_delta.get(sender, {}), case.rows, limit=2)
            if diffs:
                outcome.add(DELTA, f"{case.name} read by Delta's reader: " + "; ".join(diffs))
    unknown = set(by_arrow) - set(placed)
    if unknown:
        outcome.add(SPARK, f"rows of senders nobody placed: {sorted(unknown)[:3]}")
    return outcome


def _made(make: Callable[[], list[Case]]) -> list[Case]:
    cases = make()
    if not cases:
        raise RuntimeError("it wrote no file")
    return cases


def _check_verdict(outcome: Outcome, case: Case, verdict: str | None) -> None:
    """The receiver's verdict on one file against the one it must give."""
    if not case.refused and verdict is not None:
        outcome.add(case.component, f"{case.name}: the receiver refused it: {verdict}")
    elif case.refused and not _one_line(verdict):
        outcome.add(
            case.component,
            f"{case.name}: the receiver must refuse it in one line, said {verdict!r}",
        )


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:500]
