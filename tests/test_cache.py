"""The report cache (reports.cache, store.changes): a report is always the report a run
without the cache gives, whatever happened to the database or to the cache in between.

The property test draws a sequence of store changes made of real captured rows (samples/):
new sessions, new messages and parts, updates in place, deletes, forks, a file swapped for
another database, OpenCode's own migrations (rows rewritten without an event), each written
the way OpenCode writes (with its event log moving) or the way another program would
(without it), interleaved with reports. Every report equals a cache-less recomputation, and
the database is byte-identical before and after each report.

One blind spot is documented (store/changes.py, docs/cache.md) and not drawn: between two
reports, a write by another program while OpenCode wrote too. A step here is either
OpenCode's writes or another program's.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencode_events.cli.main import cli
from opencode_events.cli.quick import NOTES_APART, usage_pieces
from opencode_events.errors import InputError
from opencode_events.output import rows
from opencode_events.reports import beside
from opencode_events.reports import cache as report_cache
from opencode_events.reports import runs as runs_module
from opencode_events.reports import sessions as sessions_module
from opencode_events.reports import usage as usage_module
from opencode_events.reports.cache import ReportCache
from opencode_events.reports.context import context_report
from opencode_events.reports.sessions import (
    SESSION_COLUMNS,
    SessionsReport,
    SessionSummary,
    sessions_report,
    write_sessions,
)
from opencode_events.reports.usage import (
    UsageReport,
    UsageRow,
    store_usage,
    stored_usage,
    stored_usage_last,
    write_stored_usage,
)
from opencode_events.store.open import every_session, open_store, select_sessions
from opencode_events.store.ranges import share_ranges
from opencode_events.store.sqlite import Store
from tests.filebytes import digests
from tests.processes import children_of_this_process

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SOURCES = ("task", "fork", "parallel_tools", "mcp", "compaction", "bash_fail", "reasoning")
_ids = itertools.count(1)


def _digest(path: Path) -> dict[str, str]:
    # read in a child: the store's connection keeps its locks on the file
    return digests([path, Path(f"{path}-wal")])


def _fresh(prefix: str) -> str:
    return f"{prefix}_zz{next(_ids):012d}cachetest"


def _rows(conn: sqlite3.Connection, sql: str, params=()) -> list[tuple]:
    return conn.execute(sql, params).fetchall()


def _copy_session(
    dst: sqlite3.Connection,
    src: sqlite3.Connection,
    sid: str,
    *,
    logged: bool,
    fork_of_time: int | None = None,
    parent: str | None = None,
) -> str:
    """Copy ``sid`` from ``src`` under fresh ids (a fork: the copy's session is newer than
    its messages, as OpenCode's fork writes it; with ``parent``, a subagent's session below
    it, as a ``task`` call writes one)."""
    new = _fresh("ses")
    (row,) = _rows(src, "SELECT * FROM session WHERE id = ?", (sid,))
    cols = [c[1] for c in src.execute("PRAGMA table_info(session)")]
    values = dict(zip(cols, row, strict=True))
    values["id"], values["parent_id"] = new, parent
    if fork_of_time is not None:
        values["time_created"] = fork_of_time
    dst.execute(
        f"INSERT INTO session ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        [values[c] for c in cols],
    )
    ids: dict[str, str] = {}
    for mid, created, updated, data in _rows(
        src, "SELECT id, time_created, time_updated, data FROM message WHERE session_id = ?", (sid,)
    ):
        ids[mid] = _fresh("msg")
        dst.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (ids[mid], new, created, updated, data),
        )
    for _pid, mid, created, updated, data in _rows(
        src,
        "SELECT id, message_id, time_created, time_updated, data FROM part WHERE session_id = ?",
        (sid,),
    ):
        if mid in ids:
            dst.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (_fresh("prt"), ids[mid], new, created, updated, data),
            )
    if logged:
        _log(dst, new, "session.created.1")
    return new


def _remove_reply(conn: sqlite3.Connection, session: str) -> None:
    """Delete a session's first reply and its parts, as OpenCode logs a removal."""
    (reply,) = conn.execute(
        "SELECT id FROM message WHERE session_id = ? AND data LIKE '%\"assistant\"%'",
        (session,),
    ).fetchone()
    conn.execute("DELETE FROM part WHERE message_id = ?", (reply,))
    conn.execute("DELETE FROM message WHERE id = ?", (reply,))
    _log(conn, session, "message.removed.1")


def _add_message(conn: sqlite3.Connection, sid: str, at: int, data: Any) -> str:
    """A message row of ``sid`` created (and updated) at ``at``, holding ``data``: its id."""
    mid = _fresh("msg")
    conn.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) "
        "VALUES (?, ?, ?, ?, ?)",
        (mid, sid, at, at, data),
    )
    return mid


def _newest_message(conn: sqlite3.Connection, sid: str) -> tuple[str, int, Any]:
    """(id, time_created, data) of the newest message of ``sid``."""
    return conn.execute(
        "SELECT id, time_created, data FROM message WHERE session_id = ? "
        "ORDER BY time_created DESC LIMIT 1",
        (sid,),
    ).fetchone()


def _log(conn: sqlite3.Connection, sid: str, kind: str) -> None:
    """What OpenCode writes beside every change: an event, and the session's sequence."""
    row = conn.execute("SELECT seq FROM event_sequence WHERE aggregate_id = ?", (sid,)).fetchone()
    seq = (row[0] if row else 0) + 1
    conn.execute(
        "INSERT INTO event_sequence (aggregate_id, seq) VALUES (?, ?) "
        "ON CONFLICT(aggregate_id) DO UPDATE SET seq = excluded.seq",
        (sid, seq),
    )
    conn.execute(
        "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, '{}')",
        (_fresh("evt"), sid, seq, kind),
    )


def _sessions(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in _rows(conn, "SELECT id FROM session ORDER BY id")]


def _logged(conn: sqlite3.Connection, sid: str) -> bool:
    return bool(_rows(conn, "SELECT 1 FROM event_sequence WHERE aggregate_id = ?", (sid,)))


def _picked_message(conn: sqlite3.Connection, sid: str, pick: int) -> tuple[str, object] | None:
    """The ``pick``-th message of session ``sid`` (wrapping round): its id and its decoded
    data; None when the session has none."""
    messages = _rows(conn, "SELECT id, data FROM message WHERE session_id = ?", (sid,))
    if not messages:
        return None
    mid, data = messages[pick % len(messages)]
    return mid, msgspec.json.decode(data)


def _change(db: Path, step: tuple, sources: dict[str, sqlite3.Connection], spare: Path) -> None:
    """Apply one drawn change to the database at ``db``."""
    kind, logged, pick, source = step
    if kind == "swap":  # another database moved over this one (a restored backup …)
        shutil.copyfile(SAMPLES / source / "opencode.db", spare)
        os.replace(spare, db)
        return
    conn = sqlite3.connect(db)
    src = sources[source]
    sessions = _sessions(conn)
    # Another program writes to sessions OpenCode does not log; OpenCode to any.
    mine = [s for s in sessions if logged or not _logged(conn, s)]
    target = mine[pick % len(mine)] if mine else None
    if kind in ("new_session", "new_child") or target is None:
        src_sid = _sessions(src)[pick % len(_sessions(src))]
        parent = target if kind == "new_child" else None
        new = _copy_session(conn, src, src_sid, logged=logged, parent=parent)
        if not logged:
            conn.execute("DELETE FROM event_sequence WHERE aggregate_id = ?", (new,))
    elif kind == "fork":
        (created,) = conn.execute(
            "SELECT max(time_created) FROM message WHERE session_id = ?", (target,)
        ).fetchone()
        new = _copy_session(conn, conn, target, logged=logged, fork_of_time=(created or 0) + 1)
        if not logged:
            conn.execute("DELETE FROM event_sequence WHERE aggregate_id = ?", (new,))
    elif kind == "new_message":
        rows = _rows(src, "SELECT id, time_created, time_updated, data FROM message ORDER BY rowid")
        mid, created, updated, data = rows[pick % len(rows)]
        new_mid = _fresh("msg")
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (new_mid, target, created, updated, data),
        )
        for _pid, pcreated, pupdated, pdata in _rows(
            src,
            "SELECT id, time_created, time_updated, data FROM part WHERE message_id = ?",
            (mid,),
        ):
            conn.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (_fresh("prt"), new_mid, target, pcreated, pupdated, pdata),
            )
        if logged:
            _log(conn, target, "message.updated.1")
    elif kind == "update_part":
        parts = _rows(conn, "SELECT id, data FROM part WHERE session_id = ?", (target,))
        if parts:
            pid, data = parts[pick % len(parts)]
            text = data if isinstance(data, str) else data.decode()
            changed = text.replace('"completed"', '"error"', 1)
            if changed == text:
                changed = text.replace('"type":"text"', '"type":"tool","tool":"bash"', 1)
            conn.execute("UPDATE part SET data = ? WHERE id = ?", (changed, pid))
            if logged:
                _log(conn, target, "message.part.updated.1")
    elif kind == "update_message":
        picked = _picked_message(conn, target, pick)
        if picked:
            mid, value = picked
            if isinstance(value, dict):
                value["cost"] = (value.get("cost") or 0) + 0.125
                tokens = value.get("tokens")
                if isinstance(tokens, dict):
                    tokens["output"] = (tokens.get("output") or 0) + 7
                value["time"] = {"created": (value.get("time") or {}).get("created", 0)}
            conn.execute(
                "UPDATE message SET data = ? WHERE id = ?", (msgspec.json.encode(value), mid)
            )
            if isinstance(value, dict):  # and the session's totals, as OpenCode keeps them
                conn.execute(
                    "UPDATE session SET cost = cost + 0.125, tokens_output = tokens_output + 7 "
                    "WHERE id = ?",
                    (target,),
                )
            if logged:
                _log(conn, target, "message.updated.1")
    elif kind == "migrate":  # an OpenCode upgrade's migration: rows rewritten, no event
        picked = _picked_message(conn, target, pick)
        if picked:
            mid, value = picked
            if isinstance(value, dict):
                value["cost"] = (value.get("cost") or 0) + 0.5
                conn.execute(
                    "UPDATE message SET data = ? WHERE id = ?", (msgspec.json.encode(value), mid)
                )
        conn.execute(
            "INSERT INTO migration (id, time_completed) VALUES (?, ?)", (_fresh("mig"), pick)
        )
    elif kind == "delete_message":
        messages = _rows(conn, "SELECT id FROM message WHERE session_id = ?", (target,))
        if messages:
            (mid,) = messages[pick % len(messages)]
            conn.execute("DELETE FROM part WHERE message_id = ?", (mid,))
            conn.execute("DELETE FROM message WHERE id = ?", (mid,))
            if logged:
                _log(conn, target, "message.removed.1")
    elif kind == "revert":  # /undo: OpenCode sets the column and logs session.updated
        messages = _rows(
            conn, "SELECT id FROM message WHERE session_id = ? ORDER BY time_created, id", (target,)
        )
        if messages:
            (mid,) = messages[pick % len(messages)]
            point = {"messageID": mid, "snapshot": "3cbc3f51", "diff": ""}
            conn.execute(
                "UPDATE session SET revert = ?, time_updated = time_updated + 1 WHERE id = ?",
                (msgspec.json.encode(point).decode(), target),
            )
            if logged:
                _log(conn, target, "session.updated.1")
    elif kind == "unrevert":  # /redo of everything: the column cleared, session.updated
        conn.execute(
            "UPDATE session SET revert = NULL, time_updated = time_updated + 1 WHERE id = ?",
            (target,),
        )
        if logged:
            _log(conn, target, "session.updated.1")
    elif kind == "delete_session":
        conn.execute("DELETE FROM part WHERE session_id = ?", (target,))
        conn.execute("DELETE FROM message WHERE session_id = ?", (target,))
        conn.execute("DELETE FROM session WHERE id = ?", (target,))
        conn.execute("DELETE FROM event WHERE aggregate_id = ?", (target,))
        conn.execute("DELETE FROM event_sequence WHERE aggregate_id = ?", (target,))
    conn.commit()
    conn.close()


def _middle_time(share: float = 0.5) -> int:
    """A time amid the captures' messages (``share`` of them before it): a --since or
    --until that cuts the test database's sessions into some wholly before, some wholly
    after and some across it."""
    times = []
    for name in SOURCES:
        conn = sqlite3.connect(f"file:{SAMPLES / name / 'opencode.db'}?immutable=1", uri=True)
        times += [t for (t,) in conn.execute("SELECT time_created FROM message")]
        conn.close()
    times.sort()
    return times[int(len(times) * share)]


SINCE = _middle_time()
EARLIER = _middle_time(0.25)
REPORTS = (
    ("sessions", {"all_sessions": True}),
    ("sessions", {}),
    ("sessions", {"limit": 2}),
    ("sessions", {"all_sessions": True, "fold": False}),
    ("usage", {"all_sessions": True, "by": "turn", "fold": False}),
    ("usage", {"all_sessions": True, "by": "turn"}),  # brought up to date, family by family
    ("usage", {"all_sessions": True, "by": "day"}),
    ("usage", {"all_sessions": True, "by": "session"}),
    ("usage", {"all_sessions": True, "by": "model"}),
    ("usage", {"all_sessions": True, "by": "agent"}),
    ("usage", {"all_sessions": True, "by": "week"}),
    ("usage", {"all_sessions": True, "by": "project"}),
    ("usage", {"all_sessions": True, "by": "step"}),
    ("usage", {"all_sessions": True, "by": "day", "since_ms": SINCE}),
    ("usage", {"all_sessions": True, "by": "model", "since_ms": SINCE}),
    ("usage", {"last": True, "by": "turn"}),
    ("usage", {"all_sessions": True, "by": "day", "until_ms": SINCE}),
    ("usage", {"all_sessions": True, "by": "session", "since_ms": EARLIER, "until_ms": SINCE}),
    ("usage", {"all_sessions": True, "by": "turn", "until_ms": SINCE}),
    ("usage", {"until_ms": SINCE, "by": "model"}),
    ("sessions", {"until_ms": SINCE}),
    ("context", {}),
    ("sessions as json", {"all_sessions": True}),  # as the command writes it (renditions)
    ("sessions as json", {"fold": False}),  # made and written a session at a time
    ("sessions as jsonl", {"all_sessions": True}),  # its rendition beside the JSON's
    ("sessions as csv", {"since_ms": SINCE}),
    ("usage as jsonl", {"all_sessions": True, "by": "step"}),  # with notes apart
    ("usage as json", {"all_sessions": True, "by": "turn"}),  # written a session at a time
    ("usage as csv", {"all_sessions": True, "by": "turn", "fold": False}),
    ("usage as json", {"by": "model", "until_ms": SINCE}),
)
EVERY_DAY = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))  # asked every step
EVERY_TURN = REPORTS.index(("usage", {"all_sessions": True, "by": "turn"}))  # and these two
EVERY_STEP = REPORTS.index(("usage", {"all_sessions": True, "by": "step"}))


RENDER = {
    "json": lambda summaries: rows.json_list_pieces(summaries),
    "jsonl": lambda summaries: rows.jsonl_pieces(summaries),
    "csv": lambda summaries: rows.write_csv(rows.to_builtins(summaries), SESSION_COLUMNS),
}
LISTED = {"json": rows.JSON_LIST, "jsonl": rows.JSON_LINES}  # as the command writes them


def _written(store, form: str, cache: ReportCache | None, **options) -> bytes:
    """What ``sessions --format FORM`` writes (``write_sessions``, as the command calls it:
    JSON and JSON Lines a session at a time, saying where each lies)."""
    out = io.BytesIO()
    listed = LISTED.get(form)
    write_sessions(
        store,
        form,
        RENDER[form],
        out,
        cache=cache,
        each=listed is not None,
        listed=listed,
        **options,
    )
    return out.getvalue()


def _usage_written(store, fmt: str, cache: ReportCache | None, **options) -> bytes:
    """What ``usage --format FMT`` writes (``write_stored_usage``): its bytes, then the
    notes it says on stderr."""
    out, said = io.BytesIO(), []
    apart = said.extend if fmt in NOTES_APART else None
    render = functools.partial(usage_pieces, fmt=fmt)
    write_stored_usage(store, fmt, render, out, cache=cache, apart=apart, **options)
    return out.getvalue() + b"".join(f"\nnote: {text}".encode() for text in said)


def _report(db: Path, which: int, cache_root: Path | None) -> bytes:
    """The report's JSON, or its one error (a database left with no session to report)."""
    try:
        return _report_or_raise(db, which, cache_root)
    except InputError as exc:
        return f"error: {exc}".encode()


def _report_or_raise(db: Path, which: int, cache_root: Path | None) -> bytes:
    kind, options = REPORTS[which]
    with open_store(db) as store:
        cache = None if cache_root is None else ReportCache.open(store, root=cache_root)
        if kind.startswith("sessions as "):
            form = kind.removeprefix("sessions as ")
            return _written(store, form, cache, **options)
        if kind.startswith("usage as "):
            return _usage_written(store, kind.removeprefix("usage as "), cache, **options)
        if kind == "sessions":
            report = sessions_report(store, cache=cache, **options)
            return msgspec.json.encode(report.document())
        if kind == "context":
            (newest,) = select_sessions(store, [])[:1]
            return msgspec.json.encode(context_report(store, newest, cache=cache).document())
        return msgspec.json.encode(stored_usage(store, cache=cache, **options).document())


