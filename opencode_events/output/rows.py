"""Rows out for programs: JSON, JSON Lines, CSV and Markdown (no rich here).

Rows are msgspec Structs or dicts; nested values (dicts, lists) are written as JSON in CSV
and Markdown cells so that every format carries the same information.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = [
    "to_builtins",
    "write_json",
    "write_jsonl",
    "write_csv",
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


def write_jsonl(rows: Sequence[Any]) -> bytes:
    return b"".join(_ENCODER.encode(row) + b"\n" for row in rows)


def write_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buffer.getvalue().encode()


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
