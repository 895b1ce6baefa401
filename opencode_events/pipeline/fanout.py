"""``import`` of many sessions in one worker process per core, written in sequential order.

The contract: the output is byte for byte what the single-process import writes (tested),
only sooner. How:

- The sessions, in import order, are cut into consecutive chunks, dealt round-robin to the
  workers (forked; each opens the database again, read-only, on its own connection).
- A worker maps a chunk with its own ``Normalizer``, numbering events from 0, and holds
  them until its turn. A token passes from worker to worker in a ring of pipes; it carries
  the ``seq`` the next chunk starts at. With the token in hand, a worker adds that offset
  to its events, encodes them, writes them to the shared output (the same open file, so
  writes taken in turn land in order), flushes, and passes the token on. A chunk that
  holds more than ``HOLD_BYTES`` of input before its turn waits for the token, then
  writes as it goes, so memory stays bounded whatever the sessions' sizes.
- Each worker sends its figures back to the parent at the end (counts, token sums, and
  each session's cost sum in order); the parent merges them into the normalizer the
  closing ``metrics`` event comes from. Costs are summed per session and the sessions'
  sums added in order, in the single-process import too, so even the float total is
  identical.
- A worker that fails (a database error, a closed pipe, Ctrl-C) reports it and passes
  an abort token on; the parent raises the same kind of error, so the command line
  reports it as it would have in one process.

Only for the JSON Lines writer, a SQLite store that can be opened again (``store.uri``),
and where ``fork`` exists; ``import_sessions`` falls back to one process otherwise. Nothing
here prints.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import select
import signal
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any, BinaryIO

from ..core.normalizer import Normalizer
from ..errors import InputError
from ..output.jsonl import JsonlWriter
from ..workers import failure_report, raise_failure, worker_count

__all__ = ["HOLD_BYTES", "MIN_SESSIONS", "import_in_workers", "workers_for"]

MIN_SESSIONS = 64  # below this, starting workers costs more than it saves
CHUNK_SESSIONS = 32  # sessions per chunk: small enough to balance, large enough to amortize
HOLD_BYTES = 128 << 20  # input a worker maps ahead of its turn before it waits

_TOKEN = struct.Struct("<q")
_ABORT = -1


def workers_for(sessions: int) -> int:
    """Workers for an import of ``sessions`` sessions: the one worker policy (``workers``),
    paying from ``MIN_SESSIONS`` on."""
    return worker_count(sessions, min_jobs=MIN_SESSIONS)


def _chunks(session_ids: Sequence[str], workers: int) -> list[Sequence[str]]:
    size = max(1, min(CHUNK_SESSIONS, len(session_ids) // (workers * 4) or 1))
    return [session_ids[i : i + size] for i in range(0, len(session_ids), size)]


# ------------------------------------------------------------------------------ parent


def can_share(out: Any) -> bool:
    """Whether forked workers can write to ``out`` for us: a file object over a real file
    descriptor (a pipe, a file, a terminal), not an in-memory or wrapped stream, whose
    writes would stay in each worker's own copy."""
    if not isinstance(out, (io.BufferedWriter, io.FileIO)):
        return False
    try:
        out.fileno()
    except (OSError, ValueError):
        return False
    return True


LAST_RUN: dict[str, int] = {}  # the last run's workers and most events held: for tests


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
    opened: list[int] = []  # every pipe end this process still holds

    def pipe() -> tuple[int, int]:
        pair = os.pipe()
        opened.extend(pair)
        return pair

    def close(fd: int) -> None:
        opened.remove(fd)
        os.close(fd)

    pids: list[int] = []
    statuses: dict[int, int] = {}
    try:
        # rings[i]: the pipe worker i reads its token from; worker i writes to rings[i + 1].
        rings = [pipe() for _ in range(workers)]
        results = [pipe() for _ in range(workers)]
        # The first chunk's token goes in before any worker exists: written later, it
        # could meet a pipe whose only reader, a worker that failed at once, is gone.
        os.write(rings[0][1], _TOKEN.pack(normalizer.seq))
        for index in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                _worker_main(store, chunks, index, workers, rings, results, out, normalizer, tags)
            pids.append(pid)
        for _, write_end in results:
            close(write_end)
        for read_end, write_end in rings:
            close(read_end)
            close(write_end)
        reports = [_read_all(read_end) for read_end, _ in results]
    except BaseException:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        raise
    finally:
        for fd in list(opened):
            _close(fd)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                statuses[pid] = os.waitpid(pid, 0)[1]
    killed = [os.WTERMSIG(status) for status in statuses.values() if os.WIFSIGNALED(status)]
    return _merge(reports, chunks, workers, normalizer, killed)


def _merge(
    reports: list[bytes],
    chunks: list[Sequence[str]],
    workers: int,
    normalizer: Normalizer,
    killed: list[int],
) -> list[float]:
    decoded: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    for raw in reports:
        try:
            report = pickle.loads(raw)
        except Exception:  # a worker killed before it could report
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
    LAST_RUN.update(workers=workers, most_held=0)
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


def _read_all(fd: int) -> bytes:
    parts = []
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            return b"".join(parts)
        parts.append(data)


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


# ------------------------------------------------------------------------------ worker


def _worker_main(
    store: Any,
    chunks: list[Sequence[str]],
    index: int,
    workers: int,
    rings: list[tuple[int, int]],
    results: list[tuple[int, int]],
    out: BinaryIO,
    parent_normalizer: Normalizer,
    tags: dict[str, str] | None,
) -> None:
    """The forked worker's whole life; leaves with ``os._exit`` (no parent state is
    finalized here: the parent's database connection and files stay the parent's)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    token_in = rings[index][0]
    token_out = rings[(index + 1) % workers][1]
    result_out = results[index][1]
    keep = {token_in, token_out, result_out}
    for pair in rings + results:
        for fd in pair:
            if fd not in keep:
                _close(fd)
    code = 0
    try:
        worker = _Worker(
            store,
            token_in,
            token_out,
            out,
            keep_raw=parent_normalizer.keep_raw,
            mcp_servers=parent_normalizer.mcp_servers,
            parents=parent_normalizer.parents,
            tags=tags,
        )
        report = worker.run(chunks, index, workers)
    except BaseException as exc:  # reported to the parent, which raises it
        code = 1
        report = failure_report(exc, traceback=not isinstance(exc, _Aborted))
        with contextlib.suppress(OSError):
            os.write(token_out, _TOKEN.pack(_ABORT))
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
        token_in: int,
        token_out: int,
        out: BinaryIO,
        *,
        keep_raw: bool,
        mcp_servers: Any,
        parents: dict[str, str],
        tags: dict[str, str] | None,
    ) -> None:
        self.parent = os.getppid()
        self.store = store.reopen()
        self.token_in = token_in
        self.token_out = token_out
        self.writer = JsonlWriter(out, buffered=True, tags=tags)
        self.normalizer = Normalizer(keep_raw=keep_raw, mcp_servers=mcp_servers)
        self.normalizer.parents = parents  # the parent's, computed before the fork
        self.seq_end = 0
        self.held_count = self.most_held = 0  # events held in memory: now, at most

    def run(self, chunks: list[Sequence[str]], index: int, workers: int) -> dict[str, Any]:
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
        for number in range(index, len(chunks), workers):
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
        try:
            os.write(self.token_out, _TOKEN.pack(seq_end))
        except OSError:  # the next worker is gone: it failed and says why
            raise _Aborted("the next import worker stopped") from None

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
