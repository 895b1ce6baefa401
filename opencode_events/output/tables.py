"""Tables for people (``sessions``, ``usage``, ``context``), drawn with rich.

With ``render``, this is the only code that imports rich; it does so when a table is
drawn, never at import time, so the JSONL paths never load it. Numbers are right-aligned
and thousands-separated; costs are dollars with enough digits to see small runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["Column", "draw_table", "money", "count", "top_screen", "print_renderable"]


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Any], Any]
    numeric: bool = False
    style: str | None = None
    max_width: int | None = None
    drop: int = 0  # when the table is too wide, columns with the highest ``drop`` go first
    cut_to: int | None = None  # then columns with ``cut_to`` are cut (…) down to that width


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
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from .pretty import passes_broken_pipe
    from .rows import visible

    console = passes_broken_pipe(Console(file=out, width=width, soft_wrap=False))
    if width is None and not out.isatty():
        console.width = 240  # a table saved to a file is read at leisure
    cells = [[visible(str(column.value(row))) for column in columns] for row in rows]
    footers = None if total is None else [visible(str(column.value(total))) for column in columns]
    shown, hidden, cut, needed = _fitting(columns, cells, footers, console.width)
    if needed > console.width:  # what is left cannot be cut: the terminal wraps it instead,
        console.width = needed  # rather than a figure shown as "4,5…"
    if hidden:  # never leave out figures unsaid: the row would read as complete
        note = f"not shown at this width: {', '.join(hidden)}"
        caption = f"{caption}\n{note}" if caption else note

    table = Table(  # Text, not markup, here too: a note may hold "[…]"
        title=None if title is None else Text(visible(title)),
        caption=None if caption is None else Text(visible(caption)),
        show_footer=footers is not None,
        header_style="bold",
        expand=False,
    )
    for index in shown:
        column = columns[index]
        table.add_column(
            column.header,
            justify="right" if column.numeric else "left",
            style=column.style,
            footer="" if footers is None else Text(footers[index]),
            max_width=cut.get(index, column.max_width),
            overflow="ellipsis",
            no_wrap=True,
        )
    for row in cells:
        # Text, not markup: a prompt like "[child-task] …" must print as written.
        table.add_row(*(Text(row[index]) for index in shown))
    console.print(table)


_NOTHING = frozenset({"", "0", "-", "$0.00"})


_DECORATION = 3  # a column this droppable or more goes before any column is cut


def _fitting(
    columns: Sequence[Column], cells: list[list[str]], footers: list[str] | None, width: int
) -> tuple[list[int], list[str], dict[int, int], int]:
    """The indexes of the columns to show, the headers of those left out that held
    something, the widths columns are cut to, and the width the result needs. Until the
    table fits: droppable columns with nothing in them (all zero or empty) go, then the
    decoration (``drop`` of ``_DECORATION`` or more), then the columns that may be cut are
    cut as far as their ``cut_to``, then the other droppable columns go, the most droppable
    first. The rest (ids cut to a prefix, the figures) is never cut further: on a terminal
    too narrow even for that, the table is wider than the terminal."""
    from rich.cells import cell_len  # terminal cells: a CJK character takes two

    def values(index: int) -> list[str]:
        return [row[index] for row in cells] + ([footers[index]] if footers else [])

    def natural(index: int) -> int:
        column = columns[index]
        longest = max([cell_len(column.header), *map(cell_len, values(index))])
        return min(longest, cut.get(index, column.max_width) or longest) + 3  # padding, border

    empty = {i for i in range(len(columns)) if _NOTHING.issuperset(values(i))}
    shown = list(range(len(columns)))
    hidden: list[str] = []
    cut: dict[int, int] = {}

    def excess() -> int:
        return sum(natural(i) for i in shown) + 1 - width

    def drop_while_too_wide(lowest: int) -> None:
        while excess() > 0:
            candidates = [
                i for i in shown if columns[i].drop >= lowest or (columns[i].drop and i in empty)
            ]
            if not candidates:
                return
            index = max(candidates, key=lambda i: (i in empty, columns[i].drop, i))
            shown.remove(index)
            if index not in empty:
                hidden.append(columns[index].header or "flags")

    drop_while_too_wide(_DECORATION)
    for index in reversed(shown):  # the last such column first: the id before it stays whole
        floor, over = columns[index].cut_to, excess()
        now = natural(index) - 3
        if over > 0 and floor is not None and now > floor:
            cut[index] = max(floor, now - over)
    drop_while_too_wide(1)
    return shown, hidden, cut, max(width, width + excess())


def _tail(path: str | None, width: int) -> str:
    """The end of a path, which says more than its start."""
    if not path:
        return ""
    return path if len(path) <= width else "…" + path[-(width - 1) :]


def sessions_table(summaries: Sequence[Any], *, out: TextIO, width: int | None = None) -> None:
    from ..core.timeutil import format_time

    def tools(s: Any) -> str:
        failed = f" ✗{s.tool_failures:,}" if s.tool_failures else ""
        return f"{s.tool_calls:,}{failed}"

    columns = [
        Column("id", lambda s: s.id, style="cyan", cut_to=18),  # still a prefix to look up
        Column("updated", lambda s: format_time(s.time_updated), drop=3),
        Column("title", lambda s: s.title or "", max_width=32, cut_to=11),
        Column("agent", lambda s: s.agent or "", drop=5),
        Column("model", lambda s: s.model or "", max_width=20, drop=4),
        Column("directory", lambda s: _tail(s.directory, 24), drop=6),
        Column("turns", lambda s: count(s.turns), numeric=True),
        Column("inf.", lambda s: count(s.inferences), numeric=True, drop=2),
        Column("tools", tools, numeric=True),
        Column("input", lambda s: count(s.input_tokens), numeric=True),
        Column("output", lambda s: count(s.output_tokens), numeric=True),
        Column("reason.", lambda s: count(s.reasoning_tokens), numeric=True, drop=2),
        Column("c.read", lambda s: count(s.cache_read_tokens), numeric=True, drop=2),
        Column("c.write", lambda s: count(s.cache_write_tokens), numeric=True, drop=2),
        Column("cost+sub", lambda s: money(s.total_cost), numeric=True),
        Column("sub", lambda s: count(len(s.children)), numeric=True, drop=3),
        Column(
            "live",
            lambda s: "●" if s.in_flight else ("stale" if s.state == "stale" else ""),
            drop=3,
        ),
    ]
    caption = f"{len(summaries)} session(s); cost+sub includes subagents; ● in flight"
    draw_table(columns, summaries, out=out, width=width, caption=caption)


def _duration(ms: Any) -> str:
    if not isinstance(ms, int | float) or not math.isfinite(ms):
        return ""
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _session_prefix() -> Column:
    """The session of each row where several sessions share a table: never left out, and
    cut only as far as a prefix that tells them apart and ``--session`` accepts."""
    return Column("session", lambda r: r.session_id or "", style="cyan", cut_to=18)


def usage_table(
    report: Any, *, out: TextIO, store: bool, width: int | None = None, tz: Any = None
) -> None:
    """A usage report: label columns by ``--by``, then tokens by class and cost; times in
    ``tz`` (``--tz``; default: local time)."""
    from ..core.timeutil import format_time as format_local

    def format_time(ms: Any) -> str:
        return format_local(ms, tz)

    by = report.by
    rows = report.rows
    several_sessions = len({r.session_id for r in rows if r.session_id}) > 1 and by in (
        "turn",
        "step",
    )
    label: list[Column] = []
    if by == "turn":

        def turn(r: Any) -> str:
            return f"{r.turn}" + (" (open)" if r.open else "") if r.turn is not None else "total"

        if several_sessions:
            label.append(_session_prefix())
        label.append(Column("turn", turn, numeric=True))
        if store:
            label += [
                Column("started", lambda r: format_time(r.started) if r.started else "", drop=3),
                Column("took", lambda r: _duration(r.duration_ms), numeric=True, drop=4),
                Column("prompt", lambda r: r.prompt or "", max_width=40, drop=2),
                Column("inf.", lambda r: count(r.inferences), numeric=True, drop=2),
                Column("tools", lambda r: count(r.tool_calls), numeric=True, drop=2),
            ]
        else:
            label.append(Column("reason", lambda r: r.reason or "", drop=2))
    elif by == "step":
        label += [
            Column("started", lambda r: format_time(r.started) if r.started else "total"),
            Column("took", lambda r: _duration(r.duration_ms), numeric=True, drop=4),
        ]
        if several_sessions:
            label.append(_session_prefix())
        label += [
            Column("model", lambda r: r.model or "", drop=2),
            Column("agent", lambda r: r.agent or "", drop=3),
            Column("reason", lambda r: r.reason or "", drop=2),
        ]
    else:
        header = by  # session, model, agent, day, week, month, project

        def key(r: Any) -> str:
            value = getattr(r, "session_id" if by == "session" else by)
            return value if value else "total"

        label.append(Column(header, key, style="cyan"))
        if by == "session":
            label.append(
                Column("started", lambda r: format_time(r.started) if r.started else "", drop=3)
            )
        label.append(Column("inf.", lambda r: count(r.inferences), numeric=True, drop=2))
    figures = [
        Column("input", lambda r: count(r.input_tokens), numeric=True),
        Column("output", lambda r: count(r.output_tokens), numeric=True),
        Column("reasoning", lambda r: count(r.reasoning_tokens), numeric=True, drop=1),
        Column("cache read", lambda r: count(r.cache_read_tokens), numeric=True, drop=1),
        Column("cache write", lambda r: count(r.cache_write_tokens), numeric=True, drop=1),
        Column("total", lambda r: count(r.total_tokens), numeric=True),
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
    caption = "; ".join(report.notes) if report.notes else None
    draw_table(label + figures, rows, out=out, total=report.total, caption=caption, width=width)


def top_screen(board: Any, now_ms: float, *, width: int, height: int | None = None) -> Any:
    """``top``'s screen for a ``reports.top.Board`` at ``now_ms``: a header with today's and
    this week's spend, one row a session (what a busy one runs, and for how long), the
    keys at the foot. Fits ``width`` (80 columns keep every figure: the title is cut first,
    then the model and the agent)."""
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
    if not board.readable:
        header.append("  (store not readable now)", "red")
    table = Table(expand=True, box=None, header_style="bold", pad_edge=False, show_edge=False)
    any_running = any(r.running for r in board.rows)
    table.add_column("state", no_wrap=True, width=5)
    table.add_column("session", no_wrap=True, overflow="ellipsis", ratio=1, min_width=14)
    table.add_column("agent", no_wrap=True, overflow="ellipsis", max_width=8)
    table.add_column("model", no_wrap=True, overflow="ellipsis", max_width=16)
    if any_running:
        table.add_column("doing", no_wrap=True, overflow="ellipsis", max_width=16)
    for name in ("turns", "tokens", "ctx", "cost"):
        table.add_column(name, justify="right", no_wrap=True)
    styles = {"busy": "bold green", "stale": "red", "idle": "dim"}
    rows = board.rows if height is None else board.rows[: max(0, height - 4)]
    for row in rows:
        cells: list[Any] = [
            Text(row.state, style=styles.get(row.state)),
            Text(f"{row.session_id[4:12]} {visible(row.title or '')}".rstrip()),
            Text(visible(row.agent or "")),
            Text(visible(row.model or "")),
        ]
        if any_running:
            doing = ""
            if row.running:
                since = row.running_since
                took = _duration(now_ms - since) if isinstance(since, int) else ""
                doing = f"{visible(row.running)} {took}".strip()
            cells.append(Text(doing, style="green"))
        cells += [
            count(row.turns),
            compact_tokens(row.tokens),
            compact_tokens(row.context_tokens),
            Text(money(row.cost) + ("+" if row.subagents else " ")),
        ]
        table.add_row(*cells)
    if not board.rows:
        table.add_row("", Text(f"no sessions in {visible(board.path)} yet", style="dim"))
    keys = Text("q quits · cost with subagents (+) · tokens are the session's own", style="dim")
    return Group(header, Text(""), table, Text(""), keys)


def print_renderable(renderable: Any, *, out: TextIO, width: int | None = None) -> None:
    """Print what ``top_screen`` made, once (off a terminal: 80 columns unless ``width``)."""
    from rich.console import Console

    from .pretty import passes_broken_pipe

    console = passes_broken_pipe(Console(file=out, width=width or (None if out.isatty() else 80)))
    console.print(renderable)
