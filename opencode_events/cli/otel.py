"""``opencode-events otel``: sessions as OpenTelemetry GenAI traces and metrics.

Where to: ``-o FILE`` (or ``-o -``) writes the OTLP file exporter's JSON Lines (one
``TracesData`` or ``MetricsData`` a line); else ``--endpoint`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` posts OTLP/HTTP (JSON, or protobuf with ``--protocol`` or
``OTEL_EXPORTER_OTLP_PROTOCOL``); else JSON Lines go to stdout. The
logic is in ``opencode_events.otel``; this module owns the options and the terminal.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from .exits import echo_error as _say
from .io import (
    db_option,
    open_inputs,
    open_store,
    otel_destination,
    pipe_safe,
    report_otel,
    selection_options,
    since_ms,
)

__all__ = ["otel"]


@click.command()
@click.argument("sessions", nargs=-1, metavar="[SESSION]...")
@db_option
@selection_options
@click.option("--children", is_flag=True, help="Also each session's subagent sessions.")
@click.option(
    "--follow",
    is_flag=True,
    help="Follow the store as OpenCode writes it; send each session once it is done.",
)
@click.option("--forever", is_flag=True, help="With --follow: keep going until Ctrl-C.")
@click.option(
    "--resend",
    is_flag=True,
    help="With --follow to a URL: send again the sessions it already took from here.",
)
@click.option(
    "-i",
    "--input",
    "inputs",
    multiple=True,
    metavar="FILE",
    help="Read a run stream, server events, an export document or our events (- for stdin).",
)
@click.option("-o", "--output", metavar="FILE", help="Write OTLP JSON Lines to FILE (- stdout).")
@click.option(
    "--endpoint",
    metavar="URL",
    help="OTLP/HTTP base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT), e.g. http://localhost:4318.",
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="An HTTP header for the backend; repeatable (added to $OTEL_EXPORTER_OTLP_HEADERS).",
)
@click.option(
    "--only",
    type=click.Choice(["traces", "metrics"]),
    help="Send only traces or only metrics (default: both).",
)
@click.option(
    "--compression",
    type=click.Choice(["gzip", "none"]),
    default=None,
    help="Request body compression (default: gzip, or $OTEL_EXPORTER_OTLP_COMPRESSION).",
)
@click.option(
    "--protocol",
    type=click.Choice(["http/json", "http/protobuf"]),
    default=None,
    help="OTLP/HTTP encoding of the requests (default: http/json, or "
    "$OTEL_EXPORTER_OTLP_PROTOCOL); -o files are JSON Lines.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Retries of a body the backend is too busy for (429, 502, 503, 504) or unreachable.",
)
@pipe_safe
def otel(
    sessions: tuple[str, ...],
    db_path: str | None,
    last: bool,
    since: str | None,
    all_sessions: bool,
    children: bool,
    follow: bool,
    forever: bool,
    resend: bool,
    inputs: tuple[str, ...],
    output: str | None,
    endpoint: str | None,
    headers: tuple[str, ...],
    only: str | None,
    compression: str | None,
    protocol: str | None,
    retries: int,
) -> None:
    """Sessions as OpenTelemetry GenAI traces and metrics (default: the most recent session).

    SESSION is a stored session id (or a prefix), or an `opencode export` document. Each
    session is one `invoke_agent` span with a `chat` span per inference and an
    `execute_tool` span per tool call; a subagent's session hangs from the `task` call that
    ran it, in the same trace. Ids come from OpenCode's, so exporting again sends the same
    spans. With -i (or a pipe on stdin) the input is a stream instead of the store. With
    --follow, the store is followed as `import --follow` follows it, and each session is
    sent when it is done (--forever: until Ctrl-C).
    """
    from ..otel.export import Summary, export, store_builder, store_sessions, stream_sessions
    from ..otel.spans import TraceBuilder
    from ..paths import otlp_environment

    env = otlp_environment()
    signals = [signal for signal in ("traces", "metrics") if only in (None, signal)]
    if forever and not follow:
        raise click.UsageError("--forever goes with --follow")
    if resend and not follow:
        raise click.UsageError("--resend goes with --follow")
    if follow:
        if last or since or inputs:
            raise click.UsageError("--follow takes SESSION..., or --all, not --last, --since or -i")
        if all_sessions and sessions:
            raise click.UsageError("--follow --all follows every session; name none")
        _follow(
            sessions=sessions,
            db_path=db_path,
            all_sessions=all_sessions,
            children=children,
            forever=forever,
            resend=resend,
            destination_of=lambda reads: otel_destination(
                output, endpoint, headers, compression, retries, reads, env, signals, protocol
            ),
            only=only,
        )
        return
    documents = [s for s in sessions if Path(s).is_file()]
    for wanted in sessions:
        if wanted not in documents and ("/" in wanted or wanted.endswith(".json")):
            raise InputError(f"cannot read {wanted}: not a file (nor a session id)")
    chose_stored = bool(db_path or last or since or all_sessions or children)
    if documents and (len(documents) != len(sessions) or chose_stored):
        raise click.UsageError("give either export documents or stored sessions, not both")
    files = tuple(inputs) + tuple(documents)
    if files and (chose_stored or (sessions and not documents)):
        raise click.UsageError("give either -i FILE inputs or stored sessions (--db …), not both")
    if all_sessions and (sessions or last or since):
        raise click.UsageError("--all already reads every session; leave out the others")
    from_stream = bool(files) or (
        not sessions and not chose_stored and sys.stdin is not None and not sys.stdin.isatty()
    )
    summary = Summary()

    def send(sessions: Any, builder: Any, reads: Any, parallel: Any = None) -> Any:
        # Opened once the input is known good, and never over a file being read (-o x.db).
        destination = otel_destination(
            output, endpoint, headers, compression, retries, reads, env, signals, protocol
        )
        try:
            if parallel is not None:
                parallel(destination)
            else:
                export(
                    sessions,
                    builder,
                    destination.send,
                    traces=only != "metrics",
                    metrics=only != "traces",
                    max_bytes=destination.max_bytes,
                    summary=summary,
                )
        finally:
            destination.close()
        return destination

    if from_stream:
        from ..pipeline.normalize import refuse_databases

        opened = open_inputs(files or ("-",))
        refuse_databases(opened, "otel")
        builder = TraceBuilder(mcp_servers=_servers())
        destination = send(stream_sessions(opened, builder, summary), builder, files or ("-",))
    else:
        from ..store.open import select_sessions, store_files

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
            builder = store_builder(store)
            parallel = None
            from ..otel.parallel import export_in_workers, workers_for

            workers = workers_for(len(ids)) if getattr(store, "uri", None) else 1
            if workers > 1:  # a large export: one worker per core (otel.parallel)

                def parallel(destination: Any) -> None:
                    export_in_workers(
                        store,
                        ids,
                        builder,
                        destination,
                        workers=workers,
                        traces=only != "metrics",
                        metrics=only != "traces",
                        summary=summary,
                    )

            destination = send(
                store_sessions(store, ids, builder), builder, store_files(store), parallel
            )
    report_otel(summary, destination)
    if not summary.sessions:  # said, as `usage` says it: cron's stdin is empty, not a terminal
        if from_stream:
            where = "the input" if files else "stdin"
            note = (
                f"no session with events in {where}: nothing exported; for stored sessions "
                "give --last, SESSION, --since or --all"
            )
        else:
            note = "no session chosen (none active in that window?): nothing exported"
        _say(f"note: {note}")


def _servers() -> Any:
    from ..reports.mcp import mcp_server_names

    return mcp_server_names


def _follow(
    *,
    sessions: tuple[str, ...],
    db_path: str | None,
    all_sessions: bool,
    children: bool,
    forever: bool,
    resend: bool,
    destination_of: Any,
    only: str | None,
) -> None:
    """``otel --follow``: ``otel.follow.FollowSender`` over ``pipeline.follow``."""
    from ..core.activity import stale_after_ms
    from ..otel.export import SpanCollector
    from ..otel.follow import FollowSender
    from ..otel.sent import SentLedger
    from ..otel.spans import TraceBuilder
    from ..paths import locate_db
    from ..pipeline.follow import catch_up, follow_store
    from ..sources.eventlog import StoreFollower
    from ..store.open import select_sessions

    path = locate_db(db_path)
    if path.is_dir():
        if not (path / "opencode.db").is_file():
            raise InputError(f"no opencode.db in {path} to follow (legacy files do not change)")
        path = path / "opencode.db"
    if not path.exists():
        _say(f"opencode-events: waiting for {path}")
    reads = [path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal"))]
    destination = destination_of(reads)
    collector = SpanCollector(TraceBuilder(parents={}, mcp_servers=_servers()))
    follower = StoreFollower(
        collector.normalizer(),
        sessions=sessions,
        all_sessions=all_sessions,
        children=children,
        resolve=lambda store, wanted: select_sessions(store, wanted),
    )
    stale_after = stale_after_ms()
    # What a backend took is kept (a file, not a folder of spans); a file written afresh
    # (-o) takes the history again.
    endpoints = getattr(destination, "endpoints", None)
    ledger = None
    if endpoints and "traces" in endpoints and only != "metrics" and not resend:
        ledger = SentLedger.open(path, endpoints["traces"])
    sender = FollowSender(
        path,
        follower,
        collector,
        destination,
        traces=only != "metrics",
        metrics=only != "traces",
        stale_after=stale_after,
        warn=_say,
        ledger=ledger,
    )
    try:
        try:
            follow_store(
                path,
                follower,
                collector,
                until_idle=not forever,
                stale_after=stale_after,
                stop=sender.poll,
            )
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: what was seen still goes
            with contextlib.suppress(InputError):  # a store gone meanwhile: what was read
                catch_up(path, follower, collector)
            collector.write(follower.finish())
            if path.exists():
                sender.last_send()  # one try each: a shutdown is not held up by retries
                left = sender.undelivered()
                if left is not None:
                    _say(f"warning: {left}")
            raise
        collector.write(follower.finish())
        sender.send(everything=True)
        sender.finish()
    finally:
        destination.close()
    report_otel(sender.summary, destination)
