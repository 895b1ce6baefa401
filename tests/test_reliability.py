"""Bad input of every kind: one ``error:`` line and exit 2, or a warning and reading goes on;
never a traceback, never output that is not valid UTF-8 JSON (issue 23)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_memory_error_is_one_line(monkeypatch, capsys):
    main = importlib.import_module("opencode_events.cli.main")
    import opencode_events.pipeline.normalize as pipeline

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(pipeline, "normalize_streams", exhausted)
    code = main.run(main.cli, ["normalize", str(SAMPLES / "text" / "stream.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: out of memory") and err.count("\n") == 1


# ---------------------------------------------------------------- the longest line


class _Chunks:
    """A stream that hands over ``data`` ``size`` bytes at a time, as a pipe does."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def read(self, n: int = -1) -> bytes:
        piece = self.data[self.at : self.at + min(n, self.size)]
        self.at += len(piece)
        return piece


def _expected_lines(data: bytes, limit: int) -> list:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    keep = min(1024, limit)  # an overlong line's start: 1 KiB, or the limit if less
    return [("long", line[:keep], len(line)) if len(line) > limit else line for line in lines]


def _lines_read(data: bytes, chunk: int, limit: int) -> list:
    from opencode_events.sources.stream import OverlongLine, line_batches

    found: list = []
    for batch in line_batches(_Chunks(data, chunk), chunk_size=chunk, max_line=limit):
        if type(batch) is OverlongLine:
            assert batch == [b""]  # a loop that does not look sees one blank line
            found.append(("long", batch.start, batch.length))
        else:
            found += batch
    return found


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize(
    "data",
    [
        b"short\n" + b"x" * 300 + b"\nafter\n",
        b"y" * 5000 + b"\n",  # the first line
        b"a\n" + b"z" * 3000,  # the last, without a newline
        b"\n".join([b"q" * 101] * 5) + b"\n",  # one after another
        b"w" * 100 + b"\n",  # at the limit exactly: kept
    ],
    ids=["middle", "first", "last-unended", "several", "at-limit"],
)
def test_a_line_over_the_limit_is_measured_not_kept(data: bytes, chunk: int):
    assert _lines_read(data, chunk, 100) == _expected_lines(data, 100)


def test_lines_over_the_limit_property():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(
        st.lists(st.integers(0, 300), max_size=12),
        st.integers(1, 400),
        st.integers(1, 200),
        st.booleans(),
    )
    def check(lengths, chunk, limit, ended):
        data = b"\n".join(bytes([97 + i % 26]) * n for i, n in enumerate(lengths))
        if ended and data:
            data += b"\n"
        assert _lines_read(data, chunk, limit) == _expected_lines(data, limit)

    check()


