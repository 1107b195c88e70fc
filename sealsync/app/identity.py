"""``sealsync identity``: show a sender's identity, give a copy of a sender an identity
of its own, or take the identity back (sender/manage/new_identity.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from sealsync.app.options import CONFIG_PATH
from sealsync.config import load_sender_config


@click.command(short_help="Show a sender's UUID; give a copy its own, or take it back.")
@click.option("--config", "config_path", type=CONFIG_PATH, required=True, help="Sender TOML.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.argument("action", required=False, type=click.Choice(["new", "reclaim"]))
def identity(config_path: Path, as_json: bool, action: str | None) -> None:
    """Show this sender's UUID and, per receiver, whether it holds an identity lease.

    A receiver refuses a sender whose UUID another host acts as (a cloned image,
    copied folders and key), naming both hosts. On the host that is the copy,
    `identity new` gives it a UUID of its own and resets its state towards every
    receiver: its next send ships its files anew under the new UUID, and the other
    host's files at the receivers are not touched. On a host that alone acts as
    this sender (its state restored from an older backup), `identity reclaim` makes
    its next send take the identity back; the other host, if any, is refused from
    then on. Both wait for no send: while one runs they exit 75.
    """
    from sender.manage.new_identity import new_identity, reclaim, show

    config = load_sender_config(config_path)
    if action == "new":
        old, new = new_identity(config)
        _say(
            as_json,
            {"uuid": new, "was": old},
            f"sender UUID {new} (was {old or 'none'}): this host's state towards each "
            "receiver is reset, and its next send ships its files anew under the new UUID; "
            "the files the other host shipped stay at the receivers. A copy needs a key of "
            "its own (a key acts as one sender), and writes the device ids of the host it "
            "was copied from: a receiver refuses them as another sender's unless it runs "
            'with device_scope = "sender"',
        )
    elif action == "reclaim":
        own = reclaim(config)
        _say(
            as_json,
            {"uuid": own, "reclaim": True},
            f"sender UUID {own}: the next send takes the identity back on every receiver; "
            "another host acting as this sender is refused from then on",
        )
    else:
        found = show(config)
        leases = {
            name: {"held": bool(lease.lease), "reclaim": lease.reclaim}
            for name, lease in found.leases.items()
        }
        lines = [f"sender UUID {found.uuid or 'none yet (created by the first send)'}"]
        lines += [
            f"  receiver {name}: {'lease held' if held['held'] else 'no lease yet'}"
            f"{', to reclaim' if held['reclaim'] else ''}"
            for name, held in leases.items()
        ]
        _say(as_json, {"uuid": found.uuid, "receivers": leases}, "\n".join(lines))


def _say(as_json: bool, doc: dict[str, Any], text: str) -> None:
    click.echo(json.dumps(doc, indent=2) if as_json else text)
