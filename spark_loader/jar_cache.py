"""The jars Spark resolved for ``spark.jars.packages``, remembered between sessions.

Spark's ivy resolves a session's packages (Delta Lake, the TsFile library) every time
a session starts, even when every jar is already in its cache under the user's home:
that costs seconds per session (docs/performance.md), and a ``sealsync load`` started
by cron is a new session each run. For a local master, the loader remembers which
local jars a resolution gave, keyed by exactly what was resolved (the packages and the
excludes), and starts later sessions with those jars in ``spark.jars`` instead: the
same files on the same class path, without asking ivy again.

Nothing is taken on trust: an entry is used only if every jar it names is still a
file; any change of coordinates resolves again, and so does a session that names its
own repositories or ivy settings (never remembered). A cluster master always resolves
(its executors take the packages' jars by the way ``spark-submit`` hands them out,
:func:`.jvm.ship_packages`). Removing the file (:data:`CACHE_NAME` under
``$XDG_CACHE_HOME/sealsync``, else ``~/.cache/sealsync``) forgets every entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from sealsync import durable

CACHE_NAME = "spark-jars.json"
PACKAGES = "spark.jars.packages"
EXCLUDES = "spark.jars.excludes"
JARS = "spark.jars"
#: Settings that change what a resolution gives: a session with any is never remembered.
_RESOLVER = ("spark.jars.repositories", "spark.jars.ivy", "spark.jars.ivySettings")


def cache_file() -> Path:
    """Where the entries live: the user's cache folder, as ivy's own cache is."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sealsync" / CACHE_NAME


def _key(conf: dict[str, str]) -> str | None:
    """What a resolution of ``conf`` depends on; None if it must not be remembered."""
    if not conf.get(PACKAGES) or any(conf.get(k) for k in _RESOLVER):
        return None
    return json.dumps([conf[PACKAGES], conf.get(EXCLUDES, "")])


def _entries(path: Path) -> dict[str, list[str]]:
    """The file's entries; an unreadable or foreign file is no entries (resolve again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: v
        for k, v in data.items()
        if isinstance(v, list) and v and all(isinstance(j, str) for j in v)
    }


def apply(master: str, conf: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """``conf`` to start a session with, and the key to remember its resolution under.

    With a remembered entry whose jars are all there, the packages and excludes give
    way to those jars in ``spark.jars`` (and nothing is to be remembered); otherwise
    ``conf`` is unchanged and the key says under what to remember what Spark resolves.
    """
    key = _key(conf) if master.startswith("local") else None
    if key is None:
        return conf, None
    jars = _entries(cache_file()).get(key)
    if not jars or not all(Path(j).is_file() for j in jars):
        return conf, key
    out = {k: v for k, v in conf.items() if k not in (PACKAGES, EXCLUDES)}
    out[JARS] = ",".join([j for j in conf.get(JARS, "").split(",") if j] + jars)
    return out, None


def _local_path(jar: str) -> str:
    parsed = urlparse(jar)
    return unquote(parsed.path) if parsed.scheme == "file" else jar


def resolved_jars(conf: dict[str, str], spark: Any) -> list[str]:
    """The local jars ``spark`` (started with ``conf``) has beyond ``conf``'s own
    ``spark.jars``: those resolved for its packages.

    ``spark-submit`` lists the local jars of a Python application in
    ``spark.repl.local.jars``: the session's own ``spark.jars`` first, then the
    resolved ones.
    """
    listed = spark.sparkContext.getConf().get("spark.repl.local.jars") or ""
    own = {str(Path(j).resolve()) for j in conf.get(JARS, "").split(",") if j}
    jars = [_local_path(j) for j in listed.split(",") if j]
    return [j for j in jars if str(Path(j).resolve()) not in own]


def remember(key: str, conf: dict[str, str], spark: Any) -> None:
    """Record the jars Spark resolved for ``conf``'s packages under ``key``. Best
    effort: a cache that cannot be written only means resolving again next time."""
    resolved = resolved_jars(conf, spark)
    if not resolved or not all(Path(j).is_file() for j in resolved):
        return
    path = cache_file()
    entries = _entries(path)
    if entries.get(key) == resolved:
        return
    entries[key] = resolved
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        durable.atomic_write(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass
