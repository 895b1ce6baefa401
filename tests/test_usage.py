"""`usage`: per-turn tables whose totals are OpenCode's own figures, counted once."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_events.output.rows import report_markdown
from tests.records import SESSION, record, step_finish
from tests.stores import (
    with_a_reply_before_its_prompt,
    with_every_reply_set,
    with_sessions_like_the_first,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events", "usage"]
TOKENS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)
STREAMS = sorted(p for p in SAMPLES.glob("*/stream.jsonl") if p.stat().st_size)


def usage(*args: str, stdin: bytes | None = None) -> dict:
    result = subprocess.run(
        CLI + list(args) + ["--format", "json"], input=stdin, capture_output=True, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b""
    return json.loads(result.stdout)


def sessions_of(db: Path) -> list[dict]:
    """`sessions --format json` of the store ``db``."""
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "sessions", "--db", str(db), "--format", "json"],
        capture_output=True,
        check=True,
    )
    return json.loads(result.stdout)


def sql(db: Path, query: str, *params) -> list[tuple]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def raw_steps(stream: Path) -> list[dict]:
    parts = {}
    for line in stream.read_bytes().splitlines():
        rec = json.loads(line)
        if rec["type"] == "step_finish":
            parts[rec["part"]["id"]] = rec["part"]
    return list(parts.values())


# --------------------------------------------------------------------------- stream


@pytest.mark.parametrize("stream", STREAMS, ids=lambda p: p.parent.name)
def test_stream_rows_are_the_step_finish_records(stream: Path):
    doc = usage(str(stream))
    steps = raw_steps(stream)
    rows = [r for r in doc["rows"] if not r.get("open")]
    assert len(rows) == len(steps)
    for row, part in zip(rows, steps, strict=True):
        assert row["input_tokens"] == part["tokens"]["input"]
        assert row["output_tokens"] == part["tokens"]["output"]
        assert row["reasoning_tokens"] == part["tokens"]["reasoning"]
        assert row["cache_read_tokens"] == part["tokens"]["cache"]["read"]
        assert row["cache_write_tokens"] == part["tokens"]["cache"]["write"]
        assert row["total_tokens"] == part["tokens"]["total"]
        assert row["cost"] == part["cost"]
        assert row["reason"] == part["reason"]
    total = doc["total"]
    assert total["cost"] == pytest.approx(sum(p["cost"] for p in steps), abs=1e-12)
    for name, key in (("input_tokens", "input"), ("output_tokens", "output")):
        assert total[name] == sum(p["tokens"][key] for p in steps)


def test_normalized_jsonl_gives_the_same_table():
    stream = SAMPLES / "continue3" / "stream.jsonl"
    normalized = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", str(stream)],
        capture_output=True,
        check=True,
    ).stdout
    from_normalized, from_raw = usage(stdin=normalized), usage(str(stream))
    # but for `started`: the raw stream dates a step by its step_start record, normalized
    # JSONL (no event for a step's start) by its usage event, when it finished
    for doc in (from_normalized, from_raw):
        for row in doc["rows"]:
            row.pop("started")
    assert from_normalized == from_raw


def test_usage_at_the_end_of_a_pipe_reads_stdin():
    stream = (SAMPLES / "task" / "stream.jsonl").read_bytes()
    assert usage(stdin=stream) == usage(str(SAMPLES / "task" / "stream.jsonl"))


@pytest.mark.parametrize("stdin", [b"", b"\n \n"])
def test_an_empty_stdin_is_said_not_reported_as_no_spend(stdin: bytes):
    """From cron or CI stdin is no terminal, so `usage` reads it; when it holds nothing the
    report says so (and how to read the store) instead of a silent row of zeros."""
    result = subprocess.run(CLI + ["--format", "csv"], input=stdin, capture_output=True)
    assert result.returncode == 0
    assert result.stderr.decode() == (
        "note: stdin was empty; for stored sessions give --last, --session, --since or --all\n"
    )
    assert usage(str(SAMPLES / "text" / "stream.jsonl")).get("notes") is None


def test_interrupted_stream_marks_the_open_turn():
    lines = [
        record("step_start", {"type": "step-start"}),
        step_finish(input_=5, cost=0.5),
        record("step_start", {"type": "step-start"}),
        record("text", {"type": "text", "text": "half"}),
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    doc = usage(stdin=data)
    assert [r.get("open") for r in doc["rows"]] == [False, True]
    assert doc["rows"][1]["turn"] == 2
    assert doc["total"]["cost"] == 0.5 and doc["total"]["input_tokens"] == 5


def test_real_interrupted_run():
    doc = usage(str(SAMPLES / "sigint" / "stream.jsonl"))
    assert doc["rows"][-1].get("open") is True


def test_re_emitted_step_is_counted_once():
    step = step_finish(input_=7, cost=0.25)
    data = b"".join(json.dumps(r).encode() + b"\n" for r in (step, step))
    doc = usage(stdin=data)
    assert len(doc["rows"]) == 1 and doc["total"]["cost"] == 0.25


def test_stream_by_day_and_session_keep_the_totals():
    stream = str(SAMPLES / "fork" / "stream.jsonl")  # two sessions in one log
    by_turn = usage(stream)
    for by in ("session", "day"):
        doc = usage(stream, "--by", by)
        assert doc["total"] == {**by_turn["total"], "inferences": len(by_turn["rows"])}
    assert len(usage(stream, "--by", "session")["rows"]) == 2


def test_stream_sessions_come_oldest_first_as_from_the_store(tmp_path: Path):
    """`--by session` lists sessions by their first step, oldest first, from a stream as from
    the store (OpenCode's session ids sort newest first, so not by id)."""
    stream = SAMPLES / "fork" / "stream.jsonl"
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    from_stream = [r["session_id"] for r in usage(str(stream), "--by", "session")["rows"]]
    from_store = [
        r["session_id"] for r in usage("--db", str(db), "--all", "--by", "session")["rows"]
    ]
    assert from_stream == from_store and len(from_stream) == 2
    older, newer = "ses_zzzz", "ses_aaaa"  # ids in the opposite order of their times
    lines = [
        {**step_finish(), "sessionID": newer, "timestamp": 2000},
        {**step_finish(), "sessionID": older, "timestamp": 1000},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    assert [r["session_id"] for r in usage("--by", "session", stdin=data)["rows"]] == [older, newer]


def test_a_total_without_the_cache_is_added_alike_by_every_grouping(tmp_path: Path):
    """A provider whose total leaves the cache out (as Anthropic's does): OpenCode's
    per-reply `tokens.total`, added, in every grouping, folded or not, with a window or not.
    `--by turn` once took a folded subagent's total from its session row's classes."""
    db = tmp_path / "opencode.db"
    with_every_reply_set(
        db,
        "task",
        "$.tokens.total",
        "json_extract(data, '$.tokens.input') + json_extract(data, '$.tokens.output') "
        "+ json_extract(data, '$.tokens.reasoning')",
    )
    with sqlite3.connect(db) as conn:
        (truth,) = conn.execute(
            "SELECT sum(json_extract(data, '$.tokens.total')) FROM message "
            "WHERE json_extract(data, '$.role') = 'assistant'"
        ).fetchone()
        (classes,) = conn.execute(
            "SELECT sum(tokens_input + tokens_output + tokens_reasoning + tokens_cache_read "
            "+ tokens_cache_write) FROM session"
        ).fetchone()
    assert truth < classes  # the edit made the two rules differ
    seen = set()
    for args in (
        ["--all"],
        ["--all", "--no-fold"],
        ["--since", "2000-01-01"],
        *(["--all", "--by", by] for by in ("session", "step", "day", "model", "agent")),
    ):
        total = usage("--db", str(db), "--no-cache", *args)["total"]
        seen.add((total["total_tokens"], total.get("subagent_tokens")))
        assert total["total_tokens"] == truth, args
    assert len({tokens for tokens, _ in seen}) == 1
    assert len({sub for _, sub in seen if sub is not None}) == 1


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
def test_an_empty_store_report_has_the_total_of_a_full_one(tmp_path: Path, by: str):
    """Nothing since then: the total still has the report's count columns (at 0), so its JSON
    has the shape of any other day's."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    full = usage("--db", str(db), "--all", "--by", by)["total"]
    empty = usage("--db", str(db), "--since", "2099-01-01", "--by", by)
    assert empty["rows"] == []
    counts = {"inferences", "tool_calls"} & set(full)
    assert {k: empty["total"][k] for k in counts} == dict.fromkeys(counts, 0)
    assert set(empty["total"]) == {k for k in full if not k.startswith("subagent_")}


@pytest.mark.parametrize(
    ("by", "date_of"),
    [
        ("week", lambda day: "{}-W{:02d}".format(*date.fromisoformat(day).isocalendar()[:2])),
        ("month", lambda day: day[:7]),
    ],
)
def test_stream_weeks_and_months_are_its_days_grouped(by, date_of):
    """Steps a week or a year apart (every sample's steps, moved), by week and month: each
    row sums the days that fall in it, named as the store names them."""
    day_ms = 86_400_000
    lines = []
    for n, name in enumerate(["text", "fork", "parallel_tools", "reasoning", "bash_fail"]):
        for line in (SAMPLES / name / "stream.jsonl").read_bytes().splitlines():
            record = json.loads(line)
            record["timestamp"] += n * (8 if n % 2 else 400) * day_ms
            if isinstance(record.get("part", {}).get("time"), dict):
                for key in record["part"]["time"]:
                    record["part"]["time"][key] += n * (8 if n % 2 else 400) * day_ms
            lines.append(json.dumps(record).encode())
    data = b"\n".join(lines) + b"\n"
    days = usage("--by", "day", "--tz", "UTC", stdin=data)
    grouped = usage("--by", by, "--tz", "UTC", stdin=data)
    expected: dict[str, dict] = {}
    for row in days["rows"]:
        into = expected.setdefault(date_of(row["day"]), {by: date_of(row["day"])})
        for name, value in row.items():
            if name != "day":
                into[name] = into.get(name, 0) + value
    assert len(expected) >= 3
    assert [{k: pytest.approx(v) for k, v in row.items()} for row in expected.values()] == [
        {k: v for k, v in row.items()} for row in grouped["rows"]
    ]
    assert grouped["total"] == days["total"]


def test_stream_cannot_group_by_project():
    result = subprocess.run(CLI + ["--by", "project"], input=b"", capture_output=True)
    assert result.returncode == 2 and b"needs the store" in result.stderr


@pytest.mark.parametrize("by", ["model", "agent"])
@pytest.mark.parametrize(
    "name, source",
    [
        ("text", "export.json"),
        ("parallel_tools", "export.json"),
        ("compaction", "export.json"),
        ("serve_text", "events.sse"),
        ("compaction", "events.sse"),
    ],
)
def test_a_stream_that_names_its_models_groups_by_them_as_the_store(name, source, by):
    """An export document and server events name each reply's model and agent: grouped
    by them, their rows are the store's rows of the same session."""
    streamed = usage(str(SAMPLES / name / source), "--by", by)
    stored = usage("--db", str(SAMPLES / name / "opencode.db"), "--all", "--by", by)
    assert streamed["rows"] == stored["rows"] and streamed["rows"]
    assert "?" not in {row[by] for row in streamed["rows"]}


def test_a_run_streams_steps_name_no_model():
    rows = usage(str(SAMPLES / "text" / "stream.jsonl"), "--by", "model")["rows"]
    assert [row["model"] for row in rows] == ["?"]


# ---------------------------------------------------------------------------- store


def session_columns(db: Path, sid: str) -> dict:
    (row,) = sql(
        db,
        "SELECT cost, tokens_input, tokens_output, tokens_reasoning, "
        "tokens_cache_read, tokens_cache_write FROM session WHERE id = ?",
        sid,
    )
    return dict(zip(("cost", *TOKENS[:5]), row, strict=True))


@pytest.mark.parametrize(
    "scenario",
    ["task", "continue3", "file_tools", "mcp", "compaction", "sigint", "error400", "apply_patch"],
)
def test_store_turns_add_up_to_the_session_row(scenario: str):
    db = SAMPLES / scenario / "opencode.db"
    top = sql(db, "SELECT id FROM session WHERE parent_id IS NULL ORDER BY time_updated DESC")
    sid = top[0][0]
    doc = usage("--db", str(db), "--session", sid)
    everything = [sid] + [r[0] for r in sql(db, "SELECT id FROM session WHERE parent_id = ?", sid)]
    expected = {k: 0 for k in ("cost", *TOKENS[:5])}
    for one in everything:
        for key, value in session_columns(db, one).items():
            expected[key] += value
    total = doc["total"]
    assert total["cost"] == pytest.approx(expected["cost"], abs=1e-12)
    for key in TOKENS[:5]:
        assert total[key] == expected[key], key
    users = sql(
        db,
        "SELECT count(*) FROM message WHERE session_id = ? AND "
        "json_extract(data, '$.role') = 'user'",
        sid,
    )[0][0]
    assert len(doc["rows"]) == users


def test_subagents_fold_into_the_spawning_turn_or_stand_apart():
    db = SAMPLES / "task" / "opencode.db"
    parent, child = [r[0] for r in sql(db, "SELECT id FROM session ORDER BY parent_id IS NOT NULL")]
    folded = usage("--db", str(db), "--session", parent)
    (turn,) = folded["rows"]
    assert turn["subagent_cost"] == pytest.approx(session_columns(db, child)["cost"])
    # every figure folded: the parent's 2 steps and 1 call, the subagent's 3 and 2
    assert (turn["inferences"], turn["subagent_inferences"]) == (5, 3)
    assert (turn["tool_calls"], turn["subagent_tool_calls"]) == (3, 2)
    assert turn["prompt"] == "please do the task"
    apart = usage("--db", str(db), "--session", parent, "--no-fold")
    assert [r["session_id"] for r in apart["rows"]] == [parent, child]
    assert apart["total"]["cost"] == pytest.approx(folded["total"]["cost"])
    assert "subagent_cost" not in apart["rows"][0]


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
@pytest.mark.parametrize("order", ["parent first", "child first"])
def test_a_subagent_chosen_with_its_parent_is_counted_once(by: str, order: str):
    """SPEC §3: nothing is counted twice, however the sessions are named."""
    db = SAMPLES / "task" / "opencode.db"
    parent, child = [r[0] for r in sql(db, "SELECT id FROM session ORDER BY parent_id IS NOT NULL")]
    ((opencode_cost,),) = sql(db, "SELECT sum(cost) FROM session")
    chosen = [parent, child] if order == "parent first" else [child, parent]
    doc = usage("--db", str(db), "--by", by, "--session", chosen[0], "--session", chosen[1])
    assert doc["total"]["cost"] == pytest.approx(opencode_cost, rel=1e-12)
    assert doc == usage("--db", str(db), "--by", by, "--session", parent)


def test_in_flight_turn_is_marked_and_a_killed_one_stale(monkeypatch):
    # samples/sigint: OpenCode killed mid-reply, long ago: stale, as `sessions` says
    db = SAMPLES / "sigint" / "opencode.db"
    doc = usage("--db", str(db), "--last")
    assert (doc["rows"][-1]["in_flight"], doc["rows"][-1]["stale"]) == (False, True)
    assert "duration_ms" not in doc["rows"][-1]
    # judged as if just written: in flight
    monkeypatch.setenv("OPENCODE_EVENTS_STALE_AFTER", str(10**12))
    doc = usage("--db", str(db), "--last")
    assert doc["rows"][-1]["in_flight"] is True and "stale" not in doc["rows"][-1]


def test_every_grouping_has_the_same_total():
    db = SAMPLES / "task" / "opencode.db"
    totals = []
    for by in ("turn", "step", "session", "model", "agent", "day"):
        total = usage("--db", str(db), "--last", "--by", by)["total"]
        totals.append({k: total[k] for k in (*TOKENS, "cost")})
    assert all(t == totals[0] for t in totals)


def test_forked_history_is_not_counted_twice():
    db = SAMPLES / "fork" / "opencode.db"
    # Independently: every assistant message, minus those created before their session
    # (the fork's copies of the original's history).
    rows = sql(
        db,
        "SELECT m.time_created < s.time_created, json_extract(m.data, '$.cost') "
        "FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE json_extract(m.data, '$.role') = 'assistant'",
    )
    own = sum(cost for copied, cost in rows if not copied)
    copied = sum(cost for copied, cost in rows if copied)
    assert copied > 0
    result = subprocess.run(
        CLI + ["--db", str(db), "--all", "--by", "day", "--format", "json"],
        capture_output=True,
        check=True,
    )
    doc = json.loads(result.stdout)
    assert doc["total"]["cost"] == pytest.approx(own, abs=1e-12)
    assert "forked" in doc["notes"][0]
    # One session alone still matches OpenCode's session row, copies included.
    fork = sql(db, "SELECT id FROM session WHERE title LIKE '%fork%'")[0][0]
    alone = usage("--db", str(db), "--session", fork)
    assert alone["total"]["cost"] == pytest.approx(session_columns(db, fork)["cost"])


def test_every_report_of_a_fork_gives_the_same_note():
    db = SAMPLES / "fork" / "opencode.db"
    copied = sql(
        db,
        "SELECT count(*), sum(json_extract(m.data, '$.cost')) "
        "FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE m.time_created < s.time_created AND json_extract(m.data, '$.role') = 'assistant'",
    )[0]
    expected = (
        f"{copied[0]} forked cop{'y' if copied[0] == 1 else 'ies'} of earlier inferences "
        f"not counted again (${copied[1]:.4f})"
    )
    for by in ("turn", "step", "session", "day"):
        assert usage("--db", str(db), "--all", "--by", by)["notes"] == [expected], by


def test_the_forked_copies_note_reaches_csv_and_markdown_readers():
    db = str(SAMPLES / "fork" / "opencode.db")
    note = json.loads(subprocess.run(CLI + ["--db", db, "--all"], capture_output=True).stdout)
    note = note["notes"][0]
    csv_run = subprocess.run(CLI + ["--db", db, "--all", "--format", "csv"], capture_output=True)
    assert csv_run.returncode == 0 and csv_run.stderr.decode() == f"note: {note}\n"
    assert note not in csv_run.stdout.decode()  # the CSV itself stays rows only
    md = subprocess.run(CLI + ["--db", db, "--all", "--format", "markdown"], capture_output=True)
    assert md.stdout.decode().endswith(f"\n_Note: {note}_\n") and md.stderr == b""


def test_day_rows_follow_the_time_zone():
    db = SAMPLES / "text" / "opencode.db"
    utc = usage("--db", str(db), "--last", "--by", "day", "--tz", "UTC")
    (stamp,) = sql(
        db, "SELECT time_created FROM message WHERE json_extract(data,'$.role')='assistant'"
    )[0]
    from datetime import UTC, datetime

    assert utc["rows"][0]["day"] == datetime.fromtimestamp(stamp / 1000, UTC).strftime("%Y-%m-%d")
    bad = subprocess.run(
        CLI + ["--db", str(db), "--by", "day", "--tz", "Mars/Olympus"], capture_output=True
    )
    assert bad.returncode == 2 and b"unknown time zone" in bad.stderr


@settings(max_examples=300, deadline=None)
@given(
    ms=st.one_of(
        st.integers(-(10**14), 10**14),  # 1338 to 5138: years of three digits and of four
        st.floats(-(10**14), 10**14, allow_nan=False),
        st.sampled_from([0, -1, 1711846800000, 1711846799999, 1730595600000, 170851260000, 10**20]),
    ),
    zone=st.sampled_from([None, "UTC", "Europe/Berlin", "Asia/Kathmandu", "Pacific/Kiritimati"]),
)
def test_a_day_is_the_local_date_of_its_time(ms, zone) -> None:
    """``_day`` (and ``_DayOf``, a quarter hour at a time) says what formatting the zone's
    time says: the date in the zone (local time without one), across DST changes and in a
    day begun inside a quarter hour (170851260000: Kiritimati at −10:40, 1975)."""
    from opencode_events.reports import usage as U

    tz = None if zone is None else ZoneInfo(zone)
    try:
        wanted = datetime.fromtimestamp(ms / 1000, tz).astimezone(tz).strftime("%Y-%m-%d")
    except (ValueError, OverflowError, OSError):
        wanted = None
    assert U._day(ms, tz) == wanted
    if type(ms) is int:
        assert U._DayOf(tz)(ms) == (wanted or "?")


def test_csv_and_markdown_use_usage_field_names():
    db = str(SAMPLES / "task" / "opencode.db")
    csv_out = (
        subprocess.run(CLI + ["--db", db, "--format", "csv"], capture_output=True, check=True)
        .stdout.decode()
        .splitlines()
    )
    header = csv_out[0].split(",")
    assert {"turn", *TOKENS, "cost"} <= set(header)
    md = subprocess.run(
        CLI + ["--db", db, "--format", "markdown"], capture_output=True, check=True
    ).stdout.decode()
    # Markdown is for people: the table's names (CSV keeps the fields', for programs).
    assert "| **total** |" in md and "| cache read |" in md and "cache_read_tokens" not in md
    assert "| steps |" in md


def _parallel_scans_seen(monkeypatch, usage_module) -> list[bool]:
    """What each ``_parallel_scan`` call returned from now on (True: the workers read)."""
    ran: list[bool] = []
    original = usage_module._parallel_scan
    monkeypatch.setattr(
        usage_module, "_parallel_scan", lambda *a: ran.append(original(*a)) or ran[-1]
    )
    return ran


def _csv_header(*args: str) -> list[str]:
    out = subprocess.run(CLI + [*args, "--format", "csv"], capture_output=True, check=True)
    return out.stdout.decode().splitlines()[0].split(",")


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
def test_a_csv_report_has_the_same_columns_whatever_its_rows_hold(by: str):
    """Daily CSVs can be appended and read together (DuckDB matches columns by position):
    one session or several, subagents or none, an interrupted run, no rows at all."""
    headers = [
        _csv_header("--db", str(SAMPLES / name / "opencode.db"), "--all", "--by", by)
        for name in ("text", "task", "fork", "sigint", "auto_compact")
    ]
    headers.append(
        _csv_header(
            "--db", str(SAMPLES / "text" / "opencode.db"), "--since", "2099-01-01", "--by", by
        )
    )
    assert all(h == headers[0] for h in headers)
    assert {*TOKENS, "cost"} <= set(headers[0])
    if by in ("turn", "step", "session", "day"):
        streams = [
            _csv_header(str(SAMPLES / name / "stream.jsonl"), "--by", by)
            for name in ("text", "task", "fork", "sigint")
        ]
        streams.append(_csv_header("/dev/null", "--by", by))
        assert all(h == streams[0] for h in streams)


def test_markdown_total_of_an_empty_report_keeps_every_figure():
    md = subprocess.run(
        CLI
        + ["--db", str(SAMPLES / "text" / "opencode.db"), "--since", "2099-01-01"]
        + ["--format", "markdown"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    header, _, total = md.splitlines()[:3]
    names = ["input", "output", "reasoning", "cache read", "cache write", "total"]
    assert header.split(" | ")[1:] == [*names, "cost |"]
    assert total == "| **total** | 0 | 0 | 0 | 0 | 0 | 0 | 0.0 |"


def test_table_for_people():
    out = subprocess.run(
        CLI + ["--db", str(SAMPLES / "task" / "opencode.db"), "--format", "table"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert "please do the task" in out and "total" in out and "$0.0206" in out


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="one core: no workers")
@pytest.mark.parametrize("by", ["day", "session", "model", "agent"])
def test_parallel_scan_gives_the_same_report(monkeypatch, by):
    """Large databases are scanned by one process per core; the report must not change."""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    db = SAMPLES / "fork" / "opencode.db"
    with Store(db) as store:
        ids = [r.id for r in store.sessions(top_level=True)]
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 10**12)
        sequential = usage_module.store_usage(store, ids, by=by, cross_session=True).document()
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0)
        ran = _parallel_scans_seen(monkeypatch, usage_module)
        parallel = usage_module.store_usage(store, ids, by=by, cross_session=True).document()
    assert ran == [True]  # the workers did run
    assert parallel == sequential
    assert "forked" in parallel["notes"][0]


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
def test_forked_history_is_counted_once_by_every_grouping(by):
    db = SAMPLES / "fork" / "opencode.db"
    rows = sql(
        db,
        "SELECT m.time_created < s.time_created, json_extract(m.data, '$.cost') "
        "FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE json_extract(m.data, '$.role') = 'assistant'",
    )
    own = sum(cost for copied, cost in rows if not copied)
    doc = usage("--db", str(db), "--all", "--by", by)
    assert doc["total"]["cost"] == pytest.approx(own, abs=1e-9)
    assert "forked" in doc["notes"][0]
    if by == "turn":
        prompts = [r.get("prompt") for r in doc["rows"]]
        assert len(prompts) == len(set(prompts))  # the copied turn is not listed twice


def _two_forks_of_a_deleted_original(tmp_path: Path) -> Path:
    """samples/fork forked a second time, then its original deleted (a session forked
    twice and cleaned up): two copies of one history, no original."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    conn = sqlite3.connect(db)
    ((fork, began),) = conn.execute(
        "SELECT s.id, s.time_created FROM session s WHERE EXISTS (SELECT 1 FROM message m "
        "WHERE m.session_id = s.id AND m.time_created < s.time_created)"
    ).fetchall()
    columns = [row[1] for row in conn.execute("PRAGMA table_info(session)")]
    made = ", ".join(
        "?" if c == "id" else "time_created + 5000" if c == "time_created" else c for c in columns
    )
    conn.execute(
        f"INSERT INTO session SELECT {made} FROM session WHERE id = ?", ("ses_zfork2", fork)
    )
    conn.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) "
        "SELECT 'msg_z' || substr(id, 5), 'ses_zfork2', time_created, time_updated, data "
        "FROM message WHERE session_id = ? AND time_created < ?",
        (fork, began),
    )
    (original,) = [
        sid for (sid,) in conn.execute("SELECT id FROM session") if sid not in (fork, "ses_zfork2")
    ]
    conn.execute("DELETE FROM part WHERE session_id = ?", (original,))
    conn.execute("DELETE FROM message WHERE session_id = ?", (original,))
    conn.execute("DELETE FROM session WHERE id = ?", (original,))
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
def test_a_history_two_forks_copied_from_a_deleted_original_counts_once(tmp_path, by):
    db = _two_forks_of_a_deleted_original(tmp_path)
    rows = sql(
        db,
        "SELECT m.time_created < s.time_created, m.time_created, m.data, "
        "json_extract(m.data, '$.cost') FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE json_extract(m.data, '$.role') = 'assistant'",
    )
    own = sum(cost for copied, _, _, cost in rows if not copied)
    history = {(created, data): cost for copied, created, data, cost in rows if copied}
    assert len(history) < sum(1 for row in rows if row[0])  # two copies of each
    doc = usage("--db", str(db), "--all", "--by", by, "--no-cache")
    assert doc["total"]["cost"] == pytest.approx(own + sum(history.values()), abs=1e-12)
    assert "forked cop" in doc["notes"][0]
    assert usage("--db", str(db), "--all", "--by", by) == doc  # cached: the same report


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="one core: no workers")
@pytest.mark.parametrize("by", ["day", "session", "step"])
def test_a_history_two_forks_copied_counts_once_in_whole_table_scans(tmp_path, monkeypatch, by):
    """The scans of every message (one process, and one per core) keep the same rule."""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    db = _two_forks_of_a_deleted_original(tmp_path)
    expected = usage("--db", str(db), "--all", "--by", by, "--no-cache")
    with Store(db) as store:
        ids = [r.id for r in store.sessions(top_level=True)]
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 10**12)
        here = usage_module.store_usage(store, ids, by=by, cross_session=True).document()
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0)
        parallel = usage_module.store_usage(store, ids, by=by, cross_session=True).document()
    for doc in (here, parallel):
        assert doc["total"]["cost"] == pytest.approx(expected["total"]["cost"], abs=1e-12)
        assert doc["notes"] == expected["notes"]


def _continued_after_a_kill(tmp_path: Path, *, now: int) -> tuple[Path, str]:
    """samples/sigint (OpenCode killed mid-reply: the reply left open for good), then the
    session continued: a new prompt and its completed reply, written just now."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "sigint" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
    prompt = {"role": "user", "time": {"created": now}, "agent": "build"}
    reply = {
        "role": "assistant",
        "parentID": "msg_zz1",
        "time": {"created": now + 1, "completed": now + 5},
        "cost": 0.05,
        "tokens": {"input": 1000, "output": 500, "reasoning": 0, "cache": {"read": 0, "write": 0}},
        "modelID": "gpt-5",
        "providerID": "openai",
        "finish": "stop",
    }
    for mid, created, data in (("msg_zz1", now, prompt), ("msg_zz2", now + 1, reply)):
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, created, created + 4, json.dumps(data)),
        )
    conn.execute("UPDATE session SET time_updated = ? WHERE id = ?", (now + 5, sid))
    conn.commit()
    conn.close()
    return db, sid


def test_a_reply_a_killed_opencode_left_is_no_longer_in_flight_once_the_session_goes_on(
    tmp_path,
):
    """Only a session's newest reply can be in flight (OpenCode runs one at a time): the
    old one left open made `sessions` say busy for 10 minutes after every write, `usage
    --by turn` put a months-old turn in flight, and kept such reports out of the cache."""
    import time as clock

    db, sid = _continued_after_a_kill(tmp_path, now=int(clock.time() * 1000))
    turns = usage("--db", str(db), "--session", sid, "--by", "turn", "--no-cache")["rows"]
    assert len(turns) == 2 and not any(r.get("in_flight") or r.get("stale") for r in turns)
    steps = usage("--db", str(db), "--session", sid, "--by", "step", "--no-cache")["rows"]
    assert not any(r.get("in_flight") or r.get("stale") for r in steps)
    listed = subprocess.run(
        [sys.executable, "-m", "opencode_events", "sessions", "--db", str(db), "--no-cache", "-j"],
        capture_output=True,
        check=True,
    )
    (row,) = [r for r in json.loads(listed.stdout) if r["id"] == sid]
    assert (row["in_flight"], row["state"]) == (False, "idle")
    line = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_events",
            "statusline",
            "--db",
            str(db),
            "--format",
            "{state}",
        ],
        capture_output=True,
        check=True,
    )
    assert line.stdout.decode().strip() == row["state"]  # the views agree


