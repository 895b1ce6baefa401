"""One stale rule for `sessions`, `usage` and `statusline` (reports.stale, core.activity).

The killed run (samples/sigint) is busy just after its last write and stale ten minutes
later in all three; a parent waiting on a subagent that still writes is busy in all three,
however long the parent itself has been silent.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from opencode_events.reports.sessions import summarize
from opencode_events.reports.statusline import take_glance
from opencode_events.reports.usage import store_usage
from opencode_events.store.sqlite import Store

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MINUTE = 60_000


def _last_write(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        return max(
            conn.execute(f"SELECT coalesce(max(time_updated), 0) FROM {t}").fetchone()[0]
            for t in ("session", "message", "part")
        )


def _states(db: Path, root: str, now: float) -> dict[str, str]:
    """What each report says of ``root`` at ``now``."""
    with Store(db) as store:
        (summary,) = summarize(store, [store.session(root)], now_ms=now)
        turns = store_usage(store, [root], now_ms=now).rows
        steps = store_usage(store, [root], by="step", now_ms=now).rows
        glance = take_glance(store, root, now_ms=now)

    def usage_state(rows) -> str:
        if any(r.in_flight for r in rows):
            return "busy"
        return "stale" if any(r.stale for r in rows) else "idle"

    return {
        "sessions": summary.state,
        "usage": usage_state(turns),
        "usage --by step": usage_state(steps),
        "statusline": glance.state,
    }


@pytest.mark.parametrize(("after", "state"), [(1_000, "busy"), (11 * MINUTE, "stale")])
def test_a_killed_run_is_busy_then_stale_in_every_report(after: int, state: str) -> None:
    db = SAMPLES / "sigint" / "opencode.db"
    with Store(db) as store:
        root = store.newest_session()
    assert set(_states(db, root, _last_write(db) + after).values()) == {state}


def _parent_waiting_on_a_busy_child(tmp_path: Path) -> tuple[Path, str, int]:
    """samples/task with the parent's first reply (its `task` call) in flight and silent
    since T, and the child's last reply in flight too, written 15 minutes after T."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (parent,) = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
    (child,) = conn.execute("SELECT id FROM session WHERE parent_id IS NOT NULL").fetchone()
    t = conn.execute("SELECT min(time_created) FROM message WHERE session_id = ?", (parent,))
    (start,) = t.fetchone()
    replies = conn.execute(
        "SELECT id, session_id, data FROM message WHERE json_extract(data, '$.role') = "
        "'assistant' ORDER BY time_created"
    ).fetchall()
    first_of_parent = next(r for r in replies if r[1] == parent)
    last_of_child = [r for r in replies if r[1] == child][-1]
    # the parent's reply after the task call is not there yet
    conn.execute(
        "DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE session_id = ? "
        "AND time_created > (SELECT time_created FROM message WHERE id = ?))",
        (parent, first_of_parent[0]),
    )
    conn.execute(
        "DELETE FROM message WHERE session_id = ? AND time_created > "
        "(SELECT time_created FROM message WHERE id = ?)",
        (parent, first_of_parent[0]),
    )
    for mid, _, data in (first_of_parent, last_of_child):
        info = json.loads(data)
        info["time"].pop("completed", None)
        info.pop("finish", None)
        conn.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(info), mid))
    late = start + 15 * MINUTE
    for table in ("session", "message", "part"):
        column = "id" if table == "session" else "session_id"
        conn.execute(f"UPDATE {table} SET time_updated = ? WHERE {column} = ?", (start, parent))
        conn.execute(f"UPDATE {table} SET time_updated = ? WHERE {column} = ?", (late, child))
    conn.commit()
    conn.close()
    return db, parent, late


def test_a_parent_waiting_on_a_subagent_at_work_is_busy_in_every_report(tmp_path: Path) -> None:
    db, parent, late = _parent_waiting_on_a_busy_child(tmp_path)
    assert set(_states(db, parent, late + MINUTE).values()) == {"busy"}
    assert set(_states(db, parent, late + 11 * MINUTE).values()) == {"stale"}


@pytest.mark.parametrize(
    "value, seconds",
    [("", None), ("600", 600.0), (" 30 ", 30.0), ("0", 0.0), ("1e12", 1e12), ("0.5", 0.5)],
)
def test_the_stale_after_setting(value: str, seconds: float | None) -> None:
    from opencode_events.core.activity import STALE_AFTER_MS, stale_after_ms
    from opencode_events.paths import stale_after_seconds

    env = {"OPENCODE_EVENTS_STALE_AFTER": value}
    assert stale_after_seconds(env) == seconds
    assert stale_after_ms(env) == (STALE_AFTER_MS if seconds is None else int(seconds * 1000))


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf", "1e400", "10m"])
def test_a_stale_after_that_is_no_number_of_seconds_is_one_error(value: str) -> None:
    """A typo is said, not taken for the default; `inf` once ended in a traceback."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPENCODE_EVENTS_STALE_AFTER": value, "OPENCODE_EVENTS_NO_CACHE": "1"}
    db = SAMPLES / "sigint" / "opencode.db"
    for args in (["sessions"], ["top", "--once"], ["usage", "--all"]):
        done = subprocess.run(
            [sys.executable, "-m", "opencode_events", *args, "--db", str(db)],
            capture_output=True,
            env=env,
            check=False,
        )
        assert done.returncode == 2 and done.stdout == b"", (args, done.stderr)
        assert done.stderr.decode().splitlines() == [
            f"error: OPENCODE_EVENTS_STALE_AFTER: not a number of seconds: {value!r} (e.g. 600)"
        ], args


NOW = 1_800_000_000_000


@pytest.mark.parametrize(
    ("role", "completed", "error", "finish", "written", "says"),
    [
        ("user", None, None, None, None, True),  # a prompt: its reply is still to come
        ("assistant", None, None, None, None, True),  # a reply running
        ("assistant", None, {"name": "APIError"}, None, None, False),  # failed: over
        ("assistant", NOW - 5, None, "stop", NOW - 5, False),  # done
        ("assistant", NOW - 5, None, "tool-calls", NOW - 5, True),  # the next step comes
        ("assistant", NOW - 5, None, "tool-calls", NOW - 2000, True),  # at the limit
        ("assistant", NOW - 5, None, "tool-calls", NOW - 2001, False),  # none came
        ("assistant", NOW - 5, None, "tool-calls", None, True),  # when: not known
        ("assistant", NOW - 5, {"name": "x"}, "tool-calls", NOW, False),  # failed
        ("system", None, None, None, None, None),  # neither: read on
        (None, None, None, None, None, None),
    ],
)
def test_what_the_newest_message_says_of_work_in_flight(
    role, completed, error, finish, written, says
) -> None:
    from opencode_events.core.activity import newest_says_in_flight

    found = newest_says_in_flight(
        role, completed=completed, error=error, finish=finish, written_ms=written, now_ms=NOW
    )
    assert found is says
