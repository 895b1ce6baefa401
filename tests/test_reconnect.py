"""`attach` across a server restart (docs/server-events.md#reconnecting): a stand-in for
`opencode serve` whose every /event connection is scripted: the first streams a run up to
(not including) its idle and drops; what answers next is the restarted server."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CMD = [sys.executable, "-m", "opencode_events"]
SAMPLE = (REPO / "samples" / "serve_text" / "events.sse").read_bytes()
FRAMES = [f + b"\n\n" for f in SAMPLE.split(b"\n\n") if f.strip()]
IDLE = next(i for i, f in enumerate(FRAMES) if b'"session.idle"' in f or b'"type":"idle"' in f)
SESSION = SAMPLE.split(b'"sessionID":"')[1].split(b'"')[0].decode()
HEARTBEAT = b'data: {"type":"server.heartbeat","properties":{}}\n\n'


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@contextlib.contextmanager
def restarting_server(
    connections: list[Callable[[http.server.BaseHTTPRequestHandler, threading.Event], None]],
    status: Callable[[int], tuple[int, object]] = lambda n: (200, {}),
    session: Callable[[int], int] = lambda n: 200,
) -> Iterator[str]:
    """``connections[n]`` answers the n-th GET /event; ``status(n)`` and ``session(n)``
    answer GET /session/status and GET /session/ID after n /event connections."""
    done = threading.Event()
    count = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _json(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - the abort of --max-cost
            self._json(200 if self.path.endswith("/abort") else 404, True)

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.partition("?")[0]
            if path == "/event":
                count[0] += 1
                connections[min(count[0], len(connections)) - 1](self, done)
            elif path == "/session/status":
                self._json(*status(count[0]))
            elif path == "/session":
                self._json(200, [{"id": SESSION}] if session(count[0]) == 200 else [])
            elif path.startswith("/session/"):
                self._json(session(count[0]), {"id": path.rsplit("/", 1)[1]})
            else:
                self._json(404, {})

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        done.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def _stream(frames: list[bytes], hold: float = 0.0, headers: dict[str, str] | None = None):
    """An /event answer: ``frames``, then a heartbeat every 0.5 s for ``hold`` seconds;
    ``headers`` added to (or in place of) its Content-Type."""
    sent = {"Content-Type": "text/event-stream", **(headers or {})}

    def answer(handler: http.server.BaseHTTPRequestHandler, done: threading.Event) -> None:
        handler.send_response(200)
        for name, value in sent.items():
            handler.send_header(name, value)
        handler.end_headers()
        with contextlib.suppress(OSError):
            handler.wfile.write(b"".join(frames))
            handler.wfile.flush()
            waited = 0.0
            while waited < hold and not done.is_set():  # heartbeats, as OpenCode sends
                done.wait(0.5)
                waited += 0.5
                handler.wfile.write(HEARTBEAT)
                handler.wfile.flush()

    return answer


def _closed(handler: http.server.BaseHTTPRequestHandler, _done: threading.Event) -> None:
    handler.close_connection = True  # accepted, closed without an answer (`ssh -L`, a proxy)


def _unavailable(handler: http.server.BaseHTTPRequestHandler, _done: threading.Event) -> None:
    handler.send_response(503)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def attach(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CMD, "attach", url, "--format", "jsonl", *args],
        capture_output=True,
        timeout=25,
        cwd=REPO,
    )


def _kinds(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [json.loads(line)["kind"] for line in result.stdout.splitlines()]


@pytest.mark.parametrize("meanwhile", [_closed, _unavailable], ids=["closed", "503"])
def test_a_reconnect_refused_by_a_server_restarting_is_tried_again(meanwhile):
    """A forward or a proxy in front of a restarting OpenCode accepts and closes, or
    answers 503: that is no reason to give up on the first reconnect (exit 2)."""
    with restarting_server(
        [_stream(FRAMES[:IDLE]), meanwhile, _stream(FRAMES[IDLE:], hold=5)],
        status=lambda n: (200, {SESSION: {"type": "busy"}}),
    ) as url:
        result = attach(url)
    assert result.returncode == 0, result.stderr.decode()
    assert "reconnected to" in result.stderr.decode()
    whole = subprocess.run(
        [*CMD, "normalize", str(REPO / "samples" / "serve_text" / "events.sse")],
        capture_output=True,
        cwd=REPO,
        timeout=30,
    )
    assert _kinds(result) == _kinds(whole)


@pytest.mark.parametrize("args", [[], ["--session", SESSION], ["--max-cost", "100"]])
def test_a_run_the_restart_killed_ends_attach_instead_of_waiting_forever(args):
    """The server restarted in the middle of the run: the new one never ran it, sends no
    idle for it, and says so in GET /session/status ({})."""
    with restarting_server([_stream(FRAMES[:IDLE]), _stream(FRAMES[:1], hold=20)]) as url:
        result = attach(url, *args)
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert f"{SESSION} is no longer at work on {url}" in stderr
    assert _kinds(result)[-1] == "metrics"


def test_a_run_still_at_work_after_a_reconnect_is_followed_to_its_idle():
    with restarting_server(
        [_stream(FRAMES[:IDLE]), _stream(FRAMES[IDLE:], hold=5)],
        status=lambda n: (200, {SESSION: {"type": "busy"}}),
    ) as url:
        result = attach(url)
    assert result.returncode == 0, result.stderr.decode()
    assert "no longer at work" not in result.stderr.decode()


def test_a_server_on_another_database_is_one_error_line_not_a_wait_forever():
    with restarting_server(
        [_stream(FRAMES[:IDLE]), _stream(FRAMES[:1], hold=20)],
        session=lambda n: 200 if n <= 1 else 404,
    ) as url:
        result = attach(url, "--session", SESSION)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode().splitlines()[-1] == (
        f"error: {url} no longer has session {SESSION} (another OpenCode, on another "
        "database, answers there now?)"
    )


def test_a_run_aborted_over_max_cost_and_then_restarted_away_still_exits_3():
    """--max-cost crossed, the abort sent, and the server restarted before its idle came."""
    with restarting_server([_stream(FRAMES[:IDLE]), _stream(FRAMES[:1], hold=20)]) as url:
        result = attach(url, "--session", SESSION, "--max-cost", "0.001")
    assert result.returncode == 3, result.stderr.decode()
    assert "aborted it" in result.stderr.decode() and _kinds(result)[-1] == "metrics"


def attach_retrying_fast(
    url: str, *, attempts: int, answer_within: float | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`attach URL` whose reconnects wait 0.05 s, ``attempts`` of them in a row at most;
    ``answer_within``: the seconds a server has to answer a connection (ANSWER_TIMEOUT)."""
    script = (
        "import runpy, sys; from opencode_events.cli import live;"
        f"live.follow.__kwdefaults__['delays'] = (0.05,) * {attempts};"
        + (f"live.ANSWER_TIMEOUT = {answer_within};" if answer_within is not None else "")
        + "sys.argv[0] = 'opencode-events';"
        "runpy.run_module('opencode_events', run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", script, "attach", url, "--format", "jsonl"],
        capture_output=True,
        timeout=25,
        cwd=REPO,
    )