def test_the_newest_reply_left_open_is_still_judged_busy_or_stale(tmp_path):
    """The rule leaves a session whose newest reply is open as it was: stale when silent."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_events",
            "sessions",
            "--db",
            str(SAMPLES / "sigint" / "opencode.db"),
            "--no-cache",
            "-j",
        ],
        capture_output=True,
        check=True,
    )
    states = {r["state"] for r in json.loads(listed.stdout)}
    assert states == {"stale"}
    turns = usage("--db", str(SAMPLES / "sigint" / "opencode.db"), "--by", "turn", "--no-cache")
    assert turns["rows"][-1].get("stale") is True


def test_a_prompt_typed_while_the_reply_runs_leaves_that_reply_in_flight(tmp_path, monkeypatch):
    """OpenCode writes a prompt typed during a reply at once, newer than the reply: the
    reply's turn is the one its ``parentID`` names, and stays in flight (or stale) as its
    step does, not the queued prompt's."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "continue3" / "opencode.db", db)
    conn = sqlite3.connect(db)
    sid, mid, data, created = conn.execute(
        "SELECT session_id, id, data, time_created FROM message "
        "WHERE json_extract(data, '$.role') = 'assistant' ORDER BY time_created DESC LIMIT 1"
    ).fetchone()
    reply = json.loads(data)
    del reply["time"]["completed"]
    reply.pop("finish", None)
    conn.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(reply), mid))
    queued = {"role": "user", "time": {"created": created + 1000}}
    conn.execute(
        "INSERT INTO message VALUES ('msg_zzqueued', ?, ?, ?, ?)",
        (sid, created + 1000, created + 1000, json.dumps(queued)),
    )
    conn.commit()
    conn.close()
    for limit, mark in ((str(10**12), "in_flight"), ("0", "stale")):
        monkeypatch.setenv("OPENCODE_EVENTS_STALE_AFTER", limit)
        steps = usage("--db", str(db), "--all", "--by", "step", "--no-cache")["rows"]
        turns = usage("--db", str(db), "--all", "--by", "turn", "--no-cache")["rows"]
        assert [r["message_id"] for r in steps if r.get(mark)] == [mid]
        (turn,) = [r for r in turns if r.get(mark)]
        assert (
            turn["started"]
            == json.loads(
                sql(db, "SELECT data FROM message WHERE id = ?", reply["parentID"])[0][0]
            )["time"]["created"]
        )


