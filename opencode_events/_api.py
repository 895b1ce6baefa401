"""The Python API: what ``import opencode_events`` offers (docs/python-api.md).

Every name here is re-exported by ``opencode_events/__init__.py``, whose ``__all__`` is the
promise (pinned by tests/test_api.py); the modules behind them may move.

    >>> import opencode_events
    >>> events = list(opencode_events.iter_events("samples/bash_ok/stream.jsonl"))
    >>> [e.kind for e in events if e.kind == "command"]
    ['command']
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any, BinaryIO

import msgspec

from .core.normalizer import Normalizer
from .errors import InputError
from .events import AnyEvent, Metrics
from .pipeline.normalize import Feeder, event_batches, sum_in_order
from .reports.context import ContextReport
from .reports.sessions import SessionsReport
from .reports.usage import UsageReport
from .sources.sse import SseReader
from .store.open import select_sessions
from .store.rows import SessionStore, parents_of

__all__ = [
    "iter_events",
    "aiter_events",
    "ServerEvents",
    "open_store",
    "stored_events",
    "sessions_report",
    "usage_report",
    "context_report",
]

Source = str | os.PathLike[str] | BinaryIO | Iterable[bytes]


# ---------------------------------------------------------------------- inputs


class _Lines:
    """An iterable of byte lines (or chunks) as the binary stream the readers take: each
    piece is handed over as one read, a missing final newline added."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = iter(pieces)

    def read(self, size: int = -1) -> bytes:
        for piece in self._pieces:
            if not isinstance(piece, bytes | bytearray | memoryview):
                raise TypeError(f"iter_events reads bytes, not {type(piece).__name__}")
            # an empty piece is a blank line (``iter_lines()`` drops the newlines): server
            # events end each event with one; an empty read would say the input ended
            piece = bytes(piece)
            return piece if piece.endswith(b"\n") else piece + b"\n"
        return b""


class _Available:
    """A buffered binary file read as a raw one is: each read returns what has come
    (``read1``), where ``read(n)`` would wait for ``n`` bytes or the end, and a pipe
    written line by line would give nothing until its writer is done."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        return self._stream.read1(size)  # type: ignore[no-any-return]


def _open(source: Source) -> tuple[str, Any, bool]:
    """(name, binary stream, whether we opened it and must close it)."""
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        try:
            return path, open(path, "rb", buffering=0), True  # noqa: SIM115 - closed by caller
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError:  # a NUL in the path: no file has such a name
            raise InputError(f"cannot read {path!r}: no file has a NUL in its name") from None
    if isinstance(source, bytes | bytearray | str):
        raise TypeError("iter_events takes a path, a binary file or an iterable of byte lines")
    if isinstance(source, io.TextIOBase):
        raise TypeError(
            "iter_events reads bytes: open the file in binary mode ('rb'), or give "
            "sys.stdin.buffer for stdin"
        )
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        name = name if isinstance(name, str) else "-"
        return name, _Available(source) if hasattr(source, "read1") else source, False
    if not hasattr(source, "__iter__"):
        raise TypeError(
            f"iter_events takes a path, a binary file or an iterable of byte lines, not {source!r}"
        )
    return "-", _Lines(source), False


def iter_events(
    source: Source, *, raw: bool = False, metrics: bool = True, deltas: bool = False
) -> Iterator[AnyEvent]:
    """The normalized events of one input, as ``opencode-events normalize`` writes them.

    ``source`` is a path, a binary file (read to its end; a pipe as it comes) or an iterable
    of byte lines; its format (a run stream, server-event text, export documents, our own
    JSONL) is detected from its first line. ``raw`` attaches each source record; ``metrics``
    ends with the ``Metrics`` event; ``deltas`` keeps server events' text deltas. Events come
    as each block of input is read, so a live pipe is followed as it is written. A path that
    cannot be read raises ``InputError`` here, before any event.
    """
    opened = _open(source)
    events = _events_of(opened, Normalizer(keep_raw=raw), metrics=metrics, deltas=deltas)
    if opened[2]:  # a file we opened: closed too when the events are dropped unstarted
        weakref.finalize(events, opened[1].close)
    return events


def _events_of(
    opened: tuple[str, Any, bool], normalizer: Normalizer, *, metrics: bool, deltas: bool
) -> Iterator[AnyEvent]:
    name, stream, owned = opened
    try:
        for events in event_batches([(name, stream)], normalizer, deltas=deltas):
            yield from events
        if metrics:
            yield normalizer.metrics()
    finally:
        if owned:
            stream.close()


_ASYNC_SOURCES = (
    "aiter_events reads an asyncio.StreamReader or an async iterable of bytes "
    "(a path or a file: iter_events)"
)


def aiter_events(
    source: AsyncIterable[bytes] | Any,
    *,
    raw: bool = False,
    metrics: bool = True,
    deltas: bool = False,
) -> AsyncIterator[AnyEvent]:
    """``iter_events`` for ``asyncio``: ``source`` is an ``asyncio.StreamReader`` (such as
    the ``stdout`` of ``asyncio.create_subprocess_exec("opencode", "run", "--format",
    "json", …)``) or any async iterable of bytes, in lines or in pieces of any size. A
    source of the wrong kind is a ``TypeError`` from the call, as ``iter_events``'s is."""
    # ``read`` first: an asyncio.StreamReader (or aiohttp's) also has ``__aiter__``, which
    # yields lines through ``readline`` and fails on one longer than its limit (64 KiB)
    readable = callable(getattr(source, "read", None))
    if isinstance(source, str | bytes | os.PathLike | io.IOBase) or not (
        readable or hasattr(source, "__aiter__")
    ):
        raise TypeError(f"{_ASYNC_SOURCES}, not {source!r}")
    return _aiter_events(source, readable, raw=raw, metrics=metrics, deltas=deltas)


