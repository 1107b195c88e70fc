"""Runs IoTDB's Python client (``apache-iotdb``) for the IoTDB storage backend: one JSON
request per line on stdin, one JSON answer per line on stdout.

Why a process of its own, started with a configured Python: the client is a run-time
need only of the IoTDB storage, and its package installs a top-level ``tests`` package
and pins numpy and pandas, none of which belongs in the receiver's own process. So this
file imports nothing of sealsync and runs under any Python that has the client.

Arguments: host, port, user, connect timeout (s); the password is the first line of
stdin. Requests ``{"sql": "..."}`` answer ``{"ok": true}``, ``{"query": "..."}``
``{"ok": true, "columns": [...], "rows": [[...], ...]}`` (each row its fields, text
as text), or either ``{"ok": false, "error": "...", "refused": ...}``: ``refused`` is
true when the server answered with a status (every client release words that
``<code>: <message>``), false when it was not reached. A Python without the client
answers ``{"ok": false, "missing": "..."}`` at once and exits 3; a server that does
not answer in time, ``{"ok": false, "error": ...}`` and exit 4.

Python puts a script's own folder first on ``sys.path``, and this one's holds the
storage's ``iotdb.py``, which would hide the client's ``iotdb`` package: the folder
leaves the path before the client is imported.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any

MISSING = 3
UNREACHABLE = 4


def _say(answer: dict[str, Any]) -> None:
    print(json.dumps(answer), flush=True)


def _field(field: Any) -> Any:
    data_type = field.get_data_type()
    if data_type is None:
        return None
    value = field.get_object_value(data_type)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _query(session: Any, statement: str) -> dict[str, Any]:
    data_set = session.execute_query_statement(statement)
    columns = [str(c) for c in data_set.get_column_names()]
    rows = []
    while data_set.has_next():
        rows.append([_field(f) for f in data_set.next().get_fields()])
    data_set.close_operation_handle()
    return {"ok": True, "columns": columns, "rows": rows}


def main() -> int:
    host, port, user, timeout = sys.argv[1:5]
    password = sys.stdin.readline().rstrip("\n")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        from iotdb.Session import Session  # type: ignore[import-not-found]
    except ImportError as exc:
        _say({"ok": False, "missing": str(exc)})
        return MISSING
    deadline = time.monotonic() + float(timeout)
    while True:  # a DataNode accepts connections a moment before it serves them
        session = Session(host, int(port), user, password)
        try:
            session.open(False)
            break
        except Exception as exc:
            if time.monotonic() >= deadline:
                _say({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
                return UNREACHABLE
            time.sleep(0.5)
    _say({"ok": True, "ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "query" in request:
                _say(_query(session, request["query"]))
            else:
                session.execute_non_query_statement(request["sql"])
                _say({"ok": True})
        except Exception as exc:  # the backend decides what a refusal means
            refused = re.match(r"-?[0-9]+: ", str(exc)) is not None
            _say({"ok": False, "error": f"{type(exc).__name__}: {exc}", "refused": refused})
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
