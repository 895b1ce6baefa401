"""One worker process per core over rowid ranges of a store table, for whole-table scans.

A worker gets the store's URI (how to open it again, read-only, on its own connection) and a
rowid range [low, high). Used only when the table is large enough to pay for the workers'
start, and only where ``fork`` is available; otherwise callers scan in their own process.

Three ways to run them: a process pool that works while the caller does something else (the
default); with ``here=True``, plain forked children for all ranges but the last, which the
caller's own process scans when it asks for the results (it would only wait otherwise); with
``forks=True``, plain forked children for every range (for a worker that must not run in the
caller's process, see ``in_forked_child``). A forked child that dies without a result has its
range redone in the caller's process.
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
from ..workers import failure_report, raise_failure, worker_count
from .rows import RowidRanges
from .sqlite import SQLITE_ERRORS, sqlite_reason

__all__ = ["Pending", "in_forked_child", "start_over_ranges", "worker_connection"]

_in_forked_child = False  # set in a child of _fork


def in_forked_child() -> bool:
    """Whether this process is a worker forked by ``here=True`` or ``forks=True``: it holds
    no connection of its own but the one its worker opens."""
    return _in_forked_child


class Pending:
    """Started workers: call it for their results (in range order), or ``cancel`` it when they
    are no longer wanted (the workers are stopped and reaped; nothing once it was called)."""

    def __init__(self, collect: Callable[[], list[Any]], stop: Callable[[], None]) -> None:
        self._collect, self._stop = collect, stop
        self._state = "started"

    def __call__(self) -> list[Any]:
        if self._state != "started":
            raise RuntimeError(f"the workers' results were already {self._state}")
        self._state = "collected"
        return self._collect()

    def cancel(self) -> None:
        if self._state == "started":
            self._state = "cancelled"
            self._stop()


def start_over_ranges(
    store: Any,
    table: str,
    min_rows: int,
    worker: Callable[..., Any],
    *args: Any,
    here: bool = False,
    forks: bool = False,
) -> Pending | None:
    """Start ``worker(uri, low, high, *args)`` per range of ``table``; the returned ``Pending``
    waits for the results, in range order, when called. None when not worth it or not
    possible here. A caller that may give up before it calls it ``cancel``s it.

    With ``here``, the last range runs in this process, inside the returned function, and
    the others in forked children; with ``forks`` instead, every range in a forked child
    (the same results, in the same order)."""
    uri = store.uri if isinstance(store, RowidRanges) else None
    workers = worker_count()  # the one policy: $OPENCODE_EVENTS_WORKERS, cores
    if uri is None or workers < 2:
        return None
    ranges = store.rowid_ranges(table, workers)
    if not ranges or ranges[-1][1] - ranges[0][0] < min_rows:
        return None
    if here or forks:
        if not hasattr(os, "fork") or len(ranges) < 2:
            return None
        return _start_forked(uri, ranges, worker, args, last_here=here)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return None
    pool = ProcessPoolExecutor(max_workers=len(ranges), mp_context=context)
    futures = [pool.submit(worker, uri, low, high, *args) for low, high in ranges]

    def collect() -> list[Any]:
        try:
            return [future.result() for future in futures]
        finally:
            pool.shutdown(cancel_futures=True)

    def stop() -> None:  # the running workers end with their ranges
        pool.shutdown(cancel_futures=True)

    return Pending(collect, stop)


def _start_forked(
    uri: str,
    ranges: list[tuple[int, int]],
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    last_here: bool,
) -> Pending:
    forked, mine = (ranges[:-1], ranges[-1]) if last_here else (ranges, None)
    children: list[tuple[int, int]] = []
    try:
        for start, end in forked:
            children.append(_fork(worker, (uri, start, end, *args)))
    except BaseException:
        _stop(children)
        raise

    def collect() -> list[Any]:
        pending = list(children)
        children.clear()  # pending's now: stopped below if need be
        try:
            here = [] if mine is None else [worker(uri, *mine, *args)]
            theirs = []
            for start, end in forked:
                theirs.append(_result(pending.pop(0), worker, (uri, start, end, *args)))
        except BaseException:
            _stop(pending)
            raise
        return [*theirs, *here]

    def stop() -> None:
        _stop(children)
        children.clear()

    return Pending(collect, stop)


def _fork(worker: Callable[..., Any], args: tuple[Any, ...]) -> tuple[int, int]:
    """(pid, read end of its pipe) of a child that runs ``worker(*args)`` and writes back
    ``(True, result)`` or ``(False, failure_report)``, pickled."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except BaseException:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:  # the child: never returns into the caller's code
        global _in_forked_child
        _in_forked_child = True
        code = 0
        try:
            os.close(read)
            try:
                payload = pickle.dumps((True, worker(*args)), pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # noqa: BLE001 - handed to the parent
                payload = pickle.dumps((False, failure_report(exc)), pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001 - the parent sees no result
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _result(child: tuple[int, int], worker: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A child's result (its exception is raised here); a child that died without one is
    redone in this process."""
    pid, read = child
    try:
        with os.fdopen(read, "rb") as pipe:
            payload = pipe.read()
    except BaseException:
        _stop([(pid, -1)])
        raise
    os.waitpid(pid, 0)
    if not payload:
        return worker(*args)
    ok, value = pickle.loads(payload)
    if not ok:
        raise_failure(value)
    return value


def _stop(children: list[tuple[int, int]]) -> None:
    """Kill and reap children whose results are no longer wanted (-1: pipe already closed)."""
    for pid, read in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        if read >= 0:
            with contextlib.suppress(OSError):
                os.close(read)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)


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
