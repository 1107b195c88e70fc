"""What every command shares: the group's options object and the ``--config`` type."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click


@dataclass
class Options:
    """``-v``/``-q`` as given before or after the command's name."""

    verbose: int = 0
    quiet: bool = False


CONFIG_PATH = click.Path(path_type=Path, dir_okay=True)  # the loader reports a bad path itself


def echo_json(doc: dict[str, Any]) -> None:
    """One JSON document on stdout, as every ``--json`` prints it."""
    click.echo(json.dumps(doc, indent=2))
