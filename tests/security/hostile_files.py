"""Hostile data files and deletion files, built byte by byte: what a sender with a valid
key ships to exhaust the receiver's check, ``sealsync inspect`` or the loader.

Each builder writes what the attack needs and no more: a ``.mods`` of millions of
short lines, a deletion pattern that makes a backtracking matcher run for hours, a
TsFile whose metadata lists one chunk hundreds of thousands of times under a
measurement name megabytes long, a TsFile whose index is all tiny entries, a Parquet
file of a few KiB whose dictionary column decodes to gigabytes. Not a test module.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tsfile_bytes import INT64, INT64_STATS, i64, string, uvar

GLOB_PATTERN = "root.h.d1." + "*a" * 12 + "*b"
"""A glob node a backtracking regex takes hours over against :data:`GLOB_NAME`."""
GLOB_NAME = "a" * 60
"""A 60-character measurement the glob does not match (it ends without ``b``)."""


def long_mods(path: Path, lines: int = 2_500_000) -> int:
    """A ``.mods`` of ``lines`` short deletion lines (24 bytes each); its size."""
    line = b"DELETION,root.h.d,9,0,1\n"
    with open(path, "wb") as f:
        block = line * 100_000
        for _ in range(lines // 100_000):
            f.write(block)
        f.write(line * (lines % 100_000))
    return len(line) * lines


def glob_mods(path: Path, file_size: int) -> None:
    """A ``.mods`` with one line whose pattern is :data:`GLOB_PATTERN`, covering every
    chunk of a data file of ``file_size`` bytes."""
    path.write_text(f"DELETION,{GLOB_PATTERN},{file_size},0,9223372036854775807\n")


def repeated_chunk_tsfile(
    path: Path, name_len: int = 2 << 20, refs: int = 350_000, device: bytes = b"root.h.d1"
) -> int:
    """A format-3 TsFile of one device and one INT64 series whose measurement name is
    ``name_len`` bytes and whose chunk list names its one chunk ``refs`` times: every
    reference makes a reader compare the name with the chunk header's. Its size."""
    name = b"m" * name_len
    out = bytearray(b"TsFile\x03")
    out += b"\x00" + string(device)
    chunk = len(out)
    out += b"\x05" + string(name) + uvar(4) + bytes([INT64, 0, 0]) + b"\x01\x02\x03\x04"
    meta_offset = len(out)
    out.append(0x02)
    series = len(out)
    offsets = i64(chunk) * refs
    out += b"\x00" + string(name) + bytes([INT64]) + uvar(len(offsets)) + INT64_STATS + offsets
    node = len(out)
    out += uvar(1) + string(name) + i64(series) + i64(node) + b"\x03"
    end = len(out)
    meta = uvar(1) + string(device) + i64(node) + i64(end) + b"\x01" + i64(meta_offset)
    meta += uvar(0) + uvar(0) + uvar(0)
    out += meta + struct.pack(">i", len(meta)) + b"TsFile"
    path.write_bytes(out)
    return len(out)


