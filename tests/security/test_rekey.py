"""Re-keying and retiring a sender in one step (issue 16, item 4).

The documented way to give a sender a new key used to be deleting its line from
``sender_keys.txt``: until the sender reconnected, any authorized key could claim
its UUID, delete its files and ship for its devices. ``sealsync senders rekey`` moves
the binding in one write and ``sealsync senders retire`` retires a UUID for good; both
run here against a real ``sealsync serve`` while it runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Sender
from receiver_service_helpers import Client
from reliability.figures import record

from sealsync.keys import fingerprint, generate_keypair
from sealsync.permissions import restrict_writes
from sealsync.protocol import Error, Welcome
from sealsync.simulator import EdgeInstance
from security.attacks import Site

pytestmark = pytest.mark.slow


def _senders(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, "senders", *args, "--config", str(site.dep.receiver_config)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _claim(site: Site, key: Path, uuid: str) -> object:
    with Client(site.address, key) as client:
        return client.hello(uuid)


def test_rekey_moves_the_binding_in_one_step_and_remove_retires(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    keys = tmp_path / "site" / "keys"
    site.start()
    try:
        code, stderr = site.honest_round()
        assert code == 0, stderr
        uuid = site.honest.uuid
        held_before = site.dep.loaded_hashes(site.honest)

        new_pub = generate_keypair(keys / "edge0-new", comment="edge0 new")
        not_yet = _senders(site, "rekey", uuid, "--key", str(keys / "edge0-new.pub"))
        authorized = keys / "authorized_keys"
        authorized.write_text(authorized.read_text() + new_pub + "\n")
        restrict_writes(authorized)
        claims = [_claim(site, site.hostile_key, uuid)]  # before the re-key
        rekeyed = _senders(site, "rekey", uuid, "--key", str(keys / "edge0-new.pub"))
        claims.append(_claim(site, site.hostile_key, uuid))  # right after it
        old_key = site.honest.send()
        config = site.honest.config
        config.write_text(
            config.read_text().replace(f'{keys / "edge0"}"', f'{keys / "edge0-new"}"')
        )
        restrict_writes(config)
        site.honest.edge.write_file(
            "root.sg9", 0, devices=["root.sg9.d0"], rows_per_device=5, start_ms=1
        )
        new_key = site.honest.send()
        listing = json.loads(_senders(site, "--json").stdout)["senders"]

        removed = _senders(site, "retire", uuid, "--release-devices")
        claims.append(_claim(site, site.hostile_key, uuid))
        site.honest.edge.write_file(
            "root.sg9", 0, devices=["root.sg9.d0"], rows_per_device=5, start_ms=9
        )
        after_remove = site.honest.send()
        owners = json.loads(
            subprocess.run(
                [*SEALSYNC, "owners", "--json", "--config", str(site.dep.receiver_config)],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        )["owners"]
    finally:
        site.stop()
    refused = [isinstance(c, Error) and c.code == "auth" for c in claims]
    held = all(refused)
    record(
        "security", attack="another key claims a UUID being re-keyed", tried=len(claims), held=held
    )

    assert not_yet.returncode == 2
    assert "is not in" in not_yet.stderr and "add it first" in not_yet.stderr
    assert all(refused), claims
    assert not any(isinstance(c, Welcome) for c in claims)
    assert rekeyed.returncode == 0, rekeyed.stderr
    assert rekeyed.stdout.strip() == f"{uuid} now bound to {fingerprint(new_pub)} (was " + (
        rekeyed.stdout.split("(was ", 1)[1].strip()
    )
    assert old_key.returncode != 0
    assert "bound to another public key" in old_key.stderr
    assert new_key.returncode == 0, new_key.stderr
    row = next(r for r in listing if r["uuid"] == uuid)
    assert row["key_fingerprint"] == fingerprint(new_pub)
    assert row["files"] == len(held_before) + 1 and not row["retired"]

    assert removed.returncode == 0, removed.stderr
    assert f"{uuid} retired" in removed.stdout and "released" in removed.stdout
    assert after_remove.returncode != 0
    assert "was retired on this receiver" in after_remove.stderr
    assert uuid not in owners  # its devices are free for the edge that replaces it
    assert set(held_before) <= set(site.dep.loaded_hashes(site.honest))  # files stay


def test_senders_usage_mistakes_are_one_line(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    unknown = _senders(site, "retire", "00000000-0000-0000-0000-00000000abcd")
    bad_uuid = _senders(site, "retire", "not-a-uuid")
    old_name = _senders(site, "remove", "00000000-0000-0000-0000-00000000abcd")
    no_key = _senders(site, "rekey", "00000000-0000-0000-0000-00000000abcd")
    pub_missing = _senders(
        site, "rekey", "00000000-0000-0000-0000-00000000abcd", "--key", str(tmp_path / "x.pub")
    )
    empty = _senders(site)
    assert unknown.returncode == 1 and "is not known to this receiver" in unknown.stderr
    assert bad_uuid.returncode == 2
    assert no_key.returncode == 2 and "--key" in no_key.stderr
    assert pub_missing.returncode == 2 and "x.pub: cannot read it" in pub_missing.stderr
    assert empty.returncode == 0 and empty.stdout.strip() == "no sender has connected yet"
    # the old name of retire still works for one release, and says the new one first
    assert old_name.returncode == 1 and "is not known to this receiver" in old_name.stderr
    assert old_name.stderr.splitlines()[0].endswith("is now `senders retire`; say retire")
    for result in (unknown, bad_uuid, no_key, pub_missing):
        assert "Traceback" not in result.stderr
    for result in (unknown, bad_uuid, pub_missing):  # not a usage error: one line
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_retired_senders_key_does_not_come_back_as_a_new_sender(tmp_path: Path) -> None:
    """Retired with ``--release-devices``, an edge's key stays in ``authorized_keys``; the
    edge, wiped (a new UUID), connects again: it is refused and claims nothing of what
    the retirement released, until the operator binds that key to the new UUID."""
    site = Site(tmp_path / "site")
    edge = site.dep.senders[1]  # the sender to retire: the second key's
    edge.edge.write_file("root.x", 0, devices=["root.x.d0", "root.x.d1"], rows_per_device=5)
    site.start()
    try:
        first = edge.send()
        old_uuid = edge.uuid
        retired = _senders(site, "retire", old_uuid, "--release-devices")
        edge = _reinstalled(edge, tmp_path / "reinstalled")  # its key kept, nothing else
        edge.edge.write_file("root.x", 0, devices=["root.x.d0", "root.x.d1"], rows_per_device=5)
        again = edge.send()
        new_uuid = edge.uuid
        owners_after = _owners(site)
        code, stderr = site.honest_round()
        rekeyed = _senders(site, "rekey", new_uuid, "--key", str(site.hostile_key) + ".pub")
        allowed = edge.send()
        owners_last = _owners(site)
    finally:
        site.stop()
    reclaimed = {d for d, o in owners_after.items() if d.startswith("root.x.")}
    held = again.returncode != 0 and not reclaimed and code == 0
    record("security", attack="a retired sender's key binds a new UUID", tried=1, held=held)
    assert first.returncode == 0, first.stderr
    assert retired.returncode == 0 and "released 2 devices" in retired.stdout, retired.stderr
    assert new_uuid != old_uuid
    assert again.returncode != 0
    assert f"was retired on this receiver with sender {old_uuid}" in again.stderr
    assert f"sealsync senders rekey {new_uuid} --key" in again.stderr
    assert not reclaimed, owners_after
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert rekeyed.returncode == 0 and "(a new sender)" in rekeyed.stdout, rekeyed.stderr
    assert allowed.returncode == 0, allowed.stderr
    assert {owners_last["root.x.d0"], owners_last["root.x.d1"]} == {new_uuid}


def _owners(site: Site) -> dict[str, str]:
    """Device -> owner UUID, as ``sealsync owners --json`` lists them."""
    listed = subprocess.run(
        [*SEALSYNC, "owners", "--json", "--config", str(site.dep.receiver_config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    return {d: owner for owner, ds in json.loads(listed.stdout)["owners"].items() for d in ds}


def _reinstalled(sender: Sender, root: Path) -> Sender:
    """The same edge on fresh disks (a new schema dir, so a new UUID), with its old key."""
    edge = EdgeInstance(root)
    text = sender.config.read_text()
    text = text.replace(str(sender.edge.schema_dir), str(edge.schema_dir))
    text = text.replace(str(sender.edge.data_dirs[0]), str(edge.data_dirs[0]))
    config = root / "edge.toml"
    config.write_text(text)
    restrict_writes(config)
    return Sender(sender.name, edge, config)
