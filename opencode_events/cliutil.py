"""Shared pieces of the click commands: options, input/output opening, and the error and
closed-pipe conventions. Every command module (cli, live, context_cmd) imports from here,
so none has to import another."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

import click

from .errors import InputError

__all__ = [
    "PipeClosed",
    "pipe_safe",
    "open_inputs",
    "open_output",
    "format_for",
    "db_option",
    "selection_options",
    "since_ms",
    "open_store",
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


def open_inputs(paths: tuple[str, ...]) -> list[tuple[str, BinaryIO]]:
    """Open every input before anything is written, so a bad name fails cleanly."""
    opened: list[tuple[str, BinaryIO]] = []
    for path in paths or ("-",):
        if path == "-":
            # Unbuffered: read(n) returns what the pipe holds, so lines flow as they come.
            opened.append(("-", open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)))  # noqa: SIM115
            continue
        try:
            opened.append((path, open(path, "rb", buffering=0)))  # noqa: SIM115 - closed at exit
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return opened


def format_for(fmt: str | None, out: BinaryIO) -> str:
    """The output format: as asked, else pretty for a terminal and JSON Lines otherwise."""
    if fmt is not None:
        return fmt
    return "pretty" if out.isatty() else "jsonl"


def open_output(path: str | None) -> BinaryIO:
    if path is None or path == "-":
        return sys.stdout.buffer
    try:
        return open(path, "wb")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def db_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared option: which OpenCode database to read."""
    return click.option(
        "--db",
        "db_path",
        metavar="PATH",
        envvar=None,
        help="OpenCode's database (default: $OPENCODE_DB, else "
        "$XDG_DATA_HOME/opencode/opencode.db, else ~/.local/share/opencode/opencode.db).",
    )(command)


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Shared options choosing stored sessions."""
    for option in reversed(
        [
            click.option("--last", is_flag=True, help="The most recently active session."),
            click.option(
                "--since", metavar="WHEN", help="Sessions active since 2h, 7d, 2026-11-01…"
            ),
            click.option("--all", "all_sessions", is_flag=True, help="Every session."),
        ]
    ):
        command = option(command)
    return command


def since_ms(since: str | None) -> int | None:
    if since is None:
        return None
    from .timeutil import parse_since

    try:
        return parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None


def open_store(db_path: str | None) -> Any:
    from .store import open_store as open_db

    return open_db(db_path)
