"""The command line: the one place that owns stdin, stdout, stderr and exit codes.

Library modules raise ``InputError`` for input they cannot use; here it becomes one
``error: …`` line on stderr and exit 2. Ctrl-C exits 130 and a closed stdout pipe ends
quietly with 141 (as if by SIGPIPE), both without a traceback. Subcommands import what
they need when they run, so start-up stays small.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from .._version import __version__
from ..errors import InputError, OutputError
from .io import (
    PipeClosed,
    csv_raw_option,
    db_option,
    discard_stdout,
    format_for,
    open_inputs,
    open_output,
    open_store,
    pipe_safe,
    refuse_stdout_read,
    report_output,
    selection_options,
    since_ms,
    whole_writes_stdout,
    written_when_interrupted,
)
from .status import ExitStatus


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="opencode-events")
def cli() -> None:
    """Normalize what OpenCode writes into one lossless event stream."""


@cli.command()
@click.argument("inputs", nargs=-1, metavar="[INPUT]...")
@click.option("-o", "--output", metavar="FILE", help="Write events to FILE instead of stdout.")
@click.option("--buffered", is_flag=True, help="Write in large blocks, not as each line arrives.")
@click.option("--raw", "keep_raw", is_flag=True, help="Attach the source record to every event.")
@click.option("--no-metrics", is_flag=True, help="Leave out the closing metrics event.")
@click.option("--strict", is_flag=True, help="Exit 1 when warnings or error records were seen.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "pretty"]),
    help="jsonl, or pretty for people (the default when stdout is a terminal).",
)
@click.option("--deltas", is_flag=True, help="Server event input: emit streaming text deltas.")
@click.option(
    "--max-line",
    metavar="SIZE",
    help="Longest input line read (default 16M, or $OPENCODE_EVENTS_MAX_LINE); "
    "a longer one is a warning.",
)
@pipe_safe
def normalize(
    inputs: tuple[str, ...],
    output: str | None,
    buffered: bool,
    keep_raw: bool,
    no_metrics: bool,
    strict: bool,
    fmt: str | None,
    deltas: bool,
    max_line: str | None,
) -> None:
    """Normalize OpenCode's output to one event per line.

    INPUT is a file or - for stdin (the default): `opencode run --format json` output, a
    captured server event stream (SSE) or an `opencode export` document, told apart by
    the first line. Events are written as each input line arrives; the last line is a
    metrics summary.
    """
    from ..output.jsonl import make_writer
    from ..pipeline.normalize import normalize_streams, refuse_databases
    from ..sources.stream import max_line_setting, parse_size

    try:
        limit = max_line_setting() if max_line is None else parse_size(max_line)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-line") from None
    inputs_opened = open_inputs(inputs)
    refuse_databases(inputs_opened, "import")
    out = open_output(output, reads=inputs or ("-",))
    writer = make_writer(format_for(fmt, out), out, buffered=buffered)
    with written_when_interrupted(writer):
        normalizer = normalize_streams(
            inputs_opened,
            writer,
            keep_raw=keep_raw,
            metrics=not no_metrics,
            deltas=deltas,
            max_line=limit,
        )
    if strict and normalizer.problems:
        raise SystemExit(ExitStatus.STRICT)


# ----------------------------------------------------------------------------- the store


@cli.command(name="import")
@click.argument("sessions", nargs=-1, metavar="[SESSION]...")
@db_option
@selection_options
@click.option("--children", is_flag=True, help="Also each session's subagent sessions.")
@click.option(
    "--follow",
    is_flag=True,
    help="Write events as OpenCode writes them, until the session is idle again.",
)
@click.option("--forever", is_flag=True, help="With --follow: keep going until Ctrl-C.")
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    metavar="USD",
    help="With --follow: exit 3 once the session with its subagents costs more.",
)
@click.option("-o", "--output", metavar="FILE", help="Write events to FILE instead of stdout.")
@click.option("--raw", "keep_raw", is_flag=True, help="Attach the source row to every event.")
@click.option("--no-metrics", is_flag=True, help="Leave out the closing metrics event.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "pretty"]),
    help="jsonl, or pretty for people (the default when stdout is a terminal).",
)
@pipe_safe
def import_(
    sessions: tuple[str, ...],
    db_path: str | None,
    last: bool,
    since: str | None,
    all_sessions: bool,
    children: bool,
    follow: bool,
    forever: bool,
    max_cost: float | None,
    output: str | None,
    keep_raw: bool,
    no_metrics: bool,
    fmt: str | None,
) -> None:
    """Stored sessions as normalized events (default: the most recent session).

    SESSION is a session id or an unambiguous prefix of one, or the path of an
    `opencode export` document. The database is only read. With --follow, events are
    written as OpenCode writes them (see docs/live.md).
    """
    from pathlib import Path

    if (forever or max_cost is not None) and not follow:
        raise click.UsageError("--forever and --max-cost go with --follow")
    if follow:
        if last or since:
            raise click.UsageError("--follow takes SESSION..., or --all, not --last or --since")
        if all_sessions and (sessions or max_cost is not None):
            raise click.UsageError("--follow --all follows every session; name none")
        from .follow import follow_import

        follow_import(
            sessions=sessions,
            db_path=db_path,
            all_sessions=all_sessions,
            children=children,
            forever=forever,
            max_cost=max_cost,
            output=output,
            keep_raw=keep_raw,
            no_metrics=no_metrics,
            fmt=fmt,
        )
        return

    from ..output.jsonl import make_writer
    from ..pipeline.normalize import import_sessions, normalize_streams
    from ..store.open import select_sessions, store_files

    documents = [s for s in sessions if Path(s).is_file()]
    for wanted in sessions:  # a session id has neither; a path that is not a file is a typo
        if wanted not in documents and ("/" in wanted or wanted.endswith(".json")):
            raise InputError(f"cannot read {wanted}: not a file (nor a session id)")
    if documents:  # `opencode export` files: the same mapping, no database needed
        if len(documents) != len(sessions) or db_path or last or since or all_sessions:
            raise click.UsageError("give either export documents or stored sessions, not both")
        if children:  # an export holds one session; its subagents are not in it
            raise click.UsageError("--children reads the store; an export document has none")
        inputs = open_inputs(tuple(documents))
        out = open_output(output, reads=documents)
        writer = make_writer(format_for(fmt, out), out, buffered=True)
        with written_when_interrupted(writer):
            normalize_streams(inputs, writer, keep_raw=keep_raw, metrics=not no_metrics)
        return

    if all_sessions and (sessions or last or since):
        raise click.UsageError("--all already reads every session; leave out the others")
    since_time = since_ms(since)
    with open_store(db_path) as store:
        ids = select_sessions(
            store,
            sessions,
            last=last,
            since_ms=since_time,
            all_sessions=all_sessions,
            children=children,
        )
        out = open_output(output, reads=store_files(store))
        writer = make_writer(format_for(fmt, out), out, buffered=True)
        with written_when_interrupted(writer):
            import_sessions(store, ids, writer, keep_raw=keep_raw, metrics=not no_metrics)


SESSION_COLUMNS = (
    "id",
    "path",
    "parent_id",
    "title",
    "agent",
    "model",
    "provider",
    "directory",
    "version",
    "time_created",
    "time_updated",
    "turns",
    "inferences",
    "in_flight",
    "state",
    "tool_calls",
    "tool_failures",
    "mcp_calls",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "cost",
    "total_cost",
    "children",
)


@cli.command()
@db_option
@click.option("--since", metavar="WHEN", help="Sessions active since 2h, 7d, 2026-11-01…")
@click.option("--limit", type=click.IntRange(min=1), help="At most N sessions.")
@click.option("--all", "all_sessions", is_flag=True, help="Subagent sessions too.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "jsonl", "csv"]),
    default=None,
    help="table for people (default on a terminal), json, jsonl or csv for programs.",
)
@csv_raw_option
@pipe_safe
def sessions(
    db_path: str | None,
    since: str | None,
    limit: int | None,
    all_sessions: bool,
    fmt: str | None,
    csv_raw: bool,
) -> None:
    """Sessions in the store, newest activity first, with turns, tools, tokens and cost."""
    from ..output import rows as formats
    from ..reports.sessions import sessions_report
    from ..store.open import store_files

    since_time = since_ms(since)
    with open_store(db_path) as store:
        refuse_stdout_read(store_files(store))
        report = sessions_report(store, since_ms=since_time, limit=limit, all_sessions=all_sessions)
    summaries = report.sessions
    out = report_output()
    fmt = fmt or ("table" if out.isatty() else "jsonl")
    if fmt == "table":
        from ..output.tables import sessions_table

        sessions_table(summaries, out=sys.stdout)
        return
    if fmt == "json":  # msgspec encodes the summaries as they are: no dicts in between
        out.write(formats.write_json(summaries))
    elif fmt == "jsonl":
        out.write(formats.write_jsonl(summaries))
    else:
        out.write(formats.write_csv(formats.to_builtins(summaries), SESSION_COLUMNS, raw=csv_raw))
    out.flush()


@cli.command()
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
@click.option(
    "--by",
    type=click.Choice(["turn", "step", "session", "model", "agent", "day"]),
    default="turn",
    show_default=True,
    help="One row per …",
)
@click.option("--tz", metavar="ZONE", help="Time zone for --by day (default: local time).")
@click.option("--no-fold", is_flag=True, help="List subagent sessions apart, not in their turn.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv", "markdown"]),
    help="table for people (default on a terminal), json, csv or markdown.",
)
@csv_raw_option
@pipe_safe
def usage(
    inputs: tuple[str, ...],
    db_path: str | None,
    session_ids: tuple[str, ...],
    last: bool,
    since: str | None,
    all_sessions: bool,
    by: str,
    tz: str | None,
    no_fold: bool,
    fmt: str | None,
    csv_raw: bool,
) -> None:
    """Tokens and cost per turn, as OpenCode counted them.

    From a stream (INPUT files or stdin: `opencode run --format json` output, normalized
    JSONL, a captured server event stream or an `opencode export` document), one row per
    model step. From the store (--db, --session, --last, --since, --all;
    also the default when stdin is a terminal), one row per user turn with subagents folded
    in, or --by step, session, model, agent or day.
    """
    from ..output import rows as formats
    from ..reports.usage import GroupingError, StreamUsage, store_usage

    zone = _zone(tz)
    chose_stored = bool(db_path or session_ids or last or since or all_sessions)
    if chose_stored and inputs:
        raise click.UsageError("give either INPUT files or stored sessions (--db …), not both")
    if all_sessions and (session_ids or last or since):
        raise click.UsageError("--all already reads every session; leave out the others")
    from_store = chose_stored or (not inputs and sys.stdin is not None and sys.stdin.isatty())
    start = since_ms(since, zone)  # once: "2h" is read against the clock
    try:
        if from_store:
            from ..store.open import every_session, select_sessions, store_files

            with open_store(db_path) as store:
                refuse_stdout_read(store_files(store))
                if all_sessions:  # every top-level session; subagents fold into them
                    ids = every_session(store, top_level=True)
                else:
                    ids = select_sessions(store, session_ids, last=last, since_ms=start)
                report = store_usage(
                    store,
                    ids,
                    by=by,
                    fold=not no_fold,
                    tz=zone,
                    cross_session=len(ids) > 1,
                    since_ms=start,
                )
        else:
            opened = open_inputs(inputs)
            refuse_stdout_read(inputs or ("-",))
            streamed = StreamUsage(opened, by=by, tz=zone)
            if (fmt or ("table" if sys.stdout.isatty() else "json")) in ("json", "csv"):
                _write_usage_as_read(streamed, fmt or "json", csv_raw=csv_raw)
                return
            report = streamed.report(list(streamed.rows()))
    except GroupingError as exc:
        raise click.UsageError(str(exc)) from None
    out = report_output()
    fmt = fmt or ("table" if out.isatty() else "json")
    if fmt == "table":
        from ..output.tables import usage_table

        usage_table(report, out=sys.stdout, store=from_store)
        return
    if fmt == "json":
        out.write(formats.write_json(report.document()))
    else:
        rows = [row.as_dict() for row in report.rows]
        columns = report.columns
        if fmt == "csv":
            out.write(formats.write_csv(rows, columns, raw=csv_raw))
            out.flush()  # the rows first, then the notes after them
            # CSV has no place for a note; it goes where a person running the command sees it.
            for note in report.notes:
                click.echo(f"note: {note}", err=True)
        else:
            out.write(formats.report_markdown(report))
    out.flush()


def _write_usage_as_read(usage: Any, fmt: str, *, csv_raw: bool = False) -> None:
    """A stream's usage as JSON or CSV, each row written as it is read (memory stays flat
    over any length of stream); the total and notes after the rows."""
    from ..output import rows as formats

    out = report_output()
    rows = (row.as_dict() for row in usage.rows())
    if fmt == "json":

        def rest() -> dict[str, Any]:
            doc: dict[str, Any] = {"total": usage.total.as_dict()}
            if usage.notes:
                doc["notes"] = list(usage.notes)
            return doc

        for piece in formats.json_pieces("rows", rows, rest):
            out.write(piece)
    else:
        for piece in formats.csv_pieces(rows, usage.columns, raw=csv_raw):
            out.write(piece)
        out.flush()  # the rows first, then the notes after them
        # CSV has no place for a note; it goes where a person running the command sees it.
        for note in usage.notes:
            click.echo(f"note: {note}", err=True)
    out.flush()


def _zone(name: str | None) -> Any:
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"unknown time zone {name!r}", param_hint="--tz") from None


@cli.command()
@pipe_safe
def schema() -> None:
    """Print the JSON Schema of the normalized events."""
    import msgspec

    from ..events import schema as event_schema

    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(event_schema())) + b"\n")


def _flush_or_discard_stdout() -> None:
    """After an error or an interrupt: write what is still buffered for stdout, or, when
    stdout itself is what failed (a full disk, a closed pipe), drop it, so the interpreter's
    last flush at exit does not print a traceback and turn the exit code into 120. Another
    Ctrl-C while waiting on a reader that stopped reading drops it too."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, MemoryError, KeyboardInterrupt, SystemExit):
        discard_stdout()


