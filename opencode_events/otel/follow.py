"""``otel --follow``: each session sent once it is done, as OpenCode writes its store.

The store is followed as ``import --follow`` follows it (``pipeline.follow``,
``sources.eventlog``); its events are gathered into each session's trace
(``export.SpanCollector``). A session no longer at work (idle, or stale: a killed run) is
finished and sent — with what its store row says then (title, agent, times, its place in
the session tree) — and forgotten, so memory holds only the sessions at work. One that
works again later is sent again when it is done: its new inferences and calls, and its
session span (the same ids, the row's whole time span). After every send the counters go
too, cumulative since following began.

    sender = FollowSender(path, follower, collector, destination)
    follow_store(path, follower, collector, until_idle=False, stop=sender.poll)
    sender.send(everything=True)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ..core.activity import BUSY, session_state
from ..store.open import every_session
from ..store.sqlite import Store
from .export import SpanCollector, Summary, read_session
from .otlp import Resources, SpanBatches, metrics_body
from .spans import SessionInfo, session_info

__all__ = ["FollowSender", "SEND_EVERY_S"]

SEND_EVERY_S = 1.0  # how often finished sessions are looked for while following


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
    ) -> None:
        self.path = path
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
        """``follow_store``'s ``stop`` hook: send what is done (at most once a second);
        never asks to stop."""
        now = self.clock()
        if now - self._last_look >= SEND_EVERY_S:
            self._last_look = now
            self.send()
        return False

    def done(self, session_id: str, now_ms: float) -> bool:
        activity = self.follower.activity.get(session_id)
        if activity is None:  # nothing says it works: a history read whole
            return True
        state = session_state(
            in_flight=activity.in_flight(now_ms),
            last_write_ms=activity.written,
            now_ms=now_ms,
            stale_after=self.stale_after,
        )
        return state != BUSY

    def send(self, *, everything: bool = False) -> None:
        """Send the sessions that are done (``everything``: all gathered)."""
        collector = self.collector
        now_ms = self.clock() * 1000
        ready = [sid for sid in collector.traces if everything or self.done(sid, now_ms)]
        if not ready:
            return
        builder = collector.builder
        batches = SpanBatches(self.destination.max_bytes)
        sent = 0
        with Store(self.path) as store:
            known = set(every_session(store))
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
            traces = [collector.traces.pop(sid) for sid in ready]
            for trace in traces:  # every spawning call first
                builder.note_children(trace)
            for trace in traces:
                row = store.session(trace.session_id)
                info = session_info(row) if row is not None else SessionInfo(id=trace.session_id)
                info.parent_id = builder.parents.get(trace.session_id)
                spans = builder.finish(trace, info)
                sent += 1
                if self.traces:
                    for body in batches.add(self.resources(info), spans):
                        self._send("traces", body)
            builder.spawned_by = None
        if self.traces:
            for body in batches.flush():
                self._send("traces", body)
        self.summary.sessions += sent
        self.summary.spans += batches.spans
        if self.metrics:
            counters = builder.counters
            counters.start_ms, counters.end_ms = self.started_ms, now_ms
            body = metrics_body(counters, self.resources())
            if body is not None:
                self._send("metrics", body)
        self.destination.flush()

    def _send(self, signal: str, body: bytes) -> None:
        note = self.destination.send(signal, body)
        self.summary.bodies += 1
        if note is not None:
            self.summary.partial.append(note)