def test_a_server_that_drops_every_connection_at_once_is_given_up_on():
    """A crash-looping server: each connection says server.connected and closes. The count
    of failed attempts must not start again at each one (a reconnect every 0.5 s for ever)."""
    with restarting_server([_stream(FRAMES[:1])]) as url:
        result = attach_retrying_fast(url, attempts=4)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode().splitlines()[-1] == f"error: lost the connection to {url}"


def test_a_proxy_dropping_streams_while_events_flow_is_not_given_up_on():
    """A proxy that closes a stream idle for a few seconds (shorter than the 10 s a
    connection must last to reset the count): each connection brought events, so the
    drops are no failures in a row, and attach follows the run to its idle."""
    slices = [_stream(FRAMES[at : at + 2]) for at in range(0, len(FRAMES), 2)]
    assert len(slices) > 4  # more drops than attempts allowed
    busy = {SESSION: {"type": "busy"}}
    with restarting_server(slices, status=lambda n: (200, busy)) as url:
        result = attach_retrying_fast(url, attempts=3)
    assert result.returncode == 0, result.stderr.decode()
    assert _kinds(result)[-1] == "metrics"


def test_otel_names_the_agent_of_a_run_the_restart_killed_before_a_step_ended(tmp_path):
    """No step-finish, so no usage to name the agent: the run's messages name it."""
    first_step = next(i for i, f in enumerate(FRAMES) if b'"step-finish"' in f)
    assert b'"agent":"build"' in b"".join(FRAMES[:first_step])
    spans = tmp_path / "spans.jsonl"
    with restarting_server([_stream(FRAMES[:first_step]), _stream(FRAMES[:1], hold=20)]) as url:
        result = attach(url, "--otel", str(spans))
    assert result.returncode == 0, result.stderr.decode()
    assert "usage" not in _kinds(result)
    (body,) = [
        json.loads(line) for line in spans.read_text().splitlines() if "resourceSpans" in line
    ]
    names = [
        s["name"] for r in body["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]
    ]
    assert "invoke_agent build" in names, names


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A server frozen (SIGSTOP), or a forward to nothing: connections are accepted by the
    kernel (the listen backlog) and never answered."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_accepts_and_never_answers_is_given_up_on_in_the_answer_time():
    """Not the stream's 35 s silence for each attempt (a first connection to a frozen
    server took 35 s to fail, and eight reconnects to one about six minutes)."""
    with silent_server() as url:
        result = attach_retrying_fast(url, attempts=1, answer_within=0.5)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode().splitlines()[-1] == (
        f"error: cannot connect to {url}: no answer in 0.5 s"
    )


def test_a_stream_once_answered_keeps_the_silence_rule_not_the_answer_time():
    """Heartbeats 0.5 s apart, the answer time 0.2 s: the stream is not taken for dropped."""

    def slow(handler: http.server.BaseHTTPRequestHandler, done: threading.Event) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        with contextlib.suppress(OSError):
            handler.wfile.write(b"".join(FRAMES[:IDLE]))
            handler.wfile.flush()
            for _ in range(3):
                done.wait(0.5)
                handler.wfile.write(HEARTBEAT)
                handler.wfile.flush()
            handler.wfile.write(b"".join(FRAMES[IDLE:]))
            handler.wfile.flush()
            done.wait(5)

    with restarting_server([slow]) as url:
        result = attach_retrying_fast(url, attempts=3, answer_within=0.2)
    assert result.returncode == 0, result.stderr.decode()
    assert "lost" not in result.stderr.decode()
    assert _kinds(result)[-1] == "metrics"


@pytest.mark.parametrize(
    "event_id", ["世界".encode(), b"\xff\xfe"], ids=["beyond-latin-1", "not-utf-8"]
)
def test_a_reconnect_after_an_id_beyond_latin_1_sends_it_back_as_utf_8(event_id):
    """`id:` is any text: sent back as Last-Event-ID, it is UTF-8 (as a browser's
    EventSource sends it), never an `error: not a server URL` that ends attach."""
    seen: list[bytes | None] = []

    def remember(stream):
        def answer(handler, done):
            seen.append(handler.headers.get("Last-Event-ID", failobj=None))
            stream(handler, done)

        return answer

    first = [b"id: " + event_id + b"\n\n", *FRAMES[:IDLE]]
    with restarting_server(
        [remember(_stream(first)), remember(_stream(FRAMES[IDLE:], hold=5))],
        status=lambda n: (200, {SESSION: {"type": "busy"}}),
    ) as url:
        result = attach(url)
    assert result.returncode == 0, result.stderr.decode()
    assert "reconnected to" in result.stderr.decode()
    assert _kinds(result)[-1] == "metrics"
    # http.server reads headers as Latin-1: the UTF-8 bytes come back that way
    assert seen[1] is not None
    assert seen[1].encode("latin-1") == event_id.decode("utf-8", "replace").encode()


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_compressed_stream_is_one_error_line_not_a_silent_nothing(encoding):
    """attach asks for the stream as it is (Accept-Encoding: identity); a proxy that
    compresses it anyway sends bytes no line of which is SSE: read as they are, every
    event would be lost without a word."""
    import gzip

    _one_error_line(
        _stream([gzip.compress(SAMPLE)], headers={"Content-Encoding": encoding}),
        f"error: {{url}}/event sent the event stream {encoding}-encoded "
        "(Content-Encoding), which attach does not read; is a proxy compressing it?",
    )


def _one_error_line(answer: Callable[..., None], expected: str) -> None:
    """attach to a server that answers with ``answer``: exit 2 at once, ``expected`` (its
    ``{url}`` the server's) the last line on stderr, nothing on stdout."""
    with restarting_server([answer]) as url:
        result = attach(url)
    assert result.returncode == 2, result.stderr.decode()
    assert result.stderr.decode().splitlines()[-1] == expected.format(url=url)
    assert result.stdout == b""


def test_a_media_type_in_capitals_is_an_event_stream():
    """Media types are case-insensitive (RFC 9110 8.3.1): `Text/Event-Stream; charset=UTF-8`
    is the stream, not `error: … is not an event stream`."""

    answer = _stream(
        [SAMPLE], hold=20, headers={"Content-Type": "Text/Event-Stream; charset=UTF-8"}
    )
    with restarting_server([answer]) as url:
        result = attach(url)
    assert result.returncode == 0, result.stderr.decode()
    assert _kinds(result)[-1] == "metrics"


def test_a_redirect_names_the_url_it_points_to():
    """attach follows no redirect (the password would go on to wherever it points): the
    error line names the URL to attach to instead of a bare status."""

    def moved(handler, done):
        handler.send_response(307)
        handler.send_header("Location", "https://elsewhere.example:4096/event\x1b[31m")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    _one_error_line(
        moved,
        "error: {url}/event answered HTTP 307, a redirect to "
        "https://elsewhere.example:4096/event?[31m: attach that URL",
    )
