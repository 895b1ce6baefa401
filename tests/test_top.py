"""`top`: the board's figures, a refresh that reads only what changed, and the screen in a
real pseudo-terminal (80 columns, q quits, the store written while it watches)."""

from __future__ import annotations

import io
import json
import os
import re
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from opencode_events.reports.sessions import summarize
from opencode_events.reports.top import TopBoard, week_start
from opencode_events.store.sqlite import Store
from opencode_events.store.watch import StoreWatch
from tests.stores import LOCALES_WITHOUT_UTF8, in_locale, with_a_title
from tests.test_follow import replay

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))


def _last_write(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as conn:
        return max(
            conn.execute(f"SELECT coalesce(max(time_updated), 0) FROM {t}").fetchone()[0]
            for t in ("session", "message", "part")
        )


@pytest.mark.parametrize("name", STORES)
def test_each_row_says_what_sessions_says(name: str) -> None:
    db = SAMPLES / name / "opencode.db"
    now = _last_write(db) + 60_000
    top = TopBoard(db, watch=StoreWatch(db))
    assert top.refresh(now)
    board = top.board()
    with Store(db) as store:
        tops = {r.id: r for r in store.sessions(top_level=True)}
        summaries = {s.id: s for s in summarize(store, list(tops.values()), now_ms=now)}
    assert {r.session_id for r in board.rows} <= set(tops)
    for row in board.rows:
        summary = summaries[row.session_id]
        assert (row.cost, row.turns, row.state) == (
            summary.total_cost,
            summary.turns,
            summary.state,
        )
        assert row.tokens == summary.total_tokens
        assert row.forked == summary.forked  # its cost includes what it copied: marked *


def test_today_and_this_week_are_usage_by_day() -> None:
    db = SAMPLES / "fork" / "opencode.db"
    now = _last_write(db) + 60_000
    top = TopBoard(db)
    top.refresh(now)
    board = top.board()
    with Store(db) as store:
        from opencode_events.reports.statusline import day_bounds, spend_between

        assert board.today == spend_between(store, *day_bounds(now, None))
        assert board.week == spend_between(store, week_start(now, None), day_bounds(now, None)[1])
    assert board.today > 0


def _append_reply(db: Path, session_id: str, cost: float, when: int) -> None:
    conn = sqlite3.connect(db)
    mid = f"msg_{(when << 12) & ((1 << 48) - 1):012x}zzzzzzzzzzzzzz"
    data = {"role": "assistant", "cost": cost, "time": {"created": when, "completed": when + 5}}
    conn.execute(
        "INSERT INTO message (id, session_id, time_created, time_updated, data) "
        "VALUES (?, ?, ?, ?, ?)",
        (mid, session_id, when, when + 5, json.dumps(data)),
    )
    conn.execute(
        "UPDATE session SET cost = cost + ?, time_updated = ? WHERE id = ?",
        (cost, when, session_id),
    )
    conn.commit()
    conn.close()


def test_a_refresh_reads_what_changed_not_the_store(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    now = _last_write(db) + 1000
    top = TopBoard(db)
    assert top.refresh(now)
    first = top.rows_read
    assert not top.refresh(now) and top.reads == 1  # unchanged: the store is not opened
    root = top.board().rows[0].session_id
    before = top.board().rows[0].cost
    _append_reply(db, root, 0.5, now)
    assert top.refresh(now + 10)
    row = top.board().rows[0]
    assert row.cost == pytest.approx(before + 0.5) and top.board().today >= 0.5
    assert top.rows_read - first <= 4  # the new row and the session's newest messages


def test_rows_an_undo_deleted_and_new_rows_took_the_rowids_of_are_read(tmp_path: Path) -> None:
    """SQLite gives the newest rowids again once the newest rows are deleted: an undo and a
    new prompt between two looks left `messages_after` nothing new to read (the session
    idle, the undone reply's cost in today's spend, the new one's never)."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    now = _last_write(db) + 1000
    top = TopBoard(db)
    root = (top.refresh(now), top.board().rows[0].session_id)[1]
    _append_reply(db, root, 0.5, now)
    assert top.refresh(now + 10)
    with sqlite3.connect(db) as conn:  # the undo: the reply deleted, its cost taken back
        (undone,) = conn.execute("SELECT max(rowid) FROM message").fetchone()
        conn.execute("DELETE FROM message WHERE rowid = ?", (undone,))
        conn.execute("UPDATE session SET cost = cost - 0.5 WHERE id = ?", (root,))
    conn.close()
    _append_reply(db, root, 0.25, now + 20)  # the new reply, at the undone one's rowid
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT max(rowid) FROM message").fetchone() == (undone,)
    conn.close()
    assert top.refresh(now + 30)
    fresh = TopBoard(db)
    fresh.refresh(now + 30)
    assert (top.board().today, top.board().week) == (fresh.board().today, fresh.board().week)
    assert top.board().rows[0].cost == fresh.board().rows[0].cost


def _pty(argv: list[str], cols: int = 80, rows: int = 24, term: str = "xterm-256color"):
    """``argv`` on a new pseudo-terminal of that size, its controlling terminal (so keys
    such as Ctrl-C are signals, as in a real one); the process and the master's fd."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "TERM": term},
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # after setsid
    )
    os.close(slave)
    return proc, master


def _read_until(master: int, proc, pattern: bytes, timeout: float = 20) -> bytes:
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                output += os.read(master, 65536)
            except OSError:
                break
            if re.search(pattern, _plain(output)):
                return output
        elif proc.poll() is not None:
            break
    raise AssertionError(f"never saw {pattern!r}: {_plain(output)[-2000:]!r}")


ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def _plain(output: bytes) -> bytes:
    return ANSI.sub(b"", output)


@pytest.mark.parametrize("interval", ["nan", "inf", "1e308"])
def test_an_interval_select_cannot_wait_is_a_usage_error(interval: str) -> None:
    """``--interval`` NaN, infinite or past a day is refused as 0 is (exit 2, one line):
    in a terminal ``select`` raised on the first wait for a key, a traceback."""
    db = str(SAMPLES / "task" / "opencode.db")
    proc, master = _pty([*CLI, "top", "--db", db, "--interval", interval])
    try:
        out = _read_until(master, proc, rb"error: Invalid value for '--interval'")
        assert proc.wait(timeout=20) == 2
        assert b"Traceback" not in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_top_in_a_terminal_shows_the_store_as_it_is_written_and_q_quits(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    proc, master = _pty([*CLI, "top", "--db", str(db), "--interval", "0.2"])
    writer = None
    try:
        _read_until(master, proc, rb"store not readable: no OpenCode database at")
        writer = replay(SAMPLES / "task" / "opencode.db", db, delay=0.01)
        writer.wait(timeout=60)
        out = _read_until(master, proc, rb"\$0\.0206\+")  # cost with its subagent
        frame = _plain(out).split(b"opencode-events top")[-1].decode()
        assert "dd8083e0" in frame and "idle" in frame
        os.write(master, b"q")
        assert proc.wait(timeout=10) == 0
        rest = b""
        with_timeout = time.monotonic() + 2
        while time.monotonic() < with_timeout:
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                break
            try:
                rest += os.read(master, 65536)
            except OSError:
                break
        assert b"\x1b[?1049l" in out + rest  # the terminal's own screen is back
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_on_a_dumb_terminal_top_prints_one_screen(tmp_path: Path) -> None:
    """``TERM=dumb`` (Emacs' shell): rich draws nothing of a full screen there until it
    stops, so the board stayed blank until q; it is printed once, as into a pipe."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    proc, master = _pty([*CLI, "top", "--db", str(db), "--interval", "0.2"], term="dumb")
    try:
        out = _read_until(master, proc, rb"dd8083e0", timeout=10)
        assert proc.wait(timeout=10) == 0
        assert b"\x1b[?1049h" not in out and b"q quits" not in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.mark.parametrize(
    ("key", "code"), [(b"\x03", 130), (b"\x1c", 131)], ids=["ctrl-c", "ctrl-\\"]
)
def test_top_ended_by_a_key_that_signals_gives_the_terminal_back(tmp_path: Path, key, code):
    """Ctrl-\\ (SIGQUIT) dumped core, leaving the terminal in cbreak mode on the other
    screen; it now ends `top` as Ctrl-C does."""
    import termios

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    proc, master = _pty([*CLI, "top", "--db", str(db), "--interval", "0.2"])
    try:
        out = _read_until(master, proc, rb"opencode-events top")
        os.write(master, key)
        assert proc.wait(timeout=10) == code
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                break
            try:
                out += os.read(master, 65536)
            except OSError:
                break
        assert b"\x1b[?1049l" in out  # the terminal's own screen is back
        lflag = termios.tcgetattr(master)[3]
        assert lflag & termios.ICANON and lflag & termios.ECHO  # and its line mode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


# A shell with job control, as small as it gets: runs its arguments in a process group of
# their own in the foreground, says when Ctrl-Z stopped them and in what mode the terminal
# was left, continues them at a line typed (`fg`), and says how they exited.
_JOB_SHELL = """
import os, signal, sys, termios
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpgrp())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
try:
    os.setpgid(pid, pid)
except PermissionError:  # the child has set it and gone on to exec
    pass
os.tcsetpgrp(0, pid)
_, status = os.waitpid(pid, os.WUNTRACED)
if os.WIFSTOPPED(status):
    os.tcsetpgrp(0, os.getpgrp())
    lflag = termios.tcgetattr(0)[3]
    line = lflag & termios.ICANON and lflag & termios.ECHO
    print("STOPPED", "line-mode" if line else "key-mode", flush=True)
    sys.stdin.readline()
    os.tcsetpgrp(0, pid)
    os.kill(pid, signal.SIGCONT)
    _, status = os.waitpid(pid, 0)
print("EXIT", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_ctrl_z_gives_the_terminal_back_and_fg_brings_the_board_again(tmp_path: Path) -> None:
    """Stopped as it was, `top` left the shell's prompt on its own screen, the cursor hidden
    and the terminal taking keys one at a time; as `less` does, it now gives the terminal
    back before it stops and takes it again when continued."""
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    argv = [sys.executable, "-c", _JOB_SHELL, "-m", "opencode_events", "top", "--db", str(db)]
    proc, master = _pty([*argv, "--interval", "0.2"])
    try:
        _read_until(master, proc, rb"opencode-events top")
        os.write(master, b"\x1a")  # Ctrl-Z
        out = _read_until(master, proc, rb"STOPPED \S+")
        stopped = out[out.rindex(b"\x1a") if b"\x1a" in out else 0 :]
        assert b"STOPPED line-mode" in _plain(out)
        assert b"\x1b[?1049l" in stopped and b"\x1b[?25h" in stopped  # its screen, cursor
        os.write(master, b"\n")  # fg
        again = _read_until(master, proc, rb"opencode-events top")  # the board at once
        assert b"\x1b[?1049h" in again
        os.write(master, b"q")
        _read_until(master, proc, rb"EXIT 0")
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_at_80_columns_every_line_fits() -> None:
    done = subprocess.run(
        [*CLI, "top", "--db", str(SAMPLES / "task" / "opencode.db"), "--once"],
        capture_output=True,
        timeout=30,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[0].startswith("opencode-events top  today $")
    assert all(len(line) <= 80 for line in lines), lines
    (row,) = [line for line in lines if "dd8083e0" in line]
    assert row.split()[0] == "idle" and row.endswith("$0.0206+")


def test_a_busy_session_says_what_it_runs_and_a_silent_one_turns_stale() -> None:
    db = SAMPLES / "sigint" / "opencode.db"  # killed while its bash call ran
    last = _last_write(db)
    top = TopBoard(db)
    top.refresh(last + 1000)
    (row,) = top.board().rows
    assert (row.state, row.running) == ("busy", "bash") and isinstance(row.running_since, int)
    top.refresh(last + 11 * 60_000)  # nothing written since: the clock alone decides
    (row,) = top.board().rows
    assert (row.state, row.running) == ("stale", None) and top.reads == 1


@pytest.mark.parametrize("sample", ["sigint", "task"])
def test_a_session_written_only_in_its_parts_or_a_subagent_is_busy(
    sample: str, tmp_path: Path
) -> None:
    """A long tool call streams its output into its part, a subagent writes its own rows:
    neither touches the session row or the reply's, and the session is still at work
    (as statusline and sessions judge it)."""
    from opencode_events.reports.statusline import take_glance

    db = tmp_path / "opencode.db"
    shutil.copy(SAMPLES / sample / "opencode.db", db)
    last = _last_write(db)
    with sqlite3.connect(db) as conn:
        (root,) = conn.execute("SELECT id FROM session WHERE parent_id IS NULL").fetchone()
        (writer,) = conn.execute(  # the subagent where there is one, else the session
            "SELECT id FROM session ORDER BY parent_id IS NULL LIMIT 1"
        ).fetchone()
        mid, data = conn.execute(
            "SELECT id, data FROM message WHERE session_id = ? "
            "ORDER BY time_created DESC, id DESC LIMIT 1",
            (root,),
        ).fetchone()
        reply = json.loads(data)
        reply["time"].pop("completed", None)  # the session's reply in flight
        reply.pop("finish", None)
        conn.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(reply), mid))
        conn.execute(  # its newest part written 15 minutes on: output streamed
            "UPDATE part SET time_updated = ? WHERE id = (SELECT id FROM part "
            "WHERE session_id = ? ORDER BY time_updated DESC LIMIT 1)",
            (last + 15 * 60_000, writer),
        )
    now = last + 20 * 60_000  # the rows 20 minutes old, the part 5
    top = TopBoard(db)
    top.refresh(now)
    (row,) = [r for r in top.board().rows if r.session_id == root]
    with Store(db) as store:
        glance = take_glance(store, root, now_ms=now)
    assert row.state == glance.state == "busy"
    top.refresh(last + 26 * 60_000)  # and stale once that part is 11 minutes old
    (row,) = [r for r in top.board().rows if r.session_id == root]
    assert row.state == "stale"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.db", "error: no OpenCode database at missing.db\n"),
        (
            "README.md",
            "error: README.md is not a readable SQLite database (file is not a database)\n",
        ),
    ],
)
def test_once_on_a_store_it_cannot_read_is_an_error(name, message) -> None:
    done = subprocess.run(
        [*CLI, "top", "--db", name, "--once"], capture_output=True, timeout=30, cwd=ROOT
    )
    assert (done.returncode, done.stdout, done.stderr.decode()) == (2, b"", message)


