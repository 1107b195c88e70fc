"""Benchmark: the least work that moves small files durably over paramiko.

Issue 17 asks sealsync to move small files at 1.5x ``rsync -a --fsync``. This script
measures what the least possible version of that work reaches here, with the same
parts sealsync must use: two Python processes, one paramiko SSH connection between
them (aes128-gcm, the cipher sealsync prefers), MD5 of every file on both ends, and
on the receiver every data file and its ``X.resource`` written, made durable as the
receiver's default ``sync_method`` does it (one ``syncfs`` per batch where the kernel
reports its errors, else every file fsynced from eight threads), renamed into place,
and the folder fsynced, before the file is acknowledged: files are committed in batches of 32
(sooner when no more bytes are waiting), on a thread of their own while the next
ones arrive.

It leaves out everything else sealsync does for a file: no protocol beyond a length
header, no format check, no ownership claims, no ``sync.log``/``load.log``, no load
into storage, no snapshot, no retries, no per-file verdict. What it reaches says how
far these parts themselves allow a receiver to go on this machine; the distance from
there to sealsync's files/s (``bench_vs_rsync.py small`` runs both in one rotation)
is sealsync's own per-file work.

``--checks`` adds the two guarantees the issue names that the plain run leaves out,
each the cheapest way sealsync's parts allow: every data file's format verified
before its acknowledgement (``formats.verify`` in the receiver's own worker pool,
``InspectPool.inspect_many``, one task per worker per batch, while the batch's fsyncs
run) and a line per file in a log, appended and fsynced once per batch. That is the
least work that gives a verdict's every guarantee, on one connection.

``--streams N`` puts the files in flight on N connections at once (parallel channels,
the issue's last suggestion), each with a sending process of its own and every N-th
file. Each connection gets a receiving process of its own (no interpreter lock shared
between them), or with ``--shared`` one receiving process serves them all, as one
receiver plugin inside its host's process would.

    .venv/bin/python benchmarks/bench_small_ceiling.py [--files 5000] [--reps 3] \
        [--checks] [--streams 1] [--shared]

Each end runs as a child process of this script (``--role receive``, ``--role send``)
and the files are real TsFiles of about 64 KiB, the same as ``bench_vs_rsync.py small``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Queue, SimpleQueue
from typing import NamedTuple

import paramiko

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import (  # noqa: E402
    CIPHER,
    RECEIVE_CPU,
    SEND_CPU,
    KiB,
    at_least_one,
    busy_seconds,
    compile_bytecode,
    exit_status,
    pinned,
    populate,
    templates,
    tree_cpu,
)

from receiver import chunk_pipe  # noqa: E402
from receiver.inspect_pool import InspectPool, verify_in_worker  # noqa: E402
from sealsync import durable, ssh_packets  # noqa: E402
from sealsync.protocol import (  # noqa: E402
    SSH_MAX_PACKET_SIZE,
    SSH_WINDOW_SIZE,
    ConnectionClosed,
    recv_exact,
)

HEADER = struct.Struct(">HII")  # name length, data length, resource length
_interrupted = threading.Event()
"""Set by a Ctrl-C in a receiving end, whose main thread then closes its worker pool."""
BATCH = 32
THREADS = 8


class _Server(paramiko.ServerInterface):
    def __init__(self) -> None:
        self.ready = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        return "none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_shell_request(self, channel: paramiko.Channel) -> bool:
        # sealsync's receive buffer (one copy per byte instead of paramiko's four), put
        # in place on the transport thread before any data can arrive, as sealsync does
        chunk_pipe.install(channel)
        self.ready.set()
        return True


def _transport(sock: socket.socket) -> paramiko.Transport:
    # either end hangs up once every file is acknowledged (or on Ctrl-C): not an error
    # worth paramiko's log line
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    transport = ssh_packets.Transport(
        sock, default_window_size=SSH_WINDOW_SIZE, default_max_packet_size=SSH_MAX_PACKET_SIZE
    )
    transport.get_security_options().ciphers = (CIPHER,)
    return transport


def receive(folders: list[Path], warm: Path | None) -> None:
    """The receiving end: a connection per folder, each served on a thread of its own,
    one batch acknowledged at a time.

    ``warm``: a data file to verify before the clock starts (``--checks``), so that the
    workers have read one, as a serving receiver's have: a worker's first file costs
    imports and native set-up that are no part of the per-file cost."""
    verifier = InspectPool(workers=2, target=verify_in_worker) if warm else None
    try:
        if verifier is not None:
            for info in verifier.inspect_many([warm] * 2 * verifier.workers):
                if isinstance(info, Exception):
                    raise info
        listener = socket.create_server(("127.0.0.1", 0))
        print(listener.getsockname()[1], flush=True)
        failed: list[BaseException] = []

        def serve(sock: socket.socket, folder: Path) -> None:
            try:
                _serve(sock, folder, verifier)
            except BaseException as exc:
                failed.append(exc)

        servers = []
        for folder in folders:  # each served as it comes: its sender waits for that
            sock, _ = listener.accept()
            # a daemon: a Ctrl-C in the main thread must not wait for a sender that is gone
            servers.append(threading.Thread(target=serve, args=(sock, folder), daemon=True))
            servers[-1].start()
        for server in servers:
            server.join()
        # its CPU and its workers', while they are still there to be read
        print(tree_cpu(os.getpid()), flush=True)
        if failed:
            raise failed[0]
    finally:  # a Ctrl-C too: the workers and their semaphores go with this process
        if verifier is not None:
            verifier.close()


def _serve(sock: socket.socket, folder: Path, verifier: InspectPool | None) -> None:
    transport = _transport(sock)
    transport.add_server_key(paramiko.ECDSAKey.generate())
    server = _Server()
    transport.start_server(server=server)
    channel = transport.accept(30)
    if channel is None or not server.ready.wait(30):
        raise RuntimeError("no channel from the sender")
    staging = folder / "staging"
    final = folder / "final"
    staging.mkdir()
    final.mkdir()
    pool = ThreadPoolExecutor(THREADS)
    batches: Queue[list[tuple[str, list[int], str]] | None] = Queue(maxsize=3)
    received = durable.AppendLog(folder / "received.log") if verifier is not None else None

    def commit() -> None:
        try:
            commit_batches()
        except BaseException as exc:  # the sender then reports files not acknowledged
            if _interrupted.is_set():
                return  # the main thread is closing the worker pool and ending
            if not channel.closed:  # closed: the sender is gone, and says why
                print(f"receiving end: {type(exc).__name__}: {exc}", file=sys.stderr)
            if verifier is not None:  # its semaphores, before the process goes
                verifier.close()
            os._exit(1)

    def commit_batches() -> None:
        while (batch := batches.get()) is not None:
            if durable.can_syncfs():  # as the receiver's default sync_method
                fsyncs = [pool.submit(durable.syncfs, batch[0][1][0])]
            else:
                fsyncs = [pool.submit(os.fsync, fd) for _, fds, _ in batch for fd in fds]
            if verifier is not None:  # while the fsyncs run
                for info in verifier.inspect_many([staging / name for name, _, _ in batch]):
                    if isinstance(info, Exception):
                        raise info
            for done in fsyncs:
                done.result()
            for name, fds, _ in batch:
                for fd in fds:
                    os.close(fd)
                os.rename(staging / f"{name}.resource", final / f"{name}.resource")
                os.rename(staging / name, final / name)
            if received is not None:
                received.append_many(f"received {name}" for name, _, _ in batch)
            durable.fsync_dir(final)
            channel.sendall(b"".join(bytes.fromhex(digest) for _, _, digest in batch))

    # a daemon: a Ctrl-C in the main thread must not wait for a batch that never comes
    committer = threading.Thread(target=commit, daemon=True)
    committer.start()
    batch: list[tuple[str, list[int], str]] = []
    while True:
        try:
            head = recv_exact(channel, HEADER.size)
        except ConnectionClosed:
            break
        name_len, data_len, res_len = HEADER.unpack(head)
        body = recv_exact(channel, name_len + data_len + res_len)
        name = bytes(body[:name_len]).decode()
        md5 = hashlib.md5(memoryview(body)[name_len:])
        fds = []
        for suffix, part in (
            ("", memoryview(body)[name_len : name_len + data_len]),
            (".resource", memoryview(body)[name_len + data_len :]),
        ):
            fd = os.open(staging / f"{name}{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, part)
            fds.append(fd)
        batch.append((name, fds, md5.hexdigest()))
        # a batch is committed full, or when nothing more has come (the sender may be
        # waiting for the answers), as sealsync's session does
        if len(batch) == BATCH or not channel.recv_ready():
            batches.put(batch)  # blocks while three wait: their descriptors are held
            batch = []
    if batch:
        batches.put(batch)
    batches.put(None)
    committer.join()
    if received is not None:
        received.close()
    try:  # every file is acknowledged: the sender may have closed first
        channel.close()
    except (EOFError, OSError, paramiko.SSHException):
        pass
    transport.close()


class Transfer(NamedTuple):
    seconds: float
    #: CPU seconds every process on the machine used meanwhile (/proc/stat): both
    #: ends, the worker pool and the kernel's work for them, on an otherwise idle
    #: machine.
    busy: float
    #: CPU seconds of the sending processes, and of the receiving ones with their
    #: worker pool (their own /proc counts), meanwhile.
    send_cpu: float = 0.0
    receive_cpu: float = 0.0


def connect(port: int) -> tuple[paramiko.Transport, paramiko.Channel]:
    transport = _transport(socket.create_connection(("127.0.0.1", port)))
    transport.connect()
    transport.auth_none("bench")
    channel = transport.open_session()
    channel.invoke_shell()
    ssh_packets.fast_sends(channel)
    return transport, channel


def send(channel: paramiko.Channel, files: list[Path]) -> None:
    """Every file sent and acknowledged, each acknowledgement the file's MD5."""
    expected: SimpleQueue[bytes] = SimpleQueue()
    mismatches = 0
    acknowledged = 0

    def acknowledgements() -> None:
        nonlocal mismatches, acknowledged
        try:
            for _ in files:
                if recv_exact(channel, 16) != expected.get():
                    mismatches += 1
                acknowledged += 1
        except ConnectionClosed:
            pass  # reported below, as files not acknowledged

    # a daemon: a Ctrl-C in the main thread must not wait for acknowledgements
    reader = threading.Thread(target=acknowledgements, daemon=True)
    reader.start()
    for path in files:
        data = path.read_bytes()
        resource = Path(f"{path}.resource").read_bytes()
        md5 = hashlib.md5(data)
        md5.update(resource)
        expected.put(md5.digest())
        name = path.name.encode()
        channel.sendall(HEADER.pack(len(name), len(data), len(resource)) + name + data + resource)
    reader.join()
    if mismatches or acknowledged < len(files):
        raise RuntimeError(
            f"{len(files) - acknowledged} files not acknowledged, {mismatches} with another MD5"
        )


