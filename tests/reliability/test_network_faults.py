"""Network faults between a real sender and a real ``sealsync serve`` (issue 7, item 2).

A :class:`~reliability.faultproxy.FaultProxy` sits on loopback between the sender and
the receiver process; the sender's config (and its ``known_hosts`` entry, pinned for
``[127.0.0.1]:<proxy port>`` with the receiver's host key) points at the proxy. Each
case plans faults at byte offsets chosen from the sizes the case ships: the SSH
handshake is the first ~2.5 KiB of either direction, then the schema log, then the
data files (upwards), or the verdicts (downwards).

Every case must end in a clean retry (the round reconnects and finishes: exact sets
by content hash on the receiver, no round state left on either side) or a clean
failure (``sealsync send`` exits 1 with one line on stderr and no traceback), after
which the next run converges. The phase a fault hit is checked, not assumed: rounds
run in process (``sync_to_receiver``, real SSH through the proxy) record the progress events
that came before the reconnect.

A flipped byte on the wire never reaches the protocol: SSH's MAC rejects the packet
and the connection dies, so it is a dropped connection. The MD5 check is exercised
by corrupting a chunk *before* it is framed (a wrapper around the sender's stream):
the receiver answers *mismatch* and the file is resent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from deploy_helpers import Deployment, Sender, make_deployment, populate
from reliability.faultproxy import DOWN, DROP, FLIP, STALL, UP, Fault, FaultProxy
from reliability.figures import record

from receiver.commit import MAX_BATCH
from sealsync.config import SenderConfig, load_sender_config
from sealsync.protocol import HEADER, Kind
from sender import attempt as attempt_module
from sender.attempt import AttemptReport, sync_to_receiver
from sender.manage.layout import SenderPaths
from sender.manage.state import read_file_set
from sender.transfer.client import connect_receiver
from sender.transfer.session import SenderSession

pytestmark = pytest.mark.slow  # sealsync serve and send as processes

IDLE_TIMEOUT = 3.0
"""The receiver's idle timeout here (default 120 s): a stall longer than it is testable."""
CONNECT_TIMEOUT = 3.0
"""The sender's connect (and SSH handshake) timeout here (default 10 s)."""
HANDSHAKE = 2000
"""Bytes well inside the SSH handshake in either direction (it is ~2.5 KiB each way)."""
AFTER_HANDSHAKE = 2600
"""Upwards, the first byte after the handshake and HELLO, give or take a packet."""
VERDICTS_FROM = 3200
"""Downwards, where verdicts start (handshake, WELCOME, schema acks, ROUND_READY)."""
VERDICT_BYTES = 110
"""Bytes a verdict takes downwards (its frame: a commit batch's verdicts, up to
``MAX_BATCH``, share one SSH packet)."""
SCHEMA_LINE = "CREATE TIMESERIES root.fault.d{i}.s{j} WITH DATATYPE=INT64"
BIG_ROWS = 20000
"""Rows per device of a "big" file: ~650 KiB, so a data-file offset lands mid-file."""


@dataclass
class Net:
    dep: Deployment
    proxy: FaultProxy
    sender: Sender
    """The sender, configured to go through the proxy."""
    config: SenderConfig
    cases: int = 0
    schema_lines: int = 0


@dataclass
class Batch:
    """What one case adds to the sender before its round."""

    names: list[str]
    file_bytes: int
    """Bytes of the new files' streams (data files plus sidecars)."""
    schema_bytes: int
    schema_size: int
    """The whole schema log's size after this batch."""


@dataclass
class Events:
    """Progress events of an in-process round, split at the first reconnect."""

    before: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    after: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    retries: int = 0

    def __call__(self, event: str, **fields: Any) -> None:
        if event == "retry":
            self.retries += 1
        (self.after if self.retries else self.before).append((event, fields))

    def count(self, event: str, status: str | None = None) -> int:
        return sum(
            1 for e, f in self.before if e == event and (status is None or f["status"] == status)
        )