CHANGES = st.tuples(
    st.sampled_from(
        [
            "new_session",
            "new_child",
            "new_message",
            "update_part",
            "update_message",
            "delete_message",
            "delete_session",
            "fork",
            "swap",
            "revert",
            "unrevert",
            "migrate",
        ]
    ),
    st.booleans(),  # written by OpenCode (its log moves) or by another program
    st.integers(0, 1000),
    st.sampled_from(SOURCES),
)
STEPS = st.lists(
    st.tuples(
        st.lists(CHANGES, max_size=3), st.lists(st.integers(0, len(REPORTS) - 1), max_size=3)
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("whole_table", [None, 3], ids=["few sessions", "whole tables"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(STEPS)
def test_every_report_equals_a_recomputation(
    tmp_path_factory, monkeypatch, whole_table, steps
) -> None:
    # Every ledger that may be kept aside is (by a forked child, ``ReportCache.aside``), as
    # on a large database: the next step reads what the child wrote.
    monkeypatch.setattr(report_cache, "ASIDE_ENTRIES", 0)
    if whole_table is not None:  # as on a large database: the whole tables are read
        monkeypatch.setattr(sessions_module, "WHOLE_TABLE_SESSIONS", whole_table)
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", whole_table)
        # and the steps set aside in sorted runs of a few, merged a few at a time
        monkeypatch.setattr(usage_module, "_STEP_RUN", 3)
        monkeypatch.setattr(report_cache, "_PIECE", 256)  # ledgers in groups of a few entries
        monkeypatch.setattr(runs_module, "FAN_IN", 2)
        monkeypatch.setattr(runs_module, "GROUP", 2)
        # and a helper makes most summaries of every session, in rounds of a few
        monkeypatch.setattr(beside, "MIN_JOBS", 0)
        monkeypatch.setattr(beside, "HERE", 1)
        monkeypatch.setattr(beside, "THERE", 2)
    tmp = tmp_path_factory.mktemp("cache")
    db, spare, root = tmp / "opencode.db", tmp / "spare.db", tmp / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)  # a session of each capture: times on both sides of SINCE
    for src in sources.values():
        _copy_session(conn, src, _sessions(src)[0], logged=True)
    conn.commit()
    conn.close()
    try:
        for changes, reports in steps:
            # One writer per step: OpenCode's logged writes, or another program's.
            logged = changes[0][1] if changes else True
            for kind, _logged, pick, source in changes:
                _change(db, (kind, logged, pick, source), sources, spare)
            before = _digest(db)
            for which in [*reports, 0, EVERY_DAY, EVERY_TURN, EVERY_STEP]:
                cached = _report(db, which, root)
                with monkeypatch.context() as alone:  # every summary made in one process
                    alone.setattr(beside, "MIN_JOBS", 10**9)
                    assert cached == _report(db, which, None), REPORTS[which]
                if whole_table is not None and REPORTS[which][1].get("by") == "step":
                    with monkeypatch.context() as held:  # every step held, sorted at once
                        held.setattr(usage_module, "_STEP_RUN", 10**9)
                        assert _report(db, which, None) == cached, REPORTS[which]
                assert _report(db, which, root) == cached  # the repeat, from the memo
                memos = {memo: memo.read_bytes() for memo in root.rglob("memo-*")}
                for memo in memos:  # and from the ledgers alone
                    memo.unlink()
                assert _report(db, which, root) == cached
                for memo, data in memos.items():  # the other reports' memos back: the next
                    if not memo.exists():  # step brings them up to date
                        memo.write_bytes(data)
            assert _digest(db) == before  # nothing a report does writes the database
    finally:
        for conn in sources.values():
            conn.close()


# A grouped ``usage`` of every session or of some (1 to 4 top-level sessions, by index),
# all time or since SINCE, folded or not.
CHOSEN = st.tuples(
    st.sampled_from(["day", "session", "model", "agent", "week", "month", "project"]),
    st.lists(st.integers(0, 1000), max_size=4),  # none: every session
    st.booleans(),  # since SINCE
    st.booleans(),  # folded
)
# The changes above, and writes only another program makes: a message older than its
# session (a copy at a time of its own), a session moved in time, a fork of a fork, a row
# that is no message.
FORK_CHANGES = st.tuples(
    st.sampled_from(
        ["fork", "fork_of_fork", "copy_elsewhere", "copy_of_copy", "retime", "garbage"]
        + ["new_message"]
        + ["delete_session", "delete_message", "update_message", "new_session", "new_child"]
    ),
    st.booleans(),
    st.integers(0, 1000),
    st.sampled_from(SOURCES),
)


def _chosen(db: Path, chosen: tuple, cache_root: Path | None) -> bytes:
    by, picks, since, fold = chosen
    conn = sqlite3.connect(db)
    try:
        tops = [sid for (sid,) in _rows(conn, _TOP_LEVEL)]
    finally:
        conn.close()
    options: dict[str, Any] = {"by": by, "fold": fold}
    if picks and tops:
        options["session_ids"] = sorted({tops[pick % len(tops)] for pick in picks})
    else:
        options["all_sessions"] = True
    if since:
        options["since_ms"] = SINCE
    try:
        return _usage_json(db, cache_root, **options)
    except InputError as exc:
        return f"error: {exc}".encode()


def _usage_json(db: Path, cache_root: Path | None, **options: Any) -> bytes:
    """``stored_usage`` of ``db`` with ``options``, as JSON (with the cache at ``cache_root``)."""
    with open_store(db) as store:
        cache = None if cache_root is None else ReportCache.open(store, root=cache_root)
        return msgspec.json.encode(stored_usage(store, cache=cache, **options).document())


_TOP_LEVEL = "SELECT id FROM session WHERE parent_id IS NULL ORDER BY id"
_FORKS_SQL = (
    "SELECT s.id FROM session s WHERE EXISTS (SELECT 1 FROM message m "
    "WHERE m.session_id = s.id AND m.time_created < s.time_created)"
)


def _fork_change(db: Path, change: tuple, sources: dict, spare: Path) -> None:
    """``_change``, or one of the writes only another program makes (``FORK_CHANGES``)."""
    kind, logged, pick, _source = change
    if kind not in ("copy_elsewhere", "copy_of_copy", "retime", "garbage", "fork_of_fork"):
        _change(db, change, sources, spare)
        return
    conn = sqlite3.connect(db)
    try:
        ids = [sid for (sid,) in _rows(conn, "SELECT id FROM session ORDER BY id")]
        if not ids:
            return
        sid: str | None = ids[pick % len(ids)]
        if kind == "garbage":
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                'VALUES (?, ?, 5, 5, \'{"role":"weird"}\')',
                (_fresh("msg"), sid),
            )
        elif kind == "retime":
            conn.execute(
                "UPDATE session SET time_created = time_created + 100000000 WHERE id = ?", (sid,)
            )
        elif kind in ("copy_elsewhere", "copy_of_copy"):  # older than this session: a reply's
            # content, or a fork's copy's (its original then has a copy at a time of its own)
            found = _rows(
                conn,
                "SELECT m.data FROM message m JOIN session s ON s.id = m.session_id "
                "WHERE m.data LIKE '%\"assistant\"%' "
                + ("AND m.time_created < s.time_created " if kind == "copy_of_copy" else "")
                + "ORDER BY m.id LIMIT 1 OFFSET ?",
                (pick % 5,),
            )
            ((started,),) = _rows(conn, "SELECT time_created FROM session WHERE id = ?", (sid,))
            if found:
                _add_message(conn, sid, started - 1000, found[0][0])
        else:
            forks = [fork for (fork,) in _rows(conn, _FORKS_SQL)]
            if forks:
                target = forks[pick % len(forks)]
                ((last,),) = _rows(
                    conn, "SELECT max(time_created) FROM message WHERE session_id = ?", (target,)
                )
                _copy_session(conn, conn, target, logged=logged, fork_of_time=(last or 0) + 1)
            sid = None
        if logged and sid is not None:
            _log(conn, sid, "message.updated.1")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("whole_table", [None, 3], ids=["few sessions", "whole tables"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.lists(FORK_CHANGES, max_size=3), st.lists(CHOSEN, min_size=1, max_size=4)),
        min_size=1,
        max_size=6,
    )
)
def test_reports_of_some_sessions_between_forks_equal_a_recomputation(
    tmp_path_factory, monkeypatch, whole_table, steps
) -> None:
    """Grouped ``usage`` of some sessions and of all, in any order, each time the one a
    full reading gives, while forks, forks of forks, copies another program wrote at
    times of their own and moved sessions come and go: a ledger one report kept is
    brought up to date by another. (The case a review found, a report of two sessions
    that missed a fork outside them, is rarer than these draw: 300 examples did not meet
    it; ``test_a_fork_outside_the_sessions_chosen_still_tells_the_originals`` pins it.)"""
    monkeypatch.setattr(report_cache, "ASIDE_ENTRIES", 0)
    if whole_table is not None:
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", whole_table)
        monkeypatch.setattr(report_cache, "_PIECE", 256)
    tmp = tmp_path_factory.mktemp("chosen")
    db, root, sources = _a_session_of_each_capture(tmp, "fork")
    spare = tmp / "spare.db"
    try:
        for changes, reports in steps:
            logged = changes[0][1] if changes else True  # one writer per step
            for kind, _logged, pick, source in changes:
                _fork_change(db, (kind, logged, pick, source), sources, spare)
            for chosen in [*reports, ("day", [], False, True)]:
                assert _chosen(db, chosen, root) == _chosen(db, chosen, None), chosen
    finally:
        for conn in sources.values():
            conn.close()


ODDITIES = st.tuples(
    st.sampled_from(["loop", "orphan", "self", "relink", "in_flight"]), st.integers(0, 1000)
)


def _odd(db: Path, kind: str, pick: int) -> None:
    """Make the database odd in one way OpenCode never writes (parent links), or in one it
    does (a reply in flight)."""
    conn = sqlite3.connect(db)
    ids = [sid for (sid,) in _rows(conn, "SELECT id FROM session ORDER BY id")] or ["none"]
    one, other = ids[pick % len(ids)], ids[(pick // 7 + 1) % len(ids)]
    if kind == "loop":
        conn.execute("UPDATE session SET parent_id = ? WHERE id = ?", (other, one))
        conn.execute("UPDATE session SET parent_id = ? WHERE id = ?", (one, other))
    elif kind == "orphan":
        conn.execute("UPDATE session SET parent_id = 'ses_gone' WHERE id = ?", (one,))
    elif kind == "self":
        conn.execute("UPDATE session SET parent_id = id WHERE id = ?", (one,))
    elif kind == "relink":
        conn.execute("UPDATE session SET parent_id = ? WHERE id = ?", (other, one))
    else:
        replies = _rows(conn, "SELECT rowid FROM message WHERE data LIKE '%\"assistant\"%'")
        if replies:
            conn.execute(
                "UPDATE message SET data = json_remove(data, '$.time.completed') WHERE rowid = ?",
                replies[pick % len(replies)],
            )
    conn.commit()
    conn.close()


def _odd_database(tmp: Path, changes: list[Any], oddities: list[Any]) -> Path:
    """samples/task with a session of each capture copied in, ``changes`` made to it (as
    ``CHANGES`` draws them), then ``oddities`` (``ODDITIES``)."""
    db, spare = tmp / "opencode.db", tmp / "spare.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    try:
        conn = sqlite3.connect(db)
        for src in sources.values():
            _copy_session(conn, src, _sessions(src)[0], logged=True)
        conn.commit()
        conn.close()
        for change in changes:
            _change(db, change, sources, spare)
        for kind, pick in oddities:
            _odd(db, kind, pick)
    finally:
        for conn in sources.values():
            conn.close()
    return db


@pytest.mark.parametrize("whole_table", [None, 3], ids=["few sessions", "whole tables"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(CHANGES, max_size=4), st.lists(ODDITIES, max_size=3), st.booleans())
def test_every_session_made_one_at_a_time_is_what_summarize_gives(
    tmp_path_factory, monkeypatch, whole_table, changes, oddities, busy
) -> None:
    """A report of every session made a session at a time (``each_summary``, which holds
    only counts and the subagents' own figures) gives the summaries ``summarize`` gives of
    the same rows held at once: top-level or all, folded or not, with subagents, forks,
    undone replies, MCP calls, replies in flight and parent links that loop, point at
    themselves or at no session."""
    if whole_table is not None:
        monkeypatch.setattr(sessions_module, "WHOLE_TABLE_SESSIONS", whole_table)
    db = _odd_database(tmp_path_factory.mktemp("each"), changes, oddities)
    servers = ("my-tools", "other")  # the mcp capture's server, and one never called
    with open_store(db) as store:
        latest = max((row.time_updated for row in store.sessions()), default=0)
        now = latest + (1000 if busy else 10**9)  # a reply in flight: busy, or stale
        for all_sessions, fold in itertools.product((True, False), (True, False)):
            made = sessions_module.each_summary(
                store,
                all_sessions=all_sessions,
                fold=fold,
                mcp_servers=lambda directory: servers,
                now_ms=now,
            )
            listed = sessions_module.summarize(
                store,
                store.sessions(top_level=not all_sessions),
                fold=fold,
                mcp_servers=lambda directory: servers,
                now_ms=now,
            )
            assert msgspec.to_builtins(list(made)) == msgspec.to_builtins(listed)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(CHANGES, max_size=4), st.lists(ODDITIES, max_size=3), st.booleans(), st.booleans())
def test_turns_read_by_workers_are_those_read_in_one_process(
    tmp_path_factory, monkeypatch, changes, oddities, windowed, orphan
) -> None:
    """``usage --all`` by turn with its sessions read by forked workers, a slice each
    (``_family_slice``), gives the report one process gives: the same rows in the same
    order, the same notes in the same order (subagents listed apart, with no turn to fold
    into or not folded, read after every slice), folded or not, all time or since a time,
    with forks, undone replies, replies in flight and parent links that loop or point at
    no session."""
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_SESSIONS", 2)
    db = _odd_database(tmp_path_factory.mktemp("turns"), changes, oddities)
    conn = sqlite3.connect(db)
    first = conn.execute("SELECT id FROM session ORDER BY time_created LIMIT 1").fetchone()
    conn.close()
    if orphan and first is not None:  # a subagent whose parent has no turn to fold it into
        conn = sqlite3.connect(db)  # (listed apart); none where every session was deleted
        empty = conn.execute("SELECT * FROM session WHERE id = ?", first)
        row = dict(zip([c[0] for c in empty.description], empty.fetchone(), strict=True))
        row.update(id="ses_0empty", parent_id=None)
        conn.execute(
            f"INSERT INTO session ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
        last = conn.execute("SELECT id FROM session ORDER BY time_created DESC LIMIT 1")
        conn.execute("UPDATE session SET parent_id = 'ses_0empty' WHERE id = ?", last.fetchone())
        conn.commit()
        conn.close()
    sliced = []
    share = usage_module.share_slices
    monkeypatch.setattr(
        usage_module, "share_slices", lambda *a, **k: sliced.append(a[1]) or share(*a, **k)
    )
    since = SINCE if windowed else None
    for fold in (True, False):
        reports = []
        for workers in ("1", "2"):
            monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
            with open_store(db) as store:
                report = stored_usage(store, all_sessions=True, fold=fold, since_ms=since)
                tops = len(every_session(store, top_level=True))
            reports.append(msgspec.json.encode(report.document()))
        assert reports[0] == reports[1]
    assert sliced or tops < 2  # the workers' path was taken (with two sessions to share)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(CHANGES, max_size=4),
    st.lists(ODDITIES, max_size=3),
    st.sampled_from(["turn", "step"]),
    st.one_of(  # since, until or both, as shares of the database's message times
        st.tuples(st.floats(0, 1), st.none()),
        st.tuples(st.none(), st.floats(0, 1)),
        st.tuples(st.floats(0, 1), st.floats(0, 1)),
    ),
    st.booleans(),
    st.sampled_from(["1", "2"]),
)
def test_a_window_by_turn_or_step_is_made_a_row_at_a_time_as_it_was_held(
    tmp_path_factory, monkeypatch, changes, oddities, by, shares, fold, workers
) -> None:
    """``usage --since``/``--until`` by turn or step, no session named, is made a row at a
    time (never held, read by workers as every session is) and gives the report its
    sessions held whole gave (``store_usage`` of the sessions the window chose): the same
    rows, total and notes in the same order, folded or not, with forks, undone replies,
    replies in flight and parent links that loop or point at no session; and the same
    again from the cache, made and read back (its memo kept, no rendition: a window given
    as ``7d`` names another time on every run), as Markdown and as a table's last rows."""
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_SESSIONS", 2)
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
    db = _odd_database(tmp_path_factory.mktemp("window"), changes, oddities)
    root = tmp_path_factory.mktemp("cache")
    # the window's ends: the times of messages of this database, at the shares drawn
    conn = sqlite3.connect(db)
    times = sorted(t for (t,) in conn.execute("SELECT time_created FROM message") if t)
    conn.close()
    if not times:
        return
    since, until = (
        None if share is None else times[int(share * (len(times) - 1))] for share in shares
    )
    choices = {"by": by, "fold": fold, "since_ms": since, "until_ms": until}
    with open_store(db) as store:
        # those active since; with until, those of them begun by then (tests/test_until.py)
        ids = usage_module._window_sessions(store, since, until)
        held = store_usage(
            store, ids, cross_session=len(ids) > 1, **{**choices, "fold": fold}
        ).document()
        with monkeypatch.context() as patched:
            patched.setattr(usage_module._RowsAsMade, "whole", _never_whole)
            made = [_usage_written(store, "json", None, **choices)]
            cache = ReportCache.open(store, root=root)
            made += [_usage_written(store, "json", cache, **choices) for _ in range(2)]
            markdown = [_usage_written(store, "markdown", c, **choices) for c in (None, cache)]
            last = [stored_usage_last(store, 2, cache=c, **choices) for c in (None, cache)]
    whole = UsageReport(**_report_fields(held, by))
    assert made == [b"".join(usage_pieces(whole, "json"))] * 3
    assert markdown == [rows.report_markdown(whole)] * 2
    for report, count in last:
        assert (report.rows, count) == (whole.rows[-2:], len(whole.rows))
        assert (report.total, report.notes) == (whole.total, whole.notes)
    assert not list(root.glob("*/render-*"))  # a window's report keeps no rendition


def _never_whole(*_args):
    raise AssertionError("the report was held whole")


def _report_fields(document: dict[str, Any], by: str) -> dict[str, Any]:
    """A ``UsageReport``'s fields from its JSON document."""
    return {
        "by": by,
        "rows": [msgspec.convert(row, UsageRow) for row in document["rows"]],
        "total": msgspec.convert(document["total"], UsageRow),
        "notes": document.get("notes", []),
        "stored": True,
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(CHANGES, max_size=4),
    st.lists(ODDITIES, max_size=3),
    st.sampled_from([(None, None), (SINCE, None), (None, SINCE)]),
    st.integers(1, 4),
    st.integers(2, 3),
)
def test_steps_read_by_workers_are_those_read_in_one_process(
    tmp_path_factory, monkeypatch, changes, oddities, window, step_run, fan_in
) -> None:
    """``usage --all --by step`` with the message table read by forked workers, a range
    each, every range's steps set aside in sorted runs in one shared file and the runs
    adopted in range order (merged as they come), gives the report one process gives:
    the same rows in the same order, the same notes, all time or in a window, with forks,
    undone replies, replies in flight and parent links that loop or point at no
    session."""
    monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)  # the table read whole
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(usage_module, "_STEP_RUN", step_run)  # many runs a range
    monkeypatch.setattr(runs_module, "FAN_IN", fan_in)  # and many merged as they come
    monkeypatch.setattr(runs_module, "GROUP", 2)
    db = _odd_database(tmp_path_factory.mktemp("steps"), changes, oddities)
    shared = []

    def share(*args, **kwargs):
        pending = share_ranges(*args, **kwargs)
        shared.append(pending is not None)
        return pending

    monkeypatch.setattr(usage_module, "share_ranges", share)
    since, until = window
    choices = {"all_sessions": True, "by": "step", "since_ms": since, "until_ms": until}
    reports = []
    for workers in ("1", "2"):
        monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
        with open_store(db) as store:
            reports.append(_usage_written(store, "jsonl", None, **choices))
    assert reports[0] == reports[1]
    conn = sqlite3.connect(db)
    (sessions,) = conn.execute("SELECT count(*) FROM session").fetchone()
    conn.close()
    assert True in shared or not sessions  # the workers' path taken, where there is a session


def _warm(tmp_path: Path) -> tuple[Path, Path]:
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    for which in range(len(REPORTS)):
        _report(db, which, root)
    return db, root


def _expected(db: Path) -> list[bytes]:
    return [_report(db, which, None) for which in range(len(REPORTS))]


@pytest.mark.parametrize(
    "damage",
    ["truncated", "garbage", "empty", "other_version", "other_database", "folder_is_file"],
)
def test_a_damaged_or_foreign_cache_is_ignored_and_rebuilt(tmp_path, damage) -> None:
    db, root = _warm(tmp_path)
    expected = _expected(db)
    files = [f for f in root.rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        if damage == "truncated":
            f.write_bytes(data[: len(data) // 2])
        elif damage == "garbage":
            f.write_bytes(os.urandom(len(data)))
        elif damage == "empty":
            f.write_bytes(b"")
        elif damage == "other_version":
            f.write_bytes(data.replace(report_cache.__version__.encode(), b"9.9.9"))
        elif damage == "other_database":
            f.write_bytes(data.replace(str(db).encode(), str(tmp_path / "other.db").encode()))
    if damage == "folder_is_file":
        shutil.rmtree(root)
        root.write_bytes(b"not a folder")
    for which in range(len(REPORTS)):
        assert _report(db, which, root) == expected[which]
        assert _report(db, which, root) == expected[which]
    if damage != "folder_is_file":  # rebuilt: the files are readable again
        with open_store(db) as store:
            cache = ReportCache.open(store, root=root)
            assert cache.ledger("sessions", ["counts", 1], dict) != {} or True
            assert cache._read(next(root.rglob("memo-*")).name) is not None


LEDGER_REPORTS = [
    which
    for which, (kind, options) in enumerate(REPORTS)
    if kind == "usage" and options.get("by") not in ("turn", "step")
]


@contextlib.contextmanager
def _a_test_ledger(tmp_path: Path) -> Iterator[tuple[Any, ReportCache, list[str]]]:
    """samples/task's store, its cache, and its sessions' ids, with a ledger ``test`` kept
    of every session (each entry ``[sid, 7]``)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=tmp_path / "cache")
        sids = list(cache.stamps)
        cache.keep_ledger("test", [1], {sid: [sid, 7] for sid in sids})
        yield store, cache, sids


def _ledger_groups_decoded(monkeypatch) -> list[bytes]:
    """The bytes of each group of ledger entries decoded from here on, as it is decoded."""
    groups: list[bytes] = []
    real_decoded_group = report_cache._decoded_group

    def decoded_group(decoder, piece, *args):
        if decoder is report_cache._LEDGER_GROUP:
            groups.append(piece)
        return real_decoded_group(decoder, piece, *args)

    monkeypatch.setattr(report_cache, "_decoded_group", decoded_group)
    return groups


@pytest.mark.parametrize("held", [True, False], ids=["held", "large"])
@pytest.mark.parametrize("which", LEDGER_REPORTS, ids=[str(REPORTS[w][1]) for w in LEDGER_REPORTS])
def test_a_ledger_is_read_a_group_at_a_time_as_it_is_used(
    tmp_path, monkeypatch, which, held
) -> None:
    """A grouped report's ledger is written in groups of entries and read back a group at a
    time, never whole: with groups of an entry or two, a report from the ledger alone
    (forks, a window, a subagent) is the report without the cache, and no read of the
    ledger's file takes more than a group. A small ledger's groups are read once, as it is
    opened, and held; a large one's as often as the report needs them (which sessions it
    stands for, then their groups folded in)."""
    monkeypatch.setattr(report_cache, "_PIECE", 64)  # a group per entry or two
    if not held:
        monkeypatch.setattr(report_cache, "_HELD_LEDGER", 0)
    changes = [("fork", True, 3, "fork"), ("new_child", True, 5, "task")]
    db = _odd_database(tmp_path, changes, [])
    root = tmp_path / "cache"
    options = REPORTS[which][1]
    expected = _report(db, which, None)
    with open_store(db) as store:  # the ledger, of every session at all times
        cache = ReportCache.open(store, root=root)
        stored_usage(store, cache=cache, all_sessions=True, by=options["by"])
    for memo in root.rglob("memo-*"):
        memo.unlink()
    ledgers = list(root.rglob("ledger-*"))
    reads: list[int] = []
    real_read_at = report_cache.read_at

    def read_at(fd: int, length: int, at: int, what: str) -> bytes:
        if what == "a ledger":
            reads.append(length)
        return real_read_at(fd, length, at, what)

    monkeypatch.setattr(report_cache, "read_at", read_at)
    groups = _ledger_groups_decoded(monkeypatch)
    monkeypatch.setattr(ReportCache, "ledger", lambda *_a: pytest.fail("a ledger decoded whole"))
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        document = msgspec.json.encode(
            stored_usage(store, cache=cache, **REPORTS[which][1]).document()
        )
        assert cache.hits > 1  # from the ledger
    assert document == expected
    largest = max(f.stat().st_size for f in ledgers)
    assert reads and max(reads) < largest // 4  # its groups, never the whole file
    assert len(groups) == len(set(groups)) if held else len(groups) > len(set(groups))


def test_the_ledgers_groups_are_let_go_as_the_rows_are_made(tmp_path, monkeypatch) -> None:
    """A report by session from the ledger folds every session's group out of what the
    ledger gave (``_folder``) as the rows are made, keeping none of them: at 100,000
    sessions the groups left behind held 20 MB past the rows (peak RSS 200 → 181 MB)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    root = tmp_path / "cache"
    which, expected, _ledger = _by_session_from_its_ledger(db, root)
    folded: list[tuple[int, dict]] = []
    real_fold_days = usage_module._fold_days

    def fold_days(groups: dict, label: Any, kept: dict) -> dict:
        given = len(kept)
        result = real_fold_days(groups, label, kept)
        folded.append((given, kept))
        return result

    monkeypatch.setattr(usage_module, "_fold_days", fold_days)
    assert _report(db, which, root) == expected
    ((given, kept),) = folded
    assert given > 0  # the rows came from the ledger
    assert kept == {}  # and it holds none of their groups


@pytest.mark.parametrize("held", [True, False], ids=["held", "large"])
def test_a_ledger_damaged_in_its_entries_is_ignored_and_one_changed_while_read_an_error(
    tmp_path, monkeypatch, held
) -> None:
    """A ledger whose head and groups are sound but whose entries are not is not trusted
    (nothing is kept from it). One changed in place after it was opened, which no run of
    ours does, is one error when its entries are read again, and it is let go; a small
    one's entries are held as they were read when it was opened, and the change is not
    seen."""
    if not held:
        monkeypatch.setattr(report_cache, "_HELD_LEDGER", 0)
    with _a_test_ledger(tmp_path) as (_store, cache, sids):
        (ledger,) = cache.folder.glob("ledger-*")
        entries = cache.ledger_entries("test", [1])
        assert entries.count == len(sids)
        assert [msgspec.msgpack.decode(e) for _sid, e in entries.each()] == [[s, 7] for s in sids]
        data = bytearray(ledger.read_bytes())
        at = data.index(sids[0].encode())
        data[at - 1 : at + len(sids[0])] = b"\xc1" * (len(sids[0]) + 1)  # never valid msgpack
        ledger.write_bytes(bytes(data))  # in place: the open file sees it
        if held:
            assert [msgspec.msgpack.decode(e) for _sid, e in entries.each()] == [
                [s, 7] for s in sids
            ]
        else:
            with pytest.raises(InputError, match="damaged while read"):
                list(entries.each())
            assert not ledger.exists()
        entries.close()
        cache.keep_ledger("test", [1], {sid: [sid, 7] for sid in sids})
        (ledger,) = cache.folder.glob("ledger-*")
        ledger.write_bytes(bytes(data))  # damaged before it is opened: not trusted
        assert cache.ledger_entries("test", [1]).count == 0
        assert cache.ledger("test", [1], list) == {}


def test_a_ledger_decoded_whole_is_not_held_as_it_is_opened(tmp_path, monkeypatch) -> None:
    """A ledger decoded whole (``ReportCache.ledger``: ``sessions``, ``context``, the undo
    ledger) is read a group at a time as it is opened and again as it is decoded: holding
    the first pass's groups would double its peak (a review measured 35 → 52 MB for the
    ``sessions`` ledger of 100,000 sessions), for a pass it does not need."""
    monkeypatch.setattr(report_cache, "_PIECE", 64)  # a group per entry or two
    with _a_test_ledger(tmp_path) as (store, _cache, sids):
        groups = _ledger_groups_decoded(monkeypatch)
        again = ReportCache.open(store, root=tmp_path / "cache")
        assert again.ledger("test", [1], list) == {sid: [sid, 7] for sid in sids}
    assert len(set(groups)) > 1 and all(groups.count(group) == 2 for group in groups)


@pytest.mark.parametrize(
    "craft", ["not an entry", "no span", "a held row of nulls", "a session twice"]
)
def test_a_ledger_entry_written_wrong_on_purpose_is_let_go_not_a_traceback(tmp_path, craft) -> None:
    """A ledger whose groups sum right but whose entries are not what a report writes (only
    a file made so on purpose: damage changes a group's sum) is never a traceback. Found
    while the report decides which sessions to read and folds in those it uses (an entry
    or its span that does not decode, a figure of another type: a held row of nulls), it
    is let go and every session read: the report without the cache. (The figures were
    once folded in after the changed sessions were read, and a held row of nulls was one
    error then.)"""
    db = _odd_database(tmp_path, [("fork", True, 3, "fork")], [])
    root = tmp_path / "cache"
    which, expected, ledger = _by_session_from_its_ledger(db, root)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        request = _ledger_request(ledger)
        entries = cache.ledger_entries("usage-days", request)
        kept = {sid: msgspec.msgpack.decode(entry) for sid, entry in entries.each()}
        entries.close()
        assert kept
        sid = next(iter(kept))
        twice = []
        if craft == "not an entry":
            kept[sid] = 1
        elif craft == "no span":
            kept[sid][0] = None
        elif craft == "a session twice":  # its figures counted twice, if it were trusted
            twice = [(sid, kept[sid])]
        else:
            kept[sid][2] = [["msg_x", "2026-11-29", b"", [None] * 10]]
        cache.keep_ledger("usage-days", request, [*kept.items(), *twice])
    assert _report(db, which, root) == expected
    assert _report(db, which, root) == expected  # and again, from what it kept instead


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.floats(0, 1, exclude_max=True), st.integers(1, 255))
def test_any_byte_of_a_ledger_changed_is_never_trusted(tmp_path_factory, where, change) -> None:
    """Any one byte of a grouped report's ledger changed (its head, an entry, the groups'
    counts, lengths and sums): the report from it is the report without the cache."""
    tmp = tmp_path_factory.mktemp("flip")
    db = tmp / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    root = tmp / "cache"
    which, expected, ledger = _by_session_from_its_ledger(db, root)
    data = bytearray(ledger.read_bytes())
    at = int(where * len(data))
    data[at] ^= change
    ledger.write_bytes(bytes(data))
    assert _report(db, which, root) == expected


# Kept reports whose files a byte is changed in: a memo decoded whole (and its type's own
# checks: a report by day whose ``by`` is no grouping raised KeyError), a memo spooled row
# by row and read a group at a time, and a rendition copied out as it is.
_KEPT_DAMAGED = {
    "memo": ("usage", {"all_sessions": True, "by": "day"}),
    "spooled memo": ("usage", {"all_sessions": True, "by": "turn"}),
    "rendition": ("sessions as json", {"all_sessions": True}),
}


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(sorted(_KEPT_DAMAGED)), st.floats(0, 1, exclude_max=True), st.integers(1, 255)
)
def test_any_byte_of_a_kept_report_changed_is_never_trusted(tmp_path_factory, what, where, change):
    """Any one byte of a memo or a rendition changed (its head, its request, the report's
    bytes): the report from the cache is the report without it, never a traceback, never
    an error. A spooled memo, read a group at a time as its rows go out, has every group
    summed before the first goes (it said ``run again`` part-way through the report, whose
    CSV could look whole, until a review found it)."""
    tmp = tmp_path_factory.mktemp("kept")
    db = tmp / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    root = tmp / "cache"
    which = REPORTS.index(_KEPT_DAMAGED[what])
    expected = _report(db, which, None)
    assert _report(db, which, root) == expected
    prefix = "render-" if what == "rendition" else "memo-"
    kept = list(root.rglob(f"{prefix}*"))
    for other in root.rglob("render-*") if what != "rendition" else ():
        other.unlink()  # the memo is what the report is read from
    path = max(kept, key=lambda f: f.stat().st_size)
    data = bytearray(path.read_bytes())
    at = int(where * len(data))
    data[at] ^= change
    path.write_bytes(bytes(data))
    assert _report(db, which, root) == expected


def _by_session_from_its_ledger(db: Path, root: Path) -> tuple[int, bytes, Path]:
    """``usage --all --by session`` of ``db`` (which of ``REPORTS``, and its JSON), kept in
    the cache at ``root`` with its memo and renditions gone, and the ledger the next report
    is to be made from."""
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "session"}))
    expected = _report(db, which, None)
    assert _report(db, which, root) == expected
    for memo in [*root.rglob("memo-*"), *root.rglob("render-*")]:
        memo.unlink()
    (ledger,) = [f for f in root.rglob("ledger-*") if _ledger_request(f)[0] == "days"]
    return which, expected, ledger


