"""Session summaries from the store: one row per session, as seed 002 defines them.

- Cost and tokens are OpenCode's own session columns, never re-priced.
- Turns and inferences: a user message opens a turn; each assistant message is one
  inference; one with no ``time.completed`` is in flight.
- Tool calls: every tool part, MCP or not; failures are parts whose status is ``error``;
  MCP calls are attributed to configured servers by name (``mcp``).
- Subagents (sessions with a ``parent_id``) fold into their parent: ``total_cost`` adds
  every descendant's cost to the session's own, and ``children`` lists the direct ones.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec
from msgspec import Struct

from .mcp import mcp_server_of
from .parallel import start_over_ranges, worker_connection
from .store import SessionRow, Store

__all__ = ["SessionSummary", "summarize", "descendants"]


class _Completed(Struct):
    completed: Any = None


class _MessageView(Struct):
    role: Any = None
    time: _Completed | None = None


class _Status(Struct):
    status: Any = None


class _PartView(Struct):
    type: Any = None
    tool: Any = None
    state: _Status | None = None


_MESSAGE = msgspec.json.Decoder(_MessageView)
_PART = msgspec.json.Decoder(_PartView)


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
    turns: int = 0
    inferences: int = 0
    in_flight: bool = False
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
    total_cost: float = 0.0
    children: list[str] = []


def descendants(roots: Sequence[str], tree: dict[str, list[str]]) -> list[str]:
    """Every session below ``roots`` in the parent → children tree (not the roots)."""
    found: list[str] = []
    stack = list(roots)
    seen = set(roots)
    while stack:
        for child in tree.get(stack.pop(), ()):
            if child not in seen:  # a cycle in corrupt data must not loop forever
                seen.add(child)
                found.append(child)
                stack.append(child)
    return found


def _model(raw: str | bytes | None) -> tuple[str | None, str | None]:
    if not raw:
        return None, None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw), None
    if isinstance(value, dict):
        model, provider = value.get("id"), value.get("providerID")
        return (
            model if isinstance(model, str) else None,
            provider if isinstance(provider, str) else None,
        )
    return None, None


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
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        reasoning_tokens=tokens[2],
        cache_read_tokens=tokens[3],
        cache_write_tokens=tokens[4],
        total_tokens=sum(tokens),
        cost=float(row.cost or 0.0),
    )


# The head of a tool part as OpenCode writes it (store.Store.tool_part_batches).
_TOOL_HEAD = re.compile(
    rb'\{"type":"tool","tool":"((?:[^"\\]|\\.)*)","callID":"(?:[^"\\]|\\.)*",'
    rb'"state":\{"status":"((?:[^"\\]|\\.)*)"'
)


def _tool_calls(store: Any, scope: Sequence[str] | None) -> Iterator[tuple[str, Any, Any]]:
    """(session id, tool name, status) of every tool part in ``scope`` (None: all).

    The store's fast query reads only the head of a tool part written the usual way; any
    other part is decoded whole, so the counts are exact either way."""
    batches = getattr(store, "tool_part_batches", None)
    if batches is None:
        for sid, data in store.all_part_data(scope):
            try:
                part = _PART.decode(data)
            except msgspec.DecodeError:
                continue
            if part.type == "tool":
                yield sid, part.tool, part.state.status if part.state is not None else None
        return
    for rowid, sid, data, is_head in itertools.chain.from_iterable(batches(scope)):
        if is_head:
            match = _TOOL_HEAD.match(data)
            if match is not None:
                tool, status = match.groups()
                yield sid, _unescape(tool), _unescape(status)
                continue
            data = store.part_data(rowid) or b""
        try:
            part = _PART.decode(data)
        except msgspec.DecodeError:
            continue
        if part.type == "tool":
            yield sid, part.tool, part.state.status if part.state is not None else None


ToolCounts = dict[tuple[str, Any, bool], int]  # (session, tool, failed) → calls

_PARALLEL_MIN_PARTS = 200_000  # part rows; below this a worker's start costs more
# From this many sessions on, one scan of the whole table beats per-session index lookups.
WHOLE_TABLE_SESSIONS = 200


def _start_tool_counts(store: Any, scope: Sequence[str] | None) -> Callable[[], ToolCounts]:
    """Tool calls by (session, tool, failed), to be collected by calling the result; a whole
    large table is scanned by one worker process per core, started now."""
    if scope is None:
        pending = _parallel_tool_counts(store)
        if pending is not None:
            return pending
    return lambda: _count(_tool_calls(store, scope))


def _count(calls: Iterable[tuple[str, Any, Any]]) -> ToolCounts:
    counts: ToolCounts = {}
    for sid, tool, status in calls:
        key = (sid, tool if isinstance(tool, str) else None, status == "error")
        counts[key] = counts.get(key, 0) + 1
    return counts


def _parallel_tool_counts(store: Any) -> Callable[[], ToolCounts] | None:
    pending = start_over_ranges(store, "part", _PARALLEL_MIN_PARTS, _tool_counts_range)
    if pending is None:
        return None

    def collect() -> ToolCounts:
        counts: ToolCounts = {}
        for part in pending():
            for key, calls in part.items():
                counts[key] = counts.get(key, 0) + calls
        return counts

    return collect


class _PartRange:
    """The two store queries ``_tool_calls`` needs, over a rowid range of the part table,
    on a worker's own connection."""

    def __init__(self, conn: Any, low: int, high: int) -> None:
        self.conn, self.low, self.high = conn, low, high

    def tool_part_batches(self, scope: None) -> Iterator[list[tuple[Any, ...]]]:
        from .store import Store

        cursor = self.conn.execute(
            f"{Store._TOOL_PARTS} AND rowid >= ? AND rowid < ?", (self.low, self.high)
        )
        yield from iter(lambda: cursor.fetchmany(4096), [])

    def part_data(self, rowid: int) -> bytes | None:
        row = self.conn.execute(
            "SELECT CAST(data AS BLOB) FROM part WHERE rowid = ?", (rowid,)
        ).fetchone()
        return row[0] if row else None


