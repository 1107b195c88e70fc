"""The IoTDB storage: the data centre is a running Apache IoTDB (``kind = "iotdb"``).

A verified file is placed in the receiver's data dirs exactly as the default storage
places it (:class:`DirectoryStorage`: ownership, quotas, ``send --reconcile``, the Spark
loader and recovery all keep working on those copies), and then loaded into IoTDB with
its ``LOAD`` statement. IoTDB reads the path on its own file system, so it runs on the
receiver's host.

Per dialect (``dialect``), as observed on the releases the tests start:

* ``"0.12"`` (0.12, 0.13): ``LOAD '<path>'``. The server *moves* the ``.tsfile`` and
  its ``.resource`` into its data folder, and reads a ``.mods`` beside the path only
  from where it was (lost at its next start). So the backend gives it hard links
  to the data file and ``.resource`` in ``<data dir>/iotdb-load/<sender>/`` (the
  receiver's copy stays whole), no ``.mods``, and applies every deletion of the
  file's ``.mods`` itself as ``DELETE`` statements (below).
* ``"2.0"`` (1.x, 2.x): ``LOAD '<path>' WITH ('on-success'='none',
  'convert-on-type-mismatch'='false')``: the server keeps the source (it hard-links or
  copies it) and takes the ``.mods2`` beside it into the loaded file's own, so a file's
  deletions at its load are IoTDB's exact ones; only entries appended later are sent
  as ``DELETE`` statements. A table-model file (IoTDB answers "Attempted to load a
  table-model TsFile into tree-model") is loaded into the table-model database its
  name gives (``<space>/<database>/...``, as 2.x folds its files), with ``'model'=
  'table'`` and ``'database-name'``; 2.x creates the database. (1.3 knows no
  ``convert-on-type-mismatch``: once it says so the key is left out.)

A file IoTDB refuses (a table-model file 0.12 cannot read, a file whose series type
IoTDB holds otherwise with points, a data centre that cannot create a schema region...)
is **held aside**: its copy is placed in the data dirs as any other (the Spark loader
reads it), IoTDB's refusal is one warning line, the file is recorded as held, and the
round goes on with every other file and sender. A held file is tried again when the
storage starts, right after one of its sender's deletions is applied (it may have
emptied the series in the way), and at most once a minute as its sender's later files
load. A storage that cannot be reached (no session) still fails the load, to be
retried with the round: that says nothing about the file.

Before a load each series of the file is held against the type the data centre has
for it (:mod:`receiver.storage.iotdb_schema`: a series deleted and created again with
another type at the edge). And a 1.x/2.x data centre answers from the file it loaded
last, not from the edge's highest-priority file, so after a load the files that
outrank it at the edge and overlap it are loaded again in the edge's order
(:mod:`receiver.storage.iotdb_order`: a compaction target arriving after the
unsequence file that overwrote some of its points).

Later deletions (the sender ships a grown ``.mods``/``.mods2`` of a file already
loaded) become ``DELETE`` statements for the entries beyond those applied. A
statement acts on every file IoTDB holds, every sender's, so an entry is never sent
as written: it becomes one statement per device of the shipping sender that it
covers, the path built from that device's nodes, properly quoted
(:mod:`receiver.storage.iotdb_delete`); another sender's devices are never named, and
a device whose path cannot be written safely is left out with a warning. A
statement covers every point IoTDB holds in its range, where the edge's entry
covered the points of one file (and, in 0.12, only its chunks below the entry's
offset): points written at the edge after the ``DELETE`` into the same range go too
(docs/operations.md says so). An entry that covers none of its file's chunks (its
offset at the file's head) is skipped.

A file deleted by the sender (a merge or compaction at the edge, whose result the
sender ships as a new file; a TTL expiry) leaves the receiver's data dirs as with the
default storage. At the edge its points live on only in the file that replaced it,
so IoTDB's copy should go too: 0.12 has ``REMOVE '<path>'`` (found by the file's name
and the storage group, virtual storage group and partition folders above it), which
the backend sends; 1.x and 2.x have no statement that unloads one file, so there IoTDB
keeps the points (a file IoTDB compacted itself meanwhile cannot be removed either;
the warning says so).

Which files IoTDB has loaded, and how many of each file's deletions it has applied,
and which it refused, is the ``<schema dir>/iotdb-loaded.log`` (fsynced lines,
:class:`durable.AppendLog`: ``load``, ``mods``, ``held``, ``forget``),
so a replay of ``load.log`` after a crash neither loads a file twice nor skips one.
The one window left is a crash after ``LOAD`` returned and before its line is on
disk: the replay loads the file again, which holds the same points, and applies its
deletions again after it.

IoTDB's Python client runs in a worker process (``receiver/storage/iotdb_worker.py``)
with ``python`` (default: this Python), never imported here: it is needed only when
this storage is configured (``pip install 'sealsync[iotdb]'``), and its package
brings a top-level ``tests`` package and numpy/pandas pins of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from receiver.folders import make_dirs
from receiver.load.owners import DeviceOwners
from receiver.storage.contract import StorageError
from receiver.storage.directory import DirectoryStorage
from receiver.storage.iotdb_delete import OwnedDevices, scoped_statements
from receiver.storage.iotdb_order import Ranges, database_of, load_again, partition_of
from receiver.storage.iotdb_schema import SchemaGuard
from sealsync import durable
from sealsync.config.schema import Choice, Host, Integer, PathValue, Text, setting
from sealsync.errors import ConfigError, FormatError, SealsyncError
from sealsync.formats import mods, mods2, resource, tsfile_meta
from sealsync.formats.deletion import SeriesDeletion
from sealsync.formats.tsfile_names import priority
from sealsync.printable import printable

log = logging.getLogger(f"sealsync.{__name__}")

WORKER = Path(__file__).with_name("iotdb_worker.py")
STATE_NAME = "iotdb-loaded.log"
LOAD_DIR = "iotdb-load"
DIALECTS = ("0.12", "2.0")
CONNECT_TIMEOUT = 60.0
TSFILE_HEAD = 7  # "TsFile" and the version byte: a deletion offset here covers no chunk
HELD_RETRY = 60.0
"""Seconds between two tries of a held file as its sender's later files load."""
TABLE_MODEL = "Attempted to load a table-model TsFile into tree-model"
"""2.x's refusal of a table-model file loaded as tree-model (LoadTsFileToTreeModelAnalyzer)."""
NO_CONVERT_KEY = "Invalid parameter 'convert-on-type-mismatch'"
"""1.3's refusal of the LOAD key it does not know (LoadTsFileConfigurator)."""
_MISSING, _UNREACHABLE = 3, 4


