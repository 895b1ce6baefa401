"""A one-connection stand-in for `opencode serve`'s event stream, for `attach` tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serving_events(sse: bytes, *, hold: float = 30.0) -> Iterator[tuple[str, threading.Event]]:
    """A server on 127.0.0.1 that answers the first request with ``sse`` as
    ``text/event-stream`` and keeps the stream open for ``hold`` seconds (or until the
    block ends: a thread left running would keep later tests' reports from forking their
    workers). Yields its URL and an event set once the stream was sent."""
    listener = socket.create_server(("127.0.0.1", 0))
    served, done = threading.Event(), threading.Event()

    def serve() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:  # closed before anyone came
            return
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Connection: close\r\n\r\n" + sse
            )
            served.set()
            done.wait(hold)  # the stream stays open: the session's idle, or a signal, ends

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", served
    finally:
        done.set()
        listener.close()
        server.join(10)
