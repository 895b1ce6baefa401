"""``normalize`` of a large run-stream file in one worker process per core, in order.

The contract: the output is byte for byte what one process writes (tested), only sooner.
A normalizer carries state from line to line (``seq``, line numbers, each session's turns
and part ids, the session current, whether a step is open), so the file cannot simply be
split. What makes it possible: a chunk whose sessions are new, but perhaps its first,
which carries on the session current before it, maps the same from a fresh normalizer as
from the true one, but for numbers a worker can shift once it knows where its chunk
starts, and for part ids seen before the cut, which the parent can check. So:

- **Cuts** (``cut_points``): the file, as large as it is when read begins, is cut about
  every ``CHUNK_BYTES``: at a line where the ``sessionID`` differs from the line before's
  (read off the bytes, no decode), looked for within ``WINDOW_BYTES``, else at the first
  line there. A log of many runs is cut between runs; one long run, anywhere. A worker
  holds a chunk's events: memory stays bounded. The last chunk runs to the end of the
  file, however long it has grown.
- **Speculation**: worker *w* of *W* maps chunks *w*, *w + W*, … each with a fresh
  normalizer, holds the events (at most ``HELD_EVENTS``: a chunk of more, such as short
  lines that are no records, a warning each, is left to this process) and sends this
  process what the chunk did: its events and
  lines, the sessions it entered, each one's turns, the part ids of its first session and
  of the sessions it remembers at its end, its counters, its costs in order, whether the
  lines before its first session left a mark (an event, a part id, a turn: one process
  would have left it on the session current there), whether it went back to its first
  session after another, and whether it asked if a step was open before any step told it
  (``_StepUnknown``). A worker's normalizer knows what this input's normalizer learnt
  before it (subagents' parents and directories an earlier input named).
- **Check**, here, in chunk order: the chunk's sessions are all new to this input but its
  first, which may be the session current before it (carried on: then none of its part
  ids was seen before, read only where the ranges of the ids meet, ``_Parts``; and the
  chunk did not leave it and come back); nothing before its first session left a mark;
  and it did not ask about an open step when one was open.
  Then the fresh mapping is the true one, and this process hands the worker its token:
  the ``seq`` and line number its chunk starts at, and the turns of the session it
  carries on. The worker shifts its events, writes them to the shared output, flushes and
  says so; only then does the next chunk's token go out, so the writes land in order.
- **Otherwise** (a session that comes back later, a part seen again, a mark made before a
  chunk's first session, a chunk too dense to hold): every worker is told to stop, and
  this process maps the rest itself, from the state the chunks before add up to
  (``_Carry.settle``: each session's turns and part ids are its chunk's, or a carried-on
  session's, its chunks' together).
  Correct always; as fast as the chunks that fit, then as fast as one process.

Costs are added one by one in the order one process adds them, so even the float sum is
the same. Only for the JSON Lines writer over a real file descriptor, where ``fork``
exists; ``normalize_file`` returns None (nothing done) otherwise. Nothing here prints.

    >>> CHUNK_BYTES >= 1 << 20
    True
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
from collections import OrderedDict, deque
from collections.abc import Generator, Iterator
from typing import Any, BinaryIO

from ..core.normalizer import REMEMBERED_SESSIONS, Counters, Normalizer
from ..errors import InputError
from ..events import Event, Usage
from ..output.jsonl import JsonlWriter
from ..sources.stream import StreamReader, line_batches
from ..workers import (
    Crew,
    can_share,
    child_signals,
    failure_report,
    raise_failure,
    read_exactly,
    worker_count,
)
from .normalize import OpenedInput, line_events

__all__ = ["CHUNK_BYTES", "WINDOW_BYTES", "HELD_EVENTS", "cut_points", "normalize_file", "LAST_RUN"]

CHUNK_BYTES = 2 << 20  # input per chunk: a few thousand records, a few MB held per worker
WINDOW_BYTES = 256 << 10  # how far past each target a cut is looked for
# Events a worker holds for a chunk at most: an ordinary chunk makes a few thousand, but
# one of short lines that are no records (a warning each) makes a hundred times as many;
# such a chunk is not held but mapped here, as it comes (memory stays as one process's).
HELD_EVENTS = 20_000
_HEAD = 512  # a record's own sessionID comes within its first bytes (type, timestamp first)
_SESSION_KEY = b'"sessionID":"'

# (seq, line, turns) a chunk starts at, turns being those of the session it carries on;
# (-1, -1, -1): stop
_TOKEN = struct.Struct("<qqq")
_STOP = (-1, -1, -1)
_LENGTH = struct.Struct("<Q")  # a message's length, before its pickle

# The last run, for tests: chunks cut, workers started, the chunk that fell back (or None).
LAST_RUN: dict[str, Any] = {}


# ------------------------------------------------------------------------------ cuts


def _session_in(line: bytes) -> bytes | None:
    """The record's ``sessionID`` as bytes, if its start names one."""
    at = line.find(_SESSION_KEY, 0, _HEAD)
    if at < 0:
        return None
    at += len(_SESSION_KEY)
    end = line.find(b'"', at, at + _HEAD)
    return line[at:end] if end > at else None


