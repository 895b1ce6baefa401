"""Rows out for programs: JSON, JSON Lines, CSV and Markdown (no rich here).

Rows are msgspec Structs or dicts; nested values (dicts, lists) are written as JSON in CSV
and Markdown cells so that every format carries the same information.

CSV follows OWASP's advice on CSV injection: a text cell that starts with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return (a session title ``=HYPERLINK(…)``) would be a
formula to a spreadsheet, so it is written after a single quote (``'=HYPERLINK(…)``);
``raw=True`` (``--csv-raw``) writes cells as they are. Numbers are never quoted so.

What goes to a terminal in any of these formats goes through ``TerminalText``: control
characters (ESC, BEL, an OSC 52 clipboard write…) are shown as their Unicode pictures
(``visible``), never obeyed. In a pipe or a file the bytes are as written.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

import msgspec

from ..core.text import BIDI_FORMATTING

__all__ = [
    "to_builtins",
    "write_json",
    "json_pieces",
    "counted",
    "json_list_pieces",
    "write_jsonl",
    "jsonl_pieces",
    "ListForm",
    "JSON_LIST",
    "JSON_LINES",
    "write_csv",
    "csv_pieces",
    "write_markdown",
    "markdown_pieces",
    "report_markdown",
    "report_markdown_pieces",
    "sessions_markdown",
    "visible",
    "TerminalText",
]

# Control characters in what OpenCode recorded (a model's text, a command's output, a title)
# would drive the terminal: ESC starts escape sequences that can clear the screen or set
# the window title. Each becomes one visible character (its Unicode control picture, or
# U+FFFD for the C1 controls), so that a rich Text keeps its style spans; newline and tab stay.
_VISIBLE = {code: 0x2400 + code for code in range(32) if code not in (9, 10)}
_VISIBLE[0x7F] = 0x2421
_VISIBLE.update({code: 0xFFFD for code in range(0x80, 0xA0)})
_VISIBLE.update({code: 0xFFFD for code in BIDI_FORMATTING})  # as the C1 controls are


def visible(text: str) -> str:
    """``text`` with its control characters shown instead of obeyed."""
    return text.translate(_VISIBLE)


class TerminalText:
    """A binary output for a terminal: what is written is shown, control characters as
    their pictures (``visible``). JSON escapes the C0 controls itself, but not DEL or the
    C1 controls (U+009B is a CSI to many terminals); CSV and Markdown escape none."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, data: bytes) -> int:
        text = bytes(data).decode("utf-8", "replace")
        self.out.write(visible(text).encode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return True


_ENCODER = msgspec.json.Encoder()


def to_builtins(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(row) for row in rows]


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any, raw: bool) -> str:
    text = _cell(value)
    if not raw and type(value) is str and text.startswith(_FORMULA_STARTS):
        return "'" + text  # OWASP: a spreadsheet shows the text, and runs no formula
    return text


def _decimal(value: float) -> str:
    """A float as a spreadsheet reads it: positional notation (0.000059, not 5.9e-05), the
    shortest digits that give the float back (``repr``'s), no exponent."""
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    text = format(Decimal(repr(value)), "f")
    return text if "." in text else text + ".0"  # a float stays one: 0.0, as JSON writes it


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON writes it, and DuckDB or pandas read it
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return _ENCODER.encode(value).decode()
    if isinstance(value, float):
        return _decimal(value)
    return str(value)


def write_json(document: Any) -> bytes:
    return msgspec.json.format(_ENCODER.encode(document), indent=2) + b"\n"


LIST_BATCH = 1000  # items encoded at a time by the writers in pieces below


