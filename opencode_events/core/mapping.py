"""The mapping table: OpenCode records, parts and tools → normalized events.

This module is the one place that knows which OpenCode shape becomes which event, for
every source (the run stream, the store, export documents, the server's events). Its
functions take read-side views (``views.Part``) and return unstamped events; the
``Normalizer`` adds sequence numbers, session and provenance. Rules come from seed 000
and SPEC §2; docs/events.md shows each row with an example.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
from msgspec import Struct

from ..events import (
    Attachment,
    Command,
    Event,
    Orchestration,
    Read,
    Search,
    Skill,
    Subtask,
    Unknown,
    Usage,
    Write,
)
from .figures import INT64, read_figures
from .mcpnames import mcp_server_of, sanitize
from .views import MessageInfo, Part

__all__ = [
    "STATUS_SUCCESS",
    "STREAM_RECORD_PARTS",
    "CONSUMED_PARTS",
    "CONSUMED_TOOLS",
    "ORCHESTRATION_TOOLS",
    "spawned_session",
    "TOOL_RULES",
    "success_of",
    "call_failed",
    "command_failed",
    "event_failed",
    "event_command_failed",
    "call_ended",
    "OPEN_TOOL_STATUSES",
    "tool_events",
    "usage_event",
    "error_fields",
    "patch_files",
    "attachment_event",
    "subtask_event",
    "text_of",
    "sanitize",
    "mcp_server_of",
    "RevertPoint",
    "script_calls",
]


# ``bashcmd`` (the shell lexer) and ``patch`` are imported on the first call of one of their
# functions, which then stands in for its stand-in here (an import statement in the rule
# itself would cost a microsecond a call): a run that reads no bash command or patch
# (`normalize </dev/null`) starts without them.
def _first_classify_bash(command: str, workdir: str | None = None) -> Any:
    global classify_bash
    from . import bashcmd

    classify_bash = bashcmd.classify_bash
    return classify_bash(command, workdir)


def _first_patched_files(text: str, directory: str | None) -> Any:
    global patched_files
    from . import patch

    patched_files = patch.patched_files
    return patched_files(text, directory)


def _first_recorded_files(files: Any) -> Any:
    global recorded_files
    from . import patch

    recorded_files = patch.recorded_files
    return recorded_files(files)


classify_bash: Callable[..., Any] = _first_classify_bash
patched_files: Callable[..., Any] = _first_patched_files
recorded_files: Callable[..., Any] = _first_recorded_files


# Status word → success, compared case-insensitively; any other word leaves it null.
STATUS_SUCCESS: dict[str, bool] = {
    "completed": True,
    "success": True,
    "done": True,
    "ok": True,
    "error": False,
    "failed": False,
    "failure": False,
    "cancelled": False,
    "canceled": False,
}

# Stream record type → the part type it carries. ``error`` records have no part and are
# mapped by the normalizer itself; a type in neither place becomes ``unknown``.
# Part types whose records are consumed without an event (readers may skip them early).
CONSUMED_PARTS = frozenset({"step-start"})
STREAM_RECORD_PARTS: dict[str, str] = {
    "step_start": "step-start",
    "text": "text",
    "reasoning": "reasoning",
    "tool_use": "tool",
    "step_finish": "step-finish",
}

# The agent's own task list: counted as tool calls, no event.
CONSUMED_TOOLS = frozenset({"todo", "todowrite", "todoread"})
# Tools that run a subagent in a child session.
ORCHESTRATION_TOOLS = ("task", "agent_manager")


def success_of(status: Any) -> bool | None:
    if isinstance(status, str):
        return STATUS_SUCCESS.get(status.lower())
    return None


def call_failed(success: Any, tool: Any) -> bool:
    """Whether a tool call failed, wherever calls are counted (``tool_failures`` of
    ``metrics`` and ``sessions``, the pretty view's ``(N failed)``): OpenCode's status says
    so (``success`` false), or it called a tool that does not exist (OpenCode's stand-in
    ``invalid``, which OpenCode stores as completed). Both are in a tool part's first bytes.

    >>> call_failed(True, "invalid")
    True
    """
    return success is False or (isinstance(tool, str) and tool.lower() == "invalid")


def command_failed(exit_code: Any, interrupted: Any) -> bool:
    """Whether a command OpenCode marked completed did not do what was asked: it exited
    with a code other than 0, or OpenCode killed it (``interrupted``). Counted apart, as
    ``command_failures`` (a stored part writes the exit code after the output, which
    ``sessions`` does not read); the pretty view marks such a call ✗ as it marks a failure.

    >>> command_failed(3, None), command_failed(0, None), command_failed(None, "timeout")
    (True, False, True)
    """
    return bool(interrupted) or (exit_code is not None and exit_code != 0)


def event_failed(event: Any) -> bool:
    """``call_failed`` of a tool call's event (any of a call's events: they share it)."""
    return call_failed(getattr(event, "success", None), getattr(event, "tool", None))


def event_command_failed(event: Any) -> bool:
    """``command_failed`` of a tool call's event, for a call that did not fail already."""
    return not event_failed(event) and command_failed(
        getattr(event, "exit_code", None), getattr(event, "interrupted", None)
    )


