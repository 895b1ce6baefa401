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


def _a_number(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``value``, unless it is NaN (which every range takes: no comparison is true)."""
    if value != value:
        raise click.BadParameter(f"{value} is not a number of seconds", ctx=ctx, param=param)
    return value


@click.command()
@db_option
@click.option(
    "--interval",
    # at most a day: select() takes no longer wait (inf was a traceback), nor NaN
    type=click.FloatRange(min=0.1, max=86_400.0),
    callback=_a_number,
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

    with _keys() as keys, _ctrl_z_noted(keys):
        screen = FullScreen(sys.stdout)
        try:
            while True:
                now = time.time() * 1000
                board.refresh(now)
                width, height = screen.size
                board.limit = max(1, height - 4)
                screen.show(top_screen(board.board(), now, width=width, height=height))
                typed = keys.pressed(interval)
                if "q" in typed:
                    return
                if CTRL_Z in typed:  # the terminal given back first, as `less` does
                    screen.close()
                    keys.restore()
                    _yield_terminal()  # stopped here until `fg`
                    keys.again()
                    keys.forget_ctrl_z()
                    screen = FullScreen(sys.stdout)
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


CTRL_Z = "\x1a"  # what ``_Keys.pressed`` returns for a SIGTSTP noted meanwhile


class _Keys:
    """Keys as they are pressed (no Enter needed): ``pressed(timeout)`` waits up to
    ``timeout`` seconds and returns what was typed (``CTRL_Z`` for a ``note_ctrl_z`` made
    meanwhile); ``restore`` gives the terminal its mode back, ``again`` takes keys as
    pressed once more (after a Ctrl-Z and `fg`)."""

    def __init__(self) -> None:
        import termios

        self.fd = sys.stdin.fileno()
        self.saved = termios.tcgetattr(self.fd)
        # Woken by a signal through a pipe: a handler that drew or wrote itself could
        # cut into a write to stdout under way (a reentrant write is an error).
        self._woken, self._wake = os.pipe()
        try:
            os.set_blocking(self._wake, False)
            os.set_blocking(self._woken, False)
            self.again()
        except BaseException:  # a terminal that refuses cbreak: no pipe left open
            self.close()
            raise

    def again(self) -> None:
        import tty

        tty.setcbreak(self.fd)

    def restore(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def close(self) -> None:
        os.close(self._woken)
        os.close(self._wake)

    def note_ctrl_z(self, _signum: int = 0, _frame: object = None) -> None:
        with contextlib.suppress(OSError):  # full: one is noted already
            os.write(self._wake, b"z")

    def forget_ctrl_z(self) -> None:
        """Drop a Ctrl-Z noted while the last one was being answered (a second press
        before the stop): `fg` must bring the board back, not stop it again at once."""
        with contextlib.suppress(BlockingIOError):
            os.read(self._woken, 64)

    def pressed(self, timeout: float) -> str:
        ready, _, _ = select.select([self.fd, self._woken], [], [], timeout)
        typed = ""
        if self._woken in ready:
            self.forget_ctrl_z()
            typed = CTRL_Z
        if self.fd in ready:
            typed += os.read(self.fd, 64).decode("utf-8", "replace").lower()
        return typed


@contextlib.contextmanager
def _keys() -> Iterator[_Keys]:
    """``_Keys`` for the time of the block; the terminal's mode is put back after it."""
    keys = _Keys()
    try:
        yield keys
    finally:
        keys.restore()
        keys.close()


@contextlib.contextmanager
def _ctrl_z_noted(keys: _Keys) -> Iterator[None]:
    """Ctrl-Z (SIGTSTP) noted for ``keys.pressed`` for the time of the block, where the
    loop gives the terminal back (its own screen, the cursor, its mode) before stopping:
    stopped as it was, the shell's prompt came up on `top`'s screen, the cursor hidden.
    Where there is no SIGTSTP, nothing."""
    import signal

    number = getattr(signal, "SIGTSTP", None)
    if number is None or signal.getsignal(number) is signal.SIG_IGN:
        yield  # ignored when top started (no job control asked for it): left so, as less does
        return
    before = signal.signal(number, keys.note_ctrl_z)
    try:
        yield
    finally:
        signal.signal(number, before)


def _yield_terminal() -> None:
    """Stop this process as Ctrl-Z would have (SIGTSTP, its default action), until it is
    continued (`fg`, SIGCONT); where its process group is orphaned (no shell with job
    control to continue it), the kernel drops the signal and this returns at once."""
    import signal

    handler = signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    try:
        os.kill(os.getpid(), signal.SIGTSTP)
    finally:
        signal.signal(signal.SIGTSTP, handler)
