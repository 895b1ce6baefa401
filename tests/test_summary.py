"""Session summaries on odd rows: the tool calls, failures and MCP calls, turns, inferences and
in-flight of every session must be what decoding every row one by one gives, whichever way the
rows are read (per session, the whole table, the per-core workers)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import opencode_events.reports.sessions as summary_module
from opencode_events.errors import InputError
from opencode_events.reports.mcp import mcp_server_of
from opencode_events.store import fastscan
from opencode_events.store.sqlite import Store

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SERVERS = ["my", "w", "db-tools"]  # MCP servers the summaries are given

BIG = "x" * 300  # pushes what follows past the head the store hands over (256 bytes)


def _bash(
    exit: str,
    *,
    output: str = BIG,
    title: str = "exit 3",
    tool: str = "bash",
    extra: str = "",
    spaced: bool = False,
    after: str = "",
) -> str:
    """A completed bash part as OpenCode 1.18.33 writes it, with ``exit`` as the JSON of
    ``metadata.exit`` (the sample bash_fail's shape); ``spaced``: as json.dumps writes it."""
    out = json.dumps(output)
    text = (
        f'{{"type":"tool","tool":"{tool}","callID":"c","state":{{"status":"completed",'
        f'"input":{{"command":"x"}},"output":{out},"metadata":{{"output":{out},'
        f'"exit":{exit}{extra},"truncated":false}},"title":{json.dumps(title)},'
        f'"time":{{"start":1,"end":2}}{after}}}}}'
    )
    return json.dumps(json.loads(text)) if spaced else text


_KILLED = "waiting\\n<shell_metadata>shell tool terminated command after exceeding timeout"
# (id, metadata.exit as JSON, _bash's other arguments): none fails by its status, so none is
# among tool_failures (metrics counts them as command_failures; sessions does not read them).
BASH_ENDS: list[tuple[str, str, dict[str, Any]]] = [
    ("bash-exit-3", "3", {}),
    ("bash-exit-0", "0", {}),
    ("bash-exit-3-short", "3", {"output": "o"}),
    ("bash-exit-9-on-overflow-pages", "9", {"output": "y" * 20_000}),
    ("bash-killed", "null", {"output": _KILLED + BIG}),
    ("bash-exit-spaced", "2", {"spaced": True}),
]

# Part rows, one session each: the data as stored, and whether it is stored as a BLOB.
PARTS: list[Any] = [
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"completed"}}', id="usual"
    ),
    *(
        pytest.param(
            f'{{"type":"tool","tool":"bash","callID":"c","state":{{"status":"{status}"'
            f',"output":"{BIG}"}}}}',
            id=f"status-{status}",
        )
        for status in ("failed", "Cancelled", "FAILURE", "canceled", "running", "OK")
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"error","x":1}}',
        id="usual-error",
    ),
    pytest.param(
        '{"type":"tool","tool":"my_echo","callID":"c","state":{"status":"error",'
        f'"output":"{BIG}"}}}}',
        id="usual-long-mcp",
    ),
    pytest.param(
        '{"type":"tool","callID":"c","tool":"task","state":{"status":"error"}}', id="call-id-first"
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"metadata":{"o":"s"},'
        '"status":"error"}}',
        id="status-after-metadata",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"metadata":{"o":"'
        f'{BIG}"}},"status":"error"}}}}',
        id="status-past-the-head",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"' + "c" * 300 + '","state":{"status":"error"}}',
        id="call-id-past-the-head",
    ),
    pytest.param(
        '{"type":"\\u0074ool","tool":"bash","state":{"status":"error"}}', id="escaped-type"
    ),
    pytest.param(
        '{"type":"t\\u006fol","tool":"bash","state":{"status":"error"}}', id="escaped-type-inside"
    ),
    pytest.param(
        '{"type":"tool","tool":"my\\u005fecho","callID":"c","state":{"status":'
        f'"\\u0065rror"}},"output":"{BIG}"}}',
        id="escaped-tool-and-status",
    ),
    pytest.param(
        '{"type":"tool","tool":"w_\\"q\\"","callID":"c\\\\","state":{"status":'
        f'"error"}},"output":"{BIG}"}}',
        id="escaped-quotes",
    ),
    pytest.param(
        '{"type":"tool","tool":"w_wërk","callID":"c","state":{"status":"error"},'
        f'"output":"{BIG}"}}',
        id="not-ascii",
    ),
    pytest.param(
        '{"type":"tool","tool":"w_\\ud800","callID":"c","state":{"status":"error"},'
        f'"output":"{BIG}"}}',
        id="lone-surrogate",
    ),
    pytest.param(
        b'{"type":"tool","tool":"w_\xff","callID":"c","state":{"status":"error"},'
        + f'"output":"{BIG}"}}'.encode(),
        id="not-utf-8",
    ),
    pytest.param(
        '{"type":"tool","tool":"w_\\x","callID":"c","state":{"status":"error"},'
        f'"output":"{BIG}"}}',
        id="bad-escape",
    ),
    pytest.param('{"tool":"bash","type":"tool","state":{"status":"error"}}', id="type-second"),
    pytest.param(f'{{"text":"{BIG}","type":"tool","tool":"my_x"}}', id="type-late"),
    pytest.param(
        '{ "type" : "tool" , "tool" : "bash" , "state" : { "status" : "error" } }', id="spaces"
    ),
    pytest.param(
        ' {"type":"tool","tool":"bash","callID":"c","state":{"status":"error"}}', id="leading-space"
    ),
    pytest.param('{"type":"text","type":"tool","tool":"my_dup"}', id="duplicate-type"),
    pytest.param('{"type":"tool","type":"text","tool":"bash"}', id="duplicate-type-last"),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"error"},"type":"text"}',
        id="usual-then-duplicate-type",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"error","status":"ok"}}',
        id="duplicate-status",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"error"}}x',
        id="trailing-garbage",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":"error"', id="cut-short"
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":"error"}', id="state-not-an-object"
    ),
    pytest.param('{"type":"tool","tool":"bash","callID":"c","state":null}', id="state-null"),
    pytest.param(
        '{"type":"tool","tool":null,"callID":"c","state":{"status":"error"}}',
        id="tool-not-a-string",
    ),
    pytest.param(
        '{"type":"tool","tool":"bash","callID":"c","state":{"status":null}}',
        id="status-not-a-string",
    ),
    pytest.param('{"type":"tool"}', id="bare"),
    pytest.param('{"type":"tools","tool":"bash"}', id="other-type"),
    pytest.param('{"type":"text","text":"the tool"}', id="text"),
    pytest.param('{"type":"text","text":"call the \\"tool\\""}', id="text-quoting-tool"),
    pytest.param('{"reason":"tool-calls","snapshot":"abc","type":"step-finish"}', id="step-finish"),
    pytest.param('not json, but says tool"', id="not-json"),
    pytest.param('["tool"]', id="array"),
    pytest.param('"tool"', id="string"),
    pytest.param("", id="empty"),
    pytest.param('{"x":"a\x00b","type":"tool","tool":"bash"}', id="nul-byte"),
    pytest.param(
        b'{"type":"tool","tool":"bash","callID":"c","state":{"status":"error"}}',
        id="stored-as-blob",
    ),
    pytest.param(b'{"type":"\\u0074ool","tool":"bash"}', id="blob-escaped-type"),
    # Completed calls: a bash exit code other than 0 (written after the output) or a killed
    # command is no failure of the call (command_failures); a call of `invalid` is one.
    *(pytest.param(_bash(exit, **shape), id=name) for name, exit, shape in BASH_ENDS),
    pytest.param(
        '{"type":"tool","tool":"invalid","callID":"c","state":{"status":"completed",'
        f'"input":{{"tool":"nope"}},"output":"{BIG}","title":"Invalid Tool","time":{{}}}}}}',
        id="invalid-tool",
    ),
    pytest.param(
        '{"type":"tool","tool":"Invalid","callID":"c","state":{"status":"completed"}}',
        id="invalid-tool-short",
    ),
]