def test_the_live_view_says_why_it_cannot_read_the_store(tmp_path: Path) -> None:
    from opencode_events.output.tables import top_screen

    path = tmp_path / "opencode.db"
    path.write_bytes(b"not a database, but a file" * 100)
    top = TopBoard(path)
    top.refresh(force=True)
    board = top.board()
    assert not board.readable and "is not a readable SQLite database" in (board.problem or "")
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(top_screen(board, 0, width=80))
    text = console.export_text()
    assert "store not readable: " in text and "(file is not a database)" in text
    assert "no sessions" not in text and all(len(line) <= 80 for line in text.splitlines())


def test_the_live_view_says_when_there_is_no_database_until_one_comes(tmp_path: Path) -> None:
    """A path with no file is said (a mistyped --db is not "no sessions yet"); a file that
    comes is read at the next look, and one that goes is said again."""
    from opencode_events.output.tables import top_screen

    path = tmp_path / "opencode.db"
    top = TopBoard(path)

    def screen() -> str:
        console = Console(width=100, record=True, file=io.StringIO())
        console.print(top_screen(top.board(), 0, width=100))
        return " ".join(console.export_text().split())  # the reason wraps, never cut

    assert not top.refresh()
    assert not top.readable and f"store not readable: no OpenCode database at {path}" in screen()
    assert "no sessions" not in screen()
    shutil.copyfile(ROOT / "samples" / "task" / "opencode.db", path)
    assert top.refresh() and top.readable and top.board().rows
    assert "store not readable" not in screen()
    path.unlink()
    assert not top.refresh()
    assert not top.readable and "no OpenCode database at" in screen()
    assert top.board().rows  # the last rows stay on the board meanwhile


