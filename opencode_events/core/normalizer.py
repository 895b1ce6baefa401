"""The normalizer: every source's records and parts in, stamped events and metrics out.

A ``Normalizer`` is one output run. Readers (the run stream, the store, export documents,
server events) hand it decoded views with their provenance; it applies the mapping table,
numbers events (``seq``), fills in the session, counts what it emitted and keeps token and
cost sums for the closing ``metrics`` event. It never reads or writes files itself.

Dedupe: OpenCode can re-emit a finished part with the same id (compaction pruning), and a
log may hold a run twice. A part with an event of its own (text, reasoning, tool,
step-finish, compaction) whose id was already seen in the same session is consumed: no
second event, counted once, and tallied in ``metrics.duplicates``. Ids are remembered for the 64
most recently current sessions, so interleaved sessions dedupe and memory stays flat over
long logs of many runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct

from ..events import (
    Compaction,
    Delta,
    Error,
    Event,
    Mention,
    Message,
    Metrics,
    Patch,
    Permission,
    Prompt,
    Question,
    Reasoning,
    Retry,
    ToolEvent,
    Unknown,
    Usage,
    Warning,
)
from .figures import INT64, summed_cost
from .mapping import (
    CONSUMED_PARTS,
    attachment_event,
    command_failed,
    error_fields,
    event_failed,
    mcp_server_of,
    patch_files,
    question_answers,
    question_texts,
    subtask_event,
    success_of,
    text_of,
    tool_events,
    usage_event,
)
from .views import ANY_DECODER, Part, json_type_name, number

__all__ = ["Normalizer", "Provenance", "REPAIRED_RAW", "REMEMBERED_SESSIONS"]

REMEMBERED_SESSIONS = 64  # sessions whose part ids are kept for dedupe

# Event class → its kind, looked up once per event on the hot path.
_KIND = {cls: cls.__struct_config__.tag for cls in Event.__subclasses__()}
_KIND.update(
    {cls: cls.__struct_config__.tag for base in list(_KIND) for cls in base.__subclasses__()}
)


class Provenance(Struct, kw_only=True, gc=False):
    """Where a record came from; copied onto every event it produces. ``raw`` is the
    record as read (JSON bytes or ``msgspec.Raw``), attached to ``unknown`` events always
    and to every event with ``--raw``. (A Struct: built once per record, in C.)"""

    session_id: str | None = None
    time: int | float | None = None
    source: str | None = None
    line: int | None = None
    message_id: str | None = None
    part_id: str | None = None
    raw: Any = None


def _as_raw(value: bytes | Raw | None) -> tuple[Raw | None, bool]:
    """``(raw, repaired)``. Readers may hand over the record's bytes; they become ``Raw``
    only when written. A record laid out over several lines (an export document, a legacy
    JSON file) is compacted (no white space between tokens, as OpenCode writes its stream):
    an event is one line. Bytes that are not UTF-8 (in a field no view decodes, so msgspec
    never checked them) are replaced by U+FFFD, and ``repaired`` says so: every line written
    must be valid UTF-8 JSON. The check costs nothing much: ASCII is told apart in one pass,
    and anything else is decoded once in C."""
    if value is None:
        return None, False
    data = bytes(value)  # the same object for bytes; a copy of a Raw's buffer
    if b"\n" in data or b"\r" in data:
        try:
            data = msgspec.json.format(data, indent=-1)
            value = data
        except msgspec.DecodeError:  # not JSON: left as it is (readers hand over JSON only)
            pass
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            # Only inside strings (msgspec took the rest as JSON), so still JSON after this.
            return Raw(data.decode("utf-8", "replace").encode()), True
    return (Raw(value) if type(value) is bytes else value), False


REPAIRED_RAW = "invalid UTF-8 in the record: its raw has U+FFFD in place of the bad bytes"


def _labels(info: Any) -> tuple[str | None, str | None, str | None]:
    """(model, provider, agent) of an assistant message, each only when it is text."""
    model, provider, agent = info.modelID, info.providerID, info.agent
    return (
        model if type(model) is str else None,
        provider if type(provider) is str else None,
        agent if type(agent) is str else None,
    )


def _attempt(value: Any) -> int | None:
    """A retry's attempt number when it is an integer a 64-bit column holds; one beyond is
    damage (OpenCode counts from 1), and none is written, as for an exit code that large."""
    return value if type(value) is int and -INT64 <= value <= INT64 else None


class Totals:
    """Token and cost sums of the usage events."""

    __slots__ = (
        "input",
        "output",
        "reasoning",
        "cache_read",
        "cache_write",
        "total",
        "cost",
        "figures",
    )

    def __init__(self) -> None:
        self.input = self.output = self.reasoning = 0
        self.cache_read = self.cache_write = self.total = 0
        self.cost = 0.0
        self.figures = 0  # usage events whose cost is in ``cost``

    def merge(self, other: Totals, *, cost: bool = True) -> None:
        """Add ``other``'s sums (``cost=False``: all but the cost, which an import sums per
        session, in session order, so that the float is the same however it was shared)."""
        for name in self.__slots__:
            if cost or name != "cost":
                setattr(self, name, getattr(self, name) + getattr(other, name))


class Counters:
    """What a normalizer counts: records read, events by kind, tool calls and failures,
    duplicates, turns, problems (for ``--strict``) and the usage totals. A worker's counters
    are ``snapshot()`` there and ``merge``d into its parent's."""

    _COUNTS = (
        "records",
        "tool_calls",
        "tool_failures",
        "command_failures",
        "duplicates",
        "turns",
        "problems",
    )

    def __init__(self) -> None:
        self.records = 0
        self.counts: dict[type, int] = {}
        self.tool_calls = 0
        self.tool_failures = 0
        self.command_failures = 0  # completed, but the command exited other than 0 or was killed
        self.duplicates = 0
        self.turns = 0
        self.problems = 0  # warnings and error events, for --strict
        self.totals = Totals()

    def snapshot(self) -> Counters:
        """The counters alone (plain data, to send from a worker)."""
        copy = Counters()
        copy.merge(self)
        return copy

    def merge(self, other: Counters, *, cost: bool = True) -> None:
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for cls, n in other.counts.items():
            self.counts[cls] = self.counts.get(cls, 0) + n
        self.totals.merge(other.totals, cost=cost)


