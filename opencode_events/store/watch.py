"""Telling cheaply that OpenCode's database changed, without holding it open.

A ``StoreWatch`` compares, at each ``changed()``, a signature of the database's files:
the ``stat`` of ``opencode.db`` and of its ``-wal`` (device, inode, size, modification
time), the first 48 bytes of its ``-shm``, the WAL index header SQLite rewrites on every
commit (its change counter, last valid frame and salts, documented in SQLite's "WAL-index
format"), and the file change counter in the database header (bytes 24-27), which every
commit in rollback-journal mode increments (a program that writes the database without
the WAL). Two ``stat`` calls and two small reads, so a watch costs next to nothing while
OpenCode is idle, and it catches what a query per table would: a commit (the header and
the WAL's size or time move; without the WAL, the counter), a checkpoint (the main file's
time), a WAL reset or truncation (the WAL's size and the header's salts), a database that
appears, goes away or is replaced (the inode), even on a file system whose times are
coarse.

Nothing is opened for writing, no lock is taken and no SQLite connection is kept between
checks, so the watch never keeps OpenCode from checkpointing or from removing its WAL when
it exits. The two files read stay open (``files.read_head``: closing them would drop the
POSIX locks of any connection this process holds on them). ``wait`` polls (every
``interval`` seconds, 0.2 by default: under a second from OpenCode's commit to the
caller's read)::

    watch = StoreWatch(path)
    while True:
        if watch.wait(timeout=1.0):
            ...  # read what is new
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import read_head

__all__ = ["StoreWatch", "signature", "POLL_INTERVAL"]

POLL_INTERVAL = 0.2  # seconds between checks: the latency budget is 1 s
_SHM_HEADER = 48  # bytes of the WAL-index header (one copy of WalIndexHdr)
_COUNTER_END = 28  # the database header up to its file change counter (bytes 24-27)


def _stat(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _head(path: str, size: int = _SHM_HEADER) -> bytes | None:
    # read_head keeps the file open: closing it would drop the locks this process's own
    # connections hold there (a harness's, say), and let the next opener truncate -shm
    state = read_head(path, size)
    return None if state is None else state[1]


def signature(path: str | os.PathLike[str]) -> tuple[Any, ...]:
    """What changes whenever anything is committed to the database at ``path``."""
    name = os.fspath(path)
    db = _stat(name)
    counter = _head(name, _COUNTER_END) if db is not None else None
    return (db, counter, _stat(name + "-wal"), _head(name + "-shm"))


class StoreWatch:
    """Watches one database path (which need not exist yet)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = Path(path)
        self.interval = interval
        self._clock = clock
        self._sleep = sleep
        self._last: tuple[Any, ...] | None = None
        self.checks = 0  # how many signatures were taken (the idle cost, for tests)

    @property
    def exists(self) -> bool:
        return self._last is not None and self._last[0] is not None

    def changed(self) -> bool:
        """Whether the database changed since the last call (the first call: it exists)."""
        self.checks += 1
        now = signature(self.path)
        if now == self._last:
            return False
        self._last = now
        return now[0] is not None

    def forget(self) -> None:
        """Take the next check as a change (the caller could not read this one)."""
        self._last = None

    def pause(self) -> None:
        """Sleep one polling interval."""
        self._sleep(self.interval)

    def wait(self, timeout: float | None = None) -> bool:
        """Poll until the database changes (True) or ``timeout`` seconds pass (False)."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            if self.changed():
                return True
            if deadline is not None and self._clock() >= deadline:
                return False
            step = self.interval
            if deadline is not None:
                step = max(0.0, min(step, deadline - self._clock()))
            self._sleep(step)
