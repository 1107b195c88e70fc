"""Write ``docs/sealsync.1``, the sealsync(1) man page, from the command line itself.

Every word of it comes from click: the group's and each command's help, each option's
help record, the exit-code table (``sealsync.errors.EXIT_CODES``), so ``sealsync
--help`` and the man page cannot say different things. ``tests/test_manpage.py``
fails when the committed page is not what this script writes now; run

    .venv/bin/python docs/make_manpage.py

after changing a command's help. ``--check`` exits 1 (writing nothing) when the page
is out of date. The page carries no date, so regenerating it changes nothing unless
the help did. Read it with ``man ./docs/sealsync.1``; install it by copying it to
``/usr/local/share/man/man1/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sealsync import __version__
from sealsync.app.cli import cli
from sealsync.errors import EXIT_CODES

PAGE = Path(__file__).resolve().parent / "sealsync.1"

COMPLETION = """\
click completes commands, options and paths for bash, zsh and fish. Add to
~/.bashrc:

\b
eval "$(_SEALSYNC_COMPLETE=bash_source sealsync)"

to ~/.zshrc:

\b
eval "$(_SEALSYNC_COMPLETE=zsh_source sealsync)"

or for fish, once:

\b
_SEALSYNC_COMPLETE=fish_source sealsync > ~/.config/fish/completions/sealsync.fish

A shell starts faster when the script is generated once into a file that the shell
startup file sources, instead of running sealsync at every start."""


def _escape(text: str) -> str:
    """``text`` as roff prints it: backslashes doubled, hyphens literal, no line read as
    a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + ln if ln.startswith((".", "'")) else ln for ln in text.split("\n"))


def _paragraphs(help_text: str) -> list[str]:
    """click's help as roff paragraphs: a ``\\b`` paragraph kept line by line, others
    filled."""
    out: list[str] = []
    for block in help_text.split("\f")[0].strip().split("\n\n"):
        lines = block.split("\n")
        if lines[0].strip() == "\b":
            out.append(".nf\n" + _escape("\n".join(lines[1:])) + "\n.fi")
        else:
            out.append(_escape(" ".join(ln.strip() for ln in lines if ln.strip())))
    return out


def _body(paragraphs: list[str]) -> list[str]:
    lines: list[str] = []
    for i, p in enumerate(paragraphs):
        if i:
            lines.append(".PP")
        lines.append(p)
    return lines


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    """Each option's names, value and help, built from click's data, not its rendering
    (which changes between click releases), so the page is the same under any click."""
    lines: list[str] = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden:
            continue
        names = ", ".join(sorted(param.opts, key=lambda o: (o.startswith("--"), o))) + "".join(
            f" / {n}" for n in param.secondary_opts
        )
        if not param.is_flag and not param.count:
            names += f" {param.metavar or param.type.name.upper()}"
        text = param.help or ""
        shown = param.show_default if param.show_default is not None else ctx.show_default
        if shown and param.default is not None and not callable(param.default):
            if not param.is_flag:
                text += f" (default: {shown if isinstance(shown, str) else param.default})"
        if param.required:
            text += " (required)"
        lines += [".TP", f"\\fB{_escape(names)}\\fR", _escape(text)]
    return lines


def _usage(command: click.Command) -> str:
    """A command's synopsis from its parameters: ``[OPTIONS]``, then each argument's
    name (optional ones bracketed, repeated ones followed by ``...``)."""
    pieces = ["[OPTIONS]"] if any(isinstance(p, click.Option) for p in command.params) else []
    for param in command.params:
        if isinstance(param, click.Argument):
            choices = getattr(param.type, "choices", None)
            name = param.metavar or ("|".join(map(str, choices)) if choices else "")
            name = name or (param.name or "").upper()
            name += "..." if param.nargs != 1 else ""
            pieces.append(name if param.required else f"[{name}]")
    return " ".join(pieces)


def render() -> str:
    """The whole page."""
    ctx = click.Context(cli, info_name="sealsync", **cli.context_settings)
    help_text = (cli.help or "").split("Exit codes (every command):")[0]
    summary, *rest = _paragraphs(help_text)
    lines = [
        f'.TH SEALSYNC 1 "" "sealsync {_escape(__version__)}" "User Commands"',
        ".SH NAME",
        f"sealsync \\- {summary[0].lower()}{summary[1:].rstrip('.')}",
        ".SH SYNOPSIS",
        ".B sealsync",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *_body([summary, *rest]),
        ".SH OPTIONS",
        _escape("These come before the command's name; -v and -q also after it."),
        *_options(cli, ctx),
        ".SH COMMANDS",
    ]
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        sub = click.Context(command, info_name=name, parent=ctx)
        usage = _usage(command)
        lines += [f".SS sealsync {name} {_escape(usage)}", *_body(_paragraphs(command.help or ""))]
        lines += _options(command, sub)
    lines += [".SH EXIT STATUS"]
    for code, meaning in EXIT_CODES.items():
        lines += [".TP", f"\\fB{code}\\fR", _escape(meaning)]
    lines += [".SH SHELL COMPLETION", *_body(_paragraphs(COMPLETION))]
    lines += [
        ".SH SEE ALSO",
        "README.md, docs/operations.md (configuration, scheduling, metrics), docs/design.md "
        "and docs/protocol.md in the sealsync sources.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    page = render()
    if argv[1:] == ["--check"]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is out of date: run python docs/make_manpage.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
