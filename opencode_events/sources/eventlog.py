"""Sessions read as OpenCode writes them: its store's ``event`` log, through the server mapping.

OpenCode 1.18 appends every durable bus event to the ``event`` table of ``opencode.db``:
``aggregate_id`` the session, ``seq`` its number in that session, ``type`` the event type
with a version (``message.part.updated.1``), ``data`` the event's properties, the same
payload the server's ``GET /event`` sends. A ``StoreFollower`` reads what was appended
since its last read and hands each event to an ``SseReader`` (sources/sse.py), so a session
followed from the store gives the events ``attach`` gives from the server: a tool call once,
when it has ended, with its duration; a text once complete; ``usage`` per reply.

Where a session has no log (a database older than the log, or a session whose first events
were pruned), its message and part rows stand in: changed rows (by ``time_updated``) are
handed to the same reader as the updates ``message.updated`` and ``message.part.updated``
would have sent, messages in the import's order (``time_created``, id), a user message
before its parts and an assistant message after them. The rows of a session's latest
millisecond are read again at the next read (more may come in it): those unchanged since
are passed over, for the reader's memory of what it wrote is bounded (the history of a
large store outgrows it). The reader remembers what it wrote, so a row changed in that
millisecond, or a session that moves from its rows to its log, never doubles an event.
Looking at the rows costs a scan of those sessions' rows (no index says what changed), a
second for 10,000 sessions: after the history, such a look is put off until nine times what
the last one took has passed (at most a tenth of the time on them, where each look at every
change took a core while OpenCode worked), and ``rows_due`` says when one is owed without a
change to the store.

Each ``read`` takes one read transaction (one consistent snapshot) and ends it, so nothing
is held between reads. ``read_batches`` gives the same events in batches, a session read
from its rows never cut, so that a history of many sessions is never held whole (the
first read of ``--all`` on a large store). The follower also keeps, per session, what says
whether it is at work (``core.activity``): replies in flight, a prompt waiting for its
reply, the last write seen::

    follower = StoreFollower(Normalizer(), sessions=["ses_dd80"])
    with Store(path) as store:
        events = follower.read(store)     # the history, then, at each change, what is new
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from ..core.activity import BUSY, IDLE, NEXT_STEP_MS, STALE, session_state
from ..core.normalizer import Normalizer, Provenance
from ..core.views import MessageInfo, number
from ..errors import InputError
from ..events import Event
from ..store.changes import blake2b
from ..store.sqlite import SQLITE_ERRORS, sqlite_reason
from .sse import SseReader

__all__ = ["StoreFollower", "SessionActivity", "event_type", "BATCH_EVENTS"]

BATCH_EVENTS = 2000  # events a batch of ``read_batches`` holds at least (but the last)
ROWS_SHARE = 0.1  # the most of the time looks at the rows of sessions without a log take

_VERSION = re.compile(r"\.\d+$")


def event_type(stored: str) -> str:
    """The bus event type of a logged one: ``message.part.updated.1`` → ``message.part.updated``."""
    return _VERSION.sub("", stored)


class SessionActivity:
    """What the message updates of one session say about its work."""

    __slots__ = ("open", "last_user", "last_reply", "last_finish", "last_write", "seen_at")

    def __init__(self) -> None:
        self.open: set[str] = set()  # assistant messages without time.completed
        self.last_user = ""  # the newest user message id (ids grow with time)
        self.last_reply = ""  # the newest assistant message id
        self.last_finish: Any = None  # how the newest finished reply ended
        self.last_write: int | float | None = None  # the latest time in its writes (OpenCode's)
        # When, by our clock, a write to it was last read while following (not its history):
        # a step's end and the next step are told apart by this clock, not OpenCode's.
        self.seen_at: float | None = None

    @property
    def written(self) -> int | float | None:
        """The last write: OpenCode's time for it, or when we read it, the later."""
        if self.seen_at is None:
            return self.last_write
        return self.seen_at if self.last_write is None else max(self.last_write, self.seen_at)

    def in_flight(self, now_ms: int | float) -> bool:
        """A reply running, a prompt awaiting its reply, or a step that asked for tools
        just now (``core.activity``'s rule, over every reply seen, not only the newest)."""
        if self.open:
            return True
        if self.last_user > self.last_reply:
            return True
        if self.last_finish != "tool-calls":
            return False
        written = self.written
        return written is None or now_ms - written <= NEXT_STEP_MS

    def wrote(self, time: Any) -> None:
        if number(time) is not None and (self.last_write is None or time > self.last_write):
            self.last_write = time


