"""The normalized event types: the one output vocabulary of every source.

Each kind is a msgspec Struct tagged by ``kind``; JSON encoding omits fields that have
no value (``omit_defaults``), except ``success`` on tool events, which is always written
(true, false or null). ``seq`` and ``session_id`` are stamped by the normalizer when the
event is emitted, so mapping code never has to know them. ``schema()`` derives the
published JSON Schema from these classes; there is no hand-written copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

__all__ = [
    "Event",
    "Message",
    "Reasoning",
    "Prompt",
    "Read",
    "Write",
    "Search",
    "Command",
    "Orchestration",
    "Skill",
    "Usage",
    "Error",
    "Permission",
    "Question",
    "Compaction",
    "Attachment",
    "Subtask",
    "Mention",
    "Patch",
    "Retry",
    "Delta",
    "Warning",
    "Unknown",
    "Metrics",
    "ANY_EVENT",
    "AnyEvent",
    "TOOL_KINDS",
    "schema",
    "duckdb_columns",
]


# ``raw``, the source record as read (JSON bytes), or None when not kept. Annotated ``Raw``
# alone, None its default: msgspec cannot decode a ``Raw`` inside a union, and every line
# this tool writes must decode again as ``AnyEvent``.
RawRecord = Raw


def _builtin_raw(value: Any) -> Any:
    if isinstance(value, Raw):
        return msgspec.json.decode(value)
    raise NotImplementedError(f"cannot convert {type(value).__name__}")


class Event(Struct, kw_only=True, omit_defaults=True, tag_field="kind", gc=False):
    """Fields every event carries: position, session and provenance."""

    seq: int = -1
    session_id: str | None = None
    # A subagent's events name the session that ran it (store and export input).
    parent_session_id: str | None = None
    time: int | float | None = None
    source: str | None = None  # the input file, when a run reads several
    line: int | None = None
    message_id: str | None = None
    part_id: str | None = None
    # True: made from a message or part the session's pending revert undid (OpenCode keeps
    # them stored until the next prompt, which deletes them; its views hide them).
    reverted: bool | None = None
    # True: made from a message a fork copied (``import``): OpenCode copies the history
    # under new ids, with the original times, so the copy is older than its session; its
    # cost is the original's, which ``usage`` counts once.
    copied: bool | None = None
    # ``--tag KEY=VALUE`` stamps (a machine, a CI job), written last on every event.
    tags: dict[str, str] | None = None

    @property
    def kind(self) -> str:
        """The event's kind, as written in its ``kind`` field (``"usage"``, ``"read"``, …)."""
        return self.__struct_config__.tag  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        """The event as its JSON line's object, ``raw`` decoded too (which
        ``msgspec.to_builtins`` cannot do alone: it refuses a ``Raw``)."""
        return msgspec.to_builtins(self, enc_hook=_builtin_raw)  # type: ignore[no-any-return]


class ToolEvent(Event, kw_only=True, omit_defaults=True, tag_field="kind"):
    """Fields of every event made from a tool call. ``success`` is always written."""

    tool: str
    call_id: str | None = None
    status: str | None = None
    success: bool | None
    title: str | None = None
    duration_ms: int | float | None = None
    error: str | None = None


