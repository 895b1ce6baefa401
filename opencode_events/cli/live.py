"""Live commands: ``attach`` (a running ``opencode serve``) and ``run`` (OpenCode itself).

``attach URL`` subscribes to the server's ``GET /event`` stream and writes normalized
events as they arrive (through ``sse.SseReader``); it reconnects when the server drops
the connection and stops at the followed session's idle (unless ``--follow``). ``run``
starts ``opencode run --format json …`` itself and shows what it does (the pretty view
on a terminal, else JSON Lines), keeping the raw stream with ``--tee`` and exiting with
OpenCode's exit code. Both are click commands registered by ``cli``; this module imports
nothing heavy at import time (start-up budget), and rich only through the pretty writer.
docs/server-events.md describes both.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from typing import Any, BinaryIO

import click

from .. import paths
from ..core.text import is_utf8
from ..errors import InputError, OutputError
from .exits import echo_error as _say
from .io import (
    LiveOtel,
    full_option,
    max_cost_option,
    open_output,
    pipe_safe,
    same_file,
    stdout_is,
)
from .status import ExitStatus

__all__ = ["attach", "run_opencode", "known_session", "RECONNECT_DELAYS"]

# Seconds to wait before each reconnect attempt after a lost connection; the server's SSE
# ``retry:`` field, when it sends one, replaces the first delay. After the last attempt
# fails, attach gives up with an error. A connection that delivered data resets the count.
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0)
READ_TIMEOUT = 35.0  # the server sends a heartbeat every 10 s; silence this long is a drop
# OpenCode answers /event at once (headers, then ``server.connected``): a server that
# accepts and says nothing this long (frozen, a forward to nothing) is an attempt failed.
ANSWER_TIMEOUT = 10.0
_FORMATS = click.Choice(["jsonl", "pretty"])


def _writer(
    fmt: str | None, out: BinaryIO, *, full: bool = False, subagents_at_end: bool = False
) -> Any:
    from ..output.jsonl import make_writer

    if fmt is None:
        fmt = "pretty" if out.isatty() else "jsonl"
    return make_writer(fmt, out, buffered=False, full=full, subagents_at_end=subagents_at_end)


class _Unavailable(InputError):
    """A server there, but not serving now: it closed the connection without an answer (an
    ``ssh -L`` forward or a proxy whose OpenCode is restarting) or answered 502, 503 or
    504. The first connection reports it; a reconnect tries again, as when refused."""


def _note(message: str) -> None:
    _say(f"opencode-events: {message}")


def _their_part(cost: float, subagents: int) -> str:
    """ " with its subagents ($0.0048 in 1)" of a spend note, or nothing when none ran."""
    return f" with its subagents (${cost:.4f} in {subagents})" if subagents else ""


# --------------------------------------------------------------------------- attach


class _Endpoint:
    """Where and how to reach a server's ``/event`` stream."""

    def __init__(self, url: str, *, everywhere: bool = False) -> None:
        from urllib.parse import unquote, urlsplit

        if "://" not in url:
            url = "http://" + url
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError:  # e.g. an unclosed [IPv6 bracket
            raise InputError(f"not a server URL: {url}") from None
        if (
            parts.scheme not in ("http", "https")
            or not hostname
            or any(c.isspace() or ord(c) < 32 for c in url)
        ):
            raise InputError(f"not a server URL: {url}")
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        try:
            self.port = parts.port or (443 if self.https else 80)
        except ValueError:
            raise InputError(f"not a server URL: {url}") from None
        self.base = parts.path.rstrip("/")
        if self.base.endswith("/global/event"):  # the global stream's own URL: --global
            self.base, everywhere = self.base[: -len("/global/event")], True
        elif self.base.endswith("/event"):  # the stream's own URL given: not .../event/event
            self.base = self.base[: -len("/event")]
        # ``--global``: GET /global/event, every directory the server works in; the API
        # routes stay the server's own (/session/…, never /global/session/…: a page there)
        self.everywhere = everywhere
        self.query = "?" + parts.query if parts.query else ""  # e.g. ?directory=…, on every route
        self.path = self.base + ("/global/event" if everywhere else "/event") + self.query
        # Basic auth like OpenCode's own clients: user OPENCODE_SERVER_USERNAME (default
        # "opencode"), password OPENCODE_SERVER_PASSWORD; credentials in the URL win.
        self.username = unquote(parts.username) if parts.username else None
        self.password = unquote(parts.password) if parts.password else None
        # Where the password came from, for the error that says it was rejected.
        self.password_from = "the URL"
        user, password = paths.server_credentials()
        if self.password is None:
            self.password = password
            self.password_from = "OPENCODE_SERVER_PASSWORD"
        if self.username is None:
            self.username = user
        shown_host = f"[{hostname}]" if ":" in hostname else hostname  # IPv6
        self.shown = f"{parts.scheme}://{shown_host}:{self.port}"

    def _headers(self) -> dict[str, str]:
        import base64

        if self.password is None:
            return {}
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _route(self, path: str) -> str:
        """``path`` under the server's URL, with the URL's query (``?directory=…``): the
        path's own query first, so a ``directory`` it names is the one OpenCode reads."""
        query = self.query if "?" not in path else self.query.replace("?", "&", 1)
        return self.base + path + query

    def post(self, path: str) -> tuple[int, str]:
        """POST to ``path`` under the server's URL (no body); the HTTP status and the
        answer's Content-Type, or raise ``OSError``/``http.client.HTTPException`` when it
        cannot be reached."""
        import http.client

        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=10)
        try:
            conn.request("POST", self._route(path), headers=self._headers())
            response = conn.getresponse()
            response.read(_MAX_JSON)
            return response.status, response.getheader("Content-Type") or ""
        finally:
            conn.close()

    def get_json(self, path: str) -> tuple[int, Any]:
        """GET ``path`` under the server's URL: the HTTP status and the JSON body (None
        when it is not JSON); raise ``OSError``/``http.client.HTTPException`` when the
        server cannot be reached."""
        import http.client
        import json

        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=10)
        try:
            headers = {"Accept": "application/json", **self._headers()}
            conn.request("GET", self._route(path), headers=headers)
            response = conn.getresponse()
            if "json" not in (response.getheader("Content-Type") or ""):
                return response.status, None  # an event stream, a page: never read to its end
            body = response.read(_MAX_JSON)
        finally:
            conn.close()
        try:
            return response.status, json.loads(body)
        except ValueError:
            return response.status, None

    def open(self, last_event_id: str | None) -> Any:
        """Connect and return the response, or raise ``InputError`` / ``OSError``."""
        import http.client

        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=ANSWER_TIMEOUT)
        headers: dict[str, str | bytes] = {
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
            **self._headers(),
        }
        if last_event_id:  # any text the server sent (http.client would take only Latin-1)
            headers["Last-Event-ID"] = last_event_id.encode()
        try:
            conn.request("GET", self.path, headers=headers)
            sock = conn.sock  # the response reads from it after the connection lets go
            response = conn.getresponse()
            if sock is not None:  # answered: from now on, the stream's own silence rule
                sock.settimeout(READ_TIMEOUT)
        except UnicodeError:  # a host name IDNA cannot encode, or a path beyond ASCII
            conn.close()
            raise InputError(
                f"not a server URL: {self.url} (not ASCII, or a bad host name)"
            ) from None
        except http.client.RemoteDisconnected:  # accepted, then closed: not serving now
            conn.close()
            raise _Unavailable(
                f"{self.shown} did not answer as an HTTP server: "
                "Remote end closed connection without response"
            ) from None
        except (http.client.HTTPException, ValueError) as exc:  # no HTTP there: an SSH port
            conn.close()
            detail = str(exc).strip()[:200] or type(exc).__name__
            raise InputError(f"{self.shown} did not answer as an HTTP server: {detail}") from None
        except BaseException:
            conn.close()
            raise
        if response.status == 401:
            conn.close()
            if self.password is None:
                raise InputError(f"{self.shown} requires a password: set OPENCODE_SERVER_PASSWORD")
            raise InputError(
                f"{self.shown} rejected the password (user {self.username!r}, "
                f"from {self.password_from})"
            )
        if response.status in (502, 503, 504):
            conn.close()
            raise _Unavailable(f"{self.shown}{self.path} answered HTTP {response.status}")
        if response.status != 200:
            conn.close()
            raise InputError(
                f"{self.shown}{self.path} answered HTTP {response.status}{_redirect(response)}"
            )
        kind = response.getheader("Content-Type") or ""
        if not kind.strip().lower().startswith("text/event-stream"):  # any case (RFC 9110)
            conn.close()
            raise InputError(
                f"{self.shown}{self.path} is not an event stream (Content-Type {kind or 'none'})"
                "; is this an OpenCode server?"
            )
        # Asked for as it is (http.client sends Accept-Encoding: identity); compressed anyway
        # (a proxy), no line of it is SSE and every event would be lost without a word.
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            conn.close()
            raise InputError(
                f"{self.shown}{self.path} sent the event stream {encoding}-encoded "
                "(Content-Encoding), which attach does not read; is a proxy compressing it?"
            )
        return response


