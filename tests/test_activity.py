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
from tests.stores import (
    cut_after_the_newest_prompt,
    merged_captures,
    with_a_prompt_awaiting_its_reply,
)

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


@pytest.mark.parametrize(("after", "state"), [(1_000, "busy"), (11 * MINUTE, "stale")])
def test_a_prompt_awaiting_its_reply_is_busy_then_stale_in_every_report(
    tmp_path: Path, after: int, state: str
) -> None:
    """A prompt written, its reply not yet (for a moment at every prompt; for good when
    OpenCode was killed in between): busy, then stale, as a reply in flight is. `usage`
    says it on the prompt's turn; by step there is no row yet (no step began)."""
    db = tmp_path / "opencode.db"
    sid, _prompt = with_a_prompt_awaiting_its_reply(db)  # samples/continue3, 3rd prompt
    states = _states(db, sid, _last_write(db) + after)
    assert states == {
        "sessions": state,
        "usage": state,
        "usage --by step": "idle",
        "statusline": state,
    }
    with Store(db) as store:
        *done, waiting = store_usage(store, [sid], now_ms=_last_write(db) + after).rows
    assert waiting.inferences == 0 and not any(r.in_flight or r.stale for r in done)


def _summaries_every_way(db: Path, now: float, monkeypatch) -> list[dict[str, str]]:
    """Each session's state as `sessions` finds it every way it reads the messages: by
    session, the whole tables in this process (in message chunks of a few rows too, so a
    session spans several) or by the workers, and a session at a time (``each_summary``)."""
    import opencode_events.reports.sessions as summary_module

    found = []
    with Store(db) as store:
        rows = store.sessions()

        def states(summaries) -> dict[str, str]:
            return {s.id: s.state for s in summaries}

        found.append(states(summarize(store, rows, now_ms=now)))
        with monkeypatch.context() as whole:
            whole.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
            whole.setattr(summary_module, "_PARALLEL_MIN_PARTS", 10**12)
            for chunk in (1, 2, 3, 1024):
                whole.setattr(summary_module, "_MESSAGE_CHUNK", chunk)
                found.append(states(summarize(store, rows, now_ms=now)))
            found.append(states(summary_module.each_summary(store, all_sessions=True, now_ms=now)))
            whole.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
            found.append(states(summarize(store, rows, now_ms=now)))
    return found


def test_every_way_sessions_reads_the_messages_finds_the_prompt_awaiting_its_reply(
    tmp_path: Path, monkeypatch
) -> None:
    """The whole tables are read in chunks of rows, by several processes: the newest of a
    session's messages may be in any chunk, its prompt in one and a reply in the next."""
    db = merged_captures(tmp_path / "opencode.db", ("continue3", "task", "text", "sigint"))
    with Store(SAMPLES / "continue3" / "opencode.db") as store:
        waiting = store.newest_session()
    cut_after_the_newest_prompt(db, waiting)
    found = _summaries_every_way(db, _last_write(db) + 1_000, monkeypatch)
    expected = dict.fromkeys(found[0], "idle")
    with Store(SAMPLES / "sigint" / "opencode.db") as store:
        killed = store.newest_session()  # its reply left open
    expected.update({waiting: "busy", killed: "busy"})
    assert found == [expected] * len(found)


@pytest.mark.parametrize("spelling", ["opencode", "spaced"])
def test_the_count_of_every_message_leaves_only_sessions_maybe_in_flight_to_read(
    tmp_path: Path, spelling: str
) -> None:
    """`sessions` of many sessions reads the newest messages only of the sessions its count
    of every message says may be in flight (its cost): none of the finished captures, a
    shell command's prompt (written `{"time":…,"role":"user",…}`) among them; the session
    whose newest message is a prompt, once cut so. The same of a store whose every message
    a writer spaced as json.dumps does (`{"role": "user", …}`), which the count reads with
    a spaced writer's patterns once it met a prompt OpenCode's missed, and only then."""
    import opencode_events.reports.sessions as summary_module

    db = merged_captures(tmp_path / "opencode.db", ("serve_shell", "continue3", "task", "text"))
    if spelling == "spaced":
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT id, data FROM message").fetchall()
            conn.executemany(
                "UPDATE message SET data = ? WHERE id = ?",
                [(json.dumps(json.loads(data)), mid) for mid, data in rows],
            )
        conn.close()
    asked: list[str] = []

    def maybe_in_flight() -> set[str]:
        counts: dict = {}
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (low, high) = conn.execute("SELECT min(rowid), max(rowid) + 1 FROM message").fetchone()
            conn.set_trace_callback(asked.append)
            summary_module._count_message_range(conn, low, high, counts)
        conn.close()
        return {sid for sid, (_turns, _inferences, maybe) in counts.items() if maybe}

    assert maybe_in_flight() == set()
    spaced_patterns = [sql for sql in asked if '"role": "user", *' in sql]
    assert bool(spaced_patterns) == (spelling == "spaced")
    with Store(SAMPLES / "continue3" / "opencode.db") as store:
        waiting = store.newest_session()
    cut_after_the_newest_prompt(db, waiting)
    assert maybe_in_flight() == {waiting}


def _edge(db: Path, case: str) -> None:
    """samples/text (a prompt and its finished reply) and one more message, hand-made."""
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        sid, reply, created = conn.execute(
            "SELECT session_id, id, time_created FROM message ORDER BY time_created DESC"
        ).fetchone()
        prompt = {"role": "user", "time": {"created": created}, "agent": "build"}
        if case == "spaced":  # a writer that spaces its JSON: not OpenCode's spelling
            row = ("msg_zz1", created + 5, json.dumps(prompt))
        elif case == "tie, the prompt's id after the reply's":
            row = (reply + "z", created, json.dumps(prompt, separators=(",", ":")))
        elif case == "tie, the prompt's id before the reply's":
            row = ("msg_000", created, json.dumps(prompt, separators=(",", ":")))
        else:  # a message neither prompt nor reply after a prompt: the prompt is newest
            row = ("msg_zz1", created + 5, json.dumps(prompt, separators=(",", ":")))
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES ('msg_zz2', ?, ?, ?, '{\"role\":\"system\"}')",
                (sid, created + 6, created + 6),
            )
        mid, at, data = row
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, at, at, data),
        )
    conn.close()


@pytest.mark.parametrize(
    ("case", "state"),
    [
        ("spaced", "busy"),
        ("tie, the prompt's id after the reply's", "busy"),
        ("tie, the prompt's id before the reply's", "idle"),  # the reply is newest
        ("neither prompt nor reply newest", "busy"),
    ],
)
def test_the_newest_prompt_or_reply_decides_however_it_is_written(
    tmp_path: Path, monkeypatch, case: str, state: str
) -> None:
    """The newest message by (time_created, id), as the live views order them, whatever
    the spelling of its JSON; a message of no other role does not hide the prompt."""
    db = tmp_path / "opencode.db"
    _edge(db, case)
    now = _last_write(db) + 1_000
    with Store(db) as store:
        (sid,) = [row.id for row in store.sessions()]
        assert take_glance(store, sid, now_ms=now).state == state
    assert _summaries_every_way(db, now, monkeypatch) == [{sid: state}] * 7


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
