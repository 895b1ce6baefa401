"""``normalize`` and ``statusline`` without click: what the console script runs when the
command line is one this parser reads exactly as click would, so a pipe's start-up (and a
status bar's, every few seconds) does not pay for click.

``normalize_request(argv)`` reads ``normalize`` and its options (``cli.events.normalize``
declares them for click, with their help) into a ``NormalizeRequest``, or returns None for
anything else it is not sure of: another command, ``--help``, an unknown option, a value
click would refuse, an option given twice, ``-`` glued to a value. Then click parses the
command line, and says what is wrong in its own words. Both paths run ``run_normalize``.
``statusline_request`` and ``statusline_line`` do the same for ``statusline``,
``usage_request`` and ``usage_written`` for a ``usage`` of the store written as JSON, JSON
Lines, CSV or Markdown (a table, a stream, ``--github`` are click's), and
``sessions_request`` and ``sessions_written`` for ``sessions`` in those formats (a repeat
is copied from the report cache: click and the report's modules would be most of its
time); a value the command refuses (``Refused``) is left to click too, to be said in its
words.

    >>> normalize_request(["normalize", "--raw", "-o", "out.jsonl", "run.jsonl"]).output
    'out.jsonl'
    >>> normalize_request(["normalize", "--help"]) is None
    True
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

__all__ = [
    "NormalizeRequest",
    "normalize_request",
    "run_normalize",
    "tags_of",
    "limit_of",
    "event_mcp_servers",
    "StatuslineRequest",
    "statusline_request",
    "statusline_line",
    "Refused",
    "UsageRequest",
    "usage_request",
    "usage_written",
    "SessionsRequest",
    "sessions_request",
    "sessions_written",
    "write_stored_sessions",
    "stored_usage_of",
    "stored_usage_last_of",
    "write_usage",
    "write_stored_usage",
    "usage_pieces",
    "open_store_noting",
    "report_cache",
    "REPORT_FORMATS",
    "USAGE_GROUPINGS",
    "main",
]

_FLAGS = {
    "--buffered": "buffered",
    "--raw": "keep_raw",
    "--no-metrics": "no_metrics",
    "--strict": "strict",
    "--deltas": "deltas",
    "--full": "full",
}
_VALUES = {"-o": "output", "--output": "output", "--format": "fmt", "--max-line": "max_line"}
_FORMATS = ("jsonl", "pretty")


class NormalizeRequest(NamedTuple):
    inputs: tuple[str, ...] = ()
    output: str | None = None
    buffered: bool = False
    keep_raw: bool = False
    no_metrics: bool = False
    strict: bool = False
    fmt: str | None = None
    deltas: bool = False
    max_line: int | None = None  # the limit in bytes (None: the environment's, or 16M)
    tags: dict[str, str] | None = None
    full: bool = False


def tags_of(values: tuple[str, ...] | list[str]) -> dict[str, str] | None:
    """``--tag KEY=VALUE`` values as a dict (None for none); ValueError names a bad one.
    Bytes of the command line that are not UTF-8 (held as surrogates) are U+FFFD, as in
    a record: every event is written as UTF-8."""
    from ..core.text import as_utf8

    tags: dict[str, str] = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"{value!r} is not KEY=VALUE")
        tags[as_utf8(key.strip())] = as_utf8(text)
    return tags or None


def normalize_request(argv: list[str]) -> NormalizeRequest | None:
    """``argv`` (without the program name) as a ``normalize`` request, or None: click's."""
    if not argv or argv[0] != "normalize":
        return None
    fields: dict[str, object] = {}
    inputs: list[str] = []
    tags: list[str] = []
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":  # the rest are inputs, whatever they look like
            inputs.extend(args)
            break
        if arg == "-" or not arg.startswith("-"):
            if not arg:
                return None  # an empty name: click's message
            inputs.append(arg)
            continue
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _FLAGS and not equals:
            if _FLAGS[name] in fields:
                return None
            fields[_FLAGS[name]] = True
            continue
        if name not in _VALUES and name != "--tag":
            return None  # -h, --help, an unknown or glued option (-oFILE): click reads it
        if not equals:
            value = next(args, None)  # type: ignore[assignment]
            if value is None or (value.startswith("-") and value != "-"):
                return None  # no value, or one that looks like an option
        if not value:
            return None  # an empty value: click's to judge
        if name == "--tag":
            tags.append(value)
            continue
        field = _VALUES[name]
        if field in fields or (field == "fmt" and value not in _FORMATS):
            return None
        fields[field] = value
    try:
        if "max_line" in fields:
            from ..paths import parse_size

            fields["max_line"] = parse_size(fields["max_line"])  # type: ignore[arg-type]
        fields["tags"] = tags_of(tags)
    except ValueError:
        return None  # click says what is wrong with it
    return NormalizeRequest(inputs=tuple(inputs), **fields)  # type: ignore[arg-type]


