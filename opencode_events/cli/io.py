"""Shared pieces of the click commands: options, input/output opening, and the error and
closed-pipe conventions. Every command module (cli, live, context_cmd) imports from here,
so none has to import another."""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import click

from ..errors import InputError, OutputError

__all__ = [
    "PipeClosed",
    "pipe_safe",
    "open_inputs",
    "open_output",
    "refuse_stdout_read",
    "format_for",
    "db_option",
    "selection_options",
    "since_ms",
    "open_store",
    "report_output",
    "csv_raw_option",
    "time_zone",
    "otel_destination",
    "report_otel",
    "LiveOtel",
]


class PipeClosed(Exception):
    """stdout's reader went away; raised past click, which would turn EPIPE into exit 1."""


def pipe_safe(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared decorator for commands that write data to stdout."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:
            raise PipeClosed() from None

    return wrapper


@contextlib.contextmanager
def written_when_interrupted(writer: Any) -> Iterator[Any]:
    """Ctrl-C or SIGTERM: what was mapped is written, and a terminal's live footer goes
    away now, before click's closing newline moves the cursor off it (it would stay)."""
    try:
        yield writer
    except (KeyboardInterrupt, SystemExit) as first:
        try:
            with contextlib.suppress(OSError):
                writer.flush()
        except (KeyboardInterrupt, SystemExit):
            # Interrupted again while writing (a reader that stopped reading): stop now.
            discard_stdout()
        raise first


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is still
    buffered for it can neither fail (a closed pipe) nor wait (a reader that stopped)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def open_inputs(paths: tuple[str, ...]) -> list[tuple[str, BinaryIO]]:
    """Open every input before anything is written, so a bad name fails cleanly."""
    opened: list[tuple[str, BinaryIO]] = []
    for path in paths or ("-",):
        if path == "-":
            if sys.stdin is None:  # started with stdin closed (`<&-`)
                raise InputError("standard input is closed")
            # Unbuffered: read(n) returns what the pipe holds, so lines flow as they come.
            stdin = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
            opened.append(("-", InputFile(stdin, "standard input")))
            continue
        try:
            opened.append((path, InputFile(open(path, "rb", buffering=0), path)))  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return opened


class InputFile:
    """An input opened unbuffered, whose ``read`` waits for data and names the file when it
    fails. A pipe whose reader was set non-blocking (by whoever shares it) returns None when
    nothing is waiting: that is no end of input, so wait until there is something to read.
    A read error (EIO) is one ``error: cannot read NAME: …``, not a bare errno message."""

    def __init__(self, raw: Any, name: str) -> None:
        self._raw, self.name = raw, name

    def read(self, size: int = -1) -> bytes:
        while True:
            try:
                chunk = self._raw.read(size)
            except BlockingIOError:
                chunk = None
            except OSError as exc:
                raise InputError(f"cannot read {self.name}: {exc.strerror or exc}") from None
            if chunk is not None:
                return chunk
            select.select([self._raw], [], [])

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()


def format_for(fmt: str | None, out: BinaryIO) -> str:
    """The output format: as asked, else pretty for a terminal and JSON Lines otherwise."""
    if fmt is not None:
        return fmt
    return "pretty" if out.isatty() else "jsonl"


class WholeWrites(io.RawIOBase):
    """A file descriptor that takes every byte it is given or raises.

    Python's ``BufferedWriter`` passes a large block straight to the raw file and returns
    after a partial write without an error: a reader that went away in the middle of the
    block (``| head``) or a disk that filled up would cut the output short unnoticed, and
    the command would exit 0. Here the next write raises (``BrokenPipeError``, ``ENOSPC``)."""

    def __init__(self, fd: int, *, closefd: bool = True, name: str | None = None) -> None:
        super().__init__()
        self._fd, self._closefd = fd, closefd
        self._name = name  # a file the user named (-o): errors name it

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:  # a non-blocking descriptor that is full: wait, go on
                select.select([], [self._fd], [])
                continue
            except BrokenPipeError:
                raise
            except OSError as exc:
                if self._name is None:
                    raise
                raise OutputError(exc.errno, exc.strerror, self._name) from None
            if written == 0:  # never for a pipe or a file; never loop on it
                raise OutputError(errno.EIO, "nothing could be written", self._name)
            view = view[written:]
        return total

    def close(self) -> None:
        if not self.closed and self._closefd:
            os.close(self._fd)
        super().close()


def whole_writes_stdout() -> None:
    """Put ``sys.stdout`` over ``WholeWrites`` (the console script does, before any output),
    where stdout is a plain POSIX file descriptor; anything else is left as it is."""
    old = sys.stdout
    if os.name != "posix" or not hasattr(old, "buffer"):
        return
    try:
        fd = old.fileno()
    except (AttributeError, OSError, ValueError):
        return
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(WholeWrites(fd, closefd=False)),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
        write_through=old.write_through,  # python -u, PYTHONUNBUFFERED
    )


