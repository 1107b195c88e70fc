"""The received-files layout both ways (sealsync/received.py, docs/design.md §4.8).

The receiver's storage writes it and the Spark loader reads it, and the two never
import each other: so every name form a database writes goes through both directions
here, first as strings, then through the real directory storage and the real
discovery on disk.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from receiver.layout import SenderFolder
from receiver.storage import DirectoryStorage
from sealsync import received
from sealsync.names import check_data_name
from spark_loader.discovery import discover

_node = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
_database = st.builds("root.{}".format, _node)
_number = st.integers(0, 10**13)


@st.composite
def names(draw: st.DrawFn) -> str:
    """A data file's name in every form a writer gives it: IoTDB 1.x/2.x
    (``<database>/<region>/<partition>/<t>-<v>-<i>-<c>.tsfile``), 0.12/0.13
    (``<sg>/<vsg>/<partition>/<t>-<v>-<m>.tsfile``), deeper or flatter folders, and
    Parquet, under either data root."""
    root = draw(st.sampled_from(received.ROOTS))
    form = draw(st.sampled_from(["2.x", "0.12", "flat", "deep", "parquet"]))
    t, v = draw(_number), draw(_number)
    if form == "2.x":
        folders = [draw(_database), str(draw(st.integers(0, 99))), str(draw(_number))]
        file = f"{t}-{v}-{draw(st.integers(0, 9))}-{draw(st.integers(0, 9))}.tsfile"
    elif form == "0.12":
        folders = [draw(_database), str(draw(st.integers(0, 9))), str(draw(_number))]
        file = f"{t}-{v}-{draw(st.integers(0, 9))}.tsfile"
    elif form == "flat":
        folders, file = [], f"{t}-{v}-0-0.tsfile"
    elif form == "deep":
        folders = draw(st.lists(_node, min_size=4, max_size=9))
        file = f"{t}-{v}-0-0.tsfile"
    else:
        folders = draw(st.lists(_node, min_size=0, max_size=3))
        file = f"{draw(_node)}.parquet"
    return check_data_name("/".join([root, *folders, file]))


senders = st.builds(lambda b: str(uuid.UUID(bytes=b)), st.binary(min_size=16, max_size=16))


@given(name=names(), sender=senders)
def test_every_name_form_round_trips_as_strings(name: str, sender: str) -> None:
    assert received.name_problem(name) is None
    held = received.held_name(sender, name)
    parts = tuple(held.split("/"))
    assert parts[-2] == sender and parts[0] == name.split("/")[0]
    assert received.source_of(parts) == (sender, name)
    assert received.sender_of_folder(parts[:-1]) == sender
    assert received.owner_of(parts[:-1]) == sender
    assert received.name_in(parts[:-1], parts[-1]) == name
    assert received.held_path("/base", sender, name) == f"/base/{held}"
    for suffix in (".resource", ".mods", ".mods2", ".merge"):
        sidecar = (*parts[:-1], parts[-1] + suffix)
        assert received.sidecar_of(sidecar[-1]) == (parts[-1], suffix)
        assert received.source_of(sidecar) is None  # a sidecar is never a source file
    assert received.sidecar_of(parts[-1]) is None


@given(name=names(), sender=senders)
def test_a_folder_outside_a_sender_folder_is_nobodys(name: str, sender: str) -> None:
    parts = tuple(name.split("/"))  # the host's own copy of the file, no UUID folder
    assert received.source_of(parts) is None
    assert received.sender_of_folder(parts[:-1]) is None
    assert received.owner_of(parts[:-1]) is None
    upper = tuple(received.held_name(sender, name).upper().split("/"))
    assert received.sender_of_folder(upper[:-1]) is None  # one spelling only


@settings(max_examples=40, deadline=None)
@given(
    files=st.lists(st.tuples(senders, names()), min_size=1, max_size=6, unique=True),
    sidecars=st.lists(st.sampled_from(["", ".mods", ".mods2"]), min_size=6, max_size=6),
)
def test_what_the_storage_writes_the_loader_finds(
    files: list[tuple[str, str]], sidecars: list[str]
) -> None:
    """The real writer and the real reader of the layout, on disk: every file the
    directory storage loads is discovered as its (sender, name), its deletions
    sidecar seen, nothing else found."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        storage = DirectoryStorage([data_dir])
        expected = {}
        for (sender, name), sidecar in zip(files, sidecars, strict=False):
            staged = SenderFolder(data_dir, "10.0.0.1", sender).staged(name)
            staged.parent.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(name.encode())
            Path(f"{staged}.resource").write_bytes(b"r")
            if sidecar:
                Path(f"{staged}{sidecar}").write_bytes(b"m")
            storage.load(sender, name, staged)
            expected[(sender, name)] = sidecar
            assert Path(received.held_path(data_dir, sender, name)).read_bytes() == name.encode()
        found = discover([data_dir])
        assert not found.skipped and not found.troubles
        got = {
            (f.sender, f.name): ".mods" if f.mods else ".mods2" if f.mods2 else ""
            for f in found.files
        }
        assert got == expected
        for sender in {s for s, _ in files}:
            assert storage.list(sender) == {n for s, n in files if s == sender}
