"""The file system the table lives on: a local folder, or HDFS, S3 or any other Hadoop
file system through the Spark session's own client.

Every operation the loader does on its table goes through a :class:`Store`: listing,
reading a Delta log file or a Parquet footer, writing its list of uncommitted files,
moving a written file into its partition, removing what a killed run left. The local
store is the plain system calls (and fsync, through :mod:`sealsync.durable`); the
Hadoop store asks ``org.apache.hadoop.fs.FileSystem`` in the session's JVM, with the
session's Hadoop configuration (``spark.hadoop.*``: endpoints, credentials), so the
loader reaches exactly what its Spark jobs reach.

What a store cannot promise is never relied on: an object store has no atomic rename
and no fsync. Exactly-once rests on the Delta commit alone (only a commit makes a file
part of the table); the files of a run that never committed are named in the table's
list of uncommitted files before they exist, and removed by the next run.
"""

from __future__ import annotations

import io
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq

from sealsync import durable
from sealsync.crashpoints import crash_point
from spark_loader.hdfs_close import (
    CLOSE_DELAY_KEY,
    CLOSE_RETRIES_KEY,
    DELAY_DEFAULT,
    RETRIES_DEFAULT,
    quick_close,
)

#: Schemes of object stores: a file appears whole when its writer closes it (an
#: atomic PUT), and a rename is a copy.
OBJECT_STORES = ("s3a", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cosn", "obs")
_FOOTER_GUESS = 64 * 1024
#: Files copied to a remote store at once (:meth:`HadoopStore.upload_many`). An upload
#: is mostly waiting (HDFS answers a file's close once its DataNode has reported the
#: block, S3 a PUT after a round trip): 200 files of a run to HDFS took 9.7 s eight at a
#: time, 5.7 s thirty-two at a time, and no less with more (docs/performance.md).
UPLOADS = 32
_COPY_BUFFER = 1 << 20


class Entry(NamedTuple):
    """One entry of a listing."""

    name: str
    is_dir: bool
    size: int
    mtime_ms: int


class StoreError(OSError):
    """An operation the store refused; the message names the path and the store's reason."""


class Store(ABC):
    """What the loader does to its table's files, whatever holds them."""

    local: bool = False

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    @abstractmethod
    def listdir(self, path: str) -> list[Entry]:
        """The entries of a folder, by name; [] if it does not exist."""

    @abstractmethod
    def stat(self, path: str) -> Entry | None:
        """The entry at ``path``; None if nothing is there."""

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def is_dir(self, path: str) -> bool:
        entry = self.stat(path)
        return entry is not None and entry.is_dir

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``: readers see the old content or the new."""

    @abstractmethod
    def delete(self, path: str, recursive: bool = False) -> bool:
        """Remove a file (or a folder and all below it); True if something was there."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move a file to a name that is free (StoreError if it is not)."""

    @abstractmethod
    def mkdirs(self, path: str) -> None: ...

    @abstractmethod
    def upload(self, local: Path, path: str) -> None:
        """Copy a local file to ``path`` (the bytes cross to the store once)."""

    def upload_many(self, pairs: list[tuple[Path, str]]) -> list[str | None]:
        """:meth:`upload` of each (local file, path); for each, None or why it failed."""
        out: list[str | None] = []
        for local, path in pairs:
            try:
                self.upload(local, path)
                out.append(None)
                crash_point("loader.upload.file")
            except OSError as exc:
                out.append(str(exc.strerror or exc))
        return out

    def sync(self, files: list[str], root: str) -> None:  # noqa: B027 - optional
        """Make written files durable before a commit names them, with the folders
        holding them up to the table's ``root`` (a local disk's fsync; a distributed
        store's files are durable once closed)."""

    def footer(self, path: str) -> Any:
        """A Parquet file's footer (``pyarrow.parquet.FileMetaData``), its data unread."""
        size = self.stat(path)
        if size is None:
            raise FileNotFoundError(path)
        tail = self.read_range(
            path, max(0, size.size - _FOOTER_GUESS), min(size.size, _FOOTER_GUESS)
        )
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise StoreError(f"{path} is not a Parquet file")
        need = int.from_bytes(tail[-8:-4], "little") + 8
        if need > len(tail):
            tail = self.read_range(path, size.size - need, need)
        return pq.read_metadata(io.BytesIO(b"PAR1" + tail[-need:]))


class LocalStore(Store):
    """A table in a local (or mounted) folder: system calls, fsync where it matters."""

    local = True

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def listdir(self, path: str) -> list[Entry]:
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(
                Entry(
                    e.name, e.is_dir(follow_symlinks=False), st.st_size, st.st_mtime_ns // 1_000_000
                )
            )
        return sorted(out)

    def stat(self, path: str) -> Entry | None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        is_dir = os.path.isdir(path) and not os.path.islink(path)
        return Entry(os.path.basename(path), is_dir, st.st_size, st.st_mtime_ns // 1_000_000)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def write_bytes(self, path: str, data: bytes) -> None:
        # Not fsynced: what it holds (the list of uncommitted files) matters after a
        # killed process, whose page cache the next run reads; after a power cut a
        # file it lost stays unnamed and unread, and VACUUM removes it.
        durable.atomic_write(path, data, sync=False)

    def delete(self, path: str, recursive: bool = False) -> bool:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
            return True
        if os.path.isdir(path):
            if recursive:
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.rmdir(path)
            return True
        return False

    def rename(self, src: str, dst: str) -> None:
        if not durable.rename_noreplace(src, dst):  # a file system without the flag
            if os.path.exists(dst):
                raise StoreError(f"cannot move {src}: {dst} exists")
            os.rename(src, dst)

    def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def upload(self, local: Path, path: str) -> None:
        shutil.copyfile(local, path)

    def sync(self, files: list[str], root: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        folders = {root}  # a partition's three levels, and the table's
        for path in files:
            parent = Path(path).parent
            folders |= {str(parent), str(parent.parent), str(parent.parent.parent)}

        with ThreadPoolExecutor(8) as pool:  # the disk gets them together
            list(pool.map(durable.fsync_file, files))
            list(pool.map(durable.fsync_dir, sorted(folders, key=lambda f: -f.count(os.sep))))

    def footer(self, path: str) -> Any:
        return pq.read_metadata(path)


class HadoopStore(Store):
    """A table on a Hadoop file system, through the session's JVM and configuration."""

    def __init__(self, spark: Any, root: str) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self.root = root
        self.scheme = root.split(":", 1)[0].lower()
        try:
            self._fs = self._path(root).getFileSystem(self._conf)
        except Exception as exc:
            raise StoreError(f"cannot reach {root}: {java_reason(exc)}") from None

    def _path(self, path: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _call(self, what: str, path: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            if _java_class(exc) == "java.io.FileNotFoundException":
                raise FileNotFoundError(path) from None
            raise StoreError(f"{what} {path}: {java_reason(exc)}") from None

    def listdir(self, path: str) -> list[Entry]:
        try:
            statuses = self._call("cannot list", path, self._fs.listStatus, self._path(path))
        except FileNotFoundError:
            return []
        return sorted(
            Entry(s.getPath().getName(), s.isDirectory(), s.getLen(), s.getModificationTime())
            for s in statuses
        )

    def stat(self, path: str) -> Entry | None:
        try:
            s = self._call("cannot look at", path, self._fs.getFileStatus, self._path(path))
        except FileNotFoundError:
            return None
        return Entry(s.getPath().getName(), s.isDirectory(), s.getLen(), s.getModificationTime())

    def read_bytes(self, path: str) -> bytes:
        stream = self._call("cannot open", path, self._fs.open, self._path(path))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        stream = self._call("cannot open", path, self._fs.open, self._path(path))
        try:
            stream.seek(offset)
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
        finally:
            stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        # An object store's PUT is atomic; elsewhere a temporary renamed over the name.
        target = path if self.scheme in OBJECT_STORES else f"{path}.{uuid.uuid4().hex}.tmp"
        out = self._call("cannot write", target, self._fs.create, self._path(target), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if target != path:
            self._fs.delete(self._path(path), False)
            if not self._call(
                "cannot rename", target, self._fs.rename, self._path(target), self._path(path)
            ):
                raise StoreError(f"cannot rename {target} to {path}")

    def delete(self, path: str, recursive: bool = False) -> bool:
        return bool(self._call("cannot delete", path, self._fs.delete, self._path(path), recursive))

    def rename(self, src: str, dst: str) -> None:
        if self.exists(dst):
            raise StoreError(f"cannot move {src}: {dst} exists")
        if not self._call("cannot move", src, self._fs.rename, self._path(src), self._path(dst)):
            raise StoreError(f"cannot move {src} to {dst}")

    def mkdirs(self, path: str) -> None:
        if self.scheme in OBJECT_STORES:
            return  # no folders: a file's name makes its prefix (S3A's marker costs requests)
        self._call("cannot create", path, self._fs.mkdirs, self._path(path))

    def upload_many(self, pairs: list[tuple[Path, str]]) -> list[str | None]:
        """Several files at once: a store answers each request after a round trip (a
        PUT, a NameNode call), which files sent side by side share."""
        from concurrent.futures import ThreadPoolExecutor

        fs = self._upload_fs()

        def one(pair: tuple[Path, str]) -> str | None:
            try:
                self._upload(fs, *pair)
            except OSError as exc:
                return str(exc.strerror or exc)
            crash_point("loader.upload.file")
            return None

        try:
            with ThreadPoolExecutor(UPLOADS) as pool:
                return list(pool.map(one, pairs))
        finally:
            if fs is not self._fs:
                fs.close()

    def _upload_fs(self) -> Any:
        """The session's file system, or on HDFS, when the session's closes wait longer
        (a session the loader was given), one of its own whose closes ask first after
        :data:`.hdfs_close.CLOSE_FIRST_ASK_MS`, closed after its uploads."""
        if self.scheme != "hdfs":
            return self._fs
        quick = quick_close(
            self._conf.getInt(CLOSE_DELAY_KEY, DELAY_DEFAULT),
            self._conf.getInt(CLOSE_RETRIES_KEY, RETRIES_DEFAULT),
        )
        if quick is None:
            return self._fs
        conf = self._jvm.org.apache.hadoop.conf.Configuration(self._conf)
        conf.setInt(CLOSE_DELAY_KEY, quick[0])
        conf.setInt(CLOSE_RETRIES_KEY, quick[1])
        try:
            return self._jvm.org.apache.hadoop.fs.FileSystem.newInstance(self._fs.getUri(), conf)
        except Exception as exc:
            raise StoreError(f"cannot reach {self.root}: {java_reason(exc)}") from None

    def upload(self, local: Path, path: str) -> None:
        self._upload(self._fs, local, path)

    def _upload(self, fs: Any, local: Path, path: str) -> None:
        # A plain create, told (S3A) to skip its checks for folders and an existing
        # file: the loader's names are new. ``copyFromLocalFile`` made more requests.
        # ``recursive``: HDFS creates the parent folders (a builder's create does not).
        def copy() -> None:
            source = self._jvm.java.io.FileInputStream(str(local))
            try:
                builder = fs.createFile(self._path(path)).overwrite(True).recursive()
                out = builder.opt("fs.s3a.create.performance", True).build()
            except BaseException:
                source.close()
                raise
            self._jvm.org.apache.hadoop.io.IOUtils.copyBytes(source, out, _COPY_BUFFER, True)

        self._call("cannot upload to", path, copy)


def _java_class(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    if java is None:
        return ""
    try:
        return str(java.getClass().getName())
    except Exception:
        return ""


def java_reason(exc: BaseException) -> str:
    """The first line of what the JVM said (not py4j's frame)."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else type(exc).__name__


def store_for(location: Any, spark: Any = None) -> Store:
    """The store of a table location (:class:`sealsync.config.location.TableLocation`);
    a remote one needs the session."""
    if location.local:
        return LocalStore()
    if spark is None:
        raise StoreError(f"{location.uri}: a table on {location.scheme}:// needs the Spark session")
    return HadoopStore(spark, location.uri)
