"""The store: finding it, reading it without changing anything, bad databases, import and
sessions on real captures (samples/*/opencode.db, from `make samples`)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from opencode_events.errors import InputError
from opencode_events.paths import locate_db
from opencode_events.store.open import select_sessions
from opencode_events.store.rows import PartRow
from opencode_events.store.sqlite import Store
from tests.filebytes import digests, folder_digests
from tests.stores import with_a_parent_loop, with_sessions_like_the_first

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, timeout=120, env=env)


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def copy_sample(name: str, tmp_path: Path, *, wal: bool = False) -> Path:
    """A private copy of a captured database (optionally switched to WAL, as OpenCode runs)."""
    target = tmp_path / name / "opencode.db"
    target.parent.mkdir(parents=True)
    shutil.copyfile(SAMPLES / name / "opencode.db", target)
    if wal:
        conn = sqlite3.connect(target)
        conn.execute("PRAGMA journal_mode=wal")
        conn.close()
    return target


def live_writer(db: Path, *changes: str) -> sqlite3.Connection:
    """A writer of ``db`` (in WAL mode) holding ``changes`` in the WAL only, as OpenCode at
    work holds its last writes; ``timeout=0``, so it fails at once if a reader blocks it."""
    writer = sqlite3.connect(db, timeout=0)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    for change in changes:
        writer.execute(change)
    writer.commit()
    return writer


def writes_again(writer: sqlite3.Connection | None) -> None:
    """``writer`` commits once more (failing at once if a reader blocked it), and closes."""
    if writer is not None:
        writer.execute("UPDATE session SET title = title")
        writer.commit()
        writer.close()


def kept_bytes(db: Path, state: str, before: dict, after: dict) -> bool:
    """Closed: no -wal/-shm created, no byte changed. Live: the database and its WAL keep
    every byte (readers change only their read marks in -shm)."""
    if state == "closed":
        return after == before
    watched = [db.name, f"{db.name}-wal"]
    return {n: after[n] for n in watched} == {n: before[n] for n in watched}


def fingerprint(folder: Path) -> dict[str, str]:
    return folder_digests(folder)  # read in a child: a live writer here keeps its locks


def sql(db: Path, query: str, *params) -> list[tuple]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


# --------------------------------------------------------------------- finding it


def test_locate_db_order(tmp_path: Path):
    env = {"HOME": "/h", "XDG_DATA_HOME": "/xdg", "OPENCODE_DB": "/abs/custom.db"}
    assert locate_db("/given.db", env) == Path("/given.db")
    assert locate_db(None, env) == Path("/abs/custom.db")
    assert locate_db(None, {**env, "OPENCODE_DB": "rel.db"}) == Path("/xdg/opencode/rel.db")
    assert locate_db(None, {"HOME": "/h", "XDG_DATA_HOME": "/xdg"}) == Path(
        "/xdg/opencode/opencode.db"
    )
    assert locate_db(None, {"HOME": "/h"}) == Path("/h/.local/share/opencode/opencode.db")


def test_default_location_and_channel_databases(tmp_path: Path):
    data = tmp_path / "data" / "opencode"
    data.mkdir(parents=True)
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": "/usr/bin"}
    missing = run("sessions", "--format", "json", env=env)
    assert missing.returncode == 2
    assert missing.stderr.decode() == (
        f"error: no OpenCode database at {data / 'opencode.db'}: OpenCode writes it there "
        "once it has run; to read another, pass --db PATH or set OPENCODE_DB\n"
    )
    named = run("sessions", env={**env, "OPENCODE_DB": str(tmp_path / "nope.db")})
    assert named.stderr.decode() == (
        f"error: no OpenCode database at {tmp_path / 'nope.db'} (named by OPENCODE_DB)\n"
    )
    shutil.copyfile(SAMPLES / "text" / "opencode.db", data / "opencode-dev.db")
    hinted = run("sessions", "--format", "json", env=env)
    assert hinted.returncode == 2 and b"opencode-dev.db" in hinted.stderr
    shutil.copyfile(SAMPLES / "text" / "opencode.db", data / "opencode.db")
    found = run("sessions", "--format", "json", env=env)
    assert found.returncode == 0 and len(json.loads(found.stdout)) == 1
    # An empty --db (a variable that was not set) is no path: never the default database.
    for command in ("sessions", "usage", "context", "import", "statusline"):
        # usage: not the stream on stdin either (subprocess.run's stdin is not a terminal)
        empty = run(command, "--db", "", env=env)
        assert (empty.returncode, empty.stdout) == (2, b""), command
        assert empty.stderr == b"error: the database path is empty\n", command
    # An empty $OPENCODE_DB is unset, as a shell has it.
    unset = run("sessions", "--format", "json", env={**env, "OPENCODE_DB": ""})
    assert unset.returncode == 0 and len(json.loads(unset.stdout)) == 1


# ------------------------------------------------------------------ observe-only


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
def test_reading_changes_nothing(tmp_path: Path, wal: bool):
    db = copy_sample("task", tmp_path, wal=wal)
    before = fingerprint(db.parent)
    for args in (
        ["sessions", "--all", "--format", "json"],
        ["import", "--all"],
        ["import", "--last", "--children"],
    ):
        result = run(*args, "--db", str(db))
        assert result.returncode == 0, result.stderr
    assert fingerprint(db.parent) == before  # no -wal/-shm created, no byte changed


@pytest.mark.parametrize("how", ["workers", "workers-sqlite3"])
@pytest.mark.parametrize("state", ["closed", "live"])
def test_session_workers_change_nothing(tmp_path: Path, monkeypatch, state: str, how: str):
    """The per-core workers of `sessions --all` (forked, reading with apsw's SQLite, or with
    sqlite3 where apsw is missing), and the helper that makes its summaries, open the store
    the way the command does: a closed store
    gains no side file and keeps every byte; beside a live writer, the database and its WAL
    keep every byte and the writer is never blocked."""
    import msgspec

    import opencode_events.reports.sessions as summary_module
    import opencode_events.store.fastscan as fastscan
    from opencode_events.reports import beside

    db = copy_sample("task", tmp_path, wal=True)
    writer = None
    if state == "live":
        writer = live_writer(
            db,
            "UPDATE session SET title = title || ' (live)'",
            # one more tool call, in the WAL only
            "INSERT INTO part SELECT 'prt_zzzzlive', message_id, session_id, time_created, "
            """time_updated, data FROM part WHERE data LIKE '{"type":"tool",%' LIMIT 1""",
        )
        assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
    before = fingerprint(db.parent)
    with Store(db) as store:
        rows = store.sessions()
        plain = msgspec.to_builtins(summary_module.summarize(store, rows, fold=False))
        monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
        if how == "workers-sqlite3":
            monkeypatch.setattr(fastscan, "_apsw", lambda: None)
        assert summary_module._start_scan(store) is not None  # the workers do run
        workers = msgspec.to_builtins(summary_module.summarize(store, rows, fold=False))
        # Every summary made by the helper of a report of every session, on its own
        # connection (``reports.beside``): it too changes nothing.
        monkeypatch.setattr(beside, "MIN_JOBS", 0)
        monkeypatch.setattr(beside, "HERE", 0)
        monkeypatch.setattr(beside, "THERE", 1)
        each = summary_module.each_summary(store, all_sessions=True, fold=False)
        helped = msgspec.to_builtins(list(each))
        after = fingerprint(db.parent)
        writes_again(writer)
    tool_parts = sql(db, """SELECT count(*) FROM part WHERE data LIKE '{"type":"tool",%'""")
    assert workers == plain and sum(r["tool_calls"] for r in workers) == tool_parts[0][0]
    assert helped == plain
    assert any("(live)" in r["title"] for r in workers) is (state == "live")
    assert kept_bytes(db, state, before, after)


@pytest.mark.parametrize("how", ["apsw", "sqlite3"])
@pytest.mark.parametrize("state", ["closed", "live"])
def test_import_workers_change_nothing(tmp_path: Path, monkeypatch, state: str, how: str):
    """The forked workers of ``import`` (and of ``otel``) read through apsw's SQLite where it
    is installed (``fastscan.sqlite3_like``), else through sqlite3's: either way they write
    what one process writes, a closed store gains no side file and keeps every byte, and
    beside a live writer the database and its WAL keep every byte and the writer is never
    blocked."""
    from opencode_events.output.jsonl import JsonlWriter
    from opencode_events.pipeline import fanout
    from opencode_events.pipeline.normalize import import_sessions
    from opencode_events.store import fastscan

    if how == "apsw" and not fastscan.available():
        pytest.skip("apsw with SQLite 3.43 or newer is not installed")
    db = copy_sample("task", tmp_path, wal=True)
    writer = None
    if state == "live":  # a prompt's words changed, in the WAL only
        writer = live_writer(
            db, "UPDATE part SET data = replace(data, 'please do the task', 'the task (live)')"
        )
    before = fingerprint(db.parent)
    marks = tmp_path / "marks"
    marks.mkdir()
    chosen = fastscan.sqlite3_like if how == "apsw" else (lambda uri: None)

    def connect(uri: str):  # runs in the forked worker: it leaves a mark of what it opened
        conn = chosen(uri)
        (marks / str(os.getpid())).write_text(type(conn).__name__)
        return conn

    monkeypatch.setattr(fastscan, "sqlite3_like", connect)
    monkeypatch.setattr(fanout, "MIN_SESSIONS", 1)

    def imported(workers: int) -> bytes:
        out = tmp_path / f"out-{workers}.jsonl"
        with Store(db) as store, open(out, "wb") as file:
            ids = select_sessions(store, all_sessions=True)
            assert len(ids) >= 2
            import_sessions(store, ids, JsonlWriter(file, buffered=True), workers=workers)
        return out.read_bytes()

    one = imported(1)
    assert not list(marks.iterdir())
    assert imported(2) == one
    assert (b"the task (live)" in one) is (state == "live")
    opened = {path.read_text() for path in marks.iterdir()}
    assert opened == {"SqliteLike" if how == "apsw" else "NoneType"}
    after = fingerprint(db.parent)
    writes_again(writer)
    assert kept_bytes(db, state, before, after)


def test_an_apsw_connection_in_sqlite3_clothes_reads_as_sqlite3_does(tmp_path: Path):
    """``fastscan.sqlite3_like``: the same rows as sqlite3's connection, by ``fetchone``,
    ``fetchmany``, ``fetchall`` and iteration; apsw's errors raised as sqlite3's, with
    sqlite3's words; text that is not UTF-8 refused as the Store refuses it."""
    from opencode_events.store import fastscan

    if not fastscan.available():
        pytest.skip("apsw with SQLite 3.43 or newer is not installed")
    db = copy_sample("task", tmp_path)
    uri = f"{db.as_uri()}?immutable=1"
    like, plain = fastscan.sqlite3_like(uri), sqlite3.connect(uri, uri=True)
    query = "SELECT id, session_id, time_created, CAST(data AS BLOB) FROM part ORDER BY id"
    everything = plain.execute(query).fetchall()
    assert len(everything) > 10
    assert like.execute(query).fetchall() == everything
    assert list(like.execute(query)) == everything
    rows, batches = like.execute(query), []
    while batch := rows.fetchmany(3):
        batches.append(batch)
    assert [row for batch in batches for row in batch] == everything
    assert {len(batch) for batch in batches[:-1]} == {3}
    assert like.execute(query).fetchone() == everything[0]
    assert like.execute("SELECT 1 WHERE 0").fetchone() is None
    with pytest.raises(sqlite3.OperationalError) as said:
        plain.execute("SELECT * FROM nowhere")
    with pytest.raises(sqlite3.DatabaseError) as like_said:
        like.execute("SELECT * FROM nowhere")
    assert str(like_said.value) == str(said.value) == "no such table: nowhere"
    like.close()
    plain.close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET id = CAST(x'73ff' AS TEXT) WHERE rowid = 1")
    with Store(db) as store:
        clone = store.reopen(fastscan.sqlite3_like)
        assert type(clone.conn) is fastscan.SqliteLike
        with pytest.raises(InputError, match="not UTF-8"):
            clone.session_ids()
        clone.close()
    with pytest.raises(sqlite3.DatabaseError):
        fastscan.sqlite3_like(f"{(tmp_path / 'missing.db').as_uri()}?mode=ro")
    # Pages damaged under the rows: the same error, with the same words, from either.
    damaged = copy_sample("big_output", tmp_path / "damaged")
    pages = damaged.stat().st_size // 4096
    with open(damaged, "r+b") as file:
        for page in range(pages - 6, pages - 1):
            file.seek(page * 4096)
            file.write(b"\x0d\x00\xff" * 1365)
    uri = f"{damaged.as_uri()}?immutable=1"
    said = []
    for conn in (sqlite3.connect(uri, uri=True), fastscan.sqlite3_like(uri)):
        with pytest.raises(sqlite3.DatabaseError) as failed:
            conn.execute("SELECT CAST(data AS BLOB) FROM part").fetchall()
        said.append(str(failed.value))
        conn.close()
    assert said == ["database disk image is malformed"] * 2


