"""OpenCode's SQLite store (``opencode.db``), opened read-only and observe-only.

Finding it is ``paths.locate_db``'s rule; choosing the store and its sessions is ``store.open``.

Observe-only: nothing we do may change the file or its ``-wal``, or create side files; a
reader of a live database leaves only its read marks in the shared-memory ``-shm``, as every
SQLite reader does. SQLite's ``mode=ro`` still creates ``-wal``/``-shm`` beside a WAL
database that has none, so the connection mode depends on what is there:

- no ``-wal`` file: every committed page is in the main file; open it ``immutable=1``
  (no locks, no side files). OpenCode's next writes go to a new WAL first, so a read
  that overlaps them still sees a consistent file.
- a ``-wal`` and its ``-shm`` (OpenCode is running, or stopped uncleanly): open
  ``mode=ro``; a reader only takes shared-memory read locks, never blocks OpenCode's
  writes, never checkpoints.
- a ``-wal`` without ``-shm``: the pair is copied to a temporary folder and read there.

JSON columns are read ``CAST(data AS BLOB)``, as bytes for msgspec to decode without a
detour through ``str``; ids and other text come back as ``str``. Errors a user can act on
are ``InputError``; nothing here prints.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core.figures import token_count
from ..core.text import is_utf8
from ..errors import InputError
from .rows import MessageRow, PartRow, SessionRow, loop_members, wrote_json_files

__all__ = ["Store", "REQUIRED_TABLES", "SQLITE_ERRORS", "sqlite_reason"]

# The tables and columns we read; anything else in the schema may change freely.
REQUIRED_TABLES: dict[str, tuple[str, ...]] = {
    "session": (
        "id",
        "parent_id",
        "title",
        "directory",
        "version",
        "agent",
        "model",
        "cost",
        "tokens_input",
        "tokens_output",
        "tokens_reasoning",
        "tokens_cache_read",
        "tokens_cache_write",
        "time_created",
        "time_updated",
    ),
    "message": ("id", "session_id", "time_created", "data"),
    "part": ("id", "message_id", "session_id", "time_created", "data"),
}


# Session columns a store may lack (an older schema): read as NULL there.
OPTIONAL_SESSION_COLUMNS = ("time_archived", "revert")
# The session's totals, which OpenCode's first databases (1.2.x) kept only in the messages:
# a store without them sums its assistant messages, as the legacy JSON files are read.
TOTALS_COLUMNS = (
    "agent",
    "model",
    "cost",
    "tokens_input",
    "tokens_output",
    "tokens_reasoning",
    "tokens_cache_read",
    "tokens_cache_write",
)
_SESSION_COLUMNS = ", ".join(SessionRow._fields)
# A text cell as Python's sqlite3 reads it once a store has shown a cell that is not UTF-8:
# bad bytes replaced (U+FFFD), where the default (str, strict, in C) fails the whole report.
_REPLACING = functools.partial(str, encoding="utf-8", errors="replace")


_DATA = operator.itemgetter(4)  # a PartRow's data
_MESSAGE_ID = operator.itemgetter(1)  # a PartRow's message id
_PART_ID = operator.itemgetter(0)


# Where OpenCode records the migrations it ran (1.2's drizzle table, then its own), and the
# data migrations: a new row in any is a rewrite that its event log does not show.
_MIGRATION_TABLES = ("__drizzle_migrations", "migration", "data_migration")


def _in_order(rows: list[tuple[Any, ...]], position: dict[Any, int]) -> bool:
    """Whether part rows already come in the import's order: by their message's position,
    then by id (strictly: ids are unique), with no part of a message outside ``position``."""
    get = position.get
    last_position, last_id = -1, None
    try:
        for row in rows:
            at = get(row[1])
            if at is None:
                return False
            if at != last_position:
                if at < last_position:
                    return False
                last_position = at
            elif not row[0] > last_id:
                return False
            last_id = row[0]
    except TypeError:  # an id that is not text: let the sort decide
        return False
    return True


def _sort_by_id(rows: list[tuple[Any, ...]]) -> None:
    """Rows in SQLite's ``ORDER BY id``. Part ids are unique, so tuples order by id alone,
    as SQLite's binary collation does (UTF-8 keeps code point order); a damaged id that is
    not text (NULL, a blob) orders as SQLite puts it."""
    try:
        rows.sort(key=_PART_ID)
    except TypeError:  # None < None, str < bytes …: a stable sort keeps table order in ties
        rows.sort(key=_sqlite_order)


def _sqlite_order(row: tuple[Any, ...]) -> tuple[int, Any]:
    value = row[0]
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)):
        return (1, value)
    return (2, value) if isinstance(value, str) else (3, bytes(value))


_ID_MASK = (1 << 48) - 1  # the time and counter bits of an OpenCode id


def _message_id(value: int) -> str:
    """The smallest message id whose time-and-counter bits are ``value``; past the largest,
    a bound above every message id (the digits are lowercase hex, and ``g`` follows ``f``)."""
    return f"msg_{value:012x}" if value <= _ID_MASK else "msg_g"


_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _journal_in_use(path: Path) -> bool:
    """A rollback journal that holds a transaction (begun or cut off): it starts with the
    journal's magic number. An empty one, or one a `journal_mode=PERSIST` database zeroed
    after its commit, holds none."""
    import stat

    try:  # O_NONBLOCK: a FIFO planted as the journal must not hang the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"cannot read {path}: not a regular file")
        return os.pread(fd, 8, 0) == _JOURNAL_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


# What reading a damaged file can raise: SQLite's errors, and ``UnicodeDecodeError`` when
# the text Python's sqlite3 converts is not UTF-8 (a damaged schema: SQLite's error message
# quotes the broken SQL; with apsw, a text cell too).
SQLITE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, UnicodeDecodeError)


def sqlite_reason(exc: BaseException) -> str:
    """What ``exc`` (one of ``SQLITE_ERRORS``) says, as valid text."""
    if isinstance(exc, UnicodeDecodeError):
        said = exc.object[:200] if isinstance(exc.object, (bytes, bytearray)) else b""
        text = bytes(said).decode("utf-8", "replace")
        return f"damaged text that is not UTF-8: {text}" if text else "damaged text"
    return str(exc)


def _read_only(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, timeout=5.0, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only = 1")
    except BaseException:
        conn.close()  # 3.13: an unclosed sqlite3.Connection is a ResourceWarning
        raise
    return conn


_HUGE = float("inf")  # a finite float is strictly between -_HUGE and _HUGE (NaN is not)


def _int(value: Any) -> int:
    """A number cell as an int by the figures' rule (``core.figures.token_count``): SQLite
    keeps a REAL of any size (9e999 too) even in an integer column; such a cell reads 0."""
    return value if type(value) is int else token_count(value)


def _float(value: Any) -> float:
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else 0.0
    return float(value) if kind is int else 0.0


def _text(value: Any) -> str | None:
    """A text cell as text: a BLOB decoded (bad bytes replaced), a number written out."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# A session that is no subagent: no parent, itself as parent, a parent no longer there (an
