"""``statusline``: its figures are the other reports' figures, read cheaply.

Every real capture's store is read by ``statusline`` and by the report that owns each
figure: ``sessions`` (the cost with subagents), ``usage --by day`` (today's spend),
``context`` (the last inference's prompt). The state is checked on the killed run
(``samples/sigint``) at times around its last write.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_events.cli.statusline import FORMAT_HELP
from opencode_events.reports.context import context_report
from opencode_events.reports.sessions import summarize
from opencode_events.reports.statusline import (
    DEFAULT_FORMAT,
    ESCAPES,
    FIELDS,
    check_format,
    current_session,
    day_bounds,
    render,
    spend_between,
    take_glance,
    values,
)
from opencode_events.reports.usage import store_usage
from opencode_events.store.open import every_session
from opencode_events.store.sqlite import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CLI = [sys.executable, "-m", "opencode_events"]
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))


def _last_write(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        return max(
            conn.execute(f"SELECT coalesce(max(time_updated), 0) FROM {table}").fetchone()[0]
            for table in ("session", "message", "part")
        )
    finally:
        conn.close()


@pytest.mark.parametrize("name", STORES)
def test_the_figures_are_the_reports_figures(name: str) -> None:
    db = SAMPLES / name / "opencode.db"
    late = _last_write(db) + 60_000  # a minute after the capture: at rest
    with Store(db) as store:
        glance = take_glance(store, now_ms=late, tz=UTC)
        row = store.session(glance.session_id)
        (summary,) = summarize(store, [row], now_ms=late)  # folded, as the statusline's cost
        (own,) = summarize(store, [row], now_ms=late, fold=False)
        assert glance.cost == summary.cost == summary.total_cost
        assert glance.own_cost == own.cost
        assert glance.subagent_cost == summary.subagent_cost
        assert glance.subagents == summary.subagent_sessions
        assert glance.subagents == len(store.family_rows(glance.session_id)) - 1
        # today: the row of usage --by day for the capture's day, over every session
        day = datetime.fromtimestamp(late / 1000, UTC).strftime("%Y-%m-%d")
        by_day = store_usage(
            store, every_session(store, top_level=True), by="day", tz=UTC, cross_session=True
        )
        expected = next((row.cost for row in by_day.rows if row.day == day), 0.0)
        assert glance.today == pytest.approx(expected, rel=1e-12, abs=0)
        context = context_report(
            store, glance.session_id, prices=lambda d: lambda provider, model: None
        )
        assert (glance.context_tokens or 0) == context.context_tokens
        assert glance.state == summary.state  # sessions' rule (core.activity), the same clock
        assert glance.forked == summary.forked  # {fork}: its cost includes what it copied
        assert values(glance)["fork"] == ("fork" if summary.forked else "")


def test_the_current_session_is_the_one_written_last() -> None:
    # samples/fork: the original session, then its fork (every message copied): the fork
    # was written last; samples/task: the subagent's messages lead to its parent.
    for name in ("fork", "task", "command_subtask"):
        with Store(SAMPLES / name / "opencode.db") as store:
            newest = store.newest_session()  # by the session rows' time_updated
            assert current_session(store) == newest, name


def test_a_killed_run_is_busy_while_fresh_and_stale_after() -> None:
    db = SAMPLES / "sigint" / "opencode.db"
    last = _last_write(db)
    with Store(db) as store:
        assert take_glance(store, now_ms=last + 1_000).state == "busy"
        assert take_glance(store, now_ms=last + 11 * 60_000).state == "stale"
        assert take_glance(store, now_ms=last + 5_000, stale_after=2_000).state == "stale"


def test_a_fork_copy_is_not_spent_again() -> None:
    db = SAMPLES / "fork" / "opencode.db"
    with Store(db) as store:
        start, end = day_bounds(_last_write(db), UTC)
        copies = [row for row in store.messages_between(start, end) if row[1] < row[2]]
        assert copies  # the fork's copied history is found by its ids, and left out
        spent = spend_between(store, start, end)
        originals = sum(r.cost for r in store.sessions() if "(fork" not in (r.title or ""))
        fork = next(r for r in store.sessions() if "(fork" in (r.title or ""))
        # the fork row's cost includes its copied history's; today counts each reply once
        assert spent == pytest.approx(originals + fork.cost - sum(_copied_costs(store)), abs=1e-9)


def _copied_costs(store: Store) -> list[float]:
    import json

    costs = []
    for _sid, _mid, _created, data in store.messages_older_than_session():
        info = json.loads(data)
        if info.get("role") == "assistant":
            costs.append(float(info.get("cost") or 0))
    return costs


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ((1 << 36) - 5_000, (1 << 36) + 5_000),  # the ids' 48 bits wrap inside the range
        (1_795_900_000_000, 1_795_986_400_000),
    ],
)
def test_a_time_range_is_an_id_range_even_where_the_ids_wrap(
    tmp_path: Path, start: int, end: int
) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    conn = sqlite3.connect(db)
    (sid,) = conn.execute("SELECT id FROM session").fetchone()
    conn.execute("UPDATE session SET time_created = ?", (start - 10**9,))
    conn.execute("DELETE FROM message")
    times = [start - 1, start, (start + end) // 2, end - 1, end]
    for n, ms in enumerate(times):
        mid = f"msg_{((ms << 12) + 1) & ((1 << 48) - 1):012x}{'x' * 13}{n}"
        data = f'{{"role":"assistant","cost":{n + 1},"time":{{"created":{ms}}}}}'
        conn.execute(
            "INSERT INTO message (id, session_id, time_created, time_updated, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (mid, sid, ms, ms, data),
        )
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert spend_between(store, start, end) == 2 + 3 + 4  # [start, end): the middle three


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{cost} {nope}", "unknown field {nope}"),
        ("{cost.real}", "unknown field {cost.real}"),
        ("{cost", "cannot read the template"),
        ("{}", "unknown field {}"),
        ("{title:{x}}", "unknown field {x}"),  # a spec's own fields (a traceback before)
        ("{title:>{subagents:{y}}}", "unknown field {y}"),
    ],
)
def test_a_bad_template_is_refused(template: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("{", r"\{").replace("}", r"\}")):
        check_format(template)


def test_every_field_renders_and_the_help_names_the_default() -> None:
    with Store(SAMPLES / "task" / "opencode.db") as store:
        glance = take_glance(store, now_ms=_last_write(SAMPLES / "task" / "opencode.db"))
    line = render(" ".join(f"{{{name}}}" for name in FIELDS), glance)
    assert "\n" not in line
    assert render("{cost} {subagent_cost} {subagents} {context}", glance) == (
        "$0.0206 $0.0048 1 4.4k"
    )
    assert render("{title:.4}|{short_id}", glance) == "Mock|ses_dd8083e0"
    assert f"'{DEFAULT_FORMAT}'" in FORMAT_HELP


def test_a_spec_may_take_a_field_of_its_own() -> None:
    with Store(SAMPLES / "task" / "opencode.db") as store:
        glance = take_glance(store, now_ms=_last_write(SAMPLES / "task" / "opencode.db"))
    check_format("{title:>{subagents}}")
    assert render("[{short_id:.{subagents}}]", glance) == "[s]"


@pytest.mark.parametrize(
    "breaker", ["\n", "\r", "\x1b[31m", "\x85", "\x9b31m", "\u2028", "\u2029", "\x0b"]
)
def test_no_field_breaks_the_line_or_starts_an_escape(breaker: str) -> None:
    """A title (or a damaged store's id) holding a line break or an escape, C0, C1 or
    Unicode's own separators, comes out on one line with none of them."""
    with Store(SAMPLES / "task" / "opencode.db") as store:
        glance = take_glance(store, now_ms=_last_write(SAMPLES / "task" / "opencode.db"))
    glance.title = f"fix{breaker}the tests"
    glance.session_id = f"ses_{breaker}x"
    line = render("{title}|{session}|{short_id}", glance)
    assert len(line.splitlines()) == 1
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line)
    assert "\u2028" not in line and "\u2029" not in line
    assert line.startswith("fix ") and "the tests|ses_ " in line  # each in its place


