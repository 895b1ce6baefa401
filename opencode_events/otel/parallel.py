"""A large store export in one worker process per core: the same spans, sooner.

The sessions, in export order, are cut into chunks dealt round-robin to forked workers;
each opens the database again (``Store.reopen``), builds and encodes its sessions' spans
into bodies of at most ``max_bytes`` of its own, and sends each body to the parent through
a pipe as it is full, then its counters. The parent hands the bodies to the destination as
they come from any worker (OTLP has no order among spans or bodies: only the order of the
lines differs from one process's), and adds the counters up in worker order. The session
tree and the forks' copied history are worked out once, in the parent, before the fork.

A worker that fails reports it; the parent raises the same kind of error (``workers``).
A destination that refuses, or Ctrl-C, stops every worker. Nothing here prints.

    summary = export_in_workers(store, ids, builder, destination, workers=2)
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
from collections.abc import Sequence
from typing import Any

from ..store import fastscan
from ..workers import child_signals, failure_report, raise_failure, worker_count
from .export import Summary, store_builder, store_sessions
from .otlp import Resources, SpanBatches, metrics_body
from .spans import Counters, TraceBuilder, merge_histograms

__all__ = ["MIN_SESSIONS", "export_in_workers", "workers_for"]

MIN_SESSIONS = 64  # below this, starting workers costs more than it saves
CHUNK_SESSIONS = 32
_FRAME = struct.Struct("<cQ")  # kind (b"T" a traces body, b"C" counters, b"E" a failure), size


def workers_for(sessions: int) -> int:
    return worker_count(sessions, min_jobs=MIN_SESSIONS)


def export_in_workers(
    store: Any,
    session_ids: Sequence[str],
    builder: TraceBuilder,
    destination: Any,
    *,
    workers: int,
    traces: bool = True,
    metrics: bool = True,
    summary: Summary | None = None,
    resources: Resources | None = None,
) -> Summary:
    summary = summary or Summary()
    resources = resources or Resources()
    size = max(1, min(CHUNK_SESSIONS, len(session_ids) // (workers * 4) or 1))
    chunks = [session_ids[i : i + size] for i in range(0, len(session_ids), size)]
    shares = [
        [sid for chunk in chunks[index::workers] for sid in chunk] for index in range(workers)
    ]
    pids: list[int] = []
    reading: dict[int, bytearray] = {}
    reports: dict[int, Any] = {}  # worker index → counters, or a failure
    index_of: dict[int, int] = {}
    # A body goes on the wire as the destination encodes it (protobuf: ``http/protobuf``):
    # encoded by the worker that made it, not one at a time here.
    encode = getattr(destination, "encoded", None)
    try:
        for index, share in enumerate(shares):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(read_fd)
                for fd in reading:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                _worker(
                    store,
                    share,
                    builder,
                    resources,
                    write_fd,
                    destination.max_bytes,
                    traces,
                    encode,
                )
            os.close(write_fd)
            pids.append(pid)
            reading[read_fd] = bytearray()
            index_of[read_fd] = index
        while reading:
            ready, _, _ = select.select(list(reading), [], [])
            for fd in ready:
                data = os.read(fd, 1 << 20)
                if not data:
                    os.close(fd)
                    del reading[fd]
                    continue
                buffer = reading[fd]
                buffer += data
                while len(buffer) >= _FRAME.size:
                    kind, length = _FRAME.unpack_from(buffer)
                    if len(buffer) < _FRAME.size + length:
                        break
                    payload = bytes(buffer[_FRAME.size : _FRAME.size + length])
                    del buffer[: _FRAME.size + length]
                    if kind == b"T":
                        if encode is not None:
                            note = destination.send("traces", payload, encoded=True)
                        else:
                            note = destination.send("traces", payload)
                        summary.bodies += 1
                        if note is not None:
                            summary.partial.append(note)
                    else:
                        reports[index_of[fd]] = (kind, pickle.loads(payload))
    except BaseException:
        _stop(pids)
        for fd in reading:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    for index in range(workers):
        kind, report = reports.get(
            index, (b"E", {"error": "Killed", "message": "an otel worker stopped"})
        )
        if kind == b"E":
            raise_failure(report)
    counters = builder.counters
    for index in range(workers):
        _, (their, sessions, spans) = reports[index]
        _merge(counters, their)
        summary.sessions += sessions
        summary.spans += spans
    if metrics:
        body = metrics_body(counters, resources())
        if body is not None:
            destination.send("metrics", body)
            summary.bodies += 1
    return summary


def _worker(
    store: Any,
    share: Sequence[str],
    builder: TraceBuilder,
    resources: Resources,
    out: int,
    max_bytes: int,
    traces: bool,
    encode: Any = None,
) -> None:
    """A forked worker's whole life; leaves with ``os._exit``. ``encode(signal, body)``:
    a body as the destination sends it."""
    child_signals()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the parent says what a Ctrl-C ended
    code = 0
    try:
        # A SQLite connection must not be used across fork: its own, apsw's where it can.
        own = store.reopen(fastscan.sqlite3_like)
        mine = store_builder(own, parents=builder.parents, skip=builder.skip_messages)
        batches = SpanBatches(max_bytes)
        sessions = 0
        for resource, spans in store_sessions(own, share, mine, resources):
            sessions += 1
            if traces:
                for body in batches.add(resource, spans):
                    _write(out, b"T", encode("traces", body) if encode else body)
        if traces:
            for body in batches.flush():
                _write(out, b"T", encode("traces", body) if encode else body)
        _write(out, b"C", pickle.dumps((_counts(mine.counters), sessions, batches.spans)))
    except BaseException as exc:  # reported to the parent, which raises it
        code = 1
        with contextlib.suppress(BaseException):
            _write(out, b"E", pickle.dumps(failure_report(exc)))
    os._exit(code)


def _write(fd: int, kind: bytes, payload: bytes) -> None:
    view = memoryview(_FRAME.pack(kind, len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _counts(counters: Counters) -> dict[str, Any]:
    return {
        "tokens": counters.tokens,
        "cost": counters.cost,
        "figures": counters.figures,
        "sessions": counters.sessions,
        "token_usage": counters.token_usage,
        "durations": counters.durations,
        "start_ms": counters.start_ms,
        "end_ms": counters.end_ms,
    }


def _merge(counters: Counters, their: dict[str, Any]) -> None:
    for key, value in their["tokens"].items():
        counters.tokens[key] = counters.tokens.get(key, 0) + value
    for key, value in their["cost"].items():
        counters.cost[key] = counters.cost.get(key, 0.0) + value
    for key, value in their["figures"].items():
        counters.figures[key] = counters.figures.get(key, 0) + value
    for key, value in their["sessions"].items():
        counters.sessions[key] = counters.sessions.get(key, 0) + value
    merge_histograms(counters.token_usage, their["token_usage"])
    merge_histograms(counters.durations, their["durations"])
    for bound, pick in (("start_ms", min), ("end_ms", max)):
        value = their[bound]
        if value is not None:
            ours = getattr(counters, bound)
            setattr(counters, bound, value if ours is None else pick(ours, value))


def _stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