class Message(Event, tag="message", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["message"]: ...

    text: str
    summary: bool | None = None  # True: a compaction's summary (OpenCode's summary message)
    raw: RawRecord = None


class Reasoning(Event, tag="reasoning", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["reasoning"]: ...

    text: str
    raw: RawRecord = None


class Prompt(Event, tag="prompt", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["prompt"]: ...

    text: str
    synthetic: bool | None = None  # True: text OpenCode wrote as the user's, not typed
    raw: RawRecord = None


class Read(ToolEvent, tag="read", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["read"]: ...

    path: str | None = None
    command: str | None = None  # a read recognised in a bash command: the command line …
    exit_code: int | None = None  # … and how it ended
    interrupted: str | None = None  # "timeout" or "abort": bash killed it (exit_code null)
    raw: RawRecord = None


class Write(ToolEvent, tag="write", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["write"]: ...

    path: str | None = None
    op: str | None = None
    to: str | None = None
    command: str | None = None  # from bash, as on Read
    exit_code: int | None = None
    interrupted: str | None = None
    raw: RawRecord = None


class Search(ToolEvent, tag="search", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["search"]: ...

    pattern: str | None = None
    path: str | None = None
    operation: str | None = None  # lsp: the operation (workspaceSymbol, goToDefinition, …)
    position: str | None = None  # lsp: "line:character" (1-based) of the symbol looked up
    command: str | None = None  # from bash, as on Read
    exit_code: int | None = None
    interrupted: str | None = None
    raw: RawRecord = None


class Command(ToolEvent, tag="command", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["command"]: ...

    command: str | None = None
    exit_code: int | None = None
    interrupted: str | None = None  # "timeout" or "abort": bash killed it (exit_code null)
    raw: RawRecord = None


class Orchestration(ToolEvent, tag="orchestration", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["orchestration"]: ...

    agent: str | None = None
    child_session_id: str | None = None
    description: str | None = None
    # True: a background task (OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS): the call returns
    # once the subagent is launched, so its status says it started, not that it finished
    background: bool | None = None
    raw: RawRecord = None


class Skill(ToolEvent, tag="skill", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["skill"]: ...

    name: str | None = None
    raw: RawRecord = None


class Usage(Event, tag="usage", kw_only=True):
    """One model step's tokens and cost, as OpenCode reported them; always all written."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["usage"]: ...

    turn: int
    reason: str | None = None
    # The inference's model and agent, where the source names them (store, export, server
    # events: the assistant message's modelID, providerID, agent; a run stream has none).
    model: str | None = None
    provider: str | None = None
    agent: str | None = None
    # The directory OpenCode ran the step in (the assistant message's ``path.cwd``, else the
    # session's): a project to group by, where the source names it (a run stream does not).
    directory: str | None = None
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    cost: float
    raw: RawRecord = None


class Error(Event, tag="error", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["error"]: ...

    name: str | None = None
    message: str | None = None
    raw: RawRecord = None


class Permission(Event, tag="permission", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["permission"]: ...

    id: str | None = None
    permission: str | None = None
    patterns: list[str] | None = None
    reply: str | None = None
    raw: RawRecord = None


class Question(Event, tag="question", kw_only=True):
    """The model asked the user (OpenCode's ``question`` tool, answered in the TUI or over
    the server): ``question.asked`` gives ``questions``, ``question.replied`` the
    ``answers`` (``reply: "answer"``), ``question.rejected`` ``reply: "reject"``."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["question"]: ...

    id: str | None = None  # que_…, the same on the ask and its reply
    call_id: str | None = None  # the question tool call that asked (asked only)
    questions: list[str] | None = None  # each question's text, in order
    answers: list[list[str]] | None = None  # the labels chosen, one list per question
    reply: str | None = None  # "answer" or "reject"; None on the ask
    raw: RawRecord = None


class Compaction(Event, tag="compaction", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["compaction"]: ...

    auto: bool | None = None
    overflow: bool | None = None  # True: the provider refused the context as too long
    raw: RawRecord = None


class Attachment(Event, tag="attachment", kw_only=True):
    """A file given with a message (OpenCode's ``file`` part: ``run -f``, an ``@file`` in
    the TUI, a pasted image, an MCP resource)."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["attachment"]: ...

    name: str | None = None  # the file's name (``filename``)
    mime: str | None = None
    path: str | None = None  # a local file's absolute path (its file:// URL)
    url: str | None = None  # any other URL but data: (whose content is the URL itself)
    # how it was picked (OpenCode's ``source.type``): "file", "symbol" (an @symbol of the
    # LSP) or "resource" (an MCP resource); ``source`` is every event's input file
    origin: str | None = None
    raw: RawRecord = None


class Subtask(Event, tag="subtask", kw_only=True):
    """A command run in a subagent (OpenCode's ``subtask`` part, on the user's message): the
    prompt it hands the subagent, which exists nowhere else in the parent session."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["subtask"]: ...

    agent: str | None = None
    description: str | None = None
    command: str | None = None  # the command's name (``/review``)
    prompt: str | None = None
    model: str | None = None
    provider: str | None = None
    raw: RawRecord = None


class Mention(Event, tag="mention", kw_only=True):
    """An ``@agent`` in a prompt (OpenCode's ``agent`` part): the user asked for it."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["mention"]: ...

    agent: str | None = None
    raw: RawRecord = None


class Patch(Event, tag="patch", kw_only=True):
    """The files one model step changed (OpenCode's ``patch`` part: a snapshot diff taken
    after the step, so changes made by bash are in it too), absolute paths."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["patch"]: ...

    files: list[str]
    hash: str | None = None  # the snapshot before the step (what a revert goes back to)
    raw: RawRecord = None


class Retry(Event, tag="retry", kw_only=True):
    """The provider failed and OpenCode will try again (``session.status`` retry)."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["retry"]: ...

    attempt: int | None = None
    message: str | None = None  # why, as OpenCode tells the user
    next: int | float | None = None  # when the next attempt starts (epoch ms)
    reason: str | None = None  # OpenCode's ``action.reason`` (free_tier_limit, …), if any
    raw: RawRecord = None


class Delta(Event, tag="delta", kw_only=True):
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["delta"]: ...

    field: str | None = None
    delta: str = ""
    raw: RawRecord = None


class Warning(Event, tag="warning", kw_only=True):  # noqa: A001 - the kind's own name
    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["warning"]: ...

    message: str
    text: str | None = None


class Unknown(Event, tag="unknown", kw_only=True):
    """A record type or tool the mapping does not know, kept whole in ``raw``.

    When it was made from a tool call it carries the tool fields too, ``success``
    included; otherwise ``success`` is left out.
    """

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["unknown"]: ...

    type: str | None = None
    tool: str | None = None
    call_id: str | None = None
    status: str | None = None
    success: bool | None | UnsetType = UNSET
    title: str | None = None
    duration_ms: int | float | None = None
    error: str | None = None
    # What a user filters on, for some tools seed 000 leaves unknown (docs/events.md):
    mcp_server: str | None = None  # an MCP tool's server, as configured (normalize, import)
    via: str | None = None  # "execute": a call code mode's script made (call_id "<call>/<n>")
    url: str | None = None  # webfetch: the URL fetched
    query: str | None = None  # websearch (and the older codesearch): what was searched for
    questions: list[str] | None = None  # question: each question's text
    answers: list[list[str]] | None = None  # question: the labels chosen, per question
    raw: RawRecord = None


class Metrics(Event, tag="metrics", kw_only=True):
    """The run's summary, written last. Every field is always written but the three
    subagent figures; token sums count each part id once."""

    if TYPE_CHECKING:  # the kind, for a type checker to tell the union apart

        @property
        def kind(self) -> Literal["metrics"]: ...

    records: int
    counts: dict[str, int]
    turns: int
    tool_calls: int
    tool_failures: int
    command_failures: int  # calls OpenCode completed whose command exited ≠ 0 or was killed
    duplicates: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    cost: float
    # Written by ``run`` alone, read from the store when OpenCode has exited: the subagent
    # sessions below the run's (their steps are not in the stream), their steps, tool calls
    # and tokens (as ``sessions`` counts them), what they cost, and ``cost`` with theirs added.
    subagent_sessions: int | None = None
    subagent_inferences: int | None = None
    subagent_tool_calls: int | None = None
    subagent_tokens: int | None = None
    subagent_cost: float | None = None
    total_cost: float | None = None


ANY_EVENT = (
    Message
    | Reasoning
    | Prompt
    | Read
    | Write
    | Search
    | Command
    | Orchestration
    | Skill
    | Usage
    | Error
    | Permission
    | Question
    | Compaction
    | Attachment
    | Subtask
    | Mention
    | Patch
    | Retry
    | Delta
    | Warning
    | Unknown
    | Metrics
)

AnyEvent = ANY_EVENT  # the union of every kind, for type hints and msgspec decoders

TOOL_KINDS = frozenset(
    cls.__struct_config__.tag for cls in (Read, Write, Search, Command, Orchestration, Skill)
)


def schema() -> dict[str, Any]:
    """The JSON Schema of one normalized event line, derived from the Struct types."""
    doc = msgspec.json.schema(ANY_EVENT)
    for definition in doc.get("$defs", {}).values():
        props = definition.get("properties", {})
        # seq is always stamped on output; its -1 default is an internal placeholder.
        if "seq" in props:
            props["seq"] = {"type": "integer", "minimum": 0}
            definition.setdefault("required", [])
            if "seq" not in definition["required"]:
                definition["required"].insert(0, "seq")
        if "raw" in props:
            props["raw"] = {"description": "the source record, as read (with --raw, or on unknown)"}
    doc["title"] = "opencode-events normalized event"
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return doc


_DUCKDB = {"integer": "BIGINT", "number": "DOUBLE", "string": "VARCHAR", "boolean": "BOOLEAN"}


def _json_types(prop: dict[str, Any]) -> set[str]:
    if "enum" in prop:
        return {"string"}
    if "anyOf" in prop:
        return set().union(*(_json_types(p) for p in prop["anyOf"])) - {"null"}
    kind = prop.get("type")
    return {kind} if isinstance(kind, str) else {"any"}


def duckdb_columns() -> dict[str, str]:
    """Every field of every kind, with its DuckDB type, derived from ``schema()``: the
    ``columns`` of ``read_json`` for a table of events (``opencode-events schema --duckdb``).
    A field whose kinds disagree on its type, and objects, arrays and ``raw``, are JSON."""
    found: dict[str, set[str]] = {}
    for definition in schema()["$defs"].values():
        for name, prop in definition.get("properties", {}).items():
            found.setdefault(name, set()).update(_json_types(prop))
    columns = {}
    for name, kinds in found.items():
        if kinds == {"integer", "number"}:
            kinds = {"number"}
        columns[name] = _DUCKDB.get(next(iter(kinds)), "JSON") if len(kinds) == 1 else "JSON"
    return columns
