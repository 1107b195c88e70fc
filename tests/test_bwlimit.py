"""The bandwidth cap over real rounds: ``sealsync send`` to ``sealsync serve`` over SSH
on loopback, the rate measured from the round report's transfer phase (bytes written
for the data dir over the time from its first write to its last file byte)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deploy_helpers import Deployment, make_deployment, populate

from sealsync.formats.common import DEVICE_COLUMN, TIME_COLUMN

pytestmark = pytest.mark.slow

KIB, MIB = 1024, 1024 * 1024


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site", senders=1)
    d.start_receiver()
    yield d
    d.stop_receiver()


def big_parquet(dep: Deployment, rows: int) -> str:
    """One sealed Parquet file of random (incompressible) values."""
    rng = np.random.default_rng(15)
    table = pa.table(
        {
            TIME_COLUMN: pa.array(np.arange(rows, dtype=np.int64) * 1000),
            DEVICE_COLUMN: pa.array(["root.big.d0"] * rows),
            "s1": pa.array(rng.integers(0, 2**62, rows)),
            "s2": pa.array(rng.integers(0, 2**62, rows)),
        }
    )
    return dep.senders[0].edge.write_table(table, "root.big", 0, fmt="parquet")


def measured(doc: dict) -> tuple[int, float]:
    receiver = doc["receivers"][0]
    d = receiver["dirs"][0]
    return d["transfer_bytes"], d["transfer_seconds"]


def test_one_large_file_takes_its_size_over_the_cap(dep: Deployment) -> None:
    sender = dep.senders[0]
    name = big_parquet(dep, rows=760_000)
    size = sender.edge.path(name).stat().st_size
    assert 15.5 * MIB < size < 16.5 * MIB

    result = sender.send("--json", "--bwlimit", "4M")

    assert result.returncode == 0, result.stderr + dep.log()
    doc = json.loads(result.stdout)
    assert doc["receivers"][0]["bwlimit"] == 4 * MIB
    assert doc["receivers"][0]["dirs"][0]["shipped"] == [name]
    sent, seconds = measured(doc)
    assert size < sent < size + 64 * KIB  # the file, its sidecar and the frames
    expected = sent / (4 * MIB)  # 16 MiB at 4 MiB/s: 4 s
    assert expected * 0.9 <= seconds <= expected * 1.1, (sent, seconds)
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()


def test_many_small_files_are_held_to_a_receivers_own_cap(dep: Deployment) -> None:
    """Every frame counts: a round of small files (one write each) holds the cap too.
    The receiver's own key wins over the sender's; the summary line shows it."""
    sender = dep.senders[0]
    text = sender.config.read_text()
    text = text.replace("max_retries = 3\n", 'max_retries = 3\nbwlimit = "64M"\n')
    sender.config.write_text(text + 'bwlimit = "256K"\n')  # in the [[receiver]] table
    names = populate(sender.edge, groups=4, files=24, rows=200)
    cap = 256 * KIB

    result = sender.send("--json")

    assert result.returncode == 0, result.stderr + dep.log()
    doc = json.loads(result.stdout)
    assert doc["receivers"][0]["bwlimit"] == cap
    assert sorted(doc["receivers"][0]["dirs"][0]["shipped"]) == sorted(names)
    sent, seconds = measured(doc)
    assert sent > 600 * KIB  # ~2.8 s at the cap; uncapped this takes a fraction of that
    rate = sent / seconds
    assert cap * 0.9 <= rate <= cap * 1.1, (sent, seconds, rate)
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()

    populate(sender.edge, groups=1, files=2, rows=20, prefix="root.more")
    result = sender.send()
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(", bwlimit 256.0 KiB/s")
