"""Replay a real captured store into a fresh database, as OpenCode wrote it, row by row.

OpenCode 1.18 writes each durable event in one transaction: the ``event`` row, its
``event_sequence`` and the row it projects to (``session``, ``message`` or ``part``). The
captures in samples/ keep the whole log, so the store can be written again in OpenCode's
own order: one event a commit (sometimes two or three together), with pauses between
commits, in WAL mode like OpenCode's. What a projection cannot know from the event (a
part's ``time_created``) is taken from the captured row; at the end every row is written
as captured, so the final database holds what the capture holds.

``--checkpoint`` runs a passive checkpoint a third of the way and a TRUNCATE one (the WAL
reset to nothing) two thirds of the way; ``--restart`` closes the writer half-way (the
last connection: SQLite checkpoints and removes the WAL, as when OpenCode quits) and opens
a new one (OpenCode started again); ``--no-log`` writes the rows only, as an OpenCode
without the log would.

    python -m tests.replay SRC DST [--delay 0.01] [--checkpoint] [--restart] [--no-log]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

_PROJECTED = ("session", "message", "part", "event", "event_sequence")


def _schema(src: sqlite3.Connection, dst: sqlite3.Connection, *, log: bool) -> None:
    for name, sql in src.execute(
        "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND type = 'table'"
    ):
        if not log and name in ("event", "event_sequence"):
            continue
        dst.execute(sql)
    for _name, table, sql in src.execute(
        "SELECT name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL AND type = 'index'"
    ):
        if not log and table in ("event", "event_sequence"):
            continue
        dst.execute(sql)
    for (name,) in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        if name in _PROJECTED or name.startswith("sqlite_"):
            continue
        _copy_table(src, dst, name)


def _copy_table(src: sqlite3.Connection, dst: sqlite3.Connection, name: str) -> None:
    rows = src.execute(f"SELECT * FROM `{name}`").fetchall()
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        dst.executemany(f"INSERT OR REPLACE INTO `{name}` VALUES ({marks})", rows)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info(`{table}`)")]


def _upsert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    names = list(row)
    conn.execute(
        f"INSERT OR REPLACE INTO `{table}` ({', '.join(names)}) "
        f"VALUES ({', '.join('?' * len(names))})",
        [row[n] for n in names],
    )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Replayer:
    def __init__(self, src: Path, dst: Path, *, log: bool = True) -> None:
        self.src = sqlite3.connect(f"file:{src}?immutable=1", uri=True)
        self.dst_path = dst
        self.log = log
        self.dst = self._open()
        _schema(self.src, self.dst, log=log)
        self.dst.commit()
        self.final = {
            table: {
                row[0]: dict(zip(_columns(self.src, table), row, strict=True))
                for row in self.src.execute(f"SELECT * FROM `{table}`")
            }
            for table in ("session", "message", "part")
        }

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.dst_path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        return conn

    def events(self) -> list[tuple[Any, ...]]:
        return self.src.execute(
            "SELECT rowid, id, aggregate_id, seq, type, data FROM event ORDER BY rowid"
        ).fetchall()

    def apply(self, event: tuple[Any, ...]) -> None:
        _, event_id, aggregate, seq, type_, data = event
        conn = self.dst
        if self.log:
            conn.execute(
                "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, ?)",
                (event_id, aggregate, seq, type_, data),
            )
            _upsert(conn, "event_sequence", {"aggregate_id": aggregate, "seq": seq})
        props = json.loads(data)
        kind = type_.rsplit(".", 1)[0]
        if kind in ("session.created", "session.updated"):
            info = props["info"]
            row = dict(self.final["session"][info["id"]])
            tokens = info.get("tokens") or {}
            cache = tokens.get("cache") or {}
            row.update(
                cost=info.get("cost", 0),
                tokens_input=tokens.get("input", 0),
                tokens_output=tokens.get("output", 0),
                tokens_reasoning=tokens.get("reasoning", 0),
                tokens_cache_read=cache.get("read", 0),
                tokens_cache_write=cache.get("write", 0),
                time_updated=(info.get("time") or {}).get("updated", row["time_updated"]),
            )
            _upsert(conn, "session", row)
        elif kind == "message.updated":
            info = dict(props["info"])
            mid, sid = info.pop("id"), info.pop("sessionID")
            times = info.get("time") or {}
            final = self.final["message"].get(mid)
            created = final["time_created"] if final else times.get("created", 0)
            updated = max(created, times.get("completed") or times.get("created") or 0)
            _upsert(
                conn,
                "message",
                {
                    "id": mid,
                    "session_id": sid,
                    "time_created": created,
                    "time_updated": updated,
                    "data": _compact(info),
                },
            )
        elif kind == "message.part.updated":
            part = dict(props["part"])
            pid, mid, sid = part.pop("id"), part.pop("messageID"), part.pop("sessionID")
            final = self.final["part"].get(pid)
            when = props.get("time") or (final["time_updated"] if final else 0)
            _upsert(
                conn,
                "part",
                {
                    "id": pid,
                    "message_id": mid,
                    "session_id": sid,
                    "time_created": final["time_created"] if final else when,
                    "time_updated": when,
                    "data": _compact(part),
                },
            )

    def finish(self) -> None:
        """Every row as captured: the final database holds what the capture holds."""
        conn = self.dst
        conn.execute("BEGIN")
        for table, rows in self.final.items():
            for row in rows.values():
                _upsert(conn, table, row)
        conn.execute("COMMIT")

    def run(
        self,
        *,
        delay: float = 0.01,
        checkpoint: bool = False,
        restart: bool = False,
        seed: int = 1,
    ) -> None:
        rng = random.Random(seed)
        events = self.events()
        i = 0
        n = len(events)
        while i < n:
            together = rng.choice((1, 1, 1, 2, 3))  # mostly one event a commit
            self.dst.execute("BEGIN IMMEDIATE")
            for event in events[i : i + together]:
                self.apply(event)
            self.dst.execute("COMMIT")
            before, i = i, min(n, i + together)
            if checkpoint and before < n // 3 <= i:
                self.dst.execute("PRAGMA wal_checkpoint(PASSIVE)")
            if checkpoint and before < 2 * n // 3 <= i:
                self.dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if restart and before < n // 2 <= i:
                self.dst.close()  # OpenCode quits: the WAL is folded in and removed
                time.sleep(delay * 5)
                self.dst = self._open()  # and starts again
            time.sleep(rng.uniform(0, 2 * delay))
        self.finish()
        self.dst.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--delay", type=float, default=0.01)
    ap.add_argument("--wait", type=float, default=0.0, help="Seconds before creating DST.")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--restart", action="store_true")
    ap.add_argument("--no-log", action="store_true")
    args = ap.parse_args(argv)
    time.sleep(args.wait)
    Replayer(args.src, args.dst, log=not args.no_log).run(
        delay=args.delay, checkpoint=args.checkpoint, restart=args.restart
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
