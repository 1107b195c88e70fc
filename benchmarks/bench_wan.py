"""sealsync and ``rsync -a`` over OpenSSH through the same emulated WAN link (issue 15).

    .venv/bin/python benchmarks/bench_wan.py all                 # the issue's sizes
    .venv/bin/python benchmarks/bench_wan.py all --scale 0.25 --reps 1   # a quick run
    .venv/bin/python benchmarks/bench_wan.py bulk small cut

The link is :class:`wanlink.Link`, a loopback proxy with a one-way delay and a rate
(``netem`` is not available here); both tools go through the same link, one after the
other, alternating, ``--reps`` times; medians are printed with the min–max of the
per-repetition ratios.

* bulk   256 MiB of TsFiles (4 × 64 MiB) at 50 Mbit/s and 40 ms RTT: MiB/s, and as a
         share of the link's rate;
* small  2,000 TsFiles of ~64 KiB at 40 ms RTT (no rate limit): files/s;
* bwlimit  ``sealsync send --bwlimit 16M`` on one 64 MiB TsFile over loopback (no
         link emulation): the rate the round's data moved at (``transfer_bytes`` over
         ``transfer_seconds`` from ``--json``), against the cap; rsync's own
         ``--bwlimit=16M`` on the same file beside it;
* cut    one 256 MiB TsFile at 50 Mbit/s, 40 ms RTT, the link cut once at 80 % of the
         file's bytes: bytes that crossed the link (upstream) / the file's size, and
         the time to finish. sealsync retries within its round (resuming if it can);
         rsync is ``rsync -a --partial``, run again at once after the cut, as a retry
         loop around it would.

Durability differs as in bench_vs_rsync.py: rsync does not fsync, sealsync fsyncs and
verifies every file before the round ends. ``--scale`` multiplies sizes and counts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (  # noqa: E402
    KiB,
    MiB,
    compile_bytecode,
    ensure_tools,
    log,
    median,
    populate,
    set_aside,
    settle,
    templates,
    timed,
)
from benchprocs import OpenSsh, Sealsync  # noqa: E402
from wanlink import Link  # noqa: E402

RTT = 0.040
RATE = 50e6 / 8  # 50 Mbit/s in bytes per second
CASES = ("bulk", "small", "cut", "bwlimit")
BWLIMIT = "16M"


def proxied_sender_config(s: Sealsync, link: Link) -> Path:
    """The sender's config pointed at the link, with the receiver's key pinned there."""
    keys = s.root / "keys"
    kind, b64 = (keys / "host.pub").read_text().split()[:2]
    known = keys / "known_hosts_wan"
    known.write_text(f"[127.0.0.1]:{link.port} {kind} {b64}\n")
    text = s.sender_config.read_text()
    text = text.replace(f"port = {s.port}\n", f"port = {link.port}\n")
    text = text.replace(str(keys / "known_hosts"), str(known))
    path = s.root / "sender_wan.toml"
    path.write_text(text)
    return path


def rsync_through(ssh: OpenSsh, link: Link, src: Path, dst: Path, partial: bool) -> list[str]:
    known = ssh.root / "known_hosts_wan"
    pub = (ssh.root / "host_ed25519.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{link.port} {pub[0]} {pub[1]}\n")
    command = ssh.ssh_command().replace(f"-p {ssh.port}", f"-p {link.port}")
    command = command.replace(str(ssh.root / "known_hosts"), str(known))
    user = __import__("pwd").getpwuid(__import__("os").getuid()).pw_name
    flags = ["-a", "--partial"] if partial else ["-a"]
    return ["rsync", *flags, "-e", command, f"{src}/", f"{user}@127.0.0.1:{dst}/"]


def sealsync_run(s: Sealsync, config: Path) -> tuple[float, dict]:
    run = timed(
        [sys.executable, "-m", "sealsync", "send", "--json", "--config", str(config)], check=False
    )
    doc = json.loads(run.stdout) if run.stdout.strip() else {}
    if run.returncode != 0 or not doc.get("ok"):
        raise RuntimeError(f"sealsync send failed ({run.returncode}): {run.stderr[-2000:]}")
    return run.seconds, doc


def rsync_until_done(cmd: list[str], attempts: int = 5) -> tuple[float, int]:
    """rsync, run again at once while it fails (a cut link); total seconds, runs."""
    started = time.perf_counter()
    for n in range(1, attempts + 1):
        run = timed(cmd, check=False)
        if run.returncode == 0:
            return time.perf_counter() - started, n
    raise RuntimeError(f"rsync failed {attempts} times: {run.stderr[-2000:]}")


def measure_bwlimit(work: Path, s: Sealsync, ssh: OpenSsh, reps: int) -> dict[str, object]:
    """The cap held over a round: sealsync's transfer rate and rsync's, both capped."""
    trash = work / "trash"
    for folder in ("sequence", "unsequence"):
        set_aside(s.edge_data / folder, trash)
    names = populate(s.edge_data, templates(work / "templates", 64 * MiB, 1), 1)
    size = (s.edge_data / names[0]).stat().st_size
    dst = work / "rsync-dst"
    ours, theirs = [], []
    for rep in range(reps):
        s.forget_sent(trash)
        settle()
        run = timed(
            [sys.executable, "-m", "sealsync", "send", "--json", "--bwlimit", BWLIMIT]
            + ["--config", str(s.sender_config)]
        )
        d = json.loads(run.stdout)["receivers"][0]["dirs"][0]
        ours.append(d["transfer_bytes"] / d["transfer_seconds"] / MiB)
        set_aside(dst, trash)
        dst.mkdir(parents=True)
        settle()
        cmd = ssh.rsync_cmd(s.edge_data, dst)
        seconds = timed([cmd[0], f"--bwlimit={BWLIMIT}", *cmd[1:]]).seconds
        theirs.append(size / MiB / seconds)
        log(f"bwlimit rep {rep + 1}: sealsync {ours[-1]:.2f} MiB/s, rsync {theirs[-1]:.2f} MiB/s")
    shutil.rmtree(trash, ignore_errors=True)
    return {
        "case": "bwlimit",
        "unit": f"MiB/s under --bwlimit {BWLIMIT}",
        "files": 1,
        "bytes": size,
        "sealsync": median(ours),
        "rsync": median(theirs),
        "ratio": median(ours) / 16,
        "ratio_min": min(ours) / 16,
        "ratio_max": max(ours) / 16,
        "crossed_sealsync": 1.0,
        "crossed_rsync": 1.0,
    }


def measure(
    case: str, work: Path, s: Sealsync, ssh: OpenSsh, scale: float, reps: int
) -> dict[str, object]:
    cache = work / "templates"
    if case == "small":
        count = max(20, int(2000 * scale))
        sources = templates(cache, 64 * KiB, 16)
        link_args = {"delay": RTT / 2, "rate": 0.0}
    elif case == "bulk":
        count = max(1, int(4 * scale))
        sources = templates(cache, 64 * MiB, 4)
        link_args = {"delay": RTT / 2, "rate": RATE}
    else:
        count = 1
        sources = templates(cache, max(8 * MiB, int(256 * MiB * scale)), 1)
        link_args = {"delay": RTT / 2, "rate": RATE}
    trash = work / "trash"
    for folder in ("sequence", "unsequence"):
        set_aside(s.edge_data / folder, trash)
    names = populate(s.edge_data, sources, count)
    size = sum((s.edge_data / n).stat().st_size for n in names)
    rsync_src, rsync_dst = s.edge_data, work / "rsync-dst"
    results: dict[str, list[float]] = {"sealsync": [], "rsync": [], "ratio": []}
    crossed: dict[str, list[float]] = {"sealsync": [], "rsync": []}
    with Link(s.port, **link_args) as slink, Link(ssh.port, **link_args) as rlink:
        config = proxied_sender_config(s, slink)
        cmd = rsync_through(ssh, rlink, rsync_src, rsync_dst, partial=case == "cut")
        for rep in range(reps):
            cut = int(size * 0.8) if case == "cut" else None
            s.forget_sent(trash)
            settle()
            slink.reset(cut)
            seconds, _doc = sealsync_run(s, config)
            crossed["sealsync"].append(slink.upstream / size)
            set_aside(rsync_dst, trash)
            rsync_dst.mkdir(parents=True)
            settle()
            rlink.reset(cut)
            r_seconds, runs = rsync_until_done(cmd)
            crossed["rsync"].append(rlink.upstream / size)
            if case == "small":
                a, b = count / seconds, count / r_seconds
            elif case == "bulk":
                a, b = size / MiB / seconds, size / MiB / r_seconds
            else:
                a, b = seconds, r_seconds
            results["sealsync"].append(a)
            results["rsync"].append(b)
            results["ratio"].append(a / b if case != "cut" else b / a)
            log(
                f"{case} rep {rep + 1}: sealsync {a:.2f}, rsync {b:.2f} "
                f"(crossed {crossed['sealsync'][-1]:.3f} / {crossed['rsync'][-1]:.3f} "
                f"of the data; rsync runs {runs})"
            )
        shutil.rmtree(trash, ignore_errors=True)
    unit = {"small": "files/s", "bulk": "MiB/s", "cut": "s to finish"}[case]
    out: dict[str, object] = {
        "case": case,
        "unit": unit,
        "files": count,
        "bytes": size,
        "sealsync": median(results["sealsync"]),
        "rsync": median(results["rsync"]),
        "ratio": median(results["ratio"]),
        "ratio_min": min(results["ratio"]),
        "ratio_max": max(results["ratio"]),
        "crossed_sealsync": median(crossed["sealsync"]),
        "crossed_rsync": median(crossed["rsync"]),
    }
    if case == "bulk":
        out["link_share"] = out["sealsync"] * MiB / RATE  # type: ignore[operator]
        out["rsync_link_share"] = out["rsync"] * MiB / RATE  # type: ignore[operator]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+", choices=(*CASES, "all"))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sealsync-bench-wan"))
    args = parser.parse_args()
    cases = CASES if "all" in args.cases else tuple(args.cases)
    ensure_tools()
    compile_bytecode()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    with Sealsync(args.work / "sealsync") as s, OpenSsh(args.work / "ssh") as ssh:
        for case in cases:
            if case == "bwlimit":
                rows.append(measure_bwlimit(args.work, s, ssh, args.reps))
            else:
                rows.append(measure(case, args.work, s, ssh, args.scale, args.reps))
    print(f"\nWAN link: {RTT * 1000:.0f} ms RTT; bulk and cut at {RATE * 8 / 1e6:.0f} Mbit/s")
    print("| case | sealsync | rsync | ratio (median, min–max) | link crossed (sealsync / rsync) |")
    print("|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['ratio']:.2f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})"
        crossed = f"{r['crossed_sealsync']:.3f} / {r['crossed_rsync']:.3f}"
        print(
            f"| {r['case']} ({r['files']} files, {r['bytes'] / MiB:.0f} MiB) | "
            f"{r['sealsync']:.2f} {r['unit']} | {r['rsync']:.2f} {r['unit']} | "
            f"{ratio} | {crossed} |"
        )
        if "link_share" in r:
            print(
                f"|   share of the link's rate | {r['link_share']:.1%} | "
                f"{r['rsync_link_share']:.1%} | | |"
            )
    print(
        "\nratio: sealsync/rsync for rates; rsync/sealsync for the cut case's time "
        f"(>1: faster); for bwlimit, sealsync's rate / the cap ({BWLIMIT}: target 0.9-1.1)"
    )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