def _ledger_request(path: Path) -> Any:
    """The request a ledger file was kept for (its head's body)."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "big")
    return msgspec.msgpack.decode(report_cache._HEADER.decode(data[8 : 8 + length]).body)


_IN_A_PROCESS = """
import sys
from collections.abc import Iterator
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.test_cache import REPORTS, _report
for _ in range(int(sys.argv[4])):
    for which in range(len(REPORTS)):
        sys.stdout.buffer.write(_report(Path(sys.argv[2]), which, Path(sys.argv[3])) + b"\\n")
"""


def test_two_processes_at_once_do_not_corrupt_it(tmp_path) -> None:
    """Four runs at once, each reporting everything four times over one cache folder."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    expected = b"".join(report + b"\n" for report in _expected(db))
    repo = str(Path(__file__).resolve().parent.parent)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _IN_A_PROCESS, repo, str(db), str(root), "4"],
            stdout=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0
        assert out == expected * 4
    for which in range(len(REPORTS)):  # and what they left is sound
        assert _report(db, which, root) == _expected(db)[which]
    assert not list(root.rglob(".tmp-*"))


def _subagent_replied(db: Path, root: Path) -> None:
    """The subagent's stamp moves, as a reply written by OpenCode moves it; the memos go,
    so that the next report is made from the ledger."""
    conn = sqlite3.connect(db)
    (child,) = conn.execute("SELECT id FROM session WHERE parent_id IS NOT NULL").fetchone()
    _log(conn, child, "message.updated.1")
    conn.commit()
    conn.close()
    for memo in root.rglob("memo-*"):
        memo.unlink()


def _write_message(db: Path, sid: str, mid: str, data: dict[str, Any], at: int) -> None:
    """A message OpenCode writes to ``sid`` at ``at``, its event log moving."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, at, at, json.dumps(data, separators=(",", ":"))),
        )
        conn.execute("UPDATE session SET time_updated = ? WHERE id = ?", (at, sid))
        _log(conn, sid, "message.updated.1")
    conn.close()


@pytest.mark.parametrize("whole_table", [None, 1], ids=["few sessions", "whole tables"])
def test_a_prompt_written_after_the_reports_were_kept_is_in_flight_in_them(
    tmp_path, monkeypatch, whole_table
) -> None:
    """The reports were kept with every session idle; OpenCode writes a prompt, and for a
    moment no reply: every report, its memo brought up to date or its ledger used, says
    what one made afresh says (the session busy), and so again once the reply is written."""
    if whole_table is not None:
        monkeypatch.setattr(sessions_module, "WHOLE_TABLE_SESSIONS", whole_table)
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", whole_table)
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with sqlite3.connect(db) as conn, sqlite3.connect(SAMPLES / "bash_ok" / "opencode.db") as src:
        sid = _copy_session(conn, src, _sessions(src)[0], logged=True)
    conn.close()
    src.close()
    for which in range(len(REPORTS)):
        _report(db, which, root)
    now = int(time.time() * 1000)
    prompt = {"role": "user", "time": {"created": now}, "agent": "build"}
    _write_message(db, sid, "msg_zzzz1", prompt, now)
    for which in range(len(REPORTS)):
        assert _report(db, which, root) == _report(db, which, None), REPORTS[which]
    states = {r["id"]: r["state"] for r in json.loads(_report(db, 0, root))}
    assert states.pop(sid) == "busy" and set(states.values()) == {"idle"}
    reply = {
        "role": "assistant",
        "parentID": "msg_zzzz1",
        "time": {"created": now + 1, "completed": now + 2},
        "finish": "stop",
    }
    _write_message(db, sid, "msg_zzzz2", reply, now + 2)
    for which in range(len(REPORTS)):
        assert _report(db, which, root) == _report(db, which, None), REPORTS[which]
    assert {r["state"] for r in json.loads(_report(db, 0, root))} == {"idle"}


def test_a_repeat_reads_no_rows_and_a_change_reads_only_its_session(tmp_path) -> None:
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    _report(db, 0, root)
    _subagent_replied(db, root)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        sessions_report(store, all_sessions=True, cache=cache)
        assert cache.hits == 1  # the parent from the ledger; the subagent read again


@pytest.mark.parametrize("then", ["opencode_wrote", "opencode_migrated", "another_program"])
def test_sessions_from_before_the_event_log_are_kept_while_only_opencode_writes(
    tmp_path, then
) -> None:
    """A long-used database holds sessions written before the event log (no stamp). While
    only OpenCode writes (its log moves), one that is still unstamped is unchanged: OpenCode
    writing to it gives it a stamp. A migration of OpenCode's own (a new row in its
    migration table) or another program's write trusts nothing."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)
    for name in ("fork", "mcp", "reasoning"):
        src = sources[name]
        _copy_session(conn, src, _sessions(src)[0], logged=False)
    conn.execute("DELETE FROM event_sequence")  # every session from before the log
    conn.commit()
    unstamped = len(_sessions(conn))
    conn.close()
    _report(db, 0, root)
    conn = sqlite3.connect(db)
    src = sources["bash_fail"]
    sid = _copy_session(conn, src, _sessions(src)[0], logged=then != "another_program")
    if then == "opencode_migrated":
        conn.execute("INSERT INTO migration (id, time_completed) VALUES ('next', 1)")
    conn.commit()
    conn.close()
    for memo in root.rglob("memo-*"):
        memo.unlink()  # the next report is made from the ledger
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        report = sessions_report(store, all_sessions=True, cache=cache)
        assert cache.hits == (unstamped if then == "opencode_wrote" else 0)
        assert sid in {s.id for s in report.sessions}
    assert _report(db, 0, root) == _report(db, 0, None)
    for src in sources.values():
        src.close()


