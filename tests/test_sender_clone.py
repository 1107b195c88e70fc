"""Two hosts acting as one sender (receiver/leases.py, sender/manage/new_identity.py),
replayed with real ``serve`` and ``send`` processes: a sender's folders and key copied
to a second place, as a cloned image carries them, and both run. The copy is refused
before it ships or deletes anything, with one line naming the UUID, both hosts and
the two commands; the original's files and the loader's evidence are untouched;
``sealsync identity new`` gives the copy a UUID and state of its own, after which it
ships its files as its own. A copy whose key was replaced and ``uuid.txt`` removed is
told the same procedure by the data dir's owner check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from deploy_helpers import SEALSYNC, Deployment, Sender, make_deployment, populate

from sealsync.keys import generate_keypair
from sealsync.permissions import restrict_writes
from sealsync.simulator import EdgeInstance
from sender.manage.identity import hostname, uuid_path
from sender.manage.layout import SchemaPaths

pytestmark = pytest.mark.slow  # real receivers and senders


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def per_sender_devices(dep: Deployment) -> None:
    """A copy writes the device ids of the host it was copied from: with its own
    identity, its files are its own only where each sender's device ids are."""
    dep.receiver_config.write_text(dep.receiver_config.read_text() + 'device_scope = "sender"\n')


def copy_of(dep: Deployment, sender: Sender, name: str) -> Sender:
    """``sender``'s instance (schema dir, data dirs, the sender's state in them) copied to
    ``name``, with a config naming the copy and the same key."""
    root = dep.root / name
    shutil.copytree(sender.edge.root, root, symlinks=True)
    config = dep.root / f"{name}.toml"
    config.write_text(sender.config.read_text().replace(str(sender.edge.root), str(root)))
    restrict_writes(config)
    return Sender(name, EdgeInstance(root, data_dirs=len(sender.edge.data_dirs)), config)


def key_of_its_own(dep: Deployment, sender: Sender) -> None:
    """``sealsync keygen``, the .pub authorized on the receiver, [sender] identity set."""
    keys = dep.root / "keys"
    pub = generate_keypair(keys / sender.name, comment=sender.name)
    with open(keys / "authorized_keys", "a") as f:
        f.write(pub + "\n")
    text = re.sub(
        r'identity = "[^"]*"', f'identity = "{keys / sender.name}"', sender.config.read_text()
    )
    sender.config.write_text(text)


def deletions_logged(dep: Deployment, uuid: str) -> str:
    """The loader's evidence of deletions of ``uuid``'s files: only these take rows out."""
    path = dep.receiver_data / "sync-receiver" / f"deleted_{uuid}.log"
    return path.read_text() if path.exists() else ""


@dataclass(frozen=True)
class Site:
    """One receiver (``device_scope = "sender"``) and a sender that shipped its files."""

    dep: Deployment
    original: Sender


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    dep = make_deployment(tmp_path_factory.mktemp("clone") / "site")
    per_sender_devices(dep)
    original = dep.senders[0]
    populate(original.edge, groups=2, files=2)
    dep.start_receiver()
    try:
        assert original.send().returncode == 0
        yield Site(dep, original)
    finally:
        assert dep.stop_receiver() == 0


