"""``opencode export <session>`` documents as input: ``{info, messages: [{info, parts}]}``.

The document's messages and parts are mapped exactly as stored sessions are
(``transcript``), in the order the document lists them. A document that is not JSON, or
not of this shape, becomes one ``warning``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Raw, Struct

from .events import Event
from .normalizer import Normalizer, Provenance
from .transcript import TranscriptMapper
from .views import NO_RAW, decode_repairing

__all__ = ["export_events"]


class _Ids(Struct):
    id: Any = None
    sessionID: Any = None  # noqa: N815
    time: Any = None


class _ExportMessage(Struct):
    info: Raw = NO_RAW
    parts: list[Raw] = []


class _ExportDocument(Struct):
    info: Raw = NO_RAW
    messages: list[Raw] = []  # each decoded on its own: one bad message is one warning


_DOCUMENT = msgspec.json.Decoder(_ExportDocument)
_MESSAGE = msgspec.json.Decoder(_ExportMessage)
_IDS = msgspec.json.Decoder(_Ids)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def export_events(data: bytes, normalizer: Normalizer, *, source: str | None = None) -> list[Event]:
    try:
        document, data = decode_repairing(_DOCUMENT, data.removeprefix(b"\xef\xbb\xbf"))
        session = _IDS.decode(document.info) if document.info else _Ids()
    except (msgspec.DecodeError, RecursionError) as exc:
        normalizer.count_record()
        prov = Provenance(line=1, source=source)
        text = data.decode("utf-8", "replace")
        return normalizer.warning(f"not an opencode export document: {exc}", text, prov)
    session_id = _str(session.id)
    mapper = TranscriptMapper(normalizer, source=source)
    events: list[Event] = []
    for raw_message in document.messages:
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
        info, found = mapper.message(
            message.info,
            session_id=_str(ids.sessionID) or session_id,
            message_id=message_id,
            time=created,
        )
        events.extend(found)
        role = info.role if info is not None and isinstance(info.role, str) else None
        for part in message.parts:
            try:
                part_ids = _IDS.decode(part)
            except (msgspec.DecodeError, RecursionError):
                part_ids = _Ids()
            events.extend(
                mapper.part(
                    part,
                    session_id=_str(part_ids.sessionID) or session_id,
                    message_id=message_id,
                    part_id=_str(part_ids.id),
                    time=created,
                    role=role,
                )
            )
        events.extend(
            mapper.message_end(
                info,
                message.info,
                session_id=session_id,
                message_id=message_id,
                time=created,
            )
        )
    return events