def test_a_write_another_report_saw_is_not_hidden_by_a_later_one_of_opencodes(tmp_path):
    """Another program's write to a session (no event), seen by one report; then OpenCode
    writes to another session: a report kept from before both is not brought up to date
    from the stamps (the first write moved none) but read again."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    _report(db, 1, root)  # top-level sessions: kept, with the stamps as they were
    conn = sqlite3.connect(db)  # another program deletes the subagent's last reply
    (child,) = conn.execute("SELECT id FROM session WHERE parent_id IS NOT NULL").fetchone()
    (last,) = conn.execute(
        "SELECT id FROM message WHERE session_id = ? ORDER BY time_created DESC", (child,)
    ).fetchone()
    conn.execute("DELETE FROM part WHERE message_id = ?", (last,))
    conn.execute("DELETE FROM message WHERE id = ?", (last,))
    conn.commit()
    conn.close()
    sources = {"task": sqlite3.connect(SAMPLES / "task" / "opencode.db")}
    assert _report(db, 0, root) == _report(db, 0, None)  # sees the write: a new epoch
    _change(db, ("new_session", True, 0, "task"), sources, tmp_path / "x")
    assert _report(db, 1, root) == _report(db, 1, None)
    sources["task"].close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX locks")
def test_reports_record_the_state_they_see_one_at_a_time(tmp_path, monkeypatch) -> None:
    """The state a report saw is read and recorded under the folder's lock: a report that
    cannot have it (another run stopped while holding it) is right, and records and keeps
    nothing (what it kept could never be trusted); once the lock is free, the record goes
    on."""
    import fcntl

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    expected = _report(db, 0, None)
    assert _report(db, 0, root) == expected
    (seen,) = root.rglob("seen")
    recorded = seen.read_bytes()
    for memo in seen.parent.glob("memo-*"):  # the run would keep one again, but for its epoch
        memo.unlink()
    kept = sorted(p.name for p in seen.parent.iterdir())
    monkeypatch.setattr(report_cache, "_LOCK_WAIT", 0.05)
    fd = os.open(seen.with_name(".seen.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run, holding it
    try:
        pid = os.fork()
        if pid == 0:  # a process of its own: flock is per open file, not per process
            try:
                with open_store(db) as store:
                    cache = ReportCache.open(store, root=root)
                    ok = (
                        cache is not None
                        and cache.fingerprint[-1]
                        != (report_cache._HEADER.decode(recorded).fingerprint[-1])
                    )
                    ok = ok and _report(db, 0, root) == expected
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
    assert seen.read_bytes() == recorded  # nothing recorded while the lock was held
    assert sorted(p.name for p in seen.parent.iterdir()) == kept  # nor anything kept
    assert _report(db, 0, root) == expected


@pytest.mark.parametrize("change", ["child_reply", "new_child", "parent_reply", "text_time"])
def test_a_change_reads_only_its_session_and_those_above_it(tmp_path, monkeypatch, change):
    """The last report brought up to date: the changed session and its parent summarized
    again (the parent's folded cost follows its subagent), the session table not read
    whole, and the report the one a full reading gives; written as the command writes it,
    every other summary is copied, as bytes, from the last report's memo and rendition
    (not decoded, checked or encoded again). A session whose ``time_updated`` is text
    (damage: SQLite sorts it before every number) has every session read again."""
    db, spare, root = tmp_path / "opencode.db", tmp_path / "spare.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)
    copy = _copy_session(conn, sources["fork"], _sessions(sources["fork"])[0], logged=True)
    if change == "text_time":
        conn.execute("UPDATE session SET time_updated = 'soon' WHERE id = ?", (copy,))
    conn.commit()
    conn.close()
    written = REPORTS.index(("sessions as json", {"all_sessions": True}))
    for which in (written, 0, 1):
        _report(db, which, root)
    conn = sqlite3.connect(db)
    (child,) = conn.execute("SELECT id FROM session WHERE parent_id IS NOT NULL").fetchone()
    (parent,) = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
    conn.close()
    ids = _sessions(sqlite3.connect(db))
    if change in ("new_child", "text_time"):
        step = ("new_child", True, ids.index(parent), "reasoning")
    else:
        target = child if change == "child_reply" else parent
        step = ("update_message", True, ids.index(target), "task")
    _change(db, step, sources, spare)
    expected = [_report(db, which, None) for which in (written, 0, 1)]
    from opencode_events.store.sqlite import Store

    def whole_table(*args, **kwargs):
        raise AssertionError("the session table read whole")

    if change != "text_time":
        monkeypatch.setattr(Store, "sessions", whole_table)
    given: list[tuple[str, bool]] = []  # each summary spooled for the memo: as kept?
    add_item, add_kept = report_cache.MemoSpool.add_item, report_cache.MemoSpool.add_kept

    def spooled(spool, item, from_memo=False, key=None):
        given.append((item.id, from_memo))
        add_item(spool, item, from_memo=from_memo, key=key)

    copies: list[int] = []  # summaries copied, run by run

    def copied(spool, kept, low, high):
        copies.append(high - low)
        given.extend((sid, True) for _time, sid in kept.keys[low:high])
        add_kept(spool, kept, low, high)

    monkeypatch.setattr(report_cache.MemoSpool, "add_item", spooled)
    monkeypatch.setattr(report_cache.MemoSpool, "add_kept", copied)
    # Written first: brought up to date here (the others would then read its memo).
    assert [_report(db, which, root) for which in (written, 0, 1)] == expected
    summarized = {sid for sid, from_memo in given if not from_memo}
    if change == "text_time":
        assert len(summarized) == len(given) == len(ids) + 1  # every one made again
    elif change == "new_child":
        (new,) = set(_sessions(sqlite3.connect(db))) - set(ids)
        assert summarized == {new, parent}
    else:
        assert summarized == ({child, parent} if change == "child_reply" else {parent})
    assert len(given) == len(_sessions(sqlite3.connect(db)))
    # Spliced: the others copied (in runs between those made), none of them decoded.
    assert sum(copies) == (0 if change == "text_time" else len(given) - len(summarized))
    for src in sources.values():
        src.close()


def _splices(monkeypatch, form: str) -> tuple[list[bool | None], list[str]]:
    """What each ``_write_spliced`` from here on answered (True: written so), and the ids
    of the summaries it made and wrote itself (every other one copied)."""
    answers: list[bool | None] = []
    made: list[str] = []
    write_spliced = sessions_module._write_spliced
    form_type = type(LISTED[form])
    item = form_type.item

    def spliced(*args):
        answers.append(write_spliced(*args))
        return answers[-1]

    monkeypatch.setattr(sessions_module, "_write_spliced", spliced)
    monkeypatch.setattr(
        form_type, "item", lambda self, value: made.append(value.id) or item(self, value)
    )
    return answers, made


def _moved(db: Path, pick: int) -> None:
    """OpenCode's commonest change: a session written to, its ``time_updated`` now the
    newest (it moves to the top of the report), logged."""
    conn = sqlite3.connect(db)
    sessions = _sessions(conn)
    target = sessions[pick % len(sessions)]
    conn.execute(
        "UPDATE session SET time_updated = (SELECT max(time_updated) + 1000 FROM session) "
        "WHERE id = ?",
        (target,),
    )
    _log(conn, target, "session.updated.1")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_a_report_brought_up_to_date_copies_the_bytes_of_what_did_not_change(
    tmp_path, monkeypatch, form
) -> None:
    """``sessions --all`` as JSON or JSON Lines brought up to date, change after change:
    each time only the summaries of the changed sessions and those above them are made and
    written, every other one's bytes copied from the last report's rendition and memo (a
    few summaries a piece here), and the report is the one a full reading gives, its memo
    and rendition as good to copy from the next time."""
    monkeypatch.setattr(report_cache, "_PIECE", 1500)  # the memo's groups and pieces,
    monkeypatch.setattr(report_cache, "_COPY_PIECE", 2500)  # the rendition's: a few items
    db, spare, root = _odd_database(tmp_path, [], []), tmp_path / "spare.db", tmp_path / "cache"
    which = REPORTS.index((f"sessions as {form}", {"all_sessions": True}))
    _report(db, which, root)
    answers, made = _splices(monkeypatch, form)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    steps = [
        ("update_message", True, 0, "task"),
        ("new_session", True, 1, "mcp"),
        ("new_child", True, 2, "reasoning"),
        ("moved", True, 5, ""),  # to the top, from amid the others
        ("update_message", True, 3, "task"),
        ("moved", True, 7, ""),
    ]
    for step in steps:
        if step[0] == "moved":
            _moved(db, step[2])
        else:
            _change(db, step, sources, spare)
        expected = _report(db, which, None)
        made.clear()
        assert _report(db, which, root) == expected
        assert answers[-1] is True
        assert 0 < len(made) < len(_sessions(sqlite3.connect(db))) - 4
    assert len(answers) == len(steps)
    for src in sources.values():
        src.close()


@pytest.mark.parametrize(
    "case", ["another_form_between", "rendition_damaged", "spans_unknown", "another_runs"]
)
def test_a_report_is_copied_only_from_a_rendition_of_its_memo(tmp_path, monkeypatch, case) -> None:
    """The bytes of unchanged summaries are copied only from a rendition made with the last
    memo (the same state of the database), sound, that says where each summary lies; else
    the report is brought up to date from the memo's summaries, the same bytes. Another
    form written in between (its report the memo now), a rendition damaged, one whose
    writer could not tell its items apart; and a rendition another run kept, of the same
    state of the database as far as the keys tell (read before OpenCode wrote), beside this
    memo (the two files are replaced one after the other: two runs at once can leave one's
    memo beside the other's rendition)."""
    db, spare, root = _odd_database(tmp_path, [], []), tmp_path / "spare.db", tmp_path / "cache"
    which = REPORTS.index(("sessions as json", {"all_sessions": True}))
    with monkeypatch.context() as patch:
        if case == "spans_unknown":
            chunk = type(rows.JSON_LIST)._chunk
            patch.setattr(type(rows.JSON_LIST), "_chunk", lambda *a: (chunk(*a)[0], None))
        _report(db, which, root)
    if case == "another_runs":
        (rendition,) = [p for p in root.rglob("render-*") if b'"id"' in p.read_bytes()]
        first = rendition.read_bytes()
        for kept in root.rglob("memo-*"):
            kept.unlink()
        rendition.unlink()
        with monkeypatch.context() as patch:  # a second run: OpenCode writes as it starts
            cache_open = ReportCache.open

            def opened_then_written(store, **kwargs):
                cache = cache_open(store, **kwargs)
                _moved(db, 3)
                return cache

            patch.setattr(ReportCache, "open", opened_then_written)
            _report(db, which, root)
        rendition.write_bytes(first)  # the first run's, kept last
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    _change(db, ("update_message", True, 0, "task"), sources, spare)
    if case == "another_form_between":
        _report(db, REPORTS.index(("sessions as jsonl", {"all_sessions": True})), root)
        _change(db, ("update_message", True, 2, "task"), sources, spare)
    elif case == "rendition_damaged":
        (rendition,) = [
            path for path in root.rglob("render-*") if b'[\n  {\n    "id"' in path.read_bytes()
        ]
        data = bytearray(rendition.read_bytes())
        data[-20] ^= 1  # in the bytes, not the head: their sum no longer holds
        rendition.write_bytes(bytes(data))
    expected = _report(db, which, None)
    answers, made = _splices(monkeypatch, "json")
    assert _report(db, which, root) == expected
    assert answers == [None] and made == []
    # Written so, the memo and rendition are good to copy from the next time.
    _change(db, ("update_message", True, 4, "task"), sources, spare)
    expected = _report(db, which, None)
    assert _report(db, which, root) == expected
    assert answers == [None, True] and made
    for src in sources.values():
        src.close()


def test_a_report_brought_up_to_date_with_a_session_busy_keeps_nothing(
    tmp_path, monkeypatch
) -> None:
    """A session made again is busy (a prompt just written, its reply yet to come): the
    report is written, copied as ever, but neither its memo nor its rendition is kept (the
    state would turn stale with the clock alone), so the last ones stay as they were."""
    db, root = _odd_database(tmp_path, [], []), tmp_path / "cache"
    which = REPORTS.index(("sessions as json", {"all_sessions": True}))
    _report(db, which, root)
    kept = {
        path: path.read_bytes() for path in root.rglob("*") if path.name[:5] in ("memo-", "rende")
    }
    sid = _sessions(sqlite3.connect(db))[3]
    now = int(time.time() * 1000)
    _write_message(db, sid, "msg_zzzz1", {"role": "user", "time": {"created": now}}, now)
    answers, made = _splices(monkeypatch, "json")
    expected = _report(db, which, None)
    assert b'"busy"' in expected
    assert _report(db, which, root) == expected
    assert answers == [True] and sid in made
    assert {path: path.read_bytes() for path in kept} == kept


def test_a_report_asks_for_each_directorys_mcp_servers_once(tmp_path) -> None:
    """A report asks once per directory which MCP servers are configured (each asking reads
    a few dozen paths up the folder tree): made whole, and brought up to date, where the
    last report's servers are checked and then its changed sessions summarized."""
    db, root = _odd_database(tmp_path, [], []), tmp_path / "cache"
    asked: list[str | None] = []

    def servers(directory: str | None) -> list[str]:
        asked.append(directory)
        return ["my-tools"]

    def written() -> bytes:
        out = io.BytesIO()
        with open_store(db) as store:
            cache = ReportCache.open(store, root=root)
            write_sessions(
                store, "json", RENDER["json"], out, cache=cache, each=True,
                listed=rows.JSON_LIST, all_sessions=True, mcp_servers=servers,
            )  # fmt: skip
        return out.getvalue()

    written()
    assert asked and len(asked) == len(set(asked))
    _moved(db, 1)
    asked.clear()
    answers = []
    with pytest.MonkeyPatch.context() as patch:
        write_spliced = sessions_module._write_spliced
        patch.setattr(
            sessions_module,
            "_write_spliced",
            lambda *args: answers.append(write_spliced(*args)) or answers[-1],
        )
        written()
    assert answers == [True]  # brought up to date
    assert asked and len(asked) == len(set(asked))


def test_a_last_memos_basis_is_not_held_while_the_report_is_written(tmp_path, monkeypatch) -> None:
    """The last memo's basis (every session's stamp and parent: 29 MB decoded at 100,000
    sessions), decoded to try the copy and handed to the reading of its summaries when
    there is no rendition to copy from, is not held by the cache while they are written."""
    db, root = _odd_database(tmp_path, [], []), tmp_path / "cache"
    which = REPORTS.index(("sessions as json", {"all_sessions": True}))
    _report(db, which, root)
    for rendition in root.rglob("render-*"):
        rendition.unlink()
    _moved(db, 1)
    expected = _report(db, which, None)
    held: list[dict] = []
    keep = report_cache.MemoSpool.keep

    def kept(spool, *args):
        held.append(dict(spool._cache._bases))
        return keep(spool, *args)

    monkeypatch.setattr(report_cache.MemoSpool, "keep", kept)
    assert _report(db, which, root) == expected
    assert held == [{}]


def test_a_rendition_cut_short_while_copied_is_one_error(tmp_path, monkeypatch) -> None:
    """A rendition cut short after it was summed (by another program: no run of ours writes
    a file in place) stops the report brought up to date with one error, "run again", and
    is let go: the next run is whole and right."""
    monkeypatch.setattr(report_cache, "_COPY_PIECE", 2500)  # a few summaries a piece
    db, root = _odd_database(tmp_path, [], []), tmp_path / "cache"
    which = REPORTS.index(("sessions as json", {"all_sessions": True}))
    _report(db, which, root)
    (rendition,) = [p for p in root.rglob("render-*") if b'"id"' in p.read_bytes()]
    _moved(db, 2)
    expected = _report(db, which, None)
    rendered_runs = report_cache.KeptPieces.rendered_runs

    def cut_while_read(kept, low, high, most=None):
        for piece in rendered_runs(kept, low, high, most):
            yield piece
            os.truncate(rendition, rendition.stat().st_size // 2)

    monkeypatch.setattr(report_cache.KeptPieces, "rendered_runs", cut_while_read)
    with pytest.raises(InputError, match="was damaged while read: run again"):
        _report_or_raise(db, which, root)
    assert not rendition.exists()
    monkeypatch.undo()
    assert _report(db, which, root) == expected


def _turn_reads(monkeypatch) -> tuple[list[str], list[int]]:
    """The sessions whose turns are read from here on, and a mark each time the fork rule
    (which reads every message) runs."""
    read: list[str] = []
    rule_run: list[int] = []
    turns, copies = usage_module._session_turns, usage_module._forked_copies
    monkeypatch.setattr(
        usage_module,
        "_session_turns",
        lambda store, sid, *a: read.append(sid) or turns(store, sid, *a),
    )
    monkeypatch.setattr(
        usage_module, "_forked_copies", lambda *a, **k: rule_run.append(1) or copies(*a, **k)
    )
    return read, rule_run


@pytest.mark.parametrize(
    "change", ["child_reply", "parent_reply", "new_child", "new_session", "fork", "other_program"]
)
def test_turns_of_a_change_read_only_its_family(tmp_path, monkeypatch, change):
    """``usage --all`` (by turn, subagents folded) brought up to date: the changed session's
    family (its top-level session and every subagent below it) read again, no other
    session, and the fork rule (which reads every message) not run again; the report the
    one a full reading gives. A fork made, or a write OpenCode did not log, and every
    session is read again."""
    db, spare, root = tmp_path / "opencode.db", tmp_path / "spare.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)
    for name in ("mcp", "reasoning"):
        _copy_session(conn, sources[name], _sessions(sources[name])[0], logged=True)
    conn.commit()
    (child, parent) = conn.execute(
        "SELECT id, parent_id FROM session WHERE parent_id IS NOT NULL"
    ).fetchone()
    conn.close()
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "turn"}))
    _report(db, which, root)
    ids = _sessions(sqlite3.connect(db))
    step = {
        "child_reply": ("update_message", True, ids.index(child), "task"),
        "parent_reply": ("update_message", True, ids.index(parent), "task"),
        "new_child": ("new_child", True, ids.index(parent), "reasoning"),
        "new_session": ("new_session", True, 0, "compaction"),
        "fork": ("fork", True, ids.index(parent), "task"),
        "other_program": ("update_message", False, ids.index(child), "task"),
    }[change]
    _change(db, step, sources, spare)
    expected = _report(db, which, None)
    read, rule_run = _turn_reads(monkeypatch)
    assert _report(db, which, root) == expected
    after = _sessions(sqlite3.connect(db))
    if change in ("fork", "other_program"):
        assert rule_run and set(read) == set(after)  # read again, every one
    elif change == "new_session":
        assert not rule_run and read == [after[-1]]
    else:
        family = {parent, child} | ({after[-1]} if change == "new_child" else set())
        assert not rule_run and set(read) == family
    for src in sources.values():
        src.close()


