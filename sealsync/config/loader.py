"""The loader's file: one ``[loader]`` table (``sealsync load``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealsync.config.checks import need_dir, need_prom_path
from sealsync.config.document import load_file, role_values
from sealsync.config.location import LocationError, TableLocation, parse_location
from sealsync.config.schema import (
    MAPPING_SOURCE,
    Choice,
    Integer,
    PathList,
    PathValue,
    Reader,
    Settings,
    Table,
    Text,
    not_a_key,
    setting,
)
from sealsync.errors import ConfigError
from sealsync.ttl import PRECISIONS, Rule, TtlRules, parse_duration, parse_pattern

SPARK_PREFIX = "spark."


class LocationValue(Reader):
    """A table's place: a local path (relative ones from the config's folder) or a URI
    of a Hadoop file system (:mod:`sealsync.config.location`)."""

    def read(self, table: Table, key: str, value: object) -> TableLocation:
        try:
            return parse_location(Text().read(table, key, value), table.base_dir)
        except LocationError as exc:
            raise table.error(key, str(exc)) from None


class SparkSettings(Settings):
    """Spark's settings, as the documented quoted keys (``"spark.executor.memory" =
    "2g"`` in the ``spark`` table) or as TOML's dotted keys.

    Written unquoted under ``[loader]``, ``spark.executor.memory = "2g"`` is TOML for
    the nested tables ``spark`` → ``executor`` → ``memory``: the setting that line
    means is ``spark.executor.memory``, so nested tables are joined back with dots,
    ``spark.`` in front unless the joined name has it already (the same line written
    under a ``[loader.spark]`` header). One setting given both ways is refused.
    """

    def read(self, table: Table, key: str, value: object) -> dict[str, str]:
        if not isinstance(value, Mapping):
            return super().read(table, key, value)  # its "must be a table" error
        flat: dict[str, object] = {}
        dotted: dict[str, str] = {}  # setting -> how it was written, for a clash
        for name, item in value.items():
            if not isinstance(item, Mapping):
                _put(table, key, flat, dotted, str(name), item, f'the quoted key "{name}"')
                continue
            for path, leaf in _leaves(str(name), item):
                setting_name = path if path.startswith(SPARK_PREFIX) else SPARK_PREFIX + path
                _put(table, key, flat, dotted, setting_name, leaf, f"the dotted key {key}.{path}")
        return super().read(table, key, flat)


class TtlSettings(Reader):
    """``[loader.ttl]``: an IoTDB path pattern per duration (:mod:`sealsync.ttl`).

    A pattern is quoted (``"root.db.**" = "1h"``); a device path written unquoted,
    ``root.db.d1 = "1h"``, is TOML's nested tables, joined back with dots.
    """

    def read(self, table: Table, key: str, value: object) -> TtlRules:
        if not isinstance(value, Mapping):
            raise table.error(
                key, f'must be a table of "path pattern" = duration, got {type(value).__name__}'
            )
        rules: dict[str, Rule] = {}
        for name, item in value.items():
            leaves = _leaves(str(name), item) if isinstance(item, Mapping) else [(name, item)]
            for path, leaf in leaves:
                where = f'{key}."{path}"'
                if path in rules:
                    raise table.error(where, "set twice: keep one")
                try:
                    rules[path] = Rule(parse_pattern(path), parse_duration(leaf))
                except ValueError as exc:
                    raise table.error(where, str(exc)) from None
        return TtlRules.of(rules.values())


def _leaves(prefix: str, table: Mapping[str, Any]) -> list[tuple[str, object]]:
    """``(dotted name, value)`` of every non-table value below ``table``."""
    out: list[tuple[str, object]] = []
    for name, item in table.items():
        path = f"{prefix}.{name}"
        out += _leaves(path, item) if isinstance(item, Mapping) else [(path, item)]
    return out


def _put(
    table: Table,
    key: str,
    flat: dict[str, object],
    written: dict[str, str],
    name: str,
    value: object,
    how: str,
) -> None:
    if name in flat:
        raise table.error(
            f"{key}.{name}",
            f"set twice, by {written[name]} and by {how}: keep one (quoted, "
            f'"{name}" = ..., in the spark table)',
        )
    flat[name], written[name] = value, how


@dataclass(frozen=True)
class LoaderConfig:
    receiver_data_dirs: list[Path] = field(metadata=setting(PathList(check=need_dir)))
    #: A local folder, or a URI of a Hadoop file system (hdfs://, s3a://, ...).
    table_path: TableLocation = field(metadata=setting(LocationValue()))
    state_dir: Path = field(metadata=setting(PathValue()))
    master: str = field(default="local[*]", metadata=setting(Text()))
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))
    #: The interpreter executors run; it needs pyarrow and tsfile (None: see ingest).
    python: str | None = field(default=None, metadata=setting(Text()))
    #: Spark settings for the session the loader starts (``spark.executor.memory``...).
    spark: dict[str, str] = field(default_factory=dict, metadata=setting(SparkSettings()))
    #: A folder ``sealsync jars fetch`` filled: Delta's and TsFile's jars come from it,
    #: not from Maven Central (checked when a session starts: ``spark_loader.jars_dir``).
    jars_dir: Path | None = field(default=None, metadata=setting(PathValue()))
    #: New columns one sender's files may add to the table in one run (spark_loader/columns.py).
    max_new_columns: int = field(default=1000, metadata=setting(Integer(1, 1_000_000)))
    #: The edges' TTL rules: rows they expired leave the table (spark_loader/expiry.py).
    ttl: TtlRules = field(default_factory=TtlRules, metadata=setting(TtlSettings()))
    #: The edges' databases' timestamp precision (IoTDB's ``timestamp_precision``),
    #: which their TTLs, given in milliseconds, are converted to.
    timestamp_precision: str = field(default="ms", metadata=setting(Choice(tuple(PRECISIONS))))
    #: Prometheus text-format metrics rewritten after each run (node_exporter's textfile).
    metrics_textfile: Path | None = field(
        default=None, metadata=setting(PathValue(check=need_prom_path))
    )

    def __post_init__(self) -> None:
        """A table_path given as a path (a host or a test building the config itself)
        is a location like one read from a file: a URI of a known scheme or a folder."""
        if not isinstance(self.table_path, TableLocation):
            location = parse_location(os.fspath(self.table_path), Path.cwd())
            object.__setattr__(self, "table_path", location)

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> LoaderConfig:
        """Build from ``{"loader": {...}}`` or the ``[loader]`` table's keys alone.

        ``table_path`` and ``state_dir`` are created by the first run, not here:
        loading a config (``status``) must not leave folders behind.
        """
        return cls(**role_values(cls, "loader", d, base_dir, source, True), source=source)


#: What in a Spark or Hadoop setting's name says it holds a credential
#: (``fs.s3a.secret.key``, ``fs.s3a.access.key``, ``fs.azure.account.key.<account>``,
#: ``fs.azure.sas.<container>``, ``...password``, ``...token``).
SECRET_NAME = re.compile(r"secret|password|token|(^|\.)(access\.key|account\.key|sas)(\.|$)", re.I)


def secret_settings(spark: Mapping[str, str]) -> list[str]:
    """The settings in ``spark`` whose names say they hold a credential."""
    return sorted(k for k in spark if SECRET_NAME.search(k))


def load_loader_config(path: str | os.PathLike[str]) -> LoaderConfig:
    """The loader's file; a file others may read that holds a credential in its Spark
    settings is refused (:func:`refuse_readable_credentials`)."""
    return refuse_readable_credentials(path, load_file(path, LoaderConfig.from_mapping))


def refuse_readable_credentials(path: str | os.PathLike[str], config: LoaderConfig) -> LoaderConfig:
    """``config``, read from ``path``, unless ``path`` is a file others may read and its
    Spark settings hold a credential: then one line (ConfigError) naming the setting and
    the fix: give credentials through Hadoop's configuration or the environment
    (docs/operations.md, "The data centre's lake")."""
    secrets = secret_settings(config.spark)
    if secrets and os.stat(path).st_mode & 0o004:
        raise ConfigError(
            f"{path}: [loader] spark: {secrets[0]} holds a credential and others may read "
            f"this file: chmod o-r {path}, or better give it through Hadoop's configuration "
            "(core-site.xml) or the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
        )
    return config
