"""A sender config that does not load is still an attempt: it goes into the history
and the textfile, so "no success for a while" and ``failures{kind="config"}`` show a
broken config as they show an unreachable receiver.

A config that does not load cannot be trusted, so what is recorded is read
leniently from the file (``[sender] schema_dir``, ``metrics_textfile`` and each
``[[receiver]]``'s host, port and name), and only into what already exists: a
receiver's history folder a previous run made, a textfile folder that is there. A
config too broken to name them records nothing; its exit code and one line say it.
"""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path
from typing import Any

from sealsync.config import ReceiverEndpoint, format_endpoint
from sealsync.errors import LocalIOError, SealsyncError
from sealsync.printable import single_line
from sender.manage.history import FAILED, Attempt, append_attempt
from sender.manage.layout import SchemaPaths


def _path(value: Any, base: Path) -> Path | None:
    if not isinstance(value, str) or not value:
        return None
    return base / os.path.expanduser(value)


def _receivers(tables: Any) -> list[ReceiverEndpoint]:
    found: list[ReceiverEndpoint] = []
    if not isinstance(tables, list):
        return found
    for t in tables:
        if not isinstance(t, dict):
            continue
        host, port = t.get("host"), t.get("port")
        if not isinstance(host, str) or not host or isinstance(port, bool):
            continue
        if not isinstance(port, int) or not 1 <= port <= 65535:
            continue
        name = t.get("name")
        if not isinstance(name, str) or not name:
            name = format_endpoint(host, port)
        found.append(ReceiverEndpoint(name=name, host=host, port=port))
    return found


def record_config_failure(config_path: Path, error: SealsyncError) -> list[str]:
    """Record ``error`` (the config did not load) as a failed attempt at each receiver
    the file still names whose history exists, then rewrite the textfile if the file
    names one in an existing folder. Returns the lines of records that could not be
    written (an empty list also when nothing could be named)."""
    from sender.metrics import history_families

    try:
        doc = tomllib.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    sender = doc.get("sender")
    if not isinstance(sender, dict):
        return []
    base = Path(config_path).resolve().parent
    schema_dir = _path(sender.get("schema_dir"), base)
    if schema_dir is None or not schema_dir.is_dir():
        return []
    receivers = [
        r
        for r in _receivers(doc.get("receiver"))
        if SchemaPaths(schema_dir, r.host, r.port).history.exists()
    ]
    problems: list[str] = []
    now = time.time()
    text = single_line(str(error))
    for r in receivers:
        attempt = Attempt(
            receiver=r.name,
            address=r.address,
            start=now,
            end=now,
            outcome=FAILED,
            kind=error.kind,
            error=text,
        )
        try:
            append_attempt(SchemaPaths(schema_dir, r.host, r.port), attempt)
        except LocalIOError as exc:
            problems.append(str(exc))
    textfile = _path(sender.get("metrics_textfile"), base)
    if receivers and textfile is not None and textfile.parent.is_dir():
        from sealsync.buildinfo import build_info_family
        from sealsync.metrics import snapshot_registry, write_textfile

        families = [*history_families(schema_dir, receivers), build_info_family("sender")]
        try:
            write_textfile(textfile, snapshot_registry(families))
        except LocalIOError as exc:
            problems.append(str(exc))
    return problems