def _descriptor_is(fd: int, target: os.stat_result) -> bool:
    """Whether the open descriptor ``fd`` is the file ``target`` (a redirection to it)."""
    try:
        source = os.fstat(fd)
    except OSError:
        return False
    return (source.st_dev, source.st_ino) == (target.st_dev, target.st_ino)


def _is_read(path: str, reads: Sequence[Any]) -> str | None:
    """The input ``path`` would overwrite (the same file, or the same name though it does
    not exist yet, or a file inside an input folder), if any."""
    try:
        target = os.stat(path)
    except OSError:
        target = None
    if target is not None and not stat.S_ISREG(target.st_mode):
        return None  # a terminal, a pipe, /dev/null: opening it empties nothing
    real = os.path.realpath(path)
    for read in reads:
        if read == "-":  # stdin redirected from a file (`< run.jsonl`)
            if target is not None and _descriptor_is(0, target):
                return "standard input"
            continue
        read = os.fspath(read)
        if os.path.isdir(read):
            if real.startswith(os.path.realpath(read).rstrip(os.sep) + os.sep):
                return read
            continue
        if real == os.path.realpath(read):  # a -wal or -journal SQLite would take as its own
            return read
        try:
            source = os.stat(read)
        except OSError:
            continue
        if target is not None and (target.st_dev, target.st_ino) == (source.st_dev, source.st_ino):
            return read  # a hard link, a bind mount
    return None


def same_file(first: str, second: str) -> bool:
    """Whether two paths name one regular file (the same name, or a link to it), existing
    or not yet; a terminal or /dev/null named twice is not a clash."""
    try:
        one = os.stat(first)
    except OSError:
        one = None
    if one is not None and not stat.S_ISREG(one.st_mode):
        return False
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        other = os.stat(second)
    except OSError:
        return False
    return one is not None and (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def stdout_is(path: str) -> bool:
    """Whether standard output is redirected to the regular file ``path`` (``> path``)."""
    try:
        target = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(target.st_mode) and _descriptor_is(1, target)


def refuse_stdout_read(reads: Sequence[Any]) -> None:
    """Stdout redirected to a file being read (``>> run.jsonl``, ``> opencode.db``): the
    output would be read again without end, or change the database; refused."""
    try:
        target = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return
    if not stat.S_ISREG(target.st_mode):
        return  # a terminal, a pipe, /dev/null
    where = _descriptor_path(1)
    for read in reads:
        if read == "-":
            if _descriptor_is(0, target):
                raise InputError("will not write to standard output: it is standard input")
            continue
        read = os.fspath(read)
        if os.path.isdir(read):
            folder = os.path.realpath(read).rstrip(os.sep) + os.sep
            if where is not None and where.startswith(folder):
                raise InputError(f"will not write to standard output: it is inside {read}")
            continue
        try:
            source = os.stat(read)
        except OSError:
            continue
        if (target.st_dev, target.st_ino) == (source.st_dev, source.st_ino):
            raise InputError(f"will not write to standard output: it is {read}, being read")


def _descriptor_path(fd: int) -> str | None:
    """The path a descriptor was opened with, where the system tells it (Linux)."""
    try:
        return os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def open_output(path: str | None, reads: Sequence[Any] = ()) -> BinaryIO:
    """The output: stdout, or the file ``path``, which must not be one of the files (or
    inside one of the folders) being read: opening it would empty it first."""
    if path is None or path == "-":
        refuse_stdout_read(reads)
        return sys.stdout.buffer
    clash = _is_read(path, reads)
    if clash is not None:
        raise InputError(f"will not write to {path}: it is being read ({clash})")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return io.BufferedWriter(WholeWrites(fd, name=path))


def report_output() -> Any:
    """Standard output for a report: on a terminal, control characters in any format are
    shown as their pictures (``output.rows.TerminalText``), never obeyed."""
    out = sys.stdout.buffer
    if out.isatty():
        from ..output.rows import TerminalText

        return TerminalText(out)
    return out


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
    if since is None:
        return None
    from ..core.timeutil import parse_since

    try:
        return parse_since(since, tz=tz)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None


def open_store(db_path: str | None) -> Any:
    from ..store.open import open_store as open_db

    return open_db(db_path)


def _parse_tags(ctx: Any, param: Any, values: tuple[str, ...]) -> dict[str, str] | None:
    tags: dict[str, str] = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx=ctx, param=param)
        tags[key.strip()] = text
    return tags or None


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