# Message rows, one session each.
MESSAGES: list[Any] = [
    pytest.param('{"role":"user","time":{"created":1}}', id="user"),
    pytest.param('{"role":"assistant","time":{"created":1,"completed":2}}', id="assistant"),
    pytest.param('{"role":"assistant","time":{"created":1}}', id="running"),
    pytest.param('{"role":"assistant","time":null}', id="time-null"),
    pytest.param('{"role":"assistant"}', id="no-time"),
    pytest.param('{"role":"assistant","time":{"completed":null}}', id="completed-null"),
    pytest.param('{"role":"assistant","time":"later"}', id="time-not-an-object"),
    pytest.param('{"role":"\\u0075ser"}', id="escaped-role"),
    pytest.param('{"role":"user","role":"assistant","time":{"completed":1}}', id="duplicate"),
    pytest.param('{\n  "role": "user"\n}', id="pretty"),
    pytest.param('{"role":"user"}]\n[{"role":"user"}', id="row-boundary-inside"),
    pytest.param('{"role":"user"} {"role":"user"}', id="two-objects"),
    pytest.param('{"role":"user"', id="cut-short"),
    pytest.param("", id="empty"),
    pytest.param("[]", id="array"),
    pytest.param("null", id="null"),
    pytest.param('{"role":1}', id="role-not-a-string"),
    pytest.param(b'{"role":"user"}', id="stored-as-blob"),
    pytest.param(b'{"role":"\xff"}', id="not-utf-8"),
]


def _decoded(data: str | bytes) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        pass
    # A lone surrogate escape (JSON.stringify of a string cut inside an emoji) is valid JSON
    # text: read it as the lenient standard library does, the way the import reads it.
    if re.search(rb"\\u[dD][89a-fA-F]", raw):
        with contextlib.suppress(ValueError):
            return json.loads(raw)
    return None


# SPEC §2: the statuses that mean a call failed, in any case.
FAILED_STATUSES = ("error", "failed", "failure", "cancelled", "canceled")


def expected_tools(rows: list[str | bytes]) -> tuple[int, int, dict[str, int]]:
    """Tool calls, failures and MCP calls from decoding each part whole, the way the
    summaries define them (a part whose `state` is neither an object nor null is no part)."""
    calls = failures = 0
    mcp: dict[str, int] = {}
    for data in rows:
        part = _decoded(data)
        if not isinstance(part, dict) or part.get("type") != "tool":
            continue
        state = part.get("state")
        if state is not None and not isinstance(state, dict):
            continue
        calls += 1
        status = state.get("status") if state else None
        tool = part.get("tool")
        failures += (isinstance(status, str) and status.lower() in FAILED_STATUSES) or (
            isinstance(tool, str) and _completed_badly(tool.lower(), state or {})
        )
        server = mcp_server_of(tool, SERVERS) if isinstance(tool, str) else None
        if server is not None:
            mcp[server] = mcp.get(server, 0) + 1
    return calls, failures, mcp


