"""Bounded parsing of what a sender ships, checked in this process where the attack
needs no other: a deletion pattern that made both matchers backtrack for hours, and
names holding characters that draw nothing.

* A ``.mods`` pattern node ``*a*a*a*a*a*a*a*a*a*a*a*a*b`` against a 60-character
  measurement: Java's regex backtracked for hours (38 characters: 106 s), the Python
  matcher grew tenfold every four characters. Both match globs in linear time now;
  the Java one runs as the loader runs it, in a JVM (``PathPattern``'s own ``main``).
* The TsFile metadata walk held ~27 times its file (a 40 MB file took 1.1 GB): it now
  holds machine arrays and windows, less than twice the file at the densest.
* ``printable()`` left zero-width, format and tag characters as they were, so a
  folder ``<uuid>\\u200b`` printed exactly as another sender's ``<uuid>``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from reliability.figures import record

from sealsync.errors import FormatError
from sealsync.formats import deletion
from sealsync.printable import printable
from security.hostile_files import GLOB_NAME, GLOB_PATTERN, many_chunks_tsfile
from spark_loader.jvm import JAR


def _glob_deletion(pattern: str = GLOB_PATTERN) -> deletion.SeriesDeletion:
    return deletion.SeriesDeletion(deletion.check_pattern(pattern, "here"), 0, 1, None, "here")


def test_a_backtracking_glob_is_matched_in_linear_time_in_python() -> None:
    started = time.perf_counter()
    hit = deletion.matches(_glob_deletion(), "root.h.d1", GLOB_NAME)
    # the longest the bounds allow: a pattern node of 4,000 bytes against a long name
    long_node = "root.h.d1." + "*a" * 1990 + "*b"
    long_hit = deletion.matches(_glob_deletion(long_node), "root.h.d1", "a" * 200_000)
    took = time.perf_counter() - started
    held = not hit and not long_hit and took < 1.0
    record(
        "security", attack="backtracking glob in a .mods line (Python matcher)", tried=1, held=held
    )
    assert not hit and not long_hit
    assert took < 1.0, took
    assert deletion.matches(_glob_deletion(GLOB_PATTERN[:-2] + "*"), "root.h.d1", GLOB_NAME)


@pytest.mark.slow  # a JVM
def test_a_backtracking_glob_is_matched_in_linear_time_in_java() -> None:
    java = shutil.which("java")
    assert java is not None, "the loader's tests need a Java"
    lines = f"1.2\t{GLOB_PATTERN}\troot.h.d1\t{GLOB_NAME}\n" * 500
    lines += f"0.13\t{GLOB_PATTERN}\troot.h.d1\t{GLOB_NAME}\n" * 500  # a glob anywhere
    lines += f"1.2\t{'root.h.d1.' + '*a' * 1990 + '*b'}\troot.h.d1\t{'a' * 200_000}\n"
    started = time.monotonic()
    run = subprocess.run(
        [java, "-cp", str(JAR), "io.sealsync.tsfile.PathPattern"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    held = run.returncode == 0 and set(run.stdout.split()) == {"false"} and took < 30
    record(
        "security", attack="backtracking glob in a .mods line (Java matcher)", tried=1, held=held
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["false"] * 1001
    assert took < 30, took  # a JVM's start and 1,001 matches; hours before


def test_a_pattern_over_the_bounds_is_refused_with_one_line() -> None:
    long = "root." + "x" * deletion.MAX_PATTERN_BYTES
    deep = "root" + ".x" * deletion.MAX_PATTERN_NODES
    for pattern, words in ((long, "bytes"), (deep, "nodes")):
        with pytest.raises(FormatError) as info:
            deletion.check_pattern(pattern, ".mods line 1")
        text = str(info.value)
        assert text.startswith(".mods line 1: a path pattern of ") and words in text
        assert "\n" not in text and len(text) < 200


INVISIBLE = [
    "\u200b",  # zero-width space
    "\u200c",  # zero-width non-joiner
    "\u200d",  # zero-width joiner
    "\u2060",  # word joiner
    "\ufeff",  # byte order mark
    "\u00ad",  # soft hyphen
    "\u034f",  # combining grapheme joiner
    "\u3164",  # Hangul filler
    "\ufe0f",  # variation selector
    "\U000e0001",  # language tag
    "\U000e0041",  # tag letter A
    "\U000e007f",  # cancel tag
    "\udcff",  # an undecodable byte, as surrogateescape gives it
]


def test_printable_escapes_every_character_that_draws_nothing() -> None:
    uuid = "7f0c4c9e-2d4b-4d6e-9d0e-1b9a2c3d4e5f"
    shown = [printable(uuid + c) for c in INVISIBLE]
    format_chars = [
        chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"
    ]
    leaked = [c for c in format_chars if printable(c) == c]
    held = all(
        s != uuid + c and s.startswith(uuid + "\\") for s, c in zip(shown, INVISIBLE, strict=True)
    )
    held = held and not leaked
    record(
        "security",
        attack="a folder <uuid>\\u200b printed as another sender's uuid",
        tried=1,
        held=held,
    )
    for text, char in zip(shown, INVISIBLE, strict=True):
        assert text.startswith(uuid + "\\"), (char, text)
        assert char not in text
    assert printable(uuid + "\u200b") == uuid + "\\u200b"
    assert printable("\U000e0041") == "\\U000e0041"
    assert not leaked, [f"U+{ord(c):04X}" for c in leaked]
    # what an operator reads and greps stays as it was
    assert printable("héllo wörld 设备 ☃ 😀 root.sg.d1") == "héllo wörld 设备 ☃ 😀 root.sg.d1"


_WALK = """
import resource, sys, time
from sealsync.formats import tsfile_meta
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.process_time()
summary = tsfile_meta.read(sys.argv[1])
took = time.process_time() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(summary.chunks, len(summary.devices), (peak - base) * 1024, took)
"""


@pytest.mark.slow  # a fresh interpreter per file, to measure its peak memory
@pytest.mark.parametrize(
    ("chunks", "devices"),
    [
        pytest.param(2_000_000, 1000, id="two-million-chunks"),
        pytest.param(200_000, 200_000, id="devices"),
    ],
)
def test_the_metadata_walk_holds_less_than_twice_the_file(
    tmp_path: Path, chunks: int, devices: int
) -> None:
    """A 40 MB file's walk once took 1.1 GB: the densest files the format allows (every
    chunk, series and device as small as it can be) now cost less than twice their size."""
    path = tmp_path / "1-1-0-0.tsfile"
    size = many_chunks_tsfile(path, chunks, devices=devices)
    run = subprocess.run(
        [sys.executable, "-c", _WALK, str(path)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    got_chunks, got_devices, grew, took = run.stdout.split()
    held = int(grew) < 2 * size
    record(
        "security",
        attack=f"TsFile metadata amplification ({size >> 20} MiB, {devices} devices)",
        tried=1,
        held=held,
    )
    assert (int(got_chunks), int(got_devices)) == (chunks, devices)
    assert int(grew) < 2 * size, (int(grew) >> 20, size >> 20)
    assert float(took) < 60, took