def _a_session_of_each_capture(
    tmp_path: Path, base: str = "task"
) -> tuple[Path, Path, dict[str, sqlite3.Connection]]:
    """samples/``base`` with the first session of each of ``SOURCES`` copied in (logged):
    the database, a cache folder for it, and the captures' connections (to copy from
    again)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / base / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)
    for src in sources.values():
        _copy_session(conn, src, _sessions(src)[0], logged=True)
    conn.commit()
    conn.close()
    return db, root, sources


@pytest.mark.parametrize("cached", [False, True], ids=["no cache", "cache"])
def test_turns_of_every_session_go_out_as_they_are_made(tmp_path, monkeypatch, cached):
    """``usage --all`` by turn writes each session's rows as soon as they are made (and,
    with the cache, spools them to its memo), never holding the report: the first row is
    out before the last session is read. The report is the one held whole gives, and with
    the cache its repeat (a row at a time from the memo) and its repeat after a change
    (brought up to date, the kept rows read as they go) too."""
    db, root, sources = _a_session_of_each_capture(tmp_path)
    monkeypatch.setattr(rows, "LIST_BATCH", 1)
    choices = {"all_sessions": True, "by": "turn"}

    def written() -> tuple[bytes, list[int]]:
        read, _rule_run = _turn_reads(monkeypatch)
        out, marks = io.BytesIO(), []

        class Out:
            def write(self, piece: bytes) -> None:
                marks.append(len(read))
                out.write(piece)

        with open_store(db) as store:
            cache = ReportCache.open(store, root=root) if cached else None
            render = functools.partial(usage_pieces, fmt="jsonl")
            write_stored_usage(store, "jsonl", render, Out(), cache=cache, **choices)
        return out.getvalue(), [*marks, len(read)]

    with open_store(db) as store:
        whole = stored_usage(store, **choices)
    expected = b"".join(usage_pieces(whole, "jsonl"))
    assert len(whole.rows) > 3
    first, marks = written()
    assert first == expected
    assert marks[0] < marks[-1]  # a row out before every session was read
    monkeypatch.undo()
    if not cached:
        return
    (memo,) = root.glob("*/memo-*")
    data = memo.read_bytes()  # the head's length, the head, then the rows
    head = report_cache._HEADER.decode(data[8 : 8 + int.from_bytes(data[:8], "big")])
    assert report_cache._MEMO.decode(head.body).groups  # spooled row by row
    for rendition in root.glob("*/render-*"):
        rendition.unlink()  # the repeat reads the memo's rows, not its bytes
    assert written()[0] == expected
    _change(db, ("update_message", True, 0, "task"), sources, tmp_path / "spare.db")
    with open_store(db) as store:
        expected = b"".join(usage_pieces(stored_usage(store, **choices), "jsonl"))
    again, again_marks = written()
    assert again == expected
    assert 0 < again_marks[-1] < marks[-1]  # brought up to date: the changed family read
    for src in sources.values():
        src.close()


@pytest.mark.parametrize("by", ["turn", "step"])
@pytest.mark.parametrize("cached", [False, True], ids=["no cache", "cache"])
def test_a_table_or_markdown_of_every_session_never_holds_its_rows(
    tmp_path, monkeypatch, by, cached
):
    """``usage --all`` by turn or step as a table (its last rows: ``stored_usage_last``)
    or in Markdown (every row, its columns known only once all were seen: the rows set
    aside in a file as they pass) is made a row at a time, as the other formats are: the
    report held whole is never made. What is drawn is what the report held whole gives,
    made, read back from the memo, or brought up to date after a change."""
    db, root, sources = _a_session_of_each_capture(tmp_path)
    choices = {"all_sessions": True, "by": by}

    def expected() -> tuple[bytes, UsageReport]:
        with open_store(db) as store:
            whole = stored_usage(store, **choices)
        return rows.report_markdown(whole), whole

    def drawn() -> tuple[bytes, tuple[UsageReport, int], tuple[UsageReport, int]]:
        with monkeypatch.context() as patched:
            patched.setattr(usage_module._RowsAsMade, "whole", _never_whole)
            patched.setattr(runs_module, "SPOOLED", 3)  # set aside a few rows at a time
            patched.setattr(runs_module, "GROUP", 2)
            with open_store(db) as store:
                cache = ReportCache.open(store, root=root) if cached else None
                markdown = _usage_written(store, "markdown", cache, **choices)
                for rendition in root.glob("*/render-*"):
                    rendition.unlink()  # the next report reads the memo's rows
                last = stored_usage_last(store, 3, cache=cache, **choices)
                every = stored_usage_last(store, 10_000, cache=cache, **choices)
        return markdown, last, every

    for step in range(2):
        markdown, whole = expected()
        assert len(whole.rows) > 3
        for _repeat in range(2 if cached else 1):  # made, then read back from the memo
            got, (last, count), (every, every_count) = drawn()
            assert got == markdown
            assert (last.rows, count) == (whole.rows[-3:], len(whole.rows))
            assert (every.rows, every_count) == (whole.rows, len(whole.rows))
            for report in (last, every):
                assert (report.total, report.notes) == (whole.total, whole.notes)
        if step == 0:
            _change(db, ("update_message", True, 0, "task"), sources, tmp_path / "spare.db")
    if cached:
        assert list(root.glob("*/memo-*"))
    for src in sources.values():
        src.close()


def test_the_table_of_more_rows_than_it_draws_says_how_many_it_has(tmp_path, monkeypatch):
    """The table draws the last ``TABLE_ROWS`` rows and says of how many; its total is of
    every row (the JSON's)."""
    from opencode_events.output import tables

    monkeypatch.setattr(tables, "TABLE_ROWS", 1)
    db = SAMPLES / "fork" / "opencode.db"
    args = ["usage", "--db", str(db), "--all", "--by", "step", "--no-cache"]
    doc = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    result = CliRunner().invoke(cli, [*args, "--format", "table"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert len(doc["rows"]) > 1
    said = " ".join(result.output.split())
    assert f"the last 1 of {len(doc['rows'])} rows; the total is of all" in said
    assert f"${doc['total']['cost']:.4f}" in said


@pytest.mark.parametrize("change", ["original_reply", "fork_reply", "original_gone"])
def test_turns_keep_the_fork_rule_by_session(tmp_path, monkeypatch, change):
    """samples/fork: a fork whose copied history has its originals in another session. The
    fork rule's findings are kept by session: a reply in either reads its family alone,
    and an original deleted reads the fork's family too (its copy is counted now), with
    the rule (which reads every message) not run again; the report the one a full
    reading gives."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    task = sqlite3.connect(SAMPLES / "task" / "opencode.db")
    conn = sqlite3.connect(db)
    _copy_session(conn, task, _sessions(task)[0], logged=True)
    conn.commit()
    task.close()
    fork, original = _rows(  # the fork holds messages older than itself
        conn,
        "SELECT s.id, (SELECT o.id FROM session o WHERE o.id != s.id AND o.id LIKE 'ses_dd80%') "
        "FROM session s WHERE EXISTS (SELECT 1 FROM message m WHERE m.session_id = s.id "
        "AND m.time_created < s.time_created)",
    )[0]
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "turn"}))
    first = _report(db, which, root)
    assert b"forked cop" in first
    if change == "original_gone":
        _remove_reply(conn, original)
    else:
        target = original if change == "original_reply" else fork
        _mid, created, data = _newest_message(conn, target)
        _add_message(conn, target, created + 60_000, data)
        _log(conn, target, "message.updated.1")
    conn.commit()
    conn.close()
    expected = _report(db, which, None)
    read, rule_run = _turn_reads(monkeypatch)
    assert _report(db, which, root) == expected
    assert not rule_run
    assert (
        set(read)
        == {
            "original_reply": {original},
            "fork_reply": {fork},
            "original_gone": {original, fork},
        }[change]
    )
    if change == "original_gone":
        assert expected != first


def _ledger_forks(db: Path, root: Path) -> dict[str, bool]:
    """Each session's entry in the ``usage --by day`` ledger of ``db`` under ``root``:
    whether it says its session is a fork."""
    (ledger,) = [path for path in root.glob("*/ledger-*") if _ledger_request(path)[0] == "days"]
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        assert cache is not None
        entries = cache.ledger_entries("usage-days", _ledger_request(ledger))
        with entries:
            return {
                sid: usage_module._ENTRY_HEAD.decode(entry).span.fork
                for sid, entry in entries.each()
            }


@pytest.mark.parametrize("change", ["other_reply", "fork_reply", "new_fork"])
def test_a_ledger_names_its_forks_and_only_changed_sessions_are_probed(
    tmp_path, monkeypatch, change
):
    """samples/fork, with another session: the ledger of ``usage --by day`` says of each
    session whether it is a fork, so a report brought up to date asks the database only
    whether the sessions that changed are forks (a fork is one by its own rows, which move
    its stamp), not every session (an index probe each: 15–25 ms at 10,000). A reply in
    the other session, in the fork, or the other session made a fork by a copy older than
    itself: the report the one a full reading gives, and the ledger then says so."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    task = sqlite3.connect(SAMPLES / "task" / "opencode.db")
    conn = sqlite3.connect(db)
    other = _copy_session(conn, task, _sessions(task)[0], logged=True)
    conn.commit()
    task.close()
    (fork,) = _rows(
        conn,
        "SELECT s.id FROM session s WHERE EXISTS (SELECT 1 FROM message m "
        "WHERE m.session_id = s.id AND m.time_created < s.time_created)",
    )[0]
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))
    assert b"forked cop" in _report(db, which, root)
    sessions = [sid for (sid,) in _rows(conn, "SELECT id FROM session")]
    assert _ledger_forks(db, root) == {sid: sid == fork for sid in sessions}
    target = fork if change == "fork_reply" else other
    _mid, created, data = _newest_message(conn, target)
    ((started,),) = _rows(conn, "SELECT time_created FROM session WHERE id = ?", (target,))
    at = started - 60_000 if change == "new_fork" else created + 60_000  # older: a copy
    _add_message(conn, target, at, data)
    _log(conn, target, "message.updated.1")
    conn.commit()
    conn.close()
    expected = _report(db, which, None)
    asked: list[Any] = []
    forks = Store.forks
    monkeypatch.setattr(
        Store, "forks", lambda self, ids=None: asked.append(ids) or forks(self, ids)
    )
    assert _report(db, which, root) == expected
    assert [sorted(ids) for ids in asked] == [[target]]  # the changed session alone
    forks_now = {fork, other} if change == "new_fork" else {fork}
    assert _ledger_forks(db, root) == {sid: sid in forks_now for sid in sessions}


def _chosen_usage(db: Path, root: Path | None, by: str, sids: list[str]) -> bytes:
    """``usage --by BY SID…`` (the sessions chosen, so the fork rule is asked across them)."""
    return _usage_json(db, root, session_ids=list(sids), by=by)


@pytest.mark.parametrize("by", ["model", "day"])
def test_a_fork_outside_the_sessions_chosen_still_tells_the_originals(tmp_path, by):
    """samples/fork, with two other sessions: the original session also holds a copy
    (older than itself) of its own reply's content, written at another time than that
    reply (not as OpenCode writes it). The reply is an original only at a time the fork's
    copy shares, so the forks outside a report still say which of its rows are originals:
    a report of the original session and another one, brought up to date from a ledger a
    report of two other sessions kept (which has no entry for the fork), is the one a full
    reading gives."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    task = sqlite3.connect(SAMPLES / "task" / "opencode.db")
    conn = sqlite3.connect(db)
    one = _copy_session(conn, task, _sessions(task)[0], logged=True)
    two = _copy_session(conn, task, _sessions(task)[0], logged=True)
    task.close()
    ((fork, original),) = _rows(
        conn,
        "SELECT s.id, (SELECT o.id FROM session o WHERE o.id != s.id AND o.id LIKE 'ses_dd80%') "
        "FROM session s WHERE s.id LIKE 'ses_dd80%' AND EXISTS (SELECT 1 FROM message m "
        "WHERE m.session_id = s.id AND m.time_created < s.time_created)",
    )
    (data,) = conn.execute(
        "SELECT data FROM message WHERE session_id = ? AND time_created < "
        "(SELECT time_created FROM session WHERE id = ?) AND data LIKE '%\"assistant\"%'",
        (fork, fork),
    ).fetchone()
    (started,) = conn.execute(
        "SELECT time_created FROM session WHERE id = ?", (original,)
    ).fetchone()
    _add_message(conn, original, started - 1000, data)
    _log(conn, original, "message.updated.1")
    conn.commit()
    conn.close()
    assert _chosen_usage(db, root, by, [one, two]) == _chosen_usage(db, None, by, [one, two])
    expected = _chosen_usage(db, None, by, [original, one])
    assert b"forked cop" in expected
    assert _chosen_usage(db, root, by, [original, one]) == expected


@pytest.mark.parametrize(
    "change", ["child_reply", "new_session", "original_gone", "fork", "other_program"]
)
def test_steps_of_a_change_read_only_its_session(tmp_path, monkeypatch, change):
    """``usage --all --by step`` brought up to date: the changed session's steps read
    again (a step names the session it was made in), those of the sessions above it
    (whether a reply in flight is stale depends on the writes below it), and a fork's
    whose copy is counted otherwise since; the fork rule not run again; the report the one a full
    reading gives. A fork made, or a write OpenCode did not log: everything read again."""
    db, spare, root = tmp_path / "opencode.db", tmp_path / "spare.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    conn = sqlite3.connect(db)
    (child, parent) = conn.execute(
        "SELECT id, parent_id FROM session WHERE parent_id IS NOT NULL"
    ).fetchone()
    copied = {  # samples/fork: a fork, and the session whose history it copied
        sid: _copy_session(conn, sources["fork"], sid, logged=True)
        for sid in _sessions(sources["fork"])
    }
    conn.commit()
    (fork,) = conn.execute(
        "SELECT s.id FROM session s WHERE EXISTS (SELECT 1 FROM message m WHERE "
        "m.session_id = s.id AND m.time_created < s.time_created)"
    ).fetchone()
    (original,) = set(copied.values()) - {fork}
    conn.close()
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "step"}))
    _report(db, which, root)
    ids = _sessions(sqlite3.connect(db))
    step = {
        "child_reply": ("update_message", True, ids.index(child), "task"),
        "new_session": ("new_session", True, 0, "compaction"),
        "original_gone": ("delete_message", True, 1, "task"),
        "fork": ("fork", True, ids.index(child), "task"),
        "other_program": ("update_message", False, ids.index(child), "task"),
    }[change]
    if change == "original_gone":  # the original's reply, which the fork holds a copy of
        conn = sqlite3.connect(db)
        _remove_reply(conn, original)
        conn.commit()
        conn.close()
    else:
        _change(db, step, sources, spare)
    expected = _report(db, which, None)
    read, rule_run = [], []
    rows, copies = usage_module._message_rows, usage_module._forked_copies
    monkeypatch.setattr(
        usage_module,
        "_message_rows",
        lambda store, sids: read.append(None if sids is None else set(sids)) or rows(store, sids),
    )
    monkeypatch.setattr(
        usage_module, "_forked_copies", lambda *a, **k: rule_run.append(1) or copies(*a, **k)
    )
    assert _report(db, which, root) == expected
    after = _sessions(sqlite3.connect(db))
    if change in ("fork", "other_program"):
        assert rule_run  # everything read again, the rule with it
    else:
        new = {after[-1]} if change == "new_session" else set()
        read_again = {
            "child_reply": {child, parent},  # above it too: the stale rule looks below
            "new_session": new,
            "original_gone": {original, fork},
        }[change]
        assert not rule_run and read == [read_again]
    for src in sources.values():
        src.close()


FORK_A = "ses_dd8060a99ffe0TE5VY4h7s0VFE"  # samples/fork: the session whose history …
FORK_B = "ses_dd805feb3ffeRYmW0nRsUneOP2"  # … its fork copied
TASK_PARENT = "ses_dd8083e0bffePGJlLQX9qavHXI"  # samples/task: a session and its subagent
TASK_CHILD = "ses_dd8083865ffeA7oVLDszN0gOOR"


def _set_data(conn: sqlite3.Connection, mid: str, change) -> None:
    (data,) = conn.execute("SELECT data FROM message WHERE id = ?", (mid,)).fetchone()
    value = json.loads(data)
    change(value)
    conn.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(value), mid))


def _reviewed_case(case: str, db: Path, sources: dict) -> tuple:
    """The database before, and the change after the first reports, of a case a review
    found (each the way OpenCode writes: rows, an event, the session's sequence moved)."""
    base = "task" if case in ("moved", "stale_parent", "parent_came") else "fork"
    shutil.copyfile(SAMPLES / base / "opencode.db", db)
    conn = sqlite3.connect(db)
    if base == "task":  # a second top-level session: the fork rule applies across them
        _copy_session(conn, sources["fork"], FORK_A, logged=True)
    if case == "stale_parent":  # the parent's reply never completed, long ago: stale
        _set_data(conn, "msg_227f7c4a8001avsgah5KoyTwVh", lambda m: m["time"].pop("completed"))
        _log(conn, TASK_PARENT, "message.updated.1")
    elif case == "null_id":  # a third session, one of its replies with no id
        copy = _copy_session(conn, sources["task"], TASK_PARENT, logged=True)
        (mid,) = conn.execute(
            "SELECT id FROM message WHERE session_id = ? AND data LIKE '%\"assistant\"%' "
            "ORDER BY time_created LIMIT 1",
            (copy,),
        ).fetchone()
        conn.execute("UPDATE message SET id = NULL WHERE id = ?", (mid,))
    elif case == "user_cost":  # the fork's copied prompt made to carry a cost: no original
        _set_data(conn, "msg_227fa0158001gD8qqZaKI7lHtT", lambda m: m.update(cost=1.5))
        _log(conn, FORK_B, "message.updated.1")
    elif case == "parent_came":  # the subagent's parent missing: a top-level session
        conn.execute("UPDATE session SET parent_id = 'ses_ghost' WHERE id = ?", (TASK_CHILD,))
        _log(conn, TASK_CHILD, "session.updated.1")
    conn.commit()
    conn.close()

    def change() -> None:
        conn = sqlite3.connect(db)
        if case == "moved":  # the subagent made a session of its own
            conn.execute("UPDATE session SET parent_id = NULL WHERE id = ?", (TASK_CHILD,))
            _log(conn, TASK_CHILD, "session.updated.1")
        elif case == "stale_parent":  # the subagent writes: its parent's reply is busy again
            now = int(time.time() * 1000)
            (data,) = conn.execute(
                "SELECT data FROM message WHERE id = 'msg_227f7c8f7001OXfLjuw3j3Gs4M'"
            ).fetchone()
            _add_message(conn, TASK_CHILD, now, data)
            _log(conn, TASK_CHILD, "message.updated.1")
        elif case == "original_time":  # the original's row time moved, its data not
            conn.execute(
                "UPDATE message SET time_created = time_created + 1 "
                "WHERE id = 'msg_227f9f85a001dZJWbfbFIKBn0X'"
            )
            _log(conn, FORK_A, "message.updated.1")
        elif case == "null_id":  # the fork's copied reply loses its id
            conn.execute("UPDATE message SET id = NULL WHERE id = 'msg_227fa015e001iJeVak1FbzC8Rx'")
            _log(conn, FORK_B, "message.updated.1")
        elif case == "parent_came":  # a session of that id comes: the subagent is below it
            new = _copy_session(conn, sources["fork"], FORK_A, logged=True)
            for table, column in (
                ("session", "id"),
                ("message", "session_id"),
                ("part", "session_id"),
                ("event_sequence", "aggregate_id"),
                ("event", "aggregate_id"),
            ):
                conn.execute(
                    f"UPDATE {table} SET {column} = 'ses_ghost' WHERE {column} = ?", (new,)
                )
        elif case == "user_cost":  # an original of the copied prompt comes
            (data,) = conn.execute(
                "SELECT data FROM message WHERE id = 'msg_227fa0158001gD8qqZaKI7lHtT'"
            ).fetchone()
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES (?, ?, 1795967022500, 1795967022500, ?)",
                (_fresh("msg"), FORK_A, data),
            )
            _log(conn, FORK_A, "message.updated.1")
        conn.commit()
        conn.close()

    return change


@pytest.mark.parametrize(
    "case", ["moved", "stale_parent", "original_time", "null_id", "user_cost", "parent_came"]
)
def test_what_a_review_found_is_read_again(tmp_path, case):
    """Cases reviews of the reports brought up to date found wrong: a subagent moved to
    another parent (its old parent's figures change: `sessions` too), or whose missing
    parent comes (it is no longer top-level);
    a parent's stale reply made busy again by its subagent's write; an original whose row
    time moved (a copy or an original is a row at a copy's time, in every reading); replies
    with no id (no copy); a copied prompt carrying a cost (the note counts inferences')."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    change = _reviewed_case(case, db, sources)
    reports = [EVERY_TURN, EVERY_STEP, 0, 1]
    for which in reports:
        assert _report(db, which, root) == _report(db, which, None), REPORTS[which]
    change()
    for which in reports:
        assert _report(db, which, root) == _report(db, which, None), REPORTS[which]
    for src in sources.values():
        src.close()


def test_a_held_reply_with_no_id_is_no_copy(tmp_path):
    """A reply with no id at a fork copy's time is held in the day ledger (its fingerprint
    is the copy's): read back from the ledger, it is no copy either (a NULL id once made
    every such row a copy, skipped)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) "
        "SELECT NULL, session_id, time_created, time_updated, data FROM message "
        "WHERE id = 'msg_227fa015e001iJeVak1FbzC8Rx'"
    )
    conn.commit()
    conn.close()
    for which in (EVERY_DAY, REPORTS.index(("usage", {"all_sessions": True, "by": "session"}))):
        expected = _report(db, which, None)
        assert _report(db, which, root) == expected
        for memo in root.rglob("memo-*"):  # the next report from the ledger
            memo.unlink()
        assert _report(db, which, root) == expected, REPORTS[which]


