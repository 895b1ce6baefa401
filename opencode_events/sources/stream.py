"""Reader for ``opencode run --format json``: bytes in, one record per line.

``line_batches`` splits a binary file into lines as they arrive: it hands over every
complete line that one read returned, so a caller can flush output exactly when no
further complete line is waiting. Pieces of a long line are joined once; a line longer
than ``max_line`` bytes (``MAX_LINE``, or ``$OPENCODE_EVENTS_MAX_LINE``) is not kept: it is
measured as it goes by and handed over as an ``OverlongLine`` batch of its own (its start and
length, for a warning), so memory stays bounded whatever the input. CRLF and a leading
UTF-8 BOM are accepted, and a last line without a newline is still a line.

``StreamReader.feed`` maps one line: one try per line, and whatever a line holds it
becomes events or a documented consumption, never an exception: a line that is not
JSON, or JSON that is not an object, becomes a ``warning``; an object of a shape the
views reject (a ``part`` that is a string) becomes ``unknown`` with the record in ``raw``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import msgspec

from ..core.mapping import CONSUMED_PARTS, STREAM_RECORD_PARTS
from ..core.normalizer import Normalizer, Provenance
from ..core.views import STREAM_RECORD_DECODER, decode_repairing
from ..events import Event
from ..paths import MAX_LINE, max_line_setting, parse_size

__all__ = [
    "line_batches",
    "StreamReader",
    "CHUNK_SIZE",
    "MAX_LINE",
    "OverlongLine",
    "max_line_setting",
    "parse_size",
]

CHUNK_SIZE = 1 << 20
BOM = b"\xef\xbb\xbf"

_START = 1024  # bytes of an overlong line kept for its warning


class OverlongLine(list):  # type: ignore[type-arg]
    """A batch standing for one line longer than the limit: ``start`` (its first bytes)
    and ``length``. It holds one empty line, so that a loop that does not look for it
    counts the line and skips it as blank."""

    def __init__(self, start: bytes, length: int) -> None:
        super().__init__((b"",))
        self.start = start[:_START]
        self.length = length


def line_batches(
    stream: BinaryIO,
    *,
    first: bytes = b"",
    chunk_size: int = CHUNK_SIZE,
    max_line: int | None = None,
) -> Iterator[list[bytes]]:
    """Yield lists of complete lines (without ``\\n``) as reads return them; a line longer
    than ``max_line`` (default ``max_line_setting()``) comes as an ``OverlongLine`` batch.

    ``stream.read(n)`` should return what is available (a raw, unbuffered file does), so
    a line written to a pipe is yielded as soon as its newline arrives. ``first`` is data
    already read from the stream (by format detection) to be treated as its beginning.
    """
    limit = max_line_setting() if max_line is None else max_line
    keep = min(_START, limit)  # an overlong line's start: what every way of meeting it has
    pending: list[bytes] = []  # pieces of a line whose newline has not come yet
    pending_size = 0
    skipping: OverlongLine | None = None  # an overlong line, measured to its end
    for chunk in _reads(stream, first, chunk_size):
        if skipping is not None:
            end = chunk.find(b"\n")
            if end < 0:
                skipping.length += len(chunk)
                continue
            skipping.length += end
            yield skipping
            skipping = None
            chunk = chunk[end + 1 :]
            if not chunk:
                continue
        if b"\n" not in chunk:
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size > limit:
                skipping = OverlongLine(_start_of(pending, keep), pending_size)
                pending, pending_size = [], 0
            continue
        lines = chunk.split(b"\n")
        if pending:
            if pending_size + len(lines[0]) > limit:
                length = pending_size + len(lines[0])
                lines[0] = OverlongLine(_start_of([*pending, lines[0]], keep), length)  # type: ignore[call-overload]
            else:
                pending.append(lines[0])
                lines[0] = b"".join(pending)
            pending, pending_size = [], 0
        tail = lines.pop()
        if tail:
            if len(tail) > limit:
                skipping = OverlongLine(tail[:keep], len(tail))
            else:
                pending.append(tail)
                pending_size = len(tail)
        if len(chunk) > limit or type(lines[0]) is OverlongLine:
            yield from _split_overlong(lines, limit, keep)
        else:
            yield lines
    if skipping is not None:
        yield skipping
    elif pending:
        yield [b"".join(pending)]


# A read of many short lines is handed on in slices of about this size: a 1 MB read of
# `{}` lines would otherwise be half a million line objects, then as many events, at once.
_SLICE = 64 << 10
_DENSE = 1024  # newlines in a read's first slice that make it one of short lines


def _reads(stream: BinaryIO, first: bytes, chunk_size: int) -> Iterator[bytes]:
    """The stream's reads (``first`` the first), a read of short lines cut at newlines
    into slices of about ``_SLICE`` bytes; OpenCode's records, of a KB or more, never are."""
    chunk = first or stream.read(chunk_size)
    while chunk:
        if len(chunk) > 2 * _SLICE and chunk.count(b"\n", 0, _SLICE) > _DENSE:
            start = 0
            while start < len(chunk):
                end = chunk.find(b"\n", start + _SLICE)
                end = len(chunk) if end < 0 else end + 1
                yield chunk[start:end]
                start = end
        else:
            yield chunk
        chunk = stream.read(chunk_size)


