"""A standalone master nobody can reach fails in seconds (real sockets on loopback)."""

from __future__ import annotations

import socket

import pytest

from sealsync.errors import EXIT_FAILURE, SealsyncError
from spark_loader import mastercheck
from spark_loader.mastercheck import check_masters, masters


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "pairs"),
    [
        ("spark://h:7077", [("h", 7077)]),
        ("spark://a:7077,b:7078", [("a", 7077), ("b", 7078)]),
        ("spark://[::1]:7077", [("::1", 7077)]),
        ("local[*]", None),
        ("yarn", None),
        ("k8s://https://h:443", None),
        ("spark://h", None),
        ("spark://h:0", None),
        ("spark://h:x", None),
        ("spark://:7077", None),
        ("spark://a/b:7077", None),
        ("spark://[h]:7077", None),
        ("spark://a..b:7077", None),  # left to Spark: the resolver would raise UnicodeError
    ],
)
def test_masters_reads_standalone_urls_and_leaves_the_rest_to_spark(
    url: str, pairs: list[tuple[str, int]] | None
) -> None:
    assert masters(url) == pairs


def test_a_refused_master_is_one_line_naming_it_and_the_fix() -> None:
    port = _closed_port()
    url = f"spark://127.0.0.1:{port}"
    with pytest.raises(SealsyncError) as info:
        check_masters(url)
    assert info.value.exit_code == EXIT_FAILURE
    assert str(info.value) == (
        f"cannot start Spark on {url}: no master answers (127.0.0.1:{port}: Connection "
        "refused): start the master, or fix --master or the [loader] master key"
    )


def test_one_listening_master_of_several_is_enough() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        check_masters(f"spark://127.0.0.1:{port}")
        check_masters(f"spark://127.0.0.1:{_closed_port()},127.0.0.1:{port}")
    dead = [_closed_port(), _closed_port()]
    with pytest.raises(SealsyncError, match="; 127.0.0.1:"):  # every master's reason
        check_masters(f"spark://127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}")


def test_a_master_that_times_out_is_left_to_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(address: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(mastercheck.socket, "create_connection", slow)
    check_masters("spark://127.0.0.1:7077")  # no error: a slow link may still answer


def test_an_unknown_master_host_is_refused_with_the_resolvers_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unknown(address: tuple[str, int], timeout: float) -> socket.socket:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(mastercheck.socket, "create_connection", unknown)
    with pytest.raises(SealsyncError, match=r"\(mastr:7077: Name or service not known\)"):
        check_masters("spark://mastr:7077")