def _jsonl(data: bytes) -> list[dict]:
    import json

    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def test_normalize_warns_of_a_line_over_the_limit_and_reads_on():
    text = (SAMPLES / "text" / "stream.jsonl").read_bytes()
    stdin = b"x" * 5000 + b"\n" + text
    result = run("normalize", "--max-line", "4K", stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    events = _jsonl(result.stdout)
    first = events[0]
    assert first["kind"] == "warning" and first["line"] == 1
    assert "5,000 bytes" in first["message"] and "4,096" in first["message"]
    assert first["text"] == "x" * 1024
    # the rest is read as it would be alone, one line further down
    alone = _jsonl(run("normalize", stdin=text).stdout)
    assert [e["kind"] for e in events[1:-1]] == [e["kind"] for e in alone[:-1]]
    assert [e.get("line") for e in events[1:-1]] == [e["line"] + 1 for e in alone[:-1]]
    assert events[-1]["records"] == alone[-1]["records"] + 1


def test_the_limit_comes_from_the_environment_too():
    import os

    env = {**os.environ, "OPENCODE_EVENTS_MAX_LINE": "64"}
    result = run("normalize", stdin=b'{"type":"x","pad":"' + b"p" * 100 + b'"}\n', env=env)
    assert _jsonl(result.stdout)[0]["kind"] == "warning"
    bad = run("normalize", stdin=b"{}\n", env={**env, "OPENCODE_EVENTS_MAX_LINE": "lots"})
    assert bad.returncode == 2 and bad.stderr.startswith(b"error: OPENCODE_EVENTS_MAX_LINE")


def test_an_input_line_that_never_ends_is_one_warning():
    # /dev/zero, cut short: 24 MB and no newline, read with a 1 MiB limit
    result = run("normalize", "--max-line", "1M", stdin=b"\0" * (24 << 20))
    assert result.returncode == 0, result.stderr.decode()
    warning, metrics = _jsonl(result.stdout)
    assert warning["kind"] == "warning" and f"{24 << 20:,} bytes" in warning["message"]
    assert metrics["records"] == 1


def test_a_server_event_over_the_limit_is_one_warning():
    frame = b"data: " + b'{"type":"x","properties":{}}' + b"\n"
    stdin = frame + b"\n" + b"".join([b"data: " + b"d" * 60 + b"\n"] * 10) + b"\n" + frame + b"\n"
    result = run("normalize", "--max-line", "200", stdin=stdin)
    events = _jsonl(result.stdout)
    kinds = [e["kind"] for e in events]
    assert kinds == ["unknown", "warning", "unknown", "metrics"], events
    assert events[1]["line"] == 3 and "server event of" in events[1]["message"]


# ---------------------------------------------------------------- valid UTF-8 JSON out


def _strict_events(data: bytes) -> list[dict]:
    """Every line as a strict reader takes it: UTF-8 (no surrogates), then JSON."""
    import json

    text = data.decode("utf-8")  # raises on a byte that is not UTF-8
    return [json.loads(line) for line in text.splitlines()]


def _repairs(events: list[dict]) -> list[dict]:
    from opencode_events.core.normalizer import REPAIRED_RAW

    return [e for e in events if e["kind"] == "warning" and e["message"] == REPAIRED_RAW]


BAD_BYTES = [b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf"]  # lone, cut, surrogate, overlong


@pytest.mark.parametrize("bad", BAD_BYTES, ids=["ff", "cut", "surrogate", "overlong"])
@pytest.mark.parametrize(
    ("stdin", "args", "kind"),
    [
        (b'{"type":"x","k":"%s"}\n', [], "unknown"),
        (b'{"type":"text","part":{"type":"text","text":"hi","k":"%s"}}\n', ["--raw"], "message"),
        (b'data: {"type":"x","properties":{"k":"%s"}}\n\n', [], "unknown"),
        (b'{"kind":"unknown","seq":0,"type":"x","raw":{"k":"%s"}}\n', [], "unknown"),
    ],
    ids=["stream-unknown", "stream-raw", "server-event", "events-again"],
)
def test_bytes_that_are_not_utf8_in_raw_are_replaced_and_said(stdin, args, kind, bad):
    result = run("normalize", *args, stdin=stdin.replace(b"%s", bad))
    assert result.returncode == 0, result.stderr.decode()
    events = _strict_events(result.stdout)
    warning, event = events[0], events[1]
    assert _repairs(events) == [warning] and warning["line"] == 1
    assert event["kind"] == kind and "\ufffd" in str(event["raw"])
    assert events[-1]["counts"]["warning"] == 1
    strict = run("normalize", *args, "--strict", stdin=stdin.replace(b"%s", bad))
    assert strict.returncode == 1  # a damaged record is a problem --strict reports


def test_valid_utf8_in_raw_is_kept_as_it_is():
    stdin = '{"type":"x","k":"é—😀"}\n'.encode()
    events = _strict_events(run("normalize", stdin=stdin).stdout)
    assert events[0]["raw"] == {"type": "x", "k": "é—😀"} and not _repairs(events)


def test_store_data_that_is_not_utf8_is_replaced_in_raw(tmp_path: Path):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT rowid, CAST(data AS BLOB) FROM part").fetchall()
        for rowid, data in rows:
            damaged = data[:-1] + b',"zz":"\xff"}'
            conn.execute("UPDATE part SET data = ? WHERE rowid = ?", (damaged, rowid))
    result = run("import", "--all", "--raw", "--db", str(db))
    assert result.returncode == 0, result.stderr.decode()
    events = _strict_events(result.stdout)
    with_raw = [e for e in events if "raw" in e and e.get("part_id")]
    assert with_raw and all(e["raw"]["zz"] == "\ufffd" for e in with_raw)
    assert len(_repairs(events)) == len({e["part_id"] for e in with_raw})


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("line", [b"{}", b"x", b'{"type":"step_start"}'])
def test_a_read_of_short_lines_is_handed_on_in_slices(line: bytes):
    from opencode_events.sources.stream import line_batches

    data = (line + b"\n") * ((3 << 20) // (len(line) + 1)) + b"end"
    batches = list(line_batches(_Chunks(data, 1 << 20), chunk_size=1 << 20))
    assert [x for batch in batches for x in batch] == data.split(b"\n")
    # each batch (and so each round of events) is a slice of a read, not the whole read
    assert max(len(batch) for batch in batches) <= (80 << 10) // (len(line) + 1)


def test_a_read_of_long_lines_is_one_batch():
    from opencode_events.sources.stream import line_batches

    data = (b"r" * 2000 + b"\n") * 500
    batches = list(line_batches(_Chunks(data, 1 << 20), chunk_size=1 << 20))
    assert len(batches) == 1 and batches[0] == data.split(b"\n")[:-1]


@pytest.mark.parametrize("by", ["turn", "step", "session", "day"])
def test_usage_of_a_stream_written_as_read_is_the_report_written_whole(by: str):
    import io

    from opencode_events.output.rows import csv_pieces, json_pieces, write_csv, write_json
    from opencode_events.reports.usage import StreamUsage, stream_usage

    streams = sorted(SAMPLES.glob("*/stream.jsonl"))
    data = b"".join(path.read_bytes() for path in streams) + b'{"type":"step_start"}\nnope\n'

    def opened():
        return [("-", io.BytesIO(data))]

    report = stream_usage(opened(), by=by)
    assert report.rows and report.notes  # an open row and an unread line among them
    usage = StreamUsage(opened(), by=by)
    rows = (row.as_dict() for row in usage.rows())

    def rest():
        return {"total": usage.total.as_dict(), "notes": usage.notes}

    assert b"".join(json_pieces("rows", rows, rest)) == write_json(report.document())
    usage = StreamUsage(opened(), by=by)
    pieces = list(csv_pieces((r.as_dict() for r in usage.rows()), usage.columns, every=2))
    assert b"".join(pieces) == write_csv([r.as_dict() for r in report.rows], report.columns)
    assert len(pieces) > 1 or len(report.rows) < 2


def test_json_pieces_of_nothing_is_the_empty_document():
    from opencode_events.output.rows import json_pieces, write_json

    assert b"".join(json_pieces("rows", [], lambda: {"total": {}})) == write_json(
        {"rows": [], "total": {}}
    )


@pytest.mark.parametrize("shape", ["document", "list", "lines"])
def test_a_report_cut_short_by_an_error_is_never_closed_as_if_whole(shape: str):
    """Rows written as they are made, then the database fails (a damaged page): what went
    out is whole rows, and a JSON document or list is left open, so that no JSON reader
    takes a part of the report for all of it (the command then says the error, exit 2);
    JSON Lines keep every line whole."""
    from opencode_events.output.rows import json_list_pieces, json_pieces, jsonl_pieces

    def rows():
        yield from ({"turn": n} for n in range(5))
        raise InputError("cannot read opencode.db: database disk image is malformed")

    pieces = {
        "document": lambda: json_pieces("rows", rows(), lambda: {"total": {}}, 2),
        "list": lambda: json_list_pieces(rows(), 2),
        "lines": lambda: jsonl_pieces(rows(), 2),
    }[shape]()
    written = bytearray()
    with pytest.raises(InputError):
        for piece in pieces:
            written += piece
    assert written  # the rows before the damage went out
    if shape == "lines":
        lines = bytes(written).splitlines()
        assert [msgspec.json.decode(line) for line in lines] == [{"turn": n} for n in range(4)]
    else:
        with pytest.raises(msgspec.DecodeError):
            msgspec.json.decode(bytes(written))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON_VALUES, max_size=12), st.integers(min_value=1, max_value=5))
def test_a_list_written_in_pieces_is_the_list_written_whole(items, batch):
    from opencode_events.output.rows import (
        json_list_pieces,
        jsonl_pieces,
        write_json,
        write_jsonl,
    )

    assert b"".join(json_list_pieces(items, batch)) == write_json(items)
    assert b"".join(json_list_pieces(iter(items), batch)) == write_json(items)  # as they come
    assert b"".join(jsonl_pieces(items, batch)) == write_jsonl(items)
    assert b"".join(jsonl_pieces(iter(items), batch)) == write_jsonl(items)  # as they come


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_JSON_VALUES, max_size=12)
    | st.lists(st.dictionaries(st.text(), _JSON_VALUES, min_size=1, max_size=3), max_size=12),
    st.integers(min_value=1, max_value=5),
)
def test_a_list_form_says_where_each_item_lies(items, batch):
    """``ListForm.pieces`` writes what ``write_json`` / ``write_jsonl`` write, and where it
    says an item lies are that item's bytes as ``item`` writes it alone; a list of objects
    (a report's rows) always has its items told apart, anything else may not."""
    from opencode_events.output.rows import JSON_LINES, JSON_LIST, write_json, write_jsonl

    for form, whole in ((JSON_LIST, write_json(items)), (JSON_LINES, write_jsonl(items))):
        written, spans = b"", []
        for piece, where in form.pieces(iter(items), batch):
            if where is None or spans is None:
                spans = None
            else:
                spans += [len(written) + at for at in where]
            written += piece
        assert written == whole
        if form is JSON_LINES or all(type(item) is dict and item for item in items):
            assert spans is not None
        if spans is not None:
            lying = [written[spans[i] : spans[i + 1]] for i in range(0, len(spans), 2)]
            assert lying == [form.item(item) for item in items]
            assert written == (
                form.head + form.between.join(lying) + form.tail if items else form.empty
            )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_JSON_VALUES, max_size=12),
    st.dictionaries(st.text(), _JSON_VALUES, max_size=3),
    st.integers(min_value=1, max_value=5),
)
def test_a_document_written_in_pieces_is_the_document_written_whole(items, rest, batch):
    from opencode_events.output.rows import json_pieces, write_json

    rest.pop("rows", None)
    whole = write_json({"rows": items, **rest})
    assert b"".join(json_pieces("rows", iter(items), lambda: rest, batch)) == whole