async def _aiter_events(
    source: Any, readable: bool, *, raw: bool, metrics: bool, deltas: bool
) -> AsyncIterator[AnyEvent]:
    feeder = Feeder(Normalizer(keep_raw=raw), deltas=deltas)
    if readable:
        while True:
            pending = source.read(1 << 16)
            if not hasattr(pending, "__await__"):  # a file's read: iter_events reads it
                raise TypeError(f"{_ASYNC_SOURCES}, not {type(source).__name__}")
            data = await pending
            if not data:
                break
            for event in feeder.feed(data):
                yield event
    else:
        async for data in source:
            if not isinstance(data, bytes | bytearray | memoryview):
                raise TypeError(f"aiter_events reads bytes, not {type(data).__name__}")
            for event in feeder.feed(bytes(data)):
                yield event
    for event in feeder.close():
        yield event
    if metrics:
        yield feeder.normalizer.metrics()


class ServerEvents:
    """OpenCode's server events, fed one decoded payload at a time, as an SDK hands them
    over (``{"type": "message.part.updated", "properties": {…}}``, as a dict, JSON bytes or
    text, or an object with such a ``raw`` payload or a ``model_dump()``).

        events = ServerEvents()
        async for event in session.stream("Review this PR"):   # any SDK's event stream
            for normalized in events.feed(event.raw):
                print(normalized.kind)
            if events.idle:
                break

    The mapping is ``attach``'s (docs/server-events.md): a tool call is one event when it
    ends, a text part one event when complete, an assistant message's figures one ``usage``
    event. ``session`` follows one session (an id or its start) and the subagents it starts;
    without it, the first session seen at work. ``idle`` turns true when that session goes
    idle after it was seen at work. Each event's ``line`` is its payload's number (from 1).
    """

    def __init__(self, session: str | None = None, *, raw: bool = False, deltas: bool = False):
        if session is not None and not isinstance(session, str):
            raise TypeError(f"session is a session id (a str) or None, not {session!r}")
        self._normalizer = Normalizer(keep_raw=raw)
        self._reader = SseReader(self._normalizer, deltas=deltas, session=session)
        self._count = 0

    @property
    def idle(self) -> bool:
        """The followed session went idle after it was seen at work: the run is over."""
        return self._reader.idle

    @property
    def session(self) -> str | None:
        """The followed session's id, once known."""
        return self._reader.session

    def feed(self, payload: Any) -> list[AnyEvent]:
        """The events one payload maps to (often none: progress, bookkeeping)."""
        self._count += 1
        return self._reader.payload(_payload_bytes(payload), self._count)

    def finish(self) -> list[AnyEvent]:
        """Text parts whose message never completed (an interrupted reply), as they were."""
        return self._reader.finish()

    def metrics(self) -> Metrics:
        """Counts and token sums of what was fed so far."""
        return self._normalizer.metrics()


