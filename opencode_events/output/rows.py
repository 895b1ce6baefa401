"""Rows out for programs: JSON, JSON Lines, CSV and Markdown (no rich here).

Rows are msgspec Structs or dicts; nested values (dicts, lists) are written as JSON in CSV
and Markdown cells so that every format carries the same information.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

__all__ = [
    "to_builtins",
    "write_json",
    "json_pieces",
    "write_jsonl",
    "write_csv",
    "csv_pieces",
    "write_markdown",
    "report_markdown",
]

_ENCODER = msgspec.json.Encoder()


def to_builtins(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(row) for row in rows]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON writes it, and DuckDB or pandas read it
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return _ENCODER.encode(value).decode()
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_json(document: Any) -> bytes:
    return msgspec.json.format(_ENCODER.encode(document), indent=2) + b"\n"


def json_pieces(
    key: str, items: Iterable[Any], rest: Callable[[], dict[str, Any]]
) -> Iterator[bytes]:
    """``write_json({key: [*items], **rest()})`` in pieces, an item at a time (``rest`` is
    asked once the items are done), the same bytes: a long report is written as it is made."""
    head = _ENCODER.encode(key)
    any_item = False
    for item in items:
        item_json = msgspec.json.format(_ENCODER.encode(item), indent=2)
        yield (b",\n" if any_item else b"{\n  " + head + b": [\n") + _indented(item_json, 4, True)
        any_item = True
    yield b"\n  ]" if any_item else b"{\n  " + head + b": []"
    for name, value in rest().items():
        value_json = msgspec.json.format(_ENCODER.encode(value), indent=2)
        yield b",\n  " + _ENCODER.encode(name) + b": " + _indented(value_json, 2, False)
    yield b"\n}\n"


def _indented(data: bytes, by: int, first: bool) -> bytes:
    pad = b" " * by
    return (pad if first else b"") + data.replace(b"\n", b"\n" + pad)


def write_jsonl(rows: Sequence[Any]) -> bytes:
    return b"".join(_ENCODER.encode(row) + b"\n" for row in rows)


def write_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> bytes:
    return b"".join(csv_pieces(rows, columns))


def csv_pieces(
    rows: Iterable[dict[str, Any]], columns: Sequence[str], *, every: int = 1024
) -> Iterator[bytes]:
    """``write_csv`` in pieces of ``every`` rows, the header first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for n, row in enumerate(rows, 1):
        writer.writerow([_cell(row.get(c)) for c in columns])
        if n % every == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def write_markdown(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], numeric: Sequence[str] = ()
) -> bytes:
    def escape(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(escape(_cell(row.get(c))) for c in columns) + " |")
    return ("\n".join(lines) + "\n").encode()


def report_markdown(report: Any) -> bytes:
    """A report's Markdown: its ``markdown_table()``, then its notes in italics."""
    columns, rows, numeric = report.markdown_table()
    table = write_markdown(rows, columns, numeric=numeric)
    return table + "".join(f"\n_Note: {note}_\n" for note in report.notes).encode()