# OpenCode's tool states before a call has ended; any other status ends it (``success_of``
# says how), so a status OpenCode may add later is reported, not waited for.
OPEN_TOOL_STATUSES = frozenset({"pending", "running"})


def call_ended(status: Any) -> bool:
    """Whether a tool part with this ``state.status`` is a finished call (server events
    update a part while it runs)."""
    return isinstance(status, str) and status.lower() not in OPEN_TOOL_STATUSES


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def text_of(part: Part) -> str | None:
    """The text of a text or reasoning part, or None when it carries none."""
    text = part.text
    return text if isinstance(text, str) and text else None


def error_fields(error: Any) -> tuple[str | None, str | None]:
    """(name, message) of an OpenCode NamedError ``{name, data: {message}}``, or of an
    error its HTTP API sends, tagged the Effect way: ``{_tag: "InvalidRequestError",
    message}``."""
    if isinstance(error, str):
        return None, error
    if not isinstance(error, dict):
        return None, None
    data = error.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    if message is None:
        message = error.get("message")
    name = _str(error.get("name")) or _str(error.get("_tag"))
    return name, _str(message)


_URL = msgspec.json.Decoder(str)


def attachment_event(part: Part) -> Attachment:
    """A ``file`` part: ``{mime, filename?, url, source?: {type, path, …}}``. A file://
    URL gives the absolute path; a data: URL (the content itself) is left in ``raw``."""
    url = path = None
    data = bytes(part.url)
    if data and not data.startswith(b'"data:'):
        try:
            url = _URL.decode(data)
        except (msgspec.DecodeError, RecursionError):  # not a string
            url = None
        if url is not None and url.startswith("file://"):
            path, url = unquote(urlsplit(url).path) or None, None
    origin = part.source.get("type") if type(part.source) is dict else None
    return Attachment(
        name=_str(part.filename), mime=_str(part.mime), path=path, url=url, origin=_str(origin)
    )


def subtask_event(part: Part) -> Subtask:
    """A ``subtask`` part: ``{agent, description, command?, prompt, model?}``."""
    model = part.model if type(part.model) is dict else {}
    return Subtask(
        agent=_str(part.agent),
        description=_str(part.description),
        command=_str(part.command),
        prompt=_str(part.prompt),
        model=_str(model.get("modelID")),
        provider=_str(model.get("providerID")),
    )


def patch_files(part: Part) -> list[str] | None:
    """The files of a ``patch`` part (the paths a step changed), or None when its
    ``files`` is not a list of paths."""
    files = part.files
    if type(files) is list and all(type(f) is str for f in files):
        return files
    return None


# --------------------------------------------------------------------------- revert


class _Revert(Struct):
    messageID: Any = None  # noqa: N815
    partID: Any = None  # noqa: N815


_REVERT = msgspec.json.Decoder(_Revert)


