"""Shared setup for the sealsync-vs-rsync benchmarks (see bench_vs_rsync.py).

Everything runs on this machine over loopback, as real processes, the way an operator
runs them: ``sealsync serve`` and ``sealsync send`` from the project's interpreter, and
``rsync -a`` over an OpenSSH ``sshd`` on a free loopback port with its own host and
client keys, started and stopped by PID. Missing ``rsync`` / ``sshd`` are installed
with apt-get.

Data files are real TsFiles written with the ``tsfile`` package (random doubles,
8 measurements, so they compress like real sensor data); writing one is slow, so a
few distinct templates per size are written once into a cache and copied under new
names. Every file gets a small ``X.resource`` so it counts as sealed.

The two servers a benchmark runs (``sshd`` for rsync, ``sealsync serve``) are in
benchprocs.py. These are measurements, not tests: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SEALSYNC = [PYTHON, "-m", "sealsync"]
SSHD = "/usr/sbin/sshd"
CIPHER = "aes128-gcm@openssh.com"
"""The cipher sealsync prefers. rsync is measured with OpenSSH's own choice, as a user
runs it, and with this one (like for like): the cipher alone moves rsync's bulk rate
by a third on this machine."""

KiB, MiB, GiB = 1024, 1024 * 1024, 1024 * 1024 * 1024
GROUP = "root.bench"
RESOURCE_TEXT = "sealed by the sealsync benchmark\n" * 6  # ~200 bytes, like a small .resource


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- tools


def ensure_tools() -> None:
    """Install ``rsync`` and ``openssh-server`` with apt-get if either is missing."""
    missing = []
    if shutil.which("rsync") is None:
        missing.append("rsync")
    if not os.path.exists(SSHD) or shutil.which("ssh") is None:
        missing.append("openssh-server")
        missing.append("openssh-client")
    if not missing:
        return
    if shutil.which("apt-get") is None:
        sys.exit(f"bench: {', '.join(missing)} missing and no apt-get to install them")
    prefix = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log(f"installing {' '.join(missing)} with apt-get")
    subprocess.run([*prefix, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run([*prefix, "apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


PACKAGES = ("sealsync", "sender", "receiver", "spark_loader")
"""The project's top-level packages (pyproject.toml)."""


def compile_bytecode() -> None:
    """Byte-compile the project, as ``pip install`` does for a deployed package.

    This environment sets ``PYTHONDONTWRITEBYTECODE``, so an editable checkout would
    otherwise compile every module from source at every ``sealsync send`` (~0.1 s, a
    round trip and more on the WAN link).
    """
    paths = [str(ROOT / package) for package in PACKAGES]
    subprocess.run([PYTHON, "-m", "compileall", "-q", *paths], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on port {port}")


def stop_pid(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM the process we started (by its PID), SIGKILL if it does not go."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


# --------------------------------------------------------------------------- measuring


SEND_CPU, RECEIVE_CPU = 0, 1
"""The CPUs a pinned run gives each end (``--pin``): the sending end (the sender, or
rsync and its ``ssh``) on the first, the receiving end (the receiver, or ``sshd`` and
the rsync it starts) on the second."""


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    """``cmd`` run on ``cpu`` alone (``taskset``; its children inherit it), or as it is."""
    return cmd if cpu is None else ["taskset", "-c", str(cpu), *cmd]


@dataclass
class Run:
    seconds: float
    max_rss_kib: int
    """Peak RSS, when measured (``timed(poll_rss=True)``), else 0."""
    returncode: int
    stdout: str = ""
    stderr: str = ""
    busy: float = 0.0
    """CPU seconds the whole machine spent meanwhile (:func:`busy_seconds`)."""
    cpu: float = 0.0
    """CPU seconds of the command's own process and every descendant it waited for
    (``wait4``): the sending end of a transfer, its ``ssh`` included."""
    far_cpu: float = 0.0
    """CPU seconds the process tree ``timed(far=...)`` reads spent meanwhile: the
    receiving end."""


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: str) -> list[str] | None:
    """``/proc/<pid>/stat`` from its state field on (the name may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:  # gone meanwhile
        return None
    return raw[raw.rindex(b")") + 2 :].decode().split()


def tree_cpu(root: int) -> float:
    """CPU seconds ``root`` and its descendants have used: each live process's user
    and system time plus that of the children it has waited for (``cutime``,
    ``cstime``), read from ``/proc``.

    The difference over a run is the CPU that process tree spent in it, whatever
    else runs on the machine: a child that ended meanwhile moved from its own count
    into its parent's, so it counts once. (A child that ended and was not waited for
    yet counts nowhere: read this once the tree is quiet.)"""
    parent_of: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None:
            continue
        pid = int(entry)
        # after the state: ppid is field 1, utime 11, stime 12, cutime 13, cstime 14
        parent_of[pid] = int(fields[1])
        times[pid] = sum(int(v) for v in fields[11:15])
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / _CLK_TCK


def descendants(root: int) -> int:
    """How many processes ``root`` has under it now."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(entry)) is not None:
            parent_of[int(entry)] = int(fields[1])
    count, todo = 0, [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, parent in parent_of.items() if parent == pid]
        count += len(kids)
        todo.extend(kids)
    return count


