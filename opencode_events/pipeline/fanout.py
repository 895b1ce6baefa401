"""``import`` of many sessions in one worker process per core, written in sequential order.

The contract: the output is byte for byte what the single-process import writes (tested),
only sooner. How:

- The sessions, in import order, are cut into consecutive chunks. The workers (forked; each
  opens the database again, read-only, on its own connection) take the chunks' numbers, in
  order, from one queue (a pipe) as each becomes free, so a worker that drew heavy sessions
  takes fewer chunks and all end together, whatever the sessions' sizes.
- A worker maps a chunk with its own ``Normalizer``, numbering events from 0, and holds
  them until its turn. The turn is a token: the ``seq`` the chunk's events start at. A
  worker tells this process which chunk it took and, when it has written one, where the
  next one starts; this process hands that token to whoever took the next chunk. With the
  token in hand, a worker adds the offset to its events, encodes them, writes them to the
  shared output (the same open file, so writes taken in turn land in order), flushes, and
  reports. A chunk that holds more than ``HOLD_BYTES`` of input before its turn waits for
  the token, then writes as it goes, so memory stays bounded whatever the sessions' sizes.
- Each worker sends its figures back to the parent at the end (counts, token sums, and
  each session's cost sum in order); the parent merges them into the normalizer the
  closing ``metrics`` event comes from. Costs are summed per session and the sessions'
  sums added in order, in the single-process import too, so even the float total is
  identical.
- A worker that fails (a database error, a closed pipe, Ctrl-C) reports it and tells this
  process, which hands every worker an abort token; the parent raises the same kind of
  error, so the command line reports it as it would have in one process. A worker that
  dies without a word is seen by its results pipe closing without a report.

Only for the JSON Lines writer, a SQLite store that can be opened again (``store.uri``),
and where ``fork`` exists; ``import_sessions`` falls back to one process otherwise. Nothing
here prints.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any, BinaryIO

from ..core.normalizer import Normalizer
from ..errors import InputError
from ..output.jsonl import JsonlWriter
from ..store import fastscan
from ..workers import Crew, child_signals, failure_report, raise_failure, worker_count

__all__ = ["HOLD_BYTES", "MIN_SESSIONS", "import_in_workers", "workers_for"]

MIN_SESSIONS = 64  # below this, starting workers costs more than it saves
CHUNK_SESSIONS = 32  # sessions per chunk: small enough to balance, large enough to amortize
HOLD_BYTES = 128 << 20  # input a worker maps ahead of its turn before it waits

_TOKEN = struct.Struct("<q")  # an inbox's token: the seq the chunk starts at, or _ABORT
_ABORT = -1
_CHUNK = struct.Struct("<I")  # the queue: chunk numbers
_QUEUE_BATCH = 1024  # numbers per write to the queue: 4 KB, at most PIPE_BUF
# A worker's note to this process: (_TAKEN, chunk, worker), (_DONE, chunk, next seq) or
# (_FAILED, -1, worker); 16 bytes, so each write is atomic and read whole.
_NOTE = struct.Struct("<iiq")
_TAKEN, _DONE, _FAILED = 1, 2, 3


def workers_for(sessions: int) -> int:
    """Workers for an import of ``sessions`` sessions: the one worker policy (``workers``),
    paying from ``MIN_SESSIONS`` on."""
    return worker_count(sessions, min_jobs=MIN_SESSIONS)


def _chunks(session_ids: Sequence[str], workers: int) -> list[Sequence[str]]:
    size = max(1, min(CHUNK_SESSIONS, len(session_ids) // (workers * 4) or 1))
    return [session_ids[i : i + size] for i in range(0, len(session_ids), size)]


# ------------------------------------------------------------------------------ parent


# The last run's workers, most events held and chunks each worker took: for tests.
LAST_RUN: dict[str, Any] = {}


def import_in_workers(
    store: Any,
    session_ids: Sequence[str],
    out: BinaryIO,
    normalizer: Normalizer,
    *,
    workers: int,
    tags: dict[str, str] | None = None,
) -> list[float]:
    """Write the events of ``session_ids`` to ``out`` using ``workers`` processes; merge
    their figures into ``normalizer`` (whose ``seq`` ends after the last event). Returns
    each session's cost sum, in order."""
    out.flush()
    chunks = _chunks(session_ids, workers)
    workers = min(workers, len(chunks))
    dealer = _Dealer(len(chunks), workers, normalizer.seq)
    try:
        for index in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                _worker_main(store, chunks, index, dealer, out, normalizer, tags)
            dealer.pids.append(pid)
        reports = dealer.deal()
    except BaseException:
        dealer.kill()
        raise
    finally:
        dealer.close()
        killed = dealer.reap()
    return _merge(reports, chunks, dealer.taken, normalizer, killed)


