"""The fuzz suite's cases and checks, shared by ``tests/test_fuzz.py`` (bounded, seeded, in
``make test``) and ``scripts/fuzz.py`` (``make fuzz``: a million cases per input kind).

Each case is a real capture from samples/ (a run stream, a server event stream, an export
document, a store's message and part rows) with a few random mutations: bytes flipped,
inserted (bytes that are not UTF-8, control characters, JSON punctuation), removed, lines
cut, doubled or swapped. ``check(kind, case)`` maps it as the tool does and asserts what
must hold for any input: no exception, every line written is valid UTF-8 JSON (a strict
reader's check: no lone surrogate, no byte that is not UTF-8), and every record accounted
for (a stream's non-blank lines are its ``records``).
"""

from __future__ import annotations

import io
import json
import random
import sqlite3
from functools import cache
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
KINDS = ("stream", "sse", "export", "store")

_NASTY = [
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\x00",
    b"\x1b[2J",
    b"\x07",
    b"\x9b",
    b"\\ud800",
    b'"',
    b"{",
    b"}",
    b"[",
    b"\n",
    b"\r",
    b",",
    b"\\",
    b"\xef\xbb\xbf",
    b"1e999",
    b"null",
]


@cache
def corpus(kind: str) -> list[bytes]:
    """Real inputs of ``kind``: whole files (stream, sse, export), or part rows' data."""
    if kind == "stream":
        return [p.read_bytes() for p in sorted(SAMPLES.glob("*/stream.jsonl"))]
    if kind == "sse":
        return [p.read_bytes()[:20000] for p in sorted(SAMPLES.glob("*/*events.sse"))]
    if kind == "export":
        return [p.read_bytes() for p in sorted(SAMPLES.glob("*/export.json"))[:12]]
    rows: list[bytes] = []
    for db in sorted(SAMPLES.glob("*/opencode.db")):
        with sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True) as conn:
            rows += [r[0] for r in conn.execute("SELECT CAST(data AS BLOB) FROM part LIMIT 40")]
            rows += [r[0] for r in conn.execute("SELECT CAST(data AS BLOB) FROM message LIMIT 20")]
    return rows


def mutate(rng: random.Random, data: bytes, mutations: int) -> bytes:
    buffer = bytearray(data)
    for _ in range(mutations):
        how = rng.randrange(6)
        at = rng.randrange(len(buffer) + 1)
        if how == 0 and buffer:  # a byte flipped
            buffer[min(at, len(buffer) - 1)] = rng.randrange(256)
        elif how == 1:  # something nasty inserted
            buffer[at:at] = rng.choice(_NASTY)
        elif how == 2:  # a span removed
            del buffer[at : at + rng.randrange(1, 64)]
        elif how == 3:  # a span doubled
            buffer[at:at] = buffer[at : at + rng.randrange(1, 400)]
        elif how == 4:  # cut short
            del buffer[at:]
        else:  # two lines swapped
            lines = bytes(buffer).split(b"\n")
            if len(lines) > 2:
                i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
                buffer = bytearray(b"\n".join(lines))
    return bytes(buffer)


def case(kind: str, seed: int) -> bytes | list[bytes]:
    """The case ``seed`` of ``kind``: one input, or (store) a session's rows' data."""
    rng = random.Random(seed)
    source = corpus(kind)
    if kind == "store":
        picked = [rng.choice(source) for _ in range(rng.randrange(1, 6))]
        return [mutate(rng, data, rng.randrange(0, 4)) for data in picked]
    data = rng.choice(source)
    if kind in ("stream", "sse") and len(data) > 4000:  # a window of whole lines
        start = data.rfind(b"\n", 0, rng.randrange(len(data))) + 1
        data = data[start : start + rng.randrange(500, 4000)]
    return mutate(rng, data, rng.randrange(1, 9))


def _strict_lines(out: bytes) -> list[dict]:
    text = out.decode("utf-8")  # strict: a byte that is not UTF-8 fails here
    events = [json.loads(line) for line in text.split("\n") if line]
    assert out.endswith(b"\n") and text.count("\n") == len(events)
    return events


def check(kind: str, data: bytes | list[bytes]) -> int:
    """Map ``data`` as the tool maps an input of ``kind``, and check the output (see the
    module's docstring); the number of events written."""
    from opencode_events.core.normalizer import Normalizer
    from opencode_events.output.jsonl import JsonlWriter
    from opencode_events.pipeline.normalize import detect_format, normalize_streams

    out = io.BytesIO()
    writer = JsonlWriter(out, buffered=True)
    if kind == "store":
        from opencode_events.sources.transcript import session_events

        normalizer = Normalizer(keep_raw=True)
        messages = [("msg_a", "ses_f", 1, b'{"role":"assistant","id":"msg_a"}')]
        parts = [(f"prt_{i:03d}", "msg_a", "ses_f", i, row) for i, row in enumerate(data)]
        for events in session_events(normalizer, "ses_f", messages, parts):
            writer.write(events)
        writer.write([normalizer.metrics()])
        writer.flush()
        events = _strict_lines(out.getvalue())
        assert events[-1]["records"] == len(parts) + 1
        return len(events)
    assert isinstance(data, bytes)
    keep_raw = len(data) % 2 == 0  # half of the cases with --raw
    normalize_streams([("-", io.BytesIO(data))], writer, keep_raw=keep_raw)
    events = _strict_lines(out.getvalue())
    metrics = events[-1]
    assert metrics["kind"] == "metrics"
    if detect_format(data) == "jsonl":  # a run stream: each line holding anything, a record
        lines = [
            line
            for line in data.split(b"\n")
            if line.removeprefix(b"\xef\xbb\xbf").strip(b" \t\r\n\x0b\x0c")
        ]
        assert metrics["records"] == len(lines), (metrics["records"], len(lines))
    return len(events)
