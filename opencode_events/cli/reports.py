"""``sessions`` and ``usage``: the commands that write reports of the store or a stream.

The reports are built in ``reports`` (``sessions_report``, ``store_usage``, ``stream_usage``);
this module chooses the source, then writes a table, JSON, CSV or Markdown.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import OutputError
from .exits import echo_error as _say
from .io import (
    csv_raw_option,
    db_option,
    fold_option,
    no_cache_option,
    open_inputs,
    open_store,
    pipe_safe,
    refuse_stdout_read,
    report_cache,
    report_format,
    report_format_options,
    report_output,
    selection_options,
    time_zone,
    tz_option,
    until_option,
    window_ms,
)
from .quick import USAGE_GROUPINGS, write_stored_sessions


@click.command()
@db_option
@click.option("--since", metavar="WHEN", help="Sessions active since 2h, 7d, 2026-11-01…")
@until_option("Sessions begun by then: 2h, 2026-11-30 (through that day)…")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="At most N sessions (the table on a terminal: 50 without it).",
)
@click.option("--all", "all_sessions", is_flag=True, help="Subagent sessions too.")
@fold_option("Each row's figures with its subagents' (default), or its own.")
@report_format_options
@csv_raw_option
@no_cache_option
@pipe_safe
def sessions(
    db_path: str | None,
    since: str | None,
    until: str | None,
    limit: int | None,
    all_sessions: bool,
    fold: bool,
    fmt: str | None,
    as_json: bool,
    csv_raw: bool,
    no_cache: bool,
) -> None:
    """Sessions in the store, newest activity first, with turns (prompts), steps (model
    calls), tools, tokens and cost; a session's subagents folded in (--no-fold: its own
    figures), their part in the subagent_* fields."""
    from ..reports.sessions import sessions_report
    from ..store.open import store_files

    since_time, until_time = window_ms(since, until)
    out = report_output()
    fmt = report_format(fmt, as_json, out)
    choices = dict(
        since_ms=since_time, limit=limit, all_sessions=all_sessions, fold=fold, until_ms=until_time
    )
    with open_store(db_path) as store:
        refuse_stdout_read(store_files(store))
        cache = report_cache(store, no_cache)
        if fmt == "table":  # drawn for this terminal: never kept
            if limit is None:  # a screenful, not every session of a large database
                choices["limit"] = TABLE_SESSIONS + 1  # one more: whether there are more
            report = sessions_report(store, cache=cache, **choices)
        else:
            write_stored_sessions(store, fmt, out, csv_raw=csv_raw, cache=cache, **choices)
            return
    from ..output.tables import sessions_table

    shown = report.sessions if limit is not None else report.sessions[:TABLE_SESSIONS]
    more = len(shown) < len(report.sessions)
    sessions_table(shown, out=sys.stdout, fold=fold, more=more)


# The rows of the sessions table without --limit: drawing 25,000 took 12 s and 350 MB.
TABLE_SESSIONS = 50


@click.command()
@click.argument("inputs", nargs=-1, metavar="[INPUT]...")
@db_option
@click.option(
    "--session",
    "session_ids",
    multiple=True,
    metavar="ID",
    help="A stored session (id or prefix); repeatable.",
)
@selection_options
@until_option("Spend until then: 2h, 2026-11-30 (through that day, in --tz)…")
@click.option(
    "--by",
    type=click.Choice(USAGE_GROUPINGS),
    default="turn",
    show_default=True,
    help="One row per …",
)
@tz_option("Time zone for --by day, --since dates and the times shown (default: local time).")
@fold_option("Subagents in the turn that ran them (default), or listed apart.")
@report_format_options
@click.option(
    "--github",
    is_flag=True,
    help="Also append the Markdown table to $GITHUB_STEP_SUMMARY and the totals to "
    "$GITHUB_OUTPUT (GitHub Actions).",
)
@csv_raw_option
@no_cache_option
@pipe_safe
def usage(
    inputs: tuple[str, ...],
    db_path: str | None,
    session_ids: tuple[str, ...],
    last: bool,
    since: str | None,
    all_sessions: bool,
    until: str | None,
    by: str,
    tz: str | None,
    fold: bool,
    fmt: str | None,
    as_json: bool,
    github: bool,
    csv_raw: bool,
    no_cache: bool,
) -> None:
    """Tokens and cost per turn (a prompt and its replies), as OpenCode counted them.

    From a stream (INPUT files or stdin: `opencode run --format json` output, normalized
    JSONL, a captured server event stream or an `opencode export` document), one row per
    step (one model call). From the store (--db, --session, --last, --since, --all;
    also the default when stdin is a terminal), one row per turn with subagents folded
    in, or --by step, session, model, agent, day, week, month or project (a stream: all
    but project).
    """
    from ..reports.usage import BY_STREAM, GroupingError, StreamUsage, covers_every_session
    from .quick import (
        UsageRequest,
        stored_usage_last_of,
        stored_usage_of,
        write_stored_usage,
        write_usage,
    )

    zone = time_zone(tz)
    chose_stored = bool(
        db_path is not None or session_ids or last or since or until or all_sessions
    )
    if chose_stored and inputs:
        raise click.UsageError("give either INPUT files or stored sessions (--db …), not both")
    if all_sessions and (session_ids or last):  # --since and --until: a window of them all
        raise click.UsageError("--all already reads every session; leave out the others")
    from_store = chose_stored or (not inputs and sys.stdin is not None and sys.stdin.isatty())
    start, end = window_ms(since, until, zone)  # once: "2h" is read against the clock
    row_count = None  # the report's, where it holds only the rows a table draws
    try:
        if from_store:
            chosen_sessions = UsageRequest(
                db_path=db_path,
                session_ids=session_ids,
                last=last,
                all_sessions=all_sessions,
                by=by,
                fold=fold,
                no_cache=no_cache,
                csv_raw=csv_raw,
            )
            chosen = report_format(fmt, as_json, sys.stdout)
            if chosen != "table" and not github:  # as written, kept in the report cache
                write_stored_usage(chosen_sessions, zone, start, end, chosen, report_output())
                return
            if chosen == "table" and not github:  # the rows drawn: the last TABLE_ROWS
                from ..output.tables import TABLE_ROWS

                report, row_count = stored_usage_last_of(
                    chosen_sessions, zone, start, end, TABLE_ROWS
                )
            else:
                report = stored_usage_of(chosen_sessions, zone, start, end)
        else:
            opened = open_inputs(inputs)
            refuse_stdout_read(inputs or ("-",))
            streamed = StreamUsage(opened, by=by, tz=zone)
            chosen = report_format(fmt, as_json, sys.stdout)
            if chosen in ("json", "jsonl", "csv") and not github:  # --github: the whole report
                live = any(may_grow(file) for _name, file in opened)
                _write_usage_as_read(streamed, chosen, csv_raw=csv_raw, live=live)
                return
            report = streamed.report(list(streamed.rows()))
    except GroupingError as exc:  # the library's words; the command's name its options
        if not from_store and by not in BY_STREAM:
            raise click.UsageError(
                f"--by {by} needs the store (use --db/--session/--last/--all)"
            ) from None
        raise click.UsageError(str(exc)) from None
    if github:
        _to_github(report)
    out = report_output()
    fmt = report_format(fmt, as_json, out)
    if fmt == "table":
        from ..output.tables import usage_table

        scope = None
        if from_store:  # which sessions the table covers, where the command line chose
            every = all_sessions or covers_every_session(
                by, session_ids, last=last, since_ms=start, until_ms=end
            )
            window = _window_words(start, end, zone)
            if every:
                scope = "every session" + (f", {window}" if window else "")
            elif not (session_ids or last) and window:  # an empty window says which it was
                scope = f"the sessions active {window}"
            elif not (session_ids or last):
                scope = "the last session (--all: every session)"
            elif window:
                scope = window
        usage_table(
            report, out=sys.stdout, store=from_store, tz=zone, scope=scope, row_count=row_count
        )
        return
    write_usage(report, fmt, out, csv_raw=csv_raw)


def _window_words(start: int | None, end: int | None, zone: Any) -> str | None:
    """``--since``/``--until`` as the table's caption says them, in the report's zone."""
    from ..core.timeutil import format_time

    if start is not None and end is not None:
        return f"from {format_time(start, zone)} to {format_time(end, zone)}"
    if start is not None:
        return f"since {format_time(start, zone)}"
    if end is not None:
        return f"until {format_time(end, zone)}"
    return None


def _to_github(report: Any) -> None:
    """The report for GitHub Actions: its Markdown appended to the step summary, its totals
    as ``name=value`` lines appended to the step's outputs (docs/usage.md)."""
    from ..output import rows as formats
    from ..paths import github_files

    summary, outputs = github_files()
    if summary is None and outputs is None:
        raise click.UsageError("--github needs $GITHUB_STEP_SUMMARY or $GITHUB_OUTPUT")
    try:
        if summary is not None:
            with open(summary, "ab") as out:
                out.write(b"### OpenCode usage\n\n" + formats.report_markdown(report) + b"\n")
        if outputs is not None:
            lines = "".join(f"{name}={value}\n" for name, value in report.total.as_dict().items())
            with open(outputs, "a", encoding="utf-8") as out:
                out.write(lines)
    except OSError as exc:
        raise OutputError(exc.errno or 0, exc.strerror or str(exc), exc.filename) from None


def _write_usage_as_read(usage: Any, fmt: str, *, csv_raw: bool = False, live: bool = True) -> None:
    """A stream's usage as JSON, JSON Lines or CSV, each row written as it is read (memory
    stays flat over any length of stream); the total and notes after the rows (JSON Lines
    and CSV: the rows alone, the notes on stderr). ``live``: the input may still grow (a
    pipe: `import --follow | usage`): each row is flushed as it is read; from files, a
    thousand at a time."""
    from .quick import write_usage_rows

    write_usage_rows(
        (row.as_dict() for row in usage.rows()),
        lambda: usage,
        fmt,
        report_output(),
        csv_raw=csv_raw,
        note=lambda text: _say(f"note: {text}"),
        batch=1 if live else None,
    )


def may_grow(file: Any) -> bool:
    """Whether an input may still grow while it is read: anything but a regular file (a
    pipe, a terminal, a socket), or one that cannot say."""
    import os
    import stat

    try:
        return not stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (OSError, AttributeError, ValueError):
        return True
