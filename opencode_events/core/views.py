"""Read-side views of OpenCode's JSON: small msgspec Structs naming only the fields we map.

msgspec skips every field a view does not name without building it, so a 50 KB tool
output costs a scan, not an allocation. Bulky values we may need later (a tool's
``input`` and ``output``) are kept as ``msgspec.Raw`` slices and decoded on demand with
the per-tool input views in ``mapping``. Scalar fields are typed ``Any`` on purpose: a
wrong type there is OpenCode's quirk to report, not a reason to reject the record, and
the mapping checks types where it uses them. A nested value of the wrong shape (a part
that is a string) fails validation, and the reader turns that record into ``unknown``.

One ``Decoder`` per view type is created at import and reused for every line.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct

__all__ = [
    "Times",
    "ToolMetadata",
    "ToolState",
    "CacheTokens",
    "Tokens",
    "Part",
    "MessagePath",
    "MessageInfo",
    "MessageHead",
    "StreamRecord",
    "NO_RAW",
    "STREAM_RECORD_DECODER",
    "PART_DECODER",
    "MESSAGE_DECODER",
    "MESSAGE_HEAD_DECODER",
    "ANY_DECODER",
    "json_type_name",
    "written_at",
]

NO_RAW = Raw()


class Times(Struct, gc=False):
    start: Any = None
    end: Any = None
    created: Any = None
    completed: Any = None


class ToolMetadata(Struct, gc=False):
    exit: Any = UNSET  # bash's exit code; null (not missing) when bash killed the command
    sessionId: Any = None  # task's child session  # noqa: N815 - OpenCode's spelling
    files: Raw = NO_RAW  # apply_patch: the files it changed, [{filePath, type, movePath?}]
    answers: Any = None  # question: the labels the user chose, one list per question
    background: Any = None  # task: launched in the background
    toolCalls: Raw = NO_RAW  # execute (code mode): the calls its script made  # noqa: N815


class ToolState(Struct, gc=False):
    status: Any = None
    input: Raw = NO_RAW
    output: Raw = NO_RAW
    title: Any = None
    error: Any = None
    metadata: ToolMetadata | None = None
    time: Times | None = None


class CacheTokens(Struct, gc=False):
    read: Any = None
    write: Any = None


class Tokens(Struct, gc=False):
    total: Any = None
    input: Any = None
    output: Any = None
    reasoning: Any = None
    cache: CacheTokens | None = None


class Part(Struct, gc=False):
    """A message part (``part`` of a stream record, a store row's ``data``, an SSE payload)."""

    type: Any = None
    id: Any = None
    sessionID: Any = None  # noqa: N815
    messageID: Any = None  # noqa: N815
    text: Any = None
    synthetic: Any = None  # text added by OpenCode, not typed by the user
    time: Times | None = None
    # tool
    tool: Any = None
    callID: Any = None  # noqa: N815
    state: ToolState | None = None
    # step-finish
    reason: Any = None
    cost: Any = None
    tokens: Tokens | None = None
    # compaction
    auto: Any = None
    overflow: Any = None
    # patch (the files a step changed)
    hash: Any = None
    files: Any = None
    # retry
    attempt: Any = None
    error: Any = None
    # file (an attachment): its URL stays bytes, a data: URL being the file's content
    mime: Any = None
    filename: Any = None
    url: Raw = NO_RAW
    source: Any = None
    # agent (an @mention): name; subtask: agent, description, command, prompt, model
    name: Any = None
    agent: Any = None
    description: Any = None
    command: Any = None
    prompt: Any = None
    model: Any = None


class MessagePath(Struct, gc=False):
    cwd: Any = None  # the session's directory: relative tool paths are resolved against it
    root: Any = None


class MessageInfo(Struct, gc=False):
    """A message (a store row's ``data``, an export's ``info``, ``message.updated``)."""

    id: Any = None
    sessionID: Any = None  # noqa: N815
    role: Any = None
    parentID: Any = None  # noqa: N815
    time: Times | None = None
    error: Any = None
    cost: Any = None
    tokens: Tokens | None = None
    finish: Any = None
    modelID: Any = None  # noqa: N815
    providerID: Any = None  # noqa: N815
    mode: Any = None
    agent: Any = None
    summary: Any = None
    path: MessagePath | None = None


class MessageHead(Struct, gc=False):
    """A stored message as the import reads it: its role, error and model labels. It names the same
    nested views as ``MessageInfo`` (``time``, ``tokens``), so it accepts and rejects exactly
    the rows ``MessageInfo`` does, but builds none of the other fields."""

    role: Any = None
    time: Times | None = None
    error: Any = None
    tokens: Tokens | None = None
    modelID: Any = None  # noqa: N815
    providerID: Any = None  # noqa: N815
    agent: Any = None
    summary: Any = None
    path: MessagePath | None = None


class StreamRecord(Struct, gc=False):
    """One line of ``opencode run --format json``."""

    type: Any = None
    timestamp: Any = None
    sessionID: Any = None  # noqa: N815
    session_id: Any = None
    sessionId: Any = None  # noqa: N815
    part: Part | None = None
    error: Any = None
    # the closing ``done`` record of releases after 1.18.33: why the run ended, and the
    # permissions it rejected on the user's behalf
    reason: Any = None
    rejected: Any = None


STREAM_RECORD_DECODER = msgspec.json.Decoder(StreamRecord)
ANY_DECODER = msgspec.json.Decoder()  # for telling what a rejected line or row holds

_JSON_TYPE_NAMES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def number(value: Any) -> int | float | None:
    """``value`` when it is a JSON number, else None (exact types: a bool is no number)."""
    kind = type(value)
    return value if kind is int or kind is float else None


def later(first: Any, second: Any) -> Any:
    """The later of two times either of which may be missing or no number: a number wins
    over none, and of two numbers the larger; ``first`` when neither is one."""
    if number(second) is None:
        return first
    return second if number(first) is None or second > first else first


def written_at(kind: Any, start: Any, tool_start: Any, completed: Any) -> int | float | None:
    """When a part was written, as near as its own data tells, for a part that has no row
    time of its own (an export document, the legacy files, a session moved or copied into
    the database): a step-finish when its message was completed, else its ``time.start``
    (``start``), a tool's ``state.time.start`` (``tool_start``); None when it tells none.

    >>> written_at("text", 10, None, 99), written_at("step-finish", None, None, 99)
    (10, 99)
    """
    if kind == "step-finish" and number(completed) is not None:
        return completed
    if number(start) is not None:
        return start
    return number(tool_start)


def json_type_name(value: Any) -> str:
    """How a warning names a decoded JSON value that is not an object."""
    return _JSON_TYPE_NAMES.get(type(value), "a value")


PART_DECODER = msgspec.json.Decoder(Part)
MESSAGE_DECODER = msgspec.json.Decoder(MessageInfo)
MESSAGE_HEAD_DECODER = msgspec.json.Decoder(MessageHead)


# A lone UTF-16 surrogate written as a \u escape: JSON.stringify writes one for a string cut
# in the middle of a surrogate pair (a tool output OpenCode truncated inside an emoji). It
# is valid JSON text but names no character, and strict decoders (msgspec's too) refuse the
# record. Escapes are read left to right, as a decoder reads them, so `\\ud800` (an escaped
# backslash, then text) is no escape at all.
_ESCAPE = re.compile(rb"\\(?:u([dD][89a-fA-F][0-9a-fA-F]{2})|.)", re.DOTALL)
_REPLACEMENT = b"\\ufffd"  # as long as the escape it replaces


def repair_lone_surrogates(buffer: bytearray, start: int = 0) -> bool:
    """Replace, in place from ``start``, each lone surrogate escape with ``\\ufffd`` (the
    replacement character, as a lenient decoder reads it); whether there was one. Lengths
    are kept, so offsets into the buffer hold."""
    found = False
    high = -1  # where a high surrogate escape waits for its low half
    for match in _ESCAPE.finditer(buffer, start):
        code = int(match[1], 16) if match[1] else 0
        low = 0xDC00 <= code <= 0xDFFF
        if high >= 0:
            if low and match.start() == high + 6:  # the pair is whole
                high = -1
                continue
            buffer[high : high + 6] = _REPLACEMENT
            found, high = True, -1
        if 0xD800 <= code <= 0xDBFF:
            high = match.start()
        elif low:
            buffer[match.start() : match.end()] = _REPLACEMENT
            found = True
    if high >= 0:
        buffer[high : high + 6] = _REPLACEMENT
        found = True
    return found


def without_lone_surrogates(data: bytes | Raw) -> bytes | None:
    """``data`` with each lone surrogate escape replaced by ``\\ufffd``, or None when it
    holds none. Readers try this only after a record failed to decode."""
    buffer = bytearray(data)
    if b"\\u" not in buffer:
        return None
    return bytes(buffer) if repair_lone_surrogates(buffer) else None


def decode_repairing(decoder: Any, data: bytes | Raw) -> tuple[Any, bytes | Raw]:
    """``(decoder.decode(data), data)``; a record refused only for a lone surrogate escape
    is decoded with it replaced, and the repaired bytes are returned to keep as ``raw``
    (output must stay JSON any strict reader takes). Raises as ``decode`` does."""
    try:
        return decoder.decode(data), data
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError:
        fixed = without_lone_surrogates(data)
        if fixed is None:
            raise
    return decoder.decode(fixed), fixed


def decode_leniently(decoder: Any, data: bytes | Raw) -> Any:
    """``data`` decoded by ``decoder`` as every report reads a record a damaged store or a
    hand edit may have left, so that it still counts wherever it is read: a lone surrogate
    escape repaired (as the import reads it), bytes that are not UTF-8 read as U+FFFD (as
    a database's text is), and a ``time`` of another shape read as none. Each is tried
    only after the plain decode failed. Raises ``msgspec.DecodeError`` (or
    ``RecursionError``) for what holds no JSON object the view takes.

        info = decode_leniently(MESSAGE_DECODER, b'{"role":"user","time":"yesterday"}')
    """
    try:
        return decode_repairing(decoder, data)[0]
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        raw = bytes(data)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:  # then valid UTF-8: this is tried once
            return decode_leniently(decoder, raw.decode("utf-8", "replace").encode())
        raise
    whole = decode_repairing(ANY_DECODER, data)[0]
    if not isinstance(whole, dict) or "time" not in whole:
        raise msgspec.ValidationError("not a record of this shape")
    del whole["time"]
    return decoder.decode(msgspec.json.encode(whole))


def decode_repaired(decoder: Any, data: bytes | Raw) -> Any:
    """For a reader's ``except`` branch, where a row failed to decode: the row decoded with
    its lone surrogate escapes replaced (``decode_repairing`` without a first try). Raises
    ``DecodeError`` when it holds none or still does not decode."""
    fixed = without_lone_surrogates(data)
    if fixed is None:
        raise msgspec.DecodeError("not JSON")
    return decoder.decode(fixed)


# ----------------------------------------------------------------------
# server frames (GET /event, /global/event; the store's event log) (sources/sse.py)


class FramePayload(Struct):
    id: Any = None
    type: Any = None
    properties: Raw = NO_RAW


class ServerFrame(Struct):
    """``/event`` frame, or the ``/global/event`` wrapper when ``payload`` is set."""

    id: Any = None
    type: Any = None
    properties: Raw = NO_RAW
    payload: FramePayload | None = None


class SessionOnlyProps(Struct):
    sessionID: Any = None  # noqa: N815


class PartUpdatedProps(Struct):
    sessionID: Any = None  # noqa: N815
    part: Part | None = None
    time: Any = None


class MessageUpdatedProps(Struct):
    sessionID: Any = None  # noqa: N815
    info: MessageInfo | None = None


class PartDeltaProps(Struct):
    sessionID: Any = None  # noqa: N815
    messageID: Any = None  # noqa: N815
    partID: Any = None  # noqa: N815
    field: Any = None
    delta: Any = None


class SessionErrorProps(Struct):
    sessionID: Any = None  # noqa: N815
    error: Any = None


class PermissionAskedProps(Struct):
    id: Any = None
    sessionID: Any = None  # noqa: N815
    permission: Any = None
    patterns: Any = None


class PermissionRepliedProps(Struct):
    sessionID: Any = None  # noqa: N815
    requestID: Any = None  # noqa: N815
    reply: Any = None


class QuestionAskedProps(Struct):
    # question.asked: {id, sessionID, questions: [{question, header, options, …}], tool?}
    id: Any = None
    sessionID: Any = None  # noqa: N815
    questions: Any = None  # read as plain values: a rare event, any shape is kept
    tool: Any = None  # {messageID, callID} of the tool call that asked


class QuestionRepliedProps(Struct):
    # question.replied {sessionID, requestID, answers: [[label]]}; question.rejected has
    # no answers
    sessionID: Any = None  # noqa: N815
    requestID: Any = None  # noqa: N815
    answers: Any = None


class RetryAction(Struct):
    reason: Any = None


class SessionStatusValue(Struct):
    type: Any = None
    # retry: {type: "retry", attempt, message, action?: {reason, …}, next}
    attempt: Any = None
    message: Any = None
    next: Any = None
    action: RetryAction | None = None


class SessionStatusProps(Struct):
    sessionID: Any = None  # noqa: N815
    status: SessionStatusValue | None = None


class SessionLink(Struct):
    id: Any = None
    parentID: Any = None  # noqa: N815
    directory: Any = None  # where the session works (its MCP servers are configured there)
    cost: Any = None  # the session's cost so far (its own steps), as OpenCode sums it
    time: Any = None  # {created, updated}: a fork's copied history is older than created


class SessionChangedProps(Struct):
    sessionID: Any = None  # noqa: N815
    info: SessionLink | None = None


# ----------------------------------------------------------------------
# messages, as the usage report reads them (reports/usage.py)


class MessageTimes(Struct):
    created: Any = None
    completed: Any = None


class UsageMessage(Struct):
    role: Any = None
    parentID: Any = None  # noqa: N815
    time: MessageTimes | None = None
    cost: Any = None
    tokens: Tokens | None = None
    finish: Any = None
    modelID: Any = None  # noqa: N815
    providerID: Any = None  # noqa: N815
    agent: Any = None
    mode: Any = None


class MessageFigures(Struct):
    """Only what a by-day or by-session report reads of a message (its time comes from
    the row's ``time_created`` column)."""

    role: Any = None
    cost: Any = None
    tokens: Tokens | None = None


# ----------------------------------------------------------------------
# messages and parts, as the sessions summary reads them (reports/sessions.py)


class CompletedTime(Struct):
    completed: Any = None


class TurnMessage(Struct):
    role: Any = None
    time: CompletedTime | None = None


class ToolStatus(Struct):
    status: Any = None


class ToolPartHead(Struct):
    type: Any = None
    tool: Any = None
    state: ToolStatus | None = None


class GroupedTime(Struct, frozen=True):
    completed: Any = None


NO_GROUPED_TIME = GroupedTime()


class GroupedMessage(Struct):
    """A message as the grouped read decodes it: a ``time`` that is there must be an object
    (``null`` sends the session to the row-by-row read), so ``time.completed`` can be read
    without a test."""

    role: Any = None
    time: GroupedTime = NO_GROUPED_TIME


# ----------------------------------------------------------------------
# messages and parts, as the context ledger reads them (reports/context.py)


class PrunedTime(Struct):
    compacted: Any = None


class LedgerToolState(Struct):
    status: Any = None
    input: Raw = Raw()
    output: Any = None
    error: Any = None
    time: PrunedTime | None = None


class LedgerPart(Struct):
    type: Any = None
    text: Any = None
    ignored: Any = None
    tool: Any = None
    state: LedgerToolState | None = None
    prompt: Any = None
    name: Any = None
    source: Any = None
    tail_start_id: Any = None


class LedgerMessageView(Struct):
    id: Any = None
    role: Any = None
    parentID: Any = None  # noqa: N815
    summary: Any = None
    mode: Any = None
    error: Any = None
    cost: Any = None
    tokens: Tokens | None = None
    modelID: Any = None  # noqa: N815
    providerID: Any = None  # noqa: N815


# ----------------------------------------------------------------------
# sessions (the legacy layout's session files) (store/legacy.py)


class SessionTimes(Struct):
    created: Any = None
    updated: Any = None
    archived: Any = None


class LegacySessionInfo(Struct):
    id: Any = None
    parentID: Any = None  # noqa: N815
    title: Any = None
    directory: Any = None
    version: Any = None
    agent: Any = None
    time: SessionTimes | None = None
    revert: Raw = NO_RAW  # {messageID, partID?, snapshot?, diff?}: an undo not yet cleaned up