def _redirect(response: Any) -> str:
    """Where a redirect points, for its error line: attach follows none (a password is not
    to be sent on to another host unasked), so the user is told which URL to attach to."""
    location = response.getheader("Location") if 300 <= response.status < 400 else None
    if not location:
        return ""
    shown = "".join(c if c.isprintable() else "?" for c in location.strip()[:500])
    return f", a redirect to {shown}: attach that URL"


_MAX_JSON = 64 << 20  # the most of a JSON answer read (a server's list of sessions)
_WHOLE_ID = len("ses_db1a2c8acffex06nHFDzX0nbNs")  # an OpenCode session id's length


def known_session(endpoint: _Endpoint, session_id: str) -> None:
    """``attach --session ID`` of a session the server does not know would wait forever
    for it to go idle: ask first. ``GET /session/ID`` answers 200 for a session it has and
    404 for any other (a prefix too); after a 404, ``GET /session`` lists the sessions, and
    a prefix must start exactly one of them. An answer that is neither (an older server, a
    proxy) is no reason to refuse: then attach goes on and waits as before."""
    import http.client
    from urllib.parse import quote

    if not is_utf8(session_id):  # bytes of the command line that are not UTF-8: no JSON id
        raise InputError(f"{endpoint.shown} has no session {session_id}")
    try:
        status, _ = endpoint.get_json(f"/session/{quote(session_id, safe='')}")
        if status != 404:
            return
        status, listed = endpoint.get_json("/session")
    except (OSError, http.client.HTTPException):
        return  # unreachable: following the stream says so in its own words
    if status != 200 or not isinstance(listed, list):
        return
    ids = sorted({s["id"] for s in listed if isinstance(s, dict) and isinstance(s.get("id"), str)})
    matches = [i for i in ids if i.startswith(session_id)]
    if len(matches) == 1:
        return
    if not matches and endpoint.everywhere and len(session_id) < _WHOLE_ID:
        return  # GET /session lists the server's own directory's: a prefix may be elsewhere's
    if matches:
        shown = ", ".join(matches[:10]) + (
            f" and {len(matches) - 10} more" if len(matches) > 10 else ""
        )
        raise InputError(
            f"--session {session_id} starts several sessions on {endpoint.shown}: {shown}"
        )
    raise InputError(
        f"{endpoint.shown} has no session {session_id} (GET /session/{session_id}: 404)"
    )


