"""Reader → normalizer → writer, wired for one ``normalize`` run.

The input format is detected from its first line: ``data:``/``event:``/``id:``/``:`` lines
are a captured server event stream (SSE), a lone ``{`` or an object holding ``info`` and
``messages`` is an ``opencode export`` document, anything else is the line-delimited JSON
of ``opencode run --format json``. Each input is read to its end before the next starts;
every input begins a new run for session and turn numbering, while ``seq`` and the
closing metrics cover the whole output.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple, Protocol

from ..core.normalizer import Normalizer
from ..errors import InputError
from ..events import Event
from ..output.jsonl import JsonlWriter
from ..paths import MAX_LINE_VARIABLE
from ..sources.stream import (
    BOM,
    CHUNK_SIZE,
    OverlongLine,
    StreamReader,
    line_batches,
    max_line_setting,
)

__all__ = [
    "Feeder",
    "open_reader",
    "event_batches",
    "OpenedInput",
    "open_input",
    "input_batches",
    "line_events",
    "normalize_streams",
    "import_sessions",
    "detect_format",
    "refuse_databases",
    "LineReader",
]

_SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


class LineReader(Protocol):
    def feed(self, line_no: int, line: bytes) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class Writer(Protocol):
    def write(self, events: Sequence[Event]) -> None: ...

    def end_batch(self) -> None: ...

    def flush(self) -> None: ...


def _is_event(line: bytes) -> bool:
    from ..sources.replay import is_event

    return is_event(line)


def detect_format(head: bytes) -> str:
    """``"sse"``, ``"export"``, ``"events"`` or ``"jsonl"`` from the first bytes of an input."""
    for line in head.split(b"\n"):
        line = line.strip()
        while line.startswith(BOM):  # each file of a `cat` may start with one
            line = line[len(BOM) :].lstrip()
        if not line:
            continue
        if line.startswith(_SSE_FIELDS):
            return "sse"
        if line.startswith(b'{"kind"') or (b'"kind"' in line and _is_event(line)):
            return "events"  # our own output, read again
        if line == b"{" or (
            line.startswith(b"{")
            and b'"messages"' in line
            and b'"info"' in line
            and not line.startswith(b'{"type"')
        ):
            return "export"
        return "jsonl"
    return "jsonl"


SQLITE_MAGIC = b"SQLite format 3\x00"


def refuse_database(head: bytes, name: str, command: str) -> None:
    """An SQLite file given as a stream would be thousands of warnings: an error instead,
    which names the option that reads it."""
    if head.startswith(SQLITE_MAGIC):
        import shlex

        what = "standard input" if name == "-" else name
        path = "FILE" if name == "-" else shlex.quote(name)
        raise InputError(
            f"{what} is an SQLite database, not a stream: use `{command} --db {path}` "
            "(--all for every session)"
        )


def refuse_databases(inputs: Sequence[tuple[str, Any]], command: str) -> None:
    """``refuse_database`` for every input that is a regular file, before anything is read
    or written: a database given among other files must not leave their events half written,
    nor an ``-o`` file emptied. Read with ``pread``, which leaves each file where it was."""
    import os
    import stat

    for name, stream in inputs:
        try:
            fd = stream.fileno()
            if stat.S_ISREG(os.fstat(fd).st_mode):
                refuse_database(os.pread(fd, len(SQLITE_MAGIC), 0), name, command)
        except (AttributeError, OSError, ValueError):
            continue  # no descriptor to look at: it is checked when it is read


def read_head(stream: BinaryIO, *, max_line: int | None = None) -> bytes:
    """Read until the first non-blank line is complete (or the input ends, or more than
    ``max_line`` bytes came: the line reader skips that line). Each chunk is looked at once:
    a pipe hands over 64 KiB at a time, and a first line of many MB must not be searched
    again from its start each time."""
    limit = max_line_setting() if max_line is None else max_line
    chunks: list[bytes] = []
    size = 0
    text_seen = False
    while True:
        chunk = stream.read(CHUNK_SIZE)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)
        if not text_seen:
            rest = chunk.lstrip()
            if not rest:
                continue  # blank so far: its line ends do not end the first line
            text_seen = True
            chunk = rest
        if b"\n" in chunk:
            return b"".join(chunks)


class Prepended:
    """A stream whose start was already read (``read_head``): that start, then the rest."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head, self._stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._stream.read(size)