def _completed_badly(tool: str, state: dict) -> bool:
    """A call of a tool that does not exist (OpenCode stores it as completed)."""
    return tool == "invalid"


def expected_messages(rows: list[str | bytes]) -> tuple[int, int, bool]:
    """Turns, inferences and in flight of a session's messages ``rows``, oldest first: a
    reply open, or the newest prompt or reply a prompt awaiting its reply."""
    turns = inferences = 0
    in_flight = False
    newest = None
    for data in rows:
        message = _decoded(data)
        if not isinstance(message, dict):
            continue
        time = message.get("time")
        if not isinstance(time, dict):  # every report's rule: a damaged time is none
            time = None
        if message.get("role") == "user":
            turns += 1
            newest = "user"
        elif message.get("role") == "assistant":
            inferences += 1
            in_flight = in_flight or time is None or time.get("completed") is None
            newest = "assistant"
    return turns, inferences, in_flight or newest == "user"


def build(tmp_path: Path, parts: list[Any], messages: list[Any]) -> tuple[Path, dict]:
    """A copy of a captured database with one more session per odd row; returns it and what
    each new session must show."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "mcp" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (template,) = conn.execute("SELECT id FROM session LIMIT 1").fetchone()
    columns = [row[1] for row in conn.execute("PRAGMA table_info(session)")]
    copy = ", ".join("?" if c == "id" else c for c in columns)
    want: dict[str, dict] = {}
    for n, (kind, data) in enumerate([("part", p) for p in parts] + [("msg", m) for m in messages]):
        sid = f"ses_odd{n:04d}"
        conn.execute(
            f"INSERT INTO session SELECT {copy} FROM session WHERE id = ?", (sid, template)
        )
        mid = f"msg_odd{n:04d}"
        if kind == "part":
            conn.execute(
                "INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)", (f"prt_odd{n:04d}", mid, sid, data)
            )
            calls, failures, mcp = expected_tools([data])
            want[sid] = {"tool_calls": calls, "tool_failures": failures, "mcp_calls": mcp}
        else:
            conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, ?)", (mid, sid, data))
            turns, inferences, in_flight = expected_messages([data])
            want[sid] = {"turns": turns, "inferences": inferences, "in_flight": in_flight}
    conn.commit()
    conn.close()
    return db, want


def summaries(db: Path, monkeypatch, how: str) -> dict[str, dict]:
    """``how``: per-session lookups (``per-session-forked``: their parts read by forked
    children with apsw), the whole table in this process, or the per-core workers (forked
    children reading with apsw; ``workers-sqlite3``: as where apsw is missing, the last
    range read here)."""
    # These rows are dated 1970: judged as of today, every reply in flight would be stale.
    # Staleness has tests of its own; here, what the odd rows say is all that counts.
    monkeypatch.setenv("OPENCODE_EVENTS_STALE_AFTER", str(10**12))
    if how.startswith("per-session"):
        monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 10**9)
        forked = how == "per-session-forked"
        monkeypatch.setattr(summary_module, "_FORKED_SCOPE_MIN", 1 if forked else 10**9)
        if forked:
            monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
            real = summary_module._start_scoped

            def started(store: Any, scope: Any) -> Any:
                pending = real(store, scope)
                assert pending is not None  # the children read the parts, not this process
                return pending

            monkeypatch.setattr(summary_module, "_start_scoped", started)
    else:
        monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
        workers = how.startswith("workers")
        monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0 if workers else 10**12)
    with monkeypatch.context() as patch:
        if how == "workers-sqlite3":
            patch.setattr(fastscan, "_apsw", lambda: None)
        with Store(db) as store:
            rows = store.sessions(top_level=False)
            result = summary_module.summarize(store, rows, mcp_servers=lambda directory: SERVERS)
    return {s.id: msgspec.to_builtins(s) for s in result}


HOW = ["per-session", "per-session-forked", "whole-table", "workers", "workers-sqlite3"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("data", PARTS)
def test_odd_part_rows(tmp_path: Path, monkeypatch, how: str, data: Any):
    db, want = build(tmp_path, [data], [])
    got = summaries(db, monkeypatch, how)
    for sid, fields in want.items():
        assert {k: got[sid][k] for k in fields} == fields


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("data", MESSAGES)
def test_odd_message_rows(tmp_path: Path, monkeypatch, how: str, data: Any):
    db, want = build(tmp_path, [], [data])
    got = summaries(db, monkeypatch, how)
    for sid, fields in want.items():
        assert {k: got[sid][k] for k in fields} == fields


@pytest.mark.parametrize("how", HOW)
def test_all_odd_rows_at_once(tmp_path: Path, monkeypatch, how: str):
    """Every odd row in one database, next to a real capture's rows: each session its own."""
    parts = [p.values[0] for p in PARTS]
    messages = [m.values[0] for m in MESSAGES]
    db, want = build(tmp_path, parts, messages)
    got = summaries(db, monkeypatch, how)
    assert {sid: {k: got[sid][k] for k in fields} for sid, fields in want.items()} == want
    assert sum(s["tool_calls"] for s in got.values()) > sum(
        w.get("tool_calls", 0) for w in want.values()
    )  # the capture's own


