"""The scheduling examples run commands that exist: each systemd unit's ExecStart and
each crontab line parse as a ``sealsync`` command line, the loader's as the sender's,
every unit passes ``systemd-analyze verify``, and each timer starts its service."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from sealsync.app.cli import cli
from sealsync.errors import EXIT_LOCKED

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SEALSYNC_BIN = "/opt/sealsync/.venv/bin/sealsync"
CRON_LINE = re.compile(r"^(\S+\s+){5}(?P<command>/.*)$")


def _unit_value(path: Path, key: str) -> str:
    [value] = [
        ln.split("=", 1)[1] for ln in path.read_text().splitlines() if ln.startswith(key + "=")
    ]
    return value


def _parses(argv: list[str]) -> str:
    """The subcommand ``argv`` (after the binary) names, its options parsed as click
    would (an option it does not take raises)."""
    name, *rest = argv
    # the group's context settings (-h), as the console script has: click keeps the
    # first help option a command makes
    ctx = click.Context(cli, info_name="sealsync", **cli.context_settings)
    command = cli.get_command(ctx, name)
    assert command is not None, f"no sealsync {name}"
    command.make_context(name, rest, parent=ctx)
    return name


def _cron_commands() -> list[list[str]]:
    lines = (EXAMPLES / "crontab").read_text().splitlines()
    found = [CRON_LINE.match(ln) for ln in lines if ln and not ln.startswith("#")]
    assert all(found), lines
    return [shlex.split(m["command"]) for m in found if m]


def test_crontab_runs_the_sender_and_the_loader() -> None:
    commands = _cron_commands()
    assert [argv[0] for argv in commands] == [SEALSYNC_BIN, SEALSYNC_BIN]
    assert [_parses(argv[1:]) for argv in commands] == ["send", "load"]
    load = commands[1]
    assert "-q" in load  # cron-quiet: a skipped run (exit 75) mails nothing


@pytest.mark.parametrize(("role", "command"), [("sender", "send"), ("loader", "load")])
def test_each_systemd_service_runs_its_command_and_its_timer_starts_it(
    role: str, command: str
) -> None:
    service = EXAMPLES / f"sealsync-{role}.service"
    argv = shlex.split(_unit_value(service, "ExecStart"))
    assert argv[0] == SEALSYNC_BIN
    assert _parses(argv[1:]) == command
    assert _unit_value(service, "Type") == "oneshot"
    assert _unit_value(service, "SuccessExitStatus") == str(EXIT_LOCKED)
    timer = (EXAMPLES / f"sealsync-{role}.timer").read_text()
    assert "OnCalendar=" in timer and "WantedBy=timers.target" in timer
    # a timer starts the service of its own name
    assert "Unit=" not in timer


def test_the_following_loader_service_runs_load_follow_and_lets_its_jvm_finish() -> None:
    service = EXAMPLES / "sealsync-loader-follow.service"
    argv = shlex.split(_unit_value(service, "ExecStart"))
    assert argv[0] == SEALSYNC_BIN and _parses(argv[1:]) == "load" and "--follow" in argv
    assert _unit_value(service, "Type") == "simple"
    assert _unit_value(service, "KillMode") == "mixed"  # SIGTERM to sealsync, not its JVM
    assert _unit_value(service, "Restart") == "on-failure"


def test_a_command_line_with_an_unknown_option_is_caught() -> None:
    with pytest.raises(click.UsageError):
        _parses(["load", "--config", "x.toml", "--no-such-option"])


@pytest.mark.slow
def test_the_units_verify(tmp_path: Path) -> None:
    units = []
    for role in ("sender", "loader"):
        for kind in ("service", "timer"):
            target = tmp_path / f"sealsync-{role}.{kind}"
            text = (EXAMPLES / target.name).read_text()
            # the binary the units name is not installed here: point them at a real one
            target.write_text(text.replace(SEALSYNC_BIN, "/bin/true"))
            units.append(str(target))
    follow = tmp_path / "sealsync-loader-follow.service"
    follow.write_text((EXAMPLES / follow.name).read_text().replace(SEALSYNC_BIN, "/bin/true"))
    units.append(str(follow))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
