"""Writers: normalized events out as JSON Lines.

``JsonlWriter`` encodes events into one reused buffer with one reused encoder. The
caller marks the end of each input batch; unbuffered, the writer then flushes, so an
event reaches a pipe as soon as no further complete input line is waiting, and a fast
input is still written in large blocks. Buffered, it writes only in 1 MB blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, BinaryIO

import msgspec

from ..events import Event

__all__ = ["JsonlWriter", "make_writer"]

_BLOCK = 1 << 20


class JsonlWriter:
    def __init__(
        self, out: BinaryIO, *, buffered: bool = False, tags: dict[str, str] | None = None
    ) -> None:
        self.out = out
        self._buffered = buffered
        self.tags = tags or None  # stamped on every event (``--tag``)
        self._buffer = bytearray()
        # One call per batch of events: encode_into a buffer that keeps growing measured
        # twice as slow per event (it resizes the buffer on every call).
        self._encode_lines = msgspec.json.Encoder().encode_lines

    def write(self, events: Iterable[Event]) -> None:
        if self.tags is not None:
            events = self._tagged(events)
        self._buffer += self._encode_lines(events)

    def _tagged(self, events: Iterable[Event]) -> list[Event]:
        tags = self.tags
        tagged = list(events)
        for event in tagged:
            # An event read again may carry tags already: ours win on the same key.
            event.tags = tags if event.tags is None else {**event.tags, **tags}  # type: ignore[dict-item]
        return tagged

    def write_shifted(self, events: list[Event], offset: int, lines: int = 0) -> None:
        """``write``, each event's ``seq`` moved on by ``offset`` first, and its ``line`` by
        ``lines`` (a worker numbers its events from 0, and a stream's lines from 1, until it
        knows where its chunk starts)."""
        if lines:
            for event in events:
                event.seq += offset
                if event.line is not None:
                    event.line += lines
        else:
            for event in events:
                event.seq += offset
        if self.tags is not None:
            events = self._tagged(events)
        self._buffer += self._encode_lines(events)

    def end_batch(self) -> None:
        if not self._buffered or len(self._buffer) >= _BLOCK:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            # Taken out first: a write cut short by Ctrl-C must not be written again whole
            # by the flush that follows it.
            data, self._buffer = self._buffer, bytearray()
            self.out.write(data)
        self.out.flush()


def make_writer(
    fmt: str,
    out: BinaryIO,
    *,
    buffered: bool = False,
    tags: dict[str, str] | None = None,
    full: bool = False,
    subagents_at_end: bool = False,
) -> Any:
    """``jsonl`` → JsonlWriter; ``pretty`` → pretty.PrettyWriter, imported only then (rich);
    ``subagents_at_end``: its closing metrics will bring the subagents' figures (``run``)."""
    if fmt == "pretty":
        from .pretty import MAX_LINES, PrettyWriter

        lines = None if full else MAX_LINES
        return PrettyWriter(out, max_lines=lines, subagents_at_end=subagents_at_end)
    if _is_terminal(out):  # JSON Lines asked for on a terminal: shown, never obeyed
        from .rows import TerminalText

        return JsonlWriter(TerminalText(out), buffered=buffered, tags=tags)  # type: ignore[arg-type]
    return JsonlWriter(out, buffered=buffered, tags=tags)


def _is_terminal(out: Any) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        return False
