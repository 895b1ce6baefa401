"""Refresh the "Examples from real captures" block of docs/events.md from tests/golden/.

One example per kind: the first line of that kind in the goldens, in a fixed scenario order,
`raw` cut short so the page stays readable. `make goldens` runs this too; a test checks
the page matches, so the examples can never drift from what the tool prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "events.md"
BEGIN, END = "<!-- examples:begin -->", "<!-- examples:end -->"
KINDS = [
    "message",
    "reasoning",
    "read",
    "write",
    "search",
    "command",
    "orchestration",
    "skill",
    "usage",
    "error",
    "unknown",
    "metrics",
]
PREFERRED = [
    "file_tools",
    "apply_patch",
    "bash_fail",
    "task",
    "reasoning_thinking",
    "skill",
    "error400",
    "invalid_tool",
    "text",
]


def examples() -> str:
    goldens = [ROOT / "tests" / "golden" / f"{name}.jsonl" for name in PREFERRED]
    goldens += sorted(p for p in (ROOT / "tests" / "golden").glob("*.jsonl") if p not in goldens)
    blocks = []
    for kind in KINDS:
        for path in goldens:
            if not path.exists():
                continue
            line = next(
                (
                    line
                    for line in path.read_text().splitlines()
                    if json.loads(line)["kind"] == kind
                ),
                None,
            )
            if line is None:
                continue
            event = json.loads(line)
            if "raw" in event:
                event["raw"] = {"type": event["raw"].get("type"), "…": "the whole record"}
            blocks.append(
                f"`{kind}` — from `samples/{path.stem}`:\n\n```json\n"
                f"{json.dumps(event, ensure_ascii=False)}\n```\n"
            )
            break
    return "\n".join(blocks)


def render(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{examples()}{END}{tail}"


def main() -> None:
    text = DOC.read_text()
    if BEGIN not in text:
        sys.exit(f"error: {DOC} has no {BEGIN} marker")
    DOC.write_text(render(text))


if __name__ == "__main__":
    main()