_ENCODE = msgspec.json.Encoder()


def _payload_bytes(payload: Any) -> bytes:
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8", "surrogatepass")
    if not isinstance(payload, dict):
        inner = getattr(payload, "raw", None)
        if isinstance(inner, dict | bytes | str):
            return _payload_bytes(inner)
        dump = getattr(payload, "model_dump", None) or getattr(payload, "to_dict", None)
        if callable(dump):
            payload = _dumped(dump)
    try:
        return _ENCODE.encode(payload)
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"not a server event payload: {type(payload).__name__}") from exc


def _dumped(dump: Any) -> Any:
    """A model's payload as the server sent it: pydantic's ``model_dump`` gives the Python
    names of aliased fields (the official SDK's ``session_id`` for ``sessionID``), fields
    never sent (as ``None``) and serializer warnings on stderr unless told otherwise."""
    for kwargs in (
        {"mode": "json", "by_alias": True, "exclude_unset": True, "warnings": False},
        {"mode": "json"},
    ):
        try:
            return dump(**kwargs)
        except TypeError:  # a dump that takes fewer of pydantic's arguments
            continue
    return dump()


# ---------------------------------------------------------------------- the store


def open_store(path: str | os.PathLike[str] | None = None) -> SessionStore:
    """OpenCode's store, read-only, found as the command line finds it (``path``, else
    ``$OPENCODE_DB``, else ``$XDG_DATA_HOME/opencode/opencode.db``, else the legacy
    ``storage/`` files); a path may also name a data directory (one holding both a
    database and older JSON files is read as both, each session once). Its ``notes`` (a
    list of str) say what people should know: such a mix, an older schema. Use it as a
    context manager. Raises ``InputError`` for a file that is not OpenCode's database."""
    from .store.open import open_store as open_

    return open_(os.fspath(path) if path is not None else None)  # type: ignore[no-any-return]


When = str | int | float | date | datetime | None


def _since_ms(since: When, tz: tzinfo | None = None) -> int | None:
    if since is None:
        return None
    if isinstance(since, datetime):
        return int(since.timestamp() * 1000)
    if isinstance(since, date):  # its first moment, in ``tz`` (else local time)
        start = datetime.combine(since, time(), tz)  # naive: local time, a skipped midnight
        return int(start.timestamp() * 1000)  # read as zoneinfo reads it (timeutil.parse_since)
    if isinstance(since, int | float) and not isinstance(since, bool):
        if not math.isfinite(since):
            raise ValueError(f"a time in epoch milliseconds is a finite number, not {since!r}")
        if not -(2**63) <= since < 2**63:  # SQLite's integers: OverflowError past them
            raise ValueError(f"a time in epoch milliseconds out of range: {since!r}")
        return int(since)
    if not isinstance(since, str):
        raise TypeError(f"a time is a str, epoch ms, a date or a datetime, not {since!r}")
    from .core.timeutil import parse_since

    try:
        return parse_since(since, tz=tz)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _until_ms(until: When, tz: tzinfo | None = None) -> int | None:
    """``until`` as its last epoch ms: a date (or date string) means through the end of
    that day."""
    if until is None or isinstance(until, datetime | int | float):
        return _since_ms(until, tz)
    if isinstance(until, date):
        try:
            following = until + timedelta(days=1)
        except OverflowError:  # date.max
            raise ValueError(f"a date out of range: {until!r}") from None
        return _since_ms(following, tz) - 1  # type: ignore[operator]
    if not isinstance(until, str):
        raise TypeError(f"a time is a str, epoch ms, a date or a datetime, not {until!r}")
    from .core.timeutil import parse_until

    try:
        return parse_until(until, tz=tz)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _is_store(store: Any) -> bool:
    """``isinstance(store, SessionStore)`` as Python 3.11 answers it: 3.12 looks the names up
    statically (``inspect.getattr_static``), so a wrapper that forwards them through
    ``__getattr__`` is not one there; ``hasattr`` finds them as 3.11 did."""
    if isinstance(store, SessionStore):
        return True
    return all(hasattr(store, name) for name in _STORE_NAMES)