def report_cache(store: Any, no_cache: bool) -> Any:
    """The report cache of ``store`` (None with ``--no-cache`` or
    ``OPENCODE_EVENTS_NO_CACHE=1``, or for a store that is not a database)."""
    from ..paths import report_cache_dir
    from ..reports.cache import ReportCache

    root = report_cache_dir()
    if no_cache or root is None:
        return None
    return ReportCache.open(store, root=root)


def full_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: the pretty view shows messages whole (else 12 lines and a count)."""
    return click.option(
        "--full",
        is_flag=True,
        help="Pretty view: show long messages whole (default: their first 12 lines).",
    )(command)


def time_zone(name: str | None) -> Any:
    """``--tz ZONE`` as a ``tzinfo`` (None: local time); an unknown zone is a usage error."""
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"unknown time zone {name!r}", param_hint="--tz") from None


# ------------------------------------------------------------------------ OpenTelemetry


def otel_destination(
    output: str | None,
    endpoint: str | None,
    headers: Sequence[str] = (),
    compression: str | None = None,
    retries: int = 5,
    reads: Sequence[Any] = (),
    env: Any = None,
) -> Any:
    """Where ``otel`` (and ``--otel``) send bodies: JSON Lines to ``-o FILE`` (``-`` is
    stdout), else OTLP/HTTP to ``endpoint`` or the environment's, else JSON Lines to stdout."""
    from ..otel.export import FileDestination, HttpDestination
    from ..paths import otlp_environment

    env = otlp_environment() if env is None else env
    if output is not None or not (
        endpoint or env.endpoint or env.traces_endpoint or env.metrics_endpoint
    ):
        return FileDestination(open_output(output, reads=reads))
    return HttpDestination(endpoint, headers, compression=compression, retries=retries, env=env)


def report_otel(summary: Any, destination: Any) -> None:
    """The backend's notes (partial successes), and for a backend what it was sent."""
    for note in summary.partial:
        click.echo(f"warning: {note}", err=True)
    if destination.where is not None:
        click.echo(
            f"otel: {summary.sessions} sessions, {summary.spans} spans "
            f"in {summary.bodies} requests to {destination.where}",
            err=True,
        )


class LiveOtel:
    """``--otel DEST`` of ``attach`` and ``run``: the events also gathered into spans, and
    sent when the run ends to DEST, an OTLP/HTTP base URL or a JSON Lines file (opened now,
    so a bad one fails before anything starts)."""

    def __init__(self, dest: str, *, events_to: str | None) -> None:
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
            self.destination = otel_destination(dest, None)
        self.collector = SpanCollector(TraceBuilder(mcp_servers=mcp_server_names))

    def normalizer(self, *, keep_raw: bool = False) -> Any:
        return self.collector.normalizer(keep_raw=keep_raw)

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
