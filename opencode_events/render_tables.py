"""Tables for people (``sessions``, ``usage``, ``context``), drawn with rich.

With ``render``, this is the only code that imports rich; it does so when a table is
drawn, never at import time, so the JSONL paths never load it. Numbers are right-aligned
and thousands-separated; costs are dollars with enough digits to see small runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["Column", "draw_table", "money", "count"]


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Any], Any]
    numeric: bool = False
    style: str | None = None
    max_width: int | None = None


def count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int | float) and value == value else "-"


def money(value: Any) -> str:
    """Dollars: cents for big sums, four significant places for small ones."""
    if not isinstance(value, int | float):
        return "-"
    if value == 0:
        return "$0.00"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}" if abs(value) >= 0.0001 else f"${value:.2g}"


def draw_table(
    columns: Sequence[Column],
    rows: Sequence[Any],
    *,
    out: TextIO,
    title: str | None = None,
    total: Any = None,
    caption: str | None = None,
    width: int | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=title,
        caption=caption,
        show_footer=total is not None,
        header_style="bold",
        expand=False,
    )
    for column in columns:
        footer = "" if total is None else str(column.value(total))
        table.add_column(
            column.header,
            justify="right" if column.numeric else "left",
            style=column.style,
            footer=footer,
            max_width=column.max_width,
            overflow="fold",
        )
    for row in rows:
        table.add_row(*(str(column.value(row)) for column in columns))
    Console(file=out, width=width, soft_wrap=False).print(table)


def sessions_table(summaries: Sequence[Any], *, out: TextIO, width: int | None = None) -> None:
    from .timeutil import format_time

    columns = [
        Column("id", lambda s: s.id, style="cyan", max_width=32),
        Column("updated", lambda s: format_time(s.time_updated)),
        Column("title", lambda s: s.title or "", max_width=40),
        Column("agent", lambda s: s.agent or ""),
        Column("model", lambda s: s.model or ""),
        Column("directory", lambda s: s.directory or "", max_width=30),
        Column("turns", lambda s: count(s.turns), numeric=True),
        Column("infer.", lambda s: count(s.inferences), numeric=True),
        Column(
            "tools (failed)",
            lambda s: (
                f"{s.tool_calls:,} ({s.tool_failures:,})"
                if s.tool_failures
                else f"{s.tool_calls:,}"
            ),
            numeric=True,
        ),
        Column("input", lambda s: count(s.input_tokens), numeric=True),
        Column("output", lambda s: count(s.output_tokens), numeric=True),
        Column("reasoning", lambda s: count(s.reasoning_tokens), numeric=True),
        Column("cache read", lambda s: count(s.cache_read_tokens), numeric=True),
        Column("cache write", lambda s: count(s.cache_write_tokens), numeric=True),
        Column("cost (+subagents)", lambda s: money(s.total_cost), numeric=True),
        Column("children", lambda s: count(len(s.children)), numeric=True),
        Column("in flight", lambda s: "●" if s.in_flight else ""),
    ]
    draw_table(columns, summaries, out=out, width=width, caption=f"{len(summaries)} session(s)")
