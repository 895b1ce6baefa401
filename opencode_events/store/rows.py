"""What every store offers, and the rows it hands out.

- ``SessionStore``: the protocol of every store (the SQLite database and the legacy JSON
  layout): sessions, messages and parts, the parent links. ``FastScans``: what a database
  offers besides (batched queries, rowid ranges for worker processes); reports check
  ``isinstance(store, FastScans)`` and read row by row otherwise. ``Glances``: the quick
  looks of a status line, which only a database answers cheaply.
- ``SessionRow``, ``MessageRow``, ``PartRow``: the same layouts from either store.
- The rules of the session tree: which sessions are top-level, which are below another,
  which sit on a loop of parents.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "SessionStore",
    "FastScans",
    "RowidRanges",
    "ToolPartHeads",
    "Glances",
    "SessionRow",
    "MessageRow",
    "PartRow",
    "descendants",
    "ancestry",
    "sessions_changed",
    "loop_members",
    "is_top_level",
    "parents_of",
    "wrote_json_files",
    "offers_fast_scans",
]


class SessionRow(NamedTuple):
    id: str
    parent_id: str | None
    title: str | None
    directory: str | None
    version: str | None
    agent: str | None
    model: str | bytes | None  # JSON {"id", "providerID", "variant"}
    cost: float
    tokens_input: int
    tokens_output: int
    tokens_reasoning: int
    tokens_cache_read: int
    tokens_cache_write: int
    time_created: int
    time_updated: int
    # Newer columns, None where a store has none: when the session was archived (OpenCode
    # hides it from its lists), and its pending undo, JSON {messageID, partID?, snapshot?,
    # diff?}: the messages from there on are undone, and deleted at the next prompt.
    time_archived: int | None = None
    revert: str | bytes | None = None


class MessageRow(NamedTuple):
    id: str
    session_id: str
    time_created: int | None
    data: bytes


class PartRow(NamedTuple):
    id: str
    message_id: str
    session_id: str
    time_created: int | None
    data: bytes


def wrote_json_files(version: Any) -> bool:
    """Whether a session's ``version`` is an OpenCode that kept its sessions in JSON files
    (before 1.2, which moved them into the database): "1.1.65" is, "1.2.27" is not, nor
    is a version that is no ``major.minor`` number ("local", None).

    >>> wrote_json_files("1.1.65"), wrote_json_files("1.2.0"), wrote_json_files("dev")
    (True, False, False)
    """
    if type(version) is not str:
        return False
    major, _, rest = version.partition(".")
    minor = rest.partition(".")[0]
    if not (major.isdigit() and minor.isdigit()):
        return False
    return (int(major), int(minor)) < (1, 2)


def descendants(roots: Sequence[str], tree: dict[str, list[str]]) -> list[str]:
    """Every session below ``roots`` in the parent → children tree (not the roots)."""
    found: list[str] = []
    stack = list(roots)
    seen = set(roots)
    while stack:
        for child in tree.get(stack.pop(), ()):
            if child not in seen:  # a cycle in corrupt data must not loop forever
                seen.add(child)
                found.append(child)
                stack.append(child)
    return found


def ancestry(sid: str, parents: dict[Any, Any]) -> list[str]:
    """``sid`` and the sessions above it, up to its top-level one (last), as ``Store`` tells
    a top-level session: no parent, itself as parent, or a parent the store does not have."""
    chain = [sid]
    while True:
        parent = parents.get(sid)
        if parent is None or parent not in parents or parent in chain:
            return chain
        chain.append(parent)
        sid = parent


def sessions_changed(
    parents_then: Mapping[Any, Any],
    stamps_then: Mapping[Any, Any],
    parents: Mapping[Any, Any],
    stamps: Mapping[Any, Any],
) -> list[str] | None:
    """The sessions whose stamp moved since a report was kept (``parents_then``,
    ``stamps_then``: session → parent, → stamp, as they were), and those come since, from
    ``parents`` and ``stamps`` as they are; None when that cannot tell what the report
    needs read again: a session removed, or moved to another parent (its old parent's
    figures changed), one that was top-level because its parent was missing and is below
    that parent now (``ancestry``), or an id that is no text."""
    missing = object()
    if (
        len(parents_then) > len(parents)
        or any(type(sid) is not str for sid in parents)
        or any(parents.get(sid, missing) != parent for sid, parent in parents_then.items())
        or any(
            parent in parents and parent not in parents_then
            for sid, parent in parents.items()
            if sid in parents_then
        )
    ):
        return None
    return [
        sid for sid in parents if stamps_then.get(sid) != stamps.get(sid) or sid not in parents_then
    ]


def loop_members(parents: Mapping[Any, Any]) -> frozenset[Any]:
    """Sessions on a loop of parent links (A's parent B, B's parent A), from session →
    parent. OpenCode never writes one, but a damaged store may: such sessions count as
    top-level and their parent links are not followed, so that nothing vanishes from the
    reports and nothing is folded into itself. Each session is walked once."""
    state: dict[Any, int] = {}  # 1: on the walk in progress, 2: done
    loops: set[Any] = set()
    for start in parents:
        walk = []
        node = start
        while node is not None and node in parents and node not in state:
            state[node] = 1
            walk.append(node)
            parent = parents[node]
            node = parent if parent != node else None
        if node is not None and state.get(node) == 1:  # came back to this walk: a loop
            loops.update(walk[walk.index(node) :])
        for visited in walk:
            state[visited] = 2
    return frozenset(loops)


def is_top_level(
    row: SessionRow, known: Callable[[str], bool], loops: frozenset[Any] = frozenset()
) -> bool:
    """No subagent: no parent, itself as parent, a parent no longer there (``known`` says
    whether a session exists), or on a loop of parents (``loops``); ``_TOP_LEVEL`` with the
    store's loop members is the same rule in SQL."""
    parent = row.parent_id
    return parent is None or parent == row.id or not known(parent) or row.id in loops


