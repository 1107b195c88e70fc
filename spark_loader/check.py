"""``sealsync check`` of a loader config: the receiver's data dirs hold something, the
table and the state can be written, the jars folder (if any) holds the loader's jars.
No Spark is started."""

from __future__ import annotations

import os
from pathlib import Path

from sealsync.config import LoaderConfig
from sealsync.errors import ConfigError
from sealsync.findings import Finding, data_roots, problem, sound
from spark_loader.jars_dir import session_jars
from spark_loader.jvm import has_hadoop_aws
from spark_loader.table_binding import refuse_another_table


def check_loader(config: LoaderConfig) -> list[Finding]:
    """The receiver's data dirs hold something, the table and state can be written."""
    out = [
        sound(f"loader config {config.source}: table {config.table_path}, master {config.master}")
    ]
    out.extend(_receiver_data_dir(d) for d in config.receiver_data_dirs)
    table = config.table_path
    if table.path is not None:
        out.append(_creatable("table_path", table.path))
    else:
        out.append(
            sound(
                f"table_path {table.uri}: a table on {table.scheme}://, reached through "
                "Spark's Hadoop file system when a load runs (not opened here: no Spark)"
            )
        )
    out.append(_creatable("state_dir", config.state_dir))
    if config.jars_dir is not None:
        s3 = table.scheme == "s3a" and not has_hadoop_aws(config.spark)
        out.append(_jars(config.jars_dir, s3))
    if config.ttl.rules:
        rules = ", ".join(
            f"{r.pattern} {'INF' if r.ms is None else f'{r.ms} ms'}" for r in config.ttl.rules
        )
        out.append(
            sound(
                f"ttl: rows expire as the edges' IoTDB expires them ({rules}; "
                f"timestamp_precision {config.timestamp_precision})"
            )
        )
    refuse_another_table(config)  # the state dir loads another table: exit 2, one line
    return out


def _jars(folder: Path, s3: bool) -> Finding:
    try:
        found = session_jars(folder, s3=s3)
    except ConfigError as exc:
        return problem(str(exc))
    return sound(f"jars_dir {folder} holds the {len(found)} jars the loader needs")


def _receiver_data_dir(folder: Path) -> Finding:
    try:
        empty = not any(folder.iterdir())
    except OSError as exc:
        return problem(f"receiver data dir {folder}: cannot list it: {exc.strerror or exc}")
    if empty:
        return problem(
            f"receiver data dir {folder} is empty (a typo, or a disk not mounted?): "
            "the loader would find no file in it"
        )
    roots = data_roots(folder)
    if not roots:
        return problem(
            f"receiver data dir {folder} holds neither sequence/ nor unsequence/: "
            "name a folder of the receiver's data_dirs"
        )
    return sound(f"receiver data dir {folder} holds {' and '.join(roots)}")


def _creatable(what: str, path: Path) -> Finding:
    """A folder the loader writes: present and writable, or creatable by its first run."""
    if path.exists():
        if not path.is_dir():
            return problem(f"{what} {path} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            return problem(f"{what} {path} is not writable by this user")
        return sound(f"{what} {path} exists and is writable")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return problem(f"{what} {path} cannot be created: {parent} is not writable by this user")
    return sound(f"{what} {path} does not exist yet: the first load creates it")