def test_sessions_written_in_pieces_are_the_sessions_written_whole():
    from opencode_events.output.rows import json_list_pieces, write_json
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.store.open import open_store

    summaries = []
    for db in sorted(SAMPLES.glob("*/opencode.db")):
        with open_store(str(db)) as store:
            summaries += sessions_report(store, all_sessions=True).sessions
    assert len(summaries) > 20
    pieces = list(json_list_pieces(summaries, 7))
    assert len(pieces) > 3 and b"".join(pieces) == write_json(summaries)


# ---------------------------------------------------------------- CSV and the terminal


def _titled(tmp_path: Path, title: str) -> Path:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET title = ?", (title,))
    return db


def _csv_rows(data: bytes) -> list[dict]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))


@pytest.mark.parametrize(
    "title",
    ['=HYPERLINK("http://evil.example","x")', "+1+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx"],
)
def test_csv_cells_a_spreadsheet_would_run_start_with_a_quote(tmp_path: Path, title: str):
    db = _titled(tmp_path, title)
    result = run("sessions", "--all", "--format", "csv", "--db", str(db))
    assert result.returncode == 0, result.stderr.decode()
    (row,) = _csv_rows(result.stdout)
    assert row["title"] == "'" + title
    assert not row["cost"].startswith("'")  # numbers are numbers
    raw = run("sessions", "--all", "--format", "csv", "--csv-raw", "--db", str(db))
    assert _csv_rows(raw.stdout)[0]["title"] == title