class _Dealer(Crew):
    """The pipes between this process and the workers, and the dealing itself: the queue of
    chunk numbers (fed as it drains), each worker's inbox of tokens, one pipe of notes from
    the workers to here (a chunk taken, a chunk written, a failure), and each worker's
    results pipe. This process keeps the read ends of the queue and of the inboxes open, so
    a write to them never meets a pipe nobody reads (a worker that failed at once)."""

    def __init__(self, chunks: int, workers: int, seq: int) -> None:
        super().__init__()
        self.chunks, self.seq = chunks, seq
        self.taken = [0] * workers  # chunks each worker took: for LAST_RUN
        self.aborted = False  # every worker was handed the abort token
        self.queue_out, self.queue_in = self._pipe()
        os.set_blocking(self.queue_in, False)
        self.fed = 0  # chunk numbers written to the queue so far
        self.inboxes = [self._pipe() for _ in range(workers)]
        self.notes_out, self.notes_in = self._pipe()
        self.results = [self._pipe() for _ in range(workers)]
        self._feed()  # before any worker exists: the first ones can start at once

    def worker_ends(self, index: int) -> tuple[int, int, int, int]:
        """What worker ``index`` keeps: (queue, inbox, notes, results) ends."""
        return (self.queue_out, self.inboxes[index][0], self.notes_in, self.results[index][1])

    def _feed(self) -> None:
        """Write as many chunk numbers as the queue takes now, each write whole (a write of
        at most PIPE_BUF bytes is atomic: all of it or, the pipe full, none), so a worker's
        4-byte read is always a whole number; once all are in, the queue is closed, and
        then reads as the end."""
        batch = _QUEUE_BATCH
        while self.fed < self.chunks:
            numbers = range(self.fed, min(self.chunks, self.fed + batch))
            try:
                os.write(self.queue_in, struct.pack(f"<{len(numbers)}I", *numbers))
            except BlockingIOError:
                if batch == 1:
                    return  # full: fed again once the workers have drained it
                batch = 1  # room for less than a batch: the numbers one at a time
                continue
            self.fed = numbers.stop
        self._close(self.queue_in)

    def deal(self) -> list[dict[str, Any] | None]:
        """Route the tokens until every worker has ended; their reports, in worker order
        (None for a worker that died without one)."""
        for _, write_end in self.results:
            self._close(write_end)
        self._close(self.notes_in)
        owners: dict[int, int] = {}  # chunk number -> the worker that took it
        due = 0  # the chunk whose turn it is; its token is self.seq
        handed = -1  # the last chunk whose token went out
        received = [bytearray() for _ in self.results]
        reports: list[dict[str, Any] | None] = [None] * len(self.results)
        reading = {read_end: index for index, (read_end, _) in enumerate(self.results)}
        notes = bytearray()
        while reading:
            wanted = [*reading, self.notes_out] if self.notes_out in self.opened else [*reading]
            writing = [self.queue_in] if self.queue_in in self.opened else []
            readable, writable, _ = select.select(wanted, writing, [])
            if writable:
                self._feed()
            for fd in readable:
                if fd == self.notes_out:
                    data = os.read(fd, 1 << 12)
                    if not data:
                        self._close(fd)
                        continue
                    notes += data
                    whole = len(notes) - len(notes) % _NOTE.size
                    for kind, chunk, value in _NOTE.iter_unpack(notes[:whole]):
                        if kind == _TAKEN:
                            owners[chunk] = value
                            self.taken[value] += 1
                        elif kind == _DONE:
                            due, self.seq = chunk + 1, value
                        else:
                            self._abort()
                    del notes[:whole]
                    continue
                data = os.read(fd, 1 << 16)
                if data:
                    received[reading[fd]] += data
                    continue
                index = reading.pop(fd)
                reports[index] = _report_of(received[index])
                if reports[index] is None:
                    self._abort()  # died without a word: nobody else may wait for it
            if due > handed and due in owners and not self.aborted:
                os.write(self.inboxes[owners[due]][1], _TOKEN.pack(self.seq))
                handed = due
        return reports

    def _abort(self) -> None:
        """Hand every worker the abort token (once) and take no more chunks."""
        if self.aborted:
            return
        self.aborted = True
        self._close(self.queue_in)  # no more chunks to take
        for _, write_end in self.inboxes:
            os.write(write_end, _TOKEN.pack(_ABORT))  # a few bytes: never blocks


