"""``OWNERS_QUERY`` tells a sender nothing of another sender's devices, against a real
``sealsync serve`` and ``sealsync send``.

It once answered any names: 2,500 guessed device names in one query found every
device of another sender. Now it answers a sender about its own devices and about
those a conflict verdict to it named. The honest sender's use of it (a file refused
for a conflict is not sent again until its device is released) still works.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC
from receiver_service_helpers import tsfile_bytes
from reliability.figures import record

from sealsync.protocol import (
    ANOTHER_SENDER,
    FileVerdict,
    Owners,
    OwnersQuery,
    RoundDone,
    RoundEnd,
    RoundReady,
    Welcome,
)
from security.attacks import Site

pytestmark = pytest.mark.slow

GUESSES = [f"root.sg{g}.d{d}" for g in range(50) for d in range(50)]  # the honest four among them
SHARED = "root.shared.d0"
# a conflict names the owner by its HELLO name (never its UUID), or as another sender
OWNED_BY = r"device root\.sg0\.d0 is owned by (sender '[^']*'|another sender)"


def test_guessed_device_names_reveal_nothing_of_another_sender(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    site.start()
    try:
        code, stderr = site.honest_round()  # the honest sender owns root.sg{0,1}.d{0,1}
        with site.hostile_session() as client:
            assert isinstance(client.hello(str(uuid.uuid4())), Welcome)
            client.send(OwnersQuery(GUESSES))
            guessed = client.recv()
            assert client.round_start() == RoundReady("ready", "")
            # the same guesses as the devices of a file: its verdict names one of them
            client.send_file(
                1, "sequence/root.sg0/1/0/1-1-0-0.tsfile", tsfile_bytes(tmp_path, GUESSES, 1)
            )
            client.send_file(
                2, "sequence/root.shared/1/0/2-2-0-0.tsfile", tsfile_bytes(tmp_path, [SHARED])
            )
            verdicts = [client.recv(), client.recv()]
            client.send(OwnersQuery(GUESSES))
            after_verdict = client.recv()
            client.send(RoundEnd())
            assert isinstance(client.recv(), RoundDone)
        # the honest sender's file with a device the hostile one now owns: refused, then
        # not sent again while it is owned, then sent once the operator releases it
        site.honest.edge.write_file("root.shared", 0, devices=[SHARED], rows_per_device=5)
        conflicted = site.honest.send()
        waited = site.honest.send()
        released = subprocess.run(
            [*SEALSYNC, "owners", "--config", str(site.dep.receiver_config), "release", SHARED],
            capture_output=True,
            text=True,
            timeout=60,
        )
        resent = site.honest.send()
    finally:
        site.stop()
    honest = {f"root.sg{g}.d{d}" for g in range(2) for d in range(2)}
    revealed = set(guessed.owners) if isinstance(guessed, Owners) else {"?"}
    held = revealed == set() and code == 0 and resent.returncode == 0
    record("security", attack="OWNERS_QUERY of 2,500 guessed device names", tried=2, held=held)
    assert code == 0, stderr
    assert guessed == Owners({})  # nothing of the honest sender's four devices
    conflict, claimed = verdicts
    assert isinstance(conflict, FileVerdict) and conflict.status == "conflict", conflict
    assert re.search(OWNED_BY + r" \(and 3 more devices\)", conflict.reason), conflict.reason
    assert isinstance(claimed, FileVerdict) and claimed.status == "verified", claimed
    # what the verdict named, and not the three others it counted
    assert after_verdict == Owners({"root.sg0.d0": ANOTHER_SENDER})
    assert set(after_verdict.owners) < honest  # type: ignore[union-attr]
    assert conflicted.returncode != 0 and "conflict" in conflicted.stdout + conflicted.stderr
    out = waited.stdout + waited.stderr
    whose = "(sender '[^']*'|another sender)"
    assert re.search(f"device {SHARED} owned by {whose} on the receiver; not resent", out), out
    assert "shipped 0 files" in out, out
    assert released.returncode == 0 and f"released {SHARED}" in released.stdout
    assert resent.returncode == 0, resent.stderr
    assert site.honest_files_loaded()
