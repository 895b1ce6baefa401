"""Times people read and type: damaged times never stop a table."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from opencode_events.core.timeutil import format_time, parse_since

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (1_795_966_865_470, "2026-11-29 15:41"),
        (0, "1970-01-01 00:00"),
        (1.5e12, "2017-07-14 02:40"),
        (None, "-"),
        ("12x", "-"),
        (True, "-"),
        (10**17, "?"),  # beyond year 9999
        (-(10**17), "?"),
        (float("inf"), "?"),
        (float("nan"), "?"),
    ],
)
def test_format_time(ms, shown):
    assert format_time(ms, UTC) == shown


@pytest.mark.parametrize("by", ["step", "session", "turn"])
def test_a_table_with_a_time_out_of_range(tmp_path: Path, by: str):
    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "file_tools" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE message SET time_created = ? WHERE rowid = (SELECT max(rowid) FROM message)",
        (10**17,),
    )
    conn.commit()
    conn.close()
    args = ["usage", "--db", str(db), "--format", "table", "--by", by, "--tz", "UTC"]
    if by != "turn":
        args.append("--all")
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", *args], capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr


def test_a_duration_longer_than_any_time_means_everything():
    assert parse_since("9999999999999999d", now=1_000) == -(2**62)
    assert parse_since("9" * 400 + "w", now=1_000) == -(2**62)  # beyond a float: inf


def test_the_first_and_last_dates_python_knows_are_before_and_after_everything():
    # 0001-01-01 local time in a zone ahead of UTC is in year 0, which Python cannot hold.
    db = Path(__file__).resolve().parent.parent / "samples" / "task" / "opencode.db"
    env = {**os.environ, "TZ": "Pacific/Kiritimati"}  # UTC+14
    for since, rows in (("0001-01-01", 1), ("9999-12-31", 0)):
        result = subprocess.run(
            [sys.executable, "-m", "opencode_events", "sessions", "--db", str(db)]
            + ["--since", since, "--format", "json"],
            capture_output=True,
            env=env,
        )
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)) == rows


# A day whose midnight the clocks skip: the Azores (EU rules, UTC-1) go to summer time at
# 00:00 local on 2026-03-29 (01:00 UTC), so that day begins at 01:00 local, 01:00 UTC.
# astimezone() read the skipped 00:00 an hour back, in the day before; zoneinfo and a naive
# timestamp() read it with the offset before the change: the moment the clocks jump.
AZORES_DAY = 1774746000000  # 2026-03-29T01:00:00Z
AZORES_MONDAY = 1774227600000  # 2026-03-23T00:00:00-01:00


@pytest.fixture
def local_azores(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Atlantic/Azores")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("zone", ["local", "tz"])
def test_a_date_whose_midnight_was_skipped_begins_when_the_clocks_jump(local_azores, zone):
    from datetime import date
    from zoneinfo import ZoneInfo

    from opencode_events._api import _since_ms
    from opencode_events.reports.statusline import day_bounds
    from opencode_events.reports.top import week_start

    tz = ZoneInfo("Atlantic/Azores") if zone == "tz" else None
    assert parse_since("2026-03-29", tz=tz) == AZORES_DAY
    assert _since_ms(date(2026, 3, 29), tz) == AZORES_DAY
    noon = AZORES_DAY + 12 * 3_600_000
    assert day_bounds(noon, tz) == (AZORES_DAY, AZORES_DAY + 23 * 3_600_000)
    assert day_bounds(AZORES_DAY - 1, tz) == (AZORES_DAY - 24 * 3_600_000, AZORES_DAY)
    assert week_start(noon, tz) == AZORES_MONDAY  # Monday's midnight, not its 01:00
