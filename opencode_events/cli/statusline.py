"""``statusline``: the command-line end of ``reports.statusline`` (README "Status line").

Prints one line (the template filled in) and exits 0; an unusable database or session is
one ``error:`` line and exit 2, as everywhere. Nothing heavy is imported (no rich, no
mapping): a status bar starts this every few seconds.
"""

from __future__ import annotations

import sys

import click

from .io import db_option, pipe_safe, tz_option
from .quick import STATUSLINE_ESCAPES

__all__ = ["statusline"]


# reports.statusline.DEFAULT_FORMAT, written out: importing it here would cost every
# command's start-up (a test keeps the two equal).
FORMAT_HELP = (
    "The line's template (default '{state} {cost} | today {today} | ctx {context}'); "
    "the fields are below."
)


@click.command()
@db_option
@click.option("--session", "session_id", metavar="ID", help="This session (an id or a prefix).")
@click.option("--format", "template", metavar="TEMPLATE", help=FORMAT_HELP)
@click.option(
    "--for",
    "escape",
    type=click.Choice(STATUSLINE_ESCAPES),
    help="Escape the fields for what reads the line again: tmux's #() (# as ##), "
    "a zsh prompt (% as %%). A title is the model's text: it must not restyle the bar.",
)
@tz_option("Time zone of `today` (default: local time).")
@click.option("--at", "at", metavar="TIME", hidden=True, help="Take the clock to be TIME (tests).")
@pipe_safe
def statusline(
    db_path: str | None,
    session_id: str | None,
    template: str | None,
    tz: str | None,
    at: str | None,
    escape: str | None,
) -> None:
    """One short line for tmux, starship or a shell prompt: the current session's cost
    with its subagents, today's spend, the context size and busy/idle/stale.

    The current session is the top-level session at work now, or last (--session: that
    one). Fields of --format: {cost} {own_cost} {subagent_cost} {subagents} {today}
    {context} {context_tokens} {state} {session} {short_id} {title} {undone} {fork},
    with a format spec if you like ({title:.20}, {subagents:02d}, {context_tokens:,}).
    In tmux's status-right, use --for tmux: a title's # would be read as a style.
    """
    from .quick import Refused, StatuslineRequest, statusline_line

    request = StatuslineRequest(db_path, session_id, template, tz, at, escape)
    try:
        line = statusline_line(request)
    except Refused as exc:
        raise click.BadParameter(str(exc), param_hint=exc.param) from None
    out = sys.stdout.buffer
    out.write(line)
    out.flush()
