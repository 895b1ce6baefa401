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
from typing import Any, NamedTuple

import msgspec
from msgspec import Struct

from ..core.activity import session_state, stale_after_ms
from ..core.views import decode_repairing
from ..store.rows import descendants, offers_fast_scans

__all__ = ["OpenReply", "last_written", "open_reply", "stored_state"]


class _Reply(Struct, gc=False):
    role: Any = None
    time: Any = None
    error: Any = None
    parentID: Any = None  # noqa: N815 - OpenCode's spelling: the prompt a reply answers


_REPLY = msgspec.json.Decoder(_Reply)
_LOOKED_AT = 64  # newest messages looked at for the newest reply and the last prompt


class OpenReply(NamedTuple):
    """A session's work in flight (``open_reply``): its newest reply, open, or a prompt
    newer than every reply, awaiting its own."""

    message_id: Any  # the open reply's id; None: no reply is open, a prompt awaits one
    # When the prompt of the turn in flight was created (None: not seen): the one the open
    # reply answers, else the awaiting prompt (the newest, when several are).
    prompt_created: Any


def open_reply(store: Any, session_id: str) -> OpenReply | None:
    """What a session has in flight, by its newest messages: its newest reply when it has
    no ``time.completed`` (and no error), the one reply that can be in flight; else, when
    the newest message is a prompt, that prompt awaiting its reply (OpenCode writes the
    prompt, then the reply's row: for a moment at every prompt, and for good when it was
    killed in between). OpenCode runs one reply at a time in a session, so an older reply
    left open is one a killed OpenCode left, and the session went on past it (a report
    that marked it in flight said `busy` for good, and kept no cache). None when neither:
    the newest reply is complete and no prompt came after it, or there is no message."""
    older = _newest_first(store, session_id)
    waiting = None  # the newest prompt, while no reply is newer: (its created time,)
    for message_id, data in older:
        try:
            reply = decode_repairing(_REPLY, data)[0]
        except (msgspec.DecodeError, RecursionError, TypeError):
            continue
        if reply.role == "user":
            if waiting is None:
                waiting = (_created(reply),)
        elif reply.role == "assistant":
            time = reply.time if isinstance(reply.time, dict) else {}
            if time.get("completed") is None and not reply.error:
                # its prompt is older: read on from here, not from the newest again
                return OpenReply(message_id, _prompt_created(older, reply))
            break
    return None if waiting is None else OpenReply(None, waiting[0])


def _created(message: _Reply) -> Any:
    """A message's ``time.created`` when it is an integer, else None."""
    times = message.time if isinstance(message.time, dict) else {}
    created = times.get("created")
    return created if type(created) is int else None


def _newest_first(store: Any, session_id: str) -> Any:
    """(id, data) of a session's newest messages, newest first: from the index where the
    store has one, else the messages in order, reversed (the legacy files)."""
    newest = getattr(store, "newest_messages", None)
    if newest is not None:
        for index, (message_id, _updated, data) in enumerate(newest(session_id)):
            if index >= _LOOKED_AT:
                return
            yield message_id, data
        return
    rows = list(store.messages(session_id))
    for row in reversed(rows[-_LOOKED_AT:]):
        yield row.id, row.data


def _prompt_created(older: Any, reply: _Reply) -> Any:
    """When the prompt ``reply`` answers (its ``parentID``) was created, among ``older``
    (the messages older than the reply, newest first): the start of the turn it is in. A
    prompt typed while the reply runs is written at once, newer than it, and begins no
    turn of its own yet. None when that prompt is not among the newest."""
    parent = reply.parentID
    if not isinstance(parent, str):
        return None
    for message_id, data in older:
        if message_id != parent:
            continue
        try:
            return _created(decode_repairing(_REPLY, data)[0])
        except (msgspec.DecodeError, RecursionError, TypeError):
            return None
    return None


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
