"""`opencode-events attach` against the real `opencode serve`, driven by the scripted model.

The session is prompted through the server's HTTP API, a bash permission prompt is
answered through it, and attach ends by itself when the run goes idle. Its events are
checked against what OpenCode published (the harness's own capture of /event) and
against the same session read from the store afterwards with `import`. The reconnect
policy is checked against a small local SSE server that drops the connection.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.opencode import free_port
from tests.harness.scenarios import U, call, say, tools

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "opencode_events"]
SAMPLES = REPO / "samples"


class Attach:
    """`opencode-events attach …` as a child process; stdout collected on a thread."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "attach", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self._threads = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _drain(stream: Any, sink: list[bytes]) -> None:
        for line in stream:
            sink.append(line)

    def wait_stderr(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stderr:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"attach never said {text!r}; stderr: {self.stderr}")

    @property
    def stderr(self) -> str:
        return b"".join(self.err).decode("utf-8", "replace")

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out if line.strip()]

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@contextlib.contextmanager
def attached(*args: str, env: dict[str, str] | None = None):
    a = Attach(*args, env=env)
    try:
        yield a
    finally:
        a.stop()


def comparable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the live view and the store both know: no permissions (server only), no
    per-read provenance, and usage without the step-finish part id."""
    out = []
    for e in events:
        if e["kind"] in ("permission", "metrics"):
            continue
        e = {k: v for k, v in e.items() if k not in ("line", "seq", "time", "raw", "source")}
        if e["kind"] == "usage":
            e.pop("part_id", None)
        out.append(e)
    return out


def test_attach_prompt_permission_idle(mock_model, opencode_env):
    m = mock_model(
        [
            tools(call("bash", {"command": "echo approved"}, "call_ok"), usage=U(1500, 20, 0, 0)),
            tools(call("bash", {"command": "echo refused"}, "call_no"), usage=U(1600, 21, 1400, 0)),
            say("Only one ran.", usage=U(1700, 6, 1500, 0)),
        ]
    )
    env = opencode_env(m, config={"permission": {"bash": "ask"}})
    with env.serve() as srv:
        capture = srv.sse("/event")
        sid = srv.create_session()["id"]
        with attached(
            srv.url, "--session", sid, "--until-idle", "--format", "jsonl", "--raw"
        ) as attach:
            attach.wait_stderr("attached to")
            srv.prompt_async(sid, "run the commands")
            asked = capture.wait_for(lambda e: e.get("type") == "permission.asked")
            first = asked["properties"]["id"]
            srv.json("POST", f"/permission/{first}/reply", {"reply": "once"})
            asked = capture.wait_for(
                lambda e: e.get("type") == "permission.asked" and e["properties"]["id"] != first
            )
            second = asked["properties"]["id"]
            srv.json(
                "POST",
                f"/permission/{second}/reply",
                {"reply": "reject", "message": "not that one"},
            )
            code = attach.wait(timeout=90)  # ends by itself: --until-idle
            assert code == 0, attach.stderr
            events = attach.events()
        published = list(capture.events)

    kinds = [e["kind"] for e in events]
    assert kinds == [
        "prompt",
        "permission",
        "permission",
        "command",
        "usage",
        "permission",
        "permission",
        "command",
        "usage",
        "message",
        "usage",
        "metrics",
    ], kinds
    assert all(e["session_id"] == sid for e in events)
    perms = [e for e in events if e["kind"] == "permission"]
    assert [(p["id"], p.get("reply")) for p in perms] == [
        (first, None),
        (first, "once"),
        (second, None),
        (second, "reject"),
    ]
    assert perms[0]["permission"] == "bash" and perms[0]["patterns"] == ["echo approved"]
    ok, refused = [e for e in events if e["kind"] == "command"]
    assert (ok["command"], ok["exit_code"], ok["success"]) == ("echo approved", 0, True)
    assert (refused["command"], refused["success"]) == ("echo refused", False)
    assert "not that one" in refused["error"]
    assert events[-2]["kind"] == "usage" and events[-3]["text"] == "Only one ran."

    # Against what OpenCode published: the terminal tool parts and completed messages.
    tool_parts = {}
    for e in published:
        if e.get("type") == "message.part.updated" and e["properties"]["part"]["type"] == "tool":
            tool_parts[e["properties"]["part"]["id"]] = e["properties"]["part"]
    assert [ok["part_id"], refused["part_id"]] == list(tool_parts)
    assert ok["raw"]["properties"]["part"] == tool_parts[ok["part_id"]]
    assert tool_parts[ok["part_id"]]["state"]["status"] == "completed"
    completed = {}
    for e in published:
        info = e.get("properties", {}).get("info", {})
        if e.get("type") == "message.updated" and info.get("time", {}).get("completed"):
            completed[info["id"]] = info
    usages = [e for e in events if e["kind"] == "usage"]
    assert [u["message_id"] for u in usages] == list(completed)
    for u in usages:
        tokens = completed[u["message_id"]]["tokens"]
        assert u["input_tokens"] == tokens["input"] and u["output_tokens"] == tokens["output"]
        assert u["cache_read_tokens"] == tokens["cache"]["read"]
        assert u["total_tokens"] == tokens["total"]
    metrics = events[-1]
    assert metrics["turns"] == 3 and metrics["tool_calls"] == 2 and metrics["tool_failures"] == 1

    # The same session read from the store afterwards.
    stored = subprocess.run(
        [*CLI, "import", sid, "--db", str(env.db_path), "--format", "jsonl"],
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    assert stored.returncode == 0, stored.stderr.decode()
    from_store = [json.loads(line) for line in stored.stdout.splitlines()]
    assert comparable(events) == comparable(from_store)


def test_attach_pretty_to_a_file(mock_model, opencode_env, tmp_path):
    m = mock_model([say("Hello over attach.", usage=U(1200, 8, 0, 0))])
    env = opencode_env(m)
    out = tmp_path / "view.txt"
    with env.serve() as srv:
        sid = srv.create_session()["id"]
        with attached(srv.url, "--until-idle", "--format", "pretty", "-o", str(out)) as attach:
            attach.wait_stderr("attached to")
            srv.prompt_async(sid, "hello")
            assert attach.wait(timeout=60) == 0, attach.stderr
    text = out.read_text()
    assert "» hello" in text and "› Hello over attach." in text and "step 1" in text
    assert '{"kind"' not in text


def test_attach_to_a_session_the_server_does_not_know(mock_model, opencode_env):
    """The real server answers GET /session/ID 404 for an unknown id: attach says so and
    exits 2 at once, where it used to wait for that session's idle forever; the stream's
    own URL (…/event) is read as given, and a prefix of a real session is followed."""
    m = mock_model([say("Hello.", usage=U(1200, 8, 0, 0))])
    env = opencode_env(m)
    with env.serve() as srv:
        sid = srv.create_session()["id"]
        unknown = subprocess.run(
            [*CLI, "attach", srv.url + "/event", "--session", "ses_nope"],
            capture_output=True,
            cwd=REPO,
            timeout=30,
        )
        with attached(srv.url + "/event", "--session", sid[:14], "--format", "jsonl") as attach:
            attach.wait_stderr("attached to")
            srv.prompt_async(sid, "hello")
            assert attach.wait(timeout=60) == 0, attach.stderr
            kinds = [e["kind"] for e in attach.events()]
    assert (unknown.returncode, unknown.stdout) == (2, b"")
    assert unknown.stderr.decode() == (
        f"error: {srv.url} has no session ses_nope (GET /session/ses_nope: 404)\n"
    )
    assert "message" in kinds and kinds[-1] == "metrics"


def test_attach_nothing_listening():
    port = free_port()
    result = subprocess.run(
        [*CLI, "attach", f"http://127.0.0.1:{port}"], capture_output=True, cwd=REPO, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.decode().strip() == (
        f"error: cannot connect to http://127.0.0.1:{port}: nothing is listening there"
    )
    assert result.stdout == b""


def test_attach_basic_auth(mock_model, opencode_env):
    """OPENCODE_SERVER_PASSWORD on the server: 401 without it, a clear error for a wrong
    one, and a working stream with the right one (user "opencode")."""
    m = mock_model([])
    env = opencode_env(m, extra_env={"OPENCODE_SERVER_PASSWORD": "s3cret"})
    port = free_port()
    log = open(env.root / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        env.command("serve", "--hostname", "127.0.0.1", "--port", str(port)),
        cwd=env.work,
        env=env.env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _answers(port):
            assert proc.poll() is None, (env.root / "serve.log").read_text()
            assert time.monotonic() < deadline, "opencode serve did not start"
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}"
        clean = {"OPENCODE_SERVER_PASSWORD": "", "OPENCODE_SERVER_USERNAME": ""}
        result = subprocess.run(
            [*CLI, "attach", url],
            capture_output=True,
            cwd=REPO,
            timeout=30,
            env={**os.environ, **clean},
        )
        assert result.returncode == 2
        assert result.stderr.decode().strip() == (
            f"error: {url} requires a password: set OPENCODE_SERVER_PASSWORD"
        )
        wrong = {**clean, "OPENCODE_SERVER_PASSWORD": "nope"}
        result = subprocess.run(
            [*CLI, "attach", url],
            capture_output=True,
            cwd=REPO,
            timeout=30,
            env={**os.environ, **wrong},
        )
        assert result.returncode == 2
        assert "rejected the password (user 'opencode'" in result.stderr.decode()
        with attached(url, env={**clean, "OPENCODE_SERVER_PASSWORD": "s3cret"}) as attach:
            attach.wait_stderr("attached to")
            assert attach.proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _answers(port: int) -> bool:
    """The server answers HTTP (401 without the password) on 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/global/health")
        return conn.getresponse().status in (200, 401)
    except OSError:
        return False
    finally:
        conn.close()


