"""What a session's pending undo (its ``revert``: the TUI's /undo, ``POST
/session/{id}/revert``) has undone, in the figures the reports count.

OpenCode 1.18.33 keeps the undone messages stored and hidden from the conversation until
the next prompt, whose cleanup deletes them and takes their cost and tokens off the
session's columns. Until then its own totals count them: the TUI sidebar's "spent" is the
session's ``cost`` column, ``opencode stats`` adds the same column, and the sidebar's
context gauge reads the last assistant message whatever the revert. The reports follow
it — they keep counting those inferences, which were run and paid for — and say so: a
session's ``undone_inferences`` and ``undone_cost`` (what the next prompt will take off)
and a note on the report (``note``).

What the next prompt takes off is the messages OpenCode's cleanup deletes: those from the
revert's ``messageID`` on; with a ``partID``, the messages after that one (the message
itself keeps its figures, losing only the parts from ``partID`` on). That is
``core.mapping.RevertPoint``'s rule for whole messages. A subagent started by an undone
turn keeps its own session (the cleanup deletes nothing of it)::

    undone = undone_figures(store, ["ses_dcbc44ef…"])
    undone["ses_dcbc44ef…"].inferences, undone["ses_dcbc44ef…"].cost   # 2, 0.00258
    note(undone.values())   # '1 session has a pending /undo: 2 steps, $0.00258, counted …'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import Struct

from ..core.figures import read_figures, summed_cost
from ..core.views import UsageMessage, decode_repairing

if TYPE_CHECKING:  # imported where a session is read: most reports read none
    from ..core.mapping import RevertPoint

__all__ = ["Undone", "undone_figures", "note"]

_MESSAGE = msgspec.json.Decoder(UsageMessage)


class Undone(Struct, kw_only=True):
    """The inferences of one session a pending undo has undone, and their figures."""

    session_id: str
    inferences: int = 0
    cost: float = 0.0
    total_tokens: int = 0
    message_ids: list[str] = []  # the undone assistant messages, in order


def pending_reverts(store: Any) -> dict[str, str | bytes]:
    """Session id → its pending revert (JSON): one indexed read of the session table; none
    for a store that knows of no reverts."""
    reverts = getattr(store, "reverted_sessions", None)
    return reverts() if reverts is not None else {}


_LEDGER_FORMAT = 1  # the shape of Undone: a new one, a new ledger


def undone_figures(
    store: Any,
    session_ids: Iterable[str],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    cache: Any = None,
) -> dict[str, Undone]:
    """The sessions of ``session_ids`` with a pending undo that undid an inference → what
    it undid; with ``since_ms``, of the inferences created at or after it, with ``until_ms``
    at or before it (as ``usage --since/--until`` count). ``cache`` (a ``ReportCache``):
    what it found of a session is kept under the session's stamp, which an undo, a redo
    and any new message move, and not read again while the stamp holds."""
    reverts = pending_reverts(store)
    if not reverts:
        return {}
    wanted = session_ids if isinstance(session_ids, (set, dict)) else set(session_ids)
    request = ["undone", since_ms, until_ms, _LEDGER_FORMAT]
    kept: dict[str, Undone] = cache.ledger("undone", request, Undone) if cache else {}
    read: dict[str, Undone] = {}
    found: dict[str, Undone] = {}
    for sid in [sid for sid in reverts if sid in wanted]:  # the few with a pending undo
        undone = kept.get(sid)
        if undone is None:
            from ..core.mapping import RevertPoint

            point = RevertPoint.of(reverts[sid])
            if point is None:
                continue
            undone = read[sid] = _undone_of(store, sid, point, since_ms, until_ms)
        if undone.inferences:
            found[sid] = undone
    if cache is not None and read:
        cache.keep_ledger("undone", request, {**kept, **read})
    return found


def _undone_of(
    store: Any, sid: str, point: RevertPoint, since_ms: int | None, until_ms: int | None = None
) -> Undone:
    undone = Undone(session_id=sid)
    costs: list[float] = []
    later = getattr(store, "messages_from", None)  # the undone rows alone, where it can
    messages = later(sid, point.message_id) if later is not None else None
    for message in store.messages(sid) if messages is None else messages:
        if not point.message(message.id):
            continue
        created = message.time_created
        if since_ms is not None and type(created) is int and created < since_ms:
            continue
        if until_ms is not None and type(created) is int and created > until_ms:
            continue
        try:
            info = decode_repairing(_MESSAGE, message.data)[0]
        except (msgspec.DecodeError, RecursionError):  # as usage: a row it cannot read
            continue
        if info.role != "assistant":
            continue
        figures = read_figures(info.tokens, info.cost)
        undone.inferences += 1
        undone.message_ids.append(message.id)
        undone.total_tokens += figures.total
        costs.append(figures.cost)
    undone.cost = summed_cost(sum(costs), len(costs))
    return undone


def note(undone: Iterable[Undone]) -> str | None:
    """The report's note about the inferences pending undos undid, or None when none."""
    found = list(undone)
    if not found:
        return None
    steps = sum(u.inferences for u in found)
    cost = summed_cost(sum(u.cost for u in found), steps)
    sessions = "1 session has" if len(found) == 1 else f"{len(found)} sessions have"
    return (
        f"{sessions} a pending /undo: {steps} step{'s' if steps != 1 else ''}, "
        f"${cost:.6g}, counted as OpenCode counts them until the next prompt deletes them"
    )