# ------------------------------------------------------------- whole-table scans, chunked

# An assistant message of samples/fork, as OpenCode writes it.
_ASSISTANT = {
    "parentID": "msg_x",
    "role": "assistant",
    "mode": "build",
    "agent": "build",
    "path": {"cwd": "/w", "root": "/w"},
    "cost": 0.003075,
    "tokens": {"total": 1005, "input": 1000, "output": 5, "reasoning": 0,
               "cache": {"write": 7, "read": 9}},
    "modelID": "mock-model",
    "providerID": "mock",
    "time": {"created": 1795967023194, "completed": 1795967023993},
    "finish": "stop",
}  # fmt: skip


def _text(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _with(path: str, value, drop: bool = False) -> str:
    doc = json.loads(_text(_ASSISTANT))
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    if drop:
        del target[last]
    else:
        target[last] = value
    return _text(doc)


_WHOLE = _text(_ASSISTANT)
# (session id, time_created, data) of damaged or unusual message rows; None: the row's own.
_ODD_ROWS = [
    (None, None, "not json"),
    (None, None, sqlite3.Binary(_WHOLE.encode() + b"\xff")),  # stored as text below
    (None, None, sqlite3.Binary(_WHOLE.replace('"build"', '"bu\xffild"').encode("latin-1"))),
    (None, None, _WHOLE.encode()),  # JSON stored as a blob
    (None, "1795967023194x", _WHOLE),  # a time stored as text
    (None, 1795967023194.5, _WHOLE),  # a time stored as a real
    (b"ses_dd805feb3ffeRYmW0nRsUneOP2", None, _WHOLE),  # a session id that is a blob
    ("ses_missing", None, _WHOLE),  # a session that is not in the database
    (None, None, _with("tokens.input", 12.5)),
    (None, None, _with("tokens.output", True)),
    (None, None, _with("tokens.cache", None)),
    (None, None, _with("tokens.total", None, drop=True)),
    (None, None, _with("tokens.total", 100.0)),
    (None, None, _with("tokens.reasoning", 123456789012345678901234567890)),
    (None, None, _with("tokens", None, drop=True)),
    (None, None, _with("tokens", None)),
    (None, None, _with("cost", "1.5")),
    (None, None, _with("cost", 2)),
    (None, None, _with("cost", None)),
    (None, None, _with("cost", None, drop=True)),
    (None, None, _with("role", "system")),
    (None, None, _with("modelID", "")),  # no model named: "?", as a stream's step
    (None, None, _with("providerID", None, drop=True)),
    (None, None, " " + _WHOLE),
    (None, None, ""),
    (None, None, '{"time":{"created":1},"role":"user","agent":"build"}'),
    (None, None, '{"role":"user"'),
    (None, None, '{"role":"user"-"'),
    # Pieces that would make messages if joined to their neighbours: each row is one value.
    (None, None, _WHOLE[:200]),
    (None, None, _WHOLE[200:]),
    (None, None, _WHOLE + "," + _WHOLE),
    (None, None, _WHOLE + " " + _WHOLE),
    # A well-formed message, earlier than the rows before it: the first of its session
    # (created 1795967025485), whose own first message came at 1795967026198.
    ("ses_dd805feb3ffeRYmW0nRsUneOP2", 1795967025500, _WHOLE),
]


def grown_fork_db(tmp_path: Path, *, odd_rows: bool = True) -> Path:
    """samples/fork's database with its messages cloned 60 times (new ids, figures varied,
    seven hours apart so that they cover several days), and (``odd_rows``) an odd row after
    every fourth."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT id, session_id, time_created, time_updated, data FROM message ORDER BY rowid"
    ).fetchall()
    odd = iter(_ODD_ROWS if odd_rows else ())
    for k in range(1, 61):
        shift = k * 7 * 3_600_000
        for n, (mid, sid, created, updated, data) in enumerate(rows):
            doc = json.loads(data)
            doc["time"] = {name: ms + shift for name, ms in doc["time"].items()}
            if doc["role"] == "assistant":
                doc["cost"] = doc["cost"] * (1 + k / 7)
                tokens = doc["tokens"]
                tokens["input"] += k
                tokens["cache"]["write"] += k
                tokens["reasoning"] += k % 3
                tokens["total"] += 2 * k + k % 3
                if k % 3 == 0:  # older OpenCode versions wrote no total
                    del tokens["total"]
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (f"{mid}{k:03d}", sid, created + shift, updated + shift, _text(doc)),
            )
            unusual = next(odd, None) if (k * len(rows) + n) % 4 == 0 else None
            if unusual is None:
                continue
            odd_sid, odd_time, odd_data = unusual
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES (?, ?, ?, ?, CASE WHEN typeof(?) = 'blob' AND ? THEN CAST(? AS TEXT) "
                "ELSE ? END)",
                (
                    f"{mid}{k:03d}odd",
                    sid if odd_sid is None else odd_sid,
                    created + shift + 1 if odd_time is None else odd_time,
                    updated + shift,
                    odd_data,
                    isinstance(odd_data, sqlite3.Binary),  # raw bytes stored as text
                    odd_data,
                    odd_data,
                ),
            )
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("by", ["day", "week", "month", "session", "model", "agent", "step"])
def test_chunked_scan_matches_the_row_by_row_scan(tmp_path: Path, monkeypatch, by: str):
    """A whole table read in chunks of rows (decoded one message at a time, each chunk that
    holds an odd row read again row by row) gives the row-by-row report to the last digit,
    whatever the chunk size, in this process or shared with forked workers (reading with
    apsw's SQLite or with sqlite3's), a group's costs put in fewer terms as soon as it has
    more than two (``_bounded``), the rows of forked copies decoded a few at a time."""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    db = grown_fork_db(tmp_path)
    monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(usage_module, "_COMPACT_AT", 2)
    monkeypatch.setattr(usage_module, "_SETTLE_AT", 3)
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 10**12)
    chunks: list[list[int] | None] = []
    chunk = usage_module._Scan.chunk
    monkeypatch.setattr(
        usage_module._Scan, "chunk", lambda *a: chunks.append(chunk(*a)) or chunks[-1]
    )
    with Store(db) as store:
        ids = store.session_ids(top_level=True)

        def report() -> dict:
            return usage_module.store_usage(
                store, ids, by=by, cross_session=True, tz=ZoneInfo("Asia/Kolkata")
            ).document()

        with monkeypatch.context() as m:  # the store's row-by-row batches, as before chunks
            m.setattr(usage_module, "_scan_here", lambda *a: False)
            expected = report()
        assert not chunks
        assert expected["rows"] and "forked" in expected["notes"][0]
        for size in (1, 2, 3, 7, 1024):
            monkeypatch.setattr(usage_module, "_CHUNK_ROWIDS", size)
            assert report() == expected, size
        for rowids in (1, 4, 13):  # read here range by range, as workers read theirs
            monkeypatch.setattr(usage_module, "_HERE_RANGE_ROWIDS", rowids)
            assert report() == expected, rowids
        if (os.cpu_count() or 1) >= 2:
            monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0)
            monkeypatch.setattr(usage_module, "_CHUNK_ROWIDS", 5)
            ran = _parallel_scans_seen(monkeypatch, usage_module)
            assert report() == expected
            assert ran == [True]  # steps too: each worker's set aside in the shared runs
            # The forked workers read with apsw where they can: with sqlite3 alone, the same.
            monkeypatch.setattr(usage_module.fastscan, "_apsw", lambda: None)
            assert report() == expected
    if by == "day":
        assert any(row["day"] == "?" for row in expected["rows"])  # the time stored as text
    if by in ("day", "week", "month", "session"):
        # Every way was taken: summed whole, summed with the rows at a forked copy's times
        # read as rows, and read row by row.
        assert [] in chunks and any(chunks) and None in chunks
    else:
        assert not chunks  # these need whole rows


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no workers")
@pytest.mark.parametrize("spilled", [True, False], ids=["spilled", "in memory"])
@pytest.mark.parametrize("odd_rows", [False, True], ids=["regular", "odd rows"])
@pytest.mark.parametrize("by", ["day", "week", "session", "model"])
def test_the_ledger_workers_keep_is_the_one_this_process_keeps(
    tmp_path: Path, monkeypatch, by: str, odd_rows: bool, spilled: bool
):
    """With the report cache, each worker encodes the ledger entries of the sessions in
    its ranges (into a file of the cache's, or kept as bytes where none can be made) and
    sends back only the report's groups (by day, week or model, a few): the ledger kept is
    byte for byte the one a scan in this process keeps, sessions read in many ranges
    joined, those with odd rows (a figure beyond 64 bits among them) left out alike, and a
    report from it alone is the report without the cache."""
    import opencode_events.reports.cache as report_cache
    import opencode_events.reports.usage as usage_module
    from opencode_events.reports.cache import ReportCache
    from opencode_events.store.sqlite import Store

    if not spilled:
        monkeypatch.setattr(ReportCache, "spill", lambda self: None)
    db = grown_fork_db(tmp_path, odd_rows=odd_rows)  # every session has rows in every range
    monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(usage_module, "_CHUNK_ROWIDS", 5)
    monkeypatch.setattr(usage_module, "_SETTLE_AT", 3)
    ran = _parallel_scans_seen(monkeypatch, usage_module)

    def report(root: Path | None) -> dict:
        with Store(db) as store:
            cache = None if root is None else ReportCache.open(store, root=root)
            found = usage_module.stored_usage(store, all_sessions=True, by=by, cache=cache)
            return found.document()

    expected = report(None)
    assert "forked" in expected["notes"][0]
    kept: dict[str, Any] = {}
    ways = (("here", 10**12, 50_000), ("here in ranges", 10**12, 7), ("workers", 0, 50_000))
    for how, least_rows, here_rowids in ways:
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", least_rows)
        monkeypatch.setattr(usage_module, "_HERE_RANGE_ROWIDS", here_rowids)
        root = tmp_path / how
        assert report(root) == expected
        (ledger,) = root.rglob("ledger-*")
        # the entries as written (the header names the database's state, its epoch too),
        # each session's stamp and bytes, in the order the parts were read in
        kept[how] = _ledger_file_entries(report_cache, ledger.read_bytes())
        for memo in root.rglob("memo-*"):
            memo.unlink()
        assert report(root) == expected  # from the ledger alone
        assert all(ran) == (how == "workers")  # the workers ran, or none did
        ran.clear()
        assert [p.name for p in root.rglob(".tmp-*")] == []  # no spill left behind
    assert kept["workers"] == kept["here"] == kept["here in ranges"]


def _ledger_file_entries(report_cache: Any, data: bytes) -> tuple[Any, dict[str, Any]]:
    """A ledger file's request and each session's stamp and entry's bytes, read as its
    format lays them out (``ReportCache.keep_ledger``): no session twice."""
    length = int.from_bytes(data[:8], "big")
    request = msgspec.msgpack.decode(report_cache._HEADER.decode(data[8 : 8 + length]).body)
    tail = int.from_bytes(data[-8:], "big")
    at, items = 8 + length, []
    for count, size, _check in msgspec.msgpack.decode(data[-8 - tail : -8]):
        group = report_cache._array_head(count) + data[at : at + size]
        items += [
            (sid, stamp, bytes(entry))
            for sid, stamp, entry in msgspec.msgpack.decode(
                group, type=list[tuple[str, Any, msgspec.Raw]]
            )
        ]
        at += size
    assert at == len(data) - 8 - tail  # nothing between the items and their groups
    entries = {sid: (stamp, entry) for sid, stamp, entry in items}
    assert len(entries) == len(items)
    return request, entries


def test_session_ids_are_the_sorted_session_rows(tmp_path: Path):
    """``usage --all`` lists ids without building session rows, in the same order."""
    from opencode_events.store.sqlite import Store

    db = tmp_path / "opencode.db"
    changes = [  # ties, damage (read as 0)
        {"id": f"ses_{n}", "parent_id": None, "time_created": created}
        for n, created in enumerate([5, 5, "x", 3.5, 0])
    ]
    with_sessions_like_the_first(db, "task", changes, keep=True)
    with Store(db) as store:
        for top in (False, True):
            rows = sorted(store.sessions(top_level=top), key=lambda r: (r.time_created, r.id))
            assert store.session_ids(top_level=top) == [r.id for r in rows]
            assert len(rows) > 5


# ------------------------------------------------------- damaged rows, every grouping

# The time_created of a session's assistant messages (in rowid order); the days they show
# by day (UTC), a time that names no date being "?"; and the session's start by session
# (its earliest integer time; None: none).
_ODD_TIMES = [
    pytest.param(["12x"], {"?": 1}, None, id="text"),
    pytest.param(["12x", 5], {"?": 1, "1970-01-01": 1}, 5, id="text-then-integer"),
    pytest.param([7, "12x", 5], {"?": 1, "1970-01-01": 2}, 5, id="integer-then-text"),
    pytest.param([b"12", 5], {"?": 1, "1970-01-01": 1}, 5, id="blob"),
    pytest.param([5.5], {"1970-01-01": 1}, None, id="real"),
    pytest.param([5.5, 3], {"1970-01-01": 2}, 3, id="real-then-integer"),
    pytest.param([10**17, 5], {"?": 1, "1970-01-01": 1}, 5, id="year-out-of-range"),
    pytest.param([-(10**17)], {"?": 1}, -(10**17), id="year-out-of-range-negative"),
    pytest.param([2**62, 2**62 + 1], {"?": 2}, 2**62, id="beyond-time_t"),
    pytest.param([float("inf"), 5], {"?": 1, "1970-01-01": 1}, 5, id="infinite"),
]
_ODD_FIGURES = {
    "input_tokens": 5,
    "output_tokens": 5,
    "reasoning_tokens": 0,
    "cache_read_tokens": 3,
    "cache_write_tokens": 2,
    "total_tokens": 15,
    "cost": 0.5,
}


def _odd_session_db(tmp_path: Path, times: list, session_time: int) -> Path:
    """samples/fork's database and one more top-level session, ses_odd, created at
    ``session_time``, whose assistant messages (distinct, each with ``_ODD_FIGURES``) have
    the given time_created."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    conn = sqlite3.connect(db)
    names = [c[1] for c in conn.execute("PRAGMA table_info(session)")]
    (row,) = conn.execute("SELECT * FROM session WHERE parent_id IS NULL LIMIT 1").fetchall()
    copy = dict(zip(names, row, strict=True))
    copy.update(id="ses_odd", parent_id=None, time_created=session_time)
    conn.execute(
        f"INSERT INTO session ({', '.join(copy)}) VALUES ({', '.join('?' * len(copy))})",
        list(copy.values()),
    )
    for n, created in enumerate(times):
        data = _with("time", {"created": n, "completed": n + 1})
        doc = json.loads(data)
        doc["tokens"] = {"total": 15, "input": 5, "output": 5, "reasoning": 0,
                         "cache": {"write": 2, "read": 3}}  # fmt: skip
        doc["cost"] = 0.5
        conn.execute(
            "INSERT INTO message VALUES (?, 'ses_odd', ?, 1, ?)",
            (f"msg_odd{n}", created, _text(doc)),
        )
    conn.commit()
    conn.close()
    return db


def _figures_of(total) -> dict:
    return {name: getattr(total, name) for name in _ODD_FIGURES}


@pytest.mark.parametrize("how", ["per-session", "whole-table", "workers"])
@pytest.mark.parametrize("session_time", [1, 10**18], ids=["young-session", "old-session"])
@pytest.mark.parametrize(("times", "days", "started"), _ODD_TIMES)
def test_odd_message_times_are_counted_by_every_grouping(
    tmp_path: Path, monkeypatch, how: str, session_time: int, times: list, days: dict, started
):
    """A message whose time_created is not an integer, or names no date, fails no report: it
    counts in every grouping, by day on "?" when its time names no day, and by session the
    start is the earliest integer time. (An old session makes its messages look like a
    fork's copies, which are read the slow way.)"""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    if how == "workers" and (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no workers")
    if how != "per-session":
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0 if how == "workers" else 10**12)
    with Store(SAMPLES / "fork" / "opencode.db") as store:
        before = usage_module.store_usage(
            store, store.session_ids(top_level=True), cross_session=True
        ).total
    db = _odd_session_db(tmp_path, times, session_time)
    ours = {name: value * len(times) for name, value in _ODD_FIGURES.items()}
    everything = {name: getattr(before, name) + ours[name] for name in _ODD_FIGURES}
    utc = ZoneInfo("UTC")
    with Store(db) as store:
        ids = store.session_ids(top_level=True)
        assert "ses_odd" in ids
        for by in usage_module.BY_STORE:
            alone = usage_module.store_usage(store, ["ses_odd"], by=by, tz=utc)
            assert _figures_of(alone.total) == ours, by
            whole = usage_module.store_usage(store, ids, by=by, tz=utc, cross_session=True)
            assert _figures_of(whole.total) == pytest.approx(everything, abs=1e-9), by
            if by == "day":
                assert {row.day: row.inferences for row in alone.rows} == days
            elif by == "session":
                (row,) = alone.rows
                assert (row.session_id, row.started, row.inferences) == (
                    "ses_odd",
                    started,
                    len(times),
                )
                assert "ses_odd" in [row.session_id for row in whole.rows]
            elif by == "step":
                assert sorted(row.message_id for row in alone.rows) == [
                    f"msg_odd{n}" for n in range(len(times))
                ]


@pytest.mark.parametrize("how", ["per-session", "whole-table", "workers"])
@pytest.mark.parametrize("by", ["day", "session"])
def test_a_message_with_an_odd_time_object_counts_whichever_way_it_is_read(
    tmp_path: Path, monkeypatch, how: str, by: str
):
    """By day and by session read only a message's figures: one whose "time" is no object
    counts there, also when it shares its time_created with a fork's copy (then it is read
    the slow way, whole, for a fingerprint it cannot have)."""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    if how == "workers" and (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no workers")
    if how != "per-session":
        monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0 if how == "workers" else 10**12)
    (copied,) = sql(
        SAMPLES / "fork" / "opencode.db",
        "SELECT m.session_id, m.time_created FROM message m JOIN session s "
        "ON s.id = m.session_id AND m.time_created < s.time_created "
        "WHERE json_extract(m.data, '$.role') = 'assistant'",
    )
    totals = []
    for shift in (0, 1):  # the copy's own time, or another
        db = tmp_path / f"opencode-{shift}.db"
        shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
        conn = sqlite3.connect(db)
        conn.execute(
            "INSERT INTO message VALUES ('msg_odd', ?, ?, 1, ?)",
            (copied[0], copied[1] + shift, '{"role":"assistant","time":"later","cost":1}'),
        )
        conn.commit()
        conn.close()
        with Store(db) as store:
            ids = store.session_ids(top_level=True)
            report = usage_module.store_usage(store, ids, by=by, cross_session=True)
        assert "forked" in report.notes[0]
        totals.append(_figures_of(report.total) | {"inferences": report.total.inferences})
    assert totals[0] == totals[1]
    with Store(SAMPLES / "fork" / "opencode.db") as store:
        ids = store.session_ids(top_level=True)
        before = usage_module.store_usage(store, ids, by=by, cross_session=True).total
    assert totals[0]["inferences"] == before.inferences + 1
    assert totals[0]["cost"] == pytest.approx(before.cost + 1, abs=1e-9)


@pytest.mark.parametrize("by", ["step", "turn", "session"])
def test_messages_with_odd_ids_are_counted(tmp_path: Path, by: str):
    """A message id that is NULL or a blob (no text): the message counts, without an id."""
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    db = _odd_session_db(tmp_path, [5, 5, 5], 1)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE message SET id = NULL WHERE id = 'msg_odd0'")
    conn.execute("UPDATE message SET id = CAST('msg_odd1' AS BLOB) WHERE id = 'msg_odd1'")
    conn.commit()
    conn.close()
    with Store(db) as store:
        report = usage_module.store_usage(store, ["ses_odd"], by=by)
    assert _figures_of(report.total) == {k: v * 3 for k, v in _ODD_FIGURES.items()}
    if by == "step":
        assert sorted(row.message_id or "" for row in report.rows) == ["", "", "msg_odd2"]


def test_step_rows_name_the_model_as_the_model_rows_do():
    db = str(SAMPLES / "task" / "opencode.db")
    steps = usage("--db", db, "--last", "--by", "step")["rows"]
    models = usage("--db", db, "--last", "--by", "model")["rows"]
    assert {r["model"] for r in steps} == {r["model"] for r in models} == {"mock/mock-model"}


def test_a_subagent_whose_parent_is_gone_counts_on_its_own(tmp_path: Path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (parent,) = conn.execute("SELECT parent_id FROM session WHERE parent_id IS NOT NULL").fetchone()
    for table, column in (("part", "session_id"), ("message", "session_id"), ("session", "id")):
        conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (parent,))
    conn.commit()
    (child, cost) = conn.execute("SELECT id, cost FROM session").fetchone()
    conn.close()
    doc = usage("--db", str(db), "--all")
    assert doc["total"]["cost"] == pytest.approx(cost) and doc["rows"]
    assert [row["id"] for row in sessions_of(db)] == [child]


@pytest.mark.parametrize("document", ["export.json", "events.sse"])
def test_usage_reads_what_normalize_reads(document: str):
    """An export document or a captured server event stream gives the usage of the same
    events `normalize` gives."""
    folder = next(p.parent for p in sorted(SAMPLES.glob(f"*/{document}")))
    source = str(folder / document)
    doc = usage(source)
    events = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", source],
        capture_output=True,
        check=True,
    ).stdout
    steps = [e for e in map(json.loads, events.splitlines()) if e["kind"] == "usage"]
    assert steps and len(doc["rows"]) == len(steps)
    assert doc["total"]["cost"] == pytest.approx(sum(e["cost"] for e in steps))


def test_unreadable_lines_in_normalized_input_are_noted_not_hidden():
    events = subprocess.run(
        [
            sys.executable,
            "-m",
            "opencode_events",
            "normalize",
            str(SAMPLES / "task" / "stream.jsonl"),
        ],
        capture_output=True,
        check=True,
    ).stdout
    expected = usage(stdin=events)
    damaged = b"garbage\n" + events + b'{"kind":"usage","input_tokens":"many"}\n'
    got = usage(stdin=damaged)
    assert got["rows"] == expected["rows"] and got["total"] == expected["total"]
    assert got["notes"] == [NOTE_UNREAD.format(2), NOTE_TASK_SUBAGENT]


NOTE_UNREAD = (
    "{} line(s) of the input could not be read (`normalize` shows them as warnings); not counted"
)


BAD_STEP = b'{"type":"step_finish","sessionID":"s","part":{"type":"step-finish","tokens":"lots"}}\n'
NOTE_STEPS = (
    "{} record(s) of usage (steps, messages) that could not be read (`normalize` shows them as "
    "unknown); not counted"
)
NOTE_EXPORT = (
    "1 export document(s) could not be read (not whole JSON: cut short?); nothing in them counted"
)
# samples/task: its `task` call's subagent session runs outside the parent's stream
NOTE_TASK_SUBAGENT = (
    "1 subagent session not in this stream; its cost is in the store: "
    "`opencode-events usage --session ses_dd8083e0bffePGJlLQX9qavHXI`"
)


def test_a_stream_of_many_runs_names_a_few_of_the_sessions_that_spawned_subagents():
    """One note line, whatever the log: three commands' worth of sessions, then how many."""
    run = (SAMPLES / "task" / "stream.jsonl").read_bytes()
    parent, child = b"ses_dd8083e0bffePGJlLQX9qavHXI", b"ses_dd8083865ffeA7oVLDszN0gOOR"
    runs = b"".join(
        run.replace(parent, b"ses_parent%04d" % i).replace(child, b"ses_child%04d" % i)
        for i in range(50)
    )
    (note,) = usage(stdin=runs)["notes"]
    assert note == (
        "50 subagent sessions not in this stream; their cost is in the store: "
        "`opencode-events usage --session ses_parent0000 --session ses_parent0001 "
        "--session ses_parent0002 …` (50 sessions started them; `--since` or `--all` reads "
        "them all)"
    )


def _export_with_a_broken_message(raw: bytes) -> bytes:
    doc = json.loads(raw)
    assistant = next(m for m in doc["messages"] if m["info"]["role"] == "assistant")
    assistant["parts"] = {"oops": assistant["parts"]}  # not a list: the message is unknown
    return json.dumps(doc).encode()


def _sse_with_unreadable_tokens(raw: bytes) -> bytes:
    update = {
        "type": "message.updated",
        "properties": {
            "info": {
                "id": "msg_x",
                "sessionID": "ses_x",
                "role": "assistant",
                "time": {"created": 1, "completed": 2},
                "cost": 0.5,
                "tokens": "lots",
            }
        },
    }
    return raw + b"data: " + json.dumps(update).encode() + b"\n\n"


def _normalized_with_garbage(raw: bytes) -> bytes:
    return subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize"],
        input=b"garbage\n" + raw + b"\xff\n",
        capture_output=True,
        check=True,
    ).stdout


