"""The console script: commands, exit codes, one-line errors, and the dry run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from config_helpers import (
    held_elsewhere,
    make_receiver,
    make_sender,
    sender_doc,
    write_config,
    write_sealed,
)
from filelock import FileLock, Timeout

import sealsync.app.send
from sealsync.app.cli import cli, main
from sealsync.config import ReceiverEndpoint, SenderConfig
from sealsync.errors import EXIT_CODES, SealsyncError
from sender.manage.layout import SenderPaths
from sender.manage.scan import SYMLINK
from sender.transfer.report import AttemptReport

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    "check",
    "demo",
    "identity",
    "inspect",
    "jars",
    "keygen",
    "load",
    "owners",
    "send",
    "senders",
    "serve",
    "status",
]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sealsync", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def assert_one_error_line(err: str, expected: str) -> None:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert err == f"sealsync: error: {expected}\n"


# ---------------------------------------------------------------- the group


def test_help_lists_every_command_with_one_line() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    listed = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == COMMANDS
    assert all(len(line.split(maxsplit=1)) == 2 for line in listed)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: cli {command} ")


def test_every_exit_code_is_in_help_readme_and_operations_guide() -> None:
    """One table of exit codes (sealsync.errors.EXIT_CODES); each place that shows it
    lists every code, and no other."""
    help_text = CliRunner().invoke(cli, ["--help"]).stdout
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in help_text
    tables = {
        "README.md": r"^\| `(\d+)` \|",
        "docs/operations.md": r"^\| (\d+) \| .* \|.* \|$",
    }
    for name, row in tables.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        codes = [int(m) for m in re.findall(row, text, flags=re.MULTILINE)]
        assert sorted(codes) == sorted(EXIT_CODES), name


def test_v_and_q_are_taken_after_every_command() -> None:
    for command in cli.commands.values():
        opts = {o for p in command.params for o in getattr(p, "opts", ())}
        assert {"-v", "--verbose", "-q", "--quiet"} <= opts, command.name


def test_usage_error_exits_2_with_clicks_message(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "send", "--frobnicate")
    assert code == 2 and out == ""
    assert err == (
        "Usage: sealsync send [OPTIONS]\n"
        "Try 'sealsync send --help' for help.\n\n"
        "Error: No such option '--frobnicate'.\n"
    )
    code, _, err = run(capsys, "send")
    assert code == 2 and err.endswith("Error: Missing option '--config'.\n")


@pytest.mark.slow
def test_serve_given_the_senders_file_says_which_command_it_is_for(tmp_path: Path) -> None:
    """The operator's mix-up: the sender's config handed to ``sealsync serve``."""
    config = make_sender(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_process("serve", "--config", str(config))
    assert result.returncode == 2 and result.stdout == ""
    assert_one_error_line(
        result.stderr,
        f"{config}: [receiver]: must be a table, got a list: this is a sender config, "
        "for 'sealsync send'; this needs a receiver config",
    )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_console_script_and_module_agree(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "sealsync"  # the console script of this environment
    missing = tmp_path / "missing.toml"
    for argv in ([str(script)], [sys.executable, "-m", "sealsync"]):
        result = subprocess.run(
            [*argv, "send", "--config", str(missing)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2
        assert result.stdout == ""
        assert_one_error_line(
            result.stderr, f"{missing}: cannot read config: No such file or directory"
        )


# ---------------------------------------------------------------- config errors, every command


BAD_CONFIG_COMMANDS = [
    ["send", "--config"],
    ["send", "--dry-run", "--config"],
    ["serve", "--config"],
    ["load", "--config"],
    ["status", "--config"],
    ["owners", "--config"],
]


@pytest.mark.parametrize("argv", BAD_CONFIG_COMMANDS)
def test_bad_config_is_exit_2_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = write_config(tmp_path / "bad.toml", {"sender": {"schema_dir": "x", "tpyo": 1}})
    code, out, err = run(capsys, *argv, str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"sealsync: error: {path}: [")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_bad_config_through_a_real_process(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["max_retries"] = True
    path = make_sender(tmp_path, doc)
    result = run_process("send", "--config", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert_one_error_line(
        result.stderr, f"{path}: [sender] max_retries: must be an integer, got a boolean"
    )
    syntax = tmp_path / "syntax.toml"
    syntax.write_text("[receiver\n")
    result = run_process("serve", "--config", str(syntax))
    assert result.returncode == 2
    assert result.stderr.startswith(f"sealsync: error: {syntax}: TOML syntax error: ")
    assert result.stderr.count("\n") == 1 and "line 1" in result.stderr


def test_unknown_receiver_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = make_sender(tmp_path)
    code, out, err = run(capsys, "send", "--config", str(path), "--receiver", "dc9", "--dry-run")
    assert (code, out) == (2, "")
    assert_one_error_line(err, f"{path}: no [[receiver]] named 'dc9' (known: dc1)")


# ---------------------------------------------------------------- stubs


def test_serve_refuses_a_sender_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sender = make_sender(tmp_path)
    code, _, err = run(capsys, "serve", "--config", str(sender))
    assert code == 2
    assert err.startswith(f"sealsync: error: {sender}: [") and err.count("\n") == 1


def test_owners_release_needs_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    receiver = make_receiver(tmp_path)
    code, _, err = run(capsys, "owners", "--config", str(receiver), "release")
    assert code == 2 and "release needs at least one DEVICE" in err
    code, _, err = run(capsys, "owners", "--config", str(receiver), "free", "d1")
    assert code == 2 and "'free' is not 'release'" in err


# ---------------------------------------------------------------- unexpected failures


def test_internal_error_is_one_line_traceback_only_with_v(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(path: Path) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(sealsync.app.send, "load_sender_config", boom)
    code, out, err = run(capsys, "send", "--config", "x.toml")
    assert (code, out) == (1, "")
    assert err == (
        "sealsync: internal error: RuntimeError: boom second line (run with -v for the traceback)\n"
    )
    code, _, err = run(capsys, "-v", "send", "--config", "x.toml")
    assert code == 1
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("sealsync: internal error: RuntimeError: boom second line\n")


def test_keyboard_interrupt_is_130_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sealsync.app.send, "load_sender_config", interrupted)
    assert run(capsys, "send", "--config", "x.toml") == (130, "", "sealsync: interrupted\n")


# ---------------------------------------------------------------- send


class FakeRound:
    """Stands in for ``sender.attempt``; records calls and checks the lock is held."""

    def __init__(self, fail_for: str | None = None, ships: int = 1) -> None:
        self.calls: list[tuple[SenderConfig, ReceiverEndpoint]] = []
        self.fail_for = fail_for
        self.ships = ships

    def module(self) -> types.ModuleType:
        module = types.ModuleType("sender.attempt")
        module.sync_to_receiver = self.sync_to_receiver  # type: ignore[attr-defined]
        return module

    def sync_to_receiver(
        self,
        config: SenderConfig,
        receiver: ReceiverEndpoint,
        progress: object = None,
        report: AttemptReport | None = None,
        cancel: object = None,
        reconcile: bool = False,
    ) -> AttemptReport:
        lock = config.schema_dir / "sync" / f"{receiver.host}_{receiver.port}" / "sync.lock"
        with pytest.raises(Timeout):  # a fresh instance = another holder: must be refused
            FileLock(lock, timeout=0).acquire()
        self.calls.append((config, receiver))
        if receiver.name == self.fail_for:
            raise SealsyncError("receiver unreachable")
        assert report is not None and len(report.dirs) == len(config.data_dirs)
        for d in report.dirs:
            d.complete = True
        report.dirs[0].shipped = [f"sequence/g/0/{i}.tsfile" for i in range(self.ships)]
        report.dirs[0].shipped_bytes = 100 * self.ships
        return report


def two_receivers(tmp_path: Path) -> Path:
    doc = sender_doc()
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556})
    return make_sender(tmp_path, doc)


def test_send_runs_a_round_per_receiver_under_its_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRound()
    monkeypatch.setitem(sys.modules, "sender.attempt", fake.module())
    path = two_receivers(tmp_path)
    code, out, err = run(capsys, "send", "--config", str(path))
    assert (code, err) == (0, "")
    assert [line.split(" ", 1)[0] for line in out.splitlines()] == ["dc1", "dc2"]
    assert all(": ok: shipped 1 files" in line for line in out.splitlines())
    assert sorted(r.name for _, r in fake.calls) == ["dc1", "dc2"]  # side by side
    assert fake.calls[0][0].source == str(path)
    fake.calls.clear()
    code, out, err = run(capsys, "send", "--config", str(path), "--receiver", "dc2")
    assert (code, err, out.count("\n")) == (0, "", 1) and out.startswith("dc2 (127.0.0.1:5556)")
    assert [r.name for _, r in fake.calls] == ["dc2"]


def test_a_round_with_nothing_to_do_prints_nothing_unless_v(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRound(ships=0)
    monkeypatch.setitem(sys.modules, "sender.attempt", fake.module())
    path = make_sender(tmp_path)
    assert run(capsys, "send", "--config", str(path)) == (0, "", "")  # cron mails nothing
    assert len(fake.calls) == 1
    # -v after the subcommand, as before it, shows the summary
    for argv in (["send", "-v", "--config", str(path)], ["-v", "send", "--config", str(path)]):
        code, out, err = run(capsys, *argv)
        assert (code, err) == (0, "")
        assert out.startswith("dc1 (127.0.0.1:5555): ok: shipped 0 files") and out.count("\n") == 1
    # and -q after it silences even a round that shipped
    fake.ships = 2
    assert run(capsys, "send", "--config", str(path), "-q") == (0, "", "")
    code, out, _ = run(capsys, "send", "--config", str(path))
    assert code == 0 and ": ok: shipped 2 files" in out


def test_a_bug_in_a_round_is_recorded_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRound()

    def broken(*args: Any, **kwargs: Any) -> AttemptReport:
        fake.calls.append(args[:2])
        raise RuntimeError("boom")

    module = fake.module()
    module.sync_to_receiver = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sender.attempt", module)
    path = two_receivers(tmp_path)
    code, out, err = run(capsys, "send", "--config", str(path), "--json")
    assert code == 1 and len(fake.calls) == 2  # rounds run side by side: both met it
    assert err == ("sealsync: internal error: RuntimeError: boom (run with -v for the traceback)\n")
    doc = json.loads(out)
    assert doc["errors"] == [f"{r}: internal error: RuntimeError: boom" for r in ("dc1", "dc2")]
    kinds = [(a["receiver"], a["kind"]) for a in doc["attempts"]]
    assert kinds == [("dc1", "internal"), ("dc2", "internal")]
    history = tmp_path / "edge/schema/sync/127.0.0.1_5555/rounds.jsonl"
    assert json.loads(history.read_text())["kind"] == "internal"


def test_send_goes_on_after_one_receiver_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRound(fail_for="dc1")
    monkeypatch.setitem(sys.modules, "sender.attempt", fake.module())
    path = two_receivers(tmp_path)
    code, out, err = run(capsys, "send", "--config", str(path))
    assert sorted(r.name for _, r in fake.calls) == ["dc1", "dc2"]
    assert code == 1 and out.startswith("dc2 (127.0.0.1:5556): ok") and out.count("\n") == 1
    assert_one_error_line(err, "dc1: receiver unreachable")


@pytest.mark.slow
def test_send_with_several_receivers_locked_exits_75(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRound()
    monkeypatch.setitem(sys.modules, "sender.attempt", fake.module())
    path = two_receivers(tmp_path)
    lock = tmp_path / "edge/schema/sync/127.0.0.1_5555/sync.lock"
    with held_elsewhere(lock):
        code, out, err = run(capsys, "send", "--config", str(path))
    assert code == 75 and out.startswith("dc2 (127.0.0.1:5556): ok") and out.count("\n") == 1
    assert_one_error_line(err, f"dc1: another sender holds the lock for 127.0.0.1:5555 ({lock})")
    assert [r.name for _, r in fake.calls] == ["dc2"]


# ---------------------------------------------------------------- dry run

DC1 = ("127.0.0.1", 5555)


def state_snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: type, mode, size, mtime and content."""
    snap: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            snap[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return snap


def edge_instance(tmp_path: Path) -> tuple[Path, Path]:
    """A sender instance whose dc1 state says a, m and gone were synced."""
    doc = sender_doc()
    doc["receiver"].append({"name": "dc2", "host": "127.0.0.1", "port": 5556})
    config = make_sender(tmp_path, doc)
    data = tmp_path / "edge/data"
    write_sealed(data, "sequence/g1/0/a.tsfile")
    write_sealed(data, "sequence/g1/0/b.tsfile")
    write_sealed(data, "sequence/g1/0/c.tsfile", sealed=False)
    # gained .mods after syncing: never deleted (docs/design.md §9.2), shipped again (no identity
    # of a .mods it shipped with is recorded in shipped_mods.txt)
    write_sealed(data, "sequence/g1/0/m.tsfile", mods=True)
    write_sealed(data, "sequence/g1/1/x.parquet")
    (data / "sequence/g1/1/x.parquet.merge").write_bytes(b"")  # being merged: not sealed
    write_sealed(data, "unsequence/g1/0/u.tsfile")
    (data / "sequence/g1/0/link.tsfile").symlink_to(data / "sequence/g1/0/a.tsfile")
    state = SenderPaths(data, *DC1)
    state.folder.mkdir(parents=True)
    state.last_local_files.write_text(
        "sequence/g1/0/a.tsfile\nsequence/g1/0/gone.tsfile\nsequence/g1/0/m.tsfile\n"
    )
    return config, data


def dry_run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, "send", "--dry-run", "--json", *args)
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_dry_run_plans_every_receiver_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = edge_instance(tmp_path)
    before = state_snapshot(tmp_path)
    doc = dry_run_json(capsys, "--config", str(config))
    assert state_snapshot(tmp_path) == before
    rejected = [{"name": "sequence/g1/0/link.tsfile", "reason": SYMLINK}]
    assert doc == {
        "dry_run": True,
        "receivers": [
            {
                "name": "dc1",
                "host": "127.0.0.1",
                "port": 5555,
                "bwlimit": 0,
                "data_dirs": [
                    {
                        "data_dir": str(data),
                        "recovery": None,
                        "new": [
                            "sequence/g1/0/b.tsfile",
                            "sequence/g1/0/m.tsfile",
                            "unsequence/g1/0/u.tsfile",
                        ],
                        "mods_changed": ["sequence/g1/0/m.tsfile"],
                        "deleted": ["sequence/g1/0/gone.tsfile"],
                        "rejected": rejected,
                    }
                ],
            },
            {
                "name": "dc2",
                "host": "127.0.0.1",
                "port": 5556,
                "bwlimit": 0,
                "data_dirs": [
                    {
                        "data_dir": str(data),
                        "recovery": None,
                        "new": [
                            "sequence/g1/0/a.tsfile",
                            "sequence/g1/0/b.tsfile",
                            "sequence/g1/0/m.tsfile",
                            "unsequence/g1/0/u.tsfile",
                        ],
                        "mods_changed": [],
                        "deleted": [],
                        "rejected": rejected,
                    }
                ],
            },
        ],
    }