def json_pieces(
    key: str, items: Iterable[Any], rest: Callable[[], dict[str, Any]], batch: int = LIST_BATCH
) -> Iterator[bytes]:
    """``write_json({key: [*items], **rest()})`` in pieces of ``batch`` items, taken as they
    come (``rest`` is asked once the items are done), the same bytes: a long report is
    written as it is made."""
    head = _ENCODER.encode(key)
    any_item = False
    for chunk in batched(items, batch):
        indented = msgspec.json.format(_ENCODER.encode(chunk), indent=2)
        # "[\n  {…},\n  {…}\n]": the items between the brackets, two spaces deeper here
        inner = _indented(indented[2:-2], 2, True)
        yield (b",\n" if any_item else b"{\n  " + head + b": [\n") + inner
        any_item = True
    yield b"\n  ]" if any_item else b"{\n  " + head + b": []"
    for name, value in rest().items():
        value_json = msgspec.json.format(_ENCODER.encode(value), indent=2)
        yield b",\n  " + _ENCODER.encode(name) + b": " + _indented(value_json, 2, False)
    yield b"\n}\n"


def json_list_pieces(items: Iterable[Any], batch: int = LIST_BATCH) -> Iterator[bytes]:
    """``write_json(list(items))`` in pieces of ``batch`` items, the same bytes: a long list
    (100,000 sessions: 110 MB) is never held compact and indented at once, nor whole;
    ``items`` may be made as they are written."""
    started = False
    for chunk in batched(items, batch):
        yield (b",\n" if started else b"[\n") + _indented_items(chunk)
        started = True
    yield b"\n]\n" if started else write_json([])


def _indented_items(chunk: list[Any]) -> bytes:
    """The items of ``chunk`` as an indented list holds them, between its brackets:
    "  {…},\n  {…}"."""
    return msgspec.json.format(_ENCODER.encode(chunk), indent=2)[2:-2]


def jsonl_pieces(rows: Iterable[Any], batch: int = LIST_BATCH) -> Iterator[bytes]:
    """``write_jsonl(rows)`` in pieces of ``batch`` rows, the same bytes; ``rows`` may be
    made as they are written."""
    for chunk in batched(rows, batch):
        yield write_jsonl(chunk)


class ListForm:
    """How a list is written item by item: ``head``, the items with ``between`` between
    them, then ``tail``; ``empty`` when there is no item. ``JSON_LIST`` (``write_json``'s
    indented list) and ``JSON_LINES`` (``write_jsonl``'s).

    ``pieces`` writes them as ``json_list_pieces`` and ``jsonl_pieces`` do, and says where
    each item lies in its piece; ``item`` writes one alone, as it lies there. So a report
    brought up to date can copy the bytes of the items that did not change and write only
    the others (``reports.sessions``)::

        for piece, spans in JSON_LIST.pieces(summaries):  # spans: [start, end, …] or None
            out.write(piece)
    """

    def __init__(self, head: bytes, between: bytes, tail: bytes, empty: bytes) -> None:
        self.head, self.between, self.tail, self.empty = head, between, tail, empty

    def item(self, value: Any) -> bytes:
        """One item's bytes, as it lies among the others."""
        raise NotImplementedError

    def pieces(
        self, items: Iterable[Any], batch: int = LIST_BATCH
    ) -> Iterator[tuple[bytes, list[int] | None]]:
        """The list's bytes in pieces of ``batch`` items (the last piece: ``tail`` or
        ``empty``), each with where its items lie in it: ``[start, end, …]``, an item's
        bytes ``piece[start:end]``; None where they could not be told apart (they are
        then not copied later)."""
        started = False
        for chunk in batched(items, batch):
            body, spans = self._chunk(chunk)
            prefix = self.between if started else self.head
            if spans is not None:
                spans = [at + len(prefix) for at in spans]
            yield prefix + body, spans
            started = True
        yield (self.tail if started else self.empty), []

    def _chunk(self, chunk: list[Any]) -> tuple[bytes, list[int] | None]:
        raise NotImplementedError