def _cut_near(fd: int, at: int, end: int) -> int | None:
    """Where to cut near ``at`` (before ``end``), read off one window of ``WINDOW_BYTES``
    from the first line that starts after it (past a line longer than that, the window
    after it): the first whole line there whose session is not the one of the line before
    it; else the first that names a session (a chunk that began with a line of no
    session, a stray line that is no record, would have left a mark before its first
    session: the rest would go to one process); else the first line. None if no line
    starts before ``end``."""
    while True:
        window = os.pread(fd, min(WINDOW_BYTES, end - at), at) if at < end else b""
        if not window:
            return None  # the end, or a file shorter than it was: nothing more to cut
        first = window.find(b"\n") + 1
        if first:
            break
        at += len(window)  # inside a line longer than the window
    if at + first >= end:
        return None
    named = None
    previous: bytes | None = None
    start = first
    while (stop := window.find(b"\n", start)) >= 0:  # the window's last line may be cut short
        session = _session_in(window[start:stop])
        if session is not None:
            if previous is not None and session != previous:
                return at + start
            if named is None:
                named = at + start
            previous = session
        start = stop + 1
    return at + first if named is None else named


def cut_points(fd: int, start: int, end: int, chunk: int | None = None) -> list[int]:
    """Where the chunks of ``[start, end)`` start: ``start``, then about every ``chunk``
    bytes (``CHUNK_BYTES``) a line where the session changes, looked for in a window of
    ``WINDOW_BYTES``, else a line there (a chunk that carries a session on: one long run is
    shared out too, and a worker holds no more than a chunk's events): ``_cut_near``."""
    size = CHUNK_BYTES if chunk is None else chunk
    cuts = [start]
    target = start + size
    while target < end:
        cut = _cut_near(fd, target, end)
        if cut is None:
            break  # one line to the end: it cannot be cut
        cuts.append(cut)
        target = cut + size
    return cuts


# ------------------------------------------------------------------------------ parent


