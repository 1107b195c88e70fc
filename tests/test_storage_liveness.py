"""A storage that goes away under a running receiver (receiver/liveness.py) and a
replaced storage at the next start (receiver/identity.py's record), replayed with real
``serve`` and ``send`` processes: the data dir renamed away and an empty folder put at
its path, or renamed away for good. The receiver says "storage gone" once in its log,
``sealsync_receiver_storage_ok`` is 0, a sender is turned away with that line and
nothing is written into the replacement; the same folder back, rounds go on and
nothing was lost. Restarted on the empty folder, ``serve`` and ``serve --init`` refuse
it until told, with ``--replaces``, which storage is gone for good."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, free_port, make_deployment, populate, tree
from prometheus_client.parser import text_string_to_metric_families

from receiver.identity import MARKER, read_record
from sealsync.config import load_receiver_config

pytestmark = pytest.mark.slow  # real receivers and senders

EXIT_USAGE = 2
REPLACED = "renamed away or replaced, or a disk unmounted"
UNIT = Path(__file__).resolve().parent.parent / "examples" / "sealsync-receiver.service"


def with_metrics(dep: Deployment) -> int:
    port = free_port()
    text = dep.receiver_config.read_text() + f'metrics_listen = "127.0.0.1:{port}"\n'
    dep.receiver_config.write_text(text)
    return port


def storage_ok(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "sealsync_receiver_storage_ok":
            return float(family.samples[0].value)
    raise AssertionError("no sealsync_receiver_storage_ok")


def wait_for(dep: Deployment, text: str, count: int = 1, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while dep.log().count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in {dep.log()}"
        time.sleep(0.1)


def recorded_storage(dep: Deployment) -> str:
    record = read_record(load_receiver_config(dep.receiver_config))
    assert record is not None
    return record.storage


def serve(dep: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    """A ``serve`` refused at start (it exits at once with its line)."""
    return subprocess.run(
        [*SEALSYNC, "serve", "--config", str(dep.receiver_config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def gone_line(dep: Deployment, what: str) -> str:
    return (
        f"storage gone: data_dirs[0] {dep.receiver_data} (storage {recorded_storage(dep)}) "
        f"{what} since the receiver started: no round is taken and nothing is written until "
        "it is back; mount it back, or stop the receiver and put the storage in place "
        "(`sealsync serve` then checks it)"
    )


def test_a_data_dir_replaced_under_a_running_receiver_takes_nothing_until_it_is_back(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path / "site")
    port = with_metrics(dep)
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=2)
    moved = dep.receiver_data.with_name("data-moved")
    dep.start_receiver()
    try:
        assert sender.send().returncode == 0
        assert storage_ok(port) == 1
        os.rename(dep.receiver_data, moved)  # the storage taken away,
        dep.receiver_data.mkdir()  # an empty folder left at its path
        wait_for(dep, "storage gone: ")
        replaced = gone_line(dep, f"is another folder now ({REPLACED})")
        assert replaced in dep.log()
        assert storage_ok(port) == 0
        populate(sender.edge, groups=1, files=1, prefix="root.later")
        refused = sender.send()
        assert refused.returncode == 1
        assert refused.stderr == f"sealsync: error: receiver: {replaced}\n"
        assert list(dep.receiver_data.iterdir()) == []  # nothing written into the replacement
        assert dep.log().count("ERROR: storage gone: ") == 1  # one error, however many senders

        dep.receiver_data.rmdir()  # the storage back where it was
        os.rename(moved, dep.receiver_data)
        wait_for(dep, "storage back: ")
        assert storage_ok(port) == 1
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()  # nothing lost
    finally:
        assert dep.stop_receiver() == 0


def test_a_vanished_data_dir_is_refused_at_the_next_start_until_replaced_on_purpose(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=2)
    shipped = sender.sealed_hashes()
    storage = recorded_storage(dep)
    dep.start_receiver()
    try:
        assert sender.send().returncode == 0
        vanished = gone_line(dep, "vanished")
        os.rename(dep.receiver_data, dep.receiver_data.with_name("data-lost"))
        wait_for(dep, vanished)
        refused = sender.send()
        assert refused.returncode == 1 and "storage gone: data_dirs[0]" in refused.stderr
        assert not dep.receiver_data.exists()  # no folder made where the storage was
    finally:
        assert dep.stop_receiver() == 0

    dep.receiver_data.mkdir()  # the mount point, the disk gone for good
    before = tree(dep.root)
    expected = (
        f"sealsync: error: {dep.receiver_config}: [receiver] data_dirs[0]: storage gone: "
        f"{dep.receiver_data} holds no sealsync storage (no {MARKER}), but this receiver "
        f"served storage {storage} there ("
    )
    for args in ((), ("--init",)):
        result = serve(dep, *args)
        assert result.returncode == EXIT_USAGE, result.stderr
        assert result.stderr.startswith(expected) and result.stderr.count("\n") == 1
        assert result.stderr.endswith(
            f"if that storage is lost for good, start a new one with `sealsync serve --init "
            f"--replaces {storage}`\n"
        )
        assert tree(dep.root) == before  # nothing marked, no lock on the mount point

    # told on purpose: a new storage, refilled by the sender (nothing lost on the edge)
    dep.start_receiver(args=("--init", "--replaces", storage))
    try:
        # the schema dir is still storage's: the new data dir joins it
        assert json.loads((dep.receiver_data / MARKER).read_text())["storage"] == storage
        assert "folders set up anew in it (--replaces)" in dep.log()
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert "holds no file of this sender" in result.stderr  # the sender's own check
        assert dep.loaded_hashes(sender) == shipped
    finally:
        assert dep.stop_receiver() == 0


def test_the_shipped_unit_names_the_mounts_of_the_documented_storage() -> None:
    text = UNIT.read_text()
    [line] = [ln for ln in text.splitlines() if ln.startswith("RequiresMountsFor=")]
    assert line.split("=", 1)[1].split() == ["/var/lib/sealsync/schema", "/var/lib/sealsync/data"]
    assert "StateDirectory=sealsync-receiver" in text.splitlines()
