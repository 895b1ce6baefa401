"""The pretty view: fixed-width renders, the live footer, and real pseudo-terminal runs."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from msgspec import Raw

import opencode_events
from opencode_events import iter_events
from opencode_events.events import (
    Attachment,
    Command,
    Compaction,
    Delta,
    Error,
    Mention,
    Message,
    Metrics,
    Orchestration,
    Permission,
    Prompt,
    Question,
    Read,
    Reasoning,
    Search,
    Skill,
    Subtask,
    Unknown,
    Usage,
    Warning,
    Write,
)
from opencode_events.output.pretty import PrettyWriter, format_duration

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def render(events, width: int = 72) -> list[str]:
    out = io.StringIO()
    writer = PrettyWriter(out, width=width, color=False, live=False)
    writer.write(events)
    writer.end_batch()
    writer.flush()
    return out.getvalue().splitlines()


def usage(turn: int = 1, **kw) -> Usage:
    fields = dict(
        input_tokens=1000,
        output_tokens=50,
        reasoning_tokens=0,
        cache_read_tokens=200,
        cache_write_tokens=0,
        total_tokens=1250,
        cost=0.0123,
        reason="stop",
    )
    fields.update(kw)
    return Usage(turn=turn, **fields)


TOOL_ROWS = [
    (
        Command(
            tool="bash",
            success=True,
            status="completed",
            command="ls -la",
            exit_code=0,
            duration_ms=120,
        ),
        "✓ bash       ls -la  exit 0 · 120 ms",
    ),
    (
        Command(tool="bash", success=True, command="make test", exit_code=2, duration_ms=2500),
        "✗ bash       make test  exit 2 · 2.5 s",  # completed, but failed: marked so
    ),
    (
        Read(
            tool="read",
            success=False,
            path="missing.txt",
            duration_ms=3,
            error="File not found: missing.txt\nmore",
        ),
        "✗ read       missing.txt  3 ms  File not found: missing.txt",
    ),
    (Read(tool="bash", success=True, path="README.md"), "✓ bash       read README.md"),
    (
        Read(tool="bash", success=True, path="gone.txt", command="cat gone.txt", exit_code=1),
        "✗ bash       read gone.txt  exit 1",
    ),
    (Write(tool="edit", success=True, path="src/app.py"), "✓ edit       src/app.py"),
    (
        Write(tool="apply_patch", success=True, path="a.txt", op="move", to="b.txt"),
        "✓ apply_patch move a.txt → b.txt",
    ),
    (Search(tool="grep", success=True, pattern="hello", path="src"), "✓ grep       'hello' in src"),
    (
        Orchestration(
            tool="task", success=True, agent="general", description="Inspect", duration_ms=61000
        ),
        "✓ task       general: Inspect  1m 01s",
    ),
    (Skill(tool="skill", success=None, name="demo"), "• skill      demo"),
    (Unknown(tool="mcp_thing", success=True, title="did a thing"), "✓ mcp_thing  did a thing"),
    (Search(tool="bash", success=True, path="."), "✓ bash       search in ."),  # `ls`
    (Search(tool="bash", success=True, pattern="x"), "✓ bash       search 'x'"),
    # an MCP call has no title: its arguments, from the part it carries (stream, store, server)
    (
        Unknown(
            tool="srv_echo",
            success=True,
            title="",
            raw=Raw(b'{"type":"tool_use","part":{"state":{"input":{"text":"ping"}}}}'),
        ),
        '✓ srv_echo   {"text":"ping"}',
    ),
    (
        Unknown(tool="srv_echo", success=True, raw=Raw(b'{"state":{"input":{"n":1}}}')),
        '✓ srv_echo   {"n":1}',
    ),
    (
        Unknown(
            tool="srv_echo",
            success=True,
            raw=Raw(
                b'{"type":"message.part.updated","properties":{"part":{"state":{"input":[1]}}}}'
            ),
        ),
        "✓ srv_echo   [1]",
    ),
    (Unknown(tool="srv_echo", success=True, raw=Raw(b"[1]")), "✓ srv_echo   "),
]


@pytest.mark.parametrize(("event", "line"), TOOL_ROWS, ids=[r[1][:20] for r in TOOL_ROWS])
def test_tool_lines(event, line) -> None:
    assert render([event]) == [line]


def test_other_kinds() -> None:
    lines = render(
        [
            Prompt(text="fix the bug"),
            Reasoning(text="First look.\nThen act."),
            Message(text="Done.\n\nAll good."),
            usage(),
            Error(name="APIError", message="mock bad request"),
            Warning(message="not JSON: bad", line=3),
            Permission(id="per_1", permission="bash", patterns=["echo hi"]),
            Permission(id="per_1", reply="reject"),
            Question(id="que_1", questions=["Which colour?", "Extras?"]),
            Question(id="que_1", answers=[["Blue"], ["Tests", "Docs"]], reply="answer"),
            Question(id="que_2", reply="reject"),
            Attachment(name="README.md", mime="text/plain", path="/elsewhere/README.md"),
            Attachment(name="shot.png", mime="image/png"),
            Subtask(agent="general", description="Review a file", prompt="Review src/app.py"),
            Subtask(prompt="First line\nsecond line"),
            Mention(agent="explore"),
            Compaction(auto=True),
            Unknown(type="question.asked"),
        ],
        width=90,
    )
    assert lines == [
        "» fix the bug",
        "∴ First look.",
        "  Then act.",
        "› Done.",
        "  ",
        "  All good.",
        "  step 1     1,250 tokens · 1,000 in · 50 out · 200 cache read · $0.0123 · stop",
        "✗ error      APIError: mock bad request",
        "! warning    line 3: not JSON: bad",
        "? permission bash: echo hi",
        "✗ permission reject",
        "? question   Which colour? · Extras?",
        "✓ question   Blue · Tests, Docs",
        "✗ question   dismissed",
        "+ attached   /elsewhere/README.md (text/plain)",
        "+ attached   shot.png (image/png)",
        "» subtask    general: Review a file",
        "» subtask    First line",
        "@ mention    explore",
        "⟲ compaction automatic",
        "? unknown    question.asked",
    ]


def test_an_undone_event_is_struck_through() -> None:
    out = io.StringIO()
    writer = PrettyWriter(out, width=60, color=True, live=False)
    writer.write([Prompt(text="kept"), Prompt(text="undone", reverted=True)])
    writer.flush()
    kept, undone = out.getvalue().splitlines()
    assert "9m" not in kept and "kept" in kept  # SGR 9: crossed out
    assert ";9;" in undone and "undone" in undone
    assert render([Prompt(text="undone", reverted=True)]) == ["» undone"]  # text unchanged


def test_long_lines_are_cut_to_the_width_keeping_exit_code() -> None:
    event = Command(
        tool="bash", success=True, command="echo " + "x" * 200, exit_code=1, duration_ms=5
    )
    (line,) = render([event], width=60)
    assert len(line) == 60 and line.endswith("…  exit 1 · 5 ms")


def test_a_long_failed_call_keeps_its_duration_and_the_start_of_its_error() -> None:
    event = Unknown(
        tool="webfetch",
        success=False,
        title='{"url":"http://127.0.0.1:18321/pages/missing.html","format":"text"}',
        duration_ms=4,
        error="Request failed with status code: 404",
    )
    (line,) = render([event], width=80)
    assert len(line) == 80
    assert "…  4 ms  Request failed with st" in line and line.endswith("…")


@pytest.mark.parametrize("width", [120, 80, 60, 45])
def test_a_usage_line_drops_its_break_down_before_the_total_or_the_cost(width) -> None:
    event = usage(
        input_tokens=1_156_000,
        output_tokens=47_000,
        reasoning_tokens=9_000,
        cache_read_tokens=78_000,
        cache_write_tokens=5_000,
        total_tokens=1_295_000,
        cost=123.4567,
        reason="tool-calls",
    )
    (line,) = render([event], width=width)
    assert len(line) <= width
    assert "1,295,000 tokens" in line and "$123.4567" in line
    if width >= 80:
        assert line.endswith("tool-calls")


@pytest.mark.parametrize(
    "text, shown",
    [("A\x07B", "A␇B"), ("A\x08B", "A␈B"), ("A\rB", "A␍B"), ("A\x0bB\x0cC", "A␋B␌C")],
    ids=["BEL", "BS", "CR", "VT-FF"],
)
def test_control_characters_rich_would_drop_are_shown_too(text, shown) -> None:
    lines = render([Message(text=text), Command(tool="bash", success=True, command=text)])
    assert lines[0] == "› " + shown
    assert lines[1] == "✓ bash       " + shown


def test_deltas_are_not_lines() -> None:
    assert render([Delta(field="text", delta="Hel"), Delta(field="text", delta="lo")]) == []


def test_metrics_summary() -> None:
    metrics = Metrics(
        records=9,
        counts={"command": 2, "error": 1},
        turns=2,
        tool_calls=3,
        tool_failures=1,
        command_failures=0,
        duplicates=0,
        input_tokens=10,
        output_tokens=5,
        reasoning_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        total_tokens=1234,
        cost=0.5,
    )
    assert render([metrics], width=100) == [
        "── 2 steps · 3 tool calls (1 failed) · 1,234 tokens · $0.5000 · 1 problem"
    ]
    # `run`: the subagents' spend from the store, folded in
    metrics.subagent_sessions, metrics.subagent_cost, metrics.total_cost = 2, 0.25, 0.75
    assert render([metrics], width=120) == [
        "── 2 steps · 3 tool calls (1 failed) · 1,234 tokens · $0.5000 + $0.2500 in 2 subagents"
        " = $0.7500 · 1 problem"
    ]
    # and their steps, calls and tokens from the store too: every figure folded, as in
    # `sessions`, their part said apart
    metrics.subagent_inferences, metrics.subagent_tool_calls, metrics.subagent_tokens = 4, 2, 766
    assert render([metrics], width=120) == [
        "── 6 steps · 5 tool calls (1 failed) · 2,000 tokens · $0.7500 +sub (2 subagents: 4 steps,"
        " $0.2500) · 1 problem"
    ]
    metrics.command_failures = 2  # completed calls whose command exited ≠ 0: said apart
    assert "5 tool calls (1 failed · 2 bad exits) ·" in render([metrics], width=140)[0]


def test_colors_when_asked() -> None:
    out = io.StringIO()
    writer = PrettyWriter(out, width=60, color=True, live=False)
    writer.write([Error(name="E", message="bad"), Reasoning(text="hm")])
    writer.flush()
    text = out.getvalue()
    assert "\x1b[" in text and "31" in text  # red error
    assert "\x1b[2" in text  # dim reasoning


def test_binary_target() -> None:
    out = io.BytesIO()
    writer = PrettyWriter(out, width=40, color=False, live=False)
    writer.write([Message(text="héllo ✓")])
    writer.flush()
    assert out.getvalue().decode() == "› héllo ✓\n"


def test_live_footer_totals() -> None:
    out = io.StringIO()
    writer = PrettyWriter(out, width=100, color=False, live=True)
    writer.write(
        [
            Command(tool="bash", success=False, command="false", exit_code=1),
            usage(),
            usage(
                2,
                total_tokens=750,
                input_tokens=500,
                output_tokens=50,
                cache_read_tokens=200,
                cost=0.0077,
            ),
            Delta(field="text", delta="streaming words"),
        ]
    )
    writer.end_batch()
    footer = writer._footer().plain
    assert (
        "steps 2 · tool calls 1 (1 failed) · $0.0200 · tokens 2,000 "
        "(in 1,500 · out 100 · cache read 400)"
    ) in footer
    assert "streaming words" in footer
    writer.flush()
    assert writer._live is None  # the footer is gone at the end


def test_rich_only_for_pretty() -> None:
    code = (
        "import sys, io\n"
        "from opencode_events.output.jsonl import make_writer\n"
        "make_writer('jsonl', io.BytesIO(), buffered=False)\n"
        "import opencode_events.cli.live, opencode_events.sources.sse, opencode_events.cli.main\n"
        "assert 'rich' not in sys.modules, 'rich imported'\n"
        "make_writer('pretty', io.BytesIO(), buffered=False)\n"
        "assert 'rich' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ------------------------------------------------------------------ a real terminal


def run_in_pty(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 30, cols: int = 100
) -> tuple[int, bytes]:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env={**os.environ, "TERM": "xterm-256color", **(env or {})},
        start_new_session=True,
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child side closed
                    break
                if not chunk:
                    break
                output += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, output


def test_normalize_on_a_terminal_is_pretty() -> None:
    code, output = run_in_pty(
        [sys.executable, "-m", "opencode_events", "normalize", "samples/bash_ok/stream.jsonl"]
    )
    assert code == 0, output
    plain = ANSI.sub(b"", output).decode()
    assert '{"kind"' not in plain
    assert "✓ bash" in plain and "exit 0" in plain
    assert "step 1" in plain and "── 2 steps · 1 tool call" in plain
    assert b"\x1b[?25h" in output  # the cursor is shown again at the end


def screen(output: bytes) -> list[str]:
    """The lines a terminal shows after ``output``: enough of one for what rich writes
    (CR, LF, erase line, cursor up; styles and cursor visibility ignored)."""
    lines, row, col = [""], 0, 0
    for token in re.findall(rb"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", output):
        if token == b"\r":
            col = 0
        elif token == b"\n":
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif token.startswith(b"\x1b["):
            if token.endswith(b"K"):
                lines[row] = lines[row][:col] if token != b"\x1b[2K" else ""
            elif token.endswith(b"A"):
                row = max(0, row - int(token[2:-1] or 1))
        else:
            text = token.decode("utf-8", "replace")
            line = lines[row].ljust(col)
            lines[row] = line[:col] + text + line[col + len(text) :]
            col += len(text)
    return lines


@pytest.mark.parametrize("command", ["import", "normalize"])
def test_ctrl_c_takes_the_footer_away(command: str) -> None:
    """Interrupted on a terminal, the footer goes before click's closing newline, so no
    stale footer stays on the screen; what was mapped before stays."""
    sample = SAMPLES / "bash_ok"
    code = (
        "import sys\n"
        "import opencode_events.pipeline.normalize as p\n"
        "import opencode_events.sources.transcript as t\n"
        "from opencode_events.cli.main import main\n"
        "def interrupted(*args, **kwargs):\n"
        "    yield from real(*args, **kwargs)\n"
        "    raise KeyboardInterrupt\n"
        "def stream_then_interrupt(*args, **kwargs):\n"
        "    yield from batches(*args, **kwargs)\n"
        "    raise KeyboardInterrupt\n"
        "real, batches = t.map_session, p.line_batches\n"
        "t.map_session, p.line_batches = interrupted, stream_then_interrupt\n"
        "main()\n"
    )
    args = {  # `python -c` makes sys.argv[0] "-c": the command line starts after it
        "import": ["import", "--db", str(sample / "opencode.db"), "--last"],
        "normalize": ["normalize", str(sample / "stream.jsonl")],
    }[command]
    status, output = run_in_pty([sys.executable, "-c", code, *args])
    assert status == 130, output
    shown = screen(output)
    assert any("✓ bash" in line for line in shown), shown
    assert not any("steps" in line and "tool calls" in line for line in shown), shown


def test_run_on_a_terminal(tmp_path: Path) -> None:
    """`opencode-events run` under a real pseudo-terminal, with a stand-in OpenCode that
    plays a captured stream and exits 3."""
    fake = tmp_path / "opencode"
    sample = SAMPLES / "bash_fail" / "stream.jsonl"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "argv"}\ncat {sample}\nexit 3\n')
    fake.chmod(0o755)
    tee = tmp_path / "raw.jsonl"
    code, output = run_in_pty(
        [sys.executable, "-m", "opencode_events", "run", "--tee", str(tee), "-m", "x/y", "hi"],
        env={"OPENCODE_BIN": str(fake)},
    )
    assert code == 3, output
    plain = ANSI.sub(b"", output).decode()
    assert '{"kind"' not in plain and "✗ bash" in plain and "exit 3" in plain
    assert tee.read_bytes() == sample.read_bytes()
    assert (tmp_path / "argv").read_text().split() == ["run", "--format", "json", "-m", "x/y", "hi"]


def test_format_duration() -> None:
    assert [format_duration(x) for x in (None, 0, 999, 1000, 59_999, 60_000, 3_725_000)] == [
        None,
        "0 ms",
        "999 ms",
        "1.0 s",
        "60.0 s",
        "1m 00s",
        "62m 05s",
    ]


@pytest.mark.parametrize(
    "value, shown",
    [
        (0, "$0.00"),
        (0.0, "$0.00"),
        (1234.5, "$1,234.50"),
        (1.0, "$1.00"),
        (0.012809999999999998, "$0.0128"),  # a cost as OpenCode stores it
        (0.0001, "$0.0001"),
        (6.5e-05, "$0.000065"),  # never 6.5e-05
        (1.4999999999999999e-05, "$0.000015"),
        (float("nan"), "-"),
        (float("inf"), "-"),
        (None, "-"),
        ("0.1", "-"),
    ],
)
def test_money_in_tables(value, shown):
    from opencode_events.output.tables import money

    assert money(value) == shown


# Tables at a terminal's width: tests/test_tables.py.


def test_control_characters_are_shown_not_obeyed() -> None:
    """A model's text with ESC sequences (clear the screen, set the window title) must not
    drive the terminal; styles still land where they belong."""
    evil = "hi \x1b[2J\x1b]0;pwned\x07 \x9b31m there"
    out = io.StringIO()
    writer = PrettyWriter(out, width=72, color=True, live=False)
    writer.write([Message(text=evil), Command(tool="bash", success=True, command=evil)])
    writer.flush()
    text = out.getvalue()
    assert "\x1b[2J" not in text and "\x1b]0" not in text and "\x9b" not in text
    assert "␛[2J␛]0;pwned" in text and "\ufffd31m" in text


def test_control_characters_in_tables_are_shown_not_obeyed() -> None:
    from opencode_events.output.tables import Column, draw_table

    out = io.StringIO()
    rows = [{"title": "a\x1b]0;pwned\x07b [bold]x[/bold]"}]
    draw_table([Column("title", lambda r: r["title"])], rows, out=out, width=80, caption="[x]\x1b")
    text = out.getvalue()
    assert "\x1b" not in text
    assert "␛]0;pwned" in text and "[bold]x[/bold]" in text and "[x]␛" in text


def test_the_live_footer_shows_control_characters_too() -> None:
    from opencode_events.events import Delta

    out = io.StringIO()
    writer = PrettyWriter(out, width=72, color=False, live=True)
    writer.write([Delta(delta="hi \x1b]0;PWNED\x07\x1b[2J")])
    footer = writer._footer().plain
    writer.flush()
    assert "\x1b]0" not in footer and "\x1b[2J" not in footer and "␛]0;PWNED" in footer


def test_a_tiny_cost_is_a_short_cell() -> None:
    from opencode_events.output.tables import money

    assert money(1e-300) == "<$0.0000000001" and money(-1e-300) == ">-$0.0000000001"


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_pretty_on_a_stdout_that_is_not_utf8(encoding: str) -> None:
    """An ASCII or Latin-1 locale: what the encoding lacks is shown as `?`, the rest as it
    is; no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", "--format", "pretty"]
        + [str(SAMPLES / "bash_fail" / "stream.jsonl")],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": encoding},
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == b""
    text = result.stdout.decode(encoding)
    assert "echo partial; echo oops >&2; exit 3" in text and "exit 3" in text
    assert "?" in text  # the check mark, the middle dots …