@pytest.mark.parametrize(
    "sample, damage, notes",
    [
        (
            "task/stream.jsonl",
            lambda raw: b"garbage\n" + raw + b'{"type":\n\xff\n',
            [NOTE_UNREAD.format(3), NOTE_TASK_SUBAGENT],
        ),
        (
            "task/stream.jsonl",
            lambda raw: raw + BAD_STEP,
            [NOTE_STEPS.format(1), NOTE_TASK_SUBAGENT],
        ),
        (
            "task/stream.jsonl",
            _normalized_with_garbage,
            [NOTE_UNREAD.format(2), NOTE_TASK_SUBAGENT],
        ),
        ("task/export.json", lambda raw: raw[:3000], [NOTE_EXPORT]),  # as a pipe cuts it
        ("file_tools/export.json", _export_with_a_broken_message, [NOTE_STEPS.format(1)]),
        ("serve_text/events.sse", _sse_with_unreadable_tokens, [NOTE_STEPS.format(1)]),
        (
            "task/stream.jsonl",
            lambda raw: b'{"kind":"unknown","seq":0,"type":{"a":1}}\n',  # not ours: no crash
            None,
        ),
        (
            "serve_text/events.sse",
            lambda raw: raw + b"data: {not json\n\n",
            [NOTE_UNREAD.format(1)],
        ),
    ],
    ids=[
        "raw-stream",
        "raw-step-without-figures",
        "normalized",
        "export-cut-short",
        "export-message-unreadable",
        "sse-message-unreadable",
        "unknown-of-odd-type",
        "sse",
    ],
)
def test_what_cannot_be_read_in_any_input_is_noted(sample, damage, notes):
    raw = (SAMPLES / sample).read_bytes()
    got = usage(stdin=damage(raw))
    assert got.get("notes") == notes
    # the capture itself reads whole; the task sample's subagent is not in its stream
    whole = [NOTE_TASK_SUBAGENT] if sample.startswith("task/") else None
    assert usage(stdin=raw).get("notes") == whole


