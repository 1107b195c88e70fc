"""What ``sealsync serve`` does to the machine at its start, against a real process.

* ``<data dir>/sequence`` as a symbolic link to a folder outside the storage: the start's
  tidying of empty folders once walked it and removed empty folders out there.
* Started under umask 000, the receiver made every folder and file it created writable
  by every local user.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from reliability.figures import record

from security.attacks import Site, Touches, snapshot

pytestmark = pytest.mark.slow


def test_a_data_root_that_is_a_link_is_never_walked_or_tidied(tmp_path: Path) -> None:
    """Empty folders shaped like the honest sender's, outside, behind the link: the start
    and a round neither list nor remove anything there; once the operator puts a real
    folder in the link's place, every file of the honest sender loads."""
    site = Site(tmp_path / "site")
    outside = tmp_path / "outside"
    for group in range(4):  # what the storage's tidying removes: a sender's empty folder
        (outside / f"root.sg{group}" / "1" / "0" / site.honest.uuid).mkdir(parents=True)
    (outside / "keep.txt").write_text("not the receiver's")
    link = site.dep.receiver_data / "sequence"
    link.symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with Touches(outside) as watch:
        site.start()
        try:
            at_start = watch.events()
            site.honest_round()
            in_round = watch.events()
        finally:
            site.stop()
        after_stop = watch.events()
    after = snapshot(outside)
    loaded_first = site.honest_files_loaded()  # reads through the link: after the watch
    log = site.dep.log()
    link.unlink()
    link.mkdir()  # the operator's fix: recovery loads what waited
    site.start()
    try:
        code, stderr = site.honest_round()
    finally:
        site.stop()
    loaded = site.honest_files_loaded()
    untouched = at_start == in_round == after_stop == [] and after == before
    record(
        "security", attack="<data dir>/sequence a link out of the storage", tried=1, held=untouched
    )
    assert at_start == [], at_start  # not walked at the start
    assert in_round == [] and after_stop == [], in_round + after_stop
    assert after == before  # nothing removed or written out there
    assert not loaded_first  # its sequence files waited, staged
    assert "is a symbolic link" in log and "Traceback" not in log
    assert code == 0, stderr
    assert loaded


def test_nothing_the_receiver_makes_is_writable_by_others_under_umask_000(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    old = os.umask(0)  # the receiver's process starts with it
    try:
        site.start()
    finally:
        os.umask(old)
    try:
        code, stderr = site.honest_round()
    finally:
        site.stop()
    made = []
    for top in (site.dep.receiver_data, site.dep.receiver_schema):
        for here, dirs, files in os.walk(top):
            made += [os.path.join(here, name) for name in dirs + files]
    writable = [
        f"{path} {stat.filemode(mode)}"
        for path in made
        if not stat.S_ISLNK(mode := os.lstat(path).st_mode) and mode & 0o022
    ]
    held = code == 0 and not writable
    record("security", attack="the receiver started under umask 000", tried=1, held=held)
    assert code == 0, stderr
    assert site.honest_files_loaded()
    assert len(made) > 20  # folders and files of a round were made
    assert writable == [], writable