def proxied_sender(dep: Deployment, proxy: FaultProxy, sender: Sender) -> Sender:
    """A config variant that reaches the receiver through the proxy, host key pinned there."""
    keys = dep.root / "keys"
    kind, b64 = (keys / "host.pub").read_text().split()[:2]
    known = keys / "known_hosts_proxy"
    known.write_text(f"[127.0.0.1]:{proxy.port} {kind} {b64}\n")
    text = sender.config.read_text()
    text = text.replace(f"port = {dep.port}", f"port = {proxy.port}")
    text = text.replace(str(keys / "known_hosts"), str(known))
    text = text.replace(
        "max_retries = 3\n", f"max_retries = 3\nconnect_timeout = {CONNECT_TIMEOUT}\n"
    )
    config = sender.config.with_name(f"{sender.name}-proxy.toml")
    config.write_text(text)
    return Sender(sender.name, sender.edge, config)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    dep = make_deployment(tmp_path_factory.mktemp("netfaults") / "site", senders=1)
    with open(dep.receiver_config, "a", encoding="utf-8") as f:
        f.write(f"idle_timeout = {IDLE_TIMEOUT}\n")
    dep.start_receiver()
    proxy = FaultProxy(dep.port).start()
    try:
        sender = proxied_sender(dep, proxy, dep.senders[0])
        dep.senders[0] = sender
        n = Net(dep, proxy, sender, load_sender_config(sender.config))
        populate(sender.edge, groups=1, files=2, prefix="root.warm")
        result = sender.send()  # starts the receiver's inspect workers, pins nothing new
        assert result.returncode == 0, result.stderr + dep.log()
        assert_converged(n)
        yield n
    finally:
        proxy.stop()
        dep.stop_receiver()


def assert_converged(net: Net) -> None:
    """The receiver holds exactly the sender's sealed set, and no round state is left."""
    assert net.dep.loaded_hashes(net.sender) == net.sender.sealed_hashes()
    assert net.dep.round_state_left() == []
    paths = SenderPaths(net.sender.edge.data_dirs[0], "127.0.0.1", net.proxy.port)
    assert read_file_set(paths.last_local_files) == set(net.sender.sealed_hashes())