def busy_seconds() -> float:
    """CPU seconds this machine has spent working since boot: user, nice, system, irq
    and softirq time (not idle or iowait; not steal, the hypervisor's, nor guest, which
    user time already holds).

    The difference over a run counts every process the run involves (both ends of a
    transfer, their workers, ssh, the kernel's work for them) and, on a shared
    machine, whatever else ran: measure on an otherwise idle one.
    """
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (
            int(v) for v in f.readline().split()[1:8]
        )
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _peak_rss_kib(pid: int) -> int:
    """``VmHWM`` of a live process: its peak RSS since its ``exec`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def timed(
    cmd: list[str],
    env: dict[str, str] | None = None,
    check: bool = True,
    poll_rss: bool = False,
    pin: int | None = None,
    far: Callable[[], float] | None = None,
) -> Run:
    """Wall time (and with ``poll_rss`` the peak RSS) of one command, with its CPU.

    ``pin``: the CPU it runs on (:func:`pinned`). ``far``: the CPU seconds of the
    other end so far (:func:`tree_cpu` of a server), read before the command starts
    and after it ends, outside the timed part; the difference is ``Run.far_cpu``.

    The peak RSS is the process's ``VmHWM`` read every 20 ms while it runs: ``wait4``'s
    ``ru_maxrss`` would count the benchmark's own memory, inherited at ``fork``.
    """
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-out-{os.getpid()}"
    with open(out_path, "w+b") as out, open(f"{out_path}.err", "w+b") as err:
        far_before = far() if far is not None else 0.0
        busy = busy_seconds()
        started = time.perf_counter()
        proc = subprocess.Popen(
            pinned(cmd, pin), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env
        )
        peak = 0
        # its own CPU and that of the children it waited for (rsync's ssh), from the
        # kernel: the process itself is gone once it has been waited for
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG if poll_rss else 0)
            if done:
                break
            peak = max(peak, _peak_rss_kib(proc.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        busy = busy_seconds() - busy
        proc.returncode = os.waitstatus_to_exitcode(status)
        far_cpu = far() - far_before if far is not None else 0.0
        out.seek(0)
        err.seek(0)
        run = Run(
            seconds,
            peak,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            busy,
            usage.ru_utime + usage.ru_stime,
            far_cpu,
        )
    os.unlink(out_path)
    os.unlink(f"{out_path}.err")
    if check and run.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])}... exited {run.returncode}:\n{run.stderr[-3000:]}\n"
            f"{run.stdout[-2000:]}"
        )
    return run


def settle() -> None:
    """Write back dirty pages outside the timed region (rsync does not fsync, sealsync
    does: what rsync leaves dirty must not be flushed during the next run)."""
    os.sync()
    time.sleep(0.2)


def median(values: list[float]) -> float:
    return statistics.median(values)


# --------------------------------------------------------------------------- data


def write_tsfile(
    path: Path, size: int, seed: int, device: str = f"{GROUP}.d0", text: bool = False
) -> None:
    """A real tree-model TsFile of about ``size`` bytes.

    Random doubles in 8 measurements, or with ``text`` one string measurement of 1 KiB
    random hex values (several times faster to write: for the multi-GiB file, whose
    content only has to be a valid TsFile).
    """
    import numpy as np
    from tsfile import Tablet, TimeseriesSchema, TSDataType, TsFileWriter

    if text:
        measurements, kind, row_bytes, batch = ["s0"], TSDataType.STRING, 1024, 4096
    else:
        measurements = [f"s{i}" for i in range(8)]
        kind, row_bytes, batch = TSDataType.DOUBLE, 65.5, 65536
    rows_total = max(16, int(size / row_bytes))
    batch = min(rows_total, batch)
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".part")
    tmp.unlink(missing_ok=True)
    writer = TsFileWriter(str(tmp))
    for m in measurements:
        writer.register_timeseries(device, TimeseriesSchema(m, kind))
    start = seed * 10**10
    done = 0
    while done < rows_total:
        n = min(batch, rows_total - done)
        tablet = Tablet(measurements, [kind] * len(measurements), n)
        tablet.set_table_name(device)
        tablet.set_timestamp_list(list(range(start + done, start + done + n)))
        if text:
            blob = rng.bytes(n * 512).hex()
            tablet.data_list[0] = [blob[i * 1024 : (i + 1) * 1024] for i in range(n)]
        else:
            values = rng.random((len(measurements), n))
            for i in range(len(measurements)):
                tablet.data_list[i] = values[i].tolist()
        writer.write_tablet(tablet)
        done += n
    writer.close()
    os.replace(tmp, path)


def exit_status(script: str, measure: Callable[[], int]) -> int:
    """``measure()``'s exit status, with the ways a benchmark run ends early as one line
    each and a status of their own instead of a traceback: a Ctrl-C (130), a run that
    failed its own check (``RuntimeError``, 1), a ``--workdir`` it cannot use (1)."""
    try:
        return measure()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"{script}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a --workdir that is no folder, or full
        print(
            f"{script}: {exc}: --workdir needs a folder this user can write, with room",
            file=sys.stderr,
        )
        return 1


def at_least_one(text: str) -> int:
    """An ``argparse`` type: a count of one or more (none would measure nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is too few: at least 1")
    return value


def templates(cache: Path, size: int, count: int, device: str = f"{GROUP}.d0") -> list[Path]:
    """``count`` distinct TsFiles of about ``size`` bytes of ``device``, written once and
    kept in ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    tag = "" if device == f"{GROUP}.d0" else f"-{device}"
    for i in range(count):
        path = cache / f"t{size}-{i}{tag}.tsfile"
        if not path.exists():
            started = time.monotonic()
            write_tsfile(path, size, seed=1000 + i, device=device)
            if size >= 16 * MiB:
                log(
                    f"wrote template {path.name} ({path.stat().st_size / MiB:.0f} MiB) in "
                    f"{time.monotonic() - started:.1f} s"
                )
        out.append(path)
    return out


def file_name(index: int) -> str:
    """IoTDB-style name ``<time>-<version>-<merges>.tsfile``."""
    return f"{1_700_000_000_000 + index}-{index + 1}-0.tsfile"


def populate(
    data_dir: Path, sources: list[Path], count: int, per_folder: int = 1000, link: bool = False
) -> list[str]:
    """``count`` sealed files under ``sequence/root.bench/<partition>/``, copies (or hard
    links, ``.resource`` included: no inode to create or free) of ``sources`` round
    robin; returns their relative names."""
    names = []
    for src in sources:
        resource = src.with_name(src.name + ".resource")
        if link and not resource.exists():
            resource.write_text(RESOURCE_TEXT)
    for i in range(count):
        rel = f"sequence/{GROUP}/{i // per_folder}/{file_name(i)}"
        path = data_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        src = sources[i % len(sources)]
        if link:
            os.link(src, path)
            os.link(src.with_name(src.name + ".resource"), f"{path}.resource")
        else:
            shutil.copyfile(src, path)
            path.with_name(path.name + ".resource").write_text(RESOURCE_TEXT)
        names.append(rel)
    return names


def set_aside(path: Path, trash: Path) -> None:
    """Move ``path`` into ``trash`` (deleted once a measure is over) instead of deleting
    it, and drop its pages from the page cache.

    Deleting the last run's thousands of files right before the next run made every
    file creation in it slower (see :func:`remove_tree`). Real receivers do not delete
    what they just wrote.

    The pages go (:func:`evict_pages`) because kept ones push each next run's writes
    into free memory the virtual machine's host has taken back: on this kind of
    machine the first touch of such a page costs a fault on the host, several times
    the cost of a page freed a moment ago, and a tool that writes without fsync (plain
    rsync) runs at about 60 % of its own speed once a few GiB of earlier output are
    cached. After a plain ``rm`` a user's next run reuses the freed pages; this gives
    each run that same memory without freeing the inodes.
    """
    if not path.exists():
        return
    trash.mkdir(parents=True, exist_ok=True)
    moved = trash / f"{path.name}-{time.monotonic_ns()}"
    os.rename(path, moved)
    evict_pages(moved)


def evict_pages(folder: Path) -> None:
    """Write back, then drop from the page cache, every file under ``folder``."""
    os.sync()
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                fd = os.open(os.path.join(parent, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


FREED_INODES_AGE = 361.0
"""Seconds after which ext4 without a journal reuses a freed inode (see remove_tree)."""
FREED_MANY = 1000
"""Inodes freed at once from which remove_tree notes the time."""


def remove_tree(path: Path, workdir: Path) -> None:
    """``shutil.rmtree``, noting in ``workdir`` when it freed many inodes.

    ext4 without a journal (this machine's root file system) will not reuse an inode
    freed less than 60 s ago, or 360 s while its inode table block is still dirty,
    and the creation of every new file scans past each such inode (``find_inode_bit``
    and ``recently_deleted`` in a ``perf`` profile). Deleting a run's hundreds of
    thousands of files made the files created in the next few minutes cost the
    receiving side two to three times the CPU, at random for each tool depending on
    which block groups its folders are in. :func:`await_freed_inodes` waits that out.
    """
    if not path.exists():
        return
    freed = sum(1 for _ in path.rglob("*"))
    shutil.rmtree(path, ignore_errors=True)
    if freed >= FREED_MANY:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / ".freed-inodes-at").write_text(f"{time.time()}\n")


def await_freed_inodes(workdir: Path, sleep: Callable[[float], None] = time.sleep) -> None:
    """Sleep until the inodes :func:`remove_tree` last freed in ``workdir`` are old
    enough to be reused, so that no timed run pays for the scan past them. Deletions
    by anything else (a test run) are not known here: do not run a benchmark within
    six minutes of deleting many files on the same file system."""
    try:
        freed_at = float((workdir / ".freed-inodes-at").read_text())
    except (OSError, ValueError):
        return
    left = freed_at + FREED_INODES_AGE - time.time()
    if left > 0:
        log(
            f"waiting {left:.0f} s for the inodes freed by the last clean-up to age: this "
            "file system scans past recently freed inodes at every file created"
        )
        sleep(left)


def disk_free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


_MD5_CHILD = """
import hashlib, json, sys, time
spent = 0.0
for line in open(sys.argv[1]):
    parts = [open(path, "rb").read() for path in json.loads(line)]
    started = time.thread_time()
    md5 = hashlib.md5()
    for part in parts:
        md5.update(part)
    md5.hexdigest()
    spent += time.thread_time() - started
print(spent)
"""


def md5_seconds(streams: list[list[Path]], cpu: int) -> float:
    """CPU seconds MD5 alone takes over ``streams`` (each a file's data and sidecars,
    hashed as one stream, as a file's MD5 covers them) on ``cpu``: what every byte
    costs each end of sealsync at least, the protocol's check. Files are read before
    each is hashed, outside the count, in a process of its own on that CPU."""
    listing = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-md5-{os.getpid()}"
    listing.write_text("".join(json.dumps([str(p) for p in parts]) + "\n" for parts in streams))
    try:
        out = subprocess.run(
            pinned([PYTHON, "-c", _MD5_CHILD, str(listing)], cpu),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        listing.unlink()
    return float(out)
