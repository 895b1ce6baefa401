"""Worker processes over rowid ranges of a store table, for whole-table scans.

A worker gets the store's URI (how to open it again, read-only, on its own connection) and a
rowid range [low, high). Used only when the table is large enough to pay for the workers'
start, and only where ``fork`` is available; otherwise callers scan in their own process.

``share_ranges`` cuts the table into many small ranges and hands them out one at a time,
through a queue, to forked children (one per core, less this process when it takes ranges
too): the children start at once, this process joins when it asks for the results, and
all finish together whatever the rows' shape (a range full of large rows, or of the rows a
report wants, takes longer). A forked child that dies without a result has its range redone
in this process; a worker can tell where it runs (``in_forked_child``)::

    pending = share_ranges(store, "message", 100_000, worker, scan)  # None: too small
    results = pending()      # or pending.cancel(): the children stopped and reaped
    for result in pending.each(): ...  # or one at a time, each let go before the next

A child's results wait in its file, pickled, until they are asked for: ``each`` unpickles
one range's at a time, so a caller that folds them as they come holds one, not all.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InputError
from ..workers import (
    child_signals,
    failure_report,
    raise_failure,
    scratch_file,
    worker_count,
)
from .rows import RowidRanges
from .sqlite import SQLITE_ERRORS, sqlite_reason

__all__ = [
    "Pending",
    "SHARES",
    "in_forked_child",
    "share_ranges",
    "share_slices",
    "worker_connection",
]

_in_forked_child = False  # set in a child ``share_ranges`` forked


def in_forked_child() -> bool:
    """Whether this process is a child ``share_ranges`` forked: it holds no connection of
    its own but the one its worker opens."""
    return _in_forked_child


class Pending:
    """Started workers: call it for their results (in range order), or ``cancel`` it when they
    are no longer wanted (the workers are stopped and reaped; nothing once it was called)."""

    def __init__(self, each: Callable[[], Iterator[Any]], stop: Callable[[], None]) -> None:
        self._each, self._stop = each, stop
        self._state = "started"

    def __call__(self) -> list[Any]:
        return list(self.each())

    def each(self) -> Iterator[Any]:
        """The results in range order, each read when it is next (the workers have all
        finished by the first); the workers are stopped when it ends or is closed."""
        if self._state != "started":
            raise RuntimeError(f"the workers' results were already {self._state}")
        self._state = "collected"
        return self._each()

    def cancel(self) -> None:
        if self._state == "started":
            self._state = "cancelled"
            self._stop()


SHARES = 8  # ranges per process for ``share_ranges``: the last one ends at most a range late


def share_ranges(
    store: Any,
    table: str,
    min_rows: int,
    worker: Callable[..., Any],
    *args: Any,
    here: bool = True,
) -> Pending | None:
    """Start ``worker(uri, low, high, *args)`` over ``SHARES`` rowid ranges of ``table`` per
    process; the returned ``Pending`` gives their results in range order. None when not
    worth it or not possible here.

    Forked children (one per other worker; with ``here=False``, one per worker) take the
    ranges from a queue (a pipe holding their numbers), one at a time, as soon as they
    start; when the results are asked for, this process takes ranges too (unless not
    ``here``): whatever the caller does first, and whichever ranges hold the heavier rows,
    the processes finish together. A child writes each result, pickled, to a file of its
    own in memory and rings a doorbell (a pipe); this process reads the results between
    its own ranges, then as the doorbell rings. A child's exception is raised here; a
    range a child took and did not finish (it died) is done here."""
    able = _shareable(store)
    if able is None:
        return None
    ranges = store.rowid_ranges(table, min(able[1] * SHARES, 255))
    if len(ranges) < 2 or ranges[-1][1] - ranges[0][0] < min_rows:
        return None
    return _shared(able, ranges, worker, args, here)


def share_slices(
    store: Any, count: int, worker: Callable[..., Any], *args: Any, here: bool = True
) -> Pending | None:
    """``share_ranges`` over ``count`` items of the caller's own (a list, which a forked
    child holds as this process does) instead of a table's rows: ``worker(uri, low, high,
    *args)`` over index ranges [low, high), as many as can be numbered (255) so that
    each result, held while it is handed out, is a small part of the whole; results in
    order. None where it is not possible (no ``fork``, one worker, a store not on disk).
    ``here=False``: only forked children take slices (one per worker)."""
    able = _shareable(store)
    if able is None or count < 2:
        return None
    pieces = min(count, 255)
    bounds = [count * i // pieces for i in range(pieces + 1)]
    ranges = list(zip(bounds, bounds[1:], strict=False))
    return _shared(able, ranges, worker, args, here)


def _shareable(store: Any) -> tuple[str, int] | None:
    """The store's URI and how many processes may read it (``worker_count``), when forked
    children can read it at all: a database on disk, ``fork``, two workers or more."""
    uri = store.uri if isinstance(store, RowidRanges) else None
    workers = worker_count()
    if uri is None or workers < 2 or not hasattr(os, "fork"):
        return None
    return uri, workers


def _shared(
    able: tuple[str, int],
    ranges: list[tuple[int, int]],
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    here: bool,
) -> Pending:
    """``ranges`` handed out to the children started (``_Sharing``), this process taking
    its turn too if ``here``."""
    uri, workers = able
    sharing = _Sharing(uri, ranges, worker, args, workers - 1 if here else workers, here)
    return Pending(sharing.each, sharing.stop)


class _Sharing:
    """The queue, the doorbell and the children of one ``share_ranges``."""

    def __init__(
        self,
        uri: str,
        ranges: list[tuple[int, int]],
        worker: Callable[..., Any],
        args: tuple[Any, ...],
        children: int,
        here: bool,
    ) -> None:
        self.uri, self.ranges, self.worker, self.args, self.here = uri, ranges, worker, args, here
        self.children: list[_Child] = []
        self.take, give = os.pipe()
        try:
            os.write(give, bytes(range(len(ranges))))  # fewer than PIPE_BUF: written at once
        finally:
            os.close(give)  # an empty queue then reads as the end
        self.doorbell, ring = os.pipe()
        try:
            for _ in range(children):
                self.children.append(self._fork(ring))
        except BaseException:
            self.stop()
            raise
        finally:
            os.close(ring)  # the doorbell reads as the end once every child has ended

    def _fork(self, ring: int) -> _Child:
        """A child that takes ranges from the queue until it is empty, each result written
        to its file and rung on ``ring`` as soon as it has it."""
        results = scratch_file()
        try:
            pid = os.fork()
        except BaseException:
            os.close(results)
            raise
        if pid == 0:  # the child: never returns into the caller's code
            global _in_forked_child
            _in_forked_child = True
            child_signals()  # the host's handlers are the host's, not its workers'
            code = 0
            try:
                while (index := _next_range(self.take)) is not None:
                    try:
                        value = self.worker(self.uri, *self.ranges[index], *self.args)
                        record = (index, True, value)
                    except BaseException as exc:  # noqa: BLE001 - handed to the parent
                        record = (index, False, failure_report(exc))
                    payload = pickle.dumps(record[2], pickle.HIGHEST_PROTOCOL)
                    head = len(payload).to_bytes(8, "little") + bytes((index, record[1]))
                    _write_all(results, head + payload)
                    os.write(ring, b"\x01")
                    if not record[1]:
                        break
            except BaseException:  # noqa: BLE001 - the parent redoes what it sees no result of
                code = 1
            finally:
                os._exit(code)
        return _Child(pid, results)

    def each(self) -> Iterator[Any]:
        """The ranges' results in range order, each as soon as it and those before it are
        in: the caller folds them while the children still read (its own ranges between
        them, when this process takes some), not all at the end."""
        try:
            results: dict[int, Any] = {}
            done = 0  # results handed out: ranges 0 … done - 1

            def ready() -> Iterator[Any]:
                nonlocal done
                while done in results:
                    value = results.pop(done)
                    done += 1
                    yield value.load() if type(value) is _Kept else value

            if self.here:
                while (index := _next_range(self.take)) is not None:
                    results[index] = self.worker(self.uri, *self.ranges[index], *self.args)
                    for child in self.children:
                        child.read_into(results)
                    yield from ready()
            while os.read(self.doorbell, 256):  # a child has written a result, or ended
                for child in self.children:
                    child.read_into(results)
                yield from ready()
            for child in self.children:
                child.finish(results)
            for index in range(done, len(self.ranges)):
                if index not in results:  # taken by a child that died without its result
                    results[index] = self.worker(self.uri, *self.ranges[index], *self.args)
            yield from ready()
        finally:
            self.stop()

    def stop(self) -> None:
        for child in self.children:
            child.stop()
        for fd in (self.take, self.doorbell):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.take = self.doorbell = -1


def _next_range(take: int) -> int | None:
    """The next range's number from the queue (one byte: a read of it is atomic), or None
    when the queue is empty."""
    got = os.read(take, 1)
    return got[0] if got else None


class _Kept:
    """A result in a child's file, not read yet: where it is."""

    __slots__ = ("child", "offset", "length")

    def __init__(self, child: _Child, offset: int, length: int) -> None:
        self.child, self.offset, self.length = child, offset, length

    def load(self) -> Any:
        return pickle.loads(_pread_all(self.child.results, self.length, self.offset))


