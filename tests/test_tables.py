"""Tables fit the terminal: `sessions`, `usage` and `context` drawn from the real captures at
many widths, measured in terminal cells. A table is never wider than the terminal; a
column is left out only when it does not fit, and then named under the table; the total is
shown only beside every token class it sums; titles are cut in the middle, paths from the
left, ids to a prefix; figures are never cut. Too narrow for even the columns that must
stay, the rows are drawn as records."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from opencode_events.output import tables
from opencode_events.output.tables import Column, _cut, _fit, draw_table
from tests.stores import LOCALES_WITHOUT_UTF8, in_locale, with_a_title

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
STORES = sorted(p.parent.name for p in SAMPLES.glob("*/opencode.db"))
WIDTHS = [240, 120, 100, 80, 72, 60, 50, 40, 30, 24]
FIGURE = re.compile(r"^[<>+-]?-?\$?\d[\d,]*(\.\d+)?%?$")


def _width(text: str) -> int:
    return max(map(cell_len, text.splitlines()), default=0)


def _sessions(sample: str) -> list:
    from opencode_events.reports.sessions import summarize
    from opencode_events.store.sqlite import Store

    with Store(SAMPLES / sample / "opencode.db") as store:
        return summarize(store, store.sessions())


def _stored_usage(sample: str, by: str):
    from opencode_events.reports.usage import store_usage
    from opencode_events.store.open import every_session
    from opencode_events.store.sqlite import Store

    with Store(SAMPLES / sample / "opencode.db") as store:
        return store_usage(store, every_session(store, top_level=True), by=by, cross_session=True)


def _stream_usage(sample: str, by: str):
    from opencode_events.reports.usage import StreamUsage

    with open(SAMPLES / sample / "stream.jsonl", "rb") as stream:
        usage = StreamUsage([(sample, stream)], by=by)
        return usage.report(list(usage.rows()))


def _context(sample: str):
    from opencode_events.reports.context import context_report
    from opencode_events.store.open import select_sessions
    from opencode_events.store.sqlite import Store

    with Store(SAMPLES / sample / "opencode.db") as store:
        (session,) = select_sessions(store, [])[:1]
        return context_report(
            store, session, prices=lambda d: lambda provider, model: None, servers=lambda d: ()
        )


def _draw(kind: str, sample: str, width: int, by: str = "turn") -> str:
    out = io.StringIO()
    if kind == "sessions":
        tables.sessions_table(_sessions(sample), out=out, width=width)
    elif kind == "usage":
        tables.usage_table(_stored_usage(sample, by), out=out, store=True, width=width)
    elif kind == "stream":
        tables.usage_table(_stream_usage(sample, by), out=out, store=False, width=width)
    else:
        tables.context_table(_context(sample), out=out, width=width, per_step=True)
    return out.getvalue()


CASES = (
    [("sessions", sample, "-") for sample in STORES]
    + [
        ("usage", sample, by)
        for sample in ("fork", "task", "reasoning", "compaction")
        for by in ("turn", "step", "session", "model", "agent", "day")
    ]
    + [
        ("stream", sample, by)
        for sample in ("file_tools", "reasoning", "task")
        for by in ("turn", "step")
    ]
    + [("context", sample, "-") for sample in ("task", "compaction", "mcp")]
)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("kind", "sample", "by"), CASES)
def test_a_table_is_never_wider_than_the_terminal(kind, sample, by, width):
    text = _draw(kind, sample, width, by)
    assert _width(text) <= width, text


def _grid(text: str) -> tuple[list[str], list[list[str]]]:
    """The headers (a wrapped header joined again) and the body rows of a drawn table."""
    lines = text.splitlines()
    header_lines = [line for line in lines if line.startswith("┃")]
    headers: list[str] = []
    for line in header_lines:
        for n, cell in enumerate(line.split("┃")[1:-1]):
            if n == len(headers):
                headers.append("")
            headers[n] = f"{headers[n]} {cell.strip()}".strip()
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    return headers, rows


TOKEN_CLASSES = ("input", "output", "reasoning", "cache read", "cache write")


@pytest.mark.parametrize("width", [240, 100, 80, 72, 60, 50, 40])
@pytest.mark.parametrize(
    ("sample", "by"),
    [(s, by) for s in ("fork", "task", "reasoning", "compaction") for by in ("turn", "step")],
)
def test_the_figures_shown_add_up_to_the_total_shown(sample, by, width):
    """The total is never beside a table that left out a token class that holds tokens."""
    text = _draw("usage", sample, width, by)
    headers, rows = _grid(text)
    if "total" not in headers:
        return
    parts = [headers.index(name) for name in TOKEN_CLASSES if name in headers]
    at = headers.index("total")
    for row in rows:
        if not row[at]:
            continue
        assert sum(int(row[i].replace(",", "") or 0) for i in parts) == int(
            row[at].replace(",", "")
        ), text


def test_at_80_columns_a_table_of_stored_turns_keeps_every_token_class_beside_the_total():
    headers, _ = _grid(_draw("usage", "fork", 80))
    assert {"session", "turn", "input", "output", "cache read", "total", "cost"} <= set(headers)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("kind", "sample", "by"), CASES[::3])
def test_figures_are_never_cut(kind, sample, by, width):
    """Nothing that reads as a number ends or starts in "…", in a table or in records."""
    text = _draw(kind, sample, width, by)
    for word in re.split(r"[\s│┃]+", text):
        if "…" in word:
            assert not FIGURE.match(word.replace("…", "")), (word, text)


def _every_figure(kind: str, sample: str) -> list[str]:
    if kind == "sessions":
        return [tables.money(s.total_cost) for s in _sessions(sample)] + [
            tables.count(s.input_tokens) for s in _sessions(sample)
        ]
    report = _stored_usage(sample, "turn")
    return [tables.money(r.cost) for r in report.rows] + [tables.count(report.total.total_tokens)]


@pytest.mark.parametrize("width", [30, 24])
@pytest.mark.parametrize(("kind", "sample"), [("sessions", "task"), ("usage", "fork")])
def test_too_narrow_for_a_table_the_rows_are_records_with_every_figure_whole(kind, sample, width):
    text = _draw(kind, sample, width)
    assert "┃" not in text and _width(text) <= width
    words = set(text.split())
    for figure in _every_figure(kind, sample):
        assert figure in words, (figure, text)


def _narrowest(column: Column, cells: list[str]) -> int:
    """The fewest cells a column can take: its longest header word, its widest value or
    as far as it may be cut, plus its padding and border."""
    wide = max(map(cell_len, cells), default=0)
    if column.max_width:
        wide = min(wide, column.max_width)
    if column.cut_to is not None:
        wide = min(wide, column.cut_to)
    return max([wide, *map(cell_len, column.header.split())]) + 3


@pytest.mark.parametrize("width", [200, 120, 100, 80, 72, 60, 50])
@pytest.mark.parametrize("sample", ["task", "fork", "auto_compact", "mcp", "compaction"])
def test_a_column_is_left_out_only_when_it_does_not_fit(sample, width, monkeypatch):
    """Every column left out that holds something is named, and would not have fitted in
    the room the table left."""
    seen = {}

    def spy(columns, cells, footers, width):
        fit = _fit(columns, cells, footers, width)
        seen.update(columns=columns, cells=cells, fit=fit)
        return fit

    monkeypatch.setattr(tables, "_fit", spy)
    text = _draw("sessions", sample, width)
    fit, columns, cells = seen["fit"], seen["columns"], seen["cells"]
    if fit is None:
        return
    room = width - (sum(fit.widths.values()) + 3 * len(fit.widths) + 1)
    assert room >= 0
    for index, column in enumerate(columns):
        values = [row[index] for row in cells]
        if index in fit.widths or set(values) <= {"", "0", "-", "$0.00"}:
            continue
        assert column.header in fit.hidden and column.header in " ".join(text.split())
        assert _narrowest(column, values) > room, (column.header, room)


def test_a_wide_table_shows_everything_and_whole_ids():
    for kind, sample in [("sessions", "task"), ("usage", "fork")]:
        text = _draw(kind, sample, 240)
        assert "not shown" not in text and "…" not in text
    assert "ses_dd8060a99ffe0TE5VY4h7s0VFE" in _draw("usage", "fork", 240)


def test_at_80_columns_sessions_keeps_what_matters_and_says_what_it_left_out():
    text = _draw("sessions", "task", 80)
    headers, rows = _grid(text)
    assert headers[:2] == ["id", "title"] and headers[-1] == "cost"
    assert "figures +sub: with subagents'" in " ".join(text.split())  # the caption says
    assert {"turns", "tools", "input", "output"} <= set(headers)
    # the ids cut to a prefix that still tells the two sessions apart
    ids = [row[0] for row in rows]
    assert all(i.endswith("…") for i in ids) and len({i[:-1] for i in ids}) == 2
    assert "ses_dd8083e0bffePGJlLQX9qavHXI".startswith(ids[0][:-1])
    assert "not shown at this width:" in text


@pytest.mark.parametrize(
    ("text", "width", "where", "cut"),
    [
        ("Inspect the repo (@general subagent)", 16, "middle", "Inspect …bagent)"),
        ("/tmp/oc-capture/task/work", 16, "start", "…pture/task/work"),
        ("ses_dd8083e0bffePGJlLQX9qavHXI", 14, "end", "ses_dd8083e0b…"),
        ("short", 16, "middle", "short"),
        ("日本語のタイトルです", 9, "middle", "日本…です"),  # two cells a character
        ("日本語のタイトルです", 9, "end", "日本語の…"),
        ("abc", 0, "end", ""),
    ],
)
def test_text_is_cut_where_it_says_least(text, width, where, cut):
    assert _cut(text, width, where) == cut
    assert cell_len(_cut(text, width, where)) <= width


def test_a_title_is_cut_in_the_middle_and_a_path_from_the_left_in_a_real_table():
    headers, rows = _grid(_draw("sessions", "task", 80))
    title = rows[1][headers.index("title")]
    whole = "Inspect the repo (@general subagent)"
    head, _, tail = title.partition("…")
    assert head and tail and whole.startswith(head) and whole.endswith(tail)
    for width in range(100, 200, 4):
        headers, rows = _grid(_draw("sessions", "task", width))
        if "directory" in headers:
            path = rows[0][headers.index("directory")]
            assert "/tmp/oc-capture/task/work".endswith(path.lstrip("…")), path
            return
    pytest.fail("the directory was never shown")


def test_wide_characters_are_measured_in_cells():
    rows = [{"title": "日本語のタイトルです、とても長い題名", "cost": 0.25}]
    columns = [
        Column("title", lambda r: r["title"], cut_to=8, cut="middle"),
        Column("cost", lambda r: tables.money(r["cost"]), numeric=True),
    ]
    for width in (60, 30, 24, 20):
        out = io.StringIO()
        draw_table(columns, rows, out=out, width=width)
        assert _width(out.getvalue()) <= width and "$0.2500" in out.getvalue()


@pytest.mark.parametrize("width", [80, 40, 20, 12])
def test_an_empty_result_is_one_line_that_fits(width):
    out = io.StringIO()
    tables.sessions_table([], out=out, width=width)
    assert out.getvalue().split() == ["no", "sessions"] and _width(out.getvalue()) <= width


def _cli(*args: str, columns: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "opencode_events", *args],
        capture_output=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "--db", "samples/task/opencode.db", "--format", "table"),
        ("usage", "--db", "samples/fork/opencode.db", "--all", "--format", "table"),
        ("context", "--db", "samples/task/opencode.db", "--format", "table"),
        (
            "sessions",
            "--db",
            "samples/task/opencode.db",
            "--since",
            "2099-01-01",
            "--format",
            "table",
        ),
    ],
)
@pytest.mark.parametrize("columns", ["80", "50", "30"])
def test_a_table_in_a_pipe_is_as_wide_as_COLUMNS_says(args, columns):
    result = _cli(*args, columns=columns)
    assert result.returncode == 0, result.stderr
    assert 0 < _width(result.stdout.decode()) <= int(columns)


@pytest.mark.parametrize(
    ("window", "said"),
    [
        (("--since", "2099-01-01"), ["no inference", "the sessions active since 2099-01-01 00:00"]),
        (
            ("--since", "2099-01-01", "--until", "2099-01-31"),
            ["no inference", "the sessions active from 2099-01-01 00:00 to 2099-01-31 23:59"],
        ),
        (("--last", "--until", "2000-01-01"), ["no inference", "until 2000-01-01 23:59"]),
    ],
)
def test_an_empty_usage_table_says_so_and_of_which_sessions(window, said):
    """A window with no inference in it: a line says so, and which window (the whole
    table of nothing, a lone $0.00 total, said neither)."""
    result = _cli(
        "usage",
        "--db",
        "samples/fork/opencode.db",
        *window,
        "-z",
        "UTC",
        "--format",
        "table",
        columns="80",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == said


def test_a_usage_table_of_a_window_says_the_window_in_its_caption():
    result = _cli(
        "usage",
        "--db",
        "samples/fork/opencode.db",
        "--all",
        "--since",
        "2000-01-01",
        "--by",
        "session",
        "-z",
        "UTC",
        "--format",
        "table",
        columns="200",
    )
    assert result.returncode == 0, result.stderr
    assert "every session, since 2000-01-01 00:00" in result.stdout.decode()


def test_a_table_in_a_pipe_without_COLUMNS_is_drawn_wide():
    result = _cli(
        "usage", "--db", "samples/fork/opencode.db", "--all", "--format", "table", columns=None
    )
    assert result.returncode == 0 and "ses_dd8060a99ffe0TE5VY4h7s0VFE" in result.stdout.decode()


def test_the_headers_say_turn_for_a_prompt_and_step_for_a_model_call():
    """One vocabulary (docs/reports.md): a stored turn is a prompt with its steps; a
    stream's rows are steps, whatever their `turn` field is called."""
    stored, _ = _grid(_draw("usage", "task", 240))
    assert stored[:2] == ["turn", "started"] and "steps" in stored
    streamed, rows = _grid(_draw("stream", "task", 240))
    assert streamed[0] == "step" and [row[0] for row in rows] == ["1", "2", "total"]
    sessions = (
        _grid(_draw("sessions", "task", 240))[0] + _grid(_draw("sessions", "reasoning", 240))[0]
    )
    assert {"turns", "steps", "reasoning", "cache read"} <= set(sessions)
    assert not {"inf.", "reason.", "c.read", "c.write"} & set(sessions)
    context = _draw("context", "task", 240)
    assert context.splitlines()[0].strip().startswith("Steps (model calls")
    assert _grid(context.split("Context of")[0])[0][0] == "step"