# An error is one line, whatever it quotes (a session id given with a newline in it).
_CONTROL = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in [*range(32), *range(0x7F, 0xA0), 0x2028, 0x2029]
    if code != 9
}


def _one_line(message: str) -> str:
    return message.translate(_CONTROL)


# click 8.2 and later: the program run without a command (8.1 prints the help, exit 0).
_NO_COMMAND: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def run(entry: Callable[..., Any], args: list[str] | None = None) -> int:
    """Run the click command and turn every way out into an exit code."""
    try:
        entry.main(args=args, prog_name="opencode-events", standalone_mode=False)
        # Here, not at exit: a reader gone before the last block is a closed pipe (141).
        sys.stdout.flush()
    except InputError as exc:
        click.echo(f"error: {_one_line(str(exc))}", err=True)
        _flush_or_discard_stdout()
        return ExitStatus.USAGE
    except (click.exceptions.Abort, KeyboardInterrupt):
        _flush_or_discard_stdout()
        return ExitStatus.INTERRUPTED
    except _NO_COMMAND as exc:  # no command given: the help, as is
        click.echo(exc.format_message(), err=True)
        return exc.exit_code
    except click.exceptions.ClickException as exc:
        # One line, like every other error; `--help` shows the usage.
        message = exc.format_message()
        if isinstance(exc, click.exceptions.UsageError) and exc.ctx is not None:
            message += f" (see: {exc.ctx.command_path} --help)"
        click.echo(f"error: {_one_line(message)}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (BrokenPipeError, PipeClosed):
        discard_stdout()
        return ExitStatus.BROKEN_PIPE
    except OSError as exc:  # e.g. the output's disk is full: one line, not a traceback
        reason = str(exc.strerror or exc)
        if isinstance(exc, OutputError):
            reason = f"cannot write {exc.filename}: {reason}"
        click.echo(f"error: {_one_line(reason)}", err=True)
        _flush_or_discard_stdout()
        return ExitStatus.USAGE
    except SystemExit as exc:  # SIGTERM (143), --strict (1)
        _flush_or_discard_stdout()
        return exc.code if isinstance(exc.code, int) else ExitStatus.OK
    except MemoryError:
        # A memory cap, or a record larger than the memory there is: what was unwound is
        # free again, enough for one line.
        _flush_or_discard_stdout()
        click.echo("error: out of memory (a memory limit, or an input record too large)", err=True)
        return ExitStatus.USAGE
    except Exception as exc:
        reason = _database_failure(exc)
        if reason is None:
            raise
        # A store error a reader did not turn into an InputError: still one line.
        click.echo(f"error: cannot read the database: {_one_line(reason)}", err=True)
        _flush_or_discard_stdout()
        return ExitStatus.USAGE
    return ExitStatus.OK


def _database_failure(exc: BaseException) -> str | None:
    """What a failure of either SQLite binding says, or None for any other exception (only
    the modules already imported are asked: the stream path loads neither)."""
    sqlite3, apsw = sys.modules.get("sqlite3"), sys.modules.get("apsw")
    if (sqlite3 is not None and isinstance(exc, sqlite3.Error)) or (
        apsw is not None and isinstance(exc, apsw.Error)
    ):
        from ..store.sqlite import sqlite_reason

        return sqlite_reason(exc)
    return None


def main() -> None:
    if sys.stdout is None:  # started with stdout closed (`>&-`): every command writes there
        if sys.stderr is not None:
            sys.stderr.write("error: standard output is closed\n")
        sys.exit(ExitStatus.USAGE)
    whole_writes_stdout()
    _terminate_like_interrupt()
    sys.exit(run(cli))


def _terminate_like_interrupt() -> None:
    """SIGTERM (kill, a container stopping) ends this process as Ctrl-C does: the stores
    close, a private copy of a database is removed, and the exit status says which signal
    (128 + 15). A forked worker keeps the default: it just ends."""
    main_pid = os.getpid()

    def terminate(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)


from .live import attach, run_opencode  # noqa: E402 - registered after the group exists

cli.add_command(attach)
cli.add_command(run_opencode, name="run")

from .context import context  # noqa: E402

cli.add_command(context)