class StoreFollower:
    """Reads a store's sessions as they are written (see the module's docstring).

    ``sessions``: ids, or id prefixes with ``resolve`` (``import``'s rule); without any,
    the top-level session written most recently, which, until it has been seen at work,
    gives way to a newer one. ``all_sessions``: every session. ``children``: the subagent
    sessions of the followed ones too (found as they are created).
    """

    def __init__(
        self,
        normalizer: Normalizer,
        *,
        sessions: Sequence[str] = (),
        all_sessions: bool = False,
        children: bool = False,
        deltas: bool = False,
        resolve: Callable[[Any, Sequence[str]], list[str]] | None = None,
    ) -> None:
        self.normalizer = normalizer
        # ``sessions`` → ids in the store (``store.open.select_sessions``: prefixes, errors)
        self.resolve = resolve or _exact
        self.wanted = list(sessions)
        self.all_sessions = all_sessions
        self.children = children
        self.reader = SseReader(
            normalizer,
            deltas=deltas,
            errors_from_messages=True,
            open_calls_at_end=True,
            on_message=self._message_seen,
        )
        self.roots: list[str] = []  # the sessions asked for (or chosen)
        self.family: set[str] = set()  # the sessions read: the roots and their subagents
        self.activity: dict[str, SessionActivity] = {}
        self.seen_at_work = False  # a followed session was in flight at some read
        self._rowid = 0  # the last event row read
        self._seqs: dict[str, int] = {}  # per session, the highest seq read
        self._moved: set[str] = set()  # sessions whose seq moved since ``moved`` was asked
        self._by_rows: dict[str, int] = {}  # sessions read from rows → time_updated cursor
        # and → the rows read at that cursor's millisecond, as (kind, id) → what they held
        self._at_cursor: dict[str, dict[tuple[str, Any], bytes]] = {}
        self._started: set[str] = set()  # sessions whose history was read
        self._has_log: bool | None = None
        self._session_rowid = 0  # with all_sessions: the newest session row looked at
        self._session_top_id: Any = None  # and the id it held then
        self._costs: dict[str, float] = {}  # session → its cost column, for limits
        self._reads = 0
        self._rows_next = 0.0  # the rows pass is put off until then (``monotonic``)
        self.rows_owed = False  # a change not yet looked for in the rows: a look is owed
        # Set when the store did not exist as following began: its history too is being
        # written now (its own times may be old: a store written again, a skewed clock).
        self.live_from_start = False
        self._touched: set[str] = set()  # sessions written to in this read
        # Whether every session in the batches given so far was read up to now (see
        # ``read_batches``): not inside the log, whose rows interleave the sessions.
        self.between_sessions = True

    # ------------------------------------------------------------------ reading

    def read(self, store: Any, now_ms: int | float | None = None) -> list[Event]:
        """Everything written since the last read (the first read: the history);
        ``now_ms`` (default: the clock) tells a step just ended from a turn that ended."""
        events: list[Event] = []
        for batch in self.read_batches(store, now_ms):
            events += batch
        return events

    def read_batches(self, store: Any, now_ms: int | float | None = None) -> Iterator[list[Event]]:
        """``read``'s events in batches of about ``BATCH_EVENTS`` or more, each session
        read from its rows whole in one; while ``between_sessions`` is true, every session
        in the batches so far was read up to now (not so inside the log, whose rows
        interleave the sessions). One read transaction, ended when the batches end or
        are closed."""
        if now_ms is None:
            now_ms = time.time() * 1000
        conn = store.conn
        try:
            conn.execute("BEGIN")
        except SQLITE_ERRORS as exc:
            raise InputError(f"cannot read {store.path}: {sqlite_reason(exc)}") from None
        try:
            yield from self._read(store, now_ms)
        except SQLITE_ERRORS as exc:
            raise InputError(f"cannot read {store.path}: {sqlite_reason(exc)}") from None
        finally:
            self.between_sessions = True
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    monotonic = staticmethod(time.monotonic)  # the clock of the rows' looks (tests set it)

    def rows_due(self) -> bool:
        """Whether a look is owed to the rows of sessions without a log, and its time has
        come: a follower looks then even if the store did not change since."""
        return self.rows_owed and self.monotonic() >= self._rows_next

    def rows_now(self) -> None:
        """The next look reads the rows, whatever the last one cost (before following
        ends: what was put off is read first)."""
        self._rows_next = 0.0

    @property
    def position(self) -> int:
        """The last row of the log read (its rowid)."""
        return self._rowid

    def session_seq(self, session_id: str) -> int | None:
        """The number of ``session_id``'s newest event read from the log (its change
        counter, ``store.changes``); None when it was read from its rows."""
        return self._seqs.get(session_id)

    def moved(self) -> set[str]:
        """The sessions whose change counter moved since this was last asked (a change
        that gave no event too: a title, a diff summary)."""
        moved, self._moved = self._moved, set()
        return moved

    def finish(self) -> list[Event]:
        """Parts still open when following ends (a text never completed, a call cut off)."""
        return self.reader.finish()

    def finish_session(self, session_id: str) -> list[Event]:
        """``finish`` for one session gone stale (OpenCode killed in it) while following
        goes on: its parts still open, as they last were."""
        return self.reader.finish_session(session_id)

    def _read(self, store: Any, now_ms: int | float) -> Iterator[list[Event]]:
        conn = store.conn
        if self._has_log is None or not self._has_log:
            self._has_log = _has_table(conn, "event")
        self._choose(store)
        events: list[Event] = []
        if not self.all_sessions and not self.roots:
            return  # nothing to follow yet (an empty store)
        self._grow_family(conn)
        self.between_sessions = False
        for session_id in self._new_sessions(conn):
            self._learn_parent(conn, session_id)
            events += self._history(conn, session_id)
            if len(events) >= BATCH_EVENTS:
                yield events
                events = []
        if self._has_log:
            for chunk in self._log(conn):
                events += chunk
                if len(events) >= BATCH_EVENTS:
                    yield events
                    events = []
        self.between_sessions = True
        began = self.monotonic()
        if self._reads and self._by_rows and began < self._rows_next:
            self.rows_owed = True  # put off: looked at once its time has come (``rows_due``)
        else:
            self.rows_owed = False
            for session_id, cursor in list(self._by_rows.items()):
                events += self._rows(conn, session_id, cursor)
                if len(events) >= BATCH_EVENTS:  # a session whole: never cut
                    yield events
                    events = []
            ended = self.monotonic()
            if self._reads:  # the history's pass reads everything: no measure of a look
                self._rows_next = ended + (ended - began) * (1 / ROWS_SHARE - 1)
        if events:
            yield events
        if self._reads or self.live_from_start:
            for session_id in self._touched:
                self._activity(session_id).seen_at = now_ms
        self._touched.clear()
        self._reads += 1
        self._read_costs(conn)
        if self.in_flight(now_ms):
            self.seen_at_work = True

    def _learn_parent(self, conn: sqlite3.Connection, session_id: str) -> None:
        """A subagent's events name its parent, as ``import``'s do (the log's
        ``session.created`` says so too, but it may be pruned)."""
        row = conn.execute(
            "SELECT parent_id, CAST(directory AS BLOB), time_created FROM session WHERE id = ?",
            (session_id,),
        ).fetchone()
        if row is not None:  # a fork's copied history is older than it: marked `copied`
            self.reader.learn_session_start(session_id, row[2])
        if row is not None and isinstance(row[0], str) and row[0]:
            self.normalizer.learn_parent(session_id, row[0])
        if row is not None and isinstance(row[1], bytes) and row[1]:
            # as bytes: a damaged one (not UTF-8) does not stop the follow
            directory = row[1].decode("utf-8", "replace")
            self.normalizer.learn_directory(session_id, directory)  # its MCP servers

    def _choose(self, store: Any) -> None:
        if self.all_sessions:
            return
        if self.wanted:
            if not self.roots:
                self.roots = self.resolve(store, self.wanted)
                self.family.update(self.roots)
            return
        if self.roots and self.seen_at_work:
            return
        newest = store.newest_session()
        if newest is not None and newest not in self.roots:
            # Not at work yet: the session written most recently is the one to follow.
            self.roots = [newest]
            self.family = {newest}

    def _grow_family(self, conn: sqlite3.Connection) -> None:
        if self.all_sessions or not self.children:
            return
        frontier = list(self.family)
        while frontier:
            found = []
            for start in range(0, len(frontier), 500):
                chunk = frontier[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                for (child,) in conn.execute(
                    f"SELECT id FROM session WHERE parent_id IN ({marks})", chunk
                ):
                    if child not in self.family:
                        self.family.add(child)
                        found.append(child)
            frontier = found

    def _new_sessions(self, conn: sqlite3.Connection) -> list[str]:
        """Followed sessions whose history is still to read, oldest first."""
        if self.all_sessions:
            # Every session row not read yet: one with a log comes through it from its
            # first event (``_history``), one without (written by an OpenCode older than
            # the log, or another program) from its rows. Rows after the newest looked
            # at are new (SQLite gives a new row a higher rowid while the last stays).
            try:
                (top,) = conn.execute("SELECT max(rowid) FROM session").fetchone()
            except sqlite3.OperationalError:  # a table without rowids: every row each time
                top, self._session_rowid = None, 0
            if top is None:  # no session yet, or no rowids
                rows = conn.execute("SELECT id FROM session ORDER BY time_created, id")
            else:
                # The newest rows went away, or went and new ones took their rowids (SQLite
                # gives the newest rowids again): look at every row again.
                if top < self._session_rowid or (
                    self._session_rowid
                    and self._session_at(conn, self._session_rowid) != self._session_top_id
                ):
                    self._session_rowid = 0
                rows = conn.execute(
                    "SELECT id FROM session WHERE rowid > ? ORDER BY time_created, id",
                    (self._session_rowid,),
                ).fetchall()
                self._session_rowid = top
                self._session_top_id = self._session_at(conn, top)
            return [sid for (sid,) in rows if sid not in self._started]
        pending = [sid for sid in self.family if sid not in self._started]
        if len(pending) < 2:
            return pending
        order = {sid: i for i, sid in enumerate(self.roots)}
        marks = ", ".join("?" * len(pending))
        created = dict(
            conn.execute(f"SELECT id, time_created FROM session WHERE id IN ({marks})", pending)
        )
        return sorted(pending, key=lambda s: (s not in order, created.get(s, 0), s))

    @staticmethod
    def _session_at(conn: sqlite3.Connection, rowid: int) -> Any:
        row = conn.execute("SELECT id FROM session WHERE rowid = ?", (rowid,)).fetchone()
        return row[0] if row else None

    def _history(self, conn: sqlite3.Connection, session_id: str) -> list[Event]:
        """A session's events so far: from its log when the log holds it from its first
        event, else from its rows (and from then on from its rows, unless it has a log)."""
        self._started.add(session_id)
        if self._has_log:
            (first,) = conn.execute(
                "SELECT min(seq) FROM event WHERE aggregate_id = ?", (session_id,)
            ).fetchone()
            if first == 0:
                if self.all_sessions:
                    return []  # the log read that follows starts from its first row
                return self._log_rows(
                    conn.execute(
                        "SELECT rowid, aggregate_id, seq, type, CAST(data AS BLOB) FROM event "
                        "WHERE aggregate_id = ? AND rowid <= ? ORDER BY rowid",
                        (session_id, self._rowid),
                    )
                )
            if first is not None:  # pruned: its rows first, its log after
                return self._rows(conn, session_id, 0, keep=False)
        self._by_rows[session_id] = 0
        return []  # read by the rows pass that follows

    # ------------------------------------------------------------------ the log

    def _log(self, conn: sqlite3.Connection) -> Iterator[list[Event]]:
        """The log's events since the last read, a thousand rows at a time."""
        (top,) = conn.execute("SELECT max(rowid) FROM event").fetchone()
        if top is None:
            return
        if top < self._rowid:  # rows removed at the end, their rowids given out again
            self._rowid = 0  # read again; the seq of each session skips what was read
        rows = conn.execute(
            "SELECT rowid, aggregate_id, seq, type, CAST(data AS BLOB) FROM event "
            "WHERE rowid > ? ORDER BY rowid",
            (self._rowid,),
        )
        while chunk := rows.fetchmany(1000):
            yield self._log_rows(chunk, advance=True)
        self._rowid = max(self._rowid, top)

    def _log_rows(self, rows: Iterable[tuple[Any, ...]], *, advance: bool = False) -> list[Event]:
        events: list[Event] = []
        family = None if self.all_sessions else self.family
        seqs = self._seqs
        event = self.reader.event
        for rowid, session_id, seq, type_, data in rows:
            if advance:
                self._rowid = rowid
            if family is not None and session_id not in family:
                continue
            if session_id in self._by_rows:
                continue  # read from its rows
            if type(seq) is int:
                if seq <= seqs.get(session_id, -1):
                    continue  # read already
                seqs[session_id] = seq
                self._moved.add(session_id)
            if self.all_sessions:
                self._started.add(session_id)
            if not isinstance(type_, str) or type(data) is not bytes:
                data = b"null" if type(data) is not bytes else data
                type_ = str(type_)
            kind = event_type(type_)
            prov = Provenance(session_id=session_id, raw=_frame(kind, data))
            found = event(kind, data, prov)
            self._activity(session_id).wrote(prov.time)
            if found:
                events += found
        return events

    # ------------------------------------------------------------------ rows

    def _rows(
        self, conn: sqlite3.Connection, session_id: str, cursor: int, *, keep: bool = True
    ) -> list[Event]:
        """The session's messages and parts written at ``cursor`` or later (ms), but those
        read at ``cursor`` before and unchanged since: the reader's memory of what it wrote
        is bounded, and a store's history outgrows it, so they would be written again."""
        before = self._at_cursor.get(session_id, {}) if keep else {}
        at_latest: dict[tuple[str, Any], Any] = {}  # the rows at ``latest``: their data
        messages: dict[Any, tuple[Any, Any, Any]] = {}
        parts: dict[Any, list[tuple[Any, ...]]] = {}
        latest = cursor
        for pid, mid, updated, data in conn.execute(
            "SELECT id, message_id, time_updated, CAST(data AS BLOB) FROM part "
            "WHERE session_id = ? AND time_updated >= ?",
            (session_id, cursor),
        ):
            if type(updated) is int and updated > latest:
                latest, at_latest = updated, {}
            if updated == latest:
                at_latest[("p", pid)] = data
            if before and updated == cursor and before.get(("p", pid)) == _held(data):
                continue  # read at the cursor, unchanged
            parts.setdefault(mid, []).append((pid, updated, data))
        for mid, created, updated, data in conn.execute(
            "SELECT id, time_created, time_updated, CAST(data AS BLOB) FROM message "
            "WHERE session_id = ? AND time_updated >= ?",
            (session_id, cursor),
        ):
            if type(updated) is int and updated > latest:
                latest, at_latest = updated, {}
            if updated == latest:
                at_latest[("m", mid)] = data
            if (
                before
                and updated == cursor
                and mid not in parts  # none of its parts changed
                and before.get(("m", mid)) == _held(data)
            ):
                continue  # read at the cursor, unchanged
            messages[mid] = (created, updated, data)
        if keep:
            # Rows written in the same millisecond as the last one read may still come.
            self._by_rows[session_id] = latest
            self._at_cursor[session_id] = {key: _held(data) for key, data in at_latest.items()}
        if not messages and not parts:
            return []
        missing = [mid for mid in parts if mid not in messages]
        created_of = {mid: row[0] for mid, row in messages.items()}
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            created_of.update(
                conn.execute(
                    "SELECT id, time_created FROM message WHERE session_id = ? AND id IN "
                    f"({', '.join('?' * len(chunk))})",
                    [session_id, *chunk],
                )
            )
        order = sorted(
            (mid for mid in {*messages, *parts} if mid in created_of),
            key=lambda mid: (_sortable(created_of[mid]), mid),
        )
        events: list[Event] = []
        reader = self.reader
        activity = self._activity(session_id)
        for mid in order:
            message = messages.get(mid)
            user_first = message is not None and _is_user(message[2])
            if message is not None and user_first:
                events += reader.stored_message(message[2], _prov(session_id, mid))
            elif message is not None:  # its usage is labelled by its model
                reader.know_message(message[2], mid, session_id)
            for pid, updated, data in sorted(parts.get(mid, ()), key=lambda row: row[0]):
                events += reader.stored_part(data, _prov(session_id, mid, pid), updated)
                activity.wrote(updated)
            if message is not None and not user_first:
                events += reader.stored_message(message[2], _prov(session_id, mid))
            if message is not None:
                activity.wrote(message[1])
        return events

    # ------------------------------------------------------------------ state

    def _activity(self, session_id: str) -> SessionActivity:
        self._touched.add(session_id)
        found = self.activity.get(session_id)
        if found is None:
            found = self.activity[session_id] = SessionActivity()
        return found

    def _message_seen(self, session_id: str | None, info: MessageInfo) -> None:
        if session_id is None or not isinstance(info.id, str):
            return
        state = self._activity(session_id)
        times = info.time
        if times is not None:
            state.wrote(times.created)
            state.wrote(times.completed)
        if info.role == "user":
            state.last_user = max(state.last_user, info.id)
        elif info.role == "assistant":
            if info.id >= state.last_reply:
                state.last_reply = info.id
            if (times is not None and times.completed is not None) or info.error:
                state.open.discard(info.id)
                if info.id == state.last_reply:
                    state.last_finish = None if info.error else info.finish
            else:
                state.open.add(info.id)

    def followed(self) -> list[str]:
        """The sessions whose work decides when following ends."""
        return list(self.activity) if self.all_sessions else list(self.family)

    def state(self, now_ms: int | float, stale_after: int | None = None) -> str:
        """``busy`` while a followed session is at work, ``stale`` when the only ones in
        flight have been silent too long, else ``idle`` (``core.activity``)."""
        result = IDLE
        for session_id in self.followed():
            found = self.activity.get(session_id)
            if found is None:
                continue
            state = session_state(
                in_flight=found.in_flight(now_ms),
                last_write_ms=found.written,
                now_ms=now_ms,
                stale_after=stale_after,
            )
            if state == BUSY:
                return BUSY
            if state == STALE:
                result = STALE
        return result

    def in_flight(self, now_ms: int | float) -> bool:
        return any(
            found.in_flight(now_ms)
            for sid in self.followed()
            if (found := self.activity.get(sid)) is not None
        )

    def _read_costs(self, conn: sqlite3.Connection) -> None:
        """The session columns' cost of the followed sessions and all their subagents."""
        if self.all_sessions:
            return
        known = set(self.family)
        frontier = list(known)
        costs: dict[str, float] = {}
        while frontier:
            found = []
            for start in range(0, len(frontier), 500):
                chunk = frontier[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                for sid, cost in conn.execute(
                    f"SELECT id, cost FROM session WHERE id IN ({marks})", chunk
                ):
                    costs[sid] = cost if type(cost) is float or type(cost) is int else 0.0
                for (child,) in conn.execute(
                    f"SELECT id FROM session WHERE parent_id IN ({marks})", chunk
                ):
                    if child not in known:
                        known.add(child)
                        found.append(child)
            frontier = found
        self._costs = costs

    @property
    def settled(self) -> bool:
        """Whether the sessions followed are the ones to the end: named (or every session),
        or the one chosen seen at work. Until then the newest session is followed, and a
        newer one takes its place (``_choose``): an idle one's cost says nothing of the run
        about to start."""
        return bool(self.wanted) or self.all_sessions or self.seen_at_work

    @property
    def total_cost(self) -> float:
        """What the followed sessions and their subagents cost so far (OpenCode's figures)."""
        return float(sum(self._costs.values()))


def _exact(store: Any, wanted: Sequence[str]) -> list[str]:
    """Sessions named by their whole ids (a caller with prefixes passes ``resolve``)."""
    for session_id in wanted:
        if store.session(session_id) is None:
            raise InputError(f"no session {session_id} in {store.path}")
    return list(dict.fromkeys(wanted))


def _prov(session_id: str, message_id: Any, part_id: Any = None) -> Provenance:
    return Provenance(
        session_id=session_id,
        message_id=message_id if isinstance(message_id, str) else None,
        part_id=part_id if isinstance(part_id, str) else None,
    )


def _frame(kind: str, data: bytes) -> bytes:
    """The event as the server frames it (``raw`` of an unknown event, and with --raw)."""
    return b'{"type":' + msgspec.json.encode(kind) + b',"properties":' + data + b"}"


class _Role(msgspec.Struct):
    role: Any = None


_ROLE = msgspec.json.Decoder(_Role)


def _is_user(data: bytes) -> bool:
    try:
        return _ROLE.decode(data).role == "user"
    except (msgspec.DecodeError, RecursionError):
        return False


def _held(data: Any) -> bytes:
    """What a row read at a cursor held: a digest of its data."""
    raw = data if type(data) is bytes else repr(data).encode()
    return blake2b(raw, digest_size=16).digest()


def _sortable(value: Any) -> Any:
    return value if type(value) is int or type(value) is float else 0


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None