def send_part(port: int, listing: Path) -> None:
    """One stream's sending end (``--role send``): connects, says so, waits for the
    word to start, then prints the ``perf_counter`` of its first byte and of its last
    acknowledgement (the same monotonic clock in every process here)."""
    files = [Path(line) for line in listing.read_text().splitlines()]
    transport, channel = connect(port)
    print("ready", flush=True)
    if sys.stdin.readline() != "go\n":
        return
    started = time.perf_counter()
    send(channel, files)
    print(started, time.perf_counter(), tree_cpu(os.getpid()), flush=True)
    channel.close()
    transport.close()


def run(
    files: list[Path],
    into: Path,
    checks: bool = False,
    streams: int = 1,
    shared: bool = False,
    pin: bool = False,
) -> Transfer:
    """One transfer of ``files`` into the new folder ``into``: seconds from the first
    byte sent to the last acknowledgement, checked.

    ``streams``: that many sending processes, each with a connection of its own and
    every ``streams``-th file: files in flight on parallel channels. Each connection
    has a receiving process of its own (no interpreter lock shared between them), or,
    ``shared``, they are all served by one receiving process, as by one receiver
    plugin. Connections are made before the clock starts, and process start-ups are
    left out: both are in sealsync's and rsync's times, so this errs towards a higher
    bound. ``pin``: the sending ends on one CPU, the receiving ones on the other."""
    into.mkdir()
    folders = [into / f"s{i}" for i in range(streams)]
    receivers: list[subprocess.Popen[str]] = []
    senders: list[subprocess.Popen[str]] = []
    try:
        warm = ["--warm", str(files[0])] * checks
        ports = []
        for group in [folders] if shared else [[folder] for folder in folders]:
            receivers.append(
                _child(
                    "receive", "--into", *map(str, group), *warm, cpu=RECEIVE_CPU if pin else None
                )
            )
            ports += [_line(receivers[-1])] * len(group)
        for i, (folder, port) in enumerate(zip(folders, ports, strict=True)):
            folder.mkdir()
            listing = folder / "files.txt"
            listing.write_text("".join(f"{path}\n" for path in files[i::streams]))
            sender = _child(
                "send", "--port", port, "--listing", str(listing), cpu=SEND_CPU if pin else None
            )
            senders.append(sender)
            # connected before the next one starts: a shared receiver serves its
            # connections' folders in the order they come
            if _line(sender) != "ready":
                raise RuntimeError("a sending end did not connect")
        ends = [[s.pid for s in senders], [r.pid for r in receivers]]
        cpu = [sum(tree_cpu(pid) for pid in end) for end in ends]
        busy = busy_seconds()
        for sender in senders:
            assert sender.stdin is not None
            sender.stdin.write("go\n")
            sender.stdin.flush()
        spans = [tuple(float(t) for t in _line(sender).split()) for sender in senders]
        busy = busy_seconds() - busy
        # each end's CPU as it says at its end, less what it had used before the start
        done = [[span[2] for span in spans], [float(_line(r)) for r in receivers]]
        cpu = [sum(end) - was for end, was in zip(done, cpu, strict=True)]
        for child in senders + receivers:
            if child.wait(60) != 0:
                raise RuntimeError("a sending or receiving end failed")
    finally:  # the senders first: a receiving end whose sender is gone ends by itself
        _stop(senders)
        _stop(receivers, grace=5.0)
    for i, folder in enumerate(folders):
        part = files[i::streams]
        landed = sum(1 for p in (folder / "final").iterdir() if p.suffix != ".resource")
        logged = len(durable.read_lines(folder / "received.log")) if checks else len(part)
        if landed != len(part) or logged != len(part):
            raise RuntimeError(f"{landed} files landed, {logged} logged, expected {len(part)}")
    return Transfer(max(s[1] for s in spans) - min(s[0] for s in spans), busy, *cpu)


