"""Edges per receiver core: one ``sealsync serve`` on one CPU, edges at a 5-minute interval.

    .venv/bin/python benchmarks/bench_fleet.py                  # as root: network namespaces
    .venv/bin/python benchmarks/bench_fleet.py --edges 400 --namespaces 16 --rounds 800

Set-up (not measured): ``--namespaces`` network namespaces (``ip netns``), each joined
to the root namespace by a veth pair on a bridge and holding an address of its own,
so that the receiver's limits per source address (``per_source_max_startups``) see
a fleet's many addresses rather than one; ``--edges`` edges spread over them, each a
sender of its own (its key, UUID, data dir of sealed TsFiles of its own device),
bound and synced by a first round. One driver process per namespace runs its edges'
rounds, each the whole ``sealsync send`` of that edge (in the driver's interpreter:
a cron run's interpreter start is the edge's cost, not the receiver's).

Measured: ``--rounds`` rounds of edges drawn at random, ``--concurrency`` at a time,
the drivers on CPU 0 and the receiver on CPU 1, its one core: rounds with nothing new
(idle) and, in the fleet's proportion ``--ship`` (1 %), rounds that ship one new
1 MiB TsFile. The receiver's CPU over them (its process tree, ``/proc``) per round
gives the edges one receiver core carries at ``--interval``:

    edges per receiver core = interval / receiver CPU per round (the mix)

with the idle and the shipping rounds' shares apart, the receiver core's busy share
while driven (below 1: the drivers, not the receiver, set the driven rate) and the
rounds' times. The receiver's files and the namespaces are removed at the end, by
name, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (  # noqa: E402
    RECEIVE_CPU,
    ROOT,
    SEALSYNC,
    SEND_CPU,
    KiB,
    MiB,
    at_least_one,
    compile_bytecode,
    exit_status,
    free_port,
    log,
    median,
    pinned,
    stop_pid,
    templates,
    tree_cpu,
)

PREFIX = f"sf{os.getpid() % 10000}"
"""Names of the namespaces (``sf<pid>n<i>``), veth ends and bridge this run makes: its
own, so that two runs at once (two test runs) never take each other's down."""
BRIDGE = f"{PREFIX}br"
NET = f"10.{200 + os.getpid() % 50}"
"""The run's /16: the receiver on .0.1, the namespaces after it."""
RECEIVER_IP = f"{NET}.0.1"
FILES_PER_EDGE = 3
SMALL = 16 * KiB


def namespace(i: int) -> str:
    return f"{PREFIX}n{i}"


def address(i: int) -> str:
    """Namespace ``i``'s address on the bridge (``.0.1`` is the receiver's)."""
    return f"{NET}.{1 + i // 250}.{2 + i % 250}"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def make_network(count: int) -> None:
    """A bridge holding the receiver's address, and ``count`` namespaces on it."""
    remove_network(count)
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{RECEIVER_IP}/16", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    for i in range(count):
        ns, outside, inside = namespace(i), f"{PREFIX}o{i}", f"{PREFIX}i{i}"
        ip("netns", "add", ns)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", ns)
        ip("link", "set", outside, "master", BRIDGE, "up")
        ip("-n", ns, "addr", "add", f"{address(i)}/16", "dev", inside)
        ip("-n", ns, "link", "set", inside, "up")
        ip("-n", ns, "link", "set", "lo", "up")


def remove_network(count: int) -> None:
    """Remove this benchmark's namespaces (their veth pairs go with them) and bridge."""
    for i in range(count):
        subprocess.run(["ip", "netns", "delete", namespace(i)], capture_output=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)


@dataclass
class Edge:
    index: int
    folder: Path
    device: str

    @property
    def config(self) -> Path:
        return self.folder / "sender.toml"

    @property
    def data(self) -> Path:
        return self.folder / "data"