def test_pretty_with_columns_zero_uses_80() -> None:
    """COLUMNS=0 names no width: the events are shown, at 80 columns."""
    result = subprocess.run(
        [sys.executable, "-m", "opencode_events", "normalize", "--format", "pretty"]
        + [str(SAMPLES / "bash_fail" / "stream.jsonl")],
        capture_output=True,
        env={**os.environ, "COLUMNS": "0"},
        cwd=REPO,
        timeout=60,
    )
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 0 and len(lines) >= 4
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize(
    "command",
    ["echo " + "日本語のテキスト" * 4, "echo " + "😀" * 40, "echo\tTABS\t\tmore" + "x" * 60],
    ids=["cjk", "emoji", "tabs"],
)
def test_a_long_command_of_wide_characters_keeps_exit_and_duration(command: str) -> None:
    """Room is measured in terminal cells: a CJK character or an emoji takes two, and a tab
    is shown as a space (no tab stop in a one-line view)."""
    from rich.cells import cell_len

    event = Command(
        tool="bash",
        success=True,
        status="completed",
        command=command,
        exit_code=3,
        duration_ms=78,
    )
    (line,) = render([event], width=80)
    assert line.endswith("exit 3 · 78 ms") and "…" in line and "\t" not in line
    assert cell_len(line) <= 80