def _locks_held(*paths: Path) -> set[tuple[str, str, str]]:
    """The POSIX locks this process holds on ``paths`` (inode, start, end), from /proc/locks."""
    inodes = {str(os.stat(p).st_ino): p.name for p in paths}
    held = set()
    for line in Path("/proc/locks").read_text().split("\n"):
        fields = line.split()
        if len(fields) >= 8 and fields[4] == str(os.getpid()):
            inode = fields[5].rsplit(":", 1)[-1]
            if inode in inodes:
                held.add((inodes[inode], fields[6], fields[7]))
    return held


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux's /proc/locks")
def test_looking_at_the_files_keeps_this_process_locks(tmp_path: Path):
    """Closing a file drops every POSIX lock the process holds on it: reading the headers
    of a live database (the watch, the cache's fingerprint) must not drop the locks of a
    connection this process holds, or the next process to open it truncates the -shm this
    one has mapped (SIGBUS) and OpenCode may remove the WAL under it."""
    from opencode_events.store.changes import fingerprint as store_fingerprint
    from opencode_events.store.watch import StoreWatch

    db = copy_sample("task", tmp_path, wal=True)
    writer = sqlite3.connect(db)
    writer.execute("UPDATE session SET title = title")
    writer.commit()
    files = (db, Path(f"{db}-shm"))
    held = _locks_held(*files)
    assert {name for name, *_ in held} == {db.name, f"{db.name}-shm"}  # SHARED and DMS
    with Store(db) as store:
        store_fingerprint(store)
        watch = StoreWatch(db)
        assert watch.changed() and not watch.changed()
        assert _locks_held(*files) >= held
    assert _locks_held(*files) == held
    writer.close()


def test_read_head_reads_the_file_now_at_the_path(tmp_path: Path):
    from opencode_events.store import files

    path = tmp_path / "f"
    assert files.read_head(path, 4) is None  # missing
    path.write_bytes(b"first")
    info, head = files.read_head(path, 4)
    assert head == b"firs" and info.st_size == 5
    path.write_bytes(b"FIRST, longer")  # the same file, rewritten: read again
    assert files.read_head(path, 100)[1] == b"FIRST, longer"
    replacement = tmp_path / "g"
    replacement.write_bytes(b"second")
    os.replace(replacement, path)  # another file at the path: it is the one read
    assert files.read_head(path, 100)[1] == b"second"
    assert files.read_head(path, 0)[1] == b""
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    assert files.read_head(tmp_path / "dir", 4) is None
    assert files.read_head(tmp_path / "fifo", 4) is None  # never waited on
    assert files.read_head(str(tmp_path / "nul\0"), 4) is None


def test_read_head_keeps_a_bounded_number_of_files_open(tmp_path: Path, monkeypatch):
    from opencode_events.store import files

    monkeypatch.setattr(files, "_kept", {})
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").exists() else None
    for n in range(files.KEPT_FILES + 10):
        path = tmp_path / f"f{n}"
        path.write_bytes(b"x")
        path_again = files.read_head(path, 1)
        assert path_again is not None and path_again[1] == b"x"
    assert len(files._kept) == files.KEPT_FILES
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) - before == files.KEPT_FILES
    for fd, *_ in files._kept.values():
        os.close(fd)


def test_reads_while_opencode_writes(tmp_path: Path):
    db = copy_sample("task", tmp_path, wal=True)
    writer = sqlite3.connect(db, timeout=0)
    writer.execute("PRAGMA journal_mode=wal")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # keep the new rows in the WAL
    row = writer.execute("SELECT * FROM session WHERE parent_id IS NULL").fetchone()
    columns = [c[1] for c in writer.execute("PRAGMA table_info(session)")]
    fresh = dict(zip(columns, row, strict=True))
    fresh.update(
        id="ses_zzzznewer", title="written while reading", time_updated=fresh["time_updated"] + 1000
    )
    writer.execute(
        f"INSERT INTO session ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
        [fresh[c] for c in columns],
    )
    writer.commit()
    assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists()
    wal_before = Path(f"{db}-wal").read_bytes()
    with Store(db) as store:
        titles = [s.title for s in store.sessions()]
        assert "written while reading" in titles  # committed rows still in the WAL are seen
        rows = store.parts(store.sessions(top_level=True)[-1].id)
        next(rows)  # a read transaction is open now
        writer.execute("UPDATE session SET title = 'still writable' WHERE id = 'ses_zzzznewer'")
        writer.commit()  # timeout=0: fails at once if our read blocked the writer
        list(rows)
    assert Path(f"{db}-wal").read_bytes()[: len(wal_before)] == wal_before[: len(wal_before)]
    writer.close()


def test_wal_without_shm_is_read_from_a_private_copy(tmp_path: Path):
    db = copy_sample("task", tmp_path, wal=True)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE session SET title = 'only in the wal' WHERE parent_id IS NULL")
    writer.commit()
    wal = Path(f"{db}-wal").read_bytes()
    # Simulate a crash that left the WAL behind: copy the pair elsewhere, without -shm.
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    shutil.copyfile(db, crashed / "opencode.db")
    (crashed / "opencode.db-wal").write_bytes(wal)
    writer.close()
    before = fingerprint(crashed)
    with Store(crashed / "opencode.db") as store:
        assert "only in the wal" in [s.title for s in store.sessions()]
    assert fingerprint(crashed) == before


def test_a_private_copy_that_cannot_fit_is_refused_before_it_fills_tmp(tmp_path: Path):
    """A -wal left without its -shm that says it is 4 TB (sparse, a damaged file): one
    error naming the room needed and TMPDIR, and not a byte written to the temporary folder."""
    import tempfile

    db = copy_sample("task", tmp_path, wal=True)
    wal = Path(f"{db}-wal")
    wal.touch()
    try:
        os.truncate(wal, 4 << 40)
    except OSError as exc:  # a filesystem without files that large
        pytest.skip(f"cannot make a sparse 4 TB file here: {exc}")
    before = digests([db]), os.stat(wal).st_size, os.stat(wal).st_mtime_ns
    temporary = set(Path(tempfile.gettempdir()).glob("opencode-events-*"))
    result = run("sessions", "--db", str(db))
    assert result.returncode == 2 and result.stdout == b""
    assert re.fullmatch(
        rb"error: cannot read .*: its private copy needs 4,398,\d{3} MB and .* MB free "
        rb"\(set TMPDIR to a folder with room\)\n",
        result.stderr,
    ), result.stderr
    assert set(Path(tempfile.gettempdir()).glob("opencode-events-*")) == temporary
    assert (digests([db]), os.stat(wal).st_size, os.stat(wal).st_mtime_ns) == before
    assert sorted(path.name for path in db.parent.iterdir()) == ["opencode.db", "opencode.db-wal"]


# ------------------------------------------------------------------ bad databases


def test_not_sqlite(tmp_path: Path):
    bogus = tmp_path / "opencode.db"
    bogus.write_text("this is not a database\n" * 100)
    result = run("sessions", "--db", str(bogus))
    assert result.returncode == 2
    assert result.stderr.decode().startswith("error: ") and b"Traceback" not in result.stderr
    assert len(result.stderr.decode().strip().splitlines()) == 1


