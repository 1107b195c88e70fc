"""``sealsync send``: one round to every (or one) receiver of a sender config, its
``--dry-run`` plan, and the one JSON document ``--json`` prints whatever happens.

The round itself is the sender's (``sender.send``, ``sender.attempt``); this module
words it for a terminal, for cron (silent when nothing moved) and for scripts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from sealsync.app.options import CONFIG_PATH, Options, echo_json
from sealsync.app.output import (
    TerminalProgress,
    attempt_problems,
    attempt_summary,
    format_rate,
    reconcile_counts,
    summary_wanted,
)
from sealsync.config import ReceiverEndpoint, SenderConfig, load_sender_config, parse_rate
from sealsync.errors import EXIT_LOCKED, EXIT_USAGE, SealsyncError
from sealsync.printable import single_line

if TYPE_CHECKING:
    from sender.send import AttemptResult, SendResult


def _receivers(config: SenderConfig, name: str | None) -> list[ReceiverEndpoint]:
    if name is None:
        return list(config.receivers)
    return [config.receiver(name)]  # ConfigError (exit 2) for a name not in the config


def _rate_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_rate(value)
    except ValueError as e:
        raise SealsyncError(f"--bwlimit: {e}", EXIT_USAGE) from None


@click.command(short_help="Ship new files and deletions to every (or one) receiver.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Sender TOML.")
@click.option("--receiver", "receiver_name", metavar="NAME", help="Only this receiver.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing, take no lock.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--bwlimit",
    metavar="RATE",
    callback=_rate_option,
    help="Cap each receiver's round at RATE (4M: 4 MiB/s; a bare number is KiB/s; 0: no cap).",
)
@click.option(
    "--reconcile",
    is_flag=True,
    help="Compare with the receiver's inventory: ship again what it lost, delete its extras.",
)
@click.pass_obj
def send(
    opts: Options,
    config_path: Path,
    receiver_name: str | None,
    dry_run: bool,
    as_json: bool,
    bwlimit: int | None,
    reconcile: bool,
) -> None:
    """One attempt at every receiver of the config (or only --receiver NAME).

    An attempt takes the receiver's lock without waiting (exit 75 if another sender
    holds it), recovers from a crashed round, then ships new files and deletions,
    one round per data dir.

    Every attempt, however it ends (failed, interrupted, refused by the lock), is
    added to the receiver's history: `sealsync status` shows the last attempt and
    the last success, and with metrics_textfile set the send rewrites that file for
    Prometheus. A config that does not load is recorded too, as a failed attempt
    (kind config) at each receiver it still names that has a history. An attempt
    that ships and deletes nothing prints nothing on stdout (cron mails nothing;
    -v prints its summary). --json prints one document in every case, errors
    included. A data dir that holds neither sequence/ nor
    unsequence/ is a configuration error (exit 2).

    --dry-run prints, per receiver and data dir, the files a round would ship and
    delete and the names it refuses, including what recovery of a crashed round
    would change first. It writes nothing and contacts no receiver; because it
    changes nothing it does not take the lock either, so it also works while a
    round is running (its plan then reflects the state at the moment it reads).

    --bwlimit RATE caps what each receiver's round sends, in rsync's syntax, in place
    of the config's bwlimit keys.

    --reconcile (after restoring a receiver) asks each receiver which files of this
    sender it holds and ships again, in the same round, every synced file it lacks or
    holds different, and deletes those it holds that this sender no longer has. With
    --dry-run it only reports that (it contacts the receivers, and changes nothing).
    """
    try:
        config = load_sender_config(config_path)
    except SealsyncError as e:
        late = [] if dry_run else _record_config_failure(config_path, e)
        if as_json:
            echo_json(_send_document(None, [single_line(str(e)), *late], e.exit_code))
        raise
    try:
        if bwlimit is not None:
            config = config.with_bwlimit(bwlimit)
        receivers = _receivers(config, receiver_name)
    except SealsyncError as e:  # recorded like a config that does not load
        late = [] if dry_run else _record_config_failure(config_path, e)
        if as_json:
            echo_json(_send_document(None, [single_line(str(e)), *late], e.exit_code))
        raise
    if dry_run:
        from sender.send import check_data_dirs

        check_data_dirs(config)
        _dry_run(config, receivers, as_json, reconcile)
        return
    from sender.send import INTERNAL, send_all

    _import_paramiko_lean()
    errors: list[str] = []

    def progress_for(receiver: ReceiverEndpoint, stream: TextIO | None) -> TerminalProgress:
        return TerminalProgress(receiver.name, stream=stream, enabled=False if opts.quiet else None)

    def each(result: AttemptResult) -> None:
        errors.extend(_show_attempt(result, opts, as_json, many=len(receivers) > 1))

    sent = send_all(config, receivers, progress_for=progress_for, each=each, reconcile=reconcile)
    late = [single_line(str(sent.preflight))] if sent.preflight is not None else []
    late += [sent.metrics_error] if sent.metrics_error is not None else []
    for line in late:
        click.echo(f"sealsync: error: {line}", err=True)
    errors += late
    if as_json:
        echo_json(_send_document(sent, errors, sent.exit_code))
    if sent.interrupted is not None:  # the group words it
        raise sent.interrupted
    for result in sent.results:  # a bug: the group words it
        if result.attempt.kind == INTERNAL:
            assert result.error is not None
            raise result.error
    if sent.exit_code:
        raise click.exceptions.Exit(sent.exit_code)


def _record_config_failure(config_path: Path, error: SealsyncError) -> list[str]:
    """A config that does not load is recorded as an attempt where it still names a
    receiver's existing history (:mod:`sender.config_failure`); returns, after printing
    them, the lines of records that could not be written."""
    from sender.config_failure import record_config_failure

    problems = record_config_failure(config_path, error)
    for line in problems:
        click.echo(f"sealsync: error: {line}", err=True)
    return problems


def _show_attempt(result: AttemptResult, opts: Options, as_json: bool, many: bool) -> list[str]:
    """Print what one attempt did; return the error lines it printed (for --json).

    Under cron stdout is what gets mailed, so a round that shipped nothing and left
    nothing undone prints nothing there (``-v`` prints its summary anyway); problems
    always go to stderr, one line each. A configuration mistake found before the
    first receiver is said once, by the caller.
    """
    from sender.send import INTERNAL

    lines: list[str] = []
    attempt, report = result.attempt, result.report
    if result.error is None and report is not None:
        for line in attempt_problems(report):
            click.echo(f"sealsync: {line}", err=True)
        if not as_json and not opts.quiet and summary_wanted(report, opts.verbose):
            click.echo(attempt_summary(report))
    elif attempt.error is not None and attempt.kind not in ("config", None):
        text = f"{attempt.receiver}: {attempt.error}" if many else attempt.error
        lines.append(text)
        quiet_lock = opts.quiet and result.exit_code == EXIT_LOCKED  # cron-quiet (-q)
        if attempt.kind != INTERNAL and not quiet_lock:  # a bug: the group words it
            click.echo(f"sealsync: error: {text}", err=True)
    if result.record_error is not None:
        lines.append(result.record_error)
        click.echo(f"sealsync: error: {result.record_error}", err=True)
    return lines


def _send_document(sent: SendResult | None, errors: list[str], exit_code: int) -> dict[str, Any]:
    """The one JSON document ``send --json`` prints, whatever happened."""
    results = sent.results if sent is not None else []
    return {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "receivers": [
            r.report.to_dict() for r in results if r.report is not None and r.error is None
        ],
        "attempts": [r.to_dict() for r in results],
        "errors": errors,
    }


def _import_paramiko_lean() -> None:
    """Import paramiko without ``invoke``, which it only wants for ``Match exec`` lines of
    ssh_config files (sealsync reads none) and whose imports (asyncio, unittest.mock)
    are a visible part of a round that may have nothing to do."""
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return
    sys.modules["invoke"] = None  # type: ignore[assignment]  # ``import invoke`` now fails
    try:
        import paramiko  # noqa: F401
    finally:
        del sys.modules["invoke"]


def _dry_run(
    config: SenderConfig, receivers: list[ReceiverEndpoint], as_json: bool, reconcile: bool
) -> None:
    from sender.plan import plan
    from sender.reconcile import Findings, preview

    if reconcile:
        _import_paramiko_lean()
    plans = [(r, plan(config, r)) for r in receivers]
    found: dict[str, list[Findings]] = {
        r.name: preview(config, r) if reconcile else [] for r in receivers
    }
    if as_json:
        doc = {
            "dry_run": True,
            "receivers": [
                {
                    "name": r.name,
                    "host": r.host,
                    "port": r.port,
                    "bwlimit": config.bwlimit_for(r),
                    "data_dirs": [
                        {
                            "data_dir": str(p.data_dir),
                            "recovery": p.recovery,
                            "new": list(p.new),
                            "mods_changed": list(p.mods_changed),
                            "deleted": list(p.deleted),
                            "rejected": [{"name": n, "reason": why} for n, why in p.rejected],
                            **({"reconcile": found[r.name][i].to_dict()} if reconcile else {}),
                        }
                        for i, p in enumerate(dir_plans)
                    ],
                }
                for r, dir_plans in plans
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    asked = "each receiver is asked for its inventory" if reconcile else "no receiver is contacted"
    click.echo(f"dry run: nothing is changed, {asked}")
    for r, dir_plans in plans:
        rate = config.bwlimit_for(r)
        cap = f", bwlimit {format_rate(rate)}" if rate else ""
        click.echo(f"receiver {r.name} ({r.address}){cap}")
        for i, p in enumerate(dir_plans):
            click.echo(f"  data dir {p.data_dir}")
            if reconcile:
                f = found[r.name][i]
                click.echo(f"    reconcile: {reconcile_counts(f.to_dict())}")
                for title, lost in (("missing", f.missing), ("different", f.different)):
                    for name in lost:
                        click.echo(f"      ship again ({title}): {name}")
                for name in f.extra:
                    click.echo(f"      delete (held only by the receiver): {name}")
            if p.recovery:
                click.echo(f"    recovery: {p.recovery}")
            again = set(p.mods_changed)
            for title, names in (("new", p.new), ("deleted", p.deleted)):
                click.echo(f"    {title} ({len(names)}):")
                for name in names:
                    again_note = title == "new" and name in again
                    why = "  (synced; its .mods changed)" if again_note else ""
                    click.echo(f"      {name}{why}")
            click.echo(f"    rejected ({len(p.rejected)}):")
            for name, why in p.rejected:
                click.echo(f"      {name}: {why}")
