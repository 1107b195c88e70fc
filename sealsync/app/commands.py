"""The commands besides ``send``: ``serve``, ``load``, ``status``, ``check``,
``owners``, ``senders``, ``jars``, ``keygen`` and ``demo``.

Each parses its options, loads its config and hands the work to its role, importing
that role inside the command: ``sealsync --help`` and a sender's round never import
the receiver or Spark.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click

from sealsync.app.check import check_config
from sealsync.app.options import CONFIG_PATH, Options
from sealsync.app.status import render, status_of
from sealsync.config import LoaderConfig, load_any, load_loader_config, load_receiver_config
from sealsync.errors import EXIT_FAILURE
from sealsync.printable import printable
from sealsync.units import human_bytes


@click.command(short_help="Host the receiver plugin until SIGTERM/SIGINT.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--init", is_flag=True, help="Create the schema dir and data dirs if missing.")
@click.option(
    "--replaces",
    metavar="STORAGE_ID",
    help="The storage this receiver served is gone for good: serve another one.",
)
@click.pass_obj
def serve(opts: Options, config_path: Path, init: bool, replaces: str | None) -> None:
    """Host the receiver plugin until SIGTERM or SIGINT, then stop cleanly.

    The schema dir and data dirs must exist and carry the storage marker that --init
    writes (a typo or an unmounted disk is an error, exit 2, nothing written); --init
    creates the missing ones and marks them, for a receiver's first start. One
    receiver per storage: another one on the same folders exits 75, naming its pid.
    The receiver records the storage it serves outside it (state_dir): folders that
    held it and hold no storage or another one now are refused ("storage gone"),
    --init included, unless --replaces names the old storage's id. While it runs, a
    storage that vanishes or is replaced stops every round until it is back.
    A sender_keys.txt older than its last retirement or re-key (a restored backup)
    is refused, exit 2, naming `senders accept-restore`.
    Logs go to stderr (and log_file) with timestamps, at INFO (-v: DEBUG).
    """
    from receiver.identity import require_storage
    from receiver.key_generation import require_generation
    from receiver.serve import serve as serve_until_stopped
    from receiver.serve import server_logging

    with server_logging(opts.verbose, opts.quiet):
        config = load_receiver_config(config_path, init=init)
        # an unmounted disk, a typo, a replaced storage: exit 2
        storage = require_storage(config, init=init, replaces=replaces)
        require_generation(config, storage)  # sender keys restored from an older backup: 2
        code = serve_until_stopped(config)
    raise click.exceptions.Exit(code)


@click.command(short_help="Run one Spark ingest of the loaded files.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Loader TOML.")
@click.option("--master", metavar="URL", help="Spark master (default: the config's, local[*]).")
@click.option("--full", is_flag=True, help="Rebuild the table from scratch.")
@click.option(
    "--prune-missing",
    is_flag=True,
    help="Also remove the rows of files missing without a logged deletion.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Stay up: commit what the receiver loads as it arrives, in one Spark session.",
)
@click.option(
    "--window",
    type=click.FloatRange(0.0, 3600.0),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="--follow: how long a change waits for more before its run (at most one commit a window).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def load(
    opts: Options,
    config_path: Path,
    master: str | None,
    full: bool,
    prune_missing: bool,
    follow: bool,
    window: float,
    as_json: bool,
) -> None:
    """One Spark ingest run: every file loaded on the receiver goes into the table at
    table_path exactly once; files the receiver deleted or replaced take their rows
    out. A file missing without a logged deletion keeps its rows (a warning line);
    a data dir gone empty stops the run, nothing removed (exit 1); a sender whose
    folders are gone or cannot be listed whole is held: its files wait, nothing of it
    removed, the others load (exit 1); --prune-missing removes the missing ones.
    --full rebuilds the table from every file in one commit (readers see the old table
    or the new one). A file that cannot be read is reported and retried next run
    (exit 1). --follow stays up and loads as files arrive (one Spark session, a run
    after each change of the receiver's logs, each recorded as a one-shot run is)
    until SIGTERM or SIGINT, which let the run in progress finish."""
    from spark_loader import jars_dir, run_load

    config = load_loader_config(config_path)
    if config.jars_dir is not None:  # before any work: a jar missing there is exit 2
        jars_dir.session_jars(config.jars_dir)
    if follow:
        if full or prune_missing or as_json:
            raise click.UsageError("--follow takes no --full, --prune-missing or --json")
        _follow(opts, config, master, window)
        return
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
    for line in report.held_lines():
        click.echo(f"sealsync: {printable(line)}", err=True)
    warning = report.warning()
    if warning is not None:
        click.echo(f"sealsync: {printable(warning)}", err=True)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    elif not opts.quiet:
        click.echo(report.summary())
    if not report.ok:
        raise click.exceptions.Exit(EXIT_FAILURE)


def _follow(opts: Options, config: LoaderConfig, master: str | None, window: float) -> None:
    """``load --follow``: one session, a run per change, until a signal."""
    from spark_loader.follow import Follower, FollowOptions, install_stop_signals
    from spark_loader.run import run_load, start_session

    say = (lambda text: click.echo(f"load: {text}", err=True)) if not opts.quiet else None
    if say is not None:
        say("following: starting Spark")
    session = start_session(config, master, opts.verbose > 0)
    try:
        follower = Follower(
            config,
            FollowOptions(master=master, window=window, verbose=opts.verbose > 0),
            run_load,
            session,
            said=None if opts.quiet else lambda report: click.echo(report.summary()),
            progress=say,
        )
        install_stop_signals(follower)
        if say is not None:
            say(f"following the receiver's loads (window {window:g} s); SIGTERM stops")
        follower.run()
    finally:
        session.stop()
    if say is not None:
        say(f"stopped after {follower.runs} runs")


@click.command(short_help="Show the state of a sender, receiver or loader.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Any sealsync TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(config_path: Path, as_json: bool) -> None:
    """Sender: per receiver and data dir, the last round, files synced, pending new and
    deleted files, refused files and why. Receiver: known senders (UUID, key
    fingerprint, last address, last round), devices per owner, rounds in flight and
    files waiting to load. Loader: the last run however it ended, the last success,
    files pending, the table's totals. Read-only: safe while rounds run."""
    doc = status_of(load_any(config_path))
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in render(doc):
            click.echo(line)


@click.command(short_help="Check a config end to end; change nothing.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Any sealsync TOML.")
def check(config_path: Path) -> None:
    """Check a sender, receiver or loader config end to end, like `sshd -t` or `nginx -t`:
    the config parses, its files exist with safe modes, keys load, trust files parse,
    data dirs look like an instance (sender), exist (receiver) or hold files (loader),
    and each receiver of a sender answers and accepts its key (the connection stops
    once the sealsync subsystem is open). Changes nothing: no folder, state or lock.

    One line per finding, `ok: ...` or `problem: ...`. Exit 0 all sound, 1 a problem
    found, 2 the config cannot be used (one error line)."""
    findings = check_config(config_path)
    for finding in findings:
        click.echo(finding.line())
    if not all(f.ok for f in findings):
        raise click.exceptions.Exit(EXIT_FAILURE)


@click.command(short_help="List device owners, or release devices.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.argument("action", required=False, type=click.Choice(["release"]))
@click.argument("devices", nargs=-1, metavar="DEVICE")
def owners(config_path: Path, as_json: bool, action: str | None, devices: tuple[str, ...]) -> None:
    """List devices by owner; `owners --config R.toml release DEVICE...` frees devices so
    that another sender may claim them (for an edge node replaced by a new one). Safe
    while the receiver runs: ownership changes go through the same file lock."""
    from receiver.load.owners import DeviceOwners

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


@click.command(short_help="List senders and their keys; re-key or retire one.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Receiver TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="rekey: the sender's new public key (.pub), already in authorized_keys.",
)
@click.option("--release-devices", is_flag=True, help="retire: also free the devices it owns.")
@click.argument(
    "action",
    required=False,
    type=click.Choice(["rekey", "retire", "accept-restore", "remove"]),
    metavar="rekey|retire|accept-restore",
)
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
    UUID is never free for another key to claim); `senders retire UUID` retires an edge
    for good (no key may act as it again; its files stay). Safe while the receiver runs.
    `senders accept-restore` takes sender_keys.txt as a restore left it, once checked
    (serve refuses a restored one that is older than its last change). `remove` is
    the old name of `retire`, kept for one release."""
    from receiver.senders import accept_restore, rekey, retire, sender_rows

    if action == "remove":
        click.echo("sealsync: `senders remove` is now `senders retire`; say retire", err=True)
        action = "retire"

    if action == "accept-restore":
        if uuid is not None or key_path is not None or release_devices:
            raise click.UsageError("accept-restore takes no UUID, --key or --release-devices")
        generation = accept_restore(load_receiver_config(config_path))
        doc0 = {"accepted": True, "generation": generation}
        click.echo(
            json.dumps(doc0, indent=2)
            if as_json
            else f"sender keys accepted as they are, now at generation {generation}"
        )
        return
    if action is not None and uuid is None:
        raise click.UsageError(f"{action} needs the sender's UUID")
    if action is None and uuid is not None:
        raise click.UsageError("a UUID is only taken by: senders rekey UUID / senders retire UUID")
    if (key_path is not None) != (action == "rekey"):
        raise click.UsageError("--key goes with rekey, and rekey needs --key NEW.pub")
    if release_devices and action != "retire":
        raise click.UsageError("--release-devices goes with retire")
    config = load_receiver_config(config_path)
    if action == "rekey":
        assert uuid is not None and key_path is not None
        fp, old = rekey(config, uuid, key_path)
        was = f" (was {old.fingerprint})" if old is not None else " (a new sender)"
        doc: dict[str, Any] = {"uuid": uuid, "key_fingerprint": fp, "was": old and old.fingerprint}
        click.echo(json.dumps(doc, indent=2) if as_json else f"{uuid} now bound to {fp}{was}")
        return
    if action == "retire":
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


@click.command(short_help="The loader's jars: list them, or fetch them into a folder.")
@click.argument("action", required=False, type=click.Choice(["fetch"]))
@click.argument("folder", required=False, type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--s3", is_flag=True, help="Also Hadoop's S3 connector (hadoop-aws and its AWS SDK, ~700 MB)."
)
@click.pass_obj
def jars(opts: Options, action: str | None, folder: Path | None, s3: bool) -> None:
    """The Maven coordinates a loader's Spark session resolves: Delta Lake and the
    TsFile library (with --s3, Hadoop's S3 connector for s3a:// too).

    `jars fetch DIR`, where Maven Central answers (it needs Java), resolves them as the
    loader's session does, copies the jars into DIR and writes DIR/sealsync-jars.json
    last. On a machine without Maven Central, copy DIR there whole and set
    jars_dir = "DIR" in [loader]: the loader then takes its jars from DIR and resolves
    nothing; a jar missing there stops it with one line naming the jar (exit 2)."""
    from spark_loader import jars_dir, jvm
    from spark_loader.jars_fetch import fetch

    if action is None:
        if folder is not None:
            raise click.UsageError("a folder is only taken by: sealsync jars fetch DIR")
        wanted, excludes = jvm.packages(s3=s3)
        for package in wanted:
            click.echo(package)
        click.echo(f"(resolved without {', '.join(excludes)}: Spark ships them)")
        return
    if folder is None:
        raise click.UsageError("fetch needs the folder to fill: sealsync jars fetch DIR")
    fetched = fetch(folder, s3=s3, verbose=opts.verbose > 0)
    size = human_bytes(sum(jar.stat().st_size for jar in fetched))
    click.echo(f"{len(fetched)} jars ({size}) in {folder}, listed in {jars_dir.MANIFEST}")
    if not opts.quiet:
        click.echo(f'set jars_dir = "{folder.resolve()}" in [loader] to load without Maven Central')


@click.command(short_help="Write an Ed25519 key pair (PATH and PATH.pub).")
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


@click.command(short_help="Run the whole pipeline on this machine.")
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
    sender round, a compaction and a .mods2 deletion, a second round, the Spark loader on
    local[*], and a summary checked against the edge's files. Exit 1 if they disagree."""
    from sealsync.app.demo import print_summary, run_demo

    quiet = as_json or opts.quiet
    summary = run_demo(workdir, echo=(lambda _line: None) if quiet else click.echo)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        print_summary(summary, echo=click.echo)
    if not summary.ok:
        raise click.exceptions.Exit(EXIT_FAILURE)
