"""What a run costs with its subagents: its own steps from the stream, its subagents' from
the store.

``opencode run --format json`` writes only the parent session's steps: a ``task`` call's
subagent runs in a child session whose steps never reach the stream. Its cost is in the
store as OpenCode writes it (the child session's row). A ``RunSpend`` is shown the events
of the stream (``observe``: the session, its ``usage``) and reads the store when it changed
(``refresh``: a ``StoreWatch`` says so for two ``stat`` calls, so polling it is cheap) for
the rows of every session below the run's::

    spend = RunSpend(locate_db())
    spend.observe(events)            # from the stream, as they are written
    spend.refresh()                  # now and then (a thread), and once at the end
    spend.total, spend.subagent_cost, spend.subagents

Thread-safe: the stream's reader observes while a watcher thread refreshes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

from ..core.figures import summed_cost
from ..errors import InputError
from ..events import Usage
from ..store.sqlite import Store
from ..store.watch import StoreWatch

__all__ = ["RunSpend", "SessionCosts"]


class RunSpend:
    """``db_path`` None: OpenCode keeps no database (``OPENCODE_DB=:memory:``), and the
    run's cost is the stream's alone (its subagents' are nowhere to be read)."""

    def __init__(self, db_path: str | os.PathLike[str] | None, *, watch: StoreWatch | None = None):
        self.path = db_path
        self.watch = watch or (StoreWatch(db_path) if db_path is not None else None)
        self.session_id: str | None = None
        self.own = 0.0  # the stream's usage, summed
        self._steps = 0
        self._stored_own = 0.0  # the run's session row, which may be ahead of the stream
        self._below: dict[str, float] = {}  # subagent session → its cost column
        self._lock = threading.Lock()

    def observe(self, events: Iterable[Any]) -> None:
        """Take the run's session and its steps' cost from events of the stream."""
        with self._lock:
            for event in events:
                if self.session_id is None and isinstance(event.session_id, str):
                    self.session_id = event.session_id
                if isinstance(event, Usage) and event.session_id == self.session_id:
                    self.own += event.cost
                    self._steps += 1

    def refresh(self, *, force: bool = False) -> bool:
        """Read the subagents' costs from the store, if it changed since the last read (or
        ``force``); whether it was read. A store that cannot be read now (not made yet, or
        caught mid-checkpoint) is looked at again next time."""
        root = self.session_id
        if root is None or self.watch is None or not (self.watch.changed() or force):
            return False
        try:
            with Store(self.path) as store:
                family = store.family_rows(root)
        except InputError:
            self.watch.forget()
            return False
        with self._lock:
            if family:
                self._stored_own = family[0][1]
            self._below = {sid: cost for sid, cost, _ in family[1:]}
        return True

    @property
    def subagents(self) -> int:
        return len(self._below)

    @property
    def subagent_cost(self) -> float:
        with self._lock:
            return summed_cost(sum(self._below.values()), len(self._below))

    @property
    def total(self) -> float:
        """The run's cost with its subagents: its own (the stream's, or the store's row when
        that is ahead), and every session below it."""
        with self._lock:
            own = max(self.own, self._stored_own)
            return summed_cost(own + sum(self._below.values()), self._steps + len(self._below))


class SessionCosts:
    """Sessions' costs as a server reports them, summed over a session and every session
    below it, for ``attach --max-cost``: a session's cost is the larger of its
    ``session.updated`` figure and the sum of its replies' ``message.updated`` costs.
    OpenCode 1.18 sends a session's new cost only once its next step has begun (the last
    step's after ``session.idle``), a reply's as the step ends::

        costs = SessionCosts()
        reader = SseReader(normalizer, on_session=costs.seen, on_message=costs.reply)
        costs.total("ses_…")          # (with subagents, the subagents' share, how many)
    """

    def __init__(self) -> None:
        self._cost: dict[str, float] = {}
        self._replies: dict[str, dict[str, float]] = {}  # session → reply id → its cost
        self._parent: dict[str, str] = {}

    def seen(self, session_id: str, parent_id: str | None, cost: Any) -> None:
        if parent_id is not None and parent_id != session_id:
            self._parent[session_id] = parent_id
        if (type(cost) is float or type(cost) is int) and cost == cost:  # not NaN
            self._cost[session_id] = float(cost)

    def reply(self, session_id: str | None, info: Any) -> None:
        """A message update (``MessageInfo``): an assistant reply's cost so far."""
        cost, message_id = info.cost, info.id
        if session_id is None or info.role != "assistant" or type(message_id) is not str:
            return
        if (type(cost) is float or type(cost) is int) and cost == cost and cost >= 0:
            self._replies.setdefault(session_id, {})[message_id] = float(cost)

    def _of(self, session_id: str) -> float:
        replies = self._replies.get(session_id)
        summed = summed_cost(sum(replies.values()), len(replies)) if replies else 0.0
        return max(self._cost.get(session_id, 0.0), summed)

    def below(self, root: str) -> list[str]:
        """The sessions under ``root``, by the parent links seen (a loop is not followed)."""
        found = []
        for sid in self._parent:
            if sid == root:  # on a loop of parents: the root is not below itself
                continue
            seen, node = {sid}, self._parent.get(sid)
            while node is not None and node != root and node not in seen:
                seen.add(node)
                node = self._parent.get(node)
            if node == root:
                found.append(sid)
        return found

    def total(self, root: str) -> tuple[float, float, int]:
        below = self.below(root)
        share = [self._of(sid) for sid in below]
        own = self._of(root)
        return (
            summed_cost(own + sum(share), 1 + len(share)),
            summed_cost(sum(share), len(share)),
            len(below),
        )
