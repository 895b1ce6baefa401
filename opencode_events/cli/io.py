"""Shared pieces of the click commands: options, and (from ``streams``, which has no click)
input/output opening and the error and closed-pipe conventions. Every command module
(cli, live, context_cmd) imports from here, so none has to import another."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..errors import InputError
from .exits import echo_error as _say
from .quick import REPORT_FORMATS, report_cache
from .quick import open_store_noting as open_store
from .streams import (
    InputFile,
    PipeClosed,
    WholeWrites,
    discard_stdout,
    format_for,
    open_inputs,
    open_output,
    pipe_safe,
    refuse_stdout_read,
    report_output,
    same_file,
    stdout_is,
    whole_writes_stdout,
    written_when_interrupted,
)

__all__ = [
    "PipeClosed",
    "pipe_safe",
    "written_when_interrupted",
    "discard_stdout",
    "open_inputs",
    "InputFile",
    "open_output",
    "refuse_stdout_read",
    "format_for",
    "WholeWrites",
    "whole_writes_stdout",
    "same_file",
    "stdout_is",
    "report_output",
    "db_option",
    "selection_options",
    "since_ms",
    "until_ms",
    "until_option",
    "window_ms",
    "open_store",
    "report_cache",
    "csv_raw_option",
    "tag_option",
    "full_option",
    "time_zone",
    "tz_option",
    "fold_option",
    "max_cost_option",
    "REPORT_FORMATS",
    "report_format_options",
    "report_format",
    "otel_destination",
    "report_otel",
    "LiveOtel",
]


class _Amount(click.ParamType):
    """A spending limit in dollars: a number above 0 that is a number (click's
    ``FloatRange`` takes ``nan``, past which no cost ever is, and ``inf``)."""

    name = "USD"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            amount = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not an amount in dollars", param, ctx)
        if not math.isfinite(amount) or amount <= 0:
            self.fail(f"{value!r} is no limit: give an amount above 0", param, ctx)
        return amount


def max_cost_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--max-cost USD``, the same on ``run``, ``attach`` and ``import --follow``."""
    return click.option("--max-cost", type=_Amount(), metavar="USD", help=help)


def csv_raw_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: CSV cells as they are, without the quote that keeps a spreadsheet
    from taking one for a formula."""
    return click.option(
        "--csv-raw",
        is_flag=True,
        help="CSV: write text cells as they are (by default one starting with = + - @ "
        "tab or CR gets a leading ' so that no spreadsheet runs it as a formula).",
    )(command)


def db_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: which OpenCode database to read."""
    return click.option(
        "--db",
        "db_path",
        metavar="PATH",
        help="OpenCode's database (default: $OPENCODE_DB, else "
        "$XDG_DATA_HOME/opencode/opencode.db, else ~/.local/share/opencode/opencode.db).",
    )(command)


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared options choosing stored sessions."""
    for option in reversed(
        [
            click.option(
                "--last", is_flag=True, help="The most recently active top-level session."
            ),
            click.option(
                "--since", metavar="WHEN", help="Sessions active since 2h, 7d, 2026-11-01…"
            ),
            click.option("--all", "all_sessions", is_flag=True, help="Every session."),
        ]
    ):
        command = option(command)
    return command


def since_ms(since: str | None, tz: Any = None) -> int | None:
    """``--since`` as epoch ms; a date without a zone is read in ``tz`` (``--tz``) if given."""
    from ..core.timeutil import parse_since

    return _when_ms(since, tz, parse_since, "--since")


def _when_ms(value: str | None, tz: Any, parse: Callable[..., int], option: str) -> int | None:
    """``value`` of ``option`` read by ``parse``; what it cannot read is a usage error."""
    if value is None:
        return None
    try:
        return parse(value, tz=tz)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def until_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Shared option of ``sessions`` and ``usage``: ``--until WHEN``, as ccusage's."""
    return click.option("--until", metavar="WHEN", help=help)


def until_ms(until: str | None, tz: Any = None) -> int | None:
    """``--until`` as the last epoch ms it takes in: a date means through the end of that
    day (in ``tz``, ``--tz``, if given, else local time), as ccusage reads it."""
    from ..core.timeutil import parse_until

    return _when_ms(until, tz, parse_until, "--until")


def window_ms(
    since: str | None, until: str | None, tz: Any = None
) -> tuple[int | None, int | None]:
    """``--since`` and ``--until`` as epoch ms (``since_ms``, ``until_ms``); a window that
    ends before it begins is a usage error, not an empty report."""
    from ..core.timeutil import window_reversed

    start, end = since_ms(since, tz), until_ms(until, tz)
    if window_reversed(start, end):
        raise click.UsageError(f"--since {since} is after --until {until}: no time between them")
    return start, end


