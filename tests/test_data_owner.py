"""One data dir, one sender (sender.manage.data_owner), replayed with real processes:
an edge configured twice (two schema dirs, so two UUIDs) on one data dir. The twin is
refused with one line, exit 2, naming the owner and the fix, and writes nothing; the
original goes on. State from before owners were recorded is claimed by the next
sender to run."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, Sender, make_deployment, populate, tree

from sender.manage.data_owner import OWNER_FILE

pytestmark = pytest.mark.slow  # real receivers and senders


@dataclass(frozen=True)
class Shipped:
    """A deployment whose one sender has shipped its files once; its receiver runs."""

    dep: Deployment
    sender: Sender
    data_dir: Path
    owner: Path
    """The data dir's owner record, naming the sender that shipped."""


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[Shipped]:
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=2)
    data_dir = sender.edge.data_dirs[0]
    dep.start_receiver()
    try:
        assert sender.send().returncode == 0
        owner = data_dir / "sync-sender" / OWNER_FILE
        assert owner.read_text() == f"{sender.uuid}\n"
        yield Shipped(dep, sender, data_dir, owner)
    finally:
        assert dep.stop_receiver() == 0


def twin_of(dep: Deployment, sender: Sender) -> Path:
    """The same edge's config again, with a schema dir (and so a UUID) of its own."""
    twin_schema = dep.root / "twin-schema"
    twin_schema.mkdir()
    config = dep.root / "twin.toml"
    text = sender.config.read_text().replace(str(sender.edge.schema_dir), str(twin_schema))
    assert text != sender.config.read_text()
    config.write_text(text)
    config.chmod(0o600)
    return config


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SEALSYNC, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_a_second_config_on_a_data_dir_is_refused_and_writes_nothing(shipped: Shipped) -> None:
    dep, sender, owner = shipped.dep, shipped.sender, shipped.owner
    twin = twin_of(dep, sender)
    populate(sender.edge, groups=1, files=1, prefix="root.later")
    before = tree(sender.edge.root)
    for args in (["send"], ["send", "--dry-run"], ["check"]):
        result = run(*args, "--config", str(twin))
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr == (
            f"sealsync: error: {twin}: [sender] data_dirs[0]: {shipped.data_dir} is synced by "
            f"another sender (UUID {sender.uuid}, recorded in {owner}), this config is a "
            f"new sender (no UUID yet) (schema_dir {dep.root / 'twin-schema'}): one data "
            "dir has one sender. A second config for this instance? give it the schema_dir "
            "of the config that syncs it (one config per instance, one [[receiver]] table "
            "per receiver). A copy of that sender's host (a cloned image or copied folders, "
            "its uuid.txt removed or replaced)? give it an identity of its own with "
            f"`sealsync identity new --config {twin}`\n"
        )
        assert tree(sender.edge.root) == before
    # the original ships what came since, as if the twin had never run
    assert sender.send().returncode == 0
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()


def test_state_from_before_owners_is_claimed_by_the_next_sender(shipped: Shipped) -> None:
    sender, owner = shipped.sender, shipped.owner
    owner.unlink()  # as an older sender left its state
    populate(sender.edge, groups=1, files=1, prefix="root.later")
    result = sender.send("-v")
    assert result.returncode == 0, result.stderr
    assert owner.read_text() == f"{sender.uuid}\n"
    assert "its state from before owners were recorded is now sender" in result.stderr
    assert shipped.dep.loaded_hashes(sender) == sender.sealed_hashes()