def test_at_80_columns_a_busy_board_keeps_the_session_ids() -> None:
    """With the `doing` column, the session's id kept its first 3 characters at 80 columns:
    the agent column goes instead, and the model is cut shorter."""
    from opencode_events.output.tables import top_screen
    from opencode_events.reports.top import Board, BoardRow

    busy = BoardRow(
        session_id="ses_dba32f00aaaa",
        title="Fix the failing tests in the parser",
        agent="build",
        model="claude-sonnet-4-5",
        state="busy",
        running="bash",
        running_since=0,
        turns=3,
        tokens=48_200,
        context_tokens=18_200,
        cost=0.0623,
        subagents=1,
    )
    idle = BoardRow(session_id="ses_dd805feb0000", agent="build", model="gpt-5", state="idle")
    board = Board(rows=[busy, idle], today=1.24, week=18.2, path="x")
    for width, agent_shown in ((80, False), (100, True)):
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(top_screen(board, 12_000, width=width))
        lines = console.export_text().splitlines()
        assert all(len(line) <= width for line in lines), lines
        (row,) = [line for line in lines if line.startswith("busy")]
        assert "dba32f00" in row and "bash 12.0s" in row and "$0.0623+" in row, row
        assert ("agent" in lines[2]) is agent_shown, lines[2]


