"""The command line: the click group, and the one place that owns stdin, stdout, stderr and
exit codes (``exits`` turns every way out into one; click's own are answered here).

Subcommands import what they need when they run, so start-up stays small; the console
script runs a plain ``normalize`` without click at all (``cli.quick``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._version import __version__
from .exits import echo_error, flush_or_discard_stdout, guarded, one_line, prepare_process
from .status import ExitStatus


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="opencode-events")
def cli() -> None:
    """Normalize what OpenCode writes into one lossless event stream."""


# click 8.2 and later: the program run without a command (8.1 prints the help, exit 0).
_NO_COMMAND: Any = getattr(click.exceptions, "NoArgsIsHelpError", None)
_CLICK_ERRORS = (
    click.exceptions.Abort,
    *([_NO_COMMAND] if _NO_COMMAND is not None else []),
    click.exceptions.ClickException,
    click.exceptions.Exit,
)


def _click_status(exc: Any) -> int:
    if isinstance(exc, click.exceptions.Abort):  # Ctrl-C at a prompt
        flush_or_discard_stdout()
        return ExitStatus.INTERRUPTED
    if _NO_COMMAND is not None and isinstance(exc, _NO_COMMAND):  # no command: the help
        echo_error(exc.format_message(), ours=True)
        return exc.exit_code
    if isinstance(exc, click.exceptions.ClickException):
        # One line, like every other error; `--help` shows the usage.
        message = exc.format_message()
        if isinstance(exc, click.exceptions.UsageError) and exc.ctx is not None:
            message += f" (see: {exc.ctx.command_path} --help)"
        echo_error(f"error: {one_line(message)}")
        return exc.exit_code
    return exc.exit_code  # click.exceptions.Exit


def run(entry: Callable[..., Any], args: list[str] | None = None) -> int:
    """Run the click command and turn every way out into an exit code."""
    return guarded(
        lambda: entry.main(args=args, prog_name="opencode-events", standalone_mode=False),
        more=_CLICK_ERRORS,
        on_more=_click_status,
    )


def main() -> None:
    prepare_process()
    raise SystemExit(run(cli))


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
