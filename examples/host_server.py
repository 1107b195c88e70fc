"""A host server process that embeds the sealsync receiver plugin with its own storage.

    python examples/host_server.py --config receiver.toml --store ./host-store [--init]
    python examples/host_server.py --config receiver.toml --iotdb 127.0.0.1:6667 \
        [--iotdb-dialect 0.12] [--iotdb-python /opt/iotdb-client/bin/python]

The receiver runs *inside* the host (here: this script), as it would inside a
database server, and the host imports it only from the ``receiver`` package (its
docstring is the plugin's reference). The host decides where loaded files live and
how it registers them by implementing ``receiver.Storage``; this one keeps every
sender's files in ``<store>/<sender uuid>/<relative name>`` and a catalogue
``<store>/catalogue.json`` (sender -> names) that stands for the database's own file
registry. With ``--iotdb`` the host is an IoTDB's companion instead: it passes the
plugin's own ``IoTDBStorage``, which keeps the files in the receiver's data dirs and
loads each into that IoTDB (docs/operations.md section 14).

Because the receiver reads untrusted files in worker processes (forkserver), the
embedding program must guard its entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

try:
    from receiver import (
        IoTDBSettings,
        IoTDBStorage,
        ReceiverService,
        Storage,
        StorageError,
        load_receiver_config,
        recorded_md5,
    )
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from receiver import (
        IoTDBSettings,
        IoTDBStorage,
        ReceiverService,
        Storage,
        StorageError,
        load_receiver_config,
        recorded_md5,
    )

SIDECARS = (".mods", ".mods2", ".resource")  # .mods2: IoTDB 2.x's deletions


class CatalogueStorage(Storage):
    """The host's side of the plugin API: load, delete, list (idempotent, durable)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalogue = root / "catalogue.json"
        self._lock = threading.Lock()

    def _read(self) -> dict[str, list[str]]:
        try:
            return json.loads(self.catalogue.read_text())
        except FileNotFoundError:
            return {}

    def _write(self, data: dict[str, list[str]]) -> None:
        tmp = self.catalogue.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.catalogue)

    def target(self, sender: str, name: str) -> Path:
        return self.root / sender / name

    def load(self, sender: str, name: str, staged: Path) -> None:
        dst = self.target(sender, name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if staged.exists():
            if dst.exists() and dst.read_bytes() != staged.read_bytes():
                raise StorageError(f"{name}: a different file is already loaded")
            for extra in SIDECARS:
                side = staged.with_name(staged.name + extra)
                if side.exists():
                    os.replace(side, dst.with_name(dst.name + extra))
            os.replace(staged, dst)
        elif not dst.exists():
            raise StorageError(f"{name}: neither staged nor loaded")
        with self._lock:
            data = self._read()
            names = set(data.get(sender, []))
            names.add(name)
            data[sender] = sorted(names)
            self._write(data)

    def delete(self, sender: str, name: str) -> bool:
        dst = self.target(sender, name)
        existed = dst.exists()
        for extra in (*SIDECARS, ""):
            dst.with_name(dst.name + extra).unlink(missing_ok=True)
        with self._lock:
            data = self._read()
            names = set(data.get(sender, []))
            existed = existed or name in names
            names.discard(name)
            data[sender] = sorted(names)
            self._write(data)
        return existed

    def list(self, sender: str) -> set[str]:
        with self._lock:
            return set(self._read().get(sender, []))

    def inventory(self, sender: str) -> dict[str, tuple[int, str]]:
        """Size and recorded MD5 per loaded name (for ``send --reconcile``); the MD5
        travels with the file as an extended attribute, so a rename keeps it."""
        held = {}
        for name in self.list(sender):
            path = self.target(sender, name)
            try:
                held[name] = (path.stat().st_size, recorded_md5(path))
            except FileNotFoundError:
                continue  # in the catalogue, not on disk: reconcile ships it again
        return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="receiver TOML")
    parser.add_argument("--store", type=Path, help="the host's file store")
    parser.add_argument("--iotdb", metavar="HOST:PORT", help="load the files into this IoTDB")
    parser.add_argument("--iotdb-dialect", default="2.0", choices=("0.12", "2.0"))
    parser.add_argument("--iotdb-python", default=sys.executable, help="runs IoTDB's client")
    parser.add_argument(
        "--init", action="store_true", help="create the receiver's schema and data dirs"
    )
    args = parser.parse_args()
    # The receiver's folders are created only when asked: a typo'd or unmounted one
    # must stop the host, not become an empty folder.
    config = load_receiver_config(args.config, init=args.init)
    if (args.store is None) == (args.iotdb is None):
        parser.error("give --store or --iotdb")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    storage: IoTDBStorage | CatalogueStorage
    if args.iotdb is not None:
        iotdb_host, _, iotdb_port = args.iotdb.rpartition(":")
        settings = IoTDBSettings(
            host=iotdb_host,
            port=int(iotdb_port),
            dialect=args.iotdb_dialect,
            python=args.iotdb_python,
        )
        storage = IoTDBStorage(list(config.data_dirs), config.schema_dir, settings).connect()
        where = f"IoTDB {args.iotdb}"
    else:
        storage = CatalogueStorage(args.store)
        where = f"store {args.store}"
    with ReceiverService(config, storage=storage) as service:
        host, port = service.address
        print(f"host server: sealsync receiver on {host}:{port}, {where}", flush=True)
        stop.wait()
    print("host server: stopped", flush=True)
    if isinstance(storage, IoTDBStorage):
        storage.close()  # the host made it, the host closes it
    else:
        shutil.rmtree(args.store / "tmp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
