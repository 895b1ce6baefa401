"""Generate a large `opencode run --format json` stream from the real captures in samples/.

The records are OpenCode's own, as captured; each copy of the corpus gets a fresh session
id (and so fresh part-id scope), the way a log of many runs would read. ``--ordinary`` leaves
out the records longer than ``ORDINARY_MAX`` bytes (the captured 84 KB tool output): a mix of
ordinary small records, where per-record work is all there is and no giant record, cheap per
byte for every reader, flatters the ratio. ``--one-session`` writes every copy under one
session, its parts under new ids each time: one long run. Usage:

    python bench/gen_stream.py SIZE_MB > big.jsonl      # or pipe it straight into a reader
    python bench/gen_stream.py --ordinary SIZE_MB > small.jsonl
    python bench/gen_stream.py --ordinary --one-session SIZE_MB > long-run.jsonl
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SESSION = re.compile(rb"ses_[0-9A-Za-z]{20,}")
# The longest ordinary record: every captured record but one is under 3 KB (an apply_patch
# of two files); the one left out is big_output's 84 KB bash output.
ORDINARY_MAX = 4096


def real_records(*, ordinary: bool = False) -> list[bytes]:
    """Every non-blank line of every captured stream, in order (``ordinary``: those of at
    most ``ORDINARY_MAX`` bytes)."""
    lines: list[bytes] = []
    for path in sorted(ROOT.glob("samples/*/stream.jsonl")):
        lines.extend(line for line in path.read_bytes().splitlines() if line.strip())
    if not lines:
        raise SystemExit("error: no samples/*/stream.jsonl to build from (run `make samples`)")
    if ordinary:
        lines = [line for line in lines if len(line) <= ORDINARY_MAX]
    return lines


def corpus_block(*, ordinary: bool = False) -> tuple[bytes, list[bytes]]:
    """The corpus as one block of lines, and the session ids it names."""
    block = b"\n".join(real_records(ordinary=ordinary)) + b"\n"
    return block, sorted(set(_SESSION.findall(block)))


def blocks(size: int, *, ordinary: bool = False, one_session: bool = False) -> Iterator[bytes]:
    """Copies of the corpus, each under new session ids (``one_session``: all under one,
    with new part ids), until ``size`` bytes were given."""
    block, sessions = corpus_block(ordinary=ordinary)
    written, copy = 0, 0
    while written < size:
        copy += 1
        out = block
        if one_session:
            out = out.replace(b"prt_", b"prt_%07d" % copy)
        for index, session in enumerate(sessions):
            fresh = b"ses_bench%08d%04d" % (0 if one_session else copy, 0 if one_session else index)
            out = out.replace(session, fresh.ljust(len(session), b"x"))
        yield out
        written += len(out)


def main() -> None:
    args = sys.argv[1:]
    ordinary = "--ordinary" in args
    one_session = "--one-session" in args
    args = [arg for arg in args if arg not in ("--ordinary", "--one-session")]
    size_mb = float(args[0]) if args else 200
    out = sys.stdout.buffer
    try:
        for chunk in blocks(int(size_mb * (1 << 20)), ordinary=ordinary, one_session=one_session):
            out.write(chunk)
    except BrokenPipeError:
        pass


if __name__ == "__main__":
    main()
