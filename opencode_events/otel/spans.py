"""Sessions and their normalized events as OpenTelemetry GenAI spans and metric counters.

The model, not the wire format (``otlp`` encodes it): one ``invoke_agent {agent}`` span per
session, one ``chat {model}`` span per inference (a ``usage`` event, or an assistant message
that ended in an error), one ``execute_tool {tool}`` span per tool call; a subagent's session
is a child of the ``execute_tool task`` span that spawned it, in its parent's trace. Counters
sum tokens, cost and sessions by model, agent and provider.

Ids are derived from OpenCode's own ids (``trace_id_of`` the root session, ``span_id_of`` a
session, message or part id), so the same history always gives the same spans: a second
export is the same data again, not a second copy. Times are the events' own (epoch ms →
ns); a tool call's span has the call's own start and end (``ToolTimes`` records them as the
normalizer maps each call). Nothing here prints, reads files or knows JSON.

    builder = TraceBuilder()
    trace = builder.session("ses_1")
    for event in events:
        trace.add(event)
    spans = builder.finish(trace, SessionInfo(id="ses_1", agent="build"))
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from msgspec import Struct

from ..core.figures import summed_cost
from ..core.mapping import event_failed
from ..core.normalizer import Normalizer, Provenance
from ..events import (
    Compaction,
    Error,
    Event,
    Orchestration,
    Prompt,
    ToolEvent,
    Unknown,
    Usage,
)

__all__ = [
    "SpanData",
    "SpanEvent",
    "SessionInfo",
    "SessionTrace",
    "TraceBuilder",
    "Counters",
    "ToolTimes",
    "session_info",
    "trace_id_of",
    "span_id_of",
    "gen_ai_tokens",
    "merge_histograms",
    "TOKEN_BOUNDS",
    "DURATION_BOUNDS",
    "epoch_ns",
    "KIND_INTERNAL",
    "KIND_CLIENT",
    "STATUS_UNSET",
    "STATUS_ERROR",
]

KIND_INTERNAL, KIND_CLIENT = 1, 3  # OTLP Span.SpanKind
STATUS_UNSET, STATUS_ERROR = 0, 2  # OTLP Status.StatusCode

_MS = 1_000_000  # ns per ms


class SpanEvent(Struct, gc=False):
    name: str
    time_ns: int
    attributes: dict[str, Any]


class SpanData(Struct, kw_only=True):
    """One span, as the model holds it (``otlp.span`` encodes it)."""

    trace_id: str = ""  # 32 hex digits; set when the session's trace is known
    span_id: str
    parent_span_id: str = ""
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: int = STATUS_UNSET
    status_message: str = ""
    events: list[SpanEvent] = msgspec.field(default_factory=list)


class SessionInfo(Struct, kw_only=True):
    """What is known of a session besides its events (the store's row, where it is one)."""

    id: str
    parent_id: str | None = None
    title: str | None = None
    agent: str | None = None
    model: str | None = None
    provider: str | None = None
    directory: str | None = None
    version: str | None = None
    start_ms: int | float | None = None
    end_ms: int | float | None = None


class _ModelRef(Struct, gc=False):
    id: Any = None
    providerID: Any = None  # noqa: N815 - OpenCode's spelling


_MODEL_REF = msgspec.json.Decoder(_ModelRef)


def session_info(row: Any) -> SessionInfo:
    """A store's ``SessionRow`` as ``SessionInfo`` (its ``model`` column is JSON)."""
    model = provider = None
    if row.model:
        try:
            ref = _MODEL_REF.decode(row.model)
        except (msgspec.DecodeError, RecursionError):
            ref = None
        if ref is not None:
            model = ref.id if isinstance(ref.id, str) and ref.id else None
            provider = ref.providerID if isinstance(ref.providerID, str) else None
    return SessionInfo(
        id=row.id,
        parent_id=row.parent_id,
        title=row.title,
        agent=row.agent,
        model=model,
        provider=provider or None,
        directory=row.directory,
        version=row.version,
        start_ms=row.time_created or None,
        end_ms=row.time_updated or None,
    )


# ---------------------------------------------------------------------------------- ids


def trace_id_of(root_session: str) -> str:
    """The trace of a root session and all its subagents: 16 bytes of a hash of its id."""
    return _hex_id(b"opencode-events/trace/" + root_session.encode("utf-8", "surrogatepass"), 16)


def span_id_of(kind: str, key: str) -> str:
    """A span's id: 8 bytes of a hash of what it stands for: ``session`` and the session
    id, or ``chat``/``tool`` and the session id / OpenCode's message or part id."""
    data = f"opencode-events/span/{kind}/{key}".encode("utf-8", "surrogatepass")
    return _hex_id(data, 8)


def _hex_id(data: bytes, size: int) -> str:
    digest = hashlib.sha256(data).digest()[:size]
    if not any(digest):  # an all-zero id is invalid in OTLP; never in practice, still never
        digest = b"\x00" * (size - 1) + b"\x01"
    return digest.hex()


_MAX_NS = (1 << 64) - 1  # OTLP's times are fixed64


def epoch_ns(ms: int | float) -> int:
    """Epoch ms as OTLP's nanoseconds. A damaged record's time out of their range (before
    1970, past 2554, beyond any float) is held at its edge: the trace stays valid OTLP."""
    ns = ms * _MS
    if not 0 <= ns <= _MAX_NS:  # out of range, infinite (round() would raise) or NaN
        return 0 if ns < 0 else _MAX_NS
    return ns if type(ns) is int else round(ns)


def gen_ai_tokens(usage: Usage) -> tuple[int, int]:
    """The conventions' input and output tokens of one inference: their input includes the
    cached tokens (read and written), their output the reasoning; OpenCode's do not."""
    return (
        usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
        usage.output_tokens + usage.reasoning_tokens,
    )


# ------------------------------------------------------------------------- tool times


class ToolTimes(Normalizer):
    """The normalizer, also noting each tool call's own start and end (``state.time``) as
    it maps the call, by session and part id (a copy of a session under another id keeps
    its part ids); a span takes them from here."""

    def __init__(
        self,
        *,
        keep_raw: bool = False,
        mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    ) -> None:
        super().__init__(keep_raw=keep_raw, mcp_servers=mcp_servers)
        self.times: dict[tuple[Any, str], tuple[int | float, int | float]] = {}

    def _tool(self, part: Any, prov: Provenance) -> list[Event]:
        events = super()._tool(part, prov)
        if events:
            state = part.state
            times = state.time if state is not None else None
            part_id = prov.part_id or part.id
            if times is not None and isinstance(part_id, str):
                start, end = times.start, times.end
                if _is_time(start) and _is_time(end) and end >= start:
                    self.times[events[0].session_id, part_id] = (start, end)
        return events


_LONGEST_CALL_MS = 366 * 86_400_000  # a year: a longer duration_ms is no call's


def _is_time(value: Any) -> bool:
    return (type(value) is int or type(value) is float) and value == value and value >= 0


# ------------------------------------------------------------------------ one session


class _Chat:
    __slots__ = ("span", "usage", "model", "provider", "agent")

    def __init__(self, span: SpanData) -> None:
        self.span = span
        self.usage: Usage | None = None
        self.model: str | None = None
        self.provider: str | None = None
        self.agent: str | None = None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class SessionTrace:
    """One session's spans as its events come (``add``); ``TraceBuilder.finish`` completes
    them. A step's ``chat`` span runs from where the step began — the step before it ended,
    or the prompt it answers was written, or else its message's first event — to its
    step-finish, from every source alike."""

    def __init__(
        self, session_id: str, times: dict[tuple[Any, str], tuple[Any, Any]] | None = None
    ) -> None:
        self.session_id = session_id
        self.times = times if times is not None else {}
        self.first: int | float | None = None
        self.last: int | float | None = None
        self.boundary: int | float | None = None  # where the next step begins
        self.message_first: dict[str, int | float] = {}
        self.chats: dict[str, _Chat] = {}
        self.tools: dict[str, SpanData] = {}
        self.marks: list[SpanEvent] = []  # events of the session span (errors, compactions)
        self.children: dict[str, str] = {}  # child session id → the spawning call's span id
        self.failed = False  # the session's last inference or error was a failure
        self.agent: str | None = None  # seen on events (usage.agent), when a source has it
        # the first step's model and provider, for a session whose row names none (one
        # OpenCode 1.2 moved into its database from JSON files keeps no model column)
        self.model: str | None = None
        self.provider: str | None = None
        self.mcp_servers: Sequence[str] = ()

    def add(self, event: Event) -> None:
        time = event.time
        message_id = event.message_id
        cls = type(event)
        is_tool = isinstance(event, ToolEvent) or (cls is Unknown and event.tool is not None)
        call = self._call_times(event) if is_tool else None
        if time is not None:
            # A tool call began before its event when the event is dated at its end (a
            # stream's): its step, its message and its session began no later.
            began = time if call is None else call[0]
            if self.first is None or began < self.first:
                self.first = began
            if self.last is None or time > self.last:
                self.last = time
            if message_id is not None:
                known = self.message_first.get(message_id)
                if known is None or began < known:
                    self.message_first[message_id] = began
        if cls is Usage:
            self._usage(event)  # type: ignore[arg-type]
        elif call is not None:
            self._tool(event, call)
        elif cls is Prompt:
            if time is not None and (self.boundary is None or time > self.boundary):
                self.boundary = time
        elif cls is Error:
            self._error(event)  # type: ignore[arg-type]
        elif cls is Compaction and time is not None:
            auto = event.auto  # type: ignore[attr-defined]
            attributes = {} if auto is None else {"opencode.compaction.auto": auto}
            self.marks.append(SpanEvent("opencode.compaction", epoch_ns(time), attributes))

    def _call_times(self, event: Any) -> tuple[int | float, int | float]:
        """A tool call's start and end: its part's own (``state.time``, where the source
        had them: ``ToolTimes``), else, of our own events read again, its time and how
        long it took, the time being the end where the event carries the ``line`` of a
        stream or of server events (OpenCode writes those when the call ends), the start
        where it does not (the store, an export: the part's start)."""
        exact = self.times.get((event.session_id, event.part_id)) if event.part_id else None
        if exact is not None:
            return exact
        time = event.time if event.time is not None else (self.last or 0)
        duration = event.duration_ms
        if not isinstance(duration, int | float) or not 0 <= duration < _LONGEST_CALL_MS:
            return time, time  # none, or no duration a call can have (NaN, huge, negative)
        if event.line is not None:
            return time - duration, time
        return time, time + duration

    def _step_start(self, message_id: str | None, end: int | float) -> int | float:
        start = self.boundary
        if start is None or start > end:
            start = self.message_first.get(message_id, end) if message_id else end
        return min(start, end)

    def _chat_for(self, key: str, message_id: str | None, end: int | float) -> _Chat:
        chat = self.chats.get(key)
        if chat is None:
            start, stop = self._step_start(message_id, end), end
            span = SpanData(
                span_id=span_id_of("chat", f"{self.session_id}/{key}"),
                name="chat",
                kind=KIND_CLIENT,
                start_ns=epoch_ns(start),
                end_ns=epoch_ns(stop),
                attributes={"gen_ai.operation.name": "chat"},
            )
            chat = self.chats[key] = _Chat(span)
        return chat

    def _usage(self, usage: Usage) -> None:
        end = usage.time if usage.time is not None else (self.last or 0)
        message_id = usage.message_id
        key = message_id or usage.part_id or f"step/{usage.turn}"
        chat = self.chats.get(key)
        if chat is not None and chat.usage is not None:  # a second step in one message
            key = f"{key}/{usage.part_id or usage.turn}"
        chat = self._chat_for(key, message_id, end)
        chat.usage = usage
        chat.model = _str(usage.model)
        chat.provider = _str(usage.provider)
        chat.agent = _str(usage.agent)
        if chat.agent and self.agent is None:
            self.agent = chat.agent
        if chat.model and self.model is None:
            self.model, self.provider = chat.model, chat.provider
        span = chat.span
        attributes = span.attributes
        if usage.reason:
            attributes["gen_ai.response.finish_reasons"] = [usage.reason]
        input_tokens, output_tokens = gen_ai_tokens(usage)
        attributes["gen_ai.usage.input_tokens"] = input_tokens
        attributes["gen_ai.usage.output_tokens"] = output_tokens
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        # cache_creation is the conventions' name; cache_write, which some backends read
        # and earlier exports wrote, is kept beside it.
        attributes["gen_ai.usage.cache_write.input_tokens"] = usage.cache_write_tokens
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        attributes["gen_ai.usage.cost"] = usage.cost
        attributes["opencode.step"] = usage.turn
        if message_id:
            attributes["opencode.message.id"] = message_id
        if usage.reverted:  # a pending /undo undid it: still counted, as OpenCode counts it
            attributes["opencode.reverted"] = True
        span.end_ns = max(span.end_ns, epoch_ns(end))
        if chat.span.status != STATUS_ERROR:
            self.failed = False
        self.boundary = end

    def _error(self, error: Error) -> None:
        time = error.time if error.time is not None else (self.last or 0)
        name = error.name or "_OTHER"
        attributes: dict[str, Any] = {"exception.type": name}
        if error.message:
            attributes["exception.message"] = error.message
        mark = SpanEvent("exception", epoch_ns(time), attributes)
        self.failed = True
        message_id = error.message_id
        if message_id is None:  # a session's error (server events, the run stream)
            self.marks.append(mark)
            return
        chat = self.chats.get(message_id) or self._chat_for(message_id, message_id, time)
        span = chat.span
        span.status = STATUS_ERROR
        span.status_message = error.message or name
        span.attributes["error.type"] = name
        span.attributes.setdefault("opencode.message.id", message_id)
        span.events.append(mark)
        span.end_ns = max(span.end_ns, epoch_ns(time))
        if self.boundary is None or time > self.boundary:
            self.boundary = time

    def _tool(self, event: Any, call: tuple[int | float, int | float]) -> None:
        key = event.part_id or (f"call/{event.call_id}" if event.call_id else f"seq/{event.seq}")
        # A call code mode's script made (``via``) shares the execute call's part: a span of
        # its own under that call's, over its time (OpenCode keeps no times of its own).
        within = self.tools.get(key) if getattr(event, "via", None) and event.call_id else None
        if within is not None:
            key = f"{key}/{event.call_id}"
        if key in self.tools:  # one call, several events (a patch's files)
            return
        # A call a script made takes the execute call's times, below.
        start, end = (0, 0) if within is not None else call
        if event.part_id:
            self.times.pop((event.session_id, event.part_id), None)
        tool = event.tool
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": self.session_id,
        }
        if event.call_id:
            attributes["gen_ai.tool.call.id"] = event.call_id
        if event.reverted:
            attributes["opencode.reverted"] = True
        if event.status:
            attributes["opencode.tool.status"] = event.status
        exit_code = getattr(event, "exit_code", None)
        if type(exit_code) is int:
            attributes["process.exit.code"] = exit_code
        interrupted = getattr(event, "interrupted", None)
        if interrupted:  # OpenCode killed the command ("timeout", "abort"): a bad exit
            attributes["opencode.command.interrupted"] = interrupted
        if within is not None:
            attributes["opencode.tool.via"] = event.via
        server = _mcp_server(tool, self.mcp_servers)
        if server is not None:
            attributes["gen_ai.tool.type"] = "extension"
            attributes["mcp.method.name"] = "tools/call"
            attributes["opencode.mcp.server"] = server
        span = SpanData(
            span_id=span_id_of("tool", f"{self.session_id}/{key}"),
            name=f"execute_tool {tool}",
            kind=KIND_INTERNAL,
            start_ns=epoch_ns(start),
            end_ns=epoch_ns(end),
            attributes=attributes,
        )
        if within is not None:
            span.parent_span_id = within.span_id
            span.start_ns, span.end_ns = within.start_ns, within.end_ns
        if event_failed(event):  # the one rule: OpenCode says it failed, or no such tool
            failed_as = "invalid_tool" if event.success is not False else event.status
            span.status = STATUS_ERROR
            span.status_message = event.error or failed_as or "error"
            attributes["error.type"] = failed_as or "error"
        if type(event) is Orchestration:
            child = event.child_session_id
            if event.agent:
                attributes["opencode.subagent.agent"] = event.agent
            if child:
                attributes["opencode.subagent.session_id"] = child
                self.children[child] = span.span_id
        self.tools[key] = span


