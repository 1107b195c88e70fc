"""The receiver's gates: allow list by peer address, authorized_keys, UUID-to-key binding."""

from __future__ import annotations

import base64
import ipaddress
import os
from pathlib import Path

import paramiko
import pytest
from receiver_load_helpers import UUID_A, UUID_B

from receiver.auth import (
    AuthorizedKeys,
    SenderKeys,
    is_allowed,
    lenient_authorized_keys,
    parse_sender_keys,
    peer_address,
)
from sealsync.keys import fingerprint, generate_keypair


@pytest.fixture
def pubs(tmp_path: Path) -> dict[str, str]:
    """Three real Ed25519 public key lines (OpenSSH format)."""
    out = {}
    for name in ("a", "b", "c"):
        out[name] = generate_keypair(tmp_path / "keys" / name, comment=f"user@{name}")
    return out


def blob(line: str) -> bytes:
    return base64.b64decode(line.split()[1])


# --- allow list ---------------------------------------------------------------------------


def nets(*cidrs: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(c) for c in cidrs]


def test_peer_address_maps_ipv4_mapped_ipv6_to_ipv4() -> None:
    assert peer_address("::ffff:10.1.2.3") == ipaddress.IPv4Address("10.1.2.3")
    assert peer_address("fe80::1%eth0") == ipaddress.IPv6Address("fe80::1")
    assert peer_address("127.0.0.1") == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize(
    "ip, allowed",
    [
        ("127.0.0.1", False),
        ("10.200.0.7", True),
        ("::ffff:10.0.0.1", True),  # an IPv4 client on a dual-stack listener
        ("::1", True),
        ("2001:db8::1", False),
        ("11.0.0.1", False),
    ],
)
def test_allow_list_matches_only_its_networks(ip: str, allowed: bool) -> None:
    assert is_allowed(peer_address(ip), nets("10.0.0.0/8", "::1/128")) is allowed


def test_empty_allow_list_allows_nobody() -> None:
    assert is_allowed(peer_address("127.0.0.1"), []) is False


# --- authorized_keys -------------------------------------------------------------------------


def test_lenient_authorized_keys_takes_plain_lines_and_skips_the_rest(
    pubs: dict[str, str],
) -> None:
    a, b, c = pubs["a"], pubs["b"], pubs["c"]
    a_type = a.split()[0]
    c_b64 = c.split()[1]
    text = "\n".join(
        [
            "# a comment",
            "",
            a,
            f'from="10.0.0.1" {b}',  # options are not enforced here, so not granted
            f"ssh-rsa {c_b64} wrong-type",  # the blob says ssh-ed25519
            f"{a_type} !!!notbase64",
            f"{a_type}",
            "   " + c + "   ",
        ]
    )
    assert lenient_authorized_keys(text) == {blob(a), blob(c)}


def test_authorized_keys_reload_when_the_file_changes(tmp_path: Path, pubs: dict[str, str]) -> None:
    path = tmp_path / "authorized_keys"
    path.write_text(pubs["a"] + "\n")
    keys = AuthorizedKeys(path)
    assert keys.allows(blob(pubs["a"])) is True
    assert keys.allows(blob(pubs["b"])) is False
    path.write_text(pubs["b"] + "\n" + pubs["c"] + "\n")  # a revoked, b and c added
    assert keys.allows(blob(pubs["a"])) is False
    assert keys.allows(blob(pubs["b"])) is True
    os.unlink(path)
    assert keys.allows(blob(pubs["b"])) is False  # a vanished file grants nothing


def test_authorized_keys_compare_with_paramiko_key_blobs(
    tmp_path: Path, pubs: dict[str, str]
) -> None:
    path = tmp_path / "authorized_keys"
    path.write_text(pubs["a"] + "\n")
    key = paramiko.PKey.from_path(tmp_path / "keys" / "a")
    other = paramiko.PKey.from_path(tmp_path / "keys" / "b")
    keys = AuthorizedKeys(path)
    assert keys.allows(key.asbytes()) is True
    assert keys.allows(other.asbytes()) is False


# --- UUID binding ---------------------------------------------------------------------------------


def test_uuid_binds_to_the_first_key_and_refuses_another(
    tmp_path: Path, pubs: dict[str, str]
) -> None:
    store = SenderKeys(tmp_path)
    first = store.bind(UUID_A, pubs["a"], "10.0.0.5")
    assert first is not None
    assert (first.uuid, first.fingerprint, first.last_ip) == (
        UUID_A,
        fingerprint(pubs["a"]),
        "10.0.0.5",
    )
    assert store.bind(UUID_A, pubs["b"], "10.0.0.5") is None
    assert store.bind(UUID_B, pubs["b"], "10.0.0.6") is not None
    moved = store.bind(UUID_A, pubs["a"], "10.0.0.9")  # same key, new address
    assert moved is not None
    assert (moved.last_ip, moved.first_seen) == ("10.0.0.9", first.first_seen)
    path = tmp_path / "sync" / "sender_keys.txt"
    lines = path.read_text().splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        [UUID_A, fingerprint(pubs["a"]), "10.0.0.9"],
        [UUID_B, fingerprint(pubs["b"]), "10.0.0.6"],
    ]
    assert all(len(line.split("\t")) == 4 for line in lines)
    assert lines[0].split("\t")[3] == first.first_seen
    assert first.first_seen.endswith("+00:00")


