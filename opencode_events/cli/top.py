"""``top``: the command-line end of ``reports.top`` (docs/live.md "top").

Owns the terminal: the alternate screen (``output.pretty.FullScreen``), keys read one at a
time (``q`` quits, as does Ctrl-C), a redraw every ``--interval`` seconds (the clock and the
running times tick) and a look at the store at each tick that costs two ``stat`` calls while
nothing changes. Off a terminal (or on a dumb one), ``--once`` prints one screen and exits;
a store it cannot read is then an error (exit 2), as for every report, where the live view
waits for it.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator

import click

from ..errors import InputError
from .io import db_option, time_zone, tz_option

__all__ = ["top"]


@click.command()
@db_option
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Redraw (and look at the store) this often.",
)
@tz_option("Time zone of today and this week (default: local).")
@click.option("--once", is_flag=True, help="Print one screen and exit (for a pipe or a test).")
def top(db_path: str | None, interval: float, tz: str | None, once: bool) -> None:
    """A live, full-screen view of the sessions at work now and recently: state, what a
    busy one runs and for how long, turns, tokens, context, cost with subagents; today's
    and this week's spend at the top. q quits."""
    from ..output.tables import top_screen
    from ..reports.top import TopBoard
    from .follow import follow_path

    zone = time_zone(tz)
    path = follow_path(db_path)
    width, height = _terminal_size()
    board = TopBoard(path, limit=max(1, height - 4), tz=zone)
    if once or not (sys.stdin.isatty() and sys.stdout.isatty()) or _dumb_terminal():
        board.refresh(force=True)  # one look: the store is opened whatever the watch says
        if not board.readable:
            raise InputError(board.problem or f"cannot read {path}")
        _print_once(top_screen(board.board(), time.time() * 1000, width=width, live=False))
        return
    from ..output.pretty import FullScreen

    with _keys() as pressed:
        screen = FullScreen(sys.stdout)
        try:
            while True:
                now = time.time() * 1000
                board.refresh(now)
                width, height = screen.size
                board.limit = max(1, height - 4)
                screen.show(top_screen(board.board(), now, width=width, height=height))
                if "q" in pressed(interval):
                    return
        finally:
            screen.close()


def _print_once(renderable: object) -> None:
    from ..output.tables import print_renderable

    print_renderable(renderable, out=sys.stdout)


def _dumb_terminal() -> bool:
    """A terminal that cannot move its cursor (``TERM=dumb``: Emacs' shell, some CI
    logs): rich draws nothing of a full screen there until it ends, so it gets one screen
    printed, as a pipe does."""
    return os.environ.get("TERM", "").lower() in ("dumb", "unknown")  # rich's own test


def _terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return size.columns, size.lines
    except (OSError, ValueError):
        return 80, 24


@contextlib.contextmanager
def _keys() -> Iterator[object]:
    """Keys as they are pressed (no Enter needed): ``pressed(timeout)`` waits up to
    ``timeout`` seconds and returns what was typed. The terminal's mode is put back."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def pressed(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 64).decode("utf-8", "replace").lower() if ready else ""

    try:
        yield pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
