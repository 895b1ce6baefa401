"""Builders for hand-written `opencode run --format json` records, shaped like real ones.

Real captures live in samples/; these are for edge cases and one-row-per-mapping tests.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import msgspec

from opencode_events.core.normalizer import Normalizer
from opencode_events.sources.stream import StreamReader

SESSION = "ses_test0000000000000000001"
MESSAGE = "msg_test000000000000000001"
_ids = itertools.count(1)


def part_id() -> str:
    return f"prt_test{next(_ids):022d}"


def record(type_: str, part: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": type_, "timestamp": 1795961879000, "sessionID": SESSION}
    rec.update(top)
    if part is not None:
        rec["part"] = {"id": part_id(), "sessionID": SESSION, "messageID": MESSAGE, **part}
    return rec


def tool_use(
    tool: str,
    input_: Any = None,
    *,
    status: str = "completed",
    output: str = "",
    metadata: dict[str, Any] | None = None,
    error: str | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {"status": status, "input": {} if input_ is None else input_}
    if status == "error":
        state["error"] = error or "boom"
    else:
        state.update(output=output, title=title or tool, metadata=metadata or {})
    state["time"] = {"start": 1795961878000, "end": 1795961878250}
    return record("tool_use", {"type": "tool", "tool": tool, "callID": "call_1", "state": state})


def step_finish(
    *,
    input_: int = 10,
    output: int = 5,
    reasoning: int = 0,
    read: int = 0,
    write: int = 0,
    cost: float = 0.0,
    total: int | None = None,
    reason: str = "stop",
) -> dict[str, Any]:
    tokens: dict[str, Any] = {
        "input": input_,
        "output": output,
        "reasoning": reasoning,
        "cache": {"read": read, "write": write},
    }
    if total is not None:
        tokens["total"] = total
    return record(
        "step_finish", {"type": "step-finish", "reason": reason, "cost": cost, "tokens": tokens}
    )


def normalize_lines(lines: list[bytes | str | dict[str, Any]], **kwargs: Any) -> list[dict]:
    """Feed lines through a fresh normalizer; return the events as plain dicts (no metrics)."""
    return normalize_with_metrics(lines, **kwargs)[0]


def normalize_with_metrics(lines: list[Any], **kwargs: Any) -> tuple[list[dict], dict]:
    """The events of ``lines`` as plain dicts, and the run's metrics event."""
    normalizer = Normalizer(**kwargs)
    reader = StreamReader(normalizer)
    out = []
    for number, line in enumerate(lines, 1):
        if isinstance(line, dict):
            line = json.dumps(line)
        if isinstance(line, str):
            line = line.encode()
        out.extend(msgspec.json.decode(msgspec.json.encode(e)) for e in reader.feed(number, line))
    return out, msgspec.json.decode(msgspec.json.encode(normalizer.metrics()))
