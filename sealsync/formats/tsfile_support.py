"""Which TsFile chunks the loader reads exactly: one table, for the receiver and the loader.

Why one table: a file the receiver accepts and the loader then cannot read is a file
reported "loaded" that never reaches the table. So the receiver's check
(:func:`sealsync.formats.tsfile.verify`, over every chunk header its metadata walk reads)
and the loader's Java reader (``TsFilePoints``, over every chunk it decodes, given this
table by :func:`java_table`) ask the same question of each chunk and give the same answer.

What the table holds, decided by the format's source, not by a reader's release: for
each format version, the (data type, encoding) pairs whose values the loader's reader
(Apache TsFile's Java library, ``spark_loader.jvm.TSFILE_VERSION``) decodes to exactly what
the writer's own release reads back. Their decoder (``Decoder.getDecoderByType``) is the
same class, codec for codec, in every writer's release from IoTDB 0.12's ``tsfile`` module
through ``org.apache.tsfile`` 1.x and 2.x (docs/formats.md lists the sources compared).
The exception is RLBE on FLOAT and DOUBLE: up to TsFile 2.0.3 (IoTDB 1.2 to 2.0.3) its
encoder wrote floating-point differences of the values and its decoder added them back,
a rounding step (1.1 read back as 1.1000000000000227, and every value after a NaN as NaN);
from TsFile 2.1.0 (IoTDB 2.0.5 on) it writes the values' bit patterns through the integer
codec, and the decoder reads only that. A format-4 chunk does not say which of the two
wrote it (the same encoding code, no writer release in the file), and a format-3 chunk was
written by the rounding codec, which the reader no longer has: no reader decodes either
exactly, so such a file is refused. A file whose metadata says it is encrypted is refused
too: the key is the edge's, not here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# TSDataType codes (``org.apache.tsfile.enums.TSDataType``).
BOOLEAN, INT32, INT64, FLOAT, DOUBLE, TEXT, VECTOR = 0, 1, 2, 3, 4, 5, 6
TIMESTAMP, DATE, BLOB, STRING = 8, 9, 10, 11
TYPE_NAMES = {
    BOOLEAN: "BOOLEAN",
    INT32: "INT32",
    INT64: "INT64",
    FLOAT: "FLOAT",
    DOUBLE: "DOUBLE",
    TEXT: "TEXT",
    VECTOR: "VECTOR",
    TIMESTAMP: "TIMESTAMP",
    DATE: "DATE",
    BLOB: "BLOB",
    STRING: "STRING",
}

# TSEncoding codes (``org.apache.tsfile.file.metadata.enums.TSEncoding``).
PLAIN, DICTIONARY, RLE, DIFF, TS_2DIFF, BITMAP, GORILLA_V1 = 0, 1, 2, 3, 4, 5, 6
REGULAR, GORILLA, ZIGZAG, FREQ, CHIMP, SPRINTZ, RLBE, CAMEL = 7, 8, 9, 10, 11, 12, 13, 14
ENCODING_NAMES = {
    PLAIN: "PLAIN",
    DICTIONARY: "DICTIONARY",
    RLE: "RLE",
    DIFF: "DIFF",
    TS_2DIFF: "TS_2DIFF",
    BITMAP: "BITMAP",
    GORILLA_V1: "GORILLA_V1",
    REGULAR: "REGULAR",
    GORILLA: "GORILLA",
    ZIGZAG: "ZIGZAG",
    FREQ: "FREQ",
    CHIMP: "CHIMP",
    SPRINTZ: "SPRINTZ",
    RLBE: "RLBE",
    CAMEL: "CAMEL",
}

_INTEGERS = frozenset({PLAIN, RLE, TS_2DIFF, REGULAR, GORILLA, ZIGZAG, CHIMP, SPRINTZ, RLBE})
_FLOATS = frozenset({PLAIN, RLE, TS_2DIFF, GORILLA_V1, GORILLA, CHIMP, SPRINTZ})
_BINARIES = frozenset({PLAIN, DICTIONARY})
# Format 4 is written by the Java library and by the C++ writer of the ``tsfile`` package,
# whose SPRINTZ is another codec than the Java one the reader has (its values read back
# as other numbers) and whose CAMEL does not restore NaN and infinities; a file does not
# say which of the two wrote it.
_INTEGERS_4 = _INTEGERS - {SPRINTZ}
_FLOATS_4 = _FLOATS - {SPRINTZ}

#: Per format version and data type, the encodings read exactly (see the module docstring).
#: VECTOR is an aligned device's time column: decoded as INT64 by its chunk's encoding.
READ_EXACTLY: Mapping[int, Mapping[int, frozenset[int]]] = {
    3: {
        BOOLEAN: frozenset({PLAIN, RLE}),
        INT32: _INTEGERS,
        INT64: _INTEGERS,
        TIMESTAMP: _INTEGERS,
        DATE: _INTEGERS,
        VECTOR: _INTEGERS,
        FLOAT: _FLOATS,
        DOUBLE: _FLOATS,
        TEXT: _BINARIES,
        STRING: _BINARIES,
        BLOB: _BINARIES,
    },
    4: {
        BOOLEAN: frozenset({PLAIN, RLE}),
        INT32: _INTEGERS_4,
        INT64: _INTEGERS_4,
        TIMESTAMP: _INTEGERS_4,
        DATE: _INTEGERS_4,
        VECTOR: _INTEGERS_4,
        FLOAT: _FLOATS_4,
        DOUBLE: _FLOATS_4,
        TEXT: _BINARIES,
        STRING: _BINARIES,
        BLOB: _BINARIES,
    },
}

_RLBE_FLOAT = (
    "RLBE on {type} is not read: TsFile up to 2.0.3 (IoTDB 1.2 to 2.0.3, every format-3 "
    "writer) rounds the values it stores, 2.1.0 on stores them exactly, the reader here "
    "decodes only the latter and a format-4 file does not say which wrote it; choose "
    "another encoding for the series (GORILLA, CHIMP) on the edge"
)
_TWO_WRITERS = (
    "{encoding} in a format-4 file is not read: the C++ writer of the tsfile package "
    "encodes it {how} than the Java codec the reader has, and the file does not say which "
    "writer wrote it; choose another encoding for the series (GORILLA, CHIMP, TS_2DIFF)"
)
#: Why a (version, data type, encoding) outside READ_EXACTLY is not read, where more can
#: be said than that the reader has no decoder for it.
REASONS: Mapping[tuple[int, int, int], str] = {
    **{(v, FLOAT, RLBE): _RLBE_FLOAT.format(type="FLOAT") for v in (3, 4)},
    **{(v, DOUBLE, RLBE): _RLBE_FLOAT.format(type="DOUBLE") for v in (3, 4)},
    **{
        (4, t, SPRINTZ): _TWO_WRITERS.format(encoding="SPRINTZ", how="otherwise")
        for t in (INT32, INT64, TIMESTAMP, DATE, VECTOR, FLOAT, DOUBLE)
    },
    (4, DOUBLE, CAMEL): _TWO_WRITERS.format(
        encoding="CAMEL", how="losing NaN and infinities, otherwise"
    ),
}

#: The ``TsFileMetadata`` property that says a format-4 file's pages are encrypted
#: (``TsFileIOWriter``: "0" for none, "1" or "2" with a key of the writer's).
ENCRYPT_LEVEL = "encryptLevel"


_ENCRYPTED = (
    "encrypted (encryptLevel {level}): its pages are readable only with the writer's key; "
    "write the data unencrypted to send it"
)


def _name(table: Mapping[int, str], code: int) -> str:
    return table.get(code, f"code {code}")


def chunk_refusal(version: int, data_type: int, encoding: int, series: str) -> str | None:
    """Why the loader cannot read a chunk of ``series`` exactly, or None if it can."""
    if encoding in READ_EXACTLY.get(version, {}).get(data_type, frozenset()):
        return None
    kind = _name(TYPE_NAMES, data_type)
    how = _name(ENCODING_NAMES, encoding)
    reason = REASONS.get((version, data_type, encoding))
    if reason is None:
        reason = f"the loader's reader decodes no {kind} encoded {how} in a format-{version} file"
    return f"series {series!r} ({kind}, {how}): {reason}"


def file_refusal(
    version: int, properties: Mapping[str, str | None], codecs: Iterable[tuple[int, int, str]]
) -> str | None:
    """Why the loader cannot read a file exactly, or None: its encryption (from the file
    metadata's properties), then the first of its chunks' (data type, encoding, series)
    triples that :func:`chunk_refusal` refuses."""
    level = properties.get(ENCRYPT_LEVEL)
    if level not in (None, "", "0"):
        return _ENCRYPTED.replace("{level}", level)
    for data_type, encoding, series in sorted(codecs):
        refused = chunk_refusal(version, data_type, encoding, series)
        if refused is not None:
            return refused
    return None


def java_table() -> str:
    """The table for the loader's Java reader (``io.sealsync.tsfile.Rules``), one line per
    (version, data type, encoding) code triple the format defines: ``v t e``, and where
    the chunk is refused, a tab and the reason with ``{series}`` for the series' quoted
    name; first a line ``encrypted`` and a tab and the encryption reason with ``{level}``.
    A triple not listed (a code the format does not define) is refused by the Java side."""
    lines = ["encrypted\t" + _ENCRYPTED]
    for version in sorted(READ_EXACTLY):
        for data_type in sorted(TYPE_NAMES):
            for encoding in sorted(ENCODING_NAMES):
                refused = chunk_refusal(version, data_type, encoding, _SERIES)
                line = f"{version} {data_type} {encoding}"
                if refused is not None:
                    line += "\t" + refused.replace(repr(_SERIES), "{series}")
                lines.append(line)
    return "\n".join(lines)


_SERIES = "SERIES"