def normalize_file(
    stream: BinaryIO,
    opened: OpenedInput,
    normalizer: Normalizer,
    writer: JsonlWriter,
    *,
    limit: int,
    workers: int | None = None,
) -> Iterator[list[Event]] | None:
    """Normalize the rest of ``stream`` (a regular file, ``opened`` already) into
    ``writer`` with worker processes. Returns the events of what is left for this process
    to map and the caller to write (none, unless a chunk failed its check), the workers
    gone by then; or None, having read and written nothing more, where they cannot help
    (one process, one chunk, an output they cannot share)."""
    count = worker_count() if workers is None else workers
    out = writer.out
    if count < 2 or not hasattr(os, "fork") or not can_share(out):
        return None
    fd = stream.fileno()
    start = os.lseek(fd, 0, os.SEEK_CUR) - len(opened.head)
    cuts = cut_points(fd, start, os.fstat(fd).st_size)
    if len(cuts) < 2:
        return None
    count = min(count, len(cuts))
    LAST_RUN.clear()
    LAST_RUN.update(chunks=len(cuts), workers=count, fell_back=None)
    writer.flush()
    crew = _Crew(count)
    try:
        for index in range(count):
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                _worker_main(crew, index, fd, cuts, opened.source, normalizer, writer, limit)
            crew.pids.append(pid)
        crew.started()
        carry = _Carry(normalizer)
        for number in range(len(cuts)):
            summary = crew.receive(number)
            if not carry.fits(summary, number):
                crew.stop()
                crew.kill()  # none holds a token (none is writing): the rest is mapped here
                LAST_RUN["fell_back"] = number
                LAST_RUN["read_again"] = carry.session is None
                if carry.session is not None:
                    carry.settle(normalizer)  # the state where the workers stopped
                    line_no = carry.lines
                else:  # no session yet: the state of none, made again by reading again
                    line_no = _read_again(fd, start, cuts[number], opened, normalizer, limit)
                rest = line_batches(_Range(fd, cuts[number], None), max_line=limit)
                source = opened.source
                return line_events(
                    opened.reader, rest, normalizer, limit=limit, source=source, line_no=line_no
                )
            crew.token(number, carry.seq, carry.lines, carry.offset)
            carry.add(summary)
            crew.receive(number)  # written
        # The input's end: the part ids are left unread (for a long run, every part id of
        # it), as nothing reads them before the next input's ``reset`` clears them.
        carry.settle(normalizer, parts=False)
        return iter(())
    except BaseException:
        crew.kill()
        raise
    finally:
        crew.close()
        crew.reap()


def _read_again(
    fd: int, start: int, end: int, opened: OpenedInput, normalizer: Normalizer, limit: int
) -> int:
    """Map ``[start, end)`` again without writing it (the workers wrote it), to make the
    normalizer's state what it is there; the number of its last line."""
    batches = line_batches(_Range(fd, start, end), max_line=limit)
    source = opened.source
    return _drain(line_events(opened.reader, batches, normalizer, limit=limit, source=source))


def _drain(
    mapping: Generator[list[Any], None, int],
    held: list[Any] | None = None,
    most: int | None = None,
) -> int | None:
    """Run ``line_events`` to its end, its non-empty batches kept in ``held`` (if given);
    the number of the last line it read. None, stopped there, once ``held`` holds more than
    ``most`` events."""
    count = 0
    try:
        while True:
            events = next(mapping)
            if events and held is not None:
                held.append(events)
                count += len(events)
                if most is not None and count > most:
                    return None
    except StopIteration as done:
        return done.value


