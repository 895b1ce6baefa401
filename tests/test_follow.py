"""`import --follow`: the store's event log read as OpenCode writes it (docs/live.md).

The real captures in samples/ are written again, row by row in OpenCode's own order with
commits spread over time (tests/replay.py), into a database that appears only after
following began; a checkpoint, a WAL reset and a restart of the writer happen on the way.
What was followed must be what reading the finished database at once gives, event for
event, and what `import` gives on it, with the differences the server's events have
(docs/server-events.md: times, and usage dated by the reply without a step-finish part).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from opencode_events.core.activity import BUSY, IDLE, STALE, session_state
from opencode_events.core.normalizer import Normalizer
from opencode_events.pipeline.follow import FollowEnd, follow_store
from opencode_events.pipeline.normalize import import_sessions
from opencode_events.sources.eventlog import StoreFollower, event_type
from opencode_events.store.open import select_sessions
from opencode_events.store.sqlite import Store
from opencode_events.store.watch import StoreWatch

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))
# Replayed into a new file as written over time: not a store whose first sessions are older
# than its event log (legacy_mixed: 1.2.27 wrote them with no log), which a replay would
# write after the follower started, as if new sessions came without a log (OpenCode 1.18
# logs every new session). Read at once, such a store is covered below.
REPLAYED = [name for name in STORES if name != "legacy_mixed"]
CLI = [sys.executable, "-m", "opencode_events"]
_ENCODE = msgspec.json.Encoder()


class Sink:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.batches = 0
        self.positions: set[int] = set()  # where in the log each read ended

    def write(self, events: Any) -> None:
        self.events += events

    def end_batch(self) -> None:
        self.batches += 1

    def flush(self) -> None:
        pass


def as_dicts(events: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(_ENCODE.encode(e)) for e in events]


def imported(db: Path) -> list[dict[str, Any]]:
    sink = Sink()
    with Store(db) as store:
        import_sessions(
            store, select_sessions(store, all_sessions=True), sink, metrics=False, workers=1
        )
    return as_dicts(sink.events)


def at_once(db: Path) -> list[dict[str, Any]]:
    follower = StoreFollower(Normalizer(), all_sessions=True)
    with Store(db) as store:
        events = follower.read(store)
    return as_dicts(events + follower.finish())


def comparable(events: list[dict[str, Any]]) -> list[str]:
    """What the server's events and the stored rows both say, as a multiset: not the
    times or numbering. Followed events come in the order things ended, `import`'s in the
    stored order."""
    out = []
    for event in events:
        if event["kind"] == "metrics":
            continue
        # (``reverted``: an undo comes after the events it undid, so the log has no mark;
        # import reads the session's revert; docs/live.md says so)
        drop = {"seq", "time", "line", "raw", "reverted"}
        event = {k: v for k, v in event.items() if k not in drop}
        out.append(json.dumps(event, sort_keys=True))
    return sorted(out)


def replay(src: Path, dst: Path, *flags: str, delay: float = 0.005) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.replay", str(src), str(dst), "--delay", str(delay), *flags],
        cwd=ROOT,
    )


def follow_replay(src: Path, dst: Path, *flags: str) -> tuple[list[dict[str, Any]], Sink]:
    """Follow every session of ``dst`` while ``src`` is replayed into it; the events."""
    writer = replay(src, dst, "--wait", "0.2", *flags)
    follower = StoreFollower(Normalizer(), all_sessions=True)
    sink = Sink()
    watch = StoreWatch(dst, interval=0.01)
    read = follower.read_batches

    def reading(store: Any, now_ms: Any = None) -> Iterator[list[Any]]:
        yield from read(store, now_ms)
        sink.positions.add(follower.position)

    follower.read_batches = reading  # type: ignore[method-assign]
    try:
        end = follow_store(
            dst,
            follower,
            sink,
            until_idle=False,
            watch=watch,
            stop=lambda: writer.poll() is not None,
        )
    finally:
        writer.wait(timeout=60)
    assert end is None and writer.returncode == 0
    follower.rows_now()  # a look at the rows put off (ROWS_SHARE) is made now
    with Store(dst) as store:  # what the last commits wrote after the last look
        sink.write(follower.read(store))
    sink.write(follower.finish())
    return as_dicts(sink.events), sink


# ------------------------------------------------------------------- replayed stores


@pytest.mark.parametrize("name", REPLAYED)
def test_a_store_followed_as_written_is_the_store_read_at_once(name: str, tmp_path: Path) -> None:
    src = SAMPLES / name / "opencode.db"
    dst = tmp_path / "opencode.db"
    followed, sink = follow_replay(src, dst, "--checkpoint", "--restart")
    assert len(sink.positions) >= 4, "the follow saw the log grow in several reads"
    assert followed == at_once(dst)  # event for event, seq for seq
    assert comparable(followed) == comparable(imported(dst))
    assert comparable(followed) == comparable(imported(src))


@pytest.mark.parametrize("name", ["bash_ok", "task", "parallel_tools", "sigint", "error400"])
def test_without_a_log_the_rows_stand_in(name: str, tmp_path: Path) -> None:
    src = SAMPLES / name / "opencode.db"
    dst = tmp_path / "opencode.db"
    followed, _ = follow_replay(src, dst, "--no-log")
    with sqlite3.connect(dst) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event'").fetchall()
    assert comparable(followed) == comparable(imported(src))


def _copied(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (e["kind"], e.get("message_id"), e.get("part_id")) for e in events if e.get("copied")
    )


@pytest.mark.parametrize("logged", [True, False], ids=["log", "rows"])
def test_a_forks_copied_history_is_marked_as_import_marks_it(tmp_path: Path, logged: bool):
    """A warehouse fed by `--follow` leaves the copies out as events.md says
    (`copied IS NOT TRUE`): they were not marked, and a fork's history counted twice."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "fork" / "opencode.db", db)
    if not logged:
        with sqlite3.connect(db) as conn:
            conn.execute("DROP TABLE event")
        conn.close()
    marked = _copied(imported(db))
    assert marked  # the capture's fork copied a turn
    assert _copied(at_once(db)) == marked