def test_dry_run_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, data = edge_instance(tmp_path)
    before = state_snapshot(tmp_path)
    code, out, err = run(capsys, "send", "--config", str(config), "--dry-run", "--receiver", "dc1")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "dry run: nothing is changed, no receiver is contacted",
        "receiver dc1 (127.0.0.1:5555)",
        f"  data dir {data}",
        "    new (3):",
        "      sequence/g1/0/b.tsfile",
        "      sequence/g1/0/m.tsfile  (synced; its .mods changed)",
        "      unsequence/g1/0/u.tsfile",
        "    deleted (1):",
        "      sequence/g1/0/gone.tsfile",
        "    rejected (1):",
        f"      sequence/g1/0/link.tsfile: {SYMLINK}",
    ]
    assert state_snapshot(tmp_path) == before


def test_dry_run_shows_what_recovery_of_a_crashed_round_would_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = edge_instance(tmp_path)
    state = SenderPaths(data, *DC1)
    # the crashed round got gone deleted and b verified, then died mid-line
    state.sync_log.write_text(
        "sync start\nsync deleted file names start\nsequence/g1/0/gone.tsfile\n"
        "sync deleted file names end\nsync tsfile start\nsequence/g1/0/b.tsfile\nunseq"
    )
    (state.snapshot / "sequence/g1/0").mkdir(parents=True)
    before = state_snapshot(tmp_path)
    doc = dry_run_json(capsys, "--config", str(config), "--receiver", "dc1")
    assert state_snapshot(tmp_path) == before
    plan = doc["receivers"][0]["data_dirs"][0]
    assert plan["new"] == ["sequence/g1/0/m.tsfile", "unsequence/g1/0/u.tsfile"]
    assert plan["deleted"] == []
    assert plan["recovery"] == (
        "would apply the crashed round's sync.log (1 deleted, 1 new marked synced)"
    )