class Fleet:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir).resolve() / "fleet"
        self.cache = Path(args.workdir).resolve() / "templates"
        self.port = free_port()
        self.edges: list[Edge] = []
        self.receiver: subprocess.Popen[bytes] | None = None
        self.drivers: list[subprocess.Popen[str]] = []
        self.shipped = 0

    # ------------------------------------------------------------------ set-up

    def setup(self) -> None:
        from sealsync.keys import generate_keypair

        shutil.rmtree(self.work, ignore_errors=True)
        keys = self.work / "keys"
        keys.mkdir(parents=True)
        generate_keypair(keys / "host", comment="fleet-receiver")
        kind, b64 = (keys / "host.pub").read_text().split()[:2]
        (keys / "known_hosts").write_text(f"[{RECEIVER_IP}]:{self.port} {kind} {b64}\n")
        log(f"fleet: {self.args.edges} edges, their keys and sealed files")
        authorized = []
        for i in range(self.args.edges):
            edge = Edge(i, self.work / f"edge{i}", f"root.fleet.e{i}")
            generate_keypair(edge.folder / "key", comment=f"edge{i}")
            authorized.append((edge.folder / "key.pub").read_text().strip())
            (edge.folder / "schema").mkdir()
            self.add_files(edge, SMALL, FILES_PER_EDGE)
            edge.config.write_text(
                f'[sender]\nschema_dir = "{edge.folder / "schema"}"\n'
                f'data_dirs = ["{edge.data}"]\nidentity = "{edge.folder / "key"}"\n'
                f'known_hosts = "{keys / "known_hosts"}"\n\n'
                f'[[receiver]]\nname = "dc"\nhost = "{RECEIVER_IP}"\nport = {self.port}\n'
            )
            self.edges.append(edge)
        (keys / "authorized_keys").write_text("\n".join(authorized) + "\n")
        dc = self.work / "dc"
        for sub in ("data", "schema"):
            (dc / sub).mkdir(parents=True)
        (self.work / "receiver.toml").write_text(
            f'[receiver]\nlisten = "{RECEIVER_IP}:{self.port}"\nhost_key = "{keys / "host"}"\n'
            f'authorized_keys = "{keys / "authorized_keys"}"\nallow = ["{NET}.0.0/16"]\n'
            f'schema_dir = "{dc / "schema"}"\ndata_dirs = ["{dc / "data"}"]\n'
            f"max_sessions = {max(16, 2 * self.args.concurrency)}\n"
        )

    def add_files(self, edge: Edge, size: int, count: int) -> None:
        """``count`` new sealed TsFiles of ``size`` bytes of the edge's own device (each
        sender owns its devices: another's would be a conflict, not a load)."""
        sources = templates(self.cache, size, 1, device=edge.device)
        folder = edge.data / "sequence" / "root.fleet" / "0"
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(count):
            self.shipped += 1
            name = folder / f"{1_700_000_000_000 + self.shipped}-{self.shipped}-0.tsfile"
            os.link(sources[0], name)
            Path(f"{name}.resource").write_text("sealed by the fleet benchmark\n")

    def start(self) -> None:
        log_file = open(self.work / "receiver.log", "ab")  # noqa: SIM115 - the process keeps it
        self.receiver = subprocess.Popen(
            pinned(
                [*SEALSYNC, "serve", "--init", "--config", str(self.work / "receiver.toml")],
                RECEIVE_CPU,
            ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
        log_file.close()
        deadline = time.monotonic() + 60
        while not (self.work / "dc" / "data").exists() or not _listening(self.port):
            if self.receiver.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sealsync serve did not start: see {self.work}/receiver.log")
            time.sleep(0.1)
        for i in range(self.args.namespaces):
            driver = subprocess.Popen(
                pinned(
                    [
                        "ip",
                        "netns",
                        "exec",
                        namespace(i),
                        sys.executable,
                        __file__,
                        "--role",
                        "driver",
                    ],
                    SEND_CPU,
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            self.drivers.append(driver)

    def stop(self) -> None:
        for driver in self.drivers:
            if driver.stdin is not None and driver.poll() is None:
                driver.stdin.close()
        for driver in self.drivers:
            try:
                driver.wait(30)
            except subprocess.TimeoutExpired:
                driver.kill()
                driver.wait()
        self.drivers = []
        stop_pid(self.receiver)
        self.receiver = None

    # ------------------------------------------------------------------ rounds

    def run_rounds(self, rounds: list[tuple[Edge, bool]]) -> list[float]:
        """Each (edge, ships) round, at most ``--concurrency`` at a time and one per
        namespace; the seconds of each. A round that fails stops the benchmark."""
        free = set(range(len(self.drivers)))
        busy: dict[int, tuple[float, Edge]] = {}
        waiting = list(rounds)
        seconds: list[float] = []
        while waiting or busy:
            while len(busy) < self.args.concurrency:
                pick = next((k for k, (e, _) in enumerate(waiting) if self.home(e) in free), None)
                if pick is None:
                    break
                edge, ships = waiting.pop(pick)
                if ships:
                    self.add_files(edge, MiB, 1)
                slot = self.home(edge)
                free.discard(slot)
                stdin = self.drivers[slot].stdin
                assert stdin is not None
                stdin.write(f"{edge.config}\n")
                stdin.flush()
                busy[slot] = (time.monotonic(), edge)
            slot = self.answered(list(busy))
            started, edge = busy.pop(slot)
            free.add(slot)
            seconds.append(time.monotonic() - started)
        return seconds

    def home(self, edge: Edge) -> int:
        return edge.index % len(self.drivers)

    def answered(self, slots: list[int]) -> int:
        """The first of ``slots`` whose driver reports its round; a failed one raises."""
        import selectors

        with selectors.DefaultSelector() as sel:
            for slot in slots:
                stdout = self.drivers[slot].stdout
                assert stdout is not None
                sel.register(stdout, selectors.EVENT_READ, slot)
            key, _ = sel.select()[0]
            slot = int(key.data)
        stdout = self.drivers[slot].stdout
        assert stdout is not None
        line = stdout.readline().strip()
        if line != "0":
            raise RuntimeError(
                f"an edge's round in {namespace(slot)} failed (exit {line or 'none'}): "
                f"see {self.work}/receiver.log"
            )
        return slot


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection((RECEIVER_IP, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def drive() -> int:
    """A driver (``--role driver``, inside a namespace): for each config path on stdin,
    one ``sealsync send`` of that edge in this interpreter; its exit code on stdout.
    What the send prints goes nowhere: stdout is the answer channel."""
    answers = os.fdopen(os.dup(1), "w")
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    from sealsync.app.cli import main

    for line in sys.stdin:
        code = main(["-q", "send", "--config", line.strip()])
        answers.write(f"{code}\n")
        answers.flush()
    return 0


def measure(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise RuntimeError("needs root and iproute2's ip: it makes network namespaces")
    if len(os.sched_getaffinity(0)) < 2:
        raise RuntimeError("needs two CPUs: the drivers on one, the receiver on the other")
    compile_bytecode()
    fleet = Fleet(args)
    rng = random.Random(args.seed)
    try:
        make_network(args.namespaces)
        fleet.setup()
        fleet.start()
        log("fleet: each edge's first round (binds its UUID, ships its files)")
        fleet.run_rounds([(edge, False) for edge in fleet.edges])
        ships = round(args.rounds * args.ship)
        plan = [(rng.choice(fleet.edges), k < ships) for k in range(args.rounds)]
        rng.shuffle(plan)
        assert fleet.receiver is not None
        log(f"fleet: {args.rounds} rounds, {ships} shipping a new 1 MiB TsFile")
        load_before = os.getloadavg()[0]
        cpu, started = tree_cpu(fleet.receiver.pid), time.monotonic()
        seconds = fleet.run_rounds(plan)
        cpu, wall = tree_cpu(fleet.receiver.pid) - cpu, time.monotonic() - started
        load_after = os.getloadavg()[0]
        loaded = sum(1 for _ in (fleet.work / "dc" / "data" / "sequence").rglob("*.tsfile"))
        if loaded != fleet.shipped:
            raise RuntimeError(
                f"the receiver holds {loaded} files, the edges shipped {fleet.shipped}"
            )
    finally:
        fleet.stop()
        remove_network(args.namespaces)
        if not args.keep:
            shutil.rmtree(fleet.work, ignore_errors=True)
    per_round = cpu / args.rounds
    edges = args.interval / per_round
    seconds.sort()
    print(
        f"fleet: {args.edges} edges in {args.namespaces} network namespaces, {args.rounds} "
        f"rounds ({ships} shipping 1 MiB), {args.concurrency} at a time; load average "
        f"{load_before:.1f} before, {load_after:.1f} after\n"
        f"receiver CPU per round {per_round * 1e3:.1f} ms (its one core busy "
        f"{cpu / wall:.0%} while driven at {args.rounds / wall:.1f} rounds/s)\n"
        f"round time median {median(seconds) * 1e3:.0f} ms, "
        f"p95 {seconds[int(0.95 * (len(seconds) - 1))] * 1e3:.0f} ms\n"
        f"edges per receiver core at a {args.interval:g} s interval: {edges:,.0f}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["bench", "driver"], default="bench")
    parser.add_argument("--edges", type=at_least_one, default=400)
    parser.add_argument("--namespaces", type=at_least_one, default=16)
    parser.add_argument("--rounds", type=at_least_one, default=800)
    parser.add_argument("--concurrency", type=at_least_one, default=4)
    parser.add_argument("--ship", type=float, default=0.01, help="share of rounds that ship")
    parser.add_argument("--interval", type=float, default=300.0, help="seconds between rounds")
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--workdir", default="/tmp/sealsync-bench")
    parser.add_argument("--keep", action="store_true", help="keep the edges' and receiver's files")
    args = parser.parse_args()
    if args.role == "driver":
        return drive()
    return exit_status("bench_fleet", lambda: measure(args))


if __name__ == "__main__":
    sys.exit(main())
