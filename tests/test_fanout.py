"""`import` in worker processes (opencode_events/pipeline/fanout.py): the same bytes as one process,
whatever the number of workers, chunk size or hold budget; failures reported as one process
would report them.

The database is every real capture (samples/*/opencode.db) merged into one file, so there are
enough sessions to share out.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_events.errors import InputError
from opencode_events.output.jsonl import JsonlWriter
from opencode_events.pipeline import fanout
from opencode_events.pipeline.normalize import import_sessions
from opencode_events.sources import transcript
from opencode_events.store.open import select_sessions
from opencode_events.store.sqlite import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="workers need fork")


@pytest.fixture(scope="module")
def merged_db(tmp_path_factory) -> Path:
    """Every captured database's sessions, messages and parts in one file."""
    samples = sorted(SAMPLES.glob("*/opencode.db"))
    target = tmp_path_factory.mktemp("merged") / "opencode.db"
    target.write_bytes(samples[0].read_bytes())
    conn = sqlite3.connect(target)
    for index, sample in enumerate(samples[1:]):
        conn.execute(f"ATTACH DATABASE ? AS s{index}", (f"{sample.as_uri()}?mode=ro",))
        for table in ("project", "session", "message", "part"):
            conn.execute(f"INSERT OR IGNORE INTO {table} SELECT * FROM s{index}.{table}")
        conn.commit()
        conn.execute(f"DETACH DATABASE s{index}")
    conn.close()
    return target


def import_bytes(
    db: Path, tmp_path: Path, *, workers: int, keep_raw: bool = False, tags=None, mcp=None
) -> bytes:
    out_path = tmp_path / f"out-{workers}-{keep_raw}.jsonl"
    fanout.LAST_RUN.clear()
    with Store(db) as store, open(out_path, "wb") as out:
        ids = select_sessions(store, all_sessions=True)
        writer = JsonlWriter(out, buffered=True, tags=tags)
        import_sessions(store, ids, writer, keep_raw=keep_raw, workers=workers, mcp_servers=mcp)
    # The workers did run (a test of equal outputs proves nothing if they did not).
    assert fanout.LAST_RUN.get("workers", 1) == min(workers, len(ids)) or workers == 1
    return out_path.read_bytes()


def test_the_merged_database_has_sessions_to_share(merged_db: Path):
    with Store(merged_db) as store:
        assert len(store.sessions()) >= 30


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_workers_write_what_one_process_writes(merged_db: Path, tmp_path: Path, workers: int):
    one = import_bytes(merged_db, tmp_path, workers=1)
    assert one.count(b"\n") > 100  # every sample's events
    assert b'"reverted":true' in one  # serve_revert's undo: each worker's store knows it
    assert import_bytes(merged_db, tmp_path, workers=workers) == one


def test_with_raw_rows_too(merged_db: Path, tmp_path: Path):
    assert import_bytes(merged_db, tmp_path, workers=2, keep_raw=True) == import_bytes(
        merged_db, tmp_path, workers=1, keep_raw=True
    )


def _servers(directory):
    return ["my-tools.v1"] if directory and directory.endswith("/mcp/work") else []


def test_workers_name_mcp_servers_as_one_process_does(merged_db: Path, tmp_path: Path):
    one = import_bytes(merged_db, tmp_path, workers=1, mcp=_servers)
    assert one.count(b'"mcp_server":"my-tools.v1"') == 3
    assert import_bytes(merged_db, tmp_path, workers=3, mcp=_servers) == one


@pytest.mark.parametrize("chunk", [1, 2, 7])
def test_any_chunk_size(merged_db: Path, tmp_path: Path, monkeypatch, chunk: int):
    one = import_bytes(merged_db, tmp_path, workers=1)
    monkeypatch.setattr(fanout, "CHUNK_SESSIONS", chunk)
    assert import_bytes(merged_db, tmp_path, workers=2) == one


def test_a_worker_slowed_by_one_session_takes_fewer_chunks(
    merged_db: Path, tmp_path: Path, monkeypatch
):
    """Chunks are taken from a queue as workers become free, not dealt in turn: while one
    worker is held up by the first session, the other takes nearly every other chunk, and
    the output is still what one process writes."""
    one = import_bytes(merged_db, tmp_path, workers=1)
    with Store(merged_db) as store:
        first = select_sessions(store, all_sessions=True)[0]
    original = Store.session_rows

    def slow_first(self, session_id):
        if session_id == first:
            time.sleep(0.5)
        return original(self, session_id)

    monkeypatch.setattr(Store, "session_rows", slow_first)
    monkeypatch.setattr(fanout, "CHUNK_SESSIONS", 1)
    assert import_bytes(merged_db, tmp_path, workers=2) == one
    taken = sorted(fanout.LAST_RUN["taken"])
    assert taken[0] <= 2 and taken[1] >= sum(taken) - 2, taken