def test_a_message_of_no_session_counts_in_the_spend_and_makes_no_row(tmp_path: Path) -> None:
    """A damaged message row whose session_id is NULL (the schema says NOT NULL; a file
    edited past it may not): its cost counts today, and the board has no row of no session
    (it once ended `top` in a traceback)."""
    import sqlite3

    db = tmp_path / "opencode.db"
    shutil.copyfile(ROOT / "samples" / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = replace(sql, '`session_id` text NOT NULL', "
        "'`session_id` text') WHERE name = 'message'"
    )
    conn.commit()
    conn.close()
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE message SET session_id = NULL WHERE rowid = (SELECT max(rowid) FROM message)"
    )
    conn.commit()
    conn.close()
    top = TopBoard(db)
    top.refresh(force=True)
    board = top.board()
    assert top.readable, top.problem
    assert board.rows and all(isinstance(row.session_id, str) for row in board.rows)
    done = subprocess.run(
        [*CLI, "top", "--db", str(db), "--once"], capture_output=True, timeout=30, cwd=ROOT
    )
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr


def _board_of(rows: int, *, busy: bool, marks: bool = False):
    from opencode_events.reports.top import Board, BoardRow

    made = [
        BoardRow(
            session_id=f"ses_{n:08x}aaaa",
            title="Fix the failing tests in the parser",
            agent="build",
            model="claude-sonnet-4-5",
            state="busy" if busy and n == 0 else "idle",
            running="bash" if busy and n == 0 else None,
            running_since=0 if busy and n == 0 else None,
            turns=3,
            tokens=48_200,
            context_tokens=18_200,
            cost=0.0623 + n,
            subagents=1,
            undone_cost=0.5 if marks and n == 1 else 0.0,
            forked=marks and n == 2,
        )
        for n in range(rows)
    ]
    return Board(rows=made, today=1.24, week=18.2, path="x")


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("width", [40, 48, 56, 60, 64, 72, 80, 96, 120, 200])
def test_every_width_keeps_each_rows_id_and_cost_within_its_lines(width: int, busy: bool):
    """A narrow tmux split: columns go (agent, model, context, tokens, turns) before the
    session's id and its cost, the figure someone capping spend watches."""
    from opencode_events.output.tables import money, top_screen

    board = _board_of(3, busy=busy)
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(top_screen(board, 12_000, width=width))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), lines
    for row in board.rows:
        (line,) = [line for line in lines if row.session_id[4:12] in line]
        assert line.rstrip().endswith(money(row.cost) + "+"), line


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("width", [40, 48, 56, 60, 64, 72, 80, 96, 120])
def test_the_agent_and_model_never_cost_the_title_its_first_characters(width, busy):
    """At 60 columns the title was cut to a bare `…` while the model column stayed: in a
    tmux split the title is what tells the sessions apart. The agent and the model go
    before the title has less than a dozen characters; the figures stay while the id fits."""
    from opencode_events.output.tables import top_screen

    board = _board_of(3, busy=busy)
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(top_screen(board, 12_000, width=width))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.startswith("state")).split()
    for row in board.rows:
        (line,) = [line for line in lines if row.session_id[4:12] in line]
        title = line.split(row.session_id[4:12], 1)[1].lstrip().split("  ")[0]
        if "agent" in header or "model" in header:
            assert len(title) >= 12, line
    if width == 60 and not busy:
        assert "model" not in header and title.startswith("Fix the fai")


