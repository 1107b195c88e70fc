"""The examples work as documented: a host server embedding the receiver plugin."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy_helpers import make_deployment, populate, sha256

pytestmark = pytest.mark.slow  # the example host server and sealsync send as processes

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_host_server_embeds_the_receiver_with_its_own_storage(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path / "site")
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "host_server.py"),
            "--config",
            str(dep.receiver_config),
            "--store",
            str(store),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        assert first.startswith("host server: sealsync receiver on 127.0.0.1:"), first
        edge = dep.senders[0]
        names = populate(edge.edge, groups=2, files=2)
        assert edge.send().returncode == 0
        gone = names[0]
        edge.edge.delete(gone)
        assert edge.send().returncode == 0

        catalogue = json.loads((store / "catalogue.json").read_text())
        assert catalogue == {edge.uuid: sorted(edge.sealed_hashes())}
        for name, digest in edge.sealed_hashes().items():
            assert sha256(store / edge.uuid / name) == digest
        assert not (store / edge.uuid / gone).exists()
        assert not (dep.receiver_data / "sequence").exists()  # nothing in the default layout
    finally:
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0
