"""A session's pending revert (the TUI's /undo): what it undid is marked on ``import``.

OpenCode keeps the undone messages stored until the next prompt, which deletes them (and
takes their cost off the session's totals); until then ``session.revert`` says where the
undo starts. The rule is OpenCode's cleanup (``SessionRevert.cleanup``): the messages from
``messageID`` on; with ``partID``, that message's parts from ``partID`` on and every later
message.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from opencode_events.core.mapping import RevertPoint
from opencode_events.output.jsonl import JsonlWriter
from opencode_events.pipeline.normalize import import_sessions, normalize_streams
from opencode_events.store.open import select_sessions
from opencode_events.store.sqlite import Store

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "serve_revert"

# messages (id, its parts' ids) in order
SESSION = [("u1", ["a", "b"]), ("m1", ["c", "d", "e"]), ("u2", ["f"]), ("m2", ["g", "h"])]


def undone(revert: RevertPoint) -> list[str]:
    found = []
    for message, parts in SESSION:
        whole = revert.message(message)
        found += [f"{message}:*"] if whole else []
        found += [p for p in parts if revert.part(p)]
    return found


@pytest.mark.parametrize(
    ("revert", "expected"),
    [
        ({"messageID": "u2"}, ["u2:*", "f", "m2:*", "g", "h"]),
        (
            {"messageID": "u1"},
            ["u1:*", "a", "b", "m1:*", "c", "d", "e", "u2:*", "f", "m2:*", "g", "h"],
        ),
        # from a part on: the rest of that message, and every message after it
        ({"messageID": "m1", "partID": "d"}, ["d", "e", "u2:*", "f", "m2:*", "g", "h"]),
        ({"messageID": "m2", "partID": "g"}, ["g", "h"]),
        # a part OpenCode no longer has: nothing of that message, but what follows (cleanup)
        ({"messageID": "m1", "partID": "zz"}, ["u2:*", "f", "m2:*", "g", "h"]),
        # a message no longer there: nothing is undone
        ({"messageID": "gone"}, []),
        (
            {"messageID": "m1", "partID": 3, "snapshot": "abc"},
            ["m1:*", "c", "d", "e", "u2:*", "f", "m2:*", "g", "h"],
        ),
    ],
)
def test_what_a_revert_undoes(revert, expected):
    point = RevertPoint.of(json.dumps(revert))
    assert point is not None and undone(point) == expected


@pytest.mark.parametrize("value", [None, "", b"null", "{}", '{"messageID": 7}', "[1]", "not json"])
def test_no_revert_point(value):
    assert RevertPoint.of(value) is None


def events(output: bytes) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


def imported(db: Path) -> list[dict]:
    out = io.BytesIO()
    with Store(db) as store:
        import_sessions(store, select_sessions(store, all_sessions=True), JsonlWriter(out))
    return events(out.getvalue())


def exported(path: Path) -> list[dict]:
    out = io.BytesIO()
    with open(path, "rb") as f:
        normalize_streams([("-", f)], JsonlWriter(out))
    return events(out.getvalue())


def _stored_order(db: Path) -> tuple[str, list[str]]:
    """The revert's message and the ids of the session's messages, in OpenCode's order."""
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        (revert,) = conn.execute("SELECT revert FROM session").fetchone()
        ids = [i for (i,) in conn.execute("SELECT id FROM message ORDER BY time_created, id")]
    return json.loads(revert)["messageID"], ids


@pytest.mark.parametrize("read", [imported, exported], ids=["import", "export"])
def test_the_captured_undo_marks_the_second_prompt_and_its_replies(read):
    """samples/serve_revert: two prompts, then /undo of the second."""
    source = SAMPLE / ("opencode.db" if read is imported else "export.json")
    found = read(source)[:-1]
    start, ids = _stored_order(SAMPLE / "opencode.db")
    undone_messages = set(ids[ids.index(start) :])
    assert len(undone_messages) == 3  # the prompt and its two replies
    assert [e["message_id"] in undone_messages for e in found] == [
        e.get("reverted") is True for e in found
    ]
    reverted = [e["kind"] for e in found if e.get("reverted")]
    assert reverted == ["prompt", "write", "usage", "patch", "message", "usage"]
    assert [e["command"] for e in found if e["kind"] == "write" and e.get("reverted")] == [
        "echo undone > notes/undone.txt"
    ]