def test_a_new_session_at_the_rowid_of_a_deleted_one_is_followed(tmp_path: Path) -> None:
    """SQLite gives the newest rowid again once the newest row is deleted: a session made
    then (without a log, read from its rows) sat at the rowid already looked at."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "bash_ok" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE event")
    conn.close()
    follower = StoreFollower(Normalizer(), all_sessions=True)
    with Store(db) as store:
        follower.read(store)
    with sqlite3.connect(db) as conn:
        (rowid, old) = conn.execute("SELECT max(rowid), id FROM session").fetchone()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(session)")]
        picked = ", ".join("?" if c == "id" else c for c in columns)
        conn.execute(
            f"CREATE TEMP TABLE kept AS SELECT {picked} FROM session WHERE id = ?", ("ses_new", old)
        )
        conn.execute("DELETE FROM part WHERE session_id = ?", (old,))
        conn.execute("DELETE FROM message WHERE session_id = ?", (old,))
        conn.execute("DELETE FROM session WHERE id = ?", (old,))
        conn.execute("INSERT INTO session SELECT * FROM kept")
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES ('msg_new', 'ses_new', 1, 1, ?)",
            (json.dumps({"role": "user", "time": {"created": 1}}),),
        )
        conn.execute(
            "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) "
            "VALUES ('prt_new', 'msg_new', 'ses_new', 1, 1, ?)",
            (json.dumps({"type": "text", "text": "again"}),),
        )
        assert conn.execute("SELECT rowid FROM session WHERE id = 'ses_new'").fetchone() == (rowid,)
    conn.close()
    with Store(db) as store:
        events = as_dicts(follower.read(store))
    assert [e["session_id"] for e in events if e["kind"] == "prompt"] == ["ses_new"]


def test_a_session_directory_that_is_not_utf8_is_followed_as_any_other(tmp_path: Path) -> None:
    # Python's sqlite3 refuses such a TEXT cell; OpenCode never writes one, a damaged file may.
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    expected = at_once(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET directory = CAST(? AS TEXT)", (b"/work/caf\xe9",))
    assert at_once(db) == expected


def test_a_session_whose_first_events_were_pruned_is_read_from_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        (parent,) = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
        conn.execute("DELETE FROM event WHERE aggregate_id = ? AND seq < 10", (parent,))
    assert comparable(at_once(db)) == comparable(imported(db))


class Ticking:
    """A monotonic clock that moves ``step`` seconds at each reading (a look that costs)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _unlogged(tmp_path: Path, name: str) -> Path:
    """A copy of samples/``name``'s store as an OpenCode older than the log wrote it."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / name / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM event")
        conn.execute("DELETE FROM event_sequence")
    conn.close()
    return db


def _written_later(db: Path) -> str:
    """A session written after following began, without log rows (as an OpenCode older than
    the log writes one): read from its rows alone. Its id."""
    return _add_session(db, SAMPLES / "bash_ok" / "opencode.db", logged=False)


def _after_a_costly_look(db: Path) -> tuple[StoreFollower, Ticking]:
    """A follower of every session of ``db`` that read its history, then looked at the
    rows again, a look that took 1 s (its clock, read twice a look, moving 0.5 s a read);
    the clock stands still from then on."""
    follower = StoreFollower(Normalizer(), all_sessions=True)
    clock = Ticking(step=0.5)
    follower.monotonic = clock  # type: ignore[method-assign]
    with Store(db) as store:
        assert follower.read(store)  # the history: read whole, whatever it cost
        assert follower.read(store) == [] and not follower.rows_owed  # the costly look
    clock.step = 0.0
    return follower, clock


def test_a_costly_look_at_rows_is_put_off_then_made_without_a_change(tmp_path: Path) -> None:
    """Sessions without a log are looked at by scanning their rows (a second at 10,000
    sessions): after one that took 1 s, the next is put off for 9 s (ROWS_SHARE), owed,
    and made when its time comes even if the store did not change again."""
    db = _unlogged(tmp_path, "continue3")
    follower, clock = _after_a_costly_look(db)
    sid = _written_later(db)
    with Store(db) as store:
        assert follower.read(store) == []  # put off
    assert follower.rows_owed and not follower.rows_due()
    clock.now += 9.5
    assert follower.rows_due()  # owed, and its time has come: looked at without a change
    with Store(db) as store:
        later = as_dicts(follower.read(store) + follower.finish())
    assert comparable(later) == comparable(_of(imported(db), sid))
    assert not follower.rows_owed and not follower.rows_due()


def test_a_follow_does_not_end_on_a_look_put_off(tmp_path: Path) -> None:
    """Following until idle: a session that looks idle while a look at its rows is owed is
    read first; what it wrote meanwhile is in the output, and the end is judged after."""
    db = _unlogged(tmp_path, "continue3")
    follower, _ = _after_a_costly_look(db)
    follower.seen_at_work = True  # it worked: following ends once it is idle
    sid = _written_later(db)
    sink = Sink()
    end = follow_store(db, follower, sink, watch=StoreWatch(db, interval=0.01))
    assert end is FollowEnd.IDLE
    assert comparable(as_dicts(sink.events)) == comparable(_of(imported(db), sid))


def test_a_stopped_follow_catches_up_on_a_look_put_off(tmp_path: Path) -> None:
    from opencode_events.pipeline.follow import catch_up

    db = _unlogged(tmp_path, "continue3")
    follower, _ = _after_a_costly_look(db)
    sid = _written_later(db)
    with Store(db) as store:
        assert follower.read(store) == []
    sink = Sink()
    catch_up(db, follower, sink)
    sink.write(follower.finish())
    assert comparable(as_dicts(sink.events)) == comparable(_of(imported(db), sid))
    before = len(sink.events)
    catch_up(db, follower, sink)  # nothing owed: nothing read again
    assert len(sink.events) == before


def test_a_read_failing_at_the_end_with_a_look_owed_pauses_as_any_failed_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCode quitting as its run ends (its WAL removed while read): a read fails for a
    moment. With a look owed, the follow tried again at once, eleven times in 9 ms, and
    ended with `cannot read` (exit 2); it pauses between tries and ends idle."""
    from opencode_events.errors import InputError
    from opencode_events.pipeline import follow as pipeline_follow

    db = _unlogged(tmp_path, "continue3")
    follower, _ = _after_a_costly_look(db)
    follower.seen_at_work = True
    sid = _written_later(db)
    opened = {"n": 0, "first": 0.0}

    class Unreadable(Store):  # for 0.2 s after the first open
        def __enter__(self) -> Store:
            opened["n"] += 1
            if opened["n"] == 1:
                opened["first"] = time.monotonic()
            elif time.monotonic() - opened["first"] < 0.2:
                raise InputError(f"cannot read {db}: disk I/O error")
            return super().__enter__()

    monkeypatch.setattr(pipeline_follow, "Store", Unreadable)
    sink = Sink()
    end = follow_store(db, follower, sink, watch=StoreWatch(db, interval=0.05))
    assert end is FollowEnd.IDLE
    assert comparable(as_dicts(sink.events)) == comparable(_of(imported(db), sid))