def _stop(children: list[subprocess.Popen[str]], grace: float = 0.0) -> None:
    """Ends the children still running after an error or a Ctrl-C here: ``grace``
    seconds to end by themselves, then a Ctrl-C of their own, so that a receiving end
    closes its worker pool (killed, it would leave its semaphores to be reported),
    then a kill for any still there."""
    for signalled in (False, True):
        deadline = time.monotonic() + (10.0 if signalled else grace)
        for child in children:
            try:
                child.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                if signalled:
                    child.kill()
                    child.wait()
                else:
                    child.send_signal(signal.SIGINT)
    for child in children:  # their pipes too, once they are gone
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def _child(role: str, *args: str, cpu: int | None = None) -> subprocess.Popen[str]:
    """One end (on ``cpu`` alone, if given), in a process group of its own: a Ctrl-C at
    the terminal reaches this process only, which then stops the ends in order
    (:func:`_stop`), rather than each end and the worker pool's fork server wherever
    they are, start-up included."""
    command = pinned([sys.executable, __file__, "--role", role, *args], cpu)
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, process_group=0
    )


def _line(child: subprocess.Popen[str]) -> str:
    """A child's next line; its end means it failed (its error is on stderr)."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        args = list(child.args)  # type: ignore[arg-type]
        role = args[args.index("--role") + 1]
        raise RuntimeError(f"the {role} end ended early, exit {child.wait()}")
    return line.strip()


def _on_interrupt(signum: int, frame: object) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=at_least_one, default=5000)
    parser.add_argument("--reps", type=at_least_one, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sealsync-bench"))
    parser.add_argument("--role", choices=["bench", "send", "receive"], default="bench")
    parser.add_argument("--into", type=Path, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", help=argparse.SUPPRESS)
    parser.add_argument("--listing", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--checks", action="store_true", help="also verify every format and log every file"
    )
    parser.add_argument(
        "--streams",
        type=at_least_one,
        default=1,
        help="files in flight on this many connections, a process each end (default 1)",
    )
    parser.add_argument(
        "--shared", action="store_true", help="one receiving process for every stream"
    )
    parser.add_argument(
        "--pin", action="store_true", help="the sending ends on CPU 0, the receiving ones on 1"
    )
    args = parser.parse_args()
    if args.role == "receive":
        signal.signal(signal.SIGINT, _on_interrupt)
        try:
            receive(args.into, args.warm)
        except KeyboardInterrupt:  # from the benchmark's process, stopping it (_stop)
            return 130
        except Exception as exc:  # one line: the benchmark's process says the rest
            print(f"receiving end: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.role == "send":
        try:
            send_part(int(args.port), args.listing)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:
            print(f"sending end: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        return 0

    compile_bytecode()
    return exit_status("bench_small_ceiling", lambda: measure(args))


def measure(args: argparse.Namespace) -> int:
    work = args.workdir.resolve()
    sources = templates(work / "templates", 64 * KiB, 25)
    root = Path(tempfile.mkdtemp(prefix="ceiling-", dir=work))
    rates, cpu = [], []
    try:
        names = populate(root / "edge", sources, args.files)
        files = [root / "edge" / name for name in names]
        for rep in range(args.reps + 1):  # the first warms up, unmeasured
            os.sync()
            transfer = run(
                files, root / f"dc-{rep}", args.checks, args.streams, args.shared, args.pin
            )
            if rep:
                rates.append(args.files / transfer.seconds)
                cpu.append(transfer.busy / args.files)
                print(
                    f"rep {rep}: {rates[-1]:,.0f} files/s, {cpu[-1] * 1e3:.2f} ms of CPU per "
                    f"file ({transfer.send_cpu / args.files * 1e3:.2f} sending, "
                    f"{transfer.receive_cpu / args.files * 1e3:.2f} receiving), "
                    f"{transfer.busy / transfer.seconds:.2f} of {os.cpu_count()} CPUs busy",
                    flush=True,
                )
    finally:  # a Ctrl-C or a failed check too
        shutil.rmtree(root, ignore_errors=True)
    per_file = statistics.median(cpu)
    print(
        f"{args.files} TsFiles of ~64 KiB (+ .resource){' with every check' * args.checks}"
        f"{f' on {args.streams} streams' * (args.streams > 1)}"
        f"{', one receiving process' * (args.shared and args.streams > 1)}, "
        f"{args.reps} reps: median {statistics.median(rates):,.0f} files/s (min "
        f"{min(rates):,.0f}, max {max(rates):,.0f}); {per_file * 1e3:.2f} ms of CPU per file, "
        f"so {os.cpu_count()} CPUs fully busy would carry {os.cpu_count() / per_file:,.0f} files/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
