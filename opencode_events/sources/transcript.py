"""A stored session's messages and parts → normalized events (store, export, legacy files).

OpenCode keeps a session as messages (``role`` user or assistant) each holding parts. The
parts go through the same mapping as the run stream (``Normalizer.part``), with two things
only stored sessions have: a user's text part becomes ``prompt``, and an assistant message
that ended in an error becomes an ``error`` event after its parts (the stream reports the
same failure as an ``error`` record). Rows that cannot be mapped become ``warning`` (not
JSON) or ``unknown`` (JSON of an unexpected shape), never an exception.

Order: messages by (time_created, id), parts by id within their message; the caller
supplies rows in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from msgspec import Raw

from ..core.mapping import CONSUMED_PARTS, RevertPoint
from ..core.normalizer import Normalizer, Provenance
from ..core.views import (
    MESSAGE_DECODER,
    MESSAGE_HEAD_DECODER,
    PART_DECODER,
    MessageHead,
    MessageInfo,
    decode_repairing,
    later,
    number,
    without_lone_surrogates,
    written_at,
)
from ..errors import InputError
from ..events import Event
from ..store.rows import offers_fast_scans

__all__ = ["TranscriptMapper", "session_events", "BATCH_EVENTS"]

# Events handed on at a time by ``session_events``: fewer, larger batches cost less to pass
# along and to encode; whole messages' events stay together.
BATCH_EVENTS = 256


class TranscriptMapper:
    def __init__(self, normalizer: Normalizer, *, source: str | None = None) -> None:
        self.normalizer = normalizer
        self.source = source

    def _prov(
        self,
        data: bytes | Raw,
        *,
        session_id: str | None,
        message_id: str | None,
        part_id: str | None = None,
        time: Any = None,
    ) -> Provenance:
        return Provenance(
            session_id=session_id,
            time=time if type(time) is int or type(time) is float else None,
            source=self.source,
            message_id=message_id,
            part_id=part_id,
            raw=data,  # bytes become msgspec.Raw only when an event carries them
        )

    def message(
        self,
        data: bytes | Raw,
        *,
        session_id: str | None,
        message_id: str | None,
        time: Any = None,
    ) -> tuple[MessageInfo | None, list[Event]]:
        """Decode a message; its events are only warnings about the row itself."""
        self.normalizer.enter_session(session_id)
        self.normalizer.count_record()
        try:
            info = decode_repairing(MESSAGE_DECODER, data)[0]
            self.normalizer.enter_message(info)
            return info, []
        except (msgspec.DecodeError, RecursionError):
            prov = self._prov(data, session_id=session_id, message_id=message_id, time=time)
            self.normalizer.enter_message(None)
            return None, self.normalizer.rejected(data, prov, what="message data: ")

    def part(
        self,
        data: bytes | Raw,
        *,
        session_id: str | None,
        message_id: str | None,
        part_id: str | None,
        time: Any = None,
        role: str | None = None,
    ) -> list[Event]:
        normalizer = self.normalizer
        normalizer.records += 1
        try:
            part, data = decode_repairing(PART_DECODER, data)
        except (msgspec.DecodeError, RecursionError):
            prov = self._prov(
                data, session_id=session_id, message_id=message_id, part_id=part_id, time=time
            )
            return self.normalizer.rejected(data, prov, what="part data: ")
        prov = self._prov(
            data, session_id=session_id, message_id=message_id, part_id=part_id, time=time
        )
        kind = part.type
        if type(kind) is str and kind in CONSUMED_PARTS:
            normalizer.note_consumed(kind)
            return []  # step-start: nothing to map, so nothing to build
        if part.id is None:
            part.id = part_id  # store rows keep the id in a column, not in data
        return normalizer.part(part, prov, role=role)

    def message_end(
        self,
        info: MessageInfo | None,
        data: bytes | Raw,
        *,
        session_id: str | None,
        message_id: str | None,
        time: Any = None,
    ) -> list[Event]:
        """After a message's parts: the error an assistant message ended with, if any, dated
        when the message ended (``time.completed``) when that is later than ``time``."""
        if info is None or info.role != "assistant" or not info.error:
            return []
        if info.time is not None:
            time = later(time, info.time.completed)
        prov = self._prov(data, session_id=session_id, message_id=message_id, time=time)
        return self.normalizer.error(info.error, prov)


def mark_reverted(events: list[Event]) -> list[Event]:
    """Mark events made from what a session's pending revert undid."""
    for event in events:
        event.reverted = True
    return events


def is_copy(created: Any, began: int | None) -> bool:
    """Whether a message created then is in the history a fork copied: created before its
    session ``began`` (OpenCode keeps the original times; None: no fork)."""
    return began is not None and type(created) is int and created < began


def mark_copied(events: list[Event]) -> None:
    """Mark one copied message's events (``is_copy``) ``copied``."""
    for event in events:
        event.copied = True


