"""A data centre's lake for tests: a real HDFS, a real S3-compatible server, and a Spark
standalone cluster whose workers cannot see the driver's folders.

Why real ones: a table on HDFS or S3 must be written, committed and read through the
store's own client (Hadoop's ``hdfs://`` and ``s3a://`` file systems in Spark,
``deltalake``'s object store in Python), and only a real server answers as the store
does. A cluster whose workers share the driver's disk hides every path that works only
because driver and executors see the same folders; these workers see none of them.

* :class:`Hdfs`: Hadoop's ``MiniDFSCluster`` (a NameNode and one DataNode in a JVM of
  their own, started by ``MiniHadoopClusterManager``) of the Hadoop release whose
  client PySpark ships, every port on loopback, its data under the fixture's folder.
* :class:`S3Server`: s3proxy with its filesystem backend (each bucket a folder, each
  object a file under it), on a loopback port, with an access key and a secret.
* :class:`SparkCluster`: PySpark's own master and workers; with ``hidden`` folders each
  worker runs in a mount namespace of its own (``unshare``) in which every one of them
  is an empty read-only tmpfs, so its executors cannot open the driver's files there.
  The virtual environment, ``~/.m2`` and ``~/.ivy2`` stay visible: executors need
  Python, PySpark and the jars.

Every jar comes from Maven Central through Maven (cached in ``~/.m2``; the resolved
class path is kept beside the small pom that asked for it, so a later run starts
offline), as :mod:`iotdb_server` does for IoTDB. ``hadoop-aws``, its AWS SDK bundle
and the S3 settings reach a Spark session through :meth:`S3Server.spark_conf`.

The fixtures ``lake_hdfs``, ``lake_s3`` and ``lake_cluster`` of ``tests/conftest.py``
start one of each per test run and stop them at its end; :func:`spark_cluster` starts
a cluster of another shape (one worker, shared folders, :func:`offline_network`).
``python tests/lake_servers.py`` starts all three, prints how to reach them and how
long each took, and waits for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Self

from java_servers import (
    ServerUnavailable,
    cache_folder,
    find_java,
    free_ports,
    log_tail,
    own_session_tied_to_parent,
    port_answers,
    resolve_classpath,
    stop_group,
)

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "lake"
ROOT = HERE.parent

CACHE_ENV = "SEALSYNC_LAKE_CACHE"

# Generous: a 2-core machine running other work starts a JVM slowly.
START_TIMEOUT = 180.0
STOP_TIMEOUT = 30.0

#: s3proxy's release, and the Jackson 3 BOM its own pom imports: without it Maven
#: picks jclouds' older jackson-annotations, which Jackson 3's databind cannot load.
S3PROXY = "org.gaul:s3proxy:4.1.0"
S3PROXY_JACKSON_BOM = "tools.jackson:jackson-bom:3.2.2"
#: A logger for Hadoop's slf4j 1.7 (the minicluster ships none): its log is the
#: first thing to read when the NameNode or DataNode does not start.
SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.36"

MINICLUSTER_MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"

#: JVM options for servers that start often and serve little: the client compiler only
#: and one GC thread start faster and leave a 2-core machine's cores to the tests.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
S3PROXY_MAIN = "org.gaul.s3proxy.Main"


def cache_root() -> Path:
    """Where resolved class paths are kept between runs."""
    return cache_folder(CACHE_ENV, "lake")


def hadoop_version() -> str:
    """The Hadoop release of PySpark's client jars; the servers and ``hadoop-aws`` match it."""
    from spark_loader import jvm

    return jvm.hadoop_version()


@dataclass(frozen=True)
class Jars:
    """What one server (or connector) needs from Maven Central."""

    name: str
    dependencies: tuple[str, ...]  # groupId:artifactId:version
    boms: tuple[str, ...] = ()  # imported into dependencyManagement

    def pom(self) -> str:
        def element(coords: str, extra: str = "") -> str:
            group, artifact, version = coords.split(":")
            return (
                f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                f"<version>{version}</version>{extra}</dependency>"
            )

        template = Template((TEMPLATES / "pom.xml.in").read_text())
        return template.substitute(
            name=self.name,
            managed="\n".join(
                element(b, "<type>pom</type><scope>import</scope>") for b in self.boms
            ),
            dependencies="\n".join(element(d) for d in self.dependencies),
        )

    def classpath(self) -> list[str]:
        return resolve_classpath(cache_root() / self.name, self.pom(), self.name)


