"""The documentation keeps up with the code: design citations resolve, the module map is whole.

Code, tests and docs cite the design as ``docs/design.md §N`` or ``§N.M``; a citation
must name a heading of ``docs/design.md`` (a renumbered or deleted section would leave
comments pointing at nothing). The README's module map lists every module of the four
packages under its package's line, so a module added without a line fails here.
The command list and the exit codes of §7 match the CLI's commands and ``EXIT_CODES``.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import click

from sealsync.errors import EXIT_CODES

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
README = ROOT / "README.md"
PACKAGES = ("sealsync", "sender", "receiver", "spark_loader")
CITING = (*PACKAGES, "tests", "benchmarks", "examples", "docs")

# Built from pieces so that this file does not match what it looks for.
OLD_CITATIONS = ("DESIGN" + " §", "shared/" + "DESIGN")

HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
CITATION = re.compile(r"docs/design\.md((?:\s*(?:,|-|–|and)?\s*§\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
BARE_SECTION = re.compile(r"§\s*\d")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")
MODULE = re.compile(r"(?<![\w/.])([A-Za-z_]\w*)\.py\b")
MAP_HEADER = re.compile(r"^(\S+/)(?:\s|$)")


def _text_files() -> list[Path]:
    """Every text file that may cite the design, README included."""
    files = [README]
    for top in CITING:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                path.read_text("utf-8")
            except UnicodeDecodeError:  # a jar, an image
                continue
            files.append(path)
    return files


def _sections() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text("utf-8")))


def _citations(text: str) -> list[str]:
    return [s for group in CITATION.findall(text) for s in SECTION.findall(group)]


def test_design_has_numbered_sections() -> None:
    sections = _sections()
    assert {"1", "3", "3.2", "4", "6", "9"} <= sections, sorted(sections)


def test_every_design_citation_names_an_existing_section() -> None:
    sections = _sections()
    cited: dict[str, list[str]] = defaultdict(list)
    for path in _text_files():
        for section in _citations(path.read_text("utf-8")):
            cited[section].append(path.relative_to(ROOT).as_posix())
    missing = {s: where for s, where in cited.items() if s not in sections}
    assert not missing, f"docs/design.md has no such section (cited from): {missing}"
    assert len(cited) >= 20, "the citation pattern no longer finds the code's citations"


def test_references_inside_the_design_name_existing_sections() -> None:
    sections = _sections()
    text = DESIGN.read_text("utf-8")
    dangling = sorted({s for s in SECTION.findall(text) if s not in sections})
    assert not dangling, f"docs/design.md refers to sections it does not have: {dangling}"


def test_nothing_cites_the_old_design_reference() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {needle}"
        for path in _text_files()
        for needle in OLD_CITATIONS
        if needle in path.read_text("utf-8")
    ]
    assert not found, f"cite docs/design.md §N instead: {found}"


def test_every_section_sign_in_code_belongs_to_a_design_citation() -> None:
    """A bare ``§8.7`` in a comment cannot be checked; it must say which document."""
    bare = []
    for path in _text_files():
        if path.suffix != ".py" or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
            if BARE_SECTION.search(CITATION.sub("", line)):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, f"write these as docs/design.md §N: {bare}"


def test_tests_the_design_names_exist() -> None:
    """Section 9 names each fixed bug's regression tests; they must still be there."""
    refs = TEST_REF.findall(DESIGN.read_text("utf-8"))
    assert len(refs) >= 20
    for file, name in refs:
        path = ROOT / file
        assert path.is_file(), f"docs/design.md names a missing test file: {file}"
        if name:
            assert re.search(rf"^def {name}\(", path.read_text("utf-8"), re.MULTILINE), (
                f"docs/design.md names a missing test: {file}::{name}"
            )


def _module_map() -> dict[str, set[str]]:
    """Package folder (``sender/manage/``) -> module stems listed under its line."""
    text = README.read_text("utf-8")
    section = text.split("## Module map", 1)[1]
    block = section.split("```", 2)[1]
    listed: dict[str, set[str]] = defaultdict(set)
    current = None
    for line in block.splitlines():
        header = MAP_HEADER.match(line)
        if header:
            current = header.group(1)
            continue
        if current is not None:
            listed[current].update(MODULE.findall(line))
    return listed


def _modules() -> dict[str, set[str]]:
    """Package folder -> stems of its module files (``__init__``/``__main__`` aside)."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts or path.stem in ("__init__", "__main__"):
                continue
            found[path.parent.relative_to(ROOT).as_posix() + "/"].add(path.stem)
    return found


def test_module_map_lists_every_module_file() -> None:
    listed = _module_map()
    missing = sorted(
        f"{folder}{stem}.py"
        for folder, stems in _modules().items()
        for stem in stems - listed.get(folder, set())
    )
    assert not missing, f"README.md's module map lacks {missing}: list each under its package"


def test_module_map_lists_no_module_that_is_gone() -> None:
    listed = _module_map()
    stale = sorted(
        f"{folder}{stem}.py"
        for folder, stems in listed.items()
        if folder.split("/")[0] in PACKAGES
        for stem in stems
        if not (ROOT / folder / f"{stem}.py").is_file()
    )
    assert not stale, f"README.md's module map lists modules that do not exist: {stale}"


def _design_section(number: str) -> str:
    """The text of ``## N.`` in docs/design.md, up to the next top-level section."""
    text = DESIGN.read_text("utf-8")
    start = re.search(rf"^## {re.escape(number)}\. ", text, re.MULTILINE)
    assert start is not None, f"docs/design.md has no section {number}"
    end = re.search(r"^## \d", text[start.end() :], re.MULTILINE)
    return text[start.end() : start.end() + end.start() if end else len(text)]


def _cli_group() -> click.Group:
    """The click group behind the ``sealsync`` console script, wherever the CLI lives:
    the module ``[project.scripts]`` names is imported and its group taken."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["scripts"]
    module = importlib.import_module(scripts["sealsync"].split(":", 1)[0])
    groups = [v for v in vars(module).values() if isinstance(v, click.Group)]
    assert len(groups) == 1, f"{module.__name__} should define one click group: {groups}"
    return groups[0]


def test_design_lists_every_command_of_the_cli() -> None:
    section = _design_section("7")
    listing = re.search(r"Its commands[^:]*:(.*?)\n\n", section, re.DOTALL)
    assert listing is not None, "docs/design.md §7 lost its 'Its commands ...:' sentence"
    listed = re.findall(r"`([a-z-]+)`", listing.group(1))
    commands = _cli_group().commands
    assert sorted(listed) == sorted(commands), (
        f"docs/design.md §7 lists {sorted(listed)}; the CLI has {sorted(commands)}"
    )


def test_design_lists_every_exit_code() -> None:
    codes = [int(c) for c in re.findall(r"^- (\d+) ", _design_section("7"), re.MULTILINE)]
    assert codes == sorted(EXIT_CODES), (
        f"docs/design.md §7 lists exit codes {codes}; EXIT_CODES has {sorted(EXIT_CODES)}"
    )


def test_performance_md_holds_todays_figures_only() -> None:
    """performance.md is the figures of the code as it is: short enough to read, with the
    history of how they came about left to git log."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 350
    for history in ("kept the baseline slow before", "last run before", "Measured again"):
        assert history not in text, history