def test_parts_the_children_cannot_read_are_read_here(tmp_path: Path, monkeypatch):
    """The parts of sessions read by index go to forked children (apsw) from
    ``_FORKED_SCOPE_MIN`` sessions on; where a child fails (its connection refused here; a
    child killed is one too), this process reads them itself: the same summaries, not an
    error and not a count short."""
    db, _ = build(tmp_path, [p.values[0] for p in PARTS], [])
    expected = summaries(db, monkeypatch, "per-session")

    @contextlib.contextmanager
    def refused(uri: str, what: str) -> Iterator[Any]:
        raise InputError(f"cannot read the {what} table: refused")
        yield  # a context manager's shape

    monkeypatch.setattr(fastscan, "connect", refused)
    assert summaries(db, monkeypatch, "per-session-forked") == expected


def test_a_child_killed_has_its_parts_read_here_with_sqlite3(tmp_path: Path, monkeypatch):
    """A child killed before its result leaves its slice to this process, which reads it
    with sqlite3 as it reads the rest: never with apsw, a second SQLite beside the store's
    own connection (closing it would drop the POSIX locks that one holds on the file)."""
    db, _ = build(tmp_path, [p.values[0] for p in PARTS], [])
    expected = summaries(db, monkeypatch, "per-session")
    parent = os.getpid()
    opened_here: list[str] = []
    real_connect, real_slices = fastscan.connect, summary_module._scoped_slices

    def connect(uri: str, what: str) -> Any:
        if os.getpid() == parent:
            opened_here.append(uri)
        return real_connect(uri, what)

    def killed(*args: Any) -> Any:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_slices(*args)

    monkeypatch.setattr(fastscan, "connect", connect)
    monkeypatch.setattr(summary_module, "_scoped_slices", killed)
    assert summaries(db, monkeypatch, "per-session-forked") == expected
    assert opened_here == []


def test_the_children_are_reaped_when_the_messages_fail(tmp_path: Path, monkeypatch):
    """The children reading a window's parts are stopped and reaped, their files closed,
    when this process fails to count the messages meanwhile: a library caller's process
    lives on, and must not gather zombies and descriptors."""
    db, _ = build(tmp_path, [p.values[0] for p in PARTS], [])
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    def failed(*_args: Any) -> None:
        raise InputError("cannot read the message table: damaged")

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(summary_module, "_count_messages", failed)
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(InputError):
        summaries(db, monkeypatch, "per-session-forked")
    assert forked
    left = []
    for pid in forked:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # reaped here, if the report did not
            left.append(pid)
    assert left == []
    assert len(os.listdir("/proc/self/fd")) == fds


def test_a_window_is_read_here_when_no_child_can_be_forked(tmp_path: Path, monkeypatch):
    """No process to fork (a limit on processes reached): the parts of the sessions read by
    index are read here, as they were before children read them, not an error."""
    db, _ = build(tmp_path, [p.values[0] for p in PARTS], [])
    expected = summaries(db, monkeypatch, "per-session")

    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(summary_module, "_FORKED_SCOPE_MIN", 1)
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    monkeypatch.setattr(os, "fork", refused)
    with Store(db) as store:
        rows = store.sessions(top_level=False)
        result = summary_module.summarize(store, rows, mcp_servers=lambda directory: SERVERS)
    assert {s.id: msgspec.to_builtins(s) for s in result} == expected


def test_a_window_of_sessions_is_the_same_read_by_children(tmp_path: Path):
    """``sessions`` of a window of 40 sessions (by index: fewer than the whole-table rule
    asks): the same JSON with the parts read by forked children as by this process alone."""
    import subprocess
    import sys

    from tests.stores import generated

    db = generated(tmp_path / "opencode.db", sessions=40, parts=3000)
    args = ["sessions", "--db", str(db), "--all", "--since", "2000-01-01", "--format", "json"]

    def run(workers: str) -> bytes:
        env = {**os.environ, "OPENCODE_EVENTS_WORKERS": workers}
        cmd = [sys.executable, "-m", "opencode_events", *args, "--no-cache"]
        return subprocess.run(cmd, env=env, capture_output=True, check=True).stdout

    alone = run("1")
    assert len(json.loads(alone)) >= summary_module._FORKED_SCOPE_MIN
    assert run("2") == alone


def test_the_odd_rows_are_odd():
    """The table covers both answers, failures and MCP calls (a guard against a table that
    would pass whatever the code did)."""
    results = [expected_tools([p.values[0]]) for p in PARTS]
    assert {calls for calls, _, _ in results} == {0, 1}
    assert any(failures for _, failures, _ in results)
    assert any(mcp for _, _, mcp in results)
    messages = [expected_messages([m.values[0]]) for m in MESSAGES]
    assert {m[2] for m in messages} == {False, True}


def test_a_long_usual_tool_part_is_judged_by_its_head(tmp_path: Path, monkeypatch):
    """The one place where the summaries do not decode a row whole: a part of 256 bytes or
    more that starts the way OpenCode writes a tool part ({"type":"tool","tool":…,"callID":…,
    "state":{"status":…) is taken at its word, without reading its output (most of the
    database's bytes) for a later duplicate key or broken JSON. OpenCode writes neither."""
    tail = f',"output":"{BIG}"'
    start = '{"type":"tool","tool":"my_x","callID":"c","state":{"status":"error"}'
    rows = [start + tail + ',"type":"text"}', start + tail + "}garbage", start + tail]
    db, _ = build(tmp_path, rows, [])
    for how in HOW:
        got = summaries(db, monkeypatch, how)
        for n in range(len(rows)):
            assert (got[f"ses_odd{n:04d}"]["tool_calls"], got[f"ses_odd{n:04d}"]["mcp_calls"]) == (
                1,
                {"my": 1},
            )
    assert [expected_tools([row])[0] for row in rows] == [0, 0, 0]  # decoded whole