def new_batch(net: Net, big: int = 2, small: int = 30, schema_bytes: int = 0) -> Batch:
    """Fresh files (and schema log bytes) that only this case ships."""
    net.cases += 1
    edge = net.sender.edge
    names = []
    prefix = f"root.case{net.cases}"
    for i in range(big):
        names.append(
            edge.write_file(
                f"{prefix}.a",
                0,
                devices=[f"{prefix}.a.d0", f"{prefix}.a.d1"],
                rows_per_device=BIG_ROWS,
                start_ms=i * 10**9,
            )
        )
    if small:
        names += populate(edge, groups=3, files=small // 3 - 1, prefix=f"{prefix}.g", rows=20)
    written = 0
    lines = []
    while written < schema_bytes:
        line = SCHEMA_LINE.format(i=net.schema_lines // 4, j=net.schema_lines % 4)
        net.schema_lines += 1
        lines.append(line)
        written += len(line) + 1
    if lines:
        edge.append_schema(lines)
    size = 0
    for name in names:
        for suffix in ("", ".resource", ".mods"):
            p = edge.path(name + suffix)
            size += p.stat().st_size if p.exists() else 0
    log = edge.schema_dir / "mlog.txt"
    return Batch(names, size, written, log.stat().st_size if log.exists() else 0)


def run_in_process(net: Net) -> tuple[AttemptReport, Events, float]:
    events = Events()
    started = time.monotonic()
    report = sync_to_receiver(net.config, net.config.receivers[0], progress=events)
    return report, events, time.monotonic() - started


def send_cli(net: Net, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    result = net.sender.send("--json", *args)
    doc = json.loads(result.stdout) if result.stdout.strip() else None
    return result.returncode, result.stderr, doc


def assert_one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# --- phases: a dropped, corrupted or stalled link ends in a clean retry ------------------


@pytest.mark.parametrize(
    "case",
    [
        "drop up mid-schema",
        "drop up mid-file",
        "reset up mid-file",
        "drop down mid-verdicts",
        "flip up mid-schema",
        "flip up mid-file",
        "flip down mid-verdicts",
    ],
)
def test_fault_mid_round_ends_in_a_clean_retry(net: Net, case: str) -> None:
    action, direction, phase = case.split()
    # mid-verdicts: enough files for at least three commit batches, whose verdicts go
    # down in one packet each, so that the middle of the verdict bytes lies after the
    # first batch's packet and before the last one's
    small = 3 * MAX_BATCH + 3 if phase == "mid-verdicts" else 30
    batch = new_batch(net, small=small, schema_bytes=(3 << 20) if phase == "mid-schema" else 0)
    if phase == "mid-schema":  # three 1 MiB SCHEMA frames: aim at the second
        offset = AFTER_HANDSHAKE + (3 << 19)
    elif phase == "mid-file":  # the two big files come first: aim at the first
        offset = AFTER_HANDSHAKE + BIG_ROWS * 10
    else:
        offset = VERDICTS_FROM + VERDICT_BYTES * len(batch.names) // 2
    fault = Fault(
        UP if direction == "up" else DOWN,
        offset,
        FLIP if action == "flip" else DROP,
        reset=action == "reset",
    )
    first = net.proxy.count()
    net.proxy.plan(fault)

    report, events, _ = run_in_process(net)

    assert [f.fault for f in net.proxy.fired_since(first)] == [fault]
    assert report.ok, json.dumps(report.to_dict(), indent=1) + net.dep.log()
    assert report.attempts == 2 and events.retries == 1
    assert sorted(report.dirs[0].shipped) == sorted(batch.names)  # each verified once
    if phase == "mid-schema":
        positions = [f["position"] for e, f in events.before if e == "schema"]
        assert len(positions) == 1 and positions[0] < batch.schema_size
        assert events.count("dir_start") == 0
        assert report.schema_bytes == batch.schema_bytes
    elif phase == "mid-file":
        # the round had started and not finished when the link died (a reset can land
        # while the first chunk is still in flight, before any "bytes" progress event)
        assert events.count("dir_start") == 1 and events.count("dir_end") == 0
        assert events.count("file") == 0  # the first big file never got its verdict
    else:
        assert 1 <= events.count("file", "verified") < len(batch.names)
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_short_stalls_only_slow_the_round(net: Net) -> None:
    batch = new_batch(net, schema_bytes=1 << 20)
    first = net.proxy.count()
    stalls = [
        Fault(UP, AFTER_HANDSHAKE + (1 << 19), STALL, seconds=1.0),  # mid-schema
        Fault(UP, AFTER_HANDSHAKE + (1 << 20) + BIG_ROWS * 10, STALL, seconds=1.0),  # mid-file
        Fault(DOWN, VERDICTS_FROM, STALL, seconds=1.0),  # around the first verdicts
    ]
    net.proxy.plan(*stalls)

    report, events, seconds = run_in_process(net)

    assert sorted(
        (f.fault.offset, f.fault.direction) for f in net.proxy.fired_since(first)
    ) == sorted((f.offset, f.direction) for f in stalls)
    assert seconds >= 2.0  # the up stalls cost their time; the down one overlaps
    assert report.ok and report.attempts == 1 and events.retries == 0, report.to_dict()
    assert sorted(report.dirs[0].shipped) == sorted(batch.names)
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_stall_longer_than_the_receivers_idle_timeout(net: Net) -> None:
    """The receiver gives the silent session up: a clean failure, then the next run converges.

    The receiver's ERROR reaches the sender (only the upward direction stalls) and ends
    the run; the file cut mid-stream is not synced, so the next run ships it. Silence
    inside a file stream is a stall (``stall_timeout``, never longer than the idle
    timeout), which the ERROR names.
    """
    batch = new_batch(net, small=9)
    net.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 10, STALL, seconds=IDLE_TIMEOUT + 2))

    code, stderr, doc = send_cli(net)

    assert code == 1
    assert assert_one_line(stderr).startswith("sealsync: error: receiver: session stalled: ")
    assert not set(batch.names) & set(net.dep.loaded_hashes(net.sender))
    paths = SenderPaths(net.sender.edge.data_dirs[0], "127.0.0.1", net.proxy.port)
    assert not set(batch.names) & read_file_set(paths.last_local_files)
    assert "), closing the session" in net.dep.log()  # "stalled (...), closing the session"

    code, stderr, doc = send_cli(net)
    assert code == 0 and stderr == "", stderr
    assert doc is not None and sorted(doc["receivers"][0]["dirs"][0]["shipped"]) == sorted(
        batch.names
    )
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_reply_stall_longer_than_the_senders_timeout(
    net: Net, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verdicts that stop coming: the sender gives the connection up and reconnects."""

    class Impatient(SenderSession):
        def __init__(self, stream: Any, **kwargs: Any) -> None:
            super().__init__(stream, **{**kwargs, "reply_timeout": 2.0})

    monkeypatch.setattr(attempt_module, "SenderSession", Impatient)
    batch = new_batch(net, big=0, small=30)
    first = net.proxy.count()
    net.proxy.plan(Fault(DOWN, VERDICTS_FROM, STALL, seconds=4.0))

    report, events, _ = run_in_process(net)

    assert len(net.proxy.fired_since(first)) == 1
    assert report.ok and report.attempts == 2 and events.retries == 1, report.to_dict()
    retry = [f["reason"] for e, f in events.after if e == "retry"]
    assert retry == ["no answer from the receiver for 2 s"]
    assert sorted(set(report.dirs[0].shipped)) == sorted(batch.names)
    assert_converged(net)
    record("network faults", cases=1, clean=1)


# --- the command line: clean failures, then convergence -----------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Fault(UP, HANDSHAKE, DROP),
        Fault(DOWN, HANDSHAKE, DROP),
        Fault(DOWN, HANDSHAKE, STALL, seconds=CONNECT_TIMEOUT + 1.5),
    ],
    ids=["drop up", "drop down", "stall longer than connect timeout"],
)
def test_handshake_fault_is_a_clean_failure_then_converges(net: Net, fault: Fault) -> None:
    batch = new_batch(net, big=1, small=6)
    net.proxy.plan(fault)

    code, stderr, _ = send_cli(net)

    assert code == 1
    line = assert_one_line(stderr)
    address = f"127.0.0.1:{net.proxy.port}"
    assert line.startswith(f"sealsync: error: SSH handshake with receiver {address} failed: ")
    assert not set(batch.names) & set(net.dep.loaded_hashes(net.sender))
    code, stderr, doc = send_cli(net)
    assert code == 0 and stderr == "", stderr
    assert doc is not None and sorted(doc["receivers"][0]["dirs"][0]["shipped"]) == sorted(
        batch.names
    )
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_link_failing_on_every_attempt_leaves_files_for_the_next_run(net: Net) -> None:
    batch = new_batch(net, big=2, small=9)
    for _ in range(net.config.max_retries):  # every connection of this run dies mid-file
        net.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 10, DROP))

    code, stderr, doc = send_cli(net)

    assert code == 1
    line = assert_one_line(stderr)
    assert "connection lost, gave up after 3 connections" in line, line
    assert doc is not None and doc["receivers"][0]["attempts"] == net.config.max_retries
    assert net.proxy.pending_plans == 0
    assert not set(batch.names) & set(net.dep.loaded_hashes(net.sender))
    paths = SenderPaths(net.sender.edge.data_dirs[0], "127.0.0.1", net.proxy.port)
    assert not set(batch.names) & read_file_set(paths.last_local_files)

    code, stderr, doc = send_cli(net)
    assert code == 0 and stderr == "", stderr
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_wire_byte_flip_through_the_cli_is_a_retry(net: Net) -> None:
    batch = new_batch(net, big=1, small=6)
    net.proxy.plan(Fault(UP, AFTER_HANDSHAKE + BIG_ROWS * 5, FLIP))

    code, stderr, doc = send_cli(net)

    assert code == 0 and stderr == "", stderr
    assert doc is not None and doc["receivers"][0]["attempts"] == 2
    assert sorted(doc["receivers"][0]["dirs"][0]["shipped"]) == sorted(batch.names)
    assert_converged(net)
    record("network faults", cases=1, clean=1)


# --- corruption SSH cannot see: the receiver's MD5 check -----------------------------------


class CorruptingStream:
    """The sender's stream, flipping one byte of the first CHUNK of named files.

    Sits where frames are written, after the sender hashed the bytes, so the MD5 in
    FILE_END no longer matches what arrives: the corruption a faulty NIC, RAM or
    buffer bug would cause before encryption. Each named file is corrupted once.
    """

    def __init__(self, stream: Any, targets: set[str]) -> None:
        self._stream = stream
        self.targets = set(targets)
        self.begins: dict[str, int] = {}
        self._pending = bytearray()  # unparsed header or control payload bytes
        self._kind: Kind | None = None
        self._left = 0  # payload bytes of the current frame still to come
        self._corrupt_next_chunk = False

    def recv(self, n: int) -> bytes:
        return self._stream.recv(n)

    def settimeout(self, t: float | None) -> None:
        self._stream.settimeout(t)

    def sendall(self, data: bytes | memoryview) -> None:
        out = bytearray(data)
        i = 0
        while i < len(out):
            if self._kind is None:  # reading a header
                take = min(HEADER.size - len(self._pending), len(out) - i)
                self._pending += out[i : i + take]
                i += take
                if len(self._pending) == HEADER.size:
                    kind, self._left = HEADER.unpack(bytes(self._pending))
                    self._kind, self._pending = Kind(kind), bytearray()
                    if self._left == 0:
                        self._kind = None
                continue
            take = min(self._left, len(out) - i)
            if self._kind is Kind.CHUNK:
                if self._corrupt_next_chunk and take:
                    out[i] ^= 0x5A
                    self._corrupt_next_chunk = False
            elif self._kind is Kind.FILE_BEGIN:
                self._pending += out[i : i + take]
            self._left -= take
            i += take
            if self._left == 0:
                if self._kind is Kind.FILE_BEGIN:
                    name = json.loads(bytes(self._pending))["name"]
                    self.begins[name] = self.begins.get(name, 0) + 1
                    if name in self.targets:
                        self.targets.discard(name)
                        self._corrupt_next_chunk = True
                self._kind, self._pending = None, bytearray()
        self._stream.sendall(bytes(out))


def test_md5_mismatch_is_resent_and_succeeds(net: Net, caplog: pytest.LogCaptureFixture) -> None:
    batch = new_batch(net, big=1, small=6)
    targets = {batch.names[0], batch.names[-1]}  # one multi-chunk file, one single-chunk
    streams: list[CorruptingStream] = []

    class Conn:
        def __init__(self, config: SenderConfig, receiver: Any) -> None:
            self._conn = connect_receiver(config, receiver)
            wrapped = CorruptingStream(self._conn.stream, targets if not streams else set())
            streams.append(wrapped)
            self.stream = wrapped

        def close(self) -> None:
            self._conn.close()

    caplog.set_level("INFO", logger="sealsync.sender.transfer.session")
    first = net.proxy.count()
    report = sync_to_receiver(net.config, net.config.receivers[0], connector=Conn)

    assert net.proxy.fired_since(first) == []
    assert report.ok and report.attempts == 1, report.to_dict()
    assert len(streams) == 1 and streams[0].targets == set()
    assert streams[0].begins == {n: 2 if n in targets else 1 for n in batch.names}
    resent = sorted(r.message.split(":")[0] for r in caplog.records if "mismatch" in r.message)
    assert resent == sorted(targets)
    assert sorted(report.dirs[0].shipped) == sorted(batch.names)
    assert "MD5 mismatch" in net.dep.log()
    assert_converged(net)
    record("network faults", cases=1, clean=1)


def test_proxy_forwards_untouched_without_a_plan(net: Net) -> None:
    """The harness itself: no plan, no fault, the round just works through the proxy."""
    batch = new_batch(net, big=1, small=3)
    first = net.proxy.count()
    report, events, _ = run_in_process(net)
    assert report.ok and report.attempts == 1 and events.retries == 0
    assert sorted(report.dirs[0].shipped) == sorted(batch.names)
    assert net.proxy.count() == first + 1 and net.proxy.fired_since(first) == []
    assert_converged(net)
