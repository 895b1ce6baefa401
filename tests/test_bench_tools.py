"""The benchmark's own tools: they must run with their defaults' shape (bench/)."""

from __future__ import annotations

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
