"""Session summaries from the store: one row per session, as seed 002 defines them.

- Cost and tokens are OpenCode's own session columns, never re-priced.
- Turns and inferences: a user message opens a turn; each assistant message is one
  inference. In flight: the newest reply has no ``time.completed``, or the newest message
  is a prompt awaiting its reply (``core.activity``'s rule; busy, or stale when silent).
- Tool calls: every tool part, MCP or not; failures are the mapping's ``call_failed``
  (a failing status, a call of the ``invalid`` tool), as ``metrics`` counts them; a bash
  exit code is written after the output, and is not read (``command_failures`` of
  ``metrics`` counts those); MCP calls are attributed to configured servers by name
  (``mcp``).
- Subagents (sessions with a ``parent_id``) fold into their parent (``fold``, the default):
  every figure of a row but ``turns`` (the user's prompts) adds every descendant's
  (children, grandchildren …, each once): inferences, tool calls and failures, MCP calls,
  tokens and cost. ``subagent_*`` carry the part that came from them, folded or not (own =
  figure − subagent part); ``total_cost`` (deprecated) is the folded cost either way, and
  ``children`` lists the direct ones. The ledger keeps each session's own counts: the fold
  is made at report time.

    >>> report = sessions_report(store)          # doctest: +SKIP
    >>> [(s.inferences, s.subagent_inferences) for s in report.sessions]  # doctest: +SKIP
    [(5, 3)]
"""

from __future__ import annotations

import functools
import heapq
import itertools
import operator
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple, Protocol

import msgspec
from msgspec import Struct

from ..core.activity import BUSY, stale_after_ms
from ..core.figures import summed_cost
from ..core.text import as_utf8
from ..core.views import (
    GroupedMessage,
    ToolPartHead,
    TurnMessage,
    decode_leniently,
    decode_repairing,
)
from ..errors import InputError
from ..store import fastscan
from ..store.ranges import (
    Pending,
    in_forked_child,
    share_ranges,
    share_slices,
    worker_connection,
)
from ..store.rows import (
    SessionRow,
    ToolPartHeads,
    ancestry,
    descendants,
    offers_fast_scans,
    sessions_changed,
)
from ..store.sqlite import Store
from .beside import made_beside
from .cache import UNENCODABLE, KeptPieces, MemoSpool, ReportCache, encoded_map
from .mcp import mcp_server_of
from .spend import written_spend
from .undone import pending_reverts, undone_figures

__all__ = [
    "SESSION_COLUMNS",
    "ListForm",
    "SessionSummary",
    "SessionsReport",
    "each_summary",
    "sessions_report",
    "streams_every_session",
    "summarize",
]


_MESSAGE = msgspec.json.Decoder(TurnMessage)
_PART = msgspec.json.Decoder(ToolPartHead)


class SessionSummary(Struct, kw_only=True):
    id: str
    path: str
    parent_id: str | None
    title: str | None
    agent: str | None
    model: str | None
    provider: str | None
    directory: str | None
    version: str | None
    time_created: int
    time_updated: int
    # When OpenCode archived it (its lists then hide it); None while it is not. Its costs
    # are real: every report still counts them.
    time_archived: int | None = None
    turns: int = 0
    inferences: int = 0
    in_flight: bool = False
    state: str = "idle"  # busy, idle or stale (core.activity): stale is not in flight
    tool_calls: int = 0
    tool_failures: int = 0
    mcp_calls: dict[str, int] = {}
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    # The part of the figures above that came from subagent sessions (every session below
    # this one, each once), whether or not they are folded in.
    subagent_sessions: int = 0
    subagent_inferences: int = 0
    subagent_tool_calls: int = 0
    subagent_tool_failures: int = 0
    subagent_tokens: int = 0
    subagent_cost: float = 0.0
    # Deprecated: the folded cost (``cost`` of a folded report), kept for programs that read it.
    total_cost: float = 0.0
    children: list[str] = []
    # What a pending undo (/undo, the session's ``revert``) undid: counted above, as
    # OpenCode counts it until the next prompt deletes it and takes it off (``undone``).
    undone_inferences: int = 0
    undone_cost: float = 0.0
    # A fork (`opencode run --fork`): it holds a copy of an earlier session's history, which
    # its figures include, as OpenCode's own totals do; `usage` counts the copies once.
    forked: bool = False


class _ModelView(Struct):
    id: Any = None
    providerID: Any = None


_MODEL = msgspec.json.Decoder(_ModelView)


@functools.lru_cache(maxsize=256)  # sessions share a few models: each decoded once
def _model(raw: str | bytes | None) -> tuple[str | None, str | None]:
    if not raw:
        return None, None
    try:
        view = _MODEL.decode(raw)
    except msgspec.ValidationError:  # JSON, but not an object: no model named
        return None, None
    except (msgspec.DecodeError, RecursionError):
        return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw), None
    model, provider = view.id, view.providerID
    return (
        model if isinstance(model, str) else None,
        provider if isinstance(provider, str) else None,
    )


def shown_path(path: str) -> str:
    """``path`` made absolute, as a report shows it: its bytes that are not UTF-8 (a folder
    named in another encoding, held as surrogates) as U+FFFD, so that every format can
    write it (the database is still opened by its own name)."""
    return as_utf8(os.path.abspath(path))


def _base(row: SessionRow, db_path: str) -> SessionSummary:
    model, provider = _model(row.model)
    tokens = (
        row.tokens_input or 0,
        row.tokens_output or 0,
        row.tokens_reasoning or 0,
        row.tokens_cache_read or 0,
        row.tokens_cache_write or 0,
    )
    return SessionSummary(
        id=row.id,
        path=f"{db_path}/{row.id}",
        parent_id=row.parent_id,
        title=row.title,
        agent=row.agent,
        model=model,
        provider=provider,
        directory=row.directory,
        version=row.version,
        time_created=row.time_created,
        time_updated=row.time_updated,
        time_archived=row.time_archived if type(row.time_archived) is int else None,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        reasoning_tokens=tokens[2],
        cache_read_tokens=tokens[3],
        cache_write_tokens=tokens[4],
        total_tokens=sum(tokens),
        cost=float(row.cost or 0.0),
        total_cost=float(row.cost or 0.0),  # descendants' costs are added later
    )


# The head of a tool part as OpenCode writes it (store.Store.tool_part_batches): the tool's
# name, then its call id (or the other way round: task parts), then state.status. The quick
# forms take printable ASCII strings without escapes, whose bytes are their text; any other
# head is matched loosely and its matched part decoded as JSON (escapes, UTF-8 checked), and
# a head of another shape falls back to decoding the whole row.
_PLAIN = rb"[ !#-\[\]-~]*"  # printable ASCII but " and \


def _quick_head(call_first: bool, spaced: bool) -> re.Pattern[bytes]:
    """The quick form of a tool part's head: the tool's name, then its call id (or, with
    ``call_first``, the other way round), then ``state.status``; with ``spaced``, as
    Python's json.dumps writes it, a space after each ``:`` and ``,``."""
    names = rb'"callID":"%s","tool":"(%s)"' if call_first else rb'"tool":"(%s)","callID":"%s"'
    text = rb'\{"type":"tool",' + names + rb',"state":\{"status":"(%s)"'
    if spaced:
        text = text.replace(b'":', b'": ?').replace(b'",', b'", ?')
    return re.compile(text % (_PLAIN, _PLAIN, _PLAIN))


_TOOL_HEAD = _quick_head(call_first=False, spaced=False)
_TOOL_HEAD_CALL_FIRST = _quick_head(call_first=True, spaced=False)
# The same heads with Python's json.dumps spacing, which OpenCode never writes: counted as
# the loose match below counts them (its matched part decodes to these very strings),
# without the decode. Tried after the two above.
_TOOL_HEAD_SPACED = _quick_head(call_first=False, spaced=True)
_TOOL_HEAD_SPACED_CALL_FIRST = _quick_head(call_first=True, spaced=True)
_LOOSE = rb'(?:[^"\\]|\\.)*'
# Any other writer's spacing too (JSON allows white space around every ``:`` and ``,``; a
# database written with Python's json.dumps has it): tried only after the quick forms, so
# OpenCode's own bytes never pay for it.
_TOOL_HEAD_ESCAPED = re.compile(
    (
        rb'\{_"type"_:_"tool"_,_"(?:tool"_:_"%s"_,_"callID"_:_"%s"|callID"_:_"%s"_,_"tool"'
        rb'_:_"%s")_,_"state"_:_\{_"status"_:_"%s"'
    ).replace(b"_", rb"[ \t\n\r]*")
    % (_LOOSE, _LOOSE, _LOOSE, _LOOSE, _LOOSE)
)


def tool_of_head(head: bytes) -> bytes | None:
    """The tool's name in the head of a part (its first 256 bytes) that starts as OpenCode
    writes a tool part (``_TOOL_HEAD``, its call id first or second: printable ASCII
    strings without escapes); None for any other head. The rule by which a large part is
    counted as a call from its head alone (docs/store.md)."""
    end = Store._TOOL_HEAD_BYTES  # the head's, however much of the part is given
    match = _TOOL_HEAD.match(head, 0, end) or _TOOL_HEAD_CALL_FIRST.match(head, 0, end)
    return None if match is None else match[1]


ToolCounts = dict[tuple[str, Any, bool], int]  # (session, tool, failed) → calls

_PARALLEL_MIN_PARTS = 200_000  # part rows; below this a worker's start costs more
# Fewer sessions than this are always read by session (a small database's whole tables
# cost little either way) ...
WHOLE_TABLE_SESSIONS = 200
# ... and so are fewer than this share of the database's sessions (``_by_session``).
WHOLE_TABLE_SHARE = 5  # 20 %