_HEAD = 10  # a record's head: the pickle's length (8 bytes), the range, whether it is a result


class _Child:
    """A forked sharer: its pid and the file its results are written to, read from
    ``offset`` on as records (``_HEAD``, then the pickled result or failure report)."""

    def __init__(self, pid: int, results: int) -> None:
        self.pid, self.results, self.offset = pid, results, 0
        self.alive = True

    def read_into(self, results: dict[int, Any]) -> None:
        """The records written whole since the last read; a failure's is raised here."""
        size = os.fstat(self.results).st_size
        while size - self.offset >= _HEAD:
            head = _pread_all(self.results, _HEAD, self.offset)
            length, index, ok = int.from_bytes(head[:8], "little"), head[8], head[9]
            if size - self.offset - _HEAD < length:
                return  # still being written
            kept = _Kept(self, self.offset + _HEAD, length)
            self.offset += _HEAD + length
            if not ok:
                raise_failure(kept.load())
            results[index] = kept  # read when asked for (``each``)

    def finish(self, results: dict[int, Any]) -> None:
        """Wait for the child's end, then read what it wrote."""
        with contextlib.suppress(ChildProcessError):  # reaped already: SIGCHLD ignored
            os.waitpid(self.pid, 0)
        self.alive = False
        self.read_into(results)

    def stop(self) -> None:
        if self.alive:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            self.alive = False
        if self.results >= 0:  # once: the number may be another file's by the next call
            with contextlib.suppress(OSError):
                os.close(self.results)
            self.results = -1


def _pread_all(fd: int, length: int, offset: int) -> bytes:
    pieces = []
    while length > 0:
        piece = os.pread(fd, length, offset)
        if not piece:
            raise InputError("a worker's results were cut short")
        pieces.append(piece)
        length -= len(piece)
        offset += len(piece)
    return b"".join(pieces)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def worker_connection(uri: str, what: str) -> Iterator[sqlite3.Connection]:
    """A worker's own read-only connection; SQLite errors become ``InputError``."""
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            yield conn
        finally:
            conn.close()
    except SQLITE_ERRORS as exc:
        raise InputError(f"cannot read the {what} table: {sqlite_reason(exc)}") from None