def _parse_tags(ctx: Any, param: Any, values: tuple[str, ...]) -> dict[str, str] | None:
    from .quick import tags_of

    try:
        return tags_of(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def tag_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: ``--tag KEY=VALUE`` (repeatable) stamps every event's ``tags``."""
    return click.option(
        "--tag",
        "tags",
        multiple=True,
        metavar="KEY=VALUE",
        callback=_parse_tags,
        help="Stamp every event with tags.KEY=VALUE (a machine, a CI job); repeatable.",
    )(command)


def no_cache_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: ``--no-cache`` recomputes a store report without the report cache
    (``reports.cache``), neither reading nor writing it."""
    return click.option(
        "--no-cache",
        is_flag=True,
        help="Recompute from the database alone: do not read or write the report cache "
        "($XDG_CACHE_HOME/opencode-events).",
    )(command)


def full_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: the pretty view shows messages whole (else 12 lines and a count)."""
    return click.option(
        "--full",
        is_flag=True,
        help="Pretty view: show long messages whole (default: their first 12 lines).",
    )(command)


def fold_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Shared option of ``sessions`` and ``usage``: ``--fold/--no-fold``, subagent sessions
    folded into the row of the session (or turn) that ran them, the default."""
    return click.option("--fold/--no-fold", "fold", default=True, help=help)


def tz_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Shared option: ``--tz ZONE``, also ``-z``/``--timezone`` as ccusage users type it."""
    return click.option("--tz", "-z", "--timezone", "tz", metavar="ZONE", help=help)


def report_format_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared options of the report commands: ``--format`` and ``-j``/``--json``."""
    command = click.option(
        "-j",
        "--json",
        "as_json",
        is_flag=True,
        help="Shorthand for --format json (as in ccusage).",
    )(command)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(REPORT_FORMATS),
        help="table for people (the default on a terminal), json (the default otherwise), "
        "jsonl, csv or markdown.",
    )(command)


def report_format(fmt: str | None, as_json: bool, out: Any) -> str:
    """The format a report is written in: as asked (``-j`` is ``--format json``), else a
    table on a terminal and JSON otherwise."""
    if as_json:
        if fmt not in (None, "json"):
            raise click.UsageError(f"-j/--json and --format {fmt} ask for different formats")
        return "json"
    return fmt or ("table" if out.isatty() else "json")


def time_zone(name: str | None) -> Any:
    """``--tz ZONE`` as a ``tzinfo`` (None: local time); an unknown zone is a usage error."""
    from ..core.timeutil import zone_named

    try:
        return zone_named(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tz") from None


# ------------------------------------------------------------------------ OpenTelemetry


def otel_destination(
    output: str | None,
    endpoint: str | None,
    headers: Sequence[str] = (),
    compression: str | None = None,
    retries: int = 5,
    reads: Sequence[Any] = (),
    env: Any = None,
    signals: Sequence[str] = ("traces", "metrics"),
    protocol: str | None = None,
) -> Any:
    """Where ``otel`` (and ``--otel``) send bodies: JSON Lines to ``-o FILE`` (``-`` is
    stdout), else OTLP/HTTP to ``endpoint`` or the environment's, else JSON Lines to stdout.
    A backend must have a URL for each of the ``signals`` to send, known before any is sent
    (only ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, say, is no URL for metrics)."""
    from ..otel.export import FileDestination, HttpDestination
    from ..paths import otlp_environment

    env = otlp_environment() if env is None else env
    if output is not None and endpoint:
        raise click.UsageError("give -o FILE or --endpoint URL, not both")
    if output is not None or not (
        endpoint or env.endpoint or env.traces_endpoint or env.metrics_endpoint
    ):
        out = open_output(output, reads=reads)
        if out.isatty():  # JSON escapes C0, not DEL or the C1 controls (U+009B: a CSI)
            from ..output.rows import TerminalText

            out = TerminalText(out)
        return FileDestination(out)
    destination = HttpDestination(
        endpoint, headers, compression=compression, retries=retries, env=env, protocol=protocol
    )
    for note in destination.notes:
        _say(f"warning: {note}")
    for signal in signals:
        if signal not in destination.endpoints:
            destination.close()
            raise InputError(
                f"no OTLP endpoint for {signal}: set OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT "
                f"or OTEL_EXPORTER_OTLP_ENDPOINT, give --endpoint, or send --only "
                f"{'traces' if signal == 'metrics' else 'metrics'}"
            )
    return destination


def report_otel(summary: Any, destination: Any) -> None:
    """The backend's notes (partial successes), and for a backend what it was sent."""
    from ..output.rows import counted

    for note in summary.partial:
        _say(f"warning: {note}")
    if destination.where is not None:
        left_out = f" ({counted(summary.left_out, 'session')} sent before, left out)"
        _say(
            f"otel: {counted(summary.sessions, 'session')}, {counted(summary.spans, 'span')} "
            f"in {counted(summary.bodies, 'request')} to {destination.where}"
            + (left_out if summary.left_out else "")
        )


class LiveOtel:
    """``--otel DEST`` of ``attach`` and ``run``: the events also gathered into spans, and
    sent when the run ends to DEST, an OTLP/HTTP base URL or a JSON Lines file (opened now,
    so a bad one fails before anything starts)."""

    def __init__(self, dest: str, *, events_to: str | None, reads: Sequence[Any] = ()) -> None:
        from ..otel.export import SpanCollector
        from ..otel.spans import TraceBuilder
        from ..reports.mcp import mcp_server_names

        if dest == "-" or (events_to not in (None, "-") and same_file(dest, events_to)):
            raise InputError(f"--otel {dest}: the events and the spans need a place each")
        if dest.startswith(("http://", "https://")):
            self.destination = otel_destination(None, dest)
        else:
            if events_to in (None, "-") and stdout_is(dest):
                raise InputError(f"--otel {dest} is where stdout goes: give it a file of its own")
            self.destination = otel_destination(dest, None, reads=reads)
        self.collector = SpanCollector(TraceBuilder(mcp_servers=mcp_server_names))

    def normalizer(self, *, keep_raw: bool = False, mcp_servers: Any = None) -> Any:
        return self.collector.normalizer(keep_raw=keep_raw, mcp_servers=mcp_servers)

    def writer(self, writer: Any) -> Any:
        from ..otel.export import Tee

        return Tee(writer, self.collector)

    def send(self) -> None:
        from ..otel.export import Summary, export

        summary = Summary()
        try:
            export(
                self.collector.finished(),
                self.collector.builder,
                self.destination.send,
                max_bytes=self.destination.max_bytes,
                summary=summary,
            )
        finally:
            self.destination.close()
        report_otel(summary, self.destination)
