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

from .events import Event
from .normalizer import Normalizer, Provenance
from .stream import StreamReader
from .transcript import TranscriptMapper
from .views import NO_RAW, later, number, repair_lone_surrogates

__all__ = ["export_events"]


class _Ids(Struct):
    id: Any = None
    sessionID: Any = None  # noqa: N815
    time: Any = None


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
# What may stand before a document: white space, and a BOM (each file of a `cat` has one).
_BETWEEN = re.compile(rb"(?:\s|\xef\xbb\xbf)*")


def export_events(
    data: bytes | bytearray, normalizer: Normalizer, *, source: str | None = None
) -> list[Event]:
    """The events of the export documents in ``data``, one document after another.

    Each document is decoded where it starts (through a memoryview), so many small
    documents take time in proportion to their size. Where a document first fails to
    decode, lone surrogate escapes are repaired in a copy of the input, at once for the rest
    of it; the repair keeps every length, so offsets and line numbers hold."""
    events: list[Event] = []
    records: StreamReader | None = None  # for run-stream records among the documents
    pos = _BETWEEN.match(data).end()
    line = 1 + data.count(b"\n", 0, pos)  # the line ``pos`` is on
    repaired = False
    while pos < len(data):
        found, end, problem = _next_document(data, pos)
        if found is None and end == pos and not repaired:
            repaired = True
            buffer = bytearray(data)  # one copy, repaired in place
            if repair_lone_surrogates(buffer, pos):
                data = buffer
                continue
        if found is None:
            normalizer.count_record()
            prov = Provenance(line=line, source=source)
            # msgspec's end of a value lies past the white space after it
            value = bytes(data[pos:end]).rstrip() if end > pos else bytes(data[pos:])
            text = value.decode("utf-8", "replace")
            events += normalizer.warning(f"not an opencode export document: {problem}", text, prov)
            if end == pos:
                break  # not JSON: where the next value starts cannot be known
        elif found is _RECORD:
            if records is None:
                records = StreamReader(normalizer, source=source)
            # One compact line, as the stream has it (an indented one would break `--raw`).
            events += records.feed(line, msgspec.json.format(bytes(data[pos:end]), indent=-1))
        else:
            events += _document_events(*found, normalizer, source)
        following = _BETWEEN.match(data, end).end()
        line += data.count(b"\n", pos, following)
        pos = following
    return events


# What ``_next_document`` finds for a record of the run stream.
_RECORD: Any = object()


def _next_document(data: bytes | bytearray, pos: int) -> tuple[Any, int, str | None]:
    """For the JSON value that starts at ``pos``: ((document, its session's ids), where it
    ends, None) for an export document; (``_RECORD``, where it ends, None) for a record of
    the run stream; (None, where it ends, why) for a value of another shape; (None, ``pos``,
    why) when none can be decoded there."""
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
        if document.info is NO_RAW and document.messages is UNSET:
            if isinstance(document.type, str):
                return _RECORD, end, None
            return None, end, "an object with neither info nor messages"
    except msgspec.ValidationError as exc:  # JSON, but not an object of this shape
        return None, _value_end(view, pos), str(exc)
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, pos, str(exc)
    try:
        session = _IDS.decode(document.info) if document.info else _Ids()
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, end, str(exc)
    return (document, session), end, None


def _value_end(view: memoryview, pos: int) -> int:
    """Where the JSON value that starts at ``pos`` ends (``pos`` if none does)."""
    try:
        _VALUE.decode(view[pos:])
    except msgspec.DecodeError as exc:
        found = _TRAILING.search(str(exc))
        return pos + int(found[1]) - 1 if found else pos
    except RecursionError:
        return pos
    return len(view)


def _document_events(
    document: _ExportDocument,
    session: _Ids,
    normalizer: Normalizer,
    source: str | None,
) -> list[Event]:
    session_id = _str(session.id)
    mapper = TranscriptMapper(normalizer, source=source)
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
        created = ids.time.get("created") if isinstance(ids.time, dict) else None
        completed = ids.time.get("completed") if isinstance(ids.time, dict) else None
        info, found = mapper.message(
            message.info,
            session_id=_str(ids.sessionID) or session_id,
            message_id=message_id,
            time=created,
        )
        events.extend(found)
        role = info.role if info is not None and isinstance(info.role, str) else None
        last = created  # the time of the part before, which a part without one of its own takes
        for part in message.parts:
            part_ids = _part_ids(part)
            # never back in time: the document lists parts as they came
            last = later(last, _started(part_ids, completed))
            events.extend(
                mapper.part(
                    part,
                    session_id=_str(part_ids.sessionID) or session_id,
                    message_id=message_id,
                    part_id=_str(part_ids.id),
                    time=last,
                    role=role,
                )
            )
        events.extend(
            mapper.message_end(
                info,
                message.info,
                session_id=session_id,
                message_id=message_id,
                time=last,
            )
        )
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
    """When the part was written, as near as the document tells (it has no row times): its
    ``time.start``, a tool's ``state.time.start``, a step-finish's message completion; None
    when it has none."""
    if part.type == "step-finish" and number(completed) is not None:
        return completed
    for times in (part.time, part.state.time if part.state is not None else None):
        start = number(times.get("start")) if isinstance(times, dict) else None
        if start is not None:
            return start
    return None