@runtime_checkable
class SessionStore(Protocol):
    """What every store offers (``store.sqlite.Store``, ``store.legacy.LegacyStore``);
    ``isinstance`` tells whether an object has all of it (its names, not their types)."""

    path: Path

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...

    def close(self) -> None: ...

    def sessions(
        self, *, since_ms: int | None = None, top_level: bool = False, limit: int | None = None
    ) -> list[SessionRow]: ...

    def session(self, session_id: str) -> SessionRow | None: ...

    def find_sessions(self, prefix: str) -> list[str]: ...

    def children(self) -> dict[str, list[str]]: ...

    def loop_members(self) -> frozenset[Any]: ...

    def messages(self, session_id: str) -> Iterator[MessageRow]: ...

    def parts(self, session_id: str) -> Iterator[PartRow]: ...

    # Optional (the stores here have them; a store of another program need not):
    # ``reverted_sessions``, ``forked_sessions`` and ``sessions_with_untimed_parts``.


@runtime_checkable
class RowidRanges(Protocol):
    """A table that worker processes can share out: its database's URI (each worker opens
    its own connection) and rowid ranges of about equal size (``store.ranges``)."""

    uri: str

    def rowid_ranges(self, table: str, parts: int) -> list[tuple[int, int]]: ...


@runtime_checkable
class ToolPartHeads(Protocol):
    """Parts that may be tool parts, as ``(rowid, session id, head)`` in batches: a
    database, or one worker's rowid range of one (``store.fastscan``)."""

    def tool_part_batches(self, session_ids: Sequence[str] | None) -> Iterator[list[Any]]: ...


@runtime_checkable
class FastScans(RowidRanges, ToolPartHeads, Protocol):
    """What a database offers besides: rows as plain tuples in batches, counts without
    building rows, and rowid ranges that worker processes read on their own connections."""

    conn: Any

    def session_count(self) -> int: ...

    def session_ids(self, *, top_level: bool = False) -> list[str]: ...

    def session_rows(self, session_id: str) -> tuple[Iterable[Any], Iterable[Any]]: ...

    def message_batches(self, session_ids: Sequence[str] | None) -> Iterator[list[Any]]: ...

    def assistant_batches(self) -> Iterator[list[Any]]: ...

    def messages_older_than_session(self) -> Iterator[tuple[str, str, int, bytes]]: ...

    def last_write(self, session_id: str) -> int | None: ...


def parents_of(store: SessionStore) -> dict[str, str]:
    """Each subagent session's parent (session → the session that ran it), from the
    store's parent links (``children``: a loop of parents or a parent no longer there is
    no link)."""
    return {child: parent for parent, kids in store.children().items() for child in kids}


@runtime_checkable
class Glances(Protocol):
    """Quick looks for a status line (``reports.statusline``), each answered from an index
    or a few rows at the end of a table: a database offers them, the legacy files do not."""

    path: Path

    def recently_written_session(self, recent: int = 32) -> str | None: ...

    def newest_session(self) -> str | None: ...

    def parent_of(self, session_id: str) -> str | None: ...

    def session(self, session_id: str) -> SessionRow | None: ...

    def family_rows(self, root: str) -> list[tuple[str, float, int]]: ...

    def inference_counts(self, session_ids: Sequence[str]) -> dict[str, int]: ...

    def newest_messages(self, session_id: str) -> Iterator[tuple[str, int, bytes]]: ...

    def messages_between(
        self, start_ms: int, end_ms: int
    ) -> Iterator[tuple[str, int, int | None, bytes]]: ...

    def last_write(self, session_id: str) -> int | None: ...

    def forks(self, session_ids: Sequence[str] | None = None) -> set[str]: ...


_FAST_SCANS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def offers_fast_scans(store: Any) -> bool:
    """``isinstance(store, FastScans)``, asked once per store: a runtime Protocol check
    looks up every member (about 25 µs), too much once per session of a large import."""
    try:
        return _FAST_SCANS[store]
    except KeyError:
        found = _FAST_SCANS[store] = isinstance(store, FastScans)
        return found
    except TypeError:  # a store that takes no weak reference: asked each time
        return isinstance(store, FastScans)