def _by_session(count: int, store: Any) -> bool:
    """Whether the rows of ``count`` sessions are read session by session (by the index)
    rather than the whole tables: fewer than ``WHOLE_TABLE_SESSIONS`` of them, or fewer than
    20 % of the database's sessions. The whole tables cost what the database holds, a
    session's rows what they hold. Measured (docs/performance.md, forty-first session),
    the newest sessions by index against the whole tables: at 10,000 sessions in the page
    cache, 11 % of them in 0.5 against 1.4 s, a quarter in 0.85 against 1.5 s, half in as
    long; read from disk, the rows of sessions written side by side, a quarter in 3.6 s
    either way; at 100,000 sessions (30 GB), 5 % in 3 against 48 s, 12 % in 6 against 26 s."""
    if count < WHOLE_TABLE_SESSIONS:
        return True
    return offers_fast_scans(store) and count < store.session_count() // WHOLE_TABLE_SHARE


def _count_tool_parts(store: Any, scope: Sequence[str] | None) -> ToolCounts:
    """Tool calls by (session, tool, failed) of every part in ``scope`` (None: all), as
    decoding each part whole gives them (failed: the mapping's ``call_failed``, which the
    head settles: a bash exit code, written after the output, is not read).

    The store's query hands over the start of every part that could be a tool part. A part
    shorter than that is decoded whole; a longer one that starts the way OpenCode writes a
    tool part is counted from its start (its output, most of the database, is not parsed for
    a later duplicate key or broken JSON, which OpenCode never writes); any other is read
    and decoded whole.

    Code mode's ``execute`` call counts, and so does every tool call its script made (its
    ``metadata.toolCalls``, ``mapping.script_calls``): as the import counts them, MCP calls
    among them; such a part is read whole."""
    counts: ToolCounts = {}
    if not isinstance(store, ToolPartHeads):  # the legacy layout: its files one by one
        for sid, data in store.all_part_data(scope):
            _count_part(counts, sid, data)
        return counts
    plain: dict[tuple[str, bytes, bytes], int] = {}  # (session, tool, status) as bytes
    # A key's pieces, each kept once: every row brings its own copies (a session's id,
    # a tool's name), and a large table's keys would hold hundreds of thousands of them.
    pieces: dict[Any, Any] = {}
    once = pieces.setdefault
    head = _TOOL_HEAD.match
    call_first = _TOOL_HEAD_CALL_FIRST.match
    spaced, spaced_call_first = _TOOL_HEAD_SPACED.match, _TOOL_HEAD_SPACED_CALL_FIRST.match
    scripts: list[tuple[str, int]] = []  # (session, rowid) of execute parts counted by head
    for rows in store.tool_part_batches(scope):
        for rowid, sid, start in rows:
            if len(start) < Store._TOOL_HEAD_BYTES:  # the whole part
                _count_part(counts, sid, start)
                continue
            match = head(start) or call_first(start) or spaced(start) or spaced_call_first(start)
            if match is not None:
                key = (sid, match[1], match[2])
                calls = plain.get(key)
                if calls is None:  # a new key: made of the pieces kept
                    plain[(once(sid, sid), once(key[1], key[1]), once(key[2], key[2]))] = 1
                else:
                    plain[key] = calls + 1
                if match[1] == b"execute":
                    scripts.append((sid, rowid))
            elif not _count_escaped_head(counts, sid, start, scripts, rowid):
                _count_part(counts, sid, store.part_data(rowid))
    for sid, rowid in scripts:
        _count_script(counts, sid, store.part_data(rowid))
    named: dict[tuple[bytes, bytes], tuple[str, bool]] = {}  # (tool, status) → (name, failed)
    for (sid, tool, status), calls in plain.items():
        found = named.get((tool, status))
        if found is None:
            name = tool.decode("ascii")
            failed = _call_failed(_success_of(status.decode("ascii")), name)
            found = named[(tool, status)] = (name, failed)
        key = (sid, *found)
        counts[key] = counts.get(key, 0) + calls
    return counts


def _add_part(counts: ToolCounts, sid: str, part: ToolPartHead) -> None:
    if part.type == "tool":
        tool = part.tool if isinstance(part.tool, str) else None
        status = part.state.status if part.state is not None else None
        key = (sid, tool, _call_failed(_success_of(status), tool))
        counts[key] = counts.get(key, 0) + 1


def _success_of(status: Any) -> bool | None:
    """The mapping's status rule, imported when the first part is counted (a report the
    cache answers never needs the mapping); the name is then the rule itself."""
    global _success_of
    from ..core.mapping import success_of

    _success_of = success_of
    return success_of(status)


def _call_failed(success: bool | None, tool: Any) -> bool:
    """The mapping's ``call_failed`` (imported as ``_success_of`` is)."""
    global _call_failed
    from ..core.mapping import call_failed

    _call_failed = call_failed
    return call_failed(success, tool)


def _count_escaped_head(
    counts: ToolCounts, sid: str, data: bytes, scripts: list[tuple[str, int]], rowid: int
) -> bool:
    """Count a head whose strings hold escapes or bytes beyond ASCII (or JSON spacing);
    False when it is not of the usual shape, or not JSON as far as it goes. An execute
    call's part is noted in ``scripts``, to be read whole."""
    match = _TOOL_HEAD_ESCAPED.match(data)
    if match is None:
        return False
    try:  # the matched part, closed, is the object as far as the head shows it
        part = _PART.decode(match[0] + b"}}")
    except (msgspec.DecodeError, RecursionError):
        return False
    _add_part(counts, sid, part)
    if part.tool == "execute":
        scripts.append((sid, rowid))
    return True


def _count_part(counts: ToolCounts, sid: str, data: bytes | None) -> None:
    if data is None:
        return
    try:  # as the import reads it, a lone surrogate escape included
        part = decode_repairing(_PART, data)[0]
    except (msgspec.DecodeError, RecursionError):
        return
    _add_part(counts, sid, part)
    if part.type == "tool" and part.tool == "execute":
        _count_script(counts, sid, data)


def _count_script(counts: ToolCounts, sid: str, data: bytes | None) -> None:
    """The tool calls code mode's script made, from its ``execute`` part read whole."""
    if data is None:
        return
    from ..core.mapping import script_calls
    from ..core.views import PART_DECODER

    try:
        part = decode_repairing(PART_DECODER, data)[0]
    except (msgspec.DecodeError, RecursionError):
        return
    for call in script_calls(part):
        key = (sid, call.tool, call.success is False)
        counts[key] = counts.get(key, 0) + 1


# session → [turns, inferences, maybe in flight: a reply open, or a prompt newest of its rows
# read (``_count_message_range``); ``_judge_staleness`` decides by the session's newest rows]
MessageCounts = dict[str, list[Any]]


def _start_scan(store: Any) -> Pending | None:
    """The tool calls and message counts (a list of ``(ToolCounts, MessageCounts)``) of the
    whole (large) database, from one process per core taking small rowid ranges of the
    part table, each with the matching share of the message table, from one queue
    (``share_ranges``: this process joins when the result is asked for, unless apsw reads
    them); None when that is not worth it or not possible here."""
    spans = _spans(store) if offers_fast_scans(store) else None
    if spans is None:
        return None
    # With apsw, every range is read by a forked child (see fastscan).
    here = not fastscan.available()
    return share_ranges(store, "part", _PARALLEL_MIN_PARTS, _scan_range, spans, here=here)


# Sessions a report reads by index (a window, those the ledger does not hold) whose parts
# forked children read with apsw (``_start_scoped``) from this many on: fewer cost less
# here than a fork and a connection.
_FORKED_SCOPE_MIN = 32