@pytest.mark.parametrize("width", [24, 30, 34])
def test_a_usage_line_keeps_its_cost_on_a_narrow_terminal(width: int) -> None:
    (line,) = render([usage(turn=3)], width=width)
    assert "$0.0123" in line or line.endswith("…")
    assert len(line) <= width
    if width >= 30:
        assert "1,250 tokens" in line and "$0.0123" in line


def test_the_footer_and_the_closing_line_count_calls_alike():
    """One apply_patch call of four files is one tool call in the footer, as in the closing
    line; a bash that exited 3 and a call of a tool that does not exist are marked ✗ and
    counted in both: a bad exit and a failed call (issue 20 §2, §9)."""
    for scenario, calls, failed in (
        ("apply_patch", 2, ""),
        ("bash_fail", 1, "1 bad exit"),
        ("invalid_tool", 1, "1 failed"),
    ):
        out = io.BytesIO()
        writer = PrettyWriter(out, width=120, color=False, live=True)
        events = list(iter_events(SAMPLES / scenario / "stream.jsonl"))
        writer.write(events[:-1])
        writer.end_batch()
        footer = writer._footer().plain
        assert f"tool calls {calls}" in footer, (scenario, footer)
        assert (f"({failed})" in footer) == bool(failed), (scenario, footer)
        writer.write(events[-1:])
        writer.flush()
        closing = out.getvalue().decode().splitlines()[-1]
        suffix = f" ({failed})" if failed else ""
        assert f"{calls} tool call{'s' if calls > 1 else ''}{suffix} ·" in closing, closing