def test_the_sessions_table_draws_a_screenful_and_says_there_is_more(tmp_path: Path):
    """Without --limit, the table draws the 50 sessions with the newest activity and says
    how to see the rest (drawing 25,000 took 12 s); --limit and the other formats give
    as many as asked, or all."""
    import shutil
    import sqlite3

    db = tmp_path / "opencode.db"
    shutil.copyfile(SAMPLES / "text" / "opencode.db", db)
    with sqlite3.connect(db) as conn:
        cols = [c[1] for c in conn.execute("PRAGMA table_info(session)")]
        (row,) = conn.execute("SELECT * FROM session").fetchall()
        for n in range(59):  # 60 top-level sessions, one a minute
            values = dict(zip(cols, row, strict=True))
            values["id"] = f"ses_zz{n:024d}"
            values["time_updated"] = row[cols.index("time_updated")] + 60_000 * (n + 1)
            conn.execute(
                f"INSERT INTO session ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [values[c] for c in cols],
            )

    def listed(*args: str) -> tuple[list[str], str]:
        result = _cli("sessions", "--db", str(db), "--format", "table", *args, columns="240")
        assert result.returncode == 0, result.stderr
        text = result.stdout.decode()
        return re.findall(r"ses_\w+", text), text

    ids, text = listed()
    assert len(ids) == 50 and ids[0] == "ses_zz" + "58".zfill(24)  # the newest first
    assert "more not shown: --limit N for more" in text
    ids, text = listed("--limit", "55")
    assert len(ids) == 55 and "more not shown" not in text
    ids, text = listed("--limit", "60")
    assert len(ids) == 60 and "more not shown" not in text
    whole = _cli("sessions", "--db", str(db), "--format", "json", columns=None)
    assert len(json.loads(whole.stdout)) == 60


