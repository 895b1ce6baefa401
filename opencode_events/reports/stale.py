"""The stale rule (``core.activity``) applied to stored sessions, one way for every report:
a session in flight is stale when neither it nor any session below it (a subagent at work
while its parent waits on the ``task`` call) was written for ``stale_after_ms()``.

"Written" is the latest ``time_updated`` of the session rows, and of their messages and
parts where the store keeps one per row (a database; the legacy files keep none)::

    state = stored_state(store, "ses_…", store.children(), now_ms=now)   # busy or stale
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..core.activity import session_state, stale_after_ms
from ..store.rows import descendants, offers_fast_scans

__all__ = ["last_written", "stored_state"]


def last_written(
    store: Any,
    session_id: str,
    tree: dict[str, list[str]],
    *,
    rows_written: Callable[[str], int | None] | None = None,
    row_updated: Callable[[str], int | None] | None = None,
) -> int | None:
    """When ``session_id`` or a session below it was last written (epoch ms), if known.
    ``rows_written`` answers for a session's messages and parts (default: the store's
    ``last_write``), ``row_updated`` for its session row's ``time_updated`` (default: the
    row, read); a report may know either already."""
    latest: int | None = None
    fast = offers_fast_scans(store)
    for sid in (session_id, *descendants([session_id], tree)):
        if row_updated is not None:
            written = row_updated(sid)
        else:
            row = store.session(sid)
            written = row.time_updated if row is not None else None
        if fast:
            rows = (rows_written or store.last_write)(sid)
            if rows is not None and (written is None or rows > written):
                written = rows
        if written is not None and (latest is None or written > latest):
            latest = written
    return latest


def stored_state(
    store: Any,
    session_id: str,
    tree: dict[str, list[str]],
    *,
    now_ms: float | None = None,
    stale_after: int | None = None,
    rows_written: Callable[[str], int | None] | None = None,
    row_updated: Callable[[str], int | None] | None = None,
) -> str:
    """``busy`` or ``stale`` for a stored session that is in flight."""
    now = time.time() * 1000 if now_ms is None else now_ms
    limit = stale_after_ms() if stale_after is None else stale_after
    written = last_written(
        store, session_id, tree, rows_written=rows_written, row_updated=row_updated
    )
    return session_state(in_flight=True, last_write_ms=written, now_ms=now, stale_after=limit)
