"""OpenSSH's habits on files: modes (``permissions``) and the trust file formats
(``sshfiles``), as config loading, the sender's client and the receiver's
``authorized_keys`` use them. The end-to-end refusals are in test_trust_e2e.py."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import struct
from pathlib import Path

import pytest
from config_helpers import make_receiver, make_sender, receiver_doc, sender_doc, write_config

from receiver.auth import AuthorizedKeys, lenient_authorized_keys
from sealsync import permissions, sshfiles
from sealsync.config import load_receiver_config, load_sender_config
from sealsync.errors import EXIT_USAGE, ConfigError
from sealsync.keys import generate_keypair
from sender.transfer.client import known_hosts_name, load_identity, load_known_hosts


@pytest.fixture
def pub(tmp_path: Path) -> str:
    """A real Ed25519 public key line (``ssh-ed25519 AAAA... comment``)."""
    return generate_keypair(tmp_path / "k" / "key", comment="someone@host")


def _file(path: Path, text: str, mode: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# --- permissions -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_private_key_its_owner_alone_may_touch_is_fine(tmp_path: Path, mode: int) -> None:
    assert permissions.private_mode_problem(_file(tmp_path / "key", "k", mode)) is None


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        (0o644, "mode 0644 lets group and others read it"),
        (0o640, "mode 0640 lets group read it"),
        (0o604, "mode 0604 lets others read it"),
        (0o620, "mode 0620 lets group write it"),
        (0o660, "mode 0660 lets group read and write it"),
        (0o610, "mode 0610 lets group use it"),
    ],
)
def test_a_private_key_others_may_touch_is_refused_with_the_fix(
    tmp_path: Path, mode: int, says: str
) -> None:
    path = _file(tmp_path / "my keys" / "edge", "k", mode)
    problem = permissions.private_mode_problem(path)
    assert problem is not None and problem.startswith(says)
    assert problem.endswith(f"run chmod 600 '{path}'")  # quoted: the space in the folder


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o444, 0o755])
def test_a_file_only_its_owner_writes_is_fine(tmp_path: Path, mode: int) -> None:
    assert permissions.writable_problem(_file(tmp_path / "f", "", mode)) is None


@pytest.mark.parametrize(
    ("mode", "whom"),
    [(0o664, "group"), (0o646, "others"), (0o666, "group and others"), (0o620, "group")],
)
def test_a_file_others_may_write_is_refused_with_the_fix(
    tmp_path: Path, mode: int, whom: str
) -> None:
    path = _file(tmp_path / "known_hosts", "", mode)
    problem = permissions.writable_problem(path)
    assert problem == (
        f"mode {mode:04o} lets {whom} write it, so they could change whom sealsync trusts: "
        f"run chmod go-w {path}"
    )


def test_restrict_writes_takes_only_the_write_bits_of_group_and_others(tmp_path: Path) -> None:
    path = _file(tmp_path / "f", "", 0o666)
    permissions.restrict_writes(path)
    assert permissions.file_mode(path) == 0o644


# --- key files ---------------------------------------------------------------------------


def test_public_keys_in_every_common_form_are_told_from_private_ones(
    tmp_path: Path, pub: str
) -> None:
    assert sshfiles.looks_like_public_key(pub.encode() + b"\n")
    assert sshfiles.looks_like_public_key(b"---- BEGIN SSH2 PUBLIC KEY ----\nAAAA\n")
    assert sshfiles.looks_like_public_key(b"-----BEGIN PUBLIC KEY-----\nMCow\n")
    assert not sshfiles.looks_like_public_key((tmp_path / "k" / "key").read_bytes())
    assert not sshfiles.looks_like_public_key(b"")
    assert not sshfiles.looks_like_public_key(b"ssh-ed25519 notbase64!\n")


def test_a_pub_file_given_as_private_key_names_its_pair(tmp_path: Path) -> None:
    key = tmp_path / "k" / "key"
    generate_keypair(key)
    problem = sshfiles.private_key_problem(Path(f"{key}.pub"))
    assert problem is not None
    assert problem.startswith("a public key, not a private one: name the private key instead")
    assert f"({key}?)" in problem
    assert sshfiles.private_key_problem(key) is None


def test_the_client_refuses_a_pub_identity_as_a_config_error(tmp_path: Path) -> None:
    key = tmp_path / "k" / "key"
    generate_keypair(key)
    with pytest.raises(ConfigError, match=r"identity .*key\.pub: a public key, not a private"):
        load_identity(Path(f"{key}.pub"))
    key.chmod(0o640)
    with pytest.raises(ConfigError, match=r"mode 0640 lets group read it") as info:
        load_identity(key)
    assert info.value.exit_code == EXIT_USAGE


# --- known_hosts -------------------------------------------------------------------------


def _hashed(host: str) -> str:
    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_known_hosts_lines_that_parse(pub: str) -> None:
    kind, b64 = pub.split()[:2]
    text = "\n".join(
        [
            "# pinned by hand",
            "",
            f"[dc1.example]:5555 {kind} {b64}",
            f"dc2.example,10.0.0.2 {kind} {b64} a comment",
            f"{_hashed('[dc3]:5555')} {kind} {b64}",
            f"*.example.net,!bad.example.net\t{kind}   {b64}",
        ]
    )
    entries = sshfiles.parse_known_hosts(text, "kh")
    assert [e.line for e in entries] == [3, 4, 5, 6]
    assert entries[1].hosts == ("dc2.example", "10.0.0.2")
    assert {e.key_type for e in entries} == {kind}
    assert entries[0].blob == base64.b64decode(b64)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{kind} {b64} someone@host", "a public key without the host in front"),
        ("{kind} {b64}", "a public key without the host in front"),
        ("dc1 {kind}", "expected 'HOSTS KEYTYPE BASE64-KEY [comment]'"),
        ("@revoked dc1 {kind} {b64}", "@revoked lines are not supported"),
        ("@cert-authority *.example {kind} {b64}", "@cert-authority lines are not supported"),
        ("dc1 {kind} !!!{b64}", "the key data after ssh-ed25519 is not base64"),
        ("dc1 ssh-rsa {b64}", "the key data is a ssh-ed25519 key, the line says ssh-rsa"),
        ("dc1 Ssh-Ed25519 {b64}", "'Ssh-Ed25519' is not a key type"),
        ("dc1,,dc2 {kind} {b64}", "an empty host name in 'dc1,,dc2'"),
        ("[dc1]5555 {kind} {b64}", "'[dc1]5555': write a host with a port as [host]:port"),
        ("|1|abc {kind} {b64}", "'|1|abc' is not a hashed host name"),
        ("dc1 {kind} AAAA", "the key data after ssh-ed25519 is not an SSH public key"),
    ],
)
def test_a_malformed_known_hosts_line_is_named_by_file_and_line(
    pub: str, line: str, says: str
) -> None:
    kind, b64 = pub.split()[:2]
    text = f"# first\ndc0 {kind} {b64}\n" + line.format(kind=kind, b64=b64) + "\n"
    with pytest.raises(ConfigError) as info:
        sshfiles.parse_known_hosts(text, "/etc/kh")
    assert str(info.value).startswith(f"/etc/kh:3: {says}")
    assert info.value.exit_code == EXIT_USAGE


def test_the_client_pins_what_the_file_says_and_skips_types_it_cannot_use(
    tmp_path: Path, pub: str
) -> None:
    kind, b64 = pub.split()[:2]
    dss = base64.b64encode(struct.pack("!I", 7) + b"ssh-dss" + b"\0" * 20).decode()
    path = _file(
        tmp_path / "known_hosts",
        f"[dc1]:5555 {kind} {b64}\n{_hashed('[dc3]:5555')} {kind} {b64}\ndc4 ssh-dss {dss}\n",
        0o644,
    )
    known = load_known_hosts(path)
    for host in ("dc1", "dc3"):
        entry = known.lookup(known_hosts_name(host, 5555))
        assert entry is not None and entry[kind].get_base64() == b64
    assert known.lookup("dc4") is None
    assert known.lookup(known_hosts_name("dc1", 22)) is None


def test_the_client_refuses_a_known_hosts_others_can_write_or_a_bad_line(
    tmp_path: Path, pub: str
) -> None:
    path = _file(tmp_path / "known_hosts", pub + "\n", 0o644)
    with pytest.raises(ConfigError, match=rf"^known_hosts {path}:1: a public key without"):
        load_known_hosts(path)
    path.write_text("")
    path.chmod(0o666)
    with pytest.raises(ConfigError, match=rf"^known_hosts {path}: mode 0666 lets group and"):
        load_known_hosts(path)
    with pytest.raises(ConfigError, match=rf"^known_hosts {tmp_path}/nope does not exist$"):
        load_known_hosts(tmp_path / "nope")


# --- authorized_keys ---------------------------------------------------------------------


def test_authorized_keys_problems_are_named_by_line(pub: str) -> None:
    kind, b64 = pub.split()[:2]
    text = "\n".join(
        [
            "# senders",  # 1
            pub,  # 2
            f'from="10.0.0.1" {pub}',  # 3
            f'command="echo hi" {pub}',  # 4
            f"{kind}",  # 5
            f"ssh-dss {base64.b64encode(struct.pack('!I', 7) + b'ssh-dss').decode()}",  # 6
            "-----BEGIN OPENSSH PRIVATE KEY-----",  # 7
            "hello world",  # 8
            f"{kind} {b64[:-4]}",  # 9
        ]
    )
    blobs, problems = sshfiles.parse_authorized_keys(text)
    assert blobs == {base64.b64decode(b64)}
    said = dict(problems)
    assert sorted(said) == [3, 4, 5, 6, 7, 8, 9]
    assert said[3].startswith('key options (from="10.0.0.1") are not supported')
    assert said[4].startswith('key options (command="echo) are not supported')
    assert said[5] == "no key data after ssh-ed25519"
    assert said[6].startswith("unsupported key type ssh-dss (use ssh-ed25519")
    assert said[7].startswith("a PEM block, not a public key line")
    assert said[8].startswith("not a public key line: expected 'KEYTYPE BASE64-KEY")
    assert said[9] == "the key data after ssh-ed25519 is cut short or damaged"


def test_read_authorized_keys_stops_at_the_first_bad_line(tmp_path: Path, pub: str) -> None:
    path = _file(tmp_path / "authorized_keys", f"{pub}\n\nnonsense here\n", 0o600)
    with pytest.raises(ConfigError, match=rf"^{path}:3: not a public key line"):
        sshfiles.read_authorized_keys(path)


def test_the_running_receiver_skips_a_bad_line_with_a_warning(
    pub: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="sealsync"):
        blobs = lenient_authorized_keys(f"junk\n{pub}\n", "/etc/ak")
    assert blobs == {base64.b64decode(pub.split()[1])}
    assert "/etc/ak:1: skipped: not a public key line" in caplog.text


def test_authorized_keys_others_can_write_grant_nothing_until_fixed(
    tmp_path: Path, pub: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _file(tmp_path / "authorized_keys", pub + "\n", 0o644)
    blob = base64.b64decode(pub.split()[1])
    keys = AuthorizedKeys(path)
    assert keys.allows(blob) is True
    path.chmod(0o664)  # a chmod alone: same inode, size and mtime
    with caplog.at_level(logging.WARNING, logger="sealsync"):
        assert keys.allows(blob) is False
        assert keys.allows(blob) is False
    warnings = [r.getMessage() for r in caplog.records if "no key is accepted" in r.getMessage()]
    assert warnings == [
        f"{path}: mode 0664 lets group write it, so they could change whom "
        f"sealsync trusts: run chmod go-w {path}: no key is accepted"
    ]
    path.chmod(0o644)
    assert keys.allows(blob) is True


# --- config loading ----------------------------------------------------------------------


def _config_error(load: object, path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load(path)  # type: ignore[operator]
    assert info.value.exit_code == EXIT_USAGE
    message = str(info.value)
    assert "\n" not in message
    return message


def test_sender_config_refuses_unsafe_files_and_a_pub_identity(tmp_path: Path) -> None:
    path = make_sender(tmp_path)
    key = tmp_path / "keys/edge"
    key.chmod(0o644)
    assert _config_error(load_sender_config, path) == (
        f"{path}: [sender] identity: {key}: mode 0644 lets group and others read it, and a "
        f"private key must be its owner's alone: run chmod 600 {key}"
    )
    key.chmod(0o600)
    doc = sender_doc()
    doc["sender"]["identity"] = "keys/edge.pub"
    write_config(path, doc)
    assert _config_error(load_sender_config, path).startswith(
        f"{path}: [sender] identity: {key}.pub: a public key, not a private one"
    )
    write_config(path, sender_doc())
    (tmp_path / "keys/known_hosts").write_text((tmp_path / "keys/edge.pub").read_text())
    assert _config_error(load_sender_config, path).startswith(
        f"{path}: [sender] known_hosts: {tmp_path / 'keys/known_hosts'}:1: a public key "
        "without the host in front"
    )
    (tmp_path / "keys/known_hosts").write_text("")
    path.chmod(0o666)
    assert _config_error(load_sender_config, path) == (
        f"{path}: mode 0666 lets group and others write it, so they could change whom "
        f"sealsync trusts: run chmod go-w {path}"
    )
    path.chmod(0o640)
    assert load_sender_config(path).identity == key


def test_receiver_config_refuses_before_creating_its_folders(tmp_path: Path) -> None:
    path = make_receiver(tmp_path, folders=False)
    init = functools.partial(load_receiver_config, init=True)
    (tmp_path / "keys/host").chmod(0o604)
    assert "[receiver] host_key: " in _config_error(init, path)
    (tmp_path / "keys/host").chmod(0o600)
    (tmp_path / "keys/authorized_keys").write_text("ssh-ed25519\n")
    assert _config_error(init, path) == (
        f"{path}: [receiver] authorized_keys: {tmp_path / 'keys/authorized_keys'}:1: "
        "no key data after ssh-ed25519"
    )
    assert not (tmp_path / "dc").exists()
    (tmp_path / "keys/authorized_keys").write_text("")
    init(path)
    assert (tmp_path / "dc/data").is_dir()


def test_a_receiver_config_loaded_for_checking_creates_nothing(tmp_path: Path) -> None:
    from sealsync.config import ReceiverConfig, load_any

    path = make_receiver(tmp_path, folders=False)
    config = load_any(path, create=False)
    assert isinstance(config, ReceiverConfig)
    assert not (tmp_path / "dc").exists()
    ReceiverConfig.from_mapping(receiver_doc(), tmp_path, create=False)
    assert not (tmp_path / "dc").exists()
