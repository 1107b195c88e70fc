"""``sealsync serve`` as a server process: one per storage, no silent folders, its logs,
its signals, ``/metrics`` and ``status`` — each against a real ``serve`` process and,
where a round matters, a real ``sealsync send`` over loopback SSH."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, free_port, make_deployment, populate
from prometheus_client.parser import text_string_to_metric_families
from receiver_service_helpers import Client

from receiver.lock import ReceiverLocked
from receiver.service import ReceiverService
from sealsync.config import load_receiver_config
from sealsync.errors import EXIT_LOCKED, EXIT_USAGE
from sealsync.protocol import Chunk, FileBegin, RoundReady, Welcome

pytestmark = pytest.mark.slow

ISO_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d sealsync (DEBUG|INFO|WARNING|ERROR): "
)


class Server:
    """One ``sealsync serve`` process in its own process group, stderr kept in a file."""

    def __init__(self, dep: Deployment, *args: str, config: Path | None = None) -> None:
        self.dep = dep
        self.stderr_path = dep.root / f"serve-{time.monotonic_ns()}.err"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*SEALSYNC, "serve", "--config", str(config or dep.receiver_config), *args],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a group, as a terminal or systemd has
            )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in: {self.stderr}")
            time.sleep(0.05)

    def signal_group(self, sig: int) -> int:
        """``sig`` to the whole group, as Ctrl-C or ``systemctl stop``; the exit code."""
        os.killpg(self.proc.pid, sig)
        return self.proc.wait(30)

    def group_gone(self, timeout: float = 10) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    return make_deployment(tmp_path / "site", senders=2)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def _start(servers: list[Server], dep: Deployment, *args: str, **kw: Path) -> Server:
    server = Server(dep, *args, **kw)
    servers.append(server)
    return server


def _config(dep: Deployment, name: str, **changes: str) -> Path:
    """The deployment's receiver config with keys replaced or added (TOML values)."""
    lines = dep.receiver_config.read_text().splitlines()
    out = [ln for ln in lines if ln.split(" = ")[0] not in changes]
    out += [f"{key} = {value}" for key, value in changes.items()]
    path = dep.root / name
    path.write_text("\n".join(out) + "\n")
    return path


def _serve_until_it_exits(config: Path) -> subprocess.CompletedProcess[str]:
    """``sealsync serve`` with a config it must refuse: it exits on its own."""
    return subprocess.run(
        [*SEALSYNC, "serve", "--config", str(config)], capture_output=True, text=True, timeout=60
    )


# ---------------------------------------------------------------- one receiver per storage


def test_a_second_receiver_on_the_same_storage_exits_75_naming_the_pid(
    dep: Deployment, servers: list[Server]
) -> None:
    first = _start(servers, dep)
    first.wait_for("listening on")
    # same folders, another port: the listen address is not what protects the storage
    other_port = _config(dep, "other.toml", listen=f'"127.0.0.1:{free_port()}"')
    second = _serve_until_it_exits(other_port)
    assert second.returncode == EXIT_LOCKED
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    assert f"another receiver (pid {first.proc.pid}) serves this storage" in second.stderr
    assert str(dep.receiver_schema / "sync" / "receiver.lock") in second.stderr

    # sharing only a data dir is as wrong: its lock is held too
    elsewhere = dep.root / "schema2"
    elsewhere.mkdir()
    shared = _config(
        dep, "shared.toml", listen=f'"127.0.0.1:{free_port()}"', schema_dir=f'"{elsewhere}"'
    )
    result = _serve_until_it_exits(shared)  # refused before any lock: not its storage
    assert result.returncode == EXIT_USAGE and result.stderr.count("\n") == 1
    assert f"{elsewhere} is not a sealsync storage" in result.stderr

    # the plugin in a host process takes the same lock
    service = ReceiverService(load_receiver_config(shared))
    with pytest.raises(ReceiverLocked, match=rf"pid {first.proc.pid}\b"):
        service.start()
    assert (dep.receiver_schema / "sync" / "receiver.lock").read_text() == f"{first.proc.pid}\n"

    # a receiver killed -9 leaves no stale lock: the next one starts
    first.proc.kill()
    first.proc.wait(10)
    again = _start(servers, dep)
    again.wait_for("listening on")


