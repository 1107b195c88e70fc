"""Puts ``tests/`` on ``sys.path`` for every test, including those in sub-folders, so
shared helpers (``deploy_helpers``, ``config_helpers``...) import the same way."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