def test_a_database_given_as_a_stream_is_an_error_naming_the_option():
    db = SAMPLES / "text" / "opencode.db"
    for command, option in (("usage", "usage"), ("normalize", "import")):
        result = subprocess.run(
            [sys.executable, "-m", "opencode_events", command, str(db)],
            capture_output=True,
            timeout=60,
        )
        assert result.returncode == 2 and result.stdout == b""
        assert (
            result.stderr
            == (
                f"error: {db} is an SQLite database, not a stream: use `{option} --db {db}` "
                "(--all for every session)\n"
            ).encode()
        )


@pytest.mark.parametrize("damage", ['{"role":5}', "not json", '{"role":"system"}'])
@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "day"])
def test_a_message_row_that_cannot_be_read_is_noted_not_dropped_unsaid(tmp_path, damage, by):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (mid, cost) = conn.execute(
        "SELECT id, json_extract(data, '$.cost') FROM message "
        "WHERE json_extract(data, '$.role') = 'assistant' ORDER BY id LIMIT 1"
    ).fetchone()
    conn.execute("UPDATE message SET data = ? WHERE id = ?", (damage, mid))
    conn.commit()
    conn.close()
    whole = usage("--db", str(SAMPLES / "task" / "opencode.db"), "--all", "--by", by)
    got = usage("--db", str(db), "--all", "--by", by)
    assert got["notes"] == [
        "1 message row(s) could not be read (not JSON, or no user or assistant role); not counted"
    ]
    assert got["total"]["cost"] == pytest.approx(whole["total"]["cost"] - cost)


def test_a_resumed_subagent_stays_with_the_turn_that_started_it(tmp_path):
    """A later turn's task call may resume a subagent (task_id): its cost still folds into
    the turn whose call started it."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    parent = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()[0]
    user = conn.execute(
        "SELECT * FROM message WHERE session_id = ? AND json_extract(data, '$.role') = 'user'",
        (parent,),
    ).fetchone()
    reply = conn.execute(
        "SELECT * FROM message WHERE session_id = ? ORDER BY time_created DESC LIMIT 1",
        (parent,),
    ).fetchone()
    task = conn.execute("SELECT * FROM part WHERE json_extract(data, '$.tool') = 'task'").fetchone()
    later = 1795966990000  # a second turn, after the first one ended
    conn.execute(
        "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
        ("msg_zz_user", parent, later, later, user[4].replace(str(user[2]), str(later))),
    )
    data = json.loads(reply[4])
    data["parentID"] = "msg_zz_user"
    conn.execute(
        "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
        ("msg_zz_reply", parent, later + 1, later + 1, json.dumps(data)),
    )
    conn.execute(
        "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
        ("prt_zz_task", "msg_zz_reply", parent, later + 2, later + 2, task[5]),
    )
    conn.commit()
    conn.close()
    rows = usage("--db", str(db), "--session", parent)["rows"]
    assert len(rows) == 2
    assert rows[0].get("subagent_cost") and not rows[1].get("subagent_cost")


def test_a_prompt_without_a_reply_is_not_in_flight_in_any_report(tmp_path):
    # Seed 002: a reply with no time.completed is in flight; a prompt with none is not
    # (sessions and usage say the same).
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "continue3" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (last,) = conn.execute(
        "SELECT id FROM message WHERE json_extract(data, '$.role') = 'assistant' "
        "ORDER BY time_created DESC LIMIT 1"
    ).fetchone()
    conn.execute("DELETE FROM part WHERE message_id = ?", (last,))
    conn.execute("DELETE FROM message WHERE id = ?", (last,))
    conn.commit()
    conn.close()
    rows = usage("--db", str(db), "--last")["rows"]
    assert rows[-1]["inferences"] == 0 and rows[-1]["in_flight"] is False
    assert [s["in_flight"] for s in sessions_of(db)] == [False]


@pytest.mark.parametrize("table", ["message", "part"])
@pytest.mark.parametrize("by", ["turn", "step", "day"])
def test_null_data_in_a_row_is_a_row_not_read_not_a_crash(tmp_path, table, by):
    """OpenCode's schema says NOT NULL; a store whose schema was changed by hand may not."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, '`data` text NOT NULL', '`data` text') "
        "WHERE name = ?",
        (table,),
    )
    conn.commit()
    conn.close()
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE {table} SET data = NULL WHERE rowid = (SELECT max(rowid) FROM {table})")
    conn.commit()
    conn.close()
    result = subprocess.run(
        CLI + ["--db", str(db), "--all", "--by", by, "--format", "json"], capture_output=True
    )
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr
    if table == "message":
        assert "could not be read" in json.loads(result.stdout)["notes"][-1]
    imported = subprocess.run(
        [sys.executable, "-m", "opencode_events", "import", "--all", "--db", str(db)],
        capture_output=True,
    )
    assert imported.returncode == 0, imported.stderr
    kinds = [json.loads(line)["kind"] for line in imported.stdout.splitlines()]
    assert kinds.count("warning") == 1  # the row, read as the JSON null it stands for


@pytest.mark.parametrize(
    "by", ["turn", "step", "session", "model", "agent", "day", "week", "month", "project"]
)
def test_costs_that_sum_past_the_largest_float_are_inf_not_a_crash(tmp_path, by):
    """A damaged store's costs near the largest double (each one a float, their sum not):
    every grouping gives the total as a turn's running sum does, JSON's null (inf), with
    the cache and without; before, a grouped report raised ``OverflowError`` in fsum."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE message SET data = json_set(data, '$.cost', 1e308) "
        "WHERE json_extract(data, '$.role') = 'assistant'"
    )
    conn.commit()
    conn.close()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for extra in (["--no-cache"], [], []):  # no cache; the cache's first run; a repeat
        result = subprocess.run(
            CLI + ["--db", str(db), "--all", "--by", by, "--format", "json", *extra],
            capture_output=True,
            env=env,
        )
        assert result.returncode == 0 and not result.stderr, result.stderr
        assert json.loads(result.stdout)["total"]["cost"] is None


def _priced(db: Path, costs: dict[str, float]) -> None:
    """Give each session's assistant messages (and their step-finish parts and the session
    row) the cost in ``costs``, by session id; a session with several inferences has its
    cost on each. (The JSON gets the float's shortest repr, all 17 digits where it needs
    them: SQLite would write a bound REAL with 15.)"""
    conn = sqlite3.connect(db)
    for sid, cost in costs.items():
        conn.execute(
            "UPDATE message SET data = json_set(data, '$.cost', json(?)) "
            "WHERE session_id = ? AND json_extract(data, '$.role') = 'assistant'",
            (repr(cost), sid),
        )
        conn.execute(
            "UPDATE part SET data = json_set(data, '$.cost', json(?)) "
            "WHERE session_id = ? AND json_extract(data, '$.type') = 'step-finish'",
            (repr(cost), sid),
        )
        conn.execute(
            "UPDATE session SET cost = ? * (SELECT count(*) FROM message WHERE session_id = ? "
            "AND json_extract(data, '$.role') = 'assistant') WHERE id = ?",
            (cost, sid, sid),
        )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("cost", [2.31375e-05, 0.0020099999999999996, 1.2345678901234e-09])
def test_one_inference_s_cost_is_written_as_opencode_stored_it(tmp_path, cost):
    """SPEC §2: OpenCode's cost is used as it is, to the last digit, in every report of
    one inference (a sum of several is written to 12 significant digits)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    ((sid,),) = sql(db, "SELECT id FROM session")
    _priced(db, {sid: cost})
    for by in ("turn", "step", "session", "model", "agent", "day"):
        doc = usage("--db", str(db), "--by", by, "--session", sid)
        assert [r["cost"] for r in doc["rows"]] == [cost] and doc["total"]["cost"] == cost, by
    assert sessions_of(db)[0]["cost"] == sessions_of(db)[0]["total_cost"] == cost
    events = [
        json.loads(line)
        for line in subprocess.run(
            [sys.executable, "-m", "opencode_events", "import", "--db", str(db)],
            capture_output=True,
            check=True,
        ).stdout.splitlines()
    ]
    assert [e["cost"] for e in events if e["kind"] in ("usage", "metrics")] == [cost, cost]