class _Carry:
    """What the chunks mapped so far add up to, as one process would have it: the next
    ``seq`` and line, the sessions entered, each session's turns, the part ids of the
    sessions a normalizer remembers (``Normalizer._seen_by_session``), the session current,
    whether a step is open, the counters and the cost sum. A chunk's sessions are new but
    perhaps its first, which may carry on the session current before it: so each session's
    turns and part ids are one chunk's, or for a session carried on, those before it
    (``prior``) and its chunk's; and the sessions remembered are the last chunks' last ones,
    in order."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.seq = normalizer.seq
        self.lines = 0
        self.seen: set[str] = set()
        self.turns = dict(normalizer._session_turns)
        self.remembered = OrderedDict(normalizer._seen_by_session)
        # The chunks' remembered sessions, still pickled: (how many, pickle, the one session
        # if it holds only one), only as many of the last chunks as hold the sessions
        # remembered, read when the state is wanted.
        self.recent: deque[tuple[int, bytes, str | None]] = deque()
        self.recent_count = 0
        self.session = normalizer.session_id
        self.first = normalizer._first_session
        self.several = normalizer.several_sessions
        self.step_open = normalizer.step_open
        self.counters = Counters()
        self.cost = normalizer.totals.cost
        # The current session's part ids (read only if a chunk that carries the session on
        # may hold one of them).
        self.tail = _Parts(set(normalizer._seen_parts) if self.session is not None else set())
        # Sessions carried on from one chunk into the next → their part ids before the
        # chunk that carried them on last (as many as a normalizer remembers).
        self.prior: OrderedDict[str, _Parts] = OrderedDict()
        self.carried_on = False  # the chunk checked last carries ``session`` on
        self.offset = 0  # and the turns that session had before it

    def fits(self, summary: dict[str, Any], number: int) -> bool:
        """Whether the chunk's fresh mapping is what one process would have made, but for
        the numbers its worker shifts (``offset``: the turns of a session carried on)."""
        self.carried_on, self.offset = False, 0
        if summary.get("dense"):
            return False  # not held: mapped here
        sessions, first = summary["sessions"], summary["first"]
        carried_on = first is not None and first == self.session
        if carried_on:
            if summary["first_again"]:
                return False  # back to it after another: its part ids are not all at hand
            sessions = sessions - {first}
        if sessions & self.seen:
            return False  # a session seen before: its turns and part ids carry on
        if summary["headless"] and number > 0:
            return False  # marks made under no session: one process made them on another
        if summary["asked_step"] and self.step_open is True:
            return False
        if carried_on:
            if not self.tail.disjoint(summary["first_span"], summary["first_parts"]):
                return False  # a part seen before the cut: one process skips it
            self.carried_on, self.offset = True, self.turns.get(first, 0)
        return True

    def add(self, summary: dict[str, Any]) -> None:
        """Count in a chunk ``fits`` said yes to."""
        self.seq += summary["events"]
        self.lines += summary["lines"]
        sessions, first, last = summary["sessions"], summary["first"], summary["last"]
        self.seen |= sessions
        if sessions:
            if self.first is None:
                self.first = first
            if not self.several:
                self.several = any(session != self.first for session in sessions)
        count, remembered = summary["remembered"]
        only = last if count == 1 else None
        turns = summary["turns"]
        if self.carried_on:
            # The session is counted once, with the chunk it came from: or with this one,
            # if that chunk held it alone and counted it (then this one holds it on in its
            # place: a long run's chunks are not all kept).
            if self.recent and self.recent[-1][2] == first:
                before = self.recent.pop()[0]
                self.recent_count -= before
                count += before - 1
            else:
                count -= 1
            self.prior.pop(first, None)
            self.prior[first] = self.tail
            if len(self.prior) > REMEMBERED_SESSIONS:
                self.prior.popitem(last=False)
            turns = dict(turns)
            turns[first] = turns.get(first, 0) + self.offset
        self.turns.update(turns)
        self.recent.append((count, remembered, only))
        self.recent_count += count
        while self.recent_count - self.recent[0][0] >= REMEMBERED_SESSIONS:
            self.recent_count -= self.recent.popleft()[0]  # wholly pushed out by later ones
        if last is not None:
            if not (self.carried_on and last == first):  # a session new in the chunk
                self.tail = _Parts(set())  # its part ids are the chunk's
            self.session = last
            self.tail.add(summary["last_parts"], summary["last_span"])
        if summary["step_open"] is not None:
            self.step_open = summary["step_open"]
        self.counters.merge(summary["counters"], cost=False)
        cost = self.cost
        for value in summary["costs"]:
            cost += value
        self.cost = cost

    def settle(self, normalizer: Normalizer, *, parts: bool = True) -> None:
        """Leave ``normalizer`` as one process leaves it after the chunks added so far;
        but for the part ids of the sessions it remembers, unless ``parts``."""
        normalizer._session_turns = self.turns
        remembered = self.remembered if parts else OrderedDict()
        prior = self.prior
        latest: OrderedDict[str, set[str]] = OrderedDict()  # each session's last chunk's
        for _, pickled, _ in self.recent if parts else ():
            for session, ids in pickle.loads(pickled):
                latest.pop(session, None)  # entered again since: more recent now
                latest[session] = ids
        for session, ids in latest.items():
            before = prior.get(session)
            remembered.pop(session, None)
            remembered[session] = ids if before is None else before.whole() | ids
        while len(remembered) > REMEMBERED_SESSIONS:
            remembered.popitem(last=False)
        self.recent.clear()
        self.recent_count = 0
        normalizer._seen_by_session = remembered
        if self.session is not None:
            normalizer.enter_session(self.session)  # its part ids current, most recent
        normalizer._first_session = self.first
        normalizer.several_sessions = self.several
        normalizer.step_open = self.step_open
        normalizer.seq = self.seq
        normalizer.merge(self.counters, cost=False)
        normalizer.totals.cost = self.cost


class _Parts:
    """One session's part ids, as chunks tell them: each chunk's set, still pickled, with
    its least and greatest id. Only sets whose ranges meet can share an id, and a long
    run's part ids nearly ascend (a step's parts are made in order, told as they end): a
    chunk that carries it on meets the chunk before it at most, so the parent reads that
    one set, not every part id of the run (its memory stays the pickles')."""

    __slots__ = ("spans",)

    def __init__(self, read: set[str]) -> None:
        self.spans: list[tuple[str, str, set[str] | bytes]] = []
        if read:
            self.spans.append((min(read), max(read), read))

    def add(self, pickled: bytes, span: tuple[str, str] | None) -> None:
        """Count in a chunk's pickled set, its least and greatest id (None: empty)."""
        if span is not None:
            self.spans.append((*span, pickled))

    def whole(self) -> set[str]:
        """Every part id."""
        ids: set[str] = set()
        for _, _, each in self.spans:
            ids |= pickle.loads(each) if type(each) is bytes else each
        return ids

    def disjoint(self, span: tuple[str, str] | None, pickled: bytes) -> bool:
        """Whether the pickled set, its least and greatest id ``span`` (None: empty),
        holds none of these: read only where their ranges meet."""
        if span is None:
            return True
        low, high = span
        ids: set[str] | None = None
        for least, most, each in self.spans:
            if least <= high and low <= most:
                if ids is None:
                    ids = pickle.loads(pickled)
                if not ids.isdisjoint(pickle.loads(each) if type(each) is bytes else each):
                    return False
        return True


class _Crew(Crew):
    """The workers' pipes: an inbox of tokens each, and an outbox of messages each (a
    length, then a pickle), read in chunk order, one worker at a time."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.inboxes = [self._pipe() for _ in range(count)]
        self.outboxes = [self._pipe() for _ in range(count)]
        self.stopped = False

    def ends(self, index: int) -> tuple[int, int]:
        """Worker ``index``'s own ends (its inbox to read, its outbox to write), every
        other end closed in it, so that whoever is gone reads as an end of file."""
        mine = self.inboxes[index][0], self.outboxes[index][1]
        self.keep(*mine)
        return mine

    def started(self) -> None:
        """Close the workers' ends here, so that a worker gone is an end of file."""
        for read_end, _ in self.inboxes:
            self._close(read_end)
        for _, write_end in self.outboxes:
            self._close(write_end)

    def receive(self, number: int) -> dict[str, Any]:
        """The next message of chunk ``number``'s worker: raises what it failed with."""
        message = _receive(self.outboxes[number % self.count][0])
        if message is None:
            self.stop()
            raise InputError("a normalize worker stopped")
        if "error" in message:
            self.stop()
            raise_failure(message)
        return message

    def token(self, number: int, seq: int, line: int, turns: int) -> None:
        try:
            os.write(self.inboxes[number % self.count][1], _TOKEN.pack(seq, line, turns))
        except BrokenPipeError:  # the worker is gone (killed): not our output's reader
            self.stop()
            raise InputError("a normalize worker stopped") from None

    def stop(self) -> None:
        """Tell every worker to stop (once): a token that is no position; and read from
        none again, so that a worker blocked sending a summary meets a closed pipe."""
        if self.stopped:
            return
        self.stopped = True
        for _, write_end in self.inboxes:
            with contextlib.suppress(OSError):
                os.write(write_end, _TOKEN.pack(*_STOP))
        for read_end, _ in self.outboxes:
            self._close(read_end)


def _receive(fd: int) -> dict[str, Any] | None:
    head = read_exactly(fd, _LENGTH.size)
    if head is None:
        return None
    (length,) = _LENGTH.unpack(head)
    body = read_exactly(fd, length)
    return None if body is None else pickle.loads(body)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


# ------------------------------------------------------------------------------ worker


class _Range:
    """Bytes ``[start, end)`` of a file (``end`` None: to its end, as it grows), read with
    ``pread``: the descriptor's offset, shared with the parent, is never moved."""

    def __init__(self, fd: int, start: int, end: int | None) -> None:
        self.fd, self.at, self.end = fd, start, end

    def read(self, size: int = -1) -> bytes:
        if self.end is not None:
            size = min(size, self.end - self.at)
            if size <= 0:
                return b""
        try:
            data = os.pread(self.fd, size, self.at)
        except OSError as exc:
            raise InputError(f"cannot read the input: {exc.strerror or exc}") from None
        self.at += len(data)
        return data


class _StepUnknown:
    """A chunk's "is a step open?" before any step of its own said: as False, and noted
    when asked, for the parent to check against what the chunks before left."""

    __slots__ = ("asked",)

    def __init__(self) -> None:
        self.asked = False

    def __bool__(self) -> bool:
        self.asked = True
        return False


class _ChunkNormalizer(Normalizer):
    """A fresh normalizer, as the one of this input but for what its lines taught it,
    that notes what ``_Carry.fits`` checks: the sessions entered; whether anything before
    the first of them left a mark that one process would have left on the session then
    current (an event, a part id seen, a turn: ``headless``); and whether it asked if a
    step was open before a step of its own said."""

    def __init__(self, parent: Normalizer) -> None:
        super().__init__(keep_raw=parent.keep_raw, mcp_servers=parent.mcp_servers)
        # What earlier inputs taught (an export's or a server's subagents and directories):
        # kept from one input to the next, as ``reset`` keeps them.
        self.parents, self.directories = parent.parents, parent.directories
        self.entered: set[str] = set()
        self.step_unknown = self.step_open = _StepUnknown()  # type: ignore[assignment]
        self.headless = False
        # The part ids of the first session while it is current (the parent checks them
        # against the ones before, if the chunk carries that session on), and whether the
        # chunk went back to it after another.
        self.first_parts: set[str] = set()
        self.first_again = False

    def enter_session(self, session_id: str | None) -> None:
        if session_id is not None and session_id != self._session:
            if not self.entered:
                self.headless = self.marked()
            elif session_id == self._first_session:
                self.first_again = True
            self.entered.add(session_id)
            super().enter_session(session_id)
            if len(self.entered) == 1:
                self.first_parts = self._seen_parts
            return
        super().enter_session(session_id)

    def marked(self) -> bool:
        """Whether the lines mapped so far, under no session, left a mark on it."""
        return self.seq > 0 or bool(self._seen_parts) or bool(self._session_turns)


def _worker_main(
    crew: _Crew,
    index: int,
    fd: int,
    cuts: list[int],
    source: str | None,
    parent: Normalizer,
    writer: JsonlWriter,
    limit: int,
) -> None:
    """The forked worker's whole life; leaves with ``os._exit``."""
    child_signals()
    inbox, outbox = crew.ends(index)
    code = 0
    try:
        out = JsonlWriter(writer.out, buffered=True, tags=writer.tags)
        for number in range(index, len(cuts), crew.count):
            end = cuts[number + 1] if number + 1 < len(cuts) else None
            normalizer = _ChunkNormalizer(parent)
            held, summary = _map_chunk(normalizer, fd, cuts[number], end, source, limit)
            _send(outbox, summary)
            data = read_exactly(inbox, _TOKEN.size)
            if data is None or _TOKEN.unpack(data) == _STOP:
                break
            seq, line, turns = _TOKEN.unpack(data)
            if turns:  # the turns of the session it carries on, before the chunk
                _count_on(held, normalizer._first_session, turns)
            for events in held:
                out.write_shifted(events, seq, line)
                out.end_batch()
            out.flush()
            held.clear()
            _send(outbox, {"written": number})
    except BaseException as exc:  # the parent raises it
        code = 1
        with contextlib.suppress(BaseException):
            _send(outbox, failure_report(exc))
    os._exit(code)


def _map_chunk(
    normalizer: _ChunkNormalizer,
    fd: int,
    start: int,
    end: int | None,
    source: str | None,
    limit: int,
) -> tuple[list[Any], dict[str, Any]]:
    """A chunk's events, held, and what ``_Carry`` needs to know of it."""
    reader = StreamReader(normalizer, source=source)
    batches = line_batches(_Range(fd, start, end), max_line=limit)
    held: list[Any] = []
    mapping = line_events(reader, batches, normalizer, limit=limit, source=source)
    lines = _drain(mapping, held, HELD_EVENTS)
    if lines is None:  # a chunk of many more events than lines' worth: not held
        held.clear()
        return held, {"dense": True}
    step = normalizer.step_open
    first_parts = pickle.dumps(normalizer.first_parts, pickle.HIGHEST_PROTOCOL)
    last_parts = normalizer._seen_parts
    summary = {
        "events": normalizer.seq,
        "lines": lines,
        "sessions": normalizer.entered,
        "first": normalizer._first_session,
        "last": normalizer.session_id,
        "headless": normalizer.headless if normalizer.entered else normalizer.marked(),
        "asked_step": normalizer.step_unknown.asked,
        "step_open": None if type(step) is _StepUnknown else step,
        "counters": normalizer.snapshot(),
        # Each usage event's cost, in order (the events are the chunk's usage, one each).
        "costs": [event.cost for events in held for event in events if type(event) is Usage],
        "turns": normalizer._session_turns,
        "first_again": normalizer.first_again,
        "first_parts": first_parts,
        "first_span": _span(normalizer.first_parts),
        # The part ids of the session current at the end, which the next chunk may carry on.
        "last_parts": (
            first_parts
            if last_parts is normalizer.first_parts
            else pickle.dumps(last_parts, pickle.HIGHEST_PROTOCOL)
        ),
        "last_span": _span(last_parts),
        # (how many, their pickle): the parent reads only the last chunks' (``_Carry``).
        "remembered": (
            len(normalizer._seen_by_session),
            pickle.dumps(list(normalizer._seen_by_session.items()), pickle.HIGHEST_PROTOCOL),
        ),
    }
    return held, summary


def _span(ids: set[str]) -> tuple[str, str] | None:
    """The least and the greatest of ``ids`` (None: none)."""
    return (min(ids), max(ids)) if ids else None


def _count_on(held: list[Any], session: str | None, turns: int) -> None:
    """Number the usage events of ``session`` (the one the chunk carries on) after the
    ``turns`` it had before the chunk, as one process numbers them."""
    for events in held:
        for event in events:
            if type(event) is Usage and event.session_id == session:
                event.turn += turns
