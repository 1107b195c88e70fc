"""Resume inside a file over real SSH (issue 15 item 1): ``sealsync serve`` and
``sealsync send`` as processes, a :class:`~reliability.faultproxy.FaultProxy` between
them that cuts (or holds) the link at a chosen byte of a 32 MiB TsFile's stream.

Bytes are counted at the proxy (upwards, every connection of the case): a resumed
file crosses about once, where a restart from byte 0 crossed 1.8 times. The stored
file is compared with the sender's by content hash, and no partial upload is left
once the file is verified.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, Sender, make_deployment, sha256
from reliability.faultproxy import DROP, STALL, UP, Fault, FaultProxy
from test_network_faults import proxied_sender

from receiver.partials import PARTIAL_FOLDER

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from benchlib import write_tsfile  # noqa: E402

pytestmark = pytest.mark.slow  # sealsync serve and send as processes, 32 MiB files

SIZE = 32 << 20
HANDSHAKE = 8 << 10
"""Upward bytes before the data file's stream: SSH handshake, HELLO, schema, ROUND_START."""
SEED = int(os.environ.get("SEALSYNC_RESUME_SEED", random.randrange(1 << 30)))


@dataclass
class Site:
    dep: Deployment
    proxy: FaultProxy
    sender: Sender
    templates: Path
    files: int = 0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("resume")
    templates = root / "templates"
    templates.mkdir()
    for seed in (1, 2):
        write_tsfile(templates / f"t{seed}.tsfile", SIZE, seed=seed, text=True)
    dep = make_deployment(root / "site", senders=1)
    dep.start_receiver()
    proxy = FaultProxy(dep.port).start()
    try:
        sender = proxied_sender(dep, proxy, dep.senders[0])
        dep.senders[0] = sender
        yield Site(dep, proxy, sender, templates)
    finally:
        proxy.stop()
        dep.stop_receiver()


def add_file(site: Site, template: int = 1, name: str | None = None) -> str:
    """A sealed copy of a 32 MiB template in the sender's data dir; its relative name."""
    if name is None:
        site.files += 1
        name = f"sequence/root.bench/0/{1_700_000_000_000 + site.files}-{site.files}-0.tsfile"
    path = site.sender.edge.data_dirs[0] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    shutil.copyfile(site.templates / f"t{template}.tsfile", tmp)
    os.replace(tmp, path)  # a new inode, a new mtime
    Path(f"{path}.resource").write_text("resource\n")
    return name


def upward(site: Site, since: int) -> int:
    return sum(c.forwarded[UP] for c in site.proxy.connections[since:])


def partials_left(site: Site) -> list[Path]:
    top = site.dep.receiver_data / "sync-receiver"
    return [p for p in top.glob(f"*/{PARTIAL_FOLDER}/*") if p.is_file()]


def assert_exact(site: Site) -> None:
    """The receiver holds exactly the sender's bytes, and nothing half-done is left."""
    assert site.dep.loaded_hashes(site.sender) == site.sender.sealed_hashes()
    assert site.dep.round_state_left() == []
    assert partials_left(site) == []


def send_ok(site: Site) -> None:
    result = site.sender.send("--json", timeout=180)
    assert result.returncode == 0, result.stderr + site.dep.log()


