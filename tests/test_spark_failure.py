"""Reading Spark's errors (``failure.describe``) and the split-and-retry policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_loader.failure import Failure, SplitRetry, describe, last_error_line
from spark_loader.tsfile_read import FILE_ERROR

# --- SplitRetry: no Spark needed ------------------------------------------------------


def _marked(file_id: str) -> RuntimeError:
    return RuntimeError(f"{FILE_ERROR}[{file_id}]: cannot read it")


def _run(
    items: list[str],
    bad: set[str],
    culprit: bool,
    max_failures: int = 32,
    owner: bool = False,
) -> tuple[list[list[str]], dict[str, str], list[str], int]:
    """Run ``items`` as jobs that fail while they hold a bad item; returns the groups
    tried, what was given up (and why), what succeeded, and how often it split."""
    tried: list[list[str]] = []
    given_up: dict[str, str] = {}
    done: list[str] = []
    splits = [0]

    def blame(failure: Failure, group: list[str]) -> str | None:
        return failure.file_id if culprit and failure.file_id in group else None

    retry = SplitRetry(
        items,
        given_up.__setitem__,
        blame,
        lambda: splits.__setitem__(0, splits[0] + 1),
        max_failures=max_failures,
        owner=(lambda item: item.split(":")[0]) if owner else (lambda item: ""),
    )
    for group in retry:
        tried.append(group)
        found = sorted(bad & set(group))
        if found:
            retry.failed(group, _marked(found[0]))
            continue
        done.extend(group)
    return tried, given_up, done, splits[0]


def test_the_file_a_failure_names_is_dropped_and_the_rest_retried_at_once() -> None:
    items = [f"f{i}" for i in range(1, 9)]
    tried, given_up, done, splits = _run(items, {"f3"}, culprit=True)
    assert tried == [items, [i for i in items if i != "f3"]]
    assert given_up == {"f3": "cannot read it"}
    assert sorted(done) == sorted(set(items) - {"f3"})
    assert splits == 0


def test_without_a_name_halves_isolate_each_bad_file() -> None:
    items = [f"f{i}" for i in range(1, 9)]
    tried, given_up, done, splits = _run(items, {"f2", "f7"}, culprit=False)
    assert sorted(given_up) == ["f2", "f7"]
    assert all(reason.endswith("cannot read it") for reason in given_up.values())
    assert sorted(done) == sorted(set(items) - {"f2", "f7"})
    assert tried[:3] == [items, items[:4], items[:2]]  # depth first, in order
    # 8 -> 4+4; f1-f4 -> 2+2 (f3-f4 pass); f1-f2 -> 1+1; f5-f8 -> 2+2 (f5-f6 pass);
    # f7-f8 -> 1+1: five splits, and 8, 4, 2, 1, 1, 2, 4, 2, 2, 1, 1 tried
    assert splits == 5
    assert [len(group) for group in tried] == [8, 4, 2, 1, 1, 2, 4, 2, 2, 1, 1]


def test_after_too_many_failed_jobs_a_group_is_given_up_whole() -> None:
    items = [f"f{i}" for i in range(1, 9)]
    tried, given_up, done, _ = _run(items, {"f1"}, culprit=False, max_failures=2)
    # 8 fails (1), its first half fails (2), that half's first half fails (3 > 2): given up
    assert tried[:3] == [items, items[:4], items[:2]]
    assert given_up == {
        "f1": "not retried after 3 failed Spark jobs: cannot read it",
        "f2": "not retried after 3 failed Spark jobs: cannot read it",
    }
    assert sorted(done) == items[2:]


def test_a_failed_group_is_split_by_sender_first() -> None:
    """Items are ``sender:file``: once a mixed group fails, each sender's files run
    apart, and only the bad file's own sender's files are ever retried beside it."""
    items = ["a:1", "b:1", "a:2", "c:1", "b:2", "c:2"]
    tried, given_up, done, _ = _run(items, {"b:2"}, culprit=False, owner=True)
    assert tried[:4] == [items, ["a:1", "a:2"], ["b:1", "b:2"], ["b:1"]]
    assert set(given_up) == {"b:2"}
    assert sorted(done) == sorted(set(items) - {"b:2"})


def test_a_sender_over_its_failure_budget_loses_only_its_own_files() -> None:
    items = [f"bad:{i}" for i in range(8)] + ["good:1", "good:2"]
    tried, given_up, done, _ = _run(
        items, set(items[:8]), culprit=False, owner=True, max_failures=2
    )
    assert sorted(given_up) == sorted(items[:8])
    assert sorted(done) == ["good:1", "good:2"]
    assert any(reason.startswith("not retried after 3 failed") for reason in given_up.values())


def test_nothing_to_run_tries_nothing() -> None:
    assert _run([], {"f1"}, culprit=True)[0] == []


# --- describe: what a non-Spark exception and a log say -------------------------------


def test_a_plain_exception_reads_as_its_first_line() -> None:
    failure = describe(ValueError("not a complete Parquet file\nmore detail"))
    assert failure == Failure(
        "not a complete Parquet file", text="not a complete Parquet file\nmore detail"
    )
    assert describe(ValueError("")).reason == "ValueError: no detail"
    assert len(describe(ValueError("x" * 500)).reason) == 200


def test_a_marker_in_the_text_names_its_file() -> None:
    failure = describe(RuntimeError(f"Job aborted\n  {FILE_ERROR}[f0a1]: TsFile truncated\n"))
    assert (failure.file_id, failure.reason) == ("f0a1", "TsFile truncated")


def test_the_last_error_line_of_a_log() -> None:
    log = (
        "26/01/01 10:00:00 WARN Utils: Your hostname resolves to a loopback address\n"
        "26/01/01 10:00:01 ERROR StandaloneSchedulerBackend: Application has been killed. "
        "Reason: All masters are unresponsive! Giving up.\n"
        "26/01/01 10:00:02 WARN Other: later, but no error\n"
    )
    assert (
        last_error_line(log)
        == "Application has been killed. Reason: All masters are unresponsive! Giving up."
    )
    assert last_error_line("java.lang.IllegalStateException: stopped\n") == (
        "java.lang.IllegalStateException: stopped"
    )
    assert last_error_line("nothing here\n") == ""


# --- describe: real Spark errors ------------------------------------------------------


def _raised(job: Any) -> BaseException:
    with pytest.raises(Exception) as info:
        job()
    return info.value


@pytest.mark.slow
def test_a_python_worker_failure_names_the_file_its_marker_names(spark: Any) -> None:
    marker = f"{FILE_ERROR}[f00d]: TsFile unreadable (page header)"

    def raise_marked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Defined here, not at module level: a worker cannot import this test module,
        # so the function must travel by value.
        for batch in batches:
            raise RuntimeError(marker)
            yield batch

    df = spark.createDataFrame([("x",)], "p string").mapInArrow(raise_marked, "p string")
    failure = describe(_raised(df.collect))
    assert (failure.file_id, failure.reason) == ("f00d", "TsFile unreadable (page header)")
    assert not failure.from_jvm


@pytest.mark.slow
def test_a_python_worker_failure_reads_as_its_exception_line(spark: Any) -> None:
    rdd = spark.sparkContext.parallelize([0], 1).map(lambda x: 1 // x)
    failure = describe(_raised(rdd.collect))
    assert failure.reason == "ZeroDivisionError: integer division or modulo by zero"
    assert failure.file_id is None


@pytest.mark.slow
def test_a_file_spark_cannot_read_is_named_with_what_its_reader_said(
    spark: Any, tmp_path: Path
) -> None:
    good = tmp_path / "in" / "k=1" / "data.parquet"
    bad = tmp_path / "in" / "k=2" / "data.parquet"
    good.parent.mkdir(parents=True)
    bad.parent.mkdir()
    pq.write_table(pa.table({"a": [1, 2, 3]}), good)
    data = good.read_bytes()
    bad.write_bytes(data[:4] + b"x" * 20 + data[-8:])  # a footer pointing outside the file
    df = spark.read.option("basePath", str(tmp_path / "in")).parquet(str(good), str(bad))
    failure = describe(_raised(lambda: df.write.parquet(str(tmp_path / "out"))))
    assert failure.path is not None and failure.path.endswith("/k=2/data.parquet")
    assert failure.from_jvm
    assert "FAILED_READ_FILE" not in failure.reason  # what went wrong, not where
    assert "footer" in failure.reason


@pytest.mark.slow
def test_an_analysis_error_reads_as_its_message(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "nanos.parquet"
    pq.write_table(pa.table({"at": pa.array([5], pa.timestamp("ns"))}), path)
    failure = describe(_raised(lambda: spark.read.parquet(str(path)).collect()))
    assert failure.reason.startswith("[PARQUET_TYPE_ILLEGAL] Illegal Parquet type: INT64")
    assert failure.path is None and failure.file_id is None


@pytest.mark.slow
def test_a_task_failure_reads_below_sparks_job_abort_wrapper(spark: Any) -> None:
    sc = spark.sparkContext
    real = sc.pythonExec
    sc.pythonExec = "/nonexistent/python3"
    try:
        failure = describe(_raised(sc.parallelize([0], 1).map(lambda x: x).collect))
    finally:
        sc.pythonExec = real
    assert failure.reason == (
        'java.io.IOException: Cannot run program "/nonexistent/python3": '
        "error=2, No such file or directory"
    )
    assert failure.from_jvm