def test_the_footer_says_a_subagents_figures_come_at_the_end():
    """samples/task: the stream holds the parent's steps only; the footer counts those and
    says a subagent ran, whose figures the closing line of `run` folds in (+sub). Where
    nothing will fold them in (`import --follow`, `normalize` of a stream) it says they are
    not counted, and once the subagent's own events come (`--children`), nothing."""
    events = list(iter_events(SAMPLES / "task" / "stream.jsonl"))
    expected = {
        True: "steps 2 · tool calls 1 · +1 subagent at the end · $0.0158",
        False: "steps 2 · tool calls 1 · +1 subagent not counted here · $0.0158",
    }
    for at_end, words in expected.items():
        writer = PrettyWriter(
            io.BytesIO(), width=160, color=False, live=True, subagents_at_end=at_end
        )
        writer.write(events[:-1])
        writer.end_batch()
        assert words in writer._footer().plain, writer._footer().plain
    with opencode_events.open_store(SAMPLES / "task" / "opencode.db") as store:
        both = list(opencode_events.stored_events(store, children=True, metrics=False))
    writer = PrettyWriter(io.BytesIO(), width=160, color=False, live=True)
    writer.write(both)
    assert "subagent" not in writer._footer().plain  # its steps are among the counted
    plain = PrettyWriter(io.BytesIO(), width=160, color=False, live=True)
    plain.write(list(iter_events(SAMPLES / "bash_ok" / "stream.jsonl"))[:-1])
    assert "subagent" not in plain._footer().plain


