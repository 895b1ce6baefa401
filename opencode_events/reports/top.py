"""``top``: a board of the sessions at work now and recently, kept up to date by reading
only what changed.

A ``TopBoard`` follows one database. ``refresh`` asks a ``StoreWatch`` whether anything was
committed (two ``stat`` calls and a 48-byte read: nothing else while OpenCode is idle); when
something was, it opens the store read-only and reads:

- the message rows inserted since the last look (by rowid) and the replies that were in
  flight then (by id), which move the sessions' order and today's and this week's spend;
- for each session on the board that changed or is at work: its row and its subagents' (cost
  with subagents, through the parent index), its newest messages (state, context, the reply
  running) and that reply's newest parts (the tool running).

So a refresh costs in proportion to what changed and to the board's size, not to the
database. The first look reads this week's messages once (by their ids' time prefix, as
``statusline`` reads today's), and so does the first look of a new day. ``board()``
gives the rows as of the last refresh (a view shows running times against its clock)::

    top = TopBoard(path, limit=20)
    top.refresh(now_ms)                # True when the store changed and was read
    board = top.board()                # Board(rows=[BoardRow…], today=…, week=…)
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, tzinfo
from typing import Any

import msgspec
from msgspec import Struct

from ..core.activity import BUSY, IDLE, session_state, stale_after_ms
from ..core.figures import summed_cost
from ..core.views import Part, decode_repairing, number
from ..errors import InputError
from ..store.sqlite import Store
from ..store.watch import StoreWatch
from .spend import family_spend
from .statusline import REPLY, day_bounds, day_start, prompt_tokens, reply_says_in_flight

__all__ = ["TopBoard", "Board", "BoardRow", "week_start"]

SEED_ROWS = 512  # newest message rows read at the first look, to find the recent sessions
_PART = msgspec.json.Decoder(Part)
_UNREADABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, TypeError)


class BoardRow(Struct, kw_only=True):
    session_id: str
    title: str | None = None
    agent: str | None = None
    model: str | None = None
    state: str = IDLE
    running: str | None = None  # "bash", "inference": what the busy session is doing
    running_since: int | None = None  # epoch ms
    turns: int = 0
    tokens: int = 0  # with its subagents', as their rows sum them (sessions' total_tokens)
    context_tokens: int | None = None
    cost: float = 0.0  # with subagents
    subagents: int = 0
    last_write: int | None = None
    # What a pending /undo undid: counted in ``cost``, as OpenCode counts it (reports.undone)
    undone_cost: float = 0.0
    # A fork: its cost includes the history it copied, as OpenCode's (reports.sessions)
    forked: bool = False


class Board(Struct, kw_only=True):
    rows: list[BoardRow]
    today: float
    week: float
    path: str
    readable: bool = True  # False: the store is missing or could not be read at the last look
    problem: str | None = None  # why, then: the error line a report would give


def _tokens(session: Any) -> int:
    """A session row's tokens, every class (as ``sessions``' ``total_tokens`` sums them)."""
    return (
        (session.tokens_input or 0)
        + (session.tokens_output or 0)
        + (session.tokens_reasoning or 0)
        + (session.tokens_cache_read or 0)
        + (session.tokens_cache_write or 0)
    )


def week_start(now_ms: float, tz: tzinfo | None) -> int:
    """Monday 00:00 (local, or ``tz``) of the week ``now_ms`` falls in, epoch ms."""
    day = datetime.fromtimestamp(now_ms / 1000, tz).date()
    return day_start(day - timedelta(days=day.weekday()), tz)


class _Tally:
    __slots__ = ("row", "turns_known", "open_reply")

    def __init__(self, session_id: str) -> None:
        self.row = BoardRow(session_id=session_id)
        self.turns_known = False
        self.open_reply: str | None = None


class TopBoard:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        limit: int = 20,
        tz: tzinfo | None = None,
        watch: StoreWatch | None = None,
        stale_after: int | None = None,
    ) -> None:
        self.path = path
        self.limit = limit
        self.tz = tz
        self.watch = watch or StoreWatch(path)
        self.stale_after = stale_after_ms() if stale_after is None else stale_after
        self.reads = 0  # looks at the store that opened it (for tests and the bench)
        self.rows_read = 0  # message and part rows read, all looks together
        self.readable = True  # False after a look that could not read the store
        self.problem: str | None = None  # why it could not (the InputError's message)
        self._reset()

    def _reset(self) -> None:
        self._rowid = 0
        self._rowid_id: Any = None  # the id of the message at ``_rowid``, once one is read
        self._bounds: tuple[int, int, int] | None = None  # week start, today start, today end
        self._spend: dict[str, tuple[int, float]] = {}  # reply → (created, cost)
        self._open: set[str] = set()  # replies in flight in the window, read again each look
        self._today = self._week = 0.0
        self._activity: dict[str, int] = {}  # top-level session → its last activity (ms)
        self._root_of: dict[str, str] = {}
        self._tallies: dict[str, _Tally] = {}

    # ------------------------------------------------------------------ reading

    def refresh(self, now_ms: float | None = None, *, force: bool = False) -> bool:
        """Read what changed since the last look, if anything did; ``force``: read as if
        every session on the board had changed (the most a change can cost)."""
        now = time.time() * 1000 if now_ms is None else now_ms
        new_day = self._bounds is not None and now >= self._bounds[2]
        busy = any(t.row.state == BUSY for t in self._shown())
        if not (self.watch.changed() or force or new_day):
            if not self.watch.exists:  # none yet, or gone (OpenCode replacing it): say so
                self.readable = False
                self.problem = f"no OpenCode database at {self.path} (waiting for it)"
                return False
            # Nothing written: a busy session may still turn stale, by the clock alone.
            if busy:
                for tally in self._shown():
                    self._judge(tally, now)
            return False
        try:
            with Store(self.path) as store:
                self._read(store, now, new_day, force)
        except InputError as exc:
            self.readable, self.problem = False, str(exc)
            self.watch.forget()
            return False
        self.readable, self.problem = True, None
        self.reads += 1
        return True

    def _read(self, store: Store, now: float, new_day: bool, everything: bool = False) -> None:
        last = store.last_message_rowid()
        # A new day, a new file, the newest rows deleted, or deleted and their rowids given
        # to new rows (an undo, then a prompt, between two looks): read it all again.
        reused = self._rowid_id is not None and store.message_id_at(self._rowid) != self._rowid_id
        if new_day or last < self._rowid or reused or self._bounds is None:
            self._reset()
            self._first_look(store, now, last)
        touched = self._new_rows(store)
        touched |= self._open_replies(store)
        for root in self._shown_roots():
            tally = self._tallies.get(root)
            if tally is None or root in touched or tally.row.state == BUSY or everything:
                self._tally(store, root, now)

    def _first_look(self, store: Store, now: float, last: int) -> None:
        today_start, today_end = day_bounds(now, self.tz)
        start = week_start(now, self.tz)
        self._bounds = (start, today_start, today_end)
        for message_id, created, session_created, data in store.messages_between(start, today_end):
            self.rows_read += 1
            self._count(message_id, created, session_created, data)
        self._rowid = max(0, last - SEED_ROWS)

    def _count(self, message_id: str, created: Any, session_created: Any, data: bytes) -> None:
        """A reply's cost into the spend, once (a row read again replaces its cost)."""
        bounds = self._bounds
        if bounds is None or type(created) is not int or not bounds[0] <= created < bounds[2]:
            return
        if type(session_created) is int and created < session_created:
            return  # a fork's copied history
        try:
            reply = decode_repairing(REPLY, data)[0]
        except _UNREADABLE:
            return
        if reply.role != "assistant":
            return
        cost = number(reply.cost)
        cost = float(cost) if cost is not None else 0.0
        old = self._spend.get(message_id)
        delta = cost - (old[1] if old else 0.0)
        self._spend[message_id] = (created, cost)
        self._week += delta
        if created >= bounds[1]:
            self._today += delta
        completed = reply.time.completed if reply.time is not None else None
        if completed is None and not reply.error:
            self._open.add(message_id)
        else:
            self._open.discard(message_id)

    def _new_rows(self, store: Store) -> set[str]:
        rows = list(store.messages_after(self._rowid))
        self.rows_read += len(rows)
        created = store.sessions_created({row[2] for row in rows})
        touched: set[str] = set()
        for rowid, message_id, session_id, time_created, time_updated, data in rows:
            if rowid > self._rowid:
                self._rowid, self._rowid_id = rowid, message_id
            self._count(message_id, time_created, created.get(session_id), data)
            if type(session_id) is not str:  # a damaged row of no session: spend, no row
                continue
            root = self._root(store, session_id)
            touched.add(root)
            when = number(time_updated) or number(time_created) or 0
            self._activity[root] = max(self._activity.get(root, 0), int(when))
            tally = self._tallies.get(root)
            known = tally is not None and session_id == root and tally.turns_known
            if known and data.startswith(b'{"role":"user"'):  # OpenCode writes the role first
                tally.row.turns += 1
        return touched

    def _open_replies(self, store: Store) -> set[str]:
        touched: set[str] = set()
        if not self._open:
            return touched
        rows = list(store.messages_by_id(sorted(self._open)))
        self.rows_read += len(rows)
        created = store.sessions_created({row[2] for row in rows})
        for _, message_id, session_id, time_created, time_updated, data in rows:
            self._count(message_id, time_created, created.get(session_id), data)
            if type(session_id) is not str:  # as in _new_rows
                continue
            root = self._root(store, session_id)
            touched.add(root)
            when = number(time_updated) or 0
            self._activity[root] = max(self._activity.get(root, 0), int(when))
        return touched

    def _root(self, store: Store, session_id: str) -> str:
        found = self._root_of.get(session_id)
        if found is not None:
            return found
        chain = [session_id]
        sid = session_id
        while (parent := store.parent_of(sid)) is not None and parent not in chain:
            if store.session(parent) is None:  # an orphan counts on its own
                break
            chain.append(parent)
            sid = parent
        for member in chain:
            self._root_of[member] = sid
        return sid

    def _shown_roots(self) -> list[str]:
        return sorted(self._activity, key=lambda r: (self._activity[r], r), reverse=True)[
            : self.limit
        ]

    def _shown(self) -> list[_Tally]:
        return [t for r in self._shown_roots() if (t := self._tallies.get(r)) is not None]

    def _tally(self, store: Store, root: str, now: float) -> None:
        tally = self._tallies.get(root)
        if tally is None:
            tally = self._tallies[root] = _Tally(root)
        row = tally.row
        session = store.session(root)
        if session is not None:
            row.title, row.agent = session.title, session.agent
            row.model = _model_id(session.model)
        family = store.family_rows(root)
        # Folded as every figure of a row is (sessions): the root's tokens and its subagents'.
        members = [session, *(store.session(sid) for sid, _, _ in family[1:])]
        row.tokens = sum(_tokens(member) for member in members if member is not None)
        row.cost = family_spend(store, family).total  # as sessions and statusline write it
        row.undone_cost = 0.0
        if session is not None and session.revert:  # a pending /undo: rare, read whole
            from .undone import undone_figures

            for undone in undone_figures(store, [root]).values():
                row.undone_cost = undone.cost
        row.forked = root in store.forks([root])
        row.subagents = max(0, len(family) - 1)
        row.last_write = max((updated for _, _, updated in family), default=None)
        in_flight, open_reply, since = None, None, None
        context = None
        turns = 0
        for message_id, updated, data in store.newest_messages(root):
            # Read on to the first message once, to count the turns; then only the newest.
            if in_flight is not None and context is not None and tally.turns_known:
                break
            self.rows_read += 1
            if row.last_write is None or (number(updated) or 0) > row.last_write:
                row.last_write = int(updated)
            try:
                reply = decode_repairing(REPLY, data)[0]
            except _UNREADABLE:
                continue
            if reply.role == "user":
                turns += 1
            if in_flight is None:
                in_flight = reply_says_in_flight(reply, updated, now)
                completed = reply.time.completed if reply.time is not None else None
                if in_flight and (reply.role == "user" or completed is None):
                    # since the prompt, or the reply it runs (a step's gap: not known)
                    since = reply.time.created if reply.time is not None else None
                    open_reply = message_id if reply.role == "assistant" else None
            if reply.role != "assistant":
                continue
            if context is None:
                context = prompt_tokens(reply.tokens)
        else:
            if not tally.turns_known:
                row.turns, tally.turns_known = turns, True
        row.context_tokens = context
        tally.open_reply = open_reply
        row.running, row.running_since = None, None
        if in_flight:
            # Written: its parts and its subagents' rows too (a tool's streamed output, a
            # subagent at work while it waits on `task`): OpenCode does not touch the
            # session row, or the reply's, for every part (as statusline judges it).
            for sid, _, _ in family:
                written = store.last_write(sid)
                if written is not None and (row.last_write is None or written > row.last_write):
                    row.last_write = written
            row.state = BUSY
            row.running, row.running_since = "inference", since if type(since) is int else None
            if open_reply is not None:
                self._running_tool(store, row, open_reply)
        else:
            row.state = IDLE
        self._judge(tally, now)

    def _running_tool(self, store: Store, row: BoardRow, message_id: str) -> None:
        parts = store.newest_parts(message_id)
        self.rows_read += len(parts)
        for data in parts:
            try:
                part = decode_repairing(_PART, data)[0]
            except _UNREADABLE:
                continue
            state = part.state
            if part.type == "tool" and state is not None and state.status in ("pending", "running"):
                row.running = part.tool if isinstance(part.tool, str) else "tool"
                start = state.time.start if state.time is not None else None
                row.running_since = start if type(start) is int else row.running_since
                return

    def _judge(self, tally: _Tally, now: float) -> None:
        row = tally.row
        if row.state == IDLE:
            return
        row.state = session_state(
            in_flight=True, last_write_ms=row.last_write, now_ms=now, stale_after=self.stale_after
        )
        if row.state != BUSY:
            row.running, row.running_since = None, None

    # ------------------------------------------------------------------ the board

    def board(self) -> Board:
        rows = [t.row for t in self._shown()]
        return Board(
            rows=rows,
            today=summed_cost(self._today, 2),
            week=summed_cost(self._week, 2),
            path=os.fspath(self.path),
            readable=self.readable,
            problem=self.problem,
        )


def _model_id(raw: Any) -> str | None:
    """The model id of a session row's ``model`` JSON (``{"id", "providerID", …}``)."""
    if raw is None:
        return None
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.DecodeError, TypeError):
        return None
    model = value.get("id") if isinstance(value, dict) else None
    return model if isinstance(model, str) else None
