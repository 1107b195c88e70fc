"""Clean-up after a round (docs/design.md §3.6).

Deliberately not a second implementation: the seed's clean-up steps are steps 4-8 of
its recovery algorithm, so a finished round runs recovery, and recovery's crash
safety covers clean-up too.
"""

from __future__ import annotations

from sender.manage.layout import SenderPaths
from sender.recover.recovery import recover


def finish_round(paths: SenderPaths) -> None:
    """Fold the round's ``sync.log`` into ``last_local_files.txt`` and drop the round."""
    recover(paths)
