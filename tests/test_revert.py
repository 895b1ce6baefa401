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