@dataclass(frozen=True)
class Settings:
    """``[receiver.storage]`` with ``kind = "iotdb"``: where the IoTDB is and how to speak
    to it."""

    host: str = field(default="127.0.0.1", metadata=setting(Host()))
    port: int = field(default=6667, metadata=setting(Integer(1, 65535)))
    user: str = field(default="root", metadata=setting(Text()))
    #: A file whose first line is the IoTDB user's password (none: IoTDB's default).
    password_file: Path | None = field(default=None, metadata=setting(PathValue()))
    #: The statements' dialect: "0.12" (0.12, 0.13) or "2.0" (1.x, 2.x).
    dialect: str = field(default="2.0", metadata=setting(Choice(DIALECTS)))
    #: The Python that runs IoTDB's client (``sealsync[iotdb]``); none: this one.
    python: Path | None = field(default=None, metadata=setting(PathValue()))


@dataclass(frozen=True)
class IoTDBSettings:
    """What the client needs at run time: the settings with the password read."""

    host: str = "127.0.0.1"
    port: int = 6667
    user: str = "root"
    password: str = "root"
    dialect: str = "2.0"
    python: str = sys.executable
    connect_timeout: float = CONNECT_TIMEOUT

    @classmethod
    def from_settings(cls, settings: Settings) -> IoTDBSettings:
        """An unreadable password file is a ConfigError naming it."""
        password = "root"
        if settings.password_file is not None:
            try:
                with open(settings.password_file, encoding="utf-8") as f:
                    password = f.readline().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"[receiver.storage] password_file: cannot read "
                    f"{settings.password_file}: {exc.strerror or exc}"
                ) from None
        python = str(settings.python) if settings.python is not None else sys.executable
        return cls(settings.host, settings.port, settings.user, password, settings.dialect, python)


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def load_statement(
    dialect: str, path: str, *, table_database: str | None = None, convert_key: bool = True
) -> str:
    """The ``LOAD`` of one file, in ``dialect``: into a table-model database when
    ``table_database`` (2.x), never converting a value to another series type."""
    if dialect == "0.12":
        return f"LOAD {_text(path)}"
    options = ["'on-success'='none'"]
    if convert_key:
        options.append("'convert-on-type-mismatch'='false'")
    if table_database is not None:
        options += ["'model'='table'", f"'database-name'={_text(table_database)}"]
    return f"LOAD {_text(path)} WITH ({', '.join(options)})"


