"""``sealsync inspect FILE...``: what a data file holds and what a receiver's format
check decides about it, without a receiver.

An operator's first question about a refused or unexpected file is which format it is,
which devices it names (the ownership rule's input) and whether it is whole. This
runs the receiver's own check (``formats.verify``) on each file and adds what the
file's metadata says: for a TsFile its format version and writers, series, chunks and
points; for a Parquet file its rows. Device ownership is the receiver's state, not the
file's, so ``sealsync owners`` answers that part.

The files are an operator's, but they came from elsewhere: each is checked in a
worker process with the bounds of the receiver's own checks (memory, a CPU budget per
file; ``receiver.inspect_pool.run_bounded``), so a hostile file costs a refusal line,
not the command's memory or minutes of its time, and a reader that crashes on one
does not end the command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sealsync.errors import EXIT_FAILURE, FormatError
from sealsync.printable import printable


def describe(path: str) -> dict[str, Any]:
    """One file's findings; ``accepted`` False with the refusal's one line if the check
    refuses it. Runs in the worker."""
    # Imported here: the formats pull in pyarrow and numpy (a third of a second and
    # about 50 MB), and the command line that registers this command also runs every
    # ``sealsync send`` from cron.
    from sealsync import formats
    from sealsync.formats import tsfile, tsfile_meta

    found: dict[str, Any] = {"file": path}
    try:
        module = formats.format_for(path)
        if module is tsfile:  # what verify reads, once
            summary = tsfile_meta.read(path)
            found.update(
                format="TsFile",
                version=summary.version,
                writers=tsfile_meta.WRITERS[summary.version],
                series=summary.series,
                chunks=summary.chunks,
                points=summary.points,
            )
            devices = summary.devices
        else:
            info = module.verify(path)
            found.update(format="Parquet", rows=info.rows)
            devices = info.devices
    except FormatError as exc:
        return {"file": path, "accepted": False, "reason": str(exc)}
    return {**found, "devices": list(devices), "accepted": True}


def describe_each(paths: list[str]) -> list[dict[str, Any]]:
    """:func:`describe` of each file, each in a bounded worker; a file over a bound or
    that crashed its reader is refused with why."""
    from receiver.inspect_pool import run_bounded

    out = []
    for path, found in zip(paths, run_bounded(describe, paths), strict=True):
        if isinstance(found, FormatError):
            reason = str(found)
            if not reason.startswith(path):  # the worker's lines name the file by name
                reason = f"{path}: {reason.split(': ', 1)[-1]}"
            found = {"file": path, "accepted": False, "reason": reason}
        out.append(found)
    return out


def _text(found: dict[str, Any]) -> list[str]:
    name = printable(found["file"])
    if not found["accepted"]:
        return [f"refused: {printable(found['reason'])}"]  # the reason names the file
    devices = found["devices"]
    if found["format"] == "TsFile":
        what = (
            f"TsFile format {found['version']} ({found['writers']}), {len(devices)} devices, "
            f"{found['series']} series, {found['chunks']} chunks, {found['points']} points"
        )
    else:
        what = f"Parquet, {len(devices)} devices, {found['rows']} rows"
    return [f"{name}: {what}: accepted"] + [f"  {printable(d)}" for d in devices]


@click.command(short_help="Show a data file's format, devices and the receiver's verdict.")
@click.argument(
    "files",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def inspect(files: tuple[Path, ...], as_json: bool) -> None:
    """Check each FILE as a receiver does (a whole file of a supported format, its
    devices read from the file itself) and show what it holds: for a TsFile its
    format version and the IoTDB releases that write it, series, chunks and points
    (an aligned device's time column not counted); for a Parquet file its rows.
    Exit 1 if any file would be refused, each refusal one line naming the cause."""
    found = describe_each([str(path) for path in files])
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        for item in found:
            for line in _text(item):
                click.echo(line)
    if not all(item["accepted"] for item in found):
        raise click.exceptions.Exit(EXIT_FAILURE)
