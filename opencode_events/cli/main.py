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
    discard_stdout,
    whole_writes_stdout,
)
from .status import ExitStatus


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="opencode-events")
def cli() -> None:
    """Normalize what OpenCode writes into one lossless event stream."""


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


# Each command group is a module of its own, registered once the group exists.
from .events import import_, normalize, schema  # noqa: E402
from .reports import sessions, usage  # noqa: E402

cli.add_command(normalize)
cli.add_command(import_, name="import")
cli.add_command(sessions)
cli.add_command(usage)
cli.add_command(schema)

from .live import attach, run_opencode  # noqa: E402

cli.add_command(attach)
cli.add_command(run_opencode, name="run")

from .context import context  # noqa: E402

cli.add_command(context)

from .statusline import statusline  # noqa: E402

cli.add_command(statusline)

from .top import top  # noqa: E402

cli.add_command(top)

from .otel import otel  # noqa: E402

cli.add_command(otel)
