"""Soak: `import --follow --all --forever` over a store that keeps being written, for an hour.

A writer replays a real capture (samples/task: a session with a subagent) into one WAL
database again and again, event by event as OpenCode writes (tests/replay.py), each round
under fresh ids (every ``ses_``/``msg_``/``prt_``/``evt_`` id prefixed with the round), with
checkpoints (a passive one and a WAL reset) every other round. The follower runs as a
separate process writing to a file; its resident memory is sampled every few seconds.
Memory is flat when what it keeps does not grow with the time followed: the report gives
the RSS at the first minute, the highest, the last, and the growth per ten minutes over the
second half (after warm-up).

    python bench/soak_follow.py [--minutes 60] [--sample samples/task/opencode.db]
    make soak                   # the hour; SOAK_MINUTES=5 make soak for a short one
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.replay import Replayer  # noqa: E402

_TABLES = ("session", "message", "part", "event", "event_sequence")
_PREFIXES = ("ses_", "msg_", "prt_", "evt_")


def variant(sample: Path, round_: int, folder: Path) -> Path:
    """A copy of ``sample`` whose ids are all new (prefixed with the round)."""
    copy = folder / f"round-{round_}.db"
    shutil.copyfile(sample, copy)
    conn = sqlite3.connect(copy)
    for table in _TABLES:
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info(`{table}`)")]
        for column in columns:
            for prefix in _PREFIXES:
                conn.execute(
                    f"UPDATE `{table}` SET `{column}` = replace(`{column}`, ?, ?) "
                    f"WHERE typeof(`{column}`) = 'text'",
                    (prefix, f"{prefix}r{round_}x"),
                )
    conn.commit()
    conn.close()
    return copy


class _Continue(Replayer):
    """A replayer into a database that already has the schema (a later round)."""

    def __init__(self, src: Path, dst: Path) -> None:  # noqa: D107 - as Replayer, no schema
        self.src = sqlite3.connect(f"file:{src}?immutable=1", uri=True)
        self.dst_path = dst
        self.log = True
        self.dst = self._open()
        self.final = {
            table: {
                row[0]: dict(zip(self._names(table), row, strict=True))
                for row in self.src.execute(f"SELECT * FROM `{table}`")
            }
            for table in ("session", "message", "part")
        }

    def _names(self, table: str) -> list[str]:
        return [row[1] for row in self.src.execute(f"PRAGMA table_info(`{table}`)")]


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample", type=Path, default=ROOT / "samples" / "task" / "opencode.db")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between commits")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="oe-soak-"))
    dst = folder / "opencode.db"
    out = folder / "followed.jsonl"
    try:
        first = variant(args.sample, 0, folder)
        writer = Replayer(first, dst)
        follower = subprocess.Popen(
            [sys.executable, "-m", "opencode_events", "import", "--follow", "--all",
             "--forever", "--db", str(dst), "-o", str(out)],
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        start = time.monotonic()
        end = start + args.minutes * 60
        samples: list[tuple[float, int]] = []
        next_sample = start
        rounds = 0
        while time.monotonic() < end:
            if rounds:
                writer = _Continue(variant(args.sample, rounds, folder), dst)
            writer.run(delay=args.delay, checkpoint=rounds % 2 == 1)  # finishes and closes
            writer.src.close()
            rounds += 1
            now = time.monotonic()
            if now >= next_sample:
                kb = rss_kb(follower.pid)
                if kb is not None:
                    samples.append((now - start, kb))
                next_sample = now + args.every
        follower.terminate()
        follower.wait(timeout=30)
        lines = out.read_bytes().count(b"\n") if out.exists() else 0
        settled = [kb for t, kb in samples if t >= 60] or [kb for _, kb in samples]
        half = [(t, kb) for t, kb in samples if t >= args.minutes * 30]
        growth = 0.0
        if len(half) >= 2:
            (t0, k0), (t1, k1) = half[0], half[-1]
            growth = (k1 - k0) / 1024 / max((t1 - t0) / 600, 1e-9)
        report = {
            "minutes": args.minutes,
            "rounds": rounds,
            "events_written": lines,
            "rss_mb_first_minute": round(settled[0] / 1024, 1) if settled else None,
            "rss_mb_max": round(max(kb for _, kb in samples) / 1024, 1) if samples else None,
            "rss_mb_last": round(samples[-1][1] / 1024, 1) if samples else None,
            "growth_mb_per_10_min_second_half": round(growth, 2),
        }
        print(json.dumps(report, indent=2))
        (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
        (ROOT / "bench" / "out" / "soak-results.json").write_text(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
