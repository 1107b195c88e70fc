"""The ``sealsync`` console script (docs/design.md §7).

Exit codes are the contract with cron and scripts (``sealsync.errors.EXIT_CODES``):
0 success, 1 failure, 2 usage or configuration error, 69 no usable Java for the
loader, 75 another run holds the lock, 130 interrupted by SIGINT, 143 stopped by
SIGTERM. Every expected failure is one
line on stderr, ``sealsync: error: ...``; an unexpected one is one line too, with the
traceback only under ``-v``. The mapping lives in ``SealsyncGroup.invoke`` so that it
holds for ``main()`` and for click's test runner.

Whatever ``main()`` runs prints with control, C1 and bidi characters escaped
(``sealsync.printable.escaped_std_streams``), as the receiver's log writes them, so a
name from elsewhere never reaches a terminal raw, whichever line prints it.

SIGTERM (systemd stopping a unit, ``kill``, a timeout) is handled like Ctrl-C: it
raises :class:`~sealsync.errors.Terminated`, a KeyboardInterrupt, so every command
stops the way it does on Ctrl-C, cleanly, with one line and exit code 143.

With ``-q``, exit 75 (another run holds the lock) prints nothing: under cron a run
that finds the previous one still going is expected and must not mail anyone. Every
other exit keeps its line, ``-q`` or not.

``-v`` and ``-q`` may come before or after the subcommand (``sealsync send -v``):
the group adds them to every command it holds.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

import click

from sealsync import __version__
from sealsync.app.commands import (
    check,
    demo,
    jars,
    keygen,
    load,
    owners,
    senders,
    serve,
    status,
)
from sealsync.app.identity import identity
from sealsync.app.inspect import inspect
from sealsync.app.options import Options
from sealsync.app.send import send
from sealsync.buildinfo import version_line
from sealsync.errors import (
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_LOCKED,
    SealsyncError,
    Terminated,
    describe_os_error,
    interrupt_exit_code,
    raise_terminated,
)
from sealsync.printable import escaped_std_streams, single_line

log = logging.getLogger("sealsync")


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
            if e.exit_code == EXIT_LOCKED and isinstance(ctx.obj, Options) and ctx.obj.quiet:
                raise click.exceptions.Exit(EXIT_LOCKED) from e  # cron-quiet (module doc)
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


@click.group(cls=SealsyncGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", prog_name="sealsync", message=version_line().replace("%", "%%")
)
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

for command in (
    send,
    serve,
    load,
    status,
    check,
    inspect,
    owners,
    senders,
    identity,
    jars,
    keygen,
    demo,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (the console script passes it to sys.exit)."""
    args = list(sys.argv[1:] if argv is None else argv)
    with escaped_std_streams():  # a name from elsewhere never reaches the terminal raw
        return _run(args)


def _run(args: list[str]) -> int:
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