def _refused(endpoint: _Endpoint, exc: OSError) -> InputError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        reason = "nothing is listening there"
    elif isinstance(exc, TimeoutError):
        reason = f"no answer in {ANSWER_TIMEOUT:g} s"
    return InputError(f"cannot connect to {endpoint.shown}: {reason}")


def follow(
    endpoint: _Endpoint,
    reader: Any,
    writer: Any,
    *,
    until_idle: bool,
    delays: tuple[float, ...] = RECONNECT_DELAYS,
    sleep: Callable[[float], None] | None = None,
    ending: Callable[[], bool] = lambda: False,
) -> None:
    """Read the stream into ``reader`` and ``writer`` until idle (or forever, unless
    ``ending()`` says to stop at the next idle), reconnecting after a lost connection."""
    import time

    sleep = sleep or time.sleep
    line_no = 0
    attempt = 0  # failed reconnects in a row
    first = True
    while True:
        try:
            response = endpoint.open(reader.last_event_id)
        except (OSError, _Unavailable) as exc:
            if first:
                if isinstance(exc, _Unavailable):
                    raise
                raise _refused(endpoint, exc) from None
            attempt += 1
            if attempt > len(delays):
                why = exc if isinstance(exc, _Unavailable) else (exc.strerror or exc)
                raise InputError(
                    f"lost the connection to {endpoint.shown} and could not reconnect: {why}"
                ) from None
            delay = _delay(reader, delays, attempt)
            _note(f"cannot reconnect to {endpoint.shown}; trying again in {delay:g} s")
            sleep(delay)
            continue
        _note(("reconnected to " if not first else "attached to ") + endpoint.shown)
        if not first:
            try:
                _after_reconnect(endpoint, reader)
            except BaseException:
                response.close()
                raise
            if reader.idle and (until_idle or ending()):
                response.close()
                return
        first = False
        try:
            opened, lines_before = time.monotonic(), line_no
            line_no, got_data = _read(response, reader, writer, line_no, until_idle, ending)
        finally:
            response.close()
        if reader.idle and (until_idle or ending()):
            return
        reader.drop_frame()
        # A connection that lasted, or brought more than one frame, resets the count; one
        # dropped at once (``server.connected``, its two lines, then closed: a server
        # crash-looping) does not, or attach would reconnect every 0.5 s for ever, two
        # stderr lines each time. A proxy that drops a stream idle for a few seconds while
        # events flow keeps its count at one.
        lasted = time.monotonic() - opened >= delays[-1]
        if got_data and (lasted or line_no - lines_before > 2):
            attempt = 0
        attempt += 1
        if attempt > len(delays):
            raise InputError(f"lost the connection to {endpoint.shown}")
        delay = _delay(reader, delays, attempt)
        _note(f"connection to {endpoint.shown} lost; reconnecting in {delay:g} s")
        sleep(delay)


