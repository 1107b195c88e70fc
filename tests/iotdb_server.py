"""A real Apache IoTDB server for tests: resolved from Maven Central, configured under a
temporary folder, started, and stopped with nothing left running.

Why a real one: the project's simulator writes what the project believes IoTDB
writes; only the real server shows what it does write (file format version, folder
layout, sealed-file and ``.mods`` naming). The release's jars come from Maven Central
through Maven (cached in ``~/.m2``; the resolved classpath is cached beside the small
pom that asked for it, so a second run starts offline). The server runs straight from
``java -cp``, with the options and system properties its own start scripts pass, and
every port it opens set to one free on loopback (2.x binds them on every interface,
whatever its address settings say).

Use :func:`running_iotdb` in scripts and the ``iotdb_server`` fixture of
``tests/conftest.py`` (a factory: ``iotdb_server("2.0.1-beta")``) in tests; both stop
the server at the end.
``python tests/iotdb_server.py RELEASE`` starts one and waits for Ctrl-C.

Every release in :data:`RELEASES` started on this project's CI machine; the ones that
did not resolve there are in docs/iotdb.md with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import java_servers
from java_servers import (
    RESOLVE_TIMEOUT,
    ServerUnavailable,
    free_ports,
    group_alive,
    own_session_tied_to_parent,
    port_answers,
)

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "iotdb"
CLIENT_WORKER = TEMPLATES / "client_worker.py"

CACHE_ENV = "SEALSYNC_IOTDB_CACHE"
JAVA_ENV = "SEALSYNC_IOTDB_JAVA"
CLIENT_PYTHON_ENV = "SEALSYNC_IOTDB_CLIENT_PYTHON"

START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0


#: The release cannot run here: not resolvable, no Java, or it did not start. The
#: message names the cause (the Maven error, the server's log tail).
IoTDBUnavailable = ServerUnavailable


@dataclass(frozen=True)
class Node:
    """One JVM of a release: which artifact holds it and how its scripts start it."""

    name: str  # "server" (0.12/0.13 standalone), "confignode" or "datanode"
    artifact: str
    main_class: str
    args: tuple[str, ...]
    heap: str
    direct: str
    # The artifacts to leave out of resolution, as "groupId:artifactId".
    exclusions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Release:
    version: str
    standalone: bool  # 0.12/0.13: one server; 1.x/2.x: a ConfigNode and a DataNode
    tsfile_version: int  # the format version byte of the files it writes
    nodes: tuple[Node, ...]

    @property
    def data_dir(self) -> str:
        """Where the release keeps ``sequence/`` and ``unsequence/``, relative to its
        home (the distributions' defaults)."""
        return "data/data" if self.standalone else "data/datanode/data"


_STANDALONE_012 = Node(
    name="server",
    artifact="iotdb-server",
    main_class="org.apache.iotdb.db.service.IoTDB",
    args=(),
    heap="512m",
    direct="256m",
    # The pom asks for moquette-broker 0.13, which was only ever on JCenter (gone); it
    # is the MQTT service, which the fixture leaves off.
    exclusions=("io.moquette:moquette-broker",),
)


def _cluster_nodes() -> tuple[Node, ...]:
    return (
        Node(
            name="confignode",
            artifact="iotdb-confignode",
            main_class="org.apache.iotdb.confignode.service.ConfigNode",
            args=("-s",),
            heap="256m",
            direct="128m",
        ),
        Node(
            name="datanode",
            artifact="iotdb-server",
            main_class="org.apache.iotdb.db.service.DataNode",
            args=("-s",),
            heap="768m",
            # Each database's schema region (Ratis) takes its buffers from direct
            # memory, about 50 MiB: 256 MiB held five databases, and a module's tests
            # sharing one server create more ("no available SchemaRegionGroup").
            direct="1g",
        ),
    )


RELEASES: dict[str, Release] = {
    "0.12.0": Release(
        version="0.12.0",
        standalone=True,
        tsfile_version=3,
        nodes=(_STANDALONE_012,),
    ),
    "2.0.1-beta": Release(
        version="2.0.1-beta",
        standalone=False,
        tsfile_version=4,
        nodes=_cluster_nodes(),
    ),
}

# The newest release of each line that writes TsFile v3 and v4 and starts here.
V3_RELEASE = "0.12.0"
V4_RELEASE = "2.0.1-beta"

# What the JVM needs opened on Java 11+ (the start scripts pass the same).
_ADD_OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.util.concurrent",
        "java.lang",
        "java.util",
        "java.nio",
        "java.io",
        "java.net",
    )
)


