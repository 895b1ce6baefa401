"""``normalize``, ``import`` and ``schema``: the commands that write events.

Each reads its inputs through ``pipeline`` and writes through ``output.jsonl`` (or the pretty
view); this module only parses options, opens what the user named and reports problems.
"""

from __future__ import annotations

import sys

import click

from ..errors import InputError
from .io import (
    db_option,
    format_for,
    full_option,
    max_cost_option,
    open_inputs,
    open_output,
    open_store,
    pipe_safe,
    selection_options,
    since_ms,
    tag_option,
    written_when_interrupted,
)


@click.command()
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
@tag_option
@full_option
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
    tags: dict[str, str] | None,
    full: bool,
) -> None:
    """Normalize OpenCode's output to one event per line.

    INPUT is a file or - for stdin (the default): `opencode run --format json` output, a
    captured server event stream (SSE) or an `opencode export` document, told apart by
    the first line. Events are written as each input line arrives; the last line is a
    metrics summary.
    """
    from .quick import NormalizeRequest, limit_of, run_normalize

    try:
        limit = limit_of(max_line)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-line") from None
    run_normalize(
        NormalizeRequest(
            inputs=inputs,
            output=output,
            buffered=buffered,
            keep_raw=keep_raw,
            no_metrics=no_metrics,
            strict=strict,
            fmt=fmt,
            deltas=deltas,
            max_line=limit,
            tags=tags,
            full=full,
        )
    )


@click.command(name="import")
@click.argument("sessions", nargs=-1, metavar="[SESSION]...")
@db_option
@click.option(
    "--session",
    "session_ids",
    multiple=True,
    metavar="ID",
    help="A stored session (id or prefix), as SESSION and as usage takes it; repeatable.",
)
@selection_options
@click.option("--children", is_flag=True, help="Also each session's subagent sessions.")
@click.option(
    "--follow",
    is_flag=True,
    help="Write events as OpenCode writes them, until the session is idle again.",
)
@click.option("--forever", is_flag=True, help="With --follow: keep going until Ctrl-C.")
@max_cost_option("With --follow: exit 3 once the session with its subagents costs more.")
@click.option("-o", "--output", metavar="FILE", help="Write events to FILE instead of stdout.")
@click.option("--raw", "keep_raw", is_flag=True, help="Attach the source row to every event.")
@click.option("--no-metrics", is_flag=True, help="Leave out the closing metrics event.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "pretty"]),
    help="jsonl, or pretty for people (the default when stdout is a terminal).",
)
@tag_option
@full_option
@pipe_safe
def import_(
    sessions: tuple[str, ...],
    db_path: str | None,
    session_ids: tuple[str, ...],
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
    tags: dict[str, str] | None,
    full: bool,
) -> None:
    """Stored sessions as normalized events (default: the most recent session).

    SESSION is a session id or an unambiguous prefix of one, or the path of an
    `opencode export` document. The database is only read. With --follow, events are
    written as OpenCode writes them (see docs/live.md).
    """
    from pathlib import Path

    sessions = (*sessions, *session_ids)
    if (forever or max_cost is not None) and not follow:
        raise click.UsageError("--forever and --max-cost go with --follow")
    if follow:
        if last or since:
            raise click.UsageError("--follow takes SESSION..., or --all, not --last or --since")
        if all_sessions and sessions:
            raise click.UsageError("--follow --all follows every session; name none")
        if all_sessions and max_cost is not None:
            raise click.UsageError(
                "--max-cost limits one session with its subagents: not with --all"
            )
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
            tags=tags,
        )
        return

    from ..output.jsonl import make_writer
    from ..pipeline.normalize import import_sessions, normalize_streams
    from ..reports.mcp import event_mcp_servers
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
        writer = make_writer(format_for(fmt, out), out, buffered=True, tags=tags, full=full)
        with written_when_interrupted(writer):
            normalize_streams(
                inputs,
                writer,
                keep_raw=keep_raw,
                metrics=not no_metrics,
                mcp_servers=event_mcp_servers,
            )
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
        writer = make_writer(format_for(fmt, out), out, buffered=True, tags=tags, full=full)
        with written_when_interrupted(writer):
            import_sessions(
                store,
                ids,
                writer,
                keep_raw=keep_raw,
                metrics=not no_metrics,
                mcp_servers=event_mcp_servers,
            )


@click.command()
@click.option(
    "--duckdb",
    "for_duckdb",
    is_flag=True,
    help="Print the columns of an events table for DuckDB's read_json instead.",
)
@pipe_safe
def schema(for_duckdb: bool) -> None:
    """Print the JSON Schema of the normalized events.

    With --duckdb, the columns (every field of every kind, typed) as a DuckDB struct, for
    `read_json('events.jsonl', columns = …)` (see docs/events.md).
    """
    import msgspec

    from ..events import duckdb_columns
    from ..events import schema as event_schema

    if for_duckdb:
        fields = ", ".join(f"'{name}': '{kind}'" for name, kind in duckdb_columns().items())
        sys.stdout.write("{" + fields + "}\n")
        return
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(event_schema())) + b"\n")
