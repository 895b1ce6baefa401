"""`attach --global` (docs/server-events.md#attach): GET /global/event, whose frames wrap
each event with its directory, while the API routes stay the server's own. A stand-in for
`opencode serve` that answers as OpenCode 1.18.33 does: GET /session/status for one
directory (``?directory=``, else the server's own), and a web page, 200, for any route its
API does not have (/global/session/…)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

from tests.test_reconnect import FRAMES, IDLE, SESSION, _kinds, attach

ELSEWHERE = "/work/other-project"  # the session's directory: not the server's own


def _wrapped(frame: bytes) -> bytes:
    data = json.loads(frame.decode().strip()[len("data: ") :])
    wrapper = {"directory": ELSEWHERE, "project": "p1", "payload": data}
    return b"data: " + json.dumps(wrapper).encode() + b"\n\n"


GLOBAL = [_wrapped(f) for f in FRAMES]


@contextlib.contextmanager
def global_server(
    connections: list[list[bytes]], busy_after: Callable[[int], bool] = lambda n: True
) -> Iterator[tuple[str, list[str]]]:
    """``connections[n]``: the frames of the n-th GET /global/event, then closed (the last
    one's held open with heartbeats until the test ends); the session is busy in its
    directory after n streams while ``busy_after(n)``. Yields the URL and the POSTs' paths."""
    done = threading.Event()
    count = [0]
    posted: list[str] = []
    aborted: list[str] = []  # the runs an abort reached

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _page(self) -> None:  # OpenCode's web app, for a route its API does not have
            self._send(b"<!doctype html><html></html>", "text/html")

        def do_POST(self) -> None:  # noqa: N802
            posted.append(self.path)
            url = urlsplit(self.path)
            if url.path == f"/session/{SESSION}/abort":
                # OpenCode keeps a directory's runs in that directory's instance (the
                # ``?directory=``, else the server's own): an abort asked elsewhere finds
                # no run, sets nothing, and answers true all the same
                directory = parse_qs(url.query).get("directory", [None])[0]
                if directory == ELSEWHERE:
                    aborted.append(SESSION)
                self._send(b"true", "application/json")
            else:
                self._page()

        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            directory = parse_qs(url.query).get("directory", [None])[0]
            if url.path == "/global/event":
                count[0] += 1
                last = count[0] >= len(connections)
                frames = connections[min(count[0], len(connections)) - 1]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(b"".join(frames))
                    self.wfile.flush()
                    while last and not done.wait(0.5):
                        self.wfile.write(b'data: {"payload":{"type":"server.heartbeat"}}\n\n')
                        self.wfile.flush()
            elif url.path == "/session/status":
                here = directory == ELSEWHERE and busy_after(count[0])
                body = {SESSION: {"type": "busy"}} if here else {}
                self._send(json.dumps(body).encode(), "application/json")
            elif url.path == f"/session/{SESSION}":
                body = {"id": SESSION, "directory": ELSEWHERE}
                self._send(json.dumps(body).encode(), "application/json")
            elif url.path.startswith("/session"):
                self._send(b"[]" if url.path == "/session" else b"{}", "application/json")
            else:
                self._page()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posted, aborted
    finally:
        done.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_global_follows_a_run_of_another_directory_to_its_idle():
    with global_server([GLOBAL]) as (url, _, _):
        result = attach(url, "--global")
    assert result.returncode == 0, result.stderr.decode()
    assert _kinds(result)[-1] == "metrics" and "prompt" in _kinds(result)


def test_global_max_cost_aborts_through_the_api_not_a_page():
    """The abort goes to POST /session/ID/abort: /global/session/ID/abort is OpenCode's
    web page, 200, and aborts nothing."""
    for how in (["--global"], []):
        with global_server([GLOBAL]) as (url, posted, aborted):
            target = url if how else url + "/global/event"
            result = attach(target, *how, "--max-cost", "0.001")
        assert result.returncode == 3, result.stderr.decode()
        assert [urlsplit(p).path for p in posted] == [f"/session/{SESSION}/abort"]
        assert "aborted it" in result.stderr.decode()
        # asked of the session's own directory, where OpenCode keeps its run: the server's
        # own directory has no such run, and answers true having aborted nothing
        assert aborted == [SESSION], posted


def test_max_cost_aborts_in_the_directory_the_url_names():
    """``URL?directory=…`` follows that directory's runs: the abort goes there too."""
    with global_server([GLOBAL]) as (url, posted, aborted):
        # the stand-in's /event is its web page: read /global/event with the query kept
        result = attach(f"{url}/global/event?directory={ELSEWHERE}", "--max-cost", "0.001")
    assert result.returncode == 3, result.stderr.decode()
    assert aborted == [SESSION], posted


def test_global_after_a_reconnect_asks_the_session_directory_which_runs_are_at_work():
    """Busy in its own directory, not in the server's: followed on to its idle."""
    with global_server([GLOBAL[:IDLE], GLOBAL[IDLE:]]) as (url, _, _):
        result = attach(url, "--global")
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "reconnected to" in stderr and "no longer at work" not in stderr
    assert _kinds(result).count("usage") >= 1


def test_global_a_run_the_restart_killed_ends_attach():
    with global_server([GLOBAL[:IDLE], GLOBAL[:1]], busy_after=lambda n: n < 2) as (url, _, _):
        result = attach(url, "--global", "--session", SESSION[:12])
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert f"{SESSION} is no longer at work on {url}" in stderr
