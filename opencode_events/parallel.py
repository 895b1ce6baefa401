"""One worker process per core over rowid ranges of a store table, for whole-table scans.

A worker gets the store's URI (how to open it again, read-only, on its own connection) and a
rowid range [low, high). Used only when the table is large enough to pay for the workers'
start, and only where ``fork`` is available; otherwise callers scan in their own process.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from .errors import InputError

__all__ = ["start_over_ranges", "worker_connection"]


def start_over_ranges(
    store: Any, table: str, min_rows: int, worker: Callable[..., Any], *args: Any
) -> Callable[[], list[Any]] | None:
    """Start ``worker(uri, low, high, *args)`` per range of ``table``; the returned function
    waits for the results, in range order. None when not worth it or not possible here."""
    uri = getattr(store, "uri", None)
    workers = min(os.cpu_count() or 1, 4)
    if uri is None or workers < 2:
        return None
    ranges = store.rowid_ranges(table, workers)
    if not ranges or ranges[-1][1] - ranges[0][0] < min_rows:
        return None
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

    return collect


@contextlib.contextmanager
def worker_connection(uri: str, what: str) -> Iterator[sqlite3.Connection]:
    """A worker's own read-only connection; SQLite errors become ``InputError``."""
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            yield conn
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise InputError(f"cannot read the {what} table: {exc}") from None