def test_not_opencodes_schema(tmp_path: Path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE session (id TEXT)")
    conn.close()
    result = run("import", "--db", str(other))
    assert result.returncode == 2
    assert b"not an OpenCode database" in result.stderr


def test_missing_table(tmp_path: Path):
    db = copy_sample("text", tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE part")
    conn.commit()
    conn.close()
    result = run("sessions", "--db", str(db))
    assert result.returncode == 2 and b"no `part` table" in result.stderr


def test_missing_file_and_directory(tmp_path: Path):
    assert run("sessions", "--db", str(tmp_path / "nope.db")).returncode == 2
    result = run("import", "--db", str(tmp_path))
    assert result.returncode == 2 and result.stderr.startswith(b"error: ")


def test_truncated_database(tmp_path: Path):
    db = copy_sample("file_tools", tmp_path)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    for args in (["sessions", "--format", "json"], ["import", "--all"]):
        result = run(*args, "--db", str(db))
        assert b"Traceback" not in result.stderr
        assert result.returncode in (0, 2)
        if result.returncode == 2:
            assert result.stderr.startswith(b"error: ")


def test_locked_database_is_still_readable(tmp_path: Path):
    db = copy_sample("text", tmp_path)
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        result = run("import", "--db", str(db))
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert result.returncode == 0, result.stderr
    assert any(e["kind"] == "message" for e in jsonl(result.stdout))


def test_rows_that_cannot_be_mapped(tmp_path: Path):
    db = copy_sample("text", tmp_path)
    conn = sqlite3.connect(db)
    (message_id, session_id) = conn.execute(
        "SELECT id, session_id FROM message WHERE data LIKE '%assistant%'"
    ).fetchone()
    rows = [
        ("prt_zz1", "not json {"),
        ("prt_zz2", '{"type":"hologram","beam":1}'),
        ("prt_zz3", '{"type":"tool","tool":"read","state":"oops"}'),
        ("prt_zz4", "[1,2]"),
    ]
    for part_id, data in rows:
        conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, 1, 1, ?)", (part_id, message_id, session_id, data)
        )
    conn.commit()
    conn.close()
    result = run("import", "--db", str(db))
    assert result.returncode == 0, result.stderr
    events = {e.get("part_id"): e for e in jsonl(result.stdout)}
    assert events["prt_zz1"]["kind"] == "warning" and events["prt_zz1"]["text"] == "not json {"
    assert events["prt_zz2"]["kind"] == "unknown" and events["prt_zz2"]["type"] == "hologram"
    assert events["prt_zz3"]["kind"] == "unknown"
    assert events["prt_zz4"]["kind"] in ("warning", "unknown")
    assert any(e["kind"] == "message" for e in events.values())  # the rest still maps


# ------------------------------------------------------------------------- import


def test_import_task_with_children():
    db = SAMPLES / "task" / "opencode.db"
    events = jsonl(run("import", "--db", str(db), "--children").stdout)
    parent, child = [r[0] for r in sql(db, "SELECT id FROM session ORDER BY parent_id IS NOT NULL")]
    sessions = [e["session_id"] for e in events[:-1]]
    assert sessions == sorted(sessions, key=lambda s: s != parent)  # parent first, then child
    assert {parent, child} == set(sessions)
    assert events[0]["kind"] == "prompt"
    (orch,) = [e for e in events if e["kind"] == "orchestration"]
    assert orch["child_session_id"] == child
    for event in events[:-1]:
        assert event["message_id"].startswith("msg_")
        if event["kind"] != "error":
            assert event["part_id"].startswith("prt_")
    usage = [e for e in events if e["kind"] == "usage"]
    steps = sql(db, "SELECT count(*) FROM part WHERE json_extract(data, '$.type')='step-finish'")
    assert len(usage) == steps[0][0]
    assert events[-1]["cost"] == pytest.approx(sql(db, "SELECT sum(cost) FROM session")[0][0])


def test_import_without_children_is_the_parent_only():
    db = SAMPLES / "task" / "opencode.db"
    events = jsonl(run("import", "--db", str(db)).stdout)
    assert len({e["session_id"] for e in events}) == 1


def test_import_orders_messages_then_parts():
    db = SAMPLES / "file_tools" / "opencode.db"
    events = jsonl(run("import", "--db", str(db), "--no-metrics").stdout)
    order = {
        mid: i
        for i, (mid,) in enumerate(sql(db, "SELECT id FROM message ORDER BY time_created, id"))
    }
    keys = [(order[e["message_id"]], e.get("part_id") or "") for e in events]
    assert keys == sorted(keys)


STREAM_SCENARIOS = [
    "text",
    "bash_ok",
    "bash_fail",
    "file_tools",
    "read_missing",
    "apply_patch",
    "task",
    "todowrite",
    "invalid_tool",
    "mcp",
    "skill",
    "webfetch",
    "reasoning_thinking",
]


@pytest.mark.parametrize("scenario", STREAM_SCENARIOS)
def test_import_agrees_with_the_stream(scenario: str):
    """The same session read from the store and from the run stream maps the same way."""
    folder = SAMPLES / scenario
    assert (folder / "stream.jsonl").exists(), f"samples/{scenario} is missing"
    streamed = jsonl(run("normalize", str(folder / "stream.jsonl"), "--no-metrics").stdout)
    imported = {
        e.get("part_id"): e
        for e in jsonl(run("import", "--db", str(folder / "opencode.db"), "--no-metrics").stdout)
    }
    ignore = {"seq", "time", "line", "raw"}
    for event in streamed:
        if "part_id" not in event:
            continue
        twin = imported[event["part_id"]]
        if event["kind"] == "usage":  # the store's message row names these; no stream does
            labels = {"model", "provider", "agent", "directory"}
            assert labels <= twin.keys() and not labels & event.keys()
            ignore |= labels
        if event["kind"] == "write" and event["tool"] == "apply_patch":
            continue  # one part, several events: compared below
        assert {k: v for k, v in event.items() if k not in ignore} == {
            k: v for k, v in twin.items() if k not in ignore
        }


def test_import_selection():
    db = SAMPLES / "fork" / "opencode.db"  # two top-level sessions: the original and its fork
    newest = sql(db, "SELECT id FROM session ORDER BY time_updated DESC, id DESC")[0][0]
    with Store(db) as store:
        assert select_sessions(store) == [newest]
        assert select_sessions(store, [newest[:14]]) == [newest]
        assert select_sessions(store, all_sessions=True) == [
            r[0] for r in sql(db, "SELECT id FROM session ORDER BY time_created, id")
        ]
        with pytest.raises(InputError, match="no session"):
            select_sessions(store, ["ses_nope"])
        with pytest.raises(InputError, match=r"matches 2 sessions \(ses_\w+, ses_\w+\)"):
            select_sessions(store, ["ses_"])


def test_import_takes_a_session_as_usage_does():
    """`import --session ID` (repeatable) names sessions as `usage --session` does, and as
    SESSION names them."""
    path = SAMPLES / "fork" / "opencode.db"
    original, fork = (r[0] for r in sql(path, "SELECT id FROM session ORDER BY time_created"))
    db = str(path)
    by_argument = run("import", "--db", db, original[:16], fork[:16])
    by_option = run("import", "--db", db, "--session", original[:16], "--session", fork[:16])
    mixed = run("import", "--db", db, original[:16], "--session", fork[:16])
    assert by_argument.returncode == 0 and by_argument.stdout
    assert by_option.stdout == mixed.stdout == by_argument.stdout
    assert {e.get("session_id") for e in jsonl(by_option.stdout)} == {original, fork, None}


def test_import_unknown_session_is_an_error():
    result = run("import", "--db", str(SAMPLES / "text" / "opencode.db"), "ses_nope")
    assert result.returncode == 2 and result.stderr == (
        f"error: no session ses_nope in {SAMPLES / 'text' / 'opencode.db'}\n".encode()
    )


@pytest.mark.parametrize(
    "command",
    [
        ["import"],
        ["import", "--session"],
        ["otel", "-o", "-"],
        ["usage", "--session"],
        ["context"],
        ["statusline", "--session"],
    ],
)
def test_a_session_id_that_is_not_utf8_is_no_session(command: list[str]):
    """An id given in bytes that are not UTF-8 (Python holds them as surrogates, which
    SQLite's binding cannot take) names no session: one error line, exit 2."""
    db = str(SAMPLES / "text" / "opencode.db")
    wanted = os.fsdecode(b"ses_\xff")
    result = run(*command, wanted, "--db", db)
    assert (result.returncode, result.stdout) == (2, b"")
    assert result.stderr.startswith(b"error: no session ses_"), result.stderr
    assert result.stderr.count(b"\n") == 1 and b"Traceback" not in result.stderr


EXPORTED = sorted(p.parent.name for p in SAMPLES.glob("*/export.json"))


@pytest.mark.parametrize("name", EXPORTED)
def test_export_document_maps_like_the_store(name: str):
    """Every captured `opencode export` document gives the events `import` gives for the
    same session, but for `seq`, `time` (an export has no part row times) and the ids an
    export adds to each record kept in `raw`; each event is one line of compact JSON, the
    indented document's records included."""
    folder = SAMPLES / name
    session = json.loads((folder / "export.json").read_bytes())["info"]["id"]
    exported = run("normalize", str(folder / "export.json"), "--no-metrics", "--raw").stdout
    imported = run(
        "import", "--db", str(folder / "opencode.db"), session, "--no-metrics", "--raw"
    ).stdout

    def comparable(event: dict) -> dict:
        event = {k: v for k, v in event.items() if k not in ("seq", "time")}
        if isinstance(event.get("raw"), dict):
            extra = ("id", "sessionID", "messageID")
            event["raw"] = {k: v for k, v in event["raw"].items() if k not in extra}
        return event

    assert exported.count(b"\n") == len(jsonl(exported)) > 0
    for line in exported.splitlines():
        assert line == msgspec.json.format(line, indent=-1)
    assert [comparable(e) for e in jsonl(exported)] == [comparable(e) for e in jsonl(imported)]


@pytest.mark.parametrize("layout", ["as written", "one per line"])
def test_export_documents_one_after_another_are_each_read(tmp_path: Path, layout: str):
    """`for s in …; do opencode export $s; done | opencode-events normalize`, or `jq -c` of
    several files: every document's events, as each gives them alone, in order."""
    docs = [(SAMPLES / name / "export.json").read_bytes() for name in EXPORTED]
    if layout == "one per line":
        docs = [msgspec.json.format(doc, indent=-1) for doc in docs]
    joined = tmp_path / "exports.json"
    joined.write_bytes(b"\n".join(docs) + b"\n")

    def events(path: Path) -> list[dict]:
        found = jsonl(run("normalize", str(path), "--no-metrics").stdout)
        return [{k: v for k, v in e.items() if k != "seq"} for e in found]

    alone = []
    for n, doc in enumerate(docs):
        (tmp_path / f"{n}.json").write_bytes(doc)
        alone += events(tmp_path / f"{n}.json")
    assert events(joined) == alone and len({e["session_id"] for e in alone}) == len(docs)


