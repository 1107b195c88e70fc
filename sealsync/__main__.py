"""``python -m sealsync``: the same entry point as the console script."""

import sys

from sealsync.cli import main

sys.exit(main())
