"""The benchmark scripts run and measure what they say (tiny sizes: not timings)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmark scripts as processes, over OpenSSH

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_fsync  # noqa: E402


@pytest.mark.parametrize("mode", ["none", "fsync", "fsync8", "syncfs"])
def test_each_mode_writes_exactly_the_files(tmp_path: Path, mode: str) -> None:
    data = b"x" * 1000
    took = bench_fsync.write_files(tmp_path / mode, 70, data, mode)  # 2 full batches + 6

    names = sorted(p.name for p in (tmp_path / mode).iterdir())
    assert names == [f"f{i:06d}" for i in range(70)]
    assert {(tmp_path / mode / n).read_bytes() for n in names} == {data}
    assert took > 0


def run_benchmark(script: str, workdir: Path, *args: str, timeout: float) -> str:
    """A benchmark script's output, run as a user would, in ``workdir``; it must succeed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_fsync_benchmark_prints_a_rate_and_ratio_per_mode(tmp_path: Path) -> None:
    output = run_benchmark(
        "bench_fsync.py", tmp_path, "--files", "40", "--size", "4096", "--reps", "1", timeout=120
    )

    rows = re.findall(
        r"^(\w+)\s+([\d,]+) files/s\s+ratio to none\s+([\d.]+)$", output, re.MULTILINE
    )
    assert [r[0] for r in rows] == ["none", "fsync", "fsync8", "syncfs"]
    assert rows[0][2] == "1.00" and all(int(r[1].replace(",", "")) > 0 for r in rows)
    assert list(tmp_path.iterdir()) == []  # its files are gone


def test_loader_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    output = run_benchmark(
        "bench_loader.py",
        tmp_path,
        *("--rows", "4000", "--files", "4", "--tsfiles", "1", "--repeat", "1"),
        timeout=400,
    )

    assert "generated 4000 Parquet rows in 4 files (+1 TsFiles)" in output
    assert re.search(
        r"run 1: plain [\d.]+s, loader [\d.]+s \(4100 rows\), plain\+fsync [\d.]+s", output
    )
    assert re.search(
        r"^ratio loader/plain: [\d.]+ \(spread [\d.]+-[\d.]+, target >= 1.00\)$",
        output,
        re.MULTILINE,
    )
    assert re.search(
        r"^ratio loader/plain\+fsync: [\d.]+ \(spread [\d.]+-[\d.]+, equal durability\)$",
        output,
        re.MULTILINE,
    )


def test_busy_seconds_counts_the_cpu_a_run_uses() -> None:
    """The machine's busy time grows by at least the CPU time this process spends."""
    from benchlib import busy_seconds

    before, cpu_before = busy_seconds(), time.process_time()
    while time.process_time() - cpu_before < 0.3:
        pass
    spent = time.process_time() - cpu_before
    assert busy_seconds() - before >= spent - 0.05  # the counts' ticks are 10 ms or less


def test_a_clean_up_that_frees_many_inodes_makes_the_next_timing_wait(tmp_path: Path) -> None:
    # ext4 without a journal scans past inodes freed in the last six minutes at every
    # file created: a benchmark that deleted many files waits that long before timing,
    # and one that deleted a few, or nothing, does not wait at all.
    import benchlib

    slept: list[float] = []
    work = tmp_path / "work"
    few, many = tmp_path / "few", tmp_path / "many"
    for folder, count in ((few, 10), (many, benchlib.FREED_MANY)):
        folder.mkdir()
        for i in range(count):
            (folder / f"f{i}").write_bytes(b"")
    benchlib.await_freed_inodes(work, slept.append)  # nothing deleted yet
    benchlib.remove_tree(few, work)
    benchlib.await_freed_inodes(work, slept.append)
    assert slept == [] and not few.exists()
    benchlib.remove_tree(many, work)
    assert not many.exists()
    benchlib.await_freed_inodes(work, slept.append)
    assert len(slept) == 1 and benchlib.FREED_INODES_AGE - 5 < slept[0] <= benchlib.FREED_INODES_AGE
    marker = work / ".freed-inodes-at"
    marker.write_text(f"{time.time() - benchlib.FREED_INODES_AGE - 1}\n")  # long enough ago
    benchlib.await_freed_inodes(work, slept.append)
    assert len(slept) == 1


@pytest.mark.parametrize(
    ("streams", "shared"), [(1, False), (2, False), (3, True)], ids=["one", "two", "three-shared"]
)
def test_the_least_work_lands_every_file_whole_on_each_stream(
    tmp_path: Path, streams: int, shared: bool
) -> None:
    """The ceiling's transfer, with every check: each stream's folder holds exactly its
    share of the files, byte for byte with their sidecars, and logged each one, whether
    every stream has a receiving process of its own or they share one."""
    import bench_small_ceiling
    from benchlib import KiB, populate, templates

    names = populate(tmp_path / "edge", templates(tmp_path / "t", 8 * KiB, 3), 37)
    files = [tmp_path / "edge" / name for name in names]

    transfer = bench_small_ceiling.run(files, tmp_path / "dc", True, streams, shared)

    # a run this short may fall between two of the kernel's CPU-time ticks: its busy
    # time is measured, and can be none (the count itself is tested below)
    assert transfer.seconds > 0 and transfer.busy >= 0
    for i in range(streams):
        final = tmp_path / "dc" / f"s{i}" / "final"
        share = files[i::streams]
        assert sorted(p.name for p in final.iterdir()) == sorted(
            n for f in share for n in (f.name, f"{f.name}.resource")
        )
        for source in share:
            for suffix in ("", ".resource"):
                assert (final / f"{source.name}{suffix}").read_bytes() == Path(
                    f"{source}{suffix}"
                ).read_bytes()
        assert len((tmp_path / "dc" / f"s{i}" / "received.log").read_text().splitlines()) == len(
            share
        )


