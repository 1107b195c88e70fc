"""Runs IoTDB's Python client (``apache-iotdb``) for a test, one JSON request per line
on stdin, one JSON answer per line on stdout.

Why a process: the client decodes values differently from release to release (a
TIMESTAMP is an int in 1.3 and a pandas Timestamp in 2.0, TEXT is bytes in one and str
in the other) and pulls pandas and numpy; behind this protocol every test sees the same
JSON values whichever client runs it, and a test can run another client release (for
another server) by running this file with that client's Python. So it uses only calls
every client release has, and no project code.

Requests (``op`` and its fields) and answers:
- ``{"op": "sql", "sql": ...}``: a statement without a result -> ``{"ok": true}``
- ``{"op": "query", "sql": ...}`` -> ``{"ok": true, "columns": [...], "types": [...],
  "rows": [[time, value...], ...]}``
- ``{"op": "insert", "aligned": bool, "records": [[device, time, [measurement...],
  [type name...], [value...]], ...]}`` -> ``{"ok": true}``
- ``{"op": "close"}`` -> ``{"ok": true}``, then the worker exits
An error answers ``{"ok": false, "error": "<class>: <message>"}`` and the worker goes on.

Values in JSON, both ways: BOOLEAN, INT32, INT64, FLOAT, DOUBLE as themselves; TEXT and
STRING as strings; TIMESTAMP as milliseconds since the epoch; DATE as ``"YYYY-MM-DD"``;
BLOB as lowercase hex; null as null.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from typing import Any

from iotdb.Session import Session
from iotdb.utils.IoTDBConstants import TSDataType


def _to_json(type_name: str, value: Any) -> Any:
    if value is None:
        return None
    if type_name == "BLOB":
        return bytes(value).hex()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if type_name == "TIMESTAMP" and isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)  # pandas Timestamp from 2.x clients
    if type_name == "DATE" and isinstance(value, datetime.date):
        return value.isoformat()
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return value


def _from_json(type_name: str, value: Any) -> Any:
    if value is None:
        return None
    if type_name == "BLOB":
        return bytes.fromhex(value)
    if type_name == "DATE":
        return datetime.date.fromisoformat(value)
    return value


def _value(field: Any) -> Any:
    data_type = field.get_data_type()
    if data_type is None or (hasattr(field, "is_null") and field.is_null()):
        return None
    return _to_json(_type_name(data_type), field.get_object_value(data_type))


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
        rows.append([int(record.get_timestamp())] + [_value(f) for f in record.get_fields()])
    data_set.close_operation_handle()
    return {"ok": True, "columns": columns, "types": types, "rows": rows}


def _insert(session: Session, aligned: bool, records: list[list[Any]]) -> dict[str, Any]:
    devices = [r[0] for r in records]
    times = [int(r[1]) for r in records]
    measurements = [list(r[2]) for r in records]
    types = [[TSDataType[name] for name in r[3]] for r in records]
    values = [[_from_json(name, v) for name, v in zip(r[3], r[4], strict=True)] for r in records]
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
