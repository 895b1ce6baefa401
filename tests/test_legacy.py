"""Legacy JSON storage (before SQLite): both layouts, built from a real capture's rows, read
exactly like the database they came from."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_events.store.rows import wrote_json_files
from tests.stores import with_a_parent_loop

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "opencode_events"]


def rows(db: Path, query: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def write_legacy(db: Path, data_dir: Path, *, oldest: bool) -> None:
    """OpenCode's JSON files for every session of ``db`` (ids put back into the objects),
    pretty-printed as OpenCode writes them."""
    storage = data_dir / "project" / "work" / "storage" if oldest else data_dir / "storage"
    for sid, parent, title, directory, version, created, updated in rows(
        db,
        "SELECT id, parent_id, title, directory, version, time_created, time_updated FROM session",
    ):
        info = {
            "id": sid,
            "title": title,
            "directory": directory,
            "version": version,
            "time": {"created": created, "updated": updated},
        }
        if parent:
            info["parentID"] = parent
        folder = storage / "session" / ("info" if oldest else "proj")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{sid}.json").write_text(json.dumps(info, indent=2))
    for mid, sid, data in rows(db, "SELECT id, session_id, data FROM message"):
        message = {"id": mid, "sessionID": sid, **json.loads(data)}
        folder = storage / ("session/message" if oldest else "message") / sid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{mid}.json").write_text(json.dumps(message, indent=2))
    for pid, mid, sid, data in rows(db, "SELECT id, message_id, session_id, data FROM part"):
        part = {"id": pid, "messageID": mid, "sessionID": sid, **json.loads(data)}
        folder = (storage / "session" / "part" / sid / mid) if oldest else (storage / "part" / mid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{pid}.json").write_text(json.dumps(part, indent=2))


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, timeout=120, env=env)


def comparable(events: list[dict]) -> list[dict]:
    """Events but for `time` and the ids a JSON file adds to a record kept in `raw`."""
    found = []
    for event in events:
        event = {k: v for k, v in event.items() if k != "time"}
        if isinstance(event.get("raw"), dict):
            ids = ("id", "sessionID", "messageID")
            event["raw"] = {k: v for k, v in event["raw"].items() if k not in ids}
        found.append(event)
    return found


@pytest.mark.parametrize("oldest", [False, True], ids=["storage", "project-storage"])
@pytest.mark.parametrize("sample", ["task", "file_tools"])
def test_legacy_layout_reads_like_the_database(tmp_path: Path, oldest: bool, sample: str):
    db = ROOT / "samples" / sample / "opencode.db"
    data_dir = tmp_path / "data" / "opencode"
    write_legacy(db, data_dir, oldest=oldest)
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin"}

    from_files = run("import", "--all", env=env)  # no opencode.db: the JSON files are used
    assert from_files.returncode == 0, from_files.stderr
    from_db = run("import", "--all", "--db", str(db))
    parse = lambda out: [json.loads(line) for line in out.splitlines()]  # noqa: E731
    assert comparable(parse(from_files.stdout)) == comparable(parse(from_db.stdout))

    legacy = json.loads(run("sessions", "--all", "--format", "json", env=env).stdout)
    stored = json.loads(run("sessions", "--all", "--format", "json", "--db", str(db)).stdout)
    keys = [
        "id",
        "parent_id",
        "title",
        "turns",
        "inferences",
        "tool_calls",
        "tool_failures",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "children",
    ]
    assert [{k: r[k] for k in keys} for r in legacy] == [{k: r[k] for k in keys} for r in stored]
    for old, new in zip(legacy, stored, strict=True):
        assert old["cost"] == pytest.approx(new["cost"])
        assert old["total_cost"] == pytest.approx(new["total_cost"])


def test_db_option_accepts_a_storage_folder(tmp_path: Path):
    db = ROOT / "samples" / "text" / "opencode.db"
    write_legacy(db, tmp_path / "opencode", oldest=False)
    result = run("import", "--db", str(tmp_path / "opencode" / "storage"))
    assert result.returncode == 0, result.stderr
    assert any(json.loads(line)["kind"] == "message" for line in result.stdout.splitlines())


def test_empty_folder_is_an_error(tmp_path: Path):
    result = run("sessions", "--db", str(tmp_path))
    assert result.returncode == 2 and result.stderr.startswith(b"error: no OpenCode storage")


def test_files_that_are_not_regular_files_are_skipped(tmp_path: Path):
    """A FIFO is never waited on and a device never read without end."""
    import os

    db = ROOT / "samples" / "text" / "opencode.db"
    data_dir = tmp_path / "opencode"
    write_legacy(db, data_dir, oldest=False)
    sessions = data_dir / "storage" / "session" / "proj"
    os.mkfifo(sessions / "fifo.json")
    (sessions / "zero.json").symlink_to("/dev/zero")
    part_dir = next((data_dir / "storage" / "part").iterdir())
    os.mkfifo(part_dir / "prt_fifo.json")
    expected = comparable(
        [json.loads(line) for line in run("import", "--all", "--db", str(db)).stdout.splitlines()]
    )
    for command in (["import", "--all"], ["sessions"], ["usage", "--all"]):
        result = run(*command, "--db", str(data_dir))
        assert result.returncode == 0, (command, result.stderr)
    got = run("import", "--all", "--db", str(data_dir)).stdout.splitlines()
    assert comparable([json.loads(line) for line in got]) == expected


def test_a_session_id_that_would_leave_the_storage_folder_is_no_session(tmp_path: Path):
    storage = tmp_path / "data" / "storage"
    (storage / "session" / "proj").mkdir(parents=True)
    (storage / "message").mkdir()
    outside = tmp_path / "data" / "secret.json"
    outside.write_text('{"role": "user", "id": "msg_x"}')
    for name, sid in (("a", "../.."), ("b", ".."), ("c", "x/../..")):
        (storage / "session" / "proj" / f"{name}.json").write_text(json.dumps({"id": sid}))
    (storage / "session" / "proj" / "ok.json").write_text(json.dumps({"id": "ses_ok"}))
    rows = json.loads(run("sessions", "--all", "--format", "json", "--db", str(storage)).stdout)
    assert [r["id"] for r in rows] == ["ses_ok"]


def test_output_beside_a_legacy_store_is_allowed_inside_it_is_not(tmp_path: Path):
    db = ROOT / "samples" / "text" / "opencode.db"
    data_dir = tmp_path / "opencode"
    write_legacy(db, data_dir, oldest=False)
    beside = run("import", "--all", "--db", str(data_dir), "-o", str(data_dir / "all.jsonl"))
    assert beside.returncode == 0, beside.stderr
    assert (data_dir / "all.jsonl").stat().st_size > 0
    inside = run("import", "--all", "--db", str(data_dir), "-o", str(data_dir / "storage" / "x"))
    assert inside.returncode == 2 and inside.stderr.startswith(b"error: will not write to ")


def test_a_loop_of_parent_links_in_json_files_is_read_as_in_the_database(tmp_path: Path):
    db = tmp_path / "opencode.db"
    with_a_parent_loop(db)
    write_legacy(db, tmp_path / "data", oldest=False)
    for args in (["sessions", "--format", "json"], ["usage", "--all", "--format", "json"]):
        stored = json.loads(run(*args, "--db", str(db)).stdout)
        legacy = json.loads(run(*args, "--db", str(tmp_path / "data")).stdout)
        if args[0] == "sessions":
            stored = [(r["id"], r["total_cost"], r["children"]) for r in stored]
            legacy = [(r["id"], r["total_cost"], r["children"]) for r in legacy]
            assert len(stored) == 2  # both sessions of the loop, each on its own
        else:
            stored, legacy = stored["total"], legacy["total"]
        assert legacy == stored


def test_odd_figures_in_json_files_count_as_the_mapping_counts_them(tmp_path: Path):
    """A session row of the JSON layout sums its messages by the mapping's one rule for
    tokens and cost: a float count is its integer, a boolean is no number."""
    db = ROOT / "samples" / "text" / "opencode.db"
    data_dir = tmp_path / "data" / "opencode"
    write_legacy(db, data_dir, oldest=False)
    (message,) = [
        path
        for path in (data_dir / "storage" / "message").rglob("*.json")
        if json.loads(path.read_text())["role"] == "assistant"
    ]
    data = json.loads(message.read_text())
    data["cost"] = True
    data["tokens"]["input"] = 1000.0
    data["tokens"]["cache"]["read"] = True
    message.write_text(json.dumps(data))
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin"}
    (row,) = json.loads(run("sessions", "--all", "--format", "json", env=env).stdout)
    assert (row["cost"], row["input_tokens"], row["cache_read_tokens"]) == (0.0, 1000, 0)
    assert row["output_tokens"] == data["tokens"]["output"]


def test_a_session_s_cost_summed_from_json_files_is_written_as_any_sum(tmp_path: Path):
    """The JSON layout has no session columns: a session's cost is the sum of its messages,
    written to 12 significant digits as every sum is (0.1 + 0.2 is no bill's 0.3000…04)."""
    data_dir = tmp_path / "data" / "opencode"
    write_legacy(ROOT / "samples" / "bash_ok" / "opencode.db", data_dir, oldest=False)
    replies = [
        path
        for path in sorted((data_dir / "storage" / "message").rglob("*.json"))
        if json.loads(path.read_text())["role"] == "assistant"
    ]
    assert len(replies) == 2
    for path, cost in zip(replies, (0.1, 0.2), strict=True):
        message = json.loads(path.read_text())
        message["cost"] = cost
        path.write_text(json.dumps(message))
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin"}
    (row,) = json.loads(run("sessions", "--all", "--format", "json", env=env).stdout)
    assert row["cost"] == row["total_cost"] == 0.3


# ------------------------------------------------- a data directory of both kinds (real)
# samples/legacy_mixed: one data directory used by opencode-ai 1.1.65 (JSON files), 1.2.27
# (which imported them into opencode.db and left them), 1.1.65 again and 1.18.33.

MIXED = ROOT / "samples" / "legacy_mixed"


def _json_lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def _file_session_ids(data_dir: Path) -> set[str]:
    return {p.stem for p in (data_dir / "storage" / "session").glob("*/*.json")}


def test_a_data_directory_of_both_kinds_reads_each_session_once():
    in_db = {sid for (sid,) in rows(MIXED / "opencode.db", "SELECT id FROM session")}
    in_files = _file_session_ids(MIXED)
    assert len(in_db & in_files) == 1 and len(in_files - in_db) == 1  # what the capture made
    result = run("sessions", "--format", "jsonl", "--db", str(MIXED))
    assert result.returncode == 0, result.stderr
    listed = [s["id"] for s in _json_lines(result.stdout)]
    assert sorted(listed) == sorted(in_db | in_files)  # every session, none twice
    (note,) = result.stderr.decode().splitlines()
    assert note.startswith("note: reading ") and "1 session only the files hold" in note
    assert "1 session in both, read once, from the database" in note


def test_the_session_in_both_is_read_from_the_database():
    """OpenCode 1.2 imported it: the database's copy is what OpenCode reads now; the
    downgrade's session, which only the files hold, is read from them; nothing twice."""
    in_db = {sid for (sid,) in rows(MIXED / "opencode.db", "SELECT id FROM session")}
    ((both,), (only_files,)) = [
        sorted(in_db & _file_session_ids(MIXED)),
        sorted(_file_session_ids(MIXED) - in_db),
    ]
    mixed = _json_lines(run("import", "--all", "--db", str(MIXED)).stdout)
    alone = _json_lines(run("import", both, "--db", str(MIXED / "opencode.db")).stdout)

    def of(events: list[dict], sid: str) -> list[dict]:
        return [
            {k: v for k, v in e.items() if k != "seq"} for e in events if e.get("session_id") == sid
        ]

    assert of(mixed, both) == [e for e in of(alone, both) if e["kind"] != "metrics"]
    files = [json.loads(p.read_text()) for p in (MIXED / "storage" / "part").glob("*/*.json")]
    steps = [d for d in files if d["type"] == "step-finish" and d["sessionID"] == only_files]
    stored = [json.loads(d) for (d,) in rows(MIXED / "opencode.db", "SELECT data FROM part")]
    stored_steps = [d for d in stored if d["type"] == "step-finish"]
    assert [
        u["part_id"] for u in mixed if u["kind"] == "usage" and u["session_id"] == only_files
    ] == [d["id"] for d in steps]
    assert mixed[-1]["turns"] == len(stored_steps) + len(steps) == 4
    assert mixed[-1]["cost"] == pytest.approx(sum(d["cost"] for d in stored_steps + steps))


@pytest.mark.parametrize("version, wrote", [
    ("1.1.65", True), ("0.15.3", True), ("1.2.0", False), ("1.2.27", False),
    ("1.18.33", False), ("2.0", False), ("local", False), ("1", False), ("", False), (None, False),
])  # fmt: skip
def test_the_versions_that_kept_sessions_in_files(version, wrote):
    assert wrote_json_files(version) is wrote


def test_a_moved_in_session_is_dated_as_its_data_say_wherever_it_is_read(tmp_path: Path):
    """OpenCode 1.2 moved the 1.1.65 session into its database and stamped each part row
    with the moment it did: read from either database or from the files alone, its events
    are dated from their data (a part's start, a step at its message's completion), and
    are the same events."""
    in_db = {sid for (sid,) in rows(MIXED / "opencode.db", "SELECT id FROM session")}
    (both,) = sorted(in_db & _file_session_ids(MIXED))
    files_only = tmp_path / "files"
    shutil.copytree(MIXED / "storage", files_only / "storage")
    readers = [MIXED / "opencode.db", MIXED / "older" / "opencode.db", files_only]
    read = [
        [
            {k: v for k, v in e.items() if k not in ("seq", "raw")}
            for e in _json_lines(run("import", both, "--db", str(db)).stdout)
        ]
        for db in readers
    ]
    (message,) = [e for e in read[0] if e["kind"] == "message"]
    (usage,) = [e for e in read[0] if e["kind"] == "usage"]
    (prompt,) = [e for e in read[0] if e["kind"] == "prompt"]
    part = json.loads(next(d for (d,) in rows(
        MIXED / "opencode.db", "SELECT data FROM part WHERE id = ?", message["part_id"]
    )))  # fmt: skip
    info = json.loads(next(d for (d,) in rows(
        MIXED / "opencode.db", "SELECT data FROM message WHERE id = ?", usage["message_id"]
    )))  # fmt: skip
    stamped = {t for (t,) in rows(MIXED / "opencode.db", "SELECT time_created FROM part")}
    assert message["time"] == part["time"]["start"] and message["time"] not in stamped
    assert usage["time"] == info["time"]["completed"]
    assert prompt["time"] == json.loads(next(d for (d,) in rows(
        MIXED / "opencode.db", "SELECT data FROM message WHERE id = ?", prompt["message_id"]
    )))["time"]["created"]  # fmt: skip
    assert read[0] == read[1] == read[2]


def test_a_moved_in_session_with_a_damaged_time_has_no_time_of_text(tmp_path: Path):
    """A moved-in session is dated from its data; where a message's row time is damaged
    (text) and its parts name no time of their own, its events have none: never the text."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(MIXED / "opencode.db", db)
    in_db = {sid for (sid,) in rows(db, "SELECT id FROM session")}
    (both,) = sorted(in_db & _file_session_ids(MIXED))
    conn = sqlite3.connect(db)
    conn.execute("UPDATE message SET time_created = 'abc' WHERE session_id = ?", (both,))
    for pid, data in conn.execute("SELECT id, data FROM part WHERE session_id = ?", (both,)):
        doc = json.loads(data)
        doc.pop("time", None)
        conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(doc), pid))
    conn.commit()
    conn.close()
    events = _json_lines(run("import", both, "--db", str(db)).stdout)
    assert {e["kind"] for e in events} >= {"prompt", "message", "usage"}
    for event in events:
        assert event.get("time") is None or type(event["time"]) in (int, float), event


def test_a_database_named_as_a_file_is_that_file_alone():
    result = run("sessions", "--format", "jsonl", "--db", str(MIXED / "opencode.db"))
    assert result.returncode == 0 and result.stderr == b""
    assert len(_json_lines(result.stdout)) == 3


def test_files_the_database_already_holds_are_only_noted(tmp_path: Path):
    data_dir = tmp_path / "data"
    shutil.copytree(MIXED, data_dir)
    in_db = {sid for (sid,) in rows(data_dir / "opencode.db", "SELECT id FROM session")}
    for file in (data_dir / "storage" / "session").glob("*/*.json"):
        if file.stem not in in_db:  # the downgrade's session, deleted as OpenCode 1.1 does:
            for message in (data_dir / "storage" / "message" / file.stem).glob("*.json"):
                shutil.rmtree(data_dir / "storage" / "part" / message.stem, ignore_errors=True)
                message.unlink()  # its messages and parts, then its file; folders stay
            file.unlink()  # now every session the files hold is in the database
    result = run("sessions", "--format", "jsonl", "--db", str(data_dir))
    assert sorted(s["id"] for s in _json_lines(result.stdout)) == sorted(in_db)
    (note,) = result.stderr.decode().splitlines()
    assert "hold no other session; 1 session in both, read once, from the database" in note


def test_the_status_line_reads_the_database_alone():
    result = run("statusline", "--db", str(MIXED))
    assert result.returncode == 0 and result.stderr == b"" and result.stdout.strip()


def test_the_default_data_directory_is_read_as_both(tmp_path: Path):
    data_dir = tmp_path / "xdg" / "opencode"
    shutil.copytree(MIXED, data_dir)
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    env.pop("OPENCODE_DB", None)
    result = run("sessions", "--format", "jsonl", env=env)
    assert result.returncode == 0, result.stderr
    assert len(_json_lines(result.stdout)) == 4 and b"note: reading" in result.stderr


# ------------------------------------------------------------- an older schema (real)


def test_a_database_of_the_first_schema_is_read_and_named():
    """older/opencode.db: the database 1.2.27 left, whose sessions keep no totals; they are
    summed from the messages, and a note names the schema."""
    older = MIXED / "older" / "opencode.db"
    migration = rows(older, "SELECT name FROM __drizzle_migrations ORDER BY id DESC LIMIT 1")
    result = run("sessions", "--format", "jsonl", "--db", str(older))
    assert result.returncode == 0, result.stderr
    (note,) = result.stderr.decode().splitlines()
    assert note == (
        f"note: {older} is of an older OpenCode schema (OpenCode's migration {migration[0][0]}, "
        "its newest session written by OpenCode 1.2.27): its sessions keep no totals, so "
        "their cost and tokens are summed from their messages"
    )
    found = {s["id"]: s for s in _json_lines(result.stdout)}
    for sid, data in rows(older, "SELECT session_id, data FROM message"):
        info = json.loads(data)
        if info["role"] == "assistant":
            assert found[sid]["cost"] == info["cost"] and found[sid]["model"] == info["modelID"]
            assert found[sid]["input_tokens"] == info["tokens"]["input"]
    assert set(found) == {sid for (sid,) in rows(older, "SELECT id FROM session")}


def test_a_database_of_a_schema_it_cannot_read_is_refused_naming_it(tmp_path: Path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(MIXED / "older" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE session DROP COLUMN directory")
    conn.commit()
    conn.close()
    result = run("sessions", "--db", str(db))
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("error: ") and "`session` lacks directory" in line
    assert "migration 20260312043431_session_message_cursor" in line and "1.2.27" in line


_DAMAGES = {
    "title not UTF-8": lambda data: data.replace(b"Mock session title", b"Mock \xff title"),
    "no id": lambda data: json.dumps({k: v for k, v in json.loads(data).items() if k != "id"}),
    "time of text": lambda data: json.dumps({**json.loads(data), "time": "x"}),
    "cut short": lambda data: data[:100],
    "empty": lambda data: b"",
    "an array": lambda data: b"[]",
}


@pytest.mark.parametrize("damage", sorted(_DAMAGES))
def test_a_damaged_session_file_loses_no_session_whose_messages_are_there(tmp_path, damage):
    """The session file is damaged, its messages are not: the session is still listed and
    counted (named by its file, as OpenCode's own import named it), and a note says so."""
    data_dir = tmp_path / "data"
    shutil.copytree(MIXED / "storage", data_dir / "storage")
    only_in_files = sorted(
        _file_session_ids(data_dir)
        - {sid for (sid,) in rows(MIXED / "opencode.db", "SELECT id FROM session")}
    )[0]
    before = json.loads(run("usage", "--db", str(data_dir), "--all", "--format", "json").stdout)
    (file,) = (data_dir / "storage" / "session").glob(f"*/{only_in_files}.json")
    damaged = _DAMAGES[damage](file.read_bytes())
    file.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
    listed = run("sessions", "--db", str(data_dir), "--all", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert only_in_files in [s["id"] for s in json.loads(listed.stdout)]
    after = run("usage", "--db", str(data_dir), "--all", "--format", "json")
    assert json.loads(after.stdout)["total"] == before["total"]
    notes = listed.stderr.decode()
    (row,) = [s for s in json.loads(listed.stdout) if s["id"] == only_in_files]
    if damage == "title not UTF-8":
        assert notes == "" and row["title"] == "Mock \ufffd title"  # bad bytes replaced
    elif damage == "time of text":
        # no time of its own: dated by its messages (kept in a window as they are)
        firsts = [
            json.loads(f.read_text())["time"]["created"]
            for f in (data_dir / "storage" / "message" / only_in_files).glob("*.json")
        ]
        assert notes == "" and row["time_created"] == min(firsts)
    else:
        assert f"read as session {only_in_files}, as its file is named" in notes


def test_a_session_file_that_names_nothing_is_said_and_skipped(tmp_path: Path):
    data_dir = tmp_path / "data"
    shutil.copytree(MIXED / "storage", data_dir / "storage")
    (folder,) = (data_dir / "storage" / "session").glob("*")
    (folder / "ses_nothing.json").write_text("{")
    listed = run("sessions", "--db", str(data_dir), "--all", "--format", "json")
    assert listed.returncode == 0 and "ses_nothing" not in listed.stdout.decode()
    assert listed.stderr.decode().splitlines() == [
        f"note: {folder / 'ses_nothing.json'}: no session in it, nor messages under its name; "
        "skipped"
    ]


# ------------------------------------------------- a tree years of damage left behind


def _tree(tmp_path: Path, sample: str = "bash_ok") -> tuple[Path, Path]:
    """A data directory whose storage/ holds ``sample``'s sessions (the real rows as files)."""
    data_dir = tmp_path / "data"
    write_legacy(SAMPLES / sample / "opencode.db", data_dir, oldest=False)
    return data_dir, data_dir / "storage"


SAMPLES = ROOT / "samples"


def _totals(data_dir: Path, session: str | None = None) -> dict[str, list]:
    """[inferences, total tokens, cost] of each way to read the tree: `sessions`, `usage`
    and the import's `usage` events."""
    scope = ["--session", session] if session else ["--all"]
    listed = run("sessions", "--db", str(data_dir), "--all", "--no-cache", "--format", "json")
    used = run("usage", "--db", str(data_dir), *scope, "--no-cache", "--format", "json")
    imported = run("import", "--db", str(data_dir), *scope)
    for result in (listed, used, imported):
        assert result.returncode == 0, result.stderr
    rows_ = [s for s in json.loads(listed.stdout) if session in (None, s["id"])]
    usage_events = [e for e in _json_lines(imported.stdout) if e["kind"] == "usage"]
    total = json.loads(used.stdout)["total"]
    return {
        "sessions": [
            sum(s["inferences"] for s in rows_),
            sum(s["total_tokens"] for s in rows_),
            round(sum(s["cost"] for s in rows_), 9),
        ],
        "usage": [total["inferences"], total["total_tokens"], round(total["cost"], 9)],
        "import": [
            len(usage_events),
            sum(e["total_tokens"] for e in usage_events),
            round(sum(e["cost"] for e in usage_events), 9),
        ],
    }


_MESSAGE_DAMAGES = {
    "a lone surrogate escape": lambda doc: (
        (doc.__setitem__("x", "\\ud800"), json.dumps(doc))[1]
        .replace("\\\\ud800", "\\ud800")
        .encode()
    ),
    "a time of text": lambda doc: json.dumps({**doc, "time": "yesterday"}).encode(),
    "a byte that is not UTF-8": lambda doc: (
        json.dumps({**doc, "path": {**doc["path"], "cwd": "/caf"}})
        .encode()
        .replace(b'"/caf"', b'"/caf\xe9"')
    ),
}


@pytest.mark.parametrize("damage", sorted(_MESSAGE_DAMAGES))
def test_a_damaged_message_file_counts_alike_in_every_report(tmp_path: Path, damage: str):
    """`sessions` summed a session's files by a stricter rule than `usage` and the import
    read them with: the reply's tokens and cost were lost from its row, not its count."""
    data_dir, storage = _tree(tmp_path)
    before = _totals(data_dir)
    reply = next(
        file
        for file in sorted((storage / "message").glob("*/*.json"))
        if json.loads(file.read_text())["role"] == "assistant"
    )
    reply.write_bytes(_MESSAGE_DAMAGES[damage](json.loads(reply.read_text())))
    after = _totals(data_dir)
    assert after["sessions"] == after["usage"] == after["import"], after
    assert after["usage"][:2] == before["usage"][:2]


def test_a_message_row_whose_time_is_text_counts_in_sessions_as_in_usage(tmp_path: Path):
    """The same rule for a database's row: `sessions` left the reply out of `inferences`."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "bash_ok" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        mid, data = conn.execute(
            "SELECT id, data FROM message WHERE json_extract(data, '$.role') = 'assistant'"
        ).fetchone()
        conn.execute(
            "UPDATE message SET data = ? WHERE id = ?",
            (json.dumps({**json.loads(data), "time": "yesterday"}), mid),
        )
    conn.close()
    totals = _totals(db)
    assert totals["sessions"][0] == totals["usage"][0] == totals["import"][0] == 2


def _not_utf8(name: str) -> str:
    return os.fsdecode(name.encode() + b"\xe9")  # a name from a Latin-1 machine


def test_file_names_that_are_not_utf8_give_json_not_a_traceback(tmp_path: Path):
    data_dir, storage = _tree(tmp_path)
    message = next(iter(sorted((storage / "message").glob("*/*.json"))))
    sid, mid = message.parent.name, message.stem
    part = {"type": "text", "text": "hello", "messageID": mid, "sessionID": sid}
    (storage / "part" / mid / (_not_utf8("prt_caf") + ".json")).write_text(json.dumps(part))
    odd_message = storage / "message" / sid / (_not_utf8("msg_caf") + ".json")
    odd_message.write_text(
        json.dumps({"id": "msg_caf", "sessionID": sid, "role": "user", "time": {"created": 1}})
    )
    for args in (
        ["import", "--all"],
        ["sessions", "--all", "--format", "jsonl"],
        ["usage", "--all", "--format", "jsonl"],
        ["otel", "--all", "-o", "-"],
    ):
        result = run(*args, "--db", str(data_dir))
        assert result.returncode == 0, (args, result.stderr)
        lines = _json_lines(result.stdout)  # strict UTF-8 JSON, or this raises
        assert lines, args
    events = _json_lines(run("import", "--all", "--db", str(data_dir)).stdout)
    assert any(e.get("part_id") == "prt_caf\ufffd" for e in events)


def test_a_folder_of_messages_no_session_file_names_is_read_with_a_note(tmp_path: Path):
    """A session file lost to a crash or a sync: its messages are spend all the same. A
    folder OpenCode emptied when it deleted the session is no session."""
    data_dir, storage = _tree(tmp_path)
    before = json.loads(run("usage", "--db", str(data_dir), "--all", "--format", "json").stdout)
    (file,) = [f for f in (storage / "session").glob("*/*.json") if "parentID" not in f.read_text()]
    file.unlink()
    (storage / "message" / "ses_deleted").mkdir()  # what a deletion leaves
    listed = run("sessions", "--db", str(data_dir), "--all", "--format", "json")
    assert listed.returncode == 0
    assert file.stem in [s["id"] for s in json.loads(listed.stdout)]
    assert "ses_deleted" not in listed.stdout.decode()
    assert listed.stderr.decode().splitlines() == [
        f"note: {storage / 'message' / file.stem}: messages of a session no file names; "
        "read as the session the folder is named after"
    ]
    after = json.loads(run("usage", "--db", str(data_dir), "--all", "--format", "json").stdout)
    assert after["total"] == before["total"]


def test_two_files_of_one_session_read_the_one_updated_last_whatever_the_listing_order(
    tmp_path: Path,
):
    data_dir, storage = _tree(tmp_path)
    (file,) = [f for f in (storage / "session").glob("*/*.json") if "parentID" not in f.read_text()]
    info = json.loads(file.read_text())
    older = {**info, "title": "older copy", "time": {**info["time"], "updated": 1}}
    for project in ("aaa", "zzz"):  # before and after the real one in path order
        (storage / "session" / project).mkdir()
        (storage / "session" / project / file.name).write_text(json.dumps(older))
    listed = run("sessions", "--db", str(data_dir), "--all", "--format", "json")
    (row,) = [s for s in json.loads(listed.stdout) if s["id"] == info["id"]]
    assert row["title"] == info["title"]
    notes = listed.stderr.decode().splitlines()
    assert len(notes) == 2 and all(f"session {info['id']} again" in n for n in notes), notes


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root reads any file")
def test_files_that_cannot_be_read_are_said_not_passed_over(tmp_path: Path):
    data_dir, storage = _tree(tmp_path, "task")
    sessions = sorted((storage / "session").glob("*/*.json"))
    folders = sorted(p for p in (storage / "message").iterdir())
    message = sorted(folders[0].glob("*.json"))[0]
    locked = [sessions[0], folders[1], message]
    for path in locked:
        path.chmod(0)
    # as root, file modes bind only without the capabilities that pass them by
    prefix = (
        ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]
        if os.geteuid() == 0
        else []
    )
    try:
        result = subprocess.run(
            [*prefix, *CLI, "sessions", "--db", str(data_dir), "--all", "--format", "json"],
            capture_output=True,
            timeout=120,
        )
    finally:
        for path in locked:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert result.returncode == 0, result.stderr
    notes = result.stderr.decode()
    assert f"{sessions[0]}: cannot be read (Permission denied); read as session" in notes
    assert f"{folders[1]}: cannot be listed (Permission denied); its messages are left out" in notes
    assert f"{message}: cannot be read (Permission denied); left out" in notes


def test_an_emptied_message_folder_beside_a_database_keeps_it_one_fast_store(tmp_path: Path):
    """What OpenCode 1.1 leaves of a deleted session (its folder, emptied) names no session
    the files hold: the database alone is read (its fast scans and its cache), not both."""
    from opencode_events.store.open import open_store
    from opencode_events.store.sqlite import Store

    data_dir = tmp_path / "data"
    shutil.copytree(MIXED, data_dir)
    in_db = {sid for (sid,) in rows(data_dir / "opencode.db", "SELECT id FROM session")}
    for file in (data_dir / "storage" / "session").glob("*/*.json"):
        if file.stem not in in_db:
            for message in (data_dir / "storage" / "message" / file.stem).glob("*.json"):
                message.unlink()  # deleted as OpenCode deletes: the folder stays, empty
            file.unlink()
    (data_dir / "storage" / "message" / "ses_gone").mkdir()
    with open_store(str(data_dir)) as store:
        assert type(store) is Store


def test_a_session_no_file_names_is_dated_by_its_messages_so_a_window_keeps_it(tmp_path):
    data_dir, storage = _tree(tmp_path)
    (file,) = [f for f in (storage / "session").glob("*/*.json") if "parentID" not in f.read_text()]
    newest = max(
        json.loads(m.read_text())["time"]["created"]
        for m in (storage / "message" / file.stem).glob("*.json")
    )
    file.unlink()
    from datetime import UTC, datetime

    # the window holds its last message
    since = datetime.fromtimestamp((newest - 1000) // 1000, UTC).isoformat()
    listed = run("sessions", "--db", str(data_dir), "--since", since, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert file.stem in [s["id"] for s in json.loads(listed.stdout)]
