"""Every way out of a command as an exit code, without click (``cli.main`` adds click's own).

Library modules raise ``InputError`` for input they cannot use; here it becomes one
``error: …`` line on stderr and exit 2. Ctrl-C exits 130 and a closed stdout pipe ends
quietly with 141 (as if by SIGPIPE), both without a traceback.

    >>> from opencode_events.cli.exits import guarded
    >>> guarded(lambda: None)
    0
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from ..core.text import BIDI_FORMATTING
from ..errors import InputError, OutputError
from .status import ExitStatus
from .streams import PipeClosed, discard_stdout, whole_writes_stdout

__all__ = [
    "guarded",
    "echo_error",
    "one_line",
    "flush_or_discard_stdout",
    "prepare_process",
    "collect_cycles_seldom",
]


def echo_error(message: str, *, ours: bool = False) -> None:
    """``message`` as a line on stderr (as ``click.echo(message, err=True)`` writes it),
    its control characters escaped (``one_line``): a note may quote the data (a session
    id). ``ours``: text of our own alone (the help), written as it is, lines and all."""
    stream = sys.stderr
    if stream is None:
        return
    stream.write((message if ours else one_line(message)) + "\n")
    stream.flush()


def flush_or_discard_stdout() -> None:
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
    for code in [*range(32), *range(0x7F, 0xA0), 0x2028, 0x2029, *BIDI_FORMATTING]
    if code != 9
}


def one_line(message: str) -> str:
    return message.translate(_CONTROL)


def guarded(
    call: Callable[[], Any],
    *,
    more: tuple[type[BaseException], ...] = (),
    on_more: Callable[[Any], int] | None = None,
) -> int:
    """Run ``call`` and turn every way out into an exit code; exceptions of the types in
    ``more`` (click's, from ``cli.main``) are ``on_more``'s to answer."""
    try:
        call()
        # Here, not at exit: a reader gone before the last block is a closed pipe (141).
        sys.stdout.flush()
    except InputError as exc:
        echo_error(f"error: {one_line(str(exc))}")
        flush_or_discard_stdout()
        return ExitStatus.USAGE
    except KeyboardInterrupt:
        flush_or_discard_stdout()
        return ExitStatus.INTERRUPTED
    except more as exc:
        assert on_more is not None
        return on_more(exc)
    except (BrokenPipeError, PipeClosed):
        discard_stdout()
        return ExitStatus.BROKEN_PIPE
    except OSError as exc:  # e.g. the output's disk is full: one line, not a traceback
        reason = str(exc.strerror or exc)
        if isinstance(exc, OutputError):
            reason = f"cannot write {exc.filename}: {reason}"
        echo_error(f"error: {one_line(reason)}")
        flush_or_discard_stdout()
        return ExitStatus.USAGE
    except SystemExit as exc:  # SIGTERM (143), --strict (1)
        flush_or_discard_stdout()
        return exc.code if isinstance(exc.code, int) else ExitStatus.OK
    except MemoryError:
        # A memory cap, or a record larger than the memory there is: what was unwound is
        # free again, enough for one line.
        flush_or_discard_stdout()
        echo_error("error: out of memory (a memory limit, or an input record too large)")
        return ExitStatus.USAGE
    except Exception as exc:
        reason = _database_failure(exc)
        if reason is None:
            raise
        # A store error a reader did not turn into an InputError: still one line.
        echo_error(f"error: cannot read the database: {one_line(reason)}")
        flush_or_discard_stdout()
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


def prepare_process() -> None:
    """What the console script does before any command: stdout must be open, it takes
    whole writes, SIGTERM ends the process as Ctrl-C does, and the cycle collector runs
    less often (``collect_cycles_seldom``)."""
    if sys.stdout is None:  # started with stdout closed (`>&-`): every command writes there
        if sys.stderr is not None:
            sys.stderr.write("error: standard output is closed\n")
        sys.exit(ExitStatus.USAGE)
    whole_writes_stdout()
    _terminate_like_interrupt()
    collect_cycles_seldom()


GC_YOUNGEST = 50_000  # new container objects between two collections of the youngest


def collect_cycles_seldom() -> None:
    """Python's cycle collector set for a command's work, as mypy sets it for its own: a
    report builds hundreds of thousands of objects that refcounting frees (none in a
    cycle), and with the default threshold (700) the collector walked them again and
    again: 30 ms of a cold ``usage --all`` on the bench database, 6 % of the run. What
    is imported by now is set aside for good (``gc.freeze``): it lives as long as the
    process. Cycles are still collected, after 50,000 new objects instead of 700."""
    import gc

    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNGEST, middle, oldest)


def _terminate_like_interrupt() -> None:
    """SIGTERM (kill, a container stopping), SIGHUP and SIGQUIT end this process as Ctrl-C
    does: the stores close, a private copy of a database is removed, and the exit status
    says which signal (128 + 15 for SIGTERM). A forked worker keeps the default: it ends."""
    main_pid = os.getpid()

    def terminate(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    # A closed terminal (SIGHUP) and Ctrl-\\ (SIGQUIT) too, unless ignored (nohup): else a
    # private copy of the database is left behind in the temporary folder, and `top`
    # leaves the terminal in its own mode on the other screen (SIGQUIT dumped core).
    for stop in (signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(stop) is signal.SIG_DFL:
            signal.signal(stop, terminate)
