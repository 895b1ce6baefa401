"""Regenerate tests/golden/<scenario>.jsonl: `opencode-events normalize` of each real capture.

Run after an intended change to the output (`make goldens`), then read the diff: every
changed line in tests/golden/ is a change users will see.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opencode_events.pipeline import normalize_streams  # noqa: E402
from opencode_events.writers import JsonlWriter  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def normalized(stream: Path) -> bytes:
    out = io.BytesIO()
    with open(stream, "rb", buffering=0) as f:
        normalize_streams([("-", f)], JsonlWriter(out))
    return out.getvalue()


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for stream in sorted(ROOT.glob("samples/*/stream.jsonl")):
        target = GOLDEN / f"{stream.parent.name}.jsonl"
        target.write_bytes(normalized(stream))
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