# ------------------------------------------------------------------ reconnecting


class _FlakyServer(http.server.ThreadingHTTPServer):
    """Serves a captured stream in two connections: the first is cut mid-stream."""

    daemon_threads = True

    def __init__(self, frames: list[bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _FlakyHandler)
        self.frames = frames
        self.connections = 0
        self.cut = len(frames) // 2


class _FlakyHandler(http.server.BaseHTTPRequestHandler):
    server: _FlakyServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if not self.path.startswith("/event"):  # GET /session/status after a reconnect
            self.send_error(404)
            return
        self.server.connections += 1
        first = self.server.connections == 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        frames = self.server.frames
        if first:
            self.wfile.write(b"retry: 100\n\n")
            for f in frames[: self.server.cut]:
                self.wfile.write(f)
            self.wfile.write(frames[self.server.cut][:25])  # cut inside a frame
            self.wfile.flush()
            return  # the connection closes
        # The server replays from the frame that was cut (a client sees repeats).
        for f in frames[self.server.cut - 3 :]:
            self.wfile.write(f)
            self.wfile.flush()
        time.sleep(5)


def test_attach_reconnects_without_doubling():
    sample = (SAMPLES / "serve_permission" / "events.sse").read_bytes()
    frames = [f + b"\n\n" for f in sample.split(b"\n\n") if f.strip()]
    server = _FlakyServer(frames)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with attached(url, "--until-idle", "--format", "jsonl") as attach:
            assert attach.wait(timeout=30) == 0, attach.stderr
            events = attach.events()
            assert "connection to" in attach.stderr and "reconnected to" in attach.stderr
    finally:
        server.shutdown()
        server.server_close()
    assert server.connections == 2
    offline = subprocess.run(
        [*CLI, "normalize", str(SAMPLES / "serve_permission" / "events.sse")],
        capture_output=True,
        cwd=REPO,
        timeout=30,
    )
    expected = [json.loads(line) for line in offline.stdout.splitlines()]
    drop = ("line", "seq", "records")
    assert [{k: v for k, v in e.items() if k not in drop} for e in events] == [
        {k: v for k, v in e.items() if k not in drop} for e in expected
    ]


# ------------------------------------------------------------------------ run


def test_run_drives_opencode(mock_model, opencode_env, tmp_path):
    m = mock_model(
        [
            tools(call("bash", {"command": "echo via run; exit 5"}, "call_r"), usage=U(1500, 20)),
            say("Ran it.", usage=U(1600, 5, 1400)),
        ]
    )
    env = opencode_env(m)
    tee = tmp_path / "raw.jsonl"
    result = subprocess.run(
        [*CLI, "run", "--format", "jsonl", "--tee", str(tee), "-m", "mock/mock-model", "go"],
        capture_output=True,
        cwd=env.work,
        timeout=120,
        env={**env.env, "OPENCODE_BIN": env.binary, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr.decode()
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds == ["command", "usage", "message", "usage", "metrics"], kinds
    assert events[0]["command"] == "echo via run; exit 5" and events[0]["exit_code"] == 5
    # the tee is OpenCode's stream byte for byte: normalizing it gives the same events
    offline = subprocess.run(
        [*CLI, "normalize", str(tee)], capture_output=True, cwd=REPO, timeout=30
    )
    assert offline.stdout == result.stdout


def test_run_passes_ctrl_c_to_opencode(mock_model, opencode_env):
    m = mock_model(
        [
            tools(
                call("bash", {"command": "echo started; sleep 30; echo finished"}, "call_s"),
                usage=U(1500, 20),
            ),
            say("Should not be reached.", usage=U(1600, 5)),
        ]
    )
    env = opencode_env(m)
    proc = subprocess.Popen(
        [*CLI, "run", "--format", "jsonl", "-m", "mock/mock-model", "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=env.work,
        start_new_session=True,
        env={**env.env, "OPENCODE_BIN": env.binary, "PYTHONPATH": str(REPO)},
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not any(r.step == 0 for r in m.requests) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # the slow bash is running
        started = _descendants(proc.pid)  # OpenCode runs bash in a group of its own
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)  # only our process, as a terminal would deliver it
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 20  # OpenCode stopped; the sleep 30 did not finish
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in started:  # what outlived OpenCode (its tool's shell)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # OpenCode dies of the SIGINT (the `sigint` sample: returncode -2) → 128 + 2
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err


def _descendants(root: int) -> list[int]:
    """Pids of every process below ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


QUESTION = {
    "questions": [
        {
            "question": "Which colour?",
            "header": "Colour",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
        }
    ]
}


def test_attach_a_question_answered_then_one_dismissed(mock_model, opencode_env):
    """The question tool of a served session: each ask and reply a `question` event, linked
    to its tool call; the call itself an unknown with the questions and the answers, in the
    live view and in the store alike."""
    m = mock_model(
        [
            tools(call("question", QUESTION, "call_q1"), usage=U(1500, 20, 0, 0)),
            tools(call("question", QUESTION, "call_q2"), usage=U(1600, 21, 1400, 0)),
            say("Not reached: the question was dismissed.", usage=U(1700, 6, 1500, 0)),
        ]
    )
    env = opencode_env(m)
    with env.serve() as srv:
        capture = srv.sse("/event")
        sid = srv.create_session()["id"]
        with attached(srv.url, "--session", sid, "--until-idle", "--format", "jsonl") as attach:
            attach.wait_stderr("attached to")
            srv.prompt_async(sid, "ask me")
            first = capture.wait_for(lambda e: e.get("type") == "question.asked")
            first_id = first["properties"]["id"]
            srv.json("POST", f"/question/{first_id}/reply", {"answers": [["Blue"]]})
            second = capture.wait_for(
                lambda e: e.get("type") == "question.asked" and e["properties"]["id"] != first_id
            )
            second_id = second["properties"]["id"]
            srv.json("POST", f"/question/{second_id}/reject")
            code = attach.wait(timeout=90)
            assert code == 0, attach.stderr
            events = attach.events()
    questions = [e for e in events if e["kind"] == "question"]
    assert [(q["id"], q.get("reply"), q["call_id"]) for q in questions] == [
        (first_id, None, "call_q1"),
        (first_id, "answer", "call_q1"),
        (second_id, None, "call_q2"),
        (second_id, "reject", "call_q2"),
    ]
    assert questions[0]["questions"] == ["Which colour?"] and questions[1]["answers"] == [["Blue"]]
    stored = subprocess.run(
        [*CLI, "import", sid, "--db", str(env.db_path), "--format", "jsonl"],
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    from_store = [json.loads(line) for line in stored.stdout.splitlines()]
    for source in (events, from_store):
        calls = [e for e in source if e.get("tool") == "question"]
        assert [(c["kind"], c["success"], c.get("answers")) for c in calls] == [
            ("unknown", True, [["Blue"]]),
            ("unknown", False, None),
        ]
    assert [e for e in comparable(events) if e["kind"] != "question"] == comparable(from_store)


def test_import_marks_what_an_undo_undid_until_the_next_prompt(mock_model, opencode_env):
    """POST /session/{id}/revert (the TUI's /undo) keeps the undone turn stored, marked by the
    session's revert: `import` marks its events; the next prompt deletes it (and OpenCode
    takes its cost off the session), and nothing is marked any more."""
    m = mock_model(
        [
            say("First answer.", usage=U(1000, 5, 0, 0)),
            say("Second answer, to be undone.", usage=U(1100, 6, 900, 0)),
            say("Third answer.", usage=U(1200, 7, 1000, 0)),
        ]
    )
    env = opencode_env(m)

    def imported(sid: str) -> list[dict[str, Any]]:
        result = subprocess.run(
            [*CLI, "import", sid, "--db", str(env.db_path), "--format", "jsonl"],
            capture_output=True,
            cwd=REPO,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr.decode()
        return [json.loads(line) for line in result.stdout.splitlines()]

    with env.serve() as srv:
        sid = srv.create_session()["id"]
        srv.prompt(sid, "first")
        srv.prompt(sid, "second")
        users = [
            m for m in srv.json("GET", f"/session/{sid}/message") if m["info"]["role"] == "user"
        ]
        srv.json("POST", f"/session/{sid}/revert", {"messageID": users[-1]["info"]["id"]})
        undone = imported(sid)
        assert [(e["kind"], e.get("reverted")) for e in undone[:-1]] == [
            ("prompt", None),
            ("message", None),
            ("usage", None),
            ("prompt", True),
            ("message", True),
            ("usage", True),
        ]
        srv.prompt(sid, "third")
        after = imported(sid)
    assert not [e for e in after if "reverted" in e]
    assert [e["text"] for e in after if e["kind"] == "prompt"] == ["first", "third"]
