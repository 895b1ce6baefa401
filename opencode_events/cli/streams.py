"""Standard input and output for the commands, without click: the inputs opened before
anything is written, the output (never a file being read), whole writes, and the
closed-pipe convention. ``cli.io`` re-exports all of it beside the shared click options;
the quick ``normalize`` path (``cli.quick``) imports this module alone.

    >>> from opencode_events.cli.streams import format_for
    >>> import io
    >>> format_for(None, io.BytesIO())
    'jsonl'
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import select
import signal
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

from ..errors import InputError, OutputError

__all__ = [
    "PipeClosed",
    "pipe_safe",
    "written_when_interrupted",
    "discard_stdout",
    "open_inputs",
    "InputFile",
    "format_for",
    "WholeWrites",
    "whole_writes_stdout",
    "same_file",
    "stdout_is",
    "refuse_stdout_read",
    "open_output",
    "report_output",
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


# The signals whose handlers raise (Ctrl-C, and SIGTERM: cli.exits); held during a write.
_STOPS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
_PAGE = 4096  # a pipe's slot; a pipe select() calls writable has one free at least


class WholeWrites(io.RawIOBase):
    """A file descriptor that takes every byte it is given or raises.

    Python's ``BufferedWriter`` passes a large block straight to the raw file and returns
    after a partial write without an error: a reader that went away in the middle of the
    block (``| head``) or a disk that filled up would cut the output short unnoticed, and
    the command would exit 0. Here the next write raises (``BrokenPipeError``, ``ENOSPC``).

    And each byte goes out once. A Ctrl-C (or SIGTERM) whose handler raised just as
    ``os.write`` returned lost the count of what it wrote; ``BufferedWriter`` kept the block
    and the exit's flush wrote it all again (events twice, behind a slow reader). So the
    signals are held while a write runs, and a write never blocks while they are: it waits
    for room first (interruptibly), then writes what fits (a pipe's free pages, found with
    ``FIONREAD``; a terminal or socket a page at a time; a file or a device such as
    /dev/null, which never waits on a reader, whole). What went out of a block before an
    exception is remembered, and skipped when ``BufferedWriter`` hands the block back."""

    def __init__(self, fd: int, *, closefd: bool = True, name: str | None = None) -> None:
        super().__init__()
        self._fd, self._closefd = fd, closefd
        self._name = name  # a file the user named (-o): errors name it
        self._cut = b""  # what went out of a block before an exception cut its write short
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            mode = 0
        # A file or /dev/null never blocks for long: written whole. What may wait on a
        # reader (a pipe, a socket, a terminal), by room.
        self._waits = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self._pipe_pages = _pipe_pages(fd) if stat.S_ISFIFO(mode) else 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: Any) -> int:
        whole = memoryview(data).cast("B")
        total = len(whole)
        view = whole
        cut, self._cut = self._cut, b""
        if cut and whole[: len(cut)] == cut:  # the block a write cut short, handed back
            view = whole[len(cut) :]
        try:
            while view:
                size = self._room(len(view)) if self._waits else len(view)
                held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
                try:
                    written = os.write(self._fd, view[:size])
                    view = view[written:]
                except BlockingIOError:  # a non-blocking descriptor that is full: go on
                    written = -1
                except BrokenPipeError:
                    raise
                except OSError as exc:
                    if self._name is None:
                        raise
                    self.failed = True  # said once: the close at exit drops the rest
                    raise OutputError(exc.errno, exc.strerror, self._name) from None
                finally:  # a signal that came meanwhile is handled here, the count kept
                    signal.pthread_sigmask(signal.SIG_SETMASK, held)
                if written == 0:  # never for a pipe or a file; never loop on it
                    raise OutputError(errno.EIO, "nothing could be written", self._name)
                if written < 0 and not self._waits:  # (``_room`` waits for the others)
                    select.select([], [self._fd], [])
        except BaseException:
            self._cut = bytes(whole[: total - len(view)])
            raise
        return total

    def _room(self, wanted: int) -> int:
        """How much of ``wanted`` bytes can be written without blocking, once there is room
        (waited for with the signals free: Ctrl-C ends a wait on a reader that stopped)."""
        select.select([], [self._fd], [])
        if not self._pipe_pages:
            return min(wanted, _PAGE)
        import fcntl  # here: only a pipe's writer needs them (start-up time)
        import struct
        import termios

        try:
            queued = struct.unpack("i", fcntl.ioctl(self._fd, termios.FIONREAD, b"\0" * 4))[0]
        except OSError:
            return min(wanted, _PAGE)
        # the unread bytes hold their pages, and one more may be partly used
        free = self._pipe_pages - (queued + _PAGE - 1) // _PAGE - 1
        return min(wanted, max(free, 1) * _PAGE)

    def close(self) -> None:
        if not self.closed and self._closefd:
            os.close(self._fd)
        super().close()


def _pipe_pages(fd: int) -> int:
    """A pipe's capacity in pages (Linux ``F_GETPIPE_SZ``), 0 where it cannot be told."""
    import fcntl

    try:
        return fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)) // _PAGE
    except OSError:
        return 0


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
    return _Output(WholeWrites(fd, name=path))


class _Output(io.BufferedWriter):
    """``-o``'s file: once a write failed (the error already reported), the flush of its
    close (at exit, or when collected) drops what is left instead of raising again."""

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            if not getattr(self.raw, "failed", False):
                raise


def report_output() -> Any:
    """Standard output for a report: on a terminal, control characters in any format are
    shown as their pictures (``output.rows.TerminalText``), never obeyed."""
    out = sys.stdout.buffer
    if out.isatty():
        from ..output.rows import TerminalText

        return TerminalText(out)
    return out