def _mcp_server(tool: Any, servers: Sequence[str]) -> str | None:
    if not servers or not isinstance(tool, str):
        return None
    from ..reports.mcp import mcp_server_of

    return mcp_server_of(tool, servers)


# ------------------------------------------------------------------------------ counters


# The GenAI conventions' client metrics, with the bucket boundaries they advise:
# ``gen_ai.client.token.usage`` ({token}) and ``gen_ai.client.operation.duration`` (s).
TOKEN_BOUNDS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                16777216, 67108864)  # fmt: skip
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                   40.96, 81.92)  # fmt: skip
_DURATION_BOUNDS_NS = tuple(round(bound * 1e9) for bound in DURATION_BOUNDS)
# A histogram's figures: [count, sum, min, max, then a count per bucket] as integers (a
# duration in ns), so that adding workers' histograms in any order gives the same bytes.
Histogram = list[int]


def _record(histograms: dict[Any, Histogram], key: Any, value: int, bounds: Any) -> None:
    found = histograms.get(key)
    if found is None:
        found = histograms[key] = [0, 0, value, value, *([0] * (len(bounds) + 1))]
    found[0] += 1
    found[1] += value
    if value < found[2]:
        found[2] = value
    if value > found[3]:
        found[3] = value
    found[4 + bisect.bisect_left(bounds, value)] += 1  # a bound is its bucket's upper edge


