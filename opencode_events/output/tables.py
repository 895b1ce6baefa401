"""Tables for people (``sessions``, ``usage``, ``context``), drawn with rich.

With ``pretty``, this is the only code that imports rich; it does so when a table is
drawn, never at import time, so the JSONL paths never load it. Numbers are right-aligned
and thousands-separated; costs are dollars with enough digits to see small runs.

A table fits its width in terminal cells and is never wider (docs/reports.md): columns are
added by usefulness while they fit, those left out are named under it, a total is shown
only beside the token classes it sums, text is cut where it says least and figures never;
too narrow for the columns that must stay, each row is drawn as a record::

    >>> import io
    >>> out = io.StringIO()
    >>> rows = [{"title": "Inspect the repo (@general subagent)", "cost": 0.0048}]
    >>> draw_table([Column("title", lambda r: r["title"], cut_to=8, cut="middle"),
    ...             Column("cost", lambda r: money(r["cost"]), numeric=True)],
    ...            rows, out=out, width=30)
    >>> print(out.getvalue().splitlines()[3])
    │ Inspect …bagent) │ $0.0048 │
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = [
    "Column",
    "draw_table",
    "money",
    "count",
    "sessions_table",
    "usage_table",
    "TABLE_ROWS",
    "context_table",
    "top_screen",
    "print_renderable",
]


@dataclass(frozen=True)
class Column:
    """One column of a table. ``drop`` 0: always shown; else the column may be left out when
    the terminal is too narrow, those with the highest ``drop`` first (3 and more: the
    decoration, which goes before any text is cut). ``cut_to``: a text column that may be
    cut down to that many cells, losing its ``cut`` (``end``: an id keeps its prefix,
    ``middle``: a title keeps both ends, ``start``: a path keeps its informative end,
    ``items``: a list keeps its first items whole).
    ``sums``: the total of the ``part_of_total`` columns (the token classes); it is shown
    only beside every one of them that holds something, so the visible figures add up."""

    header: str
    value: Callable[[Any], Any]
    numeric: bool = False
    style: str | None = None
    max_width: int | None = None
    drop: int = 0
    cut_to: int | None = None
    cut: str = "end"
    part_of_total: bool = False
    sums: bool = False


def count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int | float) and value == value else "-"


def compact_tokens(value: Any) -> str:
    """A token count in four characters or so: 950, 18.2k, 1.25M."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "-"
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.2f}M"


def money(value: Any) -> str:
    """Dollars: cents from a dollar up, four decimal places below, and two significant
    digits below $0.0001 ($0.000065), never in exponent notation."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    if value == 0:
        return "$0.00"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    if abs(value) >= 0.0001:
        return f"${value:.4f}"
    if abs(value) < 1e-10:  # a fraction of a nano-dollar: no 300-digit cell
        return "<$0.0000000001" if value > 0 else ">-$0.0000000001"
    return f"${value:.{1 - math.floor(math.log10(abs(value)))}f}"


def draw_table(
    columns: Sequence[Column],
    rows: Sequence[Any],
    *,
    out: TextIO,
    title: str | None = None,
    total: Any = None,
    caption: str | None = None,
    width: int | None = None,
    empty: str = "nothing to show",
) -> None:
    """Draw ``rows`` as a table that fits ``width`` cells (default: the terminal's; off a
    terminal ``$COLUMNS``, else 240). The columns that do not fit are left out as ``_fit``
    says, and named under the table; when even the columns that must stay do not fit, each
    row is drawn as a record (one line a column) instead: never wider than the terminal,
    every figure whole. No rows: one line saying ``empty``."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..paths import terminal_columns
    from .pretty import passes_broken_pipe, showable
    from .rows import visible

    console = passes_broken_pipe(Console(file=showable(out), width=width, soft_wrap=False))
    if width is None and not out.isatty():
        console.width = terminal_columns() or 240  # a table saved to a file is read at leisure
    width = console.width
    if title is not None:
        title = visible(title)
    if caption is not None:
        caption = visible(caption)
    if not rows and total is None:
        for line in (title, empty, caption):
            if line:
                console.print(Text(line, overflow="fold"))
        return
    cells = [[visible(str(column.value(row))) for column in columns] for row in rows]
    footers = None if total is None else [visible(str(column.value(total))) for column in columns]
    fit = _fit(columns, cells, footers, width)
    if fit is None:
        _draw_records(console, columns, cells, footers, title=title, caption=caption)
        return
    if fit.hidden:  # never leave out figures unsaid: the row would read as complete
        note = f"not shown at this width: {', '.join(fit.hidden)}"
        caption = f"{caption}\n{note}" if caption else note

    table = Table(  # Text, not markup, here too: a note may hold "[…]"
        title=None if title is None else Text(title),
        caption=None if caption is None else Text(caption),
        show_footer=footers is not None,
        header_style="bold",
        expand=False,
    )
    for index, cells_wide in fit.widths.items():
        column = columns[index]
        table.add_column(
            Text(_wrap_header(column.header, cells_wide)),
            justify="right" if column.numeric else "left",
            style=column.style,
            footer="" if footers is None else Text(_cut(footers[index], cells_wide, column.cut)),
            width=cells_wide,
            no_wrap=True,
        )
    shown = list(fit.widths)
    for row in cells:
        # Text, not markup: a prompt like "[child-task] …" must print as written.
        table.add_row(*(Text(_cut(row[i], fit.widths[i], columns[i].cut)) for i in shown))
    console.print(table)