# The protocol's own names (methods, attributes, the context manager's), as 3.11's
# isinstance checked them.
_STORE_NAMES = tuple(
    name
    for name in (*vars(SessionStore), *SessionStore.__annotations__)
    if not name.startswith("_") or name in ("__enter__", "__exit__")
)


def _a_store(store: Any, call: str) -> SessionStore:
    """``store`` when it can be one (what ``open_store`` returns), else a ``TypeError``
    that says what to give instead."""
    if not _is_store(store):  # None, a path, 42: none has a store's names
        raise TypeError(
            f"{call} reads a store: give it what open_store(path) returns, not {store!r}"
        )
    return store  # type: ignore[no-any-return]


def _session_ids(sessions: Any, call: str) -> list[str]:
    """``sessions`` (an id or prefix, or several) as a list of str, else a ``TypeError``."""
    if isinstance(sessions, str):
        return [sessions]
    try:
        ids = list(sessions)
    except TypeError:
        ids = None
    if ids is None or not all(isinstance(sid, str) for sid in ids):
        raise TypeError(f"{call}: sessions are a str or a sequence of str, not {sessions!r}")
    return ids


def _selected(
    store: SessionStore,
    sessions: Sequence[str] | str,
    *,
    all_sessions: bool,
    since: Any,
    children: bool = False,
    tz: tzinfo | None = None,
) -> list[str]:
    ids = _session_ids(sessions, "stored_events")
    if all_sessions:
        if ids or since is not None:  # as the command line refuses --all with them
            raise ValueError("all_sessions reads every session: give no sessions or since")
        return select_sessions(store, all_sessions=True)
    return select_sessions(store, ids, since_ms=_since_ms(since, tz), children=children)


def stored_events(
    store: SessionStore,
    sessions: Sequence[str] | str = (),
    *,
    all_sessions: bool = False,
    since: When = None,
    children: bool = False,
    raw: bool = False,
    metrics: bool = True,
) -> Iterator[AnyEvent]:
    """The events of stored sessions, as ``opencode-events import`` writes them (in one
    process): ``sessions`` ids or prefixes (default: the most recent top-level session),
    ``all_sessions``, ``since`` (``"2h"``, an ISO date, epoch ms or a ``datetime``),
    ``children`` (each session's subagents after it). The sessions are chosen by the call
    itself: one it cannot find raises ``InputError`` before any event."""
    store = _a_store(store, "stored_events")
    ids = _selected(store, sessions, all_sessions=all_sessions, since=since, children=children)
    return _stored_events_of(store, ids, raw=raw, metrics=metrics)


def _stored_events_of(
    store: SessionStore, ids: list[str], *, raw: bool, metrics: bool
) -> Iterator[AnyEvent]:
    from .sources.transcript import map_session

    normalizer = Normalizer(keep_raw=raw)
    normalizer.several_sessions = len(set(ids)) > 1
    normalizer.parents = parents_of(store)
    costs: list[float] = []  # summed per session, as `import` sums them
    for session_id in ids:
        for events in map_session(normalizer, store, session_id, costs):
            yield from events
    if metrics:
        normalizer.totals.cost = sum_in_order(costs)
        yield normalizer.metrics()


# ---------------------------------------------------------------------- reports


def sessions_report(
    store: SessionStore,
    *,
    since: When = None,
    limit: int | None = None,
    all_sessions: bool = False,
    fold: bool = True,
    cache: bool = False,
    until: When = None,
) -> SessionsReport:
    """``opencode-events sessions``: one summary per top-level session (``all_sessions``:
    subagents too), newest activity first; ``.sessions`` and ``.document()``. ``fold``:
    each summary's figures (all but ``turns``) with its subagents' (``--no-fold``: its
    own); their part is in ``subagent_*`` either way. ``since``/``until``: the sessions
    active since then and begun by then (a date ``until`` means through that day, local
    time). ``cache``: use the report cache as the command does (docs/cache.md; the same
    report, sooner)."""
    from .reports.sessions import sessions_report as report

    store = _a_store(store, "sessions_report")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise TypeError(f"sessions_report: limit is an int, not {limit!r}")
        if limit < 1:  # as --limit refuses it
            raise ValueError(f"sessions_report: limit is 1 or more, not {limit}")
    since_ms, until_ms = _since_ms(since), _until_ms(until)
    with _cache(store, cache) as kept:
        return report(
            store,
            since_ms=since_ms,
            limit=limit,
            all_sessions=all_sessions,
            cache=kept,
            fold=fold,
            until_ms=until_ms,
        )