def test_csv_cells_of_plain_text_are_as_they_are(tmp_path: Path):
    db = _titled(tmp_path, "fix the build = green")
    (row,) = _csv_rows(run("sessions", "--all", "--format", "csv", "--db", str(db)).stdout)
    assert row["title"] == "fix the build = green"


def _on_a_terminal(*args: str) -> bytes:
    """What the command writes to a terminal (a pty), all of it."""
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], stdout=follower, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(follower)
    seen = b""
    while True:
        try:
            piece = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command is done
            break
        if not piece:
            break
        seen += piece
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr.read().decode()
    return seen


CONTROLS = "a\x1b[2Jb\x07c\x1b]52;c;ZXZpbA==\x07d\x9b31me\x7ff\u202eg"  # RLO: a bidi override


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "--all", "--format", "csv"],
        ["sessions", "--all", "--format", "json"],
        ["sessions", "--all", "--format", "jsonl"],
        ["sessions", "--all"],
        ["usage", "--all", "--by", "session", "--format", "markdown"],
        ["import", "--all", "--format", "jsonl"],
    ],
    ids=lambda a: " ".join(a[2:]) or a[0],
)
def test_no_control_character_reaches_a_terminal_from_any_format(tmp_path: Path, args):
    db = _titled(tmp_path, CONTROLS)
    with sqlite3.connect(db) as conn:  # and in what a part says, for import
        rows = conn.execute("SELECT rowid, CAST(data AS BLOB) FROM part").fetchall()
        for rowid, data in rows:
            damaged = (
                data[:-1] + ',"zz":"{}"}}'.format(CONTROLS.replace("\x1b", "\\u001b")).encode()
            )
            conn.execute("UPDATE part SET data = ? WHERE rowid = ?", (damaged, rowid))
    seen = _on_a_terminal(*args, "--db", str(db), "--raw" if args[0] == "import" else "--all")
    text = seen.decode("utf-8")
    assert "\x07" not in text and "\x9b" not in text and "\x7f" not in text
    assert "\u202e" not in text  # it would reorder the rest of the line
    shown = text.replace("\x1b[", "").replace("\x1b]", "")  # rich's own styles are allowed
    if "--format" in args:  # no styles of ours at all in the formats for programs
        assert "\x1b" not in text
    assert "\x1b" not in shown.replace("\x1b(B", "")


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv"])
def test_a_streams_usage_rows_go_out_as_each_is_read(monkeypatch, fmt):
    """`import --follow | usage`: each row of a stream is written, and flushed through the
    buffer stdout has, before the next is read (a stored report's go out a thousand at a
    time)."""
    import io

    from opencode_events.cli import reports as cli_reports
    from opencode_events.reports.usage import UsageRow

    sink = io.BytesIO()
    out = io.BufferedWriter(sink, buffer_size=1 << 16)  # as sys.stdout.buffer is
    monkeypatch.setattr(cli_reports, "report_output", lambda: out)
    seen_before: list[bytes] = []

    class Stream:
        columns = ["session_id", "cost"]
        notes: list[str] = []
        total = UsageRow(cost=3.0)

        def rows(self):
            for n in range(3):
                seen_before.append(sink.getvalue())
                yield UsageRow(session_id=f"ses_{n}", cost=1.0)

    cli_reports._write_usage_as_read(Stream(), fmt)
    assert [b.count(b"ses_") for b in seen_before] == [0, 1, 2]


