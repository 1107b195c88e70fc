"""sealsync(1): the committed page is what docs/make_manpage.py writes from the CLI's
help now, it names every command and option, and the shell completion it documents
answers."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from deploy_helpers import SEALSYNC

from sealsync.app.cli import cli
from sealsync.errors import EXIT_CODES

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def generator() -> dict[str, Any]:
    return runpy.run_path(str(DOCS / "make_manpage.py"))


def test_the_committed_page_is_up_to_date(generator: dict[str, Any]) -> None:
    committed = (DOCS / "sealsync.1").read_text(encoding="utf-8")
    assert committed == generator["render"](), (
        "docs/sealsync.1 is out of date: run .venv/bin/python docs/make_manpage.py"
    )


def test_the_page_names_every_command_option_and_exit_code(generator: dict[str, Any]) -> None:
    page = generator["render"]()
    ctx = click.Context(cli, info_name="sealsync", **cli.context_settings)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        assert f".SS sealsync {name} " in page
        for param in command.params:
            if not isinstance(param, click.Option):
                continue  # an argument is in the usage line
            for opt in param.opts:
                assert opt.replace("-", "\\-") in page, f"{name} {opt}"
    for code in EXIT_CODES:
        assert f".TP\n\\fB{code}\\fR\n" in page
    assert "_SEALSYNC_COMPLETE=bash_source sealsync" in page
    # no line a roff reader would take as a request of its own
    requests = {".TH", ".SH", ".SS", ".TP", ".PP", ".nf", ".fi", ".B"}
    for line in page.splitlines():
        if line.startswith((".", "'")):
            assert line.split(" ")[0] in requests, line


def test_check_says_when_the_page_is_stale(
    generator: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "sealsync.1"
    stale.write_text("old\n")
    main = generator["main"]
    main.__globals__["PAGE"] = stale
    try:
        assert main(["make_manpage.py", "--check"]) == 1
        assert stale.read_text() == "old\n"  # --check writes nothing
        assert main(["make_manpage.py"]) == 0
        assert main(["make_manpage.py", "--check"]) == 0
    finally:
        main.__globals__["PAGE"] = DOCS / "sealsync.1"


@pytest.mark.slow
def test_the_documented_completion_answers() -> None:
    def complete(words: str, cword: int) -> list[str]:
        env = {
            **os.environ,
            "_SEALSYNC_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(cword),
        }
        result = subprocess.run(
            SEALSYNC, env=env, capture_output=True, text=True, timeout=60, check=True
        )
        return result.stdout.split()

    assert complete("sealsync se", 1) == ["plain,send", "plain,senders", "plain,serve"]
    assert complete("sealsync send --bw", 2) == ["plain,--bwlimit"]
    script = subprocess.run(
        SEALSYNC,
        env={**os.environ, "_SEALSYNC_COMPLETE": "bash_source"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "_sealsync_completion()" in script


@pytest.mark.slow
def test_the_page_is_the_same_under_the_oldest_click_allowed(tmp_path: Path) -> None:
    """pyproject allows any click from 8.1: the page is built from click's data, not
    its rendering, so ``--check`` passes under the oldest release too (the usage line
    and option records rendered by click differ between 8.1, 8.4 and 8.5)."""
    cache = Path.home() / ".cache" / "sealsync" / "click-8.1.7"
    if not (cache / "click" / "__init__.py").exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(cache),
                "click==8.1.7",
            ],
            check=True,
            timeout=300,
        )
    env = {**os.environ, "PYTHONPATH": str(cache)}
    version = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('click'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == "8.1.7"
    check = subprocess.run(
        [sys.executable, str(DOCS / "make_manpage.py"), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
