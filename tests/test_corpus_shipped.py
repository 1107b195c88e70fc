"""Every TsFile IoTDB's own Java writers produce ships and is accepted: the whole
generated corpus (IoTDB 0.13's and 1.3's format 3, TsFile 2.x's format 4, tree and
table model) laid out as sealed files of an edge's data folder, one ``sealsync send``
into a real ``sealsync serve``: every file arrives byte for byte, but those no reader
decodes exactly, which the receiver refuses with one line (the loader's own verdict).
What the loader reads from each file is held to the Java reader's answer by
``test_loader_tsfile_corpus.py``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import Deployment, sha256
from tsfile_corpus import refused_because

pytestmark = pytest.mark.slow  # the corpus is built with Maven; real processes


def test_every_corpus_file_ships_and_is_accepted(
    tsfile_corpus: list[Any], start_deployment: Callable[..., Deployment]
) -> None:
    dep = start_deployment()
    sender = dep.senders[0]
    data_dir = sender.edge.data_dirs[0]
    placed, unreadable = {}, {}
    for i, entry in enumerate(tsfile_corpus):
        # each file in a time partition of its own: names repeat across writer lines
        rel = f"sequence/root.sg/0/{i}/{Path(entry.path).name}"
        target = data_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry.path, target)
        Path(f"{target}.resource").write_bytes(b"sealed\n")  # sealed, as IoTDB marks it
        cause = refused_because(entry)
        if cause:
            unreadable[rel] = cause
        else:
            placed[rel] = sha256(target)
    assert {e.format_version for e in tsfile_corpus} == {3, 4}
    assert unreadable, "the corpus holds files no reader decodes exactly"

    result = sender.send("--json", timeout=600)
    # a file the loader cannot read is refused at the receiver with one line (exit 1)
    assert result.returncode == 1, (result.stderr, dep.log())
    report = json.loads(result.stdout)["receivers"][0]
    assert report["shipped_files"] == len(placed), report
    (d,) = report["dirs"]
    assert not d["failed"], report
    assert set(d["refused"]) == set(unreadable), report
    for rel in unreadable:
        reason = d["refused"][rel]
        # the receiver names the file's first series no reader decodes exactly
        assert "not a valid data file" in reason and "the loader cannot read it" in reason
        assert any(f", {kind})" in reason for kind in ("RLBE", "SPRINTZ")), reason
        assert "\n" not in reason
    assert dep.loaded_hashes(sender) == placed