def hdfs_jars() -> Jars:
    version = hadoop_version()
    return Jars(
        f"hdfs-{version}",
        (
            f"org.apache.hadoop:hadoop-client-minicluster:{version}",
            f"org.apache.hadoop:hadoop-client-api:{version}",
            f"org.apache.hadoop:hadoop-client-runtime:{version}",
            SLF4J_SIMPLE,
        ),
    )


def s3proxy_jars() -> Jars:
    return Jars("s3proxy-" + S3PROXY.rsplit(":", 1)[1], (S3PROXY,), (S3PROXY_JACKSON_BOM,))


def hadoop_aws_jars() -> Jars:
    """``hadoop-aws`` of PySpark's Hadoop release and what it needs at run time (the AWS
    SDK bundle, which is large: resolved once into ``~/.m2``)."""
    from spark_loader import jvm

    return Jars(f"hadoop-aws-{hadoop_version()}", (jvm.hadoop_aws_package(),))


def _launch(command: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=own_session_tied_to_parent,
        )


def _wait(
    ready: Any, process: subprocess.Popen[bytes], what: str, log: Path, timeout: float
) -> float:
    """Poll ``ready()`` until true; the seconds it took. A process that exits, or a
    deadline that passes, is an error naming the log and its tail."""
    began = time.monotonic()
    while not ready():
        if process.poll() is not None:
            raise ServerUnavailable(
                f"{what} exited with {process.returncode} before it was ready; "
                f"its log is {log}:\n{log_tail(log)}"
            )
        if time.monotonic() - began > timeout:
            raise ServerUnavailable(
                f"{what} was not ready within {timeout:.0f}s; its log is {log}:\n{log_tail(log)}"
            )
        time.sleep(0.2)
    return time.monotonic() - began