class RevertPoint:
    """What a session's pending ``revert`` (the TUI's /undo) has undone, as OpenCode's
    cleanup deletes it at the next prompt: the messages from ``messageID`` on; with
    ``partID``, that message's parts from ``partID`` on and every later message. Fed the
    session's messages in order (``message``), each followed by its parts (``part``)."""

    __slots__ = ("message_id", "part_id", "_all", "_in_message", "_parts")

    def __init__(self, message_id: str, part_id: str | None = None) -> None:
        self.message_id, self.part_id = message_id, part_id
        self._all = self._in_message = self._parts = False

    @classmethod
    def of(cls, revert: str | bytes | None) -> RevertPoint | None:
        """The point of a session's ``revert`` column (JSON), or None when it names none."""
        if not revert:
            return None
        try:
            point = _REVERT.decode(revert)
        except (msgspec.DecodeError, RecursionError):
            return None
        if type(point.messageID) is not str:
            return None
        return cls(point.messageID, point.partID if type(point.partID) is str else None)

    def message(self, message_id: Any) -> bool:
        """Enter the next message: whether all of it is undone."""
        if self._in_message:  # past the message undone from a part on: the rest is undone
            self._all, self._in_message = True, False
        if not self._all and message_id == self.message_id:
            if self.part_id is None:
                self._all = True
            else:
                self._in_message, self._parts = True, False
        return self._all

    def part(self, part_id: Any) -> bool:
        """Whether the next part of the current message is undone."""
        if self._in_message and part_id == self.part_id:
            self._parts = True
        return self._all or (self._in_message and self._parts)


# ---------------------------------------------------------------------------- usage


def usage_event(part: Part | MessageInfo, turn: int) -> Usage:
    """Tokens and cost of a step-finish part, or of an assistant message (one inference),
    OpenCode's figures as they are, read by the one rule (``figures``)."""
    input_, output, reasoning, cache_read, cache_write, total, cost = read_figures(
        part.tokens, part.cost
    )
    reason = part.reason if type(part) is Part else part.finish
    return Usage(
        turn=turn,
        reason=reason if type(reason) is str else None,
        input_tokens=input_,
        output_tokens=output,
        reasoning_tokens=reasoning,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        total_tokens=total,
        cost=cost,
    )


# ----------------------------------------------------------------------------- tools
# Each tool's input is decoded from its Raw bytes into a view naming only what the rule
# reads; an input that is not a JSON object fails validation and the call becomes unknown.


class PathInput(Struct):
    filePath: Any = None  # noqa: N815
    path: Any = None


class PatchInput(Struct):
    patchText: Any = None  # noqa: N815


class SearchInput(Struct):
    pattern: Any = None
    path: Any = None


class BashInput(Struct):
    command: Any = None
    workdir: Any = None


class TaskInput(Struct):
    description: Any = None
    subagent_type: Any = None
    agent: Any = None
    task_id: Any = None
    session_id: Any = None
    sessionId: Any = None  # noqa: N815
    background: Any = None


class SkillInput(Struct):
    name: Any = None


class LspInput(Struct):
    operation: Any = None
    filePath: Any = None  # noqa: N815
    line: Any = None
    character: Any = None
    query: Any = None


# (event kwargs shared by every event of one call, decoded input, the part, the session
# directory when known) → events, or None when the call cannot be identified (→ unknown).
ToolRule = Callable[[dict[str, Any], Any, Part, "str | None"], list[Event] | None]


def _read(
    common: dict[str, Any], args: PathInput, part: Part, directory: str | None
) -> list[Event]:
    return [Read(**common, path=_str(args.filePath) or _str(args.path))]


def _file_change(op: str) -> ToolRule:
    def rule(
        common: dict[str, Any], args: PathInput, part: Part, directory: str | None
    ) -> list[Event]:
        return [Write(**common, path=_str(args.filePath) or _str(args.path), op=op)]

    return rule


def _apply_patch(
    common: dict[str, Any], args: PatchInput, part: Part, directory: str | None
) -> list[Event] | None:
    """The files OpenCode says it changed (``metadata.files``, absolute paths); a call
    without them (it failed) is read from its patch as OpenCode parses it."""
    state = part.state
    files = recorded_files(state.metadata.files) if state and state.metadata else None
    if files is None:
        text = _str(args.patchText)
        files = patched_files(text, directory) if text else []
    if not files:
        return None
    return [Write(**common, path=f.path, op=f.op, to=f.to) for f in files]


def _search(
    common: dict[str, Any], args: SearchInput, part: Part, directory: str | None
) -> list[Event]:
    return [Search(**common, pattern=_str(args.pattern), path=_str(args.path))]


