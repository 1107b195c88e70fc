"""``python -m tests.reliability.report``: run the reliability suite, print its figures.

Runs ``pytest tests/reliability`` with a figures file, then sums what each test
recorded per category (crash points exercised and survived, fault cases, fuzz cases,
concurrent senders and files, data lost). Exit code: pytest's, so a lost file or a
failed case is a failure here too.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from tests.reliability.figures import run_suite


def main() -> int:
    returncode, rows = run_suite("reliability", sys.argv[1:])
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        category = row.pop("category")
        for key, value in row.items():
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, int | float):
                totals[category][key] += value
    print()
    print("sealsync reliability figures")
    print("=" * 60)
    lost = 0.0
    for category in sorted(totals):
        print(category)
        for key, value in sorted(totals[category].items()):
            shown = int(value) if float(value).is_integer() else round(value, 3)
            print(f"  {key:<40} {shown}")
            if key.startswith("lost"):
                lost += value
    print("=" * 60)
    print(f"data lost (files): {int(lost)}")
    print(f"pytest exit code:  {returncode}")
    return returncode or (1 if lost else 0)


if __name__ == "__main__":
    raise SystemExit(main())