def _report_of(received: bytes | bytearray) -> dict[str, Any] | None:
    """A worker's report, whole and pickled (its last act), or None."""
    try:
        return pickle.loads(received)
    except Exception:
        return None


def _merge(
    reports: list[dict[str, Any] | None],
    chunks: list[Sequence[str]],
    taken: list[int],
    normalizer: Normalizer,
    killed: list[int],
) -> list[float]:
    decoded: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    for report in reports:
        if report is None:  # a worker killed before it could report
            why = f" (killed by signal {killed[0]})" if killed else ""
            report = {"error": "Killed", "message": f"an import worker stopped{why}"}
        if "error" in report:
            # A worker stopped by another's failure says nothing new: keep the first cause.
            if failure is None or failure["error"] == "_Aborted":
                failure = report
        else:
            decoded.append(report)
    if failure is not None:
        raise_failure(failure)
    costs_by_chunk: dict[int, list[float]] = {}
    last_session: tuple[int, str] | None = None
    LAST_RUN.clear()
    LAST_RUN.update(workers=len(taken), most_held=0, taken=list(taken))
    for report in decoded:
        LAST_RUN["most_held"] = max(LAST_RUN["most_held"], report["most_held"])
        normalizer.merge(report["counters"], cost=False)  # costs: summed per session below
        normalizer.seq = max(normalizer.seq, report["seq_end"])
        costs_by_chunk.update(report["costs"])
        if report["last_session"] is not None and (
            last_session is None or report["last_session"][0] > last_session[0]
        ):
            last_session = report["last_session"]
    if last_session is not None:
        normalizer.enter_session(last_session[1])
    return [cost for index in range(len(chunks)) for cost in costs_by_chunk.get(index, ())]


# ------------------------------------------------------------------------------ worker


def _worker_main(
    store: Any,
    chunks: list[Sequence[str]],
    index: int,
    dealer: _Dealer,
    out: BinaryIO,
    parent_normalizer: Normalizer,
    tags: dict[str, str] | None,
) -> None:
    """The forked worker's whole life; leaves with ``os._exit`` (no parent state is
    finalized here: the parent's database connection and files stay the parent's)."""
    child_signals()
    queue, inbox, notes, result_out = ends = dealer.worker_ends(index)
    dealer.keep(*ends)
    code = 0
    try:
        worker = _Worker(
            store,
            index,
            queue,
            inbox,
            notes,
            out,
            keep_raw=parent_normalizer.keep_raw,
            mcp_servers=parent_normalizer.mcp_servers,
            parents=parent_normalizer.parents,
            tags=tags,
        )
        report = worker.run(chunks)
    except BaseException as exc:  # reported to the parent, which raises it
        code = 1
        report = failure_report(exc, traceback=not isinstance(exc, _Aborted))
        with contextlib.suppress(OSError):
            os.write(notes, _NOTE.pack(_FAILED, -1, index))
    try:
        data = pickle.dumps(report)
        view = memoryview(data)
        while view:
            view = view[os.write(result_out, view) :]
    except BaseException:
        code = 1
    os._exit(code)