def test_the_cache_lives_under_xdg_cache_home_and_no_cache_skips_it(tmp_path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    runner = CliRunner()
    home = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(home)}
    off = runner.invoke(
        cli, ["sessions", "--db", str(db), "--format", "json", "--no-cache"], env=env
    )
    assert off.exit_code == 0, off.output
    assert not home.exists()
    on = runner.invoke(cli, ["sessions", "--db", str(db), "--format", "json"], env=env)
    assert on.exit_code == 0 and on.output == off.output
    assert list((home / "opencode-events").glob("*/memo-*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opencode.db", "xdg"]
    env["OPENCODE_EVENTS_NO_CACHE"] = "1"
    shutil.rmtree(home)
    again = runner.invoke(cli, ["usage", "--db", str(db), "--all", "--by", "day"], env=env)
    assert again.exit_code == 0 and not home.exists()


@pytest.mark.parametrize("command", [["usage", "--all", "--by", "day"], ["usage", "--all"]])
def test_a_report_the_cache_cannot_hold_is_written_and_not_kept(tmp_path, command) -> None:
    """A figure beyond 64 bits cannot be kept in MessagePack: the report is written as
    without the cache, every time, with no traceback and nothing kept of it. (A count past
    64 bits is damage the figures' rule counts 0; five classes at the edge of int64 sum to
    a total past 64 bits, as a damaged row's may.)"""
    db, home = tmp_path / "opencode.db", tmp_path / "xdg"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    rowid, data = conn.execute(
        "SELECT rowid, data FROM message WHERE data->>'role' = 'assistant' LIMIT 1"
    ).fetchone()
    message = json.loads(data)
    edge = (1 << 63) - 1
    message["tokens"] = {"input": edge, "output": edge, "reasoning": edge}
    message["tokens"]["cache"] = {"read": edge, "write": edge}
    conn.execute("UPDATE message SET data = ? WHERE rowid = ?", (json.dumps(message), rowid))
    conn.commit()
    conn.close()
    run = [sys.executable, "-m", "opencode_events", *command, "--db", str(db), "--format", "json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(home)}
    off = subprocess.run([*run, "--no-cache"], capture_output=True, env=env, check=True)
    assert json.loads(off.stdout)["total"]["total_tokens"] > 1 << 64
    for _ in range(2):
        on = subprocess.run(run, capture_output=True, env=env)
        assert (on.returncode, on.stdout, on.stderr) == (0, off.stdout, off.stderr)
    assert not list(home.rglob("memo-*"))


@pytest.mark.parametrize(
    "command", [["sessions"], ["usage", "--all"], ["usage", "--by", "day", "--all"], ["context"]]
)
def test_a_database_whose_path_is_not_utf8_is_cached(tmp_path, command) -> None:
    """A database in a folder named in another encoding (bytes that are not UTF-8, which
    Python holds as surrogates) is cached as any other: the path the cache's files name
    is one msgpack can write, and the report is made, kept and answered again."""
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    folder.mkdir()
    db, home = folder / "opencode.db", tmp_path / "xdg"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    run = [sys.executable, "-m", "opencode_events", *command, "--db", str(db), "--format", "json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(home)}
    off = subprocess.run([*run, "--no-cache"], capture_output=True, env=env)
    assert off.returncode == 0, off.stderr
    for _ in range(2):  # made, then answered from the cache
        on = subprocess.run(run, capture_output=True, env=env)
        assert (on.returncode, on.stdout, on.stderr) == (0, off.stdout, off.stderr)
    assert list(home.rglob("memo-*")) or list(home.rglob("ledger-*"))  # kept


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_pieces_spilled_by_processes_at_once_are_read_back_whole(tmp_path) -> None:
    """A spill is one file of no name shared by this process and its forked children:
    pieces each of them puts at the same time come back byte for byte from where ``put``
    said they are, and nothing is left in the cache's folder."""
    import random

    with open_store(SAMPLES / "task" / "opencode.db") as store:
        cache = ReportCache.open(store, root=tmp_path / "cache")
    spill = cache.spill()
    assert spill is not None
    read, write = os.pipe()
    pids = []
    for seed in range(3):
        pid = os.fork()
        if pid == 0:  # a child: its pieces, and where each went, down the pipe
            code = 1
            try:
                rng = random.Random(seed)
                for n in range(300):
                    piece = bytes([seed]) * rng.randrange(1, 9000) + n.to_bytes(2, "big")
                    where = spill.put(piece)
                    record = f"{seed} {n} {where} {len(piece)}\n".encode()
                    os.write(write, record)  # under PIPE_BUF: written at once
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(write)
    mine = [(spill.put(bytes([9]) * k), k) for k in range(1, 200)]  # this process too
    with os.fdopen(read, "rb") as pipe:
        records = pipe.read().decode().split()
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    assert len(records) == 4 * 900
    for seed, n, where, length in zip(*[iter(map(int, records))] * 4, strict=True):
        piece = spill.get(where, length)
        assert piece[:-2] == bytes([seed]) * (length - 2) and piece[-2:] == n.to_bytes(2, "big")
    assert all(spill.get(where, k) == bytes([9]) * k for where, k in mine)
    spill.close()
    assert list((tmp_path / "cache").rglob(".tmp-*")) == []


def _days_by_usage(db: Path, home: Path, env: dict[str, str], *more: str) -> list[str]:
    """The days of ``usage --all --by day`` of ``db``, its cache under ``home``."""
    argv = ["usage", "--db", str(db), "--all", "--by", "day", "--format", "json", *more]
    done = subprocess.run(
        [sys.executable, "-m", "opencode_events", *argv],
        env={**os.environ, "XDG_CACHE_HOME": str(home), **env},
        capture_output=True,
        check=True,
    )
    return [row["day"] for row in msgspec.json.decode(done.stdout)["rows"]]


def _drop_memos(home: Path) -> None:
    """Only the ledgers left: the next report is made from them."""
    for memo in (home / "opencode-events").glob("*/memo-*"):
        memo.unlink()


@pytest.mark.parametrize("kept", ["memo", "ledger"])
def test_a_report_in_local_time_is_not_given_under_another_local_zone(tmp_path, kept) -> None:
    """The local zone (``TZ``, POSIX rules here: no zone file needed) is part of the keys:
    a day kept in UTC is a day later at UTC+14, with the memo or only the ledger kept."""
    db, home = tmp_path / "opencode.db", tmp_path / "xdg"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)

    def days(zone: str, *more: str) -> list[str]:
        return _days_by_usage(db, home, {"TZ": zone}, *more)

    in_utc = days("UTC0")
    if kept == "ledger":
        _drop_memos(home)
    later = days("XYZ-14", "--no-cache")
    assert later != in_utc  # the sample's replies are late in the UTC day
    assert days("XYZ-14") == later
    assert days("UTC0") == in_utc


@pytest.mark.parametrize("kept", ["memo", "ledger"])
def test_a_report_in_a_named_zone_is_not_given_once_its_rules_change(tmp_path, kept) -> None:
    """``--tz ZONE``'s rules (its zone file, as ``ZoneInfo`` finds it) are part of the keys,
    as the local zone's are: a tzdata update that moves the zone's offset moves its days.
    Here ``PYTHONTZPATH`` names a folder whose ``Test/Zone`` is UTC's file, then UTC+14's."""
    zones = Path("/usr/share/zoneinfo")
    if not (zones / "UTC").is_file() or not (zones / "Pacific" / "Kiritimati").is_file():
        pytest.skip("no system zone files to build the zone from")
    db, home, path = tmp_path / "opencode.db", tmp_path / "xdg", tmp_path / "zones"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    (path / "Test").mkdir(parents=True)

    def days(source: str, *more: str) -> list[str]:
        shutil.copyfile(zones / source, path / "Test" / "Zone")
        return _days_by_usage(db, home, {"PYTHONTZPATH": str(path)}, "--tz", "Test/Zone", *more)

    in_utc = days("UTC")
    if kept == "ledger":
        _drop_memos(home)
    later = days("Pacific/Kiritimati", "--no-cache")
    assert later != in_utc  # the sample's replies are late in the UTC day
    assert days("Pacific/Kiritimati") == later
    assert days("UTC") == in_utc


def test_the_cache_is_bounded(tmp_path, monkeypatch) -> None:
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "MEMOS", 3)
    monkeypatch.setattr(report_cache, "DATABASES", 2)
    for limit in range(1, 8):
        with open_store(db) as store:
            cache = ReportCache.open(store, root=root)
            _written(store, "json", cache, limit=limit)
    assert len(list(root.glob("*/memo-*"))) == 3
    assert len(list(root.glob("*/render-*"))) == 3
    for n in range(4):
        other = tmp_path / f"other{n}.db"
        shutil.copyfile(db, other)
        _report(other, 0, root)
    assert len([p for p in root.iterdir() if p.is_dir()]) == 2


def test_the_bound_never_empties_a_folder_that_is_not_the_caches(tmp_path, monkeypatch) -> None:
    """The cache's own folders only: a link among them to a folder elsewhere (made by hand,
    or by another program) is never followed to empty it, and a folder of ours holding
    something not ours keeps that (a review found a link's target emptied)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "DATABASES", 1)
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("mine")
    root.mkdir()
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    stranger = root / "someone-elses"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("also mine")
    for path in (elsewhere, stranger, root / "linked"):
        os.utime(path, (1, 1), follow_symlinks=False)  # the least recently used of all
    for n in range(3):
        other = tmp_path / f"other{n}.db"
        shutil.copyfile(db, other)
        _report(other, 0, root)
    assert (elsewhere / "notes.txt").read_text() == "mine"
    assert (stranger / "keep.txt").read_text() == "also mine"
    assert (root / "linked").is_symlink()
    assert len([p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]) == 2


def test_a_folder_that_cannot_be_listed_leaves_the_others_bounded(tmp_path, monkeypatch) -> None:
    """``_fit`` lists every database's folder to count its bytes: one it cannot list (its
    permissions, or gone meanwhile) is passed over, and the rest still kept within the
    size (one error there let the whole cache grow unbounded)."""
    root = tmp_path / "cache"
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "session"}))
    dbs = []
    for n in range(3):
        db = tmp_path / f"opencode{n}.db"
        shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
        dbs.append(db)
    _report(dbs[0], which, root)
    budget = int(_kept_bytes(root) * 1.5)
    monkeypatch.setenv("OPENCODE_EVENTS_CACHE_SIZE", str(budget))
    blocked = root / "unlistable"
    blocked.mkdir()
    listing = os.scandir

    def scandir(path: Any = ".") -> Any:
        if str(path) == str(blocked):
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(report_cache.os, "scandir", scandir)
    for db in dbs[1:]:
        _report(db, which, root)
        assert _kept_bytes(root) <= budget


def test_ledgers_are_bounded_the_least_recently_used_going_first(tmp_path, monkeypatch) -> None:
    """At most ``LEDGERS`` ledgers stay per database (an undo window's, or one an older
    version of the tool kept under a name no longer asked for, would pile up else): the
    least recently written or read go first."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "LEDGERS", 3)

    def ledger_file(cache: ReportCache, n: int) -> Path:
        return cache.folder / f"ledger-{report_cache._digest(['test', [n]])}"

    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        sid = next(iter(cache.stamps))
        for n in range(3):
            cache.keep_ledger("test", [n], {sid: n})
            os.utime(ledger_file(cache, n), (100 * (n + 1),) * 2)  # written in this order
        assert ReportCache.open(store, root=root).ledger("test", [0], int) == {sid: 0}  # read
        cache.keep_ledger("test", [3], {sid: 3})  # a fourth: the least recently used goes
        assert sorted(p.name for p in cache.folder.glob("ledger-*")) == sorted(
            ledger_file(cache, n).name for n in (0, 2, 3)
        )
        fresh = ReportCache.open(store, root=root)
        assert [n for n in range(4) if fresh.ledger("test", [n], int)] == [0, 2, 3]


def _kept_files(root: Path) -> dict[Path, float]:
    """Every memo, rendition and ledger of the cache at ``root``, with its mtime."""
    return {
        f: f.stat().st_mtime
        for f in root.glob("*/*-*")
        if f.name.startswith(("memo-", "render-", "ledger-"))
    }


def _kept_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in _kept_files(root))


def test_the_cache_takes_at_most_its_size_in_bytes_the_least_recently_used_going(
    tmp_path, monkeypatch
) -> None:
    """Every database's memos, renditions and ledgers together take at most the cache's
    size (``$OPENCODE_EVENTS_CACHE_SIZE``): past it, the least recently written or read
    go first, of any database (a report read back from its memo is used again); what is
    left still answers as the database does, and what went is made again."""
    root = tmp_path / "cache"
    dbs = []
    for n in range(3):  # three databases alike: each report keeps about as much
        db = tmp_path / f"opencode{n}.db"
        shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
        dbs.append(db)
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "session"}))
    expected = [_report(db, which, None) for db in dbs]
    assert _report(dbs[0], which, root) == expected[0]
    budget = int(_kept_bytes(root) * 2.5)  # two databases' reports, not three
    monkeypatch.setenv("OPENCODE_EVENTS_CACHE_SIZE", str(budget))
    assert _report(dbs[1], which, root) == expected[1]
    time.sleep(0.02)  # mtimes apart
    memo = max(_kept_files(root).items(), key=lambda item: item[1])[0]
    assert _report(dbs[0], which, root) == expected[0]  # from its memo: used again
    assert max(_kept_files(root).items(), key=lambda item: item[1])[0].parent != memo.parent
    for round_ in range(3):
        before = _kept_files(root)
        time.sleep(0.02)
        db = dbs[(2 + round_) % 3]
        assert _report(db, which, root) == expected[(2 + round_) % 3]
        after = _kept_files(root)
        assert sum(f.stat().st_size for f in after) <= budget
        gone = [when for f, when in before.items() if f not in after]
        left = [when for f, when in before.items() if f in after and after[f] == when]
        assert gone or round_ > 0  # the third database's report: something had to go
        if gone:  # and what went was the least recently used
            assert max(gone) <= min(left, default=max(gone))
    for db, report in zip(dbs, expected, strict=True):
        assert _report(db, which, root) == report  # whatever went is made again
        assert _kept_bytes(root) <= budget


def test_a_report_larger_than_the_whole_cache_is_not_kept(tmp_path, monkeypatch) -> None:
    """A cache size smaller than one report's files: each goes once written (the run that
    wrote it is not slower for it), nothing is left, and every report is still the report
    of the database."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setenv("OPENCODE_EVENTS_CACHE_SIZE", "1K")
    for which in range(len(REPORTS)):
        expected = _report(db, which, None)
        assert _report(db, which, root) == expected
        assert _report(db, which, root) == expected
        assert _kept_bytes(root) <= 1024


def test_a_file_larger_than_half_the_cache_is_not_kept_so_others_stay(tmp_path) -> None:
    """A small cache and one large report (a report by turn of every session): kept, it
    pushed every other file out, and the next report pushed it out in turn."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root, budget=100_000)
        cache._write("memo-small", b"x" * 20_000)
        cache._write("memo-large", b"y" * 60_000)  # more than half: not kept
        cache._write("memo-half", b"z" * 45_000)  # less than half: kept, beside the first
    assert sorted(f.name for f in cache.folder.glob("memo-*")) == ["memo-half", "memo-small"]


@pytest.mark.parametrize("value", ["lots", "-1", "0", "1.5G"])
def test_a_cache_size_that_is_no_size_is_one_error(tmp_path, monkeypatch, value) -> None:
    """``$OPENCODE_EVENTS_CACHE_SIZE`` that is no size (K, M, G or bytes, more than none):
    the report says so, as ``$OPENCODE_EVENTS_MAX_LINE`` does, rather than go on unbounded
    or uncached without a word; the command: one ``error:`` line and exit 2."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setenv("OPENCODE_EVENTS_CACHE_SIZE", value)
    with open_store(db) as store, pytest.raises(InputError, match="OPENCODE_EVENTS_CACHE_SIZE"):
        ReportCache.open(store, root=tmp_path / "cache")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_events",
            "usage",
            "--db",
            str(db),
            "--all",
            "--format",
            "json",
        ],
        capture_output=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        f"error: OPENCODE_EVENTS_CACHE_SIZE: not a size in bytes: {value!r} (e.g. 16M)"
    ]


def test_a_memo_written_in_pieces_is_the_memos_one_encoding(tmp_path) -> None:
    """``remember`` writes a memo's parts one after another (a large report is not copied
    once more): the file holds exactly the encoding of the whole ``_Memo``."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    request = ["every", None, {"fold": True}, list(range(20))]
    value = {"rows": [{"id": f"ses_{n}", "cost": n / 7} for n in range(50)]}
    basis = [{"ses_1": 12}, {"ses_2": "ses_1"}]
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        assert cache is not None
        cache.remember("usage", request, value, [["/work", ["tools"]]], basis)
        (memo,) = root.glob("*/memo-*")
        header = report_cache._HEADER.decode(memo.read_bytes())
        token = report_cache._MEMO.decode(header.body).token  # drawn as it was written
        whole = report_cache._Memo(
            request,
            [["/work", ["tools"]]],
            msgspec.Raw(report_cache._ENCODER.encode(value)),
            msgspec.Raw(report_cache._ENCODER.encode(basis)),
            token=token,
        )
        assert len(token) == 8
        assert bytes(header.body) == report_cache._ENCODER.encode(whole)
        assert cache.recall("usage", request, dict, lambda checks: True) == value


@pytest.mark.parametrize("piece", [700, 1 << 20], ids=["many groups", "one group"])
def test_a_memo_spooled_item_by_item_reads_back_a_group_at_a_time(
    tmp_path, monkeypatch, piece
) -> None:
    """A report of every session made one at a time is kept as a memo spooled summary by
    summary (``memo_spool``): its value, the head and the items after it, is byte for byte
    what ``remember`` writes of the whole report (``recall`` reads it), with the groups it
    was written in, by which ``recall_each`` and ``previous_each`` read it back from the
    file a group at a time."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "_PIECE", piece)
    request = ["every", None, list(range(20))]
    basis = [{"ses_1": 12}, {"ses_2": "ses_1"}]
    checks = [["/work", ["tools"]]]
    with open_store(db) as store:
        report = sessions_report(store, all_sessions=True)
        assert len(report.sessions) > 1
        cache = ReportCache.open(store, root=root)
        assert cache is not None
        spool = cache.memo_spool("sessions", request, "sessions", SessionSummary)
        for summary in report.sessions:
            spool.add_item(summary)
        spool.keep(checks, basis)
        (memo,) = root.glob("*/memo-*")
        data = memo.read_bytes()  # the head's length, the head, then the items
        length = int.from_bytes(data[:8], "big")
        kept = report_cache._MEMO.decode(report_cache._HEADER.decode(data[8 : 8 + length]).body)
        head = msgspec.msgpack.decode(kept.value, type=bytes)
        assert head + data[8 + length :] == report_cache._ENCODER.encode(report)
        assert msgspec.msgpack.decode(kept.basis) == basis and kept.checks == checks
        assert sum(group[0] for group in kept.groups) == len(report.sessions)
        assert len(kept.groups) > 1 if piece == 700 else len(kept.groups) == 1
        assert cache.recall("sessions", request, SessionsReport, lambda c: True) == report
        args = ("sessions", request, SessionsReport, "sessions", SessionSummary, lambda c: True)
        assert list(cache.recall_each(*args)) == report.sessions
        monkeypatch.setattr(cache, "_only_opencode_since", lambda then: True)  # as if it had
        items, then, consulted = cache.previous_each(*args)
        assert list(items) == report.sessions and then == basis and consulted == checks


def test_a_spooled_memo_of_nothing_or_cut_short(tmp_path) -> None:
    """A spooled memo of no sessions reads back as none; one cut short, or added to, is
    not read at all (its items' length is its groups')."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    args = ("sessions", ["x"], SessionsReport, "sessions", SessionSummary, lambda c: True)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        cache.memo_spool("sessions", ["x"], "sessions", SessionSummary).keep(None, None)
        assert list(ReportCache.open(store, root=root).recall_each(*args)) == []
        empty = ReportCache.open(store, root=root).recall("sessions", ["x"], SessionsReport)
        assert empty == SessionsReport(sessions=[])
        spool = cache.memo_spool("sessions", ["x"], "sessions", SessionSummary)
        for summary in sessions_report(store, all_sessions=True).sessions:
            spool.add_item(summary)
        spool.keep(None, None)
        (memo,) = root.glob("*/memo-*")
        whole = memo.read_bytes()
        for damaged in (whole[:-1], whole + b"\x00"):
            memo.write_bytes(damaged)
            again = ReportCache.open(store, root=root)
            assert again.recall_each(*args) is None
            assert again.recall("sessions", ["x"], SessionsReport) is None