def test_a_damaged_export_document_among_others_is_a_warning_at_its_line(tmp_path: Path):
    """Input that is not JSON is one warning, from where it starts to the next line that
    opens an object (how each document begins); the document there is read as usual."""
    first, second = ((SAMPLES / name / "export.json").read_bytes() for name in EXPORTED[:2])
    joined = tmp_path / "exports.json"
    joined.write_bytes(first + b'\n{"info": oops\n' + second)
    found = jsonl(run("normalize", str(joined), "--no-metrics").stdout)
    mapped = [
        jsonl(run("normalize", str(SAMPLES / name / "export.json"), "--no-metrics").stdout)
        for name in EXPORTED[:2]
    ]
    kinds = [e["kind"] for e in found]
    assert kinds == [e["kind"] for e in mapped[0]] + ["warning"] + [e["kind"] for e in mapped[1]]
    warning = found[len(mapped[0])]
    assert warning["line"] == first.count(b"\n") + 2  # where the damaged one starts
    assert warning["text"] == '{"info": oops'


@pytest.mark.parametrize(
    "between, after",
    [
        (b"\n", b"{}"),  # an object, but no export document
        (b"\n", b"[1, 2]"),
        (b"\n", b'{"info": "not an object"}'),
        (b"\n", b'{"messages": 5}'),
        (b"\n", b'{"info": {"id": "ses_x"}}'),  # no messages: not a document
        (b"\n", b"[" * 3000 + b"]" * 3000),  # deeper than the decoder goes
        (b"\n", b'{"type": "te\xffxt"}'),  # not UTF-8
        (b"\n", b'{"info": oops'),  # not JSON: up to the next line that opens an object
    ],
    ids=[
        "empty-object",
        "array",
        "info-not-object",
        "messages-not-list",
        "info-alone",
        "deep",
        "not-utf8",
        "not-json",
    ],
)
def test_a_json_value_of_another_shape_is_a_warning_and_reading_goes_on(tmp_path, between, after):
    """Never dropped unsaid: a value that is neither an export document nor a record of the
    run stream is one warning at its line, and the document after it is still read."""
    first, second = ((SAMPLES / name / "export.json").read_bytes() for name in EXPORTED[:2])
    path = tmp_path / "mixed.json"
    path.write_bytes(first + between + after + b"\n" + second)
    found = jsonl(run("normalize", str(path), "--no-metrics").stdout)
    alone = [
        jsonl(run("normalize", str(SAMPLES / name / "export.json"), "--no-metrics").stdout)
        for name in EXPORTED[:2]
    ]
    kinds = [e["kind"] for e in found]
    assert kinds == [e["kind"] for e in alone[0]] + ["warning"] + [e["kind"] for e in alone[1]]
    warning = found[len(alone[0])]
    assert warning["line"] == (first + between).count(b"\n") + 1
    assert warning["text"] == after.decode("utf-8", "replace")


def test_records_of_the_run_stream_among_export_documents_are_mapped(tmp_path):
    """A `--format json` record after a document (a lone `{` starts both) is mapped as the
    stream reader maps it, not taken for a broken document."""
    first = (SAMPLES / EXPORTED[0] / "export.json").read_bytes()
    record = b'{"type":"text","sessionID":"ses_x","part":{"type":"text","text":"hi"}}'
    path = tmp_path / "mixed.json"
    path.write_bytes(first + b"\n" + record + b"\n")
    found = jsonl(run("normalize", str(path), "--no-metrics").stdout)
    alone = jsonl(
        run("normalize", str(SAMPLES / EXPORTED[0] / "export.json"), "--no-metrics").stdout
    )
    assert [e["kind"] for e in found] == [e["kind"] for e in alone] + ["message"]
    assert found[-1]["text"] == "hi" and found[-1]["session_id"] == "ses_x"
    assert found[-1]["line"] == first.count(b"\n") + 2


def test_a_large_document_arriving_in_many_reads_is_decoded_a_few_times(monkeypatch):
    """Below 1 MiB held, every read is tried (records come live); above it, only when what
    is held has doubled, so a document of N MiB in small reads costs about 2N MiB of decoding
    past the first MiB, not N²."""
    import opencode_events.sources.export as export
    from opencode_events.core.normalizer import Normalizer

    doc = json.loads((SAMPLES / "text" / "export.json").read_bytes())
    doc["messages"] *= 2000  # about 10 MB
    data = json.dumps(doc, indent=2).encode() + b"\n"
    sizes = []
    decoder = export._DOCUMENT

    class Counting:
        def decode(self, view):
            sizes.append(len(view))
            return decoder.decode(view)

    monkeypatch.setattr(export, "_DOCUMENT", Counting())
    reader = export.ExportReader(Normalizer())
    events = []
    piece = 4096
    for start in range(0, len(data), piece):
        events += reader.take(data[start : start + piece])
    events += reader.take(b"", final=True)
    alone = export.export_events(data, Normalizer())
    assert events == alone and len(events) >= 3  # the copies are one message, deduplicated
    large = [size for size in sizes if size > export._TRY_EVERY_READ]
    assert len(large) <= 2 + (len(data) // export._TRY_EVERY_READ).bit_length()
    assert sum(large) <= 4 * len(data)


def test_each_export_document_may_start_with_a_bom(tmp_path: Path):
    """`cat a.json b.json` of files written with a BOM."""
    docs = [(SAMPLES / name / "export.json").read_bytes() for name in EXPORTED[:3]]
    path = tmp_path / "boms.json"
    path.write_bytes(b"".join(b"\xef\xbb\xbf" + doc for doc in docs))
    kinds = [e["kind"] for e in jsonl(run("normalize", str(path), "--no-metrics").stdout)]
    assert "warning" not in kinds
    assert len({e["session_id"] for e in jsonl(run("normalize", str(path)).stdout)[:-1]}) == 3


def test_many_export_documents_are_read_in_one_pass(monkeypatch):
    """Each document is decoded where it starts, and the input is repaired for lone
    surrogates once at most: time in proportion to the input, however many documents."""
    import opencode_events.sources.export as export
    from opencode_events.core.normalizer import Normalizer

    doc = (SAMPLES / "text" / "export.json").read_bytes().replace(b"say hello", b"\\ud800 hi")
    decodes, repairs = [], []
    decoder, repair = export._DOCUMENT, export.repair_lone_surrogates

    class Counting:
        def decode(self, data):
            decodes.append(len(data))
            return decoder.decode(data)

    monkeypatch.setattr(export, "_DOCUMENT", Counting())
    monkeypatch.setattr(
        export, "repair_lone_surrogates", lambda *a: repairs.append(1) or repair(*a)
    )
    events = export.export_events(doc * 200, Normalizer())
    assert len(repairs) == 1 and len(decodes) <= 2 * 200 + 1
    assert [e.text for e in events if type(e).__name__ == "Prompt"][0] == "\ufffd hi"
    assert not [e for e in events if type(e).__name__ == "Warning"]


# ----------------------------------------------------------------------- sessions


def test_sessions_rows_match_the_database():
    """--no-fold: each row is its session's own figures, as the database holds them."""
    db = SAMPLES / "task" / "opencode.db"
    rows = json.loads(
        run("sessions", "--db", str(db), "--all", "--no-fold", "--format", "json").stdout
    )
    by_id = {r["id"]: r for r in rows}
    for sid, parent, cost, tin, tout, tread in sql(
        db,
        "SELECT id, parent_id, cost, tokens_input, tokens_output, tokens_cache_read FROM session",
    ):
        row = by_id[sid]
        assert row["path"] == f"{db}/{sid}"
        assert row["parent_id"] == parent
        assert (
            row["cost"],
            row["input_tokens"],
            row["output_tokens"],
            row["cache_read_tokens"],
        ) == (cost, tin, tout, tread)
        users, assistants = sql(
            db,
            "SELECT sum(json_extract(data,'$.role')='user'), "
            "sum(json_extract(data,'$.role')='assistant') FROM message WHERE session_id=?",
            sid,
        )[0]
        assert (row["turns"], row["inferences"]) == (users, assistants)
        tools = sql(
            db,
            "SELECT count(*) FROM part WHERE session_id=? AND json_extract(data,'$.type')='tool'",
            sid,
        )[0][0]
        assert row["tool_calls"] == tools
    parent = next(r for r in rows if r["parent_id"] is None)
    child = next(r for r in rows if r["parent_id"] is not None)
    assert parent["children"] == [child["id"]]
    assert parent["total_cost"] == pytest.approx(parent["cost"] + child["cost"])
    assert parent["total_cost"] > parent["cost"] > 0


def test_sessions_top_level_by_default_newest_first(tmp_path: Path):
    db = SAMPLES / "task" / "opencode.db"
    rows = json.loads(run("sessions", "--db", str(db), "--format", "json").stdout)
    assert [r["parent_id"] for r in rows] == [None]
    lines = jsonl(run("sessions", "--db", str(db), "--all", "--format", "jsonl").stdout)
    assert [r["time_updated"] for r in lines] == sorted(
        (r["time_updated"] for r in lines), reverse=True
    )
    assert (
        len(
            jsonl(
                run(
                    "sessions", "--db", str(db), "--all", "--limit", "1", "--format", "jsonl"
                ).stdout
            )
        )
        == 1
    )
    future = run("sessions", "--db", str(db), "--since", "2099-01-01", "--format", "json")
    assert json.loads(future.stdout) == []


def test_sessions_csv_and_bad_since():
    db = SAMPLES / "task" / "opencode.db"
    csv_out = run("sessions", "--db", str(db), "--format", "csv").stdout.decode().splitlines()
    assert csv_out[0].startswith("id,path,parent_id,title")
    assert len(csv_out) == 2
    row = dict(zip(*csv.reader(csv_out), strict=True))
    assert row["in_flight"] == "false"  # as JSON writes it, not Python's False
    bad = run("sessions", "--db", str(db), "--since", "yesterday-ish")
    assert bad.returncode == 2 and b"Traceback" not in bad.stderr


def test_sessions_table_for_people():
    db = SAMPLES / "task" / "opencode.db"
    out = run("sessions", "--db", str(db), "--format", "table").stdout.decode()
    assert "Mock session title" in out and "$0.0" in out
    assert "1 session(s)" in out


def test_mcp_calls_attributed_to_configured_servers(tmp_path: Path):
    folder = SAMPLES / "mcp"
    config = tmp_path / "config" / "opencode"
    config.mkdir(parents=True)
    shutil.copyfile(folder / "opencode.json", config / "opencode.json")
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": "/usr/bin"}
    rows = json.loads(
        run("sessions", "--db", str(folder / "opencode.db"), "--format", "json", env=env).stdout
    )
    (row,) = rows
    mcp_tools = sql(
        folder / "opencode.db",
        "SELECT count(*) FROM part WHERE json_extract(data,'$.tool') LIKE 'my-tools_v1_%'",
    )[0][0]
    assert mcp_tools >= 2
    assert row["mcp_calls"] == {"my-tools.v1": mcp_tools}
    assert row["tool_failures"] >= 1
    without_config = json.loads(
        run(
            "sessions",
            "--db",
            str(folder / "opencode.db"),
            "--format",
            "json",
            env={"HOME": str(tmp_path / "empty"), "PATH": "/usr/bin"},
        ).stdout
    )
    assert without_config[0]["mcp_calls"] == {}
    named = {"HOME": str(tmp_path / "empty"), "PATH": "/usr/bin"}
    named["OPENCODE_CONFIG"] = str(folder / "opencode.json")  # set for this tool too
    by_variable = run(
        "sessions", "--db", str(folder / "opencode.db"), "--format", "json", env=named
    )
    assert json.loads(by_variable.stdout)[0]["mcp_calls"] == {"my-tools.v1": mcp_tools}


# ------------------------------------------------------------ a read-only directory


# The system's interpreter of this one's version (the nobody user cannot reach a pyenv or a
# venv under /root): the compiled msgspec copied for it must be of its version.
_SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"


def _as_nobody_available() -> str | None:
    import os

    if os.geteuid() != 0:
        return "needs root to run a reader as an unprivileged user"
    if not (shutil.which("setpriv") and Path(_SYSTEM_PYTHON).exists()):
        return f"needs setpriv and {_SYSTEM_PYTHON}"
    return None


@pytest.mark.skipif(_as_nobody_available() is not None, reason=str(_as_nobody_available()))
@pytest.mark.parametrize("opencode_running", [False, True], ids=["closed", "wal-and-shm"])
def test_read_only_directory(tmp_path: Path, opencode_running: bool):
    """A user who may read but not write the folder (uid 65534) reads the store."""
    import os
    import tempfile

    import click
    import msgspec

    import opencode_events

    root = Path(tempfile.mkdtemp(prefix="oce-ro-"))
    try:
        os.chmod(root, 0o755)
        lib = root / "lib"
        for module in (opencode_events, msgspec, click):
            shutil.copytree(Path(module.__file__).parent, lib / module.__name__)
        folder = root / "store"
        folder.mkdir()
        db = copy_sample("task", tmp_path, wal=True)
        shutil.copyfile(db, folder / "opencode.db")
        writer = None
        if opencode_running:  # a live writer keeps -wal and -shm beside the file
            writer = sqlite3.connect(folder / "opencode.db")
            writer.execute("PRAGMA journal_mode=wal")
            writer.execute("UPDATE session SET title = title")
            writer.commit()
        for path in [root, lib, *lib.rglob("*"), folder, *folder.iterdir()]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        before = fingerprint(folder)
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); sys.argv = sys.argv[1:]; "
            "from opencode_events.cli.main import main; main()"
        )
        for args in (["sessions", "--all", "--format", "json"], ["import", "--all"]):
            result = subprocess.run(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    _SYSTEM_PYTHON,
                    "-c",
                    code,
                    str(lib),
                    *args,
                    "--db",
                    str(folder / "opencode.db"),
                ],
                capture_output=True,
                timeout=120,
                cwd=root,
                env={"PATH": "/usr/bin:/bin", "HOME": str(root)},
            )
            assert result.returncode == 0, result.stderr.decode()
            assert result.stdout.strip()
        after = fingerprint(folder)
        if writer is not None:
            # The shared-memory index may carry a reader's marks; the data files may not.
            for name in ("opencode.db", "opencode.db-wal"):
                assert after[name] == before[name]
            writer.close()
        else:
            assert after == before
    finally:
        shutil.rmtree(root, ignore_errors=True)