def test_a_pipe_may_grow_and_a_regular_file_not(tmp_path):
    from opencode_events.cli.reports import may_grow

    path = tmp_path / "stream.jsonl"
    path.write_bytes(b"{}\n")
    read, write = os.pipe()
    try:
        with open(path, "rb") as file, open(read, "rb", closefd=False) as pipe:
            assert not may_grow(file) and may_grow(pipe)
        assert may_grow(object())  # one that cannot say: as a pipe
    finally:
        os.close(read)
        os.close(write)


# ------------------------------------------------------------- hostile data, shared machines

HOSTILE_ID = "ses_\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202eevil"


def test_a_note_quoting_the_data_shows_its_controls_not_obeys_them(tmp_path):
    """``usage`` of a stream names a subagent's parent session in a note on stderr, even
    with stdout elsewhere; an id carrying OSC 52 (a clipboard write) or a clear-screen went
    to the terminal as it was."""
    stream = tmp_path / "stream.jsonl"
    text = (SAMPLES / "task" / "stream.jsonl").read_text()
    (sid,) = {json.loads(line)["sessionID"] for line in text.splitlines()}
    hostile = json.dumps(HOSTILE_ID)[1:-1]
    stream.write_text(text.replace(sid, hostile))
    result = subprocess.run(
        [*CLI, "usage", str(stream), "--format", "jsonl"], capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    said = result.stderr.decode()
    assert "note:" in said and "ZXZpbA==" in said
    assert not any(c in said for c in "\x1b\x07\u202e"), said


def test_a_fifo_or_a_device_beside_the_database_is_refused_not_waited_on(tmp_path):
    """A FIFO planted as ``opencode.db-journal`` hung every command in ``open()``; a
    ``-wal`` linked to /dev/zero (no ``-shm``: copied) filled the temporary folder."""
    for side, plant in (("-journal", "fifo"), ("-wal", "zero")):
        folder = tmp_path / side.strip("-")
        folder.mkdir()
        db = folder / "opencode.db"
        shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
        beside = Path(f"{db}{side}")
        if plant == "fifo":
            os.mkfifo(beside)
        else:
            beside.symlink_to("/dev/zero")
        tmp = folder / "tmp"
        tmp.mkdir()
        result = subprocess.run(
            [*CLI, "sessions", "--db", str(db)],
            capture_output=True,
            timeout=30,
            env={**os.environ, "TMPDIR": str(tmp)},
        )
        assert result.returncode == 2, (side, result.stderr)
        assert result.stderr.decode().startswith("error: cannot read"), result.stderr
        assert "not a regular file" in result.stderr.decode()
        assert not list(tmp.iterdir())


def test_a_closed_terminal_removes_the_private_copy_as_ctrl_c_does(tmp_path):
    """SIGHUP (a closed terminal, a dropped ssh session) killed the process with the
    default action: the private copy of the database (a ``-wal`` with no ``-shm``) was left
    in the temporary folder, as large as the database. It ends the command as SIGTERM does
    now: the copy removed, exit 128 + 1."""
    import signal
    import time

    db, tmp = tmp_path / "opencode.db", tmp_path / "tmp"
    tmp.mkdir()
    shutil.copyfile(SAMPLES / "big_output" / "opencode.db", db)
    Path(f"{db}-wal").write_bytes(b"")  # a crashed writer's: read from a private copy
    proc = subprocess.Popen(  # stdout never read: the import waits on a full pipe
        [*CLI, "import", "--all", "--raw", "--db", str(db)],  # 86 KB: more than a pipe holds
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.monotonic() + 30
        while not list(tmp.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # into the write that waits
        assert proc.poll() is None and list(tmp.iterdir())
        proc.send_signal(signal.SIGHUP)
        proc.stdout.close()
        assert proc.wait(timeout=30) == 128 + signal.SIGHUP
    finally:
        proc.kill()
        proc.wait()
    assert not list(tmp.iterdir())
