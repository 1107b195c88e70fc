"""Shared pieces of the ``test_fakefs_*`` files: unit tests on pyfakefs's fake file system.

On the fake file system no fsync waits for a disk and every case starts from an empty
tree in memory, so these tests can afford many more cases than the real-file-system
tests: every prefix of a log with every combination of state files, random file sets
against a model. pyfakefs's own path handling is not free either (a fake file
operation costs far more than a Python statement), so the case counts are chosen,
not blown up to every byte everywhere. They sit beside the real-file-system tests
(which prove the same code on a real kernel: hard links, fsync, rename) and replace
none of them.

What pyfakefs does not model, and how the files here deal with it:

- A folder's ``st_mtime``/``st_ctime`` do not change when entries are added or
  removed. The scan cache (:mod:`sender.manage.scan_cache`) and the idle mark
  (:mod:`sender.manage.idle_mark`) trust exactly that, so on a fake file system
  they could hide a change; the selection here scans without a cache and never
  consults the idle mark (both have their own real-file-system tests).
- fcntl locks are no-ops (``filelock`` does not exclude anyone); nothing here needs
  exclusion, the device-owner log is used from one thread.
- The native TsFile reader opens real paths, so the receiver's inspection is replaced
  by a small function reading the fake file (:func:`FakeInspect`).

Hypothesis tests here take the function-scoped ``fs`` fixture once and build a fresh
tree inside the test body for every example (:func:`fresh`), which is why the
function-scoped-fixture health check is suppressed; the example database is off
because it would be written into the fake file system and lost, and text comes from
explicit alphabets because ``st.characters`` would look for hypothesis's cached
Unicode tables on the fake disk and rebuild them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem

from sealsync.formats import FileInfo
from sealsync.names import DATA_ROOTS, DATA_SUFFIXES

# too_slow as well: the machine is shared, and generation time is not under test.
FAKEFS_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fresh(fs: FakeFilesystem, root: Path) -> Path:
    """An empty fake file system holding only the folder ``root``: one hypothesis
    example's tree, independent of the examples before it."""
    fs.reset()
    root.mkdir(parents=True)
    return root


def put(path: Path, data: bytes = b"data") -> Path:
    """Write ``path`` (making its folders), as the database or the session would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def files_under(top: Path) -> set[str]:
    """Every file (or link) below ``top``, relative, POSIX style; empty folders don't count."""
    found = set()
    for here, dirs, files in os.walk(top):
        for entry in files + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            found.add((Path(here) / entry).relative_to(top).as_posix())
    return found


def line_cuts(data: bytes) -> list[int]:
    """Prefix lengths of ``data`` worth testing: every line boundary, and inside every
    line a cut after its first byte, in its middle and just before its newline (a
    torn last line, including the one that lacks only the newline)."""
    cuts = {0, len(data)}
    start = 0
    for end in [i for i, byte in enumerate(data) if byte == ord("\n")]:
        cuts.update({start + 1, (start + end) // 2, end, end + 1})
        start = end + 1
    return sorted(c for c in cuts if 0 <= c <= len(data))


def record_cuts(data: bytes) -> list[int]:
    """Every line boundary, and every line cut just before its newline: the torn line
    that looks most like a record (cheaper than :func:`line_cuts`)."""
    return [c for c in line_cuts(data) if c == len(data) or data[c] == 10 or data[c - 1] == 10]


def complete_lines(prefix: bytes) -> list[str]:
    """The lines of ``prefix`` that reached their newline (the model of every reader)."""
    return prefix.decode("utf-8", errors="surrogateescape").split("\n")[:-1]


def sections(lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """The model of ``sync.log``: (deleted, new) names, each once, in order, counting
    only names between their section's start and end markers."""
    deleted: list[str] = []
    new: list[str] = []
    into: list[str] | None = None
    for line in lines:
        if line == "sync deleted file names start":
            into = deleted
        elif line == "sync tsfile start":
            into = new
        elif line in ("sync deleted file names end", "sync tsfile end", "sync end"):
            into = None
        elif line != "sync start" and into is not None and line not in into:
            into.append(line)
    return deleted, new


def as_bytes(lines: Iterable[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


# Name components as databases write them, plus the odd ones check_data_name accepts.
_PART = st.text(alphabet="ab9_.-é", min_size=1, max_size=6).filter(lambda p: p not in (".", ".."))


def data_names() -> st.SearchStrategy[str]:
    """Valid relative data-file names (``sealsync.names.check_data_name`` accepts them)."""
    return st.builds(
        lambda root, dirs, stem, suffix: "/".join([root, *dirs, stem + suffix]),
        st.sampled_from(DATA_ROOTS),
        st.lists(_PART, min_size=0, max_size=3),
        _PART,
        st.sampled_from(DATA_SUFFIXES),
    )


class FakeInspect:
    """The receiver's inspection on the fake file system: a data file's first line is its
    device, so a wrong or missing file shows up as a wrong claim or an error."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> FileInfo:
        self.calls.append(Path(path))
        device = Path(path).read_text().split("\n", 1)[0]
        return FileInfo(devices=(device,), rows=1)
