"""The edges' TTL rules: IoTDB's patterns and precedence, durations, the config's
one-line errors, and when a partition must be rewritten (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealsync.config import LoaderConfig
from sealsync.errors import ConfigError
from sealsync.ttl import Rule, TtlRules, database_of, parse_duration, parse_pattern, ttl_path
from spark_loader.expiry import TTL_TAG, Expiry

HOUR = 3_600_000


def _rules(**_: object) -> TtlRules:
    return TtlRules.of(
        [
            Rule("root.**", 7 * 24 * HOUR),
            Rule("root.a.**", HOUR),
            Rule("root.a.b.**", 2 * HOUR),
            Rule("root.a.b.c", None),  # INF: the device's own rule wins
            Rule("root.x.d1", 5 * HOUR),
        ]
    )


def test_precedence_is_iotdbs_closest_rule() -> None:
    rules = _rules()
    assert rules.ttl_ms("root.a.b.c") is None  # its own path, INF, over root.a.b.**
    assert rules.ttl_ms("root.a.b.c.d") == 2 * HOUR  # root.a.b.** beats root.a.**
    assert rules.ttl_ms("root.a.b") == HOUR  # root.a.b.** needs a node below root.a.b
    assert rules.ttl_ms("root.a.bc") == HOUR  # a node, not a string prefix
    assert rules.ttl_ms("root.x.d1") == 5 * HOUR
    assert rules.ttl_ms("root.x.d10") == 7 * 24 * HOUR
    assert rules.ttl_ms("root.y") == 7 * 24 * HOUR
    assert TtlRules.of([Rule("root.a.**", HOUR)]).ttl_ms("root.b.d") is None
    assert not TtlRules.of([Rule("root.a.**", None)])  # only INF: nothing expires
    assert not TtlRules()


def test_a_table_s_rule_wins_over_its_database_s() -> None:
    """IoTDB 2.x's table model: a table's TTL property, else its database's."""
    rules = TtlRules.of(
        [
            Rule("db9", 2 * HOUR),
            Rule("db9.t9", HOUR),
            Rule("db9.keep", None),  # TTL='INF': its database's does not apply
            Rule("root.**", 5 * HOUR),  # the tree model's, apart
        ]
    )
    assert rules.ttl_ms(ttl_path("t9.north", "db9")) == HOUR
    assert rules.ttl_ms(ttl_path("t9", "db9")) == HOUR  # a table without tags
    assert rules.ttl_ms(ttl_path("t90.north", "db9")) == 2 * HOUR  # a name, not a prefix
    assert rules.ttl_ms(ttl_path("keep.north", "db9")) is None
    assert rules.ttl_ms(ttl_path("t9.north", "db90")) is None
    assert rules.ttl_ms(ttl_path("root.db9.t9", None)) == 5 * HOUR
    assert rules.ttl_ms(ttl_path("t9.north", None)) is None  # no database: not db9's


@pytest.mark.parametrize(
    ("name", "database"),
    [
        ("sequence/db9/3/2880/1-1-0-0.tsfile", "db9"),
        ("unsequence/db_9/3/2880/1-1-0-0.tsfile", "db_9"),
        ("sequence/root.sg1/0/0/1-1-0-0.tsfile", None),  # a tree-model storage group
        ("sequence/root.db.g1/3/2880/1-1-0-0.tsfile", None),
        ("sequence/1-1-0-0.tsfile", None),
        ("other/db9/3/2880/1-1-0-0.tsfile", None),
    ],
)
def test_a_file_s_database_is_the_folder_iotdb_keeps_it_in(name: str, database: str | None) -> None:
    assert database_of(name) == database


@pytest.mark.parametrize("text", ["db9", "db9.t9", "db_9.`a.b`"])
def test_table_model_keys(text: str) -> None:
    assert parse_pattern(text) == text