def many_chunks_tsfile(path: Path, chunks: int, devices: int = 1, degree: int = 256) -> int:
    """A format-3 TsFile whose ``devices`` devices have one series each, listing
    ``chunks`` distinct minimal chunks in all: the most index entries a file's bytes
    can hold (about 20 bytes of file per chunk), with leaf device nodes of ``degree``
    devices under one root. Valid: a reader must walk all of it. Its size."""
    per = chunks // devices
    out = bytearray(b"TsFile\x03")
    chunk_at: list[list[int]] = []
    names = [f"root.h.d{i:07d}".encode() for i in range(devices)]
    for name in names:
        out += b"\x00" + string(name)
        starts = []
        for _ in range(per):
            starts.append(len(out))
            out += b"\x05" + string(b"s") + uvar(1) + bytes([INT64, 0, 0]) + b"\x00"
        chunk_at.append(starts)
    meta_offset = len(out)
    out.append(0x02)
    series_at = []
    for starts in chunk_at:
        series_at.append(len(out))
        offsets = np.asarray(starts, dtype=">i8").tobytes()
        out += b"\x00" + string(b"s") + bytes([INT64]) + uvar(len(offsets)) + INT64_STATS
        out += offsets
    first_node = len(out)
    node_at = []
    for i in range(devices):
        node_at.append(len(out))
        end = series_at[i + 1] if i + 1 < devices else first_node
        out += uvar(1) + string(b"s") + i64(series_at[i]) + i64(end) + b"\x03"
    leaves_end = len(out)
    groups = [list(range(i, min(i + degree, devices))) for i in range(0, devices, degree)]

    def node(entries: list[tuple[bytes, int]], end: int, kind: int) -> bytes:
        body = b"".join(string(key) + i64(at) for key, at in entries)
        return uvar(len(entries)) + body + i64(end) + bytes([kind])

    if len(groups) == 1:
        root = node([(names[i], node_at[i]) for i in groups[0]], leaves_end, 1)
    else:
        leaf_at = []
        for g, group in enumerate(groups):
            leaf_at.append(len(out))
            end = node_at[groups[g + 1][0]] if g + 1 < len(groups) else leaves_end
            out += node([(names[i], node_at[i]) for i in group], end, 1)
        root = node([(names[g[0]], at) for g, at in zip(groups, leaf_at, strict=True)], len(out), 0)
    meta = root + i64(meta_offset) + uvar(0) + uvar(0) + uvar(0)
    out += meta + struct.pack(">i", len(meta)) + b"TsFile"
    path.write_bytes(out)
    return len(out)


def wide_node_tsfile(path: Path, entries: int) -> int:
    """A format-3 TsFile of one device whose measurement index is one internal node of
    ``entries`` entries (all keys empty), each pointing at a leaf node of
    one empty-named series: the most index nodes a file's bytes can hold. Its size."""
    out = bytearray(b"TsFile\x03")
    out += b"\x00" + string(b"root.h.d1")
    chunks = []
    for _ in range(entries):
        chunks.append(len(out))
        out += b"\x05" + string(b"") + uvar(0) + bytes([INT64, 0, 0])
    meta_offset = len(out)
    out.append(0x02)
    series = []
    for at in chunks:
        series.append(len(out))
        out += b"\x00" + string(b"") + bytes([INT64]) + uvar(8) + INT64_STATS + i64(at)
    leaves_start = len(out)
    leaves = []
    for i, at in enumerate(series):
        leaves.append(len(out))
        end = series[i + 1] if i + 1 < entries else leaves_start
        out += uvar(1) + string(b"") + i64(at) + i64(end) + b"\x03"
    internal = len(out)
    body = bytearray(uvar(entries))
    for at in leaves:
        body += string(b"") + i64(at)
    out += body + i64(internal) + b"\x02"
    end = len(out)
    meta = uvar(1) + string(b"root.h.d1") + i64(internal) + i64(end) + b"\x01"
    meta += i64(meta_offset) + uvar(0) + uvar(0) + uvar(0)
    out += meta + struct.pack(">i", len(meta)) + b"TsFile"
    path.write_bytes(out)
    return len(out)


def dictionary_bomb_parquet(path: Path, rows: int = 1_500_000, device_len: int = 1000) -> int:
    """A Parquet file of a few KiB whose ``device`` column is one string of
    ``device_len`` characters, dictionary-encoded, in ``rows`` rows: read as strings it
    is ``rows * device_len`` bytes (1.5 GB by default). Its size."""
    device = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["root.h." + "d" * (device_len - 7)])
    )
    table = pa.table({"time": pa.array(np.zeros(rows, dtype=np.int64)), "device": device})
    pq.write_table(
        table,
        path,
        compression="zstd",
        use_dictionary=True,
        row_group_size=rows,
        data_page_size=1 << 30,
        write_batch_size=rows,
        write_statistics=False,
    )
    return path.stat().st_size