def limit_of(max_line: str | None) -> int:
    """The longest line: ``--max-line`` (ValueError for a bad one), else the environment's
    (``InputError`` for a bad one)."""
    from ..paths import max_line_setting, parse_size

    return max_line_setting() if max_line is None else parse_size(max_line)


def event_mcp_servers(directory: str | None) -> list[str]:
    """The MCP servers an MCP call's ``mcp_server`` is named from (``reports.mcp``), read
    only when a call of a tool the mapping leaves unknown comes: no start-up cost."""
    from ..reports.mcp import event_mcp_servers as servers

    return servers(directory)


def run_normalize(request: NormalizeRequest) -> None:
    """The ``normalize`` command, its options read (by click or by ``normalize_request``)."""
    from ..output.jsonl import make_writer
    from ..pipeline.normalize import normalize_streams, refuse_databases
    from .exits import echo_error
    from .status import ExitStatus
    from .streams import format_for, open_inputs, open_output, written_when_interrupted

    limit = limit_of(None) if request.max_line is None else request.max_line
    inputs_opened = open_inputs(request.inputs)
    refuse_databases(inputs_opened, "import")
    out = open_output(request.output, reads=request.inputs or ("-",))
    fmt = format_for(request.fmt, out)
    writer = make_writer(fmt, out, buffered=request.buffered, tags=request.tags, full=request.full)
    with written_when_interrupted(writer):
        normalizer = normalize_streams(
            inputs_opened,
            writer,
            keep_raw=request.keep_raw,
            metrics=not request.no_metrics,
            deltas=request.deltas,
            max_line=limit,
            mcp_servers=event_mcp_servers,
        )
    if request.strict and normalizer.problems:
        counts = normalizer.kind_counts()
        seen = [
            f"{counts[k]} {k}{'s' if counts[k] > 1 else ''}"
            for k in ("warning", "error")
            if counts.get(k)
        ]
        echo_error(f"strict: the input held {' and '.join(seen)}")
        raise SystemExit(ExitStatus.STRICT)


class StatuslineRequest(NamedTuple):
    db_path: str | None = None
    session_id: str | None = None
    template: str | None = None
    tz: str | None = None
    at: str | None = None
    escape: str | None = None


_STATUSLINE_VALUES = {
    "--db": "db_path",
    "--session": "session_id",
    "--format": "template",
    "--tz": "tz",
    "--at": "at",
    "--for": "escape",
}
# reports.statusline.ESCAPES's keys, written out (that module is not loaded to read a
# command line; a test keeps the two equal).
STATUSLINE_ESCAPES = ("tmux", "zsh")


def _value_of(equals: str, value: str, args: Iterator[str]) -> str | None:
    """An option's value: after its ``=``, else the next argument; None (click's to judge)
    when it is missing, empty or looks like an option."""
    if not equals:
        value = next(args, "")
        if value.startswith("-"):
            return None
    return value or None