def merge_histograms(ours: dict[Any, Histogram], theirs: dict[Any, Histogram]) -> None:
    """``theirs`` added into ``ours`` (a worker's, into the parent's)."""
    for key, their in theirs.items():
        mine = ours.get(key)
        if mine is None:
            ours[key] = list(their)
            continue
        mine[0] += their[0]
        mine[1] += their[1]
        mine[2] = min(mine[2], their[2])
        mine[3] = max(mine[3], their[3])
        for at in range(4, len(mine)):
            mine[at] += their[at]


class Counters:
    """Cumulative sums over every session finished: ``opencode.token.usage`` by token
    type, ``opencode.cost.usage`` and ``opencode.session.count``, each by model, agent and
    provider. Token types keep OpenCode's own meaning (``input`` without the cache, ``output``
    without the reasoning), so the types add up to OpenCode's total.

    And the GenAI conventions' histograms of each inference (``chat``): its input and
    output tokens by the conventions' rule (``gen_ai_tokens``), by token type, model and
    provider (``token_usage``), and its duration, by model, provider and error type
    (``durations``)."""

    TYPES = ("input", "output", "reasoning", "cacheRead", "cacheCreation")

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, str | None, str | None, str | None], int] = {}
        self.cost: dict[tuple[str | None, str | None, str | None], float] = {}
        self.figures: dict[tuple[str | None, str | None, str | None], int] = {}
        self.sessions: dict[tuple[str | None, str | None, str | None], int] = {}
        self.token_usage: dict[tuple[str, str | None, str | None], Histogram] = {}
        self.durations: dict[tuple[str | None, str | None, str | None], Histogram] = {}
        self.start_ms: int | float | None = None
        self.end_ms: int | float | None = None

    def __bool__(self) -> bool:
        return bool(self.sessions)

    def add_session(self, key: tuple[str | None, str | None, str | None], start: Any, end: Any):
        self.sessions[key] = self.sessions.get(key, 0) + 1
        if start is not None and (self.start_ms is None or start < self.start_ms):
            self.start_ms = start
        if end is not None and (self.end_ms is None or end > self.end_ms):
            self.end_ms = end

    def add_usage(self, key: tuple[str | None, str | None, str | None], usage: Usage) -> None:
        tokens = self.tokens
        model, agent, provider = key
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("reasoning", usage.reasoning_tokens),
            ("cacheRead", usage.cache_read_tokens),
            ("cacheCreation", usage.cache_write_tokens),
        ):
            full = (kind, model, agent, provider)
            tokens[full] = tokens.get(full, 0) + value
        self.cost[key] = self.cost.get(key, 0.0) + usage.cost
        self.figures[key] = self.figures.get(key, 0) + 1

    def add_inference(
        self, model: str | None, provider: str | None, span: SpanData, usage: Usage | None
    ) -> None:
        """One inference's ``chat`` span in the conventions' histograms: its tokens (when
        it has a ``usage``) and its duration (with its ``error.type`` when it failed)."""
        if usage is not None:
            input_tokens, output_tokens = gen_ai_tokens(usage)
            for kind, value in (("input", input_tokens), ("output", output_tokens)):
                if type(value) is int and value >= 0:
                    _record(self.token_usage, (kind, model, provider), value, TOKEN_BOUNDS)
        error = span.attributes.get("error.type") if span.status == STATUS_ERROR else None
        key = (model, provider, error if type(error) is str else None)
        duration = max(span.end_ns - span.start_ns, 0)
        _record(self.durations, key, duration, _DURATION_BOUNDS_NS)

    def points(self) -> int:
        """How many data points the metrics body has."""
        return sum(
            map(len, (self.tokens, self.cost, self.sessions, self.token_usage, self.durations))
        )

    def cost_of(self, key: tuple[str | None, str | None, str | None]) -> float:
        """A key's cost as every sum of OpenCode's costs is written (``summed_cost``)."""
        return summed_cost(self.cost[key], self.figures.get(key, 0))