@dataclass
class JavaServer:
    """One server's JVM under ``home``, its output in :attr:`log_path`; a subclass's
    :meth:`start` builds the command and says when it is ready (:meth:`_run`)."""

    home: Path
    java: str = field(default_factory=find_java)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    start_seconds: float = 0.0
    NAME: ClassVar[str] = "server"

    @property
    def log_path(self) -> Path:
        return self.home / f"{self.NAME}.log"

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        raise NotImplementedError

    def _run(self, command: list[str], ready: Any, what: str, timeout: float) -> Self:
        began = time.monotonic()
        self.process = _launch(command, self.log_path, self.home)
        try:
            _wait(ready, self.process, what, self.log_path, timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        if self.process is not None:
            whole = stop_group(self.process, timeout)
            self.process = None
            if not whole:
                raise RuntimeError(f"{self.NAME} processes survived stop (killed)")

    @contextlib.contextmanager
    def running(self) -> Iterator[Self]:
        """Started for the block, stopped after it."""
        self.start()
        try:
            yield self
        finally:
            self.stop()


# -- HDFS ------------------------------------------------------------------------


@dataclass
class Hdfs(JavaServer):
    """A NameNode and one DataNode under ``home``; :meth:`start` and :meth:`stop` them."""

    NAME: ClassVar[str] = "hdfs"

    @property
    def uri(self) -> str:
        """The file system's root: ``hdfs://127.0.0.1:<NameNode port>``."""
        return f"hdfs://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        """Where the NameNode and the DataNode keep their files."""
        return self.home / "dfs"

    def hadoop_conf(self) -> dict[str, str]:
        """What a client needs besides the URI: one copy of each block (one DataNode)."""
        return {"dfs.replication": "1"}

    def spark_conf(self) -> dict[str, str]:
        return {f"spark.hadoop.{k}": v for k, v in self.hadoop_conf().items()}

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        classpath = hdfs_jars().classpath()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "tmp").mkdir(exist_ok=True)
        details = self.home / "details.json"
        details.unlink(missing_ok=True)
        self.port = free_ports(1)[0]
        settings = {
            "hdfs.minidfs.basedir": str(self.data_dir),
            "hadoop.tmp.dir": str(self.home / "tmp"),
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
        }
        command = [
            self.java,
            "-Xmx512m",
            *QUICK_JVM,
            f"-Djava.io.tmpdir={self.home / 'tmp'}",
            f"-Dtest.build.data={self.home / 'tmp'}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-cp",
            os.pathsep.join(classpath),
            MINICLUSTER_MAIN,
            "-nomr",
            "-format",
            "-datanodes",
            "1",
            "-nnport",
            str(self.port),
            "-writeDetails",
            str(details),
            *(arg for k, v in settings.items() for arg in ("-D", f"{k}={v}")),
        ]
        # The details are written once the NameNode is out of safe mode and the
        # DataNode has registered (MiniDFSCluster's build waits for both).
        return self._run(
            command,
            lambda: details.is_file() and port_answers(self.port),
            f"HDFS (Hadoop {hadoop_version()} MiniDFSCluster)",
            timeout,
        )


# -- S3 ----------------------------------------------------------------------------


@dataclass
class S3Server(JavaServer):
    """s3proxy serving ``buckets`` from folders under ``home``."""

    buckets: tuple[str, ...] = ("lake",)
    access_key: str = "sealsync-test"
    secret_key: str = "sealsync-test-secret"
    region: str = "us-east-1"
    NAME: ClassVar[str] = "s3proxy"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        """The filesystem backend's root: ``<store>/<bucket>/<key>`` is each object."""
        return self.home / "store"

    def hadoop_conf(self, *, credentials: bool = True) -> dict[str, str]:
        """Hadoop's S3A settings for this server: its endpoint, path-style requests
        (``http://host/bucket/key``), plain HTTP, and (unless ``credentials`` is false,
        when they come from the environment, :meth:`env`) the key and secret."""
        conf = {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
        }
        if credentials:
            conf["fs.s3a.access.key"] = self.access_key
            conf["fs.s3a.secret.key"] = self.secret_key
        return conf

    def spark_conf(self, *, credentials: bool = True) -> dict[str, str]:
        """A Spark session's settings to read and write ``s3a://`` here: the S3A
        settings, and ``hadoop-aws`` with the AWS SDK on the driver's and the executors'
        class path (jars in ``~/.m2``, which a cluster's workers see, as a data
        centre installs them on its workers rather than shipping them each run)."""
        jars = os.pathsep.join(hadoop_aws_jars().classpath())
        conf = {
            f"spark.hadoop.{k}": v for k, v in self.hadoop_conf(credentials=credentials).items()
        }
        conf["spark.driver.extraClassPath"] = jars
        conf["spark.executor.extraClassPath"] = jars
        return conf

    def env(self) -> dict[str, str]:
        """The credentials and endpoint as the AWS SDKs read them from the environment
        (S3A's environment provider, ``deltalake``, ``pyarrow``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def storage_options(self) -> dict[str, str]:
        """``deltalake``'s storage options for ``s3://<bucket>/<key>`` here: the
        endpoint, plain HTTP allowed, path-style requests."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def start(self, timeout: float = START_TIMEOUT) -> Self:
        classpath = s3proxy_jars().classpath()
        self.home.mkdir(parents=True, exist_ok=True)
        for bucket in self.buckets:  # the filesystem backend's buckets are its folders
            (self.store / bucket).mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)[0]
        properties = {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.store),
        }
        conf = self.home / "s3proxy.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        command = [
            self.java,
            "-Xmx256m",
            *QUICK_JVM,
            f"-Dlogback.configurationFile={TEMPLATES / 'logback-s3proxy.xml'}",
            "-cp",
            os.pathsep.join(classpath),
            S3PROXY_MAIN,
            "--properties",
            str(conf),
        ]
        return self._run(command, lambda: port_answers(self.port), f"s3proxy ({S3PROXY})", timeout)


# -- Spark standalone ----------------------------------------------------------------


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


#: The master's ``/json/`` fetched from inside its network namespace.
_FETCH = (
    "import sys, urllib.request; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
)


