"""Which table column holds a series (spark_loader/columns.py), without Spark: the names
a run gives, the assignment it keeps, and the bound on what one sender adds."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_loader.columns import (
    META_KIND,
    META_MEASUREMENT,
    Assigner,
    ColumnLimit,
    escape,
    keys_of_field,
    kind_of,
    kind_of_arrow,
    measurements_of,
)

LONG, DOUBLE, TEXT = '"long"', '"double"', '"string"'


def test_a_measurement_is_its_own_column_name_until_it_cannot_be() -> None:
    a = Assigner({}, {})

    got = a.assign([("s1", LONG), ("S1", DOUBLE), ("sender", TEXT), ("a b=c;{x}", LONG)], "x")

    assert got == {
        ("s1", "long"): "s1",
        ("S1", "double"): "S1__double",  # s1 taken in another case
        ("sender", "string"): "sender__string",  # a provenance column's name
        ("a b=c;{x}", "long"): "a%20b%3Dc%3B%7Bx%7D",
    }
    assert a.keys["S1__double"] == ["S1", "double"]
    assert json.loads(a.columns["sender__string"]) == "string"


def test_a_measurement_of_two_kinds_has_two_columns_and_widths_share_one() -> None:
    a = Assigner({}, {})

    got = a.assign([("s1", '"integer"'), ("s1", LONG), ("s1", '"float"')], "x")

    assert got == {("s1", "long"): "s1", ("s1", "double"): "s1__double"}
    assert a.assign([("s1", '"short"')], "y") == {("s1", "long"): "s1"}  # kept, not made again


def test_escaped_and_qualified_names_never_collide() -> None:
    a = Assigner({}, {})

    got = a.assign(
        [("a b", LONG), ("a%20b", LONG), ("a%20b__long", LONG), ("", LONG), ("time", LONG)], "x"
    )

    assert len(set(got.values())) == 5
    assert got[("a b", "long")] == "a%20b"
    assert got[("a%20b", "long")] == "a%20b__long"  # its own name, escaped first, is taken
    assert got[("a%20b__long", "long")] == "a%20b__long__long"
    assert got[("", "long")] == "%00" and got[("time", "long")] == "time__long"
    assert escape("50%,") == "50%25%2C" and escape("50%") == "50%"
    got = a.assign([("x", LONG), ("X__long", LONG), ("X", LONG)], "x")
    assert got[("X", "long")] == "X__long_2"


def test_an_earlier_tables_columns_keep_their_names_and_types() -> None:
    """A column without a recorded key holds the measurement of its name, as its type."""
    columns = {"s1": DOUBLE, "x": TEXT}
    a = Assigner(columns, {})

    got = a.assign([("s1", '"float"'), ("s1", LONG), ("X", TEXT)], "x")

    assert got == {("s1", "double"): "s1", ("s1", "long"): "s1__long", ("X", "string"): "X__string"}
    assert columns["s1"] == DOUBLE  # unchanged: the table's column stays what it was


def test_a_file_past_its_senders_bound_adds_nothing_and_others_go_on() -> None:
    columns: dict[str, str] = {}
    a = Assigner(columns, {}, limit=3)
    a.assign([("m0", DOUBLE)], "hostile")

    with pytest.raises(ColumnLimit, match="max_new_columns"):
        a.assign([(f"m{i}", DOUBLE) for i in range(1, 4)], "hostile")

    assert set(columns) == {"m0"}  # none of the waiting file's columns
    assert a.assign([(f"m{i}", DOUBLE) for i in range(1, 3)], "hostile")  # fits: 3 in all
    assert a.assign([(f"h{i}", DOUBLE) for i in range(3)], "honest")  # a bound of its own
    assert a.assign([(f"m{i}", DOUBLE) for i in range(3)], "hostile")  # none new: no limit
    with pytest.raises(ColumnLimit):
        a.assign([("m9", DOUBLE)], "hostile")


@pytest.mark.parametrize(
    ("arrow", "kind"),
    [
        (pa.int8(), "long"),
        (pa.int32(), "long"),
        (pa.float32(), "double"),
        (pa.large_string(), "string"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.binary(), "binary"),
        (pa.bool_(), "boolean"),
        (pa.date32(), "date"),
        (pa.timestamp("ns"), kind_of('"timestamp_ntz"')),
        (pa.timestamp("ms", tz="UTC"), "timestamp"),
    ],
)
def test_an_arrow_columns_kind_is_its_spark_types(arrow: pa.DataType, kind: str) -> None:
    """The Arrow readers find a column's values by kind: the kind the schema pass gave."""
    from pyspark.sql.pandas.types import from_arrow_type

    value = arrow.value_type if pa.types.is_dictionary(arrow) else arrow
    assert kind_of_arrow(arrow) == kind == kind_of(from_arrow_type(value).json())


def test_a_tables_fields_name_the_measurements_they_hold() -> None:
    def field(name: str, typ: str, meta: dict[str, str] | None = None) -> dict[str, object]:
        return {"name": name, "type": typ, "nullable": True, "metadata": meta or {}}

    fields = [
        field("time", "long"),
        field("device", "string"),
        field("s1", "double"),  # an earlier table's column: its own name
        field("s1__long", "long", {META_MEASUREMENT: "s1", META_KIND: "long"}),
        field("sender__string", "string", {META_MEASUREMENT: "sender", META_KIND: "string"}),
        field("sender", "string"),
    ]

    assert measurements_of(fields) == {"s1": "s1", "s1__long": "s1", "sender__string": "sender"}
    assert keys_of_field(fields[2]) == ("s1", "double")
    assert keys_of_field(fields[3]) == ("s1", "long")