def test_dry_run_after_a_crash_in_clean_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = edge_instance(tmp_path)
    state = SenderPaths(data, *DC1)
    # clean-up wrote current (log applied) and deleted last, then died
    state.last_local_files.rename(state.current_local_files)
    state.current_local_files.write_text("sequence/g1/0/a.tsfile\nsequence/g1/0/b.tsfile\n")
    state.sync_log.write_text("sync start\nsync tsfile start\nsequence/g1/0/b.tsfile\n")
    before = state_snapshot(tmp_path)
    plan = dry_run_json(capsys, "--config", str(config), "--receiver", "dc1")["receivers"][0][
        "data_dirs"
    ][0]
    assert state_snapshot(tmp_path) == before
    assert plan["new"] == ["sequence/g1/0/m.tsfile", "unsequence/g1/0/u.tsfile"]
    assert plan["deleted"] == []
    assert plan["recovery"].startswith("would finish a crashed clean-up")


def test_dry_run_ignores_a_stale_current_next_to_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = edge_instance(tmp_path)
    state = SenderPaths(data, *DC1)
    state.current_local_files.write_text("sequence/g1/0/b.tsfile\n")  # half-done clean-up
    plan = dry_run_json(capsys, "--config", str(config), "--receiver", "dc1")["receivers"][0][
        "data_dirs"
    ][0]
    assert plan["new"] == [
        "sequence/g1/0/b.tsfile",
        "sequence/g1/0/m.tsfile",
        "unsequence/g1/0/u.tsfile",
    ]
    assert plan["deleted"] == ["sequence/g1/0/gone.tsfile"]
    assert plan["recovery"] == "would drop the stale current_local_files.txt"


@pytest.mark.slow
def test_dry_run_takes_no_lock_and_needs_no_receiver(tmp_path: Path) -> None:
    config, _ = edge_instance(tmp_path)
    with held_elsewhere(tmp_path / "edge/schema/sync/127.0.0.1_5555/sync.lock"):
        result = run_process("send", "--config", str(config), "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout)["receivers"][0]["data_dirs"][0]["new"] == [
        "sequence/g1/0/b.tsfile",
        "sequence/g1/0/m.tsfile",
        "unsequence/g1/0/u.tsfile",
    ]