def _task_glance():
    with Store(SAMPLES / "task" / "opencode.db") as store:
        return take_glance(store, now_ms=_last_write(SAMPLES / "task" / "opencode.db"))


def test_for_tmux_a_title_cannot_restyle_the_bar_but_the_template_can() -> None:
    """tmux reads ``#()``'s output as a format: a title (the model's words) holding
    ``#[fg=red]``, ``#{pane_current_path}`` or ``#H`` would restyle the bar or be filled
    in. ``--for tmux`` doubles each ``#`` of the fields (tmux shows ``##`` as ``#`` and
    ``##[`` as ``#[``), and only of the fields: the template's styles are the user's."""
    glance = _task_glance()
    glance.title = "Use #[fg=red] in #{pane_current_path} #H ##"
    line = render("#[fg=yellow]{title} {cost}#[default]", glance, "tmux")
    assert line == "#[fg=yellow]Use ##[fg=red] in ##{pane_current_path} ##H #### $0.0206#[default]"
    # a spec cuts the title, not its escapes; a conversion is escaped too
    assert render("{title:.5}|{title!r:.6}", glance, "tmux") == "Use ##|'Use ##"
    assert render("{subagents:02d} {context_tokens:,}", glance, "tmux") == "01 4,400"
    assert render("{title}", glance) == glance.title  # as it is, without --for


