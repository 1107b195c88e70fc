"""``python -m tests.security.report``: run the security suite, print attacks tried and held.

Runs ``pytest tests/security`` with a figures file (``reliability.figures``); each
attack test records its name, how many hostile connections or streams it made, and
whether the receiver held (the honest sender was served, nothing was exceeded);
``conns`` is that count. A test that fails before recording shows in pytest's exit
code, which is this script's, or 1 if any recorded attack was not held.
"""

from __future__ import annotations

import sys

from tests.reliability.figures import run_suite


def main() -> int:
    returncode, found = run_suite("security", sys.argv[1:])
    rows = [row for row in found if row.get("category") == "security"]
    print()
    print("sealsync security figures")
    print("=" * 72)
    print(f"  {'attack':<56} {'conns':>6}  held")
    for row in rows:
        print(f"  {row['attack']:<56} {row['tried']:>6}  {'yes' if row['held'] else 'NO'}")
    print("=" * 72)
    held = sum(1 for row in rows if row["held"])
    print(f"attacks tried: {len(rows)}")
    print(f"attacks held:  {held}")
    print(f"pytest exit code: {returncode}")
    return returncode or (0 if held == len(rows) else 1)


if __name__ == "__main__":
    raise SystemExit(main())
