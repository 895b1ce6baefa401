"""``opencode export <session>`` documents as input: ``{info, messages: [{info, parts}]}``.

The document's messages and parts are mapped exactly as stored sessions are
(``transcript``), in the order the document lists them. Several documents one after
another (a loop of ``opencode export``, or ``jq -c`` of several files) are read in turn.
Records of ``opencode run --format json`` among them (the stream indented by ``jq .``, whose
first line is a lone ``{`` too) are mapped as the stream reader maps them, one per JSON value.
A JSON value of neither shape becomes one ``warning`` and reading goes on after it; input
that is not JSON becomes one ``warning`` and ends the input (where the next value would
start cannot be known).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from ..core.mapping import RevertPoint
from ..core.normalizer import Normalizer, Provenance
from ..core.views import NO_RAW, later, repair_lone_surrogates, written_at
from ..events import Event
from .stream import StreamReader
from .transcript import TranscriptMapper, is_copy, mark_copied, mark_reverted

__all__ = ["export_events"]


class _Ids(Struct):
    id: Any = None
    sessionID: Any = None  # noqa: N815
    parentID: Any = None  # noqa: N815
    time: Any = None
    revert: Raw = NO_RAW  # the session's pending undo (its info's ``revert``)


class _StateTime(Struct):
    time: Any = None


class _PartIds(Struct):
    """A part's ids and its own start time (``time.start``; a tool's ``state.time.start``)."""

    id: Any = None
    sessionID: Any = None  # noqa: N815
    type: Any = None
    time: Any = None
    state: _StateTime | None = None


class _ExportMessage(Struct):
    info: Raw = NO_RAW
    parts: list[Raw] = []


class _ExportDocument(Struct):
    info: Raw = NO_RAW  # NO_RAW itself when the key is missing
    messages: list[Raw] | UnsetType = UNSET  # each decoded on its own: one bad one is one warning
    type: Any = None  # a string in a record of `opencode run --format json`, not here


_DOCUMENT = msgspec.json.Decoder(_ExportDocument)
_PART_IDS = msgspec.json.Decoder(_PartIds)
_MESSAGE = msgspec.json.Decoder(_ExportMessage)
_IDS = msgspec.json.Decoder(_Ids)
_VALUE = msgspec.json.Decoder(Raw)  # a value checked and skipped, to find where it ends


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# msgspec's message for a value followed by more: where the next document starts.
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_TRUNCATED = "truncated"  # in msgspec's message for input that ends inside a value
# What may stand before a document: white space, and a BOM (each file of a `cat` has one).
_BETWEEN = re.compile(rb"(?:\s|\xef\xbb\xbf)*")
# Where reading picks up after a value that cannot be decoded: a line that opens an object
# or array at its very start (how `jq .`, `opencode export` and `jq -c` begin each value).
_NEXT_VALUE = re.compile(rb"\n(?:\xef\xbb\xbf)?[{\[]")
# Below this much unread input, every read is tried at once (records are small, and come
# live); above it, only when the unread input has doubled since the last try, so that a
# large document arriving in many reads is decoded a bounded number of times.
_TRY_EVERY_READ = 1 << 20

# What ``_next_value`` says when the value is not complete yet.
_MORE: Any = object()
# What ``_next_value`` finds for a record of the run stream.
_RECORD: Any = object()


class ExportReader:
    """Maps the JSON values of an input whose first line is a lone ``{``: export
    documents and run-stream records, as they complete.

    ``take`` is given input as it comes (whole lines) and returns the events of every value
    completed by it; ``final=True`` says the input has ended. Each value is decoded where it
    starts (through a memoryview), so many small values take time in proportion to their
    size; a value still arriving is held, and tried again as described at
    ``_TRY_EVERY_READ``. Where a value first fails to decode, lone surrogate escapes are
    repaired in a copy of what is held (lengths are kept, so offsets and lines hold).
    """

    def __init__(self, normalizer: Normalizer, *, source: str | None = None) -> None:
        self.normalizer = normalizer
        self.source = source
        self._held = b""  # input read and not yet mapped: the start of a value
        self._new: list[bytes] = []  # input read since the last try
        self._new_size = 0
        self._tried_at = 0  # how much was held when a try last found the value incomplete
        self._line = 1  # the line ``_held`` starts on
        self._records: StreamReader | None = None  # for run-stream records

    def take(self, data: bytes, *, final: bool = False) -> list[Event]:
        if data:
            self._new.append(data)
            self._new_size += len(data)
        size = len(self._held) + self._new_size
        if not final and size > _TRY_EVERY_READ and size < 2 * self._tried_at:
            return []
        data = b"".join([self._held, *self._new]) if self._new else self._held
        self._new, self._new_size = [], 0
        events: list[Event] = []
        pos = _BETWEEN.match(data).end()
        line = self._line + data.count(b"\n", 0, pos)
        repaired = False
        while pos < len(data):
            found, end, problem = _next_value(data, pos, final, repaired=repaired)
            if found is _MORE:
                break
            if problem is _REPAIRABLE:
                repaired = True
                buffer = bytearray(data)  # one copy, repaired in place
                if repair_lone_surrogates(buffer, pos):
                    data = bytes(buffer)
                continue
            if found is None:
                events += self._warning(data[pos:end].rstrip(), line, problem)
            elif found is _RECORD:
                if self._records is None:
                    self._records = StreamReader(self.normalizer, source=self.source)
                # One compact line, as the stream has it (an indented one would break `--raw`).
                compact = msgspec.json.format(data[pos:end], indent=-1)
                events += self._records.feed(line, compact)
            else:
                events += _document_events(*found, self.normalizer, self.source)
            following = _BETWEEN.match(data, end).end()
            line += data.count(b"\n", pos, following)
            pos = following
        self._held = data[pos:] if pos < len(data) else b""
        self._line = line
        self._tried_at = len(self._held)
        return events

    def _warning(self, value: bytes, line: int, problem: Any) -> list[Event]:
        self.normalizer.count_record()
        prov = Provenance(line=line, source=self.source)
        text = value.decode("utf-8", "replace")
        return self.normalizer.warning(f"not an opencode export document: {problem}", text, prov)


def export_events(
    data: bytes | bytearray, normalizer: Normalizer, *, source: str | None = None
) -> list[Event]:
    """The events of the export documents (and run-stream records) in ``data``, which is
    the whole input."""
    return ExportReader(normalizer, source=source).take(bytes(data), final=True)


def _next_value(data: bytes, pos: int, final: bool, *, repaired: bool) -> tuple[Any, int, Any]:
    """For the JSON value that starts at ``pos``, (what it is, where it ends, why not):

    - ((document, its session's ids), end, None) for an export document;
    - (``_RECORD``, end, None) for a record of the run stream (a string ``type``);
    - (None, end, why) for a value of another shape, or one that cannot be decoded (it
      ends where the next line opens an object or array, else with the input);
    - (None, ``pos``, ``_REPAIRABLE``) when it may decode once its lone surrogate escapes
      are repaired (unless ``repaired`` says that was done);
    - (``_MORE``, ``pos``, None) when it is not complete yet (more input is to come).
    """
    view = memoryview(data)
    end = len(data)
    try:
        try:
            document = _DOCUMENT.decode(view[pos:])
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as exc:
            found = _TRAILING.search(str(exc))
            if found is None:
                raise
            end = pos + int(found[1]) - 1  # msgspec counts from 1: the next one starts there
            document = _DOCUMENT.decode(view[pos:end])
    except msgspec.ValidationError as exc:  # not an object of this shape
        return _not_a_document(data, pos, final, str(exc))
    except msgspec.DecodeError as exc:
        if _TRUNCATED in str(exc) and not final:
            return _MORE, pos, None
        if not repaired:
            return None, pos, _REPAIRABLE
        return _not_a_document(data, pos, final, str(exc))
    except RecursionError as exc:
        return _not_a_document(data, pos, final, str(exc))
    if document.messages is UNSET:
        if isinstance(document.type, str):
            return _RECORD, end, None
        return None, end, "an object with neither messages (a document) nor type (a record)"
    try:
        session = _IDS.decode(document.info) if document.info else _Ids()
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, end, str(exc)
    return (document, session), end, None


_REPAIRABLE: Any = "may be repaired"


def _not_a_document(data: bytes, pos: int, final: bool, why: str) -> tuple[Any, int, Any]:
    """A value that is JSON of another shape, or no JSON at all: where it ends."""
    try:
        _VALUE.decode(memoryview(data)[pos:])
    except msgspec.DecodeError as exc:
        found = _TRAILING.search(str(exc))
        if found:
            return None, pos + int(found[1]) - 1, why
        if _TRUNCATED in str(exc) and not final:
            return _MORE, pos, None
        why = str(exc) if _TRUNCATED in str(exc) else why
    except RecursionError:
        pass
    else:
        return None, len(data), why
    following = _NEXT_VALUE.search(data, pos)
    if following is not None:
        return None, following.start() + 1, why
    return (_MORE, pos, None) if not final else (None, len(data), why)


def _document_events(
    document: _ExportDocument,
    session: _Ids,
    normalizer: Normalizer,
    source: str | None,
) -> list[Event]:
    session_id = _str(session.id)
    parent = _str(session.parentID)
    if session_id is not None and parent is not None and parent != session_id:
        normalizer.parents[session_id] = parent  # a subagent's export names who ran it
    mapper = TranscriptMapper(normalizer, source=source)
    revert = RevertPoint.of(bytes(session.revert)) if session.revert else None
    # A fork's copied history: messages created before the session was (as ``import``).
    began = session.time.get("created") if isinstance(session.time, dict) else None
    began = began if type(began) is int else None
    events: list[Event] = []
    for raw_message in document.messages or ():  # UNSET is false
        try:
            message = _MESSAGE.decode(raw_message)
        except (msgspec.DecodeError, RecursionError):
            normalizer.count_record()
            prov = Provenance(session_id=session_id, source=source, raw=raw_message)
            events.extend(normalizer.unknown(prov, type_="message"))
            continue
        try:
            ids = _IDS.decode(message.info) if message.info else _Ids()
        except (msgspec.DecodeError, RecursionError):
            ids = _Ids()
        message_id = _str(ids.id)
        first = len(events)  # this message's events, from here
        undone = revert is not None and revert.message(message_id)
        created = ids.time.get("created") if isinstance(ids.time, dict) else None
        completed = ids.time.get("completed") if isinstance(ids.time, dict) else None
        info, found = mapper.message(
            message.info,
            session_id=_str(ids.sessionID) or session_id,
            message_id=message_id,
            time=created,
        )
        events.extend(mark_reverted(found) if undone else found)
        role = info.role if info is not None and isinstance(info.role, str) else None
        last = created  # the time of the part before, which a part without one of its own takes
        for part in message.parts:
            part_ids = _part_ids(part)
            # never back in time: the document lists parts as they came
            last = later(last, _started(part_ids, completed))
            found = mapper.part(
                part,
                session_id=_str(part_ids.sessionID) or session_id,
                message_id=message_id,
                part_id=_str(part_ids.id),
                time=last,
                role=role,
            )
            undone_part = revert is not None and revert.part(_str(part_ids.id))
            events.extend(mark_reverted(found) if undone_part else found)
        found = mapper.message_end(
            info,
            message.info,
            session_id=session_id,
            message_id=message_id,
            time=last,
        )
        events.extend(mark_reverted(found) if undone else found)
        if is_copy(created, began):
            mark_copied(events[first:])
    return events


def _part_ids(part: Raw) -> _PartIds:
    try:
        return _PART_IDS.decode(part)
    except msgspec.ValidationError:  # a "state" that is not an object: the ids alone
        try:
            ids = _IDS.decode(part)
        except (msgspec.DecodeError, RecursionError):
            return _PartIds()
        return _PartIds(id=ids.id, sessionID=ids.sessionID)
    except (msgspec.DecodeError, RecursionError):
        return _PartIds()


def _started(part: _PartIds, completed: Any) -> int | float | None:
    """When the part was written, as near as the document tells (it has no row times:
    ``written_at``)."""
    times = part.time if isinstance(part.time, dict) else None
    state = (
        part.state.time if part.state is not None and isinstance(part.state.time, dict) else None
    )
    return written_at(
        part.type,
        times.get("start") if times is not None else None,
        state.get("start") if state is not None else None,
        completed,
    )
