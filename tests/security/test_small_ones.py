"""The small ones of issue 16 (item 5), each against a real ``sealsync serve``.

* JSON nested past any recursion limit in a HELLO once raised ``RecursionError``: an
  undocumented ``internal`` error and a traceback in the log for every such frame.
* The receiver once followed a symbolic link planted inside its storage folders.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from receiver_service_helpers import control_frame
from reliability.figures import record

from sealsync.protocol import Error, Kind
from security.attacks import Site

pytestmark = pytest.mark.slow


def test_deeply_nested_json_is_a_protocol_error_without_a_traceback(tmp_path: Path) -> None:
    site = Site(tmp_path / "site")
    site.start()
    answers: list[object] = []
    try:
        for _ in range(5):
            client = site.hostile_session()
            depth = 5000  # past the JSON decoder's recursion limit
            client.raw(control_frame(Kind.HELLO, b"[" * depth + b"]" * depth))
            answers.append(client.recv())
            client.close()
        code, stderr = site.honest_round()
    finally:
        site.stop()
    log = site.dep.log()
    held = code == 0 and "Traceback" not in log
    record("security", attack="HELLO nested 5000 deep (RecursionError)", tried=5, held=held)
    assert all(isinstance(a, Error) and a.code == "protocol" for a in answers), answers
    assert all("undecodable payload (RecursionError)" in a.message for a in answers)  # type: ignore[union-attr]
    assert "Traceback" not in log and "internal" not in log
    assert code == 0, stderr
    assert site.honest_files_loaded()


def test_a_link_planted_in_the_storage_is_never_followed(tmp_path: Path) -> None:
    """A link where the honest sender's files would load, pointing outside: nothing lands
    outside, the receiver's log names the link, the files wait staged; once the operator
    replaces the link with a real folder, the receiver's recovery (at its start, or at the
    sender's next round) loads every one of them."""
    site = Site(tmp_path / "site")
    outside = tmp_path / "outside"
    outside.mkdir()
    groups = sorted({PurePosixPath(n).parts[:2] for n in site.names})
    for group in groups:
        link = site.dep.receiver_data.joinpath(*group)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside, target_is_directory=True)
    site.start()
    try:
        first = site.honest.send()
        written_outside = list(outside.rglob("*"))
        loaded_first = site.honest_files_loaded()
        for group in groups:
            site.dep.receiver_data.joinpath(*group).unlink()
        site.stop()
        site.start()  # recovery replays the loads that waited
        code, stderr = site.honest_round()
    finally:
        site.stop()
    log = site.dep.log()
    held = not written_outside and not loaded_first and code == 0 and site.honest_files_loaded()
    record("security", attack="symbolic link planted in the storage", tried=1, held=held)
    assert written_outside == []
    assert not loaded_first
    assert "is a symbolic link, and the receiver follows none inside its storage" in log
    assert "Traceback" not in first.stderr + log
    assert code == 0, stderr
    assert site.honest_files_loaded()