def open_reader(
    kind: str,
    normalizer: Normalizer,
    *,
    source: str | None = None,
    deltas: bool = False,
    max_line: int | None = None,
) -> Any:
    """The reader of a detected ``kind``: a ``LineReader`` (``feed``/``finish``), or for
    ``export`` an ``ExportReader`` (``take``), which reads JSON values as they complete."""
    if kind == "export":
        from ..sources.export import ExportReader

        return ExportReader(normalizer, source=source)
    if kind == "sse":
        from ..sources.sse import SseReader

        return SseReader(normalizer, source=source, deltas=deltas, max_frame=max_line)
    if kind == "events":
        from ..sources.replay import EventReader

        return EventReader(normalizer, source=source)
    return StreamReader(normalizer, source=source)


class Feeder:
    """``event_batches`` the other way round, for input that arrives in pieces (an
    ``asyncio`` reader): ``feed`` any bytes as they come, get the events of the lines they
    complete; ``close`` at the end. The format is detected from the first line, as
    ``normalize`` does.

        >>> feeder = Feeder(Normalizer())
        >>> feeder.feed(b'{"type":"text","sessionID":"ses_1","part":{"type":"text","te')
        []
        >>> [e.text for e in feeder.feed(b'xt":"hi","time":{"end":1}}\n')]
        ['hi']
    """

    def __init__(self, normalizer: Normalizer, *, name: str = "-", deltas: bool = False) -> None:
        self.normalizer = normalizer
        self._name, self._deltas = name, deltas
        self._pending = bytearray()  # input not yet mapped: the head, or a line's start
        self._reader: Any = None
        self._export = False
        self._line_no = 0

    def feed(self, data: bytes) -> list[Event]:
        self._pending += data
        if self._reader is None and not self._start(final=False):
            return []
        end = self._pending.rfind(b"\n")
        if end < 0:
            return []
        complete = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        return self._map(complete)

    def close(self) -> list[Event]:
        """The events of what is left (a last line without its newline), then the readers'
        ``finish``. The caller adds ``normalizer.metrics()`` if it wants them."""
        if self._reader is None:
            self._start(final=True)
        rest, self._pending = bytes(self._pending), bytearray()
        if self._export:
            return self._reader.take(rest, final=True)
        events = self._map(rest + b"\n") if rest else []
        return events + self._reader.finish()

    def _start(self, *, final: bool) -> bool:
        """Choose the reader once the first non-blank line is complete (or at the end)."""
        head = bytes(self._pending)
        text = head.lstrip()
        if not final and (not text or b"\n" not in text):
            return False
        refuse_database(head, self._name, "import")
        kind = detect_format(head)
        self._reader = open_reader(kind, self.normalizer, deltas=self._deltas)
        self._export = kind == "export"
        return True

    def _map(self, complete: bytes) -> list[Event]:
        if self._export:
            return self._reader.take(complete)
        feed, events = self._reader.feed, []
        lines = complete.split(b"\n")
        lines.pop()  # after the last newline: nothing
        for line_no, line in enumerate(lines, self._line_no + 1):
            events += feed(line_no, line)
        self._line_no += len(lines)
        return events


def event_batches(
    inputs: Sequence[tuple[str, BinaryIO]],
    normalizer: Normalizer,
    *,
    deltas: bool = False,
    max_line: int | None = None,
) -> Iterator[list[Event]]:
    """The events of each ``(name, binary stream)`` in turn, one list per block of input
    read (an empty list when a block gave none: the writer may still flush then). A line
    longer than ``max_line`` bytes (default ``max_line_setting()``) is a ``warning``. The
    closing metrics are the caller's (``normalizer.metrics()``)."""
    several = len(inputs) > 1
    limit = max_line_setting() if max_line is None else max_line
    for name, stream in inputs:
        opened = open_input(name, stream, normalizer, several=several, limit=limit, deltas=deltas)
        yield from input_batches(opened, stream, normalizer, limit=limit)


class OpenedInput(NamedTuple):
    """One input begun: its name in events (``source``), the bytes read to detect its
    format (``head``), the format and its reader."""

    source: str | None
    head: bytes
    kind: str
    reader: Any


def open_input(
    name: str,
    stream: BinaryIO,
    normalizer: Normalizer,
    *,
    several: bool,
    limit: int,
    deltas: bool = False,
) -> OpenedInput:
    """Begin an input: a new run for sessions and turns, its format read off its head."""
    normalizer.reset()
    source = name if several else None
    head = read_head(stream, max_line=limit)
    refuse_database(head, name, "import")
    kind = detect_format(head)
    reader = open_reader(kind, normalizer, source=source, deltas=deltas, max_line=limit)
    return OpenedInput(source, head, kind, reader)