def _after_reconnect(endpoint: Any, reader: Any) -> None:
    """What the server says now, asked once the new stream is open (so that no change
    after the answer is missed): a server restarted in the middle of a run killed it, and
    a restarted server sends no idle for a run it never had; a server on another database
    has no such session. ``GET /session/status`` lists the sessions at work (OpenCode
    1.18.33: ``{"ses_…": {"type": "busy"}}``, ``{}`` when none); a followed session seen at
    work and not listed went idle while attach was away. A server that does not answer so
    is followed as before."""
    import http.client

    session = reader.session
    if session is None:
        return
    if reader.named:
        try:
            known_session(endpoint, session)
        except InputError:
            raise InputError(
                f"{endpoint.shown} no longer has session {session} (another OpenCode, on "
                "another database, answers there now?)"
            ) from None
    try:
        # OpenCode lists one directory's sessions at work: the followed session's is asked
        status, busy = endpoint.get_json(_in_its_directory(endpoint, session, "/session/status"))
    except (OSError, http.client.HTTPException):
        return
    if status != 200 or not isinstance(busy, dict):
        return
    state = busy.get(session)
    at_work = isinstance(state, dict) and state.get("type") not in (None, "idle")
    if not at_work and reader.went_idle_while_away():
        _note(
            f"{session} is no longer at work on {endpoint.shown}: it ended (or the server "
            "was restarted) while the connection was lost; its events meanwhile are lost"
        )


def _in_its_directory(endpoint: Any, session: str, path: str) -> str:
    """``path`` asked of the directory ``session`` works in: OpenCode keeps a directory's
    runs and their states in that directory's instance (the ``?directory=`` of a request,
    else the server's own), so with ``--global`` a route about a run of another directory
    names it (``GET /session/ID`` does, whatever the directory); an abort asked of another
    directory finds no run there and answers ``true`` all the same."""
    from urllib.parse import quote

    if not endpoint.everywhere:
        return path
    status, info = endpoint.get_json(f"/session/{quote(session, safe='')}")
    directory = info.get("directory") if status == 200 and isinstance(info, dict) else None
    if not isinstance(directory, str) or not directory:
        return path
    return f"{path}?directory={quote(directory, safe='')}"


def _delay(reader: Any, delays: tuple[float, ...], attempt: int) -> float:
    if attempt == 1 and reader.retry_ms is not None:
        return min(reader.retry_ms / 1000, delays[-1])
    return delays[min(attempt, len(delays)) - 1]


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _read(
    response: Any,
    reader: Any,
    writer: Any,
    line_no: int,
    until_idle: bool,
    ending: Callable[[], bool] = lambda: False,
) -> tuple[int, bool]:
    """Feed one connection's lines; returns (last line number, whether data came)."""
    import http.client  # loaded already: the response is one of its objects

    feed, write = reader.feed, writer.write
    pending = b""
    got_data = False
    after_cr = False  # the last chunk ended with CR: a LF opening the next is its CRLF's
    # A line longer than the reader keeps is handed over by its start, then only measured up
    # to its end, never held: a server (or a proxy) sending one endless line cannot fill
    # memory, nor make each read scan all of it again.
    too_long = max(reader.max_frame, 1 << 10) + 8
    skipping = False  # inside such a line (its start fed)
    while True:
        try:
            chunk = response.read1(1 << 16)
        except (OSError, ValueError):  # reset, timeout, or closed under us
            return line_no, got_data
        except http.client.HTTPException:  # IncompleteRead and kin: a dropped stream
            return line_no, got_data
        if not chunk:
            return line_no, got_data  # a partial last line is dropped with its frame
        got_data = True
        if after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        if skipping:
            end = _LINE_END.search(chunk)
            reader.measure(len(chunk) if end is None else end.start())
            if end is None:
                after_cr = False
                continue
            skipping = False  # its line end ends the line already counted
            after_cr = end.group() == b"\r" and end.end() == len(chunk)
            chunk = chunk[end.end() :]
            if not chunk:
                continue
        buffer = pending + chunk
        if b"\r" in buffer:  # SSE lines may also end with CRLF or a lone CR
            lines = _LINE_END.split(buffer)
            after_cr = buffer.endswith(b"\r")
        else:
            lines = buffer.split(b"\n")
            after_cr = False
        pending = lines.pop()
        if len(pending) > too_long:
            lines.append(pending)
            pending, skipping = b"", True
        for line in lines:
            line_no += 1
            events = feed(line_no, line)
            if events:
                write(events)
            if reader.idle and (until_idle or ending()):  # not the lines after it
                writer.end_batch()
                return line_no, got_data
        writer.end_batch()