def _start_of(pieces: list[bytes], keep: int) -> bytes:
    """The first ``keep`` bytes of a line in pieces, without joining the whole of it."""
    start = b""
    for piece in pieces:
        start += piece[: keep - len(start)]
        if len(start) >= keep:
            break
    return start


def _split_overlong(lines: list[Any], limit: int, keep: int) -> Iterator[list[bytes]]:
    """``lines`` as batches, each overlong one (or ``OverlongLine`` already) on its own."""
    start = 0
    for at, line in enumerate(lines):
        if type(line) is OverlongLine or len(line) > limit:
            if at > start:
                yield lines[start:at]
            yield line if type(line) is OverlongLine else OverlongLine(line[:keep], len(line))
            start = at + 1
    if start < len(lines):
        yield lines[start:]


def _timestamp(record: Any) -> int | float | None:
    timestamp = record.timestamp
    return timestamp if type(timestamp) is int or type(timestamp) is float else None


def _session_of(record: Any) -> str | None:
    for value in (record.sessionID, record.session_id, record.sessionId):
        if isinstance(value, str) and value:
            return value
    part = record.part
    if part is not None and isinstance(part.sessionID, str) and part.sessionID:
        return part.sessionID
    return None


def _session_of_dict(record: dict[str, Any]) -> str | None:
    part = record.get("part")
    candidates = [record.get(k) for k in ("sessionID", "session_id", "sessionId")]
    if isinstance(part, dict):
        candidates.append(part.get("sessionID"))
    for value in candidates:
        if isinstance(value, str) and value:
            return value
    return None