def _add_session(db: Path, src: Path, *, logged: bool) -> str:
    """Write the session of the capture ``src`` into ``db``, in one commit: its rows, and,
    ``logged``, its event log as OpenCode 1.18 writes it beside them (else as an OpenCode
    older than the log, or another program, writes a session: rows alone)."""
    with sqlite3.connect(f"file:{src}?immutable=1", uri=True) as source:
        (sid,) = source.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
        tables = ["session", "message", "part"] + (["event_sequence", "event"] if logged else [])
        rows = {}
        for table in tables:
            key = "id" if table == "session" else "session_id"
            if table.startswith("event"):
                key = "aggregate_id"
            cols = [c[1] for c in source.execute(f"PRAGMA table_info({table})")]
            found = source.execute(
                f"SELECT {', '.join(cols)} FROM {table} WHERE {key} = ? ORDER BY rowid", (sid,)
            ).fetchall()
            rows[table] = (cols, found)
    with sqlite3.connect(db) as conn:
        for table, (cols, found) in rows.items():
            marks = ", ".join("?" * len(cols))
            conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", found)
    return sid


def _of(events: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("session_id") == sid]


@pytest.mark.parametrize("logged", [False, True], ids=["without log rows", "with log rows"])
def test_follow_all_sees_sessions_that_appear_later(tmp_path: Path, logged: bool) -> None:
    """`import --follow --all` started on a store: a session written after it started
    appears, whether its rows come with event-log rows (OpenCode 1.18) or without (an
    older OpenCode, e.g. legacy_mixed's 1.2.27, or another program)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    follower = StoreFollower(Normalizer(), all_sessions=True)
    with Store(db) as store:
        history = as_dicts(follower.read(store))
    assert history
    added = [
        _add_session(db, SAMPLES / name / "opencode.db", logged=logged)
        for name in ("bash_ok", "todowrite")
    ]
    with Store(db) as store:
        later = as_dicts(follower.read(store) + follower.finish())
    everything = imported(db)
    for sid in added:
        assert _of(later, sid), sid
        assert comparable(_of(later, sid)) == comparable(_of(everything, sid))
    assert {e["session_id"] for e in later if e["kind"] != "metrics"} == set(added)


def test_rows_read_again_at_the_cursor_are_not_written_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a log, each session's rows of its latest millisecond are read again at the
    next look. task_background's subagent ends on a reply OpenCode aborted (its error is
    written from the message row, its newest); a later session (prune) follows. Their
    history outgrows the reader's memory of what it wrote (small here; 65,536 ids, which
    the history of a store of 1,000 sessions outgrows), so the aborted reply's error came
    again at the first look after the history, for a write that changed none of its rows."""
    from opencode_events.sources import sse
    from tests.stores import merged_captures

    db = merged_captures(tmp_path / "opencode.db", ("task_background", "prune"))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM event")
        conn.execute("DELETE FROM event_sequence")
        (aborted,) = conn.execute(
            "SELECT count(*) FROM message WHERE json_extract(data, '$.error.name') = "
            "'MessageAbortedError' AND time_updated = (SELECT max(time_updated) FROM message m "
            "WHERE m.session_id = message.session_id)"
        ).fetchone()
    conn.close()
    assert aborted == 1
    monkeypatch.setattr(sse, "_MEMORY", 16)
    follower = StoreFollower(Normalizer(), all_sessions=True)
    with Store(db) as store:
        history = as_dicts(follower.read(store))
    with sqlite3.connect(db) as conn:  # a write that changes no message or part
        conn.execute("UPDATE session SET title = title")
    conn.close()
    with Store(db) as store:
        again = as_dicts(follower.read(store) + follower.finish())
    assert [e for e in again if e["kind"] != "metrics"] == []
    assert comparable(history + again) == comparable(imported(db))