DAMAGED = [
    pytest.param("UPDATE session SET tokens_input = 'x', cost = 'abc'", id="text-in-numbers"),
    pytest.param(
        "UPDATE session SET time_created = 'x' WHERE parent_id IS NOT NULL", id="text-in-time"
    ),
    pytest.param("UPDATE session SET parent_id = id", id="own-parent"),
    pytest.param(
        "DELETE FROM message WHERE id IN (SELECT message_id FROM part LIMIT 1)",
        id="part-without-message",
    ),
    pytest.param("UPDATE message SET data = 'not json' WHERE rowid = 1", id="message-not-json"),
]


@pytest.mark.parametrize("damage", DAMAGED)
def test_damaged_rows_never_traceback(tmp_path: Path, damage: str):
    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(damage)
    conn.commit()
    conn.close()
    for args in (
        ["sessions", "--all", "--format", "json"],
        ["import", "--all"],
        ["usage", "--all", "--format", "json"],
        ["usage", "--all", "--by", "day", "--format", "json"],
        ["context", "--format", "json"],
    ):
        result = run(*args, "--db", str(db))
        assert b"Traceback" not in result.stderr, (args, result.stderr.decode())
        assert result.returncode in (0, 2), (args, result.stderr.decode())
        if result.returncode == 2:
            assert result.stderr.startswith(b"error: ")


def test_import_reads_export_documents_too():
    document = SAMPLES / "task" / "export.json"
    from_import = run("import", str(document), "--no-metrics")
    from_normalize = run("normalize", str(document), "--no-metrics")
    assert from_import.returncode == 0 and from_import.stdout == from_normalize.stdout
    assert jsonl(from_import.stdout)[0]["kind"] == "prompt"
    mixed = run("import", str(document), "ses_x")
    assert mixed.returncode == 2 and mixed.stderr.startswith(b"error: ")


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="one core: no workers")
@pytest.mark.parametrize("scenario", ["task", "mcp", "file_tools"])
def test_parallel_part_scan_gives_the_same_sessions(monkeypatch, scenario: str):
    """Large databases are read by one process per core (tool calls and messages); the rows
    must not change."""
    import msgspec

    import opencode_events.reports.sessions as summary_module

    db = SAMPLES / scenario / "opencode.db"
    with Store(db) as store:
        rows = store.sessions()
        monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 10**12)
        sequential = msgspec.to_builtins(summary_module.summarize(store, rows))
        monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
        started = []
        original = summary_module._start_scan
        monkeypatch.setattr(
            summary_module, "_start_scan", lambda s: started.append(original(s)) or started[-1]
        )
        parallel = msgspec.to_builtins(summary_module.summarize(store, rows))
    assert started and started[0] is not None  # the workers did run
    assert parallel == sequential
    assert sum(r["tool_calls"] for r in parallel) > 0


@pytest.mark.parametrize("scenario", ["task", "mcp", "file_tools"])
def test_one_process_reads_the_tables_range_by_range_to_the_same_sessions(
    monkeypatch, scenario: str
):
    """Alone, this process reads the part table in ranges (each with its share of the
    messages), each range's counts applied and let go before the next: the rows are the
    ones read in one piece, byte for byte."""
    import msgspec

    import opencode_events.reports.sessions as summary_module

    db = SAMPLES / scenario / "opencode.db"
    monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
    monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 10**12)
    with Store(db) as store:
        rows = store.sessions()
        whole = msgspec.json.encode(summary_module.summarize(store, list(rows)))
        ranges: list[int] = []
        original = summary_module._scan_range
        monkeypatch.setattr(
            summary_module, "_scan_range", lambda *a: ranges.append(a[1]) or original(*a)
        )
        for size in (1, 3, 7):
            monkeypatch.setattr(summary_module, "_HERE_PART_ROWIDS", size)
            ranges.clear()
            assert msgspec.json.encode(summary_module.summarize(store, list(rows))) == whole
            assert len(ranges) > 1, size
    assert sum(row["tool_calls"] for row in msgspec.json.decode(whole)) > 0


def _parts_both_ways(db: Path, monkeypatch) -> tuple[list, list]:
    """Every session's parts read the usual way (gathered through the session index, put in
    order in Python) and the way a session too large to gather is read (an ordered join)."""
    with Store(db) as store:
        ids = [r.id for r in store.sessions()]
        gathered = [list(store.parts(sid)) for sid in ids]
        # The import's read: messages first, the parts put in their order.
        with_messages = [
            [PartRow(r[0], r[1], sid, r[3], r[4]) for r in store.session_rows(sid)[1]]
            for sid in ids
        ]
        assert with_messages == gathered
        monkeypatch.setattr(Store, "GATHER_LIMIT", 0)
        joined = [list(store.parts(sid)) for sid in ids]
    return gathered, joined


@pytest.mark.parametrize("scenario", ["task", "file_tools", "fork", "compaction"])
def test_gathered_parts_come_in_the_joins_order(monkeypatch, scenario: str):
    gathered, joined = _parts_both_ways(SAMPLES / scenario / "opencode.db", monkeypatch)
    assert gathered == joined
    assert (
        sum(map(len, gathered))
        == sql(SAMPLES / scenario / "opencode.db", "SELECT count(*) FROM part")[0][0]
    )


