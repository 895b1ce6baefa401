"""Bad input of every kind: one ``error:`` line and exit 2, or a warning and reading goes on;
never a traceback, never output that is not valid UTF-8 JSON (issue 23)."""

from __future__ import annotations

import importlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from opencode_events.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]


def run(*args: str, stdin: bytes = b"", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, timeout=120, cwd=ROOT, env=env
    )


# ---------------------------------------------------------------- damaged databases

STORE_COMMANDS = [
    ["import", "--all"],
    ["sessions", "--all"],
    ["usage", "--all"],
    ["usage", "--all", "--by", "turn"],
    ["context"],
]


def _with_schema_byte(tmp_path: Path, offset: int, value: int) -> Path:
    """A copy of a real store with one byte of its first CREATE TABLE changed."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "file_tools" / "opencode.db", db)
    data = bytearray(db.read_bytes())
    data[data.index(b"CREATE TABLE") + offset] = value
    db.write_bytes(bytes(data))
    return db


@pytest.mark.parametrize("args", STORE_COMMANDS, ids=lambda a: " ".join(a))
def test_a_schema_byte_that_is_not_utf8_is_one_error_line(tmp_path: Path, args):
    # SQLite's message quotes the broken SQL; Python's sqlite3 then raises
    # UnicodeDecodeError, not sqlite3.Error.
    db = _with_schema_byte(tmp_path, 12, 0xD2)
    with pytest.raises(UnicodeDecodeError):
        sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True).execute(
            "SELECT count(*) FROM sqlite_master"
        ).fetchone()
    result = run(*args, "--db", str(db))
    assert result.returncode == 2, result.stderr.decode()
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "not a readable SQLite database" in lines[0]
    assert "\ufffd" in lines[0]  # the damaged byte shown as such, the message kept


def test_apsw_text_that_is_not_utf8_is_an_input_error(tmp_path: Path):
    from opencode_events.store import fastscan

    if not fastscan.available():
        pytest.skip("apsw with SQLite 3.43 or newer is not installed")
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "file_tools" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE part SET session_id = CAST(x'73ff' AS TEXT)")
    uri = f"{db.as_uri()}?immutable=1"
    with pytest.raises(InputError, match="not UTF-8"), fastscan.connect(uri, "part") as conn:
        list(fastscan.PartRange(conn, 0, 1 << 40).tool_part_batches(None))


def test_a_database_error_no_reader_caught_is_still_one_line(monkeypatch, capsys):
    main = importlib.import_module("opencode_events.cli.main")

    def fail(*args, **kwargs):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr("opencode_events.store.open.open_store", fail)
    code = main.run(main.cli, ["sessions", "--db", str(SAMPLES / "text" / "opencode.db")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "error: cannot read the database: database disk image is malformed\n"
