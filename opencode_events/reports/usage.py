"""Usage accounting: per-turn (and per-day, per-model …) tokens and cost, OpenCode's figures.

Two inputs, one row type:

- a stream (``opencode run --format json``, or our own normalized JSONL): one row per model
  turn, i.e. per ``step_finish``, ``open`` false; a step that started and never finished
  (an interrupted run) is an ``open`` row with no figures. A row's ``started`` is its
  ``step_start`` record's time where the stream has one (a raw run stream), else its
  ``usage`` event's (when the step finished);
- the store: one row per user turn (seed 002: a user message opens a turn, each assistant
  message is an inference extending it), or grouped ``--by`` step, session, model, agent or
  day. Subagent sessions fold into the turn whose ``task`` call spawned them.

What must hold, and how it is kept: sums are of OpenCode's own per-step / per-message
figures, never re-priced; a part or message is counted once (part ids are deduplicated by
the normalizer; a forked session's copied history, recognisable as messages older than
their session that have an original elsewhere, is left out of cross-session reports); a
session's rows add up to its session row (plus its subagents' when folded).

Every row names its session (``session_id``) whenever it is known, one session or several,
so that reports appended together can be told apart; only the table for people leaves out a
column that says the same on every row. Times are epoch ms, except in ``markdown()`` (for
people), which writes them in ISO 8601 UTC.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import heapq
import itertools
import math
import re
import sqlite3
import struct
from array import array
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime, tzinfo
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, NamedTuple

import msgspec
from msgspec import Struct

try:  # the hash alone: hashlib loads OpenSSL first, 3 ms of every report
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

from ..core.activity import stale_after_ms
from ..core.figures import INT64, model_label, read_figures, summed_cost
from ..core.timeutil import zone_key
from ..core.views import (
    PART_DECODER,
    MessageFigures,
    Tokens,
    UsageMessage,
    decode_leniently,
    decode_repaired,
    decode_repairing,
)
from ..errors import GroupingError, InputError
from ..store import fastscan
from ..store.ranges import in_forked_child, share_ranges, share_slices, worker_connection
from ..store.rows import ancestry, descendants, offers_fast_scans, sessions_changed
from ..store.sqlite import SQLITE_ERRORS, Store, sqlite_reason
from ..workers import worker_count
from .cache import UNENCODABLE, LedgerEntries, ReportCache, Spill, cache_digest
from .runs import RowSpool, SortedRuns

# What decoding a row's data can raise: not JSON, nested too deep, or NULL (a damaged row,
# which a TypeError reports).
_UNREADABLE = (msgspec.DecodeError, RecursionError, TypeError)

# The stream and per-turn paths import the mapping (and with it the normalizer and the
# shell lexer) when they run: the grouped store reports never need it.
if TYPE_CHECKING:
    from ..events import Usage

__all__ = [
    "UsageRow",
    "UsageReport",
    "TOKEN_FIELDS",
    "stream_usage",
    "store_usage",
    "stored_usage",
    "stored_usage_last",
    "write_stored_usage",
    "every_session_memo",
    "BY_STREAM",
    "BY_STORE",
    "forked_copy_ids",
]

TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)
_ALWAYS = frozenset({*TOKEN_FIELDS, "cost"})
# From this many sessions on, one scan of the whole message table beats per-session lookups.
WHOLE_TABLE_SESSIONS = 200
BY_STREAM = ("turn", "step", "session", "model", "agent", "day", "week", "month")
BY_STORE = ("turn", "step", "session", "model", "agent", "day", "week", "month", "project")
# Groupings that, with no session chosen, cover every session (as ccusage's reports do);
# turn and step, one session's story, cover the last one.
EVERY_SESSION_BY = ("session", "model", "agent", "day", "week", "month", "project")
# Groupings made of a session's days: by its days, the weeks and months they fall in, the
# session itself, or its project (the directory of the session it folds into).
_BY_DAYS = ("day", "session", "week", "month", "project")
_BY_DATES = ("day", "week", "month")  # a report's rows are dates alone
_COLLAPSIBLE = (*_BY_DATES, "model", "agent")  # groupings whose rows name no session


class UsageRow(Struct, kw_only=True, omit_defaults=True, gc=False):
    """One row of a usage table; which label fields are set depends on ``--by``."""

    # gc=False: a row holds numbers and strings alone (no cycle), and a report of every
    # step holds millions of rows, which the collector would walk again and again.

    turn: int | None = None
    session_id: str | None = None
    message_id: str | None = None
    day: str | None = None
    week: str | None = None  # ISO 8601 week, 2026-W48
    month: str | None = None  # 2026-11
    project: str | None = None  # the session's directory
    model: str | None = None
    agent: str | None = None
    started: int | None = None  # epoch ms
    duration_ms: int | None = None
    prompt: str | None = None
    reason: str | None = None
    inferences: int | None = None
    tool_calls: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    # The part of a folded row's figures that came from subagent sessions (docs/usage.md).
    subagent_sessions: int | None = None
    subagent_inferences: int | None = None
    subagent_tool_calls: int | None = None
    subagent_tokens: int | None = None
    subagent_cost: float | None = None
    in_flight: bool | None = None
    stale: bool | None = None  # was in flight, but nothing written for a while (reports.stale)
    open: bool | None = None
    # Of the figures above, what a pending undo (/undo) undid: counted, as OpenCode counts
    # them until the next prompt deletes them (``undone``); set on the total and on
    # ``--by session`` and ``--by step`` rows of the store, when there is any.
    undone_inferences: int | None = None
    undone_cost: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Labels that have a value, and every token field and the cost, zero or not."""
        always = _ALWAYS
        return {
            name: getattr(self, name)
            for name in self.__struct_fields__
            if name in always or getattr(self, name) is not None
        }

    def add(self, other: UsageRow | Usage) -> None:
        for name in TOKEN_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cost += other.cost


# Each report's columns, in order, whatever its rows hold: a CSV of one day lines up with the
# next day's (a label a row has no value for is an empty cell). JSON rows leave such labels out.
_LABELS: dict[tuple[bool, str], tuple[str, ...]] = {  # (from the store, --by) → labels
    (True, "turn"): (
        "session_id",
        "turn",
        "started",
        "duration_ms",
        "prompt",
        "reason",
        "inferences",
        "tool_calls",
    ),
    (True, "step"): (
        "session_id",
        "message_id",
        "model",
        "agent",
        "started",
        "duration_ms",
        "reason",
    ),
    (True, "session"): ("session_id", "started", "inferences"),
    (True, "model"): ("model", "inferences"),
    (True, "agent"): ("agent", "inferences"),
    (True, "day"): ("day", "inferences"),
    (True, "week"): ("week", "inferences"),
    (True, "month"): ("month", "inferences"),
    (True, "project"): ("project", "inferences"),
    (False, "turn"): ("session_id", "turn", "started", "reason"),
    (False, "step"): ("session_id", "turn", "started", "reason"),
    (False, "session"): ("session_id", "inferences"),
    (False, "day"): ("day", "inferences"),
    (False, "week"): ("week", "inferences"),
    (False, "month"): ("month", "inferences"),
    (False, "model"): ("model", "inferences"),
    (False, "agent"): ("agent", "inferences"),
}
# A folded row's share from subagents, in the names ``sessions`` gives it.
_SUBAGENT_FIELDS = (
    "subagent_sessions",
    "subagent_inferences",
    "subagent_tool_calls",
    "subagent_tokens",
    "subagent_cost",
)
# A grouped row's share (no tool column): ``--by session`` and ``--by project``.
_SHARE_FIELDS = tuple(name for name in _SUBAGENT_FIELDS if name != "subagent_tool_calls")
_SHARED = ("session", "project")  # the groupings whose rows say their subagents' share
_FLAGS: dict[tuple[bool, str], tuple[str, ...]] = {
    (True, "turn"): (*_SUBAGENT_FIELDS, "in_flight", "stale"),
    (True, "step"): ("in_flight", "stale"),
    (True, "session"): _SHARE_FIELDS,
    (True, "project"): _SHARE_FIELDS,
    (False, "turn"): ("open",),
    (False, "step"): ("open",),
}


def report_columns(by: str, *, stored: bool) -> list[str]:
    """The columns of a ``--by`` report from the store (``stored``) or from a stream."""
    key = (stored, by)
    return [*_LABELS[key], *TOKEN_FIELDS, "cost", *_FLAGS.get(key, ())]


class UsageReport(Struct, kw_only=True):
    by: str
    rows: list[UsageRow]
    total: UsageRow
    notes: list[str] = []
    stored: bool = False  # read from the store (else from a stream): which columns it has

    def __post_init__(self) -> None:
        # A count column of the report is in its total even when no row gave one (an empty
        # report), so that the total keeps one shape.
        for name in ("inferences", "tool_calls"):
            if getattr(self.total, name) is None and name in self.columns:
                setattr(self.total, name, 0)

    @property
    def columns(self) -> list[str]:
        """Every column of the report, in order (``report_columns``)."""
        return report_columns(self.by, stored=self.stored)

    def document(self) -> dict[str, Any]:
        """The JSON document: ``{"rows": [...], "total": {...}}`` (plus ``notes``)."""
        doc: dict[str, Any] = {
            "rows": [row.as_dict() for row in self.rows],
            "total": self.total.as_dict(),
        }
        if self.notes:
            doc["notes"] = list(self.notes)
        return doc

    def markdown_table(self) -> tuple[list[str], list[dict[str, Any]], list[str]]:
        """(columns, rows, numeric columns) of the Markdown table, for people: the labels no
        row has a value for left out (token fields and cost are in every row), ``started`` in
        ISO 8601 UTC, a **total** row last. ``output.rows.report_markdown`` writes it, with
        the notes after it."""
        rows = [row.as_dict() for row in self.rows]
        named: set[str] = set()
        for row in rows:
            named.update(row)
        columns = _markdown_columns(self.columns, named)
        for row in rows:
            _for_markdown(row)
        total = {**self.total.as_dict(), columns[0]: "**total**"}
        return columns, [*rows, total], [c for c in columns if c in _NUMERIC]


def _markdown_columns(columns: list[str], named: set[str]) -> list[str]:
    """A Markdown table's columns: those of ``columns`` some row names (``named``), and
    the token fields and cost, which every row has."""
    shown = [c for c in columns if c in _ALWAYS or c in named]
    if shown[0] in TOKEN_FIELDS:  # no label at all: an empty report
        shown.insert(0, columns[0])
    return shown


