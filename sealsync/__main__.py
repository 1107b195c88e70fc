"""``python -m sealsync``: the same entry point as the console script."""

import sys

from sealsync.app.cli import main

sys.exit(main())
