"""Spending limits and subagents' spend with the real OpenCode.

- `run` folds the subagents' cost in from the store at the end (their steps are not in
  the stream): the closing metrics equal the store's session columns, parent and child.
- `run --max-cost` stops OpenCode while a subagent works (the parent's stream is silent
  then: only the store shows the cost climbing) and exits 3.
- `attach --max-cost` aborts a session of a real `opencode serve` through its API and
  exits 3; the server's session is idle afterwards, its remaining steps never asked for.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_serve_live import attached
from tests.harness.scenarios import U, call, say, tools

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "opencode_events"]

# The mock model's price (tests/harness/opencode.py): $3 per million input tokens.
CHILD_STEP = U(100_000, 20)  # $0.3003 a step


def _task(child_steps: list[dict]) -> tuple[list[dict], dict]:
    steps = [
        tools(
            call(
                "task",
                {
                    "description": "Work in a subagent",
                    "prompt": "[child-task] do the work",
                    "subagent_type": "general",
                },
                "call_task",
            ),
            usage=U(4000, 60),  # $0.0129
        ),
        say("The subagent is done.", usage=U(4400, 15, 3900)),
    ]
    return steps, {"child": {"match": "[child-task]", "steps": child_steps}}


def _columns(db: Path) -> dict[str, tuple[str | None, float]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {sid: (parent, cost) for sid, parent, cost in conn.execute(
            "SELECT id, parent_id, cost FROM session")}  # fmt: skip


def _run(env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "run", "--format", "jsonl", *args, "-m", "mock/mock-model", "go"],
        capture_output=True,
        cwd=env.work,
        timeout=timeout,
        env={**env.env, "OPENCODE_BIN": env.binary, "PYTHONPATH": str(REPO)},
    )


def test_run_folds_the_subagents_spend_into_its_metrics(mock_model, opencode_env):
    child = [
        tools(call("bash", {"command": "echo child"}, "call_child"), usage=U(900, 20)),
        say("Child done.", usage=U(1000, 18, 900)),
    ]
    steps, conversations = _task(child)
    env = opencode_env(mock_model(steps, conversations=conversations))
    done = _run(env)
    assert done.returncode == 0, done.stderr.decode()
    events = [json.loads(line) for line in done.stdout.splitlines()]
    metrics = events[-1]
    columns = _columns(env.db_path)
    (root,) = [sid for sid, (parent, _) in columns.items() if parent is None]
    below = {sid: cost for sid, (parent, cost) in columns.items() if parent == root}
    assert metrics["kind"] == "metrics"
    assert metrics["cost"] == pytest.approx(columns[root][1], abs=1e-12)  # the stream's own
    assert metrics["subagent_sessions"] == len(below) == 1
    assert metrics["subagent_cost"] == pytest.approx(sum(below.values()), abs=1e-12)
    assert metrics["total_cost"] == pytest.approx(metrics["cost"] + sum(below.values()), 1e-9)
    # the child's own steps are in no event of the stream
    assert {e.get("session_id") for e in events[:-1]} == {root}


def test_run_max_cost_stops_opencode_while_a_subagent_spends(mock_model, opencode_env):
    slow = [
        tools(call("bash", {"command": f"sleep 1; echo {n}"}, f"call_{n}"), usage=CHILD_STEP)
        for n in range(8)
    ]
    steps, conversations = _task([*slow, say("never", usage=CHILD_STEP)])
    m = mock_model(steps, conversations=conversations)
    env = opencode_env(m)
    started = time.monotonic()
    done = _run(env, "--max-cost", "0.5")
    elapsed = time.monotonic() - started
    err = done.stderr.decode()
    assert done.returncode == 3, err
    assert "over --max-cost $0.5; OpenCode was stopped" in err
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["kind"] == "metrics" and events[-1]["total_cost"] > 0.5
    assert "The subagent is done." not in [e.get("text") for e in events]
    # stopped after the second child step crossed $0.5, long before the eight were done
    served = [r for r in m.requests if r.conversation == "child"]
    assert 2 <= len(served) <= 4, len(served)
    assert elapsed < 30
    columns = _columns(env.db_path)
    assert 0.5 < sum(cost for _, cost in columns.values()) < 1.3


def test_attach_max_cost_aborts_the_session_through_the_server(mock_model, opencode_env):
    slow = [
        tools(call("bash", {"command": f"sleep 1; echo {n}"}, f"call_{n}"), usage=CHILD_STEP)
        for n in range(8)
    ]
    m = mock_model([*slow, say("never", usage=CHILD_STEP)])
    env = opencode_env(m)
    with env.serve() as srv:
        sid = srv.create_session()["id"]
        with attached(
            srv.url, "--session", sid, "--follow", "--max-cost", "0.5", "--format", "jsonl"
        ) as attach:
            attach.wait_stderr("attached to")
            srv.prompt_async(sid, "work until stopped")
            code = attach.wait(timeout=90)  # ends by itself although --follow
            assert code == 3, attach.stderr
            assert f"{sid} cost $" in attach.stderr and "aborted it" in attach.stderr
            events = attach.events()
        served = len(m.requests)
        time.sleep(1.5)  # would the run go on, it would ask for its next step meanwhile
        assert len(m.requests) == served
        state = subprocess.run(
            [*CLI, "statusline", "--db", str(env.db_path), "--session", sid, "--format", "{state}"],
            capture_output=True,
            cwd=REPO,
            timeout=30,
        )
    assert state.stdout == b"idle\n", state.stderr.decode()
    assert events[-1]["kind"] == "metrics"
    assert 2 <= len([r for r in m.requests if r.conversation == "main"]) <= 4