def _padded(data: str | bytes, front: bool) -> str | bytes:
    """The row made larger than ``fastscan.BIG`` (so that apsw reads only its head): a key
    added first or last to an object, white space after anything else."""
    text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
    pad = "p" * (fastscan.BIG + 500)
    if text.startswith("{") and text.endswith("}") and len(text) > 2:
        text = f'{{"pad":"{pad}",{text[1:]}' if front else f'{text[:-1]},"pad":"{pad}"}}'
    else:
        text += " " * len(pad)
    return text.encode("utf-8", "surrogateescape") if isinstance(data, bytes) else text


def _usual_head(data: str | bytes) -> bool:
    head = (data.encode() if isinstance(data, str) else data)[:256]
    match = summary_module._TOOL_HEAD.match
    return bool(match(head) or summary_module._TOOL_HEAD_CALL_FIRST.match(head))


TOOL_FIELDS = ("tool_calls", "tool_failures", "mcp_calls")


@pytest.mark.parametrize("front", [False, True], ids=["pad-last", "pad-first"])
def test_large_odd_parts_read_every_way_agree(tmp_path: Path, monkeypatch, front: bool):
    """Every odd part made large: apsw's workers read only its first bytes (the rest may be
    on overflow pages); the other ways test the whole of it in SQL first. Every way gives
    the same counts, and they are what decoding the part whole gives, but for a part that
    starts the way OpenCode writes a tool part: judged by its start (the documented limit)."""
    rows = [_padded(p.values[0], front) for p in PARTS]
    assert all(len(r) > fastscan.BIG for r in rows)
    db, want = build(tmp_path, rows, [])
    results = {how: summaries(db, monkeypatch, how) for how in HOW}
    reference = results["per-session"]
    for how, got in results.items():
        assert {s: {k: got[s][k] for k in TOOL_FIELDS} for s in want} == {
            s: {k: reference[s][k] for k in TOOL_FIELDS} for s in want
        }, how
    judged_by_head = {f"ses_odd{n:04d}" for n, row in enumerate(rows) if _usual_head(row)}
    assert len(judged_by_head) > (2 if not front else 0)  # a pad first hides most
    for sid, fields in want.items():
        if sid not in judged_by_head:
            assert {k: reference[sid][k] for k in fields} == fields, sid
        else:
            assert reference[sid]["tool_calls"] == 1, sid


@pytest.mark.parametrize("seed", range(20))
def test_message_shares_follow_one_another(seed: int):
    """Whatever the part ranges, the processes' message shares cover the message table once."""
    import random

    rng = random.Random(seed)
    part_low = rng.randint(1, 1000)
    part_high = part_low + rng.randint(1, 10**6)
    first = rng.randint(1, 1000)
    end = first + rng.randint(0, 10**6)
    cuts = sorted(
        rng.sample(range(part_low + 1, part_high), min(rng.randint(0, 5), part_high - part_low - 1))
    )
    edges = [part_low, *cuts, part_high]
    spans = ((part_low, part_high), (first, end))
    shares = [summary_module._message_share(lo, hi, spans) for lo, hi in itertools.pairwise(edges)]
    assert shares[0][0] == first and shares[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shares))
    assert all(start <= stop for start, stop in shares)


@pytest.mark.parametrize("how", ["whole-table", "workers", "workers-sqlite3"])
def test_a_session_too_long_to_join_is_read_row_by_row(tmp_path: Path, monkeypatch, how: str):
    """The whole-table read joins each session's messages of a chunk into one value; one
    longer than SQLite's length limit (1 GB by default; lowered here) is read row by row,
    to the same summaries, instead of failing the command (sqlite3's error or apsw's)."""
    import apsw

    db, _ = build(tmp_path, [], [m.values[0] for m in MESSAGES])
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT id FROM session WHERE id LIKE 'ses_odd%' LIMIT 1").fetchone()
    for n in range(1000):  # 128 kB of one session's messages, each row far below the limit
        # every 7th reply open, and the newest (998): the one that can be in flight
        times = {"created": n, "completed": n + 1} if n % 7 and n != 998 else {"created": n}
        message = {"role": "assistant" if n % 3 else "user", "agent": "a" * 50, "time": times}
        data = json.dumps(message)
        conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, ?)", (f"msg_many{n:04d}", sid, data))
    conn.commit()
    conn.close()
    expected = summaries(db, monkeypatch, how)
    assert expected[sid]["turns"] >= 334 and expected[sid]["in_flight"]
    limit = 8000
    limited_in = tmp_path / "limited"  # one line per connection limited, from any process
    real, real_apsw = summary_module.worker_connection, fastscan.connect

    def mark(kind: str) -> None:
        with open(limited_in, "a") as out:
            out.write(f"{kind}\n")

    @contextlib.contextmanager
    def limited(uri: str, what: str) -> Iterator[sqlite3.Connection]:
        with real(uri, what) as conn:
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
            mark("sqlite3")
            yield conn

    @contextlib.contextmanager
    def limited_apsw(uri: str, what: str) -> Iterator[Any]:
        with real_apsw(uri, what) as conn:
            if conn is not None:
                conn.limit(apsw.SQLITE_LIMIT_LENGTH, limit)
                mark("apsw")
            yield conn

    monkeypatch.setattr(summary_module, "worker_connection", limited)
    monkeypatch.setattr(fastscan, "connect", limited_apsw)
    assert summaries(db, monkeypatch, how) == expected
    kinds = set(limited_in.read_text().split())
    assert kinds == ({"apsw"} if how == "workers" else {"sqlite3"})