def _start_scoped(store: Any, scope: Sequence[str]) -> Pending | None:
    """The tool calls (a ``ToolCounts`` per slice) of the parts of the sessions ``scope``,
    read by forked children, slices of it each, with apsw (``fastscan.SessionParts``): a
    large part costs its first bytes, where this process's ``sqlite3`` loads it whole
    for the test of its text (most of the time of a window's report: 0.22 of 0.41 s
    for 11 % of the bench database's sessions). They read while this process counts the
    messages. None when the scope is small, or no child can read so here."""
    if len(scope) < _FORKED_SCOPE_MIN or not offers_fast_scans(store) or not fastscan.available():
        return None
    ids = list(scope)
    size = min(_SCOPE_SLICE, max(1, len(ids) // 2))  # two slices at least, one a child
    slices = -(-len(ids) // size)
    try:
        return share_slices(store, slices, _scoped_slices, ids, size, here=False)
    except OSError:  # no process to fork (a limit reached; those forked are reaped): here
        return None


_SCOPE_SLICE = 16  # sessions a child reads in one query


def _scoped_slices(uri: str, low: int, high: int, ids: list[str], size: int) -> ToolCounts:
    """A forked child's share of ``_start_scoped``: the sessions of the slices [low, high)
    of ``ids``, ``size`` a slice."""
    if not in_forked_child():  # a slice a child died with: apsw is for children alone
        raise InputError("a worker ended without the counts of its sessions' parts")
    counts: ToolCounts = {}  # keyed by session: no key in two chunks
    end = min(high * size, len(ids))
    with fastscan.connect(uri, "part") as conn:
        for at in range(low * size, end, 500):  # SQLite's variable limit
            some = ids[at : min(at + 500, end)]
            counts.update(_count_tool_parts(fastscan.SessionParts(conn, some), None))
    return counts


def _counted_beside(
    store: Any, scope: Sequence[str] | None, summaries: dict[str, Any], parts: Pending | None
) -> None:
    """``_count_messages`` while the children of ``parts`` (``_start_scoped``) read: they
    are stopped and reaped if it fails."""
    try:
        _count_messages(store, scope, summaries)
    except BaseException:
        if parts is not None:
            parts.cancel()
        raise


def _scoped_tool_counts(
    store: Any, scope: Sequence[str] | None, pending: Pending | None
) -> ToolCounts:
    """``_count_tool_parts(store, scope)``: from ``pending`` (``_start_scoped``) when the
    children read them, else here. A child that could not (text that is not UTF-8, which
    apsw does not replace as this process's reads do) leaves it to this process."""
    if pending is not None:
        try:
            slices = pending()
        except InputError:
            pass
        else:
            counts: ToolCounts = {}
            for found in slices:  # keyed by session: no key in two slices
                counts.update(found)
            return counts
    return _count_tool_parts(store, scope)


Spans = tuple[tuple[int, int], tuple[int, int] | None]  # the part and message tables' rowids

# Part rowids per range when this process reads the whole table alone: a range's counts
# are applied and let go before the next is read, as the workers' are, so that the counts
# of every (session, tool) of a large table do not wait in memory all at once.
_HERE_PART_ROWIDS = 200_000


def _spans(store: Any) -> Spans | None:
    """The rowids of the part and message tables; None when the part table is empty."""
    parts, messages = store.rowid_ranges("part", 1), store.rowid_ranges("message", 1)
    return (parts[0], messages[0] if messages else None) if parts else None


def _counted_here(store: Any) -> Iterator[tuple[ToolCounts, MessageCounts]] | None:
    """The whole table's tool calls and message counts, read by this process range by
    range of the part table (each with its share of the message table), as ``_start_scan``
    shares them out; None when the part table is empty."""
    spans = _spans(store)
    if spans is None:
        return None
    low, high = spans[0]
    return (
        _scan_range(store.uri, start, min(start + _HERE_PART_ROWIDS, high), spans)
        for start in range(low, high, _HERE_PART_ROWIDS)
    )


def _scan_range(uri: str, low: int, high: int, spans: Spans) -> tuple[ToolCounts, MessageCounts]:
    """A worker: tool calls of the parts with rowid in [low, high), and the message counts
    of the same share of the message table (by rowid). A forked child reads with apsw where
    it can (fastscan), any other process with sqlite3."""
    if in_forked_child():
        with fastscan.connect(uri, "part or message") as conn:
            if conn is not None:
                parts = fastscan.PartRange(conn, low, high)
                return _scan(conn, parts, low, high, spans, fastscan.errors())
    with worker_connection(uri, "part or message") as conn:
        return _scan(conn, _PartRange(conn, low, high), low, high, spans, (sqlite3.Error,))


def _scan(
    conn: Any,
    parts: Any,
    low: int,
    high: int,
    spans: Spans,
    errors: tuple[type[BaseException], ...],
) -> tuple[ToolCounts, MessageCounts]:
    tools = _count_tool_parts(parts, None)
    messages: MessageCounts = {}
    if spans[1] is not None:
        _count_message_range(conn, *_message_share(low, high, spans), messages, errors)
    return tools, messages


def _message_share(low: int, high: int, spans: Spans) -> tuple[int, int]:
    """The message rowids [start, stop) read along with the parts [low, high): the share
    of the message table that the parts are of the part table, shares that follow one
    another as the part ranges do, the last one ending with the table."""
    (part_low, part_high), message_span = spans
    first, end = message_span or (0, 0)

    def edge(rowid: int) -> int:
        done = (rowid - part_low) * (end - first) // (part_high - part_low)
        return first + min(done, end - first)

    return edge(low), edge(high)


class _PartRange:
    """The two store queries ``_count_tool_parts`` needs, over a rowid range of the part
    table, on a worker's own connection."""

    def __init__(self, conn: Any, low: int, high: int) -> None:
        self.conn, self.low, self.high = conn, low, high

    def tool_part_batches(self, scope: None) -> Iterator[list[tuple[Any, ...]]]:
        cursor = self.conn.execute(
            f"{Store._TOOL_PARTS} AND rowid >= ? AND rowid < ?", (self.low, self.high)
        )
        yield from iter(lambda: cursor.fetchmany(4096), [])

    def part_data(self, rowid: int) -> bytes | None:
        row = self.conn.execute(Store._PART_DATA, (rowid,)).fetchone()
        return row[0] if row else None


# --------------------------------------------------------------------------- messages


# Messages are decoded up to 1,024 rowids at a time, grouped by session, each row wrapped as a
# one-element array and the rows joined by a newline. `]`, white space, `[` can stand nowhere
# inside a JSON value (and no string holds a raw newline), so when the whole decodes into as
# many one-element arrays as there are rows, each array is exactly one row: the same as
# decoding the rows one by one. A group that does not decode that way (a row that is not
# JSON, not an object, ``"time": null`` …) is read row by row.
#
# Whether a session's newest message among the group is a prompt (its reply yet to come: in
# flight) is SQLite's to say, in C: OpenCode writes a prompt's data starting
# ``{"role":"user",`` (a shell command's, ``{"time":{"created":…},"role":"user",``), and
# the newest row by ``time_created`` (a prompt on a tie) has the greatest
# ``time_created * 2 + prompt``. A group whose prompts are not all written so (as many as
# the decoded rows say), or that holds a message neither a prompt nor a reply, counts as
# maybe in flight: its newest messages are read (``_judge_staleness``). Once a group shows
# prompts the patterns missed (a writer that spaces its JSON, as json.dumps does), the rest
# of the range is read with a spaced writer's patterns too (``_SPACED``): with OpenCode's
# own spelling alone they would cost a tenth more of the query for nothing; without them,
# every session of such a store would be read again.
_MESSAGE_CHUNK = 1024  # rowids
_PROMPTS = ('{"role":"user",*', '{"time":{"created":*},"role":"user",*')  # OpenCode's
_SPACED_PROMPTS = ('{"role": "user", *', '{"time": {"created": *}, "role": "user", *')


def _messages_by_session(*prompts: str) -> str:
    prompt = "(" + " OR ".join(f"data GLOB '{pattern}'" for pattern in prompts) + ")"
    return (
        "SELECT session_id, count(*), CAST(group_concat(data, ']' || char(10) || '[') AS BLOB), "
        f"sum({prompt}), max(time_created * 2 + {prompt}) "
        "FROM message WHERE rowid >= ? AND rowid < ? GROUP BY session_id"
    )


_MESSAGES_BY_SESSION = _messages_by_session(*_PROMPTS)
_SPACED = _messages_by_session(*_PROMPTS, *_SPACED_PROMPTS)
_MESSAGES_OF_SESSION = (
    "SELECT time_created, CAST(data AS BLOB) FROM message "
    "WHERE session_id = ? AND rowid >= ? AND rowid < ?"
)
_MESSAGES_OF_RANGE = (
    "SELECT session_id, time_created, CAST(data AS BLOB) FROM message "
    "WHERE rowid >= ? AND rowid < ?"
)
_GROUPED = msgspec.json.Decoder(tuple[GroupedMessage])
_FIRST = operator.itemgetter(0)
_ROLE = operator.attrgetter("role")
_COMPLETED = operator.attrgetter("time.completed")
_RUNNING = ("assistant", None)


def _count_message_range(
    conn: Any,
    low: int,
    high: int,
    counts: MessageCounts,
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,),
) -> None:
    """Add the turns, inferences and in-flight of the messages with rowid in [low, high)
    (``errors``: what ``conn``, sqlite3's or apsw's, raises)."""
    query = _MESSAGES_BY_SESSION
    start = low
    while start < high:
        end = min(start + _MESSAGE_CHUNK, high)
        try:
            groups = conn.execute(query, (start, end)).fetchall()
        except errors:  # e.g. a session's rows joined beyond SQLite's length limit
            _count_rows(conn, start, end, counts)
            start = end
            continue
        counted, missed, redo = _counted_groups(groups)
        if missed and query is _MESSAGES_BY_SESSION:
            query = _SPACED  # this chunk again, and the rest of the range so
            continue
        for sid, turns, inferences, running in counted:
            _add_messages(counts, sid, turns, inferences, running)
        for sid in redo:
            view = _MessageCounter()
            for created, data in conn.execute(_MESSAGES_OF_SESSION, (sid, start, end)):
                _count_message(view, data, created)
            _add_messages(counts, sid, view.turns, view.inferences, view.maybe_in_flight())
        start = end


def _counted_groups(
    groups: list[tuple[Any, ...]],
) -> tuple[list[tuple[str, int, int, bool]], bool, list[str]]:
    """A chunk's sessions counted from their grouped rows (``_MESSAGES_BY_SESSION``): each
    one's (id, turns, inferences, maybe in flight); whether a group held prompts the SQL
    patterns missed; and the sessions whose rows did not decode as a group (read again)."""
    counted, redo = [], []
    missed = False
    for sid, rows, joined, prompts, newest in groups:
        if sid is None:
            continue
        try:
            messages = _GROUPED.decode_lines(b"[" + joined + b"]") if joined else ()
        except (msgspec.DecodeError, RecursionError):
            messages = ()
        if len(messages) != rows:
            redo.append(sid)
            continue
        views = list(map(_FIRST, messages))
        roles = list(map(_ROLE, views))
        inferences, turns = roles.count("assistant"), roles.count("user")
        running = bool(inferences) and _RUNNING in zip(roles, map(_COMPLETED, views), strict=True)
        if turns and not running:  # the newest a prompt, or not known
            missed = missed or (type(prompts) is int and prompts < turns)
            running = (
                prompts != turns
                or turns + inferences != rows
                or type(newest) is not int
                or bool(newest & 1)
            )
        counted.append((sid, turns, inferences, running))
    return counted, missed, redo


def _count_rows(conn: Any, start: int, end: int, counts: MessageCounts) -> None:
    """``_count_message_range`` over [start, end) row by row, as the grouped read counts it."""
    views: dict[str, _MessageCounter] = {}
    for sid, created, data in conn.execute(_MESSAGES_OF_RANGE, (start, end)):
        if sid is None:
            continue
        view = views.get(sid)
        if view is None:
            view = views[sid] = _MessageCounter()
        _count_message(view, data, created)
    for sid, view in views.items():
        _add_messages(counts, sid, view.turns, view.inferences, view.maybe_in_flight())


def _add_messages(
    counts: MessageCounts, sid: str, turns: int, inferences: int, running: bool
) -> None:
    found = counts.get(sid)
    if found is None:
        counts[sid] = [turns, inferences, running]
    else:
        found[0] += turns
        found[1] += inferences
        found[2] = found[2] or running


class _MessageCounter:
    """A session's turns and inferences as its messages are counted, whether a reply is
    open (``in_flight``), and which of its messages is newest: a prompt (``waits``) or
    not, or unknown (``unsure``: a prompt or reply with no integer time)."""

    __slots__ = ("turns", "inferences", "in_flight", "newest", "waits", "unsure")

    def __init__(self) -> None:
        self.turns = self.inferences = 0
        self.in_flight = self.waits = self.unsure = False
        self.newest: int | None = None

    def maybe_in_flight(self) -> bool:
        """A reply is open, or the newest message may be a prompt awaiting its reply
        (``_judge_staleness`` reads the newest messages to decide)."""
        return self.in_flight or bool(self.turns) and (self.waits or self.unsure)


def _count_messages(store: Any, scope: Sequence[str] | None, summaries: dict[str, Any]) -> None:
    """Turns, inferences and in-flight (maybe: ``_MessageCounter.maybe_in_flight``) of every
    summary (or ``_MessageCounter``), from the messages."""
    if scope is None and offers_fast_scans(store):
        _apply_messages(summaries, _whole_message_counts(store))
        return
    counters: dict[str, _MessageCounter] = {}
    for sid, _mid, created, data in _message_rows(store, scope):
        if sid in summaries:
            counter = counters.get(sid)
            if counter is None:
                counter = counters[sid] = _MessageCounter()
            _count_message(counter, data, created)
    for sid, counter in counters.items():
        summary = summaries[sid]
        summary.turns += counter.turns
        summary.inferences += counter.inferences
        summary.in_flight = summary.in_flight or counter.maybe_in_flight()


def _whole_message_counts(store: Any) -> MessageCounts:
    """Turns, inferences and in-flight of every session, from the whole message table."""
    counts: MessageCounts = {}
    with worker_connection(store.uri, "message") as conn:
        for low, high in store.rowid_ranges("message", 1):
            _count_message_range(conn, low, high, counts)
    return counts


def _apply_messages(summaries: dict[str, SessionSummary], counts: MessageCounts) -> None:
    for sid, (turns, inferences, running) in counts.items():
        summary = summaries.get(sid)
        if summary is not None:
            summary.turns += turns
            summary.inferences += inferences
            summary.in_flight = summary.in_flight or running


def _count_message(counter: _MessageCounter, data: bytes | None, created: Any) -> None:
    """Count one message row, created at ``created`` (its row's ``time_created``), into
    ``counter``."""
    if data is None:
        return
    try:  # as every report reads it: a damaged `time` is no time, still counted
        message = decode_leniently(_MESSAGE, data)
    except (msgspec.DecodeError, RecursionError):
        return
    prompt = message.role == "user"
    if prompt:
        counter.turns += 1
    elif message.role == "assistant":
        counter.inferences += 1
        if message.time is None or message.time.completed is None:
            counter.in_flight = True
    else:
        return  # neither prompt nor reply: the newest of those is what counts
    if type(created) is not int:
        counter.unsure = True
    elif counter.newest is None or created > counter.newest:
        counter.newest, counter.waits = created, prompt
    elif created == counter.newest:  # a tie: maybe the prompt (the row's id decides)
        counter.waits = counter.waits or prompt


def _message_rows(store: Any, scope: Sequence[str] | None) -> Iterator[tuple[Any, ...]]:
    """(session id, message id, created, data) of the messages in ``scope`` (None: all);
    created is the row's ``time_created``, or in the legacy files, where each session's
    messages come in their order, that order."""
    if offers_fast_scans(store):
        return itertools.chain.from_iterable(store.message_batches(scope))
    return (
        (sid, None, index, data) for index, (sid, data) in enumerate(store.all_message_data(scope))
    )


def _apply_tools(
    summaries: dict[str, SessionSummary],
    counts: ToolCounts,
    mcp_servers: Callable[[str | None], Sequence[str]],
    servers_in: dict[str | None, Sequence[str]],
) -> None:
    for (sid, tool, failed), calls in counts.items():
        summary = summaries.get(sid)
        if summary is not None:
            _add_tool(summary, tool, failed, calls, mcp_servers, servers_in)


def _add_tool(
    summary: SessionSummary,
    tool: Any,
    failed: bool,
    calls: int,
    mcp_servers: Callable[[str | None], Sequence[str]],
    servers_in: dict[str | None, Sequence[str]],
) -> None:
    summary.tool_calls += calls
    if failed:
        summary.tool_failures += calls
    if isinstance(tool, str):
        directory = summary.directory
        servers = servers_in.get(directory)
        if servers is None:
            servers = servers_in[directory] = mcp_servers(directory)
        server = mcp_server_of(tool, servers) if servers else None
        if server is not None:
            if not summary.mcp_calls:
                summary.mcp_calls = {}
            summary.mcp_calls[server] = summary.mcp_calls.get(server, 0) + calls


def _add_kept_tools(
    summary: SessionSummary,
    tools: list[tuple[str | None, bool, int]],
    mcp_servers: Callable[[str | None], Sequence[str]],
    servers_in: dict[str | None, Sequence[str]],
) -> None:
    """A ledger entry's tool calls added to ``summary``: as ``_add_tool`` adds each, in one
    sum where the session's directory has no MCP server to attribute them to (the usual)."""
    if not tools:
        return
    directory = summary.directory
    servers = servers_in.get(directory)
    if servers is None:
        servers = servers_in[directory] = mcp_servers(directory)
    if servers:
        for tool, failed, calls in tools:
            _add_tool(summary, tool, failed, calls, mcp_servers, servers_in)
        return
    summary.tool_calls += sum([calls for _tool, _failed, calls in tools])
    summary.tool_failures += sum([calls for _tool, failed, calls in tools if failed])


def summarize(
    store: Store,
    rows: Sequence[SessionRow],
    *,
    mcp_servers: Callable[[str | None], Sequence[str]] = lambda directory: (),
    scan: Pending | None = None,
    now_ms: float | None = None,
    cache: ReportCache | None = None,
    servers: dict[str | None, Sequence[str]] | None = None,
    fold: bool = True,
    let_go: bool = False,
) -> list[SessionSummary]:
    """Summaries of ``rows`` (in their order); descendants are read to fold them in
    (``fold``; else only their part is given, ``subagent_*``).
    ``scan``: a whole-table scan the caller started already (``_start_scan``);
    ``now_ms`` (default: the clock) tells a stale reply from one in flight; ``cache``: the
    report cache, whose ledger spares the sessions that did not change; ``servers`` is
    given the MCP servers consulted per directory. ``let_go``: ``rows`` is a list of the
    caller's own, emptied once the summaries are made, so that its rows are not held
    while the tables are counted (the report's peak)."""
    order = [row.id for row in rows]
    # A whole large table is read by one process per core, started first: they read while
    # this one looks up the sessions (and are stopped if that fails).
    kept = _kept_counts(cache)
    if scan is None and not kept and not _by_session(len(rows), store):
        scan = _start_scan(store)
    try:
        tree, summaries, scope = _sessions_below(store, rows)
    except BaseException:
        if scan is not None:
            scan.cancel()
        raise
    if let_go:
        rows.clear()  # type: ignore[attr-defined]  # a list (``let_go``)
    if kept and scan is None:  # read only the sessions the cache does not hold
        unread = [sid for sid in summaries if sid not in kept]
        scope = unread if _by_session(len(unread), store) else None
    if scan is None and scope is None:
        scan = _start_scan(store)
    counts: Iterable[tuple[ToolCounts, MessageCounts]] | None = None
    if scan is not None:  # each range's counts read, applied and let go in turn
        counts = scan.each()
    elif scope is None and offers_fast_scans(store):
        counts = _counted_here(store)  # the same, read by this process alone
    if counts is None:
        fresh = summaries if scope is None else {sid: summaries[sid] for sid in scope}
        counts = [({}, {})]  # no session to read
        if scope is None or scope:
            parts = _start_scoped(store, scope) if scope else None  # they read meanwhile
            _counted_beside(store, scope, fresh, parts)
            counts = [(_scoped_tool_counts(store, scope, parts), {})]
    servers_in: dict[str | None, Sequence[str]] = {}  # directory → configured MCP servers
    if cache is not None:
        # Counts of the whole tables hold every session, those the ledger kept too: the
        # kept entries stand only beside counts of the sessions it did not keep.
        whole = scan is not None or scope is None
        entries = _ledger_entries(counts, summaries, {} if whole else kept)
        for sid, summary in summaries.items():  # every summary counted from the ledger
            entry = entries[sid]
            summary.turns, summary.inferences = entry.turns, entry.inferences
            summary.in_flight = entry.in_flight
            _add_kept_tools(summary, entry.tools, mcp_servers, servers_in)
        _judge_staleness(store, summaries.values(), now_ms, tree, entries)
        cache.keep_ledger("sessions", _LEDGER_REQUEST, entries)
    else:
        for tool_counts, message_counts in counts:
            _apply_messages(summaries, message_counts)
            _apply_tools(summaries, tool_counts, mcp_servers, servers_in)
        _judge_staleness(store, summaries.values(), now_ms, tree)
    if servers is not None:
        servers.update(servers_in)

    if hasattr(store, "forks"):  # a store of the legacy layout has no forks
        many = len(summaries) >= WHOLE_TABLE_SESSIONS
        for sid in store.forks(None if many else list(summaries)):
            if sid in summaries:
                summaries[sid].forked = True
    for sid, undone in undone_figures(store, summaries, cache=cache).items():
        summaries[sid].undone_inferences = undone.inferences
        summaries[sid].undone_cost = undone.cost
    _fold(summaries, tree, order, fold)
    return [summaries[sid] for sid in order]


def streams_every_session(store: Any) -> bool:
    """Whether a report of every session of ``store`` is made one session at a time, in
    its order (``each_summary``): a database's (not the legacy layout's)."""
    return offers_fast_scans(store) and hasattr(store, "each_session")


_SUMMARIES_OUT = msgspec.msgpack.Encoder()  # a helper's summaries (``made_beside``)
_SUMMARIES_IN = msgspec.msgpack.Decoder(list[SessionSummary])
_UNSETTLED: Any = (None,)  # the MCP servers of no configuration: a memo's check never met


def each_summary(
    store: Any,
    *,
    all_sessions: bool = False,
    fold: bool = True,
    mcp_servers: Callable[[str | None], Sequence[str]] = lambda directory: (),
    scan: Pending | None = None,
    now_ms: float | None = None,
    cache: ReportCache | None = None,
    servers: dict[str | None, Sequence[str]] | None = None,
) -> Iterator[SessionSummary]:
    """The summaries of every session (``all_sessions``; else every top-level one), each
    made as it is asked for, in the store's order (newest activity first): ``summarize``
    of ``store.sessions(top_level=not all_sessions)``, the same summaries, holding only
    what a session's summary needs of the others — each session's counts (the ledger's
    entries) and the own figures of every subagent, for the fold — not every summary
    (100,000 sessions: about 1 KB each). The arguments are ``summarize``'s; ``servers``
    is complete once the last summary is made, and the ledger then kept."""
    kept = _kept_counts(cache)
    if scan is None and not kept:  # its workers read while this process reads the sessions
        scan = _start_scan(store)
    try:
        tree = store.children()
        forks = store.forks(None)
        undone = undone_figures(store, pending_reverts(store), cache=cache)
    except BaseException:
        if scan is not None:
            scan.cancel()
        raise
    entries = _every_entries(store, kept, scan)
    kept = {}  # what is still true of it is in ``entries`` (a whole scan: none of it)
    if cache is not None:
        cache.let_go("sessions", _LEDGER_REQUEST)
    servers_in: dict[str | None, Sequence[str]] = {}  # directory → configured MCP servers
    db_path = shown_path(store.path)

    def counted(row: SessionRow) -> SessionSummary:
        summary = _base(row, db_path)
        entry = entries.get(row.id)
        if entry is None:  # nothing of it in the tables
            entry = entries[row.id] = SessionCounts(0, 0, False, [])
        summary.turns, summary.inferences = entry.turns, entry.inferences
        summary.in_flight = entry.in_flight
        _add_kept_tools(summary, entry.tools, mcp_servers, servers_in)
        if row.id in forks:
            summary.forked = True
        found = undone.get(row.id)
        if found is not None:
            summary.undone_inferences, summary.undone_cost = found.inferences, found.cost
        return summary

    # The own figures of every session below another, for the sessions above it.
    owns = {row.id: _own(counted(row)) for row in store.each_session(subagents=True)}
    now = time.time() * 1000 if now_ms is None else now_ms

    def folded(row: SessionRow) -> SessionSummary:
        summary = counted(row)
        children = tree.get(row.id)
        below = [owns[d] for d in descendants([row.id], tree) if d in owns] if children else []
        _fold_one(summary, _own(summary), below, children, fold)
        return summary

    shared: dict[str, str] = {}  # as ``each_session`` shares a row's strings

    def maker(
        reader: Any, asked: dict[str, int | None] | None = None
    ) -> Callable[[tuple[Any, ...]], SessionSummary]:
        """A row's summary from its cells, those in flight judged by ``reader``."""

        def made(cells: tuple[Any, ...]) -> SessionSummary:
            summary = folded(reader.session_row(cells, shared))
            if summary.in_flight:
                _judge_staleness(reader, [summary], now, tree, entries, asked)
            return summary

        return made

    def there() -> tuple[Callable[[tuple[Any, ...]], SessionSummary], Callable[[], Any]]:
        asked: dict[str, int | None] = {}  # sessions' last writes, for this process's ledger

        def side() -> Any:
            learned = (servers_in, dict(asked))
            asked.clear()
            return learned

        return maker(store.reopen(), asked), side  # the helper's own connection

    def fixed(summary: SessionSummary) -> SessionSummary:
        if summary.id not in entries:  # as ``counted`` adds it here
            entries[summary.id] = SessionCounts(0, 0, False, [])
        return summary

    # Directories whose MCP settings the helper read otherwise than this process did (they
    # changed while the report was made): the summaries do not all agree with one setting.
    unsettled: set[str | None] = set()

    def merge(learned: Any) -> None:
        servers, asked = learned
        for directory, names in servers.items():
            if servers_in.setdefault(directory, names) != names:
                unsettled.add(directory)
        for sid, written in asked.items():
            entry = entries.get(sid)
            if entry is not None:
                entry.written, entry.written_known = written, True

    store.read_row_totals()  # before the helper is forked: the totals it makes rows with
    try:
        yield from made_beside(
            store.each_session(top_level=not all_sessions, cells=True),  # rows made there
            maker(store),
            there,
            _SUMMARIES_OUT.encode,
            _SUMMARIES_IN.decode,
            jobs=len(entries),
            fixed=fixed,
            merge=merge,
        )
        if servers is not None:
            servers.update(servers_in)
            # A check no setting ever meets: the memo is made again next time.
            servers.update(dict.fromkeys(unsettled, _UNSETTLED))
    finally:  # the counts are whole before the first summary: kept even if output stops
        if cache is not None:
            cache.keep_ledger("sessions", _LEDGER_REQUEST, entries)


def _every_entries(
    store: Any, kept: dict[str, SessionCounts], scan: Pending | None
) -> dict[str, SessionCounts]:
    """Every session's counts from messages and parts (those of a session with none may be
    missing): the ledger's ``kept`` entries and the sessions it does not hold, read by
    session when they are few, else the whole tables (by ``scan``, when given)."""
    if scan is None and kept:
        unread = [sid for sid in store.session_parents() if sid not in kept]
        if _by_session(len(unread), store):
            counters = {sid: _MessageCounter() for sid in unread}
            tools: ToolCounts = {}
            if unread:
                parts = _start_scoped(store, unread)  # they read meanwhile
                _counted_beside(store, unread, counters, parts)
                tools = _scoped_tool_counts(store, unread, parts)
            return _ledger_entries([(tools, {})], counters, kept)  # type: ignore[arg-type]
    # None of the kept entries is used: let go (the cache's copy too, ``ledger``) before
    # the tables' counts come in (at 100,000 sessions, about 30 MB).
    kept.clear()
    if scan is None:
        scan = _start_scan(store)
    counts = scan.each() if scan is not None else _counted_here(store)
    if counts is None:  # no part rows: the messages alone
        counts = [({}, _whole_message_counts(store))]
    return _ledger_entries(counts, {}, {})


_TOKENS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)


class _Own(NamedTuple):
    """A session's own figures, as the fold adds them to the sessions above it (read
    before any is folded)."""

    inferences: int
    tool_calls: int
    tool_failures: int
    tokens: tuple[int, ...]  # in ``_TOKENS``' order
    cost: float  # as stored
    mcp_calls: dict[str, int]
    undone_inferences: int
    undone_cost: float


_OWN_TOKENS = operator.attrgetter(*_TOKENS)


def _own(summary: SessionSummary) -> _Own:
    return _Own(
        summary.inferences,
        summary.tool_calls,
        summary.tool_failures,
        _OWN_TOKENS(summary),
        summary.cost,
        summary.mcp_calls,
        summary.undone_inferences,
        summary.undone_cost,
    )


def _fold(
    summaries: dict[str, SessionSummary],
    tree: dict[str, list[str]],
    wanted: Sequence[str],
    fold: bool,
) -> None:
    """``_fold_one`` of each wanted summary, with its descendants among ``summaries``. The
    summaries hold own figures till then."""
    owns = {sid: _own(summary) for sid, summary in summaries.items()}
    for sid in dict.fromkeys(wanted):
        children = tree.get(sid)
        # Most sessions have nothing below them: no walk of the tree for those.
        below = [owns[d] for d in descendants([sid], tree) if d in owns] if children else []
        _fold_one(summaries[sid], owns[sid], below, children, fold)


def _fold_one(
    summary: SessionSummary,
    own: _Own,
    below: Sequence[_Own],
    children: Sequence[str] | None,
    fold: bool,
) -> None:
    """A summary's ``children`` and ``subagent_*`` (``below``: its descendants' own figures,
    each session once), its costs written by the one rule for a session's spend (``spend``,
    so that they read as ``usage``, ``statusline`` and ``top`` give them), and with
    ``fold`` every figure but ``turns`` with its descendants' added. ``own``: its own
    figures."""
    summary.children = list(children) if children else []
    summary.cost = written_spend([own.cost], [own.inferences])
    if not below:
        summary.total_cost = summary.cost
        return
    summary.subagent_sessions = len(below)
    summary.subagent_inferences = sum(o.inferences for o in below)
    summary.subagent_tool_calls = sum(o.tool_calls for o in below)
    summary.subagent_tool_failures = sum(o.tool_failures for o in below)
    summary.subagent_tokens = sum(o.tokens[-1] for o in below)  # total_tokens
    summary.subagent_cost = written_spend([o.cost for o in below], [o.inferences for o in below])
    family = [own, *below]
    summary.total_cost = written_spend([o.cost for o in family], [o.inferences for o in family])
    if not fold:
        return
    undone = [(o.undone_inferences, o.undone_cost) for o in family if o.undone_inferences]
    if undone:  # what a pending undo undid, in this session or below: folded too
        summary.undone_inferences = sum(n for n, _cost in undone)
        summary.undone_cost = summed_cost(
            sum(cost for _n, cost in undone), summary.undone_inferences
        )
    summary.inferences += summary.subagent_inferences
    summary.tool_calls += summary.subagent_tool_calls
    summary.tool_failures += summary.subagent_tool_failures
    for index, name in enumerate(_TOKENS):
        setattr(summary, name, getattr(summary, name) + sum(o.tokens[index] for o in below))
    mcp: dict[str, int] = {}
    for o in below:
        for server, calls in o.mcp_calls.items():
            mcp[server] = mcp.get(server, 0) + calls
    if mcp:
        calls = dict(summary.mcp_calls)
        for server, n in mcp.items():
            calls[server] = calls.get(server, 0) + n
        summary.mcp_calls = calls
    summary.cost = summary.total_cost


# --------------------------------------------------------------------------- the ledger


class SessionCounts(Struct, array_like=True):
    """What ``sessions`` keeps of a session in the report cache: its counts from messages
    and parts (``tools``: (tool, failed, calls))."""

    turns: int
    inferences: int
    # Maybe in flight: a reply open, or the newest message maybe a prompt awaiting its
    # reply; each report reads the session's newest messages to tell (``_judge_staleness``)
    in_flight: bool
    tools: list[tuple[str | None, bool, int]]
    # When its messages and parts were last written (Store.last_write), once asked.
    written: int | None = None
    written_known: bool = False


_LEDGER_REQUEST = ["counts", 3]  # the shape of SessionCounts: a new one, a new ledger


def _kept_counts(cache: ReportCache | None) -> dict[str, SessionCounts]:
    """The ledger's entries still true (none without the cache), each session's (tool,
    failed, calls) shared with the sessions that have the same, as a scan's counts share
    them (``_ledger_entries``): at 100,000 sessions, 600,000 tuples decoded are a few
    thousand kept."""
    if cache is None:
        return {}
    shared: dict[tuple[Any, bool, int], tuple[Any, bool, int]] = {}
    intern = sys.intern

    def tidy(entry: SessionCounts) -> None:
        tools = entry.tools
        for at, call in enumerate(tools):
            found = shared.get(call)
            if found is None:
                tool = call[0]
                found = shared[call] = (intern(tool) if type(tool) is str else tool, *call[1:])
            tools[at] = found

    return cache.ledger("sessions", _LEDGER_REQUEST, SessionCounts, tidy)


def _ledger_entries(
    counts: Iterable[tuple[ToolCounts, MessageCounts]],
    summaries: dict[str, SessionSummary],
    kept: dict[str, SessionCounts],
) -> dict[str, SessionCounts]:
    """The ledger after this report: ``kept`` entries, and the sessions just read. After a
    whole-table scan (``kept`` empty), every session the scan saw, read or not; after a
    scoped read, the counts of the scoped sessions are in their summaries (messages) and
    in ``counts`` (tools)."""
    entries: dict[str, SessionCounts] = dict(kept)
    fresh = [sid for sid in summaries if sid not in kept]
    for sid in fresh:
        entries[sid] = SessionCounts(0, 0, False, [])
    counted: set[str] = set()  # the sessions whose messages the scan counted
    spanning: set[str] = set()  # those whose tool calls came in more than one range
    intern = sys.intern
    # Counted straight into the entries as each range comes (no table keyed by session,
    # tool and outcome first: a large ledger's keys cost more than its counts). Sessions
    # share one (tool, failed, calls) tuple where they have the same (9,400 tuples where
    # 10,000 sessions made 58,000), and a tool's name is one string.
    shared: dict[tuple[str | None, bool, int], tuple[str | None, bool, int]] = {}
    for tool_counts, message_counts in counts:  # once: they may come one range at a time
        for sid, (turns, inferences, running) in message_counts.items():
            entry = entries.get(sid)
            if entry is None:
                entry = entries[sid] = SessionCounts(0, 0, False, [])
            entry.turns += turns
            entry.inferences += inferences
            entry.in_flight = entry.in_flight or bool(running)
            counted.add(sid)
        here: set[str] = set()
        for (sid, tool, failed), calls in tool_counts.items():
            entry = entries.get(sid)
            if entry is None:
                entry = entries[sid] = SessionCounts(0, 0, False, [])
            if sid not in here:
                here.add(sid)
                if entry.tools:
                    spanning.add(sid)
            call = shared.get((tool, failed, calls))  # a tool is a name or None
            if call is None:
                name = intern(tool) if type(tool) is str else tool
                call = shared[tool, failed, calls] = (name, failed, calls)
            entry.tools.append(call)
    for sid in fresh:
        if sid not in counted:  # read before, by session: its summary holds its counts
            entry, summary = entries[sid], summaries[sid]
            entry.turns, entry.inferences = summary.turns, summary.inferences
            entry.in_flight = bool(summary.in_flight)
    for sid in spanning:
        entries[sid].tools = _summed_calls(entries[sid].tools)
    return entries


def _summed_calls(listed: list[tuple[Any, bool, int]]) -> list[tuple[Any, bool, int]]:
    """A session's (tool, failed, calls), the calls of a tool and outcome counted in more
    than one range summed, in the order each first came."""
    if len(listed) < 2:
        return listed
    sums: dict[tuple[Any, bool], int] = {}
    for tool, failed, calls in listed:
        sums[tool, failed] = sums.get((tool, failed), 0) + calls
    if len(sums) == len(listed):
        return listed
    return [(tool, failed, calls) for (tool, failed), calls in sums.items()]


def _judge_staleness(
    store: Any,
    summaries: Iterable[SessionSummary],
    now_ms: float | None,
    tree: dict[str, list[str]],
    entries: dict[str, SessionCounts] | None = None,
    asked: dict[str, int | None] | None = None,
) -> None:
    """A session in flight — its newest reply open, or a prompt newer than every reply
    (``stale.open_reply``, read for the sessions the counts say may be) — is busy, or
    stale with nothing written for a while, to it or below it (``reports.stale``, the rule
    ``usage`` applies too). With the ledger's ``entries``, when a session's rows were last
    written is read once per stamp and kept in its entry, and noted in ``asked`` (a helper
    process's, for the ledger its parent keeps)."""
    from .stale import open_reply, stored_state

    def rows_written(sid: str) -> int | None:
        entry = entries.get(sid) if entries is not None else None
        if entry is None:
            return store.last_write(sid)
        if not entry.written_known:
            entry.written, entry.written_known = store.last_write(sid), True
            if asked is not None:
                asked[sid] = entry.written
        return entry.written

    summaries = list(summaries)
    # The session rows' last writes, as read already (the stale rule asks for each family).
    known = {summary.id: summary.time_updated for summary in summaries}

    def row_updated(sid: str) -> int | None:
        if sid in known:
            return known[sid]
        row = store.session(sid)
        return row.time_updated if row is not None else None

    now = time.time() * 1000 if now_ms is None else now_ms
    limit = stale_after_ms()
    for summary in summaries:
        if not summary.in_flight:
            continue
        if open_reply(store, summary.id) is None:  # only an older reply is open (left),
            summary.in_flight = False  # or the newest message is no prompt after all
            continue
        summary.state = stored_state(
            store,
            summary.id,
            tree,
            now_ms=now,
            stale_after=limit,
            rows_written=rows_written,
            row_updated=row_updated,
        )
        summary.in_flight = summary.state == BUSY


def _sessions_below(
    store: Store, rows: Sequence[SessionRow]
) -> tuple[dict[str, list[str]], dict[str, SessionSummary], list[str] | None]:
    """The parent → children tree, the bare summaries of ``rows`` and their descendants, and
    the sessions whose rows to read (None: so many that the whole tables are read)."""
    tree = store.children()
    wanted = [row.id for row in rows]
    below = descendants(wanted, tree)
    known = {row.id: row for row in rows}
    extra = [sid for sid in below if sid not in known]
    for sid in extra:
        row = store.session(sid)
        if row is not None:
            known[sid] = row
    db_path = shown_path(store.path)  # a path that names the session from anywhere
    summaries = {sid: _base(row, db_path) for sid, row in known.items()}
    ids = list(summaries)
    return tree, summaries, ids if _by_session(len(ids), store) else None


# The CSV columns of ``sessions``, in order.
SESSION_COLUMNS = (
    "id",
    "path",
    "parent_id",
    "title",
    "agent",
    "model",
    "provider",
    "directory",
    "version",
    "time_created",
    "time_updated",
    "time_archived",
    "turns",
    "inferences",
    "in_flight",
    "state",
    "tool_calls",
    "tool_failures",
    "mcp_calls",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "cost",
    "subagent_sessions",
    "subagent_inferences",
    "subagent_tool_calls",
    "subagent_tool_failures",
    "subagent_tokens",
    "subagent_cost",
    "total_cost",
    "children",
    "undone_inferences",
    "undone_cost",
    "forked",
)


class SessionsReport(Struct, kw_only=True):
    """The ``sessions`` report: one summary per session, newest activity first."""

    sessions: list[SessionSummary]

    def document(self) -> list[dict[str, Any]]:
        """The JSON document: the summaries as ``sessions --format json`` writes them."""
        return msgspec.to_builtins(self.sessions)


def sessions_report(
    store: Any,
    *,
    since_ms: int | None = None,
    limit: int | None = None,
    all_sessions: bool = False,
    mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    cache: ReportCache | None = None,
    fold: bool = True,
    until_ms: int | None = None,
) -> SessionsReport:
    """Top-level sessions (``all_sessions``: subagents too), newest activity first; with
    ``since_ms``, those active since then, with ``until_ms``, those created by then (its
    last ms: the two choose the sessions active in that window); at most ``limit``.
    ``fold``: each row's figures (all but ``turns``) with its subagents'; else its own
    (``subagent_*`` either way).
    ``mcp_servers`` names the MCP servers configured for a directory (default: OpenCode's
    config files, ``mcp``).
    ``cache`` (``ReportCache.open(store)``): the report cache, which answers a repeat of
    an unchanged database and spares the sessions that did not change; the report is the
    same with or without it."""
    mcp_servers = _asked_once(mcp_servers)
    request = _request(since_ms, limit, all_sessions, fold, until_ms)
    if since_ms is None and until_ms is None and limit is None:
        summaries, servers, parents, _read_again = _every_session(
            store, cache, request, all_sessions, fold, mcp_servers
        )
        report = SessionsReport(sessions=list(summaries))
        if cache is not None and parents is not None:
            basis = _parents_now(parents)
            if basis is not None:
                _remember(cache, request, report, servers, basis)
        return report
    if cache is not None:
        kept = cache.recall("sessions", request, SessionsReport, _still_configured(mcp_servers))
        if kept is not None:
            return kept
    # With a limit, only those rows are read (unless --until filters them first).
    rows = store.sessions(
        since_ms=since_ms,
        top_level=not all_sessions,
        limit=limit if until_ms is None else None,
    )
    if until_ms is not None:
        rows = [row for row in rows if not _after(row.time_created, until_ms)]
    if limit is not None:
        rows = rows[:limit]
    servers: dict[str | None, Sequence[str]] = {}
    report = SessionsReport(
        sessions=summarize(
            store,
            rows,
            mcp_servers=mcp_servers,
            cache=cache,
            servers=servers,
            fold=fold,
            let_go=True,  # ``rows`` is this function's own, and not used again
        )
    )
    if cache is not None:
        _remember(cache, request, report, servers, None)
    return report


def _every_session(
    store: Any,
    cache: ReportCache | None,
    request: list[Any],
    all_sessions: bool,
    fold: bool,
    mcp_servers: Callable[[str | None], Sequence[str]],
    bring_up: bool = True,
) -> tuple[
    Iterator[SessionSummary],
    dict[str | None, Sequence[str]],
    Callable[[], Any] | None,
    Container[str] | None,
]:
    """The summaries of every session (or every top-level one), each as it is asked for:
    read from the memo of the database as it is now, the last report brought up to date
    (``_bring_up``), or made (``each_summary``; the legacy layout's, ``summarize`` of its
    rows). With the MCP servers they consulted (whole once the last is made) and, unless
    they are the memo's already, what gives each session's parent for the basis of the memo
    they are to be kept as; and, of a report brought up to date, the sessions summarized
    again (every other summary is the last memo's as it was read; None: all are made).
    Not ``bring_up``: the last report is not to be brought up to date (it was judged so)."""
    if cache is not None:  # the memo, or the last one brought up to date, read as it goes
        still_true = _still_configured(mcp_servers)
        kept = cache.recall_each(
            "sessions", request, SessionsReport, "sessions", SessionSummary, still_true
        )
        if kept is not None:
            return kept, {}, None, None
        brought = (
            _bring_up(store, cache, request, all_sessions, mcp_servers, still_true, fold)
            if bring_up
            else None
        )
        if brought is not None:
            summaries, servers, parents, read_again = brought
            return summaries, servers, lambda: parents, read_again
        cache.let_go("sessions", request)  # the memo: made again, not read
    servers: dict[str | None, Sequence[str]] = {}
    if streams_every_session(store):
        made = each_summary(
            store,
            all_sessions=all_sessions,
            fold=fold,
            mcp_servers=mcp_servers,
            cache=cache,
            servers=servers,
        )
    else:
        rows = store.sessions(top_level=not all_sessions)
        listed = summarize(
            store,
            rows,
            mcp_servers=mcp_servers,
            cache=cache,
            servers=servers,
            fold=fold,
            let_go=True,
        )
        made = iter(listed)
    # every session's parent, for a memo's basis: encoded as the rows come, never a dict
    return made, servers, lambda: encoded_map(store.each_session_parent()), None


def write_sessions(
    store: Any,
    form: str,
    render: Callable[[Iterable[SessionSummary]], bytes | Iterable[bytes]],
    out: BinaryIO,
    *,
    mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    cache: ReportCache | None = None,
    each: bool = False,
    listed: ListForm | None = None,
    **choices: Any,
) -> None:
    """Write ``render`` of the summaries of ``sessions_report(store, …)`` (bytes, or pieces
    of them, each written as it comes) to ``out``; ``choices`` are the report's
    (``since_ms``, ``limit``, ``all_sessions``, ``fold``, ``until_ms``). ``each``: ``render``
    takes the summaries as they are made (an iterator), so that a report of every session
    is written one session at a time and never held (``each_summary``; 100,000 sessions
    hold about 110 MB as summaries). With ``cache``, the bytes are kept beside the
    report's memo under ``form``, which must name ``render`` exactly (``"json"``, say): a
    repeat of an unchanged database copies them from the cache's file, without decoding
    the report, writing it again or holding it whole (for 10,000 sessions, most of a
    repeat's time; for 100,000, 110 MB of JSON).

    ``listed``: a list written item by item (``output.rows.JSON_LIST``, ``JSON_LINES``),
    which, with ``cache``, writes the summaries in place of ``render`` (the same bytes),
    and says where each lies:
    a report of every session brought up to date copies the bytes of the summaries that
    did not change, from the last report's memo and its bytes in ``form``, and makes and
    writes only the others (``_write_spliced``)."""
    mcp_servers = _asked_once(mcp_servers)
    if cache is None:
        listed = None  # where each summary lies is of use to the cache alone
    if listed is not None:
        render = listed.pieces
    request = _request(**choices)
    if cache is not None:
        kept = cache.rendered("sessions", request, form, _still_configured(mcp_servers))
        if kept is not None:
            kept.write_to(out)
            return
    every = all(choices.get(name) is None for name in ("since_ms", "until_ms", "limit"))
    if not (each and every):
        report = sessions_report(store, mcp_servers=mcp_servers, cache=cache, **choices)
        _write_kept(render(report.sessions), out, cache, request, form)
        return
    all_sessions, fold = choices.get("all_sessions", False), choices.get("fold", True)
    bring_up = True
    if cache is not None and listed is not None:
        spliced = _write_spliced(
            store, cache, request, form, listed, out, all_sessions, fold, mcp_servers
        )
        if spliced:
            return
        bring_up = spliced is None  # False: found, but not to be brought up to date
    summaries, servers, parents, read_again = _every_session(
        store, cache, request, all_sessions, fold, mcp_servers, bring_up
    )
    if parents is None:  # the memo's, as kept
        _write_kept(render(summaries), out, cache, request, form)
    else:
        _write_made(summaries, render, out, cache, request, form, servers, parents, read_again)


def _write_made(
    summaries: Iterator[SessionSummary],
    render: Callable[[Iterable[SessionSummary]], bytes | Iterable[bytes]],
    out: BinaryIO,
    cache: ReportCache | None,
    request: list[Any],
    form: str,
    servers: dict[str | None, Sequence[str]],
    parents: Callable[[], Any],
    read_again: Container[str] | None = None,
) -> None:
    """Write ``render(summaries)``, the summaries of every session as they are made; with
    ``cache``, the memo and the rendition are spooled as they go and kept once the last
    is written (``servers``, the MCP servers consulted, complete by then; ``parents``
    gives each session's parent for the memo's basis): what ``_remember`` and
    ``_write_kept`` keep of a report held whole. ``read_again``: where the summaries are
    the last memo's brought up to date, the sessions summarized again (any other's summary
    is the memo's, unchanged: it reads back as it was read)."""
    if cache is None:
        _write_kept(render(summaries), out, None, request, form)
        return
    busy = False

    def kept_as_made(memo: MemoSpool) -> Iterator[SessionSummary]:
        nonlocal busy
        for summary in summaries:
            busy = busy or summary.state == BUSY
            unchanged = read_again is not None and summary.id not in read_again
            memo.add_item(summary, from_memo=unchanged, key=_ACTIVITY(summary))
            yield summary

    def kept_with() -> Any:
        basis = None if busy else _parents_now(parents)
        return basis is not None and [_checks(servers), [cache.stamps, basis]]

    _write_spooled(lambda memo: render(kept_as_made(memo)), out, cache, request, form, kept_with)


def _parents_now(parents: Callable[[], Any]) -> Any:
    """Every session's parent for a memo's basis (``parents()``: a dict, or
    ``encoded_map``'s bytes, encoded as the rows come); None when no memo can hold it (an
    id of a type MessagePack has not, from a store of another kind): no memo is kept."""
    try:
        return parents()
    except (*UNENCODABLE, TypeError):
        return None


def _write_spooled(
    pieces: Callable[[MemoSpool], bytes | Iterable[Any]],
    out: BinaryIO,
    cache: ReportCache,
    request: list[Any],
    form: str,
    kept_with: Callable[[], Any],
) -> None:
    """Write ``pieces(memo)``, the report of every session as it is made into ``memo`` (a
    spool for its memo); the memo and the rendition, spooled as they go, are kept once the
    last piece is written when ``kept_with()`` gives the memo's checks and basis, not when
    it gives False (a session busy, as ``_remember`` keeps a report)."""
    memo = cache.memo_spool("sessions", request, "sessions", SessionSummary)
    spool = cache.rendering("sessions", request, form, ahead=True)
    try:
        _write_pieces(pieces(memo), out, spool)
        kept = kept_with()
        if kept:
            memo.keep(*kept)
            if spool is not None:
                spool.keep()
    finally:
        memo.discard()
        if spool is not None:
            spool.discard()


def _write_kept(
    rendered: bytes | Iterable[bytes],
    out: BinaryIO,
    cache: ReportCache | None,
    request: list[Any],
    form: str,
) -> None:
    """Write ``rendered`` to ``out``, and keep it beside the report's memo (when kept)."""
    spool = cache.rendering("sessions", request, form) if cache is not None else None
    try:
        _write_pieces(rendered, out, spool)
        if spool is not None:
            spool.keep()
    finally:
        if spool is not None:
            spool.discard()


def _write_pieces(rendered: bytes | Iterable[Any], out: BinaryIO, spool: Any) -> None:
    """Each piece to ``out`` and to the cache's spool as it goes: never held whole. A piece
    may come with where its items lie in it (``ListForm.pieces``), which the spool keeps."""
    for given in [rendered] if isinstance(rendered, bytes) else rendered:
        piece, spans = given if type(given) is tuple else (given, None)
        out.write(piece)
        if spool is not None:
            spool.add(piece, spans)


def _asked_once(
    mcp_servers: Callable[[str | None], Sequence[str]] | None,
) -> Callable[[str | None], Sequence[str]]:
    """``mcp_servers`` (default: OpenCode's config files, ``mcp``) asked once per directory
    in a report: a kept report's servers are checked, then its changed sessions summarized,
    in the same directories, and each asking reads a few dozen paths up the folder tree."""
    if mcp_servers is None:
        from .mcp import mcp_server_names as mcp_servers
    asked = mcp_servers
    known: dict[str | None, Sequence[str]] = {}

    def once(directory: str | None) -> Sequence[str]:
        found = known.get(directory)
        if found is None:
            found = known[directory] = asked(directory)
        return found

    return once


def _request(
    since_ms: int | None = None,
    limit: int | None = None,
    all_sessions: bool = False,
    fold: bool = True,
    until_ms: int | None = None,
) -> list[Any]:
    """What a memo of the report is kept under: the choices (``sessions_report``'s, with
    its defaults), and the stale rule's age. A limit past what SQLite's LIMIT holds lists
    every session (``Store.each_session``): it is kept as that largest one, which the
    cache's msgpack holds (no integer past 2**64)."""
    if limit is not None:
        limit = min(limit, _LARGEST_LIMIT)
    return [since_ms, limit, all_sessions, stale_after_ms(), fold, until_ms]


_LARGEST_LIMIT = (1 << 63) - 1


def _still_configured(
    mcp_servers: Callable[[str | None], Sequence[str]],
) -> Callable[[Any], bool]:
    """Whether the MCP servers a kept report consulted are configured so still."""

    def still_true(consulted: Any) -> bool:
        return _servers_now(consulted, mcp_servers) == consulted

    return still_true


def _remember(
    cache: ReportCache,
    request: list[Any],
    report: SessionsReport,
    servers: dict[str | None, Sequence[str]],
    parents: Any,
) -> None:
    """Keep ``report`` as the memo of ``request``, with what it consulted of the MCP
    configuration; a report of every session (``parents``: each session's parent, a dict or
    ``encoded_map``'s) also with its *basis*, each session's stamp and parent, from which the
    next report reads only the sessions that changed and those above them (``_bring_up``). A
    busy session would turn stale with the clock alone: such a report is not kept."""
    if any(s.state == BUSY for s in report.sessions):
        return
    checks = _checks(servers)
    # The stamps as read before any row: never newer than the report.
    basis = None if parents is None else [cache.stamps, parents]
    cache.remember("sessions", request, report, checks, basis)


def _checks(servers: dict[str | None, Sequence[str]]) -> list[list[Any]]:
    """What a report consulted of the MCP configuration, as its memo keeps it."""
    return [[directory, list(names)] for directory, names in servers.items()]


_ACTIVITY = operator.attrgetter("time_updated", "id")  # the store's order, newest first


def _bring_up(
    store: Store,
    cache: ReportCache,
    request: list[Any],
    all_sessions: bool,
    mcp_servers: Callable[[str | None], Sequence[str]],
    still_true: Callable[[Any], bool],
    fold: bool,
) -> (
    tuple[Iterator[SessionSummary], dict[str | None, Sequence[str]], dict[Any, Any], set[str]]
    | None
):
    """The last report of every session, its families whose sessions changed since read
    again: the summaries a full reading would give, at the cost of what changed, each of
    the last report's read from its memo as it is asked for (``recall_each``: never all
    held where the memo was spooled), with the MCP servers they consulted (complete when
    they are), each session's parent now (the memo's basis) and the sessions summarized
    again (the changed and those above them). None (read everything)
    unless only OpenCode wrote since (``ReportCache.previous``: a session whose stamp, or
    lack of one, held is unchanged), none was removed or moved to another parent, no
    parent links loop, every id is a string and every ``time_updated`` an integer (the
    order is then the rows' sorted), and few enough changed to read them by session
    (``_by_session``).
    ``still_true``: whether the MCP servers the last report consulted are configured so
    still.

    A session's summary depends on its own rows and on those of the sessions below it (the
    fold, the stale rule), never on those above: so a changed session and every session
    above it are summarized again, and every other summary is the last report's."""
    found = cache.previous_each(
        "sessions", request, SessionsReport, "sessions", SessionSummary, still_true
    )
    if found is None:
        return None
    before, basis, checks = found
    brought = _brought_up(store, cache, basis, checks, all_sessions, mcp_servers, fold)
    if brought is None:
        return None
    fresh, servers, parents, ids = brought
    # Both in the store's order (the last report's was): merged as they come.
    kept = (summary for summary in before if summary.id not in ids)
    return heapq.merge(kept, fresh, key=_ACTIVITY, reverse=True), servers, parents, ids


# The summaries made again, the MCP servers consulted, each session's parent, those ids.
_Brought = tuple[list[SessionSummary], dict[str | None, Sequence[str]], dict[Any, Any], set[str]]


def _brought_up(
    store: Store,
    cache: ReportCache,
    basis: Any,
    checks: Any,
    all_sessions: bool,
    mcp_servers: Callable[[str | None], Sequence[str]],
    fold: bool,
) -> _Brought | None:
    """``_bring_up``'s judgement and reading, from the last report's ``basis`` and
    ``checks``: the summaries of the sessions that changed and of those above them, made
    again, in the store's order; the MCP servers consulted (the last report's too), each
    session's parent now, and those sessions' ids. None: the last report is not to be
    brought up to date (``_bring_up`` says when)."""
    if not isinstance(basis, list) or len(basis) != 2 or not all(type(b) is dict for b in basis):
        return None
    stamps_then, parents_then = basis
    parents = store.session_parents()
    changed = sessions_changed(parents_then, stamps_then, parents, cache.stamps)
    if changed is None or store.loop_members() or not store.plainly_ordered():
        return None
    if not _by_session(len(changed), store):
        return None  # many changed: the whole-table read is quicker
    if any(type(sid) is not str for sid in parents):
        return None  # the merge below compares ids
    chains = [ancestry(sid, parents) for sid in changed]
    ids = {sid for chain in chains for sid in chain} if all_sessions else {c[-1] for c in chains}
    rows = [row for row in map(store.session, ids) if row is not None]
    servers: dict[str | None, Sequence[str]] = {}
    # Read from the database, not the ledger: these are few, and the ledger (every
    # session's counts) would cost more to read and write again than they do to read.
    fresh = summarize(store, rows, mcp_servers=mcp_servers, servers=servers, fold=fold)
    fresh.sort(key=_ACTIVITY, reverse=True)
    for directory, names in checks or ():
        servers.setdefault(directory, names)  # the kept summaries consulted these
    return fresh, servers, parents, ids


class ListForm(Protocol):
    """A list written item by item, as ``output.rows.ListForm`` writes JSON and JSON Lines:
    ``head``, the items with ``between`` between them, then ``tail`` (``empty``: no item);
    ``pieces`` gives its bytes with where each item lies, ``item`` one item's bytes."""

    head: bytes
    between: bytes
    tail: bytes
    empty: bytes

    def item(self, value: Any) -> bytes: ...

    def pieces(self, items: Iterable[Any]) -> Iterator[tuple[bytes, list[int] | None]]: ...


_KEY = tuple[int, str]  # a summary's key in the memo: ``_ACTIVITY``, the store's order


def _write_spliced(
    store: Store,
    cache: ReportCache,
    request: list[Any],
    form: str,
    listed: ListForm,
    out: BinaryIO,
    all_sessions: bool,
    fold: bool,
    mcp_servers: Callable[[str | None], Sequence[str]],
) -> bool | None:
    """The last report of every session brought up to date as ``_bring_up`` brings it, and
    written without reading its summaries: those of the sessions that did not change are
    copied as bytes, from its rendition in ``form`` to ``out`` and from its memo to the
    next one (``KeptPieces``), and only the others are made, encoded and written. In the
    last report's order, which is the store's: each made summary is placed by its key.
    True when written; None when there is no such last report (memo and rendition, both
    sound, with where each item lies); False when there is, but it is not to be brought up
    to date (the caller reads everything)."""
    still_true = _still_configured(mcp_servers)
    kept = cache.previous_pieces("sessions", request, form, _KEY, still_true)
    if kept is None:
        return None
    try:
        brought = _brought_up(
            store, cache, kept.basis, kept.checks, all_sessions, mcp_servers, fold
        )
        if brought is None:
            return False
        fresh, servers, parents, ids = brought
        _write_spooled(
            lambda memo: _spliced(kept, fresh, ids, listed, memo),
            out,
            cache,
            request,
            form,
            lambda: (
                not any(summary.state == BUSY for summary in fresh)
                and [_checks(servers), [cache.stamps, parents]]
            ),
        )
    finally:
        kept.close()
    return True


def _spliced(
    kept: KeptPieces,
    fresh: list[SessionSummary],
    ids: Container[str],
    listed: ListForm,
    memo: Any,
) -> Iterator[tuple[bytes, Sequence[int]]]:
    """The pieces of the report (``ListForm.pieces``'), the last one's summaries but those
    of ``ids`` copied from ``kept``, ``fresh`` (in the store's order) written among them;
    each copied or made summary added to ``memo`` as it goes."""
    first = True
    for segment in _merged(kept.keys, fresh, ids):
        yield (listed.head if first else listed.between), ()
        first = False
        if type(segment) is tuple:  # a run [low, high) of the last report's summaries
            low, high = segment
            yield from kept.rendered_runs(low, high)
            memo.add_kept(kept, low, high)
        else:
            item = listed.item(segment)
            yield item, (0, len(item))
            memo.add_item(segment, key=_ACTIVITY(segment))
    yield (listed.empty if first else listed.tail), ()


def _merged(
    keys: Sequence[_KEY], fresh: list[SessionSummary], ids: Container[str]
) -> Iterator[tuple[int, int] | SessionSummary]:
    """The last report's summaries (by their ``keys``) but those of ``ids``, as runs
    ``(low, high)`` of its positions, and the ``fresh`` summaries among them, all in the
    store's order (newest activity first; ``fresh`` is so already)."""
    placed, count, low = 0, len(fresh), None
    for index, key in enumerate(keys):
        made_again = key[1] in ids  # (if it is still there)
        newer = placed < count and _ACTIVITY(fresh[placed]) > key
        if low is not None and (made_again or newer):  # the run ends here
            yield low, index
            low = None
        while placed < count and _ACTIVITY(fresh[placed]) > key:
            yield fresh[placed]
            placed += 1
        if low is None and not made_again:
            low = index
    if low is not None:
        yield low, len(keys)
    yield from fresh[placed:]


def _after(created: Any, until: int) -> bool:
    """Whether a time is after ``until`` (one that is no number is not: nothing says so)."""
    return (type(created) is int or type(created) is float) and created > until


def _servers_now(
    consulted: Any, mcp_servers: Callable[[str | None], Sequence[str]]
) -> list[list[Any]] | None:
    """``consulted`` ([directory, servers] pairs) with the servers configured now."""
    now: list[list[Any]] = []
    if not isinstance(consulted, list):
        return None
    for pair in consulted:
        if not isinstance(pair, list) or len(pair) != 2:
            return None
        directory = pair[0]
        if directory is not None and not isinstance(directory, str):
            return None
        now.append([directory, list(mcp_servers(directory))])
    return now
