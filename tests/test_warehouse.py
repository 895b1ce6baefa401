"""Events ready for a warehouse (issue 20 §11): what a table of many machines' events groups
by — a usage event's model, provider and agent, a subagent's parent session, `--tag` stamps
— and a real load into DuckDB, typed by `schema --duckdb`, whose sums equal `usage`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, timeout=120)


def lines(output: bytes) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


# ------------------------------------------------------------------ --tag


@pytest.mark.parametrize(
    "args",
    [
        ["normalize", str(SAMPLES / "bash_ok" / "stream.jsonl")],
        ["normalize", str(SAMPLES / "serve_text" / "events.sse")],
        ["import", "--db", str(SAMPLES / "task" / "opencode.db"), "--all"],
    ],
    ids=["stream", "sse", "store"],
)
def test_a_tag_stamps_every_event(args: list[str]):
    result = run(*args, "--tag", "host=ci-7", "--tag", "job=build 42", "--tag", "empty=")
    assert result.returncode == 0, result.stderr.decode()
    events = lines(result.stdout)
    assert events and all(
        e["tags"] == {"host": "ci-7", "job": "build 42", "empty": ""} for e in events
    )
    untagged = lines(run(*args).stdout)
    assert [{k: v for k, v in e.items() if k != "tags"} for e in events] == untagged


def test_tags_read_again_keep_theirs_and_take_the_new_ones(tmp_path: Path):
    first = run("normalize", str(SAMPLES / "bash_ok" / "stream.jsonl"), "--tag", "host=a")
    saved = tmp_path / "events.jsonl"
    saved.write_bytes(first.stdout)
    again = lines(run("normalize", str(saved), "--tag", "job=1", "--tag", "host=b").stdout)
    assert all(e["tags"] == {"host": "b", "job": "1"} for e in again)


@pytest.mark.parametrize("value", ["no-equals", "=value", " =x"])
def test_a_tag_that_is_not_key_value_is_a_usage_error(value: str):
    result = run("normalize", "--tag", value, str(SAMPLES / "bash_ok" / "stream.jsonl"))
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode().startswith("error: Invalid value for '--tag'")
    assert result.stderr.count(b"\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["normalize", str(SAMPLES / "bash_ok" / "stream.jsonl")],
        ["import", "--db", str(SAMPLES / "task" / "opencode.db")],
    ],
    ids=["stream", "store"],
)
def test_a_tag_in_bytes_that_are_not_utf8_is_stamped_with_u_fffd(args: list[str]):
    """A tag given in another encoding (a Latin-1 host name: bytes that are not UTF-8,
    which Python holds as surrogates) is stamped with U+FFFD in their place, as the
    bytes of a record are: every line written is UTF-8 JSON."""
    tag = os.fsdecode(b"h\xf4te=caf\xe9")
    result = run(*args, "--tag", tag)
    assert (result.returncode, result.stderr) == (0, b"")
    events = lines(result.stdout)
    assert events and all(e["tags"] == {"h\ufffdte": "caf\ufffd"} for e in events)


# ------------------------------------------------------------------ what events group by


def test_a_subagents_events_name_its_parent_session():
    db = SAMPLES / "task" / "opencode.db"
    events = lines(run("import", "--db", str(db), "--all", "--no-metrics").stdout)
    (spawn,) = [e for e in events if e["kind"] == "orchestration"]
    parent, child = spawn["session_id"], spawn["child_session_id"]
    assert {e.get("parent_session_id") for e in events if e["session_id"] == child} == {parent}
    assert all("parent_session_id" not in e for e in events if e["session_id"] == parent)


def test_usage_events_name_model_provider_and_agent_from_the_store():
    db = SAMPLES / "task" / "opencode.db"
    usage = [
        e for e in lines(run("import", "--db", str(db), "--all").stdout) if e["kind"] == "usage"
    ]
    stored = subprocess.run(
        ["sqlite3", "-readonly", str(db), "SELECT id, data FROM message"],
        capture_output=True,
        text=True,
    )
    if stored.returncode != 0:  # no sqlite3 CLI: read the rows with Python's own binding
        import sqlite3

        with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
            rows = dict(conn.execute("SELECT id, data FROM message"))
    else:
        rows = dict(line.split("|", 1) for line in stored.stdout.splitlines())
    for event in usage:
        info = json.loads(rows[event["message_id"]])
        assert (event["model"], event["provider"], event["agent"], event["directory"]) == (
            info["modelID"],
            info["providerID"],
            info["agent"],
            info["path"]["cwd"],
        )


@pytest.mark.parametrize(
    ("source", "named"),
    [
        (["import", "--db", str(SAMPLES / "task" / "opencode.db"), "--all"], True),
        (["normalize", str(SAMPLES / "task" / "export.json")], True),
        (["normalize", str(SAMPLES / "serve_text" / "events.sse")], True),
        (["normalize", str(SAMPLES / "task" / "stream.jsonl")], False),  # a run names none
    ],
)
def test_usage_events_name_the_directory_where_the_source_does(source, named):
    usage = [e for e in lines(run(*source).stdout) if e["kind"] == "usage"]
    assert usage
    directories = {e.get("directory") for e in usage}
    if named:
        assert None not in directories and all(d.startswith("/") for d in directories)
    else:
        assert directories == {None}


# ------------------------------------------------------------------ DuckDB

# fork: its copied history is marked `copied`, and left out as `usage` leaves it out
SCENARIOS = ["task", "parallel_tools", "mcp", "bash_fail", "compaction", "skill", "fork"]


def _loaded(events: Path) -> Any:
    """The documented load (docs/events.md): the events into table `events`, typed by
    `schema --duckdb`."""
    columns = run("schema", "--duckdb").stdout.decode().strip()
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE events AS SELECT * FROM read_json('{events}', "
        f"format = 'newline_delimited', columns = {columns})"
    )
    return con


def test_a_count_beyond_64_bits_is_damage_and_the_events_still_load(tmp_path: Path):
    """A damaged step's token total or a command's exit code beyond a 64-bit integer: the
    JSON Schema said integer, the DuckDB columns BIGINT, and one such line failed the whole
    load. The figures' rule counts it 0 (the total: the classes' sum), the exit code none."""
    finish = (
        '{"type":"step_finish","timestamp":1795966860514,"sessionID":"ses_x","part":{"id":"f1",'
        '"reason":"stop","messageID":"m","sessionID":"ses_x","type":"step-finish","tokens":'
        '{"input":1,"output":1,"total":10000000000000000000,"cache":{"read":1e21}},"cost":0.1}}'
    )
    bash = (
        '{"type":"tool_use","timestamp":1795966860500,"sessionID":"ses_x","part":{"id":"t1",'
        '"type":"tool","tool":"bash","callID":"c","state":{"status":"completed","input":'
        '{"command":"make build"},"output":"","metadata":{"exit":1180591620717411303424}}}}'
    )
    stream = tmp_path / "stream.jsonl"
    stream.write_text(bash + "\n" + finish + "\n")
    result = run("normalize", str(stream))
    assert result.returncode == 0, result.stderr.decode()
    events = tmp_path / "events.jsonl"
    events.write_bytes(result.stdout)
    con = _loaded(events)
    usage = con.execute(
        "SELECT total_tokens, cache_read_tokens FROM events WHERE kind = 'usage'"
    ).fetchall()
    assert usage == [(2, 0)]
    (command,) = con.execute("SELECT exit_code FROM events WHERE kind = 'command'").fetchall()
    assert command == (None,)
    (metrics,) = con.execute("SELECT total_tokens FROM events WHERE kind = 'metrics'").fetchall()
    assert metrics == (2,)


def test_a_retry_attempt_beyond_64_bits_is_none_and_the_events_still_load(tmp_path: Path):
    """A retry's ``attempt`` beyond a 64-bit integer (a server event's, a stored or exported
    part's): the DuckDB column is BIGINT, and one such line failed the whole load. Such an
    attempt is damage, and none is written, as for an exit code that large."""
    huge = 1 << 80
    frame = {
        "id": "evt_1",
        "type": "session.status",
        "properties": {
            "sessionID": "ses_x",
            "status": {"type": "retry", "attempt": huge, "message": "m", "next": 1},
        },
    }
    sse = tmp_path / "events.sse"
    sse.write_text(f"data: {json.dumps(frame)}\n\n")
    doc = json.loads((SAMPLES / "text" / "export.json").read_text())
    message = doc["messages"][-1]
    retry = {**message["parts"][0], "type": "retry", "id": "prt_retry", "attempt": huge}
    retry["error"] = {"name": "APIError", "data": {"message": "m"}}
    message["parts"].insert(1, retry)
    export = tmp_path / "export.json"
    export.write_text(json.dumps(doc))
    events = tmp_path / "events.jsonl"
    with open(events, "wb") as out:
        for source in (sse, export):
            result = run("normalize", str(source))
            assert result.returncode == 0, result.stderr.decode()
            out.write(result.stdout)
    con = _loaded(events)
    retries = con.execute("SELECT attempt, message FROM events WHERE kind = 'retry'").fetchall()
    assert retries == [(None, "m"), (None, "m")]


def test_events_load_into_duckdb_and_their_sums_are_usage(tmp_path: Path):
    """Many machines' events in one table: each import tagged with where it came from,
    typed by `schema --duckdb`; per session (subagents folded by parent_session_id) the
    sums equal `usage --by session` of that database."""
    events = tmp_path / "events.jsonl"
    with open(events, "wb") as out:
        for scenario in SCENARIOS:
            db = str(SAMPLES / scenario / "opencode.db")
            result = run("import", "--db", db, "--all", "--tag", f"machine={scenario}")
            assert result.returncode == 0, result.stderr.decode()
            out.write(result.stdout)
    con = _loaded(events)
    found = {
        (machine, session): (cost, tokens, inferences)
        for machine, session, cost, tokens, inferences in con.execute(
            "SELECT tags->>'machine', coalesce(parent_session_id, session_id), sum(cost), "
            "sum(total_tokens), count(*) FROM events "
            "WHERE kind = 'usage' AND copied IS NOT TRUE GROUP BY ALL"
        ).fetchall()
    }
    expected = {}
    for scenario in SCENARIOS:
        db = str(SAMPLES / scenario / "opencode.db")
        report = json.loads(
            run("usage", "--db", db, "--all", "--by", "session", "--format", "json").stdout
        )
        for row in report["rows"]:
            expected[(scenario, row["session_id"])] = (
                row["cost"],
                row["total_tokens"],
                row["inferences"],
            )
    assert found.keys() == expected.keys()
    for key, (cost, tokens, inferences) in expected.items():
        assert found[key][1:] == (tokens, inferences), key
        assert found[key][0] == pytest.approx(cost, rel=1e-12), key
    kinds = {kind for (kind,) in con.execute("SELECT DISTINCT kind FROM events").fetchall()}
    assert {"usage", "metrics", "message"} <= kinds
    # By model, as the README groups them: a model is its provider's (``usage --by model``
    # names it provider/model), so the same id from two providers is two rows.
    by_model = {
        (model if provider is None else f"{provider}/{model}"): (cost, tokens)
        for provider, model, cost, tokens in con.execute(
            "SELECT provider, model, sum(cost), sum(total_tokens) FROM events "
            "WHERE kind = 'usage' AND copied IS NOT TRUE GROUP BY ALL"
        ).fetchall()
    }
    models: dict[str, list[float]] = {}
    for scenario in SCENARIOS:
        db = str(SAMPLES / scenario / "opencode.db")
        report = json.loads(
            run("usage", "--db", db, "--all", "--by", "model", "--format", "json").stdout
        )
        for row in report["rows"]:
            found = models.setdefault(row["model"], [0.0, 0])
            found[0] += row["cost"]
            found[1] += row["total_tokens"]
    assert by_model.keys() == models.keys()
    for model, (cost, tokens) in models.items():
        assert by_model[model][1] == tokens, model
        assert by_model[model][0] == pytest.approx(cost, rel=1e-12), model
    # By project: the events' directory, as `usage --by project` groups each database.
    by_directory = dict(
        con.execute(
            "SELECT directory, sum(cost) FROM events "
            "WHERE kind = 'usage' AND copied IS NOT TRUE GROUP BY ALL"
        ).fetchall()
    )
    projects: dict[str, float] = {}
    for scenario in SCENARIOS:
        db = str(SAMPLES / scenario / "opencode.db")
        report = json.loads(
            run("usage", "--db", db, "--all", "--by", "project", "--format", "json").stdout
        )
        for row in report["rows"]:
            projects[row["project"]] = projects.get(row["project"], 0.0) + row["cost"]
    assert by_directory.keys() == projects.keys()
    for directory, cost in projects.items():
        assert by_directory[directory] == pytest.approx(cost, rel=1e-12), directory


def test_the_documented_reload_leaves_one_copy_and_the_sums_of_usage(tmp_path: Path):
    """docs/events.md's nightly reload (`import --since … --children --no-metrics`, each
    session's rows deleted and written again), run twice over an earlier day's load: one
    copy of every event, a new session's subagent included, as `usage --by session`
    folds it."""
    first = tmp_path / "events.jsonl"  # the day before: another database's sessions
    first.write_bytes(run("import", "--db", str(SAMPLES / "text" / "opencode.db"), "--all").stdout)
    con = _loaded(first)
    columns = run("schema", "--duckdb").stdout.decode().strip()
    db = str(SAMPLES / "task" / "opencode.db")
    day = tmp_path / "day.jsonl"
    for _ in range(2):
        result = run("import", "--db", db, "--since", "2020-01-01", "--children", "--no-metrics")
        assert result.returncode == 0, result.stderr.decode()
        day.write_bytes(result.stdout)
        read = f"read_json('{day}', format = 'newline_delimited', columns = {columns})"
        con.execute(f"DELETE FROM events WHERE session_id IN (SELECT session_id FROM {read})")
        con.execute(f"INSERT INTO events SELECT * FROM {read}")
    every = run("import", "--db", db, "--all", "--no-metrics").stdout
    assert con.execute("SELECT count(*) FROM events").fetchone() == (
        len(lines(first.read_bytes())) + len(lines(every)),
    )
    found = con.execute(
        "SELECT coalesce(parent_session_id, session_id), sum(cost), sum(total_tokens) "
        "FROM events WHERE kind = 'usage' AND copied IS NOT TRUE "
        f"AND session_id IN (SELECT session_id FROM {read}) GROUP BY ALL"
    ).fetchall()
    report = json.loads(
        run("usage", "--db", db, "--all", "--by", "session", "--format", "json").stdout
    )
    expected = [(r["session_id"], r["cost"], r["total_tokens"]) for r in report["rows"]]
    assert [(s, pytest.approx(c, rel=1e-12), t) for s, c, t in found] == expected


def test_a_forks_copied_history_is_marked_copied_in_import_and_export(tmp_path: Path):
    """A message older than its own session is a fork's copy: its events say `copied`,
    from the store (the real fork capture) and from an export document (whose session
    began after its first turn, as a fork's does)."""
    imported = [
        json.loads(line)
        for line in run("import", "--db", str(SAMPLES / "fork" / "opencode.db"), "--all")
        .stdout.decode()
        .splitlines()
    ]
    fork = "ses_dd805feb3ffeRYmW0nRsUneOP2"
    marked = [e for e in imported if e.get("copied")]
    assert {e["session_id"] for e in marked} == {fork}
    assert [e["kind"] for e in marked] == ["prompt", "message", "usage"]
    first_own = next(e for e in imported if e["session_id"] == fork and not e.get("copied"))
    assert first_own["kind"] == "prompt" and first_own["text"] == "forked follow-up"

    # Each copy is dated as the turn it copies, from its data (which the copy keeps; its
    # part rows are stamped when the fork was made, 1.5 s later here): within the few ms
    # a row's time and its data's differ by.
    original = [
        e for e in imported if e.get("session_id") not in (fork, None) and not e.get("copied")
    ]
    assert [e["kind"] for e in original] == [e["kind"] for e in marked]
    assert all(abs(c["time"] - o["time"]) < 100 for c, o in zip(marked, original, strict=True))

    doc = json.loads((SAMPLES / "fork" / "export.json").read_text())
    turns = doc["messages"]
    doc["info"]["time"]["created"] = turns[-1]["info"]["time"]["created"]  # the last is its own
    path = tmp_path / "fork.json"
    path.write_text(json.dumps(doc))
    events = [json.loads(line) for line in run("normalize", str(path)).stdout.splitlines()]
    copies = {e["message_id"] for e in events if e.get("copied")}
    assert copies == {m["info"]["id"] for m in turns[:-1]}


def test_the_duckdb_columns_cover_every_field_of_the_schema():
    schema = json.loads(run("schema").stdout)
    fields = {name for d in schema["$defs"].values() for name in d.get("properties", {})}
    columns = run("schema", "--duckdb").stdout.decode()
    assert {c.split("'")[1] for c in columns.strip("{}\n").split(", ")} == fields
    assert "'cost': 'DOUBLE'" in columns and "'success': 'BOOLEAN'" in columns
