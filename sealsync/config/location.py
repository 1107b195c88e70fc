"""Where the loader's table lives: a local folder or a URI of a Hadoop file system.

A data centre keeps what Spark reads on HDFS or an object store, so ``table_path``
takes ``hdfs://...``, ``s3a://...`` and any other file system Hadoop has a connector
for, as well as a local path or ``file://``. What must never happen is a URI taken as
a folder name: ``s3a:/bucket/points`` (one slash) or ``s4://x`` became a relative
folder beside the config before, and a load wrote there without a word. So anything
that starts like a URI is one, and must be a well-formed URI of a known scheme.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

LOCAL_SCHEME = "file"
TESTED_SCHEMES = ("hdfs", "s3a")
"""Hadoop file systems the project's tests run the loader on."""
OTHER_SCHEMES = (
    "abfs",
    "abfss",
    "gs",
    "wasb",
    "wasbs",
    "viewfs",
    "webhdfs",
    "swebhdfs",
    "ofs",
    "o3fs",
    "oss",
    "cosn",
    "obs",
)
"""Hadoop file systems the loader takes untested (their connector must be on Spark's
class path, its settings in Spark's configuration)."""
REMOTE_SCHEMES = (*TESTED_SCHEMES, *OTHER_SCHEMES)
_NEEDS_AUTHORITY = tuple(s for s in REMOTE_SCHEMES if s not in ("hdfs", "viewfs"))
_INSTEAD = {
    "s3": "s3a:// (Hadoop's S3A connector)",
    "s3n": "s3a:// (Hadoop's S3A connector)",
    "http": "a file system URI (hdfs://, s3a://, ...)",
    "https": "a file system URI (hdfs://, s3a://, ...)",
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


class LocationError(ValueError):
    """The text is not a location the loader can use; the message says why and what to
    write instead."""


@dataclass(frozen=True)
class TableLocation:
    """A table's place: ``uri`` as Spark and Delta take it, and for a local table the
    folder (``path``). A remote location has no local path: nothing may treat it as one.
    """

    uri: str
    scheme: str
    path: Path | None = None

    @property
    def local(self) -> bool:
        return self.path is not None

    def child(self, *parts: str) -> str:
        """The URI (or local path) of ``parts`` below the table."""
        return "/".join([self.uri.rstrip("/"), *parts])

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else self.uri

    def __fspath__(self) -> str:
        """The local folder; a remote table has none, and code that reaches for one
        fails here rather than writing a local folder named like the URI."""
        if self.path is None:
            raise TypeError(f"{self.uri} is not a local path")
        return str(self.path)


def parse_location(text: str, base_dir: Path) -> TableLocation:
    """``text`` as a table location; a relative local path is taken from ``base_dir``.
    LocationError for an unknown scheme or a malformed URI."""
    if "\x00" in text or not text.strip():
        raise LocationError("is empty or holds NUL")
    match = _SCHEME.match(text)
    if match is None or len(match.group(1)) == 1:  # no scheme (a one-letter one is a drive)
        path = Path(text).expanduser()
        return _local(path if path.is_absolute() else base_dir / path)
    scheme = match.group(1).lower()
    if scheme in _INSTEAD:
        raise LocationError(
            f"{scheme}:// is not a file system Spark writes a table to: use {_INSTEAD[scheme]}"
        )
    if scheme != LOCAL_SCHEME and scheme not in REMOTE_SCHEMES:
        known = ", ".join(f"{s}://" for s in (LOCAL_SCHEME, *REMOTE_SCHEMES))
        raise LocationError(
            f"unknown scheme {scheme!r} in {text!r}: write a local path, or a URI of {known}"
        )
    if not text[len(scheme) + 1 :].startswith("//"):
        raise LocationError(f"{text!r} is not a URI: write {scheme}://<authority>/<path>")
    parts = urlsplit(text)
    if parts.query or parts.fragment or any(c in text for c in " \t\r\n"):
        raise LocationError(f"{text!r}: a table URI has no query, fragment or whitespace")
    if scheme == LOCAL_SCHEME:
        if parts.netloc not in ("", "localhost"):
            raise LocationError(
                f"{text!r} names host {parts.netloc!r}: a file:// table is on this machine "
                "(file:///path)"
            )
        return _local(Path(parts.path))
    if scheme in _NEEDS_AUTHORITY and not parts.netloc:
        raise LocationError(f"{text!r} names no bucket or container: {scheme}://<bucket>/<path>")
    below = PurePosixPath(parts.path)
    if str(below) in ("", "/", ".") or ".." in below.parts:
        raise LocationError(
            f"{text!r}: name a folder below the root for the table, without '..' "
            f"({scheme}://{parts.netloc or '<authority>'}/<path>)"
        )
    return TableLocation(f"{scheme}://{parts.netloc}{below}", scheme)


def _local(path: Path) -> TableLocation:
    if not path.is_absolute():
        raise LocationError(f"file:// needs an absolute path, got {path}")
    return TableLocation(path.as_uri(), LOCAL_SCHEME, path)