def cache_root() -> Path:
    """Where resolved classpaths are kept between runs."""
    return java_servers.cache_folder(CACHE_ENV, "iotdb")


def find_java() -> str:
    return java_servers.find_java(named_by=JAVA_ENV)


# -- resolving a release from Maven Central ---------------------------------------


def _pom(release: Release, node: Node) -> str:
    exclusions = "".join(
        "<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(
            *excluded.split(":")
        )
        for excluded in node.exclusions
    )
    dependency = (
        "    <dependency><groupId>org.apache.iotdb</groupId>"
        f"<artifactId>{node.artifact}</artifactId><version>{release.version}</version>"
        + (f"<exclusions>{exclusions}</exclusions>" if exclusions else "")
        + "</dependency>"
    )
    template = Template((TEMPLATES / "pom.xml.in").read_text())
    return template.substitute(name=f"{node.name}-{release.version}", dependencies=dependency)


def resolve_classpath(release: Release, node: Node) -> list[str]:
    """The jars of ``node``: from the cache when every jar is still in ``~/.m2``, else
    resolved by Maven (which downloads only what ``~/.m2`` lacks)."""
    return java_servers.resolve_classpath(
        cache_root() / release.version / node.name,
        _pom(release, node),
        f"IoTDB {release.version} {node.name}",
    )


# -- the client ---------------------------------------------------------------------


CLIENT_RELEASE = "apache-iotdb==1.3.4"


def client_python(release: str = CLIENT_RELEASE) -> str:
    """The Python that runs the client worker: a virtual environment of its own, made
    once and cached beside the servers (``SEALSYNC_IOTDB_CLIENT_PYTHON`` names another,
    to try another client release); ``release`` another pip requirement (a 2.x client,
    the only ones with table-model sessions).

    Not the project's environment: ``apache-iotdb`` installs a top-level package named
    ``tests`` that would hide this project's ``tests`` (``python -m tests.security.report``
    then fails), and its numpy and pandas pins are no business of the project's."""
    named = os.environ.get(CLIENT_PYTHON_ENV)
    if named and release == CLIENT_RELEASE:
        return named
    home = cache_root() / ("client-" + release.replace("==", "-"))
    python = home / "bin" / "python"
    if python.is_file():
        return str(python)
    home.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    try:
        # Only the interpreter is used, through ``-m``, so the folder can be renamed
        # into place afterwards (a venv's scripts name their folder; its python does not).
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
        subprocess.run(
            [str(building / "bin" / "python"), "-m", "pip", "install", "-q", release],
            check=True,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            timeout=RESOLVE_TIMEOUT,
        )
        os.replace(building, home)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(building, ignore_errors=True)
        if python.is_file():  # another test run made it meanwhile
            return str(python)
        raise IoTDBUnavailable(f"IoTDB's Python client ({release}) did not install: {exc}") from exc
    return str(python)


class IoTDBClientError(RuntimeError):
    """The server refused a statement; the message is the client's."""


@dataclass
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[list[Any]]