@click.command()
@click.argument("url")
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    help="Follow this session (and its subagents); the start of its id will do.",
)
@click.option(
    "--global",
    "everywhere",
    is_flag=True,
    help="Read GET URL/global/event: the runs of every directory the server works in, "
    "not only its own.",
)
@click.option("--deltas", is_flag=True, help="Also emit streaming text deltas.")
@click.option(
    "--until-idle/--follow",
    default=True,
    help="Stop when the followed session goes idle, its run ended (the default); or follow "
    "the server until Ctrl-C.",
)
@click.option(
    "--format",
    "fmt",
    type=_FORMATS,
    help="jsonl, or pretty for people (the default when stdout is a terminal).",
)
@click.option("-o", "--output", metavar="FILE", help="Write events to FILE instead of stdout.")
@click.option("--raw", "keep_raw", is_flag=True, help="Attach the server event to every event.")
@click.option("--no-metrics", is_flag=True, help="Leave out the closing metrics event.")
@max_cost_option(
    "Abort the session through the server once it with its subagents costs more; exit 3."
)
@full_option
@click.option(
    "--otel",
    "otel_dest",
    metavar="URL|FILE",
    help="Also send the sessions as OpenTelemetry traces and metrics when it ends: to an "
    "OTLP/HTTP base URL, or as OTLP JSON Lines to FILE (docs/otel.md).",
)
@pipe_safe
def attach(
    url: str,
    session_id: str | None,
    everywhere: bool,
    deltas: bool,
    until_idle: bool,
    fmt: str | None,
    output: str | None,
    keep_raw: bool,
    no_metrics: bool,
    max_cost: float | None,
    full: bool,
    otel_dest: str | None,
) -> None:
    """Follow a running `opencode serve` at URL live, as normalized events.

    Reads GET URL/event (--global: URL/global/event, the runs of every directory the
    server works in) and stops when the followed session goes idle (--follow: goes on
    until Ctrl-C). Without --session, events of every session are written and the first
    session seen at work is the one whose idle ends the command. The password comes from
    OPENCODE_SERVER_PASSWORD (user OPENCODE_SERVER_USERNAME, default "opencode"), or from
    the URL (http://user:password@host:port), which wins.
    """
    from ..core.normalizer import Normalizer
    from ..sources.sse import SseReader

    endpoint = _Endpoint(url, everywhere=everywhere)
    if session_id is not None:
        known_session(endpoint, session_id)
    otel = LiveOtel(otel_dest, events_to=output) if otel_dest else None
    out = open_output(output)
    writer = _writer(fmt, out, full=full)
    normalizer = _live_normalizer(otel, keep_raw, Normalizer)
    limit = _Abort(endpoint, max_cost) if max_cost is not None else None

    def on_message(session: str | None, info: Any) -> None:
        if limit is not None:
            limit.reply(session, info)
        if otel is not None:  # the agent of a run cut off before a step ended
            otel.collector.learn_message(session, info)

    reader = SseReader(
        normalizer,
        deltas=deltas,
        session=session_id,
        on_session=limit.seen if limit is not None else None,
        on_message=on_message if limit is not None or otel is not None else None,
    )
    if limit is not None:
        limit.reader = reader
    events = otel.writer(writer) if otel else writer
    try:
        try:
            follow(
                endpoint,
                reader,
                events,
                until_idle=until_idle,
                ending=(lambda: limit.crossed) if limit is not None else (lambda: False),
            )
        except (KeyboardInterrupt, SystemExit, InputError):
            # Ctrl-C or SIGTERM (how `--follow` ends), or the server gone for good: what was
            # seen is still written and sent, one try each (a shutdown is not held up)
            events.write(reader.finish())
            writer.flush()
            if otel is not None:
                otel.destination.hurry()
                try:
                    otel.send()
                except InputError as error:  # the end stays the signal's, or the server's
                    _say(f"warning: the spans were not sent: {error}")
            raise
        events.write(reader.finish())
        if not no_metrics:
            writer.write([normalizer.metrics()])
    finally:
        writer.flush()
    if otel is not None:
        otel.send()
    if limit is not None and limit.crossed:
        raise SystemExit(ExitStatus.OVER_BUDGET)


