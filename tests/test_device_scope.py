"""Device ids reused across sites (receiver/load/owners.py, ``device_scope``), replayed
with real ``serve`` and ``send`` processes: two edges whose devices are both
``root.plant*``. By default the second site's files are conflicts, and the line names
the owner by its HELLO name; with ``device_scope = "sender"`` each sender's device ids
are its own, and the files refused before ship at the next send, nothing lost. The
IoTDB storage, which would merge the two sites' points, refuses that scope: ``serve``
and ``check`` exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, make_deployment, populate

from sender.manage.identity import hostname

pytestmark = pytest.mark.slow  # real receivers and senders

EXIT_USAGE = 2


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def configure(dep: Deployment, line: str) -> None:
    dep.receiver_config.write_text(dep.receiver_config.read_text() + line + "\n")


def test_sites_reusing_device_ids_are_conflicts_until_scoped_per_sender(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site", senders=2)
    first, second = dep.senders
    for sender in dep.senders:  # every plant has the same device ids
        populate(sender.edge, groups=1, files=2, prefix="root.plant")
    dep.start_receiver()
    try:
        assert first.send().returncode == 0
        refused = second.send()
        assert refused.returncode == 1
        assert f"is owned by sender '{hostname()}'" in refused.stderr, refused.stderr
        assert "another sender" not in refused.stderr
        assert f"owned by sender '{hostname()}'" in dep.log()  # the receiver's line too
        assert dep.loaded_hashes(second) == {}
        again = second.send()  # remembered: not resent, and the owner still named
        assert again.returncode == 1 and f"owned by sender '{hostname()}'" in again.stderr
    finally:
        assert dep.stop_receiver() == 0

    configure(dep, 'device_scope = "sender"')
    dep.start_receiver()
    try:
        shipped = second.send()
        assert shipped.returncode == 0, shipped.stderr
        assert dep.loaded_hashes(first) == first.sealed_hashes()
        assert dep.loaded_hashes(second) == second.sealed_hashes()
        assert "device_scope sender from now on" in dep.log()
    finally:
        assert dep.stop_receiver() == 0
    owners = json.loads(run("owners", "--config", str(dep.receiver_config), "--json").stdout)
    devices = owners["owners"]
    assert devices[first.uuid] == devices[second.uuid]  # the same ids, each sender's own
    assert devices[first.uuid] and all(d.startswith("root.plant") for d in devices[first.uuid])


def test_an_iotdb_storage_keeps_one_owner_per_device(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    configure(dep, 'device_scope = "sender"\n\n[receiver.storage]\nkind = "iotdb"')
    expected = (
        f'sealsync: error: {dep.receiver_config}: [receiver] device_scope = "sender": the '
        "iotdb storage keeps one set of points per device (IoTDB would merge two senders' "
        "points of one device), so a device keeps one owner there: leave device_scope out "
        '(or "receiver"), and give each site device ids of its own\n'
    )
    for command in ("serve", "check"):
        result = run(command, "--config", str(dep.receiver_config))
        assert result.returncode == EXIT_USAGE, result.stderr
        assert result.stderr == expected
