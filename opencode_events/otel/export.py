"""Sessions to OTLP bodies: from the store one session at a time, or from streams.

``store_sessions`` and ``stream_sessions`` yield each session's resource and spans as it
is finished (the store's: as each is read, so memory stays flat over a whole database;
a stream's: once its last event is read, which a first reading of the inputs tells when
they are files larger than ``TWO_PASSES_BYTES``, else when the inputs end).
``export`` gathers them into bodies and hands each to a sink: a function taking the signal
(``traces``/``metrics``) and one JSON body — a file writer (JSON Lines, one body a line) or
``OtlpHttp.send``.

    with open_store(None) as store:
        summary = export(store_sessions(store, ids, builder), builder, sink)
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

from ..core.normalizer import Normalizer
from ..errors import InputError
from ..events import Event, Orchestration, Warning
from ..paths import OtlpEnvironment, otlp_environment
from .otlp import (
    MAX_BODY_BYTES,
    MAX_LINE_BYTES,
    Resources,
    SpanBatches,
    metrics_body,
    parse_key_values,
)
from .spans import SessionInfo, SessionTrace, SpanData, ToolTimes, TraceBuilder, session_info

__all__ = [
    "Summary",
    "store_sessions",
    "stream_sessions",
    "plan_sessions",
    "TWO_PASSES_BYTES",
    "export",
    "store_builder",
    "SpanCollector",
    "Tee",
    "FileDestination",
    "HttpDestination",
    "read_session",
]

Sink = Callable[[str, bytes], Any]
Finished = tuple[dict[str, Any], list[SpanData]]


class Summary:
    """What an export sent: sessions, spans and bodies, and what the backend kept back."""

    def __init__(self) -> None:
        self.sessions = 0
        self.spans = 0
        self.bodies = 0
        self.metric_points = 0
        self.warnings = 0  # input lines that were no record (the events' warnings)
        self.partial: list[Any] = []  # the backends' partial-success notes
        self.left_out = 0  # sessions a follower did not send again: the backend had them


def store_builder(
    store: Any, *, parents: dict[str, str] | None = None, skip: set[str] | None = None
) -> TraceBuilder:
    """A builder that knows the store's parent links, and reads a parent session when a
    subagent is exported without it (to find the call that spawned it). ``parents`` and
    ``skip`` (the session tree, a fork's copied messages) when worked out already."""
    from ..reports.mcp import mcp_server_names
    from ..store.open import every_session

    known: set[str] | None = None
    if parents is None:
        # The store's own tree: no parent links on a loop (``children`` leaves them out),
        # and a parent no longer there is none (the session is top-level, as ``sessions``).
        known = set(every_session(store))
        parents = {
            child: parent
            for parent, kids in store.children().items()
            if parent in known
            for child in kids
        }
    found: dict[str, dict[str, str]] = {}

    def spawned_by(child: str, parent: str) -> str | None:
        if parent not in found:
            trace = read_session(store, builder, parent, builder.session(parent))
            found[parent] = dict(trace.children)
            if len(found) > 1024:  # flat memory: a parent's subagents come together
                found.pop(next(iter(found)))
        return found[parent].get(child)

    builder = TraceBuilder(parents=parents, spawned_by=spawned_by, mcp_servers=mcp_server_names)
    if skip is None:
        # A fork's copied history is the original's: its inferences are in that trace, once.
        from ..reports.usage import forked_copy_ids

        skip = forked_copy_ids(store, known if known is not None else every_session(store))
    builder.skip_messages = skip
    return builder


def read_session(
    store: Any,
    builder: TraceBuilder,
    session_id: str,
    trace: SessionTrace,
    normalizer: ToolTimes | None = None,
) -> SessionTrace:
    """A stored session's events into ``trace`` (a fork's copied history left out)."""
    from ..sources.transcript import map_session

    normalizer = normalizer or ToolTimes()
    normalizer.times = builder.times
    costs: list[float] = []
    add = trace.add
    skip = builder.skip_messages
    for events in map_session(normalizer, store, session_id, costs):
        for event in events:
            if not skip or event.message_id not in skip:
                add(event)
    return trace


def store_sessions(
    store: Any,
    session_ids: Sequence[str],
    builder: TraceBuilder,
    resources: Resources | None = None,
) -> Iterator[Finished]:
    """Each stored session's resource and spans, read and finished one at a time."""
    resource_of = resources or Resources()
    normalizer = ToolTimes()
    normalizer.several_sessions = len(session_ids) > 1
    for session_id in session_ids:
        if type(session_id) is not str:  # a damaged row without an id: nothing names it
            continue
        row = store.session(session_id)
        info = session_info(row) if row is not None else SessionInfo(id=session_id)
        info.parent_id = builder.parents.get(session_id)  # the tree's, not the row's
        trace = builder.session(session_id, info.directory)
        read_session(store, builder, session_id, trace, normalizer)
        builder.times.clear()  # a call's times are taken by its event; none are left over
        yield resource_of(info), builder.finish(trace, info)


class SpanCollector:
    """A writer of normalized events that files each under its session's trace (as a tee
    beside another writer: ``attach --otel``), and gives the finished sessions at the end;
    or, given when each session of the inputs is complete (``follow_plan``), each as soon
    as it is (``completed``)."""

    def __init__(self, builder: TraceBuilder) -> None:
        self.builder = builder
        self.traces: dict[str, SessionTrace] = {}
        self.warnings = 0
        self.events = 0  # events written so far, every one counted as the plan counts them
        self.most_held = 0  # the most sessions held at once (for tests)
        # (events after which it is complete, place first seen, session), by the first
        self._plan: list[tuple[int, int, str]] | None = None
        self._next = 0  # the plan's next session to finish
        self._finished: set[str] = set()  # sessions the plan finished (none come back)
        self._names = "the input"
        # session -> (agent, model, provider) its messages name (``learn_message``): a run
        # cut off before its first step ended (a server restarted) has no usage to tell them
        self._labels: dict[str, tuple[Any, Any, Any]] = {}

    def learn_message(self, session_id: str | None, info: Any) -> None:
        """A live source's message (``message.updated``): its agent, model and provider
        stand for the session's where no step's usage names them."""
        if session_id is None or info is None:
            return
        agent, model, provider = self._labels.get(session_id, (None, None, None))
        if agent is None and isinstance(info.agent, str) and info.agent:
            agent = info.agent
        if model is None and isinstance(info.modelID, str) and info.modelID:
            model = info.modelID
            provider = info.providerID if isinstance(info.providerID, str) else None
        self._labels[session_id] = (agent, model, provider)

    def _labelled(self, trace: SessionTrace) -> SessionTrace:
        agent, model, provider = self._labels.get(trace.session_id, (None, None, None))
        if trace.agent is None:
            trace.agent = agent
        if trace.model is None and model is not None:
            trace.model, trace.provider = model, provider
        return trace

    def follow_plan(self, plan: list[tuple[int, int, str]], names: Sequence[str] = ()) -> None:
        """Finish each session as soon as ``plan`` (``plan_sessions``' of the inputs
        ``names``) says it is complete."""
        self._plan = plan
        self._names = ", ".join(names) or "the input"

    def write(self, events: Sequence[Event]) -> None:
        # Each spawning call is noted as it comes: a subagent's parent is the session of the
        # first call to spawn it in the stream, whenever the sessions are finished.
        traces = self.traces
        for event in events:
            sid = event.session_id
            if type(event) is Warning:
                self.warnings += 1
            if sid is None:
                continue
            trace = traces.get(sid)
            if trace is None:
                if sid in self._finished:  # rewritten in place since the first reading
                    raise InputError(f"{self._names} changed while it was read")
                trace = traces[sid] = self.builder.session(sid)
            trace.add(event)
            if type(event) is Orchestration:
                child = event.child_session_id
                if child and trace.children.get(child):
                    self.builder.note_children(trace, child)
        self.events += len(events)
        self.most_held = max(self.most_held, len(traces))

    def completed(self, resources: Resources | None = None) -> Iterator[Finished]:
        """The sessions the plan says are complete once the events written so far are in,
        finished (and let go); those of one batch in the order first seen."""
        order = self._plan
        if order is None:
            return
        done: list[tuple[int, str]] = []
        while self._next < len(order) and order[self._next][0] < self.events:
            done.append(order[self._next][1:])
            self._next += 1
        if not done:
            return
        done.sort()
        resource = (resources or Resources())()
        for _, sid in done:
            trace = self.traces.pop(sid, None)
            if trace is not None:
                self._finished.add(sid)
                yield resource, self.builder.finish(trace)

    def end_batch(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def normalizer(
        self,
        *,
        keep_raw: bool = False,
        mcp_servers: Callable[[str | None], Sequence[str]] | None = None,
    ) -> ToolTimes:
        """The normalizer to map with: it notes each call's times where these spans look
        (``mcp_servers``: as ``Normalizer``'s)."""
        normalizer = ToolTimes(keep_raw=keep_raw, mcp_servers=mcp_servers)
        normalizer.times = self.builder.times
        return normalizer

    def finished(self, resources: Resources | None = None) -> Iterator[Finished]:
        """Every session seen, finished, in the order first seen (every spawning call is
        noted first: a subagent may come before its parent)."""
        traces = list(self.traces.values())
        self.traces = {}
        for trace in traces:
            self.builder.note_children(trace)
        resource = (resources or Resources())()
        for trace in traces:
            yield resource, self.builder.finish(self._labelled(trace))


class Tee:
    """Events to ``writer`` and to ``collector`` both."""

    def __init__(self, writer: Any, collector: SpanCollector) -> None:
        self.writer, self.collector = writer, collector

    def write(self, events: Sequence[Event]) -> None:
        self.writer.write(events)
        self.collector.write(events)

    def end_batch(self) -> None:
        self.writer.end_batch()

    def flush(self) -> None:
        self.writer.flush()


# Inputs that are files of more than this in all are read twice, to finish each session as
# soon as it is complete: a stream's spans otherwise wait for its end, about 2.3 bytes of
# memory per byte read. Below it, one reading costs less than the second would save.
TWO_PASSES_BYTES = 32 << 20


def stream_sessions(
    inputs: Sequence[tuple[str, BinaryIO]],
    builder: TraceBuilder,
    summary: Summary | None = None,
    resources: Resources | None = None,
) -> Iterator[Finished]:
    """The sessions of run streams, server event captures, export documents or our own
    events (``normalize``'s input), each finished when it is complete: when the inputs end,
    parents first; or, for files of more than ``TWO_PASSES_BYTES`` in all, as soon as its
    last event and every call that places it in its trace are read (``plan_sessions``
    reads them once first), in the order first seen. The spans are the same either way."""
    from ..pipeline.normalize import event_batches

    collector = SpanCollector(builder)
    resources = resources or Resources()  # the environment read once, not at each finish
    starts = _starts_of_files(inputs)
    if starts is not None:
        plan, lengths = plan_sessions(inputs, builder)
        inputs = _read_again(inputs, starts, lengths)
        collector.follow_plan(plan, [name for name, _ in inputs])
    for events in event_batches(inputs, collector.normalizer()):
        collector.write(events)
        yield from collector.completed(resources)
    if summary is not None:
        summary.warnings += collector.warnings
    yield from collector.finished(resources)


def plan_sessions(
    inputs: Sequence[tuple[str, BinaryIO]], builder: TraceBuilder
) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Each session as (the count of events after which it is complete, its place first
    seen, its id), by the first, and the bytes read of each input. The inputs are read once
    through the mapping the spans are made with (``ToolTimes`` is the normalizer's events,
    the calls' times noted besides: the same events, counted the same), keeping for each
    session only where its last event is and
    which calls spawn it. A session is complete after its last event and after every call
    that spawns it or a session above it (those place it: its trace is its top session's,
    its span hangs from the call); the first call to spawn a session names its parent
    (``SpanCollector.write`` notes the calls so)."""
    from ..pipeline.normalize import event_batches

    normalizer = Normalizer()
    last: dict[str, int] = {}  # in the order first seen
    calls: dict[str, tuple[str, int]] = {}  # child → (its first spawner, the last call's count)
    count = 0
    counted = [(name, _Counted(stream)) for name, stream in inputs]
    for events in event_batches(counted, normalizer):
        for event in events:
            sid = event.session_id
            if sid is not None:
                last[sid] = count
                if type(event) is Orchestration and event.child_session_id:
                    child = event.child_session_id
                    parent = calls.get(child, (sid, 0))[0]
                    calls[child] = (parent, count)
            count += 1
    lengths = [stream.read_bytes for _, stream in counted]
    parents = {child: parent for child, (parent, _) in calls.items()}
    if not builder.learn_parents:  # the tree given is the only authority
        parents = builder.parents
    order = []
    for place, (sid, at) in enumerate(last.items()):
        seen, current = {sid}, sid
        while True:
            call = calls.get(current)
            if call is not None:
                at = max(at, call[1])
            current = parents.get(current)
            if current is None or current in seen:
                break
            seen.add(current)
        order.append((at, place, sid))
    order.sort()
    return order, lengths


def _starts_of_files(inputs: Sequence[tuple[str, BinaryIO]]) -> list[int] | None:
    """Where each input is now, when every one is a regular file (which can be read again)
    and they hold more than ``TWO_PASSES_BYTES`` after that; else None."""
    starts, size = [], 0
    for _, stream in inputs:
        try:
            info = os.fstat(stream.fileno())
            start = _position(stream)
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        starts.append(start)
        size += max(0, info.st_size - start)
    return starts if size > TWO_PASSES_BYTES else None


def _position(stream: Any) -> int:
    tell = getattr(stream, "tell", None)
    return tell() if tell is not None else os.lseek(stream.fileno(), 0, os.SEEK_CUR)


def _read_again(
    inputs: Sequence[tuple[str, BinaryIO]], starts: list[int], lengths: list[int]
) -> list[tuple[str, Any]]:
    """The inputs from where the first reading began, each to where it ended (a file that
    grew meanwhile is read as the first reading saw it: the plan is of those bytes)."""
    again: list[tuple[str, Any]] = []
    for (name, stream), start, length in zip(inputs, starts, lengths, strict=True):
        seek = getattr(stream, "seek", None)
        try:
            if seek is not None:
                seek(start)
            else:
                os.lseek(stream.fileno(), start, os.SEEK_SET)
        except OSError as exc:
            raise InputError(f"cannot read {name} again: {exc.strerror or exc}") from None
        again.append((name, _Counted(stream, length)))
    return again


class _Counted:
    """A binary stream's ``read``, counting the bytes it gives, and giving at most
    ``limit`` of them."""

    def __init__(self, stream: Any, limit: int | None = None) -> None:
        self._stream, self._left = stream, limit
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        left = self._left
        if left is not None:
            if left <= 0:
                return b""
            size = left if size < 0 else min(size, left)
        chunk = self._stream.read(size)
        self.read_bytes += len(chunk)
        if left is not None:
            self._left = left - len(chunk)
        return chunk

    def fileno(self) -> int:
        return self._stream.fileno()


class FileDestination:
    """Bodies as the file exporter's JSON Lines into ``out`` (a file or stdout)."""

    max_bytes = MAX_LINE_BYTES
    where = None

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def send(self, signal: str, body: bytes) -> None:
        self.out.write(body + b"\n")

    def flush(self) -> None:
        """Lines out now (a Collector tailing the file reads them as they come)."""
        self.out.flush()

    def hurry(self) -> None:
        pass  # a file is written at once

    def close(self) -> None:
        self.out.flush()


class HttpDestination:
    """Bodies posted over OTLP/HTTP (``transport.OtlpHttp``); ``where`` names the backend."""

    max_bytes = MAX_BODY_BYTES

    def __init__(
        self,
        endpoint: str | None,
        headers: Sequence[str] = (),
        *,
        compression: str | None = None,
        retries: int = 5,
        env: OtlpEnvironment | None = None,
        protocol: str | None = None,
    ) -> None:
        from .transport import HTTP_JSON, HTTP_PROTOBUF, ExportError, OtlpHttp, Tls, endpoints_from

        env = otlp_environment() if env is None else env
        self.endpoints = endpoints_from(endpoint, env)
        # What the environment set that is not used (a protocol no exporter knows, a
        # timeout that is no number), for the caller to warn of: the OpenTelemetry spec
        # says to warn and go on.
        self.notes: list[str] = []
        given = _given_headers(headers)
        self.senders: dict[str, OtlpHttp] = {}
        shared: dict[tuple[str | None, ...], Tls] = {}  # one SSL context for the same files
        for signal, url in self.endpoints.items():
            # --protocol, else the signal's own variable over the general one; http/json
            # unless one says http/protobuf (grpc only with a URL from the environment,
            # which is then the collector's gRPC port: refused).
            chosen_protocol = protocol
            if chosen_protocol is None:
                given_value, variable = env.setting(signal, "protocol")
                value = (given_value or "").strip().lower()
                if not endpoint and value == "grpc":
                    raise ExportError(
                        f"{variable} is grpc; otel sends OTLP over HTTP "
                        "(give --endpoint http://HOST:4318, or set the protocol to "
                        "http/protobuf or http/json)"
                    )
                if value not in ("", HTTP_JSON, HTTP_PROTOBUF, "grpc"):
                    self._note(
                        f"{variable}={given_value!r} is no OTLP protocol (http/protobuf, "
                        "http/json or grpc): ignored, the requests go as http/json"
                    )
                chosen_protocol = HTTP_PROTOBUF if value == HTTP_PROTOBUF else HTTP_JSON
            # The signal's own variables over the general ones; -H over both.
            value, variable = env.setting(signal, "headers")
            configured = parse_key_values(value)
            for name, value in configured.items():
                _check_header(name, value, variable)
            # Lowest first: the transport sends one header of each name, in any case, the
            # last given (the URL's login unless a header says otherwise).
            login = _basic_login(url)
            sent = {"Authorization": login} if login else {}
            sent.update(configured)
            sent.update(given)
            chosen = compression
            if chosen is None:
                chosen = "none" if env.setting(signal, "compression")[0] == "none" else "gzip"
            # The TLS files for https (a bad one said now, before anything is sent); over
            # http they are not read, and used only if a redirect moves the signal to https.
            tls = Tls.of(env, signal)
            if tls is not None:
                tls = shared.setdefault(tls.files, tls)
                if url.lower().startswith("https:"):
                    tls.context()
            self.senders[signal] = OtlpHttp(
                {signal: url},
                headers=sent,
                compression=chosen,
                timeout=self._timeout(*env.setting(signal, "timeout")),
                retries=retries,
                tls=tls,
                protocol=chosen_protocol,
            )
        # What the summary names: the base URL, unless a signal's own URL stands in for it.
        own = not endpoint and (env.traces_endpoint or env.metrics_endpoint)
        urls = ", ".join(dict.fromkeys(self.endpoints.values()))
        from .transport import shown_url

        where = endpoint or (urls if own else env.endpoint) or urls
        self.where = ", ".join(shown_url(url) for url in where.split(", "))

    def _note(self, note: str) -> None:
        if note not in self.notes:  # a general variable's, once for both signals
            self.notes.append(note)

    def _timeout(self, milliseconds: str | None, variable: str) -> float:
        seconds = _timeout(milliseconds)
        if seconds is None:
            self._note(
                f"{variable}={milliseconds!r} is no timeout in milliseconds: "
                f"ignored, the default ({_DEFAULT_TIMEOUT:g} s) is used"
            )
            return _DEFAULT_TIMEOUT
        return seconds

    def send(self, signal: str, body: bytes, *, encoded: bool = False) -> Any:
        """Post one OTLP/JSON body (or one ``encoded`` for the wire already)."""
        sender = self.senders.get(signal)
        if sender is None:
            from .transport import ExportError

            raise ExportError(f"no OTLP endpoint for {signal} (give --endpoint, or --only)")
        return sender.send(signal, body, encoded=encoded)

    def encoded(self, signal: str, body: bytes) -> bytes:
        """``body`` as the signal's sender puts it on the wire (protobuf or JSON): what a
        worker process makes, for ``send(…, encoded=True)`` in the parent."""
        sender = self.senders.get(signal)
        return body if sender is None else sender.encoded(signal, body)

    def flush(self) -> None:
        pass  # each body is sent whole

    def hurry(self, timeout: float = 5.0) -> None:
        """One try of each body from now on, waiting ``timeout`` at most: a follower told
        to stop sends what it has, and does not hold up a shutdown for the retries."""
        for sender in self.senders.values():
            sender.retries = 0
            sender.timeout = min(sender.timeout, timeout)
            sender.close()  # a connection made with the longer timeout keeps it

    def close(self) -> None:
        for sender in self.senders.values():
            sender.close()


# RFC 9110: a field name is a token; a value holds no CR, LF or NUL (one would end the
# header and start another: a traceback from http.client, or a header smuggled in).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _basic_login(url: str) -> str | None:
    """``http://user:password@host``'s credentials as HTTP Basic (as curl and ``attach``
    take them), or None."""
    import base64
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return None
    pair = (
        f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    )
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def _given_headers(items: Sequence[str]) -> dict[str, str]:
    """``-H NAME=VALUE`` items, checked, in order (of a name given twice, in any case, the
    transport sends the last)."""
    given: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:  # curl's "Name: value" most often: its value a secret
            shown = re.split(r"[:\s]", item.strip(), maxsplit=1)[0]
            raise InputError(f"-H {shown!r}… is not a header NAME=VALUE (the rest not shown)")
        _check_header(name, value, "-H")
        given[name] = value
    return given


def _check_header(name: str, value: str, where: str) -> None:
    """An ``InputError`` naming the header (from ``where``: ``-H`` or a variable) that no
    HTTP request can carry."""
    if not _TOKEN.fullmatch(name):
        raise InputError(f"{name!r} is not an HTTP header name ({where})")
    if _BAD_VALUE.search(value):
        raise InputError(f"the header {name} holds a line break or a control character ({where})")
    try:  # as http.client sends a value (its bytes would be another encoding's guess)
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise InputError(
            f"the header {name} holds a character HTTP cannot carry: not Latin-1 ({where})"
        ) from None


_LONGEST_WAIT = 86_400.0  # s: a timeout past a day is taken for "wait", not for a day and more
_DEFAULT_TIMEOUT = 10.0  # s: the OpenTelemetry spec's


def _timeout(milliseconds: str | None) -> float | None:
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` (ms) in seconds: 10 when unset; ``0`` is no limit
    (the spec's), which is a day, as is anything longer (a socket cannot be told to wait
    for ``inf``); None for a value that is no number of milliseconds (negative, NaN, text),
    which the spec says to warn of and ignore."""
    if milliseconds is None:
        return _DEFAULT_TIMEOUT
    try:
        value = float(milliseconds) / 1000
    except ValueError:
        return None
    if value != value or value < 0:  # NaN, or below 0
        return None
    return _LONGEST_WAIT if value == 0 else min(value, _LONGEST_WAIT)


def export(
    sessions: Iterable[Finished],
    builder: TraceBuilder,
    sink: Sink,
    *,
    traces: bool = True,
    metrics: bool = True,
    max_bytes: int = MAX_BODY_BYTES,
    summary: Summary | None = None,
    resources: Resources | None = None,
) -> Summary:
    """Send every session's spans in bodies of at most ``max_bytes``, then the counters."""
    summary = summary or Summary()
    batches = SpanBatches(max_bytes)

    def send(signal: str, body: bytes) -> None:
        note = sink(signal, body)
        summary.bodies += 1
        if note is not None:
            summary.partial.append(note)

    try:
        for resource, spans in sessions:
            summary.sessions += 1
            if traces:
                for body in batches.add(resource, spans):
                    send("traces", body)
        if traces:
            for body in batches.flush():
                send("traces", body)
    finally:
        summary.spans = batches.spans
    if metrics:
        body = metrics_body(builder.counters, (resources or Resources())())
        if body is not None:
            summary.metric_points = builder.counters.points()
            send("metrics", body)
    return summary
