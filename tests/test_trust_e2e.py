"""OpenSSH's habits, end to end: ``sealsync send`` and ``sealsync serve`` as real
processes refuse unsafe key, trust and config files and malformed trust lines with
exit 2 and one line naming the file (and line), the mode and the fix, and change
nothing; a receiver whose ``authorized_keys`` becomes writable by others while it
runs lets no sender in until it is fixed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import SEALSYNC, Deployment, make_deployment, populate, tree

pytestmark = pytest.mark.slow


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def serve_once(dep: Deployment) -> subprocess.CompletedProcess[str]:
    """``sealsync serve`` expected to refuse its config and exit at once."""
    return subprocess.run(
        [*SEALSYNC, "serve", "--config", str(dep.receiver_config)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def dep(tmp_path: Path) -> Iterator[Deployment]:
    d = make_deployment(tmp_path / "site")
    populate(d.senders[0].edge, groups=1, files=2)
    d.start_receiver()
    yield d
    d.stop_receiver()


@pytest.fixture
def idle(tmp_path: Path) -> Deployment:
    """A deployment whose receiver has never run: its folders do not exist yet."""
    return make_deployment(tmp_path / "site")


def refused_send(dep: Deployment) -> str:
    """A round that must refuse its config: exit 2, one line, nothing changed anywhere."""
    before = tree(dep.root)
    result = dep.senders[0].send()
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert tree(dep.root) == before
    assert dep.loaded_hashes(dep.senders[0]) == {}
    assert not (dep.receiver_schema / "sync" / "sender_keys.txt").exists()
    return line


# --- modes -------------------------------------------------------------------------------


def test_sender_refuses_an_identity_others_can_read(dep: Deployment) -> None:
    key = dep.root / "keys" / "edge0"
    key.chmod(0o644)
    line = refused_send(dep)
    assert line == (
        f"sealsync: error: {dep.senders[0].config}: [sender] identity: {key}: mode 0644 lets "
        f"group and others read it, and a private key must be its owner's alone: "
        f"run chmod 600 {key}"
    )
    key.chmod(0o400)  # the fix (or stricter) is enough: the round runs
    assert dep.senders[0].send().returncode == 0
    assert dep.loaded_hashes(dep.senders[0]) == dep.senders[0].sealed_hashes()


@pytest.mark.parametrize("which", ["known_hosts", "config"])
def test_sender_refuses_a_trust_or_config_file_others_can_write(
    dep: Deployment, which: str
) -> None:
    path = dep.root / "keys" / "known_hosts" if which == "known_hosts" else dep.senders[0].config
    path.chmod(0o664)
    line = refused_send(dep)
    assert "mode 0664 lets group write it" in line
    assert line.endswith(f"run chmod go-w {path}")
    assert str(path) in line.split(": mode")[0]
    path.chmod(0o640)  # readable by the group is fine
    assert dep.senders[0].send().returncode == 0


@pytest.mark.parametrize(
    ("which", "mode", "says"),
    [
        ("host", 0o640, "mode 0640 lets group read it, and a private key must be its owner's"),
        ("authorized_keys", 0o646, "mode 0646 lets others write it"),
    ],
)
def test_receiver_refuses_unsafe_key_files_and_creates_nothing(
    idle: Deployment, which: str, mode: int, says: str
) -> None:
    path = idle.root / "keys" / which
    path.chmod(mode)
    shutil.rmtree(idle.root / "dc")  # as on a fresh host: only `serve --init` would make it
    before = tree(idle.root)
    result = serve_once(idle)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith(f"sealsync: error: {idle.receiver_config}: [receiver] ")
    assert f"{path}: {says}" in line
    fix = "chmod 600" if which == "host" else "chmod go-w"
    assert line.endswith(f"run {fix} {path}")
    assert tree(idle.root) == before
    assert not (idle.root / "dc").exists()


def test_authorized_keys_made_writable_while_serving_lets_no_one_in(dep: Deployment) -> None:
    authorized = dep.root / "keys" / "authorized_keys"
    authorized.chmod(0o664)
    result = dep.senders[0].send()
    assert result.returncode == 1
    line = one_line(result)
    # the edge is told why, not to add a key the file already holds
    assert "refused key" in line and "ignores its authorized_keys and accepts no key" in line
    assert "add " not in line and line.endswith("its log names the fix")
    assert dep.loaded_hashes(dep.senders[0]) == {}
    assert f"{authorized}: mode 0664 lets group write it" in dep.log()
    assert f"run chmod go-w {authorized}: no key is accepted" in dep.log()
    assert f"refused: {authorized} is ignored (mode 0664 lets group write it" in dep.log()
    authorized.chmod(0o644)
    assert dep.senders[0].send().returncode == 0
    assert dep.loaded_hashes(dep.senders[0]) == dep.senders[0].sealed_hashes()


# --- malformed trust lines ---------------------------------------------------------------


def test_a_pub_line_pasted_into_known_hosts_is_a_config_error(dep: Deployment) -> None:
    known = dep.root / "keys" / "known_hosts"
    good = known.read_text()
    known.write_text("# the receiver\n" + (dep.root / "keys" / "host.pub").read_text())
    line = refused_send(dep)
    assert line.startswith(f"sealsync: error: {dep.senders[0].config}: [sender] known_hosts: ")
    assert f"{known}:2: a public key without the host in front (a .pub file pasted" in line
    assert "InvalidHostKey" not in line and "internal error" not in line
    known.write_text(good)
    assert dep.senders[0].send().returncode == 0


def test_a_pub_file_given_as_identity_is_a_config_error(dep: Deployment) -> None:
    config = dep.senders[0].config
    key = dep.root / "keys" / "edge0"
    config.write_text(config.read_text().replace(f'"{key}"', f'"{key}.pub"'))
    line = refused_send(dep)
    assert line == (
        f"sealsync: error: {config}: [sender] identity: {key}.pub: a public key, not a "
        f"private one: name the private key instead ({key}?); the .pub line is what the "
        "other end trusts"
    )


def test_a_malformed_authorized_keys_line_is_a_config_error(idle: Deployment) -> None:
    authorized = idle.root / "keys" / "authorized_keys"
    pub = authorized.read_text().strip()
    authorized.write_text(f'{pub}\nfrom="10.0.0.0/8" {pub}\n')
    before = tree(idle.root)
    result = serve_once(idle)
    assert result.returncode == 2
    line = one_line(result)
    assert f"[receiver] authorized_keys: {authorized}:2: key options (from=" in line
    assert "are not supported" in line
    assert tree(idle.root) == before
