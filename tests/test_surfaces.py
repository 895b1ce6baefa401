"""One command line across the report and live commands, as users of ccusage, jq and
sqlite-utils type it: `-j/--json`, `-z/--timezone`, one `--format` list and one default in a
pipe, `context FILE`, `attach URL/event`, `attach --session` of an unknown id, and `run`
saying it is starting. Each case checks stdout, stderr and the exit code."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
CMD = [sys.executable, "-m", "opencode_events"]
TASK = str(SAMPLES / "task" / "opencode.db")


WIDE = {**os.environ, "COLUMNS": "200"}


def run(*args: str, **kwargs) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CMD, *args], capture_output=True, timeout=60, cwd=REPO, **kwargs)


# ------------------------------------------------------------------ formats of the reports

REPORTS = {
    "sessions": ("sessions", "--db", TASK),
    "usage": ("usage", "--db", TASK),
    "usage-stream": ("usage", str(SAMPLES / "task" / "stream.jsonl")),
    "context": ("context", "--db", TASK),
}


@pytest.mark.parametrize("report", REPORTS)
def test_every_report_offers_the_same_formats(report):
    help_text = run(*REPORTS[report][:1], "--help").stdout.decode()
    assert "[table|json|jsonl|csv|markdown]" in help_text
    assert "-j, --json" in help_text
    for fmt in ("table", "json", "jsonl", "csv", "markdown"):
        result = run(*REPORTS[report], "--format", fmt)
        assert result.returncode == 0, (fmt, result.stderr)
        assert result.stdout, fmt


@pytest.mark.parametrize("report", REPORTS)
def test_in_a_pipe_every_report_is_one_json_document(report):
    """One rule: a table on a terminal, one JSON document otherwise (sessions wrote JSON
    Lines in a pipe, usage and context a document)."""
    piped = run(*REPORTS[report])
    assert piped.returncode == 0, piped.stderr
    asked = run(*REPORTS[report], "--format", "json")
    assert piped.stdout == asked.stdout
    json.loads(piped.stdout)  # one document, not lines


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("flag", ["-j", "--json"])
def test_dash_j_is_format_json(report, flag):
    short = run(*REPORTS[report], flag)
    assert short.returncode == 0, short.stderr
    assert short.stdout == run(*REPORTS[report], "--format", "json").stdout


def test_dash_j_and_another_format_are_a_usage_error():
    result = run("sessions", "--db", TASK, "-j", "--format", "csv")
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode().startswith(
        "error: -j/--json and --format csv ask for different formats"
    )


def test_jsonl_of_a_report_is_its_rows_one_a_line():
    document = json.loads(run("usage", "--db", TASK, "--by", "step", "-j").stdout)
    lines = run("usage", "--db", TASK, "--by", "step", "--format", "jsonl")
    assert lines.returncode == 0
    assert [json.loads(line) for line in lines.stdout.splitlines()] == document["rows"]
    stream = run("usage", str(SAMPLES / "task" / "stream.jsonl"), "--format", "jsonl")
    rows = [json.loads(line) for line in stream.stdout.splitlines()]
    assert [r["turn"] for r in rows] == [1, 2]
    assert stream.stderr.decode().startswith("note: 1 subagent session not in this stream")


def test_sessions_markdown_reads_like_the_table():
    text = run("sessions", "--db", TASK, "--all", "--format", "markdown").stdout.decode()
    header, rule, first, second = text.splitlines()
    assert header.split(" | ")[:3] == ["| id", "updated", "title"]
    # folded (the default): the headers of the figures with subagents' say so
    assert " steps +sub " in header and " cache read +sub " in header and " cost +sub |" in header
    assert " subagents | subagents' cost |" in header
    assert "2026-11-29T15:41:20Z" in first and "Mock session title" in first
    assert "Inspect the repo (@general subagent)" in second


@pytest.mark.parametrize("breaker", ["\n", "\r", "\r\n", "|"])
def test_a_markdown_row_stays_one_row_whatever_a_cell_holds(tmp_path, breaker):
    """A title or directory holding a line ending Markdown knows (LF, CR, CRLF) or a pipe
    keeps its row one row of as many cells as the header (a bare CR split it in two)."""
    db = tmp_path / "opencode.db"
    db.write_bytes(Path(TASK).read_bytes())
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "UPDATE session SET title = ?, directory = ?", (f"a{breaker}b", f"/x{breaker}y")
        )
        conn.commit()
    for args in (["sessions", "--all"], ["usage", "--all", "--by", "project"]):
        text = run(*args, "--db", str(db), "--format", "markdown", "--no-cache").stdout.decode()
        rows = re.split(r"\r\n|\r|\n", text.rstrip("\n"))
        cells = [len(re.findall(r"(?<!\\)\|", row)) for row in rows]
        assert len(set(cells)) == 1, (args, rows)


@pytest.mark.parametrize("flag", ["-z", "--timezone", "--tz"])
def test_timezone_is_spelled_as_in_ccusage(flag):
    zone = run("usage", "--db", TASK, "--by", "day", flag, "Pacific/Kiritimati", "-j")
    assert zone.returncode == 0, zone.stderr
    assert [r["day"] for r in json.loads(zone.stdout)["rows"]] == ["2026-11-30"]
    bad = run("usage", "--db", TASK, "--by", "day", flag, "Mars/Olympus")
    assert bad.returncode == 2 and b"unknown time zone 'Mars/Olympus'" in bad.stderr


# ------------------------------------------------------------------------ context FILE


def test_context_of_a_database_file_reads_it():
    result = run("context", TASK, "-j")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["session_id"] == "ses_dd8083e0bffePGJlLQX9qavHXI"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.db", "error: no OpenCode database at missing.db\n"),
        ("./nowhere/opencode.db", "error: no OpenCode database at nowhere/opencode.db\n"),
        (
            "README.md",
            "error: README.md is not a readable SQLite database (file is not a database)\n",
        ),
    ],
)
def test_context_of_a_file_that_is_no_database_blames_the_file(name, message, tmp_path):
    env = {**os.environ, "OPENCODE_DB": str(tmp_path / "default.db")}
    result = run("context", name, env=env)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == message
    assert "default.db" not in result.stderr.decode()


def test_context_file_and_db_together_are_a_usage_error():
    result = run("context", TASK, "--db", TASK)
    assert result.returncode == 2 and b"is a path and --db names the database already" in (
        result.stderr
    )


# ------------------------------------------------------------------------------ attach


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@contextlib.contextmanager
def opencode_like_server(
    sessions: list[str], capture: str = "serve_text"
) -> Iterator[tuple[str, list[str]]]:
    """A stand-in for `opencode serve` that answers as 1.18.33 does: GET /session/ID 200
    or 404, GET /session the list, GET /event the captured stream (serve_text's by
    default: its session's idle ends attach), POST /session/ID/abort 200. Yields the URL
    and the paths asked for (a POST's as ``POST /session/…``)."""
    asked: list[str] = []
    sse = (SAMPLES / capture / "events.sse").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, body) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            asked.append(self.path)
            path = self.path.partition("?")[0]
            if path == "/session":
                self._json(200, [{"id": s, "title": "t"} for s in sessions])
            elif path.startswith("/session/"):
                sid = path.removeprefix("/session/")
                if sid in sessions:
                    self._json(200, {"id": sid})
                else:
                    self._json(404, {"name": "NotFoundError", "data": {"message": sid}})
            elif path == "/event":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(sse)
                    self.wfile.flush()
            else:
                self._json(404, {})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            asked.append(f"POST {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.endswith("/abort"):
                self._json(200, True)
            else:
                self._json(404, {})

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def _session_of_serve_text() -> str:
    for line in (SAMPLES / "serve_text" / "events.sse").read_text().splitlines():
        if '"sessionID":"' in line:
            return line.split('"sessionID":"')[1].split('"')[0]
    raise AssertionError("no session in serve_text")


@pytest.mark.parametrize("suffix", ["", "/", "/event", "/event/"])
def test_attach_to_the_event_url_itself_does_not_double_the_path(suffix):
    with opencode_like_server([]) as (url, asked):
        result = run("attach", url + suffix, "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    assert asked == ["/event"]
    assert result.stdout and result.stderr.decode() == f"opencode-events: attached to {url}\n"


def test_attach_to_a_session_the_server_does_not_know_says_so_and_exits_2():
    with opencode_like_server(["ses_aaa1", "ses_bbb2"]) as (url, asked):
        result = run("attach", url, "--session", "ses_nope")
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == (
        f"error: {url} has no session ses_nope (GET /session/ses_nope: 404)\n"
    )
    assert "/event" not in asked


@pytest.mark.parametrize("everywhere", [[], ["--global"]])
def test_attach_to_a_session_id_that_is_not_utf8_says_there_is_none(everywhere):
    """A server's session ids are JSON text: an id given in bytes that are not UTF-8 (held
    as surrogates, which no URL can quote) names none of them, and is not asked about."""
    with opencode_like_server(["ses_aaa1"]) as (url, asked):
        result = run("attach", url, *everywhere, "--session", os.fsdecode(b"ses_\xff"))
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.decode() == f"error: {url} has no session ses_\\udcff\n"
    assert asked == []


def test_attach_asks_about_the_session_in_the_directory_the_url_names():
    with opencode_like_server(["ses_aaa1"]) as (url, asked):
        result = run("attach", f"{url}/event?directory=/srv/app", "--session", "ses_nope")
    assert result.returncode == 2 and b"has no session ses_nope" in result.stderr
    assert asked == ["/session/ses_nope?directory=/srv/app", "/session?directory=/srv/app"]


def test_attach_to_a_prefix_of_several_sessions_lists_them():
    with opencode_like_server(["ses_abc1", "ses_abc2", "ses_zzz"]) as (url, _):
        result = run("attach", url, "--session", "ses_abc")
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"error: --session ses_abc starts several sessions on {url}: ses_abc1, ses_abc2\n"
    )


@pytest.mark.parametrize("given", ["whole", "prefix"])
def test_attach_to_a_known_session_or_its_prefix_follows_it(given):
    session = _session_of_serve_text()
    with opencode_like_server([session, "ses_other"]) as (url, asked):
        ask = session if given == "whole" else session[:12]
        result = run("attach", url, "--session", ask, "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    assert asked[-1] == "/event"
    assert {json.loads(line)["session_id"] for line in result.stdout.splitlines()} == {session}


def _costs_of(capture: str) -> tuple[str, list[float]]:
    """The session a capture follows and what it had cost after each step."""
    result = run("normalize", str(SAMPLES / capture / "events.sse"))
    events = [json.loads(line) for line in result.stdout.splitlines()]
    spent = list(itertools.accumulate(e["cost"] for e in events if e["kind"] == "usage"))
    return events[-1]["session_id"], spent


@pytest.mark.parametrize(
    ("capture", "share"),
    [
        ("serve_text", 0.25),  # one step: its cost never reached a session.updated before idle
        ("serve_permission", 0.95),  # crossed in the last of three steps
        ("serve_permission", 0.7),  # crossed in the second of three steps
    ],
)
def test_attach_max_cost_aborts_once_the_replies_cost_more(capture, share):
    """OpenCode sends a session's new cost (``session.updated``) only once its next step
    has begun, the last step's after ``session.idle``: counted from those alone, a limit
    crossed by the last step was never seen (exit 0, no abort). The replies'
    ``message.updated`` carry each step's cost as it ends."""
    session, spent_after = _costs_of(capture)
    limit = round(spent_after[-1] * share, 6)
    crossed_at = next(spent for spent in spent_after if spent > limit)
    with opencode_like_server([session], capture) as (url, asked):
        result = run("attach", url, "--session", session, "--max-cost", str(limit), "-o", "-")
    assert result.returncode == 3, result.stderr
    assert f"POST /session/{session}/abort" in asked
    said = result.stderr.decode().splitlines()[-1]
    assert said.startswith(f"opencode-events: {session} cost $") and "aborted it" in said
    assert f"cost ${crossed_at:.4f}," in said  # at the step that crossed it


# -------------------------------------------------------------------------------- run


def test_run_in_the_pretty_view_says_opencode_is_starting(tmp_path):
    """Under a real pseudo-terminal: the footer says "starting OpenCode…" while the
    stand-in OpenCode is silent, then the events follow and the footer goes."""
    from tests.test_render import ANSI, run_in_pty, screen

    fake = tmp_path / "opencode"
    sample = SAMPLES / "text" / "stream.jsonl"
    fake.write_text(f"#!/bin/sh\nsleep 1\ncat {sample}\n")
    fake.chmod(0o755)
    code, output = run_in_pty([*CMD, "run", "hi"], env={"OPENCODE_BIN": str(fake)})
    assert code == 0, output
    plain = ANSI.sub(b"", output).decode()
    assert "starting OpenCode…" in plain
    assert not any("starting OpenCode" in line for line in screen(output))  # gone at the end


def test_run_in_a_pipe_leaves_stderr_quiet(tmp_path):
    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\ncat {SAMPLES / 'text' / 'stream.jsonl'}\n")
    fake.chmod(0o755)
    result = run("run", "hi", env={**os.environ, "OPENCODE_BIN": str(fake)})
    assert result.returncode == 0 and result.stderr == b""
    assert json.loads(result.stdout.splitlines()[-1])["kind"] == "metrics"


def test_run_with_stderr_on_a_terminal_and_events_in_a_pipe_says_it_is_starting(tmp_path):
    from tests.test_render import ANSI, run_in_pty

    fake = tmp_path / "opencode"
    fake.write_text(f"#!/bin/sh\ncat {SAMPLES / 'text' / 'stream.jsonl'}\n")
    fake.chmod(0o755)
    out = tmp_path / "events.jsonl"
    code, output = run_in_pty([*CMD, "run", "-o", str(out), "hi"], env={"OPENCODE_BIN": str(fake)})
    assert code == 0, output
    assert ANSI.sub(b"", output).decode().strip() == (
        f"opencode-events: starting OpenCode ({fake})…"
    )
    assert json.loads(out.read_bytes().splitlines()[-1])["kind"] == "metrics"


# ------------------------------------------- one count of failed calls in every view

# (capture, its failed calls, its bad exits): OpenCode marked a call failed (read_missing), a
# tool that does not exist was called (`invalid`); bash exited 3, bash was killed at its
# timeout (completed calls whose command failed); two of four parallel calls.
FAILED_CALLS = [
    ("bash_fail", 0, 1),
    ("bash_timeout", 0, 1),
    ("invalid_tool", 1, 0),
    ("parallel_tools", 1, 1),
    ("read_missing", 1, 0),
    ("bash_ok", 0, 0),
    ("task", 0, 0),
]


@pytest.mark.parametrize("sample, failed, bad", FAILED_CALLS, ids=[s for s, *_ in FAILED_CALLS])
def test_failed_calls_read_alike_in_every_view(sample, failed, bad):
    """Issue 20 §9: `sessions`, the import's metrics, the stream's metrics and the pretty
    view's closing line count the same calls failed (`tool_failures`), and the metrics and
    the pretty view the same bad exits (`command_failures`): every call the pretty view
    marks ✗ is one or the other."""
    db = str(SAMPLES / sample / "opencode.db")
    listed = run("sessions", "--db", db, "--all", "--no-fold", "--no-cache", "-j")
    assert listed.returncode == 0, listed.stderr
    imported = run("import", "--db", db, "--all")
    streamed = run("normalize", str(SAMPLES / sample / "stream.jsonl"))
    pretty = run("normalize", "--format", "pretty", input=imported.stdout, env=WIDE)
    assert sum(row["tool_failures"] for row in json.loads(listed.stdout)) == failed
    for output in (imported, streamed):
        metrics = json.loads(output.stdout.splitlines()[-1])
        assert (metrics["tool_failures"], metrics["command_failures"]) == (failed, bad)
    lines = pretty.stdout.decode().splitlines()
    said = [f"{failed} failed"] * bool(failed) + [f"{bad} bad exit"] * bool(bad)
    assert (f"({' · '.join(said)})" in lines[-1]) if said else "(" not in lines[-1], lines[-1]
    assert sum("✗" in line for line in lines) >= failed + bad
