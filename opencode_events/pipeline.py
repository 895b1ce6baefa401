"""Reader → normalizer → writer, wired for one ``normalize`` run.

Each input is read to its end before the next starts; every input begins a new run for
session and turn numbering, while ``seq`` and the closing metrics cover the whole output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

from .normalizer import Normalizer
from .stream import StreamReader, line_batches
from .writers import JsonlWriter

__all__ = ["normalize_streams"]


def normalize_streams(
    inputs: Sequence[tuple[str, BinaryIO]],
    writer: JsonlWriter,
    *,
    keep_raw: bool = False,
    metrics: bool = True,
) -> Normalizer:
    """Normalize each ``(name, binary stream)`` in turn into ``writer``."""
    normalizer = Normalizer(keep_raw=keep_raw)
    several = len(inputs) > 1
    for name, stream in inputs:
        normalizer.reset()
        feed = StreamReader(normalizer, source=name if several else None).feed
        write = writer.write
        line_no = 0
        for batch in line_batches(stream):
            for line in batch:
                line_no += 1
                events = feed(line_no, line)
                if events:
                    write(events)
            writer.end_batch()
    if metrics:
        writer.write([normalizer.metrics()])
    writer.flush()
    return normalizer
