"""Reader for OpenCode's server event stream (``GET /event``, ``GET /global/event``).

The text is parsed by the WHATWG server-sent-events rules: ``data:`` lines are joined with
``\\n`` into one frame's data, ``event:``/``id:``/``retry:`` are fields, lines starting with
``:`` are comments, a blank line dispatches the frame; LF, CRLF and lone CR all end lines
and a leading UTF-8 BOM is skipped. ``finish`` dispatches a last frame that lacks its
closing blank line.

A frame's data is ``{id, type, properties}`` (``/event``) or the ``/global/event`` wrapper
``{directory?, project?, workspace?, payload: {id, type, properties}}``. The global
stream sends every durable event twice, the second time as ``payload.type == "sync"``;
those copies are consumed. Mapping (docs/server-events.md has the table):

* ``message.part.updated``: a tool part once, when the call has ended (a status other
  than pending or running: ``mapping.call_ended``); a text or reasoning part once, when
  complete (``time.end``), or a user message's text part as ``prompt``; a ``step-finish``
  part → ``usage``, as every other source reads it (a reply with no step, such as a user
  shell command's or a context-overflow attempt's, costs nothing and gives none); any other
  part type goes to the normalizer (compaction, patch, unknown). Each part is read with its
  message's labels (model, agent, directory), learnt from ``message.updated``.
* ``message.updated``: flushes the text parts of a completed message that never ended.
* ``session.error`` → error; ``permission.asked``/``permission.replied`` → permission;
  ``question.asked``/``question.replied``/``question.rejected`` → question;
  ``session.status`` retry → retry (busy and idle drive ``idle``);
  ``message.part.delta`` → delta only with ``deltas=True``.
* The types in ``CONSUMED`` (and the experimental ``session.next.*`` family) give no event;
  any other type becomes ``unknown`` with the frame in ``raw``; data that is not a JSON
  object becomes a ``warning``.

Every event carries the line of its frame's first ``data:`` line. The reader keeps the
ids of parts and messages it already emitted (bounded), so repeated updates, the global
stream's copies and a reconnect never double an event, even when sessions interleave.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import Raw

from ..core.mapping import call_ended
from ..core.normalizer import Normalizer, Provenance
from ..core.views import (
    ANY_DECODER,
    MESSAGE_DECODER,
    PART_DECODER,
    MessageInfo,
    MessageUpdatedProps,
    Part,
    PartDeltaProps,
    PartUpdatedProps,
    PermissionAskedProps,
    PermissionRepliedProps,
    QuestionAskedProps,
    QuestionRepliedProps,
    ServerFrame,
    SessionChangedProps,
    SessionErrorProps,
    SessionOnlyProps,
    SessionStatusProps,
    decode_repairing,
    number,
)
from ..events import Event
from ..paths import MAX_LINE_VARIABLE, max_line_setting
from .stream import BOM
from .transcript import is_copy

__all__ = ["SseReader", "CONSUMED"]

# Server event types that carry nothing the normalized stream reports: connection
# bookkeeping, session/file/project state, UI and plugin chatter. Documented in
# docs/server-events.md; any type not here and not mapped becomes ``unknown``.
CONSUMED = frozenset(
    {
        # connection and server
        "server.connected",
        "server.heartbeat",
        "server.instance.disposed",
        "global.disposed",
        "installation.updated",
        "installation.update-available",
        # session state (idle/status drive ``SseReader.idle``)
        "session.created",
        "session.updated",
        "session.deleted",
        "session.status",
        "session.idle",
        "session.compacted",
        "session.diff",
        "message.removed",
        "message.part.removed",
        "message.part.delta",  # unless deltas=True
        "todo.updated",  # the todowrite tool is consumed too
        "command.executed",
        # files, project, tooling
        "file.edited",
        "file.watcher.updated",
        "project.updated",
        "project.directories.updated",
        "vcs.branch.updated",
        "lsp.updated",
        "lsp.client.diagnostics",
        "mcp.tools.changed",
        "pty.created",
        "pty.updated",
        "pty.exited",
        "pty.deleted",
        "workspace.ready",
        "workspace.status",
        "worktree.ready",
        # UI and plugins
        "tui.prompt.append",
        "tui.command.execute",
        "tui.toast.show",
        "tui.session.select",
        "plugin.added",
        "catalog.updated",
        "reference.updated",
        "integration.updated",
        "integration.connection.updated",
        "models-dev.refreshed",
    }
)
_CONSUMED_PREFIXES = ("session.next.",)  # the v2 event family repeats message.* events

_MEMORY = 1 << 16  # ids remembered for dedupe and roles; the oldest are forgotten first


# ------------------------------------------------------------------------- views


_FRAME = msgspec.json.Decoder(ServerFrame)
_SESSION_ONLY = msgspec.json.Decoder(SessionOnlyProps)
_PART_UPDATED = msgspec.json.Decoder(PartUpdatedProps)
_MESSAGE_UPDATED = msgspec.json.Decoder(MessageUpdatedProps)
_PART_DELTA = msgspec.json.Decoder(PartDeltaProps)
_SESSION_ERROR = msgspec.json.Decoder(SessionErrorProps)
_PERMISSION_ASKED = msgspec.json.Decoder(PermissionAskedProps)
_PERMISSION_REPLIED = msgspec.json.Decoder(PermissionRepliedProps)
_QUESTION_ASKED = msgspec.json.Decoder(QuestionAskedProps)
_QUESTION_REPLIED = msgspec.json.Decoder(QuestionRepliedProps)
_SESSION_STATUS = msgspec.json.Decoder(SessionStatusProps)
_SESSION_CHANGED = msgspec.json.Decoder(SessionChangedProps)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class _Memory:
    """A bounded set/map: insertion order, the oldest entries dropped past ``_MEMORY``."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> Any:
        return self._data.get(key)

    def put(self, key: str, value: Any = True) -> None:
        data = self._data
        data[key] = value
        if len(data) > _MEMORY:
            for old in list(data)[: _MEMORY // 4]:
                del data[old]


# ------------------------------------------------------------------------- reader


class SseReader:
    """Maps the lines of a server event stream through a shared ``Normalizer``.

    ``session`` follows one session (and the child sessions it starts), given by its id or
    the start of it (the first session seen whose id starts so is followed): frames of other
    sessions are consumed. ``idle`` turns true when the followed session (without
    ``session``: the first session seen at work, or the top-level session of that one when
    it is a subagent) reports ``session.idle`` or an idle ``session.status`` after it was
    seen at work; ``retry_ms`` and ``last_event_id`` hold the SSE fields for a
    reconnecting client.
    """

    def __init__(
        self,
        normalizer: Normalizer,
        *,
        source: str | None = None,
        deltas: bool = False,
        session: str | None = None,
        errors_from_messages: bool = False,
        open_calls_at_end: bool = False,
        on_message: Callable[[str | None, MessageInfo], None] | None = None,
        max_frame: int | None = None,
        on_session: Callable[[str, str | None, Any], None] | None = None,
    ) -> None:
        self.normalizer = normalizer
        # A frame's data lines are held until its blank line: at most this many bytes.
        self.max_frame = max_line_setting() if max_frame is None else max_frame
        # The store's event log has no ``session.error`` (it is not a durable event): a
        # failed reply's error comes from its message, as ``import`` reads it.
        self.errors_from_messages = errors_from_messages
        # ``finish`` writes a tool call that never ended as it last was (status running:
        # OpenCode was killed), as ``import`` reads the stored part; else it gives none.
        self.open_calls_at_end = open_calls_at_end
        self.on_message = on_message  # sees every message update (the live views' state)
        # sees every session.created/updated: (id, parent id, cost), for spending limits
        self.on_session = on_session
        self.source = source
        self.deltas = deltas
        self.idle = False
        self.retry_ms: int | None = None
        self.last_event_id: str | None = None
        self._followed = session
        self._family: set[str] | None = {session} if session else None
        # Until a session whose id starts with it is seen, ``session`` may be an id prefix.
        self._prefix = session or None
        self._chosen = session is not None  # else the followed session is adopted
        self._parents = _Memory()  # session → parent (session.created/updated), to adopt
        self._followed_at_work = False  # an idle counts only after this
        self._data: list[bytes] = []
        self._data_line = 0
        self._data_size = 0
        self._overlong: bytes | None = None  # the start of a frame over max_frame, not kept
        self._cr_lines = 0  # lines ended by a lone CR so far, inside what the caller called one
        self._done = _Memory()  # part ids and "m:"+message ids already emitted
        self._roles = _Memory()  # message id -> role
        self._pending: dict[str, tuple[Part, Provenance]] = {}  # incomplete text parts
        # Their text since their last update: OpenCode 1.18 sends a reply's text only in
        # ``message.part.delta`` until the part ends, so a reply cut off is written from here.
        self._grown: dict[str, list[str]] = {}
        self._running: dict[str, tuple[Part, Provenance]] = {}  # tool calls not ended yet
        self._messages = _Memory()  # message id -> its latest MessageInfo (labels, cwd)
        # A fork's copied history (``transcript.is_copy``): its events marked ``copied``, as
        # ``import`` marks them, from each session's creation time and each message's.
        self._began = _Memory()  # session id -> when it was created
        self._copies = _Memory()  # ids of messages older than their session
        self._questions = _Memory()  # question id -> (call id, message id) of its tool call
        self._handlers = {
            "message.part.updated": self._part_updated,
            "message.updated": self._message_updated,
            "message.part.delta": self._part_delta,
            "session.error": self._session_error,
            "permission.asked": self._permission_asked,
            "permission.replied": self._permission_replied,
            "question.asked": self._question_asked,
            "question.replied": self._question_replied,
            "question.rejected": self._question_rejected,
            "session.status": self._session_status,
            "session.idle": self._session_idle,
            "session.created": self._session_changed,
            "session.updated": self._session_changed,
        }

    @property
    def session(self) -> str | None:
        """The followed session: the one asked for, else the first seen at work."""
        return self._followed

    # ---------------------------------------------------------------- SSE framing

    def feed(self, line_no: int, line: bytes) -> list[Event]:
        if line.startswith(BOM):  # a file's first line; each file of a `cat` may have one
            line = line[3:]
        if line.endswith(b"\r"):
            line = line[:-1]
        line_no += self._cr_lines
        if b"\r" in line:  # lone CR is a line ending too: each piece is a line of its own
            events: list[Event] = []
            pieces = line.split(b"\r")
            for offset, piece in enumerate(pieces):
                events += self._field(line_no + offset, piece)
            self._cr_lines += len(pieces) - 1
            return events
        return self._field(line_no, line)

    def finish(self) -> list[Event]:
        """Dispatch a last frame that had no closing blank line, then write the text
        parts whose message never completed (an interrupted reply) as they last were."""
        events = self._dispatch()
        pending, self._pending = self._pending, {}
        running, self._running = self._running, {}
        return events + self._left_open(pending, running)

    def finish_session(self, session_id: str) -> list[Event]:
        """One session's parts still open, as they last were (a run gone stale: OpenCode
        killed in it), while the others stay open. A snapshot: the parts stay open and
        unseen, for a session silent that long is not always dead (a command given a timeout
        over the stale limit), and its real end, when it comes, is written too."""

        def mine(held: dict[str, Any]) -> dict[str, Any]:
            return {pid: found for pid, found in held.items() if found[1].session_id == session_id}

        return self._left_open(mine(self._pending), mine(self._running), remember=False)

    def _left_open(
        self, pending: dict[str, Any], running: dict[str, Any], *, remember: bool = True
    ) -> list[Event]:
        events: list[Event] = []
        if remember:
            for part_id, (part, _prov) in pending.items():
                self._with_deltas(part_id, part)
        else:  # a snapshot: the stored part and its deltas stay as they are, for its end
            pending = {
                pid: (self._grown_copy(pid, part), prov) for pid, (part, prov) in pending.items()
            }
        if self.open_calls_at_end:
            pending.update(running)  # a call cut off (OpenCode killed), as it last was
        for part_id, (part, prov) in pending.items():
            if part_id not in self._done:
                message_id = part.messageID
                role = self._roles.get(message_id) if isinstance(message_id, str) else None
                self.normalizer.enter_session(prov.session_id)
                if remember:
                    events += self._emit(part, prov, role=role)
                else:
                    events += self.normalizer.part(part, prov, role=role)
                    self.normalizer.forget_part(part_id)
        return self._marked(events)

    def _grown_copy(self, part_id: str, part: Part) -> Part:
        """``_with_deltas`` on a copy, the deltas kept."""
        grown = self._grown.get(part_id)
        return msgspec.structs.replace(part, text=_grown_text(part, grown)) if grown else part

    def payload(self, data: bytes, number: int) -> list[Event]:
        """One frame's data, already taken out of its SSE text (an SDK's decoded event,
        encoded back as JSON); ``number`` stands for its line."""
        return self._frame(data, number)

    def measure(self, size: int) -> None:
        """``size`` more bytes of a data line already over the limit (``attach`` hands over
        such a line's start, then its length): counted, not kept."""
        if self._overlong is not None:
            self._data_size += size

    def drop_frame(self) -> None:
        """Forget a frame cut off by a lost connection (a live client reconnecting)."""
        self._data, self._data_size, self._overlong = [], 0, None

    def _field(self, line_no: int, line: bytes) -> list[Event]:
        if not line:
            return self._dispatch()
        if line.startswith(b"data:"):
            value = line[5:]
        elif line[:1] == b":":
            return []  # comment
        else:
            name, colon, value = line.partition(b":")
            if not colon:
                name, value = line, b""
            if name == b"data":
                pass
            else:
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"id":
                    if b"\0" not in value:
                        self.last_event_id = value.decode("utf-8", "replace")
                elif name == b"retry" and value.isdigit():
                    self.retry_ms = int(value)
                return []  # "event" and unknown field names: nothing to do
        if value[:1] == b" ":
            value = value[1:]
        if not self._data and self._overlong is None:
            self._data_line = line_no
        self._data_size += len(value) + 1
        if self._overlong is not None:
            return []  # measured, not kept
        self._data.append(value)
        if self._data_size > self.max_frame:
            self._overlong = self._data[0][:1024]
            self._data = []
        return []

    def _dispatch(self) -> list[Event]:
        if self._overlong is not None:
            return self._overlong_frame()
        if not self._data:
            return []
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data, self._data_size = [], 0
        if not data:  # `data:` alone: an empty buffer is not dispatched (WHATWG; keep-alives)
            return []
        return self._frame(data, self._data_line)

    def _overlong_frame(self) -> list[Event]:
        start, size = self._overlong or b"", self._data_size - 1
        self._overlong, self._data_size = None, 0
        self.normalizer.count_record()
        message = (
            f"server event of {size:,} bytes is longer than the limit of {self.max_frame:,} "
            f"(${MAX_LINE_VARIABLE}): skipped"
        )
        prov = Provenance(line=self._data_line, source=self.source)
        return self.normalizer.warning(message, start.decode("utf-8", "replace"), prov)

    # ---------------------------------------------------------------- frames

    def _frame(self, data: bytes, line_no: int) -> list[Event]:
        norm = self.normalizer
        norm.count_record()
        try:
            frame, data = decode_repairing(_FRAME, data)
        except msgspec.ValidationError:
            prov = Provenance(line=line_no, source=self.source, raw=Raw(data))
            return self.normalizer.rejected(data, prov, describe=_frame_type)
        except (msgspec.DecodeError, RecursionError) as exc:
            prov = Provenance(line=line_no, source=self.source, raw=Raw(data))
            return self.normalizer.not_json(data, exc, prov)
        prov = Provenance(line=line_no, source=self.source, raw=Raw(data))
        type_, props = frame.type, frame.properties
        if frame.payload is not None:
            type_, props = frame.payload.type, frame.payload.properties
            if type_ == "sync":
                return []  # the global stream's second copy of a durable event
        if not isinstance(type_, str):
            return norm.unknown(prov)
        return self._event(type_, props, prov)

    def event(self, type_: str, props: bytes, prov: Provenance) -> list[Event]:
        """One event already out of its frame: ``type_`` (``message.part.updated``) and
        its ``properties`` as JSON bytes, as the store's ``event`` log holds them."""
        self.normalizer.count_record()
        return self._event(type_, props, prov)

    def learn_session_start(self, session_id: str, created: Any) -> None:
        """When ``session_id`` was created (its row's ``time_created``, where its
        ``session.created`` may be pruned): its messages older than that are a fork's copy."""
        if type(created) is int:
            self._began.put(session_id, created)

    def _learn_copy(self, info: MessageInfo, session: Any, message_id: str) -> None:
        created = info.time.created if info.time is not None else None
        if isinstance(session, str) and is_copy(created, self._began.get(session)):
            self._copies.put(message_id)

    def _marked(self, events: list[Event]) -> list[Event]:
        """``events`` with those of a copied message marked ``copied``."""
        if self._copies:
            copies = self._copies
            for event in events:
                if getattr(event, "message_id", None) in copies:
                    event.copied = True
        return events

    def stored_part(self, data: bytes, prov: Provenance, time: Any = None) -> list[Event]:
        """A part row (its ``data``, which lacks the ids ``prov`` carries) as the update
        ``message.part.updated`` would have sent: the fallback where the log is missing."""
        self.normalizer.count_record()
        try:
            part, data = decode_repairing(PART_DECODER, data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return self._bad_row(data, prov, "part data: ")
        part.id, part.messageID, part.sessionID = prov.part_id, prov.message_id, prov.session_id
        return self._marked(self._on_part(part, prov.session_id, time, prov))

    def stored_message(self, data: bytes, prov: Provenance) -> list[Event]:
        """A message row as ``message.updated`` would have sent it (see ``stored_part``)."""
        self.normalizer.count_record()
        try:
            info, data = decode_repairing(MESSAGE_DECODER, data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return self._bad_row(data, prov, "message data: ")
        info.id, info.sessionID = prov.message_id, prov.session_id
        return self._marked(self._on_message(info, prov.session_id, prov))

    def _bad_row(self, data: bytes, prov: Provenance, what: str) -> list[Event]:
        if not self._enter(prov.session_id, prov):
            return []
        prov.raw = data
        return self.normalizer.rejected(data, prov, what=what)  # a warning, or unknown

    def _event(self, type_: str, props: Raw | bytes, prov: Provenance) -> list[Event]:
        handler = self._handlers.get(type_)
        if handler is None:
            if type_ in CONSUMED or type_.startswith(_CONSUMED_PREFIXES):
                return []
            return self._other(type_, props, prov)
        try:
            return self._marked(handler(props or b"{}", prov))
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return self._other(type_, props, prov)

    def _other(self, type_: str, props: Raw | bytes, prov: Provenance) -> list[Event]:
        """An unmapped type (or a mapped one of a shape the views reject): ``unknown``; a
        logged event whose properties are not JSON (``event``): a ``warning``."""
        session = None
        if props and type(props) is bytes:
            try:
                ANY_DECODER.decode(props)
            except (msgspec.DecodeError, RecursionError) as exc:
                return self.normalizer.not_json(props, exc, prov, what=f"{type_} event: ")
        if props:
            with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                session = _str(_SESSION_ONLY.decode(props).sessionID)
        if not self._follows(session):
            return []
        self.normalizer.enter_session(session)
        prov.session_id = session
        return self.normalizer.unknown(prov, type_=type_)

    def _follows(self, session: str | None) -> bool:
        family = self._family
        if family is None or session is None or session in family:
            return True
        prefix = self._prefix
        if prefix is not None and session.startswith(prefix):  # the first one seen is it
            self._prefix = None
            self._followed = session
            self._followed_at_work = False  # the caller says when it is seen at work
            self._family = {session}
            return True
        return False

    def _enter(self, session: Any, prov: Provenance) -> bool:
        """Make the frame's session current; False when it is not followed."""
        session = _str(session)
        if not self._follows(session):
            return False
        self._seen_at_work(session)
        prov.session_id = session
        self.normalizer.enter_session(session)
        return True

    def _seen_at_work(self, session: str | None) -> None:
        if session is not None and session == self._followed:
            self._followed_at_work = True

    def _adopt(self, session: str | None) -> None:
        """Follow the first session seen at work (when none was asked for); a subagent seen
        first stands for its top-level session, whose idle is the run's end."""
        if self._followed is None and session is not None:
            self._followed = self._top(session)
            self._followed_at_work = True  # it, or its subagent, is at work now

    def _top(self, session: str) -> str:
        seen = {session}
        while isinstance(parent := self._parents.get(session), str) and parent not in seen:
            seen.add(parent)
            session = parent
        return session

    # ---------------------------------------------------------------- handlers

    def _part_updated(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _PART_UPDATED.decode(props)
        part = view.part
        session = view.sessionID
        if part is None:
            if not self._enter(session, prov):
                return []
            return self.normalizer.unknown(prov, type_="message.part.updated")
        return self._on_part(part, session, view.time, prov)

    def _on_part(self, part: Part, session: Any, time: Any, prov: Provenance) -> list[Event]:
        if session is None:
            session = part.sessionID
        if not self._enter(session, prov):
            return []
        self._adopt(prov.session_id)
        prov.time = number(time)
        part_id = _str(part.id)
        message_id = _str(part.messageID)
        prov.message_id, prov.part_id = message_id, part_id
        kind = part.type
        if kind == "step-start":
            return []
        info = self._messages.get(message_id) if message_id is not None else None
        if kind == "step-finish" and message_id is not None and self._pending:
            # the step is over: its text parts come before its usage, as in the store
            role = self._roles.get(message_id)
            flushed = self._flush_pending(message_id, role)
            self.normalizer.enter_session(prov.session_id)
            self.normalizer.enter_message(info)
            return flushed + self._emit(part, prov)
        self.normalizer.enter_message(info)
        if kind == "tool":
            state = part.state
            if not call_ended(state.status if state is not None else None):
                if self.open_calls_at_end and part_id is not None and part_id not in self._done:
                    self._running[part_id] = (part, prov)
                return []
            if part_id is not None:
                self._running.pop(part_id, None)
            return self._emit(part, prov)
        if kind in ("text", "reasoning"):
            role = self._roles.get(message_id) if message_id is not None else None
            if role == "user":
                return self._emit(part, prov, role="user")
            if part.time is not None and part.time.end is not None:
                if part_id is not None:
                    self._pending.pop(part_id, None)
                    self._grown.pop(part_id, None)
                return self._emit(part, prov, role=role)
            if part_id is not None and part_id not in self._done:
                self._pending[part_id] = (part, prov)
                self._grown.pop(part_id, None)  # this update holds the text so far
            return []
        return self._emit(part, prov)

    def _skip(self) -> list[Event]:
        self.normalizer.duplicates += 1
        return []

    def _emit(self, part: Part, prov: Provenance, *, role: str | None = None) -> list[Event]:
        """Write a complete part, once: one that comes again complete is tallied in
        ``metrics.duplicates`` (a progress update sent again never reaches here)."""
        if prov.part_id is not None:
            if prov.part_id in self._done:
                return self._skip()
            self._done.put(prov.part_id)
        return self.normalizer.part(part, prov, role=role)

    def _flush_pending(self, message_id: str, role: str | None) -> list[Event]:
        """Text parts of a finished message that never reported ``time.end``."""
        events: list[Event] = []
        for part_id in [k for k, (p, _) in self._pending.items() if p.messageID == message_id]:
            part, prov = self._pending.pop(part_id)
            self._with_deltas(part_id, part)
            if part_id not in self._done:
                self.normalizer.enter_session(prov.session_id)
                events += self._emit(part, prov, role=role)
        return events

    def _message_updated(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _MESSAGE_UPDATED.decode(props)
        info = view.info
        if info is None:
            if not self._enter(view.sessionID, prov):
                return []
            return self.normalizer.unknown(prov, type_="message.updated")
        return self._on_message(info, view.sessionID, prov)

    def _on_message(self, info: MessageInfo, session: Any, prov: Provenance) -> list[Event]:
        if not self._enter(session if session is not None else info.sessionID, prov):
            return []
        self._adopt(prov.session_id)
        if self.on_message is not None:
            self.on_message(prov.session_id, info)
        message_id = _str(info.id)
        role = _str(info.role)
        if message_id is None:
            return []
        if role is not None:
            self._roles.put(message_id, role)
        self._messages.put(message_id, info)
        self._learn_copy(info, prov.session_id, message_id)
        if role == "user":
            return self._flush_pending(message_id, "user") if self._pending else []
        if role != "assistant" or info.time is None or info.time.completed is None:
            return []
        self.normalizer.enter_message(info)
        events = self._flush_pending(message_id, role) if self._pending else []
        if not (self.errors_from_messages and info.error):
            return events
        # The store's log has no ``session.error``: a failed reply's error is its message's.
        self.normalizer.enter_session(prov.session_id)
        key = "m:" + message_id
        if key in self._done:
            return events + self._skip()
        self._done.put(key)
        prov.message_id = message_id
        prov.time = number(info.time.completed)
        return events + self.normalizer.error(info.error, prov)

    def know_message(
        self, data: bytes, message_id: str | None, session_id: str | None = None
    ) -> None:
        """Learn a stored message row's labels before its parts are read (``stored_part``),
        writing nothing: its step-finish parts' ``usage`` carry its model and agent."""
        if message_id is None:
            return
        with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            info = decode_repairing(MESSAGE_DECODER, data)[0]
            info.id = message_id
            self._messages.put(message_id, info)
            self._learn_copy(info, session_id, message_id)

    def _with_deltas(self, part_id: str, part: Part) -> None:
        """A part never updated complete: its last update's text and the deltas after it."""
        grown = self._grown.pop(part_id, None)
        if grown:
            part.text = _grown_text(part, grown)

    def _part_delta(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _PART_DELTA.decode(props)
        part_id, delta = view.partID, view.delta
        open_part = type(part_id) is str and part_id in self._pending
        if open_part and view.field == "text" and type(delta) is str:  # its text so far
            self._grown.setdefault(part_id, []).append(delta)
        if not self.deltas:
            return []
        if not self._enter(view.sessionID, prov):
            return []
        if not isinstance(delta, str):
            return self.normalizer.unknown(prov, type_="message.part.delta")
        prov.message_id, prov.part_id = _str(view.messageID), _str(view.partID)
        return self.normalizer.delta(_str(view.field), delta, prov)

    def _session_error(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _SESSION_ERROR.decode(props)
        if not self._enter(view.sessionID, prov):
            return []
        return self.normalizer.error(view.error, prov)

    def _permission_asked(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _PERMISSION_ASKED.decode(props)
        if not self._enter(view.sessionID, prov):
            return []
        patterns = view.patterns
        if not (isinstance(patterns, list) and all(isinstance(p, str) for p in patterns)):
            patterns = None
        return self.normalizer.permission(
            prov, id_=_str(view.id), permission=_str(view.permission), patterns=patterns
        )

    def _permission_replied(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _PERMISSION_REPLIED.decode(props)
        if not self._enter(view.sessionID, prov):
            return []
        return self.normalizer.permission(prov, id_=_str(view.requestID), reply=_str(view.reply))

    def _question_asked(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _QUESTION_ASKED.decode(props)
        if not self._enter(view.sessionID, prov):
            return []
        tool = view.tool if type(view.tool) is dict else {}
        call_id, message_id = _str(tool.get("callID")), _str(tool.get("messageID"))
        prov.message_id = message_id  # the message of the asking call
        if _str(view.id):
            self._questions.put(view.id, (call_id, message_id))
        return self.normalizer.question(
            prov, id_=view.id, call_id=call_id, questions=view.questions
        )

    def _question_replied(self, props: bytes, prov: Provenance) -> list[Event]:
        return self._question_answered(props, prov, "answer")

    def _question_rejected(self, props: bytes, prov: Provenance) -> list[Event]:
        return self._question_answered(props, prov, "reject")

    def _question_answered(self, props: bytes, prov: Provenance, reply: str) -> list[Event]:
        """A reply names only the request: its call and message are the ask's."""
        view = _QUESTION_REPLIED.decode(props)
        if not self._enter(view.sessionID, prov):
            return []
        request = _str(view.requestID)
        call_id, prov.message_id = (
            self._questions.get(request) if request is not None else None
        ) or (None, None)
        answers = view.answers if reply == "answer" else None
        return self.normalizer.question(
            prov, id_=request, call_id=call_id, answers=answers, reply=reply
        )

    def _session_status(self, props: bytes, prov: Provenance) -> list[Event]:
        view = _SESSION_STATUS.decode(props)
        session = _str(view.sessionID)
        status = view.status.type if view.status is not None else None
        if status == "busy":
            if session is not None and self._follows(session):  # (resolves an id prefix)
                self._seen_at_work(session)
                if session == self._followed:
                    self.idle = False  # its next run (a prompt after an idle): not over yet
            self._adopt(session)
        elif status == "idle":
            self._went_idle(session)
        elif status == "retry" and view.status is not None:
            if not self._enter(session, prov):
                return []
            retry = view.status
            action = retry.action
            return self.normalizer.retry(
                prov,
                attempt=retry.attempt,
                message=retry.message,
                next_=retry.next,
                reason=action.reason if action is not None else None,
            )
        return []

    def _session_idle(self, props: bytes, prov: Provenance) -> list[Event]:
        self._went_idle(_str(_SESSION_ONLY.decode(props).sessionID))
        return []

    @property
    def named(self) -> bool:
        """The followed session was asked for (``session=``), not adopted."""
        return self._chosen

    def went_idle_while_away(self) -> bool:
        """The server says the followed session is not at work (asked after a reconnect):
        counts as its idle when it was seen at work; True when that made it idle."""
        if self._followed is None or not self._followed_at_work or self.idle:
            return False
        self._went_idle(self._followed)
        return self.idle

    def _went_idle(self, session: str | None) -> None:
        # Only an idle after work: attach first, then prompt (an idle the server reports
        # for a session that has not been seen at work is the state before the run).
        if session is not None and session == self._followed and self._followed_at_work:
            self.idle = True

    def _session_changed(self, props: bytes, prov: Provenance) -> list[Event]:
        """Learn child sessions (``info.parentID``): of the followed one, to follow them too,
        and of any, so that a subagent is never taken for the run."""
        try:
            info = _SESSION_CHANGED.decode(props).info
        except (msgspec.ValidationError, msgspec.DecodeError):
            if self._family is not None:
                raise  # a frame of the followed run's shape gone wrong: an unknown event
            return []  # nothing is written of these frames: nothing to report either
        if info is not None and _str(info.id) and _str(info.parentID):
            self.normalizer.learn_parent(info.id, info.parentID)
        if info is not None and _str(info.id) and _str(info.directory):
            self.normalizer.learn_directory(info.id, info.directory)
        if info is not None and _str(info.id) and isinstance(info.time, dict):
            self.learn_session_start(info.id, info.time.get("created"))

        if self.on_session is not None and info is not None and _str(info.id):
            self.on_session(info.id, _str(info.parentID), info.cost)
        if not self._chosen and info is not None and _str(info.id) and _str(info.parentID):
            self._parents.put(info.id, info.parentID)
            if self._followed == info.id:  # adopted a subagent: its top-level session is
                self._followed = self._top(info.id)  # the run, at work while its subagent is
                self._followed_at_work = True
        if self._family is not None and info is not None and _str(info.id):
            if self._prefix is not None:  # the session asked for by a prefix, created
                self._follows(info.id)
            family = self._family  # resolving the prefix made it anew
            if _str(info.parentID) in family:
                family.add(info.id)
        return []

    # ---------------------------------------------------------------- bad data


def _frame_type(frame: dict[str, Any]) -> tuple[Any, Any]:
    """The event type of a frame of an unexpected shape (``/global/event`` wraps it)."""
    payload = frame.get("payload")
    return (payload if isinstance(payload, dict) else frame).get("type"), None


def _grown_text(part: Part, grown: list[str]) -> str:
    """A part's text as its last update had it, and the deltas that came after."""
    return (part.text if isinstance(part.text, str) else "") + "".join(grown)