def test_for_zsh_a_title_cannot_hold_a_prompt_escape() -> None:
    """zsh's prompt (PROMPT_SUBST) reads ``%`` escapes in what ``$(...)`` printed:
    ``%F{red}`` in a title would colour the prompt; ``--for zsh`` writes ``%%``."""
    glance = _task_glance()
    glance.title = "fix %F{red}100% of it"
    assert render("%F{{cyan}}{title}%f", glance, "zsh") == "%F{cyan}fix %%F{red}100%% of it%f"


def test_the_escapes_the_command_line_offers_are_the_reports() -> None:
    from opencode_events.cli.quick import STATUSLINE_ESCAPES

    assert tuple(ESCAPES) == STATUSLINE_ESCAPES


def test_counts_take_a_numbers_format_spec_and_an_unknown_one_is_blank() -> None:
    with Store(SAMPLES / "task" / "opencode.db") as store:
        glance = take_glance(store, now_ms=_last_write(SAMPLES / "task" / "opencode.db"))
    assert render("{subagents:02d} {context_tokens:,}", glance) == "01 4,400"
    glance.context_tokens = None  # no inference yet
    assert render("[{context_tokens:,}] [{context_tokens:>6}]", glance) == "[] []"


def test_the_help_and_the_readme_name_every_field() -> None:
    from opencode_events.cli.statusline import statusline

    readme = (ROOT / "README.md").read_text()
    for name in FIELDS:
        assert f"{{{name}}}" in (statusline.help or ""), name
        assert f"`{{{name}}}`" in readme, name


# --------------------------------------------------------------------- the command


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, "statusline", *args], capture_output=True, timeout=60, cwd=ROOT)


def test_the_command_prints_one_line() -> None:
    db = SAMPLES / "task" / "opencode.db"
    at = datetime.fromtimestamp(_last_write(db) / 1000 + 60, UTC).isoformat()
    done = _run("--db", str(db), "--at", at, "--tz", "UTC")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"idle $0.0206 | today $0.0206 | ctx 4.4k\n"
    assert done.stderr == b""
    done = _run("--db", str(db), "--session", "ses_dd8083", "--format", "{cost}/{own_cost}")
    assert done.stdout == b"$0.0206/$0.0158\n"


