"""The part heads of a rowid range (``PartRange``), or of some sessions (``SessionParts``),
read with apsw's SQLite: the fast path of ``sessions``' whole-table scan and of its reads
of a window's sessions by index, for forked workers only.

Why a second SQLite. Python's ``sqlite3`` module uses the system's library (3.40 on Debian
12), where any function applied to a value stored on overflow pages loads the whole value,
and a value used twice is loaded twice: counting tool calls read the benchmark database's
2.5 GB of part data about one and a half times over. apsw ships a current SQLite (3.43 or
newer is needed): ``octet_length()`` tells a value's size from the row's header, without
loading it, and one incremental blob handle, moved from row to row with ``reopen``, reads the
first bytes of a large value without touching its overflow pages. So a large part (a tool's
output, mostly) costs its first 256 bytes; a small one is tested in SQL as before.

The same rows and heads as ``Store.tool_part_batches`` hands over, except that a part over
``BIG`` bytes is handed over whatever it holds (the caller decodes it whole when its head
does not settle it), so the counts are the same.

Only in forked children (``parallel.in_forked_child``), which hold no other connection: two
copies of SQLite in one process must not open the same file, because closing a file in one
drops the POSIX locks the other holds on it (sqlite.org, "How To Corrupt", 2.2.1). Where apsw
is missing or older, ``connect`` gives None and the caller reads with ``sqlite3``.

The import's and the OTLP export's forked workers read every session's rows through apsw
too (``sqlite3_like``): the same queries, each row handed over about a third faster than
by Python's ``sqlite3`` (1.5 against 2.1 s for the bench database's million parts, read
session by session), which is most of what a worker spends outside the mapping.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Iterator
from typing import Any

from ..errors import InputError
from .sqlite import Store, sqlite_reason

__all__ = [
    "BIG",
    "PartRange",
    "SessionParts",
    "SqliteLike",
    "connect",
    "errors",
    "sqlite3_like",
]

BIG = Store.BIG_VALUE  # bytes: a larger value may have overflow pages (4,096-byte pages)
_MIN_VERSION = (3, 43)  # octet_length()


def _apsw() -> Any | None:
    try:
        import apsw
    except ImportError:
        return None
    version = tuple(int(n) for n in apsw.sqlite_lib_version().split(".")[:2])
    return apsw if version >= _MIN_VERSION else None


def available() -> bool:
    """Whether apsw with a new enough SQLite is installed (nothing is opened)."""
    return _apsw() is not None


def errors() -> tuple[type[BaseException], ...]:
    """The errors a connection from ``connect`` raises (none when apsw is not available)."""
    apsw = _apsw()
    return (apsw.Error,) if apsw is not None else ()


@contextlib.contextmanager
def connect(uri: str, what: str) -> Iterator[Any | None]:
    """A read-only apsw connection to the store at ``uri`` (None where apsw cannot be used);
    its errors become ``InputError``, as ``parallel.worker_connection``'s do."""
    apsw = _apsw()
    if apsw is None:
        yield None
        return
    try:
        conn = _open(apsw, uri)
        try:
            yield conn
        finally:
            conn.close()
    except (apsw.Error, UnicodeDecodeError) as exc:  # apsw decodes text cells itself
        raise InputError(f"cannot read the {what} table: {sqlite_reason(exc)}") from None


def _open(apsw: Any, uri: str) -> Any:
    """A read-only apsw connection to ``uri`` that waits for a writer's lock as sqlite3's
    connections do (5 s). Raises ``apsw.Error``."""
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.set_busy_timeout(5000)
    return conn


class PartRange:
    """The two queries ``summary._count_tool_parts`` needs, over parts [low, high), on an
    apsw connection: the heads of the parts that could be tool parts, and a part whole."""

    # A large part's head is read through the blob handle (NULL here); a small one is tested
    # and cut in SQL as Store.tool_part_batches does. octet_length() of a number is its
    # text's: never large.
    _HEADS = (
        f"SELECT rowid, session_id, CASE WHEN octet_length(data) > {BIG} THEN NULL "
        f"ELSE substr(CAST(data AS BLOB), 1, {Store._TOOL_HEAD_BYTES}) END FROM part "
        f"WHERE {{}} AND (octet_length(data) > {BIG} OR {Store._MAYBE_TOOL})"
    )
    _HEAD = (
        f"SELECT substr(CAST(data AS BLOB), 1, {Store._TOOL_HEAD_BYTES}) FROM part WHERE rowid = ?"
    )

    def __init__(self, conn: Any, low: int, high: int) -> None:
        self._rows(conn, "rowid >= ? AND rowid < ?", (low, high))

    def _rows(self, conn: Any, where: str, params: tuple[Any, ...]) -> None:
        """The rows whose heads are read: those ``where`` (SQL, with ``params``) picks."""
        self.conn, self._where, self._params = conn, where, params
        self._heads = _BlobHeads(conn, conn.execute)

    def tool_part_batches(self, scope: None) -> Iterator[list[tuple[Any, ...]]]:
        # The blob reads happen while the query's statement is open: one read transaction,
        # so a head comes from the same snapshot as its row.
        batch: list[tuple[Any, ...]] = []
        sql = self._HEADS.format(self._where)
        for rowid, sid, head in self.conn.execute(sql, self._params):
            batch.append((rowid, sid, self._heads.read(rowid) if head is None else head))
            if len(batch) == 4096:
                yield batch
                batch = []
        if batch:
            yield batch
        self._heads.close()

    def part_data(self, rowid: int) -> bytes | None:
        row = self.conn.execute(Store._PART_DATA, (rowid,)).fetchone()
        return row[0] if row else None