def test_a_usage_table_draws_its_last_rows_and_the_total_of_all(monkeypatch):
    """A table of more rows than ``TABLE_ROWS`` draws the last ones (the latest: days in
    order), says how many it left out and how to get every row, and totals them all."""
    from opencode_events.reports.usage import UsageReport, UsageRow, _total

    monkeypatch.setattr(tables, "TABLE_ROWS", 4)
    days = [f"2026-11-{day:02}" for day in range(1, 7)]
    rows = [UsageRow(day=day, inferences=1, input_tokens=10, cost=0.5) for day in days]
    out = io.StringIO()
    report = UsageReport(by="day", rows=rows, total=_total(rows), stored=True)
    tables.usage_table(report, out=out, store=True, width=160)
    headers, body = _grid(out.getvalue())
    assert [row[0] for row in body] == [*days[2:], "total"]
    assert body[-1][headers.index("input")] == "60" and body[-1][headers.index("steps")] == "6"
    assert "the last 4 of 6 rows; the total is of all" in " ".join(out.getvalue().split())
    out = io.StringIO()  # no more than that: every row, and nothing said
    report = UsageReport(by="day", rows=rows[:4], total=_total(rows[:4]), stored=True)
    tables.usage_table(report, out=out, store=True, width=160)
    assert len(_grid(out.getvalue())[1]) == 5 and "the last" not in out.getvalue()


@pytest.mark.parametrize("locale", LOCALES_WITHOUT_UTF8)
@pytest.mark.parametrize("report", [["sessions"], ["usage", "--by", "session"], ["context"]])
def test_a_table_in_a_locale_without_utf8_writes_what_it_can(locale, report, tmp_path):
    """Where stdout's encoding lacks a character (a CJK title, the tables' own `·` and `…`):
    a `?` for each column it takes, never a traceback."""
    db = with_a_title(tmp_path / "opencode.db", "修复失败的测试 · 🚀")
    done = subprocess.run(
        [sys.executable, "-m", "opencode_events", *report, "--db", str(db), "--format", "table"],
        capture_output=True,
        timeout=60,
        cwd=REPO,
        env={**in_locale(locale), "COLUMNS": "200"},
    )
    said = done.stderr.decode().splitlines()  # context's note of a price it lacks, at most
    assert done.returncode == 0 and all(line.startswith("note: ") for line in said), said
    text = done.stdout.decode("ascii")  # every byte ASCII
    if report == ["sessions"]:
        assert "?????????????? ? ??" in text  # 14 columns of CJK, the dot, the emoji's 2