def test_a_sum_of_costs_is_written_without_binary_noise(tmp_path):
    """0.1 + 0.2 is 0.30000000000000004 in floats; no bill says so."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    parent, child = [r[0] for r in sql(db, "SELECT id FROM session ORDER BY parent_id IS NOT NULL")]
    _priced(db, {parent: 0.1, child: 0.2})
    columns = sql(db, "SELECT cost FROM session ORDER BY parent_id IS NOT NULL")
    assert columns == [(0.2,), (0.6000000000000001,)]  # 2 inferences of 0.1, 3 of 0.2
    (row,) = sessions_of(db)
    assert row["total_cost"] == 0.8
    for by in ("turn", "session", "day"):
        assert usage("--db", str(db), "--by", by, "--session", parent)["total"]["cost"] == 0.8
    stream = tmp_path / "steps.jsonl"
    stream.write_bytes(
        b"".join(json.dumps(step_finish(cost=c)).encode() + b"\n" for c in (0.1, 0.2))
    )
    doc = usage(str(stream), "--by", "session")
    assert doc["rows"][0]["cost"] == doc["total"]["cost"] == 0.3


@pytest.mark.parametrize("by", ["turn", "step", "session", "model", "agent", "day"])
def test_since_counts_the_inferences_made_since_then(by: str):
    """`--since` is spend since then: a session active since then brings only its inferences
    created at or after that time (ccusage's reading too), in every grouping."""
    for name in ("continue3", "task"):
        _check_since(SAMPLES / name / "opencode.db", by)


def _check_since(db: Path, by: str) -> None:
    # At each message's time, and just after it: inside a subagent's run too, where the
    # turn report counts the subagent's inferences since then, as the other groupings do.
    times = sql(db, "SELECT time_created FROM message ORDER BY 1")
    for since in sorted({t + d for (t,) in times for d in (0, 1)}):
        ((expected,),) = sql(
            db,
            "SELECT total(json_extract(data, '$.cost')) FROM message "
            "WHERE json_extract(data, '$.role') = 'assistant' AND time_created >= ?",
            since,
        )
        stamp = datetime.fromtimestamp(since / 1000, UTC).isoformat(timespec="milliseconds")
        doc = usage("--db", str(db), "--since", stamp, "--by", by)
        assert doc["total"]["cost"] == pytest.approx(expected, rel=1e-12), (by, since)
        if by == "turn":  # the turns that started before and have nothing left are gone
            assert all(row["inferences"] or row.get("subagent_cost") for row in doc["rows"])


@pytest.mark.parametrize("by", ["step", "session", "model", "agent", "day"])
def test_since_gives_the_same_report_whichever_way_the_table_is_read(
    tmp_path: Path, monkeypatch, by: str
):
    import opencode_events.reports.usage as usage_module
    from opencode_events.store.sqlite import Store

    db = grown_fork_db(tmp_path)
    ((since,),) = sql(
        db,
        "SELECT time_created FROM message ORDER BY time_created LIMIT 1 OFFSET ("
        "SELECT count(*) / 2 FROM message)",
    )
    monkeypatch.setattr(usage_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 10**12)
    with Store(db) as store:
        ids = store.session_ids(top_level=True)

        def report() -> dict:
            return usage_module.store_usage(
                store, ids, by=by, cross_session=True, since_ms=since
            ).document()

        with monkeypatch.context() as m:  # row by row
            m.setattr(usage_module, "_scan_here", lambda *a: False)
            expected = report()
        whole = usage_module.store_usage(store, ids, by=by, cross_session=True).document()
        assert 0 < expected["total"]["cost"] < whole["total"]["cost"]
        monkeypatch.setattr(usage_module, "_CHUNK_ROWIDS", 3)
        assert report() == expected  # in chunks
        if by != "step" and (os.cpu_count() or 1) >= 2:
            monkeypatch.setattr(usage_module, "_PARALLEL_MIN_ROWS", 0)
            assert report() == expected  # with a worker


def test_one_subagent_s_cost_is_its_total_as_stored(tmp_path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE session SET cost = 0.12345678901234567 WHERE parent_id IS NOT NULL")
    conn.commit()
    conn.close()
    doc = usage("--db", str(db), "--all")
    assert doc["rows"][0]["subagent_cost"] == doc["total"]["subagent_cost"] == 0.12345678901234567


def test_a_fork_named_with_its_own_subagent_is_still_reported_whole(tmp_path):
    """One session and a subagent of its own are one report of one session: no fork's copy
    is left out (that needs the original in the report too)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    ((fork,),) = sql(db, "SELECT id FROM session ORDER BY time_created DESC LIMIT 1")
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, "
        "time_created, time_updated, cost, tokens_input, tokens_output, tokens_reasoning, "
        "tokens_cache_read, tokens_cache_write) SELECT ?, project_id, id, 'kid', directory, "
        "'child', version, time_created + 100, time_updated, 0.5, 1, 1, 0, 0, 0 "
        "FROM session WHERE id = ?",
        (fork[:-6] + "child0", fork),
    )
    conn.commit()
    conn.close()
    alone = usage("--db", str(db), "--session", fork)
    both = usage("--db", str(db), "--session", fork, "--session", fork[:-6] + "child0")
    assert both == alone and "notes" not in both


def test_the_forked_copies_note_counts_only_what_the_report_would_count():
    db = SAMPLES / "fork" / "opencode.db"
    ((copied,),) = sql(
        db,
        "SELECT max(m.time_created) FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE m.time_created < s.time_created",
    )
    for by in ("turn", "session", "day"):
        both = usage("--db", str(db), "--all", "--by", by)
        assert "forked" in both["notes"][0], by
        # since after the copied inference: neither it nor its copy is in the report
        stamp = datetime.fromtimestamp((copied + 1) / 1000, UTC).isoformat()
        later = usage("--db", str(db), "--since", stamp, "--by", by)
        assert len({r.get("session_id") for r in later["rows"]}) >= 1
        assert "notes" not in later, by


def test_since_compares_the_row_s_time_as_every_grouping_does(tmp_path):
    """The message row's time_created (what OpenCode indexes), not the JSON's copy of it."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "continue3" / "opencode.db", db)
    times = [t for (t,) in sql(db, "SELECT time_created FROM message ORDER BY 1")]
    conn = sqlite3.connect(db)
    conn.execute("UPDATE message SET data = json_set(data, '$.time.created', 'soon')")
    conn.commit()
    conn.close()
    stamp = datetime.fromtimestamp(times[3] / 1000, UTC).isoformat(timespec="milliseconds")
    totals = {
        by: usage("--db", str(db), "--since", stamp, "--by", by)["total"]["cost"]
        for by in ("turn", "step", "day")
    }
    assert len(set(totals.values())) == 1, totals


def test_since_a_date_is_read_in_the_report_s_time_zone():
    db = SAMPLES / "task" / "opencode.db"
    ((first,),) = sql(db, "SELECT min(time_created) FROM message")
    day = datetime.fromtimestamp(first / 1000, UTC).date()
    assert datetime.fromtimestamp(first / 1000, UTC).hour >= 9  # the next day in Tokyo

    def days(since: str) -> list[str]:
        env = {**os.environ, "TZ": "Asia/Tokyo"}  # the machine's zone: 9 hours ahead
        result = subprocess.run(
            CLI
            + ["--db", str(db), "--since", since, "--tz", "UTC", "--by", "day"]
            + ["--format", "json"],
            capture_output=True,
            env=env,
            check=True,
        )
        return [row["day"] for row in json.loads(result.stdout)["rows"]]

    assert days(day.isoformat()) == [day.isoformat()]
    assert days((day + timedelta(days=1)).isoformat()) == []  # midnight UTC, not Tokyo


def test_an_empty_session_id_is_refused():
    result = subprocess.run(
        CLI + ["--db", str(SAMPLES / "task" / "opencode.db"), "--session", ""],
        capture_output=True,
    )
    assert result.returncode == 2 and result.stderr == b"error: an empty session id\n"


def test_a_damaged_message_among_forked_ones_is_read_not_a_traceback(tmp_path):
    """A message sent down the slow path (its time is a fork's) that is both not whole
    enough to decode in full and holds a lone surrogate escape: read for its figures."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    conn = sqlite3.connect(db)
    ((mid, data),) = conn.execute(
        "SELECT m.id, m.data FROM message m JOIN session s ON s.id = m.session_id "
        "WHERE json_extract(m.data, '$.role') = 'assistant' AND m.time_created >= s.time_created "
        "ORDER BY m.time_created LIMIT 1"
    ).fetchall()
    message = json.loads(data)
    message.pop("time", None)
    damaged = '{"time": 5, "x": "\\ud800", ' + json.dumps(message)[1:]
    conn.execute("UPDATE message SET data = ? WHERE id = ?", (damaged, mid))
    conn.commit()
    conn.close()
    for by in ("day", "session"):
        assert usage("--db", str(db), "--all", "--by", by)["total"]["cost"] > 0


def _task_copy(tmp_path: Path, sql_text: str, *params) -> Path:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute(sql_text, params)
    conn.commit()
    conn.close()
    return db


def test_a_subagent_listed_apart_under_since_says_whose_its_rows_are(tmp_path):
    """The parent's task call came before --since and the subagent worked after it: its
    inferences since then are its own rows, marked with its session, and a note says why."""
    db = SAMPLES / "task" / "opencode.db"
    ((child,),) = sql(db, "SELECT id FROM session WHERE parent_id IS NOT NULL")
    ((spawning, last_of_child),) = sql(
        db,
        "SELECT (SELECT m.time_created FROM part p JOIN message m ON m.id = p.message_id "
        "WHERE json_extract(p.data, '$.tool') = 'task'), "
        "(SELECT max(time_created) FROM message WHERE session_id = ?)",
        child,
    )
    stamp = datetime.fromtimestamp((spawning + 1) / 1000, UTC).isoformat(timespec="milliseconds")
    # the parent's later inference moved before the cutoff: only the subagent is left
    moved = _task_copy(
        tmp_path,
        "UPDATE message SET time_created = ? WHERE session_id != ? AND time_created > ?",
        spawning,
        child,
        spawning,
    )
    doc = usage("--db", str(moved), "--since", stamp)
    assert doc["rows"] and all(row["session_id"] == child for row in doc["rows"])
    assert "started before --since" in doc["notes"][0]
    assert last_of_child > spawning


def test_unreadable_rows_of_a_folded_subagent_are_noted_under_since(tmp_path):
    db = SAMPLES / "task" / "opencode.db"
    ((child,),) = sql(db, "SELECT id FROM session WHERE parent_id IS NOT NULL")
    ((mid,),) = sql(db, "SELECT max(id) FROM message WHERE session_id = ?", child)
    damaged = _task_copy(tmp_path, "UPDATE message SET data = '{not json' WHERE id = ?", mid)
    for by in ("turn", "step", "session"):
        doc = usage("--db", str(damaged), "--since", "2000-01-01", "--by", by)
        assert any("could not be read" in note for note in doc.get("notes", [])), by


def test_under_since_a_turn_without_a_usable_time_and_nothing_since_is_not_listed(tmp_path):
    db = SAMPLES / "task" / "opencode.db"
    ((parent,),) = sql(db, "SELECT id FROM session WHERE parent_id IS NULL")
    odd = _task_copy(
        tmp_path,
        "UPDATE message SET time_created = 'nope' WHERE json_extract(data, '$.role') = 'user'",
    )
    assert usage("--db", str(odd), "--session", parent, "--since", "2099-01-01")["rows"] == []


@pytest.mark.parametrize("odd", ["5", '"soon"', "[]", "null"])
def test_a_message_whose_time_is_of_another_shape_counts_in_every_grouping(tmp_path, odd):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE message SET data = json_set(data, '$.time', json(?)) "
        "WHERE json_extract(data, '$.role') = 'assistant'",
        (odd,),
    )
    conn.commit()
    conn.close()
    ((tokens,),) = sql(db, "SELECT tokens_input + tokens_output + tokens_cache_read FROM session")
    for by in ("turn", "step", "session", "model", "agent", "day"):
        doc = usage("--db", str(db), "--all", "--by", by)
        assert doc["total"]["total_tokens"] == tokens and "notes" not in doc, by


# ------------------------------------------------------------- labels, flags and times


def _csv_rows(*args: str) -> list[dict[str, str]]:
    result = subprocess.run(CLI + [*args, "--format", "csv"], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    return list(csv.DictReader(io.StringIO(result.stdout.decode())))


def test_a_single_session_report_names_its_session_in_every_row(tmp_path: Path):
    """CSVs appended together still tell their rows apart: `session_id` is filled whenever it
    is known, one session or several, from the store or from any kind of stream."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    ((parent,),) = sql(db, "SELECT id FROM session WHERE parent_id IS NULL")
    ((served,),) = sql(SAMPLES / "serve_text" / "opencode.db", "SELECT id FROM session")
    reports = [
        (["--db", str(db), "--all"], parent),
        (["--db", str(db), "--session", parent[:12]], parent),
        ([str(SAMPLES / "task" / "stream.jsonl")], parent),
        ([str(SAMPLES / "task" / "export.json")], parent),
        ([str(SAMPLES / "serve_text" / "events.sse")], served),
    ]
    for args, session in reports:
        rows = _csv_rows(*args)
        assert rows and [r["session_id"] for r in rows] == [session] * len(rows), args
        doc = usage(*args)
        assert [r.get("session_id") for r in doc["rows"]] == [session] * len(rows), args
    # the table for people still leaves out a column that says the same on every row
    table = subprocess.run(
        CLI + ["--db", str(db), "--all", "--format", "table"], capture_output=True
    )
    assert table.returncode == 0 and parent not in table.stdout.decode()


def test_a_finished_step_of_a_stream_is_not_open(tmp_path: Path):
    """ "In CSV and Markdown a boolean is true or false": a step known finished is `false`."""
    for source in ("stream.jsonl", "export.json"):
        rows = _csv_rows(str(SAMPLES / "task" / source))
        assert [r["open"] for r in rows] == ["false", "false"], source
    assert [r["open"] for r in _csv_rows(str(SAMPLES / "sigint" / "stream.jsonl"))] == ["true"]


def _step_times(stream: Path) -> dict[str, list[int]]:
    times: dict[str, list[int]] = {"step_start": [], "step_finish": []}
    for line in stream.read_bytes().splitlines():
        rec = json.loads(line)
        if rec["type"] in times:
            times[rec["type"]].append(rec["timestamp"])
    return times


def test_a_stream_step_starts_at_its_step_start_record():
    """A raw stream has each step's start (its `step_start` record's timestamp); normalized
    JSONL has only the `usage` event, written when the step finished."""
    stream = SAMPLES / "continue3" / "stream.jsonl"
    times = _step_times(stream)
    assert times["step_start"] and times["step_start"] != times["step_finish"]
    assert [r["started"] for r in usage(str(stream))["rows"]] == times["step_start"]
    normalized = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", str(stream)],
        capture_output=True,
        check=True,
    ).stdout
    assert [r["started"] for r in usage(stdin=normalized)["rows"]] == times["step_finish"]


def test_the_open_step_of_an_interrupted_run_has_its_session_and_start():
    stream = SAMPLES / "sigint" / "stream.jsonl"
    (start,) = [json.loads(line) for line in stream.read_bytes().splitlines()]
    (row,) = usage(str(stream))["rows"]
    assert row["open"] is True
    assert (row["session_id"], row["started"]) == (start["sessionID"], start["timestamp"])
    lines = [
        {**record("step_start", {"type": "step-start"}), "timestamp": 1000},
        {**step_finish(input_=5, cost=0.5), "timestamp": 2000},
        {**record("step_start", {"type": "step-start"}), "timestamp": 3000},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    doc = usage(stdin=data)
    assert [(r["started"], r["open"], r["session_id"]) for r in doc["rows"]] == [
        (1000, False, SESSION),
        (3000, True, SESSION),
    ]


def test_markdown_for_people_dates_a_row_in_iso_8601_utc(tmp_path: Path):
    """CSV and JSON keep epoch ms, for programs; Markdown is read by people."""
    from opencode_events.reports.usage import store_usage, stream_usage
    from opencode_events.store.open import open_store

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(str(db)) as store:
        ((parent,),) = sql(db, "SELECT id FROM session WHERE parent_id IS NULL")
        stored = store_usage(store, [parent])
    ((started,),) = sql(
        db,
        "SELECT json_extract(data, '$.time.created') FROM message "
        "WHERE session_id = ? AND json_extract(data, '$.role') = 'user'",
        parent,
    )
    iso = datetime.fromtimestamp(started / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    text = report_markdown(stored).decode()
    assert f"| {iso} |" in text and str(started) not in text
    assert _csv_rows("--db", str(db), "--all")[0]["started"] == str(started)
    with open(SAMPLES / "task" / "stream.jsonl", "rb") as stream:
        streamed = stream_usage([("run.jsonl", stream)])
    lines = report_markdown(streamed).decode().splitlines()
    assert lines[0].startswith("| session | step | started |")  # a stream's rows are steps
    table = [line for line in lines if line.startswith("|")]  # the notes follow it
    assert lines[2].split(" | ")[2].endswith("Z") and table[-1].startswith("| **total** |")


def test_usage_markdown_on_the_command_line_dates_in_iso_8601(tmp_path: Path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    result = subprocess.run(
        CLI + ["--db", str(db), "--all", "--format", "markdown"], capture_output=True, check=True
    )
    rows = result.stdout.decode().splitlines()[2:-1]
    assert rows and all(row.split(" | ")[2].endswith("Z") for row in rows)


@pytest.mark.parametrize("by", ["turn", "step", "session", "day"])
def test_usage_markdown_aligns_every_number_right(by):
    """Counts, durations, tokens and costs to the right; names, ids and times to the left."""
    db = str(SAMPLES / "task" / "opencode.db")
    result = subprocess.run(
        CLI + ["--db", db, "--all", "--by", by, "--format", "markdown"],
        capture_output=True,
        check=True,
    )
    head, rule, first, *_ = result.stdout.decode().splitlines()
    names = [cell.strip() for cell in head.strip("|").split("|")]
    aligns = rule.strip("|").split("|")
    values = [cell.strip() for cell in first.strip("|").split("|")]
    for name, align, value in zip(names, aligns, values, strict=True):
        if re.fullmatch(r"[\d.]+", value):
            assert align == "---:", (by, name, value)
        elif value:
            assert align == "---", (by, name, value)


# ------------------------------------------------------------------ GitHub Actions


def test_usage_github_appends_the_summary_and_the_totals(tmp_path: Path):
    """`usage --github` in a GitHub Actions step: the Markdown table appended to
    $GITHUB_STEP_SUMMARY (what was there stays), the totals as name=value lines appended to
    $GITHUB_OUTPUT, and stdout as without it."""
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    summary.write_text("earlier step\n")
    outputs.write_text("other=1\n")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs)}
    db = str(SAMPLES / "task" / "opencode.db")
    args = [*CLI, "--db", db, "--all", "--format", "json"]
    with_github = subprocess.run([*args, "--github"], capture_output=True, env=env, check=True)
    plain = subprocess.run(args, capture_output=True, check=True)
    assert with_github.stdout == plain.stdout
    total = json.loads(plain.stdout)["total"]
    text = summary.read_text()
    assert text.startswith("earlier step\n### OpenCode usage\n")
    assert "| **total** |" in text and str(total["total_tokens"]) in text
    lines = outputs.read_text().splitlines()
    assert lines[0] == "other=1"
    assert dict(line.split("=", 1) for line in lines[1:]) == {k: str(v) for k, v in total.items()}


def test_usage_github_outside_github_is_a_usage_error():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    db = str(SAMPLES / "task" / "opencode.db")
    result = subprocess.run([*CLI, "--db", db, "--github"], capture_output=True, env=env)
    assert (result.returncode, result.stdout) == (2, b"")
    assert b"--github needs $GITHUB_STEP_SUMMARY or $GITHUB_OUTPUT" in result.stderr


# ------------------------------------------------- what a stream cannot see: subagents


def _subagents_in_store(name: str) -> tuple[str | None, int]:
    """The sample's top-level session and how many sessions are below it, from its store."""
    import sqlite3

    db = SAMPLES / name / "opencode.db"
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        rows = conn.execute("SELECT id, parent_id FROM session").fetchall()
    roots = [sid for sid, parent in rows if parent is None and sid]
    below = [sid for sid, parent in rows if parent is not None]
    return (roots[0] if len(roots) == 1 else None), len(below)


@pytest.mark.parametrize(
    "name",
    sorted(
        p.parent.name for p in SAMPLES.glob("*/stream.jsonl") if (p.parent / "opencode.db").exists()
    ),
)
def test_a_stream_says_which_subagents_it_cannot_see(name: str) -> None:
    from opencode_events.reports.usage import stream_usage

    root, below = _subagents_in_store(name)
    for source in ("stream.jsonl", "export.json"):
        path = SAMPLES / name / source
        if not path.exists():
            continue
        with open(path, "rb") as f:
            notes = stream_usage([(str(path), f)]).notes
        said = [n for n in notes if "not in this stream" in n]
        if not below:
            assert said == [], (source, notes)
            continue
        noun = "session" if below == 1 else "sessions"
        assert said == [
            f"{below} subagent {noun} not in this stream; "
            f"{'its' if below == 1 else 'their'} cost is in the store: "
            f"`opencode-events usage --session {root}`"
        ], source


def _child_steps() -> tuple[str, list[str]]:
    """The ``task`` capture's subagent session, and two of its steps as a raw stream would
    tell them (the parent's step records under the child's id and new part ids)."""
    lines = (SAMPLES / "task" / "stream.jsonl").read_text().splitlines()
    parent = json.loads(lines[0])["sessionID"]
    call = next(json.loads(line) for line in lines if '"tool":"task"' in line)
    child = call["part"]["state"]["metadata"]["sessionId"]
    steps = [line for line in lines if '"type":"step_' in line][:2]
    return child, [
        step.replace(parent, child).replace('"id":"prt_', '"id":"prt_child') for step in steps
    ]


@pytest.mark.parametrize(
    "order",
    [
        "child's steps first",  # then the parent's run, whose task call spawns it
        "child's steps last",
        "child's steps in the input before",
        "child's steps in the input after",
    ],
)
def test_a_subagent_whose_steps_a_stream_holds_is_not_said_missing(tmp_path, order) -> None:
    """The note names only the subagents whose steps no input holds, whichever comes first,
    the steps or the call, in one input or two (the sessions with steps are kept across
    inputs, and at the last one only those spawned)."""
    from opencode_events.reports.usage import stream_usage

    run = (SAMPLES / "task" / "stream.jsonl").read_text().splitlines()
    child, steps = _child_steps()
    inputs = {
        "child's steps first": [steps + run],
        "child's steps last": [run + steps],
        "child's steps in the input before": [steps, run],
        "child's steps in the input after": [run, steps],
    }[order]
    paths = []
    for n, lines in enumerate(inputs):
        paths.append(tmp_path / f"{n}.jsonl")
        paths[-1].write_text("\n".join(lines) + "\n")
    opened = [(str(p), open(p, "rb")) for p in paths]  # noqa: SIM115 - closed below
    try:
        report = stream_usage(opened)
    finally:
        for _, f in opened:
            f.close()
    assert not [n for n in report.notes if "not in this stream" in n], report.notes
    assert child in {row.session_id for row in report.rows}  # its steps were counted
    with open(SAMPLES / "task" / "stream.jsonl", "rb") as f:  # and without them, it is said
        alone = stream_usage([("run", f)]).notes
    assert [n for n in alone if "not in this stream" in n]


def test_the_table_shows_times_in_the_zone_asked_for():
    """Issue 20 §8: --tz was accepted and ignored for the times a table shows."""
    db = str(SAMPLES / "task" / "opencode.db")
    env = {**os.environ, "COLUMNS": "160"}
    shown = {
        zone: subprocess.run(
            [*CLI, "--db", db, "--all", "--format", "table", "--tz", zone],
            capture_output=True,
            env=env,
            check=True,
        ).stdout.decode()
        for zone in ("UTC", "Asia/Tokyo")
    }
    assert "2026-11-29 15:41" in shown["UTC"] and "2026-11-30 00:41" in shown["Asia/Tokyo"]


# ------------------------------------------------------------------ week, month, project


@pytest.mark.parametrize(
    ("day", "week"),
    [
        ("2026-11-30", "2026-W49"),
        ("2026-11-29", "2026-W48"),
        ("2026-12-31", "2026-W53"),
        ("2027-01-01", "2026-W53"),
        ("2024-12-30", "2025-W01"),
        ("?", "?"),
    ],
)
def test_a_week_is_the_iso_week_of_its_days(day: str, week: str) -> None:
    from opencode_events.reports.usage import _week_of

    assert _week_of(day) == week


@pytest.mark.parametrize("by", ["week", "month", "project"])
def test_weeks_months_and_projects_regroup_the_days_and_sessions(tmp_path, by: str) -> None:
    """Each row of --by week|month is the sum of the --by day rows in it, and each row of
    --by project the sum of its sessions' --by session rows; the totals are the same."""
    from datetime import date

    from opencode_events.reports.usage import stored_usage
    from opencode_events.store.open import open_store

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with open_store(db) as store:
        report = stored_usage(store, all_sessions=True, by=by)
        basis = stored_usage(store, all_sessions=True, by="session" if by == "project" else "day")
        directories = {row.id: row.directory for row in store.sessions()}

    def label(row) -> str:
        if by == "project":
            return directories[row.session_id]
        year, week, _ = date.fromisoformat(row.day).isocalendar()
        return f"{year}-W{week:02d}" if by == "week" else row.day[:7]

    expected: dict[str, list] = {}
    for row in basis.rows:
        sums = expected.setdefault(label(row), [0, 0, 0.0])
        sums[0] += row.inferences
        sums[1] += row.total_tokens
        sums[2] += row.cost
    got = {getattr(row, by): [row.inferences, row.total_tokens, row.cost] for row in report.rows}
    assert got.keys() == expected.keys()
    for key, (inferences, tokens, cost) in got.items():
        assert [inferences, tokens] == expected[key][:2]
        assert cost == pytest.approx(expected[key][2], rel=1e-12)
    assert report.total.cost == basis.total.cost
    assert report.total.total_tokens == basis.total.total_tokens


def test_a_chunk_with_a_message_of_another_key_order_is_summed_as_rows_are() -> None:
    """samples/serve_shell: OpenCode 1.18.33 writes a user's ``!shell`` message starting
    {"time":…, so the SQL prefix test lets it through. The chunk is still summed quickly,
    that message alone read as a row, to the sums ``run`` gives row by row."""
    import math

    from opencode_events.reports import usage as U

    db = SAMPLES / "serve_shell" / "opencode.db"
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    (low, high) = conn.execute("SELECT min(rowid), max(rowid) + 1 FROM message").fetchone()
    n, *arrays = conn.execute(U._CHUNK_SQL, (low, high)).fetchone()
    rows = conn.execute(U._ROWS_SQL, (low, high)).fetchall()
    conn.close()
    assert any(data.startswith(b'{"time"') for _s, _m, _t, data in rows)
    owner = {sid: sid for sid, _m, _t, _d in rows}

    def sums(scan):
        return {
            key: [*acc[:6], acc[7], acc[8], math.fsum(acc[6])] for key, acc in scan.groups.items()
        }

    quick, slow = U._Scan("day", owner, set(), set()), U._Scan("day", owner, set(), set())
    assert quick.chunk(n, *arrays, U._DayOf(None)) == []
    slow.run(rows, U._DayOf(None))
    assert sums(quick) == sums(slow) and sums(quick)


_FIGURE = st.one_of(st.integers(0, 1 << 20), st.integers(), st.floats())


@settings(max_examples=400, deadline=None)
@given(
    counts=st.lists(_FIGURE, min_size=6, max_size=6),
    cost=st.floats(),
    created=st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
)
def test_a_forked_copys_figures_read_back_as_they_were_packed(counts, cost, created) -> None:
    """A forked copy's sums wait for the end of the scan in 64 bytes (``_packed``): read
    back (``_unpacked``) they are what ``_add_message`` made, NaN and infinite costs, no
    time and odd counts (no integer, beyond 64 bits: left as they are) alike."""
    from opencode_events.reports import usage as U

    sums = U._new_sums(created)
    sums[:6] = counts
    sums[6].append(cost)
    sums[7] = 1
    if created is not None:
        sums[9].append(created)
    as_made = repr(sums)
    packed = U._packed(sums)
    plain = all(type(n) is int and -(1 << 63) <= n < 1 << 63 for n in counts)
    assert (type(packed) is bytes) == (plain and created != U._EVER)
    assert repr(U._unpacked(packed)) == as_made


def test_a_scan_by_date_alone_keeps_one_group_a_day() -> None:
    """Without a ledger to write, ``--by day`` sums every session's messages of a day
    together (memory that does not grow with sessions); a ledger keeps them apart, as
    ``--by session`` does. The sums are the same either way, and the times of inferences
    are kept only for a ledger."""
    import math

    from opencode_events.reports import usage as U

    data = b'{"role":"assistant","tokens":{"input":1,"output":2},"cost":0.1}'
    sids = ["ses_a", "ses_b", "ses_a", "ses_c"]
    times = [1_000, 2_000, 3_000, 86_400_000 + 5]
    owner = {sid: sid for sid in sids}
    args = (4, json.dumps(sids).encode(), json.dumps(times).encode(), b"\n".join([data] * 4), 1)
    lean = U._Scan("day", owner, set(), set(), per_session=False)
    kept = U._Scan("day", owner, set(), set(), ledger=True)
    apart = U._Scan("session", owner, set(), set())
    assert lean.chunk(*args, U._DayOf(None)) == [] == kept.chunk(*args, U._DayOf(None))
    assert apart.chunk(*args, U._DayOf(None)) == []
    assert sorted(apart.groups) == sorted(kept.groups)
    assert all(acc[:9] == kept.groups[key][:9] for key, acc in apart.groups.items())
    assert not any(acc[9] for acc in apart.groups.values())
    assert sorted(lean.groups) == [("", "1970-01-01"), ("", "1970-01-02")]
    assert sorted(kept.groups) == [
        ("ses_a", "1970-01-01"),
        ("ses_b", "1970-01-01"),
        ("ses_c", "1970-01-02"),
    ]
    day_one = lean.groups[("", "1970-01-01")]
    assert day_one[:6] == [3, 6, 0, 0, 0, 9] and day_one[7] == 3 and day_one[8] == 1_000
    assert math.fsum(day_one[6]) == math.fsum([0.1] * 3) and not day_one[9]
    assert list(kept.groups[("ses_a", "1970-01-01")][9]) == [1_000, 3_000]


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(
    costs=st.lists(
        st.one_of(_FLOATS, st.floats(min_value=0, max_value=10), st.just(5e-324)), max_size=60
    ),
    more=st.lists(_FLOATS, max_size=5),
)
def test_bounded_costs_keep_the_exact_sum(costs, more) -> None:
    """``_bounded`` puts many costs in a few terms with exactly their sum: ``fsum`` of the
    terms and any further costs is ``fsum`` of all, to the last bit, whatever the values
    (huge, tiny, subnormal, of both signs); a sum too large for a double leaves them be."""
    import math
    from array import array

    from opencode_events.reports import usage as U

    with pytest.MonkeyPatch.context() as m:
        m.setattr(U, "_COMPACT_AT", 3)
        terms = U._bounded(array("d", costs))
    assert len(terms) <= max(len(costs), 3)
    try:
        whole = math.fsum([*costs, *more])
    except OverflowError:
        return
    assert math.fsum([*terms, *more]) == whole


def test_bounded_costs_leave_what_has_no_exact_sum() -> None:
    """Costs that are not all finite (or whose sum overflows) are kept as they are."""
    from array import array

    from opencode_events.reports import usage as U

    for odd in ([math_inf := float("inf"), 1.0], [math_inf, -math_inf], [float("nan"), 1.0]):
        costs = array("d", odd * (U._COMPACT_AT // 2 + 1))
        assert U._bounded(costs) is costs
    huge = array("d", [1.7e308] * (U._COMPACT_AT + 1))
    assert U._bounded(huge) is huge
    small = array("d", [0.1] * (U._COMPACT_AT + 1))
    assert len(U._bounded(small)) < 4


def test_a_chunk_splits_a_quarter_hour_in_which_a_day_begins() -> None:
    """Pacific/Kiritimati was at −10:40 until 1979: its 1 June 1975 began at 10:40 UTC, in
    the middle of a quarter hour. Two replies of that quarter hour, before and after, are
    counted on their own days, by the chunk as by the rows."""
    from opencode_events.reports import usage as U

    tz = ZoneInfo("Pacific/Kiritimati")
    midnight = int(datetime(1975, 6, 1, tzinfo=tz).timestamp() * 1000)
    assert midnight % 900_000 != 0  # the day begins inside a quarter hour
    times = [midnight - 60_000, midnight + 60_000]
    data = b'{"role":"assistant","tokens":{"input":1,"output":2},"cost":0.5}'
    owner = {"ses_a": "ses_a"}
    quick, slow = U._Scan("day", owner, set(), set()), U._Scan("day", owner, set(), set())
    sids, stamps = json.dumps(["ses_a"] * 2).encode(), json.dumps(times).encode()
    assert quick.chunk(2, sids, stamps, b"\n".join([data, data]), 1, U._DayOf(tz)) == []
    slow.run([("ses_a", f"msg_{ms}", ms, data) for ms in times], U._DayOf(tz))
    days = [("ses_a", "1975-05-31"), ("ses_a", "1975-06-01")]
    assert sorted(quick.groups) == sorted(slow.groups) == days


# Rows that are each {…} yet not one message each: joined by commas into a JSON array they
# would decode to as many messages as rows (one message cut in two, two messages in one).
_REGROUPING_ROWS = [
    _WHOLE[:-1] + ',"x":[{"y":1}',
    '{"z":2}]}',
    _WHOLE + "," + _WHOLE,
]


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param([_WHOLE] * 3, id="messages"),
        pytest.param([_WHOLE, _with("cost", "1.5"), _WHOLE], id="one-of-another-kind"),
        pytest.param([_WHOLE, json.dumps(_ASSISTANT, indent=1), _WHOLE], id="a-raw-newline"),
        pytest.param([_WHOLE, " " + _WHOLE, _WHOLE + "\n"], id="not-braces"),
        pytest.param(_REGROUPING_ROWS, id="regrouping"),
        pytest.param([_WHOLE, *_REGROUPING_ROWS, _WHOLE], id="regrouping-among-messages"),
        # Not {…}: one call would read these three rows as three messages too.
        pytest.param(
            [_WHOLE[:-1] + ',"x":', "1}", _WHOLE + " " + _WHOLE], id="regrouping-unless-braces"
        ),
    ],
)
def test_a_chunk_decoded_in_one_call_is_summed_as_its_rows_are(rows: list[str]) -> None:
    """``_CHUNK_SQL`` joins a chunk's rows by newlines and says whether every row is {…};
    then all are decoded in one call. Whatever the rows, the chunk's sums (and the rows it
    leaves unread) are those of ``run``, row by row: the one call only when every row is
    one message, else the rows one by one, or the chunk left to ``run``."""
    import math

    from opencode_events.reports import usage as U

    if rows[0] == _REGROUPING_ROWS[0]:  # the reason for the test: commas would be fooled
        assert len(json.loads("[" + ",".join(rows) + "]")) == len(rows)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INT, data TEXT)")
    conn.executemany(
        "INSERT INTO message VALUES (?, 'ses_a', ?, ?)",
        [(f"msg_{i}", 1_000 + i, data) for i, data in enumerate(rows)],
    )
    n, *arrays = conn.execute(U._CHUNK_SQL, (0, 1 << 62)).fetchone()
    listed = conn.execute(U._ROWS_SQL, (0, 1 << 62)).fetchall()
    assert n == len(rows)
    owner = {"ses_a": "ses_a"}

    def sums(scan):
        return {
            key: [*acc[:6], acc[7], acc[8], math.fsum(acc[6]), sorted(acc[9])]
            for key, acc in scan.groups.items()
        }

    # a ledger's scans: the inferences' times are compared too
    quick, slow = (U._Scan("day", owner, set(), set(), ledger=True) for _ in range(2))
    if quick.chunk(n, *arrays, U._DayOf(None)) is None:
        quick.run(listed, U._DayOf(None))  # what _scan_rowids does then
    slow.run(listed, U._DayOf(None))
    assert sums(quick) == sums(slow)
    assert (quick.unread, quick.irregular) == (slow.unread, slow.irregular)
    assert arrays[-1] == (1 if all(r.startswith("{") and r.endswith("}") for r in rows) else 0)


def test_a_sessions_subagent_cost_is_written_as_a_sum_of_its_inferences(tmp_path: Path):
    """``--by session``: a row's subagent cost is its subagents' inferences' costs summed and
    written as a sum of that many (``summed_cost``), however the scan held them (a group's
    costs are put in a few terms of the same exact sum as a part of the table is done)."""
    import math

    from opencode_events.core.figures import summed_cost
    from opencode_events.reports.usage import stored_usage
    from opencode_events.store.sqlite import Store

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    costs = [0.123456789012345, 0.1, 0.2]
    conn = sqlite3.connect(db)
    ids = [
        mid
        for (mid,) in conn.execute(
            "SELECT m.id FROM message m JOIN session s ON s.id = m.session_id "
            "WHERE s.parent_id IS NOT NULL AND json_extract(m.data, '$.role') = 'assistant' "
            "ORDER BY m.rowid"
        )
    ]
    assert len(ids) == len(costs)
    for mid, cost in zip(ids, costs, strict=True):
        conn.execute(
            "UPDATE message SET data = json_set(data, '$.cost', ?) WHERE id = ?", (cost, mid)
        )
    conn.commit()
    conn.close()
    with Store(db) as store:
        report = stored_usage(store, all_sessions=True, by="session")
    (row,) = [r for r in report.rows if r.subagent_cost is not None]
    assert row.subagent_inferences == len(costs)
    assert row.subagent_cost == summed_cost(math.fsum(costs), len(costs)) != math.fsum(costs)


def _with_large_parts(tmp_path: Path) -> Path:
    """samples/task and a session of four other captures, with large parts (beyond a
    page: their output on overflow pages): bash calls whose output is 10 KB, read calls of
    10 KB cut short (no JSON past their head), the task call with 10 KB more in its
    metadata (it names the subagent's session), and a prompt of 10 KB."""
    from tests.test_cache import _copy_session, _sessions

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    pad = "x" * 10_000
    conn = sqlite3.connect(db)
    for name in ("parallel_tools", "mcp", "bash_fail", "reasoning"):
        src = sqlite3.connect(SAMPLES / name / "opencode.db")
        _copy_session(conn, src, _sessions(src)[0], logged=True)
        src.close()
    conn.execute(
        "UPDATE part SET data = json_set(data, '$.state.output', ?) "
        """WHERE data LIKE '{"type":"tool","tool":"bash",%'""",
        (pad,),
    )
    conn.execute(
        "UPDATE part SET data = substr(json_set(data, '$.state.output', ?), 1, 5000) "
        """WHERE data LIKE '{"type":"tool","tool":"read",%'""",
        (pad,),
    )
    conn.execute(
        "UPDATE part SET data = json_set(data, '$.state.metadata.pad', ?) "
        """WHERE data LIKE '{"type":"tool","tool":"task",%'""",
        (pad,),
    )
    conn.execute(
        "UPDATE part SET data = json_set(data, '$.text', json_extract(data, '$.text') || ?) "
        """WHERE rowid = (SELECT min(rowid) FROM part WHERE data LIKE '{"type":"text",%')""",
        (" " + pad,),
    )
    conn.commit()
    conn.close()
    return db


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_large_tool_part_counts_by_its_head_as_sessions_counts_it(tmp_path, monkeypatch, workers):
    """A tool part of 256 bytes or more that starts as OpenCode writes one is a call by its
    head (its output, most of the data, never decoded; in a worker, never read: apsw's
    blob handle reads its first page), as ``sessions`` counts it, a part cut short after
    its head included (docs/store.md's one limit); a subagent's call and code mode's are
    read whole. One process or workers: the same report, and the same calls as
    ``sessions``."""
    from opencode_events.reports import usage as usage_module
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.reports.usage import stored_usage
    from opencode_events.store.open import open_store

    db = _with_large_parts(tmp_path)
    cut = sql(db, """SELECT count(*) FROM part WHERE data LIKE '{"type":"tool","tool":"read",%'""")
    assert (
        cut[0][0]
        and not sql(db, "SELECT json_valid(data) FROM part WHERE length(data) = 5000")[0][0]
    )
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_SESSIONS", 2)
    shared = []
    share = usage_module.share_slices
    monkeypatch.setattr(
        usage_module, "share_slices", lambda *a, **k: shared.append(share(*a, **k)) or shared[-1]
    )
    with open_store(db) as store:
        report = stored_usage(store, all_sessions=True)
        sessions = sessions_report(store)
    assert (shared[0] is not None) is (workers == "2")  # read by workers, or by this process
    calls = sum(row.tool_calls or 0 for row in report.rows)
    assert calls == sum(s.tool_calls for s in sessions.sessions)
    tool_parts = sql(db, """SELECT count(*) FROM part WHERE data LIKE '{"type":"tool",%'""")
    assert calls >= tool_parts[0][0]  # every tool part a call (code mode's: and its script's)
    assert sum(row.subagent_sessions or 0 for row in report.rows) == 1  # the task call's
    assert any(row.prompt and row.prompt.startswith("please") for row in report.rows)


def test_turns_of_damaged_rows_read_by_workers_are_one_processs(tmp_path, monkeypatch):
    """A damaged row's odd value in a turn (a prompt created at ``true``, which the row
    keeps as it is) does not read back from MessagePack as a row: a worker then hands its
    rows over as they are, and the report is one process's."""
    from opencode_events.reports import usage as usage_module
    from opencode_events.reports.usage import stored_usage
    from opencode_events.store.open import open_store

    db = _with_large_parts(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE message SET data = json_set(data, '$.time.created', json('true')) "
            """WHERE rowid = (SELECT max(rowid) FROM message WHERE data LIKE '{"role":"user"%')"""
        )
    conn.close()
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_SESSIONS", 2)
    reports = []
    for workers in ("1", "2"):
        monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", workers)
        with open_store(db) as store:
            reports.append(msgspec.json.encode(stored_usage(store, all_sessions=True).document()))
    assert reports[0] == reports[1]
    assert b'"started":true' in reports[0]


_GROUP_COUNTS = st.integers(min_value=-(1 << 70), max_value=1 << 70) | st.just(0)
_GROUPS = st.tuples(
    st.lists(_GROUP_COUNTS | st.floats(allow_nan=False) | st.booleans(), min_size=7, max_size=7),
    st.lists(st.floats(allow_nan=True), max_size=5),
    st.none() | st.integers(min_value=-(1 << 64), max_value=1 << 64) | st.floats(allow_nan=False),
    st.lists(st.integers(min_value=0, max_value=1 << 40), max_size=2),
)


def _group_of(drawn: tuple) -> list[Any]:
    from array import array

    counts, costs, first, times = drawn
    return [*counts[:6], array("d", costs), counts[6], first, array("q", times)]


def _same_group(one: list[Any], other: list[Any]) -> bool:
    """Equal, and of the same types (a float 1.0 is not the integer 1), costs bit for bit."""
    return (
        [type(v) for v in one] == [type(v) for v in other]
        and [repr(v) for i, v in enumerate(one) if i != 6]  # NaN, -0.0: as written
        == [repr(v) for i, v in enumerate(other) if i != 6]
        and one[6].tobytes() == other[6].tobytes()
    )


@settings(max_examples=400, deadline=None)
@given(_GROUPS)
def test_a_group_packed_light_reads_back_as_it_was(drawn):
    """A lightened group (``_light``: a few dozen bytes, held per session and day by a
    report by session) reads back (``_sums``) exactly as it was: every count of its type,
    its costs bit for bit, its first time, whatever odd values a damaged store gave it (a
    count beyond 64 bits or not an integer, a first time of another type: kept as it is)."""
    from opencode_events.reports import usage as usage_module

    group = _group_of(drawn)
    packed = usage_module._light(group)
    if group[9]:  # times: never packed (a lightened group has none)
        assert packed is group
    read = usage_module._sums(packed)
    assert _same_group(read, group)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ses_a", "ses_b", "ses_c"]), st.sampled_from(["d1", "d2"]), _GROUPS
        ),
        max_size=8,
        unique_by=lambda item: item[:2],
    ),
    st.sampled_from(["session", "day"]),
)
def test_groups_folded_packed_are_the_groups_folded_as_lists(items, by):
    """``_fold_days`` of lightened groups, packed as a report holds them, makes the same
    report groups as of the same groups held as lists: a group alone is taken as it is,
    a second one unpacks it."""
    from opencode_events.reports import usage as usage_module

    owner = {"ses_a": "ses_a", "ses_b": "ses_a", "ses_c": "ses_c"}
    label = (lambda sid, day: owner[sid]) if by == "session" else (lambda sid, day: day)

    def groups(packed: bool) -> dict:
        made = {}
        for sid, day, drawn in items:
            group = _group_of(drawn)
            group[9] = group[9][:0]  # lightened: no times
            made[(sid, day)] = usage_module._light(group) if packed else group
        return made

    # The rule, as written out: each report group a new one, every group added to it.
    expected: dict = {}
    for (sid, day), group in groups(False).items():
        into = expected.get(label(sid, day))
        if into is None:
            into = expected[label(sid, day)] = usage_module._new_sums(None)
        usage_module._add_figures(into, group)
    for made in (groups(False), groups(True)):
        folded = usage_module._fold_days(made, label, {})
        assert not made  # each let go as it is folded
        assert list(folded) == list(expected)
        for key, group in expected.items():
            assert _same_group(usage_module._sums(folded[key]), group)


