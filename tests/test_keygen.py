"""Key generation: OpenSSH formats paramiko reads, 0600 from creation, no overwrite."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from click.testing import CliRunner

import sealsync.keys
from sealsync.app.cli import cli
from sealsync.errors import SealsyncError
from sealsync.keys import fingerprint, generate_keypair

# A fixed public key and the fingerprint `ssh-keygen -lf` prints for it.
KNOWN_LINE = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII6V2PH/Xkxmd+l6yD0Wr4t4OdQvEkAhOVu35GLOQFIR hi"
KNOWN_FINGERPRINT = "SHA256:9PMbhVn6bHdGfuymSCETpOofG51/SSW0BqPqC4wRPeU"


@pytest.fixture
def lax_umask() -> Iterator[None]:
    """umask 0: any mode bit a file gets then comes from the code, not from the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generated_key_is_openssh_ed25519_that_paramiko_loads(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "edge"
    line = generate_keypair(path, comment="edge@site")
    pub_text = (tmp_path / "keys" / "edge.pub").read_text()
    assert pub_text == line + "\n"
    kind, b64, comment = line.split(" ")
    assert (kind, comment) == ("ssh-ed25519", "edge@site")
    assert path.read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key = paramiko.Ed25519Key.from_private_key_file(str(path))
    assert key.get_base64() == b64
    assert fingerprint(key) == fingerprint(line)


def test_private_key_is_0600_from_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lax_umask: None
) -> None:
    seen: list[tuple[str, int]] = []
    real_open = os.open

    def spying_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        seen.append((os.fspath(path), stat.S_IMODE(os.fstat(fd).st_mode)))
        return fd

    monkeypatch.setattr(sealsync.keys.os, "open", spying_open)
    path = tmp_path / "edge"
    generate_keypair(path)
    monkeypatch.undo()
    # the first file created is the private key's temporary, already 0600 when opened
    first_path, first_mode = seen[0]
    assert Path(first_path).parent == tmp_path and first_path.endswith(".tmp")
    assert first_mode == 0o600
    assert mode(path) == 0o600
    assert mode(tmp_path / "edge.pub") == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge", "edge.pub"]


def test_parent_folder_is_created_private(tmp_path: Path, lax_umask: None) -> None:
    generate_keypair(tmp_path / "new" / "k")
    assert mode(tmp_path / "new") == 0o700


def test_existing_key_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "edge"
    generate_keypair(path)
    before = (path.read_bytes(), (tmp_path / "edge.pub").read_bytes())
    with pytest.raises(SealsyncError) as info:
        generate_keypair(path)
    assert str(info.value) == f"{path} already exists (use --force to overwrite)"
    assert (path.read_bytes(), (tmp_path / "edge.pub").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge", "edge.pub"]


def test_existing_public_key_alone_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "edge.pub").write_text("ssh-ed25519 AAAA old\n")
    with pytest.raises(SealsyncError) as info:
        generate_keypair(tmp_path / "edge")
    assert str(info.value) == f"{tmp_path / 'edge.pub'} already exists (use --force to overwrite)"
    assert not (tmp_path / "edge").exists()
    assert (tmp_path / "edge.pub").read_text() == "ssh-ed25519 AAAA old\n"


def test_force_replaces_the_pair(tmp_path: Path) -> None:
    path = tmp_path / "edge"
    old = generate_keypair(path)
    new = generate_keypair(path, force=True)
    assert new != old
    assert (tmp_path / "edge.pub").read_text() == new + "\n"
    assert paramiko.Ed25519Key.from_private_key_file(str(path)).get_base64() == new.split()[1]
    assert mode(path) == 0o600


def test_fingerprint_matches_ssh_keygen() -> None:
    assert fingerprint(KNOWN_LINE) == KNOWN_FINGERPRINT
    assert fingerprint(KNOWN_LINE.rsplit(" ", 1)[0]) == KNOWN_FINGERPRINT
    with pytest.raises(SealsyncError):
        fingerprint("ssh-ed25519")
    with pytest.raises(SealsyncError):
        fingerprint("ssh-ed25519 not*base64")


def test_comment_must_be_one_line(tmp_path: Path) -> None:
    with pytest.raises(SealsyncError):
        generate_keypair(tmp_path / "k", comment="a\nb")
    assert list(tmp_path.iterdir()) == []


def test_cli_keygen_prints_the_public_line_and_paths(tmp_path: Path) -> None:
    path = tmp_path / "host"
    result = CliRunner().invoke(cli, ["keygen", str(path), "--comment", "dc1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    pub = (tmp_path / "host.pub").read_text().strip()
    assert lines == [
        pub,
        f"private key: {path}",
        f"public key:  {path}.pub",
        f"fingerprint: {fingerprint(pub)}",
    ]
    assert pub.endswith(" dc1")

    again = CliRunner().invoke(cli, ["keygen", str(path)])
    assert again.exit_code == 1
    assert again.stderr == f"sealsync: error: {path} already exists (use --force to overwrite)\n"
    assert (tmp_path / "host.pub").read_text().strip() == pub

    forced = CliRunner().invoke(cli, ["keygen", str(path), "--force"])
    assert forced.exit_code == 0
    assert (tmp_path / "host.pub").read_text().strip() != pub
