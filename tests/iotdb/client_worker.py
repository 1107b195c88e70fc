"""Runs IoTDB's Python client (``apache-iotdb``) for a test, one JSON request per line
on stdin, one JSON answer per line on stdout.

It is a separate process because no one release of the client speaks to every server
release: the 1.x/2.x clients call RPCs (``executeUpdateStatementV2``...) that a 0.12
or 0.13 server does not have, so an old server needs an old client, and an old client
needs an old pandas and numpy that cannot share the project's venv. The tests talk to
whichever client fits the server through this one small protocol. It must run under
every client release, so it uses only the calls they all have and no project code.

Requests (``op`` and its fields) and answers:
- ``{"op": "sql", "sql": ...}``: a statement without a result -> ``{"ok": true}``
- ``{"op": "query", "sql": ...}`` -> ``{"ok": true, "columns": [...], "types": [...],
  "rows": [[time, value...], ...]}``; values are JSON (TEXT as a string, null as null)
- ``{"op": "insert", "aligned": bool, "records": [[device, time, [measurement...],
  [type name...], [value...]], ...]}`` -> ``{"ok": true}``
- ``{"op": "close"}`` -> ``{"ok": true}``, then the worker exits
An error answers ``{"ok": false, "error": "<class>: <message>"}`` and the worker goes on.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from iotdb.Session import Session
from iotdb.utils.IoTDBConstants import TSDataType


def _value(field: Any) -> Any:
    data_type = field.get_data_type()
    if data_type is None or (hasattr(field, "is_null") and field.is_null()):
        return None
    value = field.get_object_value(data_type)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "item"):  # a numpy scalar from the newer clients
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _type_name(data_type: Any) -> str:
    # Clients give an enum member, its number, or the number as a string.
    if hasattr(data_type, "name"):
        return str(data_type.name)
    if str(data_type).isdigit():
        return str(TSDataType(int(data_type)).name)
    return str(data_type)


def _query(session: Session, sql: str) -> dict[str, Any]:
    data_set = session.execute_query_statement(sql)
    columns = list(data_set.get_column_names())
    types = [_type_name(t) for t in data_set.get_column_types()]
    rows = []
    while data_set.has_next():
        record = data_set.next()
        rows.append([record.get_timestamp()] + [_value(f) for f in record.get_fields()])
    data_set.close_operation_handle()
    return {"ok": True, "columns": columns, "types": types, "rows": rows}


def _insert(session: Session, aligned: bool, records: list[list[Any]]) -> dict[str, Any]:
    devices = [r[0] for r in records]
    times = [int(r[1]) for r in records]
    measurements = [list(r[2]) for r in records]
    types = [[TSDataType[name] for name in r[3]] for r in records]
    values = [list(r[4]) for r in records]
    if aligned:
        session.insert_aligned_records(devices, times, measurements, types, values)
    else:
        session.insert_records(devices, times, measurements, types, values)
    return {"ok": True}


def _open(host: str, port: int, user: str, password: str, timeout: float) -> Session:
    # A DataNode accepts connections a moment before it serves them; retry until then.
    deadline = time.monotonic() + timeout
    while True:
        session = Session(host, port, user, password)
        try:
            session.open(False)
            return session
        except Exception:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def main() -> int:
    host, port, user, password, timeout = sys.argv[1:6]
    session = _open(host, int(port), user, password, float(timeout))
    print(json.dumps({"ok": True, "ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "sql":
                session.execute_non_query_statement(request["sql"])
                answer: dict[str, Any] = {"ok": True}
            elif op == "query":
                answer = _query(session, request["sql"])
            elif op == "insert":
                answer = _insert(session, bool(request["aligned"]), request["records"])
            elif op == "close":
                session.close()
                print(json.dumps({"ok": True}), flush=True)
                return 0
            else:
                answer = {"ok": False, "error": f"ValueError: unknown op {op!r}"}
        except Exception as exc:  # every error goes back to the test, which decides
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
