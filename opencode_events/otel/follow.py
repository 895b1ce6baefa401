"""``otel --follow``: each session sent once it is done, as OpenCode writes its store.

The store is followed as ``import --follow`` follows it (``pipeline.follow``,
``sources.eventlog``); its events are gathered into each session's trace
(``export.SpanCollector``). A session no longer at work (idle, or stale: a killed run) is
finished and sent — with what its store row says then (title, agent, times, its place in
the session tree) — and forgotten, so memory holds only the sessions at work. One that
works again later is sent again when it is done: its new inferences and calls, and its
session span (the same ids, the row's whole time span). After every send the counters go
too, cumulative over what was read (their start: the earliest session's). With a
``SentLedger`` (``otel.sent``), what the backend took is recorded, session by session, and a
session it already has as it is now is not sent again: a follower started again sends what
is new, and still counts the whole history in its counters.

A follower runs for days, so what the backend cannot take does not end it: a body it cannot
reach (or that it is too busy for, after the transport's retries) stays queued, in order,
and is tried again later (at most ``MAX_QUEUED_BYTES`` kept: the oldest go first); a body it
refuses is sent again one session at a time, and a session refused alone is let go (split
further first when it was too large, 413). Each is told through ``warn`` as it happens, as
are the backend's partial successes.

    sender = FollowSender(path, follower, collector, destination, ledger=ledger, warn=say)
    follow_store(path, follower, collector, until_idle=False, stop=sender.poll)
    sender.send(everything=True)
    sender.finish()          # raises ExportError when something is still undelivered
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, NamedTuple

from ..core.activity import BUSY, IDLE, STALE, session_state
from ..store.open import every_session
from ..store.sqlite import Store
from .export import SpanCollector, Summary, read_session
from .otlp import Resources, SpanBatches, metrics_body
from .sent import SentLedger
from .spans import SessionInfo, session_info
from .transport import ExportError

__all__ = ["FollowSender", "SEND_EVERY_S", "MAX_QUEUED_BYTES"]

SEND_EVERY_S = 1.0  # how often finished sessions are looked for while following
MAX_QUEUED_BYTES = 64 << 20  # bodies kept for a backend that cannot be reached
_RETRY_EVERY_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)  # queued bodies tried again after this
_SMALLEST_BODY = 64 << 10  # a session refused as too large is split down to this
_SAVE_EVERY_S = 5.0  # what was delivered is written down at most this often (and at the end)


class _Queued(NamedTuple):
    signal: str
    body: bytes
    # whose spans the body holds: (piece, session id, first, end) of each session's spans
    spans: tuple[tuple[int, str, int, int], ...]
    max_bytes: int  # the body size it was cut to

    @property
    def sessions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(sid for _, sid, _, _ in self.spans))


class FollowSender:
    def __init__(
        self,
        path: str | os.PathLike[str],
        follower: Any,
        collector: SpanCollector,
        destination: Any,
        *,
        traces: bool = True,
        metrics: bool = True,
        stale_after: int | None = None,
        clock: Callable[[], float] = time.time,
        warn: Callable[[str], None] | None = None,
        ledger: SentLedger | None = None,
    ) -> None:
        self.path = path
        self.ledger = ledger if traces else None
        self._pending: dict[str, int] = {}  # session → its counter when its spans were queued
        self._holding: Counter[str] = Counter()  # session → queued bodies with its spans
        self._saved_at = 0.0
        self._ledger_said = False  # why the ledger cannot be kept, said once
        self._moved: set[str] = set()  # sessions whose counter moved: caught up when done
        self.warn = warn
        self.queue: deque[_Queued] = deque()
        self._queued_bytes = 0
        # What the queued bodies were made of, to send a refused one again session by session.
        self._pieces: dict[int, tuple[Any, list[Any]]] = {}  # piece → resource, spans
        self._given = 0  # pieces numbered so far
        self._failures = 0  # tries in a row that could not reach the backend
        self._next_try = 0.0
        self._failed: ExportError | None = None  # why the queue is not empty
        self.dropped_sessions: set[str] = set()  # let go: refused, or the queue was full
        self._series_start: int | float | None = None  # the counters' start, once sent
        self._last = False  # the last send, told to stop: one try of each body
        self.follower = follower
        self.collector = collector
        self.destination = destination
        self.traces, self.metrics = traces, metrics
        self.stale_after = stale_after
        self.clock = clock
        self.started_ms = clock() * 1000
        self.resources = Resources()
        self.summary = Summary()
        self._last_look = 0.0
        builder = collector.builder
        builder.learn_parents = False  # the store's tree says who is whose subagent
        builder.counted = set()  # a session sent twice is one session

    def poll(self) -> bool:
        """``follow_store``'s ``stop`` hook: send what is done (at most once a second), and
        what is queued when its time to try again has come; never asks to stop."""
        now = self.clock()
        if now - self._last_look >= SEND_EVERY_S:
            self._last_look = now
            self.send()  # and what is queued, when its time has come
        elif self.queue and now >= self._next_try:
            self._deliver()
        return False

    def done(self, session_id: str, now_ms: float) -> bool:
        return self._state(session_id, now_ms) != BUSY

    def _state(self, session_id: str, now_ms: float) -> str:
        activity = self.follower.activity.get(session_id)
        if activity is None:  # nothing says it works: a history read whole
            return IDLE
        return session_state(
            in_flight=activity.in_flight(now_ms),
            last_write_ms=activity.written,
            now_ms=now_ms,
            stale_after=self.stale_after,
        )

    def send(self, *, everything: bool = False) -> None:
        """Send the sessions that are done (``everything``: all gathered)."""
        collector = self.collector
        now_ms = self.clock() * 1000
        states = {sid: self._state(sid, now_ms) for sid in collector.traces}
        ready = [sid for sid, state in states.items() if everything or state != BUSY]
        for sid in ready:
            if states[sid] == STALE:  # OpenCode killed in it: the call it died in goes too
                collector.write(self.follower.finish_session(sid))
        if ready:
            self._gather(ready, now_ms)
        self._caught_up(states, now_ms)
        if self.queue and (everything or self.clock() >= self._next_try):
            self._deliver()  # and what a backend out of reach left queued, when its time came

    def _gather(self, ready: list[str], now_ms: float) -> None:
        """The spans of the sessions ``ready`` and the counters after them, queued."""
        collector = self.collector
        builder = collector.builder
        batches = SpanBatches(self.destination.max_bytes)
        sent = 0
        ledger = self.ledger
        left_out = 0
        with Store(self.path) as store:
            known = set(every_session(store))
            if ledger is not None and not self.summary.sessions and not self.summary.left_out:
                ledger.keep_only(known)  # the deleted sessions' records go, once a run
            builder.parents.clear()
            builder.parents.update(
                (child, parent)
                for parent, kids in store.children().items()
                if parent in known
                for child in kids
            )
            found: dict[str, dict[str, str]] = {}

            def spawned_by(child: str, parent: str) -> str | None:
                if parent not in found:
                    trace = read_session(store, builder, parent, builder.session(parent))
                    found[parent] = dict(trace.children)
                return found[parent].get(child)

            builder.spawned_by = spawned_by
            names: dict[int, str] = {}  # piece → its session
            given: dict[int, int] = {}  # piece → its spans in the bodies so far
            traces = [collector.traces.pop(sid) for sid in ready]
            for trace in traces:  # every spawning call first
                builder.note_children(trace)
            for trace in traces:
                row = store.session(trace.session_id)
                info = session_info(row) if row is not None else SessionInfo(id=trace.session_id)
                info.parent_id = builder.parents.get(trace.session_id)
                spans = builder.finish(trace, info)  # counted, sent or not
                sid = trace.session_id
                seq = self.follower.session_seq(sid) if ledger is not None else None
                if seq is not None and ledger is not None:
                    if ledger.sent(sid) == seq:  # the backend has it as it is now
                        left_out += 1
                        continue
                    if spans:
                        self._pending[sid] = seq  # recorded once all its bodies are taken
                    else:
                        ledger.record(sid, seq)
                sent += 1
                if self.traces and spans:
                    resource = self.resources(info)
                    self._given += 1
                    piece = self._given
                    self._pieces[piece] = (resource, spans)
                    names[piece] = trace.session_id
                    for body in batches.add(resource, spans, piece):
                        self._queue(
                            "traces", body, _ranges(batches, names, given), batches.max_bytes
                        )
            builder.spawned_by = None
        if self.traces:
            for body in batches.flush():
                self._queue("traces", body, _ranges(batches, names, given), batches.max_bytes)
        self.summary.sessions += sent
        self.summary.spans += batches.spans
        if left_out:
            if not self.summary.left_out and ledger is not None:
                self._say(
                    f"otel: {_sessions(left_out)} sent to {self._where()} before, unchanged "
                    "since, not sent again (--resend sends them)"
                )
            self.summary.left_out += left_out
        if self.metrics:
            counters = builder.counters
            # Cumulative over the history read: they began with its first session (a restart
            # sends the same series again, not a new one counting the history twice), and
            # that start stays put (a start that moves reads as a reset of the counter), even
            # when an older session is sent later.
            if self._series_start is None:
                found = counters.start_ms
                self._series_start = found if found is not None else self.started_ms
            counters.start_ms = self._series_start
            counters.end_ms = now_ms
            body = metrics_body(counters, self.resources())
            if body is not None:
                self._queue("metrics", body, (), 0)

    def last_send(self) -> None:
        """Following was told to stop: everything gathered, one try of each body, and no
        word of keeping what cannot be sent (``undelivered`` says what was not)."""
        self._last = True
        self.destination.hurry()
        self.send(everything=True)
        self._save(now=True)

    def finish(self) -> None:
        """Raise an ``ExportError`` when something was not delivered: bodies still queued
        (why they are), or sessions let go (the warnings said why)."""
        self._save(now=True)
        if self.queue:
            why = self._failed or "the backend could not be reached"
            raise ExportError(f"{why} ({self._held()} not sent)")
        if self.dropped_sessions:
            raise ExportError(
                f"the spans of {_sessions(len(self.dropped_sessions))} were not accepted "
                "(the warnings above say why)"
            )

    def undelivered(self) -> str | None:
        """What is still queued, said for a follower that stops now; None: nothing."""
        if not self.queue:
            return None
        why = f": {self._failed}" if self._failed is not None else ""
        return f"{self._held()} not sent{why}"

    # ------------------------------------------------------------------ delivery

    def _queue(
        self, signal: str, body: bytes, spans: tuple[tuple[int, str, int, int], ...], cut: int
    ) -> None:
        if signal == "metrics":  # cumulative: the newest says all the older ones said
            kept = [item for item in self.queue if item.signal != "metrics"]
            if len(kept) != len(self.queue):
                self.queue = deque(kept)
                self._queued_bytes = sum(len(item.body) for item in kept)
        item = _Queued(signal, body, spans, cut)
        self.queue.append(item)
        self._queued_bytes += len(body)
        self._holding.update(item.sessions)
        while self._queued_bytes > MAX_QUEUED_BYTES and len(self.queue) > 1:
            oldest = self.queue.popleft()
            self._queued_bytes -= len(oldest.body)
            self._holding.subtract(oldest.sessions)
            self._let_go(oldest, "the queue for a backend out of reach is full", refused=False)

    def _deliver(self) -> None:
        """Send the queued bodies in order, until the backend cannot be reached."""
        queue = self.queue
        while queue:
            item = queue[0]
            try:
                note = self.destination.send(item.signal, item.body)
            except ExportError as error:
                # Not an answer about this body (out of reach, too busy, a TLS failure such
                # as a certificate not trusted): kept until the backend can take it.
                if error.transient or error.status is None:
                    self._out_of_reach(error)
                    self._save(now=self._last)
                    return
                queue.popleft()
                self._queued_bytes -= len(item.body)
                self._holding.subtract(item.sessions)
                self._refused(item, error)
                continue
            queue.popleft()
            self._queued_bytes -= len(item.body)
            self._holding.subtract(item.sessions)
            self._taken(item)
            self._forget(item)
            self.summary.bodies += 1
            if self._failures:
                self._failures = 0
                self._say(f"reached {self._where()} again: sending what was kept")
            self._failed = None
            if note is not None:
                if self.warn is not None:  # told now: a follower may run for days
                    self._say(f"warning: {note}")
                else:
                    self.summary.partial.append(note)
        self.destination.flush()
        self._save(now=self._last)

    def _out_of_reach(self, error: ExportError) -> None:
        if not self._failures and not self._last:
            self._say(f"warning: {error}; {self._held()} kept, tried again from time to time")
        wait = _RETRY_EVERY_S[min(self._failures, len(_RETRY_EVERY_S) - 1)]
        self._failures += 1
        self._failed = error
        self._next_try = self.clock() + wait

    def _refused(self, item: _Queued, error: ExportError) -> None:
        """A body the backend refused: its sessions again one by one; a session refused
        alone is let go (cut smaller first when it was too large)."""
        held = [held for held in item.spans if held[0] in self._pieces]
        alone = len(item.sessions) == 1 and held
        cut = item.max_bytes // 4
        if held and (not alone or (error.status == 413 and cut >= _SMALLEST_BODY)):
            again: list[_Queued] = []
            for piece, sid, first, end in held:  # only the spans this body held
                resource, spans = self._pieces[piece]
                batches = SpanBatches(cut if alone else item.max_bytes)
                given = {piece: first}
                names = {piece: sid}
                bodies = itertools.chain(
                    batches.add(resource, spans[first:end], piece), batches.flush()
                )
                for body in bodies:  # each body's ranges as it is given out
                    ranges = _ranges(batches, names, given)
                    again.append(_Queued("traces", body, ranges, batches.max_bytes))
            for queued in reversed(again):
                self.queue.appendleft(queued)
                self._queued_bytes += len(queued.body)
                self._holding.update(queued.sessions)
            return
        self._failed = None
        self._let_go(item, str(error))

    def _let_go(self, item: _Queued, why: str, *, refused: bool = True) -> None:
        self._forget(item)
        if item.signal == "metrics":
            if refused:  # not just out of room: the backend takes none
                self.metrics = False
                why += "; no more will be sent (--only traces leaves them out)"
            self._say(f"warning: the counters were not sent: {why}")
            return
        self.dropped_sessions.update(item.sessions)
        for sid in item.sessions:  # not delivered whole: sent again by a later run
            self._pending.pop(sid, None)
            if self._holding[sid] <= 0:
                del self._holding[sid]
        names = ", ".join(item.sessions[:3]) + (" …" if len(item.sessions) > 3 else "")
        self._say(f"warning: the spans of {_sessions(len(item.sessions))} ({names}) dropped: {why}")

    def _taken(self, item: _Queued) -> None:
        """A body the backend took: each of its sessions no other queued body still holds
        (and none of whose spans were let go) is delivered, as it was when queued."""
        if self.ledger is None:
            return
        for sid in item.sessions:
            if self._holding[sid] <= 0:
                del self._holding[sid]
                seq = self._pending.pop(sid, None)
                if seq is not None and sid not in self.dropped_sessions:
                    self.ledger.record(sid, seq)

    def _caught_up(self, states: dict[str, str], now_ms: float) -> None:
        """A delivered session whose counter moved with changes that gave no event (OpenCode
        writes its title and diff summary just after it went idle): the backend has all a
        follower would send of it, so it is kept as delivered at its newest counter (else
        each start would send it again). Then the ledger is saved when its time has come."""
        ledger = self.ledger
        if ledger is None:
            return
        moved = self._moved
        moved |= self.follower.moved()
        for sid in list(moved):
            if sid in states or sid in self._pending:
                continue  # gathered, or to be: recorded once delivered; then looked at again
            recorded, seq = ledger.sent(sid), self.follower.session_seq(sid)
            if sid in self.dropped_sessions or recorded is None or seq is None or seq <= recorded:
                moved.discard(sid)  # nothing delivered of it to catch up, or caught up
            elif self._state(sid, now_ms) != BUSY:
                ledger.record(sid, seq)
                moved.discard(sid)
        self._save()

    def _save(self, *, now: bool = False) -> None:
        """The ledger written, when it changed: at most every ``_SAVE_EVERY_S`` (a crash
        costs the sessions delivered since, sent again), and at once at the end."""
        ledger = self.ledger
        if ledger is None or not ledger.changed:
            return
        clock = self.clock()
        if not now and clock - self._saved_at < _SAVE_EVERY_S:
            return
        self._saved_at = clock
        problem = ledger.save()
        if problem is not None and not self._ledger_said:
            self._ledger_said = True
            self._say(
                f"warning: what was sent cannot be kept ({problem}): "
                "started again, the follower sends the history again"
            )

    def _forget(self, item: _Queued) -> None:
        """Let go of the pieces no queued body holds any more."""
        if not item.spans:
            return
        still = {held[0] for queued in self.queue for held in queued.spans}
        for piece, _, _, _ in item.spans:
            if piece not in still:
                self._pieces.pop(piece, None)

    def _held(self) -> str:
        """What the queue holds: its bodies, and the sessions whose spans they carry."""
        sessions = {sid for item in self.queue for sid in item.sessions}
        what = "1 body" if len(self.queue) == 1 else f"{len(self.queue):,} bodies"
        return f"{what} ({_sessions(len(sessions))})" if sessions else what

    def _where(self) -> str:
        return getattr(self.destination, "where", None) or "the backend"

    def _say(self, text: str) -> None:
        if self.warn is not None:
            self.warn(text)


def _ranges(
    batches: SpanBatches, names: dict[int, str], given: dict[int, int]
) -> tuple[tuple[int, str, int, int], ...]:
    """The spans of the body ``batches`` gave out last, as (piece, session, first, end);
    ``given`` counts each piece's spans given out so far (from where its spans began)."""
    ranges = []
    for piece, count in batches.flushed_keys:
        first = given.get(piece, 0)
        given[piece] = first + count
        ranges.append((piece, names[piece], first, first + count))
    return tuple(ranges)


def _sessions(count: int) -> str:
    return "1 session" if count == 1 else f"{count:,} sessions"
