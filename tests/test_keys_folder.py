"""A keys folder group or others may write: whoever may write it may put another key or
trust file in place of the one named, whatever that file's mode. It is refused as the
file itself would be: by config loading (so ``check`` and ``serve`` and ``send`` stop
at once, exit 2, one line naming the folder and the chmod that fixes it), and by the
running receiver, whose authorized_keys then grants nothing."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from config_helpers import make_receiver, make_sender

from receiver.auth import AuthorizedKeys
from sealsync import permissions
from sealsync.app.cli import main
from sealsync.config import load_receiver_config, load_sender_config
from sealsync.errors import EXIT_USAGE, ConfigError
from sealsync.keys import generate_keypair


@pytest.mark.parametrize(
    ("mode", "whom"), [(0o777, "group and others"), (0o775, "group"), (0o757, "others")]
)
def test_a_folder_others_may_write_is_a_problem(tmp_path: Path, mode: int, whom: str) -> None:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    (keys / "authorized_keys").write_text("")
    (keys / "authorized_keys").chmod(0o644)
    keys.chmod(mode)
    problem = permissions.trust_file_problem(keys / "authorized_keys")
    assert problem == (
        f"its folder {keys} has mode {mode:04o}, which lets {whom} replace it: "
        f"run chmod go-w {keys}"
    )


@pytest.mark.parametrize("mode", [0o755, 0o700, 0o1777, 0o1775])
def test_a_folder_only_its_owner_may_change_is_fine(tmp_path: Path, mode: int) -> None:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    generate_keypair(keys / "edge", comment="edge")
    keys.chmod(mode)  # a sticky folder (/tmp) lets no one replace what is not theirs
    assert permissions.private_mode_problem(keys / "edge") is None
    assert permissions.trust_file_problem(keys / "edge.pub") is None


def test_a_link_into_a_folder_others_may_write_is_a_problem(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    generate_keypair(shared / "edge", comment="edge")
    shared.chmod(0o777)
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    (keys / "edge").symlink_to(shared / "edge")
    problem = permissions.private_mode_problem(keys / "edge")
    assert problem is not None and f"its folder {shared} has mode 0777" in problem


def test_receiver_config_refused_for_its_keys_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_receiver(tmp_path)
    keys = tmp_path / "keys"
    keys.chmod(0o777)
    with pytest.raises(ConfigError) as err:
        load_receiver_config(config)
    fix = f"its folder {keys} has mode 0777, which lets group and others replace it: "
    assert str(err.value) == (
        f"{config}: [receiver] host_key: {keys / 'host'}: {fix}run chmod go-w {keys}"
    )
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in ("check", "serve"):
        assert main([command, "--config", str(config)]) == EXIT_USAGE
        out, err_text = capsys.readouterr()
        assert out == ""
        (line,) = err_text.splitlines()
        assert line.startswith("sealsync: error: ") and line.endswith(f"run chmod go-w {keys}")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing made
    keys.chmod(0o755)
    assert load_receiver_config(config).authorized_keys == keys / "authorized_keys"


def test_sender_config_refused_for_its_keys_folder(tmp_path: Path) -> None:
    config = make_sender(tmp_path)
    (tmp_path / "keys").chmod(0o770)
    with pytest.raises(ConfigError) as err:
        load_sender_config(config)
    assert f"its folder {tmp_path / 'keys'} has mode 0770, which lets group replace it" in str(
        err.value
    )


def test_a_running_receiver_grants_nothing_once_its_keys_folder_is_opened(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    generate_keypair(keys / "edge", comment="edge")
    blob = (keys / "edge.pub").read_text().split()[1]
    (keys / "authorized_keys").write_text((keys / "edge.pub").read_text())
    (keys / "authorized_keys").chmod(0o644)
    key = base64.b64decode(blob)
    authorized = AuthorizedKeys(keys / "authorized_keys")
    assert authorized.allows(key) and authorized.ignored() == ""
    os.chmod(keys, 0o777)
    assert not authorized.allows(key)
    assert authorized.ignored().startswith(f"its folder {keys} has mode 0777")
    os.chmod(keys, 0o755)
    assert authorized.allows(key) and authorized.ignored() == ""
