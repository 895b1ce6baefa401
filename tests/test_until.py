"""``--until WHEN`` on ``usage`` and ``sessions``, as ccusage users type it (issue 20, item
10): the parser of ``--since``, a date meaning through the end of that day in the report's
time zone; in ``usage`` the inferences made by then, in ``sessions`` the sessions begun by
then. Checked on real captures: the spend up to a time and the spend after it add up to the
whole, in every grouping.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from opencode_events import open_store, sessions_report, usage_report
from opencode_events.core.timeutil import parse_since, parse_until

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
KIRITIMATI = ZoneInfo("Pacific/Kiritimati")  # UTC+14: a date there ends long before UTC's


def run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "opencode_events", *args]
    return subprocess.run(command, capture_output=True, timeout=120)


def usage(*args: str) -> dict:
    result = run("usage", *args, "--format", "json", "--no-cache")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "zone", "last_ms"),
    [
        ("2026-11-30", UTC, _ms("2026-12-01T00:00:00+00:00") - 1),  # through the whole day
        ("20261130", UTC, _ms("2026-12-01T00:00:00+00:00") - 1),  # ccusage's spelling
        ("2026-11-30", KIRITIMATI, _ms("2026-12-01T00:00:00+14:00") - 1),  # in --tz
        ("2026-03-08", ZoneInfo("America/New_York"), _ms("2026-03-09T00:00:00-04:00") - 1),
        ("2026-11-30T12:00", UTC, _ms("2026-11-30T12:00:00+00:00")),  # a moment: itself
        ("2026-11-30T12:00+01:00", KIRITIMATI, _ms("2026-11-30T11:00:00+00:00")),
        ("9999-12-31", UTC, 2**62),  # no day after it: through the end of time
    ],
)
def test_until_reads_a_date_as_the_end_of_that_day(text, zone, last_ms):
    assert parse_until(text, tz=zone) == last_ms


def test_until_reads_a_duration_as_since_does():
    assert parse_until("2h", now=10_000.0) == parse_since("2h", now=10_000.0) == 2_800_000


@pytest.mark.parametrize("text", ["2026-13-40", "yesterday", "2026-11-30T25:00"])
def test_an_unreadable_until_is_a_usage_error(text):
    with pytest.raises(ValueError):
        parse_until(text, tz=UTC)
    for command in ("usage", "sessions"):
        result = run(command, "--db", str(SAMPLES / "task" / "opencode.db"), "--until", text)
        assert result.returncode == 2 and result.stdout == b""
        assert result.stderr.startswith(b"error: Invalid value for --until: cannot read")


@pytest.mark.parametrize("form", ["json", "table"])  # json: the quick path; table: click's
@pytest.mark.parametrize("command", ["usage", "sessions"])
def test_a_window_that_ends_before_it_begins_is_a_usage_error(command, form):
    db = str(SAMPLES / "task" / "opencode.db")
    args = ["--since", "2026-12-01", "--until", "2026-11-01", "--format", form]
    result = run(command, "--db", db, *args)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode().startswith(
        "error: --since 2026-12-01 is after --until 2026-11-01: no time between them"
    )
    same_day = run(command, "--db", db, "--since", "2026-11-30", "--until", "2026-11-30")
    assert same_day.returncode == 0, same_day.stderr  # a day is a window of its own


def _message_times(sample: str) -> list[int]:
    db = SAMPLES / sample / "opencode.db"
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        return sorted(t for (t,) in conn.execute("SELECT time_created FROM message"))
    finally:
        conn.close()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


FIGURES = ("input_tokens", "output_tokens", "cache_read_tokens", "total_tokens")


@pytest.mark.parametrize("by", ["turn", "step", "session", "day", "model"])
@pytest.mark.parametrize("sample", ["task", "command_subtask", "fork"])
def test_the_spend_until_a_time_and_since_the_next_add_up_to_the_whole(sample, by):
    times = _message_times(sample)
    with open_store(SAMPLES / sample / "opencode.db") as store:

        def total(**window):
            return usage_report(store=store, by=by, **window).total

        whole = total(all_sessions=True)
        for cut in times[1::2]:  # at a message's own time: it counts up to the cut, inclusive
            until = total(until=cut)  # the sessions begun by then
            assert total(all_sessions=True, until=cut) == until
            since = total(since=cut + 1)
            for name in FIGURES:
                assert getattr(until, name) + getattr(since, name) == getattr(whole, name)
            assert until.cost + since.cost == pytest.approx(whole.cost, rel=1e-9)
            if whole.inferences is not None:
                assert until.inferences + since.inferences == whole.inferences


@pytest.mark.parametrize("by", ["turn", "session", "day"])
@pytest.mark.parametrize("made", ["fork_alone", "reply_before_prompt"])
def test_the_halves_add_up_where_messages_are_older_than_their_session(tmp_path, made, by):
    """Sessions were chosen by their row (``--until``: created by then; ``--since``: updated
    since), so a message dated outside that fell out of both halves: a fork whose original
    was deleted (its copied history keeps the original's times, older than the fork's row),
    a clock that went back. Cut at each message's time, as above."""
    from tests.stores import with_a_reply_before_its_prompt, with_the_original_deleted

    db = tmp_path / "opencode.db"
    if made == "fork_alone":
        with_the_original_deleted(db)
    else:
        with_a_reply_before_its_prompt(db)
    conn = sqlite3.connect(db)
    times = sorted(t for (t,) in conn.execute("SELECT time_created FROM message"))
    conn.close()
    with open_store(db) as store:

        def total(**window):
            return usage_report(store=store, by=by, **window).total

        whole = total(all_sessions=True)
        for cut in times:
            until, since = total(until=cut), total(since=cut + 1)
            assert until.total_tokens + since.total_tokens == whole.total_tokens, cut
            assert until.cost + since.cost == pytest.approx(whole.cost, rel=1e-9)