class SessionParts(PartRange):
    """``PartRange``'s queries over the parts of some sessions (at most 500: SQLite's
    variable limit), found by the part table's session index: a report of the sessions
    a window holds, or of those changed since the cache's ledger, reads their large parts'
    first bytes only, as the whole-table scan does."""

    def __init__(self, conn: Any, session_ids: list[str]) -> None:
        if len(session_ids) > 500:
            raise ValueError("at most 500 sessions at a time")
        where = f"session_id IN ({', '.join('?' * len(session_ids))})"
        self._rows(conn, where, tuple(session_ids))


class SqliteLike:
    """An apsw connection behind the calls a ``Store`` makes of ``sqlite3``'s: ``execute``,
    then ``fetchone``, ``fetchmany``, ``fetchall`` or iteration, and ``close``. apsw's errors
    are raised as ``sqlite3.DatabaseError`` with the same words, so a ``Store`` reading
    through it fails as it would through ``sqlite3``::

        store = parent_store.reopen(sqlite3_like)  # in a forked child
    """

    def __init__(self, conn: Any, error: type[BaseException]) -> None:
        self._conn, self._error = conn, error
        self._heads = _BlobHeads(conn, self.execute)  # its fallback fails as sqlite3 does

    def part_head(self, rowid: int) -> bytes:
        """A part's first ``_TOOL_HEAD_BYTES`` (``Store.part_heads``): ``_BlobHeads``."""
        return self._heads.read(rowid)

    def execute(self, sql: str, params: Any = ()) -> _Rows:
        try:
            return _Rows(self._conn.execute(sql, params), self._error)
        except self._error as exc:
            raise sqlite3.DatabaseError(str(exc)) from None

    def close(self) -> None:
        self._heads.close()
        self._conn.close()


class _BlobHeads:
    """Parts' first ``_TOOL_HEAD_BYTES`` on an apsw connection, through one blob handle
    moved from row to row: a large part's overflow pages are never read. A part the handle
    refuses (a value of another type, a row gone) is cut in SQL by ``execute`` (the
    caller's, whose errors it raises); b"" for none."""

    def __init__(self, conn: Any, execute: Any) -> None:
        self._conn, self._execute = conn, execute
        self._blob: Any = None

    def read(self, rowid: int) -> bytes:
        try:
            if self._blob is None:
                self._blob = self._conn.blob_open("main", "part", "data", rowid, False)
            else:
                self._blob.reopen(rowid)
            return self._blob.read(Store._TOOL_HEAD_BYTES)  # type: ignore[no-any-return]
        except Exception:  # noqa: BLE001 - any refusal: read in SQL
            self.close()  # a handle whose reopen failed is of no more use
        row = self._execute(PartRange._HEAD, (rowid,)).fetchone()
        return row[0] if row and type(row[0]) is bytes else b""

    def close(self) -> None:
        if self._blob is not None:
            with contextlib.suppress(Exception):
                self._blob.close()
            self._blob = None


class _Rows:
    """An apsw cursor as ``sqlite3``'s is used: its rows in batches, one, or all."""

    __slots__ = ("_rows", "_error")

    def __init__(self, rows: Any, error: type[BaseException]) -> None:
        self._rows, self._error = rows, error

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        try:
            return list(itertools.islice(self._rows, size))
        except self._error as exc:
            raise sqlite3.DatabaseError(str(exc)) from None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self)

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while rows := self.fetchmany(256):
            yield from rows


def sqlite3_like(uri: str) -> SqliteLike | None:
    """A read-only apsw connection to the store at ``uri`` in ``sqlite3``'s clothes (None
    where apsw cannot be used: the caller opens ``sqlite3``). Only in a forked child that
    uses no other connection to the file (see above). Raises as ``sqlite3.connect``."""
    apsw = _apsw()
    if apsw is None:
        return None
    try:
        return SqliteLike(_open(apsw, uri), apsw.Error)
    except apsw.Error as exc:
        raise sqlite3.DatabaseError(str(exc)) from None