def test_an_item_that_would_not_read_back_keeps_no_memo(tmp_path) -> None:
    """A summary its memo could not give back (a damaged row's id that is no text) keeps
    no memo: the report is made again next time. One said to be read from a memo is not
    decoded again: given so falsely, the memo is kept, and its group fails to read after
    all, as one changed in place would (never by a run of ours): an error, and the memo is
    let go."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    request = ["every"]
    args = ("sessions", request, SessionsReport, "sessions", SessionSummary, lambda c: True)
    with open_store(db) as store:
        report = sessions_report(store, all_sessions=True)
        odd = msgspec.structs.replace(report.sessions[0], id=None)
        cache = ReportCache.open(store, root=root)
        assert cache is not None
        spool = cache.memo_spool("sessions", request, "sessions", SessionSummary)
        for summary in [*report.sessions, odd]:
            spool.add_item(summary)
        spool.keep(None, None)
        assert not list(root.glob("*/memo-*"))
        assert cache.recall_each(*args) is None
        spool = cache.memo_spool("sessions", request, "sessions", SessionSummary)
        for summary in report.sessions:
            spool.add_item(summary)
        spool.add_item(odd, from_memo=True)
        spool.keep(None, None)
        (memo,) = root.glob("*/memo-*")
        items = cache.recall_each(*args)
        assert items is not None
        with pytest.raises(InputError, match="damaged while read"):
            list(items)
        assert not memo.exists()


@pytest.mark.parametrize("changed", [1, 2], ids=["brought up to date", "made again"])
def test_a_report_of_every_session_holds_no_memo_or_ledger_it_does_not_use(
    tmp_path, monkeypatch, changed
) -> None:
    """While a report of every session is written, the memo it brings up to date is read
    as it goes, and a memo or a ledger it read and does not use (too many sessions
    changed: the whole tables are read) is not held: at 100,000 sessions each is about
    80 MB. The report is the one ``--no-cache`` gives."""
    monkeypatch.setattr(sessions_module, "WHOLE_TABLE_SESSIONS", 2)
    db, root, spare = tmp_path / "opencode.db", tmp_path / "cache", tmp_path / "spare.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(db) as store:
        _written(store, "json", ReportCache.open(store, root=root), all_sessions=True)
    sources = {name: sqlite3.connect(SAMPLES / name / "opencode.db") for name in SOURCES}
    for pick in range(changed):  # OpenCode's writes, to as many sessions
        _change(db, ("new_message", True, pick, "task"), sources, spare)
    for conn in sources.values():
        conn.close()
    request = sessions_module._request(all_sessions=True)
    memo = report_cache._memo_name("sessions", request)
    ledger = f"ledger-{report_cache._digest(['sessions', sessions_module._LEDGER_REQUEST])}"
    held = []
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)

        def render(summaries):
            def each():
                for summary in summaries:
                    held.append((cache._memos.get(memo) is not None, ledger in cache._ledgers))
                    yield summary

            return rows.json_list_pieces(each())

        out = io.BytesIO()
        write_sessions(store, "json", render, out, cache=cache, each=True, all_sessions=True)
        expected = _written(store, "json", None, all_sessions=True)
    assert out.getvalue() == expected and len(held) > 1
    if changed == 1:  # read from the memo as it goes: held till the last summary
        assert all(memo_held for memo_held, _ledger_held in held)
    else:
        assert not any(memo_held or ledger_held for memo_held, ledger_held in held)


@pytest.mark.parametrize(
    ("sessions", "count", "by_session"),
    [
        (10_000, 1_999, True),  # the bench database: a fifth of it read by the index
        (10_000, 2_000, False),
        (100_000, 19_999, True),  # 30 GB: 20 % of the sessions read by the index
        (100_000, 20_000, False),
        (1_000, 199, True),  # fewer than 200: by the index whatever the share
        (1_000, 200, False),  # 20 % of 1,000 is 200: the whole tables
        (50, 199, True),
    ],
)
def test_changed_sessions_are_read_by_session_up_to_a_fifth(
    monkeypatch, sessions, count, by_session
) -> None:
    """How many changed sessions are read one by one rather than the whole tables: fewer
    than 200, or than 20 % of a larger database's."""

    class Counted:
        def session_count(self) -> int:
            return sessions

    monkeypatch.setattr(sessions_module, "offers_fast_scans", lambda store: True)
    assert sessions_module._by_session(count, Counted()) is by_session


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), max_size=4),
    piece=st.integers(1, 5),
)
def test_a_value_encoded_in_pieces_is_its_one_encoding(sizes, piece) -> None:
    """A long list a few items at a time, a report field by field: the pieces joined are
    the value's encoding, byte for byte, whatever the lengths (around each array head's
    size: 15, 16, 65,535, 65,536 items)."""
    from opencode_events.reports.sessions import SessionsReport, SessionSummary

    def summary(n: int) -> SessionSummary:
        return SessionSummary(
            id=f"ses_{n}",
            path="p",
            parent_id=None,
            title="t" * n,
            agent=None,
            model=None,
            provider=None,
            directory="/w",
            version="1",
            time_created=n,
            time_updated=n,
            mcp_calls={"m": n},
            children=[f"ses_{n}x"],
        )

    values = [[summary(n) for n in range(size)] for size in sizes]
    values += [SessionsReport(sessions=v) for v in values] + [{"a": [1] * 30}, "x", None]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(report_cache, "_LIST_PIECE", piece)
        for value in values:
            pieces = list(report_cache._encoded_in_pieces(value))
            assert b"".join(pieces) == report_cache._ENCODER.encode(value)
    for length in (15, 16, 65_535, 65_536):
        value = [0] * length
        assert b"".join(report_cache._encoded_in_pieces(value)) == report_cache._ENCODER.encode(
            value
        )


def test_a_rendition_spooled_piece_by_piece_is_kept_whole(tmp_path, monkeypatch) -> None:
    """``rendering`` gives a spool the bytes go to as they are written elsewhere: kept,
    they are the rendition; discarded, nothing is left; copied in the kernel or, where the
    kernel will not (``sendfile`` refusing), read and written."""
    import errno

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    pieces = [b"[", b"x" * 3_000_000, b"", b"]\n"]
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        assert cache.rendering("sessions", ["any"], "json") is None  # no memo kept yet
        cache.remember("sessions", ["any"], [])
        spool = cache.rendering("sessions", ["any"], "json")
        for piece in pieces:
            spool.add(piece)
        assert not list(root.rglob("render-*")) and not list(root.rglob(".tmp-*"))
        spool.keep()
        assert cache.rendered("sessions", ["any"], "json").read() == b"".join(pieces)
        spool = cache.rendering("sessions", ["any"], "csv")
        spool.add(b"id\n")
        spool.discard()
        spool.keep()  # nothing: it was discarded
        assert cache.rendered("sessions", ["any"], "csv") is None

        def refused(*args):
            raise OSError(errno.EINVAL, "not here")

        monkeypatch.setattr(os, "sendfile", refused)
        cache.keep_rendered("sessions", ["any"], "json", [b"[", b"y" * 100_000, b"]"])
        assert cache.rendered("sessions", ["any"], "json").read() == b"[" + b"y" * 100_000 + b"]"
    assert not list(root.rglob(".tmp-*"))


def test_a_spool_that_cannot_write_keeps_nothing_and_the_report_goes_out(
    tmp_path, monkeypatch
) -> None:
    """A spool whose file cannot be written (a full disk) stops keeping; the command's
    output is whole all the same, and the next run makes the report again."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(db) as store:
        expected = b"".join(RENDER["json"](sessions_report(store).sessions))
    real_write = os.write

    def full(fd, data):
        if os.fstat(fd).st_nlink == 0:  # the spool: a file of no name
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    assert _rendered(db, root) == expected
    assert not list(root.rglob("render-*")) and not list(root.rglob(".tmp-*"))
    monkeypatch.undo()
    assert _rendered(db, root) == expected and list(root.rglob("render-*"))


def test_a_write_that_bypasses_the_event_log_is_seen(tmp_path) -> None:
    """Another program updates a logged session in place, and OpenCode writes nothing: the
    log did not move while the database changed, so no stamp is trusted."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    before = _report(db, 0, root)
    conn = sqlite3.connect(db)
    (pid, data) = conn.execute(
        "SELECT id, data FROM part WHERE data LIKE '%\"completed\"%' LIMIT 1"
    ).fetchone()
    conn.execute(
        "UPDATE part SET data = ? WHERE id = ?", (data.replace('"completed"', '"error"'), pid)
    )
    conn.commit()
    conn.close()
    after = _report(db, 0, root)
    assert after == _report(db, 0, None) != before


def test_context_reads_a_session_again_when_its_mcp_servers_change(tmp_path) -> None:
    """context's ledger keeps messages as read with the servers configured then: another
    configuration reads them again (a tool of a server named now is attributed to it)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "mcp" / "opencode.db", db)
    with open_store(db) as store:
        (newest,) = select_sessions(store, [])[:1]
        reports = []
        for names in ([], ["my-tools_v1"], []):
            cache = ReportCache.open(store, root=root)
            fresh = context_report(store, newest, servers=lambda d, n=names: n)
            cached = context_report(store, newest, servers=lambda d, n=names: n, cache=cache)
            assert msgspec.json.encode(cached.document()) == msgspec.json.encode(fresh.document())
            reports.append(msgspec.json.encode(cached.document()))
    assert reports[0] != reports[1] and reports[0] == reports[2]


def test_what_a_pending_undo_undid_is_read_once_per_stamp(tmp_path, monkeypatch) -> None:
    """samples/serve_revert has a pending /undo: its undone steps are read for the first
    report, kept under the session's stamp, and read again only when the stamp moves."""
    from opencode_events.reports import undone as undone_module

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "serve_revert" / "opencode.db", db)
    shutil.copyfile(SAMPLES / "task" / "opencode.db", tmp_path / "other.db")
    reads: list[str] = []
    original = undone_module._undone_of
    monkeypatch.setattr(
        undone_module,
        "_undone_of",
        lambda store, sid, *a: reads.append(sid) or original(store, sid, *a),
    )
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))
    first = _report(db, which, root)
    assert b"pending /undo" in first and len(reads) == 1
    conn = sqlite3.connect(db)  # another session changes: the memo is stale, the stamp not
    src = sqlite3.connect(tmp_path / "other.db")
    _copy_session(conn, src, _sessions(src)[0], logged=True)
    conn.commit()
    assert _report(db, which, root) == _report(db, which, None)
    assert len(reads) == 2  # the recomputation without a cache read it; the cached one did not
    (reverted,) = _rows(conn, "SELECT id FROM session WHERE revert IS NOT NULL")
    _log(conn, reverted[0], "session.updated.1")  # its stamp moves: read again
    conn.commit()
    conn.close()
    src.close()
    assert _report(db, which, root) == _report(db, which, None)
    assert len(reads) == 4


def _rendered(db: Path, root: Path, servers: list[str] | None = None) -> bytes:
    with open_store(db) as store:
        return _written(
            store,
            "json",
            ReportCache.open(store, root=root),
            mcp_servers=None if servers is None else (lambda directory: servers),
        )


def test_a_repeat_is_copied_from_its_rendition_until_something_changes(
    tmp_path, monkeypatch
) -> None:
    """The bytes a command wrote answer its repeat whole: no report is decoded or written
    again. A change to the database, or to the MCP servers the report consulted, and the
    report is made again (and its new bytes kept)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "mcp" / "opencode.db", db)
    first = _rendered(db, root)
    assert len(list(root.glob("*/render-*"))) == 1
    recalled = []

    def spied(real):  # the memo asked for, whole (``recall``) or as it goes (``recall_each``)
        def recall(self, *args, **kwargs):
            recalled.append(args[0])
            return real(self, *args, **kwargs)

        return recall

    monkeypatch.setattr(ReportCache, "recall", spied(ReportCache.recall))
    monkeypatch.setattr(ReportCache, "recall_each", spied(ReportCache.recall_each))
    assert _rendered(db, root) == first and recalled == []  # from the rendition alone
    changed = _rendered(db, root, servers=["my-tools_v1"])  # the report consulted them
    assert recalled == ["sessions"] and changed != first
    assert changed == _rendered(db, root, servers=["my-tools_v1"]) and len(recalled) == 1
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT id FROM session LIMIT 1").fetchone()
    conn.execute("UPDATE session SET title = 'renamed' WHERE id = ?", (sid,))
    conn.commit()
    conn.close()
    renamed = _rendered(db, root)
    assert len(recalled) == 2 and b"renamed" in renamed
    with open_store(db) as store:
        assert renamed == b"".join(RENDER["json"](sessions_report(store).sessions))


def test_a_report_that_is_not_kept_gets_no_rendition(tmp_path, monkeypatch) -> None:
    """Only a report kept as a memo (or found sound) in this run has its bytes kept: a
    report with a reply in flight is not kept (its state turns stale with the clock), and
    neither are its bytes."""
    import types

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "sigint" / "opencode.db", db)  # a run killed mid-reply
    with sqlite3.connect(db) as conn:
        (last,) = conn.execute("SELECT max(time_updated) FROM part").fetchone()
    just_after = types.SimpleNamespace(time=lambda: last / 1000 + 1)
    monkeypatch.setattr(sessions_module, "time", just_after)
    busy = _rendered(db, root)
    assert b'"busy"' in busy
    assert not list(root.rglob("memo-*")) and not list(root.rglob("render-*"))
    monkeypatch.undo()
    assert b'"busy"' not in _rendered(db, root)  # later, stale: kept
    assert list(root.rglob("render-*"))
    shutil.rmtree(root)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        cache.keep_rendered("sessions", ["any"], "json", b"[]")
        assert not list(root.rglob("render-*"))
        cache.remember("sessions", ["any"], [])
        cache.keep_rendered("sessions", ["any"], "json", b"[]\n")
        assert cache.rendered("sessions", ["any"], "json").read() == b"[]\n"
        assert cache.rendered("sessions", ["any"], "csv") is None
        assert cache.rendered("sessions", ["other"], "json") is None


def test_a_rendition_is_copied_from_the_file_it_was_checked_in(tmp_path) -> None:
    """The file stays open from its check to its copy: another run's replacement (a
    rename) changes nothing; a file cut short in place (no run of ours does that) is one
    error, not a short report passed off as whole."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    first = _rendered(db, root)
    (path,) = root.rglob("render-*")
    with open_store(db) as store:
        request = sessions_module_request()
        cache = ReportCache.open(store, root=root)
        kept = cache.rendered("sessions", request, "json", lambda checks: True)
        path.rename(path.with_name("elsewhere"))
        path.write_bytes(b"replaced")
        assert kept.read() == first
        path.unlink()
        path.with_name("elsewhere").rename(path)
        kept = cache.rendered("sessions", request, "json", lambda checks: True)
        with open(path, "r+b") as file:
            file.truncate(len(path.read_bytes()) - 10)
        with pytest.raises(InputError, match="cut short"):
            kept.read()


def _kept_rendition(tmp_path: Path):
    """A sample's sessions JSON and a function giving its rendition, checked anew."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    first = _rendered(db, root)
    (path,) = root.rglob("render-*")
    store = open_store(db)
    cache = ReportCache.open(store, root=root)

    def rendition():
        return cache.rendered("sessions", sessions_module_request(), "json", lambda c: True)

    return first, path, rendition, store


def test_a_rendition_goes_to_a_file_or_a_pipe_by_sendfile_in_order(tmp_path, monkeypatch):
    """Copied in the kernel to a descriptor of its own, after what the output held, before
    what is written next; an in-memory output gets the same bytes through a buffer."""
    first, _, rendition, store = _kept_rendition(tmp_path)
    calls = []
    real_sendfile = os.sendfile

    def sendfile(*args):
        calls.append(args[3])
        return real_sendfile(*args)

    monkeypatch.setattr(os, "sendfile", sendfile)
    with store, open(tmp_path / "out.json", "wb") as out:
        out.write(b"before\n")
        rendition().write_to(out)
        out.write(b"\nafter")
    assert (tmp_path / "out.json").read_bytes() == b"before\n" + first + b"\nafter"
    assert calls and calls[0] == len(first)
    read_end, write_end = os.pipe()
    with open(write_end, "wb") as out, open(read_end, "rb") as got:
        rendition().write_to(out)  # the sample's JSON fits in the pipe
        out.close()
        assert got.read() == first
    assert len(calls) >= 2
    assert rendition().read() == first and len(calls) >= 2  # BytesIO: not sent


@pytest.mark.parametrize("errno_", ["EINVAL", "ENOSYS", "ENOTSOCK"])
def test_where_sendfile_cannot_write_the_bytes_are_copied(tmp_path, monkeypatch, errno_):
    import errno

    first, _, rendition, store = _kept_rendition(tmp_path)

    def cannot(*args):
        raise OSError(getattr(errno, errno_), "not here")

    monkeypatch.setattr(os, "sendfile", cannot)
    with store, open(tmp_path / "out.json", "wb") as out:
        out.write(b"[")
        rendition().write_to(out)
    assert (tmp_path / "out.json").read_bytes() == b"[" + first


def test_a_rendition_cut_short_is_an_error_on_a_file_too(tmp_path):
    first, path, rendition, store = _kept_rendition(tmp_path)
    with store:
        kept = rendition()
        with open(path, "r+b") as file:
            file.truncate(len(path.read_bytes()) - 10)
        with (
            open(tmp_path / "out.json", "wb") as out,
            pytest.raises(InputError, match="cut short"),
        ):
            kept.write_to(out)
    assert (tmp_path / "out.json").read_bytes() == first[:-10]


def test_a_closed_pipe_while_sending_is_a_broken_pipe(tmp_path):
    first, _, rendition, store = _kept_rendition(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    with store, open(write_end, "wb") as out, pytest.raises(BrokenPipeError):
        rendition().write_to(out)


def sessions_module_request() -> list:
    return sessions_module._request(None, None, False, True, None)


def test_the_sessions_ledger_shares_its_tool_calls_as_the_scan_does(tmp_path) -> None:
    """Decoded, the sessions ledger gives sessions with the same (tool, failed, calls) one
    tuple, with one string for a tool's name, as the counts of a scan do: a large ledger
    then holds a few thousand tuples, not one per session and tool. The report from it is
    the report without the cache."""
    db = _odd_database(tmp_path, [("new_session", True, 1, "task")], [])
    root = tmp_path / "cache"
    which = REPORTS.index(("sessions", {"all_sessions": True}))
    expected = _report(db, which, None)
    assert _report(db, which, root) == expected
    for memo in root.rglob("memo-*"):
        memo.unlink()
    with open_store(db) as store:
        kept = sessions_module._kept_counts(ReportCache.open(store, root=root))
    calls = [call for entry in kept.values() for call in entry.tools]
    assert len(calls) > len({*calls})  # sessions with a call alike
    assert len({id(call) for call in calls}) == len({*calls})
    names = {}
    for tool, _failed, _calls in calls:
        assert names.setdefault(tool, tool) is tool
    assert _report(db, which, root) == expected


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing is kept aside")
@pytest.mark.parametrize("workers", [None, "1"], ids=["aside", "one process"])
def test_a_large_ledger_is_kept_aside_and_in_place_when_the_report_returns(
    tmp_path, monkeypatch, workers
) -> None:
    """A large ledger is made and written by a forked child while the report is made
    (with ``OPENCODE_EVENTS_WORKERS=1``, by this process): either way it is in place when
    the report returns, no child is left, and the next report reads only what changed."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "ASIDE_ENTRIES", 1)  # "large" from one session on
    if workers is None:
        monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)
    else:
        monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(report_cache.os, "fork", lambda: forks.append(1) or real_fork())
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))
    children = children_of_this_process()
    first = _report(db, which, root)
    assert len(forks) == (1 if workers is None else 0)
    assert children_of_this_process() == children  # reaped before the report returned
    assert first == _report(db, which, None)
    _subagent_replied(db, root)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        report = stored_usage(store, cache=cache, all_sessions=True, by="day")
        assert cache.hits == 1  # the parent from the ledger the child wrote
    assert msgspec.json.encode(report.document()) == _report(db, which, None)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing is kept aside")
