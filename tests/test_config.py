"""Config loading: every error class is one ConfigError line naming the file and the key."""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from config_helpers import (
    loader_doc,
    make_loader,
    make_receiver,
    make_sender,
    receiver_doc,
    sender_doc,
    write_config,
)

from sealsync.config import (
    METADATA_KEY,
    Integer,
    LoaderConfig,
    NotAKey,
    Number,
    ReceiverConfig,
    ReceiverEndpoint,
    SenderConfig,
    Setting,
    keys_of,
    load_any,
    load_loader_config,
    load_receiver_config,
    load_sender_config,
    parse_listen,
    settings_of,
)
from sealsync.config.location import parse_location
from sealsync.errors import EXIT_USAGE, ConfigError


def config_error(load: Callable[[Path], Any], path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load(path)
    message = str(info.value)
    assert info.value.exit_code == EXIT_USAGE
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# ---------------------------------------------------------------- sender


def test_sender_loads_with_defaults_and_relative_paths(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["receiver"].append({"host": "10.0.0.7", "port": 6000})
    path = make_sender(tmp_path, doc)
    config = load_sender_config(path)
    assert config == SenderConfig(
        schema_dir=tmp_path / "edge/schema",
        data_dirs=[tmp_path / "edge/data"],
        identity=tmp_path / "keys/edge",
        known_hosts=tmp_path / "keys/known_hosts",
        receivers=[
            ReceiverEndpoint("dc1", "127.0.0.1", 5555),
            ReceiverEndpoint("10.0.0.7:6000", "10.0.0.7", 6000),
        ],
        max_retries=5,
        connect_timeout=10.0,
        chunk_size=262144,
        pipeline_depth=1024,
        source=str(path),
    )
    assert config.receiver("dc1") == config.receivers[0]
    assert config.receiver("10.0.0.7:6000") == config.receivers[1]


def test_sender_relative_paths_follow_the_config_folder_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_sender(tmp_path / "site")
    monkeypatch.chdir(tmp_path)
    config = load_sender_config(Path("site/S.toml"))
    assert config.schema_dir == tmp_path / "site/edge/schema"
    assert config.data_dirs == [tmp_path / "site/edge/data"]
    assert path.exists()


def test_sender_extras_are_read(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"].update(connect_timeout=2, chunk_size=65536, pipeline_depth=8, max_retries=1)
    config = load_sender_config(make_sender(tmp_path, doc))
    assert (config.connect_timeout, config.chunk_size, config.pipeline_depth) == (2.0, 65536, 8)
    assert config.max_retries == 1


def _set(table: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        target = doc[table][0] if isinstance(doc[table], list) else doc[table]
        target[key] = value

    return change


def _drop(table: str, key: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        target = doc[table][0] if isinstance(doc[table], list) else doc[table]
        del target[key]

    return change


def _add_receiver(**kw: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["receiver"].append(kw)


SENDER_ERRORS = [
    # unknown keys, at every level
    (_set("sender", "data_dir", ["edge/data"]), "[sender] data_dir: unknown key"),
    (_set("receiver", "hots", "x"), "[[receiver]] #1 hots: unknown key"),
    (lambda d: d.update(sendr={"a": 1}), "[sendr]: unknown table or key"),
    (lambda d: d.update(max_retries=3), "[max_retries]: unknown table or key"),
    # fields that are not keys of the table
    (_set("sender", "source", "x"), "[sender] source: unknown key"),
    (_set("sender", "receivers", ["dc1"]), "[sender] receivers: unknown key"),
    # missing required keys and tables
    (_drop("sender", "identity"), "[sender] identity: missing required key"),
    (_drop("sender", "data_dirs"), "[sender] data_dirs: missing required key"),
    (_drop("receiver", "port"), "[[receiver]] #1 port: missing required key"),
    (lambda d: d.pop("receiver"), "[[receiver]]: missing"),
    (lambda d: d.pop("sender"), "[sender]: missing table"),
    # wrong types
    (
        _set("sender", "max_retries", True),
        "[sender] max_retries: must be an integer, got a boolean",
    ),
    (_set("sender", "max_retries", 2.5), "[sender] max_retries: must be an integer, got a number"),
    (_set("sender", "data_dirs", "edge/data"), "[sender] data_dirs: must be a list of strings"),
    (_set("sender", "data_dirs", [1]), "[sender] data_dirs[0]: must be a string, got an integer"),
    (_set("sender", "identity", 7), "[sender] identity: must be a string, got an integer"),
    (_set("sender", "connect_timeout", False), "[sender] connect_timeout: must be a number"),
    (_set("receiver", "port", "5555"), "[[receiver]] #1 port: must be an integer, got a string"),
    (_set("receiver", "port", True), "[[receiver]] #1 port: must be an integer, got a boolean"),
    (lambda d: d.update(sender=[1]), "[sender]: must be a table, got a list"),
    (lambda d: d.update(receiver=5), "[[receiver]]: must be a non-empty array of tables"),
    # bad values
    (_set("receiver", "port", 0), "[[receiver]] #1 port: must be between 1 and 65535, got 0"),
    (_set("receiver", "port", 65536), "[[receiver]] #1 port: must be between 1 and 65535"),
    (_set("receiver", "host", ""), "[[receiver]] #1 host: must not be empty"),
    (_set("receiver", "host", "a/b"), "[[receiver]] #1 host: not a host name or IP address"),
    (_set("receiver", "host", "[::1]"), "[[receiver]] #1 host: not a host name or IP address"),
    # names the resolver refuses (its IDNA step raised UnicodeError at connect time)
    (_set("receiver", "host", "dc1..example"), "[[receiver]] #1 host: not a host name"),
    (_set("receiver", "host", ".dc1"), "[[receiver]] #1 host: not a host name"),
    (_set("receiver", "host", "x" * 64 + ".example"), "[[receiver]] #1 host: not a host name"),
    (_set("sender", "max_retries", 0), "[sender] max_retries: must be between 1 and 1000, got 0"),
    (_set("sender", "connect_timeout", 0), "[sender] connect_timeout: must be greater than 0"),
    (_set("sender", "chunk_size", 10), "[sender] chunk_size: must be between"),
    (_set("sender", "pipeline_depth", 0), "[sender] pipeline_depth: must be between"),
    (_set("sender", "data_dirs", []), "[sender] data_dirs: must not be empty"),
    (
        _set("sender", "data_dirs", ["edge/data", "edge/./data"]),
        "[sender] data_dirs[1]: duplicate of data_dirs[0]",
    ),
    (
        _add_receiver(name="dc1", host="10.0.0.1", port=1),
        "[[receiver]] #2 name: duplicate of [[receiver]] #1: 'dc1'",
    ),
    (
        _add_receiver(name="other", host="127.0.0.1", port=5555),
        "[[receiver]] #2 port: duplicate of [[receiver]] #1: 127.0.0.1:5555",
    ),
    # paths that must exist
    (_set("sender", "data_dirs", ["edge/nope"]), "[sender] data_dirs[0]: "),
    (_set("sender", "schema_dir", "keys/edge"), "[sender] schema_dir: "),
    (_set("sender", "identity", "keys/missing"), "[sender] identity: "),
    (_set("sender", "known_hosts", "keys"), "[sender] known_hosts: "),
]


@pytest.mark.parametrize(("change", "expected"), SENDER_ERRORS)
def test_sender_errors_name_the_file_and_key(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    doc = copy.deepcopy(sender_doc())
    change(doc)
    path = make_sender(tmp_path, doc)
    message = config_error(load_sender_config, path)
    assert message.startswith(f"{path}: {expected}"), message


def test_sender_missing_paths_say_what_is_wrong(tmp_path: Path) -> None:
    doc = sender_doc()
    doc["sender"]["data_dirs"] = ["edge/nope"]
    path = make_sender(tmp_path, doc)
    assert config_error(load_sender_config, path) == (
        f"{path}: [sender] data_dirs[0]: {tmp_path / 'edge/nope'} does not exist"
    )
    doc = sender_doc()
    doc["sender"]["known_hosts"] = "keys"
    write_config(path, doc)
    assert config_error(load_sender_config, path) == (
        f"{path}: [sender] known_hosts: {tmp_path / 'keys'} is not a regular file"
    )


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert config_error(load_sender_config, missing) == (
        f"{missing}: cannot read config: No such file or directory"
    )
    assert config_error(load_receiver_config, tmp_path).startswith(f"{tmp_path}: cannot read")


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "S.toml"
    path.write_text('[sender]\nschema_dir = "a"\ndata_dirs = [\n"x" "y"]\n')
    message = config_error(load_sender_config, path)
    assert message.startswith(f"{path}: TOML syntax error: ")
    assert "line 4" in message


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "S.toml"
    path.write_bytes(b'[sender]\nschema_dir = "\xff"\n')
    assert config_error(load_sender_config, path) == f"{path}: not a UTF-8 text file"


def test_unknown_receiver_name(tmp_path: Path) -> None:
    path = make_sender(tmp_path)
    config = load_sender_config(path)
    with pytest.raises(ConfigError) as info:
        config.receiver("dc9")
    assert str(info.value) == f"{path}: no [[receiver]] named 'dc9' (known: dc1)"


# ---------------------------------------------------------------- receiver


def test_receiver_loads_and_creates_its_folders_only_on_init(tmp_path: Path) -> None:
    path = make_receiver(tmp_path, folders=False)
    assert config_error(load_receiver_config, path) == (
        f"{path}: [receiver] schema_dir: {tmp_path / 'dc/schema'} does not exist: "
        "create it with `sealsync serve --init` or mkdir"
    )
    (tmp_path / "dc/schema").mkdir(parents=True)
    assert config_error(load_receiver_config, path) == (
        f"{path}: [receiver] data_dirs[0]: {tmp_path / 'dc/data'} does not exist: "
        "create it with `sealsync serve --init` or mkdir"
    )
    assert not (tmp_path / "dc/data").exists()
    config = load_receiver_config(path, init=True)
    assert config == ReceiverConfig(
        listen_host="127.0.0.1",
        listen_port=5555,
        host_key=tmp_path / "keys/host",
        authorized_keys=tmp_path / "keys/authorized_keys",
        schema_dir=tmp_path / "dc/schema",
        data_dirs=[tmp_path / "dc/data"],
        allow=[ipaddress.ip_network("127.0.0.0/8")],
        max_sessions=16,
        idle_timeout=120.0,
        metrics_listen=None,
        log_file=None,
        source=str(path),
    )
    assert load_receiver_config(path) == config  # once made, no init is needed
    assert (tmp_path / "dc/schema").is_dir()
    assert (tmp_path / "dc/data").is_dir()
    assert config.listen == "127.0.0.1:5555"


def test_receiver_default_allow_and_ipv6_listen(tmp_path: Path) -> None:
    doc = receiver_doc()
    del doc["receiver"]["allow"]
    doc["receiver"]["listen"] = "[::1]:6000"
    config = load_receiver_config(make_receiver(tmp_path, doc))
    assert config.allow == [
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
    ]
    assert (config.listen_host, config.listen_port, config.listen) == ("::1", 6000, "[::1]:6000")


def test_receiver_sync_method_defaults_to_syncfs_and_takes_fsync(tmp_path: Path) -> None:
    assert load_receiver_config(make_receiver(tmp_path)).sync_method == "syncfs"
    doc = receiver_doc()
    doc["receiver"]["sync_method"] = "fsync"
    assert load_receiver_config(make_receiver(tmp_path, doc)).sync_method == "fsync"


def test_receiver_from_mapping_accepts_the_table_or_the_document(tmp_path: Path) -> None:
    make_receiver(tmp_path)
    table = receiver_doc()["receiver"]
    from_table = ReceiverConfig.from_mapping(table, tmp_path)
    from_doc = ReceiverConfig.from_mapping({"receiver": table}, tmp_path)
    assert from_table == from_doc
    assert from_table.source == "<mapping>"
    assert from_table.host_key == tmp_path / "keys/host"
    with pytest.raises(ConfigError) as info:
        ReceiverConfig.from_mapping({**table, "alow": []}, tmp_path)
    assert str(info.value).startswith("<mapping>: [receiver] alow: unknown key")


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("127.0.0.1:5555", "127.0.0.1", 5555),
        ("0.0.0.0:1", "0.0.0.0", 1),
        ("localhost:65535", "localhost", 65535),
        ("[::]:22", "::", 22),
        ("[fe80::1%eth0]:22", "fe80::1%eth0", 22),
        ("dc1.example.net.:5555", "dc1.example.net.", 5555),  # fully qualified
        (f"{'x' * 63}.example:1", f"{'x' * 63}.example", 1),  # the longest label
    ],
)
def test_parse_listen(listen: str, host: str, port: int) -> None:
    assert parse_listen(listen) == (host, port)


RECEIVER_ERRORS = [
    (_set("receiver", "listen", "127.0.0.1"), "[receiver] listen: must be host:port"),
    (_set("receiver", "listen", "::1:5555"), "[receiver] listen: write an IPv6 address as"),
    (_set("receiver", "listen", "[::1]5555"), "[receiver] listen: write an IPv6 address as"),
    (_set("receiver", "listen", "[zz]:5555"), "[receiver] listen: 'zz' is not an IPv6 address"),
    (_set("receiver", "listen", "h:99999"), "[receiver] listen: port must be between 1 and 65535"),
    (_set("receiver", "listen", "h:0"), "[receiver] listen: port must be between 1 and 65535"),
    (_set("receiver", "listen", "a..b:5555"), "[receiver] listen: 'a..b' is not a host name"),
    (_set("receiver", "listen", 5555), "[receiver] listen: must be a string, got an integer"),
    (_set("receiver", "allow", ["10.0.0.0/33"]), "[receiver] allow[0]: not a CIDR network"),
    (_set("receiver", "allow", ["10.0.0.1/8"]), "[receiver] allow[0]: not a CIDR network"),
    (_set("receiver", "allow", ["any"]), "[receiver] allow[0]: not a CIDR network"),
    (_set("receiver", "allow", []), "[receiver] allow: must not be empty"),
    (_set("receiver", "max_sessions", True), "[receiver] max_sessions: must be an integer"),
    (_set("receiver", "idle_timeout", -1), "[receiver] idle_timeout: must be greater than 0"),
    (_set("receiver", "host_key", "keys/none"), "[receiver] host_key: "),
    (_set("receiver", "authorized_keys", "keys"), "[receiver] authorized_keys: "),
    (_set("receiver", "data_dirs", ["keys/host"]), "[receiver] data_dirs[0]: "),
    (_set("receiver", "schema_dir", "keys/host/x"), "[receiver] schema_dir: "),
    (_set("receiver", "data_dirs", ["dc/typo"]), "[receiver] data_dirs[0]: "),
    (_set("receiver", "metrics_listen", "9100"), "[receiver] metrics_listen: must be host:port"),
    (
        _set("receiver", "sync_method", "sync"),
        """[receiver] sync_method: must be "syncfs" or "fsync", got 'sync'""",
    ),
    (
        _set("receiver", "sync_method", ["fsync"]),
        '[receiver] sync_method: must be "syncfs" or "fsync", got a list',
    ),
    (_drop("receiver", "listen"), "[receiver] listen: missing required key"),
    (_set("receiver", "port", 5555), "[receiver] port: unknown key"),
    (_set("receiver", "listen_host", "h"), "[receiver] listen_host: unknown key"),
    (lambda d: d.update(sender={}), "[sender]: unknown table or key"),
    (lambda d: d.update(receiver="x"), "[receiver]: must be a table, got a string"),
]


@pytest.mark.parametrize(("change", "expected"), RECEIVER_ERRORS)
def test_receiver_errors_name_the_file_and_key(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    doc = copy.deepcopy(receiver_doc())
    change(doc)
    path = make_receiver(tmp_path, doc)
    message = config_error(load_receiver_config, path)
    assert message.startswith(f"{path}: {expected}"), message


# ---------------------------------------------------------------- loader


def test_loader_loads_without_creating_its_outputs(tmp_path: Path) -> None:
    path = make_loader(tmp_path)
    config = load_loader_config(path)
    assert config == LoaderConfig(
        receiver_data_dirs=[tmp_path / "dc/data"],
        table_path=parse_location(str(tmp_path / "warehouse/points"), tmp_path),
        state_dir=tmp_path / "warehouse/_state",
        master="local[*]",
        source=str(path),
    )
    assert not (tmp_path / "warehouse").exists()
    assert LoaderConfig.from_mapping(loader_doc()["loader"], tmp_path).table_path.path == (
        tmp_path / "warehouse/points"
    )


LOADER_ERRORS = [
    (_set("loader", "receiver_data_dirs", ["dc/none"]), "[loader] receiver_data_dirs[0]: "),
    (_set("loader", "master", ""), "[loader] master: must not be empty"),
    (_set("loader", "master", ["local"]), "[loader] master: must be a string, got a list"),
    (_drop("loader", "table_path"), "[loader] table_path: missing required key"),
    (_set("loader", "tabel_path", "x"), "[loader] tabel_path: unknown key"),
    (_set("loader", "python", ""), "[loader] python: must not be empty"),
    (_set("loader", "spark", "x=1"), "[loader] spark: must be a table, got a string"),
    (
        _set("loader", "spark", {"spark.jars": ["a"]}),
        "[loader] spark.spark.jars: must be a string, number or boolean, got a list",
    ),
]


def test_loader_takes_the_executors_python_and_spark_settings(tmp_path: Path) -> None:
    doc = copy.deepcopy(loader_doc())
    doc["loader"]["python"] = "/opt/venv/bin/python"
    doc["loader"]["spark"] = {
        "spark.executor.memory": "4g",
        "spark.cores.max": 8,
        "spark.speculation": False,
    }
    config = load_loader_config(make_loader(tmp_path, doc))
    assert config.python == "/opt/venv/bin/python"
    assert config.spark == {
        "spark.executor.memory": "4g",
        "spark.cores.max": "8",
        "spark.speculation": "false",
    }
    plain = load_loader_config(make_loader(tmp_path / "plain"))
    assert (plain.python, plain.spark) == (None, {})


@pytest.mark.parametrize(("change", "expected"), LOADER_ERRORS)
def test_loader_errors_name_the_file_and_key(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    doc = copy.deepcopy(loader_doc())
    change(doc)
    path = make_loader(tmp_path, doc)
    message = config_error(load_loader_config, path)
    assert message.startswith(f"{path}: {expected}"), message


# ---------------------------------------------------------------- load_any


def test_load_any_tells_the_roles_apart(tmp_path: Path) -> None:
    assert isinstance(load_any(make_sender(tmp_path)), SenderConfig)
    assert isinstance(load_any(make_receiver(tmp_path)), ReceiverConfig)
    assert isinstance(load_any(make_loader(tmp_path)), LoaderConfig)
    other = write_config(tmp_path / "X.toml", {"recevier": {"listen": "h:1"}})
    assert config_error(load_any, other) == (f"{other}: no [sender], [receiver] or [loader] table")
    # an array [[receiver]] without [sender] is a sender file missing its table
    only = write_config(tmp_path / "Y.toml", {"receiver": [{"host": "h", "port": 1}]})
    assert config_error(load_any, only) == f"{only}: [sender]: missing table"


# ---------------------------------------------------------------- one role's file for another

ROLE_FILES = {"sender": make_sender, "receiver": make_receiver, "loader": make_loader}
ROLE_LOADS: dict[str, Callable[[Path], Any]] = {
    "sender": load_sender_config,
    "receiver": load_receiver_config,
    "loader": load_loader_config,
}
ROLE_COMMANDS = {"sender": "sealsync send", "receiver": "sealsync serve", "loader": "sealsync load"}


@pytest.mark.parametrize(
    ("given", "wanted"),
    [(g, w) for g in ROLE_FILES for w in ROLE_LOADS if g != w],
)
def test_another_roles_file_names_its_role_and_its_command(
    tmp_path: Path, given: str, wanted: str
) -> None:
    path = ROLE_FILES[given](tmp_path)
    # a sender's file has [[receiver]], an array: there the table is not missing but wrong
    wrong = (given, wanted) == ("sender", "receiver")
    problem = "must be a table, got a list" if wrong else "missing table"
    assert config_error(ROLE_LOADS[wanted], path) == (
        f"{path}: [{wanted}]: {problem}: this is a {given} config, "
        f"for '{ROLE_COMMANDS[given]}'; this needs a {wanted} config"
    )


def test_a_file_of_no_role_or_a_typod_table_gets_no_role_hint(tmp_path: Path) -> None:
    typo = write_config(tmp_path / "T.toml", {"sendr": {"x": 1}, "receiver": [{"host": "h"}]})
    assert config_error(load_sender_config, typo) == (
        f"{typo}: [sendr]: unknown table or key (did you mean [sender]?)"
    )
    empty = write_config(tmp_path / "E.toml", {})
    for role, load in ROLE_LOADS.items():
        assert config_error(load, empty) == f"{empty}: [{role}]: missing table"


# ---------------------------------------------------------------- keys declared once
#
# Each key's default, type and range live on its dataclass field (sealsync.config's
# docstring); these tests take them from there and check the loader honours them, so
# a key added to a class is covered here without touching this file.


@dataclass(frozen=True)
class Role:
    cls: type[Any]
    label: str
    doc: Callable[[], dict[str, Any]]
    make: Callable[[Path, dict[str, Any]], Path]
    load: Callable[[Path], Any]
    table: Callable[[dict[str, Any]], dict[str, Any]]


ROLES = {
    "sender": Role(
        SenderConfig, "[sender]", sender_doc, make_sender, load_sender_config, lambda d: d["sender"]
    ),
    "receiver_endpoint": Role(
        ReceiverEndpoint,
        "[[receiver]] #1",
        sender_doc,
        make_sender,
        lambda p: load_sender_config(p).receivers[0],
        lambda d: d["receiver"][0],
    ),
    "receiver": Role(
        ReceiverConfig,
        "[receiver]",
        receiver_doc,
        make_receiver,
        load_receiver_config,
        lambda d: d["receiver"],
    ),
    "loader": Role(
        LoaderConfig, "[loader]", loader_doc, make_loader, load_loader_config, lambda d: d["loader"]
    ),
}
ALL_KEYS = [(name, key) for name, role in ROLES.items() for key in keys_of(role.cls)]


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _ranged(kind: type[Any]) -> list[tuple[str, str, Any]]:
    return [
        (name, key, s.reader)
        for name, role in ROLES.items()
        for key, _, s in settings_of(role.cls)
        if isinstance(s.reader, kind)
    ]


def test_every_field_says_whether_it_is_a_key() -> None:
    for role in ROLES.values():
        for f in dataclasses.fields(role.cls):
            assert isinstance(f.metadata.get(METADATA_KEY), Setting | NotAKey), (role.cls, f.name)
    # one key may fill several fields; it is listed once, under its own name
    assert keys_of(ReceiverConfig)[0] == "listen"
    assert "listen_host" not in keys_of(ReceiverConfig)
    assert "source" not in keys_of(SenderConfig) and "receivers" not in keys_of(SenderConfig)


@pytest.mark.parametrize(("role_name", "key"), ALL_KEYS)
def test_every_declared_key_is_accepted_and_checked(
    tmp_path: Path, role_name: str, key: str
) -> None:
    role = ROLES[role_name]
    doc = copy.deepcopy(role.doc())
    role.table(doc)[key] = [[1]]  # a wrong type for every reader
    path = role.make(tmp_path, doc)
    message = config_error(role.load, path)
    assert message.startswith(f"{path}: {role.label} {key}"), message
    assert "unknown key" not in message
    # and a typo of it is refused, pointing back at it
    doc = copy.deepcopy(role.doc())
    role.table(doc)[key + "x"] = 1
    message = config_error(role.load, role.make(tmp_path, doc))
    assert message == f"{path}: {role.label} {key}x: unknown key (did you mean {key}?)"


@pytest.mark.parametrize(("role_name", "key"), ALL_KEYS)
def test_a_key_without_a_default_is_required(tmp_path: Path, role_name: str, key: str) -> None:
    role = ROLES[role_name]
    declared = [(f, s) for k, f, s in settings_of(role.cls) if k == key]
    doc = copy.deepcopy(role.doc())
    role.table(doc).pop(key, None)
    path = role.make(tmp_path, doc)
    if all(_has_default(f) or s.fallback is not None for f, s in declared):
        role.load(path)
    else:
        assert config_error(role.load, path) == f"{path}: {role.label} {key}: missing required key"


@pytest.mark.parametrize("role_name", ROLES)
def test_absent_keys_take_the_field_default(tmp_path: Path, role_name: str) -> None:
    role = ROLES[role_name]
    doc = copy.deepcopy(role.doc())
    optional = [(k, f) for k, f, _ in settings_of(role.cls) if _has_default(f)]
    for key, _ in optional:
        role.table(doc).pop(key, None)
    bare = role.load(role.make(tmp_path, doc))
    for _, f in optional:
        assert getattr(bare, f.name) == _default(f), f.name
    # written out, a default changes nothing (the defaults a TOML file can spell)
    for key, f in optional:
        if isinstance(_default(f), int | float | str):
            role.table(doc)[key] = _default(f)
    assert role.load(role.make(tmp_path, doc)) == bare


@pytest.mark.parametrize(("role_name", "key", "reader"), _ranged(Integer))
def test_each_integer_range_is_enforced_at_both_ends(
    tmp_path: Path, role_name: str, key: str, reader: Integer
) -> None:
    role = ROLES[role_name]
    for value in (reader.lo, reader.hi):
        doc = copy.deepcopy(role.doc())
        role.table(doc)[key] = value
        assert getattr(role.load(role.make(tmp_path, doc)), key) == value
    for value in (reader.lo - 1, reader.hi + 1):
        doc = copy.deepcopy(role.doc())
        role.table(doc)[key] = value
        path = role.make(tmp_path, doc)
        assert config_error(role.load, path) == (
            f"{path}: {role.label} {key}: must be between {reader.lo} and {reader.hi}, got {value}"
        )


@pytest.mark.parametrize(("role_name", "key", "reader"), _ranged(Number))
def test_each_number_range_is_enforced_at_both_ends(
    tmp_path: Path, role_name: str, key: str, reader: Number
) -> None:
    role = ROLES[role_name]
    doc = copy.deepcopy(role.doc())
    role.table(doc)[key] = reader.hi
    assert getattr(role.load(role.make(tmp_path, doc)), key) == reader.hi
    for value in (reader.lo, reader.hi + 1, math.nan, math.inf):
        doc = copy.deepcopy(role.doc())
        role.table(doc)[key] = value
        path = role.make(tmp_path, doc)
        assert config_error(role.load, path) == (
            f"{path}: {role.label} {key}: must be greater than {reader.lo:g} "
            f"and at most {reader.hi:g}, got {value}"
        )


def test_receiver_init_creates_no_folder_while_any_key_is_bad(tmp_path: Path) -> None:
    doc = receiver_doc()
    doc["receiver"]["idle_timeout"] = 0  # read after the folders
    path = make_receiver(tmp_path, doc, folders=False)
    message = config_error(lambda p: load_receiver_config(p, init=True), path)
    assert message.startswith(f"{path}: [receiver] idle_timeout"), message
    assert not (tmp_path / "dc").exists()
    del doc["receiver"]["idle_timeout"]
    doc["receiver"]["schema_dir"] = "keys/host/x"  # under a file: init cannot make it
    path = make_receiver(tmp_path, doc, folders=False)
    message = config_error(lambda p: load_receiver_config(p, init=True), path)
    assert message.startswith(f"{path}: [receiver] schema_dir: cannot create"), message