@pytest.mark.parametrize("hold", [0, 20_000, 200_000])
def test_a_worker_over_its_hold_budget_waits_then_streams(
    merged_db: Path, tmp_path: Path, monkeypatch, hold: int
):
    one = import_bytes(merged_db, tmp_path, workers=1)
    monkeypatch.setattr(fanout, "CHUNK_SESSIONS", 2)
    monkeypatch.setattr(fanout, "HOLD_BYTES", hold)
    assert import_bytes(merged_db, tmp_path, workers=2) == one


def test_the_hold_budget_bounds_what_a_worker_keeps(merged_db: Path, tmp_path: Path, monkeypatch):
    """With no budget a worker keeps at most one batch of events before it writes them (here
    a batch is one message's events); with a large one it maps whole chunks ahead."""
    monkeypatch.setattr(transcript, "BATCH_EVENTS", 1)
    one = import_bytes(merged_db, tmp_path, workers=1)
    per_message: dict[str, int] = {}
    for line in one.splitlines()[:-1]:
        message = json.loads(line).get("message_id")
        per_message[message] = per_message.get(message, 0) + 1
    monkeypatch.setattr(fanout, "CHUNK_SESSIONS", 4)
    monkeypatch.setattr(fanout, "HOLD_BYTES", 0)
    import_bytes(merged_db, tmp_path, workers=2)
    tight = fanout.LAST_RUN["most_held"]
    monkeypatch.setattr(fanout, "HOLD_BYTES", 1 << 30)
    import_bytes(merged_db, tmp_path, workers=2)
    loose = fanout.LAST_RUN["most_held"]
    assert tight <= max(per_message.values()) < loose


@pytest.mark.parametrize("batch", [1, 3, 10_000])
def test_the_batch_size_changes_no_byte(merged_db: Path, tmp_path: Path, monkeypatch, batch: int):
    """``session_events`` hands on events in batches of whole messages; how large they are
    decides only when events move on, never what is written."""
    default = import_bytes(merged_db, tmp_path, workers=1)
    monkeypatch.setattr(transcript, "BATCH_EVENTS", batch)
    assert import_bytes(merged_db, tmp_path, workers=1) == default
    assert import_bytes(merged_db, tmp_path, workers=2) == default


def test_output_that_is_not_a_file_gets_one_process(merged_db: Path):
    """Workers write to a shared file descriptor; an in-memory stream stays in one process."""
    outs = []
    for workers in (1, 2):
        out = io.BytesIO()
        fanout.LAST_RUN.clear()
        with Store(merged_db) as store:
            ids = select_sessions(store, all_sessions=True)
            import_sessions(store, ids, JsonlWriter(out), workers=workers)
        assert not fanout.LAST_RUN
        outs.append(out.getvalue())
    assert outs[0] == outs[1] and outs[0].count(b"\n") > 100


def test_what_was_read_before_a_damaged_session_is_written_first(
    merged_db: Path, tmp_path: Path, monkeypatch
):
    """As in one process: the sessions before the damage, in order, then the error."""
    monkeypatch.setattr(fanout, "CHUNK_SESSIONS", 1)
    written = []
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        error = InputError("cannot read opencode.db: database disk image is malformed")
        monkeypatch.setattr(Store, "session_rows", _failing_session_rows(ids[12], error))
        for workers in (1, 2, 3):
            path = tmp_path / f"partial-{workers}.jsonl"
            with open(path, "wb") as out, pytest.raises(InputError):
                import_sessions(store, ids, JsonlWriter(out, buffered=True), workers=workers)
            written.append(path.read_bytes())
    assert written[0].count(b"\n") > 10
    assert written[1] == written[0] and written[2] == written[0]
    sessions = [json.loads(line)["session_id"] for line in written[0].splitlines()]
    assert ids[12] not in sessions and sessions[-1] in ids[:12]