def _tmux_bar(title: str, *args: str) -> str:
    """What a tmux status bar set up as the README sets it up shows of a store whose
    session has ``title``: a client is attached on a pseudo-terminal, and its screen's
    text (escape sequences taken out) read until the line shows between its marks."""
    import fcntl
    import os
    import pty
    import select
    import shlex
    import struct
    import tempfile
    import termios
    import time

    home = Path(tempfile.mkdtemp(prefix="oe-tmux-", dir="/tmp"))  # a short socket path
    db = home / "opencode.db"
    shutil.copyfile(SAMPLES / "task" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE session SET title = ? WHERE parent_id IS NULL", (title,))
    conn.commit()
    conn.close()
    command = shlex.join([*CLI, "statusline", "--db", str(db), "--format", "<{title}>", *args])
    tmux = ["tmux", "-S", str(home / "sock"), "-f", "/dev/null"]
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    subprocess.run([*tmux, "new-session", "-d", "-s", "sname", "sleep 60"], env=env, check=True)
    try:
        for option, value in [
            ("status-interval", "1"),
            ("status-left", ""),
            ("status-right-length", "120"),
            ("status-right", f"#(cd {shlex.quote(str(ROOT))} && {command} 2>/dev/null)"),
        ]:
            subprocess.run([*tmux, "set", "-g", option, value], env=env, check=True)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 5, 150, 0, 0))
        client = subprocess.Popen(
            [*tmux, "attach", "-t", "sname"], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                if select.select([master], [], [], 0.1)[0]:
                    seen += os.read(master, 65536)
                    text = re.sub(
                        rb"\x1b(\[[0-9;?>]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])", b"", seen
                    )
                    found = re.findall(rb"<[^<>\r\n]*>", text)
                    if found:
                        return found[-1].decode()
            raise AssertionError(f"the bar never showed the line: {seen[-1500:]!r}")
        finally:
            client.kill()
            client.wait()
            os.close(master)
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)")
def test_in_a_real_tmux_bar_a_title_shows_as_it_is_for_tmux() -> None:
    title = "Use #[fg=red] in #{session_name} #H"
    assert _tmux_bar(title, "--for", "tmux") == f"<{title}>"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "{bogus}"], "unknown field {bogus}"),
        (["--for", "bash"], "'bash' is not one of 'tmux', 'zsh'"),
        (["--session", "ses_nope"], "no session ses_nope"),
        (["--tz", "Mars/Olympus"], "unknown time zone"),
    ],
)
def test_bad_usage_is_one_error_line_and_exit_2(args: list[str], message: str) -> None:
    done = _run("--db", str(SAMPLES / "task" / "opencode.db"), *args)
    assert done.returncode == 2
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("error: ") and message in line


def test_a_store_without_sessions_or_a_legacy_one_is_an_error(tmp_path: Path) -> None:
    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM part")
    conn.execute("DELETE FROM message")
    conn.execute("DELETE FROM session")
    conn.commit()
    conn.close()
    done = _run("--db", str(db))
    assert done.returncode == 2 and b"error: no sessions in" in done.stderr
    legacy = tmp_path / "legacy" / "storage" / "session"
    legacy.mkdir(parents=True)
    done = _run("--db", str(tmp_path / "legacy"))
    assert done.returncode == 2 and done.stderr.startswith(b"error: "), done.stderr


def test_no_rich_and_no_mapping_at_start_up() -> None:
    code = (
        "import sys, runpy; sys.argv = ['opencode-events', 'statusline', '--db', "
        f"{str(SAMPLES / 'task' / 'opencode.db')!r}]\n"
        "try:\n    runpy.run_module('opencode_events', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "heavy = [m for m in ('rich', 'opencode_events.core.mapping') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert done.stderr.decode().strip().splitlines()[-1] == "[]", done.stderr.decode()
