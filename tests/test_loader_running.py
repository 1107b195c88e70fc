"""``sealsync status`` of a loader names a load in progress (the process holding
``load.lock``, its pid and start) without taking the lock a starting load needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from config_helpers import make_loader
from deploy_helpers import SEALSYNC

from sealsync.config import load_loader_config
from spark_loader import running
from spark_loader.state import LOCK_FILE, loader_lock
from spark_loader.status import loader_status, render_loader


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = make_loader(tmp_path)
    (tmp_path / "warehouse/_state").mkdir(parents=True)
    return path


def test_a_load_holding_the_lock_is_shown_with_its_pid(config_path: Path) -> None:
    config = load_loader_config(config_path)
    assert loader_status(config)["running"] is None  # never run
    with loader_lock(config.state_dir):
        doc = loader_status(config)
        # a second load still starts once this one is done: status took nothing
        assert doc["running"]["pid"] == os.getpid()
        assert doc["running"]["started"] is not None
        started = running.process_start(os.getpid())
        assert started is not None and started <= time.time()
        lines = render_loader(doc)
        assert lines[1] == (
            f"  running:      a load is in progress (pid {os.getpid()}, started "
            f"{doc['running']['started']}); the last run below is the one before it"
        )
    assert (config.state_dir / LOCK_FILE).exists()  # a lock file nobody holds
    assert loader_status(config)["running"] is None
    assert not any("running:" in line for line in render_loader(loader_status(config)))


def test_without_the_kernels_list_the_lock_is_probed(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_loader_config(config_path)
    monkeypatch.setattr(running, "PROC_LOCKS", config_path.parent / "no-such-file")
    with loader_lock(config.state_dir):
        assert loader_status(config)["running"] == {"pid": None, "started": None}
        assert "(pid unknown)" in render_loader(loader_status(config))[1]
    assert loader_status(config)["running"] is None
    with loader_lock(config.state_dir):  # the probe left the lock free to take
        pass


@pytest.mark.slow
def test_status_as_a_process_names_the_load_another_process_runs(config_path: Path) -> None:
    config = load_loader_config(config_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from spark_loader.state import loader_lock\n"
            "with loader_lock(Path(sys.argv[1])):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(60)\n",
            str(config.state_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        status = [*SEALSYNC, "status", "--config", str(config_path)]
        shown = subprocess.run(status, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"a load is in progress (pid {holder.pid}, started " in shown.stdout
        doc = json.loads(
            subprocess.run([*status, "--json"], capture_output=True, text=True, timeout=60).stdout
        )
        assert doc["running"]["pid"] == holder.pid
        # a load started now stops at the lock, as it always did (exit 75)
        load = subprocess.run(
            [*SEALSYNC, "load", "--config", str(config_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert load.returncode == 75, load.stderr
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    shown = subprocess.run(status, capture_output=True, text=True, timeout=60)
    assert "in progress" not in shown.stdout
