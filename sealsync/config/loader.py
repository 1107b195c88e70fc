"""The loader's file: one ``[loader]`` table (``sealsync load``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealsync.config.checks import need_dir, need_prom_path
from sealsync.config.document import load_file, role_values
from sealsync.config.schema import (
    MAPPING_SOURCE,
    PathList,
    PathValue,
    Settings,
    Text,
    not_a_key,
    setting,
)


@dataclass(frozen=True)
class LoaderConfig:
    receiver_data_dirs: list[Path] = field(metadata=setting(PathList(check=need_dir)))
    table_path: Path = field(metadata=setting(PathValue()))
    state_dir: Path = field(metadata=setting(PathValue()))
    master: str = field(default="local[*]", metadata=setting(Text()))
    source: str = field(default=MAPPING_SOURCE, metadata=not_a_key("the file's name"))
    #: The interpreter executors run; it needs pyarrow and tsfile (None: see ingest).
    python: str | None = field(default=None, metadata=setting(Text()))
    #: Spark settings for the session the loader starts (``spark.executor.memory``...).
    spark: dict[str, str] = field(default_factory=dict, metadata=setting(Settings()))
    #: A folder ``sealsync jars fetch`` filled: Delta's and TsFile's jars come from it,
    #: not from Maven Central (checked when a session starts: ``spark_loader.jars_dir``).
    jars_dir: Path | None = field(default=None, metadata=setting(PathValue()))
    #: Prometheus text-format metrics rewritten after each run (node_exporter's textfile).
    metrics_textfile: Path | None = field(
        default=None, metadata=setting(PathValue(check=need_prom_path))
    )

    @classmethod
    def from_mapping(
        cls, d: Mapping[str, Any], base_dir: Path, source: str = MAPPING_SOURCE
    ) -> LoaderConfig:
        """Build from ``{"loader": {...}}`` or the ``[loader]`` table's keys alone.

        ``table_path`` and ``state_dir`` are created by the first run, not here:
        loading a config (``status``) must not leave folders behind.
        """
        return cls(**role_values(cls, "loader", d, base_dir, source, True), source=source)


def load_loader_config(path: str | os.PathLike[str]) -> LoaderConfig:
    return load_file(path, LoaderConfig.from_mapping)