def input_batches(
    opened: OpenedInput, stream: BinaryIO, normalizer: Normalizer, *, limit: int
) -> Iterator[list[Event]]:
    """The events of one opened input, a list per block read, its reader's ``finish`` last."""
    reader, head, source = opened.reader, opened.head, opened.source
    if opened.kind == "export":
        lines = 0
        for batch in line_batches(stream, first=head, max_line=limit):
            lines += len(batch)
            if type(batch) is OverlongLine:
                # An empty line in its place keeps the reader's line numbers; the value
                # it was part of no longer parses (a warning of its own).
                yield reader.take(b"\n") + overlong(normalizer, batch, lines, limit, source)
                continue
            batch.append(b"")  # the line ends the batch took off
            yield reader.take(b"\n".join(batch))
        yield reader.take(b"", final=True)
        return
    batches = line_batches(stream, first=head, max_line=limit)
    yield from line_events(reader, batches, normalizer, limit=limit, source=source)
    yield reader.finish()


def line_events(
    reader: Any,
    batches: Iterator[list[bytes]],
    normalizer: Normalizer,
    *,
    limit: int,
    source: str | None,
    line_no: int = 0,
) -> Generator[list[Event], None, int]:
    """The events of each batch of lines (``line_batches``) through a ``LineReader``, the
    first line numbered ``line_no + 1``; returns the number of the last line read."""
    feed = reader.feed
    feed_lines = getattr(reader, "feed_lines", None)
    for batch in batches:
        if type(batch) is OverlongLine:
            line_no += 1
            # an empty line in its place (a server event's frame ends there)
            yield feed(line_no, b"") + overlong(normalizer, batch, line_no, limit, source)
            continue
        if feed_lines is not None:  # the run stream's reader maps a batch in one call
            yield feed_lines(batch, line_no + 1)
            line_no += len(batch)
            continue
        out: list[Event] = []
        extend = out.extend
        first = line_no + 1
        for line_no, line in enumerate(batch, first):  # line_no carries on to the next batch
            extend(feed(line_no, line))
        yield out
    return line_no


def normalize_streams(
    inputs: Sequence[tuple[str, BinaryIO]],
    writer: Writer,
    *,
    keep_raw: bool = False,
    metrics: bool = True,
    deltas: bool = False,
    max_line: int | None = None,
    mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    workers: int | None = None,
) -> Normalizer:
    """Normalize each ``(name, binary stream)`` in turn into ``writer``; a line longer than
    ``max_line`` bytes (default ``max_line_setting()``) is a ``warning``. ``mcp_servers``
    gives the MCP servers of a session's directory (``Normalizer``).

    A large regular file of run-stream JSON Lines, written as JSON Lines to a real file
    descriptor, is mapped by one worker process per core (``streamfan``), with the same
    output; ``workers=1`` keeps to this process.
    """
    normalizer = Normalizer(keep_raw=keep_raw, mcp_servers=mcp_servers)
    write, end_batch = writer.write, writer.end_batch
    several = len(inputs) > 1
    limit = max_line_setting() if max_line is None else max_line
    for name, stream in inputs:
        opened = open_input(name, stream, normalizer, several=several, limit=limit, deltas=deltas)
        batches: Iterator[list[Event]] | None = None  # what this process maps: all, or the rest
        if (
            opened.kind == "jsonl"
            and workers != 1
            and type(writer) is JsonlWriter
            and _large_file(stream, opened.head)
        ):
            from . import streamfan

            batches = streamfan.normalize_file(
                stream, opened, normalizer, writer, limit=limit, workers=workers
            )
        if batches is None:
            batches = input_batches(opened, stream, normalizer, limit=limit)
        for events in batches:
            if events:
                write(events)
            end_batch()
    if metrics:
        writer.write([normalizer.metrics()])
    writer.flush()
    return normalizer


# A regular file with at least this much left to read is worth a worker per core.
PARALLEL_BYTES = 8 << 20


