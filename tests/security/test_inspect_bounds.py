"""``sealsync inspect`` on hostile files, as a real process (issue 43, item 3): it runs
the receiver's check, and had none of the receiver's bounds. On a 7 KiB Parquet file
whose dictionary ``device`` column decodes to 1.5 GB it took 16.8 s and 1.6 GB; on a
3.2 MB TsFile listing one chunk again and again under a long name, 123 s of CPU. Each
file is now checked in a worker with the receiver's bounds, and each refusal is one
line.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC
from proc_helpers import RssSampler
from reliability.figures import record

from security.hostile_files import (
    dictionary_bomb_parquet,
    many_chunks_tsfile,
    repeated_chunk_tsfile,
)

pytestmark = pytest.mark.slow


def test_inspect_refuses_hostile_files_quickly_in_bounded_memory(tmp_path: Path) -> None:
    chunked = tmp_path / "1-1-0-0.tsfile"
    repeated_chunk_tsfile(chunked)  # 9 MB: one chunk, 350,000 times, a 2 MiB name
    small = tmp_path / "2-2-0-0.tsfile"
    repeated_chunk_tsfile(small, name_len=64 << 10, refs=50_000)  # 0.6 MB of the same
    bomb = tmp_path / "3-3-0-0.parquet"
    dictionary_bomb_parquet(bomb)
    dense = tmp_path / "4-4-0-0.tsfile"
    size = many_chunks_tsfile(dense, 1_000_000, devices=100)  # valid: the walk's worst case
    started = time.monotonic()
    proc = subprocess.Popen(
        [*SEALSYNC, "inspect", str(chunked), str(small), str(bomb), str(dense)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with RssSampler(proc.pid, every=0.05) as rss:
        out, err = proc.communicate(timeout=300)
    took = time.monotonic() - started
    lines = out.splitlines()
    refused = [line for line in lines if line.startswith("refused: ")]
    peak_mb = rss.peak_tree_kb / 1024
    held = proc.returncode == 1 and len(refused) == 3 and took < 60 and peak_mb < 900
    record("security", attack="sealsync inspect on three hostile files", tried=3, held=held)
    assert proc.returncode == 1, (out, err)
    assert err == "", err
    assert len(refused) == 3, out
    assert refused[0].startswith(f"refused: {chunked}: not a complete TsFile")
    assert "a chunk listed more than once" in refused[0] and "a chunk listed" in refused[1]
    assert refused[2].startswith(f"refused: {bomb}: its columns decode to more than")
    assert f"{dense}: TsFile format 3" in out and "1000000 chunks" in out and ": accepted" in out
    assert took < 60, took
    # the command, its fork server and its worker together, each a Python with pyarrow
    # (shared pages counted in each): far below the 1.6 GB one hostile file took
    assert peak_mb < 900, (peak_mb, size)
