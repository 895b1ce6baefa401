"""`import --follow` on the store the real OpenCode writes while it runs.

Following starts before OpenCode has made its database (it appears during the run); the
followed events must be those `import` reads from the finished store (with the server
events' documented differences), each written well under a second after OpenCode wrote it;
a run killed in the middle of a tool call is followed to its end as stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time

import pytest

from tests.harness.scenarios import U, call, say, tools
from tests.test_follow import comparable

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "opencode_events"]


def _follow(env, *args: str, extra_env: dict[str, str] | None = None):
    """Start `import --follow` on the harness's database; read its lines with their
    arrival times (epoch ms) in a thread."""
    proc = subprocess.Popen(
        [*CLI, "import", "--follow", "--db", str(env.db_path), "--format", "jsonl", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(extra_env or {})},
    )
    lines: list[tuple[float, dict]] = []

    def drain() -> None:
        for line in proc.stdout:
            lines.append((time.time() * 1000, json.loads(line)))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return proc, lines, thread


def _stored(env, session_id: str) -> list[dict]:
    done = subprocess.run(
        [*CLI, "import", session_id, "--db", str(env.db_path), "--format", "jsonl"],
        capture_output=True,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def _tool_running(db) -> bool:
    """The bash call is stored as running (the stream says nothing until it ends)."""
    if not db.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                'SELECT 1 FROM part WHERE data LIKE \'%"status":"running"%\''
            ).fetchall()
    except sqlite3.Error:
        return False
    return bool(rows)


def test_follow_a_run_as_opencode_writes_it(mock_model, opencode_env):
    m = mock_model(
        [
            tools(
                call("bash", {"command": "echo one; sleep 1; echo two"}, "call_b"),
                call("read", {"filePath": "README.md"}, "call_r"),
                usage=U(1700, 30, 200),
            ),
            tools(call("bash", {"command": "sleep 1; exit 3"}, "call_c"), usage=U(1800, 20, 0)),
            say("Done.", usage=U(1900, 10, 300, 5)),
        ]
    )
    env = opencode_env(m, files={"README.md": "hello\n"})
    assert not env.db_path.exists()
    follow, lines, thread = _follow(env)
    run = env.run("do", "it")
    assert run.returncode == 0, run.stderr
    code = follow.wait(timeout=60)
    thread.join(timeout=10)
    err = follow.stderr.read().decode()
    assert code == 0, err
    assert "waiting for" in err
    events = [event for _, event in lines]
    assert events[-1]["kind"] == "metrics"
    assert {e["session_id"] for e in events[:-1]} == {run.session_id}
    assert comparable(events) == comparable(_stored(env, run.session_id))
    tools_seen = [e for e in events if e["kind"] in ("command", "read")]
    assert [e["call_id"] for e in tools_seen] == ["call_b", "call_r", "call_c"] or [
        e["call_id"] for e in tools_seen
    ] == ["call_r", "call_b", "call_c"]
    # From OpenCode's write (the event's time) to our line: under a second.
    delays = [
        arrived - e["time"] for arrived, e in lines if e.get("time") and e["kind"] != "prompt"
    ]
    assert delays and statistics.median(delays) < 1000 and max(delays) < 2000, delays


def test_a_run_killed_mid_tool_is_followed_to_stale(mock_model, opencode_env):
    m = mock_model(
        [
            tools(
                call("bash", {"command": "echo started; sleep 30; echo finished"}, "call_sleep"),
                usage=U(1500, 20, 0, 0),
            ),
            say("Should not be reached.", usage=U(1600, 5, 0, 0)),
        ]
    )
    env = opencode_env(m)
    follow, lines, thread = _follow(env, extra_env={"OPENCODE_EVENTS_STALE_AFTER": "3"})
    run = env.run_interrupted(
        "run", "it", when=lambda _: _tool_running(env.db_path), sig=signal.SIGKILL, timeout=60
    )
    started = time.monotonic()
    code = follow.wait(timeout=60)
    thread.join(timeout=10)
    err = follow.stderr.read().decode()
    assert code == 0, err
    assert "is stale" in err
    assert time.monotonic() - started < 30
    events = [event for _, event in lines]
    running = [e for e in events if e["kind"] == "command"]
    assert len(running) == 1 and running[0]["status"] == "running", events
    sid = running[0]["session_id"]
    assert comparable(events) == comparable(_stored(env, sid))
    assert run.returncode != 0
