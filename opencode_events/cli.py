"""The command line: the one place that owns stdin, stdout, stderr and exit codes.

Library modules raise ``InputError`` for input they cannot use; here it becomes one
``error: …`` line on stderr and exit 2. Ctrl-C exits 130 and a closed stdout pipe ends
quietly with 141 (as if by SIGPIPE), both without a traceback. Subcommands import what
they need when they run, so start-up stays small.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import click

from . import __version__
from .errors import InputError

EXIT_OK, EXIT_STRICT, EXIT_USAGE, EXIT_PIPE, EXIT_INTERRUPTED = 0, 1, 2, 141, 130


class _PipeClosed(Exception):
    """stdout's reader went away; raised past click, which would turn EPIPE into exit 1."""


def pipe_safe(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared decorator for commands that write data to stdout."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError:
            raise _PipeClosed() from None

    return wrapper


def _open_inputs(paths: tuple[str, ...]) -> list[tuple[str, BinaryIO]]:
    """Open every input before anything is written, so a bad name fails cleanly."""
    opened: list[tuple[str, BinaryIO]] = []
    for path in paths or ("-",):
        if path == "-":
            # Unbuffered: read(n) returns what the pipe holds, so lines flow as they come.
            opened.append(("-", open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)))
            continue
        try:
            opened.append((path, open(path, "rb", buffering=0)))
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return opened


def _format_for(fmt: str | None, out: BinaryIO) -> str:
    """The output format: as asked, else pretty for a terminal and JSON Lines otherwise."""
    if fmt is not None:
        return fmt
    return "pretty" if out.isatty() else "jsonl"


def _open_output(path: str | None) -> BinaryIO:
    if path is None or path == "-":
        return sys.stdout.buffer
    try:
        return open(path, "wb")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


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
) -> None:
    """Normalize `opencode run --format json` output to JSON Lines.

    INPUT is a file or - for stdin (the default). Events are written as each input line
    arrives; the last line is a metrics summary.
    """
    from .pipeline import normalize_streams
    from .writers import make_writer

    inputs_opened = _open_inputs(inputs)
    out = _open_output(output)
    writer = make_writer(_format_for(fmt, out), out, buffered=buffered)
    normalizer = normalize_streams(
        inputs_opened, writer, keep_raw=keep_raw, metrics=not no_metrics, deltas=deltas
    )
    if strict and normalizer.problems:
        raise SystemExit(EXIT_STRICT)


@cli.command()
@pipe_safe
def schema() -> None:
    """Print the JSON Schema of the normalized events."""
    import msgspec

    from .events import schema as event_schema

    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(event_schema())) + b"\n")


def _quiet_broken_pipe() -> None:
    # Point stdout at /dev/null so the interpreter's final flush cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def run(entry: Callable[..., Any], args: list[str] | None = None) -> int:
    """Run the click command and turn every way out into an exit code."""
    try:
        entry.main(args=args, prog_name="opencode-events", standalone_mode=False)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_USAGE
    except click.exceptions.Abort:
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (BrokenPipeError, _PipeClosed):
        _quiet_broken_pipe()
        return EXIT_PIPE
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    return EXIT_OK


def main() -> None:
    sys.exit(run(cli))