def test_every_grouping_has_the_same_total_until_a_time():
    db = str(SAMPLES / "task" / "opencode.db")
    cut = _iso(_message_times("task")[4])  # inside the subagent's run
    totals = [
        usage("--db", db, "--until", cut, "--by", by)["total"]
        for by in ("turn", "step", "session", "day", "model", "agent")
    ]
    assert {t["total_tokens"] for t in totals} == {totals[0]["total_tokens"]}
    assert 0 < totals[0]["total_tokens"] < usage("--db", db, "--all")["total"]["total_tokens"]
    (turn,) = usage("--db", db, "--until", cut)["rows"]
    assert turn["subagent_inferences"] == 2  # two of the subagent's three steps by then


def test_a_date_until_covers_its_whole_day_in_the_report_zone():
    db = str(SAMPLES / "task" / "opencode.db")  # its messages: 2026-11-29 15:41 UTC
    whole = usage("--db", db, "--all")["total"]
    assert usage("--db", db, "--until", "2026-11-29", "--tz", "UTC")["total"] == whole
    assert usage("--db", db, "--until", "20261129", "-z", "UTC")["total"] == whole
    # in UTC+14 it is already the 30th: nothing by the end of the 29th there
    early = usage("--db", db, "--until", "2026-11-29", "--tz", "Pacific/Kiritimati")
    assert early["rows"] == [] and early["total"]["cost"] == 0


def test_sessions_until_keeps_the_sessions_begun_by_then():
    db = str(SAMPLES / "fork" / "opencode.db")  # the original, then its fork 3 s later
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    (first, created), (fork, _) = conn.execute(
        "SELECT id, time_created FROM session ORDER BY time_created"
    ).fetchall()
    conn.close()
    listed = run("sessions", "--db", db, "--until", _iso(created), "-j", "--no-cache")
    assert [s["id"] for s in json.loads(listed.stdout)] == [first]
    both = run("sessions", "--db", db, "--until", "2026-11-29", "-j", "--no-cache")
    assert {s["id"] for s in json.loads(both.stdout)} == {first, fork}
    with open_store(db) as store:
        api = sessions_report(store, until=_iso(created)).document()
        assert [s["id"] for s in api] == [first]
        report = usage_report(store=store, all_sessions=True, until=_iso(created))
        assert report.total.total_tokens == 0  # the original's first reply came later


def test_until_alone_chooses_the_stored_sessions():
    """As --since does: `usage --until DATE` reads the store, every session begun by then."""
    db = str(SAMPLES / "fork" / "opencode.db")
    chosen = usage("--db", db, "--until", "2026-11-29", "--by", "session", "-z", "UTC")
    assert len(chosen["rows"]) == 2


def test_until_cuts_what_a_pending_undo_undid_as_it_cuts_the_rest():
    """samples/serve_revert: an /undo pending over the second turn's 2 steps. Until the
    first turn's end, nothing undone is counted, so none is said."""
    db = str(SAMPLES / "serve_revert" / "opencode.db")
    whole = usage("--db", db, "--last")
    assert whole["total"]["undone_inferences"] == 2
    times = _message_times("serve_revert")
    first = usage("--db", db, "--last", "--until", _iso(times[2]))  # the first turn's replies
    assert first["total"]["inferences"] == 2
    assert "undone_inferences" not in first["total"] and "notes" not in first
    one = usage("--db", db, "--last", "--until", _iso(times[4]))  # one undone step by then
    assert (one["total"]["inferences"], one["total"]["undone_inferences"]) == (3, 1)


@pytest.mark.parametrize("by", ["turn", "session", "day", "step"])
def test_all_with_since_is_the_window_as_all_with_until_is(by):
    """ccusage's users write `--all --since`: a window of every session, as `--all --until`
    is; the same report as `--since` alone (it was refused)."""
    db = str(SAMPLES / "continue3" / "opencode.db")
    times = sorted(
        row["started"]
        for row in usage("--db", db, "--all", "--by", "step", "-z", "UTC")["rows"]
        if row.get("started")
    )
    middle = datetime.fromtimestamp(times[len(times) // 2] / 1000, UTC)
    window = ("--since", middle.isoformat(timespec="milliseconds"), "--by", by, "-z", "UTC")
    with_all = usage("--db", db, "--all", *window)
    assert with_all == usage("--db", db, *window)
    counted = with_all["total"].get("inferences", len(with_all["rows"]))  # by step: its rows
    assert 0 < counted < len(times)
