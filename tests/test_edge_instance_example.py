"""examples/edge_instance.py takes its devices as a parameter (``--prefix`` or
``--device``): two edges built from it with their own prefixes both ship into one
receiver; the same devices on a second edge are refused, as the example warns."""

from __future__ import annotations

import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import Deployment, make_deployment

from sealsync.formats import tsfile
from sealsync.simulator import EdgeInstance

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "edge_instance.py"


def fill(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), str(root), "--files", "2", "--rows", "5", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def devices_of(root: Path) -> set[str]:
    edge = EdgeInstance(root)
    return {
        device
        for rel in edge.sealed_files()
        for device in tsfile.devices(edge.path(rel))  # as the files themselves list them
    }


@pytest.mark.slow
def test_prefix_and_devices_name_what_is_written(tmp_path: Path) -> None:
    assert fill(tmp_path / "a", "--groups", "2", "--prefix", "root.plant_a").returncode == 0
    assert devices_of(tmp_path / "a") == {
        f"root.plant_a.sg{g}.d{k}" for g in (1, 2) for k in (1, 2)
    }
    named = fill(tmp_path / "b", "--device", "root.plant_b.line1", "--device", "root.x.y.z")
    assert named.returncode == 0, named.stderr
    assert devices_of(tmp_path / "b") == {"root.plant_b.line1", "root.x.y.z"}
    assert "sequence/root.plant_b/" in named.stdout and "sequence/root.x/" in named.stdout


@pytest.mark.parametrize(
    "bad", [["--prefix", "plant"], ["--device", "root.only_db"], ["--prefix", "root..a"]]
)
def test_a_path_iotdb_would_not_take_is_refused(
    tmp_path: Path, bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    main = runpy.run_path(str(EXAMPLE))["main"]
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "c"), *bad])
    assert exit_.value.code == 2
    assert f"error: argument {bad[0]}: '{bad[1]}' is not a" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site", senders=2)
    d.start_receiver()
    yield d
    d.stop_receiver()


@pytest.mark.slow
def test_two_edges_built_from_the_example_both_ship(dep: Deployment) -> None:
    one, two = dep.senders
    assert fill(one.edge.root, "--prefix", "root.site1").returncode == 0
    assert fill(two.edge.root, "--prefix", "root.site2").returncode == 0
    for sender in (one, two):
        result = sender.send()
        assert result.returncode == 0, result.stderr
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    # the second edge filled with the first one's devices: refused, nothing lost
    later = ("--prefix", "root.site1", "--start-ms", "1800000000000")
    assert fill(two.edge.root, *later).returncode == 0
    result = two.send()
    assert result.returncode == 1
    assert "is owned by sender '" in result.stderr
    assert dep.loaded_hashes(one) == one.sealed_hashes()