@pytest.mark.parametrize("lines, shown", [(1, 1), (12, 12), (13, 12), (18101, 12)])
def test_a_long_message_is_cut_to_a_few_lines(lines: int, shown: int):
    """Issue 20 §5: one message of 18,101 lines filled a screen many times over."""
    text = "\n".join(f"line {n}" for n in range(1, lines + 1))
    out = io.StringIO()
    writer = PrettyWriter(out, width=80, color=False, live=False)
    writer.write([Message(text=text)])
    writer.flush()
    printed = out.getvalue().splitlines()
    assert [p.strip(" ›") for p in printed[:shown]] == [f"line {n}" for n in range(1, shown + 1)]
    more = lines - shown
    if more:
        assert (
            printed[shown] == f"  … ({more} more line{'s' if more > 1 else ''}; --full shows all)"
        )
    assert len(printed) == shown + (1 if more else 0)
    whole = io.StringIO()
    writer = PrettyWriter(whole, width=80, color=False, live=False, max_lines=None)
    writer.write([Message(text=text)])
    writer.flush()
    assert len(whole.getvalue().splitlines()) == lines


def test_normalize_full_shows_a_long_message_whole():
    text = "\\n".join(str(n) for n in range(30))
    record = '{"type":"text","sessionID":"s","part":{"type":"text","text":"%s","time":{"end":1}}}'
    data = (record % text).encode() + b"\n"
    args = [sys.executable, "-m", "opencode_events", "normalize", "--format", "pretty"]
    cut = subprocess.run(args, input=data, capture_output=True, check=True).stdout.decode()
    whole = subprocess.run([*args, "--full"], input=data, capture_output=True, check=True)
    assert "… (18 more lines; --full shows all)" in cut
    assert "29" in whole.stdout.decode() and "more line" not in whole.stdout.decode()