def _bash(
    common: dict[str, Any], args: BashInput, part: Part, directory: str | None
) -> list[Event]:
    command = _str(args.command)
    exit_code = _exit_code(part)
    interrupted = _interrupted(part) if exit_code is None else None
    if command is not None:
        file_ops = classify_bash(command, _str(args.workdir))
        if file_ops:
            # The command line and its exit code stay on each event: `cat missing.txt` that
            # exits 1 is still told apart from a read that worked.
            shared = dict(common, command=command, exit_code=exit_code, interrupted=interrupted)
            return [_file_op_event(shared, op) for op in file_ops]
    return [Command(**common, command=command, exit_code=exit_code, interrupted=interrupted)]


def _exit_code(part: Part) -> int | None:
    state = part.state
    if state is not None and state.metadata is not None:
        code = state.metadata.exit
        if isinstance(code, int) and not isinstance(code, bool) and -INT64 <= code <= INT64:
            return code
    return None


# What OpenCode's bash appends to the output (in <shell_metadata>) when it killed the
# command, and sets ``metadata.exit`` to null.
_TIMEOUT_NOTE = b"shell tool terminated command after exceeding timeout"
_ABORT_NOTE = b"User aborted the command"


def _interrupted(part: Part) -> str | None:
    """ "timeout" or "abort" for a bash call OpenCode killed (``metadata.exit: null``)."""
    state = part.state
    if state is None or state.metadata is None or state.metadata.exit is not None:
        return None  # an exit code, or no metadata at all (a call that never ran)
    output = bytes(state.output)
    if _TIMEOUT_NOTE in output:
        return "timeout"
    if _ABORT_NOTE in output:
        return "abort"
    return None


def _file_op_event(common: dict[str, Any], op: Any) -> Event:
    if op.kind == "read":
        return Read(**common, path=op.path)
    if op.kind == "search":
        return Search(**common, pattern=op.pattern, path=op.path)
    return Write(**common, path=op.path, op=op.op, to=op.to)


def _background_process(
    common: dict[str, Any], args: BashInput, part: Part, directory: str | None
) -> list[Event]:
    command = _str(args.command)
    return [Command(**common, command=command)] if command else []


_TASK_ID = re.compile(r'<task\s+id="([^"]+)"')


def spawned_session(part: Part) -> str | None:
    """The child session a ``task``/``agent_manager`` call ran, when it can be told."""
    if not isinstance(part.tool, str) or part.tool.lower() not in ORCHESTRATION_TOOLS:
        return None
    state = part.state
    if state is None or not state.input:
        return None
    try:
        args = _INPUT_DECODERS[TaskInput].decode(state.input)
    except (msgspec.DecodeError, RecursionError):
        args = TaskInput()
    return _child_session(args, part)


_TEXT = msgspec.json.Decoder(str)


def _child_session(args: TaskInput, part: Part) -> str | None:
    state = part.state
    if state is not None:
        if state.metadata is not None and _str(state.metadata.sessionId):
            return state.metadata.sessionId
        if state.output:
            # Only task outputs are ever decoded; every other tool's output stays bytes.
            try:
                output = _TEXT.decode(state.output)
            except (msgspec.DecodeError, RecursionError):  # not JSON, or not a string
                output = None
            match = _TASK_ID.search(output[:512]) if isinstance(output, str) else None
            if match:
                return match.group(1)
    return _str(args.task_id) or _str(args.session_id) or _str(args.sessionId)


def _orchestration(
    common: dict[str, Any], args: TaskInput, part: Part, directory: str | None
) -> list[Event] | None:
    agent = _str(args.subagent_type) or _str(args.agent)
    child = _child_session(args, part)
    if agent is None and child is None:
        return None
    # What OpenCode did (metadata, once the subagent started) over what the model asked for
    # (the input: a call that failed before, or an input OpenCode ignored without the flag).
    state = part.state
    metadata = state.metadata if state is not None else None
    if metadata is not None and _str(metadata.sessionId):
        background = metadata.background is True
    else:
        background = args.background is True
    return [
        Orchestration(
            **common,
            agent=agent,
            child_session_id=child,
            description=_str(args.description),
            background=True if background else None,
        )
    ]


def _skill(
    common: dict[str, Any], args: SkillInput, part: Part, directory: str | None
) -> list[Event]:
    return [Skill(**common, name=_str(args.name))]