def _slow_in_a_child(uri: str, low: int, high: int, *args: Any) -> Any:
    time.sleep(60)  # a forked child: still reading when the command gives up
    raise AssertionError("never asked for")


def test_workers_are_stopped_when_the_sessions_cannot_be_read(tmp_path: Path, monkeypatch):
    """The workers start before the sessions are looked up: if that fails, they are stopped
    and reaped (no process or pipe left behind), and the error is the command's."""
    import opencode_events.store.ranges as parallel_module

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no workers")
    db, _ = build(tmp_path, [], [])
    monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
    monkeypatch.setattr(summary_module, "_scan_range", _slow_in_a_child)
    children: list[Any] = []
    fork = parallel_module._Sharing._fork
    monkeypatch.setattr(
        parallel_module._Sharing, "_fork", lambda *a: children.append(fork(*a)) or children[-1]
    )
    try:
        with Store(db) as store:
            rows = store.sessions(top_level=False)

            def fails() -> dict[str, list[str]]:
                raise sqlite3.OperationalError("disk I/O error")

            monkeypatch.setattr(store, "children", fails)
            with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
                summary_module.summarize(store, rows)
        assert children
        for child in children:
            with pytest.raises(ChildProcessError):  # reaped already
                os.waitpid(child.pid, os.WNOHANG)
            assert child.results == -1  # its file of results closed
    finally:  # whatever happened above, no child outlives the test
        for child in children:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(child.pid, 0)


def test_apsw_reads_in_forked_children_only(tmp_path: Path, monkeypatch):
    """Two copies of SQLite must not open one file in one process (closing it in one drops
    the other's locks): apsw is opened by the forked workers only, never in the command's
    own process, which holds sqlite3's connection, not even to redo a child that died."""
    from opencode_events.store.ranges import in_forked_child

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no workers")
    db, _ = build(tmp_path, [p.values[0] for p in PARTS], [m.values[0] for m in MESSAGES])
    expected = summaries(db, monkeypatch, "per-session")
    opened, died = tmp_path / "opened", tmp_path / "died"
    real_connect, real_range = fastscan.connect, summary_module._scan_range

    @contextlib.contextmanager
    def logged(uri: str, what: str) -> Iterator[Any]:
        with real_connect(uri, what) as conn:
            if conn is not None:
                with open(opened, "a") as out:
                    out.write(f"{os.getpid()}\n")
            yield conn

    def first_child_dies(uri: str, low: int, high: int, *args: Any) -> Any:
        if in_forked_child():
            with contextlib.suppress(FileExistsError):
                died.touch(exist_ok=False)
                os._exit(1)  # no result: the parent redoes this range
        return real_range(uri, low, high, *args)

    monkeypatch.setattr(fastscan, "connect", logged)
    monkeypatch.setattr(summary_module, "_scan_range", first_child_dies)
    assert summaries(db, monkeypatch, "workers") == expected
    assert died.exists()
    pids = set(opened.read_text().split())
    assert pids and str(os.getpid()) not in pids


def test_costs_read_the_same_in_sessions_and_usage_without_float_noise():
    """Issue 20 §7: OpenCode's stored session cost is its own running sum
    (0.0065249999999999996 in samples/bash_fail); `sessions` writes it as `usage` writes the
    same session's sum, and CSV never in scientific notation."""
    import subprocess
    import sys

    cli = [sys.executable, "-m", "opencode_events"]
    for name in ("bash_fail", "task", "text", "parallel_tools"):
        db = str(SAMPLES / name / "opencode.db")
        rows = json.loads(
            subprocess.run(
                [*cli, "sessions", "--db", db, "--format", "json"], capture_output=True
            ).stdout
        )
        usage = json.loads(
            subprocess.run(
                [*cli, "usage", "--db", db, "--all", "--by", "session", "--format", "json"],
                capture_output=True,
            ).stdout
        )
        by_session = {r["session_id"]: r["cost"] for r in usage["rows"]}
        for row in rows:
            assert row["total_cost"] == by_session[row["id"]], (name, row["id"])
            assert len(repr(row["total_cost"])) < 16, row["total_cost"]  # no binary tail


@pytest.mark.parametrize(
    "value, cell",
    [(5.9e-05, "0.000059"), (0.1, "0.1"), (0.0, "0.0"), (2.0, "2.0"), (1e-12, "0.000000000001")],
)
def test_csv_writes_floats_positionally(value: float, cell: str):
    from opencode_events.output.rows import write_csv

    assert write_csv([{"cost": value}], ["cost"]).decode().splitlines()[1] == cell