@pytest.mark.parametrize("receivers", ["1", "2"])
def test_two_senders_benchmark_loads_both_senders_files(tmp_path: Path, receivers: str) -> None:
    """The benchmark's rounds are checked (both senders' reports and every file loaded,
    into one receiver or into one each: a refused file, say a device claimed by the
    other sender, fails the run) and it prints each rate and their ratio."""
    output = run_benchmark(
        "bench_two_senders.py",
        tmp_path,
        *("--files", "12", "--reps", "1", "--receivers", receivers),
        timeout=300,
    )

    into = "one receiver" if receivers == "1" else "a receiver each"
    assert f"12 TsFiles of ~64 KiB per sender, {into}, 1 reps" in output

    summary = re.search(
        r"one sender ([\d,]+) files/s, two at once ([\d,]+) files/s together: ([\d.]+)x",
        output,
    )
    assert summary, output
    assert all(float(v.replace(",", "")) > 0 for v in summary.groups())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["templates"]  # its run removed


@pytest.mark.parametrize("script", ["bench_small_ceiling.py", "bench_two_senders.py"])
def test_a_bad_workdir_or_count_is_one_line(tmp_path: Path, script: str) -> None:
    """A --workdir under a file, and a count of none: one line naming the cause and what
    to give instead, not a traceback."""
    (tmp_path / "a-file").write_text("")
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--reps", "1"]

    under_a_file = subprocess.run(
        [*command, "--files", "5", "--workdir", str(tmp_path / "a-file" / "sub")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    none = subprocess.run([*command, "--files", "0"], capture_output=True, text=True, timeout=60)

    assert under_a_file.returncode == 1
    assert under_a_file.stderr.splitlines() == [
        f"{script[:-3]}: [Errno 20] Not a directory: '{tmp_path / 'a-file' / 'sub'}"
        f"{'/templates' if script == 'bench_small_ceiling.py' else '/two-senders/keys'}': "
        "--workdir needs a folder this user can write, with room"
    ]
    assert none.returncode == 2
    assert none.stderr.splitlines()[-1].endswith("argument --files: 0 is too few: at least 1")
    assert "Traceback" not in under_a_file.stderr + none.stderr


SPIN = """
import subprocess, sys, time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
if sys.argv[1] != "child":
    subprocess.run([sys.executable, "-c", sys.argv[2], "child", ""], check=True)
    print("done", flush=True)
if sys.argv[1] == "wait":
    sys.stdin.readline()  # alive until the test has read its tree
"""


def test_each_ends_cpu_counts_its_process_tree_and_the_command_its_children() -> None:
    """The per-end CPU the transfer benchmark reports: a receiving end's tree read from
    /proc counts a child that ended and was waited for; a timed command's count (wait4)
    includes what its own children used, as rsync's includes its ssh."""
    from benchlib import timed, tree_cpu

    with subprocess.Popen(
        [sys.executable, "-c", SPIN, "wait", SPIN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        assert server.stdout is not None and server.stdout.readline() == "done\n"
        assert tree_cpu(server.pid) >= 0.55  # its own 0.3 s and its child's 0.3 s

    run = timed([sys.executable, "-c", SPIN, "run", SPIN], far=lambda: 1.0)
    assert run.cpu >= 0.55 and run.far_cpu == 0.0  # the far end did nothing meanwhile


def test_the_fleet_benchmark_drives_edges_from_namespaces_and_removes_them(
    tmp_path: Path,
) -> None:
    """Edges in network namespaces of their own, bound by a first round, then idle and
    shipping rounds (the run checks every shipped file is loaded); it prints the
    receiver's CPU per round and edges per core, and leaves no namespace behind."""
    output = run_benchmark(
        "bench_fleet.py",
        tmp_path,
        *("--edges", "4", "--namespaces", "2", "--rounds", "60", "--concurrency", "2"),
        timeout=300,
    )

    assert "4 edges in 2 network namespaces, 60 rounds (1 shipping 1 MiB)" in output
    per_round = re.search(r"receiver CPU per round ([\d.]+) ms", output)
    edges = re.search(r"edges per receiver core at a 300 s interval: ([\d,]+)", output)
    assert per_round and edges, output
    assert float(per_round.group(1)) > 0 and int(edges.group(1).replace(",", "")) > 0
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    assert not re.search(r"^sf\d+n\d", namespaces.stdout, re.MULTILINE), namespaces.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["templates"]  # its run removed
