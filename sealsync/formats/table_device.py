"""A table-model device as one string: the table plus its tag tuple, both ways.

IoTDB's table model names a device by its table and the values of its tag columns
(TsFile's ``StringArrayDeviceID``: the table name, then one segment per tag, a NULL tag
a null segment, trailing nulls dropped). The library's own string, ``IDeviceID.toString``,
joins the segments with dots and writes a null as ``null``, so the tags ``('a.b', 'c')``
and ``('a', 'b.c')`` are both ``t.a.b.c``, and a NULL tag reads as the string ``'null'``:
two devices IoTDB keeps apart would become one, their rows merged.

Here a device's name is that string wherever it is unambiguous, and a segment that would
make it ambiguous is backquoted as IoTDB quotes a tree path's node (a backquote inside
doubled): a segment that holds a dot or a backquote, starts with a double quote, is empty,
or is the text ``null``; and a table named ``root``, so that a bare first node ``root``
always means a tree-model device (every tree path starts with it). A NULL tag is the bare
``null``. ``trains.L1.c1`` stays ``trains.L1.c1``; ``('a.b', 'c')`` is ``t.`a.b`.c``, the
string ``'null'`` is ``t.`null```, a NULL tag ``t.null``. The name splits back into its
segments (:func:`segments`) as a tree path splits into nodes (at dots outside
backquotes), so an operator reads and queries it as a path. The loader's Java reader
names devices by the same rules (``io.sealsync.tsfile.TableDevice``);
``tests/table_device_cases.json`` holds both to one table of cases.
"""

from __future__ import annotations

from collections.abc import Sequence

NULL = "null"
"""A NULL tag, as IoTDB's own string writes it."""
TREE_ROOT = "root"
"""The first node of every tree-model path."""


def _needs_quotes(segment: str, first: bool) -> bool:
    return (
        not segment
        or segment == NULL
        or "." in segment
        or "`" in segment
        or segment.startswith('"')
        or (first and segment == TREE_ROOT)
    )


def trimmed(parts: Sequence[str | None]) -> tuple[str | None, ...]:
    """``parts`` without trailing nulls, as ``StringArrayDeviceID`` keeps a device's
    segments (a tag tuple ending in NULLs is the same device without them)."""
    end = len(parts)
    while end > 0 and parts[end - 1] is None:
        end -= 1
    return tuple(parts[:end])


def name(parts: Sequence[str | None]) -> str:
    """The device of a table (``parts[0]``) and its tag values (None for NULL)."""
    out = []
    for i, segment in enumerate(trimmed(parts)):
        if segment is None:
            out.append(NULL)
        elif _needs_quotes(segment, i == 0):
            out.append("`" + segment.replace("`", "``") + "`")
        else:
            out.append(segment)
    return ".".join(out)


def segments(device: str) -> tuple[str | None, ...]:
    """:func:`name`'s segments back: the table, then each tag (None for NULL).

    ValueError for a string :func:`name` does not write (an unclosed backquote, an empty
    node, a quoted node followed by something other than a dot)."""
    out: list[str | None] = []
    i, n = 0, len(device)
    while True:
        if i < n and device[i] == "`":
            j, text = i + 1, []
            while True:
                k = device.find("`", j)
                if k < 0:
                    raise ValueError(f"an unclosed backquote in {device!r}")
                text.append(device[j:k])
                if k + 1 < n and device[k + 1] == "`":
                    text.append("`")  # a doubled backquote is one
                    j = k + 2
                    continue
                break
            out.append("".join(text))
            i = k + 1
            if i < n and device[i] != ".":
                raise ValueError(f"a backquoted node followed by {device[i]!r} in {device!r}")
        else:
            k = device.find(".", i)
            k = n if k < 0 else k
            node = device[i:k]
            if not node or node.startswith('"'):
                raise ValueError(f"an empty or double-quoted node in {device!r}")
            out.append(None if node == NULL else node)
            i = k
        if i >= n:
            return tuple(out)
        i += 1  # the dot
        if i >= n:
            raise ValueError(f"an empty node in {device!r}")


def is_table_device(device: str) -> bool:
    """Whether ``device`` names a table-model device, not a tree-model one (whose
    first node is always a bare ``root``)."""
    return not (device == TREE_ROOT or device.startswith(TREE_ROOT + "."))
