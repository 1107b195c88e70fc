"""Which data files the receiver has loaded, and what identifies each one.

The receiver's default storage (DESIGN §4) puts a file of sender ``U`` with the
relative name ``sequence/<dirs...>/<file>`` at ``<data dir>/sequence/<dirs...>/U/<file>``
(same for ``unsequence/``). So a loaded file is a data file whose parent folder is
named by a canonical UUID; everything else under ``sequence/`` and ``unsequence/``
belongs to the host and is never read. ``sync-receiver/`` (files still being
verified or waiting to load) is outside those roots, so it is never seen.

**File identity.** A source file is ``(sender, relative name)``; one *version* of it
is that plus its size and modification time in nanoseconds, and ``file_id`` is a
hash of all four. Storage files are never modified in place (a load renames a
whole file in), so a file replaced under the same name with other content has a
new size or mtime, hence a new ``file_id``: its old rows leave the table and the
new ones come in. The id starts with a letter so that no reader's partition type
inference ever turns it into a number.
"""

from __future__ import annotations

import hashlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from sealsync.errors import BadName
from sealsync.names import DATA_ROOTS, DATA_SUFFIXES, check_data_name

PARQUET = ".parquet"
TSFILE = ".tsfile"


def is_sender_folder(name: str) -> bool:
    """A folder named by a sender UUID, in the one spelling the receiver writes."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def file_id(sender: str, name: str, size: int, mtime_ns: int) -> str:
    """The id of one version of a source file (see the module docstring)."""
    key = f"{sender}\0{name}\0{size}\0{mtime_ns}".encode("utf-8", "surrogateescape")
    return "f" + hashlib.sha256(key).hexdigest()[:32]


@dataclass(frozen=True)
class SourceFile:
    """One loaded data file as found in the receiver's storage."""

    path: Path  # where it is in the receiver's storage
    sender: str
    name: str  # relative name on the sender: sequence/<dirs...>/<file>
    size: int
    mtime_ns: int

    @property
    def file_id(self) -> str:
        return file_id(self.sender, self.name, self.size, self.mtime_ns)

    @property
    def suffix(self) -> str:
        return PARQUET if self.name.endswith(PARQUET) else TSFILE

    @property
    def label(self) -> str:
        """How reports name the file: the sender and its relative name."""
        return f"{self.sender}:{self.name}"


@dataclass
class Discovery:
    files: list[SourceFile]
    skipped: dict[str, str]  # storage path -> reason


def _relative_name(parts: tuple[str, ...]) -> str | None:
    """``(root, dirs..., uuid, file)`` -> ``root/dirs.../file``, or None if not a sender's."""
    if len(parts) < 3 or not is_sender_folder(parts[-2]):
        return None
    return "/".join((*parts[:-2], parts[-1]))


def discover(data_dirs: list[Path]) -> Discovery:
    """Every loaded data file of every sender, in a stable order.

    A name the receiver could not have written (it fails the name gate) and a
    second copy of one (sender, name) in another data dir are reported, not read.
    """
    found: dict[tuple[str, str], SourceFile] = {}
    skipped: dict[str, str] = {}
    for data_dir in data_dirs:
        for root in DATA_ROOTS:
            top = Path(data_dir) / root
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                rel_dir = Path(dirpath).relative_to(data_dir).parts
                if not rel_dir or not is_sender_folder(rel_dir[-1]):
                    continue
                for fname in sorted(filenames):
                    if fname.startswith(".") or not fname.endswith(DATA_SUFFIXES):
                        continue  # sidecars, temporaries
                    path = Path(dirpath) / fname
                    name = _relative_name((*rel_dir, fname))
                    if name is None:
                        continue
                    try:
                        check_data_name(name)
                        st = os.stat(path)
                    except BadName as exc:
                        skipped[str(path)] = f"not a name the receiver writes: {exc}"
                        continue
                    except FileNotFoundError:
                        continue  # deleted while we looked: simply not there
                    except OSError as exc:
                        skipped[str(path)] = f"cannot stat: {exc.strerror or exc}"
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    sender = rel_dir[-1]
                    key = (sender, name)
                    if key in found:
                        skipped[str(path)] = (
                            f"duplicate of {found[key].path} (same sender and name)"
                        )
                        continue
                    found[key] = SourceFile(path, sender, name, st.st_size, st.st_mtime_ns)
    files = sorted(found.values(), key=lambda f: (f.sender, f.name))
    return Discovery(files=files, skipped=skipped)