@pytest.mark.parametrize("height", [3, 5, 6, 8, 12, 24])
@pytest.mark.parametrize("width", [40, 80])
@pytest.mark.parametrize("marks", [False, True], ids=["plain", "marks"])
@pytest.mark.parametrize("readable", [True, False], ids=["readable", "unreadable"])
def test_the_screen_never_draws_more_lines_than_the_terminal_has(height, width, marks, readable):
    """The keys line and the marks' explanations at the foot stay on the screen, and so
    they do under why the store cannot be read (wrapped, never cut: its lines counted)."""
    from opencode_events.output.tables import top_screen

    board = _board_of(30, busy=True, marks=marks)
    if not readable:
        board.readable = False
        board.problem = (
            "cannot read /home/someone/.local/share/opencode/opencode.db: "
            "database disk image is malformed"
        )
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(top_screen(board, 12_000, width=width, height=height))
    lines = console.export_text().splitlines()
    least = 6 + (0 if readable else 4)  # header, columns, a row, keys (and the reason)
    assert len(lines) <= max(height, least), lines
    assert any(line.startswith("q quits") for line in lines), lines


def test_top_once_says_no_keys_it_does_not_read() -> None:
    done = subprocess.run(
        [*CLI, "top", "--db", str(SAMPLES / "task" / "opencode.db"), "--once"],
        capture_output=True,
        timeout=30,
        cwd=ROOT,
    )
    assert done.returncode == 0 and b"q quits" not in done.stdout
    assert b"with subagents' (+)" in done.stdout


