"""Fill a simulated edge database instance with data files, for trying sealsync by hand.

    python examples/edge_instance.py ROOT --groups 3 --files 5 --devices 2 --rows 100
    python examples/edge_instance.py ROOT --unsequence 2 --format parquet --data-dirs 2
    python examples/edge_instance.py ROOT --prefix root.plant2
    python examples/edge_instance.py ROOT --device root.plant2.line1 --device root.plant2.line2

Writes under ROOT/schema (schema log mlog.txt) and ROOT/data (or ROOT/data0, ...):
per database ``<prefix>.sg<g>``, ``--files`` sealed sequence files of consecutive
time ranges and ``--unsequence`` files overlapping the first ones; devices are
``<prefix>.sg<g>.d<k>`` with measurements s1, s2 (the prefix is ``root`` unless
``--prefix`` names another). ``--device`` names the devices instead, each in the
database of its first two levels (``root.plant2`` for ``root.plant2.line1``), and
``--groups`` and ``--devices`` are then not used. Running it again adds more files
(fresh names; pass a later --start-ms for later points).

A receiver gives each device one owner, the sender that shipped it first: two edges
filled with the same devices would see the second one's files refused ("owned by
another sender"). Give each edge its own ``--prefix`` (or its own ``--device``s).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    from sealsync.simulator import (
        DEFAULT_MEASUREMENTS,
        DEFAULT_STEP_MS,
        EdgeInstance,
        time_partition,
    )
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sealsync.simulator import (
        DEFAULT_MEASUREMENTS,
        DEFAULT_STEP_MS,
        EdgeInstance,
        time_partition,
    )

EPOCH_MS = 1_700_000_000_000
PATH = re.compile(r"root(\.[A-Za-z0-9_]+)*")


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _prefix(text: str) -> str:
    if not PATH.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a path under root (root.<name>..., letters, digits, _)"
        )
    return text


def _device(text: str) -> str:
    if not PATH.fullmatch(text) or text.count(".") < 2:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a device path (root.<database>.<device>..., letters, digits, _)"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="instance root folder (created if missing)")
    parser.add_argument("--groups", type=_positive, default=3, help="storage groups")
    parser.add_argument("--files", type=_positive, default=5, help="sequence files per group")
    parser.add_argument("--devices", type=_positive, default=2, help="devices per group")
    parser.add_argument("--rows", type=_positive, default=100, help="rows per device per file")
    parser.add_argument(
        "--unsequence",
        type=_positive,
        default=0,
        metavar="N",
        help="unsequence files per group, overlapping the first sequence files",
    )
    parser.add_argument(
        "--prefix",
        type=_prefix,
        default="root",
        help="path the databases go under (root.plant2: root.plant2.sg1...); default root",
    )
    parser.add_argument(
        "--device",
        type=_device,
        action="append",
        metavar="PATH",
        help="a device to write (repeat for more), in place of the generated ones",
    )
    parser.add_argument("--format", choices=("tsfile", "parquet"), default="tsfile")
    parser.add_argument("--data-dirs", type=int, default=1, help="data dirs of the instance")
    parser.add_argument("--start-ms", type=int, default=EPOCH_MS, help="time of the first point")
    return parser


def _databases(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(database, its devices) to write: the named devices by the database of their
    first two levels, else ``--groups`` databases of ``--devices`` each under the prefix."""
    if args.device:
        out: dict[str, list[str]] = {}
        for device in dict.fromkeys(args.device):
            out.setdefault(".".join(device.split(".")[:2]), []).append(device)
        return list(out.items())
    return [
        (f"{args.prefix}.sg{g}", [f"{args.prefix}.sg{g}.d{k}" for k in range(1, args.devices + 1)])
        for g in range(1, args.groups + 1)
    ]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.data_dirs < 1:
        print("error: --data-dirs must be 1 or more", file=sys.stderr)
        return 2
    edge = EdgeInstance(args.root, data_dirs=args.data_dirs)
    span = args.rows * DEFAULT_STEP_MS
    total_files = total_rows = 0
    for group, devices in _databases(args):
        edge.append_schema(
            [f"CREATE TIMESERIES {d}.{m} INT64" for d in devices for m in DEFAULT_MEASUREMENTS]
        )
        plan = [(i, False) for i in range(args.files)] + [(i, True) for i in range(args.unsequence)]
        for n, (i, unsequence) in enumerate(plan):
            rel = edge.write_file(
                group,
                time_partition(args.start_ms + i * span),
                devices=devices,
                rows_per_device=args.rows,
                start_ms=args.start_ms + i * span,
                unsequence=unsequence,
                fmt=args.format,
                data_dir=n % args.data_dirs,
            )
            rows = args.rows * len(devices)
            total_files += 1
            total_rows += rows
            print(f"{edge.data_dirs[n % args.data_dirs]}/{rel}  devices={len(devices)} rows={rows}")
    print(f"wrote {total_files} files, {total_rows} rows; schema log {edge.schema_dir}/mlog.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
