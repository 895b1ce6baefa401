"""Issue 20, item 3: every figure of a folded row is folded, and the columns say which.

One rule for `sessions` and `usage --by turn` (and the views that show a session's
spend): a row's inferences, tool calls, tokens and cost include its subagent sessions'
(children, grandchildren …, each once); ``subagent_*`` carry that part, so own = figure −
subagent part; `turns` stays the user's prompts. Checked on every real capture with
subagents, and on some without.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_events import open_store, sessions_report
from opencode_events.output import tables

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "opencode_events", *args]
    return subprocess.run(command, capture_output=True, timeout=120, **kwargs)


WIDE = {**os.environ, "COLUMNS": "250"}


# (capture, its top-level session's folded figures: inferences, tool calls, total tokens,
# cost, subagent sessions) — read from OpenCode's own rows: its session and message tables.
CASES = [
    ("task", 5, 3, 11384, 0.02064, 1),  # a task call whose subagent runs bash and read
    ("task_background", 3, 1, 4138, 0.00774, 1),  # a background task: launched, not done
    ("command_subtask", 4, 2, 3685, 0.0096, 1),  # a command run in a subagent
    ("code_mode", 2, 3, 5364, 0.01011, 0),  # no subagent: the execute call and its script's
    ("bash_ok", None, None, None, None, 0),  # no subagent: folded = own
    ("serve_revert", None, None, None, None, 0),  # a pending /undo: its steps still counted
]
SUBAGENT_FIELDS = (
    "subagent_sessions",
    "subagent_inferences",
    "subagent_tool_calls",
    "subagent_tool_failures",
    "subagent_tokens",
    "subagent_cost",
)
FOLDED = (
    "inferences",
    "tool_calls",
    "tool_failures",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)


def _json(*args: str):
    result = run(*args, "--format", "json", "--no-cache")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _sessions(sample: str, *flags: str) -> dict[str, dict]:
    db = str(SAMPLES / sample / "opencode.db")
    return {r["id"]: r for r in _json("sessions", "--db", db, "--all", *flags)}


def _below(rows: dict[str, dict], sid: str) -> list[str]:
    found, stack = [], [sid]
    while stack:
        for child in rows[stack.pop()]["children"]:
            found.append(child)
            stack.append(child)
    return found


@pytest.mark.parametrize(("sample", "inferences", "tools", "tokens", "cost", "subs"), CASES)
def test_a_folded_session_row_is_its_own_figures_plus_its_subagents(
    sample, inferences, tools, tokens, cost, subs
):
    folded, own = _sessions(sample), _sessions(sample, "--no-fold")
    assert folded.keys() == own.keys()
    for sid, row in folded.items():
        below = _below(own, sid)
        for name in FOLDED:
            assert row[name] == own[sid][name] + sum(own[d][name] for d in below), (sid, name)
        assert row["cost"] == pytest.approx(own[sid]["cost"] + sum(own[d]["cost"] for d in below))
        assert row["total_cost"] == row["cost"] == own[sid]["total_cost"]  # the old alias
        assert row["turns"] == own[sid]["turns"]  # the user's prompts: never folded
        undone = own[sid]["undone_inferences"] + sum(own[d]["undone_inferences"] for d in below)
        assert row["undone_inferences"] == undone  # part of the steps: folded with them
        # the part from subagents, the same folded or not: own = figure − subagent part
        assert {f: row[f] for f in SUBAGENT_FIELDS} == {f: own[sid][f] for f in SUBAGENT_FIELDS}
        assert row["subagent_sessions"] == len(below)
        assert row["inferences"] - row["subagent_inferences"] == own[sid]["inferences"]
        assert row["tool_calls"] - row["subagent_tool_calls"] == own[sid]["tool_calls"]
        assert row["tool_failures"] - row["subagent_tool_failures"] == own[sid]["tool_failures"]
        assert row["total_tokens"] - row["subagent_tokens"] == own[sid]["total_tokens"]
        assert row["subagent_cost"] == pytest.approx(sum(own[d]["cost"] for d in below))
    (top,) = [r for r in folded.values() if r["parent_id"] is None]
    if inferences is not None:
        expected = (inferences, tools, tokens, cost, subs)
        assert (
            top["inferences"],
            top["tool_calls"],
            top["total_tokens"],
            top["cost"],
            top["subagent_sessions"],
        ) == expected


@pytest.mark.parametrize("sample", [case[0] for case in CASES])
def test_usage_by_turn_and_by_session_agree_with_sessions(sample):
    """The same session reads the same under the same names, whatever the view."""
    db = str(SAMPLES / sample / "opencode.db")
    (top,) = [r for r in _sessions(sample).values() if r["parent_id"] is None]
    turns = _json("usage", "--db", db, "--session", top["id"])
    total = turns["total"]
    for name in ("inferences", "tool_calls", *FOLDED[3:]):
        assert total[name] == top[name], name
    assert total["cost"] == top["cost"]
    if top["subagent_sessions"]:
        in_turns = [f for f in SUBAGENT_FIELDS if "failures" not in f]  # usage counts none
        assert {f: total[f] for f in in_turns} == {f: top[f] for f in in_turns}
        (spawning,) = [r for r in turns["rows"] if "subagent_cost" in r]
        assert spawning["subagent_sessions"] == top["subagent_sessions"]
    else:
        assert not set(SUBAGENT_FIELDS) & set(total)
    (by_session,) = _json("usage", "--db", db, "--session", top["id"], "--by", "session")["rows"]
    assert (by_session["inferences"], by_session["cost"]) == (top["inferences"], top["cost"])
    assert by_session["total_tokens"] == top["total_tokens"]
    shared = [f for f in SUBAGENT_FIELDS if "tool" not in f]  # no tool column there
    if top["subagent_sessions"]:
        assert {f: by_session[f] for f in shared} == {f: top[f] for f in shared}
    else:
        assert not set(SUBAGENT_FIELDS) & set(by_session)
    # --by project: the project's rows fold alike and say the same share (one project here)
    (by_project,) = _json("usage", "--db", db, "--session", top["id"], "--by", "project")["rows"]
    assert (by_project["inferences"], by_project["cost"]) == (top["inferences"], top["cost"])
    if top["subagent_sessions"]:
        assert {f: by_project[f] for f in shared} == {f: top[f] for f in shared}
    else:
        assert not set(SUBAGENT_FIELDS) & set(by_project)
    steps = _json("usage", "--db", db, "--session", top["id"], "--by", "step")
    assert len(steps["rows"]) == top["inferences"]  # each step once: the subagents' too


def test_usage_no_fold_lists_the_subagent_with_its_own_figures():
    db = str(SAMPLES / "task" / "opencode.db")
    own = _sessions("task", "--no-fold")
    (parent,) = [sid for sid, r in own.items() if r["parent_id"] is None]
    apart = _json("usage", "--db", db, "--session", parent, "--no-fold")
    by_session: dict[str, int] = {}
    for row in apart["rows"]:
        by_session[row["session_id"]] = by_session.get(row["session_id"], 0) + row["inferences"]
        assert not set(SUBAGENT_FIELDS) & set(row)
    assert by_session == {sid: r["inferences"] for sid, r in own.items()}
    assert (
        run("usage", "--db", db, "--fold", "-j", "--no-cache").stdout
        == run("usage", "--db", db, "-j", "--no-cache").stdout
    )  # --fold is the default, spelled out


def test_the_python_api_folds_as_the_command_does():
    with open_store(SAMPLES / "task" / "opencode.db") as store:
        folded = sessions_report(store, all_sessions=True).document()
        own = sessions_report(store, all_sessions=True, fold=False).document()
    assert folded == list(_sessions("task").values())
    assert own == list(_sessions("task", "--no-fold").values())


@pytest.mark.parametrize(("fold", "said"), [(True, "+sub: with subagents'"), (False, "own")])
def test_the_sessions_table_says_whether_its_figures_are_folded(fold, said):
    with open_store(SAMPLES / "task" / "opencode.db") as store:
        summaries = sessions_report(store, fold=fold).sessions
    out = io.StringIO()
    tables.sessions_table(summaries, out=out, width=200, fold=fold)
    text = out.getvalue()
    assert said in text
    steps = "5" if fold else "2"
    (line,) = [ln for ln in text.splitlines() if "ses_dd8083e0" in ln]
    assert f" {steps} " in line


# --------------------------------------------------------------- issue 20, item 8: the scope


@pytest.mark.parametrize("by", ["session", "model", "agent", "day", "week", "month", "project"])
def test_a_grouping_with_no_session_chosen_covers_every_session(by):
    """As ccusage's daily, monthly, session reports: `usage --by day` is everything, not the
    last session (samples/fork: an original and its fork, two top-level sessions)."""
    db = str(SAMPLES / "fork" / "opencode.db")
    assert _json("usage", "--db", db, "--by", by) == _json("usage", "--db", db, "--all", "--by", by)
    if by == "session":
        assert len(_json("usage", "--db", db, "--by", by)["rows"]) == 2


def test_turns_with_no_session_chosen_are_the_last_sessions_and_the_table_says_so():
    db = str(SAMPLES / "fork" / "opencode.db")
    last = _json("usage", "--db", db, "--last")
    assert _json("usage", "--db", db) == last
    assert len({row["session_id"] for row in last["rows"]}) == 1
    table = run("usage", "--db", db, "--format", "table", "--no-cache").stdout.decode()
    assert "the last session (--all: every session)" in " ".join(table.split())
    table = run("usage", "--db", db, "--by", "day", "--format", "table", "--no-cache")
    assert "every session;" in " ".join(table.stdout.decode().split())
    named = run("usage", "--db", db, "--last", "--format", "table", "--no-cache").stdout.decode()
    assert "every session" not in named and "the last session" not in named  # it was named


# ------------------------------------------------- issue 20, item 8: a fork's figures

FORK = "ses_dd805feb3ffeRYmW0nRsUneOP2"  # samples/fork: `opencode run --fork` of ORIGINAL
ORIGINAL = "ses_dd8060a99ffe0TE5VY4h7s0VFE"


def test_a_fork_says_its_figures_include_the_history_it_copied():
    """`sessions` gives a fork OpenCode's own totals, which include the copied history;
    `usage` counts that history once, in the original. Wherever the two differ, the
    report says so: `forked` on the row (JSON, CSV), a mark and a caption in the table."""
    db = str(SAMPLES / "fork" / "opencode.db")
    rows = _sessions("fork")
    assert {sid: row["forked"] for sid, row in rows.items()} == {FORK: True, ORIGINAL: False}
    by_session = {r["session_id"]: r for r in _json("usage", "--db", db, "--by", "session")["rows"]}
    assert rows[FORK]["cost"] > by_session[FORK]["cost"]  # the copies, counted once elsewhere
    assert rows[ORIGINAL]["cost"] == by_session[ORIGINAL]["cost"]
    csv = run("sessions", "--db", db, "--all", "--format", "csv", "--no-cache").stdout.decode()
    header, *lines = csv.splitlines()
    column = header.split(",").index("forked")
    assert sorted(line.split(",")[column] for line in lines) == ["false", "true"]
    table = run("sessions", "--db", db, "--format", "table", "--no-cache", env=WIDE)
    text = " ".join(table.stdout.decode().split())
    assert "* 1 fork(s): figures include the history copied from the original" in text
    assert f"${rows[FORK]['cost']:.4f}*" in text and f"${rows[ORIGINAL]['cost']:.4f}*" not in text


def test_no_fork_no_fork_note():
    table = run("sessions", "--db", str(SAMPLES / "task" / "opencode.db"), "--format", "table")
    assert "fork" not in table.stdout.decode()
    assert not any(row["forked"] for row in _sessions("task").values())


def test_a_subagents_failed_calls_are_folded_and_said_apart(tmp_path):
    """samples/task with its subagent's two calls (bash, read) marked failed, as OpenCode
    writes a failed call: the parent's row counts them and says they are the subagent's."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        (child,) = conn.execute("SELECT id FROM session WHERE parent_id IS NOT NULL").fetchone()
        changed = conn.execute(
            'UPDATE part SET data = replace(data, \'"status":"completed"\', '
            '\'"status":"error"\') WHERE session_id = ? AND data LIKE \'{"type":"tool"%\'',
            (child,),
        ).rowcount
    assert changed == 2
    db_arg = str(db)
    folded = {r["id"]: r for r in _json("sessions", "--db", db_arg, "--all")}
    own = {r["id"]: r for r in _json("sessions", "--db", db_arg, "--all", "--no-fold")}
    (parent,) = [r for r in folded.values() if r["parent_id"] is None]
    assert parent["subagent_tool_failures"] == 2 == own[child]["tool_failures"]
    assert parent["tool_failures"] == own[parent["id"]]["tool_failures"] + 2
    assert own[parent["id"]]["subagent_tool_failures"] == 2  # said apart, folded or not