def _for_markdown(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (``as_dict``'s) as a Markdown table shows it: ``started`` in ISO 8601 UTC."""
    if "started" in row:
        row["started"] = _iso(row["started"])
    return row


# The columns a Markdown table aligns right: counts, durations, tokens and costs.
_NUMERIC = frozenset(
    (*TOKEN_FIELDS, "cost", "turn", "inferences", "tool_calls", "duration_ms", *_SUBAGENT_FIELDS)
)


def _iso(ms: Any) -> Any:
    """Epoch ms as ISO 8601 UTC to the millisecond (``2026-11-29T15:41:18.256Z``); a value
    that names no time (out of ``datetime``'s range) as it is."""
    if type(ms) is not int:
        return ms
    try:
        moment = datetime.fromtimestamp(ms // 1000, UTC).replace(tzinfo=None)
    except (ValueError, OverflowError, OSError):
        return ms
    return f"{moment.isoformat()}.{ms % 1000:03d}Z"


def _figures_in(row: UsageRow) -> int:
    """How many of OpenCode's costs a row's cost adds up: its own inferences' (a subagent's
    share, folded in: at least one more)."""
    inferences = 1 if row.inferences is None else row.inferences
    return inferences - (row.subagent_inferences or 0) + (row.subagent_cost is not None)


_SUBAGENT_COUNTS = _SUBAGENT_FIELDS[:-1]  # all but the cost


class _Totaller:
    """The total row of rows given one at a time (``add``), as written (``total``)."""

    def __init__(self) -> None:
        self.row = UsageRow()
        self.figures = self.shares = 0

    def add(self, row: UsageRow) -> None:
        total = self.row
        total.add(row)
        self.figures += _figures_in(row)
        self.shares += row.subagent_cost is not None
        if row.inferences is not None:
            total.inferences = (total.inferences or 0) + row.inferences
        if row.tool_calls is not None:
            total.tool_calls = (total.tool_calls or 0) + row.tool_calls
        if row.subagent_cost is not None:
            total.subagent_cost = (total.subagent_cost or 0.0) + row.subagent_cost
            for name in _SUBAGENT_COUNTS:
                value = getattr(row, name)
                if value is not None:
                    setattr(total, name, (getattr(total, name) or 0) + value)

    def total(self) -> UsageRow:
        total = msgspec.structs.replace(self.row)
        total.cost = summed_cost(total.cost, self.figures)
        if total.subagent_cost is not None:  # one row's (already written as it should be)
            total.subagent_cost = summed_cost(total.subagent_cost, self.shares)
        return total


def _total(rows: Iterable[UsageRow]) -> UsageRow:
    totaller = _Totaller()
    for row in rows:
        totaller.add(row)
    return totaller.total()


def _zone(tz: tzinfo | None) -> str:
    """``tz`` in a cache's request: what its dates depend on (local time's included)."""
    return cache_digest(zone_key(tz))


def _day(ms: Any, tz: tzinfo | None) -> str | None:
    """The local date of epoch ms; None when it is not a number or names no date (out of
    ``datetime``'s range, infinite, NaN)."""
    if not isinstance(ms, int | float):
        return None
    try:  # naive local time when tz is None: the same date, without a second conversion
        day = datetime.fromtimestamp(ms / 1000, tz).date()
    except (ValueError, OverflowError, OSError):
        return None
    return day.isoformat() if day.year >= 1000 else day.strftime("%Y-%m-%d")  # 999, not 0999


# --------------------------------------------------------------------------- streams


class _NormalizedLine(Struct):
    """A line of our own JSONL output: only what usage needs."""

    kind: Any = None
    seq: Any = None
    session_id: Any = None
    time: Any = None
    turn: Any = None
    reason: Any = None
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    type: Any = None  # an unknown event's record type
    child_session_id: Any = None  # an orchestration event's subagent session
    reverted: Any = None  # made from what a pending /undo undid (import, export)


# Records that carry usage, by the type an ``unknown`` event names when one of them could
# not be read: a step (run stream, store), a message (export), a message update (server).
_FIGURE_TYPES = frozenset({"step_finish", "step-finish", "message", "message.updated"})


_NAMED = 3  # parent sessions a note names at most


class _Unread:
    """What a stream's usage could not count: lines that are not JSON (``warning`` events),
    records of usage whose shape cannot be read (``unknown`` events of those types), export
    documents that are not whole."""

    def __init__(self) -> None:
        self.lines = self.steps = self.documents = 0
        self.empty: list[str] = []  # inputs that held nothing at all
        # A run stream holds only the parent's steps: the subagent sessions its `task`
        # calls started (child → the session that started it), and the sessions whose
        # steps the input holds, to tell which subagents' costs it cannot see.
        self.spawned: dict[str, Any] = {}
        self.stepped: set[Any] = set()
        self.undone: list[float] = []  # the costs of steps marked ``reverted``

    def stepped_in(self, sessions: Any, *, more_inputs: bool) -> None:
        """The sessions an input of a raw stream had steps of (its normalizer's): all of them
        while a later input may spawn them; at the last, only the subagents spawned (what
        ``notes`` asks), so a stream of many sessions does not hold them twice."""
        if more_inputs:
            self.stepped.update(sessions)
        else:
            self.stepped.update(child for child in self.spawned if child in sessions)

    def step(self, event: Any) -> None:
        """A step counted: one a pending /undo undid is noted (``reports.undone``)."""
        if event.reverted is True:
            self.undone.append(event.cost if type(event.cost) is float else 0.0)

    def spawn(self, child: Any, parent: Any) -> None:
        if isinstance(child, str) and child:
            self.spawned.setdefault(child, parent)

    def unknown(self, record_type: Any) -> None:
        if isinstance(record_type, str) and record_type in _FIGURE_TYPES:
            self.steps += 1

    def notes(self) -> list[str]:
        notes = []
        for name in self.empty:  # e.g. `usage` run from cron, where stdin is no terminal
            notes.append(
                f"{'stdin' if name == '-' else name} was empty; for stored sessions give "
                "--last, --session, --since or --all"
            )
        if self.documents:
            notes.append(
                f"{self.documents} export document(s) could not be read (not whole JSON: cut "
                "short?); nothing in them counted"
            )
        if self.lines:
            notes.append(
                f"{self.lines} line(s) of the input could not be read (`normalize` shows them "
                "as warnings); not counted"
            )
        if self.steps:
            notes.append(
                f"{self.steps} record(s) of usage (steps, messages) that could not be read "
                "(`normalize` shows them as unknown); not counted"
            )
        if self.undone:
            steps = len(self.undone)
            notes.append(
                f"{steps} step{'s' if steps != 1 else ''} marked reverted (a pending /undo), "
                f"${summed_cost(sum(self.undone), steps):.6g}, counted as OpenCode counts "
                "them until the next prompt deletes them"
            )
        unseen = [child for child in self.spawned if child not in self.stepped]
        if unseen:
            parents = [p for p in dict.fromkeys(self.spawned[c] for c in unseen) if p]
            where = " ".join(f"--session {p}" for p in parents[:_NAMED]) or "--session ID"
            command = f"`opencode-events usage {where}`"
            if len(parents) > _NAMED:  # a note stays a line: a long log may spawn thousands
                command = (
                    f"`opencode-events usage {where} …` ({len(parents)} sessions started "
                    "them; `--since` or `--all` reads them all)"
                )
            several = len(unseen) > 1
            notes.append(
                f"{len(unseen)} subagent session{'s' if several else ''} not in this stream; "
                f"{'their' if several else 'its'} cost is in the store: {command}"
            )
        return notes


_NORMALIZED = msgspec.json.Decoder(_NormalizedLine)


def _normalized(line: bytes) -> bool | None:
    """Whether a line is one of our own events (True), an OpenCode record (False), or says
    nothing (not a JSON object: None). A normalized event is the object with a ``kind``."""
    from ..sources.stream import BOM

    try:
        first = _NORMALIZED.decode(line.removeprefix(BOM))
    except _UNREADABLE:
        return None
    return isinstance(first.kind, str)


class _Collect:
    """A writer keeping the ``usage`` events of a normalized input, and the record types of
    its ``unknown`` events."""

    def __init__(self, unread: _Unread) -> None:
        self.found: list[Any] = []
        self.unread = unread

    def write(self, events: Any) -> None:
        from ..events import Orchestration, Unknown, Usage

        for event in events:
            if isinstance(event, Usage):
                self.found.append(event)
                self.unread.stepped.add(event.session_id)
            elif isinstance(event, Orchestration):
                self.unread.spawn(event.child_session_id, event.session_id)
            elif isinstance(event, Unknown):
                self.unread.unknown(event.type)

    def end_batch(self) -> None:
        pass

    def flush(self) -> None:
        pass


class _Step(NamedTuple):
    """A step of a stream: its ``usage`` event (None: it started and never finished), and
    when it started and in which session, where the stream says (else None)."""

    usage: Any
    started: Any = None
    session: str | None = None


class _StepStartLine(Struct):
    type: Any = None
    timestamp: Any = None


_STEP_START = msgspec.json.Decoder(_StepStartLine)


def _step_start(line: bytes, session: str | None) -> tuple[int | None, str | None] | None:
    """(time, session) of a run stream's ``step_start`` line, or None when it is not one.
    Only the raw stream has a step's start: ``normalize`` writes no event for it, and an
    export or a server's events report usage per message, when it completed."""
    from ..sources.stream import BOM

    try:
        record = _STEP_START.decode(line.removeprefix(BOM))
    except _UNREADABLE:
        return None
    if record.type != "step_start":
        return None
    return (record.timestamp if type(record.timestamp) is int else None), session


def _usage_events(
    name: str, stream: BinaryIO, unread: _Unread, *, more_inputs: bool = False
) -> Iterator[_Step]:
    """The steps of a raw stream, normalized JSONL, a captured server event stream or an
    export document (the last, with no usage, when a step was left open); what cannot be
    read is counted in ``unread`` (``more_inputs``: others follow, which may spawn the
    sessions this one has steps of)."""
    from ..core.normalizer import Normalizer
    from ..events import Orchestration, Unknown, Usage, Warning
    from ..pipeline.normalize import (
        Prepended,
        detect_format,
        normalize_streams,
        read_head,
        refuse_database,
    )
    from ..sources.stream import OverlongLine, StreamReader, line_batches

    head = read_head(stream)
    if not head.strip():  # read_head read it all: no line holds anything
        unread.empty.append(name)
        return
    refuse_database(head, name, "usage")
    kind = detect_format(head)
    if kind in ("sse", "export"):  # mapped as `normalize` maps them
        collect = _Collect(unread)
        normalizer = normalize_streams([("-", Prepended(head, stream))], collect, metrics=False)
        if kind == "export":  # one document: a warning means it was not read at all
            unread.documents += normalizer.counts.get(Warning, 0)
        else:
            unread.lines += normalizer.counts.get(Warning, 0)
        yield from (_Step(event) for event in collect.found)
        if normalizer.step_open:
            yield _Step(None, session=normalizer.session_id)
        return
    normalized: bool | None = None  # the first JSON object decides
    warned = 0  # the warnings of the raw reading before that decision, counted already
    normalizer = Normalizer()
    reader = StreamReader(normalizer)
    line_no = 0
    start: tuple[int | None, str | None] | None = None  # the open step's (time, session)
    for batch in line_batches(stream, first=head):
        if type(batch) is OverlongLine:  # longer than the limit: not read (a warning there)
            line_no += 1
            unread.lines += 1
            continue
        for line in batch:
            line_no += 1
            if normalized is None:
                if not line.strip():
                    continue
                normalized = _normalized(line)
                if normalized is None:  # an unreadable line before any event: kept for
                    reader.feed(line_no, line)  # the raw reading, which warns and goes on
                    unread.lines += 1
                    continue
                if not normalized:  # a raw stream: its warnings from here on are counted
                    warned = normalizer.counts.get(Warning, 0)
            if normalized:
                try:
                    event = _NORMALIZED.decode(line)
                except _UNREADABLE:
                    if line.strip():
                        unread.lines += 1
                    continue
                if event.kind == "usage":
                    unread.stepped.add(event.session_id)
                    yield _Step(event)
                elif event.kind == "orchestration":
                    unread.spawn(event.child_session_id, event.session_id)
                elif event.kind == "warning":  # a line the normalize run could not read
                    unread.lines += 1
                elif event.kind == "unknown":
                    unread.unknown(event.type)
            else:
                events = reader.feed(line_no, line)
                if normalizer.step_open and b'"step_start"' in line:  # a step opened
                    start = _step_start(line, normalizer.session_id) or start
                for event in events:
                    if isinstance(event, Usage):  # its session is among stepped_sessions
                        started = None
                        if start is not None and start[1] == event.session_id:
                            started = start[0]
                        yield _Step(event, started)
                    elif isinstance(event, Orchestration):
                        unread.spawn(event.child_session_id, event.session_id)
                    elif isinstance(event, Unknown):
                        unread.unknown(event.type)
                if not normalizer.step_open:  # finished (or its finish seen before)
                    start = None
    if normalized is False:
        unread.stepped_in(normalizer.stepped_sessions(), more_inputs=more_inputs)
        unread.lines += normalizer.counts.get(Warning, 0) - warned
        if normalizer.step_open:
            time, session = start if start is not None else (None, normalizer.session_id)
            yield _Step(None, time, session)


def stream_usage(
    inputs: Sequence[tuple[str, BinaryIO]], *, by: str = "turn", tz: tzinfo | None = None
) -> UsageReport:
    """Usage rows of ``opencode run --format json`` output or of normalized JSONL."""
    usage = StreamUsage(inputs, by=by, tz=tz)
    rows = list(usage.rows())
    return usage.report(rows)


class StreamUsage:
    """``stream_usage`` as it reads: ``rows()`` yields each row once it is known (``--by``
    turn and step: as each step finishes, so memory stays flat over any length of stream;
    session and day: every group at the end, one row per session or day held till then),
    and ``report(rows)`` or ``total``/``notes`` once they are all read."""

    def __init__(
        self, inputs: Sequence[tuple[str, BinaryIO]], *, by: str = "turn", tz: tzinfo | None = None
    ) -> None:
        if by not in BY_STREAM:
            raise GroupingError(
                f"grouping by {by} needs the store: a stream's steps group by "
                f"{', '.join(BY_STREAM)}"
            )
        self.inputs, self.by, self.tz = inputs, by, tz
        self.columns = report_columns(by, stored=False)
        self.notes: list[str] = []
        self._totaller = _Totaller()
        self._undone: list[float] = []  # costs of the steps marked ``reverted``

    @property
    def total(self) -> UsageRow:
        """The total row (after ``rows()`` is exhausted), with the shape the report has."""
        return self.report([]).total

    def report(self, rows: list[UsageRow]) -> UsageReport:
        total = self._totaller.total()
        if self._undone:
            total.undone_inferences = len(self._undone)
            total.undone_cost = summed_cost(sum(self._undone), len(self._undone))
        return UsageReport(by=self.by, rows=rows, total=total, notes=self.notes)

    def rows(self) -> Iterator[UsageRow]:
        by, tz = self.by, self.tz
        last_turn: int | None = None  # of the last row (an open row numbers on from it)
        seen = False
        groups: dict[str, UsageRow] = {}
        first_time: dict[str, int] = {}  # group → its first step's time
        unread = _Unread()
        last = len(self.inputs) - 1
        for index, (name, stream) in enumerate(self.inputs):
            for step in _usage_events(name, stream, unread, more_inputs=index < last):
                event = step.usage
                if event is None:  # a step that started and never finished
                    if by in ("turn", "step"):
                        turn = (last_turn or 0) + 1 if seen else 1
                        started = step.started if type(step.started) is int else None
                        seen, last_turn = True, turn
                        yield UsageRow(
                            turn=turn, session_id=step.session, started=started, open=True
                        )
                    continue
                session = event.session_id if isinstance(event.session_id, str) else None
                # When the step started where the stream says, else when it finished (its event)
                when = step.started if step.started is not None else event.time
                row = UsageRow(
                    turn=event.turn if isinstance(event.turn, int) else None,
                    session_id=session,
                    started=when if type(when) is int else None,
                    reason=event.reason if isinstance(event.reason, str) else None,
                    open=False,
                )
                row.add(event)
                unread.step(event)
                if by in ("turn", "step"):
                    seen, last_turn = True, row.turn
                    self._totaller.add(row)
                    yield row
                    continue
                if by == "session":
                    key = session or ""
                elif by in ("model", "agent"):  # as the store names them; "?" unnamed
                    key = _labelled(by, event)
                else:
                    key = _date_key(by, _day(when, tz))
                if row.started is not None and row.started < first_time.get(key, row.started + 1):
                    first_time[key] = row.started
                group = groups.get(key)
                if group is None:
                    group = groups[key] = UsageRow(
                        session_id=session if by == "session" else None,
                        day=key if by == "day" else None,
                        week=key if by == "week" else None,
                        month=key if by == "month" else None,
                        model=key if by == "model" else None,
                        agent=key if by == "agent" else None,
                        inferences=0,
                    )
                group.add(row)
                group.inferences = (group.inferences or 0) + 1
        self.notes = unread.notes()
        self._undone = unread.undone
        if by not in ("turn", "step"):
            for row in groups.values():
                row.cost = summed_cost(row.cost, _figures_in(row))
            if by in ("model", "agent"):  # the costliest first, as from the store
                ordered = sorted(groups.values(), key=_sort_key(by))
            else:  # sessions and dates oldest first, as from the store
                ordered = [
                    groups[k] for k in sorted(groups, key=lambda k: (first_time.get(k, 0), k))
                ]
            for row in ordered:
                self._totaller.add(row)
                yield row


def _labelled(by: str, event: Any) -> str:
    """A stream step's model (``provider/model``, as ``model_label`` names a stored one) or
    agent; ``?`` where its source names none (a run stream's steps)."""
    if by == "agent":
        return event.agent if isinstance(event.agent, str) and event.agent else "?"
    return model_label(event.provider, event.model)


def _date_key(by: str, day: str | None) -> str:
    """A stream step's group by date: its day, or the ISO week or month the day is in (as
    the store's groupings name them); "" for a step with no time."""
    if not day:
        return ""
    if by == "week":
        return _week_of(day)
    return day[:7] if by == "month" else day


# ----------------------------------------------------------------------------- store


_MESSAGE = msgspec.json.Decoder(UsageMessage)


def _read_message(data: bytes) -> UsageMessage:
    """A message row as every report reads it (``decode_leniently``): a ``time`` of another
    shape read as none, so the message still counts, as in the reports that read only its
    figures. Raises ``_UNREADABLE``."""
    return decode_leniently(_MESSAGE, data)


_FIGURES = msgspec.json.Decoder(MessageFigures)


def _figures(message: UsageMessage) -> UsageRow:
    """An assistant message's tokens and cost as a row, by the one rule (``figures``)."""
    f = read_figures(message.tokens, message.cost)
    return UsageRow(
        input_tokens=f.input,
        output_tokens=f.output,
        reasoning_tokens=f.reasoning,
        cache_read_tokens=f.cache_read,
        cache_write_tokens=f.cache_write,
        total_tokens=f.total,
        cost=f.cost,
    )


def _fingerprint(message: UsageMessage) -> bytes:
    """What a forked copy shares with its original (ids differ, content does not): the
    role, times, cost, tokens, model and agent, encoded and hashed to 16 bytes (a fork of
    a long history holds tens of thousands of copies, each waiting for its original: 16
    bytes each, not a tuple of seven objects). A copy is OpenCode's copy of the same
    JSON, so the same values of the same types, and the same bytes."""
    tokens = message.tokens
    time = message.time
    fields = (
        message.role,
        time and time.created,
        time and time.completed,
        message.cost,
        msgspec.json.encode(tokens) if tokens is not None else b"",
        message.modelID,
        message.agent,
    )
    return blake2b(_PRINT.encode(fields), digest_size=16).digest()


_PRINT = msgspec.msgpack.Encoder()


class _Turn:
    __slots__ = ("row", "user_id", "opened", "completed", "folded")

    def __init__(self, row: UsageRow, user_id: str | None, opened: Any = None) -> None:
        self.row = row
        self.user_id = user_id
        self.opened = opened  # the user message row's time_created (what --since compares)
        self.completed: int | None = None
        self.folded = 0  # figures of subagents added to the row


class _SessionTurns(NamedTuple):
    turns: list[_Turn]
    spawned: dict[str, _Turn]  # child session → the turn whose task call started it
    spawned_before: set[str]  # children started by an inference before --since


def _prompt_first(
    messages: Iterable[Any], skip: Container[str], read: Container[str]
) -> Iterator[tuple[Any, Any]]:
    """Each message of a session with its decoded view (None: unreadable), in the rows'
    time order, but for a reply dated before the message its ``parentID`` names (a clock
    that went back), which comes right after that message: it extends that prompt's turn.
    ``read``: the ids the caller has taken in so far (its turns' map)."""
    rows = list(messages)
    later: dict[Any, int] | None = None  # each row's place, made when one is first needed
    held: dict[str, list[tuple[Any, Any]]] = {}
    for at, message in enumerate(rows):
        if message.id in skip:
            continue
        try:  # a lone surrogate escape too, read as the import reads it
            info = _read_message(message.data)
        except _UNREADABLE:
            info = None
        parent = info.parentID if info is not None and info.role == "assistant" else None
        if isinstance(parent, str) and parent not in read and parent not in skip:
            if later is None:
                later = {row.id: place for place, row in enumerate(rows)}
            if later.get(parent, -1) > at:
                held.setdefault(parent, []).append((message, info))
                continue
        yield message, info
        if held and message.id in held:  # after the caller took the prompt in
            ready = [message.id]  # and a held reply's own held replies after it (a chain)
            while ready:
                for reply in held.pop(ready.pop(), ()):
                    yield reply
                    ready.append(reply[0].id)


def _session_turns(
    store: Any,
    session_id: str,
    skip: set[str] = frozenset(),  # type: ignore[assignment]
    unread: list[int] | None = None,
    since: int | None = None,
    until: int | None = None,
) -> _SessionTurns:
    """A session's user turns (with prompt, inferences, tool calls, figures), and the turn
    each child session's spawning ``task`` call belongs to. Messages in ``skip`` (a fork's
    copied history) are left out, and so are their parts; message rows that cannot be read
    (not JSON, no user or assistant role) are counted in ``unread[0]``. With ``since``,
    inferences whose row was created before it are left out with their parts (the children
    their calls started are named apart), and so are the turns that opened before it and
    have no inference left. With ``until``, the same of inferences created after it (and of
    the turns opened after it)."""
    from ..core.mapping import ORCHESTRATION_TOOLS, script_calls, spawned_session
    from .sessions import tool_of_head

    turns: list[_Turn] = []
    by_message: dict[str, _Turn] = {}
    early: set[str] = set()  # inferences before --since
    late: set[str] = set()  # inferences after --until: nor their figures, nor their parts
    for message, info in _prompt_first(store.messages(session_id), skip, by_message):
        if info is None or info.role not in ("user", "assistant"):
            if unread is not None:
                unread[0] += 1
            continue
        created = info.time.created if info.time else None
        if info.role == "user":
            turn = _Turn(
                UsageRow(
                    turn=len(turns) + 1,
                    started=created if isinstance(created, int) else None,
                    inferences=0,
                    tool_calls=0,
                    in_flight=False,
                ),
                message.id,
                message.time_created,
            )
            turns.append(turn)
            by_message[message.id] = turn
        elif since is not None and _before(message.time_created, since):
            early.add(message.id)  # an inference before --since: nor its figures, nor its parts
        elif until is not None and _after(message.time_created, until):
            late.add(message.id)
        elif info.role == "assistant":
            turn = by_message.get(info.parentID) if isinstance(info.parentID, str) else None
            if turn is None:
                if not turns:  # an assistant message before any prompt: a turn of its own
                    turns.append(
                        _Turn(UsageRow(turn=1, inferences=0, tool_calls=0, in_flight=False), None)
                    )
                turn = turns[-1]
            by_message[message.id] = turn
            turn.row.add(_figures(info))
            turn.row.inferences = (turn.row.inferences or 0) + 1
            completed = info.time.completed if info.time else None
            if not isinstance(completed, int):
                turn.row.in_flight = True
            elif turn.completed is None or completed > turn.completed:
                turn.completed = completed
            if turn.row.reason is None or isinstance(info.finish, str):
                turn.row.reason = info.finish if isinstance(info.finish, str) else None
    if turns and turns[-1].user_id is not None and not turns[-1].row.inferences:
        # a prompt with no reply yet may be awaiting it: in flight if it is the session's
        # newest message (``_judge_staleness`` reads the newest messages to tell)
        turns[-1].row.in_flight = True
    spawned: dict[str, _Turn] = {}
    spawned_before: set[str] = set()
    heads = getattr(store, "part_heads", None)
    for _part_id, message_id, large, _created, data in (
        heads(session_id) if heads is not None else _part_tuples(store.parts(session_id))
    ):
        turn = by_message.get(message_id)
        if turn is None and message_id not in early:
            continue
        tool = None
        if heads is not None and type(data) is bytes and (large is not None or len(data) >= _HEAD):
            tool = tool_of_head(data)
        if tool is not None:
            # A tool part as OpenCode writes it is one call by its head, as `sessions` counts
            # it (docs/store.md's rule and its one limit): its output, most of the data, is
            # never decoded; code mode's is read whole for its script's calls, a subagent's
            # for the session it started.
            if turn is not None:
                turn.row.tool_calls = (turn.row.tool_calls or 0) + 1
            if tool != b"execute" and tool.decode("ascii").lower() not in ORCHESTRATION_TOOLS:
                continue
            try:
                view = decode_repairing(
                    PART_DECODER, data if large is None else store.part_data(large)
                )[0]
            except _UNREADABLE:
                continue
            if tool == b"execute" and turn is not None:
                turn.row.tool_calls = (turn.row.tool_calls or 0) + len(script_calls(view))
            child = spawned_session(view)
            if child:
                if turn is None:  # a part of an inference before --since
                    spawned_before.add(child)
                else:
                    spawned.setdefault(child, turn)
            continue
        if large is not None:  # a large part that its head does not settle: read whole
            data = store.part_data(large)
        try:
            view = decode_repairing(PART_DECODER, data)[0]
        except _UNREADABLE:
            continue
        if turn is None:  # a part of an inference before --since
            child = spawned_session(view) if view.type == "tool" else None
            if child:
                spawned_before.add(child)
            continue
        if view.type == "tool":
            # code mode's execute call, and each call its script made, as `sessions` and
            # `import` count them
            calls = 1 + (len(script_calls(view)) if view.tool == "execute" else 0)
            turn.row.tool_calls = (turn.row.tool_calls or 0) + calls
            child = spawned_session(view)
            if child:
                spawned.setdefault(child, turn)  # a resumed subagent (task_id) stays with its first
        elif (
            view.type == "text"
            and message_id == turn.user_id
            and turn.row.prompt is None
            and isinstance(view.text, str)
            and not view.synthetic
        ):
            turn.row.prompt = _first_words(view.text)
    for turn in turns:
        row = turn.row
        if row.started is not None and turn.completed is not None and not row.in_flight:
            row.duration_ms = turn.completed - row.started
    if since is not None or until is not None:
        # a turn with nothing in the window shows only if it opened in it
        turns = [t for t in turns if t.row.inferences or _within(t.opened, since, until)]
    return _SessionTurns(turns, spawned, spawned_before)


def _part_tuples(parts: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``PartRow``s as ``Store.part_heads`` gives its rows (no rowid: every data whole)."""
    for part in parts:
        yield part.id, part.message_id, None, part.time_created, part.data


# bytes: a part this long or longer is judged by its head (``Store.part_heads``)
_HEAD = Store._TOOL_HEAD_BYTES


def _first_words(text: str, limit: int = 48) -> str:
    words = " ".join(text.split())
    return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"


def _session_total(store: Any, session_id: str) -> UsageRow:
    """A session's own figures as OpenCode stores them on the session row."""
    row = store.session(session_id)
    total = UsageRow()
    if row is None:
        return total
    total.input_tokens = row.tokens_input or 0
    total.output_tokens = row.tokens_output or 0
    total.reasoning_tokens = row.tokens_reasoning or 0
    total.cache_read_tokens = row.tokens_cache_read or 0
    total.cache_write_tokens = row.tokens_cache_write or 0
    total.total_tokens = sum(getattr(total, f) for f in TOKEN_FIELDS[:-1])
    total.cost = float(row.cost or 0.0)
    return total


# A fork's copy of a message, as the fork rule keeps it: its id, whether it is an inference
# (an assistant message), its cost, its fingerprint, and its row's time_created.
Copy = tuple[str, bool, float, bytes, Any]


class _Copies(NamedTuple):
    """A fork's copied history among a report's sessions (``_forked_copies``)."""

    ids: set[str]  # the copies whose original is there too: not counted again
    inferences: int  # how many of them are inferences
    cost: float  # the cost those inferences carry
    candidates: dict[str, list[Copy]]  # session → the messages older than it (maybe copies)
    originals: dict[str, list[bytes]]  # session → the fingerprints it holds an original of

    @property
    def note(self) -> str | None:
        if not self.inferences:
            return None
        return (
            f"{self.inferences} forked cop{'y' if self.inferences == 1 else 'ies'} of earlier "
            f"inferences not counted again (${self.cost:.4f})"
        )


def _forked_copies(
    store: Any, sessions: set[str], since: int | None, until: int | None = None
) -> _Copies:
    """The messages of ``sessions`` that are a fork's copy of a message of theirs too
    (older than their own session, same content and times as another; with ``since``, of
    those created since then), how many of them are inferences (assistant messages), the
    cost they carry, and which sessions hold such copies and their originals."""
    candidates = _copy_candidates(_older_than_session(store), sessions, since, until)
    originals = (
        _originals_in(_message_rows(store, None), sessions, candidates) if candidates else {}
    )
    return _copies_counted(candidates, originals)


def _copy_candidates(
    rows: Iterable[tuple[str, str, Any, bytes]],
    sessions: set[str],
    since: int | None = None,
    until: int | None = None,
) -> dict[str, list[Copy]]:
    """Of messages older than their session (``rows``), those of ``sessions`` in the
    window, by session: each a copy if an original is found (``_originals_in``)."""
    found: dict[str, list[Copy]] = {}
    for sid, mid, created, data in rows:
        if type(mid) is not str:  # a damaged id (NULL, a blob) names no copy
            continue
        if sid not in sessions or not _within(created, since, until, timeless=True):
            continue
        try:
            info = _read_message(data)
        except _UNREADABLE:
            continue
        copy = (mid, info.role == "assistant", _figures(info).cost, _fingerprint(info), created)
        found.setdefault(sid, []).append(copy)
    return found


def _originals_in(
    rows: Iterable[tuple[str, str, Any, bytes]],
    sessions: set[str],
    candidates: dict[str, list[Copy]],
) -> dict[str, list[bytes]]:
    """Which of ``candidates`` each session of ``sessions`` holds an original of, among
    ``rows`` (messages): one at a copy's time, not a candidate itself, of the same
    fingerprint."""
    prints = {copy[3] for copies in candidates.values() for copy in copies}
    times = {copy[4] for copies in candidates.values() for copy in copies}
    copy_ids = {copy[0] for copies in candidates.values() for copy in copies}
    found: dict[str, set[bytes]] = {}
    for sid, mid, created, data in rows:
        if created not in times or mid in copy_ids or sid not in sessions:
            continue
        try:
            info = _read_message(data)
        except _UNREADABLE:
            continue
        fingerprint = _fingerprint(info)
        if fingerprint in prints:
            found.setdefault(sid, set()).add(fingerprint)
    return {sid: sorted(prints) for sid, prints in found.items()}


def _copies_counted(
    candidates: dict[str, list[Copy]], originals: dict[str, list[bytes]]
) -> _Copies:
    """The candidates whose original is held somewhere: the copies not counted again. A
    history whose original is gone (deleted) but that two forks copied is counted once
    too: the earliest copy of each (the lowest id: OpenCode's ids grow with time) stands
    in for the original, the others are copies of it."""
    present = {fingerprint for held in originals.values() for fingerprint in held}
    every = [copy for held in candidates.values() for copy in held]
    stand_in = _stand_ins(((copy[3], copy[0]) for copy in every), present)
    copies = [copy for copy in every if copy[3] in present or stand_in[copy[3]] != copy[0]]
    inferences = [copy for copy in copies if copy[1]]
    return _Copies(
        {copy[0] for copy in copies},
        len(inferences),
        _fsum([copy[2] for copy in inferences]),  # exact: the same in any order
        candidates,
        originals,
    )


def _stand_ins(copies: Iterable[tuple[Any, ...]], originals: set[bytes]) -> dict[bytes, Any]:
    """Of the copies (fingerprint first, message id last) whose original is in no session
    (deleted), the one counted for each fingerprint: the lowest id, as
    ``_copies_counted`` chooses it."""
    chosen: dict[bytes, Any] = {}
    for copy in copies:
        fingerprint, mid = copy[0], copy[-1]
        if fingerprint not in originals:
            held = chosen.get(fingerprint)
            if held is None or (type(mid) is str and (type(held) is not str or mid < held)):
                chosen[fingerprint] = mid
    return chosen


def forked_copy_ids(store: Any, session_ids: Iterable[str]) -> set[str]:
    """The message ids of ``session_ids`` that are a fork's copied history (the same rule
    ``usage`` uses not to count them twice): for ``otel``, whose traces hold each inference
    once, in the session where it happened."""
    return _forked_copies(store, set(session_ids), None).ids


class _TurnFacts:
    """What a report by turn (or step) of every session was made of beyond its rows
    (``_each_turn_row``, ``_store_usage`` fill it in), kept as its memo's basis so that the
    next report reads only what changed (``_turns_brought_up_to_date``,
    ``_steps_brought_up_to_date``)."""

    def __init__(self) -> None:
        self.copies: _Copies | None = None  # the fork rule's findings (None: not applied)
        # every row a chosen session's (no subagent listed apart), no note but the fork
        # rule's, no row unread: a report made of its families' rows alone, in order
        self.by_family = True

    def basis(self, stamps: dict[str, Any], parents: dict[Any, Any]) -> list[Any] | None:
        if not self.by_family or self.copies is None:
            return None
        return [stamps, parents, self.copies.candidates, self.copies.originals]


def _turn_report(
    store: Any, session_ids: Sequence[str], **options: Any
) -> tuple[list[UsageRow], list[str]]:
    """``_each_turn_row``'s rows (``options``: its own), held, and the report's notes."""
    notes: list[str] = []
    rows = list(_each_turn_row(store, session_ids, notes, **options))
    return rows, notes


def _each_turn_row(
    store: Any,
    session_ids: Sequence[str],
    notes: list[str],
    *,
    fold: bool,
    tree: dict[str, list[str]],
    dedupe: bool = False,
    since: int | None = None,
    until: int | None = None,
    facts: _TurnFacts | None = None,
    skip: set[str] | None = None,
    now_ms: float | None = None,
    parallel: bool = False,
) -> Iterator[UsageRow]:
    """The rows by turn of ``session_ids`` (and of the subagents folded into them, or
    listed apart), a session's once its subagents are folded in and its rows in flight
    judged (stale at ``now_ms``: ``_judge_staleness``), so that a report of every session
    is never held; the report's notes are added to ``notes`` (whole once the last row is
    given). With ``dedupe``, a fork's copies of messages also in the report are left out
    (the fork rule: ``_forked_copies``, said in a note); ``skip``: those copies as found
    already (no rule applied, no note). ``parallel`` (``session_ids`` each once): many
    sessions are read by worker processes too, a slice of them each (``_family_slice``),
    the rows the same and in the same order."""
    # The user messages copied are skipped too (they open no turn of their own); the note
    # counts inferences, as the grouped reports' note does. An original counts when it is in
    # the report (a session chosen, or a subagent of one).
    if skip is None:
        copies = (
            _forked_copies(store, {*session_ids, *descendants(session_ids, tree)}, since, until)
            if dedupe
            else None
        )
        skip = copies.ids if copies is not None else set()
        if copies is not None and copies.note is not None:
            notes.append(copies.note)
        if facts is not None:
            facts.copies = copies
    fork_notes = len(notes)
    chosen = set(session_ids)
    families = _Families(store, tree, skip, fold, since, until, now_ms)
    apart = False  # a row of a session not chosen (a subagent listed apart)
    unread = [0]
    queue = collections.deque(session_ids)
    pending = None
    if parallel and len(session_ids) >= _PARALLEL_MIN_SESSIONS:
        pending = share_slices(
            store, len(session_ids), _family_slice, families, session_ids, here=False
        )
    if pending is not None:
        # The slices' rows in order; the subagents a slice lists apart are read after
        # every slice, in the order they were found, as the queue below reads them.
        queue.clear()
        for rows, slice_notes, slice_unread, listed_apart in pending.each():
            notes.extend(slice_notes)
            unread[0] += slice_unread
            queue.extend(listed_apart)
            yield from _ROWS_DECODER.decode(rows) if type(rows) is bytes else rows
    done: set[str] = set()  # listed, or folded into a turn
    while queue:
        session_id = queue.popleft()
        if session_id in done:
            continue
        rows = families.rows_of(session_id, queue, done, notes, unread)
        apart = apart or (bool(rows) and session_id not in chosen)
        yield from rows
    if unread[0]:
        notes.append(_unread_rows_note(unread[0]))
    if facts is not None:
        facts.by_family = len(notes) == fork_notes and not apart


_PARALLEL_MIN_SESSIONS = 2_000  # below this a worker's start costs more than it saves


def _family_slice(
    uri: str, low: int, high: int, families: _Families, session_ids: Sequence[str]
) -> tuple[bytes | list[UsageRow], list[str], int, list[str]]:
    """A worker of ``_each_turn_row``: the rows of the sessions ``session_ids[low:high]``
    (those chosen: none below another), with the notes they gave, how many message rows
    could not be read, and the subagents to list apart (read after every slice). A forked
    child reads on its own connection."""
    if in_forked_child() and not families.reopened:
        # apsw's SQLite where it can be used: a large part's head is read from its first
        # page, its output never (``Store.part_heads``)
        families.store = families.store.reopen(fastscan.sqlite3_like)
        families.reopened = True
    rows: list[UsageRow] = []
    notes: list[str] = []
    unread = [0]
    listed_apart: list[str] = []
    done: set[str] = set()
    for session_id in session_ids[low:high]:
        rows += families.rows_of(session_id, listed_apart, done, notes, unread)
    try:  # sent back encoded: read back many times faster than unpickled
        encoded = _ROW_ENCODER.encode(rows)
        _ROWS_DECODER.decode(encoded)  # as the parent will (a damaged row's odd value)
    except (*UNENCODABLE, msgspec.DecodeError, msgspec.ValidationError):
        return rows, notes, unread[0], listed_apart  # a prompt's lone surrogate: as they are
    return encoded, notes, unread[0], listed_apart


class _Families:
    """What reading a session's turns, its subagents folded in, needs (``rows_of``): the
    same for every session of a report."""

    def __init__(
        self,
        store: Any,
        tree: dict[str, list[str]],
        skip: set[str],
        fold: bool,
        since: int | None,
        until: int | None,
        now_ms: float | None,
    ) -> None:
        self.store, self.tree, self.skip, self.fold = store, tree, skip, fold
        self.since, self.until, self.now_ms = since, until, now_ms
        self.states: dict[str, Any] = {}  # each session's state, judged once
        self.reopened = False  # a worker's own connection (``_family_slice``)

    def rows_of(
        self,
        session_id: str,
        queue: collections.deque[str] | list[str],
        done: set[str],
        notes: list[str],
        unread: list[int],
    ) -> list[UsageRow]:
        """The rows of ``session_id``'s turns, each subagent below it folded into the turn
        that started it (its sessions added to ``done``), or, not folded, added to
        ``queue``; notes to ``notes``, rows that cannot be read counted in ``unread``."""
        store, tree, skip, fold = self.store, self.tree, self.skip, self.fold
        since, until = self.since, self.until
        done.add(session_id)
        turns, spawned, spawned_before = _session_turns(
            store, session_id, skip, unread, since, until
        )
        children = tree.get(session_id, [])
        for child in children:
            if not fold:
                queue.append(child)
                continue
            folded = [child, *descendants([child], tree)]
            # The child's own figures and its descendants': tokens and cost as OpenCode
            # stores them on the session rows, or, in a window of time (--since, --until), of
            # their inferences made in it; inferences and tool calls as the turns count them.
            windowed = since is not None or until is not None
            share = UsageRow(inferences=0, tool_calls=0)
            figures = 0
            for sid in folded:
                total_tokens = 0  # its inferences' own totals, as every other grouping adds
                for folded_turn in _session_turns(store, sid, skip, unread, since, until).turns:
                    part = folded_turn.row
                    share.inferences = (share.inferences or 0) + (part.inferences or 0)
                    share.tool_calls = (share.tool_calls or 0) + (part.tool_calls or 0)
                    total_tokens += part.total_tokens
                    if windowed:
                        share.add(part)
                        figures += part.inferences or 0
                if not windowed:
                    # The session row keeps the classes and the cost but no total: OpenCode's
                    # tokens.total (a provider may leave the cache out of it) is the replies'.
                    own = _session_total(store, sid)
                    own.total_tokens = total_tokens
                    share.add(own)
                    figures += 1
            if windowed and not figures:
                done.update(folded)  # nothing of it in the window
                continue
            turn = spawned.get(child)
            if turn is None and child not in spawned_before:
                turn = turns[-1] if turns else None
            if turn is None:
                if child in spawned_before:
                    notes.append(
                        f"subagent {child} was started before --since; its inferences since "
                        "then are listed apart"
                    )
                else:
                    notes.append(f"subagent {child} has no turn to fold into; listed apart")
                queue.append(child)
                continue
            row = turn.row
            row.add(share)
            row.inferences = (row.inferences or 0) + (share.inferences or 0)
            row.tool_calls = (row.tool_calls or 0) + (share.tool_calls or 0)
            row.subagent_sessions = (row.subagent_sessions or 0) + len(folded)
            row.subagent_inferences = (row.subagent_inferences or 0) + (share.inferences or 0)
            row.subagent_tool_calls = (row.subagent_tool_calls or 0) + (share.tool_calls or 0)
            row.subagent_tokens = (row.subagent_tokens or 0) + share.total_tokens
            row.subagent_cost = (row.subagent_cost or 0.0) + share.cost
            turn.folded += figures
            done.update(folded)  # counted here: never a row of its own as well
        rows = []
        for turn in turns:
            row = turn.row
            own = (row.inferences or 0) - (row.subagent_inferences or 0)
            row.cost = summed_cost(row.cost, own + turn.folded)
            if row.subagent_cost is not None:
                row.subagent_cost = summed_cost(row.subagent_cost, turn.folded)
            row.session_id = session_id  # one session or several: whose a row is
            rows.append(row)
        _judge_staleness(store, rows, tree, self.now_ms, self.states)
        return rows


class _Since(NamedTuple):
    """What changed since a report of every session was kept (``_changed_since``)."""

    stamps: dict[str, Any]
    parents: dict[Any, Any]
    changed: list[str]  # sessions whose stamp or parent moved, or new ones
    ids: list[str]  # every top-level session now, oldest first
    tree: dict[str, list[str]]
    candidates: dict[str, list[Copy]]  # the fork rule's findings then (``_Copies``)
    originals: dict[str, list[bytes]]


def _changed_since(store: Any, cache: ReportCache, basis: Any) -> _Since | None:
    """What changed since a report of every session was kept in an earlier state with
    ``basis`` (``_TurnFacts.basis``), when it can be brought up to date: the stamps and
    parents tell what changed (``sessions_changed``), no parent links loop, and fewer than
    ``WHOLE_TABLE_SESSIONS`` changed; else None. (Only OpenCode wrote since, and a session
    whose stamp held is unchanged: ``ReportCache.previous``, which gave ``basis``.)"""
    try:
        stamps_then, parents_then, candidates_then, originals_then = msgspec.convert(
            basis, tuple[dict, dict, dict[str, list[Copy]], dict[str, list[bytes]]]
        )
    except (msgspec.ValidationError, TypeError):
        return None
    parents = store.session_parents()
    stamps = cache.stamps
    changed = sessions_changed(parents_then, stamps_then, parents, stamps)
    if changed is None or store.loop_members() or len(changed) >= WHOLE_TABLE_SESSIONS:
        return None
    from ..store.open import every_session

    ids = every_session(store, top_level=True)
    if len(ids) < 2:  # the fork rule applies across sessions: one alone was read whole
        return None
    tree = store.children()
    return _Since(stamps, parents, changed, ids, tree, candidates_then, originals_then)


def _fork_rule_now(
    store: Any, since: _Since, read_again: Sequence[str]
) -> tuple[_Copies, set[str]] | None:
    """The fork rule's findings now (``_Copies``), from those kept and the rows of the
    sessions ``read_again`` (every changed one among them), and the copies counted
    otherwise than before (an original gone, or come): None when one of them holds a
    copy of history the kept findings do not know (a new fork: its originals may be in
    any session, and finding them reads every message)."""
    report_sessions = {*since.ids, *descendants(since.ids, since.tree)}
    fresh = _copy_candidates(store.messages_older_than_session(read_again), report_sessions)
    then = since.candidates
    try:  # a time kept that is no SQLite value (a damaged cache) cannot be compared
        known = {(copy[3], copy[4]) for held in then.values() for copy in held}
        if any((copy[3], copy[4]) not in known for held in fresh.values() for copy in held):
            return None
        again = set(read_again)
        candidates = {sid: held for sid, held in then.items() if sid not in again}
        candidates.update(fresh)
        originals = {sid: held for sid, held in since.originals.items() if sid not in again}
        if candidates:
            rows = itertools.chain.from_iterable(store.message_batches(read_again))
            originals.update(_originals_in(rows, report_sessions, candidates))
        copies = _copies_counted(candidates, originals)
        counted_then = _copies_counted(then, since.originals).ids
    except TypeError:
        return None
    return copies, counted_then ^ copies.ids


def _moved_sessions(copies: _Copies, moved: set[str]) -> set[str]:
    """The sessions holding a copy counted otherwise now."""
    return {sid for sid, held in copies.candidates.items() if any(c[0] in moved for c in held)}


def _turns_brought_up_to_date(
    store: Any, cache: ReportCache, memo: tuple[str, list[Any]]
) -> _RowsAsMade | None:
    """The last report by turn of every session (all time, folded), the families whose
    sessions changed since read again: the report a full reading would give, at the cost
    of what changed, the last report's rows read from its memo as they are asked for
    (never all held). None (read everything) when ``_changed_since`` or
    ``_fork_rule_now`` says so, or when the last report was not made of its families' rows
    alone (a subagent listed apart, rows that could not be read: ``_TurnFacts``).

    A family's rows depend on its own sessions (its subagents fold into its turns) and on
    the fork rule: which of its messages are copies whose original is held somewhere. The
    rule's findings are kept by session (the copies each holds, the originals each holds),
    so the changed sessions' are found again from their own rows, and a family whose
    copies are counted otherwise since (an original gone, or come) is read again too;
    every other family's rows are the last report's, in the order of the sessions."""
    found = cache.previous_each(*memo, _RowsMemo, "rows", UsageRow)
    if found is None:
        return None
    before, basis, _checks = found
    then = _rows_basis(basis)
    if then is None or then[2] is None:
        return None
    since = _changed_since(store, cache, then[2])
    if since is None:
        return None
    ids, tree, parents = since.ids, since.tree, since.parents
    tops = set(ids)
    families = {ancestry(sid, parents)[-1] for sid in since.changed}
    if not families <= tops:
        return None
    rule = _fork_rule_now(store, since, [*families, *descendants(list(families), tree)])
    if rule is None:
        return None
    copies, moved = rule
    families |= {ancestry(sid, parents)[-1] for sid in _moved_sessions(copies, moved)}
    if not families <= tops:
        return None
    order = [sid for sid in ids if sid in families]
    facts = _TurnFacts()
    fresh_rows, notes = _turn_report(
        store, order, fold=True, tree=tree, facts=facts, skip=copies.ids
    )
    if notes or not facts.by_family:
        return None
    fresh: dict[Any, list[UsageRow]] = {}
    for row in fresh_rows:
        fresh.setdefault(row.session_id, []).append(row)
    facts.copies = copies
    return _rows_as_made(
        "turn",
        _rows_merged(ids, families, fresh, before, cache, memo),
        [copies.note] if copies.note is not None else [],
        store,
        cache,
        memo,
        (since.ids, since.tree, None, None),
        lambda: facts.basis(since.stamps, since.parents),
    )


def _rows_merged(
    ids: Sequence[str],
    families: set[str],
    fresh: dict[Any, list[UsageRow]],
    kept: Iterator[UsageRow],
    cache: ReportCache,
    memo: tuple[str, list[Any]],
) -> Iterator[UsageRow]:
    """The rows of every top-level session ``ids``, in their order: those of ``families``
    from ``fresh``, every other's as ``kept`` (the last report's, under ``memo``, in the
    same order) gives them. A kept row of no session of ``ids``, or out of their order, is
    a memo damaged or not ours: an ``InputError``, the memo deleted (``ReportCache.drop``),
    so that the next run reads everything."""
    row = next(kept, None)
    for sid in ids:
        while row is not None and row.session_id == sid:
            if sid not in families:
                yield row
            row = next(kept, None)
        if sid in families:
            yield from fresh.get(sid, ())
    if row is not None:
        cache.drop(*memo)
        raise InputError(
            f"the report cache in {cache.folder} held a report of other sessions: run again"
        )


def _steps_brought_up_to_date(
    store: Any, cache: ReportCache, memo: tuple[str, list[Any]]
) -> _RowsAsMade | None:
    """The last report by step of every session (all time), the steps of the sessions
    that changed since read again: the report a full reading would give, at the cost of
    what changed, the last report's rows read from its memo as they are asked for (never
    all held). None (read everything) when ``_changed_since`` or ``_fork_rule_now`` says
    so, or when a step of a session read again has no usable message id or cannot be
    read (the full reading's note counts those of every session).

    A step's row depends on its own message and on the fork rule alone (a step is no
    family's: it names the session it was made in): so a changed session's steps, and
    those of a session whose copies are counted otherwise since, are read again, and
    every other step is the last report's, in the order of their times."""
    found = cache.previous_each(*memo, _RowsMemo, "rows", UsageRow)
    then = None if found is None else _rows_basis(found[1])
    if found is None or then is None or then[2] is None:
        return None
    since = _changed_since(store, cache, then[2])
    if since is None:
        return None
    rule = _fork_rule_now(store, since, since.changed)
    if rule is None:
        return None
    copies, moved = rule
    # and every session above a changed one: whether its reply in flight is stale depends
    # on the writes below it too (``_judge_staleness``)
    again = {
        *(above for sid in since.changed for above in ancestry(sid, since.parents)),
        *_moved_sessions(copies, moved),
    }
    candidates = [copy for held in copies.candidates.values() for copy in held]
    scan = _Scan(
        "step",
        {sid: sid for sid in again},
        {copy[0] for copy in candidates},
        {copy[4] for copy in candidates},
        copy_prints={copy[3] for copy in candidates},
    )
    day_of = _DayOf(None)
    scan.run(_message_rows(store, sorted(again)), day_of)
    scan.finish(day_of)
    if scan.unread:
        return None
    fresh = [row for mid, _key, _print, row in scan.ready if mid not in copies.ids]
    if any(type(row.message_id) is not str for row in fresh):
        return None  # the full reading's order of rows without one is the table's
    for row in fresh:
        row.cost = summed_cost(row.cost, _figures_in(row))
    _in_step_order(fresh)
    _judge_staleness(store, fresh, since.tree, None)
    # Both in the report's order (the last report's rows all have an id: ``_Named``).
    kept = (row for row in found[0] if row.session_id not in again)
    undone = _undone_in(store, since.ids, since.tree, None, None, cache)
    facts = _TurnFacts()
    facts.copies = copies
    return _rows_as_made(
        "step",
        _steps_marked(heapq.merge(kept, fresh, key=_step_order), undone),
        [copies.note] if copies.note is not None else [],
        store,
        cache,
        memo,
        (since.ids, since.tree, None, None),
        lambda: facts.basis(since.stamps, since.parents),
        undone,
    )


class _RowsMemo(Struct):
    """The memo of a report by turn or step of every session: its rows, spooled as they
    are made (``ReportCache.memo_spool``) and read back as they are asked for
    (``recall_each``); its total and notes are the first two items of its basis
    (``_rows_basis``), and what brings it up to date the third."""

    rows: list[UsageRow]


def _rows_basis(basis: Any) -> tuple[UsageRow, list[str], Any] | None:
    """A ``_RowsMemo``'s basis read: (total, notes, ``_TurnFacts.basis`` or None); None
    when it is not one (a damaged or foreign memo)."""
    try:
        total, notes, since = msgspec.convert(basis, tuple[UsageRow, list[str], Any])
    except (msgspec.ValidationError, TypeError):
        return None
    return total, notes, since


class _RowsAsMade:
    """A usage report whose rows are given as they are made or read (``rows``, an
    iterator, once), so that a report of every session is never held: its ``total`` and
    ``notes`` are whole once the last row was given (asked before, they drain the rest).
    ``usage_pieces`` writes it as it writes a ``UsageReport``; ``whole`` is that report."""

    stored = True

    def __init__(
        self,
        by: str,
        rows: Iterator[UsageRow],
        tail: Callable[[], UsageReport],
        folder: str | None = None,
    ) -> None:
        self.by = by
        self.rows = rows
        self._tail = tail
        self.folder = folder  # where rows are set aside (the cache's; None: the system's)

    @property
    def columns(self) -> list[str]:
        return report_columns(self.by, stored=True)

    def _ended(self) -> UsageReport:
        for _row in self.rows:  # what was not asked for is made all the same
            pass
        return self._tail()

    @property
    def total(self) -> UsageRow:
        return self._ended().total

    @property
    def notes(self) -> list[str]:
        return self._ended().notes

    def whole(self) -> UsageReport:
        return self._holding(list(self.rows))

    def last(self, keep: int) -> tuple[UsageReport, int]:
        """The report holding only its last ``keep`` rows, and how many rows it has."""
        held: collections.deque[UsageRow] = collections.deque(maxlen=keep)
        count = 0
        for row in self.rows:
            held.append(row)
            count += 1
        return self._holding(list(held)), count

    def _holding(self, rows: list[UsageRow]) -> UsageReport:
        """The report, its total and notes whole, holding ``rows`` (the rows given)."""
        tail = self._tail()
        return UsageReport(by=self.by, rows=rows, total=tail.total, notes=tail.notes, stored=True)

    def markdown_table(self) -> tuple[list[str], Iterator[dict[str, Any]], list[str]]:
        """``UsageReport.markdown_table``, its rows given as they are read back: the rows
        are set aside in a file (``RowSpool``) as they are made, since the columns are
        known only once every row was seen."""
        spool = RowSpool(UsageRow, self.folder)
        unnamed = [c for c in self.columns if c not in _ALWAYS]  # the labels no row has yet
        try:
            for row in self.rows:
                if unnamed:  # a few rows name every label: then the rest is not looked at
                    unnamed = [c for c in unnamed if getattr(row, c) is None]
                spool.add(row)
            columns = _markdown_columns(self.columns, set(self.columns).difference(unnamed))
            total = {**self.total.as_dict(), columns[0]: "**total**"}
        except BaseException:
            spool.close()
            raise
        return columns, _spooled_markdown(spool, total), [c for c in columns if c in _NUMERIC]

    def close(self) -> None:
        """Stop making rows (a memo on its way to the cache is then not kept)."""
        close = getattr(self.rows, "close", None)
        if close is not None:
            close()


def _spooled_markdown(spool: RowSpool, total: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The rows of ``spool`` as a Markdown table shows them, then ``total``; the spool let
    go at the end, or when the reader stops."""
    try:
        for row in spool:
            yield _for_markdown(row.as_dict())
        yield total
    finally:
        spool.close()


def _kept_rows(
    cache: ReportCache | None, by: str, memo: tuple[str, list[Any]]
) -> _RowsAsMade | None:
    """The report kept under ``memo`` of the database as it is now, its rows read from the
    memo as they are asked for; None when there is none."""
    if cache is None:
        return None
    then = _rows_basis(cache.recalled_basis(*memo))
    kept = None if then is None else cache.recall_each(*memo, _RowsMemo, "rows", UsageRow)
    if then is None or kept is None:
        return None
    tail = UsageReport(by=by, rows=[], total=then[0], notes=then[1], stored=True)
    return _RowsAsMade(by, kept, lambda: tail, str(cache.folder))


def _recalled(
    store: Any,
    cache: ReportCache | None,
    by: str,
    memo: tuple[str, list[Any]],
    bring: Callable[[Any, ReportCache, tuple[str, list[Any]]], _RowsAsMade | None] | None,
) -> _RowsAsMade | None:
    """The report kept under ``memo`` of the database as it is now (``_kept_rows``), else
    the last one brought up to date by ``bring`` (None: it cannot be); None when neither,
    the memo then let go (made again, not read)."""
    kept = _kept_rows(cache, by, memo)
    if kept is not None or cache is None:
        return kept
    brought = None if bring is None else bring(store, cache, memo)
    if brought is None:
        cache.let_go(*memo)
    return brought


def _tops(
    store: Any, fold: bool, chosen: Callable[[], list[str]] | None = None
) -> tuple[dict[str, list[str]], list[str]]:
    """The store's tree of sessions, and the top-level sessions reported: every one
    (oldest first), or those ``chosen()`` lists (a window's, ``_window_sessions``);
    folded, none below another."""
    from ..store.open import every_session

    tree = store.children()
    ids = every_session(store, top_level=True) if chosen is None else chosen()
    return tree, _outermost(ids, tree) if fold else ids


def _turns_as_made(
    store: Any,
    cache: ReportCache | None,
    memo: tuple[str, list[Any]],
    fold: bool,
    tz: tzinfo | None,
    since_ms: int | None,
    until_ms: int | None,
    chosen: Callable[[], list[str]] | None = None,
) -> _RowsAsMade:
    """The report by turn of every top-level session (``stored_usage``'s with none
    chosen; ``chosen``: of the sessions a window chose instead), its rows as they are
    asked for: read from its memo (the database as it is now), the last report brought
    up to date (all time, folded:
    ``_turns_brought_up_to_date``), or made (``_each_turn_row``). With ``cache``, a report
    made is spooled to its memo as its rows go, and kept once the last has gone (not with
    a reply in flight, which turns stale with the clock alone). A row is about 0.7 KB
    held: at 100,000 sessions, held whole, a report by turn took about 1 GB. (``tz``:
    turns have no dates.)"""
    all_time = fold and since_ms is None and until_ms is None
    bring = _turns_brought_up_to_date if all_time else None
    recalled = _recalled(store, cache, "turn", memo, bring)
    if recalled is not None:
        return recalled
    tree, ids = _tops(store, fold, chosen)
    facts = _TurnFacts() if all_time else None
    notes: list[str] = []
    rows = _each_turn_row(
        store,
        ids,
        notes,
        fold=fold,
        tree=tree,
        dedupe=len(ids) > 1,
        since=since_ms,
        until=until_ms,
        facts=facts,
        parallel=True,  # every session: each id once
    )

    def basis() -> Any:
        # The stamps as read before any row: never newer than the report.
        if facts is None or cache is None:
            return None
        return facts.basis(cache.stamps, store.session_parents())

    window = (ids, tree, since_ms, until_ms)
    return _rows_as_made("turn", rows, notes, store, cache, memo, window, basis)


def _steps_as_made(
    store: Any,
    cache: ReportCache | None,
    memo: tuple[str, list[Any]],
    fold: bool,
    tz: tzinfo | None,
    since_ms: int | None,
    until_ms: int | None,
    chosen: Callable[[], list[str]] | None = None,
) -> _RowsAsMade:
    """The report by step of every top-level session (and every subagent: a step names
    the session it was made in; ``chosen``: of the sessions a window chose, and theirs),
    its rows as they are asked for: read from its memo, the
    last report brought up to date (all time: ``_steps_brought_up_to_date``), or made
    (``_grouped``: every inference read, set aside in sorted runs, and merged in order).
    With ``cache``, spooled to the memo as ``_turns_as_made`` spools its rows.
    A row is about 0.7 KB held: at 100,000 sessions, held whole, a report by step took
    1.8 GB."""
    all_time = since_ms is None and until_ms is None
    bring = _steps_brought_up_to_date if all_time else None
    recalled = _recalled(store, cache, "step", memo, bring)
    if recalled is not None:
        return recalled
    tree, ids = _tops(store, fold, chosen)
    dedupe = len(ids) > 1
    # What pending undos undid, found before the rows: each row says so as it goes.
    undone = _undone_in(store, ids, tree, since_ms, until_ms, cache)
    made: _StepRows = _grouped(  # type: ignore[assignment]  # by step: always
        store,
        ids,
        by="step",
        fold=fold,
        tz=tz,
        tree=tree,
        dedupe=dedupe,
        since=since_ms,
        until=until_ms,
        cache=cache,
    )
    notes = list(made.notes)
    named = _Named()

    def basis() -> Any:
        # The fork rule's findings by session, for the next report to be brought up to
        # date from: read once more, and kept only where they say what the steps'
        # reading said, and where every step has an id (the order of those without one
        # is the table's).
        if since_ms is not None or until_ms is not None or cache is None or not named.all:
            return None
        facts = _TurnFacts()
        if dedupe:
            copies = _forked_copies(store, {*ids, *descendants(ids, tree)}, None)
            facts.copies = copies
            facts.by_family = notes == ([copies.note] if copies.note is not None else [])
        return facts.basis(cache.stamps, store.session_parents())

    rows = _steps_marked(named.each(_steps_judged(made.rows, store, tree)), undone)
    window = (ids, tree, since_ms, until_ms)
    return _rows_as_made("step", rows, notes, store, cache, memo, window, basis, undone)


class _Named:
    """Whether every row given through ``each`` had a message id (a string)."""

    def __init__(self) -> None:
        self.all = True

    def each(self, rows: Iterable[UsageRow]) -> Iterator[UsageRow]:
        for row in rows:
            if type(row.message_id) is not str:
                self.all = False
            yield row


def _steps_judged(
    rows: Iterable[UsageRow], store: Any, tree: dict[str, list[str]]
) -> Iterator[UsageRow]:
    """``rows``, those in flight of a stale session judged so (``_judge_staleness``)."""
    states: dict[str, Any] = {}
    for row in rows:
        if row.in_flight:
            _judge_staleness(store, (row,), tree, None, states)
        yield row


def _steps_marked(rows: Iterable[UsageRow], undone: dict[str, Any]) -> Iterator[UsageRow]:
    """``rows``, as they go, those of the inferences a pending undo undid (``undone``:
    ``_undone_in``'s findings) saying so."""
    if not undone:
        yield from rows
        return
    ids = {mid for u in undone.values() for mid in u.message_ids}
    for row in rows:
        if row.message_id in ids:
            row.undone_inferences, row.undone_cost = 1, row.cost
        yield row


def _rows_as_made(
    by: str,
    rows: Iterator[UsageRow],
    notes: list[str],
    store: Any,
    cache: ReportCache | None,
    memo: tuple[str, list[Any]],
    window: tuple[Sequence[str], dict[str, list[str]], int | None, int | None],
    basis: Callable[[], Any],
    undone: dict[str, Any] | None = None,
) -> _RowsAsMade:
    """``rows`` (whose notes ``notes`` is once they are given) as a report made as it
    goes: totalled as they pass, what pending undos undid said at the end (``_say_undone``
    of the sessions, tree and window ``window``; ``undone``: found already), and, with
    ``cache``, spooled to the memo of ``memo`` and kept with ``basis()`` when no reply
    is in flight."""
    tail: list[UsageReport] = []

    def each() -> Iterator[UsageRow]:
        totaller = _Totaller()
        busy = False
        spool = cache.memo_spool(*memo, "rows", UsageRow) if cache is not None else None
        try:
            for row in rows:
                totaller.add(row)
                busy = busy or bool(row.in_flight)
                if spool is not None:
                    spool.add_item(row)
                yield row
            report = UsageReport(
                by=by, rows=[], total=totaller.total(), notes=list(notes), stored=True
            )
            _say_undone(store, report, *window, cache, undone=undone)
            tail.append(report)
            if cache is not None:
                cache.settle()  # a ledger written aside (pending undos') is in place
            if spool is not None and not busy:
                spool.keep(None, [report.total, report.notes, basis()])
        finally:
            if spool is not None:
                spool.discard()
            close = getattr(rows, "close", None)
            if close is not None:
                close()  # a merge's runs let go at once

    return _RowsAsMade(by, each(), lambda: tail[0], None if cache is None else str(cache.folder))


# The reports made, and written, a row at a time: by turn or step, of every session or of
# the sessions a window alone chose (``_rows_memo``).
_ROW_AT_A_TIME: dict[str, Callable[..., _RowsAsMade]] = {
    "turn": _turns_as_made,
    "step": _steps_as_made,
}


def _unread_rows_note(rows: int) -> str:
    return (
        f"{rows} message row(s) could not be read (not JSON, or no user or assistant role); "
        "not counted"
    )


def store_usage(
    store: Any,
    session_ids: Sequence[str],
    *,
    by: str = "turn",
    fold: bool = True,
    tz: tzinfo | None = None,
    cross_session: bool = False,
    since_ms: int | None = None,
    now_ms: float | None = None,
    cache: ReportCache | None = None,
    until_ms: int | None = None,
    memo: bool = True,
) -> UsageReport:
    """Usage of stored sessions (``session_ids`` top-level, in order); with ``since_ms``,
    of their inferences created at or after it (and the subagents those spawned). A row in
    flight whose session (or a subagent of it) was not written for a while is ``stale``
    instead, judged at ``now_ms`` (default: the clock), as ``sessions`` judges it.
    ``cache`` (``ReportCache.open(store)``): the report cache; the report is the same
    with or without it. ``memo``: whether the cache keeps the report, and answers from
    it, under these sessions (``stored_usage`` keeps one of every session under its own
    name, and only that one: a large report's memo is written once)."""
    if by not in BY_STORE:
        raise GroupingError(f"unknown grouping {by!r}: one of {', '.join(BY_STORE)}")
    if cache is not None and now_ms is None and not memo:
        try:
            return _store_usage(
                store,
                session_ids,
                by,
                fold,
                tz,
                cross_session,
                (since_ms, until_ms),
                cache,
            )
        finally:
            cache.settle()  # the ledger written aside is in place
    if cache is not None and now_ms is None:
        request = [
            cache_digest(list(session_ids)),
            by,
            fold,
            _zone(tz),
            cross_session,
            since_ms,
            stale_after_ms(),
            until_ms,
        ]
        kept = cache.recall("usage", request, UsageReport)
        if kept is not None:
            return kept
        window = (since_ms, until_ms)
        try:
            report = _store_usage(store, session_ids, by, fold, tz, cross_session, window, cache)
            if not any(row.in_flight for row in report.rows):  # busy would turn stale
                cache.remember("usage", request, report)
        finally:
            cache.settle()  # the ledger written aside is in place
        return report
    window = (since_ms, until_ms)
    return _store_usage(store, session_ids, by, fold, tz, cross_session, window, None, now_ms)


def _store_usage(
    store: Any,
    session_ids: Sequence[str],
    by: str,
    fold: bool,
    tz: tzinfo | None,
    cross_session: bool,
    window: tuple[int | None, int | None],
    cache: ReportCache | None,
    now_ms: float | None = None,
) -> UsageReport:
    since_ms, until_ms = window
    tree = store.children()
    if fold:
        session_ids = _outermost(session_ids, tree)
    cross_session = cross_session and len(session_ids) > 1  # a subagent named too is not
    if by == "turn":
        rows, notes = _turn_report(
            store,
            session_ids,
            fold=fold,
            tree=tree,
            dedupe=cross_session,
            since=since_ms,
            until=until_ms,
            now_ms=now_ms,
        )
        report = UsageReport(by=by, rows=rows, total=_total(rows), notes=notes, stored=True)
        _say_undone(store, report, session_ids, tree, since_ms, until_ms, cache)
        return report
    report = _grouped(
        store,
        session_ids,
        by=by,
        fold=fold,
        tz=tz,
        tree=tree,
        dedupe=cross_session,
        since=since_ms,
        until=until_ms,
        cache=cache,
    )
    if isinstance(report, _StepRows):
        rows = list(report.rows)
        report = UsageReport(by=by, rows=rows, total=_total(rows), notes=report.notes, stored=True)
    _judge_staleness(store, report.rows, tree, now_ms)
    _say_undone(store, report, session_ids, tree, since_ms, until_ms, cache)
    return report


def _say_undone(
    store: Any,
    report: UsageReport,
    session_ids: Sequence[str],
    tree: dict[str, list[str]],
    since_ms: int | None,
    until_ms: int | None = None,
    cache: ReportCache | None = None,
    *,
    undone: dict[str, Any] | None = None,
) -> None:
    """What pending undos undid among the report's sessions (subagents included), which
    the report counts as OpenCode does: a note, the total's ``undone_*`` fields, and those
    of each ``--by session`` and ``--by step`` row (a subagent's in the row it folds
    into). ``undone``: ``_undone_in``'s findings, when found already."""
    from .undone import note

    if undone is None:
        undone = _undone_in(store, session_ids, tree, since_ms, until_ms, cache)
    if not undone:
        return
    parent = {child: sid for sid, children in tree.items() for child in children}
    found = list(undone.values())
    steps = sum(u.inferences for u in found)
    report.total.undone_inferences = steps
    report.total.undone_cost = summed_cost(sum(u.cost for u in found), steps)
    report.notes = [*report.notes, note(found) or ""]
    if report.by == "step":
        for _row in _steps_marked(report.rows, undone):
            pass
        return
    if report.by != "session":
        return
    rows = {row.session_id: row for row in report.rows}
    for sid, figures in undone.items():
        owner, seen = sid, {sid}
        while owner not in rows and owner in parent and parent[owner] not in seen:
            owner = parent[owner]
            seen.add(owner)
        row = rows.get(owner)
        if row is not None:
            row.undone_inferences = (row.undone_inferences or 0) + figures.inferences
            row.undone_cost = summed_cost(
                (row.undone_cost or 0.0) + figures.cost, row.undone_inferences
            )


def _undone_in(
    store: Any,
    session_ids: Sequence[str],
    tree: dict[str, list[str]],
    since_ms: int | None,
    until_ms: int | None,
    cache: ReportCache | None,
) -> dict[str, Any]:
    """What pending undos undid (``undone_figures``) in ``session_ids`` and the sessions
    below them: {} in the usual case, where nothing more is read."""
    from .undone import pending_reverts, undone_figures

    reverts = pending_reverts(store)
    if not reverts:
        return {}
    parent = {child: sid for sid, children in tree.items() for child in children}
    chosen = set(session_ids)

    def in_report(sid: str) -> bool:  # the session or one above it was chosen
        seen = set()
        while sid not in chosen and sid in parent and sid not in seen:
            seen.add(sid)
            sid = parent[sid]
        return sid in chosen

    family = {sid for sid in reverts if in_report(sid)}
    if not family:
        return {}
    return undone_figures(store, family, since_ms=since_ms, until_ms=until_ms, cache=cache)


def _judge_staleness(
    store: Any,
    rows: Sequence[UsageRow],
    tree: dict[str, list[str]],
    now_ms: float | None,
    states: dict[str, Any] | None = None,
) -> None:
    """Rows in flight of a session that is stale are ``stale``, not in flight: a reply a
    killed OpenCode left (``reports.stale``, the rule of ``sessions``). Only the session's
    newest reply, or a prompt newer than every reply, can be in flight
    (``stale.open_reply``): a row of an older reply left open, or a turn before the one in
    flight, is not; a turn whose prompt has no reply yet is in flight only while that
    prompt awaits it, no reply open (a prompt typed while a reply runs waits its turn).
    ``states``: each session's state as judged already, and what it has in
    flight (rows given a session at a time)."""
    from .stale import open_reply, stored_state

    if states is None:
        states = {}
    for row in rows:
        sid = row.session_id
        if not row.in_flight or not isinstance(sid, str):
            continue
        key = "reply:" + sid
        if key not in states:
            states[key] = open_reply(store, sid)  # type: ignore[assignment]
        newest: Any = states[key]
        if newest is None or (
            row.message_id != newest.message_id
            if type(row.message_id) is str  # a step's row
            else (not row.inferences and newest.message_id is not None)  # queued behind it
            or type(row.started) is int
            and type(newest.prompt_created) is int
            and row.started < newest.prompt_created  # a turn before the one in flight
        ):
            row.in_flight = False
            continue
        state = states.get(sid)
        if state is None:
            state = states[sid] = stored_state(store, sid, tree, now_ms=now_ms)
        if state == "stale":
            row.in_flight = False
            row.stale = True


def _outermost(session_ids: Sequence[str], tree: dict[str, list[str]]) -> list[str]:
    """``session_ids`` but those below another of them: a subagent chosen with its parent is
    folded into the parent's report, not listed a second time."""
    chosen = set(session_ids)
    if chosen.isdisjoint(child for children in tree.values() for child in children):
        return list(session_ids)  # none is anyone's subagent (every top-level session, say)
    below: set[str] = set()
    for sid in session_ids:
        if sid not in below:
            below.update(d for d in descendants([sid], tree) if d in chosen)
    return [sid for sid in session_ids if sid not in below]


class _DayOf:
    """Epoch ms → local date, cached per quarter hour, so a large report formats each
    quarter hour once, not each message. Today's offsets are all multiples of 15 minutes;
    a quarter hour in which a day begins all the same (an old offset such as Kiritimati's
    −10:40) is not cached: each of its times is formatted."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self.cache: dict[int, str] = {}

    def __call__(self, ms: Any) -> str:
        if type(ms) is not int:
            return _day(ms, self.tz) or "?"
        bucket = ms // 900_000
        day = self.cache.get(bucket)
        if day is None:
            day = _day(bucket * 900_000, self.tz) or "?"
            if day != (_day(bucket * 900_000 + 899_999, self.tz) or "?"):
                return _day(ms, self.tz) or "?"
            self.cache[bucket] = day
        return day


def _grouped(
    store: Any,
    session_ids: Sequence[str],
    *,
    by: str,
    fold: bool,
    tz: tzinfo | None,
    tree: dict[str, list[str]],
    dedupe: bool,
    since: int | None = None,
    cache: ReportCache | None = None,
    until: int | None = None,
) -> UsageReport | _StepRows:
    """Rows by step, session, model, agent or day, from assistant messages alone (by day
    or session, with ``cache``, from the ledger's sessions that did not change). By step,
    the rows as they are asked for, in order (``_StepRows``: sorted runs merged).

    One pass over the message rows; figures are summed into plain lists, since this loop
    runs once per message of the database. Rows that need more (steps, forked copies and
    their originals) take the slow path with a full decode.
    """
    owner: dict[str, str] = {}  # session → the top-level session it folds into
    for sid in session_ids:
        owner[sid] = sid
        for child in descendants([sid], tree):
            owner.setdefault(child, sid if fold else child)

    # The ledger: sessions whose groups the cache holds are not read, unless a row they
    # summed is at a fork copy's time (the copies' rule needs it) or, with ``since``, they
    # have inferences on both sides of it. It keeps all-time groups: a report since a time
    # uses them but does not add to them. Its entries stay in its file, read as they are
    # used (``LedgerEntries``): a large ledger is never held.
    use_ledger = cache is not None and by != "step"
    ledger_request = [_LEDGER_KIND.get(by), _zone(tz), dedupe, _LEDGER_FORMAT]
    # Forked history: messages older than their session. They are held aside until we
    # know whether their original is in the database too (then they are not counted).
    window = (since, until)
    directories = _directories(store, session_ids) if by == "project" else {}
    label = _fold_label(by, owner, directories)  # of every session of the report
    kept = _kept_sessions(
        store,
        cache if use_ledger else None,
        ledger_request,
        owner,
        window,
        dedupe,
        _Folding(label, by in _SHARED),
    )
    entries = kept.entries
    copy_ids, copy_prints, copy_times = kept.copy_ids, kept.copy_prints, kept.copy_times

    day_of = _DayOf(tz)
    every_owner = owner
    if kept.used or kept.empty:  # the sessions whose entries are folded in, or count nothing
        unread_sids = [sid for sid in owner if sid not in kept.used and sid not in kept.empty]
        if not _reads_all(len(unread_sids), len(every_owner)):
            owner = {sid: owner[sid] for sid in unread_sids}
        else:
            kept = kept._replace(used=set(), empty=set(), folded=_FromLedger({}, {}, [], set()))
    everything = len(owner) >= WHOLE_TABLE_SESSIONS and not (kept.used or kept.empty)
    # By day, week or month with no ledger to write, a day's sums need not be kept per
    # session: the scan's memory is then the days', whatever the number of sessions.
    keeps = use_ledger and since is None and until is None  # the ledger keeps all-time groups
    # The entries wait in a file of the cache's (``Spill``), not in memory, until kept.
    spill = cache.spill() if keeps and cache is not None else None
    scan = _Scan(
        by,
        owner,
        copy_ids,
        copy_times,
        since,
        until,
        per_session=by not in _BY_DATES or keeps,
        copy_prints=copy_prints,
        ledger=keeps,
        spill=spill,
    )
    if by == "step":
        scan.runs = SortedRuns(UsageRow, _step_order, None if cache is None else str(cache.folder))
    if everything and _runs_shared(scan) and _parallel_scan(store, scan, day_of):
        pass  # the workers' sums and slow rows are in ``scan``
    elif everything and _scan_here(store, scan, day_of):
        pass  # this process read the table chunk by chunk
    else:
        if everything and offers_fast_scans(store):
            batches = store.assistant_batches()
            rows: Iterable[tuple[str, str, Any, bytes]] = itertools.chain.from_iterable(batches)
        else:
            rows = _message_rows(store, None if everything else list(owner))
        scan.run(rows, day_of)

    scan.finish(day_of)
    steps = scan.steps_left() if by == "step" else []  # and its copies in ``scan.copies``
    groups, ready = scan.groups, scan.ready
    scan.groups = {}  # emptied as they are folded into the report's (``_fold_days``)
    if use_ledger:
        if keeps:  # kept by a forked child while the report is made (``store_usage`` waits)
            found = (scan.entries, spill, owner, entries, kept.used, scan.irregular, kept.forks)
            # the ledger's size: the sessions read now and those kept as they were
            written = len(owner) + len(kept.used)
            cache.aside(lambda: _keep_days(cache, ledger_request, *found), written)  # type: ignore[union-attr]
            if spill is not None:
                spill.close()  # a child keeping the ledger has its own
        owner = every_owner
    entries.close()
    from_ledger = kept.folded  # the entries used, folded in as they were decided on
    copies: list[tuple[bytes, Any, Any, Any]] = from_ledger.copies
    originals: set[bytes] = scan.originals | from_ledger.originals
    for mid, key, fingerprint, figures in ready:
        if mid in copy_ids:
            copies.append((fingerprint, key, figures, mid))
            continue
        if copy_ids and fingerprint in copy_prints:
            originals.add(fingerprint)
        _add_sums(groups, key, figures)

    notes: list[str] = []
    skipped, skipped_costs = 0, []  # summed exactly: the note reads the same in any order
    unpacked = _unpacked_step if by == "step" else _unpacked
    stand_in = _stand_ins(itertools.chain(copies, scan.copies), originals)
    for fingerprint, key, held, mid in itertools.chain(copies, scan.copies):
        figures = unpacked(held)  # one at a time: a large database has many
        if fingerprint in originals or stand_in[fingerprint] != mid:
            skipped += 1
            skipped_costs.extend([figures.cost] if by == "step" else figures[6])
        elif by == "step":
            steps.append(figures)
        else:
            _add_sums(groups, key, figures)
    if skipped:
        notes.append(
            f"{skipped} forked cop{'y' if skipped == 1 else 'ies'} of earlier "
            f"inferences not counted again (${_fsum(skipped_costs):.4f})"
        )
    if scan.unread:
        notes.append(_unread_rows_note(scan.unread))
    if by == "step":
        _in_step_order(steps)
        return _StepRows(_steps_merged(scan.runs, steps), notes)  # type: ignore[arg-type]
    windowed = since is not None or until is not None
    shares = _subagent_shares(groups, owner, windowed, from_ledger.shares) if by in _SHARED else {}
    if by == "project":  # a project's share: its top sessions' shares together
        shares = _by_project(shares, directories)
    groups = _fold_days(groups, label, from_ledger.folded)  # into the report's groups
    result = [_group_row(by, key, _sums(groups.pop(key))) for key in list(groups)]  # let go
    result.sort(key=_sort_key(by))
    for row in result:
        row.cost = summed_cost(row.cost, _figures_in(row))
    if by in _SHARED:
        for row in result:  # a folded row says which part is its subagents'
            share = shares.get((row.session_id if by == "session" else row.project) or "")
            if share is not None:
                sessions, inferences, tokens, costs = share
                row.subagent_sessions, row.subagent_inferences = len(sessions), inferences
                row.subagent_tokens = tokens
                # as many of OpenCode's costs as inferences (``costs`` may be fewer terms)
                row.subagent_cost = summed_cost(_fsum(costs), inferences)
    return UsageReport(by=by, rows=result, total=_total(result), notes=notes, stored=True)


_STEP_RUN = 20_000  # steps sorted and set aside at a time (about 15 MB held)


def _runs_shared(scan: _Scan) -> bool:
    """Whether workers can read for ``scan``: by step, once its runs' file is made for
    them to set their runs aside in too, and can be locked (else the steps are read
    here, the file as it was)."""
    if scan.runs is None:
        return True
    if worker_count() < 2:
        return False  # one process: no file to share, no lock to take
    try:
        scan.runs.share()
    except OSError:
        return False
    return True


def _step_order(row: UsageRow) -> tuple[int, str]:
    """A ``--by step`` row's place: by time, then id (one without either first)."""
    return (row.started or 0, row.message_id or "")


def _in_step_order(steps: list[UsageRow]) -> None:
    # Two stable sorts, whose keys are the rows' own values, not a tuple made for each row:
    # the order ``_step_order`` gives.
    steps.sort(key=lambda r: r.message_id or "")
    steps.sort(key=lambda r: r.started or 0)


class _StepRows(NamedTuple):
    """A report by step as ``_grouped`` makes it: its rows as they are asked for, in order,
    and its notes."""

    rows: Iterator[UsageRow]
    notes: list[str]


def _steps_merged(runs: SortedRuns, last: list[UsageRow]) -> Iterator[UsageRow]:
    """The rows of ``runs`` and then of ``last`` (in order), merged, each row's cost
    rounded as OpenCode's costs it adds up are (``summed_cost``); the runs' file let go
    at the end (or when the rows are no longer asked for)."""
    try:
        for row in runs.merged(last):
            row.cost = summed_cost(row.cost, _figures_in(row))
            yield row
    finally:
        runs.close()


def _by_project(
    shares: dict[str, list[Any]], directories: dict[str, str | None]
) -> dict[str, list[Any]]:
    """The sessions' subagent shares summed per project (the top session's directory, as
    ``_fold_label`` files their groups)."""
    projects: dict[str, list[Any]] = {}
    for top, (sessions, inferences, tokens, costs) in shares.items():
        found = projects.setdefault(directories.get(top) or "?", [set(), 0, 0, array("d")])
        found[0] |= sessions
        found[1] += inferences
        found[2] += tokens
        found[3].extend(costs)
    return projects


def _subagent_shares(
    groups: dict[Any, list[Any]],
    owner: dict[str, str],
    windowed: bool,
    kept: dict[str, list[Any]],
) -> dict[str, list[Any]]:
    """Per session a ``--by session`` row folds others into (``owner``): its subagent
    sessions, their inferences, tokens and each inference's cost, from the groups by
    (session, day) read, and the ledger's (``kept``, as ``_folder`` found them). The
    sessions are all those folded in, or, in a window of time, those with an inference in
    it (as ``--by turn`` counts them)."""
    shares: dict[str, list[Any]] = {}

    def share(top: str) -> list[Any]:
        found = shares.get(top)
        if found is None:
            found = shares[top] = [set(), 0, 0, array("d")]
        return found

    if not windowed:
        for sid, top in owner.items():
            if sid != top:
                share(top)[0].add(sid)
    for (sid, _day), packed in groups.items():
        top = owner.get(sid, sid)
        if top != sid:
            acc = _sums(packed)
            found = share(top)
            found[0].add(sid)
            found[1] += acc[7]
            found[2] += acc[5]
            found[3].extend(acc[6])
    for top, (sessions, inferences, tokens, costs) in kept.items():
        found = share(top)
        found[0] |= sessions
        found[1] += inferences
        found[2] += tokens
        found[3].extend(costs)
    return shares


class _FromLedger(NamedTuple):
    """What the entries a report uses give it (``_folder``): their groups folded into
    the report's, the shares of their subagents (as ``_subagent_shares`` makes them), and
    of their held rows, the forked copies (packed, as ``_grouped`` holds copies) and the
    fingerprints of those that are a copy's original."""

    folded: dict[Any, bytes | list[Any]]  # a group packed (``_light_kept``) or its sums
    shares: dict[str, list[Any]]
    copies: list[tuple[bytes, Any, bytes | list[Any], Any]]
    originals: set[bytes]


class _Folding(NamedTuple):
    """How the entries a report uses are folded into its groups (``_folder``): each
    session's group by ``label`` (of the session and its day, model or agent), and with
    ``shared`` its subagents' share too."""

    label: Callable[[str, Any], Any]
    shared: bool


def _reads_all(unread: int, sessions: int) -> bool:
    """Whether a report of ``sessions`` reads them all rather than the ``unread`` ones
    the ledger does not stand for: reading many by their index costs more than the
    whole tables."""
    return unread >= max(WHOLE_TABLE_SESSIONS, sessions // 10)


def _folder(
    folding: _Folding, owner: dict[str, str], copy_ids: set[str], copy_prints: set[bytes]
) -> tuple[_FromLedger, Callable[[str, SessionDays], None]]:
    """What the entries a report uses give it, and the fold that adds one entry (a
    session's, decoded) as it comes: the report's groups (``label``), each with its costs
    in a few terms of their exact sum (``_bounded``), and with ``shared`` the subagents'
    shares. A held row is counted as a read row is (``_grouped``): a forked copy waits for
    the end, packed; any other is added now, its fingerprint noted if a copy has it. An
    entry is not held beyond its fold; a figure of another type than we write (only in a
    file made so on purpose) is a ``TypeError``, ``ValueError`` or ``IndexError``."""
    found = _FromLedger({}, {}, [], set())
    folded, shares, copies, originals = found
    label, shared = folding

    def add(sid: str, top: str, key: Any, first: Any, ints: Any, costs: Any) -> None:
        acc = folded.get(key)
        if acc is None:  # packed at once where it can be (a session by itself, one day)
            packed = _light_kept(ints, first, costs)
            if packed is not None:
                folded[key] = packed
            else:
                acc = folded[key] = _new_sums(first)
                _add_counts(acc, ints, first, costs, _FOLDED_COSTS)
        else:
            _add_counts(_sums_at(folded, key, acc), ints, first, costs, _FOLDED_COSTS)
        if shared and top != sid:
            share = shares.get(top)
            if share is None:
                share = shares[top] = [set(), 0, 0, array("d")]
            share[0].add(sid)
            share[1] += ints[6]
            share[2] += ints[5]
            share[3].extend(costs)
            if len(share[3]) > _FOLDED_COSTS:
                share[3] = _bounded(share[3])

    def fold(sid: str, days: SessionDays) -> None:
        top = owner.get(sid, sid)
        for mid, day, fingerprint, sums in days.held:
            if mid in copy_ids:
                copies.append((fingerprint, (sid, day), _packed(sums), mid))
                continue
            if copy_ids and fingerprint in copy_prints:
                originals.add(fingerprint)
            counts = (*sums[:6], sums[7])
            add(sid, top, label(sid, day), sums[8], counts, array("d", sums[6]))
        for group, ints, costs, first, _times in days.days:
            add(sid, top, label(sid, group), first, ints, _floats(costs))

    return found, fold


# Costs a group folded from the ledger holds before they are put in fewer terms: more than
# a scan's groups (``_COMPACT_AT``), since putting them so costs three sums of each (a
# day's are held, 512 KB at most, rather than summed thrice as each session comes).
_FOLDED_COSTS = 1 << 16


def _forked_copies_of(
    store: Any, forks: set[str] | None, held: dict[str, SessionDays], found: set[str]
) -> Iterator[tuple[str, Any, bytes]]:
    """(message id, time, fingerprint) of every assistant message older than its session
    (a fork's copy). ``forks``: the store's forks, where a ledger is read (else None: every
    copy is read, and the sessions they are in, the forks, are added to ``found``); one the
    ledger holds (``held``: its entry) names its copies among its held rows, any other
    fork's are read."""
    unread = None
    if forks is not None:
        created = store.sessions_created(forks)
        unread = [sid for sid in forks if sid not in held]
        for sid, entry in held.items():
            start = created.get(sid)
            # Held rows the full read would not take for copies (no usable time, or not
            # decoded whole: no fingerprint) leave the question to the rows.
            if type(start) is not int or any(type(h[3][8]) is not int for h in entry.held):
                unread.append(sid)
                continue
            for mid, _day, fingerprint, sums in entry.held:
                if fingerprint and sums[8] < start and type(mid) is str:  # an id names a copy
                    yield mid, sums[8], fingerprint
        if not unread:
            return
    rows = (
        _older_than_session(store) if unread is None else store.messages_older_than_session(unread)
    )
    for sid, mid, created, data in rows:
        if unread is None:
            found.add(sid)
        if type(mid) is not str:  # a damaged id (NULL, a blob) names no copy
            continue
        try:
            info = _read_message(data)
        except _UNREADABLE:
            continue
        if info.role == "assistant":
            yield mid, created, _fingerprint(info)


class SessionDays(Struct, array_like=True, gc=False):
    """What a grouped ``usage`` keeps of a session in the report cache: per day (in the
    report's zone; by day or session), per model or per agent, its sums (input, output,
    reasoning, cache read, cache write, total, inferences), each inference's cost, its
    first inference's time and every inference's time (whether a fork's copy may be of
    one of them). Costs and times are packed (native doubles and 64-bit integers): a large
    ledger decodes into a few objects per group, not one per inference. First, its
    ``span`` (``_session_days`` works it out): what a report decides on before it reads
    the database, read without the rest (``_EntryHead``)."""

    span: _Span
    days: list[tuple[str, list[int], bytes, int | None, bytes]]
    # Rows held for the forks' rule (at a copy's time when read): (message id, day,
    # fingerprint, sums), put through the rule again with every report.
    held: list[tuple[Any, str, bytes, list[Any]]] = []


class _Span(Struct, array_like=True, gc=False):
    """The times of a ledger entry's inferences: the earliest and latest its groups summed,
    and of its held rows; ``timeless``: one of them has no time (it counts in any window);
    ``fork``: the session was a fork (``Store.forks``' rule) when it was read, so a report
    finds the forks among the sessions that did not change from the ledger, not by probing
    every session's messages (a fork is one only by its own rows, which move its stamp)."""

    low: int | None = None
    high: int | None = None
    held_low: int | None = None
    held_high: int | None = None
    timeless: bool = False
    fork: bool = False


class _EntryHead(Struct, array_like=True, gc=False):
    """A ledger entry's span alone (``SessionDays``'s first field): the rest is skipped."""

    span: _Span


def _session_days(
    days: list[tuple[str, list[int], bytes, int | None, bytes]],
    held: list[tuple[Any, str, bytes, list[Any]]],
    span: _Span | None = None,
) -> SessionDays:
    """A session's ledger entry, its span worked out (that of its ``days`` given as
    ``span`` where the caller has it)."""
    if span is None:
        span = _Span()
        for group in days:
            times = _ints(group[4])
            low, high = (min(times), max(times)) if times else (None, None)
            _widen(span, low, high, len(times) != group[1][6])
    for row in held:
        t = row[3][8]
        if type(t) is not int:
            span.timeless = True
            continue
        span.held_low = t if span.held_low is None else min(span.held_low, t)
        span.held_high = t if span.held_high is None else max(span.held_high, t)
    return SessionDays(span, days, held)


def _widen(span: _Span, low: int | None, high: int | None, timeless: bool) -> None:
    """``span`` made to take in a group's times, from ``low`` to ``high`` (None: none)."""
    if timeless:
        span.timeless = True
    if low is not None and high is not None:
        span.low = low if span.low is None else min(span.low, low)
        span.high = high if span.high is None else max(span.high, high)


# The shape of SessionDays: a new one, a new ledger (3: its span first; 4: a fork says so)
_LEDGER_FORMAT = 4
_ENTRY_ENCODER = msgspec.msgpack.Encoder()  # as the cache encodes: its bytes are kept as they are
_ENTRY = msgspec.msgpack.Decoder(SessionDays)
_ENTRY_HEAD = msgspec.msgpack.Decoder(_EntryHead)
# One ledger serves day and session (a session's days); model and agent have their own (a
# session's models, its agents), in the same shape.
_LEDGER_KIND = {by: "days" for by in _BY_DAYS} | {"model": "models", "agent": "agents"}


class _DayTimes(Struct, array_like=True, gc=False):
    """A ledger entry's group with its times alone (``_EntryTimes``)."""

    group: msgspec.Raw
    sums: msgspec.Raw
    costs: msgspec.Raw
    first: msgspec.Raw
    times: bytes


class _EntryTimes(Struct, array_like=True, gc=False):
    """A ledger entry's groups' times alone (``SessionDays``): the rest is skipped."""

    span: msgspec.Raw
    days: list[_DayTimes]


_ENTRY_TIMES = msgspec.msgpack.Decoder(_EntryTimes)


class _Kept(NamedTuple):
    """The sessions a grouped report takes from the ledger's ``entries`` instead of reading
    them (``_kept_sessions``): ``used``, whose entries it folds in, and ``empty``, with
    nothing in its window of time; and what the forked copies' rule needs
    (``_forked_copies_of``), with the ``forks`` it found (each new entry says whether its
    session is one); and ``used``'s entries ``folded`` into the report's groups."""

    entries: LedgerEntries
    used: set[str]
    empty: set[str]
    copy_ids: set[str]
    copy_prints: set[bytes]
    copy_times: set[Any]
    forks: set[str]
    folded: _FromLedger


def _kept_sessions(
    store: Any,
    cache: ReportCache | None,
    request: list[Any],
    owner: dict[str, str],
    window: tuple[int | None, int | None],
    dedupe: bool,
    folding: _Folding,
) -> _Kept:
    """Which of the report's sessions (``owner``) the ledger of ``request`` stands for,
    read by their spans alone (the groups' times too where a fork's copy is at a time
    within a span; the whole entry only for a fork): not one that summed a row at a
    copy's time (the copies' rule needs that row), and in a ``window`` of time, only one
    whose inferences all count in it or none does. The ledger is read a group at a time,
    never held.

    The store's forks, where the copies' rule needs them: those the ledger's entries say
    are (their entries taken as the ledger is opened), and those among the sessions it has
    no entry for, from their messages. A fork outside the report counts too: a row of the
    report is an original only at a time a copy shares, wherever that copy is (as a full
    reading finds every copy), so a report of some sessions asks of every session with no
    entry, not only of its own."""
    forks: set[str] | None = None
    wanted = dedupe and hasattr(store, "forks")
    unseen = set(owner) if wanted and cache is not None else set()
    if unseen and len(unseen) < store.session_count():  # sessions outside the report
        unseen.update(store.session_ids())

    def fork(sid: str, entry: msgspec.Raw) -> bool:  # its entry taken first if so
        unseen.discard(sid)
        return _ENTRY_HEAD.decode(entry).span.fork

    entries = (
        LedgerEntries(None, 0)
        if cache is None
        else cache.ledger_entries("usage-days", request, pick=fork if wanted else None)
    )
    if wanted and entries.count:
        forks = set(entries.picked) | store.forks(list(unseen))
    unseen.clear()
    try:
        return _kept_of(store, entries, forks, owner, window, dedupe, folding)
    except (InputError, TypeError, ValueError, IndexError):  # a figure of another type than
        # we write, only in a file made so on purpose: let go, and every session read
        entries.close()
        if cache is not None:
            cache.drop_ledger("usage-days", request)
        return _kept_of(store, LedgerEntries(None, 0), None, owner, window, dedupe, folding)


def _kept_of(
    store: Any,
    entries: LedgerEntries,
    forks: set[str] | None,
    owner: dict[str, str],
    window: tuple[int | None, int | None],
    dedupe: bool,
    folding: _Folding,
) -> _Kept:
    """``_kept_sessions`` of the ledger's ``entries`` opened, ``forks`` the store's forks:
    each entry used is folded in as it is decided on (``_folder``), in the one pass."""
    copy_ids: set[str] = set()
    copy_prints: set[bytes] = set()
    found, fold = _folder(folding, owner, copy_ids, copy_prints)
    kept = _Kept(entries, set(), set(), copy_ids, copy_prints, set(), set(), found)
    if dedupe:
        held = {sid: entries.decoded(_ENTRY, entry) for sid, entry in entries.picked.items()}
        entries.picked.clear()
        reading = forks if entries.count and forks is not None else None
        if reading is not None:
            kept.forks.update(reading)
        for mid, created, fingerprint in _forked_copies_of(store, reading, held, kept.forks):
            kept.copy_ids.add(mid)
            kept.copy_prints.add(fingerprint)
            kept.copy_times.add(created)  # the row's column: what the scan compares
        # Let go before the entries are folded and the workers forked: the forks' entries,
        # read again with the others, held every copied inference (20 MB at 100,000
        # sessions, where a fork copies its whole history).
        held.clear()
    copy_times = kept.copy_times
    times = sorted({t for t in map(_whole_ms, copy_times) if t is not None})
    since, until = window
    windowed = since is not None or until is not None
    # Fewer entries than would spare the report reading every session: none is used.
    folds = not _reads_all(len(owner) - entries.count, len(owner))
    # The sessions passed over (neither used nor counting nothing): with those two, every
    # session met, so that one met twice is found without a set of them all.
    passed: set[str] = set()
    for sid, entry in entries.each():
        if sid not in owner:
            continue
        if sid in kept.used or sid in kept.empty or sid in passed:  # never a ledger of ours
            raise ValueError(f"session {sid!r} twice in the ledger")
        # All time, nearly every entry is used: decoded whole at once, not its span first.
        whole = entries.decoded(_ENTRY, entry) if folds and not windowed else None
        span = entries.decoded(_ENTRY_HEAD, entry).span if whole is None else whole.span
        if times and span.low is not None and span.high is not None:
            at = bisect.bisect_left(times, span.low)
            if at < len(times) and times[at] <= span.high:  # a copy's time in its span
                days = entries.decoded(_ENTRY_TIMES, entry).days
                if not all(copy_times.isdisjoint(_ints(day.times)) for day in days):
                    passed.add(sid)
                    continue
        counts = _counts_in(span, since, until) if windowed else True
        if counts is True:
            kept.used.add(sid)
            if folds:
                fold(sid, entries.decoded(_ENTRY, entry) if whole is None else whole)
        elif counts is False:
            kept.empty.add(sid)
        else:
            passed.add(sid)
    return kept


def _counts_in(span: _Span, since: int | None, until: int | None) -> bool | None:
    """Whether a ledger entry counts in the window from ``since`` to ``until``: whole
    (True), when every inference does; not at all (False), when none does; else (some in
    and some out, or one with no time, which counts either way) None: read again."""
    if span.timeless:
        return None
    low, high = span.low, span.high
    if span.held_low is not None and span.held_high is not None:
        low = span.held_low if low is None else min(low, span.held_low)
        high = span.held_high if high is None else max(high, span.held_high)
    if high is None or (since is not None and high < since):
        return False
    if until is not None and low is not None and low > until:
        return False
    if low is not None and (since is None or low >= since) and (until is None or high <= until):
        return True
    return None


def _whole_ms(value: Any) -> int | None:
    """The integer a copy's time equals, if any: a group's times are integers, and ``1.0``
    or ``True`` equal one as set members do."""
    if type(value) is int or type(value) is bool:
        return int(value)
    if type(value) is float and value.is_integer():
        return int(value)
    return None


class _EncodedPart(NamedTuple):
    """The ledger entries of the sessions one part of the table holds (``_Scan.finish``
    encodes them where the part was read): the sessions in the order their entries lie,
    each entry's length, and the entries' bytes (``data``), or where they begin in the
    scan's ``Spill`` (``start``). Two references a session: a large database's entries
    wait on disk, not as objects."""

    sids: list[str]
    sizes: array[int]
    start: int
    data: bytes | None

    def read(self, spill: Spill | None, at: int = 0, size: int | None = None) -> bytes:
        """The entries' bytes, or ``size`` of them from ``at``."""
        if size is None:
            size = sum(self.sizes) - at
        if self.data is not None:
            return self.data[at : at + size]
        return spill.get(self.start + at, size)  # type: ignore[union-attr]


def _keep_days(
    cache: ReportCache,
    request: list[Any],
    parts: list[_EncodedPart],
    spill: Spill | None,
    read: dict[str, str],
    entries: LedgerEntries,
    used: set[str],
    irregular: set[str],
    forks: set[str],
) -> None:
    """Keep in the ledger every session just ``read`` (but the ``irregular`` ones, with a
    row that is not a message), its entry from the ``parts`` of the table it has rows in
    (kept as it is when in one, else joined; one of the ``forks`` says so), and the
    ``used`` ones' ``entries`` as they are."""

    # The entries go into the ledger one by one (``keep_ledger``), a part's bytes read at a
    # time: a large database's ledger is never held whole.
    def fresh(sid: str) -> bool:
        return sid in read and sid not in irregular and sid not in used

    seen: set[str] = set()
    # Sessions with rows in more than one part: where each of their entries lies (the
    # part, the offset in it, the length), joined once every part is read.
    spread: dict[str, list[tuple[int, int, int]]] = {}
    for part in parts:
        for sid in part.sids:
            if sid in seen:
                spread[sid] = []
            seen.add(sid)

    def pieces() -> Iterator[tuple[str, Any]]:
        for index, part in enumerate(parts):
            data = part.read(spill)
            at = 0
            for sid, size in zip(part.sids, part.sizes, strict=True):
                entry, at = data[at : at + size], at + size
                if not fresh(sid):
                    continue
                found = spread.get(sid)
                if found is not None:
                    found.append((index, at - size, size))
                elif sid in forks:
                    yield sid, _as_fork(_ENTRY.decode(entry))
                else:
                    yield sid, msgspec.Raw(entry)
        for sid, found in spread.items():
            if fresh(sid):
                joined = _joined([parts[i].read(spill, at, size) for i, at, size in found])
                yield sid, _as_fork(joined) if sid in forks else joined
        for sid in read:
            if sid not in seen and fresh(sid):  # read, and nothing to keep: kept as such
                yield sid, _as_fork(_NOTHING) if sid in forks else _NOTHING
        if used:
            for sid, entry in entries.each():
                if sid in used:
                    yield sid, entry

    # Closed whatever happens: a ``pieces`` left where the ledger's ``each`` pauses the
    # cycle collector would keep it paused as long as an error held it (a caller's).
    with contextlib.closing(pieces()) as given:
        cache.keep_ledger("usage-days", request, given)


_NOTHING = SessionDays(_Span(), [])


def _as_fork(entry: SessionDays) -> SessionDays:
    """``entry`` of a session that is a fork, saying so (a copy: ``_NOTHING`` is shared)."""
    return SessionDays(msgspec.structs.replace(entry.span, fork=True), entry.days, entry.held)


def _joined(parts: list[bytes]) -> SessionDays:
    """One session's ledger entry from those of the parts of the table it has rows in:
    a group in several parts summed (costs and times joined in the parts' order), the held
    rows of each in turn."""
    days: dict[str, list[Any]] = {}
    held: list[Any] = []
    for part in parts:
        entry = _ENTRY.decode(part)
        held += entry.held
        for group, ints, costs, first, times in entry.days:
            found = days.get(group)
            if found is None:
                days[group] = [list(ints), [costs], first, [times]]
                continue
            found[0] = [a + b for a, b in zip(found[0], ints, strict=True)]
            found[1].append(costs)
            if first is not None and (found[2] is None or first < found[2]):
                found[2] = first
            found[3].append(times)
    return _session_days(
        [
            (group, ints, b"".join(costs), first, b"".join(times))
            for group, (ints, costs, first, times) in days.items()
        ],
        held,
    )


def _floats(packed: bytes) -> array[float]:
    values = array("d")
    values.frombytes(packed)
    return values


def _ints(packed: bytes) -> array[int]:
    values = array("q")
    values.frombytes(packed)
    return values


def _directories(store: Any, session_ids: Sequence[str]) -> dict[str, str | None]:
    """Each session's directory, from its session row (one read of them all for many)."""
    if len(session_ids) > 64:  # one at a time where the store can: never every row held
        rows = store.each_session() if hasattr(store, "each_session") else store.sessions()
        return {row.id: row.directory for row in rows}
    found: dict[str, str | None] = {}
    for sid in session_ids:
        row = store.session(sid)
        found[sid] = row.directory if row is not None else None
    return found


def _fold_label(
    by: str, owner: dict[str, str], directories: dict[str, str | None]
) -> Callable[[str, Any], Any]:
    """The report's key of a session's group (its day, model or agent)."""
    if by == "session":
        return lambda sid, group: owner.get(sid, sid)
    if by == "project":
        return lambda sid, group: directories.get(owner.get(sid, sid)) or "?"
    if by == "week":
        return lambda sid, group: _week_of(group)
    if by == "month":
        return lambda sid, group: group[:7] if _DATE.match(group) else "?"
    return lambda sid, group: group


def _week_of(day: str) -> str:
    """The ISO 8601 week of a day (``2026-W48``); ``?`` for a day that is no date."""
    if not _DATE.match(day):
        return "?"
    year, week, _weekday = date.fromisoformat(day).isocalendar()
    return f"{year}-W{week:02d}"


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")


def _fold_days(
    groups: dict[Any, bytes | list[Any]],
    label: Callable[[str, Any], Any],
    kept: dict[Any, bytes | list[Any]],
) -> dict[Any, bytes | list[Any]]:
    """Groups by (session, day, model or agent) folded into the report's (``label``: by
    day, model or agent, or by the session each folds into), then the ledger's, folded
    already (``_folder``). ``groups`` and ``kept`` are emptied as they are folded: a
    report by session holds a group per session twice else, and the caller's ``kept``
    would keep every ledger group alive while the rows are made of them."""
    folded: dict[Any, bytes | list[Any]] = {}
    # The report's rows need each group's first time, not all its times. A report's group
    # of one packed group (``_light``: integer counts, no times) is that group as it is,
    # as adding it to a new group would make it; a second one added unpacks it.
    for sid, group in list(groups):
        acc = groups.pop((sid, group))
        key = label(sid, group)
        into = folded.get(key)
        if into is None:
            if type(acc) is bytes:
                folded[key] = acc
                continue
            into = folded[key] = _new_sums(None)
        _add_figures(_sums_at(folded, key, into), _sums(acc))
    for key in list(kept):
        acc = kept.pop(key)
        into = folded.get(key)
        if into is not None:  # the smaller added to the larger, in the report's place
            acc = _sums(acc)
            _add_figures(acc, _sums(into), _FOLDED_COSTS)
        folded[key] = acc
    return folded


def _step_row(
    sid: str, mid: str, created: Any, full: UsageMessage, labels: dict[str, str]
) -> UsageRow:
    """One inference as a ``--by step`` row; ``labels``: the strings rows have in common
    (a session's id, a model, an agent, a reason), one copy of each for all of them."""
    shared = labels.setdefault
    figures = _figures(full)
    figures.started = created if type(created) is int else None
    figures.session_id = shared(sid, sid) if type(sid) is str else sid
    figures.message_id = mid if type(mid) is str else None  # a damaged id (NULL, a blob): none
    model = model_label(full.providerID, full.modelID, missing=None)
    figures.model = None if model is None else shared(model, model)
    figures.agent = shared(full.agent, full.agent) if isinstance(full.agent, str) else None
    figures.reason = shared(full.finish, full.finish) if isinstance(full.finish, str) else None
    completed = full.time.completed if full.time else None
    if type(completed) is not int:  # in flight: no completed time (whatever its row's time)
        figures.in_flight = True
    elif figures.started is not None:
        figures.duration_ms = completed - figures.started
    return figures


# A count within a 64-bit integer, checked in C: one beyond is damage (``figures``), and a
# message holding one is read by the rule instead (it fails to decode here).
_Count = Annotated[int, msgspec.Meta(ge=-INT64, le=INT64)]


class _FastCache(Struct, gc=False):
    read: _Count = 0
    write: _Count = 0


class _FastTokens(Struct, gc=False):
    total: _Count | None = None
    input: _Count = 0
    output: _Count = 0
    reasoning: _Count = 0
    cache: _FastCache = msgspec.field(default_factory=_FastCache)


class _FastFigures(Struct, gc=False, tag_field="role", tag="assistant"):
    """An assistant message whose figures are all plain JSON numbers, or no match: a
    stricter ``MessageFigures``. What it accepts, ``MessageFigures`` reads to the same sums
    (a missing token count is 0 there too; a missing cost, 0.0 here, changes no sum);
    anything else (a float or text where a count belongs, a null, another role, no
    ``tokens``, a second ``role``) fails to decode here, and the row is read the lenient
    way."""

    tokens: _FastTokens
    cost: int | float = 0.0


class _FastUser(Struct, gc=False, tag_field="role", tag="user"):
    """A user's message that ``MessageFigures`` reads too (the same fields, as leniently),
    so that ``run`` would skip it: one OpenCode wrote starting ``{"time":…`` (a ``!shell``
    command's), which the SQL prefix test lets through. A chunk skips it as well."""

    cost: Any = None
    tokens: Tokens | None = None


_FAST_FIGURES = msgspec.json.Decoder(_FastFigures | _FastUser)
_INTS = msgspec.json.Decoder(list[int])
_STRS = msgspec.json.Decoder(list[str])

# Assistant messages: every row that does not plainly hold a user's (OpenCode writes those
# starting {"role":"user",; a writer that spaces its JSON, {"role": "user",). Each pair of
# comparisons says what substr(data, 1, n) != that prefix says (the first text after every
# text with the prefix ends it in - instead of ,), in a memcmp instead of a character
# count; NULL data is left out by both.
_NOT_USER = (
    '(data < \'{"role":"user",\' OR data >= \'{"role":"user"-\') '
    'AND (data < \'{"role": "user",\' OR data >= \'{"role": "user"-\')'
)
_ROWS_SQL = (
    "SELECT session_id, id, time_created, CAST(data AS BLOB) FROM message "
    f"WHERE rowid >= ? AND rowid < ? AND {_NOT_USER}"
)
# The same rows as one row: their number, JSON arrays of their session ids and times, their
# data joined by newlines, and whether every row's data starts with { and ends with }.
# Python then builds a few objects per chunk instead of four per message, and decodes all
# the messages in one call (``decode_lines``). That call reads each row as exactly one
# message when every row is {…}: a message can only run on past its row's closing } into
# the next row if that } closes something inside it, and then the next row's { (after the
# newline, which no JSON string holds) is malformed JSON; so each row is one value or more,
# and n rows that give n values give one each. A chunk that fails either test is split at
# its newlines and its rows decoded one by one (``chunk``). The first test is a comparison
# ('{' <= data < '|', a memcmp, false for a blob); min() is made to see a NULL as false.
# (``sessions`` joins rows as [row] lines, each decoded as a tuple of one, for the same
# guarantee with no test in SQL; here the tuples cost more than the test, measured.)
_CHUNK_SQL = (
    "SELECT count(*), CAST(json_group_array(session_id) AS BLOB), "
    "CAST(json_group_array(time_created) AS BLOB), CAST(group_concat(data, x'0a') AS BLOB), "
    "min(coalesce(data >= '{' AND data < '|' AND substr(CAST(data AS BLOB), -1) = x'7d', 0)) "
    f"FROM message WHERE rowid >= ? AND rowid < ? AND {_NOT_USER}"
)
_CHUNK_ROWIDS = 1024  # about 700 assistant messages, 0.3 MB of JSON
_SETTLE_AT = 4096  # slow rows held as bytes before they are decoded


_EVER = -(1 << 63)  # before any time SQLite can hold
_NEVER = (1 << 63) - 1  # after any time SQLite can hold


def _after(created: Any, until: int) -> bool:
    """Whether a message created at ``created`` is after ``until`` (one without a usable
    time is not)."""
    return (type(created) is int or type(created) is float) and created > until


def _within(created: Any, since: int | None, until: int | None, *, timeless: bool = False) -> bool:
    """Whether ``created`` is a time in the window from ``since`` to ``until`` (either may
    be open); a value that is no time is in it only if ``timeless``."""
    if not (type(created) is int or type(created) is float):
        return timeless or (since is None and until is None)
    return (since is None or created >= since) and (until is None or created <= until)


def _before(created: Any, since: int) -> bool:
    """Whether a message created at ``created`` is before ``since`` (a message without a
    usable time is not: nothing says it is older)."""
    return (type(created) is int or type(created) is float) and created < since


class _Scan:
    """The hot loop of a grouped report: per-group sums of assistant messages, and the rows
    that need the slow path (steps, forked copies and their possible originals). Picklable,
    so worker processes can each run one over a part of the table."""

    def __init__(
        self,
        by: str,
        owner: dict[str, str],
        copy_ids: set[str],
        copy_times: set[Any],
        since: int | None = None,
        until: int | None = None,
        *,
        per_session: bool = True,
        copy_prints: set[bytes] | None = None,
        ledger: bool = False,
        spill: Spill | None = None,
    ) -> None:
        self.by = by
        self.owner = owner
        # Whether the quick path keeps each session's days apart (a ledger, a session's row
        # or share needs them), or sums a day's messages of every session together: what
        # ``--by day`` without the cache needs, in memory that does not grow with sessions.
        self.per_session = per_session
        # Messages created before this are not counted (``--since``); an integer either way,
        # since the hot loop compares each message's time with it.
        self.since = _EVER if since is None else since
        self.until = _NEVER if until is None else until  # and after this (``--until``)
        self.copy_ids = copy_ids
        self.copy_times = copy_times
        self.copy_prints = copy_prints or set()  # the copies' fingerprints (see ``settle``)
        # Fingerprints of rows that are no copy but have a copy's: their copies are not
        # counted (kept when rows are summed as they are decoded, with no ledger).
        self.originals: set[bytes] = set()
        # Each group's sums (``_new_sums``), packed once the scan is finished (``_light``).
        self.groups: dict[Any, Any] = {}
        self.slow: list[tuple[str, str, Any, bytes]] = []
        self.unread = 0  # message rows of the sessions read that are not JSON or have no role
        # Sessions with a row that is not a message (a note counts them), or with figures
        # the ledger cannot hold (an integer beyond 64 bits): the ledger does not keep them.
        self.irregular: set[str] = set()
        # ``slow`` decoded by ``prepare``, as ``run`` goes: a row's bytes are not held
        # beside what is read from them (forks copy whole histories: many such rows).
        self.ready: list[tuple[str, Any, bytes, Any]] = []
        # The forked copies ``ready`` gave up where the groups need no session (``_add_ready``):
        # (fingerprint, group key, figures packed). A large database has many such rows.
        # forked copies: (fingerprint, group key, packed figures, message id)
        self.copies: list[tuple[bytes, Any, bytes | list[Any], Any]] = []
        self.labels: dict[str, str] = {}  # the strings ``--by step`` rows share (``_step_row``)
        # By step, the rows read so far set aside in time order every ``_STEP_RUN`` of them
        # (``_set_steps_aside``): a report of every step is never held.
        self.runs: SortedRuns | None = None
        # A worker's runs, by step, handed back to the report's (``SortedRuns.adopt``).
        self.step_runs: list[tuple[bool, Any, int]] = []
        # With ``ledger``, what the ledger keeps of each session read, encoded where it was
        # read (``finish``: in the worker that read it), the entries of each part of the
        # table together (``_keep_days`` joins a session's from several): their bytes, or
        # with ``spill`` where they are in it, so that the sessions' entries wait on disk.
        self.ledger = ledger
        self.spill = spill
        self.entries: list[_EncodedPart] = []
        self.finished = False  # ``finish`` done: the groups may be the report's now

    @property
    def chunked(self) -> bool:
        """Whether ``chunk`` can sum this grouping (it needs only the figures)."""
        return self.by in _BY_DAYS

    def run(self, rows: Iterable[tuple[str, str, Any, bytes]], day_of: _DayOf) -> None:
        by, owner, groups, slow = self.by, self.owner, self.groups, self.slow
        # A forked copy shares its original's time, so one set lookup sends both, and only
        # them, down the slow path.
        copy_times = self.copy_times
        days = day_of.cache
        since, until = self.since, self.until
        decoder = _FIGURES if by in _BY_DAYS else _MESSAGE
        decode = decoder.decode  # the first try inline: this loop runs once per message
        # A group's times are the ledger's (its entries keep every inference's); without
        # one, a group holds its figures and a few terms of its costs' sum, not two numbers
        # per inference until the end (one process over a 30 GB table, by model or agent).
        timed = self.ledger
        for sid, mid, created, data in rows:
            top = owner.get(sid)
            if top is None:
                continue
            if since is not _EVER and _before(created, since):
                continue
            if until is not _NEVER and _after(created, until):
                continue
            try:
                info = decode(data)
            except _UNREADABLE:
                try:  # a lone surrogate escape, read as the import reads it (and a message's
                    # odd time as no time)
                    info = (
                        _read_message(data)
                        if decoder is _MESSAGE
                        else decode_repaired(decoder, data)
                    )
                except _UNREADABLE:
                    self.unread += 1
                    self.irregular.add(sid)
                    continue
            if info.role != "assistant":
                if info.role != "user":
                    self.unread += 1
                    self.irregular.add(sid)
                continue
            if by == "step" or created in copy_times:
                slow.append((sid, mid, created, data))
                if len(slow) >= _SETTLE_AT:
                    self.settle(day_of)
                continue
            if by in _BY_DAYS:  # per session and day: see _Scan
                day = days.get(created // 900_000) if type(created) is int else None
                key = (sid, day if day is not None else day_of(created))
            else:
                key = _group_key(by, top, info, created, day_of, sid)
            acc = groups.get(key)
            if acc is None:  # acc[8], the first time, only ever holds an integer
                acc = groups[key] = _new_sums(None)
            _add_message(acc, info, created, timed)
            if not timed and len(acc[6]) > _COMPACT_AT:  # no ledger keeps every cost
                acc[6] = _bounded(acc[6])
        self.settle(day_of)

    def chunk(
        self, n: int, sids: bytes, times: bytes, datas: bytes, whole: int, day_of: _DayOf
    ) -> list[int] | None:
        """Sum ``n`` rows given as one (``_CHUNK_SQL``: ``whole`` says every row is {…}),
        as ``run`` would sum them one by one. A message that is not a plainly-typed
        assistant one (odd figures, a damaged cell) is read by ``run`` alone, the others
        quickly; a user's is skipped, as ``run`` skips it. The rows at a time a fork's copy
        shares are left out: their times are returned, for the caller to read those rows
        with ``run`` (which needs their ids). None, with nothing summed, when the chunk
        itself needs a closer look (a time that is not an integer, a row holding a raw
        newline): the caller then reads the chunk's rows with ``run``."""
        try:
            created = _INTS.decode(times)
            sessions = _STRS.decode(sids)
        except _UNREADABLE:
            return None
        if len(created) != n or len(sessions) != n:
            return None
        messages: list[_FastFigures | _FastUser] | None = None
        if whole == 1:  # every row one message, all decoded in one call (see _CHUNK_SQL)
            try:
                messages = _FAST_FIGURES.decode_lines(datas)
            except _UNREADABLE:
                pass  # a row of another kind: the rows are decoded one by one below
            else:
                if len(messages) != n:
                    return None  # not as _CHUNK_SQL says: never trust it
        shared: list[int] = []
        keep: list[int] | None = None
        if not self.copy_times.isdisjoint(created):
            copy_times = self.copy_times
            shared = sorted({ms for ms in created if ms in copy_times})
            keep = [i for i, ms in enumerate(created) if ms not in copy_times]
            sessions = [sessions[i] for i in keep]
            created = [created[i] for i in keep]
            if messages is not None:
                messages = [messages[i] for i in keep]
        if messages is not None:
            self._sum_chunk(sessions, created, messages, day_of)
            return shared
        pieces = datas.split(b"\n")
        if len(pieces) != n:
            return None
        if keep is not None:
            pieces = [pieces[i] for i in keep]
        try:
            messages = list(map(_FAST_FIGURES.decode, pieces))
        except _UNREADABLE:  # one row or more of another kind: those are read one by one
            self._mixed_chunk(sessions, created, pieces, day_of)
            return shared
        self._sum_chunk(sessions, created, messages, day_of)
        return shared

    def _mixed_chunk(
        self, sessions: list[str], created: list[int], pieces: list[bytes], day_of: _DayOf
    ) -> None:
        quick_sessions, quick_times, quick = [], [], []
        others = []
        decode = _FAST_FIGURES.decode
        for sid, ms, piece in zip(sessions, created, pieces, strict=True):
            try:
                message = decode(piece)
            except _UNREADABLE:
                others.append((sid, None, ms, piece))  # no copy's time here: no id needed
                continue
            quick_sessions.append(sid)
            quick_times.append(ms)
            quick.append(message)
        self._sum_chunk(quick_sessions, quick_times, quick, day_of)
        self.run(others, day_of)

    def _sum_chunk(
        self,
        sessions: list[str],
        created: list[int],
        messages: list[_FastFigures | _FastUser],
        day_of: _DayOf,
    ) -> None:
        # Runs once per message of a large database. A group's sums live in locals while its
        # messages come in a row and go back to its list when another group starts: the same
        # additions in the same order as ``_add_message``. A group is a session's day.
        owner, groups, days, since = self.owner, self.groups, day_of.cache, self.since
        until, keyed, timed = self.until, self.per_session, self.ledger
        bucket = acc = current = None
        day: Any = None
        s0 = s1 = s2 = s3 = s4 = s5 = s7 = 0
        costs: array[float] = array("d")
        times: array[int] = array("q")
        first: Any = None
        user = _FastUser  # skipped, as ``run`` skips a user's message
        for sid, ms, message in zip(sessions, created, messages, strict=True):
            if ms < since or ms > until or sid not in owner or type(message) is user:
                continue
            if ms // 900_000 != bucket:  # a day's key is looked up once a quarter hour
                bucket = ms // 900_000
                later = days.get(bucket)
                if later is None:
                    later = day_of(ms)
                    if bucket not in days:  # a day begins in it: each time on its own
                        bucket = None
                if later != day:
                    day, current = later, None
            who = sid if keyed else ""
            if who != current:
                if acc is not None:
                    acc[:] = s0, s1, s2, s3, s4, s5, _bounded(costs), s7, first, times
                current = who
                key = (who, day)
                acc = groups.get(key)
                if acc is None:
                    acc = groups[key] = _new_sums(None)
                s0, s1, s2, s3, s4, s5, costs, s7, first, times = acc
            tokens = message.tokens
            cache = tokens.cache
            i = tokens.input
            o = tokens.output
            r = tokens.reasoning
            cr = cache.read
            cw = cache.write
            total = tokens.total
            s0 += i
            s1 += o
            s2 += r
            s3 += cr
            s4 += cw
            s5 += total if total is not None else i + o + r + cr + cw
            costs.append(message.cost)
            if timed:  # a ledger's (fork copies are looked for at these times)
                times.append(ms)
            s7 += 1
            if first is None or ms < first:
                first = ms
        if acc is not None:
            acc[:] = s0, s1, s2, s3, s4, s5, _bounded(costs), s7, first, times

    def settle(self, day_of: _DayOf) -> None:
        """The slow rows read so far decoded into ``ready`` (``prepare``), and let go.

        With no ledger to write, by date, only the forked copies wait in ``ready`` for the
        end (whether their original is anywhere in the table): any other row is counted
        whatever comes, so it is added to its day now, its fingerprint noted if a copy
        has it; ``_grouped`` does the same with the rows left in ``ready``."""
        if not self.slow:
            return
        ready = self.prepare(day_of)
        self.slow.clear()
        if self.per_session:
            self.ready += ready
            if self.runs is not None and len(self.ready) >= _STEP_RUN:
                self._set_steps_aside()
            return
        self._add_ready(ready, self.groups)

    def _set_steps_aside(self) -> None:
        """By step, the rows ``ready`` holds (``steps_left``) in the report's order, as a
        run of ``runs``."""
        steps = self.steps_left()
        _in_step_order(steps)
        self.runs.add(steps)  # type: ignore[union-attr]
        self.labels.clear()  # shared by the rows set aside: the next rows share their own

    def steps_left(self) -> list[UsageRow]:
        """By step, the rows ``ready`` holds that are no forked copy, in the order read, and
        let go: the copies wait in ``copies`` for the end (whether their original is
        anywhere in the table), a copy's fingerprint noted when another row has it."""
        ready, self.ready = self.ready, []
        copy_ids, copy_prints = self.copy_ids, self.copy_prints
        steps = []
        for mid, key, fingerprint, row in ready:
            if mid in copy_ids:
                self.copies.append((fingerprint, key, _packed_step(row), mid))
                continue
            if copy_ids and fingerprint in copy_prints:
                self.originals.add(fingerprint)
            steps.append(row)
        return steps

    def prepare(self, day_of: _DayOf) -> list[tuple[str, Any, bytes, Any]]:
        """The slow rows, in order, as (message id, group key, fingerprint, figures): a
        ``--by step`` row, or else the message's sums as a group of one (``_add_message``:
        the same figures as the mapping's rule). The fingerprint is left out (``b""``) when
        there are no forked copies to match, the row is not at a copy's time, or the
        message is not whole enough to be one."""
        by, owner, copy_ids, copy_times = self.by, self.owner, self.copy_ids, self.copy_times
        ready = []
        for sid, mid, created, data in self.slow:
            try:
                full = _read_message(data)
            except _UNREADABLE:
                # Read for its figures alone (``run``, by day or session), e.g. a "time" that is
                # no object: counted as the quick path counts it. No fork's copy or original
                # (those are decoded whole), so no fingerprint.
                if by in _BY_DAYS:
                    try:
                        figures_only = _FIGURES.decode(data)
                    except _UNREADABLE:  # a lone surrogate escape, read as the scan reads it
                        figures_only = decode_repaired(_FIGURES, data)
                    sums = _new_sums(None)
                    _add_message(sums, figures_only, created)
                    key = (sid, day_of(created))
                    ready.append((mid, key, b"", sums))
                continue
            key = _group_key(by, owner[sid], full, created, day_of, sid)
            # A copy or an original is a row at a copy's time (``_originals_in``'s rule).
            fingerprint = _fingerprint(full) if copy_ids and created in copy_times else b""
            if by == "step":
                figures: Any = _step_row(sid, mid, created, full, self.labels)
            else:
                figures = _new_sums(None)
                _add_message(figures, full, created)
            ready.append((mid, key, fingerprint, figures))
        return ready

    def finish(self, day_of: _DayOf) -> None:
        """The part of the table this scan read is done (once; nothing when done before):
        its slow rows decoded (``settle``); with ``ledger``, each session's groups and
        held rows encoded as its ledger entry; and, when the report's groups need no
        session (by day, week, month, model or agent), the session groups and the rows
        that are no forked copy summed into the report's, as a scan with no ledger sums
        them (the copies wait in ``ready`` for the end). So a worker sends back a few
        groups and the entries' bytes, not a group per session and day."""
        self.settle(day_of)
        if self.finished:
            return
        self.finished = True
        if self.ledger:
            self._encode_entries()
        if self.by in _SHARED:  # the slow rows summed now under their session, but the copies
            ready, self.ready = self.ready, []
            self._add_ready(ready, self.groups, keyed=True)
        if self.per_session and self.by in _COLLAPSIBLE:
            self._collapse()  # into a few groups under no session: nothing to lighten
        else:
            self._lighten()

    def _lighten(self) -> None:
        # What the report needs of a part's groups: their sums and first times. Each group's
        # costs are put in a few terms of the same exact sum, and its times let go (a ledger's
        # entries, encoded before, keep them all): a group per session and day holds a few
        # doubles, not two numbers per inference.
        groups = self.groups
        for key, acc in groups.items():
            acc[6] = _bounded(acc[6], 1)
            if acc[9]:
                acc[9] = array("q")
            groups[key] = _light(acc)  # and in a few dozen bytes (``_sums`` reads them)

    def _encode_entries(self) -> None:
        held: dict[str, list[Any]] = {}
        for mid, (sid, day), fingerprint, sums in self.ready:
            kept_sums = [*sums[:6], list(sums[6]), sums[7], sums[8], list(sums[9])]
            held.setdefault(sid, []).append((mid, day, fingerprint, kept_sums))
        days: dict[str, list[Any]] = {}
        spans: dict[str, _Span] = {}
        for (sid, group), acc in self.groups.items():  # costs and times: arrays (``_new_sums``)
            s0, s1, s2, s3, s4, s5, costs, s7, first, times = acc
            day = (group, [s0, s1, s2, s3, s4, s5, s7], costs.tobytes(), first, times.tobytes())
            found = days.get(sid)
            if found is None:
                days[sid] = [day]
                span = spans[sid] = _Span()
            else:
                found.append(day)
                span = spans[sid]
            low, high = (min(times), max(times)) if times else (None, None)
            _widen(span, low, high, len(times) != s7)
        encoded: dict[str, bytes] = {}
        for sid, found in days.items():
            self._encode(encoded, sid, _session_days(found, held.pop(sid, []), spans[sid]))
        for sid, rows in held.items():
            self._encode(encoded, sid, _session_days([], rows))
        if not encoded:
            return
        data: bytes | None = b"".join(encoded.values())
        start = -1
        if self.spill is not None:
            with contextlib.suppress(OSError):  # else kept as bytes
                start, data = self.spill.put(data), None  # type: ignore[arg-type]
        sizes = array("q", map(len, encoded.values()))
        self.entries.append(_EncodedPart(list(encoded), sizes, start, data))

    def _encode(self, encoded: dict[str, bytes], sid: str, entry: SessionDays) -> None:
        try:
            encoded[sid] = _ENTRY_ENCODER.encode(entry)
        except UNENCODABLE:  # read again every time, as without the cache
            self.irregular.add(sid)

    def _collapse(self) -> None:
        # The groups summed per day, model or agent, under no session (``_fold_days`` makes
        # weeks and months of them), without their times (the ledger's entries have them).
        # A group's first costs are copied, the others added to them.
        groups: dict[Any, list[Any]] = {}
        for (_sid, group), acc in self.groups.items():
            key = ("", group)
            into = groups.get(key)
            if into is None:
                groups[key] = [*acc[:6], array("d", acc[6]), acc[7], acc[8], array("q")]
            else:
                _add_figures(into, acc)
        ready, self.ready = self.ready, []
        self._add_ready(ready, groups)
        self.groups = groups

    def _add_ready(
        self, rows: list[tuple[str, Any, bytes, Any]], groups: dict, *, keyed: bool = False
    ) -> None:
        """``rows`` (``prepare``'s) summed into ``groups`` under no session (``keyed``: under
        theirs), as a scan with no ledger sums them, but for the forked copies: they wait
        in ``copies`` for the end (whether their original is anywhere in the table), their
        figures packed; a copy's fingerprint is noted when another row has it."""
        copy_ids, copy_prints = self.copy_ids, self.copy_prints
        for row in rows:
            mid, (sid, group), fingerprint, figures = row
            key = (sid, group) if keyed else ("", group)
            if mid in copy_ids:
                self.copies.append((fingerprint, key, _packed(figures), mid))
                continue
            if fingerprint in copy_prints:
                self.originals.add(fingerprint)
            _add_sums(groups, key, figures)

    def merge(self, other: _Scan) -> None:
        groups = self.groups
        for key, acc in other.groups.items():
            mine = groups.get(key)
            if mine is None:
                groups[key] = acc
                continue
            _merge_sums(_sums_at(groups, key, mine), _sums(acc))
        if other.step_runs:  # in range order: as one process would have set them aside
            self.runs.adopt(other.step_runs)  # type: ignore[union-attr]
        owner = self.owner
        for part in other.entries:  # a session's id as the report holds it, not a copy
            part.sids[:] = [top if (top := owner.get(sid)) == sid else sid for sid in part.sids]
        self.entries += other.entries
        self.slow.extend(other.slow)
        self.ready.extend(other.ready)
        self.copies.extend(other.copies)
        self.originals |= other.originals
        self.unread += other.unread
        self.irregular |= other.irregular


def _scan_rowids(
    conn: Any,
    low: int,
    high: int,
    scan: _Scan,
    day_of: _DayOf,
    errors: tuple[type[BaseException], ...] = (),
) -> None:
    """``scan`` over the messages with rowid in [low, high), in rowid order: chunk by chunk
    when the grouping allows (a chunk that needs a closer look is read row by row), else
    row by row; with a window (``--since``, ``--until``), only its rows (``_window``).
    ``conn``: sqlite3's, or (chunks only) apsw's, whose ``errors`` are named."""
    window, bounds = _window(scan)
    rows_sql = _ROWS_SQL + window
    if not scan.chunked:
        cursor = conn.execute(rows_sql, (low, high, *bounds))
        scan.run(itertools.chain.from_iterable(iter(lambda: cursor.fetchmany(4096), [])), day_of)
        return
    chunk_sql = _CHUNK_SQL + window
    for start in range(low, high, _CHUNK_ROWIDS):
        end = min(start + _CHUNK_ROWIDS, high)
        try:
            n, *arrays = conn.execute(chunk_sql, (start, end, *bounds)).fetchone()
        except (sqlite3.Error, *errors):  # e.g. a blob JSON cannot hold: the rows will tell
            n = None
        shared = [] if n == 0 else None if n is None else scan.chunk(n, *arrays, day_of)
        if shared is None:
            scan.run(conn.execute(rows_sql, (start, end, *bounds)).fetchall(), day_of)
        elif shared:  # the rows at a forked copy's times, with their ids
            marks = ", ".join("?" * len(shared))
            sql = f"{rows_sql} AND time_created IN ({marks}) ORDER BY rowid"
            scan.run(conn.execute(sql, (start, end, *bounds, *shared)).fetchall(), day_of)


def _window(scan: _Scan) -> tuple[str, tuple[int, ...]]:
    """The scan's window (``--since``, ``--until``) as SQL to add to its queries, and its
    bounds: the rows ``run`` would skip (a time before or after it; a message without a
    usable time is in it, ``_before``, ``_after``) never leave SQLite. SQLite still reads
    every row (no index on the time alone), but a week of a 30 GB database is decoded, not
    its whole history: ``usage --by day --since 7d`` of the 10x bench database, 2.35 s →
    0.92 s."""
    clause, bounds = "", ()
    if scan.since is not _EVER:
        clause += " AND NOT (typeof(time_created) IN ('integer', 'real') AND time_created < ?)"
        bounds += (scan.since,)
    if scan.until is not _NEVER:
        clause += " AND NOT (typeof(time_created) IN ('integer', 'real') AND time_created > ?)"
        bounds += (scan.until,)
    return clause, bounds


# Message rowids per range when this process reads the table alone: each range is
# finished as a worker finishes one (its sessions' ledger entries encoded and set aside in
# the spill), so what waits in memory is one range's, not the whole table's.
_HERE_RANGE_ROWIDS = 50_000


def _scan_here(store: Any, scan: _Scan, day_of: _DayOf) -> bool:
    """The whole message table in this process, range by range and each chunk by chunk,
    as the workers read it (``_parallel_scan``); False when the store is not a database or
    the grouping needs whole rows (the caller reads rows itself)."""
    if not scan.chunked or not offers_fast_scans(store):
        return False
    conn = store.conn
    try:
        for low, high in store.rowid_ranges("message", 1):
            for start in range(low, high, _HERE_RANGE_ROWIDS):
                part = _scan_like(scan)
                _scan_rowids(conn, start, min(start + _HERE_RANGE_ROWIDS, high), part, day_of)
                scan.merge(_handed_back(part, day_of))
    except SQLITE_ERRORS as exc:
        where = getattr(store, "path", "the database")
        raise InputError(f"cannot read {where}: {sqlite_reason(exc)}") from None
    scan.finished = True  # every range was finished where it was read
    return True


_PARALLEL_MIN_ROWS = 100_000  # message rows; below this a worker's start costs more


def _parallel_scan(store: Any, scan: _Scan, day_of: _DayOf) -> bool:
    """Run ``scan`` over a large message table in one process per core, all taking small
    ranges from one queue (``share_ranges``); False when it is not worth it or not possible
    here (the caller then scans in this process alone). Each process keeps one ``day_of``
    for all the ranges it takes (rows in no time order touch every day in each range)."""
    pending = share_ranges(store, "message", _PARALLEL_MIN_ROWS, _scan_range, scan, day_of)
    if pending is None:
        return False
    for part in pending.each():  # in range order: the same sums in the same order every time
        scan.merge(part)
    scan.finished = True  # every part was finished where it was read
    return True


def _scan_range(uri: str, low: int, high: int, like: _Scan, day_of: _DayOf) -> _Scan:
    """A worker: a scan ``like`` the report's over the messages with rowid in [low, high),
    on its own connection, its slow rows decoded (``prepare``); ``day_of`` is this
    process's, filled by the ranges it took before."""
    scan = _scan_like(like)
    if scan.chunked and in_forked_child():  # apsw's newer SQLite reads the chunks faster
        with fastscan.connect(uri, "message") as conn:
            if conn is not None:
                _scan_rowids(conn, low, high, scan, day_of, fastscan.errors())
                return _handed_back(scan, day_of)
    with worker_connection(uri, "message") as conn:
        _scan_rowids(conn, low, high, scan, day_of)
    return _handed_back(scan, day_of)


def _scan_like(like: _Scan) -> _Scan:
    """A fresh scan of the report's kind, for one range of the table (by step, its runs
    set aside in the report's shared file: ``SortedRuns.fresh``)."""
    scan = _Scan(
        like.by,
        like.owner,
        like.copy_ids,
        like.copy_times,
        like.since,
        like.until,
        per_session=like.per_session,
        copy_prints=like.copy_prints,
        ledger=like.ledger,
        spill=like.spill,
    )
    if like.runs is not None:
        scan.runs = like.runs.fresh()
    return scan


def _handed_back(scan: _Scan, day_of: _DayOf) -> _Scan:
    """A worker's scan made ready for its parent."""
    scan.finish(day_of)
    if scan.runs is not None:  # by step: the range's last rows a run too, and the runs' places
        scan._set_steps_aside()
        scan.step_runs, scan.runs = scan.runs.handed_over(), None
    scan.owner = {}  # the parent has it; don't send it back
    scan.spill = None  # nor its file (a copy in the parent would close the parent's)
    scan.labels = {}  # the rows hold them
    scan.copy_ids, scan.copy_times, scan.copy_prints = set(), set(), set()
    return scan


def _add_message(acc: list[Any], info: Any, created: Any, timed: bool = True) -> None:
    """Add one assistant message's figures (the one rule, ``figures``) to a group's
    running sums; ``timed``: its time too (a ledger's entries keep every time)."""
    f = read_figures(info.tokens, info.cost)
    acc[0] += f.input
    acc[1] += f.output
    acc[2] += f.reasoning
    acc[3] += f.cache_read
    acc[4] += f.cache_write
    acc[5] += f.total
    acc[6].append(f.cost)
    acc[7] += 1
    if type(created) is int:
        if timed:
            acc[9].append(created)
        if acc[8] is None or created < acc[8]:
            acc[8] = created


def _group_key(
    by: str, top: str, info: UsageMessage, started: Any, day_of: _DayOf, sid: str = ""
) -> Any:
    """A grouped report's key of one inference: its session and its day, model or agent
    (``_Scan`` groups per session; ``_fold_days`` makes the report's groups)."""
    if by in _BY_DAYS:
        return (sid, day_of(started))
    if by == "model":
        return (sid, model_label(info.providerID, info.modelID))
    if by == "agent":
        if isinstance(info.agent, str):
            return (sid, info.agent)
        return (sid, info.mode if isinstance(info.mode, str) else "?")
    return None  # step: no group


def _add_sums(groups: dict[Any, bytes | list[Any]], key: Any, sums: list[Any]) -> None:
    """Add one message's sums (a group of one, from ``_add_message``) to its group."""
    acc = groups.get(key)
    if acc is None:
        acc = groups[key] = _new_sums(sums[8])
    _merge_sums(_sums_at(groups, key, acc), sums)


def _add_figures(into: list[Any], acc: list[Any], most: int | None = None) -> None:
    """A group's counts and costs (``acc``) added to another's (``into``), the earlier first
    time kept, but not its times: once per session and day of the database, where a
    report's group needs each session's figures and first time, not all its times.
    ``most``: the costs ``into`` holds before they are put in fewer terms (``_bounded``)."""
    counts = (acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[7])
    _add_counts(into, counts, acc[8], acc[6], _COMPACT_AT if most is None else most)


def _add_counts(
    into: list[Any], counts: Sequence[Any], started: Any, costs: Iterable[float], most: int
) -> None:
    """The six token counts and the inferences (``counts``, as a ledger's group keeps them),
    the first time and the ``costs`` of some inferences added to a group's (``_new_sums``);
    its costs put in fewer terms (``_bounded``) once there are more than ``most``."""
    into[0] += counts[0]
    into[1] += counts[1]
    into[2] += counts[2]
    into[3] += counts[3]
    into[4] += counts[4]
    into[5] += counts[5]
    into[7] += counts[6]
    held = into[6]
    held.extend(costs)
    if len(held) > most:
        into[6] = _bounded(held)
    if started is not None and (into[8] is None or started < into[8]):
        into[8] = started


def _new_sums(first: Any) -> list[Any]:
    """A group's running sums: input, output, reasoning, cache read, cache write, total,
    every inference's cost (packed doubles: a large report holds millions), inferences,
    the first time, every inference's time (packed 64-bit integers)."""
    return [0, 0, 0, 0, 0, 0, array("d"), 0, first, array("q")]


_COMPACT_AT = 1 << 12  # costs a group holds before they are put in fewer terms
_LIGHT = struct.Struct("<7qq")  # a lightened group: six counts, inferences, first (or _EVER)


def _light(acc: list[Any]) -> bytes | list[Any]:
    """A lightened group (``_Scan._lighten``: its costs in a few terms, no times) in a few
    dozen bytes, then its costs' doubles (``_packed_group``); as it is when it holds
    anything else (times, or what ``_packed_group`` does not pack).
    A report by session or project holds a group per session and day: 0.7 KB as a list
    and its numbers, about 0.1 KB so (peak RSS at 100,000 sessions, by session 150 -> 134
    MB, by project 161 -> 124 MB)."""
    costs = acc[6]
    if acc[9] or type(costs) is not array or costs.typecode != "d":
        return acc
    counts = (acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[7])
    packed = _packed_group(counts, acc[8], costs)
    return acc if packed is None else packed


def _light_kept(counts: Sequence[Any], first: Any, costs: array[float]) -> bytes | None:
    """``_light`` of the group ``_add_counts`` makes of a new one (``_new_sums(first)``)
    and these ``counts``, ``first`` time and ``costs`` (as a ledger's group keeps them),
    made at once; None where that group would not be packed (or its costs put in fewer
    terms: more than ``_FOLDED_COSTS``)."""
    if len(costs) > _FOLDED_COSTS or len(counts) != 7:
        return None
    return _packed_group(counts, first, costs)


def _packed_group(counts: Sequence[Any], first: Any, costs: array[float]) -> bytes | None:
    """The seven counts (six token counts, the inferences) and the first time in 64 bytes
    (``_LIGHT``), then the costs' doubles; None when a count is no integer or beyond 64
    bits, or the first time is no integer or is ``_EVER`` (which stands for none here)."""
    if any(type(n) is not int for n in counts):
        return None
    if first is None:
        first = _EVER
    elif type(first) is not int or first == _EVER:
        return None
    try:
        return _LIGHT.pack(*counts, first) + costs.tobytes()
    except struct.error:  # beyond 64 bits
        return None


def _sums_at(groups: dict[Any, Any], key: Any, acc: bytes | list[Any]) -> list[Any]:
    """``groups[key]`` (``acc``) as sums to add to: unpacked there first if it is packed."""
    if type(acc) is bytes:
        acc = groups[key] = _sums(acc)
    return acc  # type: ignore[return-value]


def _sums(acc: bytes | list[Any]) -> list[Any]:
    """A group's sums as ``_new_sums`` holds them: ``_light``'s bytes read back."""
    if type(acc) is not bytes:
        return acc  # type: ignore[return-value]
    *counts, inferences, first = _LIGHT.unpack_from(acc)
    costs = array("d")
    costs.frombytes(memoryview(acc)[_LIGHT.size :])
    return [*counts, costs, inferences, None if first == _EVER else first, array("q")]


def _fsum(costs: Sequence[float] | array[float]) -> float:
    """``math.fsum`` of ``costs``, the exact sum correctly rounded; where that overflows a
    double (a damaged store's costs near the largest float) the plain sum, ``inf``, as a
    turn's running sum gives it (JSON's ``null``): never an error."""
    try:
        return math.fsum(costs)
    except OverflowError:
        return sum(costs, 0.0)


def _bounded(costs: array[float], most: int | None = None) -> array[float]:
    """``costs``, or when there are many of them, a few doubles whose exact sum is theirs,
    so that ``math.fsum`` of those and any more costs is the ``fsum`` of all: a day's
    thousands of inferences are summed exactly in constant memory. Each term is the
    correctly rounded remainder of the exact sum once the terms before it are taken
    away, until nothing remains (a sum of doubles is a multiple of the least of them, so
    this ends); costs that are not all finite are left as they are. ``most``: the costs
    left as they are (default ``_COMPACT_AT``)."""
    if len(costs) <= (_COMPACT_AT if most is None else most):
        return costs
    terms: list[float] = []
    try:
        while True:
            rest = math.fsum(itertools.chain(costs, terms))
            if rest == 0.0 or not math.isfinite(rest):
                break
            terms.append(-rest)
    except (OverflowError, ValueError):  # a huge sum; inf and -inf together
        return costs
    if rest != 0.0:
        return costs
    return array("d", (-term for term in terms))


_ONE_INFERENCE = struct.Struct("<6qdq")  # the six counts, the cost, the time (or _EVER)


def _packed(sums: list[Any]) -> bytes | list[Any]:
    """One inference's sums (``_add_message``) in 64 bytes, or as they are when they are
    anything else (odd figures: a count that is no integer, or beyond 64 bits): a forked
    copy's, held until the end of the scan, in a fifth of the memory."""
    counts, costs, times = sums[:6], sums[6], sums[9]
    if sums[7] != 1 or len(costs) != 1 or len(times) > 1 or any(type(n) is not int for n in counts):
        return sums
    time = times[0] if times else None
    if sums[8] != time or time == _EVER:  # _EVER stands for no time
        return sums
    try:
        return _ONE_INFERENCE.pack(*counts, costs[0], _EVER if time is None else time)
    except struct.error:
        return sums


def _packed_step(row: UsageRow) -> bytes | UsageRow:
    """A ``--by step`` row of a forked copy, held until the end of the scan, in a fifth of
    the memory: encoded (as it is when it cannot be)."""
    try:
        encoded = _ROW_ENCODER.encode(row)
        _ROW_DECODER.decode(encoded)  # reads back (a damaged row's odd value may not)
    except (*UNENCODABLE, msgspec.DecodeError, msgspec.ValidationError):
        return row
    return encoded


def _unpacked_step(held: bytes | UsageRow) -> UsageRow:
    """``_packed_step``'s row as it was."""
    return _ROW_DECODER.decode(held) if type(held) is bytes else held  # type: ignore[return-value]


_ROW_ENCODER = msgspec.msgpack.Encoder()
_ROW_DECODER = msgspec.msgpack.Decoder(UsageRow)
_ROWS_DECODER = msgspec.msgpack.Decoder(list[UsageRow])


def _unpacked(figures: bytes | list[Any]) -> list[Any]:
    """``_packed``'s sums as ``_add_message`` made them."""
    if type(figures) is not bytes:
        return figures  # type: ignore[return-value]
    *counts, cost, time = _ONE_INFERENCE.unpack(figures)
    if time == _EVER:
        return [*counts, array("d", (cost,)), 1, None, array("q")]
    return [*counts, array("d", (cost,)), 1, time, array("q", (time,))]


def _merge_sums(acc: list[Any], sums: list[Any]) -> None:
    """``sums`` added to ``acc``: counts added, costs and times joined (lists or packed
    arrays, either way), the earlier first time kept."""
    for index in (0, 1, 2, 3, 4, 5, 7):
        acc[index] += sums[index]
    acc[6].extend(sums[6])
    acc[9].extend(sums[9])
    started = sums[8]
    if started is not None and (acc[8] is None or started < acc[8]):
        acc[8] = started


def _group_row(by: str, key: Any, acc: list[Any]) -> UsageRow:
    row = UsageRow(
        input_tokens=acc[0],
        output_tokens=acc[1],
        reasoning_tokens=acc[2],
        cache_read_tokens=acc[3],
        cache_write_tokens=acc[4],
        total_tokens=acc[5],
        cost=_fsum(acc[6]),
        inferences=acc[7],
    )
    if by == "session":
        row.session_id, row.started = key, acc[8]
    else:  # model, agent, day, week, month, project: the row's field of that name
        setattr(row, by, key)
    return row


def _sort_key(by: str) -> Callable[[UsageRow], Any]:
    if by == "session":
        return lambda r: (r.started or 0, r.session_id or "")
    if by in ("day", "week", "month"):
        return lambda r: getattr(r, by) or ""
    # model, agent, project: the costliest first
    return lambda r: (-r.cost, r.model or r.agent or r.project or "")


def _message_rows(
    store: Any, session_ids: Sequence[str] | None
) -> Iterator[tuple[str, str, Any, bytes]]:
    """(session id, message id, time_created, data); the store's batched query when it has
    one (``itertools.chain`` keeps the per-row cost in C)."""
    if offers_fast_scans(store):
        return itertools.chain.from_iterable(store.message_batches(session_ids))
    return _rows_of_sessions(store, session_ids)


def _rows_of_sessions(
    store: Any, session_ids: Sequence[str] | None
) -> Iterator[tuple[str, str, Any, bytes]]:
    for sid in session_ids if session_ids is not None else [r.id for r in store.sessions()]:
        for message in store.messages(sid):
            yield sid, message.id, message.time_created, message.data


def _older_than_session(store: Any) -> Iterator[tuple[str, str, Any, bytes]]:
    """(session id, message id, time_created, data) of messages created before their own
    session: the copied history of a fork."""
    if offers_fast_scans(store):
        yield from store.messages_older_than_session()
        return
    for session in store.sessions():
        for message in store.messages(session.id):
            if message.time_created is not None and message.time_created < session.time_created:
                yield session.id, message.id, message.time_created, message.data


def covers_every_session(
    by: str,
    session_ids: Sequence[str] = (),
    *,
    last: bool = False,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> bool:
    """Whether a report with no session chosen covers every session: ``--by day``, model,
    agent … (``EVERY_SESSION_BY``), as ccusage's; ``--by turn`` and ``step`` the last one."""
    chosen = bool(session_ids) or last or since_ms is not None or until_ms is not None
    return not chosen and by in EVERY_SESSION_BY


def every_session_memo(
    by: str,
    session_ids: Sequence[str] = (),
    *,
    last: bool = False,
    since_ms: int | None = None,
    all_sessions: bool = False,
    fold: bool = True,
    tz: tzinfo | None = None,
    until_ms: int | None = None,
) -> tuple[str, list[Any]] | None:
    """The memo of the report cache a ``stored_usage`` of these choices is kept under
    (``kind``, ``request``) when it is a report of every session, which the choices alone
    name (a repeat asks it before listing 100,000 ids); None for one of sessions chosen."""
    every = all_sessions or covers_every_session(
        by, session_ids, last=last, since_ms=since_ms, until_ms=until_ms
    )
    if not every:
        return None
    return "usage-all", [by, fold, _zone(tz), since_ms, stale_after_ms(), until_ms]


def stored_usage(
    store: Any,
    session_ids: Sequence[str] = (),
    *,
    last: bool = False,
    since_ms: int | None = None,
    all_sessions: bool = False,
    by: str = "turn",
    fold: bool = True,
    tz: tzinfo | None = None,
    cache: ReportCache | None = None,
    until_ms: int | None = None,
) -> UsageReport:
    """``usage`` of the store, its sessions chosen as the command line chooses them: every
    top-level session (``all_sessions``; subagents fold into them), else ``session_ids``
    (ids or prefixes), ``last`` and those active ``since_ms`` (``select_sessions``), or
    with ``until_ms`` alone (its last ms) those begun by then; with none of them, every
    session for a grouping of many (``covers_every_session``), else the last one. The
    inferences counted are those made in the window from ``since_ms`` to ``until_ms``.
    ``cache``: the report cache (``store_usage``; a report of every session is kept under
    ``every_session_memo``, one by turn or step of a window's under its window:
    ``_rows_memo``)."""
    from ..store.open import every_session, select_sessions

    if by not in BY_STORE:
        raise GroupingError(f"unknown grouping {by!r}: one of {', '.join(BY_STORE)}")
    choices = {
        "by": by,
        "session_ids": session_ids,
        "last": last,
        "since_ms": since_ms,
        "all_sessions": all_sessions,
        "fold": fold,
        "tz": tz,
        "until_ms": until_ms,
    }
    made = _made_a_row_at_a_time(store, cache, choices)
    if made is not None:  # made a row at a time, and spooled so
        return made.whole()
    memo = every_session_memo(**choices)
    if memo is not None and cache is not None:
        kept = cache.recall(*memo, UsageReport)
        if kept is not None:
            return kept
    if memo is not None:
        ids = every_session(store, top_level=True)
    elif until_ms is not None and not session_ids and not last:
        ids = _window_sessions(store, since_ms, until_ms)
    else:
        ids = select_sessions(store, session_ids, last=last, since_ms=since_ms)
    report = store_usage(
        store,
        ids,
        by=by,
        fold=fold,
        tz=tz,
        cross_session=len(ids) > 1,
        since_ms=since_ms,
        cache=cache,
        until_ms=until_ms,
        memo=memo is None,  # one memo of the report: that of every session
    )
    if memo is not None and cache is not None and not any(row.in_flight for row in report.rows):
        cache.remember(*memo, report)
    return report


def _rows_memo(**choices: Any) -> tuple[str, list[Any]] | None:
    """The memo a report made a row at a time (by turn or step) is kept under, for
    ``stored_usage``'s ``choices``: that of every session (``every_session_memo``), or one
    of its own for the sessions a window alone chose (``since_ms`` or ``until_ms``, no
    session named, not ``last``: ``_window_sessions``); None for any other report, which
    is held whole."""
    by = choices.get("by", "turn")
    if by not in _ROW_AT_A_TIME:
        return None
    memo = every_session_memo(**choices)
    since_ms, until_ms = choices.get("since_ms"), choices.get("until_ms")
    chosen = choices.get("session_ids") or choices.get("last")
    if memo is not None or chosen or (since_ms is None and until_ms is None):
        return memo
    zone = _zone(choices.get("tz"))
    return "usage-window", [
        by,
        choices.get("fold", True),
        zone,
        since_ms,
        stale_after_ms(),
        until_ms,
    ]


def _made_a_row_at_a_time(
    store: Any, cache: ReportCache | None, choices: dict[str, Any]
) -> _RowsAsMade | None:
    """The report of ``choices`` (``stored_usage``'s, ``by`` named) a row at a time, kept
    under its memo (``_rows_memo``); None for a report that is not made so."""
    memo = _rows_memo(**choices)
    if memo is None:
        return None
    since_ms, until_ms = choices.get("since_ms"), choices.get("until_ms")
    chosen = None
    if memo[0] == "usage-window":

        def chosen() -> list[str]:
            return _window_sessions(store, since_ms, until_ms)

    return _ROW_AT_A_TIME[choices["by"]](
        store, cache, memo, choices.get("fold", True), choices.get("tz"), since_ms, until_ms, chosen
    )


def _window_sessions(store: Any, since_ms: int | None, until_ms: int | None) -> list[str]:
    """The top-level sessions a window alone chooses, oldest first: those active since
    ``since_ms`` (``select_sessions``), and with ``until_ms`` those of them begun by its
    end (created by then, or holding a message created by then: a fork's copied history
    keeps its original's times)."""
    from ..store.open import select_sessions

    if until_ms is None:
        return select_sessions(store, since_ms=since_ms)
    rows = store.sessions(since_ms=since_ms, top_level=True)
    early = store.begun_by(until_ms) if hasattr(store, "begun_by") else set()
    begun = [r for r in rows if not _after(r.time_created, until_ms) or r.id in early]
    return [r.id for r in sorted(begun, key=lambda r: (r.time_created, r.id))]


def stored_usage_last(
    store: Any, keep: int, *, cache: ReportCache | None = None, **choices: Any
) -> tuple[UsageReport, int]:
    """``stored_usage(store, cache=cache, **choices)`` holding only its last ``keep`` rows
    (``keep`` ≥ 0: what a table draws), and how many rows the whole report has. A report
    by turn or step of every session, or of a window's, is made (or read back) a row at a
    time, never held: at 100,000 sessions, millions of rows.

        report, rows = stored_usage_last(store, 1000, all_sessions=True, by="step")
    """
    choices = {"by": "turn", **choices}  # ``stored_usage``'s default
    made = _made_a_row_at_a_time(store, cache, choices)
    if made is not None:
        try:
            return made.last(keep)
        finally:
            made.close()
    report = stored_usage(store, cache=cache, **choices)
    count = len(report.rows)
    del report.rows[: max(0, count - keep)]
    return report, count


def write_stored_usage(
    store: Any,
    form: str,
    render: Callable[[UsageReport], Iterable[bytes]],
    out: BinaryIO,
    *,
    cache: ReportCache | None = None,
    apart: Callable[[list[str]], Any] | None = None,
    **choices: Any,
) -> None:
    """Write the pieces of ``render(stored_usage(store, **choices))`` to ``out`` as they
    come, then give the report's notes to ``apart`` (a form that has no place for them:
    JSON Lines and CSV say them on stderr). With ``cache``, a report of every session
    (``every_session_memo``) is kept as written beside its memo, under ``form``, which
    must name ``render`` (and ``apart``) exactly: a repeat of an unchanged database copies
    the bytes out of the cache's file and says the notes kept with them, without decoding
    the report or writing it again (for ``--by step`` of 10,000 sessions, 1.0 s and 318 MB
    otherwise). A report by turn or step of every session or of a window's is written a
    row at a time as it is made (``_made_a_row_at_a_time``), never held."""
    choices = {"by": "turn", **choices}  # ``stored_usage``'s default
    # Only a report of every session keeps its rendition: a window's is asked again only
    # if it was given as times, not as ``7d``, which names another time on every run.
    memo = every_session_memo(**choices)
    kept = cache.rendered(*memo, form) if cache is not None and memo is not None else None
    if kept is not None:
        kept.write_to(out)
        if apart is not None and kept.notes:
            apart(kept.notes)
        return
    made = _made_a_row_at_a_time(store, cache, choices)
    if made is not None:
        # A report by turn or step of every session, or of a window's: each row written
        # (and spooled to the memo) as it is made or read, never all held.
        spool = None
        if cache is not None and memo is not None:
            spool = cache.rendering(*memo, form, ahead=True)
        try:
            _write_rendered(render(made), made, out, spool, apart)  # type: ignore[arg-type]
        finally:
            made.close()
        return
    report = stored_usage(store, cache=cache, **choices)
    # Each piece goes to the cache's spool as it goes out: the output is never held whole.
    spool = cache.rendering(*memo, form) if cache is not None and memo is not None else None
    _write_rendered(render(report), report, out, spool, apart)


def _write_rendered(
    pieces: Iterable[bytes],
    report: UsageReport | _RowsAsMade,
    out: BinaryIO,
    spool: Any,
    apart: Callable[[list[str]], Any] | None,
) -> None:
    """Write ``pieces`` (of ``report``) to ``out``, each to the cache's ``spool`` (a
    ``RenditionSpool``, or None) as it goes, then the report's notes to ``apart``; the
    rendition kept with them once all went out."""
    try:
        for piece in pieces:
            out.write(piece)
            if spool is not None:
                spool.add(piece)
        notes = list(report.notes) if apart is not None else []
        if spool is not None:
            spool.keep(notes)
        if notes:
            apart(notes)  # type: ignore[misc]
    finally:
        if spool is not None:
            spool.discard()
