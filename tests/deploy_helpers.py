"""A real deployment on this machine for process-level tests.

Keys, trust files and TOML configs for one receiver and any number of senders, and
``sealsync serve`` / ``sealsync send`` run as real processes, exactly as an operator
runs them. Crash, fault and CLI end-to-end tests build on this.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sealsync.keys import generate_keypair
from sealsync.permissions import restrict_writes
from sealsync.simulator import EdgeInstance
from sender.manage.identity import sender_uuid

SEALSYNC = [sys.executable, "-m", "sealsync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Sender:
    name: str
    edge: EdgeInstance
    config: Path

    @property
    def uuid(self) -> str:
        import uuid

        return str(uuid.UUID(sender_uuid(self.edge.schema_dir)))

    def send(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*SEALSYNC, "send", "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def send_json(self) -> dict:
        result = self.send("--json")
        assert result.stdout, result.stderr
        return json.loads(result.stdout)

    def sealed_hashes(self) -> dict[str, str]:
        """Relative name -> content hash of every sealed file, over all data dirs."""
        out = {}
        for i, data_dir in enumerate(self.edge.data_dirs):
            for rel in self.edge.sealed_files(i):
                out[rel] = sha256(data_dir / rel)
        return out


@dataclass
class Deployment:
    root: Path
    port: int
    receiver_config: Path
    receiver_data: Path
    receiver_schema: Path
    senders: list[Sender] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    # -------------------------------------------------------------- receiver process

    def start_receiver(
        self, env: dict[str, str] | None = None, wait: bool = True, args: tuple[str, ...] = ()
    ) -> None:
        log = open(self.root / "receiver.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [*SEALSYNC, "serve", "--config", str(self.receiver_config), *args],  # logs at INFO
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        log.close()
        if wait:
            self.wait_listening()

    def wait_listening(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"receiver exited {self.proc.returncode}: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"receiver not listening: {self.log()}")

    def stop_receiver(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def log(self) -> str:
        path = self.root / "receiver.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # -------------------------------------------------------------- what the receiver holds

    def loaded_hashes(self, sender: Sender) -> dict[str, str]:
        """Relative name -> content hash of every file the receiver loaded from ``sender``."""
        from receiver.storage import DirectoryStorage

        storage = DirectoryStorage([self.receiver_data])
        return {
            name: sha256(storage.target(self.receiver_data, sender.uuid, name))
            for name in storage.list(sender.uuid)
        }

    def round_state_left(self) -> list[str]:
        """Round files a finished round must not leave behind, on both sides."""
        left = []
        staging = self.receiver_data / "sync-receiver"
        if staging.exists():
            for folder in staging.iterdir():
                for name in ("sync.log", "load.log", "sync.end"):
                    if (folder / name).exists():
                        left.append(str(folder / name))
                data = folder / "data"
                if data.exists() and any(p.is_file() for p in data.rglob("*")):
                    left.append(str(data))
        for s in self.senders:
            for d in s.edge.data_dirs:
                for folder in (d / "sync-sender").glob("*"):
                    for name in ("sync.log", "current_local_files.txt", "snapshot"):
                        if (folder / name).exists():
                            left.append(str(folder / name))
        return left


def make_deployment(root: Path, senders: int = 1, data_dirs: int = 1) -> Deployment:
    """Keys, trust files and configs for one receiver and ``senders`` edge instances."""
    root.mkdir(parents=True, exist_ok=True)
    keys = root / "keys"
    keys.mkdir(mode=0o755, exist_ok=True)  # a keys folder others may write is refused
    port = free_port()
    host_pub = generate_keypair(keys / "host", comment="receiver")
    known = keys / "known_hosts"
    kind, b64 = host_pub.split()[:2]
    known.write_text(f"[127.0.0.1]:{port} {kind} {b64}\n")
    restrict_writes(known)  # trust files and configs others can write are refused
    authorized = []
    dep_senders = []
    for i in range(senders):
        name = f"edge{i}"
        authorized.append(generate_keypair(keys / name, comment=name))
        edge = EdgeInstance(root / name, data_dirs=data_dirs)
        data = ", ".join(f'"{d}"' for d in edge.data_dirs)
        config = root / f"{name}.toml"
        config.write_text(
            f'[sender]\nschema_dir = "{edge.schema_dir}"\ndata_dirs = [{data}]\n'
            f'identity = "{keys / name}"\nknown_hosts = "{known}"\nmax_retries = 3\n\n'
            f'[[receiver]]\nname = "dc"\nhost = "127.0.0.1"\nport = {port}\n'
        )
        restrict_writes(config)
        dep_senders.append(Sender(name, edge, config))
    (keys / "authorized_keys").write_text("".join(a + "\n" for a in authorized))
    restrict_writes(keys / "authorized_keys")
    receiver_data, receiver_schema = root / "dc" / "data", root / "dc" / "schema"
    receiver_data.mkdir(parents=True, exist_ok=True)
    receiver_schema.mkdir(parents=True, exist_ok=True)
    receiver_config = root / "receiver.toml"
    receiver_config.write_text(
        f'[receiver]\nlisten = "127.0.0.1:{port}"\nhost_key = "{keys / "host"}"\n'
        f'authorized_keys = "{keys / "authorized_keys"}"\nallow = ["127.0.0.0/8"]\n'
        f'schema_dir = "{receiver_schema}"\ndata_dirs = ["{receiver_data}"]\n'
    )
    restrict_writes(receiver_config)
    mark_storage(receiver_config)
    return Deployment(root, port, receiver_config, receiver_data, receiver_schema, dep_senders)


def mark_storage(receiver_config: Path) -> None:
    """What ``sealsync serve --init`` writes: the storage markers and the record of the
    storage outside it (receiver.identity); folders set up anew where a recorded
    storage was (a new disk on purpose) as ``--replaces`` says."""
    from receiver.identity import read_record, require_storage
    from sealsync.config import load_receiver_config
    from sealsync.errors import ConfigError

    config = load_receiver_config(receiver_config)
    try:
        require_storage(config, init=True)
    except ConfigError:
        record = read_record(config)
        if record is None:
            raise
        require_storage(config, init=True, replaces=record.storage)


def populate(
    edge: EdgeInstance,
    groups: int = 3,
    files: int = 4,
    devices: int = 2,
    rows: int = 50,
    prefix: str = "root.sg",
    unsequence: int = 1,
    data_dir: int = 0,
) -> list[str]:
    """A few groups of small sealed TsFiles, sequence and unsequence; returns their names."""
    names = []
    for g in range(groups):
        group = f"{prefix}{g}"
        devs = [f"{group}.d{d}" for d in range(devices)]
        for f in range(files):
            names.append(
                edge.write_file(
                    group,
                    0,
                    devices=devs,
                    rows_per_device=rows,
                    start_ms=(g * 100 + f) * 1_000_000,
                    data_dir=data_dir,
                )
            )
        for f in range(unsequence):
            names.append(
                edge.write_file(
                    group,
                    0,
                    devices=devs,
                    rows_per_device=rows,
                    start_ms=f * 1_000,
                    unsequence=True,
                    data_dir=data_dir,
                )
            )
    return names


def tree(root: Path) -> dict[str, tuple[bool, int, int, int]]:
    """Every path under ``root`` with its kind, mode, size and mtime: what "nothing
    changed" compares (the receiver's own log excepted)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.name == "receiver.log":
                continue
            st = path.lstat()
            out[str(path.relative_to(root))] = (
                path.is_dir(),
                st.st_mode,
                0 if path.is_dir() else st.st_size,
                st.st_mtime_ns,
            )
    return out


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env