def _large_file(stream: BinaryIO, head: bytes) -> bool:
    """Whether ``stream`` is a regular file with ``PARALLEL_BYTES`` or more still to read
    (beyond ``head``, already read), read unbuffered (its descriptor's offset is where its
    reader is): checked before ``streamfan`` is imported, at the cost of an ``fstat``."""
    import os
    import stat

    try:
        fd = stream.fileno()
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return False
        return status.st_size - os.lseek(fd, 0, os.SEEK_CUR) + len(head) >= PARALLEL_BYTES
    except (AttributeError, OSError, ValueError):
        return False


def overlong(
    normalizer: Normalizer, line: OverlongLine, line_no: int, limit: int, source: str | None
) -> list[Event]:
    """The ``warning`` for a line longer than ``limit``: its length and its start."""
    from ..core.normalizer import Provenance

    normalizer.count_record()
    message = (
        f"line of {line.length:,} bytes is longer than the limit of {limit:,} "
        f"(--max-line, ${MAX_LINE_VARIABLE}): skipped"
    )
    text = line.start.decode("utf-8", "replace")
    return normalizer.warning(message, text, Provenance(line=line_no, source=source))


def import_sessions(
    store: Any,
    session_ids: Sequence[str],
    writer: Writer,
    *,
    keep_raw: bool = False,
    metrics: bool = True,
    workers: int | None = None,
    mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
) -> Normalizer:
    """Stored sessions, one after another, through the same normalizer into ``writer``.

    Many sessions of a SQLite store written as JSON Lines are mapped by one worker process
    per core (``fanout``), with the same output; ``workers=1`` keeps to this process.
    """
    # Here, not at the top: `normalize` reads no store.
    from ..sources.transcript import map_session
    from ..store.rows import offers_fast_scans, parents_of
    from ..workers import can_share
    from . import fanout

    normalizer = Normalizer(keep_raw=keep_raw, mcp_servers=mcp_servers)
    normalizer.several_sessions = len(set(session_ids)) > 1
    normalizer.parents = parents_of(store)
    if len(session_ids) >= fanout.MIN_SESSIONS:
        grow_heap_in_large_steps()
    if workers is None:
        workers = fanout.workers_for(len(session_ids))
    out = getattr(writer, "out", None)
    if workers > 1 and can_share(out) and offers_fast_scans(store) and session_ids:
        writer.flush()
        tags = writer.tags if isinstance(writer, JsonlWriter) else None
        costs = fanout.import_in_workers(
            store, session_ids, out, normalizer, workers=workers, tags=tags
        )
    else:
        costs = []
        try:
            for session_id in session_ids:
                for events in map_session(normalizer, store, session_id, costs):
                    writer.write(events)
                writer.end_batch()
        except InputError:
            writer.flush()  # a database damaged part-way: the events read so far, then why
            raise
    normalizer.totals.cost = sum_in_order(costs)
    if metrics:
        writer.write([normalizer.metrics()])
    writer.flush()
    return normalizer


# glibc's mallopt parameters.
_M_TOP_PAD = -2  # extra bytes the heap grows by, and keeps when it trims
_M_MMAP_THRESHOLD = -3  # blocks this large or larger get a mapping of their own
_MAX_HEAP_BLOCK = 32 << 20  # glibc's own ceiling for its adaptive threshold on 64 bits


def grow_heap_in_large_steps() -> None:
    """Ask glibc's malloc to grow and trim its heap 16 MB at a time instead of 128 KB.

    A large import frees and allocates row data of tens of KB all the time; with the
    default, the heap's top is trimmed and grown again over and over, and each new page
    costs a page fault (measured: 78,000 faults and 0.2 s of a 5 s import, against 7,000
    faults with the pad). Pages the heap reserves but never touches cost no memory.
    Setting the pad turns off glibc's adaptive mmap threshold, which would leave every
    block of 128 KB or more (a large tool output) to a mapping of its own, faulted in
    afresh each time; the threshold is set to where the adaptive one may rise to instead.
    Best effort: elsewhere than glibc (or without ctypes) this does nothing. The setting
    is process-wide and lasts; forked workers inherit it.
    """
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        mallopt(_M_MMAP_THRESHOLD, _MAX_HEAP_BLOCK)
        mallopt(_M_TOP_PAD, 16 << 20)
    except (OSError, AttributeError, ImportError):  # no glibc, ctypes or C library: defaults
        pass


def sum_in_order(values: Sequence[float]) -> float:
    """Left to right, one addition at a time (``sum`` may compensate on newer Pythons)."""
    total = 0.0
    for value in values:
        total += value
    return total