def test_follow_all_through_the_loop_sees_a_session_without_log_rows(tmp_path: Path) -> None:
    """The same through ``follow_store``'s loop: its watch sees the commit, its read the
    new session."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    follower, sink = StoreFollower(Normalizer(), all_sessions=True), Sink()
    ticks = iter(range(1000))
    added: list[str] = []

    def stop() -> bool:
        tick = next(ticks)
        if tick == 3:
            added.append(_add_session(db, SAMPLES / "bash_ok" / "opencode.db", logged=False))
        return tick >= 10

    follow_store(
        db, follower, sink, until_idle=False, watch=StoreWatch(db, interval=0.001), stop=stop
    )
    (sid,) = added
    followed = _of(as_dicts(sink.events + follower.finish()), sid)
    assert followed and comparable(followed) == comparable(_of(imported(db), sid))


def test_the_watch_sees_a_commit_without_the_wal(tmp_path: Path) -> None:
    """A program writing in rollback-journal mode: a commit that keeps the file's size,
    within the file system's time granularity (here: its time put back), is seen by the
    header's change counter."""
    db = tmp_path / "opencode.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    watch = StoreWatch(db)
    assert watch.changed()
    assert not watch.changed()
    before = os.stat(db)
    conn.execute("UPDATE t SET x = 2")
    os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(db).st_size == before.st_size
    assert watch.changed()
    assert not watch.changed()
    conn.close()