@pytest.mark.parametrize("locale", LOCALES_WITHOUT_UTF8)
def test_top_once_in_a_locale_without_utf8_is_a_screen_aligned(locale, tmp_path) -> None:
    """A title in CJK (or an emoji, or the board's own `…`) where stdout's encoding lacks
    it: a `?` for each column it takes, no traceback; the columns stay where they were."""
    db = with_a_title(tmp_path / "opencode.db", "修复失败的测试 🚀 tests")
    done = subprocess.run(
        [*CLI, "top", "--db", str(db), "--once"],
        capture_output=True,
        timeout=30,
        cwd=ROOT,
        env=in_locale(locale),
    )
    assert done.returncode == 0 and not done.stderr, done.stderr.decode()
    lines = done.stdout.decode("ascii").splitlines()
    (head,) = [line for line in lines if line.startswith("state")]
    (row,) = [line for line in lines if "dd8083e0" in line]
    assert "dd8083e0 ??????" in row and row.endswith("$0.0206+")
    assert len(row) == len(head), (head, row)


def test_the_full_screen_in_a_locale_without_utf8_writes_what_it_can() -> None:
    from rich.text import Text

    from opencode_events.output.pretty import FullScreen

    class Terminal(io.BytesIO):
        def isatty(self) -> bool:
            return True

    written = Terminal()
    out = io.TextIOWrapper(written, encoding="ascii")
    screen = FullScreen(out)
    screen.show(Text("修复 🚀 …"))
    screen.close()
    out.flush()
    assert b"???? ?? ?" in written.getvalue()


