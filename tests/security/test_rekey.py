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
from deploy_helpers import SEALSYNC
from receiver_service_helpers import Client
from reliability.figures import record

from sealsync.keys import fingerprint, generate_keypair
from sealsync.permissions import restrict_writes
from sealsync.protocol import Error, Welcome
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