def test_deleting_a_binding_line_lets_a_new_key_bind(tmp_path: Path, pubs: dict[str, str]) -> None:
    store = SenderKeys(tmp_path)
    store.bind(UUID_A, pubs["a"], "10.0.0.5")
    store.bind(UUID_B, pubs["b"], "10.0.0.6")
    path = tmp_path / "sync" / "sender_keys.txt"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[1:]))
    assert store.bind(UUID_A, pubs["c"], "10.0.0.7") is not None
    assert {b.uuid: b.fingerprint for b in store.bindings().values()} == {
        UUID_A: fingerprint(pubs["c"]),
        UUID_B: fingerprint(pubs["b"]),
    }


def test_binding_accepts_a_paramiko_key_or_a_fingerprint(
    tmp_path: Path, pubs: dict[str, str]
) -> None:
    store = SenderKeys(tmp_path)
    key = paramiko.PKey.from_path(tmp_path / "keys" / "a")
    assert store.bind(UUID_A, key, "10.0.0.5") is not None
    assert store.bind(UUID_A, fingerprint(pubs["a"]), "10.0.0.5") is not None
    assert store.bind(UUID_A, fingerprint(pubs["b"]), "10.0.0.5") is None


def test_malformed_binding_lines_are_skipped() -> None:
    fp = "SHA256:" + "x" * 43
    parsed = parse_sender_keys(
        [
            f"{UUID_A}\t{fp}\t10.0.0.1\t2024-01-01T00:00:00+00:00",
            "garbage",
            f"{UUID_B}\tnot-a-fingerprint\t10.0.0.1\tx",
            f"{UUID_A}\tSHA256:later\t10.0.0.2\tx",  # the first binding wins
            "",
        ]
    )
    assert list(parsed) == [UUID_A]
    assert parsed[UUID_A].fingerprint == fp


def test_rekey_keeps_max_uuids_per_key_and_retire_frees_nothing_for_others(
    tmp_path: Path,
) -> None:
    from receiver.auth import RETIRED, KeyLimit, Retired

    keys = SenderKeys(tmp_path, max_uuids_per_key=1)
    other = "12345678-1234-1234-1234-1234567890ab"
    assert keys.bind(other, "SHA256:" + "n" * 43, "10.0.0.2") is not None
    with pytest.raises(KeyLimit, match="already acts as 1 other sender"):
        keys.set_key("87654321-4321-4321-4321-ba0987654321", "SHA256:" + "n" * 43)
    assert keys.retire(other) is not None
    assert keys.bindings()[other].fingerprint == RETIRED
    with pytest.raises(Retired):
        keys.bind(other, "SHA256:" + "n" * 43, "10.0.0.2")
    assert keys.set_key(other, "SHA256:" + "m" * 43) is not None  # an explicit rekey
    assert keys.bind(other, "SHA256:" + "m" * 43, "10.0.0.3") is not None


def test_a_retired_senders_key_binds_no_new_uuid_until_the_operator_binds_it(
    tmp_path: Path,
) -> None:
    from receiver.auth import RETIRED, Retired

    key, other_key = "SHA256:" + "k" * 43, "SHA256:" + "o" * 43
    new, later = "0badc0de-0000-4000-8000-000000000001", "0badc0de-0000-4000-8000-000000000002"
    keys = SenderKeys(tmp_path)
    assert keys.bind(UUID_A, key, "10.0.0.2") is not None
    assert keys.bind(UUID_B, other_key, "10.0.0.3") is not None
    keys.retire(UUID_A)
    line = next(x for x in keys.path.read_text().splitlines() if x.startswith(UUID_A))
    assert line.split("\t")[1] == f"retired:{key}"  # the key is kept with the retirement
    assert keys.bindings()[UUID_A].fingerprint == RETIRED
    with pytest.raises(Retired) as refused:
        keys.bind(new, key, "10.0.0.2")  # the edge wiped: a new UUID, the same key
    assert str(refused.value) == (
        f"key {key} was retired on this receiver with sender {UUID_A}: it acts as no new "
        f"sender ({new}) until the receiver's operator binds it: sealsync senders rekey "
        f"{new} --key <its .pub>"
    )
    assert new not in keys.bindings()
    assert keys.bind(later, other_key, "10.0.0.3") is not None  # other keys are not affected
    keys.retire(UUID_A)  # retired again: the key is still kept
    fresh = SenderKeys(tmp_path)  # what another process reads
    assert fresh.bindings()[UUID_A].retired_key == key
    with pytest.raises(Retired):
        fresh.bind(new, key, "10.0.0.2")
    # the operator's word: this key is now sender `new`, and only that
    assert fresh.set_key(new, key) is None
    assert fresh.bind(new, key, "10.0.0.2") is not None
    with pytest.raises(Retired):
        fresh.bind("0badc0de-0000-4000-8000-000000000003", key, "10.0.0.2")


def test_a_retired_line_without_its_key_retires_the_uuid_alone(tmp_path: Path) -> None:
    from receiver.auth import RETIRED, Retired

    (tmp_path / "sync").mkdir()
    (tmp_path / "sync" / "sender_keys.txt").write_text(
        f"{UUID_A}\tretired\t10.0.0.2\t2026-01-01T00:00:00+00:00\n"
    )
    keys = SenderKeys(tmp_path)
    assert keys.bindings()[UUID_A].fingerprint == RETIRED
    with pytest.raises(Retired):
        keys.bind(UUID_A, "SHA256:" + "k" * 43, "10.0.0.2")
    assert keys.bind(UUID_B, "SHA256:" + "k" * 43, "10.0.0.2") is not None
    assert parse_sender_keys([f"{UUID_A}\tretired:nonsense\t-\t-"]) == {}  # not a key