def test_a_ledger_brought_up_to_date_is_kept_aside_by_its_size(tmp_path, monkeypatch) -> None:
    """The ledger written after a few sessions changed holds every session's entry, those
    kept as they were too: it is as large as the first, and kept aside by a forked child as
    the first was (its size, not the number of sessions read again, decides)."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setattr(report_cache, "ASIDE_ENTRIES", 2)  # both sessions' entries
    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(report_cache.os, "fork", lambda: forks.append(1) or real_fork())
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))
    _report(db, which, root)
    assert len(forks) == 1
    _subagent_replied(db, root)
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        report = stored_usage(store, cache=cache, all_sessions=True, by="day")
        assert cache.hits == 1  # the parent's entry kept, the subagent's read again
        cache.close()
    assert len(forks) == 2  # two entries: kept aside
    assert msgspec.json.encode(report.document()) == _report(db, which, None)


def test_a_ledger_write_stopped_leaves_the_collector_on(tmp_path, monkeypatch) -> None:
    """A report stopped (Ctrl-C) while the ledger is written from the entries it kept, its
    error held by the caller (a notebook keeps the last one): the cycle collector, paused
    while the kept entries are read, is back on when the call has raised."""
    import gc

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "1")  # the ledger written in this process
    which = REPORTS.index(("usage", {"all_sessions": True, "by": "day"}))
    _report(db, which, root)
    _subagent_replied(db, root)
    monkeypatch.setattr(report_cache, "_PIECE", 1)  # a piece an entry
    real = ReportCache._ledger_pieces

    def stopped(self: ReportCache, head: bytes, entries: Any) -> Any:
        for piece in real(self, head, entries):
            yield piece
            if not gc.isenabled():  # a kept entry given: Ctrl-C
                raise KeyboardInterrupt

    monkeypatch.setattr(ReportCache, "_ledger_pieces", stopped)
    assert gc.isenabled()
    held: list[BaseException] = []
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        try:
            stored_usage(store, cache=cache, all_sessions=True, by="day")
        except KeyboardInterrupt as exc:
            held.append(exc)
        cache.close()
    collecting = gc.isenabled()
    held.clear()  # the generators it held let go: on again, whatever this test finds
    assert collecting


def test_many_sessions_changed_are_read_by_children_as_a_full_reading(
    tmp_path, monkeypatch
) -> None:
    """The sessions changed since the last report, when 32 or more (the bench's 1 % of
    10,000 is 100), have their parts read by forked children with apsw: the report brought
    up to date is still the one a reading without the cache gives, in every form."""
    from tests.stores import generated

    db, root = generated(tmp_path / "opencode.db", sessions=80, parts=4000), tmp_path / "cache"
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    started: list[bool] = []
    real = sessions_module._start_scoped

    def watched(store: Any, scope: Any) -> Any:
        pending = real(store, scope)
        started.append(pending is not None)
        return pending

    monkeypatch.setattr(sessions_module, "_start_scoped", watched)
    which = [
        REPORTS.index(("sessions", {"all_sessions": True})),
        REPORTS.index(("sessions as json", {"all_sessions": True})),
        REPORTS.index(("sessions", {"all_sessions": True, "fold": False})),
    ]
    for n in which:
        _report(db, n, root)  # the cache filled
    for n in which:  # each report after its own round of changes
        assert _replied_in_half(db) >= sessions_module._FORKED_SCOPE_MIN
        started.clear()
        assert _report(db, n, root) == _report(db, n, None), REPORTS[n]
        assert started and started[0], REPORTS[n]  # the children read the changed ones


def _replied_in_half(db: Path) -> int:
    """A reply more, with its last two parts again, in every other session, as OpenCode
    writes one (the session's row and sequence moved): how many sessions changed."""
    conn = sqlite3.connect(db)
    changed = 0
    for sid in _sessions(conn)[::2]:
        row = conn.execute(
            "SELECT time_created, data FROM message WHERE session_id = ? "
            "ORDER BY rowid DESC LIMIT 1",
            (sid,),
        ).fetchone()
        if row is None:
            continue
        created, data = row
        new = _fresh("msg")
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (new, sid, created + 1, created + 1, data),
        )
        for (part,) in conn.execute(
            "SELECT data FROM part WHERE session_id = ? ORDER BY rowid DESC LIMIT 2", (sid,)
        ).fetchall():
            conn.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (_fresh("prt"), new, sid, created + 1, created + 1, part),
            )
        conn.execute("UPDATE session SET time_updated = ? WHERE id = ?", (created + 1, sid))
        _log(conn, sid, "message.updated.1")
        changed += 1
    conn.commit()
    conn.close()
    return changed


def test_kept_turns_out_of_the_sessions_order_are_a_damaged_memo(tmp_path) -> None:
    """Rows of a report by turn brought up to date come from the memo in the order of the
    sessions; a kept row of a session no longer there, or out of that order, is a memo
    damaged or not ours: one error, and the memo deleted, so that the next run reads
    everything instead of failing again."""
    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    memo = ("usage-all", ["turn"])
    with open_store(db) as store:
        cache = ReportCache.open(store, root=root)
        assert cache is not None
        spool = cache.memo_spool(*memo, "rows", usage_module.UsageRow)
        spool.keep(None, [])
        (path,) = root.glob("*/memo-*")
        rows = [usage_module.UsageRow(session_id=sid) for sid in ("b", "a")]
        merged = usage_module._rows_merged(["a", "b"], set(), {}, iter(rows), cache, memo)
        assert next(merged).session_id == "b"  # a's row was looked for first: not there
        with pytest.raises(InputError, match="run again"):
            list(merged)
        assert not path.exists()
        in_order = usage_module._rows_merged(
            ["a", "b"], {"b"}, {"b": [rows[0]]}, iter(rows[::-1]), cache, memo
        )
        assert [row.session_id for row in in_order] == ["a", "b"]


# ------------------------------------------------------- files replaced, clocks gone back


def _wal_copy(sample: str, db: Path) -> None:
    """samples/``sample``'s store at ``db`` in WAL mode, as OpenCode keeps its own (SQLite
    then leaves the header's change counter as it was)."""
    shutil.copyfile(SAMPLES / sample / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()


def test_a_copy_written_over_the_database_in_place_is_seen(tmp_path):
    """``cp other.db opencode.db`` then ``touch -r``: the same inode, size, header, edges
    and modification time; only the change time tells (no one can set it)."""
    db, other, root = tmp_path / "opencode.db", tmp_path / "other.db", tmp_path / "cache"
    _wal_copy("task", db)
    _wal_copy("task", other)
    conn = sqlite3.connect(other)
    conn.execute("UPDATE session SET title = 'EDITED ' || substr(title, 8)")  # same length
    conn.commit()
    conn.close()
    assert db.stat().st_size == other.stat().st_size
    which = [0, REPORTS.index(("usage", {"all_sessions": True, "by": "session"}))]
    for report in which:
        _report(db, report, root)
    before = db.stat()
    shutil.copyfile(other, db)  # in place: the same inode
    os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert db.stat().st_ino == before.st_ino
    for report in which:
        assert _report(db, report, root) == _report(db, report, None), REPORTS[report]


@pytest.mark.parametrize("restore", ["moved", "copied"])
def test_a_backup_restored_then_written_by_opencode_is_read_again(tmp_path, restore):
    """The cache saw session X at seq n+1; a backup with X at n comes back (moved over the
    file, or copied in place); OpenCode writes X again (n+1, another content) and another
    session: the log moved on overall, and X's stamp is the one the cache kept."""
    db, backup, root = tmp_path / "opencode.db", tmp_path / "backup.db", tmp_path / "cache"
    _wal_copy("fork", db)
    shutil.copyfile(db, backup)

    def opencode_writes(sid: str, cost: float) -> None:
        conn = sqlite3.connect(db)
        conn.execute("UPDATE session SET cost = ?, title = ? WHERE id = ?", (cost, str(cost), sid))
        _log(conn, sid, "session.updated.1")
        conn.commit()
        conn.close()

    opencode_writes(FORK_A, 1.25)
    reports = [0, EVERY_DAY, EVERY_TURN]
    for which in reports:
        _report(db, which, root)
    if restore == "moved":
        os.replace(backup, db)
    else:
        shutil.copyfile(backup, db)
    opencode_writes(FORK_A, 9.75)
    opencode_writes(FORK_B, 0.5)
    for which in reports:
        assert _report(db, which, root) == _report(db, which, None), REPORTS[which]


def test_a_report_kept_stale_is_not_given_after_the_clock_went_back(tmp_path, monkeypatch):
    """A reply left in flight is ``stale`` once silent for the limit, and such a report is
    kept (only a busy one is not: the clock alone would change it). The clock stepped back
    (NTP, a snapshot resumed) to where the reply is ``busy`` again: the kept report said
    stale."""
    import time as clock

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "sigint" / "opencode.db", db)
    (last,) = sqlite3.connect(db).execute("SELECT max(time_updated) FROM session").fetchone()
    # Stale now by a minute; two minutes ago, busy.
    monkeypatch.setenv("OPENCODE_EVENTS_STALE_AFTER", str(int(clock.time() - last / 1000) - 60))
    which = REPORTS.index(("sessions", {}))
    first = _report(db, which, root)
    assert b'"stale"' in first
    real, real_ns = clock.time, clock.time_ns
    monkeypatch.setattr(clock, "time", lambda: real() - 120)
    monkeypatch.setattr(clock, "time_ns", lambda: real_ns() - 120 * 10**9)
    again = _report(db, which, root)
    assert again == _report(db, which, None)
    assert b'"busy"' in again


def test_a_cache_folder_planted_or_shared_is_not_used(tmp_path):
    """On a shared machine (``XDG_CACHE_HOME=/tmp/x``) another user may make the folder
    first: a link planted as the database's folder redirected the cache's writes, and a
    folder of theirs could hold forged reports. A folder that is no real folder of this
    user's is not used (the report is made without it); one of ours that others may write
    (an older run under umask 002) is made private."""
    import stat

    from opencode_events.store.changes import database_identity

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir(mode=0o700)
    with open_store(db) as store:
        (root / database_identity(store)).symlink_to(elsewhere)
        assert ReportCache.open(store, root=root) is None
    assert _report(db, 0, root) == _report(db, 0, None)
    assert not list(elsewhere.iterdir())
    (root / database_identity(store)).unlink()
    root.chmod(0o777)
    with open_store(db) as store:
        assert ReportCache.open(store, root=root) is not None
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / database_identity(store)).stat().st_mode) == 0o700


def test_a_reader_opening_a_live_database_changes_no_fingerprint(tmp_path):
    """SQLite running as root chowns the -wal and -shm at every open, a read included: their
    change time moves with no write. The -wal's ctime in the fingerprint made every report
    of a live database (OpenCode running, as root in a container) read everything again.
    (Not root, the chown does not happen and this holds either way.)"""
    import time

    from opencode_events.store.changes import fingerprint

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    writer = sqlite3.connect(db)  # OpenCode, running: its -wal and -shm stay
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("UPDATE session SET title = title")
    writer.commit()
    try:
        with open_store(db) as store:
            before = fingerprint(store)
        time.sleep(0.05)
        with open_store(db) as store:
            store.sessions()  # a read: SQLite opens the -wal
            after = fingerprint(store)
        assert Path(f"{db}-wal").exists()
        assert after == before
    finally:
        writer.close()


def test_a_wal_written_over_in_place_is_seen(tmp_path):
    """The -wal's ctime left the key (SQLite chowns it as root at every open): a -wal copied
    over the live one in place, size, header and mtime kept, was then the same key. Its last
    frame's checksums, cumulative over every frame, tell it."""
    live, snap, root = tmp_path / "live", tmp_path / "snap", tmp_path / "cache"
    live.mkdir()
    snap.mkdir()
    db = live / "opencode.db"
    _wal_copy("task", db)
    writer = sqlite3.connect(db)  # OpenCode running: the -wal stays
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE session SET title = 'BASE   ' || substr(title, 8)")
    writer.commit()
    for side in ("", "-wal"):
        shutil.copyfile(f"{db}{side}", snap / f"opencode.db{side}")
    other = sqlite3.connect(snap / "opencode.db")
    other.execute("PRAGMA wal_autocheckpoint=0")
    other.execute("UPDATE session SET title = 'OTHER  ' || substr(title, 8)")
    other.commit()
    writer.execute("UPDATE session SET title = 'LIVE   ' || substr(title, 8)")
    writer.commit()
    try:
        which = REPORTS.index(("sessions", {"all_sessions": True}))
        _report(db, which, root)
        wal, copy = Path(f"{db}-wal"), (snap / "opencode.db-wal").read_bytes()
        before = wal.stat()
        assert len(copy) == before.st_size and copy[:32] == wal.read_bytes()[:32]
        with open(wal, "r+b") as out:  # cp over it: the same inode
            out.write(copy)
        os.utime(wal, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
        assert _report(db, which, root) == _report(db, which, None)
    finally:
        writer.close()
        other.close()


@pytest.mark.parametrize(
    ("xdg", "folder"),
    [
        ("/srv/cache", "/srv/cache/opencode-events"),
        ("", "/home/u/.cache/opencode-events"),
        ("relcache", "/home/u/.cache/opencode-events"),  # relative: ignored, as XDG says
        ("./c", "/home/u/.cache/opencode-events"),
    ],
)
def test_the_cache_folder_follows_the_xdg_rule(xdg: str, folder: str) -> None:
    from opencode_events.paths import report_cache_dir

    assert report_cache_dir({"HOME": "/home/u", "XDG_CACHE_HOME": xdg}) == Path(folder)


def test_the_collector_pause_is_the_process_s_and_ends_with_the_last_report() -> None:
    import gc

    pause = report_cache._collector_paused
    was = gc.isenabled()
    try:
        gc.enable()
        first, second = pause(), pause()  # two reports' pauses, overlapping (two threads)
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not gc.isenabled()  # the other report still decodes
        second.__exit__(None, None, None)
        assert gc.isenabled()
        gc.disable()  # a host that keeps it off finds it off after
        with pause():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=40),
        st.none() | st.text(max_size=40) | st.integers(-(2**63), 2**64 - 1) | st.binary(max_size=8),
        max_size=40,
    ),
    st.sampled_from([0, 15, 16, 65_535, 65_536]),
)
def test_a_map_encoded_as_its_pairs_come_is_the_dict_encoded(pairs, more) -> None:
    """``encoded_map`` (a memo's basis of every session's parent, written without the
    dict): the bytes the dict encodes to, at every size of MessagePack's map heads."""
    pairs = {**pairs, **{f"ses_{n:06}": None for n in range(more)}}
    encoded = report_cache.encoded_map(iter(pairs.items()))
    assert bytes(encoded) == msgspec.msgpack.encode(pairs)
    assert msgspec.msgpack.encode([1, encoded]) == msgspec.msgpack.encode([1, pairs])


def test_a_basis_no_memo_can_hold_keeps_no_memo_and_is_no_traceback(tmp_path, monkeypatch):
    """A parent id MessagePack cannot hold (SQLite gives none: a store of another kind
    might): the report is written, and no memo kept (the next one is made again)."""
    db = _odd_database(tmp_path, [], [])
    root = tmp_path / "cache"
    with open_store(db) as store:
        expected = _written(store, "json", None, all_sessions=True)
        rows = list(store.each_session_parent())
        for odd in (object(), "ses_odd\udc80"):  # no type MessagePack has; a lone surrogate
            monkeypatch.setattr(
                store, "each_session_parent", lambda odd=odd: iter([*rows, (odd, None)])
            )
            cache = ReportCache.open(store, root=root)
            assert _written(store, "json", cache, all_sessions=True) == expected
            cache = ReportCache.open(store, root=root)  # the report held whole: sessions_report
            report = sessions_report(store, all_sessions=True, cache=cache)
            assert msgspec.json.encode(report.document()) == msgspec.json.encode(
                sessions_report(store, all_sessions=True).document()
            )
    assert not list(root.rglob("memo-*"))


def test_a_memo_kept_from_its_spool_is_the_memo_of_the_report_held_whole(tmp_path) -> None:
    """A report of every session kept as it is made (its memo written in pieces, its basis
    encoded from the rows) is, item for item and basis for basis, the memo of the same
    report held whole (``remember``)."""
    db = _odd_database(tmp_path, [("fork", True, 3, "fork")], [])
    request = sessions_module._request(None, None, True, True, None)
    found = {}
    for way in ("spooled", "whole"):
        root = tmp_path / way
        with open_store(db) as store:
            cache = ReportCache.open(store, root=root)
            if way == "spooled":
                _written(store, "json", cache, all_sessions=True)
            else:
                report = sessions_report(store, all_sessions=True)
                basis = [cache.stamps, store.session_parents()]
                cache.remember("sessions", request, report, sessions_module._checks({}), basis)
        with open_store(db) as store:
            cache = ReportCache.open(store, root=root)
            kept = cache.recall("sessions", request, SessionsReport, lambda checks: True)
            basis = cache.recalled_basis("sessions", request, lambda checks: True)
        assert kept is not None and basis is not None
        found[way] = (msgspec.to_builtins(kept.sessions), basis)
    assert found["spooled"] == found["whole"]
    assert len(found["whole"][1][1]) > 1  # every session's parent