class IoTDBClient:
    """A session of IoTDB's Python client in a worker process (``tests/iotdb/
    client_worker.py`` says why), with JSON values whichever client release runs it.

    :data:`CLIENT_RELEASE` (1.3.4) speaks to every release in
    :data:`RELEASES`. The 2.x clients call RPCs (``executeUpdateStatementV2``...) that
    0.12 and 0.13 servers lack, so they fail there after logging in."""

    def __init__(self, python: str, port: int, *, timeout: float = 60.0) -> None:
        self._process = subprocess.Popen(
            [python, str(CLIENT_WORKER), "127.0.0.1", str(port), "root", "root", str(timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        hello = self._read()
        if not hello.get("ready"):
            raise IoTDBClientError(f"the client did not connect: {hello}")

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(timeout=10)
            assert self._process.stderr is not None
            raise IoTDBClientError(
                f"the client exited ({self._process.returncode}): "
                + self._process.stderr.read().strip()[-1500:]
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        if not answer.get("ok"):
            raise IoTDBClientError(str(answer.get("error")))
        return answer

    def sql(self, statement: str) -> None:
        self._call({"op": "sql", "sql": statement})

    def query(self, statement: str) -> QueryResult:
        answer = self._call({"op": "query", "sql": statement})
        return QueryResult(answer["columns"], answer["types"], answer["rows"])

    def insert(
        self,
        records: Sequence[tuple[str, int, Sequence[str], Sequence[str], Sequence[Any]]],
        *,
        aligned: bool = False,
    ) -> None:
        """Insert ``(device, time, measurements, type names, values)`` records."""
        self._call({"op": "insert", "aligned": aligned, "records": [list(r) for r in records]})

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(IoTDBClientError, BrokenPipeError, OSError):
                self._call({"op": "close"})
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> IoTDBClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- configuring, starting and stopping ---------------------------------------------


def _standalone_properties(home: Path, ports: dict[str, int]) -> dict[str, str]:
    # Keys read by 0.12's IoTDBDescriptor (conf/iotdb-engine.properties).
    return {
        "rpc_address": "127.0.0.1",
        "rpc_port": str(ports["rpc"]),
        "is_sync_enable": "false",
        "sync_server_port": str(ports["sync"]),
        "enable_mqtt_service": "false",
        "mqtt_host": "127.0.0.1",
        "mqtt_port": str(ports["mqtt"]),
        "enable_metric_service": "false",
        "metrics_port": str(ports["metrics"]),
        "system_dir": str(home / "data" / "system"),
        "data_dirs": str(home / "data" / "data"),
        "wal_dir": str(home / "data" / "wal"),
        "tracing_dir": str(home / "data" / "tracing"),
        "index_root_dir": str(home / "data" / "index"),
        "udf_root_dir": str(home / "ext" / "udf"),
    }


def _cluster_properties(home: Path, ports: dict[str, int]) -> dict[str, str]:
    # Keys read by 2.0's ConfigNodeDescriptor, IoTDBDescriptor and CommonDescriptor
    # (conf/iotdb-system.properties, shared by both nodes as in the distribution).
    seed = f"127.0.0.1:{ports['cn_internal']}"
    confignode = home / "data" / "confignode"
    datanode = home / "data" / "datanode"
    return {
        "cluster_name": "defaultCluster",
        "cn_internal_address": "127.0.0.1",
        "cn_internal_port": str(ports["cn_internal"]),
        "cn_consensus_port": str(ports["cn_consensus"]),
        "cn_seed_config_node": seed,
        "cn_system_dir": str(confignode / "system"),
        "cn_consensus_dir": str(confignode / "consensus"),
        "cn_pipe_receiver_file_dir": str(confignode / "system" / "pipe" / "receiver"),
        "dn_rpc_address": "127.0.0.1",
        "dn_rpc_port": str(ports["rpc"]),
        "dn_internal_address": "127.0.0.1",
        "dn_internal_port": str(ports["dn_internal"]),
        "dn_mpp_data_exchange_port": str(ports["dn_mpp"]),
        "dn_schema_region_consensus_port": str(ports["dn_schema_consensus"]),
        "dn_data_region_consensus_port": str(ports["dn_data_consensus"]),
        "dn_seed_config_node": seed,
        "dn_system_dir": str(datanode / "system"),
        "dn_data_dirs": str(datanode / "data"),
        "dn_consensus_dir": str(datanode / "consensus"),
        "dn_wal_dirs": str(datanode / "wal"),
        "dn_sync_dir": str(datanode / "sync"),
        "dn_pipe_receiver_file_dirs": str(datanode / "system" / "pipe" / "receiver"),
        "sort_tmp_dir": str(datanode / "tmp"),
        "enable_mqtt_service": "false",
        "mqtt_host": "127.0.0.1",
        "mqtt_port": str(ports["mqtt"]),
        "enable_rest_service": "false",
        "rest_service_port": str(ports["rest"]),
        "pipe_air_gap_receiver_enabled": "false",
        "pipe_air_gap_receiver_port": str(ports["air_gap"]),
        "dn_metric_prometheus_reporter_port": str(ports["dn_metric"]),
        "cn_metric_prometheus_reporter_port": str(ports["cn_metric"]),
        # A test's files stay as the test wrote them whatever the machine's disk: 2.x
        # rewrites every file that has a .mods2 ("settle" compaction, and then any test
        # reading the file finds it gone) once free space falls under
        # disk_space_warning_threshold + this redundancy (0.05 + 0.05 by default), and
        # turns read-only under the threshold alone.
        "disk_space_warning_threshold": "0.01",
        "inner_compaction_task_selection_disk_redundancy": "0",
    }


_STANDALONE_PORTS = ("rpc", "sync", "mqtt", "metrics")
_CLUSTER_PORTS = (
    "rpc",
    "cn_internal",
    "cn_consensus",
    "dn_internal",
    "dn_mpp",
    "dn_schema_consensus",
    "dn_data_consensus",
    "mqtt",
    "rest",
    "air_gap",
    "dn_metric",
    "cn_metric",
)


def _system_properties(release: Release, node: Node, home: Path) -> list[str]:
    """The ``-D`` options the node's start script passes."""
    conf = home / "conf"
    logback = f"-Dlogback.configurationFile={conf / f'logback-{node.name}.xml'}"
    common = [logback, f"-DTSFILE_HOME={home}", f"-DTSFILE_CONF={conf}"]
    if node.name == "confignode":
        return common + [
            f"-DCONFIGNODE_HOME={home}",
            f"-DCONFIGNODE_DATA_HOME={home}",
            f"-DCONFIGNODE_CONF={conf}",
            f"-DCONFIGNODE_LOGS={home / 'logs'}",
            "-Dname=iotdb.ConfigNode",
        ]
    main = "iotdb.IoTDB" if release.standalone else "iotdb.DataNode"
    return common + [
        f"-DIOTDB_HOME={home}",
        f"-DIOTDB_DATA_HOME={home}",
        f"-DIOTDB_CONF={conf}",
        f"-DIOTDB_LOGS={home / 'logs'}",
        f"-Dname={main}",
    ]


@dataclass
class IoTDBServer:
    """One release running under ``home``; :meth:`start` and :meth:`stop` it."""

    release: Release
    home: Path
    java: str = field(default_factory=find_java)
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[tuple[Node, subprocess.Popen[bytes]]] = field(default_factory=list)
    start_seconds: float = 0.0
    stop_seconds: float = 0.0
    # Each node's exit status at the last stop (143: it ended on SIGTERM, hooks run;
    # -9: it had to be killed).
    exit_codes: dict[str, int] = field(default_factory=dict)
    # Settings written over the fixture's own (a test's shorter check intervals).
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def rpc_port(self) -> int:
        return self.ports["rpc"]

    @property
    def data_dir(self) -> Path:
        """The folder holding ``sequence/`` and ``unsequence/``."""
        return self.home / self.release.data_dir

    def log_path(self, node: Node) -> Path:
        return self.home / "logs" / f"{node.name}.log"

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for node in self.release.nodes:
            for path in (self.log_path(node), self.home / "logs" / f"{node.name}.out"):
                if path.is_file() and path.stat().st_size:
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts) or "(no log written)"

    def _configure(self) -> None:
        names = _STANDALONE_PORTS if self.release.standalone else _CLUSTER_PORTS
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        conf = self.home / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        if self.release.standalone:
            name, properties = (
                "iotdb-engine.properties",
                _standalone_properties(self.home, self.ports),
            )
        else:
            name, properties = "iotdb-system.properties", _cluster_properties(self.home, self.ports)
        properties = {**properties, **self.properties}
        (conf / name).write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        logback = Template((TEMPLATES / "logback.xml.in").read_text())
        for node in self.release.nodes:
            (conf / f"logback-{node.name}.xml").write_text(
                logback.substitute(log_file=self.log_path(node))
            )

    def _launch(self, node: Node, classpath: list[str]) -> subprocess.Popen[bytes]:
        command = [
            self.java,
            f"-Xms{node.heap}",
            f"-Xmx{node.heap}",
            f"-XX:MaxDirectMemorySize={node.direct}",
            *_ADD_OPENS,
            "-Dsun.jnu.encoding=UTF-8",
            "-Dfile.encoding=UTF-8",
            *_system_properties(self.release, node, self.home),
            "-cp",
            os.pathsep.join(classpath),
            node.main_class,
            *node.args,
        ]
        with open(self.home / "logs" / f"{node.name}.out", "ab") as out:
            return subprocess.Popen(
                command,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=own_session_tied_to_parent,
            )

    def _wait_for_port(self, port: int, what: str, deadline: float) -> None:
        began = time.monotonic()
        while not port_answers(port):
            for node, process in self.processes:
                if process.poll() is not None:
                    raise IoTDBUnavailable(
                        f"IoTDB {self.release.version} {node.name} exited with "
                        f"{process.returncode} before its {what} port {port} answered:\n"
                        + self.log_tail()
                    )
            if time.monotonic() > deadline:
                raise IoTDBUnavailable(
                    f"IoTDB {self.release.version}: its {what} port {port} did not answer "
                    f"within {time.monotonic() - began:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def start(self, timeout: float = START_TIMEOUT) -> IoTDBServer:
        classpaths = [resolve_classpath(self.release, node) for node in self.release.nodes]
        self._configure()
        began = time.monotonic()
        deadline = began + timeout
        try:
            for node, classpath in zip(self.release.nodes, classpaths, strict=True):
                self.processes.append((node, self._launch(node, classpath)))
                if node.name == "confignode":
                    # The DataNode registers with it at startup, so it must be up first.
                    self._wait_for_port(self.ports["cn_internal"], "ConfigNode", deadline)
            self._wait_for_port(self.rpc_port, "client", deadline)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def client(self, *, timeout: float = 60.0) -> IoTDBClient:
        return IoTDBClient(client_python(), self.rpc_port, timeout=timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM each node's process group (DataNode before ConfigNode), SIGKILL what
        is still there after ``timeout``; raise if any process of a group survives."""
        began = time.monotonic()
        survivors = []
        for node, process in reversed(self.processes):
            group = process.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                process.wait()
            self.exit_codes[node.name] = process.returncode
            if group_alive(group):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
                survivors.append(f"{node.name} (group {group})")
        self.processes.clear()
        self.stop_seconds = time.monotonic() - began
        if survivors:
            raise RuntimeError(f"IoTDB processes survived stop: {', '.join(survivors)}")


@contextlib.contextmanager
def running_iotdb(
    version: str, home: Path, *, timeout: float = START_TIMEOUT
) -> Iterator[IoTDBServer]:
    """``version`` (a key of :data:`RELEASES`) running under ``home`` until the block ends."""
    server = IoTDBServer(RELEASES[version], home)
    server.start(timeout)
    try:
        yield server
    finally:
        server.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in RELEASES:
        print(f"usage: iotdb_server.py RELEASE   (one of: {', '.join(RELEASES)})", file=sys.stderr)
        return 2
    import tempfile

    # The servers run in sessions of their own, so a signal to this script reaches them
    # only through stop(): turn each into the interrupt that runs it.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    with tempfile.TemporaryDirectory(prefix="iotdb-") as home:
        try:
            with running_iotdb(argv[0], Path(home)) as server:
                print(
                    f"IoTDB {argv[0]} up in {server.start_seconds:.1f}s on 127.0.0.1:"
                    f"{server.rpc_port}, data in {server.data_dir}; Ctrl-C stops it",
                    flush=True,
                )
                while all(p.poll() is None for _, p in server.processes):
                    time.sleep(1)
                print(f"error: IoTDB {argv[0]} exited:\n{server.log_tail()}", file=sys.stderr)
                return 1
        except KeyboardInterrupt:
            return 0
        except IoTDBUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