@settings(max_examples=300, deadline=None)
@given(_GROUPS)
def test_a_ledger_group_packed_at_once_is_the_group_added_to_a_new_one(drawn):
    """A report group folded from the ledger is packed as it is made where it can be
    (``_light_kept``): what it reads back as is the group ``_add_counts`` makes of a new
    one and the ledger's counts, first time and costs."""
    from array import array

    from opencode_events.reports import usage as usage_module

    counts, costs, first, _times = drawn
    expected = usage_module._new_sums(first)
    usage_module._add_counts(expected, counts, first, array("d", costs), usage_module._FOLDED_COSTS)
    packed = usage_module._light_kept(counts, first, array("d", costs))
    if packed is not None:
        assert _same_group(usage_module._sums(packed), expected)
    plain = all(type(n) is int and -(1 << 63) <= n < 1 << 63 for n in counts)
    if plain and (first is None or (type(first) is int and -(1 << 63) < first < 1 << 63)):
        assert packed is not None  # OpenCode's figures: always packed
    # else the group is made as a list, by the rule itself


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("scope", ["--all", "--session"])
def test_a_reply_dated_before_its_prompt_is_still_that_prompts(tmp_path, scope, cache):
    """A clock that went back an hour between a prompt and its reply: read in time order,
    the reply came before its prompt and made a turn of its own with no prompt (the turn
    it belongs to had none). Its ``parentID`` names its prompt: the same turns as before."""
    from tests.stores import with_a_reply_before_its_prompt

    db = tmp_path / "opencode.db"
    with_a_reply_before_its_prompt(db)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def turns(path: Path) -> list[tuple]:
        (sid,) = sqlite3.connect(path).execute("SELECT id FROM session").fetchone()
        args = [scope] if scope == "--all" else [scope, sid]
        command = [sys.executable, "-m", "opencode_events", "usage", "--db", str(path)]
        command += [*args, "--by", "turn", "--format", "json"]
        if not cache:
            command.append("--no-cache")
        result = subprocess.run(command, capture_output=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["rows"]
        return [(r["turn"], r["prompt"], r["inferences"], r["cost"]) for r in rows]

    assert turns(db) == turns(SAMPLES / "continue3" / "opencode.db")
    assert len(turns(db)) == 3


@pytest.mark.parametrize(
    ("created", "shown"),
    [
        ("0", "1970-01-01 00:00"),  # a time of 0 is a time, not the total row's label
        ("time_created + 0.5", "-"),  # a REAL time is none to the step (the day has it)
    ],
)
def test_a_step_with_an_odd_row_time_is_neither_the_total_nor_in_flight(tmp_path, created, shown):
    """``--by step`` labelled a row whose time was 0 or no integer "total", and took a
    completed reply with no usable row time for one in flight (``stale``)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute(
            f"UPDATE message SET time_created = {created} "
            "WHERE json_extract(data, '$.role') = 'assistant'"
        )
    conn.close()
    base = [sys.executable, "-m", "opencode_events", "usage", "--db", str(db), "--all"]
    base += ["--by", "step", "--no-cache", "--tz", "UTC", "--format"]
    result = subprocess.run([*base, "json"], capture_output=True, timeout=60)
    (row,) = json.loads(result.stdout)["rows"]
    assert "stale" not in row and not row.get("open")
    table = subprocess.run([*base, "table"], capture_output=True, timeout=60).stdout.decode()
    labels = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    assert labels == [shown, "total"], table


def test_a_chain_of_replies_dated_before_their_parents_loses_none(tmp_path):
    """A reply held for the later row its parentID names is released when that row is read;
    a reply held behind a held reply (its parentID another reply, older still) was never
    released: an inference left out of the turns, silently."""
    db = tmp_path / "opencode.db"
    prompt, first = with_a_reply_before_its_prompt(db)  # the first reply, an hour back
    with sqlite3.connect(db) as conn:
        (second,) = conn.execute(
            "SELECT id FROM message WHERE json_extract(data, '$.parentID') = ? AND id != ?",
            (prompt, first),
        ).fetchone()
        conn.execute(  # older than the first, its parent the first
            "UPDATE message SET time_created = (SELECT time_created - 1000 FROM message "
            "WHERE id = ?), data = json_set(data, '$.parentID', ?) WHERE id = ?",
            (first, first, second),
        )
    conn.close()

    def total(path: Path, by: str) -> tuple:
        command = [sys.executable, "-m", "opencode_events", "usage", "--db", str(path), "--all"]
        result = subprocess.run(
            [*command, "--by", by, "--format", "json", "--no-cache"], capture_output=True
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        rows = report["rows"]
        return sum(r["inferences"] for r in rows if "inferences" in r) or len(rows), report[
            "total"
        ]["cost"]

    whole = total(SAMPLES / "continue3" / "opencode.db", "turn")
    assert total(db, "turn") == whole
    assert total(db, "step")[1] == pytest.approx(whole[1])


@pytest.mark.parametrize(
    "title", ["a|b", "a\\|b", "C:\\path\\", "\\\\|", "ends with \\", "x\r\ny|z\n"]
)
def test_markdown_keeps_a_cell_whole_whatever_its_backslashes_and_pipes(title):
    """GFM splits a row at each `|` that is not escaped, a backslash escaping the character
    after it (`\\\\` included, cmark-gfm's scan_table_cell): a title's own `\\|` written as
    `\\\\|` ended the cell there. Read back as GFM reads it, the cell is the title (its line
    ends made spaces)."""
    from opencode_events.output.rows import markdown_pieces

    written = b"".join(markdown_pieces([{"title": title}], ["title"])).decode()
    row = written.splitlines()[2]
    cells = re.findall(r"(?:\\.|[^|\\])+", row.strip().strip("|"))
    assert len(cells) == 1, row
    shown = re.sub(r"\\(.)", r"\1", cells[0].strip())
    assert shown == title.replace("\r\n", " ").replace("\n", " ").strip()
