"""Generate a large `opencode run --format json` stream from the real captures in samples/.

The records are OpenCode's own, as captured; each copy of the corpus gets a fresh session
id (and so fresh part-id scope), the way a log of many runs would read. Usage:

    python bench/gen_stream.py SIZE_MB > big.jsonl      # or pipe it straight into a reader
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SESSION = re.compile(rb"ses_[0-9A-Za-z]{20,}")


def real_records() -> list[bytes]:
    """Every non-blank line of every captured stream, in order."""
    lines: list[bytes] = []
    for path in sorted(ROOT.glob("samples/*/stream.jsonl")):
        lines.extend(line for line in path.read_bytes().splitlines() if line.strip())
    if not lines:
        raise SystemExit("error: no samples/*/stream.jsonl to build from (run `make samples`)")
    return lines


def corpus_block() -> tuple[bytes, list[bytes]]:
    """The corpus as one block of lines, and the session ids it names."""
    block = b"\n".join(real_records()) + b"\n"
    return block, sorted(set(_SESSION.findall(block)))


def blocks(size: int) -> Iterator[bytes]:
    """Copies of the corpus, each under new session ids, until ``size`` bytes were given."""
    block, sessions = corpus_block()
    written, copy = 0, 0
    while written < size:
        copy += 1
        out = block
        for index, session in enumerate(sessions):
            fresh = b"ses_bench%08d%04d" % (copy, index)
            out = out.replace(session, fresh.ljust(len(session), b"x"))
        yield out
        written += len(out)


def main() -> None:
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 200
    out = sys.stdout.buffer
    try:
        for chunk in blocks(int(size_mb * (1 << 20))):
            out.write(chunk)
    except BrokenPipeError:
        pass


if __name__ == "__main__":
    main()
