"""A refused file's devices, which the sender asks the receiver's owners about in the
next round, come from the file's metadata for every format the receiver accepts: a
format-3 file (IoTDB 0.12–1.3) names its devices as a format-4 one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tsfile_corpus import refused_because

from sender.transfer.files import _devices

pytestmark = pytest.mark.slow  # the corpus is built with Maven on first use


def test_a_refused_files_devices_are_read_for_format_3_and_4(tsfile_corpus: list[Any]) -> None:
    seen = set()
    for entry in tsfile_corpus:
        if not entry.devices or refused_because(entry):
            continue  # none to name, or refused as unreadable (never as a conflict)
        assert _devices(Path(entry.path), None) == tuple(sorted(entry.devices)), entry.path
        seen.add(entry.format_version)
    assert seen == {3, 4}