# ---------------------------------------------------------------- no silent folders


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        (
            "127.0.0.1",  # the port is taken below
            "address already in use (another program, or another receiver, listens there): "
            "stop it, or change [receiver] listen",
        ),
        # TEST-NET-1 is on no interface here: bind refuses it, no packet is sent
        ("192.0.2.1", "no interface of this host has that address: fix [receiver] listen"),
    ],
)
def test_a_listen_address_it_cannot_take_is_one_line_with_the_fix(
    dep: Deployment, host: str, reason: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = _config(dep, "taken.toml", listen=f'"{host}:{port}"')
        result = _serve_until_it_exits(config)
    assert result.returncode == 1
    assert (
        result.stderr.splitlines()[-1]
        == f"sealsync: error: cannot listen on {host}:{port}: {reason}"
    )
    assert "Traceback" not in result.stderr


def test_serve_never_creates_a_missing_folder_unless_init(
    dep: Deployment, servers: list[Server]
) -> None:
    typo = dep.root / "dc" / "dta"
    config = _config(dep, "typo.toml", data_dirs=f'["{typo}"]')
    result = _serve_until_it_exits(config)
    assert result.returncode == EXIT_USAGE
    assert result.stderr == (
        f"sealsync: error: {config}: [receiver] data_dirs[0]: {typo} does not exist: "
        "create it with `sealsync serve --init` or mkdir\n"
    )
    assert not typo.exists()

    server = _start(servers, dep, "--init", config=config)
    server.wait_for("listening on")
    assert typo.is_dir()
    lines = server.stderr.splitlines()
    assert any(f"creating {typo} (data_dirs[0])" in ln for ln in lines), lines
    assert server.signal_group(signal.SIGTERM) == 0
    # once made, a plain serve starts on it
    plain = _start(servers, dep, config=config)
    plain.wait_for("listening on")


# ---------------------------------------------------------------- logs and signals


def test_server_log_lines_rounds_and_quiet_connection_noise(
    dep: Deployment, servers: list[Server]
) -> None:
    log_file = dep.root / "logs" / "receiver.log"
    log_file.parent.mkdir()
    config = _config(dep, "logged.toml", log_file=f'"{log_file}"')
    server = _start(servers, dep, config=config)
    server.wait_for("listening on")
    # a port probe and a connection that never sends a banner: paramiko's noise
    import socket

    socket.create_connection(("127.0.0.1", dep.port)).close()
    with socket.create_connection(("127.0.0.1", dep.port)) as probe:
        probe.sendall(b"GET / HTTP/1.0\r\n\r\n")
        probe.settimeout(10)
        while probe.recv(4096):
            pass
    edge = dep.senders[0]
    names = populate(edge.edge, groups=2, files=2)
    assert edge.send().returncode == 0
    edge.edge.delete(names[0])
    assert edge.send().returncode == 0
    assert server.signal_group(signal.SIGTERM) == 0

    lines = server.stderr.splitlines()
    assert all(ISO_LINE.match(ln) for ln in lines), lines
    assert [ln for ln in lines if "listening on" in ln] == [
        next(ln for ln in lines if ln.endswith(f"INFO: receiver listening on 127.0.0.1:{dep.port}"))
    ]
    # how received files are made durable, as `sealsync check` says it too
    assert [ln for ln in lines if "sync_method" in ln][0].endswith(
        "INFO: sync_method syncfs: each batch of received files takes one syncfs of its file system"
    )
    rounds = [ln for ln in lines if ": round done in " in ln]
    assert len(rounds) == 2, lines
    assert (
        f"INFO: sender {edge.uuid} at 127.0.0.1: round done in {dep.receiver_data}: " in (rounds[0])
    )
    assert f": {len(names)} files received (" in rounds[0]
    assert "), 0 deleted, 0 refused, " in rounds[0] and rounds[0].endswith(" s")
    assert ": 0 files received (0 B), 1 deleted, 0 refused, " in rounds[1]
    noise = ("Socket exception", "SSH protocol banner", "Traceback", "paramiko", "Connected")
    assert not [ln for ln in lines if any(n in ln for n in noise)], lines
    # log_file holds the same lines
    assert log_file.read_text().splitlines() == lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_workers_and_sessions_without_a_traceback(
    dep: Deployment, servers: list[Server], sig: int
) -> None:
    server = _start(servers, dep)
    server.wait_for("listening on")
    key = dep.root / "keys" / dep.senders[0].name
    with Client(("127.0.0.1", dep.port), key) as client:
        assert isinstance(client.hello(dep.senders[0].uuid), Welcome)
        ready = client.round_start()
        assert isinstance(ready, RoundReady) and ready.status == "ready"
        client.send(FileBegin(0, "sequence/root.sg/0/0/1-1-0-0.tsfile", 100_000, 10, -1))
        client.send(Chunk(b"x" * 4096))  # a file half sent: a session mid-round
        time.sleep(0.5)
        assert server.signal_group(sig) == 0
    err = server.stderr
    assert "Traceback" not in err, err
    assert f"received {signal.Signals(sig).name}, stopping" in err
    assert "receiver stopped" in err.splitlines()[-1]
    assert server.group_gone(), "worker processes outlived the receiver"


# ---------------------------------------------------------------- /metrics


def _scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of ``/metrics``, by sample name then sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_count_a_real_round(dep: Deployment, servers: list[Server]) -> None:
    metrics_port = free_port()
    config = _config(dep, "metrics.toml", metrics_listen=f'"127.0.0.1:{metrics_port}"')
    server = _start(servers, dep, config=config)
    server.wait_for("listening on")
    assert f"INFO: metrics on http://127.0.0.1:{metrics_port}/metrics" in server.stderr

    before = _scrape(metrics_port)
    assert before["sealsync_receiver_files_received_total"][()] == 0
    assert before["sealsync_receiver_sessions_open"][()] == 0

    edge, stranger = dep.senders
    names = populate(edge.edge, groups=2, files=2)
    data = edge.edge.data_dirs[0]
    stream_bytes = sum(  # what a file stream carries: the data file and its sidecars
        p.stat().st_size
        for name in names
        for p in (data / name, data / f"{name}.resource", data / f"{name}.mods")
        if p.exists()
    )
    assert edge.send().returncode == 0
    edge.edge.delete(names[0])
    assert edge.send().returncode == 0
    # a sender whose key the receiver no longer accepts
    authorized = dep.root / "keys" / "authorized_keys"
    authorized.write_text(authorized.read_text().splitlines()[0] + "\n")
    populate(stranger.edge, groups=1, files=1, prefix="root.x")
    assert stranger.send().returncode != 0

    m = _scrape(metrics_port)
    assert m["sealsync_receiver_files_received_total"][()] == len(names)
    assert m["sealsync_receiver_bytes_received_total"][()] == stream_bytes
    assert m["sealsync_receiver_files_deleted_total"][()] == 1
    verdicts = m["sealsync_receiver_verdicts_total"]
    assert verdicts[(("verdict", "verified"),)] == len(names)
    assert sum(verdicts.values()) == len(names)
    assert m["sealsync_receiver_rounds_total"][(("outcome", "done"),)] == 2
    assert m["sealsync_receiver_rounds_total"][(("outcome", "abandoned"),)] == 0
    assert m["sealsync_receiver_sessions_total"][()] == 2
    assert m["sealsync_receiver_sessions_open"][()] == 0
    refusals = m["sealsync_receiver_refusals_total"]
    assert refusals[(("reason", "key"),)] >= 1
    assert refusals[(("reason", "allow_list"),)] == 0
    assert m["sealsync_receiver_inspect_workers_alive"][()] == 2
    assert m["sealsync_receiver_inspect_checks_in_flight"][()] == 0
    free = m["sealsync_receiver_disk_free_bytes"]
    st = os.statvfs(dep.receiver_data)
    now = st.f_bavail * st.f_frsize
    assert abs(free[(("path", "data_dirs[0]"), ("role", "data"))] - now) < 64 << 20
    assert (("path", "schema_dir"), ("role", "schema")) in free  # keys, not paths
    assert m["process_start_time_seconds"][()] > 0

    assert server.signal_group(signal.SIGTERM) == 0
    with pytest.raises(OSError):  # the endpoint stops with the service
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)