def test_keys_that_cannot_take_the_terminal_leave_no_pipe_open(monkeypatch) -> None:
    """``_Keys`` opens its signal pipe before it puts the terminal in cbreak mode: a
    terminal that refuses (termios.error, an fd gone) must not leave the pipe's fds open."""
    import termios
    import tty

    from opencode_events.cli import top as top_cli

    opened: list[int] = []
    real_pipe = os.pipe

    def pipe() -> tuple[int, int]:
        fds = real_pipe()
        opened.extend(fds)
        return fds

    def refused(_fd: int) -> None:
        raise termios.error(25, "Inappropriate ioctl for device")

    monkeypatch.setattr(termios, "tcgetattr", lambda fd: [0, 0, 0, 0, 0, 0, []])
    monkeypatch.setattr(tty, "setcbreak", refused)
    monkeypatch.setattr(os, "pipe", pipe)

    class Stdin:
        def fileno(self) -> int:
            return 0

    monkeypatch.setattr(sys, "stdin", Stdin())
    with pytest.raises(termios.error):
        top_cli._Keys()
    assert opened
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed


def test_a_ctrl_z_noted_while_the_last_was_answered_is_forgotten_at_fg(monkeypatch) -> None:
    """A second Ctrl-Z while the screen was being given back stayed in the signal pipe:
    `fg` brought the board back and it stopped again at once."""
    import pty

    from opencode_events.cli import top as top_cli

    master, slave = pty.openpty()
    try:
        monkeypatch.setattr(sys, "stdin", os.fdopen(slave, "rb", buffering=0, closefd=False))
        keys = top_cli._Keys()
        try:
            keys.note_ctrl_z()
            assert top_cli.CTRL_Z in keys.pressed(0)
            keys.note_ctrl_z()  # pressed again before the stop
            keys.forget_ctrl_z()  # what the loop does after `fg`
            assert keys.pressed(0) == ""
        finally:
            keys.restore()
            keys.close()
    finally:
        os.close(master)
        os.close(slave)


def test_a_ctrl_z_ignored_when_top_started_stays_ignored() -> None:
    """Started with SIGTSTP ignored (no job control asked for it), `top` leaves it so, as
    `less` and `vim` do, rather than stopping itself at a Ctrl-Z."""
    import signal

    from opencode_events.cli import top as top_cli

    class Keys:
        def note_ctrl_z(self, *_args: object) -> None:
            raise AssertionError("noted")

    before = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    try:
        with top_cli._ctrl_z_noted(Keys()):  # type: ignore[arg-type]
            assert signal.getsignal(signal.SIGTSTP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTSTP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTSTP, before)


def test_each_screen_closed_leaves_nothing_for_exit() -> None:
    """An open `FullScreen` is closed at the interpreter's exit; one closed (at a Ctrl-Z,
    before the next one) is let go: none piled up over Ctrl-Z and fg, each holding its
    console and its last board."""
    from opencode_events.output import pretty

    screens = [pretty.FullScreen(io.StringIO()) for _ in range(3)]
    assert set(pretty._OPEN_SCREENS.values()) >= set(screens)
    for screen in screens:
        screen.close()
    assert not set(pretty._OPEN_SCREENS.values()) & set(screens)
