"""The processes the sealsync-vs-rsync benchmarks run: OpenSSH's ``sshd`` for rsync, and a
sealsync receiver with its sender's config, each on a free loopback port with its own
keys, started and stopped by PID (shared setup in benchlib.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import (
    ROOT,
    SEALSYNC,
    SSHD,
    Run,
    descendants,
    free_port,
    log,
    pinned,
    set_aside,
    stop_pid,
    timed,
    tree_cpu,
    wait_port,
)

# --------------------------------------------------------------------------- OpenSSH + rsync


@dataclass
class OpenSsh:
    """Our own ``sshd`` on loopback with its own keys; ``rsync_cmd`` builds rsync calls."""

    root: Path
    cipher: str | None = None
    """The client's cipher; None is OpenSSH's own choice."""
    pin: int | None = None
    """The CPU ``sshd`` and every process it starts run on (:func:`benchlib.pinned`)."""
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OpenSsh:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        for name in ("host_ed25519", "client_ed25519"):
            key = self.root / name
            if not key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
                )
        shutil.copyfile(self.root / "client_ed25519.pub", self.root / "authorized_keys")
        os.chmod(self.root / "authorized_keys", 0o600)
        self.port = free_port()
        config = self.root / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\n"
            f"HostKey {self.root / 'host_ed25519'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
            "UsePAM no\nStrictModes no\nUseDNS no\nX11Forwarding no\n"
            "Subsystem sftp internal-sftp\n"
        )
        pub = (self.root / "host_ed25519.pub").read_text().split()
        (self.root / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation folder
        self.proc = subprocess.Popen(
            pinned([SSHD, "-D", "-f", str(config), "-E", str(self.root / "sshd.log")], self.pin),
            stdin=subprocess.DEVNULL,
        )
        wait_port(self.port, self.proc, "sshd")
        log(f"sshd (pid {self.proc.pid}) on 127.0.0.1:{self.port}")
        return self

    def stop(self) -> None:
        stop_pid(self.proc)
        self.proc = None

    def cpu(self) -> float:
        """CPU seconds ``sshd`` and the processes it started have used: the receiving
        end of rsync (each connection's ``sshd`` and the ``rsync`` it runs). Waits
        (up to 10 s) for the last connection's processes to end and be waited for,
        so that their CPU is counted in full."""
        assert self.proc is not None
        deadline = time.monotonic() + 10
        while descendants(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        return tree_cpu(self.proc.pid)

    def ssh_command(self, cipher: str | None = None) -> str:
        parts = [
            "ssh",
            "-p",
            str(self.port),
            "-i",
            str(self.root / "client_ed25519"),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.root / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "LogLevel=ERROR",
        ]
        chosen = cipher or self.cipher
        if chosen:
            parts += ["-c", chosen]
        return " ".join(parts)

    def rsync_cmd(self, src: Path, dst: Path, cipher: str | None = None) -> list[str]:
        """``rsync -a -e ssh`` of ``src`` into ``dst``; ``cipher`` overrides the default."""
        user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
        return [
            "rsync",
            "-a",
            "-e",
            self.ssh_command(cipher),
            f"{src}/",
            f"{user}@127.0.0.1:{dst}/",
        ]

    def __enter__(self) -> OpenSsh:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- sealsync


@dataclass
class Sealsync:
    """One receiver (``sealsync serve``) and one sender config, with their own keys."""

    root: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pin: tuple[int, int] | None = None
    """The CPUs of the sending and of the receiving end (:func:`benchlib.pinned`)."""
    sender_config: Path = field(init=False)
    edge_data: Path = field(init=False)
    edge_schema: Path = field(init=False)
    recv_data: Path = field(init=False)
    recv_schema: Path = field(init=False)

    def __post_init__(self) -> None:
        self.edge_data = self.root / "edge" / "data"
        self.edge_schema = self.root / "edge" / "schema"
        self.recv_data = self.root / "dc" / "data"
        self.recv_schema = self.root / "dc" / "schema"

    def setup(self) -> Sealsync:
        from sealsync.keys import generate_keypair

        keys = self.root / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        for d in (self.edge_data, self.edge_schema, self.recv_data, self.recv_schema):
            d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        if not (keys / "host").exists():
            generate_keypair(keys / "host", comment="bench-receiver")
        if not (keys / "edge").exists():
            generate_keypair(keys / "edge", comment="bench-edge")
        kind, b64 = (keys / "host.pub").read_text().split()[:2]
        (keys / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {kind} {b64}\n")
        shutil.copyfile(keys / "edge.pub", keys / "authorized_keys")
        self.sender_config = self.root / "sender.toml"
        self.sender_config.write_text(self.sender_toml(self.edge_data, self.edge_schema, "edge"))
        (self.root / "receiver.toml").write_text(
            f'[receiver]\nlisten = "127.0.0.1:{self.port}"\nhost_key = "{keys / "host"}"\n'
            f'authorized_keys = "{keys / "authorized_keys"}"\nallow = ["127.0.0.0/8"]\n'
            f'schema_dir = "{self.recv_schema}"\ndata_dirs = ["{self.recv_data}"]\n'
        )
        return self

    def sender_toml(self, data: Path, schema: Path, key: str) -> str:
        """A sender's config for this receiver: its data and schema dirs, and the name of
        its key in the keys folder."""
        keys = self.root / "keys"
        return (
            f'[sender]\nschema_dir = "{schema}"\ndata_dirs = ["{data}"]\n'
            f'identity = "{keys / key}"\nknown_hosts = "{keys / "known_hosts"}"\n\n'
            f'[[receiver]]\nname = "dc"\nhost = "127.0.0.1"\nport = {self.port}\n'
        )

    def start(self) -> None:
        log_file = open(self.root / "receiver.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(
            pinned(
                [*SEALSYNC, "serve", "--init", "--config", str(self.root / "receiver.toml")],
                self.pin[1] if self.pin else None,
            ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        log_file.close()
        wait_port(self.port, self.proc, "sealsync serve")
        log(f"sealsync serve (pid {self.proc.pid}) on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        stop_pid(self.proc)
        self.proc = None

    def cpu(self) -> float:
        """CPU seconds the receiver (its workers included) has used so far."""
        assert self.proc is not None
        return tree_cpu(self.proc.pid)

    def send_cmd(self) -> list[str]:
        return [*SEALSYNC, "-q", "send", "--config", str(self.sender_config)]

    def send(self, expect_files: int | None = None, poll_rss: bool = False) -> Run:
        """One ``sealsync send``; a round that did not ship (and load) every file is an error."""
        run = timed(
            [*SEALSYNC, "send", "--json", "--config", str(self.sender_config)],
            poll_rss=poll_rss,
            pin=self.pin[0] if self.pin else None,
            far=self.cpu if self.proc is not None else None,
        )
        doc = json.loads(run.stdout)
        receiver = doc["receivers"][0]
        if not doc["ok"] or not all(d["loaded"] or not d["shipped"] for d in receiver["dirs"]):
            raise RuntimeError(f"sealsync round not ok: {run.stdout[-3000:]}")
        if expect_files is not None and receiver["shipped_files"] != expect_files:
            raise RuntimeError(
                f"sealsync shipped {receiver['shipped_files']} files, expected {expect_files}"
            )
        return run

    def sender_state(self) -> Path:
        from sender.manage.layout import SenderPaths

        return SenderPaths(self.edge_data, "127.0.0.1", self.port).folder

    def forget_sent(self, trash: Path | None = None) -> None:
        """Make every sealed file new again: drop the sender's state and what the
        receiver loaded (the receiver keeps running, as a host server would).

        With ``trash``, the receiver's files are moved there instead of deleted: see
        :func:`set_aside`."""
        shutil.rmtree(self.edge_data / "sync-sender", ignore_errors=True)
        for root in ("sequence", "unsequence", "sync-receiver"):
            if trash is not None:
                set_aside(self.recv_data / root, trash)
            else:
                shutil.rmtree(self.recv_data / root, ignore_errors=True)

    def mark_synced(self, names: list[str]) -> None:
        """Write the state a finished round leaves: every name in ``last_local_files``."""
        from sender.manage.layout import SenderPaths
        from sender.manage.state import write_file_set

        paths = SenderPaths(self.edge_data, "127.0.0.1", self.port)
        paths.folder.mkdir(parents=True, exist_ok=True)
        write_file_set(paths.last_local_files, names)

    def loaded_count(self) -> int:
        return sum(1 for _ in (self.recv_data / "sequence").rglob("*.tsfile"))

    def __enter__(self) -> Sealsync:
        self.setup()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
