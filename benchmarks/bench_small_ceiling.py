"""Benchmark: the least work that moves small files durably over paramiko.

Issue 17 asks sealsync to move small files at 1.5x ``rsync -a --fsync``. This script
measures what the least possible version of that work reaches here, with the same
parts sealsync must use: two Python processes, one paramiko SSH connection between
them (aes128-gcm, the cipher sealsync prefers), MD5 of every file on both ends, and
on the receiver every data file and its ``X.resource`` written, fsynced (eight
threads, as the receiver's commit pipeline issues them), renamed into place, and the
folder fsynced, before the file is acknowledged: files are committed in batches of 32
(sooner when no more bytes are waiting), on a thread of their own while the next
ones arrive.

It leaves out everything else sealsync does for a file: no protocol beyond a length
header, no format check, no ownership claims, no ``sync.log``/``load.log``, no load
into storage, no snapshot, no retries, no per-file verdict. What it reaches says how
far these parts themselves allow a receiver to go on this machine; the distance from
there to sealsync's files/s (``bench_vs_rsync.py small`` runs both in one rotation)
is sealsync's own per-file work.

    .venv/bin/python benchmarks/bench_small_ceiling.py [--files 5000] [--reps 3]

The receiver runs as a child process of this script (``--role receive``) and the
files are real TsFiles of about 64 KiB, the same as ``bench_vs_rsync.py small``.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
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

import paramiko

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import CIPHER, KiB, compile_bytecode, populate, templates  # noqa: E402

from receiver import chunk_pipe  # noqa: E402
from sealsync import durable  # noqa: E402
from sealsync.protocol import (  # noqa: E402
    SSH_MAX_PACKET_SIZE,
    SSH_WINDOW_SIZE,
    ConnectionClosed,
    recv_exact,
)

HEADER = struct.Struct(">HII")  # name length, data length, resource length
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
    transport = paramiko.Transport(
        sock, default_window_size=SSH_WINDOW_SIZE, default_max_packet_size=SSH_MAX_PACKET_SIZE
    )
    transport.get_security_options().ciphers = (CIPHER,)
    return transport


def receive(folder: Path) -> None:
    """The receiving end: one connection, then one batch acknowledged at a time."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    sock, _ = listener.accept()
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

    def commit() -> None:
        while (batch := batches.get()) is not None:
            list(pool.map(os.fsync, [fd for _, fds, _ in batch for fd in fds]))
            for name, fds, _ in batch:
                for fd in fds:
                    os.close(fd)
                os.rename(staging / f"{name}.resource", final / f"{name}.resource")
                os.rename(staging / name, final / name)
            durable.fsync_dir(final)
            channel.sendall(b"".join(bytes.fromhex(digest) for _, _, digest in batch))

    committer = threading.Thread(target=commit)
    committer.start()
    batch: list[tuple[str, list[int], str]] = []
    while True:
        try:
            head = recv_exact(channel, HEADER.size)
        except ConnectionClosed:
            break
        name_len, data_len, res_len = HEADER.unpack(head)
        body = recv_exact(channel, name_len + data_len + res_len)
        name = body[:name_len].decode()
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
    try:  # every file is acknowledged: the sender may have closed first
        channel.close()
    except (EOFError, OSError, paramiko.SSHException):
        pass
    transport.close()


def send(port: int, files: list[Path]) -> float:
    """Seconds from the first byte sent to the last acknowledgement. The connection's
    set-up is left out, and so is a process start-up: both are in sealsync's and
    rsync's times, so this errs towards a higher bound."""
    transport = _transport(socket.create_connection(("127.0.0.1", port)))
    transport.connect()
    transport.auth_none("bench")
    channel = transport.open_session()
    channel.invoke_shell()
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
    started = time.perf_counter()
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
    took = time.perf_counter() - started
    channel.close()
    transport.close()
    if mismatches or acknowledged < len(files):
        raise RuntimeError(
            f"{len(files) - acknowledged} files not acknowledged, {mismatches} with another MD5"
        )
    return took


def run(files: list[Path], into: Path) -> float:
    """One transfer of ``files`` into the new folder ``into``: seconds, checked."""
    into.mkdir()
    receiver = subprocess.Popen(
        [sys.executable, __file__, "--role", "receive", "--into", str(into)],
        stdout=subprocess.PIPE,
    )
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        took = send(port, files)
        if receiver.wait(60) != 0:
            raise RuntimeError("the receiving end failed")
    finally:
        if receiver.poll() is None:
            receiver.kill()
    landed = sum(1 for p in (into / "final").iterdir() if p.suffix != ".resource")
    if landed != len(files):
        raise RuntimeError(f"{landed} files landed, expected {len(files)}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sealsync-bench"))
    parser.add_argument("--role", choices=["send", "receive"], default="send")
    parser.add_argument("--into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "receive":
        try:
            receive(args.into)
        except KeyboardInterrupt:  # the terminal's Ctrl-C reaches both ends
            return 130
        return 0

    compile_bytecode()
    work = args.workdir.resolve()
    sources = templates(work / "templates", 64 * KiB, 25)
    root = Path(tempfile.mkdtemp(prefix="ceiling-", dir=work))
    rates = []
    try:
        names = populate(root / "edge", sources, args.files)
        files = [root / "edge" / name for name in names]
        for rep in range(args.reps + 1):  # the first warms up, unmeasured
            os.sync()
            took = run(files, root / f"dc-{rep}")
            if rep:
                rates.append(args.files / took)
                print(f"rep {rep}: {args.files / took:,.0f} files/s", flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.files} TsFiles of ~64 KiB (+ .resource), {args.reps} reps: median "
        f"{statistics.median(rates):,.0f} files/s (min {min(rates):,.0f}, max {max(rates):,.0f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