class Normalizer(Counters):
    def __init__(
        self,
        *,
        keep_raw: bool = False,
        mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        self.keep_raw = keep_raw
        # The MCP servers configured for a session's directory (None: the source names
        # none), which name the server of an MCP tool call; asked once per directory.
        self.mcp_servers = mcp_servers
        self._servers: dict[str | None, Sequence[str]] = {}
        # session → its directory, where the source says (a server's session.created): the
        # MCP servers of a call whose message names no directory are that session's.
        self.directories: dict[str, str] = {}
        self.seq = 0
        # session → the session that ran it (a subagent's parent), where the source says;
        # its events carry ``parent_session_id``.
        self.parents: dict[str, str] = {}
        self._parent: str | None = None
        self.step_open = False  # a step started and has not finished (an interrupted run)
        self._session: str | None = None
        self._first_session: str | None = None
        # The output covers more than one session: the closing metrics name none.
        self.several_sessions = False
        self._session_turns: dict[str, int] = {}
        self._seen_parts: set[str] = set()
        # Part ids of recently current sessions, so that sessions interleaved in one input
        # (a parent and its subagents, concatenated logs) still dedupe; bounded for memory.
        self._seen_by_session: OrderedDict[str | None, set[str]] = OrderedDict()
        self._replayed_calls: set[tuple[Any, Any]] = set()  # tool calls of events read again
        # (model, provider, agent) of the assistant message whose parts are being read,
        # whether it is a compaction's summary, and its directory (path.cwd).
        self._labels: tuple[str | None, str | None, str | None] | None = None
        self._summary: bool | None = None
        self._directory: str | None = None

    # ------------------------------------------------------------------ session state

    @property
    def session_id(self) -> str | None:
        return self._session

    def enter_session(self, session_id: str | None) -> None:
        """Make ``session_id`` current; ``None`` keeps the current one."""
        if session_id is None or session_id == self._session:
            return
        self._session = session_id
        self._parent = self.parents.get(session_id)
        if self._first_session is None:
            self._first_session = session_id
        elif session_id != self._first_session:
            self.several_sessions = True
        seen = self._seen_by_session.pop(session_id, None)
        self._seen_parts = set() if seen is None else seen
        self._seen_by_session[session_id] = self._seen_parts
        if len(self._seen_by_session) > REMEMBERED_SESSIONS:
            self._seen_by_session.popitem(last=False)  # the least recently current

    def learn_parent(self, session_id: str, parent_id: str) -> None:
        """``session_id`` is a subagent of ``parent_id`` (a server's ``session.created``):
        its events carry ``parent_session_id`` from now on."""
        if session_id != parent_id:
            self.parents[session_id] = parent_id
            if session_id == self._session:
                self._parent = parent_id

    def learn_directory(self, session_id: str, directory: str) -> None:
        """``session_id`` works in ``directory`` (a server's ``session.created``, a session
        row): its MCP calls name the servers configured there."""
        self.directories[session_id] = directory

    def reset(self) -> None:
        """Start a new run (a new input file): session, part ids and turn numbers."""
        self._session = None
        self._parent = None
        self._seen_parts = set()
        self._seen_by_session = OrderedDict()
        self._session_turns = {}
        self.step_open = False  # a step the last input left open (a killed run) is not this one's
        self.enter_message(None)

    def stepped_sessions(self) -> Any:
        """The sessions of this run (since ``reset``) that finished a step, each one a
        ``usage`` event (``""`` for steps of no session): a view, not a copy."""
        return self._session_turns.keys()

    # --------------------------------------------------------------------- emitting

    def _stamp(self, events: list[Event], prov: Provenance) -> list[Event]:
        if len(events) == 1 and not self.keep_raw:
            # The usual case, once per event of a large import or stream: one fresh event
            # (its provenance fields still None) that is not an unknown or an error.
            event = events[0]
            cls = type(event)
            if cls is not Unknown and cls is not Error:
                event.seq = self.seq
                self.seq += 1
                session = event.session_id = prov.session_id or self._session
                if self._parent is not None and session == self._session:
                    event.parent_session_id = self._parent
                event.time = prov.time
                if prov.source is not None:
                    event.source = prov.source
                if prov.line is not None:
                    event.line = prov.line
                event.message_id = prov.message_id
                event.part_id = prov.part_id
                counts = self.counts
                counts[cls] = counts.get(cls, 0) + 1
                return events
        raw, repaired = _as_raw(prov.raw) if self.keep_raw else (None, False)
        if not self.keep_raw and Unknown in map(type, events):
            raw, repaired = _as_raw(prov.raw)
        if repaired:  # said before the record's events, at the same place
            self.problems += 1
            events = [Warning(message=REPAIRED_RAW), *events]
        counts = self.counts
        seq = self.seq
        # The record's own session when the reader knows it, else the current one.
        session = prov.session_id or self._session
        parent = self._parent if session == self._session else self.parents.get(session)
        time, source, line = prov.time, prov.source, prov.line
        message_id, part_id = prov.message_id, prov.part_id
        for event in events:
            event.seq = seq
            seq += 1
            event.session_id = session
            if parent is not None:
                event.parent_session_id = parent
            event.time = time
            event.source = source
            event.line = line
            event.message_id = message_id
            event.part_id = part_id
            cls = type(event)
            counts[cls] = counts.get(cls, 0) + 1
            if cls is Unknown or (raw is not None and cls is not Warning):
                event.raw = raw
            if cls is Error:
                self.problems += 1
        self.seq = seq
        return events

    def replay(self, event: Event, *, line: int | None = None) -> list[Event]:
        """An event already normalized (our own output read again): numbered in this
        output and counted in its metrics, every other field kept (a ``raw`` that is not
        UTF-8 is repaired, and a warning at ``line`` of this input says so)."""
        self.enter_session(event.session_id)
        cls = type(event)
        if cls is Usage:
            self.turns += 1
            self._add_usage(event)  # type: ignore[arg-type]
        elif isinstance(event, ToolEvent) or (cls is Unknown and event.tool is not None):
            # One call may give several events (a patch's files): a call counts once.
            call = (event.session_id, event.call_id or event.part_id)
            if call[1] is None or call not in self._replayed_calls:
                self._replayed_calls.add(call)
                self.tool_calls += 1
                self._count_outcome(event)
        if cls is Warning or cls is Error:
            self.problems += 1
        found = [event]
        raw = getattr(event, "raw", None)
        if raw is not None:
            event.raw, repaired = _as_raw(raw)  # type: ignore[union-attr]
            if repaired:
                self.problems += 1
                warning = Warning(message=REPAIRED_RAW, session_id=event.session_id, line=line)
                found.insert(0, warning)
        for each in found:
            each.seq = self.seq
            self.seq += 1
            kind = type(each)
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return found

    def count_record(self) -> None:
        self.records += 1

    def part(self, part: Part, prov: Provenance, *, role: str | None = None) -> list[Event]:
        """The events of one part (``part.type`` decides); ``role`` is its message's role."""
        kind = part.type
        # The common kinds first: this runs once per part of every source.
        if kind == "text":
            text = text_of(part)
            if text is None or not self._first_sighting(part):
                return []
            if role == "user":
                synthetic = True if part.synthetic is True else None
                return self._stamp([Prompt(text=text, synthetic=synthetic)], prov)
            return self._stamp([Message(text=text, summary=self._summary)], prov)
        if kind == "step-finish":
            return self._step_finish(part, prov)
        if kind == "tool":
            return self._tool(part, prov)
        if kind == "reasoning":
            text = text_of(part)
            if text is None or not self._first_sighting(part):
                return []
            return self._stamp([Reasoning(text=text)], prov)
        if type(kind) is str and kind in CONSUMED_PARTS:
            self.note_consumed(kind)
            return []
        if kind == "compaction":
            if not self._first_sighting(part):
                return []
            auto = part.auto if isinstance(part.auto, bool) else None
            overflow = part.overflow if isinstance(part.overflow, bool) else None
            return self._stamp([Compaction(auto=auto, overflow=overflow)], prov)
        if kind == "file":
            if not self._first_sighting(part):
                return []
            return self._stamp([attachment_event(part)], prov)
        if kind == "subtask":
            if not self._first_sighting(part):
                return []
            return self._stamp([subtask_event(part)], prov)
        if kind == "agent":
            if not self._first_sighting(part):
                return []
            name = part.name
            return self._stamp([Mention(agent=name if type(name) is str else None)], prov)
        if kind == "patch":
            files = patch_files(part)
            if files is not None:
                if not self._first_sighting(part):
                    return []
                hash_ = part.hash if type(part.hash) is str else None
                return self._stamp([Patch(files=files, hash=hash_)], prov)
        elif kind == "retry":
            if not self._first_sighting(part):
                return []
            _, message = error_fields(part.error)
            return self._stamp([Retry(attempt=_attempt(part.attempt), message=message)], prov)
        return self.unknown(prov, type_=kind if isinstance(kind, str) else None)

    def note_consumed(self, part_type: str) -> None:
        """A part consumed without an event; a step-start opens a step until its finish."""
        if part_type == "step-start":
            self.step_open = True

    def forget_part(self, part_id: str) -> None:
        """The current session's part ``part_id`` unseen again: it was written as it last
        was (a snapshot), and its real end may still come."""
        self._seen_parts.discard(part_id)

    def _first_sighting(self, part: Part) -> bool:
        part_id = part.id
        if not isinstance(part_id, str):
            return True
        if part_id in self._seen_parts:
            self.duplicates += 1
            return False
        self._seen_parts.add(part_id)
        return True

    def _tool(self, part: Part, prov: Provenance) -> list[Event]:
        if not self._first_sighting(part):
            return []
        self.tool_calls += 1
        events = tool_events(part, self._directory)
        if events:
            first = events[0]
            if self.mcp_servers is not None and type(first) is Unknown:
                for event in events:  # code mode's script calls too
                    if event.tool:
                        event.mcp_server = self._mcp_server(event.tool)  # type: ignore[union-attr]
            self._count_outcome(first)  # all events of one call share what says it
            if len(events) > 1 and type(first) is Unknown:  # the calls a script made
                for event in events[1:]:
                    self.tool_calls += 1
                    if event.success is False:  # type: ignore[union-attr]
                        self.tool_failures += 1
        elif part.state is not None and success_of(part.state.status) is False:
            self.tool_failures += 1  # a consumed tool (todowrite) that failed still counts
        return self._stamp(events, prov)

    def _count_outcome(self, event: Event) -> None:
        if event_failed(event):
            self.tool_failures += 1
        elif command_failed(getattr(event, "exit_code", None), getattr(event, "interrupted", None)):
            self.command_failures += 1

    def _mcp_server(self, tool: str) -> str | None:
        directory = self._directory
        if directory is None and self._session is not None:
            directory = self.directories.get(self._session)
        servers = self._servers.get(directory)
        if servers is None:
            servers = self._servers[directory] = self.mcp_servers(directory)  # type: ignore[misc]
        return mcp_server_of(tool, servers) if servers else None

    def enter_message(self, info: Any) -> None:
        """The message whose parts come next (a stored or exported message): its model,
        provider and agent label the ``usage`` events of its step-finish parts, its
        ``summary`` flag its text (a compaction's summary), its ``path.cwd`` the directory
        a patch's relative paths are resolved against."""
        if info is None:
            self._labels = self._summary = self._directory = None
            return
        assistant = info.role == "assistant"
        self._labels = _labels(info) if assistant else None
        self._summary = True if assistant and info.summary is True else None
        path = info.path
        cwd = path.cwd if path is not None else None
        self._directory = cwd if type(cwd) is str else None

    def _step_finish(self, part: Part, prov: Provenance) -> list[Event]:
        # Once per model step of every source: ``_first_sighting`` and the turn count
        # written out, the same steps without two calls.
        self.step_open = False
        part_id = part.id
        if isinstance(part_id, str):
            seen = self._seen_parts
            if part_id in seen:
                self.duplicates += 1
                return []
            seen.add(part_id)
        key = self._session or ""
        turns = self._session_turns
        turn = turns[key] = turns.get(key, 0) + 1
        self.turns += 1
        usage = usage_event(part, turn)
        if self._labels is not None:
            usage.model, usage.provider, usage.agent = self._labels
        directory = self._directory
        if directory is None and self.directories:
            directory = self.directories.get(key)
        usage.directory = directory
        self._add_usage(usage)
        return self._stamp([usage], prov)

    def _add_usage(self, usage: Usage) -> None:
        totals = self.totals
        totals.input += usage.input_tokens
        totals.output += usage.output_tokens
        totals.reasoning += usage.reasoning_tokens
        totals.cache_read += usage.cache_read_tokens
        totals.cache_write += usage.cache_write_tokens
        totals.total += usage.total_tokens
        totals.cost += usage.cost
        totals.figures += 1

    def permission(
        self,
        prov: Provenance,
        *,
        id_: str | None,
        permission: str | None = None,
        patterns: list[str] | None = None,
        reply: str | None = None,
    ) -> list[Event]:
        event = Permission(id=id_, permission=permission, patterns=patterns, reply=reply)
        return self._stamp([event], prov)

    def question(
        self,
        prov: Provenance,
        *,
        id_: Any,
        call_id: Any = None,
        questions: Any = None,
        answers: Any = None,
        reply: str | None = None,
    ) -> list[Event]:
        """A question the model asked the user (``question.asked``), or its answer or
        dismissal (``question.replied`` / ``question.rejected``). Values of another shape
        than OpenCode's are left out (the frame is in ``raw`` with ``--raw``)."""
        event = Question(
            id=id_ if type(id_) is str else None,
            call_id=call_id if type(call_id) is str else None,
            questions=question_texts(questions),
            answers=question_answers(answers),
            reply=reply,
        )
        return self._stamp([event], prov)

    def retry(
        self,
        prov: Provenance,
        *,
        attempt: Any,
        message: Any,
        next_: Any,
        reason: Any,
    ) -> list[Event]:
        """A provider retry OpenCode announced (``session.status`` retry)."""
        event = Retry(
            attempt=_attempt(attempt),
            message=message if type(message) is str else None,
            next=number(next_),
            reason=reason if type(reason) is str else None,
        )
        return self._stamp([event], prov)

    def delta(self, field: str | None, delta: str, prov: Provenance) -> list[Event]:
        return self._stamp([Delta(field=field, delta=delta)], prov)

    def error(self, error: Any, prov: Provenance) -> list[Event]:
        name, message = error_fields(error)
        return self._stamp([Error(name=name, message=message)], prov)

    def unknown(
        self, prov: Provenance, *, type_: str | None = None, tool: str | None = None
    ) -> list[Event]:
        return self._stamp([Unknown(type=type_, tool=tool, success=UNSET)], prov)

    def not_json(
        self, data: bytes | Raw, exc: BaseException, prov: Provenance, *, what: str = ""
    ) -> list[Event]:
        """A record that does not parse: a ``warning`` carrying its text."""
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        prov.raw = None
        text = bytes(data).decode("utf-8", "replace")
        return self.warning(f"{what}not JSON: {reason}", text, prov)

    def rejected(
        self,
        data: bytes | Raw,
        prov: Provenance,
        *,
        what: str = "",
        describe: Callable[[dict[str, Any]], tuple[Any, Any]] = lambda value: (
            value.get("type"),
            None,
        ),
    ) -> list[Event]:
        """A record a reader's view rejected: a ``warning`` when it is not JSON or not a JSON
        object, else ``unknown`` with the record in ``raw``; ``describe`` names its type and
        tool (and may note its session) from the decoded object."""
        try:
            value = ANY_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            return self.not_json(data, exc, prov, what=what)
        if not isinstance(value, dict):
            prov.raw = None
            text = bytes(data).decode("utf-8", "replace")
            return self.warning(f"{what}not a JSON object: {json_type_name(value)}", text, prov)
        type_, tool = describe(value)
        return self.unknown(
            prov,
            type_=type_ if isinstance(type_, str) else None,
            tool=tool if isinstance(tool, str) else None,
        )

    def warning(self, message: str, text: str | None, prov: Provenance) -> list[Event]:
        self.problems += 1
        return self._stamp([Warning(message=message, text=text)], prov)

    def kind_counts(self) -> dict[str, int]:
        """Events written so far, by kind (kept by class on the hot path)."""
        return dict(sorted((_KIND[cls], n) for cls, n in self.counts.items()))

    def metrics(self) -> Metrics:
        totals = self.totals
        event = Metrics(
            records=self.records,
            counts=self.kind_counts(),
            turns=self.turns,
            tool_calls=self.tool_calls,
            tool_failures=self.tool_failures,
            command_failures=self.command_failures,
            duplicates=self.duplicates,
            input_tokens=totals.input,
            output_tokens=totals.output,
            reasoning_tokens=totals.reasoning,
            cache_read_tokens=totals.cache_read,
            cache_write_tokens=totals.cache_write,
            total_tokens=totals.total,
            cost=summed_cost(totals.cost, totals.figures),
        )
        event.seq = self.seq
        self.seq += 1
        event.session_id = None if self.several_sessions else self._session
        return event