def session_events(
    normalizer: Normalizer,
    session_id: str,
    messages: Iterable[Any],
    parts: Iterable[Any],
    revert: RevertPoint | None = None,
    copied_before: int | None = None,
    untimed: bool = False,
) -> Iterator[list[Event]]:
    """Events of one stored session from its message rows and part rows (both in order),
    in lists of whole messages' events, each list ``BATCH_EVENTS`` long or more but the last.

    Rows are tuples in the store's layouts (``MessageRow``: id, session id, time_created,
    data; ``PartRow``: id, message id, session id, time_created, data), read by position.
    Parts whose message is not among ``messages`` are skipped by the merge (the store's
    join drops them).

    This is the import's hot loop (once per part of the database): it decodes a part
    before building anything and returns early for parts that map to nothing; every
    other case goes through the same ``TranscriptMapper``/``Normalizer`` calls as the
    other readers. ``revert``: the session's pending undo, whose events are marked;
    ``copied_before``: a fork's creation time, before which its messages are the history it
    copied (their events marked ``copied``).
    """
    mapper = TranscriptMapper(normalizer)
    map_part = mapper.part
    decode = PART_DECODER.decode
    consumed = CONSUMED_PARTS
    normalize_part = normalizer.part
    decode_message = MESSAGE_HEAD_DECODER.decode  # accepts what MESSAGE_DECODER accepts
    part_iter = iter(parts)
    entered = False
    events: list[Event] = []
    done = 0  # how many of ``events`` belong to messages mapped whole
    try:
        pending = next(part_iter, None)
        for message_id, _, created, data in messages:
            done = len(events)
            copy = is_copy(created, copied_before)
            # A part's time: its row's, or (``by_data``) the export's rule, never back in time.
            by_data = untimed or copy
            last = created if number(created) is not None else None  # a damaged time: none
            undone = revert is not None and revert.message(message_id)
            if not entered:
                normalizer.enter_session(session_id)
                entered = True
            if data is None:  # NULL in a damaged store: read as the JSON null it stands for
                data = b"null"
            try:
                info: MessageHead | MessageInfo | None = decode_message(data)
                normalizer.records += 1
                normalizer.enter_message(info)
            except (msgspec.DecodeError, RecursionError):
                # kept repaired for every event that carries it (message_end's raw too)
                data = without_lone_surrogates(data) or data
                info, found = mapper.message(
                    data, session_id=session_id, message_id=message_id, time=created
                )
                events += mark_reverted(found) if undone else found
            role = info.role if info is not None and type(info.role) is str else None
            completed = info.time.completed if by_data and info and info.time else None
            while pending is not None and pending[1] == message_id:
                part_id, _, _, part_time, part_data = pending
                pending = next(part_iter, None)
                # this part's events are marked once mapped, when the revert undid it
                start = len(events) if revert is not None and revert.part(part_id) else -1
                if part_data is None:
                    part_data = b"null"
                try:
                    part = decode(part_data)
                except (msgspec.DecodeError, RecursionError):
                    # Not a part we can read: the mapper's own path (which counts the record)
                    # turns it into a warning or an unknown event.
                    found = map_part(
                        part_data,
                        session_id=session_id,
                        message_id=message_id,
                        part_id=part_id,
                        time=last if by_data else part_time,
                        role=role,
                    )
                    if found:
                        events += found
                        if start >= 0:
                            mark_reverted(events[start:])
                    continue
                normalizer.records += 1
                kind = part.type
                if type(kind) is str and kind in consumed:
                    normalizer.note_consumed(kind)
                    continue
                if part.id is None:
                    part.id = part_id  # store rows keep the id in a column, not in data
                if by_data:
                    state = part.state
                    part_time = last = later(
                        last,
                        written_at(
                            kind,
                            part.time.start if part.time is not None else None,
                            state.time.start if state is not None and state.time else None,
                            completed,
                        ),
                    )
                elif type(part_time) is not int and type(part_time) is not float:
                    part_time = None  # a damaged time_created
                found = normalize_part(
                    part,
                    Provenance(
                        session_id=session_id,
                        time=part_time,
                        message_id=message_id,
                        part_id=part_id,
                        raw=part_data,
                    ),
                    role=role,
                )
                if found:
                    events += mark_reverted(found) if start >= 0 else found
            if info is not None and info.role == "assistant" and info.error:
                found = mapper.message_end(
                    info, data, session_id=session_id, message_id=message_id, time=created
                )
                events += mark_reverted(found) if undone else found
            if copy:
                mark_copied(events[done:])
            if len(events) >= BATCH_EVENTS:
                yield events
                events = []
    except InputError:
        # The database failed part-way through a session read as it streams: the
        # messages mapped whole go out first, as one message at a time they would have.
        if done:
            yield events[:done]
        raise
    if events:
        yield events


def map_session(
    normalizer: Normalizer, store: Any, session_id: str, costs: list[float]
) -> Iterator[list[Event]]:
    """One stored session's events, in batches (``session_events``); appends its cost sum to
    ``costs``. (Costs are summed per session, and the sums in session order, so that the
    import's total is the same float however the sessions are shared among workers.)"""
    # Plain tuples when the store offers them (same layouts as its row types).
    if offers_fast_scans(store):
        messages, parts = store.session_rows(session_id)
    else:
        messages, parts = store.messages(session_id), store.parts(session_id)
    normalizer.totals.cost = 0.0
    reverts = getattr(store, "reverted_sessions", None)  # a store that knows of none: none
    revert = RevertPoint.of(reverts().get(session_id)) if reverts is not None else None
    forks = getattr(store, "forked_sessions", None)  # a store of no forks (legacy): none
    copied_before = forks().get(session_id) if forks is not None else None
    untimed_of = getattr(store, "sessions_with_untimed_parts", None)  # optional: a store's own
    untimed = untimed_of is not None and session_id in untimed_of()
    yield from session_events(
        normalizer, session_id, messages, parts, revert, copied_before, untimed
    )
    costs.append(normalizer.totals.cost)