_NOTHING = frozenset({"", "0", "-", "$0.00"})
_PAD = 3  # a column's padding (a cell each side) and the border on its left
_DECORATION = 3  # a column this droppable or more is left out before any text is cut


@dataclass
class _Fit:
    widths: dict[int, int]  # the columns shown, in order, and the cells each is given
    hidden: list[str]  # the headers of those left out that held something


def _fit(
    columns: Sequence[Column], cells: list[list[str]], footers: list[str] | None, width: int
) -> _Fit | None:
    """Which columns a table of ``width`` cells shows, and how wide each is; None when
    even the columns that must stay (no ``drop``) do not fit: then the rows are drawn as
    records.

    Droppable columns with nothing in them (all zero or empty) go unsaid. Then, while they
    fit: the droppable columns, most useful (lowest ``drop``) first, at their narrowest —
    the total only together with every token class it sums that holds something, so the
    figures shown add up; the text cut to its ``cut_to`` grows back; the decoration
    (``drop`` of ``_DECORATION`` or more) is added; every column grows to its full width, a
    header wrapped at its spaces back on one line. A column that does not fit is skipped and
    a less useful one that does is still added: no room is left unused for want of order."""
    from rich.cells import cell_len  # terminal cells: a CJK character takes two

    def values(index: int) -> list[str]:
        return [row[index] for row in cells] + ([footers[index]] if footers else [])

    longest: dict[int, int] = {}  # the widest value, as far as ``max_width`` allows
    least: dict[int, int] = {}  # the narrowest the column may be
    whole: dict[int, int] = {}  # the widest it would be: its values and its header
    for index, column in enumerate(columns):
        wide = max(map(cell_len, values(index)), default=0)
        if column.max_width is not None:
            wide = min(wide, column.max_width)
        word = max(map(cell_len, column.header.split()), default=0)  # a header may wrap
        longest[index] = max(wide, word)
        least[index] = max(word, wide if column.cut_to is None else min(wide, column.cut_to))
        whole[index] = max(wide, cell_len(column.header))
    empty = {
        i for i, column in enumerate(columns) if column.drop and _NOTHING.issuperset(values(i))
    }
    widths = {i: least[i] for i, column in enumerate(columns) if not column.drop}

    def room() -> int:
        return width - (sum(widths.values()) + _PAD * len(widths) + 1)

    if room() < 0:
        return None
    parts = [i for i, c in enumerate(columns) if c.part_of_total and i not in empty]
    # (drop, order, the columns shown together): a total with its parts, a column alone
    units = [
        (c.drop, 0 if c.sums else 1, i, [i, *(parts if c.sums else [])])
        for i, c in enumerate(columns)
        if i not in widths and i not in empty
    ]
    units.sort()
    left_out: set[int] = set()

    def add(decoration: bool) -> None:
        for drop, _, _, unit in units:
            if (drop >= _DECORATION) != decoration:
                continue
            new = [i for i in unit if i not in widths]
            if not new:
                continue
            if sum(least[i] + _PAD for i in new) <= room():
                widths.update((i, least[i]) for i in new)
                left_out.difference_update(new)
            else:
                left_out.add(unit[0])

    def grow(target: dict[int, int]) -> None:
        # titles and paths before ids: a prefix that tells the rows apart is enough
        for index in sorted(widths, key=lambda i: (columns[i].cut == "end", i)):
            more = min(room(), target[index] - widths[index])
            if more > 0:
                widths[index] += more

    add(decoration=False)
    grow(longest)
    add(decoration=True)
    grow(longest)
    grow(whole)
    hidden = [columns[i].header or "flags" for i in sorted(left_out)]
    return _Fit({i: widths[i] for i in sorted(widths)}, hidden)


