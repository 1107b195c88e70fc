"""``sealsync --version`` names the release the package metadata carries and the
protocol versions it speaks; CHANGELOG.md's newest release is that release."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from deploy_helpers import SEALSYNC

import sealsync
from sealsync.app.cli import cli
from sealsync.protocol import OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION

ROOT = Path(__file__).resolve().parent.parent
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def project_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def test_the_package_version_is_pyprojects() -> None:
    assert sealsync.__version__ == project_version(), (
        "the installed metadata is older than pyproject.toml: run .venv/bin/pip install -e ."
    )


def test_version_names_the_release_and_the_protocol() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == (
        f"sealsync {project_version()} (protocol {PROTOCOL_VERSION}, "
        f"also speaks {OLDEST_PROTOCOL_VERSION})\n"
    )


@pytest.mark.slow
def test_the_installed_command_answers_the_same() -> None:
    out = subprocess.run(
        [*SEALSYNC, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.startswith(f"sealsync {project_version()} (protocol {PROTOCOL_VERSION}")
    assert out.stderr == ""


def test_the_changelog_has_an_unreleased_section_then_this_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## .*$", text, flags=re.MULTILINE)
    assert headings[0] == "## [Unreleased]"
    releases = RELEASE.findall(text)
    assert releases, "no release section (## [X.Y.Z] - YYYY-MM-DD)"
    assert headings[1] == f"## [{releases[0][0]}] - {releases[0][1]}"
    assert releases[0][0] == project_version(), "the newest release section is not pyproject's"
    numbers = [tuple(int(n) for n in v.split(".")) for v, _ in releases]
    assert numbers == sorted(numbers, reverse=True), "release sections not newest first"
    dates = [d for _, d in releases]
    assert dates == sorted(dates, reverse=True)