def test_a_revert_from_a_part_on(tmp_path: Path):
    """A hand-made revert of the first reply from its patch part on: the part and every
    later message are marked, the parts before it are not."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLE / "opencode.db", db)
    _, ids = _stored_order(db)
    conn = sqlite3.connect(db)
    (patch,) = conn.execute(
        "SELECT id FROM part WHERE message_id = ? AND json_extract(data, '$.type') = 'patch'",
        (ids[1],),
    ).fetchone()
    revert = json.dumps({"messageID": ids[1], "partID": patch})
    conn.execute("UPDATE session SET revert = ?", (revert,))
    conn.commit()
    conn.close()
    found = imported(db)[:-1]
    marked = [(e["kind"], e["message_id"]) for e in found if e.get("reverted")]
    assert marked[0] == ("patch", ids[1])
    assert {m for _, m in marked[1:]} == set(ids[2:])
    assert not [
        e for e in found if e["message_id"] == ids[1] and e["kind"] != "patch" and e.get("reverted")
    ]


def test_no_revert_no_mark_and_an_older_schema_without_the_column(tmp_path: Path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLE / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE session DROP COLUMN revert")
    conn.execute("ALTER TABLE session DROP COLUMN time_archived")
    conn.commit()
    conn.close()
    with Store(db) as store:
        (row,) = store.sessions()
        assert (row.revert, row.time_archived) == (None, None)
        assert store.reverted_sessions() == {}
    assert not [e for e in imported(db) if "reverted" in e]


def test_the_store_reads_the_revert_and_the_archive_time():
    with Store(SAMPLE / "opencode.db") as store:
        (row,) = store.sessions()
        assert store.reverted_sessions() == {row.id: row.revert}
        assert json.loads(row.revert)["messageID"].startswith("msg_")
        assert isinstance(row.time_archived, int) and row.time_archived >= row.time_created


# ----------------------------------------------------------------- what the reports count
# OpenCode 1.18.33 counts the undone inferences until the next prompt deletes them: its TUI
# sidebar's "spent" is the session's cost column, and `opencode stats` adds that column.
# The reports count them too, and say how much of what they count was undone.


def _undone_messages(db: Path) -> dict[str, float]:
    """The assistant messages the capture's undo undid (OpenCode's cleanup deletes them at
    the next prompt) → their cost, read straight from the rows."""
    start, ids = _stored_order(db)
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        rows = dict(conn.execute("SELECT id, data FROM message"))
    infos = {i: json.loads(rows[i]) for i in ids[ids.index(start) :]}
    return {i: info["cost"] for i, info in infos.items() if info["role"] == "assistant"}


def _session_cost(db: Path) -> float:
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        return conn.execute("SELECT cost FROM session").fetchone()[0]


def test_the_undone_figures_agree_with_the_import_marks():
    """What the reports call undone is what `import` marks: the reverted usage events."""
    from opencode_events.reports.undone import note, undone_figures

    marked = [e for e in imported(SAMPLE / "opencode.db") if e["kind"] == "usage"]
    marked = [e for e in marked if e.get("reverted")]
    with Store(SAMPLE / "opencode.db") as store:
        found = undone_figures(store, store.session_ids())
    (undone,) = found.values()
    assert undone.inferences == len(marked) == 2
    assert undone.message_ids == [e["message_id"] for e in marked]
    assert undone.cost == pytest.approx(sum(e["cost"] for e in marked))
    assert undone.total_tokens == sum(e["total_tokens"] for e in marked)
    assert note(found.values()) == (
        f"1 session has a pending /undo: 2 steps, ${undone.cost:.6g}, counted as OpenCode "
        "counts them until the next prompt deletes them"
    )


def test_sessions_counts_the_undone_steps_and_says_so():
    from opencode_events.reports.sessions import sessions_report

    db = SAMPLE / "opencode.db"
    with Store(db) as store:
        (row,) = sessions_report(store).sessions
    undone = _undone_messages(db)
    assert row.cost == _session_cost(db)  # OpenCode's "spent": the undone steps included
    assert row.inferences == 4
    assert (row.undone_inferences, row.undone_cost) == (2, pytest.approx(sum(undone.values())))


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day", "project"])
def test_usage_counts_the_undone_steps_and_says_so(by):
    from opencode_events.reports.usage import stored_usage

    db = SAMPLE / "opencode.db"
    with Store(db) as store:
        report = stored_usage(store, all_sessions=True, by=by)
    undone = _undone_messages(db)
    assert report.total.cost == pytest.approx(_session_cost(db))
    assert report.total.undone_inferences == 2
    assert report.total.undone_cost == pytest.approx(sum(undone.values()))
    assert [n for n in report.notes if "pending /undo" in n] == [
        f"1 session has a pending /undo: 2 steps, ${report.total.undone_cost:.6g}, counted as "
        "OpenCode counts them until the next prompt deletes them"
    ]
    if by == "step":
        assert {r.message_id for r in report.rows if r.undone_inferences} == set(undone)
        assert all(r.undone_cost == r.cost for r in report.rows if r.undone_inferences)
    if by == "session":
        (row,) = report.rows
        assert (row.undone_inferences, row.undone_cost) == (2, report.total.undone_cost)


def test_an_undo_from_a_part_on_keeps_that_message_figures(tmp_path: Path):
    """From a part on, OpenCode's cleanup keeps the message (and its cost) and deletes the
    later ones: only those are undone."""
    from opencode_events.reports.undone import undone_figures

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLE / "opencode.db", db)
    _, ids = _stored_order(db)
    conn = sqlite3.connect(db)
    (patch,) = conn.execute(
        "SELECT id FROM part WHERE message_id = ? AND json_extract(data, '$.type') = 'patch'",
        (ids[1],),
    ).fetchone()
    conn.execute(
        "UPDATE session SET revert = ?", (json.dumps({"messageID": ids[1], "partID": patch}),)
    )
    conn.commit()
    conn.close()
    with Store(db) as store:
        (undone,) = undone_figures(store, store.session_ids()).values()
    roles = {}
    with sqlite3.connect(db) as conn:
        for i, data in conn.execute("SELECT id, data FROM message"):
            roles[i] = json.loads(data)["role"]
    assert undone.message_ids == [i for i in ids[2:] if roles[i] == "assistant"]


def test_no_pending_undo_no_note(tmp_path: Path):
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.reports.usage import stored_usage

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLE / "opencode.db", db)
    with sqlite3.connect(db) as conn:  # as OpenCode's unrevert (/redo) writes it
        conn.execute("UPDATE session SET revert = NULL")
    with Store(db) as store:
        report = stored_usage(store, all_sessions=True, by="session")
        (row,) = sessions_report(store).sessions
    assert "undone_inferences" not in report.document()["total"]
    assert not [n for n in report.notes if "undo" in n]
    assert (row.undone_inferences, row.undone_cost) == (0, 0.0)


def test_the_tables_say_so(tmp_path: Path):
    from click.testing import CliRunner

    from opencode_events.cli.main import cli

    db = str(SAMPLE / "opencode.db")
    env = {"XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "200"}
    runner = CliRunner()
    sessions = runner.invoke(cli, ["sessions", "--db", db, "--format", "table"], env=env)
    assert sessions.exit_code == 0
    assert "1 with a pending /undo: 2 undone step(s), $0.0026, counted" in sessions.output
    usage = runner.invoke(cli, ["usage", "--db", db, "--all", "--format", "table"], env=env)
    assert usage.exit_code == 0
    assert "1 session has a pending /undo: 2 steps, $0.00258, counted" in usage.output


def test_the_capture_undo_moved_the_session_stamp():
    """OpenCode writes an undo as session.updated in its event log, so the session's stamp
    (event_sequence.seq), which the report cache trusts, moves with it."""
    db = SAMPLE / "opencode.db"
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        (stamp,) = conn.execute("SELECT seq FROM event_sequence").fetchone()
        log = conn.execute(
            "SELECT seq, type, json_extract(data, '$.info.revert.messageID') FROM event "
            "ORDER BY seq"
        ).fetchall()
    start, _ = _stored_order(db)
    first = next(seq for seq, _, revert in log if revert is not None)
    assert [(t, r) for seq, t, r in log if seq >= first] == [("session.updated.1", start)] * 2
    assert stamp == log[-1][0] == first + 1


@pytest.mark.parametrize("logged", [True, False], ids=["by OpenCode", "by another program"])
def test_the_report_cache_follows_an_undo_and_a_redo(tmp_path: Path, logged: bool):
    from opencode_events.reports.cache import ReportCache
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.reports.usage import stored_usage

    db, root = tmp_path / "opencode.db", tmp_path / "cache"
    shutil.copyfile(SAMPLE / "opencode.db", db)

    def reports(cached: bool) -> tuple:
        with Store(db) as store:
            cache = ReportCache.open(store, root=root) if cached else None
            usage = stored_usage(store, all_sessions=True, by="day", cache=cache)
            return sessions_report(store, cache=cache).document(), usage.document()

    undone = reports(True)
    assert undone == reports(False) and undone[0][0]["undone_inferences"] == 2
    (revert,) = sqlite3.connect(db).execute("SELECT revert FROM session").fetchone()
    for value in (None, revert):  # /redo, then /undo again
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE session SET revert = ?", (value,))
            if logged:  # as OpenCode logs it: session.updated, the sequence moves
                (sid,) = conn.execute("SELECT id FROM session").fetchone()
                conn.execute("UPDATE event_sequence SET seq = seq + 1")
                conn.execute(
                    "INSERT INTO event (id, aggregate_id, seq, type, data) "
                    "SELECT 'evt_redo' || seq, ?, seq, 'session.updated.1', '{}' "
                    "FROM event_sequence",
                    (sid,),
                )
        fresh = reports(False)
        assert reports(True) == fresh
        assert (fresh[0][0]["undone_inferences"] == 2) is (value is not None)
        assert ("notes" in fresh[1]) is (value is not None)


def test_context_statusline_top_and_otel_count_the_undone_steps_and_say_so():
    """The sidebar's gauge and "spent" count what a pending undo undid (1.18.33 reads the
    last assistant message whatever the revert, and the session's cost column): so do
    these views, each saying what of it was undone."""
    from opencode_events.otel.export import export, store_builder, store_sessions
    from opencode_events.reports.context import context_report
    from opencode_events.reports.statusline import render, take_glance
    from opencode_events.reports.top import TopBoard
    from opencode_events.store.open import every_session

    db = SAMPLE / "opencode.db"
    undone = _undone_messages(db)
    with Store(db) as store:
        (sid,) = store.session_ids()
        context = context_report(store, sid)
        glance = take_glance(store, sid)
        builder = store_builder(store)
        bodies: list[bytes] = []
        export(
            store_sessions(store, every_session(store), builder),
            builder,
            lambda signal, body: bodies.append(body),
        )
    doc = context.document()
    assert doc["cost"] == _session_cost(db)
    assert doc["context_tokens"] == context.inferences[-1].prompt_tokens  # an undone one
    assert [i["message_id"] for i in doc["inferences"] if i.get("undone")] == list(undone)
    assert (doc["undone_inferences"], doc["undone_cost"]) == (
        2,
        pytest.approx(sum(undone.values())),
    )

    assert glance.cost == _session_cost(db)
    assert render("{cost} {undone}", glance) == "$0.0086 undo 2 $0.0026"

    top = TopBoard(db)
    top.refresh()
    (row,) = top.board().rows
    assert (row.cost, row.undone_cost) == (_session_cost(db), pytest.approx(sum(undone.values())))

    chats = {}
    for body in bodies:
        for rs in json.loads(body).get("resourceSpans", []):
            for scope in rs["scopeSpans"]:
                for span in scope["spans"]:
                    a = {kv["key"]: kv["value"] for kv in span["attributes"]}
                    if span["name"].startswith("chat"):
                        chats[a["opencode.message.id"]["stringValue"]] = "opencode.reverted" in a
    assert {m for m, reverted in chats.items() if reverted} == set(undone)
    assert len(chats) == 4


def test_without_a_pending_undo_the_views_say_nothing():
    from opencode_events.reports.context import context_report
    from opencode_events.reports.statusline import render, take_glance

    with Store(SAMPLE.parent / "task" / "opencode.db") as store:
        sid = select_sessions(store, [])[0]
        assert "undone_inferences" not in context_report(store, sid).document()
        assert render("[{undone}]", take_glance(store, sid)) == "[]"


@pytest.mark.parametrize("source", ["import", "export"])
@pytest.mark.parametrize("by", ["turn", "session", "day"])
def test_usage_of_the_marked_events_says_so_too(source: str, by: str):
    """`import | usage` and `usage export.json`: the steps marked `reverted` are counted,
    and the report says how many and what they cost, as from the store."""
    from opencode_events.reports.usage import stream_usage

    if source == "import":
        out = io.BytesIO()
        with Store(SAMPLE / "opencode.db") as store:
            import_sessions(store, select_sessions(store, all_sessions=True), JsonlWriter(out))
        data = out.getvalue()
    else:
        data = (SAMPLE / "export.json").read_bytes()
    report = stream_usage([("-", io.BytesIO(data))], by=by)
    undone = _undone_messages(SAMPLE / "opencode.db")
    assert report.total.cost == pytest.approx(_session_cost(SAMPLE / "opencode.db"))
    assert report.total.undone_inferences == len(undone) == 2
    assert report.total.undone_cost == pytest.approx(sum(undone.values()))
    assert f"2 steps marked reverted (a pending /undo), ${report.total.undone_cost:.6g}, " in (
        " ".join(report.notes)
    )


def _messages_from_cases(tmp_path: Path) -> Path:
    """The sample with a twin time and the times SQL orders oddly (its table remade
    without NOT NULL, as a damaged or foreign file may have it)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLE / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.executescript(
        "ALTER TABLE message RENAME TO kept;"
        "CREATE TABLE message (id text PRIMARY KEY, session_id text, time_created integer,"
        " time_updated integer, data text);"
        "INSERT INTO message SELECT * FROM kept; DROP TABLE kept;"
        "CREATE INDEX message_session_time_created_id_idx"
        " ON message (session_id, time_created, id);"
    )
    sid, second = conn.execute(
        "SELECT session_id, id FROM message ORDER BY time_created, id LIMIT 1 OFFSET 1"
    ).fetchone()
    (twin,) = conn.execute("SELECT time_created FROM message WHERE id = ?", (second,)).fetchone()
    rows = [
        ("msg_0twin", twin),  # the time of a stored message, an id sorting before it
        ("msg_null", None),  # sorts first
        ("msg_text", "later"),  # text sorts after every number
    ]
    conn.executemany(
        "INSERT INTO message VALUES (?, ?, ?, 0, '{}')", [(m, sid, t) for m, t in rows]
    )
    conn.commit()
    conn.close()
    return db


def test_the_messages_from_an_undone_one_are_those_messages_lists_after_it(tmp_path: Path):
    """``Store.messages_from`` (the rows a pending undo undid, read alone): for every
    message, the tail of ``messages`` from it on; none for an id the session lacks; None
    (read them all) from a message with no time."""
    db = _messages_from_cases(tmp_path)
    with Store(db) as store:
        sid = next(iter(store.reverted_sessions()))
        ordered = list(store.messages(sid))
        assert ordered[0].id == "msg_null" and ordered[-1].id == "msg_text"
        assert "msg_0twin" in [m.id for m in ordered]
        for at, message in enumerate(ordered):
            got = store.messages_from(sid, message.id)
            assert got == (None if message.time_created is None else ordered[at:])
        assert store.messages_from(sid, "msg_absent") == []
        assert store.messages_from("ses_absent", ordered[1].id) == []