@pytest.mark.parametrize("name", ["parallel_tools", "big_output", "task", "mcp"])
def test_json_spaced_by_another_writer_counts_the_same(tmp_path, name: str) -> None:
    """A database whose JSON has spaces after ``:`` and ``,`` (Python's json.dumps writes
    it so) gives the same sessions and usage as OpenCode's compact bytes."""
    import json as std_json
    import sqlite3

    from opencode_events.reports.sessions import sessions_report
    from opencode_events.reports.usage import stored_usage
    from opencode_events.store.open import open_store

    compact, spaced = tmp_path / "compact.db", tmp_path / "spaced.db"
    shutil.copyfile(SAMPLES / name / "opencode.db", compact)
    shutil.copyfile(SAMPLES / name / "opencode.db", spaced)
    conn = sqlite3.connect(spaced)
    for table in ("message", "part"):
        for rowid, data in conn.execute(f"SELECT rowid, data FROM {table}").fetchall():
            conn.execute(
                f"UPDATE {table} SET data = ? WHERE rowid = ?",
                (std_json.dumps(std_json.loads(data)), rowid),
            )
    conn.commit()
    conn.close()

    def reports(db):
        with open_store(db) as store:
            sessions = sessions_report(store, all_sessions=True).document()
            days = stored_usage(store, all_sessions=True, by="day").document()
        for row in sessions:
            row.pop("path")
        return sessions, days

    assert reports(spaced) == reports(compact)


def test_a_spaced_tool_head_is_counted_from_its_head(tmp_path, monkeypatch) -> None:
    """A spaced head is read as a head: the large part it starts is not loaded whole (the
    database's tool output, most of its bytes)."""
    import json as std_json
    import sqlite3

    from opencode_events.reports.sessions import sessions_report
    from opencode_events.store.open import open_store
    from opencode_events.store.sqlite import Store

    db = tmp_path / "spaced.db"
    shutil.copyfile(SAMPLES / "big_output" / "opencode.db", db)
    conn = sqlite3.connect(db)
    for rowid, data in conn.execute("SELECT rowid, data FROM part").fetchall():
        conn.execute(
            "UPDATE part SET data = ? WHERE rowid = ?",
            (std_json.dumps(std_json.loads(data)), rowid),
        )
    conn.commit()
    conn.close()
    loaded: list[int] = []
    real = Store.part_data
    monkeypatch.setattr(
        Store, "part_data", lambda self, rowid: loaded.append(rowid) or real(self, rowid)
    )
    with open_store(db) as store:
        (summary,) = sessions_report(store).sessions
    assert summary.tool_calls > 0 and loaded == []


def test_code_modes_script_calls_count_as_the_import_counts_them() -> None:
    """samples/code_mode: one execute call whose script called two MCP tools (one failed):
    three tool calls, two failures counted as the import's metrics count them, and the
    two MCP calls attributed to their server."""
    import json as std_json

    from opencode_events.reports.sessions import sessions_report
    from opencode_events.store.open import open_store

    db = SAMPLES / "code_mode" / "opencode.db"
    with open_store(db) as store:
        (summary,) = sessions_report(store, mcp_servers=lambda directory: ["my-tools_v1"]).sessions
    from opencode_events import stored_events

    with open_store(db) as store:
        (metrics,) = [e for e in stored_events(store, all_sessions=True) if e.kind == "metrics"]
    metrics = std_json.loads(msgspec.json.encode(metrics))
    assert (summary.tool_calls, summary.tool_failures) == (3, 1)
    assert (summary.tool_calls, summary.tool_failures) == (
        metrics["tool_calls"],
        metrics["tool_failures"],
    )
    assert summary.mcp_calls == {"my-tools_v1": 2}


def test_an_archived_session_says_when_and_still_counts() -> None:
    """samples/serve_revert was archived at the end: sessions names the time (OpenCode's
    lists hide it) and keeps its figures; a session never archived has none."""
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.store.open import open_store

    db = SAMPLES / "serve_revert" / "opencode.db"
    ((archived, cost),) = (
        sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        .execute("SELECT time_archived, cost FROM session")
        .fetchall()
    )
    with open_store(db) as store:
        (summary,) = sessions_report(store).sessions
    assert summary.time_archived == archived and summary.cost == pytest.approx(cost)
    with open_store(SAMPLES / "task" / "opencode.db") as store:
        assert {s.time_archived for s in sessions_report(store, all_sessions=True).sessions} == {
            None
        }


def test_a_ledger_sums_a_sessions_calls_counted_in_several_ranges():
    """Workers count the tool parts of their rowid ranges; a session whose parts span two
    ranges has its calls of a tool and outcome summed, in the order each first came, and
    a session of no summary (a scan sees every session) still has its entry."""
    from opencode_events.reports import sessions as S

    first = ({("ses_a", "bash", False): 2, ("ses_a", "read", True): 1}, {"ses_a": [1, 2, False]})
    second = ({("ses_a", "bash", False): 3, ("ses_b", None, False): 1}, {"ses_a": [0, 1, True]})
    entries = S._ledger_entries(iter([first, second]), {}, {})
    assert entries["ses_a"] == S.SessionCounts(1, 3, True, [("bash", False, 5), ("read", True, 1)])
    assert entries["ses_b"] == S.SessionCounts(0, 0, False, [(None, False, 1)])
    assert list(entries) == ["ses_a", "ses_b"]


def test_summaries_made_of_rows_let_go_are_the_same():
    """``sessions_report`` hands its session rows over (``let_go``): the list is emptied
    once the summaries are made, so a report of many sessions does not hold them while
    the tables are counted; the summaries, in the rows' order, are the same."""
    db = SAMPLES / "task" / "opencode.db"
    with Store(db) as store:
        rows = store.sessions()
        assert len(rows) > 1  # a session and its subagent: the order is checked
        kept = summary_module.summarize(store, rows, now_ms=0)
        handed = list(rows)
        let_go = summary_module.summarize(store, handed, now_ms=0, let_go=True)
    assert handed == []
    assert let_go == kept
    assert [summary.id for summary in let_go] == [row.id for row in rows]