# ------------------------------------------------------------------------------- traces


class TraceBuilder:
    """Sessions' traces: which trace a session belongs to, and which span it hangs from.

    A session with a parent (``SessionInfo.parent_id``, or an ``orchestration`` event of
    another session naming it) is in its root's trace, under the call that spawned it;
    ``spawned_by`` is asked for that call when it was not seen (a subagent exported
    without its parent: the store reads the parent to find it). Counters are summed as
    sessions finish.
    """

    def __init__(
        self,
        *,
        parents: dict[str, str] | None = None,
        spawned_by: Callable[[str, str], str | None] | None = None,
        mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    ) -> None:
        # child → parent session: the store's tree when given (the only authority then, so
        # the result does not depend on the order sessions are read); else learnt from the
        # spawning calls seen
        self.learn_parents = parents is None
        self.parents = parents if parents is not None else {}
        # (child, the session that spawned it) → the spawning call's span: each spawner its
        # own, so that a child two sessions claim hangs from its parent's call whatever order
        # they are noted in
        self.spawns: dict[tuple[str, str], str] = {}
        self.spawned_by = spawned_by
        self.mcp_servers = mcp_servers
        self.counters = Counters()
        self.times: dict[tuple[Any, str], tuple[Any, Any]] = {}  # filled by a ToolTimes normalizer
        self.skip_messages: set[str] = set()  # a fork's copied history: not its own spans
        self.counted: set[str] | None = None  # sessions counted already (when followed)
        self._servers: dict[str | None, Sequence[str]] = {}

    def session(self, session_id: str, directory: str | None = None) -> SessionTrace:
        trace = SessionTrace(session_id, self.times)
        if self.mcp_servers is not None:
            servers = self._servers.get(directory)
            if servers is None:  # a project's config files are looked for once an export
                if len(self._servers) > 1024:
                    self._servers.clear()
                servers = self._servers[directory] = self.mcp_servers(directory)
            trace.mcp_servers = servers
        return trace

    def root_of(self, session_id: str) -> str:
        seen = {session_id}
        current = session_id
        while True:
            parent = self.parents.get(current)
            if parent is None or parent in seen:  # a loop of parents: no parent at all
                return current
            seen.add(parent)
            current = parent

    def note_children(self, trace: SessionTrace, child: str | None = None) -> None:
        """What a session's spawning calls tell of its subagents' place (``child``: of that
        one only). Learnt parents: the first session noted to spawn a child is its parent;
        a collector notes each call as it comes (``SpanCollector.write``), so that is the
        first spawning call in the stream."""
        children = trace.children if child is None else {child: trace.children[child]}
        for kid, span_id in children.items():
            self.spawns[(kid, trace.session_id)] = span_id
            if self.learn_parents:
                self.parents.setdefault(kid, trace.session_id)

    def finish(self, trace: SessionTrace, info: SessionInfo | None = None) -> list[SpanData]:
        """The session's spans, its ``invoke_agent`` span first, then by start time."""
        sid = trace.session_id
        info = info or SessionInfo(id=sid)
        self.note_children(trace)
        if info.parent_id and self.learn_parents and sid not in self.parents:
            self.parents[sid] = info.parent_id
        trace_id = trace_id_of(self.root_of(sid))
        parent = self.parents.get(sid)
        parent_span = ""
        if parent is not None and self.root_of(sid) != sid:
            spawn = self.spawns.get((sid, parent))  # a call of its parent's, not another's
            if spawn is None and self.spawned_by is not None:
                spawn = self.spawned_by(sid, parent)
            parent_span = spawn or span_id_of("session", parent)
        agent = info.agent or trace.agent
        model, provider = info.model, info.provider
        if not model:
            model, provider = trace.model, provider or trace.provider
        start = info.start_ms if info.start_ms is not None else trace.first
        end = trace.last if info.end_ms is None else max(info.end_ms, trace.last or info.end_ms)
        start = start if start is not None else (end or 0)
        end = end if end is not None and end >= start else start
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": sid,
        }
        if agent:
            attributes["gen_ai.agent.name"] = agent
        if provider:
            attributes.update(provider_attributes(provider))
        if model:
            attributes["gen_ai.request.model"] = model
        if info.title:
            attributes["opencode.session.title"] = info.title
        if parent:
            attributes["opencode.session.parent_id"] = parent
        session_span = SpanData(
            trace_id=trace_id,
            span_id=span_id_of("session", sid),
            parent_span_id=parent_span,
            name=f"invoke_agent {agent}" if agent else "invoke_agent",
            kind=KIND_INTERNAL,
            start_ns=epoch_ns(start),
            end_ns=epoch_ns(end),
            attributes=attributes,
            events=trace.marks,
        )
        if trace.failed:
            session_span.status = STATUS_ERROR
            last_error = next(
                (
                    e
                    for s in [session_span, *(c.span for c in trace.chats.values())]
                    for e in reversed(s.events)
                    if e.name == "exception"
                ),
                None,
            )
            name = last_error.attributes.get("exception.type") if last_error else None
            session_span.attributes["error.type"] = name or "_OTHER"
            session_span.status_message = (
                last_error.attributes.get("exception.message", name) if last_error else ""
            ) or ""
        counters = self.counters
        if self.counted is None or sid not in self.counted:
            counters.add_session((model, agent, provider), start, end)
            if self.counted is not None:
                self.counted.add(sid)
        children: list[SpanData] = []
        for chat in trace.chats.values():
            span = chat.span
            chat_model = chat.model or model
            chat_provider = chat.provider or provider
            chat_agent = chat.agent or agent
            span.name = f"chat {chat_model}" if chat_model else "chat"
            extra: dict[str, Any] = {"gen_ai.conversation.id": sid}
            if chat_provider:
                extra.update(provider_attributes(chat_provider))
            if chat_model:
                extra["gen_ai.request.model"] = chat_model
            if chat_agent:
                extra["gen_ai.agent.name"] = chat_agent
            span.attributes = {
                "gen_ai.operation.name": "chat",
                **extra,
                **{k: v for k, v in span.attributes.items() if k != "gen_ai.operation.name"},
            }
            if chat.usage is not None:
                counters.add_usage((chat_model, chat_agent, chat_provider), chat.usage)
            counters.add_inference(chat_model, chat_provider, span, chat.usage)
            children.append(span)
        children.extend(trace.tools.values())
        children.sort(key=_start_then_id)
        for span in children:
            span.trace_id = trace_id
            span.parent_span_id = span.parent_span_id or session_span.span_id
            if span.start_ns < session_span.start_ns:
                session_span.start_ns = span.start_ns
            if span.end_ns > session_span.end_ns:
                session_span.end_ns = span.end_ns
        return [session_span, *children]


# OpenCode's provider ids (models.dev's) whose provider the GenAI conventions name: a
# well-known ``gen_ai.provider.name`` "MUST be used" where one applies. Others go as they are.
_PROVIDER_NAMES = {
    "amazon-bedrock": "aws.bedrock",
    "azure": "azure.ai.openai",
    "google": "gcp.gemini",
    "google-vertex": "gcp.vertex_ai",
    "google-vertex-anthropic": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "moonshotai": "moonshot_ai",
    "moonshotai-cn": "moonshot_ai",
    "xai": "x_ai",
}


def provider_attributes(provider: Any) -> dict[str, Any]:
    """``gen_ai.provider.name`` of OpenCode's provider id: the conventions' name where they
    have one, with OpenCode's id beside it (``opencode.provider.id``, as metrics label it)."""
    named = _PROVIDER_NAMES.get(provider) if type(provider) is str else None
    if named is None:
        return {"gen_ai.provider.name": provider}
    return {"gen_ai.provider.name": named, "opencode.provider.id": provider}


def _start_then_id(span: SpanData) -> tuple[int, str]:
    return span.start_ns, span.span_id
