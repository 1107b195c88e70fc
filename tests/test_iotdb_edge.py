"""The edge is a real IoTDB: ``sealsync send``, configured as an operator would (its
``data_dirs`` the release's data folder, with IoTDB running), ships what the server
sealed to a receiver, byte for byte, sidecars included.

The first step towards the differential test (a real IoTDB on both ends): before the
answers can match, every file and every modification IoTDB wrote must arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_helpers import Deployment, sha256
from iotdb_helpers import point_sender_at
from iotdb_server import RELEASES, IoTDBServer


def _write_and_delete(server: IoTDBServer) -> None:
    with server.client() as client:
        create = "SET STORAGE GROUP TO" if server.release.standalone else "CREATE DATABASE"
        client.sql(f"{create} root.sg")
        for device in ("root.sg.d1", "root.sg.d2"):
            client.sql(f"CREATE TIMESERIES {device}.s1 WITH DATATYPE=INT64, ENCODING=RLE")
            client.insert([(device, t, ["s1"], ["INT64"], [t * 10]) for t in range(1, 11)])
        client.sql("FLUSH")
        client.sql("DELETE FROM root.sg.d1.s1 WHERE time <= 4")


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(RELEASES))
def test_send_ships_a_real_iotdb_data_folder(
    version: str,
    iotdb_server: Callable[[str], IoTDBServer],
    start_deployment: Callable[..., Deployment],
) -> None:
    server = iotdb_server(version)
    _write_and_delete(server)
    mods = ".mods" if server.release.tsfile_version == 3 else ".mods2"
    sealed = sorted(server.data_dir.glob("sequence/root.sg/*/*/*.tsfile"))
    assert any(Path(f"{p}{mods}").is_file() for p in sealed), sealed
    written = {}
    for tsfile in sealed:
        for suffix in ("", ".resource", mods):
            path = Path(f"{tsfile}{suffix}")
            if path.is_file():
                written[str(path.relative_to(server.data_dir))] = sha256(path)

    dep = start_deployment()
    point_sender_at(dep, server.data_dir)
    sender = dep.senders[0]
    result = sender.send()
    assert result.returncode == 0, result.stderr

    from receiver.storage import DirectoryStorage

    storage = DirectoryStorage([dep.receiver_data])
    received = {}
    for name in storage.list(sender.uuid):
        target = storage.target(dep.receiver_data, sender.uuid, name)
        for suffix in ("", ".resource", mods):
            path = Path(f"{target}{suffix}")
            if path.is_file():
                received[f"{name}{suffix}"] = sha256(path)
    data = {k: v for k, v in written.items() if not k.endswith(mods)}
    assert {k: v for k, v in received.items() if not k.endswith(mods)} == data
    # the modifications too (2.x: the binary .mods2), byte for byte
    deletions = {k: v for k, v in written.items() if k.endswith(mods)}
    assert deletions and {k: received.get(k) for k in deletions} == deletions
    assert received == written