def test_lines_say_whose_they_are_once_a_second_session_comes() -> None:
    """`attach` of a server with many sessions at once, `import --all`: from the second
    session on, each line starts with the end of its session's id."""
    first, second = "ses_dd80aaaaaaaaAAAAAAAAAAAAAAAAA1", "ses_dd80aaaaaaaaBBBBBBBBBBBBBBBBB2"
    lines = render(
        [
            Command(tool="bash", success=True, command="ls", exit_code=0, session_id=first),
            Command(tool="bash", success=True, command="pwd", exit_code=0, session_id=second),
            Message(text="done", session_id=first),
        ]
    )
    assert lines[0].startswith("✓ bash")  # one session so far: as ever
    assert lines[1].startswith("…BBBB2 ✓ bash") and "pwd" in lines[1]
    assert lines[2] == "…AAAA1 › done"


def test_a_note_on_stderr_goes_above_the_footer_not_after_it() -> None:
    """A note written to stderr while the footer shows (attach's reconnects) is a line of
    its own above the footer, which is then drawn again below it."""
    code = (
        "import io, sys, time\n"
        "from opencode_events.output.pretty import PrettyWriter\n"
        "from opencode_events.events import Command\n"
        "writer = PrettyWriter(sys.stdout, width=100, live=True)\n"
        "writer.write([Command(tool='bash', success=True, command='ls', exit_code=0)])\n"
        "writer.end_batch()\n"
        "print('opencode-events: connection lost, trying again', file=sys.stderr, flush=True)\n"
        "writer.write([Command(tool='bash', success=True, command='pwd', exit_code=0)])\n"
        "writer.end_batch()\n"
        "writer.flush()\n"
    )
    status, output = run_in_pty([sys.executable, "-c", code])
    assert status == 0, output
    shown = [line.rstrip() for line in screen(output) if line.strip()]
    assert "opencode-events: connection lost, trying again" in shown, shown
    assert not any("steps" in line and "connection lost" in line for line in shown), shown