class StreamReader:
    """Maps the lines of one ``--format json`` stream through a shared ``Normalizer``."""

    def __init__(self, normalizer: Normalizer, *, source: str | None = None) -> None:
        self.normalizer = normalizer
        self.source = source

    def feed(self, line_no: int, line: bytes) -> list[Event]:
        if line.startswith(BOM):  # a file's first line; each file of a `cat` may have one
            line = line[3:]
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or line.isspace():
            return []  # blank lines are not records
        norm = self.normalizer
        norm.records += 1
        try:
            record, line = decode_repairing(STREAM_RECORD_DECODER, line)
        except msgspec.ValidationError:
            return norm.rejected(line, self._prov(line_no, line), describe=self._describe)
        except (msgspec.DecodeError, RecursionError) as exc:
            return norm.not_json(line, exc, self._prov(line_no, line))
        session = record.sessionID
        if type(session) is not str or not session:
            session = _session_of(record)
        if session is not None and session != norm.session_id:
            norm.enter_session(session)
        return self._map(record, line_no, line)

    def feed_lines(self, lines: list[bytes], line_no: int) -> list[Event]:
        """``feed`` of each line in turn (``line_no`` is the first's): the events of all.

        The stream's hot loop, the same mapping as ``feed`` with fewer steps: a line that
        decodes as it is (no BOM, no CR, no lone surrogate: nearly every line) skips
        ``feed``'s checks, a ``step_start`` record (a third of a stream) is consumed without
        building anything, and a part record goes straight to ``Normalizer.part``; any
        other line goes through ``feed``, the reference."""
        norm = self.normalizer
        decode = STREAM_RECORD_DECODER.decode
        feed, map_record, part_prov = self.feed, self._map, self._part_prov
        part_types = STREAM_RECORD_PARTS
        norm_part = norm.part
        events: list[Event] = []
        records = 0
        try:
            for line_no, line in enumerate(lines, line_no):  # noqa: B020 - carried on
                try:
                    record = decode(line)
                except (msgspec.DecodeError, RecursionError):
                    events += feed(line_no, line)  # blank, BOM, repairable or a warning
                    continue
                if line[-1] == 13:  # a CRLF line end: not part of the record
                    events += feed(line_no, line)
                    continue
                records += 1
                session = record.sessionID
                if type(session) is not str or not session:
                    session = _session_of(record)
                # ``_session``: the ``session_id`` property, without a call per line
                if session is not None and session != norm._session:
                    norm.enter_session(session)
                part, record_type = record.part, record.type
                part_type = (
                    part_types.get(record_type)
                    if part is not None and type(record_type) is str
                    else None
                )
                if part_type is None:  # no part, or not a part record: what feed does
                    events += map_record(record, line_no, line)
                elif part_type == "step-start":
                    norm.step_open = True  # as note_consumed("step-start")
                else:
                    part.type = part_type  # the record type is the authority
                    role = "user" if part.synthetic is True and not norm.step_open else None
                    events += norm_part(part, part_prov(record, part, line_no, line), role=role)
        finally:
            norm.records += records
        return events

    def _part_prov(self, record: Any, part: Any, line_no: int, line: bytes) -> Provenance:
        timestamp = record.timestamp
        if type(timestamp) is not int and type(timestamp) is not float:
            timestamp = None
        message_id, part_id = part.messageID, part.id
        return Provenance(
            line=line_no,
            source=self.source,
            raw=line,
            time=timestamp,
            message_id=message_id if type(message_id) is str else None,
            part_id=part_id if type(part_id) is str else None,
        )

    def _map(self, record: Any, line_no: int, line: bytes) -> list[Event]:
        """The events of one decoded record, its session entered already."""
        norm = self.normalizer
        record_type = record.type
        part_type = STREAM_RECORD_PARTS.get(record_type) if type(record_type) is str else None
        part = record.part
        if part_type in CONSUMED_PARTS and part is not None:
            norm.note_consumed(part_type)
            return []  # step_start: nothing to map, so nothing to build
        if part_type is not None:
            if part is None:
                prov = self._prov(line_no, line, _timestamp(record))
                return norm.unknown(prov, type_=record_type)
            part.type = part_type  # the record type is the authority
            # The stream says nothing of roles. A synthetic text outside any step is one
            # OpenCode wrote as a user message (the "Continue if you have next steps…"
            # after an auto-compaction): a prompt, as the store and export call it.
            role = "user" if part.synthetic is True and not norm.step_open else None
            return norm.part(part, self._part_prov(record, part, line_no, line), role=role)
        prov = self._prov(line_no, line, _timestamp(record))
        if record_type == "error":
            return norm.error(record.error, prov)
        if record_type == "done":
            return self._done(record, prov)
        return norm.unknown(prov, type_=record_type if isinstance(record_type, str) else None)

    def _done(self, record: Any, prov: Provenance) -> list[Event]:
        """Upstream's closing ``{"type":"done","reason":"idle","rejected":[…]}`` (not in
        1.18.33): the run's end, consumed; each permission it auto-rejected is a
        ``permission`` event with ``reply: "reject"``, the user's record of what was refused."""
        rejected = record.rejected
        if not isinstance(rejected, list):
            return []
        events: list[Event] = []
        for item in rejected:
            name = item if isinstance(item, str) else None
            if isinstance(item, dict):  # a request object, should a release send those
                name = item.get("permission") if isinstance(item.get("permission"), str) else None
            events += self.normalizer.permission(prov, id_=None, permission=name, reply="reject")
        return events

    def _prov(self, line_no: int, line: bytes, time: Any = None) -> Provenance:
        return Provenance(line=line_no, source=self.source, raw=line, time=time)

    def finish(self) -> list[Event]:
        """Nothing is held back between lines."""
        return []

    def _describe(self, record: dict[str, Any]) -> tuple[Any, Any]:
        """Type and tool of a record of an unexpected shape; its session still counts."""
        self.normalizer.enter_session(_session_of_dict(record))
        part = record.get("part")
        return record.get("type"), part.get("tool") if isinstance(part, dict) else None