def test_gathered_parts_out_of_table_order_and_odd_rows(tmp_path: Path, monkeypatch):
    """Parts inserted out of order, a message inserted after a later one, a part whose
    message is in another session (not this session's history), a NULL and a blob id."""
    db = copy_sample("file_tools", tmp_path)
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT id FROM session").fetchone()
    (other,) = conn.execute(
        "SELECT id FROM message WHERE session_id = ? LIMIT 1", (sid,)
    ).fetchone()
    conn.execute(
        "INSERT INTO session (id, project_id, slug, directory, title, version, time_created,"
        " time_updated) VALUES ('ses_other', 'p', 's', '/', 't', 'v', 1, 1)"
    )
    conn.execute("INSERT INTO message VALUES ('msg_late', ?, 5, 5, '{\"role\":\"user\"}')", (sid,))
    conn.execute(
        "INSERT INTO message VALUES ('msg_elsewhere', 'ses_other', 5, 5, '{\"role\":\"user\"}')"
    )
    text = '{"type":"text","text":"%s"}'
    for part_id, message_id, session_id in [
        ("prt_z", "msg_late", sid),
        ("prt_a", "msg_late", sid),
        ("prt_m", "msg_late", sid),
        ("prt_stray", "msg_elsewhere", sid),  # a part of this session under a foreign message
        ("prt_foreign", other, "ses_other"),  # a foreign part under one of our messages
    ]:
        conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, 5, 5, ?)",
            (part_id, message_id, session_id, text % part_id),
        )
    conn.execute("INSERT INTO part VALUES (NULL, 'msg_late', ?, 5, 5, ?)", (sid, text % "null"))
    conn.execute("INSERT INTO part VALUES (x'00ff', 'msg_late', ?, 5, 5, ?)", (sid, text % "blob"))
    conn.commit()
    conn.close()
    gathered, joined = _parts_both_ways(db, monkeypatch)
    assert gathered == joined
    ids = [row.id for rows in gathered for row in rows]
    assert "prt_stray" not in ids and "prt_foreign" not in ids
    late = [row.id for rows in gathered for row in rows if row.message_id == "msg_late"]
    assert late == [None, "prt_a", "prt_m", "prt_z", b"\x00\xff"]


def test_parts_with_no_id_keep_table_order(tmp_path: Path, monkeypatch):
    """Parts whose ids are all NULL (the schema allows it) tie on id: both reads keep them
    in table order, not sorted by their other columns."""
    db = copy_sample("file_tools", tmp_path)
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT session_id FROM message ORDER BY rowid LIMIT 1").fetchone()
    conn.execute(
        "INSERT INTO message VALUES ('msg_zz', ?, 9e15, 1, '{\"role\":\"assistant\"}')", (sid,)
    )
    for created, text in ((9, "first"), (1, "second")):
        conn.execute(
            "INSERT INTO part VALUES (NULL, 'msg_zz', ?, ?, ?, ?)",
            (sid, created, created, json.dumps({"type": "text", "text": text})),
        )
    conn.commit()
    conn.close()
    gathered, joined = _parts_both_ways(db, monkeypatch)
    assert gathered == joined
    texts = [row.data for rows in gathered for row in rows if row.id is None]
    assert [json.loads(t)["text"] for t in texts] == ["first", "second"]


def test_session_ids_with_damaged_ids(tmp_path: Path):
    """A NULL or blob session id beside another at the same time: no crash, SQLite's order."""
    db = copy_sample("text", tmp_path)
    conn = sqlite3.connect(db)
    (created,) = conn.execute("SELECT time_created FROM session").fetchone()
    for sid in (None, b"\x01blob"):
        conn.execute(
            "INSERT INTO session (id, project_id, slug, directory, title, version, "
            "time_created, time_updated) VALUES (?, 'p', 's', '/', 't', 'v', ?, ?)",
            (sid, created, created),
        )
    conn.commit()
    expected = [r[0] for r in conn.execute("SELECT id FROM session ORDER BY time_created, id")]
    conn.close()
    with Store(db) as store:
        assert store.session_ids() == expected
        assert select_sessions(store, all_sessions=True) == expected


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="one core: no workers")
@pytest.mark.parametrize("scenario", ["task", "mcp"])
def test_a_scan_started_before_the_rows_gives_the_same_sessions(monkeypatch, scenario: str):
    """`sessions --all` starts the whole-table scan before it reads the session rows (and
    a report of a few sessions, or of every one made a session at a time, takes one)."""
    import msgspec

    import opencode_events.reports.sessions as summary_module

    with Store(SAMPLES / scenario / "opencode.db") as store:
        rows = store.sessions()
        plain = msgspec.to_builtins(summary_module.summarize(store, rows, fold=False))
        monkeypatch.setattr(summary_module, "WHOLE_TABLE_SESSIONS", 1)
        monkeypatch.setattr(summary_module, "_PARALLEL_MIN_PARTS", 0)
        scan = summary_module._start_scan(store)
        assert scan is not None
        early = msgspec.to_builtins(summary_module.summarize(store, rows, scan=scan, fold=False))
        scan = summary_module._start_scan(store)
        made = summary_module.each_summary(store, all_sessions=True, scan=scan, fold=False)
        assert msgspec.to_builtins(list(made)) == early
    assert early == plain
    assert sum(r["tool_calls"] for r in early) > 0


def test_closing_metrics_name_a_session_only_when_there_is_one():
    db = str(SAMPLES / "task" / "opencode.db")
    one = jsonl(run("import", "--db", db).stdout)
    several = jsonl(run("import", "--db", db, "--all").stdout)
    assert one[-1]["kind"] == several[-1]["kind"] == "metrics"
    assert one[-1]["session_id"] == one[0]["session_id"]
    assert len({e["session_id"] for e in several[:-1]}) == 2 and "session_id" not in several[-1]


@pytest.mark.parametrize("target", ["opencode.db", "opencode.db-wal", "opencode.db-journal"])
def test_import_will_not_write_over_what_it_reads(tmp_path: Path, target: str):
    db = copy_sample("task", tmp_path)
    before = fingerprint(db.parent)
    result = run("import", "--all", "--db", str(db), "-o", str(db.parent / target))
    assert result.returncode == 2
    assert result.stderr.startswith(b"error: will not write to ")
    assert result.stderr.count(b"\n") == 1
    assert fingerprint(db.parent) == before  # nothing emptied, nothing created beside it


def test_import_will_not_write_into_a_legacy_store(tmp_path: Path):
    storage = tmp_path / "storage" / "session" / "proj"
    storage.mkdir(parents=True)
    (storage / "ses_a.json").write_text('{"id": "ses_a", "time": {"created": 1, "updated": 1}}')
    result = run("import", "--all", "--db", str(tmp_path), "-o", str(storage / "ses_a.json"))
    assert result.returncode == 2 and result.stderr.startswith(b"error: will not write to ")
    assert json.loads((storage / "ses_a.json").read_text())["id"] == "ses_a"


# ------------------------------------------------------- damaged rows and config files


@pytest.mark.parametrize(
    "directory",
    ["X'2f746d70'", "'/tmp/a' || char(0) || 'b'", "'/' || replace(hex(zeroblob(3000)), '0', 'a')"],
    ids=["blob", "nul", "too-long"],
)
def test_a_damaged_session_directory_is_no_directory(tmp_path: Path, directory: str):
    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE session SET directory = {directory}")
    conn.commit()
    conn.close()
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin"}
    for command in ("sessions", "context"):
        result = run(command, "--db", str(db), "--format", "json", env=env)
        assert result.returncode == 0, (command, result.stderr.decode())
        assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["deep", "fifo", "not-json", "tiers"])
def test_a_bad_config_file_is_no_config(tmp_path: Path, kind: str):
    import os

    config = tmp_path / "config" / "opencode"
    config.mkdir(parents=True)
    target = config / "opencode.json"
    if kind == "deep":
        target.write_text("[" * 100_000)
    elif kind == "fifo":
        os.mkfifo(target)  # never opened for a writer: reading it would wait for ever
    elif kind == "not-json":
        target.write_bytes(b"\xff\xfe{")
    else:
        target.write_text(
            '{"provider": {"mock": {"models": {"mock-model": {"cost": '
            '{"input": 1, "tiers": 5, "context_over_200k": {"input": 1e400}}}}}}}'
        )
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": "/usr/bin"}
    db = str(SAMPLES / "mcp" / "opencode.db")
    for command in ("sessions", "context"):
        result = run(command, "--db", db, "--format", "json", env=env)
        assert result.returncode == 0, (command, result.stderr.decode())
        assert b"Traceback" not in result.stderr