def test_a_copied_sender_is_refused_before_it_deletes_and_takes_an_identity_of_its_own(
    site: Site,
) -> None:
    dep, original = site.dep, site.original
    copy = copy_of(dep, original, "edge0-copy")
    uuid = original.uuid
    assert copy.uuid == uuid
    # the original goes on: a new file, and the next lease of its identity
    populate(original.edge, groups=1, files=1, prefix="root.later")
    assert original.send().returncode == 0
    held = dep.loaded_hashes(original)
    assert held == original.sealed_hashes()

    # the copy compacts two of its files (deleting them) and writes one
    sources = [n for n in copy.edge.sealed_files() if n.startswith("sequence/root.sg0/")]
    copy.edge.merge(sources, "root.sg0", 0)
    populate(copy.edge, groups=1, files=1, prefix="root.copy")
    refused = copy.send()
    assert refused.returncode == 1
    line = refused.stderr
    assert line.count("\n") == 1 and line.startswith(
        f"sealsync: error: receiver dc: sender {uuid} is in use by another host: "
        f"'{hostname()}:{original.edge.schema_dir}' at 127.0.0.1 (since "
    )
    assert re.search(
        f"\\) holds its lease, and this host '{re.escape(hostname())}:"
        f"{re.escape(str(copy.edge.schema_dir))}' at 127\\.0\\.0\\.1 holds an older lease "
        "of it \\(a cloned image or copied state, or this host's state restored from an "
        "older backup\\?\\): nothing was sent; ",
        line,
    ), line
    assert line.endswith(
        "if this host is a copy, give it an identity of its own: a key of its own "
        "(`sealsync keygen`, authorized on each receiver) and `sealsync identity new "
        f"--config {copy.config}` (a new UUID and state: it ships its files anew, and the "
        "other host's files stay at the receiver); if no other host acts as this sender, "
        f"take the identity back with `sealsync identity reclaim --config {copy.config}`\n"
    )
    assert dep.loaded_hashes(original) == held  # nothing of the original's was deleted
    assert deletions_logged(dep, uuid) == ""  # so the loader removes none of its rows
    again = original.send()  # the original is not disturbed
    assert again.returncode == 0 and again.stderr == "", again.stderr

    key_of_its_own(dep, copy)
    done = run("identity", "--config", str(copy.config), "new")
    assert done.returncode == 0, done.stderr
    own = copy.uuid
    assert own != uuid
    assert done.stdout.startswith(f"sender UUID {own} (was {uuid}): ")
    shipped = copy.send()
    assert shipped.returncode == 0, shipped.stderr
    assert dep.loaded_hashes(copy) == copy.sealed_hashes()  # the copy's files, its own
    assert dep.loaded_hashes(original) == held
    assert deletions_logged(dep, uuid) == ""
    shown = json.loads(run("identity", "--config", str(copy.config), "--json").stdout)
    assert shown == {"uuid": own, "receivers": {"dc": {"held": True, "reclaim": False}}}

    # the original's state restored from an older backup: an older lease, refused
    # the same way; it alone acts as this sender, so it takes the identity back
    lease = SchemaPaths(original.edge.schema_dir, "127.0.0.1", dep.port).lease
    backup = lease.read_bytes()
    populate(original.edge, groups=1, files=1, prefix="root.latest")
    assert original.send().returncode == 0
    lease.write_bytes(backup)
    restored = original.send()
    assert restored.returncode == 1 and "holds an older lease of it" in restored.stderr
    taken = run("identity", "--config", str(original.config), "reclaim")
    assert taken.returncode == 0, taken.stderr
    result = original.send()
    assert result.returncode == 0, result.stderr
    assert dep.loaded_hashes(original) == original.sealed_hashes()
    reclaimed = "reclaimed its identity (sealsync identity reclaim)"
    assert reclaimed in dep.log()


def test_a_copy_given_a_new_key_and_no_uuid_is_told_the_copys_procedure(site: Site) -> None:
    dep, original = site.dep, site.original
    copy = copy_of(dep, original, "edge0-second-copy")
    key_of_its_own(dep, copy)
    uuid_path(copy.edge.schema_dir).unlink()
    refused = copy.send()
    assert refused.returncode == 2
    data_dir = copy.edge.data_dirs[0]
    assert refused.stderr == (
        f"sealsync: error: {copy.config}: [sender] data_dirs[0]: {data_dir} is synced "
        f"by another sender (UUID {original.uuid}, recorded in "
        f"{data_dir / 'sync-sender' / 'owner.txt'}), this config is a new sender (no "
        f"UUID yet) (schema_dir {copy.edge.schema_dir}): one data dir has one sender. A "
        "second config for this instance? give it the schema_dir of the config that "
        "syncs it (one config per instance, one [[receiver]] table per receiver). A copy "
        "of that sender's host (a cloned image or copied folders, its uuid.txt removed "
        "or replaced)? give it an identity of its own with `sealsync identity new "
        f"--config {copy.config}`\n"
    )
    assert run("identity", "--config", str(copy.config), "new").returncode == 0
    shipped = copy.send()
    assert shipped.returncode == 0, shipped.stderr
    assert copy.uuid != original.uuid
    assert dep.loaded_hashes(copy) == copy.sealed_hashes()
    assert dep.loaded_hashes(original) == original.sealed_hashes()