def _tool_counts_range(uri: str, low: int, high: int) -> ToolCounts:
    """A worker: tool calls of the parts with rowid in [low, high)."""
    with worker_connection(uri, "part") as conn:
        return _count(_tool_calls(_PartRange(conn, low, high), None))


def _unescape(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw.decode("utf-8", "replace")
    try:
        return msgspec.json.decode(b'"' + raw + b'"')
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")


def _message_rows(store: Any, scope: Sequence[str] | None) -> Iterator[tuple[Any, ...]]:
    batches = getattr(store, "message_batches", None)
    if batches is not None:
        return itertools.chain.from_iterable(batches(scope))
    return ((sid, None, None, data) for sid, data in store.all_message_data(scope))


def summarize(
    store: Store,
    rows: Sequence[SessionRow],
    *,
    mcp_servers: Callable[[str | None], Sequence[str]] = lambda directory: (),
) -> list[SessionSummary]:
    """Summaries of ``rows`` (in their order); descendants are read to fold their cost."""
    tree = store.children()
    wanted = [row.id for row in rows]
    below = descendants(wanted, tree)
    known = {row.id: row for row in rows}
    extra = [sid for sid in below if sid not in known]
    for sid in extra:
        row = store.session(sid)
        if row is not None:
            known[sid] = row
    db_path = str(store.path)
    summaries = {sid: _base(row, db_path) for sid, row in known.items()}
    ids = list(summaries)
    everything = len(ids) >= WHOLE_TABLE_SESSIONS
    scope = None if everything else ids
    # On a whole large table the part scan runs in worker processes while this one reads
    # the messages.
    tool_counts = _start_tool_counts(store, scope)

    for sid, _mid, _created, data in _message_rows(store, scope):
        summary = summaries.get(sid)
        if summary is None:
            continue
        try:
            message = _MESSAGE.decode(data)
        except msgspec.DecodeError:
            continue
        if message.role == "user":
            summary.turns += 1
        elif message.role == "assistant":
            summary.inferences += 1
            if message.time is None or message.time.completed is None:
                summary.in_flight = True

    servers_in: dict[str | None, Sequence[str]] = {}  # directory → configured MCP servers
    for (sid, tool, failed), calls in tool_counts().items():
        summary = summaries.get(sid)
        if summary is None:
            continue
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

    for sid, summary in summaries.items():
        summary.children = list(tree.get(sid, ()))
        summary.total_cost = summary.cost + sum(
            summaries[d].cost for d in descendants([sid], tree) if d in summaries
        )
    return [summaries[sid] for sid in wanted]
