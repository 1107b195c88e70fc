"""``sealsync jars fetch DIR``: the loader's packages resolved as its sessions resolve
them, their jars copied into a folder for ``[loader] jars_dir`` (:mod:`.jars_dir`).

The resolution is Spark's own: a local session started with the loader's coordinates
and excludes (:func:`.jvm.packages`), whose ivy downloads what its cache lacks from
Maven Central, so the folder holds exactly the jars a session of the loader would put
on its class path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from sealsync import durable
from sealsync.errors import ConfigError
from spark_loader import jar_cache, jars_dir, jvm
from spark_loader.spark_session import create_session


def fetch(folder: Path, *, s3: bool = False, verbose: bool = False) -> list[Path]:
    """Fill ``folder`` with the jars of :func:`.jvm.packages`; the jars' paths. A jar
    already there of the right size is kept; a new one is copied under a temporary
    name and renamed whole, and the manifest is written last, so a cut fetch leaves a
    folder the loader refuses."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    wanted, excludes = jvm.packages(s3=s3)
    conf = {"spark.jars.packages": ",".join(wanted), "spark.jars.excludes": ",".join(excludes)}
    # The session's log stays where the error names it if the resolution fails.
    logs = Path(tempfile.mkdtemp(prefix="sealsync-jars-"))
    spark = create_session("local[1]", logs, verbose=verbose, conf=conf)
    try:
        # Beyond the loader's own jar: what ivy resolved (or what the jar cache
        # remembers of the same resolution: the same files).
        own = {"spark.jars": str(jvm.JAR)} if jvm.JAR.is_file() else {}
        resolved = [Path(j) for j in jar_cache.resolved_jars(own, spark)]
    finally:
        spark.stop()
    shutil.rmtree(logs, ignore_errors=True)
    copied = []
    for jar in resolved:
        target = folder / jar.name
        if not (target.is_file() and target.stat().st_size == jar.stat().st_size):
            _copy(jar, target)
        copied.append(target)
    jars_dir.write_manifest(folder, wanted, excludes, copied)
    return sorted(copied)


def _copy(source: Path, target: Path) -> None:
    """``source`` to ``target`` whole or not at all (a jar is too large to hold in memory
    for ``durable.atomic_write``)."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        durable.rename(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