class _JsonList(ListForm):
    _BETWEEN = b"\n  },\n  {"  # an item ends, the next starts: only between them, indented so

    def item(self, value: Any) -> bytes:
        return _indented_items([value])

    def _chunk(self, chunk: list[Any]) -> tuple[bytes, list[int] | None]:
        body = _indented_items(chunk)
        # A newline in JSON's text is always escaped: a raw one, then two spaces and a
        # brace, is the indentation of an item's own braces, nested values lying deeper.
        spans, start, find = [0], 0, body.find
        while (at := find(self._BETWEEN, start)) >= 0:
            spans += (at + 4, at + 6)  # "\n  }" ends one item; ",\n" lies between
            start = at + 6
        spans.append(len(body))
        return body, spans if len(spans) == 2 * len(chunk) else None


class _JsonLines(ListForm):
    def item(self, value: Any) -> bytes:
        return _ENCODER.encode(value) + b"\n"

    def _chunk(self, chunk: list[Any]) -> tuple[bytes, list[int] | None]:
        lines = [_ENCODER.encode(row) + b"\n" for row in chunk]
        spans, at = [], 0
        for line in lines:
            spans += (at, at + len(line))
            at += len(line)
        return b"".join(lines), spans


JSON_LIST: ListForm = _JsonList(b"[\n", b",\n", b"\n]\n", b"[]\n")
JSON_LINES: ListForm = _JsonLines(b"", b"", b"", b"")


def counted(n: int, noun: str) -> str:
    """``n`` and its noun, plural but for one: "1 session", "1,200 spans"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size`` (the last shorter), taken as they come."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _indented(data: bytes, by: int, first: bool) -> bytes:
    pad = b" " * by
    return (pad if first else b"") + data.replace(b"\n", b"\n" + pad)


def write_jsonl(rows: Sequence[Any]) -> bytes:
    return b"".join(_ENCODER.encode(row) + b"\n" for row in rows)


def write_csv(
    rows: Iterable[dict[str, Any]], columns: Sequence[str], *, raw: bool = False
) -> bytes:
    return b"".join(csv_pieces(rows, columns, raw=raw))


def csv_pieces(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    *,
    every: int = 1024,
    raw: bool = False,
) -> Iterator[bytes]:
    """``write_csv`` in pieces of ``every`` rows, the header first; text cells that a
    spreadsheet would take for a formula start with ``'`` unless ``raw``. A cell holding a
    comma, a quote or a line break (CR too) is quoted (RFC 4180; Python's csv module leaves
    a lone CR bare when lines end in LF, and a reader then splits the row there)."""
    lines = [_csv_line(columns)]
    for n, row in enumerate(rows, 1):
        lines.append(_csv_line([_csv_cell(row.get(c), raw) for c in columns]))
        if n % every == 0:
            yield "".join(lines).encode()
            lines = []
    yield "".join(lines).encode()


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def _csv_line(cells: Sequence[str]) -> str:
    return (
        ",".join(
            '"' + cell.replace('"', '""') + '"' if _NEEDS_QUOTES.search(cell) else cell
            for cell in cells
        )
        + "\n"
    )


def write_markdown(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    numeric: Sequence[str] = (),
    headers: dict[str, str] | None = None,
) -> bytes:
    """A Markdown table of ``rows`` under ``columns`` (named as ``headers`` says), the
    ``numeric`` ones aligned right."""
    return b"".join(markdown_pieces(rows, columns, numeric, headers))


def markdown_pieces(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[str],
    numeric: Sequence[str] = (),
    headers: dict[str, str] | None = None,
    every: int = LIST_BATCH,
) -> Iterator[bytes]:
    """``write_markdown``'s bytes, ``every`` rows at a time: the rows are never held."""

    def escape(text: str) -> str:
        # A backslash escaped first: a title's own "\|" would end the cell at its "|".
        # Markdown ends a line, and so the table's row, at LF, CR and CRLF alike.
        text = text.replace("\\", "\\\\").replace("|", "\\|")
        return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")

    named = headers or {}
    lines = [
        "| " + " | ".join(named.get(c, c) for c in columns) + " |\n",
        "|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|\n",
    ]
    for n, row in enumerate(rows, 1):
        lines.append("| " + " | ".join(escape(_cell(row.get(c))) for c in columns) + " |\n")
        if n % every == 0:
            yield "".join(lines).encode()
            lines = []
    yield "".join(lines).encode()