def _draw_records(
    console: Any,
    columns: Sequence[Column],
    cells: list[list[str]],
    footers: list[str] | None,
    *,
    title: str | None,
    caption: str | None,
) -> None:
    """A table too wide for the terminal, drawn a row at a time: its first column's value as
    a heading, then one ``header  value`` line per column that holds something. Text is cut
    to the width; a figure is never cut (on a terminal narrower than a figure, it wraps)."""
    from rich.cells import cell_len
    from rich.text import Text

    width = console.width
    named = [i for i in range(1, len(columns)) if columns[i].header]
    empty = {
        i
        for i in named
        if columns[i].drop
        and _NOTHING.issuperset([row[i] for row in cells] + (footers and [footers[i]] or []))
    }
    key = min(max((cell_len(columns[i].header) for i in named), default=0), width // 3)
    lines: list[Text] = []
    if title:
        lines.append(Text(title, style="bold", overflow="fold"))
    records = [(row, False) for row in cells] + ([(footers, True)] if footers else [])
    for row, is_total in records:
        heading = "total" if is_total else _cut(row[0], width, columns[0].cut)
        lines.append(Text(heading, style="bold" if is_total else columns[0].style or "bold"))
        for index in named:
            value = row[index]
            if index in empty or value in ("", "-") or (is_total and value == "total"):
                continue
            label = _cut(columns[index].header, key, "end").ljust(key)
            if not columns[index].numeric:
                value = _cut(value, max(1, width - key - 4), columns[index].cut)
            line = f"  {label}  {value}"
            if cell_len(line) > width:  # the figure on a line of its own, whole
                lines.append(Text(f"  {label}".rstrip()))
                line = f"    {value}"
            lines.append(Text(line, overflow="fold"))
    if caption:
        lines.append(Text(caption, overflow="fold"))
    for line in lines:
        console.print(line)


def _wrap_header(header: str, width: int) -> str:
    """A header on as many lines as ``width`` needs, broken at its spaces."""
    from rich.cells import cell_len

    if cell_len(header) <= width:
        return header
    lines: list[str] = []
    for word in header.split():
        if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _cut(text: str, width: int, where: str = "end") -> str:
    """``text`` in at most ``width`` terminal cells, a "…" where it lost characters: at the
    ``end`` (an id keeps its prefix), in the ``middle`` (a title keeps both ends) or at the
    ``start`` (a path keeps its informative end)."""
    from rich.cells import cell_len

    if cell_len(text) <= width:
        return text
    if width < 1:
        return ""
    room = width - 1
    if where == "items":  # "system +3,995, user +12": whole items, never half a figure
        return _cut_items(text, width)
    if where == "start":
        return "…" + _tail_cells(text, room)
    if where == "middle":
        head = _head_cells(text, (room + 1) // 2)
        return head + "…" + _tail_cells(text, room - cell_len(head))
    return _head_cells(text, room) + "…"


def _cut_items(text: str, width: int) -> str:
    """A list "name +figure, name +figure" cut after the items that fit, then "…"; when
    not even the first fits, its name is cut in the middle and its figure kept."""
    from rich.cells import cell_len

    items = text.split(", ")
    kept = ""
    for item in items:
        longer = f"{kept}, {item}" if kept else item
        if cell_len(longer) + 2 > width:
            break
        kept = longer
    if kept:
        return kept + " …" if kept != text else text
    name, _, figure = items[0].rpartition(" ")
    if not name or cell_len(figure) + 3 > width:
        return _cut(items[0], width, "end")
    return _cut(name, width - cell_len(figure) - 3, "middle") + " " + figure + " …"


def _head_cells(text: str, width: int) -> str:
    """The longest start of ``text`` that fits ``width`` cells."""
    from rich.cells import get_character_cell_size

    used = 0
    for index, char in enumerate(text):
        used += get_character_cell_size(char)
        if used > width:
            return text[:index]
    return text


def _tail_cells(text: str, width: int) -> str:
    """The longest end of ``text`` that fits ``width`` cells."""
    return _head_cells(text[::-1], width)[::-1]


def _prefix_width(ids: Any, least: int = 12) -> int:
    """Cells for an id cut to a prefix that still tells the rows apart (and that
    ``--session`` accepts): at least ``least`` characters, and the "…"."""
    ids = sorted(set(ids))
    length = least
    for first, second in zip(ids, ids[1:], strict=False):
        common = next(
            (n for n, (a, b) in enumerate(zip(first, second, strict=False)) if a != b), len(first)
        )
        length = max(length, common + 1)
    return length + 1


def sessions_table(
    summaries: Sequence[Any],
    *,
    out: TextIO,
    width: int | None = None,
    fold: bool = True,
    more: bool = False,
) -> None:
    """``sessions``' table: with ``fold`` (as the report was made), every figure but turns
    includes the subagents' (the caption says so, ``+sub``), else each session's own.
    ``more``: the summaries are the first of more (the caption says how to see them)."""
    from ..core.timeutil import format_time

    def tools(s: Any) -> str:
        failed = f" ✗{s.tool_failures:,}" if s.tool_failures else ""
        return f"{s.tool_calls:,}{failed}"

    columns = [
        Column("id", lambda s: s.id, style="cyan", cut_to=_prefix_width(s.id for s in summaries)),
        Column("updated", lambda s: format_time(s.time_updated), drop=3),
        Column("title", lambda s: s.title or "", max_width=40, cut_to=11, cut="middle"),
        Column("agent", lambda s: s.agent or "", drop=5),
        Column("model", lambda s: s.model or "", max_width=24, drop=4, cut_to=10, cut="middle"),
        Column(
            "directory", lambda s: s.directory or "", max_width=32, drop=6, cut_to=12, cut="start"
        ),
        Column("turns", lambda s: count(s.turns), numeric=True, drop=1),
        Column("steps", lambda s: count(s.inferences), numeric=True, drop=2),
        Column("tools", tools, numeric=True, drop=1),
        Column("input", lambda s: count(s.input_tokens), numeric=True, drop=1),
        Column("output", lambda s: count(s.output_tokens), numeric=True, drop=1),
        Column("reasoning", lambda s: count(s.reasoning_tokens), numeric=True, drop=2),
        Column("cache read", lambda s: count(s.cache_read_tokens), numeric=True, drop=2),
        Column("cache write", lambda s: count(s.cache_write_tokens), numeric=True, drop=2),
        Column(
            "cost",
            lambda s: money(s.cost) + ("*" if getattr(s, "forked", False) else ""),
            numeric=True,
        ),
        Column("sub", lambda s: count(s.subagent_sessions), numeric=True, drop=3),
        Column(
            "live",
            lambda s: "●" if s.in_flight else ("stale" if s.state == "stale" else ""),
            drop=3,
        ),
    ]
    figures = "figures +sub: with subagents'" if fold else "figures: own, no subagents'"
    caption = (
        f"{len(summaries)} session(s) · turns: prompts · steps: model calls · {figures} · "
        "sub: subagent sessions · ● in flight"
    )
    undone = [s for s in summaries if getattr(s, "undone_inferences", 0)]
    if undone:  # counted, as OpenCode counts them until the next prompt: said, not hidden
        steps = sum(s.undone_inferences for s in undone)
        caption += (
            f" · {len(undone)} with a pending /undo: {steps:,} undone step(s), "
            f"{money(sum(s.undone_cost for s in undone))}, counted"
        )
    forks = sum(1 for s in summaries if getattr(s, "forked", False))
    if forks:  # OpenCode's totals include a fork's copied history; usage counts it once
        caption += (
            f" · * {forks} fork(s): figures include the history copied from the original,"
            " as OpenCode's totals do (usage counts it once)"
        )
    if more:
        caption = (
            f"the {len(summaries)} with the newest activity; more not shown: --limit N for "
            f"more, --format csv or json for all\n{caption}"
        )
    draw_table(
        columns,
        summaries,
        out=out,
        width=width,
        caption=caption if summaries else None,
        empty="no sessions",
    )


def _duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or not math.isfinite(ms):
        return ""
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _session_prefix(width: int) -> Column:
    """The session of each row where several sessions share a table: never left out, and
    cut only as far as a prefix that tells them apart and ``--session`` accepts."""
    return Column("session", lambda r: r.session_id or "", style="cyan", cut_to=width)


# The rows of a usage table at most: a year or two of days, a session's turns; drawing the
# 268,000 steps of the 10,000-session bench database took 62 s and 1.8 GB.
TABLE_ROWS = 1000


def usage_table(
    report: Any,
    *,
    out: TextIO,
    store: bool,
    width: int | None = None,
    tz: Any = None,
    scope: str | None = None,
    row_count: int | None = None,
) -> None:
    """A usage report: label columns by ``--by``, then tokens by class and cost; times in
    ``tz`` (``--tz``; default: local time). ``scope``, the sessions it covers where the
    command line did not name them ("every session"), opens the caption. At most the last
    ``TABLE_ROWS`` rows are drawn (the latest: turns, steps, days and sessions come in
    time order), the total of every row under them. ``row_count``: how many rows the whole
    report has, when ``report`` holds only its last ones (``stored_usage_last``)."""
    from ..core.timeutil import format_time as format_local

    def format_time(ms: Any) -> str:
        return format_local(ms, tz)

    by = report.by
    every = len(report.rows) if row_count is None else row_count
    rows = report.rows[max(0, len(report.rows) - TABLE_ROWS) :]
    earlier = every - len(rows)
    several_sessions = len({r.session_id for r in rows if r.session_id}) > 1 and by in (
        "turn",
        "step",
    )
    prefix = _prefix_width(r.session_id for r in rows if r.session_id)
    label: list[Column] = []
    if by == "turn":

        def turn(r: Any) -> str:
            return f"{r.turn}" + (" (open)" if r.open else "") if r.turn is not None else "total"

        if several_sessions:
            label.append(_session_prefix(prefix))
        # from the store a row is a turn (a prompt); from a stream, a step (its `turn`
        # field numbers the steps, as the usage event's does)
        label.append(Column("turn" if store else "step", turn, numeric=True))
        if store:
            label += [
                Column("started", lambda r: format_time(r.started) if r.started else "", drop=3),
                Column("took", lambda r: _duration(r.duration_ms), numeric=True, drop=4),
                Column(
                    "prompt",
                    lambda r: r.prompt or "",
                    max_width=40,
                    drop=2,
                    cut_to=12,
                    cut="middle",
                ),
                Column("steps", lambda r: count(r.inferences), numeric=True, drop=2),
                Column("tools", lambda r: count(r.tool_calls), numeric=True, drop=2),
            ]
        else:
            label.append(Column("reason", lambda r: r.reason or "", drop=2))
    elif by == "step":
        label += [
            Column(  # a step's time of 0 is a time; one that is none shows "-"
                "started", lambda r: "total" if r is report.total else format_time(r.started)
            ),
            Column("took", lambda r: _duration(r.duration_ms), numeric=True, drop=4),
        ]
        if several_sessions:
            label.append(_session_prefix(prefix))
        label += [
            Column("model", lambda r: r.model or "", drop=2, cut_to=10, cut="middle"),
            Column("agent", lambda r: r.agent or "", drop=3),
            Column("reason", lambda r: r.reason or "", drop=2),
        ]
    else:
        header = by  # session, model, agent, day, week, month, project

        def key(r: Any) -> str:
            value = getattr(r, "session_id" if by == "session" else by)
            return value if value else "total"

        label.append(
            Column(header, key, style="cyan", cut_to=prefix if by == "session" else 12, cut="end")
        )
        if by == "session":
            label.append(
                Column("started", lambda r: format_time(r.started) if r.started else "", drop=3)
            )
        label.append(Column("steps", lambda r: count(r.inferences), numeric=True, drop=2))
    figures = [
        Column("input", lambda r: count(r.input_tokens), numeric=True, drop=1, part_of_total=True),
        Column(
            "output", lambda r: count(r.output_tokens), numeric=True, drop=1, part_of_total=True
        ),
        # the total sums these: shown only beside every one of them that holds something
        Column(
            "reasoning",
            lambda r: count(r.reasoning_tokens),
            numeric=True,
            drop=1,
            part_of_total=True,
        ),
        Column(
            "cache read",
            lambda r: count(r.cache_read_tokens),
            numeric=True,
            drop=1,
            part_of_total=True,
        ),
        Column(
            "cache write",
            lambda r: count(r.cache_write_tokens),
            numeric=True,
            drop=1,
            part_of_total=True,
        ),
        Column("total", lambda r: count(r.total_tokens), numeric=True, drop=1, sums=True),
        Column("cost", lambda r: money(r.cost), numeric=True),
    ]
    if any(r.subagent_cost is not None for r in rows):
        figures.append(
            Column(
                "subagents",
                lambda r: money(r.subagent_cost) if r.subagent_cost is not None else "",
                numeric=True,
                drop=2,
            )
        )
    if any(r.in_flight or r.stale for r in rows):
        figures.append(
            Column("", lambda r: "● in flight" if r.in_flight else ("stale" if r.stale else ""))
        )
    said = ([scope] if scope else []) + list(report.notes)
    if earlier:
        said.insert(
            0,
            f"the last {len(rows):,} of {every:,} rows; the total is of all "
            "(--format csv, jsonl or json: every row)",
        )
    if any(r.subagent_cost is not None for r in rows):  # folded rows say which they are
        said.append("figures +sub: with subagents' (subagents: their cost)")
    caption = "; ".join(said) if said else None
    if not rows and not every:  # nothing in what was chosen: a line says so, and of what
        draw_table(label + figures, [], out=out, empty="no inference", caption=caption, width=width)
        return
    draw_table(label + figures, rows, out=out, total=report.total, caption=caption, width=width)


_TITLE_ROOM = 12  # a title's characters kept before the agent and model columns go


def top_screen(
    board: Any, now_ms: float, *, width: int, height: int | None = None, live: bool = True
) -> Any:
    """``top``'s screen for a ``reports.top.Board`` at ``now_ms``: a header with today's and
    this week's spend, one row a session (what a busy one runs, and for how long), the
    keys at the foot (``live``: read from the keyboard). Fits ``width`` (80 columns keep
    every figure: the title is cut first, then the model and the agent; narrower, whole
    columns go, the session's id and cost last) and ``height`` (rows go, never the foot)."""
    import time

    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .pretty import visible

    busy = sum(1 for r in board.rows if r.state == "busy")
    clock = time.strftime("%H:%M:%S", time.localtime(now_ms / 1000))
    header = Text(no_wrap=True, overflow="ellipsis")
    header.append("opencode-events top", "bold")
    header.append(f"  today {money(board.today)}  this week {money(board.week)}", "bold yellow")
    header.append(f"  {busy} busy  {clock}", "dim")
    styles = {"busy": "bold green", "stale": "red", "idle": "dim"}
    # The screen: the header (and why the store cannot be read), a blank line, the
    # columns' names, the rows, a blank line, the keys and a line for each mark.
    rows = board.rows
    why = "" if board.readable else f"store not readable: {_problem(board)}"
    if height is not None:
        from rich.console import Console

        # the reason is wrapped, never cut: as many lines as it takes at this width
        said = len(Text(why).wrap(Console(width=max(1, width)), max(1, width))) if why else 0
        room = height - 5 - said
        rows = rows[: max(1, room - len(_marks(rows[: max(1, room)])))]
    any_running = any(r.running for r in board.rows)
    cells: dict[str, list[str]] = {
        "agent": [visible(row.agent or "") for row in rows],
        "model": [visible(row.model or "") for row in rows],
        "doing": [_doing(row, now_ms) for row in rows] if any_running else [],
        "turns": [count(row.turns) for row in rows],
        "tokens": [compact_tokens(row.tokens) for row in rows],
        "ctx": [compact_tokens(row.context_tokens) for row in rows],
        "cost": [
            money(row.cost)
            + ("+" if row.subagents else " ")
            + ("↶" if getattr(row, "undone_cost", 0.0) else "")
            + ("*" if getattr(row, "forked", False) else "")
            for row in rows
        ],
    }
    most = {"agent": 8, "model": 12 if any_running and width < 96 else 16, "doing": 16}
    wide = {
        name: min(most.get(name, width), max(map(len, [name, *values])))
        for name, values in cells.items()
    }
    # Narrower, whole columns go, in this order, before the session's id (its 8 characters
    # and the ellipsis of its title) and the cost: with what a busy session runs, the agent
    # goes first at 96 columns. The agent and the model go before the title is cut to less
    # than ``_TITLE_ROOM`` characters (in a tmux split the title tells the sessions apart);
    # the figures only when the id itself has no room.
    names = ["agent", "model", *(["doing"] if any_running else []), "turns", "tokens", "ctx"]
    names.append("cost")
    if any_running and width < 96:
        names.remove("agent")
    for going in ("agent", "model", "ctx", "tokens", "turns", "doing"):
        session = 9 + (_TITLE_ROOM if going in ("agent", "model") else 0)
        if 5 + session + sum(wide[n] for n in names) + 2 * (len(names) + 1) <= width:
            if going in ("agent", "model"):
                continue  # the figures still fit with a title to read
            break
        if going in names:
            names.remove(going)
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False, show_edge=False)
    table.add_column("state", no_wrap=True, width=5)
    table.add_column("session", no_wrap=True, overflow="ellipsis", ratio=1, min_width=9)
    for name in names:
        numeric = name in ("turns", "tokens", "ctx", "cost")
        table.add_column(
            name,
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=wide[name] if numeric else None,
            max_width=most.get(name),
        )
    for n, row in enumerate(rows):
        table.add_row(
            Text(row.state, style=styles.get(row.state)),
            Text(f"{row.session_id[4:12]} {visible(row.title or '')}".rstrip()),
            *(Text(cells[name][n], style="green" if name == "doing" else "") for name in names),
        )
    if not board.rows and board.readable:
        table.add_row("", Text(f"no sessions in {visible(board.path)} yet", style="dim"))
    said = "q quits · " if live else ""
    keys = Text(
        f"{said}tokens and cost with subagents' (+)", style="dim", no_wrap=True, overflow="ellipsis"
    )
    notes = [Text(mark, style="dim", no_wrap=True, overflow="ellipsis") for mark in _marks(rows)]
    top = [header]
    if why:  # under the header (wrapped, never cut); the last rows kept
        top.append(Text(why, "red"))
    return Group(*top, Text(""), table, Text(""), keys, *notes)


def _problem(board: Any) -> str:
    """Why the board's store cannot be read, as it may be shown."""
    from .pretty import visible

    return visible(getattr(board, "problem", None) or "")


def _doing(row: Any, now_ms: float) -> str:
    """What a busy session runs and for how long (``bash 12.0s``); empty for another."""
    from .pretty import visible

    if not row.running:
        return ""
    since = row.running_since
    took = _duration(now_ms - since) if isinstance(since, int) else ""
    return f"{visible(row.running)} {took}".strip()


def _marks(rows: Any) -> list[str]:
    """What the marks on ``rows`` mean, a line each (each fits 80 columns)."""
    marks = []
    if any(getattr(row, "undone_cost", 0.0) for row in rows):
        marks.append("↶ a pending /undo's steps, counted until the next prompt")
    if any(getattr(row, "forked", False) for row in rows):
        marks.append("* a fork: with the history it copied")
    return marks


def print_renderable(renderable: Any, *, out: TextIO, width: int | None = None) -> None:
    """Print what ``top_screen`` made, once (off a terminal: 80 columns unless ``width``)."""
    from rich.console import Console

    from .pretty import passes_broken_pipe, showable

    width = width or (None if out.isatty() else 80)
    console = passes_broken_pipe(Console(file=showable(out), width=width))
    console.print(renderable)


def _share(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, float) else "-"


def context_table(
    report: Any, *, out: TextIO, per_step: bool = False, width: int | None = None
) -> None:
    """``context``'s table of a ``reports.context.ContextReport``: what the last prompt
    holds by source, and what each source cost; ``per_step`` first shows how the prompt
    grew, step (model call) by step."""
    if per_step:
        _context_steps(report, out=out, width=width)
    columns = [
        Column("source", lambda r: r["source"], style="cyan", cut_to=12, cut="middle"),
        Column("tokens", lambda r: count(r["tokens"]), numeric=True),
        Column("share", lambda r: _share(r["share"]), numeric=True, drop=1),
        Column("cost", lambda r: money(r["cost"]), numeric=True),
    ]
    total = {
        "source": "total",
        "tokens": report.context_tokens,
        "share": 1.0 if report.context_tokens else None,
        "cost": report.cost,
    }
    subs = f" + {len(report.subagents)} subagent(s)" if report.subagents else ""
    caption = f"tokens: the last prompt · cost: the session{subs} · output: generated"
    if report.unpriced:
        caption += " · -: no price"
    draw_table(
        columns,
        report.source_rows(),
        out=out,
        title=f"Context of {report.session_id}",
        total=total,
        caption=caption,
        width=width,
    )


def _context_steps(report: Any, *, out: TextIO, width: int | None) -> None:
    previous: dict[str, int] = {}
    rows = []
    for index, i in enumerate(report.inferences, start=1):
        before = previous.get(i.session_id)
        growth = "" if before is None else f"{i.prompt_tokens - before:+,}"
        added = sorted(i.added.items(), key=lambda item: (-item[1], item[0]))
        rows.append(
            {
                "n": index,
                "message": i.message_id,
                "session": "" if i.session_id == report.session_id else "sub " + i.session_id,
                "prompt": i.prompt_tokens,
                "growth": growth,
                "added": ", ".join(f"{s} +{t:,}" for s, t in added[:4])
                + (" …" if len(added) > 4 else ""),
                "cost": i.cost,
                "note": "compaction (reset after)"
                if i.compaction
                else ("undone (/undo)" if i.undone else ""),
                # the mark the narrowest table keeps, beside the step (the note goes first)
                "mark": " ⟲" if i.compaction else (" ↶" if i.undone else ""),
            }
        )
        previous[i.session_id] = i.prompt_tokens
    marks = {row["mark"].strip() for row in rows} - {""}
    legend = {"⟲": "⟲ compaction (reset after)", "↶": "↶ undone (/undo)"}
    caption = "growth: over the previous prompt of the same session; cost: OpenCode's"
    if marks:
        caption += "; " + ", ".join(legend[mark] for mark in sorted(marks, reverse=True))
    columns = [
        Column("step", lambda r: count(r["n"]) + r["mark"], numeric=True),
        Column("message", lambda r: r["message"], style="cyan", drop=3, cut_to=14),
        Column("session", lambda r: r["session"], max_width=24, drop=2, cut_to=16),
        Column("prompt", lambda r: count(r["prompt"]), numeric=True),
        Column("growth", lambda r: r["growth"], numeric=True, drop=1),
        Column("added", lambda r: r["added"], max_width=60, drop=1, cut_to=16, cut="items"),
        Column("cost", lambda r: money(r["cost"]), numeric=True),
        Column("", lambda r: r["note"], drop=4),
    ]
    draw_table(
        columns,
        rows,
        out=out,
        title="Steps (model calls; prompt = input + cache read + cache write)",
        caption=caption,
        width=width,
    )