class IoTDBRefused(StorageError):
    """IoTDB answered a statement with an error status (the file, the schema, the data
    centre's state); not a lost session. ``answer`` is IoTDB's own words."""

    def __init__(self, message: str, answer: str = "") -> None:
        super().__init__(message)
        self.answer = answer or message


class IoTDBClient:
    """One session of IoTDB's client, in a worker process; statements in turn."""

    def __init__(self, settings: IoTDBSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        s = self.settings
        try:
            process = subprocess.Popen(
                [s.python, str(WORKER), s.host, str(s.port), s.user, str(s.connect_timeout)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError as exc:
            raise ConfigError(
                f"[receiver.storage] python: cannot run {s.python}: {exc.strerror or exc}"
            ) from None
        stdin = process.stdin
        assert stdin is not None
        stdin.write(s.password + "\n")
        stdin.flush()
        hello = self._read(process)
        if hello.get("ready"):
            return process
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        process.wait()
        if "missing" in hello:
            raise ConfigError(
                f'kind = "iotdb" needs IoTDB\'s Python client, which {s.python} lacks: '
                "pip install 'sealsync[iotdb]' there, or set python in [receiver.storage] to "
                "a Python that has it"
            )
        raise SealsyncError(
            f"IoTDB at {s.host}:{s.port} did not accept a session: {hello.get('error')}; "
            "start it, or fix host, port or user in [receiver.storage]"
        )

    @staticmethod
    def _read(process: subprocess.Popen[str]) -> dict[str, Any]:
        stdout: IO[str] | None = process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            code = process.wait()
            return {"ok": False, "error": f"the IoTDB client process exited ({code})"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def connect(self) -> None:
        """Start the session now (serve's start): a missing client stops it there."""
        with self._lock:
            if self._process is None:
                self._process = self._start()

    def sql(self, statement: str) -> None:
        """Run one statement; IoTDBRefused with the server's message if refused,
        StorageError if IoTDB was not reached."""
        self._call({"sql": statement}, statement)

    def query(self, statement: str) -> tuple[list[str], list[list[Any]]]:
        """The column names and rows (each its fields) of one query."""
        answer = self._call({"query": statement}, statement)
        return list(answer["columns"]), list(answer["rows"])

    def _call(self, request: dict[str, str], statement: str) -> dict[str, Any]:
        with self._lock:
            for attempt in (1, 2):  # a session lost (IoTDB restarted) is opened once more
                if self._process is None or self._process.poll() is not None:
                    self._process = self._start()
                stdin = self._process.stdin
                assert stdin is not None
                try:
                    stdin.write(json.dumps(request) + "\n")
                    stdin.flush()
                except BrokenPipeError:
                    self._process = None
                    continue
                answer = self._read(self._process)
                if answer.get("ok"):
                    return answer
                if self._process.poll() is None or attempt == 2:
                    error = str(answer.get("error"))
                    message = f"IoTDB refused {statement}: {error}"
                    if answer.get("refused"):
                        raise IoTDBRefused(message, error.partition(": ")[2] or error)
                    raise StorageError(message)
                self._process = None
            raise StorageError(f"IoTDB's client stopped during {statement}")

    def close(self) -> None:
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class IoTDBStorage(DirectoryStorage):
    """The default storage's copies, each loaded into IoTDB once, its deletions applied."""

    keeps_senders_apart = False  # IoTDB merges every sender's points of one device

    def __init__(self, data_dirs: list[Path], schema_dir: Path, settings: IoTDBSettings) -> None:
        super().__init__(data_dirs)
        if settings.dialect not in DIALECTS:
            raise ConfigError(f"[receiver.storage] dialect: must be one of {DIALECTS}")
        self.settings = settings
        self.client = IoTDBClient(settings)
        self._state_path = Path(schema_dir) / STATE_NAME
        self._state_lock = threading.Lock()
        self._loaded: dict[tuple[str, str], int] = {}  # -> deletions applied
        self._held: dict[tuple[str, str], str] = {}  # refused by IoTDB -> why
        self._tried: dict[str, float] = {}  # sender -> when its held files were last tried
        self._ranges: dict[tuple[str, str], Ranges | None] = {}
        self._convert_key = settings.dialect == "2.0"
        self._state: durable.AppendLog | None = None
        self._schema_dir = Path(schema_dir)
        self._owners: DeviceOwners | None = None  # opened at the first deletion sent
        self._guard: SchemaGuard | None = None

    def start(self) -> None:
        """Read which files IoTDB has loaded, open its session (a missing client or
        an IoTDB that refuses the session stops the start here), tidy as the
        directory storage does, and try the held files again."""
        if self._state is not None:
            return
        for line in durable.read_lines(self._state_path):
            kind, _, rest = line.partition(" ")
            sender, _, rest = rest.partition(" ")
            if kind == "load":
                self._loaded[(sender, rest)] = 0
                self._held.pop((sender, rest), None)
            elif kind == "mods":
                count, _, name = rest.partition(" ")
                self._loaded[(sender, name)] = int(count)
            elif kind == "held":
                self._held[(sender, rest)] = "refused before this start"
            elif kind == "forget":
                self._loaded.pop((sender, rest), None)
                self._held.pop((sender, rest), None)
        self.client.connect()
        self._state = durable.AppendLog(self._state_path)
        super().start()
        for sender in sorted({s for s, _ in self._held}):
            self._retry_held(sender, now=True)

    def connect(self) -> IoTDBStorage:
        """:meth:`start`, for a host that builds and starts the storage in one
        expression."""
        self.start()
        return self

    def close(self) -> None:
        self.client.close()
        if self._owners is not None:
            self._owners.close()
            self._owners = None
        if self._state is not None:
            self._state.close()
            self._state = None

    def loaded_into_iotdb(self, sender: str) -> set[str]:
        """Names of ``sender`` IoTDB has loaded (for tests and status)."""
        with self._state_lock:
            return {name for s, name in self._loaded if s == sender}

    def held_from_iotdb(self, sender: str) -> dict[str, str]:
        """Names of ``sender`` IoTDB refused, each with why (for tests and status)."""
        with self._state_lock:
            return {name: why for (s, name), why in self._held.items() if s == sender}

    def _record(self, line: str) -> None:
        if self._state is None:
            raise StorageError("the IoTDB storage is not started")
        with self._state_lock:
            self._state.append(line)

    def _placed(self, sender: str, name: str) -> tuple[Path, Path] | None:
        """The data dir holding ``sender``'s ``name``, and the file there."""
        for data_dir in self.data_dirs:
            target = self.target(data_dir, sender, name)
            if target.exists():
                return data_dir, target
        return None

    def load(self, sender: str, name: str, staged: Path) -> None:
        super().load(sender, name, staged)
        placed = self._placed(sender, name)
        if placed is None:
            raise StorageError(f"{name}: placed, but no data dir holds it")
        if self._bring_in(sender, name, *placed):
            self._retry_held(sender, now=False)

    def _bring_in(self, sender: str, name: str, data_dir: Path, target: Path) -> bool:
        """Load the file into IoTDB if it is not in, then the deletions it has beyond
        those applied; False when IoTDB refused it (held aside, said once)."""
        key = (sender, name)
        with self._state_lock:
            applied = self._loaded.get(key)
        deletions = self._deletions(target)
        if applied is None:
            refusal = self._load_file(data_dir, sender, name, target)
            if refusal is not None:
                self._hold(key, refusal)
                return False
            # 2.x takes the .mods2 beside the file into the loaded file itself.
            applied = 0 if self.settings.dialect == "0.12" else len(deletions)
            self._record(f"load {sender} {name}")
            with self._state_lock:
                self._loaded[key] = 0
                self._held.pop(key, None)
            if applied:
                self._record(f"mods {sender} {applied} {name}")
                with self._state_lock:
                    self._loaded[key] = applied
            if self.settings.dialect == "2.0":
                self._load_above(sender, name)
        if len(deletions) < applied:
            log.warning(
                "%s of %s: its deletions were rewritten (%d, %d applied before); "
                "IoTDB keeps what it applied",
                name,
                sender,
                len(deletions),
                applied,
            )
            return True
        if len(deletions) == applied:
            return True
        size = target.stat().st_size
        devices = self._devices(sender)
        for deletion in deletions[applied:]:
            if not isinstance(deletion, SeriesDeletion):
                log.warning(
                    "%s of %s: %s of its deletions is a table-model deletion, which the "
                    "IoTDB storage does not apply; delete those rows in IoTDB",
                    name,
                    sender,
                    deletion.where,
                )
                continue
            if deletion.below_offset is not None and deletion.below_offset <= TSFILE_HEAD:
                continue  # reached the file before any chunk was in it: covers none
            if deletion.below_offset is not None and deletion.below_offset < size:
                log.warning(
                    "%s of %s: the deletion at %s covers only the chunks below byte %d; "
                    "IoTDB's DELETE covers the whole range",
                    name,
                    sender,
                    deletion.where,
                    deletion.below_offset,
                )
            self._apply(name, sender, deletion, devices)
        self._record(f"mods {sender} {len(deletions)} {name}")
        with self._state_lock:
            self._loaded[key] = len(deletions)
            self._tried.pop(sender, None)  # a series may be empty now: try held files
        return True

    def _hold(self, key: tuple[str, str], refusal: str) -> None:
        with self._state_lock:
            before = self._held.get(key)
            self._held[key] = refusal
        if before is None:
            self._record(f"held {key[0]} {key[1]}")
        if before != refusal:
            log.warning(
                "%s of %s: not loaded into IoTDB, held aside (the receiver keeps it, the "
                "Spark loader reads it; tried again as more of the sender's files and "
                "deletions come in, and at each start): %s",
                printable(key[1]),
                key[0],
                printable(refusal),
            )

    def _retry_held(self, sender: str, *, now: bool) -> None:
        """Try ``sender``'s held files again, lowest priority first (at most once a
        :data:`HELD_RETRY` unless ``now`` or a deletion was applied since)."""
        clock = time.monotonic()
        with self._state_lock:
            names = sorted((n for s, n in self._held if s == sender), key=priority)
            last = self._tried.get(sender)
            if not names or (not now and last is not None and clock - last < HELD_RETRY):
                return
            self._tried[sender] = clock
        for name in names:
            placed = self._placed(sender, name)
            if placed is not None and self._bring_in(sender, name, *placed):
                log.info("%s of %s: loaded into IoTDB after being held aside", name, sender)

    def _load_file(self, data_dir: Path, sender: str, name: str, target: Path) -> str | None:
        """LOAD the file (its types first settled with the data centre's); None when
        loaded, else why IoTDB did not take it."""
        try:
            series = tsfile_meta.read(target).series_types
        except (FormatError, OSError):
            series = ()  # not a TsFile this reader walks: IoTDB says what it thinks
        if self._guard is None:
            self._guard = SchemaGuard(self.client, self.settings.dialect)
        try:
            refusal = self._guard.check(series)
            if refusal is None:
                self._load_any(data_dir, sender, name, target)
        except IoTDBRefused as exc:
            return f"IoTDB refused it: {exc.answer}"
        if refusal is None:
            self._guard.loaded(series)
        return refusal

    def _load_any(self, data_dir: Path, sender: str, name: str, target: Path) -> None:
        """LOAD as tree model, else (2.x says it is table-model) into the table-model
        database its name gives; 1.3's refusal of the conversion key drops the key."""
        table: str | None = None
        for _ in range(3):
            try:
                self._link_and_load(data_dir, sender, target, table)
                return
            except IoTDBRefused as exc:
                if NO_CONVERT_KEY in str(exc) and self._convert_key:
                    self._convert_key = False
                elif TABLE_MODEL in str(exc) and table is None:
                    table = database_of(name)
                    if table is None:
                        raise IoTDBRefused(
                            str(exc),
                            f"{exc.answer} (a table-model file whose "
                            "name gives no database folder)",
                        ) from None
                else:
                    raise

    def _load_above(self, sender: str, name: str) -> None:
        """Load again, in the edge's order, the files that outrank ``name`` where they
        overlap it (:mod:`receiver.storage.iotdb_order`)."""
        partition = partition_of(name)
        if partition is None:
            return
        with self._state_lock:
            same = [n for s, n in self._loaded if s == sender and partition_of(n) == partition]
        for other in load_again(name, same, lambda n: self._ranges_of(sender, n)):
            placed = self._placed(sender, other)
            if placed is None:
                continue
            try:
                self._load_any(placed[0], sender, other, placed[1])
            except IoTDBRefused as exc:
                log.warning(
                    "%s of %s: not loaded again after %s, which it outranks at the edge: "
                    "IoTDB may answer that file's values where both hold a point: %s",
                    other,
                    sender,
                    name,
                    printable(exc),
                )
            else:
                log.info("%s of %s: loaded again after %s, which it outranks", other, sender, name)

    def _ranges_of(self, sender: str, name: str) -> Ranges | None:
        """Each device's first and last time in the file, from its ``.resource``."""
        key = (sender, name)
        with self._state_lock:
            if key in self._ranges:
                return self._ranges[key]
        placed = self._placed(sender, name)
        try:
            found: Ranges | None = (
                None if placed is None else resource.read(f"{placed[1]}.resource").devices
            )
        except (OSError, FormatError, ValueError):
            found = None
        with self._state_lock:
            self._ranges[key] = found
        return found

    def _devices(self, sender: str) -> OwnedDevices:
        """The devices ``sender`` owns now, and every other sender's."""
        with self._state_lock:  # loader threads of several senders get here at once
            if self._owners is None:
                self._owners = DeviceOwners(self._schema_dir)
            book = self._owners
        by_owner = book.by_owner()
        others = [d for owner, found in by_owner.items() if owner != sender for d in found]
        return OwnedDevices(by_owner.get(sender, []), others)

    def _apply(
        self, name: str, sender: str, deletion: SeriesDeletion, devices: OwnedDevices
    ) -> None:
        """One entry, as statements over ``sender``'s own devices only."""
        scoped = scoped_statements(deletion, self.settings.dialect, devices)
        for reason in scoped.refused:
            log.warning(
                "%s of %s: the deletion at %s is not applied to %s; delete those points "
                "in IoTDB by hand if they should go",
                name,
                sender,
                deletion.where,
                reason,
            )
        if not scoped.statements and not scoped.refused:
            log.debug(
                "%s of %s: the deletion at %s covers no device of it", name, sender, deletion.where
            )
        for statement in scoped.statements:
            self.client.sql(statement)

    def _deletions(self, target: Path) -> list[Any]:
        """The deletion records shipped beside ``target`` (``.mods`` or ``.mods2``)."""
        for suffix, reader in ((".mods2", mods2.read), (".mods", mods.read)):
            path = Path(f"{target}{suffix}")
            if path.exists():
                return list(reader(path))
        return []

    def _link_and_load(
        self, data_dir: Path, sender: str, target: Path, table: str | None = None
    ) -> None:
        """Hard links to the placed file for IoTDB to load (0.12 moves them away)."""
        folder = data_dir / LOAD_DIR / sender
        make_dirs(folder)
        suffixes = ("", ".resource") + ((".mods2",) if self.settings.dialect == "2.0" else ())
        links = []
        for suffix in suffixes:
            src, dst = Path(f"{target}{suffix}"), folder / f"{target.name}{suffix}"
            durable.unlink(dst)
            if src.exists():
                os.link(src, dst)
                links.append(dst)
        statement = load_statement(
            self.settings.dialect,
            str(folder / target.name),
            table_database=table,
            convert_key=self._convert_key,
        )
        try:
            self.client.sql(statement)
        finally:
            for link in links:
                durable.unlink(link)

    def delete(self, sender: str, name: str) -> bool:
        """The receiver's copy goes; in 0.12 IoTDB's copy too (``REMOVE``), in 2.x IoTDB
        keeps the points (it has no statement that unloads a file)."""
        removed = super().delete(sender, name)
        key = (sender, name)
        with self._state_lock:
            known = key in self._loaded
            held = key in self._held
            self._ranges.pop(key, None)
        if known and self.settings.dialect == "0.12":
            # 0.12 finds the file by its name and its storage group, virtual storage
            # group and partition by the three folders above it, which the name has.
            path = str(self.data_dirs[0] / LOAD_DIR / sender / name).replace("'", "''")
            try:
                self.client.sql(f"REMOVE '{path}'")
            except StorageError as exc:  # compacted by IoTDB meanwhile: its points stay
                log.warning("%s of %s: IoTDB did not remove it: %s", name, sender, exc)
        if known or held:
            self._record(f"forget {sender} {name}")
            with self._state_lock:
                self._loaded.pop(key, None)
                self._held.pop(key, None)
        return removed


def open_storage(config: Any, settings: Settings) -> IoTDBStorage:
    """The IoTDB storage a receiver config asks for, built (``start`` opens its session)."""
    runtime = IoTDBSettings.from_settings(settings)
    return IoTDBStorage(list(config.data_dirs), config.schema_dir, runtime)