# ``sessions --format markdown``: the table's columns under the table's names, for a PR.
_SESSION_MARKDOWN = (
    ("id", "id"),
    ("updated", "time_updated"),
    ("title", "title"),
    ("agent", "agent"),
    ("model", "model"),
    ("turns", "turns"),
    ("steps", "inferences"),
    ("tools", "tool_calls"),
    ("failed", "tool_failures"),
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("reasoning", "reasoning_tokens"),
    ("cache read", "cache_read_tokens"),
    ("cache write", "cache_write_tokens"),
    ("cost", "cost"),
    ("subagents", "subagent_sessions"),
    ("subagents' cost", "subagent_cost"),
)


def sessions_markdown(summaries: Sequence[Any], *, fold: bool = True) -> bytes:
    """Sessions as a Markdown table that reads like ``sessions``' table: its headers, times
    in ISO 8601 UTC, turns (prompts) and steps (model calls); with ``fold`` (as the report
    was made) each figure but turns with its subagents' (the headers say ``+sub``)."""
    from datetime import UTC, datetime

    def when(ms: Any) -> Any:
        if type(ms) is not int:
            return ms
        try:
            return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (ValueError, OverflowError, OSError):
            return ms

    rows = []
    for summary in to_builtins(summaries):
        row = {header: summary.get(field) for header, field in _SESSION_MARKDOWN}
        row["updated"] = when(row["updated"])
        rows.append(row)
    headers = [header for header, _ in _SESSION_MARKDOWN]
    numeric = headers[5:]
    # Folded figures say so in their header, as the table's caption does.
    names = {h: f"{h} +sub" for h in _FOLDED_HEADERS} if fold else {}
    return write_markdown(rows, headers, numeric=numeric, headers=names)


_FOLDED_HEADERS = (
    "steps",
    "tools",
    "failed",
    "input",
    "output",
    "reasoning",
    "cache read",
    "cache write",
    "cost",
)


# ``usage --format markdown``: the columns under the names the table gives them (a turn is a
# user prompt and its replies; a step, one model call: a stream's rows are steps).
_USAGE_HEADERS = {
    "session_id": "session",
    "message_id": "message",
    "duration_ms": "duration (ms)",
    "inferences": "steps",
    "tool_calls": "tools",
    "input_tokens": "input",
    "output_tokens": "output",
    "reasoning_tokens": "reasoning",
    "cache_read_tokens": "cache read",
    "cache_write_tokens": "cache write",
    "total_tokens": "total",
    "subagent_sessions": "subagents",
    "subagent_inferences": "subagents' steps",
    "subagent_tool_calls": "subagents' tools",
    "subagent_cost": "subagents' cost",
    "subagent_tokens": "subagents' tokens",
    "in_flight": "in flight",
}


def report_markdown(report: Any) -> bytes:
    """A report's Markdown: its ``markdown_table()`` under the table's names, then its notes
    in italics."""
    return b"".join(report_markdown_pieces(report))


def report_markdown_pieces(report: Any) -> Iterator[bytes]:
    """``report_markdown``'s bytes, a thousand rows at a time (a report whose rows come as
    they are made is never held: ``reports.usage._RowsAsMade.markdown_table``)."""
    columns, rows, numeric = report.markdown_table()
    headers = _USAGE_HEADERS if report.stored else {**_USAGE_HEADERS, "turn": "step"}
    yield from markdown_pieces(rows, columns, numeric=numeric, headers=headers)
    yield "".join(f"\n_Note: {note}_\n" for note in report.notes).encode()
