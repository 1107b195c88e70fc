"""The ``sealsync`` console script (docs/design.md §7).

Exit codes are the contract with cron and scripts (``sealsync.errors.EXIT_CODES``):
0 success, 1 failure, 2 usage or configuration error, 75 another run holds the lock,
130 interrupted by SIGINT, 143 stopped by SIGTERM. Every expected failure is one
line on stderr, ``sealsync: error: ...``; an unexpected one is one line too, with the
traceback only under ``-v``. The mapping lives in ``SealsyncGroup.invoke`` so that it
holds for ``main()`` and for click's test runner.

SIGTERM (systemd stopping a unit, ``kill``, a timeout) is handled like Ctrl-C: it
raises :class:`~sealsync.errors.Terminated`, a KeyboardInterrupt, so every command
stops the way it does on Ctrl-C, cleanly, with one line and exit code 143.

``-v`` and ``-q`` may come before or after the subcommand (``sealsync send -v``):
the group adds them to every command it holds.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from sealsync import __version__
from sealsync.config import (
    ReceiverEndpoint,
    SenderConfig,
    load_any,
    load_loader_config,
    load_receiver_config,
    load_sender_config,
)
from sealsync.errors import (
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_USAGE,
    SealsyncError,
    Terminated,
    describe_os_error,
    interrupt_exit_code,
    raise_terminated,
)
from sealsync.printable import single_line

if TYPE_CHECKING:
    from sender.attempt import AttemptResult, SendRun

log = logging.getLogger("sealsync")


@dataclass
class Options:
    verbose: int = 0
    quiet: bool = False


class Failure(click.ClickException):
    """A failure already worded for the user; click prints it and exits with its code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click's types declare exit_code a ClassVar; click reads it from the instance
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: Any = None) -> None:
        click.echo(f"sealsync: {self.message}", err=True)


class SealsyncGroup(click.Group):
    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Every command also takes -v/-q after its name, as the group does before it."""
        present = {opt for p in cmd.params for opt in getattr(p, "opts", ())}
        cmd.params.extend(p for p in _verbosity_options() if not set(p.opts) & present)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except SealsyncError as e:
            raise Failure(f"error: {single_line(str(e))}", e.exit_code) from e
        except KeyboardInterrupt as e:
            raise Failure(_interrupted_line(e), interrupt_exit_code(e)) from None
        except BrokenPipeError:
            _silence_stdout()
            raise Failure("error: output closed", EXIT_FAILURE) from None
        except OSError as e:
            if e.filename is None:
                raise _internal(ctx, e) from e
            raise Failure(f"error: {describe_os_error(e, 'access')}", EXIT_FAILURE) from e
        except Exception as e:
            raise _internal(ctx, e) from e


def _internal(ctx: click.Context, e: Exception) -> Failure:
    """The one line of an unexpected error (a bug), with its traceback only under -v."""
    verbose = isinstance(ctx.obj, Options) and ctx.obj.verbose > 0
    if verbose:
        traceback.print_exc(file=sys.stderr)
    hint = "" if verbose else " (run with -v for the traceback)"
    return Failure(f"internal error: {type(e).__name__}: {single_line(str(e))}{hint}", EXIT_FAILURE)


def _interrupted_line(e: KeyboardInterrupt) -> str:
    return "interrupted by SIGTERM" if isinstance(e, Terminated) else "interrupted"


def _verbosity_options() -> list[click.Option]:
    return [
        click.Option(
            ["-v", "--verbose"],
            count=True,
            expose_value=False,
            callback=_more_verbose,
            help="More detail on stderr (-vv for debug).",
        ),
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            expose_value=False,
            callback=_set_quiet,
            help="Only errors on stderr.",
        ),
    ]


def _more_verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    opts = ctx.find_object(Options)
    if value and opts is not None:
        opts.verbose += value
        _setup_logging(opts.verbose, opts.quiet)


def _set_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    opts = ctx.find_object(Options)
    if value and opts is not None:
        opts.quiet = True
        _setup_logging(opts.verbose, opts.quiet)


def _handle_sigterm(ctx: click.Context) -> None:
    """SIGTERM raises Terminated (a KeyboardInterrupt) until the command ends."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (and receives them)
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


