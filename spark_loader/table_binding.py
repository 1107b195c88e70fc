"""Which table a state dir loads: ``<state_dir>/table.json``.

The state dir records what was ingested into one table. With a typo'd ``table_path``
and the same ``state_dir``, a run would build a second table beside the first from
scratch, and ``status`` would report that table's totals for the right one. So the
first run records its ``table_path`` in the state dir, and a run or a check with
another one is refused (a configuration error, exit 2, nothing written).

A state dir from before this file records no table yet: the next run records its
``table_path`` (a note in the report says so), and from then on it is the one.

The file also holds the loader's id (``loader``, 32 hex digits, made by the run that
records the table): several loaders may write one table (one per receiver), and each
names its working folders, its list of uncommitted files and its Delta application id
with it, so that none touches another's (:class:`.table_layout.WriterNames`). A state
dir that recorded its table before loaders had ids keeps the plain names.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from sealsync import durable
from sealsync.config import LoaderConfig
from sealsync.config.location import LocationError, TableLocation, parse_location
from sealsync.errors import ConfigError, LocalIOError
from spark_loader.state import state_path

BINDING_FILE = "table.json"
_WRITER_RE = re.compile(r"^[0-9a-f]{32}$")


def binding_path(state_dir: Path) -> Path:
    return Path(state_dir) / BINDING_FILE


def _binding(state_dir: Path) -> dict[str, str] | None:
    path = binding_path(state_dir)
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LocalIOError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError):
        body = None
    writer = body.get("loader") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("table_path"), str)
        or (writer is not None and not (isinstance(writer, str) and _WRITER_RE.match(writer)))
    ):
        raise ConfigError(
            f"{path} is damaged: restore it from a backup, or write into it "
            '{"table_path": "<the table this state dir loads>"}'
        )
    return {k: str(v) for k, v in body.items() if k in ("table_path", "loader")}


def recorded_table(state_dir: Path) -> str | None:
    """The table_path the state dir records; None if it records none."""
    body = _binding(state_dir)
    return None if body is None else body["table_path"]


def loader_id(state_dir: Path) -> str | None:
    """The loader's id the state dir records (None: none, a state dir bound before ids)."""
    body = _binding(state_dir)
    return None if body is None else body.get("loader")


def _same(recorded: str, table: TableLocation) -> bool:
    """Whether the recorded text names ``table``: the same folder (however spelt), or
    the same URI (its scheme and authority in any case)."""
    if recorded == str(table):
        return True
    try:
        earlier = parse_location(recorded, Path("/"))
    except LocationError:
        return False
    if earlier.path is not None or table.path is not None:
        return (
            earlier.path is not None
            and table.path is not None
            and earlier.path.resolve() == table.path.resolve()
        )
    return _normal(earlier.uri) == _normal(table.uri)


def _normal(uri: str) -> str:
    scheme, _, rest = uri.partition("://")
    authority, _, below = rest.partition("/")
    return f"{scheme.lower()}://{authority.lower()}/{below.rstrip('/')}"


def binding_problem(config: LoaderConfig) -> str | None:
    """Why ``config.table_path`` is not the table ``config.state_dir`` loads, or None.
    Reads only."""
    table, state_dir = config.table_path, Path(config.state_dir)
    recorded = recorded_table(state_dir)
    if recorded is None or _same(recorded, table):
        return None
    return (
        f"{config.source}: [loader] table_path: {table} is not the table state_dir "
        f"{state_dir} loads ({recorded}): a typo? fix table_path; a second table needs a "
        "state_dir of its own"
    )


def refuse_another_table(config: LoaderConfig) -> None:
    """ConfigError (exit 2) if ``config.table_path`` is not the state dir's table."""
    problem = binding_problem(config)
    if problem is not None:
        raise ConfigError(problem)


def bind(config: LoaderConfig) -> str | None:
    """Record ``config.table_path`` in the state dir if it records none yet (ConfigError
    if it records another); a note for the report when an existing state was bound."""
    refuse_another_table(config)
    state_dir = Path(config.state_dir)
    if recorded_table(state_dir) is not None:
        return None
    earlier = state_path(state_dir).exists()
    path = binding_path(state_dir)
    try:
        body = {"table_path": str(config.table_path), "loader": uuid.uuid4().hex}
        durable.atomic_write(path, json.dumps(body) + "\n")
    except OSError as exc:
        raise LocalIOError(f"cannot create {path}: {exc.strerror or exc}") from None
    if earlier:
        return f"state dir {state_dir} now records the table it loads: {config.table_path}"
    return None