# ---------------------------------------------------------------- status


def test_status_says_whether_a_receiver_runs_on_the_storage(
    dep: Deployment, servers: list[Server]
) -> None:
    def status(*args: str) -> str:
        result = subprocess.run(
            [*SEALSYNC, "status", "--config", str(dep.receiver_config), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    listen = f"127.0.0.1:{dep.port}"
    assert status().splitlines()[0] == f"receiver not running (configured to listen on {listen})"
    server = _start(servers, dep)
    server.wait_for("listening on")
    pid = server.proc.pid
    assert status().splitlines()[0] == f"receiver running (pid {pid}), listening on {listen}"
    doc = json.loads(status("--json"))
    assert (doc["running"], doc["pid"]) == (True, pid)
    assert server.signal_group(signal.SIGTERM) == 0
    assert status().splitlines()[0].startswith("receiver not running")
    assert json.loads(status("--json"))["pid"] is None


def _open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open files line")


@pytest.mark.parametrize("enough", [True, False])
def test_serve_raises_its_open_files_limit_or_says_why_it_cannot(
    dep: Deployment, servers: list[Server], enough: bool
) -> None:
    # Waiting streams keep their temporaries open, thousands across max_sessions senders:
    # a soft limit of 256 is raised to the hard one, and a hard one too low is named.
    import resource

    from receiver.openfiles import needed

    ours = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # a child may not go above it
    hard = min(ours, 4 * needed(16)) if enough else 512

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    err_path = dep.root / f"serve-limit-{enough}.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [*SEALSYNC, "serve", "--config", str(dep.receiver_config)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=low_limit,
        )
    try:
        deadline = time.monotonic() + 30
        while "listening" not in err_path.read_text():
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.05)
        assert _open_files_limit(proc.pid) == (hard, hard)
        log = err_path.read_text()
        assert f"open files limit raised from 256 to {hard}" in log
        want = needed(16)
        assert hard >= want or (
            f"open files limit {hard} is below the {want} that max_sessions = 16" in log
        )
        assert hard < want or "is below the" not in log
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
