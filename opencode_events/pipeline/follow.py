"""``import --follow``: a store's sessions written out as OpenCode writes them.

The loop: a ``StoreWatch`` tells, cheaply, that the database changed; then the database is
opened read-only as ``import`` opens it (docs/store.md), what is new is read in one read
transaction (``StoreFollower.read``), written, and the database is closed again, so no
connection, lock or snapshot is held while OpenCode works (its checkpoints, WAL resets and
restarts go on as without us). A database that does not exist yet is waited for.

It ends (``FollowEnd``) when the followed sessions, seen at work, are idle again or stale
(``core.activity``), or when what they cost with their subagents crosses ``max_cost`` (the
sessions named, or the newest once seen at work: an idle one a new run will replace
counts for nothing); ``until_idle=False`` goes on until interrupted, and ``catch_up`` then
reads what a put-off look at the rows of sessions without a log still owes::

    follower = StoreFollower(Normalizer())
    end = follow_store(path, follower, writer)        # FollowEnd.IDLE, .STALE, .OVER_BUDGET
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from collections.abc import Callable
from typing import Any

from ..core.activity import BUSY, STALE
from ..errors import InputError
from ..sources.eventlog import StoreFollower
from ..store.sqlite import Store
from ..store.watch import StoreWatch

__all__ = ["FollowEnd", "follow_store", "catch_up"]

RETRIES = 10  # failed reads in a row (one a poll) before a database read before is an error


class FollowEnd(enum.Enum):
    IDLE = "idle"
    STALE = "stale"
    OVER_BUDGET = "over budget"


def follow_store(
    path: str | os.PathLike[str],
    follower: StoreFollower,
    writer: Any,
    *,
    until_idle: bool = True,
    max_cost: float | None = None,
    watch: StoreWatch | None = None,
    clock: Callable[[], float] = time.time,
    stale_after: int | None = None,
    stop: Callable[[], bool] | None = None,
    waiting: Callable[[list[str]], None] | None = None,
) -> FollowEnd | None:
    """Follow until the sessions are done (the reason), or ``stop()`` says so (None).
    ``waiting`` is told the sessions once, when the first look finds them followed until
    idle but not at work (they will be waited on until they work and are idle again)."""
    watch = watch or StoreWatch(path)
    existed = os.path.exists(path)
    follower.live_from_start = not existed
    opened_once = False
    told = waiting is None or not until_idle
    failures = 0  # reads that failed in a row
    while True:
        if watch.changed() or follower.rows_due():
            stopped = False
            try:
                with Store(path) as store:
                    # Written batch by batch: a first read of every session of a large store
                    # is never held whole; between sessions, ``stop`` may send what is done.
                    batches = follower.read_batches(store, clock() * 1000)
                    with contextlib.closing(batches):
                        for events in batches:
                            writer.write(events)
                            writer.end_batch()
                            if stop is not None and follower.between_sessions and stop():
                                stopped = True
                                break
                opened_once = True
            except InputError:
                # A database that appeared while we waited may be half made (OpenCode
                # creates the file, then its tables): wait until it can be read. One read
                # before may be caught as OpenCode quits (its WAL removed while we copy it):
                # looked at again, a few times. One there from the start that cannot be read
                # at all is an error.
                failures += 1
                if (existed and not opened_once) or (opened_once and failures > RETRIES):
                    raise
                watch.forget()
            else:
                failures = 0
            if stopped:
                return None
            if max_cost is not None and follower.settled and follower.total_cost > max_cost:
                return FollowEnd.OVER_BUDGET
            if not told and opened_once:
                told = True
                if not follower.seen_at_work and follower.roots:
                    waiting(list(follower.roots))  # type: ignore[misc]  # told: it is set
        if until_idle and follower.seen_at_work:
            state = follower.state(clock() * 1000, stale_after)
            if state != BUSY and follower.rows_owed:  # a look put off: read it, then judge
                follower.rows_now()  # due from now on: the next turn reads it
                if not failures:
                    continue
                # the last read failed: read again after a pause, as any failed read
            elif state != BUSY:
                return FollowEnd.STALE if state == STALE else FollowEnd.IDLE
        if stop is not None and stop():
            return None
        watch.pause()


def catch_up(path: str | os.PathLike[str], follower: StoreFollower, writer: Any) -> None:
    """Following stopped (a signal, ``stop``): a look at the rows of sessions without a log
    that was put off (``StoreFollower.rows_due``) is made now, so what they wrote before the
    stop is written too. Nothing owed: nothing read."""
    if not follower.rows_owed or not os.path.exists(path):
        return
    follower.rows_now()
    with Store(path) as store:
        for events in follower.read_batches(store):
            writer.write(events)