def test_an_output_error_in_a_worker_is_one_line(merged_db: Path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    for workers in ("1", "2"):
        env = {**os.environ, "OPENCODE_EVENTS_WORKERS": workers}
        result = subprocess.run(
            [*CLI, "import", "--all", "--raw", "--db", str(merged_db), "-o", "/dev/full"],
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 2
        assert result.stderr == b"error: cannot write /dev/full: No space left on device\n"


def test_cli_uses_workers_when_told(merged_db: Path):
    def run(workers: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "OPENCODE_EVENTS_WORKERS": workers}
        return subprocess.run(
            [*CLI, "import", "--all", "--db", str(merged_db)],
            capture_output=True,
            env=env,
            timeout=120,
        )

    one, two = run("1"), run("2")
    assert one.returncode == two.returncode == 0
    assert one.stderr == two.stderr == b""
    assert one.stdout == two.stdout


def test_the_queue_gives_every_chunk_number_once_in_order():
    """More numbers than a pipe holds: fed as it drains, each read a whole number."""
    dealer = fanout._Dealer(40_000, 1, 0)
    try:
        os.set_blocking(dealer.queue_out, False)
        got = bytearray()
        while True:
            try:
                data = os.read(dealer.queue_out, 1 << 16)
            except BlockingIOError:
                dealer._feed()  # drained: fed again
                continue
            if not data:
                break  # every number in and the queue closed
            got += data
        assert list(struct.unpack(f"<{len(got) // 4}I", got)) == list(range(40_000))
    finally:
        dealer.close()


def test_how_many_workers(monkeypatch):
    monkeypatch.delenv("OPENCODE_EVENTS_WORKERS", raising=False)
    assert fanout.workers_for(fanout.MIN_SESSIONS - 1) == 1
    assert 1 <= fanout.workers_for(10_000) <= 4
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "3")
    assert fanout.workers_for(1) == 3
    monkeypatch.setenv("OPENCODE_EVENTS_WORKERS", "1")
    assert fanout.workers_for(10_000) == 1


# ------------------------------------------------------------------------------ failures


def _failing_session_rows(session_to_fail: str, error: BaseException):
    original = Store.session_rows

    def session_rows(self, session_id):
        if session_id == session_to_fail:
            raise error
        return original(self, session_id)

    return session_rows


@pytest.mark.parametrize("position", [0, -1, 17])
def test_a_database_error_in_a_worker_is_the_commands_error(
    merged_db: Path, tmp_path: Path, monkeypatch, position: int
):
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        error = InputError("cannot read opencode.db: database disk image is malformed")
        monkeypatch.setattr(Store, "session_rows", _failing_session_rows(ids[position], error))
        with (
            open(tmp_path / "out.jsonl", "wb") as out,
            pytest.raises(InputError, match="disk image is malformed"),
        ):
            import_sessions(store, ids, JsonlWriter(out), workers=2)


def test_a_worker_killed_without_a_word_stops_the_import(
    merged_db: Path, tmp_path: Path, monkeypatch
):
    """The other workers wait for no token the dead one would have passed on."""
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        original = Store.session_rows

        def killed(self, session_id):
            if session_id == ids[5]:
                os.kill(os.getpid(), signal.SIGKILL)  # in the worker that took it
            return original(self, session_id)

        monkeypatch.setattr(Store, "session_rows", killed)
        monkeypatch.setattr(fanout, "CHUNK_SESSIONS", 1)
        with (
            open(tmp_path / "out.jsonl", "wb") as out,
            pytest.raises(InputError, match="an import worker stopped .killed by signal 9"),
        ):
            import_sessions(store, ids, JsonlWriter(out), workers=3)


def test_ctrl_c_in_a_worker_stops_the_import(merged_db: Path, tmp_path: Path, monkeypatch):
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        monkeypatch.setattr(
            Store, "session_rows", _failing_session_rows(ids[5], KeyboardInterrupt())
        )
        with open(tmp_path / "out.jsonl", "wb") as out, pytest.raises(KeyboardInterrupt):
            import_sessions(store, ids, JsonlWriter(out), workers=2)


def test_a_bug_in_a_worker_is_not_hidden(merged_db: Path, tmp_path: Path, monkeypatch):
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        monkeypatch.setattr(
            Store, "session_rows", _failing_session_rows(ids[3], ValueError("boom"))
        )
        with open(tmp_path / "out.jsonl", "wb") as out, pytest.raises(RuntimeError, match="boom"):
            import_sessions(store, ids, JsonlWriter(out), workers=2)


def _start_blocked(db: Path) -> subprocess.Popen:
    """An import whose workers soon block on a full pipe (with --raw the output is larger
    than a pipe holds), after its first line has been read."""
    env = {**os.environ, "OPENCODE_EVENTS_WORKERS": "2"}
    proc = subprocess.Popen(
        [*CLI, "import", "--all", "--raw", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b'{"kind"')
    return proc


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_a_closed_pipe_ends_quietly_with_141(merged_db: Path):
    proc = _start_blocked(merged_db)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert stderr == b""


def test_no_worker_is_left_behind(merged_db: Path, tmp_path: Path):
    import_bytes(merged_db, tmp_path, workers=3)
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # every worker was reaped


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_workers_stop_when_the_command_is_killed(merged_db: Path):
    proc = _start_blocked(merged_db)
    workers = _children(proc.pid)
    assert workers
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM  # ended as by Ctrl-C, status 143
    assert proc.stdout is not None
    proc.stdout.close()  # a worker blocked on the pipe gets EPIPE; the others see no parent
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived the command"
        time.sleep(0.05)


def test_a_worker_that_cannot_open_the_database(merged_db: Path, tmp_path: Path, monkeypatch):
    """Workers failing at once (the token must not meet a pipe nobody reads any more)."""

    def reopen(self, connect=None):
        raise InputError("cannot read opencode.db: unable to open database file")

    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        monkeypatch.setattr(Store, "reopen", reopen)
        for _ in range(5):
            with (
                open(tmp_path / "out.jsonl", "wb") as out,
                pytest.raises(InputError, match="unable to open"),
            ):
                import_sessions(store, ids, JsonlWriter(out), workers=2)


def test_a_large_import_asks_for_a_padded_heap(merged_db: Path, tmp_path: Path, monkeypatch):
    """From ``MIN_SESSIONS`` sessions on, the import asks malloc to grow its heap in large
    steps (fewer page faults); a small one leaves malloc alone."""
    from opencode_events.pipeline import normalize as pipeline

    calls = []
    monkeypatch.setattr(pipeline, "grow_heap_in_large_steps", lambda: calls.append(1))
    import_bytes(merged_db, tmp_path, workers=1)
    assert calls == []  # fewer sessions than MIN_SESSIONS
    monkeypatch.setattr(fanout, "MIN_SESSIONS", 2)
    import_bytes(merged_db, tmp_path, workers=1)
    assert calls == [1]


@pytest.mark.parametrize("failure", [OSError("no libc"), AttributeError("no mallopt")])
def test_the_heap_request_never_fails(monkeypatch, failure: Exception):
    """Where there is no glibc (no mallopt, no C library to load) the request does nothing."""
    import ctypes

    from opencode_events.pipeline.normalize import grow_heap_in_large_steps

    def unavailable(*_args: object) -> None:
        raise failure

    monkeypatch.setattr(ctypes, "CDLL", unavailable)
    grow_heap_in_large_steps()  # no exception


def test_the_heap_request_never_fails_without_ctypes(monkeypatch):
    """A Python built without ctypes (minimal or embedded builds) imports as usual."""
    from opencode_events.pipeline.normalize import grow_heap_in_large_steps

    monkeypatch.setitem(sys.modules, "ctypes", None)  # `import ctypes` raises ImportError
    grow_heap_in_large_steps()  # no exception


@pytest.mark.parametrize("workers", [1, 2])
def test_a_database_failing_mid_session_keeps_the_whole_messages_before(
    merged_db: Path, tmp_path: Path, monkeypatch, workers: int
):
    """A session read as it streams can fail part-way (a damaged page): what was written before
    the error is the same whatever the batch size, i.e. every message mapped whole, as if the
    events went out one message at a time; the failing message's own events are dropped."""
    with Store(merged_db) as store:
        ids = select_sessions(store, all_sessions=True)
        # The session with the most parts fails two part rows before its end.
        target = max(ids, key=lambda sid: len(list(store.session_rows(sid)[1])))
    original = Store.session_rows

    def failing_rows(self, session_id):
        messages, parts = original(self, session_id)
        if session_id != target:
            return messages, parts
        rows = list(parts)

        def stream():
            for index, row in enumerate(rows):
                if index == len(rows) - 2:
                    raise InputError("database disk image is malformed")
                yield row

        return messages, stream()

    monkeypatch.setattr(Store, "session_rows", failing_rows)
    if workers > 1:
        monkeypatch.setattr(fanout, "MIN_SESSIONS", 2)

    def written(batch: int) -> bytes:
        monkeypatch.setattr(transcript, "BATCH_EVENTS", batch)
        out_path = tmp_path / f"out-{workers}-{batch}.jsonl"
        with (
            Store(merged_db) as store,
            open(out_path, "wb") as out,
            pytest.raises(InputError, match="malformed"),
        ):
            import_sessions(store, ids, JsonlWriter(out, buffered=True), workers=workers)
        return out_path.read_bytes()

    one_at_a_time = written(1)
    assert written(256) == one_at_a_time
    # Events of the failing session itself were written (the test would pass vacuously if not).
    assert target.encode() in one_at_a_time


def test_workers_stamp_tags_and_parents_as_one_process_does(merged_db: Path, tmp_path: Path):
    tags = {"machine": "ci-7"}
    one = import_bytes(merged_db, tmp_path, workers=1, tags=tags)
    assert one == import_bytes(merged_db, tmp_path, workers=3, tags=tags)
    events = [json.loads(line) for line in one.splitlines()]
    assert all(e["tags"] == tags for e in events)
    assert any("parent_session_id" in e for e in events)  # the merged stores hold subagents
