"""`statusline` and `top` reading the store while the real OpenCode writes it.

OpenCode runs a slow bash call: meanwhile `statusline` says busy (and the session's cost so
far), `top` in a pseudo-terminal shows the session doing `bash`; once the run is over both
say idle, with the run's whole cost.
"""

from __future__ import annotations

import os
import select
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness.scenarios import U, call, say, tools
from tests.test_top import _plain, _pty, _read_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "opencode_events"]


def _statusline(db: Path) -> str:
    done = subprocess.run(
        [*CLI, "statusline", "--db", str(db), "--format", "{state} {cost} {session}"],
        capture_output=True,
        cwd=REPO,
        timeout=30,
    )
    return done.stdout.decode().strip() if done.returncode == 0 else ""


def _bash_running(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                'SELECT 1 FROM part WHERE data LIKE \'%"status":"running"%\''
            ).fetchall()
    except sqlite3.Error:
        return False
    return bool(rows)


def test_statusline_and_top_while_opencode_works(mock_model, opencode_env):
    m = mock_model(
        [
            tools(call("bash", {"command": "sleep 4; echo done"}, "call_slow"), usage=U(2000, 30)),
            say("Finished.", usage=U(2100, 5, 1900)),
        ]
    )
    env = opencode_env(m)
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(run=env.run("work", "slowly")))
    run.start()
    seen: list[str] = []
    top = master = None
    try:
        deadline = time.monotonic() + 60
        while not _bash_running(env.db_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _bash_running(env.db_path):  # say why: the run's end, if it ended
            run.join(timeout=5)
            ran = result.get("run")
            said = f"exit {ran.returncode}: {ran.stderr[-2000:]!r}" if ran else "still running"
            raise AssertionError(f"OpenCode never started the bash call ({said})")
        seen.append(_statusline(env.db_path))
        top, master = _pty([*CLI, "top", "--db", str(env.db_path), "--interval", "0.2"])
        out = _read_until(master, top, rb"busy .*bash \d")
        assert b"1 busy" in _plain(out)
        run.join(timeout=90)
        seen.append(_statusline(env.db_path))
        _read_until(master, top, rb"0 busy")
        os.write(master, b"q")
        assert top.wait(timeout=10) == 0
    finally:
        run.join(timeout=90)
        if top is not None and top.poll() is None:
            top.kill()
            top.wait()
        if master is not None:
            while select.select([master], [], [], 0)[0]:
                try:
                    if not os.read(master, 65536):
                        break
                except OSError:
                    break
            os.close(master)
    assert result["run"].returncode == 0, result["run"].stderr
    sid = result["run"].session_id
    during, after = (line.split() for line in seen)
    assert during[0] == "busy" and during[2] == sid, seen
    assert after[0] == "idle" and after[2] == sid, seen
    with sqlite3.connect(f"file:{env.db_path}?mode=ro", uri=True) as conn:
        (cost,) = conn.execute("SELECT cost FROM session WHERE id = ?", (sid,)).fetchone()
    assert after[1] == f"${cost:.4f}"