# lsp operations that look up the symbol at a position of a file (OpenCode 1.18.33's list).
LSP_SYMBOL_OPERATIONS = frozenset(
    {
        "goToDefinition",
        "findReferences",
        "hover",
        "goToImplementation",
        "prepareCallHierarchy",
        "incomingCalls",
        "outgoingCalls",
    }
)


def _position(value: Any) -> int | None:
    return value if type(value) is int else None


def _lsp(
    common: dict[str, Any], args: LspInput, part: Part, directory: str | None
) -> list[Event] | None:
    """Seed 000's "a query or symbol", as OpenCode's lsp tool takes them: a
    ``workspaceSymbol`` query (its ``query``, "" asking for every symbol), or the symbol at
    ``filePath:line:character`` (1-based) for the position operations. ``documentSymbol``
    (a file's outline) names neither: unknown."""
    operation = _str(args.operation)
    path = _str(args.filePath)
    if operation == "workspaceSymbol":
        query = args.query
        return [
            Search(**common, pattern=query if isinstance(query, str) else "", operation=operation)
        ]
    line, character = _position(args.line), _position(args.character)
    if operation in LSP_SYMBOL_OPERATIONS and path and line is not None and character is not None:
        position = f"{line}:{character}"
        return [Search(**common, path=path, operation=operation, position=position)]
    return None


# ------------------------------------------------------------------ MCP tool names
# The naming rule lives in ``mcpnames`` (the reports use it without the mapping).


# ------------------------------------------------------------- tools left unknown
# Seed 000 maps every tool it does not name to ``unknown``; these keep that kind and carry,
# beside ``raw``, the fields a user filters them by.


class QuestionToolInput(Struct):
    questions: Any = None


class FetchInput(Struct):
    url: Any = None


class QueryInput(Struct):
    query: Any = None


def _fetch_fields(args: FetchInput, part: Part) -> dict[str, Any]:
    return {"url": _str(args.url)}


def _query_fields(args: QueryInput, part: Part) -> dict[str, Any]:
    return {"query": _str(args.query)}


def question_texts(questions: Any) -> list[str] | None:
    """The texts of OpenCode's ``questions: [{question, header, options, …}]``, or None
    when it is not of that shape."""
    if type(questions) is not list:
        return None
    texts = [q.get("question") if type(q) is dict else None for q in questions]
    return texts if all(type(t) is str for t in texts) else None  # type: ignore[return-value]


def question_answers(answers: Any) -> list[list[str]] | None:
    """``[[label, …], …]`` (one list per question), or None when of another shape."""
    if type(answers) is list and all(
        type(a) is list and all(type(x) is str for x in a) for a in answers
    ):
        return answers
    return None


def _question_fields(args: QuestionToolInput, part: Part) -> dict[str, Any]:
    state = part.state
    answers = state.metadata.answers if state and state.metadata else None
    return {"questions": question_texts(args.questions), "answers": question_answers(answers)}


# Tool name (lower case) → (input view, the unknown event's extra fields).
UNKNOWN_TOOL_FIELDS: dict[str, tuple[type[Struct], Callable[[Any, Part], dict[str, Any]]]] = {
    "question": (QuestionToolInput, _question_fields),
    "webfetch": (FetchInput, _fetch_fields),
    "websearch": (QueryInput, _query_fields),
    "codesearch": (QueryInput, _query_fields),  # before 1.18: {query, tokensNum}
}


class _ScriptCall(Struct):
    tool: Any = None  # "<sanitized server>.<tool>"
    status: Any = None  # running, completed, error


_SCRIPT_CALLS = msgspec.json.Decoder(list[_ScriptCall])


def script_calls(part: Part) -> list[Unknown]:
    """The tool calls code mode's ``execute`` script made (``metadata.toolCalls``), each an
    unknown event as a direct call of the tool is: named by OpenCode's key for it
    (``<server>_<tool>``, its path with the first ``.`` a ``_``), its call id OpenCode's
    ``<call id>/<n>``, ``via: "execute"``. Only MCP tools are offered to a script."""
    state = part.state
    if state is None or state.metadata is None or not state.metadata.toolCalls:
        return []
    try:
        calls = _SCRIPT_CALLS.decode(state.metadata.toolCalls)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return []
    parent = _str(part.callID)
    found = []
    for n, call in enumerate(calls, 1):
        if type(call.tool) is not str or not call.tool:
            continue
        status = _str(call.status)
        found.append(
            Unknown(
                tool=call.tool.replace(".", "_", 1),
                call_id=f"{parent}/{n}" if parent else None,
                status=status,
                success=success_of(status),
                via="execute",
            )
        )
    return found


