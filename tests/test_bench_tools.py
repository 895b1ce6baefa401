"""The benchmark's own tools: they must run with their defaults' shape (bench/)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("sessions", "parts"), [(50, 120), (200, 400)])
def test_gen_db_with_its_default_seed_writes_every_session(tmp_path, sessions, parts):
    # Near the end of a run the parts left are all reserved for later sessions: a session
    # must still take one unit (its row is the unit's), not be written without a template.
    out = tmp_path / "gen.db"
    done = subprocess.run(
        [sys.executable, "bench/gen_db.py", "--sessions", str(sessions), "--parts", str(parts)]
        + ["--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(out) as conn:
        (count,) = conn.execute("SELECT count(*) FROM session").fetchone()
        (empty,) = conn.execute(
            "SELECT count(*) FROM session s WHERE NOT EXISTS "
            "(SELECT 1 FROM message m WHERE m.session_id = s.id)"
        ).fetchone()
    assert count == sessions
    assert empty == 0


def _generate(tmp_path: Path, *options: str) -> tuple[Path, dict]:
    out = tmp_path / "gen.db"
    done = subprocess.run(
        [sys.executable, "bench/gen_db.py", "--sessions", "120", "--parts", "3000"]
        + ["--target-gb", "0.01", "--out", str(out), *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out, json.loads(out.with_suffix(".json").read_text())


def test_gen_db_session_columns_are_their_messages_sums(tmp_path):
    """As OpenCode keeps them: a session's cost and tokens are the sums of its assistant
    messages', those cloned as captured (1.1's key order, not redrawn) included."""
    out, _ = _generate(tmp_path, "--sessions", "300", "--parts", "30000")
    with sqlite3.connect(out) as conn:
        rows = conn.execute(
            "SELECT s.id, s.cost, s.tokens_output, total(json_extract(m.data, '$.cost')), "
            "total(json_extract(m.data, '$.tokens.output')) FROM session s JOIN message m "
            "ON m.session_id = s.id AND json_extract(m.data, '$.role') = 'assistant' "
            "GROUP BY s.id"
        ).fetchall()
    assert rows
    for sid, cost, output, message_cost, message_output in rows:
        assert cost == pytest.approx(message_cost, rel=1e-9, abs=1e-12), sid
        assert output == message_output, sid


def test_gen_db_interleaved_rows_are_in_write_order(tmp_path):
    # As a live OpenCode writes them: by time across sessions, a fork's copies when forked.
    out, meta = _generate(tmp_path, "--shape", "field", "--longest-turns", "30")
    assert meta["order"] == "interleaved" and meta["rows_out_of_write_order"] == 0
    with sqlite3.connect(out) as conn:
        forks = conn.execute("SELECT count(*) FROM session WHERE title LIKE '%(fork #%'")
        assert forks.fetchone()[0] > 0
        created = [
            t
            for (t,) in conn.execute(
                "SELECT p.time_created FROM part p JOIN session s ON s.id = p.session_id "
                "WHERE s.title NOT LIKE '%(fork #%' ORDER BY p.rowid"
            )
        ]
        (projects,) = conn.execute("SELECT count(DISTINCT project_id) FROM session").fetchone()
        (turns,) = conn.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM message "
            "WHERE json_extract(data, '$.role') = 'user' GROUP BY session_id)"
        ).fetchone()
        sessions = {sid for (sid,) in conn.execute("SELECT session_id FROM part LIMIT 400")}
    assert created == sorted(created)
    assert projects <= 6
    assert turns >= 30 and meta["longest_session_turns"] >= 30
    assert len(sessions) > 1


def test_gen_db_grouped_keeps_a_sessions_rows_together(tmp_path):
    out, meta = _generate(tmp_path)
    assert meta["order"] == "grouped" and meta["shape"] == "bench"
    with sqlite3.connect(out) as conn:
        order = [
            root
            for (root,) in conn.execute(
                "SELECT coalesce(s.parent_id, s.id) FROM message m "
                "JOIN session s ON s.id = m.session_id ORDER BY m.rowid"
            )
        ]
    # A session and its subagents' rows come together; no family comes back after another's.
    runs = [s for i, s in enumerate(order) if i == 0 or order[i - 1] != s]
    assert len(runs) == len(set(runs))


def test_gen_db_spaced_json_is_the_same_values_in_other_bytes(tmp_path):
    plain, _ = _generate(tmp_path / "a")
    spaced, meta = _generate(tmp_path / "b", "--shape", "spaced")
    assert meta["json"] == "spaced"

    def rows(path: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT id, data FROM part ORDER BY rowid").fetchall()

    a, b = rows(plain), rows(spaced)
    assert [json.loads(d) for _, d in a] == [json.loads(d) for _, d in b]
    assert all(x != y for (_, x), (_, y) in zip(a, b, strict=True) if len(x) > 2)