def _silence_stdout() -> None:
    """After a closed pipe, let the interpreter's final flush fail quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = (
        logging.ERROR
        if quiet
        else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    )
    log.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("sealsync: %(levelname)s: %(message)s"))
        log.addHandler(handler)


CONFIG_PATH = click.Path(path_type=Path, dir_okay=True)  # the loader reports a bad path itself


@click.group(cls=SealsyncGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sealsync")
@click.option("-v", "--verbose", count=True, help="More detail on stderr (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Ship sealed time-series data files between instances, load them exactly once."""
    ctx.obj = Options(verbose=verbose, quiet=quiet)
    _setup_logging(verbose, quiet)
    _handle_sigterm(ctx)


def exit_code_help() -> str:
    """The exit-code table of ``sealsync --help`` (click keeps a ``\b`` paragraph as is)."""
    rows = "\n".join(f"{code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())
    return f"Exit codes (every command):\n\n\b\n{rows}"


cli.help = f"{cli.help}\n\n{exit_code_help()}"


def _receivers(config: SenderConfig, name: str | None) -> list[ReceiverEndpoint]:
    if name is None:
        return list(config.receivers)
    try:
        return [config.receiver(name)]
    except SealsyncError as e:
        raise SealsyncError(str(e), EXIT_USAGE) from None


def _rate_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    from sealsync.config import parse_rate

    if value is None:
        return None
    try:
        return parse_rate(value)
    except ValueError as e:
        raise SealsyncError(f"--bwlimit: {e}", EXIT_USAGE) from None


@cli.command(short_help="Run one round to every (or one) receiver.")
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
    """Run one round to every receiver of the config (or only --receiver NAME).

    A round takes the receiver's lock without waiting (exit 75 if another sender
    holds it), recovers from a crashed round, then ships new files and deletions.

    Every attempt, however it ends (failed, interrupted, refused by the lock), is
    added to the receiver's history: `sealsync status` shows the last attempt and
    the last success, and with metrics_textfile set the run rewrites that file for
    Prometheus. A round that ships and deletes nothing prints nothing on stdout
    (cron mails nothing; -v prints its summary). --json prints one document in
    every case, errors included. A data dir that holds neither sequence/ nor
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
        if bwlimit is not None:
            config = config.with_bwlimit(bwlimit)
        receivers = _receivers(config, receiver_name)
    except SealsyncError as e:
        if as_json:
            _echo_json(_send_document(None, [single_line(str(e))], e.exit_code))
        raise
    if dry_run:
        from sender.attempt import check_data_dirs

        check_data_dirs(config)
        _dry_run(config, receivers, as_json, reconcile)
        return
    from sealsync.output import TerminalProgress
    from sender.attempt import INTERNAL, send_all

    _import_paramiko_lean()
    errors: list[str] = []

    def progress_for(receiver: ReceiverEndpoint, stream: TextIO | None) -> TerminalProgress:
        return TerminalProgress(receiver.name, stream=stream, enabled=False if opts.quiet else None)

    def each(result: AttemptResult) -> None:
        errors.extend(_show_attempt(result, opts, as_json, many=len(receivers) > 1))

    run = send_all(config, receivers, progress_for=progress_for, each=each, reconcile=reconcile)
    late = [single_line(str(run.preflight))] if run.preflight is not None else []
    late += [run.metrics_error] if run.metrics_error is not None else []
    for line in late:
        click.echo(f"sealsync: error: {line}", err=True)
    errors += late
    if as_json:
        _echo_json(_send_document(run, errors, run.exit_code))
    if run.interrupted is not None:  # the group words it
        raise run.interrupted
    for result in run.results:  # a bug: the group words it
        if result.attempt.kind == INTERNAL:
            assert result.error is not None
            raise result.error
    if run.exit_code:
        raise click.exceptions.Exit(run.exit_code)


def _show_attempt(result: AttemptResult, opts: Options, as_json: bool, many: bool) -> list[str]:
    """Print what one attempt did; return the error lines it printed (for --json).

    Under cron stdout is what gets mailed, so a round that shipped nothing and left
    nothing undone prints nothing there (``-v`` prints its summary anyway); problems
    always go to stderr, one line each. A configuration mistake found before the
    first receiver is said once, by the caller.
    """
    from sealsync.output import round_problems, round_summary, summary_wanted
    from sender.attempt import INTERNAL

    lines: list[str] = []
    attempt, report = result.attempt, result.report
    if result.error is None and report is not None:
        for line in round_problems(report):
            click.echo(f"sealsync: {line}", err=True)
        if not as_json and not opts.quiet and summary_wanted(report, opts.verbose):
            click.echo(round_summary(report))
    elif attempt.error is not None and attempt.kind not in ("config", None):
        text = f"{attempt.receiver}: {attempt.error}" if many else attempt.error
        lines.append(text)
        if attempt.kind != INTERNAL:  # a bug is worded by the group, traceback under -v
            click.echo(f"sealsync: error: {text}", err=True)
    if result.record_error is not None:
        lines.append(result.record_error)
        click.echo(f"sealsync: error: {result.record_error}", err=True)
    return lines


def _send_document(run: SendRun | None, errors: list[str], exit_code: int) -> dict[str, Any]:
    """The one JSON document ``send --json`` prints, whatever happened."""
    results = run.results if run is not None else []
    return {
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "receivers": [
            r.report.to_dict() for r in results if r.report is not None and r.error is None
        ],
        "attempts": [r.to_dict() for r in results],
        "errors": errors,
    }


def _echo_json(doc: dict[str, Any]) -> None:
    click.echo(json.dumps(doc, indent=2))


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
    from sealsync.output import format_rate, reconcile_counts
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


@cli.command(short_help="Host the receiver plugin until SIGTERM/SIGINT.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--init", is_flag=True, help="Create the schema dir and data dirs if missing.")
@click.pass_obj
def serve(opts: Options, config_path: Path, init: bool) -> None:
    """Host the receiver plugin until SIGTERM or SIGINT, then stop cleanly.

    The schema dir and data dirs must exist (a typo or an unmounted disk is an error,
    exit 2); --init creates the missing ones, for a receiver's first start. One
    receiver per storage: another one on the same folders exits 75, naming its pid.
    Logs go to stderr (and log_file) with timestamps, at INFO (-v: DEBUG).
    """
    from receiver.serve import serve as serve_until_stopped
    from receiver.serve import server_logging

    with server_logging(opts.verbose, opts.quiet):
        config = load_receiver_config(config_path, init=init)
        code = serve_until_stopped(config)
    raise click.exceptions.Exit(code)


@cli.command(short_help="Run one Spark ingest of the loaded files.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Loader TOML.")
@click.option("--master", metavar="URL", help="Spark master (default: the config's, local[*]).")
@click.option("--full", is_flag=True, help="Rebuild the table from scratch.")
@click.option(
    "--prune-missing",
    is_flag=True,
    help="Also remove the rows of files missing without a logged deletion.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def load(
    opts: Options,
    config_path: Path,
    master: str | None,
    full: bool,
    prune_missing: bool,
    as_json: bool,
) -> None:
    """One Spark ingest run: every file loaded on the receiver goes into the table at
    table_path exactly once; files the receiver deleted or replaced take their rows
    out. A file missing without a logged deletion keeps its rows (a warning line);
    a data dir or sender folder gone empty stops the run, nothing removed (exit 1);
    --prune-missing removes them. --full builds the new table beside the old one and
    swaps it in. A file that cannot be read is reported and retried next run (exit 1)."""
    from sealsync.printable import printable
    from spark_loader import run_load

    config = load_loader_config(config_path)
    chatty = not (as_json or opts.quiet)
    report = run_load(
        config,
        master=master,
        full=full,
        prune_missing=prune_missing,
        verbose=opts.verbose > 0,
        progress=(lambda text: click.echo(f"load: {text}", err=True)) if chatty else None,
    )
    for name, why in sorted(report.skipped.items()):
        click.echo(f"sealsync: skipped {name}: {why}", err=True)
    warning = report.warning()
    if warning is not None:
        click.echo(f"sealsync: {printable(warning)}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    elif not opts.quiet:
        click.echo(report.summary())
    if not report.ok:
        raise click.exceptions.Exit(EXIT_FAILURE)


@cli.command(short_help="Show the sync state of a sender or receiver.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Any sealsync TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(config_path: Path, as_json: bool) -> None:
    """Sender: per receiver and data dir, the last round, files synced, pending new and
    deleted files, refused files and why. Receiver: known senders (UUID, key
    fingerprint, last address, last round), devices per owner, rounds in flight and
    files waiting to load. Loader: the last run however it ended, the last success,
    files pending, the table's totals. Read-only: safe while rounds run."""
    from sealsync.status import render, status_of

    doc = status_of(load_any(config_path))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in render(doc):
            click.echo(line)


@cli.command(short_help="Check a config end to end; change nothing.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Any sealsync TOML.")
def check(config_path: Path) -> None:
    """Check a sender, receiver or loader config end to end, like `sshd -t` or `nginx -t`:
    the config parses, its files exist with safe modes, keys load, trust files parse,
    data dirs look like an instance (sender), exist (receiver) or hold files (loader),
    and each receiver of a sender answers and accepts its key (the connection stops
    once the sealsync subsystem is open). Changes nothing: no folder, state or lock.

    One line per finding, `ok: ...` or `problem: ...`. Exit 0 all sound, 1 a problem
    found, 2 the config cannot be used (one error line)."""
    from sealsync.check import check_config

    findings = check_config(config_path)
    for finding in findings:
        click.echo(finding.line())
    if not all(f.ok for f in findings):
        raise click.exceptions.Exit(EXIT_FAILURE)


@cli.command(short_help="List device owners, or release devices.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.argument("action", required=False, type=click.Choice(["release"]))
@click.argument("devices", nargs=-1, metavar="[DEVICE]...")
def owners(config_path: Path, as_json: bool, action: str | None, devices: tuple[str, ...]) -> None:
    """List devices by owner; `owners --config R.toml release DEVICE...` frees devices so
    that another sender may claim them (for an edge node replaced by a new one). Safe
    while the receiver runs: ownership changes go through the same file lock."""
    from receiver.load.owners import DeviceOwners
    from sealsync.printable import printable

    if action == "release" and not devices:
        raise click.UsageError("release needs at least one DEVICE")
    if action is None and devices:
        raise click.UsageError("devices are only taken by: owners release DEVICE...")
    config = load_receiver_config(config_path)
    with DeviceOwners(config.schema_dir) as book:
        if action == "release":
            released = book.release(devices)
            unknown = sorted(set(devices) - set(released))
            if as_json:
                click.echo(json.dumps({"released": released, "not_owned": unknown}, indent=2))
                return
            for device in released:  # device ids come from senders' files: escaped
                click.echo(f"released {printable(device)}")
            for device in unknown:
                click.echo(f"not owned: {printable(device)}")
            return
        by_owner = book.by_owner()
    if as_json:
        click.echo(json.dumps({"owners": by_owner}, indent=2))
        return
    if not by_owner:
        click.echo("no device has an owner yet")
    for owner, owned in sorted(by_owner.items()):
        click.echo(f"{printable(owner)} ({len(owned)} devices)")
        for device in sorted(owned):
            click.echo(f"  {printable(device)}")


@cli.command(short_help="List senders and their keys; re-key or retire one.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="rekey: the sender's new public key (.pub), already in authorized_keys.",
)
@click.option("--release-devices", is_flag=True, help="remove: also free the devices it owns.")
@click.argument("action", required=False, type=click.Choice(["rekey", "remove"]))
@click.argument("uuid", required=False)
def senders(
    config_path: Path,
    as_json: bool,
    key_path: Path | None,
    release_devices: bool,
    action: str | None,
    uuid: str | None,
) -> None:
    """List sender UUIDs with their key fingerprints, last round and files;
    `senders rekey UUID --key NEW.pub` binds a sender to its new key in one write (the
    UUID is never free for another key to claim); `senders remove UUID` retires an edge
    for good (no key may act as it again; its files stay). Safe while the receiver runs."""
    from receiver.senders import rekey, retire, sender_rows
    from sealsync.printable import printable

    if action is not None and uuid is None:
        raise click.UsageError(f"{action} needs the sender's UUID")
    if action is None and uuid is not None:
        raise click.UsageError("a UUID is only taken by: senders rekey UUID / senders remove UUID")
    if (key_path is not None) != (action == "rekey"):
        raise click.UsageError("--key goes with rekey, and rekey needs --key NEW.pub")
    if release_devices and action != "remove":
        raise click.UsageError("--release-devices goes with remove")
    config = load_receiver_config(config_path)
    if action == "rekey":
        assert uuid is not None and key_path is not None
        fp, old = rekey(config, uuid, key_path)
        was = f" (was {old.fingerprint})" if old is not None else " (a new sender)"
        doc: dict[str, Any] = {"uuid": uuid, "key_fingerprint": fp, "was": old and old.fingerprint}
        click.echo(json.dumps(doc, indent=2) if as_json else f"{uuid} now bound to {fp}{was}")
        return
    if action == "remove":
        assert uuid is not None
        old_binding, released = retire(config, uuid, release_devices)
        if as_json:
            doc = {"uuid": uuid, "retired": True, "was": old_binding.fingerprint}
            click.echo(json.dumps({**doc, "released_devices": released}, indent=2))
            return
        click.echo(f"{uuid} retired (was {old_binding.fingerprint}); its files stay")
        if release_devices:
            click.echo(f"released {len(released)} devices")
        return
    rows = sender_rows(config)
    if as_json:
        click.echo(json.dumps({"senders": rows}, indent=2))
        return
    if not rows:
        click.echo("no sender has connected yet")
    for row in rows:
        click.echo(
            f"{row['uuid']}  {row['key_fingerprint']}  last round {row['last_round']}  "
            f"from {printable(row['last_address'])}  {row['files']} files  "
            f"{row['devices_owned']} devices"
        )


@cli.command(short_help="Write an Ed25519 key pair (PATH and PATH.pub).")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing key.")
@click.option(
    "--comment", default=None, help="Comment of the public key (default: sealsync@<host>)."
)
def keygen(path: Path, force: bool, comment: str | None) -> None:
    """Write an Ed25519 private key at PATH (mode 0600) and its public key at PATH.pub,
    both in OpenSSH format; print the public key line."""
    from sealsync.keys import fingerprint, generate_keypair, public_path

    if comment is None:
        comment = f"sealsync@{socket.gethostname()}"
    line = generate_keypair(path, comment=comment, force=force)
    click.echo(line)
    click.echo(f"private key: {path}")
    click.echo(f"public key:  {public_path(path)}")
    click.echo(f"fingerprint: {fingerprint(line)}")


@cli.command(short_help="Run the whole pipeline on this machine.")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("sealsync-demo"),
    show_default=True,
    help="Work folder (an earlier demo's folder is replaced).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def demo(opts: Options, workdir: Path, as_json: bool) -> None:
    """The whole pipeline on this machine: keys and trust files, an edge instance that
    writes and seals TsFiles, a receiver (`sealsync serve`) on a free loopback port, a
    sender round, a merge and a .mods deletion, a second round, the Spark loader on
    local[*], and a summary checked against the edge's files. Exit 1 if they disagree."""
    from sealsync.demo import print_summary, run_demo

    quiet = as_json or opts.quiet
    summary = run_demo(workdir, echo=(lambda _line: None) if quiet else click.echo)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        print_summary(summary, echo=click.echo)
    if not summary.ok:
        raise click.exceptions.Exit(EXIT_FAILURE)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (the console script passes it to sys.exit)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=args, prog_name="sealsync", standalone_mode=False)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except (click.Abort, KeyboardInterrupt) as e:
        # outside a command (while click parses), click turns the interrupt into Abort
        cause = e.__cause__ if isinstance(e, click.Abort) else e
        interrupt = cause if isinstance(cause, KeyboardInterrupt) else KeyboardInterrupt()
        click.echo(f"sealsync: {_interrupted_line(interrupt)}", err=True)
        return interrupt_exit_code(interrupt)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_FAILURE
    return rv if isinstance(rv, int) else 0