class _Worker:
    def __init__(
        self,
        store: Any,
        index: int,
        queue: int,
        token_in: int,
        notes: int,
        out: BinaryIO,
        *,
        keep_raw: bool,
        mcp_servers: Any,
        parents: dict[str, str],
        tags: dict[str, str] | None,
    ) -> None:
        self.parent = os.getppid()
        # apsw's SQLite hands the rows over faster (fastscan); a forked child may use it.
        self.store = store.reopen(fastscan.sqlite3_like)
        self.index, self.queue, self.token_in, self.notes = index, queue, token_in, notes
        self.writer = JsonlWriter(out, buffered=True, tags=tags)
        self.normalizer = Normalizer(keep_raw=keep_raw, mcp_servers=mcp_servers)
        self.normalizer.parents = parents  # the parent's, computed before the fork
        self.seq_end = 0
        self.held_count = self.most_held = 0  # events held in memory: now, at most

    def _take(self) -> int | None:
        """The next chunk's number from the queue (told to this process), or None once
        the queue is empty and closed."""
        got = os.read(self.queue, _CHUNK.size)
        if not got:
            return None
        (number,) = _CHUNK.unpack(got)
        os.write(self.notes, _NOTE.pack(_TAKEN, number, self.index))
        return number

    def run(self, chunks: list[Sequence[str]]) -> dict[str, Any]:
        from ..sources.transcript import map_session

        normalizer = self.normalizer
        store = self.store
        costs: dict[int, list[float]] = {}
        last_session: tuple[int, str] | None = None
        self.last_chunk = len(chunks) - 1
        # Chunks mapped ahead of their turn: (number, events, how many), oldest first.
        self.pending: deque[tuple[int, list[list[Any]], int]] = deque()
        # Input behind the events held in memory starts at held_from (the oldest pending
        # chunk's start, else the current chunk's).
        self.held_from = self.chunk_from = store.bytes_read
        while (number := self._take()) is not None:
            if os.getppid() != self.parent:  # the command was killed: stop, don't run on
                raise _Aborted("the import was stopped")
            normalizer.seq = 0
            self.chunk_from = store.bytes_read
            if not self.pending:
                self.held_from = self.chunk_from
            self.held = []
            self.offset = None  # known once this chunk's turn has come
            chunk_costs = costs[number] = []
            try:
                for session_id in chunks[number]:
                    for events in map_session(normalizer, store, session_id, chunk_costs):
                        if self.offset is None:
                            self.held.append(events)
                            self.count_held(len(events))
                            if store.bytes_read - self.held_from > HOLD_BYTES:
                                # Too much held: write the earlier chunks, wait for this
                                # one's turn, then write as it goes.
                                self._take_turn(block=True)
                        else:
                            self._write([events], self.offset)
                    if normalizer.session_id == session_id:
                        last_session = (number, session_id)  # the closing metrics' session
                    self._take_turn(block=False)  # earlier chunks, then this one, if due
            except InputError:
                # What one process would have written before the error: the chunks before
                # this one (theirs too), then this chunk's events so far. Then the abort.
                self._take_turn(block=True)
                self._flush()
                raise
            if self.offset is None:
                self.pending.append((number, self.held, normalizer.seq))
            else:
                self._flush()
                self._pass_token(number, self.offset + normalizer.seq)
            self._write_turns(block=False)
        self._write_turns(block=True)
        return {
            "counters": normalizer.snapshot(),
            "costs": costs,
            "seq_end": self.seq_end,
            "most_held": self.most_held,
            "last_session": last_session,
        }

    def count_held(self, events: int) -> None:
        self.held_count += events
        if self.held_count > self.most_held:
            self.most_held = self.held_count

    def _take_turn(self, *, block: bool) -> None:
        """Start writing the current chunk as it goes, once its turn has come (waiting for
        it if ``block``; the chunks before it first)."""
        if self.offset is not None:
            return
        self._write_turns(block=block)
        if self.pending or (not block and not select.select([self.token_in], [], [], 0)[0]):
            return  # not yet
        self.offset = self._wait_turn()
        self._write(self.held, self.offset)
        self.held = []
        self.held_count = 0

    def _write_turns(self, *, block: bool) -> None:
        """Write the pending chunks whose turn has come (all of them, waiting, if
        ``block``), each passing the token on."""
        while self.pending:
            if not block and not select.select([self.token_in], [], [], 0)[0]:
                return
            offset = self._wait_turn()
            number, held, count = self.pending.popleft()
            self._write(held, offset)
            self.held_count -= sum(map(len, held))
            self._flush()
            self._pass_token(number, offset + count)
        self.held_from = self.chunk_from  # what is held now is the current chunk's, if any

    def _pass_token(self, number: int, seq_end: int) -> None:
        self.seq_end = seq_end
        if number == self.last_chunk:
            return  # nobody waits for the last token (its reader may be gone)
        os.write(self.notes, _NOTE.pack(_DONE, number, seq_end))

    def _wait_turn(self) -> int:
        data = b""
        while len(data) < _TOKEN.size:
            more = os.read(self.token_in, _TOKEN.size - len(data))
            if not more:
                raise _Aborted("an import worker stopped")
            data += more
        (offset,) = _TOKEN.unpack(data)
        if offset < 0:
            raise _Aborted("an import worker stopped")
        return offset

    def _write(self, held: list[list[Any]], offset: int) -> None:
        for events in held:
            self.writer.write_shifted(events, offset)
        self.writer.end_batch()  # written out in blocks of 1 MB

    def _flush(self) -> None:
        self.writer.flush()


class _Aborted(Exception):
    """Another worker failed; its report, not this one, says why."""