def _unknown_call(common: dict[str, Any], key: str, part: Part) -> Unknown:
    entry = UNKNOWN_TOOL_FIELDS.get(key)
    state = part.state
    if entry is None or state is None or not state.input:
        return Unknown(**common)
    view, fields = entry
    try:
        args = _UNKNOWN_DECODERS[view].decode(state.input)
    except (msgspec.DecodeError, RecursionError):
        return Unknown(**common)
    return Unknown(**common, **fields(args, part))


_UNKNOWN_DECODERS = {view: msgspec.json.Decoder(view) for view, _ in UNKNOWN_TOOL_FIELDS.values()}


# Tool name (lower case) → (input view, rule). Names not here and not consumed → unknown.
TOOL_RULES: dict[str, tuple[type[Struct], ToolRule]] = {
    "read": (PathInput, _read),
    "write": (PathInput, _file_change("write")),
    "edit": (PathInput, _file_change("edit")),
    "apply_patch": (PatchInput, _apply_patch),
    "grep": (SearchInput, _search),
    "glob": (SearchInput, _search),
    "bash": (BashInput, _bash),
    "background_process": (BashInput, _background_process),
    **{name: (TaskInput, _orchestration) for name in ORCHESTRATION_TOOLS},
    "skill": (SkillInput, _skill),
    "lsp": (LspInput, _lsp),
}

_INPUT_DECODERS = {view: msgspec.json.Decoder(view) for view, _ in TOOL_RULES.values()}


def tool_common(part: Part) -> dict[str, Any]:
    """The fields every event of one tool call shares (``tool`` must already be a str).
    Once per tool call of every source: ``_str``, ``success_of`` and ``number`` are
    written out."""
    state = part.state
    call_id = part.callID
    if state is None:
        return {
            "tool": part.tool,
            "call_id": call_id if isinstance(call_id, str) else None,
            "status": None,
            "success": None,
        }
    status = state.status
    if isinstance(status, str):
        success = STATUS_SUCCESS.get(status.lower())
    else:
        status = success = None
    title = state.title
    common: dict[str, Any] = {
        "tool": part.tool,
        "call_id": call_id if isinstance(call_id, str) else None,
        "status": status,
        "success": success,
        "title": title if isinstance(title, str) else None,
    }
    if success is False:
        error = state.error
        common["error"] = error if isinstance(error, str) else None
    times = state.time
    if times is not None:
        start, end = times.start, times.end
        kind_start, kind_end = type(start), type(end)
        if (kind_start is int or kind_start is float) and (kind_end is int or kind_end is float):
            try:
                took = end - start
                if math.isfinite(took):  # two huge times can differ by inf
                    common["duration_ms"] = took
            except OverflowError:  # an int past any float, met by a float or by isfinite
                pass
    return common


def tool_events(part: Part, directory: str | None = None) -> list[Event]:
    """The events one terminal tool call maps to: [] when consumed, else ≥ 1 event.
    ``directory`` is the session's, when the source names it (a patch's paths)."""
    name = part.tool
    if not isinstance(name, str):
        return [Unknown(type=_str(part.type) or "tool")]
    common = tool_common(part)
    state = part.state
    if state is None:
        return [Unknown(**common)]  # a call with no state cannot be read, whatever the tool
    key = name.lower()
    if key in CONSUMED_TOOLS:
        return []
    entry = TOOL_RULES.get(key)
    if entry is None:
        if key == "execute":  # code mode: the call, then the calls its script made
            return [_unknown_call(common, key, part), *script_calls(part)]
        return [_unknown_call(common, key, part)]
    if not state.input:
        return [Unknown(**common)]
    view, rule = entry
    try:
        args = _INPUT_DECODERS[view].decode(state.input)
    except (msgspec.DecodeError, RecursionError):
        return [Unknown(**common)]
    events = rule(common, args, part, directory)
    return events if events is not None else [Unknown(**common)]