def _hiding(folders: Sequence[Path], command: list[str]) -> list[str]:
    """``command`` run in a mount namespace of its own in which each of ``folders`` is an
    empty read-only tmpfs (the mounts are private: the rest of the machine sees none)."""
    if not folders:
        return command
    mounts = " && ".join(
        f"mount -t tmpfs -o ro,size=64k sealsync-hidden {shlex.quote(str(f))}" for f in folders
    )
    script = f'{mounts} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"] + (
        command
    )


@dataclass
class SparkCluster:
    """A master and ``workers`` workers on loopback. ``work`` holds their folders and
    logs and must not be among ``hidden`` (a worker could not see its own folder)."""

    work: Path
    hidden: tuple[Path, ...] = ()
    #: Run every process through this (``offline_network()``'s ``nsenter``).
    prefix: tuple[str, ...] = ()
    workers: int = 2
    cores: int = 1
    memory: str = "2g"
    port: int = 0
    ui_port: int = 0
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    start_seconds: float = 0.0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def log_path(self, name: str) -> Path:
        return self.work / f"{name}.log"

    def spark_conf(self) -> dict[str, str]:
        """What a driver on this machine needs to reach the executors, and the quick
        JVM options for the driver and executors (tests' jobs are small; a benchmark
        leaves them out)."""
        quick = " ".join(QUICK_JVM)
        return {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": quick,
            "spark.executor.extraJavaOptions": quick,
        }

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_DAEMON_JAVA_OPTS": " ".join(QUICK_JVM),
            # No REST submission server: it would take the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def _start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with open(self.log_path(name), "ab") as log:
            process = subprocess.Popen(
                [*self.prefix, *command],
                cwd=self.work,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=own_session_tied_to_parent,
            )
        self.processes.append((name, process))
        return process

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` document (workers, running and completed apps), asked
        from where the master runs."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        if not self.prefix:
            with urllib.request.urlopen(url, timeout=5) as r:
                answer: dict[str, Any] = json.load(r)
            return answer
        done = subprocess.run(
            [*self.prefix, sys.executable, "-c", _FETCH, url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise OSError(done.stderr.strip().splitlines()[-1:] or "fetch failed")
        answer = json.loads(done.stdout)
        return answer

    def _alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except (OSError, ValueError):  # not listening yet, or still answering with HTML
            return 0

    def start(self, timeout: float = START_TIMEOUT) -> SparkCluster:
        if any(self.work.resolve().is_relative_to(h.resolve()) for h in self.hidden):
            raise ValueError(f"the cluster's folder {self.work} is inside a hidden folder")
        if self.hidden and shutil.which("unshare") is None:
            raise ServerUnavailable("no unshare on PATH (util-linux): workers cannot be isolated")
        self.work.mkdir(parents=True, exist_ok=True)
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.port, self.ui_port = free_ports(2)
        began = time.monotonic()
        try:
            master = self._start(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.ui_port),
                ],
            )
            for n in range(self.workers):
                folder = self.work / f"worker-{n}"
                folder.mkdir(exist_ok=True)
                self._start(
                    f"worker-{n}",
                    _hiding(
                        self.hidden,
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            self.url,
                            "--host",
                            "127.0.0.1",
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--webui-port",
                            str(free_ports(1)[0]),
                            "--work-dir",
                            str(folder),
                        ],
                    ),
                )
            deadline = began + timeout
            while self._alive_workers() < self.workers:
                for name, process in self.processes:
                    if process.poll() is not None:
                        log = self.log_path(name)
                        raise ServerUnavailable(
                            f"Spark {name} exited with {process.returncode}; its log is "
                            f"{log}:\n{log_tail(log)}"
                        )
                if time.monotonic() > deadline:
                    raise ServerUnavailable(
                        f"{self._alive_workers()} of {self.workers} Spark workers registered "
                        f"within {timeout:.0f}s; the logs are in {self.work}:\n"
                        + log_tail(self.log_path("worker-0"))
                    )
                time.sleep(0.5)
            assert master.poll() is None
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Workers (and their executors, in their process groups) first, then the master."""
        survivors = []
        for name, process in reversed(self.processes):
            if not stop_group(process, timeout):
                survivors.append(name)
        self.processes.clear()
        if survivors:
            raise RuntimeError(f"Spark processes survived stop (killed): {', '.join(survivors)}")


@contextlib.contextmanager
def spark_cluster(
    hidden: Sequence[Path] = (),
    *,
    workers: int = 2,
    cores: int = 1,
    prefix: Sequence[str] = (),
) -> Iterator[SparkCluster]:
    """A running cluster whose workers see none of ``hidden`` (with none, they share
    every folder with this machine), its own folder made outside them and removed at
    the end."""
    work = Path(tempfile.mkdtemp(prefix="sealsync-spark-"))
    cluster = SparkCluster(
        work, hidden=tuple(hidden), prefix=tuple(prefix), workers=workers, cores=cores
    )
    try:
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)


class SparkDriver:
    """A Spark driver in a process of its own (``tests/lake/spark_driver.py`` says why
    and what it answers), in this process's mount namespace."""

    SCRIPT = TEMPLATES / "spark_driver.py"

    def __init__(self, log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self._process = subprocess.Popen(
                [sys.executable, str(self.SCRIPT)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                preexec_fn=own_session_tied_to_parent,
            )

    def call(self, op: str, **request: Any) -> dict[str, Any]:
        """One request; its answer, or RuntimeError with the driver's error and log."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the Spark driver exited ({self._process.wait()}); its log is {self.log}:\n"
                + log_tail(self.log)
            )
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(f"{op}: {answer.get('error')} (the driver's log is {self.log})")
        return answer

    def close(self, timeout: float = 60.0) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError, OSError):
                self.call("stop")
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        stop_group(self._process, STOP_TIMEOUT)  # the JVM it started too
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def offline_network() -> Iterator[tuple[str, ...]]:
    """A network namespace with only a loopback interface (no route off this machine:
    Maven Central is unreachable from it); yields the command prefix that runs a
    process in it. A ``sleep`` holds it open until the block ends."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        raise ServerUnavailable("no unshare or nsenter on PATH (util-linux)")
    holder = subprocess.Popen(
        ["unshare", "--net", "--", "sleep", "86400"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=own_session_tied_to_parent,
    )
    try:
        ours, theirs = os.readlink("/proc/self/ns/net"), f"/proc/{holder.pid}/ns/net"
        deadline = time.monotonic() + 30
        while holder.poll() is None and os.readlink(theirs) == ours:  # not unshared yet
            if time.monotonic() > deadline:
                raise ServerUnavailable("unshare --net did not make a network namespace in 30s")
            time.sleep(0.05)
        if holder.poll() is not None:
            assert holder.stderr is not None
            said = holder.stderr.read().decode(errors="replace").strip()
            raise ServerUnavailable(f"unshare --net failed ({holder.returncode}): {said}")
        prefix = ("nsenter", f"--net={theirs}", "--")
        subprocess.run([*prefix, "ip", "link", "set", "lo", "up"], check=True, timeout=30)
        yield prefix
    finally:
        stop_group(holder, STOP_TIMEOUT)
        if holder.stderr is not None:
            holder.stderr.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str]) -> int:
    if argv:
        print("usage: lake_servers.py   (starts HDFS, S3 and a Spark cluster)", file=sys.stderr)
        return 2
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    with tempfile.TemporaryDirectory(prefix="sealsync-lake-") as tmp:
        home = Path(tmp)
        hidden = home / "driver"
        hidden.mkdir()
        try:
            with (
                Hdfs(home / "hdfs").running() as hdfs,
                S3Server(home / "s3").running() as s3,
                spark_cluster([hidden]) as cluster,
            ):
                print(
                    f"HDFS {hdfs.uri} ({hdfs.start_seconds:.1f}s)\n"
                    f"S3 {s3.endpoint}, bucket {s3.buckets[0]}, key {s3.access_key} "
                    f"({s3.start_seconds:.1f}s)\n"
                    f"Spark {cluster.url}, workers hide {hidden} "
                    f"({cluster.start_seconds:.1f}s)\nCtrl-C stops them",
                    flush=True,
                )
                while True:
                    time.sleep(1)
        except KeyboardInterrupt:
            return 0
        except ServerUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