def usage_report(
    source: Source | None = None,
    *,
    store: SessionStore | None = None,
    sessions: Sequence[str] | str = (),
    all_sessions: bool = False,
    since: When = None,
    by: str = "turn",
    fold: bool = True,
    tz: tzinfo | str | None = None,
    cache: bool = False,
    until: When = None,
) -> UsageReport:
    """``opencode-events usage``: of a stream (``source``, as ``iter_events`` takes it: a
    raw run stream or normalized JSONL; ``by`` ``turn`` = step rows, ``session`` or ``day``)
    or of stored sessions (``store``, with the selection of ``stored_events``; ``by`` turn,
    step, session, model, agent or day; ``fold`` subagents into the turn that ran them).
    ``.rows``, ``.total``, ``.notes`` and ``.document()``. A ``by`` the source cannot
    group by raises ``GroupingError``. ``until``: of a store, only the inferences made by
    then (a date: through that day, in ``tz``), as ``--until``. ``tz``: a ``tzinfo`` or an
    IANA name (``"Europe/Paris"``; default: local time). ``cache``: use the report cache
    for a store, as the command does."""
    from .reports.usage import stored_usage, stream_usage

    if (source is None) == (store is None):
        raise TypeError("usage_report takes a source or a store, not both or neither")
    if isinstance(tz, str):
        from .core.timeutil import zone_named

        tz = zone_named(tz)  # an unknown name: ValueError
    elif tz is not None and not isinstance(tz, tzinfo):
        raise TypeError(f"usage_report: tz is a tzinfo or a zone's name, not {tz!r}")
    if store is None:
        stored_only = {  # each given: a time of 0 is a time, a session "" a session
            "sessions": isinstance(sessions, str) or bool(sessions),
            "all_sessions": all_sessions,
            "since": since is not None,
            "until": until is not None,
            "cache": cache,
        }
        chosen = [name for name, given in stored_only.items() if given]
        if chosen:  # they choose stored sessions: a stream has no others to choose
            raise TypeError(f"usage_report of a source takes no {', '.join(chosen)}")
        name, stream, owned = _open(source)  # type: ignore[arg-type]
        try:
            return stream_usage([(name, stream)], by=by, tz=tz)
        finally:
            if owned:
                stream.close()
    store = _a_store(store, "usage_report")
    ids = _session_ids(sessions, "usage_report")
    if all_sessions and ids:  # as stored_events and the command (a window it takes)
        raise ValueError("all_sessions reads every session: give no sessions")
    start = _since_ms(since, tz)  # once: "2h" is read against the clock
    end = _until_ms(until, tz)
    with _cache(store, cache) as kept:
        return stored_usage(
            store,
            ids,
            since_ms=start,
            until_ms=end,
            all_sessions=all_sessions,
            by=by,
            fold=fold,
            tz=tz,
            cache=kept,
        )


def context_report(
    store: SessionStore, session: str | None = None, *, cache: bool = False
) -> ContextReport:
    """``opencode-events context``: what fills a session's context window (default: the
    most recent top-level session), by source, with costs; ``.document()``. ``cache``: use
    the report cache, as the command does."""
    from .reports.context import context_report as report

    store = _a_store(store, "context_report")
    if session is not None and not isinstance(session, str):
        raise TypeError(f"context_report: a session is a str, not {session!r}")
    (session_id,) = select_sessions(store, [session] if session is not None else [])[:1]
    with _cache(store, cache) as kept:
        return report(store, session_id, cache=kept)


@contextlib.contextmanager
def _cache(store: SessionStore, wanted: bool) -> Iterator[Any]:
    """The report cache of ``store`` when ``wanted`` (and the environment allows it), closed
    when the report is made: the caller's process goes on, its files must not."""
    if not wanted:
        yield None
        return
    from .reports.cache import ReportCache

    cache = ReportCache.open(store)
    if cache is None:
        yield None
        return
    with cache:
        yield cache