def test_the_log_of_every_sample_is_what_import_reads() -> None:
    for name in STORES:
        db = SAMPLES / name / "opencode.db"
        assert comparable(at_once(db)) == comparable(imported(db)), name


@pytest.mark.parametrize(
    ("stored", "bus"),
    [
        ("message.part.updated.1", "message.part.updated"),
        ("session.created.1", "session.created"),
        ("message.updated.12", "message.updated"),
        ("session.next.text.1", "session.next.text"),
        ("odd", "odd"),
    ],
)
def test_event_type_drops_the_version(stored: str, bus: str) -> None:
    assert event_type(stored) == bus


def test_a_logged_event_that_is_not_json_is_a_warning(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        (sid,) = conn.execute("SELECT id FROM session").fetchone()
        conn.execute(
            "INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, ?)",
            ("evt_bad", sid, 999, "workspace.failed.1", "{not json"),
        )
    events = at_once(db)
    warnings = [e for e in events if e["kind"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["text"] == "{not json"
    assert all(json.loads(json.dumps(e)) for e in events)


# ------------------------------------------------------------------- state


@pytest.mark.parametrize(
    ("in_flight", "last_write", "now", "state"),
    [
        (False, 0, 10**12, IDLE),
        (True, None, 10**12, BUSY),
        (True, 1000, 1000 + 10 * 60 * 1000, BUSY),
        (True, 1000, 1001 + 10 * 60 * 1000, STALE),
    ],
)
def test_session_state(in_flight: bool, last_write: int | None, now: int, state: str) -> None:
    assert session_state(in_flight=in_flight, last_write_ms=last_write, now_ms=now) == state


def test_a_killed_run_is_stale_and_a_finished_one_idle() -> None:
    for name, expected in [("sigint", STALE), ("bash_ok", IDLE), ("serve_permission", IDLE)]:
        follower = StoreFollower(Normalizer(), all_sessions=True)
        with Store(SAMPLES / name / "opencode.db") as store:
            follower.read(store)
        assert follower.state(time.time() * 1000) == expected, name


# ------------------------------------------------------------------- the watch


def test_the_watch_sees_commits_checkpoints_and_wal_resets(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    watch = StoreWatch(db)
    assert not watch.changed()  # no database yet
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    assert watch.changed()
    assert not watch.changed()
    for step in (
        "INSERT INTO t VALUES (1)",
        "PRAGMA wal_checkpoint(PASSIVE)",
        "INSERT INTO t VALUES (2)",
        "PRAGMA wal_checkpoint(TRUNCATE)",
        "INSERT INTO t VALUES (3)",
    ):
        conn.execute(step)
        assert watch.changed(), step
        assert not watch.changed(), step
    conn.close()  # the writer quits: WAL folded in and removed
    assert watch.changed()
    assert not os.path.exists(f"{db}-wal")


def test_an_idle_follow_opens_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "bash_ok" / "opencode.db", db)
    opened = []
    import opencode_events.pipeline.follow as follow

    class Counting(Store):
        def __init__(self, path: Any) -> None:
            opened.append(path)
            super().__init__(path)

    monkeypatch.setattr(follow, "Store", Counting)
    ticks = iter(range(50))
    follow_store(
        db,
        StoreFollower(Normalizer()),
        Sink(),
        until_idle=False,
        watch=StoreWatch(db, interval=0.001),
        stop=lambda: next(ticks) >= 49,
    )
    assert len(opened) == 1  # the first look; nothing changed after it


# ------------------------------------------------------------------- the command


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCODE")}
    env.update(extra)
    return env


def _import_follow(db: Path) -> subprocess.Popen[bytes]:
    """`import --follow --db DB` started, its stdout and stderr piped."""
    return subprocess.Popen(
        [*CLI, "import", "--follow", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )


def test_import_follow_waits_for_the_store_and_ends_when_the_session_is_idle(
    tmp_path: Path,
) -> None:
    src = SAMPLES / "bash_ok" / "opencode.db"
    dst = tmp_path / "data" / "opencode.db"
    dst.parent.mkdir()
    follow = _import_follow(dst)
    writer = replay(src, dst, "--wait", "0.5", delay=0.02)
    try:
        out, err = follow.communicate(timeout=60)
    finally:
        writer.wait(timeout=60)
    assert follow.returncode == 0, err.decode()
    assert f"waiting for {dst}" in err.decode()
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["kind"] == "metrics"
    assert comparable(events) == comparable(imported(src))


def test_following_an_idle_session_says_it_waits(tmp_path: Path) -> None:
    """The history, then a line on stderr that it waits (not a silent hang), until Ctrl-C."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    follow = _import_follow(db)
    try:
        line = follow.stderr.readline().decode()  # type: ignore[union-attr]
        assert line.startswith("opencode-events: ses_") and "is idle" in line
        # chosen as the newest: a newer session that begins to work takes its place
        assert "waiting for it, or a newer session, to work and be idle again" in line
        assert line.endswith("(Ctrl-C to stop)\n")
        assert follow.poll() is None  # still following
    finally:
        follow.send_signal(signal.SIGINT)
        out, _ = follow.communicate(timeout=30)
    assert follow.returncode == 130
    kinds = [json.loads(event)["kind"] for event in out.splitlines()]
    assert "message" in kinds and "usage" in kinds


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_forever_follow_stopped_writes_the_call_opencode_was_killed_in(tmp_path, stop):
    """`--forever` ends only by a signal: the parts still open (a call cut off by a killed
    run) were never written, where `import` shows them and docs/live.md promised them."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "sigint" / "opencode.db", db)
    follow = subprocess.Popen(
        [*CLI, "import", "--follow", "--all", "--forever", "--no-metrics", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    try:
        first = follow.stdout.readline()  # type: ignore[union-attr]
        assert first, follow.stderr.read()  # type: ignore[union-attr]
        time.sleep(1.0)  # the history written; it waits for more
    finally:
        follow.send_signal(stop)
        out, err = follow.communicate(timeout=30)
    assert follow.returncode == 128 + stop, err.decode()
    events = [json.loads(line) for line in (first + out).splitlines()]
    running = [e for e in imported(db) if e.get("status") == "running"]
    assert running  # the capture's bash call, cut off
    for call in running:
        assert [e["status"] for e in events if e.get("part_id") == call["part_id"]] == ["running"]


def test_following_every_session_ends_on_a_stale_one_in_a_sentence(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "sigint" / "opencode.db", db)
    done = subprocess.run(
        [*CLI, "import", "--follow", "--all", "--db", str(db)],
        capture_output=True,
        env=_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stderr.decode() == (
        "opencode-events: the sessions followed are stale: in flight, but nothing written to "
        "them for a while\n"
    )


def test_a_follow_of_an_idle_store_ends_when_its_reader_has_gone(tmp_path: Path) -> None:
    """`| head` done: nothing more is written to an idle store's follow, so no write fails;
    it ends all the same, as a failed write ends it (141), not when killed."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    follow = subprocess.Popen(
        [*CLI, "import", "--follow", "--all", "--forever", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    try:
        assert follow.stdout.readline()  # type: ignore[union-attr]
        follow.stdout.close()  # type: ignore[union-attr]  # the reader goes
        assert follow.wait(timeout=20) == 141
        assert follow.stderr.read() == b""  # type: ignore[union-attr]
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_the_pretty_view_says_it_waits_in_its_footer(capsys: pytest.CaptureFixture) -> None:
    """On a terminal the waiting note takes the footer's place until the next event (a line
    on stderr left a copy of the footer above it); elsewhere it is a line on stderr."""
    import io

    from opencode_events.cli.follow import _say_waiting
    from opencode_events.output.jsonl import JsonlWriter
    from opencode_events.output.pretty import PrettyWriter

    pretty = PrettyWriter(io.StringIO(), width=160, color=False, live=True)
    _say_waiting(pretty, ["ses_a"])
    assert pretty._footer().plain.startswith("ses_a is idle: its history is written")
    pretty.flush()
    assert capsys.readouterr().err == ""
    _say_waiting(JsonlWriter(io.BytesIO()), ["ses_a"])
    assert capsys.readouterr().err.startswith("opencode-events: ses_a is idle")


def _start_a_run(db: Path, session_id: str, cost: float) -> None:
    """A new top-level session in ``db``, newer than any, with a reply in flight (no
    ``time.completed``) and ``cost`` in its column: a run OpenCode has just begun."""
    now = int(time.time() * 1000)
    reply = {"role": "assistant", "time": {"created": now}, "modelID": "m", "providerID": "p"}
    conn = sqlite3.connect(db)
    try:
        conn.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, cost, "
            "time_created, time_updated) SELECT ?, project_id, 'run', directory, 'a run', "
            "version, ?, ?, ? FROM session LIMIT 1",
            (session_id, cost, now, now),
        )
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (f"msg_{session_id}", session_id, now, now, json.dumps(reply)),
        )
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("cost", [0.0001, 5.0], ids=["under", "over"])
def test_max_cost_counts_the_run_begun_not_the_idle_session_before_it(
    tmp_path: Path, cost: float
) -> None:
    """Started with no session named, the guard follows the newest session, which may be
    an idle one already over the limit: that one's cost counts for nothing; the run begun
    after it (which takes its place) counts, and alone."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with Store(db) as store:
        spent = sum(r.cost for r in store.sessions())
    limit = spent / 2  # the idle sessions are over it
    follower = StoreFollower(Normalizer())
    looks = 0

    def stop() -> bool:
        nonlocal looks
        looks += 1
        if looks == 5:
            _start_a_run(db, "ses_zz_run", cost)
        return looks > 200

    end = follow_store(
        db, follower, Sink(), max_cost=limit, watch=StoreWatch(db, interval=0.01), stop=stop
    )
    assert looks >= 5, "it stopped before the run began"
    assert follower.roots == ["ses_zz_run"]
    assert end == (FollowEnd.OVER_BUDGET if cost > limit else None)


def test_max_cost_of_a_named_session_counts_at_once(tmp_path: Path) -> None:
    """A session named is the one followed to the end: over the limit already, exit 3."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    with Store(db) as store:
        total = sum(r.cost for r in store.sessions())
    done = subprocess.run(
        [*CLI, "import", "--follow", "ses_dd8083e0", "--db", str(db)]
        + ["--max-cost", f"{total / 2}"],
        capture_output=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 3, done.stderr.decode()
    assert "over --max-cost" in done.stderr.decode()
    assert json.loads(done.stdout.splitlines()[-1])["kind"] == "metrics"
    under = subprocess.run(
        [*CLI, "import", "--follow", "--db", str(SAMPLES / "sigint" / "opencode.db")]
        + ["--max-cost", "100"],
        capture_output=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
    )
    assert under.returncode == 0, under.stderr.decode()
    assert "is stale" in under.stderr.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--forever"], "--forever and --max-cost go with --follow"),
        (["--follow", "--last"], "--follow takes SESSION..., or --all"),
        (["--follow", "--all", "ses_x"], "--follow --all follows every session"),
        (["--follow", "--all", "--max-cost", "2"], "--max-cost limits one session"),
        (["--follow", "--max-cost", "nan"], "'nan' is no limit: give an amount above 0"),
        (["--follow", "--max-cost", "0"], "'0' is no limit"),
    ],
)
def test_follow_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run(
        [*CLI, "import", *args, "--db", str(SAMPLES / "text" / "opencode.db")],
        capture_output=True,
        env=_env(),
        cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 2
    assert message in done.stderr.decode()


def test_sessions_call_a_killed_run_stale_and_a_fresh_one_in_flight() -> None:
    from opencode_events.reports.sessions import summarize

    with Store(SAMPLES / "sigint" / "opencode.db") as store:
        rows = store.sessions()
        (later,) = summarize(store, rows)
        last_write = store.last_write(rows[0].id)
        assert last_write is not None
        (at_the_time,) = summarize(store, rows, now_ms=last_write + 1000)
    assert (later.state, later.in_flight) == (STALE, False)
    assert (at_the_time.state, at_the_time.in_flight) == (BUSY, True)
    with Store(SAMPLES / "bash_ok" / "opencode.db") as store:
        (done,) = summarize(store, store.sessions())
    assert (done.state, done.in_flight) == (IDLE, False)


# ------------------------------------------------------------ a large first read, in batches


@pytest.fixture(scope="module")
def many_sessions(tmp_path_factory) -> Path:
    """30 sessions cloned from the captures (bench/gen_db.py), read from their rows."""
    from tests.stores import generated

    return generated(tmp_path_factory.mktemp("many") / "opencode.db")


def test_a_first_read_comes_in_batches_of_whole_sessions(many_sessions, monkeypatch) -> None:
    """The history of every session is never held whole (it was 1.1 GB for `import --follow
    --all` of the 10,000-session bench store): batches, each session in one of them."""
    from opencode_events.sources import eventlog

    monkeypatch.setattr(eventlog, "BATCH_EVENTS", 50)
    follower = StoreFollower(Normalizer(), all_sessions=True)
    with Store(many_sessions) as store:
        batches = [as_dicts(batch) for batch in follower.read_batches(store)]
    assert len(batches) > 10
    where: dict[str, set[int]] = {}
    for index, batch in enumerate(batches):
        assert batch
        for event in batch:
            where.setdefault(event["session_id"], set()).add(index)
    assert len(where) == 30 and all(len(found) == 1 for found in where.values())
    whole = [event for batch in batches for event in batch]
    with Store(many_sessions) as store:  # the same events as one read gives, in order
        assert whole == as_dicts(StoreFollower(Normalizer(), all_sessions=True).read(store))


def test_follow_writes_the_first_read_as_it_goes(many_sessions, monkeypatch) -> None:
    """``stop`` (otel's sender) is asked between sessions while the history is read, so
    what is done goes out before the read ends."""
    from opencode_events.sources import eventlog

    monkeypatch.setattr(eventlog, "BATCH_EVENTS", 50)
    sink = Sink()
    written: list[int] = []

    def stop() -> bool:
        written.append(len(sink.events))
        return len(written) == 3

    follower = StoreFollower(Normalizer(), all_sessions=True)
    assert follow_store(many_sessions, follower, sink, until_idle=False, stop=stop) is None
    assert 0 < written[0] < written[1] < written[2]
    assert written[2] < len(at_once(many_sessions))  # stopped inside the first read