class _Abort:
    """``attach --max-cost``: the costs the server reports for the followed session and the
    sessions below it (``SessionCosts``); once they sum to more than the limit, the
    session is aborted through the server (``POST /session/{id}/abort``, as the TUI's
    Escape does) and attach ends at the idle that follows, even with ``--follow``."""

    def __init__(self, endpoint: _Endpoint, max_cost: float) -> None:
        from ..pipeline.spend import SessionCosts

        self.endpoint = endpoint
        self.max_cost = max_cost
        self.costs = SessionCosts()
        self.reader: Any = None
        self.crossed = False

    def seen(self, session_id: str, parent_id: str | None, cost: Any) -> None:
        self.costs.seen(session_id, parent_id, cost)
        self._check()

    def reply(self, session_id: str | None, info: Any) -> None:
        self.costs.reply(session_id, info)
        self._check()

    def _check(self) -> None:
        root = self.reader.session if self.reader is not None else None
        if self.crossed or root is None:
            return
        total, share, below = self.costs.total(root)
        if total <= self.max_cost:
            return
        self.crossed = True
        import http.client

        try:
            status, kind = self.endpoint.post(
                _in_its_directory(self.endpoint, root, f"/session/{root}/abort")
            )
        except (OSError, http.client.HTTPException) as exc:
            raise InputError(
                f"{root} is over --max-cost but could not be aborted: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from None
        if status != 200:
            raise InputError(
                f"{root} is over --max-cost but {self.endpoint.shown} answered the abort "
                f"with HTTP {status}"
            )
        if "json" not in kind:  # a web page (a route OpenCode's API does not have): no abort
            raise InputError(
                f"{root} is over --max-cost but {self.endpoint.shown} answered the abort "
                f"with {kind or 'no Content-Type'}, not OpenCode's API; is it an OpenCode server?"
            )
        _note(
            f"{root} cost ${total:.4f}{_their_part(share, below)}, "
            f"over --max-cost ${self.max_cost:g}; aborted it"
        )


# ------------------------------------------------------------------------------ run


class _Tee:
    """A raw reader that copies every chunk it returns to ``copy``, byte for byte."""

    def __init__(self, stream: Any, copy: BinaryIO | None, name: str | None = None) -> None:
        self._stream = stream
        self._copy = copy
        self._name = name

    def read(self, n: int = -1) -> bytes:
        chunk = self._stream.read(n)
        if chunk and self._copy is not None:
            try:
                self._copy.write(chunk)
                self._copy.flush()
            except OSError as exc:  # a full disk: say which file
                raise OutputError(exc.errno, exc.strerror, self._name) from None
        return chunk


def _opencode_binary() -> str:
    import shutil

    binary = paths.opencode_binary_override()
    if binary:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise InputError(f"OPENCODE_BIN={binary} is not an executable file")
        return binary
    found = shutil.which("opencode")
    if found is None:
        raise InputError("opencode is not on PATH (or set OPENCODE_BIN)")
    return found


class _OwnOptionsFirst(click.Command):
    """``run``'s options come first; from the first other word on, everything is OpenCode's.
    Click splits a cluster of short options it does not know (``-mo x`` gave ``-m`` to
    OpenCode and took ``-o x`` as this command's output): a ``--`` is put before that word."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value: dict[str, bool] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    takes_value[name] = not param.is_flag and not param.count
        at = 0
        while at < len(args) and args[at] != "--":
            word = args[at]
            name = word.split("=", 1)[0] if word.startswith("--") else word
            if name in takes_value:
                at += 2 if takes_value[name] and "=" not in word else 1
            elif word[:1] == "-" and word[:2] in takes_value and takes_value[word[:2]]:
                at += 1  # -oFILE: an own short option with its value attached
            else:
                break
        if at < len(args) and args[at] != "--":
            args = [*args[:at], "--", *args[at:]]
        return super().parse_args(ctx, args)


@click.command(
    cls=_OwnOptionsFirst,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--format",
    "fmt",
    type=_FORMATS,
    help="jsonl, or pretty for people (the default when stdout is a terminal).",
)
@click.option("-o", "--output", metavar="FILE", help="Write events to FILE instead of stdout.")
@click.option("--tee", metavar="FILE", help="Also keep OpenCode's raw JSON stream in FILE.")
@click.option("--raw", "keep_raw", is_flag=True, help="Attach the source record to every event.")
@click.option("--no-metrics", is_flag=True, help="Leave out the closing metrics event.")
@max_cost_option(
    "Stop OpenCode (as Ctrl-C would) once the run with its subagents costs more; exit 3."
)
@click.option(
    "--db",
    "db_path",
    metavar="PATH",
    help="OpenCode's database, for the subagents' costs (default: where `import` looks).",
)
@full_option
@click.option(
    "--otel",
    "otel_dest",
    metavar="URL|FILE",
    help="Also send the sessions as OpenTelemetry traces and metrics when it ends: to an "
    "OTLP/HTTP base URL, or as OTLP JSON Lines to FILE (docs/otel.md).",
)
@click.argument("opencode_args", nargs=-1, type=click.UNPROCESSED, metavar="[OPENCODE ARGS]...")
@pipe_safe
def run_opencode(
    fmt: str | None,
    output: str | None,
    tee: str | None,
    keep_raw: bool,
    no_metrics: bool,
    max_cost: float | None,
    db_path: str | None,
    full: bool,
    otel_dest: str | None,
    opencode_args: tuple[str, ...],
) -> None:
    """Run `opencode run --format json OPENCODE ARGS...` and show what it does.

    Options for this command come first; everything from the first other word on is
    passed to OpenCode. The binary is $OPENCODE_BIN, else `opencode` on PATH. Exits with
    OpenCode's exit code; Ctrl-C is passed on to OpenCode. The closing metrics add the
    subagents' cost from OpenCode's store (their steps are not in the stream).
    """
    import signal
    import subprocess

    from ..core.normalizer import Normalizer
    from ..pipeline.normalize import event_batches
    from ..store.open import store_files

    binary = _opencode_binary()
    spend = _run_spend(db_path)
    # OpenCode's database is read (the subagents' costs, --max-cost): never written over
    reads = store_files(spend) if spend.path is not None else []
    if tee is not None:
        if otel_dest and same_file(tee, otel_dest):
            raise InputError(
                f"--tee and --otel both name {tee}: the raw stream and the spans need a file each"
            )
        if output not in (None, "-") and same_file(tee, output):
            raise InputError(
                f"--tee and -o both name {output}: the raw stream and the events need a file each"
            )
        if output in (None, "-") and stdout_is(tee):
            raise InputError(
                f"--tee {tee} is where stdout goes: the raw stream and the events need a file each"
            )
    otel = LiveOtel(otel_dest, events_to=output, reads=reads) if otel_dest else None
    out = open_output(output, reads)
    copy: BinaryIO | None = None
    if tee is not None:
        copy = open_output(os.path.join(".", tee) if tee == "-" else tee, reads)
    # Its subagents' figures come from the store at the end (``_with_subagents``), if any.
    writer = _writer(fmt, out, full=full, subagents_at_end=spend.path is not None)
    _starting(writer, binary)
    argv = [binary, "run", "--format", "json", *opencode_args]
    try:
        # Its own process group: Ctrl-C reaches only us, and we pass it on to that group,
        # as a terminal would. OpenCode 1.18 starts bash tools in groups of their own: a
        # tool that ignores the signal may outlive OpenCode, as in a terminal.
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, bufsize=0, start_new_session=True)
    except OSError as exc:
        if copy is not None:
            copy.close()
        raise InputError(f"cannot start {binary}: {exc.strerror or exc}") from None

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)

    # A closed terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) too: OpenCode, in a session of its
    # own, has no terminal to hear them, and must not run on unwatched after we are gone.
    # One we were started ignoring (``nohup``, ``cmd &`` in a script) stays ignored: OpenCode
    # installs handlers of its own, and would end on what we were told to let pass.
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    previous = {
        sig: signal.signal(sig, forward)
        for sig in forwarded
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    finished = False
    limit = _Limit(child, spend, max_cost) if max_cost is not None else None
    try:
        normalizer = _live_normalizer(otel, keep_raw, Normalizer)
        events_to = otel.writer(writer) if otel else writer
        stream = [("opencode", _Tee(child.stdout, copy, tee))]
        for events in event_batches(stream, normalizer):  # type: ignore[arg-type]
            if spend.session_id is None:
                # From the first record (a step's start), before any event: a `task` call
                # writes nothing to the stream until its subagent is done.
                spend.session_id = normalizer.session_id
            if events:
                events_to.write(events)
                spend.observe(events)
                if limit is not None:
                    limit.check()
            writer.end_batch()
        code = child.wait()
        finished = True
        if limit is not None:
            limit.stop()
        if not no_metrics:
            writer.write([_with_subagents(normalizer.metrics(), spend)])
        writer.flush()
    finally:
        try:
            if not finished:
                try:  # OpenCode first: a flush into a closed pipe or a full disk fails too
                    _stop(child)  # still forwarding: a second signal now cannot skip its SIGKILL
                finally:
                    writer.flush()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if copy is not None:
                try:
                    copy.close()
                except OSError as exc:  # what a full disk left unwritten
                    raise OutputError(exc.errno, exc.strerror, tee) from None
    sent = True
    if otel is not None:  # the run is over (also after a Ctrl-C passed on to OpenCode)
        try:
            otel.send()
        except (InputError, OutputError) as exc:
            # said, but OpenCode's exit code (or --max-cost's 3) still tells how the run went
            from .exits import echo_error, one_line

            echo_error(f"error: {one_line(str(exc))}")
            sent = False
    if limit is not None and limit.crossed:
        theirs = _their_part(spend.subagent_cost, spend.subagents)
        _note(
            f"{spend.session_id} cost ${spend.total:.4f}{theirs}, "
            f"over --max-cost ${max_cost:g}; OpenCode was stopped"
        )
        raise SystemExit(ExitStatus.OVER_BUDGET)
    if code == 0 and not sent:
        raise SystemExit(ExitStatus.USAGE)  # the export's failure, as `otel`'s own is
    raise SystemExit(128 - code if code < 0 else code)


def _starting(writer: Any, binary: str) -> None:
    """OpenCode takes seconds to start and writes nothing meanwhile: the pretty view's
    footer says it is starting (until the first event); otherwise a person watching
    stderr is told so in one line (a pipe's stderr, a log, is left quiet)."""
    import sys

    waiting = getattr(writer, "waiting", None)
    if waiting is not None and waiting("starting OpenCode…"):
        return
    if sys.stderr is not None and sys.stderr.isatty():
        _note(f"starting OpenCode ({binary})…")


def _run_spend(db_path: str | None) -> Any:
    """What the run costs with its subagents (``pipeline.spend``); where OpenCode keeps no
    database (``OPENCODE_DB=:memory:``), what its stream alone says it costs (a
    ``--max-cost`` still holds, its subagents unseen)."""
    from ..pipeline.spend import RunSpend

    try:
        path = paths.locate_db(db_path)
    except InputError:
        if db_path is not None:
            raise  # --db "": no path at all
        return RunSpend(None)
    if path.is_dir():
        path = path / "opencode.db"
    return RunSpend(path)


def _with_subagents(metrics: Any, spend: Any) -> Any:
    """The closing metrics with the subagents' spend from the store, when there were any."""
    if spend is None:
        return metrics
    spend.refresh(force=True)
    if spend.subagents:
        from ..core.figures import summed_cost

        metrics.subagent_sessions = spend.subagents
        metrics.subagent_cost = spend.subagent_cost
        metrics.total_cost = summed_cost(metrics.cost + spend.subagent_cost, 2)
        counts = _subagent_counts(spend)
        if counts is not None:
            (
                metrics.subagent_inferences,
                metrics.subagent_tool_calls,
                metrics.subagent_tokens,
            ) = counts
    return metrics


def _subagent_counts(spend: Any) -> tuple[int, int, int] | None:
    """The steps, tool calls and tokens of the run's subagent sessions, as ``sessions``
    counts them (its ``subagent_*``); None when the store cannot say."""
    from ..reports.sessions import summarize
    from ..store.sqlite import Store

    try:
        with Store(spend.path) as store:
            row = store.session(spend.session_id)
            if row is None:
                return None
            (summary,) = summarize(store, [row])
    except InputError:
        return None
    return summary.subagent_inferences, summary.subagent_tool_calls, summary.subagent_tokens


class _Limit:
    """``--max-cost``: a thread looks at the store as it changes (the subagents' costs are
    written there while the stream is silent), the reader checks after each batch; the
    first to see the run over the limit sends OpenCode's group SIGINT, as Ctrl-C would,
    SIGTERM if it is still running ``GRACE`` seconds later, and SIGKILL another ``GRACE``
    on: a wedged OpenCode must not outlive the cap meant to stop it."""

    INTERVAL = 0.25
    GRACE = 10.0

    def __init__(self, child: Any, spend: Any, max_cost: float) -> None:
        import threading

        self.child = child
        self.spend = spend
        self.max_cost = max_cost
        self.crossed = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="max-cost", daemon=True)
        self._thread.start()

    def check(self) -> None:
        if self.crossed or self.spend.total <= self.max_cost:
            return
        with self._lock:
            if self.crossed:
                return
            self.crossed = True
        import signal

        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGINT)

    def _watch(self) -> None:
        import signal
        import time

        stopped_at = None
        terminated = False  # SIGTERM sent: SIGKILL next
        while not self._done.wait(self.INTERVAL):
            if not self.crossed:
                self.spend.refresh()
                self.check()
                if self.crossed:
                    stopped_at = time.monotonic()
            elif stopped_at is None:
                stopped_at = time.monotonic()
            elif time.monotonic() - stopped_at > self.GRACE and self.child.poll() is None:
                last = signal.SIGKILL if terminated else signal.SIGTERM
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.child.pid, last)
                stopped_at = time.monotonic() if not terminated else float("inf")
                terminated = True

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)


def _stop(child: Any) -> None:
    """Stop OpenCode (and its group) when we leave early: a closed pipe, an error."""
    import signal
    import subprocess

    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(timeout=5)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _live_normalizer(otel: LiveOtel | None, keep_raw: bool, normalizer: Callable[..., Any]) -> Any:
    """The normalizer of ``attach`` and ``run``: an unknown MCP tool's events name their
    server from OpenCode's config (``reports.mcp``) as ``import``'s do, for the session's
    directory (the server's messages say it; a run stream names none: the run's own)."""
    from .quick import event_mcp_servers

    if otel is not None:
        return otel.normalizer(keep_raw=keep_raw, mcp_servers=event_mcp_servers)
    return normalizer(keep_raw=keep_raw, mcp_servers=event_mcp_servers)
