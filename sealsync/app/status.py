"""``sealsync status``: what an operator needs to know about a sender, a receiver or a
loader.

Each role builds and words its own document (``sender.status``, ``receiver.status``,
``spark_loader.status``); this module picks the role by the config and escapes what
is printed. Read-only: it takes no lock and changes nothing, so it is safe while a
round runs or the receiver serves (its answer is then a snapshot of that moment).
"""

from __future__ import annotations

from typing import Any

from sealsync.config import LoaderConfig, ReceiverConfig, SenderConfig
from sealsync.printable import printable


def status_of(config: SenderConfig | ReceiverConfig | LoaderConfig) -> dict[str, Any]:
    """The status document of the role ``config`` configures."""
    if isinstance(config, SenderConfig):
        from sender.status import sender_status

        return sender_status(config)
    if isinstance(config, ReceiverConfig):
        from receiver.status import receiver_status

        return receiver_status(config)
    from spark_loader.status import loader_status

    return loader_status(config)


def render(doc: dict[str, Any]) -> list[str]:
    """Human lines for a status document, control characters escaped: names, reasons and
    devices in it come from disk and from other machines (``--json`` escapes its own)."""
    if doc["role"] == "sender":
        from sender.status import render_sender as render_role
    elif doc["role"] == "receiver":
        from receiver.status import render_receiver as render_role
    else:
        from spark_loader.status import render_loader as render_role
    return [printable(line) for line in render_role(doc)]
