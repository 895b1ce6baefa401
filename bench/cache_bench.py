"""`make bench`, the report cache (issue 21): repeat and incremental reports against ccusage.

On a copy of the bench database as OpenCode itself would have written it (every session with
its event-log sequence; ``gen_db.py`` writes none), side by side with ccusage on its own copy,
in alternating blocks (``store_bench.paired``):

- **cold**: the cache folder emptied before each of our runs, so every run reads the whole
  database and writes the cache (budgets: ``sessions --all`` ≥ 3×, ``usage --all --by day``
  ≥ 5× ccusage's ``opencode session`` / ``opencode daily``);
- **repeat**: nothing changed since the last run (≥ 20× ccusage, and under 0.2 s);
- **1 % changed**: before each of our runs (not timed), 1 % of the sessions get a new reply
  the way OpenCode writes one (a message, two parts, an event, the session's sequence
  moved), so every timed run has 1 % of the sessions to read again (≥ 10× ccusage);
- **1 % changed, older sessions unlogged**: the same on a copy whose sessions predate the
  event log (no sequence rows, as a long-used database's older sessions: gen_db.py writes
  none), where OpenCode's writes give the changed sessions their first stamps;
- **usage by turn and by step** (``usage --all``, ours alone: ccusage has no report like
  them): cold, repeat and 1 % changed, and the last against its cold run.

Every report is checked against ``--no-cache`` on the same state. Prints a Markdown table and
writes bench/out/cache-results.json.

    python bench/cache_bench.py          # BENCH_BLOCKS / BENCH_BLOCK_RUNS as store_bench
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import store_bench as sb

LOGGED = sb.OUT / "opencode-10k-logged.db"
UNLOGGED = sb.OUT / "opencode-10k-unlogged.db"
CHANGED_SHARE = 0.01


def _fresh_copy(path: Path) -> Path:
    """``path``, a copy of the bench database as generated, made again (with no WAL or
    shared-memory file left of the last): the changes a bench writes are not to pile up."""
    sb.ensure_db(sb.DB)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(sb.DB, path)
    return path


def unlogged_copy() -> Path:
    """A copy of the bench database as generated (no session has a sequence row), made
    again for every bench."""
    return _fresh_copy(UNLOGGED)


def logged_copy() -> Path:
    """The bench database with an event-log sequence per session, as OpenCode keeps one:
    made again for every bench, as the unlogged copy is. (It was once kept between
    benches: each added its replies, always to the same sessions first, and after many
    the copy held 13 % more messages, 290 more in some sessions, and every 1 %-changed
    run read more than a fresh database's.)"""
    print(f"copying {sb.DB.name} with event sequences …", file=sys.stderr)
    LOGGED.with_suffix(".json").unlink(missing_ok=True)  # the stamp the kept copy had
    _fresh_copy(LOGGED)
    conn = sqlite3.connect(LOGGED)
    conn.execute(
        "INSERT OR REPLACE INTO event_sequence (aggregate_id, seq) "
        "SELECT session_id, count(*) FROM message GROUP BY session_id"
    )
    conn.commit()
    conn.close()
    return LOGGED


class Writer:
    """Writes as OpenCode does: a new reply in a share of the sessions, with its event."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.rng = random.Random(21)
        self.n = 0
        self.run = f"{time.time_ns():x}"  # ids of this run's rows: a kept copy has earlier ones
        conn = sqlite3.connect(db)
        self.sessions = [r[0] for r in conn.execute("SELECT id FROM session")]
        conn.close()

    def change(self, share: float = CHANGED_SHARE) -> None:
        conn = sqlite3.connect(self.db)
        for sid in self.rng.sample(self.sessions, max(1, int(len(self.sessions) * share))):
            row = conn.execute(
                "SELECT id, time_created, data FROM message WHERE session_id = ? "
                'AND data LIKE \'{"role":"assistant"%\' ORDER BY rowid DESC LIMIT 1',
                (sid,),
            ).fetchone()
            if row is None:
                continue
            mid, created, data = row
            # after the session began, as a reply is: a fork's last message may be a copy,
            # older than the fork (OpenCode writes nothing else before its session)
            (began,) = conn.execute(
                "SELECT time_created FROM session WHERE id = ?", (sid,)
            ).fetchone()
            created = max(created, began)
            self.n += 1
            new = f"msg_bench{self.run}{self.n:08d}"
            conn.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (new, sid, created + 1, created + 1, data),
            )
            for k, (pdata,) in enumerate(
                conn.execute(
                    "SELECT data FROM part WHERE message_id = ? LIMIT 2", (mid,)
                ).fetchall()
            ):
                conn.execute(
                    "INSERT INTO part (id, message_id, session_id, time_created, "
                    "time_updated, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (f"prt_{new[4:]}{k}", new, sid, created + 1, created + 1, pdata),
                )
            (seq,) = conn.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM event_sequence WHERE aggregate_id = ?",
                (sid,),
            ).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO event_sequence (aggregate_id, seq) VALUES (?, ?)",
                (sid, seq),
            )
            conn.execute(
                "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, ?)",
                (f"evt_bench{self.run}{self.n:08d}", sid, seq, "message.updated.1", "{}"),
            )
        conn.commit()
        conn.close()


def alternate(ours, peer: list[str], peer_env: dict) -> dict:
    """``paired`` with a callable for ours (it may prepare each run untimed)."""
    mine, theirs = [], []
    for _ in range(sb.BLOCKS):
        mine.append([ours() for _ in range(sb.BLOCK_RUNS)][1:])
        theirs.append([sb.measure(peer, env=peer_env) for _ in range(sb.BLOCK_RUNS)][1:])
    best_mine = [min(r[0] for r in block) for block in mine]
    best_theirs = [min(r[0] for r in block) for block in theirs]
    pairs = [b / a for a, b in zip(best_mine, best_theirs, strict=True)]
    return {
        "ours_s": round(min(best_mine), 3),
        "ours_rss": max(r[1] for block in mine for r in block),
        "peer_s": round(min(best_theirs), 2),
        "ratio": round(min(best_theirs) / min(best_mine), 1),
        "ratio_by_block": [round(min(pairs), 1), round(max(pairs), 1)],
    }


def _own(db: Path, writer: Writer, cache_home: Path, env: dict, by: str) -> dict:
    """``usage --all --by BY`` (turn, step), which ccusage has no report like: ours alone,
    best of a block each (cold: the cache emptied; repeat; 1 % of the sessions changed
    before each run, untimed), and whether the report brought up to date is the one
    --no-cache gives."""
    cmd = sb.our_cmd("usage", "--db", str(db), "--all", "--by", by, "--format", "json")
    runs = sb.BLOCK_RUNS

    def best(prepare) -> tuple[float, int]:
        found = []
        for _ in range(runs):
            prepare()
            found.append(sb.measure(cmd, env=env))
        return min(r[0] for r in found), max(r[1] for r in found)

    cold = best(lambda: shutil.rmtree(cache_home, ignore_errors=True))
    repeat = best(lambda: None)
    changed = best(writer.change)
    writer.change()
    same = sb.capture(cmd, env=env) == sb.capture([*cmd, "--no-cache"], env=env)
    return {
        "cold_s": round(cold[0], 3),
        "repeat_s": round(repeat[0], 3),
        "changed_1pct_s": round(changed[0], 3),
        "changed_rss": changed[1],
        "changed_vs_cold": round(cold[0] / changed[0], 1),
        "same_as_no_cache": same,
    }


def main() -> None:
    idle = sb.check_idle()
    db = logged_copy()
    cc = sb.ccusage()
    if cc is None:
        print("ccusage is not installed: no ratios", file=sys.stderr)
        return
    cache_home = Path(tempfile.mkdtemp(prefix="opencode-events-bench-cache-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    writer = Writer(db)
    unlogged = unlogged_copy()
    unlogged_writer = Writer(unlogged)
    # The two copies' dirty pages (6 GB) written out before anything is timed (about a
    # second a copy here), not in the middle of a block: the kernel left one copy's 2.4 GB
    # dirty for 45 s and more before writing it back.
    os.sync()
    results: dict = {"idle_before": idle, "database": str(db), "unlogged": str(unlogged)}
    commands = {
        "sessions": (
            ["sessions", "--db", str(db), "--all", "--format", "json"],
            ["opencode", "session", "--offline", "--json", "--timezone", sb.TZ],
            3,
        ),
        "usage": (
            ["usage", "--db", str(db), "--all", "--by", "day", "--format", "json"],
            ["opencode", "daily", "--offline", "--json", "--timezone", sb.TZ],
            5,
        ),
    }
    peer_env = sb.ccusage_env()
    for name, (args, peer_args, cold_budget) in commands.items():
        cmd, peer = sb.our_cmd(*args), [*cc, *peer_args]

        def cold(cmd: list[str] = cmd) -> tuple[float, int]:
            shutil.rmtree(cache_home, ignore_errors=True)
            return sb.measure(cmd, env=env)

        def repeat(cmd: list[str] = cmd) -> tuple[float, int]:
            return sb.measure(cmd, env=env)

        def changed(cmd: list[str] = cmd) -> tuple[float, int]:
            writer.change()
            return sb.measure(cmd, env=env)

        figures = {}
        figures["cold"] = alternate(cold, peer, peer_env)
        figures["cold"]["budget"] = cold_budget
        sb.measure(cmd, env=env)  # fill the cache
        figures["repeat"] = alternate(repeat, peer, peer_env)
        figures["repeat"]["budget"] = 20
        figures["changed_1pct"] = alternate(changed, peer, peer_env)
        figures["changed_1pct"]["budget"] = 10
        # The cached report is the one a run without the cache writes, on this state.
        writer.change()
        with_cache = sb.capture(cmd, env=env)
        without = sb.capture([*cmd, "--no-cache"], env=env)
        figures["same_as_no_cache"] = with_cache == without
        # The same 1 % on the database whose sessions predate the event log.
        old_cmd = sb.our_cmd(*[str(unlogged) if a == str(db) else a for a in args])
        sb.measure(old_cmd, env=env)  # fill the cache

        def changed_unlogged(cmd: list[str] = old_cmd) -> tuple[float, int]:
            unlogged_writer.change()
            return sb.measure(cmd, env=env)

        figures["changed_1pct_unlogged"] = alternate(changed_unlogged, peer, peer_env)
        figures["changed_1pct_unlogged"]["budget"] = 10
        unlogged_writer.change()
        figures["same_as_no_cache"] &= sb.capture(old_cmd, env=env) == sb.capture(
            [*old_cmd, "--no-cache"], env=env
        )
        results[name] = figures
    results["usage by turn"] = _own(db, writer, cache_home, env, "turn")
    results["usage by step"] = _own(db, writer, cache_home, env, "step")
    shutil.rmtree(cache_home, ignore_errors=True)
    unlogged.unlink(missing_ok=True)  # 3 GB, made again next time
    (sb.OUT / "cache-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n| figure | ours | ccusage | ratio [blocks] | budget | verdict |")
    print("|---|---|---|---|---|---|")
    for name in commands:
        for case in ("cold", "repeat", "changed_1pct", "changed_1pct_unlogged"):
            f = results[name][case]
            ok = f["ratio"] >= f["budget"] and (case != "repeat" or f["ours_s"] < 0.2)
            budget = f"≥ {f['budget']}×" + (" and < 0.2 s" if case == "repeat" else "")
            print(
                f"| {name} {case} | {f['ours_s']:.3f} s | {f['peer_s']:.2f} s | "
                f"{f['ratio']}× [{f['ratio_by_block'][0]}–{f['ratio_by_block'][1]}] | "
                f"{budget} | {'ok' if ok else 'OVER BUDGET'} |"
            )
        same = results[name]["same_as_no_cache"]
        print(f"| {name} same as --no-cache | {same} | | | equal | {'ok' if same else 'WRONG'} |")
    for by in ("turn", "step"):
        own = results[f"usage by {by}"]
        print(
            f"| usage --all --by {by} cold / repeat / 1 % changed | {own['cold_s']:.3f} / "
            f"{own['repeat_s']:.3f} / {own['changed_1pct_s']:.3f} s | (no such report) | "
            f"{own['changed_vs_cold']}× its cold run | — | "
            f"{'same as --no-cache' if own['same_as_no_cache'] else 'WRONG'} |"
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
