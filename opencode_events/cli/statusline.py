"""``statusline``: the command-line end of ``reports.statusline`` (README "Status line").

Prints one line (the template filled in) and exits 0; an unusable database or session is
one ``error:`` line and exit 2, as everywhere. Nothing heavy is imported (no rich, no
mapping): a status bar starts this every few seconds.
"""

from __future__ import annotations

import sys

import click

from .io import db_option, pipe_safe, tz_option

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
@tz_option("Time zone of `today` (default: local time).")
@click.option("--at", "at", metavar="TIME", hidden=True, help="Take the clock to be TIME (tests).")
@pipe_safe
def statusline(
    db_path: str | None,
    session_id: str | None,
    template: str | None,
    tz: str | None,
    at: str | None,
) -> None:
    """One short line for tmux, starship or a shell prompt: the current session's cost
    with its subagents, today's spend, the context size and busy/idle/stale.

    The current session is the top-level session at work now, or last (--session: that
    one). Fields of --format: {cost} {own_cost} {subagent_cost} {subagents} {today}
    {context} {context_tokens} {state} {session} {short_id} {title}.
    """
    from ..core.timeutil import parse_since
    from ..reports.statusline import DEFAULT_FORMAT, check_format, render, take_glance
    from ..store.open import open_store, select_sessions
    from .io import time_zone

    template = DEFAULT_FORMAT if template is None else template
    try:
        check_format(template)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    zone = time_zone(tz)
    now_ms = None
    if at is not None:
        try:
            now_ms = parse_since(at, tz=zone)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--at") from None
    # No notes on a status line, and no old JSON files: they hold no live session.
    with open_store(db_path, legacy=False) as store:
        chosen = select_sessions(store, (session_id,)) if session_id is not None else [None]
        glance = take_glance(store, chosen[0], now_ms=now_ms, tz=zone)
    try:
        line = render(template, glance)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    out = sys.stdout.buffer
    out.write(line.encode("utf-8", "replace") + b"\n")
    out.flush()