# orphan counts on its own rather than vanishing from `sessions` and `usage --all`), or on a
# loop of parent links (``loop_members``; the store adds those ids to this rule).
_TOP_LEVEL = (
    "(parent_id IS NULL OR parent_id = id "
    "OR parent_id NOT IN (SELECT id FROM session WHERE id IS NOT NULL))"
)


class Store:
    """A read-only view of one ``opencode.db``. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._tmp: str | None = None
        self._loops: frozenset[Any] | None = None
        self._reverts: dict[str, str | bytes] | None = None
        self._forked: dict[str, int] | None = None  # fork → its creation (``forked_sessions``)
        self._untimed: frozenset[str] | None = None  # ``sessions_with_untimed_parts``
        self._totals: dict[str, dict[str, Any]] | None = None
        self._session_columns = _SESSION_COLUMNS
        self.totals_from_messages = False
        self._tables: dict[str, set[str]] = {}  # each table's columns
        self._schema: tuple[str | None, str | None] | None = None  # asked for: ``schema``
        self.notes: list[str] = []  # for people: set by ``store.open`` (an older schema, …)
        try:  # a private copy made before a failure is removed too
            self.conn = self._connect()
            self._check_schema()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening

    bytes_read = 0  # data bytes the row readers have handed out (for memory budgets)

    def reopen(self, connect: Callable[[str], Any] | None = None) -> Store:
        """The same database on a new connection (for a forked worker: a SQLite connection
        must not be used across ``fork``). The copy does not own any private copy.
        ``connect``: opens the connection from the store's URI instead of ``sqlite3``
        (``fastscan.sqlite3_like``, in a forked child; None from it means ``sqlite3``)."""
        clone = object.__new__(Store)
        clone.path = self.path
        clone._tmp = None
        clone._loops = self._loops
        clone._reverts = self._reverts
        clone._forked = self._forked
        clone._untimed = self._untimed
        clone._totals = self._totals
        clone._session_columns = self._session_columns
        clone.totals_from_messages = self.totals_from_messages
        clone._tables, clone._schema = self._tables, self._schema
        clone.notes = []
        clone.uri = self.uri
        clone.bytes_read = 0
        try:
            conn = connect(self.uri) if connect is not None else None
            clone.conn = conn if conn is not None else _read_only(self.uri)
            if getattr(self.conn, "text_factory", str) is not str:  # switched: as this one
                clone._replace_bad_text()
        except SQLITE_ERRORS as exc:
            raise InputError(f"cannot read {self.path}: {sqlite_reason(exc)}") from None
        return clone

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        if not path.exists():
            raise InputError(f"no OpenCode database at {path}")
        if not path.is_file():
            raise InputError(f"{path} is not a file")
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        journal = Path(f"{path}-journal")
        uri = None
        if _journal_in_use(journal):
            # A rollback journal: a writer's transaction under way, or one cut off (a hot
            # journal). Read as-is, the file could show uncommitted pages; a private copy with
            # its journal is rolled back by SQLite to the last committed state.
            uri = self._private_copy(path, journal, writable=True, gone_ok=True)
        if uri is None:
            if not wal.exists():
                uri = f"{path.resolve().as_uri()}?immutable=1"
            elif shm.exists():
                uri = f"{path.resolve().as_uri()}?mode=ro"
            else:
                uri = self._private_copy(path, wal)
        self.uri = uri  # how to open it again, for parallel readers
        conn = None
        try:
            conn = _read_only(uri)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except SQLITE_ERRORS as exc:
            if conn is not None:
                conn.close()
            reason = sqlite_reason(exc)
            raise InputError(f"{path} is not a readable SQLite database ({reason})") from None
        if uri.endswith("?mode=rw"):
            # a private copy whose journal the first read rolled back: a forked worker
            # opens it again read-only (apsw's flags refuse a URI that asks for rw)
            self.uri = f"{uri[: -len('rw')]}ro"
        return conn

    def _private_copy(
        self, path: Path, beside: Path, *, writable: bool = False, gone_ok: bool = False
    ) -> str | None:
        """A copy of the database and its ``-wal`` or ``-journal`` in a folder of our own
        (removed by ``close``); ``writable`` lets SQLite roll a journal back in the copy.
        With ``gone_ok``, None when ``beside`` went away meanwhile (its writer committed)."""
        # Imported here: a private copy is rare, and these cost every command's start-up.
        import shutil
        import stat
        import tempfile

        needed = 0
        for source in (path, beside):  # a device (/dev/zero) would fill the temporary folder
            try:
                info = os.stat(source)
            except FileNotFoundError:
                continue  # said below, as before
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"cannot read {path}: {source} is not a regular file")
            needed += info.st_size
        # A copy that cannot fit is refused before it fills a folder others use too (a
        # sparse or huge -wal): the copy is as large as the files say they are.
        folder = tempfile.gettempdir()
        room = _free_bytes(folder)
        if room is not None and needed > room:
            raise InputError(
                f"cannot read {path}: its private copy needs {_megabytes(needed)} and "
                f"{folder} has {_megabytes(room)} free (set TMPDIR to a folder with room)"
            )
        self._tmp = tempfile.mkdtemp(prefix="opencode-events-")
        # removed by ``close``, or when the store is dropped unclosed (or at exit)
        self._tmp_finalizer = weakref.finalize(self, shutil.rmtree, self._tmp, True)
        copy = Path(self._tmp) / "opencode.db"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(beside, f"{copy}{beside.name[len(path.name) :]}")
        except FileNotFoundError:
            if not gone_ok or not path.exists():
                raise InputError(f"cannot read {path}: it went away while being copied") from None
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            return None
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        return f"{copy.as_uri()}?mode={'rw' if writable else 'ro'}"

    def _check_schema(self) -> None:
        try:
            tables = {
                name: {c[1] for c in self.conn.execute(f"PRAGMA table_info({name})")}
                for (name,) in self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
        except SQLITE_ERRORS as exc:
            raise InputError(
                f"{self.path} is not a readable SQLite database ({sqlite_reason(exc)})"
            ) from None
        present = tables.get("session", set())
        self._tables = tables
        # An older schema without the session's totals: summed from its messages.
        self.totals_from_messages = "session" in tables and not any(
            c in present for c in TOTALS_COLUMNS
        )
        optional = OPTIONAL_SESSION_COLUMNS + (TOTALS_COLUMNS if self.totals_from_messages else ())
        self._session_columns = ", ".join(
            name if name in present or name not in optional else f"NULL AS {name}"
            for name in SessionRow._fields
        )
        for table, columns in REQUIRED_TABLES.items():
            if table not in tables:
                raise InputError(f"{self.path} is not an OpenCode database (no `{table}` table)")
            missing = [c for c in columns if c not in tables[table]]
            if table == "session" and self.totals_from_messages:
                missing = [c for c in missing if c not in TOTALS_COLUMNS]
            if missing:
                raise InputError(
                    f"{self.path} is not an OpenCode database this tool knows "
                    f"(`{table}` lacks {', '.join(missing)}{self._schema_words()})"
                )

    @property
    def schema(self) -> tuple[str | None, str | None]:
        """(the last migration OpenCode recorded, the newest OpenCode version that wrote a
        session): what names the schema of a database in a message. Read when first asked:
        the newest session's version is a scan of the session table (no index on its
        time), 46 MB of pages at 100,000 sessions, which only an error or a note needs."""
        if self._schema is None:
            self._schema = self._schema_of(self._tables)
        return self._schema

    def _schema_of(self, tables: dict[str, set[str]]) -> tuple[str | None, str | None]:
        """``schema``, read. OpenCode records its migrations in ``migration`` (1.18) or,
        before, drizzle's ``__drizzle_migrations``."""
        migration = version = None
        queries = []
        if "id" in tables.get("migration", set()):
            queries.append("SELECT max(id) FROM migration")
        if "name" in tables.get("__drizzle_migrations", set()):
            queries.append("SELECT name FROM __drizzle_migrations ORDER BY id DESC LIMIT 1")
        for sql in queries:
            try:
                row = self.conn.execute(sql).fetchone()
            except SQLITE_ERRORS:
                continue
            if row and isinstance(row[0], str):
                migration = row[0]
                break
        if {"version", "time_updated"} <= tables.get("session", set()):
            try:
                row = self.conn.execute(
                    "SELECT version FROM session WHERE version IS NOT NULL "
                    "ORDER BY time_updated DESC LIMIT 1"
                ).fetchone()
            except SQLITE_ERRORS:
                row = None
            if row and isinstance(row[0], str):
                version = row[0]
        return migration, version

    def _schema_words(self, lead: str = "; ") -> str:
        """The schema, in words: OpenCode's last migration, the newest session's version."""
        migration, version = self.schema
        words = []
        if migration:
            words.append(f"OpenCode's migration {migration}")
        if version:
            words.append(f"its newest session written by OpenCode {version}")
        return (lead + ", ".join(words)) if words else ""

    def schema_note(self) -> str | None:
        """A note for people when the database is of an older schema this tool reads in
        its own way (``totals_from_messages``), naming that schema; else None."""
        if not self.totals_from_messages:
            return None
        words = self._schema_words(lead="")
        return (
            f"{self.path} is of an older OpenCode schema{f' ({words})' if words else ''}: its "
            "sessions keep no totals, so their cost and tokens are summed from their messages"
        )

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
        if self._tmp:
            import shutil

            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        finalizer = getattr(self, "_tmp_finalizer", None)
        if finalizer is not None:
            finalizer.detach()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ queries

    def _query(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows of ``sql``; a damaged file fails here as an ``InputError``, even mid-way.

        A text cell that is not UTF-8 (a title, an id: OpenCode writes UTF-8, a damaged
        file may not) does not: the connection reads text with bad bytes replaced from then
        on (``_replace_bad_text``), and the query is read again from the row it failed at,
        the rows already handed over skipped (the same query on the same snapshot gives them
        in the same order). A sound store pays nothing for it."""
        done = 0
        try:
            cursor = self.conn.execute(sql, params)
            while True:
                rows = cursor.fetchmany(256)
                if not rows:
                    return
                yield from rows
                done += len(rows)  # (an error comes from fetchmany, never mid-batch)
        except SQLITE_ERRORS as exc:
            self._read_again_or_raise(exc)
        yield from itertools.islice(self._query(sql, params), done, None)

    def _read_again_or_raise(self, exc: BaseException) -> None:
        """Return when ``exc`` (a failed read) is text that is not UTF-8 and the connection
        has just been switched to replacing it: the caller reads again. Else raise the
        ``InputError`` it is (sqlite3 says "Could not decode to UTF-8 column …"; apsw raises
        the Python error, and cannot be switched)."""
        damaged = isinstance(exc, UnicodeDecodeError) or "decode to UTF-8" in str(exc)
        if not (damaged and self._replace_bad_text()):
            raise InputError(f"cannot read {self.path}: {sqlite_reason(exc)}") from None

    def _replace_bad_text(self) -> bool:
        """Read text cells with bad bytes replaced from now on: True when this switched the
        connection; False when it had been switched already (the damage is elsewhere), or
        cannot be (apsw's, in a forked worker: that stays one error line)."""
        conn = self.conn
        if not isinstance(conn, sqlite3.Connection) or conn.text_factory is not str:
            return False
        conn.text_factory = _REPLACING
        return True

    def sessions(
        self, *, since_ms: int | None = None, top_level: bool = False, limit: int | None = None
    ) -> list[SessionRow]:
        """Sessions, newest activity first (at most ``limit``: the rest are not read)."""
        return list(self.each_session(since_ms=since_ms, top_level=top_level, limit=limit))

    def each_session(
        self,
        *,
        since_ms: int | None = None,
        top_level: bool = False,
        limit: int | None = None,
        subagents: bool = False,
        cells: bool = False,
    ) -> Iterator[Any]:
        """``sessions()`` one row at a time, as they are read: a report of 100,000 sessions
        need not hold their rows. ``subagents``: only the sessions with a parent link
        (``children`` names them), in no particular order. ``cells``: each row's cells as
        read, which ``session_row`` makes a ``SessionRow`` (where the report wants it: in
        a helper process, say)."""
        where, params = [], []
        if since_ms is not None:  # its row, or a message of its own, written since then
            where.append(
                "(time_updated >= ? OR EXISTS (SELECT 1 FROM message AS m "
                "WHERE m.session_id = session.id AND m.time_created >= ?))"
            )
            params += [since_ms, since_ms]
        if top_level:
            clause, loop_ids = self._top_level()
            where.append(clause)
            params += loop_ids
        if subagents:
            where.append("parent_id IS NOT NULL AND parent_id != id")
        sql = f"SELECT {self._session_columns} FROM session"
        if where:
            sql += " WHERE " + " AND ".join(where)
        if not subagents:
            sql += " ORDER BY time_updated DESC, id DESC"
        if limit is not None and 0 <= limit < 1 << 63:  # what SQLite's LIMIT holds
            sql += " LIMIT ?"
            params.append(limit)
        if cells:
            yield from self._query(sql, params)
            return
        # A directory, version, agent or model is the same text in many sessions: one string
        # each, not one a row (a list of 100,000 sessions holds 30 MB less).
        shared: dict[str, str] = {}
        for found in self._query(sql, params):
            yield self.session_row(found, shared)

    def session_row(
        self, cells: tuple[Any, ...], shared: dict[str, str] | None = None
    ) -> SessionRow:
        """The ``SessionRow`` of a row's ``cells`` (``each_session(cells=True)``), an older
        schema's totals summed from its messages; ``shared``: strings met before, each
        kept once."""
        row = self._session_row(cells, shared)
        if self.totals_from_messages:
            totals = self._message_totals()
            if row.id in totals:
                row = row._replace(**totals[row.id])
        return row

    def read_row_totals(self) -> None:
        """Read now, once, what ``session_row`` adds to every row: an older schema's totals,
        summed from its messages (nothing for OpenCode's schema). A copy made after it by
        ``reopen`` (a forked helper's) shares them, instead of summing them again from the
        snapshot it reads later."""
        if self.totals_from_messages:
            self._message_totals()

    def _message_totals(self) -> dict[str, dict[str, Any]]:
        """session id → its totals, summed from its assistant messages by the one rule
        (``figures``), as the legacy store sums them; read once."""
        if self._totals is not None:
            return self._totals
        import msgspec

        from ..core.figures import read_figures, summed_cost
        from ..core.views import MESSAGE_DECODER

        sums: dict[str, list[Any]] = {}
        for session_id, data in self._query(
            "SELECT session_id, CAST(data AS BLOB) FROM message ORDER BY time_created, id"
        ):
            try:
                info = MESSAGE_DECODER.decode(data) if data else None
            except (msgspec.DecodeError, RecursionError):
                continue
            if info is None or info.role != "assistant":
                continue
            figures = read_figures(info.tokens, info.cost)
            entry = sums.setdefault(session_id, [0.0, 0, 0, 0, 0, 0, 0, None, None])
            entry[0] += figures.cost
            entry[1] += 1
            for i, value in enumerate(
                (figures.input, figures.output, figures.reasoning),
                2,
            ):
                entry[i] += value
            entry[5] += figures.cache_read
            entry[6] += figures.cache_write
            if isinstance(info.modelID, str):
                entry[7] = msgspec.json.encode({"id": info.modelID, "providerID": info.providerID})
            if isinstance(info.agent, str):
                entry[8] = info.agent
        self._totals = {
            sid: {
                "cost": summed_cost(e[0], e[1]),
                "tokens_input": e[2],
                "tokens_output": e[3],
                "tokens_reasoning": e[4],
                "tokens_cache_read": e[5],
                "tokens_cache_write": e[6],
                "model": e[7].decode() if e[7] else None,
                "agent": e[8],
            }
            for sid, e in sums.items()
        }
        return self._totals

    def newest_session(self) -> str | None:
        """The top-level session written most recently (``import``'s default), or None."""
        clause, params = self._top_level()
        row = next(
            self._query(
                f"SELECT id FROM session WHERE {clause} ORDER BY time_updated DESC, id DESC "
                "LIMIT 1",
                params,
            ),
            None,
        )
        return row[0] if row else None

    def last_write(self, session_id: str) -> int | None:
        """The latest ``time_updated`` of the session's messages and parts (when it was
        last written to: OpenCode does not touch the session row for every part)."""
        latest = None
        for table in ("message", "part"):
            try:
                (value,) = next(
                    self._query(
                        f"SELECT max(time_updated) FROM {table} WHERE session_id = ?",
                        (session_id,),
                    )
                )
            except InputError:  # no such column (not a table OpenCode wrote): unknown
                continue
            if type(value) is int and (latest is None or value > latest):
                latest = value
        return latest

    # ------------------------------------------------------------ quick glances
    # For ``statusline`` (reports/statusline.py): each answered from an index or a few rows
    # at the end of a b-tree, never a scan of a table (OpenCode's schema indexes neither
    # session.time_updated nor message.time_created alone, and the store is read-only).

    def recently_written_session(self, recent: int = 32) -> str | None:
        """The session of the message written last among the ``recent`` newest message
        rows (rowid order is insertion order): the session at work now, or last. None when
        there are no messages."""
        row = next(
            self._query(
                "SELECT session_id FROM (SELECT session_id, time_updated, rowid AS r "
                "FROM message ORDER BY rowid DESC LIMIT ?) ORDER BY time_updated DESC, r DESC "
                "LIMIT 1",
                (recent,),
            ),
            None,
        )
        return row[0] if row else None

    def parent_of(self, session_id: str) -> str | None:
        row = next(self._query("SELECT parent_id FROM session WHERE id = ?", (session_id,)), None)
        parent = row[0] if row else None
        return parent if isinstance(parent, str) and parent != session_id else None

    def inference_counts(self, session_ids: Sequence[str]) -> dict[str, int]:
        """How many assistant messages (inferences) each session has, as ``sessions`` counts
        them: a row starting as OpenCode writes an assistant's, or else one whose ``role``
        says so (through the (session, time) index, then each message's first bytes)."""
        sql = (
            "SELECT session_id, count(*) FROM message WHERE session_id IN ({}) AND ("
            'substr(data, 1, 20) = \'{{"role":"assistant",\' OR ('
            'substr(data, 1, 15) != \'{{"role":"user",\' AND json_valid(data) '
            "AND json_extract(data, '$.role') = 'assistant')) GROUP BY session_id"
        )
        return {sid: count for sid, count in self._in_chunks(sql, session_ids)}

    def family_rows(self, root: str) -> list[tuple[str, float, int]]:
        """(id, cost, time_updated) of ``root`` and every session below it, the root first
        (through the parent index, a level at a time)."""
        cost_column = "NULL" if self.totals_from_messages else "cost"
        rows = self._query(
            f"SELECT id, {cost_column}, time_updated FROM session WHERE id = ?", (root,)
        )
        found = [(sid, _float(cost), _int(updated)) for sid, cost, updated in rows]
        seen = {root}
        frontier = [root]
        while frontier:
            level: list[str] = []
            for sid, cost, updated in self._in_chunks(
                f"SELECT id, {cost_column}, time_updated FROM session WHERE parent_id IN ({{}})",
                frontier,
            ):
                if sid not in seen:
                    seen.add(sid)
                    level.append(sid)
                    found.append((sid, _float(cost), _int(updated)))
            frontier = level
        if self.totals_from_messages:  # an older schema: the costs its messages add up to
            totals = self._message_totals()
            found = [(s, totals.get(s, {}).get("cost", 0.0), u) for s, _, u in found]
        return found

    def newest_messages(self, session_id: str) -> Iterator[tuple[str, int, bytes]]:
        """(id, time_updated, data) of a session's messages, newest first, read as they
        are taken (the caller stops when it has seen enough)."""
        return self._query(
            "SELECT id, time_updated, CAST(data AS BLOB) FROM message WHERE session_id = ? "
            "ORDER BY time_created DESC, id DESC",
            (session_id,),
        )

    def messages_between(
        self, start_ms: int, end_ms: int
    ) -> Iterator[tuple[str, int, int | None, bytes]]:
        """(id, time_created, its session's time_created, data) of the messages created in
        [start_ms, end_ms) that may be replies (OpenCode writes a prompt's data starting
        ``{"role":"user",``; callers still check the role), found by their ids: OpenCode's
        message ids begin with 12 hex digits of ``time_ms * 0x1000 + counter`` (the low 48
        bits), so a time range is an id range on the primary key's index (two when the 48
        bits wrap inside it, once in about 800 days). A fork's copy of older messages gets
        new ids, so it is found here with its old ``time_created``: callers check that."""
        low, high = ((ms << 12) & _ID_MASK for ms in (start_ms, end_ms))
        ranges = [(low, high)] if low <= high else [(low, _ID_MASK + 1), (0, high)]
        rows: list[tuple[Any, ...]] = []
        for lo, hi in ranges:
            rows += self._query(
                "SELECT id, time_created, session_id, CAST(data AS BLOB) FROM message "
                "WHERE id >= ? AND id < ? AND time_created >= ? AND time_created < ? "
                'AND substr(data, 1, 15) != \'{"role":"user",\'',
                (_message_id(lo), _message_id(hi), start_ms, end_ms),
            )
        # Each session's own creation once (a join would look it up once a message).
        created = self.sessions_created({row[2] for row in rows})
        for message_id, time_created, session_id, data in rows:
            yield message_id, time_created, created.get(session_id), data

    def sessions_created(self, session_ids: Iterable[str]) -> dict[str, int]:
        """session id → its ``time_created``, by primary key."""
        return dict(
            self._in_chunks(
                "SELECT id, time_created FROM session WHERE id IN ({})", list(session_ids)
            )
        )

    def last_message_rowid(self) -> int:
        """The newest message row's rowid (0 for none), from the b-tree's edge."""
        (rowid,) = next(self._query("SELECT max(rowid) FROM message"))
        return rowid or 0

    def message_id_at(self, rowid: int) -> Any:
        """The id of the message row at ``rowid`` (None for none): a look that remembers
        the last row it read can tell a row given its rowid again (SQLite hands out the
        newest rowids once more after the newest rows are deleted, as an undo does)."""
        row = next(self._query("SELECT id FROM message WHERE rowid = ?", (rowid,)), None)
        return row[0] if row else None

    _MESSAGE_ROW = (
        "SELECT rowid, id, session_id, time_created, time_updated, CAST(data AS BLOB) FROM message"
    )

    def messages_after(self, rowid: int) -> Iterator[tuple[int, str, str, int, int, bytes]]:
        """(rowid, id, session id, time_created, time_updated, data) of the message rows
        inserted after ``rowid``, oldest first: what is new since a look."""
        return self._query(f"{self._MESSAGE_ROW} WHERE rowid > ? ORDER BY rowid", (rowid,))

    def messages_by_id(self, ids: Iterable[str]) -> Iterator[tuple[int, str, str, int, int, bytes]]:
        """The same of the messages ``ids`` (replies in flight, read again)."""
        return self._in_chunks(f"{self._MESSAGE_ROW} WHERE id IN ({{}})", list(ids))

    def newest_parts(self, message_id: str, limit: int = 32) -> list[bytes]:
        """The data of a message's newest parts (part ids grow with time), newest first."""
        return [
            data
            for (data,) in self._query(
                "SELECT CAST(data AS BLOB) FROM part WHERE message_id = ? ORDER BY id DESC LIMIT ?",
                (message_id, limit),
            )
        ]

    def session_count(self) -> int:
        (count,) = next(self._query("SELECT count(*) FROM session"))
        return count

    # ------------------------------------------------------------------ change keys
    # (store.changes: what the report cache compares)

    def _has_table(self, name: str) -> bool:
        rows = self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        return next(rows, None) is not None

    def change_edges(self) -> list[Any]:
        """The tables' edges: the newest rowid of each table a report reads, the number of
        sessions and the event log's total sequence (each answered from a b-tree's edge or
        a small table)."""
        edges: list[Any] = []
        for table in ("session", "message", "part", "event"):
            if table == "event" and not self._has_table("event"):
                edges.append(None)
                continue
            (high,) = next(self._query(f"SELECT max(rowid) FROM {table}"))
            edges.append(high)
        edges.append(self.session_count())
        if self._has_table("event_sequence"):
            edges.extend(next(self._query("SELECT count(*), total(seq) FROM event_sequence")))
        else:
            edges.extend([None, None])
        # OpenCode's schema and data migrations: writes of its own that bypass the event log.
        edges.append(
            [
                next(self._query(f"SELECT count(*) FROM {table}"))[0]
                if self._has_table(table)
                else None
                for table in _MIGRATION_TABLES
            ]
        )
        # The newest event's id: what tells a log that grew from one that was rewritten
        # (``store.changes.log_kept``).
        edges.append(self.event_id_at(edges[3]) if edges[3] is not None else None)
        return edges

    def event_id_at(self, rowid: Any) -> Any:
        """The id of the event row at ``rowid`` (None: none there, or no event log)."""
        if type(rowid) is not int or not self._has_table("event"):
            return None
        row = next(self._query("SELECT id FROM event WHERE rowid = ?", (rowid,)), None)
        return None if row is None else row[0]

    def event_sequences(self) -> dict[str, int]:
        """Each session's latest event number (``event_sequence.seq``): OpenCode's change
        counter per session; {} without an event log."""
        if not self._has_table("event_sequence"):
            return {}
        return {
            sid: seq
            for sid, seq in self._query("SELECT aggregate_id, seq FROM event_sequence")
            if type(sid) is str and type(seq) is int
        }

    def session_ids(self, *, top_level: bool = False) -> list[str]:
        """Session ids, oldest first: the order of ``sessions()`` sorted by (time_created,
        id), without building whole rows (a damaged time sorts as 0 there too)."""
        sql = "SELECT id, time_created FROM session"
        params: list[Any] = []
        if top_level:
            clause, params = self._top_level()
            sql += f" WHERE {clause}"
        rows = [(_int(created), sid) for sid, created in self._query(sql, params)]
        try:
            rows.sort()
        except TypeError:  # a damaged id (NULL, a blob) beside another at the same time
            rows.sort(key=lambda row: (row[0], _sqlite_order((row[1],))))
        return [sid for _, sid in rows]

    def session(self, session_id: str) -> SessionRow | None:
        rows = self._query(
            f"SELECT {self._session_columns} FROM session WHERE id = ?", (session_id,)
        )
        row = next(rows, None)
        if not row:
            return None
        return self.session_row(row)

    def find_sessions(self, prefix: str) -> list[str]:
        """Ids that equal or start with ``prefix`` (people paste shortened ids). One that
        is not UTF-8 (bytes of a command line held as surrogates, which the binding cannot
        take) starts no id: the store's text is UTF-8 (damage read as U+FFFD)."""
        if not is_utf8(prefix):
            return []
        rows = self._query(
            "SELECT id FROM session WHERE id = ? OR substr(id, 1, ?) = ? ORDER BY id",
            (prefix, len(prefix), prefix),
        )
        return [r[0] for r in rows]

    @staticmethod
    def _session_row(row: tuple[Any, ...], shared: dict[str, str] | None = None) -> SessionRow:
        """A session row with its numbers made numbers: a damaged cell reads as 0, it does
        not stop the report (OpenCode itself only ever writes numbers there). ``shared``:
        strings met before, whose copy in this row is replaced by the first one."""
        (
            sid,
            parent,
            title,
            directory,
            version,
            agent,
            model,
            cost,
            t_in,
            t_out,
            t_reason,
            t_read,
            t_write,
            created,
            updated,
            archived,
            revert,
        ) = row
        if (  # what OpenCode writes: taken as it is, without a call per cell
            type(title) is str
            and type(directory) is str
            and type(version) is str
            and (agent is None or type(agent) is str)
            and (model is None or type(model) is str)
            and type(cost) is float
            and -_HUGE < cost < _HUGE
            and type(t_in) is int
            and type(t_out) is int
            and type(t_reason) is int
            and type(t_read) is int
            and type(t_write) is int
            and type(created) is int
            and type(updated) is int
            and (archived is None or type(archived) is int)
            and (revert is None or type(revert) is str)
        ):
            if shared is None:
                return SessionRow(sid, parent if parent != sid else None, *row[2:])
            keep = shared.setdefault  # every value here is a string (or None, itself)
            return SessionRow(
                sid,
                parent if parent != sid else None,
                title,
                keep(directory, directory),
                keep(version, version),
                agent if agent is None else keep(agent, agent),
                model if model is None else keep(model, model),
                *row[7:],
            )
        return SessionRow(
            sid,
            parent if parent != sid else None,  # a session is never its own parent
            _text(title),
            _text(directory),
            _text(version),
            _text(agent),
            _text(model),
            _float(cost),
            _int(t_in),
            _int(t_out),
            _int(t_reason),
            _int(t_read),
            _int(t_write),
            _int(created),
            _int(updated),
            _int(archived) if archived is not None else None,
            revert if isinstance(revert, (str, bytes)) else None,
        )

    def reverted_sessions(self) -> dict[str, str | bytes]:
        """session id → its pending revert (JSON), for the sessions that have one; read
        once per store (an undo is rare, and ``import`` asks for every session)."""
        if self._reverts is None:
            if "revert" in self._session_columns.split(", "):
                rows = self._query("SELECT id, revert FROM session WHERE revert IS NOT NULL")
                self._reverts = {i: r for i, r in rows if isinstance(r, (str, bytes))}
            else:
                self._reverts = {}
        return self._reverts

    def sessions_with_untimed_parts(self) -> frozenset[str]:
        """Sessions whose part rows hold no write time of their own: those OpenCode moved
        in from its JSON files (1.2's migration; a session keeps the version that wrote it,
        one before 1.2) stamped every part row with the moment it ran. Their parts are
        dated from their data, as an export's are. Read once per store."""
        if self._untimed is None:
            found: set[str] = set()
            if "version" in self._session_columns.split(", "):
                for sid, version in self._query("SELECT id, version FROM session"):
                    if type(sid) is str and wrote_json_files(version):
                        found.add(sid)
            self._untimed = frozenset(found)
        return self._untimed

    def children(self) -> dict[str, list[str]]:
        """parent id → child session ids, oldest first (a parent link on a loop is not one)."""
        tree: dict[str, list[str]] = {}
        loops = self.loop_members()
        for child, parent in self._query(
            "SELECT id, parent_id FROM session WHERE parent_id IS NOT NULL AND parent_id != id "
            "ORDER BY time_created, id"
        ):
            if child not in loops:
                tree.setdefault(parent, []).append(child)
        return tree

    def session_parents(self) -> dict[Any, Any]:
        """Every session id → its parent id (None for a top-level session), as stored. The
        loops among the links (``loop_members``), when not read yet, are found in the same
        rows: the table is not read again for them."""
        sql = "SELECT id, parent_id FROM session"
        try:  # one fetch: the rows are two short strings each
            parents = dict(self.conn.execute(sql).fetchall())
        except SQLITE_ERRORS as exc:
            self._read_again_or_raise(exc)
            parents = dict(self._query(sql))
        if self._loops is None:
            self._loops = _loops_among(parents.items())
        return parents

    def each_session_parent(self) -> Iterator[tuple[Any, Any]]:
        """(session id, its parent id) of every session, as stored, as they are read:
        ``session_parents`` without the dict (nor the loops among them)."""
        return self._query("SELECT id, parent_id FROM session")

    def plainly_ordered(self) -> bool:
        """Whether every session's ``time_updated`` is an integer (what OpenCode writes), so
        that sorting the rows as read gives ``sessions()``'s order, as SQLite sorts them."""
        found = self._query("SELECT 1 FROM session WHERE typeof(time_updated) != 'integer' LIMIT 1")
        return next(found, None) is None

    def loop_members(self) -> frozenset[Any]:
        """The sessions on a loop of parent links (``loop_members``), read once."""
        if self._loops is None:
            sql = "SELECT id, parent_id FROM session WHERE parent_id IS NOT NULL"
            self._loops = _loops_among(self._query(sql))
        return self._loops

    def begun_by(self, until_ms: int) -> set[str]:
        """Ids of the sessions created after ``until_ms`` with a message created by then (a
        fork's copied history, a clock that went back: older than the session's own row);
        one index seek for each session created after it."""
        return {
            sid
            for (sid,) in self._query(
                "SELECT id FROM session WHERE time_created > ? AND EXISTS (SELECT 1 FROM "
                "message AS m WHERE m.session_id = session.id AND m.time_created <= ?)",
                (until_ms, until_ms),
            )
        }

    def _top_level(self) -> tuple[str, list[Any]]:
        """``_TOP_LEVEL`` with this store's loop members added, and its parameters."""
        loops = list(self.loop_members())
        if not loops:
            return _TOP_LEVEL, []
        return f"({_TOP_LEVEL} OR id IN ({', '.join('?' * len(loops))}))", loops

    def messages(self, session_id: str) -> Iterator[MessageRow]:
        """A session's messages in (time_created, id) order."""
        for message_id, _, created, data in self.message_rows_of(session_id):
            yield MessageRow(message_id, session_id, created, data)

    def parts(self, session_id: str) -> Iterator[PartRow]:
        """A session's parts in message order (the message's time_created, id), then by id."""
        for part_id, message_id, _, created, data in self.part_rows(session_id):
            yield PartRow(part_id, message_id, session_id, created, data)

    def message_rows_of(self, session_id: str) -> list[tuple[Any, ...]]:
        """``messages`` as a list of plain tuples in ``MessageRow``'s layout, the session id
        left None (the caller has it; one string object fewer a row), for the import's hot
        loop."""
        rows: list[tuple[Any, ...]] = []
        for batch in self._batches(
            "SELECT id, NULL, time_created, CAST(data AS BLOB) FROM message "
            "WHERE session_id = ? ORDER BY time_created, id",
            (session_id,),
        ):
            rows += batch
        self.bytes_read += sum(len(row[3]) for row in rows if type(row[3]) is bytes)
        return rows

    def messages_from(self, session_id: str, message_id: str) -> list[MessageRow] | None:
        """A session's messages from ``message_id`` on, in ``messages``'s order (what a
        pending undo of it undid, and no earlier row): none when the session has no such
        message; None when its time is NULL, which no comparison orders as ``messages``
        does (the caller then reads them all)."""
        sql = "SELECT time_created FROM message WHERE id = ? AND session_id = ?"
        point = next(self._query(sql, (message_id, session_id)), None)
        if point is None:
            return []
        if point[0] is None:
            return None
        sql = (
            "SELECT id, time_created, CAST(data AS BLOB) FROM message WHERE session_id = ? "
            "AND (time_created, id) >= (?, ?) ORDER BY time_created, id"
        )
        rows = [
            MessageRow(mid, session_id, created, data)
            for mid, created, data in self._query(sql, (session_id, point[0], message_id))
        ]
        self.bytes_read += sum(len(row.data) for row in rows if type(row.data) is bytes)
        return rows

    def part_heads(self, session_id: str) -> Iterable[tuple[Any, ...]]:
        """``part_rows``, but where the connection can tell a value's size without loading
        it (apsw's SQLite, in a forked worker: ``fastscan.sqlite3_like``), a part longer
        than ``BIG_VALUE`` bytes (a tool's output, mostly) comes as its first
        ``_TOOL_HEAD_BYTES``, read from its first page, with its rowid in the third place
        (for ``part_data``, when the caller needs the whole); every other row, with
        ``sqlite3``'s connection every row, whole with None there. The same judgement of a
        part by its head then holds either way (``tool_part_batches``' rule)."""
        read = getattr(self.conn, "part_head", None)
        if read is None:
            return self._ordered_parts(session_id, None)

        def head(rowid: int) -> bytes:
            try:
                return read(rowid)  # type: ignore[no-any-return]
            except SQLITE_ERRORS as exc:
                raise InputError(f"cannot read {self.path}: {sqlite_reason(exc)}") from None

        rows = self._ordered_parts(session_id, None, heads=True)
        return (row if row[2] is None else (*row[:4], head(row[2])) for row in rows)

    BIG_VALUE = 4000  # bytes: a larger value may have overflow pages (4,096-byte pages)

    def part_rows(self, session_id: str) -> Iterable[tuple[Any, ...]]:
        """``parts`` as plain tuples in ``PartRow``'s layout, the session id left None (the
        caller has it), for the import's hot loop.

        Only parts of messages in the same session are read (a row pointing elsewhere is
        not part of this session's history). Usually the session's parts are read in table
        order through the session index, the cheapest read there is, and put in order
        here; a session whose part data would take more than ``GATHER_LIMIT`` bytes of
        memory streams instead, already ordered, from a join on the message index.
        """
        return self._ordered_parts(session_id, None)

    def session_rows(
        self, session_id: str
    ) -> tuple[list[tuple[Any, ...]], Iterable[tuple[Any, ...]]]:
        """``(message_rows_of, part_rows)`` of one session, the parts put in the order of
        the messages just read (one query fewer)."""
        messages = self.message_rows_of(session_id)
        return messages, self._ordered_parts(session_id, [row[0] for row in messages])

    def _ordered_parts(
        self, session_id: str, message_ids: list[Any] | None, *, heads: bool = False
    ) -> Iterable[tuple[Any, ...]]:
        gathered = self._gathered_parts(session_id, message_ids, heads)
        return self._joined_parts(session_id, heads) if gathered is None else gathered

    def _part_columns(self, table: str, heads: bool) -> str:
        """A part row's rowid (or NULL) and data, as ``part_rows`` or ``part_heads`` give
        them (``table``: the part table's name in the query)."""
        if not heads:
            return f"NULL, {table}.time_created, CAST({table}.data AS BLOB)"
        big = f"octet_length({table}.data) > {self.BIG_VALUE}"
        return (
            f"CASE WHEN {big} THEN {table}.rowid END, {table}.time_created, "
            f"CASE WHEN {big} THEN NULL ELSE CAST({table}.data AS BLOB) END"
        )

    def _joined_parts(self, session_id: str, heads: bool = False) -> Iterator[tuple[Any, ...]]:
        for row in self._query(
            f"SELECT p.id, p.message_id, {self._part_columns('p', heads)} "
            "FROM message m CROSS JOIN part p ON p.message_id = m.id "
            "WHERE m.session_id = ? AND p.session_id = ? ORDER BY m.time_created, m.id, p.id",
            (session_id, session_id),
        ):
            if type(row[4]) is bytes:
                self.bytes_read += len(row[4])
            yield row

    GATHER_LIMIT = 64 << 20

    def _gathered_parts(
        self, session_id: str, message_ids: list[Any] | None, heads: bool = False
    ) -> list[tuple[Any, ...]] | None:
        rows: list[tuple[Any, ...]] = []
        size, limit = 0, self.GATHER_LIMIT
        for batch in self._batches(
            f"SELECT id, message_id, {self._part_columns('part', heads)} FROM part "
            "WHERE session_id = ?",
            (session_id,),
            64,  # small batches: the size limit is checked after each
        ):
            try:
                size += sum(map(len, map(_DATA, batch)))
            except TypeError:  # a damaged row without data
                size += sum(len(row[4]) for row in batch if type(row[4]) is bytes)
            if size > limit:
                return None
            rows += batch
        self.bytes_read += size
        if not rows:
            return rows
        if message_ids is None:
            message_ids = [
                mid
                for (mid,) in self._query(
                    "SELECT id FROM message WHERE session_id = ? ORDER BY time_created, id",
                    (session_id,),
                )
            ]
        # A NULL id never joins (NULL = NULL is not true in SQL).
        position = {mid: i for i, mid in enumerate(message_ids) if mid is not None}
        if _in_order(rows, position):
            return rows  # the usual case: OpenCode writes parts in the order they are read
        # Rows of one message mostly come one after another: group them in runs.
        by_message: dict[Any, list[tuple[Any, ...]]] = {}
        for message_id, run in itertools.groupby(rows, _MESSAGE_ID):
            found = by_message.get(message_id)
            if found is None:
                by_message[message_id] = list(run)
            else:
                found += run
        ordered: list[tuple[Any, ...]] = []
        for message_id in position:
            found = by_message.get(message_id)
            if found is not None:
                if len(found) > 1:
                    _sort_by_id(found)
                ordered += found
        return ordered

    def message_batches(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[list[tuple[str, str, int, bytes]]]:
        """(session id, message id, time_created, data) of many sessions' messages (None:
        all), in no set order, in lists of a few thousand: for loops over a whole database,
        where a generator step per row would cost more than the row's own work."""
        if session_ids is None:
            yield from self._batches(
                "SELECT session_id, id, time_created, CAST(data AS BLOB) FROM message"
            )
            return
        ids = list(session_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            yield from self._batches(
                "SELECT session_id, id, time_created, CAST(data AS BLOB) FROM message "
                f"WHERE session_id IN ({', '.join('?' * len(chunk))})",
                chunk,
            )

    def assistant_batches(self) -> Iterator[list[tuple[str, str, int, bytes]]]:
        """(session id, message id, time_created, data) of every message that is not plainly
        a user's (OpenCode writes those starting ``{"role":"user",``; a writer that spaces
        its JSON, ``{"role": "user",``), in batches: the whole-database reports need only
        assistant messages, and a third of the rows are prompts. Callers still check the
        role."""
        yield from self._batches(
            "SELECT session_id, id, time_created, CAST(data AS BLOB) FROM message "
            'WHERE substr(data, 1, 15) != \'{"role":"user",\' '
            'AND substr(data, 1, 16) != \'{"role": "user",\''
        )

    def rowid_ranges(self, table: str, parts: int) -> list[tuple[int, int]]:
        """``parts`` contiguous rowid ranges [lo, hi) covering ``table`` (message or part)."""
        if table not in ("message", "part"):
            raise ValueError(table)
        # Two queries: SQLite answers a lone min() or max() from the b-tree's edge, but
        # scans the whole table for both in one SELECT.
        (low,) = next(self._query(f"SELECT min(rowid) FROM {table}"))
        (high,) = next(self._query(f"SELECT max(rowid) FROM {table}"))
        if low is None:
            return []
        step = (high - low) // parts + 1
        return [(start, min(start + step, high + 1)) for start in range(low, high + 1, step)]

    def _batches(
        self, sql: str, params: Sequence[Any] = (), size: int = 4096
    ) -> Iterator[list[tuple[Any, ...]]]:
        done = 0
        try:
            cursor = self.conn.execute(sql, params)
            while True:
                rows = cursor.fetchmany(size)
                if not rows:
                    return
                yield rows
                done += len(rows)
        except SQLITE_ERRORS as exc:  # as ``_query``: damaged text read again, replaced
            self._read_again_or_raise(exc)
        for rows in self._batches(sql, params, size):
            if done >= len(rows):
                done -= len(rows)
                continue
            yield rows[done:] if done else rows
            done = 0

    # The parts that could be tool parts, with the first _TOOL_HEAD_BYTES of each: a tool
    # part as OpenCode writes it starts {"type":"tool",… and that start (tool name, call id,
    # state.status) says all a summary needs, without handing a large output to Python.
    # A JSON string "tool" is written `"tool"`, or with a \u escape, so a row holding
    # neither `tool"` nor `\u` cannot have the type "tool"; GLOB finds them in a quick pass
    # (a value that is not TEXT is matched as text; a NUL byte, which ends the text for GLOB,
    # makes a row no JSON at all). The caller decodes what the start does not settle. SQLite
    # loads a tool part's whole data again for the result's substr() (about 0.15 s of a
    # 0.8 s scan of the benchmark database); no way to load it once measured faster.
    _TOOL_HEAD_BYTES = 256
    _MAYBE_TOOL = """(CAST(data AS TEXT) GLOB '*tool"*' OR CAST(data AS TEXT) GLOB '*\\u*')"""
    _TOOL_PARTS = (
        f"SELECT rowid, session_id, substr(CAST(data AS BLOB), 1, {_TOOL_HEAD_BYTES}) FROM part "
        f"WHERE {_MAYBE_TOOL}"
    )

    def tool_part_batches(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, str, bytes]]]:
        """(rowid, session id, head) of the parts that could be tool parts, in batches."""
        if session_ids is None:
            yield from self._batches(self._TOOL_PARTS)
            return
        ids = list(session_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            yield from self._batches(
                f"{self._TOOL_PARTS} AND session_id IN ({', '.join('?' * len(chunk))})", chunk
            )

    _PART_DATA = "SELECT CAST(data AS BLOB) FROM part WHERE rowid = ?"

    def part_data(self, rowid: int) -> bytes | None:
        """One part's whole data, by rowid."""
        row = next(self._query(self._PART_DATA, (rowid,)), None)
        return row[0] if row else None

    # What makes a session a fork (OpenCode copies the history under new ids, with the
    # original times): messages created before the session was. A session time that is no
    # integer (damaged: text, a real) tells nothing, so no fork is known by it.
    _COPY = (
        "m.session_id = s.id AND m.time_created < s.time_created "
        "AND typeof(s.time_created) = 'integer'"
    )
    # CROSS JOIN keeps SQLite to this order: the session table, then the
    # (session_id, time_created) index, so only the copies are read, not every message.
    _OLDER_THAN_SESSION = f"FROM session s CROSS JOIN message m ON {_COPY}"
    # The same rule as a test of each session: EXISTS, not DISTINCT over the join (a scan
    # of the session table and one index probe a session: 11-20 ms for 10,000 sessions).
    _FORKS = f"FROM session s WHERE EXISTS (SELECT 1 FROM message m WHERE {_COPY})"

    def messages_older_than_session(
        self, session_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, str, int, bytes]]:
        """Messages created before their session was: a fork's copied history (of
        ``session_ids`` only, when given)."""
        columns = "m.session_id, m.id, m.time_created, CAST(m.data AS BLOB)"
        sql = f"SELECT {columns} {self._OLDER_THAN_SESSION}"
        if session_ids is None:
            yield from self._query(sql)
        else:
            yield from self._in_chunks(sql + " WHERE s.id IN ({})", session_ids)

    def forked_sessions(self) -> dict[str, int]:
        """Fork id → when it was created (``forks``' rule); read once per store."""
        if self._forked is None:
            self._forked = dict(self._query(f"SELECT s.id, s.time_created {self._FORKS}"))
        return self._forked

    def forks(self, session_ids: Sequence[str] | None = None) -> set[str]:
        """The forks (of ``session_ids``; None: all): sessions holding messages older than
        themselves, from the index alone."""
        sql = f"SELECT s.id {self._FORKS}"  # read again each time: a store may be long-lived
        if session_ids is None:
            return {sid for (sid,) in self._query(sql)}
        return {sid for (sid,) in self._in_chunks(sql + " AND s.id IN ({})", session_ids)}

    def _in_chunks(self, sql: str, ids: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        ids = list(ids)
        for start in range(0, len(ids), 500):  # stay under SQLite's variable limit
            chunk = ids[start : start + 500]
            yield from self._query(sql.format(", ".join("?" * len(chunk))), chunk)


def _loops_among(links: Iterable[tuple[Any, Any]]) -> frozenset[Any]:
    """``loop_members`` of (session, parent) rows; a session that is its own parent (or has
    none) links nowhere."""
    return loop_members({sid: up for sid, up in links if up is not None and up != sid})


def _free_bytes(folder: str) -> int | None:
    """Bytes an ordinary user may still write under ``folder``; None when not known."""
    try:
        info = os.statvfs(folder)
    except (OSError, AttributeError):  # AttributeError: no statvfs on this platform
        return None
    return info.f_bavail * info.f_frsize


def _megabytes(size: int) -> str:
    return f"{max(1, round(size / 1e6)):,} MB"