def send_until(site: Site, fault: Fault) -> subprocess.Popen[bytes]:
    """A ``sealsync send`` started with ``fault`` planned, returned once it fired."""
    site.proxy.plan(fault)
    proc = subprocess.Popen(
        [*SEALSYNC, "send", "--config", str(site.sender.config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    fired = len(site.proxy.fired)
    deadline = time.monotonic() + 120
    while len(site.proxy.fired) == fired:
        assert proc.poll() is None, "send ended before the fault: " + site.dep.log()
        assert time.monotonic() < deadline, "the fault never fired"
        time.sleep(0.005)
    return proc


def cut_and_kill_sender(site: Site, at: int) -> None:
    """A run whose link is cut at upward byte ``at``, the sender SIGKILLed right after
    (before its retry); what is left for the next run is the receiver's partial."""
    proc = send_until(site, Fault(UP, at, DROP))
    proc.kill()
    proc.wait()
    site.proxy.clear()


def wait_for_partial(site: Site, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(p.suffix == ".json" for p in partials_left(site)):
        assert time.monotonic() < deadline, "no partial upload kept: " + site.dep.log()
        time.sleep(0.05)


def test_cut_at_80_percent_resumes_within_the_round(site: Site) -> None:
    name = add_file(site)
    since = site.proxy.count()
    site.proxy.plan(Fault(UP, HANDSHAKE + SIZE * 8 // 10, DROP))
    send_ok(site)
    assert len(site.proxy.connections) - since >= 2  # the cut and the retry
    crossed = upward(site, since)
    assert crossed <= 1.1 * SIZE, f"{crossed / SIZE:.3f} of the file crossed: " + site.dep.log()
    assert_exact(site)
    assert name in site.dep.loaded_hashes(site.sender)
    # all the proxy forwarded before the cut was kept, bar a few SSH packets (the
    # bytes a dead link's window held are read out, not dropped)
    kept = [int(n) for n in re.findall(r"kept (\d+) bytes", site.dep.log())]
    assert kept and kept[-1] >= SIZE * 8 // 10 - (256 << 10), site.dep.log()


def kept_of(site: Site, name: str) -> int:
    """The bytes of ``name`` the receiver last said it kept to resume from."""
    kept = re.findall(rf"kept (\d+) bytes of {re.escape(name)} ", site.dep.log() + " ")
    assert kept, "no partial upload kept: " + site.dep.log()
    return int(kept[-1])


def test_resume_in_the_next_round_after_the_sender_is_killed(site: Site) -> None:
    name = add_file(site)
    cut_and_kill_sender(site, HANDSHAKE + SIZE * 8 // 10)
    wait_for_partial(site)
    # What the receiver keeps is what reached it: the proxy's close may reset the
    # link, and the bytes still in the receiver's socket buffers are then lost.
    kept = kept_of(site, name)
    assert kept >= SIZE // 2, f"only {kept / SIZE:.3f} of the file was kept of 0.8 sent"
    again = site.proxy.count()
    send_ok(site)
    second = upward(site, again)
    # the next round sends what was not kept, not the file again
    assert second <= SIZE - kept + 0.05 * SIZE, (
        f"the next round sent {second / SIZE:.3f} of the file, {kept / SIZE:.3f} was kept"
    )
    assert_exact(site)


def test_a_different_file_under_the_same_name_does_not_resume(site: Site) -> None:
    name = add_file(site, template=1)
    cut_and_kill_sender(site, HANDSHAKE + SIZE // 2)
    wait_for_partial(site)
    add_file(site, template=2, name=name)  # another file under the name
    assert sha256(site.sender.edge.data_dirs[0] / name) != sha256(site.templates / "t1.tsfile")
    again = site.proxy.count()
    send_ok(site)
    assert upward(site, again) >= 0.95 * SIZE  # sent whole: nothing of the old one reused
    assert site.dep.loaded_hashes(site.sender)[name] == sha256(site.templates / "t2.tsfile")
    assert_exact(site)


@pytest.mark.parametrize("victim", ["receiver", "sender"])
def test_kill9_during_a_resumed_transfer_ends_with_the_senders_bytes(
    site: Site, victim: str
) -> None:
    rng = random.Random(f"{SEED}-{victim}")
    first_cut = int(SIZE * rng.uniform(0.2, 0.6))
    print(f"SEALSYNC_RESUME_SEED={SEED}: {victim}, first cut at {first_cut}")
    add_file(site)
    cut_and_kill_sender(site, HANDSHAKE + first_cut)
    wait_for_partial(site)
    # the resumed run: held at a random byte of what is left, then a kill -9
    hold_at = HANDSHAKE + int((SIZE - first_cut) * rng.uniform(0.05, 0.95))
    proc = send_until(site, Fault(UP, hold_at, STALL, seconds=3.0))
    time.sleep(rng.uniform(0.0, 0.5))
    if victim == "receiver":
        site.dep.stop_receiver(signal.SIGKILL)
        site.dep.start_receiver()  # restarted at once: the sender's reconnects find it
        proc.wait(120)  # within reconnect_time: finished, or given up for the next run
    else:
        proc.kill()
        proc.wait()
    site.proxy.clear()
    for _ in range(4):
        result = site.sender.send("--json", timeout=180)
        if result.returncode == 0:
            break
        time.sleep(1)
    assert result.returncode == 0, result.stderr + site.dep.log()
    assert_exact(site)


def test_expired_partials_are_removed_by_the_receivers_recovery(site: Site) -> None:
    """Last in the module: it restarts the receiver with ``partial_max_age`` = 1 s."""
    add_file(site)
    cut_and_kill_sender(site, HANDSHAKE + SIZE // 2)
    wait_for_partial(site)
    site.dep.stop_receiver()
    with open(site.dep.receiver_config, "a", encoding="utf-8") as f:
        f.write("partial_max_age = 1.0\n")
    time.sleep(1.5)
    site.dep.start_receiver()  # service-start recovery sweeps the expired partial
    assert partials_left(site) == [], site.dep.log()
    assert "partial-upload file(s)" in site.dep.log()
    again = site.proxy.count()
    send_ok(site)
    assert upward(site, again) >= 0.95 * SIZE  # nothing held any more: sent whole
    assert_exact(site)