def test_a_transaction_cut_off_in_rollback_mode_is_not_read(tmp_path: Path):
    """A writer killed mid-transaction leaves a hot journal and uncommitted pages in the
    file; the store reads the last committed state (from a private copy rolled back) and
    leaves the database, its journal and /tmp as they were."""
    import os
    import signal
    import tempfile

    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=delete")
    conn.close()
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('PRAGMA cache_size=1')\n"  # uncommitted pages spill into the file
            "c.execute('BEGIN EXCLUSIVE')\n"
            "c.execute('UPDATE part SET data = ?', (sys.argv[2],))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n",
            str(db),
            '{"type":"text","text":"UNCOMMITTED"}',
        ],
        stdout=subprocess.PIPE,
    )
    assert writer.stdout.readline() == b"ready\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert Path(f"{db}-journal").stat().st_size > 0
    before = fingerprint(db.parent)
    temporary = set(Path(tempfile.gettempdir()).glob("opencode-events-*"))
    result = run("import", "--all", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert b"UNCOMMITTED" not in result.stdout and b'"kind":"read"' in result.stdout
    assert fingerprint(db.parent) == before
    assert set(Path(tempfile.gettempdir()).glob("opencode-events-*")) == temporary


def test_a_private_copy_is_removed_when_opening_fails(tmp_path: Path):
    import tempfile

    db = copy_sample("task", tmp_path, wal=True)
    Path(f"{db}-wal").mkdir()  # a -wal that cannot be copied, and no -shm: the copy path
    temporary = set(Path(tempfile.gettempdir()).glob("opencode-events-*"))
    result = run("sessions", "--db", str(db))
    assert result.returncode == 2 and result.stderr.startswith(b"error: cannot read ")
    assert set(Path(tempfile.gettempdir()).glob("opencode-events-*")) == temporary


def test_sigterm_ends_like_ctrl_c_and_removes_the_private_copy(tmp_path: Path):
    """`kill` while an import waits on a full pipe: exit 143, no traceback, and the private
    copy of a crashed WAL database is gone from /tmp."""
    import signal
    import tempfile

    db = copy_sample("big_output", tmp_path, wal=True)
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE session SET title = 'only in the wal'")
    writer.commit()
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    shutil.copyfile(db, crashed / "opencode.db")
    shutil.copyfile(f"{db}-wal", crashed / "opencode.db-wal")  # and no -shm: a private copy
    writer.close()
    temporary = set(Path(tempfile.gettempdir()).glob("opencode-events-*"))
    proc = subprocess.Popen(
        CLI + ["import", "--raw", "--db", str(crashed / "opencode.db")],
        stdout=subprocess.PIPE,  # never read: the import blocks once the pipe is full
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while set(Path(tempfile.gettempdir()).glob("opencode-events-*")) == temporary:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)  # well into the import: blocked on the pipe
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143 and b"Traceback" not in stderr
    assert set(Path(tempfile.gettempdir()).glob("opencode-events-*")) == temporary


def test_stored_part_cut_inside_a_surrogate_pair_is_read(tmp_path: Path):
    """OpenCode truncates a tool output by UTF-16 units and may store half an emoji as a
    lone \\ud83d escape; the part is still mapped, and counted by `sessions` alike."""
    db = copy_sample("bash_ok", tmp_path)
    conn = sqlite3.connect(db)
    (rowid, data) = conn.execute(
        "SELECT rowid, data FROM part WHERE json_extract(data, '$.type') = 'tool'"
    ).fetchone()
    cut = data.replace('"output":"', '"output":"cut \\ud83d ', 1)
    assert cut != data
    conn.execute("UPDATE part SET data = ? WHERE rowid = ?", (cut, rowid))
    conn.commit()
    conn.close()
    events = jsonl(run("import", "--db", str(db), "--raw").stdout)
    assert not [e for e in events if e["kind"] in ("warning", "unknown")]
    assert any("cut \ufffd" in json.dumps(e.get("raw"), ensure_ascii=False) for e in events)
    (row,) = json.loads(run("sessions", "--db", str(db), "--format", "json").stdout)
    assert row["tool_calls"] == events[-1]["tool_calls"] >= 1
    turns = json.loads(run("usage", "--db", str(db), "--last", "--format", "json").stdout)
    assert turns["total"]["tool_calls"] == row["tool_calls"]
    context = run("context", "--db", str(db), "--format", "json")
    assert "unreadable" not in context.stderr.decode()
    assert any(s["source"] == "tool:bash" for s in json.loads(context.stdout)["sources"])


def test_stored_message_cut_inside_a_surrogate_pair_is_read(tmp_path: Path):
    """The same in an assistant message row: its cost and inference still count everywhere,
    and every event that carries the row is JSON a strict reader takes."""
    import msgspec

    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    rowid, data = conn.execute(
        "SELECT rowid, data FROM message WHERE json_extract(data, '$.role') = 'assistant' "
        "AND json_extract(data, '$.cost') > 0 AND json_extract(data, '$.time.completed') > 0"
    ).fetchone()
    conn.execute(
        "UPDATE message SET data = ? WHERE rowid = ?",
        (data[:-1] + ',"error":{"name":"APIError","data":{"message":"cut \\ud83d"}}}', rowid),
    )
    conn.commit()
    conn.close()
    imported = run("import", "--all", "--db", str(db), "--raw").stdout
    for line in imported.splitlines():
        msgspec.json.decode(line)  # strict: no lone surrogate escape left
    metrics = jsonl(imported)[-1]
    total = json.loads(run("usage", "--all", "--db", str(db), "--format", "json").stdout)["total"]
    assert total["cost"] == pytest.approx(metrics["cost"])
    rows = json.loads(
        run("sessions", "--all", "--no-fold", "--db", str(db), "--format", "json").stdout
    )
    inferences = sum(r["inferences"] for r in rows)
    assert inferences == sql(db, "SELECT count(*) FROM message WHERE data LIKE '%assistant%'")[0][0]


def test_rows_nested_too_deep_never_crash_a_command(tmp_path: Path):
    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    deep = "[" * 100_000 + "]" * 100_000
    conn.execute(
        "UPDATE part SET data = ? WHERE rowid = (SELECT min(rowid) FROM part)",
        ('{"type":"tool","x":' + deep + "}",),
    )
    conn.execute(
        "UPDATE message SET data = ? WHERE rowid = (SELECT max(rowid) FROM message)",
        ('{"role":"assistant","x":' + deep + "}",),
    )
    conn.commit()
    conn.close()
    for command in (
        ["sessions", "--all"],
        ["usage", "--all"],
        ["usage", "--all", "--by", "day"],
        ["usage", "--all", "--by", "step"],
        ["context", "--per-inference"],
        ["import", "--all"],
    ):
        result = run(
            *command, "--db", str(db), "--format", "json" if command[0] != "import" else "jsonl"
        )
        assert result.returncode == 0, (command, result.stderr.decode()[-300:])


def test_a_session_path_names_the_session_from_anywhere(tmp_path: Path):
    db = copy_sample("task", tmp_path)
    result = subprocess.run(
        CLI + ["sessions", "--db", "task/opencode.db", "--format", "json"],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )
    (row,) = json.loads(result.stdout)
    assert row["path"] == f"{db}/{row['id']}"


def test_a_journal_kept_after_its_commit_holds_no_transaction(tmp_path: Path):
    """journal_mode=PERSIST keeps the file and zeroes its header: nothing to roll back, so
    no private copy of the database is made for it."""
    from opencode_events.store.sqlite import _journal_in_use

    db = copy_sample("task", tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=persist")
    conn.execute("UPDATE session SET title = 'committed'")
    conn.commit()
    conn.close()
    journal = Path(f"{db}-journal")
    assert journal.stat().st_size > 0 and not _journal_in_use(journal)
    with Store(db) as store:
        assert store._tmp is None and "committed" in [s.title for s in store.sessions()]


@pytest.mark.parametrize(
    "name, sanitized",
    [
        ("my-tools.v1", "my-tools_v1"),
        ("a b/c", "a_b_c"),
        ("ü-srv", "_-srv"),  # one UTF-16 unit: one _
        ("r🚀x", "r__x"),  # beyond U+FFFF: two units, two _ (as OpenCode's JavaScript)
    ],
)
def test_server_names_are_sanitised_as_opencode_does(name, sanitized):
    from opencode_events.reports.mcp import mcp_server_of, sanitize

    assert sanitize(name) == sanitized
    assert mcp_server_of(f"{sanitized}_echo", [name]) == name


def test_project_config_is_read_up_to_the_repository_or_else_to_the_root(tmp_path: Path):
    from opencode_events.reports.mcp import config_files

    work = tmp_path / "work" / "sub"
    work.mkdir(parents=True)
    env = {"HOME": str(tmp_path / "home")}
    outside = config_files(str(work), env)
    assert tmp_path / "work" / "opencode.json" in outside  # OpenCode's worktree is / here
    assert Path("/opencode.json") in outside
    (tmp_path / "work" / ".git").mkdir()
    inside = config_files(str(work), env)
    assert tmp_path / "work" / "opencode.json" in inside
    assert tmp_path / "opencode.json" not in inside  # above the repository: not read


def test_a_loop_of_parent_links_loses_nothing_and_counts_nothing_twice(tmp_path: Path):
    """OpenCode never writes one; a damaged store may: the sessions of the loop are taken as
    top-level, and no one of them is folded into another."""
    db = tmp_path / "opencode.db"
    parent, _ = with_a_parent_loop(db)
    costs = dict(sql(db, "SELECT id, cost FROM session"))
    rows = json.loads(run("sessions", "--db", str(db), "--format", "json").stdout)
    assert {r["id"]: r["total_cost"] for r in rows} == pytest.approx(costs)
    assert all(r["children"] == [] for r in rows)
    report = json.loads(run("usage", "--db", str(db), "--all", "--format", "json").stdout)
    assert report["total"]["cost"] == pytest.approx(sum(costs.values()))
    alone = json.loads(
        run("usage", "--db", str(db), "--session", parent, "--format", "json").stdout
    )
    assert alone["total"]["cost"] == pytest.approx(costs[parent])


class NotUtf8Text(bytes):
    """Bytes stored as a TEXT cell: what a damaged file may hold, which Python's sqlite3
    refuses to decode (a BLOB cell of the same bytes it hands over as bytes)."""


@pytest.mark.parametrize(
    "column, value",
    [
        ("time_created", 9e999),  # SQLite keeps an infinite REAL even in an integer column
        ("tokens_input", -9e999),
        ("cost", 9e999),
        ("directory", b"/a/blob/of/a/directory/that/is/long/enough"),
        ("title", b"\xff a blob title"),
        ("model", b'{"id":"m","providerID":"p"}'),
        ("title", NotUtf8Text(b"Hi\xff there \xc3(")),
        ("title", NotUtf8Text(b"half an emoji \xed\xa0\xbd")),  # a lone surrogate, as CESU-8
        ("directory", NotUtf8Text(b"/work/caf\xe9")),  # Latin-1
        ("agent", NotUtf8Text(b"bu\xffild")),
        ("model", NotUtf8Text(b'{"id":"m\xff","providerID":"p"}')),
        ("version", NotUtf8Text(b"1.1\xff")),
        ("revert", NotUtf8Text(b'{"messageID":"msg_\xff"}')),
        ("parent_id", NotUtf8Text(b"ses_\xff")),  # an orphan now: listed on its own
        ("time_archived", NotUtf8Text(b"a\xff")),  # a number cell of text: 0
    ],
)
def test_a_damaged_session_cell_is_read_as_0_or_text_in_every_report(tmp_path, column, value):
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    cell = "CAST(? AS TEXT)" if isinstance(value, NotUtf8Text) else "?"
    conn.execute(f"UPDATE session SET {column} = {cell}", (bytes(value) if cell != "?" else value,))
    conn.commit()
    conn.close()
    for args in (
        ["sessions", "--all", "--format", "json"],
        ["sessions", "--all", "--format", "table"],
        ["sessions", "--all", "--format", "csv"],
        ["sessions", "--all", "--no-cache", "--format", "json"],
        ["usage", "--all", "--format", "json"],
        ["import", "--all"],
        ["context", "--format", "json"],
        ["otel", "--all"],
        ["top", "--once"],
        ["statusline"],
    ):
        result = run(*args, "--db", str(db))
        assert result.returncode == 0 and b"Traceback" not in result.stderr, (args, result.stderr)
        result.stdout.decode("utf-8")  # valid UTF-8, whatever the file holds
    rows = json.loads(run("sessions", "--all", "--db", str(db), "--format", "json").stdout)
    assert all(isinstance(r["directory"], str | None) for r in rows)
    assert all(isinstance(r["time_created"], int) for r in rows)
    if isinstance(value, NotUtf8Text) and column in ("title", "directory", "agent"):
        shown = {r[column] for r in rows}
        assert shown == {bytes(value).decode("utf-8", "replace")}, shown


@pytest.mark.parametrize("damaged", [0, 255, 256, 300, 599])
def test_sessions_read_again_past_damaged_text_are_each_read_once(tmp_path, damaged) -> None:
    """A title that is not UTF-8 in row ``damaged`` of 600 (the store fetches 256 at a time):
    every session once, in order, the damaged title with U+FFFD and the others as written."""
    db = tmp_path / "opencode.db"
    changes = [
        {"id": f"ses_{i:04d}", "title": f"title {i}", "time_updated": 10_000 - i}
        for i in range(600)
    ]
    with_sessions_like_the_first(db, "bash_ok", changes)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE session SET title = CAST(? AS TEXT) WHERE id = ?",
        (b"bad \xff title", f"ses_{damaged:04d}"),
    )
    conn.commit()
    conn.close()
    with Store(db) as store:
        rows = store.sessions()
        one = store.session(f"ses_{damaged:04d}")
    assert [r.id for r in rows] == [f"ses_{i:04d}" for i in range(600)]
    expected = [f"title {i}" for i in range(600)]
    expected[damaged] = "bad \ufffd title"
    assert [r.title for r in rows] == expected
    assert one is not None and one.title == "bad \ufffd title"


@pytest.mark.parametrize(
    "parents, loops",
    [
        ({"a": None, "b": "a", "c": "b"}, set()),  # a chain
        ({"a": "a"}, set()),  # its own parent: top-level anyway, no loop to follow
        ({"a": "gone"}, set()),  # an orphan
        ({"a": "b", "b": "a"}, {"a", "b"}),
        ({"a": "b", "b": "c", "c": "a", "d": "a", "e": "d"}, {"a", "b", "c"}),  # d, e below it
        ({str(i): str((i + 1) % 70) for i in range(70)}, {str(i) for i in range(70)}),
        ({str(i): str(i + 1) for i in range(10_000)}, set()),  # a long chain, walked once
    ],
    ids=["chain", "self", "orphan", "two", "three-with-a-tail", "seventy", "deep-chain"],
)
def test_loop_members(parents, loops):
    from opencode_events.store.rows import loop_members

    assert loop_members(parents) == loops


@pytest.mark.parametrize(
    "links, loops",
    [
        ([("a", None), ("b", "a")], set()),
        ([("a", "b"), ("b", "a"), ("c", "a"), ("d", "d")], {"a", "b"}),
        ([("a", "b"), ("b", "c"), ("c", "a"), (None, "a"), ("e", None)], {"a", "b", "c"}),
    ],
    ids=["no loop", "a loop", "a loop and a NULL id"],
)
def test_the_parents_read_tell_the_loops_without_a_second_read(tmp_path: Path, links, loops):
    """``session_parents`` finds the loops among the links it read (``loop_members``),
    which then reads nothing: the same loops as its own query finds."""
    from opencode_events.store.sqlite import Store

    db = tmp_path / "opencode.db"
    with_sessions_like_the_first(db, "task", [{"id": i, "parent_id": p} for i, p in links])
    with Store(db) as store:
        expected = store.loop_members()
    with Store(db) as store:
        assert store.session_parents() == dict(links)
        store._query = lambda *a, **k: pytest.fail("the table read again")
        assert store.loop_members() == expected
    assert expected == loops


def test_a_session_row_without_an_id_hides_no_orphan(tmp_path: Path):
    # `x NOT IN (… NULL …)` is never true in SQL: the NULL id must not hide every orphan.
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE session SET parent_id = 'ses_gone' WHERE parent_id IS NOT NULL")
    names = [c[1] for c in conn.execute("PRAGMA table_info(session)")]
    row = dict(zip(names, conn.execute("SELECT * FROM session LIMIT 1").fetchone(), strict=True))
    row.update(id=None, parent_id=None, title="no id")
    conn.execute(
        f"INSERT INTO session ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
        list(row.values()),
    )
    conn.commit()
    conn.close()
    ids = {r["id"] for r in json.loads(run("sessions", "--db", str(db), "--format", "json").stdout)}
    assert len(ids - {None}) == 2  # the orphan too


def test_an_export_with_a_bom_after_a_blank_line_is_still_an_export(tmp_path: Path):
    path = tmp_path / "export.json"
    path.write_bytes(
        b"\n\xef\xbb\xbf\xef\xbb\xbf" + (SAMPLES / EXPORTED[0] / "export.json").read_bytes()
    )
    found = jsonl(run("normalize", str(path), "--no-metrics").stdout)
    alone = jsonl(
        run("normalize", str(SAMPLES / EXPORTED[0] / "export.json"), "--no-metrics").stdout
    )
    assert [e["kind"] for e in found] == [e["kind"] for e in alone]


def test_session_rows_share_the_strings_that_repeat():
    """A directory, version, agent or model met again is the string read first (one
    object for 100,000 sessions of a project, not one each); the rows are equal as read."""
    from opencode_events.store.sqlite import Store

    with Store(SAMPLES / "task" / "opencode.db") as store:
        rows = store.sessions()
        first, second = rows[0], rows[1]
        assert first.directory == second.directory and first.version == second.version
        assert first.directory is second.directory and first.version is second.version
        assert rows == [store._session_row(tuple(row)) for row in rows]


@pytest.mark.parametrize("damaged", [None, "'1795967025485x'", "1795967025485.5"])
def test_one_rule_tells_a_fork(tmp_path: Path, damaged: str | None):
    """A fork holds messages older than itself; a session time that is no integer tells
    nothing: every reader of the rule (the sessions' ``forked``, the copies ``usage``
    leaves out, ``import``'s ``copied``) asks the same question and gets the same answer."""
    db = copy_sample("fork", tmp_path)
    conn = sqlite3.connect(db)
    (fork,) = conn.execute("SELECT id FROM session WHERE title LIKE '%(fork #%'").fetchone()
    if damaged is not None:
        conn.execute(f"UPDATE session SET time_created = {damaged} WHERE id = ?", (fork,))
    conn.commit()
    conn.close()
    expected = {fork} if damaged is None else set()
    with Store(str(db)) as store:
        assert store.forks() == expected
        assert store.forks([fork]) == expected
        assert set(store.forked_sessions()) == expected
        assert {row[0] for row in store.messages_older_than_session()} == expected
    listed = json.loads(run("sessions", "--db", str(db), "--all", "--format", "json").stdout)
    assert {row["id"] for row in listed if row["forked"]} == expected
    copied = [e for e in jsonl(run("import", "--db", str(db), "--all").stdout) if e.get("copied")]
    assert {e["session_id"] for e in copied} == expected


@pytest.mark.parametrize("case", ["samples", "loop", "equal_times", "text_time", "empty"])
def test_the_newest_session_is_the_first_of_the_list(tmp_path: Path, case: str):
    """``Store.newest_session`` (what a plain ``usage`` reads: one row, not every
    session's) names the first top-level one of ``Store.sessions()``: on every capture, a
    loop of parent links, sessions active at the same ms, a damaged text time, none."""
    dbs = sorted(SAMPLES.glob("*/opencode.db")) if case == "samples" else [tmp_path / "x.db"]
    if case == "loop":
        with_a_parent_loop(dbs[0])
    elif case != "samples":
        shutil.copyfile(SAMPLES / "task" / "opencode.db", dbs[0])
        conn = sqlite3.connect(dbs[0])
        change = {
            "equal_times": "UPDATE session SET time_updated = 1795966880000",
            "text_time": "UPDATE session SET time_updated = 'soon' WHERE parent_id IS NULL",
            "empty": "DELETE FROM session",
        }[case]
        conn.execute(change)
        conn.commit()
        conn.close()
    for db in dbs:
        with Store(db) as store:
            listed = store.sessions(top_level=True)
            assert store.newest_session() == (listed[0].id if listed else None), db


@pytest.mark.parametrize("sample", ["task", "fork", "parallel_tools", "legacy_mixed"])
def test_sessions_with_a_limit_are_the_first_of_all(sample: str):
    """``sessions --limit N`` reads N rows out of the store, not every session's: they are
    the first N of the whole list, top-level or not, in a database and in older files."""
    from opencode_events.reports.sessions import sessions_report
    from opencode_events.store.open import open_store

    with open_store(str(SAMPLES / sample)) as store:
        for top_level in (True, False):
            listed = store.sessions(top_level=top_level)
            for limit in (1, 2, len(listed) + 1):
                assert store.sessions(top_level=top_level, limit=limit) == listed[:limit]
        whole = sessions_report(store, all_sessions=True).sessions
        assert sessions_report(store, all_sessions=True, limit=2).sessions == whole[:2]


def test_the_last_session_may_have_a_damaged_id(tmp_path: Path):
    """A plain ``usage`` (the last session) reads one row: one whose id is NULL is still a
    session (its report is empty), not "no sessions"."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE session SET id = NULL WHERE parent_id IS NULL")
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert select_sessions(store, []) == [store.sessions(top_level=True)[0].id]
    assert run("usage", "--db", str(db), "--format", "json").returncode == 0


def test_a_limit_beyond_sqlite_lists_every_session(tmp_path: Path):
    """``--limit`` has no upper bound: one past what SQLite's LIMIT holds lists them all."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    every = run("sessions", "--db", str(db), "--all", "--format", "json", "--no-cache")
    huge = run(
        "sessions",
        "--db",
        str(db),
        "--all",
        "--format",
        "json",
        "--no-cache",
        "--limit",
        str(1 << 70),
    )
    assert (huge.returncode, huge.stdout, huge.stderr) == (0, every.stdout, every.stderr)


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_a_limit_beyond_64_bits_is_kept_in_the_cache_as_no_limit(tmp_path: Path, fmt: str):
    """The report cache keeps a report under its choices, encoded as msgpack, which holds
    no integer past 2**64: a ``--limit`` that large is a report of every session (as
    without the cache), kept and answered again, not a traceback."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    every = run("sessions", "--db", str(db), "--all", "--format", fmt, "--no-cache")
    for _ in range(2):  # made, then answered from the cache
        huge = run(
            *("sessions", "--db", str(db), "--all", "--format", fmt, "--limit", str(1 << 70)),
            env=env,
        )
        assert (huge.returncode, huge.stdout, huge.stderr) == (0, every.stdout, every.stderr)