def _options_of(
    argv: list[str],
    command: str,
    values: dict[str, str],
    flags: dict[str, tuple[str, bool]] | None = None,
    read: dict[str, Callable[[str], Any]] | None = None,
    repeated: str | None = None,
) -> dict[str, Any] | None:
    """The options of ``command`` in ``argv`` under click's parameter names (``values``:
    option → name; ``flags``: option → (name, value)), or None, click's to judge: another
    command, an argument, an unknown option, one given twice (but ``repeated``, whose
    values make a tuple), a flag given a value, a value missing, empty, looking like an
    option, or one its ``read`` turns into None (not among the choices, say)."""
    if not argv or argv[0] != command:
        return None
    flags, read = flags or {}, read or {}
    fields: dict[str, Any] = {}
    args = iter(argv[1:])
    for arg in args:
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in flags and not equals:
            field, flag = flags[name]
            if field in fields:
                return None
            fields[field] = flag
            continue
        field = values.get(name)
        if field is None or (field in fields and field != repeated):
            return None
        found = _value_of(equals, value, args)
        if found is not None and field in read:
            found = read[field](found)
        if found is None:
            return None
        fields[field] = (*fields.get(field, ()), found) if field == repeated else found
    return fields


def _among(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    """A ``read`` for ``_options_of``: the value if it is one of ``choices``."""
    return lambda found: found if found in choices else None


def _whole_from_one(found: str) -> int | None:
    """A ``read`` for ``_options_of``: the value as click's ``IntRange(min=1)`` reads it."""
    try:
        number = int(found)
    except ValueError:
        return None
    return number if number >= 1 else None


def statusline_request(argv: list[str]) -> StatuslineRequest | None:
    """``argv`` (without the program name) as a ``statusline`` request, or None: click's
    (another command, ``--help``, an argument, an unknown option, an option given twice,
    a value missing, empty or looking like an option)."""
    fields = _options_of(
        argv, "statusline", _STATUSLINE_VALUES, read={"escape": _among(STATUSLINE_ESCAPES)}
    )
    return None if fields is None else StatuslineRequest(**fields)


class Refused(ValueError):
    """A ``statusline`` value the command refuses: ``param`` names the option, as click's
    ``BadParameter`` does."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def statusline_line(request: StatuslineRequest) -> bytes:
    """The ``statusline`` command, its options read (by click or ``statusline_request``):
    the line to print. A template, zone or time it refuses is ``Refused``."""
    from ..core.timeutil import parse_since, zone_named
    from ..reports.statusline import DEFAULT_FORMAT, check_format, render, take_glance
    from ..store.open import open_store, select_sessions

    template = DEFAULT_FORMAT if request.template is None else request.template
    try:
        check_format(template)
    except ValueError as exc:
        raise Refused("--format", str(exc)) from None
    try:
        zone = zone_named(request.tz)
    except ValueError as exc:
        raise Refused("--tz", str(exc)) from None
    now_ms = None
    if request.at is not None:
        try:
            now_ms = parse_since(request.at, tz=zone)
        except ValueError as exc:
            raise Refused("--at", str(exc)) from None
    # No notes on a status line, and no old JSON files: they hold no live session.
    with open_store(request.db_path, legacy=False) as store:
        session = request.session_id
        chosen = select_sessions(store, (session,)) if session is not None else [None]
        glance = take_glance(store, chosen[0], now_ms=now_ms, tz=zone)
    try:
        line = render(template, glance, request.escape)
    except ValueError as exc:
        raise Refused("--format", str(exc)) from None
    return line.encode("utf-8", "replace") + b"\n"


def _print_statusline(request: StatuslineRequest) -> bool:
    """Print the line; False (nothing printed) when click is to say what it refuses."""
    try:
        line = statusline_line(request)
    except Refused:
        return False
    out = sys.stdout.buffer
    out.write(line)
    out.flush()
    return True


# One list for every report command (sessions, usage, context), and one rule for the
# default: a table on a terminal, else one JSON document (as sqlite-utils writes).
REPORT_FORMATS = ("table", "json", "jsonl", "csv", "markdown")
USAGE_GROUPINGS = ("turn", "step", "session", "model", "agent", "day", "week", "month", "project")


def open_store_noting(db_path: str | None, *, legacy: bool = True) -> Any:
    """The store ``--db`` names (``store.open.open_store``); its notes (a data directory of
    a database and older JSON files, an older schema) go to stderr as ``note: …``."""
    from ..store.open import open_store
    from .exits import echo_error

    store = open_store(db_path, legacy=legacy)
    for note in getattr(store, "notes", ()):
        echo_error(f"note: {note}")
    return store


def report_cache(store: Any, no_cache: bool) -> Any:
    """The report cache of ``store`` (None with ``--no-cache`` or
    ``OPENCODE_EVENTS_NO_CACHE=1``, or for a store that is not a database)."""
    from ..paths import report_cache_dir
    from ..reports.cache import ReportCache

    root = report_cache_dir()
    if no_cache or root is None:
        return None
    return ReportCache.open(store, root=root)


class UsageRequest(NamedTuple):
    """A ``usage`` of the store, as its options name it (click's parameter names)."""

    db_path: str | None = None
    session_ids: tuple[str, ...] = ()
    last: bool = False
    since: str | None = None
    all_sessions: bool = False
    until: str | None = None
    by: str = "turn"
    tz: str | None = None
    fold: bool = True
    fmt: str | None = None
    as_json: bool = False
    csv_raw: bool = False
    no_cache: bool = False


_USAGE_FLAGS = {
    "--last": ("last", True),
    "--all": ("all_sessions", True),
    "--csv-raw": ("csv_raw", True),
    "--no-cache": ("no_cache", True),
    "-j": ("as_json", True),
    "--json": ("as_json", True),
    "--fold": ("fold", True),
    "--no-fold": ("fold", False),
}
_USAGE_VALUES = {
    "--db": "db_path",
    "--session": "session_ids",
    "--since": "since",
    "--until": "until",
    "--by": "by",
    "--tz": "tz",
    "-z": "tz",
    "--timezone": "tz",
    "--format": "fmt",
}
_USAGE_READ = {"by": _among(USAGE_GROUPINGS), "fmt": _among(REPORT_FORMATS[1:])}  # a table: click's


def usage_request(argv: list[str]) -> UsageRequest | None:
    """``argv`` (without the program name) as a ``usage`` of the store in a format other
    than the table, or None: click's (another command, an INPUT or none chosen (a stream),
    ``--help``, ``--github``, an unknown option, one given twice, a value missing, empty,
    looking like an option or not among the choices, options click refuses together)."""
    fields = _options_of(
        argv, "usage", _USAGE_VALUES, _USAGE_FLAGS, _USAGE_READ, repeated="session_ids"
    )
    if fields is None:
        return None
    request = UsageRequest(**fields)
    sessions = request.session_ids
    chosen = (
        request.db_path is not None or sessions or request.last or request.since or request.until
    )
    if not (chosen or request.all_sessions):
        return None  # a stream on stdin, or the store when stdin is a terminal: click's
    if request.all_sessions and (sessions or request.last or request.since):
        return None
    if request.as_json and request.fmt not in (None, "json"):
        return None
    return request


def stored_usage_of(
    request: UsageRequest, tz: Any, since_ms: int | None, until_ms: int | None
) -> Any:
    """The ``usage`` report of the sessions ``request`` chooses (``stored_usage``), its
    zone and window read; a store that refuses is an ``InputError``."""
    from ..reports.usage import stored_usage

    return _of_store(stored_usage, request, tz, since_ms, until_ms)


def stored_usage_last_of(
    request: UsageRequest, tz: Any, since_ms: int | None, until_ms: int | None, keep: int
) -> tuple[Any, int]:
    """``stored_usage_of``'s report holding only its last ``keep`` rows (a table's), and
    how many rows it has (``reports.usage.stored_usage_last``: never all held)."""
    from ..reports.usage import stored_usage_last

    return _of_store(
        lambda store, **options: stored_usage_last(store, keep, **options),
        request,
        tz,
        since_ms,
        until_ms,
    )


def _of_store(
    report: Callable[..., Any],
    request: UsageRequest,
    tz: Any,
    since_ms: int | None,
    until_ms: int | None,
) -> Any:
    """``report(store, cache=…, **choices)`` of the store ``request`` names, its choices as
    the request makes them (``_usage_choices``)."""
    from ..store.open import store_files
    from .streams import refuse_stdout_read

    with open_store_noting(request.db_path) as store:
        refuse_stdout_read(store_files(store))
        return report(
            store,
            cache=report_cache(store, request.no_cache),
            **_usage_choices(request, tz, since_ms, until_ms),
        )


def _usage_choices(
    request: UsageRequest, tz: Any, since_ms: int | None, until_ms: int | None
) -> dict[str, Any]:
    """``stored_usage``'s choices as ``request`` names them, its zone and window read."""
    return {
        "session_ids": request.session_ids,
        "last": request.last,
        "since_ms": since_ms,
        "until_ms": until_ms,
        "all_sessions": request.all_sessions,
        "by": request.by,
        "fold": request.fold,
        "tz": tz,
    }


def write_usage(report: Any, fmt: str, out: Any, *, csv_raw: bool = False) -> None:
    """A ``usage`` report as JSON, JSON Lines, CSV or Markdown; the notes of CSV and JSON
    Lines, which have no place for one, go to stderr after the rows."""
    for piece in usage_pieces(report, fmt, csv_raw=csv_raw):
        out.write(piece)
    out.flush()
    if fmt in NOTES_APART:
        _say_notes(report.notes)


# The formats with no place for a report's notes: said on stderr, after the rows.
NOTES_APART = ("jsonl", "csv")


def _say_notes(notes: Iterable[str]) -> None:
    from .exits import echo_error

    for text in notes:  # where a person running the command sees it
        echo_error(f"note: {text}")


def usage_pieces(report: Any, fmt: str, *, csv_raw: bool = False) -> Iterator[bytes]:
    """A ``usage`` report's bytes in JSON, JSON Lines, CSV or Markdown, in pieces (a
    thousand rows at a time: 268,000 steps are never held as dicts, nor their JSON whole);
    the notes of JSON Lines and CSV left out (``NOTES_APART``)."""
    from ..output import rows as formats

    if fmt == "markdown":
        return formats.report_markdown_pieces(report)
    rows = (row.as_dict() for row in report.rows)
    return _row_pieces(rows, lambda: report, fmt, csv_raw=csv_raw)


def write_stored_usage(
    request: UsageRequest, tz: Any, since_ms: int | None, until_ms: int | None, fmt: str, out: Any
) -> None:
    """The ``usage`` report of the sessions ``request`` chooses (``stored_usage_of``) in
    ``fmt`` (any but the table) to ``out``, its notes on stderr where the format has no
    place for them; a report of every session kept in and answered from the report cache
    as written (``reports.usage.write_stored_usage``)."""
    from ..reports.usage import write_stored_usage as write_report
    from ..store.open import store_files
    from .streams import refuse_stdout_read

    form = f"{fmt}-raw" if fmt == "csv" and request.csv_raw else fmt
    with open_store_noting(request.db_path) as store:
        refuse_stdout_read(store_files(store))
        write_report(
            store,
            form,
            lambda report: usage_pieces(report, fmt, csv_raw=request.csv_raw),
            out,
            cache=report_cache(store, request.no_cache),
            apart=_said_after(out) if fmt in NOTES_APART else None,
            **_usage_choices(request, tz, since_ms, until_ms),
        )
    out.flush()


def _said_after(out: Any) -> Callable[[list[str]], None]:
    """The notes said on stderr once what ``out`` holds went out: after the rows."""

    def say(notes: list[str]) -> None:
        out.flush()
        _say_notes(notes)

    return say


def write_usage_rows(
    rows: Iterable[dict[str, Any]],
    ended: Callable[[], Any],
    fmt: str,
    out: Any,
    *,
    csv_raw: bool = False,
    note: Callable[[str], Any],
    batch: int | None = None,
) -> None:
    """``usage``'s rows as JSON, JSON Lines or CSV, written as they come, ``batch`` at a
    time (default ``LIST_BATCH``; with 1, a stream's, each row goes out, flushed, as it is
    read: `import --follow | usage`). ``ended()``, asked after the rows, gives the report's
    ``total``, ``notes`` and ``columns``. JSON's total and notes follow its rows; those of
    CSV and JSON Lines, which have no place for one, go to ``note`` (stderr) after the
    rows."""
    for piece in _row_pieces(rows, ended, fmt, csv_raw=csv_raw, batch=batch):
        out.write(piece)
        if batch == 1:
            out.flush()
    out.flush()  # the rows first, then any notes after them
    if fmt in NOTES_APART:
        for text in ended().notes:
            note(text)


def _row_pieces(
    rows: Iterable[dict[str, Any]],
    ended: Callable[[], Any],
    fmt: str,
    *,
    csv_raw: bool = False,
    batch: int | None = None,
) -> Iterator[bytes]:
    """``write_usage_rows``'s bytes, ``batch`` rows at a time (default ``LIST_BATCH``)."""
    from ..output import rows as formats

    batch = batch or formats.LIST_BATCH
    if fmt == "json":

        def rest() -> dict[str, Any]:
            report = ended()
            doc: dict[str, Any] = {"total": report.total.as_dict()}
            if report.notes:
                doc["notes"] = list(report.notes)
            return doc

        return formats.json_pieces("rows", rows, rest, batch)
    if fmt == "jsonl":
        return formats.jsonl_pieces(rows, batch)
    return formats.csv_pieces(rows, ended().columns, raw=csv_raw, every=batch)


def usage_written(request: UsageRequest) -> bool:
    """The ``usage`` command for ``request``, written to stdout; False (nothing written,
    nothing read) when click is to say what is wrong (a zone or a time it cannot read) or
    to draw the table (no format, on a terminal)."""
    from ..core.timeutil import parse_since, parse_until, window_reversed, zone_named
    from .streams import report_output

    out = report_output()
    fmt = _chosen_format(request.as_json, request.fmt, out)
    if fmt == "table":
        return False
    try:
        zone = zone_named(request.tz)
        start = None if request.since is None else parse_since(request.since, tz=zone)
        end = None if request.until is None else parse_until(request.until, tz=zone)
    except ValueError:
        return False
    if window_reversed(start, end):
        return False  # click says what is wrong (``io.window_ms``)
    write_stored_usage(request, zone, start, end, fmt, out)
    return True


class SessionsRequest(NamedTuple):
    """A ``sessions`` report, as its options name it (click's parameter names)."""

    db_path: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None
    all_sessions: bool = False
    fold: bool = True
    fmt: str | None = None
    as_json: bool = False
    csv_raw: bool = False
    no_cache: bool = False


_SESSIONS_FLAGS = {
    name: _USAGE_FLAGS[name]
    for name in ("--all", "--csv-raw", "--no-cache", "-j", "--json", "--fold", "--no-fold")
}
_SESSIONS_VALUES = {
    "--db": "db_path",
    "--since": "since",
    "--until": "until",
    "--limit": "limit",
    "--format": "fmt",
}
_SESSIONS_READ = {"fmt": _USAGE_READ["fmt"], "limit": _whole_from_one}


def sessions_request(argv: list[str]) -> SessionsRequest | None:
    """``argv`` (without the program name) as a ``sessions`` report in a format other than
    the table, or None: click's (another command, ``--help``, an unknown option, one given
    twice, a value missing, empty, looking like an option, not among the choices or, for
    ``--limit``, not a whole number from 1, options click refuses together)."""
    fields = _options_of(argv, "sessions", _SESSIONS_VALUES, _SESSIONS_FLAGS, _SESSIONS_READ)
    if fields is None:
        return None
    request = SessionsRequest(**fields)
    if request.as_json and request.fmt not in (None, "json"):
        return None
    return request


def write_stored_sessions(
    store: Any, fmt: str, out: Any, *, csv_raw: bool = False, cache: Any = None, **choices: Any
) -> None:
    """The ``sessions`` report of ``store`` in ``fmt`` (any but the table) to ``out``, kept in
    and answered from the report cache (``write_sessions``); ``choices`` are the report's."""
    import functools

    from ..reports.sessions import write_sessions

    form = f"{fmt}-raw" if fmt == "csv" and csv_raw else fmt
    render = functools.partial(_render_sessions, fmt=fmt, fold=choices["fold"], csv_raw=csv_raw)
    # JSON and JSON Lines are written as the summaries are made: never all held at once,
    # and saying where each lies, so that the next report copies those that did not change.
    from ..output import rows as formats

    listed = {"json": formats.JSON_LIST, "jsonl": formats.JSON_LINES}.get(fmt)
    each = listed is not None
    write_sessions(store, form, render, out, cache=cache, each=each, listed=listed, **choices)
    out.flush()


def _render_sessions(summaries: Any, *, fmt: str, fold: bool, csv_raw: bool) -> Any:
    """The ``sessions`` summaries as ``--format`` writes them (all but the table): their
    bytes, or pieces of them (JSON and JSON Lines, a thousand sessions at a time, taken
    as they come)."""
    from ..output import rows as formats
    from ..reports.sessions import SESSION_COLUMNS

    if fmt == "json":  # msgspec encodes the summaries as they are: no dicts in between
        return formats.json_list_pieces(summaries)
    if fmt == "jsonl":
        return formats.jsonl_pieces(summaries)
    if fmt == "markdown":
        return formats.sessions_markdown(summaries, fold=fold)
    return formats.write_csv(formats.to_builtins(summaries), SESSION_COLUMNS, raw=csv_raw)


def sessions_written(request: SessionsRequest) -> bool:
    """The ``sessions`` command for ``request``, written to stdout; False (nothing written,
    nothing read) when click is to say what is wrong (a time it cannot read) or to draw the
    table (no format, on a terminal)."""
    from ..core.timeutil import parse_since, parse_until, window_reversed
    from ..store.open import store_files
    from .streams import refuse_stdout_read, report_output

    out = report_output()
    fmt = _chosen_format(request.as_json, request.fmt, out)
    if fmt == "table":
        return False
    try:
        start = None if request.since is None else parse_since(request.since)
        end = None if request.until is None else parse_until(request.until)
    except ValueError:
        return False
    if window_reversed(start, end):
        return False  # click says what is wrong (``io.window_ms``)
    with open_store_noting(request.db_path) as store:
        refuse_stdout_read(store_files(store))
        write_stored_sessions(
            store,
            fmt,
            out,
            csv_raw=request.csv_raw,
            cache=report_cache(store, request.no_cache),
            since_ms=start,
            limit=request.limit,
            all_sessions=request.all_sessions,
            fold=request.fold,
            until_ms=end,
        )
    return True


def _chosen_format(as_json: bool, fmt: str | None, out: Any) -> str:
    """The format asked for (``-j`` is JSON), else a table on a terminal and JSON otherwise
    (``io.report_format``, once the request was found consistent)."""
    return "json" if as_json else fmt or ("table" if out.isatty() else "json")


def main() -> None:
    """The console script: a plain ``normalize``, ``statusline``, ``usage`` or ``sessions``
    here, anything else through click (and shell completion, which click answers when its
    variable is set)."""
    import os

    argv = sys.argv[1:]
    completing = _COMPLETE in os.environ
    request = None if completing else normalize_request(argv)
    glance = None if completing or request is not None else statusline_request(argv)
    report = None if completing or request or glance else usage_request(argv)
    listing = None if completing or request or glance or report else sessions_request(argv)
    if request is None and glance is None and report is None and listing is None:
        _click_main()
        return
    from .exits import guarded, prepare_process

    prepare_process()
    if request is not None:
        raise SystemExit(guarded(lambda: _interruptible(request)))
    printed: list[bool] = []
    if glance is not None:
        status = guarded(lambda: printed.append(_print_statusline(glance)))
    elif listing is not None:
        status = guarded(lambda: printed.append(_pipe_safe(sessions_written, listing)))
    else:
        status = guarded(lambda: printed.append(_pipe_safe(usage_written, report)))
    if printed == [False]:  # a value it refuses (or a table to draw): click's
        _click_main()
        return
    raise SystemExit(status)


def _pipe_safe(written: Any, request: Any) -> bool:
    """``written(request)``, a closed pipe said as click's commands say it (``pipe_safe``)."""
    from .streams import PipeClosed

    try:
        return written(request)
    except BrokenPipeError:
        raise PipeClosed() from None


def _click_main() -> None:
    from .main import main as click_main

    click_main()


_COMPLETE = "_OPENCODE_EVENTS_COMPLETE"  # click's shell completion for "opencode-events"


def _interruptible(request: NormalizeRequest) -> None:
    try:
        run_normalize(request)
    except (EOFError, KeyboardInterrupt):
        # As click does: a blank line closes the terminal's ``^C`` echo.
        from .exits import echo_error

        echo_error("")
        raise KeyboardInterrupt from None
