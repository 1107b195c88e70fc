"""The jars folder (``[loader] jars_dir``): the loader's Maven packages as files, for a
data centre that cannot reach Maven Central.

A session asks Spark's ivy for Delta Lake and the TsFile library by their coordinates
(:func:`.jvm.packages`); with an empty ivy cache that needs Maven Central (or a mirror)
on the driver's machine. ``sealsync jars fetch DIR``, run where Maven Central answers,
resolves the same coordinates with the same ivy (:mod:`.jars_fetch`), copies the jars
into DIR and writes :data:`MANIFEST` last; a loader whose ``jars_dir`` is DIR puts
exactly the manifest's jars in ``spark.jars`` (executors fetch them from the driver)
and resolves nothing. ``--s3`` adds Hadoop's S3 connector (``hadoop-aws`` of PySpark's
Hadoop release, with its AWS SDK bundle, some 700 MB).

The manifest names the coordinates the folder was filled for and each jar's size. A
folder filled for another Delta or TsFile release than the loader's, a jar missing or
of another size (a copy cut short) stop the run before Spark starts: one line naming
the jar and the command that fills the folder, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sealsync import durable
from sealsync.errors import ConfigError
from spark_loader import jvm

MANIFEST = "sealsync-jars.json"


def fill_command(folder: Path, s3: bool = False) -> str:
    return f"sealsync jars fetch {folder}" + (" --s3" if s3 else "")


def _refuse(folder: Path, what: str, s3: bool = False) -> ConfigError:
    return ConfigError(f"jars_dir {folder} {what}: fill it with `{fill_command(folder, s3)}`")


def _manifest(folder: Path, s3: bool = False) -> dict[str, Any]:
    if not folder.is_dir():
        raise _refuse(folder, "does not exist" if not folder.exists() else "is not a directory", s3)
    try:
        doc = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _refuse(folder, f"holds no {MANIFEST} (the list of its jars)", s3) from None
    except (OSError, ValueError) as exc:
        raise _refuse(folder, f"has an unreadable {MANIFEST} ({exc})", s3) from None
    if not (
        isinstance(doc, dict)
        and _strings(doc.get("packages"))
        and _strings(doc.get("excludes"))
        and isinstance(doc.get("jars"), dict)
        and all(type(size) is int for size in doc["jars"].values())
    ):
        raise _refuse(folder, f"has a {MANIFEST} that is not sealsync's", s3)
    return dict(doc)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def session_jars(folder: Path, *, s3: bool = False) -> list[str]:
    """The jars a session takes from ``folder``, once the manifest covers what the loader
    resolves (with ``s3``, Hadoop's S3 connector too) and every jar it lists is there
    whole; ConfigError (exit 2) otherwise."""
    doc = _manifest(folder, s3)
    wanted, excludes = jvm.packages(s3=s3)
    for package in wanted:
        if package not in doc["packages"]:
            held = ", ".join(doc["packages"]) or "nothing"
            raise _refuse(folder, f"lacks {package} (it was filled for {held})", s3)
    if sorted(doc["excludes"]) != sorted(excludes):
        raise _refuse(folder, "was filled by another sealsync release", s3)
    out = []
    for name, size in doc["jars"].items():
        path = folder / name
        if Path(name).name != name or not name.endswith(".jar"):
            raise _refuse(folder, f"has a {MANIFEST} naming {name!r}, not a jar in it", s3)
        try:
            found = path.stat().st_size
        except FileNotFoundError:
            raise _refuse(folder, f"lacks {name}", s3) from None
        if found != size:
            short = f"holds {name} of {found} bytes, not {size} (a copy cut short?)"
            raise _refuse(folder, short, s3)
        out.append(str(path))
    return out


def write_manifest(
    folder: Path, packages: list[str], excludes: list[str], jars: list[Path]
) -> None:
    """Record that ``folder`` holds ``jars``, resolved for ``packages`` without
    ``excludes``; written last by a fetch, so a cut fetch leaves a folder refused."""
    sizes = {jar.name: jar.stat().st_size for jar in sorted(jars)}
    doc = {"packages": packages, "excludes": excludes, "jars": sizes}
    durable.atomic_write(folder / MANIFEST, json.dumps(doc, indent=1) + "\n")