@pytest.mark.parametrize("front", [False, True], ids=["pad-last", "pad-first"])
def test_usage_turns_count_odd_parts_as_sessions_does(tmp_path: Path, monkeypatch, front: bool):
    """``usage --by turn`` counts a turn's tool calls as ``sessions`` counts them: every odd
    part, as it is and made large, in a turn's reply gives the calls ``sessions`` gives,
    which are those decoding it whole gives but for a large part that starts the way
    OpenCode writes a tool part (taken at its head's word: docs/store.md's one limit)."""
    from opencode_events.reports.usage import store_usage

    monkeypatch.setenv("OPENCODE_EVENTS_STALE_AFTER", str(10**12))
    rows = [p.values[0] for p in PARTS]
    rows += [_padded(row, front) for row in rows]
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "mcp" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (template,) = conn.execute("SELECT id FROM session LIMIT 1").fetchone()
    columns = [row[1] for row in conn.execute("PRAGMA table_info(session)")]
    copy = ", ".join("?" if c == "id" else c for c in columns)
    for n, data in enumerate(rows):
        sid, user, reply = f"ses_odd{n:04d}", f"msg_odd{n:04d}a", f"msg_odd{n:04d}b"
        conn.execute(
            f"INSERT INTO session SELECT {copy} FROM session WHERE id = ?", (sid, template)
        )
        # begun before its messages: alike as they are, they are no fork's copied history
        conn.execute("UPDATE session SET time_created = 0 WHERE id = ?", (sid,))
        prompt = '{"role":"user","time":{"created":1}}'
        answer = json.dumps({"role": "assistant", "parentID": user, "time": {"created": 2}})
        conn.execute("INSERT INTO message VALUES (?, ?, 1, 1, ?)", (user, sid, prompt))
        conn.execute("INSERT INTO message VALUES (?, ?, 2, 2, ?)", (reply, sid, answer))
        conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, 2, 2, ?)", (f"prt_odd{n:04d}", reply, sid, data)
        )
    conn.commit()
    conn.close()
    counted = summaries(db, monkeypatch, "per-session")
    with Store(db) as store:
        for n, data in enumerate(rows):
            sid = f"ses_odd{n:04d}"
            report = store_usage(store, [sid], by="turn")
            calls = sum(row.tool_calls or 0 for row in report.rows)
            assert calls == counted[sid]["tool_calls"], data
            large = len(data.encode() if isinstance(data, str) else data) >= 256
            if not (large and _usual_head(data)):
                assert calls == expected_tools([data])[0], data
    # and read by workers (apsw's SQLite: a part over fastscan.BIG bytes read only as far
    # as its head), every session at once: the same calls
    from opencode_events.reports import usage as usage_module
    from opencode_events.reports.usage import stored_usage

    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "2")
    monkeypatch.setattr(usage_module, "_PARALLEL_MIN_SESSIONS", 2)
    with Store(db) as store:
        report = stored_usage(store, all_sessions=True)
    by_session: dict[str, int] = {}
    for row in report.rows:
        by_session[row.session_id] = by_session.get(row.session_id, 0) + (row.tool_calls or 0)
    for n, data in enumerate(rows):
        sid = f"ses_odd{n:04d}"
        assert by_session.get(sid, 0) == counted[sid]["tool_calls"], data


@pytest.mark.parametrize(
    "head",
    [
        '{"type": "tool", "tool": "bash", "callID": "c", "state": {"status": "error", "x": 1',
        '{"type": "tool", "callID": "call_1", "tool": "task", "state": {"status": "completed"',
        '{"type":"tool", "tool":"bash","callID": "c","state":{"status": "running"',  # mixed
        '{"type": "tool", "tool": "my_mcp_tool", "callID": "", "state": {"status": "pending"',
    ],
)
def test_a_head_in_pythons_spacing_is_counted_as_the_loose_match_counts_it(head: str) -> None:
    """The quick forms for json.dumps' spacing take the tool and status the loose match's
    decode gives: the same counts, without the decode."""
    data = head.encode() + b' "pad": "' + b"p" * 300 + b'"}}'
    quick = summary_module._TOOL_HEAD_SPACED.match(data) or (
        summary_module._TOOL_HEAD_SPACED_CALL_FIRST.match(data)
    )
    loose = summary_module._TOOL_HEAD_ESCAPED.match(data)
    assert quick is not None and loose is not None
    part = summary_module._PART.decode(loose[0] + b"}}")
    assert (quick[1].decode(), quick[2].decode()) == (part.tool, part.state.status)


@pytest.mark.parametrize(
    "head",
    [
        '{"type":  "tool", "tool": "bash", "callID": "c", "state": {"status": "error"',  # two
        '{"type": "tool", "tool": "b\\u0061sh", "callID": "c", "state": {"status": "error"',
        '{"type": "tool", "tool": "bäsh", "callID": "c", "state": {"status": "error"',
        '{"type":\t"tool", "tool": "bash", "callID": "c", "state": {"status": "error"',
    ],
)
def test_other_spacing_and_escapes_are_left_to_the_loose_match(head: str) -> None:
    data = head.encode() + b"}}"
    assert not summary_module._TOOL_HEAD_SPACED.match(data)
    assert not summary_module._TOOL_HEAD_SPACED_CALL_FIRST.match(data)
    assert summary_module._TOOL_HEAD_ESCAPED.match(data)