@pytest.mark.parametrize("text", ["db9.", "db-9", "db9.t*", "db9.**", "*", "db.9.*"])
def test_table_model_keys_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pattern(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (3_600_000, HOUR),
        ("3600000", HOUR),
        ("3600000ms", HOUR),
        ("1h", HOUR),
        ("60m", HOUR),
        ("3600s", HOUR),
        ("2d", 48 * HOUR),
        ("INF", None),
        ("inf", None),
    ],
)
def test_durations(text: object, ms: int | None) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["1 hour", "1.5h", "-1h", "", "h", True, 1.5, 0, "0s"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text", ["root.**", "root.db.**", "root.db", "root.db.g1.d1"])
def test_patterns_iotdb_accepts(text: str) -> None:
    assert parse_pattern(text) == text


@pytest.mark.parametrize(
    "text", ["root.*.db", "root.**.db.*", "root.db.*", "db.**", "root", "root..d", "root.d*.**"]
)
def test_patterns_iotdb_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pattern(text)


def _config(tmp_path: Path, ttl: object, **more: object) -> LoaderConfig:
    data = {
        "receiver_data_dirs": [str(tmp_path)],
        "table_path": str(tmp_path / "table"),
        "state_dir": str(tmp_path / "state"),
        "ttl": ttl,
        **more,
    }
    return LoaderConfig.from_mapping({"loader": data}, tmp_path, "L.toml")


def test_config_reads_quoted_and_dotted_patterns(tmp_path: Path) -> None:
    # ``root.w3t.d1 = "INF"`` unquoted is TOML's nested tables: joined back
    config = _config(
        tmp_path,
        {"root.w3t.**": "1h", "root": {"w3t": {"d1": "INF"}}},
        timestamp_precision="us",
    )
    assert config.ttl.ttl_ms("root.w3t.d2") == HOUR
    assert config.ttl.ttl_ms("root.w3t.d1") is None
    assert config.timestamp_precision == "us"
    assert not _config(tmp_path, {}).ttl
    tables = _config(tmp_path, {"db9": "2h", "db9.t9": "1h"})  # quoted keys in TOML
    assert tables.ttl.ttl_ms("db9.t9.north") == HOUR
    assert tables.ttl.ttl_ms("db9.t1.north") == 2 * HOUR


@pytest.mark.parametrize(
    ("ttl", "says"),
    [
        ({"root.w3t.*": "1h"}, 'L.toml: [loader] ttl."root.w3t.*": '),
        ({"root.w3t.**": "1 hour"}, "not a duration: '1 hour'"),
        ({"root.w3t.**": 0}, "must be positive"),
        ({"root.a.b": 1, "root": {"a": {"b": 2}}}, 'ttl."root.a.b": set twice'),
        ("1h", "must be a table"),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, ttl: object, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, ttl)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_precision(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="timestamp_precision"):
        _config(tmp_path, {}, timestamp_precision="s")


def test_now_in_the_databases_precision() -> None:
    rules = TtlRules.of([Rule("root.a.**", HOUR)])
    assert Expiry.at(rules, "ms", 1000.5).now == 1_000_500
    assert Expiry.at(rules, "us", 1000.5).now == 1_000_500_000
    assert Expiry.at(rules, "ns", 1000.5).now == 1_000_500_000_000
    # the TTL is milliseconds whatever the precision
    assert Expiry.at(rules, "us", 7200.0).cutoff(HOUR) == 3600 * 10**6


def _tags(expiry: Expiry, now: int | None = None) -> dict[str, str]:
    doc = {"rules": expiry.fingerprint, "now": expiry.now if now is None else now}
    return {TTL_TAG: json.dumps(doc)}


def test_due_when_rows_may_have_expired_since() -> None:
    rules = TtlRules.of([Rule("root.a.**", HOUR), Rule("root.a.keep", None)])
    now = 10 * HOUR
    expiry = Expiry(rules, "ms", now)
    old = now - HOUR // 2  # written half an hour ago
    span = ("root.a.d1", "root.a.d9", now - 2 * HOUR, now)
    # never filtered: due if it holds a point before the cutoff
    assert expiry.due({}, span)
    assert not expiry.due({}, ("root.a.d1", "root.a.d9", now - HOUR, now))
    # filtered half an hour ago: due if a point may lie in [old cutoff, new cutoff)
    assert expiry.due(_tags(expiry, old), ("root.a.d1", "root.a.d9", old - HOUR, now))
    assert not expiry.due(_tags(expiry, old), ("root.a.d1", "root.a.d9", now - HOUR, now))
    assert not expiry.due(_tags(expiry, old), ("root.a.d1", "root.a.d9", 0, old - 2 * HOUR))
    # filtered at this very now: never twice in a run
    assert not expiry.due(_tags(expiry), span)
    # devices no rule can match: nothing expires
    assert not expiry.due({}, ("root.b.d1", "root.b.d9", 0, now))
    assert not expiry.due({}, ("root.a.keep", "root.a.keep", 0, now))  # INF overrides
    assert not expiry.due({}, None)  # no points
    # other rules (a TTL changed): rewritten; rules all removed: rows come back
    other = Expiry(TtlRules.of([Rule("root.a.**", 2 * HOUR)]), "ms", now)
    assert other.due(_tags(expiry), span)
    none = Expiry(TtlRules(), "ms", now)
    assert none.due(_tags(expiry), span)
    assert not none.due({}, span)
    assert expiry.due({TTL_TAG: "not json"}, span)
    assert expiry.tags() == _tags(expiry)
    assert none.tags() == {}


def test_a_table_model_partition_is_due_by_its_database_s_rules() -> None:
    now = 10 * HOUR
    expiry = Expiry(TtlRules.of([Rule("db9.t9", HOUR)]), "ms", now)
    span = ("t9.north", "t9.south", now - 2 * HOUR, now)
    assert expiry.due({}, span, "db9")
    assert not expiry.due({}, span, "db8")  # another database's t9
    assert not expiry.due({}, span)  # a tree-model file
    assert expiry.due({}, ("t9", "t9", 0, now), "db9")  # one device, no tags
    assert not expiry.due({}, ("t90.a", "t90.b", 0, now), "db9")


def test_check_says_which_rules_apply(tmp_path: Path) -> None:
    from spark_loader.check import check_loader

    (tmp_path / "sequence").mkdir()
    config = _config(tmp_path, {"root.w3t.**": "1h", "root.w3t.d1": "INF"})
    lines = [str(f) for f in check_loader(config)]
    assert any(
        "ttl:" in line and "root.w3t.d1 INF, root.w3t.** 3600000 ms" in line for line in lines
    )
    assert not any("ttl:" in str(f) for f in check_loader(_config(tmp_path, {})))
