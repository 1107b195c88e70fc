"""``sealsync check --config F``: is this config ready to run, without running it?

Like ``sshd -t`` or ``nginx -t``, for a sender, receiver or loader config: the config
parses, the files it names exist with safe modes, the keys load, the trust files
parse, the folders look like what they should be, and a sender's receivers answer
and accept its key. It changes nothing: the config is loaded without creating any
folder, no state is written, no lock is taken. Each role checks its own config
(``sender.check``, ``receiver.check``, ``spark_loader.check``); this module picks
the role by the config's table and imports only that role.

A config that cannot be used at all (it does not parse, names a missing file, a key
others can read, a malformed trust line) is a ConfigError, one line and exit 2 like
every command. Everything else is a finding, one line each, ``ok: ...`` or
``problem: ...``; the command exits 1 if any is a problem.
"""

from __future__ import annotations

import os

from sealsync.config import ReceiverConfig, SenderConfig, load_any
from sealsync.findings import Finding


def check_config(path: str | os.PathLike[str]) -> list[Finding]:
    """Every finding for the config at ``path``; ConfigError if it cannot be used."""
    config = load_any(path, create=False)
    if isinstance(config, SenderConfig):
        from sender.check import check_sender

        return check_sender(config)
    if isinstance(config, ReceiverConfig):
        from receiver.check import check_receiver

        return check_receiver(config)
    from spark_loader.check import check_loader

    return check_loader(config)
